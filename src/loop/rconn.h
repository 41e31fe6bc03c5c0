/* rconn.h -- a blocking RESP client for chashd's own threads (the
 * migration's copiers and probes, the replication's repairer): every
 * wait bounded by socket timeouts, never used on a worker.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_RCONN_H
#define CHASHD_RCONN_H

#include <stddef.h>
#include <stdint.h>

struct conf_addr;

/* One parsed reply. */
struct rval {
    char type; /* + - : $ * ; 0 for a nil */
    long long i;
    char *s;
    size_t len;
    struct rval *el;
    size_t n;
};

/* A connection: its socket (-1 when closed) and its buffers. */
struct rconn {
    int fd;
    char *in;
    size_t len, cap;
    char *out;
    size_t olen, ocap;
    size_t skip; /* bytes of <in> a line read left to drop */
};

void rval_free(struct rval *v);

void rc_close(struct rconn *c);
/* Close and free the buffers. */
void rc_free(struct rconn *c);
/* Queue <n> raw bytes. 0 or -1 (out of memory). */
int rc_put(struct rconn *c, const void *p, size_t n);
/* Queue one command of <argc> arguments (<lens> NULL: C strings). */
int rc_cmd(struct rconn *c, int argc, const char *const *argv,
           const size_t *lens);
/* Send what is queued. 0 or -1. */
int rc_flush(struct rconn *c);
/* Read one reply into <v> (the caller frees it). 0, or -1 (the
 * connection is unusable: closed, timed out, malformed). */
int rc_reply(struct rconn *c, struct rval *v);
/* Send the queued commands and read one reply. */
int rc_call(struct rconn *c, struct rval *v);
/* Read one line (through its LF) of a text protocol: *<line> points into
 * the connection's buffer until the next call, <len> with its CRLF. 0 or
 * -1. */
int rc_line(struct rconn *c, const char **line, size_t *len);
/* Read exactly <n> bytes into <out>. 0 or -1. */
int rc_bytes(struct rconn *c, char *out, size_t n);
/*
 * Connect to <a> (at most <timeout_ms> for the connect, and that plus
 * two seconds for any later read or write), AUTH and SELECT (<auth>
 * NULL, <db> 0: neither; <db> < 0: neither, for memcached). 0, or -1
 * with a reason in <err>.
 */
int rc_open(struct rconn *c, const struct conf_addr *a, uint32_t timeout_ms,
            const char *auth, int db, char *err, size_t errlen);

#endif /* CHASHD_RCONN_H */

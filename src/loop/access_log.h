/* access_log.h -- a pool's access log: one line per tcp connection (at its
 * close) or per http request (at its response's end), in text (like
 * HAProxy's and nginx's) or JSON, to a file or to syslog(3).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ACCESS_LOG_H
#define CHASHD_ACCESS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Where a field taken from the network or the config is cut (bytes, before
 * escaping): a line has a bounded size, formatted on the stack. A cut
 * target ends in "..." (and JSON says "target_truncated": true); the
 * other fields are cut silently (no config or parser gives longer ones).
 */
#define ACCESS_TARGET_MAX 1024
#define ACCESS_NAME_MAX 256 /* pool, member, member address, key, error */
#define ACCESS_METHOD_MAX 32
#define ACCESS_VERSION_MAX 16

/* The longest line: every field at its bound, escaped at 6 bytes a byte
 * (JSON's \u00XX), plus the keys, numbers and punctuation. */
#define ACCESS_LINE_MAX                                                        \
    (6 * (ACCESS_TARGET_MAX + 5 * ACCESS_NAME_MAX + ACCESS_METHOD_MAX +        \
          ACCESS_VERSION_MAX) +                                                \
     512)

/* No routing decision was made (a connection closed before one). */
#define ACCESS_NO_ROUTING (-1)

/*
 * One line's fields. Strings are borrowed for the call. <method> NULL makes
 * a tcp line; set, the http fields follow. The routing names come from
 * pool.h's enum stats_decision: first, spilled, failed_over, refused,
 * no_member.
 */
struct access_entry {
    uint64_t time_ms;              /* CLOCK_REALTIME, ms since the epoch;
                                      0: now */
    const char *pool;              /* the pool's name */
    const struct sockaddr *client; /* the client (the PROXY header's when
                                      one was taken); NULL: "-" */
    socklen_t client_len;
    const char *member;      /* the member's name, NULL: none */
    const char *member_addr; /* its address as configured, NULL: none */
    int routing;             /* enum stats_decision, or ACCESS_NO_ROUTING */
    uint32_t retries;        /* connects tried after the first */
    uint64_t duration_ms;    /* accept (tcp) or request start (http) to end */
    uint64_t bytes_in;       /* read from the client */
    uint64_t bytes_out;      /* written to the client */
    /* http: as received, any bytes (escaped here) */
    const char *method;
    size_t method_len;
    const char *target; /* the request-target, cut at ACCESS_TARGET_MAX */
    size_t target_len;
    const char *version; /* "HTTP/1.1" */
    size_t version_len;
    int status;             /* the status sent to the client, 0: none */
    const char *key_source; /* the hash_key link used: "cookie:session",
                               "source_ip"; NULL: "-" */
    const char *error;      /* why, when chashd wrote the response itself
                               ("502 member reset"); NULL: the member's */
};

/*
 * A log sink, shared by the pool and every snapshot of it (refcounted:
 * the last unref closes it, on whatever thread drops it).
 */
struct access_log;

/*
 * Open <where>: "syslog" (syslog(3), facility daemon, priority info; the
 * ident is the daemon log's when it goes to syslog too, else the
 * program's name) or an absolute file path (opened O_APPEND, created
 * 0644). <format>: enum conf_log_format (text or json). NULL with
 * "cannot open PATH: why" in <err> (of <errlen> bytes).
 */
struct access_log *access_log_open(const char *where, int format, char *err,
                                   size_t errlen);

/* The file <where> could be opened for appending (created when missing,
 * as access_log_open would); "syslog" always can. 0, or -1 and <err>. */
int access_log_check(const char *where, char *err, size_t errlen);

/* References (any thread). NULL is a no-op. */
void access_log_ref(struct access_log *l);
void access_log_unref(struct access_log *l);

/*
 * Reopen the file of <l> under its path (after a rotation), keeping the
 * descriptor's number: a line written meanwhile lands whole in the old
 * file or in the new one (dup3 replaces the file atomically). No-op for
 * syslog. 0, or -1 with errno (the old file stays in use). Any thread.
 */
int access_log_reopen(struct access_log *l);

/* The path, or "syslog". */
const char *access_log_where(const struct access_log *l);

/*
 * Write <e> as one line (one write(2), or one syslog(3) call): lines from
 * workers never interleave. A failed write is reported by the daemon log
 * (rate limited) and the line is lost. Any thread.
 */
void access_log_write(struct access_log *l, const struct access_entry *e);

/*
 * Format <e> as a line in <format> (enum conf_log_format) into <buf> of
 * <len> bytes (ACCESS_LINE_MAX always suffices; a smaller buffer gets a
 * cut line), with its '\n' and a NUL after it; returns the line's length,
 * newline included. Every string is escaped: in text, a byte outside
 * printable ASCII, '"' and '\' as \xNN (and a space as \x20 outside the
 * quoted request line), so fields stay space-separated and a line cannot
 * forge another; in JSON, what RFC 8259 requires plus DEL and U+2028/9,
 * and each byte that is not well-formed UTF-8 as \ufffd. Pure.
 */
size_t access_log_format(int format, const struct access_entry *e, char *buf,
                         size_t len);

/* "first", "spilled", "failed_over", "refused", "no_member" for enum
 * stats_decision; "-" otherwise. */
const char *access_routing_name(int routing);

#endif /* CHASHD_ACCESS_LOG_H */

/* rconn.c -- a blocking RESP client for chashd's own threads (rconn.h).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "loop/rconn.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "conf/conf.h"
#include "loop/io.h"

void
rval_free(struct rval *v)
{
    for (size_t i = 0; i < v->n; i++)
        rval_free(&v->el[i]);
    free(v->el);
    free(v->s);
    memset(v, 0, sizeof(*v));
}

void
rc_close(struct rconn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = c->olen = c->skip = 0;
}

void
rc_free(struct rconn *c)
{
    rc_close(c);
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
    c->cap = c->ocap = 0;
}

int
rc_put(struct rconn *c, const void *p, size_t n)
{
    if (c->olen + n > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 4096;
        char *o;

        while (cap < c->olen + n)
            cap *= 2;
        if ((o = realloc(c->out, cap)) == NULL)
            return -1;
        c->out = o;
        c->ocap = cap;
    }
    memcpy(c->out + c->olen, p, n);
    c->olen += n;
    return 0;
}

/* Queue one command of <argc> arguments. */
int
rc_cmd(struct rconn *c, int argc, const char *const *argv, const size_t *lens)
{
    char h[32];

    snprintf(h, sizeof(h), "*%d\r\n", argc);
    if (rc_put(c, h, strlen(h)) < 0)
        return -1;
    for (int i = 0; i < argc; i++) {
        size_t n = lens != NULL ? lens[i] : strlen(argv[i]);

        snprintf(h, sizeof(h), "$%zu\r\n", n);
        if (rc_put(c, h, strlen(h)) < 0 || rc_put(c, argv[i], n) < 0 ||
            rc_put(c, "\r\n", 2) < 0)
            return -1;
    }
    return 0;
}

int
rc_flush(struct rconn *c)
{
    size_t off = 0;

    while (off < c->olen) {
        ssize_t n = send(c->fd, c->out + off, c->olen - off, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    c->olen = 0;
    return 0;
}

/* Parse one reply at <c->in>[*<pos>]: 1 done, 0 more bytes needed, -1 a
 * malformed reply. */
static int
rc_parse(struct rconn *c, size_t *pos, struct rval *v)
{
    const char *b = c->in + *pos, *nl;
    size_t avail = c->len - *pos, hl;
    long long n;
    char *end;

    nl = memchr(b, '\n', avail);
    if (nl == NULL)
        return 0;
    hl = (size_t)(nl - b) + 1;
    if (hl < 3 || b[hl - 2] != '\r')
        return -1;
    v->type = b[0];
    switch (b[0]) {
    case '+':
    case '-':
        v->len = hl - 3;
        if ((v->s = malloc(v->len + 1)) == NULL)
            return -1;
        memcpy(v->s, b + 1, v->len);
        v->s[v->len] = '\0';
        *pos += hl;
        return 1;
    case ':':
        v->i = strtoll(b + 1, &end, 10);
        *pos += hl;
        return 1;
    case '$':
        n = strtoll(b + 1, &end, 10);
        if (n < 0) {
            v->type = 0;
            *pos += hl;
            return 1;
        }
        if (avail < hl + (size_t)n + 2)
            return 0;
        v->len = (size_t)n;
        if ((v->s = malloc(v->len + 1)) == NULL)
            return -1;
        memcpy(v->s, b + hl, v->len);
        v->s[v->len] = '\0';
        *pos += hl + (size_t)n + 2;
        return 1;
    case '*':
        n = strtoll(b + 1, &end, 10);
        *pos += hl;
        if (n < 0) {
            v->type = 0;
            return 1;
        }
        if (n > 10000000 ||
            (v->el = calloc((size_t)n ? (size_t)n : 1, sizeof(*v->el))) == NULL)
            return -1;
        for (v->n = 0; v->n < (size_t)n; v->n++) {
            int rc = rc_parse(c, pos, &v->el[v->n]);
            if (rc <= 0)
                return rc;
        }
        return 1;
    default:
        return -1;
    }
}

/* Drop what the last line read consumed. */
static void
rc_drop(struct rconn *c)
{
    if (c->skip > 0) {
        memmove(c->in, c->in + c->skip, c->len - c->skip);
        c->len -= c->skip;
        c->skip = 0;
    }
}

/* Read more bytes into <in> (growing it). 0 or -1. */
static int
rc_fill(struct rconn *c)
{
    ssize_t n;

    if (c->len == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16384;
        char *in = realloc(c->in, cap);

        if (in == NULL)
            return -1;
        c->in = in;
        c->cap = cap;
    }
    do
        n = recv(c->fd, c->in + c->len, c->cap - c->len, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    c->len += (size_t)n;
    return 0;
}

int
rc_line(struct rconn *c, const char **line, size_t *len)
{
    const char *nl;

    rc_drop(c);
    while ((nl = c->len > 0 ? memchr(c->in, '\n', c->len) : NULL) == NULL) {
        if (c->len > 1024 * 1024 || rc_fill(c) < 0)
            return -1; /* no line that long in what we read */
    }
    *line = c->in;
    *len = (size_t)(nl - c->in) + 1;
    c->skip = *len;
    return 0;
}

int
rc_bytes(struct rconn *c, char *out, size_t n)
{
    rc_drop(c);
    while (c->len < n)
        if (rc_fill(c) < 0)
            return -1;
    memcpy(out, c->in, n);
    c->skip = n;
    return 0;
}

/* Read one reply into <v> (the caller frees it). 0, or -1 (the
 * connection is unusable: closed, timed out, malformed). */
int
rc_reply(struct rconn *c, struct rval *v)
{
    rc_drop(c);
    for (;;) {
        size_t pos = 0;
        int rc;

        memset(v, 0, sizeof(*v));
        if (c->len > 0) {
            rc = rc_parse(c, &pos, v);
            if (rc == 1) {
                memmove(c->in, c->in + pos, c->len - pos);
                c->len -= pos;
                return 0;
            }
            rval_free(v);
            if (rc < 0)
                return -1;
        }
        if (rc_fill(c) < 0)
            return -1;
    }
}

/* Send the queued commands and read one reply. */
int
rc_call(struct rconn *c, struct rval *v)
{
    return rc_flush(c) < 0 ? -1 : rc_reply(c, v);
}

/* Connect to <a> (at most <timeout_ms> for the connect, and that plus
 * two seconds for any later read or write), AUTH and SELECT. 0, or -1
 * with a reason in <err>. */
int
rc_open(struct rconn *c, const struct conf_addr *a, uint32_t timeout_ms,
        const char *auth, int db, char *err, size_t errlen)
{
    struct timeval tv;
    struct pollfd pfd;
    int one = 1, soerr = 0, rc;
    socklen_t sl = sizeof(soerr);
    uint32_t io_ms = timeout_ms + 2000;
    struct rval v;

    rc_close(c);
    c->fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(c->fd, (const struct sockaddr *)&a->sa, a->salen) < 0 &&
        errno != EINPROGRESS) {
        snprintf(err, errlen, "connect to %s: %s", a->text, strerror(errno));
        rc_close(c);
        return -1;
    }
    pfd.fd = c->fd;
    pfd.events = POLLOUT;
    rc = poll(&pfd, 1, (int)timeout_ms);
    if (rc > 0 && getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
        soerr = errno;
    if (rc > 0 && soerr == 0 && io_connected_to_self(c->fd, &a->sa))
        soerr = ECONNREFUSED; /* our own port: nobody listens there */
    if (rc <= 0 || soerr != 0) {
        snprintf(err, errlen, "connect to %s: %s", a->text,
                 rc == 0 ? "timed out" : strerror(soerr ? soerr : errno));
        rc_close(c);
        return -1;
    }
    /* blocking from here, every wait bounded */
    rc = fcntl(c->fd, F_GETFL);
    if (rc < 0 || fcntl(c->fd, F_SETFL, rc & ~O_NONBLOCK) < 0) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        rc_close(c);
        return -1;
    }
    tv.tv_sec = io_ms / 1000;
    tv.tv_usec = (io_ms % 1000) * 1000;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (auth != NULL) {
        const char *argv[] = {"AUTH", auth};

        if (rc_cmd(c, 2, argv, NULL) < 0 || rc_call(c, &v) < 0) {
            snprintf(err, errlen, "AUTH on %s: no answer", a->text);
            rc_close(c);
            return -1;
        }
        if (v.type == '-') {
            snprintf(err, errlen, "AUTH on %s: %s", a->text, v.s);
            rval_free(&v);
            rc_close(c);
            return -1;
        }
        rval_free(&v);
    }
    if (db > 0) {
        char d[16];
        const char *argv[] = {"SELECT", d};

        snprintf(d, sizeof(d), "%d", db);
        if (rc_cmd(c, 2, argv, NULL) < 0 || rc_call(c, &v) < 0 ||
            v.type == '-') {
            snprintf(err, errlen, "SELECT %d on %s: %s", db, a->text,
                     v.type == '-' ? v.s : "no answer");
            rval_free(&v);
            rc_close(c);
            return -1;
        }
        rval_free(&v);
    }
    return 0;
}

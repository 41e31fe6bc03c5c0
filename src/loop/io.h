/* io.h -- the I/O layer every engine of a worker stands on: one end of a
 * connection ("side") registered once with epoll, edge-triggered, for
 * input, output and read hang-up; the edges it has seen kept in flags;
 * output it could not take kept in its own buffer (back-pressure); reads
 * that say when a socket is drained. The tcp splice (splice.c) moves bytes
 * between two sides; the request engine of the store modes will parse
 * them. Worker only; nothing here is shared between threads.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_IO_H
#define CHASHD_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "loop/worker.h"

/* The most a side buffers for a peer that cannot take more: back-pressure
 * starts there. As large as one read of the worker's scratch buffer. */
#define IO_BUF WORKER_SCRATCH

/*
 * One end of a connection. Registered once, edge-triggered (no epoll_ctl
 * after that): <readable> remembers an input edge not yet drained, so a
 * reader may stop at any time (back-pressure, a read budget) and resume
 * later without a new edge. <buf> holds bytes waiting to be written TO
 * this end, allocated on the first partial write and freed once drained.
 */
struct io_side {
    struct ev ev; /* its handler is the owner's */
    int fd;
    bool readable; /* input edge seen, not drained */
    bool rdhup;    /* FIN seen with the edge: read to EOF */
    bool eof_in;   /* this end sent FIN (read returned 0) */
    bool shut_out; /* FIN passed on to this end (or due at close) */
    bool failed;   /* a read failed (a reset, mostly) */
    char *buf;
    size_t off, len;
    int outq; /* its kernel send queue at the last idle check */
};

/*
 * Whether socket <fd>, whose connect to <to> (numeric) just completed, is
 * connected to itself. TCP's simultaneous open lets a connect to a local
 * port nobody listens on succeed when the kernel picks that very port as
 * the source port (Linux, a port of the ephemeral range, after many
 * refused tries): every byte sent then comes back as the reply. Our end
 * (one getsockname) is then <to> itself. When it is, the socket is set
 * to reset on close (no TIME_WAIT left holding the port its member will
 * listen on again) and true is returned: the caller closes it and counts
 * a refused connect, as Go's dialer does. Any thread.
 */
static inline bool
io_connected_to_self(int fd, const struct sockaddr_storage *to)
{
    struct sockaddr_storage a;
    socklen_t la = sizeof(a);
    struct linger lg = {1, 0};
    bool self = false;

    if (to->ss_family != AF_INET && to->ss_family != AF_INET6)
        return false;
    memset(&a, 0, sizeof(a));
    if (getsockname(fd, (struct sockaddr *)&a, &la) < 0 ||
        a.ss_family != to->ss_family)
        return false;
    if (a.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a, *y = (const void *)to;

        self = x->sin_port == y->sin_port &&
               x->sin_addr.s_addr == y->sin_addr.s_addr;
    } else {
        const struct sockaddr_in6 *x = (const void *)&a, *y = (const void *)to;

        self = x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    if (self)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    return self;
}

/* A side for <fd> (-1: not open yet) whose events go to <handler>. */
void io_side_init(struct io_side *s, int fd,
                  void (*handler)(struct worker *w, struct ev *ev,
                                  uint32_t events));

/* Register <s> for input, output and hang-up edges, once. 0 or -1. */
int io_side_register(struct worker *w, struct io_side *s);

/* What <s> is watched for, once registered: input, output and hang-up
 * (<data>), or hang-up and errors only (the kernel moves the socket's
 * bytes: its input and output edges are not ours, and would wake the
 * worker for every segment). 0 or -1. */
int io_side_watch(struct worker *w, struct io_side *s, bool data);

/* Remember what <events> (from epoll) say about <s>'s input. */
void io_side_edges(struct io_side *s, uint32_t events);

/* Close <s>'s descriptor (it leaves epoll) and free its buffer. */
void io_side_close(struct io_side *s);

/*
 * Read into <buf> (<cap> bytes). Returns the bytes read (> 0); or 0 when
 * there is nothing now (<readable> cleared: the next edge will tell) or
 * the end sent FIN (<eof_in> set); or -1 on an error (errno). A short read
 * drains the socket, so <readable> is cleared then too -- except when the
 * edge carried a FIN, which makes no further edge: then read on to the
 * end. A failed read sets <failed>.
 */
ssize_t io_side_read(struct io_side *s, void *buf, size_t cap);

/*
 * Write <n> bytes (at most IO_BUF) to <to>, whose buffer must be empty.
 * <more>: a FIN follows, let the bytes leave with it (MSG_MORE). What the
 * socket does not take is copied to <to>'s buffer. Returns 1 when all was
 * written, 0 when some is buffered (the caller stops reading: that is the
 * back-pressure), -1 on an error.
 */
int io_side_write(struct io_side *to, const char *buf, size_t n, bool more);

/* Keep <n> bytes (at most IO_BUF) for <to>, whose buffer must be empty,
 * without writing them yet: a later io_side_flush() writes them. 0, or -1
 * when out of memory. */
int io_side_hold(struct io_side *to, const char *buf, size_t n);

/* Write what <to> has buffered. Returns the bytes written (0 when it
 * would block: an output edge will come), or -1 on an error. */
ssize_t io_side_flush(struct io_side *to);

/* Pass a FIN on to <to> (once): shutdown(SHUT_WR), or nothing when <to>
 * sent its own FIN already (close() will finish the pair). */
void io_side_shutdown(struct io_side *to);

/*
 * Whether the kernel still sends to <s> what was written, and got rid of
 * some of it since the last check: a peer that reads slowly drains a big
 * send buffer for longer than an idle timeout between two writes (the
 * output edge waits for a third of it to be free), yet it is not idle. A
 * peer that takes nothing at all is idle after one more check.
 */
bool io_side_draining(struct io_side *s);

#endif /* CHASHD_IO_H */

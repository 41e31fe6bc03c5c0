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
#include <sys/uio.h>

#include "loop/worker.h"

/* The most a side buffers for a peer that cannot take more: back-pressure
 * starts there. As large as one read of the worker's scratch buffer. */
#define IO_BUF WORKER_SCRATCH

struct io_side;

/*
 * A transport: how a side's bytes cross its socket. io_plain (the
 * kernel's socket calls) is every side's today; a TLS transport (a
 * library's session over the same descriptor) plugs in here, and every
 * engine's reads and writes already go through it. Each returns as the
 * system call it stands for does: bytes moved, 0 at EOF (read), or -1
 * with errno -- EAGAIN: not now, an edge will come; <wants> then says
 * which edge a transport waits for (a TLS handshake may need to read
 * before it can write). Two paths move bytes without user space and
 * exist only over io_plain: the splice engine's splice(2) pipes and the
 * kernel's sockmap fast path; and a PROXY header is peeked from the raw
 * socket, before any transport's bytes.
 */
#define IO_WANT_READ 1u
#define IO_WANT_WRITE 2u
struct io_transport {
    const char *name;
    ssize_t (*read)(struct io_side *s, void *buf, size_t cap);
    /* <more>: more bytes follow soon, hold the segment (MSG_MORE) */
    ssize_t (*writev)(struct io_side *s, const struct iovec *iov, int n,
                      bool more);
    int (*shutdown)(struct io_side *s); /* no more bytes from us */
    void (*close)(struct io_side *s);   /* the descriptor and the session */
    unsigned (*wants)(const struct io_side *s);
};
extern const struct io_transport io_plain;

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
    const struct io_transport *tp; /* io_plain unless told otherwise */
    void *tp_state;                /* the transport's (a TLS session) */
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

/* A side for <fd> (-1: not open yet) whose events go to <handler>, over
 * io_plain. */
void io_side_init(struct io_side *s, int fd,
                  void (*handler)(struct worker *w, struct ev *ev,
                                  uint32_t events));

/* Write straight to <s> through its transport, nothing kept: the bytes
 * written, or -1 with errno (EAGAIN: none now, an output edge will
 * come). For engines that keep their own output (the request and http
 * engines' buffers). */
ssize_t io_side_send(struct io_side *s, const void *buf, size_t n);
ssize_t io_side_sendv(struct io_side *s, const struct iovec *iov, int n);

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

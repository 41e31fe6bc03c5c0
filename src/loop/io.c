/* io.c -- the I/O layer: sides registered once, edge-triggered; reads that
 * know when a socket is drained; writes that keep what the peer cannot
 * take (back-pressure); half-close; the send-queue idle check.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "loop/io.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/invariant.h"

/* ---- the plain transport: the kernel's socket calls ---------------------- */

static ssize_t
plain_read(struct io_side *s, void *buf, size_t cap)
{
    return read(s->fd, buf, cap);
}

static ssize_t
plain_writev(struct io_side *s, const struct iovec *iov, int n, bool more)
{
    int flags = more ? MSG_MORE | MSG_NOSIGNAL : MSG_NOSIGNAL;
    struct msghdr msg = {.msg_iov = (struct iovec *)(uintptr_t)iov,
                         .msg_iovlen = (size_t)n};

    if (n == 1)
        return send(s->fd, iov[0].iov_base, iov[0].iov_len, flags);
    return sendmsg(s->fd, &msg, flags);
}

static int
plain_shutdown(struct io_side *s)
{
    return shutdown(s->fd, SHUT_WR);
}

static void
plain_close(struct io_side *s)
{
    close(s->fd); /* also leaves the epoll set */
}

static unsigned
plain_wants(const struct io_side *s)
{
    (void)s;
    return 0; /* reads wait for input, writes for output: nothing more */
}

const struct io_transport io_plain = {
    .name = "plain",
    .read = plain_read,
    .writev = plain_writev,
    .shutdown = plain_shutdown,
    .close = plain_close,
    .wants = plain_wants,
};

/* ---- sides --------------------------------------------------------------- */

ssize_t
io_side_send(struct io_side *s, const void *buf, size_t n)
{
    struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = n};

    return s->tp->writev(s, &iov, 1, false);
}

ssize_t
io_side_sendv(struct io_side *s, const struct iovec *iov, int n)
{
    return s->tp->writev(s, iov, n, false);
}

void
io_side_init(struct io_side *s, int fd,
             void (*handler)(struct worker *w, struct ev *ev, uint32_t events))
{
    memset(s, 0, sizeof(*s));
    s->ev.handler = handler;
    s->fd = fd;
    s->tp = &io_plain;
}

int
io_side_register(struct worker *w, struct io_side *s)
{
    struct epoll_event e = {
        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
        .data.ptr = &s->ev,
    };

    INVARIANT(s->fd >= 0 && s->ev.handler != NULL);
    return epoll_ctl(w->ep, EPOLL_CTL_ADD, s->fd, &e);
}

int
io_side_watch(struct worker *w, struct io_side *s, bool data)
{
    struct epoll_event e = {
        .events = data ? EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET
                       : EPOLLRDHUP | EPOLLET,
        .data.ptr = &s->ev,
    };

    /* A modify looks at the socket again: an edge the new set has and
     * the socket shows now is reported, none is lost. */
    return epoll_ctl(w->ep, EPOLL_CTL_MOD, s->fd, &e);
}

void
io_side_edges(struct io_side *s, uint32_t events)
{
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        s->readable = true;
    if (events & (EPOLLRDHUP | EPOLLHUP))
        s->rdhup = true;
}

void
io_side_close(struct io_side *s)
{
    if (s->fd >= 0)
        s->tp->close(s);
    s->fd = -1;
    s->readable = s->rdhup = false;
    free(s->buf);
    s->buf = NULL;
    s->len = s->off = 0;
}

ssize_t
io_side_read(struct io_side *s, void *buf, size_t cap)
{
    for (;;) {
        ssize_t n = s->tp->read(s, buf, cap);

        if (n > 0) {
            /* A short read drained the socket: a later byte makes a new
             * edge. Unless a FIN came with this edge -- it makes none. */
            if ((size_t)n < cap && !s->rdhup)
                s->readable = false;
            return n;
        }
        if (n == 0) {
            s->eof_in = true;
            s->readable = false;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            s->readable = false;
            return 0;
        }
        s->failed = true;
        return -1;
    }
}

int
io_side_hold(struct io_side *to, const char *buf, size_t n)
{
    INVARIANT(to->len == 0 && n <= IO_BUF);
    if (to->buf == NULL && (to->buf = malloc(IO_BUF)) == NULL)
        return -1;
    memcpy(to->buf, buf, n);
    to->off = 0;
    to->len = n;
    return 0;
}

int
io_side_write(struct io_side *to, const char *buf, size_t n, bool more)
{
    ssize_t m;

    INVARIANT(to->len == 0 && n <= IO_BUF);
    /* A FIN is known to follow: let the last bytes leave with it, in one
     * segment (the shutdown or the next plain write pushes). */
    {
        struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = n};

        m = to->tp->writev(to, &iov, 1, more);
    }
    if (m < 0) {
        if (errno != EAGAIN && errno != EINTR)
            return -1;
        m = 0;
    }
    if ((size_t)m == n)
        return 1;
    if (to->buf == NULL && (to->buf = malloc(IO_BUF)) == NULL)
        return -1;
    memcpy(to->buf, buf + m, n - (size_t)m);
    to->off = 0;
    to->len = n - (size_t)m;
    return 0;
}

ssize_t
io_side_flush(struct io_side *to)
{
    size_t before = to->len;

    while (to->len > 0) {
        ssize_t n = io_side_send(to, to->buf + to->off, to->len);
        if (n < 0) {
            if (errno == EAGAIN)
                return (ssize_t)(before - to->len); /* an edge will come */
            if (errno == EINTR)
                continue;
            return -1;
        }
        to->off += (size_t)n;
        to->len -= (size_t)n;
    }
    /* Drained: give the 16 KiB back, a long-lived idle pair keeps none. */
    free(to->buf);
    to->buf = NULL;
    to->off = 0;
    return (ssize_t)before;
}

void
io_side_shutdown(struct io_side *to)
{
    if (to->shut_out)
        return;
    /* Both ends have sent FIN: close() will finish the pair, no shutdown
     * needed. */
    if (!to->eof_in)
        to->tp->shutdown(to);
    to->shut_out = true;
}

bool
io_side_draining(struct io_side *s)
{
    int q = 0, last = s->outq;

    if (s->fd < 0 || ioctl(s->fd, SIOCOUTQ, &q) < 0)
        q = 0;
    s->outq = q;
    return q > 0 && q != last;
}

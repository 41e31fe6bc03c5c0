/* proxy.c -- connection pairs inside one worker: accept, key, choice of a
 * member in the pool's current snapshot, non-blocking connect with
 * retries on the next member, then bytes both ways. Back-pressure: a
 * side is read only while its peer has nothing pending; half-close: a FIN
 * read on one side becomes shutdown(SHUT_WR) on the other, the other
 * direction keeps flowing.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proxy.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chash/chash.h"
#include "conf.h"
#include "health.h"
#include "log.h"
#include "pool.h"
#include "proto/proto.h"

#define CONN_OF(side, field) \
    ((struct conn *)((char *)(side) - offsetof(struct conn, field)))

static struct conn *
side_conn(struct side *s)
{
    return s->ev.kind == EV_CLIENT ? CONN_OF(s, client) : CONN_OF(s, backend);
}

static void
conn_unlink(struct worker *w, struct conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
}

/* Drop the member of <c> (backend closed): counters and reference. */
static void
conn_release_server(struct conn *c)
{
    if (c->server == NULL)
        return;
    if (c->counted) {
        atomic_fetch_sub_explicit(&c->server->active, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&c->pool->active_backends, 1,
                                  memory_order_relaxed);
        c->counted = false;
    }
    server_unref(c->server);
    c->server = NULL;
}

static void
side_close(struct side *s)
{
    if (s->fd >= 0)
        close(s->fd); /* also leaves the epoll set */
    s->fd = -1;
    s->registered = false;
    s->events = 0;
    free(s->buf);
    s->buf = NULL;
    s->len = s->off = 0;
}

static void
conn_close(struct worker *w, struct conn *c)
{
    worker_timer_del(w, &c->timer);
    side_close(&c->client);
    side_close(&c->backend);
    conn_release_server(c);
    conn_unlink(w, c);
    atomic_fetch_sub_explicit(&c->pool->active, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
    pool_unref(c->pool);
    c->pool = NULL;
    c->state = CONN_CLOSED;
    c->next = w->dead;
    w->dead = c;
}

void
proxy_reap(struct worker *w)
{
    while (w->dead != NULL) {
        struct conn *c = w->dead;
        w->dead = c->next;
        free(c);
    }
}

void
proxy_close_all(struct worker *w)
{
    while (w->conns != NULL)
        conn_close(w, w->conns);
    proxy_reap(w);
}

/* Set the epoll interest of <s> to <events>; 0 or -1. */
static int
side_want(struct worker *w, struct side *s, uint32_t events)
{
    struct epoll_event e = {.events = events, .data.ptr = s};

    if (s->registered && s->events == events)
        return 0;
    if (epoll_ctl(w->ep, s->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s->fd,
                  &e) < 0)
        return -1;
    s->registered = true;
    s->events = events;
    return 0;
}

/* Interest of an established pair: read a side while it has not sent
 * FIN and its peer has nothing pending; write a side with bytes pending. */
static int
conn_update(struct worker *w, struct conn *c)
{
    uint32_t ce = 0, be = 0;

    if (!c->client.eof_in && c->backend.len == 0)
        ce |= EPOLLIN;
    if (c->client.len > 0)
        ce |= EPOLLOUT;
    if (!c->backend.eof_in && c->client.len == 0)
        be |= EPOLLIN;
    if (c->backend.len > 0)
        be |= EPOLLOUT;
    if (side_want(w, &c->client, ce) < 0 || side_want(w, &c->backend, be) < 0)
        return -1;
    return 0;
}

/* ---- connecting -------------------------------------------------------- */

static void connect_next(struct worker *w, struct conn *c);

static void
count_decision(struct stats_pool *st, int decision)
{
    switch (decision) {
    case POOL_FIRST_CHOICE:
        stats_add(&st->first_choice, 1);
        break;
    case POOL_SPILLED:
        stats_add(&st->spilled, 1);
        break;
    case POOL_FAILED_OVER:
        stats_add(&st->failed_over, 1);
        break;
    case POOL_REFUSED_ERROR:
        stats_add(&st->refused_error, 1);
        break;
    default:
        stats_add(&st->no_member, 1);
        break;
    }
}

static void
connect_established(struct worker *w, struct conn *c)
{
    struct server *s = c->server;

    c->state = CONN_ESTABLISHED;
    if (atomic_load_explicit(&s->fails, memory_order_relaxed) != 0)
        atomic_store_explicit(&s->fails, 0, memory_order_relaxed);
    stats_add(&s->stats[w->id].conns_total, 1);
    c->last_active_ms = w->now_ms;
    worker_timer_del(w, &c->timer);
    if (c->idle_timeout_ms > 0)
        worker_timer_set(w, &c->timer, w->now_ms + c->idle_timeout_ms);
    if (conn_update(w, c) < 0)
        conn_close(w, c);
}

/* The connect to c->server failed (refused, reset, or timed out): count
 * it, let the control thread know when the member reaches its
 * server_failure_limit, and try the next member. */
static void
connect_failed(struct worker *w, struct conn *c, bool timeout, int err)
{
    struct server *s = c->server;
    uint32_t fails;

    stats_add(&s->stats[w->id].connect_failures, 1);
    if (timeout)
        stats_add(&s->stats[w->id].connect_timeouts, 1);
    fails = atomic_fetch_add_explicit(&s->fails, 1, memory_order_relaxed) + 1;
    health_passive_failure(c->pool, fails);
    log_debug("pool %s: connect to %s (%s) failed: %s", c->pool->name,
              s->name, s->addr.text, timeout ? "timed out" : strerror(err));
    if (c->attempts <= PROXY_TRIED_MAX)
        c->tried[c->attempts - 1] = s->id;
    side_close(&c->backend);
    conn_release_server(c);
    connect_next(w, c);
}

/*
 * Pick a member (skipping those tried) and start a non-blocking connect,
 * until one is in progress or done, or the retries are spent (then the
 * client is closed).
 */
static void
connect_next(struct worker *w, struct conn *c)
{
    struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct stats_pool *st = &c->pool->stats[w->id];

    for (;;) {
        size_t ntried = c->attempts < PROXY_TRIED_MAX ? c->attempts
                                                      : PROXY_TRIED_MAX;
        struct server *s;
        int decision, fd, one = 1;

        if (c->attempts > snap->set.retries) {
            stats_add(&st->no_member, 1);
            goto refuse;
        }
        s = pool_choose(c->pool, snap, c->hash, c->tried, ntried, &decision);
        if (c->attempts == 0 || s == NULL)
            count_decision(st, decision);
        if (s == NULL)
            goto refuse;
        if (c->attempts > 0)
            stats_add(&st->retries, 1);
        c->attempts++;
        server_ref(s);
        c->server = s;
        c->counted = true;
        atomic_fetch_add_explicit(&s->active, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->pool->active_backends, 1,
                                  memory_order_relaxed);
        fd = socket(s->addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    0);
        if (fd < 0) {
            log_error("pool %s: socket: %s", c->pool->name, strerror(errno));
            conn_release_server(c);
            goto refuse;
        }
        c->backend.fd = fd;
        if (snap->set.tcpkeepalive)
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        if (s->addr.family != AF_UNIX)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (const struct sockaddr *)&s->addr.sa, s->addr.salen) ==
            0) {
            connect_established(w, c);
            return;
        }
        if (errno == EINPROGRESS) {
            if (side_want(w, &c->backend, EPOLLOUT) < 0) {
                conn_release_server(c);
                goto refuse;
            }
            worker_timer_set(w, &c->timer,
                             w->now_ms + c->connect_timeout_ms);
            return;
        }
        /* Immediate failure (unix socket gone, no route): next member. */
        connect_failed(w, c, false, errno);
        return;
    }
refuse:
    conn_close(w, c);
}

/* ---- accepting ------------------------------------------------------------ */

static void
accept_one(struct worker *w, struct listener *l, int fd,
           const struct sockaddr_storage *peer, socklen_t peerlen)
{
    struct pool *p = l->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    struct stats_pool *st = &p->stats[w->id];
    char key[PROTO_KEY_MAX];
    struct conn *c;
    uint64_t active;
    int klen, one = 1;

    stats_add(&st->accepted, 1);
    active = atomic_fetch_add_explicit(&p->active, 1, memory_order_relaxed);
    if (snap->set.client_connections > 0 &&
        active >= snap->set.client_connections) {
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_relaxed);
        stats_add(&st->refused_limit, 1);
        close(fd);
        return;
    }
    klen = snap->set.proto->conn_key((const struct sockaddr *)peer, peerlen,
                                     snap->set.hash_key, key, sizeof(key));
    c = klen >= 0 ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_relaxed);
        stats_add(&st->no_member, 1);
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (snap->set.tcpkeepalive)
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    c->client.ev.kind = EV_CLIENT;
    c->client.fd = fd;
    c->backend.ev.kind = EV_BACKEND;
    c->backend.fd = -1;
    c->w = w;
    c->pool = p;
    pool_ref(p);
    c->connect_timeout_ms = snap->set.connect_timeout_ms;
    c->idle_timeout_ms = snap->set.idle_timeout_ms;
    c->hash = snap->ring != NULL ? chash_ring_hash(snap->ring, key, (size_t)klen)
                                 : 0;
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;
    atomic_fetch_add_explicit(&w->nconns, 1, memory_order_relaxed);
    connect_next(w, c);
}

void
proxy_accept(struct worker *w, struct listener *l)
{
    /* A bounded batch: other events of this loop iteration wait for it. */
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &peerlen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                log_warn("pool %s: accept: %s", l->pool->name,
                         strerror(errno));
            return;
        }
        accept_one(w, l, fd, &peer, peerlen);
    }
}

/* ---- forwarding ------------------------------------------------------------- */

/* Account <n> bytes moved in direction <from> -> peer. */
static void
count_bytes(struct worker *w, struct conn *c, struct side *from, size_t n)
{
    struct stats_pool *ps = &c->pool->stats[w->id];
    struct stats_server *ss = &c->server->stats[w->id];

    if (from == &c->client) {
        stats_add(&ps->bytes_in, n);
        stats_add(&ss->bytes_out, n);
    } else {
        stats_add(&ss->bytes_in, n);
        stats_add(&ps->bytes_out, n);
    }
}

/* Write what is pending to <to>; when it is all gone and <from> sent FIN,
 * pass the FIN on. 0, or -1 when the connection must close. */
static int
side_flush(struct side *from, struct side *to)
{
    while (to->len > 0) {
        ssize_t n = write(to->fd, to->buf + to->off, to->len);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            return -1;
        }
        to->off += (size_t)n;
        to->len -= (size_t)n;
    }
    to->off = 0;
    if (from->eof_in && !to->shut_out) {
        shutdown(to->fd, SHUT_WR);
        to->shut_out = true;
    }
    return 0;
}

/* Read once from <from> and write to <to>; what <to> cannot take now is
 * kept in to->buf, which stops reads on <from> until it drains. */
static int
side_forward(struct worker *w, struct conn *c, struct side *from,
             struct side *to)
{
    ssize_t n, m;

    if (to->len > 0 || from->eof_in)
        return 0;
    n = read(from->fd, w->scratch, PROXY_BUF);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0) {
        from->eof_in = true;
        return side_flush(from, to);
    }
    c->last_active_ms = w->now_ms;
    m = write(to->fd, w->scratch, (size_t)n);
    if (m < 0) {
        if (errno != EAGAIN && errno != EINTR)
            return -1;
        m = 0;
    }
    count_bytes(w, c, from, (size_t)m);
    if (m < n) {
        if (to->buf == NULL && (to->buf = malloc(PROXY_BUF)) == NULL)
            return -1;
        memcpy(to->buf, w->scratch + m, (size_t)(n - m));
        to->off = 0;
        to->len = (size_t)(n - m);
        count_bytes(w, c, from, (size_t)(n - m));
    }
    return 0;
}

void
proxy_event(struct worker *w, struct side *s, uint32_t events)
{
    struct conn *c = side_conn(s);
    struct side *peer = s == &c->client ? &c->backend : &c->client;

    if (c->state == CONN_CLOSED)
        return; /* closed earlier in this batch */
    if (c->state == CONN_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (s != &c->backend)
            return;
        /* Writable without error or hang-up: connected, no need to ask. */
        if (!(events & (EPOLLERR | EPOLLHUP))) {
            connect_established(w, c);
            return;
        }
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        connect_failed(w, c, false, err ? err : ECONNREFUSED);
        return;
    }
    if (events & EPOLLERR)
        goto close;
    if (events & EPOLLHUP && s->eof_in && s->len == 0)
        goto close; /* reset after its FIN: nothing more can move */
    if ((events & (EPOLLOUT | EPOLLHUP)) && s->len > 0) {
        if (side_flush(peer, s) < 0)
            goto close;
    }
    if (events & (EPOLLIN | EPOLLHUP)) {
        if (side_forward(w, c, s, peer) < 0)
            goto close;
    }
    /* Both directions have passed their FIN: the pair is done. */
    if (c->client.shut_out && c->backend.shut_out)
        goto close;
    if (conn_update(w, c) < 0)
        goto close;
    return;
close:
    conn_close(w, c);
}

void
proxy_timeout(struct worker *w, struct conn *c)
{
    if (c->state == CONN_CONNECTING) {
        connect_failed(w, c, true, ETIMEDOUT);
        return;
    }
    if (c->idle_timeout_ms == 0)
        return;
    if (w->now_ms - c->last_active_ms >= c->idle_timeout_ms) {
        stats_add(&c->pool->stats[w->id].idle_timeouts, 1);
        log_debug("pool %s: connection to %s idle for %ums: closed",
                  c->pool->name, c->server ? c->server->name : "-",
                  c->idle_timeout_ms);
        conn_close(w, c);
        return;
    }
    worker_timer_set(w, &c->timer, c->last_active_ms + c->idle_timeout_ms);
}

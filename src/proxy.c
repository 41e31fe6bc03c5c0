/* proxy.c -- connection pairs inside one worker: accept, key, choice of a
 * member in the pool's current snapshot, non-blocking connect with
 * retries on the next member, then bytes both ways. Sockets are
 * registered once, edge-triggered (no epoll_ctl per state change).
 * Back-pressure: a side is read only while its peer has nothing pending;
 * half-close: a FIN read on one side becomes shutdown(SHUT_WR) on the
 * other, the other direction keeps flowing.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proxy.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chash/chash.h"
#include "conf.h"
#include "health.h"
#include "log.h"
#include "pool.h"
#include "proto/proto.h"

#define CONN_OF(side, field)                                                   \
    ((struct conn *)((char *)(side)-offsetof(struct conn, field)))

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
    s->readable = s->rdhup = false;
    free(s->buf);
    s->buf = NULL;
    s->len = s->off = 0;
}

static void
pending_del(struct worker *w, struct conn *c)
{
    if (!c->pending)
        return;
    for (struct conn **pp = &w->pending; *pp != NULL;
         pp = &(*pp)->next_pending) {
        if (*pp == c) {
            *pp = c->next_pending;
            break;
        }
    }
    c->pending = false;
}

static void
conn_close(struct worker *w, struct conn *c)
{
    pending_del(w, c);
    worker_timer_del(w, &c->timer);
    /* Counters first: once a peer sees the close, they are up to date. */
    conn_release_server(c);
    atomic_fetch_sub_explicit(&c->pool->active, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
    side_close(&c->client);
    side_close(&c->backend);
    conn_unlink(w, c);
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

/* Register <s> for input, output and hang-up edges, once. */
static int
side_register(struct worker *w, struct side *s)
{
    struct epoll_event e = {
        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
        .data.ptr = s,
    };

    return epoll_ctl(w->ep, EPOLL_CTL_ADD, s->fd, &e);
}

static void conn_pump(struct worker *w, struct conn *c);

/* ---- connecting ---------------------------------------------------------- */

/* Out of descriptors for a backend socket: the client waits this long
 * before the next try (as long as a listener pauses). */
#define PROXY_FD_WAIT_MS 100

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
    /* The client may have sent its first bytes (even its FIN) already. */
    conn_pump(w, c);
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
    log_debug("pool %s: connect to %s (%s) failed: %s", c->pool->name, s->name,
              s->addr.text, timeout ? "timed out" : strerror(err));
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
        size_t ntried =
            c->attempts < PROXY_TRIED_MAX ? c->attempts : PROXY_TRIED_MAX;
        struct server *s;
        int decision, fd, one = 1;

        if (c->attempts > snap->set.retries) {
            stats_add(&st->no_member, 1);
            goto refuse;
        }
        s = pool_choose(c->pool, snap, c->hash, c->tried, ntried, &decision);
        if (!c->decided || s == NULL)
            count_decision(st, decision);
        c->decided = true;
        if (s == NULL)
            goto refuse;
        c->attempts++;
        server_ref(s);
        c->server = s;
        c->counted = true; /* s->active: taken by pool_choose */
        atomic_fetch_add_explicit(&c->pool->active_backends, 1,
                                  memory_order_relaxed);
        fd = socket(s->addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    0);
        if (fd < 0) {
            int err = errno;
            conn_release_server(c);
            if (err == EMFILE || err == ENFILE || err == ENOBUFS ||
                err == ENOMEM) {
                /* accept() took the last descriptor: this client waits,
                 * like those still in the backlog (no listener of this
                 * worker accepts meanwhile), and tries again then. Not a
                 * connect attempt, nor a failure of the member. */
                c->attempts--;
                log_warn("pool %s: socket: %s; client waits %ums",
                         c->pool->name, strerror(err), PROXY_FD_WAIT_MS);
                for (struct listener *l = w->listeners; l != NULL; l = l->next)
                    worker_pause_listener(w, l);
                worker_timer_set(w, &c->timer, w->now_ms + PROXY_FD_WAIT_MS);
                return;
            }
            log_error("pool %s: socket: %s", c->pool->name, strerror(err));
            goto refuse;
        }
        if (c->attempts > 1)
            stats_add(&st->retries, 1); /* counted once a connect starts */
        c->backend.fd = fd;
        if (snap->set.tcpkeepalive)
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        if (s->addr.family != AF_UNIX)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (const struct sockaddr *)&s->addr.sa, s->addr.salen) ==
            0) {
            if (side_register(w, &c->backend) < 0)
                goto refuse;
            connect_established(w, c);
            return;
        }
        if (errno == EINPROGRESS) {
            if (side_register(w, &c->backend) < 0)
                goto refuse;
            worker_timer_set(w, &c->timer, w->now_ms + c->connect_timeout_ms);
            return;
        }
        /* Immediate failure (unix socket gone, no route): next member. */
        connect_failed(w, c, false, errno);
        return;
    }
refuse:
    conn_close(w, c);
}

/* ---- accepting ----------------------------------------------------------- */

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
    c->hash =
        snap->ring != NULL ? chash_ring_hash(snap->ring, key, (size_t)klen) : 0;
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;
    atomic_fetch_add_explicit(&w->nconns, 1, memory_order_relaxed);
    /* Registered now: edges that come while the backend connects are
     * remembered in the side's flags. */
    if (side_register(w, &c->client) < 0) {
        conn_close(w, c);
        return;
    }
    connect_next(w, c);
}

void
proxy_accept(struct worker *w, struct listener *l)
{
    /* A bounded batch: other events of this loop iteration wait for it.
     * A client that found no descriptor for its backend pauses us. */
    for (int i = 0; i < 64 && !l->paused; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &peerlen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* Clients wait in the backlog until descriptors free up. */
                log_warn("pool %s: accept: %s; pausing new connections for "
                         "100ms",
                         l->pool->name, strerror(errno));
                worker_pause_listener(w, l);
            }
            return;
        }
        accept_one(w, l, fd, &peer, peerlen);
    }
}

/* ---- forwarding ---------------------------------------------------------- */

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

/* Write what is pending to <to>. 0 (done or would block), -1 on error. */
static int
side_flush(struct side *to)
{
    while (to->len > 0) {
        ssize_t n = write(to->fd, to->buf + to->off, to->len);
        if (n < 0) {
            if (errno == EAGAIN)
                return 0; /* an output edge will come */
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
    return 0;
}

/* Reads per side per event: a fast sender cannot starve the others; what
 * is left is resumed from the worker's pending list. */
#define PUMP_READS 8

/*
 * Move bytes from <from> to <to>: flush what <to> has pending, then read
 * while <from> has input and <to> takes everything; what <to> cannot take
 * stays in to->buf and reading stops (back-pressure) until its output
 * edge. A FIN from <from>, once all is written, is passed on.
 * Returns 1 when the read budget ran out with input left, 0, or -1 when
 * the pair must close.
 */
static int
pump(struct worker *w, struct conn *c, struct side *from, struct side *to)
{
    int reads = 0;

    if (to->len > 0) {
        size_t before = to->len;
        if (side_flush(to) < 0)
            return -1;
        /* Bytes written are traffic too: a slow peer keeps us from reading
         * for longer than idle_timeout, yet the pair is not idle. */
        if (to->len < before)
            c->last_active_ms = w->now_ms;
        if (to->len > 0)
            return 0; /* still full: wait for its output edge */
    }
    while (from->readable && !from->eof_in) {
        ssize_t n, m;
        if (reads++ == PUMP_READS)
            return 1;
        n = read(from->fd, w->scratch, PROXY_BUF);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                return -1;
            from->readable = false;
            break;
        }
        if (n == 0) {
            from->eof_in = true;
            from->readable = false;
            break;
        }
        c->last_active_ms = w->now_ms;
        /* A FIN is known to follow: let the last bytes leave with it, in
         * one segment (the shutdown or the next plain write pushes). */
        m = send(to->fd, w->scratch, (size_t)n,
                 from->rdhup ? MSG_MORE | MSG_NOSIGNAL : MSG_NOSIGNAL);
        if (m < 0) {
            if (errno != EAGAIN && errno != EINTR)
                return -1;
            m = 0;
        }
        count_bytes(w, c, from, (size_t)n);
        if (m < n) {
            if (to->buf == NULL && (to->buf = malloc(PROXY_BUF)) == NULL)
                return -1;
            memcpy(to->buf, w->scratch + m, (size_t)(n - m));
            to->off = 0;
            to->len = (size_t)(n - m);
            return 0; /* back-pressure: <from> stays readable */
        }
        /* A short read drained the socket: a later byte makes a new edge.
         * Unless a FIN came with this edge -- it makes none: read on. */
        if ((size_t)n < PROXY_BUF && !from->rdhup) {
            from->readable = false;
            break;
        }
    }
    if (from->eof_in && !to->shut_out) {
        /* Both ends have sent FIN: close() will finish the pair, no
         * shutdown needed. */
        if (!to->eof_in)
            shutdown(to->fd, SHUT_WR);
        to->shut_out = true;
    }
    return 0;
}

static void
pending_add(struct worker *w, struct conn *c)
{
    if (c->pending)
        return;
    c->pending = true;
    c->next_pending = w->pending;
    w->pending = c;
}

/* Move what can move both ways; close the pair when both ends are done. */
static void
conn_pump(struct worker *w, struct conn *c)
{
    /* Both ways even when the first fails: a backend that answers and
     * resets at once makes the client's bytes fail to go up, yet its
     * answer, already with us, must still go down (as it would without
     * a proxy). */
    int up = pump(w, c, &c->client, &c->backend);
    int down = pump(w, c, &c->backend, &c->client);

    if (up < 0 || down < 0)
        goto close;
    if (c->client.eof_in && c->backend.eof_in && c->client.len == 0 &&
        c->backend.len == 0)
        goto close;
    if (up > 0 || down > 0)
        pending_add(w, c);
    return;
close:
    conn_close(w, c);
}

void
proxy_run_pending(struct worker *w)
{
    struct conn *list = w->pending;

    w->pending = NULL;
    while (list != NULL) {
        struct conn *c = list;
        list = c->next_pending;
        c->pending = false;
        if (c->state == CONN_ESTABLISHED)
            conn_pump(w, c);
    }
}

void
proxy_event(struct worker *w, struct side *s, uint32_t events)
{
    struct conn *c = side_conn(s);

    if (c->state == CONN_CLOSED)
        return; /* closed earlier in this batch */
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        s->readable = true;
    if (events & (EPOLLRDHUP | EPOLLHUP))
        s->rdhup = true;
    if (c->state == CONN_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (s != &c->backend)
            return; /* the client's edges wait in its flags */
        if (!(events & (EPOLLERR | EPOLLHUP))) {
            /* Writable without error or hang-up: connected. */
            if (events & EPOLLOUT)
                connect_established(w, c);
            return;
        }
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        connect_failed(w, c, false, err ? err : ECONNREFUSED);
        return;
    }
    if (events & EPOLLERR) {
        /* A reset. What that end sent before it is still ours to pass on
         * (an answer right before the reset); then the pair closes. */
        conn_pump(w, c);
        if (c->state != CONN_CLOSED)
            conn_close(w, c);
        return;
    }
    conn_pump(w, c);
}

/*
 * Whether the kernel still sends to <s> what we wrote, and got rid of some
 * of it since the last idle check: a peer that reads slowly drains a big
 * send buffer for longer than idle_timeout between two of our writes
 * (the output edge waits for a third of it to be free), yet the pair is
 * not idle. A peer that takes nothing at all is idle after one more
 * timeout.
 */
static bool
side_draining(struct side *s)
{
    int q = 0, last = s->outq;

    if (s->fd < 0 || ioctl(s->fd, SIOCOUTQ, &q) < 0)
        q = 0;
    s->outq = q;
    return q > 0 && q != last;
}

void
proxy_timeout(struct worker *w, struct conn *c)
{
    if (c->state == CONN_CONNECTING && c->server == NULL) {
        /* Waiting for a descriptor (connect_next): try again. */
        connect_next(w, c);
        return;
    }
    if (c->state == CONN_CONNECTING) {
        connect_failed(w, c, true, ETIMEDOUT);
        return;
    }
    if (c->idle_timeout_ms == 0)
        return;
    if (w->now_ms - c->last_active_ms >= c->idle_timeout_ms) {
        bool to_client = side_draining(&c->client);
        bool to_backend = side_draining(&c->backend);
        if (to_client || to_backend) {
            c->last_active_ms = w->now_ms; /* still sending: not idle */
            worker_timer_set(w, &c->timer, w->now_ms + c->idle_timeout_ms);
            return;
        }
        stats_add(&c->pool->stats[w->id].idle_timeouts, 1);
        log_debug("pool %s: connection to %s idle for %ums: closed",
                  c->pool->name, c->server ? c->server->name : "-",
                  c->idle_timeout_ms);
        conn_close(w, c);
        return;
    }
    worker_timer_set(w, &c->timer, c->last_active_ms + c->idle_timeout_ms);
}

/* request_conn.c -- the request engine's member connections: one per
 * worker per member (or several: `connections`), the handshake, requests
 * queued in FIFO order and pipelined (batched where the mode can), replies
 * matched in order and streamed through when large, timeouts, failures
 * and resets; and sending a request's fragments to them.
 * Part of data/request (request.c); shared with its parts in request_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/request.h"
#include "data/request_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/clock.h"
#include "base/invariant.h"
#include "base/log.h"
#include "conf/conf.h"
#include "data/engine.h"
#include "model/fence.h"
#include "model/hotkeys.h"
#include "model/migration_view.h"
#include "model/pool.h"
#include "model/replica_log.h"
#include "proto/memcache.h"
#include "proto/redis.h"

/* ---- server connections -------------------------------------------------- */

/* Count the time <f>'s member took to answer (from the request's parse:
 * what the client sees, queueing included). */
static void
request_latency(struct rserver *s, const struct rfrag *f)
{
    struct stats_server *st = &s->m->server->stats[s->w->id];
    uint64_t us = clock_us() - f->req->start_us;

    stats_add(&st->latency[stats_latency_bucket(us)], 1);
    stats_add(&st->latency_sum_us, us);
}

static void conn_event(struct worker *w, struct ev *ev, uint32_t events);
static void conn_timer(struct worker *w, struct timer *t);
static void conn_more(struct worker *w, struct worker_task *t);
static void conn_flush_task(struct worker *w, struct worker_task *t);

/* Whether <f> is a replicated request's copy or a repair's request:
 * one that waits for its member as long as the member is not stuck. */
static bool
frag_patient(const struct rfrag *f)
{
    return f->gate == NULL && (f->req->rep != NULL || f->req->job != NULL);
}

/* When <s>'s oldest request fails the connection: its deadline; for a
 * patient one, request_stuck_ms after the member last said anything. */
static uint64_t
conn_deadline(const struct rserver *s)
{
    uint64_t d = s->head->deadline_ms;

    if (frag_patient(s->head)) {
        uint64_t stuck =
            request_stuck_ms(pool_snapshot(s->m->pool)->set.timeout_ms);

        if (s->heard_ms + stuck > d)
            d = s->heard_ms + stuck;
    }
    return d;
}

static void
conn_arm(struct rserver *s)
{
    if (s->state == RS_CONNECTING)
        return; /* the connect deadline first */
    if (s->head != NULL && s->head->deadline_ms > 0) {
        uint64_t d = conn_deadline(s);

        /* A deadline only moves later as the FIFO advances: one armed
         * earlier stays (conn_timer looks again when it fires), sparing
         * the wheel a move per reply. */
        if (s->timer.next == NULL || s->timer.deadline_ms > d)
            worker_timer_set(s->w, &s->timer, d);
    } else if (s->state != RS_CONNECTING) {
        worker_timer_del(s->w, &s->timer);
    }
}

/* Close the socket of <s>; it may connect again for the next request. */
static void
conn_reset(struct rserver *s)
{
    io_side_close(&s->side);
    s->side.eof_in = s->side.shut_out = s->side.failed = false;
    s->state = RS_IDLE;
    s->swallow = 0;
    s->out.off = s->out.len = 0;
    s->in.off = s->in.len = 0;
    s->reply_to = NULL;
    s->reply_left = 0;
    s->paused = false;
    s->open = NULL;
    worker_timer_del(s->w, &s->timer);
    worker_soon_cancel(s->w, &s->more);
    worker_soon_cancel(s->w, &s->flush);
}

/*
 * The connection failed (refused, reset, closed, timed out): every request
 * waiting on it gets the error of <kind> in place of its reply, and the
 * member's run of failures grows (auto_eject_hosts counts it).
 */
void
request_conn_fail(struct rserver *s, int kind, int err)
{
    struct rfrag *list = s->head, *later = s->lhead;
    struct rclient *from = s->stream_from;
    struct server *srv = s->m->server;
    struct pool *p = s->m->pool;
    struct stats_server *st = &srv->stats[s->w->id];

    /* Our own doing (a client gone mid-value, worker exit) is not the
     * member's failure; nor is a member closing a connection that had
     * nothing in flight (Redis' `timeout`): the next request reconnects. */
    if (err != ECONNABORTED && (s->nfifo > 0 || s->state == RS_CONNECTING ||
                                kind != PROTO_ERR_CLOSED)) {
        pool_member_failed(p, srv);
        log_info_limited(10, "pool %s: member %s (%s): %s; %zu requests failed",
                         p->name, srv->name, srv->addr.text, strerror(err),
                         s->nfifo);
        if (kind == PROTO_ERR_REFUSED)
            stats_add(&st->connect_failures, 1);
        if (kind == PROTO_ERR_TIMEOUT)
            stats_add(&st->request_timeouts, s->nfifo);
        else
            stats_add(&st->request_failures, s->nfifo);
    }
    /* We drop a connection the member may still read requests from:
     * with replicas, it must drop them too before it is repaired. */
    if (s->state == RS_READY && s->nfifo > 0 &&
        (err == ETIMEDOUT || err == EPROTO || err == ENOMEM))
        request_rep_conn_reset(s, s->nfifo);
    stats_sub(&st->inflight, s->nfifo);
    s->head = s->tail = s->lhead = s->ltail = NULL;
    s->nfifo = 0;
    if (from != NULL) {
        /* The client's value has nowhere to go: the rest of it is read
         * and dropped, its request already answered with the error. */
        from->stream_to = NULL;
        s->stream_from = NULL;
    }
    for (struct rfrag *f = later; f != NULL; f = f->next) {
        /* A client waiting to stream its value here: it never will. */
        if (f->streamer != NULL) {
            f->streamer->stream_to = NULL;
            f->streamer->stream_wait = false;
            worker_soon(s->w, &f->streamer->more);
            f->streamer = NULL;
        }
        buf_free(&f->pending);
    }
    conn_reset(s);
    while (list != NULL) {
        struct rfrag *f = list;
        list = f->next;
        f->next = NULL;
        request_frag_fail(f, kind);
    }
    while (later != NULL) {
        struct rfrag *f = later;
        later = f->next;
        f->next = NULL;
        request_frag_fail(f, kind);
    }
}

/*
 * The value being streamed into <s> will never be whole (its client went
 * or stalled): the connection cannot be used past it. The requests
 * written on it before the value fail with <kind>; those still waiting
 * unsent behind it go to a new connection, in their order.
 */
void
request_conn_abandon(struct rserver *s, int kind)
{
    struct rfrag *later = s->lhead;

    for (struct rfrag *f = later; f != NULL; f = f->next)
        s->nfifo--;
    s->lhead = s->ltail = NULL;
    s->stream_from = NULL;
    request_conn_fail(s, kind, ECONNABORTED);
    while (later != NULL) {
        struct rfrag *f = later;
        struct buf b = f->pending;
        struct rclient *streamer = f->streamer;

        later = f->next;
        f->next = NULL;
        f->streamer = NULL;
        memset(&f->pending, 0, sizeof(f->pending));
        request_conn_queue(s, f, b.data + b.off, buf_size(&b), streamer);
        buf_free(&b);
        if (streamer != NULL && !streamer->stream_wait)
            worker_soon(s->w, &streamer->more); /* its turn now */
    }
}

/* Start connecting <s>: the handshake (AUTH, SELECT) goes first. 0, or -1
 * with errno (the caller fails what it queued). */
static int
conn_open(struct rserver *s)
{
    struct server *srv = s->m->server;
    struct pool_snapshot *snap = pool_snapshot(s->m->pool);
    char hs[1024];
    unsigned replies = 0;
    int n, fd, dial;

    n = s->m->mode->handshake(snap, hs, sizeof(hs), &replies);
    if (n < 0) {
        errno = EMSGSIZE; /* a redis_auth of a kilobyte */
        return -1;
    }
    s->ident = false;
    if (snap->set.replicas > 1) {
        /* who the member is, before anything it answers counts: a new
         * identity is a restart (request_rep.c) */
        int k = request_rep_ident_request(snap, hs + n, sizeof(hs) - (size_t)n);

        if (k < 0) {
            errno = EMSGSIZE;
            return -1;
        }
        n += k;
        replies++;
        s->ident = true;
    }
    dial = engine_member_dial(srv, snap->set.tcpkeepalive, &fd);
    if (dial == ENGINE_NO_SOCKET)
        return -1;
    io_side_init(&s->side, fd, conn_event);
    if (dial == ENGINE_CONNECT_FAILED) {
        int err = errno;
        io_side_close(&s->side);
        errno = err;
        return -1;
    }
    if (io_side_register(s->w, &s->side) < 0) {
        int err = errno;
        io_side_close(&s->side);
        errno = err;
        return -1;
    }
    s->state = RS_CONNECTING;
    worker_timer_set(s->w, &s->timer,
                     s->w->now_ms + snap->set.connect_timeout_ms);
    if (n > 0) {
        /* ahead of anything queued */
        struct buf b = {0};
        if (buf_append(&b, hs, (size_t)n) < 0 ||
            buf_append(&b, s->out.data + s->out.off, buf_size(&s->out)) < 0) {
            buf_free(&b);
            io_side_close(&s->side);
            errno = ENOMEM;
            return -1;
        }
        buf_free(&s->out);
        s->out = b;
        s->swallow = replies;
    }
    return 0;
}

static struct rserver *
conn_create(struct worker *w, struct rmember *m)
{
    struct rserver *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->w = w;
    s->m = m;
    s->side.fd = -1;
    s->more.run = conn_more;
    s->flush.run = conn_flush_task;
    s->timer.on_expire = conn_timer;
    return s;
}

void
request_conn_destroy(struct rserver *s)
{
    request_conn_fail(s, PROTO_ERR_CLOSED, ECONNABORTED);
    buf_free(&s->out);
    buf_free(&s->in);
    worker_defer_free(s->w, s);
}

static void
fifo_push(struct rfrag **head, struct rfrag **tail, struct rfrag *f)
{
    f->next = NULL;
    if (*tail != NULL)
        (*tail)->next = f;
    else
        *head = f;
    *tail = f;
}

/* Write what is queued for the member. */
void
request_conn_flush(struct rserver *s)
{
    s->open = NULL; /* the batch is closed: its line goes now */
    while (s->state == RS_READY && buf_size(&s->out) > 0) {
        ssize_t n =
            io_side_send(&s->side, s->out.data + s->out.off, buf_size(&s->out));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                request_conn_fail(s, PROTO_ERR_CLOSED, errno);
            return;
        }
        s->out.off += (size_t)n;
        stats_add(&s->m->server->stats[s->w->id].bytes_out, (uint64_t)n);
    }
    if (buf_size(&s->out) == 0)
        s->out.off = s->out.len = 0;
    /* The client streaming to us may have stopped at OUT_HIGH. */
    if (s->stream_from != NULL && buf_size(&s->out) < OUT_HIGH / 2)
        worker_soon(s->w, &s->stream_from->more);
}

/*
 * Queue <len> bytes of fragment <f> on <s> (connecting it first if it is
 * idle); <streamer>: the client whose value follows them. Behind a value
 * being streamed (or other requests already waiting for one), they wait
 * in the fragment, in order: a member's connection carries one value at
 * a time, whole.
 */
void
request_conn_queue(struct rserver *s, struct rfrag *f, const char *buf,
                   size_t len, struct rclient *streamer)
{
    bool wait = s->stream_from != NULL || s->lhead != NULL;
    int kind = PROTO_ERR_REFUSED;
    uint32_t timeout = pool_snapshot(s->m->pool)->set.timeout_ms;

    s->open = NULL; /* other bytes follow the batch's line */
    f->conn = s;
    f->deadline_ms = timeout > 0 ? s->w->now_ms + timeout : 0;
    if (f->req->rep != NULL || f->req->job != NULL)
        /* a replicated request answers its client by its own clock
         * (request_rep.c); its connection goes only when stuck */
        f->deadline_ms = s->w->now_ms + request_stuck_ms(timeout);
    if (buf_append(wait ? &f->pending : &s->out, buf, len) < 0) {
        kind = PROTO_ERR_CLOSED;
        goto fail;
    }
    if (wait) {
        f->streamer = streamer;
        fifo_push(&s->lhead, &s->ltail, f);
    } else {
        fifo_push(&s->head, &s->tail, f);
        if (streamer != NULL)
            s->stream_from = streamer;
    }
    if (streamer != NULL) {
        streamer->stream_to = s;
        streamer->stream_wait = wait;
    }
    s->nfifo++;
    s->sent++;
    if (s->paused) {
        /* a slow client held the connection (conn_replies): nobody may
         * wait behind it, its value is read and held from now on */
        s->paused = false;
        worker_soon(s->w, &s->more);
    }
    if (s->state == RS_IDLE && conn_open(s) < 0) {
        int err = errno;

        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
            log_warn_limited(10,
                             "pool %s: no descriptor for a connection to "
                             "%s: %s",
                             s->m->pool->name, s->m->server->name,
                             strerror(err));
        request_conn_fail(s, kind, err);
        return;
    }
    /* Written once per loop iteration, whatever number of requests the
     * clients' input held for this member: one write, not one each. */
    if (s->state == RS_READY)
        worker_soon(s->w, &s->flush);
    if (s->head == f)
        conn_arm(s);
    return;
fail:
    f->conn = NULL;
    request_frag_fail(f, kind);
}

/* The client's value for <s> is through: what waited behind it follows,
 * up to the next request that streams a value of its own (whose client
 * may go on now). */
void
request_conn_stream_done(struct rserver *s)
{
    s->stream_from = NULL;
    while (s->lhead != NULL && s->stream_from == NULL) {
        struct rfrag *f = s->lhead;

        s->lhead = f->next;
        if (s->lhead == NULL)
            s->ltail = NULL;
        if (buf_append(&s->out, f->pending.data + f->pending.off,
                       buf_size(&f->pending)) < 0) {
            fifo_push(&s->head, &s->tail, f);
            request_conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            return;
        }
        buf_free(&f->pending);
        fifo_push(&s->head, &s->tail, f);
        if (f->streamer != NULL) {
            s->stream_from = f->streamer;
            f->streamer->stream_wait = false;
            worker_soon(s->w, &f->streamer->more);
            f->streamer = NULL;
        }
    }
    request_conn_flush(s);
    conn_arm(s);
}

/*
 * The reply <rp> at <buf> answers batch <f> and the fragments riding on
 * its line, next in the FIFO: an error reply is each one's; else the
 * mode gives each its own part.
 */
static void
conn_unbatch(struct rserver *s, struct rfrag *f, const char *buf,
             const struct proto_reply *rp)
{
    struct rfrag *frags[BATCH_MAX + 1];
    size_t n = 1;

    frags[0] = f;
    while (n <= f->riders && s->head != NULL) {
        struct rfrag *g = s->head;

        s->head = g->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->nfifo--;
        g->next = NULL;
        stats_sub(&s->m->server->stats[s->w->id].inflight, 1);
        request_latency(s, g);
        frags[n++] = g;
    }
    if (rp->error || rp->body > 0 || n != f->riders + 1) {
        /* (a batch's reply is never streamed; nor are riders missing) */
        for (size_t i = 0; i < n; i++) {
            frags[i]->error = true;
            request_frag_reply(frags[i], buf, (size_t)rp->len);
        }
    } else {
        s->m->mode->unbatch(buf, (size_t)rp->len, frags, n);
    }
    for (size_t i = 0; i < n; i++)
        request_frag_done(frags[i]);
    conn_arm(s);
}

/* The next <len> bytes of <buf> belong to the value streaming to
 * <s>->reply_to: hand over what is there. 0, or -1 when <s> failed. */
static int
reply_stream(struct rserver *s, const char *buf, size_t len)
{
    size_t n = len < s->reply_left ? len : (size_t)s->reply_left;
    struct rfrag *to = s->reply_to;

    if (request_frag_data(to, buf, n) < 0) {
        request_conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
        return -1;
    }
    s->in.off += n;
    s->reply_left -= n;
    if (s->reply_left == 0) {
        s->reply_to = NULL;
        to->req->streaming = false;
        request_frag_done(to);
    } else if (to->req->client != NULL) {
        request_client_flush(to->req->client);
        /* A slow client: stop reading the member until it takes what it
         * has -- but only while no other request waits on this
         * connection: the replies behind the value can only be read
         * through it, and a slow client must never make another one's
         * request wait, or fail at its timeout. Then the value is held
         * for the slow client instead (at most its size:
         * request_conn_queue lifts the pause when a request comes). */
        if (buf_size(&to->req->reply) > REPLY_HIGH && s->head == NULL)
            s->paused = true;
    }
    return 0;
}

/* <rp> (at <buf>) answers AUTH or SELECT of <s>'s handshake: an error
 * means the member refuses us (a wrong redis_auth): every request fails.
 * 0, or -1 when <s> failed. */
static int
reply_handshake(struct rserver *s, const char *buf,
                const struct proto_reply *rp)
{
    s->swallow--;
    s->in.off += rp->len;
    if (rp->error) {
        log_warn_limited(10, "pool %s: member %s refused the handshake: %.*s",
                         s->m->pool->name, s->m->server->name,
                         (int)(rp->len > 2 ? rp->len - 2 : rp->len), buf);
        request_conn_fail(s, PROTO_ERR_CLOSED, EACCES);
        return -1;
    }
    return 0;
}

/*
 * Parse replies from <s>'s input and hand each to the oldest fragment
 * waiting on it (FIFO: a member answers a connection's requests in the
 * order it got them). A large value streams: its head is delivered at
 * once, its bytes as they arrive.
 */
static void
conn_replies(struct rserver *s)
{
    const struct proto *pr = s->m->mode->proto;

    while (buf_size(&s->in) > 0 && !s->paused) {
        struct rfrag *f;
        struct proto_reply rp = {0};
        struct proto_request ctx = {0};
        const char *buf = s->in.data + s->in.off;
        size_t len = buf_size(&s->in);
        int st;

        if (s->reply_left > 0) {
            if (reply_stream(s, buf, len) < 0)
                return;
            continue;
        }
        if (s->swallow == 1 && s->ident) {
            /* the identity: read by request_rep.c (a memcached's stats
             * are many lines: its own parse) */
            long k = request_rep_ident_reply(s, buf, len);

            if (k == 0)
                return;
            if (k < 0) {
                request_conn_fail(s, PROTO_ERR_CLOSED, EPROTO);
                return;
            }
            s->swallow = 0;
            s->ident = false;
            s->in.off += (size_t)k;
            continue;
        }
        if (s->head != NULL) {
            /* what was asked, for a protocol whose replies depend on it */
            ctx.command = s->head->gate != NULL ? s->head->gate->command
                                                : s->head->req->command;
            ctx.flags = s->head->gate != NULL ? 0 : s->head->req->flags;
        }
        st = pr->parse_reply(buf, len, s->head != NULL ? &ctx : NULL, &rp);
        if (st == PROTO_AGAIN)
            return;
        if (st != PROTO_OK) {
            log_warn_limited(10,
                             "pool %s: member %s sent a malformed reply: "
                             "closing the connection",
                             s->m->pool->name, s->m->server->name);
            request_conn_fail(s, PROTO_ERR_CLOSED, EPROTO);
            return;
        }
        if (s->swallow > 0) {
            if (reply_handshake(s, buf, &rp) < 0)
                return;
            continue;
        }
        f = s->head;
        if (f == NULL) {
            /* a reply nobody asked for: the stream is out of step */
            request_conn_fail(s, PROTO_ERR_CLOSED, EPROTO);
            return;
        }
        s->head = f->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->nfifo--;
        f->next = NULL;
        s->in.off += rp.len;
        f->error = rp.error;
        if (rp.error)
            stats_add(&s->m->server->stats[s->w->id].request_errors, 1);
        request_latency(s, f);
        if (rp.member_failure) {
            pool_member_failed(s->m->pool, s->m->server);
        } else if (atomic_load_explicit(&s->m->server->fails,
                                        memory_order_relaxed) != 0) {
            atomic_store_explicit(&s->m->server->fails, 0,
                                  memory_order_relaxed);
        }
        stats_sub(&s->m->server->stats[s->w->id].inflight, 1);
        if (f->riders > 0) {
            conn_unbatch(s, f, buf, &rp);
            continue;
        }
        if (request_frag_data(f, buf, (size_t)rp.len) < 0) {
            request_conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            request_frag_fail(f, PROTO_ERR_CLOSED);
            return;
        }
        if (rp.body > 0) {
            s->reply_to = f;
            s->reply_left = rp.body;
            f->req->streaming = true;
            if (f->req->client != NULL)
                request_client_flush(f->req->client);
        } else {
            request_frag_done(f);
        }
        conn_arm(s);
    }
    if (buf_size(&s->in) == 0)
        s->in.off = s->in.len = 0;
}

void
request_conn_read(struct rserver *s)
{
    int reads = 0;

    while (s->side.readable && !s->side.eof_in && !s->paused) {
        ssize_t n;

        if (reads++ == READS_PER_EVENT) {
            worker_soon(s->w, &s->more);
            return;
        }
        if (buf_reserve(&s->in, 16 * 1024) < 0) {
            request_conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            return;
        }
        n = io_side_read(&s->side, s->in.data + s->in.len,
                         s->in.cap - s->in.len);
        if (n < 0) {
            request_conn_fail(s, PROTO_ERR_CLOSED, errno);
            return;
        }
        if (n == 0)
            break;
        s->in.len += (size_t)n;
        s->heard_ms = s->w->now_ms;
        stats_add(&s->m->server->stats[s->w->id].bytes_in, (uint64_t)n);
        conn_replies(s);
        if (s->state == RS_IDLE)
            return; /* failed while handing replies out */
    }
    if (s->side.eof_in) {
        /* The member closed: what it did not answer fails. */
        request_conn_fail(s, PROTO_ERR_CLOSED, ECONNRESET);
    }
}

static void
conn_flush_task(struct worker *w, struct worker_task *t)
{
    struct rserver *s = WORKER_OF(t, struct rserver, flush);

    (void)w;
    if (s->state == RS_READY)
        request_conn_flush(s);
}

static void
conn_more(struct worker *w, struct worker_task *t)
{
    struct rserver *s = WORKER_OF(t, struct rserver, more);

    (void)w;
    if (s->state != RS_READY)
        return;
    if (!s->paused)
        conn_replies(s);
    if (s->state == RS_READY)
        request_conn_read(s);
}

/* Our end of <s> as the member sees it ("ip:port"), for request_rep.c. */
static void
conn_name(struct rserver *s)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "";

    s->laddr[0] = 0;
    if (getsockname(s->side.fd, (struct sockaddr *)&ss, &len) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;

        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(s->laddr, sizeof(s->laddr), "%s:%u", host,
                 (unsigned)ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;

        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(s->laddr, sizeof(s->laddr), "%s:%u", host,
                 (unsigned)ntohs(a->sin6_port));
    }
}

static void
conn_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct rserver *s = WORKER_OF(ev, struct rserver, side.ev);

    (void)w;
    if (s->state == RS_IDLE)
        return; /* failed earlier in this batch */
    io_side_edges(&s->side, events);
    if (s->state == RS_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (!(events & (EPOLLERR | EPOLLHUP))) {
            if (!(events & EPOLLOUT))
                return;
            if (io_connected_to_self(s->side.fd, &s->m->server->addr.sa)) {
                /* the member is down and we reached our own port: every
                 * request would come back as its reply */
                log_info_limited(10,
                                 "pool %s: member %s (%s): a connect reached "
                                 "our own port (nobody listens there): "
                                 "refused",
                                 s->m->pool->name, s->m->server->name,
                                 s->m->server->addr.text);
                request_conn_fail(s, PROTO_ERR_REFUSED, ECONNREFUSED);
                return;
            }
            s->state = RS_READY;
            s->heard_ms = s->w->now_ms;
            conn_name(s);
            stats_add(&s->m->server->stats[s->w->id].conns_total, 1);
            worker_timer_del(s->w, &s->timer);
            conn_arm(s);
        } else {
            if (getsockopt(s->side.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
            request_conn_fail(s, PROTO_ERR_REFUSED, err ? err : ECONNREFUSED);
            return;
        }
    }
    if (events & EPOLLERR) {
        request_conn_read(s); /* what it said before the reset is still ours */
        if (s->state != RS_IDLE)
            request_conn_fail(s, PROTO_ERR_CLOSED, ECONNRESET);
        return;
    }
    if (events & EPOLLOUT)
        request_conn_flush(s);
    if (s->state == RS_READY)
        request_conn_read(s);
}

static void
conn_timer(struct worker *w, struct timer *t)
{
    struct rserver *s = WORKER_OF(t, struct rserver, timer);

    if (s->state == RS_CONNECTING) {
        request_conn_fail(s, PROTO_ERR_TIMEOUT, ETIMEDOUT);
        return;
    }
    if (s->head != NULL && s->head->deadline_ms > 0 &&
        conn_deadline(s) <= w->now_ms) {
        /* The oldest request waited longer than `timeout`: the replies
         * behind it cannot overtake it, so the connection goes (as
         * twemproxy does) and everything on it gets the timeout error.
         * A replicated request's copy waits longer: its client has its
         * answer by the pool's timeout anyway, and a connection kept
         * keeps the member's order (request_rep.c); only a member that
         * said nothing for request_stuck_ms loses it. */
        request_conn_fail(s, PROTO_ERR_TIMEOUT, ETIMEDOUT);
        return;
    }
    conn_arm(s);
}

/* ---- sending ------------------------------------------------------------- */

void
request_preconnect(struct worker *w, struct pool *p)
{
    struct pool_snapshot *snap = pool_snapshot(p);
    struct rworker *rw;

    if (!snap->set.preconnect || (rw = request_rworker(w)) == NULL)
        return;
    for (size_t i = 0; i < snap->n; i++) {
        struct rmember *m = request_member_get(rw, snap->servers[i], p,
                                               snap->set.server_connections,
                                               request_mode_of(snap));

        for (size_t c = 0; m != NULL && c < m->nconns; c++) {
            if (m->conns[c] == NULL &&
                (m->conns[c] = conn_create(w, m)) == NULL)
                break;
            if (m->conns[c]->state == RS_IDLE && conn_open(m->conns[c]) < 0)
                log_info_limited(10,
                                 "pool %s: preconnect to member %s (%s): %s",
                                 p->name, snap->servers[i]->name,
                                 snap->servers[i]->addr.text, strerror(errno));
        }
    }
}

struct pool_snapshot *
request_snapshot(struct rclient *c)
{
    return pool_snapshot(c->pool);
}

/* The connection to member <srv> that fragment <f> of <r> goes on (by
 * <hash> among its server_connections), counted as sent; NULL when none
 * can be had (<f> is answered with the error). */
struct rserver *
request_send_on(struct worker *w, struct pool *p,
                const struct request_mode *mode, struct rfrag *f,
                struct server *srv, uint64_t hash)
{
    struct rworker *rw = request_rworker(w);
    struct rmember *m;
    size_t i;

    m = rw && !rw->closing
            ? request_member_get(rw, srv, p,
                                 pool_snapshot(p)->set.server_connections, mode)
            : NULL;
    if (m == NULL) {
        request_frag_fail(f, PROTO_ERR_CLOSED);
        return NULL;
    }
    i = m->nconns > 1 ? (size_t)(hash % m->nconns) : 0;
    if (m->conns[i] == NULL && (m->conns[i] = conn_create(w, m)) == NULL) {
        request_frag_fail(f, PROTO_ERR_CLOSED);
        return NULL;
    }
    stats_add(&srv->stats[w->id].inflight, 1);
    stats_add(&p->stats[w->id].fragments, 1);
    stats_add(&srv->stats[w->id].requests, 1);
    return m->conns[i];
}

struct rserver *
request_conn_of(struct worker *w, const struct server *srv,
                const struct request_mode *mode, uint64_t hash)
{
    struct rworker *rw = w->requests;

    if (rw == NULL)
        return NULL;
    for (struct rmember *m = rw->table[srv->id % MEMBER_BUCKETS]; m != NULL;
         m = m->next)
        if (m->id == srv->id && m->mode == mode)
            return m->conns[m->nconns > 1 ? (size_t)(hash % m->nconns) : 0];
    return NULL;
}

/* The connection to member <srv> that fragment <f> of <r> goes on (by
 * <hash> among its server_connections), counted as sent; NULL when none
 * can be had (<f> is answered with the error). */
struct rserver *
request_send_to(struct rreq *r, struct rfrag *f, struct server *srv,
                uint64_t hash)
{
    return request_send_on(r->client->w, r->client->pool, r->mode, f, srv,
                           hash);
}

void
request_send_batch(struct rreq *r, struct rfrag *f, struct server *srv,
                   uint64_t hash, int kind, const char *cmd, const char *keys,
                   size_t keyslen)
{
    struct rserver *s = request_send_to(r, f, srv, hash);
    struct rfrag *o;
    size_t cmdlen = strlen(cmd), nkeys = 0;
    struct buf line = {0};

    if (s == NULL)
        return;
    for (size_t i = 0; i < keyslen; i++)
        nkeys += keys[i] != ' ' && (i == 0 || keys[i - 1] == ' ');
    f->batch = kind;
    if (buf_append(&f->bkeys, keys, keyslen) < 0) {
        stats_sub(&srv->stats[s->w->id].inflight, 1);
        request_frag_fail(f, PROTO_ERR_CLOSED);
        return;
    }
    o = s->open;
    if (o != NULL && o->batch == kind && o->riders < BATCH_MAX &&
        s->open_len + 1 + keyslen <= BATCH_LINE_MAX &&
        s->open_keys + nkeys <= BATCH_KEYS_MAX && buf_size(&s->out) >= 2) {
        /* ride on <o>'s line: " <keys>" before its CRLF */
        uint32_t timeout = request_snapshot(r->client)->set.timeout_ms;

        s->out.len -= 2;
        if (buf_append(&s->out, " ", 1) < 0 ||
            buf_append(&s->out, keys, keyslen) < 0 ||
            buf_append(&s->out, "\r\n", 2) < 0) {
            stats_sub(&srv->stats[s->w->id].inflight, 1);
            request_conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            request_frag_fail(f, PROTO_ERR_CLOSED);
            return;
        }
        s->open_len += 1 + keyslen;
        s->open_keys += nkeys;
        o->riders++;
        f->conn = s;
        f->deadline_ms = timeout > 0 ? s->w->now_ms + timeout : 0;
        fifo_push(&s->head, &s->tail, f);
        s->nfifo++;
        s->sent++;
        return;
    }
    if (buf_append(&line, cmd, cmdlen) < 0 || buf_append(&line, " ", 1) < 0 ||
        buf_append(&line, keys, keyslen) < 0 ||
        buf_append(&line, "\r\n", 2) < 0) {
        buf_free(&line);
        stats_sub(&srv->stats[s->w->id].inflight, 1);
        request_frag_fail(f, PROTO_ERR_CLOSED);
        return;
    }
    request_conn_queue(s, f, line.data, line.len, NULL);
    if (s->tail == f && s->stream_from == NULL && s->lhead == NULL) {
        s->open = f; /* others may join it until the flush */
        s->open_len = line.len - 2;
        s->open_keys = nkeys;
    }
    buf_free(&line);
}

void
request_frag_reply(struct rfrag *f, const char *data, size_t len)
{
    if (request_frag_data(f, data, len) < 0 && f->req->client != NULL)
        f->req->client->closing = true; /* out of memory: close, in order */
}

void
request_send(struct rreq *r, struct rfrag *f, struct server *srv, uint64_t hash,
             const char *buf, size_t len, uint64_t stream)
{
    struct rclient *c = r->client;
    struct rserver *s;

    if (f->gates != NULL || c->hhead != NULL) {
        request_gate_hold(r, f, srv, hash, buf, len, stream);
        return;
    }
    s = request_send_to(r, f, srv, hash);
    if (s == NULL)
        return;
    /* The client's next <stream> bytes are this value: they go to <s> as
     * they come (once <s> carries no other value), and nothing else is
     * sent to it meanwhile. A request that failed at once has its value
     * read and dropped. */
    INVARIANT(c->stream_to == NULL && c->stream_left == 0);
    c->stream_left = stream;
    request_conn_queue(s, f, buf, len, stream > 0 ? c : NULL);
}

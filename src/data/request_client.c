/* request_client.c -- the request engine's clients: reading and parsing
 * their requests (the mode's parser), dispatching them, values streamed
 * into a member, replies written back in request order, pipelining
 * limits, idle and linger timers, and closing without losing a reply.
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

/* ---- clients ------------------------------------------------------------- */

static void request_client_event(struct worker *w, struct ev *ev,
                                 uint32_t events);

/* Write the replies that are ready, in order: the oldest request's first;
 * a streamed value as far as it has come. */
/*
 * Write the replies that are ready, from the oldest request on, in one
 * writev(): a pipelining client gets a batch of replies per system call,
 * not one each. Returns 0, or -1 when the client is gone (closed here).
 */
static int
client_writev(struct rclient *c)
{
    struct iovec iov[WRITE_BATCH];
    struct rreq *r;
    size_t n = 0;
    ssize_t w;

    for (r = c->head; r != NULL && n < WRITE_BATCH; r = r->next) {
        if (buf_size(&r->reply) > 0) {
            iov[n].iov_base = r->reply.data + r->reply.off;
            iov[n].iov_len = buf_size(&r->reply);
            n++;
        }
        if (!r->done)
            break; /* a reply still coming stops the batch */
    }
    if (n == 0)
        return 0;
    do
        w = io_side_sendv(&c->side, iov, (int)n);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        if (errno == EAGAIN)
            return 0; /* an output edge will come */
        request_client_close(c);
        return -1;
    }
    stats_add(&c->pool->stats[c->w->id].bytes_out, (uint64_t)w);
    for (r = c->head; r != NULL && w > 0; r = r->next) {
        size_t k =
            buf_size(&r->reply) < (size_t)w ? buf_size(&r->reply) : (size_t)w;
        r->reply.off += k;
        w -= (ssize_t)k;
    }
    return 0;
}

void
request_client_flush(struct rclient *c)
{
    if (c->closed || client_writev(c) < 0)
        return;
    while (c->head != NULL && !c->closed) {
        struct rreq *r = c->head;

        if (buf_size(&r->reply) > 0) {
            /* the batch ran out, or the socket is full */
            if (client_writev(c) < 0 || buf_size(&r->reply) > 0)
                return;
        }
        /* A member paused for this reply can go on. */
        for (size_t i = 0; i < r->nfrags; i++) {
            struct rserver *s = r->frags[i].conn;
            if (s != NULL && s->paused && s->reply_to == &r->frags[i]) {
                s->paused = false;
                worker_soon(s->w, &s->more);
            }
        }
        if (!r->done)
            return;
        c->head = r->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->nreqs--;
        if (r->quit)
            c->closing = true;
        request_req_free(r);
        /* room again: parse what waited (MAX_PIPELINE) */
        if (c->nreqs == MAX_PIPELINE - 1)
            worker_soon(c->w, &c->more);
    }
    if (c->closing && c->head == NULL && !c->closed && !c->lingering) {
        if (c->side.eof_in) {
            request_client_close(c);
            return;
        }
        /* We close (QUIT, bad input) while the client may still be
         * sending: closing now with its bytes unread makes our kernel
         * reset the connection, and its kernel drop our last reply unread.
         * Send FIN, read and drop what comes, close at its FIN or after
         * a bound. */
        io_side_shutdown(&c->side);
        c->lingering = true;
        worker_timer_set(c->w, &c->timer, c->w->now_ms + LINGER_MS);
        worker_soon(c->w, &c->more);
    }
}

/* Read and drop what a closing client still sends; close at its FIN. */
static void
client_linger(struct rclient *c)
{
    char *junk = c->w->scratch;

    while (c->side.readable && !c->side.eof_in) {
        ssize_t n = io_side_read(&c->side, junk, WORKER_SCRATCH);
        if (n < 0) {
            request_client_close(c);
            return;
        }
        if (n == 0)
            break;
    }
    if (c->side.eof_in)
        request_client_close(c);
}

static void
client_timer(struct worker *w, struct timer *t)
{
    struct rclient *c = WORKER_OF(t, struct rclient, timer);
    struct rserver *s = c->stream_to;

    if (c->lingering) {
        request_client_close(c);
        return;
    }
    c->stall_armed = false;
    if (s == NULL || c->stream_wait || c->stream_left == 0)
        return; /* the value went through (or failed) meanwhile */
    if (buf_size(&s->out) > OUT_HIGH / 2 ||
        w->now_ms < c->stream_seen_ms + STREAM_STALL_MS) {
        /* the member is the slow one, or bytes came meanwhile */
        c->stall_armed = true;
        worker_timer_set(w, &c->timer, w->now_ms + STREAM_STALL_MS);
        return;
    }
    log_info_limited(10,
                     "pool %s: a client stopped in the middle of a value "
                     "for member %s: the member connection is reset",
                     c->pool->name, s->m->server->name);
    request_client_unstream(c, PROTO_ERR_TIMEOUT);
    worker_soon(w, &c->more);
}

/* A new request of <c>, at the end of its queue. */
static struct rreq *
client_push(struct rclient *c)
{
    struct rreq *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->client = c;
    r->mode = c->mode;
    r->command = -1;
    r->start_ms = c->w->now_ms;
    r->start_us = clock_us();
    if (c->tail != NULL)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->nreqs++;
    return r;
}

/* Answer a request that could not be parsed with <err>; with <fatal>,
 * nothing more is read and the connection closes once it is written (the
 * stream cannot be trusted past it), as Redis does. */
static void
client_bad(struct rclient *c, const char *err, bool fatal)
{
    struct rreq *r = client_push(c);

    if (r == NULL) {
        request_client_close(c);
        return;
    }
    request_error(r, PROTO_ERR_REQUEST, err);
    stats_add(&c->pool->stats[c->w->id].requests, 1);
    stats_add(&c->pool->stats[c->w->id].refused, 1);
    if (fatal) {
        stats_add(&c->pool->stats[c->w->id].protocol_errors, 1);
        r->quit = true;
        c->closing = true;
    }
}

/* Grow the parse arrays of <c> to what <rq> asked for. 0 or -1. */
static int
client_grow(struct rclient *c, struct proto_request *rq)
{
    if (rq->nkeys > c->keycap) {
        struct proto_span *k = realloc(c->keys, rq->nkeys * sizeof(*k));
        if (k == NULL)
            return -1;
        c->keys = k;
        c->keycap = rq->nkeys;
    }
    if (rq->nargs > c->argcap) {
        struct proto_span *a = realloc(c->args, rq->nargs * sizeof(*a));
        if (a == NULL)
            return -1;
        c->args = a;
        c->argcap = rq->nargs;
    }
    if (rq->scratchlen > c->scratchcap) {
        char *s = realloc(c->scratch, rq->scratchlen);
        if (s == NULL)
            return -1;
        c->scratch = s;
        c->scratchcap = rq->scratchlen;
    }
    return 0;
}

/* Forward (or drop) the bytes of a value being streamed. Returns false
 * while the value is not through. */
static bool
client_stream(struct rclient *c)
{
    bool progress = false;

    if (c->stream_wait || c->stream_held)
        return false; /* another client's value goes first, or a
                         migration's gate */
    while (c->stream_left > 0 && buf_size(&c->in) > 0) {
        size_t n = buf_size(&c->in);
        struct rserver *s = c->stream_to;

        if (n > c->stream_left)
            n = (size_t)c->stream_left;
        if (s != NULL) {
            if (buf_size(&s->out) > OUT_HIGH)
                return false; /* back-pressure: request_conn_flush wakes us */
            if (buf_append(&s->out, c->in.data + c->in.off, n) < 0) {
                request_conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
                continue;
            }
        }
        c->in.off += n;
        c->stream_left -= n;
        progress = true;
        if (s != NULL)
            request_conn_flush(s);
    }
    if (c->stream_left > 0) {
        /* Watched while it holds the member connection (not needed with
         * `timeout`: the member's deadline covers it). */
        if (c->stream_to != NULL && !c->stream_wait && !c->lingering &&
            request_snapshot(c)->set.timeout_ms == 0) {
            if (progress || !c->stall_armed)
                c->stream_seen_ms = c->w->now_ms;
            if (!c->stall_armed) {
                c->stall_armed = true;
                worker_timer_set(c->w, &c->timer,
                                 c->w->now_ms + STREAM_STALL_MS);
            }
        }
        return false;
    }
    if (c->stall_armed) {
        c->stall_armed = false;
        if (!c->lingering)
            worker_timer_del(c->w, &c->timer);
    }
    if (c->stream_to != NULL) {
        struct rserver *s = c->stream_to;
        c->stream_to = NULL;
        request_conn_stream_done(s);
    }
    return true;
}

/*
 * Route request <r> (<rq>, its bytes at <buf>), parsed in <snap>. A plain
 * one (one key, sent and answered as it is) the engine routes alone when
 * nothing else is in play: no migration gate, no replica set, no client
 * state the mode keeps (AUTH, a refused MULTI block). The mode gets the
 * rest: split, fan-out, local answers, noreply, its own checks.
 */
static int
client_dispatch(struct rclient *c, struct rreq *r,
                const struct pool_snapshot *snap, const char *buf,
                const struct proto_request *rq)
{
    const char *key, *why;
    struct server *s;
    uint64_t hash;
    size_t len;

    if (!(rq->flags & PROTO_REQ_PLAIN) || !c->authed || c->multi_refused ||
        snap->mig != NULL || snap->set.replicas > 1)
        return c->mode->dispatch(c, r, snap, buf, rq);
    key = buf + rq->keys[0].off;
    len = rq->keys[0].len;
    s = request_key_member(snap, key, len, &hash, &why);
    request_hot_note(r, snap, key, len);
    if (s == NULL) {
        request_error(r, PROTO_ERR_NO_MEMBER, why);
        return 0;
    }
    if (request_frags(r, 1) < 0)
        return -1;
    request_send(r, &r->frags[0], s, hash, buf, rq->head, rq->body);
    return 0;
}

/* Parse and dispatch what <c> has read. */
static void
client_parse(struct rclient *c)
{
    struct pool_snapshot *snap = request_snapshot(c);
    /* the client's protocol, fixed at its accept: a reload that changes
     * the pool's mode applies to the clients that come after it */
    const struct proto *pr = c->mode->proto;

    while (!c->closing && !c->closed && c->nreqs < MAX_PIPELINE) {
        struct proto_request rq = {0};
        struct rreq *r;
        int st;

        if (c->stream_left > 0 && !client_stream(c))
            break;
        if (buf_size(&c->in) == 0)
            break;
        rq.keys = c->keys;
        rq.keycap = c->keycap;
        rq.args = c->args;
        rq.argcap = c->argcap;
        rq.scratch = c->scratch;
        rq.scratchcap = c->scratchcap;
        rq.max = snap->set.client_max_request;
        rq.value_max = snap->set.item_size_max;
        rq.whole = snap->set.replicas > 1;
        rq.progress = &c->progress;
        st = pr->parse_request(c->in.data + c->in.off, buf_size(&c->in), &rq);
        if (st != PROTO_AGAIN || rq.head > 0)
            memset(&c->progress, 0, sizeof(c->progress)); /* a new one */
        if (st == PROTO_KEYS) {
            if (client_grow(c, &rq) < 0) {
                request_client_close(c);
                return;
            }
            continue;
        }
        if (st == PROTO_AGAIN) {
            if (rq.head > 0)
                c->in.off += rq.head; /* skipped (an empty inline line) */
            else
                break;
            continue;
        }
        if (st == PROTO_FATAL) {
            client_bad(c, rq.err ? rq.err : "Protocol error", true);
            break;
        }
        if (st == PROTO_INVALID) {
            client_bad(c, rq.err ? rq.err : "Protocol error", false);
            c->in.off += rq.head;
            continue;
        }
        if (rq.nargs == 0 && rq.body == 0) {
            /* nothing was asked (an empty inline line, "*0"): the mode's
             * servers answer nothing, neither do we */
            c->in.off += rq.head;
            continue;
        }
        r = client_push(c);
        if (r == NULL) {
            request_client_close(c);
            return;
        }
        r->command = rq.command;
        r->flags = rq.flags;
        stats_add(&c->pool->stats[c->w->id].bytes_in, rq.head + rq.body);
        stats_add(&c->pool->stats[c->w->id].requests, 1);
        if (client_dispatch(c, r, snap, c->in.data + c->in.off, &rq) < 0) {
            request_client_close(c);
            return;
        }
        if (r->nfrags == 0) {
            /* chashd answered it: with an error (refused), or not */
            bool err = request_reply_is_error(r);
            stats_add(err ? &c->pool->stats[c->w->id].refused
                          : &c->pool->stats[c->w->id].local,
                      1);
        }
        if (c->closed)
            return;
        c->in.off += rq.head;
        if (r->quit) {
            /* As Redis: nothing after QUIT runs, even in the same read;
             * the replies before it are written, then the close. */
            c->closing = true;
            c->in.off = c->in.len = 0;
            break;
        }
        if (rq.body > 0 && c->stream_left == 0) {
            /* Not forwarded (refused or answered locally): dropped. */
            c->stream_left = rq.body;
            c->stream_to = NULL;
        }
    }
    if (buf_size(&c->in) == 0)
        c->in.off = c->in.len = 0;
    request_client_flush(c);
}

void
request_client_read(struct rclient *c)
{
    int reads = 0;

    while (c->side.readable && !c->side.eof_in && !c->closing &&
           c->nreqs < MAX_PIPELINE) {
        ssize_t n;

        if (c->stream_to != NULL &&
            (c->stream_wait || buf_size(&c->stream_to->out) > OUT_HIGH))
            return; /* back-pressure from the member's connection */
        if (reads++ == READS_PER_EVENT) {
            worker_soon(c->w, &c->more);
            return;
        }
        if (buf_reserve(&c->in, 16 * 1024) < 0) {
            request_client_close(c);
            return;
        }
        n = io_side_read(&c->side, c->in.data + c->in.len,
                         c->in.cap - c->in.len);
        if (n < 0) {
            request_client_close(c);
            return;
        }
        if (n == 0)
            break;
        c->in.len += (size_t)n;
        client_parse(c);
        if (c->closed)
            return;
    }
    if (c->side.eof_in && !c->closed) {
        /* The client sent FIN: answer what it asked, then close. A value
         * it was in the middle of, and has not sent whole, fails (and
         * the member connection it held with it). */
        if (c->stream_left > buf_size(&c->in)) {
            request_client_unstream(c, PROTO_ERR_CLOSED);
            c->stream_left = 0;
            c->in.off = c->in.len = 0;
        } else if (c->stream_left > 0) {
            return; /* all here: it goes on its turn, the close after */
        }
        c->closing = true;
        request_client_flush(c);
    }
}

static void
client_more(struct worker *w, struct worker_task *t)
{
    struct rclient *c = WORKER_OF(t, struct rclient, more);

    (void)w;
    if (c->closed)
        return;
    if (c->lingering) {
        client_linger(c);
        return;
    }
    client_parse(c);
    if (!c->closed)
        request_client_read(c);
}

/* Replies are ready: written, without going through the parser unless
 * input waits (for room in the pipeline, or it came meanwhile). */
static void
client_ready(struct worker *w, struct worker_task *t)
{
    struct rclient *c = WORKER_OF(t, struct rclient, ready);

    if (c->closed)
        return;
    if (!c->lingering)
        request_client_flush(c);
    if (!c->closed &&
        (c->lingering || buf_size(&c->in) > 0 || c->side.readable))
        client_more(w, &c->more);
}

static void
request_client_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct rclient *c = WORKER_OF(ev, struct rclient, side.ev);

    (void)w;
    if (c->closed)
        return;
    io_side_edges(&c->side, events);
    if (events & EPOLLERR) {
        request_client_close(c);
        return;
    }
    if (c->lingering) {
        client_linger(c);
        return;
    }
    if (events & EPOLLOUT)
        request_client_flush(c);
    if (!c->closed)
        request_client_read(c);
}

/*
 * <c> will not send the rest of the value it streams (it closed, or
 * stalled): a value that never started leaves its member's queue unsent;
 * one under way fails its member connection (request_conn_abandon), its own
 * request and those written before it with <kind>. What is left of the
 * value, should it still come, is read and dropped.
 */
void
request_client_unstream(struct rclient *c, int kind)
{
    struct rserver *s = c->stream_to;

    if (c->stall_armed) {
        c->stall_armed = false;
        if (!c->lingering)
            worker_timer_del(c->w, &c->timer);
    }
    if (s == NULL)
        return;
    c->stream_to = NULL;
    if (c->stream_wait) {
        struct rfrag **pp = &s->lhead, *prev = NULL;

        c->stream_wait = false;
        while (*pp != NULL && (*pp)->streamer != c) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp != NULL) {
            struct rfrag *f = *pp;

            *pp = f->next;
            if (s->ltail == f)
                s->ltail = prev;
            s->nfifo--;
            f->streamer = NULL;
            f->next = NULL;
            buf_free(&f->pending);
            request_frag_fail(f, kind);
        }
        return;
    }
    request_conn_abandon(s, kind);
}

/*
 * Close <c>. Requests still waiting for members stay alive as orphans
 * until their replies come (a member answers in order: its FIFO must keep
 * them), then go with their last fragment.
 */
void
request_client_close(struct rclient *c)
{
    struct rreq *r = c->head;

    if (c->closed)
        return;
    c->closed = true;
    /* first: failing its value's connection answers its requests, which
     * schedules <ready>, cancelled here */
    request_client_unstream(c, PROTO_ERR_CLOSED);
    request_client_abandon(c);
    worker_soon_cancel(c->w, &c->more);
    worker_soon_cancel(c->w, &c->ready);
    worker_timer_del(c->w, &c->timer);
    while (r != NULL) {
        struct rreq *next = r->next;
        if (r->pending > 0) {
            if (c->mode->release != NULL)
                c->mode->release(r);
            r->mode_data = NULL;
            r->client = NULL; /* its last fragment frees it */
        } else {
            request_req_free(r);
        }
        r = next;
    }
    c->head = c->tail = NULL;
    io_side_close(&c->side);
    worker_conn_del(&c->link);
    atomic_fetch_sub_explicit(&c->pool->active, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&c->w->nconns, 1, memory_order_relaxed);
    pool_unref(c->pool);
    c->pool = NULL;
    buf_free(&c->in);
    free(c->keys);
    free(c->args);
    free(c->scratch);
    free(c->name);
    worker_defer_free(c->w, c);
}

static void
link_close(struct worker *w, struct worker_conn *l)
{
    (void)w;
    request_client_close(WORKER_OF(l, struct rclient, link));
}

void
request_accept(struct worker *w, struct listener *l, int fd,
               const struct sockaddr *peer, socklen_t peerlen)
{
    struct pool *p = l->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    struct rworker *rw = request_rworker(w);
    struct rclient *c;

    (void)peer;
    (void)peerlen;
    if (!engine_admit(w, p, fd))
        return;
    c = rw != NULL ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_relaxed);
        close(fd);
        return;
    }
    io_side_init(&c->side, fd, request_client_event);
    c->w = w;
    c->pool = p;
    pool_ref(p);
    c->mode = request_mode_of(snap);
    c->id = ++rw->next_client_id;
    c->link.close = link_close;
    c->more.run = client_more;
    c->ready.run = client_ready;
    c->timer.on_expire = client_timer;
    c->authed = snap->set.redis_auth == NULL;
    c->keys = calloc(KEYS_INIT, sizeof(*c->keys));
    c->args = calloc(KEYS_INIT, sizeof(*c->args));
    c->scratch = malloc(SCRATCH_INIT);
    c->keycap = c->argcap = KEYS_INIT;
    c->scratchcap = SCRATCH_INIT;
    worker_conn_add(w, &c->link);
    atomic_fetch_add_explicit(&w->nconns, 1, memory_order_relaxed);
    if (c->keys == NULL || c->args == NULL || c->scratch == NULL ||
        io_side_register(w, &c->side) < 0) {
        request_client_close(c);
        return;
    }
}

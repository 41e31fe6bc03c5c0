/* request.c -- the request engine of the store modes: clients parsed into
 * requests, requests routed to per-worker, per-member server connections
 * (pipelined, replies matched in FIFO order), replies returned in request
 * order, per-request timeouts, error replies in place of a member's, large
 * values streamed through. The protocol's own rules are the mode's
 * (struct request_mode).
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
#include "conf/conf.h"
#include "data/engine.h"
#include "model/fence.h"
#include "model/hotkeys.h"
#include "base/invariant.h"
#include "base/log.h"
#include "model/pool.h"
#include "model/migration_view.h"
#include "proto/memcache.h"
#include "proto/redis.h"
#include "model/replica_log.h"


/* Reads per connection per event before yielding (as the splice). */
#define READS_PER_EVENT 8
/* A client stops being read while it has this many requests in flight:
 * a client that pipelines without reading replies cannot grow our memory
 * without bound. */
#define MAX_PIPELINE 4096
/* Bytes a reply may hold unsent before its member's connection is not
 * read any more (back-pressure from a slow client to the member). */
#define REPLY_HIGH (1024 * 1024)
/* Bytes queued for a member before the client streaming to it is not
 * read any more. */
#define OUT_HIGH (1024 * 1024)
/* Replies written to a client per writev(). */
#define WRITE_BATCH 64
/* A batch (request_send_batch): at most this many requests ride on one
 * line, and the line is at most this long (memcached takes longer get
 * lines; a bound keeps one reply, and its latency, reasonable). */
#define BATCH_MAX 128
#define BATCH_LINE_MAX (16 * 1024)
/* ... and asks for at most this many keys: its reply is held whole before
 * any of its requests is answered, so large values want small batches. */
#define BATCH_KEYS_MAX 64
/* How long a closing client may go on sending before we close anyway. */
#define LINGER_MS 2000
/* A client that streams a value into a member connection and then sends
 * nothing for this long (in a pool without `timeout`) loses the value:
 * the connection is shared, the other requests on it would wait for
 * good. */
#define STREAM_STALL_MS 10000
/* Initial sizes of the per-client parse arrays. */
#define KEYS_INIT 16
#define SCRATCH_INIT 1024

/* A migration's gate: the request that moves one key off its old owner
 * before the fragment that needs it runs on the new one. */
struct rgate {
    struct rfrag frag;        /* its own, on the old owner's connection */
    struct rfrag *opens;      /* the fragment waiting for it */
    struct server *from, *to; /* old and new owner (refs held) */
    struct pool *pool;        /* (ref held) */
    struct worker *w;
    uint64_t epoch; /* the migration's: sent once it drained */
    uint64_t hash;  /* the key's: its connection among several */
    char *key;
    size_t len;
    unsigned tries;
    int step;    /* 0: on the old owner; 1: the next step, on the new one */
    bool cache;  /* its answer may go in the moved cache (a copy: a key
                    gone from its old owner stays gone) */
    int command; /* the mode's index of what it sent (its reply's parse) */
    uint64_t held_ms;   /* when it began to wait for the drain, 0: never */
    struct rgate *next; /* the fragment's, then the worker's wait list */
};

/* A gate waits so long for its migration's drain barrier (with several
 * chashd instances, for every one of them) before its request fails. */
#define GATE_HOLD_MS 10000

/* A drain barrier in one worker (request_drain). */
struct rdrain {
    struct rdrain *next;
    struct migration_drain *d; /* (ref held) */
    size_t n;
    struct rdrain_mark {
        struct rserver *s;
        uint64_t mark;
    } * marks;
};

/* Keys a gate found gone from their old owner (moved, or never there),
 * per migration: while it runs, "absent from the old owner" stays true
 * (nothing writes a moving key there after the drain barrier), so later
 * requests on them need no gate. Direct-mapped, one key per slot. */
#define MOVED_SLOTS 16384
/* How often a worker closes the connections of members that left. */
#define SWEEP_MS 1000
struct moved {
    uint64_t epoch; /* 0: empty */
    char *key;
    size_t len;
};


static void client_flush(struct rclient *c);
static void client_read(struct rclient *c);
static void client_close(struct rclient *c);
static void client_unstream(struct rclient *c, int kind);
static void conn_flush(struct rserver *s);
static void conn_fail(struct rserver *s, int kind, int err);
static void conn_read(struct rserver *s);
static void req_free(struct rreq *r);
static void gate_done(struct rgate *g);
static void gate_free(struct rgate *g);
static void client_release(struct rclient *c);
static void hold(struct rreq *r, struct rfrag *f, struct server *srv,
                 uint64_t hash, const char *buf, size_t len, uint64_t stream);
static void client_abandon(struct rclient *c);
static struct rserver *send_to(struct rreq *r, struct rfrag *f,
                               struct server *srv, uint64_t hash);
static void mig_timer(struct worker *w, struct timer *t);
static void sweep_timer(struct worker *w, struct timer *t);


/* ---- the worker's members ------------------------------------------------ */

static void rworker_close(struct worker *w, struct worker_conn *l);

struct rworker *
request_rworker(struct worker *w)
{
    struct rworker *rw = w->requests;

    if (rw != NULL)
        return rw;
    rw = calloc(1, sizeof(*rw));
    if (rw == NULL)
        return NULL;
    rw->w = w;
    rw->link.close = rworker_close;
    rw->mig_timer.on_expire = mig_timer;
    rw->sweep_timer.on_expire = sweep_timer;
    rw->next_client_id = (uint64_t)w->id << 48;
    worker_conn_add(w, &rw->link);
    w->requests = rw;
    return rw;
}

/* The connections of member <s> in this worker (created on first use). */
static struct rmember *
member_get(struct rworker *rw, struct server *s, struct pool *p, size_t nconns,
           const struct request_mode *mode)
{
    size_t b = s->id % MEMBER_BUCKETS;
    struct rmember *m;

    /* by mode too: after a reload that changed the pool's mode, the
     * clients of the old one keep their own connections */
    for (m = rw->table[b]; m != NULL; m = m->next)
        if (m->id == s->id && m->mode == mode)
            return m;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->conns = calloc(nconns ? nconns : 1, sizeof(*m->conns));
    if (m->conns == NULL) {
        free(m);
        return NULL;
    }
    m->nconns = nconns ? nconns : 1;
    m->id = s->id;
    m->mode = mode;
    m->server = s;
    server_ref(s);
    m->pool = p;
    pool_ref(p);
    m->next = rw->table[b];
    rw->table[b] = m;
    if (rw->sweep_timer.next == NULL)
        worker_timer_set(rw->w, &rw->sweep_timer, rw->w->now_ms + SWEEP_MS);
    return m;
}

static void conn_destroy(struct rserver *s);

/* Whether nothing waits on <s>: no fragment queued or held behind a
 * value, no value streaming either way, nothing unwritten. */
static bool
conn_idle(const struct rserver *s)
{
    return s->head == NULL && s->lhead == NULL && s->stream_from == NULL &&
           s->reply_to == NULL && buf_size(&s->out) == 0;
}

/* Close the connections of members that left their pool (an admin remove,
 * a reload, the end of a migration, etcd) once nothing waits on them, and
 * drop the member: a worker keeps no descriptor or memory for a member
 * that is gone (before, each one removed kept its connections until the
 * worker exited). Not while a drain barrier marks connections. */
static void
members_sweep(struct rworker *rw)
{
    if (rw->drains != NULL || rw->bars != NULL)
        return;
    for (size_t b = 0; b < MEMBER_BUCKETS; b++) {
        struct rmember **pp = &rw->table[b];

        while (*pp != NULL) {
            struct rmember *m = *pp;
            bool idle =
                atomic_load_explicit(&m->server->state, memory_order_relaxed) ==
                SERVER_REMOVED;

            for (size_t i = 0; idle && i < m->nconns; i++)
                idle = m->conns[i] == NULL || conn_idle(m->conns[i]);
            if (!idle) {
                pp = &m->next;
                continue;
            }
            *pp = m->next;
            for (size_t i = 0; i < m->nconns; i++)
                if (m->conns[i] != NULL)
                    conn_destroy(m->conns[i]);
            server_unref(m->server);
            pool_unref(m->pool);
            /* (events of this iteration may still name its connections,
             * which reach it through s->m) */
            worker_defer_free(rw->w, m->conns);
            worker_defer_free(rw->w, m);
        }
    }
}

static void
sweep_timer(struct worker *w, struct timer *t)
{
    struct rworker *rw = WORKER_OF(t, struct rworker, sweep_timer);
    bool any = false;

    members_sweep(rw);
    for (size_t b = 0; b < MEMBER_BUCKETS && !any; b++)
        any = rw->table[b] != NULL;
    if (any)
        worker_timer_set(w, &rw->sweep_timer, w->now_ms + SWEEP_MS);
}

static void
rworker_close(struct worker *w, struct worker_conn *l)
{
    struct rworker *rw = WORKER_OF(l, struct rworker, link);

    /* a replica's read that fails over while the connections close must
     * not open new ones (request_send_on) */
    rw->closing = true;
    worker_conn_del(&rw->link);
    worker_timer_del(w, &rw->mig_timer);
    worker_timer_del(w, &rw->sweep_timer);
    while (rw->drains != NULL) {
        struct rdrain *d = rw->drains;

        rw->drains = d->next;
        migration_drain_unref(d->d);
        free(d->marks);
        free(d);
    }
    while (rw->gwait != NULL) {
        struct rgate *g = rw->gwait;

        rw->gwait = g->next;
        g->next = NULL;
        g->frag.error = true;
        buf_append(&g->frag.reply, "-ERR chashd is stopping\r\n", 25);
        gate_done(g);
    }
    for (size_t b = 0; b < MEMBER_BUCKETS; b++) {
        while (rw->table[b] != NULL) {
            struct rmember *m = rw->table[b];

            rw->table[b] = m->next;
            for (size_t i = 0; i < m->nconns; i++)
                if (m->conns[i] != NULL)
                    conn_destroy(m->conns[i]);
            server_unref(m->server);
            pool_unref(m->pool);
            free(m->conns);
            free(m);
        }
    }
    request_rep_close(rw);
    for (size_t i = 0; rw->moved != NULL && i < MOVED_SLOTS; i++)
        free(rw->moved[i].key);
    free(rw->moved);
    w->requests = NULL;
    free(rw);
}

/* ---- requests and their fragments ---------------------------------------- */

int
request_frags(struct rreq *r, size_t n)
{
    INVARIANT(r->frags == NULL && n > 0);
    if (n == 1) {
        r->frags = &r->one;
    } else {
        r->frags = calloc(n, sizeof(*r->frags));
        if (r->frags == NULL)
            return -1;
    }
    r->nfrags = r->pending = n;
    for (size_t i = 0; i < n; i++)
        r->frags[i].req = r;
    return 0;
}

static void
req_free(struct rreq *r)
{
    if (r->client != NULL && r->client->mode->release != NULL)
        r->client->mode->release(r);
    for (size_t i = 0; i < r->nfrags; i++) {
        free(r->frags[i].keys);
        buf_free(&r->frags[i].reply);
        buf_free(&r->frags[i].pending);
        buf_free(&r->frags[i].bkeys);
        free(r->frags[i].gate_error);
        server_unref(r->frags[i].hold_to);
        while (r->frags[i].gates != NULL) {
            struct rgate *g = r->frags[i].gates;
            r->frags[i].gates = g->next;
            gate_free(g);
        }
    }
    if (r->frags != &r->one)
        free(r->frags);
    buf_free(&r->reply);
    free(r);
}

/* The protocol <r>'s replies are written in: its client's, fixed when
 * the client was accepted. */
static const struct proto *
req_proto(const struct rreq *r)
{
    return r->mode->proto;
}

/* ---- routing (for the modes) ------------------------------------------- */

bool
request_same_set(const struct pool_snapshot *snap, uint64_t a, uint64_t b)
{
    /* With replicas, every request of a key runs on the key's home worker
     * (request_rep.c), chosen by its ring hash: the keys of one request
     * must share the hash -- one hash tag -- or the request would be
     * ordered with the writes of its first key only. Without, the
     * callers compared the members already. */
    return snap->set.replicas <= 1 || a == b;
}

int
request_route(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
              const struct proto_span *keys, size_t nkeys,
              struct request_route *rt)
{
    size_t n = nkeys ? nkeys : 1;
    const char *why;
    bool sets = snap->set.replicas > 1;

    rt->nmembers = 0;
    if (n <= REQUEST_ROUTE_INLINE) {
        rt->owner = rt->owner_in;
        rt->hash = rt->hash_in;
        rt->members = rt->members_in;
        rt->group = rt->group_in;
    } else {
        rt->owner = calloc(n, sizeof(*rt->owner));
        rt->hash = calloc(n, sizeof(*rt->hash));
        rt->members = calloc(n, sizeof(*rt->members));
        rt->group = calloc(n, sizeof(*rt->group));
        if (rt->owner == NULL || rt->hash == NULL || rt->members == NULL ||
            rt->group == NULL)
            return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        size_t j;

        rt->owner[i] = request_key_member(snap, buf + keys[i].off, keys[i].len,
                                          &rt->hash[i], &why);
        request_hot_note(r, snap, buf + keys[i].off, keys[i].len);
        if (rt->owner[i] == NULL) {
            request_error(r, PROTO_ERR_NO_MEMBER, why);
            return 0;
        }
        /* one group per member; with replicas, per replica set (keys of
         * one primary may have different secondaries) */
        for (j = 0; j < rt->nmembers; j++) {
            size_t first = 0;

            if (rt->members[j] != rt->owner[i])
                continue;
            if (!sets)
                break;
            while (rt->group[first] != j)
                first++;
            if (request_same_set(snap, rt->hash[first], rt->hash[i]))
                break;
        }
        if (j == rt->nmembers)
            rt->members[rt->nmembers++] = rt->owner[i];
        rt->group[i] = (uint32_t)j;
    }
    return 1;
}

void
request_route_free(struct request_route *rt)
{
    if (rt->owner != rt->owner_in) {
        free(rt->owner);
        free(rt->hash);
        free(rt->members);
        free(rt->group);
    }
}

/* The owner of <key> in the migration's old placement, or NULL. */
static struct server *
old_owner(const struct pool_snapshot *snap, const char *key, size_t len)
{
    return snap->mig != NULL ? pool_snapshot_owner(snap->mig->old, key, len)
                             : NULL;
}

/* In the first stage of a two-stage migration, a key moving to a member
 * whose name sorts first has not started to move: it stays on <o>. */
static bool
deferred(const struct pool_snapshot *snap, const struct server *o,
         const struct server *n)
{
    return atomic_load_explicit(&snap->mig->stage, memory_order_acquire) == 1 &&
           migration_deferred(o->name, n->name);
}

/*
 * The member of <key> in <snap>, with the key's ring hash in *<hash>: the
 * ring's owner, hashing only the hash tag when the pool has one. An owner
 * that is not up: with on_failure error, no member (*<why> says so); else
 * its next member in preference order that is (remap rebuilds the ring
 * without it; failover keeps the ring and skips it -- for a store, both
 * send its keys to another member while it is out, as twemproxy's
 * auto_eject_hosts does).
 */
void
request_hot_note(const struct rreq *r, const struct pool_snapshot *snap,
                 const char *key, size_t len)
{
    const struct rclient *c = r->client;

    if (snap->set.hot && c != NULL && c->pool->hot != NULL)
        hot_note(&c->pool->hot[c->w->id], c->w->now_ms, key, len,
                 hot_hash(key, len));
}

/* request_key_member's walk past a down owner: the next member up. */
static bool
usable_step(void *ctx, struct server *s, size_t idx, size_t pos)
{
    (void)ctx;
    (void)idx;
    (void)pos;
    return server_usable(s);
}

struct server *
request_key_member(const struct pool_snapshot *snap, const char *key,
                   size_t len, uint64_t *hash, const char **why)
{
    size_t off, n, idx;
    struct server *s;

    *why = "no member owns any key";
    if (snap->ring == NULL)
        return NULL;
    if (snap->set.etcd_fence && fence_up(clock_coarse_ms())) {
        *why = "this chashd may have lost its etcd lease: a pool that "
               "copies keys answers none until it is registered again";
        return NULL;
    }
    n = chash_key_tag(key, len, snap->set.hash_tag, &off);
    *hash = chash_ring_hash(snap->ring, key + off, n);
    idx = chash_ring_lookup(snap->ring, *hash);
    s = snap->servers[idx];
    if (snap->mig != NULL) {
        struct server *o = old_owner(snap, key, len);

        if (o != NULL && o != s && deferred(snap, o, s))
            s = o; /* not moving yet: where it is */
    }
    /* replicas: the primary of the key's set, whatever its health (the
     * engine runs the request on the set's members, request_send_keyed) */
    if (server_usable(s) || snap->set.replicas > 1)
        return s;
    /* migration: copy: a member being drained (or leaving) still serves
     * the keys it owns in a snapshot that still places them on it */
    if (snap->set.migration == CONF_MIGRATION_COPY &&
        atomic_load(&s->state) == SERVER_DRAINING)
        return s;
    *why = "the key's member is not up (on_failure: error)";
    /* (removed: not a failure -- this snapshot still places keys on it
     * while the next, without it, is being built; they go where they
     * are going, the next member in their order) */
    if (snap->set.on_failure == CONF_ON_FAILURE_ERROR &&
        atomic_load(&s->state) != SERVER_REMOVED)
        return NULL;
    s = pool_walk(snap, *hash, 1, usable_step, NULL);
    if (s == NULL)
        *why = "no member is up";
    return s;
}

struct server *
request_any_member(const struct pool_snapshot *snap, uint64_t client)
{
    for (size_t i = 0; i < snap->n; i++) {
        struct server *s = snap->servers[(client + i) % snap->n];

        if (server_usable(s))
            return s;
    }
    return NULL;
}

void *
request_mode_data(struct rreq *r, size_t size)
{
    r->mode_data = calloc(1, size);
    return r->mode_data;
}

const struct rfrag *
request_first_error(const struct rreq *r)
{
    for (size_t i = 0; i < r->nfrags; i++)
        if (r->frags[i].error)
            return &r->frags[i];
    return NULL;
}

void
request_answer(struct rreq *r, const char *reply, size_t len)
{
    if (buf_append(&r->reply, reply, len) < 0 && r->client != NULL)
        r->client->closing = true; /* out of memory: close, in order */
    r->done = true;
}

void
request_error(struct rreq *r, int kind, const char *msg)
{
    char buf[512];
    size_t n = req_proto(r)->error_reply(buf, sizeof(buf), kind, msg);

    request_answer(r, buf, n);
}

/* Whether <r>'s reply (whole: a streamed one is a value) is an error. */
static bool
reply_is_error(const struct rreq *r)
{
    if (r->nfrags == 1 && r->mode_data == NULL)
        return r->frags[0].error;
    return r->mode->is_error(r->reply.data + r->reply.off,
                             buf_size(&r->reply));
}

/* <r>'s last fragment is answered: merge, or it was the reply itself. */
static void
req_complete(struct rreq *r)
{
    if (r->nfrags > 1 || r->mode_data != NULL)
        r->mode->complete(r);
    r->done = true;
    if (r->client != NULL && reply_is_error(r))
        stats_add(&r->client->pool->stats[r->client->w->id].errors, 1);
}

/* Fragment <f>'s reply bytes (the whole reply, or a part of a streamed
 * one). Plain requests take them as their reply; merged ones keep them
 * per fragment. */
static int
frag_data(struct rfrag *f, const char *data, size_t len)
{
    struct rreq *r = f->req;
    bool merged = r->nfrags > 1 || r->mode_data != NULL || f->gate != NULL;

    return buf_append(merged ? &f->reply : &r->reply, data, len);
}

/* <f> is answered (its reply complete, or failed). Orphaned requests
 * (their client gone) are freed with their last fragment. */
static void
frag_done(struct rfrag *f)
{
    struct rreq *r = f->req;

    if (f->conn != NULL)
        f->conn->answered++;
    if (f->gate != NULL) {
        f->conn = NULL;
        gate_done(f->gate);
        return;
    }
    INVARIANT(!f->done && r->pending > 0);
    f->done = true;
    f->conn = NULL;
    if (--r->pending > 0)
        return;
    if (r->rep != NULL || r->job != NULL || r->pause != NULL) {
        /* a replica's copy, a repair's request, an ordered fan-out's:
         * it reports, and goes */
        request_rep_report(r);
        return;
    }
    req_complete(r);
    if (r->client == NULL) {
        req_free(r);
        return;
    }
    /* Written from the client's task, not here: a fragment may fail at
     * once, inside the dispatch that is still using its request. */
    worker_soon(r->client->w, &r->client->more);
}

/* <f> failed: the mode's error reply of <kind> in its place. */
static void
frag_fail(struct rfrag *f, int kind)
{
    char buf[256];
    size_t n = req_proto(f->req)->error_reply(buf, sizeof(buf), kind, NULL);

    f->error = true;
    f->failed = true;
    frag_data(f, buf, n);
    frag_done(f);
}

int
request_frag_data(struct rfrag *f, const char *data, size_t len)
{
    return frag_data(f, data, len);
}

void
request_frag_done(struct rfrag *f)
{
    frag_done(f);
}

void
request_frag_fail(struct rfrag *f, int kind)
{
    frag_fail(f, kind);
}

void
request_req_free(struct rreq *r)
{
    req_free(r);
}

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
static void
conn_fail(struct rserver *s, int kind, int err)
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
        frag_fail(f, kind);
    }
    while (later != NULL) {
        struct rfrag *f = later;
        later = f->next;
        f->next = NULL;
        frag_fail(f, kind);
    }
}

static void conn_queue(struct rserver *s, struct rfrag *f, const char *buf,
                       size_t len, struct rclient *streamer);

/*
 * The value being streamed into <s> will never be whole (its client went
 * or stalled): the connection cannot be used past it. The requests
 * written on it before the value fail with <kind>; those still waiting
 * unsent behind it go to a new connection, in their order.
 */
static void
conn_abandon(struct rserver *s, int kind)
{
    struct rfrag *later = s->lhead;

    for (struct rfrag *f = later; f != NULL; f = f->next)
        s->nfifo--;
    s->lhead = s->ltail = NULL;
    s->stream_from = NULL;
    conn_fail(s, kind, ECONNABORTED);
    while (later != NULL) {
        struct rfrag *f = later;
        struct buf b = f->pending;
        struct rclient *streamer = f->streamer;

        later = f->next;
        f->next = NULL;
        f->streamer = NULL;
        memset(&f->pending, 0, sizeof(f->pending));
        conn_queue(s, f, b.data + b.off, buf_size(&b), streamer);
        buf_free(&b);
        if (streamer != NULL && !streamer->stream_wait)
            worker_soon(s->w, &streamer->more); /* its turn now */
    }
}

/* The store modes, registered at start (data/dispatch.c): the engine
 * calls them through their tables and knows none by name. */
static const struct request_mode *request_modes[2]; /* redis, memcache */

void
request_register_modes(const struct request_mode *redis,
                       const struct request_mode *memcache)
{
    request_modes[0] = redis;
    request_modes[1] = memcache;
}

const struct request_mode *
request_mode_of(const struct pool_snapshot *snap)
{
    INVARIANT(snap->set.mode == CONF_MODE_REDIS ||
              snap->set.mode == CONF_MODE_MEMCACHE);
    return request_modes[snap->set.mode == CONF_MODE_MEMCACHE];
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

static void
conn_destroy(struct rserver *s)
{
    conn_fail(s, PROTO_ERR_CLOSED, ECONNABORTED);
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
static void
conn_flush(struct rserver *s)
{
    s->open = NULL; /* the batch is closed: its line goes now */
    while (s->state == RS_READY && buf_size(&s->out) > 0) {
        ssize_t n =
            io_side_send(&s->side, s->out.data + s->out.off, buf_size(&s->out));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                conn_fail(s, PROTO_ERR_CLOSED, errno);
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
static void
conn_queue(struct rserver *s, struct rfrag *f, const char *buf, size_t len,
           struct rclient *streamer)
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
        conn_fail(s, kind, err);
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
    frag_fail(f, kind);
}

void
request_conn_queue(struct rserver *s, struct rfrag *f, const char *buf,
                   size_t len)
{
    conn_queue(s, f, buf, len, NULL);
}

/* The client's value for <s> is through: what waited behind it follows,
 * up to the next request that streams a value of its own (whose client
 * may go on now). */
static void
conn_stream_done(struct rserver *s)
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
            conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
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
    conn_flush(s);
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
        frag_done(frags[i]);
    conn_arm(s);
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
            size_t n = len < s->reply_left ? len : (size_t)s->reply_left;
            struct rfrag *to = s->reply_to;

            if (frag_data(to, buf, n) < 0) {
                conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
                return;
            }
            s->in.off += n;
            s->reply_left -= n;
            if (s->reply_left == 0) {
                s->reply_to = NULL;
                to->req->streaming = false;
                frag_done(to);
            } else if (to->req->client != NULL) {
                client_flush(to->req->client);
                /* A slow client: stop reading the member until it takes
                 * what it has -- but only while no other request waits on
                 * this connection: the replies behind the value can only
                 * be read through it, and a slow client must never make
                 * another one's request wait, or fail at its timeout.
                 * Then the value is held for the slow client instead (at
                 * most its size: conn_queue lifts the pause when a
                 * request comes). */
                if (buf_size(&to->req->reply) > REPLY_HIGH && s->head == NULL)
                    s->paused = true;
            }
            continue;
        }
        if (s->swallow == 1 && s->ident) {
            /* the identity: read by request_rep.c (a memcached's stats
             * are many lines: its own parse) */
            long k = request_rep_ident_reply(s, buf, len);

            if (k == 0)
                return;
            if (k < 0) {
                conn_fail(s, PROTO_ERR_CLOSED, EPROTO);
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
            conn_fail(s, PROTO_ERR_CLOSED, EPROTO);
            return;
        }
        if (s->swallow > 0) {
            /* AUTH or SELECT of the handshake: an error means the member
             * refuses us (a wrong redis_auth): every request fails. */
            s->swallow--;
            s->in.off += rp.len;
            if (rp.error) {
                log_warn_limited(10,
                                 "pool %s: member %s refused the "
                                 "handshake: %.*s",
                                 s->m->pool->name, s->m->server->name,
                                 (int)(rp.len > 2 ? rp.len - 2 : rp.len), buf);
                conn_fail(s, PROTO_ERR_CLOSED, EACCES);
                return;
            }
            continue;
        }
        f = s->head;
        if (f == NULL) {
            /* a reply nobody asked for: the stream is out of step */
            conn_fail(s, PROTO_ERR_CLOSED, EPROTO);
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
        if (frag_data(f, buf, (size_t)rp.len) < 0) {
            conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            frag_fail(f, PROTO_ERR_CLOSED);
            return;
        }
        if (rp.body > 0) {
            s->reply_to = f;
            s->reply_left = rp.body;
            f->req->streaming = true;
            if (f->req->client != NULL)
                client_flush(f->req->client);
        } else {
            frag_done(f);
        }
        conn_arm(s);
    }
    if (buf_size(&s->in) == 0)
        s->in.off = s->in.len = 0;
}

static void
conn_read(struct rserver *s)
{
    int reads = 0;

    while (s->side.readable && !s->side.eof_in && !s->paused) {
        ssize_t n;

        if (reads++ == READS_PER_EVENT) {
            worker_soon(s->w, &s->more);
            return;
        }
        if (buf_reserve(&s->in, 16 * 1024) < 0) {
            conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            return;
        }
        n = io_side_read(&s->side, s->in.data + s->in.len,
                         s->in.cap - s->in.len);
        if (n < 0) {
            conn_fail(s, PROTO_ERR_CLOSED, errno);
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
        conn_fail(s, PROTO_ERR_CLOSED, ECONNRESET);
    }
}

static void
conn_flush_task(struct worker *w, struct worker_task *t)
{
    struct rserver *s = WORKER_OF(t, struct rserver, flush);

    (void)w;
    if (s->state == RS_READY)
        conn_flush(s);
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
        conn_read(s);
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
                conn_fail(s, PROTO_ERR_REFUSED, ECONNREFUSED);
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
            conn_fail(s, PROTO_ERR_REFUSED, err ? err : ECONNREFUSED);
            return;
        }
    }
    if (events & EPOLLERR) {
        conn_read(s); /* what it said before the reset is still ours */
        if (s->state != RS_IDLE)
            conn_fail(s, PROTO_ERR_CLOSED, ECONNRESET);
        return;
    }
    if (events & EPOLLOUT)
        conn_flush(s);
    if (s->state == RS_READY)
        conn_read(s);
}

static void
conn_timer(struct worker *w, struct timer *t)
{
    struct rserver *s = WORKER_OF(t, struct rserver, timer);

    if (s->state == RS_CONNECTING) {
        conn_fail(s, PROTO_ERR_TIMEOUT, ETIMEDOUT);
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
        conn_fail(s, PROTO_ERR_TIMEOUT, ETIMEDOUT);
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
        struct rmember *m =
            member_get(rw, snap->servers[i], p, snap->set.server_connections,
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
request_send_on(struct worker *w, struct pool *p, const struct request_mode *mode,
        struct rfrag *f, struct server *srv, uint64_t hash)
{
    struct rworker *rw = request_rworker(w);
    struct rmember *m;
    size_t i;

    m = rw && !rw->closing
            ? member_get(rw, srv, p, pool_snapshot(p)->set.server_connections,
                         mode)
            : NULL;
    if (m == NULL) {
        frag_fail(f, PROTO_ERR_CLOSED);
        return NULL;
    }
    i = m->nconns > 1 ? (size_t)(hash % m->nconns) : 0;
    if (m->conns[i] == NULL && (m->conns[i] = conn_create(w, m)) == NULL) {
        frag_fail(f, PROTO_ERR_CLOSED);
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
static struct rserver *
send_to(struct rreq *r, struct rfrag *f, struct server *srv, uint64_t hash)
{
    return request_send_on(r->client->w, r->client->pool, r->mode, f, srv, hash);
}

void
request_send_batch(struct rreq *r, struct rfrag *f, struct server *srv,
                   uint64_t hash, int kind, const char *cmd, const char *keys,
                   size_t keyslen)
{
    struct rserver *s = send_to(r, f, srv, hash);
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
        frag_fail(f, PROTO_ERR_CLOSED);
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
            conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
            frag_fail(f, PROTO_ERR_CLOSED);
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
        frag_fail(f, PROTO_ERR_CLOSED);
        return;
    }
    conn_queue(s, f, line.data, line.len, NULL);
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
    if (frag_data(f, data, len) < 0 && f->req->client != NULL)
        f->req->client->closing = true; /* out of memory: close, in order */
}

void
request_send(struct rreq *r, struct rfrag *f, struct server *srv, uint64_t hash,
             const char *buf, size_t len, uint64_t stream)
{
    struct rclient *c = r->client;
    struct rserver *s;

    if (f->gates != NULL || c->hhead != NULL) {
        hold(r, f, srv, hash, buf, len, stream);
        return;
    }
    s = send_to(r, f, srv, hash);
    if (s == NULL)
        return;
    /* The client's next <stream> bytes are this value: they go to <s> as
     * they come (once <s> carries no other value), and nothing else is
     * sent to it meanwhile. A request that failed at once has its value
     * read and dropped. */
    INVARIANT(c->stream_to == NULL && c->stream_left == 0);
    c->stream_left = stream;
    conn_queue(s, f, buf, len, stream > 0 ? c : NULL);
}

/* ---- migration: gates and the drain barrier ------------------------------ */

int
request_key_source(const struct pool_snapshot *snap, const char *key,
                   size_t len, uint64_t hash, const struct server *to,
                   struct server **from, const char **why)
{
    struct server *n, *o;

    if (snap->mig == NULL || snap->ring == NULL ||
        (o = old_owner(snap, key, len)) == NULL)
        return 0; /* no migration, or nothing was owned before it */
    n = snap->servers[chash_ring_lookup(snap->ring, hash)];
    if (o == n || atomic_load_explicit(&o->mig_skip, memory_order_relaxed) ||
        deferred(snap, o, n) ||
        (to == o && atomic_load(&snap->mig->stage) != 0))
        return 0; /* (given up: its old copy is lost, the new owner
                     serves; deferred: the old owner still does -- also
                     when routed there just before the second stage began:
                     that stage's barrier waits for it) */
    /* A moving key lives on its old owner until it is moved, and only
     * its new owner may take it then: nobody else can serve it. */
    if (to != n) {
        *why = "the key is moving to a member that is not up";
        return -1;
    }
    if (atomic_load(&o->state) == SERVER_DOWN ||
        atomic_load(&o->state) == SERVER_EJECTED) {
        /* (drained, in maintenance, removed: still there to move from) */
        *why = "the key is moving from a member that is not up";
        return -1;
    }
    *from = o;
    return 1;
}

static size_t
moved_slot(const char *key, size_t len)
{
    return (size_t)chash_hash(CHASH_HASH_XXH3, key, len) & (MOVED_SLOTS - 1);
}

static bool
moved_has(const struct rworker *rw, uint64_t epoch, const char *key, size_t len)
{
    const struct moved *m;

    if (rw->moved == NULL)
        return false;
    m = &rw->moved[moved_slot(key, len)];
    return m->epoch == epoch && m->len == len && memcmp(m->key, key, len) == 0;
}

static void
moved_put(struct rworker *rw, uint64_t epoch, const char *key, size_t len)
{
    struct moved *m;
    char *k;

    if (rw->moved == NULL &&
        (rw->moved = calloc(MOVED_SLOTS, sizeof(*rw->moved))) == NULL)
        return; /* (a cache: only more gates) */
    m = &rw->moved[moved_slot(key, len)];
    if (m->len != len || m->key == NULL) {
        if ((k = malloc(len ? len : 1)) == NULL)
            return;
        free(m->key);
        m->key = k;
    }
    memcpy(m->key, key, len);
    m->len = len;
    m->epoch = epoch;
}

int
request_gate(struct rreq *r, const struct pool_snapshot *snap, struct rfrag *f,
             struct server *from, struct server *to, const char *key,
             size_t len)
{
    struct rclient *c = r->client;
    struct rworker *rw = c->w->requests;
    struct rgate *g;
    size_t off, klen;

    /* (a warm-up keeps the old copy: a delete must still reach it) */
    bool copy = snap->set.migration == CONF_MIGRATION_COPY;

    if (copy && rw != NULL &&
        moved_has(rw, migration_gen(snap->mig->epoch, 1), key, len))
        return 0; /* no longer on its old owner */
    g = calloc(1, sizeof(*g));
    if (g == NULL || (g->key = malloc(len ? len : 1)) == NULL) {
        free(g);
        return -1;
    }
    memcpy(g->key, key, len);
    g->len = len;
    g->from = from;
    g->to = to;
    server_ref(from);
    server_ref(to);
    g->pool = c->pool;
    pool_ref(c->pool);
    g->w = c->w;
    g->epoch = migration_gen(snap->mig->epoch, atomic_load(&snap->mig->stage));
    klen = chash_key_tag(key, len, snap->set.hash_tag, &off);
    g->hash = chash_ring_hash(snap->mig->old->ring, key + off, klen);
    g->opens = f;
    g->frag.req = r;
    g->frag.gate = g;
    g->command = r->command;
    g->cache = copy;
    g->next = f->gates;
    f->gates = g;
    return 0;
}

static void
gate_free(struct rgate *g)
{
    server_unref(g->from);
    server_unref(g->to);
    pool_unref(g->pool);
    buf_free(&g->frag.reply);
    free(g->key);
    free(g);
}

/* Put <g> on its old owner's connection now (its migration drained).
 * A gate that cannot be sent is answered at once (gate_done). */
static void
gate_send(struct rgate *g)
{
    struct rreq *r = g->frag.req;
    struct rserver *s;
    struct buf cmd = {0};

    buf_free(&g->frag.reply);
    g->frag.error = false;
    if (r->client == NULL || g->opens->abandoned) {
        /* its client left: nothing will run, nothing needs moving */
        g->frag.error = true;
        buf_append(&g->frag.reply, "-ERR client gone\r\n", 18);
        gate_done(g);
        return;
    }
    if (r->mode->gate_build(request_snapshot(r->client), g->to, g->key, g->len,
                            r->command, g->tries > 0, &cmd, &g->command) < 0) {
        buf_free(&cmd);
        g->frag.error = true;
        buf_append(&g->frag.reply, "-ERR out of memory\r\n", 20);
        gate_done(g);
        return;
    }
    g->step = 0;
    s = send_to(r, &g->frag, g->from, g->hash);
    if (s != NULL)
        conn_queue(s, &g->frag, cmd.data, cmd.len, NULL);
    buf_free(&cmd);
}

/* Send <g> once its migration's drain barrier has passed; until then it
 * waits in the worker (a write sent under the old ring must not land on
 * the old owner after the key left it). */
static void
gate_go(struct rgate *g)
{
    struct rworker *rw;

    if (atomic_load(&g->pool->mig_drained) >= g->epoch ||
        g->frag.req->client == NULL) {
        gate_send(g);
        return;
    }
    if (g->held_ms == 0)
        g->held_ms = g->w->now_ms ? g->w->now_ms : 1;
    else if (g->w->now_ms - g->held_ms >= GATE_HOLD_MS) {
        /* the barrier does not pass (an instance that does not answer):
         * the request fails, moving nothing, running nowhere */
        static const char held[] =
            "-ERR migration: the drain barrier did not pass in 10 s "
            "(another chashd instance does not answer); try again\r\n";

        g->frag.error = true;
        buf_append(&g->frag.reply, held, sizeof(held) - 1);
        gate_done(g);
        return;
    }
    rw = g->w->requests;
    g->next = NULL;
    if (rw->gwait_tail != NULL)
        rw->gwait_tail->next = g;
    else
        rw->gwait = g;
    rw->gwait_tail = g;
    if (rw->mig_timer.next == NULL)
        worker_timer_set(rw->w, &rw->mig_timer, rw->w->now_ms + WHEEL_MS);
}

/* <g> is answered: the key moved (or was not there), so its fragment may
 * run once its other gates are answered too; or it could not be moved,
 * and the fragment fails without running anywhere. */
static void
gate_done(struct rgate *g)
{
    struct rfrag *f = g->opens;
    struct rreq *r = f->req;
    struct stats_pool *st = &g->pool->stats[g->w->id];
    const char *rep = g->frag.reply.data + g->frag.reply.off;
    size_t len = buf_size(&g->frag.reply);
    struct buf next = {0};
    int res = len > 0 ? r->mode->gate_result(g->step, r->command, rep, len,
                                             g->key, g->len, &next, &g->command)
                      : GATE_FAILED;

    if (res == GATE_NEXT || res == GATE_NEXT_OLD) {
        struct rserver *s;

        /* the next step goes to the new owner, on the connection the
         * fragment will take (the same key's hash): before it, in order;
         * or back to the old owner, on the gate's connection there */
        if (r->client == NULL || f->abandoned) {
            buf_free(&next);
            res = GATE_ABSENT;
        } else {
            g->step++;
            buf_free(&g->frag.reply);
            g->frag.error = false;
            s = res == GATE_NEXT ? send_to(r, &g->frag, g->to, f->hold_hash)
                                 : send_to(r, &g->frag, g->from, g->hash);
            if (s != NULL)
                conn_queue(s, &g->frag, next.data, next.len, NULL);
            buf_free(&next);
            return;
        }
    }
    buf_free(&next);
    if (res == GATE_RETRY && g->tries < 3 && r->client != NULL &&
        !f->abandoned) {
        g->tries++;
        gate_send(g);
        return;
    }
    if (res == GATE_MOVED || res == GATE_ABSENT) {
        stats_add(res == GATE_MOVED ? &st->gate_moved : &st->gate_absent, 1);
        if (g->cache && g->w->requests != NULL)
            moved_put(g->w->requests, (g->epoch & ~(uint64_t)3) | 1, g->key,
                      g->len);
    } else {
        stats_add(&st->gate_failed, 1);
        if (f->gate_error == NULL) {
            char msg[400];
            size_t n = len;

            while (n > 0 && (rep[n - 1] == '\r' || rep[n - 1] == '\n'))
                n--;
            if (n > 0 && (rep[0] == '-' || rep[0] == '+'))
                rep++, n--;
            snprintf(msg, sizeof(msg),
                     "migration of key '%.*s' from %s failed: %.*s",
                     (int)(g->len > 64 ? 64 : g->len), g->key, g->from->name,
                     (int)(n > 200 ? 200 : n), rep);
            f->gate_error = strdup(msg);
        }
    }
    gate_free(g);
    INVARIANT(f->gates_pending > 0);
    if (--f->gates_pending > 0)
        return;
    if (r->client != NULL)
        client_release(r->client);
    else if (f->held) {
        /* its client left while it waited: it never runs */
        f->held = false;
        frag_fail(f, PROTO_ERR_CLOSED);
    }
}

/* Hold fragment <f> (to member <srv>) until its gates are answered and
 * every fragment its client holds before it has gone. */
static void
hold(struct rreq *r, struct rfrag *f, struct server *srv, uint64_t hash,
     const char *buf, size_t len, uint64_t stream)
{
    struct rclient *c = r->client;
    struct rgate *g;
    unsigned n = 0;

    if (buf_append(&f->pending, buf, len) < 0) {
        while ((g = f->gates) != NULL) {
            f->gates = g->next;
            gate_free(g);
        }
        c->stream_left = stream; /* read and dropped */
        frag_fail(f, PROTO_ERR_CLOSED);
        return;
    }
    f->held = true;
    f->hold_to = srv;
    server_ref(srv);
    f->hold_hash = hash;
    f->hold_stream = stream;
    if (stream > 0) {
        INVARIANT(c->stream_to == NULL && c->stream_left == 0);
        c->stream_left = stream;
        c->stream_held = true;
    }
    f->hnext = NULL;
    if (c->htail != NULL)
        c->htail->hnext = f;
    else
        c->hhead = f;
    c->htail = f;
    for (g = f->gates; g != NULL; g = g->next)
        n++;
    f->gates_pending = n; /* all counted first: one may answer at once */
    g = f->gates;
    f->gates = NULL;
    while (g != NULL) {
        struct rgate *next = g->next;

        g->next = NULL;
        gate_go(g);
        g = next;
    }
    client_release(c);
}

/* Send (or fail) <c>'s held fragments whose gates are all answered, in
 * order, up to the first that still waits. */
static void
client_release(struct rclient *c)
{
    while (c->hhead != NULL && c->hhead->gates_pending == 0) {
        struct rfrag *f = c->hhead;
        struct rreq *r = f->req;
        struct server *srv = f->hold_to;
        struct rserver *s;

        c->hhead = f->hnext;
        if (c->hhead == NULL)
            c->htail = NULL;
        f->hnext = NULL;
        f->held = false;
        f->hold_to = NULL;
        if (f->hold_stream > 0)
            c->stream_held = false;
        if (f->gate_error != NULL) {
            char buf[512];
            size_t n = req_proto(r)->error_reply(
                buf, sizeof(buf), PROTO_ERR_REQUEST, f->gate_error);

            f->error = true;
            frag_data(f, buf, n);
            buf_free(&f->pending);
            if (f->hold_stream > 0) {
                c->stream_to = NULL; /* its value is read and dropped */
                worker_soon(c->w, &c->more);
            }
            frag_done(f);
        } else if ((s = send_to(r, f, srv, f->hold_hash)) != NULL) {
            struct buf b = f->pending;

            memset(&f->pending, 0, sizeof(f->pending));
            conn_queue(s, f, b.data + b.off, buf_size(&b),
                       f->hold_stream > 0 ? c : NULL);
            buf_free(&b);
            if (f->hold_stream > 0)
                worker_soon(c->w, &c->more); /* its value may go now */
        } else if (f->hold_stream > 0) {
            c->stream_to = NULL;
            worker_soon(c->w, &c->more);
        }
        server_unref(srv);
    }
}

/* Client <c> closes: what it holds never runs. */
static void
client_abandon(struct rclient *c)
{
    struct rfrag *f = c->hhead;

    c->hhead = c->htail = NULL;
    c->stream_held = false;
    while (f != NULL) {
        struct rfrag *next = f->hnext;

        f->hnext = NULL;
        f->abandoned = true;
        if (f->gates_pending == 0) {
            f->held = false;
            frag_fail(f, PROTO_ERR_CLOSED);
        }
        f = next;
    }
}

void
request_drain(struct worker *w, void *arg)
{
    struct migration_drain *d = arg;
    struct rworker *rw = request_rworker(w);
    struct rdrain *rd = rw != NULL ? calloc(1, sizeof(*rd)) : NULL;
    size_t n = 0;

    if (rd == NULL) {
        /* out of memory: counted drained (nothing is tracked) */
        log_error("worker %u: no memory for a migration's drain barrier",
                  w->id);
        atomic_fetch_add(&d->done, 1);
        migration_drain_unref(d);
        return;
    }
    rd->d = d;
    for (size_t b = 0; b < MEMBER_BUCKETS; b++)
        for (struct rmember *m = rw->table[b]; m != NULL; m = m->next)
            if (m->pool == d->pool)
                n += m->nconns;
    rd->marks = calloc(n ? n : 1, sizeof(*rd->marks));
    n = 0;
    for (size_t b = 0; rd->marks != NULL && b < MEMBER_BUCKETS; b++)
        for (struct rmember *m = rw->table[b]; m != NULL; m = m->next)
            for (size_t i = 0; m->pool == d->pool && i < m->nconns; i++)
                if (m->conns[i] != NULL &&
                    m->conns[i]->answered < m->conns[i]->sent) {
                    rd->marks[n].s = m->conns[i];
                    rd->marks[n++].mark = m->conns[i]->sent;
                }
    rd->n = n;
    rd->next = rw->drains;
    rw->drains = rd;
    mig_timer(w, &rw->mig_timer);
}

/* Every WHEEL_MS while a drain or a gate waits: drains whose marks are
 * answered are counted; gates whose migration drained are sent. */
static void
mig_timer(struct worker *w, struct timer *t)
{
    struct rworker *rw = WORKER_OF(t, struct rworker, mig_timer);
    struct rdrain **pp = &rw->drains;
    struct rgate *g, *wait;

    while (*pp != NULL) {
        struct rdrain *rd = *pp;
        bool done = true;

        for (size_t i = 0; i < rd->n && done; i++)
            done = rd->marks[i].s->answered >= rd->marks[i].mark;
        if (!done) {
            pp = &rd->next;
            continue;
        }
        *pp = rd->next;
        atomic_fetch_add(&rd->d->done, 1);
        migration_drain_unref(rd->d);
        free(rd->marks);
        free(rd);
    }
    wait = rw->gwait;
    rw->gwait = rw->gwait_tail = NULL;
    while ((g = wait) != NULL) {
        wait = g->next;
        g->next = NULL;
        gate_go(g); /* sent, or back on the list */
    }
    if (rw->drains != NULL || rw->gwait != NULL)
        worker_timer_set(w, t, w->now_ms + WHEEL_MS);
}

/* ---- clients ------------------------------------------------------------- */

static void client_event(struct worker *w, struct ev *ev, uint32_t events);

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
        client_close(c);
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

static void
client_flush(struct rclient *c)
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
        req_free(r);
        /* room again: parse what waited (MAX_PIPELINE) */
        if (c->nreqs == MAX_PIPELINE - 1)
            worker_soon(c->w, &c->more);
    }
    if (c->closing && c->head == NULL && !c->closed && !c->lingering) {
        if (c->side.eof_in) {
            client_close(c);
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
            client_close(c);
            return;
        }
        if (n == 0)
            break;
    }
    if (c->side.eof_in)
        client_close(c);
}

static void
client_timer(struct worker *w, struct timer *t)
{
    struct rclient *c = WORKER_OF(t, struct rclient, timer);
    struct rserver *s = c->stream_to;

    if (c->lingering) {
        client_close(c);
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
    client_unstream(c, PROTO_ERR_TIMEOUT);
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
        client_close(c);
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
                return false; /* back-pressure: conn_flush wakes us */
            if (buf_append(&s->out, c->in.data + c->in.off, n) < 0) {
                conn_fail(s, PROTO_ERR_CLOSED, ENOMEM);
                continue;
            }
        }
        c->in.off += n;
        c->stream_left -= n;
        progress = true;
        if (s != NULL)
            conn_flush(s);
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
        conn_stream_done(s);
    }
    return true;
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
                client_close(c);
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
            client_close(c);
            return;
        }
        r->command = rq.command;
        r->flags = rq.flags;
        stats_add(&c->pool->stats[c->w->id].bytes_in, rq.head + rq.body);
        stats_add(&c->pool->stats[c->w->id].requests, 1);
        if (c->mode->dispatch(c, r, c->in.data + c->in.off, &rq) < 0) {
            client_close(c);
            return;
        }
        if (r->nfrags == 0) {
            /* chashd answered it: with an error (refused), or not */
            bool err = reply_is_error(r);
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
    client_flush(c);
}

static void
client_read(struct rclient *c)
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
            client_close(c);
            return;
        }
        n = io_side_read(&c->side, c->in.data + c->in.len,
                         c->in.cap - c->in.len);
        if (n < 0) {
            client_close(c);
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
            client_unstream(c, PROTO_ERR_CLOSED);
            c->stream_left = 0;
            c->in.off = c->in.len = 0;
        } else if (c->stream_left > 0) {
            return; /* all here: it goes on its turn, the close after */
        }
        c->closing = true;
        client_flush(c);
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
        client_read(c);
}

static void
client_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct rclient *c = WORKER_OF(ev, struct rclient, side.ev);

    (void)w;
    if (c->closed)
        return;
    io_side_edges(&c->side, events);
    if (events & EPOLLERR) {
        client_close(c);
        return;
    }
    if (c->lingering) {
        client_linger(c);
        return;
    }
    if (events & EPOLLOUT)
        client_flush(c);
    if (!c->closed)
        client_read(c);
}

/*
 * <c> will not send the rest of the value it streams (it closed, or
 * stalled): a value that never started leaves its member's queue unsent;
 * one under way fails its member connection (conn_abandon), its own
 * request and those written before it with <kind>. What is left of the
 * value, should it still come, is read and dropped.
 */
static void
client_unstream(struct rclient *c, int kind)
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
            frag_fail(f, kind);
        }
        return;
    }
    conn_abandon(s, kind);
}

/*
 * Close <c>. Requests still waiting for members stay alive as orphans
 * until their replies come (a member answers in order: its FIFO must keep
 * them), then go with their last fragment.
 */
static void
client_close(struct rclient *c)
{
    struct rreq *r = c->head;

    if (c->closed)
        return;
    c->closed = true;
    /* first: failing its value's connection answers its requests, which
     * schedules <more>, cancelled here */
    client_unstream(c, PROTO_ERR_CLOSED);
    client_abandon(c);
    worker_soon_cancel(c->w, &c->more);
    worker_timer_del(c->w, &c->timer);
    while (r != NULL) {
        struct rreq *next = r->next;
        if (r->pending > 0) {
            if (c->mode->release != NULL)
                c->mode->release(r);
            r->mode_data = NULL;
            r->client = NULL; /* its last fragment frees it */
        } else {
            req_free(r);
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
    client_close(WORKER_OF(l, struct rclient, link));
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
    io_side_init(&c->side, fd, client_event);
    c->w = w;
    c->pool = p;
    pool_ref(p);
    c->mode = request_mode_of(snap);
    c->id = ++rw->next_client_id;
    c->link.close = link_close;
    c->more.run = client_more;
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
        client_close(c);
        return;
    }
}

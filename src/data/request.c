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

/* ---- the worker's members ------------------------------------------------ */

static void rworker_close(struct worker *w, struct worker_conn *l);
static void sweep_timer(struct worker *w, struct timer *t);

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
    rw->mig_timer.on_expire = request_mig_timer;
    rw->sweep_timer.on_expire = sweep_timer;
    rw->next_client_id = (uint64_t)w->id << 48;
    worker_conn_add(w, &rw->link);
    w->requests = rw;
    return rw;
}

/* The connections of member <s> in this worker (created on first use). */
struct rmember *
request_member_get(struct rworker *rw, struct server *s, struct pool *p,
                   size_t nconns, const struct request_mode *mode)
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
                    request_conn_destroy(m->conns[i]);
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
        request_gate_done(g);
    }
    for (size_t b = 0; b < MEMBER_BUCKETS; b++) {
        while (rw->table[b] != NULL) {
            struct rmember *m = rw->table[b];

            rw->table[b] = m->next;
            for (size_t i = 0; i < m->nconns; i++)
                if (m->conns[i] != NULL)
                    request_conn_destroy(m->conns[i]);
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

void
request_req_free(struct rreq *r)
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
            request_gate_free(g);
        }
    }
    if (r->frags != &r->one)
        free(r->frags);
    buf_free(&r->reply);
    free(r);
}

/* The protocol <r>'s replies are written in: its client's, fixed when
 * the client was accepted. */
const struct proto *
request_req_proto(const struct rreq *r)
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

/* The owner of <key> (its ring hash in <snap>: <hash>) in the
 * migration's old placement, or NULL. */
struct server *
request_old_owner(const struct pool_snapshot *snap, const char *key, size_t len,
                  uint64_t hash)
{
    return snap->mig != NULL
               ? pool_snapshot_owner_of(snap->mig->old, snap, key, len, hash)
               : NULL;
}

/* In the first stage of a two-stage migration, a key moving to a member
 * whose name sorts first has not started to move: it stays on <o>. */
bool
request_deferred(const struct pool_snapshot *snap, const struct server *o,
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
        struct server *o = request_old_owner(snap, key, len, *hash);

        if (o != NULL && o != s && request_deferred(snap, o, s))
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
    size_t n = request_req_proto(r)->error_reply(buf, sizeof(buf), kind, msg);

    request_answer(r, buf, n);
}

/* Whether <r>'s reply (whole: a streamed one is a value) is an error. */
bool
request_reply_is_error(const struct rreq *r)
{
    if (r->nfrags == 1 && r->mode_data == NULL)
        return r->frags[0].error;
    return r->mode->is_error(r->reply.data + r->reply.off, buf_size(&r->reply));
}

/* <r>'s last fragment is answered: merge, or it was the reply itself. */
static void
req_complete(struct rreq *r)
{
    if (r->nfrags > 1 || r->mode_data != NULL)
        r->mode->complete(r);
    r->done = true;
    if (r->client != NULL && request_reply_is_error(r))
        stats_add(&r->client->pool->stats[r->client->w->id].errors, 1);
}

/* Fragment <f>'s reply bytes (the whole reply, or a part of a streamed
 * one). Plain requests take them as their reply; merged ones keep them
 * per fragment. */
int
request_frag_data(struct rfrag *f, const char *data, size_t len)
{
    struct rreq *r = f->req;
    bool merged = r->nfrags > 1 || r->mode_data != NULL || f->gate != NULL;

    return buf_append(merged ? &f->reply : &r->reply, data, len);
}

/* <f> is answered (its reply complete, or failed). Orphaned requests
 * (their client gone) are freed with their last fragment. */
void
request_frag_done(struct rfrag *f)
{
    struct rreq *r = f->req;

    if (f->conn != NULL)
        f->conn->answered++;
    if (f->gate != NULL) {
        f->conn = NULL;
        request_gate_done(f->gate);
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
        request_req_free(r);
        return;
    }
    /* Written from the client's task, not here: a fragment may fail at
     * once, inside the dispatch that is still using its request. */
    worker_soon(r->client->w, &r->client->ready);
}

/* <f> failed: the mode's error reply of <kind> in its place. */
void
request_frag_fail(struct rfrag *f, int kind)
{
    char buf[256];
    size_t n =
        request_req_proto(f->req)->error_reply(buf, sizeof(buf), kind, NULL);

    f->error = true;
    f->failed = true;
    request_frag_data(f, buf, n);
    request_frag_done(f);
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

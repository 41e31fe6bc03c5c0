/* request_gate.c -- the request engine during a live migration: a
 * request on a moving key first moves the key off its old owner (a gate),
 * the drain barrier (nothing moves before every request sent under the
 * old ring is answered), the moved-key cache, and requests held behind
 * their gates in their client's order.
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

/* ---- migration: gates and the drain barrier ------------------------------ */

int
request_key_source(const struct pool_snapshot *snap, const char *key,
                   size_t len, uint64_t hash, const struct server *to,
                   struct server **from, const char **why)
{
    struct server *n, *o;

    if (snap->mig == NULL || snap->ring == NULL ||
        (o = request_old_owner(snap, key, len, hash)) == NULL)
        return 0; /* no migration, or nothing was owned before it */
    n = snap->servers[chash_ring_lookup(snap->ring, hash)];
    if (o == n || atomic_load_explicit(&o->mig_skip, memory_order_relaxed) ||
        request_deferred(snap, o, n) ||
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

void
request_gate_free(struct rgate *g)
{
    server_unref(g->from);
    server_unref(g->to);
    pool_unref(g->pool);
    buf_free(&g->frag.reply);
    free(g->key);
    free(g);
}

/* Put <g> on its old owner's connection now (its migration drained).
 * A gate that cannot be sent is answered at once (request_gate_done). */
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
        request_gate_done(g);
        return;
    }
    if (r->mode->gate_build(request_snapshot(r->client), g->to, g->key, g->len,
                            r->command, g->tries > 0, &cmd, &g->command) < 0) {
        buf_free(&cmd);
        g->frag.error = true;
        buf_append(&g->frag.reply, "-ERR out of memory\r\n", 20);
        request_gate_done(g);
        return;
    }
    g->step = 0;
    s = request_send_to(r, &g->frag, g->from, g->hash);
    if (s != NULL)
        request_conn_queue(s, &g->frag, cmd.data, cmd.len, NULL);
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
        request_gate_done(g);
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
void
request_gate_done(struct rgate *g)
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
            s = res == GATE_NEXT
                    ? request_send_to(r, &g->frag, g->to, f->hold_hash)
                    : request_send_to(r, &g->frag, g->from, g->hash);
            if (s != NULL)
                request_conn_queue(s, &g->frag, next.data, next.len, NULL);
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
    request_gate_free(g);
    INVARIANT(f->gates_pending > 0);
    if (--f->gates_pending > 0)
        return;
    if (r->client != NULL)
        request_client_release(r->client);
    else if (f->held) {
        /* its client left while it waited: it never runs */
        f->held = false;
        request_frag_fail(f, PROTO_ERR_CLOSED);
    }
}

/* Hold fragment <f> (to member <srv>) until its gates are answered and
 * every fragment its client holds before it has gone. */
void
request_gate_hold(struct rreq *r, struct rfrag *f, struct server *srv,
                  uint64_t hash, const char *buf, size_t len, uint64_t stream)
{
    struct rclient *c = r->client;
    struct rgate *g;
    unsigned n = 0;

    if (buf_append(&f->pending, buf, len) < 0) {
        while ((g = f->gates) != NULL) {
            f->gates = g->next;
            request_gate_free(g);
        }
        c->stream_left = stream; /* read and dropped */
        request_frag_fail(f, PROTO_ERR_CLOSED);
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
    request_client_release(c);
}

/* Send (or fail) <c>'s held fragments whose gates are all answered, in
 * order, up to the first that still waits. */
void
request_client_release(struct rclient *c)
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
            size_t n = request_req_proto(r)->error_reply(
                buf, sizeof(buf), PROTO_ERR_REQUEST, f->gate_error);

            f->error = true;
            request_frag_data(f, buf, n);
            buf_free(&f->pending);
            if (f->hold_stream > 0) {
                c->stream_to = NULL; /* its value is read and dropped */
                worker_soon(c->w, &c->more);
            }
            request_frag_done(f);
        } else if ((s = request_send_to(r, f, srv, f->hold_hash)) != NULL) {
            struct buf b = f->pending;

            memset(&f->pending, 0, sizeof(f->pending));
            request_conn_queue(s, f, b.data + b.off, buf_size(&b),
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
void
request_client_abandon(struct rclient *c)
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
            request_frag_fail(f, PROTO_ERR_CLOSED);
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
    request_mig_timer(w, &rw->mig_timer);
}

/* Every WHEEL_MS while a drain or a gate waits: drains whose marks are
 * answered are counted; gates whose migration drained are sent. */
void
request_mig_timer(struct worker *w, struct timer *t)
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

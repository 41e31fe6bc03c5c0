/* pool.c -- pools, members and ring snapshots: the one place that turns a
 * membership (names, weights, states, ramps) into a published libchash
 * ring, and frees retired rings once no worker can hold them (QSBR).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "model/pool.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>

#include "base/clock.h"
#include "base/invariant.h"
#include "base/log.h"
#include "conf/ring.h"
#include "loop/access_log.h"
#include "loop/builder.h"
#include "model/hotkeys.h"
#include "model/migration_view.h"
#include "model/state.h"
#include "proto/modes.h"

#define EPOCH_QUIESCENT UINT64_MAX

static unsigned nworkers;
/* Global epoch, bumped at every retirement; each worker's last seen
 * epoch (or EPOCH_QUIESCENT), one cache line each. */
static _Atomic uint64_t epoch = 1;
struct epoch_slot {
    _Atomic uint64_t seen;
} __attribute__((aligned(64)));
static struct epoch_slot *seen;
static struct pool_snapshot *retired; /* list, control thread */
static size_t nretired;

static struct pool **pools; /* registry, control thread */
static size_t npools, cappools;
static uint64_t next_server_id = 1;

static const char *const state_names[SERVER_STATE_COUNT] = {
    "up", "down", "ejected", "draining", "maint", "removed",
};

static const char *const health_names[] = {"up", "down", "ejected"};

const char *
server_state_name(int state)
{
    if (state < 0 || state >= SERVER_STATE_COUNT)
        return "unknown";
    return state_names[state];
}

const char *
server_health_name(int health)
{
    if (health < HEALTH_UP || health > HEALTH_EJECTED)
        return "unknown";
    return health_names[health];
}

static void *
slots_alloc(size_t size)
{
    size_t len = (size * nworkers + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, len);

    if (p != NULL)
        memset(p, 0, len);
    return p;
}

int
pool_global_init(unsigned workers)
{
    nworkers = workers;
    seen = aligned_alloc(64, sizeof(*seen) * workers);
    if (seen == NULL)
        return -1;
    for (unsigned i = 0; i < workers; i++)
        atomic_init(&seen[i].seen, EPOCH_QUIESCENT);
    return 0;
}

unsigned
pool_workers(void)
{
    return nworkers;
}

/* ---- epochs -------------------------------------------------------------- */

void
pool_epoch_enter(unsigned worker)
{
    /* Entered from quiescence only: a worker holds no snapshot across
     * iterations, and nested sections would hide a stale one. */
    INVARIANT(worker < nworkers &&
              atomic_load_explicit(&seen[worker].seen, memory_order_relaxed) ==
                  EPOCH_QUIESCENT);
    /* seq_cst: the store must be ordered before this worker's later loads
     * of any pool's snapshot pointer (see pool_reclaim). */
    atomic_store(&seen[worker].seen, atomic_load(&epoch));
}

void
pool_epoch_quiesce(unsigned worker)
{
    INVARIANT(worker < nworkers);
    atomic_store(&seen[worker].seen, EPOCH_QUIESCENT);
}

static void
snapshot_free(struct pool_snapshot *snap)
{
    if (snap == NULL)
        return;
    for (size_t i = 0; i < snap->n; i++)
        server_unref(snap->servers[i]);
    chash_ring_destroy(snap->ring);
    chash_ring_destroy(snap->routing);
    migration_view_unref(snap->mig);
    replica_view_unref(snap->fill);
    free(snap->set.redis_auth);
    access_log_unref(snap->set.access_log);
    free(snap->servers);
    free(snap->members);
    free(snap->states);
    free(snap);
}

/* Retire <old>, just replaced by a newer snapshot: tag it with a new
 * epoch. A worker that enters that epoch or later read the pointer after
 * the swap, so it cannot hold <old>. */
static void
snapshot_retire(struct pool_snapshot *old)
{
    if (old == NULL)
        return;
    /* Retired once: a second retirement would free it twice. */
    INVARIANT(old->retire_epoch == 0 && old->next_retired == NULL);
    old->retire_epoch = atomic_fetch_add(&epoch, 1) + 1;
    old->next_retired = retired;
    retired = old;
    nretired++;
}

void
pool_reclaim(void)
{
    uint64_t min = EPOCH_QUIESCENT;
    struct pool_snapshot **pp = &retired;

    for (unsigned i = 0; i < nworkers; i++) {
        uint64_t s = atomic_load(&seen[i].seen);
        if (s < min)
            min = s;
    }
    while (*pp != NULL) {
        struct pool_snapshot *snap = *pp;
        INVARIANT(snap->retire_epoch != 0 &&
                  snap->retire_epoch <= atomic_load(&epoch));
        if (snap->retire_epoch <= min && snap->pins == 0) {
            *pp = snap->next_retired;
            snapshot_free(snap);
            INVARIANT(nretired > 0);
            nretired--;
        } else {
            pp = &snap->next_retired;
        }
    }
}

size_t
pool_retired_count(void)
{
    return nretired;
}

/* ---- references ---------------------------------------------------------- */

void
server_ref(struct server *s)
{
    /* Only a holder takes another reference: from 0, it is being freed. */
    INVARIANT(atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed) > 0);
}

void
server_unref(struct server *s)
{
    int was;

    if (s == NULL)
        return;
    was = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
    INVARIANT(was > 0);
    if (was != 1)
        return;
    free(s->name);
    free(s->zone);
    conf_addr_deinit(&s->addr);
    free(s->stats);
    replica_log_deinit(&s->rlog);
    free(s);
}

static struct pool_hooks pool_hooks;

void
pool_set_hooks(const struct pool_hooks *h)
{
    pool_hooks = *h;
}

uint32_t
pool_member_failed(struct pool *p, struct server *s)
{
    uint32_t fails =
        atomic_fetch_add_explicit(&s->fails, 1, memory_order_relaxed) + 1;

    if (pool_hooks.member_failing != NULL)
        pool_hooks.member_failing(p, fails);
    return fails;
}

void
pool_ref(struct pool *p)
{
    INVARIANT(atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed) > 0);
}

void
pool_unref(struct pool *p)
{
    int was;

    if (p == NULL)
        return;
    was = atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel);
    INVARIANT(was > 0);
    if (was != 1)
        return;
    /* Nobody can read p->snap any more: no connection and no registry
     * entry refers to <p>. */
    snapshot_free(atomic_load(&p->snap));
    for (size_t i = 0; i < p->nservers; i++)
        server_unref(p->servers[i]);
    free(p->servers);
    free(p->lfds);
    free(p->stats);
    free(p->hot);
    free(p->name);
    access_log_unref(p->access_log);
    conf_pool_deinit(&p->cfg);
    free(p);
}

/* ---- members ------------------------------------------------------------- */

const struct conf_server *
pool_member_moved(const struct pool *p, const struct conf_pool *cp,
                  const struct server **was)
{
    for (size_t i = 0; i < cp->nservers; i++) {
        const struct conf_server *cs = &cp->servers[i];
        const struct server *s = pool_server_find(p, cs->name);

        if (s != NULL && atomic_load(&s->state) != SERVER_REMOVED &&
            !conf_addr_equal(&s->addr, &cs->addr)) {
            *was = s;
            return cs;
        }
    }
    return NULL;
}

static int
addr_copy(struct conf_addr *dst, const struct conf_addr *src)
{
    *dst = *src;
    dst->text = strdup(src->text);
    return dst->text == NULL ? -1 : 0;
}

static bool
addr_equal(const struct conf_addr *a, const struct conf_addr *b)
{
    return conf_addr_equal(a, b);
}

/* The effective state from health and the operator's admin state. */
static int
server_compute_state(const struct server *s)
{
    if (s->pool == NULL)
        return SERVER_REMOVED;
    if (s->admin == STATE_ADMIN_MAINT)
        return SERVER_MAINT;
    if (s->admin == STATE_ADMIN_DRAIN)
        return SERVER_DRAINING;
    if (s->health == HEALTH_DOWN)
        return SERVER_DOWN;
    if (s->health == HEALTH_EJECTED)
        return SERVER_EJECTED;
    return SERVER_UP;
}

static void
server_update_state(struct server *s)
{
    int st = server_compute_state(s);

    if (st != atomic_load_explicit(&s->state, memory_order_relaxed)) {
        atomic_store_explicit(&s->state, st, memory_order_relaxed);
        s->since_ms = clock_ms();
    }
}

/* A new member of <p> from <cs>; ramping from 0 when <ramp> and the pool
 * has a slow start. The pool's list takes the returned reference. */
static struct server *
server_create(struct pool *p, const struct conf_server *cs, bool ramp)
{
    struct server *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->name = strdup(cs->name);
    s->zone = cs->zone ? strdup(cs->zone) : NULL;
    s->stats = slots_alloc(sizeof(struct stats_server));
    if (s->name == NULL || s->stats == NULL || (cs->zone && !s->zone) ||
        addr_copy(&s->addr, &cs->addr) < 0) {
        free(s->name);
        free(s->zone);
        free(s->stats);
        free(s);
        return NULL;
    }
    replica_log_init(&s->rlog);
    s->id = next_server_id++;
    s->pool = p;
    s->weight = cs->weight;
    s->health = HEALTH_UP;
    s->admin = STATE_ADMIN_UP;
    s->ramp = 1.0;
    s->since_ms = clock_ms();
    if (ramp && p->cfg.slow_start_ms > 0 &&
        p->cfg.ring.algo != CHASH_ALGO_JUMP) {
        s->ramp = 0.0;
        s->ramp_from = 0.0;
        s->ramping = true;
        s->ramp_start_ms = s->since_ms;
    }
    atomic_init(&s->refs, 1);
    atomic_init(&s->state, SERVER_UP);
    return s;
}

static int
pool_list_add(struct pool *p, struct server *s)
{
    if (p->nservers == p->capservers) {
        size_t cap = p->capservers ? p->capservers * 2 : 8;
        struct server **v = realloc(p->servers, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        p->servers = v;
        p->capservers = cap;
    }
    INVARIANT(s->pool == p);
    p->servers[p->nservers++] = s;
    return 0;
}

/* Take <s> out of <p>'s membership: REMOVED for the workers, probes
 * cancelled, the list's reference dropped. */
static void
pool_list_remove(struct pool *p, size_t i)
{
    struct server *s = p->servers[i];

    INVARIANT(i < p->nservers && s->pool == p);
    if (pool_hooks.member_leaving != NULL)
        pool_hooks.member_leaving(s);
    s->pool = NULL;
    server_update_state(s);
    memmove(&p->servers[i], &p->servers[i + 1],
            (p->nservers - i - 1) * sizeof(*p->servers));
    p->nservers--;
    server_unref(s);
}

struct server *
pool_server_find(const struct pool *p, const char *name)
{
    for (size_t i = 0; i < p->nservers; i++)
        if (strcmp(p->servers[i]->name, name) == 0)
            return p->servers[i];
    return NULL;
}

static long
pool_server_index(const struct pool *p, const char *name)
{
    for (size_t i = 0; i < p->nservers; i++)
        if (strcmp(p->servers[i]->name, name) == 0)
            return (long)i;
    return -1;
}

/* ---- snapshots ----------------------------------------------------------- */

/* <set> from <cp>, with a reference to <alog>, the pool's access log
 * opened for <cp> (NULL: off). */
static void
settings_from_conf(struct pool_settings *set, const struct conf_pool *cp,
                   struct access_log *alog)
{
    memset(set, 0, sizeof(*set));
    set->mode = cp->mode;
    set->hash_key = cp->hash_key;
    set->hot = cp->hot_keys != CONF_HOT_OFF && cp->mode != CONF_MODE_TCP;
    set->hot_spread = cp->hot_keys == CONF_HOT_SPREAD && cp->replicas > 1;
    set->zoned = cp->zone_policy == CONF_ZONE_HIERARCHICAL;
    memcpy(set->zw, cp->zone_weights, sizeof(set->zw));
    set->nzw = cp->nzone_weights;
    set->on_failure = cp->on_failure;
    /* Spilling to a member that does not own the key is what `error`
     * exists to prevent: bounded loads are off in that policy. */
    set->balance_factor =
        cp->on_failure == CONF_ON_FAILURE_ERROR ? 0 : cp->balance_factor;
    set->retries = cp->retries;
    set->connect_timeout_ms = cp->connect_timeout_ms;
    set->idle_timeout_ms = cp->idle_timeout_ms;
    set->client_connections = cp->client_connections;
    set->tcpkeepalive = cp->tcpkeepalive;
    set->auto_eject = cp->auto_eject_hosts;
    set->failure_limit = cp->server_failure_limit;
    set->proto = proto_find(cp->mode);
    set->timeout_ms = cp->timeout_ms;
    set->server_connections =
        cp->server_connections > 0 ? cp->server_connections : 1;
    set->client_max_request = cp->client_max_request;
    set->item_size_max = cp->item_size_max;
    set->redis_db = cp->redis_db;
    set->allow_fanout_admin = cp->allow_fanout_admin;
    set->preconnect = cp->preconnect;
    set->migration = cp->migration;
    set->etcd_fence = cp->migration == CONF_MIGRATION_COPY &&
                      cp->members_from == CONF_MEMBERS_ETCD;
    set->migration_timeout_ms = cp->migration_timeout_ms;
    set->replicas = cp->replicas > 0 ? cp->replicas : 1;
    set->write_quorum = cp->write_quorum;
    set->read_policy = cp->read_policy;
    set->read_quorum = cp->read_quorum;
    set->repair_log = cp->repair_log;
    set->accept_proxy = cp->accept_proxy;
    set->send_proxy = cp->send_proxy;
    set->fast_path = cp->fast_path;
    memcpy(set->hash_chain, cp->hash_chain, sizeof(set->hash_chain));
    set->nhash_chain = cp->nhash_chain > 0 ? cp->nhash_chain : 1;
    set->forward_headers = cp->forward_headers;
    set->member_header = cp->member_header;
    set->client_max_header = cp->client_max_header;
    set->client_max_uri = cp->client_max_uri;
    set->backend_keepalive = cp->backend_keepalive;
    memcpy(set->hash_tag, cp->hash_tag, sizeof(set->hash_tag));
    /* A string of the snapshot's own: a reload frees the pool's config
     * while workers may still read this snapshot. */
    set->redis_auth = cp->redis_auth != NULL ? strdup(cp->redis_auth) : NULL;
    /* A reference, not a copy: a snapshot is built at every change, the
     * log is opened once per config. */
    access_log_ref(alog);
    set->access_log = alog;
}

/* Whether member <s> is placed on the ring of the next snapshot. */
static bool
server_in_ring(const struct pool *p, const struct server *s)
{
    int st =
        atomic_load_explicit((_Atomic int *)&s->state, memory_order_relaxed);

    if (st == SERVER_MAINT || st == SERVER_REMOVED)
        return false;
    /* migration: copy places keys by membership alone: a drained member
     * gives its keys away (they move), health moves nothing (a down
     * member's keys wait for it, they are nowhere else). warmup: a
     * drained member leaves the ring (its keys warm up elsewhere). */
    /* replicas: a member keeps its place in every replica set whatever
     * its health (counted as failed while down: placement is stable) */
    if (p->cfg.migration == CONF_MIGRATION_COPY || p->cfg.replicas > 1 ||
        (p->cfg.migration == CONF_MIGRATION_WARMUP &&
         s->admin != STATE_ADMIN_UP))
        return s->admin == STATE_ADMIN_UP;
    /* remap: only usable members own keys; failover and error keep the
     * ring as configured and skip or refuse at lookup. */
    if (p->cfg.on_failure == CONF_ON_FAILURE_REMAP)
        return st == SERVER_UP;
    return true;
}

/*
 * A snapshot of <p>'s membership as the control thread sees it now,
 * without its rings (snapshot_finish builds them, possibly on the builder
 * thread): members in the ring with their weights, ramps and states, each
 * referenced, and the settings. NULL with errno ENOMEM.
 */
static struct pool_snapshot *
snapshot_prepare(struct pool *p)
{
    struct pool_snapshot *snap = calloc(1, sizeof(*snap));

    if (snap == NULL)
        return NULL;
    settings_from_conf(&snap->set, &p->cfg, p->access_log);
    snap->mig = p->mig_view;
    if (snap->mig != NULL)
        migration_view_ref(snap->mig);
    if (replica_fill_view(p, &snap->fill) < 0) {
        snapshot_free(snap);
        errno = ENOMEM;
        return NULL;
    }
    snap->gen = p->gen;
    snap->moved = -1;
    if (p->nservers > 0) {
        snap->members = calloc(p->nservers, sizeof(*snap->members));
        snap->servers = calloc(p->nservers, sizeof(*snap->servers));
        snap->states = calloc(p->nservers, sizeof(*snap->states));
        if (snap->members == NULL || snap->servers == NULL ||
            snap->states == NULL) {
            snapshot_free(snap);
            errno = ENOMEM;
            return NULL;
        }
    }
    for (size_t i = 0; i < p->nservers; i++) {
        struct server *s = p->servers[i];
        if (!server_in_ring(p, s))
            continue;
        /* The name is the member's own, immutable, alive as long as the
         * snapshot holds its reference: the builder may read it. */
        snap->members[snap->n].name = s->name;
        snap->members[snap->n].weight = s->weight;
        snap->members[snap->n].ramp = s->ramp;
        snap->states[snap->n] =
            atomic_load_explicit(&s->state, memory_order_relaxed);
        server_ref(s);
        snap->servers[snap->n++] = s;
    }
    return snap;
}

/*
 * Build <snap>'s rings from its member list, and compare its routing view
 * with <prev>'s (the snapshot it will replace; NULL for a pool's first).
 * Touches only <snap>, <cfg> and the immutable <prev>: runs on the builder
 * thread. 0, or a negative libchash error (the snapshot is not usable).
 */
static int
snapshot_finish(struct pool_snapshot *snap, const struct chash_config *cfg,
                const struct pool_snapshot *prev)
{
    struct chash_member *m = NULL;
    const struct chash_ring *was, *now;
    size_t up = 0;
    int rc;

    const char **zones = NULL;

    if (snap->set.zoned && snap->n > 0) {
        /* zone_policy: hierarchical: each member's zone, from its server */
        if ((zones = calloc(snap->n, sizeof(*zones))) == NULL)
            return -CHASH_ENOMEM;
        for (size_t i = 0; i < snap->n; i++)
            zones[i] = snap->servers[i]->zone;
    }
    rc = snap->n > 0
             ? ring_create(cfg, snap->set.zoned, snap->members, zones, snap->n,
                           snap->set.zw, snap->set.nzw, &snap->ring)
             : -CHASH_EEMPTY;
    if (rc == -CHASH_EEMPTY)
        snap->ring = NULL; /* nobody owns anything: new clients refused */
    else if (rc < 0) {
        free(zones);
        return rc;
    }
    for (size_t i = 0; i < snap->n; i++) {
        if (snap->states[i] != SERVER_UP)
            continue;
        up++;
        if (snap->ring != NULL)
            snap->usable_points += chash_ring_member_points(snap->ring, i);
    }
    /* The routing view: where new keys go, members that take none left
     * out (a failover ring keeps their points; the data path skips
     * them). Reports and the dashboard read it; workers never do. */
    snap->routes = snap->ring != NULL && up > 0;
    if (snap->routes && up < snap->n) {
        const char **uz = calloc(up, sizeof(*uz));

        m = calloc(up, sizeof(*m));
        if (m == NULL || uz == NULL) {
            free(m);
            free(uz);
            free(zones);
            return -CHASH_ENOMEM;
        }
        up = 0;
        for (size_t i = 0; i < snap->n; i++)
            if (snap->states[i] == SERVER_UP) {
                uz[up] = zones ? zones[i] : NULL;
                m[up++] = snap->members[i];
            }
        rc = ring_create(cfg, snap->set.zoned, m, uz, up, snap->set.zw,
                         snap->set.nzw, &snap->routing);
        free(m);
        free(uz);
        if (rc == -CHASH_EEMPTY)
            snap->routes = false; /* the up members own nothing yet */
        else if (rc < 0) {
            free(zones);
            return rc;
        }
    }
    free(zones);
    /* a migration's stages, before any request may route by them */
    if (snap->mig != NULL)
        migration_view_decide(snap->mig, snap);
    snap->fill_same = replica_fill_same(snap);
    was = prev != NULL ? pool_snapshot_routing(prev) : NULL;
    now = pool_snapshot_routing(snap);
    if (prev == NULL)
        snap->moved = -1;
    else if (was == NULL || now == NULL)
        snap->moved = was == now ? 0 : 1;
    else if (chash_ring_diff(was, now, &snap->moved) < 0)
        snap->moved = -1; /* algorithm or hash changed by a reload */
    return 0;
}

const struct chash_ring *
pool_snapshot_routing(const struct pool_snapshot *snap)
{
    if (snap == NULL || !snap->routes)
        return NULL;
    return snap->routing != NULL ? snap->routing : snap->ring;
}

double
pool_snapshot_routing_share(const struct pool_snapshot *snap, const char *name)
{
    const struct chash_ring *r = pool_snapshot_routing(snap);

    for (size_t i = 0; r != NULL && i < chash_ring_members(r); i++)
        if (strcmp(chash_ring_member_name(r, i), name) == 0)
            return chash_ring_share(r, i);
    return 0.0;
}

/* The index of member <s> in <snap>'s ring, or -1 when it is not in it. */
static ssize_t
snapshot_index(const struct pool_snapshot *snap, const struct server *s)
{
    if (snap == NULL || snap->ring == NULL)
        return -1;
    for (size_t i = 0; i < snap->n; i++)
        if (snap->servers[i] == s)
            return (ssize_t)i;
    return -1;
}

struct server *
pool_snapshot_owner(const struct pool_snapshot *snap, const char *key,
                    size_t len)
{
    size_t off, n;

    if (snap->ring == NULL)
        return NULL;
    n = chash_key_tag(key, len, snap->set.hash_tag, &off);
    return snap->servers[chash_ring_lookup(
        snap->ring, chash_ring_hash(snap->ring, key + off, n))];
}

struct server *
pool_snapshot_owner_of(const struct pool_snapshot *snap,
                       const struct pool_snapshot *by, const char *key,
                       size_t len, uint64_t hash)
{
    struct chash_config a, b;

    if (snap->ring == NULL)
        return NULL;
    if (by->ring != NULL && strcmp(snap->set.hash_tag, by->set.hash_tag) == 0) {
        chash_ring_config(snap->ring, &a);
        chash_ring_config(by->ring, &b);
        if (a.hash == b.hash)
            return snap->servers[chash_ring_lookup(snap->ring, hash)];
    }
    return pool_snapshot_owner(snap, key, len);
}

double
pool_snapshot_share(const struct pool_snapshot *snap, const struct server *s)
{
    ssize_t i = snapshot_index(snap, s);
    return i < 0 ? 0.0 : chash_ring_share(snap->ring, (size_t)i);
}

size_t
pool_snapshot_points(const struct pool_snapshot *snap, const struct server *s)
{
    ssize_t i = snapshot_index(snap, s);
    return i < 0 ? 0 : chash_ring_member_points(snap->ring, (size_t)i);
}

/* A waiter of pool_on_published(). */
struct pool_waiter {
    uint64_t gen; /* live once a snapshot holds this change count */
    void (*cb)(struct pool *p, const struct pool_change *chg, void *arg);
    void *arg;
    struct pool_waiter *next;
};

/* Call the waiters whose changes <chg> made live (all of them, with
 * <chg> NULL, when <all>). In registration order. */
static void
waiters_fire(struct pool *p, const struct pool_change *chg, bool all)
{
    struct pool_waiter **pp = &p->waiters, *ready = NULL, **tail = &ready;

    while (*pp != NULL) {
        struct pool_waiter *wt = *pp;
        if (all || wt->gen <= chg->to->gen) {
            *pp = wt->next;
            wt->next = NULL;
            *tail = wt;
            tail = &wt->next;
        } else {
            pp = &wt->next;
        }
    }
    /* Unlinked first: a callback may register new waiters. */
    while (ready != NULL) {
        struct pool_waiter *wt = ready;
        ready = wt->next;
        wt->cb(p, all ? NULL : chg, wt->arg);
        free(wt);
    }
}

/* Make <snap> (finished) the current snapshot of <p>. */
static void
snapshot_publish(struct pool *p, struct pool_snapshot *snap,
                 struct pool_change *chg)
{
    struct pool_snapshot *old = atomic_load(&p->snap);

    snap->version = old != NULL ? old->version + 1 : 1;
    /* seq_cst, like the worker's load (pool_snapshot): the QSBR argument
     * in pool_reclaim needs this store and that load in the single total
     * order with the epoch and the workers' marks. */
    atomic_store(&p->snap, snap);
    snapshot_retire(old);
    p->last.from = old;
    p->last.to = snap;
    if (chg != NULL)
        *chg = p->last;
    waiters_fire(p, &p->last, false);
}

int
pool_rebuild(struct pool *p, struct pool_change *chg)
{
    struct pool_snapshot *snap = snapshot_prepare(p);
    int rc;

    /* Not beside a build in flight: it would publish over this one. */
    INVARIANT(p->build == NULL || p->removed);
    if (snap == NULL)
        return -1;
    rc = snapshot_finish(snap, &p->cfg.ring, atomic_load(&p->snap));
    if (rc < 0) {
        log_error("pool %s: cannot build the ring: %s", p->name,
                  chash_strerror(rc));
        snapshot_free(snap);
        errno = rc == -CHASH_ENOMEM ? ENOMEM : EINVAL;
        return -1;
    }
    snapshot_publish(p, snap, chg);
    return 0;
}

struct pool_snapshot *
pool_snapshot_of(struct pool *p, const struct chash_member *m, size_t n,
                 char *err, size_t errlen)
{
    struct pool_snapshot *snap = calloc(1, sizeof(*snap));
    int rc;

    if (snap == NULL ||
        (n > 0 &&
         ((snap->members = calloc(n, sizeof(*snap->members))) == NULL ||
          (snap->servers = calloc(n, sizeof(*snap->servers))) == NULL ||
          (snap->states = calloc(n, sizeof(*snap->states))) == NULL))) {
        snapshot_free(snap);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    settings_from_conf(&snap->set, &p->cfg, p->access_log);
    snap->moved = -1;
    snap->standalone = true;
    for (size_t i = 0; i < n; i++) {
        struct server *s = pool_server_find(p, m[i].name);

        if (s == NULL) {
            snprintf(err, errlen, "member %s is no longer in the pool",
                     m[i].name);
            snapshot_free(snap);
            return NULL;
        }
        snap->members[i].name = s->name;
        snap->members[i].weight = m[i].weight;
        snap->members[i].ramp = 1.0;
        snap->states[i] = atomic_load(&s->state);
        server_ref(s);
        snap->servers[snap->n++] = s;
    }
    rc = snapshot_finish(snap, &p->cfg.ring, NULL);
    if (rc < 0) {
        snprintf(err, errlen, "cannot build the ring: %s", chash_strerror(rc));
        snapshot_free(snap);
        return NULL;
    }
    snap->retire_epoch = 0;
    return snap;
}

void
pool_snapshot_pin(struct pool_snapshot *snap)
{
    snap->pins++;
}

void
pool_snapshot_unpin(struct pool_snapshot *snap)
{
    INVARIANT(snap->pins > 0);
    if (--snap->pins == 0 && snap->standalone)
        snapshot_free(snap);
}

/* A snapshot being built on the builder thread. */
struct pool_build {
    struct builder_job job;
    struct pool *p;             /* (ref held) */
    struct pool_snapshot *snap; /* being built */
    struct pool_snapshot *prev; /* the current one (pinned) */
    struct chash_config cfg;
    int rc;
};

static void build_start(struct pool *p);

static void
build_work(struct builder_job *job)
{
    struct pool_build *b = (struct pool_build *)job;

    b->rc = snapshot_finish(b->snap, &b->cfg, b->prev);
}

static void
build_done(struct builder_job *job)
{
    struct pool_build *b = (struct pool_build *)job;
    struct pool *p = b->p;

    if (b->prev != NULL) {
        INVARIANT(b->prev->pins > 0);
        b->prev->pins--;
    }
    INVARIANT(p->build == b);
    p->build = NULL;
    if (job->cancelled || p->removed) {
        snapshot_free(b->snap);
    } else if (b->rc < 0) {
        log_error("pool %s: cannot build the ring: %s; the previous one "
                  "stays",
                  p->name, chash_strerror(b->rc));
        snapshot_free(b->snap);
        /* The changes it held are not live; they are not lost either:
         * the next change builds from the whole membership again. Who
         * waits for them is told now rather than left waiting. */
        waiters_fire(p, NULL, true);
    } else {
        snapshot_publish(p, b->snap, NULL);
    }
    if (p->dirty && !p->removed && !job->cancelled) {
        p->dirty = false;
        build_start(p);
    }
    free(b);
    pool_unref(p);
}

static void
build_start(struct pool *p)
{
    struct pool_build *b = calloc(1, sizeof(*b));

    if (b == NULL || (b->snap = snapshot_prepare(p)) == NULL) {
        free(b);
        log_error("pool %s: out of memory building its snapshot", p->name);
        p->dirty = true; /* tried again at the next change */
        return;
    }
    b->job.work = build_work;
    b->job.done = build_done;
    b->p = p;
    pool_ref(p);
    b->cfg = p->cfg.ring;
    b->prev = atomic_load(&p->snap);
    if (b->prev != NULL)
        b->prev->pins++;
    p->build = b;
    builder_submit(&b->job);
}

void
pool_schedule(struct pool *p)
{
    p->gen++;
    if (p->removed)
        return;
    if (p->build != NULL || p->batching) {
        p->dirty = true;
        return;
    }
    build_start(p);
}

void
pool_batch(struct pool *p, bool on)
{
    p->batching = on;
    if (!on && p->dirty && p->build == NULL && !p->removed) {
        p->dirty = false;
        build_start(p);
    }
}

int
pool_on_published(struct pool *p,
                  void (*cb)(struct pool *p, const struct pool_change *chg,
                             void *arg),
                  void *arg)
{
    struct pool_snapshot *cur = atomic_load(&p->snap);
    struct pool_waiter *wt, **pp;

    if (p->removed) {
        cb(p, NULL, arg);
        return 0;
    }
    if (p->build == NULL && !p->dirty && cur != NULL && cur->gen == p->gen) {
        cb(p, &p->last, arg);
        return 0;
    }
    wt = calloc(1, sizeof(*wt));
    if (wt == NULL)
        return -1;
    wt->gen = p->gen;
    wt->cb = cb;
    wt->arg = arg;
    for (pp = &p->waiters; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = wt;
    return 0;
}

/* ---- life cycle ---------------------------------------------------------- */

static int
pool_register(struct pool *p)
{
    if (npools == cappools) {
        size_t cap = cappools ? cappools * 2 : 8;
        struct pool **v = realloc(pools, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        pools = v;
        cappools = cap;
    }
    pools[npools++] = p;
    return 0;
}

int
pool_create(const struct conf_pool *cp, bool boot, struct pool **out, char *err,
            size_t errlen)
{
    struct pool *p = calloc(1, sizeof(*p));

    if (p == NULL)
        goto nomem;
    /* The pool owns a deep copy of its settings (every twemproxy field
     * included): nothing it holds points into a config that a reload
     * frees. Its name is a string of its own, never replaced: workers
     * read it for log lines without synchronising. */
    p->name = strdup(cp->name);
    if (p->name == NULL || conf_pool_copy(&p->cfg, cp) < 0) {
        free(p->name);
        free(p);
        goto nomem;
    }
    atomic_init(&p->refs, 1);
    /* replicas: until the repairer compared every key's copies, reads
     * are majority reads (replica.h) */
    atomic_init(&p->rstats.verifying, cp->replicas > 1);
    if (cp->access_log != NULL) {
        char why[320];

        p->access_log = access_log_open(cp->access_log, cp->access_log_format,
                                        why, sizeof(why));
        if (p->access_log == NULL) {
            snprintf(err, errlen, "pool %s: access_log: %s", cp->name, why);
            pool_unref(p);
            return -1;
        }
    }
    p->stats = slots_alloc(sizeof(struct stats_pool));
    p->lfds = malloc(sizeof(int) * (nworkers ? nworkers : 1));
    if (p->stats == NULL || p->lfds == NULL)
        goto fail;
    /* keyed modes count their hottest keys (a reload cannot change the
     * mode); tcp has no key */
    if (cp->mode != CONF_MODE_TCP &&
        (p->hot = slots_alloc(sizeof(struct hot))) == NULL)
        goto fail;
    for (unsigned i = 0; i < nworkers; i++)
        p->lfds[i] = -1;
    for (size_t i = 0; i < cp->nservers; i++) {
        struct server *s = server_create(p, &cp->servers[i], !boot);
        if (s == NULL || pool_list_add(p, s) < 0) {
            server_unref(s);
            goto fail;
        }
    }
    if (cp->balance_factor > 0 && cp->on_failure == CONF_ON_FAILURE_ERROR)
        log_warn("pool %s: balance_factor is ignored with on_failure: error "
                 "(a spilled key would reach a member that does not own it)",
                 p->name);
    if (pool_rebuild(p, NULL) < 0 || pool_register(p) < 0)
        goto fail;
    if (!boot)
        p->next_ramp_ms = clock_ms();
    *out = p;
    return 0;
fail:
    pool_unref(p);
nomem:
    snprintf(err, errlen, "pool %s: cannot create: %s", cp->name,
             strerror(errno ? errno : ENOMEM));
    return -1;
}

void
pool_remove(struct pool *p)
{
    size_t i;

    for (i = 0; i < npools && pools[i] != p; i++)
        ;
    if (i == npools)
        return;
    memmove(&pools[i], &pools[i + 1], (npools - i - 1) * sizeof(*pools));
    npools--;
    p->removed = true;
    /* Whoever waits for a publication of this pool will not get one. */
    waiters_fire(p, NULL, true);
    while (p->nservers > 0)
        pool_list_remove(p, p->nservers - 1);
    /* Connections still in their connect phase may look again: give them
     * an empty ring rather than a dangling one. */
    pool_rebuild(p, NULL);
    log_info("pool %s: removed", p->name);
    pool_unref(p);
}

void
pool_global_deinit(void)
{
    while (npools > 0)
        pool_remove(pools[npools - 1]);
    free(pools);
    pools = NULL;
    cappools = 0;
    /* Workers are gone: every worker is quiescent. Twice: a snapshot
     * freed may unpin another (a migration's old placement). */
    pool_reclaim();
    pool_reclaim();
    free(seen);
    seen = NULL;
}

struct pool *
pool_find(const char *name)
{
    for (size_t i = 0; i < npools; i++)
        if (strcmp(pools[i]->name, name) == 0)
            return pools[i];
    return NULL;
}

size_t
pool_count(void)
{
    return npools;
}

struct pool *
pool_at(size_t i)
{
    return i < npools ? pools[i] : NULL;
}

/* Start (or restart) <s>'s slow-start ramp at <from> (fraction of its
 * weight it already has). */
static void
ramp_start(struct pool *p, struct server *s, double from)
{
    s->ramp_from = from;
    s->ramp = from;
    s->ramping = true;
    s->ramp_start_ms = clock_ms();
    p->next_ramp_ms = s->ramp_start_ms;
}

/*
 * Give <s> weight <w>. A raise, when the pool has a slow start, ramps from
 * the old weight: with ramp r of the new weight, the member owns the first
 * floor(r x points) of its points (or r x weight for the table and score
 * algorithms), so starting at old/new keeps what it had, and raising r
 * only moves keys onto it. A hair above old/new: floor() of 1/3 x 480 is
 * 159, and the member would lose a point for a moment. A member that owns
 * nothing yet (weight 0) starts from 0, as an added one.
 */
static void
server_set_weight(struct pool *p, struct server *s, uint32_t w)
{
    uint32_t old = s->weight;

    s->weight = w;
    /* A lower weight applies at once: keys only leave the member. */
    if (w <= old || p->cfg.slow_start_ms == 0 ||
        p->cfg.ring.algo == CHASH_ALGO_JUMP)
        return;
    {
        /* Continue from what the member owns now (it may be ramping). */
        double owned = (double)old * (s->ramping ? s->ramp : 1.0);
        double from = owned / (double)w + 1e-12;

        ramp_start(p, s, from < 1.0 ? from : 1.0);
    }
}

int
pool_reconfigure(struct pool *p, const struct conf_pool *cp, char *err,
                 size_t errlen)
{
    struct conf_pool copy;
    struct access_log *alog = NULL;
    size_t added = 0;

    /* The access log first: a file that cannot be opened leaves the pool
     * as it was. Opened again even when the path is the same: the file
     * may have been rotated (logrotate, then SIGHUP or SIGUSR1). */
    if (cp->access_log != NULL) {
        char why[320];

        alog = access_log_open(cp->access_log, cp->access_log_format, why,
                               sizeof(why));
        if (alog == NULL) {
            snprintf(err, errlen, "pool %s: access_log: %s", cp->name, why);
            return -1;
        }
    }
    /* Settings first: new members ramp according to the new slow_start.
     * p->name stays the very same string: workers read it (log lines)
     * without synchronising with us, and the reload matched this pool by
     * that name, so there is nothing to replace. */
    if (conf_pool_copy(&copy, cp) < 0) {
        access_log_unref(alog);
        snprintf(err, errlen, "pool %s: out of memory", cp->name);
        return -1;
    }
    conf_pool_deinit(&p->cfg);
    p->cfg = copy;
    /* Snapshots already built keep their reference to the old log (and
     * its file) until they are freed; those built from now on take this
     * one. */
    access_log_unref(p->access_log);
    p->access_log = alog;

    /* Members gone, or moved to another address (removed, then added). */
    for (size_t i = p->nservers; i-- > 0;) {
        struct server *s = p->servers[i];
        const struct conf_server *cs = NULL;
        for (size_t j = 0; j < cp->nservers; j++)
            if (strcmp(cp->servers[j].name, s->name) == 0)
                cs = &cp->servers[j];
        /* (a member moved to another zone is re-created too: its zone
         * is fixed for its life, snapshots read it without a lock) */
        if (cs == NULL || !addr_equal(&cs->addr, &s->addr) ||
            (cs->zone == NULL) != (s->zone == NULL) ||
            (cs->zone != NULL && strcmp(cs->zone, s->zone) != 0)) {
            log_info("pool %s: member %s (%s) removed by reload", p->name,
                     s->name, s->addr.text);
            pool_list_remove(p, i);
        }
    }
    for (size_t j = 0; j < cp->nservers; j++) {
        const struct conf_server *cs = &cp->servers[j];
        struct server *s = pool_server_find(p, cs->name);
        if (s != NULL) {
            if (s->weight != cs->weight)
                server_set_weight(p, s, cs->weight);
            continue;
        }
        s = server_create(p, cs, true);
        if (s == NULL || pool_list_add(p, s) < 0) {
            server_unref(s);
            snprintf(err, errlen, "pool %s: out of memory", p->name);
            return -1;
        }
        log_info("pool %s: member %s (%s) added by reload%s", p->name, s->name,
                 s->addr.text, s->ramping ? ", ramping" : "");
        added++;
    }
    /* Checks switched off: nothing would ever bring a down member back,
     * so the config's word is taken that it is up. */
    if (!cp->health.enabled)
        for (size_t j = 0; j < p->nservers; j++)
            if (p->servers[j]->health == HEALTH_DOWN)
                server_set_health(p->servers[j], HEALTH_UP,
                                  "health checks turned off by reload");
    if (added > 0)
        p->next_ramp_ms = clock_ms();
    p->placement++;
    pool_schedule(p);
    return 0;
}

/* ---- runtime changes ----------------------------------------------------- */

int
pool_member_add(struct pool *p, const struct conf_server *cs)
{
    struct server *s;

    if (cs == NULL || cs->name == NULL || cs->name[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < p->nservers; i++)
        if (strcmp(p->servers[i]->name, cs->name) == 0 ||
            addr_equal(&p->servers[i]->addr, &cs->addr)) {
            errno = EEXIST;
            return -1;
        }
    s = server_create(p, cs, true);
    if (s == NULL || pool_list_add(p, s) < 0) {
        server_unref(s);
        errno = ENOMEM;
        return -1;
    }
    p->next_ramp_ms = clock_ms();
    snprintf(s->reason, sizeof(s->reason), "%s",
             s->ramping ? "slow start from 0" : "at full weight");
    p->placement++;
    pool_schedule(p);
    return 0;
}

void
pool_member_ramp_age(struct pool *p, const char *name, uint64_t age_ms)
{
    struct server *s = pool_server_find(p, name);
    uint64_t now = clock_ms();

    if (s == NULL || !s->ramping || age_ms == 0)
        return;
    s->ramp_start_ms -= age_ms < s->ramp_start_ms ? age_ms : s->ramp_start_ms;
    p->next_ramp_ms = now;
}

int
pool_member_remove(struct pool *p, const char *name)
{
    long i = pool_server_index(p, name);

    if (i < 0) {
        errno = ENOENT;
        return -1;
    }
    pool_list_remove(p, (size_t)i);
    p->placement++;
    pool_schedule(p);
    return 0;
}

int
pool_member_set_weight(struct pool *p, const char *name, uint32_t weight)
{
    struct server *s = pool_server_find(p, name);

    if (s == NULL) {
        errno = ENOENT;
        return -1;
    }
    server_set_weight(p, s, weight);
    snprintf(s->reason, sizeof(s->reason), "%s",
             s->ramping ? "weight raised: ramping" : "by the operator");
    p->placement++;
    pool_schedule(p);
    return 0;
}

int
pool_member_set_admin(struct pool *p, const char *name, int admin)
{
    struct server *s = pool_server_find(p, name);
    int old;

    if (s == NULL) {
        errno = ENOENT;
        return -1;
    }
    if (admin < STATE_ADMIN_UP || admin > STATE_ADMIN_MAINT) {
        errno = EINVAL;
        return -1;
    }
    old = atomic_load(&s->state);
    s->admin = admin;
    server_update_state(s);
    if (admin == STATE_ADMIN_UP && old != SERVER_UP &&
        atomic_load(&s->state) == SERVER_UP && p->cfg.slow_start_ms > 0 &&
        p->cfg.ring.algo != CHASH_ALGO_JUMP)
        ramp_start(p, s, 0.0);
    snprintf(s->reason, sizeof(s->reason), "by the operator");
    if (admin == STATE_ADMIN_MAINT && pool_hooks.member_leaving != NULL)
        pool_hooks.member_leaving(s);
    p->placement++;
    pool_schedule(p);
    return 0;
}

int
server_set_health(struct server *s, int health, const char *reason)
{
    struct pool *p = s->pool;
    int now;

    if (p == NULL || s->health == health)
        return 0;
    s->health = health;
    if (health == HEALTH_EJECTED)
        s->ejections++;
    server_update_state(s);
    now = atomic_load(&s->state);
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    if (health != HEALTH_UP) {
        s->ramping = false;
    } else if (now == SERVER_UP && p->cfg.slow_start_ms > 0 &&
               p->cfg.ring.algo != CHASH_ALGO_JUMP) {
        /* Back up: ramp from 0 so its keys return gradually. */
        ramp_start(p, s, 0.0);
    } else {
        s->ramp = 1;
    }
    pool_schedule(p);
    return 1;
}

void
pool_tick(uint64_t now_ms,
          void (*done)(struct pool *p, struct server *s, void *arg), void *arg)
{
    for (size_t i = 0; i < npools; i++) {
        struct pool *p = pools[i];
        uint32_t window = p->cfg.slow_start_ms;
        bool any = false;

        if (now_ms < p->next_ramp_ms || p->next_ramp_ms == 0)
            continue;
        p->next_ramp_ms = 0;
        for (size_t j = 0; j < p->nservers; j++) {
            struct server *s = p->servers[j];
            double r;
            if (!s->ramping)
                continue;
            any = true;
            r = window > 0
                    ? s->ramp_from + (1.0 - s->ramp_from) *
                                         (double)(now_ms - s->ramp_start_ms) /
                                         window
                    : 1;
            if (r >= 1) {
                s->ramp = 1;
                s->ramping = false;
                snprintf(s->reason, sizeof(s->reason), "slow start over %ums",
                         window);
                pool_schedule(p);
                if (done != NULL)
                    done(p, s, arg);
                continue;
            }
            /* Never backwards: a member whose weight was raised while it
             * ramped continues from what it owned. */
            if (r > s->ramp)
                s->ramp = r;
            log_debug("pool %s: member %s ramp %.3f", p->name, s->name,
                      s->ramp);
        }
        if (!any)
            continue;
        /* Ramp steps are not state changes: no log line above debug. A
         * step that comes while the previous one is still being built is
         * folded into the next build. */
        pool_schedule(p);
        /* At least 20 steps per window: 25, not faster than 10ms. */
        for (size_t j = 0; j < p->nservers; j++)
            if (p->servers[j]->ramping) {
                p->next_ramp_ms =
                    now_ms + (window / 25 > 10 ? window / 25 : 10);
                break;
            }
    }
}

/* ---- the data path's choice ---------------------------------------------- */

static bool
tried_has(const uint64_t *tried, size_t ntried, uint64_t id)
{
    for (size_t i = 0; i < ntried; i++)
        if (tried[i] == id)
            return true;
    return false;
}

#define PREF_FAST 16

/* Member <i>'s bounded-load cap for a new connection, <total> live. */
static double
snapshot_cap(const struct pool_snapshot *snap, size_t i, double factor,
             uint64_t total)
{
    return ceil(factor * (double)(total + 1) *
                (double)chash_ring_member_points(snap->ring, i) /
                (double)snap->usable_points);
}

/* Take one live connection on <s> if that keeps it within <cap>. A
 * compare-and-swap: two workers cannot both take its last slot (a load
 * then an add could, and go over the cap). */
static bool
server_take_within(struct server *s, double cap)
{
    uint64_t load = atomic_load_explicit(&s->active, memory_order_relaxed);

    while ((double)(load + 1) <= cap)
        if (atomic_compare_exchange_weak_explicit(&s->active, &load, load + 1,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

struct server *
pool_walk(const struct pool_snapshot *snap, uint64_t hash, size_t from,
          pool_walk_fn *fn, void *ctx)
{
    size_t fast[PREF_FAST], *pref = fast, npref;
    struct server *pick = NULL;

    if (snap->ring == NULL)
        return NULL;
    npref = chash_ring_lookup_n(snap->ring, hash, pref,
                                snap->n < PREF_FAST ? snap->n : PREF_FAST);
    for (size_t i = from; i < npref && pick == NULL; i++)
        if (fn(ctx, snap->servers[pref[i]], pref[i], i))
            pick = snap->servers[pref[i]];
    /* Rare: the first PREF_FAST were all passed over; the rest of the
     * order, when there is more of it. */
    if (pick == NULL && npref == PREF_FAST && snap->n > PREF_FAST &&
        (pref = malloc(snap->n * sizeof(*pref))) != NULL) {
        npref = chash_ring_lookup_n(snap->ring, hash, pref, snap->n);
        for (size_t i = from > PREF_FAST ? from : PREF_FAST;
             i < npref && pick == NULL; i++)
            if (fn(ctx, snap->servers[pref[i]], pref[i], i))
                pick = snap->servers[pref[i]];
        free(pref);
    }
    return pick;
}

size_t
pool_replica_set(const struct pool_snapshot *snap, uint64_t hash, size_t *idx)
{
    if (snap->ring == NULL)
        return 0;
    return chash_ring_lookup_n(snap->ring, hash, idx,
                               snap->set.replicas ? snap->set.replicas : 1);
}

/* pool_choose's walk past the owner: what it saw on the way. */
struct choose {
    const struct pool_snapshot *snap;
    const uint64_t *tried;
    size_t ntried;
    double factor;  /* balance_factor; 0: unbounded */
    uint64_t total; /* live connections of the pool (bounded) */
    bool error;     /* on_failure: error */
    bool refused, skipped, spilled;
    struct server *fallback; /* the first usable one over its cap */
};

static bool
choose_step(void *ctx, struct server *s, size_t idx, size_t pos)
{
    struct choose *ch = ctx;

    if (!server_usable(s) || tried_has(ch->tried, ch->ntried, s->id)) {
        if (ch->error && pos == 0)
            return ch->refused = true; /* stop: no member */
        ch->skipped = true;
        return false;
    }
    if (ch->factor <= 0) {
        atomic_fetch_add_explicit(&s->active, 1, memory_order_relaxed);
        return true;
    }
    if (server_take_within(s, snapshot_cap(ch->snap, idx, ch->factor,
                                           ch->total)))
        return true;
    if (ch->fallback == NULL)
        ch->fallback = s;
    ch->spilled = true;
    return false;
}

struct server *
pool_choose(struct pool *p, const struct pool_snapshot *snap, uint64_t hash,
            const uint64_t *tried, size_t ntried, int *decision)
{
    struct choose ch = {
        .snap = snap,
        .tried = tried,
        .ntried = ntried,
        .factor = snap->usable_points > 0 ? snap->set.balance_factor : 0,
        .error = snap->set.on_failure == CONF_ON_FAILURE_ERROR,
    };
    struct server *pick;

    *decision = STATS_NO_MEMBER;
    if (snap->ring == NULL)
        return NULL;
    if (ch.factor > 0)
        ch.total =
            atomic_load_explicit(&p->active_backends, memory_order_relaxed);
    /* The common case: the owner is usable and within its cap. One
     * lookup, no preference list. */
    {
        size_t i = chash_ring_lookup(snap->ring, hash);
        struct server *s = snap->servers[i];
        if (server_usable(s) && !tried_has(tried, ntried, s->id)) {
            if (ch.factor <= 0) {
                atomic_fetch_add_explicit(&s->active, 1, memory_order_relaxed);
                *decision = STATS_FIRST_CHOICE;
                return s;
            }
            if (server_take_within(s, snapshot_cap(snap, i, ch.factor,
                                                   ch.total))) {
                *decision = STATS_FIRST_CHOICE;
                return s;
            }
        }
    }
    pick = pool_walk(snap, hash, 0, choose_step, &ch);
    if (ch.refused) {
        *decision = STATS_REFUSED_ERROR;
        return NULL;
    }
    if (pick == NULL && ch.fallback != NULL) {
        /* Everybody is over the cap: the first usable one anyway (a hot
         * key in a big pool would otherwise pile onto its owner). */
        pick = ch.fallback;
        atomic_fetch_add_explicit(&pick->active, 1, memory_order_relaxed);
    }
    if (pick != NULL)
        *decision = ch.skipped   ? STATS_FAILED_OVER
                    : ch.spilled ? STATS_SPILLED
                                 : STATS_FIRST_CHOICE;
    return pick;
}

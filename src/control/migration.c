/* migration.c -- live data migration of redis pools: the migration's
 * life on the control thread (prepare, drain, copy, verify, finish,
 * resume, skip) and the lists of running and finished migrations. The
 * copiers are in migration_copy.c, what is shown and saved in
 * migration_report.c, the look before a change in migration_plan.c, the
 * etcd-run side in migration_etcd.c (migration_int.h). See migration.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/migration.h"
#include "control/migration_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chash/chash.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/stats.h"
#include "conf/conf.h"
#include "loop/control.h"
#include "model/pool.h"

/* How often the control thread looks at running migrations and saves
 * their progress. */
#define TICK_MS 100
#define SAVE_MS 100

const char *const migration_phase_names[] = {
    "draining", "copying", "verifying", "finishing", "done", "warming"};

static struct migration_last *lasts;
static struct migration **running; /* the pools' */
static size_t nrunning, caprunning;
static uint64_t next_epoch;
static migration_barrier_fn *barrier;
static struct migration_host host;

void
migration_set_host(const struct migration_host *h)
{
    host = *h;
}

static void
host_save(const char *pool, json_t *m)
{
    if (host.save != NULL)
        host.save(pool, m);
}

static void
host_leave(struct pool *p, const char *name)
{
    if (host.leave != NULL)
        host.leave(p, name);
}

void
migration_set_barrier(migration_barrier_fn *fn)
{
    barrier = fn;
}

static void
running_del(struct migration *m)
{
    for (size_t i = 0; i < nrunning; i++) {
        if (running[i] == m) {
            running[i] = running[--nrunning];
            return;
        }
    }
}

static int
running_add(struct migration *m)
{
    if (nrunning == caprunning) {
        size_t cap = caprunning ? caprunning * 2 : 8;
        struct migration **r = realloc(running, cap * sizeof(*r));

        if (r == NULL)
            return -1;
        running = r;
        caprunning = cap;
    }
    running[nrunning++] = m;
    return 0;
}

struct migration_last *
migration_last_get(const char *pool)
{
    for (struct migration_last *l = lasts; l != NULL; l = l->next)
        if (strcmp(l->pool, pool) == 0)
            return l;
    return NULL;
}

/* The pool's record of finished migrations (made on first use). */
static struct migration_last *
last_make(const char *pool)
{
    struct migration_last *l = migration_last_get(pool);

    if (l == NULL && (l = calloc(1, sizeof(*l))) != NULL) {
        if ((l->pool = strdup(pool)) == NULL) {
            free(l);
            return NULL;
        }
        l->next = lasts;
        lasts = l;
    }
    return l;
}

bool
migration_active(const struct pool *p)
{
    return p->migration != NULL;
}

bool
migration_exclusive(const struct pool *p)
{
    return p->migration != NULL && !p->migration->warmup;
}

void
migration_busy(const struct pool *p, char *buf, size_t cap)
{
    struct migration *m = p->migration;
    struct migration_totals t;

    if (m == NULL) {
        snprintf(buf, cap, "no migration in pool %s", p->name);
        return;
    }
    migration_totals(m, &t);
    snprintf(buf, cap,
             "migration in progress in pool %s (%s, phase %s, %" PRIu64
             " of about %" PRIu64 " keys moved): one change at a time; "
             "`chash ctl migration %s` shows its progress",
             p->name, m->change, migration_phase_names[m->phase],
             t.moved + t.gate_moved, m->keys_predicted, p->name);
}

bool
migration_is_leaving(const struct pool *p, const char *name)
{
    const struct migration *m = p->migration;

    for (size_t i = 0; m != NULL && i < m->nleaving; i++)
        if (strcmp(m->leaving[i], name) == 0)
            return true;
    return false;
}

void
migration_save(struct migration *m)
{
    json_t *j;

    if (m->etcd)
        return; /* etcd holds it (the descriptor), not the state file */
    j = migration_saved_json(m);

    host_save(m->pool->name, j);
    json_decref(j);
    m->saved_ms = clock_ms();
}

static void
migration_free(struct migration *m)
{
    for (size_t i = 0; i < m->nsrc; i++) {
        atomic_store(&m->src[i].srv->mig_skip, false);
        server_unref(m->src[i].srv);
    }
    free(m->src);
    for (size_t i = 0; i < m->nleaving; i++)
        free(m->leaving[i]);
    free(m->leaving);
    free(m->auth);
    json_decref(m->big_keys);
    migration_drain_unref(m->drain);
    pthread_mutex_destroy(&m->lock);
    pool_unref(m->pool);
    free(m);
}

/* <m>'s settings from its pool's config, copied at start. */
static void
migration_settings(struct migration *m, const struct pool *p)
{
    m->auth = p->cfg.redis_auth != NULL ? strdup(p->cfg.redis_auth) : NULL;
    m->db = p->cfg.redis_db;
    m->timeout_ms = p->cfg.migration_timeout_ms;
    m->batch = p->cfg.migration_batch ? p->cfg.migration_batch : 100;
    m->rate = p->cfg.migration_rate;
    m->bandwidth = p->cfg.migration_bandwidth;
    m->big_key = p->cfg.migration_big_key;
    m->started_wall = time(NULL);
    m->started_ms = clock_ms();
    m->tok_ms = m->started_ms;
    /* one batch may go at once; then the rate (no second of burst) */
    m->tok_keys = m->rate < m->batch ? m->rate : m->batch;
    m->tok_bytes = (double)m->bandwidth;
    m->warm_until_ms = m->started_ms + p->cfg.migration_warmup_ms;
}

/* A migration of <p> from placement <old> (pinned by the view made here). */
static struct migration *
migration_new(struct pool *p, struct pool_snapshot *old, uint64_t epoch,
              const char *change, const char *const *leaving, size_t nleaving)
{
    struct migration *m = calloc(1, sizeof(*m));
    struct migration_view *v = calloc(1, sizeof(*v));
    bool warm = p->cfg.migration == CONF_MIGRATION_WARMUP;
    struct stats_pool_sum ps;

    if (m == NULL || v == NULL ||
        (!warm && old->n > 0 &&
         (m->src = calloc(old->n, sizeof(*m->src))) == NULL)) {
        free(m != NULL ? m->src : NULL);
        free(m);
        free(v);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->big_keys = json_array();
    m->pool = p;
    pool_ref(p);
    m->epoch = epoch;
    m->phase = MIG_DRAINING;
    snprintf(m->change, sizeof(m->change), "%s", change);
    m->leaving = calloc(nleaving ? nleaving : 1, sizeof(*m->leaving));
    for (size_t i = 0; m->leaving != NULL && i < nleaving; i++)
        if ((m->leaving[m->nleaving] = strdup(leaving[i])) != NULL)
            m->nleaving++;
    migration_settings(m, p);
    m->warmup = warm;
    for (size_t i = 0; !warm && i < old->n; i++) {
        struct msource *ms = &m->src[m->nsrc++];

        ms->m = m;
        ms->srv = old->servers[i];
        server_ref(ms->srv);
        ms->phase = MIG_COPYING;
        ms->pass = 1;
        ms->dbsize_start = -1;
        snprintf(ms->cursor, sizeof(ms->cursor), "0");
    }
    v->refs = 1; /* the pool's */
    v->epoch = epoch;
    /* a warm-up has one stage; a copy's stages are decided by the first
     * snapshot that moves keys (migration_view_decide) */
    atomic_store(&v->stage, warm ? 0 : MIG_STAGE_UNDECIDED);
    v->old = old;
    pool_snapshot_pin(old);
    m->view = v;
    stats_pool_sum(p->stats, pool_workers(), &ps);
    m->gate_base_moved = ps.gate_moved;
    m->gate_base_absent = ps.gate_absent;
    m->gate_base_failed = ps.gate_failed;
    return m;
}

static void warmup_end(struct migration *m);

int
migration_prepare(struct pool *p, const char *change,
                  const char *const *leaving, size_t nleaving,
                  uint64_t keys_predicted, uint64_t keys_total, char *err,
                  size_t errlen)
{
    struct pool_snapshot *old = atomic_load(&p->snap);
    struct migration *m;
    bool ended = false;

    if (p->migration != NULL && p->migration->warmup) {
        /* a cache's warm-up gives way to the next change: the keys it
         * did not warm stay cold. (The snapshot it schedules has the
         * placement of the current one: this change may go on.) */
        log_info("pool %s: warm-up %" PRIu64 " (%s) ends early: a new "
                 "change",
                 p->name, p->migration->epoch, p->migration->change);
        warmup_end(p->migration);
        ended = true;
    }
    if (p->migration != NULL) {
        migration_busy(p, err, errlen);
        return -1;
    }
    if (!ended && (p->build != NULL || p->dirty)) {
        snprintf(err, errlen, "pool %s: a change is being published; try again",
                 p->name);
        return -1;
    }
    m = migration_new(p, old, ++next_epoch, change, leaving, nleaving);
    if (m == NULL || running_add(m) != 0) {
        if (m != NULL) {
            migration_view_unref(m->view);
            migration_free(m);
        }
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->keys_predicted = keys_predicted;
    m->keys_total = keys_total;
    p->migration = m;
    p->mig_view = m->view;
    if (!m->warmup)
        migration_save(m); /* written with the membership change that follows */
    return 0;
}

void
migration_cancel(struct pool *p)
{
    struct migration *m = p->migration;

    if (m == NULL)
        return;
    p->migration = NULL;
    p->mig_view = NULL;
    running_del(m);
    migration_view_unref(m->view);
    if (!m->warmup && !m->etcd)
        host_save(p->name, NULL);
    migration_free(m);
}

/* Old members that give no key (the flows between the rings say so) have
 * nothing to copy: done at once, their keyspaces not scanned. */
static void
idle_sources(struct migration *m)
{
    const struct pool_snapshot *was = m->view->old, *now = m->new_snap;
    struct chash_flow *fl = NULL;
    size_t n = 0;

    /* (only where the flows are exact: sampled ones could miss a small
     * giver, whose keys would stay behind) */
    if (was->ring == NULL || now->ring == NULL ||
        !chash_ring_diff_exact(was->ring) ||
        chash_ring_flows(was->ring, now->ring, NULL, 0, &n) != 0 ||
        (n > 0 && ((fl = calloc(n, sizeof(*fl))) == NULL ||
                   chash_ring_flows(was->ring, now->ring, fl, n, &n) != 0))) {
        free(fl);
        return; /* cannot tell: every member is scanned */
    }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        bool gives = false;

        for (size_t k = 0; k < n && !gives; k++)
            gives = was->servers[fl[k].from] == m->src[i].srv;
        if (!gives && m->src[i].phase != MIG_DONE) {
            m->src[i].phase = MIG_DONE;
            m->src[i].dbsize_start = 0;
        }
    }
    pthread_mutex_unlock(&m->lock);
    free(fl);
}

/* Hand a new drain barrier to every worker. */
static void
drain_start(struct migration *m)
{
    struct migration_drain *d = calloc(1, sizeof(*d));

    if (d == NULL) {
        log_error("pool %s: migration: out of memory for the drain barrier",
                  m->pool->name);
        atomic_store(&m->pool->mig_drained,
                     migration_gen(m->epoch, atomic_load(&m->view->stage)));
        m->phase = MIG_COPYING;
        migration_copiers_start(m);
        return;
    }
    atomic_store(&d->refs, 1);
    d->pool = m->pool;
    m->drain = d;
    m->phase = MIG_DRAINING;
    d->workers = barrier != NULL ? barrier(d) : 0;
}

/* The first stage of a two-stage migration is done: the keys moving the
 * other way may go now, once what was sent to their old owners during
 * the first stage has been answered. */
void
migration_stage_two(struct migration *m)
{
    for (size_t i = 0; i < m->nsrc; i++)
        if (m->src[i].started) {
            pthread_join(m->src[i].thread, NULL);
            m->src[i].started = false;
        }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        struct msource *ms = &m->src[i];

        if (ms->skipped)
            continue;
        ms->phase = MIG_COPYING;
        ms->pass = 1;
        ms->retry_failed = ms->pass_failed = 0;
        snprintf(ms->cursor, sizeof(ms->cursor), "0");
    }
    pthread_mutex_unlock(&m->lock);
    idle_sources(m);
    atomic_store(&m->view->stage, 2);
    log_info("pool %s: migration %" PRIu64 ": first stage done; the keys "
             "moving the other way go now",
             m->pool->name, m->epoch);
    migration_save(m);
    drain_start(m);
}

/* A warm-up starts at once: no barrier (nothing is moved that a late
 * write could undo). */
static void
warmup_start(struct pool *p, struct migration *m)
{
    atomic_store(&p->mig_drained, migration_gen(m->epoch, 1));
    m->phase = MIG_WARMING;
    log_info("pool %s: warm-up %" PRIu64 " (%s) for %.0f s: keys whose "
             "member changed are read from their old member on a miss",
             p->name, m->epoch, m->change,
             (double)p->cfg.migration_warmup_ms / 1000.0);
}

void
migration_start(struct pool *p)
{
    struct migration *m = p->migration;
    struct migration_drain *d;
    int undecided = MIG_STAGE_UNDECIDED;

    if (m == NULL || m->new_snap != NULL)
        return;
    m->new_snap = atomic_load(&p->snap);
    pool_snapshot_pin(m->new_snap);
    if (m->warmup) {
        warmup_start(p, m);
        return;
    }
    if (m->keys_predicted == 0 && m->view->old->ring != NULL &&
        m->new_snap->ring != NULL &&
        chash_ring_diff(m->view->old->ring, m->new_snap->ring,
                        &m->moved_fraction) == 0) {
        /* a reload's (or a resumed one's): no report gave the fraction;
         * the key count comes from the sources once they answered */
        m->late_count = true;
        m->keys_predicted =
            (uint64_t)(m->moved_fraction * (double)m->keys_total + 0.5);
    }
    /* (decided when the snapshot was built; a migration that moves no
     * key is left undecided there: one stage) */
    migration_view_decide(m->view, m->new_snap);
    atomic_compare_exchange_strong(&m->view->stage, &undecided, 0);
    idle_sources(m);
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        /* no barrier to wait for: as good as none; log it */
        log_error("pool %s: migration: out of memory for the drain barrier",
                  p->name);
        atomic_store(&p->mig_drained, migration_gen(m->epoch, 1));
        m->phase = MIG_COPYING;
        return;
    }
    atomic_store(&d->refs, 1);
    d->pool = p;
    m->drain = d;
    d->workers = barrier != NULL ? barrier(d) : 0;
    log_info("pool %s: migration %" PRIu64 " (%s): about %" PRIu64
             " keys to move; waiting for the requests sent under the old "
             "ring",
             p->name, m->epoch, m->change, m->keys_predicted);
}

/* Its pool has published the snapshot without <m>'s view (or chashd is
 * stopping): <m> is done; its record goes to the pool's last. */
static void
finished(struct pool *p, const struct pool_change *chg, void *arg)
{
    struct migration *m = arg;
    struct migration_last *l;
    struct migration_totals t;

    (void)chg;
    if (m->detached) { /* chashd is stopping */
        if (m->new_snap != NULL)
            pool_snapshot_unpin(m->new_snap);
        migration_free(m);
        return;
    }
    l = last_make(m->pool->name);
    m->phase = MIG_DONE;
    m->finished_ms = clock_ms();
    migration_totals(m, &t);
    if (l != NULL) {
        l->ending = NULL;
        json_decref(l->j);
        l->j = migration_to_json(m);
        l->count++;
        l->moved += t.moved;
        l->by_request += t.gate_moved;
        l->scanned += t.scanned;
        l->bytes += t.bytes;
        l->anomalies += t.anomalies;
        l->failed += t.failed + t.gate_failed;
    }
    log_info("pool %s: migration %" PRIu64 " (%s) done in %.1f s: %" PRIu64
             " keys moved by the copier, %" PRIu64 " by requests, %" PRIu64
             " anomalies",
             p->name, m->epoch, m->change,
             (double)(m->finished_ms - m->started_ms) / 1000.0, t.moved,
             t.gate_moved, t.anomalies);
    if (m->new_snap != NULL)
        pool_snapshot_unpin(m->new_snap);
    m->new_snap = NULL;
    running_del(m);
    if (!m->warmup && !m->etcd)
        host_save(p->name, NULL);
    migration_free(m);
}

/* Every source is done: the member leaving goes, the pool's snapshots
 * stop carrying the old placement. */
void
migration_finish(struct migration *m)
{
    struct pool *p = m->pool;
    struct migration_last *l = last_make(p->name);

    migration_copiers_stop(m);
    m->phase = MIG_FINISHING;
    if (l != NULL)
        l->ending = m; /* the API shows it until it is done */
    if (p->migration == m) {
        p->migration = NULL;
        p->mig_view = NULL;
        migration_view_unref(m->view);
        m->view = NULL;
    }
    /* (in etcd, the transaction that ended it removed them) */
    for (size_t i = 0; !m->etcd && i < m->nleaving; i++)
        host_leave(p, m->leaving[i]);
    pool_schedule(p);
    if (pool_on_published(p, finished, m) != 0)
        finished(p, NULL, m);
}

/* A warm-up's window ended (or a new change came): its snapshots stop
 * carrying the old placement. */
static void
warmup_end(struct migration *m)
{
    migration_finish(m);
}

/* ---- the tick ------------------------------------------------------------ */

/* A reload dropped <m>'s pool: its migration goes with it. */
static void
tick_removed(struct migration *m)
{
    struct migration_last *l = migration_last_get(m->pool->name);

    log_warn("pool %s: removed while migration %" PRIu64
             " ran: stopped; keys may still be on their old owners",
             m->pool->name, m->epoch);
    if (l != NULL && l->ending == m)
        l->ending = NULL;
    migration_copiers_stop(m);
    m->pool->migration = NULL;
    m->pool->mig_view = NULL;
    migration_view_unref(m->view);
    if (m->new_snap != NULL)
        pool_snapshot_unpin(m->new_snap);
    running_del(m);
    migration_free(m);
}

/* Every worker has answered <m>'s drain barrier: its gates open and its
 * copiers start. */
static void
tick_drained(struct migration *m)
{
    atomic_store(&m->pool->mig_drained,
                 migration_gen(m->epoch, atomic_load(&m->view->stage)));
    migration_drain_unref(m->drain);
    m->drain = NULL;
    m->phase = MIG_COPYING;
    log_info("pool %s: migration %" PRIu64 ": drained; copying", m->pool->name,
             m->epoch);
    migration_copiers_start(m);
}

/* Where <m>'s sources are: its phase follows them (verifying once none
 * copies); a reload's key count, once every source told its own. Whether
 * every source is done. */
static bool
tick_sources(struct migration *m)
{
    bool all = true, verifying = true;

    pthread_mutex_lock(&m->lock);
    for (size_t k = 0; k < m->nsrc; k++) {
        all = all && m->src[k].phase == MIG_DONE;
        verifying = verifying && m->src[k].phase != MIG_COPYING;
    }
    if (m->late_count) {
        uint64_t total = 0;
        bool known = true;

        for (size_t k = 0; k < m->nsrc; k++) {
            known = known && m->src[k].dbsize_start >= 0;
            total += m->src[k].dbsize_start > 0
                         ? (uint64_t)m->src[k].dbsize_start
                         : 0;
        }
        if (known) {
            m->late_count = false;
            m->keys_total = total;
            m->keys_predicted =
                (uint64_t)(m->moved_fraction * (double)total + 0.5);
        }
    }
    pthread_mutex_unlock(&m->lock);
    m->phase = verifying ? MIG_VERIFYING : MIG_COPYING;
    return all;
}

/* Save <m> when it moved on since its last save. */
static void
tick_save(struct migration *m)
{
    struct migration_totals t;
    uint64_t sig;

    migration_totals(m, &t);
    sig = t.scanned + t.moved + t.absent + t.failed + t.gate_moved;
    if (sig != m->saved_sig) {
        m->saved_sig = sig;
        migration_save(m);
    }
}

/* One look at <m>: it may leave the running list. */
static void
tick_one(struct migration *m, uint64_t now_ms)
{
    bool all;

    if (m->pool->removed && m->phase != MIG_FINISHING) {
        tick_removed(m);
        return;
    }
    if (m->phase == MIG_DRAINING && m->drain != NULL &&
        atomic_load(&m->drain->done) >= m->drain->workers) {
        if (m->etcd)
            migration_etcd_note_drained(m);
        else
            tick_drained(m);
    }
    if (m->phase == MIG_WARMING && now_ms >= m->warm_until_ms) {
        warmup_end(m);
        return;
    }
    if (m->phase != MIG_COPYING && m->phase != MIG_VERIFYING)
        return;
    if (m->etcd && !m->holder)
        return; /* another instance copies */
    all = tick_sources(m);
    if (all && m->etcd)
        migration_etcd_note_copied(m, now_ms);
    else if (all && atomic_load(&m->view->stage) == 1)
        migration_stage_two(m);
    else if (all) {
        migration_save(m);
        migration_finish(m);
    } else if (now_ms - m->saved_ms >= SAVE_MS)
        tick_save(m);
}

static void
migration_tick(uint64_t now_ms, void *arg)
{
    static uint64_t next;

    (void)arg;
    if (now_ms < next)
        return;
    next = now_ms + TICK_MS;
    /* a migration that ends leaves the list (the last one takes its
     * place, looked at next) */
    for (size_t i = 0; i < nrunning;) {
        struct migration *m = running[i];

        tick_one(m, now_ms);
        if (i < nrunning && running[i] == m)
            i++;
    }
}

int
migration_init(void)
{
    return control_tick_add(migration_tick, NULL);
}

void
migration_deinit(void)
{
    while (nrunning > 0) {
        struct migration *m = running[nrunning - 1];
        struct pool *p = m->pool;

        if (m->phase == MIG_FINISHING) {
            /* its publication's callback frees it (pools go last) */
            m->detached = true;
            nrunning--;
            continue;
        }
        migration_copiers_stop(m);
        if (m->view != NULL && !p->removed)
            migration_save(m);
        if (p->migration == m) {
            p->migration = NULL;
            p->mig_view = NULL;
            migration_view_unref(m->view);
        }
        if (m->new_snap != NULL)
            pool_snapshot_unpin(m->new_snap);
        nrunning--;
        migration_free(m);
    }
    free(running);
    running = NULL;
    caprunning = 0;
    while (lasts != NULL) {
        struct migration_last *l = lasts;
        lasts = l->next;
        json_decref(l->j);
        free(l->pool);
        free(l);
    }
}

/* ---- resuming ------------------------------------------------------------ */

static void
resumed(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)arg;
    if (chg != NULL)
        migration_start(p);
}

struct migration *
migration_load(struct pool *p, const json_t *saved, uint64_t epoch,
               const char *where, char *err, size_t errlen)
{
    json_t *jl = json_object_get(saved, "leaving");
    struct pool_snapshot *snap;
    struct migration *m;
    const char *leaving[64];
    size_t nleaving = 0;

    snap = migration_saved_placement(p, saved, epoch, where, err, errlen);
    if (snap == NULL)
        return NULL;
    for (size_t i = 0; i < json_array_size(jl) && nleaving < 64; i++)
        if (json_is_string(json_array_get(jl, i)))
            leaving[nleaving++] = json_string_value(json_array_get(jl, i));
    m = migration_new(p, snap, epoch,
                      json_string_value(json_object_get(saved, "change"))
                          ?: "resumed",
                      leaving, nleaving);
    if (m == NULL || running_add(m) != 0) {
        if (m != NULL) {
            migration_view_unref(m->view);
            migration_free(m);
        } else {
            pool_snapshot_pin(snap);
            pool_snapshot_unpin(snap); /* frees it */
        }
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (epoch > next_epoch)
        next_epoch = epoch;
    migration_saved_restore(m, saved);
    return m;
}

void
migration_adopt(struct pool *p, struct migration *m)
{
    p->migration = m;
    p->mig_view = m->view;
    pool_schedule(p);
    if (pool_on_published(p, resumed, NULL) != 0)
        migration_start(p);
}

int
migration_resume(struct pool *p, json_t *saved, char *err, size_t errlen)
{
    uint64_t epoch =
        (uint64_t)json_integer_value(json_object_get(saved, "epoch"));
    struct migration *m =
        migration_load(p, saved, epoch, "the state file's", err, errlen);

    if (m == NULL)
        return -1;
    log_info("pool %s: resuming migration %" PRIu64 " (%s) from the state "
             "file",
             p->name, epoch, m->change);
    migration_adopt(p, m);
    return 0;
}

/* ---- giving up a source -------------------------------------------------- */

int
migration_skip(struct pool *p, const char *member, char *err, size_t errlen)
{
    struct migration *m = p->migration;
    struct msource *ms = NULL;

    if (m == NULL) {
        snprintf(err, errlen, "pool %s has no migration running", p->name);
        return -1;
    }
    if (m->warmup) {
        snprintf(err, errlen,
                 "pool %s is warming up (migration: warmup): nothing is "
                 "copied from its old members, nothing to give up",
                 p->name);
        return -1;
    }
    if (m->etcd) {
        snprintf(err, errlen,
                 "pool %s takes its members from etcd: giving up a source "
                 "is not supported there yet (every instance would have "
                 "to agree); bring the member back, or remove it with "
                 "\"now\"",
                 p->name);
        return -1;
    }
    for (size_t i = 0; i < m->nsrc; i++)
        if (strcmp(m->src[i].srv->name, member) == 0)
            ms = &m->src[i];
    if (ms == NULL) {
        snprintf(err, errlen,
                 "member \"%s\" is not a source of pool %s's migration", member,
                 p->name);
        return -1;
    }
    pthread_mutex_lock(&m->lock);
    if (ms->phase == MIG_DONE && !ms->skipped) {
        pthread_mutex_unlock(&m->lock);
        snprintf(err, errlen,
                 "member %s has given away its keys already: nothing to "
                 "skip",
                 member);
        return -1;
    }
    ms->skipped = true;
    ms->phase = MIG_DONE;
    pthread_mutex_unlock(&m->lock);
    /* its moving keys are served by their new owners from now on: what
     * was not moved is lost (the member is dead, or the operator says so) */
    atomic_store(&ms->srv->mig_skip, true);
    log_warn("pool %s: migration %" PRIu64 ": moving keys from %s given up "
             "by the operator; those not moved yet are lost",
             p->name, m->epoch, member);
    migration_save(m);
    return 0;
}

/* migration_report.c -- what is seen and kept of a migration
 * (migration_int.h): its JSON for GET /api/pools/{pool}/migration, the
 * chashd_migration_* metric families, and what the state file (or an
 * etcd descriptor) keeps of it, written and read back.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/migration_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chash/chash.h"
#include "base/clock.h"
#include "base/stats.h"
#include "conf/conf.h"
#include "model/pool.h"

void
migration_totals(struct migration *m, struct migration_totals *t)
{
    struct stats_pool_sum ps;

    memset(t, 0, sizeof(*t));
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        t->scanned += m->src[i].scanned;
        t->moved += m->src[i].moved;
        t->bytes += m->src[i].bytes;
        t->absent += m->src[i].absent;
        t->failed += m->src[i].failed;
        t->anomalies += m->src[i].anomalies;
        t->errors += m->src[i].errors;
    }
    pthread_mutex_unlock(&m->lock);
    stats_pool_sum(m->pool->stats, pool_workers(), &ps);
    t->gate_moved = ps.gate_moved - m->gate_base_moved + m->gate_moved_before;
    t->gate_absent = ps.gate_absent - m->gate_base_absent;
    t->gate_failed = ps.gate_failed - m->gate_base_failed;
}

/* ---- the API ------------------------------------------------------------- */

static void
iso_time(time_t t, char *buf, size_t cap)
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *
leaving_json(const struct migration *m)
{
    json_t *a = json_array();

    for (size_t i = 0; i < m->nleaving; i++)
        json_array_append_new(a, json_string(m->leaving[i]));
    return a;
}

/* How far <ms>'s copier is, in [0, 1] (under the migration's lock): its
 * keys scanned over its key count at the start; 0.99 until it is done. */
static double
source_progress(const struct msource *ms)
{
    double progress = ms->phase == MIG_DONE ? 1.0
                      : ms->pass >= 2       ? 0.99
                      : ms->dbsize_start > 0
                          ? (double)ms->scanned / (double)ms->dbsize_start
                          : 0.0;

    if (progress > 0.99 && ms->phase != MIG_DONE)
        progress = 0.99;
    return progress;
}

/* Source <ms> of <m> as the API shows it (under <m>'s lock). */
static json_t *
source_json(const struct migration *m, const struct msource *ms)
{
    json_t *s = json_object();

    json_object_set_new(s, "member", json_string(ms->srv->name));
    json_object_set_new(s, "address", json_string(ms->srv->addr.text));
    json_object_set_new(s, "phase",
                        json_string(m->phase == MIG_DRAINING
                                        ? "draining"
                                        : migration_phase_names[ms->phase]));
    json_object_set_new(s, "pass", json_integer(ms->pass));
    json_object_set_new(s, "cursor", json_string(ms->cursor));
    json_object_set_new(s, "keys_scanned",
                        json_integer((json_int_t)ms->scanned));
    json_object_set_new(s, "keys_moved", json_integer((json_int_t)ms->moved));
    json_object_set_new(s, "bytes_moved", json_integer((json_int_t)ms->bytes));
    json_object_set_new(s, "failed_keys", json_integer((json_int_t)ms->failed));
    json_object_set_new(s, "anomalies",
                        json_integer((json_int_t)ms->anomalies));
    json_object_set_new(s, "dbsize_at_start",
                        ms->dbsize_start >= 0 ? json_integer(ms->dbsize_start)
                                              : json_null());
    json_object_set_new(s, "progress", json_real(source_progress(ms)));
    json_object_set_new(s, "done", json_boolean(ms->phase == MIG_DONE));
    json_object_set_new(s, "skipped", json_boolean(ms->skipped));
    json_object_set_new(s, "last_error",
                        ms->last_error[0] ? json_string(ms->last_error)
                                          : json_null());
    return s;
}

/* The warm-up's window into <j>, at <now> (ms). */
static void
warmup_json(json_t *j, const struct migration *m, uint64_t now)
{
    json_object_set_new(j, "warmup_s",
                        json_real(m->pool->cfg.migration_warmup_ms / 1000.0));
    json_object_set_new(
        j, "warmup_left_s",
        json_real(m->phase == MIG_WARMING && m->warm_until_ms > now
                      ? (double)(m->warm_until_ms - now) / 1000.0
                      : 0.0));
}

/* The counts of <m> (its totals <t>) into <j>, with the rate over
 * <elapsed> seconds and the time left at that rate. */
static void
counts_json(json_t *j, const struct migration *m,
            const struct migration_totals *t, double elapsed)
{
    uint64_t done_keys = t->moved + t->gate_moved;
    double rate = elapsed > 0 ? (double)t->moved / elapsed : 0;

    json_object_set_new(j, "elapsed_s", json_real(elapsed));
    json_object_set_new(j, "keys_predicted",
                        json_integer((json_int_t)m->keys_predicted));
    json_object_set_new(j, "keys_total",
                        json_integer((json_int_t)m->keys_total));
    json_object_set_new(j, "keys_scanned",
                        json_integer((json_int_t)t->scanned));
    json_object_set_new(j, "keys_moved", json_integer((json_int_t)t->moved));
    json_object_set_new(j, "keys_moved_by_traffic",
                        json_integer((json_int_t)t->gate_moved));
    json_object_set_new(j, "keys_absent",
                        json_integer((json_int_t)(t->absent + t->gate_absent)));
    json_object_set_new(j, "bytes_moved", json_integer((json_int_t)t->bytes));
    json_object_set_new(j, "rate_keys_s", json_real(rate));
    if (m->phase == MIG_DONE || rate <= 0 || done_keys >= m->keys_predicted)
        json_object_set_new(j, "eta_s",
                            m->phase == MIG_DONE ? json_real(0) : json_null());
    else
        json_object_set_new(
            j, "eta_s",
            json_real((double)(m->keys_predicted - done_keys) / rate));
    json_object_set_new(j, "anomalies", json_integer((json_int_t)t->anomalies));
    json_object_set_new(j, "failed_keys",
                        json_integer((json_int_t)(t->failed + t->gate_failed)));
    json_object_set_new(j, "errors", json_integer((json_int_t)t->errors));
}

json_t *
migration_to_json(struct migration *m)
{
    struct migration_totals t;
    json_t *j = json_object(), *srcs = json_array();
    char when[32];
    uint64_t now = clock_ms();
    uint64_t end = m->finished_ms ? m->finished_ms : now;

    migration_totals(m, &t);
    iso_time(m->started_wall, when, sizeof(when));
    json_object_set_new(j, "pool", json_string(m->pool->name));
    json_object_set_new(j, "migration",
                        json_string(m->warmup ? "warmup" : "copy"));
    if (m->warmup)
        warmup_json(j, m, now);
    json_object_set_new(j, "active", json_boolean(m->phase != MIG_DONE));
    json_object_set_new(j, "epoch", json_integer((json_int_t)m->epoch));
    json_object_set_new(j, "phase",
                        json_string(migration_phase_names[m->phase]));
    if (m->view != NULL && atomic_load(&m->view->stage) > 0)
        json_object_set_new(j, "stage",
                            json_integer(atomic_load(&m->view->stage)));
    json_object_set_new(j, "change", json_string(m->change));
    json_object_set_new(j, "leaving", leaving_json(m));
    json_object_set_new(j, "started", json_string(when));
    if (m->etcd) {
        /* run by every instance: who copies, whether this one waits */
        json_object_set_new(j, "etcd", json_true());
        json_object_set_new(j, "copier",
                            m->holder_of[0] ? json_string(m->holder_of)
                                            : json_null());
        json_object_set_new(j, "copying_here", json_boolean(m->holder));
        json_object_set_new(j, "waiting_for_instances",
                            json_boolean(m->barrier_wait));
    }
    counts_json(j, m, &t, (double)(end - m->started_ms) / 1000.0);
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++)
        json_array_append_new(srcs, source_json(m, &m->src[i]));
    json_object_set_new(j, "big_keys", json_deep_copy(m->big_keys));
    pthread_mutex_unlock(&m->lock);
    json_object_set_new(j, "sources", srcs);
    return j;
}

json_t *
migration_json(const struct pool *p)
{
    struct migration_last *l = migration_last_get(p->name);
    json_t *j;

    if (p->migration != NULL) {
        j = migration_to_json(p->migration);
    } else if (l != NULL && l->ending != NULL) {
        j = migration_to_json(l->ending); /* finishing */
    } else {
        j = json_object();
        json_object_set_new(j, "pool", json_string(p->name));
        json_object_set_new(j, "migration",
                            json_string(conf_migration_name(p->cfg.migration)));
        json_object_set_new(j, "active", json_false());
        if (l != NULL)
            json_object_set_new(j, "phase", json_string("done"));
    }
    json_object_set(j, "last", l != NULL ? l->j : json_null());
    return j;
}

/* ---- the state file ------------------------------------------------------ */

json_t *
migration_placement_json(const struct pool_snapshot *snap)
{
    json_t *o = json_array();

    for (size_t i = 0; snap != NULL && i < snap->n; i++)
        json_array_append_new(
            o, json_pack("{s:s,s:I}", "name", snap->members[i].name, "weight",
                         (json_int_t)snap->members[i].weight));
    return o;
}

json_t *
migration_saved_json(struct migration *m)
{
    json_t *j = json_object(), *srcs = json_object();
    struct migration_totals t;
    char when[32];

    migration_totals(m, &t);
    iso_time(m->started_wall, when, sizeof(when));
    json_object_set_new(j, "epoch", json_integer((json_int_t)m->epoch));
    json_object_set_new(j, "change", json_string(m->change));
    json_object_set_new(j, "leaving", leaving_json(m));
    json_object_set_new(j, "started", json_string(when));
    json_object_set_new(j, "started_unix",
                        json_integer((json_int_t)m->started_wall));
    json_object_set_new(j, "keys_predicted",
                        json_integer((json_int_t)m->keys_predicted));
    json_object_set_new(j, "keys_total",
                        json_integer((json_int_t)m->keys_total));
    json_object_set_new(j, "moved_by_traffic",
                        json_integer((json_int_t)t.gate_moved));
    json_object_set_new(j, "stage",
                        json_integer(atomic_load(&m->view->stage) > 0
                                         ? atomic_load(&m->view->stage)
                                         : 0));
    json_object_set_new(j, "old", migration_placement_json(m->view->old));
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        const struct msource *ms = &m->src[i];

        json_object_set_new(
            srcs, ms->srv->name,
            json_pack(
                "{s:i,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "pass",
                (int)ms->pass, "cursor", ms->cursor, "scanned",
                (json_int_t)ms->scanned, "moved", (json_int_t)ms->moved,
                "bytes", (json_int_t)ms->bytes, "failed",
                (json_int_t)ms->failed, "anomalies", (json_int_t)ms->anomalies,
                "dbsize_start", (json_int_t)ms->dbsize_start, "done",
                (json_int_t)(ms->phase == MIG_DONE), "skipped", ms->skipped));
    }
    pthread_mutex_unlock(&m->lock);
    json_object_set_new(j, "sources", srcs);
    return j;
}

struct pool_snapshot *
migration_saved_placement(struct pool *p, const json_t *saved, uint64_t epoch,
                          const char *where, char *err, size_t errlen)
{
    json_t *old = json_object_get(saved, "old");
    struct chash_member *mem;
    struct pool_snapshot *snap;
    size_t n = json_array_size(old);

    if (!json_is_array(old) || n == 0 || epoch == 0) {
        snprintf(err, errlen,
                 "%s migration of pool %s is malformed (no \"old\" members "
                 "or epoch)",
                 where, p->name);
        return NULL;
    }
    mem = calloc(n, sizeof(*mem));
    if (mem == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(old, i);

        mem[i].name = json_string_value(json_object_get(e, "name"));
        mem[i].weight =
            (uint32_t)json_integer_value(json_object_get(e, "weight"));
        mem[i].ramp = 1.0;
        if (mem[i].name == NULL || mem[i].weight == 0) {
            free(mem);
            snprintf(err, errlen,
                     "%s migration of pool %s names a member without a "
                     "name or weight",
                     where, p->name);
            return NULL;
        }
    }
    snap = pool_snapshot_of(p, mem, n, err, errlen);
    free(mem);
    return snap;
}

/* Source <ms>'s progress as <s> (its entry in "sources") keeps it. */
static void
source_restore(struct msource *ms, const json_t *s)
{
    const char *cur = json_string_value(json_object_get(s, "cursor"));
    json_t *v;

    ms->pass = (unsigned)json_integer_value(json_object_get(s, "pass"));
    if (ms->pass == 0)
        ms->pass = 1;
    if (cur != NULL && strlen(cur) < sizeof(ms->cursor))
        snprintf(ms->cursor, sizeof(ms->cursor), "%s", cur);
    ms->scanned = (uint64_t)json_integer_value(json_object_get(s, "scanned"));
    ms->moved = (uint64_t)json_integer_value(json_object_get(s, "moved"));
    ms->bytes = (uint64_t)json_integer_value(json_object_get(s, "bytes"));
    ms->failed = (uint64_t)json_integer_value(json_object_get(s, "failed"));
    ms->anomalies =
        (uint64_t)json_integer_value(json_object_get(s, "anomalies"));
    v = json_object_get(s, "dbsize_start");
    ms->dbsize_start = json_is_integer(v) ? json_integer_value(v) : -1;
    ms->phase = json_integer_value(json_object_get(s, "done")) ? MIG_DONE
                : ms->pass >= 2                                ? MIG_VERIFYING
                                                               : MIG_COPYING;
    if (json_is_true(json_object_get(s, "skipped"))) {
        ms->skipped = true;
        ms->phase = MIG_DONE;
        atomic_store(&ms->srv->mig_skip, true);
    }
}

void
migration_saved_restore(struct migration *m, const json_t *saved)
{
    json_t *srcs = json_object_get(saved, "sources"), *v;

    m->keys_predicted =
        (uint64_t)json_integer_value(json_object_get(saved, "keys_predicted"));
    m->keys_total =
        (uint64_t)json_integer_value(json_object_get(saved, "keys_total"));
    m->gate_moved_before = (uint64_t)json_integer_value(
        json_object_get(saved, "moved_by_traffic"));
    v = json_object_get(saved, "started_unix");
    if (json_is_integer(v) && json_integer_value(v) <= (json_int_t)time(NULL)) {
        m->started_wall = (time_t)json_integer_value(v);
        m->started_ms -= (uint64_t)(time(NULL) - m->started_wall) * 1000u;
    }
    for (size_t i = 0; i < m->nsrc; i++) {
        json_t *s = json_object_get(srcs, m->src[i].srv->name);

        if (s != NULL)
            source_restore(&m->src[i], s);
    }
    /* (0: one stage, or not yet decided when saved: decided again, alike,
     * by the snapshot that carries it) */
    v = json_object_get(saved, "stage");
    if (json_is_integer(v) && json_integer_value(v) >= 1 &&
        json_integer_value(v) <= 2)
        atomic_store(&m->view->stage, (int)json_integer_value(v));
}

/* ---- metrics ------------------------------------------------------------- */

static const struct {
    const char *name, *type, *help;
} families[] = {
    {"chashd_migration_active", "gauge",
     "1 while a migration moves keys in the pool (migration: copy)."},
    {"chashd_migrations_total", "counter", "Migrations finished."},
    {"chashd_migration_keys_moved_total", "counter",
     "Keys moved to their new owner, by the copier (by=copier) or by a "
     "request that touched a moving key first (by=request)."},
    {"chashd_migration_keys_scanned_total", "counter",
     "Keys the copiers looked at on the old owners."},
    {"chashd_migration_bytes_total", "counter",
     "Bytes the copier moved (MEMORY USAGE of each key)."},
    {"chashd_migration_anomalies_total", "counter",
     "Moving keys the verification pass found still on an old owner "
     "(expected 0)."},
    {"chashd_migration_failed_keys_total", "counter",
     "Moves that failed (tried again later; a request whose key could "
     "not move got an error)."},
    {"chashd_migration_progress_ratio", "gauge",
     "Progress of each old owner's copier in the running migration."},
};

/* The families' indexes, in the order above. */
enum family {
    FAM_ACTIVE,
    FAM_COUNT,
    FAM_MOVED,
    FAM_SCANNED,
    FAM_BYTES,
    FAM_ANOMALIES,
    FAM_FAILED,
    FAM_PROGRESS,
    FAM_N
};

_Static_assert(sizeof(families) / sizeof(families[0]) == FAM_N,
               "a name per family");

static void
label(FILE *f, const char *name, const char *pool, const char *source)
{
    fprintf(f, "%s{pool=\"", name);
    stats_label_escape(f, pool);
    if (source != NULL) {
        fputs("\",source=\"", f);
        stats_label_escape(f, source);
    }
    fputs("\"}", f);
}

/* Whether family <k> has a sample: pools that copy (or did), and for
 * the progress, a migration running. */
static bool
family_sampled(enum family k)
{
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        if (k == FAM_PROGRESS ? p->migration != NULL
                              : p->cfg.migration == CONF_MIGRATION_COPY ||
                                    migration_last_get(p->name) != NULL)
            return true;
    }
    return false;
}

/* Each copier's progress in <m>, <p>'s running migration. */
static void
progress_samples(FILE *f, const struct pool *p, struct migration *m)
{
    for (size_t j = 0; j < m->nsrc; j++) {
        const struct msource *ms = &m->src[j];
        double pr;

        pthread_mutex_lock(&m->lock);
        pr = source_progress(ms);
        pthread_mutex_unlock(&m->lock);
        label(f, families[FAM_PROGRESS].name, p->name, ms->srv->name);
        fprintf(f, " %.4f\n", pr);
    }
}

/* Pool <p>'s samples of family <k>: its finished migrations' sums and
 * its running one's totals. */
static void
family_samples(FILE *f, enum family k, struct pool *p)
{
    const char *name = families[k].name;
    struct migration *m = p->migration;
    struct migration_last *l = migration_last_get(p->name);
    struct migration_last sum = {0};
    struct migration_totals t = {0};
    uint64_t value = 0;

    if (l != NULL)
        sum = *l;
    if (m != NULL)
        migration_totals(m, &t);
    switch (k) {
    case FAM_ACTIVE:
        label(f, name, p->name, NULL);
        fprintf(f, " %d\n", m != NULL);
        return;
    case FAM_MOVED:
        fprintf(f, "%s{pool=\"", name);
        stats_label_escape(f, p->name);
        fprintf(f, "\",by=\"copier\"} %" PRIu64 "\n", sum.moved + t.moved);
        fprintf(f, "%s{pool=\"", name);
        stats_label_escape(f, p->name);
        fprintf(f, "\",by=\"request\"} %" PRIu64 "\n",
                sum.by_request + t.gate_moved);
        return;
    case FAM_PROGRESS:
        if (m != NULL)
            progress_samples(f, p, m);
        return;
    case FAM_COUNT:
        value = sum.count;
        break;
    case FAM_SCANNED:
        value = sum.scanned + t.scanned;
        break;
    case FAM_BYTES:
        value = sum.bytes + t.bytes;
        break;
    case FAM_ANOMALIES:
        value = sum.anomalies + t.anomalies;
        break;
    case FAM_FAILED:
        value = sum.failed + t.failed + t.gate_failed;
        break;
    case FAM_N:
        return;
    }
    label(f, name, p->name, NULL);
    fprintf(f, " %" PRIu64 "\n", value);
}

void
migration_metrics(FILE *f)
{
    for (enum family k = 0; k < FAM_N; k++) {
        if (!family_sampled(k))
            continue;
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", families[k].name,
                families[k].help, families[k].name, families[k].type);
        for (size_t i = 0; i < pool_count(); i++) {
            struct pool *p = pool_at(i);

            if (p->cfg.migration != CONF_MIGRATION_COPY &&
                migration_last_get(p->name) == NULL)
                continue;
            family_samples(f, k, p);
        }
    }
}

/* migration_int.h -- what the files of the migration module share (not
 * for other modules: they use migration.h). migration.c holds the
 * migration's life on the control thread and owns the lists below;
 * migration_copy.c the copier threads; migration_report.c what the API,
 * the metrics and the state file see of a migration; migration_plan.c
 * the look at a change before it is applied (probe, reload plan);
 * migration_etcd.c a migration run by several instances through etcd.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_MIGRATION_INT_H
#define CHASHD_MIGRATION_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "control/migration.h"

struct pool;
struct pool_snapshot;
struct server;

enum mig_phase {
    MIG_DRAINING,
    MIG_COPYING,
    MIG_VERIFYING,
    MIG_FINISHING,
    MIG_DONE,
    MIG_WARMING /* memcache: keys warm up on touch until the window ends */
};

/* The phases' names, as the API and the logs show them. */
extern const char *const migration_phase_names[];

struct migration;

/* One old owner and its copier. Fields below <lock> are the migration's
 * lock's. */
struct msource {
    struct migration *m;
    struct server *srv; /* (ref held) */
    pthread_t thread;
    bool started;
    /* under m->lock */
    int phase;     /* MIG_COPYING, MIG_VERIFYING, MIG_DONE */
    unsigned pass; /* 1: copy; 2 and later: verification */
    char cursor[24];
    uint64_t scanned, moved, bytes, absent, failed, anomalies, errors;
    uint64_t retry_failed; /* failed in the last pass, to find again */
    uint64_t pass_failed;  /* failed in this pass */
    int64_t dbsize_start;
    char last_error[200];
    bool skipped; /* given up by the operator (a dead member) */
};

/* A running migration: the control thread's, but for the fields its
 * copiers share under <lock> (the sources' counters, the throttle, the
 * big keys) and <stop>. */
struct migration {
    struct pool *pool; /* (ref held) */
    uint64_t epoch;
    int phase; /* control thread */
    char change[300];
    char **leaving; /* members removed once done */
    size_t nleaving;
    uint64_t keys_predicted, keys_total;
    double moved_fraction; /* of the key space, -1: not known */
    bool late_count;       /* a reload's: counted from the sources */
    time_t started_wall;
    uint64_t started_ms, finished_ms;
    struct migration_view *view;    /* (ref held) */
    struct pool_snapshot *new_snap; /* pinned once started */
    struct migration_drain *drain;  /* (ref held) while draining */
    /* settings, copied at start */
    char *auth;
    int db;
    uint32_t timeout_ms, batch, rate;
    uint64_t bandwidth, big_key;
    struct msource *src;
    size_t nsrc;
    pthread_mutex_t lock;
    _Atomic bool stop;
    /* the throttle: a debt-free token bucket per unit */
    double tok_keys, tok_bytes;
    uint64_t tok_ms;
    json_t *big_keys; /* under lock */
    /* the pool's gate counters when it started, and what resumed */
    uint64_t gate_base_moved, gate_base_absent, gate_base_failed;
    uint64_t gate_moved_before; /* moved by traffic before a restart */
    uint64_t saved_ms;
    uint64_t saved_sig;     /* what the last save had: saved again on change */
    bool detached;          /* chashd stopped while it was finishing */
    bool warmup;            /* migration: warmup (memcache) */
    uint64_t warm_until_ms; /* its window's end */
    /* run with other instances through etcd (migration.h) */
    bool etcd;
    bool holder;        /* this instance holds the copier lock */
    bool barrier_wait;  /* drained here; the others are awaited */
    char holder_of[64]; /* who holds it, as etcd says ("": nobody) */
    uint64_t copied_ms; /* the end of a stage went to etcd then */
    int copied_stage;
};

/* The last finished migration of each pool, for the API (migration.c
 * keeps the list). */
struct migration_last {
    char *pool;
    json_t *j;
    /* every finished migration of the pool, summed (the metrics) */
    uint64_t count, moved, by_request, scanned, bytes, anomalies, failed;
    struct migration *ending; /* finishing: shown until it is done */
    struct migration_last *next;
};

/* Totals over a migration's sources and its pool's gates. */
struct migration_totals {
    uint64_t scanned, moved, bytes, absent, failed, anomalies, errors;
    uint64_t gate_moved, gate_absent, gate_failed;
};

/* ---- migration.c: the life on the control thread ------------------------- */

/* The record of <pool>'s finished migrations, or NULL. */
struct migration_last *migration_last_get(const char *pool);
/* Keep <m>'s progress in the state file (not an etcd one's). */
void migration_save(struct migration *m);
/* The first stage of a two-stage migration is done: start the second. */
void migration_stage_two(struct migration *m);
/* Every source is done: end <m> (its pool's next snapshot drops it). */
void migration_finish(struct migration *m);
/* The migration <saved> describes (a state file's, or an etcd
 * descriptor; <where> says which), numbered <epoch>, made and listed as
 * running; NULL with <err>. */
struct migration *migration_load(struct pool *p, const json_t *saved,
                                 uint64_t epoch, const char *where, char *err,
                                 size_t errlen);
/* <m> (migration_load's) runs in <p> from the snapshot built now on. */
void migration_adopt(struct pool *p, struct migration *m);

/* ---- migration_copy.c: the copier threads -------------------------------- */

/* A copier for every source not done yet; and stop and join them all
 * (<m>->stop stays set). */
void migration_copiers_start(struct migration *m);
void migration_copiers_stop(struct migration *m);

/* ---- migration_report.c: the API, the metrics, the state file ------------ */

/* <m>'s totals (takes <m>->lock). */
void migration_totals(struct migration *m, struct migration_totals *t);
/* <m> as GET /api/pools/{pool}/migration shows it. */
json_t *migration_to_json(struct migration *m);
/* The placement <snap> holds: [{"name", "weight"}] (what
 * migration_saved_placement reads back). */
json_t *migration_placement_json(const struct pool_snapshot *snap);
/* What the state file keeps of <m>: enough to resume it. */
json_t *migration_saved_json(struct migration *m);
/* The old placement <saved> gives, as a snapshot of <p> (not pinned),
 * for a migration numbered <epoch> (0: refused); NULL with <err>. */
struct pool_snapshot *
migration_saved_placement(struct pool *p, const json_t *saved, uint64_t epoch,
                          const char *where, char *err, size_t errlen);
/* Put the progress <saved> keeps into <m> (made from its placement). */
void migration_saved_restore(struct migration *m, const json_t *saved);

/* ---- migration_etcd.c: several instances --------------------------------- */

/* <m>, run through etcd, has drained here: tell etcd, wait for the
 * others. */
void migration_etcd_note_drained(struct migration *m);
/* <m>'s copiers (this instance holds the lock) are done with the
 * running stage: tell etcd, again every so often until it answers. */
void migration_etcd_note_copied(struct migration *m, uint64_t now_ms);

#endif /* CHASHD_MIGRATION_INT_H */

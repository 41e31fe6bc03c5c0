/* migration_etcd.c -- one migration run by several chashd instances, in
 * a pool that takes its members from etcd (migration.h): etcd's
 * descriptor starts it everywhere, every instance gates and drains, the
 * holder of the copier lock copies, and etcd says when a stage (or the
 * migration) ends. control/etcd_migration.c is the other side.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/migration_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "model/pool.h"

/* A copier's end of a stage that etcd did not apply is sent again. */
#define COPIED_AGAIN_MS 2000

static const struct migration_etcd_ops *etcd_ops;

void
migration_etcd_set(const struct migration_etcd_ops *ops)
{
    etcd_ops = ops;
}

void
migration_etcd_note_drained(struct migration *m)
{
    /* drained here: the gates open once every instance is */
    migration_drain_unref(m->drain);
    m->drain = NULL;
    m->barrier_wait = true;
    log_info("pool %s: migration %" PRIu64 ": drained here; waiting "
             "for the other instances",
             m->pool->name, m->epoch);
    if (etcd_ops != NULL)
        etcd_ops->drained(m->pool, m->epoch, atomic_load(&m->view->stage));
}

void
migration_etcd_note_copied(struct migration *m, uint64_t now_ms)
{
    /* the next stage, or the end, is etcd's to say */
    int stage = atomic_load(&m->view->stage);

    if (etcd_ops != NULL && (m->copied_stage != stage + 1 ||
                             now_ms - m->copied_ms >= COPIED_AGAIN_MS)) {
        m->copied_stage = stage + 1;
        m->copied_ms = now_ms;
        etcd_ops->copied(m->pool, m->epoch, stage);
    }
}

json_t *
migration_etcd_descriptor(const struct pool *p, const char *change,
                          const char *const *leaving, size_t nleaving,
                          uint64_t keys_predicted, uint64_t keys_total)
{
    const struct pool_snapshot *cur = atomic_load(&p->snap);
    json_t *j = json_object(), *o = migration_placement_json(cur),
           *l = json_array();

    for (size_t i = 0; i < nleaving; i++)
        json_array_append_new(l, json_string(leaving[i]));
    json_object_set_new(j, "change", json_string(change));
    json_object_set_new(j, "old", o);
    json_object_set_new(j, "leaving", l);
    json_object_set_new(j, "keys_predicted",
                        json_integer((json_int_t)keys_predicted));
    json_object_set_new(j, "keys_total", json_integer((json_int_t)keys_total));
    json_object_set_new(j, "started_unix",
                        json_integer((json_int_t)time(NULL)));
    json_object_set_new(j, "stage", json_integer(0));
    if (json_array_size(o) == 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int
migration_etcd_begin(struct pool *p, const json_t *desc, uint64_t epoch,
                     char *err, size_t errlen)
{
    struct migration *m;

    if (p->migration != NULL) {
        migration_busy(p, err, errlen);
        return -1;
    }
    if ((m = migration_load(p, desc, epoch, "etcd's", err, errlen)) == NULL)
        return -1;
    m->etcd = true;
    log_info("pool %s: migration %" PRIu64 " (%s) from etcd: every instance "
             "gates its moving keys; one copies",
             p->name, epoch, m->change);
    migration_adopt(p, m);
    return 0;
}

uint64_t
migration_etcd_epoch(const struct pool *p, int *stage, bool *waiting)
{
    const struct migration *m = p->migration;

    if (m == NULL || !m->etcd)
        return 0;
    *stage = atomic_load(&m->view->stage);
    *waiting = m->barrier_wait;
    return m->epoch;
}

void
migration_etcd_pass(struct pool *p)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd || !m->barrier_wait)
        return;
    m->barrier_wait = false;
    atomic_store(&p->mig_drained,
                 migration_gen(m->epoch, atomic_load(&m->view->stage)));
    m->phase = MIG_COPYING;
    log_info("pool %s: migration %" PRIu64 ": every instance drained; %s",
             p->name, m->epoch,
             m->holder ? "copying" : "another instance copies");
    if (m->holder)
        migration_copiers_start(m);
}

void
migration_etcd_stage(struct pool *p, int stage)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd || stage != 2 ||
        atomic_load(&m->view->stage) != 1 || m->new_snap == NULL)
        return;
    m->barrier_wait = false;
    migration_stage_two(m);
}

void
migration_etcd_copier(struct pool *p, bool hold, const char *holder)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd)
        return;
    snprintf(m->holder_of, sizeof(m->holder_of), "%s", holder ? holder : "");
    if (hold == m->holder)
        return;
    m->holder = hold;
    if (!hold) {
        /* the lock went (our lease): another instance copies on */
        log_warn("pool %s: migration %" PRIu64 ": this instance no longer "
                 "holds the copier lock; its copiers stop",
                 p->name, m->epoch);
        migration_copiers_stop(m);
        atomic_store(&m->stop, false);
        return;
    }
    log_info("pool %s: migration %" PRIu64 ": this instance holds the "
             "copier lock",
             p->name, m->epoch);
    m->copied_stage = 0;
    if ((m->phase == MIG_COPYING || m->phase == MIG_VERIFYING) &&
        !m->barrier_wait)
        migration_copiers_start(m);
}

void
migration_etcd_end(struct pool *p)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd)
        return;
    if (m->drain != NULL) {
        migration_drain_unref(m->drain);
        m->drain = NULL;
    }
    m->barrier_wait = false;
    if (m->new_snap == NULL) {
        /* never started here (its publication is awaited): the callback
         * finds no migration and does nothing */
        migration_cancel(p);
        pool_schedule(p);
        return;
    }
    migration_finish(m);
}

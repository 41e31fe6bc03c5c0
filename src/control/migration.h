/* migration.h -- live data migration of redis pools (`migration: copy`):
 * when a membership change moves keys to new owners, every key that
 * moves is moved once, from its old owner to its new one, with MIGRATE
 * (atomic on the old owner), while clients keep using the pool:
 *
 *   - requests: before a request touches a moving key, chashd moves the
 *     key first (a "gate": MIGRATE on the old owner), then runs the
 *     request on the new owner (data/request.c, data/redis_mode.c);
 *   - a drain barrier: nothing is moved until every request sent to an
 *     old owner under the old ring has been answered (a late write would
 *     recreate a moved key on its old owner);
 *   - a copier per old owner (a thread): SCAN, MIGRATE what moves,
 *     throttled; then a verification pass;
 *   - the migration is kept in the state file and resumed after a
 *     restart.
 * doc/migration.md for users; the design and its races in
 * doc/internals/chashd.md. The module's files: migration.c (the life on
 * the control thread), migration_copy.c (the copiers),
 * migration_report.c (API, metrics, state file), migration_plan.c (the
 * probe, reload plans), migration_etcd.c (several instances); they share
 * migration_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_MIGRATION_H
#define CHASHD_MIGRATION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "model/migration_view.h"

struct conf_addr;
struct conf_pool;
struct pool;
struct pool_snapshot;
struct server;

/* How a drain barrier reaches the workers (chashd: each worker runs
 * request_drain): hands <d> to each, a reference each, and returns how
 * many took it. Unset (unit tests), a migration drains at once. */
typedef unsigned migration_barrier_fn(struct migration_drain *d);
void migration_set_barrier(migration_barrier_fn *fn);

/* What a migration asks of the membership above it (control/membership.c
 * registers it in membership_init; unset in a unit test without one). */
struct migration_host {
    /* keep <pool>'s running migration <m> in the state file (NULL: it
     * ended) and write the file; a failed write is logged */
    void (*save)(const char *pool, json_t *m);
    /* member <name> of <p> has given away its keys: it leaves the pool
     * (logged, persisted) */
    void (*leave)(struct pool *p, const char *name);
};
void migration_set_host(const struct migration_host *h);

/* Register with the control loop. 0 or -1. */
int migration_init(void);
/* Stop every copier (exit): the state file keeps where they were. */
void migration_deinit(void);

/* Whether a migration (or a warm-up) runs in <p> (control thread); and
 * one that refuses other changes meanwhile (a copy: a warm-up gives way
 * to the next change). */
bool migration_active(const struct pool *p);
bool migration_exclusive(const struct pool *p);

/* A sentence on the migration running in <p> for a refusal: "migration in
 * progress in pool P (phase copying, 120 of 3400 keys moved)". */
void migration_busy(const struct pool *p, char *buf, size_t cap);

/*
 * A change of <p>'s placement is about to be applied (membership.c):
 * pin the current placement as the old one and put the view in every
 * snapshot built from now on. <change> describes it ("add r4"); <leaving>
 * (<nleaving>) are members that leave the pool once their keys are moved
 * (scale-in: drained now, removed at the end). <keys_predicted> 0 with
 * <keys_total>: computed from the rings once the change is live. 0, or -1
 * with a reason in <err>.
 */
int migration_prepare(struct pool *p, const char *change,
                      const char *const *leaving, size_t nleaving,
                      uint64_t keys_predicted, uint64_t keys_total, char *err,
                      size_t errlen);

/* Whether member <name> of <p> leaves once the running migration ends. */
bool migration_is_leaving(const struct pool *p, const char *name);
/* The change could not be applied after migration_prepare(): undo it. */
void migration_cancel(struct pool *p);
/* The change is live (its snapshot published): drain, then copy. */
void migration_start(struct pool *p);

/*
 * A reload gives <p> the config <cp> (its state delta applied, its
 * servers probed): 0 when no key moves (or <p> does not copy), 1 when a
 * migration must run -- <pl> lists the members that must stay until
 * their keys have moved (the reload removes them) and the key count --,
 * -1 when the reload must be refused (<err>: a joining member holds keys,
 * a migration runs already, the ring's hash changes...).
 */
struct migration_plan {
    bool change;
    const struct server **leaving;
    size_t nleaving;
    uint64_t keys_total;
};
int migration_reload_plan(const struct pool *p, const struct conf_pool *cp,
                          struct migration_plan *pl, char *err, size_t errlen);
void migration_plan_free(struct migration_plan *pl);

/* Resume the migration the state file holds for <p> (start-up). */
int migration_resume(struct pool *p, json_t *saved, char *err, size_t errlen);

/* The migration families of GET /metrics. */
void migration_metrics(FILE *f);

/* DELETE /api/pools/{pool}/migration/sources/{member}: stop moving keys
 * from <member> (a dead one): its moving keys not moved yet are lost, and
 * the new owners serve them. 0, or -1 with a reason in <err>. */
int migration_skip(struct pool *p, const char *member, char *err,
                   size_t errlen);

/* GET /api/pools/{pool}/migration. */
json_t *migration_json(const struct pool *p);

/*
 * Blocking look at the members of a pool (the builder thread, before a
 * change is applied: never the control thread). For each of <n>
 * addresses: its key count (DBSIZE of <db>), -1 when it cannot be asked
 * (<why> says why). With <flush> >= 0, member <flush> is emptied first
 * (FLUSHDB). <auth> may be NULL.
 */
struct migration_probe {
    const char **addresses; /* "host:port" */
    size_t n;
    const char *auth;
    int db;
    int flush; /* index to flush, -1: none */
    uint32_t timeout_ms;
    int64_t *keys; /* [n] out */
    char why[256]; /* the first failure */
};
void migration_probe(struct migration_probe *pr);

/*
 * ---- one migration run by several chashd instances (etcd pools) ----
 *
 * In a pool that takes its members from etcd, a migration is described
 * in etcd (control/etcd_migration.c, doc/etcd.md): its descriptor,
 * created in the same transaction as the change, gives the old
 * placement, so every instance -- a late one too -- runs the same
 * migration, numbered by the revision of the change (<epoch>). Each
 * instance gates its own requests and drains its own connections; a
 * stage's gates open only once every instance has drained (a barrier in
 * etcd); only the instance that holds the pool's copier lock runs
 * copiers, and it ends the stage (or the migration) in etcd, which every
 * instance then applies.
 */
struct migration_etcd_ops {
    /* This instance drained stage <stage> of <epoch>: say so in etcd. */
    void (*drained)(struct pool *p, uint64_t epoch, int stage);
    /* The copiers (this instance holds the lock) are done with <stage>:
     * the next stage (1), or the end (0, 2), goes to etcd. */
    void (*copied)(struct pool *p, uint64_t epoch, int stage);
};
void migration_etcd_set(const struct migration_etcd_ops *ops);

/* A descriptor for the change about to be written to etcd: <p>'s current
 * placement is the old one. NULL: out of memory. */
json_t *migration_etcd_descriptor(const struct pool *p, const char *change,
                                  const char *const *leaving, size_t nleaving,
                                  uint64_t keys_predicted, uint64_t keys_total);
/* Begin the migration of descriptor <desc> created at revision <epoch>
 * (the pool has just taken the change from etcd): 0, or -1 with <err>. */
int migration_etcd_begin(struct pool *p, const json_t *desc, uint64_t epoch,
                         char *err, size_t errlen);
/* The etcd migration of <p> (0: none) and whether its local drain of the
 * running stage is done and waits for the other instances (*<stage>). */
uint64_t migration_etcd_epoch(const struct pool *p, int *stage, bool *waiting);
/* Every instance drained the running stage: its gates open; the copiers
 * start here if this instance holds the lock. */
void migration_etcd_pass(struct pool *p);
/* The descriptor says stage 2 runs now. */
void migration_etcd_stage(struct pool *p, int stage);
/* This instance holds the copier lock (<hold>), or <holder> does. */
void migration_etcd_copier(struct pool *p, bool hold, const char *holder);
/* The descriptor is gone from etcd: the migration is over here too. */
void migration_etcd_end(struct pool *p);

#endif /* CHASHD_MIGRATION_H */

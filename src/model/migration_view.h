/* migration_view.h -- what the data path sees of a running migration
 * (control/migration.c runs it): the view of the old placement that every
 * snapshot carries while it runs, the drain barrier handed to the
 * workers, and the verdicts of a key's gate. Data, published by the
 * control plane in snapshots; read by the request path and the copiers.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_MIGRATION_VIEW_H
#define CHASHD_MIGRATION_VIEW_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct conf_addr;
struct pool;
struct pool_snapshot;

/*
 * What the workers see of a running migration, in every snapshot built
 * while it runs: the placement before the change (a pinned snapshot:
 * its ring and members). Immutable; references are taken and dropped on
 * the control thread only (snapshots are built and freed there).
 */
struct migration_view {
    unsigned refs;
    uint64_t epoch;            /* the pool's migration number */
    struct pool_snapshot *old; /* pinned */
    /*
     * (atomic) Two members that both give and take keys would deadlock
     * each other's MIGRATEs (each blocks until the other answers): such a
     * migration runs in two stages. 1: only keys moving to a member whose
     * name sorts after their old member's move (migration_deferred); the others
     * stay where they were, requests go there. 2: the rest. 0: one stage, every
     * key moves. MIG_STAGE_UNDECIDED (a copy's, until the first snapshot
     * that places keys apart from <old> is built: migration_view_decide
     * sets it there, before that snapshot is published, so no request is
     * ever routed by a stage that is not yet the migration's).
     */
    _Atomic int stage;
};

#define MIG_STAGE_UNDECIDED (-1)

struct pool_snapshot;

/* Decide <v>'s stages from <now>, a snapshot carrying it that is about to
 * be published (nothing if decided, or if <now> places every key as the
 * old placement does). Any thread. */
void migration_view_decide(struct migration_view *v,
                           const struct pool_snapshot *now);

/* In the first stage of a two-stage migration, the keys moving from
 * member <o> to member <n> wait for the second when <n>'s name sorts
 * before <o>'s: an order every instance and every restart agree on
 * (member ids differ between instances). */
static inline bool
migration_deferred(const char *o, const char *n)
{
    return strcmp(o, n) > 0;
}

/* The drain generation gates of <epoch> wait for in <stage>: the pool's
 * mig_drained reaches it once the barrier of that stage passed. */
static inline uint64_t
migration_gen(uint64_t epoch, int stage)
{
    return epoch * 4 + (stage == 2 ? 2 : 1);
}

void migration_view_ref(struct migration_view *v);
void migration_view_unref(struct migration_view *v); /* NULL: nothing */

/*
 * The drain barrier, handed to every worker (request_drain): each marks
 * what its connections to the pool's members have sent so far, and
 * counts itself in <done> once all of it is answered. Freed by whoever
 * drops the last reference (any thread).
 */
struct migration_drain {
    _Atomic unsigned refs;
    _Atomic unsigned done; /* workers drained */
    unsigned workers;      /* handed to */
    struct pool *pool;     /* compared, never dereferenced by workers */
};

void migration_drain_unref(struct migration_drain *d);

/* What a gate's step (a MIGRATE, a copy) did: the request path's
 * (request.c) and the copiers' (migration.c) verdict on a moving key. */
enum migration_gate {
    GATE_MOVED,   /* the key was moved (or copied: a warm-up) */
    GATE_ABSENT,  /* the old owner did not have it (moved already, or none) */
    GATE_RETRY,   /* the new owner has a copy (an earlier failed move):
                     again, overwriting it */
    GATE_FAILED,  /* not moved: the request must not run */
    GATE_NEXT,    /* one more step, on the new owner */
    GATE_NEXT_OLD /* one more step, on the old owner */
};

/* The numeric host and the port of <a> for MIGRATE (any thread): 0, or
 * -1 for a unix path. */
int migration_host_port(const struct conf_addr *a, char *host, size_t hostcap,
                        char *port, size_t portcap);

/* What a MIGRATE reply (<buf>, <len> bytes, "+OK\r\n" ...) says: enum
 * migration_gate (any thread). */
int migration_migrate_result(const char *buf, size_t len);

#endif /* CHASHD_MIGRATION_VIEW_H */

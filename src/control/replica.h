/* replica.h -- replication of store pools (`replicas: N`): what is shared
 * between the workers, which send each request to the members of its
 * key's replica set (request.c), and the control thread, which repairs
 * the members that missed writes:
 *
 *   - per member, a bounded log of the keys it must be repaired on (a
 *     write it missed: down, refused, failed, or answered apart from the
 *     others; a quorum read on which it disagreed), and whether it may
 *     serve reads (not while it has keys to repair);
 *   - the repairer: a thread per pool, started by the control thread's
 *     tick when a member has keys to repair and is up; for each key it
 *     reads every member of the key's set, takes the value most of them
 *     hold (the primary's when no value has more copies than another)
 *     and writes it where it differs. A log that overflowed is a full
 *     comparison instead (redis: SCAN every member; memcache: the member
 *     is flushed);
 *   - counters for the metrics and the admin API.
 * doc/replication.md for users.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_REPLICA_H
#define CHASHD_REPLICA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "model/replica_log.h"

struct conf_pool;
struct pool;
struct pool_snapshot;
struct server;

/* The reload of <p> to <cp> keeps what its copies rely on: 0, or -1 with
 * why in <err> (a changed hash, distribution, points, hash_tag or
 * redis_db; a member at a new address under its old name). */
int replica_reload_check(const struct pool *p, const struct conf_pool *cp,
                         char *err, size_t errlen);

/* The request engine's side of repairs (request.h): each key's repair
 * runs on its home worker, a fill waits for a barrier over the workers.
 * Registered by main (a unit test of the pools links no engine). */
struct request_repair;
struct request_barrier;
struct replica_engine {
    void (*submit)(struct request_repair *r);
    struct request_barrier *(*barrier_start)(struct pool *p);
    bool (*barrier_passed)(struct request_barrier *b);
    void (*barrier_unref)(struct request_barrier *b);
};

/* Control thread: start the tick that runs the repairers, which hand
 * their work to <e> (kept). 0 or -1. */
int replica_init(const struct replica_engine *e);
/* Stop every repairer (at exit). */
void replica_deinit(void);
/* Prometheus families (the metrics handler). */
void replica_metrics(FILE *f);
/* The admin API's replication object of pool <p> (NULL when it keeps
 * one copy). */
json_t *replica_json(struct pool *p);

#endif /* CHASHD_REPLICA_H */

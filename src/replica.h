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

struct conf_pool;
struct pool;
struct pool_snapshot;
struct server;

/* A member's keys to repair (in struct server). */
struct replica_log {
    pthread_mutex_t lock;
    char **keys; /* open addressing, NULL: empty; each key is a 4-byte
                    length then its bytes */
    size_t cap, n;
    bool overflow;        /* more keys than repair_log: compare all */
    _Atomic bool dirty;   /* (atomic) keys to repair: not readable */
    _Atomic uint64_t gen; /* (atomic) +1 per key noted */
    _Atomic size_t taken; /* (atomic) keys a running repair took */
    /* control thread */
    uint64_t clean_gen; /* gen when its last repair pass began */
    uint64_t clean_ms;  /* when a pass found nothing left (0: not yet) */
    uint64_t retry_ms;  /* not before (it was unreachable) */
};

/* Per pool counters, (atomic), any thread. */
struct replica_stats {
    _Atomic uint64_t divergences;    /* replies that differed */
    _Atomic uint64_t repairs;        /* copies written (or deleted) */
    _Atomic uint64_t repair_errors;  /* keys a pass could not repair */
    _Atomic uint64_t write_failures; /* writes refused: quorum not met */
    _Atomic uint64_t partial_writes; /* acknowledged, some member missed it */
    _Atomic uint64_t read_failures;  /* quorum reads refused */
    _Atomic uint64_t full_compares;  /* repairs of an overflowed log */
    _Atomic uint64_t fills;          /* placement changes filled */
    _Atomic uint64_t cleaned;        /* copies deleted from members that
                                        left the key's set */
};

void replica_log_init(struct replica_log *l);
void replica_log_deinit(struct replica_log *l);

/*
 * Worker side. Member <s> must be repaired on the key <key> (<len>
 * bytes): noted in its log, which holds at most <cap> keys (beyond: the
 * log overflows, its member is compared whole). <missed>: it missed a
 * write, and stops serving reads at once, until repaired.
 */
void replica_note(struct server *s, const char *key, size_t len, size_t cap,
                  bool missed);

/* Whether <s> may serve reads (nothing to repair). Any thread. */
bool replica_readable(const struct server *s);

/* Keys waiting in <s>'s log (any thread; for the metrics). */
size_t replica_pending(struct server *s);

/*
 * The fill. After a placement change, the members that joined a key's
 * replica set are filled with it by the repairer (a whole pass over
 * every member's keys) and serve no read of it before. What a snapshot
 * knows of that: the last placement whose sets were filled (<base>),
 * and every placement published since (<since>, oldest first). A member
 * holds the current copy of a key when it is in the key's set in each
 * of them: it held the key, and took every write since. Immutable once
 * made; references and pins on the control thread.
 */
struct replica_view {
    unsigned refs;
    struct pool_snapshot *base;   /* (pinned) */
    struct pool_snapshot **since; /* [nsince] (pinned) */
    size_t nsince;
};

void replica_view_unref(struct replica_view *v); /* NULL: nothing */

/* Control thread, when a snapshot of <p> is prepared: the view it
 * carries into *<out> (a reference; NULL with replicas: 1): <p>'s, with
 * the snapshot published now appended when its placement is new. 0, or
 * -1 when out of memory (no view would be right). */
int replica_fill_view(struct pool *p, struct replica_view **out);
/* Whether <snap> fills nothing: its placement is its view's base, and
 * nothing came between. Any thread (the builder's). */
bool replica_fill_same(const struct pool_snapshot *snap);
/* Whether member <s> holds the current copy of a key of ring hash
 * <hash> by view <v> (see struct replica_view). Any thread. */
bool replica_current(const struct replica_view *v, uint64_t hash,
                     const struct server *s);
/* The reload of <p> to <cp> keeps what its copies rely on: 0, or -1 with
 * why in <err> (a changed hash, distribution, points, hash_tag or
 * redis_db; a member at a new address under its old name). */
int replica_reload_check(const struct pool *p, const struct conf_pool *cp,
                         char *err, size_t errlen);

/* Control thread: start the tick that runs the repairers. 0 or -1. */
int replica_init(void);
/* Stop every repairer (at exit). */
void replica_deinit(void);
/* Prometheus families (the metrics handler). */
void replica_metrics(FILE *f);
/* The admin API's replication object of pool <p> (NULL when it keeps
 * one copy). */
json_t *replica_json(struct pool *p);

#endif /* CHASHD_REPLICA_H */

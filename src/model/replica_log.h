/* replica_log.h -- what a replicated pool's members lack, as data: per
 * member, the log of keys it missed (workers note, the key's home worker
 * clears after a repair, the repairer reads); per snapshot, the view of
 * the placements since the last fill; per pool, the counters. The control
 * side (the repairer, control/replica.c) and the request engine
 * (data/request_rep.c) both work on it. doc/internals/replication.md.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_REPLICA_LOG_H
#define CHASHD_REPLICA_LOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pool;
struct pool_snapshot;
struct server;

/*
 * A member's replication state (in struct server): what this chashd knows
 * it lacks. A member is CURRENT for a key when nothing here names the key:
 * it took every write of the key, in the key's one order (request_rep.c),
 * so its copy is the copy. Workers note and read it; the repairs of the
 * key's home worker clear it; the repairer thread reads it.
 *   - keys: a write of the key missed (no reply, an error where the others
 *     succeeded) or answered apart from the current members (a
 *     divergence); each with the log's <gen> when noted, so a repair that
 *     read the key before a later miss does not clear it;
 *   - whole: every key is behind (a log that overflowed, a restart, out of
 *     memory): compared whole by the repairer, keys noted since kept;
 *   - unsettled: our ends of connections we reset while the member may
 *     still run what they carried: the member is told to drop them
 *     (CLIENT KILL; memcached: until `stats conns` no longer lists them)
 *     before anything is repaired on it;
 *   - ident: who the member is; a new identity is a restart (whole).
 */
struct replica_log {
    pthread_mutex_t lock;
    char **keys; /* open addressing, NULL: empty; each key is its 8-byte
                    gen, a 4-byte length, then its bytes */
    size_t cap, n;
    bool whole;
    uint64_t whole_gen;     /* <gen> when <whole> was last set */
    char (*unsettled)[64];  /* [nunsettled] "ip:port" */
    size_t nunsettled;
    char ident[64];         /* "" until first seen */
    _Atomic bool dirty;     /* (atomic) keys, whole or unsettled: not
                               current for everything */
    _Atomic uint64_t gen;   /* (atomic) +1 per note */
    /* control thread */
    uint64_t retry_ms; /* not before (it was unreachable) */
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
    /* Not a counter: the copies have not all been compared since chashd
     * started (writes may have been on their way when it stopped, or
     * replicas was raised): meanwhile the first request of each key
     * waits for its key's comparison (request_rep.c, verify_first). */
    _Atomic bool verifying;
};

void replica_log_init(struct replica_log *l);
void replica_log_deinit(struct replica_log *l);

/*
 * Worker side. Member <s> is behind on the keys <keys> (<keyslen> bytes,
 * packed: each a 4-byte length then its bytes): noted in its log, which
 * holds at most <cap> keys (beyond: the member is compared whole).
 */
void replica_note(struct server *s, const char *keys, size_t keyslen,
                  size_t cap);
/* Every key of <s> is behind (<why>, for the log line). */
void replica_note_whole(struct server *s, const char *why);
/* Whether <s> is current for every key of <keys> (packed). Any thread;
 * locks only a member that has something noted. */
bool replica_keys_current(struct server *s, const char *keys,
                          size_t keyslen);
/* The log's generation now: a repair reads it before it reads the
 * copies. */
uint64_t replica_gen(struct server *s);
/* Key <key> (<len> bytes) of <s> was repaired from copies read at
 * generation <gen>: forgotten, unless noted again since. */
void replica_clear(struct server *s, const char *key, size_t len,
                   uint64_t gen);
/* A connection whose our end is <laddr> was reset with requests on it. */
void replica_unsettled(struct server *s, const char *laddr);
/* Whether nothing waits to be settled on <s>. */
bool replica_settled(struct server *s);
/* Member <s> says it is <id>: 1 when it was someone else before (it
 * restarted: compared whole from now on), 0 otherwise. */
int replica_identity(struct server *s, const char *id);

/* Whether <s> is behind on every key (restarted, its log overflowed). */
bool replica_whole(struct server *s);

/* Whether <s> is current for every key (nothing noted at all). Any
 * thread. */
bool replica_readable(const struct server *s);

/* Keys noted on <s> (any thread; for the metrics). */
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

/* ---- for the repairer (control/replica.c) ---- */

/* The whole comparison that began at generation <gen> is done: the
 * member is behind on nothing it did not miss since. */
void replica_whole_done(struct server *s, uint64_t gen);

/* The addresses still to settle on <s>, copied into *<out> (freed by the
 * caller); their number. */
size_t replica_unsettled_list(struct server *s, char (**out)[64]);

/* <laddr> is settled on <s>: forgotten. */
void replica_settled_one(struct server *s, const char *laddr);

/* Copy the keys noted on <s> into *<out> (each: 4-byte length, bytes;
 * freed by the caller), their generation at the copy in *<gen>; whether
 * it is whole in *<whole>. The number of keys. */
size_t replica_log_keys(struct server *s, char **out, size_t *outlen, bool *whole);

/* Whether <a> and <b> place keys alike (the same members, in the same
 * ring). */
bool replica_same_placement(const struct pool_snapshot *a, const struct pool_snapshot *b);

/* A view of base <base> and the placements <since> (<n>), pinned. */
struct replica_view *replica_view_new(struct pool_snapshot *base, struct pool_snapshot *const *since, size_t n);

#endif /* CHASHD_REPLICA_LOG_H */

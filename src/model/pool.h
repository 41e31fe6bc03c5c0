/* pool.h -- pools and their members (servers): state, slow-start ramps,
 * the immutable ring snapshot workers read through an atomic pointer, and
 * the epoch scheme that frees a retired snapshot once no worker holds it.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_POOL_H
#define CHASHD_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/stats.h"
#include "conf/conf.h"
#include "model/replica_log.h"

struct proto;
struct access_log;
struct health_probe;
struct pool_build;
struct pool_waiter;
struct pool_snapshot;
struct migration;
struct migration_view;

/* Old and new snapshot of one publication, valid until the control
 * loop's next pool_reclaim(). */
struct pool_change {
    const struct pool_snapshot *from;
    const struct pool_snapshot *to;
};

/*
 * Threads. chashd has one control thread (the main thread: config load
 * and reload, health checks, ejection, ramps, the admin API) and N
 * workers (the data path).
 *
 * - Everything that CHANGES a pool or a member -- every function below
 *   not marked "any thread" -- is for the control thread only. There is
 *   no lock: the control thread is the single writer. The admin API
 *   (issue 5) runs its HTTP server inside the control thread's event loop
 *   (libmicrohttpd in external-epoll mode: its epoll fd registered with
 *   control_watch(), MHD_run() called from the callback and from a
 *   control tick), so it calls these functions directly, without a mutex.
 * - Workers only: pool_snapshot() (inside an epoch section), pool_choose(),
 *   the atomic fields marked (atomic) and their stats slot.
 * - Snapshots are immutable once published. A snapshot returned by
 *   pool_snapshot() in a worker stays valid until that worker's next
 *   pool_epoch_quiesce(); in the control thread, a retired snapshot stays
 *   valid until the control thread next calls pool_reclaim() (it does so
 *   from its loop, never inside a callback), so a change function can hand
 *   the old and the new snapshot to its caller for a migration report.
 */

/* The state workers see. A member is usable for new connections only in
 * SERVER_UP (ramping members are UP with a ramp below 1). */
enum server_state {
    SERVER_UP = 0,
    SERVER_DOWN,     /* failed `fall` active checks */
    SERVER_EJECTED,  /* server_failure_limit connect failures in a row */
    SERVER_DRAINING, /* operator: no new connections, keeps its old ones */
    SERVER_MAINT,    /* operator: out of the ring, not health-checked */
    SERVER_REMOVED,  /* no longer a member; lives on while referenced */
    SERVER_STATE_COUNT
};

/* Health as observed (the operator's drain/maint is separate: `admin`). */
enum server_health { HEALTH_UP = 0, HEALTH_DOWN, HEALTH_EJECTED };

/*
 * A member. Referenced by its pool's membership list, by every snapshot
 * that maps a ring index to it, and by every connection to it (refs);
 * freed at the last unref, on whatever thread drops it.
 */
struct server {
    uint64_t id;                /* unique for the life of the process */
    char *name;                 /* ring identity */
    char *zone;                 /* its zone (zone_policy), or NULL */
    struct conf_addr addr;      /* own copy; numeric */
    struct pool *pool;          /* borrowed: the pool whose list holds
                                   the member; NULL once removed */
    _Atomic int state;          /* (atomic) enum server_state; control writes */
    _Atomic uint64_t active;    /* (atomic) live backend connections */
    _Atomic uint32_t fails;     /* (atomic) consecutive connect failures,
                                   workers bump it, a success resets it */
    _Atomic int refs;           /* (atomic) */
    struct stats_server *stats; /* [workers] slots, stats.h */
    _Atomic bool mig_skip;      /* (atomic) the running migration gave up
                                   moving keys from it (it is dead) */
    struct replica_log rlog;    /* replication: keys to repair on it */

    /* Control thread only. */
    uint32_t weight;
    int health;  /* enum server_health */
    int admin;   /* enum state_admin (state.h): up/drain/maint */
    double ramp; /* slow-start fraction in the ring, 1 = full */
    bool ramping;
    double ramp_from; /* where the ramp started: 0 for a member entering,
                         old/new weight for a weight increase */
    uint64_t ramp_start_ms;
    uint64_t since_ms;                 /* when `state` last changed */
    uint64_t eject_until_ms;           /* EJECTED: first re-admission probe */
    uint64_t next_check_ms;            /* next active check */
    uint32_t check_ok, check_fail;     /* consecutive active-check results */
    uint64_t checks_ok, checks_failed; /* totals (control) */
    uint64_t ejections;         /* times moved to HEALTH_EJECTED (metrics) */
    struct health_probe *probe; /* health.c's state, NULL when idle */
    char reason[128];           /* why the last state change happened */
};

/* What workers need of a pool's settings, copied into every snapshot so
 * that a reload changes them atomically with the ring. */
struct pool_settings {
    int mode;              /* enum conf_mode */
    int hash_key;          /* enum conf_hash_key */
    int on_failure;        /* enum conf_on_failure */
    double balance_factor; /* 0 = off (also off with on_failure error) */
    uint32_t retries;
    uint32_t connect_timeout_ms;
    uint32_t idle_timeout_ms;
    uint32_t client_connections; /* 0 = unlimited */
    bool tcpkeepalive;
    bool auto_eject; /* auto_eject_hosts */
    bool hot;        /* hot_keys: track or spread (doc/hot.md) */
    bool hot_spread; /* hot_keys: spread */
    bool zoned;      /* zone_policy: hierarchical */
    struct ring_zone_weight zw[RING_ZONE_WEIGHTS_MAX]; /* zone_weights */
    size_t nzw;
    uint32_t failure_limit; /* server_failure_limit */
    const struct proto *proto;
    /* store modes */
    uint32_t timeout_ms;         /* per request, 0 = none (twemproxy) */
    uint32_t server_connections; /* per worker per member, >= 1 */
    uint64_t client_max_request; /* bytes */
    uint64_t item_size_max;      /* memcache: bytes */
    char *redis_auth;            /* owned by the snapshot, NULL: none */
    int redis_db;
    bool allow_fanout_admin;
    bool preconnect;
    char hash_tag[3];
    int migration;   /* enum conf_migration */
    bool etcd_fence; /* copy pool with members from etcd: fence_up() */
    uint32_t migration_timeout_ms; /* MIGRATE's timeout */
    uint32_t replicas;             /* members per key (1: no replication) */
    uint32_t write_quorum;         /* acknowledgements a write needs */
    int read_policy;               /* enum conf_read_policy */
    uint32_t read_quorum;          /* equal replies a quorum read needs */
    uint32_t repair_log;           /* keys noted per member, at most */
    /* connection modes (tcp, http) */
    bool accept_proxy; /* clients start with a PROXY v1/v2 header */
    int send_proxy;    /* enum conf_send_proxy */
    int fast_path;     /* enum conf_fast_path */
    /* http */
    struct conf_key_source hash_chain[CONF_HASH_CHAIN_MAX];
    uint32_t nhash_chain;
    unsigned forward_headers; /* enum conf_forward bits */
    bool member_header;       /* X-Chash-Member on responses */
    uint64_t client_max_header;
    uint64_t client_max_uri;
    uint32_t backend_keepalive; /* idle connections per worker and member */

    struct access_log *access_log; /* (ref held) the pool's, NULL: off;
                                      access_log_write() from any worker */
};

/*
 * An immutable view of a pool: the ring, which member each ring index is,
 * and the settings. Built by the control thread, published with one atomic
 * store, retired on the next publish and freed once every worker has
 * passed the epoch in which it was retired.
 */
struct pool_snapshot {
    uint64_t version;             /* per pool, +1 per publish */
    struct chash_ring *ring;      /* NULL: no member owns anything */
    size_t n;                     /* members in the ring */
    struct server **servers;      /* [n] ring index -> member (ref held) */
    struct chash_member *members; /* [n] as the ring was built: name
                                     (the member's own), weight, ramp */
    int *states;                  /* [n] enum server_state at build */
    uint64_t usable_points;       /* points of the UP members: W of the
                                     bounded-load cap */
    struct pool_settings set;
    /* A live migration (migration.h): where the keys were before the
     * change this snapshot's ring holds, while they move (ref held);
     * NULL when none runs. */
    struct migration_view *mig;
    /* Replication (replica.h): which members hold the current copies
     * (ref held; NULL with replicas: 1). A member of a key's set that does
     * not is being filled: it takes writes, serves no read of that key
     * yet. <fill_same>: nothing is being filled. */
    struct replica_view *fill;
    bool fill_same;
    /* Control thread only; workers never read these. */
    struct chash_ring *routing; /* the routing view (members taking new
                                   keys) when it differs from <ring>; NULL
                                   when it is <ring> or nothing routes */
    bool routes;                /* some member takes new keys */
    double moved;               /* fraction of the key space whose routing
                                   member changed from the snapshot this
                                   one replaced; -1 when not comparable */
    uint64_t gen;               /* the pool's change count it holds */
    unsigned pins;              /* builds reading it: not freed before */
    bool standalone;            /* pool_snapshot_of(): never published,
                                   freed at its last unpin */
    /* retirement */
    uint64_t retire_epoch;
    struct pool_snapshot *next_retired;
};

#define POOL_HOT_SPREAD 16 /* keys spread at once, per pool */

struct pool {
    char *name;
    _Atomic(struct pool_snapshot *) snap; /* (atomic) the current view */
    _Atomic uint64_t active;              /* (atomic) client connections */
    _Atomic uint64_t active_backends;     /* (atomic) sum of members' `active`:
                                             the bounded-load total */
    _Atomic int refs;                     /* (atomic) registry + connections */
    struct stats_pool *stats;             /* [workers] slots, stats.h */
    struct hot *hot; /* [workers] hot key summaries (hot.h); NULL: tcp */
    /* hot_keys: spread: the ring hashes of the keys whose reads go to any
     * member of their replica set (0: an empty slot). Written by the
     * control thread each second, read by the workers (relaxed). */
    _Atomic uint64_t hot_spread[POOL_HOT_SPREAD];
    _Atomic uint64_t mig_drained; /* (atomic) the last migration epoch whose
                                     drain barrier passed: its requests
                                     may move keys (request_gate) */

    /* Control thread only. */
    struct conf_pool cfg;    /* settings as loaded: a deep copy, every
                                twemproxy field included */
    struct server **servers; /* membership, config order */
    size_t nservers, capservers;
    int *lfds;                   /* [workers] listening sockets, -1 = none */
    bool removed;                /* dropped by a reload */
    uint64_t next_ramp_ms;       /* next ramp rebuild while any member ramps */
    uint64_t gen;                /* changes made (pool_schedule calls) */
    uint64_t health_gen;         /* health.c: <gen> at its last walk */
    uint64_t health_due_ms;      /* health.c: when something is due next */
    uint64_t placement;          /* membership changes (adds, removes,
                                    weights, admin states, reloads) */
    struct pool_build *build;    /* the build in flight, or NULL */
    bool dirty;                  /* changed since that build began */
    bool batching;               /* pool_batch: changes wait for its end */
    struct pool_waiter *waiters; /* pool_on_published, oldest first */
    struct pool_change last;     /* the latest publication */
    struct migration_view *mig_view; /* put in every snapshot built while
                                        a migration runs (ref held) */
    struct migration *migration;     /* migration.c's, NULL when none runs */
    struct replica_stats rstats;     /* replication counters (replica.h) */
    struct replica_view *fill_view;  /* replicas: put in every snapshot
                                        (ref held) */
    struct repairer *repairer;       /* replica.c's, NULL when none runs */
    struct access_log *access_log;   /* (ref held) opened once per config
                                        (create, reload), shared by every
                                        snapshot built from it; NULL: off */
};

/* Start-up: <workers> stats slots per counter array and epoch slots. */
int pool_global_init(unsigned workers);
void pool_global_deinit(void);
unsigned pool_workers(void); /* any thread */

/*
 * Create pool <cp>: members UP at full weight (no slow start at boot, as
 * HAProxy), its access log opened, first snapshot built and published,
 * pool registered. <boot> false makes every member ramp from 0 when the
 * pool has a slow start (chashd itself passes true for pools added by
 * reload too: a new pool has no traffic to protect). 0, or -1 with a
 * message in <err> ("pool web: access_log: cannot open PATH: why").
 */
int pool_create(const struct conf_pool *cp, bool boot, struct pool **out,
                char *err, size_t errlen);

/*
 * Apply a reloaded config <cp> to <p> (same name): its access log opened
 * afresh (the same path too: a reload follows a rotation; snapshots still
 * in use keep the old file until they are freed), settings replaced,
 * members diffed by name -- kept (weight updated in place, state and
 * counters kept), added (ramping when slow_start is set), removed (out of
 * the ring; established connections stay) -- and one new snapshot
 * published. A member whose address changed is removed and added again.
 * The listen address is the caller's business. 0 or -1 (<err>); an access
 * log that cannot be opened fails before anything changes.
 */
int pool_reconfigure(struct pool *p, const struct conf_pool *cp, char *err,
                     size_t errlen);

/* Unregister <p> (reload dropped it): retires its snapshot, marks its
 * members REMOVED, drops the registry's ref. */
void pool_remove(struct pool *p);

/* Registry (control thread). */
struct pool *pool_find(const char *name);
size_t pool_count(void);
struct pool *pool_at(size_t i);

/*
 * What the control plane hears from the pools below it: hooks registered
 * once at start (health_init, control/health.c), each may be NULL (unit
 * tests). The one way up from the data path and the model.
 */
struct pool_hooks {
    /* worker: a member of <p> failed <fails> connects or requests in a
     * row (health ejects it at the pool's server_failure_limit) */
    void (*member_failing)(struct pool *p, uint32_t fails);
    /* control thread: <s> leaves its pool or goes to maint: cancel what
     * is in flight for it (a health probe) */
    void (*member_leaving)(struct server *s);
};
void pool_set_hooks(const struct pool_hooks *h);

/* Worker: member <s> of <p> failed once more (a connect, a connection
 * with requests on it, a request the member answered wrongly): its run
 * of failures grows, and the hook hears of it. Returns the run. */
uint32_t pool_member_failed(struct pool *p, struct server *s);

/* References (any thread). The last unref frees. */
void pool_ref(struct pool *p);
void pool_unref(struct pool *p);
void server_ref(struct server *s);
void server_unref(struct server *s);

/* The member named <name> of <p>, or NULL. */
struct server *pool_server_find(const struct pool *p, const char *name);
/* A server of <cp> that <p> has (not removed) under the same name at
 * another address, its current self in *<was>; NULL when none moves. */
const struct conf_server *pool_member_moved(const struct pool *p,
                                            const struct conf_pool *cp,
                                            const struct server **was);

/*
 * Publishing. Every change below marks the pool changed and schedules a
 * rebuild of its snapshot on the builder thread (builder.h): a ring of
 * millions of points takes a second to build, and the control thread must
 * not stall health checks, ramps and the API for it. Changes made while a
 * build runs are folded into the next build; snapshots are published in
 * order. Workers see a change once its snapshot is published (health
 * states, which pool_choose() reads live, at once).
 */

/* Mark <p> changed: a new snapshot will be built and published. */
void pool_schedule(struct pool *p);
/* Several changes that must reach the workers in one snapshot: between
 * pool_batch(p, true) and pool_batch(p, false) no build starts. */
void pool_batch(struct pool *p, bool on);

/*
 * Call <cb>(<p>, <chg>, <arg>) on the control thread once every change
 * made to <p> so far is published (at once when it already is). <chg>
 * describes the publication that made it live. If the pool is removed
 * first, or the build fails (out of memory), <cb> gets <chg> NULL. Returns 0,
 * or -1 (ENOMEM: <cb> is not called).
 */
int pool_on_published(struct pool *p,
                      void (*cb)(struct pool *p, const struct pool_change *chg,
                                 void *arg),
                      void *arg);

/* Build and publish <p>'s snapshot here and now, on the control thread
 * (start-up, pool removal, tests). 0 or -1. */
int pool_rebuild(struct pool *p, struct pool_change *chg);

/*
 * Runtime changes (membership.c calls them: it checks, reports and logs).
 * Each applies the change and schedules its publication. Nothing is
 * logged here. 0, or -1 with errno: ENOENT (no such member), EEXIST (name
 * or address taken), EINVAL (bad argument), ENOMEM.
 *
 * A weight raised while the pool has a slow_start ramps from the old
 * weight to the new one over slow_start, like an added member: keys only
 * move onto the member, gradually. A lowered weight applies at once.
 */
int pool_member_add(struct pool *p, const struct conf_server *cs);
/* <name>'s ramp (if it ramps) began <age_ms> ago, not now: an etcd
 * change's time stamp, so that every instance ramps alike. */
void pool_member_ramp_age(struct pool *p, const char *name, uint64_t age_ms);
int pool_member_remove(struct pool *p, const char *name);
int pool_member_set_weight(struct pool *p, const char *name, uint32_t weight);
/* <admin>: enum state_admin (up, drain, maint). */
int pool_member_set_admin(struct pool *p, const char *name, int admin);

/*
 * Health (membership_health() calls it): move <s> to <health> for
 * <reason>. Coming back up starts a slow-start ramp when the pool has one.
 * Returns 1 when the health changed (its publication is scheduled), 0
 * when <s> already had it or left its pool.
 */
int server_set_health(struct server *s, int health, const char *reason);

/*
 * Advance slow-start ramps of all pools at <now_ms> (control tick). For
 * each member whose ramp completes, <done>(<p>, <s>, <arg>) is called
 * once the change is scheduled (pool_on_published tells when it is live).
 */
void pool_tick(uint64_t now_ms,
               void (*done)(struct pool *p, struct server *s, void *arg),
               void *arg);

/* Usable for a new connection (any thread). */
static inline bool
server_usable(const struct server *s)
{
    return atomic_load_explicit((_Atomic int *)&s->state,
                                memory_order_relaxed) == SERVER_UP;
}

/* "up", "down", "ejected", "draining", "maint", "removed" ("unknown"). */
const char *server_state_name(int state);
/* "up", "down", "ejected" ("unknown"). */
const char *server_health_name(int health);

/*
 * Epochs (QSBR). A worker calls pool_epoch_enter() after each epoll_wait
 * returns and before it touches any snapshot, and pool_epoch_quiesce()
 * before it blocks again; it holds no snapshot pointer across. The control
 * thread frees retired snapshots in pool_reclaim() once every worker is
 * quiescent or has entered an epoch later than the retirement.
 */
void pool_epoch_enter(unsigned worker);
void pool_epoch_quiesce(unsigned worker);
void pool_reclaim(void);
size_t pool_retired_count(void); /* snapshots waiting to be freed */

/* The current snapshot of <p> (worker, inside an epoch section). */
static inline struct pool_snapshot *
pool_snapshot(struct pool *p)
{
    /* seq_cst, not acquire: a worker that marked itself (seq_cst store in
     * pool_epoch_enter) must not load the pointer before that mark is
     * visible, or the control thread could free what it loads (store-load
     * order; acquire allows the reordering on POWER and RCpc ARM). A plain
     * load on x86. */
    return atomic_load(&p->snap);
}

/* The ring of <snap>'s routing view: where new connections go now (a
 * draining, down or ejected member owns nothing of it; a ramping one its
 * ramp). NULL when no member takes new keys. Control thread. */
const struct chash_ring *
pool_snapshot_routing(const struct pool_snapshot *snap);

/* Member <name>'s share of <snap>'s routing view (0 when not in it). */
double pool_snapshot_routing_share(const struct pool_snapshot *snap,
                                   const char *name);

/* The member owning <key> (<len> bytes; its hash tag's part hashed) in
 * <snap>'s ring, fail-over aside; NULL when it has no ring. Any thread
 * that holds <snap>. */
struct server *pool_snapshot_owner(const struct pool_snapshot *snap,
                                   const char *key, size_t len);
/* The same, for a key whose ring hash in snapshot <by> is <hash>: not
 * hashed again when both snapshots hash keys alike (the same hash
 * function and hash tag: a migration's old placement and its new one). */
struct server *pool_snapshot_owner_of(const struct pool_snapshot *snap,
                                      const struct pool_snapshot *by,
                                      const char *key, size_t len,
                                      uint64_t hash);

/* The exact share and the points member <s> owns in <snap>'s ring; 0 when
 * <snap> is NULL, has no ring, or <s> is not in it. Any thread that holds
 * <snap> (a worker in an epoch section, or the control thread). */
double pool_snapshot_share(const struct pool_snapshot *snap,
                           const struct server *s);
size_t pool_snapshot_points(const struct pool_snapshot *snap,
                            const struct server *s);

/*
 * A snapshot of <p> with members <m> (<n>: names of members of <p>, their
 * weights), never published: the placement a migration resumed after a
 * restart moves keys from. Pinned once, freed at its last unpin. NULL
 * with a reason in <err>. Control thread.
 */
struct pool_snapshot *pool_snapshot_of(struct pool *p,
                                       const struct chash_member *m, size_t n,
                                       char *err, size_t errlen);

/* Keep <snap> alive past its retirement (control thread), until unpinned. */
void pool_snapshot_pin(struct pool_snapshot *snap);
void pool_snapshot_unpin(struct pool_snapshot *snap);

/*
 * The one walk of a key's preference order, every router's (pool_choose
 * here; the store modes' request_key_member): <fn>(<ctx>, member, its
 * index in <snap>'s members, its position in the order) for the members
 * of <hash>'s order in <snap> from position <from> (0: the owner), until
 * it returns true; that member, or NULL. The first 16 come from one
 * chash_ring_lookup_n; the rest of the order only when they were all
 * passed over. Any thread.
 */
/* The members of <hash>'s replica set in <snap> (a key's copies live
 * there; the first is its primary): the first `replicas` (at least 1) of
 * its preference order, their indexes into <idx> (room for REPLICAS_MAX);
 * how many. Any thread. */
size_t pool_replica_set(const struct pool_snapshot *snap, uint64_t hash,
                        size_t *idx);

typedef bool pool_walk_fn(void *ctx, struct server *s, size_t idx,
                          size_t pos);
struct server *pool_walk(const struct pool_snapshot *snap, uint64_t hash,
                         size_t from, pool_walk_fn *fn, void *ctx);

/*
 * Pick the member for key hash <hash> in <snap> (worker): preference order
 * from chash_ring_lookup_n, skipping members not usable and those whose
 * id is in <tried>[0..<ntried>) (connects that already failed); with a
 * balance_factor, the first whose active+1 stays within
 * ceil(factor * (total+1) * points_i / usable_points), total being the
 * pool's active_backends (the cap formula of chash_ring_lookup_bounded
 * over usable members); if every usable member is over its cap, the first
 * usable one. With on_failure error, an unusable or failed owner refuses.
 * Returns the member (no ref taken) with one live connection taken on it
 * (its `active` +1, under the cap atomically: the caller drops it when
 * that connection ends), or NULL; *<decision> says why.
 */
struct server *pool_choose(struct pool *p, const struct pool_snapshot *snap,
                           uint64_t hash, const uint64_t *tried, size_t ntried,
                           int *decision);

#endif /* CHASHD_POOL_H */

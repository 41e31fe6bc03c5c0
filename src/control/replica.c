/* replica.c -- the control side of replication (replica.h): what each
 * member is behind on (its log), the fill's views, and the repairer: a
 * thread per pool that finds the keys to repair -- the members' logs, a
 * member compared whole, every key after chashd starts, the keys of a
 * placement change -- and hands each to the key's home worker, which
 * repairs it between two of the key's requests (request_rep.c).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/replica.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chash/chash.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/stats.h"
#include "base/u64set.h"
#include "conf/conf.h"
#include "data/request.h"
#include "loop/control.h"
#include "loop/rconn.h"
#include "model/pool.h"

/* A member that could not be reached is tried again after this. */
#define RETRY_MS 1000
/* How often each member's identity is checked by the repairer (a restart
 * with no traffic; the workers check at every connect). */
#define PROBE_MS 1000
/* Repairs on their way at once, per pool. */
#define REPAIR_WINDOW 256
/* How long a pass waits for its repairs, and a fill for its barrier. */
#define REPAIR_WAIT_MS 30000
/* Keys a pass remembers having repaired (each is listed by every member
 * holding it): beyond, a key may be repaired twice (harmless). */
#define SEEN_MAX (4u << 20)

/* ---- the repairer (a thread per pool, one pass at a time) ---------------- */

/* The repairs a pass handed to the workers, and what came of them. Shared
 * by the pass and the repairs' <done>, which may run after the pass gave
 * up (chashd stops): the last one frees it. */
struct batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;        /* (the lock's) the pass, and each repair on its way */
    size_t inflight; /* (the lock's) */
    size_t failed, undecided;
};

/* Keys a pass has handed out already, by 64-bit hash (a collision makes a
 * key skipped in this pass, repaired in the next one it is noted in; the
 * whole comparisons never clear what they skipped): beyond SEEN_MAX, a key
 * may be handed out twice (harmless). */

/* A member compared whole in this pass, from the log's generation when
 * the pass began. */
struct whole {
    struct server *s; /* (ref held) */
    uint64_t gen;
};

/* A member's noted keys, copied for this pass. */
struct jlog {
    struct server *s; /* (ref held) */
    char *keys;       /* packed */
    size_t len;
};

struct repairer {
    struct pool *pool; /* (ref held) */
    pthread_t thread;
    bool running;      /* a pass was started and not joined */
    _Atomic bool done; /* (atomic) the pass is over */
    _Atomic bool stop; /* (atomic) exit: leave the pass */
    uint64_t probe_ms; /* the last identity check */
    uint64_t next_ms;  /* no pass before (the last one failed) */
    /* the pass */
    struct pool_snapshot *snap; /* (pinned) */
    bool probe;                 /* check identities first */
    bool settle;                /* members have connections to settle */
    struct jlog *logs;
    size_t nlogs;
    struct whole *whole;
    size_t nwhole;
    bool verify;   /* compare every key (chashd started) */
    bool verified; /* ...and every one agrees now */
    bool verifying_now; /* the repairs handed out are such comparisons */
    bool verify_logged; /* (said once per start) */
    bool failed;   /* something was left for later */
    /* Which members hold the current copies (the snapshot's view), and
     * whether this pass fills (members joined sets), its result. */
    const struct replica_view *view;
    bool filling;
    bool fill_failed;        /* a key could not be filled: leavers kept */
    _Atomic bool fill_abort; /* (atomic) a newer placement came: the
                                fill is moot, left (not failed) */
    bool fill_done;
    uint64_t fill_ms; /* the last fill pass began (failed ones wait) */
    /* the pass's members: the snapshot's, then those of the view's
     * placements that left (a fill reads and cleans them); a connection
     * each, to list keys, ask identities, settle */
    struct server **who;
    size_t nwho;
    struct rconn *conns; /* [nwho] */
    struct batch *batch;
    struct u64set seen;
};

static struct repairer **repairers;
static size_t nrepairers;
static const struct replica_engine *engine; /* replica_init's */

static bool
is_memcache(const struct repairer *rp)
{
    return rp->snap->set.mode == CONF_MODE_MEMCACHE;
}

/* The connection to the pass's member <i> (rp->who), opened on first
 * use; NULL when it cannot be. */
static struct rconn *
conn_of(struct repairer *rp, size_t i)
{
    struct rconn *c = &rp->conns[i];
    const struct pool_settings *set = &rp->snap->set;
    char err[256];

    if (c->fd >= 0)
        return c;
    if (rc_open(c, &rp->who[i]->addr, set->connect_timeout_ms,
                is_memcache(rp) ? NULL : set->redis_auth,
                is_memcache(rp) ? -1 : set->redis_db, err, sizeof(err)) < 0) {
        log_debug("pool %s: repair: %s", rp->pool->name, err);
        return NULL;
    }
    return c;
}

/* The ring hash of <key> (a reload keeps the hash: the same in every
 * placement of a view). */
static uint64_t
key_hash(const struct pool_snapshot *snap, const char *key, size_t klen)
{
    size_t off, tl = chash_key_tag(key, klen, snap->set.hash_tag, &off);

    return chash_ring_hash(snap->ring, key + off, tl);
}

/* The members of the set of a key of ring hash <h> in <snap>, as
 * snapshot indexes; their number. */
static size_t
set_of(const struct pool_snapshot *snap, uint64_t h, size_t *idx)
{
    return pool_replica_set(snap, h, idx);
}

/* The position of member <s> (by address: one server, one connection)
 * in rp->who, SIZE_MAX when not there. */
static size_t
pos_of(const struct repairer *rp, const struct server *s)
{
    for (size_t i = 0; i < rp->nwho; i++)
        if (rp->who[i] == s || conf_addr_equal(&rp->who[i]->addr, &s->addr))
            return i;
    return SIZE_MAX;
}

/* ---- handing repairs out ------------------------------------------------- */

static void
batch_unref_locked(struct batch *b)
{
    bool last = --b->refs == 0;

    pthread_mutex_unlock(&b->lock);
    if (last) {
        pthread_mutex_destroy(&b->lock);
        pthread_cond_destroy(&b->cond);
        free(b);
    }
}

static struct batch *
batch_new(void)
{
    struct batch *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->refs = 1;
    return b;
}

static void
repair_free(struct request_repair *r)
{
    for (size_t i = 0; i < r->nholders; i++)
        server_unref(r->holders[i]);
    for (size_t i = 0; i < r->nleavers; i++)
        server_unref(r->leavers[i]);
    free(r->holders);
    free(r->leavers);
    pool_unref(r->pool);
    free(r->key);
    free(r);
}

/* A repair is over (a worker's thread, or the stopping one). */
static void
repair_done(struct request_repair *r)
{
    struct batch *b = r->arg;
    struct replica_stats *st = &r->pool->rstats;

    atomic_fetch_add(&st->repairs, r->written + r->deleted);
    atomic_fetch_add(&st->cleaned, r->deleted);
    if (r->divergent)
        atomic_fetch_add(&st->divergences, 1);
    if (r->result != REPAIR_OK)
        atomic_fetch_add(&st->repair_errors, 1);
    if (r->result == REPAIR_UNDECIDED)
        log_warn_limited(10,
                         "pool %s: key '%.*s': its members' copies disagree "
                         "and no copy has a majority: it is read and written "
                         "by nobody until its members can say",
                         r->pool->name, (int)(r->klen > 64 ? 64 : r->klen),
                         r->key);
    pthread_mutex_lock(&b->lock);
    b->inflight--;
    b->failed += r->result == REPAIR_FAILED;
    b->undecided += r->result == REPAIR_UNDECIDED;
    pthread_cond_broadcast(&b->cond);
    batch_unref_locked(b);
    repair_free(r);
}

/* Wait, bounded, until at most <max> repairs are on their way. False
 * when the wait was given up (stop, or too long). */
static bool
batch_wait(struct repairer *rp, size_t max)
{
    struct batch *b = rp->batch;
    uint64_t until = clock_ms() + REPAIR_WAIT_MS;
    bool ok = true;

    pthread_mutex_lock(&b->lock);
    while (b->inflight > max) {
        struct timespec ts;

        if (atomic_load(&rp->stop) || clock_ms() >= until) {
            ok = false;
            break;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&b->cond, &b->lock, &ts);
    }
    pthread_mutex_unlock(&b->lock);
    return ok;
}

/* Whether the pass's repairs all came back right (and resets the count
 * for the next step). */
static bool
batch_clean(struct repairer *rp)
{
    struct batch *b = rp->batch;
    bool clean;

    pthread_mutex_lock(&b->lock);
    clean = b->failed == 0 && b->undecided == 0;
    b->failed = b->undecided = 0;
    pthread_mutex_unlock(&b->lock);
    return clean;
}


/*
 * Hand the repair of <key> to its home worker: with <holders> (<nh>) to
 * read when no member of its set holds its current copy, and <leaver>
 * (or NULL) to delete it from. Waits while REPAIR_WINDOW are on their
 * way. Skips a key handed out already in this step (by <seen>).
 */
static void
submit(struct repairer *rp, const char *key, size_t klen,
       struct server *const *holders, size_t nh, struct server *leaver)
{
    struct request_repair *r;
    uint64_t h = key_hash(rp->snap, key, klen);

    if (atomic_load(&rp->stop) ||
        u64set_put(&rp->seen,
                   (chash_hash(CHASH_HASH_XXH3, key, klen) ^
                    (uint64_t)(uintptr_t)leaver) |
                       1,
                   SEEN_MAX) == 0)
        return;
    if (!batch_wait(rp, REPAIR_WINDOW - 1)) {
        rp->failed = true;
        return;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL || (r->key = malloc(klen ? klen : 1)) == NULL ||
        (nh > 0 && (r->holders = calloc(nh, sizeof(*holders))) == NULL) ||
        (leaver != NULL && (r->leavers = calloc(1, sizeof(leaver))) == NULL)) {
        if (r != NULL) {
            free(r->key);
            free(r->holders);
        }
        free(r);
        rp->failed = true;
        return;
    }
    memcpy(r->key, key, klen);
    r->klen = klen;
    r->hash = h;
    r->pool = rp->pool;
    pool_ref(r->pool);
    for (size_t i = 0; i < nh; i++) {
        r->holders[i] = holders[i];
        server_ref(holders[i]);
    }
    r->nholders = nh;
    if (leaver != NULL) {
        r->leavers[0] = leaver;
        server_ref(leaver);
        r->nleavers = 1;
    }
    r->verify = rp->verifying_now;
    r->done = repair_done;
    r->arg = rp->batch;
    pthread_mutex_lock(&rp->batch->lock);
    rp->batch->inflight++;
    rp->batch->refs++;
    pthread_mutex_unlock(&rp->batch->lock);
    engine->submit(r);
}

/* Wait for every repair handed out; whether they all came back right. */
static bool
drain(struct repairer *rp)
{
    bool ok = batch_wait(rp, 0);

    u64set_clear(&rp->seen);
    return batch_clean(rp) && ok;
}

/* ---- listing a member's keys --------------------------------------------- */

/* What to do with each key a member holds. */
typedef void key_fn(struct repairer *rp, void *ctx, size_t member,
                    const char *key, size_t len);

/* redis: SCAN the job's member <i>, <fn> on each key. 0, or -1. */
static int
scan_member(struct repairer *rp, size_t i, key_fn *fn, void *ctx)
{
    char cursor[32] = "0";

    do {
        const char *argv[] = {"SCAN", cursor, "COUNT", "500"};
        struct rconn *c = conn_of(rp, i);
        struct rval v;

        if (c == NULL || rc_cmd(c, 4, argv, NULL) < 0 || rc_call(c, &v) < 0) {
            if (c != NULL)
                rc_close(c);
            return -1;
        }
        if (v.type != '*' || v.n != 2 || v.el[0].type != '$' ||
            v.el[1].type != '*') {
            rval_free(&v);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", v.el[0].s);
        for (size_t k = 0; k < v.el[1].n && !atomic_load(&rp->stop); k++) {
            const struct rval *key = &v.el[1].el[k];

            if (key->type == '$')
                fn(rp, ctx, i, key->s, key->len);
        }
        rval_free(&v);
    } while (strcmp(cursor, "0") != 0 && !atomic_load(&rp->stop));
    return 0;
}

/* memcached: the keys of the job's member <i> (lru_crawler metadump,
 * URL-encoded), <fn> on each. 0, or -1. */
static int
dump_member(struct repairer *rp, size_t i, key_fn *fn, void *ctx)
{
    struct rconn *c = conn_of(rp, i);
    const char *line;
    size_t len;
    char key[251];
    struct {
        char *d; /* each key: its length (a byte), its bytes */
        size_t len, cap;
    } keys = {0};

    if (c == NULL || rc_put(c, "lru_crawler metadump all\r\n", 26) < 0 ||
        rc_flush(c) < 0)
        return -1;
    /* the keys first (the dump holds the connection), then <fn> */
    for (;;) {
        size_t k = 0;

        if (rc_line(c, &line, &len) < 0) {
            rc_close(c);
            free(keys.d);
            return -1;
        }
        if (len >= 3 && memcmp(line, "END", 3) == 0)
            break;
        if (len >= 5 && memcmp(line, "ERROR", 5) == 0) {
            free(keys.d);
            return -1; /* a memcached without the crawler */
        }
        if (len < 4 || memcmp(line, "key=", 4) != 0)
            continue;
        for (size_t q = 4;
             q < len && line[q] != ' ' && line[q] != '\r' && k < sizeof(key);
             q++) {
            if (line[q] == '%' && q + 2 < len) {
                char hex[3] = {line[q + 1], line[q + 2], 0};
                key[k++] = (char)strtoul(hex, NULL, 16);
                q += 2;
            } else {
                key[k++] = line[q];
            }
        }
        if (keys.len + k + 1 > keys.cap) {
            size_t cap = keys.cap ? keys.cap * 2 : 4096;
            char *d;

            while (cap < keys.len + k + 1)
                cap *= 2;
            if ((d = realloc(keys.d, cap)) == NULL) {
                free(keys.d);
                rc_close(c);
                return -1;
            }
            keys.d = d;
            keys.cap = cap;
        }
        keys.d[keys.len++] = (char)k;
        memcpy(keys.d + keys.len, key, k);
        keys.len += k;
    }
    for (size_t q = 0; q < keys.len && !atomic_load(&rp->stop);) {
        size_t k = (unsigned char)keys.d[q];

        fn(rp, ctx, i, keys.d + q + 1, k);
        q += 1 + k;
    }
    free(keys.d);
    return 0;
}


static int
list_keys(struct repairer *rp, size_t i, key_fn *fn, void *ctx)
{
    return is_memcache(rp) ? dump_member(rp, i, fn, ctx)
                           : scan_member(rp, i, fn, ctx);
}

/* ---- identities and settling --------------------------------------------- */

/* The identity of member <i> (redis: run_id; memcached: pid and start
 * time) into <out>; 0, or -1. */
static int
identity(struct repairer *rp, size_t i, char *out, size_t cap)
{
    struct rconn *c = conn_of(rp, i);
    const char *line;
    size_t len;

    if (c == NULL)
        return -1;
    if (!is_memcache(rp)) {
        const char *argv[] = {"INFO", "server"};
        struct rval v;
        const char *p;

        if (rc_cmd(c, 2, argv, NULL) < 0 || rc_call(c, &v) < 0) {
            rc_close(c);
            return -1;
        }
        p = v.type == '$' ? strstr(v.s, "run_id:") : NULL;
        if (p != NULL)
            snprintf(out, cap, "%.40s", p + 7);
        rval_free(&v);
        return p != NULL ? 0 : -1;
    }
    {
        long long pid = -1, uptime = -1, now = -1;

        if (rc_put(c, "stats\r\n", 7) < 0 || rc_flush(c) < 0) {
            rc_close(c);
            return -1;
        }
        for (;;) {
            if (rc_line(c, &line, &len) < 0) {
                rc_close(c);
                return -1;
            }
            if (len >= 3 && memcmp(line, "END", 3) == 0)
                break;
            if (len > 9 && memcmp(line, "STAT pid ", 9) == 0)
                pid = strtoll(line + 9, NULL, 10);
            else if (len > 12 && memcmp(line, "STAT uptime ", 12) == 0)
                uptime = strtoll(line + 12, NULL, 10);
            else if (len > 10 && memcmp(line, "STAT time ", 10) == 0)
                now = strtoll(line + 10, NULL, 10);
        }
        /* the start time, to 10 s: a clock step does not look like a
         * restart, a new process (new pid) does */
        snprintf(out, cap, "%lld@%lld", pid, (now - uptime) / 10);
        return pid >= 0 ? 0 : -1;
    }
}


/* Check every member's identity: one that restarted (it answers with a
 * new one) has lost what it did not persist: it is behind on every key
 * and compared whole. The workers check at every connect; this finds a
 * restart no request has seen yet. */
static void
check_identities(struct repairer *rp)
{
    for (size_t i = 0; i < rp->snap->n; i++) {
        struct server *s = rp->snap->servers[i];
        char id[64];

        if (!server_usable(s) || identity(rp, i, id, sizeof(id)) < 0)
            continue;
        if (replica_identity(s, id) > 0)
            log_warn("pool %s: member %s restarted (a new %s): it is behind "
                     "on every key until it is compared with the others",
                     rp->pool->name, s->name,
                     is_memcache(rp) ? "pid" : "run_id");
    }
}

/*
 * The connections of member <i> we reset with requests on them: the
 * member must not run what they carried after a repair. Redis: CLIENT
 * KILL ADDR drops it (what it had not run yet never runs). memcached has
 * no such command: its `stats conns` must no longer list the connection
 * (it ran, or dropped, all of it). Settled ones are forgotten; the others
 * wait for the next pass.
 */
static void
settle_member(struct repairer *rp, size_t i)
{
    struct server *s = rp->who[i];
    char(*addrs)[64] = NULL;
    size_t n = replica_unsettled_list(s, &addrs);
    struct rconn *c = n > 0 ? conn_of(rp, i) : NULL;

    if (c == NULL) {
        free(addrs);
        return;
    }
    if (!is_memcache(rp)) {
        for (size_t k = 0; k < n; k++) {
            const char *argv[] = {"CLIENT", "KILL", "ADDR", addrs[k], "SKIPME",
                                  "yes"};
            struct rval v;

            if (rc_cmd(c, 6, argv, NULL) < 0 || rc_call(c, &v) < 0) {
                rc_close(c);
                break;
            }
            if (v.type != ':')
                log_warn("pool %s: member %s refuses CLIENT KILL (%s): the "
                         "connection %s we reset may still run writes after "
                         "its keys are repaired",
                         rp->pool->name, s->name, v.s != NULL ? v.s : "?",
                         addrs[k]);
            else
                log_info("pool %s: member %s dropped the connection %s we "
                         "reset (%lld): its keys are repaired now",
                         rp->pool->name, s->name, addrs[k], v.i);
            replica_settled_one(s, addrs[k]);
            rval_free(&v);
        }
        free(addrs);
        return;
    }
    {
        /* memcached: "STAT <fd>:addr tcp:<ip>:<port>" per connection */
        char *listing = NULL;
        size_t len = 0, cap = 0;
        const char *line;
        size_t ll;
        bool ok = rc_put(c, "stats conns\r\n", 13) == 0 && rc_flush(c) == 0;

        while (ok) {
            if (rc_line(c, &line, &ll) < 0) {
                rc_close(c);
                ok = false;
                break;
            }
            if (ll >= 3 && memcmp(line, "END", 3) == 0)
                break;
            if (len + ll + 1 > cap) {
                size_t ncap = cap ? cap * 2 : 4096;
                char *nl;

                while (ncap < len + ll + 1)
                    ncap *= 2;
                if ((nl = realloc(listing, ncap)) == NULL) {
                    ok = false;
                    break;
                }
                listing = nl;
                cap = ncap;
            }
            memcpy(listing + len, line, ll);
            len += ll;
            listing[len] = 0;
        }
        for (size_t k = 0; ok && k < n; k++) {
            char probe[80];

            snprintf(probe, sizeof(probe), ":%s\r", addrs[k]);
            if (listing != NULL && strstr(listing, probe) != NULL)
                continue; /* still there: the next pass looks again */
            log_info("pool %s: member %s no longer holds the connection %s we "
                     "reset: its keys are repaired now",
                     rp->pool->name, s->name, addrs[k]);
            replica_settled_one(s, addrs[k]);
        }
        free(listing);
        free(addrs);
    }
}

/* ---- the passes ---------------------------------------------------------- */

/* The keys noted on the members. */
static bool
repair_logs(struct repairer *rp)
{
    for (size_t j = 0; j < rp->nlogs && !atomic_load(&rp->stop); j++) {
        const struct jlog *jl = &rp->logs[j];
        size_t off = 0;

        while (off + sizeof(uint32_t) <= jl->len) {
            uint32_t len;

            memcpy(&len, jl->keys + off, sizeof(len));
            off += sizeof(len);
            if (len > jl->len - off)
                break;
            submit(rp, jl->keys + off, len, NULL, 0, NULL);
            off += len;
        }
    }
    return drain(rp);
}

/* compare's: every key (the start's verification), or those whose set
 * holds a member compared whole. */
static void
compare_key(struct repairer *rp, void *ctx, size_t member, const char *key,
            size_t len)
{
    size_t idx[REPLICAS_MAX], n;

    (void)ctx;
    (void)member;
    if (rp->verify || rp->snap->ring == NULL) {
        submit(rp, key, len, NULL, 0, NULL);
        return;
    }
    n = set_of(rp->snap, key_hash(rp->snap, key, len), idx);
    for (size_t i = 0; i < n; i++)
        for (size_t w = 0; w < rp->nwhole; w++)
            if (rp->snap->servers[idx[i]] == rp->whole[w].s) {
                submit(rp, key, len, NULL, 0, NULL);
                return;
            }
}

/*
 * Compare every key of the members compared whole (and, after chashd
 * started, every key): each member's keys are listed and each key is
 * repaired by its home. A member compared whole is current again once
 * every key came back right; the pool's start is verified once that holds
 * with every member up.
 */
static bool
compare(struct repairer *rp)
{
    bool ok = true, all_up = true;

    for (size_t w = 0; w < rp->nwhole; w++) {
        atomic_fetch_add(&rp->pool->rstats.full_compares, 1);
        log_info("pool %s: member %s: comparing every key it holds a copy of "
                 "with the other members",
                 rp->pool->name, rp->whole[w].s->name);
    }
    if (rp->verify && !rp->verify_logged) {
        rp->verify_logged = true;
        log_info("pool %s: comparing every key's copies (chashd started: "
                 "writes may have been on their way when it stopped, or "
                 "replicas was raised); meanwhile the first request of each "
                 "key waits for its key's comparison",
                 rp->pool->name);
    }
    rp->verifying_now = rp->verify;
    for (size_t i = 0; i < rp->snap->n && !atomic_load(&rp->stop); i++) {
        if (!server_usable(rp->snap->servers[i])) {
            all_up = false;
            continue; /* its keys are on the other members of their sets */
        }
        if (list_keys(rp, i, compare_key, NULL) < 0)
            ok = false;
    }
    ok = drain(rp) && ok && !rp->failed && !atomic_load(&rp->stop);
    rp->verifying_now = false;
    if (!ok)
        return false;
    for (size_t w = 0; w < rp->nwhole; w++) {
        replica_whole_done(rp->whole[w].s, rp->whole[w].gen);
        log_info("pool %s: member %s was compared whole: it holds current "
                 "copies again",
                 rp->pool->name, rp->whole[w].s->name);
    }
    rp->verified = rp->verify && all_up;
    return true;
}

/* Whether a member of <key>'s set does not hold its current copy. */
static bool
joined(const struct repairer *rp, uint64_t h)
{
    size_t idx[REPLICAS_MAX], n;

    if (rp->snap->ring == NULL)
        return false;
    n = set_of(rp->snap, h, idx);
    for (size_t i = 0; i < n; i++)
        if (!replica_current(rp->view, h, rp->snap->servers[idx[i]]))
            return true;
    return false;
}

/* The fill's: a key with a member that joined its set is repaired, the
 * members of its set in the filled placement voting for it when none of
 * its set holds a current copy. */
static void
fill_key(struct repairer *rp, void *ctx, size_t member, const char *key,
         size_t len)
{
    const struct pool_snapshot *b = rp->view->base;
    size_t idx[REPLICAS_MAX], n = 0;
    struct server *holders[REPLICAS_MAX];
    uint64_t h;

    (void)ctx;
    (void)member;
    if (atomic_load(&rp->fill_abort) || rp->snap->ring == NULL)
        return;
    h = key_hash(rp->snap, key, len);
    if (!joined(rp, h))
        return;
    if (b->ring != NULL)
        n = set_of(b, h, idx);
    for (size_t i = 0; i < n; i++)
        holders[i] = b->servers[idx[i]];
    submit(rp, key, len, holders, n, NULL);
}

/* The cleaning's: a copy on a member that left the key's set (it was in
 * it in a placement of the view) goes. */
static void
clean_key(struct repairer *rp, void *ctx, size_t member, const char *key,
          size_t len)
{
    const struct replica_view *v = rp->view;
    struct server *s = rp->who[member];
    size_t idx[REPLICAS_MAX], n;
    uint64_t h;
    bool was = false;

    (void)ctx;
    if (rp->snap->ring == NULL || atomic_load(&rp->fill_abort))
        return;
    h = key_hash(rp->snap, key, len);
    n = set_of(rp->snap, h, idx);
    for (size_t i = 0; i < n; i++)
        if (conf_addr_equal(&rp->snap->servers[idx[i]]->addr, &s->addr))
            return; /* its own */
    for (size_t p = 0; p <= v->nsince && !was; p++) {
        const struct pool_snapshot *ps = p == 0 ? v->base : v->since[p - 1];

        n = set_of(ps, h, idx);
        for (size_t i = 0; i < n && !was; i++)
            was = conf_addr_equal(&ps->servers[idx[i]]->addr, &s->addr);
    }
    if (was)
        submit(rp, key, len, NULL, 0, s);
}

/*
 * Fill the placement of the pass's snapshot. First a barrier over the
 * workers: every request routed by an older placement has been answered,
 * so a key one of them created is on a member that is listed. Then every
 * key of every member (those that left included) is repaired where a
 * member joined its set; then, when every key made it, the copies on
 * members that left a key's set are deleted. A fill with failures keeps
 * those copies and is done again later (the members being filled serve
 * no read of a key before).
 */
static void
fill(struct repairer *rp)
{
    struct request_barrier *b = engine->barrier_start(rp->pool);
    uint64_t until = clock_ms() + REPAIR_WAIT_MS;
    struct timespec pause = {0, 5 * 1000 * 1000};

    log_info("pool %s: filling the members that joined replica sets",
             rp->pool->name);
    while (b != NULL && !engine->barrier_passed(b) &&
           !atomic_load(&rp->stop) && clock_ms() < until)
        nanosleep(&pause, NULL);
    if (b == NULL || !engine->barrier_passed(b)) {
        engine->barrier_unref(b);
        rp->fill_failed = true;
        return;
    }
    engine->barrier_unref(b);
    for (size_t i = 0; i < rp->nwho && !atomic_load(&rp->stop) &&
                       !atomic_load(&rp->fill_abort);
         i++)
        if (list_keys(rp, i, fill_key, NULL) < 0) {
            if (i < rp->snap->n && server_usable(rp->who[i]))
                rp->fill_failed = true; /* a member that is up: again */
            else
                log_warn("pool %s: member %s could not be read for the "
                         "fill: its copies were not used",
                         rp->pool->name, rp->who[i]->name);
        }
    if (!drain(rp))
        rp->fill_failed = true;
    if (rp->fill_failed || atomic_load(&rp->stop) ||
        atomic_load(&rp->fill_abort))
        return;
    for (size_t i = 0; i < rp->nwho && !atomic_load(&rp->stop) &&
                       !atomic_load(&rp->fill_abort);
         i++)
        if (list_keys(rp, i, clean_key, NULL) < 0 && i < rp->snap->n &&
            server_usable(rp->who[i]))
            rp->fill_failed = true;
    if (!drain(rp))
        rp->fill_failed = true;
    rp->fill_done = !rp->fill_failed && !atomic_load(&rp->stop) &&
                    !atomic_load(&rp->fill_abort);
}

static void *
repairer_main(void *arg)
{
    struct repairer *rp = arg;

    if (rp->probe)
        check_identities(rp);
    for (size_t i = 0; rp->settle && i < rp->nwho; i++)
        if (server_usable(rp->who[i]) && !replica_settled(rp->who[i]))
            settle_member(rp, i);
    if (rp->nlogs > 0 && !atomic_load(&rp->stop) && !repair_logs(rp))
        rp->failed = true;
    if ((rp->verify || rp->nwhole > 0) && !atomic_load(&rp->stop) &&
        !compare(rp))
        rp->failed = true;
    if (rp->filling && !atomic_load(&rp->stop))
        fill(rp);
    for (size_t i = 0; i < rp->nwho; i++)
        rc_free(&rp->conns[i]);
    u64set_clear(&rp->seen);
    atomic_store(&rp->done, true);
    return NULL;
}

/* ---- the control thread's side ------------------------------------------- */

static void
job_free(struct repairer *rp)
{
    for (size_t j = 0; j < rp->nlogs; j++) {
        server_unref(rp->logs[j].s);
        free(rp->logs[j].keys);
    }
    free(rp->logs);
    rp->logs = NULL;
    rp->nlogs = 0;
    for (size_t j = 0; j < rp->nwhole; j++)
        server_unref(rp->whole[j].s);
    free(rp->whole);
    rp->whole = NULL;
    rp->nwhole = 0;
    free(rp->conns);
    rp->conns = NULL;
    free(rp->who);
    rp->who = NULL;
    rp->nwho = 0;
    rp->view = NULL;
    rp->filling = rp->verify = rp->verified = rp->failed = false;
    rp->probe = rp->settle = false;
    if (rp->batch != NULL) {
        pthread_mutex_lock(&rp->batch->lock);
        batch_unref_locked(rp->batch);
        rp->batch = NULL;
    }
    if (rp->snap != NULL)
        pool_snapshot_unpin(rp->snap);
    rp->snap = NULL;
}

/* The fill of the pass's snapshot is done: its placement is the base of
 * the views from here on, with the placements published after it. */
static void
filled(struct repairer *rp)
{
    struct pool *p = rp->pool;
    struct replica_view *v = p->fill_view, *nv;
    size_t after = 0;

    /* the placements published after the filled one stay in the view */
    while (v != NULL && after < v->nsince &&
           v->since[after]->version <= rp->snap->version)
        after++;
    nv = replica_view_new(rp->snap, v != NULL ? v->since + after : NULL,
                  v != NULL ? v->nsince - after : 0);
    if (nv == NULL)
        return; /* filled again later */
    replica_view_unref(p->fill_view);
    p->fill_view = nv;
    atomic_fetch_add(&p->rstats.fills, 1);
    log_info("pool %s: every member holds the keys of its replica sets "
             "(%" PRIu64 " copies made, %" PRIu64 " cleaned so far)",
             p->name, atomic_load(&p->rstats.repairs),
             atomic_load(&p->rstats.cleaned));
    pool_schedule(p);
}

/* The pass is over: join, take its results. */
static void
job_end(struct repairer *rp, uint64_t now)
{
    pthread_join(rp->thread, NULL);
    rp->running = false;
    if (atomic_load(&rp->fill_abort))
        rp->fill_failed = false; /* moot, not failed: the next one now */
    if (rp->filling && rp->fill_done && !rp->pool->removed &&
        rp->pool->cfg.replicas > 1)
        filled(rp);
    if (rp->verified &&
        atomic_exchange(&rp->pool->rstats.verifying, false))
        log_info("pool %s: every key's copies were compared since chashd "
                 "started",
                 rp->pool->name);
    if (rp->failed || (rp->filling && rp->fill_failed))
        rp->next_ms = now + RETRY_MS;
    job_free(rp);
}

/* Add the members of <s> not in rp->who yet. */
static void
who_add(struct repairer *rp, const struct pool_snapshot *s)
{
    for (size_t j = 0; j < s->n; j++)
        if (pos_of(rp, s->servers[j]) == SIZE_MAX)
            rp->who[rp->nwho++] = s->servers[j];
}

/* The pass's members (rp->who): <snap>'s (at their snapshot indexes),
 * then those of its view's placements not in it (members that left),
 * each with a connection. 0 or -1 (out of memory). */
static int
job_members(struct repairer *rp, const struct pool_snapshot *snap)
{
    const struct replica_view *v = snap->fill;
    size_t cap = snap->n + 1;

    if (v != NULL) {
        cap += v->base->n;
        for (size_t i = 0; i < v->nsince; i++)
            cap += v->since[i]->n;
    }
    rp->who = calloc(cap, sizeof(*rp->who));
    rp->conns = calloc(cap, sizeof(*rp->conns));
    if (rp->who == NULL || rp->conns == NULL)
        return -1;
    for (size_t i = 0; i < snap->n; i++)
        rp->who[rp->nwho++] = snap->servers[i];
    if (v != NULL) {
        who_add(rp, v->base);
        for (size_t i = 0; i < v->nsince; i++)
            who_add(rp, v->since[i]);
    }
    for (size_t i = 0; i < cap; i++)
        rp->conns[i].fd = -1;
    return 0;
}

/* What member <s> is behind on, taken into the pass. 0, or -1 when out
 * of memory. */
static int
job_take(struct repairer *rp, struct server *s)
{
    char *keys;
    size_t len;
    bool whole;
    uint64_t gen = replica_gen(s);

    replica_log_keys(s, &keys, &len, &whole);
    if (!replica_settled(s))
        rp->settle = true;
    if (whole) {
        struct whole *w = realloc(rp->whole, (rp->nwhole + 1) * sizeof(*w));

        free(keys);
        if (w == NULL)
            return -1;
        rp->whole = w;
        w[rp->nwhole].s = s;
        w[rp->nwhole++].gen = gen;
        server_ref(s);
    } else if (keys != NULL) {
        struct jlog *l = realloc(rp->logs, (rp->nlogs + 1) * sizeof(*l));

        if (l == NULL) {
            free(keys);
            return -1;
        }
        rp->logs = l;
        l[rp->nlogs].s = s;
        l[rp->nlogs].keys = keys;
        l[rp->nlogs++].len = len;
        server_ref(s);
    }
    return 0;
}

/* Start a pass for <rp>'s pool when it has work (or a probe is due). */
static void
job_start(struct repairer *rp, uint64_t now)
{
    struct pool *p = rp->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    bool fill = false, probe = now >= rp->probe_ms + PROBE_MS;
    bool work = false;

    if (now < rp->next_ms && !probe)
        return;
    rp->verify = now >= rp->next_ms && atomic_load(&p->rstats.verifying);
    for (size_t i = 0; i < snap->n && now >= rp->next_ms; i++) {
        struct server *s = snap->servers[i];

        if (replica_readable(s) || !server_usable(s))
            continue; /* nothing to do, or its keys wait for it */
        if (job_take(rp, s) < 0) {
            job_free(rp);
            return;
        }
    }
    /* a placement not filled yet (a failed fill waits a while) */
    if (snap->fill != NULL && !snap->fill_same &&
        !(p->fill_view != NULL && p->fill_view->nsince == 0 &&
          replica_same_placement(p->fill_view->base, snap)) &&
        now >= rp->fill_ms + (rp->fill_failed ? 10 * RETRY_MS : 0)) {
        fill = true;
        rp->fill_ms = now;
    }
    work = probe || rp->verify || rp->nlogs > 0 || rp->nwhole > 0 ||
           rp->settle || fill;
    if (!work || (rp->batch = batch_new()) == NULL ||
        job_members(rp, snap) < 0) {
        job_free(rp);
        return;
    }
    rp->view = snap->fill;
    rp->filling = fill;
    atomic_store(&rp->fill_abort, false);
    rp->fill_done = false;
    if (fill)
        rp->fill_failed = false;
    pool_snapshot_pin(snap);
    rp->snap = snap;
    rp->probe = probe;
    if (probe)
        rp->probe_ms = now;
    atomic_store(&rp->done, false);
    if (pthread_create(&rp->thread, NULL, repairer_main, rp) != 0) {
        log_warn("pool %s: cannot start the repairer thread", p->name);
        job_free(rp);
        return;
    }
    rp->running = true;
}

int
replica_reload_check(const struct pool *p, const struct conf_pool *cp,
                     char *err, size_t errlen)
{
    const struct conf_pool *was = &p->cfg;
    const struct server *s;
    const struct conf_server *cs;

    if (was->replicas <= 1 || cp->replicas <= 1)
        return 0;
    if (conf_pool_hashing_differs(was, cp)) {
        snprintf(err, errlen,
                 "pool %s: a reload may not change its hash, distribution, "
                 "points, hash_tag, redis_db or zones: with replicas that "
                 "would move copies (start a new pool; a member changes "
                 "zone by a remove and an add)",
                 p->name);
        return -1;
    }
    if ((cs = pool_member_moved(p, cp, &s)) != NULL) {
        snprintf(err, errlen,
                 "pool %s: member %s moves from %s to %s: its copies would "
                 "be lost; add the new address under a new name",
                 p->name, cs->name, s->addr.text, cs->addr.text);
        return -1;
    }
    return 0;
}

static struct repairer *
repairer_of(struct pool *p)
{
    struct repairer **r, *rp;

    for (size_t i = 0; i < nrepairers; i++)
        if (repairers[i]->pool == p)
            return repairers[i];
    if ((rp = calloc(1, sizeof(*rp))) == NULL)
        return NULL;
    r = realloc(repairers, (nrepairers + 1) * sizeof(*r));
    if (r == NULL) {
        free(rp);
        return NULL;
    }
    repairers = r;
    rp->pool = p;
    pool_ref(p);
    repairers[nrepairers++] = rp;
    return rp;
}

static void
repairer_free(size_t i)
{
    struct repairer *rp = repairers[i];

    if (rp->running) {
        atomic_store(&rp->stop, true);
        job_end(rp, clock_ms());
    }
    pool_unref(rp->pool);
    free(rp);
    repairers[i] = repairers[--nrepairers];
}

static void
replica_tick(uint64_t now, void *arg)
{
    (void)arg;
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        struct repairer *rp;

        if (p->cfg.replicas <= 1 || p->removed) {
            replica_view_unref(p->fill_view);
            p->fill_view = NULL;
            continue;
        }
        rp = repairer_of(p);
        if (rp == NULL)
            continue;
        if (rp->running && rp->filling &&
            !replica_same_placement(pool_snapshot(p), rp->snap))
            atomic_store(&rp->fill_abort, true);
        if (rp->running && atomic_load(&rp->done))
            job_end(rp, now);
        if (!rp->running)
            job_start(rp, now);
    }
    /* pools gone, or no longer replicated */
    for (size_t i = 0; i < nrepairers;) {
        struct pool *p = repairers[i]->pool;

        if ((p->removed || p->cfg.replicas <= 1) && !repairers[i]->running)
            repairer_free(i);
        else
            i++;
    }
}

int
replica_init(const struct replica_engine *e)
{
    engine = e;
    return control_tick_add(replica_tick, NULL);
}

void
replica_deinit(void)
{
    while (nrepairers > 0)
        repairer_free(nrepairers - 1);
    for (size_t i = 0; i < pool_count(); i++) {
        replica_view_unref(pool_at(i)->fill_view);
        pool_at(i)->fill_view = NULL;
    }
    free(repairers);
    repairers = NULL;
}

/* ---- reporting ----------------------------------------------------------- */

/* A per-member gauge of the replicated pools: <readable>, else the keys
 * pending. */
static void
member_gauge(FILE *f, const char *name, const char *help, bool readable)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t j = 0; p->cfg.replicas > 1 && j < p->nservers; j++) {
            struct server *s = p->servers[j];

            fprintf(f, "%s{pool=\"", name);
            stats_label_escape(f, p->name);
            fprintf(f, "\",member=\"");
            stats_label_escape(f, s->name);
            fprintf(f, "\"} %zu\n",
                    readable ? (size_t)replica_readable(s)
                             : replica_pending(s));
        }
    }
}

void
replica_metrics(FILE *f)
{
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } fam[] = {
        {"chashd_replication_divergences_total", "counter",
         "Requests whose members answered differently (their keys are "
         "repaired).",
         offsetof(struct replica_stats, divergences)},
        {"chashd_replication_repairs_total", "counter",
         "Copies written or deleted by the repairer.",
         offsetof(struct replica_stats, repairs)},
        {"chashd_replication_repair_errors_total", "counter",
         "Keys the repairer could not repair yet (tried again).",
         offsetof(struct replica_stats, repair_errors)},
        {"chashd_replication_write_failures_total", "counter",
         "Writes refused because write_quorum members did not acknowledge "
         "them.",
         offsetof(struct replica_stats, write_failures)},
        {"chashd_replication_partial_writes_total", "counter",
         "Writes acknowledged while a member of the set missed them (it is "
         "repaired).",
         offsetof(struct replica_stats, partial_writes)},
        {"chashd_replication_read_failures_total", "counter",
         "Reads refused: no quorum agreed, or no member could answer.",
         offsetof(struct replica_stats, read_failures)},
        {"chashd_replication_full_compares_total", "counter",
         "Members compared whole (their log overflowed, or they restarted).",
         offsetof(struct replica_stats, full_compares)},
        {"chashd_replication_fills_total", "counter",
         "Placement changes after which every member that joined a key's "
         "replica set was filled with it.",
         offsetof(struct replica_stats, fills)},
        {"chashd_replication_cleaned_total", "counter",
         "Copies deleted from members that left a key's replica set.",
         offsetof(struct replica_stats, cleaned)},
    };
    bool any = false;

    for (size_t i = 0; i < pool_count(); i++)
        any |= pool_at(i)->cfg.replicas > 1;
    if (!any)
        return;
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam[k].name, fam[k].help,
                fam[k].name, fam[k].type);
        for (size_t i = 0; i < pool_count(); i++) {
            struct pool *p = pool_at(i);
            _Atomic uint64_t *v =
                (_Atomic uint64_t *)((char *)&p->rstats + fam[k].off);

            if (p->cfg.replicas <= 1)
                continue;
            fprintf(f, "%s{pool=\"", fam[k].name);
            stats_label_escape(f, p->name);
            fprintf(f, "\"} %" PRIu64 "\n", atomic_load(v));
        }
    }
    member_gauge(f, "chashd_replication_pending_keys",
                 "Keys noted for repair on a member (hinted writes pending).",
                 false);
    member_gauge(f, "chashd_replication_readable",
                 "1 when a member serves reads (0: it has keys to repair).",
                 true);
}

json_t *
replica_json(struct pool *p)
{
    const struct replica_stats *st = &p->rstats;
    json_t *members, *o, *rest;

    if (p->cfg.replicas <= 1)
        return NULL;
    members = json_array();
    for (size_t j = 0; j < p->nservers; j++) {
        struct server *s = p->servers[j];
        bool overflow;

        pthread_mutex_lock(&s->rlog.lock);
        overflow = s->rlog.whole;
        pthread_mutex_unlock(&s->rlog.lock);
        json_array_append_new(
            members,
            json_pack("{s:s, s:b, s:I, s:b}", "name", s->name, "readable",
                      replica_readable(s), "pending_keys",
                      (json_int_t)replica_pending(s), "overflow", overflow));
    }
    {
        const struct pool_snapshot *snap = pool_snapshot(p);
        bool filling = snap != NULL && snap->fill != NULL && !snap->fill_same &&
                       (p->fill_view == NULL || p->fill_view->base != snap);

        o = json_pack("{s:b, s:b, s:I, s:I}", "filling", filling,
                      "verifying", atomic_load(&st->verifying), "fills",
                      (json_int_t)atomic_load(&st->fills), "cleaned",
                      (json_int_t)atomic_load(&st->cleaned));
    }
    rest = json_pack(
        "{s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}",
        "replicas", (json_int_t)p->cfg.replicas, "write_quorum",
        (json_int_t)p->cfg.write_quorum, "read_policy",
        conf_read_policy_name(p->cfg.read_policy), "read_quorum",
        (json_int_t)p->cfg.read_quorum, "repair_log",
        (json_int_t)p->cfg.repair_log, "divergences",
        (json_int_t)atomic_load(&st->divergences), "repairs",
        (json_int_t)atomic_load(&st->repairs), "repair_errors",
        (json_int_t)atomic_load(&st->repair_errors), "write_failures",
        (json_int_t)atomic_load(&st->write_failures), "partial_writes",
        (json_int_t)atomic_load(&st->partial_writes), "read_failures",
        (json_int_t)atomic_load(&st->read_failures), "full_compares",
        (json_int_t)atomic_load(&st->full_compares), "members", members);
    json_object_update_missing(o, rest);
    json_decref(rest);
    return o;
}

/* replica.c -- the repair side of replication (replica.h): the members'
 * logs of keys to repair, the repairer threads, their counters.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "replica.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chash/chash.h"
#include "clock.h"
#include "conf.h"
#include "control.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "rconn.h"

/* A member that could not be reached is tried again after this. */
#define RETRY_MS 1000
/* How often each member's identity is checked (a restart); and while a
 * member waits to serve reads again. */
#define PROBE_MS 1000
#define PROBE_WAIT_MS 100
/* Rounds of reading a key's copies before it is left for later. */
#define REPAIR_TRIES 5
/* Between the two reads of a key's copies (a write on its way shows as a
 * copy that changed). */
#define SETTLE_NS (5 * 1000 * 1000)

/* ---- the logs (any thread) ----------------------------------------------- */

void
replica_log_init(struct replica_log *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
}

static void
keys_free(char **keys, size_t cap)
{
    for (size_t i = 0; i < cap; i++)
        free(keys[i]);
    free(keys);
}

void
replica_log_deinit(struct replica_log *l)
{
    keys_free(l->keys, l->cap);
    pthread_mutex_destroy(&l->lock);
}

/* Put the packed key <p> in <keys> (<cap> slots, a power of two); false
 * when it is there already. */
static bool
slot_put(char **keys, size_t cap, char *p)
{
    uint32_t len;
    size_t i;

    memcpy(&len, p, sizeof(len));
    i = (size_t)chash_hash(CHASH_HASH_XXH3, p + sizeof(len), len) & (cap - 1);
    while (keys[i] != NULL) {
        uint32_t have;

        memcpy(&have, keys[i], sizeof(have));
        if (have == len &&
            memcmp(keys[i] + sizeof(len), p + sizeof(len), len) == 0)
            return false;
        i = (i + 1) & (cap - 1);
    }
    keys[i] = p;
    return true;
}

void
replica_note(struct server *s, const char *key, size_t len, size_t cap,
             bool missed)
{
    struct replica_log *l = &s->rlog;
    uint32_t n = (uint32_t)len;
    char *p;

    pthread_mutex_lock(&l->lock);
    atomic_fetch_add(&l->gen, 1);
    if (missed)
        atomic_store(&l->dirty, true);
    if (l->overflow)
        goto out; /* compared whole anyway */
    if (l->n >= cap) {
        /* more than the log holds: the member is compared whole */
        keys_free(l->keys, l->cap);
        l->keys = NULL;
        l->cap = l->n = 0;
        l->overflow = true;
        atomic_store(&l->dirty, true);
        goto out;
    }
    if ((l->n + 1) * 2 > l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        char **nk = calloc(ncap, sizeof(*nk));

        if (nk == NULL)
            goto lost;
        for (size_t i = 0; i < l->cap; i++)
            if (l->keys[i] != NULL)
                slot_put(nk, ncap, l->keys[i]);
        free(l->keys);
        l->keys = nk;
        l->cap = ncap;
    }
    if ((p = malloc(sizeof(n) + len)) == NULL)
        goto lost;
    memcpy(p, &n, sizeof(n));
    memcpy(p + sizeof(n), key, len);
    if (slot_put(l->keys, l->cap, p))
        l->n++;
    else
        free(p);
out:
    pthread_mutex_unlock(&l->lock);
    return;
lost:
    /* out of memory: a key forgotten would never be repaired */
    l->overflow = true;
    atomic_store(&l->dirty, true);
    pthread_mutex_unlock(&l->lock);
}

bool
replica_readable(const struct server *s)
{
    return !atomic_load_explicit((_Atomic bool *)&s->rlog.dirty,
                                 memory_order_relaxed);
}

size_t
replica_pending(struct server *s)
{
    size_t n;

    pthread_mutex_lock(&s->rlog.lock);
    n = s->rlog.n + atomic_load(&s->rlog.taken);
    pthread_mutex_unlock(&s->rlog.lock);
    return n;
}

/* ---- the fill's views ---------------------------------------------------- */

/* Whether <a> and <b> place keys alike (the same members, in the same
 * ring). */
static bool
same_placement(const struct pool_snapshot *a, const struct pool_snapshot *b)
{
    if (a == b)
        return true;
    if (a->ring == NULL || b->ring == NULL)
        return a->ring == b->ring;
    if (a->n != b->n || a->set.replicas != b->set.replicas ||
        chash_ring_checksum(a->ring) != chash_ring_checksum(b->ring))
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->servers[i] != b->servers[i])
            return false;
    return true;
}

void
replica_view_unref(struct replica_view *v)
{
    if (v == NULL || --v->refs > 0)
        return;
    pool_snapshot_unpin(v->base);
    for (size_t i = 0; i < v->nsince; i++)
        pool_snapshot_unpin(v->since[i]);
    free(v->since);
    free(v);
}

/* A view of base <base> and the placements <since> (<n>), pinned. */
static struct replica_view *
view_new(struct pool_snapshot *base, struct pool_snapshot *const *since,
         size_t n)
{
    struct replica_view *v = calloc(1, sizeof(*v));

    if (v == NULL ||
        (n > 0 && (v->since = calloc(n, sizeof(*since))) == NULL)) {
        free(v);
        return NULL;
    }
    v->refs = 1;
    v->base = base;
    pool_snapshot_pin(base);
    for (size_t i = 0; i < n; i++) {
        v->since[i] = since[i];
        pool_snapshot_pin(since[i]);
    }
    v->nsince = n;
    return v;
}

int
replica_fill_view(struct pool *p, struct replica_view **out)
{
    struct pool_snapshot *cur = atomic_load(&p->snap);
    struct replica_view *v = p->fill_view;

    *out = NULL;
    if (p->cfg.replicas <= 1) {
        replica_view_unref(v);
        p->fill_view = NULL;
        return 0;
    }
    if (v == NULL && cur != NULL) {
        /* the placement running now holds the keys (a pool that starts,
         * or turns replication on) */
        if ((v = view_new(cur, NULL, 0)) == NULL)
            return -1;
        p->fill_view = v;
    } else if (v != NULL && cur != NULL &&
               !same_placement(cur,
                               v->nsince ? v->since[v->nsince - 1] : v->base)) {
        /* a placement that was published: writes went to its sets */
        struct pool_snapshot **since = calloc(v->nsince + 1, sizeof(*since));
        struct replica_view *nv;

        if (since == NULL)
            return -1;
        memcpy(since, v->since, v->nsince * sizeof(*since));
        since[v->nsince] = cur;
        nv = view_new(v->base, since, v->nsince + 1);
        free(since);
        if (nv == NULL)
            return -1;
        replica_view_unref(v);
        p->fill_view = v = nv;
    }
    if (v != NULL)
        v->refs++;
    *out = v;
    return 0;
}

bool
replica_fill_same(const struct pool_snapshot *snap)
{
    const struct replica_view *v = snap->fill;

    if (v == NULL)
        return true;
    return v->nsince == 0 &&
           (v->base->ring == NULL || same_placement(v->base, snap));
}

/* Whether member <s> is in the set of a key of ring hash <hash> in
 * <snap>: by identity (workers: a member removed and added again under
 * its name is a new one, filled again), or, <by_addr>, by address (the
 * repairer: a server that left under one identity and came back under
 * another is still the same copies). */
static bool
in_set_hash(const struct pool_snapshot *snap, uint64_t hash,
            const struct server *s, bool by_addr)
{
    size_t idx[REPLICAS_MAX], n;

    if (snap->ring == NULL)
        return false;
    n = chash_ring_lookup_n(snap->ring, hash, idx, snap->set.replicas);
    for (size_t i = 0; i < n; i++) {
        const struct server *m = snap->servers[idx[i]];

        if (m == s || (by_addr && conf_addr_equal(&m->addr, &s->addr)))
            return true;
    }
    return false;
}

bool
replica_current(const struct replica_view *v, uint64_t hash,
                const struct server *s)
{
    if (v->base->ring == NULL)
        return true; /* nothing was placed: nothing to hold */
    if (!in_set_hash(v->base, hash, s, false))
        return false;
    for (size_t i = 0; i < v->nsince; i++)
        if (!in_set_hash(v->since[i], hash, s, false))
            return false;
    return true;
}

/* ---- the repairer (a thread per pool, one job at a time) ----------------- */

/* What a member knows of its own identity: a new one is a restart. */
struct ident {
    uint64_t server; /* server->id */
    char id[64];
};

/* A member in a job. */
struct jmember {
    struct server *s; /* (ref held) */
    char **keys;      /* packed keys taken from its log */
    size_t nkeys;
    bool full; /* compare it whole (its log overflowed) */
    /* results (the thread's) */
    bool unreachable; /* could not be reached: tried again later */
    bool failed;      /* a key could not be repaired (noted again) */
};

struct repairer {
    struct pool *pool; /* (ref held) */
    pthread_t thread;
    bool running;      /* a job was started and not joined */
    _Atomic bool done; /* (atomic) the job is over */
    _Atomic bool stop; /* (atomic) exit: leave the job */
    uint64_t probe_ms; /* the last identity check */
    /* the job */
    struct pool_snapshot *snap; /* (pinned) */
    struct jmember *jm;
    size_t njm;
    bool probe; /* check identities first */
    /* Which members hold the current copies (the snapshot's view), and
     * whether this job fills (members joined sets), its result. */
    const struct replica_view *view;
    bool filling;
    bool fill_failed;        /* a key could not be filled: leavers kept */
    _Atomic bool fill_abort; /* (atomic) a newer placement came: the
                                fill is moot, left (not failed) */
    bool fill_done;
    uint64_t fill_ms; /* the last fill pass began (failed ones wait) */
    /* the job's members: the snapshot's, then those of the view's
     * placements that left (a fill reads and cleans them); a connection
     * each */
    struct server **who;
    size_t nwho;
    struct rconn *conns; /* [nwho] */
    /* the thread's own, kept across jobs */
    struct ident *ids;
    size_t nids;
};

static struct repairer **repairers;
static size_t nrepairers;

/* ---- talking to members -------------------------------------------------- */

static bool
is_memcache(const struct repairer *rp)
{
    return rp->snap->set.mode == CONF_MODE_MEMCACHE;
}

/* The connection to the job's member <i> (rp->who), opened on first
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

/* One member's copy of a key: absent, or its value (redis: DUMP's payload;
 * memcache: the flags then the data) and time to live in ms (-1: none). */
struct copy {
    bool read; /* the member answered */
    bool present;
    char *val;
    size_t len;
    long long ttl_ms;
};

static void
copy_free(struct copy *c)
{
    free(c->val);
    memset(c, 0, sizeof(*c));
}

static int
redis_read(struct rconn *c, const char *key, size_t klen, struct copy *out)
{
    const char *dump[] = {"DUMP", key}, *pttl[] = {"PTTL", key};
    size_t dl[] = {4, klen}, pl[] = {4, klen};
    struct rval v, t;

    if (rc_cmd(c, 2, dump, dl) < 0 || rc_cmd(c, 2, pttl, pl) < 0 ||
        rc_flush(c) < 0 || rc_reply(c, &v) < 0)
        return -1;
    if (rc_reply(c, &t) < 0) {
        rval_free(&v);
        return -1;
    }
    if (v.type == '-' || t.type != ':') {
        rval_free(&v);
        rval_free(&t);
        return -1;
    }
    out->read = true;
    out->present = v.type == '$';
    out->val = v.s;
    out->len = v.len;
    v.s = NULL;
    out->ttl_ms = t.i;
    rval_free(&v);
    rval_free(&t);
    return 0;
}

/* Write <w> (absent: delete) to a member. 0 or -1. */
static int
redis_write(struct rconn *c, const char *key, size_t klen, const struct copy *w)
{
    struct rval v;
    int rc;

    if (!w->present) {
        const char *del[] = {"DEL", key};
        size_t l[] = {3, klen};

        rc = rc_cmd(c, 2, del, l);
    } else {
        char ttl[32];
        const char *rs[] = {"RESTORE", key, ttl, w->val, "REPLACE"};
        size_t l[] = {7, klen, 0, w->len, 7};

        snprintf(ttl, sizeof(ttl), "%lld", w->ttl_ms > 0 ? w->ttl_ms : 0);
        l[2] = strlen(ttl);
        rc = rc_cmd(c, 5, rs, l);
    }
    if (rc < 0 || rc_call(c, &v) < 0)
        return -1;
    rc = v.type == '-' ? -1 : 0;
    rval_free(&v);
    return rc;
}

/* memcached: mg <key> v f t -> VA <n> f<flags> t<ttl> / EN. */
static int
mc_read(struct rconn *c, const char *key, size_t klen, struct copy *out)
{
    const char *line;
    size_t len, n;
    unsigned long long flags = 0;
    long long ttl = -1;
    char *p;

    if (rc_put(c, "mg ", 3) < 0 || rc_put(c, key, klen) < 0 ||
        rc_put(c, " v f t\r\n", 8) < 0 || rc_flush(c) < 0 ||
        rc_line(c, &line, &len) < 0)
        return -1;
    out->read = true;
    if (len >= 2 && memcmp(line, "EN", 2) == 0)
        return 0;
    if (len < 4 || memcmp(line, "VA ", 3) != 0)
        return -1;
    n = strtoull(line + 3, &p, 10);
    while (p < line + len && *p != '\r') {
        if (*p == 'f')
            flags = strtoull(p + 1, &p, 10);
        else if (*p == 't')
            ttl = strtoll(p + 1, &p, 10);
        else
            p++;
    }
    /* the value: the flags first (a part of what must be equal) */
    out->val = malloc(24 + n + 2);
    if (out->val == NULL)
        return -1;
    out->len = (size_t)snprintf(out->val, 24, "%llu ", flags);
    if (rc_bytes(c, out->val + out->len, n + 2) < 0)
        return -1;
    out->len += n;
    out->present = true;
    out->ttl_ms = ttl < 0 ? -1 : ttl * 1000;
    return 0;
}

static int
mc_write(struct rconn *c, const char *key, size_t klen, const struct copy *w)
{
    char head[96];
    const char *line, *sp;
    size_t len;

    if (!w->present) {
        if (rc_put(c, "md ", 3) < 0 || rc_put(c, key, klen) < 0 ||
            rc_put(c, "\r\n", 2) < 0)
            return -1;
    } else {
        unsigned long long flags = strtoull(w->val, NULL, 10);
        size_t n;

        sp = memchr(w->val, ' ', w->len);
        if (sp == NULL)
            return -1;
        n = w->len - (size_t)(sp + 1 - w->val);
        snprintf(head, sizeof(head), " %zu F%llu T%lld\r\n", n, flags,
                 w->ttl_ms > 0 ? (w->ttl_ms + 999) / 1000 : 0);
        if (rc_put(c, "ms ", 3) < 0 || rc_put(c, key, klen) < 0 ||
            rc_put(c, head, strlen(head)) < 0 || rc_put(c, sp + 1, n) < 0 ||
            rc_put(c, "\r\n", 2) < 0)
            return -1;
    }
    if (rc_flush(c) < 0 || rc_line(c, &line, &len) < 0)
        return -1;
    return len >= 2 &&
                   (memcmp(line, "HD", 2) == 0 || memcmp(line, "NF", 2) == 0)
               ? 0
               : -1;
}

static int
read_copy(struct repairer *rp, struct rconn *c, const char *key, size_t klen,
          struct copy *out)
{
    int rc = is_memcache(rp) ? mc_read(c, key, klen, out)
                             : redis_read(c, key, klen, out);

    if (rc < 0) {
        copy_free(out);
        rc_close(c);
    }
    return rc;
}

static int
write_copy(struct repairer *rp, struct rconn *c, const char *key, size_t klen,
           const struct copy *w)
{
    int rc = is_memcache(rp) ? mc_write(c, key, klen, w)
                             : redis_write(c, key, klen, w);

    if (rc < 0)
        rc_close(c);
    return rc;
}

static bool
copy_same(const struct copy *a, const struct copy *b)
{
    return a->present == b->present &&
           (!a->present ||
            (a->len == b->len && memcmp(a->val, b->val, a->len) == 0));
}

/* ---- repairing a key ----------------------------------------------------- */

/* Where a key lives for a repair: the members of its set (and, in a
 * fill, the members it left), positions in rp->who. */
struct kset {
    size_t n;
    size_t pos[2 * REPLICAS_MAX];
    bool voter[2 * REPLICAS_MAX];    /* its copy counts */
    bool writable[2 * REPLICAS_MAX]; /* in the key's set: repaired */
};

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
    if (snap->ring == NULL)
        return 0;
    return chash_ring_lookup_n(snap->ring, h, idx, snap->set.replicas);
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

/*
 * <key>'s members. Voters: the members of its set that serve reads
 * (nothing to repair) and hold its current copy (replica_current: not
 * being filled); when none does, the members that held it in the view's
 * base placement (read, never written); when none of those serves
 * reads either, every member of the set.
 */
static void
kset_of(const struct repairer *rp, const char *key, size_t klen,
        struct kset *ks)
{
    size_t idx[REPLICAS_MAX], n;
    uint64_t h;
    bool any = false;

    ks->n = 0;
    if (rp->snap->ring == NULL)
        return;
    h = key_hash(rp->snap, key, klen);
    n = set_of(rp->snap, h, idx);
    for (size_t i = 0; i < n; i++) {
        struct server *s = rp->who[idx[i]];

        ks->pos[ks->n] = idx[i];
        ks->writable[ks->n] = true;
        ks->voter[ks->n] =
            replica_readable(s) &&
            (rp->view == NULL || replica_current(rp->view, h, s));
        any |= ks->voter[ks->n];
        ks->n++;
    }
    if (!any && rp->view != NULL && rp->view->base->ring != NULL) {
        const struct pool_snapshot *b = rp->view->base;
        size_t bidx[REPLICAS_MAX], bn = set_of(b, h, bidx);

        for (size_t j = 0; j < bn; j++) {
            size_t p = pos_of(rp, b->servers[bidx[j]]);
            bool in = p == SIZE_MAX;

            for (size_t i = 0; i < n && !in; i++)
                in = idx[i] == p;
            if (in)
                continue;
            ks->pos[ks->n] = p;
            ks->writable[ks->n] = false;
            ks->voter[ks->n] = replica_readable(rp->who[p]);
            any |= ks->voter[ks->n];
            ks->n++;
        }
    }
    if (!any)
        for (size_t i = 0; i < ks->n; i++)
            ks->voter[i] = true;
}

/* Read every member of <ks> into <cp>: 0, or -1 with *<who> the member
 * (a position in rp->who) that could not be read. */
static int
read_all(struct repairer *rp, const char *key, size_t klen,
         const struct kset *ks, struct copy *cp, size_t *who)
{
    for (size_t i = 0; i < ks->n; i++) {
        struct server *s = rp->who[ks->pos[i]];
        struct rconn *c = server_usable(s) || !ks->writable[i]
                              ? conn_of(rp, ks->pos[i])
                              : NULL;

        if (c == NULL || read_copy(rp, c, key, klen, &cp[i]) < 0) {
            *who = ks->pos[i];
            return -1;
        }
    }
    return 0;
}

/*
 * Make every reachable member of <key>'s replica set hold the value its
 * voters (kset_of) agree on. Before a voter is written, the copies are
 * read twice, a moment apart: a copy that changed in between is a
 * client's write on its way, and the key is left to settle and read
 * again (a repair must never undo a write on a member that serves
 * reads). The value most voters hold wins; among equals, a value over
 * its absence (an acknowledged write is never dropped on a tie), then
 * the first in preference order. It is written on the members that do
 * not serve reads at once, and on a voter only when the voter's copy
 * stayed apart over two reads. 0, or -1 when a member could not be read
 * or written (*<who>: its position in rp->who) or the key never
 * settled.
 */
static int
repair_key(struct repairer *rp, const char *key, size_t klen, size_t *who)
{
    struct copy a[2 * REPLICAS_MAX], b[2 * REPLICAS_MAX];
    struct kset ks;
    int rc = -1;

    kset_of(rp, key, klen, &ks);
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    for (int tries = 0; tries < REPAIR_TRIES; tries++) {
        bool differ = false, moving = false, voters_differ = false;
        int best = -1;
        unsigned bestn = 0;
        struct timespec pause = {0, SETTLE_NS};

        for (size_t i = 0; i < ks.n; i++) {
            copy_free(&a[i]);
            copy_free(&b[i]);
        }
        if (read_all(rp, key, klen, &ks, a, who) < 0)
            goto out;
        for (size_t i = 1; i < ks.n; i++)
            differ |= ks.writable[i] && !copy_same(&a[0], &a[i]);
        if (!differ) {
            rc = 0; /* every copy in the set agrees */
            goto out;
        }
        for (size_t i = 0; i < ks.n; i++) {
            unsigned k = 0;

            if (!ks.voter[i])
                continue;
            for (size_t j = 0; j < ks.n; j++)
                k += ks.voter[j] && copy_same(&a[i], &a[j]);
            if (k > bestn || (k == bestn && a[i].present && !a[best].present)) {
                bestn = k;
                best = (int)i;
            }
        }
        for (size_t i = 0; i < ks.n; i++)
            voters_differ |=
                ks.voter[i] && ks.writable[i] && !copy_same(&a[i], &a[best]);
        if (voters_differ) {
            /* a voter serves reads: it is written only when its copy
             * stays apart (not a client's write on its way) */
            nanosleep(&pause, NULL);
            if (read_all(rp, key, klen, &ks, b, who) < 0)
                goto out;
            for (size_t i = 0; i < ks.n; i++)
                moving |= !copy_same(&a[i], &b[i]);
            if (moving) {
                nanosleep(&pause, NULL);
                continue; /* again, once it landed */
            }
        }
        for (size_t i = 0; i < ks.n; i++) {
            if (!ks.writable[i] || copy_same(&a[i], &a[best]))
                continue;
            if (write_copy(rp, &rp->conns[ks.pos[i]], key, klen, &a[best]) <
                0) {
                *who = ks.pos[i];
                goto out;
            }
            atomic_fetch_add(&rp->pool->rstats.repairs, 1);
        }
        /* read again: every copy must now agree */
    }
    /* never settled: left for later (noted again) */
out:
    for (size_t i = 0; i < ks.n; i++) {
        copy_free(&a[i]);
        copy_free(&b[i]);
    }
    return rc;
}

/* Repair <key>; a failure notes it again on the member that failed (or
 * on <jm>'s member). */
static void
repair_one(struct repairer *rp, struct jmember *jm, const char *key,
           size_t klen)
{
    size_t who = SIZE_MAX;

    if (repair_key(rp, key, klen, &who) == 0)
        return;
    atomic_fetch_add(&rp->pool->rstats.repair_errors, 1);
    if (jm == NULL)
        rp->fill_failed = true;
    if (who != SIZE_MAX && (jm == NULL || rp->who[who] != jm->s)) {
        /* another member of the set is out: the key waits for it there */
        replica_note(rp->who[who], key, klen, rp->snap->set.repair_log, true);
        return;
    }
    if (jm == NULL)
        return; /* the fill again, later */
    jm->failed = true;
    replica_note(jm->s, key, klen, rp->snap->set.repair_log, true);
}

/* ---- comparing a member whole -------------------------------------------- */

/* Whether <s> is in the replica set of <key> in the job's snapshot. */
static bool
in_set(const struct repairer *rp, const char *key, size_t klen,
       const struct server *s)
{
    return rp->snap->ring != NULL &&
           in_set_hash(rp->snap, key_hash(rp->snap, key, klen), s, true);
}

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

/* compare_whole's: a key whose set holds the member (ctx) compared. */
static void
whole_key(struct repairer *rp, void *ctx, size_t member, const char *key,
          size_t len)
{
    struct jmember *jm = ctx;

    (void)member;
    if (in_set(rp, key, len, jm->s))
        repair_one(rp, jm, key, len);
}

/* Compare <jm>'s member whole: every key of every member whose set
 * holds it. */
static void
compare_whole(struct repairer *rp, struct jmember *jm)
{
    atomic_fetch_add(&rp->pool->rstats.full_compares, 1);
    log_info("pool %s: member %s: comparing all its keys with the other "
             "members (its log of keys to repair %s)",
             rp->pool->name, jm->s->name,
             jm->nkeys == 0 ? "overflowed, or it restarted" : "overflowed");
    for (size_t i = 0; i < rp->snap->n && !atomic_load(&rp->stop); i++) {
        if (list_keys(rp, i, whole_key, jm) < 0 &&
            server_usable(rp->snap->servers[i])) {
            /* a member that is up and cannot be listed: again later */
            jm->failed = true;
            replica_note(jm->s, "", 0, 0, true); /* overflow: whole again */
            return;
        }
    }
}

/* ---- the fill ------------------------------------------------------------ */

/* Whether a member of <key>'s set does not hold its current copy. */
static bool
joined(const struct repairer *rp, const char *key, size_t len)
{
    size_t idx[REPLICAS_MAX], n;
    uint64_t h;

    if (rp->snap->ring == NULL)
        return false;
    h = key_hash(rp->snap, key, len);
    n = set_of(rp->snap, h, idx);
    for (size_t i = 0; i < n; i++)
        if (!replica_current(rp->view, h, rp->who[idx[i]]))
            return true;
    return false;
}

static void
fill_key(struct repairer *rp, void *ctx, size_t member, const char *key,
         size_t len)
{
    (void)ctx;
    (void)member;
    if (!atomic_load(&rp->fill_abort) && joined(rp, key, len))
        repair_one(rp, NULL, key, len);
}

/* The cleaning's: a copy on a member that left the key's set (it was in
 * it in a placement of the view) goes. */
static void
clean_key(struct repairer *rp, void *ctx, size_t member, const char *key,
          size_t len)
{
    const struct replica_view *v = rp->view;
    struct server *s = rp->who[member];
    struct copy none = {0};
    uint64_t h;
    bool was;

    (void)ctx;
    if (rp->snap->ring == NULL || atomic_load(&rp->fill_abort))
        return;
    h = key_hash(rp->snap, key, len);
    if (in_set_hash(rp->snap, h, s, true))
        return; /* its own */
    was = in_set_hash(v->base, h, s, true);
    for (size_t i = 0; i < v->nsince && !was; i++)
        was = in_set_hash(v->since[i], h, s, true);
    if (!was)
        return; /* never placed there by us */
    if (write_copy(rp, &rp->conns[member], key, len, &none) == 0)
        atomic_fetch_add(&rp->pool->rstats.cleaned, 1);
}

/*
 * Fill the placement of the job's snapshot: every key of every member
 * (those that left included) goes to the members that joined its set;
 * then, when every key made it, the copies on members that left a key's
 * set are deleted. A fill with failures keeps those copies and is done
 * again later (the failed keys are noted on the members that missed
 * them: those serve no read of them before).
 */
static void
fill(struct repairer *rp)
{
    log_info("pool %s: filling the members that joined replica sets",
             rp->pool->name);
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
    if (rp->fill_failed || atomic_load(&rp->stop) ||
        atomic_load(&rp->fill_abort))
        return;
    for (size_t i = 0; i < rp->nwho && !atomic_load(&rp->stop) &&
                       !atomic_load(&rp->fill_abort);
         i++)
        if (list_keys(rp, i, clean_key, NULL) < 0 && i < rp->snap->n &&
            server_usable(rp->who[i]))
            rp->fill_failed = true;
    rp->fill_done = !rp->fill_failed && !atomic_load(&rp->stop) &&
                    !atomic_load(&rp->fill_abort);
}

/* ---- identities ---------------------------------------------------------- */

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
 * new one) has lost what it did not persist: it stops serving reads and
 * is compared whole (its log marked overflowed). */
static void
check_identities(struct repairer *rp)
{
    for (size_t i = 0; i < rp->snap->n; i++) {
        struct server *s = rp->snap->servers[i];
        char id[64];
        struct ident *known = NULL;

        if (!server_usable(s) || identity(rp, i, id, sizeof(id)) < 0)
            continue;
        for (size_t k = 0; k < rp->nids; k++)
            if (rp->ids[k].server == s->id)
                known = &rp->ids[k];
        if (known == NULL) {
            struct ident *ids = realloc(rp->ids, (rp->nids + 1) * sizeof(*ids));

            if (ids == NULL)
                continue;
            rp->ids = ids;
            known = &ids[rp->nids++];
            known->server = s->id;
            snprintf(known->id, sizeof(known->id), "%s", id);
            continue;
        }
        if (strcmp(known->id, id) == 0)
            continue;
        log_warn("pool %s: member %s restarted (%s): it serves no read until "
                 "it is compared with the others",
                 rp->pool->name, s->name,
                 is_memcache(rp) ? "new pid" : "new run_id");
        snprintf(known->id, sizeof(known->id), "%s", id);
        /* a log over capacity: compared whole */
        replica_note(s, "", 0, 0, true);
    }
}

static void *
repairer_main(void *arg)
{
    struct repairer *rp = arg;

    if (rp->probe)
        check_identities(rp);
    for (size_t j = 0; j < rp->njm && !atomic_load(&rp->stop); j++) {
        struct jmember *jm = &rp->jm[j];
        size_t si = SIZE_MAX;

        for (size_t i = 0; i < rp->snap->n; i++)
            if (rp->snap->servers[i] == jm->s)
                si = i;
        if (si == SIZE_MAX || conn_of(rp, si) == NULL) {
            jm->unreachable = true;
            continue;
        }
        if (jm->full)
            compare_whole(rp, jm);
        for (size_t k = 0; k < jm->nkeys && !atomic_load(&rp->stop); k++) {
            uint32_t len;

            memcpy(&len, jm->keys[k], sizeof(len));
            repair_one(rp, jm, jm->keys[k] + sizeof(len), len);
        }
    }
    if (rp->filling && !atomic_load(&rp->stop))
        fill(rp);
    for (size_t i = 0; i < rp->nwho; i++)
        rc_free(&rp->conns[i]);
    atomic_store(&rp->done, true);
    return NULL;
}

/* ---- the control thread's side ------------------------------------------- */

static void
job_free(struct repairer *rp)
{
    for (size_t j = 0; j < rp->njm; j++) {
        atomic_store(&rp->jm[j].s->rlog.taken, 0);
        for (size_t k = 0; k < rp->jm[j].nkeys; k++)
            free(rp->jm[j].keys[k]);
        free(rp->jm[j].keys);
        server_unref(rp->jm[j].s);
    }
    free(rp->jm);
    rp->jm = NULL;
    rp->njm = 0;
    free(rp->conns);
    rp->conns = NULL;
    free(rp->who);
    rp->who = NULL;
    rp->nwho = 0;
    rp->view = NULL;
    rp->filling = false;
    if (rp->snap != NULL)
        pool_snapshot_unpin(rp->snap);
    rp->snap = NULL;
}

/* Put the keys of job member <jm> back in its member's log. */
static void
put_back(const struct repairer *rp, struct jmember *jm)
{
    atomic_store(&jm->s->rlog.taken, 0);
    for (size_t k = 0; k < jm->nkeys; k++) {
        uint32_t len;

        memcpy(&len, jm->keys[k], sizeof(len));
        replica_note(jm->s, jm->keys[k] + sizeof(len), len,
                     rp->pool->cfg.repair_log, true);
    }
    if (jm->full)
        replica_note(jm->s, "", 0, 0, true); /* compared whole, later */
}

/* A job that could not start: everything goes back. */
static void
give_back(struct repairer *rp, uint64_t now)
{
    for (size_t j = 0; j < rp->njm; j++) {
        put_back(rp, &rp->jm[j]);
        rp->jm[j].s->rlog.retry_ms = now + RETRY_MS;
    }
    job_free(rp);
}

/* The fill of the job's snapshot is done: its placement is the base of
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
    nv = view_new(rp->snap, v != NULL ? v->since + after : NULL,
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

/* The job is over: join, take its results. */
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
    for (size_t j = 0; j < rp->njm; j++) {
        struct jmember *jm = &rp->jm[j];
        struct replica_log *l = &jm->s->rlog;

        if (jm->unreachable) {
            put_back(rp, jm);
            l->retry_ms = now + RETRY_MS;
        } else if (!jm->failed) {
            l->clean_ms = now;
        }
    }
    job_free(rp);
}

/* Take <s>'s log into a job member: false when there is nothing. */
static bool
take_log(struct server *s, struct jmember *jm)
{
    struct replica_log *l = &s->rlog;
    bool any;

    pthread_mutex_lock(&l->lock);
    any = l->n > 0 || l->overflow;
    if (any) {
        jm->s = s;
        server_ref(s);
        jm->full = l->overflow;
        jm->keys = calloc(l->n ? l->n : 1, sizeof(*jm->keys));
        if (jm->keys != NULL) {
            for (size_t i = 0; i < l->cap; i++)
                if (l->keys[i] != NULL)
                    jm->keys[jm->nkeys++] = l->keys[i];
            free(l->keys);
        } else {
            keys_free(l->keys, l->cap);
            jm->full = true; /* out of memory: compare whole */
        }
        l->keys = NULL;
        l->cap = l->n = 0;
        l->overflow = false;
        atomic_store(&l->taken, jm->nkeys);
        l->clean_gen = atomic_load(&l->gen);
        l->clean_ms = 0;
    }
    pthread_mutex_unlock(&l->lock);
    return any;
}

/* Add the members of <s> not in rp->who yet. */
static void
who_add(struct repairer *rp, const struct pool_snapshot *s)
{
    for (size_t j = 0; j < s->n; j++)
        if (pos_of(rp, s->servers[j]) == SIZE_MAX)
            rp->who[rp->nwho++] = s->servers[j];
}

/* The job's members (rp->who): <snap>'s (at their snapshot indexes),
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

/* Start a job for <rp>'s pool when it has work (or a probe is due). */
static void
job_start(struct repairer *rp, uint64_t now)
{
    struct pool *p = rp->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    bool fill = false;
    bool probe = now >= rp->probe_ms + PROBE_MS;

    /* A member about to serve reads again must not have restarted
     * meanwhile (empty, and only its log repaired): identities are
     * checked more often (every job, at most every PROBE_WAIT_MS) while a
     * member waits for that. */
    for (size_t i = 0; i < snap->n; i++)
        probe |= !replica_readable(snap->servers[i]) &&
                 now >= rp->probe_ms + PROBE_WAIT_MS;

    rp->jm = calloc(snap->n ? snap->n : 1, sizeof(*rp->jm));
    if (rp->jm == NULL)
        return;
    for (size_t i = 0; i < snap->n; i++) {
        struct server *s = snap->servers[i];

        if (!server_usable(s) || now < s->rlog.retry_ms)
            continue; /* its keys wait for it */
        if (take_log(s, &rp->jm[rp->njm]))
            rp->njm++;
    }
    /* a placement not filled yet (a failed fill waits a while) */
    if (snap->fill != NULL && !snap->fill_same &&
        !(p->fill_view != NULL && p->fill_view->nsince == 0 &&
          same_placement(p->fill_view->base, snap)) &&
        now >= rp->fill_ms + (rp->fill_failed ? 10 * RETRY_MS : 0)) {
        fill = true;
        rp->fill_ms = now;
    }
    if (rp->njm == 0 && !probe && !fill) {
        free(rp->jm);
        rp->jm = NULL;
        return;
    }
    if (job_members(rp, snap) < 0) {
        give_back(rp, now);
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
        give_back(rp, now);
        return;
    }
    rp->running = true;
}

/*
 * A member that has nothing left to repair serves reads again once a
 * pass found its log empty and nothing was noted since, for a while:
 * the writes that were on their way to it during the pass (a pool's
 * `timeout`, 1 s without one) have been answered by then.
 */
static void
readable_again(struct pool *p, uint64_t now)
{
    uint64_t grace = p->cfg.timeout_ms ? p->cfg.timeout_ms : 1000;

    /* (identities are checked within it, twice: a restart shows first) */
    if (grace < 2 * PROBE_WAIT_MS + 50)
        grace = 2 * PROBE_WAIT_MS + 50;

    for (size_t i = 0; i < p->nservers; i++) {
        struct server *s = p->servers[i];
        struct replica_log *l = &s->rlog;
        bool empty;

        if (!atomic_load(&l->dirty) || l->clean_ms == 0 ||
            now < l->clean_ms + grace)
            continue;
        pthread_mutex_lock(&l->lock);
        empty =
            l->n == 0 && !l->overflow && atomic_load(&l->gen) == l->clean_gen;
        if (empty) {
            atomic_store(&l->dirty, false);
            log_info("pool %s: member %s is repaired: it serves reads again",
                     p->name, s->name);
        }
        l->clean_ms = 0;
        pthread_mutex_unlock(&l->lock);
    }
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
    free(rp->ids);
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
            !same_placement(pool_snapshot(p), rp->snap))
            atomic_store(&rp->fill_abort, true);
        if (rp->running && atomic_load(&rp->done))
            job_end(rp, now);
        if (!rp->running) {
            readable_again(p, now);
            job_start(rp, now);
        }
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
replica_init(void)
{
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
            metrics_label_escape(f, p->name);
            fprintf(f, "\",member=\"");
            metrics_label_escape(f, s->name);
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
            metrics_label_escape(f, p->name);
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
        overflow = s->rlog.overflow;
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

        o = json_pack("{s:b, s:I, s:I}", "filling", filling, "fills",
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

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
#include "stats.h"

/* A member that could not be reached is tried again after this. */
#define RETRY_MS 1000
/* How often each member's identity is checked (a restart). */
#define PROBE_MS 1000
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

static uint64_t
key_hash(const char *k, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

/* Put the packed key <p> in <keys> (<cap> slots, a power of two); false
 * when it is there already. */
static bool
slot_put(char **keys, size_t cap, char *p)
{
    uint32_t len;
    size_t i;

    memcpy(&len, p, sizeof(len));
    i = (size_t)key_hash(p + sizeof(len), len) & (cap - 1);
    while (keys[i] != NULL) {
        if (memcmp(keys[i], p, sizeof(len) + len) == 0)
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
    n = s->rlog.n;
    pthread_mutex_unlock(&s->rlog.lock);
    return n;
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
    /* the thread's own, kept across jobs */
    struct ident *ids;
    size_t nids;
    struct rconn *conns; /* [snap->n] for the job */
};

static struct repairer **repairers;
static size_t nrepairers;

/* ---- talking to members -------------------------------------------------- */

static bool
is_memcache(const struct repairer *rp)
{
    return rp->snap->set.mode == CONF_MODE_MEMCACHE;
}

/* The connection to member <i> of the job's snapshot, opened on first
 * use; NULL when it cannot be. */
static struct rconn *
conn_of(struct repairer *rp, size_t i)
{
    struct rconn *c = &rp->conns[i];
    const struct pool_settings *set = &rp->snap->set;
    char err[256];

    if (c->fd >= 0)
        return c;
    if (rc_open(c, &rp->snap->servers[i]->addr, set->connect_timeout_ms,
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

/* Read every member of a set (<n>, snapshot indexes <idx>) into <cp>:
 * 0, or -1 with *<who> the member that could not be read. */
static int
read_all(struct repairer *rp, const char *key, size_t klen, const size_t *idx,
         size_t n, struct copy *cp, size_t *who)
{
    for (size_t i = 0; i < n; i++) {
        struct server *s = rp->snap->servers[idx[i]];
        struct rconn *c = server_usable(s) ? conn_of(rp, idx[i]) : NULL;

        if (c == NULL || read_copy(rp, c, key, klen, &cp[i]) < 0) {
            *who = idx[i];
            return -1;
        }
    }
    return 0;
}

/*
 * Make every reachable member of <key>'s replica set hold the value its
 * voters agree on. Voters: the members that serve reads (nothing to
 * repair; every member when none does). Before a voter is written, the
 * copies are read twice, a moment apart: a copy that changed in between
 * is a client's write on
 * its way, and the key is left to settle and read again (a repair must
 * never undo a write on a member that serves reads). The value most
 * voters hold wins (the first in preference order among equals); it is
 * written on the members that do not serve reads at once, and on a voter
 * only when the voter's copy stayed apart over two reads. 0, or -1 when a
 * member could not be read or written
 * (*<who>: its snapshot index) or the key never settled.
 */
static int
repair_key(struct repairer *rp, const char *key, size_t klen, size_t *who)
{
    const struct pool_snapshot *snap = rp->snap;
    size_t idx[REPLICAS_MAX], n, off, tl;
    struct copy a[REPLICAS_MAX], b[REPLICAS_MAX];
    uint64_t h;
    int rc = -1;

    if (snap->ring == NULL)
        return 0;
    tl = chash_key_tag(key, klen, snap->set.hash_tag, &off);
    h = chash_ring_hash(snap->ring, key + off, tl);
    n = chash_ring_lookup_n(snap->ring, h, idx, snap->set.replicas);
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    for (int tries = 0; tries < REPAIR_TRIES; tries++) {
        bool voter[REPLICAS_MAX], any = false, differ = false, moving = false,
                                  voters_differ = false;
        int best = -1;
        unsigned bestn = 0;
        struct timespec pause = {0, SETTLE_NS};

        for (size_t i = 0; i < n; i++) {
            copy_free(&a[i]);
            copy_free(&b[i]);
        }
        if (read_all(rp, key, klen, idx, n, a, who) < 0)
            goto out;
        for (size_t i = 1; i < n; i++)
            differ |= !copy_same(&a[0], &a[i]);
        if (!differ) {
            rc = 0; /* every copy agrees */
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            voter[i] = replica_readable(snap->servers[idx[i]]);
            any |= voter[i];
        }
        for (size_t i = 0; i < n; i++) {
            unsigned k = 0;

            if (any && !voter[i])
                continue;
            for (size_t j = 0; j < n; j++)
                k += (!any || voter[j]) && copy_same(&a[i], &a[j]);
            if (k > bestn) {
                bestn = k;
                best = (int)i;
            }
        }
        for (size_t i = 0; i < n; i++)
            voters_differ |= (!any || voter[i]) && !copy_same(&a[i], &a[best]);
        if (voters_differ) {
            /* a voter serves reads: it is written only when its copy
             * stays apart (not a client's write on its way) */
            nanosleep(&pause, NULL);
            if (read_all(rp, key, klen, idx, n, b, who) < 0)
                goto out;
            for (size_t i = 0; i < n; i++)
                moving |= !copy_same(&a[i], &b[i]);
            if (moving) {
                nanosleep(&pause, NULL);
                continue; /* again, once it landed */
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (copy_same(&a[i], &a[best]))
                continue;
            if (write_copy(rp, &rp->conns[idx[i]], key, klen, &a[best]) < 0) {
                *who = idx[i];
                goto out;
            }
            atomic_fetch_add(&rp->pool->rstats.repairs, 1);
        }
        /* read again: every copy must now agree */
    }
    /* never settled: left for later (noted again) */
out:
    for (size_t i = 0; i < n; i++) {
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
    if (who != SIZE_MAX && rp->snap->servers[who] != jm->s) {
        /* another member of the set is out: the key waits for it there */
        replica_note(rp->snap->servers[who], key, klen,
                     rp->snap->set.repair_log, true);
        return;
    }
    jm->failed = true;
    replica_note(jm->s, key, klen, rp->snap->set.repair_log, true);
}

/* ---- comparing a member whole -------------------------------------------- */

/* Whether <s> is in the replica set of <key>. */
static bool
in_set(const struct pool_snapshot *snap, const char *key, size_t klen,
       const struct server *s)
{
    size_t idx[REPLICAS_MAX], n, off, tl;

    if (snap->ring == NULL)
        return false;
    tl = chash_key_tag(key, klen, snap->set.hash_tag, &off);
    n = chash_ring_lookup_n(snap->ring,
                            chash_ring_hash(snap->ring, key + off, tl), idx,
                            snap->set.replicas);
    for (size_t i = 0; i < n; i++)
        if (snap->servers[idx[i]] == s)
            return true;
    return false;
}

/* redis: SCAN member <i>, repairing each key whose set holds <jm>'s
 * member. 0, or -1 (it could not be scanned). */
static int
scan_member(struct repairer *rp, struct jmember *jm, size_t i)
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

            if (key->type == '$' && in_set(rp->snap, key->s, key->len, jm->s))
                repair_one(rp, jm, key->s, key->len);
        }
        rval_free(&v);
    } while (strcmp(cursor, "0") != 0 && !atomic_load(&rp->stop));
    return 0;
}

/* memcached: the keys of member <i> (lru_crawler metadump), repaired as
 * scan_member does. Keys come URL-encoded. */
static int
dump_member(struct repairer *rp, struct jmember *jm, size_t i)
{
    struct rconn *c = conn_of(rp, i);
    const char *line;
    size_t len;
    char key[251];

    if (c == NULL || rc_put(c, "lru_crawler metadump all\r\n", 26) < 0 ||
        rc_flush(c) < 0)
        return -1;
    /* the keys first (the dump holds the connection), then the repairs */
    struct {
        char *d; /* each key: its length (a byte), its bytes */
        size_t len, cap;
    } keys = {0};
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
        for (size_t p = 4;
             p < len && line[p] != ' ' && line[p] != '\r' && k < sizeof(key);
             p++) {
            if (line[p] == '%' && p + 2 < len) {
                char hex[3] = {line[p + 1], line[p + 2], 0};
                key[k++] = (char)strtoul(hex, NULL, 16);
                p += 2;
            } else {
                key[k++] = line[p];
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
    for (size_t p = 0; p < keys.len && !atomic_load(&rp->stop);) {
        size_t k = (unsigned char)keys.d[p];

        if (in_set(rp->snap, keys.d + p + 1, k, jm->s))
            repair_one(rp, jm, keys.d + p + 1, k);
        p += 1 + k;
    }
    free(keys.d);
    return 0;
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
        int rc =
            is_memcache(rp) ? dump_member(rp, jm, i) : scan_member(rp, jm, i);

        if (rc < 0 && server_usable(rp->snap->servers[i])) {
            /* a member that is up and cannot be listed: again later */
            jm->failed = true;
            replica_note(jm->s, "", 0, 0, true); /* overflow: whole again */
            return;
        }
    }
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
    for (size_t i = 0; i < rp->snap->n; i++)
        rc_free(&rp->conns[i]);
    atomic_store(&rp->done, true);
    return NULL;
}

/* ---- the control thread's side ------------------------------------------- */

static void
job_free(struct repairer *rp)
{
    for (size_t j = 0; j < rp->njm; j++) {
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
    if (rp->snap != NULL)
        pool_snapshot_unpin(rp->snap);
    rp->snap = NULL;
}

/* Put the keys of job member <jm> back in its member's log. */
static void
put_back(const struct repairer *rp, struct jmember *jm)
{
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

/* The job is over: join, take its results. */
static void
job_end(struct repairer *rp, uint64_t now)
{
    pthread_join(rp->thread, NULL);
    rp->running = false;
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
        l->clean_gen = atomic_load(&l->gen);
        l->clean_ms = 0;
    }
    pthread_mutex_unlock(&l->lock);
    return any;
}

/* Start a job for <rp>'s pool when it has work (or a probe is due). */
static void
job_start(struct repairer *rp, uint64_t now)
{
    struct pool *p = rp->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    bool probe = now >= rp->probe_ms + PROBE_MS;

    /* A member about to serve reads again must not have restarted
     * meanwhile (empty, and only its log repaired): every job checks
     * identities while a member waits for that. */
    for (size_t i = 0; i < snap->n; i++)
        probe |= !replica_readable(snap->servers[i]);

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
    if (rp->njm == 0 && !probe) {
        free(rp->jm);
        rp->jm = NULL;
        return;
    }
    rp->conns = calloc(snap->n ? snap->n : 1, sizeof(*rp->conns));
    if (rp->conns == NULL) {
        give_back(rp, now);
        return;
    }
    for (size_t i = 0; i < snap->n; i++)
        rp->conns[i].fd = -1;
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

        if (p->cfg.replicas <= 1 || p->removed)
            continue;
        rp = repairer_of(p);
        if (rp == NULL)
            continue;
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
    free(repairers);
    repairers = NULL;
}

/* ---- reporting ----------------------------------------------------------- */

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
    fprintf(f,
            "# HELP chashd_replication_pending_keys Keys noted for repair on "
            "a member (hinted writes pending).\n"
            "# TYPE chashd_replication_pending_keys gauge\n");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t j = 0; p->cfg.replicas > 1 && j < p->nservers; j++) {
            fprintf(f, "chashd_replication_pending_keys{pool=\"");
            metrics_label_escape(f, p->name);
            fprintf(f, "\",member=\"");
            metrics_label_escape(f, p->servers[j]->name);
            fprintf(f, "\"} %zu\n", replica_pending(p->servers[j]));
        }
    }
    fprintf(f, "# HELP chashd_replication_readable 1 when a member serves "
               "reads (0: it has keys to repair).\n"
               "# TYPE chashd_replication_readable gauge\n");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t j = 0; p->cfg.replicas > 1 && j < p->nservers; j++) {
            fprintf(f, "chashd_replication_readable{pool=\"");
            metrics_label_escape(f, p->name);
            fprintf(f, "\",member=\"");
            metrics_label_escape(f, p->servers[j]->name);
            fprintf(f, "\"} %d\n", replica_readable(p->servers[j]));
        }
    }
}

json_t *
replica_json(struct pool *p)
{
    const struct replica_stats *st = &p->rstats;
    json_t *members, *o;

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
    o = json_pack(
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
    return o;
}

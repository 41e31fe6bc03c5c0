/* etcd_apply.c -- module etcd: etcd's records applied on the control
 * thread. Each pool's member records become its members (through
 * membership, the one place that changes who is in a pool), with its
 * migration, in one snapshot; once every change is published the
 * revision counts as applied: the instance record says so, the admin
 * writes waiting for it are answered, a copy pool may start listening.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "conf/conf.h"
#include "conf/etcd_codec.h"
#include "control/migration.h"
#include "model/pool.h"
#include "model/state.h"

/* FNV-1a 64 */
static void
fnv(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *s = data;

    for (size_t i = 0; i < n; i++) {
        *h ^= s[i];
        *h *= 1099511628211ull;
    }
}

static int
server_cmp(const void *a, const void *b)
{
    const struct server *const *x = a, *const *y = b;

    return strcmp((*x)->name, (*y)->name);
}

/* The checksum of <p>'s ring input (doc/etcd.md). */
static uint64_t
etcd_pool_checksum(const struct pool *p)
{
    uint64_t h = 14695981039346656037ull;
    struct server **v = calloc(p->nservers ? p->nservers : 1, sizeof(*v));
    size_t n = 0;
    char buf[64];

    if (v == NULL)
        return 0;
    snprintf(buf, sizeof(buf), "%d %d %u %u", p->cfg.distribution,
             p->cfg.ring.hash, p->cfg.ring.points_per_weight,
             p->cfg.ring.table_size);
    fnv(&h, buf, strlen(buf) + 1);
    for (size_t i = 0; i < p->nservers; i++)
        if (atomic_load(&p->servers[i]->state) != SERVER_REMOVED)
            v[n++] = p->servers[i];
    qsort(v, n, sizeof(*v), server_cmp);
    for (size_t i = 0; i < n; i++) {
        fnv(&h, v[i]->name, strlen(v[i]->name) + 1);
        fnv(&h, v[i]->addr.text, strlen(v[i]->addr.text) + 1);
        snprintf(buf, sizeof(buf), "%u %d", v[i]->weight, v[i]->admin);
        fnv(&h, buf, strlen(buf) + 1);
    }
    free(v);
    return h;
}

/* The instance record, published by the session thread. */
static void
publish(void)
{
    json_t *rec =
        json_pack("{s:s,s:i,s:I,s:I,s:I}", "instance", etcd_cfg.instance, "pid",
                  (int)getpid(), "started_ms", (json_int_t)etcd_ctl.started_ms,
                  "applied_rev", (json_int_t)etcd_ctl.applied_rev, "applied_ms",
                  (json_int_t)etcd_ctl.applied_ms);
    json_t *pools = json_object();
    char *text;

    for (size_t i = 0; i < etcd_ctl.npools; i++) {
        const struct etcd_cpool *cp = &etcd_ctl.pools[i];
        struct pool *p = pool_find(cp->name);
        char sum[24];

        if (p == NULL)
            continue;
        snprintf(sum, sizeof(sum), "%016" PRIx64, cp->checksum);
        json_object_set_new(pools, cp->name,
                            json_pack("{s:s,s:I,s:I,s:I,s:I}", "checksum", sum,
                                      "members", (json_int_t)p->nservers,
                                      "changed_rev",
                                      (json_int_t)cp->changed_rev, "changed_ms",
                                      (json_int_t)cp->changed_ms, "since_ms",
                                      (json_int_t)cp->since_ms));
    }
    json_object_set_new(rec, "pools", pools);
    text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    if (text == NULL)
        return;
    pthread_mutex_lock(&etcd_shared.mu);
    free(etcd_shared.publish);
    etcd_shared.publish = text;
    pthread_cond_signal(&etcd_shared.cond);
    pthread_mutex_unlock(&etcd_shared.mu);
}

static void
applied(uint64_t rev)
{
    if (rev > etcd_ctl.applied_rev)
        etcd_ctl.applied_rev = rev;
    etcd_ctl.applied_ms = clock_wall_ms();
    publish();
    etcd_writes_settle();
    etcd_fence_check();
}

static void
etcd_pool_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)p, (void)chg, (void)arg;
    if (etcd_ctl.pending_pubs > 0 && --etcd_ctl.pending_pubs == 0)
        applied(etcd_ctl.pending_rev);
}

static void
ignore(const char *pool, const char *member, int64_t mod_rev, const char *why)
{
    char key[256];

    snprintf(key, sizeof(key), "%s/pools/%s/members/%s", etcd_cfg.prefix, pool,
             member);
    for (size_t i = 0; i < etcd_ctl.nignored; i++)
        if (strcmp(etcd_ctl.ignored[i].key, key) == 0) {
            if (etcd_ctl.ignored[i].mod_rev == mod_rev)
                return; /* said already */
            etcd_ctl.ignored[i].mod_rev = mod_rev;
            snprintf(etcd_ctl.ignored[i].why, sizeof(etcd_ctl.ignored[i].why),
                     "%s", why);
            goto log;
        }
    if (etcd_ctl.nignored < ETCD_IGNORED_KEPT) {
        struct etcd_ignored *ig = &etcd_ctl.ignored[etcd_ctl.nignored++];
        snprintf(ig->key, sizeof(ig->key), "%s", key);
        ig->mod_rev = mod_rev;
        snprintf(ig->why, sizeof(ig->why), "%s", why);
    }
log:
    etcd_ctl.ignored_total++;
    log_warn("etcd: pool %s: member record %s (revision %" PRId64 ") is "
             "ignored: %s",
             pool, key, mod_rev, why);
}

static void
unignore(const char *pool, const char *member)
{
    char key[256];

    snprintf(key, sizeof(key), "%s/pools/%s/members/%s", etcd_cfg.prefix, pool,
             member);
    for (size_t i = 0; i < etcd_ctl.nignored; i++)
        if (strcmp(etcd_ctl.ignored[i].key, key) == 0) {
            etcd_ctl.ignored[i] = etcd_ctl.ignored[--etcd_ctl.nignored];
            return;
        }
}

/* One wanted member, from a valid record. */
struct want {
    const char *name;
    struct conf_server cs;
    int admin;
    uint64_t since_ms;
    uint64_t mod_rev;
    bool refused; /* the pool would not take it (ignored, said) */
};

/* Parse <value> into <w>; NULL, or why it is not a member record. */
static const char *
record_parse(const char *name, const char *value, struct want *w)
{
    struct etcd_record r;
    const char *why = etcd_record_parse(name, value ? value : "",
                                        value ? strlen(value) : 0, &r);
    char err[256];

    memset(w, 0, sizeof(*w));
    w->name = name;
    if (why != NULL)
        return why;
    if (conf_parse_addr(r.address, &w->cs.addr, err, sizeof(err)) != 0)
        return "\"address\" does not parse";
    w->cs.weight = r.weight;
    w->cs.name = (char *)name;
    w->admin = r.state == ETCD_STATE_DRAIN   ? STATE_ADMIN_DRAIN
               : r.state == ETCD_STATE_MAINT ? STATE_ADMIN_MAINT
                                             : STATE_ADMIN_UP;
    w->since_ms = r.since;
    return NULL;
}

static int
want_cmp(const void *a, const void *b)
{
    return strcmp(((const struct want *)a)->name,
                  ((const struct want *)b)->name);
}

/* The valid member records of <recs> (pool <p>) into <w> (room for all),
 * sorted by name; the others are ignored (said). How many. */
static size_t
wants_parse(const struct pool *p, json_t *recs, struct want *w)
{
    const char *name;
    json_t *v;
    size_t nw = 0;

    json_object_foreach(recs, name, v)
    {
        const char *why;

        if (name[0] == '/')
            continue; /* a migration key */
        why =
            record_parse(name, json_string_value(json_array_get(v, 1)), &w[nw]);
        if (why != NULL) {
            ignore(p->name, name, etcd_jint(json_array_get(v, 0)), why);
            continue;
        }
        w[nw].mod_rev = (uint64_t)etcd_jint(json_array_get(v, 0));
        nw++;
    }
    qsort(w, nw, sizeof(*w), want_cmp);
    return nw;
}

/* The wants of a pool being synced, for sync_refused. */
struct sync_wants {
    const char *pool;
    struct want *w;
};

/* membership_apply_remote's refused: the record is ignored (said now, in
 * the order the changes are made). */
static void
sync_refused(size_t i, int err, void *arg)
{
    struct sync_wants *sw = arg;
    struct want *w = &sw->w[i];

    w->refused = true;
    ignore(sw->pool, w->name, (int64_t)w->mod_rev,
           err == EEXIST ? "its address is another member's" : strerror(err));
}

/*
 * Make pool <p> hold exactly the valid records of <recs>, through
 * membership (membership_apply_remote: removals, changes, additions, in
 * one control-loop step, so one snapshot holds them; logged and reported
 * there). No valid record at all: the pool keeps its members. Returns
 * whether anything changed.
 */
static bool
etcd_pool_sync(struct pool *p, struct etcd_cpool *cp, json_t *recs,
               uint64_t rev)
{
    size_t n = json_object_size(recs), nw = 0;
    struct want *w = calloc(n ? n : 1, sizeof(*w));
    struct membership_remote_member *m = calloc(n ? n : 1, sizeof(*m));
    struct sync_wants sw = {p->name, w};
    bool changed = false;
    uint64_t now = clock_wall_ms(), newest_since = 0;
    char verb[64];

    if (w == NULL || m == NULL)
        goto out;
    nw = wants_parse(p, recs, w);
    if (nw == 0) {
        if (!cp->kept)
            log_warn("etcd: pool %s: etcd holds no valid member record: it "
                     "keeps its %zu members",
                     p->name, p->nservers);
        cp->kept = true;
        goto out;
    }
    cp->kept = false;
    for (size_t i = 0; i < nw; i++) {
        m[i].server = &w[i].cs;
        m[i].admin = w[i].admin;
        m[i].age_ms =
            w[i].since_ms && now > w[i].since_ms ? now - w[i].since_ms : 0;
    }
    snprintf(verb, sizeof(verb), "etcd revision %" PRIu64, rev);
    changed = membership_apply_remote(p, m, nw, verb, sync_refused, &sw);
    for (size_t i = 0; i < nw; i++) {
        if (w[i].refused)
            continue;
        unignore(p->name, w[i].name); /* a member now, if it was not */
        /* the time stamp of this change: of the records it wrote */
        if (w[i].mod_rev == rev && w[i].since_ms > newest_since)
            newest_since = w[i].since_ms;
    }
    if (changed) {
        cp->changed_rev = rev;
        cp->changed_ms = now;
        cp->since_ms = newest_since;
    }
out:
    for (size_t i = 0; i < nw; i++)
        conf_addr_deinit(&w[i].cs.addr);
    free(m);
    free(w);
    return changed;
}

static void
listen_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)chg, (void)arg;
    if (etcd_ctl.listen != NULL && !p->removed)
        etcd_ctl.listen(p);
}

/* A copy pool starts listening once etcd's members are applied and this
 * instance's record, naming the pool, is seen back: from then on every
 * migration waits for this instance's barrier, and none it missed can
 * route a key here the old way (doc/etcd.md). */
void
etcd_listen_check(void)
{
    json_t *me = json_object_get(etcd_ctl.instances, etcd_cfg.instance);

    for (size_t i = 0; i < etcd_ctl.npools; i++) {
        struct etcd_cpool *cp = &etcd_ctl.pools[i];
        struct pool *p = pool_find(cp->name);

        if (cp->listening || !cp->listed || p == NULL || !etcd_pool(p) ||
            p->cfg.migration != CONF_MIGRATION_COPY)
            continue;
        if (me == NULL ||
            !etcd_routes_pool(json_string_value(json_array_get(me, 1)),
                              cp->name))
            continue;
        cp->listening = true;
        log_info("etcd: pool %s: its members are etcd's and instance %s is "
                 "registered: listening",
                 cp->name, etcd_cfg.instance);
        if (etcd_ctl.listen != NULL &&
            pool_on_published(p, listen_published, NULL) != 0)
            etcd_ctl.listen(p);
    }
}

/* Whether instance record <value> (text) says it routes <pool>. */
bool
etcd_routes_pool(const char *value, const char *pool)
{
    json_t *j = value ? json_loads(value, 0, NULL) : NULL;
    bool yes = json_object_get(json_object_get(j, "pools"), pool) != NULL;

    json_decref(j);
    return yes;
}

static void
warm_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)arg;
    if (chg != NULL)
        migration_start(p);
}

/*
 * Apply <recs> to pool <p> in one snapshot, with its migration: a copy
 * pool's as etcd describes it (etcd_migration_before), a warm-up pool's
 * (memcache) on this instance alone -- a cache's warm-up needs no agreement:
 * each instance reads a key's old member on a miss for the window. Returns
 * whether the members changed.
 */
static bool
etcd_pool_apply(struct pool *p, struct etcd_cpool *cp, json_t *recs,
                uint64_t rev)
{
    json_t *later = NULL;
    uint64_t later_epoch = 0;
    bool changed, warm = false;
    char err[300], change[64];

    pool_batch(p, true);
    if (etcd_copies_keys(p) &&
        etcd_migration_before(p, cp, &later, &later_epoch) != 0) {
        pool_batch(p, false);
        return false; /* said; the members are kept */
    }
    if (p->cfg.migration == CONF_MIGRATION_WARMUP &&
        atomic_load(&p->snap) != NULL) {
        snprintf(change, sizeof(change), "etcd revision %" PRIu64, rev);
        warm =
            migration_prepare(p, change, NULL, 0, 0, 0, err, sizeof(err)) == 0;
    }
    changed = etcd_pool_sync(p, cp, recs, rev);
    if (warm && !changed)
        migration_cancel(p);
    else if (warm && pool_on_published(p, warm_published, NULL) != 0)
        migration_start(p);
    if (later != NULL) {
        if (migration_etcd_begin(p, later, later_epoch, err, sizeof(err)) !=
            0) {
            cp->failed_epoch = later_epoch;
            log_error("etcd: pool %s: the migration of revision %" PRIu64
                      " cannot run: %s",
                      p->name, later_epoch, err);
        }
        json_decref(later);
    }
    pool_batch(p, false);
    return changed;
}

void
etcd_on_pools(struct etcd_msg *m)
{
    const char *name;
    json_t *recs;
    unsigned waits = 0;
    uint64_t rev;

    etcd_ctl.events++;
    if (m->list) {
        /* a list starts over: after a wipe the store's revisions are
         * lower than what was applied before */
        etcd_ctl.applied_rev = 0;
        etcd_ctl.pending_rev = 0;
    }
    json_object_foreach(m->data, name, recs)
    {
        struct etcd_cpool *cp = etcd_cpool_find(name);
        struct pool *p = pool_find(name);

        if (cp == NULL || p == NULL || !etcd_pool(p))
            continue;
        json_decref(cp->records);
        cp->records = json_incref(recs);
        cp->listed = true;
        /* the revision of this pool's change: of its last event, or in
         * a list of its newest record */
        rev = m->revs ? (uint64_t)etcd_jint(json_object_get(m->revs, name)) : 0;
        if (etcd_pool_apply(p, cp, recs, rev ? rev : m->rev) &&
            pool_on_published(p, etcd_pool_published, NULL) == 0)
            waits++;
        cp->checksum = etcd_pool_checksum(p);
    }
    etcd_migration_reconcile_all();
    etcd_listen_check();
    if (m->list)
        etcd_ctl.lists++;
    if (waits == 0 && etcd_ctl.pending_pubs == 0) {
        applied(m->rev);
        return;
    }
    etcd_ctl.pending_pubs += waits;
    if (m->rev > etcd_ctl.pending_rev)
        etcd_ctl.pending_rev = m->rev;
}

/* chash.c -- the public face of libchash: validate and copy a membership,
 * hand it to the chosen algorithm, and answer lookups, shares, diffs and
 * flows through one dispatch. An algorithm is a row of algo_ops and
 * nothing more: what differs between them is in struct chash__ops
 * (internal.h, which also gives the order of lib/).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "chash/chash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "internal.h"

static const struct chash__ops *const algo_ops[CHASH_ALGO_COUNT] = {
    [CHASH_ALGO_RING] = &chash__ring_ops,
    [CHASH_ALGO_MAGLEV] = &chash__maglev_ops,
    [CHASH_ALGO_RENDEZVOUS] = &chash__rendezvous_ops,
    [CHASH_ALGO_JUMP] = &chash__jump_ops,
    [CHASH_ALGO_KETAMA] = &chash__ketama_ops,
    [CHASH_ALGO_NGINX] = &chash__nginx_ops,
};

const char *
chash_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case 0:
        return "success";
#define CHASH_ERR_CASE(name, num, text)                                        \
    case CHASH_##name:                                                         \
        return text;
        CHASH_ERRORS(CHASH_ERR_CASE)
#undef CHASH_ERR_CASE
    }
    return "unknown error";
}

const char *
chash_algo_name(int algo)
{
    if (algo < 0 || algo >= CHASH_ALGO_COUNT)
        return NULL;
    return algo_ops[algo]->name;
}

int
chash_algo_from_name(const char *name)
{
    if (name == NULL)
        return -CHASH_EALGO;
    for (int i = 0; i < CHASH_ALGO_COUNT; i++)
        if (strcmp(algo_ops[i]->name, name) == 0)
            return i;
    return -CHASH_EALGO;
}

static int
name_cmp(const struct chash__member *a, const struct chash__member *b)
{
    return strcmp(a->name, b->name);
}

/* The checksum covers the algorithm, the hash, and who owns what, as the
 * algorithm's checksum op folds it (a continuum: every point's position
 * and owner name); by default the members by name with their points. */
static uint64_t
ring_checksum(const struct chash_ring *r)
{
    uint64_t acc =
        chash__checksum_mix((uint64_t)r->cfg.algo, (uint64_t)r->cfg.hash);
    uint64_t *nh = malloc((r->nmembers ? r->nmembers : 1) * sizeof(*nh));

    if (nh == NULL)
        return 0;
    for (size_t m = 0; m < r->nmembers; m++)
        nh[m] = chash__xxh3(r->members[m].name, r->members[m].namelen);
    if (r->ops->checksum != NULL) {
        acc = r->ops->checksum(r, acc, nh);
    } else {
        for (size_t k = 0; k < r->nmembers; k++) {
            size_t m = r->by_name[k];
            acc = chash__checksum_mix(acc, nh[m]);
            acc = chash__checksum_mix(acc, r->members[m].points);
        }
    }
    free(nh);
    return acc;
}

void
chash_ring_destroy(struct chash_ring *r)
{
    if (r == NULL)
        return;
    if (r->ops != NULL && r->ops->deinit != NULL)
        r->ops->deinit(r);
    chash__continuum_deinit(&r->cont);
    for (size_t m = 0; m < r->nmembers; m++)
        free(r->members[m].name);
    free(r->members);
    free(r->by_name);
    free(r->share);
    free(r);
}

static int
check_config(const struct chash_config *in, struct chash_config *cfg)
{
    if (in != NULL)
        *cfg = *in;
    else
        memset(cfg, 0, sizeof(*cfg));
    if (cfg->algo < 0 || cfg->algo >= CHASH_ALGO_COUNT)
        return -CHASH_EALGO;
    if (chash__hash_get(cfg->hash) == NULL)
        return -CHASH_EHASH;
    if (cfg->points_per_weight == 0)
        cfg->points_per_weight = CHASH_DEFAULT_POINTS;
    if (cfg->table_size == 0)
        cfg->table_size = CHASH_DEFAULT_TABLE_SIZE;
    return 0;
}

uint64_t
chash_ring_points_needed(const struct chash_config *cfg_in,
                         const struct chash_member *members, size_t n)
{
    struct chash_config cfg;

    if (check_config(cfg_in, &cfg) != 0 || (members == NULL && n > 0))
        return 0;
    return algo_ops[cfg.algo]->points_needed(&cfg, members, n);
}

int
chash_ring_create(const struct chash_config *cfg_in,
                  const struct chash_member *members, size_t n,
                  struct chash_ring **out)
{
    struct chash_ring *r = NULL;
    uint32_t *tmp = NULL;
    int rc;

    if (out == NULL)
        return -CHASH_EINVAL;
    *out = NULL;
    if (members == NULL && n > 0)
        return -CHASH_EINVAL;
    if (n > UINT32_MAX)
        return -CHASH_ETOOMANY;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -CHASH_ENOMEM;
    rc = check_config(cfg_in, &r->cfg);
    if (rc != 0)
        goto out;
    r->ops = algo_ops[r->cfg.algo];
    rc = -CHASH_EEMPTY;
    if (n == 0)
        goto out;
    rc = -CHASH_ENOMEM;
    r->members = calloc(n, sizeof(*r->members));
    r->by_name = malloc(n * sizeof(*r->by_name));
    r->share = calloc(n, sizeof(*r->share));
    tmp = malloc(n * sizeof(*tmp));
    if (r->members == NULL || r->by_name == NULL || r->share == NULL ||
        tmp == NULL)
        goto out;
    for (size_t m = 0; m < n; m++) {
        const struct chash_member *in = &members[m];
        rc = -CHASH_ENONAME;
        if (in->name == NULL || in->name[0] == '\0')
            goto out;
        rc = -CHASH_ERAMP;
        /* !(x >= 0 && x <= 1) also refuses NaN */
        if (!(in->ramp >= 0.0 && in->ramp <= 1.0))
            goto out;
        rc = -CHASH_ENOMEM;
        r->members[m].name = strdup(in->name);
        if (r->members[m].name == NULL)
            goto out;
        r->nmembers = m + 1;
        r->members[m].namelen = strlen(in->name);
        r->members[m].weight = in->weight;
        r->members[m].ramp = in->ramp;
        r->by_name[m] = (uint32_t)m;
    }
    chash__sort_members(r, r->by_name, tmp, n, name_cmp);
    rc = -CHASH_EDUPNAME;
    for (size_t k = 1; k < n; k++)
        if (strcmp(r->members[r->by_name[k - 1]].name,
                   r->members[r->by_name[k]].name) == 0)
            goto out;
    rc = r->ops->build(r);
    if (rc != 0)
        goto out;
    for (size_t m = 0; m < n; m++) {
        r->total_points += r->members[m].points;
        r->nowners += r->members[m].points > 0;
    }
    rc = -CHASH_EEMPTY;
    if (r->nowners == 0)
        goto out;
    r->ops->shares(r);
    r->checksum = ring_checksum(r);
    rc = 0;
out:
    free(tmp);
    if (rc != 0) {
        chash_ring_destroy(r);
        r = NULL;
    }
    *out = r;
    return rc;
}

uint64_t
chash_ring_hash(const struct chash_ring *r, const void *key, size_t len)
{
    return r->ops->key_hash(r, key, len);
}

size_t
chash_ring_lookup(const struct chash_ring *r, uint64_t hash)
{
    /* Continuum algorithms take the fast path: no indirect call. */
    if (r->cont.npoints > 0)
        return r->cont
            .owner[chash__continuum_find(&r->cont, hash << r->pos_shift)];
    return r->ops->lookup(r, hash);
}

/*
 * A software pipeline over the batch: the bucket index entry of key
 * i + 16 and the first point of key i + 8 are prefetched while key i is
 * looked up, so up to ~16 cache misses are in flight instead of the two or
 * three a single lookup can overlap with its neighbours. The distances
 * suit a main-memory latency of ~100 ns at ~10 ns a key.
 */
void
chash_ring_lookup_batch(const struct chash_ring *r, const uint64_t *hashes,
                        size_t *out, size_t n)
{
    const struct chash__continuum *c = &r->cont;
    const size_t ahead_index = 16, ahead_point = 8;
    const unsigned ps = r->pos_shift;

    if (c->npoints == 0) {
        for (size_t i = 0; i < n; i++)
            out[i] = r->ops->lookup(r, hashes[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (i + ahead_index < n)
            __builtin_prefetch(
                &c->index[(hashes[i + ahead_index] << ps) >> c->shift]);
        if (i + ahead_point < n) {
            size_t p = c->index[(hashes[i + ahead_point] << ps) >> c->shift];
            __builtin_prefetch(&c->pos[p]);
            __builtin_prefetch(&c->owner[p]);
        }
        out[i] = c->owner[chash__continuum_find(c, hashes[i] << ps)];
    }
}

size_t
chash_ring_lookup_n(const struct chash_ring *r, uint64_t hash, size_t *out,
                    size_t n)
{
    if (out == NULL || n == 0)
        return 0;
    if (n > r->nowners)
        n = r->nowners;
    return r->ops->lookup_n(r, hash, out, n);
}

static bool
fits(const struct chash_ring *r, size_t m, const uint64_t *load,
     uint64_t total_load, double factor)
{
    double cap = ceil(factor * ((double)total_load + 1.0) *
                      (double)r->members[m].points / (double)r->total_points);
    return (double)load[m] + 1.0 <= cap;
}

size_t
chash_ring_lookup_bounded(const struct chash_ring *r, uint64_t hash,
                          const uint64_t *load, uint64_t total_load,
                          double factor)
{
    size_t first, buf[64], *pref = buf, got;

    if (!(factor >= 1.0))
        factor = 1.0;
    first = chash_ring_lookup(r, hash);
    if (load == NULL || fits(r, first, load, total_load, factor))
        return first;
    if (r->cont.npoints > 0) {
        /* Continuum: walk the points; the first owner that fits wins.
         * Owners met again are re-checked, which is harmless (they did
         * not fit the first time and loads do not change meanwhile). */
        const struct chash__continuum *c = &r->cont;
        size_t i = chash__continuum_find(c, hash << r->pos_shift);
        for (size_t step = 0; step < c->npoints; step++) {
            if (fits(r, c->owner[i], load, total_load, factor))
                return c->owner[i];
            if (++i == c->npoints)
                i = 0;
        }
        return first;
    }
    /* Table and score algorithms: the full preference order. */
    if (r->nowners > 64) {
        pref = malloc(r->nowners * sizeof(*pref));
        if (pref == NULL)
            return first;
    }
    got = r->ops->lookup_n(r, hash, pref, r->nowners);
    for (size_t k = 0; k < got; k++) {
        if (fits(r, pref[k], load, total_load, factor)) {
            first = pref[k];
            break;
        }
    }
    if (pref != buf)
        free(pref);
    return first;
}

double
chash_ring_share(const struct chash_ring *r, size_t member)
{
    return member < r->nmembers ? r->share[member] : 0.0;
}

/* Diffs: every algorithm reports segments (from-owner, to-owner, measure);
 * diff sums the ones whose owner names differ, flows aggregates them. */
struct diff_ctx {
    const struct chash_ring *a, *b;
    double moved;
    struct chash_flow *flows;
    size_t nflows, capflows;
    bool oom;
};

static bool
same_owner(const struct chash_ring *a, size_t x, const struct chash_ring *b,
           size_t y)
{
    return strcmp(a->members[x].name, b->members[y].name) == 0;
}

static void
diff_segment(void *ctx, size_t from, size_t to, double fraction)
{
    struct diff_ctx *d = ctx;

    if (same_owner(d->a, from, d->b, to))
        return;
    d->moved += fraction;
    if (d->oom)
        return;
    for (size_t k = 0; k < d->nflows; k++) {
        if (d->flows[k].from == from && d->flows[k].to == to) {
            d->flows[k].fraction += fraction;
            return;
        }
    }
    if (d->nflows == d->capflows) {
        size_t cap = d->capflows ? 2 * d->capflows : 16;
        struct chash_flow *f = realloc(d->flows, cap * sizeof(*f));
        if (f == NULL) {
            d->oom = true;
            return;
        }
        d->flows = f;
        d->capflows = cap;
    }
    d->flows[d->nflows++] = (struct chash_flow){from, to, fraction};
}

/* Sampled diff for algorithms without an exact one: 2^20 hashes evenly
 * spaced over the 64-bit space, each standing for 2^-20 of it. */
static void
sampled_diff(const struct chash_ring *a, const struct chash_ring *b,
             chash__segment_fn fn, void *ctx)
{
    const size_t samples = (size_t)1 << 20;
    const uint64_t step = (uint64_t)1 << 44;

    for (size_t s = 0; s < samples; s++) {
        uint64_t h = (uint64_t)s * step + step / 2;
        fn(ctx, a->ops->lookup(a, h), b->ops->lookup(b, h),
           1.0 / (double)samples);
    }
}

static int
run_diff(const struct chash_ring *a, const struct chash_ring *b,
         struct diff_ctx *d, bool want_flows)
{
    if (a == NULL || b == NULL)
        return -CHASH_EINVAL;
    if (a->cfg.algo != b->cfg.algo || a->cfg.hash != b->cfg.hash)
        return -CHASH_EMISMATCH;
    memset(d, 0, sizeof(*d));
    d->a = a;
    d->b = b;
    d->oom = !want_flows;
    if (a->ops != b->ops) {
        /* a zoned ring against a flat one (or the other way): merge
         * continua when both have one, else sample */
        if (a->cont.npoints > 0 && b->cont.npoints > 0)
            chash__continuum_diff(&a->cont, &b->cont, diff_segment, d);
        else
            sampled_diff(a, b, diff_segment, d);
    } else if (a->ops->diff != NULL) {
        a->ops->diff(a, b, diff_segment, d);
    } else {
        sampled_diff(a, b, diff_segment, d);
    }
    if (d->moved > 1.0)
        d->moved = 1.0;
    return 0;
}

int
chash_ring_diff(const struct chash_ring *from, const struct chash_ring *to,
                double *moved)
{
    struct diff_ctx d;
    int rc;

    if (moved == NULL)
        return -CHASH_EINVAL;
    rc = run_diff(from, to, &d, false);
    if (rc == 0)
        *moved = d.moved;
    return rc;
}

static int
cmp_flow(const void *x, const void *y)
{
    const struct chash_flow *a = x, *b = y;
    if (a->fraction != b->fraction)
        return a->fraction < b->fraction ? 1 : -1;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    return (a->to > b->to) - (a->to < b->to);
}

int
chash_ring_flows(const struct chash_ring *from, const struct chash_ring *to,
                 struct chash_flow *out, size_t cap, size_t *nflows)
{
    struct diff_ctx d;
    int rc;

    if (nflows == NULL || (out == NULL && cap > 0))
        return -CHASH_EINVAL;
    rc = run_diff(from, to, &d, true);
    if (rc != 0)
        return rc;
    if (d.oom) {
        free(d.flows);
        return -CHASH_ENOMEM;
    }
    if (d.nflows > 1) /* qsort's pointer must not be NULL, even for 0 */
        qsort(d.flows, d.nflows, sizeof(*d.flows), cmp_flow);
    for (size_t k = 0; k < d.nflows && k < cap; k++)
        out[k] = d.flows[k];
    *nflows = d.nflows;
    free(d.flows);
    return 0;
}

int
chash_ring_diff_exact(const struct chash_ring *r)
{
    return r->ops->exact_diff;
}

size_t
chash_ring_members(const struct chash_ring *r)
{
    return r->nmembers;
}

const char *
chash_ring_member_name(const struct chash_ring *r, size_t m)
{
    return m < r->nmembers ? r->members[m].name : NULL;
}

size_t
chash_ring_member_points(const struct chash_ring *r, size_t m)
{
    return m < r->nmembers ? r->members[m].points : 0;
}

size_t
chash_ring_points(const struct chash_ring *r)
{
    return r->cont.npoints ? r->cont.npoints : (size_t)r->total_points;
}

size_t
chash_ring_memory(const struct chash_ring *r)
{
    size_t bytes = sizeof(*r) + chash__continuum_memory(&r->cont);
    /* By the configured algorithm, not r->ops: a zoned ring counts as a
     * ring of its algorithm. */
    const struct chash__ops *algo = algo_ops[r->cfg.algo];

    bytes += r->nmembers *
             (sizeof(*r->members) + sizeof(*r->by_name) + sizeof(*r->share));
    for (size_t m = 0; m < r->nmembers; m++)
        bytes += r->members[m].namelen + 1;
    if (algo->state_memory != NULL)
        bytes += algo->state_memory(&r->cfg);
    return bytes;
}

uint64_t
chash_ring_checksum(const struct chash_ring *r)
{
    return r->checksum;
}

void
chash_ring_config(const struct chash_ring *r, struct chash_config *cfg)
{
    *cfg = r->cfg;
}

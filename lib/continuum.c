/* continuum.c -- the sorted-points engine behind the ring, ketama and nginx
 * algorithms (and zring's flattened rings): build with a bucket index, O(1)
 * expected successor lookup, exact shares from arcs, exact diffs by merging
 * two point arrays, and the ring operations built on them that those
 * algorithms put in their ops tables. Calls nothing else in lib/.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/*
 * Sorting. Points are sorted by (pos, tie). A least-significant-digit
 * radix sort over the 64-bit position, 16 bits a pass, is stable, so
 * sorting by tie first (a cheap comparison sort is not needed: builders
 * emit points in tie order already, see chash__continuum_build) and then
 * by position gives (pos, tie) order. Four passes over 160k points take a
 * fraction of what qsort's comparator calls cost, which keeps a
 * 1000 x 160 ring build well under the 30 ms target.
 */
static int
cmp_tie(const void *a, const void *b)
{
    const struct chash__point *x = a, *y = b;
    return (x->tie > y->tie) - (x->tie < y->tie);
}

static int
radix_sort(struct chash__point *pts, size_t n)
{
    struct chash__point *tmp, *src = pts, *dst;
    size_t *count;

    tmp = malloc(n * sizeof(*tmp));
    count = malloc(65536 * sizeof(*count));
    if (tmp == NULL || count == NULL) {
        free(tmp);
        free(count);
        return -CHASH_ENOMEM;
    }
    dst = tmp;
    for (unsigned pass = 0; pass < 4; pass++) {
        unsigned sh = pass * 16;
        size_t sum = 0;

        memset(count, 0, 65536 * sizeof(*count));
        for (size_t i = 0; i < n; i++)
            count[(src[i].pos >> sh) & 0xffff]++;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i].pos >> sh) & 0xffff]++] = src[i];
        struct chash__point *t = src;
        src = dst;
        dst = t;
    }
    /* Four passes: the sorted data is back in <pts>. */
    free(tmp);
    free(count);
    return 0;
}

static bool
tie_sorted(const struct chash__point *pts, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (pts[i - 1].tie > pts[i].tie)
            return false;
    return true;
}

int
chash__continuum_build(struct chash__continuum *c, struct chash__point *pts,
                       size_t n, bool dedup)
{
    size_t buckets, m;
    unsigned bits;
    int rc;

    memset(c, 0, sizeof(*c));
    if (n == 0 || n > UINT32_MAX)
        return n == 0 ? -CHASH_EEMPTY : -CHASH_ETOOMANY;
    if (!tie_sorted(pts, n))
        qsort(pts, n, sizeof(*pts), cmp_tie);
    rc = radix_sort(pts, n);
    if (rc != 0)
        return rc;

    /* The bucket count is the largest power of two not above n (at least
     * 2): about one to two points per bucket, and at most 4 bytes of
     * index per point. */
    for (bits = 1; bits < 63 && ((size_t)2 << bits) <= n; bits++)
        ;
    buckets = (size_t)1 << bits;
    c->pos = malloc(n * sizeof(*c->pos));
    c->owner = malloc(n * sizeof(*c->owner));
    c->index = malloc((buckets + 1) * sizeof(*c->index));
    if (c->pos == NULL || c->owner == NULL || c->index == NULL) {
        chash__continuum_deinit(c);
        return -CHASH_ENOMEM;
    }
    m = 0;
    for (size_t i = 0; i < n; i++) {
        if (dedup && m > 0 && c->pos[m - 1] == pts[i].pos)
            continue;
        c->pos[m] = pts[i].pos;
        c->owner[m] = pts[i].owner;
        m++;
    }
    c->npoints = m;
    c->shift = 64 - bits;
    size_t i = 0;
    for (size_t b = 0; b <= buckets; b++) {
        while (i < m && (c->pos[i] >> c->shift) < b)
            i++;
        c->index[b] = (uint32_t)i;
    }
    return 0;
}

void
chash__continuum_deinit(struct chash__continuum *c)
{
    free(c->pos);
    free(c->owner);
    free(c->index);
    memset(c, 0, sizeof(*c));
}

size_t
chash__continuum_memory(const struct chash__continuum *c)
{
    size_t buckets = c->npoints ? ((size_t)1 << (64 - c->shift)) + 1 : 0;
    return c->npoints * (sizeof(*c->pos) + sizeof(*c->owner)) +
           buckets * sizeof(*c->index);
}

void
chash__continuum_shares(const struct chash__continuum *c, double *share,
                        size_t nmem)
{
    unsigned __int128 *sum = calloc(nmem ? nmem : 1, sizeof(*sum));
    const double two64 = 18446744073709551616.0;

    for (size_t m = 0; m < nmem; m++)
        share[m] = 0;
    if (c->npoints == 0)
        goto out;
    if (sum == NULL) {
        /* Without the scratch array, sum in doubles: a rounding error of
         * 1e-16 per point, still far below any sampling error. */
        for (size_t i = 0; i < c->npoints; i++) {
            uint64_t arc = c->pos[i] - c->pos[i ? i - 1 : c->npoints - 1];
            share[c->owner[i]] += (double)arc / two64;
        }
        if (c->npoints == 1)
            share[c->owner[0]] = 1.0;
        goto out;
    }
    /* Point i owns the arc (pos[i-1], pos[i]]; point 0 also owns the wrap
     * from the last point, which unsigned subtraction gives for free. */
    for (size_t i = 0; i < c->npoints; i++) {
        uint64_t arc = c->pos[i] - c->pos[i ? i - 1 : c->npoints - 1];
        sum[c->owner[i]] += arc;
    }
    if (c->npoints == 1)
        sum[c->owner[0]] = (unsigned __int128)1 << 64;
    for (size_t m = 0; m < nmem; m++)
        share[m] = (double)sum[m] / two64;
out:
    free(sum);
}

/* Segments are reported in runs: consecutive segments with the same pair
 * of owners are summed before the callback sees them. */
struct run {
    chash__segment_fn fn;
    void *ctx;
    size_t from, to;
    unsigned __int128 len;
};

static void
run_add(struct run *r, size_t from, size_t to, unsigned __int128 len)
{
    if (len == 0)
        return;
    if (r->len > 0 && (r->from != from || r->to != to)) {
        r->fn(r->ctx, r->from, r->to, (double)r->len / 18446744073709551616.0);
        r->len = 0;
    }
    r->from = from;
    r->to = to;
    r->len += len;
}

/*
 * Walk the union of both point sets in order. Between two consecutive
 * positions of the union no point of either continuum lies strictly
 * inside, so a hash in (prev, p] goes, in each continuum, to its first
 * point >= p: the one the merge cursor stands on. The measure is exact:
 * [0, p0] holds p0 + 1 hashes, (prev, p] holds p - prev, and the wrap
 * (plast, 2^64 - 1] goes to both continua's point 0.
 */
void
chash__continuum_diff(const struct chash__continuum *a,
                      const struct chash__continuum *b, chash__segment_fn fn,
                      void *ctx)
{
    struct run r = {fn, ctx, 0, 0, 0};
    size_t i = 0, j = 0;
    uint64_t prev = 0;
    bool first = true;

    while (i < a->npoints || j < b->npoints) {
        uint64_t p;
        if (j >= b->npoints || (i < a->npoints && a->pos[i] <= b->pos[j]))
            p = a->pos[i];
        else
            p = b->pos[j];
        size_t oa = a->owner[i < a->npoints ? i : 0];
        size_t ob = b->owner[j < b->npoints ? j : 0];
        unsigned __int128 len = first ? (unsigned __int128)p + 1 : p - prev;
        run_add(&r, oa, ob, len);
        while (i < a->npoints && a->pos[i] == p)
            i++;
        while (j < b->npoints && b->pos[j] == p)
            j++;
        prev = p;
        first = false;
    }
    if (!first)
        run_add(&r, a->owner[0], b->owner[0], UINT64_MAX - prev);
    run_add(&r, SIZE_MAX, SIZE_MAX, 1); /* flush */
}

/* ---- ring operations over r->cont, for the algorithms' ops tables ----- */

size_t
chash__continuum_lookup(const struct chash_ring *r, uint64_t hash)
{
    return r->cont.owner[chash__continuum_find(&r->cont, hash << r->pos_shift)];
}

/* Walk the continuum clockwise from the position of <hash>, collecting distinct
 * owners. Distinctness is checked against what was taken so far: n is small in
 * every use (replicas, failover), and the walk ends after one lap. */
size_t
chash__continuum_lookup_n(const struct chash_ring *r, uint64_t hash,
                          size_t *out, size_t n)
{
    const struct chash__continuum *c = &r->cont;
    size_t i = chash__continuum_find(c, hash << r->pos_shift), got = 0;

    for (size_t step = 0; step < c->npoints && got < n; step++) {
        size_t o = c->owner[i], k;
        for (k = 0; k < got && out[k] != o; k++)
            ;
        if (k == got)
            out[got++] = o;
        if (++i == c->npoints)
            i = 0;
    }
    return got;
}

void
chash__continuum_ring_shares(struct chash_ring *r)
{
    chash__continuum_shares(&r->cont, r->share, r->nmembers);
}

void
chash__continuum_ring_diff(const struct chash_ring *a,
                           const struct chash_ring *b, chash__segment_fn fn,
                           void *ctx)
{
    chash__continuum_diff(&a->cont, &b->cont, fn, ctx);
}

/* Every point's position and its owner's name hash, in position order:
 * two continua with the same points and owner names sum the same. */
uint64_t
chash__continuum_ring_checksum(const struct chash_ring *r, uint64_t acc,
                               const uint64_t *name_hash)
{
    for (size_t i = 0; i < r->cont.npoints; i++) {
        acc = chash__checksum_mix(acc, r->cont.pos[i]);
        acc = chash__checksum_mix(acc, name_hash[r->cont.owner[i]]);
    }
    return acc;
}

/* jump.c -- jump consistent hash (Lamping and Veach, 2014) for numbered
 * shards (CHASH_ALGO_JUMP): no table, no points, O(ln n) arithmetic steps
 * map a 64-bit key hash to a bucket 0..n-1.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Definition (see doc/internals/algorithms.md):
 * - Buckets are the members in ARRAY order: member i is bucket i. Here,
 *   unlike every other algorithm, the order is the identity: the names are
 *   labels, and reordering the array reassigns the keys. Jump is for
 *   numbered shards (partitions 0..n-1) where that is what one wants.
 * - jump(h, n): b = -1, j = 0; while j < n: b = j,
 *   h = h * 2862933555777941757 + 1,
 *   j = floor((b + 1) * 2^31 / ((h >> 33) + 1)).
 * - Weights: 1 (a bucket) or 0 (a drained bucket that keeps its number but
 *   owns nothing). Other weights are refused with -CHASH_EWEIGHT: jump has
 *   no notion of capacity. Ramps other than 1 on a weight-1 member are
 *   refused with -CHASH_ENOTSUP: jump cannot take part of a bucket.
 * - Preference order (lookup_n, failover, and the owner when the first
 *   bucket is drained): choice 0 is jump(h, n); choice k >= 1 is
 *   jump(h_k, n - k) mapped onto the buckets not chosen yet, in array
 *   order, with h_k = fmix64(h + k * 0x9e3779b97f4a7c15). Each choice is
 *   uniform over the remaining buckets, so a failed or drained bucket's
 *   keys spread evenly over all the others (no neighbour takes them all).
 *   Drained buckets are skipped in that order.
 *
 * Properties (tests/unit/test_algos.c):
 * - Deterministic: a function of the key hash and the array (bucket
 *   order); no state but the drained flags.
 * - Minimal movement for the operations jump supports: appending bucket n
 *   moves exactly the keys that go to it (1/(n+1)); removing the LAST
 *   bucket moves only its keys; draining any bucket (weight 0) moves only
 *   its keys. Removing a bucket from the middle renumbers the ones after
 *   it and moves many keys: that is jump's nature, not a bug.
 * - share = 1/owners in closed form (keys of drained buckets are spread
 *   uniformly by the preference order); diff is measured on 2^20 evenly
 *   spaced hashes (chash.c).
 */
#include "internal.h"

#include <stdlib.h>

#include "hash.h"

/* Lamping and Veach's jump: bucket in [0, n) for key <h>, n >= 1. */
static size_t
jump(uint64_t h, size_t n)
{
    int64_t b = -1, j = 0;

    while (j < (int64_t)n) {
        b = j;
        h = h * 2862933555777941757ULL + 1;
        j = (int64_t)((double)(b + 1) *
                      ((double)(1LL << 31) / (double)((h >> 33) + 1)));
    }
    return (size_t)b;
}

static int
jump_build(struct chash_ring *r)
{
    for (size_t m = 0; m < r->nmembers; m++) {
        struct chash__member *mem = &r->members[m];
        if (mem->weight > 1)
            return -CHASH_EWEIGHT;
        if (mem->weight == 1 && mem->ramp != 1.0)
            return -CHASH_ENOTSUP;
        mem->points = mem->weight;
    }
    return 0;
}

/*
 * Choices 0..: the preference order over all buckets, drained or not.
 * <chosen> holds the k choices made so far, <sorted> the same ascending
 * (for the mapping onto the remaining buckets). Returns choice k.
 */
static size_t
next_choice(uint64_t h, size_t n, size_t k, const size_t *sorted)
{
    size_t j;

    if (k == 0)
        return jump(h, n);
    j = jump(chash__fmix64(h + (uint64_t)k * 0x9e3779b97f4a7c15ULL), n - k);
    /* The j-th (0-based) bucket not chosen yet: step over the chosen
     * ones at or below it, in ascending order. */
    for (size_t i = 0; i < k && sorted[i] <= j; i++)
        j++;
    return j;
}

static void
sorted_insert(size_t *sorted, size_t k, size_t b)
{
    size_t i = k;

    while (i > 0 && sorted[i - 1] > b) {
        sorted[i] = sorted[i - 1];
        i--;
    }
    sorted[i] = b;
}

/* Walk the preference order, skipping drained buckets, until <n> owners
 * are in <out>. <sorted> has room for r->nmembers entries. */
static size_t
walk(const struct chash_ring *r, uint64_t h, size_t *out, size_t n,
     size_t *sorted)
{
    size_t got = 0;

    for (size_t k = 0; k < r->nmembers && got < n; k++) {
        size_t b = next_choice(h, r->nmembers, k, sorted);
        sorted_insert(sorted, k, b);
        if (r->members[b].points > 0)
            out[got++] = b;
    }
    return got;
}

static size_t
jump_lookup_n(const struct chash_ring *r, uint64_t h, size_t *out, size_t n)
{
    enum { SMALL = 64 };
    size_t buf[SMALL], *sorted = buf, got;

    /* The stack buffer covers every walk that stops within 64 choices:
     * all small pools, and any n when few buckets are drained. */
    if (r->nmembers > SMALL) {
        sorted = malloc(r->nmembers * sizeof(*sorted));
        if (sorted == NULL) {
            /* A lookup cannot fail: without memory, take the owners in
             * array order after the first choice. A degraded order, used
             * only past 64 buckets and only while malloc fails. */
            size_t b = jump(h, r->nmembers);
            for (got = 0; got < n; b = (b + 1) % r->nmembers)
                if (r->members[b].points > 0)
                    out[got++] = b;
            return got;
        }
    }
    got = walk(r, h, out, n, sorted);
    if (sorted != buf)
        free(sorted);
    return got;
}

static size_t
jump_lookup(const struct chash_ring *r, uint64_t h)
{
    size_t b = jump(h, r->nmembers), out;

    if (r->members[b].points > 0)
        return b;
    jump_lookup_n(r, h, &out, 1);
    return out;
}

static void
jump_shares(struct chash_ring *r)
{
    for (size_t m = 0; m < r->nmembers; m++)
        r->share[m] = r->members[m].points ? 1.0 / (double)r->nowners : 0.0;
}

static uint64_t
jump_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    int id = r->cfg.hash;
    return chash__widen(chash_hash(id, key, len), chash_hash_bits(id));
}

/* No points: O(n) state, one bucket a member. */
static uint64_t
jump_points_needed(const struct chash_config *cfg,
                   const struct chash_member *members, size_t n)
{
    (void)cfg;
    (void)members;
    return n;
}

/* The members in array order, its identity (not by name as the others),
 * each with its points (1, or 0 when drained). */
static uint64_t
jump_checksum(const struct chash_ring *r, uint64_t acc,
              const uint64_t *name_hash)
{
    for (size_t m = 0; m < r->nmembers; m++) {
        acc = chash__checksum_mix(acc, name_hash[m]);
        acc = chash__checksum_mix(acc, r->members[m].points);
    }
    return acc;
}

const struct chash__ops chash__jump_ops = {
    .name = "jump",
    .build = jump_build,
    .lookup = jump_lookup,
    .lookup_n = jump_lookup_n,
    .shares = jump_shares,
    .diff = NULL,
    .key_hash = jump_key_hash,
    .points_needed = jump_points_needed,
    .checksum = jump_checksum,
    .exact_diff = false,
};

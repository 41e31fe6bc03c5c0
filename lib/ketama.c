/* ketama.c -- the twemproxy / libmemcached ketama continuum
 * (CHASH_ALGO_KETAMA), point for point: md5("name-i") gives four 32-bit
 * points, the point count comes from twemproxy's binary32 formula, and a key
 * goes to the first point at or after its 32-bit hash, wrapping around.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Definition (twemproxy src/hashkit/nc_ketama.c, libmemcached hosts.cc with
 * MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED; see doc/internals/algorithms.md):
 * - Live servers are the members with weight > 0. They are ordered as
 *   twemproxy orders its server array: by name length, then bytewise. That
 *   order only breaks exact ties between points (below), and as it depends
 *   on the names only, the ring is history-free.
 * - With n live servers of total weight W, a server of weight w gets
 *       pct = f32(w) / f32(W)
 *       pps = floor(f32(f32(f32(f32(pct * 160) / 4) * f32(n)) + 1e-10)) * 4
 *   points, every operation in binary32 (the + 1e-10 in double, cast back to
 *   float). So 25 equal servers get 156 points each, not 160, as twemproxy.
 * - Point 4*i + a of a server is LE32(md5(name "-" i), a), i = 0, 1, ...
 *   The name is hashed exactly as given (the "host when the port is 11211"
 *   rule belongs to the config loader).
 * - Points are sorted by value; equal values keep server order then point
 *   order (twemproxy's glibc qsort is a stable merge sort; libmemcached
 *   sorts by value then server index: the same order).
 * - A key's hash is the ring's configured hash (32-bit; a 64-bit function
 *   contributes its low 32 bits) and an empty key hashes to 0, as in
 *   twemproxy. A lookup uses the low 32 bits of the value it is given.
 *
 * Properties (tests/unit/test_algos.c, vectors in tests/unit/test_compat.c):
 * - Deterministic and history-free: points depend on names and weights
 *   only; ties are broken by the name order above.
 * - Minimal movement holds exactly while the other servers' point counts do
 *   not change: with equal weights, adding or removing a server moves keys
 *   only to or from it unless n crosses one of the binary32 quirk counts
 *   (n = 25, 47, 50, ... give 156 points a server). With unequal weights the
 *   formula floor(40 n w / W) * 4 changes every server's count when n or W
 *   changes; that is twemproxy's behaviour and we keep it on purpose. The
 *   measured extra movement is in doc/internals/algorithms.md.
 * - Slow start: ramp r keeps the first floor(r * pps) points of the member
 *   (in generation order); the counts of the others are computed from the
 *   full weights, so raising r only adds points of that member (monotone,
 *   keys move only onto it). At r = 1 the ring is twemproxy's exactly.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define KETAMA_POINTS 160 /* per server of average weight */

/* Twemproxy's server order: shorter names first, then bytewise. */
static int
tw_name_cmp(const struct chash__member *a, const struct chash__member *b)
{
    if (a->namelen != b->namelen)
        return a->namelen > b->namelen ? 1 : -1;
    return memcmp(a->name, b->name, a->namelen);
}

/*
 * Twemproxy's point count for a server of <weight> among <nlive> live
 * servers of <total> weight. Every intermediate is stored through a
 * volatile float so the compiler can neither keep excess precision nor
 * contract a multiply and an add into an FMA: each step is rounded to
 * binary32 exactly as twemproxy's x86-64 build rounds it.
 */
static uint32_t
ketama_points(uint32_t weight, uint32_t total, uint32_t nlive)
{
    volatile float pct, x;
    volatile double d;
    float f;

    pct = (float)weight / (float)total;
    x = pct * (float)KETAMA_POINTS;
    x = x / 4.0f;
    x = x * (float)nlive;
    d = (double)x + 0.0000000001;
    f = (float)d;
    return (uint32_t)floorf(f) * 4;
}

/* The 32-bit point a (0..3) of hash string i: md5 bytes 4a..4a+3, LE. */
static uint32_t
le32(const unsigned char *d)
{
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 |
           (uint32_t)d[3] << 24;
}

static int
ketama_build(struct chash_ring *r)
{
    uint32_t *order = NULL, *tmp = NULL;
    struct chash__point *pts = NULL;
    char *buf = NULL;
    size_t nlive = 0, total = 0, k = 0, maxlen = 0;
    uint64_t wsum = 0;
    int rc = -CHASH_ENOMEM;

    order = malloc(r->nmembers * sizeof(*order));
    tmp = malloc(r->nmembers * sizeof(*tmp));
    if (order == NULL || tmp == NULL)
        goto out;
    for (size_t m = 0; m < r->nmembers; m++) {
        r->members[m].points = 0;
        if (r->members[m].weight == 0)
            continue;
        order[nlive++] = (uint32_t)m;
        wsum += r->members[m].weight;
        if (r->members[m].namelen > maxlen)
            maxlen = r->members[m].namelen;
    }
    rc = -CHASH_EEMPTY;
    if (nlive == 0)
        goto out;
    /* twemproxy sums weights in a uint32_t; a total that would wrap is
     * beyond any real configuration and is refused rather than wrapped. */
    rc = -CHASH_EWEIGHT;
    if (wsum > UINT32_MAX)
        goto out;
    chash__sort_members(r, order, tmp, nlive, tw_name_cmp);
    for (size_t k2 = 0; k2 < nlive; k2++) {
        uint32_t m = order[k2];
        struct chash__member *mem = &r->members[m];
        uint32_t pps =
            ketama_points(mem->weight, (uint32_t)wsum, (uint32_t)nlive);
        size_t kept;
        if (pps > CHASH_MAX_MEMBER_POINTS)
            goto out;
        kept = (size_t)floor(mem->ramp * (double)pps);
        mem->points = kept > pps ? pps : kept;
        total += mem->points;
    }
    rc = -CHASH_EEMPTY;
    if (total == 0)
        goto out;
    rc = -CHASH_ENOMEM;
    pts = malloc(total * sizeof(*pts));
    buf = malloc(maxlen + 16);
    if (pts == NULL || buf == NULL)
        goto out;
    for (size_t rank = 0; rank < nlive; rank++) {
        uint32_t m = order[rank];
        const struct chash__member *mem = &r->members[m];
        unsigned char d[16];
        for (size_t j = 0; j < mem->points; j++) {
            if (j % 4 == 0) {
                /* "%.*s-%u": the name, a dash, the hash index in decimal */
                int len =
                    snprintf(buf, maxlen + 16, "%s-%zu", mem->name, j / 4);
                chash__md5(buf, (size_t)len, d);
            }
            pts[k].pos = (uint64_t)le32(d + 4 * (j % 4)) << 32;
            pts[k].tie = (uint64_t)rank << 32 | j;
            pts[k].owner = m;
            k++;
        }
    }
    r->pos_shift = 32;
    rc = chash__continuum_build(&r->cont, pts, total, false);
out:
    free(order);
    free(tmp);
    free(pts);
    free(buf);
    return rc;
}

/* twemproxy: hash = keylen == 0 ? 0 : hash(key), a uint32_t. */
static uint64_t
ketama_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    if (len == 0)
        return 0;
    return chash_hash(r->cfg.hash, key, len) & 0xffffffffu;
}

/* What ketama_build allocates: the full weights' counts (ramps only
 * shrink them), each capped. */
static uint64_t
ketama_points_needed(const struct chash_config *cfg,
                     const struct chash_member *members, size_t n)
{
    uint64_t total = 0, wsum = 0;
    size_t nlive = 0;

    (void)cfg;
    for (size_t i = 0; i < n; i++) {
        wsum += members[i].weight;
        nlive += members[i].weight > 0;
    }
    if (wsum > UINT32_MAX)
        return UINT64_MAX; /* create refuses it (EWEIGHT) */
    for (size_t i = 0; i < n; i++)
        if (members[i].weight > 0)
            total += chash__cap_points(ketama_points(
                members[i].weight, (uint32_t)wsum, (uint32_t)nlive));
    return total;
}

const struct chash__ops chash__ketama_ops = {
    .name = "ketama",
    .build = ketama_build,
    .lookup = chash__continuum_lookup,
    .lookup_n = chash__continuum_lookup_n,
    .shares = chash__continuum_ring_shares,
    .diff = chash__continuum_ring_diff,
    .key_hash = ketama_key_hash,
    .points_needed = ketama_points_needed,
    .checksum = chash__continuum_ring_checksum,
    .exact_diff = true,
};

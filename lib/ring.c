/* ring.c -- the weighted consistent-hash ring (CHASH_ALGO_RING): each member
 * owns weight x points_per_weight points at xxh3(name bytes, point index as
 * 4 bytes little-endian);
 * a key belongs to the first point clockwise from its hash.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Properties (proved in tests/unit/test_ring.c):
 * - Deterministic and history-free: a point's position depends only on
 *   its member's name and its index, and equal positions are ordered by
 *   name, so the same membership gives the same ring in any array order.
 *   There is no add/remove API to drift: a ring is rebuilt from its
 *   membership, and building 1000 x 160 points takes a few milliseconds.
 * - Minimal movement: adding a member adds its points and nothing else, so
 *   keys move only to it; removing one moves only its keys; changing a
 *   weight adds or removes points of that member only.
 * - Monotone slow start: ramp r keeps the first floor(r x points) point
 *   indexes of the member, so raising r only adds points of that member.
 * - Frozen placement: doc/internals/placement.md, with golden vectors.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

/*
 * Where point <j> of the member named <name> sits: XXH3-64 (seed 0) of the
 * name's bytes followed by j as 4 bytes little-endian. Frozen: see
 * doc/internals/placement.md.
 *
 * Why not XXH3 with seed j (the first design): on inputs of up to 16 bytes
 * XXH3 folds the seed into the input with one XOR or addition, so for short
 * names that differ in their last bytes ("db1", "db2") point j of one and
 * point j' of the other hash the same value, and one member ended up with
 * 99% of the circle. With the index in the input, two different (name, j)
 * of the same length are two different inputs of one bijective mixing
 * path, so they can never collide that way.
 */
static uint64_t
point_pos(const char *name, size_t namelen, uint32_t j, unsigned char *buf)
{
    memcpy(buf, name, namelen);
    buf[namelen] = (unsigned char)j;
    buf[namelen + 1] = (unsigned char)(j >> 8);
    buf[namelen + 2] = (unsigned char)(j >> 16);
    buf[namelen + 3] = (unsigned char)(j >> 24);
    return chash__xxh3(buf, namelen + 4);
}

/* Points of member <m> before and after its ramp. */
static int
count_points(const struct chash_ring *r, size_t m, size_t *full, size_t *kept)
{
    const struct chash__member *mem = &r->members[m];
    uint64_t total = (uint64_t)mem->weight * r->cfg.points_per_weight;

    if (total > CHASH_MAX_MEMBER_POINTS)
        return -CHASH_EWEIGHT;
    *full = (size_t)total;
    *kept = (size_t)floor(mem->ramp * (double)total);
    if (*kept > *full) /* ramp == 1 with rounding: cannot exceed */
        *kept = *full;
    return 0;
}

static int
ring_build(struct chash_ring *r)
{
    struct chash__point *pts;
    unsigned char *buf;
    size_t total = 0, full, kept, k = 0, maxlen = 0;
    int rc;

    for (size_t m = 0; m < r->nmembers; m++) {
        rc = count_points(r, m, &full, &kept);
        if (rc != 0)
            return rc;
        r->members[m].points = kept;
        total += kept;
        if (r->members[m].namelen > maxlen)
            maxlen = r->members[m].namelen;
    }
    if (total == 0)
        return -CHASH_EEMPTY;
    pts = malloc(total * sizeof(*pts));
    buf = malloc(maxlen + 4);
    if (pts == NULL || buf == NULL) {
        free(pts);
        free(buf);
        return -CHASH_ENOMEM;
    }
    /* Emit in name order, so the tie value (name rank, point index) is
     * already ascending and two members at the same position are ordered
     * by name, whatever the array order. */
    for (size_t rank = 0; rank < r->nmembers; rank++) {
        uint32_t m = r->by_name[rank];
        const struct chash__member *mem = &r->members[m];
        for (size_t j = 0; j < mem->points; j++) {
            pts[k].pos = point_pos(mem->name, mem->namelen, (uint32_t)j, buf);
            pts[k].tie = (uint64_t)rank << 32 | j;
            pts[k].owner = m;
            k++;
        }
    }
    r->pos_shift = 0;
    rc = chash__continuum_build(&r->cont, pts, total, false);
    free(pts);
    free(buf);
    return rc;
}

static uint64_t
ring_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    int id = r->cfg.hash;
    return chash__widen(chash_hash(id, key, len), chash_hash_bits(id));
}

static uint64_t
ring_points_needed(const struct chash_config *cfg,
                   const struct chash_member *members, size_t n)
{
    return chash__points_by_weight(members, n, cfg->points_per_weight);
}

const struct chash__ops chash__ring_ops = {
    .name = "ring",
    .build = ring_build,
    .lookup = chash__continuum_lookup,
    .lookup_n = chash__continuum_lookup_n,
    .shares = chash__continuum_ring_shares,
    .diff = chash__continuum_ring_diff,
    .key_hash = ring_key_hash,
    .points_needed = ring_points_needed,
    .checksum = chash__continuum_ring_checksum,
    .exact_diff = true,
};

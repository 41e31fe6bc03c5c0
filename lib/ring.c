/* ring.c -- the weighted consistent-hash ring (CHASH_ALGO_RING): each member
 * owns weight x points_per_weight points at xxh3(name, seed = point index);
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

#include "hash.h"

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
    size_t total = 0, full, kept, k = 0;
    int rc;

    for (size_t m = 0; m < r->nmembers; m++) {
        rc = count_points(r, m, &full, &kept);
        if (rc != 0)
            return rc;
        r->members[m].points = kept;
        total += kept;
    }
    if (total == 0)
        return -CHASH_EEMPTY;
    pts = malloc(total * sizeof(*pts));
    if (pts == NULL)
        return -CHASH_ENOMEM;
    /* Emit in name order, so the tie value (name rank, point index) is
     * already ascending and two members at the same position are ordered
     * by name, whatever the array order. */
    for (size_t rank = 0; rank < r->nmembers; rank++) {
        uint32_t m = r->by_name[rank];
        const struct chash__member *mem = &r->members[m];
        for (size_t j = 0; j < mem->points; j++) {
            pts[k].pos = chash__xxh3_seed(mem->name, mem->namelen, j);
            pts[k].tie = (uint64_t)rank << 32 | j;
            pts[k].owner = m;
            k++;
        }
    }
    r->pos_shift = 0;
    rc = chash__continuum_build(&r->cont, pts, total, false);
    free(pts);
    return rc;
}

static uint64_t
ring_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    int id = r->cfg.hash;
    return chash__widen(chash_hash(id, key, len), chash_hash_bits(id));
}

const struct chash__ops chash__ring_ops = {
    .build = ring_build,
    .lookup = chash__continuum_lookup,
    .lookup_n = chash__continuum_lookup_n,
    .shares = chash__continuum_ring_shares,
    .diff = chash__continuum_ring_diff,
    .key_hash = ring_key_hash,
    .exact_diff = true,
};

/* member.c -- helpers over a membership that chash.c, the algorithms and
 * zring.c share: the stable sort of member indexes and the point counts a
 * create will need (chash_ring_points_needed).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

#include <string.h>

/* Sort member indexes <order>[0..n) by <cmp> of the members, stably.
 * qsort has no context argument in C11 and a file-static one would race
 * between threads creating rings, so this is a small bottom-up merge sort
 * using <tmp> (n entries) as scratch. */
void
chash__sort_members(const struct chash_ring *r, uint32_t *order, uint32_t *tmp,
                    size_t n, chash__member_cmp cmp)
{
    uint32_t *src = order, *dst = tmp;

    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (cmp(&r->members[src[i]], &r->members[src[j]]) <= 0)
                    dst[k++] = src[i++];
                else
                    dst[k++] = src[j++];
            }
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != order)
        memcpy(order, src, n * sizeof(*src));
}

/* A member over CHASH_MAX_MEMBER_POINTS is refused by create (EWEIGHT):
 * counted at the cap, so a caller's size check does not hide that error
 * behind its own. */
uint64_t
chash__cap_points(uint64_t points)
{
    return points > CHASH_MAX_MEMBER_POINTS ? CHASH_MAX_MEMBER_POINTS : points;
}

uint64_t
chash__points_by_weight(const struct chash_member *members, size_t n,
                        uint64_t per_weight)
{
    uint64_t total = 0;

    for (size_t i = 0; i < n; i++)
        total += chash__cap_points((uint64_t)members[i].weight * per_weight);
    return total;
}

/* ring.h -- how chashd and the CLI build a pool's ring: flat
 * (chash_ring_create), or zone-then-member (chash_ring_create_zoned) for a
 * pool with zone_policy: hierarchical, each member's zone given beside it.
 * A header alone: the config loader, the daemon and the CLI each link a
 * different set of modules.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_RING_H
#define CHASHD_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "chash/chash.h"

/* The ring of members <m>[0..<n>): zoned when <zoned> (member i in zone
 * <zones>[i], none NULL), else flat. 0 or a negated CHASH_E*. */
static inline int
ring_create(const struct chash_config *cfg, bool zoned,
            const struct chash_member *m, const char *const *zones, size_t n,
            struct chash_ring **out)
{
    struct chash_zmember *zm;
    int rc;

    if (!zoned)
        return chash_ring_create(cfg, m, n, out);
    if (zones == NULL)
        return -CHASH_EINVAL;
    if ((zm = calloc(n ? n : 1, sizeof(*zm))) == NULL)
        return -CHASH_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        zm[i].name = m[i].name;
        zm[i].zone = zones[i];
        zm[i].weight = m[i].weight;
        zm[i].ramp = m[i].ramp;
    }
    rc = chash_ring_create_zoned(cfg, zm, n, NULL, 0, out);
    free(zm);
    return rc;
}

#endif /* CHASHD_RING_H */

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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"

/* A zone's weight when it is not its members' sum (`zone_weights:`),
 * held inline so that settings copy it by value. */
#define RING_ZONE_WEIGHTS_MAX 16
struct ring_zone_weight {
    char zone[64];
    uint32_t weight;
};

/* The ring of members <m>[0..<n>): zoned when <zoned> (member i in zone
 * <zones>[i], none NULL; the zones of <zw> (<nzw>) weigh what it says,
 * the others their members' sum), else flat. 0 or a negated CHASH_E*. */
static inline int
ring_create(const struct chash_config *cfg, bool zoned,
            const struct chash_member *m, const char *const *zones, size_t n,
            const struct ring_zone_weight *zw, size_t nzw,
            struct chash_ring **out)
{
    struct chash_zone_weight w[RING_ZONE_WEIGHTS_MAX];
    struct chash_zmember *zm;
    size_t nw = 0;
    int rc;

    if (!zoned)
        return chash_ring_create(cfg, m, n, out);
    if (zones == NULL)
        return -CHASH_EINVAL;
    /* a weight for a zone without a member now (all removed) waits */
    for (size_t k = 0; k < nzw && nw < RING_ZONE_WEIGHTS_MAX; k++)
        for (size_t i = 0; i < n; i++)
            if (zones[i] != NULL && strcmp(zones[i], zw[k].zone) == 0) {
                w[nw].zone = zw[k].zone;
                w[nw++].weight = zw[k].weight;
                break;
            }
    if ((zm = calloc(n ? n : 1, sizeof(*zm))) == NULL)
        return -CHASH_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        zm[i].name = m[i].name;
        zm[i].zone = zones[i];
        zm[i].weight = m[i].weight;
        zm[i].ramp = m[i].ramp;
    }
    rc = chash_ring_create_zoned(cfg, zm, n, w, nw, out);
    free(zm);
    return rc;
}

#endif /* CHASHD_RING_H */

/* maglev.c -- placeholder until the maglev algorithm lands (issue 3).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

static int
maglev_build(struct chash_ring *r)
{
    (void)r;
    return -CHASH_ENOTSUP;
}

const struct chash__ops chash__maglev_ops = {
    .build = maglev_build,
};

/* jump.c -- placeholder until the jump algorithm lands (issue 3).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

static int
jump_build(struct chash_ring *r)
{
    (void)r;
    return -CHASH_ENOTSUP;
}

const struct chash__ops chash__jump_ops = {
    .build = jump_build,
};

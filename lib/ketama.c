/* ketama.c -- placeholder until the ketama algorithm lands (issue 3).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

static int
ketama_build(struct chash_ring *r)
{
    (void)r;
    return -CHASH_ENOTSUP;
}

const struct chash__ops chash__ketama_ops = {
    .build = ketama_build,
};

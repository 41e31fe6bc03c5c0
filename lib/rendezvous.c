/* rendezvous.c -- placeholder until the rendezvous algorithm lands (issue 3).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

static int
rendezvous_build(struct chash_ring *r)
{
    (void)r;
    return -CHASH_ENOTSUP;
}

const struct chash__ops chash__rendezvous_ops = {
    .build = rendezvous_build,
};

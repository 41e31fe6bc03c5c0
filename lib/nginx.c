/* nginx.c -- placeholder until the nginx algorithm lands (issue 3).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "internal.h"

static int
nginx_build(struct chash_ring *r)
{
    (void)r;
    return -CHASH_ENOTSUP;
}

const struct chash__ops chash__nginx_ops = {
    .build = nginx_build,
};

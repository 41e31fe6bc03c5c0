/* fence.c -- the etcd fence's two words (fence.h).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "model/fence.h"

#include <stdatomic.h>

static _Atomic uint64_t fence_until_ms; /* monotonic; 0: no lease yet */
static atomic_bool fence_rejoin;

void
fence_until(uint64_t until_ms)
{
    atomic_store(&fence_until_ms, until_ms);
}

void
fence_rejoining(bool on)
{
    atomic_store(&fence_rejoin, on);
}

bool
fence_is_rejoining(void)
{
    return atomic_load(&fence_rejoin);
}

bool
fence_up(uint64_t now_ms)
{
    uint64_t until =
        atomic_load_explicit(&fence_until_ms, memory_order_relaxed);

    return until != 0 &&
           (now_ms >= until ||
            atomic_load_explicit(&fence_rejoin, memory_order_relaxed));
}

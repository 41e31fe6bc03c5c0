/* fence.h -- the etcd fence as data: whether pools that copy keys and
 * take their members from etcd must answer no key now. The etcd session
 * (control/etcd.c) raises and lowers it; the request path and the
 * copiers read it (any thread, lock-free). The why is in etcd.c, above
 * fence_lease, and doc/etcd.md ("Migration").
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_FENCE_H
#define CHASHD_FENCE_H

#include <stdbool.h>
#include <stdint.h>

/* The lease may have expired from <until_ms> on (CLOCK_MONOTONIC). */
void fence_until(uint64_t until_ms);
/* The lease was lost and this instance is not registered again yet
 * (<on>), or it is back (!<on>). */
void fence_rejoining(bool on);
bool fence_is_rejoining(void);

/* Whether the fence is up at <now_ms> (CLOCK_MONOTONIC): a lease was
 * granted once, and it may have expired since or was lost. */
bool fence_up(uint64_t now_ms);

#endif /* CHASHD_FENCE_H */

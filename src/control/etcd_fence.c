/* etcd_fence.c -- module etcd: the fence of pools that copy keys, both
 * sides of it: the session raises it (the lease granted, renewed or lost),
 * the control thread lowers it (this instance registered again) and logs
 * it. model/fence.h holds it as data for the workers.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include "base/log.h"
#include "conf/conf.h"
#include "model/fence.h"
#include "model/pool.h"

/*
 * The fence of copy pools (doc/etcd.md, "Migration"). The other instances
 * wait for this one's barrier key only while its lease lives: once it may
 * have expired, they may run a migration without this instance, which
 * would still send moving keys to their old owners -- writes lost. So a
 * copy pool answers no key while
 *   - the lease may have expired: no renewal is known to reach past the
 *     fence's until (the send time of the last granted or renewed lease,
 *     plus its TTL, less a margin); the session's calls may block, so the
 *     workers compare the time themselves;
 *   - or the lease was lost and this instance is not back yet: a new
 *     lease (etcd_fence_state.rejoin_lease), its record put under it and
 *     seen back by the watch -- under that lease: a record listed before
 *     a wipe of etcd cannot pass for it -- with every pool change before
 *     it published (then every migration it missed is in its snapshots,
 *     and every later one waits for its barrier).
 */
#define FENCE_MARGIN_MS 250 /* at most; a tenth of shorter leases */

struct etcd_fence etcd_fence_state;

/* The session: a lease of <ttl_s> seconds granted or renewed by a call
 * sent at <sent_ms>. */
void
etcd_fence_lease(uint64_t sent_ms, int64_t ttl_s)
{
    uint64_t ttl = ttl_s > 0 ? (uint64_t)ttl_s * 1000u : etcd_cfg.lease_ttl_ms;

    /* etcd counts the TTL from when it took the call, after <sent_ms>,
     * and revokes later still (its expiry check runs every 500 ms); the
     * margin covers the workers' coarse clock and a slow clock here */
    fence_until(sent_ms + ttl -
                (ttl / 10 < FENCE_MARGIN_MS ? ttl / 10 : FENCE_MARGIN_MS));
}

/* The session: the lease is lost; fenced until this instance is back. */
void
etcd_fence_rejoin(void)
{
    pthread_mutex_lock(&etcd_shared.mu);
    etcd_fence_state.rejoin_lease = 0;
    fence_rejoining(true);
    pthread_mutex_unlock(&etcd_shared.mu);
}

/* A lost lease is behind this instance once its record is seen back
 * under the new lease and every pool change before it is published (the
 * fence, above). */
void
etcd_fence_check(void)
{
    json_t *me = json_object_get(etcd_ctl.instances, etcd_cfg.instance);

    if (!fence_is_rejoining() || etcd_ctl.pending_pubs > 0 || me == NULL)
        return;
    pthread_mutex_lock(&etcd_shared.mu);
    if (etcd_fence_state.rejoin_lease != 0 &&
        etcd_jint(json_array_get(me, 2)) == etcd_fence_state.rejoin_lease)
        fence_rejoining(false);
    pthread_mutex_unlock(&etcd_shared.mu);
}

/* Whether a pool that copies keys takes its members from etcd here. */
bool
etcd_fenced_pools(void)
{
    for (size_t i = 0; i < etcd_ctl.npools; i++) {
        struct pool *p = pool_find(etcd_ctl.pools[i].name);

        if (p != NULL && etcd_pool(p) &&
            p->cfg.migration == CONF_MIGRATION_COPY)
            return true;
    }
    return false;
}

/* The fence's log lines (once each way) and its count. */
void
etcd_fence_tick(uint64_t now_ms)
{
    bool fenced = fence_up(now_ms) && etcd_fenced_pools();

    if (fenced && !etcd_fence_state.said) {
        etcd_fence_state.said = true;
        etcd_fence_state.fences++;
        log_warn("etcd: instance %s %s: pools with migration: copy answer "
                 "every key with an error until it is registered again "
                 "(another instance may move keys without it)",
                 etcd_cfg.instance,
                 fence_is_rejoining()
                     ? "lost its lease"
                     : "could not renew its lease in time: it may have "
                       "expired");
    } else if (!fenced && etcd_fence_state.said) {
        etcd_fence_state.said = false;
        log_info("etcd: instance %s holds its lease and has applied etcd's "
                 "changes: pools with migration: copy serve again",
                 etcd_cfg.instance);
    }
}

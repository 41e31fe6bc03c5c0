/* health.h -- active TCP checks (rise/fall), passive ejection after
 * server_failure_limit connect failures, and re-admission only after a
 * successful probe. Runs on the control thread; the one worker entry is
 * health_passive_failure().
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_HEALTH_H
#define CHASHD_HEALTH_H

#include <stdint.h>

struct server;

/* Register with the control loop (tick and the passive-failure eventfd).
 * 0 or -1. */
int health_init(void);
void health_deinit(void);

/* Cancel <s>'s probe in flight, if any (member removed or in maint). */
void health_cancel(struct server *s);

/*
 * Worker: a member of <p> has failed <fails> connects in a row. When that
 * reaches the pool's server_failure_limit (and auto_eject_hosts is on),
 * wake the control thread, which ejects the member. Lock-free: a write to
 * an eventfd.
 */
struct pool;
void health_passive_failure(struct pool *p, uint32_t fails);

#endif /* CHASHD_HEALTH_H */

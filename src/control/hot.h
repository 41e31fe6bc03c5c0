/* hot.h -- the control thread's side of the hottest keys (doc/hot.md):
 * merging the workers' summaries (model/hotkeys.h), the API's view, the
 * weight proposals, the metrics.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_HOT_H
#define CHASHD_HOT_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "model/hotkeys.h"

struct pool;

/* Register the merge with the control loop (once a second). 0 or -1. */
int hot_init(void);
void hot_deinit(void);
/* GET /api/pools/{pool}/hot: the hottest keys, each member's rate and
 * load ratio. */
json_t *hot_json(struct pool *p);
/*
 * A proposal of weights that brings every member's load ratio (its part of
 * the requests, as last measured, over its capacity: its part of the
 * weights) within <target>. The model: the hot keys are point masses on
 * the member the new ring puts them on, the rest of the load spreads by
 * share; the most loaded member gives 10% of its weight at a time while
 * that helps (weights x10 first when every weight is under 10), at most
 * 64 rings built. Fills <ops> (at most <cap>, membership.h's batch
 * operations naming members of <p>: their names live as long as <p>'s
 * members) and returns how many, or -1 when nothing was measured yet;
 * *<proposal> gets the JSON of it.
 */
struct membership_batch_op;
int hot_rebalance(struct pool *p, double target,
                  struct membership_batch_op *ops, size_t cap,
                  json_t **proposal);
/* The chashd_hot_key_* and chashd_member_*_per_second families. */
void hot_metrics(FILE *f);

#endif /* CHASHD_HOT_H */

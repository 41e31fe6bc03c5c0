/* redis_mode.h -- what the redis mode adds to the request engine: how each
 * class of command is routed, split, merged, fanned out or answered by
 * chashd itself (PING, AUTH, SELECT, INFO, SCAN across members, ...).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_REDIS_MODE_H
#define CHASHD_REDIS_MODE_H

#include "data/request.h"

extern const struct request_mode redis_request_mode;
/* Once, before the first request (data/dispatch.c). */
void redis_mode_init(void);

#endif /* CHASHD_REDIS_MODE_H */

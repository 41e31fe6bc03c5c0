/* memcache_mode.h -- what the memcache mode adds to the request engine:
 * retrievals split per member and merged in the client's key order,
 * noreply and quiet meta requests kept in step with their members,
 * flush_all across members, version, verbosity, stats and mn answered by
 * chashd itself.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_MEMCACHE_MODE_H
#define CHASHD_MEMCACHE_MODE_H

#include "data/request.h"

extern const struct request_mode memcache_request_mode;

#endif /* CHASHD_MEMCACHE_MODE_H */

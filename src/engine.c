/* engine.c -- the table of connection engines, by mode.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "engine.h"

#include "conf.h"
#include "pool.h"
#include "request.h"
#include "splice.h"

engine_accept_fn *
engine_accept(int mode)
{
    switch (mode) {
    case CONF_MODE_TCP:
        return splice_accept;
    case CONF_MODE_REDIS:
        return request_accept;
    default:
        return NULL; /* http, memcache: not served yet */
    }
}

void
engine_listening(struct worker *w, struct pool *p)
{
    if (pool_snapshot(p)->set.mode == CONF_MODE_REDIS)
        request_preconnect(w, p);
}

/* engine.c -- the table of connection engines, by mode.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "engine.h"

#include "conf.h"
#include "splice.h"

engine_accept_fn *
engine_accept(int mode)
{
    switch (mode) {
    case CONF_MODE_TCP:
        return splice_accept;
    default:
        return NULL; /* http, redis, memcache: not served yet */
    }
}

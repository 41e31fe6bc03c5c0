/* proto.c -- the table of mode plug-ins.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto.h"

#include "../conf.h"
#include "tcp.h"

const struct proto *
proto_find(int mode)
{
    switch (mode) {
    case CONF_MODE_TCP:
        return &proto_tcp;
    default:
        return NULL; /* http, redis, memcache: not implemented yet */
    }
}

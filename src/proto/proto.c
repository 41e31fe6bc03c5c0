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
        return NULL; /* http, redis, memcache: wave 2 */
    }
}

const char *
proto_mode_name(int mode)
{
    switch (mode) {
    case CONF_MODE_TCP:
        return "tcp";
    case CONF_MODE_HTTP:
        return "http";
    case CONF_MODE_REDIS:
        return "redis";
    case CONF_MODE_MEMCACHE:
        return "memcache";
    default:
        return "unknown";
    }
}

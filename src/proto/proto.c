/* proto.c -- the table of mode plug-ins.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto.h"

#include "../conf.h"
#include "http.h"
#include "memcache.h"
#include "redis.h"
#include "tcp.h"

const struct proto *
proto_find(int mode)
{
    switch (mode) {
    case CONF_MODE_TCP:
        return &proto_tcp;
    case CONF_MODE_HTTP:
        return &proto_http;
    case CONF_MODE_REDIS:
        return &proto_redis;
    case CONF_MODE_MEMCACHE:
        return &proto_memcache;
    default:
        return NULL;
    }
}

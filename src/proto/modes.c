/* modes.c -- the table of mode plug-ins: the one place that knows every
 * codec (the codecs know only proto.h, so this table sits above them).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto/modes.h"

#include "conf/conf.h"
#include "proto/http.h"
#include "proto/memcache.h"
#include "proto/redis.h"
#include "proto/tcp.h"

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

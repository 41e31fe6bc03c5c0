/* conf_names.c -- the config's enum names, both ways: the NULL-terminated
 * lists the key tables read a value with, and the conf_*_name() functions
 * that print one, so a config and what chashd reports use the same words.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const conf_mode_names[] = {"tcp", "http", "redis", "memcache",
                                       NULL};
const char *const conf_hash_key_names[] = {
    "source_ip", "source_ip_port", "header", "cookie", "query", "path",
    "uri",       "host",           NULL};
const char *const conf_send_proxy_names[] = {"off", "v1", "v2", NULL};
const char *const conf_fast_path_names[] = {"sockmap", "off", NULL};
const char *const conf_members_from_names[] = {"config", "etcd", NULL};
const char *const conf_log_format_names[] = {"text", "json", NULL};
const char *const conf_on_failure_names[] = {"failover", "remap", "error",
                                             NULL};
const char *const conf_migration_names[] = {"off", "copy", "warmup", NULL};
const char *const conf_hot_keys_names[] = {"off", "track", "spread", NULL};
const char *const conf_zone_policy_names[] = {"flat", "hierarchical", NULL};
const char *const conf_read_policy_names[] = {"primary", "any", "quorum", NULL};
const char *const conf_health_type_names[] = {"tcp", "redis", "memcache",
                                              "http", NULL};
const char *const conf_log_level_names[] = {"error", "warn", "info", "debug",
                                            NULL};

_Static_assert(ARRAY_SIZE(conf_mode_names) == CONF_MODE_MEMCACHE + 2,
               "conf_mode_names follows enum conf_mode");
_Static_assert(ARRAY_SIZE(conf_hash_key_names) == CONF_HASH_KEY_HOST + 2,
               "conf_hash_key_names follows enum conf_hash_key");
_Static_assert(ARRAY_SIZE(conf_on_failure_names) == CONF_ON_FAILURE_ERROR + 2,
               "conf_on_failure_names follows enum conf_on_failure");
_Static_assert(ARRAY_SIZE(conf_fast_path_names) == CONF_FAST_PATH_OFF + 2,
               "conf_fast_path_names follows enum conf_fast_path");
_Static_assert(ARRAY_SIZE(conf_log_level_names) == CONF_LOG_DEBUG + 2,
               "conf_log_level_names follows enum conf_log_level");

static const char *
enum_name(const char *const *names, size_t n, int v)
{
    return v >= 0 && (size_t)v < n - 1 ? names[v] : NULL;
}

const char *
conf_mode_name(int mode)
{
    return enum_name(conf_mode_names, ARRAY_SIZE(conf_mode_names), mode);
}

const char *
conf_hash_key_name(int hash_key)
{
    return enum_name(conf_hash_key_names, ARRAY_SIZE(conf_hash_key_names),
                     hash_key);
}

const char *
conf_send_proxy_name(int send_proxy)
{
    return enum_name(conf_send_proxy_names, ARRAY_SIZE(conf_send_proxy_names),
                     send_proxy);
}

const char *
conf_fast_path_name(int fast_path)
{
    return enum_name(conf_fast_path_names, ARRAY_SIZE(conf_fast_path_names),
                     fast_path);
}

int
conf_fast_path_default(void)
{
    const char *v = getenv("CHASHD_FAST_PATH");

    return v != NULL && strcmp(v, "sockmap") == 0 ? CONF_FAST_PATH_SOCKMAP
                                                  : CONF_FAST_PATH_OFF;
}

/* One link as the config writes it: "source_ip", "cookie:session". */
static int
key_source_text(const struct conf_key_source *k, char *buf, size_t len)
{
    const char *kind = conf_hash_key_name(k->kind);

    if (k->name[0] != '\0')
        return snprintf(buf, len, "%s:%s", kind ? kind : "?", k->name);
    return snprintf(buf, len, "%s", kind ? kind : "?");
}

const char *
conf_hash_chain_text(const struct conf_pool *pool, char *buf, size_t len)
{
    size_t used = 0;
    int n;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    if (pool->nhash_chain <= 1) {
        key_source_text(&pool->hash_chain[0], buf, len);
        return buf;
    }
    for (uint32_t i = 0; i < pool->nhash_chain && used < len; i++) {
        n = snprintf(buf + used, len - used, "%s", i ? ", " : "[");
        used += n > 0 ? (size_t)n : 0;
        if (used >= len)
            break;
        n = key_source_text(&pool->hash_chain[i], buf + used, len - used);
        used += n > 0 ? (size_t)n : 0;
    }
    if (used + 1 < len) {
        buf[used] = ']';
        buf[used + 1] = '\0';
    }
    return buf;
}

const char *
conf_on_failure_name(int on_failure)
{
    return enum_name(conf_on_failure_names, ARRAY_SIZE(conf_on_failure_names),
                     on_failure);
}

const char *
conf_migration_name(int migration)
{
    return enum_name(conf_migration_names, ARRAY_SIZE(conf_migration_names),
                     migration);
}

const char *
conf_zone_policy_name(int zone_policy)
{
    return enum_name(conf_zone_policy_names, ARRAY_SIZE(conf_zone_policy_names),
                     zone_policy);
}

const char *
conf_hot_keys_name(int hot_keys)
{
    return enum_name(conf_hot_keys_names, ARRAY_SIZE(conf_hot_keys_names),
                     hot_keys);
}

const char *
conf_read_policy_name(int read_policy)
{
    return enum_name(conf_read_policy_names, ARRAY_SIZE(conf_read_policy_names),
                     read_policy);
}

const char *
conf_log_level_name(int log_level)
{
    return enum_name(conf_log_level_names, ARRAY_SIZE(conf_log_level_names),
                     log_level);
}

const char *
conf_mode_source_name(int src)
{
    switch (src) {
    case CONF_MODE_SRC_MODE:
        return "set by 'mode:'";
    case CONF_MODE_SRC_REDIS:
        return "from twemproxy's 'redis:' key";
    case CONF_MODE_SRC_DEFAULT:
        return "the default: neither 'mode:' nor 'redis:' is given "
               "(twemproxy's rule)";
    default:
        return NULL;
    }
}

const char *
conf_dist_name(int distribution)
{
    if (distribution == CONF_DIST_MODULA)
        return "modula";
    if (distribution == CONF_DIST_RANDOM)
        return "random";
    return chash_algo_name(distribution);
}

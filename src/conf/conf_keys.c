/* conf_keys.c -- the pool's key table (twemproxy's keys, then chashd's),
 * the parsers of the keys with a shape of their own, and conf_parse_map, which
 * reads a YAML map with any table: unknown and duplicate keys refused.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"
#include "conf/etcd_codec.h"
#include "conf/ring.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

/* One day: no timeout, ramp or interval in a proxy config is longer, and
 * a cap turns a typo ("30000s") into an error instead of a silent value. */
#define MAX_DURATION (24u * 3600 * 1000)
/* Maglev table entries: Envoy's upper bound, so a typo cannot ask for a
 * gigabyte table at load. */
#define MAX_TABLE_SIZE 5000011

/* ------------------------------------------------------------------ */
/* Keys with a shape of their own                                     */

static int
set_hash(struct conf_loading *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char valid[512];
    size_t used = 0;
    int id;

    if (v == NULL)
        return -1;
    id = chash_hash_from_name(v);
    if (id >= 0) {
        *FIELD(base, key, int) = id;
        return 0;
    }
    valid[0] = '\0';
    for (int i = 0; i < CHASH_HASH_COUNT && used < sizeof(valid); i++) {
        const char *name = chash_hash_name(i);
        if (name != NULL)
            used += (size_t)snprintf(valid + used, sizeof(valid) - used, "%s%s",
                                     used ? ", " : "", name);
    }
    return conf_fail(ld, node, "unknown hash '%s' (valid: %s)", v, valid);
}

static int
set_distribution(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char valid[512];
    size_t used = 0;

    if (v == NULL)
        return -1;
    for (int i = 0; i <= CONF_DIST_RANDOM; i++) {
        if (strcmp(v, conf_dist_name(i)) == 0) {
            *FIELD(base, key, int) = i;
            return 0;
        }
    }
    valid[0] = '\0';
    for (int i = 0; i <= CONF_DIST_RANDOM && used < sizeof(valid); i++)
        used += (size_t)snprintf(valid + used, sizeof(valid) - used, "%s%s",
                                 i ? ", " : "", conf_dist_name(i));
    return conf_fail(ld, node, "unknown distribution '%s' (valid: %s)", v,
                     valid);
}

static int
set_hash_tag(struct conf_loading *ld, const struct conf_key *key,
             yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char *tag = FIELD(base, key, char);

    if (v == NULL)
        return -1;
    if (strlen(v) != 2)
        return conf_fail(ld, node,
                         "'hash_tag' must be two characters, like "
                         "\"{}\", not '%s'",
                         v);
    memcpy(tag, v, 3);
    return 0;
}

static int
set_balance_factor(struct conf_loading *ld, const struct conf_key *key,
                   yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char *end;
    double f;

    if (v == NULL)
        return -1;
    errno = 0;
    f = strtod(v, &end);
    if (*end != '\0' || end == v || errno != 0 || !isfinite(f))
        return conf_fail(ld, node, "'%s' must be a number, not '%s'", key->name,
                         v);
    if (f != 0 && (f < 1.0 || f > 100.0))
        return conf_fail(ld, node,
                         "'%s' is out of range: %s is not 0 (off) or "
                         "between 1.0 and 100",
                         key->name, v);
    *FIELD(base, key, double) = f;
    return 0;
}
/* A string into a fixed array of CONF_HEALTH_PATH_MAX bytes. */
static int
set_short_string(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);

    if (v == NULL)
        return -1;
    if (strlen(v) >= CONF_HEALTH_PATH_MAX)
        return conf_fail(ld, node, "'%s' is longer than %d bytes", key->name,
                         CONF_HEALTH_PATH_MAX - 1);
    for (const char *c = v; *c != '\0'; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            return conf_fail(ld, node,
                             "'%s' has a space or a control character: '%s'",
                             key->name, v);
    strcpy(FIELD(base, key, char), v);
    return 0;
}

static const struct conf_key health_keys[] = {
    {"type", conf_set_enum, offsetof(struct conf_health, type), 0, 0,
     conf_health_type_names, 0, false},
    {"interval", conf_set_ms, offsetof(struct conf_health, interval_ms), 10,
     MAX_DURATION, NULL, 0, false},
    {"timeout", conf_set_ms, offsetof(struct conf_health, timeout_ms), 1,
     MAX_DURATION, NULL, 0, false},
    {"rise", conf_set_u32, offsetof(struct conf_health, rise), 1, 1000, NULL, 0,
     false},
    {"fall", conf_set_u32, offsetof(struct conf_health, fall), 1, 1000, NULL, 0,
     false},
    /* type http */
    {"path", set_short_string, offsetof(struct conf_health, path), 0, 0, NULL,
     0, false},
    {"host", set_short_string, offsetof(struct conf_health, host), 0, 0, NULL,
     0, false},
    {"expect_status", conf_set_u32, offsetof(struct conf_health, expect_status),
     100, 599, NULL, 0, false},
};

/* `health_check: { type: tcp, ... }`, or `true` / `false` alone. */
static int
set_health(struct conf_loading *ld, const struct conf_key *key,
           yaml_node_t *node, void *base)
{
    struct conf_health *health = FIELD(base, key, struct conf_health);
    int lines[ARRAY_SIZE(health_keys)] = {0};

    if (node->type == YAML_SCALAR_NODE) {
        const char *v = conf_scalar(ld, key, node);
        if (v == NULL)
            return -1;
        if (conf_parse_bool(v, &health->enabled) != 0)
            return conf_fail(ld, node,
                             "'health_check' must be a map like { type:"
                             " tcp, interval: 1s } or true/false, not '%s'",
                             v);
        return 0;
    }
    if (conf_parse_map(ld, node, health_keys, ARRAY_SIZE(health_keys), health,
                       "health_check", lines) != 0)
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(health_keys); i++)
        if (lines[i] != 0 && health->type != CONF_HEALTH_HTTP &&
            (health_keys[i].set == set_short_string ||
             i == ARRAY_SIZE(health_keys) - 1))
            return conf_fail_at(
                ld, lines[i], "health_check '%s' is for type http, not %s",
                health_keys[i].name, conf_health_type_names[health->type]);
    health->enabled = true;
    return 0;
}

static int
set_commands(struct conf_loading *ld, const struct conf_key *key,
             yaml_node_t *node, void *base)
{
    struct conf_pool *pool = base;
    yaml_node_item_t *item;
    size_t n;

    if (node->type != YAML_SEQUENCE_NODE)
        return conf_fail(ld, node, "'%s' must be a list, not %s", key->name,
                         conf_node_kind(node));
    n = (size_t)(node->data.sequence.items.top -
                 node->data.sequence.items.start);
    pool->commands = calloc(n ? n : 1, sizeof(*pool->commands));
    if (pool->commands == NULL)
        return conf_fail(ld, node, "out of memory");
    for (item = node->data.sequence.items.start;
         item < node->data.sequence.items.top; item++) {
        yaml_node_t *c = yaml_document_get_node(ld->doc, *item);
        const char *v = conf_scalar(ld, key, c);
        if (v == NULL)
            return -1;
        pool->commands[pool->ncommands] = strdup(v);
        if (pool->commands[pool->ncommands] == NULL)
            return conf_fail(ld, c, "out of memory");
        pool->ncommands++;
    }
    return 0;
}

/* An RFC 9110 token character (header field names). */
static bool
is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* One link of a hash_key chain, "kind" or "kind:NAME", into <k>. */
static int
parse_key_source(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, struct conf_key_source *k)
{
    const char *v = conf_scalar(ld, key, node), *colon;
    char kind[32], valid[512];
    size_t klen;

    if (v == NULL)
        return -1;
    colon = strchr(v, ':');
    klen = colon != NULL ? (size_t)(colon - v) : strlen(v);
    if (klen >= sizeof(kind))
        klen = sizeof(kind) - 1;
    memcpy(kind, v, klen);
    kind[klen] = '\0';
    memset(k, 0, sizeof(*k));
    k->kind = -1;
    for (int i = 0; conf_hash_key_names[i] != NULL; i++)
        if (strcmp(kind, conf_hash_key_names[i]) == 0)
            k->kind = i;
    if (k->kind < 0) {
        conf_join_names(valid, sizeof(valid), conf_hash_key_names);
        return conf_fail(ld, node,
                         "unknown %s '%s' (valid: %s; header, cookie and query "
                         "take a name: header:X-User-Id)",
                         key->name, v, valid);
    }
    bool named = k->kind == CONF_HASH_KEY_HEADER ||
                 k->kind == CONF_HASH_KEY_COOKIE ||
                 k->kind == CONF_HASH_KEY_QUERY;
    if (!named && colon != NULL)
        return conf_fail(ld, node, "%s '%s': '%s' takes no name", key->name, v,
                         kind);
    if (!named)
        return 0;
    if (colon == NULL || colon[1] == '\0')
        return conf_fail(ld, node, "%s '%s' needs a name: %s:NAME", key->name,
                         v, kind);
    if (strlen(colon + 1) >= CONF_KEY_NAME_MAX)
        return conf_fail(ld, node, "%s '%s': the name is longer than %d bytes",
                         key->name, v, CONF_KEY_NAME_MAX - 1);
    for (const char *c = colon + 1; *c != '\0'; c++) {
        unsigned char u = (unsigned char)*c;
        bool ok = k->kind == CONF_HASH_KEY_HEADER
                      ? is_tchar(u)
                      : u > 0x20 && u < 0x7f && strchr(";=,&\"", u) == NULL;
        if (!ok)
            return conf_fail(ld, node,
                             "%s '%s': the %s name has a character a %s name "
                             "cannot have ('%c')",
                             key->name, v, kind, kind, u >= 0x20 ? u : '?');
    }
    strcpy(k->name, colon + 1);
    return 0;
}

/* `hash_key: source_ip`, or a chain tried in order until one is present:
 * `hash_key: [cookie:session, header:X-User-Id, source_ip]`. */
static int
set_hash_key(struct conf_loading *ld, const struct conf_key *key,
             yaml_node_t *node, void *base)
{
    struct conf_pool *pool = base;
    yaml_node_item_t *item;
    size_t n;

    if (node->type != YAML_SEQUENCE_NODE) {
        if (parse_key_source(ld, key, node, &pool->hash_chain[0]) != 0)
            return -1;
        pool->nhash_chain = 1;
        pool->hash_key = pool->hash_chain[0].kind;
        return 0;
    }
    n = (size_t)(node->data.sequence.items.top -
                 node->data.sequence.items.start);
    if (n == 0 || n > CONF_HASH_CHAIN_MAX)
        return conf_fail(ld, node, "'%s' must list 1 to %d sources, not %zu",
                         key->name, CONF_HASH_CHAIN_MAX, n);
    pool->nhash_chain = 0;
    for (item = node->data.sequence.items.start;
         item < node->data.sequence.items.top; item++) {
        yaml_node_t *c = yaml_document_get_node(ld->doc, *item);
        if (parse_key_source(ld, key, c,
                             &pool->hash_chain[pool->nhash_chain]) != 0)
            return -1;
        pool->nhash_chain++;
    }
    pool->hash_key = pool->hash_chain[0].kind;
    return 0;
}

/* zone_weights: { zone: weight, ... } (zone_policy: hierarchical). */
static int
set_zone_weights(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, void *base)
{
    struct conf_pool *pool = base;
    yaml_node_pair_t *pair;

    (void)key;
    if (node->type != YAML_MAPPING_NODE)
        return conf_fail(ld, node,
                         "'zone_weights' must be a map of zone: weight, not %s",
                         conf_node_kind(node));
    for (pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, pair->value);
        const char *zone = k && k->type == YAML_SCALAR_NODE
                               ? (const char *)k->data.scalar.value
                               : NULL;
        uint64_t w;

        if (zone == NULL || !etcd_name_ok(zone))
            return conf_fail(
                ld, k ? k : node,
                "'zone_weights': a zone is 1 to 63 letters, digits, "
                "'.', '_', ':' or '-'");
        if (v == NULL || v->type != YAML_SCALAR_NODE ||
            conf_parse_u64((const char *)v->data.scalar.value, &w) != 0 ||
            w < 1 || w > 1000000)
            return conf_fail(
                ld, v ? v : node,
                "'zone_weights': the weight of zone '%s' must be an "
                "integer from 1 to 1000000",
                zone);
        for (size_t i = 0; i < pool->nzone_weights; i++)
            if (strcmp(pool->zone_weights[i].zone, zone) == 0)
                return conf_fail(
                    ld, k, "'zone_weights': zone '%s' is given twice", zone);
        if (pool->nzone_weights == RING_ZONE_WEIGHTS_MAX)
            return conf_fail(
                ld, k,
                "'zone_weights': at most %d zones (the others weigh "
                "their servers' sum)",
                RING_ZONE_WEIGHTS_MAX);
        snprintf(pool->zone_weights[pool->nzone_weights].zone,
                 sizeof(pool->zone_weights[0].zone), "%s", zone);
        pool->zone_weights[pool->nzone_weights++].weight = (uint32_t)w;
    }
    return 0;
}

/* `forward_headers: [x-forwarded-for, x-forwarded-proto, forwarded]`, or
 * `off` / `[]` for none. */
static int
set_forward_headers(struct conf_loading *ld, const struct conf_key *key,
                    yaml_node_t *node, void *base)
{
    static const char *const names[] = {"x-forwarded-for", "x-forwarded-proto",
                                        "forwarded", NULL};
    unsigned *bits = FIELD(base, key, unsigned);
    yaml_node_item_t *item;
    char valid[128];

    if (node->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)node->data.scalar.value;
        bool on;
        if (conf_parse_bool(v, &on) == 0 && !on) {
            *bits = 0;
            return 0;
        }
        return conf_fail(ld, node,
                         "'%s' must be a list like [x-forwarded-for, "
                         "x-forwarded-proto, forwarded], or off, not '%s'",
                         key->name, v);
    }
    if (node->type != YAML_SEQUENCE_NODE)
        return conf_fail(ld, node, "'%s' must be a list, not %s", key->name,
                         conf_node_kind(node));
    *bits = 0;
    for (item = node->data.sequence.items.start;
         item < node->data.sequence.items.top; item++) {
        yaml_node_t *c = yaml_document_get_node(ld->doc, *item);
        const char *v = conf_scalar(ld, key, c);
        int i;

        if (v == NULL)
            return -1;
        for (i = 0; names[i] != NULL && strcasecmp(v, names[i]) != 0; i++)
            ;
        if (names[i] == NULL) {
            conf_join_names(valid, sizeof(valid), names);
            return conf_fail(ld, c, "unknown %s '%s' (valid: %s)", key->name, v,
                             valid);
        }
        *bits |= 1u << i;
    }
    return 0;
}

/* `access_log: /var/log/chashd/web.log | syslog | off`. */
static int
set_access_log(struct conf_loading *ld, const struct conf_key *key,
               yaml_node_t *node, void *base)
{
    const char *v = conf_scalar(ld, key, node);
    char **field = FIELD(base, key, char *);
    bool on;

    if (v == NULL)
        return -1;
    free(*field);
    *field = NULL;
    if (conf_parse_bool(v, &on) == 0) {
        if (!on)
            return 0;
        return conf_fail(ld, node,
                         "'%s' must be a file path, syslog or off, not '%s'",
                         key->name, v);
    }
    if (strcmp(v, "syslog") != 0 && v[0] != '/')
        return conf_fail(
            ld, node,
            "'%s' must be an absolute file path, syslog or off, not "
            "'%s'",
            key->name, v);
    *field = strdup(v);
    if (*field == NULL)
        return conf_fail(ld, node, "out of memory");
    return 0;
}

/* ------------------------------------------------------------------ */
/* Tables                                                             */

#define POOL(f) offsetof(struct conf_pool, f)

/*
 * The last two columns: the modes where the key acts today (see struct
 * conf_key), and whether it is twemproxy's. The request-engine keys
 * (hash_tag, timeout, server_connections, preconnect) act in the redis
 * and memcache modes only; the redis_* keys and `command` in redis only.
 * `redis` acts everywhere: it picks the mode when `mode:` is absent, and
 * conf_parse_pool refuses it when it disagrees with `mode:`. `hash_key` is
 * refused, not warned about, outside tcp and http.
 */
const struct conf_key conf_pool_keys[] = {
    [PK_LISTEN] = {"listen", conf_set_listen, POOL(listen), 0, 0, NULL, M_ALL,
                   true},
    [PK_HASH] = {"hash", set_hash, POOL(ring.hash), 0, 0, NULL, M_ALL, true},
    [PK_HASH_TAG] = {"hash_tag", set_hash_tag, POOL(hash_tag), 0, 0, NULL,
                     M_STORE, true},
    [PK_DISTRIBUTION] = {"distribution", set_distribution, POOL(distribution),
                         0, 0, NULL, M_ALL, true},
    [PK_TIMEOUT] = {"timeout", conf_set_ms, POOL(timeout_ms), 0, MAX_DURATION,
                    NULL, M_STORE | M_HTTP, true},
    [PK_BACKLOG] = {"backlog", conf_set_u32, POOL(backlog), 1, 1000000, NULL,
                    M_ALL, true},
    [PK_PRECONNECT] = {"preconnect", conf_set_bool, POOL(preconnect), 0, 0,
                       NULL, M_STORE, true},
    [PK_CLIENT_CONNECTIONS] = {"client_connections", conf_set_u32,
                               POOL(client_connections), 0, 10000000, NULL,
                               M_ALL, true},
    [PK_REDIS] = {"redis", conf_set_bool, POOL(redis), 0, 0, NULL, M_ALL, true},
    [PK_REDIS_AUTH] = {"redis_auth", conf_set_string, POOL(redis_auth), 0, 0,
                       NULL, M_REDIS, true},
    [PK_REDIS_DB] = {"redis_db", conf_set_int, POOL(redis_db), 0, 1000000, NULL,
                     M_REDIS, true},
    [PK_SERVER_CONNECTIONS] = {"server_connections", conf_set_u32,
                               POOL(server_connections), 1, 10000, NULL,
                               M_STORE, true},
    [PK_AUTO_EJECT_HOSTS] = {"auto_eject_hosts", conf_set_bool,
                             POOL(auto_eject_hosts), 0, 0, NULL, M_ALL, true},
    [PK_SERVER_RETRY_TIMEOUT] = {"server_retry_timeout", conf_set_ms,
                                 POOL(server_retry_timeout_ms), 0, MAX_DURATION,
                                 NULL, M_ALL, true},
    [PK_SERVER_FAILURE_LIMIT] = {"server_failure_limit", conf_set_u32,
                                 POOL(server_failure_limit), 0, 1000000, NULL,
                                 M_ALL, true},
    [PK_TCPKEEPALIVE] = {"tcpkeepalive", conf_set_bool, POOL(tcpkeepalive), 0,
                         0, NULL, M_ALL, true},
    /* twemproxy forks' extra module commands: loaded, and a warning that
     * chashd refuses a command its table does not know */
    [PK_COMMAND] = {"command", set_commands, POOL(commands), 0, 0, NULL, 0,
                    true},
    [PK_SERVERS] = {"servers", conf_set_servers, POOL(servers), 0, 0, NULL,
                    M_ALL, true},
    [PK_MODE] = {"mode", conf_set_enum, POOL(mode), 0, 0, conf_mode_names,
                 M_ALL, false},
    [PK_HASH_KEY] = {"hash_key", set_hash_key, POOL(hash_key), 0, 0, NULL,
                     M_CONN, false},
    [PK_POINTS_PER_WEIGHT] = {"points_per_weight", conf_set_u32,
                              POOL(ring.points_per_weight), 1,
                              CHASH_MAX_MEMBER_POINTS, NULL, M_ALL, false},
    [PK_TABLE_SIZE] = {"table_size", conf_set_u32, POOL(ring.table_size), 1,
                       MAX_TABLE_SIZE, NULL, M_ALL, false},
    [PK_MAX_POINTS] = {"max_points", conf_set_u32, POOL(max_points), 1,
                       UINT32_MAX, NULL, M_ALL, false},
    /* Not in redis pools: a spilled key read from a member that does not
     * own it is wrong data, not a cache miss. Memcache pools route every
     * key to its owner (bounded loads for hot keys are to come). */
    [PK_BALANCE_FACTOR] = {"balance_factor", set_balance_factor,
                           POOL(balance_factor), 0, 0, NULL, M_CONN, false},
    [PK_SLOW_START] = {"slow_start", conf_set_ms, POOL(slow_start_ms), 0,
                       MAX_DURATION, NULL, M_ALL, false},
    [PK_ON_FAILURE] = {"on_failure", conf_set_enum, POOL(on_failure), 0, 0,
                       conf_on_failure_names, M_ALL, false},
    /* A store request is never retried on another member: it would land
     * where its key does not live. */
    [PK_RETRIES] = {"retries", conf_set_u32, POOL(retries), 0, 100, NULL,
                    M_CONN, false},
    [PK_HEALTH_CHECK] = {"health_check", set_health, POOL(health), 0, 0, NULL,
                         M_ALL, false},
    [PK_CONNECT_TIMEOUT] = {"connect_timeout", conf_set_ms,
                            POOL(connect_timeout_ms), 1, MAX_DURATION, NULL,
                            M_ALL, false},
    [PK_IDLE_TIMEOUT] = {"idle_timeout", conf_set_ms, POOL(idle_timeout_ms), 0,
                         MAX_DURATION, NULL, M_CONN, false},
    [PK_SHUTDOWN_TIMEOUT] = {"shutdown_timeout", conf_set_ms,
                             POOL(shutdown_timeout_ms), 0, MAX_DURATION, NULL,
                             M_ALL, false},
    [PK_CLIENT_MAX_REQUEST] = {"client_max_request", conf_set_size,
                               POOL(client_max_request), 1, 0, NULL,
                               M_STORE | M_HTTP, false},
    [PK_ALLOW_FANOUT_ADMIN] = {"allow_fanout_admin", conf_set_bool,
                               POOL(allow_fanout_admin), 0, 0, NULL, M_STORE,
                               false},
    /* memcached's -I: a larger value is refused as memcached refuses it */
    [PK_ITEM_SIZE_MAX] = {"item_size_max", conf_set_size, POOL(item_size_max),
                          1, 1024u * 1024 * 1024, NULL, M_MEMCACHE, false},
    /* live data migration on membership changes (doc/migration.md) */
    [PK_MIGRATION] = {"migration", conf_set_enum, POOL(migration), 0, 0,
                      conf_migration_names, M_STORE, false},
    [PK_MIGRATION_RATE] = {"migration_rate", conf_set_u32, POOL(migration_rate),
                           0, 100000000, NULL, M_REDIS, false},
    [PK_MIGRATION_BANDWIDTH] = {"migration_bandwidth", conf_set_size,
                                POOL(migration_bandwidth), 0, 0, NULL, M_REDIS,
                                false},
    [PK_MIGRATION_BATCH] = {"migration_batch", conf_set_u32,
                            POOL(migration_batch), 1, 1000, NULL, M_REDIS,
                            false},
    [PK_MIGRATION_TIMEOUT] = {"migration_timeout", conf_set_ms,
                              POOL(migration_timeout_ms), 1, 600000, NULL,
                              M_REDIS, false},
    [PK_MIGRATION_BIG_KEY] = {"migration_big_key", conf_set_size,
                              POOL(migration_big_key), 1, 0, NULL, M_REDIS,
                              false},
    [PK_MIGRATION_WARMUP] = {"migration_warmup", conf_set_ms,
                             POOL(migration_warmup_ms), 1000, MAX_DURATION,
                             NULL, M_MEMCACHE, false},
    /* replication to N distinct members (doc/replication.md) */
    [PK_REPLICAS] = {"replicas", conf_set_u32, POOL(replicas), 1, REPLICAS_MAX,
                     NULL, M_STORE, false},
    [PK_WRITE_QUORUM] = {"write_quorum", conf_set_u32, POOL(write_quorum), 1,
                         REPLICAS_MAX, NULL, M_STORE, false},
    [PK_READ_POLICY] = {"read_policy", conf_set_enum, POOL(read_policy), 0, 0,
                        conf_read_policy_names, M_STORE, false},
    [PK_READ_QUORUM] = {"read_quorum", conf_set_u32, POOL(read_quorum), 1,
                        REPLICAS_MAX, NULL, M_STORE, false},
    [PK_REPAIR_LOG] = {"repair_log", conf_set_u32, POOL(repair_log), 0,
                       100000000, NULL, M_STORE, false},
    /* the hottest keys (doc/hot.md) */
    [PK_HOT_KEYS] = {"hot_keys", conf_set_enum, POOL(hot_keys), 0, 0,
                     conf_hot_keys_names, M_STORE | M_HTTP, false},
    [PK_ZONE_POLICY] = {"zone_policy", conf_set_enum, POOL(zone_policy), 0, 0,
                        conf_zone_policy_names, M_ALL, false},
    [PK_ZONE_WEIGHTS] = {"zone_weights", set_zone_weights, 0, 0, 0, NULL, M_ALL,
                         false},
    [PK_HOT_KEY_THRESHOLD] = {"hot_key_threshold", conf_set_u32,
                              POOL(hot_key_threshold), 1, 1000000000, NULL,
                              M_STORE, false},
    /* PROXY protocol, access log (tcp and http) */
    [PK_ACCEPT_PROXY] = {"accept_proxy", conf_set_bool, POOL(accept_proxy), 0,
                         0, NULL, M_CONN, false},
    [PK_SEND_PROXY] = {"send_proxy", conf_set_enum, POOL(send_proxy), 0, 0,
                       conf_send_proxy_names, M_CONN, false},
    /* the kernel moves a tcp pair's bytes (src/fastpath.h) */
    [PK_FAST_PATH] = {"fast_path", conf_set_enum, POOL(fast_path), 0, 0,
                      conf_fast_path_names, M_TCP, false},
    /* membership from etcd (doc/etcd.md) */
    [PK_MEMBERS_FROM] = {"members_from", conf_set_enum, POOL(members_from), 0,
                         0, conf_members_from_names, M_ALL, false},
    [PK_ACCESS_LOG] = {"access_log", set_access_log, POOL(access_log), 0, 0,
                       NULL, M_CONN, false},
    [PK_ACCESS_LOG_FORMAT] = {"access_log_format", conf_set_enum,
                              POOL(access_log_format), 0, 0,
                              conf_log_format_names, M_CONN, false},
    /* http (doc/http.md) */
    [PK_FORWARD_HEADERS] = {"forward_headers", set_forward_headers,
                            POOL(forward_headers), 0, 0, NULL, M_HTTP, false},
    [PK_MEMBER_HEADER] = {"member_header", conf_set_bool, POOL(member_header),
                          0, 0, NULL, M_HTTP, false},
    [PK_CLIENT_MAX_HEADER] = {"client_max_header", conf_set_size,
                              POOL(client_max_header), 1024, 1024u * 1024, NULL,
                              M_HTTP, false},
    [PK_CLIENT_MAX_URI] = {"client_max_uri", conf_set_size,
                           POOL(client_max_uri), 64, 1024u * 1024, NULL, M_HTTP,
                           false},
    [PK_BACKEND_KEEPALIVE] = {"backend_keepalive", conf_set_u32,
                              POOL(backend_keepalive), 0, 10000, NULL, M_HTTP,
                              false},
};
_Static_assert(ARRAY_SIZE(conf_pool_keys) == PK_COUNT,
               "one entry per pool key");

/* Join the names of <table> with ", ". */
static void
join_keys(char *buf, size_t len, const struct conf_key *table, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 table[i].name);
}

/*
 * Parse the mapping <node> with <table> into <base>. <lines>[i] gets the
 * line of key i's value when it is given (0 otherwise), so callers can
 * tell set from default and point at a key in later messages. Refuses
 * anything but a map, keys that are not plain names, unknown keys (the
 * message lists the valid ones) and a key given twice, which YAML parsers
 * accept silently and would let the last one win unseen.
 */
int
conf_parse_map(struct conf_loading *ld, yaml_node_t *node,
               const struct conf_key *table, size_t n, void *base,
               const char *what, int *lines)
{
    yaml_node_pair_t *pair;
    char valid[1024];

    if (node->type != YAML_MAPPING_NODE)
        return conf_fail(ld, node, "%s must be a map of keys, not %s", what,
                         conf_node_kind(node));
    for (pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, pair->value);
        const char *name;
        size_t i;

        if (k->type != YAML_SCALAR_NODE)
            return conf_fail(ld, k, "keys in %s must be names, not %s", what,
                             conf_node_kind(k));
        name = (const char *)k->data.scalar.value;
        if (strlen(name) != k->data.scalar.length)
            return conf_fail(ld, k, "a key in %s contains a NUL byte", what);
        for (i = 0; i < n; i++)
            if (strcmp(name, table[i].name) == 0)
                break;
        if (i == n) {
            join_keys(valid, sizeof(valid), table, n);
            return conf_fail(ld, k, "unknown key '%s' in %s (valid keys: %s)",
                             name, what, valid);
        }
        if (lines[i] != 0)
            return conf_fail(ld, k,
                             "duplicate key '%s' in %s (first given at "
                             "line %d)",
                             name, what, lines[i]);
        lines[i] = conf_node_line(k);
        if (table[i].set(ld, &table[i], v, base) != 0)
            return -1;
    }
    return 0;
}

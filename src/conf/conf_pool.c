/* conf_pool.c -- a pool of the config: its defaults, copy and deinit, its
 * parse (keys, then the mode and the defaults that follow the mode), and
 * the queries on pools that the daemon and the CLI ask.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

/* The largest request a store client may send, as Redis' default
 * proto-max-bulk-len; and the most client_max_request may say. */
#define DEFAULT_MAX_REQUEST (512ULL * 1024 * 1024)
/* memcached's default largest item (-I 1m). */
#define DEFAULT_ITEM_SIZE_MAX (1024 * 1024)

/* Default max_points: ten times a large pool (1000 members x 160 points
 * is 160000), about 32 MB of ring at 16 bytes a point, built in well
 * under a second. A weight typo ("30000" for "3") asks for far more and
 * would stall every reload while the ring is built. */
#define DEFAULT_MAX_POINTS 2000000

void
conf_pool_deinit(struct conf_pool *pool)
{
    if (pool == NULL)
        return;
    free(pool->name);
    conf_addr_deinit(&pool->listen);
    free(pool->redis_auth);
    free(pool->access_log);
    for (size_t i = 0; i < pool->ncommands; i++)
        free(pool->commands[i]);
    free(pool->commands);
    for (size_t i = 0; i < pool->nservers; i++)
        conf_server_deinit(&pool->servers[i]);
    free(pool->servers);
    memset(pool, 0, sizeof(*pool));
}

/* A copy of <s>, or NULL for NULL; *<ok> goes false when out of memory. */
static char *
dup_or_null(const char *s, bool *ok)
{
    char *d;

    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        *ok = false;
    return d;
}

/*
 * Field by field over a byte copy: after `*dst = *src` every pointer of
 * <dst> still points into <src>, so each is replaced by a copy (or NULL)
 * before anything can fail; conf_pool_deinit() then frees exactly what was
 * copied, whatever failed, and never touches <src>.
 */
int
conf_pool_copy(struct conf_pool *dst, const struct conf_pool *src)
{
    bool ok = true;

    *dst = *src;
    dst->name = dup_or_null(src->name, &ok);
    dst->listen.text = dup_or_null(src->listen.text, &ok);
    dst->redis_auth = dup_or_null(src->redis_auth, &ok);
    dst->access_log = dup_or_null(src->access_log, &ok);
    dst->commands = NULL;
    dst->ncommands = 0;
    dst->servers = NULL;
    dst->nservers = 0;
    if (ok && src->ncommands > 0) {
        dst->commands = calloc(src->ncommands, sizeof(*dst->commands));
        ok = dst->commands != NULL;
        for (size_t i = 0; ok && i < src->ncommands; i++) {
            dst->commands[i] = dup_or_null(src->commands[i], &ok);
            dst->ncommands = i + 1;
        }
    }
    if (ok && src->nservers > 0) {
        dst->servers = calloc(src->nservers, sizeof(*dst->servers));
        ok = dst->servers != NULL;
        for (size_t i = 0; ok && i < src->nservers; i++) {
            struct conf_server *d = &dst->servers[i];

            *d = src->servers[i];
            d->name = dup_or_null(src->servers[i].name, &ok);
            d->zone = dup_or_null(src->servers[i].zone, &ok);
            d->addr.text = dup_or_null(src->servers[i].addr.text, &ok);
            dst->nservers = i + 1;
        }
    }
    if (!ok) {
        conf_pool_deinit(dst);
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

/* Defaults that do not depend on the mode (twemproxy's, nc_conf.h). */
static void
conf_pool_init(struct conf_pool *pool)
{
    memset(pool, 0, sizeof(*pool));
    pool->listen_perm = -1;
    pool->backlog = 512;
    pool->ring.points_per_weight = CHASH_DEFAULT_POINTS;
    pool->ring.table_size = CHASH_DEFAULT_TABLE_SIZE;
    pool->max_points = DEFAULT_MAX_POINTS;
    pool->client_max_request = DEFAULT_MAX_REQUEST;
    pool->item_size_max = DEFAULT_ITEM_SIZE_MAX;
    pool->migration_rate = 5000;
    pool->migration_bandwidth = 64u * 1024 * 1024;
    pool->migration_batch = 100;
    pool->migration_timeout_ms = 5000;
    pool->migration_big_key = 1024u * 1024;
    pool->fast_path = conf_fast_path_default();
    pool->migration_warmup_ms = 10 * 60 * 1000;
    pool->replicas = 1;
    pool->read_policy = CONF_READ_PRIMARY;
    pool->hot_keys = CONF_HOT_TRACK;
    pool->hot_key_threshold = 1000;
    pool->repair_log = 100000;
    pool->nhash_chain = 1; /* source_ip */
    pool->forward_headers =
        CONF_FWD_X_FORWARDED_FOR | CONF_FWD_X_FORWARDED_PROTO;
    pool->client_max_header = 16 * 1024;
    pool->client_max_uri = 8 * 1024;
    pool->backend_keepalive = 128;
    strcpy(pool->health.path, "/");
    pool->health.interval_ms = 1000;
    pool->health.timeout_ms = 500;
    pool->health.rise = 2;
    pool->health.fall = 3;
    pool->connect_timeout_ms = 1000;
    pool->shutdown_timeout_ms = 5000;
    pool->server_connections = 1;
    pool->server_failure_limit = 2;
    pool->server_retry_timeout_ms = 30000;
}

/*
 * The mode follows twemproxy (redis: true -> redis, else memcache) unless
 * `mode:` says otherwise; defaults then follow the mode. Both given must
 * agree: "mode: tcp" with "redis: true" is a file edited half-way, and
 * either reading of it would surprise someone.
 */
static int
resolve_mode(struct conf_loading *ld, struct conf_pool *pool, const int *lines)
{
    bool twem;

    if (lines[PK_MODE] != 0) {
        pool->mode_source = CONF_MODE_SRC_MODE;
        if (lines[PK_REDIS] != 0 &&
            pool->redis != (pool->mode == CONF_MODE_REDIS))
            return conf_fail_at(
                ld, lines[PK_REDIS],
                "'redis: %s' disagrees with 'mode: %s' (line %d) "
                "in pool '%s': drop 'redis', or make them agree "
                "(redis: true is mode: redis)",
                pool->redis ? "true" : "false", conf_mode_name(pool->mode),
                lines[PK_MODE], pool->name);
    } else {
        pool->mode = pool->redis ? CONF_MODE_REDIS : CONF_MODE_MEMCACHE;
        pool->mode_source =
            lines[PK_REDIS] != 0 ? CONF_MODE_SRC_REDIS : CONF_MODE_SRC_DEFAULT;
    }
    twem = pool->mode == CONF_MODE_REDIS || pool->mode == CONF_MODE_MEMCACHE;
    if (lines[PK_DISTRIBUTION] == 0)
        pool->distribution = twem ? CHASH_ALGO_KETAMA : CHASH_ALGO_RING;
    if (lines[PK_HASH] == 0)
        pool->ring.hash = twem ? CHASH_HASH_FNV1A_64_TW : CHASH_HASH_XXH3;
    pool->ring.algo = pool->distribution < CHASH_ALGO_COUNT ? pool->distribution
                                                            : CHASH_ALGO_KETAMA;
    if (lines[PK_ON_FAILURE] == 0)
        pool->on_failure = !twem                    ? CONF_ON_FAILURE_FAILOVER
                           : pool->auto_eject_hosts ? CONF_ON_FAILURE_REMAP
                                                    : CONF_ON_FAILURE_ERROR;
    if (lines[PK_RETRIES] == 0)
        pool->retries = twem ? 0 : 2;
    return 0;
}

int
conf_parse_pool(struct conf_loading *ld, yaml_node_t *name_node,
                yaml_node_t *node, struct conf_pool *pool)
{
    int lines[PK_COUNT] = {0};
    char what[300];

    conf_pool_init(pool);
    pool->name = strdup((const char *)name_node->data.scalar.value);
    if (pool->name == NULL)
        return conf_fail(ld, name_node, "out of memory");
    pool->line = conf_node_line(name_node);
    snprintf(what, sizeof(what), "pool '%s'", pool->name);
    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return conf_fail(ld, name_node,
                         "pool '%s' is empty: it needs 'listen' "
                         "and 'servers'",
                         pool->name);
    if (conf_parse_map(ld, node, conf_pool_keys, PK_COUNT, pool, what, lines) !=
        0)
        return -1;
    if (resolve_mode(ld, pool, lines) != 0)
        return -1;
    return conf_check_pool(ld, pool, name_node, lines);
}

/* ------------------------------------------------------------------ */
/* Queries                                                            */

const struct conf_pool *
conf_pool_find(const struct conf *conf, const char *name)
{
    if (conf == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < conf->npools; i++)
        if (strcmp(conf->pools[i].name, name) == 0)
            return &conf->pools[i];
    return NULL;
}

void
conf_pool_members(const struct conf_pool *pool, struct chash_member *out)
{
    for (size_t i = 0; i < pool->nservers; i++) {
        out[i].name = pool->servers[i].name;
        out[i].weight = pool->servers[i].weight;
        out[i].ramp = 1.0;
    }
}

bool
conf_pool_same_listen(const struct conf_pool *a, const struct conf_pool *b)
{
    return conf_addr_equal(&a->listen, &b->listen) &&
           a->listen_perm == b->listen_perm && a->backlog == b->backlog;
}

bool
conf_pool_same_ring(const struct conf_pool *a, const struct conf_pool *b)
{
    if (a->distribution != b->distribution || a->ring.algo != b->ring.algo ||
        a->ring.hash != b->ring.hash ||
        a->ring.points_per_weight != b->ring.points_per_weight ||
        a->ring.table_size != b->ring.table_size ||
        strcmp(a->hash_tag, b->hash_tag) != 0 || a->nservers != b->nservers)
        return false;
    /* Jump takes array order as identity: order matters there. */
    if (a->ring.algo == CHASH_ALGO_JUMP) {
        for (size_t i = 0; i < a->nservers; i++)
            if (strcmp(a->servers[i].name, b->servers[i].name) != 0 ||
                a->servers[i].weight != b->servers[i].weight)
                return false;
        return true;
    }
    for (size_t i = 0; i < a->nservers; i++) {
        size_t j;
        for (j = 0; j < b->nservers; j++)
            if (strcmp(a->servers[i].name, b->servers[j].name) == 0)
                break;
        if (j == b->nservers || a->servers[i].weight != b->servers[j].weight)
            return false;
    }
    return true;
}

bool
conf_pool_hashing_differs(const struct conf_pool *a, const struct conf_pool *b)
{
    if (a->ring.algo != b->ring.algo || a->ring.hash != b->ring.hash ||
        a->ring.points_per_weight != b->ring.points_per_weight ||
        a->ring.table_size != b->ring.table_size ||
        a->distribution != b->distribution ||
        strcmp(a->hash_tag, b->hash_tag) != 0 || a->redis_db != b->redis_db ||
        a->zone_policy != b->zone_policy ||
        a->nzone_weights != b->nzone_weights ||
        memcmp(a->zone_weights, b->zone_weights,
               a->nzone_weights * sizeof(a->zone_weights[0])) != 0)
        return true;
    /* a server that moves to another zone moves its zone's keys */
    for (size_t i = 0;
         a->zone_policy == CONF_ZONE_HIERARCHICAL && i < a->nservers; i++)
        for (size_t k = 0; k < b->nservers; k++)
            if (strcmp(a->servers[i].name, b->servers[k].name) == 0 &&
                a->servers[i].zone != NULL && b->servers[k].zone != NULL &&
                strcmp(a->servers[i].zone, b->servers[k].zone) != 0)
                return true;
    return false;
}

uint64_t
conf_ring_points(int distribution, const struct chash_config *ring,
                 const struct chash_member *members, size_t n)
{
    struct chash_config cfg = *ring;

    /* modula and random build twemproxy's ketama continuum */
    cfg.algo = distribution < CHASH_ALGO_COUNT ? distribution : ring->algo;
    return chash_ring_points_needed(&cfg, members, n);
}

/* conf_check.c -- the checks on one parsed pool: keys its mode refuses,
 * migration, replication and zones, servers named or placed twice, and
 * its ring built once, so every limit is a config error with a line.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"
#include "conf/ring.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <yaml.h>

/* Keys the pool's mode refuses: hash_key outside tcp and http, and past
 * the client's address in tcp; a health check of another protocol; a URI
 * limit over the header limit that holds it. */
static int
check_mode_keys(struct conf_loading *ld, const struct conf_pool *pool,
                const int *lines)
{
    bool twem =
        pool->mode == CONF_MODE_REDIS || pool->mode == CONF_MODE_MEMCACHE;

    if (twem && lines[PK_HASH_KEY] != 0) {
        snprintf(ld->err, ld->errlen,
                 "%s:%d: 'hash_key' is for tcp and "
                 "http pools; pool '%s' is %s and hashes the request key",
                 ld->file, lines[PK_HASH_KEY], pool->name,
                 conf_mode_name(pool->mode));
        return -1;
    }
    if (pool->mode == CONF_MODE_TCP &&
        (pool->nhash_chain > 1 ||
         pool->hash_key > CONF_HASH_KEY_SOURCE_IP_PORT)) {
        char chain[512];
        return conf_fail_at(
            ld, lines[PK_HASH_KEY],
            "pool '%s' is tcp and sees no requests: its hash_key "
            "is source_ip or source_ip_port, not %s (headers, "
            "cookies, query, path, uri and host need mode: http)",
            pool->name, conf_hash_chain_text(pool, chain, sizeof(chain)));
    }
    if (pool->health.enabled && pool->health.type == CONF_HEALTH_HTTP &&
        pool->mode != CONF_MODE_TCP && pool->mode != CONF_MODE_HTTP)
        return conf_fail_at(
            ld, lines[PK_HEALTH_CHECK],
            "health_check type http (GET %s) is for http and tcp "
            "pools; pool '%s' is %s",
            pool->health.path, pool->name, conf_mode_name(pool->mode));
    if (pool->health.enabled && pool->health.type != CONF_HEALTH_TCP &&
        pool->health.type != CONF_HEALTH_HTTP &&
        pool->mode != (pool->health.type == CONF_HEALTH_REDIS
                           ? CONF_MODE_REDIS
                           : CONF_MODE_MEMCACHE)) {
        snprintf(ld->err, ld->errlen,
                 "%s:%d: health_check type %s (%s) is for %s pools; "
                 "pool '%s' is %s (use type: tcp)",
                 ld->file, lines[PK_HEALTH_CHECK],
                 conf_health_type_names[pool->health.type],
                 pool->health.type == CONF_HEALTH_REDIS ? "PING" : "version",
                 conf_health_type_names[pool->health.type], pool->name,
                 conf_mode_name(pool->mode));
        return -1;
    }
    if (pool->client_max_uri > pool->client_max_header)
        return conf_fail_at(ld, lines[PK_CLIENT_MAX_URI],
                            "pool '%s': client_max_uri (%llu) is larger than "
                            "client_max_header (%llu), which holds it",
                            pool->name,
                            (unsigned long long)pool->client_max_uri,
                            (unsigned long long)pool->client_max_header);
    return 0;
}

/*
 * `migration:`. Its default: copy in a pool that says `mode: redis`; off in
 * a twemproxy pool (`redis: true`, or memcache), which keeps nutcracker's
 * behaviour -- its members are often caches, and a joining member must be
 * empty to take keys. copy is for redis pools and needs MIGRATE between
 * members (host:port, no unix paths); warmup is for memcache pools.
 */
static int
check_migration(struct conf_loading *ld, struct conf_pool *pool,
                const int *lines)
{
    pool->migration_line = lines[PK_MIGRATION];
    if (lines[PK_MIGRATION] == 0)
        pool->migration = pool->mode == CONF_MODE_REDIS &&
                                  pool->mode_source == CONF_MODE_SRC_MODE &&
                                  pool->replicas <= 1
                              ? CONF_MIGRATION_COPY
                              : CONF_MIGRATION_OFF;
    if (pool->migration == CONF_MIGRATION_COPY && pool->mode != CONF_MODE_REDIS)
        return conf_fail_at(
            ld, lines[PK_MIGRATION],
            "'migration: copy' is for redis pools; pool '%s' is "
            "%s (memcache pools take 'migration: warmup')",
            pool->name, conf_mode_name(pool->mode));
    if (pool->migration == CONF_MIGRATION_WARMUP &&
        pool->mode != CONF_MODE_MEMCACHE)
        return conf_fail_at(
            ld, lines[PK_MIGRATION],
            "'migration: warmup' is for memcache pools; pool '%s' "
            "is %s",
            pool->name, conf_mode_name(pool->mode));
    if (pool->migration != CONF_MIGRATION_COPY)
        return 0;
    for (size_t i = 0; i < pool->nservers; i++)
        if (pool->servers[i].addr.family == AF_UNIX)
            return conf_fail_at(ld, pool->servers[i].line,
                                "server '%s' of pool '%s' is a unix socket: "
                                "'migration: copy' moves keys with MIGRATE, "
                                "which needs host:port (or set migration: off)",
                                pool->servers[i].name, pool->name);
    if (lines[PK_SLOW_START] != 0 && pool->slow_start_ms > 0 &&
        conf_warn_at(ld, lines[PK_SLOW_START],
                     "'slow_start' has no effect in pool '%s' (migration: copy "
                     "moves a member's keys once, at its full weight)",
                     pool->name) != 0)
        return -1;
    pool->slow_start_ms = 0;
    return 0;
}

/*
 * `replicas:` and its quorums. A replicated pool places keys by
 * membership alone (a down member keeps its place in every replica set
 * and is counted as failed), moves no data on a membership change yet
 * (migration: copy and warmup move one owner's keys: refused), and
 * resolves its quorums' defaults (a majority).
 */
static int
check_replication(struct conf_loading *ld, struct conf_pool *pool,
                  const int *lines)
{
    uint32_t n = pool->replicas, majority = pool->replicas / 2 + 1;

    if (pool->write_quorum == 0)
        pool->write_quorum = majority;
    if (pool->read_quorum == 0)
        pool->read_quorum = majority;
    if (pool->write_quorum > n)
        return conf_fail_at(ld, lines[PK_WRITE_QUORUM],
                            "'write_quorum: %u' in pool '%s' is more than its "
                            "%u replicas",
                            pool->write_quorum, pool->name, n);
    if (pool->read_quorum > n)
        return conf_fail_at(ld, lines[PK_READ_QUORUM],
                            "'read_quorum: %u' in pool '%s' is more than its "
                            "%u replicas",
                            pool->read_quorum, pool->name, n);
    if (n == 1 && pool->hot_keys == CONF_HOT_SPREAD)
        return conf_fail_at(
            ld, lines[PK_HOT_KEYS],
            "'hot_keys: spread' in pool '%s' needs replicas > 1 "
            "(a hot key's reads go to any member of its replica "
            "set); use hot_keys: track",
            pool->name);
    if (n == 1) {
        int given = lines[PK_WRITE_QUORUM]  ? lines[PK_WRITE_QUORUM]
                    : lines[PK_READ_QUORUM] ? lines[PK_READ_QUORUM]
                    : lines[PK_READ_POLICY] ? lines[PK_READ_POLICY]
                                            : 0;
        if (given != 0 &&
            conf_warn_at(ld, given,
                         "pool '%s' keeps one copy of each key (replicas: 1): "
                         "its quorums and read policy have no effect",
                         pool->name) != 0)
            return -1;
        return 0;
    }
    if (pool->migration != CONF_MIGRATION_OFF) {
        if (lines[PK_MIGRATION] != 0)
            return conf_fail_at(
                ld, lines[PK_MIGRATION],
                "'migration: %s' is not supported in pool '%s' "
                "with replicas: %u (a membership change moves no "
                "data yet; reads repair what a new member lacks)",
                conf_migration_name(pool->migration), pool->name, n);
        pool->migration = CONF_MIGRATION_OFF;
    }
    if (pool->members_from == CONF_MEMBERS_ETCD)
        /* One chashd orders each key's writes through one worker (its
         * home, request_rep.c); several chashd instances sharing the pool
         * would each have their own order, and the members would apply
         * concurrent writes of a key in different ones. */
        return conf_fail_at(
            ld, lines[PK_REPLICAS],
            "'replicas: %u' is not supported in pool '%s' with "
            "'members_from: etcd' yet: several chashd instances "
            "would each order a key's writes their own way, and "
            "the copies would diverge (one chashd in front of a "
            "replicated pool orders them; doc/replication.md)",
            n, pool->name);
    if (pool->nservers < n &&
        conf_warn_at(
            ld, lines[PK_REPLICAS],
            "pool '%s' has %zu members for 'replicas: %u': each key is "
            "kept on %zu",
            pool->name, pool->nservers, n, pool->nservers) != 0)
        return -1;
    if (lines[PK_READ_QUORUM] != 0 && pool->read_policy != CONF_READ_QUORUM &&
        conf_warn_at(
            ld, lines[PK_READ_QUORUM],
            "'read_quorum' has no effect in pool '%s' (read_policy: %s)",
            pool->name, conf_read_policy_name(pool->read_policy)) != 0)
        return -1;
    if (lines[PK_ON_FAILURE] != 0 &&
        conf_warn_at(
            ld, lines[PK_ON_FAILURE],
            "'on_failure' has no effect in pool '%s' (replicas: %u: a "
            "member that is down keeps its place and counts as failed)",
            pool->name, n) != 0)
        return -1;
    return 0;
}

/* zone_policy: hierarchical places a zone, then a member: every server
 * names its zone; jump cannot weigh zones; etcd records carry no zone
 * yet. Zones with flat placement have no effect (a warning). */
static int
check_zones(struct conf_loading *ld, struct conf_pool *pool, const int *lines)
{
    bool any = false;

    for (size_t i = 0; i < pool->nservers; i++)
        any |= pool->servers[i].zone != NULL;
    for (size_t k = 0; k < pool->nzone_weights; k++) {
        bool found = false;

        if (pool->zone_policy != CONF_ZONE_HIERARCHICAL)
            return conf_fail_at(ld, lines[PK_ZONE_WEIGHTS],
                                "pool '%s': zone_weights need zone_policy: "
                                "hierarchical",
                                pool->name);
        for (size_t i = 0; i < pool->nservers && !found; i++)
            found =
                pool->servers[i].zone != NULL &&
                strcmp(pool->servers[i].zone, pool->zone_weights[k].zone) == 0;
        if (!found)
            return conf_fail_at(
                ld, lines[PK_ZONE_WEIGHTS],
                "pool '%s': zone_weights names zone '%s', which "
                "no server is in",
                pool->name, pool->zone_weights[k].zone);
    }
    if (pool->zone_policy == CONF_ZONE_FLAT) {
        if (any && conf_warn_at(ld, pool->line,
                                "pool '%s': server zones have no effect with "
                                "zone_policy: flat (set zone_policy: "
                                "hierarchical to place a zone, then a member)",
                                pool->name) != 0)
            return -1;
        return 0;
    }
    for (size_t i = 0; i < pool->nservers; i++)
        if (pool->servers[i].zone == NULL)
            return conf_fail_at(ld, pool->servers[i].line,
                                "server '%s' of pool '%s' has no zone: "
                                "zone_policy: hierarchical needs one on every "
                                "server ('host:port:weight name zone', or "
                                "zone: in the map form)",
                                pool->servers[i].name, pool->name);
    if (pool->distribution == CHASH_ALGO_JUMP)
        return conf_fail_at(ld, lines[PK_ZONE_POLICY],
                            "pool '%s': zone_policy: hierarchical cannot use "
                            "distribution jump (a zone's weight is its "
                            "members' sum; jump takes weights of 0 or 1)",
                            pool->name);
    if (pool->distribution >= CHASH_ALGO_COUNT)
        return conf_fail_at(ld, lines[PK_ZONE_POLICY],
                            "pool '%s': zone_policy: hierarchical needs a "
                            "consistent-hashing distribution, not %s",
                            pool->name, conf_dist_name(pool->distribution));
    if (pool->members_from == CONF_MEMBERS_ETCD)
        return conf_fail_at(ld, lines[PK_ZONE_POLICY],
                            "pool '%s': zone_policy: hierarchical with "
                            "members_from: etcd is not supported yet (member "
                            "records carry no zone)",
                            pool->name);
    return 0;
}

/* Warn, with its line, for each key given that does nothing in the
 * pool's mode (conf_pool_keys' <modes>). */
static int
warn_no_effect(struct conf_loading *ld, const struct conf_pool *pool,
               const int *lines)
{
    for (size_t i = 0; i < PK_COUNT; i++) {
        if (lines[i] == 0 ||
            (conf_pool_keys[i].modes & MODE_BIT(pool->mode)) != 0)
            continue;
        if (conf_warn_at(ld, lines[i],
                         "'%s' has no effect in pool '%s' (mode %s)",
                         conf_pool_keys[i].name, pool->name,
                         conf_mode_name(pool->mode)) != 0)
            return -1;
    }
    return 0;
}

static int
cmp_server_name(const void *a, const void *b)
{
    const struct conf_server *x = *(const struct conf_server *const *)a;
    const struct conf_server *y = *(const struct conf_server *const *)b;
    int c = strcmp(x->name, y->name);

    return c != 0 ? c : x->line - y->line;
}

/* Refuse two servers of a pool with the same name (the ring identity) or
 * the same address (one backend counted twice). Sorting pointers keeps
 * this O(n log n) for large pools; the later line is reported. */
static int
check_duplicates(struct conf_loading *ld, struct conf_pool *pool,
                 yaml_node_t *node)
{
    struct conf_server **by = calloc(pool->nservers, sizeof(*by));
    int rc = 0;

    if (by == NULL)
        return conf_fail(ld, node, "out of memory");
    for (size_t i = 0; i < pool->nservers; i++)
        by[i] = &pool->servers[i];
    qsort(by, pool->nservers, sizeof(*by), cmp_server_name);
    for (size_t i = 1; i < pool->nservers && rc == 0; i++) {
        if (strcmp(by[i - 1]->name, by[i]->name) == 0) {
            snprintf(ld->err, ld->errlen,
                     "%s:%d: duplicate server name '%s'"
                     " in pool '%s' (first at line %d)",
                     ld->file, by[i]->line, by[i]->name, pool->name,
                     by[i - 1]->line);
            rc = -1;
        }
    }
    free(by);
    if (rc != 0)
        return rc;
    /* Addresses: compared as sockets, so "127.0.0.1:1" and a hostname
     * resolving to it collide. Quadratic but only over distinct names;
     * pools have hundreds of servers, not millions. */
    for (size_t i = 1; i < pool->nservers; i++) {
        for (size_t j = 0; j < i; j++) {
            const struct conf_server *a = &pool->servers[j];
            const struct conf_server *b = &pool->servers[i];
            if (!conf_addr_equal(&a->addr, &b->addr))
                continue;
            snprintf(ld->err, ld->errlen,
                     "%s:%d: duplicate server address "
                     "'%s' in pool '%s' (same as '%s' at line %d)",
                     ld->file, b->line, b->addr.text, pool->name, a->addr.text,
                     a->line);
            return -1;
        }
    }
    return 0;
}

/* Refuse a ring over the pool's max_points, from its size alone. 0 or -1
 * after a message pointing at what to change. */
static int
check_points(struct conf_loading *ld, const struct conf_pool *pool,
             const struct chash_member *members, const int *lines)
{
    uint64_t need = conf_ring_points(pool->distribution, &pool->ring, members,
                                     pool->nservers);
    int line;

    if (need <= pool->max_points)
        return 0;
    switch (pool->ring.algo) {
    case CHASH_ALGO_MAGLEV:
        line = lines[PK_TABLE_SIZE]   ? lines[PK_TABLE_SIZE]
               : lines[PK_MAX_POINTS] ? lines[PK_MAX_POINTS]
                                      : pool->line;
        return conf_fail_at(ld, line,
                            "pool '%s': its table_size needs %" PRIu64
                            " table entries, over max_points %u (lower "
                            "table_size, or raise max_points)",
                            pool->name, need, pool->max_points);
    case CHASH_ALGO_RENDEZVOUS:
    case CHASH_ALGO_JUMP:
        return conf_fail_at(ld, lines[PK_SERVERS],
                            "pool '%s': its %" PRIu64 " servers are over "
                            "max_points %u (raise max_points)",
                            pool->name, need, pool->max_points);
    default:
        return conf_fail_at(ld, lines[PK_SERVERS],
                            "pool '%s': its servers need %" PRIu64 " ring "
                            "points, over max_points %u (lower the weights or "
                            "points_per_weight, or raise max_points)",
                            pool->name, need, pool->max_points);
    }
}

/* Build the pool's ring once so every limit of the algorithm (maglev table
 * size, jump weights, points per member, nothing owned) is a config error
 * with a line, not a daemon that fails later. Its size is checked first,
 * arithmetically: a weight typo must be refused at once, not after
 * seconds of building a ring of hundreds of millions of points. */
static int
check_ring(struct conf_loading *ld, struct conf_pool *pool,
           yaml_node_t *name_node, const int *lines)
{
    struct chash_member *members;
    struct chash_ring *ring = NULL;
    const struct conf_server *heaviest = &pool->servers[0];
    int rc, line;

    members = calloc(pool->nservers, sizeof(*members));
    if (members == NULL)
        return conf_fail(ld, name_node, "out of memory");
    conf_pool_members(pool, members);
    /* Checked here too, for modula and random (twemproxy's own
     * continuum, no libchash ring) and whatever the library does. */
    rc = -CHASH_EEMPTY;
    for (size_t i = 0; i < pool->nservers; i++)
        if (members[i].weight > 0)
            rc = 0;
    if (rc == 0 && check_points(ld, pool, members, lines) != 0) {
        free(members);
        return -1;
    }
    if (rc == 0 && pool->distribution < CHASH_ALGO_COUNT) {
        const char **zones = calloc(pool->nservers, sizeof(*zones));

        for (size_t i = 0; zones != NULL && i < pool->nservers; i++)
            zones[i] = pool->servers[i].zone;
        rc = zones == NULL
                 ? -CHASH_ENOMEM
                 : ring_create(&pool->ring,
                               pool->zone_policy == CONF_ZONE_HIERARCHICAL,
                               members, zones, pool->nservers,
                               pool->zone_weights, pool->nzone_weights, &ring);
        free(zones);
        chash_ring_destroy(ring);
    }
    free(members);
    if (rc == 0)
        return 0;
    switch (-rc) {
    case CHASH_EEMPTY:
        return conf_fail(ld, name_node,
                         "pool '%s': no server has a weight above "
                         "0",
                         pool->name);
    case CHASH_ETABLE:
        line = lines[PK_TABLE_SIZE] ? lines[PK_TABLE_SIZE] : pool->line;
        snprintf(ld->err, ld->errlen,
                 "%s:%d: pool '%s': table_size %u is "
                 "not a prime larger than the %zu servers",
                 ld->file, line, pool->name, pool->ring.table_size,
                 pool->nservers);
        return -1;
    case CHASH_EWEIGHT:
        /* point at the heaviest server: the one over the limit */
        for (size_t i = 0; i < pool->nservers; i++)
            if (pool->servers[i].weight > heaviest->weight)
                heaviest = &pool->servers[i];
        if (pool->ring.algo == CHASH_ALGO_JUMP)
            snprintf(ld->err, ld->errlen,
                     "%s:%d: pool '%s': distribution "
                     "jump takes server weights 0 or 1 only, not %u",
                     ld->file, heaviest->line, pool->name, heaviest->weight);
        else
            snprintf(ld->err, ld->errlen,
                     "%s:%d: pool '%s': weight %u of "
                     "server '%s' gives more than %d points (lower "
                     "points_per_weight or the weights)",
                     ld->file, heaviest->line, pool->name, heaviest->weight,
                     heaviest->name, CHASH_MAX_MEMBER_POINTS);
        return -1;
    default:
        return conf_fail(ld, name_node, "pool '%s': cannot build its ring: %s",
                         pool->name, chash_strerror(rc));
    }
}

/* In the order they report: a load stops at the first problem, with one
 * message. The ring is built last, once everything cheaper holds. */
int
conf_check_pool(struct conf_loading *ld, struct conf_pool *pool,
                yaml_node_t *name_node, const int *lines)
{
    if (check_mode_keys(ld, pool, lines) != 0 ||
        check_migration(ld, pool, lines) != 0 ||
        check_replication(ld, pool, lines) != 0 ||
        check_zones(ld, pool, lines) != 0)
        return -1;
    if (lines[PK_LISTEN] == 0)
        return conf_fail(ld, name_node, "pool '%s' has no 'listen' address",
                         pool->name);
    pool->listen_line = lines[PK_LISTEN];
    if (warn_no_effect(ld, pool, lines) != 0)
        return -1;
    if (pool->nservers == 0)
        return conf_fail(ld, name_node, "pool '%s' has no servers", pool->name);
    if (check_duplicates(ld, pool, name_node) != 0)
        return -1;
    return check_ring(ld, pool, name_node, lines);
}

/* conf_int.h -- what the files of the config loader share, and only they
 * (src/conf/conf*.c): the load in progress, a key table's row, messages
 * with a line, the one-value parsers and setters, the enum name lists.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_CONF_INT_H
#define CHASHD_CONF_INT_H

/*
 * The loader, file by file (conf_<part>.c are parts of one module, conf):
 *
 *   conf.c         the entry points (conf_load, conf_load_string), the
 *                  document's top level, the messages; the demo config
 *   conf_names.c   enum names, both ways: the lists the tables read and
 *                  the conf_*_name() functions
 *   conf_scalar.c  one value: numbers, durations, sizes, booleans,
 *                  strings, enums, and the setters the tables use for them
 *   conf_addr.c    addresses: parse, compare, what reaches chashd itself;
 *                  `listen`, `admin` and the checks across listeners
 *   conf_server.c  servers: twemproxy's "host:port:weight name", the map
 *                  form, a pool's `servers` list
 *   conf_keys.c    the pool's key table, the keys with a shape of their
 *                  own (hash_key chains, health_check, zone_weights...),
 *                  and conf_parse_map(), which reads a map with any table
 *   conf_global.c  `global:`, its `etcd` block, the pools that need it
 *   conf_pool.c    a pool's life (defaults, copy, deinit), its parse and
 *                  mode, and the queries on pools
 *   conf_check.c   the checks on a parsed pool, in the order they report
 *
 * The macros and the PK_ and GK_ constants below keep their short names:
 * they are seen by these files only.
 */

#include "conf/conf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* One load in progress: where messages go and what they name. */
struct conf_loading {
    const char *file;     /* name used in messages (ref) */
    yaml_document_t *doc; /* the parsed document (ref) */
    char *err;            /* the caller's buffer (ref) */
    size_t errlen;
    struct conf *conf;  /* being filled; gets the warnings (ref) */
    int *warning_lines; /* line of each of conf->warnings, to keep
                           them in file order (own) */
};

/*
 * A config key: its name, the function that parses its YAML node into the
 * field at <offset> of the struct being filled, and the limits that
 * function checks. One table per kind of map (pool, global, health_check,
 * server); the "valid keys" lists in messages come from the same tables.
 *
 * <modes> says in which pool modes the key acts (MODE_BIT bits); a key
 * given in a pool of another mode loads, with a warning that it has no
 * effect there. It is what the daemon does TODAY: when a mode learns a
 * key, widen that key's mask here, and the warning goes. Only pool keys
 * have modes; 0 elsewhere.
 *
 * <twemproxy>: a key twemproxy defines, with twemproxy's meaning. Its
 * durations are plain milliseconds (`timeout: 400`), so a unit-less value
 * is read silently; on chashd's own keys a unit-less value under a second
 * is read the same way, with a warning that it may have meant seconds.
 */
struct conf_key {
    const char *name;
    int (*set)(struct conf_loading *ld, const struct conf_key *key,
               yaml_node_t *node, void *base);
    size_t offset;
    uint32_t min, max;        /* numbers and durations */
    const char *const *names; /* enums: NULL-terminated, in enum order */
    unsigned modes;           /* pool keys: where the key acts */
    bool twemproxy;           /* twemproxy's key and units */
};

#define MODE_BIT(m) (1u << (m))
#define M_TCP MODE_BIT(CONF_MODE_TCP)
#define M_HTTP MODE_BIT(CONF_MODE_HTTP)
#define M_REDIS MODE_BIT(CONF_MODE_REDIS)
#define M_MEMCACHE MODE_BIT(CONF_MODE_MEMCACHE)
#define M_ALL (M_TCP | M_HTTP | M_REDIS | M_MEMCACHE)
#define M_STORE (M_REDIS | M_MEMCACHE) /* twemproxy's two protocols */
#define M_CONN (M_TCP | M_HTTP)        /* keyed by the client connection */

/* The field of <base> a table row fills, as <type>. */
#define FIELD(base, key, type)                                                 \
    ((type *)(void *)((char *)(base) + (key)->offset))

/* Pool keys: twemproxy's first, with their twemproxy meaning, then ours.
 * The index of a key here is its index in conf_pool_keys and in
 * conf_parse_map's <lines>. */
enum conf_pool_key {
    PK_LISTEN,
    PK_HASH,
    PK_HASH_TAG,
    PK_DISTRIBUTION,
    PK_TIMEOUT,
    PK_BACKLOG,
    PK_PRECONNECT,
    PK_CLIENT_CONNECTIONS,
    PK_REDIS,
    PK_REDIS_AUTH,
    PK_REDIS_DB,
    PK_SERVER_CONNECTIONS,
    PK_AUTO_EJECT_HOSTS,
    PK_SERVER_RETRY_TIMEOUT,
    PK_SERVER_FAILURE_LIMIT,
    PK_TCPKEEPALIVE,
    PK_COMMAND,
    PK_SERVERS,
    PK_MODE,
    PK_HASH_KEY,
    PK_POINTS_PER_WEIGHT,
    PK_TABLE_SIZE,
    PK_MAX_POINTS,
    PK_BALANCE_FACTOR,
    PK_SLOW_START,
    PK_ON_FAILURE,
    PK_RETRIES,
    PK_HEALTH_CHECK,
    PK_CONNECT_TIMEOUT,
    PK_IDLE_TIMEOUT,
    PK_SHUTDOWN_TIMEOUT,
    PK_CLIENT_MAX_REQUEST,
    PK_ALLOW_FANOUT_ADMIN,
    PK_ITEM_SIZE_MAX,
    PK_MIGRATION,
    PK_MIGRATION_RATE,
    PK_MIGRATION_BANDWIDTH,
    PK_MIGRATION_BATCH,
    PK_MIGRATION_TIMEOUT,
    PK_MIGRATION_BIG_KEY,
    PK_MIGRATION_WARMUP,
    PK_REPLICAS,
    PK_WRITE_QUORUM,
    PK_READ_POLICY,
    PK_READ_QUORUM,
    PK_REPAIR_LOG,
    PK_HOT_KEYS,
    PK_HOT_KEY_THRESHOLD,
    PK_ZONE_POLICY,
    PK_ZONE_WEIGHTS,
    PK_ACCEPT_PROXY,
    PK_SEND_PROXY,
    PK_FAST_PATH,
    PK_MEMBERS_FROM,
    PK_ACCESS_LOG,
    PK_ACCESS_LOG_FORMAT,
    PK_FORWARD_HEADERS,
    PK_MEMBER_HEADER,
    PK_CLIENT_MAX_HEADER,
    PK_CLIENT_MAX_URI,
    PK_BACKEND_KEEPALIVE,
    PK_COUNT
};

/* The keys of `global:`, as indices into its table (conf_global.c). */
enum conf_global_key {
    GK_ADMIN,
    GK_ADMIN_TOKEN,
    GK_WORKERS,
    GK_LOG_LEVEL,
    GK_PID_FILE,
    GK_STATE_FILE,
    GK_ETCD,
    GK_COUNT
};

/* ---- conf.c: messages. A failure returns -1, so that a parser can
 * `return conf_fail(...)`; a warning kept returns 0. */

/* The 1-based line of <node> (1 when NULL). */
int conf_node_line(const yaml_node_t *node);
/* "file:line: message" for <node> into the caller's buffer. */
int conf_fail(struct conf_loading *ld, const yaml_node_t *node, const char *fmt,
              ...) __attribute__((format(printf, 3, 4)));
/* The same for a line number known without a node. */
int conf_fail_at(struct conf_loading *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A warning, kept in line order in conf->warnings; 0, or -1 when out of
 * memory (the load fails rather than lose it). */
int conf_warn_at(struct conf_loading *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "a list", "a map" or "a value", for messages. */
const char *conf_node_kind(const yaml_node_t *node);
/* Join a NULL-terminated <names> with ", " into <buf>. */
void conf_join_names(char *buf, size_t len, const char *const *names);

/* ---- conf_names.c: the names of each enum, NULL-terminated, in enum
 * order (the tables' <names>). */
extern const char *const conf_mode_names[];
extern const char *const conf_hash_key_names[];
extern const char *const conf_send_proxy_names[];
extern const char *const conf_fast_path_names[];
extern const char *const conf_members_from_names[];
extern const char *const conf_log_format_names[];
extern const char *const conf_on_failure_names[];
extern const char *const conf_migration_names[];
extern const char *const conf_hot_keys_names[];
extern const char *const conf_zone_policy_names[];
extern const char *const conf_read_policy_names[];
extern const char *const conf_health_type_names[];
extern const char *const conf_log_level_names[];

/* ---- conf_scalar.c: one value. */

/* All of <s> as a decimal unsigned number; 0 or -1. */
int conf_parse_u64(const char *s, uint64_t *out);
/* true/yes/on, false/no/off, any case; 0 or -1. */
int conf_parse_bool(const char *v, bool *out);
/* The text of a scalar <node>, or NULL after a message. */
const char *conf_scalar(struct conf_loading *ld, const struct conf_key *key,
                        yaml_node_t *node);
/* The setters of a table row (struct conf_key's <set>): 0, or -1 after a
 * message. */
int conf_set_u32(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, void *base);
int conf_set_size(struct conf_loading *ld, const struct conf_key *key,
                  yaml_node_t *node, void *base);
int conf_set_int(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, void *base);
int conf_set_ms(struct conf_loading *ld, const struct conf_key *key,
                yaml_node_t *node, void *base);
int conf_set_bool(struct conf_loading *ld, const struct conf_key *key,
                  yaml_node_t *node, void *base);
int conf_set_string(struct conf_loading *ld, const struct conf_key *key,
                    yaml_node_t *node, void *base);
int conf_set_enum(struct conf_loading *ld, const struct conf_key *key,
                  yaml_node_t *node, void *base);

/* ---- conf_addr.c */
int conf_set_listen(struct conf_loading *ld, const struct conf_key *key,
                    yaml_node_t *node, void *base);
int conf_set_admin(struct conf_loading *ld, const struct conf_key *key,
                   yaml_node_t *node, void *base);
/* Checks across pools and the admin address, after all are parsed;
 * <glines>: the lines of the global keys. */
int conf_check_listeners(struct conf_loading *ld, struct conf *conf,
                         const int *glines);

/* ---- conf_server.c */
int conf_set_servers(struct conf_loading *ld, const struct conf_key *key,
                     yaml_node_t *node, void *base);

/* ---- conf_keys.c */
extern const struct conf_key conf_pool_keys[];
int conf_parse_map(struct conf_loading *ld, yaml_node_t *node,
                   const struct conf_key *table, size_t n, void *base,
                   const char *what, int *lines);

/* ---- conf_global.c */
/* `global:` into <conf>; <lines> as conf_parse_map's (GK_COUNT of them). */
int conf_parse_global(struct conf_loading *ld, yaml_node_t *node,
                      struct conf *conf, int *lines);
/* Pools with `members_from: etcd`: the block they need, and names that
 * can be etcd key parts. */
int conf_check_members_from(struct conf_loading *ld, const struct conf *conf);
void conf_etcd_deinit(struct conf_etcd *e);

/* ---- conf_pool.c */
/* The pool named by <name_node>, from its map <node>, into <pool>
 * (counted by the caller before the call, so a half-parsed pool is freed
 * with the conf). */
int conf_parse_pool(struct conf_loading *ld, yaml_node_t *name_node,
                    yaml_node_t *node, struct conf_pool *pool);

/* ---- conf_check.c */
/* Everything checked of one pool after its keys are read and its mode is
 * known; <lines> as conf_parse_map's for conf_pool_keys. */
int conf_check_pool(struct conf_loading *ld, struct conf_pool *pool,
                    yaml_node_t *name_node, const int *lines);

#endif

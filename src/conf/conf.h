/* conf.h -- the one config loader: YAML (twemproxy's nutcracker.yml
 * included) into pools of servers, with every error as "file:line: what".
 * Used by chashd, `chashd -t` and `chash lookup --config`.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_CONF_H
#define CHASHD_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "chash/chash.h"
#include "conf/ring.h"

enum conf_mode {
    CONF_MODE_TCP,
    CONF_MODE_HTTP,
    CONF_MODE_REDIS,
    CONF_MODE_MEMCACHE
};
/* What a membership change does to the data of a store pool. */
enum conf_migration {
    CONF_MIGRATION_OFF,    /* nothing moves (twemproxy) */
    CONF_MIGRATION_COPY,   /* redis: keys move to their new owner, live */
    CONF_MIGRATION_WARMUP, /* memcache: misses on a new owner read the old */
};
/* Which members of a key's replica set answer a read (replicas > 1). */
enum conf_read_policy {
    CONF_READ_PRIMARY, /* the first readable member, in preference order */
    CONF_READ_ANY,     /* any readable member, spread by client */
    CONF_READ_QUORUM   /* every readable member; read_quorum must agree */
};
/* Whether a pool counts its hottest keys (doc/hot.md). */
enum conf_hot_keys {
    CONF_HOT_OFF,   /* not counted */
    CONF_HOT_TRACK, /* a top-K summary per worker, merged each second */
    CONF_HOT_SPREAD /* and reads of the hottest go to any replica */
};
/* Where a pool's mode came from, so `chashd -t` and the start-up log can
 * say why a pool without `mode:` is memcache (twemproxy's rule). */
enum conf_mode_source {
    CONF_MODE_SRC_MODE,   /* `mode:` given */
    CONF_MODE_SRC_REDIS,  /* `redis:` given, no `mode:` */
    CONF_MODE_SRC_DEFAULT /* neither: twemproxy's rule, memcache */
};
/* The most members a key may be kept on (`replicas:`). */
#define REPLICAS_MAX 16

/* Where a connection's or a request's ring key comes from. tcp pools take
 * the first two; http pools a chain of any (struct conf_key_source). */
enum conf_hash_key {
    CONF_HASH_KEY_SOURCE_IP,      /* the client's IP (PROXY's when taken) */
    CONF_HASH_KEY_SOURCE_IP_PORT, /* its IP and port */
    CONF_HASH_KEY_HEADER,         /* header:NAME, the first one's value */
    CONF_HASH_KEY_COOKIE,         /* cookie:NAME, the cookie's value */
    CONF_HASH_KEY_QUERY,          /* query:NAME, the parameter's raw value */
    CONF_HASH_KEY_PATH,           /* the request-target's path, no query */
    CONF_HASH_KEY_URI,            /* the request-target as sent */
    CONF_HASH_KEY_HOST            /* the Host header, lower-cased */
};
/* The longest hash_key chain, and the longest NAME in one of its links. */
#define CONF_HASH_CHAIN_MAX 8
#define CONF_KEY_NAME_MAX 64
/* One link of a hash_key chain: its kind and, for header, cookie and
 * query, the name (headers compare case-insensitively). */
struct conf_key_source {
    int kind; /* enum conf_hash_key */
    char name[CONF_KEY_NAME_MAX];
};
/* The PROXY protocol header chashd sends to members (`send_proxy`). */
enum conf_send_proxy { CONF_PROXY_OFF, CONF_PROXY_V1, CONF_PROXY_V2 };

/* Who moves a tcp pool's bytes once a client is paired with its member
 * (`fast_path`, src/fastpath.h): the kernel through a sockhash, or
 * chashd's splice. */
enum conf_fast_path { CONF_FAST_PATH_SOCKMAP, CONF_FAST_PATH_OFF };
/* `access_log_format`. */
enum conf_log_format { CONF_LOG_FORMAT_TEXT, CONF_LOG_FORMAT_JSON };
/* How a pool places keys over zones (`zone_policy`, doc/internals/
 * placement.md "Zones"). */
enum conf_zone_policy {
    CONF_ZONE_FLAT,        /* one ring over the members; zones unused */
    CONF_ZONE_HIERARCHICAL /* a zone, then a member in it */
};
/* Where a pool's members come from (`members_from`). */
enum conf_members_from { CONF_MEMBERS_CONFIG, CONF_MEMBERS_ETCD };
/* Headers an http pool adds to each request (`forward_headers`, bits). */
enum conf_forward {
    CONF_FWD_X_FORWARDED_FOR = 1u << 0,
    CONF_FWD_X_FORWARDED_PROTO = 1u << 1,
    CONF_FWD_FORWARDED = 1u << 2 /* RFC 7239 */
};
enum conf_on_failure {
    CONF_ON_FAILURE_FAILOVER,
    CONF_ON_FAILURE_REMAP,
    CONF_ON_FAILURE_ERROR
};
/* tcp: a connect; redis: AUTH (with redis_auth) then PING, +PONG */
enum conf_health_type {
    CONF_HEALTH_TCP,
    CONF_HEALTH_REDIS,
    CONF_HEALTH_MEMCACHE,
    CONF_HEALTH_HTTP /* GET <path> (Host <host>), the status expected */
};
#define CONF_HEALTH_PATH_MAX 256
enum conf_log_level {
    CONF_LOG_ERROR,
    CONF_LOG_WARN,
    CONF_LOG_INFO,
    CONF_LOG_DEBUG
};
/* distribution: a libchash algorithm (enum chash_algo), or one of these
 * twemproxy distributions that are not consistent hashing. */
enum { CONF_DIST_MODULA = CHASH_ALGO_COUNT, CONF_DIST_RANDOM };

/* A socket address as written in the config and as resolved. */
struct conf_addr {
    char *text;                 /* as written: "127.0.0.1:9001", "/tmp/s" */
    struct sockaddr_storage sa; /* numeric, no DNS on the data path */
    socklen_t salen;
    int family;    /* AF_INET, AF_INET6 or AF_UNIX */
    uint16_t port; /* 0 for AF_UNIX */
};

struct conf_server {
    char *name; /* ring identity: the explicit name, else
                   twemproxy's rule (host when the port is
                   11211, else host:port) */
    struct conf_addr addr;
    uint32_t weight; /* default 1 */
    char *zone;      /* its zone (zone_policy: hierarchical), or NULL */
    int line;        /* where it was written */
    /* a reload of a migration: copy pool asks each server its key count
     * (off the control thread): <keys> when <probed>, -1 unreachable */
    bool probed;
    int64_t keys;
};

struct conf_health {
    bool enabled;         /* a health_check block (or `true`) was given */
    int type;             /* enum conf_health_type */
    uint32_t interval_ms; /* default 1000 */
    uint32_t timeout_ms;  /* default 500 */
    uint32_t rise;        /* default 2 */
    uint32_t fall;        /* default 3 */
    /* type http */
    char path[CONF_HEALTH_PATH_MAX]; /* default "/" */
    char host[CONF_HEALTH_PATH_MAX]; /* "" : the member's address */
    uint32_t expect_status;          /* 0: any 2xx or 3xx */
};

struct conf_pool {
    char *name;
    int line;
    struct conf_addr listen;
    int listen_line;  /* where `listen:` was written */
    int listen_perm;  /* unix listen socket mode (0666 ...), -1
                         when not given */
    uint32_t backlog; /* default 512 */
    int mode;         /* enum conf_mode */
    int mode_source;  /* enum conf_mode_source */
    int hash_key;     /* enum conf_hash_key, tcp and http modes:
                         the chain's first link */
    struct conf_key_source hash_chain[CONF_HASH_CHAIN_MAX]; /* http: tried in
                                 order until one is present */
    uint32_t nhash_chain;                                   /* >= 1 */
    bool accept_proxy; /* the listener takes a PROXY v1/v2 header */
    int send_proxy;    /* enum conf_send_proxy */
    int fast_path;     /* enum conf_fast_path (tcp), default off */
    int members_from;  /* enum conf_members_from */
    int zone_policy;   /* enum conf_zone_policy */
    /* zone_weights: zones that do not weigh their members' sum */
    struct ring_zone_weight zone_weights[RING_ZONE_WEIGHTS_MAX];
    size_t nzone_weights;
    char *access_log;      /* NULL: off; "syslog"; else a file path */
    int access_log_format; /* enum conf_log_format */
    /* http */
    unsigned forward_headers;   /* enum conf_forward bits; default
                                   X-Forwarded-For and -Proto */
    bool member_header;         /* X-Chash-Member on responses */
    uint64_t client_max_header; /* request line and headers (431),
                                   default 16 KiB */
    uint64_t client_max_uri;    /* request-target (414), default 8 KiB */
    uint32_t backend_keepalive; /* idle member connections kept per
                                   worker and member, default 128 */
    int distribution;           /* enum chash_algo or CONF_DIST_* */
    struct chash_config ring;   /* algo, hash, points_per_weight, table_size */
    uint32_t max_points;        /* most ring points (or maglev table entries,
                                   or rendezvous/jump members) the ring may
                                   hold at full weight; default 2000000 */
    char hash_tag[3];           /* twemproxy hash_tag, "" when unset */
    double balance_factor;      /* 0 = off; else >= 1 */
    uint32_t slow_start_ms;     /* 0 = off */
    int on_failure;             /* enum conf_on_failure */
    uint32_t retries;           /* backend connect attempts after the first */
    struct conf_health health;
    uint32_t connect_timeout_ms;  /* default 1000 */
    uint32_t idle_timeout_ms;     /* 0 = none */
    uint32_t shutdown_timeout_ms; /* default 5000 */
    uint32_t timeout_ms;          /* twemproxy `timeout` (0 = none) */
    uint32_t client_connections;  /* 0 = unlimited */
    uint32_t server_connections;  /* twemproxy, default 1 */
    uint64_t client_max_request;  /* store modes: the largest request a
                                     client may send (bytes, default
                                     512 MB as Redis' proto-max-bulk-len) */
    bool allow_fanout_admin;      /* FLUSHDB, FLUSHALL, KEYS across
                                     every member (default false) */
    uint64_t item_size_max;       /* memcache: the largest value stored
                                     (default 1 MB, memcached's -I) */
    bool preconnect;
    /* live data migration (migration.h) */
    int migration;                 /* enum conf_migration */
    int migration_line;            /* where it was given, 0: the default */
    uint32_t migration_rate;       /* keys/s, 0 = unlimited */
    uint64_t migration_bandwidth;  /* bytes/s, 0 = unlimited */
    uint32_t migration_batch;      /* keys per MIGRATE */
    uint32_t migration_timeout_ms; /* MIGRATE's own timeout */
    uint64_t migration_big_key;    /* bytes: moved alone, listed */
    uint32_t migration_warmup_ms;  /* memcache: how long a warm-up lasts */
    /* replication (doc/replication.md) */
    uint32_t replicas;          /* members per key, default 1 */
    uint32_t write_quorum;      /* acknowledgements a write needs (resolved:
                                   default replicas/2+1) */
    int read_policy;            /* enum conf_read_policy */
    int hot_keys;               /* enum conf_hot_keys */
    uint32_t hot_key_threshold; /* requests/s above which reads spread */
    uint32_t read_quorum;       /* equal replies a quorum read needs */
    uint32_t repair_log;        /* keys remembered per member for its repair */
    bool auto_eject_hosts;
    uint32_t server_failure_limit;    /* default 2, as twemproxy */
    uint32_t server_retry_timeout_ms; /* default 30000, as twemproxy */
    bool tcpkeepalive;
    bool redis; /* twemproxy `redis:` as given */
    char *redis_auth;
    int redis_db;
    char **commands; /* twemproxy `command:` (extra redis
                        module commands), kept as written */
    size_t ncommands;
    struct conf_server *servers; /* in file order */
    size_t nservers;
};

/* `global.etcd` (doc/etcd.md). */
#define CONF_ETCD_ENDPOINTS_MAX 8
struct conf_etcd {
    bool enabled;                             /* the block was given */
    char *endpoints[CONF_ETCD_ENDPOINTS_MAX]; /* "http://host:port" */
    size_t nendpoints;
    char *prefix;          /* default "/chash"; never ends with '/' */
    char *instance;        /* default: the host name */
    uint32_t lease_ttl_ms; /* default 10 s */
    uint32_t timeout_ms;   /* one request; default 2 s */
    char *username, *password;
    char *ca_file, *cert_file, *key_file;
};

struct conf {
    char *file;             /* the path, or the name given to
                               conf_load_string() */
    struct conf_addr admin; /* default 127.0.0.1:8404; `admin: off`
                               leaves it zeroed (family AF_UNSPEC) */
    char *admin_token;      /* NULL when unset */
    uint32_t workers;       /* default: number of online cores */
    int log_level;          /* enum conf_log_level; default CONF_LOG_INFO */
    char *pid_file;
    char *state_file;
    struct conf_etcd etcd;
    struct conf_pool *pools;
    size_t npools;
    char **warnings; /* "file:line: warning: ...", in line order: what
                        loads but is likely not what was meant */
    size_t nwarnings;
};

/*
 * Load <path> into a new conf. On error returns NULL and writes one line
 * "file:line: message" into <err> (of <errlen> bytes). Checks everything
 * that can be checked without binding sockets: keys, types, ranges,
 * addresses, duplicate names/addresses, listen ports used twice,
 * non-loopback admin without admin_token, `mode:` and `redis:` that
 * disagree, a server that is chashd's own listen or admin address, a ring
 * over max_points. Give <err> 1024 bytes: an unknown-key message lists the
 * valid keys. A file that loads may still carry warnings in
 * conf->warnings (a key with no effect in the pool's mode, a unit-less
 * duration under a second on one of chashd's own keys): the caller prints
 * them; they never stop a load.
 */
struct conf *conf_load(const char *path, char *err, size_t errlen);

/* What a config may be: at most this many bytes, nested at most this
 * deep (maps and lists); more is refused before it is parsed. */
#define CONF_MAX_BYTES (16 << 20)
#define CONF_MAX_DEPTH 64

/* The same from a YAML text; <name> is used in messages. */
struct conf *conf_load_string(const char *name, const char *yaml, size_t len,
                              char *err, size_t errlen);

/* Frees <conf>, its pools and its warnings. NULL is a no-op. */
void conf_destroy(struct conf *conf);

/*
 * A deep copy of <src> into <dst>: every field, and a copy of everything
 * <src> points to (name, listen.text, redis_auth, commands[], servers[]
 * with their name and addr.text), so <dst> outlives the conf <src> came
 * from. 0, or -1 with errno ENOMEM and *<dst> zeroed with nothing
 * leaked. Free with conf_pool_deinit().
 */
int conf_pool_copy(struct conf_pool *dst, const struct conf_pool *src);

/* Free what a loaded or copied <pool> owns and zero it; safe on a zeroed
 * pool, and twice. */
void conf_pool_deinit(struct conf_pool *pool);

/* The pool named <name>, or NULL. */
const struct conf_pool *conf_pool_find(const struct conf *conf,
                                       const char *name);

/* Parse a duration: "500ms", "2s", "1m", or plain milliseconds. 0 or -1. */
int conf_parse_duration(const char *s, uint32_t *ms);

/* Parse "host:port" / "[v6]:port" / "/unix/path" into <addr> (text is
 * copied). A host that is not a numeric address is resolved once, here,
 * with getaddrinfo (the first IPv4 result, else the first IPv6 one).
 * 0, or -1 with a message in <err>; free with conf_addr_deinit. */
int conf_parse_addr(const char *s, struct conf_addr *addr, char *err,
                    size_t errlen);
void conf_addr_deinit(struct conf_addr *addr);

/* Append server <name> at numeric address <address> with <weight> to
 * <cp> (a member a reload keeps while its keys move). 0 or -1. */
int conf_pool_add_server(struct conf_pool *cp, const char *name,
                         const char *address, uint32_t weight);

/* Fill a libchash member array (name, weight, ramp 1) for <pool>; the
 * names are borrowed from the pool. */
void conf_pool_members(const struct conf_pool *pool, struct chash_member *out);

/* Parse one server as written in `servers:`: "host:port:weight [name]",
 * "host:port [name]" (weight 1), "[v6]:port:weight [name]" or
 * "/unix/path:weight [name]", applying twemproxy's naming rule. For the
 * admin API's runtime adds, so they name members exactly as the config
 * does. 0, or -1 with a message in <err>; free with conf_server_deinit. */
int conf_parse_server(const char *s, struct conf_server *server, char *err,
                      size_t errlen);
void conf_server_deinit(struct conf_server *server);

/* True when two addresses are the same socket (family, address, port or
 * path); the texts may differ ("127.0.0.1:80" and "127.000.0.1:80"). */
bool conf_addr_equal(const struct conf_addr *a, const struct conf_addr *b);

/*
 * True when a connection to <member> would arrive at a socket listening
 * on <listen>: the same socket (conf_addr_equal), the same unix path, or,
 * for a wildcard <listen> (0.0.0.0:P, or [::]:P which Linux binds
 * dual-stack), port P on a loopback address (127.0.0.0/8, ::1) or on an
 * address of a local interface (getifaddrs). A wildcard <member> counts
 * as loopback: Linux connects 0.0.0.0 and [::] to the local host. False
 * when either is unset (AF_UNSPEC). Unix paths are compared as written.
 */
bool conf_addr_reaches(const struct conf_addr *listen,
                       const struct conf_addr *member);

/*
 * Is <a> chashd itself, one of the sockets <conf> listens on (any pool's
 * `listen`, or `global.admin`)? NULL when not; else <buf> (of <len>
 * bytes) holding a phrase for messages: "the listen address of pool 'web'
 * (0.0.0.0:8080)" or "the admin address (127.0.0.1:8404)". For runtime
 * adds and reloads; conf_load refuses such a server already.
 */
const char *conf_self_address(const struct conf *conf,
                              const struct conf_addr *a, char *buf, size_t len);

/*
 * The points (ring, ketama, nginx) or table entries (maglev) that
 * chash_ring_create() would allocate for <members>[0..<n>) at ramp 1 with
 * <ring> (ring->algo picks the algorithm), computed arithmetically without
 * building anything:
 *   ring     points_per_weight x weight, each member capped at
 *            CHASH_MAX_MEMBER_POINTS (exact);
 *   nginx    160 x weight, capped the same (a bound: nginx drops the few
 *            points that fall on one another);
 *   ketama   twemproxy's per-server formula (exact);
 *   maglev   table_size, whatever the members;
 *   rendezvous, jump   hold no points: <n>, the members.
 * <distribution> is the pool's; for twemproxy's modula and random it
 * counts the ring of ring->algo (ketama) chashd builds for their
 * preference order. Ramps are ignored. Compare with conf_pool.max_points.
 */
uint64_t conf_ring_points(int distribution, const struct chash_config *ring,
                          const struct chash_member *members, size_t n);

/* True when <a> is reachable from this host only: 127.0.0.0/8, ::1, a
 * v4-mapped 127.0.0.0/8, or a unix socket (the admin_token rule). */
bool conf_addr_is_loopback(const struct conf_addr *a);

/* True when a reload can keep <a>'s listening sockets for <b>: same
 * address, unix permissions and backlog. */
bool conf_pool_same_listen(const struct conf_pool *a,
                           const struct conf_pool *b);

/* True when <a> and <b> place keys identically: same distribution, ring
 * config, hash_tag and members (names and weights, in any order). */
bool conf_pool_same_ring(const struct conf_pool *a, const struct conf_pool *b);

/* Config names of the enums, for messages, `chashd -t` and the admin API
 * (NULL for an unknown value). conf_dist_name covers CONF_DIST_* too. */
const char *conf_mode_name(int mode);
const char *conf_hash_key_name(int hash_key);
/* The hash_key chain of <pool> as the config writes it ("source_ip",
 * "[cookie:session, source_ip]") into <buf> (<len> bytes); returns <buf>. */
const char *conf_hash_chain_text(const struct conf_pool *pool, char *buf,
                                 size_t len);
const char *conf_send_proxy_name(int send_proxy);
const char *conf_fast_path_name(int fast_path);
/* The fast_path of a tcp pool that does not say: off, or sockmap when the
 * environment has CHASHD_FAST_PATH=sockmap (operators switch the default
 * without editing pools; the test suite runs both ways). */
int conf_fast_path_default(void);
const char *conf_on_failure_name(int on_failure);
const char *conf_migration_name(int migration);
/* Whether pools <a> and <b> hash keys to the ring differently (hash,
 * distribution, points, table size, hash_tag) or keep them in another
 * redis_db: a reload between them would move nearly every key. */
bool conf_pool_hashing_differs(const struct conf_pool *a,
                               const struct conf_pool *b);
const char *conf_read_policy_name(int read_policy);
const char *conf_hot_keys_name(int hot_keys);
const char *conf_zone_policy_name(int zone_policy);

const char *conf_dist_name(int distribution);
const char *conf_log_level_name(int log_level);

/* A phrase for messages saying where a pool's mode came from (enum
 * conf_mode_source): "set by 'mode:'", "from twemproxy's 'redis:' key",
 * "the default: neither 'mode:' nor 'redis:' is given (twemproxy's
 * rule)". NULL for an unknown value. */
const char *conf_mode_source_name(int src);

/* The embedded demo config `make run` uses. */
extern const char conf_default_yaml[];

#endif /* CHASHD_CONF_H */

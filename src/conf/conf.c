/* conf.c -- the config loader: YAML (a twemproxy nutcracker.yml included)
 * into pools of servers, table-driven so key names and struct fields cannot
 * drift, with every error reported once as "file:line: what is wrong".
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/etcd_codec.h"
#include "conf/ring.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <unistd.h>

#include <yaml.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* twemproxy leaves the port out of a server's ketama name when it is the
 * memcached port, for libmemcached compatibility (nc_conf.h). */
#define KETAMA_PORT 11211
/* Longest server name: twemproxy hashes "<name>-<i>" into a 273-byte
 * buffer, so longer names would place points differently there. */
#define MAX_NAME 255
#define MAX_POOL_NAME 64
/* One day: no timeout, ramp or interval in a proxy config is longer, and
 * a cap turns a typo ("30000s") into an error instead of a silent value. */
#define MAX_DURATION (24u * 3600 * 1000)
#define MSG_MAX 1024
/* Maglev table entries: Envoy's upper bound, so a typo cannot ask for a
 * gigabyte table at load. */
#define MAX_TABLE_SIZE 5000011
/* The largest request a store client may send, as Redis' default
 * proto-max-bulk-len; and the most client_max_request may say. */
#define DEFAULT_MAX_REQUEST (512ULL * 1024 * 1024)
#define MAX_SIZE (4ULL * 1024 * 1024 * 1024)
/* memcached's default largest item (-I 1m). */
#define DEFAULT_ITEM_SIZE_MAX (1024 * 1024)

/* Default max_points: ten times a large pool (1000 members x 160 points
 * is 160000), about 32 MB of ring at 16 bytes a point, built in well
 * under a second. A weight typo ("30000" for "3") asks for far more and
 * would stall every reload while the ring is built. */
#define DEFAULT_MAX_POINTS 2000000
/* A unit-less duration below this, on one of chashd's own keys, is most
 * likely seconds written without the "s". */
#define WARN_PLAIN_MS 1000

const char conf_default_yaml[] =
    "# The embedded demo config (make run): three local backends behind a\n"
    "# tcp pool hashed by client address and behind an http pool hashed by\n"
    "# the `session` cookie (else the client address), three redis-servers\n"
    "# behind a redis pool and three memcacheds behind a memcache pool.\n"
    "# conf/demo.yml\n"
    "# is this text, for tools that take a file\n"
    "# (chash lookup --config conf/demo.yml --pool kv KEY).\n"
    "global:\n"
    "  admin: 127.0.0.1:8404\n"
    "  workers: 2\n"
    "web:\n"
    "  listen: 127.0.0.1:8080\n"
    "  mode: tcp\n"
    "  hash_key: source_ip\n"
    "  distribution: ring\n"
    "  hash: xxh3\n"
    "  balance_factor: 1.25\n"
    "  slow_start: 10s\n"
    "  on_failure: failover\n"
    "  health_check: { type: tcp, interval: 1s, timeout: 500ms, rise: 2, "
    "fall: 3 }\n"
    "  servers:\n"
    "    - 127.0.0.1:9001:1 web-1\n"
    "    - 127.0.0.1:9002:1 web-2\n"
    "    - 127.0.0.1:9003:1 web-3\n"
    "# The same backends in http mode: each request is routed on its own,\n"
    "# by its session cookie, else by its client's address.\n"
    "api:\n"
    "  listen: 127.0.0.1:8081\n"
    "  mode: http\n"
    "  hash_key: [cookie:session, source_ip]\n"
    "  member_header: true\n"
    "  timeout: 10s\n"
    "  idle_timeout: 60s\n"
    "  health_check: { type: tcp, interval: 1s, timeout: 500ms }\n"
    "  servers:\n"
    "    - 127.0.0.1:9001:1 web-1\n"
    "    - 127.0.0.1:9002:1 web-2\n"
    "    - 127.0.0.1:9003:1 web-3\n"
    "# A redis pool as twemproxy writes it: three local redis-servers.\n"
    "kv:\n"
    "  listen: 127.0.0.1:6380\n"
    "  redis: true\n"
    "  hash: murmur\n"
    "  distribution: ketama\n"
    "  hash_tag: \"{}\"\n"
    "  timeout: 1000\n"
    "  auto_eject_hosts: true\n"
    "  server_failure_limit: 2\n"
    "  server_retry_timeout: 2000\n"
    "  health_check: { type: redis, interval: 1s, timeout: 500ms }\n"
    "  servers:\n"
    "    - 127.0.0.1:7001:1 kv-1\n"
    "    - 127.0.0.1:7002:1 kv-2\n"
    "    - 127.0.0.1:7003:1 kv-3\n"
    "# A memcache pool as twemproxy writes it (no `redis:`): ketama, and\n"
    "# murmur rather than the default fnv1a_64, which sends keys that\n"
    "# differ only at their end (user:1, user:2...) to few members.\n"
    "mc:\n"
    "  listen: 127.0.0.1:11311\n"
    "  hash: murmur\n"
    "  hash_tag: \"{}\"\n"
    "  timeout: 1000\n"
    "  auto_eject_hosts: true\n"
    "  server_failure_limit: 2\n"
    "  server_retry_timeout: 2000\n"
    "  health_check: { type: memcache, interval: 1s, timeout: 500ms }\n"
    "  servers:\n"
    "    - 127.0.0.1:7101:1 mc-1\n"
    "    - 127.0.0.1:7102:1 mc-2\n"
    "    - 127.0.0.1:7103:1 mc-3\n";

/* One load in progress: where messages go and what they name. */
struct load {
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
    int (*set)(struct load *ld, const struct conf_key *key, yaml_node_t *node,
               void *base);
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

/* The server map form { address: .., weight: .., name: .. }. */
struct server_spec {
    char *address;
    uint32_t weight;
    char *name;
    char *zone;
};

/* ------------------------------------------------------------------ */
/* Messages                                                           */

static int
node_line(const yaml_node_t *node)
{
    return node != NULL ? (int)node->start_mark.line + 1 : 1;
}

/* Write "file:<line>: message" into the caller's buffer (0 reads as 1);
 * returns -1 so parsers can `return fail(...)`. */
static int __attribute__((format(printf, 3, 0)))
vfail_at(struct load *ld, int line, const char *fmt, va_list ap)
{
    char msg[MSG_MAX];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (ld->err != NULL && ld->errlen > 0)
        snprintf(ld->err, ld->errlen, "%s:%d: %s", ld->file,
                 line > 0 ? line : 1, msg);
    return -1;
}

/* The message for <node> (line 1 when NULL). */
static int __attribute__((format(printf, 3, 4)))
fail(struct load *ld, const yaml_node_t *node, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vfail_at(ld, node_line(node), fmt, ap);
    va_end(ap);
    return rc;
}

/* The same for a line number known without a node. */
static int __attribute__((format(printf, 3, 4)))
fail_at(struct load *ld, int line, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vfail_at(ld, line, fmt, ap);
    va_end(ap);
    return rc;
}

/*
 * Add "file:line: warning: message" to the conf's warnings, after those of
 * earlier or equal lines, so they read in file order whatever the check
 * that found them. 0, or -1 after an "out of memory" error: a warning that
 * cannot be kept fails the load rather than vanish.
 */
static int __attribute__((format(printf, 3, 4)))
warn_at(struct load *ld, int line, const char *fmt, ...)
{
    struct conf *conf = ld->conf;
    size_t n = conf->nwarnings, at;
    char msg[MSG_MAX], *text, **w;
    int *wl;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (asprintf(&text, "%s:%d: warning: %s", ld->file, line, msg) < 0)
        return fail_at(ld, line, "out of memory");
    w = realloc(conf->warnings, (n + 1) * sizeof(*w));
    if (w != NULL)
        conf->warnings = w;
    wl = w != NULL ? realloc(ld->warning_lines, (n + 1) * sizeof(*wl)) : NULL;
    if (wl == NULL) {
        free(text);
        return fail_at(ld, line, "out of memory");
    }
    ld->warning_lines = wl;
    for (at = n; at > 0 && wl[at - 1] > line; at--)
        ;
    memmove(&w[at + 1], &w[at], (n - at) * sizeof(*w));
    memmove(&wl[at + 1], &wl[at], (n - at) * sizeof(*wl));
    w[at] = text;
    wl[at] = line;
    conf->nwarnings++;
    return 0;
}

static const char *
node_kind(const yaml_node_t *node)
{
    switch (node->type) {
    case YAML_SEQUENCE_NODE:
        return "a list";
    case YAML_MAPPING_NODE:
        return "a map";
    default:
        return "a value";
    }
}

/* Join the names of <table> (or a NULL-terminated <names>) with ", ". */
static void
join_keys(char *buf, size_t len, const struct conf_key *table, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 table[i].name);
}

static void
join_names(char *buf, size_t len, const char *const *names)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; names[i] != NULL && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 names[i]);
}

/* ------------------------------------------------------------------ */
/* Enum names                                                         */

static const char *const mode_names[] = {"tcp", "http", "redis", "memcache",
                                         NULL};
static const char *const hash_key_names[] = {
    "source_ip", "source_ip_port", "header", "cookie", "query", "path",
    "uri",       "host",           NULL};
static const char *const send_proxy_names[] = {"off", "v1", "v2", NULL};
static const char *const fast_path_names[] = {"sockmap", "off", NULL};
static const char *const members_from_names[] = {"config", "etcd", NULL};
static const char *const log_format_names[] = {"text", "json", NULL};
static const char *const on_failure_names[] = {"failover", "remap", "error",
                                               NULL};
static const char *const migration_names[] = {"off", "copy", "warmup", NULL};
static const char *const hot_keys_names[] = {"off", "track", "spread", NULL};
static const char *const zone_policy_names[] = {"flat", "hierarchical", NULL};
static const char *const read_policy_names[] = {"primary", "any", "quorum",
                                                NULL};
static const char *const health_type_names[] = {"tcp", "redis", "memcache",
                                                "http", NULL};
static const char *const log_level_names[] = {"error", "warn", "info", "debug",
                                              NULL};

_Static_assert(ARRAY_SIZE(mode_names) == CONF_MODE_MEMCACHE + 2,
               "mode_names follows enum conf_mode");
_Static_assert(ARRAY_SIZE(hash_key_names) == CONF_HASH_KEY_HOST + 2,
               "hash_key_names follows enum conf_hash_key");
_Static_assert(ARRAY_SIZE(on_failure_names) == CONF_ON_FAILURE_ERROR + 2,
               "on_failure_names follows enum conf_on_failure");
_Static_assert(ARRAY_SIZE(fast_path_names) == CONF_FAST_PATH_OFF + 2,
               "fast_path_names follows enum conf_fast_path");
_Static_assert(ARRAY_SIZE(log_level_names) == CONF_LOG_DEBUG + 2,
               "log_level_names follows enum conf_log_level");

static const char *
enum_name(const char *const *names, size_t n, int v)
{
    return v >= 0 && (size_t)v < n - 1 ? names[v] : NULL;
}

const char *
conf_mode_name(int mode)
{
    return enum_name(mode_names, ARRAY_SIZE(mode_names), mode);
}

const char *
conf_hash_key_name(int hash_key)
{
    return enum_name(hash_key_names, ARRAY_SIZE(hash_key_names), hash_key);
}

const char *
conf_send_proxy_name(int send_proxy)
{
    return enum_name(send_proxy_names, ARRAY_SIZE(send_proxy_names),
                     send_proxy);
}

const char *
conf_fast_path_name(int fast_path)
{
    return enum_name(fast_path_names, ARRAY_SIZE(fast_path_names), fast_path);
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
    return enum_name(on_failure_names, ARRAY_SIZE(on_failure_names),
                     on_failure);
}

const char *
conf_migration_name(int migration)
{
    return enum_name(migration_names, ARRAY_SIZE(migration_names), migration);
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

const char *
conf_zone_policy_name(int zone_policy)
{
    return enum_name(zone_policy_names, ARRAY_SIZE(zone_policy_names),
                     zone_policy);
}

const char *
conf_hot_keys_name(int hot_keys)
{
    return enum_name(hot_keys_names, ARRAY_SIZE(hot_keys_names), hot_keys);
}

const char *
conf_read_policy_name(int read_policy)
{
    return enum_name(read_policy_names, ARRAY_SIZE(read_policy_names),
                     read_policy);
}

const char *
conf_log_level_name(int log_level)
{
    return enum_name(log_level_names, ARRAY_SIZE(log_level_names), log_level);
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

/* ------------------------------------------------------------------ */
/* Scalars: numbers, durations, addresses                             */

/* Parse all of <s> as a decimal unsigned number; 0 or -1. */
static int
parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

/*
 * Durations: a number with an optional fraction and a unit (ms, s, m, h),
 * or a plain integer of milliseconds as twemproxy writes `timeout: 400`.
 * The value is computed in integers so "1.5s" is exactly 1500; a result
 * that is not a whole number of milliseconds ("1.0005s") is refused rather
 * than rounded, as is anything above UINT32_MAX ms.
 */
int
conf_parse_duration(const char *s, uint32_t *ms)
{
    uint64_t whole = 0, frac = 0, scale = 1, unit = 1, v;
    const char *p = s;
    int digits = 0;

    if (s == NULL || ms == NULL)
        return -1;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (whole > UINT32_MAX)
            return -1;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        for (; *p >= '0' && *p <= '9'; p++, digits++) {
            if (scale >= 1000000000)
                return -1;
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
        if (scale == 1)
            return -1; /* "1." */
    }
    if (digits == 0)
        return -1;
    if (strcmp(p, "ms") == 0)
        unit = 1;
    else if (strcmp(p, "s") == 0)
        unit = 1000;
    else if (strcmp(p, "m") == 0)
        unit = 60 * 1000;
    else if (strcmp(p, "h") == 0)
        unit = 3600 * 1000;
    else if (*p == '\0' && scale == 1)
        unit = 1; /* plain milliseconds, twemproxy style */
    else
        return -1;
    if (whole > UINT32_MAX || (frac * unit) % scale != 0)
        return -1;
    v = whole * unit + frac * unit / scale;
    if (v > UINT32_MAX)
        return -1;
    *ms = (uint32_t)v;
    return 0;
}

void
conf_addr_deinit(struct conf_addr *addr)
{
    if (addr == NULL)
        return;
    free(addr->text);
    memset(addr, 0, sizeof(*addr));
}

/* Resolve <host> (numeric first, then once through getaddrinfo) with
 * <port> into <addr>. <v6only>: the host was written in brackets. */
static int
resolve(const char *host, uint16_t port, bool v6only, struct conf_addr *addr,
        char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL, *pick = NULL;
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = v6only ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 && !v6only) {
        hints.ai_flags = 0;
        rc = getaddrinfo(host, NULL, &hints, &res);
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", host,
                 v6only ? "not an IPv6 address" : gai_strerror(rc));
        return -1;
    }
    /* Prefer IPv4: "localhost" should not silently mean ::1 only. */
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
        if (ai->ai_family == AF_INET6 && pick == NULL)
            pick = ai;
    }
    if (pick == NULL || pick->ai_addrlen > sizeof(addr->sa)) {
        freeaddrinfo(res);
        snprintf(err, errlen, "host '%s' has no IPv4 or IPv6 address", host);
        return -1;
    }
    memcpy(&addr->sa, pick->ai_addr, pick->ai_addrlen);
    addr->salen = (socklen_t)pick->ai_addrlen;
    addr->family = pick->ai_family;
    addr->port = port;
    if (addr->family == AF_INET)
        ((struct sockaddr_in *)&addr->sa)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)&addr->sa)->sin6_port = htons(port);
    freeaddrinfo(res);
    return 0;
}

static int
parse_port(const char *s, uint16_t *port)
{
    uint64_t v;

    if (parse_u64(s, &v) != 0 || v < 1 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

/*
 * "host:port", "[v6]:port" or "/unix/path". The port is taken after the
 * last colon; a host with colons must be bracketed, because "::1:80" could
 * be read two ways.
 */
int
conf_parse_addr(const char *s, struct conf_addr *addr, char *err, size_t errlen)
{
    char host[256];
    const char *colon, *port_text;
    size_t hostlen;
    bool bracket = false;

    memset(addr, 0, sizeof(*addr));
    if (s == NULL || *s == '\0') {
        snprintf(err, errlen, "empty address");
        return -1;
    }
    if (s[0] == '/') {
        struct sockaddr_un *un = (struct sockaddr_un *)&addr->sa;
        size_t len = strlen(s);

        if (len >= sizeof(un->sun_path)) {
            snprintf(err, errlen,
                     "unix socket path '%s' is longer than %zu "
                     "bytes",
                     s, sizeof(un->sun_path) - 1);
            return -1;
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, s, len + 1);
        addr->salen =
            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
        addr->family = AF_UNIX;
        goto text;
    }
    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':') {
            snprintf(err, errlen, "bad address '%s': expected [ipv6]:port", s);
            return -1;
        }
        bracket = true;
        hostlen = (size_t)(close - s - 1);
        memcpy(host, s + 1, hostlen < sizeof(host) ? hostlen : 0);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL) {
            snprintf(err, errlen,
                     "bad address '%s': expected host:port "
                     "or /unix/path",
                     s);
            return -1;
        }
        hostlen = (size_t)(colon - s);
        if (memchr(s, ':', hostlen) != NULL) {
            snprintf(err, errlen,
                     "bad address '%s': write IPv6 addresses "
                     "in brackets, as [::1]:port",
                     s);
            return -1;
        }
        if (hostlen < sizeof(host))
            memcpy(host, s, hostlen);
    }
    if (hostlen == 0 || hostlen >= sizeof(host)) {
        snprintf(err, errlen, "bad address '%s': %s host", s,
                 hostlen == 0 ? "missing" : "too long a");
        return -1;
    }
    host[hostlen] = '\0';
    port_text = colon + 1;
    if (parse_port(port_text, &addr->port) != 0) {
        snprintf(err, errlen,
                 "bad address '%s': port '%s' is not a number "
                 "from 1 to 65535",
                 s, port_text);
        return -1;
    }
    if (resolve(host, addr->port, bracket, addr, err, errlen) != 0)
        return -1;
text:
    addr->text = strdup(s);
    if (addr->text == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

bool
conf_addr_equal(const struct conf_addr *a, const struct conf_addr *b)
{
    if (a->family != b->family)
        return false;
    switch (a->family) {
    case AF_INET: {
        const struct sockaddr_in *x = (const void *)&a->sa;
        const struct sockaddr_in *y = (const void *)&b->sa;
        return a->port == b->port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *x = (const void *)&a->sa;
        const struct sockaddr_in6 *y = (const void *)&b->sa;
        return a->port == b->port && x->sin6_scope_id == y->sin6_scope_id &&
               memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
    }
    case AF_UNIX: {
        const struct sockaddr_un *x = (const void *)&a->sa;
        const struct sockaddr_un *y = (const void *)&b->sa;
        return strcmp(x->sun_path, y->sun_path) == 0;
    }
    default:
        return true; /* both unset */
    }
}

static bool
addr_is_wildcard(const struct conf_addr *a)
{
    if (a->family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)&a->sa)
                   ->sin_addr.s_addr == htonl(INADDR_ANY);
    if (a->family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(
            &((const struct sockaddr_in6 *)(const void *)&a->sa)->sin6_addr);
    return false;
}

/* Two listening addresses that cannot both be bound, or that would share
 * one port through SO_REUSEPORT and split its clients: the same address,
 * or the same port where either side is a wildcard (0.0.0.0 and [::] also
 * overlap, as Linux binds [::] dual-stack by default). */
static bool
addr_conflict(const struct conf_addr *a, const struct conf_addr *b)
{
    if (a->family == AF_UNSPEC || b->family == AF_UNSPEC)
        return false;
    if (a->family == AF_UNIX || b->family == AF_UNIX)
        return conf_addr_equal(a, b);
    if (a->port != b->port)
        return false;
    return conf_addr_equal(a, b) || addr_is_wildcard(a) || addr_is_wildcard(b);
}

bool
conf_addr_is_loopback(const struct conf_addr *a)
{
    if (a->family == AF_UNIX)
        return true;
    if (a->family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)&a->sa)
                          ->sin_addr.s_addr) >>
                24) == 127;
    if (a->family == AF_INET6) {
        const struct in6_addr *in =
            &((const struct sockaddr_in6 *)(const void *)&a->sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(in) ||
               (IN6_IS_ADDR_V4MAPPED(in) && in->s6_addr[12] == 127);
    }
    return false;
}

/* ------------------------------------------------------------------ */
/* Reaching chashd itself                                             */

/* An IP address reduced for comparison: a v4-mapped IPv6 address is the
 * IPv4 address it carries, as the kernel delivers it. */
struct ip {
    int family;          /* AF_INET or AF_INET6 */
    unsigned char b[16]; /* 4 or 16 bytes, network order */
    uint32_t scope;      /* IPv6 scope id */
};

static bool
ip_of(const struct sockaddr *sa, struct ip *ip)
{
    memset(ip, 0, sizeof(*ip));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        ip->family = AF_INET;
        memcpy(ip->b, &in->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            ip->family = AF_INET;
            memcpy(ip->b, in6->sin6_addr.s6_addr + 12, 4);
            return true;
        }
        ip->family = AF_INET6;
        memcpy(ip->b, &in6->sin6_addr, 16);
        ip->scope = in6->sin6_scope_id;
        return true;
    }
    return false;
}

static size_t
ip_len(const struct ip *ip)
{
    return ip->family == AF_INET ? 4 : 16;
}

static bool
ip_any(const struct ip *ip)
{
    static const unsigned char zero[16];

    return memcmp(ip->b, zero, ip_len(ip)) == 0;
}

static bool
ip_loopback(const struct ip *ip)
{
    static const unsigned char one[16] = {[15] = 1};

    if (ip->family == AF_INET)
        return ip->b[0] == 127;
    return memcmp(ip->b, one, 16) == 0;
}

/* The addresses of the local interfaces, read at most once per check
 * and only when a wildcard listen address shares a member's port. */
struct local {
    struct ifaddrs *ifs;
    bool read;
};

static void
local_deinit(struct local *loc)
{
    if (loc->ifs != NULL)
        freeifaddrs(loc->ifs);
    loc->ifs = NULL;
    loc->read = false;
}

/* Is <ip> an address of this host? Where getifaddrs fails only the
 * loopback addresses are known to be local. */
static bool
ip_local(const struct ip *ip, struct local *loc)
{
    if (ip_loopback(ip))
        return true;
    if (!loc->read) {
        loc->read = true;
        if (getifaddrs(&loc->ifs) != 0)
            loc->ifs = NULL;
    }
    for (const struct ifaddrs *i = loc->ifs; i != NULL; i = i->ifa_next) {
        struct ip x;

        if (i->ifa_addr == NULL || !ip_of(i->ifa_addr, &x))
            continue;
        if (x.family == ip->family && memcmp(x.b, ip->b, ip_len(ip)) == 0)
            return true;
    }
    return false;
}

static bool
reaches(const struct conf_addr *listen, const struct conf_addr *member,
        struct local *loc)
{
    struct ip l, m;

    if (listen->family == AF_UNSPEC || member->family == AF_UNSPEC)
        return false;
    if (listen->family == AF_UNIX || member->family == AF_UNIX)
        return listen->family == member->family &&
               conf_addr_equal(listen, member);
    if (listen->port != member->port ||
        !ip_of((const struct sockaddr *)&listen->sa, &l) ||
        !ip_of((const struct sockaddr *)&member->sa, &m))
        return false;
    /* Linux connects 0.0.0.0 to 127.0.0.1 and [::] to [::1]. */
    if (ip_any(&m)) {
        memset(m.b, 0, sizeof(m.b));
        if (m.family == AF_INET) {
            m.b[0] = 127;
            m.b[3] = 1;
        } else {
            m.b[15] = 1;
        }
    }
    if (!ip_any(&l))
        return l.family == m.family && memcmp(l.b, m.b, ip_len(&l)) == 0 &&
               (l.family == AF_INET || l.scope == m.scope);
    /* A wildcard: 0.0.0.0 takes IPv4 only; [::] takes both, as chashd
     * leaves IPV6_V6ONLY at Linux's default (off). */
    if (l.family == AF_INET && m.family != AF_INET)
        return false;
    return ip_local(&m, loc);
}

bool
conf_addr_reaches(const struct conf_addr *listen,
                  const struct conf_addr *member)
{
    struct local loc = {NULL, false};
    bool r = reaches(listen, member, &loc);

    local_deinit(&loc);
    return r;
}

static const char *
self_address(const struct conf *conf, const struct conf_addr *a, char *buf,
             size_t len, struct local *loc)
{
    for (size_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *p = &conf->pools[i];

        if (reaches(&p->listen, a, loc)) {
            snprintf(buf, len, "the listen address of pool '%s' (%s)", p->name,
                     p->listen.text);
            return buf;
        }
    }
    if (reaches(&conf->admin, a, loc)) {
        snprintf(buf, len, "the admin address (%s)", conf->admin.text);
        return buf;
    }
    return NULL;
}

const char *
conf_self_address(const struct conf *conf, const struct conf_addr *a, char *buf,
                  size_t len)
{
    struct local loc = {NULL, false};
    const char *r = self_address(conf, a, buf, len, &loc);

    local_deinit(&loc);
    return r;
}

/* ------------------------------------------------------------------ */
/* Servers                                                            */

void
conf_server_deinit(struct conf_server *server)
{
    if (server == NULL)
        return;
    free(server->name);
    free(server->zone);
    conf_addr_deinit(&server->addr);
    memset(server, 0, sizeof(*server));
}

static bool
has_space(const char *s)
{
    for (; *s != '\0'; s++)
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            return true;
    return false;
}

/* Fill <server> from an address text, a weight and an optional explicit
 * name, applying twemproxy's naming rule when <name> is NULL. */
static int
server_init(struct conf_server *server, const char *address, uint32_t weight,
            const char *name, char *err, size_t errlen)
{
    memset(server, 0, sizeof(*server));
    if (name != NULL && (*name == '\0' || has_space(name))) {
        snprintf(err, errlen, "name '%s' must be one word", name);
        return -1;
    }
    if (conf_parse_addr(address, &server->addr, err, errlen) != 0)
        return -1;
    server->weight = weight;
    if (name != NULL) {
        server->name = strdup(name);
    } else if (server->addr.port == KETAMA_PORT) {
        /* "host" alone, as written: libmemcached compatibility. */
        server->name =
            strndup(address, (size_t)(strrchr(address, ':') - address));
    } else {
        server->name = strdup(address); /* "host:port" or the unix path */
    }
    if (server->name == NULL) {
        conf_server_deinit(server);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (strlen(server->name) > MAX_NAME) {
        snprintf(err, errlen,
                 "server name '%.40s...' is longer than %d "
                 "bytes",
                 server->name, MAX_NAME);
        conf_server_deinit(server);
        return -1;
    }
    return 0;
}

static int
parse_weight(const char *s, uint32_t *weight, const char *whole, char *err,
             size_t errlen)
{
    uint64_t v;

    if (parse_u64(s, &v) != 0 || v > UINT32_MAX) {
        snprintf(err, errlen,
                 "bad server '%s': weight '%s' is not a whole "
                 "number from 0 to %u",
                 whole, s, UINT32_MAX);
        return -1;
    }
    *weight = (uint32_t)v;
    return 0;
}

/*
 * "host:port:weight [name]" as twemproxy writes it, and the shorter forms
 * this loader also takes: the weight may be left out (1), the host may be
 * a bracketed IPv6 address, and "/unix/path[:weight] [name]". What ends
 * the address and starts the weight is told by counting colons after the
 * host, so "10.0.0.1:9001" and "10.0.0.1:9001:2" are both clear.
 */
int
conf_parse_server(const char *s, struct conf_server *server, char *err,
                  size_t errlen)
{
    char *buf, *addr, *name = NULL, *zone = NULL, *weight_text = NULL, *p,
                      msg[400];
    uint32_t weight = 1;
    int rc = -1;

    memset(server, 0, sizeof(*server));
    buf = strdup(s != NULL ? s : "");
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    addr = buf + strspn(buf, " \t");
    p = addr + strcspn(addr, " \t");
    if (*p != '\0') {
        *p++ = '\0';
        name = p + strspn(p, " \t");
        for (p = name + strlen(name);
             p > name && (p[-1] == ' ' || p[-1] == '\t');)
            *--p = '\0';
        if (*name == '\0') {
            name = NULL;
        } else if (has_space(name)) {
            /* "name zone": a second word is the server's zone. Split at
             * the bytes has_space() found: a name with only a CR or LF in
             * it (a state file's) went past its NUL here. */
            zone = name + strcspn(name, " \t\r\n");
            *zone++ = '\0';
            zone += strspn(zone, " \t\r\n");
            if (has_space(zone) || !etcd_name_ok(zone)) {
                snprintf(err, errlen,
                         "bad server '%s': expected "
                         "host:port:weight [name [zone]], one word each "
                         "(a zone: 1 to 63 letters, digits, '.', '_', ':' "
                         "or '-')",
                         s);
                goto out;
            }
        }
    }
    if (*addr == '\0') {
        snprintf(err, errlen,
                 "bad server '%s': expected host:port:weight "
                 "[name]",
                 s);
        goto out;
    }
    if (addr[0] == '/') {
        /* "/path:weight": a trailing all-digit part is the weight. */
        char *c = strrchr(addr, ':');
        uint64_t v;
        if (c != NULL && parse_u64(c + 1, &v) == 0) {
            *c = '\0';
            weight_text = c + 1;
        }
    } else {
        const char *host_end = addr;
        size_t colons = 0;
        if (addr[0] == '[') {
            host_end = strchr(addr, ']');
            if (host_end == NULL) {
                snprintf(err, errlen,
                         "bad server '%s': missing ']' after "
                         "the IPv6 address",
                         s);
                goto out;
            }
        }
        for (const char *c = host_end; *c != '\0'; c++)
            colons += *c == ':';
        if (colons == 2) {
            char *c = strrchr(addr, ':');
            *c = '\0';
            weight_text = c + 1;
        } else if (colons > 2) {
            snprintf(err, errlen,
                     "bad server '%s': expected host:port:weight"
                     " [name] (write IPv6 addresses as [::1]:port:weight)",
                     s);
            goto out;
        }
    }
    if (weight_text != NULL &&
        parse_weight(weight_text, &weight, s, err, errlen) != 0)
        goto out;
    rc = server_init(server, addr, weight, name, msg, sizeof(msg));
    if (rc == 0 && zone != NULL && (server->zone = strdup(zone)) == NULL) {
        conf_server_deinit(server);
        snprintf(msg, sizeof(msg), "out of memory");
        rc = -1;
    }
    if (rc != 0)
        snprintf(err, errlen, "bad server '%s': %s", s, msg);
out:
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Key parsers                                                        */

#define FIELD(base, key, type)                                                 \
    ((type *)(void *)((char *)(base) + (key)->offset))

/* The text of a scalar <node>, or NULL after a message. */
static const char *
scalar(struct load *ld, const struct conf_key *key, yaml_node_t *node)
{
    const char *v;

    if (node->type != YAML_SCALAR_NODE) {
        fail(ld, node, "'%s' takes a single value, not %s", key->name,
             node_kind(node));
        return NULL;
    }
    v = (const char *)node->data.scalar.value;
    if (node->data.scalar.length == 0) {
        fail(ld, node, "'%s' has no value", key->name);
        return NULL;
    }
    if (strlen(v) != node->data.scalar.length) {
        fail(ld, node, "'%s' contains a NUL byte", key->name);
        return NULL;
    }
    return v;
}

static int
set_u32(struct load *ld, const struct conf_key *key, yaml_node_t *node,
        void *base)
{
    const char *v = scalar(ld, key, node);
    uint64_t n;

    if (v == NULL)
        return -1;
    if (parse_u64(v, &n) != 0)
        return fail(ld, node, "'%s' must be a whole number, not '%s'",
                    key->name, v);
    if (n < key->min || n > key->max)
        return fail(ld, node,
                    "'%s' is out of range: %s is not between %u "
                    "and %u",
                    key->name, v, key->min, key->max);
    *FIELD(base, key, uint32_t) = (uint32_t)n;
    return 0;
}

/*
 * A size in bytes: a whole number, or one with k, m, g (or kb, mb, gb; any
 * case; powers of 1024, as Redis reads its sizes): "512mb", "64k". At
 * least <key->min>, at most MAX_SIZE.
 */
static int
set_size(struct load *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    const char *v = scalar(ld, key, node), *u;
    char digits[32];
    uint64_t n, mul = 1;
    size_t nd;

    if (v == NULL)
        return -1;
    for (u = v; *u >= '0' && *u <= '9'; u++)
        ;
    nd = (size_t)(u - v);
    if (nd == 0 || nd >= sizeof(digits))
        goto bad;
    memcpy(digits, v, nd);
    digits[nd] = '\0';
    if (strcasecmp(u, "") == 0 || strcasecmp(u, "b") == 0)
        mul = 1;
    else if (strcasecmp(u, "k") == 0 || strcasecmp(u, "kb") == 0)
        mul = 1024;
    else if (strcasecmp(u, "m") == 0 || strcasecmp(u, "mb") == 0)
        mul = 1024 * 1024;
    else if (strcasecmp(u, "g") == 0 || strcasecmp(u, "gb") == 0)
        mul = 1024 * 1024 * 1024;
    else
        goto bad;
    if (parse_u64(digits, &n) != 0 || n > MAX_SIZE / mul)
        goto bad;
    n *= mul;
    if (n < key->min)
        return fail(ld, node, "'%s' is too small: %s is less than %u bytes",
                    key->name, v, key->min);
    if (key->max != 0 && n > key->max)
        return fail(ld, node, "'%s' is too large: %s is more than %u bytes",
                    key->name, v, key->max);
    *FIELD(base, key, uint64_t) = n;
    return 0;
bad:
    return fail(ld, node,
                "'%s' must be a size: bytes, or a number with k, m or g "
                "(512mb), up to 4g, not '%s'",
                key->name, v);
}

static int
set_int(struct load *ld, const struct conf_key *key, yaml_node_t *node,
        void *base)
{
    uint32_t v;
    struct conf_key k = *key;

    k.offset = 0;
    if (set_u32(ld, &k, node, &v) != 0)
        return -1;
    *FIELD(base, key, int) = (int)v;
    return 0;
}

static int
set_ms(struct load *ld, const struct conf_key *key, yaml_node_t *node,
       void *base)
{
    const char *v = scalar(ld, key, node);
    uint32_t ms;

    if (v == NULL)
        return -1;
    if (conf_parse_duration(v, &ms) != 0)
        return fail(ld, node,
                    "'%s' must be a duration (500ms, 2s, 1m, 1h, "
                    "or plain milliseconds), not '%s'",
                    key->name, v);
    if (ms < key->min || ms > key->max)
        return fail(ld, node,
                    "'%s' is out of range: %s is not between %ums "
                    "and %ums",
                    key->name, v, key->min, key->max);
    *FIELD(base, key, uint32_t) = ms;
    /* twemproxy's keys are plain milliseconds by definition; ours take
     * units, and "slow_start: 30" is far more likely 30 s forgotten than
     * a 30 ms ramp. Read as twemproxy would, but say so. */
    if (!key->twemproxy && ms > 0 && ms < WARN_PLAIN_MS &&
        v[strspn(v, "0123456789")] == '\0')
        return warn_at(ld, node_line(node),
                       "'%s: %s' has no unit and is read as %u "
                       "milliseconds (write %ss for seconds)",
                       key->name, v, ms, v);
    return 0;
}

static int
parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};

    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int
set_bool(struct load *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    const char *v = scalar(ld, key, node);

    if (v == NULL)
        return -1;
    if (parse_bool(v, FIELD(base, key, bool)) != 0)
        return fail(ld, node, "'%s' must be true or false, not '%s'", key->name,
                    v);
    return 0;
}

static int
set_string(struct load *ld, const struct conf_key *key, yaml_node_t *node,
           void *base)
{
    const char *v = scalar(ld, key, node);
    char **field = FIELD(base, key, char *);

    if (v == NULL)
        return -1;
    free(*field);
    *field = strdup(v);
    if (*field == NULL)
        return fail(ld, node, "out of memory");
    return 0;
}

static int
set_enum(struct load *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    const char *v = scalar(ld, key, node);
    char valid[512];

    if (v == NULL)
        return -1;
    for (int i = 0; key->names[i] != NULL; i++) {
        if (strcmp(v, key->names[i]) == 0) {
            *FIELD(base, key, int) = i;
            return 0;
        }
    }
    join_names(valid, sizeof(valid), key->names);
    return fail(ld, node, "unknown %s '%s' (valid: %s)", key->name, v, valid);
}

static int
set_hash(struct load *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    const char *v = scalar(ld, key, node);
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
    return fail(ld, node, "unknown hash '%s' (valid: %s)", v, valid);
}

static int
set_distribution(struct load *ld, const struct conf_key *key, yaml_node_t *node,
                 void *base)
{
    const char *v = scalar(ld, key, node);
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
    return fail(ld, node, "unknown distribution '%s' (valid: %s)", v, valid);
}

static int
set_hash_tag(struct load *ld, const struct conf_key *key, yaml_node_t *node,
             void *base)
{
    const char *v = scalar(ld, key, node);
    char *tag = FIELD(base, key, char);

    if (v == NULL)
        return -1;
    if (strlen(v) != 2)
        return fail(ld, node,
                    "'hash_tag' must be two characters, like "
                    "\"{}\", not '%s'",
                    v);
    memcpy(tag, v, 3);
    return 0;
}

static int
set_balance_factor(struct load *ld, const struct conf_key *key,
                   yaml_node_t *node, void *base)
{
    const char *v = scalar(ld, key, node);
    char *end;
    double f;

    if (v == NULL)
        return -1;
    errno = 0;
    f = strtod(v, &end);
    if (*end != '\0' || end == v || errno != 0 || !isfinite(f))
        return fail(ld, node, "'%s' must be a number, not '%s'", key->name, v);
    if (f != 0 && (f < 1.0 || f > 100.0))
        return fail(ld, node,
                    "'%s' is out of range: %s is not 0 (off) or "
                    "between 1.0 and 100",
                    key->name, v);
    *FIELD(base, key, double) = f;
    return 0;
}

/* `listen: host:port`, `/path/sock`, and twemproxy's unix socket
 * permissions: "/path/sock 0666" (nutcracker 0.5) or "/path/sock:0666". */
static int
set_listen(struct load *ld, const struct conf_key *key, yaml_node_t *node,
           void *base)
{
    struct conf_pool *pool = base;
    const char *v = scalar(ld, key, node);
    char buf[512], msg[512], *perm = NULL;

    if (v == NULL)
        return -1;
    if (strlen(v) >= sizeof(buf))
        return fail(ld, node, "'listen' address is too long");
    strcpy(buf, v);
    if (buf[0] == '/') {
        char *sep = strrchr(buf, ' ');
        if (sep == NULL)
            sep = strrchr(buf, ':');
        if (sep != NULL && sep[1] >= '0' && sep[1] <= '9') {
            *sep = '\0';
            perm = sep + 1;
        }
    }
    if (perm != NULL) {
        char *end;
        long mode;

        errno = 0;
        mode = strtol(perm, &end, 8);
        if (*end != '\0' || errno != 0 || mode < 0 || mode > 0777)
            return fail(ld, node,
                        "bad 'listen' permissions '%s': expected "
                        "an octal mode like 0666",
                        perm);
        pool->listen_perm = (int)mode;
    }
    conf_addr_deinit(&pool->listen);
    if (conf_parse_addr(buf, &pool->listen, msg, sizeof(msg)) != 0)
        return fail(ld, node, "bad 'listen': %s", msg);
    return 0;
}

static int
set_admin(struct load *ld, const struct conf_key *key, yaml_node_t *node,
          void *base)
{
    struct conf_addr *admin = FIELD(base, key, struct conf_addr);
    const char *v = scalar(ld, key, node);
    char msg[512];
    bool on;

    if (v == NULL)
        return -1;
    conf_addr_deinit(admin);
    if (parse_bool(v, &on) == 0 && !on)
        return 0; /* admin: off */
    if (conf_parse_addr(v, admin, msg, sizeof(msg)) != 0)
        return fail(ld, node, "bad 'admin': %s", msg);
    return 0;
}

static int parse_map(struct load *ld, yaml_node_t *node,
                     const struct conf_key *table, size_t n, void *base,
                     const char *what, int *lines);

static int set_short_string(struct load *ld, const struct conf_key *key,
                            yaml_node_t *node, void *base);

static const struct conf_key health_keys[] = {
    {"type", set_enum, offsetof(struct conf_health, type), 0, 0,
     health_type_names, 0, false},
    {"interval", set_ms, offsetof(struct conf_health, interval_ms), 10,
     MAX_DURATION, NULL, 0, false},
    {"timeout", set_ms, offsetof(struct conf_health, timeout_ms), 1,
     MAX_DURATION, NULL, 0, false},
    {"rise", set_u32, offsetof(struct conf_health, rise), 1, 1000, NULL, 0,
     false},
    {"fall", set_u32, offsetof(struct conf_health, fall), 1, 1000, NULL, 0,
     false},
    /* type http */
    {"path", set_short_string, offsetof(struct conf_health, path), 0, 0, NULL,
     0, false},
    {"host", set_short_string, offsetof(struct conf_health, host), 0, 0, NULL,
     0, false},
    {"expect_status", set_u32, offsetof(struct conf_health, expect_status), 100,
     599, NULL, 0, false},
};

/* `health_check: { type: tcp, ... }`, or `true` / `false` alone. */
static int
set_health(struct load *ld, const struct conf_key *key, yaml_node_t *node,
           void *base)
{
    struct conf_health *health = FIELD(base, key, struct conf_health);
    int lines[ARRAY_SIZE(health_keys)] = {0};

    if (node->type == YAML_SCALAR_NODE) {
        const char *v = scalar(ld, key, node);
        if (v == NULL)
            return -1;
        if (parse_bool(v, &health->enabled) != 0)
            return fail(ld, node,
                        "'health_check' must be a map like { type:"
                        " tcp, interval: 1s } or true/false, not '%s'",
                        v);
        return 0;
    }
    if (parse_map(ld, node, health_keys, ARRAY_SIZE(health_keys), health,
                  "health_check", lines) != 0)
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(health_keys); i++)
        if (lines[i] != 0 && health->type != CONF_HEALTH_HTTP &&
            (health_keys[i].set == set_short_string ||
             i == ARRAY_SIZE(health_keys) - 1))
            return fail_at(
                ld, lines[i], "health_check '%s' is for type http, not %s",
                health_keys[i].name, health_type_names[health->type]);
    health->enabled = true;
    return 0;
}

static const struct conf_key server_keys[] = {
    {"address", set_string, offsetof(struct server_spec, address), 0, 0, NULL,
     0, false},
    {"weight", set_u32, offsetof(struct server_spec, weight), 0, UINT32_MAX,
     NULL, 0, false},
    {"name", set_string, offsetof(struct server_spec, name), 0, 0, NULL, 0,
     false},
    {"zone", set_string, offsetof(struct server_spec, zone), 0, 0, NULL, 0,
     false},
};

static int
server_from_map(struct load *ld, yaml_node_t *node, struct conf_server *server)
{
    struct server_spec spec = {NULL, 1, NULL, NULL};
    int lines[ARRAY_SIZE(server_keys)] = {0};
    char msg[512];
    int rc = -1;

    if (parse_map(ld, node, server_keys, ARRAY_SIZE(server_keys), &spec,
                  "a server", lines) != 0)
        goto out;
    if (spec.address == NULL) {
        fail(ld, node,
             "server has no 'address' (valid keys: address, "
             "weight, name, zone)");
        goto out;
    }
    if (server_init(server, spec.address, spec.weight, spec.name, msg,
                    sizeof(msg)) != 0) {
        fail(ld, node, "bad server: %s", msg);
        goto out;
    }
    if (spec.zone != NULL) {
        if (!etcd_name_ok(spec.zone)) {
            fail(ld, node,
                 "bad server zone '%s': use 1 to 63 letters, digits, '.', "
                 "'_', ':' or '-'",
                 spec.zone);
            goto out;
        }
        server->zone = spec.zone;
        spec.zone = NULL;
    }
    rc = 0;
out:
    free(spec.address);
    free(spec.name);
    free(spec.zone);
    return rc;
}

static int
set_servers(struct load *ld, const struct conf_key *key, yaml_node_t *node,
            void *base)
{
    struct conf_pool *pool = base;
    yaml_node_item_t *item;
    size_t n;

    (void)key;
    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return 0; /* `servers:` with nothing: "has no servers" later */
    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node,
                    "'servers' must be a list of \"host:port:weight"
                    " [name]\", not %s",
                    node_kind(node));
    n = (size_t)(node->data.sequence.items.top -
                 node->data.sequence.items.start);
    pool->servers = calloc(n ? n : 1, sizeof(*pool->servers));
    if (pool->servers == NULL)
        return fail(ld, node, "out of memory");
    for (item = node->data.sequence.items.start;
         item < node->data.sequence.items.top; item++) {
        yaml_node_t *s = yaml_document_get_node(ld->doc, *item);
        struct conf_server *server = &pool->servers[pool->nservers];
        char msg[512];

        if (s->type == YAML_MAPPING_NODE) {
            if (server_from_map(ld, s, server) != 0)
                return -1;
        } else if (s->type == YAML_SCALAR_NODE) {
            const char *v = (const char *)s->data.scalar.value;
            if (strlen(v) != s->data.scalar.length)
                return fail(ld, s, "server contains a NUL byte");
            if (conf_parse_server(v, server, msg, sizeof(msg)) != 0)
                return fail(ld, s, "%s", msg);
        } else {
            return fail(ld, s,
                        "a server must be \"host:port:weight [name]\""
                        " or { address: .., weight: .., name: .. }, not %s",
                        node_kind(s));
        }
        server->line = node_line(s);
        pool->nservers++;
    }
    return 0;
}

static int
set_commands(struct load *ld, const struct conf_key *key, yaml_node_t *node,
             void *base)
{
    struct conf_pool *pool = base;
    yaml_node_item_t *item;
    size_t n;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, "'%s' must be a list, not %s", key->name,
                    node_kind(node));
    n = (size_t)(node->data.sequence.items.top -
                 node->data.sequence.items.start);
    pool->commands = calloc(n ? n : 1, sizeof(*pool->commands));
    if (pool->commands == NULL)
        return fail(ld, node, "out of memory");
    for (item = node->data.sequence.items.start;
         item < node->data.sequence.items.top; item++) {
        yaml_node_t *c = yaml_document_get_node(ld->doc, *item);
        const char *v = scalar(ld, key, c);
        if (v == NULL)
            return -1;
        pool->commands[pool->ncommands] = strdup(v);
        if (pool->commands[pool->ncommands] == NULL)
            return fail(ld, c, "out of memory");
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
parse_key_source(struct load *ld, const struct conf_key *key, yaml_node_t *node,
                 struct conf_key_source *k)
{
    const char *v = scalar(ld, key, node), *colon;
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
    for (int i = 0; hash_key_names[i] != NULL; i++)
        if (strcmp(kind, hash_key_names[i]) == 0)
            k->kind = i;
    if (k->kind < 0) {
        join_names(valid, sizeof(valid), hash_key_names);
        return fail(ld, node,
                    "unknown %s '%s' (valid: %s; header, cookie and query "
                    "take a name: header:X-User-Id)",
                    key->name, v, valid);
    }
    bool named = k->kind == CONF_HASH_KEY_HEADER ||
                 k->kind == CONF_HASH_KEY_COOKIE ||
                 k->kind == CONF_HASH_KEY_QUERY;
    if (!named && colon != NULL)
        return fail(ld, node, "%s '%s': '%s' takes no name", key->name, v,
                    kind);
    if (!named)
        return 0;
    if (colon == NULL || colon[1] == '\0')
        return fail(ld, node, "%s '%s' needs a name: %s:NAME", key->name, v,
                    kind);
    if (strlen(colon + 1) >= CONF_KEY_NAME_MAX)
        return fail(ld, node, "%s '%s': the name is longer than %d bytes",
                    key->name, v, CONF_KEY_NAME_MAX - 1);
    for (const char *c = colon + 1; *c != '\0'; c++) {
        unsigned char u = (unsigned char)*c;
        bool ok = k->kind == CONF_HASH_KEY_HEADER
                      ? is_tchar(u)
                      : u > 0x20 && u < 0x7f && strchr(";=,&\"", u) == NULL;
        if (!ok)
            return fail(ld, node,
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
set_hash_key(struct load *ld, const struct conf_key *key, yaml_node_t *node,
             void *base)
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
        return fail(ld, node, "'%s' must list 1 to %d sources, not %zu",
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

/* `forward_headers: [x-forwarded-for, x-forwarded-proto, forwarded]`, or
 * `off` / `[]` for none. */
/* zone_weights: { zone: weight, ... } (zone_policy: hierarchical). */
static int
set_zone_weights(struct load *ld, const struct conf_key *key, yaml_node_t *node,
                 void *base)
{
    struct conf_pool *pool = base;
    yaml_node_pair_t *pair;

    (void)key;
    if (node->type != YAML_MAPPING_NODE)
        return fail(ld, node,
                    "'zone_weights' must be a map of zone: weight, not %s",
                    node_kind(node));
    for (pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, pair->value);
        const char *zone = k && k->type == YAML_SCALAR_NODE
                               ? (const char *)k->data.scalar.value
                               : NULL;
        uint64_t w;

        if (zone == NULL || !etcd_name_ok(zone))
            return fail(ld, k ? k : node,
                        "'zone_weights': a zone is 1 to 63 letters, digits, "
                        "'.', '_', ':' or '-'");
        if (v == NULL || v->type != YAML_SCALAR_NODE ||
            parse_u64((const char *)v->data.scalar.value, &w) != 0 || w < 1 ||
            w > 1000000)
            return fail(ld, v ? v : node,
                        "'zone_weights': the weight of zone '%s' must be an "
                        "integer from 1 to 1000000",
                        zone);
        for (size_t i = 0; i < pool->nzone_weights; i++)
            if (strcmp(pool->zone_weights[i].zone, zone) == 0)
                return fail(ld, k, "'zone_weights': zone '%s' is given twice",
                            zone);
        if (pool->nzone_weights == RING_ZONE_WEIGHTS_MAX)
            return fail(ld, k,
                        "'zone_weights': at most %d zones (the others weigh "
                        "their servers' sum)",
                        RING_ZONE_WEIGHTS_MAX);
        snprintf(pool->zone_weights[pool->nzone_weights].zone,
                 sizeof(pool->zone_weights[0].zone), "%s", zone);
        pool->zone_weights[pool->nzone_weights++].weight = (uint32_t)w;
    }
    return 0;
}

static int
set_forward_headers(struct load *ld, const struct conf_key *key,
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
        if (parse_bool(v, &on) == 0 && !on) {
            *bits = 0;
            return 0;
        }
        return fail(ld, node,
                    "'%s' must be a list like [x-forwarded-for, "
                    "x-forwarded-proto, forwarded], or off, not '%s'",
                    key->name, v);
    }
    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, "'%s' must be a list, not %s", key->name,
                    node_kind(node));
    *bits = 0;
    for (item = node->data.sequence.items.start;
         item < node->data.sequence.items.top; item++) {
        yaml_node_t *c = yaml_document_get_node(ld->doc, *item);
        const char *v = scalar(ld, key, c);
        int i;

        if (v == NULL)
            return -1;
        for (i = 0; names[i] != NULL && strcasecmp(v, names[i]) != 0; i++)
            ;
        if (names[i] == NULL) {
            join_names(valid, sizeof(valid), names);
            return fail(ld, c, "unknown %s '%s' (valid: %s)", key->name, v,
                        valid);
        }
        *bits |= 1u << i;
    }
    return 0;
}

/* `access_log: /var/log/chashd/web.log | syslog | off`. */
static int
set_access_log(struct load *ld, const struct conf_key *key, yaml_node_t *node,
               void *base)
{
    const char *v = scalar(ld, key, node);
    char **field = FIELD(base, key, char *);
    bool on;

    if (v == NULL)
        return -1;
    free(*field);
    *field = NULL;
    if (parse_bool(v, &on) == 0) {
        if (!on)
            return 0;
        return fail(ld, node,
                    "'%s' must be a file path, syslog or off, not '%s'",
                    key->name, v);
    }
    if (strcmp(v, "syslog") != 0 && v[0] != '/')
        return fail(ld, node,
                    "'%s' must be an absolute file path, syslog or off, not "
                    "'%s'",
                    key->name, v);
    *field = strdup(v);
    if (*field == NULL)
        return fail(ld, node, "out of memory");
    return 0;
}

/* A string into a fixed array of CONF_HEALTH_PATH_MAX bytes. */
static int
set_short_string(struct load *ld, const struct conf_key *key, yaml_node_t *node,
                 void *base)
{
    const char *v = scalar(ld, key, node);

    if (v == NULL)
        return -1;
    if (strlen(v) >= CONF_HEALTH_PATH_MAX)
        return fail(ld, node, "'%s' is longer than %d bytes", key->name,
                    CONF_HEALTH_PATH_MAX - 1);
    for (const char *c = v; *c != '\0'; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            return fail(ld, node,
                        "'%s' has a space or a control character: '%s'",
                        key->name, v);
    strcpy(FIELD(base, key, char), v);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Tables                                                             */

#define POOL(f) offsetof(struct conf_pool, f)

/* Pool keys: twemproxy's first, with their twemproxy meaning, then ours.
 * The index of a key here is its index in parse_map's <lines>. */
enum pool_key {
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

/*
 * The last two columns: the modes where the key acts today (see struct
 * conf_key), and whether it is twemproxy's. The request-engine keys
 * (hash_tag, timeout, server_connections, preconnect) act in the redis
 * and memcache modes only; the redis_* keys and `command` in redis only.
 * `redis` acts everywhere: it picks the mode when `mode:` is absent, and
 * parse_pool refuses it when it disagrees with `mode:`. `hash_key` is
 * refused, not warned about, outside tcp and http.
 */
static const struct conf_key pool_keys[] = {
    [PK_LISTEN] = {"listen", set_listen, POOL(listen), 0, 0, NULL, M_ALL, true},
    [PK_HASH] = {"hash", set_hash, POOL(ring.hash), 0, 0, NULL, M_ALL, true},
    [PK_HASH_TAG] = {"hash_tag", set_hash_tag, POOL(hash_tag), 0, 0, NULL,
                     M_STORE, true},
    [PK_DISTRIBUTION] = {"distribution", set_distribution, POOL(distribution),
                         0, 0, NULL, M_ALL, true},
    [PK_TIMEOUT] = {"timeout", set_ms, POOL(timeout_ms), 0, MAX_DURATION, NULL,
                    M_STORE | M_HTTP, true},
    [PK_BACKLOG] = {"backlog", set_u32, POOL(backlog), 1, 1000000, NULL, M_ALL,
                    true},
    [PK_PRECONNECT] = {"preconnect", set_bool, POOL(preconnect), 0, 0, NULL,
                       M_STORE, true},
    [PK_CLIENT_CONNECTIONS] = {"client_connections", set_u32,
                               POOL(client_connections), 0, 10000000, NULL,
                               M_ALL, true},
    [PK_REDIS] = {"redis", set_bool, POOL(redis), 0, 0, NULL, M_ALL, true},
    [PK_REDIS_AUTH] = {"redis_auth", set_string, POOL(redis_auth), 0, 0, NULL,
                       M_REDIS, true},
    [PK_REDIS_DB] = {"redis_db", set_int, POOL(redis_db), 0, 1000000, NULL,
                     M_REDIS, true},
    [PK_SERVER_CONNECTIONS] = {"server_connections", set_u32,
                               POOL(server_connections), 1, 10000, NULL,
                               M_STORE, true},
    [PK_AUTO_EJECT_HOSTS] = {"auto_eject_hosts", set_bool,
                             POOL(auto_eject_hosts), 0, 0, NULL, M_ALL, true},
    [PK_SERVER_RETRY_TIMEOUT] = {"server_retry_timeout", set_ms,
                                 POOL(server_retry_timeout_ms), 0, MAX_DURATION,
                                 NULL, M_ALL, true},
    [PK_SERVER_FAILURE_LIMIT] = {"server_failure_limit", set_u32,
                                 POOL(server_failure_limit), 0, 1000000, NULL,
                                 M_ALL, true},
    [PK_TCPKEEPALIVE] = {"tcpkeepalive", set_bool, POOL(tcpkeepalive), 0, 0,
                         NULL, M_ALL, true},
    /* twemproxy forks' extra module commands: loaded, and a warning that
     * chashd refuses a command its table does not know */
    [PK_COMMAND] = {"command", set_commands, POOL(commands), 0, 0, NULL, 0,
                    true},
    [PK_SERVERS] = {"servers", set_servers, POOL(servers), 0, 0, NULL, M_ALL,
                    true},
    [PK_MODE] = {"mode", set_enum, POOL(mode), 0, 0, mode_names, M_ALL, false},
    [PK_HASH_KEY] = {"hash_key", set_hash_key, POOL(hash_key), 0, 0, NULL,
                     M_CONN, false},
    [PK_POINTS_PER_WEIGHT] = {"points_per_weight", set_u32,
                              POOL(ring.points_per_weight), 1,
                              CHASH_MAX_MEMBER_POINTS, NULL, M_ALL, false},
    [PK_TABLE_SIZE] = {"table_size", set_u32, POOL(ring.table_size), 1,
                       MAX_TABLE_SIZE, NULL, M_ALL, false},
    [PK_MAX_POINTS] = {"max_points", set_u32, POOL(max_points), 1, UINT32_MAX,
                       NULL, M_ALL, false},
    /* Not in redis pools: a spilled key read from a member that does not
     * own it is wrong data, not a cache miss. Memcache pools route every
     * key to its owner (bounded loads for hot keys are to come). */
    [PK_BALANCE_FACTOR] = {"balance_factor", set_balance_factor,
                           POOL(balance_factor), 0, 0, NULL, M_CONN, false},
    [PK_SLOW_START] = {"slow_start", set_ms, POOL(slow_start_ms), 0,
                       MAX_DURATION, NULL, M_ALL, false},
    [PK_ON_FAILURE] = {"on_failure", set_enum, POOL(on_failure), 0, 0,
                       on_failure_names, M_ALL, false},
    /* A store request is never retried on another member: it would land
     * where its key does not live. */
    [PK_RETRIES] = {"retries", set_u32, POOL(retries), 0, 100, NULL, M_CONN,
                    false},
    [PK_HEALTH_CHECK] = {"health_check", set_health, POOL(health), 0, 0, NULL,
                         M_ALL, false},
    [PK_CONNECT_TIMEOUT] = {"connect_timeout", set_ms, POOL(connect_timeout_ms),
                            1, MAX_DURATION, NULL, M_ALL, false},
    [PK_IDLE_TIMEOUT] = {"idle_timeout", set_ms, POOL(idle_timeout_ms), 0,
                         MAX_DURATION, NULL, M_CONN, false},
    [PK_SHUTDOWN_TIMEOUT] = {"shutdown_timeout", set_ms,
                             POOL(shutdown_timeout_ms), 0, MAX_DURATION, NULL,
                             M_ALL, false},
    [PK_CLIENT_MAX_REQUEST] = {"client_max_request", set_size,
                               POOL(client_max_request), 1, 0, NULL,
                               M_STORE | M_HTTP, false},
    [PK_ALLOW_FANOUT_ADMIN] = {"allow_fanout_admin", set_bool,
                               POOL(allow_fanout_admin), 0, 0, NULL, M_STORE,
                               false},
    /* memcached's -I: a larger value is refused as memcached refuses it */
    [PK_ITEM_SIZE_MAX] = {"item_size_max", set_size, POOL(item_size_max), 1,
                          1024u * 1024 * 1024, NULL, M_MEMCACHE, false},
    /* live data migration on membership changes (doc/migration.md) */
    [PK_MIGRATION] = {"migration", set_enum, POOL(migration), 0, 0,
                      migration_names, M_STORE, false},
    [PK_MIGRATION_RATE] = {"migration_rate", set_u32, POOL(migration_rate), 0,
                           100000000, NULL, M_REDIS, false},
    [PK_MIGRATION_BANDWIDTH] = {"migration_bandwidth", set_size,
                                POOL(migration_bandwidth), 0, 0, NULL, M_REDIS,
                                false},
    [PK_MIGRATION_BATCH] = {"migration_batch", set_u32, POOL(migration_batch),
                            1, 1000, NULL, M_REDIS, false},
    [PK_MIGRATION_TIMEOUT] = {"migration_timeout", set_ms,
                              POOL(migration_timeout_ms), 1, 600000, NULL,
                              M_REDIS, false},
    [PK_MIGRATION_BIG_KEY] = {"migration_big_key", set_size,
                              POOL(migration_big_key), 1, 0, NULL, M_REDIS,
                              false},
    [PK_MIGRATION_WARMUP] = {"migration_warmup", set_ms,
                             POOL(migration_warmup_ms), 1000, MAX_DURATION,
                             NULL, M_MEMCACHE, false},
    /* replication to N distinct members (doc/replication.md) */
    [PK_REPLICAS] = {"replicas", set_u32, POOL(replicas), 1, REPLICAS_MAX, NULL,
                     M_STORE, false},
    [PK_WRITE_QUORUM] = {"write_quorum", set_u32, POOL(write_quorum), 1,
                         REPLICAS_MAX, NULL, M_STORE, false},
    [PK_READ_POLICY] = {"read_policy", set_enum, POOL(read_policy), 0, 0,
                        read_policy_names, M_STORE, false},
    [PK_READ_QUORUM] = {"read_quorum", set_u32, POOL(read_quorum), 1,
                        REPLICAS_MAX, NULL, M_STORE, false},
    [PK_REPAIR_LOG] = {"repair_log", set_u32, POOL(repair_log), 0, 100000000,
                       NULL, M_STORE, false},
    /* the hottest keys (doc/hot.md) */
    [PK_HOT_KEYS] = {"hot_keys", set_enum, POOL(hot_keys), 0, 0, hot_keys_names,
                     M_STORE | M_HTTP, false},
    [PK_ZONE_POLICY] = {"zone_policy", set_enum, POOL(zone_policy), 0, 0,
                        zone_policy_names, M_ALL, false},
    [PK_ZONE_WEIGHTS] = {"zone_weights", set_zone_weights, 0, 0, 0, NULL, M_ALL,
                         false},
    [PK_HOT_KEY_THRESHOLD] = {"hot_key_threshold", set_u32,
                              POOL(hot_key_threshold), 1, 1000000000, NULL,
                              M_STORE, false},
    /* PROXY protocol, access log (tcp and http) */
    [PK_ACCEPT_PROXY] = {"accept_proxy", set_bool, POOL(accept_proxy), 0, 0,
                         NULL, M_CONN, false},
    [PK_SEND_PROXY] = {"send_proxy", set_enum, POOL(send_proxy), 0, 0,
                       send_proxy_names, M_CONN, false},
    /* the kernel moves a tcp pair's bytes (src/fastpath.h) */
    [PK_FAST_PATH] = {"fast_path", set_enum, POOL(fast_path), 0, 0,
                      fast_path_names, M_TCP, false},
    /* membership from etcd (doc/etcd.md) */
    [PK_MEMBERS_FROM] = {"members_from", set_enum, POOL(members_from), 0, 0,
                         members_from_names, M_ALL, false},
    [PK_ACCESS_LOG] = {"access_log", set_access_log, POOL(access_log), 0, 0,
                       NULL, M_CONN, false},
    [PK_ACCESS_LOG_FORMAT] = {"access_log_format", set_enum,
                              POOL(access_log_format), 0, 0, log_format_names,
                              M_CONN, false},
    /* http (doc/http.md) */
    [PK_FORWARD_HEADERS] = {"forward_headers", set_forward_headers,
                            POOL(forward_headers), 0, 0, NULL, M_HTTP, false},
    [PK_MEMBER_HEADER] = {"member_header", set_bool, POOL(member_header), 0, 0,
                          NULL, M_HTTP, false},
    [PK_CLIENT_MAX_HEADER] = {"client_max_header", set_size,
                              POOL(client_max_header), 1024, 1024u * 1024, NULL,
                              M_HTTP, false},
    [PK_CLIENT_MAX_URI] = {"client_max_uri", set_size, POOL(client_max_uri), 64,
                           1024u * 1024, NULL, M_HTTP, false},
    [PK_BACKEND_KEEPALIVE] = {"backend_keepalive", set_u32,
                              POOL(backend_keepalive), 0, 10000, NULL, M_HTTP,
                              false},
};
_Static_assert(ARRAY_SIZE(pool_keys) == PK_COUNT, "one entry per pool key");

/* `endpoints: [http://127.0.0.1:2379, ...]` (or one scalar). */
static int
set_endpoints(struct load *ld, const struct conf_key *key, yaml_node_t *node,
              void *base)
{
    struct conf_etcd *e = base;
    yaml_node_item_t *item;
    size_t n = 1;

    if (node->type == YAML_SEQUENCE_NODE)
        n = (size_t)(node->data.sequence.items.top -
                     node->data.sequence.items.start);
    else if (node->type != YAML_SCALAR_NODE)
        return fail(ld, node, "'%s' must be a list of URLs, not %s", key->name,
                    node_kind(node));
    if (n == 0 || n > CONF_ETCD_ENDPOINTS_MAX)
        return fail(ld, node, "'%s' takes 1 to %d URLs, not %zu", key->name,
                    CONF_ETCD_ENDPOINTS_MAX, n);
    for (size_t i = 0; i < e->nendpoints; i++)
        free(e->endpoints[i]);
    e->nendpoints = 0;
    item = node->type == YAML_SEQUENCE_NODE ? node->data.sequence.items.start
                                            : NULL;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *c = item ? yaml_document_get_node(ld->doc, item[i]) : node;
        const char *v = scalar(ld, key, c);
        const char *hp;

        if (v == NULL)
            return -1;
        if (strncmp(v, "http://", 7) == 0)
            hp = v + 7;
        else if (strncmp(v, "https://", 8) == 0)
            hp = v + 8;
        else
            return fail(ld, c,
                        "etcd endpoint '%s' must be a URL like "
                        "http://127.0.0.1:2379 (http:// or https://)",
                        v);
        if (*hp == '\0' || strcspn(hp, "/?# \t") != strlen(hp) ||
            strchr(hp, ':') == NULL)
            return fail(ld, c,
                        "etcd endpoint '%s' must be scheme://host:port with "
                        "no path",
                        v);
        e->endpoints[i] = strdup(v);
        if (e->endpoints[i] == NULL)
            return fail(ld, c, "out of memory");
        e->nendpoints = i + 1;
    }
    return 0;
}

static const struct conf_key etcd_keys[] = {
    {"endpoints", set_endpoints, 0, 0, 0, NULL, 0, false},
    {"prefix", set_string, offsetof(struct conf_etcd, prefix), 0, 0, NULL, 0,
     false},
    {"instance", set_string, offsetof(struct conf_etcd, instance), 0, 0, NULL,
     0, false},
    {"lease_ttl", set_ms, offsetof(struct conf_etcd, lease_ttl_ms), 2000,
     3600000, NULL, 0, false},
    {"timeout", set_ms, offsetof(struct conf_etcd, timeout_ms), 100, 60000,
     NULL, 0, false},
    {"username", set_string, offsetof(struct conf_etcd, username), 0, 0, NULL,
     0, false},
    {"password", set_string, offsetof(struct conf_etcd, password), 0, 0, NULL,
     0, false},
    {"ca_file", set_string, offsetof(struct conf_etcd, ca_file), 0, 0, NULL, 0,
     false},
    {"cert_file", set_string, offsetof(struct conf_etcd, cert_file), 0, 0, NULL,
     0, false},
    {"key_file", set_string, offsetof(struct conf_etcd, key_file), 0, 0, NULL,
     0, false},
};

/* `global.etcd: { endpoints: [...], prefix: /chash, instance: lb-1, ... }`. */
static int
set_etcd(struct load *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    struct conf_etcd *e = FIELD(base, key, struct conf_etcd);
    int lines[ARRAY_SIZE(etcd_keys)] = {0};
    char host[256];
    size_t n;

    if (node->type != YAML_MAPPING_NODE)
        return fail(ld, node,
                    "'etcd' must be a map like { endpoints: "
                    "[http://127.0.0.1:2379], prefix: /chash }, not %s",
                    node_kind(node));
    e->lease_ttl_ms = 10000;
    e->timeout_ms = 2000;
    if (parse_map(ld, node, etcd_keys, ARRAY_SIZE(etcd_keys), e, "etcd",
                  lines) != 0)
        return -1;
    if (e->nendpoints == 0)
        return fail(ld, node,
                    "'etcd' needs 'endpoints' (a list like "
                    "[http://127.0.0.1:2379])");
    if (e->prefix == NULL && (e->prefix = strdup("/chash")) == NULL)
        return fail(ld, node, "out of memory");
    n = strlen(e->prefix);
    while (n > 1 && e->prefix[n - 1] == '/')
        e->prefix[--n] = '\0';
    if (e->prefix[0] != '/' || n < 2 || n > 200 ||
        strcspn(e->prefix, " \t\r\n") != n)
        return fail_at(ld, lines[1] ? lines[1] : node_line(node),
                       "etcd 'prefix' must be a path like /chash, not '%s'",
                       e->prefix);
    if (e->instance == NULL) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "chashd");
        host[sizeof(host) - 1] = '\0';
        host[strcspn(host, "./")] = '\0';
        if ((e->instance = strdup(host)) == NULL)
            return fail(ld, node, "out of memory");
    }
    if (!etcd_name_ok(e->instance))
        return fail_at(ld, lines[2] ? lines[2] : node_line(node),
                       "etcd 'instance' '%s' must be 1 to 63 letters, digits, "
                       "'.', '_', ':' or '-'",
                       e->instance);
    if ((e->username == NULL) != (e->password == NULL))
        return fail(ld, node, "etcd 'username' and 'password' go together");
    if ((e->cert_file == NULL) != (e->key_file == NULL))
        return fail(ld, node, "etcd 'cert_file' and 'key_file' go together");
    e->enabled = true;
    return 0;
}

#define GLOBAL(f) offsetof(struct conf, f)

enum global_key {
    GK_ADMIN,
    GK_ADMIN_TOKEN,
    GK_WORKERS,
    GK_LOG_LEVEL,
    GK_PID_FILE,
    GK_STATE_FILE,
    GK_ETCD,
    GK_COUNT
};

static const struct conf_key global_keys[] = {
    [GK_ADMIN] = {"admin", set_admin, GLOBAL(admin), 0, 0, NULL, 0, false},
    [GK_ADMIN_TOKEN] = {"admin_token", set_string, GLOBAL(admin_token), 0, 0,
                        NULL, 0, false},
    [GK_WORKERS] = {"workers", set_u32, GLOBAL(workers), 1, 1024, NULL, 0,
                    false},
    [GK_LOG_LEVEL] = {"log_level", set_enum, GLOBAL(log_level), 0, 0,
                      log_level_names, 0, false},
    [GK_PID_FILE] = {"pid_file", set_string, GLOBAL(pid_file), 0, 0, NULL, 0,
                     false},
    [GK_STATE_FILE] = {"state_file", set_string, GLOBAL(state_file), 0, 0, NULL,
                       0, false},
    [GK_ETCD] = {"etcd", set_etcd, GLOBAL(etcd), 0, 0, NULL, 0, false},
};
_Static_assert(ARRAY_SIZE(global_keys) == GK_COUNT, "one entry per key");

/*
 * Parse the mapping <node> with <table> into <base>. <lines>[i] gets the
 * line of key i's value when it is given (0 otherwise), so callers can
 * tell set from default and point at a key in later messages. Refuses
 * anything but a map, keys that are not plain names, unknown keys (the
 * message lists the valid ones) and a key given twice, which YAML parsers
 * accept silently and would let the last one win unseen.
 */
static int
parse_map(struct load *ld, yaml_node_t *node, const struct conf_key *table,
          size_t n, void *base, const char *what, int *lines)
{
    yaml_node_pair_t *pair;
    char valid[1024];

    if (node->type != YAML_MAPPING_NODE)
        return fail(ld, node, "%s must be a map of keys, not %s", what,
                    node_kind(node));
    for (pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, pair->value);
        const char *name;
        size_t i;

        if (k->type != YAML_SCALAR_NODE)
            return fail(ld, k, "keys in %s must be names, not %s", what,
                        node_kind(k));
        name = (const char *)k->data.scalar.value;
        if (strlen(name) != k->data.scalar.length)
            return fail(ld, k, "a key in %s contains a NUL byte", what);
        for (i = 0; i < n; i++)
            if (strcmp(name, table[i].name) == 0)
                break;
        if (i == n) {
            join_keys(valid, sizeof(valid), table, n);
            return fail(ld, k, "unknown key '%s' in %s (valid keys: %s)", name,
                        what, valid);
        }
        if (lines[i] != 0)
            return fail(ld, k,
                        "duplicate key '%s' in %s (first given at "
                        "line %d)",
                        name, what, lines[i]);
        lines[i] = node_line(k);
        if (table[i].set(ld, &table[i], v, base) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Pools                                                              */

static void
conf_etcd_deinit(struct conf_etcd *e)
{
    for (size_t i = 0; i < e->nendpoints; i++)
        free(e->endpoints[i]);
    free(e->prefix);
    free(e->instance);
    free(e->username);
    free(e->password);
    free(e->ca_file);
    free(e->cert_file);
    free(e->key_file);
    memset(e, 0, sizeof(*e));
}

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
pool_init(struct conf_pool *pool)
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
check_duplicates(struct load *ld, struct conf_pool *pool, yaml_node_t *node)
{
    struct conf_server **by = calloc(pool->nservers, sizeof(*by));
    int rc = 0;

    if (by == NULL)
        return fail(ld, node, "out of memory");
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

int
conf_pool_add_server(struct conf_pool *cp, const char *name,
                     const char *address, uint32_t weight)
{
    struct conf_server *ns =
        realloc(cp->servers, (cp->nservers + 1) * sizeof(*ns));
    struct conf_server *s;
    char err[256];

    if (ns == NULL)
        return -1;
    cp->servers = ns;
    s = &ns[cp->nservers];
    memset(s, 0, sizeof(*s));
    if (conf_parse_addr(address, &s->addr, err, sizeof(err)) != 0)
        return -1;
    if ((s->name = strdup(name)) == NULL) {
        conf_addr_deinit(&s->addr);
        return -1;
    }
    s->weight = weight;
    cp->nservers++;
    return 0;
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

/* Refuse a ring over the pool's max_points, from its size alone. 0 or -1
 * after a message pointing at what to change. */
static int
check_points(struct load *ld, const struct conf_pool *pool,
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
        return fail_at(ld, line,
                       "pool '%s': its table_size needs %" PRIu64
                       " table entries, over max_points %u (lower "
                       "table_size, or raise max_points)",
                       pool->name, need, pool->max_points);
    case CHASH_ALGO_RENDEZVOUS:
    case CHASH_ALGO_JUMP:
        return fail_at(ld, lines[PK_SERVERS],
                       "pool '%s': its %" PRIu64 " servers are over "
                       "max_points %u (raise max_points)",
                       pool->name, need, pool->max_points);
    default:
        return fail_at(ld, lines[PK_SERVERS],
                       "pool '%s': its servers need %" PRIu64 " ring "
                       "points, over max_points %u (lower the weights or "
                       "points_per_weight, or raise max_points)",
                       pool->name, need, pool->max_points);
    }
}

/* zone_policy: hierarchical places a zone, then a member: every server
 * names its zone; jump cannot weigh zones; etcd records carry no zone
 * yet. Zones with flat placement have no effect (a warning). */
static int
check_zones(struct load *ld, struct conf_pool *pool, const int *lines)
{
    bool any = false;

    for (size_t i = 0; i < pool->nservers; i++)
        any |= pool->servers[i].zone != NULL;
    for (size_t k = 0; k < pool->nzone_weights; k++) {
        bool found = false;

        if (pool->zone_policy != CONF_ZONE_HIERARCHICAL)
            return fail_at(ld, lines[PK_ZONE_WEIGHTS],
                           "pool '%s': zone_weights need zone_policy: "
                           "hierarchical",
                           pool->name);
        for (size_t i = 0; i < pool->nservers && !found; i++)
            found =
                pool->servers[i].zone != NULL &&
                strcmp(pool->servers[i].zone, pool->zone_weights[k].zone) == 0;
        if (!found)
            return fail_at(ld, lines[PK_ZONE_WEIGHTS],
                           "pool '%s': zone_weights names zone '%s', which "
                           "no server is in",
                           pool->name, pool->zone_weights[k].zone);
    }
    if (pool->zone_policy == CONF_ZONE_FLAT) {
        if (any && warn_at(ld, pool->line,
                           "pool '%s': server zones have no effect with "
                           "zone_policy: flat (set zone_policy: "
                           "hierarchical to place a zone, then a member)",
                           pool->name) != 0)
            return -1;
        return 0;
    }
    for (size_t i = 0; i < pool->nservers; i++)
        if (pool->servers[i].zone == NULL)
            return fail_at(ld, pool->servers[i].line,
                           "server '%s' of pool '%s' has no zone: "
                           "zone_policy: hierarchical needs one on every "
                           "server ('host:port:weight name zone', or "
                           "zone: in the map form)",
                           pool->servers[i].name, pool->name);
    if (pool->distribution == CHASH_ALGO_JUMP)
        return fail_at(ld, lines[PK_ZONE_POLICY],
                       "pool '%s': zone_policy: hierarchical cannot use "
                       "distribution jump (a zone's weight is its "
                       "members' sum; jump takes weights of 0 or 1)",
                       pool->name);
    if (pool->distribution >= CHASH_ALGO_COUNT)
        return fail_at(ld, lines[PK_ZONE_POLICY],
                       "pool '%s': zone_policy: hierarchical needs a "
                       "consistent-hashing distribution, not %s",
                       pool->name, conf_dist_name(pool->distribution));
    if (pool->members_from == CONF_MEMBERS_ETCD)
        return fail_at(ld, lines[PK_ZONE_POLICY],
                       "pool '%s': zone_policy: hierarchical with "
                       "members_from: etcd is not supported yet (member "
                       "records carry no zone)",
                       pool->name);
    return 0;
}

/* Build the pool's ring once so every limit of the algorithm (maglev table
 * size, jump weights, points per member, nothing owned) is a config error
 * with a line, not a daemon that fails later. Its size is checked first,
 * arithmetically: a weight typo must be refused at once, not after
 * seconds of building a ring of hundreds of millions of points. */
static int
check_ring(struct load *ld, struct conf_pool *pool, yaml_node_t *name_node,
           const int *lines)
{
    struct chash_member *members;
    struct chash_ring *ring = NULL;
    const struct conf_server *heaviest = &pool->servers[0];
    int rc, line;

    members = calloc(pool->nservers, sizeof(*members));
    if (members == NULL)
        return fail(ld, name_node, "out of memory");
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
        return fail(ld, name_node,
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
        return fail(ld, name_node, "pool '%s': cannot build its ring: %s",
                    pool->name, chash_strerror(rc));
    }
}

/* Warn, with its line, for each key given that does nothing in the
 * pool's mode (pool_keys' <modes>). */
static int
warn_no_effect(struct load *ld, const struct conf_pool *pool, const int *lines)
{
    for (size_t i = 0; i < PK_COUNT; i++) {
        if (lines[i] == 0 || (pool_keys[i].modes & MODE_BIT(pool->mode)) != 0)
            continue;
        if (warn_at(ld, lines[i], "'%s' has no effect in pool '%s' (mode %s)",
                    pool_keys[i].name, pool->name,
                    conf_mode_name(pool->mode)) != 0)
            return -1;
    }
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
check_migration(struct load *ld, struct conf_pool *pool, const int *lines)
{
    pool->migration_line = lines[PK_MIGRATION];
    if (lines[PK_MIGRATION] == 0)
        pool->migration = pool->mode == CONF_MODE_REDIS &&
                                  pool->mode_source == CONF_MODE_SRC_MODE &&
                                  pool->replicas <= 1
                              ? CONF_MIGRATION_COPY
                              : CONF_MIGRATION_OFF;
    if (pool->migration == CONF_MIGRATION_COPY && pool->mode != CONF_MODE_REDIS)
        return fail_at(ld, lines[PK_MIGRATION],
                       "'migration: copy' is for redis pools; pool '%s' is "
                       "%s (memcache pools take 'migration: warmup')",
                       pool->name, conf_mode_name(pool->mode));
    if (pool->migration == CONF_MIGRATION_WARMUP &&
        pool->mode != CONF_MODE_MEMCACHE)
        return fail_at(ld, lines[PK_MIGRATION],
                       "'migration: warmup' is for memcache pools; pool '%s' "
                       "is %s",
                       pool->name, conf_mode_name(pool->mode));
    if (pool->migration != CONF_MIGRATION_COPY)
        return 0;
    for (size_t i = 0; i < pool->nservers; i++)
        if (pool->servers[i].addr.family == AF_UNIX)
            return fail_at(ld, pool->servers[i].line,
                           "server '%s' of pool '%s' is a unix socket: "
                           "'migration: copy' moves keys with MIGRATE, "
                           "which needs host:port (or set migration: off)",
                           pool->servers[i].name, pool->name);
    if (lines[PK_SLOW_START] != 0 && pool->slow_start_ms > 0 &&
        warn_at(ld, lines[PK_SLOW_START],
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
check_replication(struct load *ld, struct conf_pool *pool, const int *lines)
{
    uint32_t n = pool->replicas, majority = pool->replicas / 2 + 1;

    if (pool->write_quorum == 0)
        pool->write_quorum = majority;
    if (pool->read_quorum == 0)
        pool->read_quorum = majority;
    if (pool->write_quorum > n)
        return fail_at(ld, lines[PK_WRITE_QUORUM],
                       "'write_quorum: %u' in pool '%s' is more than its "
                       "%u replicas",
                       pool->write_quorum, pool->name, n);
    if (pool->read_quorum > n)
        return fail_at(ld, lines[PK_READ_QUORUM],
                       "'read_quorum: %u' in pool '%s' is more than its "
                       "%u replicas",
                       pool->read_quorum, pool->name, n);
    if (n == 1 && pool->hot_keys == CONF_HOT_SPREAD)
        return fail_at(ld, lines[PK_HOT_KEYS],
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
            warn_at(ld, given,
                    "pool '%s' keeps one copy of each key (replicas: 1): "
                    "its quorums and read policy have no effect",
                    pool->name) != 0)
            return -1;
        return 0;
    }
    if (pool->migration != CONF_MIGRATION_OFF) {
        if (lines[PK_MIGRATION] != 0)
            return fail_at(ld, lines[PK_MIGRATION],
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
        return fail_at(ld, lines[PK_REPLICAS],
                       "'replicas: %u' is not supported in pool '%s' with "
                       "'members_from: etcd' yet: several chashd instances "
                       "would each order a key's writes their own way, and "
                       "the copies would diverge (one chashd in front of a "
                       "replicated pool orders them; doc/replication.md)",
                       n, pool->name);
    if (pool->nservers < n &&
        warn_at(ld, lines[PK_REPLICAS],
                "pool '%s' has %zu members for 'replicas: %u': each key is "
                "kept on %zu",
                pool->name, pool->nservers, n, pool->nservers) != 0)
        return -1;
    if (lines[PK_READ_QUORUM] != 0 && pool->read_policy != CONF_READ_QUORUM &&
        warn_at(ld, lines[PK_READ_QUORUM],
                "'read_quorum' has no effect in pool '%s' (read_policy: %s)",
                pool->name, conf_read_policy_name(pool->read_policy)) != 0)
        return -1;
    if (lines[PK_ON_FAILURE] != 0 &&
        warn_at(ld, lines[PK_ON_FAILURE],
                "'on_failure' has no effect in pool '%s' (replicas: %u: a "
                "member that is down keeps its place and counts as failed)",
                pool->name, n) != 0)
        return -1;
    return 0;
}

static int
parse_pool(struct load *ld, yaml_node_t *name_node, yaml_node_t *node,
           struct conf_pool *pool)
{
    int lines[PK_COUNT] = {0};
    char what[300];
    bool twem;

    pool_init(pool);
    pool->name = strdup((const char *)name_node->data.scalar.value);
    if (pool->name == NULL)
        return fail(ld, name_node, "out of memory");
    pool->line = node_line(name_node);
    snprintf(what, sizeof(what), "pool '%s'", pool->name);
    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return fail(ld, name_node,
                    "pool '%s' is empty: it needs 'listen' "
                    "and 'servers'",
                    pool->name);
    if (parse_map(ld, node, pool_keys, PK_COUNT, pool, what, lines) != 0)
        return -1;

    /* The mode follows twemproxy (redis: true -> redis, else memcache)
     * unless `mode:` says otherwise; defaults then follow the mode. Both
     * given must agree: "mode: tcp" with "redis: true" is a file edited
     * half-way, and either reading of it would surprise someone. */
    if (lines[PK_MODE] != 0) {
        pool->mode_source = CONF_MODE_SRC_MODE;
        if (lines[PK_REDIS] != 0 &&
            pool->redis != (pool->mode == CONF_MODE_REDIS))
            return fail_at(ld, lines[PK_REDIS],
                           "'redis: %s' disagrees with 'mode: %s' (line %d) "
                           "in pool '%s': drop 'redis', or make them agree "
                           "(redis: true is mode: redis)",
                           pool->redis ? "true" : "false",
                           conf_mode_name(pool->mode), lines[PK_MODE],
                           pool->name);
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
        return fail_at(ld, lines[PK_HASH_KEY],
                       "pool '%s' is tcp and sees no requests: its hash_key "
                       "is source_ip or source_ip_port, not %s (headers, "
                       "cookies, query, path, uri and host need mode: http)",
                       pool->name,
                       conf_hash_chain_text(pool, chain, sizeof(chain)));
    }
    if (pool->health.enabled && pool->health.type == CONF_HEALTH_HTTP &&
        pool->mode != CONF_MODE_TCP && pool->mode != CONF_MODE_HTTP)
        return fail_at(ld, lines[PK_HEALTH_CHECK],
                       "health_check type http (GET %s) is for http and tcp "
                       "pools; pool '%s' is %s",
                       pool->health.path, pool->name,
                       conf_mode_name(pool->mode));
    if (pool->health.enabled && pool->health.type != CONF_HEALTH_TCP &&
        pool->health.type != CONF_HEALTH_HTTP &&
        pool->mode != (pool->health.type == CONF_HEALTH_REDIS
                           ? CONF_MODE_REDIS
                           : CONF_MODE_MEMCACHE)) {
        snprintf(ld->err, ld->errlen,
                 "%s:%d: health_check type %s (%s) is for %s pools; "
                 "pool '%s' is %s (use type: tcp)",
                 ld->file, lines[PK_HEALTH_CHECK],
                 health_type_names[pool->health.type],
                 pool->health.type == CONF_HEALTH_REDIS ? "PING" : "version",
                 health_type_names[pool->health.type], pool->name,
                 conf_mode_name(pool->mode));
        return -1;
    }
    if (pool->client_max_uri > pool->client_max_header)
        return fail_at(ld, lines[PK_CLIENT_MAX_URI],
                       "pool '%s': client_max_uri (%llu) is larger than "
                       "client_max_header (%llu), which holds it",
                       pool->name, (unsigned long long)pool->client_max_uri,
                       (unsigned long long)pool->client_max_header);
    if (check_migration(ld, pool, lines) != 0 ||
        check_replication(ld, pool, lines) != 0 ||
        check_zones(ld, pool, lines) != 0)
        return -1;
    if (lines[PK_LISTEN] == 0)
        return fail(ld, name_node, "pool '%s' has no 'listen' address",
                    pool->name);
    pool->listen_line = lines[PK_LISTEN];
    if (warn_no_effect(ld, pool, lines) != 0)
        return -1;
    if (pool->nservers == 0)
        return fail(ld, name_node, "pool '%s' has no servers", pool->name);
    if (check_duplicates(ld, pool, name_node) != 0)
        return -1;
    return check_ring(ld, pool, name_node, lines);
}

static int
parse_global(struct load *ld, yaml_node_t *node, struct conf *conf, int *lines)
{
    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return 0; /* `global:` alone: all defaults */
    return parse_map(ld, node, global_keys, GK_COUNT, conf, "global", lines);
}

/* Refuse a server that is one of chashd's own listening sockets: every
 * connection to it would come back to chashd, which would pick a server
 * for it again, and so on until the file descriptors run out. */
static int
check_self(struct load *ld, const struct conf *conf)
{
    struct local loc = {NULL, false};
    char what[400];
    int rc = 0;

    for (size_t i = 0; i < conf->npools && rc == 0; i++) {
        const struct conf_pool *p = &conf->pools[i];

        for (size_t j = 0; j < p->nservers && rc == 0; j++) {
            const struct conf_server *s = &p->servers[j];

            if (self_address(conf, &s->addr, what, sizeof(what), &loc) != NULL)
                rc = fail_at(ld, s->line,
                             "server '%s' (%s) is chashd's own address, "
                             "%s: chashd would connect to itself",
                             s->name, s->addr.text, what);
        }
    }
    local_deinit(&loc);
    return rc;
}

/* Checks across pools and the admin address, after all are parsed. */
static int
check_listeners(struct load *ld, struct conf *conf, const int *glines)
{
    for (size_t i = 0; i < conf->npools; i++) {
        struct conf_pool *p = &conf->pools[i];
        for (size_t j = 0; j < i; j++) {
            struct conf_pool *q = &conf->pools[j];
            if (!addr_conflict(&p->listen, &q->listen))
                continue;
            snprintf(ld->err, ld->errlen,
                     "%s:%d: pool '%s' listens on '%s',"
                     " which pool '%s' already uses (line %d)",
                     ld->file, p->listen_line, p->name, p->listen.text, q->name,
                     q->listen_line);
            return -1;
        }
        if (addr_conflict(&p->listen, &conf->admin)) {
            snprintf(ld->err, ld->errlen,
                     "%s:%d: pool '%s' listens on '%s',"
                     " which is the admin address '%s'",
                     ld->file, p->listen_line, p->name, p->listen.text,
                     conf->admin.text);
            return -1;
        }
    }
    if (check_self(ld, conf) != 0)
        return -1;
    if (conf->admin.family != AF_UNSPEC &&
        !conf_addr_is_loopback(&conf->admin) &&
        (conf->admin_token == NULL || conf->admin_token[0] == '\0')) {
        snprintf(ld->err, ld->errlen,
                 "%s:%d: admin address '%s' is not "
                 "loopback: set 'admin_token' so the admin API is not open "
                 "to the network",
                 ld->file, glines[GK_ADMIN], conf->admin.text);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Loading                                                            */

void
conf_destroy(struct conf *conf)
{
    if (conf == NULL)
        return;
    for (size_t i = 0; i < conf->npools; i++)
        conf_pool_deinit(&conf->pools[i]);
    free(conf->pools);
    for (size_t i = 0; i < conf->nwarnings; i++)
        free(conf->warnings[i]);
    free(conf->warnings);
    free(conf->file);
    conf_addr_deinit(&conf->admin);
    free(conf->admin_token);
    free(conf->pid_file);
    free(conf->state_file);
    conf_etcd_deinit(&conf->etcd);
    free(conf);
}

static uint32_t
online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n < 1 ? 1 : n > 1024 ? 1024 : (uint32_t)n;
}

/* The 1-based line of byte <offset> of <text>: libyaml's reader errors
 * (bad UTF-8) give an offset, not a line. */
static int
offset_line(const char *text, size_t len, size_t offset)
{
    int line = 1;

    for (size_t i = 0; i < offset && i < len; i++)
        line += text[i] == '\n';
    return line;
}

static int
yaml_error(struct load *ld, yaml_parser_t *parser, const char *yaml, size_t len)
{
    char started[64] = "";
    int line, ctx_line = (int)parser->context_mark.line + 1;

    if (parser->error == YAML_READER_ERROR)
        line = offset_line(yaml, len, parser->problem_offset);
    else
        line = (int)parser->problem_mark.line + 1;
    /* An unclosed quote or bracket is found at the end of the file; the
     * line worth showing is where the unclosed thing starts. */
    if (parser->context != NULL && parser->problem != NULL &&
        strstr(parser->problem, "end of stream") != NULL)
        line = ctx_line;
    else if (parser->context != NULL && ctx_line != line)
        snprintf(started, sizeof(started), " (started at line %d)", ctx_line);
    snprintf(ld->err, ld->errlen, "%s:%d: YAML syntax error: %s%s%s%s",
             ld->file, line, parser->problem ? parser->problem : "unknown",
             parser->context ? " " : "", parser->context ? parser->context : "",
             started);
    return -1;
}

static bool
pool_name_ok(const char *name)
{
    size_t len = strlen(name);

    if (len == 0 || len > MAX_POOL_NAME)
        return false;
    for (; *name != '\0'; name++)
        if (!isalnum((unsigned char)*name) && strchr("_-.", *name) == NULL)
            return false;
    return true;
}

static int
load_document(struct load *ld, struct conf *conf)
{
    yaml_node_t *root = yaml_document_get_root_node(ld->doc);
    int glines[GK_COUNT] = {0}, global_line = 0;
    yaml_node_pair_t *pair;
    size_t npairs;

    if (root == NULL)
        return fail(ld, NULL,
                    "the configuration is empty: it needs at "
                    "least one pool");
    if (root->type != YAML_MAPPING_NODE)
        return fail(ld, root,
                    "the top level must be a map of pools (and "
                    "'global'), not %s",
                    node_kind(root));
    npairs =
        (size_t)(root->data.mapping.pairs.top - root->data.mapping.pairs.start);
    conf->pools = calloc(npairs, sizeof(*conf->pools));
    if (conf->pools == NULL)
        return fail(ld, root, "out of memory");
    for (pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, pair->value);
        const char *name = (const char *)k->data.scalar.value;

        if (k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
            strlen(name) != k->data.scalar.length)
            return fail(ld, k, "a pool name must be a plain name");
        if (strcmp(name, "global") == 0) {
            if (global_line != 0)
                return fail(ld, k, "duplicate 'global' (first at line %d)",
                            global_line);
            global_line = node_line(k);
            if (parse_global(ld, v, conf, glines) != 0)
                return -1;
            continue;
        }
        if (!pool_name_ok(name))
            return fail(ld, k,
                        "bad pool name '%s': use up to %d letters, "
                        "digits, '_', '-' or '.' (it appears in admin URLs "
                        "and metric labels)",
                        name, MAX_POOL_NAME);
        for (size_t i = 0; i < conf->npools; i++)
            if (strcmp(conf->pools[i].name, name) == 0)
                return fail(ld, k, "duplicate pool '%s' (first at line %d)",
                            name, conf->pools[i].line);
        /* counted before parsing, so a half-parsed pool is freed too */
        conf->npools++;
        if (parse_pool(ld, k, v, &conf->pools[conf->npools - 1]) != 0)
            return -1;
    }
    if (conf->npools == 0)
        return fail(ld, root,
                    "no pools: add at least one pool besides "
                    "'global'");
    for (size_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        if (cp->members_from != CONF_MEMBERS_ETCD)
            continue;
        if (!conf->etcd.enabled)
            return fail_at(ld, cp->line,
                           "pool '%s': 'members_from: etcd' needs a "
                           "global.etcd block (endpoints, prefix, instance)",
                           cp->name);
        if (!etcd_name_ok(cp->name))
            return fail_at(ld, cp->line,
                           "pool '%s': 'members_from: etcd' takes pool names "
                           "of letters, digits, '.', '_', ':' or '-'",
                           cp->name);
        for (size_t k = 0; k < cp->nservers; k++)
            if (!etcd_name_ok(cp->servers[k].name))
                return fail_at(ld, cp->line,
                               "pool '%s': member name '%s' cannot be an "
                               "etcd key part: use 1 to 63 letters, digits, "
                               "'.', '_', ':' or '-'",
                               cp->name, cp->servers[k].name);
    }
    if (glines[GK_ADMIN] == 0) {
        char msg[256];
        if (conf_parse_addr("127.0.0.1:8404", &conf->admin, msg, sizeof(msg)) !=
            0)
            return fail(ld, root, "%s", msg);
    }
    return check_listeners(ld, conf, glines);
}

/*
 * Refuse a document nested deeper than CONF_MAX_DEPTH before libyaml
 * composes it: its scanner does work in the depth for every token, so
 * 60,000 levels of '[' in 120 KB took 10 s (a reload stalled that long).
 * The events are read only up to that depth, so the check itself stays
 * cheap. 0, or -1 with the line in the error. A YAML error is left for
 * the load to report.
 */
static int
nesting_check(struct load *ld, const char *yaml, size_t len)
{
    yaml_parser_t p;
    yaml_event_t ev;
    int depth = 0, rc = 0;

    if (!yaml_parser_initialize(&p))
        return 0; /* the load reports the lack of memory */
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    for (;;) {
        if (!yaml_parser_parse(&p, &ev))
            break;
        if (ev.type == YAML_SEQUENCE_START_EVENT ||
            ev.type == YAML_MAPPING_START_EVENT)
            depth++;
        else if (ev.type == YAML_SEQUENCE_END_EVENT ||
                 ev.type == YAML_MAPPING_END_EVENT)
            depth--;
        if (depth > CONF_MAX_DEPTH) {
            rc = fail_at(ld, (int)ev.start_mark.line + 1,
                         "nested deeper than %d levels: a config is a map of "
                         "pools with a few levels inside",
                         CONF_MAX_DEPTH);
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return rc;
}

struct conf *
conf_load_string(const char *name, const char *yaml, size_t len, char *err,
                 size_t errlen)
{
    struct load ld = {
        name != NULL ? name : "<string>", NULL, err, errlen, NULL, NULL};
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    struct conf *conf;
    bool more;
    int rc;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    conf = calloc(1, sizeof(*conf));
    if (conf == NULL) {
        snprintf(err, errlen, "%s: out of memory", ld.file);
        return NULL;
    }
    ld.conf = conf;
    conf->file = strdup(ld.file);
    conf->workers = online_cores();
    conf->log_level = CONF_LOG_INFO;
    if (conf->file == NULL || !yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: out of memory", ld.file);
        conf_destroy(conf);
        return NULL;
    }
    if (len > CONF_MAX_BYTES) {
        snprintf(err, errlen,
                 "%s: %zu bytes: larger than any config (chashd reads at most "
                 "%d MB)",
                 ld.file, len, CONF_MAX_BYTES >> 20);
        yaml_parser_delete(&parser);
        conf_destroy(conf);
        return NULL;
    }
    if (nesting_check(&ld, yaml, len) != 0) {
        yaml_parser_delete(&parser);
        conf_destroy(conf);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_error(&ld, &parser, yaml, len);
        yaml_parser_delete(&parser);
        conf_destroy(conf);
        return NULL;
    }
    /* One document only: a second "---" would be silently ignored. */
    if (!yaml_parser_load(&parser, &extra)) {
        yaml_error(&ld, &parser, yaml, len);
        rc = -1;
    } else {
        yaml_node_t *root2 = yaml_document_get_root_node(&extra);
        more = root2 != NULL;
        rc = 0;
        if (more) {
            ld.doc = &extra;
            rc = fail(&ld, root2,
                      "a second YAML document: a config is one "
                      "document");
        }
        yaml_document_delete(&extra);
    }
    yaml_parser_delete(&parser);
    ld.doc = &doc;
    if (rc == 0)
        rc = load_document(&ld, conf);
    yaml_document_delete(&doc);
    free(ld.warning_lines);
    if (rc != 0) {
        conf_destroy(conf);
        return NULL;
    }
    return conf;
}

struct conf *
conf_load(const char *path, char *err, size_t errlen)
{
    struct conf *conf = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    FILE *f;

    f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        size_t got;
        if (len == cap) {
            char *grown;
            cap = cap ? cap * 2 : 16384;
            grown = realloc(text, cap);
            if (grown == NULL) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto out;
            }
            text = grown;
        }
        got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
        if (len > CONF_MAX_BYTES) {
            /* /dev/zero, a log named by mistake: no config is so big */
            snprintf(err, errlen,
                     "%s: larger than %d MB: not a config (chashd reads at "
                     "most that)",
                     path, CONF_MAX_BYTES >> 20);
            goto out;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    conf = conf_load_string(path, text, len, err, errlen);
out:
    fclose(f);
    free(text);
    return conf;
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

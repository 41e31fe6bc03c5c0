/* test_conf.c -- the config loader: DESIGN.md's example, nutcracker.yml
 * files, defaults per mode, every key and value form, and one test per
 * error class checking the exact "file:line:" and the message.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "chash/chash.h"
#include "conf/conf.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static char err[4096];

/*
 * Fault injection for conf_pool_copy's failure path: this strdup comes
 * before libc's for every caller in this binary (the executable's symbols
 * are searched first), and fails the <strdup_fail_at>-th call from now
 * with ENOMEM; -1 never fails. Under ASan the leak checker then proves a
 * failed copy leaks nothing.
 */
static int strdup_fail_at = -1;

char *
strdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *d;

    if (strdup_fail_at >= 0 && strdup_fail_at-- == 0) {
        errno = ENOMEM;
        return NULL;
    }
    d = malloc(len);
    if (d != NULL)
        memcpy(d, s, len);
    return d;
}

static struct conf *
load(const char *yaml)
{
    struct conf *c =
        conf_load_string("t.yml", yaml, strlen(yaml), err, sizeof(err));
    if (c == NULL)
        print_message("conf_load_string: %s\n", err);
    return c;
}

/* The load must fail with exactly "t.yml:<line>: " and <phrase> in the
 * message. */
static void
expect_error(const char *yaml, int line, const char *phrase)
{
    char prefix[64];
    struct conf *c;

    err[0] = '\0';
    c = conf_load_string("t.yml", yaml, strlen(yaml), err, sizeof(err));
    if (c != NULL) {
        conf_destroy(c);
        fail_msg("loaded, expected an error at line %d: %s", line, phrase);
    }
    snprintf(prefix, sizeof(prefix), "t.yml:%d: ", line);
    if (strncmp(err, prefix, strlen(prefix)) != 0 ||
        strstr(err, phrase) == NULL)
        fail_msg("got   \"%s\"\nwant  \"%s...%s...\"", err, prefix, phrase);
}

static const struct conf_server *
server(const struct conf_pool *p, const char *name)
{
    for (size_t i = 0; i < p->nservers; i++)
        if (strcmp(p->servers[i].name, name) == 0)
            return &p->servers[i];
    fail_msg("no server named '%s' in pool '%s'", name, p->name);
    return NULL;
}

/* The embedded demo config is what `make run` starts: check it says what
 * the README promises. */
static void
test_default_yaml(void **state)
{
    struct conf *c = load(conf_default_yaml);
    const struct conf_pool *p;

    (void)state;
    assert_non_null(c);
    assert_string_equal(c->file, "t.yml");
    assert_string_equal(c->admin.text, "127.0.0.1:8404");
    assert_int_equal(c->admin.port, 8404);
    assert_int_equal(c->workers, 2);
    assert_int_equal(c->npools, 4);
    /* the http pool of the demo: the tcp pool's members, by cookie */
    p = conf_pool_find(c, "api");
    assert_non_null(p);
    assert_int_equal(p->mode, CONF_MODE_HTTP);
    assert_int_equal(p->nhash_chain, 2);
    assert_int_equal(p->hash_chain[0].kind, CONF_HASH_KEY_COOKIE);
    assert_string_equal(p->hash_chain[0].name, "session");
    assert_int_equal(p->hash_chain[1].kind, CONF_HASH_KEY_SOURCE_IP);
    assert_true(p->member_header);
    assert_int_equal(p->nservers, 3);
    /* the memcache pool of the demo: twemproxy's rule makes it memcache */
    p = conf_pool_find(c, "mc");
    assert_non_null(p);
    assert_int_equal(p->mode, CONF_MODE_MEMCACHE);
    assert_int_equal(p->mode_source, CONF_MODE_SRC_DEFAULT);
    assert_int_equal(p->health.type, CONF_HEALTH_MEMCACHE);
    assert_int_equal(p->item_size_max, 1024 * 1024);
    assert_int_equal(p->nservers, 3);
    /* the redis pool of the demo: twemproxy's keys, three redis-servers */
    p = conf_pool_find(c, "kv");
    assert_non_null(p);
    assert_int_equal(p->mode, CONF_MODE_REDIS);
    assert_int_equal(p->mode_source, CONF_MODE_SRC_REDIS);
    assert_string_equal(p->listen.text, "127.0.0.1:6380");
    assert_int_equal(p->health.type, CONF_HEALTH_REDIS);
    assert_int_equal(p->nservers, 3);
    assert_int_equal(c->nwarnings, 0);
    p = conf_pool_find(c, "web");
    assert_non_null(p);
    assert_string_equal(p->listen.text, "127.0.0.1:8080");
    assert_int_equal(p->listen.family, AF_INET);
    assert_int_equal(p->mode, CONF_MODE_TCP);
    assert_int_equal(p->distribution, CHASH_ALGO_RING);
    assert_int_equal(p->ring.algo, CHASH_ALGO_RING);
    assert_int_equal(p->ring.hash, CHASH_HASH_XXH3);
    assert_int_equal(p->hash_key, CONF_HASH_KEY_SOURCE_IP);
    assert_true(p->health.enabled);
    assert_int_equal(p->slow_start_ms, 10000);
    assert_true(p->balance_factor == 1.25);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_FAILOVER);
    assert_int_equal(p->nservers, 3);
    assert_string_equal(p->servers[0].name, "web-1");
    assert_string_equal(p->servers[1].name, "web-2");
    assert_string_equal(p->servers[2].name, "web-3");
    assert_int_equal(p->servers[2].addr.port, 9003);
    assert_null(conf_pool_find(c, "nope"));
    conf_destroy(c);
}

/* The example of DESIGN.md's "Config" section, verbatim. */
static const char design_yaml[] =
    "global:                      # the one reserved top-level key; all "
    "others are pools\n"
    "  admin: 127.0.0.1:8404      # admin API, metrics, dashboard; loopback "
    "by default\n"
    "  workers: 2\n"
    "  state_file: /var/lib/chashd/state.json\n"
    "web:\n"
    "  listen: 0.0.0.0:8080\n"
    "  mode: tcp                  # tcp | http | redis | memcache "
    "(twemproxy: redis: true/false)\n"
    "  hash_key: source_ip        # tcp: source_ip | source_ip_port\n"
    "  distribution: ring         # ring | maglev | rendezvous | jump | "
    "ketama | nginx | modula | random\n"
    "  hash: xxh3                 # twemproxy names accepted: fnv1a_64, md5,"
    " murmur, crc32, ...\n"
    "  points_per_weight: 160\n"
    "  balance_factor: 1.25       # bounded loads; 0 disables\n"
    "  slow_start: 30s\n"
    "  on_failure: failover\n"
    "  health_check: { type: tcp, interval: 1s, timeout: 500ms, rise: 2, "
    "fall: 3 }\n"
    "  auto_eject_hosts: true     # twemproxy keys keep their meaning\n"
    "  server_failure_limit: 3\n"
    "  server_retry_timeout: 2000\n"
    "  timeout: 5000\n"
    "  servers:\n"
    "    - 127.0.0.1:9001:3 web-1           # twemproxy form: "
    "host:port:weight [name]\n"
    "    - { address: 127.0.0.1:9002, weight: 2, name: web-2 }\n";

static void
test_design_example(void **state)
{
    struct conf *c = load(design_yaml);
    const struct conf_pool *p;

    (void)state;
    assert_non_null(c);
    assert_int_equal(c->workers, 2);
    assert_string_equal(c->state_file, "/var/lib/chashd/state.json");
    assert_null(c->admin_token);
    assert_null(c->pid_file);
    assert_int_equal(c->log_level, CONF_LOG_INFO);
    p = conf_pool_find(c, "web");
    assert_non_null(p);
    assert_int_equal(p->line, 5);
    assert_string_equal(p->listen.text, "0.0.0.0:8080");
    assert_int_equal(p->listen.port, 8080);
    assert_int_equal(p->listen_line, 6);
    assert_int_equal(p->mode, CONF_MODE_TCP);
    assert_int_equal(p->hash_key, CONF_HASH_KEY_SOURCE_IP);
    assert_int_equal(p->ring.algo, CHASH_ALGO_RING);
    assert_int_equal(p->ring.hash, CHASH_HASH_XXH3);
    assert_int_equal(p->ring.points_per_weight, 160);
    assert_true(p->balance_factor == 1.25);
    assert_int_equal(p->slow_start_ms, 30000);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_FAILOVER);
    assert_true(p->health.enabled);
    assert_int_equal(p->health.type, CONF_HEALTH_TCP);
    assert_int_equal(p->health.interval_ms, 1000);
    assert_int_equal(p->health.timeout_ms, 500);
    assert_int_equal(p->health.rise, 2);
    assert_int_equal(p->health.fall, 3);
    assert_true(p->auto_eject_hosts);
    assert_int_equal(p->server_failure_limit, 3);
    assert_int_equal(p->server_retry_timeout_ms, 2000);
    assert_int_equal(p->timeout_ms, 5000);
    assert_int_equal(p->nservers, 2);
    assert_string_equal(p->servers[0].name, "web-1");
    assert_int_equal(p->servers[0].weight, 3);
    assert_string_equal(p->servers[0].addr.text, "127.0.0.1:9001");
    assert_int_equal(p->servers[0].line, 21);
    assert_string_equal(p->servers[1].name, "web-2");
    assert_int_equal(p->servers[1].weight, 2);
    assert_string_equal(p->servers[1].addr.text, "127.0.0.1:9002");
    assert_int_equal(p->servers[1].addr.port, 9002);
    assert_int_equal(p->servers[1].line, 22);
    conf_destroy(c);
}

/* A nutcracker.yml in twemproxy's own style: several pools, redis and
 * memcache, names, hash_tag, a unix socket with permissions. */
static const char nutcracker_yaml[] =
    "alpha:\n"
    "  listen: 127.0.0.1:22121\n"
    "  hash: fnv1a_64\n"
    "  distribution: ketama\n"
    "  auto_eject_hosts: true\n"
    "  redis: true\n"
    "  server_retry_timeout: 2000\n"
    "  server_failure_limit: 1\n"
    "  servers:\n"
    "   - 127.0.0.1:6379:1\n"
    "\n"
    "beta:\n"
    "  listen: 127.0.0.1:22122\n"
    "  hash: fnv1a_64\n"
    "  hash_tag: \"{}\"\n"
    "  distribution: ketama\n"
    "  auto_eject_hosts: false\n"
    "  timeout: 400\n"
    "  redis: true\n"
    "  redis_auth: hunter2\n"
    "  redis_db: 3\n"
    "  servers:\n"
    "   - 127.0.0.1:6380:1 server1\n"
    "   - 127.0.0.1:6381:1 server2\n"
    "   - 127.0.0.1:6382:1 server3\n"
    "\n"
    "gamma:\n"
    "  listen: 127.0.0.1:22123\n"
    "  hash: md5\n"
    "  distribution: ketama\n"
    "  timeout: 400\n"
    "  backlog: 1024\n"
    "  preconnect: true\n"
    "  auto_eject_hosts: true\n"
    "  server_retry_timeout: 2000\n"
    "  server_failure_limit: 3\n"
    "  servers:\n"
    "   - 127.0.0.1:11211:1\n"
    "   - 127.0.0.2:11211:2\n"
    "   - 127.0.0.1:11213:1\n"
    "\n"
    "delta:\n"
    "  listen: /tmp/chash-test-delta.sock 0666\n"
    "  hash: hsieh\n"
    "  distribution: modula\n"
    "  client_connections: 100\n"
    "  server_connections: 2\n"
    "  tcpkeepalive: true\n"
    "  servers:\n"
    "   - 127.0.0.1:11214:100000\n"
    "   - 127.0.0.1:11215:1\n"
    "\n"
    "omega:\n"
    "  listen: 127.0.0.1:22125\n"
    "  distribution: random\n"
    "  redis: true\n"
    "  command:\n"
    "   - redis_module_get\n"
    "   - redis_module_mset 2\n"
    "  servers:\n"
    "   - /tmp/redis.sock:1\n";

static void
test_nutcracker(void **state)
{
    struct conf *c = load(nutcracker_yaml);
    const struct conf_pool *p;

    (void)state;
    assert_non_null(c);
    assert_int_equal(c->npools, 5);
    /* pools in file order */
    assert_string_equal(c->pools[0].name, "alpha");
    assert_string_equal(c->pools[4].name, "omega");

    p = conf_pool_find(c, "alpha");
    assert_int_equal(p->mode, CONF_MODE_REDIS);
    assert_true(p->redis);
    assert_int_equal(p->distribution, CHASH_ALGO_KETAMA);
    assert_int_equal(p->ring.algo, CHASH_ALGO_KETAMA);
    assert_int_equal(p->ring.hash, CHASH_HASH_FNV1A_64_TW);
    assert_true(p->auto_eject_hosts);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_REMAP);
    assert_int_equal(p->server_retry_timeout_ms, 2000);
    assert_int_equal(p->server_failure_limit, 1);
    assert_string_equal(p->servers[0].name, "127.0.0.1:6379");

    p = conf_pool_find(c, "beta");
    assert_string_equal(p->hash_tag, "{}");
    assert_int_equal(p->timeout_ms, 400);
    assert_false(p->auto_eject_hosts);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_ERROR);
    assert_string_equal(p->redis_auth, "hunter2");
    assert_int_equal(p->redis_db, 3);
    assert_string_equal(server(p, "server2")->addr.text, "127.0.0.1:6381");

    p = conf_pool_find(c, "gamma");
    assert_int_equal(p->mode, CONF_MODE_MEMCACHE);
    assert_false(p->redis);
    assert_int_equal(p->ring.hash, CHASH_HASH_MD5);
    assert_int_equal(p->backlog, 1024);
    assert_true(p->preconnect);
    /* twemproxy's ketama name: host alone on 11211, else host:port */
    assert_int_equal(server(p, "127.0.0.1")->addr.port, 11211);
    assert_int_equal(server(p, "127.0.0.2")->weight, 2);
    assert_int_equal(server(p, "127.0.0.1:11213")->addr.port, 11213);

    p = conf_pool_find(c, "delta");
    assert_int_equal(p->listen.family, AF_UNIX);
    assert_string_equal(p->listen.text, "/tmp/chash-test-delta.sock");
    assert_int_equal(p->listen_perm, 0666);
    assert_int_equal(p->ring.hash, CHASH_HASH_HSIEH);
    assert_int_equal(p->distribution, CONF_DIST_MODULA);
    assert_string_equal(conf_dist_name(p->distribution), "modula");
    assert_int_equal(p->client_connections, 100);
    assert_int_equal(p->server_connections, 2);
    assert_true(p->tcpkeepalive);
    assert_int_equal(server(p, "127.0.0.1:11214")->weight, 100000);

    p = conf_pool_find(c, "omega");
    assert_int_equal(p->distribution, CONF_DIST_RANDOM);
    assert_int_equal(p->ncommands, 2);
    assert_string_equal(p->commands[1], "redis_module_mset 2");
    assert_int_equal(p->servers[0].addr.family, AF_UNIX);
    assert_string_equal(p->servers[0].name, "/tmp/redis.sock");
    conf_destroy(c);
}

/* A pool is memcache unless redis: true; mode: wins; defaults follow. */
static void
test_defaults_per_mode(void **state)
{
    static const char yaml[] =
        "mc:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:2]\n"
        "rd:\n  listen: 127.0.0.1:3\n  redis: true\n  servers: [127.0.0.1:2]\n"
        "tc:\n  listen: 127.0.0.1:4\n  mode: tcp\n  servers: [127.0.0.1:2]\n"
        "ht:\n  listen: 127.0.0.1:5\n  mode: http\n  servers: [127.0.0.1:2]\n"
        "mw:\n  listen: 127.0.0.1:6\n  mode: memcache\n  redis: false\n"
        "  servers: [127.0.0.1:2]\n";
    struct conf *c = load(yaml);
    const struct conf_pool *p;

    (void)state;
    assert_non_null(c);
    assert_string_equal(c->admin.text, "127.0.0.1:8404");
    assert_int_equal(c->workers, (uint32_t)sysconf(_SC_NPROCESSORS_ONLN));

    p = conf_pool_find(c, "mc");
    assert_int_equal(p->mode, CONF_MODE_MEMCACHE);
    assert_int_equal(p->distribution, CHASH_ALGO_KETAMA);
    assert_int_equal(p->ring.hash, CHASH_HASH_FNV1A_64_TW);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_ERROR);
    assert_int_equal(p->retries, 0);
    /* twemproxy's defaults (nc_conf.h) */
    assert_int_equal(p->backlog, 512);
    assert_int_equal(p->timeout_ms, 0);
    assert_int_equal(p->client_connections, 0);
    assert_int_equal(p->server_connections, 1);
    assert_int_equal(p->server_failure_limit, 2);
    assert_int_equal(p->server_retry_timeout_ms, 30000);
    assert_false(p->preconnect);
    assert_false(p->auto_eject_hosts);
    assert_false(p->tcpkeepalive);
    assert_int_equal(p->redis_db, 0);
    assert_null(p->redis_auth);
    assert_string_equal(p->hash_tag, "");
    assert_int_equal(p->listen_perm, -1);
    /* ours */
    assert_int_equal(p->ring.points_per_weight, CHASH_DEFAULT_POINTS);
    assert_int_equal(p->ring.table_size, CHASH_DEFAULT_TABLE_SIZE);
    assert_false(p->health.enabled);
    assert_int_equal(p->health.interval_ms, 1000);
    assert_int_equal(p->health.timeout_ms, 500);
    assert_int_equal(p->health.rise, 2);
    assert_int_equal(p->health.fall, 3);
    assert_int_equal(p->connect_timeout_ms, 1000);
    assert_int_equal(p->idle_timeout_ms, 0);
    assert_int_equal(p->shutdown_timeout_ms, 5000);
    assert_int_equal(p->slow_start_ms, 0);
    assert_true(p->balance_factor == 0);

    p = conf_pool_find(c, "rd");
    assert_int_equal(p->mode, CONF_MODE_REDIS);
    assert_int_equal(p->distribution, CHASH_ALGO_KETAMA);
    assert_int_equal(p->ring.hash, CHASH_HASH_FNV1A_64_TW);

    p = conf_pool_find(c, "tc");
    assert_int_equal(p->mode, CONF_MODE_TCP);
    assert_int_equal(p->distribution, CHASH_ALGO_RING);
    assert_int_equal(p->ring.hash, CHASH_HASH_XXH3);
    assert_int_equal(p->hash_key, CONF_HASH_KEY_SOURCE_IP);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_FAILOVER);
    assert_int_equal(p->retries, 2);

    p = conf_pool_find(c, "ht");
    assert_int_equal(p->mode, CONF_MODE_HTTP);
    assert_int_equal(p->distribution, CHASH_ALGO_RING);
    assert_int_equal(p->ring.hash, CHASH_HASH_XXH3);

    p = conf_pool_find(c, "mw");
    assert_int_equal(p->mode, CONF_MODE_MEMCACHE);
    assert_false(p->redis);
    conf_destroy(c);
}

/* Every key of ours, with a non-default value. */
static void
test_our_keys(void **state)
{
    static const char yaml[] =
        "global:\n"
        "  admin: 10.1.2.3:9000\n"
        "  admin_token: s3cret\n"
        "  workers: 3\n"
        "  log_level: debug\n"
        "  pid_file: /run/chashd.pid\n"
        "  state_file: /var/lib/chashd/state.json\n"
        "p:\n"
        "  listen: '[::1]:7000'\n"
        "  mode: tcp\n"
        "  hash_key: source_ip_port\n"
        "  distribution: maglev\n"
        "  hash: murmur3\n"
        "  points_per_weight: 100\n"
        "  table_size: 65537\n"
        "  balance_factor: 1.5\n"
        "  slow_start: 1m\n"
        "  on_failure: remap\n"
        "  retries: 5\n"
        "  health_check: { type: tcp, interval: 2s, timeout: 1.5s, rise: 4,"
        " fall: 6 }\n"
        "  connect_timeout: 250ms\n"
        "  idle_timeout: 1h\n"
        "  shutdown_timeout: 0\n"
        "  servers: [127.0.0.1:9]\n"
        "q:\n"
        "  listen: 127.0.0.1:7001\n"
        "  mode: tcp\n"
        "  on_failure: error\n"
        "  health_check: true\n"
        "  servers: [127.0.0.1:9]\n";
    struct conf *c = load(yaml);
    const struct conf_pool *p;

    (void)state;
    assert_non_null(c);
    assert_string_equal(c->admin.text, "10.1.2.3:9000");
    assert_string_equal(c->admin_token, "s3cret");
    assert_int_equal(c->workers, 3);
    assert_int_equal(c->log_level, CONF_LOG_DEBUG);
    assert_string_equal(c->pid_file, "/run/chashd.pid");
    p = conf_pool_find(c, "p");
    assert_int_equal(p->listen.family, AF_INET6);
    assert_int_equal(p->listen.port, 7000);
    assert_int_equal(p->hash_key, CONF_HASH_KEY_SOURCE_IP_PORT);
    assert_int_equal(p->distribution, CHASH_ALGO_MAGLEV);
    assert_int_equal(p->ring.algo, CHASH_ALGO_MAGLEV);
    assert_int_equal(p->ring.hash, CHASH_HASH_MURMUR3);
    assert_int_equal(p->ring.points_per_weight, 100);
    assert_int_equal(p->ring.table_size, 65537);
    assert_true(p->balance_factor == 1.5);
    assert_int_equal(p->slow_start_ms, 60000);
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_REMAP);
    assert_int_equal(p->retries, 5);
    assert_true(p->health.enabled);
    assert_int_equal(p->health.interval_ms, 2000);
    assert_int_equal(p->health.timeout_ms, 1500);
    assert_int_equal(p->health.rise, 4);
    assert_int_equal(p->health.fall, 6);
    assert_int_equal(p->connect_timeout_ms, 250);
    assert_int_equal(p->idle_timeout_ms, 3600000);
    assert_int_equal(p->shutdown_timeout_ms, 0);
    p = conf_pool_find(c, "q");
    assert_int_equal(p->on_failure, CONF_ON_FAILURE_ERROR);
    assert_true(p->health.enabled);
    assert_int_equal(p->health.interval_ms, 1000);
    conf_destroy(c);
}

static void
test_durations(void **state)
{
    static const struct {
        const char *text;
        uint32_t ms;
    } good[] = {
        {"0", 0},         {"400", 400},
        {"500ms", 500},   {"2s", 2000},
        {"1m", 60000},    {"1h", 3600000},
        {"1.5s", 1500},   {"0.25s", 250},
        {"2.5m", 150000}, {"4294967295", UINT32_MAX},
    };
    static const char *const bad[] = {
        "",    "s",       "ms",  "5x",    "-1",         "1.",
        ".s",  "1.0005s", "1.5", "1.5ms", "4294967296", "1 s",
        " 1s", "1s ",     "2d",  "1e3",   "0x10",       "+5",
    };
    uint32_t ms;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        ms = 12345;
        if (conf_parse_duration(good[i].text, &ms) != 0)
            fail_msg("'%s' refused", good[i].text);
        if (ms != good[i].ms)
            fail_msg("'%s': %u ms, want %u", good[i].text, ms, good[i].ms);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        if (conf_parse_duration(bad[i], &ms) == 0)
            fail_msg("'%s' accepted as %u ms", bad[i], ms);
}

static void
test_server_forms(void **state)
{
    static const struct {
        const char *text, *name, *addr;
        uint32_t weight;
        int family;
        uint16_t port;
    } good[] = {
        {"127.0.0.1:9001:3 web-1", "web-1", "127.0.0.1:9001", 3, AF_INET, 9001},
        {"127.0.0.1:9001:3", "127.0.0.1:9001", "127.0.0.1:9001", 3, AF_INET,
         9001},
        {"127.0.0.1:9001", "127.0.0.1:9001", "127.0.0.1:9001", 1, AF_INET,
         9001},
        {"127.0.0.1:9001 web-1", "web-1", "127.0.0.1:9001", 1, AF_INET, 9001},
        {"  127.0.0.1:9001:2\t web-1  ", "web-1", "127.0.0.1:9001", 2, AF_INET,
         9001},
        {"127.0.0.1:9001:0 drained", "drained", "127.0.0.1:9001", 0, AF_INET,
         9001},
        /* twemproxy: the ketama name leaves out the memcached port */
        {"10.0.0.1:11211:1", "10.0.0.1", "10.0.0.1:11211", 1, AF_INET, 11211},
        {"10.0.0.1:11211:1 cache-a", "cache-a", "10.0.0.1:11211", 1, AF_INET,
         11211},
        {"10.0.0.1:11212:1", "10.0.0.1:11212", "10.0.0.1:11212", 1, AF_INET,
         11212},
        {"[::1]:9001:1", "[::1]:9001", "[::1]:9001", 1, AF_INET6, 9001},
        {"[::1]:9001", "[::1]:9001", "[::1]:9001", 1, AF_INET6, 9001},
        {"[::1]:11211:2 six", "six", "[::1]:11211", 2, AF_INET6, 11211},
        {"[::1]:11211:2", "[::1]", "[::1]:11211", 2, AF_INET6, 11211},
        {"/tmp/mc.sock:2", "/tmp/mc.sock", "/tmp/mc.sock", 2, AF_UNIX, 0},
        {"/tmp/mc.sock", "/tmp/mc.sock", "/tmp/mc.sock", 1, AF_UNIX, 0},
        {"/tmp/mc.sock:1 mc", "mc", "/tmp/mc.sock", 1, AF_UNIX, 0},
        /* a hostname keeps its text as name; resolved once, at load */
        {"localhost:9001:1", "localhost:9001", "localhost:9001", 1, AF_INET,
         9001},
    };
    static const struct {
        const char *text, *phrase;
    } bad[] = {
        {"127.0.0.1:9001:x", "weight 'x'"},
        {"127.0.0.1:9001:-1", "weight '-1'"},
        {"127.0.0.1", "expected host:port"},
        {"::1:9001:1", "[::1]:port:weight"},
        {"127.0.0.1:0:1", "port '0'"},
        {"127.0.0.1:65536:1", "port '65536'"},
        {"127.0.0.1:9001:1 a b c", "[name [zone]], one word each"},
        {"127.0.0.1:9001:1 a b#", "[name [zone]], one word each"},
        {"[::1:9001:1", "missing ']'"},
        {"[127.0.0.1]:9001:1", "not an IPv6 address"},
        {"", "expected host:port:weight"},
        {":9001:1", "missing host"},
        {"no-such-host.invalid:9001:1", "cannot resolve host"},
    };
    struct conf_server s;
    char msg[512];

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        if (conf_parse_server(good[i].text, &s, msg, sizeof(msg)) != 0)
            fail_msg("'%s': %s", good[i].text, msg);
        assert_string_equal(s.name, good[i].name);
        assert_string_equal(s.addr.text, good[i].addr);
        assert_int_equal(s.weight, good[i].weight);
        assert_int_equal(s.addr.family, good[i].family);
        assert_int_equal(s.addr.port, good[i].port);
        assert_null(s.zone);
        conf_server_deinit(&s);
    }
    /* a second word is the server's zone */
    assert_int_equal(
        conf_parse_server("127.0.0.1:9001:2 web-1 rack-a", &s, msg, sizeof(msg)),
        0);
    assert_string_equal(s.name, "web-1");
    assert_string_equal(s.zone, "rack-a");
    assert_int_equal(s.weight, 2);
    conf_server_deinit(&s);
    /* a CR or LF separates them too (a state file's name may hold one):
     * the split read past the end of the text (found by fuzz_state) */
    assert_int_equal(conf_parse_server("127.0.0.1:9001:2 web-1\nrack-a", &s,
                                       msg, sizeof(msg)),
                     0);
    assert_string_equal(s.name, "web-1");
    assert_string_equal(s.zone, "rack-a");
    conf_server_deinit(&s);
    assert_int_not_equal(
        conf_parse_server("127.0.0.1:9001:1 n\rn)nweb'4", &s, msg, sizeof(msg)),
        0);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        msg[0] = '\0';
        if (conf_parse_server(bad[i].text, &s, msg, sizeof(msg)) == 0) {
            conf_server_deinit(&s);
            fail_msg("'%s' accepted", bad[i].text);
        }
        if (strstr(msg, bad[i].phrase) == NULL)
            fail_msg("'%s': got \"%s\", want \"%s\"", bad[i].text, msg,
                     bad[i].phrase);
    }
}

static void
test_parse_addr(void **state)
{
    struct conf_addr a, b;
    char msg[256];
    const struct sockaddr_in *in;

    (void)state;
    assert_int_equal(conf_parse_addr("127.0.0.1:8080", &a, msg, sizeof(msg)),
                     0);
    in = (const struct sockaddr_in *)(const void *)&a.sa;
    assert_int_equal(a.family, AF_INET);
    assert_int_equal(in->sin_family, AF_INET);
    assert_int_equal(ntohs(in->sin_port), 8080);
    assert_int_equal(ntohl(in->sin_addr.s_addr), 0x7f000001);
    assert_int_equal(a.salen, sizeof(struct sockaddr_in));
    /* the same socket written differently is equal */
    assert_int_equal(conf_parse_addr("localhost:8080", &b, msg, sizeof(msg)),
                     0);
    assert_true(conf_addr_equal(&a, &b));
    conf_addr_deinit(&b);
    assert_int_equal(conf_parse_addr("127.0.0.1:8081", &b, msg, sizeof(msg)),
                     0);
    assert_false(conf_addr_equal(&a, &b));
    conf_addr_deinit(&b);
    conf_addr_deinit(&a);
    assert_null(a.text);

    assert_int_equal(conf_parse_addr("[::]:80", &a, msg, sizeof(msg)), 0);
    assert_int_equal(a.family, AF_INET6);
    assert_int_equal(a.salen, sizeof(struct sockaddr_in6));
    conf_addr_deinit(&a);
    assert_int_equal(conf_parse_addr("/run/x.sock", &a, msg, sizeof(msg)), 0);
    assert_int_equal(a.family, AF_UNIX);
    assert_int_equal(a.port, 0);
    conf_addr_deinit(&a);

    assert_int_equal(conf_parse_addr("127.0.0.1", &a, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "expected host:port"));
    assert_int_equal(conf_parse_addr("::1:80", &a, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "brackets"));
    assert_int_equal(conf_parse_addr("127.0.0.1:http", &a, msg, sizeof(msg)),
                     -1);
    assert_non_null(strstr(msg, "port 'http'"));
    assert_int_equal(conf_parse_addr("/"
                                     "0123456789012345678901234567890123"
                                     "4567890123456789012345678901234567890"
                                     "1234567890123456789012345678901234567"
                                     "89",
                                     &a, msg, sizeof(msg)),
                     -1);
    assert_non_null(strstr(msg, "longer than 107"));
}

/* The map form, the list form and the 11211 rule inside a config. */
static void
test_servers_in_config(void **state)
{
    static const char yaml[] =
        "p:\n"
        "  listen: 127.0.0.1:7000\n"
        "  mode: tcp\n"
        "  servers:\n"
        "    - { address: '[::1]:9002', weight: 2, name: web-2 }\n"
        "    - address: 127.0.0.1:9003\n"
        "    - { address: 127.0.0.1:11211 }\n"
        "    - '[::1]:9001:1'\n"
        "    - 127.0.0.1:9004:0 spare\n";
    struct conf *c = load(yaml);
    const struct conf_pool *p;
    struct chash_member m[5];

    (void)state;
    assert_non_null(c);
    p = &c->pools[0];
    assert_int_equal(p->nservers, 5);
    assert_string_equal(p->servers[0].name, "web-2");
    assert_int_equal(p->servers[0].addr.family, AF_INET6);
    assert_int_equal(p->servers[0].weight, 2);
    assert_int_equal(p->servers[0].line, 5);
    assert_string_equal(p->servers[1].name, "127.0.0.1:9003");
    assert_int_equal(p->servers[1].weight, 1);
    assert_int_equal(p->servers[1].line, 6);
    assert_string_equal(p->servers[2].name, "127.0.0.1");
    assert_string_equal(p->servers[3].name, "[::1]:9001");
    assert_int_equal(p->servers[4].weight, 0);

    conf_pool_members(p, m);
    for (size_t i = 0; i < 5; i++) {
        assert_ptr_equal(m[i].name, p->servers[i].name);
        assert_int_equal(m[i].weight, p->servers[i].weight);
        assert_true(m[i].ramp == 1.0);
    }
    conf_destroy(c);
}

static void
test_unix_listen(void **state)
{
    static const char yaml[] =
        "a:\n  listen: /tmp/a.sock\n  servers: [127.0.0.1:9]\n"
        "b:\n  listen: /tmp/b.sock 0600\n  servers: [127.0.0.1:9]\n"
        "c:\n  listen: /tmp/c.sock:0660\n  servers: [127.0.0.1:9]\n";
    struct conf *c = load(yaml);

    (void)state;
    assert_non_null(c);
    assert_int_equal(c->pools[0].listen.family, AF_UNIX);
    assert_int_equal(c->pools[0].listen_perm, -1);
    assert_string_equal(c->pools[1].listen.text, "/tmp/b.sock");
    assert_int_equal(c->pools[1].listen_perm, 0600);
    assert_string_equal(c->pools[2].listen.text, "/tmp/c.sock");
    assert_int_equal(c->pools[2].listen_perm, 0660);
    conf_destroy(c);
    expect_error("a:\n  listen: /tmp/a.sock 0999\n", 2, "octal mode");
}

static void
test_admin_forms(void **state)
{
    struct conf *c;

    (void)state;
    c = load("global:\n  admin: off\np:\n  listen: 127.0.0.1:8404\n"
             "  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    assert_int_equal(c->admin.family, AF_UNSPEC);
    assert_null(c->admin.text);
    conf_destroy(c);
    c = load("global:\n  admin: '[::1]:8405'\np:\n  listen: 127.0.0.1:1\n"
             "  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    assert_int_equal(c->admin.family, AF_INET6);
    conf_destroy(c);
    c = load("global:\n  admin: /run/chashd-admin.sock\np:\n"
             "  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    assert_int_equal(c->admin.family, AF_UNIX);
    conf_destroy(c);
    /* `global:` alone is all defaults */
    c = load("global:\np:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    conf_destroy(c);
}

static void
test_reload_helpers(void **state)
{
    static const char a_yaml[] =
        "p:\n  listen: 127.0.0.1:7000\n  mode: tcp\n"
        "  servers: [127.0.0.1:1:1 a, 127.0.0.1:2:2 b]\n";
    static const char same[] =
        "p:\n  listen: localhost:7000\n  mode: tcp\n  slow_start: 5s\n"
        "  servers: [127.0.0.1:2:2 b, 127.0.0.1:1:1 a]\n";
    static const char moved[] =
        "p:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
        "  servers: [127.0.0.1:1:1 a, 127.0.0.1:2:3 b]\n";
    struct conf *a = load(a_yaml), *b = load(same), *c = load(moved);

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_true(conf_pool_same_listen(&a->pools[0], &b->pools[0]));
    assert_true(conf_pool_same_ring(&a->pools[0], &b->pools[0]));
    assert_false(conf_pool_same_listen(&a->pools[0], &c->pools[0]));
    assert_false(conf_pool_same_ring(&a->pools[0], &c->pools[0]));
    conf_destroy(a);
    conf_destroy(b);
    conf_destroy(c);
}

static void
test_enum_names(void **state)
{
    (void)state;
    assert_string_equal(conf_mode_name(CONF_MODE_MEMCACHE), "memcache");
    assert_null(conf_mode_name(4));
    assert_null(conf_mode_name(-1));
    assert_string_equal(conf_hash_key_name(CONF_HASH_KEY_SOURCE_IP_PORT),
                        "source_ip_port");
    assert_string_equal(conf_on_failure_name(CONF_ON_FAILURE_REMAP), "remap");
    assert_string_equal(conf_log_level_name(CONF_LOG_WARN), "warn");
    assert_string_equal(conf_dist_name(CHASH_ALGO_NGINX), "nginx");
    assert_string_equal(conf_dist_name(CONF_DIST_RANDOM), "random");
    assert_null(conf_dist_name(CONF_DIST_RANDOM + 1));
}

/* The shipped examples load: conf/chashd.yml documents every key. */
static void
test_example_files(void **state)
{
    static const char *const files[] = {"conf/chashd.yml",
                                        "conf/nutcracker.yml", "conf/demo.yml"};
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        struct conf *c = conf_load(files[i], err, sizeof(err));
        if (c == NULL)
            fail_msg("%s", err);
        assert_string_equal(c->file, files[i]);
        assert_true(c->npools >= 2);
        conf_destroy(c);
    }
}

static void
test_load_file(void **state)
{
    char path[] = "/tmp/test_conf_XXXXXX";
    int fd = mkstemp(path);
    struct conf *c;
    FILE *f;

    (void)state;
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    fputs("p:\n  listen: 127.0.0.1:7000\n  servers:\n    - bad:addr:x\n", f);
    fclose(f);
    c = conf_load(path, err, sizeof(err));
    assert_null(c);
    assert_true(strncmp(err, path, strlen(path)) == 0);
    assert_non_null(strstr(err, ":4: bad server 'bad:addr:x'"));
    unlink(path);
    c = conf_load(path, err, sizeof(err));
    assert_null(c);
    assert_non_null(strstr(err, "cannot open: No such file"));
}

/* A nutcracker.yml maps keys exactly as nutcracker: the members the
 * loader gives (names by twemproxy's rule) in a ketama ring with the
 * default hash reproduce compat-hashing.md's worked example. */
static void
test_nutcracker_ketama_mapping(void **state)
{
    static const char yaml[] =
        "mc:\n  listen: 127.0.0.1:22121\n  servers:\n"
        "   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n"
        "   - 127.0.0.1:11213:1\n";
    static const struct {
        const char *key, *owner;
    } want[] = {{"foo", "127.0.0.1:11212"},
                {"bar", "127.0.0.1"},
                {"key0", "127.0.0.1"},
                {"key4", "127.0.0.1"}};
    struct conf *c = load(yaml);
    struct chash_member m[3];
    struct chash_ring *ring = NULL;
    const struct conf_pool *p;
    int rc;

    (void)state;
    assert_non_null(c);
    p = &c->pools[0];
    conf_pool_members(p, m);
    rc = chash_ring_create(&p->ring, m, p->nservers, &ring);
    assert_int_equal(rc, 0);
    assert_int_equal(chash_ring_hash(ring, "foo", 3), 4275688823u);
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        uint64_t h = chash_ring_hash(ring, want[i].key, strlen(want[i].key));
        assert_string_equal(m[chash_ring_lookup(ring, h)].name, want[i].owner);
    }
    chash_ring_destroy(ring);
    conf_destroy(c);
}

/* ---- one test per error class: exact line, key phrase ---- */

static void
test_err_unknown_key(void **state)
{
    (void)state;
    expect_error("web:\n  listen: 127.0.0.1:8080\n  mode: tcp\n"
                 "  balance: 2\n  servers: [127.0.0.1:9]\n",
                 4,
                 "unknown key 'balance' in pool 'web' (valid keys: "
                 "listen, hash, hash_tag");
    expect_error(
        "global:\n  workers: 2\n  admin_port: 1\n", 3,
        "unknown key 'admin_port' in global (valid keys: admin, "
        "admin_token, workers, log_level, pid_file, state_file, etcd)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  health_check:\n"
                 "    type: tcp\n    every: 1s\n",
                 5,
                 "unknown key 'every' in health_check (valid keys: type,"
                 " interval, timeout, rise, fall, path, host, "
                 "expect_status)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - { address: 127.0.0.1:2, wieght: 2 }\n",
                 4, "unknown key 'wieght' in a server");
}

/* global.etcd and members_from (doc/etcd.md). */
static void
test_etcd(void **state)
{
    struct conf *c;

    (void)state;
    c = load("global:\n  etcd:\n    endpoints: [http://127.0.0.1:2379, "
             "https://10.0.0.2:2379]\n    prefix: /lb/\n    instance: lb-1\n"
             "    lease_ttl: 5s\nweb:\n  listen: 127.0.0.1:8080\n  mode: tcp\n"
             "  members_from: etcd\n  servers: [127.0.0.1:9001:1 web-1]\n"
             "other:\n  listen: 127.0.0.1:8081\n  mode: tcp\n"
             "  servers: [127.0.0.1:9002]\n");
    assert_non_null(c);
    assert_true(c->etcd.enabled);
    assert_int_equal(c->etcd.nendpoints, 2);
    assert_string_equal(c->etcd.endpoints[1], "https://10.0.0.2:2379");
    assert_string_equal(c->etcd.prefix, "/lb"); /* no trailing '/' */
    assert_string_equal(c->etcd.instance, "lb-1");
    assert_int_equal(c->etcd.lease_ttl_ms, 5000);
    assert_int_equal(c->etcd.timeout_ms, 2000);
    assert_int_equal(c->pools[0].members_from, CONF_MEMBERS_ETCD);
    assert_int_equal(c->pools[1].members_from, CONF_MEMBERS_CONFIG);
    conf_destroy(c);
    /* defaults: the prefix, the host name as the instance */
    c = load("global:\n  etcd: { endpoints: [http://127.0.0.1:2379] }\n"
             "web:\n  listen: 127.0.0.1:8080\n  mode: tcp\n"
             "  servers: [127.0.0.1:9001]\n");
    assert_non_null(c);
    assert_string_equal(c->etcd.prefix, "/chash");
    assert_true(strlen(c->etcd.instance) > 0);
    conf_destroy(c);

    expect_error("web:\n  listen: 127.0.0.1:8080\n  mode: tcp\n"
                 "  members_from: etcd\n  servers: [127.0.0.1:9001]\n",
                 1, "'members_from: etcd' needs a global.etcd block");
    expect_error("global:\n  etcd: { prefix: /x }\nweb:\n  listen: "
                 "127.0.0.1:8080\n  servers: [127.0.0.1:9001]\n",
                 2, "'etcd' needs 'endpoints'");
    expect_error("global:\n  etcd: { endpoints: [127.0.0.1:2379] }\nweb:\n"
                 "  listen: 127.0.0.1:8080\n  servers: [127.0.0.1:9001]\n",
                 2, "must be a URL like http://127.0.0.1:2379");
    expect_error("global:\n  etcd: { endpoints: [http://a:1], instance: "
                 "'a/b' }\nweb:\n  listen: 127.0.0.1:8080\n  servers: "
                 "[127.0.0.1:9001]\n",
                 2, "etcd 'instance' 'a/b' must be");
    expect_error("global:\n  etcd: { endpoints: [http://a:1], lease_ttl: "
                 "1s }\nweb:\n  listen: 127.0.0.1:8080\n  servers: "
                 "[127.0.0.1:9001]\n",
                 2, "'lease_ttl' is out of range");
    expect_error("global:\n  etcd: { endpoints: [http://a:1], username: u "
                 "}\nweb:\n  listen: 127.0.0.1:8080\n  servers: "
                 "[127.0.0.1:9001]\n",
                 2, "'username' and 'password' go together");
    expect_error("global:\n  etcd: { endpoints: [http://a:1] }\nweb:\n"
                 "  listen: 127.0.0.1:8080\n  mode: tcp\n"
                 "  members_from: etcd\n  servers: ['127.0.0.1:9001:1 w#1']\n",
                 3, "member name 'w#1' cannot be an etcd key part");
}

static void
test_err_wrong_type(void **state)
{
    (void)state;
    expect_error("p:\n  listen:\n    - 127.0.0.1:1\n", 3,
                 "'listen' takes a single value, not a list");
    expect_error("p:\n  listen: 127.0.0.1:1\n  timeout: { a: 1 }\n", 3,
                 "'timeout' takes a single value, not a map");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers: 127.0.0.1:2\n", 3,
                 "'servers' must be a list");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n    - [a, b]\n", 4,
                 "a server must be");
    expect_error("p: 5\n", 1, "pool 'p' must be a map of keys, not a value");
    expect_error("- p\n", 1, "the top level must be a map");
    expect_error("p:\n  listen: 127.0.0.1:1\n  preconnect: maybe\n", 3,
                 "'preconnect' must be true or false, not 'maybe'");
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode:\n", 3,
                 "'mode' has no value");
}

static void
test_err_bad_address(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1\n", 2,
                 "bad 'listen': bad address '127.0.0.1'");
    expect_error("global:\n  admin: localhost:99999\n", 2,
                 "bad 'admin': bad address 'localhost:99999': port");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - 127.0.0.1:2:1\n    - 127.0.0.1::1\n",
                 5, "bad server '127.0.0.1::1'");
}

static void
test_err_bad_number(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  backlog: lots\n", 3,
                 "'backlog' must be a whole number, not 'lots'");
    expect_error("p:\n  listen: 127.0.0.1:1\n  retries: -1\n", 3,
                 "'retries' must be a whole number, not '-1'");
    expect_error("p:\n  listen: 127.0.0.1:1\n  balance_factor: high\n", 3,
                 "'balance_factor' must be a number");
}

static void
test_err_bad_duration(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n\n  slow_start: 10 seconds\n", 4,
                 "'slow_start' must be a duration (500ms, 2s, 1m");
    expect_error("p:\n  listen: 127.0.0.1:1\n  health_check: { interval: 1x "
                 "}\n",
                 3, "'interval' must be a duration");
}

static void
test_err_out_of_range(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  retries: 101\n", 3,
                 "'retries' is out of range: 101 is not between 0 and 100");
    expect_error("global:\n  workers: 0\n", 2,
                 "'workers' is out of range: 0 is not between 1 and 1024");
    expect_error("p:\n  listen: 127.0.0.1:1\n  server_connections: 0\n", 3,
                 "'server_connections' is out of range");
    expect_error("p:\n  listen: 127.0.0.1:1\n  balance_factor: 0.5\n", 3,
                 "'balance_factor' is out of range: 0.5 is not 0 (off) or "
                 "between 1.0");
    expect_error("p:\n  listen: 127.0.0.1:1\n  timeout: 2d\n", 3,
                 "'timeout' must be a duration");
    expect_error("p:\n  listen: 127.0.0.1:1\n  timeout: 25h\n", 3,
                 "'timeout' is out of range");
}

/* http pools: a hash_key chain tried in order, the PROXY protocol, the
 * access log, forwarded headers and the http health check; each wrong
 * form is refused with its line and what is wrong. */
static void
test_http_keys(void **state)
{
    static const char yaml[] =
        "web:\n  listen: 127.0.0.1:7001\n  mode: http\n"
        "  hash_key: [cookie:session, header:X-User-Id, query:uid, path,\n"
        "             uri, host, source_ip]\n"
        "  accept_proxy: true\n  send_proxy: v2\n"
        "  access_log: /var/log/chashd/web.log\n  access_log_format: json\n"
        "  forward_headers: [forwarded]\n  member_header: true\n"
        "  client_max_header: 32k\n  client_max_uri: 4k\n"
        "  backend_keepalive: 8\n  timeout: 5s\n"
        "  health_check: { type: http, path: /healthz, host: a.example,\n"
        "                  expect_status: 204 }\n"
        "  servers: [127.0.0.1:9]\n"
        "tcp:\n  listen: 127.0.0.1:7002\n  accept_proxy: true\n"
        "  send_proxy: v1\n  access_log: syslog\n  mode: tcp\n"
        "  health_check: { type: http }\n  servers: [127.0.0.1:9]\n";
    struct conf *c = load(yaml);
    const struct conf_pool *p;
    char chain[512];

    (void)state;
    assert_non_null(c);
    assert_int_equal(c->nwarnings, 0);
    p = conf_pool_find(c, "web");
    assert_int_equal(p->nhash_chain, 7);
    assert_int_equal(p->hash_key, CONF_HASH_KEY_COOKIE);
    assert_int_equal(p->hash_chain[1].kind, CONF_HASH_KEY_HEADER);
    assert_string_equal(p->hash_chain[1].name, "X-User-Id");
    assert_int_equal(p->hash_chain[2].kind, CONF_HASH_KEY_QUERY);
    assert_int_equal(p->hash_chain[6].kind, CONF_HASH_KEY_SOURCE_IP);
    assert_string_equal(conf_hash_chain_text(p, chain, sizeof(chain)),
                        "[cookie:session, header:X-User-Id, query:uid, path, "
                        "uri, host, source_ip]");
    assert_true(p->accept_proxy);
    assert_int_equal(p->send_proxy, CONF_PROXY_V2);
    assert_string_equal(p->access_log, "/var/log/chashd/web.log");
    assert_int_equal(p->access_log_format, CONF_LOG_FORMAT_JSON);
    assert_int_equal(p->forward_headers, CONF_FWD_FORWARDED);
    assert_true(p->member_header);
    assert_int_equal(p->client_max_header, 32 * 1024);
    assert_int_equal(p->client_max_uri, 4 * 1024);
    assert_int_equal(p->backend_keepalive, 8);
    assert_int_equal(p->timeout_ms, 5000);
    assert_int_equal(p->health.type, CONF_HEALTH_HTTP);
    assert_string_equal(p->health.path, "/healthz");
    assert_string_equal(p->health.host, "a.example");
    assert_int_equal(p->health.expect_status, 204);
    p = conf_pool_find(c, "tcp");
    assert_int_equal(p->nhash_chain, 1);
    assert_int_equal(p->hash_key, CONF_HASH_KEY_SOURCE_IP);
    assert_string_equal(conf_hash_chain_text(p, chain, sizeof(chain)),
                        "source_ip");
    assert_int_equal(p->send_proxy, CONF_PROXY_V1);
    assert_string_equal(p->access_log, "syslog");
    assert_string_equal(p->health.path, "/");
    assert_int_equal(p->health.expect_status, 0);
    conf_destroy(c);

    /* Defaults of an http pool. */
    c = load("w:\n  listen: 127.0.0.1:1\n  mode: http\n"
             "  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    p = &c->pools[0];
    assert_int_equal(p->forward_headers,
                     CONF_FWD_X_FORWARDED_FOR | CONF_FWD_X_FORWARDED_PROTO);
    assert_false(p->member_header);
    assert_null(p->access_log);
    assert_int_equal(p->client_max_header, 16 * 1024);
    assert_int_equal(p->backend_keepalive, 128);
    conf_destroy(c);

#define HTTP_POOL "w:\n  listen: 127.0.0.1:1\n  mode: http\n"
    expect_error(HTTP_POOL "  hash_key: header\n", 4,
                 "hash_key 'header' needs a name: header:NAME");
    expect_error(HTTP_POOL "  hash_key: path:x\n", 4,
                 "hash_key 'path:x': 'path' takes no name");
    expect_error(HTTP_POOL "  hash_key: header:X(Y\n", 4,
                 "the header name has a character a header name cannot have "
                 "('(')");
    expect_error(HTTP_POOL "  hash_key: cookie:a;b\n", 4,
                 "the cookie name has a character");
    expect_error(HTTP_POOL "  hash_key: []\n", 4,
                 "'hash_key' must list 1 to 8 sources, not 0");
    expect_error(HTTP_POOL "  hash_key: [path, host, uri, path, host, uri, "
                           "path, host, uri]\n",
                 4, "'hash_key' must list 1 to 8 sources, not 9");
    expect_error("t:\n  listen: 127.0.0.1:1\n  mode: tcp\n"
                 "  hash_key: [source_ip, source_ip_port]\n"
                 "  servers: [127.0.0.1:9]\n",
                 4,
                 "pool 't' is tcp and sees no requests: its hash_key is "
                 "source_ip or source_ip_port, not [source_ip, "
                 "source_ip_port]");
    expect_error("t:\n  listen: 127.0.0.1:1\n  mode: tcp\n"
                 "  hash_key: header:X-User\n  servers: [127.0.0.1:9]\n",
                 4, "not header:X-User (headers, cookies");
    expect_error(HTTP_POOL "  send_proxy: v3\n", 4,
                 "unknown send_proxy 'v3' (valid: off, v1, v2)");
    expect_error(HTTP_POOL "  access_log: logs/web.log\n", 4,
                 "'access_log' must be an absolute file path, syslog or off");
    expect_error(HTTP_POOL "  forward_headers: [via]\n", 4,
                 "unknown forward_headers 'via' (valid: x-forwarded-for, "
                 "x-forwarded-proto, forwarded)");
    expect_error(HTTP_POOL "  client_max_uri: 32k\n  servers: [127.0.0.1:9]\n",
                 4,
                 "client_max_uri (32768) is larger than client_max_header "
                 "(16384)");
    expect_error(HTTP_POOL "  health_check: { type: tcp, path: /x }\n", 4,
                 "health_check 'path' is for type http, not tcp");
    expect_error(HTTP_POOL "  health_check: { type: http, path: /a b }\n", 4,
                 "'path' has a space or a control character");
    expect_error(HTTP_POOL "  health_check: { type: http, expect_status: 99 "
                           "}\n",
                 4, "'expect_status' is out of range");
    expect_error("r:\n  listen: 127.0.0.1:1\n  mode: redis\n"
                 "  health_check: { type: http }\n  servers: [127.0.0.1:9]\n",
                 4,
                 "health_check type http (GET /) is for http and tcp pools; "
                 "pool 'r' is redis");
#undef HTTP_POOL
}

static void
test_err_unknown_name(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  hash: sha1\n", 3,
                 "unknown hash 'sha1' (valid: xxh3, murmur3");
    expect_error("p:\n  listen: 127.0.0.1:1\n  distribution: consistent\n", 3,
                 "unknown distribution 'consistent' (valid: ring, maglev, "
                 "rendezvous, jump, ketama, nginx, modula, random)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode: udp\n", 3,
                 "unknown mode 'udp' (valid: tcp, http, redis, memcache)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  on_failure: retry\n", 3,
                 "unknown on_failure 'retry' (valid: failover, remap, "
                 "error)");
    expect_error("global:\n  log_level: trace\n", 2,
                 "unknown log_level 'trace' (valid: error, warn, info, "
                 "debug)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode: tcp\n"
                 "  hash_key: cookies\n",
                 4,
                 "unknown hash_key 'cookies' (valid: source_ip, "
                 "source_ip_port, header, cookie, query, path, uri, host; "
                 "header, cookie and query take a name: header:X-User-Id)");
}

static void
test_err_duplicate_member_name(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - 127.0.0.1:2:1 a\n    - 127.0.0.1:3:1 b\n"
                 "    - { address: 127.0.0.1:4, name: a }\n",
                 6,
                 "duplicate server name 'a' in pool 'p' (first at line "
                 "4)");
    /* twemproxy's rule names both "10.0.0.1": a duplicate too */
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - 127.0.0.1:11211:1\n    - 127.0.0.1:11211:2\n",
                 5, "duplicate server name '127.0.0.1'");
}

static void
test_err_duplicate_member_address(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - 127.0.0.1:2:1 a\n    - localhost:2:1 b\n",
                 5,
                 "duplicate server address 'localhost:2' in pool 'p' "
                 "(same as '127.0.0.1:2' at line 4)");
}

static void
test_err_listen_twice(void **state)
{
    (void)state;
    expect_error("a:\n  listen: 127.0.0.1:7000\n  servers: [127.0.0.1:9]\n"
                 "b:\n  listen: 127.0.0.1:7000\n  servers: [127.0.0.1:9]\n",
                 5,
                 "pool 'b' listens on '127.0.0.1:7000', which pool 'a' "
                 "already uses (line 2)");
    /* a wildcard on the same port overlaps */
    expect_error("a:\n  listen: 127.0.0.1:7000\n  servers: [127.0.0.1:9]\n"
                 "b:\n  listen: '[::]:7000'\n  servers: [127.0.0.1:9]\n",
                 5, "pool 'b' listens on '[::]:7000'");
    expect_error("a:\n  listen: /tmp/x.sock\n  servers: [127.0.0.1:9]\n"
                 "b:\n  listen: /tmp/x.sock 0600\n  servers: [127.0.0.1:9]\n",
                 5, "which pool 'a' already uses");
    /* the admin address counts, the default one included */
    expect_error("a:\n  listen: 127.0.0.1:8404\n  servers: [127.0.0.1:9]\n", 2,
                 "which is the admin address '127.0.0.1:8404'");
    expect_error("global:\n  admin: 127.0.0.1:9999\n"
                 "a:\n  listen: 0.0.0.0:9999\n  servers: [127.0.0.1:9]\n",
                 4, "which is the admin address '127.0.0.1:9999'");
}

static void
test_err_no_servers(void **state)
{
    (void)state;
    expect_error("global:\n  workers: 1\nweb:\n  listen: 127.0.0.1:1\n", 3,
                 "pool 'web' has no servers");
    expect_error("web:\n  listen: 127.0.0.1:1\n  servers:\n", 1,
                 "pool 'web' has no servers");
    expect_error("web:\n  listen: 127.0.0.1:1\n  servers: []\n", 1,
                 "pool 'web' has no servers");
}

static void
test_err_no_listen(void **state)
{
    (void)state;
    expect_error("a:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n"
                 "web:\n  servers: [127.0.0.1:9]\n",
                 4, "pool 'web' has no 'listen' address");
    expect_error("web:\n", 1, "pool 'web' is empty");
}

static void
test_err_yaml_syntax(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - 127.0.0.1:2\n   - 127.0.0.1:3\n",
                 5, "YAML syntax error");
    expect_error("p:\n  listen: \"127.0.0.1:1\n", 2, "YAML syntax error");
    expect_error("p:\n  listen: 127.0.0.1:1\n\tservers: []\n", 3,
                 "YAML syntax error");
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode: \xff\xfe\n", 3,
                 "YAML syntax error");
}

static void
test_err_admin_token(void **state)
{
    struct conf *c;

    (void)state;
    expect_error("global:\n  workers: 1\n  admin: 0.0.0.0:8404\n"
                 "p:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n",
                 3,
                 "admin address '0.0.0.0:8404' is not loopback: set "
                 "'admin_token'");
    c = load("global:\n  admin: 0.0.0.0:8404\n  admin_token: t0k3n\n"
             "p:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    conf_destroy(c);
    c = load("global:\n  admin: 127.9.9.9:8404\n"
             "p:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n");
    assert_non_null(c);
    conf_destroy(c);
}

static void
test_err_duplicate_key(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  hash: md5\n"
                 "  servers: [127.0.0.1:9]\n  hash: crc32\n",
                 5,
                 "duplicate key 'hash' in pool 'p' (first given at line "
                 "3)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n"
                 "q:\n  listen: 127.0.0.1:2\n  servers: [127.0.0.1:9]\n"
                 "p:\n  listen: 127.0.0.1:3\n  servers: [127.0.0.1:9]\n",
                 7, "duplicate pool 'p' (first at line 1)");
    expect_error("global:\n  workers: 1\nglobal:\n  workers: 2\n", 3,
                 "duplicate 'global' (first at line 1)");
}

static void
test_err_pool_name(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n"
                 "my pool:\n  listen: 127.0.0.1:2\n",
                 4, "bad pool name 'my pool': use up to 64 letters, digits");
    expect_error("a/b:\n  listen: 127.0.0.1:2\n", 1, "bad pool name 'a/b'");
    expect_error("? [a, b]\n: 1\n", 1, "a pool name must be a plain name");
}

static void
test_err_hash_key_in_store_mode(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  redis: true\n"
                 "  hash_key: source_ip\n  servers: [127.0.0.1:9]\n",
                 4,
                 "'hash_key' is for tcp and http pools; pool 'p' is "
                 "redis");
}

static void
test_err_weights(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - 127.0.0.1:2:0\n    - 127.0.0.1:3:0\n",
                 1, "pool 'p': no server has a weight above 0");
    expect_error("p:\n  listen: 127.0.0.1:1\n  distribution: random\n"
                 "  servers: [127.0.0.1:2:0]\n",
                 1, "no server has a weight above 0");
}

/* The algorithm's own limits come from building the ring at load, with
 * the line of what is at fault. */
static void
test_err_ring_limits(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  distribution: jump\n"
                 "  servers:\n    - 127.0.0.1:2:1\n    - 127.0.0.1:3:2\n",
                 6,
                 "distribution jump takes server weights 0 or 1 only, "
                 "not 2");
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode: tcp\n  servers:\n"
                 "    - 127.0.0.1:2:1\n    - 127.0.0.1:3:10000 big\n",
                 6,
                 "weight 10000 of server 'big' gives more than 1000000 "
                 "points");
    expect_error("p:\n  listen: 127.0.0.1:1\n  distribution: maglev\n"
                 "  table_size: 1000\n  servers: [127.0.0.1:2]\n",
                 4,
                 "table_size 1000 is not a prime larger than the 1 "
                 "servers");
    expect_error("p:\n  listen: 127.0.0.1:1\n  table_size: 5000012\n", 3,
                 "'table_size' is out of range");
}

static void
test_err_bad_values(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  hash_tag: \"{\"\n", 3,
                 "'hash_tag' must be two characters");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers:\n"
                 "    - { weight: 2 }\n",
                 4, "server has no 'address'");
    expect_error("p:\n  listen: 127.0.0.1:1\n  health_check: sometimes\n", 3,
                 "'health_check' must be a map");
}

static void
test_err_documents(void **state)
{
    (void)state;
    expect_error("", 1, "the configuration is empty");
    expect_error("# only a comment\n", 1, "the configuration is empty");
    expect_error("global:\n  workers: 2\n", 1, "no pools");
    expect_error("p:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:9]\n"
                 "---\nq: 1\n",
                 5, "a second YAML document");
}

/* ---- deep copy ---- */

/* Every pointer field of <b> is a distinct allocation equal to <a>'s. */
static void
assert_pool_copy_equal(const struct conf_pool *a, const struct conf_pool *b)
{
    assert_string_equal(b->name, a->name);
    assert_ptr_not_equal(b->name, a->name);
    assert_string_equal(b->listen.text, a->listen.text);
    assert_ptr_not_equal(b->listen.text, a->listen.text);
    assert_true(conf_addr_equal(&a->listen, &b->listen));
    if (a->redis_auth != NULL) {
        assert_string_equal(b->redis_auth, a->redis_auth);
        assert_ptr_not_equal(b->redis_auth, a->redis_auth);
    } else {
        assert_null(b->redis_auth);
    }
    assert_int_equal(b->ncommands, a->ncommands);
    for (size_t i = 0; i < a->ncommands; i++) {
        assert_string_equal(b->commands[i], a->commands[i]);
        assert_ptr_not_equal(b->commands[i], a->commands[i]);
    }
    assert_int_equal(b->nservers, a->nservers);
    for (size_t i = 0; i < a->nservers; i++) {
        assert_string_equal(b->servers[i].name, a->servers[i].name);
        assert_ptr_not_equal(b->servers[i].name, a->servers[i].name);
        assert_string_equal(b->servers[i].addr.text, a->servers[i].addr.text);
        assert_ptr_not_equal(b->servers[i].addr.text, a->servers[i].addr.text);
        assert_true(conf_addr_equal(&a->servers[i].addr, &b->servers[i].addr));
        assert_int_equal(b->servers[i].weight, a->servers[i].weight);
        assert_int_equal(b->servers[i].line, a->servers[i].line);
    }
    assert_true(conf_pool_same_ring(a, b));
    assert_true(conf_pool_same_listen(a, b));
}

/* A copy outlives its conf: copy every pool of a nutcracker.yml (redis_auth,
 * command lists, unix sockets), destroy the conf, and the copies still
 * hold every value (under ASan a shared pointer is a use after free). */
static void
test_pool_copy(void **state)
{
    struct conf *c = load(nutcracker_yaml), *ref = load(nutcracker_yaml);
    struct conf_pool copy[5], zero;

    (void)state;
    assert_non_null(c);
    assert_non_null(ref);
    assert_int_equal(c->npools, 5);
    for (size_t i = 0; i < c->npools; i++)
        assert_int_equal(conf_pool_copy(&copy[i], &c->pools[i]), 0);
    conf_destroy(c);
    for (size_t i = 0; i < ref->npools; i++) {
        assert_pool_copy_equal(&ref->pools[i], &copy[i]);
        assert_int_equal(copy[i].mode, ref->pools[i].mode);
        assert_int_equal(copy[i].mode_source, ref->pools[i].mode_source);
        assert_int_equal(copy[i].max_points, ref->pools[i].max_points);
        assert_int_equal(copy[i].timeout_ms, ref->pools[i].timeout_ms);
        assert_int_equal(copy[i].listen_perm, ref->pools[i].listen_perm);
        assert_int_equal(copy[i].redis_db, ref->pools[i].redis_db);
        assert_string_equal(copy[i].hash_tag, ref->pools[i].hash_tag);
    }
    assert_string_equal(copy[1].redis_auth, "hunter2");
    assert_string_equal(copy[4].commands[1], "redis_module_mset 2");
    for (size_t i = 0; i < 5; i++) {
        conf_pool_deinit(&copy[i]);
        assert_null(copy[i].name);
        assert_int_equal(copy[i].nservers, 0);
        conf_pool_deinit(&copy[i]); /* twice is harmless */
    }
    memset(&zero, 0, sizeof(zero));
    conf_pool_deinit(&zero);
    conf_pool_deinit(NULL);
    conf_destroy(ref);
}

/* Out of memory at every strdup a copy makes, in turn: -1 with ENOMEM,
 * the destination zeroed, nothing leaked (ASan's leak check), the source
 * untouched; then the copy that no longer fails is whole. */
static void
test_pool_copy_out_of_memory(void **state)
{
    struct conf *c = load(nutcracker_yaml);
    const struct conf_pool *src;
    struct conf_pool dst, zero;
    int at, rc;

    (void)state;
    assert_non_null(c);
    src = conf_pool_find(c, "beta"); /* redis_auth, named servers */
    memset(&zero, 0, sizeof(zero));
    for (at = 0; at < 100; at++) {
        memset(&dst, 0xa5, sizeof(dst));
        errno = 0;
        strdup_fail_at = at;
        rc = conf_pool_copy(&dst, src);
        strdup_fail_at = -1;
        if (rc == 0)
            break;
        assert_int_equal(rc, -1);
        assert_int_equal(errno, ENOMEM);
        assert_memory_equal(&dst, &zero, sizeof(dst));
    }
    /* name, listen, redis_auth and 2 per server: every one was failed */
    assert_int_equal(at, 3 + 2 * (int)src->nservers);
    assert_pool_copy_equal(src, &dst);
    conf_pool_deinit(&dst);

    src = conf_pool_find(c, "omega"); /* commands */
    for (at = 0; at < 100; at++) {
        strdup_fail_at = at;
        rc = conf_pool_copy(&dst, src);
        strdup_fail_at = -1;
        if (rc == 0)
            break;
        assert_memory_equal(&dst, &zero, sizeof(dst));
    }
    assert_int_equal(at, 2 + (int)src->ncommands + 2 * (int)src->nservers);
    assert_pool_copy_equal(src, &dst);
    conf_pool_deinit(&dst);
    conf_destroy(c);
}

/* ---- where the mode came from ---- */

static void
test_mode_source(void **state)
{
    static const char yaml[] =
        "m:\n  listen: 127.0.0.1:7001\n  mode: http\n  servers: [127.0.0.1:9]\n"
        "r:\n  listen: 127.0.0.1:7002\n  redis: true\n  servers: "
        "[127.0.0.1:9]\n"
        "f:\n  listen: 127.0.0.1:7003\n  redis: false\n"
        "  servers: [127.0.0.1:9]\n"
        "d:\n  listen: 127.0.0.1:7004\n  servers: [127.0.0.1:9]\n"
        "a:\n  listen: 127.0.0.1:7005\n  mode: redis\n  redis: true\n"
        "  servers: [127.0.0.1:9]\n"
        "t:\n  listen: 127.0.0.1:7006\n  mode: tcp\n  redis: false\n"
        "  servers: [127.0.0.1:9]\n";
    static const struct {
        const char *pool;
        int mode, src;
    } want[] = {
        {"m", CONF_MODE_HTTP, CONF_MODE_SRC_MODE},
        {"r", CONF_MODE_REDIS, CONF_MODE_SRC_REDIS},
        {"f", CONF_MODE_MEMCACHE, CONF_MODE_SRC_REDIS},
        {"d", CONF_MODE_MEMCACHE, CONF_MODE_SRC_DEFAULT},
        {"a", CONF_MODE_REDIS, CONF_MODE_SRC_MODE},
        {"t", CONF_MODE_TCP, CONF_MODE_SRC_MODE},
    };
    struct conf *c = load(yaml);

    (void)state;
    assert_non_null(c);
    assert_int_equal(c->nwarnings, 0);
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        const struct conf_pool *p = conf_pool_find(c, want[i].pool);
        assert_int_equal(p->mode, want[i].mode);
        assert_int_equal(p->mode_source, want[i].src);
    }
    conf_destroy(c);
    assert_string_equal(conf_mode_source_name(CONF_MODE_SRC_MODE),
                        "set by 'mode:'");
    assert_string_equal(conf_mode_source_name(CONF_MODE_SRC_REDIS),
                        "from twemproxy's 'redis:' key");
    assert_string_equal(conf_mode_source_name(CONF_MODE_SRC_DEFAULT),
                        "the default: neither 'mode:' nor 'redis:' is given "
                        "(twemproxy's rule)");
    assert_null(conf_mode_source_name(3));
    assert_null(conf_mode_source_name(-1));
}

/* `mode:` and `redis:` that disagree are refused at the `redis:` line,
 * whichever comes first in the file. */
static void
test_err_mode_and_redis_disagree(void **state)
{
    (void)state;
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode: tcp\n  redis: true\n"
                 "  servers: [127.0.0.1:9]\n",
                 4,
                 "'redis: true' disagrees with 'mode: tcp' (line 3) in pool "
                 "'p': drop 'redis', or make them agree (redis: true is "
                 "mode: redis)");
    expect_error("p:\n  redis: false\n  listen: 127.0.0.1:1\n  mode: redis\n"
                 "  servers: [127.0.0.1:9]\n",
                 2, "'redis: false' disagrees with 'mode: redis' (line 4)");
    expect_error("p:\n  listen: 127.0.0.1:1\n  mode: memcache\n"
                 "  redis: yes\n  servers: [127.0.0.1:9]\n",
                 4, "'redis: true' disagrees with 'mode: memcache'");
}

/* ---- warnings ---- */

/* Load <yaml>; its warnings must be exactly <want> (NULL-terminated), in
 * order. */
static void
expect_warnings(const char *yaml, const char *const *want)
{
    struct conf *c = load(yaml);
    size_t n = 0;

    assert_non_null(c);
    while (want[n] != NULL)
        n++;
    for (size_t i = 0; i < c->nwarnings || i < n; i++) {
        const char *got = i < c->nwarnings ? c->warnings[i] : "(none)";
        const char *exp = i < n ? want[i] : "(none)";
        if (strcmp(got, exp) != 0)
            fail_msg("warning %zu:\ngot   \"%s\"\nwant  \"%s\"", i, got, exp);
    }
    conf_destroy(c);
}

static void
test_warn_unitless_durations(void **state)
{
    static const char ours[] =
        "p:\n"
        "  listen: 127.0.0.1:7001\n"
        "  mode: tcp\n"
        "  slow_start: 30\n"
        "  connect_timeout: 999\n"
        "  idle_timeout: 1000\n"
        "  shutdown_timeout: 0\n"
        "  health_check: { interval: 100, timeout: 50 }\n"
        "  servers: [127.0.0.1:9]\n";
    static const char *const ours_want[] = {
        "t.yml:4: warning: 'slow_start: 30' has no unit and is read as 30 "
        "milliseconds (write 30s for seconds)",
        "t.yml:5: warning: 'connect_timeout: 999' has no unit and is read as "
        "999 milliseconds (write 999s for seconds)",
        "t.yml:8: warning: 'interval: 100' has no unit and is read as 100 "
        "milliseconds (write 100s for seconds)",
        "t.yml:8: warning: 'timeout: 50' has no unit and is read as 50 "
        "milliseconds (write 50s for seconds)",
        NULL};
    /* with units, or twemproxy's own keys in plain ms: silent */
    static const char silent[] =
        "p:\n"
        "  listen: 127.0.0.1:7001\n"
        "  redis: true\n"
        "  timeout: 400\n"
        "  server_retry_timeout: 30\n"
        "  slow_start: 30s\n"
        "  connect_timeout: 250ms\n"
        "  health_check: { interval: 1s, timeout: 0.5s }\n"
        "  servers: [127.0.0.1:9]\n";
    static const char *const none[] = {NULL};
    struct conf *c;

    (void)state;
    expect_warnings(ours, ours_want);
    expect_warnings(silent, none);
    /* read as milliseconds all the same, as twemproxy reads its keys */
    c = load(ours);
    assert_int_equal(c->pools[0].slow_start_ms, 30);
    assert_int_equal(c->pools[0].health.interval_ms, 100);
    conf_destroy(c);
}

/* Each key that does nothing in its pool's mode, at its line; `redis:
 * false` agrees with mode tcp (line 12) and hash_tag acts in a memcache
 * pool (line 16): no warning for those. */
static void
test_warn_keys_without_effect(void **state)
{
    static const char yaml[] = "web:\n"                       /* 1 */
                               "  listen: 127.0.0.1:7001\n"   /* 2 */
                               "  mode: tcp\n"                /* 3 */
                               "  redis_auth: secret\n"       /* 4 */
                               "  hash_tag: \"{}\"\n"         /* 5 */
                               "  timeout: 5000\n"            /* 6 */
                               "  servers: [127.0.0.1:9]\n"   /* 7 */
                               "  server_connections: 2\n"    /* 8 */
                               "  preconnect: true\n"         /* 9 */
                               "  redis_db: 1\n"              /* 10 */
                               "  command: [foo]\n"           /* 11 */
                               "  redis: false\n"             /* 12 */
                               "cache:\n"                     /* 13 */
                               "  listen: 127.0.0.1:7002\n"   /* 14 */
                               "  redis_db: 2\n"              /* 15 */
                               "  hash_tag: \"{}\"\n"         /* 16 */
                               "  servers: [127.0.0.1:9]\n"   /* 17 */
                               "  slow_start: 5\n"            /* 18 */
                               "api:\n"                       /* 19 */
                               "  listen: 127.0.0.1:7003\n"   /* 20 */
                               "  mode: http\n"               /* 21 */
                               "  hash_key: source_ip_port\n" /* 22 */
                               "  hash_tag: \"{}\"\n"         /* 23 */
                               "  servers: [127.0.0.1:9]\n"   /* 24 */
                               "rd:\n"                        /* 25 */
                               "  listen: 127.0.0.1:7004\n"   /* 26 */
                               "  redis: true\n"              /* 27 */
                               "  redis_auth: s\n"            /* 28 */
                               "  redis_db: 3\n"              /* 29 */
                               "  command: [foo]\n"           /* 30 */
                               "  timeout: 10\n"              /* 31 */
                               "  server_connections: 2\n"    /* 32 */
                               "  servers: [127.0.0.1:9]\n";  /* 33 */
    static const char *const want[] = {
        "t.yml:4: warning: 'redis_auth' has no effect in pool 'web' "
        "(mode tcp)",
        "t.yml:5: warning: 'hash_tag' has no effect in pool 'web' (mode tcp)",
        "t.yml:6: warning: 'timeout' has no effect in pool 'web' (mode tcp)",
        "t.yml:8: warning: 'server_connections' has no effect in pool 'web' "
        "(mode tcp)",
        "t.yml:9: warning: 'preconnect' has no effect in pool 'web' "
        "(mode tcp)",
        "t.yml:10: warning: 'redis_db' has no effect in pool 'web' "
        "(mode tcp)",
        "t.yml:11: warning: 'command' has no effect in pool 'web' (mode tcp)",
        "t.yml:15: warning: 'redis_db' has no effect in pool 'cache' "
        "(mode memcache)",
        "t.yml:18: warning: 'slow_start: 5' has no unit and is read as 5 "
        "milliseconds (write 5s for seconds)",
        "t.yml:23: warning: 'hash_tag' has no effect in pool 'api' "
        "(mode http)",
        "t.yml:30: warning: 'command' has no effect in pool 'rd' "
        "(mode redis)",
        NULL};

    (void)state;
    expect_warnings(yaml, want);
}

/* The configs users start from carry no warning. DESIGN.md's example has
 * one: `timeout` is twemproxy's request timeout, and acts in no tcp pool
 * today. */
static void
test_no_warnings_in_shipped_configs(void **state)
{
    static const char *const files[] = {"conf/chashd.yml",
                                        "conf/nutcracker.yml", "conf/demo.yml"};
    static const char *const design_want[] = {
        "t.yml:19: warning: 'timeout' has no effect in pool 'web' (mode tcp)",
        NULL};
    /* twemproxy's example has a `command:` list (a fork's module
     * commands): chashd refuses commands it does not know, and says so */
    static const char *const nutcracker_want[] = {
        "t.yml:57: warning: 'command' has no effect in pool 'omega' "
        "(mode redis)",
        NULL};
    static const char *const none[] = {NULL};
    struct conf *c;

    (void)state;
    expect_warnings(conf_default_yaml, none);
    expect_warnings(nutcracker_yaml, nutcracker_want);
    expect_warnings(design_yaml, design_want);
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        c = conf_load(files[i], err, sizeof(err));
        if (c == NULL)
            fail_msg("%s", err);
        for (size_t k = 0; k < c->nwarnings; k++)
            print_message("%s\n", c->warnings[k]);
        assert_int_equal(c->nwarnings, 0);
        conf_destroy(c);
    }
}

/* conf/demo.yml is the embedded demo config, byte for byte: what
 * `chash lookup --config conf/demo.yml` maps is what `chashd --demo`
 * (make run) serves. */
static void
test_demo_file_is_the_embedded_config(void **state)
{
    static char buf[64 * 1024];
    FILE *f = fopen("conf/demo.yml", "rb");
    size_t n;

    (void)state;
    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, conf_default_yaml);
}

/* ---- a member that is chashd itself ---- */

static void
addr(const char *text, struct conf_addr *a)
{
    char msg[256];

    if (conf_parse_addr(text, a, msg, sizeof(msg)) != 0)
        fail_msg("%s: %s", text, msg);
}

static bool
reaches(const char *listen, const char *member)
{
    struct conf_addr l, m;
    bool r;

    addr(listen, &l);
    addr(member, &m);
    r = conf_addr_reaches(&l, &m);
    conf_addr_deinit(&l);
    conf_addr_deinit(&m);
    return r;
}

/* A non-loopback address of this host, written "a.b.c.d" or "[v6]", of
 * <family>; false when the host has none. */
static bool
local_address(int family, char *buf, size_t len)
{
    struct ifaddrs *ifs, *i;
    bool found = false;

    if (getifaddrs(&ifs) != 0)
        return false;
    for (i = ifs; i != NULL && !found; i = i->ifa_next) {
        char host[INET6_ADDRSTRLEN];

        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
            continue;
        if (family == AF_INET) {
            const struct sockaddr_in *in = (const void *)i->ifa_addr;
            if ((ntohl(in->sin_addr.s_addr) >> 24) == 127)
                continue;
            inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)len);
            found = true;
        } else {
            const struct sockaddr_in6 *in6 = (const void *)i->ifa_addr;
            if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
                IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
                continue;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
            snprintf(buf, len, "[%s]", host);
            found = true;
        }
    }
    freeifaddrs(ifs);
    return found;
}

static void
test_addr_reaches(void **state)
{
    char local4[64], local6[80], l[128], m[128];

    (void)state;
    /* the same socket, however written */
    assert_true(reaches("127.0.0.1:8080", "localhost:8080"));
    assert_true(reaches("[::1]:8080", "[::1]:8080"));
    assert_true(reaches("127.0.0.1:8080", "[::ffff:127.0.0.1]:8080"));
    assert_false(reaches("127.0.0.1:8080", "127.0.0.1:8081"));
    assert_false(reaches("127.0.0.1:8080", "127.0.0.2:8080"));
    assert_false(reaches("[::1]:8080", "127.0.0.1:8080"));
    /* a wildcard listen: loopback and local addresses on its port */
    assert_true(reaches("0.0.0.0:8080", "127.0.0.1:8080"));
    assert_true(reaches("0.0.0.0:8080", "127.9.9.9:8080"));
    assert_false(reaches("0.0.0.0:8080", "127.0.0.1:8081"));
    assert_false(reaches("0.0.0.0:8080", "[::1]:8080")); /* IPv4 only */
    assert_true(reaches("[::]:8080", "[::1]:8080"));
    assert_true(reaches("[::]:8080", "127.0.0.1:8080")); /* dual-stack */
    assert_false(reaches("0.0.0.0:8080", "198.51.100.7:8080"));
    assert_false(reaches("[::]:8080", "[2001:db8::7]:8080"));
    /* a wildcard member: Linux connects it to the loopback address */
    assert_true(reaches("127.0.0.1:8080", "0.0.0.0:8080"));
    assert_true(reaches("0.0.0.0:8080", "0.0.0.0:8080"));
    assert_true(reaches("[::1]:8080", "[::]:8080"));
    /* unix sockets: the same path */
    assert_true(reaches("/tmp/chashd.sock", "/tmp/chashd.sock"));
    assert_false(reaches("/tmp/chashd.sock", "/tmp/other.sock"));
    assert_false(reaches("127.0.0.1:8080", "/tmp/chashd.sock"));
    if (local_address(AF_INET, local4, sizeof(local4))) {
        snprintf(m, sizeof(m), "%s:8080", local4);
        assert_true(reaches("0.0.0.0:8080", m));
        assert_true(reaches("[::]:8080", m));
        assert_false(reaches("127.0.0.1:8080", m));
        snprintf(l, sizeof(l), "%s:8080", local4);
        assert_true(reaches(l, m));
    } else {
        print_message("no non-loopback IPv4 address: not checked\n");
    }
    if (local_address(AF_INET6, local6, sizeof(local6))) {
        snprintf(m, sizeof(m), "%s:8080", local6);
        assert_true(reaches("[::]:8080", m));
        assert_false(reaches("0.0.0.0:8080", m));
    } else {
        print_message("no non-loopback IPv6 address: not checked\n");
    }
    {
        struct conf_addr unset = {0}, a;
        addr("127.0.0.1:8080", &a);
        assert_false(conf_addr_reaches(&unset, &a));
        assert_false(conf_addr_reaches(&a, &unset));
        conf_addr_deinit(&a);
    }
}

/*
 * The kernel is the judge: listen on <listen> (its port replaced by a
 * free one), connect to <member> on that port, and say whether the
 * connection arrived. -1 when <listen> cannot be bound here.
 */
static int
kernel_reaches(const char *listen_host, const char *member_host)
{
    struct sockaddr_storage ls, ms;
    socklen_t llen, mlen;
    int lfd, cfd, rc, yes = 1;
    uint16_t port;

    memset(&ls, 0, sizeof(ls));
    memset(&ms, 0, sizeof(ms));
    if (inet_pton(AF_INET, listen_host,
                  &((struct sockaddr_in *)&ls)->sin_addr) == 1) {
        ls.ss_family = AF_INET;
        llen = sizeof(struct sockaddr_in);
    } else {
        assert_int_equal(inet_pton(AF_INET6, listen_host,
                                   &((struct sockaddr_in6 *)&ls)->sin6_addr),
                         1);
        ls.ss_family = AF_INET6;
        llen = sizeof(struct sockaddr_in6);
    }
    lfd = socket(ls.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(lfd, (struct sockaddr *)&ls, llen) != 0 || listen(lfd, 8) != 0) {
        close(lfd);
        return -1;
    }
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&ls, &llen), 0);
    port = ls.ss_family == AF_INET ? ((struct sockaddr_in *)&ls)->sin_port
                                   : ((struct sockaddr_in6 *)&ls)->sin6_port;
    if (inet_pton(AF_INET, member_host,
                  &((struct sockaddr_in *)&ms)->sin_addr) == 1) {
        ms.ss_family = AF_INET;
        ((struct sockaddr_in *)&ms)->sin_port = port;
        mlen = sizeof(struct sockaddr_in);
    } else {
        assert_int_equal(inet_pton(AF_INET6, member_host,
                                   &((struct sockaddr_in6 *)&ms)->sin6_addr),
                         1);
        ms.ss_family = AF_INET6;
        ((struct sockaddr_in6 *)&ms)->sin6_port = port;
        mlen = sizeof(struct sockaddr_in6);
    }
    cfd = socket(ms.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(cfd >= 0);
    /* loopback and local addresses answer at once: refused or accepted */
    rc = connect(cfd, (struct sockaddr *)&ms, mlen) == 0;
    close(cfd);
    close(lfd);
    return rc;
}

/* conf_addr_reaches agrees with the kernel on every pair of these,
 * whatever the host's interfaces. */
static void
test_addr_reaches_agrees_with_kernel(void **state)
{
    char local4[64] = "", local6[80] = "";
    const char *hosts[12];
    size_t n = 0, compared = 0, connected = 0;
    char lt[128], mt[128];

    (void)state;
    hosts[n++] = "127.0.0.1";
    hosts[n++] = "127.0.0.2";
    hosts[n++] = "0.0.0.0";
    hosts[n++] = "::1";
    hosts[n++] = "::";
    hosts[n++] = "::ffff:127.0.0.1";
    if (local_address(AF_INET, local4, sizeof(local4)))
        hosts[n++] = local4;
    if (local_address(AF_INET6, local6, sizeof(local6))) {
        /* strip the brackets for inet_pton */
        memmove(local6, local6 + 1, strlen(local6));
        local6[strlen(local6) - 1] = '\0';
        hosts[n++] = local6;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            struct conf_addr l, m;
            int k = kernel_reaches(hosts[i], hosts[j]);
            bool ours;

            if (k < 0)
                continue;
            compared++;
            connected += k == 1;
            /* the same port on both sides is all that matters here */
            snprintf(lt, sizeof(lt),
                     strchr(hosts[i], ':') ? "[%s]:8080" : "%s:8080", hosts[i]);
            snprintf(mt, sizeof(mt),
                     strchr(hosts[j], ':') ? "[%s]:8080" : "%s:8080", hosts[j]);
            addr(lt, &l);
            addr(mt, &m);
            ours = conf_addr_reaches(&l, &m);
            conf_addr_deinit(&l);
            conf_addr_deinit(&m);
            if (ours != (k == 1))
                fail_msg("listen %s, member %s: kernel %s, "
                         "conf_addr_reaches %s",
                         lt, mt, k ? "connects" : "refuses",
                         ours ? "true" : "false");
        }
    }
    /* every listen host binds on Linux with loopback, and both answers
     * occur (6 x 6 pairs at least) */
    assert_true(compared >= 36);
    assert_true(connected > 0 && connected < compared);
    print_message("%zu pairs, %zu connected\n", compared, connected);
}

static void
test_self_address(void **state)
{
    static const char yaml[] = "global:\n  admin: 127.0.0.1:8404\n"
                               "web:\n  listen: 0.0.0.0:8080\n  mode: tcp\n"
                               "  servers: [127.0.0.1:9001]\n"
                               "sock:\n  listen: /tmp/chash-self.sock\n"
                               "  servers: [127.0.0.1:9002]\n";
    struct conf *c = load(yaml);
    struct conf_addr a;
    char buf[256];

    (void)state;
    assert_non_null(c);
    addr("127.0.0.1:8080", &a);
    assert_ptr_equal(conf_self_address(c, &a, buf, sizeof(buf)), buf);
    assert_string_equal(buf, "the listen address of pool 'web' (0.0.0.0:8080)");
    conf_addr_deinit(&a);
    addr("localhost:8404", &a);
    assert_non_null(conf_self_address(c, &a, buf, sizeof(buf)));
    assert_string_equal(buf, "the admin address (127.0.0.1:8404)");
    conf_addr_deinit(&a);
    addr("/tmp/chash-self.sock", &a);
    assert_non_null(conf_self_address(c, &a, buf, sizeof(buf)));
    assert_string_equal(
        buf, "the listen address of pool 'sock' (/tmp/chash-self.sock)");
    conf_addr_deinit(&a);
    addr("127.0.0.1:9001", &a);
    assert_null(conf_self_address(c, &a, buf, sizeof(buf)));
    conf_addr_deinit(&a);
    addr("[::1]:8080", &a); /* 0.0.0.0 takes no IPv6 */
    assert_null(conf_self_address(c, &a, buf, sizeof(buf)));
    conf_addr_deinit(&a);
    conf_destroy(c);
}

static void
test_err_self_address(void **state)
{
    (void)state;
    expect_error("web:\n  listen: 127.0.0.1:8080\n  mode: tcp\n  servers:\n"
                 "    - 127.0.0.1:9001:1 web-1\n"
                 "    - 127.0.0.1:8080:1 web-9\n",
                 6,
                 "server 'web-9' (127.0.0.1:8080) is chashd's own address, "
                 "the listen address of pool 'web' (127.0.0.1:8080): chashd "
                 "would connect to itself");
    /* a wildcard listen is reached through loopback */
    expect_error("web:\n  listen: 0.0.0.0:8080\n  mode: tcp\n  servers:\n"
                 "    - 127.0.0.2:8080:1 web-2\n",
                 5, "server 'web-2' (127.0.0.2:8080) is chashd's own address");
    expect_error("web:\n  listen: '[::]:8080'\n  mode: tcp\n  servers:\n"
                 "    - localhost:8080:1 web-2\n",
                 5, "the listen address of pool 'web' ([::]:8080)");
    /* another pool's listen, and the default admin address */
    expect_error("a:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
                 "  servers: [127.0.0.1:9]\n"
                 "b:\n  listen: 127.0.0.1:7002\n  mode: tcp\n  servers:\n"
                 "    - 127.0.0.1:9\n    - 127.0.0.1:7001 loop\n",
                 10,
                 "server 'loop' (127.0.0.1:7001) is chashd's own address, "
                 "the listen address of pool 'a'");
    expect_error("a:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
                 "  servers: [127.0.0.1:8404]\n",
                 4,
                 "is chashd's own address, the admin address "
                 "(127.0.0.1:8404)");
    expect_error("a:\n  listen: /tmp/chash-a.sock\n  servers:\n"
                 "    - /tmp/chash-a.sock:1 me\n",
                 4, "server 'me' (/tmp/chash-a.sock) is chashd's own");
}

/* ---- ring size ---- */

/* conf_ring_points is what chash_ring_create allocates: checked against
 * the points of built rings over many memberships (exactly, but for
 * nginx's dropped duplicates). */
static void
test_ring_points_match_built_rings(void **state)
{
    static const int algos[] = {CHASH_ALGO_RING, CHASH_ALGO_KETAMA,
                                CHASH_ALGO_NGINX, CHASH_ALGO_MAGLEV};
    struct chash_member m[64];
    char names[64][16];
    uint32_t seed = 12345;

    (void)state;
    for (size_t i = 0; i < 64; i++) {
        snprintf(names[i], sizeof(names[i]), "10.0.0.%zu:11211", i);
        m[i].name = names[i];
        m[i].ramp = 1.0;
    }
    for (int round = 0; round < 200; round++) {
        size_t n;
        bool live = false;

        seed = seed * 1103515245u + 12345u;
        n = 1 + (seed >> 16) % 64;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            m[i].weight = (seed >> 16) % 7; /* 0..6, 0 owns nothing */
            if (round % 5 == 0 && i == 0)
                m[i].weight = 977;
            live |= m[i].weight > 0;
        }
        if (!live)
            m[0].weight = 1;
        for (size_t a = 0; a < ARRAY_SIZE(algos); a++) {
            struct chash_config cfg = {0};
            struct chash_ring *ring = NULL;
            uint64_t built, got;

            cfg.algo = algos[a];
            cfg.points_per_weight = 1 + (uint32_t)round * 5;
            cfg.table_size = round % 2 ? 65537 : 257;
            assert_int_equal(chash_ring_create(&cfg, m, n, &ring), 0);
            built = chash_ring_points(ring);
            got = conf_ring_points(algos[a], &cfg, m, n);
            /* nginx drops points that fall on one another, as nginx
             * does (about P^2 / 2^33 of them): the count is a bound */
            if (algos[a] == CHASH_ALGO_NGINX
                    ? got < built || got - built > got / 1000 + 8
                    : got != built)
                fail_msg("%s, %zu members, round %d: %llu points, "
                         "conf_ring_points says %llu",
                         chash_algo_name(algos[a]), n, round,
                         (unsigned long long)built, (unsigned long long)got);
            chash_ring_destroy(ring);
        }
    }
}

static void
test_ring_points_by_algorithm(void **state)
{
    struct chash_member m[3] = {{"a", 3, 0.5}, {"b", 10000, 0}, {"c", 0, 1}};
    struct chash_config cfg = {0};

    (void)state;
    /* ring: weight x points_per_weight, a member capped at the library's
     * per-member limit; ramps do not count */
    cfg.algo = CHASH_ALGO_RING;
    assert_int_equal(conf_ring_points(CHASH_ALGO_RING, &cfg, m, 3),
                     3 * 160 + CHASH_MAX_MEMBER_POINTS);
    cfg.points_per_weight = 10;
    assert_int_equal(conf_ring_points(CHASH_ALGO_RING, &cfg, m, 3),
                     30 + 100000);
    /* nginx: 160 per unit of weight, whatever points_per_weight says */
    cfg.algo = CHASH_ALGO_NGINX;
    assert_int_equal(conf_ring_points(CHASH_ALGO_NGINX, &cfg, m, 3),
                     3 * 160 + CHASH_MAX_MEMBER_POINTS);
    /* maglev: the table; rendezvous and jump: the members */
    cfg.algo = CHASH_ALGO_MAGLEV;
    assert_int_equal(conf_ring_points(CHASH_ALGO_MAGLEV, &cfg, m, 3), 65537);
    cfg.table_size = 5000011;
    assert_int_equal(conf_ring_points(CHASH_ALGO_MAGLEV, &cfg, m, 3), 5000011);
    cfg.algo = CHASH_ALGO_RENDEZVOUS;
    assert_int_equal(conf_ring_points(CHASH_ALGO_RENDEZVOUS, &cfg, m, 3), 3);
    cfg.algo = CHASH_ALGO_JUMP;
    assert_int_equal(conf_ring_points(CHASH_ALGO_JUMP, &cfg, m, 3), 3);
    /* twemproxy's modula counts the ketama ring chashd builds for it: two
     * live servers of 160 points each (weights 3 and 10000: 0 and 316) */
    cfg.algo = CHASH_ALGO_KETAMA;
    assert_int_equal(conf_ring_points(CONF_DIST_MODULA, &cfg, m, 3),
                     conf_ring_points(CHASH_ALGO_KETAMA, &cfg, m, 3));
    assert_int_equal(conf_ring_points(CHASH_ALGO_KETAMA, &cfg, m, 3), 316);
}

static void
test_max_points(void **state)
{
    static const char heavy[] = "web:\n"
                                "  listen: 127.0.0.1:7001\n"
                                "  mode: tcp\n"
                                "%s"
                                "  servers:\n"
                                "    - 127.0.0.1:9001:6000 web-1\n"
                                "    - 127.0.0.1:9002:6000 web-2\n"
                                "    - 127.0.0.1:9003:6000 web-3\n"
                                "    - 127.0.0.1:9004:1 web-4\n";
    char yaml[1024];
    struct conf *c;

    (void)state;
    /* 3 x 6000 x 160 + 160: each member under the library's limit */
    snprintf(yaml, sizeof(yaml), heavy, "");
    expect_error(yaml, 4,
                 "pool 'web': its servers need 2880160 ring points, over "
                 "max_points 2000000 (lower the weights or points_per_weight, "
                 "or raise max_points)");
    snprintf(yaml, sizeof(yaml), heavy, "  points_per_weight: 100\n");
    c = load(yaml);
    assert_non_null(c);
    assert_int_equal(c->pools[0].max_points, 2000000);
    conf_destroy(c);
    snprintf(yaml, sizeof(yaml), heavy, "  max_points: 3000000\n");
    c = load(yaml);
    assert_non_null(c);
    assert_int_equal(c->pools[0].max_points, 3000000);
    conf_destroy(c);
    snprintf(yaml, sizeof(yaml), heavy, "  max_points: 100\n");
    expect_error(yaml, 5,
                 "its servers need 2880160 ring points, over "
                 "max_points 100");
    /* maglev: the table, at the line of table_size */
    expect_error("p:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
                 "  distribution: maglev\n  table_size: 5000011\n"
                 "  servers: [127.0.0.1:9]\n",
                 5,
                 "pool 'p': its table_size needs 5000011 table entries, over "
                 "max_points 2000000 (lower table_size, or raise "
                 "max_points)");
    expect_error("p:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
                 "  distribution: maglev\n  max_points: 1000\n"
                 "  servers: [127.0.0.1:9]\n",
                 5, "needs 65537 table entries, over max_points 1000");
    /* rendezvous: its members */
    expect_error("p:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
                 "  distribution: rendezvous\n  max_points: 2\n"
                 "  servers: [127.0.0.1:9, 127.0.0.1:10, 127.0.0.1:11]\n",
                 6,
                 "pool 'p': its 3 servers are over max_points 2 (raise "
                 "max_points)");
    expect_error("p:\n  listen: 127.0.0.1:7001\n  max_points: 0\n", 3,
                 "'max_points' is out of range: 0 is not between 1 and "
                 "4294967295");
    /* twemproxy pools: ketama holds about 160 a server, whatever the
     * weights (nutcracker.yml's omega weighs 100000) */
    c = load(nutcracker_yaml);
    assert_non_null(c);
    conf_destroy(c);
}

/* So heavy a pool that building its ring would take seconds and about
 * 2 GB (128 members x 6000 x 160 = 122880000 points): refused from the
 * arithmetic, before the ring is built. */
static void
test_max_points_refused_before_building(void **state)
{
    char *yaml = malloc(16384);
    size_t used;

    (void)state;
    assert_non_null(yaml);
    used = (size_t)snprintf(yaml, 16384,
                            "big:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
                            "  servers:\n");
    for (int i = 0; i < 128; i++)
        used +=
            (size_t)snprintf(yaml + used, 16384 - used,
                             "    - 127.0.0.1:%d:6000 m-%d\n", 10000 + i, i);
    expect_error(yaml, 4,
                 "pool 'big': its servers need 122880000 ring points, over "
                 "max_points 2000000");
    free(yaml);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_yaml),
        cmocka_unit_test(test_design_example),
        cmocka_unit_test(test_nutcracker),
        cmocka_unit_test(test_defaults_per_mode),
        cmocka_unit_test(test_our_keys),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_server_forms),
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test(test_servers_in_config),
        cmocka_unit_test(test_unix_listen),
        cmocka_unit_test(test_admin_forms),
        cmocka_unit_test(test_reload_helpers),
        cmocka_unit_test(test_enum_names),
        cmocka_unit_test(test_example_files),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_nutcracker_ketama_mapping),
        cmocka_unit_test(test_err_unknown_key),
        cmocka_unit_test(test_etcd),
        cmocka_unit_test(test_err_wrong_type),
        cmocka_unit_test(test_err_bad_address),
        cmocka_unit_test(test_err_bad_number),
        cmocka_unit_test(test_err_bad_duration),
        cmocka_unit_test(test_err_out_of_range),
        cmocka_unit_test(test_err_unknown_name),
        cmocka_unit_test(test_http_keys),
        cmocka_unit_test(test_err_duplicate_member_name),
        cmocka_unit_test(test_err_duplicate_member_address),
        cmocka_unit_test(test_err_listen_twice),
        cmocka_unit_test(test_err_no_servers),
        cmocka_unit_test(test_err_no_listen),
        cmocka_unit_test(test_err_yaml_syntax),
        cmocka_unit_test(test_err_admin_token),
        cmocka_unit_test(test_err_duplicate_key),
        cmocka_unit_test(test_err_pool_name),
        cmocka_unit_test(test_err_hash_key_in_store_mode),
        cmocka_unit_test(test_err_weights),
        cmocka_unit_test(test_err_ring_limits),
        cmocka_unit_test(test_err_bad_values),
        cmocka_unit_test(test_err_documents),
        cmocka_unit_test(test_pool_copy),
        cmocka_unit_test(test_pool_copy_out_of_memory),
        cmocka_unit_test(test_mode_source),
        cmocka_unit_test(test_err_mode_and_redis_disagree),
        cmocka_unit_test(test_warn_unitless_durations),
        cmocka_unit_test(test_warn_keys_without_effect),
        cmocka_unit_test(test_no_warnings_in_shipped_configs),
        cmocka_unit_test(test_demo_file_is_the_embedded_config),
        cmocka_unit_test(test_addr_reaches),
        cmocka_unit_test(test_addr_reaches_agrees_with_kernel),
        cmocka_unit_test(test_self_address),
        cmocka_unit_test(test_err_self_address),
        cmocka_unit_test(test_ring_points_match_built_rings),
        cmocka_unit_test(test_ring_points_by_algorithm),
        cmocka_unit_test(test_max_points),
        cmocka_unit_test(test_max_points_refused_before_building),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* conf.c -- the config loader: YAML (a twemproxy nutcracker.yml included)
 * into pools of servers, table-driven so key names and struct fields cannot
 * drift, with every error reported once as "file:line: what is wrong".
 * Here: the entry points, the document's top level, the messages.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#define MAX_POOL_NAME 64
#define MSG_MAX 1024

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

/* ------------------------------------------------------------------ */
/* Messages                                                           */

int
conf_node_line(const yaml_node_t *node)
{
    return node != NULL ? (int)node->start_mark.line + 1 : 1;
}

/* Write "file:<line>: message" into the caller's buffer (0 reads as 1);
 * returns -1 so parsers can `return conf_fail(...)`. */
static int __attribute__((format(printf, 3, 0)))
vfail_at(struct conf_loading *ld, int line, const char *fmt, va_list ap)
{
    char msg[MSG_MAX];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (ld->err != NULL && ld->errlen > 0)
        snprintf(ld->err, ld->errlen, "%s:%d: %s", ld->file,
                 line > 0 ? line : 1, msg);
    return -1;
}

/* The message for <node> (line 1 when NULL). */
int __attribute__((format(printf, 3, 4)))
conf_fail(struct conf_loading *ld, const yaml_node_t *node, const char *fmt,
          ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vfail_at(ld, conf_node_line(node), fmt, ap);
    va_end(ap);
    return rc;
}

/* The same for a line number known without a node. */
int __attribute__((format(printf, 3, 4)))
conf_fail_at(struct conf_loading *ld, int line, const char *fmt, ...)
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
int __attribute__((format(printf, 3, 4)))
conf_warn_at(struct conf_loading *ld, int line, const char *fmt, ...)
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
        return conf_fail_at(ld, line, "out of memory");
    w = realloc(conf->warnings, (n + 1) * sizeof(*w));
    if (w != NULL)
        conf->warnings = w;
    wl = w != NULL ? realloc(ld->warning_lines, (n + 1) * sizeof(*wl)) : NULL;
    if (wl == NULL) {
        free(text);
        return conf_fail_at(ld, line, "out of memory");
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

const char *
conf_node_kind(const yaml_node_t *node)
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

void
conf_join_names(char *buf, size_t len, const char *const *names)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; names[i] != NULL && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 names[i]);
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
yaml_error(struct conf_loading *ld, yaml_parser_t *parser, const char *yaml,
           size_t len)
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
conf_pool_name_ok(const char *name)
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
load_document(struct conf_loading *ld, struct conf *conf)
{
    yaml_node_t *root = yaml_document_get_root_node(ld->doc);
    int glines[GK_COUNT] = {0}, global_line = 0;
    yaml_node_pair_t *pair;
    size_t npairs;

    if (root == NULL)
        return conf_fail(ld, NULL,
                         "the configuration is empty: it needs at "
                         "least one pool");
    if (root->type != YAML_MAPPING_NODE)
        return conf_fail(ld, root,
                         "the top level must be a map of pools (and "
                         "'global'), not %s",
                         conf_node_kind(root));
    npairs =
        (size_t)(root->data.mapping.pairs.top - root->data.mapping.pairs.start);
    conf->pools = calloc(npairs, sizeof(*conf->pools));
    if (conf->pools == NULL)
        return conf_fail(ld, root, "out of memory");
    for (pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, pair->value);
        const char *name = (const char *)k->data.scalar.value;

        if (k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
            strlen(name) != k->data.scalar.length)
            return conf_fail(ld, k, "a pool name must be a plain name");
        if (strcmp(name, "global") == 0) {
            if (global_line != 0)
                return conf_fail(ld, k, "duplicate 'global' (first at line %d)",
                                 global_line);
            global_line = conf_node_line(k);
            if (conf_parse_global(ld, v, conf, glines) != 0)
                return -1;
            continue;
        }
        if (!conf_pool_name_ok(name))
            return conf_fail(
                ld, k,
                "bad pool name '%s': use up to %d letters, "
                "digits, '_', '-' or '.' (it appears in admin URLs "
                "and metric labels)",
                name, MAX_POOL_NAME);
        for (size_t i = 0; i < conf->npools; i++)
            if (strcmp(conf->pools[i].name, name) == 0)
                return conf_fail(ld, k,
                                 "duplicate pool '%s' (first at line %d)", name,
                                 conf->pools[i].line);
        /* counted before parsing, so a half-parsed pool is freed too */
        conf->npools++;
        if (conf_parse_pool(ld, k, v, &conf->pools[conf->npools - 1]) != 0)
            return -1;
    }
    if (conf->npools == 0)
        return conf_fail(ld, root,
                         "no pools: add at least one pool besides "
                         "'global'");
    if (conf_check_members_from(ld, conf) != 0)
        return -1;
    if (glines[GK_ADMIN] == 0) {
        char msg[256];
        if (conf_parse_addr("127.0.0.1:8404", &conf->admin, msg, sizeof(msg)) !=
            0)
            return conf_fail(ld, root, "%s", msg);
    }
    return conf_check_listeners(ld, conf, glines);
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
nesting_check(struct conf_loading *ld, const char *yaml, size_t len)
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
            rc = conf_fail_at(
                ld, (int)ev.start_mark.line + 1,
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
    struct conf_loading ld = {
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
            rc = conf_fail(&ld, root2,
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

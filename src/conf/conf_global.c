/* conf_global.c -- `global:`: the admin address and token, workers, log
 * level, pid and state files, and the `etcd` block (endpoints, prefix,
 * instance, TLS), with the pools that take their members from etcd.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"
#include "conf/etcd_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

/* `endpoints: [http://127.0.0.1:2379, ...]` (or one scalar). */
static int
set_endpoints(struct conf_loading *ld, const struct conf_key *key,
              yaml_node_t *node, void *base)
{
    struct conf_etcd *e = base;
    yaml_node_item_t *item;
    size_t n = 1;

    if (node->type == YAML_SEQUENCE_NODE)
        n = (size_t)(node->data.sequence.items.top -
                     node->data.sequence.items.start);
    else if (node->type != YAML_SCALAR_NODE)
        return conf_fail(ld, node, "'%s' must be a list of URLs, not %s",
                         key->name, conf_node_kind(node));
    if (n == 0 || n > CONF_ETCD_ENDPOINTS_MAX)
        return conf_fail(ld, node, "'%s' takes 1 to %d URLs, not %zu",
                         key->name, CONF_ETCD_ENDPOINTS_MAX, n);
    for (size_t i = 0; i < e->nendpoints; i++)
        free(e->endpoints[i]);
    e->nendpoints = 0;
    item = node->type == YAML_SEQUENCE_NODE ? node->data.sequence.items.start
                                            : NULL;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *c = item ? yaml_document_get_node(ld->doc, item[i]) : node;
        const char *v = conf_scalar(ld, key, c);
        const char *hp;

        if (v == NULL)
            return -1;
        if (strncmp(v, "http://", 7) == 0)
            hp = v + 7;
        else if (strncmp(v, "https://", 8) == 0)
            hp = v + 8;
        else
            return conf_fail(ld, c,
                             "etcd endpoint '%s' must be a URL like "
                             "http://127.0.0.1:2379 (http:// or https://)",
                             v);
        if (*hp == '\0' || strcspn(hp, "/?# \t") != strlen(hp) ||
            strchr(hp, ':') == NULL)
            return conf_fail(
                ld, c,
                "etcd endpoint '%s' must be scheme://host:port with "
                "no path",
                v);
        e->endpoints[i] = strdup(v);
        if (e->endpoints[i] == NULL)
            return conf_fail(ld, c, "out of memory");
        e->nendpoints = i + 1;
    }
    return 0;
}

static const struct conf_key etcd_keys[] = {
    {"endpoints", set_endpoints, 0, 0, 0, NULL, 0, false},
    {"prefix", conf_set_string, offsetof(struct conf_etcd, prefix), 0, 0, NULL,
     0, false},
    {"instance", conf_set_string, offsetof(struct conf_etcd, instance), 0, 0,
     NULL, 0, false},
    {"lease_ttl", conf_set_ms, offsetof(struct conf_etcd, lease_ttl_ms), 2000,
     3600000, NULL, 0, false},
    {"timeout", conf_set_ms, offsetof(struct conf_etcd, timeout_ms), 100, 60000,
     NULL, 0, false},
    {"username", conf_set_string, offsetof(struct conf_etcd, username), 0, 0,
     NULL, 0, false},
    {"password", conf_set_string, offsetof(struct conf_etcd, password), 0, 0,
     NULL, 0, false},
    {"ca_file", conf_set_string, offsetof(struct conf_etcd, ca_file), 0, 0,
     NULL, 0, false},
    {"cert_file", conf_set_string, offsetof(struct conf_etcd, cert_file), 0, 0,
     NULL, 0, false},
    {"key_file", conf_set_string, offsetof(struct conf_etcd, key_file), 0, 0,
     NULL, 0, false},
};

/* `global.etcd: { endpoints: [...], prefix: /chash, instance: lb-1, ... }`. */
static int
set_etcd(struct conf_loading *ld, const struct conf_key *key, yaml_node_t *node,
         void *base)
{
    struct conf_etcd *e = FIELD(base, key, struct conf_etcd);
    int lines[ARRAY_SIZE(etcd_keys)] = {0};
    char host[256];
    size_t n;

    if (node->type != YAML_MAPPING_NODE)
        return conf_fail(ld, node,
                         "'etcd' must be a map like { endpoints: "
                         "[http://127.0.0.1:2379], prefix: /chash }, not %s",
                         conf_node_kind(node));
    e->lease_ttl_ms = 10000;
    e->timeout_ms = 2000;
    if (conf_parse_map(ld, node, etcd_keys, ARRAY_SIZE(etcd_keys), e, "etcd",
                       lines) != 0)
        return -1;
    if (e->nendpoints == 0)
        return conf_fail(ld, node,
                         "'etcd' needs 'endpoints' (a list like "
                         "[http://127.0.0.1:2379])");
    if (e->prefix == NULL && (e->prefix = strdup("/chash")) == NULL)
        return conf_fail(ld, node, "out of memory");
    n = strlen(e->prefix);
    while (n > 1 && e->prefix[n - 1] == '/')
        e->prefix[--n] = '\0';
    if (e->prefix[0] != '/' || n < 2 || n > 200 ||
        strcspn(e->prefix, " \t\r\n") != n)
        return conf_fail_at(
            ld, lines[1] ? lines[1] : conf_node_line(node),
            "etcd 'prefix' must be a path like /chash, not '%s'", e->prefix);
    if (e->instance == NULL) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "chashd");
        host[sizeof(host) - 1] = '\0';
        host[strcspn(host, "./")] = '\0';
        if ((e->instance = strdup(host)) == NULL)
            return conf_fail(ld, node, "out of memory");
    }
    if (!etcd_name_ok(e->instance))
        return conf_fail_at(
            ld, lines[2] ? lines[2] : conf_node_line(node),
            "etcd 'instance' '%s' must be 1 to 63 letters, digits, "
            "'.', '_', ':' or '-'",
            e->instance);
    if ((e->username == NULL) != (e->password == NULL))
        return conf_fail(ld, node,
                         "etcd 'username' and 'password' go together");
    if ((e->cert_file == NULL) != (e->key_file == NULL))
        return conf_fail(ld, node,
                         "etcd 'cert_file' and 'key_file' go together");
    e->enabled = true;
    return 0;
}

#define GLOBAL(f) offsetof(struct conf, f)

static const struct conf_key global_keys[] = {
    [GK_ADMIN] = {"admin", conf_set_admin, GLOBAL(admin), 0, 0, NULL, 0, false},
    [GK_ADMIN_TOKEN] = {"admin_token", conf_set_string, GLOBAL(admin_token), 0,
                        0, NULL, 0, false},
    [GK_WORKERS] = {"workers", conf_set_u32, GLOBAL(workers), 1, 1024, NULL, 0,
                    false},
    [GK_LOG_LEVEL] = {"log_level", conf_set_enum, GLOBAL(log_level), 0, 0,
                      conf_log_level_names, 0, false},
    [GK_PID_FILE] = {"pid_file", conf_set_string, GLOBAL(pid_file), 0, 0, NULL,
                     0, false},
    [GK_STATE_FILE] = {"state_file", conf_set_string, GLOBAL(state_file), 0, 0,
                       NULL, 0, false},
    [GK_ETCD] = {"etcd", set_etcd, GLOBAL(etcd), 0, 0, NULL, 0, false},
};
_Static_assert(ARRAY_SIZE(global_keys) == GK_COUNT, "one entry per key");

int
conf_parse_global(struct conf_loading *ld, yaml_node_t *node, struct conf *conf,
                  int *lines)
{
    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return 0; /* `global:` alone: all defaults */
    return conf_parse_map(ld, node, global_keys, GK_COUNT, conf, "global",
                          lines);
}

/* Pools with `members_from: etcd` need the global.etcd block, and their
 * pool and member names become parts of etcd keys. */
int
conf_check_members_from(struct conf_loading *ld, const struct conf *conf)
{
    for (size_t i = 0; i < conf->npools; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        if (cp->members_from != CONF_MEMBERS_ETCD)
            continue;
        if (!conf->etcd.enabled)
            return conf_fail_at(
                ld, cp->line,
                "pool '%s': 'members_from: etcd' needs a "
                "global.etcd block (endpoints, prefix, instance)",
                cp->name);
        if (!etcd_name_ok(cp->name))
            return conf_fail_at(
                ld, cp->line,
                "pool '%s': 'members_from: etcd' takes pool names "
                "of letters, digits, '.', '_', ':' or '-'",
                cp->name);
        for (size_t k = 0; k < cp->nservers; k++)
            if (!etcd_name_ok(cp->servers[k].name))
                return conf_fail_at(
                    ld, cp->line,
                    "pool '%s': member name '%s' cannot be an "
                    "etcd key part: use 1 to 63 letters, digits, "
                    "'.', '_', ':' or '-'",
                    cp->name, cp->servers[k].name);
    }
    return 0;
}

void
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

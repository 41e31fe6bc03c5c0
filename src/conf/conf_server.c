/* conf_server.c -- a pool's servers: twemproxy's "host:port:weight name"
 * (and the shorter forms, and a zone), the map form { address, weight,
 * name, zone }, and the `servers` list of a pool.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"
#include "conf/etcd_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

/* twemproxy leaves the port out of a server's ketama name when it is the
 * memcached port, for libmemcached compatibility (nc_conf.h). */
#define KETAMA_PORT 11211
/* Longest server name: twemproxy hashes "<name>-<i>" into a 273-byte
 * buffer, so longer names would place points differently there. */
#define MAX_NAME 255

/* The server map form { address: .., weight: .., name: .. }. */
struct server_spec {
    char *address;
    uint32_t weight;
    char *name;
    char *zone;
};

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

    if (conf_parse_u64(s, &v) != 0 || v > UINT32_MAX) {
        snprintf(err, errlen,
                 "bad server '%s': weight '%s' is not a whole "
                 "number from 0 to %u",
                 whole, s, UINT32_MAX);
        return -1;
    }
    *weight = (uint32_t)v;
    return 0;
}

/* Cut the words after the address off <addr>, a copy of the server text
 * <s> (cut in place): "name", or "name zone". *<name> and *<zone> are
 * left alone when not given. 0, or -1 with a message in <err>. */
static int
split_words(char *addr, char **name, char **zone, const char *s, char *err,
            size_t errlen)
{
    char *p = addr + strcspn(addr, " \t"), *n, *z;

    if (*p == '\0')
        return 0;
    *p++ = '\0';
    n = p + strspn(p, " \t");
    for (p = n + strlen(n); p > n && (p[-1] == ' ' || p[-1] == '\t');)
        *--p = '\0';
    if (*n == '\0')
        return 0; /* blanks after the address: no name */
    *name = n;
    if (!has_space(n))
        return 0;
    /* "name zone": a second word is the server's zone. Split at the bytes
     * has_space() found: a name with only a CR or LF in it (a state
     * file's) went past its NUL here. */
    z = n + strcspn(n, " \t\r\n");
    *z++ = '\0';
    z += strspn(z, " \t\r\n");
    if (has_space(z) || !etcd_name_ok(z)) {
        snprintf(err, errlen,
                 "bad server '%s': expected "
                 "host:port:weight [name [zone]], one word each "
                 "(a zone: 1 to 63 letters, digits, '.', '_', ':' "
                 "or '-')",
                 s);
        return -1;
    }
    *zone = z;
    return 0;
}

/* Cut the weight off <addr>: "host:port:weight", "[v6]:port:weight",
 * "/unix/path:weight". *<weight_text> is left alone when there is none.
 * 0, or -1 with a message in <err> naming the server text <s>. */
static int
split_weight(char *addr, char **weight_text, const char *s, char *err,
             size_t errlen)
{
    const char *host_end = addr;
    size_t colons = 0;
    char *c;

    if (addr[0] == '/') {
        /* "/path:weight": a trailing all-digit part is the weight. */
        uint64_t v;

        c = strrchr(addr, ':');
        if (c != NULL && conf_parse_u64(c + 1, &v) == 0) {
            *c = '\0';
            *weight_text = c + 1;
        }
        return 0;
    }
    if (addr[0] == '[') {
        host_end = strchr(addr, ']');
        if (host_end == NULL) {
            snprintf(err, errlen,
                     "bad server '%s': missing ']' after "
                     "the IPv6 address",
                     s);
            return -1;
        }
    }
    for (const char *h = host_end; *h != '\0'; h++)
        colons += *h == ':';
    if (colons == 2) {
        c = strrchr(addr, ':');
        *c = '\0';
        *weight_text = c + 1;
    } else if (colons > 2) {
        snprintf(err, errlen,
                 "bad server '%s': expected host:port:weight"
                 " [name] (write IPv6 addresses as [::1]:port:weight)",
                 s);
        return -1;
    }
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
    char *buf, *addr, *name = NULL, *zone = NULL, *weight_text = NULL, msg[400];
    uint32_t weight = 1;
    int rc = -1;

    memset(server, 0, sizeof(*server));
    buf = strdup(s != NULL ? s : "");
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    addr = buf + strspn(buf, " \t");
    if (split_words(addr, &name, &zone, s, err, errlen) != 0)
        goto out;
    if (*addr == '\0') {
        snprintf(err, errlen,
                 "bad server '%s': expected host:port:weight "
                 "[name]",
                 s);
        goto out;
    }
    if (split_weight(addr, &weight_text, s, err, errlen) != 0)
        goto out;
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

static const struct conf_key server_keys[] = {
    {"address", conf_set_string, offsetof(struct server_spec, address), 0, 0,
     NULL, 0, false},
    {"weight", conf_set_u32, offsetof(struct server_spec, weight), 0,
     UINT32_MAX, NULL, 0, false},
    {"name", conf_set_string, offsetof(struct server_spec, name), 0, 0, NULL, 0,
     false},
    {"zone", conf_set_string, offsetof(struct server_spec, zone), 0, 0, NULL, 0,
     false},
};

static int
server_from_map(struct conf_loading *ld, yaml_node_t *node,
                struct conf_server *server)
{
    struct server_spec spec = {NULL, 1, NULL, NULL};
    int lines[ARRAY_SIZE(server_keys)] = {0};
    char msg[512];
    int rc = -1;

    if (conf_parse_map(ld, node, server_keys, ARRAY_SIZE(server_keys), &spec,
                       "a server", lines) != 0)
        goto out;
    if (spec.address == NULL) {
        conf_fail(ld, node,
                  "server has no 'address' (valid keys: address, "
                  "weight, name, zone)");
        goto out;
    }
    if (server_init(server, spec.address, spec.weight, spec.name, msg,
                    sizeof(msg)) != 0) {
        conf_fail(ld, node, "bad server: %s", msg);
        goto out;
    }
    if (spec.zone != NULL) {
        if (!etcd_name_ok(spec.zone)) {
            conf_fail(ld, node,
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

int
conf_set_servers(struct conf_loading *ld, const struct conf_key *key,
                 yaml_node_t *node, void *base)
{
    struct conf_pool *pool = base;
    yaml_node_item_t *item;
    size_t n;

    (void)key;
    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return 0; /* `servers:` with nothing: "has no servers" later */
    if (node->type != YAML_SEQUENCE_NODE)
        return conf_fail(ld, node,
                         "'servers' must be a list of \"host:port:weight"
                         " [name]\", not %s",
                         conf_node_kind(node));
    n = (size_t)(node->data.sequence.items.top -
                 node->data.sequence.items.start);
    pool->servers = calloc(n ? n : 1, sizeof(*pool->servers));
    if (pool->servers == NULL)
        return conf_fail(ld, node, "out of memory");
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
                return conf_fail(ld, s, "server contains a NUL byte");
            if (conf_parse_server(v, server, msg, sizeof(msg)) != 0)
                return conf_fail(ld, s, "%s", msg);
        } else {
            return conf_fail(
                ld, s,
                "a server must be \"host:port:weight [name]\""
                " or { address: .., weight: .., name: .. }, not %s",
                conf_node_kind(s));
        }
        server->line = conf_node_line(s);
        pool->nservers++;
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

/* conf_addr.c -- the config's addresses: "host:port", "[v6]:port" and
 * unix paths parsed and compared as sockets; whether an address reaches
 * chashd itself; the `listen` and `admin` keys and the listeners' checks.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "conf/conf.h"
#include "conf/conf_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include <yaml.h>

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

    if (conf_parse_u64(s, &v) != 0 || v < 1 || v > 65535)
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
/* Keys and checks                                                    */

/* `listen: host:port`, `/path/sock`, and twemproxy's unix socket
 * permissions: "/path/sock 0666" (nutcracker 0.5) or "/path/sock:0666". */
int
conf_set_listen(struct conf_loading *ld, const struct conf_key *key,
                yaml_node_t *node, void *base)
{
    struct conf_pool *pool = base;
    const char *v = conf_scalar(ld, key, node);
    char buf[512], msg[512], *perm = NULL;

    if (v == NULL)
        return -1;
    if (strlen(v) >= sizeof(buf))
        return conf_fail(ld, node, "'listen' address is too long");
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
            return conf_fail(ld, node,
                             "bad 'listen' permissions '%s': expected "
                             "an octal mode like 0666",
                             perm);
        pool->listen_perm = (int)mode;
    }
    conf_addr_deinit(&pool->listen);
    if (conf_parse_addr(buf, &pool->listen, msg, sizeof(msg)) != 0)
        return conf_fail(ld, node, "bad 'listen': %s", msg);
    return 0;
}

int
conf_set_admin(struct conf_loading *ld, const struct conf_key *key,
               yaml_node_t *node, void *base)
{
    struct conf_addr *admin = FIELD(base, key, struct conf_addr);
    const char *v = conf_scalar(ld, key, node);
    char msg[512];
    bool on;

    if (v == NULL)
        return -1;
    conf_addr_deinit(admin);
    if (conf_parse_bool(v, &on) == 0 && !on)
        return 0; /* admin: off */
    if (conf_parse_addr(v, admin, msg, sizeof(msg)) != 0)
        return conf_fail(ld, node, "bad 'admin': %s", msg);
    return 0;
}

/* Refuse a server that is one of chashd's own listening sockets: every
 * connection to it would come back to chashd, which would pick a server
 * for it again, and so on until the file descriptors run out. */
static int
check_self(struct conf_loading *ld, const struct conf *conf)
{
    struct local loc = {NULL, false};
    char what[400];
    int rc = 0;

    for (size_t i = 0; i < conf->npools && rc == 0; i++) {
        const struct conf_pool *p = &conf->pools[i];

        for (size_t j = 0; j < p->nservers && rc == 0; j++) {
            const struct conf_server *s = &p->servers[j];

            if (self_address(conf, &s->addr, what, sizeof(what), &loc) != NULL)
                rc = conf_fail_at(ld, s->line,
                                  "server '%s' (%s) is chashd's own address, "
                                  "%s: chashd would connect to itself",
                                  s->name, s->addr.text, what);
        }
    }
    local_deinit(&loc);
    return rc;
}

/* Checks across pools and the admin address, after all are parsed. */
int
conf_check_listeners(struct conf_loading *ld, struct conf *conf,
                     const int *glines)
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

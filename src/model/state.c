/* state.c -- the runtime membership delta: load and validate the state file,
 * apply it to a fresh config, recompute it from the runtime membership and
 * write it back atomically (temp file, fsync, rename, fsync directory).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "model/state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "conf/conf.h"

#define STATE_VERSION 1
/* The config's own bound, not the admin API's (1000000): a config member
 * may weigh more (rendezvous takes any uint32), and draining it records
 * that weight here. A lower bound made the daemon write a state file it
 * then refused at the next start. */
#define STATE_MAX_WEIGHT UINT32_MAX

/* One member in a pool's delta. For an added member every field is set;
 * for a changed one <address> is set only when it differs from the base
 * (a config member removed and re-added at another address), and
 * <weight> only when <has_weight>: every uint32 is a weight a config may
 * give (rendezvous takes any), so no value of it can mean "unset". */
struct state_entry {
    char *name;
    char *address; /* NULL: unchanged */
    uint32_t weight;
    bool has_weight; /* false: the config's weight */
    int admin;       /* enum state_admin */
    char *zone;      /* an added member's zone, or NULL */
};

/* A server as the config file wrote it. */
struct state_base {
    char *name;
    char *address;
    uint32_t weight;
};

struct state_pool {
    char *name;
    struct state_entry *added;
    size_t nadded;
    struct state_entry *changed;
    size_t nchanged;
    char **removed;
    size_t nremoved;
    struct state_base *base; /* captured by state_apply */
    size_t nbase;
    bool have_base;
};

struct state {
    struct state_pool *pools;
    size_t npools;
    json_t *migrations; /* pool name -> its running migration (NULL: none) */
};

static const char *const admin_names[] = {"up", "drain", "maint"};

const char *
state_admin_name(int admin)
{
    if (admin < 0 || admin > STATE_ADMIN_MAINT)
        return NULL;
    return admin_names[admin];
}

int
state_admin_from_name(const char *name)
{
    for (int i = 0; i <= STATE_ADMIN_MAINT; i++)
        if (name != NULL && strcmp(name, admin_names[i]) == 0)
            return i;
    return -1;
}

static void
entry_deinit(struct state_entry *e)
{
    free(e->name);
    free(e->address);
    free(e->zone);
    e->name = e->address = e->zone = NULL;
}

/* Free a pool's delta (not its base or name). */
static void
state_pool_delta_clear(struct state_pool *p)
{
    for (size_t i = 0; i < p->nadded; i++)
        entry_deinit(&p->added[i]);
    for (size_t i = 0; i < p->nchanged; i++)
        entry_deinit(&p->changed[i]);
    for (size_t i = 0; i < p->nremoved; i++)
        free(p->removed[i]);
    free(p->added);
    free(p->changed);
    free(p->removed);
    p->added = p->changed = NULL;
    p->removed = NULL;
    p->nadded = p->nchanged = p->nremoved = 0;
}

static void
state_pool_base_clear(struct state_pool *p)
{
    for (size_t i = 0; i < p->nbase; i++) {
        free(p->base[i].name);
        free(p->base[i].address);
    }
    free(p->base);
    p->base = NULL;
    p->nbase = 0;
    p->have_base = false;
}

static void
state_pool_deinit(struct state_pool *p)
{
    state_pool_delta_clear(p);
    state_pool_base_clear(p);
    free(p->name);
    p->name = NULL;
}

struct state *
state_create(void)
{
    return calloc(1, sizeof(struct state));
}

static void
state_clear(struct state *st)
{
    for (size_t i = 0; i < st->npools; i++)
        state_pool_deinit(&st->pools[i]);
    free(st->pools);
    st->pools = NULL;
    st->npools = 0;
    json_decref(st->migrations);
    st->migrations = NULL;
}

void
state_destroy(struct state *st)
{
    if (st == NULL)
        return;
    state_clear(st);
    free(st);
}

static struct state_pool *
state_pool_find(const struct state *st, const char *name)
{
    for (size_t i = 0; i < st->npools; i++)
        if (strcmp(st->pools[i].name, name) == 0)
            return &st->pools[i];
    return NULL;
}

static struct state_pool *
state_pool_get(struct state *st, const char *name)
{
    struct state_pool *p = state_pool_find(st, name), *np;

    if (p != NULL)
        return p;
    np = realloc(st->pools, (st->npools + 1) * sizeof(*np));
    if (np == NULL)
        return NULL;
    st->pools = np;
    p = &np[st->npools];
    memset(p, 0, sizeof(*p));
    p->name = strdup(name);
    if (p->name == NULL)
        return NULL;
    st->npools++;
    return p;
}

/* Append a copy of an entry to <*arr>. 0 or -1. */
static int
entry_push(struct state_entry **arr, size_t *n, const char *name,
           const char *address, uint32_t weight, bool has_weight, int admin)
{
    struct state_entry *na = realloc(*arr, (*n + 1) * sizeof(*na));
    struct state_entry *e;

    if (na == NULL)
        return -1;
    *arr = na;
    e = &na[*n];
    e->name = strdup(name);
    e->address = address != NULL ? strdup(address) : NULL;
    e->weight = weight;
    e->has_weight = has_weight;
    e->admin = admin;
    e->zone = NULL;
    if (e->name == NULL || (address != NULL && e->address == NULL)) {
        entry_deinit(e);
        return -1;
    }
    (*n)++;
    return 0;
}

static int
name_push(char ***arr, size_t *n, const char *name)
{
    char **na = realloc(*arr, (*n + 1) * sizeof(*na));

    if (na == NULL)
        return -1;
    *arr = na;
    na[*n] = strdup(name);
    if (na[*n] == NULL)
        return -1;
    (*n)++;
    return 0;
}

/* ---- loading ---------------------------------------------------------- */

static void __attribute__((format(printf, 3, 4)))
seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Parse one member entry of "added" (<full>: address and weight required)
 * or "changed". 0, or -1 with the message in <err>. */
static int
parse_entry(json_t *j, bool full, struct state_entry *e, const char *where,
            char *err, size_t errlen)
{
    json_t *name, *address, *weight, *admin;

    memset(e, 0, sizeof(*e));
    if (!json_is_object(j)) {
        seterr(err, errlen, "%s: expected an object", where);
        return -1;
    }
    name = json_object_get(j, "name");
    address = json_object_get(j, "address");
    weight = json_object_get(j, "weight");
    admin = json_object_get(j, "state");
    if (!json_is_string(name) || json_string_length(name) == 0) {
        seterr(err, errlen, "%s.name: expected a non-empty string", where);
        return -1;
    }
    if (full ? !json_is_string(address)
             : address != NULL && !json_is_string(address)) {
        seterr(err, errlen, "%s.address: expected a string", where);
        return -1;
    }
    if (full && weight == NULL) {
        seterr(err, errlen, "%s.weight: missing", where);
        return -1;
    }
    if (weight != NULL &&
        (!json_is_integer(weight) || json_integer_value(weight) < 0 ||
         json_integer_value(weight) > STATE_MAX_WEIGHT)) {
        seterr(err, errlen, "%s.weight: expected an integer in [0, %lu]", where,
               (unsigned long)STATE_MAX_WEIGHT);
        return -1;
    }
    e->admin = STATE_ADMIN_UP;
    if (admin != NULL) {
        e->admin = state_admin_from_name(json_string_value(admin));
        if (e->admin < 0) {
            seterr(err, errlen,
                   "%s.state: expected \"up\", \"drain\" or "
                   "\"maint\"",
                   where);
            return -1;
        }
    }
    /* A changed entry without a weight keeps the config's. */
    e->has_weight = weight != NULL;
    e->weight = weight != NULL ? (uint32_t)json_integer_value(weight) : 0;
    e->name = strdup(json_string_value(name));
    if (address != NULL)
        e->address = strdup(json_string_value(address));
    if (json_is_string(json_object_get(j, "zone")))
        e->zone = strdup(json_string_value(json_object_get(j, "zone")));
    if (e->name == NULL || (address != NULL && e->address == NULL)) {
        entry_deinit(e);
        seterr(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int
parse_pool(struct state *st, const char *pname, json_t *j, const char *file,
           char *err, size_t errlen)
{
    struct state_pool *p;
    json_t *added, *changed, *removed, *v;
    const char *key;
    size_t i;
    char where[256];

    if (!json_is_object(j)) {
        seterr(err, errlen, "%s: pools.%s: expected an object", file, pname);
        return -1;
    }
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "added") != 0 && strcmp(key, "changed") != 0 &&
            strcmp(key, "removed") != 0) {
            seterr(err, errlen, "%s: pools.%s: unknown key \"%s\"", file, pname,
                   key);
            return -1;
        }
        if (!json_is_array(v)) {
            seterr(err, errlen, "%s: pools.%s.%s: expected an array", file,
                   pname, key);
            return -1;
        }
    }
    p = state_pool_get(st, pname);
    if (p == NULL) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    added = json_object_get(j, "added");
    changed = json_object_get(j, "changed");
    removed = json_object_get(j, "removed");
    json_array_foreach(added, i, v)
    {
        struct state_entry e;
        char msg[320];

        snprintf(where, sizeof(where), "pools.%s.added[%zu]", pname, i);
        if (parse_entry(v, true, &e, where, msg, sizeof(msg)) != 0) {
            seterr(err, errlen, "%s: %s", file, msg);
            return -1;
        }
        if (entry_push(&p->added, &p->nadded, e.name, e.address, e.weight,
                       e.has_weight, e.admin) != 0) {
            entry_deinit(&e);
            seterr(err, errlen, "out of memory");
            return -1;
        }
        entry_deinit(&e);
    }
    json_array_foreach(changed, i, v)
    {
        struct state_entry e;
        char msg[320];

        snprintf(where, sizeof(where), "pools.%s.changed[%zu]", pname, i);
        if (parse_entry(v, false, &e, where, msg, sizeof(msg)) != 0) {
            seterr(err, errlen, "%s: %s", file, msg);
            return -1;
        }
        if (entry_push(&p->changed, &p->nchanged, e.name, e.address, e.weight,
                       e.has_weight, e.admin) != 0) {
            entry_deinit(&e);
            seterr(err, errlen, "out of memory");
            return -1;
        }
        entry_deinit(&e);
    }
    json_array_foreach(removed, i, v)
    {
        if (!json_is_string(v) || json_string_length(v) == 0) {
            seterr(err, errlen,
                   "%s: pools.%s.removed[%zu]: expected a "
                   "member name",
                   file, pname, i);
            return -1;
        }
        if (name_push(&p->removed, &p->nremoved, json_string_value(v)) != 0) {
            seterr(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

int
state_load_string(struct state *st, const char *name, const char *text,
                  char *err, size_t errlen)
{
    struct state tmp = {0};
    json_error_t jerr;
    json_t *root, *version, *pools, *v, *mv;
    const char *key;
    int rc = -1;

    root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        seterr(err, errlen, "%s:%d: %s", name, jerr.line, jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        seterr(err, errlen, "%s: expected a JSON object", name);
        goto out;
    }
    version = json_object_get(root, "version");
    if (!json_is_integer(version) ||
        json_integer_value(version) != STATE_VERSION) {
        seterr(err, errlen, "%s: \"version\" must be %d", name, STATE_VERSION);
        goto out;
    }
    pools = json_object_get(root, "pools");
    if (pools != NULL && !json_is_object(pools)) {
        seterr(err, errlen, "%s: \"pools\" must be an object", name);
        goto out;
    }
    json_object_foreach(pools, key, v)
    {
        if (parse_pool(&tmp, key, v, name, err, errlen) != 0)
            goto out;
    }
    v = json_object_get(root, "migrations");
    if (v != NULL && !json_is_object(v)) {
        seterr(err, errlen, "%s: \"migrations\" must be an object", name);
        goto out;
    }
    json_object_foreach(v, key, mv)
    {
        if (!json_is_object(mv)) {
            seterr(err, errlen,
                   "%s: migration of pool \"%s\" must be an object", name, key);
            goto out;
        }
    }
    /* Only a fully valid file replaces the state. Bases survive: they
     * belong to the loaded config, not to the file. */
    for (size_t i = 0; i < st->npools; i++)
        state_pool_delta_clear(&st->pools[i]);
    for (size_t i = 0; i < tmp.npools; i++) {
        struct state_pool *p = state_pool_get(st, tmp.pools[i].name);

        if (p == NULL) {
            seterr(err, errlen, "out of memory");
            goto out;
        }
        p->added = tmp.pools[i].added;
        p->nadded = tmp.pools[i].nadded;
        p->changed = tmp.pools[i].changed;
        p->nchanged = tmp.pools[i].nchanged;
        p->removed = tmp.pools[i].removed;
        p->nremoved = tmp.pools[i].nremoved;
        tmp.pools[i].added = tmp.pools[i].changed = NULL;
        tmp.pools[i].removed = NULL;
        tmp.pools[i].nadded = tmp.pools[i].nchanged = 0;
        tmp.pools[i].nremoved = 0;
    }
    json_decref(st->migrations);
    st->migrations = v != NULL ? json_deep_copy(v) : NULL;
    rc = 0;
out:
    state_clear(&tmp);
    json_decref(root);
    return rc;
}

int
state_load(struct state *st, const char *path, char *err, size_t errlen)
{
    FILE *f;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc;

    f = fopen(path, "r");
    if (f == NULL) {
        if (errno == ENOENT)
            return 0;
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *nt;

            cap = cap ? cap * 2 : 8192;
            nt = realloc(text, cap);
            if (nt == NULL) {
                free(text);
                fclose(f);
                seterr(err, errlen, "%s: out of memory", path);
                return -1;
            }
            text = nt;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096)
            break;
    }
    if (ferror(f)) {
        /* say why: fopen() opens a directory, and only the read fails */
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        free(text);
        fclose(f);
        return -1;
    }
    fclose(f);
    text[len] = '\0';
    if (strlen(text) != len) {
        seterr(err, errlen, "%s: contains a NUL byte", path);
        free(text);
        return -1;
    }
    rc = state_load_string(st, path, text, err, errlen);
    free(text);
    return rc;
}

/* ---- applying to a config --------------------------------------------- */

static void __attribute__((format(printf, 3, 4)))
addwarn(char *warn, size_t warnlen, const char *fmt, ...)
{
    size_t used;
    va_list ap;

    if (warn == NULL || warnlen == 0)
        return;
    used = strlen(warn);
    if (used + 3 >= warnlen)
        return;
    if (used > 0) {
        memcpy(warn + used, "; ", 3);
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(warn + used, warnlen - used, fmt, ap);
    va_end(ap);
}

static long
server_find(const struct conf_pool *cp, const char *name)
{
    for (size_t i = 0; i < cp->nservers; i++)
        if (strcmp(cp->servers[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* Parse a server exactly as `servers:` would: "address:weight name". */
static int
server_parse(const char *name, const char *address, uint32_t weight,
             struct conf_server *out, char *err, size_t errlen)
{
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s:%u %s", address, weight, name);

    if (n < 0 || (size_t)n >= sizeof(line)) {
        seterr(err, errlen, "member %s: address too long", name);
        return -1;
    }
    return conf_parse_server(line, out, err, errlen);
}

/* Is <addr> taken by a server of <cp> other than index <except>? */
static bool
address_taken(const struct conf_pool *cp, const struct conf_addr *addr,
              long except)
{
    for (size_t i = 0; i < cp->nservers; i++)
        if ((long)i != except && conf_addr_equal(&cp->servers[i].addr, addr))
            return true;
    return false;
}

static int
state_pool_capture_base(struct state_pool *p, const struct conf_pool *cp)
{
    state_pool_base_clear(p);
    p->base = calloc(cp->nservers ? cp->nservers : 1, sizeof(*p->base));
    if (p->base == NULL)
        return -1;
    for (size_t i = 0; i < cp->nservers; i++) {
        p->base[i].name = strdup(cp->servers[i].name);
        p->base[i].address = strdup(cp->servers[i].addr.text);
        p->base[i].weight = cp->servers[i].weight;
        p->nbase++;
        if (p->base[i].name == NULL || p->base[i].address == NULL)
            return -1;
    }
    p->have_base = true;
    return 0;
}

/* Replace server <idx> of <cp> by <ns> (takes its contents). */
static void
server_replace(struct conf_pool *cp, size_t idx, struct conf_server *ns)
{
    int line = cp->servers[idx].line;

    if (ns->zone == NULL) { /* a member keeps its zone */
        ns->zone = cp->servers[idx].zone;
        cp->servers[idx].zone = NULL;
    }
    conf_server_deinit(&cp->servers[idx]);
    cp->servers[idx] = *ns;
    cp->servers[idx].line = line;
}

/* Drop the members <p> removed from <cp> (never the last one). */
static void
apply_removed(const struct state_pool *p, struct conf_pool *cp, char *warn,
              size_t warnlen)
{
    for (size_t i = 0; i < p->nremoved; i++) {
        long k = server_find(cp, p->removed[i]);

        if (k < 0) {
            addwarn(warn, warnlen,
                    "pool %s: removed member %s is no longer "
                    "in the config",
                    cp->name, p->removed[i]);
            continue;
        }
        if (cp->nservers == 1) {
            addwarn(warn, warnlen,
                    "pool %s: not removing %s, the last "
                    "member",
                    cp->name, p->removed[i]);
            continue;
        }
        conf_server_deinit(&cp->servers[k]);
        memmove(&cp->servers[k], &cp->servers[k + 1],
                (cp->nservers - (size_t)k - 1) * sizeof(cp->servers[0]));
        cp->nservers--;
    }
}

/* Whether server <ns>, for member <name> (whose entry wrote <address>)
 * of <cp>, cannot take that address: another member of <cp> than index
 * <except> (-1: any) has it, or it is now chashd's own. Says so in
 * <warn>, naming the member as <what> ("member", "added member"). */
static bool
address_refused(const struct conf *conf, const struct conf_pool *cp,
                const struct conf_server *ns, long except, const char *what,
                const char *name, const char *address, char *warn,
                size_t warnlen)
{
    char self[320];

    if (address_taken(cp, &ns->addr, except)) {
        addwarn(warn, warnlen,
                except >= 0 ? "pool %s: %s %s: address %s is "
                              "taken by another member"
                            : "pool %s: %s %s: address %s is "
                              "now taken by a config member",
                cp->name, what, name, address);
        return true;
    }
    /* A listen address the config moved onto a member's: the member
     * would be chashd connecting to itself. */
    if (conf_self_address(conf, &ns->addr, self, sizeof(self))) {
        addwarn(warn, warnlen,
                "pool %s: %s %s: address %s is now chashd's own, %s", cp->name,
                what, name, address, self);
        return true;
    }
    return false;
}

/* A changed entry of <p>, or an added one the config now holds itself,
 * overrides the config server's weight (and address if given). */
static void
apply_overrides(const struct state_pool *p, const struct conf *conf,
                struct conf_pool *cp, char *warn, size_t warnlen)
{
    char msg[256];

    for (size_t pass = 0; pass < 2; pass++) {
        const struct state_entry *arr = pass == 0 ? p->changed : p->added;
        size_t n = pass == 0 ? p->nchanged : p->nadded;

        for (size_t i = 0; i < n; i++) {
            const struct state_entry *e = &arr[i];
            long k = server_find(cp, e->name);
            struct conf_server ns;
            uint32_t w;

            if (k < 0) {
                if (pass == 0)
                    addwarn(warn, warnlen,
                            "pool %s: changed member %s is "
                            "no longer in the config",
                            cp->name, e->name);
                continue;
            }
            w = e->has_weight ? e->weight : cp->servers[k].weight;
            if (e->address == NULL || pass == 1) {
                cp->servers[k].weight = w;
                continue;
            }
            if (server_parse(e->name, e->address, w, &ns, msg, sizeof(msg)) !=
                0) {
                addwarn(warn, warnlen, "pool %s: member %s: %s", cp->name,
                        e->name, msg);
                continue;
            }
            if (address_refused(conf, cp, &ns, k, "member", e->name, e->address,
                                warn, warnlen)) {
                conf_server_deinit(&ns);
                continue;
            }
            server_replace(cp, (size_t)k, &ns);
        }
    }
}

/* Append the members <p> added that <cp> does not hold. 0, or -1 with
 * errno ENOMEM. */
static int
apply_added(const struct state_pool *p, const struct conf *conf,
            struct conf_pool *cp, char *warn, size_t warnlen)
{
    char msg[256];

    for (size_t i = 0; i < p->nadded; i++) {
        const struct state_entry *e = &p->added[i];
        struct conf_server ns, *nsv;

        if (server_find(cp, e->name) >= 0)
            continue; /* handled by apply_overrides */
        if (server_parse(e->name, e->address, e->weight, &ns, msg,
                         sizeof(msg)) != 0) {
            addwarn(warn, warnlen, "pool %s: added member %s: %s", cp->name,
                    e->name, msg);
            continue;
        }
        if (e->zone != NULL && (ns.zone = strdup(e->zone)) == NULL) {
            conf_server_deinit(&ns);
            errno = ENOMEM;
            return -1;
        }
        if (ns.zone == NULL && cp->zone_policy == CONF_ZONE_HIERARCHICAL) {
            addwarn(warn, warnlen,
                    "pool %s: added member %s has no zone (the pool places "
                    "a zone, then a member): not added",
                    cp->name, e->name);
            conf_server_deinit(&ns);
            continue;
        }
        if (address_refused(conf, cp, &ns, -1, "added member", e->name,
                            e->address, warn, warnlen)) {
            conf_server_deinit(&ns);
            continue;
        }
        nsv = realloc(cp->servers, (cp->nservers + 1) * sizeof(*nsv));
        if (nsv == NULL) {
            conf_server_deinit(&ns);
            errno = ENOMEM;
            return -1;
        }
        cp->servers = nsv;
        ns.line = 0;
        cp->servers[cp->nservers++] = ns;
    }
    return 0;
}

/* Apply one pool's delta to <cp>, a pool of <conf>; collect the admin
 * states it sets into <admins> (parallel to cp->servers after the call).
 * 0, or -1 with errno ENOMEM. */
static int
state_pool_apply(struct state_pool *p, const struct conf *conf,
                 struct conf_pool *cp, int **admins, char *warn, size_t warnlen)
{
    apply_removed(p, cp, warn, warnlen);
    apply_overrides(p, conf, cp, warn, warnlen);
    if (apply_added(p, conf, cp, warn, warnlen) != 0)
        return -1;
    *admins = calloc(cp->nservers ? cp->nservers : 1, sizeof(int));
    if (*admins == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < cp->nservers; i++) {
        const char *n = cp->servers[i].name;

        for (size_t j = 0; j < p->nadded; j++)
            if (strcmp(p->added[j].name, n) == 0)
                (*admins)[i] = p->added[j].admin;
        for (size_t j = 0; j < p->nchanged; j++)
            if (strcmp(p->changed[j].name, n) == 0)
                (*admins)[i] = p->changed[j].admin;
    }
    return 0;
}

/* A deep copy of <cp>'s servers into *<out>. 0 or -1 (ENOMEM). */
static int
servers_copy(const struct conf_pool *cp, struct conf_server **out)
{
    struct conf_server *c = calloc(cp->nservers ? cp->nservers : 1, sizeof(*c));

    *out = c;
    if (c == NULL)
        return -1;
    for (size_t i = 0; i < cp->nservers; i++) {
        c[i] = cp->servers[i];
        c[i].name = strdup(cp->servers[i].name);
        c[i].zone = cp->servers[i].zone ? strdup(cp->servers[i].zone) : NULL;
        c[i].addr.text = strdup(cp->servers[i].addr.text);
        if (c[i].name == NULL || c[i].addr.text == NULL ||
            (cp->servers[i].zone != NULL && c[i].zone == NULL)) {
            for (size_t k = 0; k <= i; k++)
                conf_server_deinit(&c[k]);
            free(c);
            *out = NULL;
            return -1;
        }
    }
    return 0;
}

static void
servers_free(struct conf_server *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        conf_server_deinit(&s[i]);
    free(s);
}

/*
 * Does <cp>, with the delta applied, still give a ring? The config alone
 * passed this check at load (conf/conf_check.c check_ring), but the
 * delta was made under an older config: a weight of 5 is fine for
 * rendezvous and not for jump, nor with a larger points_per_weight.
 * Applied anyway, the pool could not be built and the daemon refused to
 * start on a valid config. The size comes first, from arithmetic
 * (conf_ring_points), as at load: a delta that asks for more than
 * max_points is refused before anything is built. 0; 1 when the pool
 * gives no ring, with the reason in <why>; -1 (ENOMEM).
 */
static int
state_pool_ring_check(const struct conf_pool *cp, char *why, size_t whylen)
{
    struct chash_member *m =
        calloc(cp->nservers ? cp->nservers : 1, sizeof(*m));
    struct chash_ring *ring = NULL;
    int rc = -CHASH_EEMPTY;
    uint64_t need;

    if (m == NULL)
        return -1;
    conf_pool_members(cp, m);
    for (size_t i = 0; i < cp->nservers; i++)
        if (m[i].weight > 0)
            rc = 0;
    need = conf_ring_points(cp->distribution, &cp->ring, m, cp->nservers);
    if (rc == 0 && need > cp->max_points) {
        free(m);
        snprintf(why, whylen, "%llu ring points, over max_points %u",
                 (unsigned long long)need, cp->max_points);
        return 1;
    }
    if (rc == 0 && cp->distribution < CHASH_ALGO_COUNT) {
        rc = chash_ring_create(&cp->ring, m, cp->nservers, &ring);
        chash_ring_destroy(ring);
    }
    free(m);
    if (rc == -CHASH_ENOMEM)
        return -1;
    if (rc != 0) {
        snprintf(why, whylen, "%s", chash_strerror(rc));
        return 1;
    }
    return 0;
}

int
state_apply(struct state *st, struct conf *conf, char *warn, size_t warnlen)
{
    if (warn != NULL && warnlen > 0)
        warn[0] = '\0';

    /* Pools the config no longer has: their delta goes. */
    for (size_t i = 0; i < st->npools;) {
        if (conf_pool_find(conf, st->pools[i].name) == NULL) {
            if (st->pools[i].nadded + st->pools[i].nchanged +
                    st->pools[i].nremoved >
                0)
                addwarn(warn, warnlen,
                        "pool %s is no longer in the config; "
                        "its runtime changes are dropped",
                        st->pools[i].name);
            state_pool_deinit(&st->pools[i]);
            memmove(&st->pools[i], &st->pools[i + 1],
                    (st->npools - i - 1) * sizeof(st->pools[0]));
            st->npools--;
            continue;
        }
        i++;
    }

    for (size_t i = 0; i < conf->npools; i++) {
        struct conf_pool *cp = &conf->pools[i];
        struct state_pool *p;
        if (cp->members_from == CONF_MEMBERS_ETCD)
            continue; /* etcd holds its runtime state (doc/etcd.md) */
        p = state_pool_get(st, cp->name);
        struct state_member *rm;
        int *admins = NULL;
        char why[256];
        int rc;

        struct conf_server *orig;
        size_t norig = cp->nservers;

        if (p == NULL || state_pool_capture_base(p, cp) != 0 ||
            servers_copy(cp, &orig) != 0) {
            errno = ENOMEM;
            return -1;
        }
        if (state_pool_apply(p, conf, cp, &admins, warn, warnlen) != 0) {
            servers_free(orig, norig);
            return -1;
        }
        if ((rc = state_pool_ring_check(cp, why, sizeof(why))) < 0) {
            servers_free(orig, norig);
            free(admins);
            errno = ENOMEM;
            return -1;
        }
        if (rc != 0) {
            /* The config as written, with none of the delta: the
             * normalisation below then drops the delta too. */
            addwarn(warn, warnlen,
                    "pool %s: its runtime changes do not fit the config "
                    "(%s); they are dropped",
                    cp->name, why);
            servers_free(cp->servers, cp->nservers);
            cp->servers = orig;
            cp->nservers = norig;
            free(admins);
            admins = calloc(norig ? norig : 1, sizeof(int));
            if (admins == NULL) {
                errno = ENOMEM;
                return -1;
            }
        } else {
            servers_free(orig, norig);
        }
        /* Normalise: the delta is what actually applied. */
        rm = calloc(cp->nservers ? cp->nservers : 1, sizeof(*rm));
        if (rm == NULL) {
            free(admins);
            errno = ENOMEM;
            return -1;
        }
        for (size_t k = 0; k < cp->nservers; k++) {
            rm[k].name = cp->servers[k].name;
            rm[k].address = cp->servers[k].addr.text;
            rm[k].weight = cp->servers[k].weight;
            rm[k].admin = admins[k];
        }
        rc = state_record(st, cp->name, rm, cp->nservers);
        free(rm);
        free(admins);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int
state_admin(const struct state *st, const char *pool, const char *member)
{
    const struct state_pool *p = state_pool_find(st, pool);

    if (p == NULL)
        return STATE_ADMIN_UP;
    for (size_t j = 0; j < p->nadded; j++)
        if (strcmp(p->added[j].name, member) == 0)
            return p->added[j].admin;
    for (size_t j = 0; j < p->nchanged; j++)
        if (strcmp(p->changed[j].name, member) == 0)
            return p->changed[j].admin;
    return STATE_ADMIN_UP;
}

int
state_record(struct state *st, const char *pool,
             const struct state_member *members, size_t n)
{
    struct state_pool *p = state_pool_find(st, pool);
    struct state_pool nd = {0};

    if (p == NULL || !p->have_base) {
        errno = ENOENT;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct state_member *m = &members[i];
        const struct state_base *b = NULL;
        int rc = 0;

        for (size_t k = 0; k < p->nbase; k++)
            if (strcmp(p->base[k].name, m->name) == 0)
                b = &p->base[k];
        if (b == NULL) {
            rc = entry_push(&nd.added, &nd.nadded, m->name, m->address,
                            m->weight, true, m->admin);
            if (rc == 0 && m->zone != NULL &&
                (nd.added[nd.nadded - 1].zone = strdup(m->zone)) == NULL)
                rc = -1;
        } else if (b->weight != m->weight || m->admin != STATE_ADMIN_UP ||
                   strcmp(b->address, m->address) != 0)
            rc = entry_push(&nd.changed, &nd.nchanged, m->name,
                            strcmp(b->address, m->address) != 0 ? m->address
                                                                : NULL,
                            m->weight, true, m->admin);
        if (rc != 0)
            goto nomem;
    }
    for (size_t k = 0; k < p->nbase; k++) {
        bool found = false;

        for (size_t i = 0; i < n && !found; i++)
            found = strcmp(p->base[k].name, members[i].name) == 0;
        if (!found &&
            name_push(&nd.removed, &nd.nremoved, p->base[k].name) != 0)
            goto nomem;
    }
    state_pool_delta_clear(p);
    p->added = nd.added;
    p->nadded = nd.nadded;
    p->changed = nd.changed;
    p->nchanged = nd.nchanged;
    p->removed = nd.removed;
    p->nremoved = nd.nremoved;
    return 0;
nomem:
    state_pool_delta_clear(&nd);
    errno = ENOMEM;
    return -1;
}

/* ---- reporting and resetting ------------------------------------------ */

/* A member as the config wrote it: from the base state_apply captured,
 * else (not applied yet) from the config itself. NULL when absent. */
struct written {
    const char *address;
    uint32_t weight;
};

static bool
written_find(const struct state_pool *p, const struct conf_pool *cp,
             const char *name, struct written *w)
{
    if (p->have_base) {
        for (size_t k = 0; k < p->nbase; k++)
            if (strcmp(p->base[k].name, name) == 0) {
                w->address = p->base[k].address;
                w->weight = p->base[k].weight;
                return true;
            }
        return false;
    }
    for (size_t k = 0; k < cp->nservers; k++)
        if (strcmp(cp->servers[k].name, name) == 0) {
            w->address = cp->servers[k].addr.text;
            w->weight = cp->servers[k].weight;
            return true;
        }
    return false;
}

static const struct state_entry *
entry_find(const struct state_entry *arr, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(arr[i].name, name) == 0)
            return &arr[i];
    return NULL;
}

/* Append {"pool", "member", "what", "config", "runtime"} to <out>; takes
 * <config> and <runtime> (NULL: JSON null). 0, or -1 out of memory. */
static int
override_add(json_t *out, const char *pool, const char *member,
             const char *what, json_t *config, json_t *runtime)
{
    json_t *o = json_object();
    int rc = -1;

    if (o != NULL && json_object_set_new(o, "pool", json_string(pool)) == 0 &&
        json_object_set_new(o, "member", json_string(member)) == 0 &&
        json_object_set_new(o, "what", json_string(what)) == 0 &&
        json_object_set(o, "config", config ? config : json_null()) == 0 &&
        json_object_set(o, "runtime", runtime ? runtime : json_null()) == 0 &&
        json_array_append(out, o) == 0)
        rc = 0;
    json_decref(o);
    json_decref(config);
    json_decref(runtime);
    return rc;
}

/* The overrides of the written member <name> (<w>) by entry <e>, in the
 * order address, weight, state. */
static int
overrides_of(json_t *out, const char *pool, const char *name,
             const struct written *w, const struct state_entry *e)
{
    int rc = 0;

    if (e->address != NULL && strcmp(e->address, w->address) != 0)
        rc |= override_add(out, pool, name, "address", json_string(w->address),
                           json_string(e->address));
    if (e->has_weight && e->weight != w->weight)
        rc |= override_add(out, pool, name, "weight", json_integer(w->weight),
                           json_integer(e->weight));
    if (e->admin != STATE_ADMIN_UP)
        rc |= override_add(out, pool, name, "state",
                           json_string(state_admin_name(STATE_ADMIN_UP)),
                           json_string(state_admin_name(e->admin)));
    return rc;
}

json_t *
state_overrides_json(const struct state *st, const struct conf *conf)
{
    json_t *out = json_array();
    int rc = out != NULL ? 0 : -1;

    for (size_t i = 0; i < conf->npools && rc == 0; i++) {
        const struct conf_pool *cp = &conf->pools[i];
        const struct state_pool *p = state_pool_find(st, cp->name);
        struct written w;

        if (p == NULL)
            continue;
        /* The members the config wrote, in its order... */
        for (size_t k = 0;
             k < (p->have_base ? p->nbase : cp->nservers) && rc == 0; k++) {
            const char *name =
                p->have_base ? p->base[k].name : cp->servers[k].name;
            const struct state_entry *e;
            bool removed = false;

            written_find(p, cp, name, &w);
            for (size_t r = 0; r < p->nremoved && !removed; r++)
                removed = strcmp(p->removed[r], name) == 0;
            if (removed) {
                json_t *c = json_pack("{s:s, s:I}", "address", w.address,
                                      "weight", (json_int_t)w.weight);
                rc = override_add(out, cp->name, name, "removed", c, NULL);
                continue;
            }
            e = entry_find(p->changed, p->nchanged, name);
            if (e == NULL) /* added at run time, then written in the file */
                e = entry_find(p->added, p->nadded, name);
            if (e != NULL)
                rc = overrides_of(out, cp->name, name, &w, e);
        }
        /* ...then the members only the runtime has. */
        for (size_t k = 0; k < p->nadded && rc == 0; k++) {
            const struct state_entry *e = &p->added[k];
            json_t *r;

            if (written_find(p, cp, e->name, &w))
                continue;
            r = json_pack("{s:s, s:I, s:s}", "address", e->address, "weight",
                          (json_int_t)e->weight, "state",
                          state_admin_name(e->admin));
            rc = override_add(out, cp->name, e->name, "added", NULL, r);
        }
    }
    if (rc != 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* Drop the entries of <arr> named <name>; how many. */
static int
entries_drop(struct state_entry *arr, size_t *n, const char *name)
{
    size_t kept = 0;
    int dropped = 0;

    for (size_t i = 0; i < *n; i++) {
        if (strcmp(arr[i].name, name) == 0) {
            entry_deinit(&arr[i]);
            dropped++;
            continue;
        }
        arr[kept++] = arr[i];
    }
    *n = kept;
    return dropped;
}

static int
names_drop(char **arr, size_t *n, const char *name)
{
    size_t kept = 0;
    int dropped = 0;

    for (size_t i = 0; i < *n; i++) {
        if (strcmp(arr[i], name) == 0) {
            free(arr[i]);
            dropped++;
            continue;
        }
        arr[kept++] = arr[i];
    }
    *n = kept;
    return dropped;
}

int
state_reset(struct state *st, const char *pool, const char *member)
{
    struct state_pool *p = pool != NULL ? state_pool_find(st, pool) : NULL;
    int n;

    if (p == NULL) {
        errno = ENOENT;
        return -1;
    }
    if (member == NULL) {
        n = (int)(p->nadded + p->nchanged + p->nremoved);
        state_pool_delta_clear(p);
        return n;
    }
    n = entries_drop(p->added, &p->nadded, member);
    n += entries_drop(p->changed, &p->nchanged, member);
    n += names_drop(p->removed, &p->nremoved, member);
    return n;
}

/* ---- saving ----------------------------------------------------------- */

static json_t *
entry_json(const struct state_entry *e, bool full)
{
    json_t *j = json_object();

    json_object_set_new(j, "name", json_string(e->name));
    if (e->address != NULL)
        json_object_set_new(j, "address", json_string(e->address));
    if (full || e->has_weight)
        json_object_set_new(j, "weight", json_integer(e->weight));
    json_object_set_new(j, "state", json_string(state_admin_name(e->admin)));
    if (e->zone != NULL)
        json_object_set_new(j, "zone", json_string(e->zone));
    return j;
}

json_t *
state_json(const struct state *st)
{
    json_t *root = json_object(), *pools = json_object();

    json_object_set_new(root, "version", json_integer(STATE_VERSION));
    for (size_t i = 0; i < st->npools; i++) {
        const struct state_pool *p = &st->pools[i];
        json_t *jp, *a;

        if (p->nadded + p->nchanged + p->nremoved == 0)
            continue;
        jp = json_object();
        a = json_array();
        for (size_t k = 0; k < p->nadded; k++)
            json_array_append_new(a, entry_json(&p->added[k], true));
        json_object_set_new(jp, "added", a);
        a = json_array();
        for (size_t k = 0; k < p->nchanged; k++)
            json_array_append_new(a, entry_json(&p->changed[k], false));
        json_object_set_new(jp, "changed", a);
        a = json_array();
        for (size_t k = 0; k < p->nremoved; k++)
            json_array_append_new(a, json_string(p->removed[k]));
        json_object_set_new(jp, "removed", a);
        json_object_set_new(pools, p->name, jp);
    }
    json_object_set_new(root, "pools", pools);
    if (st->migrations != NULL && json_object_size(st->migrations) > 0)
        json_object_set_new(root, "migrations", json_deep_copy(st->migrations));
    return root;
}

json_t *
state_migration(const struct state *st, const char *pool)
{
    return st->migrations != NULL ? json_object_get(st->migrations, pool)
                                  : NULL;
}

int
state_set_migration(struct state *st, const char *pool, json_t *m)
{
    if (m == NULL) {
        if (st->migrations != NULL)
            json_object_del(st->migrations, pool);
        return 0;
    }
    if (st->migrations == NULL && (st->migrations = json_object()) == NULL)
        return -1;
    return json_object_set(st->migrations, pool, m);
}

/* Write all of <buf> to <fd>. */
static int
write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

int
state_save(const struct state *st, const char *path, char *err, size_t errlen)
{
    json_t *root = state_json(st);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    char tmp[4096], dir[4096];
    const char *slash;
    int fd = -1, dfd, saved, rc = -1;

    json_decref(root);
    if (text == NULL) {
        errno = ENOMEM;
        seterr(err, errlen, "%s: out of memory", path);
        return -1;
    }
    /* The temporary file gets a name nobody can guess, and mkostemp
     * creates it with O_EXCL: no file or link that already exists is ever
     * opened. A fixed name ("<path>.tmp.<pid>") opened with O_TRUNC let
     * a local user plant a symlink there and have chashd, often root,
     * truncate and overwrite any file. */
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        seterr(err, errlen, "%s: path too long", path);
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    /* mkostemp's 0600; the state file is not secret (the admin API shows
     * it) and operators read it. */
    if (fchmod(fd, 0644) != 0 || write_all(fd, text, strlen(text)) != 0 ||
        write_all(fd, "\n", 1) || fsync(fd) != 0) {
        saved = errno;
        seterr(err, errlen, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        errno = saved;
        goto out;
    }
    if (close(fd) != 0) {
        saved = errno;
        seterr(err, errlen, "%s: %s", tmp, strerror(errno));
        unlink(tmp);
        errno = saved;
        goto out;
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        seterr(err, errlen, "%s: rename: %s", path, strerror(errno));
        unlink(tmp);
        errno = saved;
        goto out;
    }
    /* The rename is durable only once the directory entry is. */
    slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    rc = 0;
out:
    free(text);
    return rc;
}

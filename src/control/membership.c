/* membership.c -- the one place that changes who is in a pool and reports
 * it: checks a change whole before applying any of it, answers with the
 * exact migration report, logs one line per event, keeps the change log,
 * and keeps the state file (runtime changes survive restart and reload).
 * This file holds the model of a pool's placement, the change log, the
 * events, the state file, the migrations' host and the store's members;
 * the reports on the builder thread are in membership_report.c, reloads
 * in membership_reload.c, runtime changes in membership_change.c, a batch
 * of changes in membership_batch.c (membership_int.h). See membership.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/membership.h"
#include "control/membership_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/log.h"
#include "base/text.h"
#include "conf/conf.h"
#include "control/migration.h"
#include "loop/control.h"
#include "model/pool.h"
#include "model/state.h"

#define CHANGES_KEPT 50 /* entries of the change log kept in memory */

static const char *const source_names[MEMBERSHIP_SOURCE_COUNT] = {
    "admin", "reload", "health", "etcd"};

/* One entry of the change log: GET /api/changes, the dashboard, metrics. */
struct change {
    uint64_t seq;
    double time; /* Unix seconds */
    char pool[128];
    char member[TEXT_NAME_MAX + 1];
    char op[32];      /* add, remove, weight, drain, up, down, reload, ... */
    char source[16];  /* admin, reload, health */
    char detail[128]; /* "weight 1 -> 3", "127.0.0.1:9003 weight 1" */
    double moved, optimal, immediate; /* -1: not known */
};

/* Per pool: how many changes, and the last one's moved fraction. */
struct pool_count {
    char *name;
    uint64_t changes;
    double last_moved;
};

static struct change changes[CHANGES_KEPT];
static uint64_t nchanges; /* total; the ring above keeps the last ones */
static struct pool_count *counts;
static size_t ncounts;

struct membership_state membership_shared;

/* ---- the model of a pool's placement ------------------------------------ */

bool
membership_server_member(const struct server *s)
{
    return atomic_load_explicit((_Atomic int *)&s->state,
                                memory_order_relaxed) != SERVER_REMOVED;
}

int
membership_model_push(struct model *md, const char *name, uint32_t weight,
                      double ramp)
{
    if (md->n == md->cap) {
        size_t cap = md->cap ? md->cap * 2 : 16;
        struct chash_member *nm = realloc(md->m, cap * sizeof(*nm));

        if (nm == NULL)
            return -1;
        md->m = nm;
        md->cap = cap;
    }
    md->m[md->n].name = name;
    md->m[md->n].weight = weight;
    md->m[md->n].ramp = ramp;
    md->n++;
    return 0;
}

/* The pool's model, leaving out member <skip> (NULL: none). */
int
membership_model_build(const struct pool *p, const char *skip, struct model *md)
{
    memset(md, 0, sizeof(*md));
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!membership_server_member(s) || s->admin != STATE_ADMIN_UP)
            continue;
        if (skip != NULL && strcmp(s->name, skip) == 0)
            continue;
        if (membership_model_push(md, s->name, s->weight, s->ramp) != 0)
            return -1;
    }
    return 0;
}

/*
 * Does a change of <p>'s members leave keys out of reach? A store pool
 * (redis, memcache) that neither copies its keys (migration: copy), nor
 * reads a key missing on its new owner from its old one (warmup), nor
 * fills the members that join a key's replica set (replicas > 1) keeps
 * each key on the member that has it: once the ring names another owner,
 * reads go there and miss, and the old value stays behind. nutcracker
 * works so, and so does a pool written in its style (migration defaults
 * off there). tcp and http pools carry no data.
 */
bool
membership_pool_hides(const struct pool *p)
{
    return (p->cfg.mode == CONF_MODE_REDIS ||
            p->cfg.mode == CONF_MODE_MEMCACHE) &&
           p->cfg.migration == CONF_MIGRATION_OFF && p->cfg.replicas <= 1;
}

/* Is the pool's distribution a ring libchash can compare? */
bool
membership_pool_comparable(const struct pool *p)
{
    return p->cfg.distribution >= 0 && p->cfg.distribution < CHASH_ALGO_COUNT;
}

double
membership_json_num(const json_t *j, double dflt)
{
    return json_is_number(j) ? json_number_value(j) : dflt;
}

/* Append to <buf> at *<len>, truncating at <cap>. */
void __attribute__((format(printf, 4, 5)))
membership_append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*len + 1 >= cap)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

/* ---- change log ---------------------------------------------------------- */

static struct pool_count *
count_get(const char *pool)
{
    struct pool_count *nc;

    for (size_t i = 0; i < ncounts; i++)
        if (strcmp(counts[i].name, pool) == 0)
            return &counts[i];
    nc = realloc(counts, (ncounts + 1) * sizeof(*nc));
    if (nc == NULL)
        return NULL;
    counts = nc;
    nc = &counts[ncounts];
    nc->name = strdup(pool);
    if (nc->name == NULL)
        return NULL;
    nc->changes = 0;
    nc->last_moved = 0;
    ncounts++;
    return nc;
}

uint64_t
membership_pool_changes(const char *pool, double *last_moved)
{
    *last_moved = 0;
    for (size_t i = 0; i < ncounts; i++)
        if (strcmp(counts[i].name, pool) == 0) {
            *last_moved = counts[i].last_moved;
            return counts[i].changes;
        }
    return 0;
}

void
membership_change_log(const char *pool, const char *member, const char *op,
                      int source, const char *detail, const json_t *report)
{
    struct change *ch = &changes[nchanges % CHANGES_KEPT];
    struct pool_count *cnt = count_get(pool);
    struct timeval tv;

    gettimeofday(&tv, NULL);
    memset(ch, 0, sizeof(*ch));
    ch->seq = ++nchanges;
    ch->time = (double)tv.tv_sec + tv.tv_usec / 1e6;
    snprintf(ch->pool, sizeof(ch->pool), "%s", pool);
    snprintf(ch->member, sizeof(ch->member), "%s", member);
    snprintf(ch->op, sizeof(ch->op), "%s", op);
    snprintf(ch->source, sizeof(ch->source), "%s", source_names[source]);
    snprintf(ch->detail, sizeof(ch->detail), "%s", detail);
    /* A reload's "+name -name" list is cut to fit, maybe inside a UTF-8
     * name: jansson would refuse the entry and /api/changes lose it. */
    text_utf8_scrub(ch->detail);
    text_utf8_scrub(ch->member);
    ch->moved = membership_json_num(json_object_get(report, "moved"), -1);
    ch->optimal = membership_json_num(json_object_get(report, "optimal"), -1);
    ch->immediate =
        membership_json_num(json_object_get(report, "immediate"), -1);
    if (cnt != NULL) {
        cnt->changes++;
        cnt->last_moved = ch->moved >= 0 ? ch->moved : 0;
    }
}

static json_t *
real_or_null(double v)
{
    return v >= 0 ? json_real(v) : json_null();
}

json_t *
membership_changes_json(void)
{
    json_t *arr = json_array();
    uint64_t first = nchanges > CHANGES_KEPT ? nchanges - CHANGES_KEPT : 0;

    /* Newest first: what an operator looks for. */
    for (uint64_t k = nchanges; k > first; k--) {
        const struct change *ch = &changes[(k - 1) % CHANGES_KEPT];
        json_t *j = json_pack("{s:I,s:f,s:s,s:s,s:s,s:s,s:s}", "seq",
                              (json_int_t)ch->seq, "time", ch->time, "pool",
                              ch->pool, "member", ch->member, "op", ch->op,
                              "source", ch->source, "detail", ch->detail);

        json_object_set_new(j, "moved", real_or_null(ch->moved));
        json_object_set_new(j, "optimal", real_or_null(ch->optimal));
        json_object_set_new(j, "immediate", real_or_null(ch->immediate));
        json_array_append_new(arr, j);
    }
    return json_pack("{s:I,s:o}", "total", (json_int_t)nchanges, "changes",
                     arr);
}

/* ---- events: one log line and one change-log entry each ----------------- */

/* With failover and error an unusable member keeps its ring points, and
 * the data path skips or refuses it: say where its clients go. */
static const char *
traffic_note(const struct pool *p, const struct server *s)
{
    if (server_usable(s) || s->pool == NULL)
        return "";
    if (migration_is_leaving(p, s->name))
        return "; its keys move to their new owners, requests follow them";
    if (p->cfg.on_failure == CONF_ON_FAILURE_FAILOVER)
        return "; its clients fail over to their next members";
    if (p->cfg.on_failure == CONF_ON_FAILURE_ERROR)
        return "; its clients are refused (on_failure: error)";
    return "";
}

/*
 * One line per event, what "moved" means everywhere: the fraction of the
 * key space whose member for NEW connections changed with the publication
 * <chg> (the routing views of its two snapshots, from the builder), and
 * <s>'s share of that view before and after. <eventual> (>= 0) adds what
 * moves once every ramp is done, when it differs.
 *   pool web: member web-2 (127.0.0.1:9002) up -> down: 3 checks failed;
 *   share 0.331 -> 0.000000; moved 0.331 of the keys (v7)
 */
void
membership_event_log(const struct pool *p, const struct server *s,
                     const char *name, const char *what,
                     const struct pool_change *chg, double eventual)
{
    double now = chg != NULL && chg->to != NULL ? chg->to->moved : -1;
    unsigned long long v = chg && chg->to ? chg->to->version : 0;
    char mv[160];

    if (now < 0)
        snprintf(mv, sizeof(mv),
                 "moved: not comparable (the algorithm or "
                 "hash changed)");
    else if (eventual >= 0 && eventual - now > 1e-9)
        snprintf(mv, sizeof(mv), "moved %.6f of the keys, %.6f once ramped",
                 now, eventual);
    else
        snprintf(mv, sizeof(mv), "moved %.6f of the keys", now);
    if (name != NULL)
        log_info("pool %s: member %s (%s) %s%s%s; share %.6f -> %.6f; %s "
                 "(v%llu)%s",
                 p->name, name, s ? s->addr.text : "-", what,
                 s && s->reason[0] ? ": " : "", s ? s->reason : "",
                 pool_snapshot_routing_share(chg ? chg->from : NULL, name),
                 pool_snapshot_routing_share(chg ? chg->to : NULL, name), mv, v,
                 s ? traffic_note(p, s) : "");
    else
        log_info("pool %s: %s; %s (v%llu)", p->name, what, mv, v);
}

/* An observed event of a member (health, ramp), waiting for the
 * publication that makes it live. */
struct event {
    struct server *s; /* (ref held) */
    char op[32];
    char what[160];
};

static void
event_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    struct event *ev = arg;

    if (chg != NULL) {
        double before = pool_snapshot_routing_share(chg->from, ev->s->name);
        double after = pool_snapshot_routing_share(chg->to, ev->s->name);
        json_t *rep =
            json_pack("{s:f,s:f,s:f}", "moved", chg->to->moved, "optimal",
                      fabs(after - before), "immediate", chg->to->moved);

        membership_event_log(p, ev->s, ev->s->name, ev->what, chg, -1);
        membership_change_log(p->name, ev->s->name, ev->op, MEMBERSHIP_HEALTH,
                              ev->what, chg->to->moved >= 0 ? rep : NULL);
        json_decref(rep);
    }
    server_unref(ev->s);
    free(ev);
}

/* Log and enter <s>'s event once it is live. */
static void
event(struct pool *p, struct server *s, const char *op, const char *what)
{
    struct event *ev = calloc(1, sizeof(*ev));

    if (ev == NULL) {
        log_error("pool %s: member %s %s (out of memory: not reported)",
                  p->name, s->name, what);
        return;
    }
    server_ref(s);
    ev->s = s;
    snprintf(ev->op, sizeof(ev->op), "%s", op);
    snprintf(ev->what, sizeof(ev->what), "%s", what);
    if (pool_on_published(p, event_published, ev) != 0) {
        server_unref(s);
        free(ev);
    }
}

void
membership_health(struct server *s, int health, const char *reason)
{
    struct pool *p = s->pool;
    int old, now;
    char what[96];

    if (p == NULL)
        return;
    old = atomic_load(&s->state);
    if (server_set_health(s, health, reason) != 1)
        return;
    now = atomic_load(&s->state);
    if (now == SERVER_UP && s->ramping)
        snprintf(what, sizeof(what), "%s -> up, ramping over %ums",
                 server_state_name(old), p->cfg.slow_start_ms);
    else
        snprintf(what, sizeof(what), "%s -> %s", server_state_name(old),
                 server_state_name(now));
    event(p, s, server_health_name(health), what);
}

static void
ramp_done(struct pool *p, struct server *s, void *arg)
{
    (void)arg;
    event(p, s, "ramp done", "ramp done");
}

static void
membership_tick(uint64_t now_ms, void *arg)
{
    (void)arg;
    pool_tick(now_ms, ramp_done, NULL);
}

void
membership_set_remote(const struct membership_remote *r)
{
    if (r != NULL)
        membership_shared.remote = *r;
    else
        memset(&membership_shared.remote, 0, sizeof(membership_shared.remote));
}

bool
membership_remote_owns(const struct pool *p)
{
    return membership_shared.remote.owns != NULL &&
           membership_shared.remote.owns(p);
}

static void membership_migration_save(const char *pool, json_t *m);
static void membership_migration_leave(struct pool *p, const char *name);

int
membership_init(void)
{
    static const struct migration_host host = {
        .save = membership_migration_save,
        .leave = membership_migration_leave,
    };

    migration_set_host(&host);
    return control_tick_add(membership_tick, NULL);
}

/* ---- the state file ------------------------------------------------------ */

void
membership_state_free(void)
{
    state_destroy(membership_shared.state);
    membership_shared.state = NULL;
    membership_state_abandon();
    membership_shared.state_loaded = false;
    free(membership_shared.state_file);
    membership_shared.state_file = NULL;
    for (size_t i = 0; i < ncounts; i++)
        free(counts[i].name);
    free(counts);
    counts = NULL;
    ncounts = 0;
}

json_t *
membership_state_json(void)
{
    json_t *j = membership_shared.state
                    ? state_json(membership_shared.state)
                    : json_pack("{s:i,s:{}}", "version", 1, "pools");

    json_object_set_new(j, "file",
                        membership_shared.state_file
                            ? json_string(membership_shared.state_file)
                            : json_null());
    json_object_set_new(
        j, "overrides",
        membership_shared.state && membership_shared.running_conf
            ? state_overrides_json(membership_shared.state,
                                   membership_shared.running_conf)
            : json_array());
    return j;
}

/* Record <p>'s membership in the state and write the file. A failed write
 * is logged and reported in <warn>; the change itself stays applied (it
 * is live). 0 or -1. */
int
membership_state_persist(struct pool *p, char *warn, size_t warnlen)
{
    struct state_member *sm;
    char err[400];
    size_t n = 0;
    int rc = 0;

    if (membership_shared.state == NULL ||
        p->cfg.members_from == CONF_MEMBERS_ETCD)
        return 0; /* etcd holds its runtime state */
    sm = calloc(p->nservers ? p->nservers : 1, sizeof(*sm));
    if (sm == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!membership_server_member(s))
            continue;
        sm[n].name = s->name;
        sm[n].address = s->addr.text;
        sm[n].weight = s->weight;
        sm[n].admin = s->admin;
        sm[n].zone = s->zone;
        n++;
    }
    if (state_record(membership_shared.state, p->name, sm, n) != 0) {
        snprintf(err, sizeof(err), "state: %s", strerror(errno));
        rc = -1;
    } else if (membership_shared.state_file != NULL &&
               state_save(membership_shared.state, membership_shared.state_file,
                          err, sizeof(err)) != 0) {
        rc = -1;
    }
out:
    if (rc != 0) {
        log_error("membership: the change is live but not persisted: %s", err);
        snprintf(warn, warnlen, "the change is live but not persisted: %s",
                 err);
    }
    free(sm);
    return rc;
}

/* ---- migrations ---------------------------------------------------------- */

static void
membership_migration_save(const char *pool, json_t *m)
{
    char err[400];

    if (membership_shared.state == NULL)
        return;
    /* a reload being applied commits <pending> over <state>: both */
    if (membership_shared.pending != NULL &&
        state_set_migration(membership_shared.pending, pool, m) != 0)
        log_error("pool %s: migration: cannot keep its state: out of memory",
                  pool);
    if (state_set_migration(membership_shared.state, pool, m) != 0) {
        log_error("pool %s: migration: cannot keep its state: out of memory",
                  pool);
        return;
    }
    if (membership_shared.state_file != NULL &&
        state_save(membership_shared.state, membership_shared.state_file, err,
                   sizeof(err)) != 0)
        log_error("pool %s: migration: its progress is not persisted: %s", pool,
                  err);
}

json_t *
membership_migration_saved(const char *pool)
{
    return membership_shared.state != NULL
               ? state_migration(membership_shared.state, pool)
               : NULL;
}

static void
membership_migration_leave(struct pool *p, const char *name)
{
    char warn[512];
    struct server *s = pool_server_find(p, name);

    if (s == NULL)
        return;
    snprintf(s->reason, sizeof(s->reason), "left: its keys have moved");
    if (pool_member_remove(p, name) != 0) {
        log_error("pool %s: member %s cannot leave: %s", p->name, name,
                  strerror(errno));
        return;
    }
    membership_change_log(p->name, name, "remove", MEMBERSHIP_ADMIN,
                          "left once its keys had moved", NULL);
    log_info("pool %s: member %s left the pool: its keys have moved", p->name,
             name);
    membership_state_persist(p, warn, sizeof(warn));
}

/* ==== a store's members (etcd): membership_apply_remote ===================
 *
 * What the shared store (etcd) holds for a pool, made the pool's: the one
 * place etcd changes who is in a pool. The store's module keeps its own
 * account (which records it ignored and why, the revision); this section
 * does the pool_member_* calls, and the log line, change-log entry and
 * report they make (membership_model_take/_report, membership_reload.c, as
 * a reload's).
 */

static int
remote_member_cmp(const void *key, const void *elem)
{
    const struct membership_remote_member *m = elem;

    return strcmp((const char *)key, m->server->name);
}

static const struct membership_remote_member *
remote_member_find(const struct membership_remote_member *m, size_t n,
                   const char *name)
{
    return n ? bsearch(name, m, n, sizeof(*m), remote_member_cmp) : NULL;
}

/* Member <m> (index <i>) of the store, in <p>: added, or its weight and
 * admin state brought in line. Whether <p> changed. */
static bool
remote_member_apply(struct pool *p, const struct membership_remote_member *m,
                    size_t i, membership_remote_refused_fn *refused, void *arg)
{
    const struct conf_server *cs = m->server;
    struct server *s = pool_server_find(p, cs->name);
    bool changed = false;

    if (s == NULL) {
        if (pool_member_add(p, cs) != 0) {
            refused(i, errno, arg);
            return false;
        }
        if (m->admin != STATE_ADMIN_UP)
            pool_member_set_admin(p, cs->name, m->admin);
        pool_member_ramp_age(p, cs->name, m->age_ms);
        return true;
    }
    if (s->weight != cs->weight) {
        pool_member_set_weight(p, cs->name, cs->weight);
        pool_member_ramp_age(p, cs->name, m->age_ms);
        changed = true;
    }
    if (s->admin != m->admin) {
        pool_member_set_admin(p, cs->name, m->admin);
        changed = true;
    }
    return changed;
}

bool
membership_apply_remote(struct pool *p,
                        const struct membership_remote_member *members,
                        size_t n, const char *verb,
                        membership_remote_refused_fn *refused, void *arg)
{
    struct membership_model *mm = membership_model_take(p);
    bool changed = false;

    /* removals, and members whose address changed (re-added below) */
    for (size_t i = p->nservers; i-- > 0;) {
        struct server *s = p->servers[i];
        const struct membership_remote_member *x =
            remote_member_find(members, n, s->name);

        if (x != NULL && conf_addr_equal(&s->addr, &x->server->addr))
            continue;
        snprintf(s->reason, sizeof(s->reason), "removed in etcd");
        if (pool_member_remove(p, s->name) == 0)
            changed = true;
    }
    for (size_t i = 0; i < n; i++)
        changed |= remote_member_apply(p, &members[i], i, refused, arg);
    /* logged and reported when the ring's members changed; frees <mm> */
    membership_model_report(p, mm, verb);
    return changed;
}

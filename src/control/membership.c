/* membership.c -- the one place that changes who is in a pool and reports
 * it: checks a change whole before applying any of it, answers with the
 * exact migration report, logs one line per event, keeps the change log,
 * and keeps the state file (runtime changes survive restart and reload).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/membership.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "loop/builder.h"
#include "conf/conf.h"
#include "loop/control.h"
#include "base/log.h"
#include "control/migration.h"
#include "model/pool.h"
#include "conf/etcd_codec.h"
#include "model/report.h"
#include "model/state.h"
#include "base/text.h"

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

/*
 * A reload is a membership change too: the ring model of every pool is
 * saved when it starts (membership_state_apply) and compared once it is
 * applied (membership_state_settle, in the same control-loop callback).
 */
struct saved_model {
    char *pool;
    struct chash_config cfg;
    struct chash_member *m; /* names owned */
    size_t n;
};

static struct change changes[CHANGES_KEPT];
static uint64_t nchanges; /* total; the ring above keeps the last ones */
static struct pool_count *counts;
static size_t ncounts;
static struct state *state;   /* the delta the running pools have */
static struct state *pending; /* applied to a config being loaded */
static char *pending_file;    /* its state_file */
static bool state_loaded;     /* the file was read (first load) */
static char *state_file;      /* NULL: changes are not persisted */
static int state_persist(struct pool *p, char *warn, size_t warnlen);
static struct saved_model *saved; /* before a reload */
/* The config the pools run (borrowed from main, which keeps it until the
 * next reload settles), and the one a reload is applying. */
static const struct conf *running_conf;
static const struct conf *pending_conf;
static size_t nsaved;

/* ---- the model of a pool's placement ------------------------------------ */

/*
 * The membership reports of runtime changes compare: the members the
 * operator has in the ring (admin up: drained and maintenance members own
 * nothing new), at their weight and current ramp. Health is left out on
 * purpose: such a report says where keys belong, not which member is up
 * this second (events say that: see event_report).
 */
struct model {
    struct chash_member *m;
    size_t n, cap;
};

static bool
server_member(const struct server *s)
{
    return atomic_load_explicit((_Atomic int *)&s->state,
                                memory_order_relaxed) != SERVER_REMOVED;
}

static int
model_push(struct model *md, const char *name, uint32_t weight, double ramp)
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
static int
model_build(const struct pool *p, const char *skip, struct model *md)
{
    memset(md, 0, sizeof(*md));
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!server_member(s) || s->admin != STATE_ADMIN_UP)
            continue;
        if (skip != NULL && strcmp(s->name, skip) == 0)
            continue;
        if (model_push(md, s->name, s->weight, s->ramp) != 0)
            return -1;
    }
    return 0;
}

/* The ramp a member entering the ring starts with. */
static double
entry_ramp(const struct pool *p)
{
    return p->cfg.slow_start_ms > 0 && p->cfg.ring.algo != CHASH_ALGO_JUMP
               ? 0.0
               : 1.0;
}

/* Does a change of <p>'s members move its data (migration: copy)? */
static bool
pool_copies(const struct pool *p)
{
    return p->cfg.migration == CONF_MIGRATION_COPY;
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
static bool
pool_hides(const struct pool *p)
{
    return (p->cfg.mode == CONF_MODE_REDIS ||
            p->cfg.mode == CONF_MODE_MEMCACHE) &&
           p->cfg.migration == CONF_MIGRATION_OFF && p->cfg.replicas <= 1;
}

/* Is the pool's distribution a ring libchash can compare? */
static bool
pool_comparable(const struct pool *p)
{
    return p->cfg.distribution >= 0 && p->cfg.distribution < CHASH_ALGO_COUNT;
}

static double
json_num(const json_t *j, double dflt)
{
    return json_is_number(j) ? json_number_value(j) : dflt;
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

static void
change_log(const char *pool, const char *member, const char *op, int source,
           const char *detail, const json_t *report)
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
    ch->moved = json_num(json_object_get(report, "moved"), -1);
    ch->optimal = json_num(json_object_get(report, "optimal"), -1);
    ch->immediate = json_num(json_object_get(report, "immediate"), -1);
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
static void
event_log(const struct pool *p, const struct server *s, const char *name,
          const char *what, const struct pool_change *chg, double eventual)
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

        event_log(p, ev->s, ev->s->name, ev->what, chg, -1);
        change_log(p->name, ev->s->name, ev->op, MEMBERSHIP_HEALTH, ev->what,
                   chg->to->moved >= 0 ? rep : NULL);
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

/* The shared store of members (etcd), while it runs. */
static struct membership_remote remote;

void
membership_set_remote(const struct membership_remote *r)
{
    if (r != NULL)
        remote = *r;
    else
        memset(&remote, 0, sizeof(remote));
}

static bool
remote_owns(const struct pool *p)
{
    return remote.owns != NULL && remote.owns(p);
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

/* The model of pool <p> now, in <sm> (names owned, ramps at 1). 0 or
 * -1. */
static int
saved_one(struct pool *p, struct saved_model *sm)
{
    struct model md;

    memset(sm, 0, sizeof(*sm));
    if (model_build(p, NULL, &md) != 0) {
        free(md.m);
        return -1;
    }
    sm->pool = strdup(p->name);
    sm->cfg = p->cfg.ring;
    sm->m = md.m;
    sm->n = md.n;
    for (size_t k = 0; k < md.n; k++) {
        md.m[k].name = strdup(md.m[k].name);
        md.m[k].ramp = 1.0;
    }
    return 0;
}

static void
saved_one_free(struct saved_model *sm)
{
    for (size_t k = 0; k < sm->n; k++)
        free((char *)sm->m[k].name);
    free(sm->m);
    free(sm->pool);
}

static void
saved_free(void)
{
    for (size_t i = 0; i < nsaved; i++)
        saved_one_free(&saved[i]);
    free(saved);
    saved = NULL;
    nsaved = 0;
}

static void
saved_take(void)
{
    saved_free();
    if (pool_count() == 0)
        return;
    saved = calloc(pool_count(), sizeof(*saved));
    if (saved == NULL)
        return; /* the reload is simply not logged as a change */
    for (size_t i = 0; i < pool_count(); i++) {
        if (saved_one(pool_at(i), &saved[nsaved]) != 0) {
            saved_one_free(&saved[nsaved]);
            continue;
        }
        nsaved++;
    }
}

static const struct chash_member *
model_find(const struct chash_member *m, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].name != NULL && strcmp(m[i].name, name) == 0)
            return &m[i];
    return NULL;
}

/* Append to <buf> at *<len>, truncating at <cap>. */
static void __attribute__((format(printf, 4, 5)))
append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
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

/* ---- reports on the builder thread --------------------------------------- */

/*
 * A migration report computed on the builder thread (report_migration
 * builds four rings: seconds for millions of points). The member lists
 * are the job's own copies (names duplicated): members may leave their
 * pool meanwhile. <then> runs on the control thread and frees the job
 * (report_job_free).
 */
struct report_job {
    struct builder_job job;
    struct chash_config cfg;
    struct chash_member *before, *after;
    size_t nb, na;
    /* zone_policy: hierarchical: every member's zone by name (a copy of
     * the pool's, and a joining member's); nz 0: flat */
    char **znames, **zzones;
    size_t nz;
    struct ring_zone_weight zw[RING_ZONE_WEIGHTS_MAX];
    size_t nzw;
    char *changed;  /* the member the report is about, or NULL */
    json_t *report; /* the result, or NULL with <err> */
    char err[256];
    void (*then)(struct report_job *rj);
    /* migration: copy pools: the members' key counts, asked on the
     * builder thread (never the control thread) */
    struct migration_probe probe;
    char **addrs;  /* [probe.n] owned */
    char *auth;    /* owned */
    int64_t *keys; /* [probe.n] */
    int joiner;    /* index of a joining member, -1: none */
    int leaver;    /* index of a member removed at once, -1: none */
    /* a pool that does not move data (redis): the same key counts, to say
     * how many keys the change leaves out of reach */
    bool counting;
    char **names;       /* [probe.n] owned: the member at addrs[i] */
    double keys_moving; /* report_keys_leaving's figure */
    bool keys_known;    /* ... when every count needed was answered */
};

static void
members_free(struct chash_member *m, size_t n)
{
    for (size_t i = 0; m != NULL && i < n; i++)
        free((char *)m[i].name);
    free(m);
}

/* A copy of <m>[0..<n>) with its names duplicated, or NULL. */
static struct chash_member *
members_copy(const struct chash_member *m, size_t n)
{
    struct chash_member *c = calloc(n ? n : 1, sizeof(*c));

    for (size_t i = 0; c != NULL && i < n; i++) {
        c[i] = m[i];
        c[i].name = strdup(m[i].name);
        if (c[i].name == NULL) {
            members_free(c, i);
            c = NULL;
        }
    }
    return c;
}

static void
probe_free(struct report_job *rj)
{
    for (size_t i = 0; rj->addrs != NULL && i < rj->probe.n; i++)
        free(rj->addrs[i]);
    for (size_t i = 0; rj->names != NULL && i < rj->probe.n; i++)
        free(rj->names[i]);
    free(rj->addrs);
    free(rj->names);
    free(rj->auth);
    free(rj->keys);
    rj->addrs = NULL;
    rj->names = NULL;
    rj->counting = false;
    rj->auth = NULL;
    rj->keys = NULL;
    rj->probe.n = 0;
}

static void
report_job_free(struct report_job *rj)
{
    probe_free(rj);
    members_free(rj->before, rj->nb);
    members_free(rj->after, rj->na);
    for (size_t i = 0; i < rj->nz; i++) {
        free(rj->znames[i]);
        free(rj->zzones[i]);
    }
    free(rj->znames);
    free(rj->zzones);
    free(rj->changed);
    json_decref(rj->report);
    free(rj);
}

/* The zones of <m>[0..<n>) from <rj>'s table, or NULL (flat, or a name
 * without a zone: <rj>->err says so). */
static const char **
zones_of(struct report_job *rj, const struct chash_member *m, size_t n)
{
    const char **z = calloc(n ? n : 1, sizeof(*z));

    for (size_t i = 0; z != NULL && i < n; i++) {
        for (size_t k = 0; k < rj->nz && z[i] == NULL; k++)
            if (strcmp(rj->znames[k], m[i].name) == 0)
                z[i] = rj->zzones[k];
        if (z[i] == NULL) {
            snprintf(rj->err, sizeof(rj->err), "member %s has no zone",
                     m[i].name);
            free(z);
            return NULL;
        }
    }
    return z;
}

static void
report_work(struct builder_job *job)
{
    struct report_job *rj = (struct report_job *)job;
    const char **bz = NULL, **az = NULL;

    if (rj->nz > 0 && ((bz = zones_of(rj, rj->before, rj->nb)) == NULL ||
                       (az = zones_of(rj, rj->after, rj->na)) == NULL)) {
        free(bz);
        return; /* rj->report NULL: refused with rj->err */
    }
    {
        struct report_zones z = {bz, az, rj->zw, rj->nzw};

        rj->report = report_migration_zoned(
            &rj->cfg, rj->before, rj->nb, rj->after, rj->na,
            rj->nz > 0 ? &z : NULL, rj->changed, rj->err, sizeof(rj->err));
        if (rj->report != NULL && rj->probe.n > 0)
            migration_probe(&rj->probe);
        if (rj->report != NULL && rj->counting)
            rj->keys_known =
                report_keys_leaving(&rj->cfg, rj->before, rj->nb,
                                    rj->nz > 0 ? &z : NULL, rj->report,
                                    (const char *const *)rj->names, rj->keys,
                                    rj->probe.n, &rj->keys_moving) == 0;
    }
    free(bz);
    free(az);
}

static void
report_done(struct builder_job *job)
{
    struct report_job *rj = (struct report_job *)job;

    if (job->cancelled && rj->report == NULL)
        snprintf(rj->err, sizeof(rj->err), "chashd is stopping");
    rj->then(rj);
}

/* Fill <rj>'s inputs: <cfg>, copies of both models, <changed>. 0 or -1
 * (out of memory). */
/*
 * A report of <p> from members <b> to <a>. In a pool with zones, the
 * zones of its servers go with it (and <jname> in zone <jzone>: a member
 * joining). 0 or -1 (out of memory).
 */
static int
report_job_init(struct report_job *rj, const struct pool *p,
                const struct chash_member *b, size_t nb,
                const struct chash_member *a, size_t na, const char *changed,
                const char *jname, const char *jzone)
{
    rj->job.work = report_work;
    rj->job.done = report_done;
    rj->cfg = p->cfg.ring;
    if (p->cfg.zone_policy == CONF_ZONE_HIERARCHICAL) {
        size_t cap = p->nservers + 1;

        memcpy(rj->zw, p->cfg.zone_weights, sizeof(rj->zw));
        rj->nzw = p->cfg.nzone_weights;

        rj->znames = calloc(cap, sizeof(*rj->znames));
        rj->zzones = calloc(cap, sizeof(*rj->zzones));
        if (rj->znames == NULL || rj->zzones == NULL)
            return -1;
        for (size_t i = 0; i <= p->nservers; i++) {
            const char *n = i < p->nservers ? p->servers[i]->name : jname;
            const char *z = i < p->nservers ? p->servers[i]->zone : jzone;

            if (n == NULL || z == NULL)
                continue;
            rj->znames[rj->nz] = strdup(n);
            rj->zzones[rj->nz] = strdup(z);
            if (rj->znames[rj->nz] == NULL || rj->zzones[rj->nz] == NULL) {
                free(rj->znames[rj->nz]);
                free(rj->zzones[rj->nz]);
                return -1;
            }
            rj->nz++;
        }
    }
    rj->nb = nb;
    rj->na = na;
    rj->before = members_copy(b, nb);
    rj->after = members_copy(a, na);
    rj->changed = changed != NULL ? strdup(changed) : NULL;
    if (rj->before == NULL || rj->after == NULL ||
        (changed != NULL && rj->changed == NULL))
        return -1;
    return 0;
}

/*
 * A pool that does not move data: ask its redis members for their key
 * counts (DBSIZE, on the builder thread with the report), so that the
 * report says about how many keys a change leaves out of reach
 * (report_keys_leaving). memcache has no such count: nothing is asked.
 * 0 or -1 (out of memory).
 */
static int
count_setup(struct report_job *rj, const struct pool *p)
{
    probe_free(rj);
    rj->joiner = rj->leaver = -1;
    if (p->cfg.mode != CONF_MODE_REDIS)
        return 0;
    rj->addrs = calloc(p->nservers + 1, sizeof(*rj->addrs));
    rj->names = calloc(p->nservers + 1, sizeof(*rj->names));
    rj->keys = calloc(p->nservers + 1, sizeof(*rj->keys));
    if (rj->addrs == NULL || rj->names == NULL || rj->keys == NULL)
        return -1;
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];
        size_t n = rj->probe.n;

        if (!server_member(s))
            continue;
        rj->addrs[n] = strdup(s->addr.text);
        rj->names[n] = strdup(s->name);
        rj->probe.n++; /* probe_free frees what was taken */
        if (rj->addrs[n] == NULL || rj->names[n] == NULL)
            return -1;
    }
    if (p->cfg.redis_auth != NULL &&
        (rj->auth = strdup(p->cfg.redis_auth)) == NULL)
        return -1;
    rj->probe.addresses = (const char **)rj->addrs;
    rj->probe.auth = rj->auth;
    rj->probe.db = p->cfg.redis_db;
    rj->probe.flush = -1; /* counted, never emptied */
    rj->probe.timeout_ms = 1000;
    rj->probe.keys = rj->keys;
    rj->counting = true;
    return 0;
}

/*
 * What a change of pool <p>, which does not move data, leaves out of
 * reach, as a sentence into <buf>: "22.0654% of the keyspace (about 44 of
 * the pool's 200 keys) changes owner; its keys stay on their old members
 * and become unreachable: this pool does not move data (mode redis,
 * migration: off, replicas: 1)".
 * <rep> holds the figures (unreachable_report); <counted>: the members
 * were asked for their key counts.
 */
static void
unreachable_text(const struct pool *p, const json_t *rep, bool counted,
                 char *buf, size_t cap)
{
    const json_t *u = json_object_get(rep, "unreachable");
    const json_t *k = json_object_get(rep, "unreachable_keys");
    const json_t *t = json_object_get(rep, "keys_total");
    size_t len = 0;

    buf[0] = '\0';
    if (json_is_number(u))
        append(buf, cap, &len, "%.4f%% of the keyspace",
               100 * json_number_value(u));
    else if (!pool_comparable(p))
        append(buf, cap, &len,
               "an unknown share of the keyspace (distribution %s is not "
               "consistent hashing: usually most of it)",
               conf_dist_name(p->cfg.distribution));
    else
        append(buf, cap, &len,
               "an unknown share of the keyspace (the report could not be "
               "computed)");
    if (json_is_integer(k) && json_is_integer(t))
        append(buf, cap, &len, " (about %lld of the pool's %lld keys)",
               (long long)json_integer_value(k),
               (long long)json_integer_value(t));
    else if (json_is_integer(k))
        append(buf, cap, &len, " (about %lld keys)",
               (long long)json_integer_value(k));
    else if (counted && json_is_number(u))
        append(buf, cap, &len,
               " (how many keys is not known: a member did not answer "
               "DBSIZE)");
    append(buf, cap, &len,
           " changes owner; its keys stay on their old members and become "
           "unreachable: this pool does not move data (mode %s, migration: "
           "off, replicas: 1)",
           conf_mode_name(p->cfg.mode));
}

/*
 * The report <rep> of a change of pool <p>, which does not move data (a
 * dry run's too), with the key counts of <rj> (NULL: none asked): add
 * what the change leaves out of reach (the fields membership_change
 * lists). <force>: the change was asked with "force". Returns whether
 * applying it needs "force" (it moves some of the key space).
 */
static bool
unreachable_report(const struct pool *p, json_t *rep,
                   const struct report_job *rj, bool force)
{
    const json_t *mv = json_object_get(rep, "moved");
    json_t *total = json_null();
    char text[600];

    if (json_is_number(mv) && json_number_value(mv) <= 0) {
        json_object_set_new(rep, "unreachable", json_real(0));
        json_object_set_new(rep, "force_required", json_false());
        return false;
    }
    json_object_set_new(rep, "unreachable",
                        json_is_number(mv) ? json_real(json_number_value(mv))
                                           : json_null());
    if (rj != NULL && rj->counting) {
        uint64_t sum = 0;
        bool known = true;

        for (size_t i = 0; i < rj->probe.n; i++) {
            known = known && rj->keys[i] >= 0;
            sum += rj->keys[i] > 0 ? (uint64_t)rj->keys[i] : 0;
        }
        if (known)
            total = json_integer((json_int_t)sum);
    }
    json_object_set_new(rep, "keys_total", total);
    json_object_set_new(rep, "unreachable_keys",
                        rj != NULL && rj->counting && rj->keys_known &&
                                json_is_number(mv)
                            ? json_integer((json_int_t)llround(rj->keys_moving))
                            : json_null());
    unreachable_text(p, rep, rj != NULL && rj->counting, text, sizeof(text));
    json_object_set_new(rep, "data_warning", json_string(text));
    json_object_set_new(rep, "force_required", json_true());
    json_object_set_new(rep, "forced", json_boolean(force));
    return true;
}

/* A job that only completes, in order after every job before it. */
struct then_job {
    struct builder_job job;
    void (*then)(void *arg);
    void *arg;
};

static void
then_work(struct builder_job *job)
{
    (void)job;
}

static void
then_done(struct builder_job *job)
{
    struct then_job *tj = (struct then_job *)job;

    tj->then(tj->arg);
    free(tj);
}

/* Call <then>(<arg>) once every job submitted so far has completed. */
static void
after_jobs(void (*then)(void *arg), void *arg)
{
    struct then_job *tj = calloc(1, sizeof(*tj));

    if (tj == NULL) {
        then(arg);
        return;
    }
    tj->job.work = then_work;
    tj->job.done = then_done;
    tj->then = then;
    tj->arg = arg;
    builder_submit(&tj->job);
}

/* ---- reloads ------------------------------------------------------------- */

/* The report of one pool's reload. */
struct reload_report {
    struct report_job rj; /* first: the job's address is ours */
    char pool[128];
    char detail[128]; /* "+web-4 -web-2 ~web-1" */
    char what[128];   /* "reloaded: 3 members (+1 -1, 0 reweighted)" */
    char op[16];      /* "reload", "etcd" */
    int source;       /* enum membership_source */
    bool placing;     /* the ring's algorithm or hash changed too */
};

/*
 * A reload (or etcd's records) changed the members of pool <p>, which
 * does not move data (pool_hides): say what it left out of reach, with
 * the figure of its report <rep> (NULL, or "moved" null: not comparable).
 * <placing>: the pool also places keys another way now (its algorithm or
 * hash changed). Not refused: the file (or etcd) says what the operator
 * wants; the warning says what it costs.
 */
static void
reload_warn(const struct pool *p, const char *what, const json_t *rep,
            bool placing)
{
    json_t *fig;
    char text[600];

    if (placing) {
        log_warn("pool %s: %s: the pool places keys another way now (its "
                 "algorithm or hash changed): most of the keyspace changes "
                 "owner; its keys stay on their old members and become "
                 "unreachable: this pool does not move data (mode %s, "
                 "migration: off, replicas: 1)",
                 p->name, what, conf_mode_name(p->cfg.mode));
        return;
    }
    fig = json_pack("{s:O?}", "moved", json_object_get(rep, "moved"));
    if (fig == NULL)
        return;
    if (unreachable_report(p, fig, NULL, false)) {
        unreachable_text(p, fig, false, text, sizeof(text));
        log_warn("pool %s: %s: %s", p->name, what, text);
    }
    json_decref(fig);
}

static void
reload_reported(struct report_job *rj)
{
    struct reload_report *rr = (struct reload_report *)rj;
    struct pool *p = pool_find(rr->pool);
    const struct pool_snapshot *snap = p ? pool_snapshot(p) : NULL;
    double moved = json_num(json_object_get(rj->report, "moved"), -1);

    if (moved >= 0)
        log_info("pool %s: %s; moved %.6f of the keys (optimal %.6f) "
                 "(v%llu)",
                 rr->pool, rr->what, moved,
                 json_num(json_object_get(rj->report, "optimal"), -1),
                 (unsigned long long)(snap ? snap->version : 0));
    else
        log_info("pool %s: %s; moved: not comparable (%s)", rr->pool, rr->what,
                 rj->err[0] ? rj->err : "the algorithm or hash changed");
    if (p != NULL && pool_hides(p))
        reload_warn(p, rr->what, rj->report, rr->placing);
    change_log(rr->pool, "*", rr->op, rr->source, rr->detail, rj->report);
    report_job_free(rj);
}

/*
 * Report what changed in pool <p>'s ring membership since the model <sm>
 * was saved: logged ("<verb>: 3 members (+1 -1, 0 reweighted)") and
 * entered in the change log as <op> by <source>, with the exact report
 * computed on the builder thread. Nothing when nothing changed.
 */
static void
model_compare(struct pool *p, const struct saved_model *sm, const char *op,
              int source, const char *verb)
{
    struct reload_report *rr;
    char detail[128] = "";
    struct model md;
    size_t len = 0, added = 0, removed = 0, reweighted = 0;

    if (model_build(p, NULL, &md) != 0) {
        free(md.m);
        return;
    }
    /* "+added -removed ~reweighted", as far as it fits */
    for (size_t k = 0; k < md.n; k++) {
        const struct chash_member *o = model_find(sm->m, sm->n, md.m[k].name);
        if (o == NULL || o->weight != md.m[k].weight)
            append(detail, sizeof(detail), &len, "%s%c%s", len ? " " : "",
                   o == NULL ? '+' : '~', md.m[k].name);
        added += o == NULL;
        reweighted += o != NULL && o->weight != md.m[k].weight;
        md.m[k].ramp = 1.0;
    }
    for (size_t k = 0; k < sm->n; k++)
        if (model_find(md.m, md.n, sm->m[k].name) == NULL) {
            append(detail, sizeof(detail), &len, "%s-%s", len ? " " : "",
                   sm->m[k].name);
            removed++;
        }
    /* The same members placed another way (algorithm, hash) move keys
     * too: no report (nothing to compare), but a pool that does not move
     * data loses their reach all the same. */
    if (detail[0] == '\0' && pool_hides(p) &&
        memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) != 0)
        reload_warn(p, verb, NULL, true);
    rr = detail[0] != '\0' ? calloc(1, sizeof(*rr)) : NULL;
    if (rr == NULL) {
        free(md.m);
        return;
    }
    snprintf(rr->pool, sizeof(rr->pool), "%s", p->name);
    snprintf(rr->detail, sizeof(rr->detail), "%s", detail);
    snprintf(rr->op, sizeof(rr->op), "%s", op);
    rr->source = source;
    rr->placing = memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) != 0;
    snprintf(rr->what, sizeof(rr->what),
             "%s: %zu members (+%zu -%zu, %zu reweighted)", verb, md.n, added,
             removed, reweighted);
    rr->rj.then = reload_reported;
    if (report_job_init(&rr->rj, p, sm->m, sm->n, md.m, md.n, NULL, NULL,
                        NULL) != 0 ||
        !pool_comparable(p) ||
        memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) != 0) {
        /* No report: log the change without figures, now. */
        reload_reported(&rr->rj);
    } else {
        builder_submit(&rr->rj.job);
    }
    free(md.m);
}

/* Report each pool whose ring membership the reload changed, from the
 * builder thread (saved models against the pools now). */
static void
saved_compare(void)
{
    for (size_t i = 0; i < nsaved; i++) {
        struct pool *p = pool_find(saved[i].pool ? saved[i].pool : "");

        if (p != NULL)
            model_compare(p, &saved[i], "reload", MEMBERSHIP_RELOAD,
                          "reloaded");
    }
    saved_free();
}

struct membership_model {
    struct saved_model sm;
};

struct membership_model *
membership_model_take(struct pool *p)
{
    struct membership_model *mm = calloc(1, sizeof(*mm));

    if (mm != NULL && saved_one(p, &mm->sm) != 0) {
        saved_one_free(&mm->sm);
        free(mm);
        mm = NULL;
    }
    return mm;
}

void
membership_model_report(struct pool *p, struct membership_model *mm,
                        const char *verb)
{
    if (mm == NULL)
        return;
    model_compare(p, &mm->sm, "etcd", MEMBERSHIP_ETCD, verb);
    saved_one_free(&mm->sm);
    free(mm);
}

/* A copy of <st>'s delta (not its bases), or NULL. */
static struct state *
state_copy(const struct state *st)
{
    struct state *cp = state_create();
    json_t *j = state_json(st);
    char *text = json_dumps(j, JSON_COMPACT);

    json_decref(j);
    if (cp == NULL || text == NULL ||
        state_load_string(cp, "state", text, NULL, 0) != 0) {
        state_destroy(cp);
        cp = NULL;
    }
    free(text);
    return cp;
}

/* The text of an override's value ("3", "drain", "127.0.0.1:9004 weight
 * 2") into <buf>. */
static void
override_value(const json_t *v, char *buf, size_t len)
{
    const char *a = json_string_value(json_object_get(v, "address"));

    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_object(v))
        snprintf(buf, len, "%s weight %lld", a ? a : "?",
                 (long long)json_integer_value(json_object_get(v, "weight")));
    else
        snprintf(buf, len, "-");
}

/*
 * Say, one line per member, where the state file overrides what <conf>
 * writes: an operator who edits a weight in the file and reloads must not
 * wonder why it did not take (`chash ctl state --reset` drops them).
 */
static void
overrides_log(const struct state *st, const struct conf *conf)
{
    json_t *all = state_overrides_json(st, conf);
    size_t i = 0;

    while (all != NULL && i < json_array_size(all)) {
        const json_t *first = json_array_get(all, i);
        const char *pool = json_string_value(json_object_get(first, "pool"));
        const char *member =
            json_string_value(json_object_get(first, "member"));
        char line[1024] = "", cv[300], rv[300];
        size_t len = 0;

        /* the entries of one member are consecutive */
        for (; i < json_array_size(all); i++) {
            const json_t *e = json_array_get(all, i);
            const char *what = json_string_value(json_object_get(e, "what"));

            if (strcmp(json_string_value(json_object_get(e, "pool")), pool) ||
                strcmp(json_string_value(json_object_get(e, "member")), member))
                break;
            override_value(json_object_get(e, "config"), cv, sizeof(cv));
            override_value(json_object_get(e, "runtime"), rv, sizeof(rv));
            if (strcmp(what, "added") == 0)
                append(line, sizeof(line), &len,
                       "%sadded at run time (%s), not in the config",
                       len ? "; " : "", rv);
            else if (strcmp(what, "removed") == 0)
                append(line, sizeof(line), &len,
                       "%sremoved at run time, the config has it (%s)",
                       len ? "; " : "", cv);
            else
                append(line, sizeof(line), &len,
                       "%s%s %s in the config, %s at run time", len ? "; " : "",
                       what, cv, rv);
        }
        log_warn("pool %s: member %s: the state file overrides the config: "
                 "%s (chash ctl state --reset %s %s drops it)",
                 pool, member, line, pool, member);
    }
    json_decref(all);
}

/*
 * The delta is applied to a COPY of the state (<pending>), committed by
 * membership_state_settle() once the pools run the new config: a reload
 * refused after this call (a listener that cannot bind) must leave the
 * running state, whose bases are the running config's servers, untouched.
 */
int
membership_state_apply(struct conf *conf, char *err, size_t errlen)
{
    struct state *next;
    char warn[2048];

    if (state == NULL) {
        state = state_create();
        if (state == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (!state_loaded && conf->state_file != NULL) {
        if (state_load(state, conf->state_file, err, errlen) != 0)
            return -1;
        state_loaded = true;
    }
    next = state_copy(state);
    if (next == NULL) {
        snprintf(err, errlen, "state: out of memory");
        return -1;
    }
    if (state_apply(next, conf, warn, sizeof(warn)) != 0) {
        snprintf(err, errlen, "state: %s", strerror(errno));
        state_destroy(next);
        return -1;
    }
    if (warn[0] != '\0')
        log_warn("state %s: %s",
                 conf->state_file ? conf->state_file : "(memory)", warn);
    overrides_log(next, conf);
    state_destroy(pending);
    pending = next;
    pending_conf = conf;
    saved_take();
    free(pending_file);
    pending_file = conf->state_file ? strdup(conf->state_file) : NULL;
    return 0;
}

void
membership_state_abandon(void)
{
    state_destroy(pending);
    pending = NULL;
    pending_conf = NULL;
    free(pending_file);
    pending_file = NULL;
    saved_free();
}

void
membership_state_settle(void (*then)(void *arg), void *arg)
{
    bool committed = false;

    if (pending != NULL) {
        state_destroy(state);
        state = pending;
        pending = NULL;
        free(state_file);
        state_file = pending_file;
        pending_file = NULL;
        running_conf = pending_conf;
        pending_conf = NULL;
        committed = true;
    }
    for (size_t i = 0; state != NULL && i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        if (p->cfg.members_from == CONF_MEMBERS_ETCD)
            continue; /* the admin states are etcd's */
        for (size_t k = 0; k < p->nservers; k++) {
            struct server *s = p->servers[k];
            int want = state_admin(state, p->name, s->name);

            /* scale-in of a reload: drained until its keys have moved */
            if (migration_is_leaving(p, s->name))
                want = STATE_ADMIN_DRAIN;

            if (server_member(s) && s->admin != want &&
                pool_member_set_admin(p, s->name, want) != 0)
                log_warn("state: pool %s member %s: cannot set %s: %s", p->name,
                         s->name, state_admin_name(want), strerror(errno));
        }
    }
    if (committed)
        saved_compare();
    for (size_t i = 0; state != NULL && i < pool_count(); i++) {
        char warn[512];

        /* a reload's migration: its members (the leaving ones too) are
         * kept, so that a restart finds them to resume */
        if (migration_active(pool_at(i)))
            state_persist(pool_at(i), warn, sizeof(warn));
    }
    if (then != NULL)
        after_jobs(then, arg);
}

void
membership_state_free(void)
{
    state_destroy(state);
    state = NULL;
    membership_state_abandon();
    state_loaded = false;
    free(state_file);
    state_file = NULL;
    for (size_t i = 0; i < ncounts; i++)
        free(counts[i].name);
    free(counts);
    counts = NULL;
    ncounts = 0;
}

json_t *
membership_state_json(void)
{
    json_t *j = state ? state_json(state)
                      : json_pack("{s:i,s:{}}", "version", 1, "pools");

    json_object_set_new(j, "file",
                        state_file ? json_string(state_file) : json_null());
    json_object_set_new(j, "overrides",
                        state && running_conf
                            ? state_overrides_json(state, running_conf)
                            : json_array());
    return j;
}

/* Record <p>'s membership in the state and write the file. A failed write
 * is logged and reported in <warn>; the change itself stays applied (it
 * is live). 0 or -1. */
static int
state_persist(struct pool *p, char *warn, size_t warnlen)
{
    struct state_member *sm;
    char err[400];
    size_t n = 0;
    int rc = 0;

    if (state == NULL || p->cfg.members_from == CONF_MEMBERS_ETCD)
        return 0; /* etcd holds its runtime state */
    sm = calloc(p->nservers ? p->nservers : 1, sizeof(*sm));
    if (sm == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!server_member(s))
            continue;
        sm[n].name = s->name;
        sm[n].address = s->addr.text;
        sm[n].weight = s->weight;
        sm[n].admin = s->admin;
        sm[n].zone = s->zone;
        n++;
    }
    if (state_record(state, p->name, sm, n) != 0) {
        snprintf(err, sizeof(err), "state: %s", strerror(errno));
        rc = -1;
    } else if (state_file != NULL &&
               state_save(state, state_file, err, sizeof(err)) != 0) {
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

/* ---- runtime changes ----------------------------------------------------- */

static int __attribute__((format(printf, 3, 4)))
refuse(struct membership_result *res, int error, const char *fmt, ...)
{
    va_list ap;

    res->error = error;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof(res->message), fmt, ap);
    va_end(ap);
    text_utf8_scrub(res->message);
    return -1;
}

/*
 * A network address must carry exactly one port. The weight is appended
 * to it to parse a `servers:` line, so "127.0.0.1" or "[::1]" would
 * silently become a member on port 1 (the weight read as the port).
 */
static bool
address_has_port(const char *a)
{
    const char *colon;

    if (a[0] == '/')
        return true;
    if (a[0] == '[' && (a = strchr(a, ']')) == NULL)
        return true; /* conf_parse_server names the missing ']' */
    colon = strchr(a, ':');
    return colon != NULL && colon[1] != '\0' && strchr(colon + 1, ':') == NULL;
}

/*
 * Whether <a> ("host:port", "[v6]:port", "/path") names its host
 * numerically. Runtime changes do not resolve names: getaddrinfo() on the
 * control thread would stall health checks, ramps and the API for as long
 * as a resolver takes (seconds, when it is down). Config files may use
 * names: they are resolved when the file is loaded.
 */
static bool
address_numeric(const char *a)
{
    char host[INET6_ADDRSTRLEN + 2];
    unsigned char buf[sizeof(struct in6_addr)];
    const char *end;
    size_t n;

    if (a[0] == '/')
        return true;
    if (a[0] == '[') {
        end = strchr(a, ']');
        if (end == NULL)
            return true; /* malformed: conf_parse_server says why */
        n = (size_t)(end - a - 1);
        if (n >= sizeof(host))
            return false;
        memcpy(host, a + 1, n);
        host[n] = '\0';
        return inet_pton(AF_INET6, host, buf) == 1;
    }
    end = strrchr(a, ':');
    n = end != NULL ? (size_t)(end - a) : strlen(a);
    if (n >= sizeof(host))
        return false;
    memcpy(host, a, n);
    host[n] = '\0';
    return inet_pton(AF_INET, host, buf) == 1;
}

/* A weight a runtime change may give <p>'s members. 0 or -1 (<res>). */
static int
weight_check(const struct pool *p, uint32_t w, struct membership_result *res)
{
    if (w > MEMBERSHIP_MAX_WEIGHT)
        return refuse(res, MEMBERSHIP_EINVAL,
                      "\"weight\" must be an integer in [0, %d]",
                      MEMBERSHIP_MAX_WEIGHT);
    if (p->cfg.ring.algo == CHASH_ALGO_JUMP && w > 1)
        return refuse(res, MEMBERSHIP_EINVAL,
                      "pool %s uses jump, which takes weights 0 or 1 only",
                      p->name);
    return 0;
}

/*
 * A runtime change in progress. Checked at once on the control thread;
 * its migration report computed on the builder thread; then applied,
 * logged, persisted, and answered once the snapshot holding it is
 * published (so a lookup right after the answer sees it).
 */
struct pending {
    struct report_job rj;         /* first: report_job_free frees the whole */
    struct pool *p;               /* (ref held) */
    struct membership_request rq; /* strings point into <name_arg> and
                                     <address_arg> */
    char *name_arg, *address_arg, *zone_arg;
    int source;
    bool dry;
    membership_done_fn *done;
    void *arg;
    struct membership_result res;
    uint64_t placement; /* the pool's placement count when checked */
    unsigned tries;
    /* the plan */
    struct conf_server cs; /* ADD: the member as parsed */
    bool have_cs;
    char name[TEXT_NAME_MAX + 1]; /* the member changed */
    uint32_t weight;              /* UPDATE: the weight and admin wanted */
    int admin;
    bool nothing;      /* UPDATE: already so */
    json_t *overrides; /* RESET: the entries dropped (owned) */
    struct server *s;  /* (ref held) once applied, for the log line */
    char op[32], detail[160], what[192];
    /* migration: copy */
    bool migrate; /* the change moves keys: a migration runs */
    uint64_t keys_total, keys_predicted;
};

static void pending_check(struct pending *pc);
static int probe_check(struct pending *pc);
static int reset_apply(struct pending *pc);
static int points_check(const struct pool *p, const char *name, uint32_t weight,
                        struct membership_result *res);

/* Answer and free <pc>. */
static void
pending_finish(struct pending *pc)
{
    pc->done(&pc->res, pc->arg);
    membership_result_deinit(&pc->res);
    free(pc->name_arg);
    free(pc->address_arg);
    free(pc->zone_arg);
    if (pc->have_cs)
        conf_server_deinit(&pc->cs);
    json_decref(pc->overrides);
    server_unref(pc->s);
    pool_unref(pc->p);
    report_job_free(&pc->rj);
}

static void
report_flags(json_t *rep, bool dry_run, bool applied)
{
    json_object_set_new(rep, "dry_run", json_boolean(dry_run));
    json_object_set_new(rep, "applied", json_boolean(applied));
}

/* Its snapshot is live: log the change (over the routing views of the
 * publication, as every event is) and answer. */
static void
applied_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    struct pending *pc = arg;

    if (pc->migrate && chg != NULL)
        migration_start(p);
    if (chg != NULL)
        event_log(p, pc->s, pc->name, pc->what, chg,
                  json_num(json_object_get(pc->res.report, "moved"), -1));
    pending_finish(pc);
}

/* Apply the checked change. 0 or -1 (<pc>->res says why). */
static int
pending_apply(struct pending *pc)
{
    struct pool *p = pc->p;
    struct server *s = pool_server_find(p, pc->name);
    int old_state = s ? atomic_load(&s->state) : SERVER_REMOVED;
    uint32_t old_weight = s ? s->weight : 0;
    int old_admin = s ? s->admin : STATE_ADMIN_UP;
    int rc = 0;

    if (pc->migrate) {
        char err[512], change[300];

        const char *leaving[] = {pc->name};

        snprintf(change, sizeof(change), "%s %s", pc->op, pc->name);
        if (migration_prepare(
                p, change, leaving,
                pc->rq.op == MEMBERSHIP_REMOVE && pool_copies(p) ? 1 : 0,
                pc->keys_predicted, pc->keys_total, err, sizeof(err)) != 0)
            return refuse(&pc->res, MEMBERSHIP_ECONFLICT, "%s", err);
    }
    if (pc->migrate && pc->rq.op == MEMBERSHIP_REMOVE && pool_copies(p)) {
        /* scale-in: out of the ring now, out of the pool once its keys
         * have moved (migration_prepare named it the one leaving) */
        if (s == NULL ||
            pool_member_set_admin(p, pc->name, STATE_ADMIN_DRAIN) != 0) {
            migration_cancel(p);
            return refuse(&pc->res, MEMBERSHIP_ENOENT,
                          "pool %s: cannot remove %s: %s", p->name, pc->name,
                          strerror(errno));
        }
        snprintf(s->reason, sizeof(s->reason), "leaving: its keys move first");
        snprintf(pc->what, sizeof(pc->what),
                 "leaving (drained; removed once its keys have moved)");
        server_ref(s);
        pc->s = s;
        return 0;
    }
    switch (pc->rq.op) {
    case MEMBERSHIP_ADD:
        rc = pool_member_add(p, &pc->cs);
        s = pool_server_find(p, pc->name);
        snprintf(pc->what, sizeof(pc->what), "added");
        break;
    case MEMBERSHIP_REMOVE:
        if (s == NULL) {
            errno = ENOENT;
            rc = -1;
            break;
        }
        snprintf(s->reason, sizeof(s->reason), "by the operator");
        snprintf(pc->what, sizeof(pc->what), "removed");
        server_ref(s); /* the pool drops its own: kept for the log line */
        pc->s = s;
        rc = pool_member_remove(p, pc->name);
        s = NULL;
        break;
    case MEMBERSHIP_RESET:
        rc = reset_apply(pc);
        snprintf(pc->what, sizeof(pc->what), "runtime overrides dropped (%zu)",
                 json_array_size(pc->overrides));
        s = pc->rq.name ? pool_server_find(p, pc->rq.name) : NULL;
        break;
    case MEMBERSHIP_UPDATE:
        if (s == NULL) {
            errno = ENOENT;
            rc = -1;
            break;
        }
        if (pc->weight != old_weight)
            rc = pool_member_set_weight(p, pc->name, pc->weight);
        if (rc == 0 && pc->admin != old_admin)
            rc = pool_member_set_admin(p, pc->name, pc->admin);
        if (pc->admin != old_admin)
            snprintf(pc->what, sizeof(pc->what), "%s -> %s%s%s",
                     server_state_name(old_state),
                     server_state_name(atomic_load(&s->state)),
                     pc->weight != old_weight ? ", " : "",
                     pc->weight != old_weight ? pc->detail : "");
        else
            snprintf(pc->what, sizeof(pc->what), "%s%s", pc->detail,
                     s->ramping ? ", ramping" : "");
        break;
    }
    if (rc != 0 && pc->migrate)
        migration_cancel(p);
    if (rc != 0)
        return refuse(&pc->res,
                      errno == EEXIST   ? MEMBERSHIP_ECONFLICT
                      : errno == ENOENT ? MEMBERSHIP_ENOENT
                      : errno == EINVAL ? MEMBERSHIP_EINVAL
                                        : MEMBERSHIP_ENOMEM,
                      "pool %s: cannot change %s: %s", p->name, pc->name,
                      strerror(errno));
    if (s != NULL) {
        server_ref(s);
        pc->s = s;
    }
    return 0;
}

/* What etcd said of a write (the remote write's <status>, <rev>, <msg>)
 * into <res>, whose report was computed before the write. */
static void
etcd_result(struct membership_result *res, const char *pool, int status,
            uint64_t rev, const char *msg)
{
    if (status != 0 && status != MEMBERSHIP_WRITTEN_NOT_APPLIED) {
        json_decref(res->report);
        res->report = NULL;
        refuse(res,
               status == 400   ? MEMBERSHIP_EINVAL
               : status == 404 ? MEMBERSHIP_ENOENT
               : status == 409 ? MEMBERSHIP_ECONFLICT
                               : MEMBERSHIP_EUNAVAIL,
               "pool %s: %s", pool, msg);
        return;
    }
    report_flags(res->report, false, true);
    json_object_set_new(res->report, "etcd_revision",
                        json_integer((json_int_t)rev));
    if (status == MEMBERSHIP_WRITTEN_NOT_APPLIED)
        json_object_set_new(res->report, "warning", json_string(msg));
}

/* etcd answered the write of a change (and, when it took, this instance
 * has applied it): answer the caller. */
static void
etcd_written(int status, uint64_t rev, const char *msg, void *arg)
{
    struct pending *pc = arg;

    etcd_result(&pc->res, pc->p->name, status, rev, msg);
    if (status == 0 && pc->migrate && pc->p->mig_view != NULL &&
        pc->res.report != NULL)
        json_object_set_new(
            pc->res.report, "migration",
            json_pack("{s:I,s:I}", "epoch", (json_int_t)pc->p->mig_view->epoch,
                      "keys_predicted", (json_int_t)pc->keys_predicted));
    pending_finish(pc);
}

/* Write <pc>'s checked change to etcd instead of applying it here; with
 * the migration it starts when keys move (migration: copy): every
 * instance runs it from etcd. */
static void
etcd_submit(struct pending *pc)
{
    struct server *s = pool_server_find(pc->p, pc->name);
    struct membership_remote_op op = {.name = pc->name};
    json_t *desc = NULL;
    bool copy = pc->migrate && pool_copies(pc->p);
    bool leave = copy && pc->rq.op == MEMBERSHIP_REMOVE;

    switch (pc->rq.op) {
    case MEMBERSHIP_ADD:
        op.op = 'a';
        op.address = pc->cs.addr.text;
        op.weight = pc->cs.weight;
        break;
    case MEMBERSHIP_REMOVE:
        op.op = 'r';
        if (leave) {
            /* out of the ring now; its record goes once its keys moved */
            op.op = 'u';
            op.state = "drain";
        }
        break;
    case MEMBERSHIP_UPDATE:
        op.op = 'u';
        if (s != NULL && pc->admin != s->admin)
            op.state = state_admin_name(pc->admin);
        if (s != NULL && pc->weight != s->weight)
            op.weight = pc->weight;
        break;
    default:
        etcd_written(409, 0,
                     "etcd holds this pool's members: there is no runtime "
                     "override to reset",
                     pc);
        return;
    }
    if (copy) {
        char change[300];
        const char *leaving[] = {pc->name};

        snprintf(change, sizeof(change), "%s %s", pc->op, pc->name);
        desc = migration_etcd_descriptor(pc->p, change, leaving, leave ? 1 : 0,
                                         pc->keys_predicted, pc->keys_total);
        if (desc == NULL) {
            etcd_written(503, 0, "out of memory", pc);
            return;
        }
    }
    remote.write(pc->p, &op, 1, desc, etcd_written, pc);
    json_decref(desc);
}

/*
 * A change of a pool that does not move data, its report in hand: say
 * what it leaves out of reach, and refuse it without "force" -- the one
 * refusal that keeps its report, whose figures say why. Whether refused.
 */
static bool
hides_refused(struct pending *pc)
{
    struct pool *p = pc->p;

    if (!pool_hides(p) || pc->nothing ||
        !unreachable_report(p, pc->res.report, &pc->rj, pc->rq.force) ||
        pc->dry || pc->rq.force)
        return false;
    refuse(&pc->res, MEMBERSHIP_ECONFLICT,
           "pool %s: %s %s refused: %s; nothing was changed; \"force\": "
           "true applies it anyway",
           p->name, pc->op, pc->name,
           json_string_value(json_object_get(pc->res.report, "data_warning")));
    report_flags(pc->res.report, false, false);
    return true;
}

/* The report is computed (builder thread): check the world did not change
 * meanwhile, apply, answer once published. */
static void
pending_reported(struct report_job *rj)
{
    struct pending *pc = (struct pending *)rj;
    struct pool *p = pc->p;
    char warn[512];

    if (rj->report == NULL) {
        refuse(&pc->res,
               rj->job.cancelled ? MEMBERSHIP_ENOMEM : MEMBERSHIP_ECONFLICT,
               "pool %s: %s", p->name, rj->err);
        pending_finish(pc);
        return;
    }
    if (p->removed) {
        refuse(&pc->res, MEMBERSHIP_ECONFLICT,
               "pool %s was removed (by a reload) meanwhile", p->name);
        pending_finish(pc);
        return;
    }
    if (p->placement != pc->placement) {
        /* Another change (an API call, a reload) came in while the report
         * was computed: check again against the pool as it is now. */
        if (pc->tries++ < 5) {
            pending_check(pc);
            return;
        }
        refuse(&pc->res, MEMBERSHIP_ECONFLICT,
               "pool %s keeps changing; nothing was changed, try again",
               p->name);
        pending_finish(pc);
        return;
    }
    pc->res.report = rj->report;
    rj->report = NULL;
    if (pc->overrides != NULL)
        json_object_set_new(
            pc->res.report, "dropped",
            json_integer((json_int_t)json_array_size(pc->overrides)));
    if (pool_copies(p) && !pc->nothing && probe_check(pc) != 0) {
        json_decref(pc->res.report);
        pc->res.report = NULL;
        pending_finish(pc);
        return;
    }
    if (hides_refused(pc)) {
        pending_finish(pc);
        return;
    }
    if (p->cfg.migration == CONF_MIGRATION_WARMUP && !pc->nothing &&
        pc->rq.op != MEMBERSHIP_RESET)
        pc->migrate =
            json_num(json_object_get(pc->res.report, "moved"), -1) > 0;
    if (pc->dry || pc->nothing) {
        /* Asking for the state a member is already in changes nothing:
         * a 200 that says so, not an error (PATCH is idempotent). */
        report_flags(pc->res.report, pc->dry, false);
        if (!pc->dry)
            json_object_set_new(pc->res.report, "note",
                                json_string("nothing to change"));
        pending_finish(pc);
        return;
    }
    if (remote_owns(p)) {
        /* the change goes to etcd; every instance applies it from there */
        etcd_submit(pc);
        return;
    }
    if (pending_apply(pc) != 0) {
        json_decref(pc->res.report);
        pc->res.report = NULL;
        pending_finish(pc);
        return;
    }
    report_flags(pc->res.report, false, true);
    if (pc->migrate && p->migration != NULL)
        json_object_set_new(
            pc->res.report, "migration",
            json_pack("{s:I,s:I,s:s}", "epoch", (json_int_t)p->mig_view->epoch,
                      "keys_predicted", (json_int_t)pc->keys_predicted, "phase",
                      pool_copies(p) ? "draining" : "warming"));
    if (pc->overrides != NULL)
        json_object_set_new(
            pc->res.report, "dropped",
            json_integer((json_int_t)json_array_size(pc->overrides)));
    change_log(p->name, pc->name, pc->op, pc->source, pc->detail,
               pc->res.report);
    if (state_persist(p, warn, sizeof(warn)) != 0)
        json_object_set_new(pc->res.report, "warning", json_string(warn));
    if (pool_on_published(p, applied_published, pc) != 0)
        pending_finish(pc);
}

/* A copy pool's change: its members (and a joining one) are asked for
 * their key counts on the builder thread; a joining member with `force`
 * is emptied first. 0 or -1 (out of memory). */
static int
probe_setup(struct pending *pc)
{
    struct pool *p = pc->p;
    struct report_job *rj = &pc->rj;
    size_t n = 0;

    probe_free(rj);
    rj->joiner = rj->leaver = -1;
    rj->addrs = calloc(p->nservers + 1, sizeof(*rj->addrs));
    rj->keys = calloc(p->nservers + 1, sizeof(*rj->keys));
    if (rj->addrs == NULL || rj->keys == NULL)
        return -1;
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!server_member(s) || s->addr.family == AF_UNIX)
            continue;
        if (pc->rq.op == MEMBERSHIP_REMOVE && pc->rq.now &&
            strcmp(s->name, pc->name) == 0)
            rj->leaver = (int)n;
        if ((rj->addrs[n++] = strdup(s->addr.text)) == NULL)
            return -1;
    }
    if (pc->rq.op == MEMBERSHIP_ADD && pc->have_cs) {
        rj->joiner = (int)n;
        if ((rj->addrs[n++] = strdup(pc->cs.addr.text)) == NULL)
            return -1;
    }
    if (p->cfg.redis_auth != NULL &&
        (rj->auth = strdup(p->cfg.redis_auth)) == NULL)
        return -1;
    rj->probe.addresses = (const char **)rj->addrs;
    rj->probe.n = n;
    rj->probe.auth = rj->auth;
    rj->probe.db = p->cfg.redis_db;
    rj->probe.flush = pc->rq.force && !pc->dry ? rj->joiner : -1;
    rj->probe.timeout_ms = 1000;
    rj->probe.keys = rj->keys;
    return 0;
}

/* A copy pool's change, its report and probe in hand: refuse a joining
 * member that holds keys; say how many keys move (or are lost). 0 or -1
 * (refused). */
static int
probe_check(struct pending *pc)
{
    struct report_job *rj = &pc->rj;
    json_t *rep = pc->res.report;
    double moved = json_num(json_object_get(rep, "moved"), -1);
    uint64_t total = 0;
    bool known = true;

    for (size_t i = 0; i < rj->probe.n; i++) {
        if ((int)i == rj->joiner)
            continue;
        if (rj->keys[i] < 0)
            known = false;
        else
            total += (uint64_t)rj->keys[i];
    }
    if (rj->joiner >= 0 && rj->keys[rj->joiner] != 0) {
        if (rj->keys[rj->joiner] < 0)
            return refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                          "pool %s: cannot add %s (%s): %s; a joining "
                          "member must be empty and reachable",
                          pc->p->name, pc->name, rj->addrs[rj->joiner],
                          rj->probe.why);
        if (!pc->dry || !pc->rq.force)
            return refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                          "pool %s: member %s (%s) holds %" PRId64
                          " keys: a joining member must be empty "
                          "(\"force\": true flushes it)",
                          pc->p->name, pc->name, rj->addrs[rj->joiner],
                          rj->keys[rj->joiner]);
    }
    pc->keys_total = total;
    pc->keys_predicted =
        moved > 0 ? (uint64_t)(moved * (double)total + 0.5) : 0;
    json_object_set_new(rep, "keys_total",
                        known ? json_integer((json_int_t)total) : json_null());
    if (pc->rq.op == MEMBERSHIP_REMOVE && pc->rq.now) {
        json_object_set_new(rep, "lost_keys",
                            rj->leaver >= 0 && rj->keys[rj->leaver] >= 0
                                ? json_integer(rj->keys[rj->leaver])
                                : json_null());
        json_object_set_new(rep, "keys_to_move", json_integer(0));
        return 0;
    }
    json_object_set_new(rep, "keys_to_move",
                        known ? json_integer((json_int_t)pc->keys_predicted)
                              : json_null());
    pc->migrate = moved > 0;
    if (pc->migrate && pc->rq.op == MEMBERSHIP_RESET)
        return refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                      "pool %s: dropping the overrides would move keys "
                      "(migration: copy): make those changes one at a time",
                      pc->p->name);
    return 0;
}

/* Submit the report of <b> -> <a> for <pc> (the models are copied). */
static void
pending_submit(struct pending *pc, const struct model *b, const struct model *a)
{
    struct pool *p = pc->p;
    struct report_job *rj = &pc->rj;

    members_free(rj->before, rj->nb);
    members_free(rj->after, rj->na);
    free(rj->changed);
    rj->before = rj->after = NULL;
    rj->changed = NULL;
    if (!pool_comparable(p)) {
        /* modula/random: no ring, no exact report; say so. */
        if (a->n == 0) {
            refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                   "the change would leave pool %s with no member in the "
                   "ring",
                   p->name);
            pending_finish(pc);
            return;
        }
        pc->placement = p->placement;
        rj->report = json_pack("{s:n,s:n,s:[],s:n,s:b,s:s}", "moved", "optimal",
                               "flows", "immediate", "exact", 0, "note",
                               "this distribution is not consistent hashing: "
                               "no migration report");
        pending_reported(rj);
        return;
    }
    if (report_job_init(rj, p, b->m, b->n, a->m, a->n, pc->name,
                        pc->have_cs ? pc->cs.name : NULL,
                        pc->have_cs ? pc->cs.zone : NULL) != 0) {
        refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
        pending_finish(pc);
        return;
    }
    pc->placement = p->placement;
    if ((pool_copies(p) && probe_setup(pc) != 0) ||
        (pool_hides(p) && count_setup(rj, p) != 0)) {
        refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
        pending_finish(pc);
        return;
    }
    builder_submit(&rj->job);
}

static int
check_add(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const struct membership_request *rq = &pc->rq;
    struct membership_result *res = &pc->res;
    struct server *s;
    char line[1024], err[256], self[256];

    pc->weight = rq->has_weight ? rq->weight : 1;
    if (rq->address == NULL || rq->address[0] == '\0')
        return refuse(res, MEMBERSHIP_EINVAL,
                      "\"address\" must be a non-empty string (host:port, "
                      "[v6]:port or /unix/path)");
    if (rq->name != NULL && !text_name_ok(rq->name))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "\"name\" must be a string of 1 to %d printable "
                      "characters without spaces or '/'",
                      TEXT_NAME_MAX);
    if (weight_check(p, pc->weight, res) != 0)
        return -1;
    if (strchr(rq->address, ' ') != NULL ||
        text_has_control(rq->address, strlen(rq->address)))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "bad \"address\" \"%s\": contains a space or a "
                      "control character",
                      rq->address);
    if (!address_has_port(rq->address))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "bad \"address\" \"%s\": expected host:port, "
                      "[v6]:port or /unix/path (the weight goes in "
                      "\"weight\")",
                      rq->address);
    if (!address_numeric(rq->address))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "bad \"address\" \"%s\": give a numeric address; "
                      "chashd resolves host names only when it loads its "
                      "config (a resolver on the control thread would "
                      "stall health checks and this API)",
                      rq->address);
    if (pc->have_cs) {
        conf_server_deinit(&pc->cs);
        pc->have_cs = false;
    }
    /* Parse as a `servers:` entry so names and addresses follow the
     * config's rules exactly (twemproxy's default name included). */
    snprintf(line, sizeof(line), "%s:%u%s%s", rq->address, pc->weight,
             rq->name ? " " : "", rq->name ? rq->name : "");
    if (conf_parse_server(line, &pc->cs, err, sizeof(err)) != 0)
        return refuse(res, MEMBERSHIP_EINVAL, "bad \"address\" \"%s\": %s",
                      rq->address, err);
    pc->have_cs = true;
    if (rq->zone != NULL && !etcd_name_ok(rq->zone))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "bad \"zone\" \"%s\": use 1 to 63 letters, digits, "
                      "'.', '_', ':' or '-'",
                      rq->zone);
    if (rq->zone == NULL && p->cfg.zone_policy == CONF_ZONE_HIERARCHICAL)
        return refuse(res, MEMBERSHIP_EINVAL,
                      "pool %s places a zone, then a member "
                      "(zone_policy: hierarchical): give the new member's "
                      "\"zone\"",
                      p->name);
    if (rq->zone != NULL && (pc->cs.zone = strdup(rq->zone)) == NULL)
        return refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    if (!text_name_ok(pc->cs.name))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "member name \"%s\" is not valid here: give a "
                      "\"name\"",
                      pc->cs.name);
    snprintf(pc->name, sizeof(pc->name), "%s", pc->cs.name);
    s = pool_server_find(p, pc->name);
    if (s != NULL && server_member(s))
        return refuse(res, MEMBERSHIP_ECONFLICT,
                      "pool %s already has a member named \"%s\"", p->name,
                      pc->name);
    for (size_t i = 0; i < p->nservers; i++) {
        s = p->servers[i];
        if (server_member(s) && conf_addr_equal(&s->addr, &pc->cs.addr))
            return refuse(res, MEMBERSHIP_ECONFLICT,
                          "address %s is already member \"%s\" of pool %s",
                          pc->cs.addr.text, s->name, p->name);
    }
    if (running_conf != NULL && conf_self_address(running_conf, &pc->cs.addr,
                                                  self, sizeof(self)) != NULL)
        return refuse(res, MEMBERSHIP_EINVAL,
                      "address %s is chashd's own, %s: chashd would connect "
                      "to itself",
                      pc->cs.addr.text, self);
    if (points_check(p, pc->name, pc->weight, res) != 0)
        return -1;
    snprintf(pc->op, sizeof(pc->op), "add");
    snprintf(pc->detail, sizeof(pc->detail), "%s weight %u", pc->cs.addr.text,
             pc->weight);
    if (model_build(p, NULL, b) != 0 || model_build(p, NULL, a) != 0 ||
        model_push(a, pc->name, pc->weight, entry_ramp(p)) != 0)
        return refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    return 0;
}

static int
check_remove(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const char *name = pc->rq.name;
    struct server *s = name ? pool_server_find(p, name) : NULL;
    size_t members = 0;

    if (s == NULL || !server_member(s))
        return refuse(&pc->res, MEMBERSHIP_ENOENT,
                      "pool %s has no member named \"%s\"", p->name,
                      name ? name : "");
    for (size_t i = 0; i < p->nservers; i++)
        members += server_member(p->servers[i]);
    if (members <= 1)
        return refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                      "cannot remove \"%s\": it is the last member of pool "
                      "%s",
                      s->name, p->name);
    snprintf(pc->name, sizeof(pc->name), "%s", s->name);
    snprintf(pc->op, sizeof(pc->op), "remove");
    snprintf(pc->detail, sizeof(pc->detail), "%s weight %u", s->addr.text,
             s->weight);
    if (model_build(p, NULL, b) != 0 || model_build(p, pc->name, a) != 0)
        return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    return 0;
}

static int
check_update(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const struct membership_request *rq = &pc->rq;
    struct server *s = rq->name ? pool_server_find(p, rq->name) : NULL;
    size_t l;

    if (s == NULL || !server_member(s))
        return refuse(&pc->res, MEMBERSHIP_ENOENT,
                      "pool %s has no member named \"%s\"", p->name,
                      rq->name ? rq->name : "");
    if (!rq->has_weight && !rq->has_admin)
        return refuse(&pc->res, MEMBERSHIP_EINVAL,
                      "nothing to change: give \"weight\" and/or "
                      "\"state\"");
    pc->weight = rq->has_weight ? rq->weight : s->weight;
    pc->admin = rq->has_admin ? rq->admin : s->admin;
    if (weight_check(p, pc->weight, &pc->res) != 0)
        return -1;
    if (pc->admin < STATE_ADMIN_UP || pc->admin > STATE_ADMIN_MAINT)
        return refuse(&pc->res, MEMBERSHIP_EINVAL,
                      "\"state\" must be \"up\", \"drain\" or "
                      "\"maint\"");
    if (pc->weight > s->weight &&
        points_check(p, s->name, pc->weight, &pc->res) != 0)
        return -1;
    snprintf(pc->name, sizeof(pc->name), "%s", s->name);
    pc->op[0] = pc->detail[0] = '\0';
    if (pc->weight != s->weight) {
        snprintf(pc->op, sizeof(pc->op), "weight");
        snprintf(pc->detail, sizeof(pc->detail), "weight %u -> %u", s->weight,
                 pc->weight);
    }
    if (pc->admin != s->admin) {
        l = strlen(pc->op);
        snprintf(pc->op + l, sizeof(pc->op) - l, "%s%s", l ? "+" : "",
                 state_admin_name(pc->admin));
        l = strlen(pc->detail);
        snprintf(pc->detail + l, sizeof(pc->detail) - l, "%s%s -> %s",
                 l ? ", " : "", state_admin_name(s->admin),
                 state_admin_name(pc->admin));
    }
    pc->nothing = pc->op[0] == '\0';
    /* The model after: the member in the ring when its admin is up, at its
     * new weight; a member entering the ring starts its slow start, one
     * whose weight rises continues from what it owns. */
    if (model_build(p, NULL, b) != 0 || model_build(p, pc->name, a) != 0)
        return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    if (pc->admin == STATE_ADMIN_UP) {
        double ramp = entry_ramp(p);

        if (s->admin == STATE_ADMIN_UP) {
            double owned = (double)s->weight * s->ramp;
            ramp = pc->weight <= s->weight || entry_ramp(p) == 1.0
                       ? s->ramp
                       : owned / (double)pc->weight;
        }
        if (model_push(a, pc->name, pc->weight, ramp) != 0)
            return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    }
    return 0;
}

/*
 * Whether <p> with member <name> at <weight> (added when not a member)
 * stays within its max_points: a runtime change must not build a ring the
 * config would refuse (seconds of building, hundreds of megabytes). All
 * members count at full weight, drained ones too (they keep their points
 * on a failover ring). 0 or -1 (<res>).
 */
static int
points_check(const struct pool *p, const char *name, uint32_t weight,
             struct membership_result *res)
{
    struct chash_member *m = calloc(p->nservers + 1, sizeof(*m));
    size_t n = 0;
    bool found = false;
    uint64_t points;

    if (m == NULL)
        return refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!server_member(s) || s->admin == STATE_ADMIN_MAINT)
            continue;
        m[n].name = s->name;
        m[n].weight = s->weight;
        m[n].ramp = 1;
        if (strcmp(s->name, name) == 0) {
            m[n].weight = weight;
            found = true;
        }
        n++;
    }
    if (!found) {
        m[n].name = name;
        m[n].weight = weight;
        m[n].ramp = 1;
        n++;
    }
    points = conf_ring_points(p->cfg.distribution, &p->cfg.ring, m, n);
    free(m);
    if (points > p->cfg.max_points)
        return refuse(res, MEMBERSHIP_ECONFLICT,
                      "pool %s would need %llu ring points, over its "
                      "max_points %u (lower the weight, or raise max_points "
                      "in the config)",
                      p->name, (unsigned long long)points, p->cfg.max_points);
    return 0;
}

/* The overrides of <p> (member <name>, NULL: all) the state file keeps,
 * as a new array (empty when none), or NULL when out of memory. */
static json_t *
overrides_of(const struct pool *p, const char *name)
{
    json_t *all, *mine = json_array();
    size_t i;
    json_t *e;

    if (state == NULL || running_conf == NULL)
        return mine;
    all = state_overrides_json(state, running_conf);
    if (all == NULL) {
        json_decref(mine);
        return NULL;
    }
    json_array_foreach(all, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "pool")), p->name))
            continue;
        if (name != NULL &&
            strcmp(json_string_value(json_object_get(e, "member")), name))
            continue;
        json_array_append(mine, e);
    }
    json_decref(all);
    return mine;
}

/* The override of <what> for <member> in <ov>, or NULL. */
static const json_t *
override_find(const json_t *ov, const char *member, const char *what)
{
    size_t i;
    json_t *e;

    json_array_foreach(ov, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "member")), member) ==
                0 &&
            strcmp(json_string_value(json_object_get(e, "what")), what) == 0)
            return e;
    }
    return NULL;
}

/*
 * RESET: back to the config for member rq.name (NULL: the whole pool):
 * the members added at run time leave, those removed come back, weights,
 * states and addresses return to what the config writes.
 */
static int
check_reset(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const char *name = pc->rq.name;
    size_t i;
    json_t *e;

    json_decref(pc->overrides);
    pc->overrides = overrides_of(p, name);
    if (pc->overrides == NULL)
        return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    if (json_array_size(pc->overrides) == 0) {
        if (name != NULL)
            return refuse(&pc->res, MEMBERSHIP_ENOENT,
                          "pool %s: member \"%s\" has no runtime override",
                          p->name, name);
        return refuse(&pc->res, MEMBERSHIP_ENOENT,
                      "pool %s has no runtime override", p->name);
    }
    snprintf(pc->name, sizeof(pc->name), "%s", name ? name : "*");
    snprintf(pc->op, sizeof(pc->op), "reset");
    snprintf(pc->detail, sizeof(pc->detail), "%zu override%s dropped",
             json_array_size(pc->overrides),
             json_array_size(pc->overrides) == 1 ? "" : "s");
    if (model_build(p, NULL, b) != 0)
        return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    /* The placement after: every member as the config writes it. */
    memset(a, 0, sizeof(*a));
    for (i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];
        const json_t *w = override_find(pc->overrides, s->name, "weight");
        bool up = s->admin == STATE_ADMIN_UP ||
                  override_find(pc->overrides, s->name, "state") != NULL;

        if (!server_member(s) ||
            override_find(pc->overrides, s->name, "added") != NULL || !up)
            continue;
        if (model_push(
                a, s->name,
                w ? (uint32_t)json_integer_value(json_object_get(w, "config"))
                  : s->weight,
                s->admin == STATE_ADMIN_UP ? s->ramp : entry_ramp(p)))
            return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    }
    json_array_foreach(pc->overrides, i, e)
    {
        const json_t *cfg = json_object_get(e, "config");

        if (strcmp(json_string_value(json_object_get(e, "what")), "removed"))
            continue;
        if (model_push(
                a, json_string_value(json_object_get(e, "member")),
                (uint32_t)json_integer_value(json_object_get(cfg, "weight")),
                entry_ramp(p)) != 0)
            return refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    }
    if (a->n == 0)
        return refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                      "pool %s would have no member in the ring", p->name);
    return 0;
}

/* Add <name> at <address> with <weight> as a `servers:` line would. */
static int
member_add_line(struct pool *p, const char *name, const char *address,
                uint32_t weight)
{
    struct conf_server cs = {0};
    char line[1024], err[256];
    int rc;

    snprintf(line, sizeof(line), "%s:%u %s", address, weight, name);
    if (conf_parse_server(line, &cs, err, sizeof(err)) != 0) {
        log_error("pool %s: cannot put back %s at %s: %s", p->name, name,
                  address, err);
        errno = EINVAL;
        return -1;
    }
    rc = pool_member_add(p, &cs);
    conf_server_deinit(&cs);
    return rc;
}

/* Apply a checked RESET: members first, then weights, then states. */
static int
reset_apply(struct pending *pc)
{
    struct pool *p = pc->p;
    size_t i;
    json_t *e;

    for (int pass = 0; pass < 3; pass++) {
        json_array_foreach(pc->overrides, i, e)
        {
            const char *member =
                json_string_value(json_object_get(e, "member"));
            const char *what = json_string_value(json_object_get(e, "what"));
            const json_t *cfg = json_object_get(e, "config");
            struct server *s = pool_server_find(p, member);
            int rc = 0;

            if (pass == 0 && strcmp(what, "added") == 0) {
                rc = pool_member_remove(p, member);
            } else if (pass == 0 && strcmp(what, "removed") == 0) {
                rc = member_add_line(
                    p, member,
                    json_string_value(json_object_get(cfg, "address")),
                    (uint32_t)json_integer_value(
                        json_object_get(cfg, "weight")));
            } else if (pass == 0 && strcmp(what, "address") == 0 && s) {
                uint32_t w = s->weight;

                rc = pool_member_remove(p, member);
                if (rc == 0)
                    rc = member_add_line(p, member, json_string_value(cfg), w);
            } else if (pass == 1 && strcmp(what, "weight") == 0 && s) {
                rc = pool_member_set_weight(p, member,
                                            (uint32_t)json_integer_value(cfg));
            } else if (pass == 2 && strcmp(what, "state") == 0 && s) {
                rc = pool_member_set_admin(p, member, STATE_ADMIN_UP);
            }
            if (rc != 0)
                return -1;
        }
    }
    return 0;
}

/* Check <pc> against the pool as it is now; refuse, or submit its
 * report. */
static void
pending_check(struct pending *pc)
{
    struct model b = {0}, a = {0};
    int rc;

    memset(&pc->res, 0, sizeof(pc->res));
    if (migration_exclusive(pc->p) && !pc->dry) {
        char why[400];

        migration_busy(pc->p, why, sizeof(why));
        refuse(&pc->res, MEMBERSHIP_ECONFLICT, "%s", why);
        pending_finish(pc);
        return;
    }
    switch (pc->rq.op) {
    case MEMBERSHIP_ADD:
        rc = check_add(pc, &b, &a);
        break;
    case MEMBERSHIP_REMOVE:
        rc = check_remove(pc, &b, &a);
        break;
    case MEMBERSHIP_UPDATE:
        rc = check_update(pc, &b, &a);
        break;
    case MEMBERSHIP_RESET:
        rc = check_reset(pc, &b, &a);
        break;
    default:
        rc = refuse(&pc->res, MEMBERSHIP_EINVAL, "unknown membership change");
        break;
    }
    if (rc != 0)
        pending_finish(pc);
    else
        pending_submit(pc, &b, &a);
    free(b.m);
    free(a.m);
}

void
membership_change(struct pool *p, const struct membership_request *rq,
                  int source, bool dry_run, membership_done_fn *done, void *arg)
{
    struct pending *pc = calloc(1, sizeof(*pc));

    if (pc == NULL) {
        struct membership_result res = {.error = MEMBERSHIP_ENOMEM};

        snprintf(res.message, sizeof(res.message), "out of memory");
        done(&res, arg);
        return;
    }
    pc->rj.then = pending_reported;
    pc->rj.job.work = report_work;
    pc->rj.job.done = report_done;
    pc->p = p;
    pool_ref(p);
    pc->rq = *rq;
    pc->name_arg = rq->name ? strdup(rq->name) : NULL;
    pc->address_arg = rq->address ? strdup(rq->address) : NULL;
    pc->zone_arg = rq->zone ? strdup(rq->zone) : NULL;
    pc->rq.name = pc->name_arg;
    pc->rq.address = pc->address_arg;
    pc->rq.zone = pc->zone_arg;
    pc->source = source;
    pc->dry = dry_run;
    pc->done = done;
    pc->arg = arg;
    if ((rq->name && !pc->name_arg) || (rq->address && !pc->address_arg) ||
        (rq->zone && !pc->zone_arg)) {
        refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
        pending_finish(pc);
        return;
    }
    if (rq->op == MEMBERSHIP_RESET && remote_owns(p)) {
        refuse(&pc->res, MEMBERSHIP_ECONFLICT,
               "pool %s takes its members from etcd: there is no runtime "
               "override to reset (etcd's records are its membership)",
               p->name);
        pending_finish(pc);
        return;
    }
    pending_check(pc);
}

/* ---- a batch of changes, one etcd transaction -----------------------------
 */

struct batch {
    struct report_job rj;            /* first: the job's address is ours */
    struct pool *p;                  /* (ref held) */
    struct membership_batch_op *ops; /* names and addresses owned */
    size_t n;
    bool dry;
    bool force; /* a pool that does not move data: apply it anyway */
    membership_done_fn *done;
    void *arg;
    struct membership_result res;
};

static void
batch_finish(struct batch *bt)
{
    bt->done(&bt->res, bt->arg);
    membership_result_deinit(&bt->res);
    for (size_t i = 0; i < bt->n; i++) {
        free((char *)bt->ops[i].name);
        free((char *)bt->ops[i].address);
    }
    free(bt->ops);
    pool_unref(bt->p);
    report_job_free(&bt->rj);
}

static void
batch_written(int status, uint64_t rev, const char *msg, void *arg)
{
    struct batch *bt = arg;

    etcd_result(&bt->res, bt->p->name, status, rev, msg);
    batch_finish(bt);
}

static void
batch_reported(struct report_job *rj)
{
    struct batch *bt = (struct batch *)rj;
    struct membership_remote_op *eo;

    if (rj->report == NULL) {
        refuse(&bt->res, MEMBERSHIP_ECONFLICT, "pool %s: %s", bt->p->name,
               rj->err);
        batch_finish(bt);
        return;
    }
    bt->res.report = rj->report;
    rj->report = NULL;
    json_object_set_new(bt->res.report, "changes",
                        json_integer((json_int_t)bt->n));
    if (pool_hides(bt->p) &&
        unreachable_report(bt->p, bt->res.report, rj, bt->force) && !bt->dry &&
        !bt->force) {
        refuse(
            &bt->res, MEMBERSHIP_ECONFLICT,
            "pool %s: a batch of %zu change%s refused: %s; nothing was "
            "changed; \"force\": true applies it anyway",
            bt->p->name, bt->n, bt->n == 1 ? "" : "s",
            json_string_value(json_object_get(bt->res.report, "data_warning")));
        report_flags(bt->res.report, false, false);
        batch_finish(bt);
        return;
    }
    if (bt->dry) {
        report_flags(bt->res.report, true, false);
        batch_finish(bt);
        return;
    }
    eo = calloc(bt->n, sizeof(*eo));
    if (eo == NULL) {
        refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        batch_finish(bt);
        return;
    }
    for (size_t i = 0; i < bt->n; i++) {
        const struct membership_batch_op *o = &bt->ops[i];
        eo[i].op = o->op == MEMBERSHIP_ADD      ? 'a'
                   : o->op == MEMBERSHIP_REMOVE ? 'r'
                                                : 'u';
        eo[i].name = o->name;
        eo[i].address = o->address;
        eo[i].weight = o->has_weight ? o->weight : o->op == MEMBERSHIP_ADD;
        eo[i].state = o->has_admin ? state_admin_name(o->admin) : NULL;
    }
    remote.write(bt->p, eo, bt->n, NULL, batch_written, bt);
    free(eo);
}

/* Check op <o> of a batch against the model <a> (the pool as the ops
 * before it leave it); apply it there. 0, or -1 with <res>. */
static int
batch_check(struct pool *p, const struct membership_batch_op *o,
            const struct membership_batch_op *ops, size_t i, struct model *a,
            struct membership_result *res)
{
    struct server *s = pool_server_find(p, o->name);

    for (size_t k = 0; k < i; k++)
        if (strcmp(ops[k].name, o->name) == 0)
            return refuse(res, MEMBERSHIP_EINVAL,
                          "member \"%s\" is named twice in one batch", o->name);
    if (o->has_weight && (o->weight < 1 || o->weight > MEMBERSHIP_MAX_WEIGHT))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "change %zu: \"weight\" must be 1 to %d", i + 1,
                      MEMBERSHIP_MAX_WEIGHT);
    switch (o->op) {
    case MEMBERSHIP_ADD: {
        struct conf_addr addr;
        char err[256];

        if (s != NULL)
            return refuse(res, MEMBERSHIP_ECONFLICT,
                          "pool %s already has a member named \"%s\"", p->name,
                          o->name);
        if (o->address == NULL || !address_has_port(o->address) ||
            !address_numeric(o->address) ||
            conf_parse_addr(o->address, &addr, err, sizeof(err)) != 0)
            return refuse(res, MEMBERSHIP_EINVAL,
                          "change %zu: \"address\" must be a numeric "
                          "host:port, [v6]:port or /unix/path",
                          i + 1);
        for (size_t k = 0; k < p->nservers; k++) {
            const struct server *o2 = p->servers[k];
            bool leaves = false;
            for (size_t j = 0; j < i; j++)
                leaves |= ops[j].op == MEMBERSHIP_REMOVE &&
                          strcmp(ops[j].name, o2->name) == 0;
            if (server_member(o2) && !leaves &&
                conf_addr_equal(&o2->addr, &addr)) {
                conf_addr_deinit(&addr);
                return refuse(res, MEMBERSHIP_ECONFLICT,
                              "change %zu: %s is the address of member %s",
                              i + 1, o->address, o2->name);
            }
        }
        conf_addr_deinit(&addr);
        return model_push(a, o->name, o->has_weight ? o->weight : 1, 1.0) == 0
                   ? 0
                   : refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    }
    case MEMBERSHIP_REMOVE:
    case MEMBERSHIP_UPDATE: {
        size_t k;
        uint32_t w;
        int admin;

        if (s == NULL || !server_member(s))
            return refuse(res, MEMBERSHIP_ENOENT,
                          "pool %s has no member named \"%s\"", p->name,
                          o->name);
        for (k = 0; k < a->n && strcmp(a->m[k].name, o->name) != 0; k++)
            ;
        if (k < a->n) {
            a->m[k] = a->m[a->n - 1];
            a->n--;
        }
        if (o->op == MEMBERSHIP_REMOVE)
            return 0;
        if (!o->has_weight && !o->has_admin)
            return refuse(res, MEMBERSHIP_EINVAL,
                          "change %zu: an update gives \"weight\" and/or "
                          "\"state\"",
                          i + 1);
        w = o->has_weight ? o->weight : s->weight;
        admin = o->has_admin ? o->admin : s->admin;
        if (admin == STATE_ADMIN_UP && model_push(a, s->name, w, 1.0) != 0)
            return refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
        return 0;
    }
    default:
        return refuse(res, MEMBERSHIP_EINVAL, "change %zu: unknown op", i + 1);
    }
}

void
membership_batch(struct pool *p, const struct membership_batch_op *ops,
                 size_t n, bool dry_run, bool force, membership_done_fn *done,
                 void *arg)
{
    struct batch *bt = calloc(1, sizeof(*bt));
    struct model b = {0}, a = {0};

    if (bt == NULL) {
        struct membership_result res = {.error = MEMBERSHIP_ENOMEM};
        snprintf(res.message, sizeof(res.message), "out of memory");
        done(&res, arg);
        return;
    }
    bt->p = p;
    pool_ref(p);
    bt->dry = dry_run;
    bt->force = force;
    bt->done = done;
    bt->arg = arg;
    bt->rj.then = batch_reported;
    bt->ops = calloc(n ? n : 1, sizeof(*bt->ops));
    if (bt->ops == NULL) {
        refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        batch_finish(bt);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        bt->ops[i] = ops[i];
        bt->ops[i].name = ops[i].name ? strdup(ops[i].name) : NULL;
        bt->ops[i].address = ops[i].address ? strdup(ops[i].address) : NULL;
        bt->n = i + 1;
        if (bt->ops[i].name == NULL ||
            (ops[i].address && bt->ops[i].address == NULL)) {
            refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
            batch_finish(bt);
            return;
        }
    }
    if (!remote_owns(p) && !dry_run) {
        refuse(&bt->res, MEMBERSHIP_EINVAL,
               "pool %s: a batch of changes is one etcd transaction: it is "
               "for pools with members_from: etcd (change this pool one "
               "member at a time; a dry run reports any pool)",
               p->name);
        batch_finish(bt);
        return;
    }
    if (p->cfg.migration == CONF_MIGRATION_COPY && !dry_run) {
        refuse(&bt->res, MEMBERSHIP_ECONFLICT,
               "pool %s copies its keys on a change (migration: copy): "
               "change it one member at a time, each change its own "
               "migration",
               p->name);
        batch_finish(bt);
        return;
    }
    if (n == 0 || n > 127) {
        refuse(&bt->res, MEMBERSHIP_EINVAL,
               "a batch holds 1 to 127 changes (one etcd transaction), not "
               "%zu",
               n);
        batch_finish(bt);
        return;
    }
    if (model_build(p, NULL, &b) != 0 || model_build(p, NULL, &a) != 0) {
        refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < b.n; i++) {
        b.m[i].ramp = 1.0;
        a.m[i].ramp = 1.0;
    }
    for (size_t i = 0; i < n; i++)
        if (batch_check(p, &bt->ops[i], bt->ops, i, &a, &bt->res) != 0)
            goto fail;
    if (a.n == 0) {
        refuse(&bt->res, MEMBERSHIP_ECONFLICT,
               "pool %s: the batch leaves no member in the ring", p->name);
        goto fail;
    }
    if (report_job_init(&bt->rj, p, b.m, b.n, a.m, a.n, NULL, NULL, NULL) !=
            0 ||
        (pool_hides(p) && count_setup(&bt->rj, p) != 0)) {
        refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        goto fail;
    }
    free(b.m);
    free(a.m);
    builder_submit(&bt->rj.job);
    return;
fail:
    free(b.m);
    free(a.m);
    batch_finish(bt);
}

void
membership_result_deinit(struct membership_result *res)
{
    json_decref(res->report);
    res->report = NULL;
}

/* ---- migrations ---------------------------------------------------------- */

static void
membership_migration_save(const char *pool, json_t *m)
{
    char err[400];

    if (state == NULL)
        return;
    /* a reload being applied commits <pending> over <state>: both */
    if (pending != NULL && state_set_migration(pending, pool, m) != 0)
        log_error("pool %s: migration: cannot keep its state: out of memory",
                  pool);
    if (state_set_migration(state, pool, m) != 0) {
        log_error("pool %s: migration: cannot keep its state: out of memory",
                  pool);
        return;
    }
    if (state_file != NULL &&
        state_save(state, state_file, err, sizeof(err)) != 0)
        log_error("pool %s: migration: its progress is not persisted: %s", pool,
                  err);
}

json_t *
membership_migration_saved(const char *pool)
{
    return state != NULL ? state_migration(state, pool) : NULL;
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
    change_log(p->name, name, "remove", MEMBERSHIP_ADMIN,
               "left once its keys had moved", NULL);
    log_info("pool %s: member %s left the pool: its keys have moved", p->name,
             name);
    state_persist(p, warn, sizeof(warn));
}

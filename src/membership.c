/* membership.c -- the one place that changes who is in a pool and reports
 * it: checks a change whole before applying any of it, answers with the
 * exact migration report, logs one line per event, keeps the change log,
 * and keeps the state file (runtime changes survive restart and reload).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "membership.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "conf.h"
#include "control.h"
#include "log.h"
#include "pool.h"
#include "report.h"
#include "state.h"
#include "text.h"

#define CHANGES_KEPT 50 /* entries of the change log kept in memory */

static const char *const source_names[MEMBERSHIP_SOURCE_COUNT] = {
    "admin", "reload", "health"};

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
static struct state *state;       /* the delta the running pools have */
static struct state *pending;     /* applied to a config being loaded */
static char *pending_file;        /* its state_file */
static bool state_loaded;         /* the file was read (first load) */
static char *state_file;          /* NULL: changes are not persisted */
static struct saved_model *saved; /* before a reload */
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
    if (p->cfg.on_failure == CONF_ON_FAILURE_FAILOVER)
        return "; its clients fail over to their next members";
    if (p->cfg.on_failure == CONF_ON_FAILURE_ERROR)
        return "; its clients are refused (on_failure: error)";
    return "";
}

/*
 * The report of an event between two snapshots, over their ROUTING views
 * (the members that take new keys, with their ramps): for <s> (NULL: the
 * whole pool). This is what "moved" means in every log line: the fraction
 * of the key space whose member for new connections changed -- now
 * (immediate), and once every ramp is done (moved). NULL when a side has
 * no member taking keys (the caller says so) or on failure.
 */
static json_t *
event_report(const struct pool *p, const struct pool_change *chg,
             const char *member)
{
    struct chash_member *b = NULL, *a = NULL;
    ssize_t nb, na;
    json_t *rep = NULL;
    char err[256];

    if (chg == NULL || chg->from == NULL || chg->to == NULL ||
        !pool_comparable(p))
        return NULL;
    nb = pool_snapshot_routing(chg->from, false, &b);
    na = pool_snapshot_routing(chg->to, false, &a);
    if (nb > 0 && na > 0)
        rep = report_migration(&p->cfg.ring, b, (size_t)nb, a, (size_t)na,
                               member, err, sizeof(err));
    free(b);
    free(a);
    return rep;
}

/*
 * Log <s>'s (NULL: the pool's) event <what> with the figures of <rep> (may
 * be NULL: "not comparable"), as one line:
 *   pool web: member web-2 (127.0.0.1:9002) up -> down: 3 checks failed;
 *   share 0.331 -> 0.000000; moved 0.331 of the keys (v7)
 */
static void
event_log(const struct pool *p, const struct server *s, const char *what,
          const json_t *rep, const struct pool_change *chg)
{
    const json_t *sh = json_object_get(rep, "member_share");
    double moved = json_num(json_object_get(rep, "moved"), -1);
    double now = json_num(json_object_get(rep, "immediate"), moved);
    unsigned long long v = chg && chg->to ? chg->to->version : 0;
    char mv[160];

    if (rep == NULL)
        snprintf(mv, sizeof(mv),
                 "moved: not comparable (no member takes "
                 "new keys on one side, or the algorithm "
                 "changed)");
    else if (moved >= 0 && now >= 0 && moved - now > 1e-9)
        snprintf(mv, sizeof(mv), "moved %.6f of the keys, %.6f once ramped",
                 now, moved);
    else
        snprintf(mv, sizeof(mv), "moved %.6f of the keys", now);
    if (s != NULL)
        log_info("pool %s: member %s (%s) %s%s%s; share %.6f -> %.6f; %s "
                 "(v%llu)%s",
                 p->name, s->name, s->addr.text, what, s->reason[0] ? ": " : "",
                 s->reason, json_num(json_object_get(sh, "before_now"), 0),
                 json_num(json_object_get(sh, "after_now"), 0), mv, v,
                 traffic_note(p, s));
    else
        log_info("pool %s: %s; %s (v%llu)", p->name, what, mv, v);
}

/* An observed event of member <s> (health, ramp): log it and enter it. */
static void
event(struct pool *p, struct server *s, const char *op, const char *what,
      const struct pool_change *chg)
{
    json_t *rep = event_report(p, chg, s->name);

    event_log(p, s, what, rep, chg);
    change_log(p->name, s->name, op, MEMBERSHIP_HEALTH, what, rep);
    json_decref(rep);
}

void
membership_health(struct server *s, int health, const char *reason)
{
    struct pool *p = s->pool;
    struct pool_change chg = {0};
    int old, now;
    char what[96];

    if (p == NULL)
        return;
    old = atomic_load(&s->state);
    if (server_set_health(s, health, reason, &chg) != 1)
        return;
    now = atomic_load(&s->state);
    if (now == SERVER_UP && s->ramping)
        snprintf(what, sizeof(what), "%s -> up, ramping over %ums",
                 server_state_name(old), p->cfg.slow_start_ms);
    else
        snprintf(what, sizeof(what), "%s -> %s", server_state_name(old),
                 server_state_name(now));
    event(p, s, server_health_name(health), what, &chg);
}

static void
ramp_done(struct pool *p, struct server *s, const struct pool_change *chg,
          void *arg)
{
    (void)arg;
    event(p, s, "ramp done", "ramp done", chg);
}

static void
membership_tick(uint64_t now_ms, void *arg)
{
    (void)arg;
    pool_tick(now_ms, ramp_done, NULL);
}

int
membership_init(void)
{
    return control_tick_add(membership_tick, NULL);
}

/* ---- the state file ------------------------------------------------------ */

static void
saved_free(void)
{
    for (size_t i = 0; i < nsaved; i++) {
        for (size_t k = 0; k < saved[i].n; k++)
            free((char *)saved[i].m[k].name);
        free(saved[i].m);
        free(saved[i].pool);
    }
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
        struct pool *p = pool_at(i);
        struct saved_model *sm = &saved[nsaved];
        struct model md;

        if (model_build(p, NULL, &md) != 0) {
            free(md.m);
            continue;
        }
        sm->pool = strdup(p->name);
        sm->cfg = p->cfg.ring;
        sm->m = md.m;
        sm->n = md.n;
        nsaved++;
        for (size_t k = 0; k < md.n; k++) {
            md.m[k].name = strdup(md.m[k].name);
            md.m[k].ramp = 1.0;
        }
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

/* Log and enter each pool whose ring membership the reload changed. */
static void
saved_compare(void)
{
    for (size_t i = 0; i < nsaved; i++) {
        struct saved_model *sm = &saved[i];
        struct pool *p = pool_find(sm->pool ? sm->pool : "");
        char detail[128] = "", err[256], what[160];
        struct model md;
        json_t *rep = NULL;
        size_t len = 0, added = 0, removed = 0, reweighted = 0;

        if (p == NULL || model_build(p, NULL, &md) != 0)
            continue;
        /* "+added -removed ~reweighted", as far as it fits */
        for (size_t k = 0; k < md.n; k++) {
            const struct chash_member *o =
                model_find(sm->m, sm->n, md.m[k].name);
            if (o == NULL || o->weight != md.m[k].weight)
                append(detail, sizeof(detail), &len, "%s%c%s", len ? " " : "",
                       o == NULL ? '+' : '~', md.m[k].name);
            added += o == NULL;
            reweighted += o != NULL && o->weight != md.m[k].weight;
        }
        for (size_t k = 0; k < sm->n; k++)
            if (model_find(md.m, md.n, sm->m[k].name) == NULL) {
                append(detail, sizeof(detail), &len, "%s-%s", len ? " " : "",
                       sm->m[k].name);
                removed++;
            }
        if (detail[0] != '\0' && pool_comparable(p) &&
            memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) == 0) {
            for (size_t k = 0; k < md.n; k++)
                md.m[k].ramp = 1.0;
            rep = report_migration(&p->cfg.ring, sm->m, sm->n, md.m, md.n, NULL,
                                   err, sizeof(err));
        }
        if (detail[0] != '\0') {
            struct pool_change now = {.to = pool_snapshot(p)};

            snprintf(what, sizeof(what),
                     "reloaded: %zu members (+%zu -%zu, %zu reweighted)", md.n,
                     added, removed, reweighted);
            event_log(p, NULL, what, rep, &now);
            change_log(p->name, "*", "reload", MEMBERSHIP_RELOAD, detail, rep);
        }
        json_decref(rep);
        free(md.m);
    }
    saved_free();
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
    state_destroy(pending);
    pending = next;
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
    free(pending_file);
    pending_file = NULL;
    saved_free();
}

void
membership_state_settle(void)
{
    bool committed = false;

    if (pending != NULL) {
        state_destroy(state);
        state = pending;
        pending = NULL;
        free(state_file);
        state_file = pending_file;
        pending_file = NULL;
        committed = true;
    }
    if (state == NULL)
        return;
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t k = 0; k < p->nservers; k++) {
            struct server *s = p->servers[k];
            int want = state_admin(state, p->name, s->name);

            if (server_member(s) && s->admin != want &&
                pool_member_set_admin(p, s->name, want, NULL) != 0)
                log_warn("state: pool %s member %s: cannot set %s: %s", p->name,
                         s->name, state_admin_name(want), strerror(errno));
        }
    }
    if (committed)
        saved_compare();
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

    if (state == NULL)
        return 0;
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

/* The report of <b> -> <a> for a change of <member>; NULL (refused, 409)
 * when the after side gives no ring. */
static json_t *
change_report(const struct pool *p, const struct model *b,
              const struct model *a, const char *member,
              struct membership_result *res)
{
    char err[256];
    json_t *rep;

    if (!pool_comparable(p)) {
        /* modula/random: no ring, no exact report; say so. */
        if (a->n == 0) {
            refuse(res, MEMBERSHIP_ECONFLICT,
                   "the change would leave pool %s with no member in the "
                   "ring",
                   p->name);
            return NULL;
        }
        return json_pack("{s:n,s:n,s:[],s:n,s:b,s:s}", "moved", "optimal",
                         "flows", "immediate", "exact", 0, "note",
                         "this distribution is not consistent hashing: "
                         "no migration report");
    }
    rep = report_migration(&p->cfg.ring, b->m, b->n, a->m, a->n, member, err,
                           sizeof(err));
    if (rep == NULL)
        refuse(res, MEMBERSHIP_ECONFLICT, "pool %s: %s", p->name, err);
    return rep;
}

/*
 * After an applied change: log it (over the routing views of the
 * snapshots, as every event is), enter it in the change log with the
 * report's figures, persist the state.
 */
static void
change_done(struct pool *p, struct server *s, const char *name, const char *op,
            const char *what, const char *detail, int source,
            const struct pool_change *chg, struct membership_result *res)
{
    json_t *ev = event_report(p, chg, name);
    char warn[512];

    if (s != NULL) {
        event_log(p, s, what, ev, chg);
    } else {
        char line[320];

        snprintf(line, sizeof(line), "member %s %s", name, what);
        event_log(p, NULL, line, ev, chg);
    }
    json_decref(ev);
    change_log(p->name, name, op, source, detail, res->report);
    if (state_persist(p, warn, sizeof(warn)) != 0)
        json_object_set_new(res->report, "warning", json_string(warn));
}

static void
report_flags(json_t *rep, bool dry_run, bool applied)
{
    json_object_set_new(rep, "dry_run", json_boolean(dry_run));
    json_object_set_new(rep, "applied", json_boolean(applied));
}

static int
member_add(struct pool *p, const struct membership_request *rq, int source,
           bool dry, struct membership_result *res)
{
    struct conf_server cs = {0};
    struct model b = {0}, a = {0};
    struct pool_change chg = {0};
    struct server *s;
    uint32_t weight = rq->has_weight ? rq->weight : 1;
    char line[1024], err[256], detail[128];
    bool have_cs = false;
    int rc = -1;

    if (rq->address == NULL || rq->address[0] == '\0')
        return refuse(res, MEMBERSHIP_EINVAL,
                      "\"address\" must be a non-empty string (host:port, "
                      "[v6]:port or /unix/path)");
    if (rq->name != NULL && !text_name_ok(rq->name))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "\"name\" must be a string of 1 to %d printable "
                      "characters without spaces or '/'",
                      TEXT_NAME_MAX);
    if (weight_check(p, weight, res) != 0)
        return -1;
    if (strchr(rq->address, ' ') != NULL ||
        text_has_control(rq->address, strlen(rq->address)))
        return refuse(res, MEMBERSHIP_EINVAL,
                      "bad \"address\" \"%s\": contains a space or a control "
                      "character",
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
    /* Parse as a `servers:` entry so names and addresses follow the
     * config's rules exactly (twemproxy's default name included). */
    snprintf(line, sizeof(line), "%s:%u%s%s", rq->address, weight,
             rq->name ? " " : "", rq->name ? rq->name : "");
    if (conf_parse_server(line, &cs, err, sizeof(err)) != 0)
        return refuse(res, MEMBERSHIP_EINVAL, "bad \"address\" \"%s\": %s",
                      rq->address, err);
    have_cs = true;
    if (!text_name_ok(cs.name)) {
        refuse(res, MEMBERSHIP_EINVAL,
               "member name \"%s\" is not valid here: give a \"name\"",
               cs.name);
        goto out;
    }
    s = pool_server_find(p, cs.name);
    if (s != NULL && server_member(s)) {
        refuse(res, MEMBERSHIP_ECONFLICT,
               "pool %s already has a member named \"%s\"", p->name, cs.name);
        goto out;
    }
    for (size_t i = 0; i < p->nservers; i++) {
        s = p->servers[i];
        if (server_member(s) && conf_addr_equal(&s->addr, &cs.addr)) {
            refuse(res, MEMBERSHIP_ECONFLICT,
                   "address %s is already member \"%s\" of pool %s",
                   cs.addr.text, s->name, p->name);
            goto out;
        }
    }
    if (model_build(p, NULL, &b) != 0 || model_build(p, NULL, &a) != 0 ||
        model_push(&a, cs.name, weight, entry_ramp(p)) != 0) {
        refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
        goto out;
    }
    res->report = change_report(p, &b, &a, cs.name, res);
    if (res->report == NULL)
        goto out;
    report_flags(res->report, dry, !dry);
    if (dry) {
        rc = 0;
        goto out;
    }
    if (pool_member_add(p, &cs, &chg) != 0) {
        refuse(res,
               errno == EEXIST   ? MEMBERSHIP_ECONFLICT
               : errno == EINVAL ? MEMBERSHIP_EINVAL
                                 : MEMBERSHIP_ENOMEM,
               "pool %s: cannot add %s: %s", p->name, cs.name, strerror(errno));
        json_decref(res->report);
        res->report = NULL;
        goto out;
    }
    snprintf(detail, sizeof(detail), "%s weight %u", cs.addr.text, weight);
    change_done(p, pool_server_find(p, cs.name), cs.name, "add", "added",
                detail, source, &chg, res);
    rc = 0;
out:
    free(b.m);
    free(a.m);
    if (have_cs)
        conf_server_deinit(&cs);
    return rc;
}

static int
member_remove(struct pool *p, const struct membership_request *rq, int source,
              bool dry, struct membership_result *res)
{
    struct server *s = rq->name ? pool_server_find(p, rq->name) : NULL;
    struct model b = {0}, a = {0};
    struct pool_change chg = {0};
    char name[TEXT_NAME_MAX + 1], detail[128];
    size_t members = 0;
    int rc = -1;

    if (s == NULL || !server_member(s))
        return refuse(res, MEMBERSHIP_ENOENT,
                      "pool %s has no member named \"%s\"", p->name,
                      rq->name ? rq->name : "");
    for (size_t i = 0; i < p->nservers; i++)
        members += server_member(p->servers[i]);
    if (members <= 1)
        return refuse(res, MEMBERSHIP_ECONFLICT,
                      "cannot remove \"%s\": it is the last member of pool "
                      "%s",
                      s->name, p->name);
    snprintf(name, sizeof(name), "%s", s->name);
    if (model_build(p, NULL, &b) != 0 || model_build(p, name, &a) != 0) {
        refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
        goto out;
    }
    res->report = change_report(p, &b, &a, name, res);
    if (res->report == NULL)
        goto out;
    report_flags(res->report, dry, !dry);
    if (dry) {
        rc = 0;
        goto out;
    }
    snprintf(detail, sizeof(detail), "%s weight %u", s->addr.text, s->weight);
    /* <s> may be freed by the removal: it is kept for the log line. */
    server_ref(s);
    if (pool_member_remove(p, name, &chg) != 0) {
        server_unref(s);
        refuse(res, MEMBERSHIP_ENOMEM, "pool %s: cannot remove %s: %s", p->name,
               name, strerror(errno));
        json_decref(res->report);
        res->report = NULL;
        goto out;
    }
    snprintf(s->reason, sizeof(s->reason), "by the operator");
    change_done(p, s, name, "remove", "removed", detail, source, &chg, res);
    server_unref(s);
    rc = 0;
out:
    free(b.m);
    free(a.m);
    return rc;
}

static int
member_update(struct pool *p, const struct membership_request *rq, int source,
              bool dry, struct membership_result *res)
{
    struct server *s = rq->name ? pool_server_find(p, rq->name) : NULL;
    struct model b = {0}, a = {0};
    struct pool_change c1 = {0}, c2 = {0};
    uint32_t weight, old_weight;
    int admin, old_state, old_admin;
    char name[TEXT_NAME_MAX + 1], op[32] = "", detail[128] = "", what[160];
    int rc = -1;

    if (s == NULL || !server_member(s))
        return refuse(res, MEMBERSHIP_ENOENT,
                      "pool %s has no member named \"%s\"", p->name,
                      rq->name ? rq->name : "");
    if (!rq->has_weight && !rq->has_admin)
        return refuse(res, MEMBERSHIP_EINVAL,
                      "nothing to change: give \"weight\" and/or \"state\"");
    weight = rq->has_weight ? rq->weight : s->weight;
    admin = rq->has_admin ? rq->admin : s->admin;
    if (weight_check(p, weight, res) != 0)
        return -1;
    if (admin < STATE_ADMIN_UP || admin > STATE_ADMIN_MAINT)
        return refuse(res, MEMBERSHIP_EINVAL,
                      "\"state\" must be \"up\", \"drain\" or \"maint\"");
    snprintf(name, sizeof(name), "%s", s->name);
    if (weight != s->weight) {
        snprintf(op, sizeof(op), "weight");
        snprintf(detail, sizeof(detail), "weight %u -> %u", s->weight, weight);
    }
    if (admin != s->admin) {
        size_t l = strlen(op);

        snprintf(op + l, sizeof(op) - l, "%s%s", l ? "+" : "",
                 state_admin_name(admin));
        l = strlen(detail);
        snprintf(detail + l, sizeof(detail) - l, "%s%s -> %s", l ? ", " : "",
                 state_admin_name(s->admin), state_admin_name(admin));
    }

    /* The model after: the member in the ring when its admin is up, at its
     * new weight; a member entering the ring starts its slow start, one
     * whose weight rises continues from what it owns. */
    if (model_build(p, NULL, &b) != 0 || model_build(p, name, &a) != 0) {
        refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
        goto out;
    }
    if (admin == STATE_ADMIN_UP) {
        double ramp = entry_ramp(p);

        if (s->admin == STATE_ADMIN_UP) {
            double owned = (double)s->weight * s->ramp;
            ramp = weight <= s->weight || entry_ramp(p) == 1.0
                       ? s->ramp
                       : owned / (double)weight;
        }
        if (model_push(&a, name, weight, ramp) != 0) {
            refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
            goto out;
        }
    }
    res->report = change_report(p, &b, &a, name, res);
    if (res->report == NULL)
        goto out;
    if (dry || op[0] == '\0') {
        /* Asking for the state a member is already in changes nothing:
         * a 200 that says so, not an error (PATCH is idempotent). */
        report_flags(res->report, dry, false);
        if (!dry)
            json_object_set_new(res->report, "note",
                                json_string("nothing to change"));
        rc = 0;
        goto out;
    }
    report_flags(res->report, false, true);
    old_state = atomic_load(&s->state);
    old_admin = s->admin;
    old_weight = s->weight;
    if (weight != old_weight && pool_member_set_weight(p, name, weight, &c1)) {
        refuse(res, MEMBERSHIP_ENOMEM,
               "pool %s: cannot set the weight of %s: %s", p->name, name,
               strerror(errno));
        goto fail;
    }
    if (admin != old_admin && pool_member_set_admin(p, name, admin, &c2)) {
        refuse(res, MEMBERSHIP_ENOMEM, "pool %s: cannot set %s to %s: %s",
               p->name, name, state_admin_name(admin), strerror(errno));
        goto fail;
    }
    /* One event from the first snapshot to the last. */
    if (c1.to != NULL && c2.to != NULL)
        c2.from = c1.from;
    if (admin != old_admin)
        snprintf(what, sizeof(what), "%s -> %s%s%s",
                 server_state_name(old_state),
                 server_state_name(atomic_load(&s->state)),
                 weight != old_weight ? ", " : "",
                 weight != old_weight ? detail : "");
    else
        snprintf(what, sizeof(what), "%s%s", detail,
                 s->ramping ? ", ramping" : "");
    change_done(p, s, name, op, what, detail, source, c2.to ? &c2 : &c1, res);
    rc = 0;
    goto out;
fail:
    json_decref(res->report);
    res->report = NULL;
out:
    free(b.m);
    free(a.m);
    return rc;
}

int
membership_change(struct pool *p, const struct membership_request *rq,
                  int source, bool dry_run, struct membership_result *res)
{
    memset(res, 0, sizeof(*res));
    switch (rq->op) {
    case MEMBERSHIP_ADD:
        return member_add(p, rq, source, dry_run, res);
    case MEMBERSHIP_REMOVE:
        return member_remove(p, rq, source, dry_run, res);
    case MEMBERSHIP_UPDATE:
        return member_update(p, rq, source, dry_run, res);
    default:
        return refuse(res, MEMBERSHIP_EINVAL, "unknown membership change");
    }
}

void
membership_result_deinit(struct membership_result *res)
{
    json_decref(res->report);
    res->report = NULL;
}

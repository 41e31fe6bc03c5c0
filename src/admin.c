/* admin.c -- the admin API over libmicrohttpd in the control thread: pools
 * and members as JSON, runtime membership changes answered with their
 * migration report, lookups, ring arcs, the state file, the change log,
 * /metrics and the dashboard page. Every bad request gets a 4xx and a
 * JSON {"error": ...} naming the problem, and changes nothing.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "admin.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "admin_ops.h"
#include "conf.h"
#include "control.h"
#include "dashboard.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "state.h"

#define ADMIN_MAX_BODY (64 * 1024) /* request bodies above are 413 */
#define ADMIN_MAX_NAME 255         /* member names, as conf allows */
#define ADMIN_MAX_WEIGHT 1000000
#define ADMIN_MAX_REPLICAS 64
#define ADMIN_MAX_SEGMENTS 65536
#define ADMIN_DEFAULT_SEGMENTS 1024
#define ADMIN_CHANGES 50 /* membership changes kept in memory */
#define ADMIN_JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(12))

/* One membership change made through the API, for GET /api/changes, the
 * dashboard and the metrics. */
struct admin_change {
    uint64_t seq;
    double time; /* Unix seconds */
    char pool[128];
    char member[ADMIN_MAX_NAME + 1];
    char op[32];      /* add, remove, weight, drain, up, maint, ... */
    char detail[128]; /* "weight 1 -> 3", "127.0.0.1:9003 weight 1" */
    double moved, optimal, immediate;
};

/* Per pool: how many changes, and the last one's moved fraction. */
struct admin_pool_count {
    char *name;
    uint64_t changes;
    double last_moved;
};

/* Per request: the body collected over the upload calls. */
struct admin_request {
    char *body;
    size_t len, cap;
    bool too_large;
    bool answered; /* a response was queued early (413) */
};

static struct {
    struct MHD_Daemon *mhd;
    char *token;           /* NULL: no authentication */
    char *address;         /* as written, for messages */
    struct state *state;   /* the delta the running pools have */
    struct state *pending; /* applied to a config being loaded */
    char *pending_file;
    bool state_loaded;
    char *state_file; /* NULL: changes are not persisted */
    struct admin_change changes[ADMIN_CHANGES];
    uint64_t nchanges; /* total; the ring keeps the last 50 */
    struct admin_pool_count *counts;
    size_t ncounts;
    struct control_watch watch; /* libmicrohttpd's epoll fd */
    bool watching;
    bool tick_added;
} A;

/* ---- responses ----------------------------------------------------------- */

/*
 * Replace, in place, every byte of <s> that is not part of valid UTF-8 by
 * '?'. Messages echo the URL, which MHD percent-decodes to any bytes
 * (%FF), and vsnprintf may cut a message inside a character: jansson
 * refuses such strings, and the client got no answer at all.
 */
static void
utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;

    while (*p != '\0') {
        size_t n, i;
        uint32_t cp;

        if (*p < 0x80) {
            p++;
            continue;
        }
        if (*p >= 0xC2 && *p <= 0xDF)
            n = 1, cp = *p & 0x1Fu;
        else if (*p >= 0xE0 && *p <= 0xEF)
            n = 2, cp = *p & 0x0Fu;
        else if (*p >= 0xF0 && *p <= 0xF4)
            n = 3, cp = *p & 0x07u;
        else {
            *p++ = '?';
            continue;
        }
        /* a NUL stops the loop: it is not a continuation byte */
        for (i = 1; i <= n && (p[i] & 0xC0) == 0x80; i++)
            cp = cp << 6 | (p[i] & 0x3Fu);
        if (i <= n ||
            (n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
            *p++ = '?';
            continue;
        }
        p += n + 1;
    }
}

static enum MHD_Result
respond_buf(struct MHD_Connection *c, unsigned status, const char *ctype,
            char *buf, size_t len)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"chashd\"");
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Send <j> (reference stolen). */
static enum MHD_Result
respond_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    char *text = json_dumps(j, ADMIN_JSON_FLAGS);
    size_t len;

    json_decref(j);
    if (text == NULL)
        return MHD_NO;
    len = strlen(text);
    /* A trailing newline so `curl` output ends cleanly. */
    char *nt = realloc(text, len + 2);
    if (nt == NULL) {
        free(text);
        return MHD_NO;
    }
    nt[len++] = '\n';
    nt[len] = '\0';
    return respond_buf(c, status, "application/json", nt, len);
}

static enum MHD_Result __attribute__((format(printf, 3, 4)))
respond_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    utf8_scrub(msg);
    return respond_json(c, status, json_pack("{s:s}", "error", msg));
}

static enum MHD_Result
respond_405(struct MHD_Connection *c, const char *method, const char *url,
            const char *allow)
{
    json_t *j = json_pack("{s:s}", "error", "");
    char msg[512], *text;
    struct MHD_Response *r;
    enum MHD_Result ret;

    snprintf(msg, sizeof(msg), "method %s is not allowed on %s (allowed: %s)",
             method, url, allow);
    utf8_scrub(msg);
    json_object_set_new(j, "error", json_string(msg));
    text = json_dumps(j, ADMIN_JSON_FLAGS);
    json_decref(j);
    if (text == NULL)
        return MHD_NO;
    r = MHD_create_response_from_buffer(strlen(text), text,
                                        MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    ret = MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- the model of a pool's ring membership ------------------------------ */

static bool
server_member(const struct server *s)
{
    return atomic_load_explicit((_Atomic int *)&s->state,
                                memory_order_relaxed) != SERVER_REMOVED;
}

/*
 * The ring membership the reports compare: members the operator has in
 * the ring (admin up: drained and maintenance members own nothing new),
 * at their weight and current ramp. Health is left out on purpose: a
 * report tells where keys belong, not which member is up this second.
 */
struct model {
    struct chash_member *m;
    size_t n, cap;
};

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
    return p->cfg.slow_start_ms > 0 ? 0.0 : 1.0;
}

/* Is the pool's distribution a ring libchash can compare? */
static bool
pool_comparable(const struct pool *p)
{
    return p->cfg.distribution >= 0 && p->cfg.distribution < CHASH_ALGO_COUNT;
}

/* ---- change log ---------------------------------------------------------- */

static struct admin_pool_count *
count_get(const char *pool)
{
    struct admin_pool_count *nc;

    for (size_t i = 0; i < A.ncounts; i++)
        if (strcmp(A.counts[i].name, pool) == 0)
            return &A.counts[i];
    nc = realloc(A.counts, (A.ncounts + 1) * sizeof(*nc));
    if (nc == NULL)
        return NULL;
    A.counts = nc;
    nc = &A.counts[A.ncounts];
    nc->name = strdup(pool);
    if (nc->name == NULL)
        return NULL;
    nc->changes = 0;
    nc->last_moved = 0;
    A.ncounts++;
    return nc;
}

uint64_t
admin_pool_changes(const char *pool, double *last_moved)
{
    *last_moved = 0;
    for (size_t i = 0; i < A.ncounts; i++)
        if (strcmp(A.counts[i].name, pool) == 0) {
            *last_moved = A.counts[i].last_moved;
            return A.counts[i].changes;
        }
    return 0;
}

static double
json_num(const json_t *j, double dflt)
{
    return json_is_number(j) ? json_number_value(j) : dflt;
}

static void
change_log(const char *pool, const char *member, const char *op,
           const char *detail, const json_t *report)
{
    struct admin_change *ch = &A.changes[A.nchanges % ADMIN_CHANGES];
    struct admin_pool_count *cnt = count_get(pool);
    struct timeval tv;

    gettimeofday(&tv, NULL);
    memset(ch, 0, sizeof(*ch));
    ch->seq = ++A.nchanges;
    ch->time = (double)tv.tv_sec + tv.tv_usec / 1e6;
    snprintf(ch->pool, sizeof(ch->pool), "%s", pool);
    snprintf(ch->member, sizeof(ch->member), "%s", member);
    snprintf(ch->op, sizeof(ch->op), "%s", op);
    snprintf(ch->detail, sizeof(ch->detail), "%s", detail);
    /* A reload's "+name -name" list is cut to fit, maybe inside a UTF-8
     * name: jansson then refused the entry and /api/changes lost it. */
    utf8_scrub(ch->detail);
    ch->moved = json_num(json_object_get(report, "moved"), -1);
    ch->optimal = json_num(json_object_get(report, "optimal"), -1);
    ch->immediate = json_num(json_object_get(report, "immediate"), -1);
    if (cnt != NULL) {
        cnt->changes++;
        cnt->last_moved = ch->moved >= 0 ? ch->moved : 0;
    }
}

static json_t *
changes_json(void)
{
    json_t *arr = json_array();
    uint64_t first =
        A.nchanges > ADMIN_CHANGES ? A.nchanges - ADMIN_CHANGES : 0;

    /* Newest first: what an operator looks for. */
    for (uint64_t k = A.nchanges; k > first; k--) {
        const struct admin_change *ch = &A.changes[(k - 1) % ADMIN_CHANGES];
        json_t *j =
            json_pack("{s:I,s:f,s:s,s:s,s:s,s:s}", "seq", (json_int_t)ch->seq,
                      "time", ch->time, "pool", ch->pool, "member", ch->member,
                      "op", ch->op, "detail", ch->detail);

        json_object_set_new(
            j, "moved", ch->moved >= 0 ? json_real(ch->moved) : json_null());
        json_object_set_new(j, "optimal",
                            ch->optimal >= 0 ? json_real(ch->optimal)
                                             : json_null());
        json_object_set_new(j, "immediate",
                            ch->immediate >= 0 ? json_real(ch->immediate)
                                               : json_null());
        json_array_append_new(arr, j);
    }
    return json_pack("{s:I,s:o}", "total", (json_int_t)A.nchanges, "changes",
                     arr);
}

/* ---- state file ---------------------------------------------------------- */

/*
 * Reloads are membership changes too: the ring model of every pool is
 * saved when a reload starts (admin_state_apply) and compared once it is
 * applied (admin_state_settle, same control-loop callback), so the change
 * log and the metrics show what a reload moved.
 */
struct saved_model {
    char *pool;
    struct chash_config cfg;
    struct chash_member *m; /* names owned */
    size_t n;
};

static struct saved_model *saved;
static size_t nsaved;

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

/* Log each pool whose ring membership the reload changed. */
static void
saved_compare(void)
{
    for (size_t i = 0; i < nsaved; i++) {
        struct saved_model *sm = &saved[i];
        struct pool *p = pool_find(sm->pool ? sm->pool : "");
        char detail[128] = "", err[256];
        struct model md;
        json_t *rep = NULL;
        size_t len = 0;

        if (p == NULL || model_build(p, NULL, &md) != 0)
            continue;
        /* "+added -removed ~reweighted", as far as it fits */
        for (size_t k = 0; k < md.n; k++) {
            const struct chash_member *o =
                model_find(sm->m, sm->n, md.m[k].name);
            if (o == NULL || o->weight != md.m[k].weight)
                append(detail, sizeof(detail), &len, "%s%c%s", len ? " " : "",
                       o == NULL ? '+' : '~', md.m[k].name);
        }
        for (size_t k = 0; k < sm->n; k++)
            if (model_find(md.m, md.n, sm->m[k].name) == NULL)
                append(detail, sizeof(detail), &len, "%s-%s", len ? " " : "",
                       sm->m[k].name);
        if (detail[0] != '\0' && pool_comparable(p) &&
            memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) == 0) {
            for (size_t k = 0; k < md.n; k++)
                md.m[k].ramp = 1.0;
            rep = ops_report(&p->cfg.ring, sm->m, sm->n, md.m, md.n, NULL, err,
                             sizeof(err));
        }
        if (detail[0] != '\0')
            change_log(p->name, "*", "reload", detail, rep);
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
 * admin_state_settle() once the pools run the new config: a reload refused
 * after this call (a listener that cannot bind) must leave the running
 * state, whose bases are the running config's servers, untouched.
 */
int
admin_state_apply(struct conf *conf, char *err, size_t errlen)
{
    struct state *pending;
    char warn[2048];

    if (A.state == NULL) {
        A.state = state_create();
        if (A.state == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (!A.state_loaded && conf->state_file != NULL) {
        if (state_load(A.state, conf->state_file, err, errlen) != 0)
            return -1;
        A.state_loaded = true;
    }
    pending = state_copy(A.state);
    if (pending == NULL) {
        snprintf(err, errlen, "state: out of memory");
        return -1;
    }
    if (state_apply(pending, conf, warn, sizeof(warn)) != 0) {
        snprintf(err, errlen, "state: %s", strerror(errno));
        state_destroy(pending);
        return -1;
    }
    if (warn[0] != '\0')
        log_warn("state %s: %s",
                 conf->state_file ? conf->state_file : "(memory)", warn);
    state_destroy(A.pending);
    A.pending = pending;
    saved_take();
    free(A.pending_file);
    A.pending_file = conf->state_file ? strdup(conf->state_file) : NULL;
    return 0;
}

void
admin_state_settle(void)
{
    bool committed = false;

    if (A.pending != NULL) {
        state_destroy(A.state);
        A.state = A.pending;
        A.pending = NULL;
        free(A.state_file);
        A.state_file = A.pending_file;
        A.pending_file = NULL;
        committed = true;
    }
    if (A.state == NULL)
        return;
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t k = 0; k < p->nservers; k++) {
            struct server *s = p->servers[k];
            int want = state_admin(A.state, p->name, s->name);

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
admin_state_free(void)
{
    state_destroy(A.state);
    A.state = NULL;
    state_destroy(A.pending);
    A.pending = NULL;
    free(A.pending_file);
    A.pending_file = NULL;
    saved_free();
    A.state_loaded = false;
    free(A.state_file);
    A.state_file = NULL;
    for (size_t i = 0; i < A.ncounts; i++)
        free(A.counts[i].name);
    free(A.counts);
    A.counts = NULL;
    A.ncounts = 0;
}

/* Record <p>'s membership in the state and write the file. A failed write
 * is logged and reported, the change itself stays applied (it is live). */
static int
state_persist(struct pool *p, char *err, size_t errlen)
{
    struct state_member *sm;
    size_t n = 0;
    int rc = 0;

    if (A.state == NULL)
        return 0;
    sm = calloc(p->nservers ? p->nservers : 1, sizeof(*sm));
    if (sm == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
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
    if (state_record(A.state, p->name, sm, n) != 0) {
        snprintf(err, errlen, "state: %s", strerror(errno));
        rc = -1;
    } else if (A.state_file != NULL &&
               state_save(A.state, A.state_file, err, errlen) != 0) {
        rc = -1;
    }
    if (rc != 0)
        log_error("admin: the change is live but not persisted: %s", err);
    free(sm);
    return rc;
}

/* ---- JSON views ---------------------------------------------------------- */

static const char *
state_text(int state)
{
    static const char *const names[] = {"up",       "down",  "ejected",
                                        "draining", "maint", "removed"};

    return state >= 0 && state < SERVER_STATE_COUNT ? names[state] : "unknown";
}

static json_t *
member_json(const struct pool_snapshot *snap, const struct server *s)
{
    struct stats_server_sum sum;
    int st =
        atomic_load_explicit((_Atomic int *)&s->state, memory_order_relaxed);
    static const char *const health[] = {"up", "down", "ejected"};

    stats_server_sum(s->stats, pool_workers(), &sum);
    json_t *j = json_pack(
        "{s:s,s:s,s:I,s:f,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "name",
        s->name, "address", s->addr.text, "weight", (json_int_t)s->weight,
        "ramp", s->ramp, "state", state_text(st), "admin",
        state_admin_name(s->admin) ? state_admin_name(s->admin) : "up",
        "health",
        s->health >= 0 && s->health <= HEALTH_EJECTED ? health[s->health]
                                                      : "unknown",
        "active",
        (json_int_t)atomic_load_explicit((_Atomic uint64_t *)&s->active,
                                         memory_order_relaxed),
        "connections_total", (json_int_t)sum.conns_total, "bytes_in",
        (json_int_t)sum.bytes_in, "bytes_out", (json_int_t)sum.bytes_out,
        "connect_failures", (json_int_t)sum.connect_failures,
        "connect_timeouts", (json_int_t)sum.connect_timeouts, "share",
        pool_snapshot_share(snap, s));
    json_object_set_new(j, "ejections", json_integer((json_int_t)s->ejections));
    json_object_set_new(
        j, "points", json_integer((json_int_t)pool_snapshot_points(snap, s)));
    if (s->reason[0] != '\0')
        json_object_set_new(j, "reason", json_string(s->reason));
    return j;
}

static json_t *
pool_json(struct pool *p, bool full)
{
    const struct pool_snapshot *snap = pool_snapshot(p);
    const struct conf_pool *cp = &p->cfg;
    struct stats_pool_sum ps;
    json_t *j, *members, *settings;
    char sum[32] = "";

    if (snap != NULL && snap->ring != NULL)
        snprintf(sum, sizeof(sum), "%016llx",
                 (unsigned long long)chash_ring_checksum(snap->ring));
    stats_pool_sum(p->stats, pool_workers(), &ps);
    j = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:I,s:I}", "name", p->name, "listen",
        cp->listen.text ? cp->listen.text : "", "mode",
        conf_mode_name(cp->mode) ? conf_mode_name(cp->mode) : "?", "algorithm",
        conf_dist_name(cp->distribution) ? conf_dist_name(cp->distribution)
                                         : "?",
        "hash",
        chash_hash_name(cp->ring.hash) ? chash_hash_name(cp->ring.hash) : "?",
        "snapshot", (json_int_t)(snap ? snap->version : 0), "active",
        (json_int_t)atomic_load_explicit(&p->active, memory_order_relaxed));
    json_object_set_new(j, "checksum", sum[0] ? json_string(sum) : json_null());
    settings = json_pack(
        "{s:s,s:I,s:I,s:f,s:I,s:s,s:I,s:I,s:I,s:b}", "hash_key",
        conf_hash_key_name(cp->hash_key) ? conf_hash_key_name(cp->hash_key)
                                         : "?",
        "points_per_weight", (json_int_t)cp->ring.points_per_weight,
        "table_size", (json_int_t)cp->ring.table_size, "balance_factor",
        cp->balance_factor, "slow_start_ms", (json_int_t)cp->slow_start_ms,
        "on_failure",
        conf_on_failure_name(cp->on_failure)
            ? conf_on_failure_name(cp->on_failure)
            : "?",
        "retries", (json_int_t)cp->retries, "connect_timeout_ms",
        (json_int_t)cp->connect_timeout_ms, "client_connections",
        (json_int_t)cp->client_connections, "health_check", cp->health.enabled);
    json_object_set_new(j, "settings", settings);
    json_object_set_new(j, "stats",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
                                  "accepted", (json_int_t)ps.accepted,
                                  "first_choice", (json_int_t)ps.first_choice,
                                  "spilled", (json_int_t)ps.spilled,
                                  "failed_over", (json_int_t)ps.failed_over,
                                  "refused_limit", (json_int_t)ps.refused_limit,
                                  "refused_error", (json_int_t)ps.refused_error,
                                  "no_member", (json_int_t)ps.no_member,
                                  "bytes_in", (json_int_t)ps.bytes_in,
                                  "bytes_out", (json_int_t)ps.bytes_out));
    members = json_array();
    for (size_t i = 0; i < p->nservers; i++)
        if (server_member(p->servers[i]))
            json_array_append_new(members,
                                  full ? member_json(snap, p->servers[i])
                                       : json_string(p->servers[i]->name));
    json_object_set_new(j, "members", members);
    return j;
}

/* ---- argument checks ----------------------------------------------------- */

/* A member name is one word as in `servers:` (no whitespace, no '/', so it
 * fits a URL path segment), printable ASCII, at most ADMIN_MAX_NAME. */
static bool
name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > ADMIN_MAX_NAME)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s > '~' || *s == '/')
            return false;
    return true;
}

/* A query flag: "?dry_run", or =1/true/yes/on, or =0/false/no/off, in any
 * case. Returns 1, 0, or -1 for any other value: reading "?dry_run=True"
 * or "?dry_run=y" as "no" applied a change the operator meant only to
 * preview, so such a request is refused instead (flag_check). */
static int
query_flag(struct MHD_Connection *c, const char *key)
{
    static const char *const yes[] = {"", "1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);

    if (v == NULL)
        return 0;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcasecmp(v, yes[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    return -1;
}

/* Parse the body as a JSON object; on failure the 400 is queued and NULL
 * returned with *<ret> set. */
static json_t *
body_object(struct MHD_Connection *c, const struct admin_request *rq,
            enum MHD_Result *ret)
{
    json_error_t jerr;
    json_t *j;

    if (rq->len == 0) {
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "a JSON object body is required");
        return NULL;
    }
    j = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "malformed JSON at line %d column %d: %s",
                             jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* Refuse keys of <j> outside <allowed> (NULL-terminated). */
static const char *
unknown_key(json_t *j, const char *const *allowed)
{
    const char *key;
    json_t *v;

    json_object_foreach(j, key, v)
    {
        bool ok = false;

        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (!ok)
            return key;
    }
    return NULL;
}

/*
 * A network address must carry exactly one port. The weight is appended
 * to it below to parse a `servers:` line, so "127.0.0.1" or "[::1]"
 * silently became a member on port 1 (the weight read as the port).
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
 * The "weight" of a member change, when <v> gives one (else *<w> stays):
 * an integer in [0, ADMIN_MAX_WEIGHT], and 0 or 1 in a jump pool -- said
 * plainly rather than left to libchash's generic weight error. On a bad
 * weight the 400 is answered into *<ret> and false returned.
 */
static bool
member_weight(struct MHD_Connection *c, const struct pool *p, const json_t *v,
              uint32_t *w, enum MHD_Result *ret)
{
    if (v == NULL)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > ADMIN_MAX_WEIGHT) {
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "\"weight\" must be an integer in [0, %d]",
                             ADMIN_MAX_WEIGHT);
        return false;
    }
    *w = (uint32_t)json_integer_value(v);
    if (p->cfg.distribution == CHASH_ALGO_JUMP && *w > 1) {
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "pool %s uses jump, which takes weights 0 or 1 "
                             "only",
                             p->name);
        return false;
    }
    return true;
}

/* ---- handlers ------------------------------------------------------------ */

/* Answer a change: its report, whether it was applied, and a note when
 * the state file could not be written. */
static enum MHD_Result
respond_report(struct MHD_Connection *c, unsigned status, json_t *report,
               bool dry_run, const char *persist_err)
{
    json_object_set_new(report, "dry_run", json_boolean(dry_run));
    if (json_object_get(report, "applied") == NULL)
        json_object_set_new(report, "applied", json_boolean(!dry_run));
    if (persist_err != NULL)
        json_object_set_new(report, "warning", json_string(persist_err));
    return respond_json(c, status, report);
}

/* Build the report for <before> -> <after>; 409 when the after side gives
 * no ring (the change would leave nothing owning the key space). */
static json_t *
make_report(struct MHD_Connection *c, struct pool *p, const struct model *b,
            const struct model *a, const char *member, enum MHD_Result *ret)
{
    char err[256];
    json_t *rep;

    if (!pool_comparable(p)) {
        /* modula/random: no ring, no exact report; say so. */
        if (a->n == 0) {
            *ret = respond_error(c, MHD_HTTP_CONFLICT,
                                 "the change would leave pool %s with no "
                                 "member in the ring",
                                 p->name);
            return NULL;
        }
        return json_pack("{s:n,s:n,s:[],s:n,s:b,s:s}", "moved", "optimal",
                         "flows", "immediate", "exact", 0, "note",
                         "this distribution is not consistent hashing: "
                         "no migration report");
    }
    rep = ops_report(&p->cfg.ring, b->m, b->n, a->m, a->n, member, err,
                     sizeof(err));
    if (rep == NULL)
        *ret = respond_error(c, MHD_HTTP_CONFLICT, "pool %s: %s", p->name, err);
    return rep;
}

static enum MHD_Result
member_add(struct MHD_Connection *c, struct pool *p,
           const struct admin_request *rq)
{
    static const char *const allowed[] = {"name", "address", "weight", NULL};
    enum MHD_Result ret = MHD_NO;
    struct conf_server cs = {0};
    struct model b = {0}, a = {0};
    struct pool_change chg = {0};
    json_t *j, *jname, *jaddr, *jw, *rep = NULL;
    const char *bad;
    uint32_t weight = 1;
    char err[256], line[1024], perr[512], detail[128];
    bool dry = query_flag(c, "dry_run") == 1, have_cs = false;
    int rc;

    j = body_object(c, rq, &ret);
    if (j == NULL)
        return ret;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "unknown field \"%s\" (a member is {\"name\", "
                            "\"address\", \"weight\"})",
                            bad);
        goto out;
    }
    jname = json_object_get(j, "name");
    jaddr = json_object_get(j, "address");
    jw = json_object_get(j, "weight");
    if (jaddr == NULL || !json_is_string(jaddr) ||
        json_string_length(jaddr) == 0) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "\"address\" must be a non-empty string "
                            "(host:port, [v6]:port or /unix/path)");
        goto out;
    }
    if (jname != NULL &&
        (!json_is_string(jname) || !name_ok(json_string_value(jname)))) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "\"name\" must be a string of 1 to %d printable "
                            "characters without spaces or '/'",
                            ADMIN_MAX_NAME);
        goto out;
    }
    if (!member_weight(c, p, jw, &weight, &ret))
        goto out;
    if (!address_has_port(json_string_value(jaddr))) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "bad \"address\" \"%s\": expected host:port, "
                            "[v6]:port or /unix/path (the weight goes in "
                            "\"weight\")",
                            json_string_value(jaddr));
        goto out;
    }
    /* Parse as a `servers:` entry so names and addresses follow the
     * config's rules exactly (twemproxy's default name included). */
    snprintf(line, sizeof(line), "%s:%u%s%s", json_string_value(jaddr), weight,
             jname ? " " : "", jname ? json_string_value(jname) : "");
    if (strchr(json_string_value(jaddr), ' ') != NULL ||
        conf_parse_server(line, &cs, err, sizeof(err)) != 0) {
        ret = respond_error(
            c, MHD_HTTP_BAD_REQUEST, "bad \"address\" \"%s\": %s",
            json_string_value(jaddr),
            strchr(json_string_value(jaddr), ' ') ? "contains a space" : err);
        goto out;
    }
    have_cs = true;
    if (!name_ok(cs.name)) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "member name \"%s\" is not valid here", cs.name);
        goto out;
    }
    if (pool_server_find(p, cs.name) != NULL &&
        server_member(pool_server_find(p, cs.name))) {
        ret = respond_error(c, MHD_HTTP_CONFLICT,
                            "pool %s already has a member named \"%s\"",
                            p->name, cs.name);
        goto out;
    }
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (server_member(s) && conf_addr_equal(&s->addr, &cs.addr)) {
            ret = respond_error(c, MHD_HTTP_CONFLICT,
                                "address %s is already member \"%s\" of "
                                "pool %s",
                                cs.addr.text, s->name, p->name);
            goto out;
        }
    }
    if (model_build(p, NULL, &b) != 0 || model_build(p, NULL, &a) != 0 ||
        model_push(&a, cs.name, weight, entry_ramp(p)) != 0) {
        ret = respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        goto out;
    }
    rep = make_report(c, p, &b, &a, cs.name, &ret);
    if (rep == NULL)
        goto out;
    if (dry) {
        ret = respond_report(c, MHD_HTTP_OK, rep, true, NULL);
        rep = NULL;
        goto out;
    }
    rc = pool_member_add(p, &cs, &chg);
    if (rc != 0) {
        ret = respond_error(c,
                            errno == EEXIST   ? MHD_HTTP_CONFLICT
                            : errno == EINVAL ? MHD_HTTP_BAD_REQUEST
                                              : MHD_HTTP_INTERNAL_SERVER_ERROR,
                            "pool %s: cannot add %s: %s", p->name, cs.name,
                            strerror(errno));
        goto out;
    }
    snprintf(detail, sizeof(detail), "%s weight %u", cs.addr.text, weight);
    change_log(p->name, cs.name, "add", detail, rep);
    rc = state_persist(p, perr, sizeof(perr));
    ret = respond_report(c, MHD_HTTP_CREATED, rep, false, rc ? perr : NULL);
    rep = NULL;
out:
    json_decref(rep);
    json_decref(j);
    free(b.m);
    free(a.m);
    if (have_cs)
        conf_server_deinit(&cs);
    return ret;
}

static enum MHD_Result
member_remove(struct MHD_Connection *c, struct pool *p, struct server *s)
{
    enum MHD_Result ret = MHD_NO;
    struct model b = {0}, a = {0};
    struct pool_change chg = {0};
    json_t *rep = NULL;
    char perr[512], name[ADMIN_MAX_NAME + 1], detail[128];
    size_t members = 0;
    bool dry = query_flag(c, "dry_run") == 1;

    for (size_t i = 0; i < p->nservers; i++)
        members += server_member(p->servers[i]);
    if (members <= 1) {
        return respond_error(c, MHD_HTTP_CONFLICT,
                             "cannot remove \"%s\": it is the last member of "
                             "pool %s",
                             s->name, p->name);
    }
    snprintf(name, sizeof(name), "%s", s->name);
    if (model_build(p, NULL, &b) != 0 || model_build(p, name, &a) != 0) {
        ret = respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        goto out;
    }
    rep = make_report(c, p, &b, &a, name, &ret);
    if (rep == NULL)
        goto out;
    if (dry) {
        ret = respond_report(c, MHD_HTTP_OK, rep, true, NULL);
        rep = NULL;
        goto out;
    }
    snprintf(detail, sizeof(detail), "%s weight %u", s->addr.text, s->weight);
    /* <s> may be freed by the removal: only <name> is used after it. */
    if (pool_member_remove(p, name, &chg) != 0) {
        ret = respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                            "pool %s: cannot remove %s: %s", p->name, name,
                            strerror(errno));
        goto out;
    }
    change_log(p->name, name, "remove", detail, rep);
    ret = respond_report(c, MHD_HTTP_OK, rep, false,
                         state_persist(p, perr, sizeof(perr)) ? perr : NULL);
    rep = NULL;
out:
    json_decref(rep);
    free(b.m);
    free(a.m);
    return ret;
}

static enum MHD_Result
member_patch(struct MHD_Connection *c, struct pool *p, struct server *s,
             const struct admin_request *rq)
{
    static const char *const allowed[] = {"weight", "state", NULL};
    enum MHD_Result ret = MHD_NO;
    struct model b = {0}, a = {0};
    struct pool_change c1 = {0}, c2 = {0};
    json_t *j, *jw, *jst, *rep = NULL;
    const char *bad, *stname = NULL;
    uint32_t weight = s->weight;
    int admin = s->admin;
    char perr[512], name[ADMIN_MAX_NAME + 1], op[32] = "", detail[128] = "";
    bool dry = query_flag(c, "dry_run") == 1;

    j = body_object(c, rq, &ret);
    if (j == NULL)
        return ret;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "unknown field \"%s\" (a member change is "
                            "{\"weight\", \"state\"})",
                            bad);
        goto out;
    }
    jw = json_object_get(j, "weight");
    jst = json_object_get(j, "state");
    if (jw == NULL && jst == NULL) {
        ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                            "nothing to change: give \"weight\" and/or "
                            "\"state\"");
        goto out;
    }
    if (!member_weight(c, p, jw, &weight, &ret))
        goto out;
    if (jst != NULL) {
        stname = json_string_value(jst);
        /* "drain" is the verb; "draining" is how the state reads back. */
        if (stname != NULL && strcmp(stname, "draining") == 0)
            stname = "drain";
        admin = state_admin_from_name(stname);
        if (admin < 0) {
            ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                                "\"state\" must be \"up\", \"drain\" or "
                                "\"maint\"");
            goto out;
        }
    }
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
    if (op[0] == '\0')
        snprintf(op, sizeof(op), "none");

    /* The model after: the member in the ring when its admin is up, at its
     * new weight; a member entering the ring starts its slow start. */
    if (model_build(p, NULL, &b) != 0 || model_build(p, name, &a) != 0 ||
        (admin == STATE_ADMIN_UP &&
         model_push(&a, name, weight,
                    s->admin == STATE_ADMIN_UP ? s->ramp : entry_ramp(p)) !=
             0)) {
        ret = respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        goto out;
    }
    rep = make_report(c, p, &b, &a, name, &ret);
    if (rep == NULL)
        goto out;
    if (dry || strcmp(op, "none") == 0) {
        /* Asking for the state a member is already in changes nothing:
         * a 200 that says so, not an error (PATCH is idempotent). */
        if (!dry) {
            json_object_set_new(rep, "applied", json_false());
            json_object_set_new(rep, "note", json_string("nothing to change"));
        }
        ret = respond_report(c, MHD_HTTP_OK, rep, dry, NULL);
        rep = NULL;
        goto out;
    }
    if (weight != s->weight) {
        if (pool_member_set_weight(p, name, weight, &c1) != 0) {
            ret = respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                                "pool %s: cannot set the weight of %s: %s",
                                p->name, name, strerror(errno));
            goto out;
        }
    }
    if (admin != s->admin) {
        if (pool_member_set_admin(p, name, admin, &c2) != 0) {
            ret = respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                                "pool %s: cannot set %s to %s: %s", p->name,
                                name, state_admin_name(admin), strerror(errno));
            goto out;
        }
    }
    change_log(p->name, name, op, detail, rep);
    ret = respond_report(c, MHD_HTTP_OK, rep, false,
                         state_persist(p, perr, sizeof(perr)) ? perr : NULL);
    rep = NULL;
out:
    json_decref(rep);
    json_decref(j);
    free(b.m);
    free(a.m);
    return ret;
}

static enum MHD_Result
pool_lookup(struct MHD_Connection *c, struct pool *p)
{
    const char *key =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key");
    const char *rs =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "replicas");
    const struct pool_snapshot *snap = pool_snapshot(p);
    size_t idx[ADMIN_MAX_REPLICAS], n;
    unsigned long replicas = 1;
    uint64_t hash;
    json_t *j, *arr;
    char *end;

    if (key == NULL)
        return respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "the query parameter \"key\" is required");
    if (rs != NULL) {
        errno = 0;
        replicas = strtoul(rs, &end, 10);
        if (errno != 0 || end == rs || *end != '\0' || replicas < 1 ||
            replicas > ADMIN_MAX_REPLICAS || rs[0] == '-')
            return respond_error(c, MHD_HTTP_BAD_REQUEST,
                                 "\"replicas\" must be an integer in [1, %d]",
                                 ADMIN_MAX_REPLICAS);
    }
    if (snap == NULL || snap->ring == NULL)
        return respond_error(c, MHD_HTTP_CONFLICT,
                             "pool %s has no member in the ring", p->name);
    /* As the data path hashes it: tcp mode hashes the client address as
     * text ("127.0.0.5"), so ?key=127.0.0.5 answers for that client; a
     * twemproxy hash_tag ("{}") hashes only the tagged part of a key. */
    {
        size_t off, plen = chash_key_tag(key, strlen(key), p->cfg.hash_tag,
                                         &off);

        hash = chash_ring_hash(snap->ring, key + off, plen);
    }
    n = chash_ring_lookup_n(snap->ring, hash, idx, replicas);
    arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct server *s = snap->servers[idx[i]];

        json_array_append_new(
            arr,
            json_pack("{s:s,s:s,s:s}", "name", s->name, "address", s->addr.text,
                      "state",
                      state_text(atomic_load_explicit((_Atomic int *)&s->state,
                                                      memory_order_relaxed))));
    }
    {
        /* The key is hashed as sent; echoed with its non-UTF-8 bytes as
         * '?' (JSON holds text only). */
        char *shown = strdup(key);

        if (shown != NULL)
            utf8_scrub(shown);
        j = json_pack("{s:s,s:s,s:o}", "pool", p->name, "key",
                      shown ? shown : "", "members", arr);
        free(shown);
    }
    {
        char hx[24];

        snprintf(hx, sizeof(hx), "%016llx", (unsigned long long)hash);
        json_object_set_new(j, "hash", json_string(hx));
    }
    return respond_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result
pool_ring(struct MHD_Connection *c, struct pool *p)
{
    const char *ss =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "segments");
    const struct pool_snapshot *snap = pool_snapshot(p);
    unsigned long segments = ADMIN_DEFAULT_SEGMENTS;
    json_t *j, *shares;
    char *end;

    if (ss != NULL) {
        errno = 0;
        segments = strtoul(ss, &end, 10);
        if (errno != 0 || end == ss || *end != '\0' || ss[0] == '-' ||
            segments < 1 || segments > ADMIN_MAX_SEGMENTS)
            return respond_error(c, MHD_HTTP_BAD_REQUEST,
                                 "\"segments\" must be an integer in [1, %d]",
                                 ADMIN_MAX_SEGMENTS);
    }
    j = json_pack("{s:s,s:I}", "pool", p->name, "segments",
                  (json_int_t)segments);
    shares = json_object();
    if (snap != NULL && snap->ring != NULL) {
        json_object_set_new(j, "arcs", ops_ring_arcs(snap->ring, segments));
        for (size_t i = 0; i < snap->n; i++)
            json_object_set_new(shares, snap->servers[i]->name,
                                json_real(chash_ring_share(snap->ring, i)));
    } else {
        json_object_set_new(j, "arcs", json_array());
    }
    json_object_set_new(j, "shares", shares);
    return respond_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result
pools_list(struct MHD_Connection *c)
{
    json_t *arr = json_array();

    for (size_t i = 0; i < pool_count(); i++)
        json_array_append_new(arr, pool_json(pool_at(i), true));
    return respond_json(c, MHD_HTTP_OK, json_pack("{s:o}", "pools", arr));
}

static enum MHD_Result
serve_metrics(struct MHD_Connection *c)
{
    size_t len = 0;
    char *text = metrics_render(&len);

    if (text == NULL)
        return respond_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                             "out of memory");
    return respond_buf(c, MHD_HTTP_OK,
                       "text/plain; version=0.0.4; "
                       "charset=utf-8",
                       text, len);
}

static enum MHD_Result
serve_dashboard(struct MHD_Connection *c)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer(
        dashboard_html_len, (void *)dashboard_html, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- routing ------------------------------------------------------------- */

/* Split <url> into at most <max> segments (modifies a copy in <buf>).
 * Returns how many, or -1 when there are too many or an empty one (a
 * doubled or trailing slash beyond the root). */
static int
split_path(const char *url, char *buf, size_t buflen, char **seg, int max)
{
    int n = 0;
    char *p;

    if (snprintf(buf, buflen, "%s", url) >= (int)buflen)
        return -1;
    p = buf;
    if (*p == '/')
        p++;
    if (*p == '\0')
        return 0;
    while (p != NULL) {
        char *slash = strchr(p, '/');

        if (slash != NULL)
            *slash = '\0';
        if (*p == '\0' || n == max)
            return -1;
        seg[n++] = p;
        p = slash ? slash + 1 : NULL;
    }
    return n;
}

static bool
is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/*
 * "/api/pools/<pool>/members/<name>": <pool> into <pool> and the name,
 * everything after "members/", returned (NULL: not such a path). A member
 * name may hold '/': a unix socket member the config names by its path
 * ("/run/app.sock") is ".../members//run/app.sock" (or %2F-encoded, which
 * MHD decodes first); split_path's segments could not address it.
 */
static const char *
member_path(const char *url, char *pool, size_t poollen)
{
    static const char pre[] = "/api/pools/", mid[] = "/members/";
    const char *ps = url + sizeof(pre) - 1, *pe;

    if (strncmp(url, pre, sizeof(pre) - 1) != 0 ||
        (pe = strchr(ps, '/')) == NULL || pe == ps ||
        strncmp(pe, mid, sizeof(mid) - 1) != 0 || pe[sizeof(mid) - 1] == '\0' ||
        (size_t)(pe - ps) >= poollen)
        return NULL;
    snprintf(pool, poollen, "%.*s", (int)(pe - ps), ps);
    return pe + sizeof(mid) - 1;
}

static enum MHD_Result
route(struct MHD_Connection *c, const char *url, const char *method,
      const struct admin_request *rq)
{
    char buf[2048];
    char *seg[6];
    int n = split_path(url, buf, sizeof(buf), seg, 6);
    bool get = is(method, "GET") || is(method, "HEAD");
    struct pool *p;
    struct server *s;
    char pname[256];
    const char *mname = member_path(url, pname, sizeof(pname));

    if (mname != NULL) {
        n = 5;
        seg[0] = (char *)"api";
        seg[1] = (char *)"pools";
        seg[2] = pname;
        seg[3] = (char *)"members";
        seg[4] = (char *)mname;
    }
    if (n < 0)
        return respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s", url);
    if (n == 0)
        return get ? serve_dashboard(c) : respond_405(c, method, url, "GET");
    if (n == 1 && is(seg[0], "metrics"))
        return get ? serve_metrics(c) : respond_405(c, method, url, "GET");
    if (!is(seg[0], "api") || n < 2)
        return respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s", url);
    if (n == 2 && is(seg[1], "state")) {
        if (!get)
            return respond_405(c, method, url, "GET");
        json_t *j = A.state ? state_json(A.state)
                            : json_pack("{s:i,s:{}}", "version", 1, "pools");
        json_object_set_new(
            j, "file", A.state_file ? json_string(A.state_file) : json_null());
        return respond_json(c, MHD_HTTP_OK, j);
    }
    if (n == 2 && is(seg[1], "changes"))
        return get ? respond_json(c, MHD_HTTP_OK, changes_json())
                   : respond_405(c, method, url, "GET");
    if (!is(seg[1], "pools"))
        return respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s", url);
    if (n == 2)
        return get ? pools_list(c) : respond_405(c, method, url, "GET");

    p = pool_find(seg[2]);
    if (p == NULL)
        return respond_error(c, MHD_HTTP_NOT_FOUND, "no pool named \"%s\"",
                             seg[2]);
    if (n == 3)
        return get ? respond_json(c, MHD_HTTP_OK, pool_json(p, true))
                   : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "lookup"))
        return get ? pool_lookup(c, p) : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "ring"))
        return get ? pool_ring(c, p) : respond_405(c, method, url, "GET");
    if (!is(seg[3], "members"))
        return respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s", url);
    if (!get && query_flag(c, "dry_run") < 0)
        return respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "\"dry_run\" must be 1, true, yes, on or 0, "
                             "false, no, off (nothing was changed)");
    if (n == 4) {
        if (is(method, "POST"))
            return member_add(c, p, rq);
        if (get) {
            json_t *pj = pool_json(p, true);
            json_t *m = json_incref(json_object_get(pj, "members"));

            json_decref(pj);
            return respond_json(
                c, MHD_HTTP_OK,
                json_pack("{s:s,s:o}", "pool", p->name, "members", m));
        }
        return respond_405(c, method, url, "GET, POST");
    }
    s = pool_server_find(p, seg[4]);
    if ((s == NULL || !server_member(s)) && strchr(seg[4], '/') != NULL)
        return respond_error(c, MHD_HTTP_NOT_FOUND,
                             "no such path: %s (pool %s has no member named "
                             "\"%s\")",
                             url, p->name, seg[4]);
    if (s == NULL || !server_member(s))
        return respond_error(c, MHD_HTTP_NOT_FOUND,
                             "pool %s has no member named \"%s\"", p->name,
                             seg[4]);
    if (get)
        return respond_json(c, MHD_HTTP_OK, member_json(pool_snapshot(p), s));
    if (is(method, "PATCH"))
        return member_patch(c, p, s, rq);
    if (is(method, "DELETE"))
        return member_remove(c, p, s);
    return respond_405(c, method, url, "GET, PATCH, DELETE");
}

/* Constant-time comparison: the token must not leak through timing. */
static bool
token_ok(const char *given)
{
    size_t gl, tl = strlen(A.token);
    unsigned char diff = 0;

    /* The scheme is case-insensitive and may be followed by several
     * spaces (RFC 7235 2.1): "bearer <token>" from a client is valid. */
    if (given == NULL || strncasecmp(given, "Bearer ", 7) != 0)
        return false;
    given += 7;
    given += strspn(given, " ");
    gl = strlen(given);
    for (size_t i = 0; i < tl; i++)
        diff |=
            (unsigned char)A.token[i] ^ (unsigned char)given[i < gl ? i : 0];
    return diff == 0 && gl == tl;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url,
           const char *method, const char *version, const char *upload,
           size_t *upload_size, void **con_cls)
{
    struct admin_request *rq = *con_cls;

    (void)cls;
    (void)version;
    if (rq == NULL) {
        const char *cl;

        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            return MHD_NO;
        *con_cls = rq;
        /* Refuse an announced oversized body before reading it. */
        cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoull(cl, NULL, 10) > ADMIN_MAX_BODY) {
            rq->answered = true;
            return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                 "request body over %d bytes", ADMIN_MAX_BODY);
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!rq->answered && !rq->too_large) {
            if (rq->len + *upload_size > ADMIN_MAX_BODY) {
                rq->too_large = true;
            } else {
                if (rq->len + *upload_size + 1 > rq->cap) {
                    size_t cap = rq->len + *upload_size + 1;
                    char *nb = realloc(rq->body, cap < 4096 ? 4096 : cap);

                    if (nb == NULL)
                        return MHD_NO;
                    rq->body = nb;
                    rq->cap = cap < 4096 ? 4096 : cap;
                }
                memcpy(rq->body + rq->len, upload, *upload_size);
                rq->len += *upload_size;
                rq->body[rq->len] = '\0';
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->answered)
        return MHD_YES;
    rq->answered = true;
    if (A.token != NULL && !is(url, "/") &&
        !token_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                              MHD_HTTP_HEADER_AUTHORIZATION)))
        return respond_error(c, MHD_HTTP_UNAUTHORIZED,
                             "missing or wrong token: send \"Authorization: "
                             "Bearer <admin_token>\"");
    if (rq->too_large)
        return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                             "request body over %d bytes", ADMIN_MAX_BODY);
    return route(c, url, method, rq);
}

static void
on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
             enum MHD_RequestTerminationCode toe)
{
    struct admin_request *rq = *con_cls;

    (void)cls;
    (void)c;
    (void)toe;
    if (rq != NULL) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's format strings: tell the compiler so -Wformat=2 checks
 * our use of them instead of refusing a non-literal format. */
__attribute__((format(printf, 2, 0))) static void
on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    log_debug("admin: %s", msg);
}

/* ---- lifecycle ----------------------------------------------------------- */

static void
on_ready(struct control_watch *w, uint32_t events)
{
    (void)w;
    (void)events;
    admin_run();
}

/* Connection timeouts need MHD_run() even when nothing is readable; every
 * 100 ms is plenty for a 10 s timeout. */
static void
on_tick(uint64_t now_ms, void *arg)
{
    static uint64_t last;

    (void)arg;
    if (now_ms - last >= 100) {
        last = now_ms;
        admin_run();
    }
}

int
admin_start(const struct conf *conf, char *err, size_t errlen)
{
    const struct conf_addr *a = &conf->admin;
    int fd = -1, one = 1;
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;

    if (A.mhd != NULL)
        return 0;
    if (a->family == AF_UNSPEC)
        return 0;
    fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "admin %s: socket: %s", a->text, strerror(errno));
        return -1;
    }
    if (a->family != AF_UNIX)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    else
        unlink(((const struct sockaddr_un *)&a->sa)->sun_path);
    if (bind(fd, (const struct sockaddr *)&a->sa, a->salen) != 0 ||
        listen(fd, 64) != 0) {
        snprintf(err, errlen, "admin %s: %s", a->text, strerror(errno));
        close(fd);
        return -1;
    }
    if (a->family == AF_INET6)
        flags |= MHD_USE_IPv6;
    A.mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, NULL, MHD_OPTION_END);
    if (A.mhd == NULL) {
        snprintf(err, errlen, "admin %s: cannot start the HTTP server",
                 a->text);
        close(fd);
        return -1;
    }
    A.watch.fd = admin_fd();
    A.watch.cb = on_ready;
    if (A.watch.fd < 0 || control_watch_add(&A.watch, EPOLLIN) != 0 ||
        (!A.tick_added && control_tick_add(on_tick, NULL) != 0)) {
        snprintf(err, errlen, "admin %s: cannot watch the HTTP server: %s",
                 a->text, strerror(errno));
        MHD_stop_daemon(A.mhd);
        A.mhd = NULL;
        return -1;
    }
    A.watching = true;
    A.tick_added = true;
    metrics_init();
    free(A.token);
    A.token = conf->admin_token && conf->admin_token[0]
                  ? strdup(conf->admin_token)
                  : NULL;
    free(A.address);
    A.address = strdup(a->text);
    log_info("admin API, metrics and dashboard on http://%s/%s", a->text,
             A.token ? " (token required)" : "");
    return 0;
}

void
admin_stop(void)
{
    if (A.watching)
        control_watch_del(&A.watch);
    A.watching = false;
    if (A.mhd != NULL)
        MHD_stop_daemon(A.mhd); /* closes the listening socket too */
    A.mhd = NULL;
    free(A.token);
    A.token = NULL;
    free(A.address);
    A.address = NULL;
}

int
admin_fd(void)
{
    const union MHD_DaemonInfo *info;

    if (A.mhd == NULL)
        return -1;
    info = MHD_get_daemon_info(A.mhd, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

void
admin_run(void)
{
    if (A.mhd != NULL)
        MHD_run(A.mhd);
}

void
admin_reconfigure(const struct conf *conf)
{
    if (A.mhd == NULL)
        return;
    if (conf->admin.text == NULL || A.address == NULL ||
        strcmp(conf->admin.text, A.address) != 0)
        log_warn("admin: the admin address changed to %s; it takes effect "
                 "at the next restart",
                 conf->admin.text ? conf->admin.text : "off");
    free(A.token);
    A.token = conf->admin_token && conf->admin_token[0]
                  ? strdup(conf->admin_token)
                  : NULL;
}

/* admin.c -- the admin API over libmicrohttpd in the control thread: pools
 * and members as JSON, runtime membership changes answered with their
 * migration report, lookups, ring arcs, the state file, the change log,
 * /metrics and the dashboard page. Every bad request gets a 4xx and a
 * JSON {"error": ...} naming the problem, and changes nothing. chashd owns
 * the listening socket and hands accepted connections to libmicrohttpd.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/admin.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "model/report.h"
#include "base/clock.h"
#include "conf/conf.h"
#include "loop/control.h"
#include "api/dashboard.h"
#include "control/etcd.h"
#include "control/hot.h"
#include "base/log.h"
#include "control/membership.h"
#include "control/migration.h"
#include "api/metrics.h"
#include "model/pool.h"
#include "control/replica.h"
#include "model/state.h"
#include "base/text.h"

#define ADMIN_MAX_BODY (64 * 1024)      /* request bodies above are 413 */
#define ADMIN_DISCARD_MAX (1024 * 1024) /* dropped before a 413 */
#define ADMIN_RUN_ROUNDS 16 /* MHD_run rounds per event while data waits */
/* A request (its head and body) must arrive within this, whatever its
 * pace: libmicrohttpd's timeout is an idle one, and a client that sends a
 * byte every few seconds kept its connection, and the 64th of them locked
 * everyone out. */
#define ADMIN_REQUEST_DEADLINE_MS 10000
/* ... and within this for ADMIN_REQUEST_DEADLINE_MS after the connection
 * limit was last reached: the first cut of the oldest frees places that
 * the backlog fills at once, and the younger slow ones would otherwise
 * keep theirs for the full 10 s. */
#define ADMIN_PRESSURE_DEADLINE_MS 1000
#define ADMIN_MAX_REPLICAS 64
#define ADMIN_MAX_SEGMENTS 65536
#define ADMIN_DEFAULT_SEGMENTS 1024
#define ADMIN_JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(12))
#define ADMIN_MAX_CONNECTIONS 64
#define ADMIN_ACCEPT_BATCH 16     /* accepts per wake-up, the rest next turn */
#define ADMIN_ACCEPT_PAUSE_MS 100 /* as the workers' listeners */

/* Per request, from its request line (on_uri) to its end (on_completed). */
struct admin_request {
    char *body; /* collected over the upload calls */
    size_t len, cap;
    int control; /* a control byte the URL decodes to, or -1 */
    bool control_in_query;
    bool admitted; /* admit() ran: the header checks are done */
    bool too_large;
    size_t discarded; /* body bytes dropped past ADMIN_MAX_BODY */
    bool answered;    /* a response was queued before the body was read */
    /* A membership change answers later (its report is computed on the
     * builder thread): the connection is suspended meanwhile, and the
     * answer kept here for the handler's next call. */
    struct MHD_Connection *conn;
    bool suspended;
    bool ready;
    unsigned ok_status; /* 201 for an applied add, else 200 */
    unsigned status;
    char *text; /* the answer (JSON), owned */
    size_t textlen;
    json_t *wrap; /* a rebalance's proposal: the report goes in it */
};

/*
 * The admin server: one per process, control thread only. The token is in
 * force for as long as the listener is bound: a listener that is not on
 * loopback always has one (conf refuses such a config without it at
 * start-up, admin_reload_check at a reload, admin_reconfigure keeps it).
 */
static struct MHD_Daemon *mhd;
static char *token;                   /* NULL: no authentication */
static char *address;                 /* as written, for messages */
static char *host;                    /* its host part: "127.0.0.1", "[::1]" */
static bool loopback;                 /* bound to loopback or a unix socket */
static int family;                    /* of the bound address */
static int listen_fd = -1;            /* ours: we accept, MHD serves */
static struct control_watch listener; /* listen_fd */
static bool listening;                /* listener is in the control loop */
static uint64_t resume_ms;            /* paused: watch it again then, or 0 */
static uint64_t starved_ms;           /* out of descriptors since, or 0 */
static struct control_watch watch;    /* libmicrohttpd's epoll fd */
static bool watching;
static bool tick_added;

/* ---- responses ----------------------------------------------------------- */

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

/* <j> (reference stolen) as the text of an answer, with a trailing
 * newline so `curl` output ends cleanly; NULL when out of memory. */
static char *
json_text(json_t *j, size_t *len)
{
    char *text = json_dumps(j, ADMIN_JSON_FLAGS), *nt;

    json_decref(j);
    if (text == NULL)
        return NULL;
    *len = strlen(text);
    nt = realloc(text, *len + 2);
    if (nt == NULL) {
        free(text);
        return NULL;
    }
    nt[(*len)++] = '\n';
    nt[*len] = '\0';
    return nt;
}

/* Send <j> (reference stolen). */
static enum MHD_Result
respond_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    size_t len;
    char *text = json_text(j, &len);

    if (text == NULL)
        return MHD_NO;
    return respond_buf(c, status, "application/json", text, len);
}

static enum MHD_Result __attribute__((format(printf, 3, 4)))
respond_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    text_utf8_scrub(msg);
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
    text_utf8_scrub(msg);
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

/* ---- JSON views ---------------------------------------------------------- */

static bool
server_member(const struct server *s)
{
    return atomic_load_explicit((_Atomic int *)&s->state,
                                memory_order_relaxed) != SERVER_REMOVED;
}

static json_t *
member_json(const struct pool_snapshot *snap, const struct server *s)
{
    struct stats_server_sum sum;
    int st =
        atomic_load_explicit((_Atomic int *)&s->state, memory_order_relaxed);

    stats_server_sum(s->stats, pool_workers(), &sum);
    json_t *j = json_pack(
        "{s:s,s:s,s:I,s:f,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "name",
        s->name, "address", s->addr.text, "weight", (json_int_t)s->weight,
        "ramp", s->ramp, "state", server_state_name(st), "admin",
        state_admin_name(s->admin) ? state_admin_name(s->admin) : "up",
        "health", server_health_name(s->health), "active",
        (json_int_t)atomic_load_explicit((_Atomic uint64_t *)&s->active,
                                         memory_order_relaxed),
        "connections_total", (json_int_t)sum.conns_total, "bytes_in",
        (json_int_t)sum.bytes_in, "bytes_out", (json_int_t)sum.bytes_out,
        "connect_failures", (json_int_t)sum.connect_failures,
        "connect_timeouts", (json_int_t)sum.connect_timeouts, "share",
        pool_snapshot_share(snap, s));
    json_object_set_new(j, "ejections", json_integer((json_int_t)s->ejections));
    if (s->zone != NULL)
        json_object_set_new(j, "zone", json_string(s->zone));
    if (s->pool != NULL && s->pool->cfg.migration == CONF_MIGRATION_COPY)
        json_object_set_new(
            j, "leaving", json_boolean(migration_is_leaving(s->pool, s->name)));
    json_object_set_new(j, "early_closes",
                        json_integer((json_int_t)sum.early_closes));
    /* store modes: requests (fragments), how they ended, in flight */
    json_object_set_new(j, "requests",
                        json_pack("{s:I,s:I,s:I,s:I,s:I}", "total",
                                  (json_int_t)sum.requests, "error_replies",
                                  (json_int_t)sum.request_errors, "timeouts",
                                  (json_int_t)sum.request_timeouts, "failed",
                                  (json_int_t)sum.request_failures, "inflight",
                                  (json_int_t)sum.inflight));
    json_object_set_new(
        j, "points", json_integer((json_int_t)pool_snapshot_points(snap, s)));
    /* "share" is where the member's keys belong (its ring); what it takes
     * of new connections now is "routing_share": 0 while draining, down
     * or ejected under failover, less while it ramps. */
    json_object_set_new(j, "routing_share",
                        json_real(pool_snapshot_routing_share(snap, s->name)));
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
    char sum[32] = "", chain[512];

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
        conf_hash_chain_text(cp, chain, sizeof(chain)), "points_per_weight",
        (json_int_t)cp->ring.points_per_weight, "table_size",
        (json_int_t)cp->ring.table_size, "balance_factor", cp->balance_factor,
        "slow_start_ms", (json_int_t)cp->slow_start_ms, "on_failure",
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
    json_object_set_new(
        json_object_get(j, "stats"), "requests",
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "total", (json_int_t)ps.requests,
                  "fragments", (json_int_t)ps.fragments, "local",
                  (json_int_t)ps.local, "refused", (json_int_t)ps.refused,
                  "errors", (json_int_t)ps.errors, "protocol_errors",
                  (json_int_t)ps.protocol_errors));
    members = json_array();
    for (size_t i = 0; i < p->nservers; i++)
        if (server_member(p->servers[i]))
            json_array_append_new(members,
                                  full ? member_json(snap, p->servers[i])
                                       : json_string(p->servers[i]->name));
    json_object_set_new(j, "members", members);
    {
        json_t *rep = replica_json(p);

        if (rep != NULL)
            json_object_set_new(j, "replication", rep);
    }
    return j;
}

/* ---- argument checks ----------------------------------------------------- */

/*
 * Everything from here to the handlers is pure: it reads its arguments
 * and writes its outputs, and knows nothing of libmicrohttpd or the pools,
 * so the handlers and tests/fuzz/fuzz_admin.c run the same code. A
 * refusal is the text of the 400 the handler sends.
 */

int
admin_flag(const char *v)
{
    static const char *const yes[] = {"", "1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};

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

/* The query flag <key> of <c>: admin_flag of its value. */
static int
query_flag(struct MHD_Connection *c, const char *key)
{
    return admin_flag(
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key));
}

int
admin_count_arg(const char *s, unsigned long max, unsigned long *out)
{
    unsigned long v;
    char *end;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < 1 ||
        v > max)
        return -1;
    *out = v;
    return 0;
}

int
admin_target_arg(const char *s, double *out)
{
    double v;
    char *end;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || end == s || !(v >= 1.0) || v > 100)
        return -1;
    *out = v;
    return 0;
}

static void __attribute__((format(printf, 3, 4)))
seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* <body> (<len> bytes) as a JSON object, or NULL with why in <err>. */
static json_t *
body_object(const char *body, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j;

    if (len == 0) {
        seterr(err, errlen, "a JSON object body is required");
        return NULL;
    }
    j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        seterr(err, errlen, "malformed JSON at line %d column %d: %s",
               jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        seterr(err, errlen, "the body must be a JSON object");
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

/* A JSON string without a NUL inside (a C string holds all of it). */
static bool
c_string(const json_t *v)
{
    return json_is_string(v) &&
           strlen(json_string_value(v)) == json_string_length(v);
}

/*
 * The "weight" of a member change, when <v> gives one: an integer (its
 * range is the membership module's to check). False with why in <err> on
 * a bad type.
 */
static bool
weight_arg(const json_t *v, struct membership_request *mr, char *err,
           size_t errlen)
{
    if (v == NULL)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > MEMBERSHIP_MAX_WEIGHT) {
        seterr(err, errlen, "\"weight\" must be an integer in [0, %d]",
               MEMBERSHIP_MAX_WEIGHT);
        return false;
    }
    mr->has_weight = true;
    mr->weight = (uint32_t)json_integer_value(v);
    return true;
}

/*
 * The "force" of a change, when <j> gives one: true or false. False with
 * why in <err> on another type.
 */
static bool
force_arg(const json_t *j, bool *force, char *err, size_t errlen)
{
    const json_t *v = json_object_get(j, "force");

    if (v == NULL)
        return true;
    if (!json_is_boolean(v)) {
        seterr(err, errlen, "\"force\" must be true or false");
        return false;
    }
    *force = json_is_true(v);
    return true;
}

json_t *
admin_member_add_body(const char *body, size_t len,
                      struct membership_request *mr, char *err, size_t errlen)
{
    static const char *const allowed[] = {"name",  "address", "weight",
                                          "force", "zone",    NULL};
    json_t *j, *jname, *jaddr, *jz;
    const char *bad;

    *mr = (struct membership_request){.op = MEMBERSHIP_ADD};
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        seterr(err, errlen,
               "unknown field \"%s\" (a member is {\"name\", "
               "\"address\", \"weight\", \"zone\", "
               "\"force\"})",
               bad);
        goto fail;
    }
    if (!force_arg(j, &mr->force, err, errlen))
        goto fail;
    jname = json_object_get(j, "name");
    jaddr = json_object_get(j, "address");
    if (jaddr == NULL || !c_string(jaddr) || json_string_length(jaddr) == 0) {
        seterr(err, errlen,
               "\"address\" must be a non-empty string "
               "(host:port, [v6]:port or /unix/path)");
        goto fail;
    }
    if (jname != NULL &&
        (!c_string(jname) || !text_name_ok(json_string_value(jname)))) {
        seterr(err, errlen,
               "\"name\" must be a string of 1 to %d printable "
               "characters without spaces or '/'",
               TEXT_NAME_MAX);
        goto fail;
    }
    if (!weight_arg(json_object_get(j, "weight"), mr, err, errlen))
        goto fail;
    jz = json_object_get(j, "zone");
    if (jz != NULL) {
        if (!c_string(jz)) {
            seterr(err, errlen, "\"zone\" must be a string");
            goto fail;
        }
        mr->zone = json_string_value(jz);
    }
    mr->name = jname ? json_string_value(jname) : NULL;
    mr->address = json_string_value(jaddr);
    return j;
fail:
    json_decref(j);
    *mr = (struct membership_request){.op = MEMBERSHIP_ADD};
    return NULL;
}

json_t *
admin_member_patch_body(const char *body, size_t len,
                        struct membership_request *mr, char *err, size_t errlen)
{
    static const char *const allowed[] = {"weight", "state", "force", NULL};
    json_t *j, *jst;
    const char *bad;

    *mr = (struct membership_request){.op = MEMBERSHIP_UPDATE};
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        seterr(err, errlen,
               "unknown field \"%s\" (a member change is "
               "{\"weight\", \"state\", \"force\"})",
               bad);
        goto fail;
    }
    if (!force_arg(j, &mr->force, err, errlen))
        goto fail;
    if (!weight_arg(json_object_get(j, "weight"), mr, err, errlen))
        goto fail;
    jst = json_object_get(j, "state");
    if (jst != NULL) {
        const char *st = json_string_value(jst);

        /* "drain" is the verb; "draining" is how the state reads back. */
        if (st != NULL && strcmp(st, "draining") == 0)
            st = "drain";
        mr->has_admin = true;
        mr->admin = state_admin_from_name(st);
        if (mr->admin < 0) {
            seterr(err, errlen,
                   "\"state\" must be \"up\", \"drain\" or "
                   "\"maint\"");
            goto fail;
        }
    }
    return j;
fail:
    json_decref(j);
    *mr = (struct membership_request){.op = MEMBERSHIP_UPDATE};
    return NULL;
}

json_t *
admin_delete_body(const char *body, size_t len, bool *force, char *err,
                  size_t errlen)
{
    static const char *const allowed[] = {"force", NULL};
    json_t *j;
    const char *bad;

    *force = false;
    if (len == 0)
        return json_object();
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    if ((bad = unknown_key(j, allowed)) != NULL) {
        seterr(err, errlen,
               "unknown field \"%s\" (the body of a DELETE is "
               "{\"force\": true}, or none)",
               bad);
        json_decref(j);
        return NULL;
    }
    if (!force_arg(j, force, err, errlen)) {
        json_decref(j);
        *force = false;
        return NULL;
    }
    return j;
}

json_t *
admin_changes_body(const char *body, size_t len,
                   struct membership_batch_op *ops, size_t *n, char *err,
                   size_t errlen)
{
    static const char *const top[] = {"changes", "force", NULL};
    static const char *const allowed[] = {"op",     "name",  "address",
                                          "weight", "state", NULL};
    json_t *j, *list, *e;
    size_t i;

    *n = 0;
    j = body_object(body, len, err, errlen);
    if (j == NULL)
        return NULL;
    list = json_object_get(j, "changes");
    if (json_object_get(j, "force") != NULL &&
        !json_is_boolean(json_object_get(j, "force"))) {
        seterr(err, errlen, "\"force\" must be true or false");
        goto fail;
    }
    if (unknown_key(j, top) != NULL || !json_is_array(list) ||
        json_array_size(list) == 0 || json_array_size(list) > ADMIN_BATCH_MAX) {
        seterr(err, errlen,
               "the body is {\"changes\": [...], \"force\": true or "
               "false (optional)} with 1 to %d "
               "changes like {\"op\": \"add\", \"name\", "
               "\"address\", \"weight\"}, {\"op\": "
               "\"remove\", \"name\"} or {\"op\": \"update\", "
               "\"name\", \"weight\", \"state\"}",
               ADMIN_BATCH_MAX);
        goto fail;
    }
    memset(ops, 0, ADMIN_BATCH_MAX * sizeof(*ops));
    json_array_foreach(list, i, e)
    {
        const char *op = json_string_value(json_object_get(e, "op"));
        json_t *jn = json_object_get(e, "name"),
               *ja = json_object_get(e, "address");
        json_t *jw = json_object_get(e, "weight"),
               *js = json_object_get(e, "state");
        const char *why = NULL;

        if (!json_is_object(e))
            why = "is not an object";
        else if (unknown_key(e, allowed) != NULL)
            why = "has an unknown field (valid: op, name, address, weight, "
                  "state)";
        else if (op == NULL ||
                 (strcmp(op, "add") != 0 && strcmp(op, "remove") != 0 &&
                  strcmp(op, "update") != 0))
            why = "needs \"op\": add, remove or update";
        else if (!c_string(jn) || !text_name_ok(json_string_value(jn)))
            why = "needs a \"name\" without spaces or '/'";
        else if (strcmp(op, "add") == 0 && !c_string(ja))
            why = "(add) needs an \"address\"";
        else if (strcmp(op, "add") != 0 && ja != NULL)
            why = "gives an \"address\": only add takes one";
        else if (jw != NULL &&
                 (!json_is_integer(jw) || json_integer_value(jw) < 1 ||
                  json_integer_value(jw) > MEMBERSHIP_MAX_WEIGHT))
            why = "has a \"weight\" that is not an integer from 1 to 1000000";
        else if (js != NULL &&
                 (strcmp(op, "update") != 0 ||
                  state_admin_from_name(json_string_value(js)) < 0))
            why = "has a bad \"state\" (update only: up, drain or maint)";
        if (why != NULL) {
            seterr(err, errlen, "change %zu %s", i + 1, why);
            goto fail;
        }
        ops[i].op = op[0] == 'a'   ? MEMBERSHIP_ADD
                    : op[0] == 'r' ? MEMBERSHIP_REMOVE
                                   : MEMBERSHIP_UPDATE;
        ops[i].name = json_string_value(jn);
        ops[i].address = json_string_value(ja);
        ops[i].has_weight = jw != NULL;
        ops[i].weight = jw ? (uint32_t)json_integer_value(jw) : 0;
        ops[i].has_admin = js != NULL;
        ops[i].admin = js ? state_admin_from_name(json_string_value(js)) : 0;
    }
    *n = json_array_size(list);
    return j;
fail:
    json_decref(j);
    *n = 0;
    return NULL;
}

/* ---- handlers ------------------------------------------------------------ */

/* A membership change is done (maybe later, from the builder's
 * completion): keep its answer and wake the suspended connection. */
static void
change_done(struct membership_result *res, void *arg)
{
    static const unsigned status[] = {
        [MEMBERSHIP_EINVAL] = MHD_HTTP_BAD_REQUEST,
        [MEMBERSHIP_ENOENT] = MHD_HTTP_NOT_FOUND,
        [MEMBERSHIP_ECONFLICT] = MHD_HTTP_CONFLICT,
        [MEMBERSHIP_ENOMEM] = MHD_HTTP_INTERNAL_SERVER_ERROR,
        [MEMBERSHIP_EUNAVAIL] = MHD_HTTP_SERVICE_UNAVAILABLE,
    };
    struct admin_request *rq = arg;

    if (res->error != MEMBERSHIP_OK) {
        rq->status = res->error > 0 && res->error <= MEMBERSHIP_EUNAVAIL
                         ? status[res->error]
                         : MHD_HTTP_INTERNAL_SERVER_ERROR;
        text_utf8_scrub(res->message);
        /* A change refused for want of "force" (a pool that does not
         * move data) carries its report: the figures of the refusal. */
        rq->text = json_text(json_pack("{s:s,s:O*}", "error", res->message,
                                       "report", res->report),
                             &rq->textlen);
    } else if (rq->wrap != NULL) {
        json_object_set(rq->wrap, "report", res->report);
        rq->status = MHD_HTTP_OK;
        rq->text = json_text(rq->wrap, &rq->textlen);
        rq->wrap = NULL;
    } else {
        rq->status = json_is_true(json_object_get(res->report, "applied"))
                         ? rq->ok_status
                         : MHD_HTTP_OK;
        rq->text = json_text(json_incref(res->report), &rq->textlen);
    }
    json_decref(rq->wrap);
    rq->wrap = NULL;
    rq->ready = true;
    if (rq->suspended) {
        rq->suspended = false;
        MHD_resume_connection(rq->conn);
        admin_run(); /* not from inside libmicrohttpd: a builder completion */
    }
}

/* Queue the answer change_done() kept. */
static enum MHD_Result
respond_ready(struct MHD_Connection *c, struct admin_request *rq)
{
    char *text = rq->text;

    rq->text = NULL;
    rq->ready = false;
    if (text == NULL)
        return MHD_NO; /* out of memory: the connection is closed */
    return respond_buf(c, rq->status, "application/json", text, rq->textlen);
}

/* Start membership change <mr>; answer now if it is refused at once,
 * else suspend the connection until change_done(). */
static enum MHD_Result
respond_change(struct MHD_Connection *c, struct pool *p,
               const struct membership_request *mr, bool dry,
               unsigned ok_status, struct admin_request *rq)
{
    rq->conn = c;
    rq->ok_status = ok_status;
    membership_change(p, mr, MEMBERSHIP_ADMIN, dry, change_done, rq);
    if (rq->ready)
        return respond_ready(c, rq);
    rq->suspended = true;
    MHD_suspend_connection(c);
    return MHD_YES;
}

static enum MHD_Result
member_add(struct MHD_Connection *c, struct pool *p, struct admin_request *rq)
{
    struct membership_request mr;
    enum MHD_Result ret;
    char err[512];
    json_t *j;

    j = admin_member_add_body(rq->body, rq->len, &mr, err, sizeof(err));
    if (j == NULL)
        return respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    ret = respond_change(c, p, &mr, query_flag(c, "dry_run") == 1,
                         MHD_HTTP_CREATED, rq);
    json_decref(j);
    return ret;
}

static enum MHD_Result
member_patch(struct MHD_Connection *c, struct pool *p, const char *name,
             struct admin_request *rq)
{
    struct membership_request mr;
    enum MHD_Result ret;
    char err[512];
    json_t *j;

    j = admin_member_patch_body(rq->body, rq->len, &mr, err, sizeof(err));
    if (j == NULL)
        return respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    mr.name = name;
    ret = respond_change(c, p, &mr, query_flag(c, "dry_run") == 1, MHD_HTTP_OK,
                         rq);
    json_decref(j);
    return ret;
}

/* POST /api/pools/{pool}/changes: {"changes": [{"op": "add", "name",
 * "address", "weight"}, {"op": "remove", "name"}, {"op": "update",
 * "name", "weight", "state"}, ...]}: one etcd transaction. */
static enum MHD_Result
pool_changes(struct MHD_Connection *c, struct pool *p, struct admin_request *rq)
{
    struct membership_batch_op ops[ADMIN_BATCH_MAX];
    enum MHD_Result ret;
    char err[512];
    json_t *j;
    size_t n;

    j = admin_changes_body(rq->body, rq->len, ops, &n, err, sizeof(err));
    if (j == NULL)
        return respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    rq->conn = c;
    rq->ok_status = MHD_HTTP_OK;
    membership_batch(p, ops, n, query_flag(c, "dry_run") == 1,
                     json_is_true(json_object_get(j, "force")), change_done,
                     rq);
    if (rq->ready) {
        ret = respond_ready(c, rq);
    } else {
        rq->suspended = true;
        MHD_suspend_connection(c);
        ret = MHD_YES;
    }
    json_decref(j);
    return ret;
}

/* GET /api/pools/{pool}/rebalance?target=R: weights that bring every
 * member's measured load within R of its share, with the exact migration
 * report of applying them all (a dry-run batch); nothing is changed. */
static enum MHD_Result
pool_rebalance(struct MHD_Connection *c, struct pool *p,
               struct admin_request *rq)
{
    const char *t =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "target");
    struct membership_batch_op ops[ADMIN_BATCH_MAX];
    double target = 1.2;
    json_t *proposal = NULL;
    int n;

    if (t != NULL) {
        if (admin_target_arg(t, &target) != 0)
            return respond_error(c, MHD_HTTP_BAD_REQUEST,
                                 "\"target\" must be a number from 1 to 100 "
                                 "(the load ratio to stay under; 1.2: 20%% "
                                 "over the member's share)");
    }
    if (p->hot == NULL)
        return respond_error(c, MHD_HTTP_CONFLICT,
                             "pool \"%s\" is a tcp pool: its load per member "
                             "is not measured by request",
                             p->name);
    n = hot_rebalance(p, target, ops, ADMIN_BATCH_MAX, &proposal);
    if (n < 0)
        return respond_error(c, MHD_HTTP_CONFLICT,
                             "pool \"%s\": no request measured yet (member "
                             "rates are sampled every second): try again "
                             "under load",
                             p->name);
    if (n == 0)
        return respond_json(c, MHD_HTTP_OK, proposal);
    rq->conn = c;
    rq->ok_status = MHD_HTTP_OK;
    rq->wrap = proposal;
    membership_batch(p, ops, (size_t)n, true, false, change_done, rq);
    if (rq->ready)
        return respond_ready(c, rq);
    rq->suspended = true;
    MHD_suspend_connection(c);
    return MHD_YES;
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

    if (key == NULL)
        return respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "the query parameter \"key\" is required");
    if (rs != NULL) {
        if (admin_count_arg(rs, ADMIN_MAX_REPLICAS, &replicas) != 0)
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
        size_t off,
            plen = chash_key_tag(key, strlen(key), p->cfg.hash_tag, &off);

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
                      server_state_name(atomic_load_explicit(
                          (_Atomic int *)&s->state, memory_order_relaxed))));
    }
    {
        /* The key is hashed as sent; echoed with its non-UTF-8 bytes as
         * '?' (JSON holds text only). */
        char *shown = strdup(key);

        if (shown != NULL)
            text_utf8_scrub(shown);
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
    const struct chash_ring *ring;
    json_t *j, *shares;

    if (ss != NULL) {
        if (admin_count_arg(ss, ADMIN_MAX_SEGMENTS, &segments) != 0)
            return respond_error(c, MHD_HTTP_BAD_REQUEST,
                                 "\"segments\" must be an integer in [1, %d]",
                                 ADMIN_MAX_SEGMENTS);
    }
    j = json_pack("{s:s,s:I}", "pool", p->name, "segments",
                  (json_int_t)segments);
    /* Where new keys go now: a draining, down or ejected member keeps its
     * points on a failover ring, yet owns nothing of the arcs drawn (its
     * keys go to their next members; the arcs say which). */
    shares = json_object();
    ring = pool_snapshot_routing(snap);
    if (ring != NULL) {
        json_object_set_new(j, "arcs", report_arcs(ring, segments));
        for (size_t i = 0; i < chash_ring_members(ring); i++)
            json_object_set_new(shares, chash_ring_member_name(ring, i),
                                json_real(chash_ring_share(ring, i)));
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

static bool
is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

static const char *
header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

bool
admin_json_media_type(const char *ct)
{
    static const char mt[] = "application/json";

    if (ct == NULL)
        return false;
    ct += strspn(ct, " \t");
    if (strncasecmp(ct, mt, sizeof(mt) - 1) != 0)
        return false;
    ct += sizeof(mt) - 1;
    ct += strspn(ct, " \t");
    return *ct == '\0' || *ct == ';';
}

/*
 * CSRF: a web page may send a POST with a text/plain, form-urlencoded or
 * multipart body to any origin without asking the server first (a no-cors
 * fetch, a form), and a JSON text fits in a text/plain body. So a change
 * (POST, PATCH) and any request with a body must say application/json,
 * which a page can send to another origin only after a CORS preflight
 * that chashd never grants. A DELETE without a body needs no type: a
 * browser cannot send a DELETE to another origin without that preflight
 * either, and `curl -X DELETE` and `chash ctl remove` send none. False
 * with the 415 queued in *<ret>.
 */
static bool
json_content(struct MHD_Connection *c, const char *method,
             const struct admin_request *rq, enum MHD_Result *ret)
{
    const char *ct = header(c, MHD_HTTP_HEADER_CONTENT_TYPE);

    if (admin_json_media_type(ct) ||
        (!is(method, "POST") && !is(method, "PATCH") && rq->len == 0 &&
         !rq->too_large))
        return true;
    *ret = respond_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                         "Content-Type must be application/json (%s%s%s); "
                         "nothing was changed",
                         ct != NULL ? "got \"" : "none was sent",
                         ct != NULL ? ct : "", ct != NULL ? "\"" : "");
    return false;
}

int
admin_split_path(const char *url, char *buf, size_t buflen, char **seg, int max)
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

const char *
admin_member_path(const char *url, char *pool, size_t poollen)
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

bool
admin_state_path(const char *url, char *pool, size_t poollen, const char **name)
{
    static const char pre[] = "/api/state/pools/", mid[] = "/members/";
    const char *ps = url + sizeof(pre) - 1, *pe;

    *name = NULL;
    if (strncmp(url, pre, sizeof(pre) - 1) != 0 || *ps == '\0')
        return false;
    pe = strchr(ps, '/');
    if (pe == NULL)
        pe = ps + strlen(ps);
    else if (strncmp(pe, mid, sizeof(mid) - 1) != 0 ||
             pe[sizeof(mid) - 1] == '\0')
        return false;
    /* "/api/state/pools//members/x" names no pool (it was looked up as
     * pool "" and, for a GET, answered 405 instead of 404) */
    if (pe == ps || (size_t)(pe - ps) >= poollen)
        return false;
    snprintf(pool, poollen, "%.*s", (int)(pe - ps), ps);
    if (*pe != '\0')
        *name = pe + sizeof(mid) - 1;
    return true;
}

/*
 * DELETE /api/state/pools/<pool>[/members/<name>]: drop the runtime
 * overrides the state file keeps, back to the config. NULL when <url> is
 * not such a path; else the answer.
 */
static bool
state_reset_route(struct MHD_Connection *c, const char *url, const char *method,
                  struct admin_request *rq, enum MHD_Result *ret)
{
    struct membership_request mr = {.op = MEMBERSHIP_RESET};
    char pool[256], err[512];
    struct pool *p;
    json_t *j;
    int dry;

    if (!admin_state_path(url, pool, sizeof(pool), &mr.name))
        return false;
    if (!is(method, "DELETE")) {
        *ret = respond_405(c, method, url, "DELETE");
        return true;
    }
    if (!json_content(c, method, rq, ret))
        return true;
    if ((dry = query_flag(c, "dry_run")) < 0) {
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "\"dry_run\" must be 1, true, yes, on or 0, "
                             "false, no, off (nothing was changed)");
        return true;
    }
    p = pool_find(pool);
    if (p == NULL) {
        *ret =
            respond_error(c, MHD_HTTP_NOT_FOUND, "no pool named \"%s\"", pool);
        return true;
    }
    j = admin_delete_body(rq->body, rq->len, &mr.force, err, sizeof(err));
    if (j == NULL) {
        *ret = respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
        return true;
    }
    *ret = respond_change(c, p, &mr, dry == 1, MHD_HTTP_OK, rq);
    json_decref(j);
    return true;
}

static enum MHD_Result
route(struct MHD_Connection *c, const char *url, const char *method,
      struct admin_request *rq)
{
    char buf[2048];
    char *seg[6];
    int n = admin_split_path(url, buf, sizeof(buf), seg, 6);
    bool get = is(method, "GET") || is(method, "HEAD");
    struct pool *p;
    struct server *s;
    char pname[256];
    const char *mname = admin_member_path(url, pname, sizeof(pname));
    enum MHD_Result ret;

    if (state_reset_route(c, url, method, rq, &ret))
        return ret;
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
        return respond_json(c, MHD_HTTP_OK, membership_state_json());
    }
    if (n == 2 && is(seg[1], "changes"))
        return get ? respond_json(c, MHD_HTTP_OK, membership_changes_json())
                   : respond_405(c, method, url, "GET");
    if (n == 2 && is(seg[1], "cluster"))
        return get ? respond_json(c, MHD_HTTP_OK, etcd_cluster_json())
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
    if (n == 4 && is(seg[3], "changes")) {
        if (!is(method, "POST"))
            return respond_405(c, method, url, "POST");
        if (query_flag(c, "dry_run") < 0)
            return respond_error(c, MHD_HTTP_BAD_REQUEST,
                                 "\"dry_run\" must be 1, true, yes, on or 0, "
                                 "false, no, off");
        return json_content(c, method, rq, &ret) ? pool_changes(c, p, rq) : ret;
    }
    if (n == 4 && is(seg[3], "lookup"))
        return get ? pool_lookup(c, p) : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "ring"))
        return get ? pool_ring(c, p) : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "migration"))
        return get ? respond_json(c, MHD_HTTP_OK, migration_json(p))
                   : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "rebalance"))
        return get ? pool_rebalance(c, p, rq)
                   : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "hot"))
        return get ? respond_json(c, MHD_HTTP_OK, hot_json(p))
                   : respond_405(c, method, url, "GET");
    if (n == 4 && is(seg[3], "replication")) {
        json_t *rep = replica_json(p);

        if (!get)
            return respond_405(c, method, url, "GET");
        if (rep == NULL)
            return respond_error(c, MHD_HTTP_NOT_FOUND,
                                 "pool \"%s\" keeps one copy of each key "
                                 "(replicas: 1)",
                                 p->name);
        return respond_json(c, MHD_HTTP_OK, rep);
    }
    if (n == 6 && is(seg[3], "migration") && is(seg[4], "sources")) {
        char why[400];

        if (!is(method, "DELETE"))
            return respond_405(c, method, url, "DELETE");
        if (!json_content(c, method, rq, &ret))
            return ret;
        if (migration_skip(p, seg[5], why, sizeof(why)) != 0)
            return respond_error(c, MHD_HTTP_CONFLICT, "%s", why);
        return respond_json(c, MHD_HTTP_OK, migration_json(p));
    }
    if (!is(seg[3], "members"))
        return respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s", url);
    if (!get && query_flag(c, "dry_run") < 0)
        return respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "\"dry_run\" must be 1, true, yes, on or 0, "
                             "false, no, off (nothing was changed)");
    if (n == 4) {
        if (is(method, "POST"))
            return json_content(c, method, rq, &ret) ? member_add(c, p, rq)
                                                     : ret;
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
    if ((is(method, "PATCH") || is(method, "DELETE")) &&
        !json_content(c, method, rq, &ret))
        return ret;
    if (is(method, "PATCH"))
        return member_patch(c, p, s->name, rq);
    if (is(method, "DELETE")) {
        struct membership_request mr = {.op = MEMBERSHIP_REMOVE,
                                        .name = s->name};
        int now = query_flag(c, "now");
        char err[512];
        json_t *j;

        if (now < 0)
            return respond_error(c, MHD_HTTP_BAD_REQUEST,
                                 "\"now\" must be 1, true, yes, on or 0, "
                                 "false, no, off (nothing was changed)");
        mr.now = now == 1;
        j = admin_delete_body(rq->body, rq->len, &mr.force, err, sizeof(err));
        if (j == NULL)
            return respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
        ret = respond_change(c, p, &mr, query_flag(c, "dry_run") == 1,
                             MHD_HTTP_OK, rq);
        json_decref(j);
        return ret;
    }
    return respond_405(c, method, url, "GET, PATCH, DELETE");
}

bool
admin_token_ok(const char *want, const char *given)
{
    size_t gl, tl = strlen(want);
    unsigned char diff = 0;

    /* The scheme is case-insensitive and may be followed by several
     * spaces (RFC 7235 2.1): "bearer <token>" from a client is valid. */
    if (given == NULL || strncasecmp(given, "Bearer ", 7) != 0)
        return false;
    given += 7;
    given += strspn(given, " ");
    gl = strlen(given);
    for (size_t i = 0; i < tl; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)given[i < gl ? i : 0];
    return diff == 0 && gl == tl;
}

size_t
admin_authority_host(const char *s)
{
    size_t n;

    if (s[0] == '[') {
        const char *e = strchr(s, ']');

        if (e == NULL)
            return 0;
        n = (size_t)(e - s) + 1;
    } else {
        n = strcspn(s, ":");
    }
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || strchr("/?#@\\", s[i]) != NULL)
            return 0;
    if (n == 0 || s[n] == '\0')
        return n;
    if (s[n] != ':' || s[n + 1] == '\0' ||
        strspn(s + n + 1, "0123456789") != strlen(s + n + 1))
        return 0;
    return n;
}

/*
 * DNS rebinding: a name the attacker owns resolves to 127.0.0.1 once its
 * page is loaded, and the page reads and changes the API as its own
 * origin, which no Origin check can tell. The name it uses is in Host.
 * Without a token (only on loopback, see above) the Host must name this
 * API: the admin address as written, localhost, 127.0.0.1 or [::1], on
 * any port (the port is not the attacker's to choose the name by, and an
 * ssh tunnel from another port is how loopback APIs are reached). With a
 * token the token authenticates: a browser never adds a Bearer header by
 * itself, and a non-loopback API is reached through names chashd cannot
 * know. A unix socket is out of a browser's reach. A missing or empty
 * Host (HTTP/1.0, health checkers) is no browser's either.
 */
static bool
host_ok(const char *h)
{
    static const char *const names[] = {"localhost", "127.0.0.1", "[::1]"};
    size_t n;

    if (token != NULL || family == AF_UNIX || h == NULL || h[0] == '\0')
        return true;
    n = admin_authority_host(h);
    if (n == 0)
        return false;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == n && strncasecmp(h, names[i], n) == 0)
            return true;
    return host != NULL && strlen(host) == n && strncasecmp(h, host, n) == 0;
}

/*
 * The checks a request passes once its headers are in, before its body is
 * read or its route looked at; the first that fails answers it (and
 * marks <rq> answered, its body is then discarded):
 *   421 a Host that does not name this API (host_ok);
 *   403 an Origin that is not the API's own: "http://" and the Host. A
 *       browser sends Origin with every POST, PATCH and DELETE, and with
 *       a cross-origin fetch; the dashboard's own GETs carry none or its
 *       own. "null" (sandboxed frames, file:) is foreign too;
 *   401 no token, or a wrong one, when one is set (GET / aside: the page
 *       holds no data and a browser cannot send a header on navigation);
 *   400 a URL that decodes to a control byte (text_url_control);
 *   413 an announced body over ADMIN_MAX_BODY.
 * The Content-Type of a change is checked with its route (json_content),
 * so that a method a path does not take is still a 405.
 */
static enum MHD_Result
admit(struct MHD_Connection *c, const char *url, struct admin_request *rq)
{
    const char *h = header(c, MHD_HTTP_HEADER_HOST);
    const char *origin = header(c, MHD_HTTP_HEADER_ORIGIN);
    const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long announced = cl != NULL ? strtoull(cl, NULL, 10) : 0;

    rq->admitted = true;
    rq->answered = true; /* unless every check passes */
    if (!host_ok(h))
        return respond_error(c, MHD_HTTP_MISDIRECTED_REQUEST,
                             "Host \"%s\" does not name this admin API (%s, "
                             "localhost, 127.0.0.1 or [::1]); refused "
                             "against DNS rebinding",
                             h, address);
    if (origin != NULL &&
        (h == NULL || strncasecmp(origin, "http://", 7) != 0 ||
         strcasecmp(origin + 7, h) != 0))
        return respond_error(c, MHD_HTTP_FORBIDDEN,
                             "cross-origin request refused: Origin \"%s\" is "
                             "not this API's own (http://%s)",
                             origin, h != NULL ? h : address);
    if (token != NULL && !is(url, "/") &&
        !admin_token_ok(token, header(c, MHD_HTTP_HEADER_AUTHORIZATION)))
        return respond_error(c, MHD_HTTP_UNAUTHORIZED,
                             "missing or wrong token: send \"Authorization: "
                             "Bearer <admin_token>\"");
    if (rq->control >= 0)
        return respond_error(c, MHD_HTTP_BAD_REQUEST,
                             "the URL decodes to a control byte (%%%02X) in "
                             "its %s: names, keys and values cannot hold "
                             "bytes 0x00-0x1F or 0x7F (nothing was changed)",
                             (unsigned)rq->control,
                             rq->control_in_query ? "query" : "path");
    if (announced > ADMIN_MAX_BODY)
        return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                             "request body over %d bytes", ADMIN_MAX_BODY);
    rq->answered = false;
    return MHD_YES;
}

/* ---- per-request deadline ------------------------------------------------ */

/* Each open admin connection: when its current request began, and whether
 * the request is whole (being answered, maybe suspended on a change). */
struct aconn {
    struct aconn *next, *prev;
    int fd;
    uint64_t since_ms; /* accepted, or its last answer completed */
    bool whole;
    bool cut;
};
static struct aconn *aconns;
/* Until when requests get ADMIN_PRESSURE_DEADLINE_MS (0: they do not). */
static uint64_t pressure_until_ms;

static void
on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
              enum MHD_ConnectionNotificationCode code)
{
    struct aconn *ac = *socket_context;

    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

        ac = calloc(1, sizeof(*ac));
        if (ac == NULL || info == NULL) {
            free(ac);
            return; /* not tracked: MHD's idle timeout still applies */
        }
        ac->fd = info->connect_fd;
        ac->since_ms = clock_ms();
        ac->next = aconns;
        if (aconns != NULL)
            aconns->prev = ac;
        aconns = ac;
        *socket_context = ac;
        return;
    }
    if (ac == NULL)
        return;
    if (ac->prev != NULL)
        ac->prev->next = ac->next;
    else
        aconns = ac->next;
    if (ac->next != NULL)
        ac->next->prev = ac->prev;
    free(ac);
    *socket_context = NULL;
}

static struct aconn *
aconn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return info != NULL ? info->socket_context : NULL;
}

/* Cut the connections whose request has taken longer than the deadline
 * to arrive: shut down, libmicrohttpd closes them on its next run. */
static void
deadlines(uint64_t now_ms, uint64_t deadline_ms)
{
    for (struct aconn *ac = aconns; ac != NULL; ac = ac->next) {
        if (ac->whole || ac->cut || now_ms - ac->since_ms < deadline_ms)
            continue;
        ac->cut = true;
        log_debug("admin: a request took over %llu ms to arrive: connection "
                  "closed",
                  (unsigned long long)deadline_ms);
        shutdown(ac->fd, SHUT_RDWR);
    }
}

/* A request line came in: its state, with what the raw URL holds that
 * the decoded one can no longer show (libmicrohttpd hands the handler a
 * C string). NULL when out of memory: on_request then drops the
 * connection. */
static void *
on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct admin_request *rq = calloc(1, sizeof(*rq));

    (void)cls;
    (void)c;
    if (rq != NULL)
        rq->control = text_url_control(uri, &rq->control_in_query);
    return rq;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url,
           const char *method, const char *version, const char *upload,
           size_t *upload_size, void **con_cls)
{
    struct admin_request *rq = *con_cls;
    struct aconn *ac;

    (void)cls;
    (void)version;
    if (rq == NULL)
        return MHD_NO;
    if (!rq->admitted)
        return admit(c, url, rq);
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
        if (rq->too_large && !rq->answered) {
            /* A body over the limit is read and dropped, so that the
             * client, still sending, gets its 413 (a close with unread
             * bytes would reset the connection under the answer); past
             * ADMIN_DISCARD_MAX the 413 goes at once and the connection
             * closes: no client sends that much to this API. */
            rq->discarded += *upload_size;
            if (rq->discarded > ADMIN_DISCARD_MAX) {
                rq->answered = true;
                *upload_size = 0;
                return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                     "request body over %d bytes",
                                     ADMIN_MAX_BODY);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->ready) /* resumed: the membership change is done */
        return respond_ready(c, rq);
    if ((ac = aconn_of(c)) != NULL)
        ac->whole = true; /* all of it came in time */
    if (rq->answered)
        return MHD_YES;
    rq->answered = true;
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

    struct aconn *ac = aconn_of(c);

    (void)cls;
    (void)toe;
    if (ac != NULL) {
        /* the next request on the connection has its own deadline */
        ac->since_ms = clock_ms();
        ac->whole = false;
    }
    if (rq != NULL) {
        free(rq->body);
        free(rq->text);
        json_decref(rq->wrap);
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

/*
 * Stop accepting for ADMIN_ACCEPT_PAUSE_MS; on_tick watches the listener
 * again then. Clients wait in the backlog meanwhile. <why>: the accept
 * error that found no descriptor (logged once per episode), or NULL for
 * the connection limit.
 */
static void
listener_pause(const char *why)
{
    uint64_t now = clock_ms();

    if (listening)
        control_watch_del(&listener);
    listening = false;
    resume_ms = now + ADMIN_ACCEPT_PAUSE_MS;
    if (why != NULL && starved_ms == 0) {
        starved_ms = now;
        log_warn("admin: accept: %s; pausing new admin connections for "
                 "%d ms at a time until descriptors free up",
                 why, ADMIN_ACCEPT_PAUSE_MS);
    }
}

static unsigned
connections(void)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

    return info != NULL ? info->num_connections : 0;
}

/*
 * The listener is readable: accept, and hand each connection to
 * libmicrohttpd. chashd accepts rather than libmicrohttpd because of what
 * happens when descriptors run out: accept() fails with EMFILE, the
 * connection stays in the backlog and the listener stays readable, and
 * libmicrohttpd (0.9.75, with no connection open) tries again at once,
 * forever: the control thread spun at 100% and health checks, ramps and
 * reloads starved. Here the listener leaves the loop for 100 ms instead,
 * as the workers' listeners do. At the connection limit it pauses the
 * same way (libmicrohttpd would close the connection).
 */
static void
on_accept(struct control_watch *w, uint32_t events)
{
    (void)w;
    (void)events;
    for (int i = 0; i < ADMIN_ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd;

        if (connections() >= ADMIN_MAX_CONNECTIONS) {
            /* full: the requests still arriving after a second give
             * their place (slow clients must not lock the others out) */
            uint64_t now = clock_ms();

            if (pressure_until_ms == 0)
                log_info("admin: at its %d connections: a request must "
                         "arrive within %d ms, until %d ms after the last "
                         "time it is full",
                         ADMIN_MAX_CONNECTIONS, ADMIN_PRESSURE_DEADLINE_MS,
                         ADMIN_REQUEST_DEADLINE_MS);
            pressure_until_ms = now + ADMIN_REQUEST_DEADLINE_MS;
            deadlines(now, ADMIN_PRESSURE_DEADLINE_MS);
            listener_pause(NULL);
            break;
        }
        fd = accept4(listen_fd, (struct sockaddr *)&peer, &peerlen,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue; /* that connection is gone; the next one */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM)
                listener_pause(strerror(errno));
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_error("admin: accept: %s", strerror(errno));
            break;
        }
        if (starved_ms != 0) {
            log_info("admin: accepting again after %llu ms without "
                     "descriptors",
                     (unsigned long long)(clock_ms() - starved_ms));
            starved_ms = 0;
        }
        /* It takes the descriptor, and closes it on failure. */
        if (MHD_add_connection(mhd, fd, (struct sockaddr *)&peer, peerlen) !=
            MHD_YES)
            log_debug("admin: connection dropped: %s", strerror(errno));
    }
    admin_run();
}

/* Whether libmicrohttpd has work now: a connection with bytes it has not
 * read yet. Its epoll is edge-triggered, so such bytes raise no new event:
 * run only on events and a slow tick, it read a 1 MB body in 5 s. */
static bool
mhd_due(void)
{
    MHD_UNSIGNED_LONG_LONG t;

    return mhd != NULL && MHD_get_timeout(mhd, &t) == MHD_YES && t == 0;
}

/* Connection timeouts need MHD_run() even when nothing is readable; every
 * 100 ms is plenty for a 10 s timeout. A paused listener is watched again
 * once its pause is over. */
static void
on_tick(uint64_t now_ms, void *arg)
{
    static uint64_t last;

    (void)arg;
    if (mhd == NULL)
        return;
    if (!listening && resume_ms != 0 && now_ms >= resume_ms) {
        resume_ms = 0;
        if (control_watch_add(&listener, EPOLLIN) == 0)
            listening = true;
        else
            resume_ms = now_ms + ADMIN_ACCEPT_PAUSE_MS;
    }
    if (now_ms - last >= 100 || mhd_due()) {
        last = now_ms;
        if (pressure_until_ms != 0 && now_ms >= pressure_until_ms) {
            pressure_until_ms = 0;
            log_info("admin: not full for %d ms: a request has %d ms again",
                     ADMIN_REQUEST_DEADLINE_MS, ADMIN_REQUEST_DEADLINE_MS);
        }
        deadlines(now_ms, pressure_until_ms != 0 ? ADMIN_PRESSURE_DEADLINE_MS
                                                 : ADMIN_REQUEST_DEADLINE_MS);
        admin_run();
    }
}

/* A copy of <conf>'s token, NULL when it has none; -1 when out of memory. */
static int
token_copy(const struct conf *conf, char **out)
{
    *out = NULL;
    if (conf->admin_token == NULL || conf->admin_token[0] == '\0')
        return 0;
    *out = strdup(conf->admin_token);
    return *out != NULL ? 0 : -1;
}

int
admin_start(const struct conf *conf, char *err, size_t errlen)
{
    const struct conf_addr *a = &conf->admin;
    size_t hl;
    int one = 1;

    if (mhd != NULL)
        return 0;
    if (a->family == AF_UNSPEC)
        return 0;
    /* Before anything listens: without its token, a non-loopback API
     * would be open to anyone. */
    if (token_copy(conf, &token) < 0 || (address = strdup(a->text)) == NULL) {
        snprintf(err, errlen, "admin %s: out of memory", a->text);
        goto fail;
    }
    hl = a->family != AF_UNIX ? admin_authority_host(a->text) : 0;
    if (hl > 0 && (host = strndup(a->text, hl)) == NULL) {
        snprintf(err, errlen, "admin %s: out of memory", a->text);
        goto fail;
    }
    loopback = conf_addr_is_loopback(a);
    family = a->family;
    listen_fd =
        socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) {
        snprintf(err, errlen, "admin %s: socket: %s", a->text, strerror(errno));
        goto fail;
    }
    if (a->family != AF_UNIX)
        setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    else
        unlink(((const struct sockaddr_un *)&a->sa)->sun_path);
    if (bind(listen_fd, (const struct sockaddr *)&a->sa, a->salen) != 0 ||
        listen(listen_fd, 64) != 0) {
        snprintf(err, errlen, "admin %s: %s", a->text, strerror(errno));
        goto fail;
    }
    /* No listening socket of its own: on_accept hands it connections.
     * The logger goes first, or libmicrohttpd prints the options' own
     * messages to stderr. */
    mhd = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG |
            MHD_ALLOW_SUSPEND_RESUME,
        0, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        NULL, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)ADMIN_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (mhd == NULL) {
        snprintf(err, errlen, "admin %s: cannot start the HTTP server",
                 a->text);
        goto fail;
    }
    watch.fd = admin_fd();
    watch.cb = on_ready;
    listener.fd = listen_fd;
    listener.cb = on_accept;
    if (watch.fd < 0 || control_watch_add(&watch, EPOLLIN) != 0) {
        snprintf(err, errlen, "admin %s: cannot watch the HTTP server: %s",
                 a->text, strerror(errno));
        goto fail;
    }
    watching = true;
    if (control_watch_add(&listener, EPOLLIN) != 0 ||
        (!tick_added && control_tick_add(on_tick, NULL) != 0)) {
        snprintf(err, errlen, "admin %s: cannot watch the HTTP server: %s",
                 a->text, strerror(errno));
        goto fail;
    }
    listening = true;
    tick_added = true;
    metrics_init();
    log_info("admin API, metrics and dashboard on http://%s/%s", a->text,
             token ? " (token required)" : "");
    return 0;
fail:
    admin_stop();
    return -1;
}

void
admin_stop(void)
{
    if (watching)
        control_watch_del(&watch);
    watching = false;
    if (listening)
        control_watch_del(&listener);
    listening = false;
    resume_ms = starved_ms = 0;
    if (mhd != NULL)
        MHD_stop_daemon(mhd); /* closes every admin connection */
    mhd = NULL;
    if (listen_fd >= 0)
        close(listen_fd);
    listen_fd = -1;
    free(token);
    token = NULL;
    free(address);
    address = NULL;
    free(host);
    host = NULL;
}

int
admin_fd(void)
{
    const union MHD_DaemonInfo *info;

    if (mhd == NULL)
        return -1;
    info = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

void
admin_run(void)
{
    /* bounded: other control work (health checks, etcd, ramps) runs
     * between rounds; the tick comes back for the rest */
    for (int i = 0; mhd != NULL && i < ADMIN_RUN_ROUNDS; i++) {
        MHD_run(mhd);
        if (!mhd_due())
            break;
    }
}

int
admin_reload_check(const struct conf *next, char *err, size_t errlen)
{
    if (mhd == NULL || loopback ||
        (next->admin_token != NULL && next->admin_token[0] != '\0'))
        return 0;
    snprintf(err, errlen,
             "the admin API stays on %s until a restart, which is not "
             "loopback, and the new config has no 'admin_token'%s: keep the "
             "token until chashd restarts",
             address,
             next->admin.family == AF_UNSPEC ? " ('admin: off' is applied "
                                               "only at a restart)"
                                             : "");
    return -1;
}

void
admin_reconfigure(const struct conf *conf)
{
    char *next;

    if (mhd == NULL)
        return;
    if (conf->admin.text == NULL || address == NULL ||
        strcmp(conf->admin.text, address) != 0)
        log_warn("admin: the admin address changed to %s; it takes effect "
                 "at the next restart",
                 conf->admin.text ? conf->admin.text : "off");
    if (token_copy(conf, &next) < 0) {
        log_error("admin: out of memory: the admin token stays as it was");
        return;
    }
    /* admin_reload_check refused such a config; never open a bound
     * non-loopback listener, whoever calls. */
    if (next == NULL && !loopback) {
        log_error("admin: the API on %s is not loopback: its token stays "
                  "until a restart",
                  address);
        return;
    }
    if (token != NULL && next == NULL)
        log_warn("admin: the token is removed: the API on %s answers "
                 "without one",
                 address);
    else if (token == NULL && next != NULL)
        log_info("admin: the API on %s requires a token from now on", address);
    else if (token != NULL && strcmp(token, next) != 0)
        log_info("admin: the token changed");
    free(token);
    token = next;
}

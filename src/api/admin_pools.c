/* admin_pools.c -- the admin API's pools and members: their JSON views,
 * lookups and ring arcs, and the membership changes (add, patch, remove,
 * a batch, a rebalance, a state reset), each answered with its migration
 * report once the builder thread has computed it.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/admin.h"
#include "api/admin_int.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

#include "chash/chash.h"
#include "base/text.h"
#include "conf/conf.h"
#include "control/hot.h"
#include "control/membership.h"
#include "control/migration.h"
#include "control/replica.h"
#include "model/pool.h"
#include "model/report.h"
#include "model/state.h"

#define ADMIN_MAX_REPLICAS 64
#define ADMIN_MAX_SEGMENTS 65536
#define ADMIN_DEFAULT_SEGMENTS 1024

/* ---- JSON views ---------------------------------------------------------- */

bool
admin_server_member(const struct server *s)
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
admin_pool_json(struct pool *p, bool full)
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
        if (admin_server_member(p->servers[i]))
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
        rq->text =
            admin_json_text(json_pack("{s:s,s:O*}", "error", res->message,
                                      "report", res->report),
                            &rq->textlen);
    } else if (rq->wrap != NULL) {
        json_object_set(rq->wrap, "report", res->report);
        rq->status = MHD_HTTP_OK;
        rq->text = admin_json_text(rq->wrap, &rq->textlen);
        rq->wrap = NULL;
    } else {
        rq->status = json_is_true(json_object_get(res->report, "applied"))
                         ? rq->ok_status
                         : MHD_HTTP_OK;
        rq->text = admin_json_text(json_incref(res->report), &rq->textlen);
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
enum MHD_Result
admin_respond_ready(struct MHD_Connection *c, struct admin_request *rq)
{
    char *text = rq->text;

    rq->text = NULL;
    rq->ready = false;
    if (text == NULL)
        return MHD_NO; /* out of memory: the connection is closed */
    return admin_respond_buf(c, rq->status, "application/json", text,
                             rq->textlen);
}

/* A change was started for <rq>: answer now if it is already done (a
 * refusal, a dry run), else suspend the connection until change_done(). */
static enum MHD_Result
respond_when_ready(struct MHD_Connection *c, struct admin_request *rq)
{
    if (rq->ready)
        return admin_respond_ready(c, rq);
    rq->suspended = true;
    MHD_suspend_connection(c);
    return MHD_YES;
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
    return respond_when_ready(c, rq);
}

enum MHD_Result
admin_member_add(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct admin_request *rq = call->rq;
    struct membership_request mr;
    enum MHD_Result ret;
    char err[512];
    json_t *j;

    j = admin_member_add_body(rq->body, rq->len, &mr, err, sizeof(err));
    if (j == NULL)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    ret =
        respond_change(c, call->pool, &mr, admin_query_flag(c, "dry_run") == 1,
                       MHD_HTTP_CREATED, rq);
    json_decref(j);
    return ret;
}

enum MHD_Result
admin_member_patch(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct admin_request *rq = call->rq;
    struct membership_request mr;
    enum MHD_Result ret;
    char err[512];
    json_t *j;

    j = admin_member_patch_body(rq->body, rq->len, &mr, err, sizeof(err));
    if (j == NULL)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    mr.name = call->member->name;
    ret = respond_change(c, call->pool, &mr,
                         admin_query_flag(c, "dry_run") == 1, MHD_HTTP_OK, rq);
    json_decref(j);
    return ret;
}

/* POST /api/pools/{pool}/changes: {"changes": [{"op": "add", "name",
 * "address", "weight"}, {"op": "remove", "name"}, {"op": "update",
 * "name", "weight", "state"}, ...]}: one etcd transaction. */
enum MHD_Result
admin_pool_changes(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct admin_request *rq = call->rq;
    struct membership_batch_op ops[ADMIN_BATCH_MAX];
    enum MHD_Result ret;
    char err[512];
    json_t *j;
    size_t n;

    j = admin_changes_body(rq->body, rq->len, ops, &n, err, sizeof(err));
    if (j == NULL)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    rq->conn = c;
    rq->ok_status = MHD_HTTP_OK;
    membership_batch(call->pool, ops, n, admin_query_flag(c, "dry_run") == 1,
                     json_is_true(json_object_get(j, "force")), change_done,
                     rq);
    ret = respond_when_ready(c, rq);
    json_decref(j);
    return ret;
}

/* GET /api/pools/{pool}/rebalance?target=R: weights that bring every
 * member's measured load within R of its share, with the exact migration
 * report of applying them all (a dry-run batch); nothing is changed. */
enum MHD_Result
admin_pool_rebalance(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct admin_request *rq = call->rq;
    struct pool *p = call->pool;
    const char *t =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "target");
    struct membership_batch_op ops[ADMIN_BATCH_MAX];
    double target = 1.2;
    json_t *proposal = NULL;
    int n;

    if (t != NULL) {
        if (admin_target_arg(t, &target) != 0)
            return admin_respond_error(
                c, MHD_HTTP_BAD_REQUEST,
                "\"target\" must be a number from 1 to 100 "
                "(the load ratio to stay under; 1.2: 20%% "
                "over the member's share)");
    }
    if (p->hot == NULL)
        return admin_respond_error(
            c, MHD_HTTP_CONFLICT,
            "pool \"%s\" is a tcp pool: its load per member "
            "is not measured by request",
            p->name);
    n = hot_rebalance(p, target, ops, ADMIN_BATCH_MAX, &proposal);
    if (n < 0)
        return admin_respond_error(
            c, MHD_HTTP_CONFLICT,
            "pool \"%s\": no request measured yet (member "
            "rates are sampled every second): try again "
            "under load",
            p->name);
    if (n == 0)
        return admin_respond_json(c, MHD_HTTP_OK, proposal);
    rq->conn = c;
    rq->ok_status = MHD_HTTP_OK;
    rq->wrap = proposal;
    membership_batch(p, ops, (size_t)n, true, false, change_done, rq);
    return respond_when_ready(c, rq);
}

enum MHD_Result
admin_pool_lookup(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct pool *p = call->pool;
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
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST,
                                   "the query parameter \"key\" is required");
    if (rs != NULL) {
        if (admin_count_arg(rs, ADMIN_MAX_REPLICAS, &replicas) != 0)
            return admin_respond_error(
                c, MHD_HTTP_BAD_REQUEST,
                "\"replicas\" must be an integer in [1, %d]",
                ADMIN_MAX_REPLICAS);
    }
    if (snap == NULL || snap->ring == NULL)
        return admin_respond_error(
            c, MHD_HTTP_CONFLICT, "pool %s has no member in the ring", p->name);
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
    return admin_respond_json(c, MHD_HTTP_OK, j);
}

enum MHD_Result
admin_pool_ring(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct pool *p = call->pool;
    const char *ss =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "segments");
    const struct pool_snapshot *snap = pool_snapshot(p);
    unsigned long segments = ADMIN_DEFAULT_SEGMENTS;
    const struct chash_ring *ring;
    json_t *j, *shares;

    if (ss != NULL) {
        if (admin_count_arg(ss, ADMIN_MAX_SEGMENTS, &segments) != 0)
            return admin_respond_error(
                c, MHD_HTTP_BAD_REQUEST,
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
    return admin_respond_json(c, MHD_HTTP_OK, j);
}

enum MHD_Result
admin_pools_list(struct admin_call *call)
{
    json_t *arr = json_array();

    for (size_t i = 0; i < pool_count(); i++)
        json_array_append_new(arr, admin_pool_json(pool_at(i), true));
    return admin_respond_json(call->conn, MHD_HTTP_OK,
                              json_pack("{s:o}", "pools", arr));
}

enum MHD_Result
admin_pool_get(struct admin_call *call)
{
    return admin_respond_json(call->conn, MHD_HTTP_OK,
                              admin_pool_json(call->pool, true));
}

enum MHD_Result
admin_members_list(struct admin_call *call)
{
    json_t *pj = admin_pool_json(call->pool, true);
    json_t *m = json_incref(json_object_get(pj, "members"));

    json_decref(pj);
    return admin_respond_json(
        call->conn, MHD_HTTP_OK,
        json_pack("{s:s,s:o}", "pool", call->pool->name, "members", m));
}

enum MHD_Result
admin_member_get(struct admin_call *call)
{
    return admin_respond_json(
        call->conn, MHD_HTTP_OK,
        member_json(pool_snapshot(call->pool), call->member));
}

enum MHD_Result
admin_member_delete(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct admin_request *rq = call->rq;
    struct membership_request mr = {.op = MEMBERSHIP_REMOVE,
                                    .name = call->member->name};
    int now = admin_query_flag(c, "now");
    enum MHD_Result ret;
    char err[512];
    json_t *j;

    if (now < 0)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST,
                                   "\"now\" must be 1, true, yes, on or 0, "
                                   "false, no, off (nothing was changed)");
    mr.now = now == 1;
    j = admin_delete_body(rq->body, rq->len, &mr.force, err, sizeof(err));
    if (j == NULL)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    ret = respond_change(c, call->pool, &mr,
                         admin_query_flag(c, "dry_run") == 1, MHD_HTTP_OK, rq);
    json_decref(j);
    return ret;
}

/*
 * DELETE /api/state/pools/<pool>[/members/<name>]: drop the runtime
 * overrides the state file keeps, back to the config. Its pool is looked
 * up here, after the method and the Content-Type, as it always was.
 */
enum MHD_Result
admin_state_reset(struct admin_call *call)
{
    struct MHD_Connection *c = call->conn;
    struct admin_request *rq = call->rq;
    struct membership_request mr = {.op = MEMBERSHIP_RESET};
    const char *pool = call->seg[3];
    char err[512];
    struct pool *p;
    enum MHD_Result ret;
    json_t *j;
    int dry;

    mr.name = call->nseg == 6 ? call->seg[5] : NULL;
    if ((dry = admin_query_flag(c, "dry_run")) < 0)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST,
                                   "\"dry_run\" must be 1, true, yes, on or 0, "
                                   "false, no, off (nothing was changed)");
    p = pool_find(pool);
    if (p == NULL)
        return admin_respond_error(c, MHD_HTTP_NOT_FOUND,
                                   "no pool named \"%s\"", pool);
    j = admin_delete_body(rq->body, rq->len, &mr.force, err, sizeof(err));
    if (j == NULL)
        return admin_respond_error(c, MHD_HTTP_BAD_REQUEST, "%s", err);
    ret = respond_change(c, p, &mr, dry == 1, MHD_HTTP_OK, rq);
    json_decref(j);
    return ret;
}

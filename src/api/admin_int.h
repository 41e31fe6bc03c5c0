/* admin_int.h -- what the admin API's files share, and nobody else: the
 * request's state, a routed call, the responses, the route handlers.
 * admin.c serves HTTP (lifecycle, connections, deadlines, the checks of
 * admit), admin_route.c routes a request by a table, admin_pools.c
 * answers the pool and member paths, admin_cluster.c the rest, and
 * admin_parse.c holds the pure parts admin.h declares.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ADMIN_INT_H
#define CHASHD_ADMIN_INT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

struct pool;
struct server;

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
 * A request as the router hands it to a route's handler, with what the
 * route's flags looked up already. Everything borrowed from the request;
 * valid for the handler's call only.
 */
struct admin_call {
    struct MHD_Connection *conn;
    const char *url;    /* as libmicrohttpd decoded it */
    const char *method; /* "GET", "HEAD", "POST", ... */
    struct admin_request *rq;
    char **seg; /* the path's segments (a member's name may hold '/') */
    int nseg;
    struct pool *pool;     /* the pool of a path under /api/pools/<pool> */
    struct server *member; /* ADMIN_ROUTE_MEMBER: seg[4], in the pool */
};

typedef enum MHD_Result admin_handler_fn(struct admin_call *call);

/* ---- admin_route.c: responses and the router ----------------------------- */

/* Queue <buf> (<len> bytes, taken: freed whatever happens) with <status>
 * and Content-Type <ctype>; a 401 says how to authenticate. */
enum MHD_Result admin_respond_buf(struct MHD_Connection *c, unsigned status,
                                  const char *ctype, char *buf, size_t len);

/* <j> (reference stolen) as the text of an answer, with a trailing
 * newline so `curl` output ends cleanly; NULL when out of memory. */
char *admin_json_text(json_t *j, size_t *len);

/* Send <j> (reference stolen). */
enum MHD_Result admin_respond_json(struct MHD_Connection *c, unsigned status,
                                   json_t *j);

/* Send {"error": <fmt ...>} (its non-UTF-8 bytes as '?'). */
enum MHD_Result admin_respond_error(struct MHD_Connection *c, unsigned status,
                                    const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The query flag <key> of <c>: admin_flag of its value. */
int admin_query_flag(struct MHD_Connection *c, const char *key);

/* Answer <method> on <url> by the route table (404, 405 with Allow, the
 * route's checks, then its handler). */
enum MHD_Result admin_route(struct MHD_Connection *c, const char *url,
                            const char *method, struct admin_request *rq);

/* ---- admin_pools.c: pools, members, changes ------------------------------ */

/* Whether <s> is a member (not one removed, still draining out). */
bool admin_server_member(const struct server *s);

/* Queue the answer a membership change kept in <rq>. */
enum MHD_Result admin_respond_ready(struct MHD_Connection *c,
                                    struct admin_request *rq);

admin_handler_fn admin_pools_list;     /* GET /api/pools */
admin_handler_fn admin_pool_get;       /* GET /api/pools/{pool} */
admin_handler_fn admin_pool_changes;   /* POST .../changes */
admin_handler_fn admin_pool_lookup;    /* GET .../lookup?key=K */
admin_handler_fn admin_pool_ring;      /* GET .../ring */
admin_handler_fn admin_pool_rebalance; /* GET .../rebalance */
admin_handler_fn admin_members_list;   /* GET .../members */
admin_handler_fn admin_member_add;     /* POST .../members */
admin_handler_fn admin_member_get;     /* GET .../members/{name} */
admin_handler_fn admin_member_patch;   /* PATCH .../members/{name} */
admin_handler_fn admin_member_delete;  /* DELETE .../members/{name} */
admin_handler_fn admin_state_reset;    /* DELETE /api/state/pools/... */

/* ---- admin_cluster.c: state, log, cluster, migration, pages -------------- */

admin_handler_fn admin_dashboard_get;   /* GET / */
admin_handler_fn admin_metrics_get;     /* GET /metrics */
admin_handler_fn admin_state_get;       /* GET /api/state */
admin_handler_fn admin_changes_get;     /* GET /api/changes */
admin_handler_fn admin_cluster_get;     /* GET /api/cluster */
admin_handler_fn admin_migration_get;   /* GET .../migration */
admin_handler_fn admin_migration_skip;  /* DELETE .../migration/sources/M */
admin_handler_fn admin_hot_get;         /* GET .../hot */
admin_handler_fn admin_replication_get; /* GET .../replication */

#endif /* CHASHD_ADMIN_INT_H */

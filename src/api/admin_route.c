/* admin_route.c -- the admin API's router: a table of routes (method, path
 * pattern, the checks the route needs, handler) walked by admin_route(),
 * and the responses every handler sends (JSON, errors, 405 with Allow).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/admin.h"
#include "api/admin_int.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

#include "base/text.h"
#include "model/pool.h"

#define ADMIN_JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(12))
#define ADMIN_MAX_SEG 6 /* /api/pools/{pool}/migration/sources/{member} */

/* ---- responses ----------------------------------------------------------- */

enum MHD_Result
admin_respond_buf(struct MHD_Connection *c, unsigned status, const char *ctype,
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
char *
admin_json_text(json_t *j, size_t *len)
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
enum MHD_Result
admin_respond_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    size_t len;
    char *text = admin_json_text(j, &len);

    if (text == NULL)
        return MHD_NO;
    return admin_respond_buf(c, status, "application/json", text, len);
}

enum MHD_Result
admin_respond_error(struct MHD_Connection *c, unsigned status, const char *fmt,
                    ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    text_utf8_scrub(msg);
    return admin_respond_json(c, status, json_pack("{s:s}", "error", msg));
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

int
admin_query_flag(struct MHD_Connection *c, const char *key)
{
    return admin_flag(
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key));
}

/* ---- the route table ----------------------------------------------------- */

static bool
is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
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
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);

    if (admin_json_media_type(ct) ||
        (!is(method, "POST") && !is(method, "PATCH") && rq->len == 0 &&
         !rq->too_large))
        return true;
    *ret =
        admin_respond_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                            "Content-Type must be application/json (%s%s%s); "
                            "nothing was changed",
                            ct != NULL ? "got \"" : "none was sent",
                            ct != NULL ? ct : "", ct != NULL ? "\"" : "");
    return false;
}

/* A route's checks, made in this order by admin_route() (each answers the
 * request when it fails). Before the method is matched, so that they
 * answer whatever the method, as they did: */
#define ROUTE_STATE 0x01     /* matches only a path admin_state_path reads */
#define ROUTE_DRY_FIRST 0x02 /* not GET/HEAD: ?dry_run is a flag (400) */
#define ROUTE_MEMBER 0x04    /* seg[4] names a member of the pool (404) */
/* ... and once the method is the route's: */
#define ROUTE_DRY 0x08  /* ?dry_run is a flag (400) */
#define ROUTE_JSON 0x10 /* a change's body is JSON (415, json_content) */

/*
 * A route: <method> on the paths <path> matches, segment by segment ('*'
 * is any one segment; a member's name, even with '/' in it, is one). The
 * routes of one path sit together, the order of their methods is the
 * order of the Allow header a 405 sends, and the first of them carries
 * the checks made before the method.
 */
struct admin_route {
    const char *method; /* "GET" answers HEAD too */
    const char *path;
    unsigned flags; /* ROUTE_* */
    admin_handler_fn *handler;
};

static const struct admin_route routes[] = {
    {"GET", "", 0, admin_dashboard_get},
    {"GET", "metrics", 0, admin_metrics_get},
    {"GET", "api/state", 0, admin_state_get},
    {"GET", "api/changes", 0, admin_changes_get},
    {"GET", "api/cluster", 0, admin_cluster_get},
    {"GET", "api/pools", 0, admin_pools_list},
    {"GET", "api/pools/*", 0, admin_pool_get},
    {"POST", "api/pools/*/changes", ROUTE_DRY | ROUTE_JSON, admin_pool_changes},
    {"GET", "api/pools/*/lookup", 0, admin_pool_lookup},
    {"GET", "api/pools/*/ring", 0, admin_pool_ring},
    {"GET", "api/pools/*/migration", 0, admin_migration_get},
    {"GET", "api/pools/*/rebalance", 0, admin_pool_rebalance},
    {"GET", "api/pools/*/hot", 0, admin_hot_get},
    {"GET", "api/pools/*/replication", 0, admin_replication_get},
    {"DELETE", "api/pools/*/migration/sources/*", ROUTE_JSON,
     admin_migration_skip},
    {"GET", "api/pools/*/members", ROUTE_DRY_FIRST, admin_members_list},
    {"POST", "api/pools/*/members", ROUTE_DRY_FIRST | ROUTE_JSON,
     admin_member_add},
    {"GET", "api/pools/*/members/*", ROUTE_DRY_FIRST | ROUTE_MEMBER,
     admin_member_get},
    {"PATCH", "api/pools/*/members/*",
     ROUTE_DRY_FIRST | ROUTE_MEMBER | ROUTE_JSON, admin_member_patch},
    {"DELETE", "api/pools/*/members/*",
     ROUTE_DRY_FIRST | ROUTE_MEMBER | ROUTE_JSON, admin_member_delete},
    {"DELETE", "api/state/pools/*", ROUTE_STATE | ROUTE_JSON,
     admin_state_reset},
    {"DELETE", "api/state/pools/*/members/*", ROUTE_STATE | ROUTE_JSON,
     admin_state_reset},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/* A request's path as the routes see it. */
struct admin_path {
    char buf[2048]; /* the segments point into it (or into the url) */
    char pool[256]; /* a member's or a state path's pool */
    char *seg[ADMIN_MAX_SEG];
    int n;      /* segments, or -1: no path the API has */
    bool state; /* read by admin_state_path */
};

/*
 * <url> into segments. Two shapes are read whole first, because a name
 * in them may hold '/' (a unix socket member named by its path):
 * /api/state/pools/<pool>[/members/<name>] (admin_state_path) and
 * /api/pools/<pool>/members/<name> (admin_member_path); any other path
 * is split at its slashes.
 */
static void
path_parse(const char *url, struct admin_path *pa)
{
    const char *name;

    pa->state = admin_state_path(url, pa->pool, sizeof(pa->pool), &name);
    if (pa->state) {
        pa->seg[0] = (char *)"api";
        pa->seg[1] = (char *)"state";
        pa->seg[2] = (char *)"pools";
        pa->seg[3] = pa->pool;
        pa->seg[4] = (char *)"members";
        pa->seg[5] = (char *)name;
        pa->n = name != NULL ? 6 : 4;
        return;
    }
    name = admin_member_path(url, pa->pool, sizeof(pa->pool));
    if (name != NULL) {
        pa->seg[0] = (char *)"api";
        pa->seg[1] = (char *)"pools";
        pa->seg[2] = pa->pool;
        pa->seg[3] = (char *)"members";
        pa->seg[4] = (char *)name;
        pa->n = 5;
        return;
    }
    pa->n =
        admin_split_path(url, pa->buf, sizeof(pa->buf), pa->seg, ADMIN_MAX_SEG);
}

/* Whether route path <pattern> matches <pa>. */
static bool
path_match(const char *pattern, const struct admin_path *pa)
{
    const char *p = pattern;

    for (int i = 0; i < pa->n; i++) {
        size_t len = strcspn(p, "/");

        if (len == 0 ||
            !((len == 1 && p[0] == '*') ||
              (strlen(pa->seg[i]) == len && strncmp(p, pa->seg[i], len) == 0)))
            return false;
        p += len;
        if (*p == '/')
            p++;
    }
    return *p == '\0';
}

/* The first route of the path <pa> names, or NULL. */
static const struct admin_route *
route_find(const struct admin_path *pa)
{
    for (size_t i = 0; i < NROUTES; i++)
        if ((routes[i].flags & ROUTE_STATE) == (pa->state ? ROUTE_STATE : 0) &&
            path_match(routes[i].path, pa))
            return &routes[i];
    return NULL;
}

/* Among the routes of <first>'s path, the one for <method>; NULL with
 * their methods in <allow> ("GET, PATCH, DELETE"). */
static const struct admin_route *
route_method(const struct admin_route *first, const char *method, char *allow,
             size_t allowlen)
{
    const struct admin_route *r;
    size_t used = 0;

    allow[0] = '\0';
    for (r = first; r < routes + NROUTES && is(r->path, first->path); r++) {
        if (is(r->method, method) ||
            (is(r->method, "GET") && is(method, "HEAD")))
            return r;
        used += (size_t)snprintf(allow + used, allowlen - used, "%s%s",
                                 used > 0 ? ", " : "", r->method);
    }
    return NULL;
}

/* ROUTE_DRY_FIRST, ROUTE_MEMBER: false with the answer in *<ret>. */
static bool
checks_before(struct admin_call *call, unsigned flags, enum MHD_Result *ret)
{
    struct MHD_Connection *c = call->conn;
    const char *name = call->seg[4];
    struct server *s;

    if ((flags & ROUTE_DRY_FIRST) && !is(call->method, "GET") &&
        !is(call->method, "HEAD") && admin_query_flag(c, "dry_run") < 0) {
        *ret = admin_respond_error(c, MHD_HTTP_BAD_REQUEST,
                                   "\"dry_run\" must be 1, true, yes, on or 0, "
                                   "false, no, off (nothing was changed)");
        return false;
    }
    if (!(flags & ROUTE_MEMBER))
        return true;
    s = pool_server_find(call->pool, name);
    if (s != NULL && admin_server_member(s)) {
        call->member = s;
        return true;
    }
    if (strchr(name, '/') != NULL)
        *ret = admin_respond_error(c, MHD_HTTP_NOT_FOUND,
                                   "no such path: %s (pool %s has no member "
                                   "named \"%s\")",
                                   call->url, call->pool->name, name);
    else
        *ret = admin_respond_error(c, MHD_HTTP_NOT_FOUND,
                                   "pool %s has no member named \"%s\"",
                                   call->pool->name, name);
    return false;
}

/* ROUTE_DRY, ROUTE_JSON: false with the answer in *<ret>. */
static bool
checks_after(struct admin_call *call, unsigned flags, enum MHD_Result *ret)
{
    if ((flags & ROUTE_DRY) && admin_query_flag(call->conn, "dry_run") < 0) {
        *ret = admin_respond_error(call->conn, MHD_HTTP_BAD_REQUEST,
                                   "\"dry_run\" must be 1, true, yes, on or 0, "
                                   "false, no, off");
        return false;
    }
    return !(flags & ROUTE_JSON) ||
           json_content(call->conn, call->method, call->rq, ret);
}

/*
 * The request's answer. A path no route has is a 404 "no such path"; a
 * path under /api/pools/<pool> names a pool that must exist, whatever
 * follows (a typo in the pool's name says so, not "no such path"); then
 * the route's checks before the method, the method (405 with the Allow
 * header of the path's routes), the checks after, the handler. The Host,
 * the Origin, the token and the body's size were checked on the headers
 * already (admit, in admin.c).
 */
enum MHD_Result
admin_route(struct MHD_Connection *c, const char *url, const char *method,
            struct admin_request *rq)
{
    struct admin_path pa;
    struct admin_call call = {
        .conn = c, .url = url, .method = method, .rq = rq, .seg = pa.seg};
    const struct admin_route *first, *r;
    enum MHD_Result ret;
    char allow[64];

    path_parse(url, &pa);
    call.nseg = pa.n;
    if (pa.n < 0)
        return admin_respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s",
                                   url);
    if (!pa.state && pa.n >= 3 && is(pa.seg[0], "api") &&
        is(pa.seg[1], "pools")) {
        call.pool = pool_find(pa.seg[2]);
        if (call.pool == NULL)
            return admin_respond_error(c, MHD_HTTP_NOT_FOUND,
                                       "no pool named \"%s\"", pa.seg[2]);
    }
    first = route_find(&pa);
    if (first == NULL)
        return admin_respond_error(c, MHD_HTTP_NOT_FOUND, "no such path: %s",
                                   url);
    if (!checks_before(&call, first->flags, &ret))
        return ret;
    r = route_method(first, method, allow, sizeof(allow));
    if (r == NULL)
        return respond_405(c, method, url, allow);
    if (!checks_after(&call, r->flags, &ret))
        return ret;
    return r->handler(&call);
}

/* admin_cluster.c -- the admin API's answers that are not a pool's
 * members: the dashboard page, /metrics, the state file's overrides, the
 * change log, the etcd cluster, and a pool's migration, hot keys and
 * replication.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/admin.h"
#include "api/admin_int.h"

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

#include "api/dashboard.h"
#include "api/metrics.h"
#include "control/etcd.h"
#include "control/hot.h"
#include "control/membership.h"
#include "control/migration.h"
#include "control/replica.h"
#include "model/pool.h"

enum MHD_Result
admin_dashboard_get(struct admin_call *call)
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
    ret = MHD_queue_response(call->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result
admin_metrics_get(struct admin_call *call)
{
    size_t len = 0;
    char *text = metrics_render(&len);

    if (text == NULL)
        return admin_respond_error(call->conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                                   "out of memory");
    return admin_respond_buf(call->conn, MHD_HTTP_OK,
                             "text/plain; version=0.0.4; "
                             "charset=utf-8",
                             text, len);
}

enum MHD_Result
admin_state_get(struct admin_call *call)
{
    return admin_respond_json(call->conn, MHD_HTTP_OK, membership_state_json());
}

enum MHD_Result
admin_changes_get(struct admin_call *call)
{
    return admin_respond_json(call->conn, MHD_HTTP_OK,
                              membership_changes_json());
}

enum MHD_Result
admin_cluster_get(struct admin_call *call)
{
    return admin_respond_json(call->conn, MHD_HTTP_OK, etcd_cluster_json());
}

enum MHD_Result
admin_migration_get(struct admin_call *call)
{
    return admin_respond_json(call->conn, MHD_HTTP_OK,
                              migration_json(call->pool));
}

/* DELETE /api/pools/{pool}/migration/sources/{member}: give up on a dead
 * old owner; the answer is the migration as it is then. */
enum MHD_Result
admin_migration_skip(struct admin_call *call)
{
    char why[400];

    if (migration_skip(call->pool, call->seg[5], why, sizeof(why)) != 0)
        return admin_respond_error(call->conn, MHD_HTTP_CONFLICT, "%s", why);
    return admin_respond_json(call->conn, MHD_HTTP_OK,
                              migration_json(call->pool));
}

enum MHD_Result
admin_hot_get(struct admin_call *call)
{
    return admin_respond_json(call->conn, MHD_HTTP_OK, hot_json(call->pool));
}

enum MHD_Result
admin_replication_get(struct admin_call *call)
{
    json_t *rep = replica_json(call->pool);

    if (rep == NULL)
        return admin_respond_error(call->conn, MHD_HTTP_NOT_FOUND,
                                   "pool \"%s\" keeps one copy of each key "
                                   "(replicas: 1)",
                                   call->pool->name);
    return admin_respond_json(call->conn, MHD_HTTP_OK, rep);
}

/* metrics.c -- the Prometheus text exposition of chashd: one family at a
 * time (HELP, TYPE, then a sample per pool or member), names with the
 * chashd_ prefix in base units, counters ending in _total.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chash/chash.h"
#include "base/stats.h"
#include "control/etcd.h"
#include "control/hot.h"
#include "control/membership.h"
#include "control/migration.h"
#include "control/replica.h"
#include "model/pool.h"
#include "model/state.h"

/* Reloads since start, by outcome (control thread). */
static struct {
    uint64_t ok, failed;
} metrics_reloads;

void
metrics_init(void)
{
    stats_process_start();
}

void
metrics_note_reload(bool ok)
{
    if (ok)
        metrics_reloads.ok++;
    else
        metrics_reloads.failed++;
}

static void
family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
metrics_pool_labels(FILE *f, const struct pool *p)
{
    fputs("{pool=\"", f);
    stats_label_escape(f, p->name);
    fputc('"', f);
}

static void
member_labels(FILE *f, const struct pool *p, const struct server *s)
{
    metrics_pool_labels(f, p);
    fputs(",member=\"", f);
    stats_label_escape(f, s->name);
    fputc('"', f);
}

static bool
listed(const struct server *s)
{
    return atomic_load_explicit((_Atomic int *)&s->state,
                                memory_order_relaxed) != SERVER_REMOVED;
}

/* Which per-member value a family shows. */
enum member_value {
    MV_ACTIVE,
    MV_CONNS,
    MV_BYTES_IN,
    MV_BYTES_OUT,
    MV_CONNECT_FAILURES,
    MV_CONNECT_TIMEOUTS,
    MV_EARLY_CLOSES,
    MV_UP,
    MV_WEIGHT,
    MV_RAMP,
    MV_SHARE,
    MV_CHECKS_OK,
    MV_CHECKS_FAILED,
    MV_EJECTIONS,
    MV_REQUESTS,
    MV_INFLIGHT,
};

static const struct {
    const char *name;
    const char *type;
    const char *help;
} member_families[] = {
    [MV_ACTIVE] = {"chashd_member_active_connections", "gauge",
                   "Backend connections open to the member now."},
    [MV_CONNS] = {"chashd_member_connections_total", "counter",
                  "Backend connections established to the member."},
    [MV_BYTES_IN] = {"chashd_member_received_bytes_total", "counter",
                     "Bytes read from the member."},
    [MV_BYTES_OUT] = {"chashd_member_sent_bytes_total", "counter",
                      "Bytes written to the member."},
    [MV_CONNECT_FAILURES] = {"chashd_member_connect_failures_total", "counter",
                             "Connects to the member refused, reset or "
                             "timed out."},
    [MV_CONNECT_TIMEOUTS] = {"chashd_member_connect_timeouts_total", "counter",
                             "Connects to the member that timed out."},
    [MV_EARLY_CLOSES] = {"chashd_member_early_closes_total", "counter",
                         "Connections the member reset, or closed while its "
                         "client waited, before sending a byte (passive "
                         "failures)."},
    [MV_UP] = {"chashd_member_up", "gauge",
               "1 when the member takes new connections (state up), else 0."},
    [MV_WEIGHT] = {"chashd_member_weight", "gauge",
                   "The member's configured weight."},
    [MV_RAMP] = {"chashd_member_ramp_ratio", "gauge",
                 "Slow-start fraction of the member's share in the ring (1 = "
                 "full)."},
    [MV_SHARE] = {"chashd_member_share_ratio", "gauge",
                  "Exact fraction of the key space the member owns in the "
                  "current ring."},
    [MV_CHECKS_OK] = {"chashd_member_health_checks_passed_total", "counter",
                      "Active health checks the member passed."},
    [MV_CHECKS_FAILED] = {"chashd_member_health_checks_failed_total", "counter",
                          "Active health checks the member failed."},
    [MV_REQUESTS] = {"chashd_member_requests_total", "counter",
                     "Requests (fragments of split requests) sent to the "
                     "member (store modes)."},
    [MV_INFLIGHT] = {"chashd_member_inflight_requests", "gauge",
                     "Requests sent to the member and not answered yet."},
    [MV_EJECTIONS] = {"chashd_member_ejections_total", "counter",
                      "Times the member was ejected after "
                      "server_failure_limit connect failures in a row."},
};

static void
member_family(FILE *f, enum member_value v)
{
    family(f, member_families[v].name, member_families[v].type,
           member_families[v].help);
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t k = 0; k < p->nservers; k++) {
            const struct server *s = p->servers[k];
            struct stats_server_sum sum;
            uint64_t u = 0;
            double d = -1;

            if (!listed(s))
                continue;
            stats_server_sum(s->stats, pool_workers(), &sum);
            switch (v) {
            case MV_ACTIVE:
                u = atomic_load_explicit((_Atomic uint64_t *)&s->active,
                                         memory_order_relaxed);
                break;
            case MV_CONNS:
                u = sum.conns_total;
                break;
            case MV_BYTES_IN:
                u = sum.bytes_in;
                break;
            case MV_BYTES_OUT:
                u = sum.bytes_out;
                break;
            case MV_CONNECT_FAILURES:
                u = sum.connect_failures;
                break;
            case MV_CONNECT_TIMEOUTS:
                u = sum.connect_timeouts;
                break;
            case MV_EARLY_CLOSES:
                u = sum.early_closes;
                break;
            case MV_UP:
                u = server_usable(s) ? 1 : 0;
                break;
            case MV_WEIGHT:
                u = s->weight;
                break;
            case MV_RAMP:
                d = s->ramp;
                break;
            case MV_SHARE:
                d = pool_snapshot_share(pool_snapshot((struct pool *)p), s);
                break;
            case MV_CHECKS_OK:
                u = s->checks_ok;
                break;
            case MV_CHECKS_FAILED:
                u = s->checks_failed;
                break;
            case MV_EJECTIONS:
                u = s->ejections;
                break;
            case MV_REQUESTS:
                u = sum.requests;
                break;
            case MV_INFLIGHT:
                u = sum.inflight;
                break;
            }
            fputs(member_families[v].name, f);
            member_labels(f, p, s);
            if (d >= 0)
                fprintf(f, "} %.17g\n", d);
            else
                fprintf(f, "} %llu\n", (unsigned long long)u);
        }
    }
}

/* One series per state, 1 for the member's current state: the usual
 * Prometheus shape for an enum, so `chashd_member_state{state="down"} == 1`
 * selects the down members. */
static void
member_state_family(FILE *f)
{
    static const char *const state_names[] = {"up", "down", "ejected",
                                              "draining", "maint"};

    family(f, "chashd_member_state", "gauge",
           "1 for the member's current state (up, down, ejected, draining, "
           "maint), 0 for the others.");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t k = 0; k < p->nservers; k++) {
            const struct server *s = p->servers[k];
            int st = atomic_load_explicit((_Atomic int *)&s->state,
                                          memory_order_relaxed);

            if (!listed(s))
                continue;
            for (int x = SERVER_UP; x < SERVER_REMOVED; x++) {
                fputs("chashd_member_state", f);
                member_labels(f, p, s);
                fprintf(f, ",state=\"%s\"} %d\n", state_names[x], st == x);
            }
        }
    }
}

/* Which per-pool value a family shows. */
enum metrics_pool_value {
    PV_ACTIVE,
    PV_ACCEPTED,
    PV_FIRST_CHOICE,
    PV_SPILLED,
    PV_FAILED_OVER,
    PV_RETRIES,
    PV_IDLE_TIMEOUTS,
    PV_BYTES_IN,
    PV_BYTES_OUT,
    PV_MEMBERS,
    PV_CHANGES,
    PV_LAST_MOVED,
    PV_SNAPSHOT,
};

static const struct {
    const char *name;
    const char *type;
    const char *help;
} metrics_pool_families[] = {
    [PV_ACTIVE] = {"chashd_pool_active_connections", "gauge",
                   "Client connections open on the pool now."},
    [PV_ACCEPTED] = {"chashd_pool_connections_total", "counter",
                     "Client connections accepted."},
    [PV_FIRST_CHOICE] = {"chashd_pool_first_choice_total", "counter",
                         "Connections that went to their key's owner."},
    [PV_SPILLED] = {"chashd_pool_spills_total", "counter",
                    "Connections moved on because the owner was over its "
                    "bounded-load cap."},
    [PV_FAILED_OVER] = {"chashd_pool_failovers_total", "counter",
                        "Connections moved on because the owner was unusable "
                        "or its connect failed."},
    [PV_RETRIES] = {"chashd_pool_retries_total", "counter",
                    "Backend connects after the first for one client."},
    [PV_IDLE_TIMEOUTS] = {"chashd_pool_idle_timeouts_total", "counter",
                          "Connections closed by idle_timeout."},
    [PV_BYTES_IN] = {"chashd_pool_received_bytes_total", "counter",
                     "Bytes read from clients."},
    [PV_BYTES_OUT] = {"chashd_pool_sent_bytes_total", "counter",
                      "Bytes written to clients."},
    [PV_MEMBERS] = {"chashd_pool_members", "gauge",
                    "Members of the pool (any state)."},
    [PV_CHANGES] = {"chashd_pool_membership_changes_total", "counter",
                    "Membership changes made through the admin API or by a "
                    "reload."},
    [PV_LAST_MOVED] = {"chashd_pool_last_change_moved_ratio", "gauge",
                       "Fraction of the key space the last membership change "
                       "moved (at full ramp)."},
    [PV_SNAPSHOT] = {"chashd_pool_snapshot_version", "gauge",
                     "Ring snapshots published for the pool (+1 each)."},
};

static void
metrics_pool_family(FILE *f, enum metrics_pool_value v)
{
    family(f, metrics_pool_families[v].name, metrics_pool_families[v].type,
           metrics_pool_families[v].help);
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        const struct pool_snapshot *snap = pool_snapshot(p);
        struct stats_pool_sum sum;
        uint64_t u = 0;
        double d = -1, moved;
        size_t n = 0;

        stats_pool_sum(p->stats, pool_workers(), &sum);
        switch (v) {
        case PV_ACTIVE:
            u = atomic_load_explicit(&p->active, memory_order_relaxed);
            break;
        case PV_ACCEPTED:
            u = sum.accepted;
            break;
        case PV_FIRST_CHOICE:
            u = sum.first_choice;
            break;
        case PV_SPILLED:
            u = sum.spilled;
            break;
        case PV_FAILED_OVER:
            u = sum.failed_over;
            break;
        case PV_RETRIES:
            u = sum.retries;
            break;
        case PV_IDLE_TIMEOUTS:
            u = sum.idle_timeouts;
            break;
        case PV_BYTES_IN:
            u = sum.bytes_in;
            break;
        case PV_BYTES_OUT:
            u = sum.bytes_out;
            break;
        case PV_MEMBERS:
            for (size_t k = 0; k < p->nservers; k++)
                n += listed(p->servers[k]);
            u = n;
            break;
        case PV_CHANGES:
            u = membership_pool_changes(p->name, &moved);
            break;
        case PV_LAST_MOVED:
            membership_pool_changes(p->name, &moved);
            d = moved;
            break;
        case PV_SNAPSHOT:
            u = snap ? snap->version : 0;
            break;
        }
        fputs(metrics_pool_families[v].name, f);
        metrics_pool_labels(f, p);
        if (d >= 0)
            fprintf(f, "} %.17g\n", d);
        else
            fprintf(f, "} %llu\n", (unsigned long long)u);
    }
}

/* Failed requests of the store modes, by kind: error replies of the
 * member (reply), `timeout` (timeout), a connection that failed under them
 * (connection). */
static void
member_request_errors_family(FILE *f)
{
    family(f, "chashd_member_request_errors_total", "counter",
           "Requests to the member that ended in an error: its own error "
           "reply (reply), the pool's timeout (timeout), or a failed "
           "connection (connection).");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t k = 0; k < p->nservers; k++) {
            const struct server *s = p->servers[k];
            struct stats_server_sum sum;

            if (!listed(s))
                continue;
            stats_server_sum(s->stats, pool_workers(), &sum);
            fputs("chashd_member_request_errors_total", f);
            member_labels(f, p, s);
            fprintf(f, ",kind=\"reply\"} %llu\n",
                    (unsigned long long)sum.request_errors);
            fputs("chashd_member_request_errors_total", f);
            member_labels(f, p, s);
            fprintf(f, ",kind=\"timeout\"} %llu\n",
                    (unsigned long long)sum.request_timeouts);
            fputs("chashd_member_request_errors_total", f);
            member_labels(f, p, s);
            fprintf(f, ",kind=\"connection\"} %llu\n",
                    (unsigned long long)sum.request_failures);
        }
    }
}

/* How long members take to answer, as a Prometheus histogram. */
static void
member_latency_family(FILE *f)
{
    static const uint64_t bounds[] = STATS_LATENCY_BOUNDS_US;

    family(f, "chashd_member_request_duration_seconds", "histogram",
           "Time from a request's parse to its member's reply (store "
           "modes).");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);

        for (size_t k = 0; k < p->nservers; k++) {
            const struct server *s = p->servers[k];
            struct stats_server_sum sum;
            uint64_t cum = 0;

            if (!listed(s))
                continue;
            stats_server_sum(s->stats, pool_workers(), &sum);
            for (size_t b = 0; b < STATS_LATENCY_BUCKETS; b++) {
                cum += sum.latency[b];
                fputs("chashd_member_request_duration_seconds_bucket", f);
                member_labels(f, p, s);
                if (bounds[b] == UINT64_MAX)
                    fprintf(f, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
                else
                    fprintf(f, ",le=\"%g\"} %llu\n", (double)bounds[b] / 1e6,
                            (unsigned long long)cum);
            }
            fputs("chashd_member_request_duration_seconds_sum", f);
            member_labels(f, p, s);
            fprintf(f, "} %.6f\n", (double)sum.latency_sum_us / 1e6);
            fputs("chashd_member_request_duration_seconds_count", f);
            member_labels(f, p, s);
            fprintf(f, "} %llu\n", (unsigned long long)cum);
        }
    }
}

/* The store modes' requests of a pool, by how they were served. */
static void
metrics_pool_requests_family(FILE *f)
{
    family(f, "chashd_pool_requests_total", "counter",
           "Client requests (store modes), by how they were served: sent "
           "to members (forwarded), answered by chashd (local), answered "
           "by chashd with an error (refused).");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        struct stats_pool_sum sum;
        uint64_t fwd;

        stats_pool_sum(p->stats, pool_workers(), &sum);
        fwd = sum.requests - (sum.local + sum.refused < sum.requests
                                  ? sum.local + sum.refused
                                  : sum.requests);
        fputs("chashd_pool_requests_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, ",served=\"forwarded\"} %llu\n", (unsigned long long)fwd);
        fputs("chashd_pool_requests_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, ",served=\"local\"} %llu\n", (unsigned long long)sum.local);
        fputs("chashd_pool_requests_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, ",served=\"refused\"} %llu\n",
                (unsigned long long)sum.refused);
    }
    family(f, "chashd_pool_fragments_total", "counter",
           "Pieces of requests sent to members: a request split over three "
           "members counts three.");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        struct stats_pool_sum sum;

        stats_pool_sum(p->stats, pool_workers(), &sum);
        fputs("chashd_pool_fragments_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, "} %llu\n", (unsigned long long)sum.fragments);
    }
    family(f, "chashd_pool_protocol_errors_total", "counter",
           "Clients closed after input that could not be parsed.");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        struct stats_pool_sum sum;

        stats_pool_sum(p->stats, pool_workers(), &sum);
        fputs("chashd_pool_protocol_errors_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, "} %llu\n", (unsigned long long)sum.protocol_errors);
    }
}

/* Refused connections, one series per reason. */
static void
metrics_pool_refused_family(FILE *f)
{
    family(f, "chashd_pool_refused_total", "counter",
           "Client connections refused: client_connections reached (limit), "
           "on_failure error (error), no usable member (no_member).");
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        struct stats_pool_sum sum;

        stats_pool_sum(p->stats, pool_workers(), &sum);
        fputs("chashd_pool_refused_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, ",reason=\"limit\"} %llu\n",
                (unsigned long long)sum.refused_limit);
        fputs("chashd_pool_refused_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, ",reason=\"error\"} %llu\n",
                (unsigned long long)sum.refused_error);
        fputs("chashd_pool_refused_total", f);
        metrics_pool_labels(f, p);
        fprintf(f, ",reason=\"no_member\"} %llu\n",
                (unsigned long long)sum.no_member);
    }
}

char *
metrics_render(size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f;

    metrics_init();
    f = open_memstream(&buf, &size);
    if (f == NULL)
        return NULL;

    family(f, "chashd_build_info", "gauge",
           "Build information: always 1, the version in a label.");
    fprintf(f, "chashd_build_info{version=\"%s\"} 1\n", CHASH_VERSION_STRING);
    family(f, "chashd_uptime_seconds", "gauge",
           "Seconds since chashd started.");
    fprintf(f, "chashd_uptime_seconds %.3f\n", stats_uptime());
    family(f, "chashd_start_time_seconds", "gauge",
           "Start time of chashd since the Unix epoch, in seconds.");
    fprintf(f, "chashd_start_time_seconds %.3f\n", stats_start_unix());
    family(f, "chashd_config_reloads_total", "counter",
           "Config reloads (SIGHUP), by result.");
    fprintf(f, "chashd_config_reloads_total{result=\"success\"} %llu\n",
            (unsigned long long)metrics_reloads.ok);
    fprintf(f, "chashd_config_reloads_total{result=\"failure\"} %llu\n",
            (unsigned long long)metrics_reloads.failed);
    family(f, "chashd_retired_snapshots", "gauge",
           "Ring snapshots retired but not yet freed (a worker may hold "
           "them).");
    fprintf(f, "chashd_retired_snapshots %zu\n", pool_retired_count());

    for (int v = PV_ACTIVE; v <= PV_SNAPSHOT; v++)
        metrics_pool_family(f, (enum metrics_pool_value)v);
    metrics_pool_refused_family(f);
    for (int v = MV_ACTIVE; v <= MV_INFLIGHT; v++)
        member_family(f, (enum member_value)v);
    member_state_family(f);
    member_request_errors_family(f);
    member_latency_family(f);
    metrics_pool_requests_family(f);
    migration_metrics(f);
    hot_metrics(f);
    replica_metrics(f);
    etcd_metrics(f);

    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    *len = size;
    return buf;
}

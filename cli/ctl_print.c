/* ctl_print.c -- `chash ctl`'s tables: pools, members with their
 * requests and latency (from /metrics), migration reports, lookups, the
 * state file's overrides, a live migration, replication, hot keys, the
 * etcd cluster and a rebalance proposal, from the admin API's JSON.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "ctl_int.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "util.h"

/* ---- printing ----------------------------------------------------------- */

const char *
ctl_str(json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));

    return s ? s : "-";
}

long long
ctl_num(json_t *j, const char *key)
{
    json_t *v = json_object_get(j, key);

    return json_is_integer(v) ? (long long)json_integer_value(v)
                              : (long long)json_number_value(v);
}

static double
real(json_t *j, const char *key)
{
    return json_number_value(json_object_get(j, key));
}

/* ---- request statistics (redis and the other request modes) ------------ */

/* Room for the latency buckets /metrics gives per member: chashd has 12
 * (src/base/stats.h); more are ignored rather than overrun. */
#define CTL_LATENCY_BUCKETS 32

/*
 * One member's reply latency as the Prometheus histogram
 * chashd_member_request_duration_seconds holds it: cumulative counts per
 * upper bound, in /metrics order (ascending, +Inf last).
 */
struct latency {
    double le[CTL_LATENCY_BUCKETS];    /* upper bounds, seconds */
    uint64_t cum[CTL_LATENCY_BUCKETS]; /* replies at or under le[i] */
    size_t nbuckets;
    double sum;     /* seconds, all replies */
    uint64_t count; /* replies timed */
    bool seen;      /* the member has a series at all */
};

/* Whether pool <p> serves requests (a request engine mode, not tcp) and
 * its answer carries the request counters. A tcp pool's output stays as
 * it was: its "requests" blocks are all zero and say nothing. */
static bool
serves_requests(json_t *p)
{
    return strcmp(ctl_str(p, "mode"), "tcp") != 0 &&
           json_is_object(
               json_object_get(json_object_get(p, "stats"), "requests"));
}

/*
 * Read a quoted label value at *<s> (just after its opening quote) into
 * <out>, undoing the exposition format's escapes (\\, \", \n), and move
 * *<s> past the closing quote. false on a value that does not end on
 * the line; a value longer than <outlen> is cut (it then matches no
 * name).
 */
static bool
label_value(const char **s, char *out, size_t outlen)
{
    const char *p = *s;
    size_t o = 0;

    for (; *p != '"'; p++) {
        char ch = *p;

        if (ch == '\0' || ch == '\n')
            return false;
        if (ch == '\\') {
            p++;
            if (*p == 'n')
                ch = '\n';
            else if (*p == '\\' || *p == '"')
                ch = *p;
            else
                return false;
        }
        if (o + 1 < outlen)
            out[o++] = ch;
    }
    out[o] = '\0';
    *s = p + 1;
    return true;
}

/* Skip <lit> at *<s>: true and *<s> past it when it is there. */
static bool
skip(const char **s, const char *lit)
{
    size_t n = strlen(lit);

    if (strncmp(*s, lit, n) != 0)
        return false;
    *s += n;
    return true;
}

/*
 * One line of /metrics into <lat> when it is a sample of
 * chashd_member_request_duration_seconds for pool <pool> and one of
 * <members> (<lat> indexed like <members>). Labels come in chashd's
 * order: pool, member[, le]. Any other line, or one that does not parse,
 * is passed over: that latency then shows as "-".
 */
static void
latency_line(const char *s, const char *pool, json_t *members,
             struct latency *lat)
{
    char pname[1024], mname[1024], le[64] = "";
    struct latency *l = NULL;
    bool bucket = false, sum = false;
    json_t *m;
    size_t i;
    char *end;
    double v;

    if (!skip(&s, "chashd_member_request_duration_seconds_"))
        return;
    if (skip(&s, "bucket{"))
        bucket = true;
    else if (skip(&s, "sum{"))
        sum = true;
    else if (!skip(&s, "count{"))
        return;
    if (!skip(&s, "pool=\"") || !label_value(&s, pname, sizeof(pname)) ||
        strcmp(pname, pool) != 0 || !skip(&s, ",member=\"") ||
        !label_value(&s, mname, sizeof(mname)))
        return;
    if (bucket && (!skip(&s, ",le=\"") || !label_value(&s, le, sizeof(le))))
        return;
    if (!skip(&s, "} "))
        return;
    json_array_foreach(members, i, m)
    {
        if (strcmp(ctl_str(m, "name"), mname) == 0) {
            l = &lat[i];
            break;
        }
    }
    errno = 0;
    v = strtod(s, &end);
    /* counts go into uint64_t: no NaN, no negative, nothing from 2^64 */
    if (l == NULL || end == s || errno != 0 || !(v >= 0) ||
        v >= 18446744073709551616.0)
        return;
    l->seen = true;
    if (sum) {
        l->sum = v;
    } else if (!bucket) {
        l->count = (uint64_t)v;
    } else if (l->nbuckets < CTL_LATENCY_BUCKETS) {
        /* strtod() reads "+Inf" as infinity */
        l->le[l->nbuckets] = strtod(le, NULL);
        l->cum[l->nbuckets] = (uint64_t)v;
        l->nbuckets++;
    }
}

/*
 * The latency of each of <members> (pool <pool>) from the /metrics text
 * <text> into <lat>: the admin API's JSON has no latency histogram, and
 * /metrics has it, one sample a line.
 */
static void
latency_parse(const char *text, const char *pool, json_t *members,
              struct latency *lat)
{
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        latency_line(line, pool, members, lat);
        line = nl ? nl + 1 : NULL;
    }
}

/*
 * The <q> quantile of <l> into *<out> (seconds), estimated as Prometheus'
 * histogram_quantile() does: find the bucket holding rank q * count and
 * interpolate linearly inside it (from 0 for the first bucket). 0 done;
 * 1 when the rank falls in the +Inf bucket, *<out> then being the last
 * finite bound (the quantile is above it: nothing finer is known); -1 with
 * no reply timed.
 */
static int
latency_quantile(const struct latency *l, double q, double *out)
{
    double rank, lo = 0, below = 0;

    if (!l->seen || l->nbuckets == 0 || l->cum[l->nbuckets - 1] == 0)
        return -1;
    rank = q * (double)l->cum[l->nbuckets - 1];
    for (size_t i = 0; i < l->nbuckets; i++) {
        double c = (double)l->cum[i];

        if (c >= rank && c > below) {
            if (isinf(l->le[i])) {
                *out = lo;
                return 1;
            }
            *out = lo + (l->le[i] - lo) * (rank - below) / (c - below);
            return 0;
        }
        lo = l->le[i];
        below = c;
    }
    *out = lo;
    return 1;
}

/* <s> seconds for a table cell, in the unit that keeps 2-3 digits:
 * "85us", "1.25ms", "37.5ms", "250ms", "1.50s". */
static void
duration_cell(double s, char *buf, size_t len)
{
    if (s < 1e-3)
        snprintf(buf, len, "%.0fus", s * 1e6);
    else if (s < 1e-2)
        snprintf(buf, len, "%.2fms", s * 1e3);
    else if (s < 1e-1)
        snprintf(buf, len, "%.1fms", s * 1e3);
    else if (s < 1)
        snprintf(buf, len, "%.0fms", s * 1e3);
    else
        snprintf(buf, len, "%.2fs", s);
}

/* The <q> quantile of <l> as a cell: "-" with no reply timed, ">250ms"
 * when it lies above the last finite bucket. */
static void
quantile_cell(const struct latency *l, double q, char *buf, size_t len)
{
    double v;
    int rc = latency_quantile(l, q, &v);

    if (rc < 0) {
        snprintf(buf, len, "-");
        return;
    }
    buf[0] = '>';
    duration_cell(v, rc == 1 ? buf + 1 : buf, rc == 1 ? len - 1 : len);
}

/*
 * GET /metrics and the latency histograms of <p>'s members into <lat>
 * (zeroed, one per member). On any failure <lat> stays empty, so the
 * latency columns show "-", and a note says why: the counters from the
 * JSON are still worth showing.
 */
static void
latency_fetch(const struct ctl *c, json_t *p, struct latency *lat)
{
    struct ctl_reply r;

    if (ctl_http_request(c, "GET", "/metrics", NULL, &r) != 0)
        return;
    if (r.status != 200)
        cli_error(CMD, "latency not shown: GET /metrics answered HTTP %d",
                  r.status);
    else
        latency_parse(r.body, ctl_str(p, "name"), json_object_get(p, "members"),
                      lat);
    free(r.body);
}

/* The pool's request counters, one line under its connection counters. */
static void
print_pool_requests(json_t *p)
{
    json_t *rq = json_object_get(json_object_get(p, "stats"), "requests");

    printf("  requests %lld (local %lld, refused %lld), fragments %lld, "
           "errors %lld, protocol errors %lld\n",
           ctl_num(rq, "total"), ctl_num(rq, "local"), ctl_num(rq, "refused"),
           ctl_num(rq, "fragments"), ctl_num(rq, "errors"),
           ctl_num(rq, "protocol_errors"));
}

/*
 * Each member's requests: how many were sent, in flight, how they failed
 * (the JSON's error_replies, timeouts, failed), reply latency, bytes to
 * and from it. <lat> is indexed like <members>.
 */
static void
print_member_requests(json_t *members, const struct latency *lat)
{
    char p50[32], p99[32], mean[32];
    json_t *m;
    size_t i;

    printf("%-20s %10s %8s %11s %8s %8s %8s %8s %8s %12s %12s\n", "MEMBER",
           "REQUESTS", "INFLIGHT", "ERR_REPLIES", "TIMEOUTS", "FAILED", "P50",
           "P99", "MEAN", "BYTES_IN", "BYTES_OUT");
    json_array_foreach(members, i, m)
    {
        json_t *rq = json_object_get(m, "requests");
        const struct latency *l = &lat[i];

        quantile_cell(l, 0.50, p50, sizeof(p50));
        quantile_cell(l, 0.99, p99, sizeof(p99));
        if (l->count > 0)
            duration_cell(l->sum / (double)l->count, mean, sizeof(mean));
        else
            snprintf(mean, sizeof(mean), "-");
        printf("%-20s %10lld %8lld %11lld %8lld %8lld %8s %8s %8s %12lld "
               "%12lld\n",
               ctl_str(m, "name"), ctl_num(rq, "total"),
               ctl_num(rq, "inflight"), ctl_num(rq, "error_replies"),
               ctl_num(rq, "timeouts"), ctl_num(rq, "failed"), p50, p99, mean,
               ctl_num(m, "bytes_in"), ctl_num(m, "bytes_out"));
    }
    printf("P50, P99: reply latency estimated from the histogram buckets "
           "(linear within\na bucket, as Prometheus' histogram_quantile); "
           "MEAN: exact, sum / count\n");
}

void
ctl_print_pools(json_t *j)
{
    json_t *pools = json_object_get(j, "pools"), *p;
    size_t i;

    printf("%-16s %-6s %-22s %-10s %-10s %7s %7s  %s\n", "POOL", "MODE",
           "LISTEN", "ALGORITHM", "HASH", "MEMBERS", "ACTIVE", "CHECKSUM");
    json_array_foreach(pools, i, p)
    {
        printf("%-16s %-6s %-22s %-10s %-10s %7zu %7lld  %s\n",
               ctl_str(p, "name"), ctl_str(p, "mode"), ctl_str(p, "listen"),
               ctl_str(p, "algorithm"), ctl_str(p, "hash"),
               json_array_size(json_object_get(p, "members")),
               ctl_num(p, "active"), ctl_str(p, "checksum"));
    }
}

/* `chash ctl hot POOL`: the hottest keys, then every member's rate
 * against its share. */
void
ctl_print_hot(json_t *j)
{
    json_t *k, *m;
    size_t i;

    printf("pool %s: %.0f keys/s routed (hot_keys: %s, windows of %.0f s)\n",
           ctl_str(j, "pool"),
           json_number_value(json_object_get(j, "keys_per_s")),
           ctl_str(j, "hot_keys"),
           json_number_value(json_object_get(j, "window_s")));
    if (json_array_size(json_object_get(j, "keys")) == 0)
        printf("no key stands out\n");
    else
        printf("%-40s %12s %8s  %s\n", "KEY", "REQUESTS/S", "SHARE", "MEMBER");
    json_array_foreach(json_object_get(j, "keys"), i, k) printf(
        "%-40s %12.1f %7.1f%%  %s\n", ctl_str(k, "key"),
        json_number_value(json_object_get(k, "rate")),
        100.0 * json_number_value(json_object_get(k, "fraction")),
        json_is_string(json_object_get(k, "member")) ? ctl_str(k, "member")
                                                     : "-");
    printf("\n%-24s %12s %8s %10s\n", "MEMBER", "REQUESTS/S", "SHARE",
           "LOAD RATIO");
    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        json_t *r = json_object_get(m, "load_ratio");
        char ratio[32] = "-";

        if (json_is_number(r))
            snprintf(ratio, sizeof(ratio), "%.2f", json_number_value(r));
        printf("%-24s %12.1f %7.1f%% %10s\n", ctl_str(m, "name"),
               json_number_value(json_object_get(m, "requests_per_s")),
               100.0 * json_number_value(json_object_get(m, "share")), ratio);
    }
}

/* `chash ctl cluster`: this instance's link to etcd, then every live
 * instance, its applied revision and its checksum per pool. */
void
ctl_print_cluster(json_t *j)
{
    json_t *e = json_object_get(j, "etcd"), *insts, *inst, *pools, *last;
    const char *pn;
    json_t *pv;
    size_t i;

    if (!json_is_object(e)) {
        printf("no pool takes its members from etcd on this instance\n");
        return;
    }
    printf("instance %s: etcd %s (%s) at %s, applied revision %lld, %lld "
           "lists, %lld reconnects\n",
           ctl_str(j, "instance"),
           json_is_true(json_object_get(e, "up")) ? "up" : "DOWN",
           ctl_str(e, "state"), ctl_str(e, "prefix"), ctl_num(e, "applied_rev"),
           ctl_num(e, "lists"), ctl_num(e, "reconnects"));
    if (json_is_string(json_object_get(e, "last_error")) &&
        !json_is_true(json_object_get(e, "up")))
        printf("  last error: %s\n", ctl_str(e, "last_error"));
    if (json_is_true(json_object_get(e, "fenced")))
        printf("  FENCED: this instance may have lost its lease; pools "
               "with migration: copy answer no key until it is back\n");
    json_array_foreach(json_object_get(e, "ignored"), i, inst)
        printf("  ignored: %s (revision %lld): %s\n", ctl_str(inst, "key"),
               ctl_num(inst, "mod_revision"), ctl_str(inst, "why"));
    insts = json_object_get(j, "instances");
    printf("%-24s %7s %10s  %-16s %s\n", "INSTANCE", "PID", "APPLIED", "POOL",
           "CHECKSUM (MEMBERS)");
    json_array_foreach(insts, i, inst)
    {
        bool first = true;
        json_object_foreach(json_object_get(inst, "pools"), pn, pv)
        {
            char who[64];
            snprintf(who, sizeof(who), "%s%s", ctl_str(inst, "instance"),
                     json_is_true(json_object_get(inst, "self")) ? " (this)"
                                                                 : "");
            if (first)
                printf("%-24s %7lld %10lld  %-16s %s (%lld)\n", who,
                       ctl_num(inst, "pid"), ctl_num(inst, "applied_rev"), pn,
                       ctl_str(pv, "checksum"), ctl_num(pv, "members"));
            else
                printf("%-24s %7s %10s  %-16s %s (%lld)\n", "", "", "", pn,
                       ctl_str(pv, "checksum"), ctl_num(pv, "members"));
            first = false;
        }
    }
    pools = json_object_get(j, "pools");
    json_object_foreach(pools, pn, pv) printf(
        "pool %s: %s over %lld instances\n", pn,
        json_is_true(json_object_get(pv, "agree")) ? "agree" : "DISAGREE",
        ctl_num(pv, "instances"));
    last = json_object_get(j, "last_change");
    if (json_is_object(last))
        printf("last change: revision %lld reached %lld of %lld instances in "
               "%.1f ms\n",
               ctl_num(last, "revision"), ctl_num(last, "reached"),
               ctl_num(last, "of"),
               json_number_value(json_object_get(last, "took_ms")));
}

/* Whether member <m> is leaving its pool: a removal in a `migration:
 * copy` pool keeps it, drained, until its keys have moved. The API says
 * so in the running migration's "leaving" (<leaving>, may be NULL), or
 * on the member itself. */
static bool
member_leaving(json_t *m, json_t *leaving)
{
    json_t *name;
    size_t i;

    if (json_is_true(json_object_get(m, "leaving")))
        return true;
    json_array_foreach(leaving, i, name)
    {
        if (json_is_string(name) &&
            strcmp(json_string_value(name), ctl_str(m, "name")) == 0)
            return true;
    }
    return false;
}

static void
print_members(json_t *members, json_t *leaving)
{
    json_t *m;
    size_t i;

    printf("%-20s %-22s %-9s %6s %6s %7s %9s %6s %8s\n", "MEMBER", "ADDRESS",
           "STATE", "WEIGHT", "RAMP", "ACTIVE", "TOTAL", "FAILS", "SHARE");
    json_array_foreach(members, i, m)
    {
        printf("%-20s %-22s %-9s %6lld %5.0f%% %7lld %9lld %6lld %7.3f%%\n",
               ctl_str(m, "name"), ctl_str(m, "address"),
               member_leaving(m, leaving) ? "leaving" : ctl_str(m, "state"),
               ctl_num(m, "weight"), 100 * real(m, "ramp"),
               ctl_num(m, "active"), ctl_num(m, "connections_total"),
               ctl_num(m, "connect_failures"), 100 * real(m, "share"));
    }
}

/*
 * The members leaving redis pool <p> while a migration runs, from GET
 * /api/pools/{pool}/migration ("leaving"); NULL when none, or without
 * that answer (a chashd older than live migration): `show` then prints
 * the states as they are.
 */
static json_t *
leaving_fetch(const struct ctl *c, json_t *p)
{
    char pool[800], path[900];
    struct ctl_reply r;
    json_t *j, *l = NULL;

    if (strcmp(ctl_str(p, "mode"), "redis") != 0)
        return NULL;
    ctl_url_escape(ctl_str(p, "name"), pool, sizeof(pool));
    snprintf(path, sizeof(path), "/api/pools/%s/migration", pool);
    if (ctl_http_request(c, "GET", path, NULL, &r) != 0)
        return NULL;
    j = r.status == 200 ? json_loadb(r.body, r.len, 0, NULL) : NULL;
    if (json_is_true(json_object_get(j, "active")))
        l = json_incref(json_object_get(j, "leaving"));
    json_decref(j);
    free(r.body);
    return l;
}

/*
 * `show`: the pool's settings, counters and members. A pool that serves
 * requests adds its request counters and a second table of each member's
 * requests, errors, latency (from /metrics) and bytes; a tcp pool's
 * output is what it always was.
 */
void
ctl_print_pool(const struct ctl *c, json_t *p)
{
    json_t *s = json_object_get(p, "settings"),
           *st = json_object_get(p, "stats"),
           *members = json_object_get(p, "members");
    bool requests = serves_requests(p);
    struct latency *lat = NULL;
    json_t *leaving = leaving_fetch(c, p);

    if (requests) {
        size_t n = json_array_size(members);

        lat = calloc(n ? n : 1, sizeof(*lat));
        if (lat == NULL) {
            cli_error(CMD, "out of memory");
            requests = false;
        } else {
            latency_fetch(c, p, lat);
        }
    }
    if (requests) {
        /* keys route requests: the tcp pools' client-address hashing,
         * bounded loads and per-connection counters do not apply */
        printf("pool %s: %s on %s, %s/%s\n", ctl_str(p, "name"),
               ctl_str(p, "mode"), ctl_str(p, "listen"),
               ctl_str(p, "algorithm"), ctl_str(p, "hash"));
        printf("  slow_start %lld ms, on_failure %s, snapshot v%lld, "
               "checksum %s\n",
               ctl_num(s, "slow_start_ms"), ctl_str(s, "on_failure"),
               ctl_num(p, "snapshot"), ctl_str(p, "checksum"));
        printf("  active %lld, accepted %lld\n", ctl_num(p, "active"),
               ctl_num(st, "accepted"));
        print_pool_requests(p);
    } else {
        printf("pool %s: %s on %s, %s/%s, hash_key %s\n", ctl_str(p, "name"),
               ctl_str(p, "mode"), ctl_str(p, "listen"),
               ctl_str(p, "algorithm"), ctl_str(p, "hash"),
               ctl_str(s, "hash_key"));
        printf("  balance_factor %g, slow_start %lld ms, on_failure %s, "
               "snapshot v%lld, checksum %s\n",
               real(s, "balance_factor"), ctl_num(s, "slow_start_ms"),
               ctl_str(s, "on_failure"), ctl_num(p, "snapshot"),
               ctl_str(p, "checksum"));
        printf("  active %lld, accepted %lld, first choice %lld, spilled "
               "%lld, failed over %lld\n",
               ctl_num(p, "active"), ctl_num(st, "accepted"),
               ctl_num(st, "first_choice"), ctl_num(st, "spilled"),
               ctl_num(st, "failed_over"));
    }
    printf("\n");
    print_members(members, leaving);
    if (requests) {
        printf("\n");
        print_member_requests(members, lat);
    }
    free(lat);
    json_decref(leaving);
}

/*
 * What a change means for the data of a pool with `migration: copy`
 * (redis): how many keys move (a dry run counts them: the exact moved
 * fraction times the pool's keys), the migration the change started, and
 * what a removal with --now lost. A report without these fields (a tcp
 * pool, migration off, an older chashd) prints nothing here.
 */
static void
print_data_report(json_t *r, bool dry, const char *pool)
{
    json_t *mig = json_object_get(r, "migration"),
           *lost = json_object_get(r, "lost_keys");

    if (json_is_number(json_object_get(r, "keys_to_move")) &&
        json_is_number(json_object_get(r, "keys_total")))
        printf("  %s %lld of the pool's %lld keys\n",
               dry ? "would move" : "moves", ctl_num(r, "keys_to_move"),
               ctl_num(r, "keys_total"));
    else if (json_object_get(r, "keys_to_move") != NULL)
        printf("  %s an unknown number of keys: a member did not answer "
               "DBSIZE\n",
               dry ? "would move" : "moves");
    if (json_is_object(mig) && strcmp(ctl_str(mig, "phase"), "warming") == 0)
        printf("  warm-up %lld started: a key missing on its new member is "
               "read from its old one; follow it with `chash ctl migration "
               "%s`\n",
               ctl_num(mig, "epoch"), pool);
    else if (json_is_object(mig))
        printf("  migration %lld started: %lld keys predicted to move; "
               "follow it with `chash ctl migration %s`\n",
               ctl_num(mig, "epoch"), ctl_num(mig, "keys_predicted"), pool);
    if (json_is_number(lost))
        printf("  %s at once: %lld key%s on it %s\n",
               dry ? "would leave" : "left", ctl_num(r, "lost_keys"),
               ctl_num(r, "lost_keys") == 1 ? "" : "s",
               dry                            ? "would not be moved"
               : ctl_num(r, "lost_keys") == 1 ? "was not moved"
                                              : "were not moved");
    else if (lost != NULL && json_is_null(lost))
        printf("  %s at once: its keys %s (how many is unknown: it did not "
               "answer DBSIZE)\n",
               dry ? "would leave" : "left",
               dry ? "would not be moved" : "were not moved");
    /* a pool that does not move data: what the change hides */
    if (json_is_string(json_object_get(r, "data_warning"))) {
        bool forced = json_is_true(json_object_get(r, "forced"));

        printf("  warning: %s\n", ctl_str(r, "data_warning"));
        if (dry)
            printf("  %s\n", forced ? "--force given: it would be applied"
                                    : "applying it needs --force");
        else if (json_is_true(json_object_get(r, "applied")))
            printf("  applied with --force\n");
    }
}

void
ctl_print_report(json_t *r, const char *what, const char *pool)
{
    json_t *flows = json_object_get(r, "flows"), *f, *imm;
    bool dry = json_is_true(json_object_get(r, "dry_run"));
    size_t i;

    printf("%s%s\n", dry ? "dry run, nothing changed: " : "", what);
    /* state --reset: how many runtime overrides go */
    if (json_is_integer(json_object_get(r, "dropped"))) {
        long long n = ctl_num(r, "dropped");

        printf("  %s %lld override%s\n", dry ? "would drop" : "dropped", n,
               n == 1 ? "" : "s");
    }
    if (json_is_null(json_object_get(r, "moved"))) {
        printf("  %s\n", ctl_str(r, "note"));
        print_data_report(r, dry, pool);
        return;
    }
    printf("  moved %.4f%% of the key space at full ramp (optimal %.4f%%)%s\n",
           100 * real(r, "moved"), 100 * real(r, "optimal"),
           json_is_false(json_object_get(r, "exact")) ? ", measured" : "");
    imm = json_object_get(r, "immediate");
    if (json_is_number(imm) &&
        fabs(json_number_value(imm) - real(r, "moved")) > 1e-9)
        printf("  moves %.4f%% at once, with the slow-start ramps as they "
               "are%s\n",
               100 * json_number_value(imm),
               json_number_value(imm) < real(r, "moved")
                   ? " (the ramp brings the rest)"
                   : "");
    if (json_array_size(flows) > 0)
        printf("  %-20s    %-20s %10s\n", "FROM", "TO", "FRACTION");
    json_array_foreach(flows, i, f)
    {
        printf("  %-20s -> %-20s %9.4f%%\n", ctl_str(f, "from"),
               ctl_str(f, "to"), 100 * real(f, "fraction"));
    }
    print_data_report(r, dry, pool);
    if (json_object_get(r, "warning") != NULL)
        printf("  warning: %s\n", ctl_str(r, "warning"));
}

void
ctl_print_lookup(json_t *j)
{
    json_t *members = json_object_get(j, "members"), *m;
    size_t i;

    printf("%s", ctl_str(j, "key"));
    json_array_foreach(members, i, m)
    {
        printf("\t%s (%s, %s)", ctl_str(m, "name"), ctl_str(m, "address"),
               ctl_str(m, "state"));
    }
    printf("\n");
}

/* One override value as a table cell: null as "-", numbers and strings
 * as they are, an added member as "ADDRESS weight W STATE", a removed one
 * as "ADDRESS weight W"; anything else as compact JSON, so what a newer
 * chashd reports still shows. */
static void
state_cell(json_t *v, char *buf, size_t len)
{
    json_t *addr = json_object_get(v, "address");
    char *text;
    int n;

    if (v == NULL || json_is_null(v)) {
        snprintf(buf, len, "-");
    } else if (json_is_integer(v)) {
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    } else if (json_is_string(v)) {
        snprintf(buf, len, "%s", json_string_value(v));
    } else if (json_is_object(v) && json_is_string(addr)) {
        n = snprintf(buf, len, "%s", json_string_value(addr));
        if (n >= 0 && (size_t)n < len &&
            json_is_integer(json_object_get(v, "weight")))
            n += snprintf(buf + n, len - (size_t)n, " weight %lld",
                          ctl_num(v, "weight"));
        if (n >= 0 && (size_t)n < len &&
            json_is_string(json_object_get(v, "state")))
            snprintf(buf + n, len - (size_t)n, " %s", ctl_str(v, "state"));
    } else {
        text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, len, "%s", text ? text : "?");
        free(text);
    }
}

/* Rows in a stable order whatever order the API lists them in: by pool,
 * then member, then what. */
static int
override_cmp(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    int d = strcmp(ctl_str(x, "pool"), ctl_str(y, "pool"));

    if (d == 0)
        d = strcmp(ctl_str(x, "member"), ctl_str(y, "member"));
    if (d == 0)
        d = strcmp(ctl_str(x, "what"), ctl_str(y, "what"));
    return d;
}

/* GET /api/state's "overrides" as a table. -1 when the answer has none
 * (a chashd older than `chash ctl state`). */
int
ctl_print_state(json_t *j)
{
    json_t *ov = json_object_get(j, "overrides");
    json_t **rows;
    size_t n = json_array_size(ov);
    char config[256], runtime[256];

    if (!json_is_array(ov)) {
        cli_error(CMD, "the answer of GET /api/state has no \"overrides\": "
                       "this chashd is older than `chash ctl state`");
        return -1;
    }
    if (n == 0) {
        printf("no runtime overrides: every pool runs as its config says\n");
    } else {
        rows = calloc(n, sizeof(*rows));
        if (rows == NULL) {
            cli_error(CMD, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            rows[i] = json_array_get(ov, i);
        qsort(rows, n, sizeof(*rows), override_cmp);
        printf("%-12s %-20s %-8s %-28s %s\n", "POOL", "MEMBER", "WHAT",
               "CONFIG", "RUNTIME");
        for (size_t i = 0; i < n; i++) {
            state_cell(json_object_get(rows[i], "config"), config,
                       sizeof(config));
            state_cell(json_object_get(rows[i], "runtime"), runtime,
                       sizeof(runtime));
            printf("%-12s %-20s %-8s %-28s %s\n", ctl_str(rows[i], "pool"),
                   ctl_str(rows[i], "member"), ctl_str(rows[i], "what"), config,
                   runtime);
        }
        free(rows);
    }
    if (json_is_null(json_object_get(j, "file")))
        printf("no state_file: the overrides are lost when chashd stops\n");
    return 0;
}

/* ---- live migration (redis pools, `migration: copy`) ------------------ */

/* Width of the text progress bar of a migration's source. */
#define CTL_BAR_WIDTH 20

/* <v> as a number when it is one (the API's nullable figures: rate, ETA,
 * progress), else false. */
static bool
number(json_t *j, const char *key, double *v)
{
    json_t *x = json_object_get(j, key);

    if (!json_is_number(x))
        return false;
    *v = json_number_value(x);
    return isfinite(*v);
}

/* <s> seconds as an operator reads a wait: "4.5s", "2m05s", "1h02m";
 * "-" when not known. */
static void
span_cell(json_t *j, const char *key, char *buf, size_t len)
{
    double s;

    if (!number(j, key, &s) || s < 0) {
        snprintf(buf, len, "-");
    } else if (s < 60) {
        snprintf(buf, len, "%.1fs", s);
    } else if (s < 3600) {
        long t = lround(s);

        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    } else {
        long t = lround(s / 60);

        snprintf(buf, len, "%ldh%02ldm", t / 60, t % 60);
    }
}

/* <n> bytes with a binary unit: "900 B", "120.6 KiB", "8.6 MiB". */
static void
bytes_cell(double n, char *buf, size_t len)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;

    if (n < 1024) {
        snprintf(buf, len, "%.0f B", n);
        return;
    }
    n /= 1024;
    while (n >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        n /= 1024;
        u++;
    }
    snprintf(buf, len, "%.1f %s", n, unit[u]);
}

/*
 * A source's progress as "[#########-----------]  45%": the part of its
 * keys (DBSIZE when it started) the copier has scanned in this pass, as
 * the API's "progress" says. A source that is done is full; one whose
 * progress is not known (null) shows an empty bar and "-". The percent is
 * rounded down, so 100% means done and never "almost".
 */
static void
progress_cell(json_t *src, char *buf, size_t len)
{
    char bar[CTL_BAR_WIDTH + 1];
    double p;
    bool known = number(src, "progress", &p);
    size_t fill;

    if (json_is_true(json_object_get(src, "done"))) {
        p = 1;
        known = true;
    }
    if (known)
        p = p < 0 ? 0 : p > 1 ? 1 : p;
    fill = known ? (size_t)floor(p * CTL_BAR_WIDTH) : 0;
    memset(bar, '#', fill);
    memset(bar + fill, '-', CTL_BAR_WIDTH - fill);
    bar[CTL_BAR_WIDTH] = '\0';
    if (known)
        snprintf(buf, len, "[%s] %3.0f%%", bar, floor(100 * p));
    else
        snprintf(buf, len, "[%s]    -", bar);
}

/* What migration <m> moved (the copier's keys and those a client request
 * moved first), against the prediction, and what went wrong: the same
 * lines for the running migration and the last finished one. */
static void
print_migration_counts(json_t *m)
{
    char bytes[32];

    bytes_cell(real(m, "bytes_moved"), bytes, sizeof(bytes));
    printf("  moved %lld of %lld predicted keys (%lld by the copier, %lld by "
           "traffic), %s\n",
           ctl_num(m, "keys_moved") + ctl_num(m, "keys_moved_by_traffic"),
           ctl_num(m, "keys_predicted"), ctl_num(m, "keys_moved"),
           ctl_num(m, "keys_moved_by_traffic"), bytes);
    printf("  anomalies %lld, failed keys %lld, errors %lld\n",
           ctl_num(m, "anomalies"), ctl_num(m, "failed_keys"),
           ctl_num(m, "errors"));
}

/* The sources of a running migration: one line each with its progress
 * bar, then the last error of those that have one. */
static void
print_migration_sources(json_t *sources)
{
    char bar[64];
    json_t *src;
    size_t i;

    printf("%-20s %-22s %-10s %4s %10s %10s %10s  %s\n", "SOURCE", "ADDRESS",
           "PHASE", "PASS", "DBSIZE", "SCANNED", "MOVED", "PROGRESS");
    json_array_foreach(sources, i, src)
    {
        char dbsize[32] = "-";

        /* null: the source did not answer DBSIZE when it started */
        if (json_is_number(json_object_get(src, "dbsize_at_start")))
            snprintf(dbsize, sizeof(dbsize), "%lld",
                     ctl_num(src, "dbsize_at_start"));
        progress_cell(src, bar, sizeof(bar));
        /* an old owner the operator gave up (migration --give-up): its
         * keys not moved are lost, its bar is full because it is done */
        printf("%-20s %-22s %-10s %4lld %10s %10lld %10lld  %s\n",
               ctl_str(src, "member"), ctl_str(src, "address"),
               json_is_true(json_object_get(src, "skipped"))
                   ? "given-up"
                   : ctl_str(src, "phase"),
               ctl_num(src, "pass"), dbsize, ctl_num(src, "keys_scanned"),
               ctl_num(src, "keys_moved"), bar);
    }
    json_array_foreach(sources, i, src)
    {
        if (json_is_string(json_object_get(src, "last_error")))
            printf("  %s: last error: %s\n", ctl_str(src, "member"),
                   ctl_str(src, "last_error"));
    }
}

/* The keys big enough (migration_big_key) to be moved alone. */
static void
print_big_keys(json_t *big)
{
    char bytes[32], ms[32];
    json_t *k;
    size_t i;

    if (json_array_size(big) == 0)
        return;
    printf("\nbig keys, moved one per MIGRATE:\n");
    printf("%-20s %12s %10s  %s\n", "MEMBER", "BYTES", "TIME", "KEY");
    json_array_foreach(big, i, k)
    {
        bytes_cell(real(k, "bytes"), bytes, sizeof(bytes));
        snprintf(ms, sizeof(ms), "%lldms", ctl_num(k, "ms"));
        printf("%-20s %12s %10s  %s\n", ctl_str(k, "member"), bytes, ms,
               ctl_str(k, "key"));
    }
}

/*
 * `migration POOL`: GET /api/pools/{pool}/migration for an operator. A
 * running migration shows its phase, the change that started it, keys
 * moved (by the copier and by client traffic touching a moving key first)
 * against the prediction, rate and ETA, what went wrong, a progress line
 * per source member and the big keys; then, running or not, the last
 * finished migration in one line.
 */
/*
 * A memcache pool's warm-up (`migration: warmup`): for a while after a
 * change, a key missing on its new member is read from its old one and
 * added to the new one. No copier: nothing to scan, no sources.
 */
static void
print_warmup(json_t *j)
{
    json_t *last = json_object_get(j, "last");
    char elapsed[32], left[32], span[32];

    if (!json_is_true(json_object_get(j, "active"))) {
        printf("pool %s: migration warmup, none running\n", ctl_str(j, "pool"));
    } else {
        span_cell(j, "elapsed_s", elapsed, sizeof(elapsed));
        span_cell(j, "warmup_left_s", left, sizeof(left));
        span_cell(j, "warmup_s", span, sizeof(span));
        printf("pool %s: migration warmup, epoch %lld, phase %s\n",
               ctl_str(j, "pool"), ctl_num(j, "epoch"), ctl_str(j, "phase"));
        printf("  change %s, started %s, elapsed %s, %s left of %s\n",
               ctl_str(j, "change"), ctl_str(j, "started"), elapsed, left,
               span);
        printf("  warmed %lld keys (missing on their new member, read from "
               "the old one and added)\n",
               ctl_num(j, "keys_moved_by_traffic"));
        printf("  failed keys %lld, errors %lld\n", ctl_num(j, "failed_keys"),
               ctl_num(j, "errors"));
        printf("\n");
    }
    if (!json_is_object(last)) {
        printf("last warm-up: none\n");
        return;
    }
    span_cell(last, "elapsed_s", elapsed, sizeof(elapsed));
    printf("last warm-up: epoch %lld, %s, started %s, %s in %s\n",
           ctl_num(last, "epoch"), ctl_str(last, "change"),
           ctl_str(last, "started"), ctl_str(last, "phase"), elapsed);
    printf("  warmed %lld keys, failed keys %lld, errors %lld\n",
           ctl_num(last, "keys_moved_by_traffic"), ctl_num(last, "failed_keys"),
           ctl_num(last, "errors"));
}

/*
 * `migration POOL`: GET /api/pools/{pool}/migration for an operator. A
 * running migration shows its phase (and stage: members that both give
 * and take keys migrate in two stages), the change that started it, keys
 * moved (by the copier and by client traffic touching a moving key
 * first) against the prediction, rate and ETA, what went wrong, a
 * progress line per source member and the big keys; then, running or
 * not, the last finished migration.
 */
void
ctl_print_migration(json_t *j)
{
    json_t *last = json_object_get(j, "last");
    char elapsed[32], eta[32], rcell[48], stage[32] = "";
    double rate;

    if (strcmp(ctl_str(j, "migration"), "warmup") == 0) {
        print_warmup(j);
        return;
    }
    if (strcmp(ctl_str(j, "migration"), "copy") != 0) {
        printf("pool %s: migration %s: a membership change moves which "
               "member owns a key, not its data\n",
               ctl_str(j, "pool"), ctl_str(j, "migration"));
        return;
    }
    if (!json_is_true(json_object_get(j, "active"))) {
        printf("pool %s: migration copy, none running\n", ctl_str(j, "pool"));
    } else {
        span_cell(j, "elapsed_s", elapsed, sizeof(elapsed));
        span_cell(j, "eta_s", eta, sizeof(eta));
        if (json_is_integer(json_object_get(j, "stage")))
            snprintf(stage, sizeof(stage), ", stage %lld of 2",
                     ctl_num(j, "stage"));
        printf("pool %s: migration copy, epoch %lld, phase %s%s\n",
               ctl_str(j, "pool"), ctl_num(j, "epoch"), ctl_str(j, "phase"),
               stage);
        printf("  change %s, started %s, elapsed %s\n", ctl_str(j, "change"),
               ctl_str(j, "started"), elapsed);
        /* keys_scanned counts every pass over every source: it passes
         * the pool's keys_total once the verification passes run */
        if (number(j, "rate_keys_s", &rate))
            snprintf(rcell, sizeof(rcell), "%.0f keys/s", rate);
        else
            snprintf(rcell, sizeof(rcell), "-");
        printf("  scanned %lld keys (all passes; the pool held %lld), rate "
               "%s, ETA %s\n",
               ctl_num(j, "keys_scanned"), ctl_num(j, "keys_total"), rcell,
               eta);
        print_migration_counts(j);
        printf("\n");
        print_migration_sources(json_object_get(j, "sources"));
        print_big_keys(json_object_get(j, "big_keys"));
        printf("\n");
    }
    if (!json_is_object(last)) {
        printf("last migration: none\n");
        return;
    }
    span_cell(last, "elapsed_s", elapsed, sizeof(elapsed));
    printf("last migration: epoch %lld, %s, started %s, %s in %s\n",
           ctl_num(last, "epoch"), ctl_str(last, "change"),
           ctl_str(last, "started"), ctl_str(last, "phase"), elapsed);
    print_migration_counts(last);
}

/*
 * `replication POOL`: GET /api/pools/{pool}/replication for an operator:
 * the policy, whether a fill runs, the counters, then a line per member
 * (serves reads or not, keys noted for its repair).
 */
void
ctl_print_replication(json_t *j)
{
    json_t *members = json_object_get(j, "members");
    size_t i;
    json_t *m;

    printf("replicas %lld, write_quorum %lld, read_policy %s",
           ctl_num(j, "replicas"), ctl_num(j, "write_quorum"),
           ctl_str(j, "read_policy"));
    if (strcmp(ctl_str(j, "read_policy"), "quorum") == 0)
        printf(", read_quorum %lld", ctl_num(j, "read_quorum"));
    printf("; repair_log %lld keys per member\n", ctl_num(j, "repair_log"));
    printf("%s; %lld fills done, %lld copies cleaned from members that left "
           "a key's set\n",
           json_is_true(json_object_get(j, "filling"))
               ? "filling: members that joined replica sets are being filled"
               : "no fill running",
           ctl_num(j, "fills"), ctl_num(j, "cleaned"));
    printf("writes refused (no quorum) %lld, acknowledged with a member "
           "missing %lld; reads refused %lld\n",
           ctl_num(j, "write_failures"), ctl_num(j, "partial_writes"),
           ctl_num(j, "read_failures"));
    printf("divergences %lld, repairs %lld, repair errors %lld, whole "
           "comparisons %lld\n\n",
           ctl_num(j, "divergences"), ctl_num(j, "repairs"),
           ctl_num(j, "repair_errors"), ctl_num(j, "full_compares"));
    printf("%-20s %-9s %12s\n", "MEMBER", "READS", "TO REPAIR");
    json_array_foreach(members, i, m)
    {
        char pending[32];

        if (json_is_true(json_object_get(m, "overflow")))
            snprintf(pending, sizeof(pending), "all (log full)");
        else
            snprintf(pending, sizeof(pending), "%lld",
                     ctl_num(m, "pending_keys"));
        printf("%-20s %-9s %12s\n", ctl_str(m, "name"),
               json_is_true(json_object_get(m, "readable")) ? "serves"
                                                            : "repairing",
               pending);
    }
}

/* `chash ctl rebalance`: the measured load, the proposal, its report. */
void
ctl_print_rebalance(json_t *j)
{
    json_t *m, *r = json_object_get(j, "report");
    size_t i;

    printf("pool %s: the most loaded member gets x%.2f its capacity (target "
           "x%.2f)\n",
           ctl_str(j, "pool"),
           json_number_value(json_object_get(j, "worst_ratio")),
           json_number_value(json_object_get(j, "target")));
    printf("%-24s %10s %12s\n", "MEMBER", "WEIGHT", "PROPOSED");
    json_array_foreach(json_object_get(j, "members"), i, m)
        printf("%-24s %10lld %12lld\n", ctl_str(m, "name"),
               ctl_num(m, "weight"), ctl_num(m, "new_weight"));
    if (json_is_number(json_object_get(j, "predicted_worst_ratio")))
        printf("predicted: the most loaded member at x%.2f its capacity "
               "(%s)\n",
               json_number_value(json_object_get(j, "predicted_worst_ratio")),
               json_is_true(json_object_get(j, "meets_target"))
                   ? "meets the target"
                   : "MISSES the target");
    printf("%s\n", ctl_str(j, "note"));
    if (json_is_object(r)) {
        printf("\n");
        ctl_print_report(
            r, "the proposal, all of it at once:", ctl_str(j, "pool"));
    }
}

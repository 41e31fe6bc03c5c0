/* etcd_status.c -- module etcd: what it says of itself: the link's state
 * as the watcher reports it, GET /api/cluster (every instance, whether
 * they agree, how far the last change got) and the chashd_etcd_* metrics.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <inttypes.h>
#include <string.h>

#include "base/clock.h"
#include "model/fence.h"

/* The watcher's word on the link: up or down, and why. */
void
etcd_on_status(struct etcd_msg *m)
{
    if (m->up && !etcd_ctl.up)
        etcd_ctl.down_since_ms = 0;
    if (!m->up && (etcd_ctl.up || etcd_ctl.down_since_ms == 0)) {
        etcd_ctl.down_since_ms = clock_wall_ms();
        if (strcmp(m->state, "reconnecting") == 0)
            etcd_ctl.reconnects++;
    } else if (!m->up && strcmp(m->state, "reconnecting") == 0) {
        etcd_ctl.reconnects++;
    }
    etcd_ctl.up = m->up;
    snprintf(etcd_ctl.state, sizeof(etcd_ctl.state), "%s", m->state);
    if (m->error[0] != '\0')
        snprintf(etcd_ctl.error, sizeof(etcd_ctl.error), "%s", m->error);
}

/* ---- /api/cluster, metrics ----------------------------------------------- */

static json_t *
null_or_int(uint64_t v)
{
    return v ? json_integer((json_int_t)v) : json_null();
}

/* /api/cluster's "etcd": the link, its counters, the ignored records and
 * the fence. */
static json_t *
cluster_link(void)
{
    json_t *link, *eps, *ign;

    eps = json_array();
    for (size_t i = 0; i < etcd_cfg.nendpoints; i++)
        json_array_append_new(eps, json_string(etcd_cfg.endpoints[i]));
    ign = json_array();
    for (size_t i = 0; i < etcd_ctl.nignored; i++)
        json_array_append_new(ign,
                              json_pack("{s:s,s:I,s:s}", "key",
                                        etcd_ctl.ignored[i].key, "mod_revision",
                                        (json_int_t)etcd_ctl.ignored[i].mod_rev,
                                        "why", etcd_ctl.ignored[i].why));
    link = json_pack(
        "{s:o,s:s,s:b,s:s,s:I,s:o,s:s?,s:I,s:I,s:I,s:I,s:I,s:o}", "endpoints",
        eps, "prefix", etcd_cfg.prefix, "up", etcd_ctl.up, "state",
        etcd_ctl.state, "applied_rev", (json_int_t)etcd_ctl.applied_rev,
        "down_since_ms", null_or_int(etcd_ctl.down_since_ms), "last_error",
        etcd_ctl.error[0] ? etcd_ctl.error : NULL, "lists",
        (json_int_t)etcd_ctl.lists, "reconnects",
        (json_int_t)etcd_ctl.reconnects, "events", (json_int_t)etcd_ctl.events,
        "writes", (json_int_t)etcd_ctl.writes, "ignored_total",
        (json_int_t)etcd_ctl.ignored_total, "ignored", ign);
    /* the fence of copy pools: up now, and how often it was */
    json_object_set_new(
        link, "fenced",
        json_boolean(fence_up(clock_ms()) && etcd_fenced_pools()));
    json_object_set_new(link, "fences",
                        json_integer((json_int_t)etcd_fence_state.fences));
    return link;
}

/* Every live instance record, parsed, into <insts>; their pools' checksums
 * compared in <pools>. *<agree>: whether every pool's agree; *<newest>:
 * the newest change of a pool. How many records. */
static size_t
cluster_instances(json_t *insts, json_t *pools, bool *agree, uint64_t *newest)
{
    const char *id;
    json_t *v;
    size_t n = 0;

    json_object_foreach(etcd_ctl.instances, id, v)
    {
        json_t *rec =
            json_loads(json_string_value(json_array_get(v, 1)), 0, NULL);
        json_t *ps;
        const char *pn;
        json_t *pv;

        if (!json_is_object(rec)) {
            json_decref(rec);
            continue;
        }
        json_object_set_new(rec, "self",
                            json_boolean(strcmp(id, etcd_cfg.instance) == 0));
        n++;
        ps = json_object_get(rec, "pools");
        json_object_foreach(ps, pn, pv)
        {
            json_t *agg = json_object_get(pools, pn);
            const char *sum =
                json_string_value(json_object_get(pv, "checksum"));
            uint64_t cr =
                (uint64_t)etcd_jint(json_object_get(pv, "changed_rev"));

            if (agg == NULL) {
                agg = json_pack("{s:b,s:s,s:i}", "agree", 1, "checksum",
                                sum ? sum : "", "instances", 0);
                json_object_set_new(pools, pn, agg);
            }
            json_object_set_new(
                agg, "instances",
                json_integer(
                    json_integer_value(json_object_get(agg, "instances")) + 1));
            if (sum == NULL || strcmp(sum, json_string_value(json_object_get(
                                               agg, "checksum"))) != 0) {
                json_object_set_new(agg, "agree", json_false());
                *agree = false;
            }
            if (cr > *newest)
                *newest = cr;
        }
        json_array_append_new(insts, rec);
    }
    return n;
}

/* How far the newest change (<newest>, of <n> instance records <insts>)
 * got, and how long it took; null when none. */
static json_t *
cluster_last_change(const json_t *insts, uint64_t newest, size_t n)
{
    uint64_t first_ms = 0, last_ms = 0, since = 0, from;
    size_t reached = 0;

    if (newest == 0)
        return json_null();
    for (size_t i = 0; i < json_array_size(insts); i++) {
        json_t *rec = json_array_get(insts, i), *pv;
        const char *pn;
        bool has =
            (uint64_t)etcd_jint(json_object_get(rec, "applied_rev")) >= newest;

        reached += has;
        json_object_foreach(json_object_get(rec, "pools"), pn, pv)
        {
            uint64_t cr =
                (uint64_t)etcd_jint(json_object_get(pv, "changed_rev"));
            uint64_t cm =
                (uint64_t)etcd_jint(json_object_get(pv, "changed_ms"));
            uint64_t sm = (uint64_t)etcd_jint(json_object_get(pv, "since_ms"));
            if (cr != newest)
                continue;
            if (first_ms == 0 || cm < first_ms)
                first_ms = cm;
            if (cm > last_ms)
                last_ms = cm;
            if (sm > since)
                since = sm;
        }
    }
    from = since && since <= first_ms ? since : first_ms;
    return json_pack("{s:I,s:i,s:i,s:f}", "revision", (json_int_t)newest,
                     "reached", (int)reached, "of", (int)n, "took_ms",
                     last_ms >= from ? (double)(last_ms - from) : 0.0);
}

json_t *
etcd_cluster_json(void)
{
    json_t *r, *insts, *pools, *last;
    bool agree = true;
    uint64_t newest = 0;
    size_t n;

    if (!etcd_shared.running)
        return json_pack("{s:n,s:n,s:[],s:{},s:b,s:n}", "instance", "etcd",
                         "instances", "pools", "agree", 1, "last_change");
    r = json_pack("{s:s,s:o}", "instance", etcd_cfg.instance, "etcd",
                  cluster_link());
    insts = json_array();
    pools = json_object();
    n = cluster_instances(insts, pools, &agree, &newest);
    last = cluster_last_change(insts, newest, n);
    json_object_set_new(r, "instances", insts);
    json_object_set_new(r, "pools", pools);
    json_object_set_new(r, "agree", json_boolean(agree));
    json_object_set_new(r, "last_change", last);
    return r;
}

void
etcd_metrics(FILE *f)
{
    if (!etcd_shared.running)
        return;
    fprintf(f,
            "# HELP chashd_etcd_up 1 while the watch on etcd runs, 0 while "
            "etcd cannot be reached (pools keep their members).\n"
            "# TYPE chashd_etcd_up gauge\nchashd_etcd_up %d\n",
            etcd_ctl.up ? 1 : 0);
    fprintf(f,
            "# HELP chashd_etcd_fenced 1 while pools with migration: copy "
            "answer no key: this instance's lease may have expired, or it "
            "is not registered again yet.\n"
            "# TYPE chashd_etcd_fenced gauge\nchashd_etcd_fenced %d\n"
            "# HELP chashd_etcd_fences_total Times the fence went up.\n"
            "# TYPE chashd_etcd_fences_total counter\n"
            "chashd_etcd_fences_total %" PRIu64 "\n",
            fence_up(clock_ms()) && etcd_fenced_pools() ? 1 : 0,
            etcd_fence_state.fences);
    fprintf(f,
            "# HELP chashd_etcd_applied_revision The etcd revision this "
            "instance has applied.\n"
            "# TYPE chashd_etcd_applied_revision gauge\n"
            "chashd_etcd_applied_revision %" PRIu64 "\n",
            etcd_ctl.applied_rev);
    fprintf(f,
            "# HELP chashd_etcd_lists_total Full lists of the prefix (start, "
            "compaction, wipe).\n"
            "# TYPE chashd_etcd_lists_total counter\n"
            "chashd_etcd_lists_total %" PRIu64 "\n",
            etcd_ctl.lists);
    fprintf(f,
            "# HELP chashd_etcd_reconnects_total Watch streams that broke and "
            "were opened again.\n"
            "# TYPE chashd_etcd_reconnects_total counter\n"
            "chashd_etcd_reconnects_total %" PRIu64 "\n",
            etcd_ctl.reconnects);
    fprintf(f,
            "# HELP chashd_etcd_ignored_records Member records ignored as "
            "malformed (listed in /api/cluster).\n"
            "# TYPE chashd_etcd_ignored_records gauge\n"
            "chashd_etcd_ignored_records %zu\n",
            etcd_ctl.nignored);
}

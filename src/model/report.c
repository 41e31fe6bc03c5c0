/* report.c -- migration reports (chash_ring_diff and chash_ring_flows
 * between the memberships before and after a change) and ring arcs for
 * the dashboard.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "model/report.h"

#include "conf/ring.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
report_hash_bits(int algo)
{
    return algo == CHASH_ALGO_KETAMA || algo == CHASH_ALGO_NGINX ? 32 : 64;
}

/* Build a ring from <m>[0..<n>) (zoned when <zones>, weighing <z>'s zone
 * weights), every ramp forced to 1 when <full>. */
static int
build(const struct chash_config *cfg, const struct chash_member *m,
      const char *const *zones, const struct report_zones *z, size_t n,
      bool full, struct chash_ring **out)
{
    struct chash_member *copy;
    const struct ring_zone_weight *zw = z ? z->zw : NULL;
    size_t nzw = z ? z->nzw : 0;
    int rc;

    if (!full)
        return ring_create(cfg, zones != NULL, m, zones, n, zw, nzw, out);
    copy = calloc(n ? n : 1, sizeof(*copy));
    if (copy == NULL)
        return -CHASH_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        copy[i] = m[i];
        copy[i].ramp = 1.0;
    }
    rc = ring_create(cfg, zones != NULL, copy, zones, n, zw, nzw, out);
    free(copy);
    return rc;
}

static double
share_of(const struct chash_ring *r, const char *name)
{
    for (size_t i = 0; i < chash_ring_members(r); i++)
        if (strcmp(chash_ring_member_name(r, i), name) == 0)
            return chash_ring_share(r, i);
    return 0.0;
}

/*
 * The least any placement must move between two memberships: half the sum
 * over every name of |share after - share before| (the total variation
 * distance of the two share distributions). Each moved key leaves one
 * owner's share and enters another's, so no placement moves less; for a
 * one-member change it equals that member's |share change| when only it
 * gains or loses.
 */
static double
variation(const struct chash_ring *rb, const struct chash_ring *ra)
{
    double sum = 0;

    for (size_t i = 0; i < chash_ring_members(rb); i++) {
        const char *n = chash_ring_member_name(rb, i);

        sum += fabs(share_of(ra, n) - chash_ring_share(rb, i));
    }
    for (size_t i = 0; i < chash_ring_members(ra); i++) {
        const char *n = chash_ring_member_name(ra, i);
        bool before = false;

        for (size_t k = 0; k < chash_ring_members(rb) && !before; k++)
            before = strcmp(chash_ring_member_name(rb, k), n) == 0;
        if (!before)
            sum += chash_ring_share(ra, i);
    }
    return sum / 2;
}

/* Round away float noise so a report reads 0.25, not 0.25000000000000006;
 * 1e-12 is far below what a 2^64 circle's arcs can distinguish in a
 * report. */
static double
tidy(double x)
{
    double r = round(x * 1e12) / 1e12;

    return r == 0.0 ? 0.0 : r;
}

json_t *
report_migration(const struct chash_config *cfg,
                 const struct chash_member *before, size_t nb,
                 const struct chash_member *after, size_t na,
                 const char *changed, char *err, size_t errlen)
{
    return report_migration_zoned(cfg, before, nb, after, na, NULL, changed,
                                  err, errlen);
}

json_t *
report_migration_zoned(const struct chash_config *cfg,
                       const struct chash_member *before, size_t nb,
                       const struct chash_member *after, size_t na,
                       const struct report_zones *z, const char *changed,
                       char *err, size_t errlen)
{
    const char *const *bzones = z ? z->before : NULL;
    const char *const *azones = z ? z->after : NULL;

    struct chash_ring *rb = NULL, *ra = NULL, *ib = NULL, *ia = NULL;
    struct chash_flow *flows = NULL;
    size_t nflows = 0;
    double moved = 0, immediate = 0;
    json_t *rep = NULL, *jf;
    int rc;

    rc = build(cfg, before, bzones, z, nb, true, &rb);
    if (rc != 0) {
        snprintf(err, errlen, "the current membership gives no ring: %s",
                 chash_strerror(rc));
        goto out;
    }
    rc = build(cfg, after, azones, z, na, true, &ra);
    if (rc != 0) {
        snprintf(err, errlen, "the new membership gives no ring: %s",
                 chash_strerror(rc));
        goto out;
    }
    rc = chash_ring_diff(rb, ra, &moved);
    /* Nothing moved, no flows: and chash_ring_flows() would qsort() a
     * NULL array, which UBSan rightly flags (reported to lib/). */
    if (rc == 0 && moved > 0)
        rc = chash_ring_flows(rb, ra, NULL, 0, &nflows);
    if (rc == 0 && nflows > 0) {
        flows = calloc(nflows, sizeof(*flows));
        rc = flows == NULL ? -CHASH_ENOMEM
                           : chash_ring_flows(rb, ra, flows, nflows, &nflows);
    }
    if (rc != 0) {
        snprintf(err, errlen, "migration: %s", chash_strerror(rc));
        goto out;
    }

    rep = json_object();
    json_object_set_new(rep, "moved", json_real(tidy(moved)));
    json_object_set_new(
        rep, "optimal",
        json_real(tidy(changed != NULL
                           ? fabs(share_of(ra, changed) - share_of(rb, changed))
                           : variation(rb, ra))));
    jf = json_array();
    for (size_t i = 0; i < nflows; i++) {
        json_t *f = json_object();

        json_object_set_new(
            f, "from", json_string(chash_ring_member_name(rb, flows[i].from)));
        json_object_set_new(
            f, "to", json_string(chash_ring_member_name(ra, flows[i].to)));
        json_object_set_new(f, "fraction", json_real(tidy(flows[i].fraction)));
        json_array_append_new(jf, f);
    }
    json_object_set_new(rep, "flows", jf);

    /* The immediate step: the rings as the snapshots will hold them, slow
     * start ramps included. Either side may own nothing (every member
     * still ramping from 0): then there is no immediate figure. */
    if (build(cfg, before, bzones, z, nb, false, &ib) == 0 &&
        build(cfg, after, azones, z, na, false, &ia) == 0 &&
        chash_ring_diff(ib, ia, &immediate) == 0)
        json_object_set_new(rep, "immediate", json_real(tidy(immediate)));
    else
        json_object_set_new(rep, "immediate", json_null());
    json_object_set_new(rep, "exact", json_boolean(chash_ring_diff_exact(rb)));
    if (changed != NULL) {
        /* The changed member's share on both sides, at full ramp and as
         * the snapshots hold it (null when a side owns nothing). */
        json_t *sh = json_object();

        json_object_set_new(sh, "before",
                            json_real(tidy(share_of(rb, changed))));
        json_object_set_new(sh, "after",
                            json_real(tidy(share_of(ra, changed))));
        json_object_set_new(sh, "before_now",
                            ib ? json_real(tidy(share_of(ib, changed)))
                               : json_real(0));
        json_object_set_new(sh, "after_now",
                            ia ? json_real(tidy(share_of(ia, changed)))
                               : json_real(0));
        json_object_set_new(rep, "member_share", sh);
    }
out:
    free(flows);
    chash_ring_destroy(rb);
    chash_ring_destroy(ra);
    chash_ring_destroy(ib);
    chash_ring_destroy(ia);
    return rep;
}

int
report_keys_leaving(const struct chash_config *cfg,
                    const struct chash_member *before, size_t nb,
                    const struct report_zones *z, const json_t *rep,
                    const char *const *names, const int64_t *keys, size_t n,
                    double *out)
{
    json_t *flows = json_object_get(rep, "flows"), *f;
    struct chash_ring *rb = NULL;
    double sum = 0;
    int rc = 0;

    *out = 0;
    if (!json_is_array(flows) ||
        build(cfg, before, z ? z->before : NULL, z, nb, true, &rb) != 0)
        return -1;
    for (size_t k = 0; k < n && rc == 0; k++) {
        double share = share_of(rb, names[k]), leaves = 0;
        size_t i;

        if (share <= 0)
            continue;
        if (keys[k] < 0) {
            rc = -1;
            break;
        }
        json_array_foreach(flows, i, f)
        {
            const char *from = json_string_value(json_object_get(f, "from"));

            if (from != NULL && strcmp(from, names[k]) == 0)
                leaves += json_number_value(json_object_get(f, "fraction"));
        }
        /* The flows are tidied to 1e-12: never more than it owned. */
        sum += (double)keys[k] * fmin(1.0, leaves / share);
    }
    chash_ring_destroy(rb);
    *out = sum;
    return rc;
}

json_t *
report_arcs(const struct chash_ring *ring, size_t segments)
{
    struct chash_config cfg;
    json_t *arcs = json_array();
    size_t run_start = 0, owner = 0;
    int bits;

    chash_ring_config(ring, &cfg);
    bits = report_hash_bits(cfg.algo);
    if (segments == 0)
        return arcs;
    for (size_t i = 0; i <= segments; i++) {
        size_t o = 0;

        if (i < segments) {
            /* Position i/segments of the circle, exactly, in 128 bits. */
            unsigned __int128 h = ((unsigned __int128)i << bits) / segments;

            o = chash_ring_lookup(ring, (uint64_t)h);
        }
        if (i == 0) {
            owner = o;
            continue;
        }
        if (i < segments && o == owner)
            continue;
        json_t *a = json_object();

        json_object_set_new(a, "member",
                            json_string(chash_ring_member_name(ring, owner)));
        json_object_set_new(a, "start",
                            json_real((double)run_start / (double)segments));
        json_object_set_new(a, "end", json_real((double)i / (double)segments));
        json_array_append_new(arcs, a);
        run_start = i;
        owner = o;
    }
    return arcs;
}

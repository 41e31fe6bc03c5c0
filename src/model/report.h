/* report.h -- what membership changes are reported with, from rings only:
 * migration reports between two memberships, and a ring's arcs sampled
 * around the circle for the dashboard. No daemon state, no I/O.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_REPORT_H
#define CHASHD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "conf/ring.h"

#include "chash/chash.h"

/*
 * The migration report of one membership change, as the admin API answers
 * it: <before>[0..<nb>) and <after>[0..<na>) are the ring memberships
 * (names, weights, ramps as the snapshots hold them) on either side of the
 * change of member <changed>.
 *
 *   moved      exact fraction of the key space whose owner changes once the
 *              change is complete: both rings built with every ramp at 1
 *   optimal    the least any placement must move for this change: the
 *              absolute change of <changed>'s share at full ramp (its share
 *              when added or brought up, its former share when removed,
 *              drained or put in maintenance, |new - old| for a reweight);
 *              with <changed> NULL (a reload changing several members), the
 *              total variation distance: half the sum over all names of
 *              |share after - share before|
 *   flows      [{"from","to","fraction"}], largest first, at full ramp
 *   immediate  the fraction that moves at once with the ramps as given
 *              (a slowly starting member enters with a ramp below 1), or
 *              null when a side owns nothing
 *   exact      whether the algorithm's diff is exact (else measured on 2^20
 *              evenly spaced hashes)
 *   member_share  with <changed>: its share {before, after} at full ramp
 *              and {before_now, after_now} with the ramps as given
 *
 * Returns a new JSON object, or NULL with a message in <err> when a ring
 * cannot be built (the message names libchash's reason).
 */
json_t *report_migration(const struct chash_config *cfg,
                         const struct chash_member *before, size_t nb,
                         const struct chash_member *after, size_t na,
                         const char *changed, char *err, size_t errlen);
/* The same for a pool with zones (zone_policy: hierarchical): member i of
 * <before> in zone z->before[i], of <after> in z->after[i], the zones of
 * z->zw weighing what they say; <z> NULL: flat rings. */
struct report_zones {
    const char *const *before, *const *after;
    const struct ring_zone_weight *zw;
    size_t nzw;
};
json_t *report_migration_zoned(const struct chash_config *cfg,
                               const struct chash_member *before, size_t nb,
                               const struct chash_member *after, size_t na,
                               const struct report_zones *z,
                               const char *changed, char *err, size_t errlen);

/*
 * How many of the keys the members hold change owner in a change from
 * <before>[0..<nb>) (zones as for report_migration_zoned; <z> NULL: flat)
 * whose migration report is <rep>: member <names>[i] holds <keys>[i] keys
 * (-1: not known), and each of them leaves it with the probability (the
 * member's flows out in <rep>) / (its share before), both exact fractions
 * of the hash space at full ramp. So a member removed gives all its keys
 * and a joining one none. A member that owns nothing before (drained,
 * weight 0) is skipped: its keys were out of reach already. For a member
 * that leaves the ring the figure is its whole count (a copy an earlier
 * change left there, out of reach already, counts too); for one that
 * gives part of its arcs an estimate (its keys are taken as spread over
 * its arcs as hashes spread keys: evenly). 0 with the count in *<out>; -1 when
 * a member that owns keys has an unknown count, or the ring cannot be built.
 */
int report_keys_leaving(const struct chash_config *cfg,
                        const struct chash_member *before, size_t nb,
                        const struct report_zones *z, const json_t *rep,
                        const char *const *names, const int64_t *keys, size_t n,
                        double *out);

/*
 * <ring>'s owners sampled at <segments> evenly spaced positions of the
 * hash space (2^64, or 2^32 for the 32-bit continua), runs of one owner
 * merged into arcs: [{"member", "start", "end"}] with start/end as
 * fractions of the circle in [0,1]. Works for every algorithm, since it
 * only calls chash_ring_lookup().
 */
json_t *report_arcs(const struct chash_ring *ring, size_t segments);

/* Bits of the hash space chash_ring_hash() spans for <algo>. */
int report_hash_bits(int algo);

#endif /* CHASHD_REPORT_H */

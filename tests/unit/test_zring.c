/* test_zring.c -- zone-then-member placement (lib/zring.c): the
 * properties of the flat ring proved again with zones -- history-free
 * (any array order, the same placement), exact shares (summing to 1,
 * matching counted keys), minimal movement at each level (a member
 * change moves only its keys, within its zone, when zone weights are
 * fixed; a lost zone moves only that zone's keys), exact diffs against
 * counted keys, replicas in distinct zones (N=3 over 3 zones keeps one
 * replica of every key when a zone is lost) -- golden vectors, and the
 * refusals.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chash/chash.h"

#define KEYS 100000

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t
next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* 12 members in 3 zones (a: 5, b: 4, c: 3), weights 1..3. */
static char names[12][16];
static char zones[12][8];
static struct chash_zmember base[12];

static void
fill(void)
{
    for (int i = 0; i < 12; i++) {
        snprintf(names[i], sizeof(names[i]), "m%02d", i);
        snprintf(zones[i], sizeof(zones[i]), "%s",
                 i < 5   ? "a"
                 : i < 9 ? "b"
                         : "c");
        base[i].name = names[i];
        base[i].zone = zones[i];
        base[i].weight = 1 + (uint32_t)(i % 3);
        base[i].ramp = 1.0;
    }
}

static struct chash_zring *
make(int algo, const struct chash_zmember *m, size_t n,
     const struct chash_zone_weight *w, size_t nw)
{
    struct chash_config cfg = {.algo = algo};
    struct chash_zring *z = NULL;

    assert_int_equal(chash_zring_create(&cfg, m, n, w, nw, &z), 0);
    return z;
}

/* The diff (and flows) between two zoned placements, through their rings
 * (chash_ring_create_zoned): member indexes are those of <a> and <b>. */
static double
zdiff(int algo, const struct chash_zmember *a, size_t na,
      const struct chash_zone_weight *wa, size_t nwa,
      const struct chash_zmember *b, size_t nb,
      const struct chash_zone_weight *wb, size_t nwb, struct chash_flow *fl,
      size_t cap, size_t *nfl)
{
    struct chash_config cfg = {.algo = algo};
    struct chash_ring *ra = NULL, *rb = NULL;
    double moved = -1;

    assert_int_equal(chash_ring_create_zoned(&cfg, a, na, wa, nwa, &ra), 0);
    assert_int_equal(chash_ring_create_zoned(&cfg, b, nb, wb, nwb, &rb), 0);
    assert_int_equal(chash_ring_diff(ra, rb, &moved), 0);
    if (fl != NULL)
        assert_int_equal(chash_ring_flows(ra, rb, fl, cap, nfl), 0);
    chash_ring_destroy(ra);
    chash_ring_destroy(rb);
    return moved;
}

static const char *
owner(const struct chash_zring *z, uint64_t h)
{
    return chash_zring_member_name(z, chash_zring_lookup(z, h));
}

static void
test_history_free(void **state)
{
    struct chash_zmember shuf[12];
    struct chash_zring *a, *b;

    (void)state;
    fill();
    memcpy(shuf, base, sizeof(shuf));
    for (int i = 11; i > 0; i--) {
        int j = (int)(next() % (uint64_t)(i + 1));
        struct chash_zmember t = shuf[i];
        shuf[i] = shuf[j];
        shuf[j] = t;
    }
    a = make(CHASH_ALGO_RING, base, 12, NULL, 0);
    b = make(CHASH_ALGO_RING, shuf, 12, NULL, 0);
    assert_true(chash_zring_checksum(a) == chash_zring_checksum(b));
    for (int k = 0; k < KEYS; k++) {
        uint64_t h = next();
        assert_string_equal(owner(a, h), owner(b, h));
    }
    chash_zring_destroy(a);
    chash_zring_destroy(b);
}

/* Exact shares sum to 1, a zone's share is its members', and counted
 * keys agree with them; zones take shares by their weights. */
static void
test_shares(void **state)
{
    int algos[] = {CHASH_ALGO_RING, CHASH_ALGO_KETAMA, CHASH_ALGO_MAGLEV,
                   CHASH_ALGO_RENDEZVOUS};

    (void)state;
    fill();
    for (size_t a = 0; a < 4; a++) {
        struct chash_zring *z = make(algos[a], base, 12, NULL, 0);
        unsigned count[12] = {0};
        double sum = 0, zsum[3] = {0, 0, 0};

        for (int k = 0; k < KEYS; k++)
            count[chash_zring_lookup(z, next())]++;
        for (size_t i = 0; i < 12; i++) {
            double s = chash_zring_share(z, i);
            double sd = sqrt(s * (1 - s) / KEYS);

            sum += s;
            zsum[chash_zring_zone_of(z, i)] += s;
            /* within 5 standard deviations of the share */
            assert_true(fabs((double)count[i] / KEYS - s) < 5 * sd + 1e-9);
        }
        assert_true(fabs(sum - 1.0) < 1e-9);
        assert_int_equal(chash_zring_zones(z), 3);
        for (size_t zi = 0; zi < 3; zi++)
            assert_true(fabs(chash_zring_zone_share(z, zi) - zsum[zi]) < 1e-9);
        assert_int_equal(chash_zring_diff_exact(z),
                         algos[a] == CHASH_ALGO_RING ||
                             algos[a] == CHASH_ALGO_KETAMA);
        chash_zring_destroy(z);
    }
}

/* With fixed zone weights, removing a member moves exactly its keys, and
 * only to members of its own zone; the diff says so exactly. */
static void
test_member_change_stays_in_zone(void **state)
{
    struct chash_zone_weight w[3] = {{"a", 100}, {"b", 100}, {"c", 100}};
    struct chash_zring *before, *after;
    struct chash_flow fl[64];
    size_t nfl = 0;
    double moved, lost, counted = 0;

    (void)state;
    fill();
    before = make(CHASH_ALGO_RING, base, 12, w, 3);
    /* m06 (zone b) leaves */
    struct chash_zmember rest[11];
    size_t k = 0;
    for (size_t i = 0; i < 12; i++)
        if (i != 6)
            rest[k++] = base[i];
    after = make(CHASH_ALGO_RING, rest, 11, w, 3);
    lost = chash_zring_share(before, 6);
    moved =
        zdiff(CHASH_ALGO_RING, base, 12, w, 3, rest, 11, w, 3, fl, 64, &nfl);
    assert_true(fabs(moved - lost) < 1e-12);
    assert_true(nfl > 0);
    for (size_t f = 0; f < nfl; f++) {
        assert_int_equal(fl[f].from, 6);
        assert_string_equal(
            chash_zring_zone_name(after, chash_zring_zone_of(after, fl[f].to)),
            "b");
    }
    for (int key = 0; key < KEYS; key++) {
        uint64_t h = next();
        const char *o = owner(before, h), *n = owner(after, h);

        if (strcmp(o, n) != 0) {
            counted++;
            assert_string_equal(o, "m06");
        }
    }
    assert_true(fabs(counted / KEYS - lost) < 5 * sqrt(lost / KEYS));
    chash_zring_destroy(before);
    chash_zring_destroy(after);
}

/* With zone weights the sum of their members', a member change also moves
 * the keys the zone ring moves -- and nothing more: the diff equals the
 * member's keys plus the zone ring's own movement at most. */
static void
test_member_change_default_weights(void **state)
{
    struct chash_zring *before, *after;
    struct chash_zmember rest[11];
    double moved;
    size_t k = 0;

    (void)state;
    fill();
    before = make(CHASH_ALGO_RING, base, 12, NULL, 0);
    for (size_t i = 0; i < 12; i++)
        if (i != 6)
            rest[k++] = base[i];
    after = make(CHASH_ALGO_RING, rest, 11, NULL, 0);
    moved = zdiff(CHASH_ALGO_RING, base, 12, NULL, 0, rest, 11, NULL, 0, NULL,
                  0, NULL);
    /* zone b lost 2 of its 9 weight units (m06 has weight 1 + 6 % 3 = 1:
     * 1 of 9): its zone share drops by about that, and m06's keys go */
    assert_true(moved >= chash_zring_share(before, 6) - 1e-12);
    assert_true(moved <= chash_zring_share(before, 6) +
                             fabs(chash_zring_zone_share(before, 1) -
                                  chash_zring_zone_share(after, 1)) *
                                 1.0001 +
                             1e-12);
    chash_zring_destroy(before);
    chash_zring_destroy(after);
}

/* A whole zone lost: only its keys move; N=3 over 3 zones puts each
 * key's replicas in 3 distinct zones, and after the loss every key keeps
 * the two replicas it had in the other zones. */
static void
test_zone_loss(void **state)
{
    struct chash_zring *before, *after;
    struct chash_zmember rest[12];
    size_t k = 0;
    double moved;

    (void)state;
    fill();
    before = make(CHASH_ALGO_RING, base, 12, NULL, 0);
    for (size_t i = 0; i < 12; i++)
        if (strcmp(base[i].zone, "c") != 0)
            rest[k++] = base[i];
    after = make(CHASH_ALGO_RING, rest, k, NULL, 0);
    moved = zdiff(CHASH_ALGO_RING, base, 12, NULL, 0, rest, k, NULL, 0, NULL, 0,
                  NULL);
    assert_true(fabs(moved - chash_zring_zone_share(before, 2)) < 1e-12);
    for (int n = 0; n < 20000; n++) {
        uint64_t h = next();
        size_t r[3], r2[3];
        size_t got = chash_zring_lookup_n(before, h, r, 3);
        size_t kept = 0;

        assert_int_equal(got, 3);
        assert_true(chash_zring_zone_of(before, r[0]) !=
                        chash_zring_zone_of(before, r[1]) &&
                    chash_zring_zone_of(before, r[0]) !=
                        chash_zring_zone_of(before, r[2]) &&
                    chash_zring_zone_of(before, r[1]) !=
                        chash_zring_zone_of(before, r[2]));
        assert_int_equal(r[0], chash_zring_lookup(before, h));
        assert_int_equal(chash_zring_lookup_n(after, h, r2, 3), 3);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                kept += strcmp(chash_zring_member_name(before, r[i]),
                               chash_zring_member_name(after, r2[j])) == 0;
        assert_true(kept >= 2);
        /* a key whose primary was not in zone c keeps its primary */
        if (strcmp(chash_zring_zone_name(before,
                                         chash_zring_zone_of(before, r[0])),
                   "c") != 0)
            assert_string_equal(chash_zring_member_name(before, r[0]),
                                chash_zring_member_name(after, r2[0]));
    }
    chash_zring_destroy(before);
    chash_zring_destroy(after);
}

/* More replicas than zones: after one per zone, distinct members. */
static void
test_more_replicas_than_zones(void **state)
{
    struct chash_zring *z;

    (void)state;
    fill();
    z = make(CHASH_ALGO_KETAMA, base, 12, NULL, 0);
    for (int n = 0; n < 2000; n++) {
        size_t r[5];
        size_t got = chash_zring_lookup_n(z, next(), r, 5);

        assert_int_equal(got, 5);
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < 5; j++)
                assert_true(r[i] != r[j]);
        /* the first three in three zones */
        assert_true(
            chash_zring_zone_of(z, r[0]) != chash_zring_zone_of(z, r[1]) &&
            chash_zring_zone_of(z, r[1]) != chash_zring_zone_of(z, r[2]) &&
            chash_zring_zone_of(z, r[0]) != chash_zring_zone_of(z, r[2]));
    }
    chash_zring_destroy(z);
}

/* Frozen placement: these owners are doc/internals/placement.md's
 * golden vectors for zones. */
static void
test_golden(void **state)
{
    static const char *const want[][2] = {
        {"user:1", "m08"},      {"user:2", "m09"}, {"user:3", "m05"},
        {"session:abc", "m08"}, {"", "m01"},
    };
    struct chash_zring *z;

    (void)state;
    fill();
    z = make(CHASH_ALGO_RING, base, 12, NULL, 0);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        uint64_t h = chash_zring_hash(z, want[i][0], strlen(want[i][0]));
        assert_string_equal(owner(z, h), want[i][1]);
    }
    chash_zring_destroy(z);
}

/* The zoned placement as a ring: every ring function agrees with the
 * zring's, for a continuum algorithm (flattened) and a sampled one; a
 * diff against a flat ring of the same algorithm and hash matches the
 * keys counted. */
static void
test_as_a_ring(void **state)
{
    int algos[] = {CHASH_ALGO_RING, CHASH_ALGO_MAGLEV};

    (void)state;
    fill();
    for (size_t a = 0; a < 2; a++) {
        struct chash_config cfg = {.algo = algos[a]};
        struct chash_zring *z = make(algos[a], base, 12, NULL, 0);
        struct chash_ring *r = NULL, *r2 = NULL, *flat = NULL;
        struct chash_member fm[12];
        struct chash_zmember rest[11];
        double moved_r, moved_z, moved_flat, counted = 0;
        uint64_t hs[256];
        size_t outs[256];
        size_t k = 0;

        assert_int_equal(chash_ring_create_zoned(&cfg, base, 12, NULL, 0, &r),
                         0);
        assert_true(chash_ring_checksum(r) == chash_zring_checksum(z));
        assert_int_equal(chash_ring_members(r), 12);
        assert_int_equal(chash_ring_diff_exact(r), algos[a] == CHASH_ALGO_RING);
        assert_true(chash_ring_hash(r, "k", 1) == chash_zring_hash(z, "k", 1));
        for (size_t i = 0; i < 12; i++) {
            assert_string_equal(chash_ring_member_name(r, i), names[i]);
            assert_true(chash_ring_share(r, i) == chash_zring_share(z, i));
        }
        for (int i = 0; i < 20000; i++) {
            uint64_t h = next();
            size_t x[4], y[4];

            assert_int_equal(chash_ring_lookup(r, h), chash_zring_lookup(z, h));
            assert_int_equal(chash_ring_lookup_n(r, h, x, 4), 4);
            assert_int_equal(chash_zring_lookup_n(z, h, y, 4), 4);
            assert_memory_equal(x, y, sizeof(x));
        }
        for (int i = 0; i < 256; i++)
            hs[i] = next();
        chash_ring_lookup_batch(r, hs, outs, 256);
        for (int i = 0; i < 256; i++)
            assert_int_equal(outs[i], chash_ring_lookup(r, hs[i]));
        /* a member leaves: the ring diff is the zring diff */
        for (size_t i = 0; i < 12; i++)
            if (i != 3)
                rest[k++] = base[i];
        assert_int_equal(chash_ring_create_zoned(&cfg, rest, 11, NULL, 0, &r2),
                         0);
        {
            /* counted on keys: the diff says what moves */
            struct chash_zring *z2 = make(algos[a], rest, 11, NULL, 0);
            double c2 = 0;

            assert_int_equal(chash_ring_diff(r, r2, &moved_r), 0);
            for (int i = 0; i < KEYS; i++) {
                uint64_t h = next();
                c2 += strcmp(owner(z, h), owner(z2, h)) != 0;
            }
            moved_z = c2 / KEYS;
            assert_true(fabs(moved_r - moved_z) <
                        5 * sqrt(moved_r / KEYS) + 0.002);
            chash_zring_destroy(z2);
        }
        /* against a flat ring of the same members */
        for (size_t i = 0; i < 12; i++) {
            fm[i].name = base[i].name;
            fm[i].weight = base[i].weight;
            fm[i].ramp = 1.0;
        }
        if (algos[a] == CHASH_ALGO_MAGLEV)
            cfg.table_size = 0;
        assert_int_equal(chash_ring_create(&cfg, fm, 12, &flat), 0);
        assert_int_equal(chash_ring_diff(flat, r, &moved_flat), 0);
        for (int i = 0; i < KEYS; i++) {
            uint64_t h = next();
            counted +=
                strcmp(chash_ring_member_name(flat, chash_ring_lookup(flat, h)),
                       chash_ring_member_name(r, chash_ring_lookup(r, h))) != 0;
        }
        assert_true(fabs(counted / KEYS - moved_flat) <
                    5 * sqrt(moved_flat / KEYS) + 0.002);
        chash_ring_destroy(flat);
        chash_ring_destroy(r);
        chash_ring_destroy(r2);
        chash_zring_destroy(z);
    }
}

static void
test_refusals(void **state)
{
    struct chash_config jump = {.algo = CHASH_ALGO_JUMP};
    struct chash_zmember m[2] = {{"x", "a", 1, 1.0}, {"x", "b", 1, 1.0}};
    struct chash_zmember e[1] = {{"y", "", 1, 1.0}};
    struct chash_zone_weight w[1] = {{"nowhere", 5}};
    struct chash_zring *z = (struct chash_zring *)1;

    (void)state;
    assert_int_equal(chash_zring_create(NULL, m, 2, NULL, 0, &z),
                     -CHASH_EDUPNAME);
    assert_null(z);
    assert_int_equal(chash_zring_create(NULL, e, 1, NULL, 0, &z),
                     -CHASH_EINVAL);
    assert_int_equal(chash_zring_create(&jump, m, 1, NULL, 0, &z),
                     -CHASH_ENOTSUP);
    assert_int_equal(chash_zring_create(NULL, m, 1, w, 1, &z), -CHASH_EINVAL);
    assert_int_equal(chash_zring_create(NULL, m, 0, NULL, 0, &z),
                     -CHASH_EEMPTY);
    assert_int_equal(chash_zring_create(NULL, NULL, 1, NULL, 0, &z),
                     -CHASH_EINVAL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_history_free),
        cmocka_unit_test(test_shares),
        cmocka_unit_test(test_member_change_stays_in_zone),
        cmocka_unit_test(test_member_change_default_weights),
        cmocka_unit_test(test_zone_loss),
        cmocka_unit_test(test_more_replicas_than_zones),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_as_a_ring),
        cmocka_unit_test(test_refusals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_ring.c -- proofs of the ring's contract: frozen placement (golden
 * vectors and a brute-force reference model), history independence,
 * minimal movement, exact share and diff, distinct replicas, bounded
 * loads, monotone ramp, and every error path.
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
#include <xxhash.h>

#include "chash/chash.h"

#define NKEYS 100000

/* A small deterministic generator so every run tests the same cases. */
static uint64_t rng_state = 0x853c49e6748fea9bULL;

static uint64_t
rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A random membership: n members named "m-<random>", weights 1..4. */
struct team {
    struct chash_member m[64];
    char names[64][24];
    size_t n;
};

static void
team_make(struct team *t, size_t n)
{
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(t->names[i], sizeof(t->names[i]), "m-%llx",
                 (unsigned long long)(rnd() & 0xffffffffffULL));
        t->m[i].name = t->names[i];
        t->m[i].weight = 1 + (uint32_t)(rnd() % 4);
        t->m[i].ramp = 1.0;
    }
}

static struct chash_ring *
build(const struct chash_config *cfg, const struct chash_member *m, size_t n)
{
    struct chash_ring *r = NULL;
    int rc = chash_ring_create(cfg, m, n, &r);
    if (rc != 0)
        fail_msg("chash_ring_create: %s", chash_strerror(rc));
    return r;
}

static const char *
owner(const struct chash_ring *r, uint64_t h)
{
    return chash_ring_member_name(r, chash_ring_lookup(r, h));
}

/* Where the reference model puts point j: XXH3-64 of the name's bytes and
 * then j as 4 little-endian bytes, written out independently of lib/. */
static uint64_t
model_pos(const char *name, uint32_t j)
{
    unsigned char buf[300];
    size_t len = strlen(name);
    memcpy(buf, name, len);
    for (int b = 0; b < 4; b++)
        buf[len + b] = (unsigned char)(j >> (8 * b));
    return XXH3_64bits(buf, len + 4);
}

/* Golden vectors: point j of member m sits at XXH3-64(name || LE32(j)). These
 * constants freeze placement (doc/internals/placement.md); a change that
 * moves them moves every key of every user. */
static void
test_golden_placement(void **state)
{
    struct chash_member m[3] = {
        {"Server-A", 1, 1.0}, {"Server-B", 1, 1.0}, {"Server-C", 1, 1.0}};
    struct chash_config cfg = {.points_per_weight = 100};
    static const struct {
        const char *key;
        uint64_t hash;
        const char *owner;
    } v[] = {
        {"data_key_0", 0x9ab699a96797d277ULL, "Server-B"},
        {"data_key_1", 0xd3951f6c43992d30ULL, "Server-B"},
        {"data_key_2", 0xabdb1e0e8366d345ULL, "Server-B"},
        {"data_key_3", 0xc81058250aefab9cULL, "Server-A"},
        {"data_key_4", 0xc93963100e3030d0ULL, "Server-A"},
        {"data_key_5", 0x47967ff160c25d47ULL, "Server-C"},
    };
    (void)state;
    assert_int_equal(model_pos("Server-A", 0), 0x666f8d04ceb6d84aULL);
    assert_int_equal(model_pos("Server-A", 1), 0x131887d9696d8a65ULL);
    assert_int_equal(model_pos("Server-A", 2), 0x84107ffcd9bf6bdaULL);
    struct chash_ring *r = build(&cfg, m, 3);
    assert_int_equal(chash_ring_points(r), 300);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint64_t h = chash_ring_hash(r, v[i].key, strlen(v[i].key));
        assert_int_equal(h, v[i].hash);
        assert_string_equal(owner(r, h), v[i].owner);
    }
    /* A key exactly on a point belongs to that point's member; one past
     * it belongs to the next point clockwise. */
    assert_string_equal(owner(r, 0x666f8d04ceb6d84aULL), "Server-A");
    assert_int_equal(chash_ring_checksum(r), 0xba30fa9a4216af31ULL);
    chash_ring_destroy(r);
}

/* The reference model, written the slow obvious way: the owner of h is the
 * member of the smallest point >= h, else of the smallest point overall.
 * Ties go to the smaller name. It shares no code with lib/. */
static const char *
model_owner(const struct chash_member *m, size_t n, uint32_t ppw, uint64_t h)
{
    const char *best = NULL, *lowest = NULL;
    uint64_t best_pos = 0, low_pos = 0;

    for (size_t i = 0; i < n; i++) {
        size_t pts = (size_t)floor(m[i].ramp * m[i].weight * ppw);
        for (size_t j = 0; j < pts; j++) {
            uint64_t p = model_pos(m[i].name, (uint32_t)j);
            if (p >= h && (best == NULL || p < best_pos ||
                           (p == best_pos && strcmp(m[i].name, best) < 0))) {
                best = m[i].name;
                best_pos = p;
            }
            if (lowest == NULL || p < low_pos ||
                (p == low_pos && strcmp(m[i].name, lowest) < 0)) {
                lowest = m[i].name;
                low_pos = p;
            }
        }
    }
    return best ? best : lowest;
}

static void
test_reference_model(void **state)
{
    struct team t;
    struct chash_config cfg = {.points_per_weight = 20};
    (void)state;
    for (int round = 0; round < 10; round++) {
        team_make(&t, 2 + rnd() % 12);
        t.m[0].ramp = 0.5;
        struct chash_ring *r = build(&cfg, t.m, t.n);
        for (int k = 0; k < 2000; k++) {
            uint64_t h = rnd();
            assert_string_equal(owner(r, h),
                                model_owner(t.m, t.n, 20, h));
        }
        /* the extremes of the circle */
        assert_string_equal(owner(r, 0), model_owner(t.m, t.n, 20, 0));
        assert_string_equal(owner(r, UINT64_MAX),
                            model_owner(t.m, t.n, 20, UINT64_MAX));
        chash_ring_destroy(r);
    }
}

/* Same membership, any array order: bit-identical placement (checksum)
 * and identical owners by name. */
static void
test_history_independence(void **state)
{
    struct team t, s;
    (void)state;
    for (int round = 0; round < 50; round++) {
        team_make(&t, 1 + rnd() % 40);
        t.m[rnd() % t.n].ramp = (double)(rnd() % 100) / 100.0;
        s = t;
        for (size_t i = s.n; i > 1; i--) { /* Fisher-Yates, names follow */
            size_t j = rnd() % i;
            struct chash_member tmp = s.m[i - 1];
            s.m[i - 1] = s.m[j];
            s.m[j] = tmp;
        }
        for (size_t i = 0; i < s.n; i++) /* point into s's own storage */
            s.m[i].name = s.names[(size_t)(s.m[i].name - t.names[0]) / 24];
        struct chash_ring *a = build(NULL, t.m, t.n);
        struct chash_ring *b = build(NULL, s.m, s.n);
        assert_int_equal(chash_ring_checksum(a), chash_ring_checksum(b));
        for (int k = 0; k < 2000; k++) {
            uint64_t h = rnd();
            assert_string_equal(owner(a, h), owner(b, h));
        }
        double moved = 1;
        assert_int_equal(chash_ring_diff(a, b, &moved), 0);
        assert_true(moved == 0.0);
        chash_ring_destroy(a);
        chash_ring_destroy(b);
    }
}

/* Measured moved fraction over NKEYS random hashes, and the number of keys
 * that moved between two members other than <only> (which must be 0). */
static double
measure(const struct chash_ring *a, const struct chash_ring *b,
        const char *only, size_t *bad)
{
    size_t moved = 0;
    *bad = 0;
    for (size_t k = 0; k < NKEYS; k++) {
        uint64_t h = rnd();
        const char *x = owner(a, h), *y = owner(b, h);
        if (strcmp(x, y) == 0)
            continue;
        moved++;
        if (strcmp(x, only) != 0 && strcmp(y, only) != 0)
            (*bad)++;
    }
    return (double)moved / NKEYS;
}

/* 4.5 standard deviations of a binomial proportion over NKEYS keys. */
static double
tol(double p)
{
    return 4.5 * sqrt(p * (1 - p) / NKEYS) + 1e-9;
}

static void
test_minimal_movement(void **state)
{
    struct team t;
    size_t bad;
    double exact, meas;
    (void)state;
    for (int round = 0; round < 8; round++) {
        team_make(&t, 3 + rnd() % 30);
        /* add the last member */
        struct chash_ring *without = build(NULL, t.m, t.n - 1);
        struct chash_ring *with = build(NULL, t.m, t.n);
        const char *added = t.m[t.n - 1].name;
        meas = measure(without, with, added, &bad);
        assert_int_equal(bad, 0);
        assert_int_equal(chash_ring_diff(without, with, &exact), 0);
        assert_true(fabs(exact - chash_ring_share(with, t.n - 1)) < 1e-12);
        assert_true(fabs(meas - exact) < tol(exact));
        /* remove it again: only its keys move, exactly its share */
        meas = measure(with, without, added, &bad);
        assert_int_equal(bad, 0);
        assert_int_equal(chash_ring_diff(with, without, &exact), 0);
        assert_true(fabs(exact - chash_ring_share(with, t.n - 1)) < 1e-12);
        assert_true(fabs(meas - exact) < tol(exact));
        /* reweight member 0: keys move only to or from it */
        struct team u = t;
        for (size_t i = 0; i < u.n; i++)
            u.m[i].name = u.names[i];
        u.m[0].weight = t.m[0].weight + 1 + (uint32_t)(rnd() % 3);
        struct chash_ring *heavier = build(NULL, u.m, u.n);
        meas = measure(with, heavier, t.m[0].name, &bad);
        assert_int_equal(bad, 0);
        assert_int_equal(chash_ring_diff(with, heavier, &exact), 0);
        assert_true(fabs(exact - (chash_ring_share(heavier, 0) -
                                  chash_ring_share(with, 0))) < 1e-12);
        assert_true(fabs(meas - exact) < tol(exact));
        chash_ring_destroy(without);
        chash_ring_destroy(with);
        chash_ring_destroy(heavier);
    }
}

/* Shares are exact arcs: they sum to 1, and for keys they predict the
 * measured fraction within sampling error. */
static void
test_shares(void **state)
{
    struct team t;
    (void)state;
    for (int round = 0; round < 10; round++) {
        team_make(&t, 1 + rnd() % 50);
        struct chash_ring *r = build(NULL, t.m, t.n);
        double sum = 0;
        size_t count[64] = {0};
        for (size_t i = 0; i < t.n; i++)
            sum += chash_ring_share(r, i);
        assert_true(fabs(sum - 1.0) < 1e-9);
        for (size_t k = 0; k < NKEYS; k++)
            count[chash_ring_lookup(r, rnd())]++;
        for (size_t i = 0; i < t.n; i++) {
            double s = chash_ring_share(r, i);
            assert_true(fabs((double)count[i] / NKEYS - s) < tol(s));
        }
        assert_true(chash_ring_share(r, t.n) == 0.0);
        chash_ring_destroy(r);
    }
    /* one member owns the whole circle */
    struct chash_member one = {"solo", 1, 1.0};
    struct chash_ring *r = build(NULL, &one, 1);
    assert_true(chash_ring_share(r, 0) == 1.0);
    chash_ring_destroy(r);
}

/* Flows of a removal all come from the removed member and sum to its
 * share; flows of an add all go to the added member. */
static void
test_flows(void **state)
{
    struct team t;
    struct chash_flow f[64];
    size_t nf = 0;
    (void)state;
    team_make(&t, 10);
    struct chash_ring *a = build(NULL, t.m, t.n);
    struct chash_ring *b = build(NULL, t.m + 1, t.n - 1);
    assert_int_equal(chash_ring_flows(a, b, f, 64, &nf), 0);
    assert_true(nf > 1 && nf <= 9);
    double sum = 0;
    for (size_t k = 0; k < nf; k++) {
        assert_int_equal(f[k].from, 0);
        sum += f[k].fraction;
        if (k > 0)
            assert_true(f[k - 1].fraction >= f[k].fraction);
    }
    assert_true(fabs(sum - chash_ring_share(a, 0)) < 1e-12);
    assert_int_equal(chash_ring_flows(b, a, f, 2, &nf), 0);
    assert_true(nf > 2); /* more exist than the two written */
    assert_int_equal(f[0].to, 0);
    assert_int_equal(chash_ring_flows(b, a, NULL, 1, &nf), -CHASH_EINVAL);
    /* nothing moves between a ring and itself: no flows, no crash */
    assert_int_equal(chash_ring_flows(a, a, NULL, 0, &nf), 0);
    assert_int_equal(nf, 0);
    chash_ring_destroy(a);
    chash_ring_destroy(b);
}

/* lookup_n: distinct members in preference order, first == lookup, as
 * many as asked or as own something. */
static void
test_lookup_n(void **state)
{
    struct team t;
    size_t out[70];
    (void)state;
    for (int round = 0; round < 10; round++) {
        team_make(&t, 1 + rnd() % 20);
        t.m[0].weight = 0; /* present, owns nothing: never returned */
        if (t.n == 1)
            t.m[0].weight = 1;
        struct chash_ring *r = build(NULL, t.m, t.n);
        size_t owners = t.n == 1 ? 1 : t.n - 1;
        for (int k = 0; k < 2000; k++) {
            uint64_t h = rnd();
            size_t want = 1 + rnd() % 25;
            size_t got = chash_ring_lookup_n(r, h, out, want);
            assert_int_equal(got, want < owners ? want : owners);
            assert_int_equal(out[0], chash_ring_lookup(r, h));
            for (size_t i = 0; i < got; i++) {
                assert_true(out[i] < t.n);
                assert_true(chash_ring_member_points(r, out[i]) > 0);
                for (size_t j = 0; j < i; j++)
                    assert_int_not_equal(out[i], out[j]);
            }
        }
        assert_int_equal(chash_ring_lookup_n(r, 1, out, 0), 0);
        chash_ring_destroy(r);
    }
}

static double
cap_of(const struct chash_ring *r, size_t m, uint64_t total, double factor)
{
    return ceil(factor * ((double)total + 1) *
                (double)chash_ring_member_points(r, m) /
                (double)chash_ring_points(r));
}

/* Bounded loads: place keys one by one, each with the live loads; no
 * member ever goes above its cap, even when every key hashes to the same
 * spot (the adversary's best move) or loads start skewed. */
static void
test_bounded(void **state)
{
    struct team t;
    uint64_t load[64];
    (void)state;
    for (int round = 0; round < 12; round++) {
        team_make(&t, 2 + rnd() % 30);
        struct chash_ring *r = build(NULL, t.m, t.n);
        double factor = 1.0 + (double)(rnd() % 100) / 100.0;
        uint64_t total = 0, same = rnd();
        memset(load, 0, sizeof(load));
        for (int k = 0; k < 20000; k++) {
            uint64_t h = (round % 2) ? same : rnd();
            size_t m = chash_ring_lookup_bounded(r, h, load, total, factor);
            assert_true((double)load[m] + 1 <= cap_of(r, m, total, factor));
            load[m]++;
            total++;
            /* connections also close: drop a random one sometimes */
            if (rnd() % 3 == 0) {
                size_t d = rnd() % t.n;
                if (load[d] > 0) {
                    load[d]--;
                    total--;
                }
            }
        }
        /* With no load the first choice always wins. */
        memset(load, 0, sizeof(load));
        for (int k = 0; k < 100; k++) {
            uint64_t h = rnd();
            assert_int_equal(chash_ring_lookup_bounded(r, h, load, 0, factor),
                             chash_ring_lookup(r, h));
        }
        chash_ring_destroy(r);
    }
}

/* Raising a member's ramp only moves keys onto it; ramp 0 owns nothing,
 * ramp 1 is the full share. */
static void
test_monotone_ramp(void **state)
{
    struct team t;
    size_t bad;
    (void)state;
    team_make(&t, 12);
    struct chash_ring *prev = NULL;
    double prev_share = 0;
    for (int step = 0; step <= 20; step++) {
        t.m[5].ramp = step / 20.0;
        struct chash_ring *r = build(NULL, t.m, t.n);
        double s = chash_ring_share(r, 5);
        assert_true(s >= prev_share);
        if (step == 0)
            assert_true(s == 0.0);
        if (prev != NULL) {
            size_t moved_off = 0;
            for (size_t k = 0; k < NKEYS / 10; k++) {
                uint64_t h = rnd();
                const char *x = owner(prev, h), *y = owner(r, h);
                /* a key either stays or moves onto the ramping member */
                if (strcmp(x, y) != 0 && strcmp(y, t.m[5].name) != 0)
                    moved_off++;
            }
            assert_int_equal(moved_off, 0);
            (void)measure(prev, r, t.m[5].name, &bad);
            assert_int_equal(bad, 0);
            chash_ring_destroy(prev);
        }
        prev = r;
        prev_share = s;
    }
    chash_ring_destroy(prev);
}

/* The seed's scenario: adding a 4th member to 3 moves about a quarter of
 * the keys (not the 48% the seed estimated), none between survivors. */
static void
test_seed_scenario(void **state)
{
    struct chash_member m[4] = {{"Server-A", 1, 1.0}, {"Server-B", 1, 1.0},
                                {"Server-C", 1, 1.0}, {"Server-D", 1, 1.0}};
    struct chash_config cfg = {.points_per_weight = 100};
    char key[32];
    size_t moved = 0, between = 0;
    (void)state;
    struct chash_ring *a = build(&cfg, m, 3), *b = build(&cfg, m, 4);
    for (int i = 0; i < 10000; i++) {
        int n = snprintf(key, sizeof(key), "data_key_%d", i);
        const char *x = owner(a, chash_ring_hash(a, key, (size_t)n));
        const char *y = owner(b, chash_ring_hash(b, key, (size_t)n));
        if (strcmp(x, y) != 0) {
            moved++;
            between += strcmp(y, "Server-D") != 0;
        }
    }
    assert_int_equal(between, 0);
    assert_true(moved > 2000 && moved < 3000);
    chash_ring_destroy(a);
    chash_ring_destroy(b);
}

static void
expect_error(const struct chash_config *cfg, const struct chash_member *m,
             size_t n, int err)
{
    struct chash_ring *r = (struct chash_ring *)1;
    assert_int_equal(chash_ring_create(cfg, m, n, &r), err);
    assert_null(r);
}

static void
test_errors(void **state)
{
    struct chash_member m[3] = {{"a", 1, 1.0}, {"b", 1, 1.0}, {"c", 1, 1.0}};
    struct chash_member bad[3];
    struct chash_config cfg;
    struct chash_ring *r;
    (void)state;

    assert_int_equal(chash_ring_create(NULL, m, 3, NULL), -CHASH_EINVAL);
    expect_error(NULL, NULL, 3, -CHASH_EINVAL);
    expect_error(NULL, m, 0, -CHASH_EEMPTY);
    expect_error(NULL, NULL, 0, -CHASH_EEMPTY);

    memcpy(bad, m, sizeof(m));
    bad[1].name = NULL;
    expect_error(NULL, bad, 3, -CHASH_ENONAME);
    bad[1].name = "";
    expect_error(NULL, bad, 3, -CHASH_ENONAME);
    bad[1].name = "a";
    expect_error(NULL, bad, 3, -CHASH_EDUPNAME);

    memcpy(bad, m, sizeof(m));
    bad[2].ramp = -0.01;
    expect_error(NULL, bad, 3, -CHASH_ERAMP);
    bad[2].ramp = 1.01;
    expect_error(NULL, bad, 3, -CHASH_ERAMP);
    bad[2].ramp = NAN;
    expect_error(NULL, bad, 3, -CHASH_ERAMP);

    memcpy(bad, m, sizeof(m));
    bad[0].weight = CHASH_MAX_MEMBER_POINTS / 160 + 1;
    expect_error(NULL, bad, 3, -CHASH_EWEIGHT);
    bad[0].weight = UINT32_MAX; /* must not overflow into a small count */
    expect_error(NULL, bad, 3, -CHASH_EWEIGHT);
    bad[0].weight = CHASH_MAX_MEMBER_POINTS / 160; /* the limit itself */
    assert_int_equal(chash_ring_create(NULL, bad, 3, &r), 0);
    chash_ring_destroy(r);

    /* nobody owns anything: weight 0 everywhere, or ramps at 0 */
    memcpy(bad, m, sizeof(m));
    for (int i = 0; i < 3; i++)
        bad[i].weight = 0;
    expect_error(NULL, bad, 3, -CHASH_EEMPTY);
    memcpy(bad, m, sizeof(m));
    for (int i = 0; i < 3; i++)
        bad[i].ramp = 0.0;
    expect_error(NULL, bad, 3, -CHASH_EEMPTY);
    /* but a ramp small enough to keep no point is fine if others own */
    bad[0].ramp = 1.0;
    bad[1].ramp = 0.001;
    assert_int_equal(chash_ring_create(NULL, bad, 3, &r), 0);
    assert_int_equal(chash_ring_member_points(r, 1), 0);
    assert_true(chash_ring_share(r, 1) == 0.0);
    chash_ring_destroy(r);

    memset(&cfg, 0, sizeof(cfg));
    cfg.algo = CHASH_ALGO_COUNT;
    expect_error(&cfg, m, 3, -CHASH_EALGO);
    cfg.algo = -1;
    expect_error(&cfg, m, 3, -CHASH_EALGO);
    cfg.algo = 0;
    cfg.hash = CHASH_HASH_COUNT;
    expect_error(&cfg, m, 3, -CHASH_EHASH);

    /* diff across different hashes is refused */
    struct chash_ring *a, *b;
    double moved;
    cfg.hash = CHASH_HASH_MURMUR3;
    assert_int_equal(chash_ring_create(NULL, m, 3, &a), 0);
    assert_int_equal(chash_ring_create(&cfg, m, 3, &b), 0);
    assert_int_equal(chash_ring_diff(a, b, &moved), -CHASH_EMISMATCH);
    assert_int_equal(chash_ring_diff(a, a, NULL), -CHASH_EINVAL);
    assert_int_equal(chash_ring_diff(a, NULL, &moved), -CHASH_EINVAL);
    chash_ring_destroy(a);
    chash_ring_destroy(b);
    chash_ring_destroy(NULL);

    /* every error has its own sentence, either sign */
    for (int e = 1; e <= CHASH_ENOTSUP; e++) {
        assert_string_equal(chash_strerror(e), chash_strerror(-e));
        assert_string_not_equal(chash_strerror(e), "unknown error");
        for (int f = 1; f < e; f++)
            assert_string_not_equal(chash_strerror(e), chash_strerror(f));
    }
    assert_string_equal(chash_strerror(9999), "unknown error");
}

/* Short names that differ only in their last byte ("db1", "db2") must not
 * share point positions: the first placement, XXH3 seeded with the point
 * index, gave one of them 99% of the circle. Every member of such a family
 * gets a share within a generous band of its fair one, and no two points
 * of different members coincide. */
static void
test_similar_names(void **state)
{
    static const char *const families[][6] = {
        {"db1", "db2", "db3", NULL},
        {"n10", "n11", "n12", "n13", NULL},
        {"a", "b", "c", "d", "e", NULL},
        {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", NULL},
    };
    (void)state;
    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        struct chash_member m[6];
        size_t n = 0;
        for (; families[f][n] != NULL; n++)
            m[n] = (struct chash_member){families[f][n], 1, 1.0};
        struct chash_ring *r = build(NULL, m, n);
        assert_int_equal(chash_ring_points(r), 160 * n);
        for (size_t i = 0; i < n; i++) {
            double s = chash_ring_share(r, i);
            assert_true(s > 0.6 / (double)n && s < 1.4 / (double)n);
        }
        chash_ring_destroy(r);
    }
}

/* The batch lookup answers exactly what single lookups answer, for every
 * algorithm, for batches shorter and longer than its prefetch distance. */
static void
test_batch(void **state)
{
    struct team t;
    uint64_t h[3000];
    size_t out[3000];
    (void)state;
    team_make(&t, 9);
    for (size_t i = 0; i < t.n; i++)
        t.m[i].weight = 1; /* jump takes weight 1 only */
    for (int algo = 0; algo < CHASH_ALGO_COUNT; algo++) {
        struct chash_config cfg = {.algo = algo};
        if (algo == CHASH_ALGO_NGINX)
            cfg.hash = CHASH_HASH_CRC32;
        if (algo == CHASH_ALGO_KETAMA)
            cfg.hash = CHASH_HASH_MD5;
        struct chash_ring *r = build(&cfg, t.m, t.n);
        for (size_t len = 0; len <= 3000; len = len ? len * 5 : 1) {
            for (size_t i = 0; i < len; i++) {
                char key[24];
                int kn = snprintf(key, sizeof(key), "k%zu-%llu", i,
                                  (unsigned long long)rnd());
                h[i] = chash_ring_hash(r, key, (size_t)kn);
            }
            chash_ring_lookup_batch(r, h, out, len);
            for (size_t i = 0; i < len; i++)
                assert_int_equal(out[i], chash_ring_lookup(r, h[i]));
        }
        chash_ring_destroy(r);
    }
}

/* Keys hashed by a 32-bit function are spread over the whole circle. */
static void
test_hash_width(void **state)
{
    struct team t;
    struct chash_config cfg = {.hash = CHASH_HASH_CRC32};
    size_t count[64] = {0};
    char key[32];
    (void)state;
    team_make(&t, 8);
    struct chash_ring *r = build(&cfg, t.m, t.n);
    for (int i = 0; i < 20000; i++) {
        int n = snprintf(key, sizeof(key), "key-%d", i);
        count[chash_ring_lookup(r, chash_ring_hash(r, key, (size_t)n))]++;
    }
    for (size_t i = 0; i < t.n; i++) /* every member gets keys */
        assert_true(count[i] > 20000 * chash_ring_share(r, i) / 2);
    chash_ring_destroy(r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_placement),
        cmocka_unit_test(test_reference_model),
        cmocka_unit_test(test_history_independence),
        cmocka_unit_test(test_minimal_movement),
        cmocka_unit_test(test_shares),
        cmocka_unit_test(test_flows),
        cmocka_unit_test(test_lookup_n),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_monotone_ramp),
        cmocka_unit_test(test_seed_scenario),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_hash_width),
        cmocka_unit_test(test_similar_names),
        cmocka_unit_test(test_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

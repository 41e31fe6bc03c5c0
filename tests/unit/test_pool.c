/* test_pool.c -- pools and snapshots: the member choice against the ring's
 * own preference order (first choice, failover, tried members, error
 * refusal, the bounded-load cap), remap rebuilding without the dead,
 * slow-start ramps that only move keys onto the new member, and the epoch
 * scheme that frees a retired snapshot only once no worker can hold it.
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
#include "conf/conf.h"
#include "base/log.h"
#include "model/pool.h"

#define NKEYS 2000

static struct conf *
load(const char *extra)
{
    char text[1024], err[256];
    struct conf *c;

    snprintf(text, sizeof(text),
             "web:\n"
             "  listen: 127.0.0.1:18080\n"
             "  mode: tcp\n"
             "%s"
             "  servers:\n"
             "    - 127.0.0.1:9001:1 web-1\n"
             "    - 127.0.0.1:9002:1 web-2\n"
             "    - 127.0.0.1:9003:1 web-3\n",
             extra);
    c = conf_load_string("t.yml", text, strlen(text), err, sizeof(err));
    if (c == NULL)
        fail_msg("conf: %s", err);
    return c;
}

static struct pool *
make_pool(const char *extra, struct conf **cp)
{
    char err[256];
    struct pool *p = NULL;

    *cp = load(extra);
    if (pool_create(&(*cp)->pools[0], true, &p, err, sizeof(err)) < 0)
        fail_msg("pool_create: %s", err);
    return p;
}

static void
drop_pool(struct pool *p, struct conf *c)
{
    pool_remove(p);
    pool_reclaim();
    conf_destroy(c);
}

static uint64_t
key_hash(const struct pool_snapshot *snap, int i)
{
    char key[32];
    int n = snprintf(key, sizeof(key), "10.0.%d.%d", i / 250, i % 250);

    return chash_ring_hash(snap->ring, key, (size_t)n);
}

static void
test_first_choice_is_the_ring_owner(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("", &c);
    struct pool_snapshot *snap = pool_snapshot(p);

    (void)state;
    assert_int_equal(snap->n, 3);
    for (int i = 0; i < NKEYS; i++) {
        uint64_t h = key_hash(snap, i);
        int d = -1;
        struct server *s = pool_choose(p, snap, h, NULL, 0, &d);
        assert_non_null(s);
        assert_ptr_equal(s, snap->servers[chash_ring_lookup(snap->ring, h)]);
        assert_int_equal(d, STATS_FIRST_CHOICE);
    }
    drop_pool(p, c);
}

static void
test_failover_takes_the_next_preference(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("  on_failure: failover\n", &c);
    struct server *dead = pool_server_find(p, "web-2");
    struct pool_snapshot *snap;
    size_t moved = 0;

    (void)state;
    server_set_health(dead, HEALTH_DOWN, "test");
    snap = pool_snapshot(p);
    assert_int_equal(snap->n, 3); /* failover keeps the ring */
    for (int i = 0; i < NKEYS; i++) {
        uint64_t h = key_hash(snap, i);
        size_t pref[2];
        int d;
        struct server *s = pool_choose(p, snap, h, NULL, 0, &d);
        chash_ring_lookup_n(snap->ring, h, pref, 2);
        if (snap->servers[pref[0]] == dead) {
            assert_ptr_equal(s, snap->servers[pref[1]]);
            assert_int_equal(d, STATS_FAILED_OVER);
            moved++;
        } else {
            assert_ptr_equal(s, snap->servers[pref[0]]);
            assert_int_equal(d, STATS_FIRST_CHOICE);
        }
    }
    assert_true(moved > NKEYS / 6);
    drop_pool(p, c);
}

static void
test_tried_members_are_skipped(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("", &c);
    struct pool_snapshot *snap = pool_snapshot(p);

    (void)state;
    for (int i = 0; i < 200; i++) {
        uint64_t h = key_hash(snap, i);
        size_t pref[3];
        uint64_t tried[2];
        int d;
        chash_ring_lookup_n(snap->ring, h, pref, 3);
        tried[0] = snap->servers[pref[0]]->id;
        tried[1] = snap->servers[pref[1]]->id;
        assert_ptr_equal(pool_choose(p, snap, h, tried, 1, &d),
                         snap->servers[pref[1]]);
        assert_int_equal(d, STATS_FAILED_OVER);
        assert_ptr_equal(pool_choose(p, snap, h, tried, 2, &d),
                         snap->servers[pref[2]]);
    }
    drop_pool(p, c);
}

static void
test_error_policy_refuses_when_the_owner_is_unusable(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("  on_failure: error\n"
                               "  balance_factor: 1.25\n",
                               &c);
    struct server *dead = pool_server_find(p, "web-1");
    struct pool_snapshot *snap;

    (void)state;
    server_set_health(dead, HEALTH_EJECTED, "test");
    snap = pool_snapshot(p);
    assert_true(snap->set.balance_factor == 0); /* off with error */
    for (int i = 0; i < NKEYS; i++) {
        uint64_t h = key_hash(snap, i);
        int d;
        struct server *owner = snap->servers[chash_ring_lookup(snap->ring, h)];
        struct server *s = pool_choose(p, snap, h, NULL, 0, &d);
        if (owner == dead) {
            assert_null(s);
            assert_int_equal(d, STATS_REFUSED_ERROR);
        } else {
            assert_ptr_equal(s, owner);
        }
    }
    drop_pool(p, c);
}

static void
test_remap_rebuilds_without_the_dead(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("  on_failure: remap\n", &c);
    struct server *dead = pool_server_find(p, "web-3");
    struct pool_snapshot *before = pool_snapshot(p), *after;
    struct chash_ring *ring = before->ring;
    double share = 0, moved;

    (void)state;
    for (size_t i = 0; i < before->n; i++)
        if (before->servers[i] == dead)
            share = chash_ring_share(ring, i);
    server_set_health(dead, HEALTH_DOWN, "test");
    after = pool_snapshot(p);
    assert_int_equal(after->n, 2);
    for (size_t i = 0; i < after->n; i++)
        assert_ptr_not_equal(after->servers[i], dead);
    /* exactly its keys moved; <before> is retired but still readable
     * until the next reclaim */
    assert_int_equal(chash_ring_diff(before->ring, after->ring, &moved), 0);
    assert_true(fabs(moved - share) < 1e-9);
    server_set_health(dead, HEALTH_UP, "test");
    assert_int_equal(pool_snapshot(p)->n, 3);
    drop_pool(p, c);
}

static void
test_bounded_load_respects_the_cap(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("  balance_factor: 1.25\n", &c);
    struct pool_snapshot *snap = pool_snapshot(p);
    uint64_t h = key_hash(snap, 7);
    struct server *owner = snap->servers[chash_ring_lookup(snap->ring, h)];
    struct server *s;
    int d;

    (void)state;
    /* 30 live connections, all on the owner: far above its cap */
    atomic_store(&owner->active, 30);
    atomic_store(&p->active_backends, 30);
    s = pool_choose(p, snap, h, NULL, 0, &d);
    assert_non_null(s);
    assert_ptr_not_equal(s, owner);
    assert_int_equal(d, STATS_SPILLED);
    /* the pick, its new connection taken, is within
     * ceil(1.25 * 31 * points / W) */
    for (size_t i = 0; i < snap->n; i++) {
        if (snap->servers[i] != s)
            continue;
        double cap = ceil(1.25 * 31 * chash_ring_member_points(snap->ring, i) /
                          (double)snap->usable_points);
        assert_int_equal(atomic_load(&s->active), 1);
        assert_true((double)atomic_load(&s->active) <= cap);
    }
    atomic_store(&s->active, 0);
    /* load gone: the owner again */
    atomic_store(&owner->active, 0);
    atomic_store(&p->active_backends, 0);
    assert_ptr_equal(pool_choose(p, snap, h, NULL, 0, &d), owner);
    assert_int_equal(d, STATS_FIRST_CHOICE);
    drop_pool(p, c);
}

/* Two workers choosing for keys of the same member at the same moment,
 * its cap one connection away: only one may get it. pool_choose takes
 * the slot itself (a load here and an add in the caller let both in). */
static void
test_bounded_load_last_slot_goes_once(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("  balance_factor: 1.25\n", &c);
    struct pool_snapshot *snap = pool_snapshot(p);
    uint64_t h = key_hash(snap, 7);
    size_t i = chash_ring_lookup(snap->ring, h);
    struct server *owner = snap->servers[i], *a, *b;
    double cap = ceil(1.25 * 31 * chash_ring_member_points(snap->ring, i) /
                      (double)snap->usable_points);
    int d;

    (void)state;
    atomic_store(&p->active_backends, 30);
    atomic_store(&owner->active, (uint64_t)cap - 1);
    /* neither caller has counted its connection in the pool's total yet */
    a = pool_choose(p, snap, h, NULL, 0, &d);
    b = pool_choose(p, snap, h, NULL, 0, &d);
    assert_ptr_equal(a, owner);
    assert_ptr_not_equal(b, owner);
    assert_int_equal(d, STATS_SPILLED);
    assert_true((double)atomic_load(&owner->active) <= cap);
    atomic_store(&owner->active, 0);
    atomic_store(&b->active, 0);
    atomic_store(&p->active_backends, 0);
    drop_pool(p, c);
}

/* A hot key (one client address behind a NAT, say) whose first 16
 * preferences are all at their cap, in a pool of 40: the cap holds for
 * the 17th and later members too, rather than overloading the owner. */
static void
test_bounded_load_looks_past_sixteen_full_members(void **state)
{
    char text[4096], err[256];
    size_t len, pref[40];
    struct conf *c;
    struct pool *p = NULL;
    struct pool_snapshot *snap;
    struct server *s;
    uint64_t h, total = 0;
    int d;

    (void)state;
    len = (size_t)snprintf(text, sizeof(text),
                           "web:\n  listen: 127.0.0.1:18080\n  mode: tcp\n"
                           "  balance_factor: 1.25\n  servers:\n");
    for (int i = 0; i < 40; i++)
        len +=
            (size_t)snprintf(text + len, sizeof(text) - len,
                             "    - 127.0.0.1:%d:1 web-%d\n", 9001 + i, i + 1);
    c = conf_load_string("t.yml", text, len, err, sizeof(err));
    if (c == NULL)
        fail_msg("conf: %s", err);
    if (pool_create(&c->pools[0], true, &p, err, sizeof(err)) < 0)
        fail_msg("pool_create: %s", err);
    snap = pool_snapshot(p);
    h = key_hash(snap, 3);
    assert_int_equal(chash_ring_lookup_n(snap->ring, h, pref, 40), 40);
    /* 100 live connections on each of the key's first 16 members: every
     * one of them is far above ceil(1.25 * 1601 * points / W) */
    for (int i = 0; i < 16; i++) {
        atomic_store(&snap->servers[pref[i]]->active, 100);
        total += 100;
    }
    atomic_store(&p->active_backends, total);
    s = pool_choose(p, snap, h, NULL, 0, &d);
    assert_non_null(s);
    assert_ptr_equal(s, snap->servers[pref[16]]);
    assert_int_equal(d, STATS_SPILLED);
    for (int i = 0; i < 16; i++)
        atomic_store(&snap->servers[pref[i]]->active, 0);
    atomic_store(&p->active_backends, 0);
    drop_pool(p, c);
}

static void
test_slow_start_only_moves_keys_onto_the_new_member(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("  slow_start: 1s\n", &c);
    struct conf_server cs = {0};
    char err[256];
    struct server *fresh;
    uint64_t t0;
    int prev_owned = 0;

    (void)state;
    assert_int_equal(
        conf_parse_server("127.0.0.1:9004:1 web-4", &cs, err, sizeof(err)), 0);
    assert_int_equal(pool_member_add(p, &cs), 0);
    conf_server_deinit(&cs);
    fresh = pool_server_find(p, "web-4");
    assert_non_null(fresh);
    assert_true(fresh->ramping);
    assert_true(fresh->ramp == 0);
    t0 = fresh->ramp_start_ms;
    for (int step = 1; step <= 5; step++) {
        struct pool_snapshot *snap;
        int owned = 0;
        pool_tick(t0 + (uint64_t)step * 250, NULL, NULL);
        snap = pool_snapshot(p);
        for (int i = 0; i < NKEYS; i++) {
            int d;
            if (pool_choose(p, snap, key_hash(snap, i), NULL, 0, &d) == fresh)
                owned++;
        }
        assert_true(owned >= prev_owned); /* monotone */
        prev_owned = owned;
        if (step < 4)
            assert_true(fresh->ramping);
    }
    assert_false(fresh->ramping);
    assert_true(fresh->ramp == 1);
    assert_true(prev_owned > NKEYS / 8);
    drop_pool(p, c);
}

static void
test_retired_snapshots_wait_for_workers(void **state)
{
    struct conf *c;
    struct pool *p = make_pool("", &c);

    (void)state;
    pool_reclaim();
    assert_int_equal(pool_retired_count(), 0);
    /* worker 0 is inside an epoch section: it may hold the old one */
    pool_epoch_enter(0);
    assert_int_equal(pool_rebuild(p, NULL), 0);
    assert_int_equal(pool_retired_count(), 1);
    pool_reclaim();
    assert_int_equal(pool_retired_count(), 1);
    /* a worker entering after the retirement cannot hold it */
    pool_epoch_enter(1);
    pool_reclaim();
    assert_int_equal(pool_retired_count(), 1);
    pool_epoch_quiesce(1);
    /* worker 0 leaves its section (and enters a new one): now it can go */
    pool_epoch_quiesce(0);
    pool_epoch_enter(0);
    pool_reclaim();
    assert_int_equal(pool_retired_count(), 0);
    pool_epoch_quiesce(0);
    drop_pool(p, c);
}

static int
setup(void **state)
{
    (void)state;
    log_set_level(LOG_ERROR);
    return pool_global_init(2);
}

static int
teardown(void **state)
{
    (void)state;
    pool_global_deinit();
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_choice_is_the_ring_owner),
        cmocka_unit_test(test_failover_takes_the_next_preference),
        cmocka_unit_test(test_tried_members_are_skipped),
        cmocka_unit_test(test_error_policy_refuses_when_the_owner_is_unusable),
        cmocka_unit_test(test_remap_rebuilds_without_the_dead),
        cmocka_unit_test(test_bounded_load_respects_the_cap),
        cmocka_unit_test(test_bounded_load_last_slot_goes_once),
        cmocka_unit_test(test_bounded_load_looks_past_sixteen_full_members),
        cmocka_unit_test(test_slow_start_only_moves_keys_onto_the_new_member),
        cmocka_unit_test(test_retired_snapshots_wait_for_workers),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}

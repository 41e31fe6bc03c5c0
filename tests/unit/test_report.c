/* test_report.c -- migration reports (moved, optimal, flows, immediate)
 * and ring arcs, checked against libchash's own share and diff for every
 * algorithm.
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
#include <jansson.h>

#include "model/report.h"

static double
num(json_t *j, const char *key)
{
    return json_number_value(json_object_get(j, key));
}

static void
test_add_report_is_minimal_and_exact(void **unused)
{
    struct chash_member b[3] = {{"a", 1, 1}, {"b", 2, 1}, {"c", 1, 1}};
    struct chash_member a[4] = {
        {"a", 1, 1}, {"b", 2, 1}, {"c", 1, 1}, {"d", 1, 0}};
    struct chash_config cfg = {0};
    struct chash_ring *ra;
    char err[128];
    json_t *r, *f;
    double sum = 0;
    size_t i;

    (void)unused;
    r = report_migration(&cfg, b, 3, a, 4, "d", err, sizeof(err));
    assert_non_null(r);
    /* the new member's share at full ramp is what moves, all of it to d */
    a[3].ramp = 1;
    assert_int_equal(chash_ring_create(&cfg, a, 4, &ra), 0);
    assert_true(fabs(num(r, "moved") - chash_ring_share(ra, 3)) < 1e-11);
    assert_true(fabs(num(r, "optimal") - chash_ring_share(ra, 3)) < 1e-11);
    json_array_foreach(json_object_get(r, "flows"), i, f)
    {
        assert_string_equal(json_string_value(json_object_get(f, "to")), "d");
        sum += num(f, "fraction");
    }
    assert_int_equal(json_array_size(json_object_get(r, "flows")), 3);
    assert_true(fabs(sum - num(r, "moved")) < 1e-9);
    /* it enters with ramp 0: nothing moves at once */
    assert_true(num(r, "immediate") == 0);
    assert_true(json_is_true(json_object_get(r, "exact")));
    chash_ring_destroy(ra);
    json_decref(r);
}

static void
test_remove_and_reweight_reports(void **unused)
{
    struct chash_member b[3] = {{"a", 1, 1}, {"b", 1, 1}, {"c", 1, 1}};
    struct chash_member w[3] = {{"a", 1, 1}, {"b", 3, 1}, {"c", 1, 1}};
    struct chash_config cfg = {.algo = CHASH_ALGO_RENDEZVOUS};
    char err[128];
    json_t *r;

    (void)unused;
    /* removing c: its third of the space moves away from it */
    r = report_migration(&cfg, b, 3, b, 2, "c", err, sizeof(err));
    assert_non_null(r);
    assert_true(fabs(num(r, "optimal") - 1.0 / 3) < 1e-9);
    assert_true(fabs(num(r, "moved") - 1.0 / 3) < 0.01); /* measured */
    assert_true(json_is_false(json_object_get(r, "exact")));
    json_decref(r);
    /* b from 1/3 to 3/5: optimal is the change of its share */
    r = report_migration(&cfg, b, 3, w, 3, "b", err, sizeof(err));
    assert_non_null(r);
    assert_true(fabs(num(r, "optimal") - (0.6 - 1.0 / 3)) < 1e-9);
    json_decref(r);
}

static void
test_several_changes_have_the_total_variation_as_optimal(void **unused)
{
    struct chash_member b[3] = {{"a", 1, 1}, {"b", 1, 1}, {"c", 1, 1}};
    struct chash_member a[3] = {{"a", 2, 1}, {"b", 1, 1}, {"d", 1, 1}};
    struct chash_member one[4] = {
        {"a", 1, 1}, {"b", 1, 1}, {"c", 1, 1}, {"d", 1, 1}};
    struct chash_config cfg = {0};
    struct chash_ring *rb, *ra;
    double tv = 0, share_d;
    char err[128];
    json_t *r, *r1;

    (void)unused;
    assert_int_equal(chash_ring_create(&cfg, b, 3, &rb), 0);
    assert_int_equal(chash_ring_create(&cfg, a, 3, &ra), 0);
    /* a: share change; b: share change; c: lost all; d: gained all */
    tv = fabs(chash_ring_share(ra, 0) - chash_ring_share(rb, 0)) +
         fabs(chash_ring_share(ra, 1) - chash_ring_share(rb, 1)) +
         chash_ring_share(rb, 2) + chash_ring_share(ra, 2);
    r = report_migration(&cfg, b, 3, a, 3, NULL, err, sizeof(err));
    assert_non_null(r);
    assert_true(fabs(num(r, "optimal") - tv / 2) < 1e-11);
    assert_true(num(r, "moved") >= num(r, "optimal") - 1e-12);
    /* for one added member it is the same as its share */
    r1 = report_migration(&cfg, b, 3, one, 4, NULL, err, sizeof(err));
    share_d = num(r1, "moved");
    assert_true(fabs(num(r1, "optimal") - share_d) < 1e-11);
    json_decref(r);
    json_decref(r1);
    chash_ring_destroy(rb);
    chash_ring_destroy(ra);
}

static void
test_a_report_refuses_an_empty_ring(void **unused)
{
    struct chash_member b[1] = {{"a", 1, 1}};
    struct chash_member z[1] = {{"a", 0, 1}};
    char err[128];

    (void)unused;
    assert_null(report_migration(NULL, b, 1, z, 1, "a", err, sizeof(err)));
    assert_non_null(strstr(err, "new membership"));
    assert_non_null(strstr(err, chash_strerror(-CHASH_EEMPTY)));
}

static void
test_arcs_tile_the_circle_for_every_algorithm(void **unused)
{
    struct chash_member m[3] = {{"a", 1, 1}, {"b", 1, 1}, {"c", 1, 1}};

    (void)unused;
    for (int algo = 0; algo < CHASH_ALGO_COUNT; algo++) {
        struct chash_config cfg = {.algo = algo};
        struct chash_ring *r;
        double got[3] = {0}, end = 0;
        json_t *arcs, *a;
        size_t i;

        assert_int_equal(chash_ring_create(&cfg, m, 3, &r), 0);
        arcs = report_arcs(r, 65536);
        json_array_foreach(arcs, i, a)
        {
            const char *name = json_string_value(json_object_get(a, "member"));

            assert_true(num(a, "start") == end);
            end = num(a, "end");
            got[name[0] - 'a'] += end - num(a, "start");
        }
        assert_true(end == 1.0);
        for (size_t k = 0; k < 3; k++)
            if (fabs(got[k] - chash_ring_share(r, k)) > 0.01)
                fail_msg("%s: member %zu: arcs %f, share %f",
                         chash_algo_name(algo), k, got[k],
                         chash_ring_share(r, k));
        json_decref(arcs);
        chash_ring_destroy(r);
    }
    assert_int_equal(report_hash_bits(CHASH_ALGO_KETAMA), 32);
    assert_int_equal(report_hash_bits(CHASH_ALGO_RING), 64);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_report_is_minimal_and_exact),
        cmocka_unit_test(test_remove_and_reweight_reports),
        cmocka_unit_test(
            test_several_changes_have_the_total_variation_as_optimal),
        cmocka_unit_test(test_a_report_refuses_an_empty_ring),
        cmocka_unit_test(test_arcs_tile_the_circle_for_every_algorithm),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_hot.c -- the workers' hot key summary (hot.h): the space-saving
 * guarantee (a key above 1/K of the stream is always among the K
 * counters, its count at least its true count and its count minus its
 * error at most it), windows published whole and read back, a stale
 * window not shown, and the text a key is shown with.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/hotkeys.h"

static void
note(struct hot *h, uint64_t now, const char *key)
{
    hot_note(h, now, key, strlen(key), hot_hash(key, strlen(key)));
}

static const struct hot_entry *
find(const struct hot_entry *e, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (e[i].len == strlen(key) && memcmp(e[i].key, key, e[i].len) == 0)
            return &e[i];
    return NULL;
}

/* Three planted keys (10%, 5%, 4% of the stream) among 20,000 cold
 * keys seen a few times each, shuffled: all three are kept, with counts
 * that bound their true counts from both sides. */
static void
test_planted_keys_are_found_with_bounds(void **state)
{
    struct hot *h = calloc(1, sizeof(*h));
    struct hot_entry e[HOT_K];
    const char *hot[] = {"user:1", "user:2", "session:abc"};
    const unsigned want[] = {10000, 5000, 4000};
    unsigned seen[3] = {0, 0, 0};
    uint64_t total = 0, ms = 0;
    unsigned long long x = 88172645463325252ULL;
    char k[32];
    int n;

    (void)state;
    assert_non_null(h);
    note(h, 1000, "first"); /* the window starts at 1000 */
    for (unsigned i = 0; i < 100000; i++) {
        unsigned r;

        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        r = (unsigned)(x % 100000);
        if (r < 10000 && seen[0] < want[0]) {
            note(h, 1500, hot[0]);
            seen[0]++;
        } else if (r < 15000 && seen[1] < want[1]) {
            note(h, 1500, hot[1]);
            seen[1]++;
        } else if (r < 19000 && seen[2] < want[2]) {
            note(h, 1500, hot[2]);
            seen[2]++;
        } else {
            snprintf(k, sizeof(k), "cold:%u", (unsigned)(x % 20000));
            note(h, 1500, k);
        }
    }
    /* nothing published while the window runs */
    assert_int_equal(hot_read(h, 0, e, &total, &ms), -1);
    note(h, 1000 + HOT_WINDOW_MS, "next"); /* ends the window */
    n = hot_read(h, 0, e, &total, &ms);
    assert_int_equal(n, HOT_K);
    assert_int_equal(total, 100001);
    assert_int_equal(ms, HOT_WINDOW_MS);
    for (int i = 0; i < 3; i++) {
        const struct hot_entry *f = find(e, n, hot[i]);

        assert_non_null(f);
        assert_true(f->count >= seen[i]);
        assert_true(f->count - f->err <= seen[i]);
        /* a key counted from early on is exact or nearly */
        assert_true(f->count - f->err >= seen[i] * 9 / 10);
    }
    /* the new window counts from zero */
    note(h, 1000 + 2 * HOT_WINDOW_MS, "next");
    n = hot_read(h, 0, e, &total, &ms);
    assert_int_equal(n, 1);
    assert_int_equal(total, 1);
    assert_non_null(find(e, n, "next"));
    assert_int_equal(e[0].count, 1);
    free(h);
}

/* A window that ended before <since> is not shown (a worker that saw no
 * key of the pool since has nothing to say). */
static void
test_stale_window_is_not_shown(void **state)
{
    struct hot *h = calloc(1, sizeof(*h));
    struct hot_entry e[HOT_K];
    uint64_t total, ms;

    (void)state;
    note(h, 100, "a");
    note(h, 100 + HOT_WINDOW_MS, "b");
    assert_int_equal(hot_read(h, 100, e, &total, &ms), 1);
    assert_int_equal(hot_read(h, 100 + HOT_WINDOW_MS + 1, e, &total, &ms), -1);
    free(h);
}

/* Long keys keep HOT_KEY_MAX bytes and their length; a key's text escapes
 * what is not printable. */
static void
test_key_text(void **state)
{
    struct hot *h = calloc(1, sizeof(*h));
    struct hot_entry e[HOT_K];
    char longkey[200], out[HOT_KEY_MAX * 4 + 8];
    uint64_t total, ms;

    (void)state;
    memset(longkey, 'x', sizeof(longkey));
    hot_note(h, 1, longkey, sizeof(longkey), hot_hash(longkey, 200));
    hot_note(h, 1 + HOT_WINDOW_MS, "z", 1, hot_hash("z", 1));
    assert_int_equal(hot_read(h, 0, e, &total, &ms), 1);
    assert_int_equal(e[0].len, 200);
    hot_key_text(e[0].key, HOT_KEY_MAX, e[0].len, out, sizeof(out));
    assert_int_equal(strlen(out), HOT_KEY_MAX + 3);
    assert_memory_equal(out + HOT_KEY_MAX, "...", 3);
    hot_key_text("a\\b\n\x01\"", 6, 6, out, sizeof(out));
    assert_string_equal(out, "a\\\\b\\x0a\\x01\"");
    free(h);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_keys_are_found_with_bounds),
        cmocka_unit_test(test_stale_window_is_not_shown),
        cmocka_unit_test(test_key_text),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

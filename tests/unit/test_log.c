/* test_log.c -- the log as a reader of its lines sees it: JSON lines that
 * any JSON parser reads back to the message whatever bytes it held, text
 * lines that a message cannot split, and the rate limiter's exact counts
 * (one second at a time, from one thread and from many at once).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/log.h"

/* The log goes to a temporary file each test reads back line by line. */
struct capture {
    char path[64];
    char *text;
    char *lines[256];
    size_t nlines;
};

static void
capture_start(struct capture *c, int format)
{
    int fd;

    memset(c, 0, sizeof(*c));
    strcpy(c->path, "/tmp/chash-test-log-XXXXXX");
    fd = mkstemp(c->path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(log_open(c->path), 0);
    log_set_format(format);
    log_set_level(LOG_DEBUG);
}

/* Stop logging to the file and split what it holds into lines. */
static void
capture_stop(struct capture *c)
{
    FILE *f;
    long size;
    char *p, *nl;

    log_close();
    log_set_format(LOG_FORMAT_TEXT);
    f = fopen(c->path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    c->text = calloc(1, (size_t)size + 1);
    assert_non_null(c->text);
    assert_int_equal(fread(c->text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    unlink(c->path);
    for (p = c->text; *p != '\0'; p = nl + 1) {
        nl = strchr(p, '\n');
        assert_non_null(nl); /* every line ends with its newline */
        *nl = '\0';
        assert_true(c->nlines < 256);
        c->lines[c->nlines++] = p;
    }
}

static size_t
count_lines(const struct capture *c, const char *needle)
{
    size_t n = 0;

    for (size_t i = 0; i < c->nlines; i++)
        if (strstr(c->lines[i], needle) != NULL)
            n++;
    return n;
}

/* ---- JSON ---------------------------------------------------------------- */

/* Every byte a message may hold: quotes, backslashes, each control
 * character, DEL, valid UTF-8 (2, 3 and 4 bytes, U+2028), and bytes that
 * are not UTF-8 (a lone continuation byte, 0xff, an overlong '/', a
 * surrogate, a sequence cut short). */
static const char nasty[] =
    "q\"b\\s/ \x01\x02\x1f\x7f\t\r\n end é € 😀 \xe2\x80\xa8|"
    "\x80|\xff|\xc0\xaf|\xed\xa0\x80|\xe2\x82";
/* What a JSON reader must get back: each byte that is not part of a
 * well-formed sequence is one U+FFFD. */
static const char nasty_read[] =
    "q\"b\\s/ \x01\x02\x1f\x7f\t\r\n end é € 😀 \xe2\x80\xa8|"
    "\xef\xbf\xbd|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|"
    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd";

static void
test_json_lines_parse_back_to_the_message(void **state)
{
    struct capture c;
    json_error_t jerr;

    (void)state;
    capture_start(&c, LOG_FORMAT_JSON);
    log_error("pool %s: %s", "web", nasty);
    log_warn("plain");
    log_info("info %d", 42);
    log_debug("debug");
    capture_stop(&c);
    assert_int_equal(c.nlines, 4);
    for (size_t i = 0; i < c.nlines; i++) {
        static const char *const levels[] = {"error", "warn", "info", "debug"};
        static const char *const msgs[] = {NULL, "plain", "info 42", "debug"};
        json_t *o = json_loads(c.lines[i], JSON_REJECT_DUPLICATES, &jerr);
        const char *time_;

        if (o == NULL)
            fail_msg("line %zu is not JSON (%s): %s", i, jerr.text, c.lines[i]);
        assert_int_equal(json_object_size(o), 3);
        assert_string_equal(json_string_value(json_object_get(o, "level")),
                            levels[i]);
        time_ = json_string_value(json_object_get(o, "time"));
        assert_non_null(time_);
        assert_int_equal(strlen(time_), strlen("2026-11-30T10:42:27.123Z"));
        assert_int_equal(time_[10], 'T');
        assert_int_equal(time_[23], 'Z');
        if (msgs[i] != NULL) {
            assert_string_equal(json_string_value(json_object_get(o, "msg")),
                                msgs[i]);
        } else {
            char want[512];
            snprintf(want, sizeof(want), "pool web: %s", nasty_read);
            assert_string_equal(json_string_value(json_object_get(o, "msg")),
                                want);
        }
        json_decref(o);
    }
    /* A line separator is escaped too (JavaScript ends a line there). */
    assert_null(strstr(c.lines[0], "\xe2\x80\xa8"));
    assert_non_null(strstr(c.lines[0], "\\u2028"));
    free(c.text);
}

static void
test_a_long_message_is_cut_and_still_json(void **state)
{
    char big[5000];
    struct capture c;
    json_t *o;

    (void)state;
    /* Quotes take twice their size escaped; the cut must close the
     * string and the object all the same. */
    memset(big, '"', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_start(&c, LOG_FORMAT_JSON);
    log_info("%s", big);
    capture_stop(&c);
    assert_int_equal(c.nlines, 1);
    o = json_loads(c.lines[0], 0, NULL);
    assert_non_null(o);
    assert_true(strlen(json_string_value(json_object_get(o, "msg"))) > 1000);
    json_decref(o);
    free(c.text);
}

/* ---- text ---------------------------------------------------------------- */

static void
test_text_lines_cannot_be_split_or_forged(void **state)
{
    struct capture c;

    (void)state;
    capture_start(&c, LOG_FORMAT_TEXT);
    log_info("name %s", "a\n2026-01-01T00:00:00.000Z [error] forged\r\x1b[2J");
    capture_stop(&c);
    assert_int_equal(c.nlines, 1);
    assert_non_null(strstr(c.lines[0], " [info] name a\\n2026-01-01T00:00:"
                                       "00.000Z [error] forged\\r\\x1b[2J"));
    free(c.text);
}

static void
test_levels_filter(void **state)
{
    struct capture c;

    (void)state;
    capture_start(&c, LOG_FORMAT_TEXT);
    log_set_level(LOG_WARN);
    log_error("e");
    log_warn("w");
    log_info("i");
    log_debug("d");
    capture_stop(&c);
    assert_int_equal(c.nlines, 2);
    assert_non_null(strstr(c.lines[0], " [error] e"));
    assert_non_null(strstr(c.lines[1], " [warn] w"));
    assert_int_equal(log_format_from_name("json"), LOG_FORMAT_JSON);
    assert_int_equal(log_format_from_name("text"), LOG_FORMAT_TEXT);
    assert_int_equal(log_format_from_name("xml"), -1);
    free(c.text);
}

/* ---- rate limiting ------------------------------------------------------- */

static void
test_limit_lets_burst_lines_per_second_then_reports(void **state)
{
    struct log_limit rl = LOG_LIMIT_INIT(3);
    struct capture c;

    (void)state;
    capture_start(&c, LOG_FORMAT_TEXT);
    /* second 100: 3 of 10 go out */
    for (int i = 0; i < 10; i++)
        log_limited_at(&rl, 100000 + (uint64_t)i * 10, LOG_INFO,
                       "connect to web-1 refused (%d)", i);
    /* second 101: the count of the 7 dropped, then 3 more of 5 */
    for (int i = 10; i < 15; i++)
        log_limited_at(&rl, 101500, LOG_INFO, "connect to web-1 refused (%d)",
                       i);
    /* second 105, after a quiet spell: 2 dropped, then the line */
    log_limited_at(&rl, 105000, LOG_INFO, "connect to web-1 refused (15)");
    /* second 106: nothing was dropped in 105, so no report */
    log_limited_at(&rl, 106000, LOG_INFO, "connect to web-1 refused (16)");
    capture_stop(&c);

    assert_int_equal(c.nlines, 10);
    assert_non_null(strstr(c.lines[0], "refused (0)"));
    assert_non_null(strstr(c.lines[2], "refused (2)"));
    assert_non_null(strstr(c.lines[3], "[info] (7 similar messages "
                                       "suppressed)"));
    assert_non_null(strstr(c.lines[4], "refused (10)"));
    assert_non_null(strstr(c.lines[6], "refused (12)"));
    assert_non_null(strstr(c.lines[7], "(2 similar messages suppressed)"));
    assert_non_null(strstr(c.lines[8], "refused (15)"));
    assert_non_null(strstr(c.lines[9], "refused (16)"));
    free(c.text);
}

static void
test_limit_below_the_level_counts_nothing(void **state)
{
    struct log_limit rl = LOG_LIMIT_INIT(1);
    struct capture c;

    (void)state;
    capture_start(&c, LOG_FORMAT_TEXT);
    log_set_level(LOG_WARN);
    for (int i = 0; i < 5; i++)
        log_limited_at(&rl, 1000, LOG_INFO, "hidden");
    log_set_level(LOG_DEBUG);
    log_limited_at(&rl, 2000, LOG_INFO, "shown");
    capture_stop(&c);
    /* the hidden lines were not logged, so not "suppressed" either */
    assert_int_equal(c.nlines, 1);
    assert_non_null(strstr(c.lines[0], "shown"));
    free(c.text);
}

#define THREADS 4
#define CALLS 20000

static struct log_limit shared_rl = LOG_LIMIT_INIT(5);

static void *
flood(void *arg)
{
    (void)arg;
    for (int i = 0; i < CALLS; i++)
        log_limited_at(&shared_rl, 7000, LOG_INFO, "flood");
    return NULL;
}

static void
test_limit_is_exact_across_threads(void **state)
{
    pthread_t t[THREADS];
    struct capture c;
    char want[64];

    (void)state;
    capture_start(&c, LOG_FORMAT_TEXT);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, flood, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    log_limited_at(&shared_rl, 8000, LOG_INFO, "after");
    capture_stop(&c);
    /* all in one second: exactly 5 lines, every other call counted */
    assert_int_equal(count_lines(&c, "] flood"), 5);
    snprintf(want, sizeof(want), "(%d similar messages suppressed)",
             THREADS * CALLS - 5);
    assert_int_equal(count_lines(&c, want), 1);
    assert_non_null(strstr(c.lines[c.nlines - 1], "] after"));
    assert_int_equal(c.nlines, 7);
    free(c.text);
}

static void
test_limited_site_macro_keeps_one_limiter_per_call_site(void **state)
{
    struct capture c;

    (void)state;
    capture_start(&c, LOG_FORMAT_TEXT);
    /* Two sites in one loop, within one second of the real clock unless
     * the second turns in between, which at most lets a site through
     * twice more: each site's burst is its own. */
    for (int i = 0; i < 50; i++) {
        log_info_limited(2, "site a %d", i);
        log_warn_limited(1, "site b %d", i);
    }
    capture_stop(&c);
    assert_true(count_lines(&c, "] site a") >= 2);
    assert_true(count_lines(&c, "] site a") <= 4);
    assert_true(count_lines(&c, "] site b") >= 1);
    assert_true(count_lines(&c, "] site b") <= 2);
    free(c.text);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_lines_parse_back_to_the_message),
        cmocka_unit_test(test_a_long_message_is_cut_and_still_json),
        cmocka_unit_test(test_text_lines_cannot_be_split_or_forged),
        cmocka_unit_test(test_levels_filter),
        cmocka_unit_test(test_limit_lets_burst_lines_per_second_then_reports),
        cmocka_unit_test(test_limit_below_the_level_counts_nothing),
        cmocka_unit_test(test_limit_is_exact_across_threads),
        cmocka_unit_test(
            test_limited_site_macro_keeps_one_limiter_per_call_site),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_health.c -- the http check's pure parts: the request it sends
 * (byte for byte) and the judgement of the status line, fed whole, byte
 * by byte, cut by a close, and as garbage whose bytes the reason must
 * quote harmlessly.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "conf/conf.h"
#include "control/health.h"

static struct conf_health
http_check(const char *path, const char *host, uint32_t expect)
{
    struct conf_health hc = {.enabled = true, .type = CONF_HEALTH_HTTP};

    snprintf(hc.path, sizeof(hc.path), "%s", path);
    snprintf(hc.host, sizeof(hc.host), "%s", host);
    hc.expect_status = expect;
    return hc;
}

static void
test_request_bytes(void **state)
{
    struct conf_addr in = {.text = "127.0.0.1:9001", .family = AF_INET};
    struct conf_addr un = {.text = "/run/app.sock", .family = AF_UNIX};
    struct conf_health hc = http_check("/", "", 0);
    char out[1024];
    int n;

    (void)state;
    /* No host given: the member's address as configured. */
    n = health_http_request(out, sizeof(out), &hc, &in);
    assert_string_equal(out, "GET / HTTP/1.1\r\nHost: 127.0.0.1:9001\r\n"
                             "User-Agent: chashd-health\r\nConnection: "
                             "close\r\n\r\n");
    assert_int_equal(n, (int)strlen(out));
    hc = http_check("/healthz?full=1", "example.com", 200);
    n = health_http_request(out, sizeof(out), &hc, &in);
    assert_string_equal(out, "GET /healthz?full=1 HTTP/1.1\r\nHost: "
                             "example.com\r\nUser-Agent: chashd-health\r\n"
                             "Connection: close\r\n\r\n");
    assert_int_equal(n, (int)strlen(out));
    /* A unix socket has no address a Host header could carry. */
    hc = http_check("/", "", 0);
    health_http_request(out, sizeof(out), &hc, &un);
    assert_non_null(strstr(out, "\r\nHost: localhost\r\n"));
    /* An empty path is "/" (conf's default, kept if a caller zeroes it). */
    hc.path[0] = '\0';
    health_http_request(out, sizeof(out), &hc, &in);
    assert_memory_equal(out, "GET / HTTP/1.1\r\n", 16);
}

static void
test_request_refused(void **state)
{
    struct conf_addr bad = {.text = "127.0.0.1:1\r\nX-Evil: 1",
                            .family = AF_INET};
    struct conf_addr in = {.text = "127.0.0.1:9001", .family = AF_INET};
    struct conf_health hc = http_check("/", "", 0);
    char out[1024];

    (void)state;
    /* Nothing that would split a header is sent. */
    assert_int_equal(health_http_request(out, sizeof(out), &hc, &bad), -1);
    /* Too small a buffer: -1, never a cut request. */
    assert_int_equal(health_http_request(out, 40, &hc, &in), -1);
}

/* Judge <s> whole. */
static int
judge(const char *s, uint32_t expect, bool closed, char *why)
{
    why[0] = '\0';
    return health_http_status(s, strlen(s), expect, closed, why, 128);
}

static void
test_status_passes(void **state)
{
    char why[128];

    (void)state;
    assert_int_equal(judge("HTTP/1.1 200 OK\r\n", 0, false, why), 1);
    assert_int_equal(judge("HTTP/1.0 204 No Content\r\n", 0, false, why), 1);
    assert_int_equal(
        judge("HTTP/1.1 302 Found\r\nLocation: /x\r\n", 0, false, why), 1);
    assert_int_equal(judge("HTTP/1.1 399 \r\n", 0, false, why), 1);
    /* No reason phrase: CR or LF right after the code. */
    assert_int_equal(judge("HTTP/1.1 200\r\n", 0, false, why), 1);
    assert_int_equal(judge("HTTP/1.1 200\n", 0, false, why), 1);
    /* An exact status, whatever its class. */
    assert_int_equal(judge("HTTP/1.1 404 Not Found\r\n", 404, false, why), 1);
    assert_int_equal(judge("HTTP/1.1 200 OK\r\n", 200, true, why), 1);
}

static void
test_status_fails_with_what_came(void **state)
{
    char why[128];

    (void)state;
    assert_int_equal(
        judge("HTTP/1.1 503 Service Unavailable\r\n", 0, false, why), -1);
    assert_string_equal(why, "http status 503, expected 2xx or 3xx");
    assert_int_equal(judge("HTTP/1.1 199 x\r\n", 0, false, why), -1);
    assert_string_equal(why, "http status 199, expected 2xx or 3xx");
    assert_int_equal(judge("HTTP/1.1 400 Bad\r\n", 0, false, why), -1);
    assert_string_equal(why, "http status 400, expected 2xx or 3xx");
    assert_int_equal(judge("HTTP/1.1 204 No Content\r\n", 200, false, why), -1);
    assert_string_equal(why, "http status 204, expected 200");
    assert_int_equal(judge("HTTP/1.1 200 OK\r\n", 404, false, why), -1);
    assert_string_equal(why, "http status 200, expected 404");
}

/* Any prefix of a status line is "not yet"; the same cut by a close is a
 * failure that says so. */
static void
test_status_prefixes(void **state)
{
    static const char ok[] = "HTTP/1.1 200 OK\r\n";
    char why[128];

    (void)state;
    for (size_t n = 0; n < 13; n++) {
        assert_int_equal(health_http_status(ok, n, 0, false, why, sizeof(why)),
                         0);
        assert_int_equal(health_http_status(ok, n, 0, true, why, sizeof(why)),
                         -1);
        if (n == 0)
            assert_string_equal(why, "closed before answering");
        else
            assert_memory_equal(why, "closed before a status line: \"",
                                strlen("closed before a status line: \""));
    }
    assert_int_equal(health_http_status(ok, 12, 0, true, why, sizeof(why)), -1);
    assert_string_equal(why, "closed before a status line: \"HTTP/1.1 200\"");
    for (size_t n = 13; n <= strlen(ok); n++)
        assert_int_equal(health_http_status(ok, n, 0, false, why, sizeof(why)),
                         1);
}

static void
test_garbage_fails_at_once(void **state)
{
    char why[128];

    (void)state;
    /* At its first wrong byte, without waiting for a line. */
    assert_int_equal(health_http_status("S", 1, 0, false, why, sizeof(why)),
                     -1);
    assert_string_equal(why, "not an HTTP status line: \"S\"");
    assert_int_equal(judge("SSH-2.0-OpenSSH_9.2p1 Debian\r\n", 0, false, why),
                     -1);
    assert_string_equal(why,
                        "not an HTTP status line: \"SSH-2.0-OpenSSH_...\"");
    assert_int_equal(judge("-ERR unknown command\r\n", 0, false, why), -1);
    assert_int_equal(judge("HTTP/2 200\r\n", 0, false, why), -1);
    assert_int_equal(judge("HTTP/1.1 2x0 OK\r\n", 0, false, why), -1);
    assert_int_equal(judge("HTTP/1.1 2000 OK\r\n", 0, false, why), -1);
    assert_int_equal(judge("HTTP/1.1 200OK\r\n", 0, false, why), -1);
    assert_int_equal(judge("HTTP/1.1  200 OK\r\n", 0, false, why), -1);
    assert_int_equal(judge("http/1.1 200 OK\r\n", 0, false, why), -1);
    assert_int_equal(judge("HTTP/1.x 200 OK\r\n", 0, false, why), -1);
}

/* What came is quoted into a reason shown by the admin API and the log:
 * nothing of it may be a control byte, a quote or a backslash. */
static void
test_garbage_is_quoted_harmlessly(void **state)
{
    static const char evil[] = "\x1b[2J\"\\\r\n\xff\x00rest of it, long";
    char why[128];

    (void)state;
    assert_int_equal(
        health_http_status(evil, sizeof(evil) - 1, 0, false, why, sizeof(why)),
        -1);
    assert_string_equal(why, "not an HTTP status line: "
                             "\"\\x1b[2J\\x22\\x5c\\x0d\\x0a\\xff\\x00rest "
                             "o...\"");
    for (const char *c = why; *c != '\0'; c++)
        assert_true((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f);
    /* A reason buffer too small is cut, still terminated. */
    assert_int_equal(
        health_http_status(evil, sizeof(evil) - 1, 0, false, why, 10), -1);
    assert_int_equal(strlen(why), 9);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_bytes),
        cmocka_unit_test(test_request_refused),
        cmocka_unit_test(test_status_passes),
        cmocka_unit_test(test_status_fails_with_what_came),
        cmocka_unit_test(test_status_prefixes),
        cmocka_unit_test(test_garbage_fails_at_once),
        cmocka_unit_test(test_garbage_is_quoted_harmlessly),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

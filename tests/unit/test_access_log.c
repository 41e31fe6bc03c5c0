/* test_access_log.c -- the access log's lines as their reader sees them:
 * the text line field by field, JSON lines that jansson reads back to the
 * bytes sent (hostile ones included), bounds that hold at every field's
 * worst case, and a file that stays one whole line per write across
 * threads and rotations.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "loop/access_log.h"
#include "conf/conf.h"
#include "model/pool.h"

/* 2026-12-01T17:05:33.123Z (calendar.timegm in Python, times 1000). */
#define T0 1796144733123ull

static struct sockaddr_in
v4(const char *ip, uint16_t port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};

    assert_int_equal(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
    return sin;
}

/* A tcp connection as splice.c reports it. */
static struct access_entry
tcp_entry(const struct sockaddr_in *client)
{
    struct access_entry e = {
        .time_ms = T0,
        .pool = "web",
        .client = (const struct sockaddr *)client,
        .client_len = sizeof(*client),
        .member = "b",
        .member_addr = "127.0.0.1:9002",
        .routing = STATS_FIRST_CHOICE,
        .retries = 0,
        .duration_ms = 12,
        .bytes_in = 345,
        .bytes_out = 6789,
    };
    return e;
}

static void
http_fields(struct access_entry *e, const char *method, const char *target,
            size_t target_len)
{
    e->method = method;
    e->method_len = strlen(method);
    e->target = target;
    e->target_len = target_len;
    e->version = "HTTP/1.1";
    e->version_len = 8;
    e->status = 200;
    e->key_source = "cookie:session";
}

static char line[ACCESS_LINE_MAX];

static const char *
text(const struct access_entry *e)
{
    size_t n = access_log_format(CONF_LOG_FORMAT_TEXT, e, line, sizeof(line));

    assert_int_equal(n, strlen(line));
    return line;
}

/* The JSON line of <e>, parsed; it must be one object on one line. */
static json_t *
json(const struct access_entry *e)
{
    size_t n = access_log_format(CONF_LOG_FORMAT_JSON, e, line, sizeof(line));
    json_error_t jerr;
    json_t *j;

    assert_true(n > 1);
    assert_int_equal(line[n - 1], '\n');
    assert_null(memchr(line, '\n', n - 1));
    j = json_loadb(line, n, JSON_ALLOW_NUL, &jerr);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, line);
    assert_true(json_is_object(j));
    return j;
}

/* Every byte of a line is printable ASCII but its final newline. */
static void
assert_plain_ascii(const char *s)
{
    size_t n = strlen(s);

    assert_true(n > 0);
    assert_int_equal(s[n - 1], '\n');
    for (size_t i = 0; i + 1 < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
            fail_msg("byte 0x%02x at %zu of: %s", (unsigned char)s[i], i, s);
}

static void
test_text_tcp_line(void **state)
{
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);

    (void)state;
    assert_string_equal(text(&e),
                        "2026-12-01T17:05:33.123Z web 127.0.0.5:41234 -> b "
                        "127.0.0.1:9002 first retries=0 12ms 345B/6789B\n");
    /* Refused after two retries: no member, the decision that ended it. */
    e.member = e.member_addr = NULL;
    e.routing = STATS_NO_MEMBER;
    e.retries = 2;
    e.bytes_out = 0;
    assert_string_equal(text(&e),
                        "2026-12-01T17:05:33.123Z web 127.0.0.5:41234 -> - - "
                        "no_member retries=2 12ms 345B/0B\n");
    /* Closed before any decision, from an unknown address. */
    e.client = NULL;
    e.routing = ACCESS_NO_ROUTING;
    assert_string_equal(text(&e), "2026-12-01T17:05:33.123Z web - -> - - - "
                                  "retries=2 12ms 345B/0B\n");
}

static void
test_text_http_line(void **state)
{
    struct sockaddr_in c = v4("10.1.2.3", 80);
    struct access_entry e = tcp_entry(&c);

    (void)state;
    http_fields(&e, "GET", "/path?q=1", 9);
    assert_string_equal(text(&e), "2026-12-01T17:05:33.123Z web 10.1.2.3:80 "
                                  "-> b 127.0.0.1:9002 first retries=0 12ms "
                                  "345B/6789B \"GET /path?q=1 HTTP/1.1\" 200 "
                                  "key=cookie:session\n");
    /* chashd answered itself: its reason, quoted. */
    e.status = 502;
    e.routing = STATS_FAILED_OVER;
    e.retries = 1;
    e.key_source = "source_ip";
    e.error = "502 member reset";
    assert_string_equal(text(&e), "2026-12-01T17:05:33.123Z web 10.1.2.3:80 "
                                  "-> b 127.0.0.1:9002 failed_over retries=1 "
                                  "12ms 345B/6789B \"GET /path?q=1 HTTP/1.1\" "
                                  "502 key=source_ip error=\"502 member "
                                  "reset\"\n");
    /* No response at all (the client left first). */
    e.status = 0;
    e.error = NULL;
    e.key_source = NULL;
    assert_non_null(strstr(text(&e), "HTTP/1.1\" - key=-\n"));
}

static void
test_ipv6_client(void **state)
{
    struct sockaddr_in c4 = v4("127.0.0.1", 1);
    struct access_entry e = tcp_entry(&c4);
    struct sockaddr_in6 c = {.sin6_family = AF_INET6, .sin6_port = htons(5555)};
    json_t *j;

    (void)state;
    assert_int_equal(inet_pton(AF_INET6, "::1", &c.sin6_addr), 1);
    e.client = (const struct sockaddr *)&c;
    e.client_len = sizeof(c);
    assert_non_null(strstr(text(&e), " web [::1]:5555 -> b "));
    j = json(&e);
    assert_string_equal(json_string_value(json_object_get(j, "client")),
                        "[::1]:5555");
    json_decref(j);
}

static void
test_routing_names(void **state)
{
    (void)state;
    assert_string_equal(access_routing_name(STATS_FIRST_CHOICE), "first");
    assert_string_equal(access_routing_name(STATS_SPILLED), "spilled");
    assert_string_equal(access_routing_name(STATS_FAILED_OVER), "failed_over");
    assert_string_equal(access_routing_name(STATS_REFUSED_ERROR), "refused");
    assert_string_equal(access_routing_name(STATS_NO_MEMBER), "no_member");
    assert_string_equal(access_routing_name(ACCESS_NO_ROUTING), "-");
    assert_string_equal(access_routing_name(STATS_NO_MEMBER + 1), "-");
}

/* A request line that tries everything: quotes and backslashes to break
 * out of the quoted field, CR LF to forge a second line, ESC for the
 * terminal, a NUL, bytes that are not UTF-8, and U+2028. */
static const char hostile[] = "/a\"b\\c\r\n2026-01-01T00:00:00.000Z forged"
                              "\x1b[31m\x00z\xff\xc3\xa9\xc3\xe2\x80\xa8 ";
#define HOSTILE_LEN (sizeof(hostile) - 1)

static void
test_text_escapes_hostile_bytes(void **state)
{
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);
    const char *t;

    (void)state;
    http_fields(&e, "G\"T", hostile, HOSTILE_LEN);
    e.member = "m e\"m";
    e.error = "bad\nline";
    t = text(&e);
    assert_plain_ascii(t);
    /* Unquoted fields stay one word; quoted ones keep their spaces. */
    assert_non_null(strstr(t, " -> m\\x20e\\x22m 127.0.0.1:9002 first "));
    assert_non_null(
        strstr(t, " \"G\\x22T /a\\x22b\\x5cc\\x0d\\x0a2026-01-01T00:00:00.000Z "
                  "forged\\x1b[31m\\x00z\\xff\\xc3\\xa9\\xc3\\xe2\\x80\\xa8  "
                  "HTTP/1.1\" 200 "));
    assert_non_null(strstr(t, " error=\"bad\\x0aline\"\n"));
}

static void
test_json_round_trips_hostile_bytes(void **state)
{
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);
    /* What a JSON reader must get back: every valid character as sent,
     * each byte that is not UTF-8 as U+FFFD (a lone 0xff; 0xc3 without
     * its continuation). */
    static const char want[] = "/a\"b\\c\r\n2026-01-01T00:00:00.000Z forged"
                               "\x1b[31m\x00z\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd"
                               "\xe2\x80\xa8 ";
    json_t *j, *v;

    (void)state;
    http_fields(&e, "GET", hostile, HOSTILE_LEN);
    e.error = "502 \"member\" reset\\";
    j = json(&e);
    /* The line itself holds no control byte, no raw U+2028. */
    for (const char *p = line; *p != '\n'; p++)
        assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
    assert_null(strstr(line, "\xe2\x80\xa8"));
    v = json_object_get(j, "target");
    assert_int_equal(json_string_length(v), sizeof(want) - 1);
    assert_memory_equal(json_string_value(v), want, sizeof(want) - 1);
    assert_string_equal(json_string_value(json_object_get(j, "error")),
                        "502 \"member\" reset\\");
    assert_string_equal(json_string_value(json_object_get(j, "method")), "GET");
    assert_string_equal(json_string_value(json_object_get(j, "version")),
                        "HTTP/1.1");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 200);
    assert_null(json_object_get(j, "target_truncated"));
    json_decref(j);
}

static void
test_json_fields(void **state)
{
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);
    json_t *j;

    (void)state;
    j = json(&e);
    assert_string_equal(json_string_value(json_object_get(j, "time")),
                        "2026-12-01T17:05:33.123Z");
    assert_string_equal(json_string_value(json_object_get(j, "pool")), "web");
    assert_string_equal(json_string_value(json_object_get(j, "client")),
                        "127.0.0.5:41234");
    assert_string_equal(json_string_value(json_object_get(j, "member")), "b");
    assert_string_equal(json_string_value(json_object_get(j, "member_addr")),
                        "127.0.0.1:9002");
    assert_string_equal(json_string_value(json_object_get(j, "routing")),
                        "first");
    assert_int_equal(json_integer_value(json_object_get(j, "retries")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "duration_ms")), 12);
    assert_int_equal(json_integer_value(json_object_get(j, "bytes_in")), 345);
    assert_int_equal(json_integer_value(json_object_get(j, "bytes_out")), 6789);
    /* A tcp line has no http fields. */
    assert_null(json_object_get(j, "method"));
    assert_null(json_object_get(j, "status"));
    json_decref(j);

    /* Nothing chosen: nulls, not "-". */
    e.member = e.member_addr = NULL;
    e.client = NULL;
    e.routing = ACCESS_NO_ROUTING;
    j = json(&e);
    assert_true(json_is_null(json_object_get(j, "member")));
    assert_true(json_is_null(json_object_get(j, "member_addr")));
    assert_true(json_is_null(json_object_get(j, "client")));
    assert_true(json_is_null(json_object_get(j, "routing")));
    json_decref(j);

    /* http without a response, with chashd's reason. */
    e.routing = STATS_NO_MEMBER;
    http_fields(&e, "POST", "/", 1);
    e.status = 0;
    e.key_source = NULL;
    e.error = "503 no member";
    j = json(&e);
    assert_string_equal(json_string_value(json_object_get(j, "routing")),
                        "no_member");
    assert_true(json_is_null(json_object_get(j, "status")));
    assert_true(json_is_null(json_object_get(j, "key")));
    assert_string_equal(json_string_value(json_object_get(j, "error")),
                        "503 no member");
    json_decref(j);
}

static void
test_long_target_is_cut(void **state)
{
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);
    size_t n = 5 * ACCESS_TARGET_MAX;
    char *target = malloc(n);
    const char *t, *q;
    json_t *j;

    (void)state;
    assert_non_null(target);
    memset(target, 'x', n);
    target[0] = '/';
    http_fields(&e, "GET", target, n);
    t = text(&e);
    q = strstr(t, "\"GET /");
    assert_non_null(q);
    /* "GET " + the first ACCESS_TARGET_MAX bytes + "..." */
    assert_memory_equal(q + 5 + ACCESS_TARGET_MAX, "... HTTP/1.1\"", 13);
    j = json(&e);
    assert_int_equal(json_string_length(json_object_get(j, "target")),
                     ACCESS_TARGET_MAX);
    assert_true(json_is_true(json_object_get(j, "target_truncated")));
    json_decref(j);
    free(target);
}

/* Every field at its bound, every byte one that escapes to six: the line
 * still fits ACCESS_LINE_MAX whole (it parses). */
static void
test_worst_case_fits(void **state)
{
    struct sockaddr_in6 c = {.sin6_family = AF_INET6, .sin6_port = 65535};
    struct access_entry e = {0};
    char *big = malloc(4 * ACCESS_TARGET_MAX + 1);
    json_t *j;

    (void)state;
    assert_non_null(big);
    memset(&c.sin6_addr, 0xab, sizeof(c.sin6_addr));
    memset(big, 0x01, 4 * ACCESS_TARGET_MAX);
    big[4 * ACCESS_TARGET_MAX] = '\0';
    e.time_ms = UINT64_C(253402300799999); /* 9999-12-31T23:59:59.999Z */
    e.pool = e.member = e.member_addr = e.key_source = e.error = big;
    e.client = (const struct sockaddr *)&c;
    e.client_len = sizeof(c);
    e.routing = STATS_REFUSED_ERROR;
    e.retries = UINT32_MAX;
    /* jansson reads integers up to INT64_MAX: one digit short of the
     * widest, which the text line below takes. */
    e.duration_ms = e.bytes_in = e.bytes_out = INT64_MAX;
    e.method = e.target = e.version = big;
    e.method_len = e.target_len = e.version_len = 4 * ACCESS_TARGET_MAX;
    e.status = 599;
    j = json(&e);
    assert_int_equal(json_string_length(json_object_get(j, "pool")),
                     ACCESS_NAME_MAX);
    assert_int_equal(json_string_length(json_object_get(j, "method")),
                     ACCESS_METHOD_MAX);
    assert_int_equal(json_string_length(json_object_get(j, "version")),
                     ACCESS_VERSION_MAX);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 599);
    json_decref(j);
    e.duration_ms = e.bytes_in = e.bytes_out = UINT64_MAX;
    assert_plain_ascii(text(&e));
    assert_non_null(strstr(line, " 599 key="));
    free(big);
}

/* A buffer too small still gets a line: cut, newline-ended, terminated. */
static void
test_small_buffer(void **state)
{
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);
    char small[32];
    size_t n;

    (void)state;
    memset(small, 'Z', sizeof(small));
    n = access_log_format(CONF_LOG_FORMAT_TEXT, &e, small, sizeof(small));
    assert_true(n > 0 && n < sizeof(small));
    assert_int_equal(small[n - 1], '\n');
    assert_int_equal(small[n], '\0');
    assert_int_equal(access_log_format(CONF_LOG_FORMAT_JSON, &e, small, 0), 0);
}

/* ---- the sink ------------------------------------------------------------ */

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long size;

    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    buf = calloc(1, (size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    return buf;
}

static size_t
count_lines(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

static void
test_open_errors_name_the_file(void **state)
{
    char err[256];

    (void)state;
    assert_null(access_log_open("/nonexistent-dir-chash/a.log",
                                CONF_LOG_FORMAT_TEXT, err, sizeof(err)));
    assert_string_equal(err, "cannot open /nonexistent-dir-chash/a.log: No "
                             "such file or directory");
    assert_int_equal(
        access_log_check("/nonexistent-dir-chash/a.log", err, sizeof(err)), -1);
    assert_string_equal(err, "cannot open /nonexistent-dir-chash/a.log: No "
                             "such file or directory");
    assert_int_equal(access_log_check("syslog", err, sizeof(err)), 0);
}

/* Rotation: the file is renamed, reopen starts a new one at the path; a
 * line is in exactly one of them. */
static void
test_file_and_reopen(void **state)
{
    char dir[] = "/tmp/chash-test-alog-XXXXXX", path[128], moved[128];
    char err[256], *a, *b;
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);
    struct access_log *l;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/access.log", dir);
    snprintf(moved, sizeof(moved), "%s/access.log.1", dir);
    l = access_log_open(path, CONF_LOG_FORMAT_TEXT, err, sizeof(err));
    assert_non_null(l);
    assert_string_equal(access_log_where(l), path);
    access_log_write(l, &e);
    assert_int_equal(rename(path, moved), 0);
    e.member = "after";
    access_log_write(l, &e); /* still the old file until the reopen */
    assert_int_equal(access_log_reopen(l), 0);
    e.member = "new";
    access_log_ref(l);
    access_log_unref(l); /* a holder's unref does not close it */
    access_log_write(l, &e);
    access_log_unref(l);
    a = slurp(moved);
    b = slurp(path);
    assert_int_equal(count_lines(a), 2);
    assert_non_null(strstr(a, "-> b "));
    assert_non_null(strstr(a, "-> after "));
    assert_int_equal(count_lines(b), 1);
    assert_non_null(strstr(b, "-> new "));
    free(a);
    free(b);
    unlink(path);
    unlink(moved);
    rmdir(dir);
}

#define WRITERS 8
#define LINES_EACH 500

struct writer {
    struct access_log *l;
    int id;
};

static void *
writer_run(void *arg)
{
    struct writer *w = arg;
    char member[32], *target = malloc(3000);
    struct sockaddr_in c = v4("127.0.0.5", 41234);
    struct access_entry e = tcp_entry(&c);

    assert_non_null(target);
    memset(target, 'a' + w->id, 3000);
    snprintf(member, sizeof(member), "w%d", w->id);
    e.member = member;
    for (int i = 0; i < LINES_EACH; i++) {
        /* Long lines (a cut target) make a torn write likely if writes
         * were split. */
        http_fields(&e, "GET", target, (size_t)(i % 2 ? 3000 : 10));
        e.retries = (uint32_t)i;
        access_log_write(w->l, &e);
    }
    free(target);
    return NULL;
}

/* Threads writing at once: every line whole and parseable. */
static void
test_concurrent_lines_stay_whole(void **state)
{
    char path[] = "/tmp/chash-test-alog-XXXXXX", err[256], *all, *p;
    struct writer ws[WRITERS];
    pthread_t th[WRITERS];
    struct access_log *l;
    int fd, seen[WRITERS] = {0};
    size_t n = 0;

    (void)state;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    l = access_log_open(path, CONF_LOG_FORMAT_JSON, err, sizeof(err));
    assert_non_null(l);
    for (int i = 0; i < WRITERS; i++) {
        ws[i].l = l;
        ws[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, writer_run, &ws[i]), 0);
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(th[i], NULL);
    access_log_unref(l);
    all = slurp(path);
    for (p = all; *p != '\0';) {
        char *nl = strchr(p, '\n');
        json_error_t jerr;
        json_t *j;
        const char *m;

        assert_non_null(nl);
        j = json_loadb(p, (size_t)(nl - p), JSON_ALLOW_NUL, &jerr);
        if (j == NULL)
            fail_msg("line %zu is not JSON: %s", n, jerr.text);
        m = json_string_value(json_object_get(j, "member"));
        assert_non_null(m);
        seen[atoi(m + 1)]++;
        json_decref(j);
        n++;
        p = nl + 1;
    }
    assert_int_equal(n, WRITERS * LINES_EACH);
    for (int i = 0; i < WRITERS; i++)
        assert_int_equal(seen[i], LINES_EACH);
    free(all);
    unlink(path);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_tcp_line),
        cmocka_unit_test(test_text_http_line),
        cmocka_unit_test(test_ipv6_client),
        cmocka_unit_test(test_routing_names),
        cmocka_unit_test(test_text_escapes_hostile_bytes),
        cmocka_unit_test(test_json_round_trips_hostile_bytes),
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_long_target_is_cut),
        cmocka_unit_test(test_worst_case_fits),
        cmocka_unit_test(test_small_buffer),
        cmocka_unit_test(test_open_errors_name_the_file),
        cmocka_unit_test(test_file_and_reopen),
        cmocka_unit_test(test_concurrent_lines_stay_whole),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

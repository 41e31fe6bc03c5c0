/* test_http.c -- mode http's pure functions: request heads (every form a
 * client may send, every flag, hop-by-hop marking, every smuggling vector
 * refused with its status and reason, every request fed byte by byte),
 * response heads (framing by status, method and headers), the chunked
 * scanner (every split of valid and invalid bodies), the routing key's
 * links and chashd's own error responses.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf/conf.h"
#include "proto/http.h"
#include "proto/proto.h"

#define MAX_HEAD 8192
#define MAX_URI 4096

/* One request parse with the caller's array and the usual limits. */
struct preq {
    struct http_request rq;
    struct http_header h[HTTP_HEADERS_MAX];
    int st;
};

static int
req_parse_lim(struct preq *p, const char *buf, size_t len, uint64_t max_head,
              uint64_t max_uri)
{
    memset(p, 0, sizeof(*p));
    p->rq.max_head = max_head;
    p->rq.max_uri = max_uri;
    p->rq.headers = p->h;
    p->st = http_parse_request(buf, len, &p->rq);
    return p->st;
}

static int
req_parse(struct preq *p, const char *buf, size_t len)
{
    return req_parse_lim(p, buf, len, MAX_HEAD, MAX_URI);
}

static void
assert_span(const char *buf, struct proto_span s, const char *want)
{
    char got[512];

    assert_true(s.len < sizeof(got));
    memcpy(got, buf + s.off, s.len);
    got[s.len] = '\0';
    assert_string_equal(got, want);
}

static void
assert_span_eq(struct proto_span a, struct proto_span b)
{
    assert_int_equal(a.off, b.off);
    assert_int_equal(a.len, b.len);
}

/* Two parses of the same bytes agree on everything the caller reads. */
static void
assert_req_same(const struct preq *a, const struct preq *b)
{
    assert_int_equal(a->st, b->st);
    assert_int_equal(a->rq.status, b->rq.status);
    if (a->st == PROTO_FATAL) {
        assert_non_null(b->rq.err);
        assert_string_equal(a->rq.err, b->rq.err);
        return;
    }
    assert_int_equal(a->rq.head, b->rq.head);
    assert_int_equal(a->rq.nheaders, b->rq.nheaders);
    assert_int_equal(a->rq.method, b->rq.method);
    assert_int_equal(a->rq.minor, b->rq.minor);
    assert_int_equal(a->rq.body, b->rq.body);
    assert_int_equal(a->rq.length, b->rq.length);
    assert_int_equal(a->rq.keep_alive, b->rq.keep_alive);
    assert_int_equal(a->rq.upgrade, b->rq.upgrade);
    assert_int_equal(a->rq.expect_continue, b->rq.expect_continue);
    assert_span_eq(a->rq.target, b->rq.target);
    assert_span_eq(a->rq.path, b->rq.path);
    assert_span_eq(a->rq.query, b->rq.query);
    assert_span_eq(a->rq.host, b->rq.host);
    for (size_t i = 0; i < a->rq.nheaders; i++) {
        assert_span_eq(a->h[i].name, b->h[i].name);
        assert_span_eq(a->h[i].value, b->h[i].value);
        assert_span_eq(a->h[i].line, b->h[i].line);
        assert_int_equal(a->h[i].hop_by_hop, b->h[i].hop_by_hop);
    }
}

/*
 * <buf> fed one byte more at a time, as a client trickling it would: each
 * prefix waits until the verdict of the whole is reached, and the first
 * verdict is the whole's (a parsed head exactly at its last byte).
 */
static void
assert_bytewise(const char *buf, size_t len, const struct preq *whole)
{
    struct preq *p = malloc(sizeof(*p));

    assert_non_null(p);
    for (size_t n = 0; n <= len; n++) {
        req_parse_lim(p, buf, n, whole->rq.max_head, whole->rq.max_uri);
        if (p->st == PROTO_AGAIN) {
            assert_true(n < len);
            continue;
        }
        if (whole->st == PROTO_OK)
            assert_int_equal(n, whole->rq.head);
        assert_req_same(whole, p);
        break;
    }
    free(p);
}

/* <s> parses whole (then byte by byte the same) into <p>. */
static void
req_ok(struct preq *p, const char *s)
{
    size_t len = strlen(s);

    if (req_parse(p, s, len) != PROTO_OK)
        fail_msg("refused (%d): %s\n%s", p->rq.status, p->rq.err, s);
    assert_true(p->rq.head <= len);
    assert_null(p->rq.err);
    assert_int_equal(p->rq.status, 0);
    assert_bytewise(s, len, p);
}

/* <s> is refused with <status> and exactly the reason <err>, whole and
 * byte by byte. */
static void
req_refused_lim(const char *s, size_t len, uint64_t max_head, uint64_t max_uri,
                int status, const char *err)
{
    struct preq *p = malloc(sizeof(*p));

    assert_non_null(p);
    if (req_parse_lim(p, s, len, max_head, max_uri) != PROTO_FATAL)
        fail_msg("not refused (%d): %s", p->st, s);
    assert_int_equal(p->rq.status, status);
    assert_non_null(p->rq.err);
    assert_string_equal(p->rq.err, err);
    assert_bytewise(s, len, p);
    free(p);
}

/* A literal's length, NUL bytes inside it included. */
#define req_refused_limits(s, max_head, max_uri, status, err)                  \
    req_refused_lim(s, sizeof(s) - 1, max_head, max_uri, status, err)
#define req_refused(s, status, err)                                            \
    req_refused_limits(s, MAX_HEAD, MAX_URI, status, err)

/* The header <i> of <p> is <name>: <value>, hop-by-hop or not. */
static void
assert_header(const struct preq *p, const char *buf, size_t i, const char *name,
              const char *value, bool hop)
{
    assert_true(i < p->rq.nheaders);
    assert_span(buf, p->h[i].name, name);
    assert_span(buf, p->h[i].value, value);
    assert_int_equal(p->h[i].hop_by_hop, hop);
}

/* ---- valid requests ------------------------------------------------------ */

static void
test_get(void **state)
{
    static const char s[] = "GET /a/b?x=1&y=2 HTTP/1.1\r\n"
                            "Host: Example.COM:8080\r\n"
                            "User-Agent:  curl/8 \t\r\n"
                            "Accept: */*\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_int_equal(p.rq.head, strlen(s));
    assert_int_equal(p.rq.method, HTTP_GET);
    assert_span(s, p.rq.method_text, "GET");
    assert_span(s, p.rq.line, "GET /a/b?x=1&y=2 HTTP/1.1");
    assert_span(s, p.rq.target, "/a/b?x=1&y=2");
    assert_span(s, p.rq.path, "/a/b");
    assert_span(s, p.rq.query, "x=1&y=2");
    assert_span(s, p.rq.host, "Example.COM:8080");
    assert_true(p.rq.has_host);
    assert_int_equal(p.rq.minor, 1);
    assert_int_equal(p.rq.body, HTTP_BODY_NONE);
    assert_int_equal(p.rq.length, 0);
    assert_true(p.rq.keep_alive);
    assert_false(p.rq.upgrade);
    assert_false(p.rq.expect_continue);
    assert_int_equal(p.rq.nheaders, 3);
    assert_header(&p, s, 0, "Host", "Example.COM:8080", false);
    assert_int_equal(p.h[0].known, HTTP_H_HOST);
    /* the value loses its whitespace; the line keeps it and its CRLF */
    assert_header(&p, s, 1, "User-Agent", "curl/8", false);
    assert_span(s, p.h[1].line, "User-Agent:  curl/8 \t\r\n");
    assert_int_equal(p.h[1].known, HTTP_H_OTHER);
    assert_header(&p, s, 2, "Accept", "*/*", false);
}

static void
test_post_length(void **state)
{
    static const char s[] = "POST /up HTTP/1.1\r\nHost: h\r\n"
                            "content-length: 5\r\n\r\nhello";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_int_equal(p.rq.head, strlen(s) - 5);
    assert_int_equal(p.rq.method, HTTP_POST);
    assert_int_equal(p.rq.body, HTTP_BODY_LENGTH);
    assert_int_equal(p.rq.length, 5);
    assert_int_equal(p.h[1].known, HTTP_H_CONTENT_LENGTH);
    /* 18 digits, leading zeros, and zero are lengths too */
    req_ok(&p, "PUT / HTTP/1.1\r\nHost: h\r\n"
               "Content-Length: 999999999999999999\r\n\r\n");
    assert_int_equal(p.rq.length, 999999999999999999ull);
    req_ok(&p, "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n");
    assert_int_equal(p.rq.length, 7);
    req_ok(&p, "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.rq.body, HTTP_BODY_LENGTH);
    assert_int_equal(p.rq.length, 0);
}

static void
test_chunked(void **state)
{
    static const char s[] = "POST /c HTTP/1.1\r\nHost: h\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n0\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_int_equal(p.rq.body, HTTP_BODY_CHUNKED);
    assert_int_equal(p.rq.head, strlen(s) - 15);
    /* a hop-by-hop header: chashd frames the body itself */
    assert_header(&p, s, 1, "Transfer-Encoding", "chunked", true);
    req_ok(&p, "POST /c HTTP/1.1\r\nHost: h\r\n"
               "transfer-encoding: Chunked\r\n\r\n");
    assert_int_equal(p.rq.body, HTTP_BODY_CHUNKED);
}

static void
test_http10(void **state)
{
    struct preq p;

    (void)state;
    /* 1.0: no Host needed, closes unless it asks for keep-alive */
    req_ok(&p, "GET /old HTTP/1.0\r\n\r\n");
    assert_int_equal(p.rq.minor, 0);
    assert_false(p.rq.keep_alive);
    assert_false(p.rq.has_host);
    req_ok(&p, "GET /old HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert_true(p.rq.keep_alive);
    req_ok(&p, "GET /old HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n");
    assert_false(p.rq.keep_alive);
    /* 1.1 keeps it unless it says close */
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    assert_false(p.rq.keep_alive);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: x, CLOSE\r\n\r\n");
    assert_false(p.rq.keep_alive);
    /* Expect means nothing to a 1.0 request (no 100 Continue to send) */
    req_ok(&p, "POST / HTTP/1.0\r\nExpect: 100-continue\r\n"
               "Content-Length: 1\r\n\r\n");
    assert_false(p.rq.expect_continue);
}

static void
test_absolute_form(void **state)
{
    static const char s[] = "GET http://Example.com:81/p/q?k=v HTTP/1.1\r\n"
                            "Host: other.example\r\n\r\n";
    static const char t[] = "GET HTTPS://h.example?x=1 HTTP/1.1\r\n"
                            "Host: h.example\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    /* the target's authority wins over Host (RFC 9112 3.2.2) */
    assert_span(s, p.rq.host, "Example.com:81");
    assert_span(s, p.rq.target, "http://Example.com:81/p/q?k=v");
    assert_span(s, p.rq.path, "/p/q");
    assert_span(s, p.rq.query, "k=v");
    req_ok(&p, t);
    assert_span(t, p.rq.host, "h.example");
    assert_span(t, p.rq.path, "");
    assert_span(t, p.rq.query, "x=1");
}

static void
test_options_star(void **state)
{
    static const char s[] = "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_int_equal(p.rq.method, HTTP_OPTIONS);
    assert_span(s, p.rq.path, "*");
    assert_span(s, p.rq.query, "");
}

static void
test_pipelined(void **state)
{
    static const char one[] = "GET /1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n";
    static const char s[] = "GET /1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n"
                            "GET /2 HTTP/1.1\r\nHost: b\r\nX-B: 2\r\n"
                            "X-C: 3\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_int_equal(p.rq.head, strlen(one));
    assert_int_equal(p.rq.nheaders, 2);
    assert_span(s, p.rq.path, "/1");
    assert_span(s, p.rq.host, "a");
    /* the second, from where the first ended */
    req_ok(&p, s + strlen(one));
    assert_int_equal(p.rq.nheaders, 3);
    assert_span(s + strlen(one), p.rq.path, "/2");
    /* an empty line between them is skipped (RFC 9112 2.2) */
    {
        static const char t[] = "\r\n\r\nGET /3 HTTP/1.1\r\nHost: c\r\n\r\n";
        req_ok(&p, t);
        assert_int_equal(p.rq.head, strlen(t));
        assert_span(t, p.rq.line, "GET /3 HTTP/1.1");
    }
}

static void
test_methods(void **state)
{
    static const struct {
        const char *text;
        int method;
        bool idempotent;
    } m[] = {
        {"GET", HTTP_GET, true},         {"HEAD", HTTP_HEAD, true},
        {"POST", HTTP_POST, false},      {"PUT", HTTP_PUT, true},
        {"DELETE", HTTP_DELETE, true},   {"OPTIONS", HTTP_OPTIONS, true},
        {"TRACE", HTTP_TRACE, true},     {"PATCH", HTTP_PATCH, false},
        {"PURGE", HTTP_OTHER, false},    {"get", HTTP_OTHER, false},
        {"M-SEARCH", HTTP_OTHER, false},
    };
    char s[128];
    struct preq p;

    (void)state;
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        snprintf(s, sizeof(s), "%s /x HTTP/1.1\r\nHost: h\r\n\r\n", m[i].text);
        req_ok(&p, s);
        assert_int_equal(p.rq.method, m[i].method);
        assert_span(s, p.rq.method_text, m[i].text);
        assert_int_equal(http_method_idempotent(p.rq.method), m[i].idempotent);
    }
}

static void
test_flags(void **state)
{
    struct preq p;

    (void)state;
    req_ok(&p, "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
               "Upgrade: websocket\r\n\r\n");
    assert_true(p.rq.upgrade);
    assert_true(p.rq.keep_alive);
    /* Upgrade without the Connection option is not an upgrade */
    req_ok(&p, "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
    assert_false(p.rq.upgrade);
    /* nor the option without an Upgrade header, nor in 1.0 */
    req_ok(&p, "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n");
    assert_false(p.rq.upgrade);
    req_ok(&p, "GET /ws HTTP/1.0\r\nConnection: upgrade\r\n"
               "Upgrade: websocket\r\n\r\n");
    assert_false(p.rq.upgrade);
    req_ok(&p, "PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n"
               "Content-Length: 3\r\n\r\n");
    assert_true(p.rq.expect_continue);
    assert_int_equal(p.rq.body, HTTP_BODY_LENGTH);
    req_ok(&p, "PUT /f HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n");
    assert_false(p.rq.expect_continue);
}

static void
test_hop_by_hop(void **state)
{
    static const char s[] = "GET / HTTP/1.1\r\nHost: h\r\n"
                            "Connection: close, X-Foo\r\n"
                            "x-foo: 1\r\nX-Bar: 2\r\nKeep-Alive: timeout=5\r\n"
                            "TE: trailers\r\nTrailer: X-T\r\n"
                            "Proxy-Connection: keep-alive\r\n"
                            "Upgrade: h2c\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_false(p.rq.keep_alive);
    assert_int_equal(p.rq.nheaders, 10);
    assert_header(&p, s, 0, "Host", "h", false);
    assert_header(&p, s, 1, "Connection", "close, X-Foo", true);
    /* named in Connection (any case): the hop's own */
    assert_header(&p, s, 2, "x-foo", "1", true);
    assert_header(&p, s, 3, "X-Bar", "2", false);
    /* hop-by-hop by definition (RFC 9110 7.6.1) */
    assert_header(&p, s, 4, "Keep-Alive", "timeout=5", true);
    assert_header(&p, s, 5, "TE", "trailers", true);
    assert_header(&p, s, 6, "Trailer", "X-T", true);
    assert_header(&p, s, 7, "Proxy-Connection", "keep-alive", true);
    assert_header(&p, s, 8, "Upgrade", "h2c", true);
    assert_header(&p, s, 9, "X-Forwarded-For", "10.0.0.1", false);
    assert_int_equal(p.h[9].known, HTTP_H_X_FORWARDED_FOR);
    assert_int_equal(p.h[4].known, HTTP_H_KEEP_ALIVE);
    /* empty list members and whitespace around them are skipped */
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: ,, X-A ,\t,\r\n"
               "X-A: 1\r\nX-AB: 2\r\n\r\n");
    assert_true(p.h[2].hop_by_hop);
    assert_false(p.h[3].hop_by_hop);
    assert_true(p.rq.keep_alive);
    /* never the framing or the Host: a proxy that dropped a
     * Content-Length named in Connection would forward a body without
     * its length (a smuggled request) */
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\n"
               "Connection: close, Content-Length, Host\r\n"
               "Content-Length: 3\r\n\r\nabc");
    assert_int_equal(p.rq.body, HTTP_BODY_LENGTH);
    assert_int_equal(p.rq.length, 3);
    assert_false(p.h[0].hop_by_hop);
    assert_false(p.h[2].hop_by_hop);
}

/* Whitespace, empty values, obs-text and other bytes RFC 9110 allows. */
static void
test_header_values(void **state)
{
    static const char s[] = "GET / HTTP/1.1\r\nHost:h\r\nX-Empty:\r\n"
                            "X-Blank:   \r\nX-Utf8: caf\xc3\xa9\r\n"
                            "X-Tab:\ta\tb\t\r\n!#$%&'*+-.^_`|~09az: v\r\n\r\n";
    struct preq p;

    (void)state;
    req_ok(&p, s);
    assert_header(&p, s, 0, "Host", "h", false);
    assert_header(&p, s, 1, "X-Empty", "", false);
    assert_header(&p, s, 2, "X-Blank", "", false);
    assert_header(&p, s, 3, "X-Utf8", "caf\xc3\xa9", false);
    assert_header(&p, s, 4, "X-Tab", "a\tb", false);
    assert_header(&p, s, 5, "!#$%&'*+-.^_`|~09az", "v", false);
    /* an empty Host is allowed (a target with no authority) */
    req_ok(&p, "GET / HTTP/1.1\r\nHost:\r\n\r\n");
    assert_true(p.rq.has_host);
    assert_int_equal(p.rq.host.len, 0);
    /* IP literals and ports */
    req_ok(&p, "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    {
        static const char t[] = "GET // HTTP/1.1\r\nHost: h\r\n\r\n";
        req_ok(&p, t);
        assert_span(t, p.rq.path, "//");
    }
}

/* The most header lines a request may have: HTTP_HEADERS_MAX, not one
 * more. */
static void
test_header_count(void **state)
{
    size_t cap = 64 + (HTTP_HEADERS_MAX + 1) * 16;
    char *s = malloc(cap);
    size_t n;
    struct preq p;

    (void)state;
    assert_non_null(s);
    n = (size_t)snprintf(s, cap, "GET / HTTP/1.1\r\nHost: h\r\n");
    for (int i = 1; i < HTTP_HEADERS_MAX; i++)
        n += (size_t)snprintf(s + n, cap - n, "X-%03d: v\r\n", i);
    snprintf(s + n, cap - n, "\r\n");
    req_ok(&p, s);
    assert_int_equal(p.rq.nheaders, HTTP_HEADERS_MAX);
    snprintf(s + n, cap - n, "X-Max: v\r\n\r\n");
    req_refused_lim(s, strlen(s), MAX_HEAD, MAX_URI, 431,
                    "too many header lines");
    free(s);
}

/* ---- refusals ------------------------------------------------------------ */

#define RL "POST / HTTP/1.1\r\nHost: h\r\n"

static void
test_refuse_framing(void **state)
{
    (void)state;
    req_refused(RL "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                400, "both Content-Length and Transfer-Encoding");
    req_refused(RL "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                400, "both Content-Length and Transfer-Encoding");
    req_refused(RL "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", 400,
                "a duplicate Content-Length");
    req_refused(RL "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 400,
                "a duplicate Content-Length");
    req_refused(RL "Content-Length: +5\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length: -1\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length: 5 ,5\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length: 5,5\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length: 0x10\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length: 1 0\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length:\r\n\r\n", 400, "an invalid Content-Length");
    /* 19 digits could overflow a signed 64-bit length elsewhere */
    req_refused(RL "Content-Length: 1000000000000000000\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Content-Length: 99999999999999999999999\r\n\r\n", 400,
                "an invalid Content-Length");
    req_refused(RL "Transfer-Encoding: chunked, identity\r\n\r\n", 501,
                "a Transfer-Encoding other than chunked");
    req_refused(RL "Transfer-Encoding: identity\r\n\r\n", 501,
                "a Transfer-Encoding other than chunked");
    req_refused(RL "Transfer-Encoding: gzip, chunked\r\n\r\n", 501,
                "a Transfer-Encoding other than chunked");
    req_refused(RL "Transfer-Encoding: xchunked\r\n\r\n", 501,
                "a Transfer-Encoding other than chunked");
    req_refused(RL "Transfer-Encoding:\r\n\r\n", 501,
                "a Transfer-Encoding other than chunked");
    req_refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
                "Transfer-Encoding in an HTTP/1.0 request");
    req_refused(RL "Transfer-Encoding: chunked\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n",
                400, "a duplicate Transfer-Encoding");
}

static void
test_refuse_lines(void **state)
{
    (void)state;
    req_refused(RL "X-A: 1\r\n folded\r\n\r\n", 400,
                "obs-fold (a header line starting with whitespace)");
    req_refused(RL "X-A: 1\r\n\tfolded\r\n\r\n", 400,
                "obs-fold (a header line starting with whitespace)");
    req_refused("GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400,
                "obs-fold (a header line starting with whitespace)");
    req_refused(RL "X-A: 1\n\r\n", 400, "a line ends with a bare LF");
    req_refused(RL "\n", 400, "a line ends with a bare LF");
    req_refused("GET / HTTP/1.1\nHost: h\r\n\r\n", 400,
                "a malformed request line");
    req_refused(RL "X-A: 1\r2\r\n\r\n", 400, "a bare CR in a header value");
    req_refused(RL "X-A: 1\r\r\n\r\n", 400, "a bare CR in a header value");
    req_refused(RL "X-A: 1\0002\r\n\r\n", 400, "a NUL byte in a header value");
    req_refused(RL "X-A: \001\r\n\r\n", 400,
                "a control byte in a header value");
    req_refused(RL "X-A: a\033[0m\r\n\r\n", 400,
                "a control byte in a header value");
    req_refused(RL "X-A: a\177\r\n\r\n", 400,
                "a control byte in a header value");
    req_refused(RL "Content-Length : 5\r\n\r\n", 400,
                "whitespace between a header name and its colon");
    req_refused(RL "X-A\t: 5\r\n\r\n", 400,
                "whitespace between a header name and its colon");
    req_refused(RL ": v\r\n\r\n", 400, "a malformed header line");
    req_refused(RL "X-A\r\n\r\n", 400, "a malformed header line");
    req_refused(RL "X(A): v\r\n\r\n", 400, "a malformed header line");
    req_refused(RL "X\001A: v\r\n\r\n", 400, "a malformed header line");
    req_refused(RL "X\r: v\r\n\r\n", 400, "a malformed header line");
}

static void
test_refuse_sizes(void **state)
{
    char big[600];

    (void)state;
    /* the head is at most max_head bytes, its final CRLF included */
    {
        static const char s[] = "GET / HTTP/1.1\r\nHost: h\r\nX: 1\r\n\r\n";
        struct preq p;
        req_parse_lim(&p, s, strlen(s), strlen(s), MAX_URI);
        assert_int_equal(p.st, PROTO_OK);
        req_refused_lim(s, strlen(s), strlen(s) - 1, MAX_URI, 431,
                        "the header section is too large");
        /* a head over the limit that has not ended yet: refused too */
        req_refused_limits("GET / HTTP/1.1\r\nHost: h\r\nX: 111111111", 20,
                           MAX_URI, 431, "the header section is too large");
        /* still in its request line */
        req_refused_limits("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 20, MAX_URI,
                           431, "the header section is too large");
        /* past the limit, what follows does not change the verdict: 431
         * in one read as when trickled (not the 505 or 400 of a byte the
         * parser should not have read) */
        req_refused_limits("GET /aaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/9.9\r\n\r\n",
                           32, MAX_URI, 431, "the header section is too large");
        req_refused_limits("GET / HTTP/1.1\r\nHost: h\r\nX-A: 12345\n\r\n", 34,
                           MAX_URI, 431, "the header section is too large");
        /* empty lines before a request count */
        req_refused_limits("\r\n\r\n\r\n\r\n\r\n\r\n", 8, MAX_URI, 431,
                           "the header section is too large");
    }
    /* the request-target is at most max_uri bytes */
    memset(big, 0, sizeof(big));
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', 99); /* a target of 100 bytes */
    strcat(big, " HTTP/1.1\r\nHost: h\r\n\r\n");
    {
        struct preq p;
        req_parse_lim(&p, big, strlen(big), MAX_HEAD, 100);
        assert_int_equal(p.st, PROTO_OK);
        assert_int_equal(p.rq.target.len, 100);
    }
    req_refused_lim(big, strlen(big), MAX_HEAD, 99, 414,
                    "the request-target is too long");
    req_refused_limits("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", MAX_HEAD, 10,
                       414, "the request-target is too long");
}

static void
test_refuse_request_line(void **state)
{
    (void)state;
    req_refused("GET foo HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET example.com:80 HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET /a?q#frag HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET http:// HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET http:///p HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a request-target of a bad form");
    req_refused("CONNECT h.example:443 HTTP/1.1\r\nHost: h.example\r\n\r\n",
                405, "CONNECT is not served");
    req_refused("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505,
                "HTTP version not supported");
    req_refused("GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505,
                "HTTP version not supported");
    req_refused("GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505,
                "an unknown HTTP/1 minor version");
    req_refused("GET / HTTP/1.x\r\nHost: h\r\n\r\n", 400,
                "an unknown HTTP/1 minor version");
    req_refused("GET / HTTP/0.9\r\nHost: h\r\n\r\n", 400,
                "a malformed HTTP version");
    req_refused("GET / http/1.1\r\nHost: h\r\n\r\n", 400,
                "a malformed HTTP version");
    req_refused("GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400,
                "a malformed request line");
    req_refused("GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400,
                "a malformed request line");
    req_refused("GET / HTTP/1.1\rXHost: h\r\n\r\n", 400,
                "a malformed request line");
    req_refused("GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "an empty request-target");
    req_refused("GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a malformed request line");
    req_refused(" GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a malformed request line");
    req_refused("GET /a\001 HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a control or non-ASCII byte in the target");
    req_refused("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                "a control or non-ASCII byte in the target");
    req_refused("GET /a\r\nHost: h\r\n\r\n", 400, "a malformed request line");
    req_refused("GETGETGETGETGETGETGETGETGETGETGETGET / HTTP/1.1\r\n\r\n", 400,
                "the method is too long");
}

static void
test_refuse_host_expect(void **state)
{
    (void)state;
    req_refused("GET / HTTP/1.1\r\nX: 1\r\n\r\n", 400,
                "an HTTP/1.1 request without Host");
    /* RFC 9112 3.2: an absolute-form target does not replace the line */
    req_refused("GET http://a/ HTTP/1.1\r\nX: 1\r\n\r\n", 400,
                "an HTTP/1.1 request without Host");
    req_refused("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400,
                "a duplicate Host");
    req_refused("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nhost: b\r\n\r\n", 400,
                "a duplicate Host");
    req_refused("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400,
                "a duplicate Host");
    req_refused("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "an invalid Host");
    req_refused("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, "an invalid Host");
    req_refused("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400, "an invalid Host");
    /* the Host header is checked even when the target has an authority */
    req_refused("GET http://a/ HTTP/1.1\r\nHost: a/b\r\n\r\n", 400,
                "an invalid Host");
    req_refused(RL "Expect: 200-ok\r\n\r\n", 417,
                "an Expect other than 100-continue");
    req_refused(RL "Expect: 100-continue, x\r\n\r\n", 417,
                "an Expect other than 100-continue");
}

/* ---- responses ----------------------------------------------------------- */

struct presp {
    struct http_response rp;
    struct http_header h[HTTP_HEADERS_MAX];
    int st;
};

static int
resp_parse(struct presp *p, const char *buf, size_t len, int method,
           uint64_t max_head)
{
    memset(p, 0, sizeof(*p));
    p->rp.headers = p->h;
    p->st = http_parse_response(buf, len, method, max_head, &p->rp);
    return p->st;
}

/* <s>, the answer to <method>, parses with <body> framing; its prefixes
 * wait. */
static void
resp_ok(struct presp *p, const char *s, int method, int body)
{
    size_t len = strlen(s);
    struct presp *q = malloc(sizeof(*q));

    assert_non_null(q);
    if (resp_parse(p, s, len, method, MAX_HEAD) != PROTO_OK)
        fail_msg("refused: %s\n%s", p->rp.err, s);
    assert_null(p->rp.err);
    assert_true(p->rp.head <= len);
    assert_int_equal(p->rp.body, body);
    for (size_t n = 0; n < p->rp.head; n++)
        assert_int_equal(resp_parse(q, s, n, method, MAX_HEAD), PROTO_AGAIN);
    assert_int_equal(resp_parse(q, s, p->rp.head, method, MAX_HEAD), PROTO_OK);
    assert_int_equal(q->rp.body, p->rp.body);
    assert_int_equal(q->rp.length, p->rp.length);
    assert_int_equal(q->rp.keep_alive, p->rp.keep_alive);
    assert_int_equal(q->rp.nheaders, p->rp.nheaders);
    free(q);
}

static void
resp_refused_n(const char *s, size_t len, int method, const char *err)
{
    struct presp p, q;

    if (resp_parse(&p, s, len, method, MAX_HEAD) != PROTO_FATAL)
        fail_msg("accepted: %s", s);
    assert_non_null(p.rp.err);
    assert_string_equal(p.rp.err, err);
    /* fed byte by byte: waits, then the same refusal */
    for (size_t n = 0; n <= len; n++) {
        int st = resp_parse(&q, s, n, method, MAX_HEAD);
        if (st == PROTO_AGAIN)
            continue;
        assert_int_equal(st, PROTO_FATAL);
        assert_string_equal(q.rp.err, err);
        break;
    }
}

#define resp_refused(s, method, err)                                           \
    resp_refused_n(s, sizeof(s) - 1, method, err)

static void
test_response_status_line(void **state)
{
    static const char s[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n"
                            "X-A: 1\r\n\r\nabc";
    struct presp p;

    (void)state;
    resp_ok(&p, s, HTTP_GET, HTTP_BODY_LENGTH);
    assert_int_equal(p.rp.status, 404);
    assert_int_equal(p.rp.minor, 1);
    assert_int_equal(p.rp.length, 3);
    assert_int_equal(p.rp.head, strlen(s) - 3);
    assert_int_equal(p.rp.nheaders, 2);
    assert_span(s, p.h[1].value, "1");
    assert_true(p.rp.keep_alive);
    /* no reason phrase, an empty one, one with obs-text and tabs */
    resp_ok(&p, "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", HTTP_GET,
            HTTP_BODY_LENGTH);
    resp_ok(&p, "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", HTTP_GET,
            HTTP_BODY_LENGTH);
    resp_ok(&p,
            "HTTP/1.1 599 D\xc3\xa9j\xc3\xa0\tvu\r\nContent-Length: 0\r\n\r\n",
            HTTP_GET, HTTP_BODY_LENGTH);
    assert_int_equal(p.rp.status, 599);
    /* 1.0: closes unless it says keep-alive */
    resp_ok(&p, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", HTTP_GET,
            HTTP_BODY_LENGTH);
    assert_int_equal(p.rp.minor, 0);
    assert_false(p.rp.keep_alive);
    resp_ok(&p,
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
            "Content-Length: 0\r\n\r\n",
            HTTP_GET, HTTP_BODY_LENGTH);
    assert_true(p.rp.keep_alive);
    resp_ok(&p,
            "HTTP/1.1 200 OK\r\nConnection: close\r\n"
            "Content-Length: 0\r\n\r\n",
            HTTP_GET, HTTP_BODY_LENGTH);
    assert_false(p.rp.keep_alive);
    resp_refused("HTTP/1.1 20 OK\r\n\r\n", HTTP_GET, "a malformed status line");
    resp_refused("HTTP/1.1 2000 OK\r\n\r\n", HTTP_GET,
                 "a malformed status line");
    resp_refused("HTTP/1.1 200OK\r\n\r\n", HTTP_GET, "a malformed status line");
    resp_refused("HTTP/1.1  200 OK\r\n\r\n", HTTP_GET,
                 "a malformed status line");
    resp_refused("HTTP/1.1 200 OK\n\r\n", HTTP_GET, "a malformed status line");
    resp_refused("HTTP/1.1 600 X\r\n\r\n", HTTP_GET,
                 "a status out of 100..599");
    resp_refused("HTTP/1.1 099 X\r\n\r\n", HTTP_GET,
                 "a status out of 100..599");
    resp_refused("HTTP/2 200 OK\r\n\r\n", HTTP_GET,
                 "not an HTTP/1 status line");
    resp_refused("ICY 200 OK\r\n\r\n", HTTP_GET, "not an HTTP/1 status line");
    resp_refused("HTTP/1.1 200 O\001K\r\n\r\n", HTTP_GET,
                 "a control byte in the status line");
    resp_refused("HTTP/1.1 200 O\rK\r\n\r\n", HTTP_GET,
                 "a control byte in the status line");
    resp_refused("HTTP/1.1 200 OK\r\nX-A: 1\n\r\n", HTTP_GET,
                 "a line ends with a bare LF");
    resp_refused("HTTP/1.1 200 OK\r\nX-A: 1\r\n b\r\n\r\n", HTTP_GET,
                 "obs-fold (a header line starting with whitespace)");
    resp_refused("HTTP/1.1 200 OK\r\nX-A: \0001\r\n\r\n", HTTP_GET,
                 "a NUL byte in a header value");
    {
        struct presp q;
        static const char lng[] = "HTTP/1.1 200 OK, a long reason phrase";
        assert_int_equal(resp_parse(&q, lng, strlen(lng), HTTP_GET, 16),
                         PROTO_FATAL);
        assert_string_equal(q.rp.err, "a status line that does not end");
        /* what follows the limit does not change the reason */
        static const char bad[] = "HTTP/1.1 200 OK, a long reason\001\r\n\r\n";
        assert_int_equal(resp_parse(&q, bad, strlen(bad), HTTP_GET, 16),
                         PROTO_FATAL);
        assert_string_equal(q.rp.err, "a status line that does not end");
        static const char hdr[] = "HTTP/1.1 200 OK\r\nX-Long: abcdefghijk";
        assert_int_equal(resp_parse(&q, hdr, strlen(hdr), HTTP_GET, 24),
                         PROTO_FATAL);
        assert_string_equal(q.rp.err, "the header section is too large");
    }
}

static void
test_response_framing(void **state)
{
    static const int none[] = {100, 101, 103, 199, 204, 304};
    char s[128];
    struct presp p;

    (void)state;
    /* no body after 1xx, 204 and 304, whatever the headers say */
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        snprintf(s, sizeof(s), "HTTP/1.1 %d X\r\nContent-Length: 10\r\n\r\n",
                 none[i]);
        resp_ok(&p, s, HTTP_GET, HTTP_BODY_NONE);
        assert_true(p.rp.keep_alive);
        snprintf(s, sizeof(s),
                 "HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n",
                 none[i]);
        resp_ok(&p, s, HTTP_GET, HTTP_BODY_NONE);
    }
    /* nor after a HEAD */
    resp_ok(&p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", HTTP_HEAD,
            HTTP_BODY_NONE);
    resp_ok(&p, "HTTP/1.1 200 OK\r\n\r\n", HTTP_HEAD, HTTP_BODY_NONE);
    assert_true(p.rp.keep_alive);
    resp_ok(&p, "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n",
            HTTP_POST, HTTP_BODY_CHUNKED);
    assert_true(p.rp.keep_alive);
    resp_ok(&p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", HTTP_GET,
            HTTP_BODY_LENGTH);
    assert_int_equal(p.rp.length, 10);
    /* neither: the body ends when the member closes */
    resp_ok(&p, "HTTP/1.1 200 OK\r\nX: 1\r\n\r\n", HTTP_GET, HTTP_BODY_CLOSE);
    assert_false(p.rp.keep_alive);
    resp_ok(&p, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", HTTP_GET,
            HTTP_BODY_CLOSE);
    assert_false(p.rp.keep_alive);
    /* the same length twice is one length (RFC 9110 8.6) */
    resp_ok(&p,
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n"
            "Content-Length: 4\r\n\r\n",
            HTTP_GET, HTTP_BODY_LENGTH);
    assert_int_equal(p.rp.length, 4);
    resp_refused("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n"
                 "Content-Length: 5\r\n\r\n",
                 HTTP_GET, "a duplicate Content-Length");
    resp_refused("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 HTTP_GET, "both Content-Length and Transfer-Encoding");
    resp_refused("HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\n\r\n", HTTP_GET,
                 "an invalid Content-Length");
    resp_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 HTTP_GET, "a duplicate Transfer-Encoding");
}

/* ---- the chunked scanner ------------------------------------------------- */

/* <body> scanned in the pieces that end at the offsets <cut> (<ncut>,
 * increasing): the body's bytes and the data bytes, or -1 and *<err>. */
static ssize_t
scan_cuts(const char *body, size_t len, const size_t *cut, size_t ncut,
          size_t max_trailer, uint64_t *total, const char **err)
{
    struct http_chunked c;
    size_t from = 0;
    bool done = false;

    memset(&c, 0, sizeof(c));
    *err = NULL;
    for (size_t i = 0; i <= ncut && !done; i++) {
        size_t to = i < ncut ? cut[i] : len;
        ssize_t n = http_chunked_scan(&c, body + from, to - from, max_trailer,
                                      &done, err);
        if (n < 0)
            return -1;
        assert_true((size_t)n <= to - from);
        if (!done)
            assert_int_equal((size_t)n, to - from);
        from += (size_t)n;
    }
    *total = c.total;
    return done ? (ssize_t)from : (ssize_t)-2; /* -2: not ended */
}

/* <body> (then <tail>, not part of it) scans to the end with <data> bytes
 * of data, whole, at every split in two and byte by byte. */
static void
chunked_ok(const char *body, const char *tail, uint64_t data)
{
    char buf[1024];
    size_t blen = strlen(body), len;
    size_t *cut;
    uint64_t total;
    const char *err;
    ssize_t n;

    len = (size_t)snprintf(buf, sizeof(buf), "%s%s", body, tail);
    assert_true(len < sizeof(buf));
    n = scan_cuts(buf, len, NULL, 0, 256, &total, &err);
    if (n != (ssize_t)blen)
        fail_msg("scanned %zd of %zu: %s\n%s", n, blen, err ? err : "", body);
    assert_int_equal(total, data);
    for (size_t k = 1; k < len; k++) {
        n = scan_cuts(buf, len, &k, 1, 256, &total, &err);
        assert_int_equal(n, (ssize_t)blen);
        assert_int_equal(total, data);
    }
    cut = malloc(len * sizeof(*cut));
    assert_non_null(cut);
    for (size_t k = 0; k + 1 < len; k++)
        cut[k] = k + 1;
    n = scan_cuts(buf, len, cut, len - 1, 256, &total, &err);
    assert_int_equal(n, (ssize_t)blen);
    assert_int_equal(total, data);
    /* any prefix of it has not ended */
    for (size_t k = 0; k < blen; k++)
        assert_int_equal(scan_cuts(buf, k, NULL, 0, 256, &total, &err), -2);
    free(cut);
}

/* <body> is refused with <want>, whole, at every split and byte by byte. */
static void
chunked_bad_n(const char *body, size_t len, size_t max_trailer,
              const char *want)
{
    uint64_t total;
    const char *err;
    size_t *cut;

    if (scan_cuts(body, len, NULL, 0, max_trailer, &total, &err) != -1)
        fail_msg("not refused: %s", body);
    assert_string_equal(err, want);
    for (size_t k = 1; k < len; k++) {
        assert_int_equal(scan_cuts(body, len, &k, 1, max_trailer, &total, &err),
                         -1);
        assert_string_equal(err, want);
    }
    cut = malloc(len * sizeof(*cut));
    assert_non_null(cut);
    for (size_t k = 0; k + 1 < len; k++)
        cut[k] = k + 1;
    assert_int_equal(
        scan_cuts(body, len, cut, len - 1, max_trailer, &total, &err), -1);
    assert_string_equal(err, want);
    free(cut);
}

#define chunked_bad(body, max_trailer, want)                                   \
    chunked_bad_n(body, sizeof(body) - 1, max_trailer, want)

static void
test_chunked_valid(void **state)
{
    (void)state;
    chunked_ok("0\r\n\r\n", "", 0);
    chunked_ok("5\r\nhello\r\n0\r\n\r\n", "GET / HTTP/1.1\r\n", 5);
    chunked_ok("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "", 11);
    chunked_ok("a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n", "x", 20);
    chunked_ok("0000000000000005\r\n\r\n\r\n\r\r\n0\r\n\r\n", "", 5);
    /* data holds any byte, CR, LF and control bytes included */
    chunked_ok("4\r\n\r\n\001\n\r\n0\r\n\r\n", "", 4);
    /* extensions, with whitespace before them */
    chunked_ok("5;name=value\r\nhello\r\n0;last\r\n\r\n", "", 5);
    chunked_ok("5 ;a=\"q d\"\r\nhello\r\n0\t;x\r\n\r\n", "", 5);
    chunked_ok("5 \r\nhello\r\n0\r\n\r\n", "", 5);
    /* trailers */
    chunked_ok("5\r\nhello\r\n0\r\nX-Sum: 12\r\nX-Other: a b\r\n\r\n", "z", 5);
    chunked_ok("0\r\nX-Empty:\r\n\r\n", "", 0);
    chunked_ok("0\r\nX-A:b:c\r\nX-T:\t1 \r\n\r\n", "", 0);
}

static void
test_chunked_invalid(void **state)
{
    (void)state;
    chunked_bad("g\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("-5\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("0x5\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("5g\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("5 5\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("5\r\nhello\r\n\r\n", 256,
                "a chunk size that is not hexadecimal");
    /* 17 digits, or a value that overflows on the 16th */
    chunked_bad("10000000000000000\r\n", 256, "a chunk size too large");
    chunked_bad("00000000000000001\r\n", 256, "a chunk size too large");
    chunked_bad("FFFFFFFFFFFFFFFF\r\n", 256, "a chunk size too large");
    chunked_bad("5\r\nhelloX\r\n0\r\n\r\n", 256,
                "chunk data not followed by CRLF");
    chunked_bad("5\r\nhello\rX0\r\n\r\n", 256,
                "chunk data not followed by CRLF");
    chunked_bad("5\r\nhello\n0\r\n\r\n", 256,
                "chunk data not followed by CRLF");
    chunked_bad("5\nhello\r\n", 256, "a chunk size that is not hexadecimal");
    chunked_bad("5\rhello\r\n", 256, "a chunk size line not ended by CRLF");
    chunked_bad("5;x\rhello\r\n", 256, "a chunk size line not ended by CRLF");
    chunked_bad("5;x\001\r\nhello\r\n", 256,
                "a control byte in a chunk extension");
    chunked_bad("5;x\n\r\nhello\r\n", 256,
                "a control byte in a chunk extension");
    chunked_bad("5;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 16,
                "chunk extensions too large");
    chunked_bad("0\r\nX: 1\r\n folded\r\n\r\n", 256,
                "obs-fold in the trailers");
    chunked_bad("0\r\n\tX: 1\r\n\r\n", 256, "obs-fold in the trailers");
    chunked_bad("0\r\nX: 1\n\r\n", 256, "a control byte in the trailers");
    chunked_bad("0\r\nX: 1\rY\r\n\r\n", 256,
                "a trailer line not ended by CRLF");
    chunked_bad("0\r\n\rX", 256, "a trailer line not ended by CRLF");
    chunked_bad("0\r\nX: \0001\r\n\r\n", 256, "a control byte in the trailers");
    chunked_bad("0\r\n:x\r\n\r\n", 256, "a malformed trailer line");
    chunked_bad("0\r\n\n", 256, "a malformed trailer line");
    /* a trailer is a field line: a name, then its colon (RFC 9112 7.1.2) */
    chunked_bad("0\r\nX-Sum& 12\r\n\r\n", 256, "a malformed trailer line");
    chunked_bad("0\r\nX-Sum\r\n\r\n", 256, "a malformed trailer line");
    chunked_bad("0\r\nX-Sum : 12\r\n\r\n", 256, "a malformed trailer line");
    chunked_bad("0\r\nX-Long: 0123456789012345678901234567890123456789\r\n"
                "\r\n",
                16, "the trailers are too large");
    {
        /* many short trailer lines add up */
        char t[512] = "0\r\n";
        for (int i = 0; i < 40; i++)
            strcat(t, "A:1\r\n");
        strcat(t, "\r\n");
        chunked_bad_n(t, strlen(t), 64, "the trailers are too large");
    }
}

/* ---- the routing key ----------------------------------------------------- */

static struct conf_key_source
link_of(int kind, const char *name)
{
    struct conf_key_source k;

    memset(&k, 0, sizeof(k));
    k.kind = kind;
    snprintf(k.name, sizeof(k.name), "%s", name);
    return k;
}

/* The key of <buf> for a chain of one link; its index or n. */
static size_t
key_of(const char *buf, const struct preq *p, struct conf_key_source k,
       char *got, size_t cap)
{
    char out[256];
    const char *key;
    size_t klen, i;

    i = http_request_key(buf, &p->rq, &k, 1, "192.0.2.7", "192.0.2.7:5000", out,
                         sizeof(out), &key, &klen);
    assert_true(klen < cap);
    memcpy(got, key, klen);
    got[klen] = '\0';
    return i;
}

static void
assert_key(const char *buf, const struct preq *p, int kind, const char *name,
           const char *want)
{
    char got[256];
    size_t i = key_of(buf, p, link_of(kind, name), got, sizeof(got));

    if (want == NULL) { /* absent: the fallback, the client's IP */
        assert_int_equal(i, 1);
        assert_string_equal(got, "192.0.2.7");
        return;
    }
    assert_int_equal(i, 0);
    assert_string_equal(got, want);
}

static void
test_key_header(void **state)
{
    static const char s[] = "GET / HTTP/1.1\r\nHost: h\r\nX-User: alice\r\n"
                            "x-user: bob\r\nX-Empty:\r\n\r\n";
    struct preq p;
    const struct proto_span *v;

    (void)state;
    req_ok(&p, s);
    v = http_header_find(s, p.h, p.rq.nheaders, "X-USER", 6);
    assert_non_null(v);
    assert_span(s, *v, "alice");
    assert_null(http_header_find(s, p.h, p.rq.nheaders, "X-Use", 5));
    assert_key(s, &p, CONF_HASH_KEY_HEADER, "x-user", "alice");
    assert_key(s, &p, CONF_HASH_KEY_HEADER, "X-Other", NULL);
    /* present but empty: the next link */
    assert_key(s, &p, CONF_HASH_KEY_HEADER, "X-Empty", NULL);
}

static void
test_key_cookie(void **state)
{
    static const char s[] = "GET / HTTP/1.1\r\nHost: h\r\n"
                            "Cookie: sidx=1; a=b=c;  sid=abc; flag\r\n"
                            "cookie: q=\"quoted v\"; empty=; other=2\r\n"
                            "X-Cookie: zz=9\r\n\r\n";
    struct preq p;
    struct proto_span v;

    (void)state;
    req_ok(&p, s);
    assert_true(http_cookie_find(s, &p.rq, "sid", 3, &v));
    assert_span(s, v, "abc"); /* not sidx's */
    assert_true(http_cookie_find(s, &p.rq, "sidx", 4, &v));
    assert_span(s, v, "1");
    assert_true(http_cookie_find(s, &p.rq, "a", 1, &v));
    assert_span(s, v, "b=c");
    assert_true(http_cookie_find(s, &p.rq, "other", 5, &v));
    assert_span(s, v, "2"); /* in the second Cookie header */
    assert_true(http_cookie_find(s, &p.rq, "q", 1, &v));
    assert_span(s, v, "quoted v");
    assert_false(http_cookie_find(s, &p.rq, "si", 2, &v));
    assert_false(http_cookie_find(s, &p.rq, "flag", 4, &v)); /* no '=' */
    assert_false(http_cookie_find(s, &p.rq, "zz", 2, &v));   /* not Cookie */
    assert_false(http_cookie_find(s, &p.rq, "SID", 3, &v));  /* case */
    assert_key(s, &p, CONF_HASH_KEY_COOKIE, "sid", "abc");
    assert_key(s, &p, CONF_HASH_KEY_COOKIE, "empty", NULL);
    assert_key(s, &p, CONF_HASH_KEY_COOKIE, "nope", NULL);
}

static void
test_key_query(void **state)
{
    static const char s[] = "GET /p?ab=1&a=2&flag&e=&last=9 HTTP/1.1\r\n"
                            "Host: h\r\n\r\n";
    struct preq p;
    struct proto_span v;

    (void)state;
    req_ok(&p, s);
    assert_true(http_query_find(s, &p.rq, "ab", 2, &v));
    assert_span(s, v, "1"); /* first */
    assert_true(http_query_find(s, &p.rq, "a", 1, &v));
    assert_span(s, v, "2"); /* middle, not ab's */
    assert_true(http_query_find(s, &p.rq, "last", 4, &v));
    assert_span(s, v, "9"); /* last */
    assert_true(http_query_find(s, &p.rq, "e", 1, &v));
    assert_int_equal(v.len, 0);
    assert_false(http_query_find(s, &p.rq, "flag", 4, &v)); /* no '=' */
    assert_false(http_query_find(s, &p.rq, "las", 3, &v));
    assert_key(s, &p, CONF_HASH_KEY_QUERY, "a", "2");
    assert_key(s, &p, CONF_HASH_KEY_QUERY, "flag", NULL);
    assert_key(s, &p, CONF_HASH_KEY_QUERY, "e", NULL);
    /* no query at all */
    {
        static const char t[] = "GET /p HTTP/1.1\r\nHost: h\r\n\r\n";
        req_ok(&p, t);
        assert_false(http_query_find(t, &p.rq, "a", 1, &v));
        assert_key(t, &p, CONF_HASH_KEY_QUERY, "a", NULL);
    }
}

static void
test_key_chain(void **state)
{
    static const char s[] = "GET /Some/Path?e=&u=7 HTTP/1.1\r\n"
                            "Host: WWW.Example.COM\r\n\r\n";
    struct conf_key_source chain[4];
    struct preq p;
    char out[64], got[256];
    const char *key;
    size_t klen, i;

    (void)state;
    req_ok(&p, s);
    assert_key(s, &p, CONF_HASH_KEY_PATH, "", "/Some/Path");
    assert_key(s, &p, CONF_HASH_KEY_URI, "", "/Some/Path?e=&u=7");
    assert_key(s, &p, CONF_HASH_KEY_HOST, "", "www.example.com");
    assert_key(s, &p, CONF_HASH_KEY_SOURCE_IP, "", "192.0.2.7");
    assert_key(s, &p, CONF_HASH_KEY_SOURCE_IP_PORT, "", "192.0.2.7:5000");
    /* the first link present and not empty */
    chain[0] = link_of(CONF_HASH_KEY_COOKIE, "sid");
    chain[1] = link_of(CONF_HASH_KEY_QUERY, "e");
    chain[2] = link_of(CONF_HASH_KEY_QUERY, "u");
    chain[3] = link_of(CONF_HASH_KEY_HOST, "");
    i = http_request_key(s, &p.rq, chain, 4, "192.0.2.7", "192.0.2.7:1", out,
                         sizeof(out), &key, &klen);
    assert_int_equal(i, 2);
    assert_int_equal(klen, 1);
    assert_memory_equal(key, "7", 1);
    /* none present: the client's IP, and the index n */
    chain[2] = link_of(CONF_HASH_KEY_HEADER, "X-None");
    chain[3] = link_of(CONF_HASH_KEY_QUERY, "x");
    i = http_request_key(s, &p.rq, chain, 4, "192.0.2.7", "192.0.2.7:1", out,
                         sizeof(out), &key, &klen);
    assert_int_equal(i, 4);
    assert_int_equal(klen, strlen("192.0.2.7"));
    assert_memory_equal(key, "192.0.2.7", klen);
    /* a 1.0 request with no Host: the host link is absent */
    req_ok(&p, "GET / HTTP/1.0\r\n\r\n");
    assert_int_equal(key_of("GET / HTTP/1.0\r\n\r\n", &p,
                            link_of(CONF_HASH_KEY_HOST, ""), got, sizeof(got)),
                     1);
    /* the host of an absolute-form target, lower-cased */
    {
        static const char a[] =
            "GET http://A.B:80/x HTTP/1.1\r\nHost: c\r\n\r\n";
        req_ok(&p, a);
        assert_key(a, &p, CONF_HASH_KEY_HOST, "", "a.b:80");
    }
}

/* ---- chashd's own answers ------------------------------------------------ */

/* <out> (<n> bytes) is one well-formed response with <status>, closing or
 * not, its body exactly Content-Length bytes of one line; its body. */
static const char *
check_error_response(const char *out, size_t n, int status, bool close,
                     unsigned retry)
{
    struct presp p;
    const struct proto_span *v;
    char want[64];

    assert_true(n > 0);
    assert_int_equal(resp_parse(&p, out, n, HTTP_GET, MAX_HEAD), PROTO_OK);
    assert_int_equal(p.rp.status, status);
    assert_int_equal(p.rp.minor, 1);
    assert_int_equal(p.rp.body, HTTP_BODY_LENGTH);
    assert_int_equal(p.rp.head + p.rp.length, n);
    assert_int_equal(p.rp.keep_alive, !close);
    snprintf(want, sizeof(want), "HTTP/1.1 %d %s\r\n", status,
             http_reason(status));
    assert_memory_equal(out, want, strlen(want));
    v = http_header_find(out, p.h, p.rp.nheaders, "Content-Type", 12);
    assert_non_null(v);
    assert_span(out, *v, "text/plain");
    v = http_header_find(out, p.h, p.rp.nheaders, "Retry-After", 11);
    if (retry == 0) {
        assert_null(v);
    } else {
        snprintf(want, sizeof(want), "%u", retry);
        assert_non_null(v);
        assert_span(out, *v, want);
    }
    /* the body: one line, no control byte before its LF */
    for (size_t i = p.rp.head; i + 1 < n; i++)
        assert_true((unsigned char)out[i] >= 0x20);
    assert_int_equal(out[n - 1], '\n');
    return out + p.rp.head;
}

static void
test_error_response(void **state)
{
    char out[1024], detail[400];
    const char *body;
    size_t n;

    (void)state;
    n = http_error_response(out, sizeof(out), 503, "no member is up", true, 5);
    body = check_error_response(out, n, 503, true, 5);
    assert_string_equal(body, "503 Service Unavailable: no member is up\n");
    n = http_error_response(out, sizeof(out), 400, "a duplicate Host", false,
                            0);
    body = check_error_response(out, n, 400, false, 0);
    assert_string_equal(body, "400 Bad Request: a duplicate Host\n");
    n = http_error_response(out, sizeof(out), 502, NULL, true, 0);
    body = check_error_response(out, n, 502, true, 0);
    assert_string_equal(body, "502 Bad Gateway\n");
    /* a detail with CR LF cannot add a header or a line */
    n = http_error_response(out, sizeof(out), 400,
                            "bad\r\nX-Injected: 1\r\n\r\nmore", true, 0);
    body = check_error_response(out, n, 400, true, 0);
    assert_null(strstr(out, "\r\nX-Injected"));
    assert_string_equal(body, "400 Bad Request: bad  X-Injected: 1    more\n");
    /* a detail too long for the body is cut, and stays one line, even
     * when the cut falls next to a CR or an LF */
    for (size_t at = 200; at < sizeof(detail) - 1; at++) {
        memset(detail, 'x', sizeof(detail));
        detail[sizeof(detail) - 1] = '\0';
        detail[at] = at % 2 ? '\r' : '\n';
        n = http_error_response(out, sizeof(out), 503, detail, true, 0);
        check_error_response(out, n, 503, true, 0);
    }
    /* too small a buffer: nothing */
    assert_int_equal(http_error_response(out, 40, 503, "x", true, 0), 0);
    n = http_error_response(out, sizeof(out), 431, "", true, 0);
    check_error_response(out, n, 431, true, 0);
    assert_string_equal(http_reason(431), "Request Header Fields Too Large");
    assert_string_equal(http_reason(299), "Unknown");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_post_length),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_http10),
        cmocka_unit_test(test_absolute_form),
        cmocka_unit_test(test_options_star),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_methods),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_hop_by_hop),
        cmocka_unit_test(test_header_values),
        cmocka_unit_test(test_header_count),
        cmocka_unit_test(test_refuse_framing),
        cmocka_unit_test(test_refuse_lines),
        cmocka_unit_test(test_refuse_sizes),
        cmocka_unit_test(test_refuse_request_line),
        cmocka_unit_test(test_refuse_host_expect),
        cmocka_unit_test(test_response_status_line),
        cmocka_unit_test(test_response_framing),
        cmocka_unit_test(test_chunked_valid),
        cmocka_unit_test(test_chunked_invalid),
        cmocka_unit_test(test_key_header),
        cmocka_unit_test(test_key_cookie),
        cmocka_unit_test(test_key_query),
        cmocka_unit_test(test_key_chain),
        cmocka_unit_test(test_error_response),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

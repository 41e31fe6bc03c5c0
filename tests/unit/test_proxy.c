/* test_proxy.c -- the PROXY protocol parser and writer: every valid form
 * of versions 1 and 2 (the spec's examples and limits), each fed byte by
 * byte (AGAIN until whole, then the same header), write -> parse round
 * trips for every family, and a list of invalid headers, each refused
 * with the reason that names its fault.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include <cmocka.h>

#include "conf/conf.h"
#include "proto/proxy.h"

#define V2_SIG "\r\n\r\n\0\r\nQUIT\n"

/* "ip port" of <sa>, as the tests spell what they expect. */
static const char *
endpoint_text(const struct sockaddr_storage *sa, socklen_t len, char *buf,
              size_t cap)
{
    char ip[INET6_ADDRSTRLEN];

    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        assert_int_equal(len, sizeof(*s));
        inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
        snprintf(buf, cap, "%s %u", ip, ntohs(s->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        assert_int_equal(len, sizeof(*s));
        inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
        snprintf(buf, cap, "%s %u", ip, ntohs(s->sin6_port));
    } else {
        snprintf(buf, cap, "family %d", sa->ss_family);
    }
    return buf;
}

/* Parse <buf>[0..<len>) whole, then every prefix of the header (AGAIN
 * each time), then the header with bytes after it (the same header):
 * returns the header. <hlen> is the header's expected length. */
static struct proxy_header
parse_ok(const char *buf, size_t len, size_t hlen)
{
    struct proxy_header h, again;
    const char *err = NULL;
    int r;

    r = proxy_parse(buf, len, &h, &err);
    if (r != PROXY_OK)
        fail_msg("refused: %s", err ? err : "(AGAIN)");
    assert_int_equal(h.len, hlen);
    for (size_t k = 0; k < hlen; k++) {
        err = NULL;
        r = proxy_parse(buf, k, &again, &err);
        if (r != PROXY_AGAIN)
            fail_msg("prefix of %zu bytes: %d (%s)", k, r, err ? err : "");
    }
    /* exactly the header, then the header and what follows it */
    assert_int_equal(proxy_parse(buf, hlen, &again, &err), PROXY_OK);
    assert_memory_equal(&again, &h, sizeof(h));
    return h;
}

/* <buf> (<len> bytes) refused with a reason containing <why>; and so
 * are its extensions: more bytes never make an invalid header valid. */
static void
parse_invalid(const char *buf, size_t len, const char *why)
{
    struct proxy_header h;
    const char *err = NULL;
    char longer[PROXY_V2_MAX + 64];

    if (proxy_parse(buf, len, &h, &err) != PROXY_INVALID)
        fail_msg("accepted (or AGAIN): %.*s", (int)len, buf);
    assert_non_null(err);
    if (strstr(err, why) == NULL)
        fail_msg("reason \"%s\" does not say \"%s\"", err, why);
    assert_true(len + 10 <= sizeof(longer));
    memcpy(longer, buf, len);
    memcpy(longer + len, "\r\n\r\nabcdef", 10);
    assert_int_equal(proxy_parse(longer, len + 10, &h, &err), PROXY_INVALID);
}

#define S(lit) (lit), sizeof(lit) - 1

/* ---- version 1 ----------------------------------------------------------- */

static void
test_v1_tcp4(void **state)
{
    static const char line[] = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 "
                               "443\r\nGET / HTTP/1.1\r\n";
    struct proxy_header h;
    char t[64];

    (void)state;
    h = parse_ok(S(line), strchr(line, '\n') + 1 - line);
    assert_int_equal(h.version, 1);
    assert_false(h.local);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        "192.168.0.1 56324");
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "192.168.0.11 443");
    /* the spec's longest IPv4 line, 56 bytes, and ports 0 */
    h = parse_ok(S("PROXY TCP4 255.255.255.255 255.255.255.255 65535 "
                   "65535\r\n"),
                 56);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        "255.255.255.255 65535");
    h = parse_ok(S("PROXY TCP4 0.0.0.0 10.0.0.1 0 0\r\n"), 33);
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "10.0.0.1 0");
}

static void
test_v1_tcp6(void **state)
{
    static const char longest[] =
        "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    struct proxy_header h;
    char t[80];

    (void)state;
    h = parse_ok(S("PROXY TCP6 2001:db8::1 ::1 40000 6379\r\nPING\r\n"), 39);
    assert_false(h.local);
    assert_int_equal(h.src.ss_family, AF_INET6);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        "2001:db8::1 40000");
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "::1 6379");
    /* the spec's longest TCP6 line: 104 bytes */
    assert_int_equal(sizeof(longest) - 1, 104);
    h = parse_ok(S(longest), 104);
    /* upper case, and an IPv4-mapped address as inet_ntop writes it */
    h = parse_ok(S("PROXY TCP6 2001:DB8::A ::ffff:10.1.2.3 1 2\r\n"), 44);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        "2001:db8::a 1");
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "::ffff:10.1.2.3 2");
}

static void
test_v1_unknown(void **state)
{
    char line[PROXY_V1_MAX + 8];
    struct proxy_header h;

    (void)state;
    h = parse_ok(S("PROXY UNKNOWN\r\n"), 15);
    assert_true(h.local);
    assert_int_equal(h.version, 1);
    /* anything before the CRLF is ignored, up to 107 bytes in all */
    h = parse_ok(S("PROXY UNKNOWN 1.2.3.4 what ever \x01\xff 9\r\nX"), 38);
    assert_true(h.local);
    memset(line, 'x', sizeof(line));
    memcpy(line, "PROXY UNKNOWN ", 14);
    memcpy(line + PROXY_V1_MAX - 2, "\r\n", 2);
    h = parse_ok(line, PROXY_V1_MAX, PROXY_V1_MAX);
    assert_true(h.local);
    /* one byte more: no CRLF in the first 107 */
    memset(line, 'x', sizeof(line));
    memcpy(line, "PROXY UNKNOWN ", 14);
    memcpy(line + PROXY_V1_MAX - 1, "\r\n", 2);
    parse_invalid(line, PROXY_V1_MAX + 1, "no CRLF in the first 107");
}

/* ---- version 2 ----------------------------------------------------------- */

/* A v2 header: signature, <ver_cmd>, <fam>, the length of <body>, <body>
 * (<n> bytes). Returns its length. */
static size_t
v2(char *out, unsigned ver_cmd, unsigned fam, const void *body, size_t n)
{
    memcpy(out, V2_SIG, 12);
    out[12] = (char)ver_cmd;
    out[13] = (char)fam;
    out[14] = (char)(n >> 8);
    out[15] = (char)n;
    if (n > 0)
        memcpy(out + 16, body, n);
    return 16 + n;
}

static void
test_v2_tcp4(void **state)
{
    /* 192.168.0.1:56324 -> 192.168.0.11:443, then a NOOP TLV (padding,
     * 3 bytes of zeros) and an AUTHORITY TLV */
    static const unsigned char body[] = {
        192,  168,  0, 1, 192, 168, 0,    11,   0xDC, 0x04, 0x01, 0xBB,
        0x04, 0x00, 3, 0, 0,   0,   0x02, 0x00, 0x03, 'a',  '.',  'b'};
    char buf[128];
    struct proxy_header h;
    size_t n;
    char t[64];

    (void)state;
    n = v2(buf, 0x21, 0x11, body, sizeof(body));
    memcpy(buf + n, "GET /", 5);
    h = parse_ok(buf, n + 5, n);
    assert_int_equal(h.version, 2);
    assert_false(h.local);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        "192.168.0.1 56324");
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "192.168.0.11 443");
    /* the addresses alone */
    n = v2(buf, 0x21, 0x11, body, 12);
    h = parse_ok(buf, n, 28);
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "192.168.0.11 443");
}

static void
test_v2_tcp6(void **state)
{
    unsigned char body[36] = {0};
    char buf[128];
    struct proxy_header h;
    size_t n;
    char t[80];

    (void)state;
    inet_pton(AF_INET6, "2001:db8::7", body);
    inet_pton(AF_INET6, "::1", body + 16);
    body[32] = 0x9C, body[33] = 0x40; /* 40000 */
    body[34] = 0x18, body[35] = 0xEB; /* 6379 */
    n = v2(buf, 0x21, 0x21, body, sizeof(body));
    h = parse_ok(buf, n, 52);
    assert_false(h.local);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        "2001:db8::7 40000");
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        "::1 6379");
}

/* LOCAL, and the families the spec lets a receiver take as UNSPEC: the
 * connection's own addresses. */
static void
test_v2_local_and_unspec(void **state)
{
    unsigned char body[300];
    char buf[400];
    struct proxy_header h;
    size_t n;

    (void)state;
    memset(body, 0x5A, sizeof(body));
    /* LOCAL: no addresses; or some that are ignored, family too */
    h = parse_ok(buf, v2(buf, 0x20, 0x00, NULL, 0), 16);
    assert_true(h.local);
    assert_int_equal(h.version, 2);
    h = parse_ok(buf, v2(buf, 0x20, 0x11, body, 12), 28);
    assert_true(h.local);
    h = parse_ok(buf, v2(buf, 0x20, 0xFF, body, 7), 23);
    assert_true(h.local);
    /* PROXY over UNSPEC, UDP, unix stream and datagram */
    h = parse_ok(buf, v2(buf, 0x21, 0x00, body, 5), 21);
    assert_true(h.local);
    body[12] = 0x00, body[13] = 0x00, body[14] = 0x00; /* a NOOP TLV */
    h = parse_ok(buf, v2(buf, 0x21, 0x12, body, 15), 31);
    assert_true(h.local);
    h = parse_ok(buf, v2(buf, 0x21, 0x22, body, 36), 52);
    assert_true(h.local);
    n = v2(buf, 0x21, 0x31, body, 216);
    h = parse_ok(buf, n, 232);
    assert_true(h.local);
    h = parse_ok(buf, v2(buf, 0x21, 0x32, body, 216), 232);
    assert_true(h.local);
}

/* The longest header taken, and one byte more. */
static void
test_v2_bound(void **state)
{
    static char buf[PROXY_V2_MAX + 64];
    static unsigned char body[PROXY_V2_MAX];
    struct proxy_header h;
    const char *err;
    size_t tlv = PROXY_V2_MAX - 16 - 12 - 3;

    (void)state;
    memset(body, 0, sizeof(body));
    body[12] = 0x04; /* NOOP */
    body[13] = (unsigned char)(tlv >> 8);
    body[14] = (unsigned char)tlv;
    assert_int_equal(v2(buf, 0x21, 0x11, body, 12 + 3 + tlv), PROXY_V2_MAX);
    assert_int_equal(proxy_parse(buf, PROXY_V2_MAX, &h, &err), PROXY_OK);
    assert_int_equal(h.len, PROXY_V2_MAX);
    assert_int_equal(proxy_parse(buf, PROXY_V2_MAX - 1, &h, &err), PROXY_AGAIN);
    tlv++;
    body[13] = (unsigned char)(tlv >> 8);
    body[14] = (unsigned char)tlv;
    v2(buf, 0x21, 0x11, body, 12 + 3 + tlv);
    /* refused from its 16th byte on: no waiting for 4 KiB */
    parse_invalid(buf, 16, "longer than 4096");
}

/* ---- invalid ------------------------------------------------------------- */

static void
test_v1_invalid(void **state)
{
    static const struct {
        const char *line;
        const char *why;
    } cases[] = {
        {"GET / HTTP/1.1\r\n", "not a PROXY header"},
        {"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "not a PROXY header"},
        {"PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n", "not a PROXY header"},
        {"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"},
        {"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"},
        {"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"},
        {"PROXY TCP4\r\n", "TCP4, TCP6 or UNKNOWN"},
        {"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "empty source address"},
        {"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "empty destination address"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8  1 2\r\n", "source port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1  2\r\n", "destination port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 65536 80\r\n", "source port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 80 65536\r\n", "destination port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 99999 80\r\n", "source port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 080 80\r\n", "source port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 80 00\r\n", "destination port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 -1 80\r\n", "source port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 +1 80\r\n", "source port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "destination port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "destination port"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "CR not followed by LF"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", "CR not followed by LF"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "source port"},
        {"PROXY TCP4 ::1 ::1 1 2\r\n", "not its family's in the source"},
        {"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", "not its family's in the dest"},
        {"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "source address is not"},
        {"PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n", "source address is not"},
        {"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", "source address is not"},
        {"PROXY TCP4 1.2.3.4 5.6.7.8.9 1 2\r\n", "destination address is"},
        {"PROXY TCP4 1.2.3.4 1111.2222.3333.44 1 2\r\n",
         "destination address too long"},
        {"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "source address is not"},
        {"PROXY TCP6 ::1 1::2::3 1 2\r\n", "destination address is not"},
        {"PROXY TCP6 ::1 [::1] 1 2\r\n", "not its family's in the dest"},
        {"PROXY TCP6 ::g ::1 1 2\r\n", "not its family's in the source"},
        {"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n", "not its family's"},
        {"PROXY UNKNOWN\n", "neither a space nor CRLF"},
        {"PROXY UNKNOWN foo\n", "LF alone"},
        {"PROXY UNKNOWN 1 2\rx\r\n", "CR not followed by LF"},
        {"PROXY UNKNOWNX\r\n", "neither a space nor CRLF"},
        {"PROXY UNKNOWN\r\r\n", "CR not followed by LF"},
    };
    struct proxy_header h;
    const char *err;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        parse_invalid(cases[i].line, strlen(cases[i].line), cases[i].why);
    /* a v6 line of more than 107 bytes: the longest addresses with
     * their IPv4 tails, and long ports */
    parse_invalid(S("PROXY TCP6 0000:0000:0000:0000:0000:ffff:255.255.255.255 "
                    "0000:0000:0000:0000:0000:ffff:255.255.255.255 65535 "
                    "65535\r\n"),
                  "no CRLF in the first 107");
    /* a prefix that could still become valid waits */
    assert_int_equal(proxy_parse(S("PROXY TCP"), &h, &err), PROXY_AGAIN);
    assert_int_equal(proxy_parse(S("PROXY UNKN"), &h, &err), PROXY_AGAIN);
    assert_int_equal(proxy_parse(S("PROXY UNKNOWN"), &h, &err), PROXY_AGAIN);
    assert_int_equal(
        proxy_parse(S("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"), &h, &err),
        PROXY_AGAIN);
    /* a client speaking another protocol is refused on its first byte */
    assert_int_equal(proxy_parse(S("G"), &h, &err), PROXY_INVALID);
    assert_int_equal(proxy_parse(S("*1\r\n"), &h, &err), PROXY_INVALID);
}

static void
test_v2_invalid(void **state)
{
    unsigned char body[64];
    char buf[128];
    size_t n;

    (void)state;
    memset(body, 1, sizeof(body));
    /* the signature, one byte wrong, refused at that byte */
    n = v2(buf, 0x21, 0x11, body, 12);
    buf[4] = 'x';
    parse_invalid(buf, n, "not a PROXY header");
    parse_invalid(buf, 5, "not a PROXY header");
    n = v2(buf, 0x21, 0x11, body, 12);
    buf[11] = '\r';
    parse_invalid(buf, n, "not a PROXY header");
    /* version 1 or 3 in the binary form, commands 2 and 15 */
    parse_invalid(buf, v2(buf, 0x11, 0x11, body, 12), "version is not 2");
    parse_invalid(buf, v2(buf, 0x31, 0x11, body, 12), "version is not 2");
    parse_invalid(buf, 13, "version is not 2");
    parse_invalid(buf, v2(buf, 0x22, 0x11, body, 12), "neither LOCAL nor");
    parse_invalid(buf, v2(buf, 0x2F, 0x11, body, 12), "neither LOCAL nor");
    /* families and transports the spec does not define */
    parse_invalid(buf, v2(buf, 0x21, 0x41, body, 12), "address family");
    parse_invalid(buf, v2(buf, 0x21, 0x13, body, 12), "address family");
    parse_invalid(buf, v2(buf, 0x21, 0x10, body, 12), "address family");
    parse_invalid(buf, v2(buf, 0x21, 0x01, body, 12), "address family");
    parse_invalid(buf, 14, "address family");
    /* a length shorter than the family's addresses */
    parse_invalid(buf, v2(buf, 0x21, 0x11, body, 11), "shorter than");
    parse_invalid(buf, v2(buf, 0x21, 0x21, body, 35), "shorter than");
    parse_invalid(buf, v2(buf, 0x21, 0x11, body, 0), "shorter than");
    parse_invalid(buf, 16, "shorter than"); /* judged on the length field */
    /* TLVs that run past the header: 2 bytes of one, a length of 5
     * with 4 bytes */
    parse_invalid(buf, v2(buf, 0x21, 0x11, body, 14), "TLV");
    body[13] = 0, body[14] = 5;
    parse_invalid(buf, v2(buf, 0x21, 0x11, body, 12 + 3 + 4), "TLV");
}

/* ---- writing ------------------------------------------------------------- */

static struct sockaddr_storage
sa4(const char *ip, uint16_t port, socklen_t *len)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *s = (struct sockaddr_in *)&ss;

    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
    *len = sizeof(*s);
    return ss;
}

static struct sockaddr_storage
sa6(const char *ip, uint16_t port, socklen_t *len)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

    s->sin6_family = AF_INET6;
    s->sin6_port = htons(port);
    assert_int_equal(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
    *len = sizeof(*s);
    return ss;
}

/* Write <src> -> <dst> as <version>, parse it back: the header must be
 * whole, of that version, and give <want_src> and <want_dst> ("ip port",
 * or NULL for a local header). Returns its length. */
static size_t
round_trip(int version, const struct sockaddr_storage *src, socklen_t srclen,
           const struct sockaddr_storage *dst, socklen_t dstlen,
           const char *want_src, const char *want_dst, char *out)
{
    struct proxy_header h;
    size_t n;
    char t[80];

    n = proxy_write(version, (const struct sockaddr *)src, srclen,
                    (const struct sockaddr *)dst, dstlen, out, PROXY_WRITE_MAX);
    assert_true(n > 0 && n <= PROXY_WRITE_MAX);
    h = parse_ok(out, n, n);
    assert_int_equal(h.version, version == CONF_PROXY_V1 ? 1 : 2);
    if (want_src == NULL) {
        assert_true(h.local);
        return n;
    }
    assert_false(h.local);
    assert_string_equal(endpoint_text(&h.src, h.srclen, t, sizeof(t)),
                        want_src);
    assert_string_equal(endpoint_text(&h.dst, h.dstlen, t, sizeof(t)),
                        want_dst);
    return n;
}

static void
test_write_round_trips(void **state)
{
    struct sockaddr_storage a, b;
    struct sockaddr_un un = {.sun_family = AF_UNIX, .sun_path = "/tmp/s"};
    socklen_t al, bl;
    char out[PROXY_WRITE_MAX];
    int versions[] = {CONF_PROXY_V1, CONF_PROXY_V2};

    (void)state;
    for (size_t i = 0; i < 2; i++) {
        int v = versions[i];

        a = sa4("127.0.3.7", 41000, &al);
        b = sa4("127.0.0.1", 8080, &bl);
        round_trip(v, &a, al, &b, bl, "127.0.3.7 41000", "127.0.0.1 8080", out);
        a = sa6("2001:db8::5", 0, &al);
        b = sa6("::1", 65535, &bl);
        round_trip(v, &a, al, &b, bl, "2001:db8::5 0", "::1 65535", out);
        /* IPv4-mapped: written as IPv4 */
        a = sa6("::ffff:127.0.0.9", 5, &al);
        b = sa6("::ffff:127.0.0.1", 6, &bl);
        round_trip(v, &a, al, &b, bl, "127.0.0.9 5", "127.0.0.1 6", out);
        /* IPv4 to IPv6: both IPv6 */
        a = sa4("10.0.0.1", 7, &al);
        b = sa6("fe80::1", 8, &bl);
        round_trip(v, &a, al, &b, bl, "::ffff:10.0.0.1 7", "fe80::1 8", out);
        /* a unix socket on either side: UNKNOWN or LOCAL */
        round_trip(v, &a, al, (struct sockaddr_storage *)&un, sizeof(un), NULL,
                   NULL, out);
        round_trip(v, (struct sockaddr_storage *)&un, sizeof(un), &b, bl, NULL,
                   NULL, out);
        /* a length too short for the family */
        round_trip(v, &a, al - 1, &b, bl, NULL, NULL, out);
    }
}

static void
test_write_exact_bytes(void **state)
{
    static const char v2_tcp4[] = V2_SIG "\x21\x11\x00\x0C"
                                         "\x7F\x00\x03\x07\x7F\x00\x00\x01"
                                         "\xA0\x28\x1F\x90";
    struct sockaddr_storage a, b;
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    socklen_t al, bl;
    char out[PROXY_WRITE_MAX];
    size_t n;

    (void)state;
    a = sa4("127.0.3.7", 41000, &al);
    b = sa4("127.0.0.1", 8080, &bl);
    n = proxy_write(CONF_PROXY_V1, (struct sockaddr *)&a, al,
                    (struct sockaddr *)&b, bl, out, sizeof(out));
    assert_int_equal(n,
                     strlen("PROXY TCP4 127.0.3.7 127.0.0.1 41000 8080\r\n"));
    assert_memory_equal(out, "PROXY TCP4 127.0.3.7 127.0.0.1 41000 8080\r\n",
                        n);
    /* exactly the room it needs, and one byte less */
    assert_int_equal(proxy_write(CONF_PROXY_V1, (struct sockaddr *)&a, al,
                                 (struct sockaddr *)&b, bl, out, n + 1),
                     n);
    assert_int_equal(proxy_write(CONF_PROXY_V1, (struct sockaddr *)&a, al,
                                 (struct sockaddr *)&b, bl, out, n),
                     0);
    n = proxy_write(CONF_PROXY_V2, (struct sockaddr *)&a, al,
                    (struct sockaddr *)&b, bl, out, sizeof(out));
    assert_int_equal(n, sizeof(v2_tcp4) - 1);
    assert_memory_equal(out, v2_tcp4, n);
    assert_int_equal(proxy_write(CONF_PROXY_V2, (struct sockaddr *)&a, al,
                                 (struct sockaddr *)&b, bl, out, n - 1),
                     0);
    /* the unknown forms */
    n = proxy_write(CONF_PROXY_V1, (struct sockaddr *)&un, sizeof(un),
                    (struct sockaddr *)&b, bl, out, sizeof(out));
    assert_int_equal(n, 15);
    assert_memory_equal(out, "PROXY UNKNOWN\r\n", 15);
    n = proxy_write(CONF_PROXY_V2, (struct sockaddr *)&un, sizeof(un),
                    (struct sockaddr *)&b, bl, out, sizeof(out));
    assert_int_equal(n, 16);
    assert_memory_equal(out, V2_SIG "\x20\x00\x00\x00", 16);
    /* the longest: v1 between two full IPv6 addresses */
    a = sa6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 65535, &al);
    b = sa6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535, &bl);
    n = proxy_write(CONF_PROXY_V1, (struct sockaddr *)&a, al,
                    (struct sockaddr *)&b, bl, out, sizeof(out));
    assert_int_equal(n, 104);
    /* neither version */
    assert_int_equal(proxy_write(CONF_PROXY_OFF, (struct sockaddr *)&a, al,
                                 (struct sockaddr *)&b, bl, out, sizeof(out)),
                     0);
}

/* Every valid header with each of its bytes replaced by a few others:
 * no crash, and a header that still parses lies within the bytes. */
static void
test_mutations(void **state)
{
    static const unsigned char subst[] = {0,   ' ', '\r', '\n', '0', '9',
                                          ':', '.', 0xFF, 0x21, 0x11};
    struct sockaddr_storage a, b;
    socklen_t al, bl;
    char hdr[4][PROXY_WRITE_MAX];
    size_t len[4];
    struct proxy_header h;
    const char *err;

    (void)state;
    a = sa4("192.0.2.1", 1234, &al);
    b = sa4("198.51.100.2", 80, &bl);
    len[0] = proxy_write(CONF_PROXY_V1, (struct sockaddr *)&a, al,
                         (struct sockaddr *)&b, bl, hdr[0], PROXY_WRITE_MAX);
    len[1] = proxy_write(CONF_PROXY_V2, (struct sockaddr *)&a, al,
                         (struct sockaddr *)&b, bl, hdr[1], PROXY_WRITE_MAX);
    a = sa6("2001:db8::1", 1234, &al);
    b = sa6("2001:db8::2", 80, &bl);
    len[2] = proxy_write(CONF_PROXY_V1, (struct sockaddr *)&a, al,
                         (struct sockaddr *)&b, bl, hdr[2], PROXY_WRITE_MAX);
    len[3] = proxy_write(CONF_PROXY_V2, (struct sockaddr *)&a, al,
                         (struct sockaddr *)&b, bl, hdr[3], PROXY_WRITE_MAX);
    for (size_t k = 0; k < 4; k++) {
        for (size_t i = 0; i < len[k]; i++) {
            for (size_t j = 0; j < sizeof(subst); j++) {
                char m[PROXY_WRITE_MAX];
                int r;

                memcpy(m, hdr[k], len[k]);
                m[i] = (char)subst[j];
                err = NULL;
                r = proxy_parse(m, len[k], &h, &err);
                if (r == PROXY_OK)
                    assert_true(h.len > 0 && h.len <= len[k]);
                else if (r == PROXY_INVALID)
                    assert_non_null(err);
                else
                    assert_int_equal(r, PROXY_AGAIN);
            }
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_tcp4),
        cmocka_unit_test(test_v1_tcp6),
        cmocka_unit_test(test_v1_unknown),
        cmocka_unit_test(test_v2_tcp4),
        cmocka_unit_test(test_v2_tcp6),
        cmocka_unit_test(test_v2_local_and_unspec),
        cmocka_unit_test(test_v2_bound),
        cmocka_unit_test(test_v1_invalid),
        cmocka_unit_test(test_v2_invalid),
        cmocka_unit_test(test_write_round_trips),
        cmocka_unit_test(test_write_exact_bytes),
        cmocka_unit_test(test_mutations),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* http_diff.c -- chashd's strict http parser against libhttp-parser
 * (Debian's libhttp-parser-dev) on generated requests: valid ones with
 * random methods, targets, headers, values and bodies, and mutations of
 * them, each named by its category. On inputs both accept, the method,
 * target, version, header names and values, keep-alive, the body's bytes
 * and the request's length must agree exactly. An input only one of them
 * accepts must be of a category expected for that side: ours is stricter
 * by design (obs-fold, bare LF, ...), and where libhttp-parser is the
 * stricter one the category must be in the allow-list below with its
 * reason. Prints a summary; exits 1 on any unexpected difference.
 *
 *   http_diff [-n COUNT] [-s SEED] [-v] [-k]
 *
 * -k (a self-check of the comparison) flips one bit of every target our
 * side accepts: the run must then fail.
 *
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hp_side.h"
#include "proto/http.h"
#include "proto/proto.h"

#define REQ_MAX 16384
#define MAX_HEAD 8192
#define MAX_URI 4096

static bool verbose, sabotage;

/* ---- what is expected to differ ------------------------------------------ */

/* Which parser accepted an input the other did not. */
enum side { OURS_STRICTER, HP_STRICTER };

static const struct expected {
    const char *category;
    int side; /* enum side */
    const char *reason;
} expected[] = {
    {"obs_fold", OURS_STRICTER,
     "RFC 9112 5.2: obs-fold refused (libhttp-parser unfolds it)"},
    {"bare_lf_header", OURS_STRICTER, "RFC 9112 2.2: a bare LF line end"},
    {"bare_lf_line", OURS_STRICTER, "RFC 9112 2.2: a bare LF line end"},
    {"bare_lf_end", OURS_STRICTER, "RFC 9112 2.2: a bare LF line end"},
    {"cl_19digits", OURS_STRICTER,
     "a Content-Length of more than 18 digits (overflow guard)"},
    {"te_gzip_chunked", OURS_STRICTER,
     "RFC 9112 6.1: codings other than chunked answered 501"},
    {"te_http10", OURS_STRICTER,
     "RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 request"},
    {"dup_te", OURS_STRICTER, "a duplicate Transfer-Encoding line"},
    {"ws_before_colon", OURS_STRICTER,
     "RFC 9112 5.1: whitespace between a field name and its colon"},
    {"no_host", OURS_STRICTER,
     "RFC 9112 3.2: an HTTP/1.1 request without Host"},
    {"dup_host", OURS_STRICTER, "RFC 9112 3.2: more than one Host"},
    {"host_space", OURS_STRICTER, "RFC 9112 3.2: an invalid Host value"},
    {"host_slash", OURS_STRICTER, "RFC 9112 3.2: an invalid Host value"},
    {"expect_other", OURS_STRICTER,
     "RFC 9110 10.1.1: an unknown expectation answered 417"},
    {"fragment", OURS_STRICTER,
     "RFC 9112 3.2: a fragment is not part of a request-target"},
    {"star_get", OURS_STRICTER, "RFC 9112 3.2.4: '*' is for OPTIONS only"},
    {"connect", OURS_STRICTER, "CONNECT is not served (405)"},
    {"version_20", OURS_STRICTER, "HTTP/2.0 on an HTTP/1 connection (505)"},
    {"version_12", OURS_STRICTER, "HTTP/1.2 does not exist (505)"},
    {"double_sp", OURS_STRICTER,
     "RFC 9112 3: exactly one SP between the request line's parts"},
    {"target_utf8", OURS_STRICTER,
     "RFC 3986: a target is visible ASCII (non-ASCII must be "
     "percent-encoded)"},
    {"chunk_ext_ctl", OURS_STRICTER, "a control byte in a chunk extension"},
    {"chunk_no_crlf", OURS_STRICTER,
     "RFC 9112 7.1: chunk data not followed by CRLF (libhttp-parser skips "
     "two bytes whatever they are: a smuggling vector)"},
    {"chunk_bare_lf", OURS_STRICTER,
     "RFC 9112 7.1: a chunk-size line ends in CRLF (libhttp-parser takes a "
     "bare LF after an extension)"},
    {"trailer_fold", OURS_STRICTER, "RFC 9112 5.2: obs-fold in a trailer"},
    {"flip_header", OURS_STRICTER,
     "a random byte in a header: ours refuses what RFC 9112 forbids"},
    {"flip_line", OURS_STRICTER,
     "a random byte in the request line: ours refuses what RFC 9112 "
     "forbids"},
    {"flip_body", OURS_STRICTER,
     "a random byte in a chunked body's framing: ours checks every CRLF"},
    /* libhttp-parser stricter: the allow-list */
    {"method_unknown", HP_STRICTER,
     "RFC 9110 9.1: a method is any token, case-sensitive; chashd passes "
     "methods it does not know to the member (which answers 501); "
     "libhttp-parser knows a fixed list"},
    {"flip_method", HP_STRICTER,
     "a random byte in the method that keeps it a token: an unknown method, "
     "passed on (see method_unknown)"},
};

static const struct expected *
expected_of(const char *category, int side)
{
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
        if (expected[i].side == side &&
            strcmp(expected[i].category, category) == 0)
            return &expected[i];
    return NULL;
}

/* ---- a deterministic generator --------------------------------------------
 */

static uint64_t rng_state;

static uint32_t
rnd(uint32_t n)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return n ? (uint32_t)(z % n) : 0;
}

static char
pick(const char *set)
{
    return set[rnd((uint32_t)strlen(set))];
}

/* A request under construction: its text, and where its parts are. */
struct req {
    char s[REQ_MAX];
    size_t len;
    size_t method_end, target_off, target_end, line_end, host_line;
    size_t head;   /* after the empty line */
    int body_kind; /* 0 none, 1 length, 2 chunked */
    int minor;
};

static void __attribute__((format(printf, 2, 3)))
put(struct req *r, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(r->s + r->len, sizeof(r->s) - r->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(r->s) - r->len) {
        fprintf(stderr, "http_diff: a generated request is too long\n");
        exit(2);
    }
    r->len += (size_t)n;
}

static void
put_bytes(struct req *r, const char *b, size_t n)
{
    if (n >= sizeof(r->s) - r->len) {
        fprintf(stderr, "http_diff: a generated request is too long\n");
        exit(2);
    }
    memcpy(r->s + r->len, b, n);
    r->len += n;
}

static const char tchar[] = "abcdefghijklmnopqrstuvwxyz"
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                            "!#$%&'*+-.^_`|~";
static const char pchar[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    "0123456789-._~!$&'()*+,;=:@%";
static const char vchar[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    "0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

static void
put_token(struct req *r, const char *set, size_t min, size_t max)
{
    size_t n = min + rnd((uint32_t)(max - min + 1));

    for (size_t i = 0; i < n; i++)
        put(r, "%c", pick(set));
}

/* A header value: visible bytes with inner spaces and tabs, sometimes
 * obs-text, sometimes OWS around it. */
static void
put_value(struct req *r)
{
    size_t n = rnd(40);

    if (rnd(4) == 0)
        put(r, "%s", rnd(2) ? " " : "\t");
    for (size_t i = 0; i < n; i++) {
        uint32_t k = rnd(20);
        if (k == 0 && i > 0 && i + 1 < n)
            put(r, " ");
        else if (k == 1 && i > 0 && i + 1 < n)
            put(r, "\t");
        else if (k == 2)
            put(r, "%c", (char)(0x80 + rnd(0x80)));
        else
            put(r, "%c", pick(vchar));
    }
    if (rnd(4) == 0)
        put(r, "%s", rnd(2) ? " " : " \t ");
}

static const char *const methods[] = {"GET",    "HEAD",    "POST",  "PUT",
                                      "DELETE", "OPTIONS", "PATCH", "TRACE"};

/* A valid request (RFC 9112 and our stricter reading) into <r>. */
static void
gen_valid(struct req *r)
{
    const char *m = methods[rnd(sizeof(methods) / sizeof(methods[0]))];
    size_t nh = rnd(12), blen;
    char body[512];

    r->len = 0;
    r->minor = rnd(5) == 0 ? 0 : 1;
    if (rnd(20) == 0)
        put(r, "\r\n"); /* an empty line before it (RFC 9112 2.2) */
    put(r, "%s", m);
    r->method_end = r->len;
    put(r, " ");
    r->target_off = r->len;
    if (rnd(8) == 0) {
        /* one rnd() a statement: argument order is unspecified, and a
         * seed must name the same inputs with any compiler */
        uint32_t h = rnd(100), port = 1 + rnd(65535);
        put(r, "http://h%u.example:%u", h, port);
    }
    for (size_t i = 0, n = 1 + rnd(4); i < n; i++) {
        put(r, "/");
        put_token(r, pchar, 0, 12);
    }
    if (rnd(2)) {
        put(r, "?");
        for (size_t i = 0, n = 1 + rnd(4); i < n; i++) {
            put(r, "%s", i ? "&" : "");
            put_token(r, pchar, 1, 6);
            put(r, "=");
            put_token(r, pchar, 0, 8);
        }
    }
    r->target_end = r->len;
    put(r, " HTTP/1.%d\r\n", r->minor);
    r->line_end = r->len;
    r->host_line = r->len;
    if (r->minor == 1 || rnd(2)) {
        const char *name = rnd(2) ? "www" : "API";
        uint32_t n = rnd(1000);
        const char *port = rnd(3) ? "" : ":8080";
        put(r, "Host: %s%u.example%s\r\n", name, n, port);
    } else {
        r->host_line = 0;
    }
    for (size_t i = 0; i < nh; i++) {
        switch (rnd(8)) {
        case 0:
            put(r, "Cookie: sid=%u; theme=dark\r\n", rnd(100000));
            break;
        case 1:
            put(r, "Connection: %s\r\n", rnd(2) ? "keep-alive" : "close");
            break;
        case 2: {
            uint32_t a = rnd(256), b = rnd(256), c = rnd(256);
            put(r, "X-Forwarded-For: 10.%u.%u.%u\r\n", a, b, c);
        } break;
        default:
            put(r, "X-");
            put_token(r, tchar, 1, 14);
            put(r, ":");
            put_value(r);
            put(r, "\r\n");
            break;
        }
    }
    if (r->minor == 1 && rnd(10) == 0)
        put(r, "Expect: 100-continue\r\n");
    blen = rnd(3) == 0 ? rnd(sizeof(body)) : 0;
    for (size_t i = 0; i < blen; i++)
        body[i] = (char)rnd(256);
    r->body_kind = blen == 0 && rnd(2) ? 0 : r->minor == 1 && rnd(2) ? 2 : 1;
    if (r->body_kind == 1)
        put(r, "Content-Length: %zu\r\n", blen);
    else if (r->body_kind == 2)
        put(r, "Transfer-Encoding: chunked\r\n");
    put(r, "\r\n");
    r->head = r->len;
    if (r->body_kind == 1) {
        put_bytes(r, body, blen);
    } else if (r->body_kind == 2) {
        size_t off = 0;
        while (off < blen) {
            size_t n = 1 + rnd((uint32_t)(blen - off));
            put(r, rnd(2) ? "%zx" : "%zX", n);
            if (rnd(5) == 0)
                put(r, ";ext=%u", rnd(10));
            put(r, "\r\n");
            put_bytes(r, body + off, n);
            put(r, "\r\n");
            off += n;
        }
        put(r, "0\r\n");
        if (rnd(4) == 0)
            put(r, "X-Checksum: %u\r\n", rnd(100000));
        put(r, "\r\n");
    }
}

/* ---- mutations -------------------------------------------------------------
 *
 * Each rewrites a valid request into one of a category. Offsets are the
 * generator's; a mutation that does not apply (a body mutation of a
 * request without that body) returns false and another is drawn. */

static void
splice(struct req *r, size_t at, size_t del, const char *ins, size_t ilen)
{
    if (r->len - del + ilen >= sizeof(r->s))
        exit(2);
    memmove(r->s + at + ilen, r->s + at + del, r->len - at - del);
    memcpy(r->s + at, ins, ilen);
    r->len = r->len - del + ilen;
}

static void
splice_str(struct req *r, size_t at, size_t del, const char *ins)
{
    splice(r, at, del, ins, strlen(ins));
}

/* Where a header line may be added: after the request line. */
static void
add_header(struct req *r, const char *line)
{
    splice_str(r, r->line_end, 0, line);
}

/* The offset of <what> in the head, or the head's end. */
static size_t
find_in_head(const struct req *r, const char *what)
{
    const char *p = memmem(r->s, r->head, what, strlen(what));

    return p ? (size_t)(p - r->s) : r->head;
}

static bool
mutate(struct req *r, const char *cat)
{
    char line[128];

    if (strcmp(cat, "obs_fold") == 0) {
        add_header(r, "X-Fold: a\r\n folded\r\n");
    } else if (strcmp(cat, "bare_lf_header") == 0) {
        add_header(r, "X-Lf: 1\n");
    } else if (strcmp(cat, "bare_lf_line") == 0) {
        splice_str(r, r->line_end - 2, 2, "\n");
    } else if (strcmp(cat, "bare_lf_end") == 0) {
        splice_str(r, r->head - 2, 2, "\n");
    } else if (strcmp(cat, "cl_te") == 0) {
        if (r->body_kind == 0)
            return false;
        add_header(r, r->body_kind == 1 ? "Transfer-Encoding: chunked\r\n"
                                        : "Content-Length: 5\r\n");
    } else if (strcmp(cat, "dup_cl_same") == 0 ||
               strcmp(cat, "dup_cl_diff") == 0) {
        size_t at = find_in_head(r, "Content-Length: ");
        if (r->body_kind != 1 || at == r->head)
            return false;
        snprintf(line, sizeof(line), "Content-Length: %lu\r\n",
                 strtoul(r->s + at + 16, NULL, 10) + (cat[7] == 'd'));
        add_header(r, line);
    } else if (strcmp(cat, "cl_plus") == 0 || strcmp(cat, "cl_list") == 0 ||
               strcmp(cat, "cl_hex") == 0 || strcmp(cat, "cl_19digits") == 0) {
        size_t at = find_in_head(r, "Content-Length: ");
        unsigned long n;
        if (r->body_kind != 1 || at == r->head)
            return false;
        n = strtoul(r->s + at + 16, NULL, 10);
        if (cat[3] == 'p')
            snprintf(line, sizeof(line), "+%lu", n);
        else if (cat[3] == 'l')
            snprintf(line, sizeof(line), "%lu, %lu", n, n);
        else if (cat[3] == 'h')
            snprintf(line, sizeof(line), "0x%lx", n);
        else
            snprintf(line, sizeof(line), "%019lu", n);
        splice_str(r, at + 16, strcspn(r->s + at + 16, "\r"), line);
    } else if (strcmp(cat, "te_identity") == 0) {
        if (r->body_kind != 0 || r->minor != 1)
            return false;
        add_header(r, "Transfer-Encoding: identity\r\n");
    } else if (strcmp(cat, "te_chunked_identity") == 0) {
        if (r->body_kind != 0 || r->minor != 1)
            return false;
        add_header(r, "Transfer-Encoding: chunked, identity\r\n");
    } else if (strcmp(cat, "te_gzip_chunked") == 0 ||
               strcmp(cat, "dup_te") == 0) {
        size_t at = find_in_head(r, "Transfer-Encoding: chunked\r\n");
        if (r->body_kind != 2 || at == r->head)
            return false;
        if (cat[0] == 'd')
            add_header(r, "Transfer-Encoding: chunked\r\n");
        else
            splice_str(r, at + 19, 0, "gzip, ");
    } else if (strcmp(cat, "te_http10") == 0) {
        if (r->body_kind != 2)
            return false;
        splice_str(r, r->line_end - 3, 1, "0");
    } else if (strcmp(cat, "bare_cr") == 0) {
        add_header(r, "X-Cr: a\rb\r\n");
    } else if (strcmp(cat, "nul_value") == 0) {
        splice(r, r->line_end, 0, "X-Nul: a\0b\r\n", 12);
    } else if (strcmp(cat, "ctl_value") == 0) {
        add_header(r, rnd(2) ? "X-Ctl: a\001b\r\n" : "X-Ctl: a\177b\r\n");
    } else if (strcmp(cat, "ws_before_colon") == 0) {
        add_header(r, "X-Ws : v\r\n");
    } else if (strcmp(cat, "empty_name") == 0) {
        add_header(r, ": v\r\n");
    } else if (strcmp(cat, "no_host") == 0) {
        if (r->minor != 1 || r->host_line == 0)
            return false;
        splice_str(r, r->host_line,
                   strstr(r->s + r->host_line, "\r\n") + 2 -
                       (r->s + r->host_line),
                   "");
    } else if (strcmp(cat, "dup_host") == 0) {
        add_header(r, "Host: other.example\r\n");
    } else if (strcmp(cat, "host_space") == 0 ||
               strcmp(cat, "host_slash") == 0) {
        if (r->host_line == 0)
            return false;
        splice_str(r, r->host_line + 7, 0,
                   cat[5] == 's' && cat[6] == 'p' ? "a b." : "a/b.");
    } else if (strcmp(cat, "expect_other") == 0) {
        add_header(r, "Expect: 200-ok\r\n");
    } else if (strcmp(cat, "fragment") == 0) {
        splice_str(r, r->target_end, 0, "#frag");
    } else if (strcmp(cat, "authority_form") == 0) {
        splice_str(r, r->target_off, r->target_end - r->target_off,
                   "h.example:80");
    } else if (strcmp(cat, "star_get") == 0) {
        splice_str(r, r->target_off, r->target_end - r->target_off, "*");
        splice_str(r, 0, r->method_end, "GET");
    } else if (strcmp(cat, "connect") == 0) {
        splice_str(r, r->target_off, r->target_end - r->target_off,
                   "h.example:443");
        splice_str(r, 0, r->method_end, "CONNECT");
    } else if (strcmp(cat, "version_20") == 0) {
        splice_str(r, r->line_end - 5, 3, "2.0");
    } else if (strcmp(cat, "version_12") == 0) {
        splice_str(r, r->line_end - 5, 3, "1.2");
    } else if (strcmp(cat, "version_trailing_sp") == 0) {
        splice_str(r, r->line_end - 2, 0, " ");
    } else if (strcmp(cat, "double_sp") == 0) {
        splice_str(r, r->method_end, 0, " ");
    } else if (strcmp(cat, "method_unknown") == 0) {
        static const char *const unknown[] = {"get", "Post", "FETCH",
                                              "X-CUSTOM", "BREW"};
        splice_str(r, 0, r->method_end,
                   unknown[rnd(sizeof(unknown) / sizeof(unknown[0]))]);
    } else if (strcmp(cat, "target_utf8") == 0) {
        splice_str(r, r->target_end, 0, "/caf\xc3\xa9");
    } else if (strcmp(cat, "target_ctl") == 0) {
        splice_str(r, r->target_end, 0, "/a\001b");
    } else if (strcmp(cat, "chunk_ext_ctl") == 0 ||
               strcmp(cat, "chunk_no_crlf") == 0 ||
               strcmp(cat, "chunk_bare_lf") == 0 ||
               strcmp(cat, "chunk_overflow") == 0 ||
               strcmp(cat, "chunk_nonhex") == 0 ||
               strcmp(cat, "trailer_fold") == 0) {
        size_t end = strcspn(r->s + r->head, "\r") + r->head; /* size line */
        if (r->body_kind != 2)
            return false;
        if (strcmp(cat, "chunk_ext_ctl") == 0) {
            splice_str(r, end, 0, ";a=\001");
        } else if (strcmp(cat, "chunk_no_crlf") == 0) {
            /* the first chunk's data: its CRLF becomes two other bytes */
            unsigned long n = strtoul(r->s + r->head, NULL, 16);
            if (n == 0)
                return false;
            splice_str(r, end + 2 + n, 2, "XX");
        } else if (strcmp(cat, "chunk_bare_lf") == 0) {
            splice_str(r, end, 2, "\n");
        } else if (strcmp(cat, "chunk_overflow") == 0) {
            splice_str(r, r->head, 0, "10000000000000000");
        } else if (strcmp(cat, "chunk_nonhex") == 0) {
            splice_str(r, r->head, 0, "g");
        } else {
            if (r->len < 5 || memcmp(r->s + r->len - 5, "0\r\n\r\n", 5) != 0)
                return false;
            splice_str(r, r->len - 2, 0, "X-T: 1\r\n folded\r\n");
        }
    } else if (strcmp(cat, "truncate") == 0) {
        r->len = rnd((uint32_t)r->len);
    } else if (strncmp(cat, "flip_", 5) == 0) {
        /* one byte of a region replaced by a random printable or
         * control byte */
        size_t from, to, at;
        if (cat[5] == 'm') {
            from = r->s[0] == '\r' ? 2 : 0;
            to = r->method_end;
        } else if (cat[5] == 'l') {
            from = r->method_end;
            to = r->line_end;
        } else if (cat[5] == 'h') {
            from = r->line_end;
            to = r->head;
        } else {
            if (r->body_kind != 2)
                return false;
            from = r->head;
            to = r->len;
        }
        at = from + rnd((uint32_t)(to - from));
        r->s[at] = rnd(4) == 0 ? (char)rnd(32) : (char)(0x20 + rnd(0x5f));
    } else {
        fprintf(stderr, "http_diff: no mutation %s\n", cat);
        exit(2);
    }
    return true;
}

static const char *const categories[] = {
    "obs_fold",
    "bare_lf_header",
    "bare_lf_line",
    "bare_lf_end",
    "cl_te",
    "dup_cl_same",
    "dup_cl_diff",
    "cl_plus",
    "cl_list",
    "cl_hex",
    "cl_19digits",
    "te_identity",
    "te_chunked_identity",
    "te_gzip_chunked",
    "dup_te",
    "te_http10",
    "bare_cr",
    "nul_value",
    "ctl_value",
    "ws_before_colon",
    "empty_name",
    "no_host",
    "dup_host",
    "host_space",
    "host_slash",
    "expect_other",
    "fragment",
    "authority_form",
    "star_get",
    "connect",
    "version_20",
    "version_12",
    "version_trailing_sp",
    "double_sp",
    "method_unknown",
    "target_utf8",
    "target_ctl",
    "chunk_ext_ctl",
    "chunk_no_crlf",
    "chunk_bare_lf",
    "chunk_overflow",
    "chunk_nonhex",
    "trailer_fold",
    "truncate",
    "flip_method",
    "flip_line",
    "flip_header",
    "flip_body",
};
#define NCATEGORIES (sizeof(categories) / sizeof(categories[0]))

/* ---- our side -------------------------------------------------------------
 */

/* The data of a chunked body our scanner accepted (the framing is
 * known good: sizes, CRLFs, extensions and trailers are skipped). */
static void
dechunk(const char *b, size_t len, struct diff_text *out)
{
    size_t p = 0;

    for (;;) {
        unsigned long n = strtoul(b + p, NULL, 16);
        const char *lf = memchr(b + p, '\n', len - p);
        p = (size_t)(lf - b) + 1;
        if (n == 0)
            return;
        diff_text_add(out, b + p, n);
        p += n + 2;
    }
}

static struct http_header headers[HTTP_HEADERS_MAX];

static void
ours_parse(const char *buf, size_t len, struct diff_message *m, int *status)
{
    struct http_request rq;
    int st;

    memset(m, 0, sizeof(*m));
    memset(&rq, 0, sizeof(rq));
    rq.max_head = MAX_HEAD;
    rq.max_uri = MAX_URI;
    rq.headers = headers;
    *status = 0;
    st = http_parse_request(buf, len, &rq);
    if (st == PROTO_AGAIN) {
        m->verdict = DIFF_INCOMPLETE;
        return;
    }
    if (st != PROTO_OK) {
        m->verdict = DIFF_REFUSE;
        m->err = rq.err;
        *status = rq.status;
        return;
    }
    diff_text_add(&m->method, buf + rq.method_text.off, rq.method_text.len);
    diff_text_add(&m->url, buf + rq.target.off, rq.target.len);
    if (sabotage)
        m->url.s[0] ^= 1;
    m->major = 1;
    m->minor = rq.minor;
    m->keep_alive = rq.keep_alive;
    m->nheaders = rq.nheaders;
    for (size_t i = 0; i < rq.nheaders; i++) {
        diff_text_add(&m->name[i], buf + headers[i].name.off,
                      headers[i].name.len);
        diff_text_add(&m->value[i], buf + headers[i].value.off,
                      headers[i].value.len);
    }
    m->chunked = rq.body == HTTP_BODY_CHUNKED;
    m->verdict = DIFF_ACCEPT;
    if (rq.body == HTTP_BODY_LENGTH) {
        if (rq.length > len - rq.head) {
            m->verdict = DIFF_INCOMPLETE;
            return;
        }
        diff_text_add(&m->body, buf + rq.head, (size_t)rq.length);
        m->consumed = rq.head + (size_t)rq.length;
    } else if (rq.body == HTTP_BODY_CHUNKED) {
        struct http_chunked c;
        const char *err = NULL;
        bool done = false;
        ssize_t n;

        memset(&c, 0, sizeof(c));
        n = http_chunked_scan(&c, buf + rq.head, len - rq.head, 4096, &done,
                              &err);
        if (n < 0) {
            m->verdict = DIFF_REFUSE;
            m->err = err;
            return;
        }
        if (!done) {
            m->verdict = DIFF_INCOMPLETE;
            return;
        }
        dechunk(buf + rq.head, (size_t)n, &m->body);
        if (m->body.len != c.total) {
            m->verdict = DIFF_REFUSE;
            m->err = "dechunk disagrees with the scanner's total";
            return;
        }
        m->consumed = rq.head + (size_t)n;
    } else {
        m->consumed = rq.head;
    }
}

/* ---- the comparison --------------------------------------------------------
 */

static void
print_input(FILE *f, const char *buf, size_t len)
{
    fputs("    \"", f);
    for (size_t i = 0; i < len && i < 600; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\r')
            fputs("\\r", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputs(len > 600 ? "\"...\n" : "\"\n", f);
}

/* libhttp-parser keeps a value's trailing whitespace (RFC 9112 5: OWS is
 * not part of the value); the comparison drops it. */
static size_t
trimmed(const struct diff_text *t)
{
    size_t n = t->len;

    while (n > 0 && (t->s[n - 1] == ' ' || t->s[n - 1] == '\t'))
        n--;
    return n;
}

static bool
same_text(const struct diff_text *a, const struct diff_text *b)
{
    return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
}

/* Why two accepted readings differ, or NULL. */
static const char *
fields_differ(const struct diff_message *o, const struct diff_message *h)
{
    if (!same_text(&o->method, &h->method))
        return "method";
    if (!same_text(&o->url, &h->url))
        return "url";
    if (o->major != h->major || o->minor != h->minor)
        return "version";
    /* libhttp-parser reports trailers as headers after the head's */
    if (h->nheaders < o->nheaders)
        return "header count";
    for (size_t i = 0; i < o->nheaders; i++) {
        size_t n = trimmed(&h->value[i]);
        if (!same_text(&o->name[i], &h->name[i]))
            return "header name";
        if (o->value[i].len != n || memcmp(o->value[i].s, h->value[i].s, n))
            return "header value";
    }
    if (o->nheaders < h->nheaders && !o->chunked)
        return "header count";
    if (o->chunked != h->chunked)
        return "framing";
    if (!same_text(&o->body, &h->body))
        return "body";
    if (o->consumed != h->consumed)
        return "request length";
    if (o->keep_alive != h->keep_alive)
        return "keep-alive";
    return NULL;
}

/* Counts of one-sided acceptances by category and side. */
static unsigned one_sided[NCATEGORIES + 1][2];

static const char *
verdict_name(int v)
{
    static const char *const names[] = {"accept", "refuse", "incomplete",
                                        "upgrade"};
    return names[v];
}

int
main(int argc, char **argv)
{
    static struct diff_message ours, hp;
    static struct req r;
    unsigned count = 400, agree = 0, both_refuse = 0, undecided = 0;
    unsigned failures = 0, valid = 0, valid_agree = 0, close_wins = 0;
    uint64_t seed = 1;
    int opt;

    while ((opt = getopt(argc, argv, "n:s:vk")) != -1) {
        if (opt == 'n')
            count = (unsigned)strtoul(optarg, NULL, 10);
        else if (opt == 's')
            seed = strtoull(optarg, NULL, 10);
        else if (opt == 'v')
            verbose = true;
        else if (opt == 'k')
            sabotage = true;
        else {
            fprintf(stderr,
                    "usage: http_diff [-n COUNT] [-s SEED] [-v] [-k]\n");
            return 2;
        }
    }
    rng_state = seed;
    for (unsigned i = 0; i < count; i++) {
        /* one in three valid, the others mutated */
        size_t cat = NCATEGORIES;
        const char *name = "valid";
        int status;

        gen_valid(&r);
        if (i % 3 != 0) {
            do {
                gen_valid(&r);
                cat = rnd(NCATEGORIES);
            } while (!mutate(&r, categories[cat]));
            name = categories[cat];
        } else {
            valid++;
        }
        ours_parse(r.s, r.len, &ours, &status);
        hp_parse_request(r.s, r.len, &hp);
        if (hp.verdict == DIFF_UPGRADE) /* not generated: a CONNECT */
            hp.verdict = DIFF_ACCEPT;
        if (ours.verdict == DIFF_ACCEPT && hp.verdict == DIFF_ACCEPT) {
            const char *why = fields_differ(&ours, &hp);
            if (why == NULL) {
                agree++;
                valid_agree += cat == NCATEGORIES;
                continue;
            }
            if (strcmp(why, "keep-alive") == 0 && !ours.keep_alive &&
                ours.minor == 0 && memmem(r.s, r.len, "close", 5) != NULL) {
                /* libhttp-parser lets a 1.0 keep-alive option outweigh
                 * close; chashd closes (RFC 9112 9.6: close means close) */
                close_wins++;
                continue;
            }
            failures++;
            printf("FAIL [%s] both accept, the %s differs:\n", name, why);
            print_input(stdout, r.s, r.len);
        } else if (ours.verdict == DIFF_ACCEPT || hp.verdict == DIFF_ACCEPT) {
            int side =
                ours.verdict == DIFF_ACCEPT ? HP_STRICTER : OURS_STRICTER;
            one_sided[cat][side]++;
            if (cat == NCATEGORIES || expected_of(name, side) == NULL) {
                failures++;
                if (side == HP_STRICTER)
                    printf("FAIL [%s] only chashd accepts (libhttp-parser: "
                           "%s %s)\n",
                           name, verdict_name(hp.verdict),
                           hp.err ? hp.err : "");
                else
                    printf("FAIL [%s] only libhttp-parser accepts (chashd: "
                           "%s %d %s)\n",
                           name, verdict_name(ours.verdict), status,
                           ours.err ? ours.err : "");
                print_input(stdout, r.s, r.len);
            } else if (verbose) {
                printf("ok [%s] only %s accepts: %s\n", name,
                       side == HP_STRICTER ? "chashd" : "libhttp-parser",
                       side == OURS_STRICTER && ours.err ? ours.err : "");
                print_input(stdout, r.s, r.len);
            }
        } else if (ours.verdict == DIFF_REFUSE && hp.verdict == DIFF_REFUSE) {
            both_refuse++;
        } else {
            undecided++; /* incomplete for one or both, accepted by none */
        }
        if (cat == NCATEGORIES &&
            !(ours.verdict == DIFF_ACCEPT && hp.verdict == DIFF_ACCEPT)) {
            failures++;
            printf("FAIL [valid] not accepted by both (chashd: %s %s)\n",
                   verdict_name(ours.verdict), ours.err ? ours.err : "");
            print_input(stdout, r.s, r.len);
        }
    }
    printf("http_diff: %u inputs (seed %llu): %u valid; both accept and "
           "agree on every field %u (valid %u); both refuse %u; neither "
           "accepts, one or both waiting %u\n",
           count, (unsigned long long)seed, valid, agree, valid_agree,
           both_refuse, undecided);
    printf("  both accept, keep-alive differs as expected %u (an HTTP/1.0 "
           "request with both keep-alive and close: chashd closes, "
           "libhttp-parser keeps it)\n",
           close_wins);
    for (int side = 0; side < 2; side++) {
        printf("  only %s accepts (%s):\n",
               side == OURS_STRICTER ? "libhttp-parser" : "chashd",
               side == OURS_STRICTER ? "chashd is stricter"
                                     : "libhttp-parser is stricter");
        for (size_t c = 0; c <= NCATEGORIES; c++) {
            const char *name = c < NCATEGORIES ? categories[c] : "valid";
            const struct expected *e = expected_of(name, side);
            if (one_sided[c][side] == 0)
                continue;
            printf("    %-20s %4u  %s\n", name, one_sided[c][side],
                   e ? e->reason : "UNEXPECTED");
        }
    }
    printf("summary: inputs=%u valid=%u agree=%u valid_agree=%u "
           "close_wins=%u failures=%u\n",
           count, valid, agree, valid_agree, close_wins, failures);
    return failures == 0 ? 0 : 1;
}

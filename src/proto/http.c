/* http.c -- mode http: the strict HTTP/1.x parser, the chunked scanner,
 * the routing key of a request and chashd's own error responses. The
 * contract is in http.h; why each refusal is there, in doc/http.md.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto/http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "proto/tcp.h"

const struct proto proto_http = {
    .name = "http",
    .mode = CONF_MODE_HTTP,
    .conn_key = tcp_conn_key,
};

/* The longest method name accepted (the registered ones are shorter). */
#define METHOD_MAX 32

/* ---- characters ---------------------------------------------------------- */

/* RFC 9110 tchar: what a method or a header name is made of. */
static bool
is_tchar(unsigned char c)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";

    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c != 0 && memchr(extra, c, 15) != NULL);
}

/* A byte a header value may hold: visible ASCII, obs-text, SP, HTAB.
 * Never NUL, CR, LF, another control byte or DEL. */
static bool
is_value_char(unsigned char c)
{
    return c == ' ' || c == '\t' || (c > 0x20 && c != 0x7f);
}

/* A byte of a request-target: visible ASCII. */
static bool
is_target_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

/* A byte of a Host value: reg-name, IP-literal and port characters. */
static bool
is_host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != 0 && memchr("-._~%!$&'()*+,;=:[]", c, 19) != NULL);
}

static bool
span_is(const char *buf, struct proto_span s, const char *lit)
{
    size_t n = strlen(lit);

    return s.len == n && strncasecmp(buf + s.off, lit, n) == 0;
}

/* ---- header lines -------------------------------------------------------- */

static int
known_header(const char *name, size_t n)
{
    static const struct {
        const char *name;
        int id;
    } table[] = {
        {"connection", HTTP_H_CONNECTION},
        {"keep-alive", HTTP_H_KEEP_ALIVE},
        {"proxy-connection", HTTP_H_PROXY_CONNECTION},
        {"te", HTTP_H_TE},
        {"trailer", HTTP_H_TRAILER},
        {"upgrade", HTTP_H_UPGRADE},
        {"transfer-encoding", HTTP_H_TRANSFER_ENCODING},
        {"content-length", HTTP_H_CONTENT_LENGTH},
        {"host", HTTP_H_HOST},
        {"expect", HTTP_H_EXPECT},
        {"cookie", HTTP_H_COOKIE},
        {"x-forwarded-for", HTTP_H_X_FORWARDED_FOR},
        {"x-forwarded-proto", HTTP_H_X_FORWARDED_PROTO},
        {"forwarded", HTTP_H_FORWARDED},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strlen(table[i].name) == n &&
            strncasecmp(name, table[i].name, n) == 0)
            return table[i].id;
    return HTTP_H_OTHER;
}

/*
 * The header lines from <pos> of <buf> to the empty line that ends the
 * head: each checked and put in <h> (<cap> entries). Returns PROTO_OK
 * with *<end> past the empty line, PROTO_AGAIN, or PROTO_FATAL with
 * *<err> (and *<status> 431 when there are too many).
 */
static int
parse_headers(const char *buf, size_t len, size_t pos, uint64_t max_head,
              struct http_header *h, size_t *n, size_t *end, int *status,
              const char **err)
{
    *n = 0;
    for (;;) {
        const char *lf = memchr(buf + pos, '\n', len - pos);
        size_t eol, p, name_end;

        if (lf == NULL) {
            if (len >= max_head) {
                *status = 431;
                *err = "the header section is too large";
                return PROTO_FATAL;
            }
            return PROTO_AGAIN;
        }
        eol = (size_t)(lf - buf);
        if (eol + 1 > max_head) {
            *status = 431;
            *err = "the header section is too large";
            return PROTO_FATAL;
        }
        if (eol == pos || buf[eol - 1] != '\r') {
            *err = "a line ends with a bare LF";
            return PROTO_FATAL;
        }
        if (eol - 1 == pos) { /* CRLF: the end of the head */
            *end = eol + 1;
            return PROTO_OK;
        }
        if (buf[pos] == ' ' || buf[pos] == '\t') {
            *err = "obs-fold (a header line starting with whitespace)";
            return PROTO_FATAL;
        }
        for (p = pos; p < eol - 1 && is_tchar((unsigned char)buf[p]); p++)
            ;
        if (p == pos || p == eol - 1 || buf[p] != ':') {
            *err = p < eol - 1 && (buf[p] == ' ' || buf[p] == '\t')
                       ? "whitespace between a header name and its colon"
                       : "a malformed header line";
            return PROTO_FATAL;
        }
        name_end = p++;
        while (p < eol - 1 && (buf[p] == ' ' || buf[p] == '\t'))
            p++;
        size_t vstart = p, vend = p;
        for (; p < eol - 1; p++) {
            unsigned char c = (unsigned char)buf[p];
            if (!is_value_char(c)) {
                *err = c == '\r' ? "a bare CR in a header value"
                       : c == 0  ? "a NUL byte in a header value"
                                 : "a control byte in a header value";
                return PROTO_FATAL;
            }
            if (c != ' ' && c != '\t')
                vend = p + 1;
        }
        if (*n == HTTP_HEADERS_MAX) {
            *status = 431;
            *err = "too many header lines";
            return PROTO_FATAL;
        }
        h[*n].name = (struct proto_span){pos, name_end - pos};
        h[*n].value = (struct proto_span){vstart, vend - vstart};
        h[*n].line = (struct proto_span){pos, eol + 1 - pos};
        h[*n].known = known_header(buf + pos, name_end - pos);
        h[*n].hop_by_hop = false;
        (*n)++;
        pos = eol + 1;
    }
}

/* Call <fn> on each comma-separated token of <v> (trimmed, empty ones
 * skipped). */
static void
each_token(const char *buf, struct proto_span v,
           void (*fn)(const char *buf, struct proto_span tok, void *arg),
           void *arg)
{
    size_t p = v.off, end = v.off + v.len;

    while (p < end) {
        size_t s, e;

        while (p < end && (buf[p] == ' ' || buf[p] == '\t' || buf[p] == ','))
            p++;
        s = p;
        while (p < end && buf[p] != ',')
            p++;
        e = p;
        while (e > s && (buf[e - 1] == ' ' || buf[e - 1] == '\t'))
            e--;
        if (e > s)
            fn(buf, (struct proto_span){s, e - s}, arg);
    }
}

/* What the Connection headers say. */
struct conn_tokens {
    struct http_header *h;
    size_t n;
    bool close, keep_alive, upgrade;
};

static void
conn_token(const char *buf, struct proto_span tok, void *arg)
{
    struct conn_tokens *ct = arg;

    if (span_is(buf, tok, "close"))
        ct->close = true;
    else if (span_is(buf, tok, "keep-alive"))
        ct->keep_alive = true;
    else if (span_is(buf, tok, "upgrade"))
        ct->upgrade = true;
    /* A header named in Connection is the hop's own: not forwarded --
     * but never the framing or the Host of the message: a client that
     * names Content-Length there must not make a proxy forward its body
     * without its length (a smuggled request). */
    for (size_t i = 0; i < ct->n; i++)
        if (ct->h[i].known != HTTP_H_CONTENT_LENGTH &&
            ct->h[i].known != HTTP_H_HOST && ct->h[i].name.len == tok.len &&
            strncasecmp(buf + ct->h[i].name.off, buf + tok.off, tok.len) == 0)
            ct->h[i].hop_by_hop = true;
}

static void
connection_tokens(const char *buf, struct http_header *h, size_t n,
                  struct conn_tokens *ct)
{
    memset(ct, 0, sizeof(*ct));
    ct->h = h;
    ct->n = n;
    for (size_t i = 0; i < n; i++)
        if (h[i].known == HTTP_H_CONNECTION)
            each_token(buf, h[i].value, conn_token, ct);
    for (size_t i = 0; i < n; i++)
        switch (h[i].known) {
        case HTTP_H_CONNECTION:
        case HTTP_H_KEEP_ALIVE:
        case HTTP_H_PROXY_CONNECTION:
        case HTTP_H_TE:
        case HTTP_H_TRAILER:
        case HTTP_H_UPGRADE:
        case HTTP_H_TRANSFER_ENCODING:
            h[i].hop_by_hop = true;
            break;
        default:
            break;
        }
}

/* A Content-Length value: 1 to 18 digits (no sign, no list, no
 * whitespace inside). */
static bool
parse_length(const char *buf, struct proto_span v, uint64_t *out)
{
    uint64_t n = 0;

    if (v.len == 0 || v.len > 18)
        return false;
    for (size_t i = 0; i < v.len; i++) {
        char c = buf[v.off + i];
        if (c < '0' || c > '9')
            return false;
        n = n * 10 + (uint64_t)(c - '0');
    }
    *out = n;
    return true;
}

/* The framing headers of a message, checked: Content-Length at most once
 * (a response may repeat the same value), Transfer-Encoding at most once
 * and never with Content-Length. 0, or -1 with *<err>. */
static int
framing(const char *buf, const struct http_header *h, size_t n, bool response,
        uint64_t *length, bool *has_cl, const struct http_header **te,
        const char **err)
{
    *has_cl = false;
    *te = NULL;
    for (size_t i = 0; i < n; i++) {
        uint64_t v;

        if (h[i].known == HTTP_H_CONTENT_LENGTH) {
            if (!parse_length(buf, h[i].value, &v)) {
                *err = "an invalid Content-Length";
                return -1;
            }
            if (*has_cl && (!response || v != *length)) {
                *err = "a duplicate Content-Length";
                return -1;
            }
            *has_cl = true;
            *length = v;
        } else if (h[i].known == HTTP_H_TRANSFER_ENCODING) {
            if (*te != NULL) {
                *err = "a duplicate Transfer-Encoding";
                return -1;
            }
            *te = &h[i];
        }
    }
    if (*has_cl && *te != NULL) {
        *err = "both Content-Length and Transfer-Encoding";
        return -1;
    }
    return 0;
}

/* ---- requests ------------------------------------------------------------ */

static int
method_id(const char *m, size_t n)
{
    static const char *const names[] = {"GET",   "HEAD",    "POST",
                                        "PUT",   "DELETE",  "OPTIONS",
                                        "TRACE", "CONNECT", "PATCH"};

    for (int i = 0; i < HTTP_OTHER; i++)
        if (strlen(names[i]) == n && memcmp(m, names[i], n) == 0)
            return i;
    return HTTP_OTHER;
}

static int
refuse(struct http_request *rq, int status, const char *err)
{
    rq->status = status;
    rq->err = err;
    return PROTO_FATAL;
}

/* The target's form, its path, query and authority. 0 or -1 (400). */
static int
target_form(const char *buf, struct http_request *rq)
{
    struct proto_span t = rq->target;
    const char *s = buf + t.off;
    size_t p = 0, q;

    if (s[0] == '*' && t.len == 1) {
        if (rq->method != HTTP_OPTIONS)
            return -1;
        rq->path = t;
        return 0;
    }
    if (s[0] != '/') {
        /* absolute-form: http://authority/path?query */
        size_t skip = 0;
        if (t.len > 7 && strncasecmp(s, "http://", 7) == 0)
            skip = 7;
        else if (t.len > 8 && strncasecmp(s, "https://", 8) == 0)
            skip = 8;
        else
            return -1; /* authority-form (CONNECT) and the rest */
        p = skip;
        while (p < t.len && s[p] != '/' && s[p] != '?')
            p++;
        if (p == skip)
            return -1;
        for (size_t i = skip; i < p; i++)
            if (!is_host_char((unsigned char)s[i]) || s[i] == '@')
                return -1;
        rq->host = (struct proto_span){t.off + skip, p - skip};
        rq->has_host = true;
    }
    for (q = p; q < t.len && s[q] != '?'; q++)
        ;
    rq->path = (struct proto_span){t.off + p, q - p};
    if (q < t.len)
        rq->query = (struct proto_span){t.off + q + 1, t.len - q - 1};
    for (size_t i = p; i < t.len; i++)
        if (s[i] == '#')
            return -1; /* a fragment is never sent */
    return 0;
}

/* The request line from <pos>: method SP target SP HTTP/1.x CRLF. */
static int
request_line(const char *buf, size_t len, size_t pos, struct http_request *rq,
             size_t *next)
{
    size_t p = pos, m;

    for (; p < len && is_tchar((unsigned char)buf[p]); p++)
        if (p - pos == METHOD_MAX)
            return refuse(rq, 400, "the method is too long");
    if (p == len)
        return PROTO_AGAIN;
    if (p == pos || buf[p] != ' ')
        return refuse(rq, 400, "a malformed request line");
    rq->method_text = (struct proto_span){pos, p - pos};
    rq->method = method_id(buf + pos, p - pos);
    m = ++p;
    for (; p < len && buf[p] != ' '; p++) {
        if (!is_target_char((unsigned char)buf[p]))
            return refuse(rq, 400,
                          buf[p] == '\r' || buf[p] == '\n'
                              ? "a malformed request line"
                              : "a control or non-ASCII byte in the target");
        if (p - m >= rq->max_uri)
            return refuse(rq, 414, "the request-target is too long");
    }
    if (p == len)
        return PROTO_AGAIN;
    if (p == m)
        return refuse(rq, 400, "an empty request-target");
    rq->target = (struct proto_span){m, p - m};
    p++;
    {
        static const char ver[] = "HTTP/1.";
        for (size_t i = 0; i < 7; i++, p++) {
            if (p == len)
                return PROTO_AGAIN;
            if (buf[p] != ver[i])
                return i == 5 && buf[p] >= '2' && buf[p] <= '9'
                           ? refuse(rq, 505, "HTTP version not supported")
                           : refuse(rq, 400, "a malformed HTTP version");
        }
    }
    if (p == len)
        return PROTO_AGAIN;
    if (buf[p] != '0' && buf[p] != '1')
        return refuse(rq, buf[p] >= '2' && buf[p] <= '9' ? 505 : 400,
                      "an unknown HTTP/1 minor version");
    rq->minor = buf[p] - '0';
    if (++p == len || (buf[p] == '\r' && p + 1 == len))
        return PROTO_AGAIN;
    if (buf[p] != '\r' || buf[p + 1] != '\n')
        return refuse(rq, 400, "a malformed request line");
    rq->line = (struct proto_span){pos, p - pos};
    *next = p + 2;
    return PROTO_OK;
}

int
http_parse_request(const char *buf, size_t len, struct http_request *rq)
{
    struct http_header *h = rq->headers;
    const struct http_header *te;
    struct conn_tokens ct;
    size_t pos = 0, end;
    bool has_cl;
    int rc;

    rq->nheaders = 0;
    rq->head = 0;
    rq->method = HTTP_OTHER;
    rq->path = rq->query = rq->host = rq->target = rq->line =
        (struct proto_span){0, 0};
    rq->body = HTTP_BODY_NONE;
    rq->length = 0;
    rq->keep_alive = rq->upgrade = rq->expect_continue = rq->has_host = false;
    rq->status = 0;
    rq->err = NULL;
    /* Nothing past the limit is looked at: a head that does not end
     * within it is refused 431 whatever follows, so that the verdict is
     * the same however the bytes arrive (a client trickling them would
     * get 431 at the limit, before the bytes after it are in). */
    if (len > rq->max_head)
        len = (size_t)rq->max_head;
    /* Empty lines before a request are skipped (RFC 9112 2.2): some
     * clients send a CRLF after a body. */
    while (pos + 1 < len && buf[pos] == '\r' && buf[pos + 1] == '\n')
        pos += 2;
    if (pos >= rq->max_head)
        return refuse(rq, 431, "the header section is too large");
    if (pos == len || (pos + 1 == len && buf[pos] == '\r'))
        return PROTO_AGAIN;
    rc = request_line(buf, len, pos, rq, &pos);
    if (rc != PROTO_OK) {
        if (rc == PROTO_AGAIN && len >= rq->max_head)
            return refuse(rq, 431, "the header section is too large");
        return rc;
    }
    rc = parse_headers(buf, len, pos, rq->max_head, h, &rq->nheaders, &end,
                       &rq->status, &rq->err);
    if (rc != PROTO_OK) {
        if (rc == PROTO_FATAL && rq->status == 0)
            rq->status = 400;
        return rc;
    }
    rq->head = end;
    if (rq->method == HTTP_CONNECT)
        return refuse(rq, 405, "CONNECT is not served");
    if (target_form(buf, rq) != 0)
        return refuse(rq, 400, "a request-target of a bad form");
    if (framing(buf, h, rq->nheaders, false, &rq->length, &has_cl, &te,
                &rq->err) != 0)
        return refuse(rq, 400, rq->err);
    if (te != NULL) {
        if (rq->minor == 0)
            return refuse(rq, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (!span_is(buf, te->value, "chunked"))
            return refuse(rq, 501, "a Transfer-Encoding other than chunked");
        rq->body = HTTP_BODY_CHUNKED;
    } else if (has_cl) {
        rq->body = HTTP_BODY_LENGTH;
    }
    bool host_header = false;
    for (size_t i = 0; i < rq->nheaders; i++) {
        if (h[i].known == HTTP_H_HOST) {
            struct proto_span v = h[i].value;
            host_header = true;
            if (i > 0)
                for (size_t j = 0; j < i; j++)
                    if (h[j].known == HTTP_H_HOST)
                        return refuse(rq, 400, "a duplicate Host");
            for (size_t k = 0; k < v.len; k++)
                if (!is_host_char((unsigned char)buf[v.off + k]))
                    return refuse(rq, 400, "an invalid Host");
            if (!rq->has_host) /* an absolute-form target's authority wins */
                rq->host = v;
            rq->has_host = true;
        } else if (h[i].known == HTTP_H_EXPECT) {
            if (!span_is(buf, h[i].value, "100-continue"))
                return refuse(rq, 417, "an Expect other than 100-continue");
            rq->expect_continue = rq->minor == 1;
        }
    }
    /* RFC 9112 3.2: every HTTP/1.1 request has a Host line, an
     * absolute-form one too (its authority is the host). */
    if (rq->minor == 1 && !host_header)
        return refuse(rq, 400, "an HTTP/1.1 request without Host");
    connection_tokens(buf, h, rq->nheaders, &ct);
    rq->keep_alive = rq->minor == 1 ? !ct.close : ct.keep_alive && !ct.close;
    if (ct.upgrade && rq->minor == 1)
        for (size_t i = 0; i < rq->nheaders; i++)
            if (h[i].known == HTTP_H_UPGRADE && h[i].value.len > 0)
                rq->upgrade = true;
    return PROTO_OK;
}

/* ---- responses ----------------------------------------------------------- */

int
http_parse_response(const char *buf, size_t len, int method, uint64_t max_head,
                    struct http_response *rp)
{
    static const char ver[] = "HTTP/1.";
    const struct http_header *te;
    struct conn_tokens ct;
    size_t p, end;
    int status = 0, rc;
    bool has_cl;

    rp->nheaders = 0;
    rp->head = 0;
    rp->body = HTTP_BODY_NONE;
    rp->length = 0;
    rp->keep_alive = false;
    rp->err = NULL;
    if (len > max_head) /* as for requests: the same verdict in pieces */
        len = (size_t)max_head;
    for (p = 0; p < 7; p++) {
        if (p == len)
            return PROTO_AGAIN;
        if (buf[p] != ver[p]) {
            rp->err = "not an HTTP/1 status line";
            return PROTO_FATAL;
        }
    }
    /* "1.x SSS" then SP reason, or the line's end */
    for (; p < 12; p++) {
        if (p == len)
            return PROTO_AGAIN;
        if ((p == 8 && buf[p] != ' ') ||
            (p != 8 && (buf[p] < '0' || buf[p] > '9'))) {
            rp->err = "a malformed status line";
            return PROTO_FATAL;
        }
        if (p >= 9)
            status = status * 10 + (buf[p] - '0');
    }
    rp->minor = buf[7] - '0';
    if (status < 100 || status > 599) {
        rp->err = "a status out of 100..599";
        return PROTO_FATAL;
    }
    rp->status = status;
    {
        const char *lf = memchr(buf + p, '\n', len - p);
        if (lf == NULL) {
            if (len >= max_head) {
                rp->err = "a status line that does not end";
                return PROTO_FATAL;
            }
            return PROTO_AGAIN;
        }
        size_t eol = (size_t)(lf - buf);
        if (buf[eol - 1] != '\r' || (eol - 1 > p && buf[p] != ' ')) {
            rp->err = "a malformed status line";
            return PROTO_FATAL;
        }
        for (size_t i = p; i + 1 < eol; i++)
            if (!is_value_char((unsigned char)buf[i])) {
                rp->err = "a control byte in the status line";
                return PROTO_FATAL;
            }
        p = eol + 1;
    }
    {
        int st = 0;
        rc = parse_headers(buf, len, p, max_head, rp->headers, &rp->nheaders,
                           &end, &st, &rp->err);
        if (rc != PROTO_OK)
            return rc;
    }
    rp->head = end;
    if (framing(buf, rp->headers, rp->nheaders, true, &rp->length, &has_cl, &te,
                &rp->err) != 0)
        return PROTO_FATAL;
    connection_tokens(buf, rp->headers, rp->nheaders, &ct);
    rp->keep_alive = rp->minor == 1 ? !ct.close : ct.keep_alive && !ct.close;
    if (method == HTTP_HEAD || status < 200 || status == 204 || status == 304)
        rp->body = HTTP_BODY_NONE;
    else if (te != NULL && span_is(buf, te->value, "chunked"))
        rp->body = HTTP_BODY_CHUNKED;
    else if (te != NULL)
        rp->body = HTTP_BODY_CLOSE; /* another coding: the close ends it */
    else if (has_cl)
        rp->body = HTTP_BODY_LENGTH;
    else
        rp->body = HTTP_BODY_CLOSE;
    if (rp->body == HTTP_BODY_CLOSE)
        rp->keep_alive = false;
    return PROTO_OK;
}

/* ---- chunked bodies ------------------------------------------------------ */

enum chunk_state {
    CH_SIZE0, /* the first digit of a size */
    CH_SIZE,  /* more digits, or what ends them */
    CH_BWS,   /* whitespace after the size: ';' or CR must follow */
    CH_EXT,   /* a chunk extension, to CR */
    CH_SIZE_LF,
    CH_DATA,
    CH_DATA_CR,
    CH_DATA_LF,
    CH_TRAILER0,     /* the start of a trailer line (or the final CRLF) */
    CH_TRAILER_NAME, /* its field name, to the colon */
    CH_TRAILER,      /* its value, to CR */
    CH_TRAILER_LF,
    CH_END_LF
};

static int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One more byte of a chunk extension or a trailer section: true (and
 * *<err> = <why>) when that makes it longer than <max>. */
static bool
over(struct http_chunked *c, size_t max, const char *why, const char **err)
{
    if (++c->trailer <= max)
        return false;
    *err = why;
    return true;
}

/* One byte <b> of a chunk's size line (size, whitespace, extensions,
 * CRLF). 0, or -1 with *<err>. */
static int
size_line_byte(struct http_chunked *c, unsigned char b, size_t max_trailer,
               const char **err)
{
    int v;

    switch (c->state) {
    case CH_SIZE0:
    case CH_SIZE:
        v = hex_value(b);
        if (v >= 0) {
            if (c->digits == 16 || (c->size >> 59) != 0) {
                *err = "a chunk size too large";
                return -1;
            }
            c->size = c->size * 16 + (uint64_t)v;
            c->digits++;
            c->state = CH_SIZE;
        } else if (c->state == CH_SIZE0) {
            *err = "a chunk size that is not hexadecimal";
            return -1;
        } else if (b == ';') {
            c->state = CH_EXT;
        } else if (b == ' ' || b == '\t') {
            c->state = CH_BWS;
        } else if (b == '\r') {
            c->state = CH_SIZE_LF;
        } else {
            *err = "a chunk size that is not hexadecimal";
            return -1;
        }
        return 0;
    case CH_BWS:
        if (b == ';')
            c->state = CH_EXT;
        else if (b == '\r')
            c->state = CH_SIZE_LF;
        else if (b != ' ' && b != '\t') {
            *err = "a chunk size that is not hexadecimal";
            return -1;
        }
        return 0;
    case CH_EXT:
        if (b == '\r')
            c->state = CH_SIZE_LF;
        else if (!is_value_char(b)) {
            *err = "a control byte in a chunk extension";
            return -1;
        }
        return over(c, max_trailer, "chunk extensions too large", err) ? -1 : 0;
    default: /* CH_SIZE_LF */
        if (b != '\n') {
            *err = "a chunk size line not ended by CRLF";
            return -1;
        }
        c->digits = 0;
        if (c->size == 0) {
            c->state = CH_TRAILER0;
            c->trailer = 0;
        } else {
            c->state = CH_DATA;
        }
        return 0;
    }
}

/* One byte <b> of the trailer section (after the last chunk). 0; 1 when
 * it ended the message; -1 with *<err>. */
static int
trailer_byte(struct http_chunked *c, unsigned char b, size_t max_trailer,
             const char **err)
{
    switch (c->state) {
    case CH_TRAILER0:
        if (b == '\r') {
            c->state = CH_END_LF;
        } else if (b == ' ' || b == '\t') {
            *err = "obs-fold in the trailers";
            return -1;
        } else if (is_tchar(b)) {
            c->state = CH_TRAILER_NAME;
        } else {
            *err = "a malformed trailer line";
            return -1;
        }
        c->trailer++;
        return 0;
    case CH_TRAILER_NAME:
        /* A trailer is a field line as a header is (RFC 9112 7.1.2): a
         * line without its colon, or with whitespace before it, is one a
         * member may read differently. */
        if (b == ':') {
            c->state = CH_TRAILER;
        } else if (!is_tchar(b)) {
            *err = "a malformed trailer line";
            return -1;
        }
        return over(c, max_trailer, "the trailers are too large", err) ? -1 : 0;
    case CH_TRAILER:
        if (b == '\r')
            c->state = CH_TRAILER_LF;
        else if (!is_value_char(b)) {
            *err = "a control byte in the trailers";
            return -1;
        }
        return over(c, max_trailer, "the trailers are too large", err) ? -1 : 0;
    default: /* CH_TRAILER_LF, CH_END_LF */
        if (b != '\n') {
            *err = "a trailer line not ended by CRLF";
            return -1;
        }
        if (c->state == CH_END_LF)
            return 1;
        c->state = CH_TRAILER0;
        return 0;
    }
}

ssize_t
http_chunked_scan(struct http_chunked *c, const char *buf, size_t len,
                  size_t max_trailer, bool *done, const char **err)
{
    size_t i = 0;

    *done = false;
    while (i < len) {
        unsigned char b = (unsigned char)buf[i];
        int r;

        switch (c->state) {
        case CH_SIZE0:
        case CH_SIZE:
        case CH_BWS:
        case CH_EXT:
        case CH_SIZE_LF:
            if (size_line_byte(c, b, max_trailer, err) < 0)
                return -1;
            i++;
            break;
        case CH_DATA: {
            size_t take = len - i;
            if (take > c->size)
                take = (size_t)c->size;
            c->size -= take;
            c->total += take;
            i += take;
            if (c->size == 0)
                c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
        case CH_DATA_LF:
            if (b != (c->state == CH_DATA_CR ? '\r' : '\n')) {
                *err = "chunk data not followed by CRLF";
                return -1;
            }
            c->state = c->state == CH_DATA_CR ? CH_DATA_LF : CH_SIZE0;
            c->trailer = 0;
            i++;
            break;
        case CH_TRAILER0:
        case CH_TRAILER_NAME:
        case CH_TRAILER:
        case CH_TRAILER_LF:
        case CH_END_LF:
            r = trailer_byte(c, b, max_trailer, err);
            if (r < 0)
                return -1;
            i++;
            if (r > 0) {
                *done = true;
                return (ssize_t)i;
            }
            break;
        default:
            *err = "the chunked scanner is lost";
            return -1;
        }
    }
    return (ssize_t)i;
}

/* ---- the routing key ----------------------------------------------------- */

const struct proto_span *
http_header_find(const char *buf, const struct http_header *h, size_t n,
                 const char *name, size_t nlen)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].name.len == nlen &&
            strncasecmp(buf + h[i].name.off, name, nlen) == 0)
            return &h[i].value;
    return NULL;
}

/* The value of <name> in one list of "k=v" pairs separated by <sep>
 * (cookies: ';' with spaces; a query: '&'). */
static bool
pair_find(const char *buf, struct proto_span list, char sep, const char *name,
          size_t nlen, struct proto_span *out)
{
    size_t p = list.off, end = list.off + list.len;

    while (p < end) {
        size_t s, e, eq;

        while (p < end && (buf[p] == ' ' || buf[p] == '\t' || buf[p] == sep))
            p++;
        s = p;
        while (p < end && buf[p] != sep)
            p++;
        e = p;
        for (eq = s; eq < e && buf[eq] != '='; eq++)
            ;
        if (eq < e && eq - s == nlen && memcmp(buf + s, name, nlen) == 0) {
            size_t vs = eq + 1, ve = e;
            while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
                ve--;
            if (ve - vs >= 2 && buf[vs] == '"' && buf[ve - 1] == '"') {
                vs++;
                ve--;
            }
            *out = (struct proto_span){vs, ve - vs};
            return true;
        }
    }
    return false;
}

bool
http_cookie_find(const char *buf, const struct http_request *rq,
                 const char *name, size_t nlen, struct proto_span *out)
{
    for (size_t i = 0; i < rq->nheaders; i++)
        if (rq->headers[i].known == HTTP_H_COOKIE &&
            pair_find(buf, rq->headers[i].value, ';', name, nlen, out))
            return true;
    return false;
}

bool
http_query_find(const char *buf, const struct http_request *rq,
                const char *name, size_t nlen, struct proto_span *out)
{
    return rq->query.len > 0 && pair_find(buf, rq->query, '&', name, nlen, out);
}

size_t
http_request_key(const char *buf, const struct http_request *rq,
                 const struct conf_key_source *chain, size_t n, const char *ip,
                 const char *ipport, char *out, size_t cap, const char **key,
                 size_t *klen)
{
    for (size_t i = 0; i < n; i++) {
        const struct conf_key_source *k = &chain[i];
        const struct proto_span *hv;
        struct proto_span s = {0, 0};
        bool found = false;

        switch (k->kind) {
        case CONF_HASH_KEY_SOURCE_IP:
        case CONF_HASH_KEY_SOURCE_IP_PORT: {
            const char *t = k->kind == CONF_HASH_KEY_SOURCE_IP ? ip : ipport;
            if (t != NULL && t[0] != '\0') {
                *key = t;
                *klen = strlen(t);
                return i;
            }
            continue;
        }
        case CONF_HASH_KEY_HEADER:
            hv = http_header_find(buf, rq->headers, rq->nheaders, k->name,
                                  strlen(k->name));
            if (hv != NULL) {
                s = *hv;
                found = true;
            }
            break;
        case CONF_HASH_KEY_COOKIE:
            found = http_cookie_find(buf, rq, k->name, strlen(k->name), &s);
            break;
        case CONF_HASH_KEY_QUERY:
            found = http_query_find(buf, rq, k->name, strlen(k->name), &s);
            break;
        case CONF_HASH_KEY_PATH:
            s = rq->path;
            found = true;
            break;
        case CONF_HASH_KEY_URI:
            s = rq->target;
            found = true;
            break;
        case CONF_HASH_KEY_HOST:
            if (rq->has_host && rq->host.len > 0 && rq->host.len <= cap) {
                for (size_t j = 0; j < rq->host.len; j++) {
                    char c = buf[rq->host.off + j];
                    out[j] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
                }
                *key = out;
                *klen = rq->host.len;
                return i;
            }
            s = rq->host;
            found = rq->has_host;
            break;
        default:
            break;
        }
        if (found && s.len > 0) {
            *key = buf + s.off;
            *klen = s.len;
            return i;
        }
    }
    *key = ip != NULL ? ip : "";
    *klen = strlen(*key);
    return n;
}

/* ---- answers ------------------------------------------------------------- */

bool
http_method_idempotent(int method)
{
    switch (method) {
    case HTTP_GET:
    case HTTP_HEAD:
    case HTTP_PUT:
    case HTTP_DELETE:
    case HTTP_OPTIONS:
    case HTTP_TRACE:
        return true;
    default:
        return false;
    }
}

const char *
http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 417:
        return "Expectation Failed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

size_t
http_error_response(char *out, size_t cap, int status, const char *detail,
                    bool close, unsigned retry_after)
{
    char body[256], retry[48] = "";
    int blen, n;

    blen =
        snprintf(body, sizeof(body), "%d %s%s%s\n", status, http_reason(status),
                 detail ? ": " : "", detail ? detail : "");
    if (blen < 0 || (size_t)blen >= sizeof(body)) {
        /* A detail cut short: its last byte (maybe a CR) becomes the LF
         * that ends the line. */
        blen = (int)strlen(body);
        if (blen == 0)
            body[blen++] = '\n';
        body[blen - 1] = '\n';
    }
    for (int i = 0; i < blen - 1; i++) /* one line, whatever the detail */
        if ((unsigned char)body[i] < 0x20)
            body[i] = ' ';
    if (retry_after > 0)
        snprintf(retry, sizeof(retry), "Retry-After: %u\r\n", retry_after);
    n = snprintf(out, cap,
                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                 "Content-Length: %d\r\n%s%s\r\n%.*s",
                 status, http_reason(status), blen, retry,
                 close ? "Connection: close\r\n" : "", blen, body);
    if (n < 0 || (size_t)n >= cap)
        return 0;
    return (size_t)n;
}

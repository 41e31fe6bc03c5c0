/* http.h -- mode http (L7): a strict HTTP/1.x parser for requests and
 * responses, the chunked-body scanner, and the routing key of a request
 * (a hash_key chain: header, cookie, query parameter, path, uri, host,
 * source address). Pure functions only: no I/O, no allocation, no global
 * state, so each has a libFuzzer target and unit tests. Strict where
 * RFC 9112 lets a recipient choose, because a proxy that reads a request
 * differently from the member behind it is how requests are smuggled:
 * Content-Length with Transfer-Encoding, a duplicate or malformed
 * Content-Length, a bad chunk size, obs-fold, a bare CR or LF, NUL or
 * another control byte in a header value, and a request-target of the
 * wrong form are all refused. Why hand-written: doc/http.md.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_HTTP_H
#define CHASHD_PROTO_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/proto.h"

struct conf_key_source;

extern const struct proto proto_http;

/* Methods chashd knows by name (the others are HTTP_OTHER, and pass). */
enum http_method {
    HTTP_GET,
    HTTP_HEAD,
    HTTP_POST,
    HTTP_PUT,
    HTTP_DELETE,
    HTTP_OPTIONS,
    HTTP_TRACE,
    HTTP_CONNECT,
    HTTP_PATCH,
    HTTP_OTHER
};

/* How a message's body is framed. */
enum http_body {
    HTTP_BODY_NONE,    /* no body */
    HTTP_BODY_LENGTH,  /* Content-Length bytes */
    HTTP_BODY_CHUNKED, /* Transfer-Encoding: chunked */
    HTTP_BODY_CLOSE    /* responses: until the member closes */
};

/* Headers the parser recognises (struct http_header.known). */
enum http_known {
    HTTP_H_OTHER,
    HTTP_H_CONNECTION,
    HTTP_H_KEEP_ALIVE,
    HTTP_H_PROXY_CONNECTION,
    HTTP_H_TE,
    HTTP_H_TRAILER,
    HTTP_H_UPGRADE,
    HTTP_H_TRANSFER_ENCODING,
    HTTP_H_CONTENT_LENGTH,
    HTTP_H_HOST,
    HTTP_H_EXPECT,
    HTTP_H_COOKIE,
    HTTP_H_X_FORWARDED_FOR,
    HTTP_H_X_FORWARDED_PROTO,
    HTTP_H_FORWARDED
};

/* One header line: its name and its value without the surrounding
 * whitespace, as spans of the caller's buffer; <line> is the whole line
 * with its CRLF (what a proxy copies when it keeps the header). */
struct http_header {
    struct proto_span name, value, line;
    int known;       /* enum http_known */
    bool hop_by_hop; /* named in Connection: not forwarded */
};

/* The most header lines a message may have (more: 431 / 502). */
#define HTTP_HEADERS_MAX 128

/*
 * A parsed request head. The caller sets <max_head> (request line and
 * headers, bytes: 431 beyond) and <max_uri> (request-target: 414 beyond)
 * and provides <headers> (HTTP_HEADERS_MAX entries); the parser fills the
 * rest.
 */
struct http_request {
    uint64_t max_head, max_uri;  /* (caller's) limits */
    struct http_header *headers; /* (caller's) [HTTP_HEADERS_MAX] */
    size_t nheaders;
    size_t head; /* bytes of the head, its CRLF CRLF too */
    int method;  /* enum http_method */
    struct proto_span method_text;
    struct proto_span line;   /* the request line without its CRLF */
    struct proto_span target; /* as sent */
    struct proto_span path;   /* the path, without the query */
    struct proto_span query;  /* after '?', empty when none */
    struct proto_span host;   /* the Host header (or the authority of
                                 an absolute-form target) */
    int minor;                /* HTTP/1.<minor>: 0 or 1 */
    int body;                 /* enum http_body (never CLOSE) */
    uint64_t length;          /* HTTP_BODY_LENGTH: its bytes */
    bool keep_alive;          /* the client keeps the connection */
    bool upgrade;             /* Connection: upgrade + Upgrade */
    bool expect_continue;     /* Expect: 100-continue */
    bool has_host;
    int status;      /* what to answer when refused: 400,
                        414, 431, 417, 501, 505 */
    const char *err; /* a static reason, when refused */
};

/*
 * Parse the request head at the start of <buf> (<len> bytes) into <rq>.
 * PROTO_OK: rq->head bytes are the head, its body follows (rq->body).
 * PROTO_AGAIN: not all in yet (and within the limits). PROTO_FATAL: a
 * request chashd refuses (rq->status, rq->err); the connection cannot be
 * trusted to be in sync after it, so the caller answers and closes.
 */
int http_parse_request(const char *buf, size_t len, struct http_request *rq);

/* A parsed response head, to a request of method <method>. */
struct http_response {
    struct http_header *headers; /* (caller's) [HTTP_HEADERS_MAX] */
    size_t nheaders;
    size_t head; /* bytes of the head */
    int status;  /* 100..599 */
    int minor;   /* HTTP/1.<minor> */
    int body;    /* enum http_body */
    uint64_t length;
    bool keep_alive; /* the member keeps the connection */
    const char *err; /* a static reason, when PROTO_FATAL */
};

/* Parse the response head at the start of <buf> into <rp>, for a request
 * of <method> (HEAD: no body whatever the headers say). PROTO_OK,
 * PROTO_AGAIN (incomplete; a head over <max_head> bytes is PROTO_FATAL),
 * or PROTO_FATAL (rp->err): a member that sends that is answered 502. */
int http_parse_response(const char *buf, size_t len, int method,
                        uint64_t max_head, struct http_response *rp);

/*
 * The chunked-body scanner: it walks a chunked body as it streams by, in
 * pieces of any size, checking its framing (hex sizes without overflow,
 * CRLF after each size and each chunk, extensions without control
 * bytes, trailers that are field lines), without copying anything. Zero
 * it for each body.
 */
struct http_chunked {
    int state;
    uint64_t size;   /* the current chunk's bytes left */
    uint64_t total;  /* data bytes so far */
    unsigned digits; /* of the current size */
    size_t trailer;  /* trailer bytes so far */
};

/*
 * Scan <len> bytes of the body at <buf>. Returns the bytes that belong to
 * the body (all of <len>, or fewer when the body ended inside <buf>: then
 * *<done> is true), or -1 with a static reason in *<err> when the framing
 * is invalid. <max_trailer> bounds the trailer section.
 */
ssize_t http_chunked_scan(struct http_chunked *c, const char *buf, size_t len,
                          size_t max_trailer, bool *done, const char **err);

/* The first header named <name> (<nlen> bytes, any case) of the <n>
 * headers <h> of <buf>: its value span, or NULL. */
const struct proto_span *http_header_find(const char *buf,
                                          const struct http_header *h, size_t n,
                                          const char *name, size_t nlen);

/* The value of cookie <name> in the Cookie headers of <rq>; false when
 * none. */
bool http_cookie_find(const char *buf, const struct http_request *rq,
                      const char *name, size_t nlen, struct proto_span *out);

/* The raw (not percent-decoded) value of query parameter <name> of <rq>'s
 * target; false when absent. */
bool http_query_find(const char *buf, const struct http_request *rq,
                     const char *name, size_t nlen, struct proto_span *out);

/*
 * The routing key of request <rq> (of <buf>): the first link of <chain>
 * (<n> links, struct conf_key_source) present and not empty. <ip> and
 * <ipport> are the client's address as text (source_ip,
 * source_ip_port). The key is written into <out> (<cap> bytes) when it
 * must be changed (a lower-cased host) and pointed at in place otherwise:
 * *<key> and *<klen>. Returns the index of the link used; when none is
 * present, the client's IP is the key and the result is <n> (the
 * fallback).
 */
size_t http_request_key(const char *buf, const struct http_request *rq,
                        const struct conf_key_source *chain, size_t n,
                        const char *ip, const char *ipport, char *out,
                        size_t cap, const char **key, size_t *klen);

/* Whether <method> may be sent twice (RFC 9110 idempotent methods). */
bool http_method_idempotent(int method);

/* The reason phrase of <status> ("Bad Gateway"), "Unknown" for others. */
const char *http_reason(int status);

/*
 * An error response chashd writes itself: status line, Content-Type
 * text/plain, Content-Length, `Connection: close` when <close>, a
 * `Retry-After: <retry_after>` when > 0, and a one-line body "<status>
 * <reason>: <detail>". Into <out> (<cap> bytes); its length (0 when it
 * does not fit).
 */
size_t http_error_response(char *out, size_t cap, int status,
                           const char *detail, bool close,
                           unsigned retry_after);

#endif /* CHASHD_PROTO_HTTP_H */

/* fuzz_http_request.c -- libFuzzer driver for the http mode's request
 * parser: any bytes are a client's pipeline. Each request must end in a
 * whole head whose spans lie in the buffer, a wait (only under the
 * limits), or a refusal with a status chashd answers and a reason --
 * never a crash, a read past the end, or a loop. Its bodies are skipped
 * as the engine would (Content-Length bytes, or the chunked scanner), so
 * the next request is parsed too. The same bytes fed one more at a time
 * give the same verdict where the whole parse gave it, never earlier.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proto/http.h"
#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http_header headers[HTTP_HEADERS_MAX];
static struct http_header again_headers[HTTP_HEADERS_MAX];

static void
check_span(struct proto_span s, size_t limit)
{
    if (s.off > limit || s.len > limit - s.off)
        abort();
}

/* <in> lies inside <out>. */
static void
check_within(struct proto_span in, struct proto_span out)
{
    if (in.off < out.off || in.off + in.len > out.off + out.len)
        abort();
}

static void
check_ok(const char *buf, size_t len, const struct http_request *rq)
{
    if (rq->head == 0 || rq->head > len || rq->err != NULL || rq->status != 0 ||
        rq->nheaders > HTTP_HEADERS_MAX)
        abort();
    if (rq->head > rq->max_head || rq->target.len > rq->max_uri)
        abort();
    if (rq->method < HTTP_GET || rq->method > HTTP_OTHER ||
        rq->method == HTTP_CONNECT || (rq->minor != 0 && rq->minor != 1))
        abort();
    if (rq->body != HTTP_BODY_NONE && rq->body != HTTP_BODY_LENGTH &&
        rq->body != HTTP_BODY_CHUNKED)
        abort();
    if (rq->body == HTTP_BODY_CHUNKED && rq->minor != 1)
        abort();
    if (rq->minor == 1 && !rq->has_host)
        abort();
    if (rq->upgrade && rq->minor != 1)
        abort();
    check_span(rq->line, rq->head);
    check_within(rq->method_text, rq->line);
    check_within(rq->target, rq->line);
    check_within(rq->path, rq->target);
    if (rq->query.len > 0)
        check_within(rq->query, rq->target);
    if (rq->target.len == 0)
        abort();
    check_span(rq->host, rq->head);
    for (size_t i = 0; i < rq->nheaders; i++) {
        const struct http_header *h = &rq->headers[i];

        check_span(h->line, rq->head);
        check_within(h->name, h->line);
        check_within(h->value, h->line);
        if (h->name.len == 0 || h->line.len < 2 ||
            buf[h->line.off + h->line.len - 1] != '\n' ||
            buf[h->line.off + h->line.len - 2] != '\r')
            abort();
        /* no CR, LF or NUL reaches a value the engine copies */
        for (size_t k = 0; k < h->value.len; k++) {
            unsigned char c = (unsigned char)buf[h->value.off + k];
            if (c == '\r' || c == '\n' || c == 0)
                abort();
        }
    }
    if (buf[rq->head - 1] != '\n' || buf[rq->head - 2] != '\r')
        abort();
}

/* The routing key of every kind of link: inside the buffer, the caller's
 * <out>, or the address strings. */
static void
check_keys(const char *buf, const struct http_request *rq, uint8_t pick)
{
    static const char ip[] = "192.0.2.1", ipport[] = "192.0.2.1:4000";
    struct conf_key_source chain[3];
    struct proto_span v;
    const char *key;
    char out[64];
    size_t klen, i;

    memset(chain, 0, sizeof(chain));
    chain[0].kind = CONF_HASH_KEY_COOKIE + pick % 5; /* to HOST */
    memcpy(chain[0].name, "id", 3);
    chain[1].kind = CONF_HASH_KEY_HEADER;
    memcpy(chain[1].name, "x-key", 6);
    chain[2].kind = CONF_HASH_KEY_QUERY;
    memcpy(chain[2].name, "k", 2);
    i = http_request_key(buf, rq, chain, 3, ip, ipport, out, sizeof(out), &key,
                         &klen);
    if (i > 3)
        abort();
    if (key >= buf && key + klen <= buf + rq->head) {
        if (klen == 0)
            abort();
    } else if (key >= out && key + klen <= out + sizeof(out)) {
        if (chain[i].kind != CONF_HASH_KEY_HOST)
            abort();
    } else if (!(key == ip && klen == strlen(ip)) &&
               !(key == ipport && klen == strlen(ipport))) {
        abort();
    }
    if (http_cookie_find(buf, rq, "id", 2, &v))
        check_span(v, rq->head);
    if (http_query_find(buf, rq, "k", 1, &v))
        check_within(v, rq->query);
}

static int
parse(const char *buf, size_t len, uint64_t max_head, uint64_t max_uri,
      struct http_header *h, struct http_request *rq)
{
    memset(rq, 0, sizeof(*rq));
    rq->max_head = max_head;
    rq->max_uri = max_uri;
    rq->headers = h;
    return http_parse_request(buf, len, rq);
}

/*
 * <buf> (<len> bytes, whose whole parse is <st>, <whole>) fed one more
 * byte at a time: each prefix waits until the byte where the whole
 * parse decided, which then gives the same verdict. Long inputs are fed
 * in larger steps, the byte before the verdict always tried.
 */
static void
check_bytewise(const char *buf, size_t len, int st,
               const struct http_request *whole)
{
    struct http_request rq;
    size_t step = len / 256 + 1, n;
    int got;

    for (n = 0; n <= len; n += step) {
        got =
            parse(buf, n, whole->max_head, whole->max_uri, again_headers, &rq);
        if (got != PROTO_AGAIN)
            break;
    }
    if (n > len)
        n = len;
    /* the verdict came at n: the bytes before it still wait */
    for (size_t m = n > step ? n - step : 0; m < n; m++) {
        got =
            parse(buf, m, whole->max_head, whole->max_uri, again_headers, &rq);
        if (got != PROTO_AGAIN) {
            n = m;
            break;
        }
    }
    got = parse(buf, n, whole->max_head, whole->max_uri, again_headers, &rq);
    if (got != st)
        abort();
    if (st == PROTO_FATAL) {
        if (rq.status != whole->status || rq.err == NULL ||
            strcmp(rq.err, whole->err) != 0)
            abort();
    } else if (st == PROTO_OK) {
        if (n != whole->head || rq.head != whole->head ||
            rq.nheaders != whole->nheaders || rq.body != whole->body ||
            rq.length != whole->length || rq.method != whole->method ||
            rq.keep_alive != whole->keep_alive ||
            rq.target.off != whole->target.off ||
            rq.target.len != whole->target.len ||
            rq.host.off != whole->host.off || rq.host.len != whole->host.len)
            abort();
        for (size_t i = 0; i < rq.nheaders; i++)
            if (again_headers[i].hop_by_hop != whole->headers[i].hop_by_hop ||
                again_headers[i].value.off != whole->headers[i].value.off ||
                again_headers[i].value.len != whole->headers[i].value.len)
                abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    /* the limits come from the input's last byte: some runs hit them */
    bool small = size > 0 && (data[size - 1] & 3) == 3;
    uint64_t max_head = small ? 256 : 8192, max_uri = small ? 64 : 4096;
    struct http_request rq;
    size_t pos = 0;
    int st, n = 0;

    while (pos < size && n++ < 100) {
        size_t len = size - pos;

        st = parse(buf + pos, len, max_head, max_uri, headers, &rq);
        if (st == PROTO_FATAL) {
            static const int statuses[] = {400, 405, 414, 417, 431, 501, 505};
            bool known = false;
            for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
                known = known || rq.status == statuses[i];
            if (!known || rq.err == NULL || rq.err[0] == '\0')
                abort();
        } else if (st == PROTO_AGAIN) {
            if (len >= max_head || rq.err != NULL)
                abort();
        } else if (st == PROTO_OK) {
            check_ok(buf + pos, len, &rq);
            check_keys(buf + pos, &rq, data[pos]);
        } else {
            abort();
        }
        check_bytewise(buf + pos, len, st, &rq);
        if (st != PROTO_OK)
            break;
        pos += rq.head;
        /* the body, skipped as the engine forwards it */
        if (rq.body == HTTP_BODY_LENGTH) {
            if (rq.length > size - pos)
                break;
            pos += (size_t)rq.length;
        } else if (rq.body == HTTP_BODY_CHUNKED) {
            struct http_chunked c;
            const char *err = NULL;
            bool done = false;
            ssize_t got;

            memset(&c, 0, sizeof(c));
            got =
                http_chunked_scan(&c, buf + pos, size - pos, 4096, &done, &err);
            if (got < 0) {
                if (err == NULL)
                    abort();
                break;
            }
            if ((size_t)got > size - pos ||
                (!done && (size_t)got != size - pos))
                abort();
            if (!done)
                break;
            pos += (size_t)got;
        }
    }
    return 0;
}

/* fuzz_http_response.c -- libFuzzer driver for the http mode's response
 * parser: any bytes are what a member answers, to a method the input
 * picks. A response must end in a whole head whose spans lie in the
 * buffer and whose framing follows its status and method, a wait (only
 * under the limit), or a refusal with a reason -- never a crash or a read
 * past the end. Fed one more byte at a time, it gives the same verdict
 * where the whole parse gave it, never earlier.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static void
check_ok(const char *buf, size_t len, int method, uint64_t max_head,
         const struct http_response *rp)
{
    if (rp->head < 16 || rp->head > len || rp->head > max_head ||
        rp->err != NULL || rp->nheaders > HTTP_HEADERS_MAX)
        abort();
    if (rp->status < 100 || rp->status > 599 || rp->minor < 0 || rp->minor > 9)
        abort();
    if ((method == HTTP_HEAD || rp->status < 200 || rp->status == 204 ||
         rp->status == 304) &&
        rp->body != HTTP_BODY_NONE)
        abort();
    if (rp->body == HTTP_BODY_CLOSE && rp->keep_alive)
        abort();
    if (rp->body != HTTP_BODY_LENGTH && rp->length != 0 &&
        rp->body != HTTP_BODY_NONE)
        abort();
    for (size_t i = 0; i < rp->nheaders; i++) {
        const struct http_header *h = &rp->headers[i];

        check_span(h->line, rp->head);
        check_span(h->name, rp->head);
        check_span(h->value, rp->head);
        if (h->name.off != h->line.off || h->name.len == 0 ||
            h->value.off + h->value.len > h->line.off + h->line.len)
            abort();
    }
    if (buf[rp->head - 1] != '\n' || buf[rp->head - 2] != '\r')
        abort();
}

static int
parse(const char *buf, size_t len, int method, uint64_t max_head,
      struct http_header *h, struct http_response *rp)
{
    memset(rp, 0, sizeof(*rp));
    rp->headers = h;
    return http_parse_response(buf, len, method, max_head, rp);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    uint8_t last = size > 0 ? data[size - 1] : 0;
    /* the method and the limit come from the input's last byte */
    int method = (last >> 4) % 3 == 0 ? HTTP_HEAD : HTTP_GET;
    uint64_t max_head = (last & 3) == 3 ? 128 : 8192;
    struct http_response rp, again;
    size_t step = size / 256 + 1, n;
    int st, got;

    st = parse(buf, size, method, max_head, headers, &rp);
    if (st == PROTO_OK)
        check_ok(buf, size, method, max_head, &rp);
    else if (st == PROTO_FATAL && (rp.err == NULL || rp.err[0] == '\0'))
        abort();
    else if (st == PROTO_AGAIN && size >= max_head)
        abort();
    else if (st != PROTO_OK && st != PROTO_FATAL && st != PROTO_AGAIN)
        abort();
    /* fed in steps: the first verdict is the whole's, at the same byte */
    for (n = 0; n <= size; n += step)
        if (parse(buf, n, method, max_head, again_headers, &again) !=
            PROTO_AGAIN)
            break;
    if (n > size)
        n = size;
    for (size_t m = n > step ? n - step : 0; m < n; m++)
        if (parse(buf, m, method, max_head, again_headers, &again) !=
            PROTO_AGAIN) {
            n = m;
            break;
        }
    got = parse(buf, n, method, max_head, again_headers, &again);
    if (got != st)
        abort();
    if (st == PROTO_FATAL && strcmp(again.err, rp.err) != 0)
        abort();
    if (st == PROTO_OK &&
        (n != rp.head || again.head != rp.head || again.body != rp.body ||
         again.length != rp.length || again.status != rp.status ||
         again.keep_alive != rp.keep_alive || again.nheaders != rp.nheaders))
        abort();
    return 0;
}

/* fuzz_redis_reply.c -- libFuzzer driver for the redis mode's reply side:
 * any bytes are what a member sent. A parse ends in a measured reply (its
 * prefixes wait), a wait, or PROTO_FATAL; the merge helpers agree with
 * the parser; an error reply built from any text is one terminated line
 * that fits. Never a crash, a read past the end, or deep recursion.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_elements(const char *buf, size_t len)
{
    struct proto_span out[16];
    long n, i;
    size_t end;

    n = redis_reply_elements(buf, len, out, 16);
    if (buf[0] != '*') {
        if (n != -1)
            abort();
        return;
    }
    if (n < 0)
        abort(); /* the parser took it as a whole array */
    /* the elements are contiguous and end with the reply */
    end = 0;
    for (i = 0; i < n && i < 16; i++) {
        if (i > 0 && out[i].off != end)
            abort();
        end = out[i].off + out[i].len;
        if (end > len)
            abort();
    }
    if (n > 0 && n <= 16 && end != len)
        abort();
}

static void
check_error_reply(const uint8_t *data, size_t size)
{
    char msg[256], out[128];
    size_t n = size < sizeof(msg) - 1 ? size : sizeof(msg) - 1, w, i;
    int kind = size > 0 ? data[0] % 5 : 0;

    memcpy(msg, data, n);
    msg[n] = '\0';
    w = proto_redis.error_reply(out, (size > 1 ? data[1] : 0) % sizeof(out),
                                kind, msg);
    if (w == 0)
        return;
    if (w < 3 || out[0] != '-' || out[w - 2] != '\r' || out[w - 1] != '\n')
        abort();
    for (i = 0; i < w - 2; i++)
        if (out[i] == '\r' || out[i] == '\n')
            abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct proto_reply rp, again;
    long long v;
    int st;

    st = proto_redis.parse_reply(buf, size, NULL, &rp);
    if (st == PROTO_OK) {
        if (rp.len == 0 || rp.len > size)
            abort();
        if (rp.error != (buf[0] == '-'))
            abort();
        if (rp.member_failure && !rp.error)
            abort();
        if (proto_redis.parse_reply(buf, rp.len - 1, NULL, &again) !=
            PROTO_AGAIN)
            abort();
        if (proto_redis.parse_reply(buf, rp.len, NULL, &again) != PROTO_OK ||
            again.len != rp.len || again.body != rp.body)
            abort();
        if (rp.body == 0)
            check_elements(buf, rp.len);
        else if (buf[0] != '$' || rp.body < PROTO_STREAM_MIN + 2)
            abort();
        if (buf[0] == ':' && redis_reply_integer(buf, rp.len, &v) != 0)
            abort();
    } else if (st != PROTO_AGAIN && st != PROTO_FATAL) {
        abort();
    }
    check_error_reply(data, size);
    st = proto_redis.probe_reply(buf, size);
    if (st < -1 || st > 1)
        abort();
    return 0;
}

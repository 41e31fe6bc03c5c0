/* fuzz_memcache_reply.c -- libFuzzer driver for the memcache mode's reply
 * side: any bytes are what a member sent. A parse ends in a measured
 * reply (its prefixes wait; a quiet request's reply ends with MN), a
 * wait, or PROTO_FATAL; the VALUE block walker agrees with it; base64
 * decoding stays in its buffer; an error reply built from any text is one
 * terminated line that fits. Never a crash or a read past the end.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/memcache.h"
#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_reply(const char *buf, size_t size, const struct proto_request *ctx)
{
    struct proto_reply rp, again;
    int st = proto_memcache.parse_reply(buf, size, ctx, &rp);

    if (st == PROTO_OK) {
        if (rp.len == 0 || rp.len > size || rp.body != 0)
            abort();
        if (buf[rp.len - 1] != '\n')
            abort();
        if (ctx != NULL && (ctx->flags & PROTO_REQ_NOREPLY) &&
            !(rp.len >= 3 && memcmp(buf + rp.len - 3, "MN\n", 3) == 0) &&
            !(rp.len >= 4 && memcmp(buf + rp.len - 4, "MN\r\n", 4) == 0))
            abort(); /* a quiet request's reply ends with its MN */
        if (proto_memcache.parse_reply(buf, rp.len - 1, ctx, &again) !=
            PROTO_AGAIN)
            abort();
        if (proto_memcache.parse_reply(buf, rp.len, ctx, &again) != PROTO_OK ||
            again.len != rp.len || again.error != rp.error)
            abort();
        if (!(ctx != NULL && (ctx->flags & PROTO_REQ_NOREPLY)) && size >= 6 &&
            memcmp(buf, "VALUE ", 6) == 0 && !rp.error) {
            /* the walker steps through the same blocks to END */
            size_t off = 0, block;
            struct proto_span k;
            int n;
            while ((n = mc_value_block(buf + off, rp.len - off, &k, &block)) ==
                   1) {
                if (k.off + k.len > block || block > rp.len - off)
                    abort();
                off += block;
            }
            if (n != 0 || memcmp(buf + off, "END", 3) != 0)
                abort();
        }
    } else if (st != PROTO_AGAIN && st != PROTO_FATAL) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct proto_request quiet = {.command = MC_MG, .flags = PROTO_REQ_NOREPLY};
    unsigned char out[MC_KEY_MAX];
    char msg[256], err[100];
    size_t n = size < sizeof(msg) - 1 ? size : sizeof(msg) - 1, w;
    long d;

    check_reply(buf, size, NULL);
    check_reply(buf, size, &quiet);
    d = mc_base64_decode(buf, size, out, sizeof(out));
    if (d > (long)sizeof(out) || (d >= 0 && (size % 4 != 0 || size == 0)))
        abort();
    memcpy(msg, data, n);
    msg[n] = '\0';
    w = proto_memcache.error_reply(err, (size > 1 ? data[1] : 0) % sizeof(err),
                                   size > 0 ? data[0] % 5 : 0, msg);
    if (w != 0) {
        if (w < 2 || err[w - 2] != '\r' || err[w - 1] != '\n')
            abort();
        for (size_t i = 0; i < w - 2; i++)
            if (err[i] == '\r' || err[i] == '\n')
                abort();
    }
    proto_memcache.probe_reply(buf, size);
    return 0;
}

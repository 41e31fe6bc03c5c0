/* fuzz_http_chunked.c -- libFuzzer driver for the chunked-body scanner:
 * the input's first byte seeds the sizes of the pieces the rest is cut
 * into (as reads from a socket would cut it) and picks the trailer
 * limit. Scanned piece by piece, the body must end at the same byte,
 * with the same data bytes, or be refused with the same reason, as when
 * it is scanned in one piece -- and the scanner never claims more bytes
 * than it was given.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a scan found: the body's bytes (or -1), whether it ended, the
 * data bytes in it, the reason of a refusal. */
struct verdict {
    ssize_t n;
    bool done;
    uint64_t total;
    const char *err;
};

/* A small xorshift generator: the pieces follow from the seed alone. */
static uint32_t
next_piece(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static struct verdict
scan(const char *buf, size_t len, size_t max_trailer, uint32_t seed,
     bool pieces)
{
    struct http_chunked c;
    struct verdict v = {0, false, 0, NULL};
    size_t pos = 0;
    uint32_t x = seed | 1;

    memset(&c, 0, sizeof(c));
    do {
        size_t piece = len - pos;
        ssize_t got;

        if (pieces) {
            /* mostly small pieces, sometimes a large one */
            uint32_t r = next_piece(&x);
            size_t want = r & 0x100 ? (r >> 9) % 4096 : (r >> 9) % 8 + 1;
            if (want < piece)
                piece = want;
        }
        got = http_chunked_scan(&c, buf + pos, piece, max_trailer, &v.done,
                                &v.err);
        if (got < 0) {
            if (got != -1 || v.err == NULL)
                abort();
            v.n = -1;
            return v;
        }
        if ((size_t)got > piece || (!v.done && (size_t)got != piece))
            abort();
        pos += (size_t)got;
        if (c.total > pos)
            abort(); /* data bytes are bytes of the body */
    } while (!v.done && pos < len);
    v.n = (ssize_t)pos;
    v.total = c.total;
    return v;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct verdict whole, cut;
    size_t max_trailer;
    uint32_t seed;

    if (size < 1)
        return 0;
    seed = (uint32_t)data[0] * 2654435761u;
    max_trailer = data[0] & 0x80 ? 32 : 4096;
    whole = scan((const char *)data + 1, size - 1, max_trailer, seed, false);
    cut = scan((const char *)data + 1, size - 1, max_trailer, seed, true);
    if (whole.n != cut.n || whole.done != cut.done)
        abort();
    if (whole.n >= 0 && whole.total != cut.total)
        abort();
    if (whole.n < 0 && strcmp(whole.err, cut.err) != 0)
        abort();
    return 0;
}

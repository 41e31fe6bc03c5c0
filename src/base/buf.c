/* buf.c -- the growable byte buffer (buf.h).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int
buf_reserve(struct buf *b, size_t more)
{
    size_t live = b->len - b->off, cap;
    char *d;

    if (b->off > 0 && b->off == b->len)
        b->off = b->len = 0;
    if (b->len + more <= b->cap)
        return 0;
    /* Move the live bytes down when they fill at most half of it: a
     * buffer consumed from the front stays small, and each move follows
     * at least half a buffer consumed or appended (amortised constant per
     * byte). Else it grows, at least doubling. */
    if (b->off > 0 && live + more <= b->cap / 2) {
        memmove(b->data, b->data + b->off, live);
        b->len = live;
        b->off = 0;
        return 0;
    }
    cap = b->cap ? b->cap * 2 : 512;
    while (cap < live + more)
        cap *= 2;
    if (b->off == 0) {
        /* nothing to move down: realloc may grow it in place (or, for a
         * large one, remap its pages) instead of copying it */
        d = realloc(b->data, cap);
        if (d == NULL)
            return -1;
        b->data = d;
        b->cap = cap;
        return 0;
    }
    d = malloc(cap);
    if (d == NULL)
        return -1;
    if (live > 0)
        memcpy(d, b->data + b->off, live);
    free(b->data);
    b->data = d;
    b->len = live;
    b->off = 0;
    b->cap = cap;
    return 0;
}

int
buf_append(struct buf *b, const void *data, size_t n)
{
    if (n == 0)
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, data, n);
    b->len += n;
    return 0;
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n + 1) < 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void
buf_free(struct buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void
buf_reset(struct buf *b, size_t keep)
{
    if (b->cap > keep)
        buf_free(b);
    b->off = b->len = 0;
}

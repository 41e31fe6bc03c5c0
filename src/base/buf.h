/* buf.h -- the one growable byte buffer of chashd's engines: bytes
 * [off, len) of <data> are live, consumed from the front, appended at the
 * end. Growth at least doubles and live bytes move down only when they
 * fill at most half of it, so appending and consuming cost amortised
 * constant time per byte, and a large buffer read slowly at its front and
 * filled at its end (a 64 MB value for a slow client) is never copied
 * whole per append. Not shared between threads.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_BUF_H
#define CHASHD_BUF_H

#include <stddef.h>
#include <string.h>

struct buf {
    char *data;
    size_t off, len, cap;
};

/* Room for <more> bytes after <len>. 0, or -1 when out of memory (<b>
 * unchanged). */
int buf_reserve(struct buf *b, size_t more);
/* Append <n> bytes (nothing for 0, not even an allocation). 0 or -1. */
int buf_append(struct buf *b, const void *data, size_t n);
/* Append the text of printf(<fmt>, ...), without its NUL. 0 or -1. */
int buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Empty it and give its memory back. */
void buf_free(struct buf *b);
/* Empty it for reuse: its memory kept while at most <keep> bytes (no
 * malloc per request), given back beyond (a large body grew it). */
void buf_reset(struct buf *b, size_t keep);

/* The live bytes. */
static inline size_t
buf_size(const struct buf *b)
{
    return b->len - b->off;
}

/* Append the string <s>. 0 or -1. */
static inline int
buf_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

#endif /* CHASHD_BUF_H */

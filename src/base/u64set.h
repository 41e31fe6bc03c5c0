/* u64set.h -- a set of non-zero 64-bit values (open addressing, linear
 * probing, grown at half full), for the keys a pass or a worker has seen
 * by their hash: the repairer's keys handed out (replica.c), a home's keys
 * compared since chashd started (request_rep.c). Header only, no thread
 * safety: one owner.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_U64SET_H
#define CHASHD_U64SET_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct u64set {
    uint64_t *h; /* [cap], 0: an empty slot */
    size_t cap, n;
};

/*
 * Add <k> (non-zero) to <s>, which holds at most <max> values: 1 when it
 * was added, 0 when it was there, -1 when it could not be (<max> reached,
 * or out of memory: the set is unchanged, the caller decides).
 */
static inline int
u64set_put(struct u64set *s, uint64_t k, size_t max)
{
    size_t i;

    if ((s->n + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        uint64_t *nh;

        if (s->n >= max || (nh = calloc(ncap, sizeof(*nh))) == NULL)
            return -1;
        for (size_t j = 0; j < s->cap; j++)
            if (s->h[j] != 0) {
                size_t q = (size_t)s->h[j] & (ncap - 1);

                while (nh[q] != 0)
                    q = (q + 1) & (ncap - 1);
                nh[q] = s->h[j];
            }
        free(s->h);
        s->h = nh;
        s->cap = ncap;
    }
    for (i = (size_t)k & (s->cap - 1); s->h[i] != 0; i = (i + 1) & (s->cap - 1))
        if (s->h[i] == k)
            return 0;
    s->h[i] = k;
    s->n++;
    return 1;
}

/* Empty <s> and free its memory. */
static inline void
u64set_clear(struct u64set *s)
{
    free(s->h);
    memset(s, 0, sizeof(*s));
}

#endif /* CHASHD_U64SET_H */

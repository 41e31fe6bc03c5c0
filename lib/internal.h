/* internal.h -- libchash internals shared by the algorithm files: the ring
 * object, the per-algorithm operations and the continuum engine.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_INTERNAL_H
#define CHASH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chash/chash.h"

/* Symbols shared between library files but not exported. */
#define CHASH__HIDDEN __attribute__((visibility("hidden")))

struct chash_ring;

/*
 * A continuum: points sorted by position on a 64-bit circle, each owned
 * by a member, with a bucket index over the top bits of the position so a
 * lookup touches one or two cache lines instead of log2(points).
 *
 * Invariants: pos[] is sorted ascending (ties in the builder's order);
 * owner[i] is a member index; index has (1 << bits) + 1 entries and
 * index[b] is the first point whose top <bits> bits are >= b, so the
 * successor of h lies in pos[index[b] .. index[b+1]] (or wraps to 0).
 * Layout: 8 (pos) + 4 (owner) + at most 4 (index, since the bucket count
 * is the largest power of two not above the point count) = 16 bytes a
 * point at most.
 */
struct chash__continuum {
    uint64_t *pos;   /* sorted point positions */
    uint32_t *owner; /* owner[i]: member index of point i */
    uint32_t *index; /* bucket -> first point at or after it */
    size_t npoints;
    unsigned shift; /* 64 - bits; bucket = pos >> shift */
};

/* A point before sorting: the builder fills these. <tie> orders equal
 * positions (algorithm-defined, e.g. insertion order). */
struct chash__point {
    uint64_t pos;
    uint64_t tie;
    uint32_t owner;
};

/* Sort <pts> by (pos, tie) and build <c> from them. 0 or -CHASH_ENOMEM.
 * With <dedup>, points whose position equals the previous one's are
 * dropped (nginx). Does not free <pts>. */
int chash__continuum_build(struct chash__continuum *c, struct chash__point *pts,
                           size_t n, bool dedup);
void chash__continuum_deinit(struct chash__continuum *c);
/* Index of the first point with position >= <h>, wrapping to 0. Inline:
 * it is the whole of a ring lookup, and a call would cost a third of it. */
static inline size_t
chash__continuum_find(const struct chash__continuum *c, uint64_t h)
{
    size_t b = (size_t)(h >> c->shift);
    size_t lo = c->index[b], hi = c->index[b + 1];

    /* The successor of h is in this bucket or is the first point after
     * it. Buckets hold one or two points on average: scan them; fall back
     * to a binary search for the rare crowded bucket. */
    if (hi - lo > 8) {
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (c->pos[mid] < h)
                lo = mid + 1;
            else
                hi = mid;
        }
    } else {
        while (lo < hi && c->pos[lo] < h)
            lo++;
    }
    return lo == c->npoints ? 0 : lo;
}
/* Sum of arc lengths (as fractions of 2^64) per owner into <share>[nmem]. */
void chash__continuum_shares(const struct chash__continuum *c, double *share,
                             size_t nmem);
size_t chash__continuum_memory(const struct chash__continuum *c);

/* The callback a diff reports segments to: <fraction> of the hash space
 * is owned by member <from> of the old ring and <to> of the new one. */
typedef void (*chash__segment_fn)(void *ctx, size_t from, size_t to,
                                  double fraction);

/* Merge two continua and report every segment to <fn>. */
void chash__continuum_diff(const struct chash__continuum *a,
                           const struct chash__continuum *b,
                           chash__segment_fn fn, void *ctx);

/* What each algorithm provides. The lookup fast paths of the continuum
 * algorithms are dispatched directly in chash.c; these are the rest. */
struct chash__ops {
    int (*build)(struct chash_ring *r);
    void (*deinit)(struct chash_ring *r);
    size_t (*lookup)(const struct chash_ring *r, uint64_t h);
    size_t (*lookup_n)(const struct chash_ring *r, uint64_t h, size_t *out,
                       size_t n);
    /* fill r->share[] (called once after build) */
    void (*shares)(struct chash_ring *r);
    /* report segments of the hash space between two rings of this algo;
     * NULL means: sample 2^20 evenly spaced hashes */
    void (*diff)(const struct chash_ring *a, const struct chash_ring *b,
                 chash__segment_fn fn, void *ctx);
    uint64_t (*key_hash)(const struct chash_ring *r, const void *key,
                         size_t len);
    bool exact_diff;
};

struct chash__member {
    char *name; /* owned copy */
    size_t namelen;
    uint32_t weight;
    double ramp;
    size_t points; /* points (or entries) owned after weight and ramp */
};

/*
 * The ring object. Immutable after chash_ring_create returns. <members> is
 * in the caller's array order (lookups return those indexes); <by_name>
 * lists member indexes sorted by name so that builders can work in an
 * order that does not depend on the array (history independence).
 */
struct chash_ring {
    struct chash_config cfg; /* with defaults filled in */
    const struct chash__ops *ops;
    struct chash__member *members;
    size_t nmembers;
    uint32_t *by_name;            /* member indexes sorted by name */
    double *share;                /* exact share per member */
    size_t nowners;               /* members owning something */
    uint64_t total_points;        /* sum of members[].points */
    struct chash__continuum cont; /* ring, ketama, nginx */
    unsigned pos_shift;           /* continuum position = hash << this
                                     (32 for the 32-bit ketama, nginx) */
    void *algo;                   /* maglev, rendezvous, jump state */
    uint64_t checksum;
};

/* Sort member indexes <order>[0..n) stably by <cmp>; <tmp> is n entries
 * of scratch (chash.c). by_name uses it with strcmp; ketama with
 * twemproxy's server order. */
typedef int (*chash__member_cmp)(const struct chash__member *a,
                                 const struct chash__member *b);
void chash__sort_members(const struct chash_ring *r, uint32_t *order,
                         uint32_t *tmp, size_t n, chash__member_cmp cmp);

/* twemproxy's points for a server of <weight> among <nlive> live servers
 * of <total> weight (ketama.c; chash_ring_points_needed counts with it). */
uint32_t chash__ketama_points(uint32_t weight, uint32_t total,
                              uint32_t nlive) CHASH__HIDDEN;

/* Algorithm operation tables, one per file. */
extern const struct chash__ops chash__ring_ops CHASH__HIDDEN;
extern const struct chash__ops chash__maglev_ops CHASH__HIDDEN;
extern const struct chash__ops chash__rendezvous_ops CHASH__HIDDEN;
extern const struct chash__ops chash__jump_ops CHASH__HIDDEN;
extern const struct chash__ops chash__ketama_ops CHASH__HIDDEN;
extern const struct chash__ops chash__nginx_ops CHASH__HIDDEN;
extern const struct chash__ops chash__zoned_ops CHASH__HIDDEN;
extern const struct chash__ops chash__zoned_sampled_ops CHASH__HIDDEN;
/* The sampled diff (2^20 hashes) of chash.c, for rings without an exact
 * one. */
void chash__sampled_diff(const struct chash_ring *a, const struct chash_ring *b,
                         chash__segment_fn fn, void *ctx) CHASH__HIDDEN;

/* Ready-made operations for continuum algorithms (chash.c): lookup,
 * lookup_n (walk clockwise collecting distinct owners), shares and diff. */
size_t chash__continuum_lookup(const struct chash_ring *r, uint64_t hash);
size_t chash__continuum_lookup_n(const struct chash_ring *r, uint64_t hash,
                                 size_t *out, size_t n);
void chash__continuum_ring_shares(struct chash_ring *r);
void chash__continuum_ring_diff(const struct chash_ring *a,
                                const struct chash_ring *b,
                                chash__segment_fn fn, void *ctx);
/* Spread a 32-bit hash over 64 bits: h<<32 | h. */
static inline uint64_t
chash__widen(uint64_t h, int bits)
{
    return bits == 32 ? (h << 32) | (h & 0xffffffffu) : h;
}

#endif /* CHASH_INTERNAL_H */

/* internal.h -- libchash internals shared by the modules of lib/: the
 * continuum engine, the member helpers, the ring object and the
 * per-algorithm operations chash.c dispatches through.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The order of lib/ (lowest layer first). A module uses -- calls, or names
 * a table or object of -- only modules of lower layers; modules of one
 * layer never use each other. So nothing calls up and there is no circle.
 * Below, each .c file of lib/ with its layer and the lib modules it may
 * use (what nm shows it needs from the other objects of lib/ must stay
 * within that list):
 *
 *   module        layer  may use
 *   hash_compat   0      -
 *   hash          1      hash_compat
 *   continuum     2      -
 *   member        2      -
 *   ring          3      hash continuum member
 *   ketama        3      hash continuum member
 *   nginx         3      hash continuum member
 *   maglev        3      hash
 *   jump          3      hash
 *   rendezvous    3      hash
 *   chash         4      hash continuum member ring ketama nginx maglev jump
 *                        rendezvous
 *   zring         5      chash continuum member
 *
 * Layer 0-1: key hash functions (hash.h, hash_compat.h: they include
 * nothing of lib/). Layer 2: what several algorithms share -- continuum.c
 * the sorted points (build, find, shares, diff, and the ready-made ring
 * operations over them), member.c the member sort and point counts.
 * Layer 3: one file per algorithm, each exporting one struct chash__ops
 * and nothing else. Layer 4: chash.c, the public ring API, which knows
 * the algorithms only as rows of its table of ops: whatever differs
 * between algorithms is an op or a field of struct chash__ops, never an
 * `if (algo == ...)` in chash.c. Layer 5: zring.c, zones over rings, a
 * client of the ring API (it builds its rings with chash_ring_create).
 * A zoned ring's own ops live in zring.c and are reached from chash.c only
 * through r->ops, a pointer, never by name.
 *
 * Headers: hash.h (module hash) and hash_compat.h (module hash_compat)
 * include no lib/ header; this one includes only chash/chash.h and is
 * included from layer 2 up. Its inline functions belong to the module
 * their section names.
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

/* ---- the continuum engine (continuum.c) ------------------------------- */

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

/* ---- the ring object and the operations of an algorithm --------------- */

/* The checksum's fold (chash_ring_checksum): a cheap order-sensitive mix,
 * the splitmix64 finaliser over the sum. Inline so that every checksum op
 * folds the same way wherever it lives. */
static inline uint64_t
chash__checksum_mix(uint64_t acc, uint64_t v)
{
    acc ^= v + 0x9e3779b97f4a7c15ULL + (acc << 6) + (acc >> 2);
    acc ^= acc >> 30;
    acc *= 0xbf58476d1ce4e5b9ULL;
    acc ^= acc >> 27;
    acc *= 0x94d049bb133111ebULL;
    acc ^= acc >> 31;
    return acc;
}

/*
 * What each algorithm provides; chash.c keeps one row per algorithm and
 * nothing else of them. Whenever a ring has a continuum (r->cont.npoints
 * > 0), chash.c answers lookups, batches and bounded lookups from it
 * directly, without an indirect call (the ring's fast path); these ops
 * are the rest. NULL is allowed where a field says so.
 */
struct chash__ops {
    const char *name; /* config / CLI name (chash_algo_name) */
    int (*build)(struct chash_ring *r);
    void (*deinit)(struct chash_ring *r); /* NULL: no r->algo state */
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
    /* chash_ring_points_needed: the points (or entries) a create of
     * <members>[0..n) under <cfg> (defaults filled in) would allocate */
    uint64_t (*points_needed)(const struct chash_config *cfg,
                              const struct chash_member *members, size_t n);
    /* fold who owns what into <acc> with chash__checksum_mix, <name_hash>
     * being xxh3 of each member's name; NULL: the members in name order,
     * each with its points */
    uint64_t (*checksum)(const struct chash_ring *r, uint64_t acc,
                         const uint64_t *name_hash);
    /* bytes of algorithm state a ring of <cfg> holds beyond its members
     * and continuum (chash_ring_memory); NULL: none counted */
    size_t (*state_memory)(const struct chash_config *cfg);
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

/* ---- ready-made ring operations over r->cont (continuum.c) ------------ */

/* For the continuum algorithms' ops tables: lookup, lookup_n (walk
 * clockwise collecting distinct owners), shares, diff (merge) and
 * checksum (every point's position and owner name). */
size_t chash__continuum_lookup(const struct chash_ring *r, uint64_t hash);
size_t chash__continuum_lookup_n(const struct chash_ring *r, uint64_t hash,
                                 size_t *out, size_t n);
void chash__continuum_ring_shares(struct chash_ring *r);
void chash__continuum_ring_diff(const struct chash_ring *a,
                                const struct chash_ring *b,
                                chash__segment_fn fn, void *ctx);
uint64_t chash__continuum_ring_checksum(const struct chash_ring *r,
                                        uint64_t acc,
                                        const uint64_t *name_hash);

/* ---- member helpers (member.c) ---------------------------------------- */

/* Sort member indexes <order>[0..n) stably by <cmp>; <tmp> is n entries
 * of scratch. chash.c's by_name uses it with strcmp; ketama with
 * twemproxy's server order. */
typedef int (*chash__member_cmp)(const struct chash__member *a,
                                 const struct chash__member *b);
void chash__sort_members(const struct chash_ring *r, uint32_t *order,
                         uint32_t *tmp, size_t n, chash__member_cmp cmp);
/* <points> counted for chash_ring_points_needed: capped at
 * CHASH_MAX_MEMBER_POINTS. */
uint64_t chash__cap_points(uint64_t points);
/* The sum over <members>[0..n) of weight x <per_weight>, each capped. */
uint64_t chash__points_by_weight(const struct chash_member *members, size_t n,
                                 uint64_t per_weight);

/* ---- the algorithms: one table each, in its own file ------------------ */

extern const struct chash__ops chash__ring_ops CHASH__HIDDEN;
extern const struct chash__ops chash__maglev_ops CHASH__HIDDEN;
extern const struct chash__ops chash__rendezvous_ops CHASH__HIDDEN;
extern const struct chash__ops chash__jump_ops CHASH__HIDDEN;
extern const struct chash__ops chash__ketama_ops CHASH__HIDDEN;
extern const struct chash__ops chash__nginx_ops CHASH__HIDDEN;

#endif /* CHASH_INTERNAL_H */

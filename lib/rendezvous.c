/* rendezvous.c -- weighted rendezvous hashing, highest random weight
 * (CHASH_ALGO_RENDEZVOUS): every member scores every key and the highest
 * score wins; the next highest are the replicas and the failover order.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Definition (frozen; golden vectors in tests/unit/test_algos.c, see
 * doc/internals/algorithms.md):
 * - name hash  n_i = XXH3-64(name, seed 0)
 * - mix        x   = chash__fmix64(h XOR n_i), MurmurHash3's 64-bit finaliser
 *                    (a bijection with full avalanche), h the 64-bit key hash
 * - uniform    u   = ((x >> 12) + 0.5) / 2^52, in (0, 1), never 0 or 1
 *                    (exact in a double: 53 significant bits)
 * - score      s_i = -w_i / ln(u), w_i = weight x ramp (Schindelhauer and
 *                    Schomaker's weighted form: P(i wins) = w_i / W exactly)
 * The highest score wins; equal scores (in practice never) go to the
 * member first by name. When all owning members have the same weight, s_i
 * is monotone in x >> 12, so the logs are skipped and x >> 12 is compared
 * directly: the same order, except where rounding of the log makes two
 * close scores equal (a tie the weighted form breaks by name), about once
 * in 2^50 keys.
 * Members with weight x ramp = 0 own nothing and never score.
 *
 * Cost: a lookup computes one score per member, O(n): measured about 1.5-2
 * ns a member with equal weights and 7.5 ns with unequal ones (a log each),
 * so 150 ns and 750 ns at 100 members against tens of ns for the ring and
 * 2 ns for maglev. Use it
 * for small pools (tens of members), where its perfect spreading of a
 * failed member's keys and its free replica order are worth it; use the
 * ring or maglev for large ones.
 *
 * Properties (tests/unit/test_algos.c):
 * - Deterministic and history-free: a score depends on the key and the
 *   member's own name and weight; ties go by name.
 * - Minimal movement: adding a member can only take keys (its score beats
 *   the old winner or not); removing one moves only its keys (to their
 *   second choice); changing w_i moves keys only to or from member i.
 * - Monotone slow start: ramp multiplies the weight, raising it raises only
 *   that member's scores, so keys move only onto it.
 * - share = w_i / W in closed form (exact in expectation over uniform
 *   hashes); diff is measured on 2^20 evenly spaced hashes (chash.c).
 * - chash_ring_member_points() is max(1, round(160 x weight x ramp)) for
 *   an owning member: a measure of its effective weight, which bounded
 *   loads use as the member's capacity.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#include "hash.h"

struct rz_member {
    uint64_t name_hash;
    double weight;   /* weight x ramp, > 0 */
    uint32_t member; /* index into r->members */
};

struct rendezvous {
    struct rz_member *m; /* owning members in name order */
    size_t n;
    bool uniform; /* all weights equal: compare x >> 12 */
};

/* The score of member <m> for key hash <h>; larger wins. */
static inline double
score(const struct rendezvous *rz, const struct rz_member *m, uint64_t h)
{
    uint64_t x = chash__fmix64(h ^ m->name_hash) >> 12;

    if (rz->uniform)
        return (double)x; /* < 2^52: exact */
    double u = ((double)x + 0.5) * 0x1p-52;
    return -m->weight / log(u);
}

static void
rz_deinit(struct chash_ring *r)
{
    struct rendezvous *rz = r->algo;

    if (rz == NULL)
        return;
    free(rz->m);
    free(rz);
    r->algo = NULL;
}

static int
rz_build(struct chash_ring *r)
{
    struct rendezvous *rz;
    size_t n = 0;

    for (size_t m = 0; m < r->nmembers; m++) {
        r->members[m].points = 0;
        if ((double)r->members[m].weight * r->members[m].ramp > 0)
            n++;
    }
    if (n == 0)
        return -CHASH_EEMPTY;
    rz = calloc(1, sizeof(*rz));
    if (rz == NULL)
        return -CHASH_ENOMEM;
    rz->m = malloc(n * sizeof(*rz->m));
    if (rz->m == NULL) {
        free(rz);
        return -CHASH_ENOMEM;
    }
    r->algo = rz;
    rz->uniform = true;
    for (size_t rank = 0; rank < r->nmembers; rank++) {
        uint32_t m = r->by_name[rank];
        struct chash__member *mem = &r->members[m];
        double w = (double)mem->weight * mem->ramp, p;
        if (!(w > 0))
            continue;
        rz->m[rz->n].name_hash = chash__xxh3(mem->name, mem->namelen);
        rz->m[rz->n].weight = w;
        rz->m[rz->n].member = m;
        if (rz->n > 0 && w != rz->m[0].weight)
            rz->uniform = false;
        rz->n++;
        p = round(w * CHASH_DEFAULT_POINTS);
        mem->points = p < 1 ? 1 : (size_t)p;
    }
    return 0;
}

static size_t
rz_lookup(const struct chash_ring *r, uint64_t h)
{
    const struct rendezvous *rz = r->algo;
    size_t best = 0;
    double bs = score(rz, &rz->m[0], h);

    /* Strictly greater: on a tie the earlier name keeps it. */
    for (size_t i = 1; i < rz->n; i++) {
        double s = score(rz, &rz->m[i], h);
        if (s > bs) {
            bs = s;
            best = i;
        }
    }
    return rz->m[best].member;
}

/* (score, rank) pairs ordered best first: higher score, then lower rank. */
struct scored {
    double s;
    size_t rank;
};

static bool
better(double s1, size_t r1, double s2, size_t r2)
{
    return s1 > s2 || (s1 == s2 && r1 < r2);
}

static int
cmp_scored(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (better(x->s, x->rank, y->s, y->rank))
        return -1;
    return better(y->s, y->rank, x->s, x->rank) ? 1 : 0;
}

/*
 * The top <n> members by score. Small n (replicas, failover) keeps a
 * sorted stack array; large n (bounded loads walking the whole order)
 * scores everything and sorts. If that allocation fails, n passes each
 * pick the best below the previous pick: slow, but a lookup cannot fail.
 */
static size_t
rz_lookup_n(const struct chash_ring *r, uint64_t h, size_t *out, size_t n)
{
    const struct rendezvous *rz = r->algo;
    enum { SMALL = 16 };

    if (n > rz->n)
        n = rz->n;
    if (n == 0)
        return 0;
    if (n <= SMALL) {
        struct scored top[SMALL];
        size_t got = 0;
        for (size_t i = 0; i < rz->n; i++) {
            double s = score(rz, &rz->m[i], h);
            size_t k = got;
            if (got == n && !better(s, i, top[n - 1].s, top[n - 1].rank))
                continue;
            if (got < n)
                got++;
            else
                k = n - 1;
            /* insert at its place, dropping the last when full */
            while (k > 0 && better(s, i, top[k - 1].s, top[k - 1].rank)) {
                top[k] = top[k - 1];
                k--;
            }
            top[k] = (struct scored){s, i};
        }
        for (size_t k = 0; k < got; k++)
            out[k] = rz->m[top[k].rank].member;
        return got;
    }
    struct scored *all = malloc(rz->n * sizeof(*all));
    if (all != NULL) {
        for (size_t i = 0; i < rz->n; i++)
            all[i] = (struct scored){score(rz, &rz->m[i], h), i};
        qsort(all, rz->n, sizeof(*all), cmp_scored);
        for (size_t k = 0; k < n; k++)
            out[k] = rz->m[all[k].rank].member;
        free(all);
        return n;
    }
    double ps = INFINITY;
    size_t pr = 0;
    for (size_t k = 0; k < n; k++) {
        double bs = -INFINITY;
        size_t br = SIZE_MAX;
        for (size_t i = 0; i < rz->n; i++) {
            double s = score(rz, &rz->m[i], h);
            if ((k == 0 || better(ps, pr, s, i)) &&
                (br == SIZE_MAX || better(s, i, bs, br))) {
                bs = s;
                br = i;
            }
        }
        out[k] = rz->m[br].member;
        ps = bs;
        pr = br;
    }
    return n;
}

static void
rz_shares(struct chash_ring *r)
{
    const struct rendezvous *rz = r->algo;
    double total = 0;

    for (size_t i = 0; i < rz->n; i++)
        total += rz->m[i].weight;
    for (size_t m = 0; m < r->nmembers; m++)
        r->share[m] = 0;
    for (size_t i = 0; i < rz->n; i++)
        r->share[rz->m[i].member] = rz->m[i].weight / total;
}

static uint64_t
rz_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    int id = r->cfg.hash;
    return chash__widen(chash_hash(id, key, len), chash_hash_bits(id));
}

/* No points: O(n) state, one entry a member. */
static uint64_t
rz_points_needed(const struct chash_config *cfg,
                 const struct chash_member *members, size_t n)
{
    (void)cfg;
    (void)members;
    return n;
}

const struct chash__ops chash__rendezvous_ops = {
    .name = "rendezvous",
    .build = rz_build,
    .deinit = rz_deinit,
    .lookup = rz_lookup,
    .lookup_n = rz_lookup_n,
    .shares = rz_shares,
    .diff = NULL,
    .key_hash = rz_key_hash,
    .points_needed = rz_points_needed,
    .checksum = NULL, /* members by name with their points */
    .exact_diff = false,
};

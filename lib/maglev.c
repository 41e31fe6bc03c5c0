/* maglev.c -- Maglev consistent hashing (Eisenbud et al., NSDI 2016) as a
 * lookup table (CHASH_ALGO_MAGLEV): each member fills table slots along its
 * own permutation of 0..M-1, in turn, until the prime-sized table is full; a
 * key goes to table[hash mod M], one memory access.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Definition (Envoy's construction, so Envoy's published M = 7 table is a
 * golden vector here; see doc/internals/algorithms.md):
 * - M = cfg.table_size (default 65537) must be a prime no larger than
 *   CHASH__MAGLEV_MAX_TABLE and at least the number of owning members;
 *   anything else is refused with -CHASH_ETABLE.
 * - Owning members (weight x ramp > 0) are taken in name order (bytewise).
 *   Member i has offset = XXH64(name, seed 0) mod M and
 *   skip = XXH64(name, seed 1) mod (M - 1) + 1; its permutation is
 *   (offset + skip * j) mod M, j = 0, 1, ... (M prime: every slot once).
 * - Weights: w_i = weight x ramp, normalised by their sum, max = largest.
 *   Every member starts with target 0. In round t = 1, 2, ... members take
 *   turns in name order; member i takes a turn only if t * w_i >= target_i,
 *   and then target_i += max and it claims the next free slot of its
 *   permutation. Rounds go on until all M slots are taken. With equal
 *   weights this is the paper's pseudocode listing 1.
 * - lookup(h) = table[h mod M]. lookup_n walks the table forward from slot
 *   h mod M (wrapping) and collects distinct owners: cheap, deterministic,
 *   and as table slots are a pseudo-random interleaving of the members, the
 *   second choice of a failed member's keys is spread over the survivors.
 *   (It is not the permutation preference of the paper, which would need
 *   the per-member permutations at lookup time.)
 *
 * Properties (tests/unit/test_algos.c):
 * - Deterministic and history-free: the table depends on names, weights and
 *   ramps only (name order, not array order).
 * - share = entries / M exactly; diff is exact over table entries (each
 *   entry e stands for the hashes h < 2^64 with h mod M = e) when both
 *   tables have the same size, else it is measured on 2^20 evenly spaced
 *   hashes.
 * - NOT minimal movement: adding or removing a member reshuffles a few
 *   slots between the others. Measured with M = 65537, equal weights,
 *   random names, removing one member (adding is the mirror image): beyond
 *   the optimal 1/N, about 0.25% of the hash space more moves at N = 11,
 *   0.56% at N = 101 and 0.55% at N = 1001 (there 5x the optimal 0.1%:
 *   with 65 slots a member the table is coarse; use a larger prime).
 *   tests/unit/test_algos.c holds the extra movement under 1%. Changing
 *   one weight also moves a little between the others.
 * - Balance: entries differ by at most one per member and round, so
 *   peak/mean is 1.000 at 10 members, 1.001 at 100 and 1.007 at 1000 with
 *   M = 65537 (target <= 1.02: keep M above about 50 x members).
 * - Slow start: ramp scales the weight, so a member ramps in gradually, but
 *   not monotonically in the strict sense (raising a ramp can move a few
 *   slots between other members too).
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#include "hash.h"

/* Largest table accepted: 4 bytes an entry, so 256 MiB, and the build
 * touches every slot a few times. */
#define CHASH__MAGLEV_MAX_TABLE (1u << 26)

struct maglev {
    uint32_t *table;       /* member index per slot */
    uint32_t size;         /* M, prime */
    unsigned __int128 inv; /* ceil(2^128 / M): for the multiply-only mod */
};

/* Per-member state while the table is filled. */
struct fill {
    uint32_t member;
    uint32_t skip;
    uint32_t next; /* current slot of its permutation */
    double weight; /* normalised */
    double target;
    size_t count;
};

static bool
is_prime(uint32_t n)
{
    if (n < 2)
        return false;
    if (n % 2 == 0)
        return n == 2;
    for (uint32_t d = 3; (uint64_t)d * d <= n; d += 2)
        if (n % d == 0)
            return false;
    return true;
}

/*
 * h mod M without a division (Lemire, Kaser and Kurz, "Faster remainder by
 * direct computation", 2019): with inv = ceil(2^128 / M), the fractional
 * part inv * h mod 2^128, multiplied by M, has the remainder in its top
 * bits. Exact for every 64-bit h when M < 2^32. A 64-bit division costs
 * tens of cycles; this is three multiplications.
 */
static inline uint32_t
fastmod(const struct maglev *mg, uint64_t h)
{
    unsigned __int128 low = mg->inv * h;
    unsigned __int128 lo = (unsigned __int128)(uint64_t)low * mg->size;
    unsigned __int128 hi = (unsigned __int128)(uint64_t)(low >> 64) * mg->size;
    return (uint32_t)((hi + (lo >> 64)) >> 64);
}

static void
maglev_deinit(struct chash_ring *r)
{
    struct maglev *mg = r->algo;

    if (mg == NULL)
        return;
    free(mg->table);
    free(mg);
    r->algo = NULL;
}

/* Fill <mg>->table from <f>[0..<n>) (name order); see the file comment. */
static void
fill_table(struct maglev *mg, struct fill *f, size_t n, double wmax)
{
    const uint32_t M = mg->size, EMPTY = UINT32_MAX;
    uint32_t filled = 0;

    for (uint32_t e = 0; e < M; e++)
        mg->table[e] = EMPTY;
    for (uint64_t round = 1; filled < M; round++) {
        for (size_t i = 0; i < n && filled < M; i++) {
            if ((double)round * f[i].weight < f[i].target)
                continue;
            f[i].target += wmax;
            /* A free slot exists (filled < M) and the permutation visits
             * every slot, so this loop ends. */
            while (mg->table[f[i].next] != EMPTY) {
                f[i].next += f[i].skip;
                if (f[i].next >= M)
                    f[i].next -= M;
            }
            mg->table[f[i].next] = f[i].member;
            f[i].next += f[i].skip;
            if (f[i].next >= M)
                f[i].next -= M;
            f[i].count++;
            filled++;
        }
    }
}

static int
maglev_build(struct chash_ring *r)
{
    struct maglev *mg;
    struct fill *f;
    size_t n = 0;
    double wsum = 0, wmax = 0;
    uint32_t M = r->cfg.table_size;

    if (!is_prime(M) || M > CHASH__MAGLEV_MAX_TABLE)
        return -CHASH_ETABLE;
    for (size_t m = 0; m < r->nmembers; m++) {
        double w = (double)r->members[m].weight * r->members[m].ramp;
        r->members[m].points = 0;
        if (w > 0) {
            n++;
            wsum += w;
        }
    }
    if (n == 0)
        return -CHASH_EEMPTY;
    if (n > M)
        return -CHASH_ETABLE;
    mg = calloc(1, sizeof(*mg));
    f = calloc(n, sizeof(*f));
    if (mg != NULL)
        mg->table = malloc((size_t)M * sizeof(*mg->table));
    if (mg == NULL || f == NULL || mg->table == NULL) {
        if (mg != NULL)
            free(mg->table);
        free(mg);
        free(f);
        return -CHASH_ENOMEM;
    }
    mg->size = M;
    mg->inv = ~(unsigned __int128)0 / M + 1;
    r->algo = mg;

    size_t k = 0;
    for (size_t rank = 0; rank < r->nmembers; rank++) {
        uint32_t m = r->by_name[rank];
        const struct chash__member *mem = &r->members[m];
        double w = (double)mem->weight * mem->ramp;
        if (!(w > 0))
            continue;
        f[k].member = m;
        f[k].next =
            (uint32_t)(chash__xxh64_seed(mem->name, mem->namelen, 0) % M);
        /* M = 2 leaves one possible skip, 1: still a full permutation. */
        f[k].skip = (uint32_t)(chash__xxh64_seed(mem->name, mem->namelen, 1) %
                               (M - 1)) +
                    1;
        f[k].weight = w / wsum;
        if (f[k].weight > wmax)
            wmax = f[k].weight;
        k++;
    }
    fill_table(mg, f, n, wmax);
    for (size_t i = 0; i < n; i++)
        r->members[f[i].member].points = f[i].count;
    free(f);
    return 0;
}

static size_t
maglev_lookup(const struct chash_ring *r, uint64_t h)
{
    const struct maglev *mg = r->algo;
    return mg->table[fastmod(mg, h)];
}

static size_t
maglev_lookup_n(const struct chash_ring *r, uint64_t h, size_t *out, size_t n)
{
    const struct maglev *mg = r->algo;
    uint32_t e = fastmod(mg, h);
    uint64_t *seen = NULL;
    size_t got = 0;

    /* A long preference list (bounded loads walking every member) would
     * cost O(got) a slot to check distinctness; a bitmap makes it O(1).
     * Without memory, the linear check still gives the same answer. */
    if (n > 16)
        seen = calloc((r->nmembers + 63) / 64, sizeof(*seen));
    /* n <= owners (chash.c clamps it) and every owner holds a slot, so
     * one lap of the table always finds n of them. */
    for (uint32_t step = 0; step < mg->size && got < n; step++) {
        size_t o = mg->table[e], k = got;
        if (seen != NULL) {
            if (!(seen[o / 64] >> (o % 64) & 1)) {
                seen[o / 64] |= (uint64_t)1 << (o % 64);
                out[got++] = o;
            }
        } else {
            for (k = 0; k < got && out[k] != o; k++)
                ;
            if (k == got)
                out[got++] = o;
        }
        if (++e == mg->size)
            e = 0;
    }
    free(seen);
    return got;
}

static void
maglev_shares(struct chash_ring *r)
{
    const struct maglev *mg = r->algo;

    for (size_t m = 0; m < r->nmembers; m++)
        r->share[m] = (double)r->members[m].points / (double)mg->size;
}

static void
maglev_diff(const struct chash_ring *a, const struct chash_ring *b,
            chash__segment_fn fn, void *ctx)
{
    const struct maglev *ta = a->algo, *tb = b->algo;
    const double two64 = 18446744073709551616.0;

    if (ta->size != tb->size) {
        /* Different sizes: slot pairs repeat only every Ma * Mb hashes,
         * too many to walk; measure like the score algorithms do. */
        const size_t samples = (size_t)1 << 20;
        const uint64_t step = (uint64_t)1 << 44;
        for (size_t s = 0; s < samples; s++) {
            uint64_t h = (uint64_t)s * step + step / 2;
            fn(ctx, maglev_lookup(a, h), maglev_lookup(b, h),
               1.0 / (double)samples);
        }
        return;
    }
    /* 2^64 = q * M + rem: slots below rem hold q + 1 hashes, others q. */
    uint64_t q = UINT64_MAX / ta->size, rem = UINT64_MAX % ta->size + 1;
    if (rem == ta->size) {
        q++;
        rem = 0;
    }
    for (uint32_t e = 0; e < ta->size; e++) {
        uint64_t cnt = q + (e < rem);
        fn(ctx, ta->table[e], tb->table[e], (double)cnt / two64);
    }
}

static uint64_t
maglev_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    int id = r->cfg.hash;
    return chash__widen(chash_hash(id, key, len), chash_hash_bits(id));
}

static uint64_t
maglev_points_needed(const struct chash_config *cfg,
                     const struct chash_member *members, size_t n)
{
    (void)members;
    (void)n;
    return cfg->table_size;
}

/* The table, entry by entry: each entry's owner name. */
static uint64_t
maglev_checksum(const struct chash_ring *r, uint64_t acc,
                const uint64_t *name_hash)
{
    const struct maglev *mg = r->algo;

    for (uint32_t e = 0; e < mg->size; e++)
        acc = chash__checksum_mix(acc, name_hash[mg->table[e]]);
    return acc;
}

static size_t
maglev_state_memory(const struct chash_config *cfg)
{
    return (size_t)cfg->table_size * sizeof(uint32_t);
}

const struct chash__ops chash__maglev_ops = {
    .name = "maglev",
    .build = maglev_build,
    .deinit = maglev_deinit,
    .lookup = maglev_lookup,
    .lookup_n = maglev_lookup_n,
    .shares = maglev_shares,
    .diff = maglev_diff,
    .key_hash = maglev_key_hash,
    .points_needed = maglev_points_needed,
    .checksum = maglev_checksum,
    .state_memory = maglev_state_memory,
    .exact_diff = true,
};

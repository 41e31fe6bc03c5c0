/* bench.c -- `chash bench`: per algorithm, lookup speed (median of rounds
 * over precomputed random hashes), build time, memory, balance, and the
 * movement on adding and removing one member against the optimum.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chash/chash.h"
#include "util.h"

#define CMD "bench"

static const char usage_text[] =
    "usage: chash bench [--algo A|all] [--members N] [--points P] [--keys K]\n"
    "                   [--table-size M] [--rounds R] [--latency] [--zones Z]\n"
    "                   [--json]\n"
    "  --algo A|all   one algorithm or all of them (default all)\n"
    "  --members N    members node-0 .. node-N-1 (default: one table each\n"
    "                 for N = 10, 100, 1000, 10000)\n"
    "  --points P     points per weight (default 160)\n"
    "  --keys K       random 64-bit hashes per lookup round (default "
    "1000000);\n"
    "                 lookups take them as they are, so no key hash is timed\n"
    "  --table-size M maglev table (default: smallest prime >= max(65537,\n"
    "                 100 x N))\n"
    "  --rounds R     timing rounds; medians are reported (default 5)\n"
    "  --latency      also time dependent lookups (each hash perturbed by\n"
    "                 the previous answer, so lookups cannot overlap)\n"
    "  --zones Z      also time the zoned lookup (zone, then member: the\n"
    "                 members spread over Z zones) against the flat one;\n"
    "                 target: within 2x\n";

/* O(n)-per-lookup algorithms get at most this many member-lookups per
 * round, so rendezvous at 10000 members takes seconds, not minutes. */
#define BENCH_ON_BUDGET 300000000.0
/* A sampled diff (2^21 lookups) is skipped when it would take longer. */
#define BENCH_DIFF_BUDGET_S 5.0

struct bench_opts {
    int algo; /* -1 = all */
    uint32_t points;
    uint32_t table_size;
    uint64_t keys;
    uint32_t rounds;
    bool latency;
    bool json;
    uint32_t zones; /* 0: no zoned lookup */
};

/* Movement on one membership change, measured and exact. */
struct movement {
    double measured; /* fraction of the keys whose owner's name changed */
    double exact;    /* chash_ring_diff; NAN when skipped */
    bool exact_is_exact;
    double optimal; /* the added member's / removed member's share */
};

struct result {
    int algo;
    size_t members;
    uint32_t table_size;
    uint64_t keys; /* after any reduction */
    bool reduced;
    double ns_lookup;
    double ns_batch;     /* chash_ring_lookup_batch, per key */
    double ns_dependent; /* --latency: each lookup waits for the last; 0 = not
                            run */
    double ns_zoned;     /* --zones: chash_zring_lookup; 0 = not run */
    double build_ms;
    size_t memory;
    size_t points;
    double peak_keys;  /* peak/mean of key counts */
    double peak_exact; /* peak/mean of chash_ring_share */
    double cv;
    struct movement add, remove;
};

static bool
is_prime(uint32_t n)
{
    if (n < 2)
        return false;
    for (uint32_t d = 2; (uint64_t)d * d <= n; d++)
        if (n % d == 0)
            return false;
    return true;
}

static uint32_t
maglev_size(size_t members)
{
    uint64_t want = 100 * (uint64_t)members;
    uint32_t m = want > 65537 ? (uint32_t)want : 65537;

    while (!is_prime(m))
        m++;
    return m;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* node-0 .. node-<n>-1: <n>+1 names, the last one for the add test. */
static int
make_members(struct cli_members *ms, size_t n)
{
    char name[32];

    memset(ms, 0, sizeof(*ms));
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "node-%zu", i);
        if (cli_members_add(ms, name, 1) != 0)
            return -1;
    }
    return 0;
}

static volatile size_t bench_sink;

static double time_lookups(const struct chash_ring *ring, const uint64_t *h,
                           uint64_t n);

/* --zones: the zoned lookup of <algo> at <n> members over o->zones zones
 * (member i in zone i mod Z) beside the flat one, medians of the rounds;
 * printed as a line (text) or returned in *<ns> (0: not built). */
static void
zoned_one(const struct bench_opts *o, int algo, size_t n, const uint64_t *h,
          uint64_t keys, double flat_ns, double *ns)
{
    struct chash_config cfg = {.algo = algo, .points_per_weight = o->points};
    struct chash_zmember *m = calloc(n, sizeof(*m));
    char(*names)[32] = calloc(n, sizeof(*names));
    char(*zn)[16] = calloc(o->zones, sizeof(*zn));
    double *t = calloc(o->rounds, sizeof(*t));
    struct chash_ring *z = NULL; /* chash_ring_create_zoned's */
    int rc;

    *ns = 0;
    if (m == NULL || names == NULL || zn == NULL || t == NULL)
        goto out;
    if (algo == CHASH_ALGO_MAGLEV)
        cfg.table_size = o->table_size ? o->table_size : maglev_size(n + 1);
    for (uint32_t i = 0; i < o->zones; i++)
        snprintf(zn[i], sizeof(zn[i]), "zone-%u", i);
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "node-%zu", i);
        m[i].name = names[i];
        m[i].zone = zn[i % o->zones];
        m[i].weight = 1;
        m[i].ramp = 1.0;
    }
    if ((rc = chash_ring_create_zoned(&cfg, m, n, NULL, 0, &z)) != 0) {
        if (!o->json)
            printf("  zoned %-10s %6zu members: %s\n", chash_algo_name(algo), n,
                   chash_strerror(rc));
        goto out;
    }
    for (uint32_t k = 0; k < o->rounds; k++)
        t[k] = time_lookups(z, h, keys);
    *ns = median(t, o->rounds);
    if (!o->json)
        printf("  zoned %-10s %6zu members in %u zones: %7.1f ns/lookup, "
               "flat %7.1f: x%.2f (target <= x2: %s)\n",
               chash_algo_name(algo), n, o->zones, *ns, flat_ns,
               flat_ns > 0 ? *ns / flat_ns : 0,
               flat_ns > 0 && *ns <= 2 * flat_ns ? "MET" : "MISSED");
out:
    chash_ring_destroy(z);
    free(m);
    free(names);
    free(zn);
    free(t);
}

static double
time_lookups(const struct chash_ring *ring, const uint64_t *h, uint64_t n)
{
    size_t acc = 0;
    double t0 = cli_now();

    for (uint64_t i = 0; i < n; i++)
        acc += chash_ring_lookup(ring, h[i]);
    double t1 = cli_now();
    bench_sink = acc;
    return (t1 - t0) * 1e9 / (double)n;
}

/* The batch view: chash_ring_lookup_batch over chunks of 4096 hashes (a
 * large multi-get), so the output buffer stays in cache. */
static double
time_batch(const struct chash_ring *ring, const uint64_t *h, uint64_t n)
{
    enum { CHUNK = 4096 };
    static size_t out[CHUNK];
    size_t acc = 0;
    double t0 = cli_now();

    for (uint64_t i = 0; i < n; i += CHUNK) {
        size_t len = n - i < CHUNK ? (size_t)(n - i) : CHUNK;
        chash_ring_lookup_batch(ring, h + i, out, len);
        acc += out[len - 1];
    }
    double t1 = cli_now();
    bench_sink = acc;
    return (t1 - t0) * 1e9 / (double)n;
}

/* The latency view: each hash is perturbed by the previous answer, so a
 * lookup cannot start before the last one ends and the CPU cannot overlap
 * their cache misses. */
static double
time_dependent(const struct chash_ring *ring, const uint64_t *h, uint64_t n)
{
    size_t prev = 0;
    double t0 = cli_now();

    for (uint64_t i = 0; i < n; i++)
        prev = chash_ring_lookup(ring, h[i] ^ (prev & 1));
    double t1 = cli_now();
    bench_sink = prev;
    return (t1 - t0) * 1e9 / (double)n;
}

/* Fraction of keys whose owner's name differs between <a> and <b>. */
static double
measured_moved(const struct chash_ring *a, const struct chash_ring *b,
               const uint64_t *h, uint64_t n)
{
    uint64_t moved = 0;

    for (uint64_t i = 0; i < n; i++) {
        const char *x = chash_ring_member_name(a, chash_ring_lookup(a, h[i]));
        const char *y = chash_ring_member_name(b, chash_ring_lookup(b, h[i]));
        moved += x != y && strcmp(x, y) != 0;
    }
    return (double)moved / (double)n;
}

static void
exact_moved(const struct chash_ring *a, const struct chash_ring *b,
            double ns_lookup, struct movement *mv)
{
    mv->exact_is_exact = chash_ring_diff_exact(a) != 0;
    mv->exact = NAN;
    /* sampled diffs look up 2^20 hashes in each ring */
    if (!mv->exact_is_exact &&
        2.0 * 1048576.0 * ns_lookup * 1e-9 > BENCH_DIFF_BUDGET_S)
        return;
    if (chash_ring_diff(a, b, &mv->exact) != 0)
        mv->exact = NAN;
}

/* One algorithm at one size: build, lookups, memory, movement, in the
 * order the table prints them. Long (about 110 lines): each measure is
 * a few lines, and splitting them would pass the timers around. */
static int
bench_one(const struct bench_opts *o, int algo, size_t n, const uint64_t *h,
          struct result *r)
{
    struct chash_config cfg = {.algo = algo, .points_per_weight = o->points};
    struct cli_members ms, grown = {0}, shrunk = {0};
    struct chash_ring *ring = NULL, *big = NULL, *small = NULL;
    double *t = calloc(o->rounds, sizeof(*t));
    uint64_t *count = NULL;
    size_t victim = n / 2;
    int rc = -1;

    memset(r, 0, sizeof(*r));
    r->algo = algo;
    r->members = n;
    if (t == NULL || make_members(&ms, n) != 0)
        goto oom;
    if (algo == CHASH_ALGO_MAGLEV)
        cfg.table_size = o->table_size ? o->table_size : maglev_size(n + 1);
    r->table_size = cfg.table_size;
    r->keys = o->keys;
    if (algo == CHASH_ALGO_RENDEZVOUS &&
        (double)o->keys * (double)n > BENCH_ON_BUDGET) {
        r->keys = (uint64_t)(BENCH_ON_BUDGET / (double)n);
        if (r->keys < 10000)
            r->keys = 10000;
        r->reduced = r->keys < o->keys;
    }

    for (uint32_t k = 0; k < o->rounds; k++) {
        double t0 = cli_now();
        if (cli_ring_create(CMD, &cfg, &ms, &ring) != 0)
            goto out;
        t[k] = (cli_now() - t0) * 1e3;
        if (k + 1 < o->rounds) {
            chash_ring_destroy(ring);
            ring = NULL;
        }
    }
    r->build_ms = median(t, o->rounds);
    r->memory = chash_ring_memory(ring);
    r->points = chash_ring_points(ring);

    for (uint32_t k = 0; k < o->rounds; k++)
        t[k] = time_lookups(ring, h, r->keys);
    r->ns_lookup = median(t, o->rounds);
    for (uint32_t k = 0; k < o->rounds; k++)
        t[k] = time_batch(ring, h, r->keys);
    r->ns_batch = median(t, o->rounds);
    if (o->latency) {
        for (uint32_t k = 0; k < o->rounds; k++)
            t[k] = time_dependent(ring, h, r->keys);
        r->ns_dependent = median(t, o->rounds);
    }

    /* Balance: keys per member against the mean (equal weights). */
    count = calloc(n, sizeof(*count));
    if (count == NULL)
        goto oom;
    for (uint64_t i = 0; i < r->keys; i++)
        count[chash_ring_lookup(ring, h[i])]++;
    double mean = (double)r->keys / (double)n, sq = 0, peak = 0, speak = 0;
    for (size_t m = 0; m < n; m++) {
        double d = (double)count[m] - mean;
        sq += d * d;
        if ((double)count[m] > peak)
            peak = (double)count[m];
        if (chash_ring_share(ring, m) > speak)
            speak = chash_ring_share(ring, m);
    }
    r->peak_keys = peak / mean;
    r->peak_exact = speak * (double)n;
    r->cv = sqrt(sq / (double)n) / mean;

    /* Add node-<n> at the end of the array; remove the member in the
     * middle (jump can only lose its last member cheaply: that is the
     * point of measuring a middle one). */
    char name[32];
    snprintf(name, sizeof(name), "node-%zu", n);
    if (cli_members_copy(&grown, &ms) != 0 ||
        cli_members_add(&grown, name, 1) != 0 ||
        cli_members_copy(&shrunk, &ms) != 0)
        goto oom;
    cli_members_remove(&shrunk, victim);
    if (cli_ring_create(CMD, &cfg, &grown, &big) != 0)
        goto out;
    r->add.measured = measured_moved(ring, big, h, r->keys);
    r->add.optimal = chash_ring_share(big, n);
    exact_moved(ring, big, r->ns_lookup, &r->add);
    if (n > 1) {
        if (cli_ring_create(CMD, &cfg, &shrunk, &small) != 0)
            goto out;
        r->remove.measured = measured_moved(ring, small, h, r->keys);
        r->remove.optimal = chash_ring_share(ring, victim);
        exact_moved(ring, small, r->ns_lookup, &r->remove);
    } else {
        r->remove.exact = NAN;
    }
    rc = 0;
    goto out;
oom:
    cli_error(CMD, "out of memory");
out:
    chash_ring_destroy(ring);
    chash_ring_destroy(big);
    chash_ring_destroy(small);
    cli_members_free(&ms);
    cli_members_free(&grown);
    cli_members_free(&shrunk);
    free(count);
    free(t);
    return rc;
}

static void
fmt_ratio(char *buf, size_t len, double x, double opt)
{
    if (isnan(x) || opt <= 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.3f", x / opt);
}

static void
fmt_pct(char *buf, size_t len, double x)
{
    if (isnan(x))
        snprintf(buf, len, "skipped");
    else
        snprintf(buf, len, "%.3f%%", 100.0 * x);
}

static void
text_table(const struct bench_opts *o, const struct result *r, size_t nr)
{
    printf("\n== %zu members, %" PRIu32 " points per weight, "
           "%" PRIu64 " random hashes, median of %" PRIu32 " rounds\n",
           r[0].members, o->points, o->keys, o->rounds);
    printf("%-11s %9s %9s %9s %11s %9s %12s %10s %8s%s\n", "algo", "keys",
           "ns/lookup", "batch ns", "Mlookups/s", "build ms", "memory B",
           "points", "B/point", o->latency ? "  dependent ns" : "");
    for (size_t i = 0; i < nr; i++) {
        printf("%-11s %9" PRIu64 " %9.1f %9.1f %11.2f %9.3f %12zu %10zu %8.2f",
               chash_algo_name(r[i].algo), r[i].keys, r[i].ns_lookup,
               r[i].ns_batch, 1e3 / r[i].ns_lookup, r[i].build_ms, r[i].memory,
               r[i].points, (double)r[i].memory / (double)r[i].points);
        if (o->latency)
            printf(" %14.1f", r[i].ns_dependent);
        putchar('\n');
    }
    printf("%-11s %10s %10s %6s | %-31s | %s\n", "", "peak/mean", "peak/mean",
           "", "add one member: moved", "remove one: moved");
    printf("%-11s %10s %10s %6s | %9s %9s %5s %5s | %9s %9s %5s %5s\n", "algo",
           "(keys)", "(exact)", "cv", "keys", "exact", "k/opt", "e/opt", "keys",
           "exact", "k/opt", "e/opt");
    for (size_t i = 0; i < nr; i++) {
        char am[16], ae[16], ar1[16], ar2[16];
        char rm[16], re[16], rr1[16], rr2[16];
        fmt_pct(am, sizeof(am), r[i].add.measured);
        fmt_pct(ae, sizeof(ae), r[i].add.exact);
        fmt_ratio(ar1, sizeof(ar1), r[i].add.measured, r[i].add.optimal);
        fmt_ratio(ar2, sizeof(ar2), r[i].add.exact, r[i].add.optimal);
        fmt_pct(rm, sizeof(rm), r[i].remove.measured);
        fmt_pct(re, sizeof(re), r[i].remove.exact);
        fmt_ratio(rr1, sizeof(rr1), r[i].remove.measured, r[i].remove.optimal);
        fmt_ratio(rr2, sizeof(rr2), r[i].remove.exact, r[i].remove.optimal);
        printf("%-11s %10.3f %10.3f %6.3f | %9s %9s %5s %5s | %9s %9s %5s "
               "%5s\n",
               chash_algo_name(r[i].algo), r[i].peak_keys, r[i].peak_exact,
               r[i].cv, am, ae, ar1, ar2, rm, re, rr1, rr2);
    }
    printf("k/opt, e/opt: moved keys and exact moved fraction over the "
           "optimum (the added member's share, the removed member's share)\n");
    for (size_t i = 0; i < nr; i++) {
        const char *a = chash_algo_name(r[i].algo);
        if (r[i].reduced)
            printf("note: %s ran %" PRIu64 " keys, not %" PRIu64
                   ": it is O(n) per lookup\n",
                   a, r[i].keys, o->keys);
        if (r[i].algo == CHASH_ALGO_MAGLEV)
            printf("note: maglev table size %" PRIu32 "\n", r[i].table_size);
        if (!r[i].add.exact_is_exact)
            printf("note: %s's exact column is chash_ring_diff sampled at "
                   "2^20 hashes%s\n",
                   a, isnan(r[i].add.exact) ? " (skipped: too slow here)" : "");
    }
}

static void
json_movement(const char *name, const struct movement *m)
{
    printf("\"%s\":{\"moved_fraction\":%.9g,\"exact_moved\":", name,
           m->measured);
    if (isnan(m->exact))
        printf("null");
    else
        printf("%.9g", m->exact);
    printf(",\"exact_is_exact\":%s,\"optimal\":%.9g,\"ratio\":",
           m->exact_is_exact ? "true" : "false", m->optimal);
    if (m->optimal > 0)
        printf("%.6g", m->measured / m->optimal);
    else
        printf("null");
    printf(",\"exact_ratio\":");
    if (m->optimal > 0 && !isnan(m->exact))
        printf("%.6g}", m->exact / m->optimal);
    else
        printf("null}");
}

static void
json_result(const struct result *r, bool first)
{
    printf("%s{\"algo\":\"%s\",\"members\":%zu,\"keys\":%" PRIu64
           ",\"keys_reduced\":%s,\"ns_per_lookup\":%.4g,"
           "\"ns_per_lookup_batch\":%.4g,"
           "\"lookups_per_s\":%.6g,\"build_ms\":%.6g,\"memory_bytes\":%zu,"
           "\"points\":%zu,\"bytes_per_point\":%.4g,\"peak_to_mean\":%.6g,"
           "\"peak_to_mean_exact\":%.6g,\"cv\":%.6g,",
           first ? "" : ",", chash_algo_name(r->algo), r->members, r->keys,
           r->reduced ? "true" : "false", r->ns_lookup, r->ns_batch,
           1e9 / r->ns_lookup, r->build_ms, r->memory, r->points,
           (double)r->memory / (double)r->points, r->peak_keys, r->peak_exact,
           r->cv);
    if (r->algo == CHASH_ALGO_MAGLEV)
        printf("\"table_size\":%" PRIu32 ",", r->table_size);
    if (r->ns_dependent > 0)
        printf("\"ns_per_lookup_dependent\":%.4g,", r->ns_dependent);
    if (r->ns_zoned > 0)
        printf("\"ns_per_lookup_zoned\":%.4g,", r->ns_zoned);
    json_movement("add", &r->add);
    putchar(',');
    json_movement("remove", &r->remove);
    putchar('}');
}

static int
run(const struct bench_opts *o, const size_t *sizes, size_t nsizes)
{
    uint64_t *h = malloc(o->keys * sizeof(*h)), st = 42;
    uint64_t *h32 = malloc(o->keys * sizeof(*h32));
    struct result res[CHASH_ALGO_COUNT];
    bool first = true;
    int rc = CLI_EXIT_FAIL;

    if (h == NULL || h32 == NULL) {
        cli_error(CMD, "out of memory for %" PRIu64 " keys", o->keys);
        goto out;
    }
    /* The same random hashes for every algorithm; the 32-bit continua
     * (ketama, nginx) take the top 32 bits, as chash_ring_hash would
     * give them a 32-bit value. */
    for (uint64_t i = 0; i < o->keys; i++) {
        h[i] = cli_splitmix64(&st);
        h32[i] = h[i] >> 32;
    }
    if (o->json)
        printf("{\"points\":%" PRIu32 ",\"keys\":%" PRIu64
               ",\"rounds\":%" PRIu32 ",\"cpus\":%ld,\"results\":[",
               o->points, o->keys, o->rounds, sysconf(_SC_NPROCESSORS_ONLN));
    else
        printf("chash bench: %ld online CPUs; other processes may share "
               "them, so compare ratios within one run\n",
               sysconf(_SC_NPROCESSORS_ONLN));
    for (size_t s = 0; s < nsizes; s++) {
        size_t nr = 0;
        for (int a = 0; a < CHASH_ALGO_COUNT; a++) {
            if (o->algo >= 0 && a != o->algo)
                continue;
            const uint64_t *keys = cli_hash_space_bits(a) == 32 ? h32 : h;
            if (bench_one(o, a, sizes[s], keys, &res[nr]) != 0) {
                /* an algorithm that cannot build (not there yet, or too
                 * many members) is reported and skipped, unless it is the
                 * only one asked for */
                if (o->algo >= 0)
                    goto out;
                continue;
            }
            if (o->zones > 0 && a != CHASH_ALGO_JUMP)
                zoned_one(o, a, sizes[s], keys, res[nr].keys, res[nr].ns_lookup,
                          &res[nr].ns_zoned);
            if (o->json) {
                json_result(&res[nr], first);
                first = false;
            }
            nr++;
            fflush(stdout);
        }
        if (!o->json && nr > 0)
            text_table(o, res, nr);
    }
    if (o->json)
        printf("]}\n");
    rc = CLI_EXIT_OK;
out:
    free(h);
    free(h32);
    return rc;
}

int
cmd_bench(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"algo", required_argument, NULL, 'a'},
        {"members", required_argument, NULL, 'm'},
        {"points", required_argument, NULL, 'p'},
        {"keys", required_argument, NULL, 'k'},
        {"table-size", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'},
        {"latency", no_argument, NULL, 'L'},
        {"zones", required_argument, NULL, 'z'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const size_t default_sizes[] = {10, 100, 1000, 10000};
    struct bench_opts o = {.algo = -1,
                           .points = CHASH_DEFAULT_POINTS,
                           .keys = 1000000,
                           .rounds = 5};
    uint64_t members = 0;
    int c;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            if (strcmp(optarg, "all") == 0)
                o.algo = -1;
            else if ((o.algo = cli_parse_algo(CMD, optarg)) < 0)
                goto usage;
            break;
        case 'm':
            if (cli_parse_u64(CMD, "--members", optarg, 1, 1000000, &members) !=
                0)
                goto usage;
            break;
        case 'p':
            if (cli_parse_u32(CMD, "--points", optarg, 1,
                              CHASH_MAX_MEMBER_POINTS, &o.points) != 0)
                goto usage;
            break;
        case 'k':
            if (cli_parse_u64(CMD, "--keys", optarg, 1, 100000000, &o.keys) !=
                0)
                goto usage;
            break;
        case 't':
            if (cli_parse_u32(CMD, "--table-size", optarg, 1, UINT32_MAX,
                              &o.table_size) != 0)
                goto usage;
            break;
        case 'r':
            if (cli_parse_u32(CMD, "--rounds", optarg, 1, 1000, &o.rounds) != 0)
                goto usage;
            break;
        case 'j':
            o.json = true;
            break;
        case 'L':
            o.latency = true;
            break;
        case 'z':
            if (cli_parse_u32(CMD, "--zones", optarg, 1, 1000, &o.zones) != 0)
                goto usage;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_bad_option(CMD, usage_text, argv, c);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, usage_text, "unexpected argument '%s'",
                               argv[optind]);
    if (members > 0) {
        size_t n = (size_t)members;
        return run(&o, &n, 1);
    }
    return run(&o, default_sizes,
               sizeof(default_sizes) / sizeof(default_sizes[0]));
usage:
    fputs(usage_text, stderr);
    return CLI_EXIT_USAGE;
}

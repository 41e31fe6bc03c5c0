/* util.c -- shared parsing and output for the chash subcommands: one place
 * for member lists, algorithm and hash names and usage errors, so every
 * subcommand refuses bad input with the same words.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf/conf.h"
#include "conf/ring.h"

int
cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "chash %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", usage);
    return CLI_EXIT_USAGE;
}

void
cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "chash %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int
cli_bad_option(const char *cmd, const char *usage, char **argv, int c)
{
    /* getopt_long has already advanced optind past the culprit. */
    extern int optind, optopt;
    const char *arg = argv[optind - 1];

    if (c == ':')
        return cli_usage_error(cmd, usage, "option '%s' needs a value", arg);
    if (optopt != 0 && arg[0] == '-' && arg[1] != '-')
        return cli_usage_error(cmd, usage, "unknown option '-%c'", optopt);
    return cli_usage_error(cmd, usage, "unknown option '%s'", arg);
}

int
cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t min,
              uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    /* strtoull accepts "-1" as a huge value: refuse any sign up front. */
    if (s == NULL || s[0] < '0' || s[0] > '9')
        goto bad;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        goto bad;
    if (v < min || v > max) {
        cli_error(cmd, "%s %s is out of range [%llu, %llu]", opt, s,
                  (unsigned long long)min, (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
bad:
    cli_error(cmd, "%s needs a whole number, not '%s'", opt, s ? s : "");
    return -1;
}

int
cli_parse_u32(const char *cmd, const char *opt, const char *s, uint32_t min,
              uint32_t max, uint32_t *out)
{
    uint64_t v;

    if (cli_parse_u64(cmd, opt, s, min, max, &v) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int
cli_parse_double(const char *cmd, const char *opt, const char *s, double min,
                 double max, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v)) {
        cli_error(cmd, "%s needs a number, not '%s'", opt, s);
        return -1;
    }
    if (v < min || v > max) {
        cli_error(cmd, "%s %s is out of range [%g, %g]", opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int
cli_parse_algo(const char *cmd, const char *s)
{
    int id = chash_algo_from_name(s);

    if (id >= 0)
        return id;
    fprintf(stderr, "chash %s: unknown algorithm '%s'; valid names are:", cmd,
            s);
    for (int a = 0; a < CHASH_ALGO_COUNT; a++)
        fprintf(stderr, "%s %s", a ? "," : "", chash_algo_name(a));
    fputc('\n', stderr);
    return -1;
}

int
cli_parse_hash(const char *cmd, const char *s)
{
    int id = chash_hash_from_name(s);

    if (id >= 0)
        return id;
    fprintf(stderr,
            "chash %s: unknown hash function '%s'; valid names are:", cmd, s);
    for (int h = 0; h < CHASH_HASH_COUNT; h++)
        fprintf(stderr, "%s %s", h ? "," : "", chash_hash_name(h));
    fputc('\n', stderr);
    return -1;
}

int
cli_hash_space_bits(int algo)
{
    return algo == CHASH_ALGO_KETAMA || algo == CHASH_ALGO_NGINX ? 32 : 64;
}

int
cli_members_add(struct cli_members *ms, const char *name, uint32_t weight)
{
    char *copy;

    if (ms->n == ms->cap) {
        size_t cap = ms->cap ? 2 * ms->cap : 8;
        struct chash_member *m = realloc(ms->m, cap * sizeof(*m));
        char **z;

        if (m == NULL)
            return -1;
        ms->m = m;
        if ((z = realloc(ms->zones, cap * sizeof(*z))) == NULL)
            return -1;
        ms->zones = z;
        ms->cap = cap;
    }
    copy = strdup(name);
    if (copy == NULL)
        return -1;
    ms->zones[ms->n] = NULL;
    ms->m[ms->n].name = copy;
    ms->m[ms->n].weight = weight;
    ms->m[ms->n].ramp = 1.0;
    ms->n++;
    return 0;
}

long
cli_members_find(const struct cli_members *ms, const char *name)
{
    for (size_t i = 0; i < ms->n; i++)
        if (strcmp(ms->m[i].name, name) == 0)
            return (long)i;
    return -1;
}

void
cli_members_remove(struct cli_members *ms, size_t idx)
{
    free((char *)ms->m[idx].name);
    free(ms->zones[idx]);
    memmove(&ms->m[idx], &ms->m[idx + 1], (ms->n - idx - 1) * sizeof(*ms->m));
    memmove(&ms->zones[idx], &ms->zones[idx + 1],
            (ms->n - idx - 1) * sizeof(*ms->zones));
    ms->n--;
}

int
cli_members_copy(struct cli_members *dst, const struct cli_members *src)
{
    memset(dst, 0, sizeof(*dst));
    for (size_t i = 0; i < src->n; i++) {
        if (cli_members_add(dst, src->m[i].name, src->m[i].weight) != 0 ||
            (src->zones[i] != NULL &&
             (dst->zones[i] = strdup(src->zones[i])) == NULL)) {
            cli_members_free(dst);
            return -1;
        }
    }
    dst->zoned = src->zoned;
    memcpy(dst->zw, src->zw, sizeof(dst->zw));
    dst->nzw = src->nzw;
    return 0;
}

void
cli_members_free(struct cli_members *ms)
{
    for (size_t i = 0; i < ms->n; i++) {
        free((char *)ms->m[i].name);
        free(ms->zones[i]);
    }
    free(ms->m);
    free(ms->zones);
    memset(ms, 0, sizeof(*ms));
}

/* One "name[=weight]" item of <len> bytes. The weight is split at the
 * LAST '=' so names may hold '=' as long as a weight follows; names hold
 * ':' freely (host:port). */
static int
parse_item(const char *cmd, const char *item, size_t len,
           struct cli_members *ms)
{
    char *buf = strndup(item, len), *eq;
    uint32_t weight = 1;
    int rc = -1;

    if (buf == NULL) {
        cli_error(cmd, "out of memory");
        return -1;
    }
    eq = strrchr(buf, '=');
    if (eq != NULL) {
        char what[128];
        snprintf(what, sizeof(what), "member '%.*s': the weight",
                 len > 64 ? 64 : (int)len, item);
        *eq = '\0';
        if (cli_parse_u32(cmd, what, eq + 1, 0, UINT32_MAX, &weight) != 0)
            goto out;
    }
    if (buf[0] == '\0') {
        cli_error(cmd, "empty member name in the member list");
        goto out;
    }
    if (cli_members_find(ms, buf) >= 0) {
        cli_error(cmd, "member '%s' is listed twice", buf);
        goto out;
    }
    if (cli_members_add(ms, buf, weight) != 0) {
        cli_error(cmd, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

int
cli_members_parse(const char *cmd, const char *list, struct cli_members *ms)
{
    const char *p = list;

    cli_members_free(ms);
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (parse_item(cmd, p, len, ms) != 0) {
            cli_members_free(ms);
            return -1;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}

static const char *
ring_option_name(int opt)
{
    switch (opt) {
    case 'm':
        return "--members";
    case 'a':
        return "--algo";
    case 'H':
        return "--hash";
    case 'p':
        return "--points";
    default:
        return "--table-size";
    }
}

int
cli_ring_option(const char *cmd, int opt, const char *arg, struct cli_ring *r)
{
    int v;

    switch (opt) {
    case CLI_OPT_CONFIG:
        r->config = arg;
        return 1;
    case CLI_OPT_POOL:
        r->pool = arg;
        return 1;
    case 'm':
        if (cli_members_parse(cmd, arg, &r->ms) != 0)
            return -1;
        break;
    case 'a':
        if ((v = cli_parse_algo(cmd, arg)) < 0)
            return -1;
        r->cfg.algo = v;
        break;
    case 'H':
        if ((v = cli_parse_hash(cmd, arg)) < 0)
            return -1;
        r->cfg.hash = v;
        break;
    case 'p':
        if (cli_parse_u32(cmd, "--points", arg, 1, CHASH_MAX_MEMBER_POINTS,
                          &r->cfg.points_per_weight) != 0)
            return -1;
        r->points_given = true;
        break;
    case 't':
        if (cli_parse_u32(cmd, "--table-size", arg, 1, UINT32_MAX,
                          &r->cfg.table_size) != 0)
            return -1;
        r->table_given = true;
        break;
    default:
        return 0;
    }
    if (r->given == NULL)
        r->given = ring_option_name(opt);
    return 1;
}

/*
 * --config: load <r>->config with the daemon's own loader and take pool
 * <r>->pool's ring as chashd builds it: algorithm, hash, points and table
 * from the pool, members from conf_pool_members() in file order. The
 * loader has already checked that the ring builds.
 */
static int
ring_from_config(const char *cmd, struct cli_ring *r)
{
    char err[1024]; /* conf.h: room for the longest message */
    struct conf *conf = conf_load(r->config, err, sizeof(err));
    const struct conf_pool *pool;
    int rc = CLI_EXIT_FAIL;

    if (conf == NULL) {
        /* a bad config is bad input, as for `chashd -t`: status 2 */
        cli_error(cmd, "%s", err);
        return CLI_EXIT_USAGE;
    }
    pool = conf_pool_find(conf, r->pool);
    if (pool == NULL) {
        fprintf(stderr, "chash %s: %s has no pool '%s'; its pools are:", cmd,
                r->config, r->pool);
        for (size_t i = 0; i < conf->npools; i++)
            fprintf(stderr, "%s %s", i ? "," : "", conf->pools[i].name);
        fputc('\n', stderr);
        rc = CLI_EXIT_USAGE;
        goto out;
    }
    if (pool->distribution == CONF_DIST_RANDOM) {
        cli_error(cmd,
                  "pool '%s' uses distribution random: a key has no fixed "
                  "owner",
                  r->pool);
        goto out;
    }
    if (pool->distribution >= CHASH_ALGO_COUNT) {
        cli_error(cmd,
                  "pool '%s' uses distribution %s (hash modulo the servers), "
                  "which is not consistent hashing; chash works with "
                  "libchash's algorithms only",
                  r->pool, conf_dist_name(pool->distribution));
        goto out;
    }
    r->cfg = pool->ring;
    for (size_t i = 0; i < pool->nservers; i++) {
        if (cli_members_add(&r->ms, pool->servers[i].name,
                            pool->servers[i].weight) != 0 ||
            (pool->servers[i].zone != NULL &&
             (r->ms.zones[i] = strdup(pool->servers[i].zone)) == NULL)) {
            cli_error(cmd, "out of memory");
            goto out;
        }
    }
    r->ms.zoned = pool->zone_policy == CONF_ZONE_HIERARCHICAL;
    memcpy(r->ms.zw, pool->zone_weights, sizeof(r->ms.zw));
    r->ms.nzw = pool->nzone_weights;
    /* twemproxy hashes only the tagged part of a key in its key-value
     * modes; a tcp or http pool's key is the client address (or a header)
     * and has no tag. */
    if (pool->mode == CONF_MODE_REDIS || pool->mode == CONF_MODE_MEMCACHE)
        memcpy(r->tag, pool->hash_tag, sizeof(r->tag));
    r->balance_factor = pool->balance_factor;
    rc = CLI_EXIT_OK;
out:
    conf_destroy(conf);
    return rc;
}

int
cli_ring_setup(const char *cmd, const char *usage, struct cli_ring *r,
               bool need_members)
{
    if (r->config != NULL || r->pool != NULL) {
        if (r->config == NULL || r->pool == NULL)
            return cli_usage_error(cmd, usage,
                                   "--config and --pool go together");
        /* One source for the ring: a pool half from the file and half
         * from the command line is a ring chashd never builds. */
        if (r->given != NULL)
            return cli_usage_error(
                cmd, usage,
                "%s cannot go with --config: the pool's members, algorithm, "
                "hash, points and table size come from the file",
                r->given);
        return ring_from_config(cmd, r);
    }
    if (need_members && r->ms.n == 0)
        return cli_usage_error(cmd, usage,
                               "--members is required (or --config FILE "
                               "--pool NAME)");
    /* An option that changes nothing would let a user believe it did. */
    if (r->points_given && r->cfg.algo != CHASH_ALGO_RING)
        return cli_usage_error(
            cmd, usage, "--points sets the points of --algo ring only; %s",
            r->cfg.algo == CHASH_ALGO_KETAMA
                ? "ketama gives each server 160 points times its share of "
                  "the weight, as twemproxy does"
            : r->cfg.algo == CHASH_ALGO_NGINX
                ? "nginx gives 160 points per unit of weight, as nginx does"
                : "this algorithm has no ring points");
    if (r->table_given && r->cfg.algo != CHASH_ALGO_MAGLEV)
        return cli_usage_error(cmd, usage,
                               "--table-size goes with --algo maglev");
    return CLI_EXIT_OK;
}

void
cli_ring_describe(const struct chash_ring *ring, char *buf, size_t len)
{
    struct chash_config cfg;
    int n;

    chash_ring_config(ring, &cfg);
    n = snprintf(buf, len, "algorithm %s, hash %s", chash_algo_name(cfg.algo),
                 chash_hash_name(cfg.hash));
    if (n < 0 || (size_t)n >= len)
        return;
    if (cfg.algo == CHASH_ALGO_RING)
        snprintf(buf + n, len - (size_t)n, ", %" PRIu32 " points per weight",
                 cfg.points_per_weight);
    else if (cfg.algo == CHASH_ALGO_NGINX)
        snprintf(buf + n, len - (size_t)n, ", 160 points per weight");
    else if (cfg.algo == CHASH_ALGO_KETAMA)
        snprintf(buf + n, len - (size_t)n,
                 ", 160 points per server of average weight");
    else if (cfg.algo == CHASH_ALGO_MAGLEV)
        snprintf(buf + n, len - (size_t)n, ", table size %" PRIu32,
                 cfg.table_size);
}

void
cli_ring_deinit(struct cli_ring *r)
{
    cli_members_free(&r->ms);
}

int
cli_ring_create(const char *cmd, const struct chash_config *cfg,
                const struct cli_members *ms, struct chash_ring **out)
{
    int rc;
    const char *algo = chash_algo_name(cfg->algo);

    for (size_t i = 0; ms->zoned && i < ms->n; i++)
        if (ms->zones[i] == NULL) {
            cli_error(cmd,
                      "member %s has no zone: the pool places a zone, then "
                      "a member (zone_policy: hierarchical)",
                      ms->m[i].name);
            return -CHASH_EINVAL;
        }
    rc = ring_create(cfg, ms->zoned, ms->m, (const char *const *)ms->zones,
                     ms->n, ms->zw, ms->nzw, out);
    if (rc == 0)
        return 0;
    /* The library's sentences are generic; say what it means here. */
    cli_error(cmd, "cannot build the ring (algorithm %s): %s%s",
              algo ? algo : "?", chash_strerror(rc),
              cfg->algo == CHASH_ALGO_JUMP && rc == -CHASH_EWEIGHT
                  ? " (jump takes weights 0 and 1 only)"
              : cfg->algo == CHASH_ALGO_NGINX && rc == -CHASH_EHASH
                  ? " (nginx always hashes keys with crc32a: leave --hash "
                    "out)"
              : cfg->algo == CHASH_ALGO_MAGLEV && rc == -CHASH_ETABLE
                  ? " (give --table-size a prime above the member count)"
                  : "");
    return rc;
}

uint64_t
cli_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double
cli_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void
cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

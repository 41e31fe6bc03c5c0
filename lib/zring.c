/* zring.c -- zone-then-member placement (chash.h, "Zones";
 * doc/internals/placement.md): a ring over the zones, and in each zone a
 * ring over its members, both ordinary rings of one config built from
 * names alone. A key's hash picks its zone on the first and its member on
 * the zone's ring; replicas walk the zones first, so N replicas land in N
 * distinct zones when there are N. Shares and diffs are exact for the
 * continuum algorithms (ring, ketama, nginx): every point of every ring is
 * a place where the owner may change, and the owner is constant between
 * two consecutive ones; the others are measured on 2^20 hashes.
 * The top of lib/'s order (internal.h): a client of the ring API of
 * chash.c, which never names anything of this file.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct zone {
    char *name;
    struct chash_ring *ring; /* its members; NULL when none owns anything */
    size_t *global;          /* ring index -> index in the caller's array */
    size_t n;
};

struct chash_zring {
    struct chash_config cfg;
    struct chash_ring *zones_ring; /* ring member i = zones[i] */
    struct zone *zones;            /* sorted by name */
    size_t nzones;
    size_t nmembers;
    char **names;    /* the members' names (copies), caller's order */
    size_t *zone_of; /* member -> zone */
    size_t *local;   /* member -> index in its zone's ring */
    double *share;   /* per member */
    double *zshare;  /* per zone */
    size_t nowners;  /* members owning something */
    /* continuum algorithms: both levels flattened into one continuum (a
     * point at every position where an owner may change, owned by the
     * member the two levels give there): one lookup instead of two */
    struct chash__continuum flat;
    unsigned shift;
    bool exact;
    uint64_t checksum;
};

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void
chash_zring_destroy(struct chash_zring *z)
{
    if (z == NULL)
        return;
    for (size_t i = 0; i < z->nzones; i++) {
        free(z->zones[i].name);
        chash_ring_destroy(z->zones[i].ring);
        free(z->zones[i].global);
    }
    free(z->zones);
    chash_ring_destroy(z->zones_ring);
    for (size_t i = 0; i < z->nmembers; i++)
        free(z->names != NULL ? z->names[i] : NULL);
    free(z->names);
    free(z->zone_of);
    free(z->local);
    free(z->share);
    free(z->zshare);
    chash__continuum_deinit(&z->flat);
    free(z);
}

static size_t
zone_find(const struct chash_zring *z, const char *name)
{
    size_t lo = 0, hi = z->nzones;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(z->zones[mid].name, name);

        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return z->nzones;
}

/* The zone names of <m>, sorted and unique, into z->zones. */
static int
zones_collect(struct chash_zring *z, const struct chash_zmember *m, size_t n)
{
    char **v = malloc((n ? n : 1) * sizeof(*v));
    size_t k = 0;

    if (v == NULL)
        return -CHASH_ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = (char *)m[i].zone;
    qsort(v, n, sizeof(*v), cmp_str);
    z->zones = calloc(n ? n : 1, sizeof(*z->zones));
    if (z->zones == NULL) {
        free(v);
        return -CHASH_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && strcmp(z->zones[k - 1].name, v[i]) == 0)
            continue;
        if ((z->zones[k].name = strdup(v[i])) == NULL) {
            z->nzones = k;
            free(v);
            return -CHASH_ENOMEM;
        }
        k++;
    }
    z->nzones = k;
    free(v);
    return 0;
}

static int
cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

    return (a > b) - (a < b);
}

/* Every position where an owner may change, in position space, sorted
 * and unique: the points of the zone ring and of every zone's ring. NULL
 * when the rings are not continua (or out of memory: *<oom> says which). */
static uint64_t *
breakpoints(const struct chash_zring *z, size_t *count, bool *oom)
{
    size_t total = 0, k = 0, u = 0;
    uint64_t *v;

    *oom = false;
    if (z->zones_ring->cont.npoints == 0)
        return NULL;
    total = z->zones_ring->cont.npoints;
    for (size_t i = 0; i < z->nzones; i++)
        if (z->zones[i].ring != NULL)
            total += z->zones[i].ring->cont.npoints;
    if ((v = malloc((total ? total : 1) * sizeof(*v))) == NULL) {
        *oom = true;
        return NULL;
    }
    for (size_t i = 0; i <= z->nzones; i++) {
        const struct chash_ring *r =
            i == 0 ? z->zones_ring : z->zones[i - 1].ring;

        if (r == NULL)
            continue;
        memcpy(v + k, r->cont.pos, r->cont.npoints * sizeof(*v));
        k += r->cont.npoints;
    }
    qsort(v, k, sizeof(*v), cmp_u64);
    for (size_t i = 0; i < k; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    *count = u;
    return v;
}

static size_t lookup2(const struct chash_zring *z, uint64_t hash);

/*
 * Flatten both levels into z->flat (continuum algorithms): a point at
 * every breakpoint, owned by the member the two levels give there (the
 * owner of a breakpoint owns the segment that ends at it). Then the
 * shares: the flat continuum's arcs, exact; without one (maglev,
 * rendezvous), 2^20 evenly spaced hashes. 0, or -CHASH_ENOMEM.
 */
static int
flatten(struct chash_zring *z)
{
    struct chash__point *pts;
    size_t n = 0;
    bool oom;
    uint64_t *v = breakpoints(z, &n, &oom);
    int rc;

    if (v == NULL && oom)
        return -CHASH_ENOMEM;
    if (v == NULL) {
        const size_t samples = (size_t)1 << 20;
        const uint64_t step = (uint64_t)1 << 44;

        for (size_t s = 0; s < samples; s++)
            z->share[lookup2(z, (uint64_t)s * step + step / 2)] +=
                1.0 / (double)samples;
        return 0;
    }
    if ((pts = malloc((n ? n : 1) * sizeof(*pts))) == NULL) {
        free(v);
        return -CHASH_ENOMEM;
    }
    z->shift = z->zones_ring->pos_shift;
    for (size_t i = 0; i < n; i++) {
        pts[i].pos = v[i];
        pts[i].tie = i;
        pts[i].owner = (uint32_t)lookup2(z, v[i] >> z->shift);
    }
    rc = chash__continuum_build(&z->flat, pts, n, false);
    if (rc == 0)
        chash__continuum_shares(&z->flat, z->share, z->nmembers);
    free(pts);
    free(v);
    return rc;
}

/* Long (about 145 lines): the checks, each zone's members, the zones'
 * ring, each zone's ring, the checksum -- every failure goes to the one
 * label that frees what the steps before it made. */
int
chash_zring_create(const struct chash_config *cfg,
                   const struct chash_zmember *members, size_t n,
                   const struct chash_zone_weight *weights, size_t nweights,
                   struct chash_zring **out)
{
    struct chash_zring *z;
    struct chash_member *zm = NULL, *mm = NULL;
    int rc;

    if (out == NULL || (members == NULL && n > 0) ||
        (weights == NULL && nweights > 0))
        return -CHASH_EINVAL;
    *out = NULL;
    if (n == 0)
        return -CHASH_EEMPTY;
    if (cfg != NULL && cfg->algo == CHASH_ALGO_JUMP)
        return -CHASH_ENOTSUP; /* zone weights are sums: jump takes 0/1 */
    for (size_t i = 0; i < n; i++) {
        if (members[i].name == NULL || members[i].name[0] == '\0')
            return -CHASH_ENONAME;
        if (members[i].zone == NULL || members[i].zone[0] == '\0')
            return -CHASH_EINVAL;
    }
    for (size_t i = 0; i < nweights; i++)
        if (weights[i].zone == NULL || weights[i].zone[0] == '\0')
            return -CHASH_EINVAL;
    if ((z = calloc(1, sizeof(*z))) == NULL)
        return -CHASH_ENOMEM;
    z->nmembers = n;
    z->names = calloc(n, sizeof(*z->names));
    z->zone_of = calloc(n, sizeof(*z->zone_of));
    z->local = calloc(n, sizeof(*z->local));
    z->share = calloc(n, sizeof(*z->share));
    mm = calloc(n, sizeof(*mm));
    if (z->names == NULL || z->zone_of == NULL || z->local == NULL ||
        z->share == NULL || mm == NULL) {
        rc = -CHASH_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        if ((z->names[i] = strdup(members[i].name)) == NULL) {
            rc = -CHASH_ENOMEM;
            goto fail;
        }
    if ((rc = zones_collect(z, members, n)) != 0)
        goto fail;
    z->zshare = calloc(z->nzones, sizeof(*z->zshare));
    zm = calloc(z->nzones, sizeof(*zm));
    if (z->zshare == NULL || zm == NULL) {
        rc = -CHASH_ENOMEM;
        goto fail;
    }
    /* the members of each zone, in the caller's order */
    for (size_t i = 0; i < n; i++) {
        size_t zi = zone_find(z, members[i].zone);
        z->zone_of[i] = zi;
        z->zones[zi].n++;
    }
    for (size_t zi = 0; zi < z->nzones; zi++) {
        struct zone *zn = &z->zones[zi];
        double wsum = 0, rsum = 0;
        size_t k = 0;

        if ((zn->global = calloc(zn->n, sizeof(*zn->global))) == NULL) {
            rc = -CHASH_ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            if (z->zone_of[i] != zi)
                continue;
            zn->global[k] = i;
            z->local[i] = k;
            mm[k].name = members[i].name;
            mm[k].weight = members[i].weight;
            mm[k].ramp = members[i].ramp;
            if (!(members[i].ramp >= 0.0 && members[i].ramp <= 1.0)) {
                rc = -CHASH_ERAMP;
                goto fail;
            }
            wsum += members[i].weight;
            rsum += members[i].weight * members[i].ramp;
            k++;
        }
        /* the zone: its members' weights summed (or the one given), its
         * ramp theirs, weighted */
        zm[zi].name = zn->name;
        zm[zi].weight = wsum > UINT32_MAX ? UINT32_MAX : (uint32_t)wsum;
        zm[zi].ramp = wsum > 0 ? rsum / wsum : 1.0;
        for (size_t w = 0; w < nweights; w++)
            if (strcmp(weights[w].zone, zn->name) == 0)
                zm[zi].weight = weights[w].weight;
        if (wsum > 0 && rsum > 0) {
            rc = chash_ring_create(cfg, mm, zn->n, &zn->ring);
            if (rc != 0)
                goto fail;
        } else {
            zm[zi].weight = 0; /* no member owns anything: neither does it */
        }
    }
    for (size_t w = 0; w < nweights; w++)
        if (zone_find(z, weights[w].zone) == z->nzones) {
            rc = -CHASH_EINVAL; /* a weight for a zone without members */
            goto fail;
        }
    if ((rc = chash_ring_create(cfg, zm, z->nzones, &z->zones_ring)) != 0)
        goto fail;
    chash_ring_config(z->zones_ring, &z->cfg);
    z->exact = z->zones_ring->cont.npoints > 0;
    /* member names are unique across zones */
    {
        char **v = malloc(n * sizeof(*v));

        if (v == NULL) {
            rc = -CHASH_ENOMEM;
            goto fail;
        }
        memcpy(v, z->names, n * sizeof(*v));
        qsort(v, n, sizeof(*v), cmp_str);
        for (size_t i = 1; i < n; i++)
            if (strcmp(v[i - 1], v[i]) == 0) {
                free(v);
                rc = -CHASH_EDUPNAME;
                goto fail;
            }
        free(v);
    }
    if ((rc = flatten(z)) != 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        z->zshare[z->zone_of[i]] += z->share[i];
        z->nowners += z->share[i] > 0;
    }
    /* the checksum: the zones' placement, then each zone's, by name */
    z->checksum = chash_ring_checksum(z->zones_ring);
    for (size_t zi = 0; zi < z->nzones; zi++) {
        uint64_t c =
            z->zones[zi].ring ? chash_ring_checksum(z->zones[zi].ring) : 0;
        z->checksum = (z->checksum ^ c) * 0x100000001b3ULL;
    }
    free(zm);
    free(mm);
    *out = z;
    return 0;
fail:
    free(zm);
    free(mm);
    chash_zring_destroy(z);
    return rc;
}

uint64_t
chash_zring_hash(const struct chash_zring *z, const void *key, size_t len)
{
    return chash_ring_hash(z->zones_ring, key, len);
}

size_t
chash_zring_lookup_zone(const struct chash_zring *z, uint64_t hash)
{
    return chash_ring_lookup(z->zones_ring, hash);
}

/* The two levels, one after the other. */
static size_t
lookup2(const struct chash_zring *z, uint64_t hash)
{
    const struct zone *zn = &z->zones[chash_ring_lookup(z->zones_ring, hash)];

    return zn->global[chash_ring_lookup(zn->ring, hash)];
}

size_t
chash_zring_lookup(const struct chash_zring *z, uint64_t hash)
{
    if (z->flat.npoints > 0)
        return z->flat.owner[chash__continuum_find(&z->flat, hash << z->shift)];
    return lookup2(z, hash);
}

size_t
chash_zring_lookup_n(const struct chash_zring *z, uint64_t hash, size_t *out,
                     size_t n)
{
    size_t zo[64], got = 0, nz;

    if (out == NULL || n == 0)
        return 0;
    if (n > z->nowners)
        n = z->nowners;
    /* the zones in the key's order (the first 64) */
    nz = chash_ring_lookup_n(z->zones_ring, hash, zo, 64);
    /* round r takes each zone's r-th member in the key's order there:
     * round 0 puts one replica in each of n zones when there are n */
    for (size_t r = 0; got < n && r < z->nmembers; r++) {
        bool any = false;

        for (size_t k = 0; k < nz && got < n; k++) {
            const struct zone *zn = &z->zones[zo[k]];
            size_t loc[64];
            size_t m;

            if (zn->ring == NULL || r >= 64)
                continue;
            m = chash_ring_lookup_n(zn->ring, hash, loc, r + 1);
            if (m <= r)
                continue;
            out[got++] = zn->global[loc[r]];
            any = true;
        }
        if (!any)
            break;
    }
    return got;
}

double
chash_zring_share(const struct chash_zring *z, size_t member)
{
    return member < z->nmembers ? z->share[member] : 0.0;
}

size_t
chash_zring_zones(const struct chash_zring *z)
{
    return z->nzones;
}

const char *
chash_zring_zone_name(const struct chash_zring *z, size_t zone)
{
    return zone < z->nzones ? z->zones[zone].name : NULL;
}

size_t
chash_zring_zone_of(const struct chash_zring *z, size_t member)
{
    return member < z->nmembers ? z->zone_of[member] : z->nzones;
}

double
chash_zring_zone_share(const struct chash_zring *z, size_t zone)
{
    return zone < z->nzones ? z->zshare[zone] : 0.0;
}

size_t
chash_zring_members(const struct chash_zring *z)
{
    return z->nmembers;
}

const char *
chash_zring_member_name(const struct chash_zring *z, size_t member)
{
    return member < z->nmembers ? z->names[member] : NULL;
}

uint64_t
chash_zring_checksum(const struct chash_zring *z)
{
    return z->checksum;
}

int
chash_zring_diff_exact(const struct chash_zring *z)
{
    return z->exact;
}

/* ---- a zoned placement as a ring (chash_ring_create_zoned) --------------
 * Every function of the ring API works on it: lookups use the flattened
 * continuum (the ring's own, so the fast path of chash_ring_lookup takes
 * it), lookup_n is zone-aware, shares and the checksum are the zring's,
 * diffs merge continua (exact) or sample. The zring lives in r->algo. */

static void
zoned_deinit(struct chash_ring *r)
{
    chash_zring_destroy(r->algo);
    r->algo = NULL;
}

static size_t
zoned_lookup(const struct chash_ring *r, uint64_t h)
{
    return lookup2(r->algo, h);
}

static size_t
zoned_lookup_n(const struct chash_ring *r, uint64_t h, size_t *out, size_t n)
{
    return chash_zring_lookup_n(r->algo, h, out, n);
}

static uint64_t
zoned_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    return chash_zring_hash(r->algo, key, len);
}

static void
zoned_shares(struct chash_ring *r)
{
    (void)r; /* copied from the zring at create */
}

/* Not rows of chash.c's algorithm table: a zoned ring is never built by
 * chash_ring_create, so build, name, points_needed, checksum and
 * state_memory are not used (its config names the algorithm of its
 * rings, which answers those). */
static const struct chash__ops zoned_ops = {
    .build = NULL,
    .deinit = zoned_deinit,
    .lookup = zoned_lookup,
    .lookup_n = zoned_lookup_n,
    .shares = zoned_shares,
    .diff = chash__continuum_ring_diff,
    .key_hash = zoned_key_hash,
    .exact_diff = true,
};

static const struct chash__ops zoned_sampled_ops = {
    .build = NULL,
    .deinit = zoned_deinit,
    .lookup = zoned_lookup,
    .lookup_n = zoned_lookup_n,
    .shares = zoned_shares,
    .diff = NULL,
    .key_hash = zoned_key_hash,
    .exact_diff = false,
};

static int
name_order(const struct chash__member *a, const struct chash__member *b)
{
    return strcmp(a->name, b->name);
}

int
chash_ring_create_zoned(const struct chash_config *cfg,
                        const struct chash_zmember *members, size_t n,
                        const struct chash_zone_weight *weights,
                        size_t nweights, struct chash_ring **out)
{
    struct chash_zring *z = NULL;
    struct chash_ring *r;
    int rc;

    if (out == NULL)
        return -CHASH_EINVAL;
    *out = NULL;
    if ((rc = chash_zring_create(cfg, members, n, weights, nweights, &z)) != 0)
        return rc;
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        chash_zring_destroy(z);
        return -CHASH_ENOMEM;
    }
    r->cfg = z->cfg;
    r->ops = z->flat.npoints > 0 ? &zoned_ops : &zoned_sampled_ops;
    r->algo = z;
    r->members = calloc(n, sizeof(*r->members));
    r->by_name = malloc(n * sizeof(*r->by_name));
    r->share = calloc(n, sizeof(*r->share));
    if (r->members == NULL || r->by_name == NULL || r->share == NULL) {
        chash_ring_destroy(r);
        return -CHASH_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if ((r->members[i].name = strdup(members[i].name)) == NULL) {
            chash_ring_destroy(r);
            return -CHASH_ENOMEM;
        }
        r->nmembers = i + 1;
        r->members[i].namelen = strlen(members[i].name);
        r->members[i].weight = members[i].weight;
        r->members[i].ramp = members[i].ramp;
        /* effective weight for bounded loads: proportional to the share */
        r->members[i].points = (size_t)(z->share[i] * 1048576.0 + 0.5);
        r->share[i] = z->share[i];
        r->total_points += r->members[i].points;
        r->nowners += z->share[i] > 0;
        r->by_name[i] = (uint32_t)i;
    }
    {
        uint32_t *tmp = malloc(n * sizeof(*tmp));

        if (tmp == NULL) {
            chash_ring_destroy(r);
            return -CHASH_ENOMEM;
        }
        chash__sort_members(r, r->by_name, tmp, n, name_order);
        free(tmp);
    }
    /* the flattened continuum becomes the ring's */
    r->cont = z->flat;
    memset(&z->flat, 0, sizeof(z->flat));
    r->pos_shift = z->shift;
    r->checksum = z->checksum;
    *out = r;
    return 0;
}

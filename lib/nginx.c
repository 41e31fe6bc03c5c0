/* nginx.c -- nginx's `hash $key consistent` continuum (CHASH_ALGO_NGINX),
 * point for point: a chain of CRC-32s over the server's host and port gives
 * 160 points per unit of weight, and a key goes to the first point at or
 * after CRC-32(key), wrapping to the first point.
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Definition (ngx_http_upstream_hash_module.c, ngx_http_upstream_update_chash;
 * see doc/internals/algorithms.md):
 * - A member's name is the nginx `server` string as written, for example
 *   "127.0.0.1:9601". It is split as nginx splits it: after a leading
 *   "unix:" (any case) the rest is the host and the port is empty; else if
 *   the string ends in ':' followed by digits only, it is cut at that ':';
 *   else the whole string is the host and the port is empty.
 * - base = CRC-32 state over host, one NUL byte, port. Point j (0-based) of
 *   a member is CRC-32(base continued with the 4 little-endian bytes of
 *   point j-1), point -1 being 0. A member of weight w has 160 w points.
 * - Points are sorted by value and a point equal to the one before it is
 *   dropped (the first kept), as nginx does after its qsort. Among points of
 *   different members with the same value, the first is the one of the
 *   member earlier in the ARRAY given to chash_ring_create: nginx keeps its
 *   peers in config order and glibc's qsort is stable. So for nginx, as for
 *   jump, the array order matters -- but only to break exact 32-bit ties
 *   between two servers' points, which a given membership either has or
 *   has not (about P^2 / 2^33 expected ties for P points).
 * - The key hash is always CRC-32 of the key (crc32a): a ring created with
 *   the default hash (cfg.hash 0) uses crc32a and reports it; any other
 *   explicit hash is refused with -CHASH_EHASH, since nginx has no such
 *   option and silently hashing differently would break compatibility.
 *
 * Not modelled (they are run-time peer state, not placement): nginx's
 * skipping of down / failed / max_conns-full peers (our lookup_n gives the
 * failover order: the next distinct owners clockwise, which is where nginx
 * looks next), round robin for an empty key or a single peer, and the
 * fallback to round robin after 20 tries.
 *
 * Properties (tests/unit/test_algos.c, vectors in tests/unit/test_compat.c):
 * - Deterministic: points depend on the names and weights only; history
 *   independent except for the exact-tie rule above.
 * - Minimal movement: a member's points do not depend on the others, so
 *   adding one moves keys only to it, removing one moves only its keys and
 *   changing a weight adds or removes that member's points only (the one
 *   exception is again an exact tie, where the surviving duplicate's owner
 *   can change).
 * - Monotone slow start: ramp r keeps the first floor(r * 160 w) points of
 *   the chain, so raising r only adds points of that member.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hash.h"

#define NGINX_POINTS 160 /* per unit of weight */

/* Split <name> into host and port as nginx splits a server string. */
static void
split_server(const char *name, size_t len, size_t *host_off, size_t *host_len,
             size_t *port_off, size_t *port_len)
{
    *port_off = len;
    *port_len = 0;
    if (len >= 5 && strncasecmp(name, "unix:", 5) == 0) {
        *host_off = 5;
        *host_len = len - 5;
        return;
    }
    *host_off = 0;
    *host_len = len;
    /* Walk back over digits; the first non-digit must be ':' to split. */
    for (size_t j = 0; j < len; j++) {
        char c = name[len - j - 1];
        if (c == ':') {
            *host_len = len - j - 1;
            *port_off = len - j;
            *port_len = j;
            return;
        }
        if (c < '0' || c > '9')
            return;
    }
}

static int
nginx_build(struct chash_ring *r)
{
    struct chash__point *pts;
    size_t total = 0, k = 0;
    int rc;

    /* nginx's key hash is fixed; see the file comment. */
    if (r->cfg.hash != CHASH_HASH_XXH3 && r->cfg.hash != CHASH_HASH_CRC32)
        return -CHASH_EHASH;
    r->cfg.hash = CHASH_HASH_CRC32;
    for (size_t m = 0; m < r->nmembers; m++) {
        struct chash__member *mem = &r->members[m];
        uint64_t full = (uint64_t)mem->weight * NGINX_POINTS;
        size_t kept;
        if (full > CHASH_MAX_MEMBER_POINTS)
            return -CHASH_EWEIGHT;
        kept = (size_t)floor(mem->ramp * (double)full);
        mem->points = kept > full ? (size_t)full : kept;
        total += mem->points;
    }
    if (total == 0)
        return -CHASH_EEMPTY;
    pts = malloc(total * sizeof(*pts));
    if (pts == NULL)
        return -CHASH_ENOMEM;
    /* Array (config) order: the tie value is (array index, point index),
     * already ascending, so equal CRCs keep nginx's order and dedup keeps
     * the first of them. */
    for (size_t m = 0; m < r->nmembers; m++) {
        const struct chash__member *mem = &r->members[m];
        size_t hoff, hlen, poff, plen;
        uint32_t base, prev = 0;

        if (mem->points == 0)
            continue;
        split_server(mem->name, mem->namelen, &hoff, &hlen, &poff, &plen);
        /* zlib's crc32() continues a finished CRC, which is exactly
         * nginx's ngx_crc32_update on the running state followed by
         * ngx_crc32_final: the pre- and post-inversions cancel. */
        base = chash__crc32(0, mem->name + hoff, hlen);
        base = chash__crc32(base, "", 1);
        base = chash__crc32(base, mem->name + poff, plen);
        for (size_t j = 0; j < mem->points; j++) {
            unsigned char b[4] = {
                (unsigned char)prev, (unsigned char)(prev >> 8),
                (unsigned char)(prev >> 16), (unsigned char)(prev >> 24)};
            uint32_t h = chash__crc32(base, b, 4);
            pts[k].pos = (uint64_t)h << 32;
            pts[k].tie = (uint64_t)m << 32 | j;
            pts[k].owner = (uint32_t)m;
            k++;
            prev = h;
        }
    }
    r->pos_shift = 32;
    rc = chash__continuum_build(&r->cont, pts, total, true);
    free(pts);
    if (rc != 0)
        return rc;
    /* Dedup may have removed every point of a member (only when all its
     * points tie with earlier ones): count what each member kept. */
    for (size_t m = 0; m < r->nmembers; m++)
        r->members[m].points = 0;
    for (size_t i = 0; i < r->cont.npoints; i++)
        r->members[r->cont.owner[i]].points++;
    return 0;
}

static uint64_t
nginx_key_hash(const struct chash_ring *r, const void *key, size_t len)
{
    (void)r;
    return chash__crc32(0, key, len);
}

/* Before dedup: what nginx_build allocates. */
static uint64_t
nginx_points_needed(const struct chash_config *cfg,
                    const struct chash_member *members, size_t n)
{
    (void)cfg;
    return chash__points_by_weight(members, n, NGINX_POINTS);
}

const struct chash__ops chash__nginx_ops = {
    .name = "nginx",
    .build = nginx_build,
    .lookup = chash__continuum_lookup,
    .lookup_n = chash__continuum_lookup_n,
    .shares = chash__continuum_ring_shares,
    .diff = chash__continuum_ring_diff,
    .key_hash = nginx_key_hash,
    .points_needed = nginx_points_needed,
    .checksum = chash__continuum_ring_checksum,
    .exact_diff = true,
};

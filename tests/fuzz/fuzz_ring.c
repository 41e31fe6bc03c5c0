/* fuzz_ring.c -- libFuzzer driver for libchash: any bytes become a config
 * and a membership; a ring that builds must keep its contract on lookups.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXM 24

/* Bytes: algo, hash, points, then members as
 * <weight byte> <ramp byte> <name bytes...> 0x00, then the rest are keys. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct chash_member m[MAXM];
    char names[MAXM][32];
    struct chash_config cfg;
    struct chash_ring *r = NULL;
    size_t n = 0, i = 3, out[MAXM];

    if (size < 3)
        return 0;
    memset(&cfg, 0, sizeof(cfg));
    cfg.algo = data[0] % (CHASH_ALGO_COUNT + 1); /* one invalid value */
    cfg.hash = data[1] % (CHASH_HASH_COUNT + 1);
    cfg.points_per_weight = data[2] % 64;
    cfg.table_size = (data[2] & 1) ? 0 : 251; /* maglev: small prime */
    while (n < MAXM && i + 2 < size && data[i] != 0xff) {
        size_t len = 0;
        m[n].weight = data[i] % 8;
        m[n].ramp = data[i + 1] > 250 ? NAN : data[i + 1] / 250.0;
        i += 2;
        while (i < size && data[i] != 0 && len < sizeof(names[n]) - 1)
            names[n][len++] = (char)data[i++];
        names[n][len] = '\0';
        i++;
        m[n].name = names[n];
        n++;
    }
    if (chash_ring_create(&cfg, m, n, &r) != 0) {
        if (r != NULL)
            abort(); /* a failed create must leave no ring */
        return 0;
    }
    double sum = 0;
    for (size_t k = 0; k < n; k++)
        sum += chash_ring_share(r, k);
    if (fabs(sum - 1.0) > 1e-6)
        abort();
    uint64_t load[MAXM] = {0}, total = 0;
    for (; i < size; i += 4) {
        uint64_t h = chash_ring_hash(r, data + i, size - i < 4 ? size - i : 4);
        size_t o = chash_ring_lookup(r, h);
        if (o >= n || chash_ring_member_points(r, o) == 0)
            abort();
        size_t got = chash_ring_lookup_n(r, h, out, MAXM);
        if (got == 0 || out[0] != o)
            abort();
        for (size_t a = 0; a < got; a++)
            for (size_t b = 0; b < a; b++)
                if (out[a] == out[b])
                    abort();
        size_t bnd = chash_ring_lookup_bounded(r, h, load, total, 1.25);
        if (bnd >= n)
            abort();
        load[bnd]++;
        total++;
    }
    double moved = -1;
    if (chash_ring_diff(r, r, &moved) != 0 || moved != 0.0)
        abort();
    chash_ring_destroy(r);
    return 0;
}

/* shard.c -- the README example: shard keys over three caches with libchash.
 * Build: cc -Iinclude shard.c -Lbuild -l:libchash.so (or build/libchash.a
 * -lxxhash -lmd -lz -lm).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <chash/chash.h>
#include <stdio.h>
#include <string.h>

int
main(void)
{
    struct chash_member m[] = {
        {"cache-1", 1, 1.0}, {"cache-2", 1, 1.0}, {"cache-3", 2, 1.0}};
    struct chash_ring *ring;
    int rc = chash_ring_create(NULL, m, 3, &ring); /* ring, xxh3, 160 */
    if (rc != 0) {
        fprintf(stderr, "chash: %s\n", chash_strerror(rc));
        return 1;
    }
    const char *key = "user:42";
    uint64_t h = chash_ring_hash(ring, key, strlen(key));
    size_t replicas[2];
    size_t n = chash_ring_lookup_n(ring, h, replicas, 2);
    printf("%s -> %s", key, m[chash_ring_lookup(ring, h)].name);
    for (size_t i = 1; i < n; i++)
        printf(" (replica %s)", m[replicas[i]].name);
    printf("\nshare of cache-3: %.4f\n", chash_ring_share(ring, 2));
    chash_ring_destroy(ring);
    return 0;
}

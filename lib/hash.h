/* hash.h -- the one table of key hash functions, shared by every algorithm,
 * and the raw functions and mixers the algorithms use directly (hash.c).
 * Includes nothing of lib/: the bottom of the order in internal.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_HASH_H
#define CHASH_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t (*chash__hash_fn)(const void *key, size_t len);

/* One row of the table: a config name, the function, its output width. */
struct chash__hash_entry {
    int id;             /* enum chash_hash */
    const char *name;   /* config / CLI name */
    chash__hash_fn fn;
    int bits;           /* 32 or 64 */
};

/* The row for <id>, or NULL. */
const struct chash__hash_entry *chash__hash_get(int id);

/* MurmurHash3's 64-bit finaliser: a bijective mixer, used by MurmurHash3
 * itself and by rendezvous to mix a key hash with a member's name hash.
 * Inline: rendezvous calls it once per member per lookup. */
static inline uint64_t
chash__fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* Raw functions the algorithms also use directly. */
uint64_t chash__xxh3(const void *key, size_t len);
uint64_t chash__xxh3_seed(const void *key, size_t len, uint64_t seed);
uint64_t chash__xxh64_seed(const void *key, size_t len, uint64_t seed);
void chash__md5(const void *key, size_t len, unsigned char digest[16]);
uint32_t chash__crc32(uint32_t crc, const void *buf, size_t len);

/* Spread a 32-bit hash over 64 bits: h<<32 | h. */
static inline uint64_t
chash__widen(uint64_t h, int bits)
{
    return bits == 32 ? (h << 32) | (h & 0xffffffffu) : h;
}

/* The twemproxy/libhashkit functions are declared in hash_compat.h: only
 * hash.c's table names them. */

#endif /* CHASH_HASH_H */

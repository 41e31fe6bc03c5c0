/* hash.c -- key hash functions: xxh3 (libxxhash), MurmurHash3, FNV-1a 64,
 * MD5 (libmd) and CRC-32 (zlib), and the one table naming them all.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "hash.h"

#include <string.h>

#include <md5.h>
#include <xxhash.h>
#include <zlib.h>

#include "chash/chash.h"
#include "hash_compat.h"

uint64_t
chash__xxh3(const void *key, size_t len)
{
    return XXH3_64bits(key, len);
}

uint64_t
chash__xxh3_seed(const void *key, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(key, len, seed);
}

uint64_t
chash__xxh64_seed(const void *key, size_t len, uint64_t seed)
{
    return XXH64(key, len, seed);
}

/* MurmurHash3 (Austin Appleby, public domain algorithm), written from its
 * specification. Blocks are read little-endian with memcpy so unaligned
 * keys are fine and the result is the same on every host. */
static inline uint32_t
rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

static inline uint64_t
rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint32_t
le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline uint64_t
le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* MurmurHash3_x86_32 with seed 0. */
static uint64_t
murmur3_32(const void *key, size_t len)
{
    const unsigned char *p = key;
    const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
    uint32_t h = 0, k;
    size_t i, nblocks = len / 4;

    for (i = 0; i < nblocks; i++) {
        k = le32(p + 4 * i);
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = rotl32(h, 13);
        h = h * 5 + 0xe6546b64;
    }
    /* The tail: up to 3 bytes, mixed in without the rotation of h. */
    const unsigned char *tail = p + 4 * nblocks;
    k = 0;
    switch (len & 3) {
    case 3:
        k ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        k ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

/* MurmurHash3_x64_128 with seed 0; the two 64-bit halves are folded with
 * XOR into the 64-bit value we use. */
static uint64_t
murmur3_128(const void *key, size_t len)
{
    const unsigned char *p = key;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = 0, h2 = 0, k1, k2;
    size_t i, nblocks = len / 16;

    for (i = 0; i < nblocks; i++) {
        k1 = le64(p + 16 * i);
        k2 = le64(p + 16 * i + 8);
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
        h1 = rotl64(h1, 27);
        h1 += h2;
        h1 = h1 * 5 + 0x52dce729;
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        h2 = rotl64(h2, 31);
        h2 += h1;
        h2 = h2 * 5 + 0x38495ab5;
    }
    const unsigned char *t = p + 16 * nblocks;
    k1 = k2 = 0;
    /* Tail bytes 8..15 feed k2, bytes 0..7 feed k1, as in the reference. */
    switch (len & 15) {
    case 15: k2 ^= (uint64_t)t[14] << 48; /* fall through */
    case 14: k2 ^= (uint64_t)t[13] << 40; /* fall through */
    case 13: k2 ^= (uint64_t)t[12] << 32; /* fall through */
    case 12: k2 ^= (uint64_t)t[11] << 24; /* fall through */
    case 11: k2 ^= (uint64_t)t[10] << 16; /* fall through */
    case 10: k2 ^= (uint64_t)t[9] << 8;   /* fall through */
    case 9:
        k2 ^= (uint64_t)t[8];
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        /* fall through */
    case 8: k1 ^= (uint64_t)t[7] << 56; /* fall through */
    case 7: k1 ^= (uint64_t)t[6] << 48; /* fall through */
    case 6: k1 ^= (uint64_t)t[5] << 40; /* fall through */
    case 5: k1 ^= (uint64_t)t[4] << 32; /* fall through */
    case 4: k1 ^= (uint64_t)t[3] << 24; /* fall through */
    case 3: k1 ^= (uint64_t)t[2] << 16; /* fall through */
    case 2: k1 ^= (uint64_t)t[1] << 8;  /* fall through */
    case 1:
        k1 ^= (uint64_t)t[0];
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
    }
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = chash__fmix64(h1);
    h2 = chash__fmix64(h2);
    h1 += h2;
    h2 += h1;
    return h1 ^ h2;
}

/* FNV-1a with the 64-bit offset basis and prime, bytes unsigned. */
static uint64_t
fnv1a_64(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void
chash__md5(const void *key, size_t len, unsigned char digest[16])
{
    MD5_CTX ctx;

    MD5Init(&ctx);
    MD5Update(&ctx, key, len);
    MD5Final(digest, &ctx);
}

/* The first four digest bytes, little-endian: twemproxy's and
 * libmemcached's "md5" key hash. */
static uint64_t
md5_32(const void *key, size_t len)
{
    unsigned char d[16];

    chash__md5(key, len, d);
    return le32(d);
}

uint32_t
chash__crc32(uint32_t crc, const void *buf, size_t len)
{
    /* zlib takes uInt lengths; feed huge buffers in pieces. */
    const unsigned char *p = buf;
    while (len > 0) {
        uInt n = len > 0x40000000u ? 0x40000000u : (uInt)len;
        crc = (uint32_t)crc32(crc, p, n);
        p += n;
        len -= n;
    }
    return crc;
}

static uint64_t
crc32_ieee(const void *key, size_t len)
{
    return chash__crc32(0, key, len);
}

/* Cache::Memcached's "crc32" (twemproxy's and libhashkit's too): the top
 * 15 bits of the standard CRC-32. Here rather than in hash_compat.c so
 * that file needs nothing of this one. */
static uint64_t
crc32_15(const void *key, size_t len)
{
    uint32_t crc = chash__crc32(0, key, len);
    return (crc >> 16) & 0x7fff;
}

/* The one table: id, config name, function, width. Order follows the
 * enum so chash__hash_get is an array index. */
static const struct chash__hash_entry table[CHASH_HASH_COUNT] = {
    {CHASH_HASH_XXH3, "xxh3", chash__xxh3, 64},
    {CHASH_HASH_MURMUR3, "murmur3", murmur3_128, 64},
    {CHASH_HASH_MURMUR3_32, "murmur3_32", murmur3_32, 32},
    {CHASH_HASH_FNV1A_64, "fnv1a64", fnv1a_64, 64},
    {CHASH_HASH_MD5, "md5", md5_32, 32},
    {CHASH_HASH_CRC32, "crc32a", crc32_ieee, 32},
    {CHASH_HASH_ONE_AT_A_TIME, "one_at_a_time", chash__one_at_a_time, 32},
    {CHASH_HASH_CRC16, "crc16", chash__crc16, 32},
    {CHASH_HASH_CRC32_15, "crc32", crc32_15, 32},
    {CHASH_HASH_FNV1_64, "fnv1_64", chash__fnv1_64, 32},
    {CHASH_HASH_FNV1A_64_TW, "fnv1a_64", chash__fnv1a_64_tw, 32},
    {CHASH_HASH_FNV1_32, "fnv1_32", chash__fnv1_32, 32},
    {CHASH_HASH_FNV1A_32, "fnv1a_32", chash__fnv1a_32, 32},
    {CHASH_HASH_HSIEH, "hsieh", chash__hsieh, 32},
    {CHASH_HASH_MURMUR, "murmur", chash__murmur2_tw, 32},
    {CHASH_HASH_JENKINS, "jenkins", chash__jenkins, 32},
};

const struct chash__hash_entry *
chash__hash_get(int id)
{
    if (id < 0 || id >= CHASH_HASH_COUNT || table[id].fn == NULL)
        return NULL;
    return &table[id];
}

uint64_t
chash_hash(int hash, const void *key, size_t len)
{
    const struct chash__hash_entry *e = chash__hash_get(hash);

    if (e == NULL || (key == NULL && len > 0))
        return 0;
    return e->fn(key, len);
}

int
chash_hash_bits(int hash)
{
    const struct chash__hash_entry *e = chash__hash_get(hash);
    return e ? e->bits : 0;
}

const char *
chash_hash_name(int hash)
{
    const struct chash__hash_entry *e = chash__hash_get(hash);
    return e ? e->name : NULL;
}

int
chash_hash_from_name(const char *name)
{
    if (name == NULL)
        return -CHASH_EHASH;
    for (int i = 0; i < CHASH_HASH_COUNT; i++)
        if (table[i].fn != NULL && strcmp(table[i].name, name) == 0)
            return table[i].id;
    return -CHASH_EHASH;
}

/* Hash tags (twemproxy nc_server.c, the Redis Cluster rule): the first
 * opening character, then the first closing one after it; an empty tag
 * ("{}") means the whole key, so keys like "a{}b" still spread. */
size_t
chash_key_tag(const void *key, size_t len, const char *tag, size_t *off)
{
    const char *k = key, *open, *close;

    *off = 0;
    if (tag == NULL || tag[0] == '\0' || tag[1] == '\0' || len == 0)
        return len;
    open = memchr(k, tag[0], len);
    if (open == NULL)
        return len;
    close = memchr(open + 1, tag[1], len - (size_t)(open + 1 - k));
    if (close == NULL || close == open + 1)
        return len;
    *off = (size_t)(open + 1 - k);
    return (size_t)(close - open - 1);
}

/* hash_compat.c -- the key hash functions of twemproxy and libmemcached
 * (libhashkit), written from their definitions with every quirk kept:
 * bytes are sign-extended where those projects read a (signed) char.
 * Self-contained: Cache::Memcached's "crc32", built on zlib's CRC-32, is
 * in hash.c beside it, so this file calls nothing else in lib/.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "hash_compat.h"

#include <string.h>

/* twemproxy reads keys through `const char *` and widens each byte to
 * uint32_t; on x86 that sign-extends bytes >= 0x80 to 0xffffffxx. We do
 * the same on every host so the mapping does not depend on the CPU. */
static inline uint32_t
schar(const unsigned char *p, size_t i)
{
    return (uint32_t)(int32_t)(signed char)p[i];
}

/* Bob Jenkins' one-at-a-time. */
uint64_t
chash__one_at_a_time(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t v = 0;

    for (size_t i = 0; i < len; i++) {
        v += schar(p, i);
        v += v << 10;
        v ^= v >> 6;
    }
    v += v << 3;
    v ^= v >> 11;
    v += v << 15;
    return v;
}

/* CRC-16/XMODEM table (polynomial 0x1021), computed once. twemproxy never
 * masks the running value to 16 bits, so the high bits keep the bytes
 * shifted out: we keep that. */
static uint32_t crc16tab[256];

static void
crc16_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i << 8;
        for (int b = 0; b < 8; b++)
            c = (c & 0x8000) ? ((c << 1) ^ 0x1021) : (c << 1);
        crc16tab[i] = c & 0xffff;
    }
}

uint64_t
chash__crc16(const void *key, size_t len)
{
    static int ready;
    const unsigned char *p = key;
    uint32_t crc = 0;

    /* The table is a pure function of the polynomial: computing it twice
     * from two threads writes the same values, so a plain flag is safe. */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        crc16_init();
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    for (size_t i = 0; i < len; i++)
        crc = (crc << 8) ^ crc16tab[((crc >> 8) ^ schar(p, i)) & 0xff];
    return crc;
}

uint64_t
chash__fnv1_64(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < len; i++) {
        h *= 0x100000001b3ULL;
        h ^= (uint64_t)(int64_t)(signed char)p[i];
    }
    return (uint32_t)h;
}

/* twemproxy's default: the 64-bit FNV constants truncated to 32 bits and
 * used in 32-bit arithmetic. */
uint64_t
chash__fnv1a_64_tw(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t h = (uint32_t)0xcbf29ce484222325ULL;

    for (size_t i = 0; i < len; i++) {
        h ^= schar(p, i);
        h *= (uint32_t)0x100000001b3ULL;
    }
    return h;
}

uint64_t
chash__fnv1_32(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h *= 16777619u;
        h ^= schar(p, i);
    }
    return h;
}

uint64_t
chash__fnv1a_32(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h ^= schar(p, i);
        h *= 16777619u;
    }
    return h;
}

/* Paul Hsieh's SuperFastHash as twemproxy has it: initial value 0, not
 * the length; 16-bit reads little-endian; the 3-byte tail sign-extends
 * its third byte. */
uint64_t
chash__hsieh(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t hash = 0, tmp;
    size_t rem;

    if (len == 0)
        return 0;
    rem = len & 3;
    len >>= 2;
    for (; len > 0; len--) {
        hash += (uint32_t)(p[0] | p[1] << 8);
        tmp = ((uint32_t)(p[2] | p[3] << 8) << 11) ^ hash;
        hash = (hash << 16) ^ tmp;
        p += 4;
        hash += hash >> 11;
    }
    switch (rem) {
    case 3:
        hash += (uint32_t)(p[0] | p[1] << 8);
        hash ^= hash << 16;
        hash ^= schar(p, 2) << 18;
        hash += hash >> 11;
        break;
    case 2:
        hash += (uint32_t)(p[0] | p[1] << 8);
        hash ^= hash << 11;
        hash += hash >> 17;
        break;
    case 1:
        hash += schar(p, 0);
        hash ^= hash << 10;
        hash += hash >> 1;
        break;
    }
    hash ^= hash << 3;
    hash += hash >> 5;
    hash ^= hash << 4;
    hash += hash >> 17;
    hash ^= hash << 25;
    hash += hash >> 6;
    return hash;
}

/* MurmurHash2, 32-bit, with twemproxy's seed 0xdeadbeef * len. */
uint64_t
chash__murmur2_tw(const void *key, size_t len)
{
    const unsigned char *p = key;
    const uint32_t m = 0x5bd1e995;
    const uint32_t seed = 0xdeadbeefu * (uint32_t)len;
    uint32_t h = seed ^ (uint32_t)len, k;

    while (len >= 4) {
        k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
            (uint32_t)p[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
        p += 4;
        len -= 4;
    }
    switch (len) {
    case 3:
        h ^= (uint32_t)p[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)p[1] << 8;
        /* fall through */
    case 1:
        h ^= p[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* Bob Jenkins' lookup3 hashlittle() with initval 13, bytes read
 * little-endian one by one (the result equals the aligned fast paths). */
#define rot(x, k) (((x) << (k)) | ((x) >> (32 - (k))))
#define mix(a, b, c)                                                           \
    do {                                                                       \
        a -= c; a ^= rot(c, 4); c += b;                                        \
        b -= a; b ^= rot(a, 6); a += c;                                        \
        c -= b; c ^= rot(b, 8); b += a;                                        \
        a -= c; a ^= rot(c, 16); c += b;                                       \
        b -= a; b ^= rot(a, 19); a += c;                                       \
        c -= b; c ^= rot(b, 4); b += a;                                        \
    } while (0)
#define final(a, b, c)                                                         \
    do {                                                                       \
        c ^= b; c -= rot(b, 14);                                               \
        a ^= c; a -= rot(c, 11);                                               \
        b ^= a; b -= rot(a, 25);                                               \
        c ^= b; c -= rot(b, 16);                                               \
        a ^= c; a -= rot(c, 4);                                                \
        b ^= a; b -= rot(a, 14);                                               \
        c ^= b; c -= rot(b, 24);                                               \
    } while (0)

static inline uint32_t
get32(const unsigned char *p, size_t n)
{
    /* n (1..4) bytes little-endian, the rest zero: lookup3's tail. */
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

uint64_t
chash__jenkins(const void *key, size_t len)
{
    const unsigned char *k = key;
    uint32_t a, b, c;

    a = b = c = 0xdeadbeefu + (uint32_t)len + 13u;
    while (len > 12) {
        a += get32(k, 4);
        b += get32(k + 4, 4);
        c += get32(k + 8, 4);
        mix(a, b, c);
        len -= 12;
        k += 12;
    }
    if (len == 0)
        return c;
    a += get32(k, len < 4 ? len : 4);
    if (len > 4)
        b += get32(k + 4, len < 8 ? len - 4 : 4);
    if (len > 8)
        c += get32(k + 8, len - 8);
    final(a, b, c);
    return c;
}

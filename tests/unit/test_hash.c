/* test_hash.c -- golden vectors for our own key hash functions (xxh3,
 * MurmurHash3, FNV-1a 64, MD5, CRC-32) from their published test vectors,
 * and the name table. twemproxy's and libmemcached's functions have their
 * published tables in test_compat.c.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chash/chash.h"

static uint64_t
h(int id, const char *s)
{
    return chash_hash(id, s, strlen(s));
}

static const char fox[] = "The quick brown fox jumps over the lazy dog";

/* XXH3-64, seed 0: the xxHash sanity value for the empty input. */
static void
test_xxh3(void **state)
{
    (void)state;
    assert_int_equal(h(CHASH_HASH_XXH3, ""), 0x2d06800538d394c2ULL);
    assert_int_equal(chash_hash_bits(CHASH_HASH_XXH3), 64);
}

/* MurmurHash3 x86_32 and x64_128 (seed 0), reference implementation
 * outputs; x64_128 of the fox is e34bbc7bbc071b6c 7a433ca9c49a9347. */
static void
test_murmur3(void **state)
{
    (void)state;
    assert_int_equal(h(CHASH_HASH_MURMUR3_32, ""), 0);
    assert_int_equal(h(CHASH_HASH_MURMUR3_32, "hello"), 0x248bfa47);
    assert_int_equal(h(CHASH_HASH_MURMUR3_32, fox), 0x2e4ff723);
    assert_int_equal(h(CHASH_HASH_MURMUR3, ""), 0);
    assert_int_equal(h(CHASH_HASH_MURMUR3, fox),
                     0xe34bbc7bbc071b6cULL ^ 0x7a433ca9c49a9347ULL);
}

/* FNV-1a 64 from the FNV reference test suite. */
static void
test_fnv1a64(void **state)
{
    (void)state;
    assert_int_equal(h(CHASH_HASH_FNV1A_64, ""), 0xcbf29ce484222325ULL);
    assert_int_equal(h(CHASH_HASH_FNV1A_64, "a"), 0xaf63dc4c8601ec8cULL);
    assert_int_equal(h(CHASH_HASH_FNV1A_64, "foobar"), 0x85944171f73967e8ULL);
}

/* MD5 (RFC 1321 suite: "" is d41d8cd9...) as its first 4 bytes LE; CRC-32
 * check value of "123456789" is cbf43926. */
static void
test_md5_crc32(void **state)
{
    (void)state;
    assert_int_equal(h(CHASH_HASH_MD5, ""), 0xd98c1dd4);
    assert_int_equal(h(CHASH_HASH_CRC32, "123456789"), 0xcbf43926);
}

/* The table: every id has a unique name that maps back to it; unknown
 * names and ids are refused, not crashed on. */
static void
test_table(void **state)
{
    (void)state;
    for (int i = 0; i < CHASH_HASH_COUNT; i++) {
        const char *name = chash_hash_name(i);
        assert_non_null(name);
        assert_int_equal(chash_hash_from_name(name), i);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(name, chash_hash_name(j));
    }
    assert_int_equal(chash_hash_from_name("sha1"), -CHASH_EHASH);
    assert_int_equal(chash_hash_from_name(NULL), -CHASH_EHASH);
    assert_null(chash_hash_name(CHASH_HASH_COUNT));
    assert_null(chash_hash_name(-1));
    assert_int_equal(chash_hash(CHASH_HASH_COUNT, "x", 1), 0);
    assert_int_equal(chash_hash_bits(-3), 0);
    /* A NULL key of length 0 is the empty key. */
    assert_int_equal(chash_hash(CHASH_HASH_XXH3, NULL, 0),
                     0x2d06800538d394c2ULL);
}

/* Bytes >= 0x80: twemproxy sign-extends them; the true FNV-1a 64 does not.
 * On ASCII keys twemproxy's "fnv1a_64" equals the low 32 bits of the real
 * one (the low half of a product depends on low halves only); on high
 * bytes the two must differ, proving the quirk is kept. */
static void
test_sign_extension(void **state)
{
    const char ascii[] = "user:1234";
    const char high[] = "caf\xc3\xa9";
    (void)state;
    assert_int_equal(h(CHASH_HASH_FNV1A_64_TW, ascii),
                     h(CHASH_HASH_FNV1A_64, ascii) & 0xffffffffu);
    assert_int_not_equal(h(CHASH_HASH_FNV1A_64_TW, high),
                         h(CHASH_HASH_FNV1A_64, high) & 0xffffffffu);
}

/* Hash tags, the rule twemproxy and Redis Cluster share (the reference's
 * verified cases): the first '{', the first '}' after it, non-empty. */
static void
tag_is(const char *key, const char *tag, const char *want)
{
    size_t off, n = chash_key_tag(key, strlen(key), tag, &off);

    assert_int_equal(n, strlen(want));
    assert_memory_equal(key + off, want, n);
}

static void
test_key_tag(void **state)
{
    (void)state;
    tag_is("user:{u1}:a", "{}", "u1");
    tag_is("{u1}", "{}", "u1");
    tag_is("foo{}{bar}", "{}", "foo{}{bar}");
    tag_is("foo{{bar}}zap", "{}", "{bar");
    tag_is("foo{bar", "{}", "foo{bar");
    tag_is("nobrace", "{}", "nobrace");
    tag_is("a$b$c", "$$", "b");
    tag_is("user:{u1}:a", "", "user:{u1}:a");
    tag_is("user:{u1}:a", NULL, "user:{u1}:a");
    tag_is("", "{}", "");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xxh3),
        cmocka_unit_test(test_murmur3),
        cmocka_unit_test(test_fnv1a64),
        cmocka_unit_test(test_md5_crc32),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_sign_extension),
        cmocka_unit_test(test_key_tag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

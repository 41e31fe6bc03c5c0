/* test_etcd.c -- the pure parts of chashd's etcd client (etcd_codec.c):
 * base64 as etcd's gateway writes it (vectors from etcd.md's examples and
 * RFC 4648), the key layout, names, addresses and member records.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf/etcd_codec.h"

static void
check_b64(const char *plain, const char *enc)
{
    char *e = etcd_b64_encode(plain, strlen(plain)), *d;
    size_t n = 99;

    assert_non_null(e);
    assert_string_equal(e, enc);
    d = etcd_b64_decode(enc, &n);
    assert_non_null(d);
    assert_int_equal(n, strlen(plain));
    assert_memory_equal(d, plain, n);
    free(e);
    free(d);
}

static void
test_b64(void **state)
{
    (void)state;
    /* RFC 4648 section 10 */
    check_b64("", "");
    check_b64("f", "Zg==");
    check_b64("fo", "Zm8=");
    check_b64("foo", "Zm9v");
    check_b64("foob", "Zm9vYg==");
    check_b64("fooba", "Zm9vYmE=");
    check_b64("foobar", "Zm9vYmFy");
    /* a key of doc/etcd.md's reference */
    check_b64("/chash/pools/web/members/a",
              "L2NoYXNoL3Bvb2xzL3dlYi9tZW1iZXJzL2E=");
}

static void
test_b64_refused(void **state)
{
    static const char *const bad[] = {
        "Zg",       /* unpadded: etcd refuses it too */
        "Zg=",      /* a wrong length */
        "Z===",     /* three pads */
        "Zg==Zm8=", /* padding inside */
        "Zm9v!A==", /* outside the alphabet */
        "Zm9v-_==", /* the URL-safe alphabet */
        "Zm=v",     /* a pad before a character */
        "Zh==",     /* bits left over by the padding: not canonical */
        "Zm9=",
    };
    size_t n;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *d = etcd_b64_decode(bad[i], &n);
        if (d != NULL)
            fail_msg("decoded \"%s\"", bad[i]);
    }
}

static void
test_b64_binary(void **state)
{
    unsigned char all[256];
    char *e, *d;
    size_t n;

    (void)state;
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)(255 - i);
    for (size_t len = 0; len <= sizeof(all); len += 37) {
        e = etcd_b64_encode(all, len);
        assert_int_equal(strlen(e), 4 * ((len + 2) / 3));
        d = etcd_b64_decode(e, &n);
        assert_non_null(d);
        assert_int_equal(n, len);
        assert_memory_equal(d, all, len);
        free(e);
        free(d);
    }
}

static void
test_key_split(void **state)
{
    char k1[] = "pools/web/members/web-1", k2[] = "instances/lb-2",
         k3[] = "pools/web/config", k4[] = "pools/web/members/a/b",
         k5[] = "pools//members/x", k6[] = "pools/web/members/",
         k7[] = "instances/", k8[] = "other/x";
    char *pool = NULL, *member = NULL;

    (void)state;
    assert_int_equal(etcd_key_split(k1, &pool, &member), ETCD_KEY_MEMBER);
    assert_string_equal(pool, "web");
    assert_string_equal(member, "web-1");
    assert_int_equal(etcd_key_split(k2, &pool, &member), ETCD_KEY_INSTANCE);
    assert_string_equal(member, "lb-2");
    assert_int_equal(etcd_key_split(k3, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k4, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k5, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k6, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k7, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k8, &pool, &member), ETCD_KEY_OTHER);
}

static void
test_key_split_migration(void **state)
{
    char k1[] = "pools/store/migration", k2[] = "pools/store/copier",
         k3[] = "pools/store/barrier/42.1/lb-2",
         k4[] = "pools/store/barrier/42/lb-2",
         k5[] = "pools/store/barrier/x.1/lb-2",
         k6[] = "pools/store/barrier/4.1/a/b", k7[] = "pools//migration",
         k8[] = "pools/store/migration/x";
    char *pool = NULL, *member = NULL;

    (void)state;
    assert_int_equal(etcd_key_split(k1, &pool, &member), ETCD_KEY_MIGRATION);
    assert_string_equal(pool, "store");
    assert_string_equal(member, "migration");
    assert_int_equal(etcd_key_split(k2, &pool, &member), ETCD_KEY_MIGRATION);
    assert_string_equal(member, "copier");
    assert_int_equal(etcd_key_split(k3, &pool, &member), ETCD_KEY_MIGRATION);
    assert_string_equal(pool, "store");
    assert_string_equal(member, "barrier/42.1/lb-2");
    assert_int_equal(etcd_key_split(k4, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k5, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k6, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k7, &pool, &member), ETCD_KEY_OTHER);
    assert_int_equal(etcd_key_split(k8, &pool, &member), ETCD_KEY_OTHER);
}

static void
test_names_and_addresses(void **state)
{
    (void)state;
    assert_true(etcd_name_ok("web-1"));
    assert_true(etcd_name_ok("127.0.0.1:9001"));
    assert_true(etcd_name_ok("a_b.c"));
    assert_false(etcd_name_ok(""));
    assert_false(etcd_name_ok("a/b"));
    assert_false(etcd_name_ok("a b"));
    assert_false(etcd_name_ok("w#1"));
    assert_false(etcd_name_ok("0123456789012345678901234567890123456789"
                              "012345678901234567890123"));
    assert_true(etcd_address_ok("127.0.0.1:9001"));
    assert_true(etcd_address_ok("[::1]:9001"));
    assert_true(etcd_address_ok("/run/app.sock"));
    assert_false(etcd_address_ok("localhost:9001")); /* no DNS */
    assert_false(etcd_address_ok("127.0.0.1"));
    assert_false(etcd_address_ok("127.0.0.1:0"));
    assert_false(etcd_address_ok("127.0.0.1:65536"));
    assert_false(etcd_address_ok("127.0.0.1:+80"));
    assert_false(etcd_address_ok("127.0.0.1:80x"));
    assert_false(etcd_address_ok("[::1:9001"));
    assert_false(etcd_address_ok("[]:9001"));
    assert_false(etcd_address_ok(":9001"));
    assert_false(etcd_address_ok(""));
}

static const char *
parse(const char *name, const char *v, struct etcd_record *r)
{
    return etcd_record_parse(name, v, strlen(v), r);
}

static void
test_records(void **state)
{
    struct etcd_record r;

    (void)state;
    assert_null(parse("web-1", "{\"address\":\"10.0.0.1:80\"}", &r));
    assert_string_equal(r.address, "10.0.0.1:80");
    assert_int_equal(r.weight, 1);
    assert_int_equal(r.state, ETCD_STATE_UP);
    assert_int_equal(r.since, 0);
    assert_null(parse("w",
                      "{\"address\":\"[::1]:80\",\"weight\":100,"
                      "\"state\":\"drain\",\"since\":1764620000000,"
                      "\"note\":\"unknown fields are kept out\"}",
                      &r));
    assert_int_equal(r.weight, 100);
    assert_int_equal(r.state, ETCD_STATE_DRAIN);
    assert_int_equal(r.since, 1764620000000ull);
    assert_null(
        parse("w", "{\"address\":\"/run/a.sock\",\"state\":\"maint\"}", &r));
    assert_int_equal(r.state, ETCD_STATE_MAINT);

    assert_non_null(parse("w", "nope", &r));
    assert_non_null(parse("w", "", &r));
    assert_non_null(parse("w", "[1]", &r));
    assert_non_null(parse("w", "{}", &r));
    assert_non_null(parse("w", "{\"address\":\"db.local:80\"}", &r));
    assert_non_null(parse("w", "{\"address\":80}", &r));
    assert_non_null(
        parse("w", "{\"address\":\"1.2.3.4:80\",\"weight\":0}", &r));
    assert_non_null(
        parse("w", "{\"address\":\"1.2.3.4:80\",\"weight\":\"2\"}", &r));
    assert_non_null(
        parse("w", "{\"address\":\"1.2.3.4:80\",\"weight\":1000001}", &r));
    assert_non_null(
        parse("w", "{\"address\":\"1.2.3.4:80\",\"weight\":1.5}", &r));
    assert_non_null(
        parse("w", "{\"address\":\"1.2.3.4:80\",\"state\":\"down\"}", &r));
    assert_non_null(
        parse("w", "{\"address\":\"1.2.3.4:80\",\"since\":-1}", &r));
    /* a duplicate field would read differently by JSON library */
    assert_non_null(parse("w",
                          "{\"address\":\"1.2.3.4:80\","
                          "\"address\":\"1.2.3.5:80\"}",
                          &r));
    /* a NUL inside the address */
    assert_non_null(parse("w", "{\"address\":\"1.2.3.4:80\\u0000x\"}", &r));
    assert_non_null(parse("bad/name", "{\"address\":\"1.2.3.4:80\"}", &r));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64),
        cmocka_unit_test(test_b64_refused),
        cmocka_unit_test(test_b64_binary),
        cmocka_unit_test(test_key_split),
        cmocka_unit_test(test_key_split_migration),
        cmocka_unit_test(test_names_and_addresses),
        cmocka_unit_test(test_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

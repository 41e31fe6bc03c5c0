/* test_migration.c -- the pieces of live migration that need no member:
 * what a MIGRATE reply means for a key, and the host and port MIGRATE is
 * given for a member's address.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conf.h"
#include "migration.h"
#include "request.h"

static int
result(const char *reply)
{
    return migration_migrate_result(reply, strlen(reply));
}

static void
test_migrate_replies(void **unused)
{
    (void)unused;
    assert_int_equal(result("+OK\r\n"), GATE_MOVED);
    assert_int_equal(result("+NOKEY\r\n"), GATE_ABSENT);
    /* the target has the key: the old owner's copy is the current one */
    assert_int_equal(result("-ERR Target instance replied with error: "
                            "BUSYKEY Target key name already exists.\r\n"),
                     GATE_RETRY);
    assert_int_equal(result("-BUSYKEY Target key name already exists.\r\n"),
                     GATE_RETRY);
    /* the key may be on both, equal: again, overwriting */
    assert_int_equal(result("-IOERR error or timeout reading to target "
                            "instance\r\n"),
                     GATE_RETRY);
    /* anything else: the request must not run */
    assert_int_equal(result("-ERR Target instance replied with error: OOM "
                            "command not allowed\r\n"),
                     GATE_FAILED);
    assert_int_equal(result("-NOAUTH Authentication required.\r\n"),
                     GATE_FAILED);
    assert_int_equal(result(":1\r\n"), GATE_FAILED);
    assert_int_equal(result(""), GATE_FAILED);
}

static void
test_host_port(void **unused)
{
    struct conf_addr a;
    char host[64], port[8], err[256];

    (void)unused;
    assert_int_equal(conf_parse_addr("127.0.0.1:7001", &a, err, sizeof(err)),
                     0);
    assert_int_equal(
        migration_host_port(&a, host, sizeof(host), port, sizeof(port)), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_string_equal(port, "7001");
    conf_addr_deinit(&a);
    assert_int_equal(conf_parse_addr("[::1]:6379", &a, err, sizeof(err)), 0);
    assert_int_equal(
        migration_host_port(&a, host, sizeof(host), port, sizeof(port)), 0);
    assert_string_equal(host, "::1");
    assert_string_equal(port, "6379");
    conf_addr_deinit(&a);
    /* MIGRATE cannot reach a unix socket */
    assert_int_equal(conf_parse_addr("/tmp/r.sock", &a, err, sizeof(err)), 0);
    assert_int_equal(
        migration_host_port(&a, host, sizeof(host), port, sizeof(port)), -1);
    conf_addr_deinit(&a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_replies),
        cmocka_unit_test(test_host_port),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

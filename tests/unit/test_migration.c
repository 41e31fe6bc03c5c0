/* test_migration.c -- the pieces of live migration that need no member:
 * what a MIGRATE reply means for a key, the host and port MIGRATE is
 * given for a member's address, and whether a migration runs in two
 * stages -- decided before the first snapshot that routes by it is
 * published, not after.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "conf/conf.h"
#include "control/migration.h"
#include "model/pool.h"
#include "data/request.h"

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

/* A redis pool of r1..r3 (ketama, md5) that copies its keys. */
static struct pool *
copy_pool(struct conf **cp)
{
    static const char text[] = "store:\n"
                               "  listen: 127.0.0.1:16380\n"
                               "  mode: redis\n"
                               "  migration: copy\n"
                               "  distribution: ketama\n"
                               "  hash: md5\n"
                               "  servers:\n"
                               "    - 127.0.0.1:7001:1 r1\n"
                               "    - 127.0.0.1:7002:1 r2\n"
                               "    - 127.0.0.1:7003:1 r3\n";
    char err[256];
    struct pool *p = NULL;

    *cp = conf_load_string("t.yml", text, strlen(text), err, sizeof(err));
    if (*cp == NULL)
        fail_msg("conf: %s", err);
    if (pool_create(&(*cp)->pools[0], true, &p, err, sizeof(err)) < 0)
        fail_msg("pool_create: %s", err);
    return p;
}

/* Keys of <snap> moving between its view's old placement and its own:
 * how many wait for the second stage (their new member's name sorts
 * first), how many go in the first. */
static void
count_moving(const struct pool_snapshot *snap, int *deferred, int *first)
{
    *deferred = *first = 0;
    for (int i = 0; i < 4000; i++) {
        char key[32];
        int n = snprintf(key, sizeof(key), "key:%d", i);
        struct server *o = pool_snapshot_owner(snap->mig->old, key, (size_t)n);
        struct server *w = pool_snapshot_owner(snap, key, (size_t)n);

        if (o == w)
            continue;
        if (migration_deferred(o->name, w->name))
            (*deferred)++;
        else
            (*first)++;
    }
}

static void
test_stage_decided_before_publication(void **unused)
{
    struct conf *c;
    struct pool *p = copy_pool(&c);
    struct pool_snapshot *snap;
    struct conf_server cs = {0};
    char err[256];
    int deferred, first;

    (void)unused;
    /* r1's weight 1 -> 3: members both give and take keys. The snapshot
     * published with the change already says "stage 1" -- nothing has
     * started the migration (migration_start) yet, and requests route
     * by this snapshot from the moment it is published. */
    assert_int_equal(migration_prepare(p, "r1 weight 1 -> 3", NULL, 0, 0, 0,
                                       err, sizeof(err)),
                     0);
    assert_int_equal(pool_member_set_weight(p, "r1", 3), 0);
    snap = pool_snapshot(p);
    assert_non_null(snap->mig);
    count_moving(snap, &deferred, &first);
    assert_true(deferred > 0 && first > 0); /* really both ways */
    assert_int_equal(atomic_load(&snap->mig->stage), 1);
    migration_cancel(p);
    assert_int_equal(pool_member_set_weight(p, "r1", 1), 0);
    assert_null(pool_snapshot(p)->mig);

    /* a new member only takes keys: one stage, decided as early */
    assert_int_equal(
        migration_prepare(p, "add r4", NULL, 0, 0, 0, err, sizeof(err)), 0);
    assert_int_equal(
        conf_parse_server("127.0.0.1:7004:1 r4", &cs, err, sizeof(err)), 0);
    assert_int_equal(pool_member_add(p, &cs), 0);
    conf_server_deinit(&cs);
    snap = pool_snapshot(p);
    assert_non_null(snap->mig);
    count_moving(snap, &deferred, &first);
    assert_true(deferred + first > 0);
    assert_int_equal(atomic_load(&snap->mig->stage), 0);
    migration_cancel(p);
    pool_remove(p);
    pool_reclaim();
    conf_destroy(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_replies),
        cmocka_unit_test(test_host_port),
        cmocka_unit_test(test_stage_decided_before_publication),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_state.c -- the runtime state file: validation with messages naming
 * the bad field, the delta applied to a config (and what is skipped, with
 * a warning), the delta recomputed from a runtime membership, and the
 * atomic save that round-trips.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "conf.h"
#include "state.h"

static const char yaml[] = "web:\n"
                           "  listen: 127.0.0.1:18080\n"
                           "  mode: tcp\n"
                           "  servers:\n"
                           "    - 127.0.0.1:9001:1 web-1\n"
                           "    - 127.0.0.1:9002:1 web-2\n"
                           "    - 127.0.0.1:9003:1 web-3\n";

static struct conf *
load_conf(const char *text)
{
    char err[256];
    struct conf *c =
        conf_load_string("t.yml", text, strlen(text), err, sizeof(err));

    if (c == NULL)
        fail_msg("conf: %s", err);
    return c;
}

static const struct conf_server *
server(const struct conf *c, const char *name)
{
    const struct conf_pool *p = conf_pool_find(c, "web");

    for (size_t i = 0; i < p->nservers; i++)
        if (strcmp(p->servers[i].name, name) == 0)
            return &p->servers[i];
    return NULL;
}

/* Load <text>; it must fail with a message containing <want>. */
static void
bad(const char *text, const char *want)
{
    struct state *st = state_create();
    char err[256] = "";

    assert_int_equal(state_load_string(st, "s.json", text, err, sizeof(err)),
                     -1);
    if (strstr(err, want) == NULL)
        fail_msg("'%s' does not say '%s'", err, want);
    assert_non_null(strstr(err, "s.json"));
    state_destroy(st);
}

static void
test_bad_files_name_the_problem(void **unused)
{
    (void)unused;
    bad("{", "s.json:");
    bad("[]", "object");
    bad("{\"pools\": {}}", "version");
    bad("{\"version\": 2, \"pools\": {}}", "version");
    bad("{\"version\": 1, \"pools\": []}", "pools");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"gone\": []}}}",
        "unknown key \"gone\"");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"added\": {}}}}",
        "pools.web.added: expected an array");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"added\": "
        "[{\"name\": \"a\", \"weight\": 1}]}}}",
        "pools.web.added[0].address");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"added\": "
        "[{\"name\": \"a\", \"address\": \"x:1\"}]}}}",
        "pools.web.added[0].weight: missing");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"changed\": "
        "[{\"name\": \"a\", \"weight\": -1}]}}}",
        "pools.web.changed[0].weight");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"changed\": "
        "[{\"name\": \"a\", \"state\": \"off\"}]}}}",
        "pools.web.changed[0].state");
    bad("{\"version\": 1, \"pools\": {\"web\": {\"removed\": [\"\"]}}}",
        "pools.web.removed[0]");
    bad("{\"version\": 1, \"version\": 1}", "duplicate");
}

static void
test_apply_adds_removes_and_overrides(void **unused)
{
    struct conf *c = load_conf(yaml);
    struct state *st = state_create();
    char err[256], warn[512];
    const struct conf_pool *p;

    (void)unused;
    assert_int_equal(
        state_load_string(
            st, "s.json",
            "{\"version\": 1, \"pools\": {\"web\": {"
            "\"added\": [{\"name\": \"web-4\", \"address\": \"127.0.0.1:9004\","
            " \"weight\": 2, \"state\": \"maint\"}],"
            "\"removed\": [\"web-1\"],"
            "\"changed\": [{\"name\": \"web-2\", \"weight\": 5, "
            "\"state\": \"drain\"}]}}}",
            err, sizeof(err)),
        0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_string_equal(warn, "");
    p = conf_pool_find(c, "web");
    assert_int_equal(p->nservers, 3);
    assert_null(server(c, "web-1"));
    assert_int_equal(server(c, "web-2")->weight, 5);
    assert_int_equal(server(c, "web-3")->weight, 1);
    assert_int_equal(server(c, "web-4")->weight, 2);
    assert_string_equal(server(c, "web-4")->addr.text, "127.0.0.1:9004");
    assert_int_equal(server(c, "web-4")->addr.port, 9004);
    assert_int_equal(state_admin(st, "web", "web-2"), STATE_ADMIN_DRAIN);
    assert_int_equal(state_admin(st, "web", "web-4"), STATE_ADMIN_MAINT);
    assert_int_equal(state_admin(st, "web", "web-3"), STATE_ADMIN_UP);
    assert_int_equal(state_admin(st, "nope", "web-3"), STATE_ADMIN_UP);
    state_destroy(st);
    conf_destroy(c);
}

static void
test_apply_skips_what_no_longer_fits(void **unused)
{
    struct conf *c = load_conf(yaml);
    struct state *st = state_create();
    char err[256], warn[1024];
    json_t *j;

    (void)unused;
    assert_int_equal(
        state_load_string(
            st, "s.json",
            "{\"version\": 1, \"pools\": {"
            "\"gone\": {\"removed\": [\"x\"]},"
            "\"web\": {"
            "\"added\": [{\"name\": \"web-9\", \"address\": \"127.0.0.1:9003\","
            " \"weight\": 1},"
            "            {\"name\": \"web-3\", \"address\": \"127.0.0.1:9999\","
            " \"weight\": 7}],"
            "\"removed\": [\"web-7\"],"
            "\"changed\": [{\"name\": \"web-8\", \"weight\": 5}]}}}",
            err, sizeof(err)),
        0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_non_null(strstr(warn, "pool gone is no longer in the config"));
    assert_non_null(strstr(warn, "web-9: address 127.0.0.1:9003 is now "
                                 "taken"));
    assert_non_null(strstr(warn, "removed member web-7 is no longer"));
    assert_non_null(strstr(warn, "changed member web-8 is no longer"));
    /* an added member the config now has itself keeps its runtime weight
     * and the config's address */
    assert_int_equal(server(c, "web-3")->weight, 7);
    assert_string_equal(server(c, "web-3")->addr.text, "127.0.0.1:9003");
    assert_int_equal(conf_pool_find(c, "web")->nservers, 3);
    /* the delta now says only what applied */
    j = state_json(st);
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(
        text,
        "{\"pools\":{\"web\":{\"added\":[],\"changed\":[{\"name\":\"web-3\","
        "\"state\":\"up\",\"weight\":7}],\"removed\":[]}},\"version\":1}");
    free(text);
    json_decref(j);
    state_destroy(st);
    conf_destroy(c);
}

static void
test_the_last_member_is_never_removed(void **unused)
{
    static const char one[] = "web:\n  listen: 127.0.0.1:18080\n  mode: tcp\n"
                              "  servers:\n    - 127.0.0.1:9001:1 web-1\n";
    struct conf *c = load_conf(one);
    struct state *st = state_create();
    char err[256], warn[512];

    (void)unused;
    assert_int_equal(state_load_string(st, "s.json",
                                       "{\"version\": 1, \"pools\": {\"web\": "
                                       "{\"removed\": [\"web-1\"]}}}",
                                       err, sizeof(err)),
                     0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_non_null(strstr(warn, "not removing web-1, the last member"));
    assert_non_null(server(c, "web-1"));
    state_destroy(st);
    conf_destroy(c);
}

static void
test_record_is_a_pure_delta(void **unused)
{
    struct conf *c = load_conf(yaml);
    struct state *st = state_create();
    char warn[256];
    struct state_member m[4] = {
        {"web-1", "127.0.0.1:9001", 1, STATE_ADMIN_UP},
        {"web-2", "127.0.0.1:9002", 3, STATE_ADMIN_UP},
        {"web-3", "127.0.0.1:9003", 1, STATE_ADMIN_MAINT},
        {"web-4", "127.0.0.1:9004", 1, STATE_ADMIN_UP},
    };
    json_t *j;
    char *text;

    (void)unused;
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_int_equal(state_record(st, "nope", m, 4), -1);
    /* web-1 removed (not in the list), web-2 reweighted, web-3 in
     * maintenance, web-4 added */
    assert_int_equal(state_record(st, "web", m + 1, 3), 0);
    j = state_json(st);
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(
        text, "{\"pools\":{\"web\":{\"added\":[{\"address\":\"127.0.0.1:9004\","
              "\"name\":\"web-4\",\"state\":\"up\",\"weight\":1}],"
              "\"changed\":[{\"name\":\"web-2\",\"state\":\"up\",\"weight\":3},"
              "{\"name\":\"web-3\",\"state\":\"maint\",\"weight\":1}],"
              "\"removed\":[\"web-1\"]}},\"version\":1}");
    free(text);
    json_decref(j);
    /* back to the config: nothing left */
    m[1].weight = 1;
    m[2].admin = STATE_ADMIN_UP;
    assert_int_equal(state_record(st, "web", m, 3), 0);
    j = state_json(st);
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text, "{\"pools\":{},\"version\":1}");
    free(text);
    json_decref(j);
    state_destroy(st);
    conf_destroy(c);
}

static void
test_save_and_load_round_trip(void **unused)
{
    char dir[] = "/tmp/chash-state-XXXXXX", path[256], err[256], warn[256];
    struct conf *c = load_conf(yaml), *c2 = load_conf(yaml);
    struct state *st = state_create(), *st2 = state_create();
    struct state_member m[3] = {
        {"web-1", "127.0.0.1:9001", 4, STATE_ADMIN_DRAIN},
        {"web-2", "127.0.0.1:9002", 1, STATE_ADMIN_UP},
        {"web-5", "[::1]:9005", 2, STATE_ADMIN_UP},
    };

    (void)unused;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state.json", dir);
    /* a missing file is an empty state */
    assert_int_equal(state_load(st, path, err, sizeof(err)), 0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_int_equal(state_record(st, "web", m, 3), 0);
    assert_int_equal(state_save(st, path, err, sizeof(err)), 0);
    assert_int_equal(access(path, R_OK), 0);

    assert_int_equal(state_load(st2, path, err, sizeof(err)), 0);
    assert_int_equal(state_apply(st2, c2, warn, sizeof(warn)), 0);
    assert_string_equal(warn, "");
    assert_int_equal(conf_pool_find(c2, "web")->nservers, 3);
    assert_int_equal(server(c2, "web-1")->weight, 4);
    assert_null(server(c2, "web-3"));
    assert_string_equal(server(c2, "web-5")->addr.text, "[::1]:9005");
    assert_int_equal(state_admin(st2, "web", "web-1"), STATE_ADMIN_DRAIN);

    /* a save into a directory that does not exist fails and says where */
    snprintf(path, sizeof(path), "%s/no/such/state.json", dir);
    assert_int_equal(state_save(st, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no/such"));

    snprintf(path, sizeof(path), "%s/state.json", dir);
    unlink(path);
    rmdir(dir);
    state_destroy(st);
    state_destroy(st2);
    conf_destroy(c);
    conf_destroy(c2);
}

/* A config member may weigh more than the admin API allows (rendezvous
 * takes any uint32): draining it records that weight, and the file the
 * daemon writes must load again at the next start. */
static void
test_heavy_config_member_round_trips(void **unused)
{
    static const char heavy[] = "web:\n"
                                "  listen: 127.0.0.1:18080\n"
                                "  mode: tcp\n"
                                "  distribution: rendezvous\n"
                                "  servers:\n"
                                "    - 127.0.0.1:9001:2000000 web-1\n"
                                "    - 127.0.0.1:9002:1 web-2\n";
    char dir[] = "/tmp/chash-state-XXXXXX", path[256], err[256], warn[256];
    struct conf *c = load_conf(heavy), *c2 = load_conf(heavy);
    struct state *st = state_create(), *st2 = state_create();
    struct state_member m[2] = {
        {"web-1", "127.0.0.1:9001", 2000000, STATE_ADMIN_DRAIN},
        {"web-2", "127.0.0.1:9002", 1, STATE_ADMIN_UP},
    };

    (void)unused;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state.json", dir);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_int_equal(state_record(st, "web", m, 2), 0);
    assert_int_equal(state_save(st, path, err, sizeof(err)), 0);
    if (state_load(st2, path, err, sizeof(err)) != 0)
        fail_msg("the daemon's own state file does not load: %s", err);
    assert_int_equal(state_apply(st2, c2, warn, sizeof(warn)), 0);
    assert_int_equal(server(c2, "web-1")->weight, 2000000);
    assert_int_equal(state_admin(st2, "web", "web-1"), STATE_ADMIN_DRAIN);
    /* a state_file that is a directory says so */
    assert_int_equal(state_load(st2, dir, err, sizeof(err)), -1);
    if (strstr(err, "Is a directory") == NULL)
        fail_msg("'%s' does not say why", err);
    /* still bounded: above uint32 is refused */
    bad("{\"version\": 1, \"pools\": {\"web\": {\"changed\": "
        "[{\"name\": \"a\", \"weight\": 4294967296}]}}}",
        "pools.web.changed[0].weight");
    unlink(path);
    rmdir(dir);
    state_destroy(st);
    state_destroy(st2);
    conf_destroy(c);
    conf_destroy(c2);
}

/* A delta made under an older config may not fit the new one (weight 5
 * was fine for rendezvous, jump takes 0 or 1): the config as written is
 * used, with a warning, instead of a pool that cannot be built. */
static void
test_a_delta_that_no_longer_fits_the_ring_is_dropped(void **unused)
{
    static const char jump[] = "web:\n"
                               "  listen: 127.0.0.1:18080\n"
                               "  mode: tcp\n"
                               "  distribution: jump\n"
                               "  servers:\n"
                               "    - 127.0.0.1:9001:1 web-1\n"
                               "    - 127.0.0.1:9002:1 web-2\n"
                               "other:\n"
                               "  listen: 127.0.0.1:18081\n"
                               "  mode: tcp\n"
                               "  servers:\n"
                               "    - 127.0.0.1:9101:1 o-1\n"
                               "    - 127.0.0.1:9102:1 o-2\n";
    struct conf *c = load_conf(jump);
    struct state *st = state_create();
    char err[256], warn[1024];
    json_t *j;

    (void)unused;
    assert_int_equal(
        state_load_string(
            st, "s.json",
            "{\"version\": 1, \"pools\": {"
            "\"web\": {\"changed\": [{\"name\": \"web-1\", \"weight\": 5}],"
            "          \"added\": [{\"name\": \"web-3\", \"address\": "
            "\"127.0.0.1:9003\", \"weight\": 1, \"state\": \"drain\"}]},"
            "\"other\": {\"changed\": [{\"name\": \"o-1\", \"weight\": 3}]}}}",
            err, sizeof(err)),
        0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    if (strstr(warn, "pool web: its runtime changes do not fit") == NULL)
        fail_msg("warning: '%s'", warn);
    assert_int_equal(conf_pool_find(c, "web")->nservers, 2);
    assert_int_equal(server(c, "web-1")->weight, 1);
    assert_int_equal(state_admin(st, "web", "web-3"), STATE_ADMIN_UP);
    /* the other pool keeps its delta */
    assert_int_equal(conf_pool_find(c, "other")->servers[0].weight, 3);
    j = state_json(st);
    assert_null(json_object_get(json_object_get(j, "pools"), "web"));
    assert_non_null(json_object_get(json_object_get(j, "pools"), "other"));
    json_decref(j);
    state_destroy(st);
    conf_destroy(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_files_name_the_problem),
        cmocka_unit_test(test_apply_adds_removes_and_overrides),
        cmocka_unit_test(test_apply_skips_what_no_longer_fits),
        cmocka_unit_test(test_the_last_member_is_never_removed),
        cmocka_unit_test(test_record_is_a_pure_delta),
        cmocka_unit_test(test_save_and_load_round_trip),
        cmocka_unit_test(test_heavy_config_member_round_trips),
        cmocka_unit_test(test_a_delta_that_no_longer_fits_the_ring_is_dropped),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

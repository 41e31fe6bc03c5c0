/* test_state.c -- the runtime state file: validation with messages naming
 * the bad field, the delta applied to a config (and what is skipped, with
 * a warning), the delta recomputed from a runtime membership, and the
 * atomic save that round-trips.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "conf/conf.h"
#include "model/state.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

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
    bad("{\"version\": 1, \"migrations\": []}", "\"migrations\" must be");
    bad("{\"version\": 1, \"migrations\": {\"web\": 3}}",
        "migration of pool \"web\" must be an object");
}

/* A running migration is kept in the file beside the delta, read back
 * whole, and dropped when it ends. */
static void
test_migration_round_trips(void **unused)
{
    char dir[] = "/tmp/chash-state-XXXXXX", path[256], err[256];
    struct state *st = state_create(), *st2 = state_create();
    json_t *m =
        json_pack("{s:i,s:s,s:[{s:s,s:i}],s:{s:{s:s,s:i}}}", "epoch", 7,
                  "change", "add web-4", "old", "name", "web-1", "weight", 1,
                  "sources", "web-1", "cursor", "1234", "pass", 1);
    json_t *back;

    (void)unused;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state.json", dir);
    assert_null(state_migration(st, "web"));
    assert_int_equal(state_set_migration(st, "web", m), 0);
    assert_int_equal(state_save(st, path, err, sizeof(err)), 0);
    assert_int_equal(state_load(st2, path, err, sizeof(err)), 0);
    back = state_migration(st2, "web");
    assert_non_null(back);
    assert_true(json_equal(back, m));
    assert_null(state_migration(st2, "other"));
    /* it ended: gone from the file */
    assert_int_equal(state_set_migration(st2, "web", NULL), 0);
    assert_int_equal(state_save(st2, path, err, sizeof(err)), 0);
    state_destroy(st);
    st = state_create();
    assert_int_equal(state_load(st, path, err, sizeof(err)), 0);
    assert_null(state_migration(st, "web"));
    unlink(path);
    rmdir(dir);
    json_decref(m);
    state_destroy(st);
    state_destroy(st2);
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
        {"web-1", "127.0.0.1:9001", 1, STATE_ADMIN_UP, NULL},
        {"web-2", "127.0.0.1:9002", 3, STATE_ADMIN_UP, NULL},
        {"web-3", "127.0.0.1:9003", 1, STATE_ADMIN_MAINT, NULL},
        {"web-4", "127.0.0.1:9004", 1, STATE_ADMIN_UP, NULL},
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
        {"web-1", "127.0.0.1:9001", 4, STATE_ADMIN_DRAIN, NULL},
        {"web-2", "127.0.0.1:9002", 1, STATE_ADMIN_UP, NULL},
        {"web-5", "[::1]:9005", 2, STATE_ADMIN_UP, NULL},
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
        {"web-1", "127.0.0.1:9001", 2000000, STATE_ADMIN_DRAIN, NULL},
        {"web-2", "127.0.0.1:9002", 1, STATE_ADMIN_UP, NULL},
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

/* 4294967295 is a weight like any other (rendezvous takes every uint32):
 * a changed entry carrying it is applied and written back, not taken for
 * "no weight given". */
static void
test_weight_uint32_max_is_applied(void **unused)
{
    static const char rz[] = "web:\n"
                             "  listen: 127.0.0.1:18080\n"
                             "  mode: tcp\n"
                             "  distribution: rendezvous\n"
                             "  servers:\n"
                             "    - 127.0.0.1:9001:1 web-1\n"
                             "    - 127.0.0.1:9002:1 web-2\n";
    struct conf *c = load_conf(rz);
    struct state *st = state_create();
    char err[256], warn[512], *text;
    json_t *j;

    (void)unused;
    assert_int_equal(
        state_load_string(st, "s.json",
                          "{\"version\": 1, \"pools\": {\"web\": {\"changed\": "
                          "[{\"name\": \"web-1\", \"weight\": 4294967295},"
                          " {\"name\": \"web-2\", \"state\": \"drain\"}]}}}",
                          err, sizeof(err)),
        0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_string_equal(warn, "");
    assert_int_equal(server(c, "web-1")->weight, UINT32_MAX);
    /* no weight given: the config's */
    assert_int_equal(server(c, "web-2")->weight, 1);
    j = state_json(st);
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(
        text, "{\"pools\":{\"web\":{\"added\":[],\"changed\":[{\"name\":"
              "\"web-1\",\"state\":\"up\",\"weight\":4294967295},{\"name\":"
              "\"web-2\",\"state\":\"drain\",\"weight\":1}],\"removed\":[]}},"
              "\"version\":1}");
    free(text);
    json_decref(j);
    state_destroy(st);
    conf_destroy(c);
}

/* Names an attacker could plant a link at: the old fixed temporary name
 * ("<path>.tmp.<pid>", entry 0) and the usual variants. */
static const char *const planted[] = {".tmp.", ".tmp", ".tmp.0", ".tmp.1",
                                      "~",     ".new", ".swp"};

static void
planted_name(char *buf, size_t len, const char *path, size_t i)
{
    if (i == 0)
        snprintf(buf, len, "%s%s%ld", path, planted[i], (long)getpid());
    else
        snprintf(buf, len, "%s%s", path, planted[i]);
}

static void
test_save_never_follows_a_planted_link(void **unused)
{
    char dir[] = "/tmp/chash-state-XXXXXX", path[256], victim[256];
    char link[300], buf[64], err[256], warn[256];
    struct conf *c = load_conf(yaml);
    struct state *st = state_create(), *st2 = state_create();
    struct state_member m[2] = {
        {"web-1", "127.0.0.1:9001", 4, STATE_ADMIN_DRAIN, NULL},
        {"web-2", "127.0.0.1:9002", 1, STATE_ADMIN_UP, NULL},
    };
    struct stat sb;
    ssize_t got;
    FILE *f;

    (void)unused;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state.json", dir);
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious\n", f);
    fclose(f);
    for (size_t i = 0; i < ARRAY_SIZE(planted); i++) {
        planted_name(link, sizeof(link), path, i);
        assert_int_equal(symlink(victim, link), 0);
    }
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_int_equal(state_record(st, "web", m, 2), 0);
    assert_int_equal(state_save(st, path, err, sizeof(err)), 0);

    /* the victim is untouched... */
    f = fopen(victim, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "precious\n");
    /* ...every link is still there, pointing where it did... */
    for (size_t i = 0; i < ARRAY_SIZE(planted); i++) {
        char to[300];

        planted_name(link, sizeof(link), path, i);
        got = readlink(link, to, sizeof(to) - 1);
        assert_true(got > 0);
        to[got] = '\0';
        assert_string_equal(to, victim);
        unlink(link);
    }
    /* ...and the state is a regular file of mode 0644 that loads */
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 0644);
    assert_int_equal(state_load(st2, path, err, sizeof(err)), 0);
    assert_int_equal(state_admin(st2, "web", "web-1"), STATE_ADMIN_DRAIN);
    /* and no temporary file is left behind */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(unlink(victim), 0);
    assert_int_equal(rmdir(dir), 0);
    state_destroy(st);
    state_destroy(st2);
    conf_destroy(c);
}

static char *
dump(json_t *j)
{
    char *text;

    assert_non_null(j);
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return text;
}

static const char delta[] =
    "{\"version\": 1, \"pools\": {\"web\": {"
    "\"added\": [{\"name\": \"web-4\", \"address\": \"127.0.0.1:9004\","
    " \"weight\": 2, \"state\": \"maint\"}],"
    "\"removed\": [\"web-1\"],"
    "\"changed\": [{\"name\": \"web-2\", \"weight\": 5, \"state\": \"drain\"},"
    "              {\"name\": \"web-3\", \"address\": \"127.0.0.1:9013\"},"
    "              {\"name\": \"web-8\", \"weight\": 3}]}}}";

static void
test_overrides_json(void **unused)
{
    struct conf *c = load_conf(yaml);
    struct state *st = state_create();
    char err[256], warn[512], *text;

    (void)unused;
    assert_int_equal(state_load_string(st, "s.json", delta, err, sizeof(err)),
                     0);
    /* before state_apply: the delta as loaded, web-8 included (it is no
     * longer in the config, and state_apply will skip it: it is not an
     * override of anything, so it is not listed either way) */
    text = dump(state_overrides_json(st, c));
    assert_string_equal(
        text,
        "[{\"config\":{\"address\":\"127.0.0.1:9001\",\"weight\":1},"
        "\"member\":\"web-1\",\"pool\":\"web\",\"runtime\":null,"
        "\"what\":\"removed\"},"
        "{\"config\":1,\"member\":\"web-2\",\"pool\":\"web\",\"runtime\":5,"
        "\"what\":\"weight\"},"
        "{\"config\":\"up\",\"member\":\"web-2\",\"pool\":\"web\","
        "\"runtime\":\"drain\",\"what\":\"state\"},"
        "{\"config\":\"127.0.0.1:9003\",\"member\":\"web-3\",\"pool\":\"web\","
        "\"runtime\":\"127.0.0.1:9013\",\"what\":\"address\"},"
        "{\"config\":null,\"member\":\"web-4\",\"pool\":\"web\","
        "\"runtime\":{\"address\":\"127.0.0.1:9004\",\"state\":\"maint\","
        "\"weight\":2},\"what\":\"added\"}]");
    free(text);
    /* after: the same, measured against the servers as written although
     * <c> now holds the runtime's */
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    assert_non_null(strstr(warn, "changed member web-8 is no longer"));
    assert_string_equal(server(c, "web-3")->addr.text, "127.0.0.1:9013");
    text = dump(state_overrides_json(st, c));
    assert_non_null(strstr(text, "{\"config\":\"127.0.0.1:9003\",\"member\":"
                                 "\"web-3\",\"pool\":\"web\",\"runtime\":"
                                 "\"127.0.0.1:9013\",\"what\":\"address\"}"));
    assert_non_null(strstr(text, "\"what\":\"removed\""));
    assert_non_null(strstr(text, "\"what\":\"added\""));
    assert_null(strstr(text, "web-8"));
    free(text);
    /* a pool without changes: nothing */
    assert_int_equal(state_reset(st, "web", NULL), 4);
    text = dump(state_overrides_json(st, c));
    assert_string_equal(text, "[]");
    free(text);
    state_destroy(st);
    conf_destroy(c);
}

static void
test_reset(void **unused)
{
    struct conf *c = load_conf(yaml);
    struct state *st = state_create();
    char err[256], warn[512], *text;

    (void)unused;
    assert_int_equal(state_load_string(st, "s.json", delta, err, sizeof(err)),
                     0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    /* web-1 removed, web-2 and web-3 changed, web-4 added (web-8 skipped) */
    assert_int_equal(state_reset(st, "web", "web-2"), 1);
    assert_int_equal(state_admin(st, "web", "web-2"), STATE_ADMIN_UP);
    assert_int_equal(state_reset(st, "web", "web-2"), 0);
    assert_int_equal(state_reset(st, "web", "nobody"), 0);
    assert_int_equal(state_reset(st, "web", "web-1"), 1);
    assert_int_equal(state_reset(st, "web", "web-4"), 1);
    text = dump(state_json(st));
    assert_string_equal(
        text, "{\"pools\":{\"web\":{\"added\":[],\"changed\":[{\"address\":"
              "\"127.0.0.1:9013\",\"name\":\"web-3\",\"state\":\"up\","
              "\"weight\":1}],\"removed\":[]}},\"version\":1}");
    free(text);
    errno = 0;
    assert_int_equal(state_reset(st, "nope", NULL), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(state_reset(st, "nope", "web-3"), -1);
    assert_int_equal(state_reset(st, "web", NULL), 1);
    assert_int_equal(state_reset(st, "web", NULL), 0);
    text = dump(state_json(st));
    assert_string_equal(text, "{\"pools\":{},\"version\":1}");
    free(text);
    state_destroy(st);
    conf_destroy(c);
}

/* A runtime member the config has since made one of chashd's own
 * addresses is skipped: chashd would connect to itself. */
static void
test_apply_skips_a_member_that_is_chashd_itself(void **unused)
{
    static const char moved[] = "web:\n"
                                "  listen: 127.0.0.1:9004\n"
                                "  mode: tcp\n"
                                "  servers:\n"
                                "    - 127.0.0.1:9001:1 web-1\n"
                                "    - 127.0.0.1:9002:1 web-2\n"
                                "    - 127.0.0.1:9003:1 web-3\n";
    struct conf *c = load_conf(moved);
    struct state *st = state_create();
    char err[256], warn[1024];

    (void)unused;
    assert_int_equal(
        state_load_string(
            st, "s.json",
            "{\"version\": 1, \"pools\": {\"web\": {"
            "\"added\": [{\"name\": \"web-4\", \"address\": \"127.0.0.1:9004\","
            " \"weight\": 1}],"
            "\"changed\": [{\"name\": \"web-3\", \"address\": "
            "\"localhost:8404\"}]}}}",
            err, sizeof(err)),
        0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    if (strstr(warn, "pool web: added member web-4: address 127.0.0.1:9004 "
                     "is now chashd's own, the listen address of pool 'web' "
                     "(127.0.0.1:9004)") == NULL ||
        strstr(warn,
               "pool web: member web-3: address localhost:8404 is now "
               "chashd's own, the admin address (127.0.0.1:8404)") == NULL)
        fail_msg("warning: '%s'", warn);
    assert_null(server(c, "web-4"));
    assert_string_equal(server(c, "web-3")->addr.text, "127.0.0.1:9003");
    state_destroy(st);
    conf_destroy(c);
}

/* A delta that would take the ring over the pool's max_points is
 * dropped, like one that breaks the algorithm's limits. */
static void
test_a_delta_over_max_points_is_dropped(void **unused)
{
    static const char small[] = "web:\n"
                                "  listen: 127.0.0.1:18080\n"
                                "  mode: tcp\n"
                                "  max_points: 1000\n"
                                "  servers:\n"
                                "    - 127.0.0.1:9001:1 web-1\n"
                                "    - 127.0.0.1:9002:1 web-2\n"
                                "    - 127.0.0.1:9003:1 web-3\n";
    struct conf *c = load_conf(small);
    struct state *st = state_create();
    char err[256], warn[1024];

    (void)unused;
    assert_int_equal(
        state_load_string(st, "s.json",
                          "{\"version\": 1, \"pools\": {\"web\": {\"changed\": "
                          "[{\"name\": \"web-1\", \"weight\": 5}]}}}",
                          err, sizeof(err)),
        0);
    assert_int_equal(state_apply(st, c, warn, sizeof(warn)), 0);
    if (strstr(warn, "pool web: its runtime changes do not fit the config "
                     "(1120 ring points, over max_points 1000); they are "
                     "dropped") == NULL)
        fail_msg("warning: '%s'", warn);
    assert_int_equal(server(c, "web-1")->weight, 1);
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
        cmocka_unit_test(test_migration_round_trips),
        cmocka_unit_test(test_heavy_config_member_round_trips),
        cmocka_unit_test(test_a_delta_that_no_longer_fits_the_ring_is_dropped),
        cmocka_unit_test(test_weight_uint32_max_is_applied),
        cmocka_unit_test(test_save_never_follows_a_planted_link),
        cmocka_unit_test(test_overrides_json),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_apply_skips_a_member_that_is_chashd_itself),
        cmocka_unit_test(test_a_delta_over_max_points_is_dropped),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

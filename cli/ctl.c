/* ctl.c -- `chash ctl`: drive a running chashd through its admin API: list
 * pools, show members, add/remove/reweight/drain members with their
 * migration report, look keys up. The command line and a table of
 * subcommands, one function each; the HTTP client is ctl_http.c, the
 * tables ctl_print.c.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"
#include "ctl_int.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "util.h"

static const char usage_text[] =
    "usage: chash ctl [--admin HOST:PORT] [--token T] [--json] COMMAND\n"
    "commands:\n"
    "  pools                                 list the pools\n"
    "  show POOL                             a pool's settings and members;\n"
    "                                        in the request modes (redis)\n"
    "                                        also their requests, errors,\n"
    "                                        latency and bytes\n"
    "  add POOL NAME ADDRESS [--weight W] [--force] [--dry-run]\n"
    "                                        add a member; in a migration:\n"
    "                                        copy pool --force flushes a\n"
    "                                        joining member that holds keys\n"
    "  remove POOL NAME [--now] [--dry-run]  remove a member; --now: at once,\n"
    "                                        its keys are not moved off it\n"
    "                                        (migration: copy)\n"
    "  weight POOL NAME W [--dry-run]        change a member's weight\n"
    "  reweight POOL NAME W [--dry-run]      the same as weight\n"
    "  drain POOL NAME [--dry-run]           no new keys to the member\n"
    "  up POOL NAME [--dry-run]              back in the ring\n"
    "  maint POOL NAME [--dry-run]           out of the ring, not checked\n"
    "    In a redis or memcache pool that does not move data (migration:\n"
    "    off, replicas: 1) a key whose owner changes stays on its old\n"
    "    member, out of reach: each change above (and batch, rebalance,\n"
    "    state --reset) says how much of the keyspace it hides, and is\n"
    "    refused unless given --force.\n"
    "  lookup POOL KEY [--replicas N]        the member(s) owning KEY\n"
    "  migration POOL                        the live migration of a pool:\n"
    "                                        phase, keys moved, rate, ETA,\n"
    "                                        progress per source, and the\n"
    "                                        last finished one\n"
    "  migration POOL --give-up NAME         stop waiting for a dead old\n"
    "                                        owner: its keys not moved yet\n"
    "                                        are lost\n"
    "  replication POOL                      a replicated pool: quorums,\n"
    "                                        repairs, divergences, and per\n"
    "                                        member whether it serves reads\n"
    "                                        and the keys it still misses\n"
    "  batch POOL FILE [--dry-run]           several changes as one etcd\n"
    "                                        transaction (members_from:\n"
    "                                        etcd); FILE ('-': stdin) holds\n"
    "                                        {\"changes\": [{\"op\": \"add\",\n"
    "                                        \"name\", \"address\", "
    "\"weight\"},\n"
    "                                        {\"op\": \"remove\", \"name\"},\n"
    "                                        {\"op\": \"update\", \"name\",\n"
    "                                        \"weight\", \"state\"}]}\n"
    "  rebalance POOL [--target R] [--dry-run]\n"
    "                                        weights that bring every\n"
    "                                        member's measured load within\n"
    "                                        R (default 1.2) of its share,\n"
    "                                        with the migration report of\n"
    "                                        them all; without --dry-run\n"
    "                                        applied one member at a time\n"
    "                                        (each change through slow\n"
    "                                        start or its migration)\n"
    "  hot POOL                              the pool's hottest keys\n"
    "                                        (requests/s, the member of\n"
    "                                        each) and each member's rate\n"
    "                                        against its share of the ring\n"
    "  cluster                               the chashd instances sharing\n"
    "                                        pools through etcd: whether\n"
    "                                        their rings agree, and how long\n"
    "                                        the last change took to reach\n"
    "                                        all of them\n"
    "  state                                 the runtime overrides of the\n"
    "                                        config (kept in the state file)\n"
    "  state --reset POOL [NAME] [--dry-run] drop the overrides of a pool or\n"
    "                                        of one member (back to the\n"
    "                                        config file)\n"
    "options:\n"
    "  --admin HOST:PORT  the admin API (default $CHASH_ADMIN or "
    "127.0.0.1:8404)\n"
    "  --token T          bearer token (default $CHASH_TOKEN)\n"
    "  --json             print the API's JSON instead of tables\n"
    "  --force            apply a change that leaves keys unreachable (a\n"
    "                     pool that does not move data; see above)\n"
    "Each change prints its migration report. Exit: 0 done, 1 the API or the\n"
    "connection failed (its error is printed), 2 bad arguments.\n";

/* ---- helpers ------------------------------------------------------------ */

/* After cli_parse_*() printed what is wrong: the usage, exit 2. */
static int
usage_after_error(void)
{
    fputs(usage_text, stderr);
    return CLI_EXIT_USAGE;
}

static int
need(int have, int want, const char *cmd)
{
    if (have != want)
        return cli_usage_error(CMD, usage_text,
                               "'%s' takes %d argument%s, got %d", cmd, want,
                               want == 1 ? "" : "s", have);
    return 0;
}

/* A change: <method> on <path> (which may carry a query already) with
 * <body>, report printed as <what>; <pool> (as typed) names the pool in
 * the report's hints. */
static int
change(const struct ctl *c, const char *method, const char *path, json_t *body,
       const char *what, const char *pool)
{
    char full[2700];
    int ex;
    json_t *r;

    snprintf(full, sizeof(full), "%s%s", path,
             !c->dry_run                 ? ""
             : strchr(path, '?') != NULL ? "&dry_run=1"
                                         : "?dry_run=1");
    r = ctl_call_change(c, method, full, body, what, pool, &ex);
    json_decref(body);
    if (r == NULL)
        return ex;
    if (!c->json)
        ctl_print_report(r, what, pool);
    json_decref(r);
    return CLI_EXIT_OK;
}

/* Apply a rebalance proposal: one weight change per member, in turn;
 * in a pool that moves data, each waits for the migration the last one
 * started (bounded: an hour each). */
static int
rebalance_apply(const struct ctl *c, const char *pool, const char *label,
                json_t *j)
{
    json_t *m;
    size_t i;
    int ex = CLI_EXIT_OK;

    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        char name[800], path[2600], what[1024];
        long long w = ctl_num(m, "new_weight");
        json_t *r, *body;

        if (w == ctl_num(m, "weight"))
            continue;
        ctl_url_escape(ctl_str(m, "name"), name, sizeof(name));
        snprintf(path, sizeof(path), "/api/pools/%s/members/%s", pool, name);
        snprintf(what, sizeof(what), "pool %s: weight of %s -> %lld", label,
                 ctl_str(m, "name"), w);
        body = ctl_forced(c, json_pack("{s:I}", "weight", (json_int_t)w));
        r = ctl_call_change(c, "PATCH", path, body, what, label, &ex);
        json_decref(body);
        if (r == NULL)
            return ex;
        if (!c->json)
            ctl_print_report(r, what, label);
        if (json_is_object(json_object_get(r, "migration"))) {
            char mpath[2600];
            int waited = 0;

            snprintf(mpath, sizeof(mpath), "/api/pools/%s/migration", pool);
            for (;;) {
                json_t *mg = ctl_call(c, "GET", mpath, NULL, &ex);
                bool active = json_is_true(json_object_get(mg, "active"));

                json_decref(mg);
                if (mg == NULL) {
                    json_decref(r);
                    return ex;
                }
                if (!active)
                    break;
                if (++waited > 7200) {
                    fprintf(stderr,
                            "chash ctl: the migration of %s did not end in "
                            "an hour: the rest of the proposal is not "
                            "applied\n",
                            ctl_str(m, "name"));
                    json_decref(r);
                    return CLI_EXIT_FAIL;
                }
                usleep(500000);
            }
        }
        json_decref(r);
    }
    return ex;
}

/* ---- the subcommands ----------------------------------------------------- */

/* `pools`, `cluster`, `hot POOL`, `show POOL`, `replication POOL` and
 * `lookup POOL KEY` read one answer and print it. */
static int
run_pools(const struct ctl *c)
{
    int ex;
    json_t *j = ctl_call(c, "GET", "/api/pools", NULL, &ex);

    if (j != NULL && !c->json)
        ctl_print_pools(j);
    json_decref(j);
    return ex;
}

static int
run_cluster(const struct ctl *c)
{
    int ex;
    json_t *j = ctl_call(c, "GET", "/api/cluster", NULL, &ex);

    if (j != NULL && !c->json)
        ctl_print_cluster(j);
    json_decref(j);
    return ex;
}

static int
run_hot(const struct ctl *c)
{
    char path[2600];
    json_t *j;
    int ex;

    snprintf(path, sizeof(path), "/api/pools/%s/hot", c->pool);
    j = ctl_call(c, "GET", path, NULL, &ex);
    if (j != NULL && !c->json)
        ctl_print_hot(j);
    json_decref(j);
    return ex;
}

static int
run_show(const struct ctl *c)
{
    char path[2600];
    json_t *j;
    int ex;

    snprintf(path, sizeof(path), "/api/pools/%s", c->pool);
    j = ctl_call(c, "GET", path, NULL, &ex);
    if (j != NULL && !c->json)
        ctl_print_pool(c, j);
    json_decref(j);
    return ex;
}

static int
run_replication(const struct ctl *c)
{
    char path[2600];
    json_t *j;
    int ex;

    snprintf(path, sizeof(path), "/api/pools/%s/replication", c->pool);
    j = ctl_call(c, "GET", path, NULL, &ex);
    if (j != NULL && !c->json) {
        printf("pool %s: ", c->args[0]);
        ctl_print_replication(j);
    }
    json_decref(j);
    return ex;
}

static int
run_lookup(const struct ctl *c)
{
    char key[800], path[2600];
    json_t *j;
    int ex;

    ctl_url_escape(c->args[1], key, sizeof(key));
    snprintf(path, sizeof(path), "/api/pools/%s/lookup?key=%s&replicas=%u",
             c->pool, key, c->have_replicas ? c->replicas : 1);
    j = ctl_call(c, "GET", path, NULL, &ex);
    if (j != NULL && !c->json)
        ctl_print_lookup(j);
    json_decref(j);
    return ex;
}

/* `rebalance POOL`: the proposal, then (without --dry-run) applied. */
static int
run_rebalance(const struct ctl *c)
{
    char path[2600];
    json_t *j;
    int ex;

    snprintf(path, sizeof(path), "/api/pools/%s/rebalance?target=%s", c->pool,
             c->target ? c->target : "1.2");
    j = ctl_call(c, "GET", path, NULL, &ex);
    if (j != NULL && !c->json)
        ctl_print_rebalance(j);
    if (j != NULL && !c->dry_run)
        ex = rebalance_apply(c, c->pool, c->args[0], j);
    json_decref(j);
    return ex;
}

/* `migration POOL [--give-up NAME]`: the live migration, or giving up on
 * one of its sources. */
static int
run_migration(const struct ctl *c)
{
    char path[2600], name[800];
    json_t *j;
    int ex;

    if (c->give_up == NULL) {
        snprintf(path, sizeof(path), "/api/pools/%s/migration", c->pool);
        j = ctl_call(c, "GET", path, NULL, &ex);
    } else {
        /* the answer is the migration as it is after giving up */
        ctl_url_escape(c->give_up, name, sizeof(name));
        snprintf(path, sizeof(path), "/api/pools/%s/migration/sources/%s",
                 c->pool, name);
        j = ctl_call(c, "DELETE", path, NULL, &ex);
        if (j != NULL && !c->json)
            printf("pool %s: gave up moving keys from %s: those not "
                   "moved yet are lost; their new owners serve them\n\n",
                   c->args[0], c->give_up);
    }
    if (j != NULL && !c->json)
        ctl_print_migration(j);
    json_decref(j);
    return ex;
}

/* `add POOL NAME ADDRESS [--weight W]`. */
static int
run_add(const struct ctl *c)
{
    char path[2600], what[1024];
    uint32_t w = c->have_weight ? c->weight : 1;
    json_t *j;

    snprintf(path, sizeof(path), "/api/pools/%s/members", c->pool);
    snprintf(what, sizeof(what), "pool %s: add %s (%s, weight %u)", c->args[0],
             c->args[1], c->args[2], w);
    j = json_pack("{s:s,s:s,s:i}", "name", c->args[1], "address", c->args[2],
                  "weight", (int)w);
    /* JSON holds UTF-8 text only: without this the request went out with
     * no body and the API's answer did not say what was wrong. */
    if (j == NULL)
        return cli_usage_error(CMD, usage_text,
                               "NAME and ADDRESS must be UTF-8 text");
    return change(c, "POST", path, ctl_forced(c, j), what, c->args[0]);
}

/* `remove POOL NAME [--now]`. */
static int
run_remove(const struct ctl *c)
{
    char path[2600], what[1024];

    snprintf(path, sizeof(path), "/api/pools/%s/members/%s%s", c->pool, c->name,
             c->now ? "?now=true" : "");
    snprintf(what, sizeof(what), "pool %s: remove %s%s", c->args[0], c->args[1],
             c->now ? " now, its keys not moved" : "");
    return change(c, "DELETE", path, ctl_forced(c, NULL), what, c->args[0]);
}

/* `weight POOL NAME W` (and `reweight`, the word HAProxy and most
 * operators use for it). */
static int
run_weight(const struct ctl *c)
{
    char path[2600], what[1024];
    uint32_t w;

    if (cli_parse_u32(CMD, "W", c->args[2], 0, 1000000, &w) != 0)
        return usage_after_error();
    snprintf(path, sizeof(path), "/api/pools/%s/members/%s", c->pool, c->name);
    snprintf(what, sizeof(what), "pool %s: weight of %s -> %u", c->args[0],
             c->args[1], w);
    return change(c, "PATCH", path,
                  ctl_forced(c, json_pack("{s:i}", "weight", (int)w)), what,
                  c->args[0]);
}

/* `drain`, `up` and `maint POOL NAME`: the verb is the state. */
static int
run_admin_state(const struct ctl *c)
{
    char path[2600], what[1024];

    snprintf(path, sizeof(path), "/api/pools/%s/members/%s", c->pool, c->name);
    snprintf(what, sizeof(what), "pool %s: %s %s", c->args[0], c->verb,
             c->args[1]);
    return change(c, "PATCH", path,
                  ctl_forced(c, json_pack("{s:s}", "state", c->verb)), what,
                  c->args[0]);
}

/*
 * `state`: the runtime overrides; `state --reset POOL [NAME]`: drop those
 * of a pool (it returns to its config's membership) or of one member,
 * with the migration report of going back.
 */
static int
run_state(const struct ctl *c)
{
    char path[2600], what[1024];
    json_t *j;
    int ex;

    if (!c->reset) {
        if (c->nargs != 0)
            return cli_usage_error(CMD, usage_text,
                                   "'state' takes no argument (to drop "
                                   "overrides: state --reset POOL [NAME])");
        j = ctl_call(c, "GET", "/api/state", NULL, &ex);
        if (j != NULL && !c->json && ctl_print_state(j) != 0)
            ex = CLI_EXIT_FAIL;
        json_decref(j);
        return ex;
    }
    if (c->nargs < 1 || c->nargs > 2)
        return cli_usage_error(CMD, usage_text,
                               "'state --reset' takes POOL and an optional "
                               "NAME, got %d argument%s",
                               c->nargs, c->nargs == 1 ? "" : "s");
    if (c->nargs == 1) {
        snprintf(path, sizeof(path), "/api/state/pools/%s", c->pool);
        snprintf(what, sizeof(what), "pool %s: reset to its config",
                 c->args[0]);
    } else {
        snprintf(path, sizeof(path), "/api/state/pools/%s/members/%s", c->pool,
                 c->name);
        snprintf(what, sizeof(what), "pool %s: reset %s to its config",
                 c->args[0], c->args[1]);
    }
    return change(c, "DELETE", path, ctl_forced(c, NULL), what, c->args[0]);
}

/* `batch POOL FILE`: FILE ('-': stdin) holds {"changes": [...]}. */
static int
run_batch(const struct ctl *c)
{
    const char *file = c->args[1];
    char path[2600], what[1024];
    json_error_t jerr;
    json_t *body;

    body = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &jerr)
                                  : json_load_file(file, 0, &jerr);
    if (body == NULL) {
        fprintf(stderr, "chash ctl: %s:%d: %s\n",
                strcmp(file, "-") == 0 ? "stdin" : file, jerr.line, jerr.text);
        return CLI_EXIT_USAGE;
    }
    body = ctl_forced(c, body);
    snprintf(path, sizeof(path), "/api/pools/%s/changes", c->pool);
    snprintf(what, sizeof(what),
             "pool %s: %zu changes in one etcd "
             "transaction",
             c->args[0], json_array_size(json_object_get(body, "changes")));
    return change(c, "POST", path, body, what, c->args[0]);
}

/* ---- the table ----------------------------------------------------------- */

/* What a subcommand is, for the options that go with some only. */
#define CTL_READ 0x01         /* reads only: --dry-run does not go with it */
#define CTL_CHANGE 0x02       /* changes members: --force, --dry-run go */
#define CTL_RESET 0x04        /* a change with --reset, a read without */
#define CTL_OPT_WEIGHT 0x08   /* takes --weight */
#define CTL_OPT_REPLICAS 0x10 /* takes --replicas */
#define CTL_OPT_GIVE_UP 0x20  /* takes --give-up */
#define CTL_OPT_NOW 0x40      /* takes --now */
#define CTL_OPT_TARGET 0x80   /* takes --target */

struct ctl_command {
    const char *verb;
    int nargs; /* how many it takes, or -1: it checks them itself */
    unsigned flags;
    int (*run)(const struct ctl *c);
};

static const struct ctl_command commands[] = {
    {"pools", 0, CTL_READ, run_pools},
    {"cluster", 0, CTL_READ, run_cluster},
    {"rebalance", 1, CTL_CHANGE | CTL_OPT_TARGET, run_rebalance},
    {"hot", 1, CTL_READ, run_hot},
    {"show", 1, CTL_READ, run_show},
    {"migration", 1, CTL_READ | CTL_OPT_GIVE_UP, run_migration},
    {"replication", 1, CTL_READ, run_replication},
    {"lookup", 2, CTL_READ | CTL_OPT_REPLICAS, run_lookup},
    {"add", 3, CTL_CHANGE | CTL_OPT_WEIGHT, run_add},
    {"remove", 2, CTL_CHANGE | CTL_OPT_NOW, run_remove},
    {"weight", 3, CTL_CHANGE, run_weight},
    {"reweight", 3, CTL_CHANGE, run_weight},
    {"drain", 2, CTL_CHANGE, run_admin_state},
    {"up", 2, CTL_CHANGE, run_admin_state},
    {"maint", 2, CTL_CHANGE, run_admin_state},
    {"state", -1, CTL_RESET, run_state},
    {"batch", 2, CTL_CHANGE, run_batch},
};

static const struct ctl_command *
command_find(const char *verb)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].verb, verb) == 0)
            return &commands[i];
    return NULL;
}

/* Whether <cmd> (NULL: an unknown one) has one of <flags>; CTL_RESET
 * counts as CTL_CHANGE with --reset (<reset>) and as CTL_READ without. */
static bool
command_is(const struct ctl_command *cmd, unsigned flags, bool reset)
{
    unsigned f;

    if (cmd == NULL)
        return false;
    f = cmd->flags;
    if (f & CTL_RESET)
        f |= reset ? CTL_CHANGE : CTL_READ;
    return (f & flags) != 0;
}

/* ---- the command line ---------------------------------------------------- */

/* One option <opt> (getopt_long's answer) into <c>: -1 to go on, or the
 * exit code. */
static int
parse_option(int opt, char **argv, struct ctl *c)
{
    char *end;
    double t;

    switch (opt) {
    case 'a':
        c->admin = optarg;
        return -1;
    case 't':
        c->token = optarg;
        return -1;
    case 'j':
        c->json = true;
        return -1;
    case 'n':
        c->dry_run = true;
        return -1;
    case 'w':
        if (cli_parse_u32(CMD, "--weight", optarg, 0, 1000000, &c->weight) != 0)
            return usage_after_error();
        c->have_weight = true;
        return -1;
    case 'r':
        if (cli_parse_u32(CMD, "--replicas", optarg, 1, 64, &c->replicas) != 0)
            return usage_after_error();
        c->have_replicas = true;
        return -1;
    case 'R':
        c->reset = true;
        return -1;
    case 'f':
        c->force = true;
        return -1;
    case 'N':
        c->now = true;
        return -1;
    case 'G':
        c->give_up = optarg;
        return -1;
    case 'T':
        t = strtod(optarg, &end);
        if (*end != '\0' || end == optarg || !(t >= 1.0) || t > 100)
            return cli_usage_error(CMD, usage_text,
                                   "--target takes a load ratio from 1 "
                                   "to 100, not '%s'",
                                   optarg);
        c->target = optarg;
        return -1;
    case 'h':
        fputs(usage_text, stdout);
        return CLI_EXIT_OK;
    default:
        return cli_bad_option(CMD, usage_text, argv, opt);
    }
}

/* The options into <c> (after the environment's defaults): -1 to go on,
 * or the exit code. */
static int
parse_options(int argc, char **argv, struct ctl *c)
{
    static const struct option opts[] = {
        {"admin", required_argument, NULL, 'a'},
        {"token", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"weight", required_argument, NULL, 'w'},
        {"dry-run", no_argument, NULL, 'n'},
        {"replicas", required_argument, NULL, 'r'},
        {"reset", no_argument, NULL, 'R'},
        {"force", no_argument, NULL, 'f'},
        {"now", no_argument, NULL, 'N'},
        {"give-up", required_argument, NULL, 'G'},
        {"target", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt, rc;

    c->admin = getenv("CHASH_ADMIN") ? getenv("CHASH_ADMIN") : "127.0.0.1:8404";
    c->token = getenv("CHASH_TOKEN");
    if (c->token != NULL && c->token[0] == '\0')
        c->token = NULL;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":a:t:jw:nr:RfNG:T:h", opts, NULL)) !=
           -1)
        if ((rc = parse_option(opt, argv, c)) >= 0)
            return rc;
    return -1;
}

/* The options that go with some subcommands only, against <cmd> (NULL:
 * an unknown verb, refused later): 0, or the exit code. */
static int
check_options(const struct ctl *c, const struct ctl_command *cmd)
{
    if (c->have_weight && !command_is(cmd, CTL_OPT_WEIGHT, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--weight goes with 'add' (use 'weight POOL "
                               "NAME W' to change one)");
    if (c->have_replicas && !command_is(cmd, CTL_OPT_REPLICAS, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--replicas goes with 'lookup'");
    if (c->reset && !command_is(cmd, CTL_RESET, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--reset goes with 'state' (state --reset "
                               "POOL [NAME])");
    if (c->force && !command_is(cmd, CTL_CHANGE, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--force goes with a change: add, remove, "
                               "weight, drain, up, maint, batch, rebalance "
                               "or state --reset");
    if (c->give_up != NULL && !command_is(cmd, CTL_OPT_GIVE_UP, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--give-up goes with 'migration' (migration "
                               "POOL --give-up NAME)");
    if (c->give_up != NULL && strlen(c->give_up) > 255)
        return cli_usage_error(CMD, usage_text,
                               "--give-up's NAME is longer than 255 bytes");
    if (c->now && !command_is(cmd, CTL_OPT_NOW, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--now goes with 'remove' (it removes a "
                               "member without moving its keys)");
    if (c->target != NULL && !command_is(cmd, CTL_OPT_TARGET, c->reset))
        return cli_usage_error(CMD, usage_text,
                               "--target goes with 'rebalance'");
    if (c->dry_run && command_is(cmd, CTL_READ, c->reset))
        return cli_usage_error(CMD, usage_text, "--dry-run goes with a change");
    return 0;
}

int
cmd_ctl(int argc, char **argv)
{
    struct ctl c = {0};
    const struct ctl_command *cmd;
    int rc;

    if ((rc = parse_options(argc, argv, &c)) >= 0)
        return rc;
    if (optind >= argc)
        return cli_usage_error(CMD, usage_text, "a command is needed");
    /* The token goes into a header line: a CR or LF in it would end the
     * line and write headers of its own. */
    for (const char *t = c.token; t != NULL && *t != '\0'; t++)
        if ((unsigned char)*t < ' ' || *t == 0x7f)
            return cli_usage_error(CMD, usage_text,
                                   "the token contains a control character");
    c.verb = argv[optind];
    c.args = argv + optind + 1;
    c.nargs = argc - optind - 1;
    cmd = command_find(c.verb);
    if ((rc = check_options(&c, cmd)) != 0)
        return rc;
    for (int i = 0; i < c.nargs; i++)
        if (strlen(c.args[i]) > 255)
            return cli_usage_error(
                CMD, usage_text, "argument %d is longer than 255 bytes", i + 1);
    if (c.nargs >= 1)
        ctl_url_escape(c.args[0], c.pool, sizeof(c.pool));
    if (c.nargs >= 2)
        ctl_url_escape(c.args[1], c.name, sizeof(c.name));
    if (cmd == NULL)
        return cli_usage_error(CMD, usage_text, "unknown command '%s'", c.verb);
    if (cmd->nargs >= 0 && (rc = need(c.nargs, cmd->nargs, c.verb)) != 0)
        return rc;
    return cmd->run(&c);
}

/* membership_reload.c -- a reload as a membership change: the state
 * file's delta applied to a config being loaded and committed once the
 * pools run it, the ring models saved before and compared after (logged,
 * in the change log, with their report), and etcd's records reported the
 * same way (membership_model_take/_report).
 * Part of control/membership (membership.c); shared with its parts in
 * membership_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/membership_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "conf/conf.h"
#include "control/migration.h"
#include "loop/builder.h"
#include "model/pool.h"
#include "model/state.h"

/*
 * A reload is a membership change too: the ring model of every pool is
 * saved when it starts (membership_state_apply) and compared once it is
 * applied (membership_state_settle, in the same control-loop callback).
 */
struct saved_model {
    char *pool;
    struct chash_config cfg;
    struct chash_member *m; /* names owned */
    size_t n;
};

static struct saved_model *saved; /* before a reload */
static size_t nsaved;
static char *pending_file; /* the pending state's state_file */
/* The config a reload is applying (the one the pools run is
 * membership_shared.running_conf). */
static const struct conf *pending_conf;

/* ---- reloads ------------------------------------------------------------- */

/* The model of pool <p> now, in <sm> (names owned, ramps at 1). 0 or
 * -1. */
static int
saved_one(struct pool *p, struct saved_model *sm)
{
    struct model md;

    memset(sm, 0, sizeof(*sm));
    if (membership_model_build(p, NULL, &md) != 0) {
        free(md.m);
        return -1;
    }
    sm->pool = strdup(p->name);
    sm->cfg = p->cfg.ring;
    sm->m = md.m;
    sm->n = md.n;
    for (size_t k = 0; k < md.n; k++) {
        md.m[k].name = strdup(md.m[k].name);
        md.m[k].ramp = 1.0;
    }
    return 0;
}

static void
saved_one_free(struct saved_model *sm)
{
    for (size_t k = 0; k < sm->n; k++)
        free((char *)sm->m[k].name);
    free(sm->m);
    free(sm->pool);
}

static void
saved_free(void)
{
    for (size_t i = 0; i < nsaved; i++)
        saved_one_free(&saved[i]);
    free(saved);
    saved = NULL;
    nsaved = 0;
}

static void
saved_take(void)
{
    saved_free();
    if (pool_count() == 0)
        return;
    saved = calloc(pool_count(), sizeof(*saved));
    if (saved == NULL)
        return; /* the reload is simply not logged as a change */
    for (size_t i = 0; i < pool_count(); i++) {
        if (saved_one(pool_at(i), &saved[nsaved]) != 0) {
            saved_one_free(&saved[nsaved]);
            continue;
        }
        nsaved++;
    }
}

static const struct chash_member *
model_find(const struct chash_member *m, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].name != NULL && strcmp(m[i].name, name) == 0)
            return &m[i];
    return NULL;
}

/* The report of one pool's reload. */
struct reload_report {
    struct report_job rj; /* first: the job's address is ours */
    char pool[128];
    char detail[128]; /* "+web-4 -web-2 ~web-1" */
    char what[128];   /* "reloaded: 3 members (+1 -1, 0 reweighted)" */
    char op[16];      /* "reload", "etcd" */
    int source;       /* enum membership_source */
    bool placing;     /* the ring's algorithm or hash changed too */
};

/*
 * A reload (or etcd's records) changed the members of pool <p>, which
 * does not move data (membership_pool_hides): say what it left out of reach,
 * with the figure of its report <rep> (NULL, or "moved" null: not comparable).
 * <placing>: the pool also places keys another way now (its algorithm or
 * hash changed). Not refused: the file (or etcd) says what the operator
 * wants; the warning says what it costs.
 */
static void
reload_warn(const struct pool *p, const char *what, const json_t *rep,
            bool placing)
{
    json_t *fig;
    char text[600];

    if (placing) {
        log_warn("pool %s: %s: the pool places keys another way now (its "
                 "algorithm or hash changed): most of the keyspace changes "
                 "owner; its keys stay on their old members and become "
                 "unreachable: this pool does not move data (mode %s, "
                 "migration: off, replicas: 1)",
                 p->name, what, conf_mode_name(p->cfg.mode));
        return;
    }
    fig = json_pack("{s:O?}", "moved", json_object_get(rep, "moved"));
    if (fig == NULL)
        return;
    if (membership_unreachable_report(p, fig, NULL, false)) {
        membership_unreachable_text(p, fig, false, text, sizeof(text));
        log_warn("pool %s: %s: %s", p->name, what, text);
    }
    json_decref(fig);
}

static void
reload_reported(struct report_job *rj)
{
    struct reload_report *rr = (struct reload_report *)rj;
    struct pool *p = pool_find(rr->pool);
    const struct pool_snapshot *snap = p ? pool_snapshot(p) : NULL;
    double moved =
        membership_json_num(json_object_get(rj->report, "moved"), -1);

    if (moved >= 0)
        log_info(
            "pool %s: %s; moved %.6f of the keys (optimal %.6f) "
            "(v%llu)",
            rr->pool, rr->what, moved,
            membership_json_num(json_object_get(rj->report, "optimal"), -1),
            (unsigned long long)(snap ? snap->version : 0));
    else
        log_info("pool %s: %s; moved: not comparable (%s)", rr->pool, rr->what,
                 rj->err[0] ? rj->err : "the algorithm or hash changed");
    if (p != NULL && membership_pool_hides(p))
        reload_warn(p, rr->what, rj->report, rr->placing);
    membership_change_log(rr->pool, "*", rr->op, rr->source, rr->detail,
                          rj->report);
    membership_report_job_free(rj);
}

/*
 * Report what changed in pool <p>'s ring membership since the model <sm>
 * was saved: logged ("<verb>: 3 members (+1 -1, 0 reweighted)") and
 * entered in the change log as <op> by <source>, with the exact report
 * computed on the builder thread. Nothing when nothing changed.
 */
static void
model_compare(struct pool *p, const struct saved_model *sm, const char *op,
              int source, const char *verb)
{
    struct reload_report *rr;
    char detail[128] = "";
    struct model md;
    size_t len = 0, added = 0, removed = 0, reweighted = 0;

    if (membership_model_build(p, NULL, &md) != 0) {
        free(md.m);
        return;
    }
    /* "+added -removed ~reweighted", as far as it fits */
    for (size_t k = 0; k < md.n; k++) {
        const struct chash_member *o = model_find(sm->m, sm->n, md.m[k].name);
        if (o == NULL || o->weight != md.m[k].weight)
            membership_append(detail, sizeof(detail), &len, "%s%c%s",
                              len ? " " : "", o == NULL ? '+' : '~',
                              md.m[k].name);
        added += o == NULL;
        reweighted += o != NULL && o->weight != md.m[k].weight;
        md.m[k].ramp = 1.0;
    }
    for (size_t k = 0; k < sm->n; k++)
        if (model_find(md.m, md.n, sm->m[k].name) == NULL) {
            membership_append(detail, sizeof(detail), &len, "%s-%s",
                              len ? " " : "", sm->m[k].name);
            removed++;
        }
    /* The same members placed another way (algorithm, hash) move keys
     * too: no report (nothing to compare), but a pool that does not move
     * data loses their reach all the same. */
    if (detail[0] == '\0' && membership_pool_hides(p) &&
        memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) != 0)
        reload_warn(p, verb, NULL, true);
    rr = detail[0] != '\0' ? calloc(1, sizeof(*rr)) : NULL;
    if (rr == NULL) {
        free(md.m);
        return;
    }
    snprintf(rr->pool, sizeof(rr->pool), "%s", p->name);
    snprintf(rr->detail, sizeof(rr->detail), "%s", detail);
    snprintf(rr->op, sizeof(rr->op), "%s", op);
    rr->source = source;
    rr->placing = memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) != 0;
    snprintf(rr->what, sizeof(rr->what),
             "%s: %zu members (+%zu -%zu, %zu reweighted)", verb, md.n, added,
             removed, reweighted);
    rr->rj.then = reload_reported;
    if (membership_report_job_init(&rr->rj, p, sm->m, sm->n, md.m, md.n, NULL,
                                   NULL, NULL) != 0 ||
        !membership_pool_comparable(p) ||
        memcmp(&sm->cfg, &p->cfg.ring, sizeof(sm->cfg)) != 0) {
        /* No report: log the change without figures, now. */
        reload_reported(&rr->rj);
    } else {
        builder_submit(&rr->rj.job);
    }
    free(md.m);
}

/* Report each pool whose ring membership the reload changed, from the
 * builder thread (saved models against the pools now). */
static void
saved_compare(void)
{
    for (size_t i = 0; i < nsaved; i++) {
        struct pool *p = pool_find(saved[i].pool ? saved[i].pool : "");

        if (p != NULL)
            model_compare(p, &saved[i], "reload", MEMBERSHIP_RELOAD,
                          "reloaded");
    }
    saved_free();
}

struct membership_model {
    struct saved_model sm;
};

struct membership_model *
membership_model_take(struct pool *p)
{
    struct membership_model *mm = calloc(1, sizeof(*mm));

    if (mm != NULL && saved_one(p, &mm->sm) != 0) {
        saved_one_free(&mm->sm);
        free(mm);
        mm = NULL;
    }
    return mm;
}

void
membership_model_report(struct pool *p, struct membership_model *mm,
                        const char *verb)
{
    if (mm == NULL)
        return;
    model_compare(p, &mm->sm, "etcd", MEMBERSHIP_ETCD, verb);
    saved_one_free(&mm->sm);
    free(mm);
}

/* A copy of <st>'s delta (not its bases), or NULL. */
static struct state *
state_copy(const struct state *st)
{
    struct state *cp = state_create();
    json_t *j = state_json(st);
    char *text = json_dumps(j, JSON_COMPACT);

    json_decref(j);
    if (cp == NULL || text == NULL ||
        state_load_string(cp, "state", text, NULL, 0) != 0) {
        state_destroy(cp);
        cp = NULL;
    }
    free(text);
    return cp;
}

/* The text of an override's value ("3", "drain", "127.0.0.1:9004 weight
 * 2") into <buf>. */
static void
override_value(const json_t *v, char *buf, size_t len)
{
    const char *a = json_string_value(json_object_get(v, "address"));

    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_object(v))
        snprintf(buf, len, "%s weight %lld", a ? a : "?",
                 (long long)json_integer_value(json_object_get(v, "weight")));
    else
        snprintf(buf, len, "-");
}

/*
 * Say, one line per member, where the state file overrides what <conf>
 * writes: an operator who edits a weight in the file and reloads must not
 * wonder why it did not take (`chash ctl state --reset` drops them).
 */
static void
overrides_log(const struct state *st, const struct conf *conf)
{
    json_t *all = state_overrides_json(st, conf);
    size_t i = 0;

    while (all != NULL && i < json_array_size(all)) {
        const json_t *first = json_array_get(all, i);
        const char *pool = json_string_value(json_object_get(first, "pool"));
        const char *member =
            json_string_value(json_object_get(first, "member"));
        char line[1024] = "", cv[300], rv[300];
        size_t len = 0;

        /* the entries of one member are consecutive */
        for (; i < json_array_size(all); i++) {
            const json_t *e = json_array_get(all, i);
            const char *what = json_string_value(json_object_get(e, "what"));

            if (strcmp(json_string_value(json_object_get(e, "pool")), pool) ||
                strcmp(json_string_value(json_object_get(e, "member")), member))
                break;
            override_value(json_object_get(e, "config"), cv, sizeof(cv));
            override_value(json_object_get(e, "runtime"), rv, sizeof(rv));
            if (strcmp(what, "added") == 0)
                membership_append(line, sizeof(line), &len,
                                  "%sadded at run time (%s), not in the config",
                                  len ? "; " : "", rv);
            else if (strcmp(what, "removed") == 0)
                membership_append(
                    line, sizeof(line), &len,
                    "%sremoved at run time, the config has it (%s)",
                    len ? "; " : "", cv);
            else
                membership_append(line, sizeof(line), &len,
                                  "%s%s %s in the config, %s at run time",
                                  len ? "; " : "", what, cv, rv);
        }
        log_warn("pool %s: member %s: the state file overrides the config: "
                 "%s (chash ctl state --reset %s %s drops it)",
                 pool, member, line, pool, member);
    }
    json_decref(all);
}

/*
 * The delta is applied to a COPY of the state (<pending>), committed by
 * membership_state_settle() once the pools run the new config: a reload
 * refused after this call (a listener that cannot bind) must leave the
 * running state, whose bases are the running config's servers, untouched.
 */
int
membership_state_apply(struct conf *conf, char *err, size_t errlen)
{
    struct state *next;
    char warn[2048];

    if (membership_shared.state == NULL) {
        membership_shared.state = state_create();
        if (membership_shared.state == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (!membership_shared.state_loaded && conf->state_file != NULL) {
        if (state_load(membership_shared.state, conf->state_file, err,
                       errlen) != 0)
            return -1;
        membership_shared.state_loaded = true;
    }
    next = state_copy(membership_shared.state);
    if (next == NULL) {
        snprintf(err, errlen, "state: out of memory");
        return -1;
    }
    if (state_apply(next, conf, warn, sizeof(warn)) != 0) {
        snprintf(err, errlen, "state: %s", strerror(errno));
        state_destroy(next);
        return -1;
    }
    if (warn[0] != '\0')
        log_warn("state %s: %s",
                 conf->state_file ? conf->state_file : "(memory)", warn);
    overrides_log(next, conf);
    state_destroy(membership_shared.pending);
    membership_shared.pending = next;
    pending_conf = conf;
    saved_take();
    free(pending_file);
    pending_file = conf->state_file ? strdup(conf->state_file) : NULL;
    return 0;
}

void
membership_state_abandon(void)
{
    state_destroy(membership_shared.pending);
    membership_shared.pending = NULL;
    pending_conf = NULL;
    free(pending_file);
    pending_file = NULL;
    saved_free();
}

void
membership_state_settle(void (*then)(void *arg), void *arg)
{
    bool committed = false;

    if (membership_shared.pending != NULL) {
        state_destroy(membership_shared.state);
        membership_shared.state = membership_shared.pending;
        membership_shared.pending = NULL;
        free(membership_shared.state_file);
        membership_shared.state_file = pending_file;
        pending_file = NULL;
        membership_shared.running_conf = pending_conf;
        pending_conf = NULL;
        committed = true;
    }
    for (size_t i = 0; membership_shared.state != NULL && i < pool_count();
         i++) {
        struct pool *p = pool_at(i);

        if (p->cfg.members_from == CONF_MEMBERS_ETCD)
            continue; /* the admin states are etcd's */
        for (size_t k = 0; k < p->nservers; k++) {
            struct server *s = p->servers[k];
            int want = state_admin(membership_shared.state, p->name, s->name);

            /* scale-in of a reload: drained until its keys have moved */
            if (migration_is_leaving(p, s->name))
                want = STATE_ADMIN_DRAIN;

            if (membership_server_member(s) && s->admin != want &&
                pool_member_set_admin(p, s->name, want) != 0)
                log_warn("state: pool %s member %s: cannot set %s: %s", p->name,
                         s->name, state_admin_name(want), strerror(errno));
        }
    }
    if (committed)
        saved_compare();
    for (size_t i = 0; membership_shared.state != NULL && i < pool_count();
         i++) {
        char warn[512];

        /* a reload's migration: its members (the leaving ones too) are
         * kept, so that a restart finds them to resume */
        if (migration_active(pool_at(i)))
            membership_state_persist(pool_at(i), warn, sizeof(warn));
    }
    if (then != NULL)
        membership_after_jobs(then, arg);
}

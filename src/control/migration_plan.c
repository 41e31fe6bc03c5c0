/* migration_plan.c -- the look at a change before it is applied
 * (migration.h): the probe of a change's members (their key counts,
 * blocking, on the builder thread) and what a reload of a pool that
 * copies must move, or why it is refused.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/migration_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "loop/rconn.h"
#include "model/pool.h"
#include "model/state.h"

/* ---- the probe ----------------------------------------------------------- */

void
migration_probe(struct migration_probe *pr)
{
    struct rconn c = {.fd = -1};

    pr->why[0] = '\0';
    for (size_t i = 0; i < pr->n; i++) {
        struct conf_addr a = {0};
        char err[256];
        struct rval v;

        pr->keys[i] = -1;
        if (conf_parse_addr(pr->addresses[i], &a, err, sizeof(err)) != 0) {
            if (pr->why[0] == '\0')
                snprintf(pr->why, sizeof(pr->why), "%s", err);
            continue;
        }
        if (rc_open(&c, &a, pr->timeout_ms, pr->auth, pr->db, err,
                    sizeof(err)) != 0) {
            if (pr->why[0] == '\0')
                snprintf(pr->why, sizeof(pr->why), "%s", err);
            conf_addr_deinit(&a);
            continue;
        }
        if ((int)i == pr->flush) {
            const char *argv[] = {"FLUSHDB"};

            if (rc_cmd(&c, 1, argv, NULL) < 0 || rc_call(&c, &v) < 0 ||
                v.type == '-') {
                if (pr->why[0] == '\0')
                    snprintf(pr->why, sizeof(pr->why), "FLUSHDB on %s: %s",
                             pr->addresses[i],
                             v.type == '-' ? v.s : "no answer");
                rval_free(&v);
                rc_close(&c);
                conf_addr_deinit(&a);
                continue;
            }
            rval_free(&v);
        }
        {
            const char *argv[] = {"DBSIZE"};

            if (rc_cmd(&c, 1, argv, NULL) == 0 && rc_call(&c, &v) == 0 &&
                v.type == ':')
                pr->keys[i] = v.i;
            else if (pr->why[0] == '\0')
                snprintf(pr->why, sizeof(pr->why), "DBSIZE on %s: %s",
                         pr->addresses[i], v.type == '-' ? v.s : "no answer");
            rval_free(&v);
        }
        rc_close(&c);
        conf_addr_deinit(&a);
    }
    rc_free(&c);
}

/* ---- reloads ------------------------------------------------------------- */

/* Member <name> of <p> in its placement (a member, admin up, weight > 0). */
static const struct server *
placed(const struct pool *p, const char *name)
{
    const struct server *s = pool_server_find(p, name);

    if (s == NULL || atomic_load(&s->state) == SERVER_REMOVED ||
        s->admin != STATE_ADMIN_UP || s->weight == 0)
        return NULL;
    return s;
}

/* A reload of a warm-up pool: 1 when its placement changes (members
 * added, removed or reweighted), else 0. */
static int
warmup_plan(const struct pool *p, const struct conf_pool *cp,
            struct migration_plan *pl)
{
    for (size_t i = 0; i < cp->nservers && !pl->change; i++) {
        const struct conf_server *cs = &cp->servers[i];
        const struct server *s = pool_server_find(p, cs->name);

        if (s != NULL && atomic_load(&s->state) != SERVER_REMOVED &&
            s->admin != STATE_ADMIN_UP)
            continue; /* the state keeps it out of the ring */
        if (cs->weight == 0)
            continue;
        pl->change = s == NULL || placed(p, cs->name) == NULL ||
                     s->weight != cs->weight ||
                     !conf_addr_equal(&s->addr, &cs->addr);
    }
    for (size_t i = 0; i < p->nservers && !pl->change; i++) {
        const struct server *s = placed(p, p->servers[i]->name);
        bool kept = false;

        if (s == NULL)
            continue;
        for (size_t k = 0; k < cp->nservers && !kept; k++)
            kept = strcmp(cp->servers[k].name, s->name) == 0 &&
                   cp->servers[k].weight > 0;
        pl->change = !kept;
    }
    return pl->change ? 1 : 0;
}

void
migration_plan_free(struct migration_plan *pl)
{
    free(pl->leaving);
    memset(pl, 0, sizeof(*pl));
}

/* A reload of copying pool <p> to <cp> that would move keys the copier
 * cannot follow (the hashing changes, a member changes address): 0, or
 * -1 with the reason in <err>. */
static int
reload_refused(const struct pool *p, const struct conf_pool *cp, char *err,
               size_t errlen)
{
    const struct server *s;
    const struct conf_server *cs;

    if (conf_pool_hashing_differs(&p->cfg, cp)) {
        snprintf(err, errlen,
                 "pool %s: a reload may not change its hash, distribution, "
                 "points, hash_tag, redis_db or zones: with migration: copy "
                 "that would move keys it cannot copy (set migration: off "
                 "first, or start a new pool; a member changes zone by a "
                 "remove and an add)",
                 p->name);
        return -1;
    }
    cs = pool_member_moved(p, cp, &s);
    if (cs != NULL) {
        snprintf(err, errlen,
                 "pool %s: member %s moves from %s to %s: with "
                 "migration: copy its keys would be lost; add the "
                 "new address under another name, then remove %s",
                 p->name, cs->name, s->addr.text, cs->addr.text, cs->name);
        return -1;
    }
    return 0;
}

/* The members of <cp> as the reload of <p> makes them: whether one
 * joins or is reweighted (*<change>), how many have a weight (*<after>),
 * the keys they hold (<pl>'s count). -1 with <err> when a joining member
 * is not known to be empty. */
static int
reload_joining(const struct pool *p, const struct conf_pool *cp,
               struct migration_plan *pl, bool *change, size_t *after,
               char *err, size_t errlen)
{
    for (size_t i = 0; i < cp->nservers; i++) {
        const struct conf_server *cs = &cp->servers[i];
        const struct server *s = pool_server_find(p, cs->name);

        if (s != NULL && atomic_load(&s->state) != SERVER_REMOVED) {
            if (s->admin != STATE_ADMIN_UP)
                continue; /* the state keeps it drained or in maintenance */
            if (s->weight != cs->weight)
                *change = true;
        } else {
            if (cs->weight == 0)
                continue;
            *change = true;
            if (!cs->probed || cs->keys != 0) {
                if (cs->probed && cs->keys > 0)
                    snprintf(err, errlen,
                             "pool %s: member %s (%s) holds %" PRId64
                             " keys: a joining member must be empty "
                             "(FLUSHDB it, then reload)",
                             p->name, cs->name, cs->addr.text, cs->keys);
                else
                    snprintf(err, errlen,
                             "pool %s: member %s (%s) cannot be asked how "
                             "many keys it holds: a joining member must be "
                             "empty and reachable",
                             p->name, cs->name, cs->addr.text);
                return -1;
            }
        }
        if (cs->weight > 0)
            (*after)++;
        if (cs->probed && cs->keys > 0)
            pl->keys_total += (uint64_t)cs->keys;
    }
    return 0;
}

/* The members of <p>'s placement that <cp> drops, into <pl>'s leaving
 * list (*<change> when there is one). 0, or -1 with <err>. */
static int
reload_leaving(const struct pool *p, const struct conf_pool *cp,
               struct migration_plan *pl, bool *change, char *err,
               size_t errlen)
{
    pl->leaving = calloc(p->nservers ? p->nservers : 1, sizeof(*pl->leaving));
    if (pl->leaving == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = placed(p, p->servers[i]->name);
        bool kept = false;

        if (s == NULL)
            continue;
        for (size_t k = 0; k < cp->nservers && !kept; k++)
            kept = strcmp(cp->servers[k].name, s->name) == 0;
        if (!kept) {
            pl->leaving[pl->nleaving++] = s;
            *change = true;
        }
    }
    return 0;
}

int
migration_reload_plan(const struct pool *p, const struct conf_pool *cp,
                      struct migration_plan *pl, char *err, size_t errlen)
{
    const struct conf_pool *was = &p->cfg;
    bool change = false;
    size_t after = 0;

    memset(pl, 0, sizeof(*pl));
    if (was->migration == CONF_MIGRATION_WARMUP &&
        cp->migration == CONF_MIGRATION_WARMUP)
        return warmup_plan(p, cp, pl);
    if (was->migration != CONF_MIGRATION_COPY &&
        cp->migration != CONF_MIGRATION_COPY)
        return 0;
    if (p->migration != NULL && cp->migration != CONF_MIGRATION_COPY) {
        snprintf(err, errlen,
                 "pool %s: its migration is running: 'migration' cannot be "
                 "turned off before it ends",
                 p->name);
        return -1;
    }
    if (was->migration != CONF_MIGRATION_COPY ||
        cp->migration != CONF_MIGRATION_COPY)
        return 0; /* turned on or off: nothing moves by this reload */
    if (reload_refused(p, cp, err, errlen) < 0 ||
        reload_joining(p, cp, pl, &change, &after, err, errlen) < 0 ||
        reload_leaving(p, cp, pl, &change, err, errlen) < 0)
        return -1;
    if (change && after == 0) {
        migration_plan_free(pl);
        snprintf(err, errlen,
                 "pool %s: the reload leaves no member to move its keys to",
                 p->name);
        return -1;
    }
    if (change && p->migration != NULL) {
        migration_plan_free(pl);
        migration_busy(p, err, errlen);
        return -1;
    }
    pl->change = change;
    return change ? 1 : 0;
}

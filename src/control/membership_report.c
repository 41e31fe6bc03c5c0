/* membership_report.c -- the migration reports of membership changes,
 * computed on the builder thread (four rings: seconds for millions of
 * points), with the key counts of the members asked there too, and what
 * a change of a pool that does not move data leaves out of reach.
 * Part of control/membership (membership.c); shared with its parts in
 * membership_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/membership_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "control/migration.h"
#include "loop/builder.h"
#include "model/pool.h"
#include "model/report.h"

/* ---- reports on the builder thread --------------------------------------- */

void
membership_members_free(struct chash_member *m, size_t n)
{
    for (size_t i = 0; m != NULL && i < n; i++)
        free((char *)m[i].name);
    free(m);
}

/* A copy of <m>[0..<n>) with its names duplicated, or NULL. */
static struct chash_member *
members_copy(const struct chash_member *m, size_t n)
{
    struct chash_member *c = calloc(n ? n : 1, sizeof(*c));

    for (size_t i = 0; c != NULL && i < n; i++) {
        c[i] = m[i];
        c[i].name = strdup(m[i].name);
        if (c[i].name == NULL) {
            membership_members_free(c, i);
            c = NULL;
        }
    }
    return c;
}

void
membership_probe_free(struct report_job *rj)
{
    for (size_t i = 0; rj->addrs != NULL && i < rj->probe.n; i++)
        free(rj->addrs[i]);
    for (size_t i = 0; rj->names != NULL && i < rj->probe.n; i++)
        free(rj->names[i]);
    free(rj->addrs);
    free(rj->names);
    free(rj->auth);
    free(rj->keys);
    rj->addrs = NULL;
    rj->names = NULL;
    rj->counting = false;
    rj->auth = NULL;
    rj->keys = NULL;
    rj->probe.n = 0;
}

void
membership_report_job_free(struct report_job *rj)
{
    membership_probe_free(rj);
    membership_members_free(rj->before, rj->nb);
    membership_members_free(rj->after, rj->na);
    for (size_t i = 0; i < rj->nz; i++) {
        free(rj->znames[i]);
        free(rj->zzones[i]);
    }
    free(rj->znames);
    free(rj->zzones);
    free(rj->changed);
    json_decref(rj->report);
    free(rj);
}

/* The zones of <m>[0..<n>) from <rj>'s table, or NULL (flat, or a name
 * without a zone: <rj>->err says so). */
static const char **
zones_of(struct report_job *rj, const struct chash_member *m, size_t n)
{
    const char **z = calloc(n ? n : 1, sizeof(*z));

    for (size_t i = 0; z != NULL && i < n; i++) {
        for (size_t k = 0; k < rj->nz && z[i] == NULL; k++)
            if (strcmp(rj->znames[k], m[i].name) == 0)
                z[i] = rj->zzones[k];
        if (z[i] == NULL) {
            snprintf(rj->err, sizeof(rj->err), "member %s has no zone",
                     m[i].name);
            free(z);
            return NULL;
        }
    }
    return z;
}

void
membership_report_work(struct builder_job *job)
{
    struct report_job *rj = (struct report_job *)job;
    const char **bz = NULL, **az = NULL;

    if (rj->nz > 0 && ((bz = zones_of(rj, rj->before, rj->nb)) == NULL ||
                       (az = zones_of(rj, rj->after, rj->na)) == NULL)) {
        free(bz);
        return; /* rj->report NULL: refused with rj->err */
    }
    {
        struct report_zones z = {bz, az, rj->zw, rj->nzw};

        rj->report = report_migration_zoned(
            &rj->cfg, rj->before, rj->nb, rj->after, rj->na,
            rj->nz > 0 ? &z : NULL, rj->changed, rj->err, sizeof(rj->err));
        if (rj->report != NULL && rj->probe.n > 0)
            migration_probe(&rj->probe);
        if (rj->report != NULL && rj->counting)
            rj->keys_known =
                report_keys_leaving(&rj->cfg, rj->before, rj->nb,
                                    rj->nz > 0 ? &z : NULL, rj->report,
                                    (const char *const *)rj->names, rj->keys,
                                    rj->probe.n, &rj->keys_moving) == 0;
    }
    free(bz);
    free(az);
}

void
membership_report_done(struct builder_job *job)
{
    struct report_job *rj = (struct report_job *)job;

    if (job->cancelled && rj->report == NULL)
        snprintf(rj->err, sizeof(rj->err), "chashd is stopping");
    rj->then(rj);
}

/* Fill <rj>'s inputs: <cfg>, copies of both models, <changed>. 0 or -1
 * (out of memory). */
/*
 * A report of <p> from members <b> to <a>. In a pool with zones, the
 * zones of its servers go with it (and <jname> in zone <jzone>: a member
 * joining). 0 or -1 (out of memory).
 */
int
membership_report_job_init(struct report_job *rj, const struct pool *p,
                           const struct chash_member *b, size_t nb,
                           const struct chash_member *a, size_t na,
                           const char *changed, const char *jname,
                           const char *jzone)
{
    rj->job.work = membership_report_work;
    rj->job.done = membership_report_done;
    rj->cfg = p->cfg.ring;
    if (p->cfg.zone_policy == CONF_ZONE_HIERARCHICAL) {
        size_t cap = p->nservers + 1;

        memcpy(rj->zw, p->cfg.zone_weights, sizeof(rj->zw));
        rj->nzw = p->cfg.nzone_weights;

        rj->znames = calloc(cap, sizeof(*rj->znames));
        rj->zzones = calloc(cap, sizeof(*rj->zzones));
        if (rj->znames == NULL || rj->zzones == NULL)
            return -1;
        for (size_t i = 0; i <= p->nservers; i++) {
            const char *n = i < p->nservers ? p->servers[i]->name : jname;
            const char *z = i < p->nservers ? p->servers[i]->zone : jzone;

            if (n == NULL || z == NULL)
                continue;
            rj->znames[rj->nz] = strdup(n);
            rj->zzones[rj->nz] = strdup(z);
            if (rj->znames[rj->nz] == NULL || rj->zzones[rj->nz] == NULL) {
                free(rj->znames[rj->nz]);
                free(rj->zzones[rj->nz]);
                return -1;
            }
            rj->nz++;
        }
    }
    rj->nb = nb;
    rj->na = na;
    rj->before = members_copy(b, nb);
    rj->after = members_copy(a, na);
    rj->changed = changed != NULL ? strdup(changed) : NULL;
    if (rj->before == NULL || rj->after == NULL ||
        (changed != NULL && rj->changed == NULL))
        return -1;
    return 0;
}

/*
 * A pool that does not move data: ask its redis members for their key
 * counts (DBSIZE, on the builder thread with the report), so that the
 * report says about how many keys a change leaves out of reach
 * (report_keys_leaving). memcache has no such count: nothing is asked.
 * 0 or -1 (out of memory).
 */
int
membership_count_setup(struct report_job *rj, const struct pool *p)
{
    membership_probe_free(rj);
    rj->joiner = rj->leaver = -1;
    if (p->cfg.mode != CONF_MODE_REDIS)
        return 0;
    rj->addrs = calloc(p->nservers + 1, sizeof(*rj->addrs));
    rj->names = calloc(p->nservers + 1, sizeof(*rj->names));
    rj->keys = calloc(p->nservers + 1, sizeof(*rj->keys));
    if (rj->addrs == NULL || rj->names == NULL || rj->keys == NULL)
        return -1;
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];
        size_t n = rj->probe.n;

        if (!membership_server_member(s))
            continue;
        rj->addrs[n] = strdup(s->addr.text);
        rj->names[n] = strdup(s->name);
        rj->probe.n++; /* membership_probe_free frees what was taken */
        if (rj->addrs[n] == NULL || rj->names[n] == NULL)
            return -1;
    }
    if (p->cfg.redis_auth != NULL &&
        (rj->auth = strdup(p->cfg.redis_auth)) == NULL)
        return -1;
    rj->probe.addresses = (const char **)rj->addrs;
    rj->probe.auth = rj->auth;
    rj->probe.db = p->cfg.redis_db;
    rj->probe.flush = -1; /* counted, never emptied */
    rj->probe.timeout_ms = 1000;
    rj->probe.keys = rj->keys;
    rj->counting = true;
    return 0;
}

/*
 * What a change of pool <p>, which does not move data, leaves out of
 * reach, as a sentence into <buf>: "22.0654% of the keyspace (about 44 of
 * the pool's 200 keys) changes owner; its keys stay on their old members
 * and become unreachable: this pool does not move data (mode redis,
 * migration: off, replicas: 1)".
 * <rep> holds the figures (membership_unreachable_report); <counted>: the
 * members were asked for their key counts.
 */
void
membership_unreachable_text(const struct pool *p, const json_t *rep,
                            bool counted, char *buf, size_t cap)
{
    const json_t *u = json_object_get(rep, "unreachable");
    const json_t *k = json_object_get(rep, "unreachable_keys");
    const json_t *t = json_object_get(rep, "keys_total");
    size_t len = 0;

    buf[0] = '\0';
    if (json_is_number(u))
        membership_append(buf, cap, &len, "%.4f%% of the keyspace",
                          100 * json_number_value(u));
    else if (!membership_pool_comparable(p))
        membership_append(
            buf, cap, &len,
            "an unknown share of the keyspace (distribution %s is not "
            "consistent hashing: usually most of it)",
            conf_dist_name(p->cfg.distribution));
    else
        membership_append(
            buf, cap, &len,
            "an unknown share of the keyspace (the report could not be "
            "computed)");
    if (json_is_integer(k) && json_is_integer(t))
        membership_append(
            buf, cap, &len, " (about %lld of the pool's %lld keys)",
            (long long)json_integer_value(k), (long long)json_integer_value(t));
    else if (json_is_integer(k))
        membership_append(buf, cap, &len, " (about %lld keys)",
                          (long long)json_integer_value(k));
    else if (counted && json_is_number(u))
        membership_append(
            buf, cap, &len,
            " (how many keys is not known: a member did not answer "
            "DBSIZE)");
    membership_append(
        buf, cap, &len,
        " changes owner; its keys stay on their old members and become "
        "unreachable: this pool does not move data (mode %s, migration: "
        "off, replicas: 1)",
        conf_mode_name(p->cfg.mode));
}

/*
 * The report <rep> of a change of pool <p>, which does not move data (a
 * dry run's too), with the key counts of <rj> (NULL: none asked): add
 * what the change leaves out of reach (the fields membership_change
 * lists). <force>: the change was asked with "force". Returns whether
 * applying it needs "force" (it moves some of the key space).
 */
bool
membership_unreachable_report(const struct pool *p, json_t *rep,
                              const struct report_job *rj, bool force)
{
    const json_t *mv = json_object_get(rep, "moved");
    json_t *total = json_null();
    char text[600];

    if (json_is_number(mv) && json_number_value(mv) <= 0) {
        json_object_set_new(rep, "unreachable", json_real(0));
        json_object_set_new(rep, "force_required", json_false());
        return false;
    }
    json_object_set_new(rep, "unreachable",
                        json_is_number(mv) ? json_real(json_number_value(mv))
                                           : json_null());
    if (rj != NULL && rj->counting) {
        uint64_t sum = 0;
        bool known = true;

        for (size_t i = 0; i < rj->probe.n; i++) {
            known = known && rj->keys[i] >= 0;
            sum += rj->keys[i] > 0 ? (uint64_t)rj->keys[i] : 0;
        }
        if (known)
            total = json_integer((json_int_t)sum);
    }
    json_object_set_new(rep, "keys_total", total);
    json_object_set_new(rep, "unreachable_keys",
                        rj != NULL && rj->counting && rj->keys_known &&
                                json_is_number(mv)
                            ? json_integer((json_int_t)llround(rj->keys_moving))
                            : json_null());
    membership_unreachable_text(p, rep, rj != NULL && rj->counting, text,
                                sizeof(text));
    json_object_set_new(rep, "data_warning", json_string(text));
    json_object_set_new(rep, "force_required", json_true());
    json_object_set_new(rep, "forced", json_boolean(force));
    return true;
}

/* A job that only completes, in order after every job before it. */
struct then_job {
    struct builder_job job;
    void (*then)(void *arg);
    void *arg;
};

static void
then_work(struct builder_job *job)
{
    (void)job;
}

static void
then_done(struct builder_job *job)
{
    struct then_job *tj = (struct then_job *)job;

    tj->then(tj->arg);
    free(tj);
}

/* Call <then>(<arg>) once every job submitted so far has completed. */
void
membership_after_jobs(void (*then)(void *arg), void *arg)
{
    struct then_job *tj = calloc(1, sizeof(*tj));

    if (tj == NULL) {
        then(arg);
        return;
    }
    tj->job.work = then_work;
    tj->job.done = then_done;
    tj->then = then;
    tj->arg = arg;
    builder_submit(&tj->job);
}

/* membership_batch.c -- a batch of changes of one pool (POST
 * /api/pools/{pool}/changes): checked whole, reported once, written as
 * one etcd transaction.
 * Part of control/membership (membership.c); shared with its parts in
 * membership_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/membership_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "loop/builder.h"
#include "model/pool.h"
#include "model/state.h"

struct batch {
    struct report_job rj;            /* first: the job's address is ours */
    struct pool *p;                  /* (ref held) */
    struct membership_batch_op *ops; /* names and addresses owned */
    size_t n;
    bool dry;
    bool force; /* a pool that does not move data: apply it anyway */
    membership_done_fn *done;
    void *arg;
    struct membership_result res;
};

static void
batch_finish(struct batch *bt)
{
    bt->done(&bt->res, bt->arg);
    membership_result_deinit(&bt->res);
    for (size_t i = 0; i < bt->n; i++) {
        free((char *)bt->ops[i].name);
        free((char *)bt->ops[i].address);
    }
    free(bt->ops);
    pool_unref(bt->p);
    membership_report_job_free(&bt->rj);
}

static void
batch_written(int status, uint64_t rev, const char *msg, void *arg)
{
    struct batch *bt = arg;

    membership_etcd_result(&bt->res, bt->p->name, status, rev, msg);
    batch_finish(bt);
}

static void
batch_reported(struct report_job *rj)
{
    struct batch *bt = (struct batch *)rj;
    struct membership_remote_op *eo;

    if (rj->report == NULL) {
        membership_refuse(&bt->res, MEMBERSHIP_ECONFLICT, "pool %s: %s",
                          bt->p->name, rj->err);
        batch_finish(bt);
        return;
    }
    bt->res.report = rj->report;
    rj->report = NULL;
    json_object_set_new(bt->res.report, "changes",
                        json_integer((json_int_t)bt->n));
    if (membership_pool_hides(bt->p) &&
        membership_unreachable_report(bt->p, bt->res.report, rj, bt->force) &&
        !bt->dry && !bt->force) {
        membership_refuse(
            &bt->res, MEMBERSHIP_ECONFLICT,
            "pool %s: a batch of %zu change%s refused: %s; nothing was "
            "changed; \"force\": true applies it anyway",
            bt->p->name, bt->n, bt->n == 1 ? "" : "s",
            json_string_value(json_object_get(bt->res.report, "data_warning")));
        membership_report_flags(bt->res.report, false, false);
        batch_finish(bt);
        return;
    }
    if (bt->dry) {
        membership_report_flags(bt->res.report, true, false);
        batch_finish(bt);
        return;
    }
    eo = calloc(bt->n, sizeof(*eo));
    if (eo == NULL) {
        membership_refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        batch_finish(bt);
        return;
    }
    for (size_t i = 0; i < bt->n; i++) {
        const struct membership_batch_op *o = &bt->ops[i];
        eo[i].op = o->op == MEMBERSHIP_ADD      ? 'a'
                   : o->op == MEMBERSHIP_REMOVE ? 'r'
                                                : 'u';
        eo[i].name = o->name;
        eo[i].address = o->address;
        eo[i].weight = o->has_weight ? o->weight : o->op == MEMBERSHIP_ADD;
        eo[i].state = o->has_admin ? state_admin_name(o->admin) : NULL;
    }
    membership_shared.remote.write(bt->p, eo, bt->n, NULL, batch_written, bt);
    free(eo);
}

/* Check op <o> of a batch against the model <a> (the pool as the ops
 * before it leave it); apply it there. 0, or -1 with <res>. */
static int
batch_check(struct pool *p, const struct membership_batch_op *o,
            const struct membership_batch_op *ops, size_t i, struct model *a,
            struct membership_result *res)
{
    struct server *s = pool_server_find(p, o->name);

    for (size_t k = 0; k < i; k++)
        if (strcmp(ops[k].name, o->name) == 0)
            return membership_refuse(
                res, MEMBERSHIP_EINVAL,
                "member \"%s\" is named twice in one batch", o->name);
    if (o->has_weight && (o->weight < 1 || o->weight > MEMBERSHIP_MAX_WEIGHT))
        return membership_refuse(res, MEMBERSHIP_EINVAL,
                                 "change %zu: \"weight\" must be 1 to %d",
                                 i + 1, MEMBERSHIP_MAX_WEIGHT);
    switch (o->op) {
    case MEMBERSHIP_ADD: {
        struct conf_addr addr;
        char err[256];

        if (s != NULL)
            return membership_refuse(
                res, MEMBERSHIP_ECONFLICT,
                "pool %s already has a member named \"%s\"", p->name, o->name);
        if (o->address == NULL || !membership_address_has_port(o->address) ||
            !membership_address_numeric(o->address) ||
            conf_parse_addr(o->address, &addr, err, sizeof(err)) != 0)
            return membership_refuse(
                res, MEMBERSHIP_EINVAL,
                "change %zu: \"address\" must be a numeric "
                "host:port, [v6]:port or /unix/path",
                i + 1);
        for (size_t k = 0; k < p->nservers; k++) {
            const struct server *o2 = p->servers[k];
            bool leaves = false;
            for (size_t j = 0; j < i; j++)
                leaves |= ops[j].op == MEMBERSHIP_REMOVE &&
                          strcmp(ops[j].name, o2->name) == 0;
            if (membership_server_member(o2) && !leaves &&
                conf_addr_equal(&o2->addr, &addr)) {
                conf_addr_deinit(&addr);
                return membership_refuse(
                    res, MEMBERSHIP_ECONFLICT,
                    "change %zu: %s is the address of member %s", i + 1,
                    o->address, o2->name);
            }
        }
        conf_addr_deinit(&addr);
        return membership_model_push(a, o->name, o->has_weight ? o->weight : 1,
                                     1.0) == 0
                   ? 0
                   : membership_refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    }
    case MEMBERSHIP_REMOVE:
    case MEMBERSHIP_UPDATE: {
        size_t k;
        uint32_t w;
        int admin;

        if (s == NULL || !membership_server_member(s))
            return membership_refuse(res, MEMBERSHIP_ENOENT,
                                     "pool %s has no member named \"%s\"",
                                     p->name, o->name);
        for (k = 0; k < a->n && strcmp(a->m[k].name, o->name) != 0; k++)
            ;
        if (k < a->n) {
            a->m[k] = a->m[a->n - 1];
            a->n--;
        }
        if (o->op == MEMBERSHIP_REMOVE)
            return 0;
        if (!o->has_weight && !o->has_admin)
            return membership_refuse(
                res, MEMBERSHIP_EINVAL,
                "change %zu: an update gives \"weight\" and/or "
                "\"state\"",
                i + 1);
        w = o->has_weight ? o->weight : s->weight;
        admin = o->has_admin ? o->admin : s->admin;
        if (admin == STATE_ADMIN_UP &&
            membership_model_push(a, s->name, w, 1.0) != 0)
            return membership_refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
        return 0;
    }
    default:
        return membership_refuse(res, MEMBERSHIP_EINVAL,
                                 "change %zu: unknown op", i + 1);
    }
}

void
membership_batch(struct pool *p, const struct membership_batch_op *ops,
                 size_t n, bool dry_run, bool force, membership_done_fn *done,
                 void *arg)
{
    struct batch *bt = calloc(1, sizeof(*bt));
    struct model b = {0}, a = {0};

    if (bt == NULL) {
        struct membership_result res = {.error = MEMBERSHIP_ENOMEM};
        snprintf(res.message, sizeof(res.message), "out of memory");
        done(&res, arg);
        return;
    }
    bt->p = p;
    pool_ref(p);
    bt->dry = dry_run;
    bt->force = force;
    bt->done = done;
    bt->arg = arg;
    bt->rj.then = batch_reported;
    bt->ops = calloc(n ? n : 1, sizeof(*bt->ops));
    if (bt->ops == NULL) {
        membership_refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        batch_finish(bt);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        bt->ops[i] = ops[i];
        bt->ops[i].name = ops[i].name ? strdup(ops[i].name) : NULL;
        bt->ops[i].address = ops[i].address ? strdup(ops[i].address) : NULL;
        bt->n = i + 1;
        if (bt->ops[i].name == NULL ||
            (ops[i].address && bt->ops[i].address == NULL)) {
            membership_refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
            batch_finish(bt);
            return;
        }
    }
    if (!membership_remote_owns(p) && !dry_run) {
        membership_refuse(
            &bt->res, MEMBERSHIP_EINVAL,
            "pool %s: a batch of changes is one etcd transaction: it is "
            "for pools with members_from: etcd (change this pool one "
            "member at a time; a dry run reports any pool)",
            p->name);
        batch_finish(bt);
        return;
    }
    if (p->cfg.migration == CONF_MIGRATION_COPY && !dry_run) {
        membership_refuse(
            &bt->res, MEMBERSHIP_ECONFLICT,
            "pool %s copies its keys on a change (migration: copy): "
            "change it one member at a time, each change its own "
            "migration",
            p->name);
        batch_finish(bt);
        return;
    }
    if (n == 0 || n > 127) {
        membership_refuse(
            &bt->res, MEMBERSHIP_EINVAL,
            "a batch holds 1 to 127 changes (one etcd transaction), not "
            "%zu",
            n);
        batch_finish(bt);
        return;
    }
    if (membership_model_build(p, NULL, &b) != 0 ||
        membership_model_build(p, NULL, &a) != 0) {
        membership_refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < b.n; i++) {
        b.m[i].ramp = 1.0;
        a.m[i].ramp = 1.0;
    }
    for (size_t i = 0; i < n; i++)
        if (batch_check(p, &bt->ops[i], bt->ops, i, &a, &bt->res) != 0)
            goto fail;
    if (a.n == 0) {
        membership_refuse(&bt->res, MEMBERSHIP_ECONFLICT,
                          "pool %s: the batch leaves no member in the ring",
                          p->name);
        goto fail;
    }
    if (membership_report_job_init(&bt->rj, p, b.m, b.n, a.m, a.n, NULL, NULL,
                                   NULL) != 0 ||
        (membership_pool_hides(p) && membership_count_setup(&bt->rj, p) != 0)) {
        membership_refuse(&bt->res, MEMBERSHIP_ENOMEM, "out of memory");
        goto fail;
    }
    free(b.m);
    free(a.m);
    builder_submit(&bt->rj.job);
    return;
fail:
    free(b.m);
    free(a.m);
    batch_finish(bt);
}

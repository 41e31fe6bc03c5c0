/* etcd_migration.c -- module etcd: one migration, several instances
 * (migration.h, doc/etcd.md "Migration"). A copy pool's migration is a
 * descriptor in etcd, created with the change; every instance runs it
 * from its records, one holds the copier lock, and each stage ends at a
 * barrier every instance that routes the pool has passed. etcd
 * registers these functions with migration (migration_etcd_set): the
 * migration reaches etcd only through them.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "conf/conf.h"
#include "conf/etcd_codec.h"
#include "control/migration.h"
#include "model/pool.h"

/*
 * The keys of a pool's migration:
 *
 * <prefix>/pools/<pool>/migration   the descriptor (created with the
 *                                   change; its create revision numbers
 *                                   the migration; "stage" 2 once the
 *                                   first of two stages is done)
 * <prefix>/pools/<pool>/copier      the copier lock: {"instance", "epoch"}
 *                                   under the holder's lease
 * <prefix>/pools/<pool>/barrier/<epoch>.<stage>/<id>
 *                                   instance <id> drained that stage (under
 *                                   its lease)
 * The copier's last transaction deletes the descriptor, the lock, the
 * barrier keys and the leaving members at once.
 */

#define LOCK_AGAIN_MS 500 /* a free lock is asked for again after */
#define ACK_AGAIN_MS 1000 /* a barrier key not seen back is put again */

/* Whether <p> copies keys when its members change (migration: copy). */
bool
etcd_copies_keys(const struct pool *p)
{
    return p->cfg.migration == CONF_MIGRATION_COPY;
}

/* What a migration write was (<arg>: a phrase) when etcd refused it. */
static void
mig_written(int status, uint64_t rev, const char *msg, void *arg)
{
    (void)rev;
    if (status != 0)
        log_warn("etcd: %s: %s", (const char *)arg, msg);
}

static void
lock_written(int status, uint64_t rev, const char *msg, void *arg)
{
    (void)rev, (void)arg;
    if (status != 0 && status != 409) /* 409: another instance has it */
        log_warn("etcd: the copier lock: %s", msg);
}

/* A transaction of our own (<cmps>, <ops>: taken), answered as soon as etcd
 * answers; <lease>: its puts go under our lease. */
static void
mig_txn(const char *pool, json_t *cmps, json_t *ops, bool lease,
        membership_remote_done_fn *done, void *arg)
{
    struct etcd_write *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        json_decref(cmps);
        json_decref(ops);
        done(503, 0, "out of memory", arg);
        return;
    }
    w->txn = json_pack("{s:o,s:o}", "compare", cmps, "success", ops);
    w->lease = lease;
    w->raw = true;
    snprintf(w->pool, sizeof(w->pool), "%s", pool);
    w->done = done;
    w->arg = arg;
    etcd_write_queue(w);
}

/* The descriptor <cp> holds (parsed; NULL: none) and its epoch. */
static json_t *
desc_of(const struct etcd_cpool *cp, uint64_t *epoch)
{
    json_t *d = json_object_get(cp->records, "/migration");
    json_t *j;

    *epoch = d ? (uint64_t)etcd_jint(json_array_get(d, 2)) : 0;
    if (d == NULL)
        return NULL;
    j = json_loads(json_string_value(json_array_get(d, 1)), 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* A compare: the descriptor of <epoch> is still there. */
static json_t *
desc_compare(const char *pool, uint64_t epoch)
{
    char key[512];

    etcd_pool_key(key, sizeof(key), pool, "migration");
    return json_pack("[{s:o,s:s,s:s,s:I}]", "key", etcd_jb64(key), "target",
                     "CREATE", "result", "EQUAL", "create_revision",
                     (json_int_t)epoch);
}

/* migration_etcd_ops.drained: our barrier key for <epoch>.<stage>. */
static void
mig_drained(struct pool *p, uint64_t epoch, int stage)
{
    struct etcd_cpool *cp = etcd_cpool_find(p->name);
    char rest[160], key[512], value[160];

    if (cp == NULL)
        return;
    cp->ack_ms = clock_ms();
    snprintf(rest, sizeof(rest), "barrier/%" PRIu64 ".%d/%s", epoch, stage,
             etcd_cfg.instance);
    etcd_pool_key(key, sizeof(key), p->name, rest);
    snprintf(value, sizeof(value), "{\"instance\":\"%s\"}", etcd_cfg.instance);
    mig_txn(p->name, desc_compare(p->name, epoch),
            json_pack("[o]", etcd_put_op(key, value)), true, mig_written,
            "the migration barrier");
}

/* migration_etcd_ops.copied: the copiers are done with <stage>. */
static void
mig_copied(struct pool *p, uint64_t epoch, int stage)
{
    struct etcd_cpool *cp = etcd_cpool_find(p->name);
    uint64_t e;
    json_t *desc = cp ? desc_of(cp, &e) : NULL, *ops, *l;
    char key[512];
    size_t i;

    if (desc == NULL || e != epoch) {
        json_decref(desc);
        return; /* over already */
    }
    ops = json_array();
    if (stage == 1) {
        char *text;

        json_object_set_new(desc, "stage", json_integer(2));
        text = json_dumps(desc, JSON_COMPACT);
        etcd_pool_key(key, sizeof(key), p->name, "migration");
        json_array_append_new(ops, etcd_put_op(key, text ? text : "{}"));
        free(text);
        log_info("etcd: pool %s: migration %" PRIu64 ": first stage copied; "
                 "the second begins on every instance",
                 p->name, epoch);
        mig_txn(p->name, desc_compare(p->name, epoch), ops, false, mig_written,
                "the migration's second stage");
        json_decref(desc);
        return;
    }
    etcd_pool_key(key, sizeof(key), p->name, "migration");
    json_array_append_new(ops, etcd_delete_op(key, false));
    etcd_pool_key(key, sizeof(key), p->name, "copier");
    json_array_append_new(ops, etcd_delete_op(key, false));
    etcd_pool_key(key, sizeof(key), p->name, "barrier/");
    json_array_append_new(ops, etcd_delete_op(key, true));
    json_array_foreach(json_object_get(desc, "leaving"), i, l)
    {
        if (!json_is_string(l) || !etcd_name_ok(json_string_value(l)))
            continue;
        etcd_member_key(key, sizeof(key), p->name, json_string_value(l));
        json_array_append_new(ops, etcd_delete_op(key, false));
    }
    log_info("etcd: pool %s: migration %" PRIu64 " copied: ending it on every "
             "instance",
             p->name, epoch);
    mig_txn(p->name, desc_compare(p->name, epoch), ops, false, mig_written,
            "the migration's end");
    json_decref(desc);
}

const struct migration_etcd_ops etcd_migration_ops = {mig_drained, mig_copied};

/* Whether every member the descriptor's old placement names is in <p>. */
static bool
old_members_here(const struct pool *p, const json_t *desc)
{
    size_t i;
    json_t *o;

    json_array_foreach(json_object_get(desc, "old"), i, o)
    {
        const char *n = json_string_value(json_object_get(o, "name"));
        if (n == NULL || pool_server_find(p, n) == NULL)
            return false;
    }
    return true;
}

/*
 * A copy pool's migration keys, before its members are applied: the
 * migration etcd no longer holds ends here; a new one begins now when
 * every old member is in the pool (then the snapshot that carries the
 * change carries its gates too), else in *<later> once the members are
 * applied (an instance that has not listed yet: it does not serve).
 * -1: the descriptor cannot be run; the pool keeps its members.
 */
int
etcd_migration_before(struct pool *p, struct etcd_cpool *cp, json_t **later,
                      uint64_t *later_epoch)
{
    int stage;
    bool waiting;
    uint64_t epoch, cur = migration_etcd_epoch(p, &stage, &waiting);
    json_t *desc = desc_of(cp, &epoch);
    char err[300];

    *later = NULL;
    if (cur != 0 && cur != epoch) {
        log_info("etcd: pool %s: migration %" PRIu64 " is %s in etcd", p->name,
                 cur, epoch ? "replaced" : "over");
        migration_etcd_end(p);
    }
    if (epoch == 0 || cur == epoch) {
        json_decref(desc);
        return 0;
    }
    if (cp->failed_epoch == epoch) {
        json_decref(desc);
        return -1;
    }
    if (desc == NULL) {
        snprintf(err, sizeof(err), "not a JSON object");
        goto bad;
    }
    if (!old_members_here(p, desc)) {
        *later = desc;
        *later_epoch = epoch;
        return 0;
    }
    if (migration_etcd_begin(p, desc, epoch, err, sizeof(err)) != 0)
        goto bad;
    json_decref(desc);
    return 0;
bad:
    cp->failed_epoch = epoch;
    log_error("etcd: pool %s: the migration in %s/pools/%s/migration "
              "(revision %" PRIu64 ") cannot run: %s; the pool keeps its "
              "members until it is fixed or deleted",
              p->name, etcd_cfg.prefix, p->name, epoch, err);
    json_decref(desc);
    return -1;
}

/* Whether every instance that routes <cp>'s pool (and this one) put its
 * barrier key of <epoch>.<stage>. */
static bool
barrier_passed(const struct etcd_cpool *cp, uint64_t epoch, int stage)
{
    const char *id;
    json_t *v;
    char k[200];

    snprintf(k, sizeof(k), "/barrier/%" PRIu64 ".%d/%s", epoch, stage,
             etcd_cfg.instance);
    if (json_object_get(cp->records, k) == NULL)
        return false;
    json_object_foreach(etcd_ctl.instances, id, v)
    {
        if (!etcd_routes_pool(json_string_value(json_array_get(v, 1)),
                              cp->name))
            continue;
        snprintf(k, sizeof(k), "/barrier/%" PRIu64 ".%d/%s", epoch, stage, id);
        if (json_object_get(cp->records, k) == NULL)
            return false;
    }
    return true;
}

/* Bring <p>'s migration in line with etcd: its stage, who copies, the
 * barrier. */
static void
mig_reconcile(struct pool *p, struct etcd_cpool *cp)
{
    int stage;
    bool waiting;
    uint64_t e, epoch = migration_etcd_epoch(p, &stage, &waiting);
    json_t *desc, *lock, *lk;
    const char *holder = NULL;
    uint64_t now = clock_ms();
    char key[512], value[200];

    if (epoch == 0 || (desc = desc_of(cp, &e)) == NULL)
        return;
    if (e == epoch && json_integer_value(json_object_get(desc, "stage")) == 2 &&
        stage == 1) {
        migration_etcd_stage(p, 2);
        epoch = migration_etcd_epoch(p, &stage, &waiting);
    }
    json_decref(desc);
    if (e != epoch)
        return;
    lk = json_object_get(cp->records, "/copier");
    lock = lk ? json_loads(json_string_value(json_array_get(lk, 1)), 0, NULL)
              : NULL;
    holder = json_string_value(json_object_get(lock, "instance"));
    migration_etcd_copier(p, holder && strcmp(holder, etcd_cfg.instance) == 0,
                          holder);
    json_decref(lock);
    if (lk == NULL && now - cp->lock_ms >= LOCK_AGAIN_MS) {
        cp->lock_ms = now;
        etcd_pool_key(key, sizeof(key), p->name, "copier");
        snprintf(value, sizeof(value),
                 "{\"instance\":\"%s\",\"epoch\":%" PRIu64 "}",
                 etcd_cfg.instance, epoch);
        mig_txn(p->name,
                json_pack("[{s:o,s:s,s:s,s:s}]", "key", etcd_jb64(key),
                          "target", "CREATE", "result", "EQUAL",
                          "create_revision", "0"),
                json_pack("[o]", etcd_put_op(key, value)), true, lock_written,
                NULL);
    }
    if (!waiting)
        return;
    if (barrier_passed(cp, epoch, stage)) {
        migration_etcd_pass(p);
        return;
    }
    snprintf(key, sizeof(key), "/barrier/%" PRIu64 ".%d/%s", epoch, stage,
             etcd_cfg.instance);
    if (json_object_get(cp->records, key) == NULL &&
        now - cp->ack_ms >= ACK_AGAIN_MS)
        mig_drained(p, epoch, stage);
}

/* Every copy pool's migration, again (instances came or went, a retry). */
void
etcd_migration_reconcile_all(void)
{
    for (size_t i = 0; i < etcd_ctl.npools; i++) {
        struct pool *p = pool_find(etcd_ctl.pools[i].name);
        if (p != NULL && etcd_pool(p) && etcd_copies_keys(p))
            mig_reconcile(p, &etcd_ctl.pools[i]);
    }
}

/* etcd_write.c -- module etcd: the admin API's writes. A change of an
 * etcd pool's members becomes one etcd transaction (compare-and-swap on
 * each record's revision), run by the session thread and answered on the
 * control thread once this instance has applied its revision, or after
 * WRITE_APPLY_MS saying it has not.
 * SPDX-License-Identifier: BSD-2-Clause
 */

#include "control/etcd_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "conf/etcd_codec.h"
#include "model/pool.h"

#define WRITE_APPLY_MS 10000 /* an admin write waits so long to be applied */

/* Answer admin write <w> and free it. */
void
etcd_write_answer(struct etcd_write *w, int status, uint64_t rev,
                  const char *msg)
{
    w->done(status, rev, msg, w->arg);
    json_decref(w->txn);
    free(w);
}

/* Answer the admin writes whose revision is applied. */
void
etcd_writes_settle(void)
{
    struct etcd_write **pp = &etcd_ctl.waiting;

    while (*pp != NULL) {
        struct etcd_write *w = *pp;
        if (w->rev > etcd_ctl.applied_rev) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        etcd_write_answer(w, 0, w->rev, "");
    }
}

/* Queue admin write <w> for the session. */
void
etcd_write_queue(struct etcd_write *w)
{
    w->answer.type = ETCD_MSG_WRITTEN;
    w->answer.w = w;
    pthread_mutex_lock(&etcd_shared.mu);
    w->next = NULL;
    *etcd_shared.wtail = w;
    etcd_shared.wtail = &w->next;
    pthread_cond_signal(&etcd_shared.cond);
    pthread_mutex_unlock(&etcd_shared.mu);
}

/* The session's answer to admin write <w>: a refusal and a write of our
 * own are answered now, the others once their revision is applied. */
void
etcd_on_written(struct etcd_write *w)
{
    if (w->status != 0 || w->raw) {
        etcd_write_answer(w, w->status, 0, w->msg);
        return;
    }
    etcd_ctl.writes++;
    w->deadline_ms = clock_ms() + WRITE_APPLY_MS;
    w->next = etcd_ctl.waiting;
    etcd_ctl.waiting = w;
    etcd_writes_settle();
}

/* A write etcd took whose revision this instance has not applied in
 * WRITE_APPLY_MS (its watch is down): answered, saying so. */
void
etcd_writes_expire(uint64_t now_ms)
{
    struct etcd_write **pp = &etcd_ctl.waiting;

    while (*pp != NULL) {
        struct etcd_write *w = *pp;
        char msg[320];

        if (now_ms < w->deadline_ms) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        snprintf(msg, sizeof(msg),
                 "written to etcd at revision %" PRIu64 ", but this instance "
                 "has not applied it within %d s (its watch: %s); the other "
                 "instances apply it from etcd",
                 w->rev, WRITE_APPLY_MS / 1000, etcd_ctl.state);
        etcd_write_answer(w, MEMBERSHIP_WRITTEN_NOT_APPLIED, w->rev, msg);
    }
}

/* ---- the admin API's changes as etcd transactions ------------------------ */

/* The compare and the operation of <o> into <cmps>, <ops>. 0, or an HTTP
 * status with <msg>. */
static int
write_op(struct etcd_cpool *cp, const char *pool,
         const struct membership_remote_op *o, json_t *cmps, json_t *ops,
         char *msg, size_t msglen)
{
    char key[768];
    json_t *cur = cp ? json_object_get(cp->records, o->name) : NULL;
    json_t *rec = NULL;
    char *text;

    if (!etcd_name_ok(o->name)) {
        snprintf(msg, msglen,
                 "member name \"%s\" cannot be an etcd key part: use 1 to 63 "
                 "letters, digits, '.', '_', ':' or '-'",
                 o->name);
        return 400;
    }
    if (o->op != 'a' && cur == NULL) {
        snprintf(msg, msglen, "no member record \"%s\" in etcd", o->name);
        return 404;
    }
    etcd_member_key(key, sizeof(key), pool, o->name);
    if (o->op == 'a') {
        rec = json_pack("{s:s,s:I,s:s,s:I}", "address", o->address, "weight",
                        (json_int_t)o->weight, "state", "up", "since",
                        (json_int_t)clock_wall_ms());
        json_array_append_new(cmps, json_pack("{s:o,s:s,s:s,s:s}", "key",
                                              etcd_jb64(key), "target",
                                              "CREATE", "result", "EQUAL",
                                              "create_revision", "0"));
    } else {
        json_array_append_new(
            cmps, json_pack("{s:o,s:s,s:s,s:I}", "key", etcd_jb64(key),
                            "target", "MOD", "result", "EQUAL", "mod_revision",
                            (json_int_t)etcd_jint(json_array_get(cur, 0))));
        if (o->op == 'u') {
            rec =
                json_loads(json_string_value(json_array_get(cur, 1)), 0, NULL);
            if (!json_is_object(rec)) {
                json_decref(rec);
                snprintf(msg, msglen,
                         "the record of \"%s\" in etcd is not a member record",
                         o->name);
                return 409;
            }
            if (o->weight > 0)
                json_object_set_new(rec, "weight", json_integer(o->weight));
            if (o->state != NULL)
                json_object_set_new(rec, "state", json_string(o->state));
            json_object_set_new(rec, "since",
                                json_integer((json_int_t)clock_wall_ms()));
        }
    }
    if (rec == NULL) {
        json_array_append_new(ops,
                              json_pack("{s:{s:o}}", "request_delete_range",
                                        "key", etcd_jb64(key)));
        return 0;
    }
    text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    json_array_append_new(ops, json_pack("{s:{s:o,s:o}}", "request_put", "key",
                                         etcd_jb64(key), "value",
                                         etcd_jb64(text ? text : "{}")));
    free(text);
    return 0;
}

void
etcd_member_write(struct pool *p, const struct membership_remote_op *ops,
                  size_t n, const json_t *migration,
                  membership_remote_done_fn *done, void *arg)
{
    struct etcd_cpool *cp = etcd_cpool_find(p->name);
    json_t *cmps, *jops;
    struct etcd_write *w;
    char msg[320];

    if (!etcd_ctl.up && etcd_ctl.lists == 0) {
        done(503, 0, "etcd has not been reached yet: nothing was changed", arg);
        return;
    }
    if (n == 0 || n >= ETCD_TXN_OPS_MAX) {
        snprintf(msg, sizeof(msg),
                 "a change is 1 to %d operations in one etcd transaction, "
                 "not %zu",
                 ETCD_TXN_OPS_MAX - 1, n);
        done(400, 0, msg, arg);
        return;
    }
    cmps = json_array();
    jops = json_array();
    for (size_t i = 0; i < n; i++) {
        int st = write_op(cp, p->name, &ops[i], cmps, jops, msg, sizeof(msg));
        for (size_t k = 0; st == 0 && k < i; k++)
            if (strcmp(ops[k].name, ops[i].name) == 0) {
                snprintf(msg, sizeof(msg),
                         "member \"%s\" is named twice in one change",
                         ops[i].name);
                st = 400;
            }
        if (st != 0) {
            json_decref(cmps);
            json_decref(jops);
            done(st, 0, msg, arg);
            return;
        }
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        json_decref(cmps);
        json_decref(jops);
        done(503, 0, "out of memory", arg);
        return;
    }
    if (migration != NULL) {
        char key[512], *text = json_dumps(migration, JSON_COMPACT);

        etcd_pool_key(key, sizeof(key), p->name, "migration");
        json_array_append_new(cmps, json_pack("{s:o,s:s,s:s,s:s}", "key",
                                              etcd_jb64(key), "target",
                                              "CREATE", "result", "EQUAL",
                                              "create_revision", "0"));
        json_array_append_new(jops, etcd_put_op(key, text ? text : "{}"));
        free(text);
    }
    w->txn = json_pack("{s:o,s:o}", "compare", cmps, "success", jops);
    snprintf(w->pool, sizeof(w->pool), "%s", p->name);
    w->done = done;
    w->arg = arg;
    etcd_write_queue(w);
}

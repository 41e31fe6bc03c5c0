/* membership_change.c -- runtime changes of one member (the admin API):
 * checked whole against the pool as it is, their report computed on the
 * builder thread, checked again, then applied (or written to etcd),
 * logged, persisted, and answered once the snapshot holding them is
 * published.
 * Part of control/membership (membership.c); shared with its parts in
 * membership_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/membership_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/text.h"
#include "conf/conf.h"
#include "conf/etcd_codec.h"
#include "control/migration.h"
#include "loop/builder.h"
#include "model/pool.h"
#include "model/state.h"

/* ---- runtime changes ----------------------------------------------------- */

/* The ramp a member entering the ring starts with. */
static double
entry_ramp(const struct pool *p)
{
    return p->cfg.slow_start_ms > 0 && p->cfg.ring.algo != CHASH_ALGO_JUMP
               ? 0.0
               : 1.0;
}

/* Does a change of <p>'s members move its data (migration: copy)? */
static bool
copies_on_change(const struct pool *p)
{
    return p->cfg.migration == CONF_MIGRATION_COPY;
}

int __attribute__((format(printf, 3, 4)))
membership_refuse(struct membership_result *res, int error, const char *fmt,
                  ...)
{
    va_list ap;

    res->error = error;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof(res->message), fmt, ap);
    va_end(ap);
    text_utf8_scrub(res->message);
    return -1;
}

/*
 * A network address must carry exactly one port. The weight is appended
 * to it to parse a `servers:` line, so "127.0.0.1" or "[::1]" would
 * silently become a member on port 1 (the weight read as the port).
 */
bool
membership_address_has_port(const char *a)
{
    const char *colon;

    if (a[0] == '/')
        return true;
    if (a[0] == '[' && (a = strchr(a, ']')) == NULL)
        return true; /* conf_parse_server names the missing ']' */
    colon = strchr(a, ':');
    return colon != NULL && colon[1] != '\0' && strchr(colon + 1, ':') == NULL;
}

/*
 * Whether <a> ("host:port", "[v6]:port", "/path") names its host
 * numerically. Runtime changes do not resolve names: getaddrinfo() on the
 * control thread would stall health checks, ramps and the API for as long
 * as a resolver takes (seconds, when it is down). Config files may use
 * names: they are resolved when the file is loaded.
 */
bool
membership_address_numeric(const char *a)
{
    char host[INET6_ADDRSTRLEN + 2];
    unsigned char buf[sizeof(struct in6_addr)];
    const char *end;
    size_t n;

    if (a[0] == '/')
        return true;
    if (a[0] == '[') {
        end = strchr(a, ']');
        if (end == NULL)
            return true; /* malformed: conf_parse_server says why */
        n = (size_t)(end - a - 1);
        if (n >= sizeof(host))
            return false;
        memcpy(host, a + 1, n);
        host[n] = '\0';
        return inet_pton(AF_INET6, host, buf) == 1;
    }
    end = strrchr(a, ':');
    n = end != NULL ? (size_t)(end - a) : strlen(a);
    if (n >= sizeof(host))
        return false;
    memcpy(host, a, n);
    host[n] = '\0';
    return inet_pton(AF_INET, host, buf) == 1;
}

/* A weight a runtime change may give <p>'s members. 0 or -1 (<res>). */
static int
weight_check(const struct pool *p, uint32_t w, struct membership_result *res)
{
    if (w > MEMBERSHIP_MAX_WEIGHT)
        return membership_refuse(res, MEMBERSHIP_EINVAL,
                                 "\"weight\" must be an integer in [0, %d]",
                                 MEMBERSHIP_MAX_WEIGHT);
    if (p->cfg.ring.algo == CHASH_ALGO_JUMP && w > 1)
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "pool %s uses jump, which takes weights 0 or 1 only", p->name);
    return 0;
}

/*
 * A runtime change in progress. Checked at once on the control thread;
 * its migration report computed on the builder thread; then applied,
 * logged, persisted, and answered once the snapshot holding it is
 * published (so a lookup right after the answer sees it).
 */
struct pending {
    struct report_job
        rj;         /* first: membership_report_job_free frees the whole */
    struct pool *p; /* (ref held) */
    struct membership_request rq; /* strings point into <name_arg> and
                                     <address_arg> */
    char *name_arg, *address_arg, *zone_arg;
    int source;
    bool dry;
    membership_done_fn *done;
    void *arg;
    struct membership_result res;
    uint64_t placement; /* the pool's placement count when checked */
    unsigned tries;
    /* the plan */
    struct conf_server cs; /* ADD: the member as parsed */
    bool have_cs;
    char name[TEXT_NAME_MAX + 1]; /* the member changed */
    uint32_t weight;              /* UPDATE: the weight and admin wanted */
    int admin;
    bool nothing;      /* UPDATE: already so */
    json_t *overrides; /* RESET: the entries dropped (owned) */
    struct server *s;  /* (ref held) once applied, for the log line */
    char op[32], detail[160], what[192];
    /* migration: copy */
    bool migrate; /* the change moves keys: a migration runs */
    uint64_t keys_total, keys_predicted;
};

static void pending_check(struct pending *pc);
static int probe_check(struct pending *pc);
static int reset_apply(struct pending *pc);
static int points_check(const struct pool *p, const char *name, uint32_t weight,
                        struct membership_result *res);

/* Answer and free <pc>. */
static void
pending_finish(struct pending *pc)
{
    pc->done(&pc->res, pc->arg);
    membership_result_deinit(&pc->res);
    free(pc->name_arg);
    free(pc->address_arg);
    free(pc->zone_arg);
    if (pc->have_cs)
        conf_server_deinit(&pc->cs);
    json_decref(pc->overrides);
    server_unref(pc->s);
    pool_unref(pc->p);
    membership_report_job_free(&pc->rj);
}

void
membership_report_flags(json_t *rep, bool dry_run, bool applied)
{
    json_object_set_new(rep, "dry_run", json_boolean(dry_run));
    json_object_set_new(rep, "applied", json_boolean(applied));
}

/* Its snapshot is live: log the change (over the routing views of the
 * publication, as every event is) and answer. */
static void
applied_published(struct pool *p, const struct pool_change *chg, void *arg)
{
    struct pending *pc = arg;

    if (pc->migrate && chg != NULL)
        migration_start(p);
    if (chg != NULL)
        membership_event_log(
            p, pc->s, pc->name, pc->what, chg,
            membership_json_num(json_object_get(pc->res.report, "moved"), -1));
    pending_finish(pc);
}

/* Apply the checked change. 0 or -1 (<pc>->res says why). */
static int
pending_apply(struct pending *pc)
{
    struct pool *p = pc->p;
    struct server *s = pool_server_find(p, pc->name);
    int old_state = s ? atomic_load(&s->state) : SERVER_REMOVED;
    uint32_t old_weight = s ? s->weight : 0;
    int old_admin = s ? s->admin : STATE_ADMIN_UP;
    int rc = 0;

    if (pc->migrate) {
        char err[512], change[300];

        const char *leaving[] = {pc->name};

        snprintf(change, sizeof(change), "%s %s", pc->op, pc->name);
        if (migration_prepare(
                p, change, leaving,
                pc->rq.op == MEMBERSHIP_REMOVE && copies_on_change(p) ? 1 : 0,
                pc->keys_predicted, pc->keys_total, err, sizeof(err)) != 0)
            return membership_refuse(&pc->res, MEMBERSHIP_ECONFLICT, "%s", err);
    }
    if (pc->migrate && pc->rq.op == MEMBERSHIP_REMOVE && copies_on_change(p)) {
        /* scale-in: out of the ring now, out of the pool once its keys
         * have moved (migration_prepare named it the one leaving) */
        if (s == NULL ||
            pool_member_set_admin(p, pc->name, STATE_ADMIN_DRAIN) != 0) {
            migration_cancel(p);
            return membership_refuse(&pc->res, MEMBERSHIP_ENOENT,
                                     "pool %s: cannot remove %s: %s", p->name,
                                     pc->name, strerror(errno));
        }
        snprintf(s->reason, sizeof(s->reason), "leaving: its keys move first");
        snprintf(pc->what, sizeof(pc->what),
                 "leaving (drained; removed once its keys have moved)");
        server_ref(s);
        pc->s = s;
        return 0;
    }
    switch (pc->rq.op) {
    case MEMBERSHIP_ADD:
        rc = pool_member_add(p, &pc->cs);
        s = pool_server_find(p, pc->name);
        snprintf(pc->what, sizeof(pc->what), "added");
        break;
    case MEMBERSHIP_REMOVE:
        if (s == NULL) {
            errno = ENOENT;
            rc = -1;
            break;
        }
        snprintf(s->reason, sizeof(s->reason), "by the operator");
        snprintf(pc->what, sizeof(pc->what), "removed");
        server_ref(s); /* the pool drops its own: kept for the log line */
        pc->s = s;
        rc = pool_member_remove(p, pc->name);
        s = NULL;
        break;
    case MEMBERSHIP_RESET:
        rc = reset_apply(pc);
        snprintf(pc->what, sizeof(pc->what), "runtime overrides dropped (%zu)",
                 json_array_size(pc->overrides));
        s = pc->rq.name ? pool_server_find(p, pc->rq.name) : NULL;
        break;
    case MEMBERSHIP_UPDATE:
        if (s == NULL) {
            errno = ENOENT;
            rc = -1;
            break;
        }
        if (pc->weight != old_weight)
            rc = pool_member_set_weight(p, pc->name, pc->weight);
        if (rc == 0 && pc->admin != old_admin)
            rc = pool_member_set_admin(p, pc->name, pc->admin);
        if (pc->admin != old_admin)
            snprintf(pc->what, sizeof(pc->what), "%s -> %s%s%s",
                     server_state_name(old_state),
                     server_state_name(atomic_load(&s->state)),
                     pc->weight != old_weight ? ", " : "",
                     pc->weight != old_weight ? pc->detail : "");
        else
            snprintf(pc->what, sizeof(pc->what), "%s%s", pc->detail,
                     s->ramping ? ", ramping" : "");
        break;
    }
    if (rc != 0 && pc->migrate)
        migration_cancel(p);
    if (rc != 0)
        return membership_refuse(&pc->res,
                                 errno == EEXIST   ? MEMBERSHIP_ECONFLICT
                                 : errno == ENOENT ? MEMBERSHIP_ENOENT
                                 : errno == EINVAL ? MEMBERSHIP_EINVAL
                                                   : MEMBERSHIP_ENOMEM,
                                 "pool %s: cannot change %s: %s", p->name,
                                 pc->name, strerror(errno));
    if (s != NULL) {
        server_ref(s);
        pc->s = s;
    }
    return 0;
}

/* What etcd said of a write (the remote write's <status>, <rev>, <msg>)
 * into <res>, whose report was computed before the write. */
void
membership_etcd_result(struct membership_result *res, const char *pool,
                       int status, uint64_t rev, const char *msg)
{
    if (status != 0 && status != MEMBERSHIP_WRITTEN_NOT_APPLIED) {
        json_decref(res->report);
        res->report = NULL;
        membership_refuse(res,
                          status == 400   ? MEMBERSHIP_EINVAL
                          : status == 404 ? MEMBERSHIP_ENOENT
                          : status == 409 ? MEMBERSHIP_ECONFLICT
                                          : MEMBERSHIP_EUNAVAIL,
                          "pool %s: %s", pool, msg);
        return;
    }
    membership_report_flags(res->report, false, true);
    json_object_set_new(res->report, "etcd_revision",
                        json_integer((json_int_t)rev));
    if (status == MEMBERSHIP_WRITTEN_NOT_APPLIED)
        json_object_set_new(res->report, "warning", json_string(msg));
}

/* etcd answered the write of a change (and, when it took, this instance
 * has applied it): answer the caller. */
static void
etcd_written(int status, uint64_t rev, const char *msg, void *arg)
{
    struct pending *pc = arg;

    membership_etcd_result(&pc->res, pc->p->name, status, rev, msg);
    if (status == 0 && pc->migrate && pc->p->mig_view != NULL &&
        pc->res.report != NULL)
        json_object_set_new(
            pc->res.report, "migration",
            json_pack("{s:I,s:I}", "epoch", (json_int_t)pc->p->mig_view->epoch,
                      "keys_predicted", (json_int_t)pc->keys_predicted));
    pending_finish(pc);
}

/* Write <pc>'s checked change to etcd instead of applying it here; with
 * the migration it starts when keys move (migration: copy): every
 * instance runs it from etcd. */
static void
etcd_submit(struct pending *pc)
{
    struct server *s = pool_server_find(pc->p, pc->name);
    struct membership_remote_op op = {.name = pc->name};
    json_t *desc = NULL;
    bool copy = pc->migrate && copies_on_change(pc->p);
    bool leave = copy && pc->rq.op == MEMBERSHIP_REMOVE;

    switch (pc->rq.op) {
    case MEMBERSHIP_ADD:
        op.op = 'a';
        op.address = pc->cs.addr.text;
        op.weight = pc->cs.weight;
        break;
    case MEMBERSHIP_REMOVE:
        op.op = 'r';
        if (leave) {
            /* out of the ring now; its record goes once its keys moved */
            op.op = 'u';
            op.state = "drain";
        }
        break;
    case MEMBERSHIP_UPDATE:
        op.op = 'u';
        if (s != NULL && pc->admin != s->admin)
            op.state = state_admin_name(pc->admin);
        if (s != NULL && pc->weight != s->weight)
            op.weight = pc->weight;
        break;
    default:
        etcd_written(409, 0,
                     "etcd holds this pool's members: there is no runtime "
                     "override to reset",
                     pc);
        return;
    }
    if (copy) {
        char change[300];
        const char *leaving[] = {pc->name};

        snprintf(change, sizeof(change), "%s %s", pc->op, pc->name);
        desc = migration_etcd_descriptor(pc->p, change, leaving, leave ? 1 : 0,
                                         pc->keys_predicted, pc->keys_total);
        if (desc == NULL) {
            etcd_written(503, 0, "out of memory", pc);
            return;
        }
    }
    membership_shared.remote.write(pc->p, &op, 1, desc, etcd_written, pc);
    json_decref(desc);
}

/*
 * A change of a pool that does not move data, its report in hand: say
 * what it leaves out of reach, and refuse it without "force" -- the one
 * refusal that keeps its report, whose figures say why. Whether refused.
 */
static bool
hides_refused(struct pending *pc)
{
    struct pool *p = pc->p;

    if (!membership_pool_hides(p) || pc->nothing ||
        !membership_unreachable_report(p, pc->res.report, &pc->rj,
                                       pc->rq.force) ||
        pc->dry || pc->rq.force)
        return false;
    membership_refuse(
        &pc->res, MEMBERSHIP_ECONFLICT,
        "pool %s: %s %s refused: %s; nothing was changed; \"force\": "
        "true applies it anyway",
        p->name, pc->op, pc->name,
        json_string_value(json_object_get(pc->res.report, "data_warning")));
    membership_report_flags(pc->res.report, false, false);
    return true;
}

/* The report is computed (builder thread): check the world did not change
 * meanwhile, apply, answer once published. */
static void
pending_reported(struct report_job *rj)
{
    struct pending *pc = (struct pending *)rj;
    struct pool *p = pc->p;
    char warn[512];

    if (rj->report == NULL) {
        membership_refuse(&pc->res,
                          rj->job.cancelled ? MEMBERSHIP_ENOMEM
                                            : MEMBERSHIP_ECONFLICT,
                          "pool %s: %s", p->name, rj->err);
        pending_finish(pc);
        return;
    }
    if (p->removed) {
        membership_refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                          "pool %s was removed (by a reload) meanwhile",
                          p->name);
        pending_finish(pc);
        return;
    }
    if (p->placement != pc->placement) {
        /* Another change (an API call, a reload) came in while the report
         * was computed: check again against the pool as it is now. */
        if (pc->tries++ < 5) {
            pending_check(pc);
            return;
        }
        membership_refuse(
            &pc->res, MEMBERSHIP_ECONFLICT,
            "pool %s keeps changing; nothing was changed, try again", p->name);
        pending_finish(pc);
        return;
    }
    pc->res.report = rj->report;
    rj->report = NULL;
    if (pc->overrides != NULL)
        json_object_set_new(
            pc->res.report, "dropped",
            json_integer((json_int_t)json_array_size(pc->overrides)));
    if (copies_on_change(p) && !pc->nothing && probe_check(pc) != 0) {
        json_decref(pc->res.report);
        pc->res.report = NULL;
        pending_finish(pc);
        return;
    }
    if (hides_refused(pc)) {
        pending_finish(pc);
        return;
    }
    if (p->cfg.migration == CONF_MIGRATION_WARMUP && !pc->nothing &&
        pc->rq.op != MEMBERSHIP_RESET)
        pc->migrate = membership_json_num(
                          json_object_get(pc->res.report, "moved"), -1) > 0;
    if (pc->dry || pc->nothing) {
        /* Asking for the state a member is already in changes nothing:
         * a 200 that says so, not an error (PATCH is idempotent). */
        membership_report_flags(pc->res.report, pc->dry, false);
        if (!pc->dry)
            json_object_set_new(pc->res.report, "note",
                                json_string("nothing to change"));
        pending_finish(pc);
        return;
    }
    if (membership_remote_owns(p)) {
        /* the change goes to etcd; every instance applies it from there */
        etcd_submit(pc);
        return;
    }
    if (pending_apply(pc) != 0) {
        json_decref(pc->res.report);
        pc->res.report = NULL;
        pending_finish(pc);
        return;
    }
    membership_report_flags(pc->res.report, false, true);
    if (pc->migrate && p->migration != NULL)
        json_object_set_new(
            pc->res.report, "migration",
            json_pack("{s:I,s:I,s:s}", "epoch", (json_int_t)p->mig_view->epoch,
                      "keys_predicted", (json_int_t)pc->keys_predicted, "phase",
                      copies_on_change(p) ? "draining" : "warming"));
    if (pc->overrides != NULL)
        json_object_set_new(
            pc->res.report, "dropped",
            json_integer((json_int_t)json_array_size(pc->overrides)));
    membership_change_log(p->name, pc->name, pc->op, pc->source, pc->detail,
                          pc->res.report);
    if (membership_state_persist(p, warn, sizeof(warn)) != 0)
        json_object_set_new(pc->res.report, "warning", json_string(warn));
    if (pool_on_published(p, applied_published, pc) != 0)
        pending_finish(pc);
}

/* A copy pool's change: its members (and a joining one) are asked for
 * their key counts on the builder thread; a joining member with `force`
 * is emptied first. 0 or -1 (out of memory). */
static int
probe_setup(struct pending *pc)
{
    struct pool *p = pc->p;
    struct report_job *rj = &pc->rj;
    size_t n = 0;

    membership_probe_free(rj);
    rj->joiner = rj->leaver = -1;
    rj->addrs = calloc(p->nservers + 1, sizeof(*rj->addrs));
    rj->keys = calloc(p->nservers + 1, sizeof(*rj->keys));
    if (rj->addrs == NULL || rj->keys == NULL)
        return -1;
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!membership_server_member(s) || s->addr.family == AF_UNIX)
            continue;
        if (pc->rq.op == MEMBERSHIP_REMOVE && pc->rq.now &&
            strcmp(s->name, pc->name) == 0)
            rj->leaver = (int)n;
        if ((rj->addrs[n++] = strdup(s->addr.text)) == NULL)
            return -1;
    }
    if (pc->rq.op == MEMBERSHIP_ADD && pc->have_cs) {
        rj->joiner = (int)n;
        if ((rj->addrs[n++] = strdup(pc->cs.addr.text)) == NULL)
            return -1;
    }
    if (p->cfg.redis_auth != NULL &&
        (rj->auth = strdup(p->cfg.redis_auth)) == NULL)
        return -1;
    rj->probe.addresses = (const char **)rj->addrs;
    rj->probe.n = n;
    rj->probe.auth = rj->auth;
    rj->probe.db = p->cfg.redis_db;
    rj->probe.flush = pc->rq.force && !pc->dry ? rj->joiner : -1;
    rj->probe.timeout_ms = 1000;
    rj->probe.keys = rj->keys;
    return 0;
}

/* A copy pool's change, its report and probe in hand: refuse a joining
 * member that holds keys; say how many keys move (or are lost). 0 or -1
 * (refused). */
static int
probe_check(struct pending *pc)
{
    struct report_job *rj = &pc->rj;
    json_t *rep = pc->res.report;
    double moved = membership_json_num(json_object_get(rep, "moved"), -1);
    uint64_t total = 0;
    bool known = true;

    for (size_t i = 0; i < rj->probe.n; i++) {
        if ((int)i == rj->joiner)
            continue;
        if (rj->keys[i] < 0)
            known = false;
        else
            total += (uint64_t)rj->keys[i];
    }
    if (rj->joiner >= 0 && rj->keys[rj->joiner] != 0) {
        if (rj->keys[rj->joiner] < 0)
            return membership_refuse(
                &pc->res, MEMBERSHIP_ECONFLICT,
                "pool %s: cannot add %s (%s): %s; a joining "
                "member must be empty and reachable",
                pc->p->name, pc->name, rj->addrs[rj->joiner], rj->probe.why);
        if (!pc->dry || !pc->rq.force)
            return membership_refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                                     "pool %s: member %s (%s) holds %" PRId64
                                     " keys: a joining member must be empty "
                                     "(\"force\": true flushes it)",
                                     pc->p->name, pc->name,
                                     rj->addrs[rj->joiner],
                                     rj->keys[rj->joiner]);
    }
    pc->keys_total = total;
    pc->keys_predicted =
        moved > 0 ? (uint64_t)(moved * (double)total + 0.5) : 0;
    json_object_set_new(rep, "keys_total",
                        known ? json_integer((json_int_t)total) : json_null());
    if (pc->rq.op == MEMBERSHIP_REMOVE && pc->rq.now) {
        json_object_set_new(rep, "lost_keys",
                            rj->leaver >= 0 && rj->keys[rj->leaver] >= 0
                                ? json_integer(rj->keys[rj->leaver])
                                : json_null());
        json_object_set_new(rep, "keys_to_move", json_integer(0));
        return 0;
    }
    json_object_set_new(rep, "keys_to_move",
                        known ? json_integer((json_int_t)pc->keys_predicted)
                              : json_null());
    pc->migrate = moved > 0;
    if (pc->migrate && pc->rq.op == MEMBERSHIP_RESET)
        return membership_refuse(
            &pc->res, MEMBERSHIP_ECONFLICT,
            "pool %s: dropping the overrides would move keys "
            "(migration: copy): make those changes one at a time",
            pc->p->name);
    return 0;
}

/* Submit the report of <b> -> <a> for <pc> (the models are copied). */
static void
pending_submit(struct pending *pc, const struct model *b, const struct model *a)
{
    struct pool *p = pc->p;
    struct report_job *rj = &pc->rj;

    membership_members_free(rj->before, rj->nb);
    membership_members_free(rj->after, rj->na);
    free(rj->changed);
    rj->before = rj->after = NULL;
    rj->changed = NULL;
    if (!membership_pool_comparable(p)) {
        /* modula/random: no ring, no exact report; say so. */
        if (a->n == 0) {
            membership_refuse(
                &pc->res, MEMBERSHIP_ECONFLICT,
                "the change would leave pool %s with no member in the "
                "ring",
                p->name);
            pending_finish(pc);
            return;
        }
        pc->placement = p->placement;
        rj->report = json_pack("{s:n,s:n,s:[],s:n,s:b,s:s}", "moved", "optimal",
                               "flows", "immediate", "exact", 0, "note",
                               "this distribution is not consistent hashing: "
                               "no migration report");
        pending_reported(rj);
        return;
    }
    if (membership_report_job_init(rj, p, b->m, b->n, a->m, a->n, pc->name,
                                   pc->have_cs ? pc->cs.name : NULL,
                                   pc->have_cs ? pc->cs.zone : NULL) != 0) {
        membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
        pending_finish(pc);
        return;
    }
    pc->placement = p->placement;
    if ((copies_on_change(p) && probe_setup(pc) != 0) ||
        (membership_pool_hides(p) && membership_count_setup(rj, p) != 0)) {
        membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
        pending_finish(pc);
        return;
    }
    builder_submit(&rj->job);
}

/* Long (about 110 lines): every check an add must pass (name, address,
 * weight, points, a conflicting member), one after the other, each a few
 * lines ending in its refusal. */
static int
check_add(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const struct membership_request *rq = &pc->rq;
    struct membership_result *res = &pc->res;
    struct server *s;
    char line[1024], err[256], self[256];

    pc->weight = rq->has_weight ? rq->weight : 1;
    if (rq->address == NULL || rq->address[0] == '\0')
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "\"address\" must be a non-empty string (host:port, "
            "[v6]:port or /unix/path)");
    if (rq->name != NULL && !text_name_ok(rq->name))
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "\"name\" must be a string of 1 to %d printable "
            "characters without spaces or '/'",
            TEXT_NAME_MAX);
    if (weight_check(p, pc->weight, res) != 0)
        return -1;
    if (strchr(rq->address, ' ') != NULL ||
        text_has_control(rq->address, strlen(rq->address)))
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "bad \"address\" \"%s\": contains a space or a "
            "control character",
            rq->address);
    if (!membership_address_has_port(rq->address))
        return membership_refuse(res, MEMBERSHIP_EINVAL,
                                 "bad \"address\" \"%s\": expected host:port, "
                                 "[v6]:port or /unix/path (the weight goes in "
                                 "\"weight\")",
                                 rq->address);
    if (!membership_address_numeric(rq->address))
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "bad \"address\" \"%s\": give a numeric address; "
            "chashd resolves host names only when it loads its "
            "config (a resolver on the control thread would "
            "stall health checks and this API)",
            rq->address);
    if (pc->have_cs) {
        conf_server_deinit(&pc->cs);
        pc->have_cs = false;
    }
    /* Parse as a `servers:` entry so names and addresses follow the
     * config's rules exactly (twemproxy's default name included). */
    snprintf(line, sizeof(line), "%s:%u%s%s", rq->address, pc->weight,
             rq->name ? " " : "", rq->name ? rq->name : "");
    if (conf_parse_server(line, &pc->cs, err, sizeof(err)) != 0)
        return membership_refuse(res, MEMBERSHIP_EINVAL,
                                 "bad \"address\" \"%s\": %s", rq->address,
                                 err);
    pc->have_cs = true;
    if (rq->zone != NULL && !etcd_name_ok(rq->zone))
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "bad \"zone\" \"%s\": use 1 to 63 letters, digits, "
            "'.', '_', ':' or '-'",
            rq->zone);
    if (rq->zone == NULL && p->cfg.zone_policy == CONF_ZONE_HIERARCHICAL)
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "pool %s places a zone, then a member "
            "(zone_policy: hierarchical): give the new member's "
            "\"zone\"",
            p->name);
    if (rq->zone != NULL && (pc->cs.zone = strdup(rq->zone)) == NULL)
        return membership_refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    if (!text_name_ok(pc->cs.name))
        return membership_refuse(res, MEMBERSHIP_EINVAL,
                                 "member name \"%s\" is not valid here: give a "
                                 "\"name\"",
                                 pc->cs.name);
    snprintf(pc->name, sizeof(pc->name), "%s", pc->cs.name);
    s = pool_server_find(p, pc->name);
    if (s != NULL && membership_server_member(s))
        return membership_refuse(res, MEMBERSHIP_ECONFLICT,
                                 "pool %s already has a member named \"%s\"",
                                 p->name, pc->name);
    for (size_t i = 0; i < p->nservers; i++) {
        s = p->servers[i];
        if (membership_server_member(s) &&
            conf_addr_equal(&s->addr, &pc->cs.addr))
            return membership_refuse(
                res, MEMBERSHIP_ECONFLICT,
                "address %s is already member \"%s\" of pool %s",
                pc->cs.addr.text, s->name, p->name);
    }
    if (membership_shared.running_conf != NULL &&
        conf_self_address(membership_shared.running_conf, &pc->cs.addr, self,
                          sizeof(self)) != NULL)
        return membership_refuse(
            res, MEMBERSHIP_EINVAL,
            "address %s is chashd's own, %s: chashd would connect "
            "to itself",
            pc->cs.addr.text, self);
    if (points_check(p, pc->name, pc->weight, res) != 0)
        return -1;
    snprintf(pc->op, sizeof(pc->op), "add");
    snprintf(pc->detail, sizeof(pc->detail), "%s weight %u", pc->cs.addr.text,
             pc->weight);
    if (membership_model_build(p, NULL, b) != 0 ||
        membership_model_build(p, NULL, a) != 0 ||
        membership_model_push(a, pc->name, pc->weight, entry_ramp(p)) != 0)
        return membership_refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    return 0;
}

static int
check_remove(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const char *name = pc->rq.name;
    struct server *s = name ? pool_server_find(p, name) : NULL;
    size_t members = 0;

    if (s == NULL || !membership_server_member(s))
        return membership_refuse(&pc->res, MEMBERSHIP_ENOENT,
                                 "pool %s has no member named \"%s\"", p->name,
                                 name ? name : "");
    for (size_t i = 0; i < p->nservers; i++)
        members += membership_server_member(p->servers[i]);
    if (members <= 1)
        return membership_refuse(
            &pc->res, MEMBERSHIP_ECONFLICT,
            "cannot remove \"%s\": it is the last member of pool "
            "%s",
            s->name, p->name);
    snprintf(pc->name, sizeof(pc->name), "%s", s->name);
    snprintf(pc->op, sizeof(pc->op), "remove");
    snprintf(pc->detail, sizeof(pc->detail), "%s weight %u", s->addr.text,
             s->weight);
    if (membership_model_build(p, NULL, b) != 0 ||
        membership_model_build(p, pc->name, a) != 0)
        return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    return 0;
}

static int
check_update(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const struct membership_request *rq = &pc->rq;
    struct server *s = rq->name ? pool_server_find(p, rq->name) : NULL;
    size_t l;

    if (s == NULL || !membership_server_member(s))
        return membership_refuse(&pc->res, MEMBERSHIP_ENOENT,
                                 "pool %s has no member named \"%s\"", p->name,
                                 rq->name ? rq->name : "");
    if (!rq->has_weight && !rq->has_admin)
        return membership_refuse(&pc->res, MEMBERSHIP_EINVAL,
                                 "nothing to change: give \"weight\" and/or "
                                 "\"state\"");
    pc->weight = rq->has_weight ? rq->weight : s->weight;
    pc->admin = rq->has_admin ? rq->admin : s->admin;
    if (weight_check(p, pc->weight, &pc->res) != 0)
        return -1;
    if (pc->admin < STATE_ADMIN_UP || pc->admin > STATE_ADMIN_MAINT)
        return membership_refuse(&pc->res, MEMBERSHIP_EINVAL,
                                 "\"state\" must be \"up\", \"drain\" or "
                                 "\"maint\"");
    if (pc->weight > s->weight &&
        points_check(p, s->name, pc->weight, &pc->res) != 0)
        return -1;
    snprintf(pc->name, sizeof(pc->name), "%s", s->name);
    pc->op[0] = pc->detail[0] = '\0';
    if (pc->weight != s->weight) {
        snprintf(pc->op, sizeof(pc->op), "weight");
        snprintf(pc->detail, sizeof(pc->detail), "weight %u -> %u", s->weight,
                 pc->weight);
    }
    if (pc->admin != s->admin) {
        l = strlen(pc->op);
        snprintf(pc->op + l, sizeof(pc->op) - l, "%s%s", l ? "+" : "",
                 state_admin_name(pc->admin));
        l = strlen(pc->detail);
        snprintf(pc->detail + l, sizeof(pc->detail) - l, "%s%s -> %s",
                 l ? ", " : "", state_admin_name(s->admin),
                 state_admin_name(pc->admin));
    }
    pc->nothing = pc->op[0] == '\0';
    /* The model after: the member in the ring when its admin is up, at its
     * new weight; a member entering the ring starts its slow start, one
     * whose weight rises continues from what it owns. */
    if (membership_model_build(p, NULL, b) != 0 ||
        membership_model_build(p, pc->name, a) != 0)
        return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    if (pc->admin == STATE_ADMIN_UP) {
        double ramp = entry_ramp(p);

        if (s->admin == STATE_ADMIN_UP) {
            double owned = (double)s->weight * s->ramp;
            ramp = pc->weight <= s->weight || entry_ramp(p) == 1.0
                       ? s->ramp
                       : owned / (double)pc->weight;
        }
        if (membership_model_push(a, pc->name, pc->weight, ramp) != 0)
            return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM,
                                     "out of memory");
    }
    return 0;
}

/*
 * Whether <p> with member <name> at <weight> (added when not a member)
 * stays within its max_points: a runtime change must not build a ring the
 * config would refuse (seconds of building, hundreds of megabytes). All
 * members count at full weight, drained ones too (they keep their points
 * on a failover ring). 0 or -1 (<res>).
 */
static int
points_check(const struct pool *p, const char *name, uint32_t weight,
             struct membership_result *res)
{
    struct chash_member *m = calloc(p->nservers + 1, sizeof(*m));
    size_t n = 0;
    bool found = false;
    uint64_t points;

    if (m == NULL)
        return membership_refuse(res, MEMBERSHIP_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];

        if (!membership_server_member(s) || s->admin == STATE_ADMIN_MAINT)
            continue;
        m[n].name = s->name;
        m[n].weight = s->weight;
        m[n].ramp = 1;
        if (strcmp(s->name, name) == 0) {
            m[n].weight = weight;
            found = true;
        }
        n++;
    }
    if (!found) {
        m[n].name = name;
        m[n].weight = weight;
        m[n].ramp = 1;
        n++;
    }
    points = conf_ring_points(p->cfg.distribution, &p->cfg.ring, m, n);
    free(m);
    if (points > p->cfg.max_points)
        return membership_refuse(
            res, MEMBERSHIP_ECONFLICT,
            "pool %s would need %llu ring points, over its "
            "max_points %u (lower the weight, or raise max_points "
            "in the config)",
            p->name, (unsigned long long)points, p->cfg.max_points);
    return 0;
}

/* The overrides of <p> (member <name>, NULL: all) the state file keeps,
 * as a new array (empty when none), or NULL when out of memory. */
static json_t *
overrides_of(const struct pool *p, const char *name)
{
    json_t *all, *mine = json_array();
    size_t i;
    json_t *e;

    if (membership_shared.state == NULL ||
        membership_shared.running_conf == NULL)
        return mine;
    all = state_overrides_json(membership_shared.state,
                               membership_shared.running_conf);
    if (all == NULL) {
        json_decref(mine);
        return NULL;
    }
    json_array_foreach(all, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "pool")), p->name))
            continue;
        if (name != NULL &&
            strcmp(json_string_value(json_object_get(e, "member")), name))
            continue;
        json_array_append(mine, e);
    }
    json_decref(all);
    return mine;
}

/* The override of <what> for <member> in <ov>, or NULL. */
static const json_t *
override_find(const json_t *ov, const char *member, const char *what)
{
    size_t i;
    json_t *e;

    json_array_foreach(ov, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "member")), member) ==
                0 &&
            strcmp(json_string_value(json_object_get(e, "what")), what) == 0)
            return e;
    }
    return NULL;
}

/*
 * RESET: back to the config for member rq.name (NULL: the whole pool):
 * the members added at run time leave, those removed come back, weights,
 * states and addresses return to what the config writes.
 */
static int
check_reset(struct pending *pc, struct model *b, struct model *a)
{
    struct pool *p = pc->p;
    const char *name = pc->rq.name;
    size_t i;
    json_t *e;

    json_decref(pc->overrides);
    pc->overrides = overrides_of(p, name);
    if (pc->overrides == NULL)
        return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    if (json_array_size(pc->overrides) == 0) {
        if (name != NULL)
            return membership_refuse(
                &pc->res, MEMBERSHIP_ENOENT,
                "pool %s: member \"%s\" has no runtime override", p->name,
                name);
        return membership_refuse(&pc->res, MEMBERSHIP_ENOENT,
                                 "pool %s has no runtime override", p->name);
    }
    snprintf(pc->name, sizeof(pc->name), "%s", name ? name : "*");
    snprintf(pc->op, sizeof(pc->op), "reset");
    snprintf(pc->detail, sizeof(pc->detail), "%zu override%s dropped",
             json_array_size(pc->overrides),
             json_array_size(pc->overrides) == 1 ? "" : "s");
    if (membership_model_build(p, NULL, b) != 0)
        return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
    /* The placement after: every member as the config writes it. */
    memset(a, 0, sizeof(*a));
    for (i = 0; i < p->nservers; i++) {
        const struct server *s = p->servers[i];
        const json_t *w = override_find(pc->overrides, s->name, "weight");
        bool up = s->admin == STATE_ADMIN_UP ||
                  override_find(pc->overrides, s->name, "state") != NULL;

        if (!membership_server_member(s) ||
            override_find(pc->overrides, s->name, "added") != NULL || !up)
            continue;
        if (membership_model_push(
                a, s->name,
                w ? (uint32_t)json_integer_value(json_object_get(w, "config"))
                  : s->weight,
                s->admin == STATE_ADMIN_UP ? s->ramp : entry_ramp(p)))
            return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM,
                                     "out of memory");
    }
    json_array_foreach(pc->overrides, i, e)
    {
        const json_t *cfg = json_object_get(e, "config");

        if (strcmp(json_string_value(json_object_get(e, "what")), "removed"))
            continue;
        if (membership_model_push(
                a, json_string_value(json_object_get(e, "member")),
                (uint32_t)json_integer_value(json_object_get(cfg, "weight")),
                entry_ramp(p)) != 0)
            return membership_refuse(&pc->res, MEMBERSHIP_ENOMEM,
                                     "out of memory");
    }
    if (a->n == 0)
        return membership_refuse(&pc->res, MEMBERSHIP_ECONFLICT,
                                 "pool %s would have no member in the ring",
                                 p->name);
    return 0;
}

/* Add <name> at <address> with <weight> as a `servers:` line would. */
static int
member_add_line(struct pool *p, const char *name, const char *address,
                uint32_t weight)
{
    struct conf_server cs = {0};
    char line[1024], err[256];
    int rc;

    snprintf(line, sizeof(line), "%s:%u %s", address, weight, name);
    if (conf_parse_server(line, &cs, err, sizeof(err)) != 0) {
        log_error("pool %s: cannot put back %s at %s: %s", p->name, name,
                  address, err);
        errno = EINVAL;
        return -1;
    }
    rc = pool_member_add(p, &cs);
    conf_server_deinit(&cs);
    return rc;
}

/* Apply a checked RESET: members first, then weights, then states. */
static int
reset_apply(struct pending *pc)
{
    struct pool *p = pc->p;
    size_t i;
    json_t *e;

    for (int pass = 0; pass < 3; pass++) {
        json_array_foreach(pc->overrides, i, e)
        {
            const char *member =
                json_string_value(json_object_get(e, "member"));
            const char *what = json_string_value(json_object_get(e, "what"));
            const json_t *cfg = json_object_get(e, "config");
            struct server *s = pool_server_find(p, member);
            int rc = 0;

            if (pass == 0 && strcmp(what, "added") == 0) {
                rc = pool_member_remove(p, member);
            } else if (pass == 0 && strcmp(what, "removed") == 0) {
                rc = member_add_line(
                    p, member,
                    json_string_value(json_object_get(cfg, "address")),
                    (uint32_t)json_integer_value(
                        json_object_get(cfg, "weight")));
            } else if (pass == 0 && strcmp(what, "address") == 0 && s) {
                uint32_t w = s->weight;

                rc = pool_member_remove(p, member);
                if (rc == 0)
                    rc = member_add_line(p, member, json_string_value(cfg), w);
            } else if (pass == 1 && strcmp(what, "weight") == 0 && s) {
                rc = pool_member_set_weight(p, member,
                                            (uint32_t)json_integer_value(cfg));
            } else if (pass == 2 && strcmp(what, "state") == 0 && s) {
                rc = pool_member_set_admin(p, member, STATE_ADMIN_UP);
            }
            if (rc != 0)
                return -1;
        }
    }
    return 0;
}

/* Check <pc> against the pool as it is now; refuse, or submit its
 * report. */
static void
pending_check(struct pending *pc)
{
    struct model b = {0}, a = {0};
    int rc;

    memset(&pc->res, 0, sizeof(pc->res));
    if (migration_exclusive(pc->p) && !pc->dry) {
        char why[400];

        migration_busy(pc->p, why, sizeof(why));
        membership_refuse(&pc->res, MEMBERSHIP_ECONFLICT, "%s", why);
        pending_finish(pc);
        return;
    }
    switch (pc->rq.op) {
    case MEMBERSHIP_ADD:
        rc = check_add(pc, &b, &a);
        break;
    case MEMBERSHIP_REMOVE:
        rc = check_remove(pc, &b, &a);
        break;
    case MEMBERSHIP_UPDATE:
        rc = check_update(pc, &b, &a);
        break;
    case MEMBERSHIP_RESET:
        rc = check_reset(pc, &b, &a);
        break;
    default:
        rc = membership_refuse(&pc->res, MEMBERSHIP_EINVAL,
                               "unknown membership change");
        break;
    }
    if (rc != 0)
        pending_finish(pc);
    else
        pending_submit(pc, &b, &a);
    free(b.m);
    free(a.m);
}

void
membership_change(struct pool *p, const struct membership_request *rq,
                  int source, bool dry_run, membership_done_fn *done, void *arg)
{
    struct pending *pc = calloc(1, sizeof(*pc));

    if (pc == NULL) {
        struct membership_result res = {.error = MEMBERSHIP_ENOMEM};

        snprintf(res.message, sizeof(res.message), "out of memory");
        done(&res, arg);
        return;
    }
    pc->rj.then = pending_reported;
    pc->rj.job.work = membership_report_work;
    pc->rj.job.done = membership_report_done;
    pc->p = p;
    pool_ref(p);
    pc->rq = *rq;
    pc->name_arg = rq->name ? strdup(rq->name) : NULL;
    pc->address_arg = rq->address ? strdup(rq->address) : NULL;
    pc->zone_arg = rq->zone ? strdup(rq->zone) : NULL;
    pc->rq.name = pc->name_arg;
    pc->rq.address = pc->address_arg;
    pc->rq.zone = pc->zone_arg;
    pc->source = source;
    pc->dry = dry_run;
    pc->done = done;
    pc->arg = arg;
    if ((rq->name && !pc->name_arg) || (rq->address && !pc->address_arg) ||
        (rq->zone && !pc->zone_arg)) {
        membership_refuse(&pc->res, MEMBERSHIP_ENOMEM, "out of memory");
        pending_finish(pc);
        return;
    }
    if (rq->op == MEMBERSHIP_RESET && membership_remote_owns(p)) {
        membership_refuse(
            &pc->res, MEMBERSHIP_ECONFLICT,
            "pool %s takes its members from etcd: there is no runtime "
            "override to reset (etcd's records are its membership)",
            p->name);
        pending_finish(pc);
        return;
    }
    pending_check(pc);
}

void
membership_result_deinit(struct membership_result *res)
{
    json_decref(res->report);
    res->report = NULL;
}

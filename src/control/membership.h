/* membership.h -- the one place that changes who is in a pool and reports
 * it: runtime changes (admin API, later etcd), reloads, health
 * transitions and finished ramps; the exact migration report of each; the
 * change log; and the state file that keeps runtime changes across
 * restarts and reloads. Control thread only. The module's files:
 * membership.c (the model, change log, events, state file, migrations,
 * a store's members), membership_report.c (reports on the builder
 * thread), membership_reload.c (reloads), membership_change.c (runtime
 * changes), membership_batch.c (a batch, one etcd transaction); they
 * share membership_int.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_MEMBERSHIP_H
#define CHASHD_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct conf;
struct pool;
struct server;

/* Largest weight a runtime change may give (the config may give more). */
#define MEMBERSHIP_MAX_WEIGHT 1000000

/*
 * What a change asks for:
 *   ADD     a member: <address> ("host:port", "[v6]:port", "/unix/path";
 *           numeric: no DNS on the control thread), <name> (NULL: the
 *           config's rule, twemproxy's), <weight> (1 when not given);
 *   REMOVE  member <name>;
 *   UPDATE  member <name>'s weight and/or admin state (up, drain, maint);
 *   RESET   drop the runtime overrides the state file keeps for member
 *           <name> (NULL: for the whole pool), back to the config.
 */
enum membership_op {
    MEMBERSHIP_ADD,
    MEMBERSHIP_REMOVE,
    MEMBERSHIP_UPDATE,
    MEMBERSHIP_RESET
};

/* Who asked: named in the change log. */
enum membership_source {
    MEMBERSHIP_ADMIN,  /* the admin API */
    MEMBERSHIP_RELOAD, /* SIGHUP */
    MEMBERSHIP_HEALTH, /* checks, ejection, ramps */
    MEMBERSHIP_ETCD,   /* records in etcd (etcd.c) */
    MEMBERSHIP_SOURCE_COUNT
};

struct membership_request {
    int op; /* enum membership_op */
    const char *name;
    const char *address;
    bool has_weight;
    uint32_t weight;
    bool has_admin;
    int admin;        /* enum state_admin */
    const char *zone; /* ADD: its zone (zone_policy: hierarchical) */
    /* Two meanings, never in the same pool: in a pool that does not move
     * data (see membership_change), apply a change that leaves keys out
     * of reach; in a migration: copy pool, ADD: empty a joining member
     * that holds keys. */
    bool force;
    bool now; /* migration: copy, REMOVE: at once, its keys not moved
                 (lost) */
};

/* Why a change was refused: the admin API maps these to 400, 404, 409,
 * 500. */
enum membership_error {
    MEMBERSHIP_OK = 0,
    MEMBERSHIP_EINVAL,    /* a bad argument */
    MEMBERSHIP_ENOENT,    /* no such member (or nothing to reset) */
    MEMBERSHIP_ECONFLICT, /* name or address taken, last member, no ring */
    MEMBERSHIP_ENOMEM,
    MEMBERSHIP_EUNAVAIL /* etcd cannot be reached (503) */
};

struct membership_result {
    int error;         /* enum membership_error */
    char message[512]; /* why, when refused */
    json_t *report;    /* the migration report (owned), on success:
                          moved, optimal, flows, immediate, exact,
                          dry_run, applied, and "warning" when the change
                          is live but the state file could not be written,
                          "note" when there was nothing to change; the
                          fields of a pool that does not move data (see
                          membership_change). Also on the one refusal
                          that has a report: a change that needs
                          "force" (MEMBERSHIP_ECONFLICT, applied false) */
};

/* etcd.c: the ring model of <p> before it applies etcd's records, and
 * the report of what they changed once applied (logged, in the change log
 * by source "etcd"; nothing when nothing changed). _report frees <mm>. */
struct membership_model;
struct membership_model *membership_model_take(struct pool *p);
void membership_model_report(struct pool *p, struct membership_model *mm,
                             const char *verb);

/* Register with the control loop (the ramp tick). 0 or -1. */
int membership_init(void);

/*
 * Pools whose members live in a shared store (etcd): their changes are
 * written there, and applied here when the store says so. The store
 * (control/etcd.c) registers itself while it runs; membership never names
 * it. A change of <p> is a list of operations (one transaction):
 *   op 'a' add <name> at <address> with <weight> (create if absent),
 *   op 'u' update <name>'s weight (<weight> > 0) and/or state (<state>
 *          "up", "drain", "maint"; NULL: unchanged), compare-and-swap on
 *          the record's revision,
 *   op 'r' remove <name> (guarded by its revision).
 * <done>(<status>, <rev>, <msg>, <arg>) runs once on the control thread:
 * status 0 once this instance has applied revision <rev>;
 * MEMBERSHIP_WRITTEN_NOT_APPLIED when the store took it (<rev>) but this
 * instance did not apply it in 10 s (<msg> says why); 400 a bad name or
 * too many operations; 404 no such record; 409 a record changed meanwhile
 * (or exists); 503 the store cannot be reached. Nothing changes unless
 * status is 0. <migration>, when not NULL, is the descriptor of the
 * migration the change starts (migration.h), created in the same
 * transaction, which fails (409) while another migration runs.
 */
#define MEMBERSHIP_WRITTEN_NOT_APPLIED 202
struct membership_remote_op {
    char op;
    const char *name;
    const char *address;
    uint32_t weight;
    const char *state;
};
typedef void membership_remote_done_fn(int status, uint64_t rev,
                                       const char *msg, void *arg);
struct membership_remote {
    /* whether <p> takes its members from the store */
    bool (*owns)(const struct pool *p);
    void (*write)(struct pool *p, const struct membership_remote_op *ops,
                  size_t n, const json_t *migration,
                  membership_remote_done_fn *done, void *arg);
};
/* Register the store (NULL: none runs). */
void membership_set_remote(const struct membership_remote *r);

/* Called once per membership_change(); <res> is valid during the call. */
typedef void membership_done_fn(struct membership_result *res, void *arg);

/*
 * Apply (or with <dry_run>, only report) <rq> on pool <p>. Everything is
 * checked before anything changes; a refused change changes nothing. The
 * migration report is computed on the builder thread, so the answer
 * comes later: <done>(<res>, <arg>) is called exactly once on the control
 * thread -- before this returns for a refusal, else once the change is
 * applied and the snapshot holding it published (a dry run: once the
 * report is ready). <res>->error is MEMBERSHIP_OK with <res>->report, or
 * says why with <res>->message.
 *
 * A store pool that does not move data -- mode redis or memcache with
 * migration: off and replicas: 1, twemproxy's way -- leaves every key on
 * the member that holds it: a key whose owner changes is out of reach.
 * Such a change (the report's "moved" > 0, or any change when the
 * distribution is not consistent hashing) is refused without <rq>->force
 * (MEMBERSHIP_ECONFLICT, the message gives the figure, <res>->report says
 * it too); a dry run and a forced change report it. The report then has
 *   unreachable       the fraction of the key space whose keys become
 *                     unreachable ("moved"; null: not computed), 0 when
 *                     the change moves nothing
 *   unreachable_keys  redis: about how many keys (report_keys_leaving
 *                     over the members' DBSIZE), null when not known
 *   keys_total        redis: the members' keys (DBSIZE), null when not
 *                     known
 *   data_warning      the figure in a sentence
 *   force_required    whether applying it needs "force"
 *   forced            "force" was given
 */
void membership_change(struct pool *p, const struct membership_request *rq,
                       int source, bool dry_run, membership_done_fn *done,
                       void *arg);
void membership_result_deinit(struct membership_result *res);

/*
 * Several changes of pool <p> at once (POST /api/pools/{pool}/changes):
 * for pools with `members_from: etcd`, written as ONE etcd transaction, so
 * every instance moves from one complete membership to the next at one
 * revision. Each op is ADD (<name>, <address>, <weight>), REMOVE (<name>)
 * or UPDATE (<name>, <weight> and/or <admin>). All are checked first; the
 * answer comes as membership_change()'s, with the report of the whole
 * batch and "etcd_revision". A pool that does not move data needs <force>
 * and reports as membership_change() says.
 */
struct membership_batch_op {
    int op; /* MEMBERSHIP_ADD, _REMOVE, _UPDATE */
    const char *name;
    const char *address;
    bool has_weight;
    uint32_t weight;
    bool has_admin;
    int admin;
};
void membership_batch(struct pool *p, const struct membership_batch_op *ops,
                      size_t n, bool dry_run, bool force,
                      membership_done_fn *done, void *arg);

/* Health (health.c): <s> observed <health> (enum server_health) for
 * <reason>; the change is applied, logged once and entered in the change
 * log with what it moved. */
void membership_health(struct server *s, int health, const char *reason);

/*
 * The state file. Call membership_state_apply() on every freshly loaded
 * config (start-up and reload) BEFORE pools are created or reconfigured
 * from it: the first call reads global.state_file (a missing file is an
 * empty state; a corrupt one is an error: the daemon refuses to start
 * rather than silently drop operators' changes), and every call applies
 * the runtime delta to <conf> (members added/removed, weights) in a
 * pending copy of the state, logging one line per member whose config the
 * state overrides. Then, AFTER pool_create()/pool_reconfigure(), call
 * membership_state_settle(): it commits the pending state (a reload
 * refused in between leaves the running one untouched), puts the members
 * the state drains or holds in maintenance into that state, and enters
 * what the reload changed in the change log. 0, or -1 with <err>.
 */
int membership_state_apply(struct conf *conf, char *err, size_t errlen);
/* <then>(<arg>) (may be NULL) runs once what the reload changed has been
 * reported (its reports are computed on the builder thread). */
void membership_state_settle(void (*then)(void *arg), void *arg);
/* A reload refused after membership_state_apply(): drop the pending copy. */
void membership_state_abandon(void);
/* Free everything (at exit). */
void membership_state_free(void);

/* GET /api/state: the delta, the file's path and the overrides. */
json_t *membership_state_json(void);

/* GET /api/changes: the last changes, newest first. */
json_t *membership_changes_json(void);

/* For the metrics: changes of <pool> so far, and the moved fraction of the
 * last one (0 when none). */
uint64_t membership_pool_changes(const char *pool, double *last_moved);

/* The migration the state file holds for <pool> (borrowed), or NULL. */
json_t *membership_migration_saved(const char *pool);

/* ==== a store's members (etcd): membership_apply_remote ===================
 *
 * One member the store holds for a pool: <server> its name, address and
 * weight (borrowed); <admin> its admin state (enum state_admin); <age_ms>
 * how long ago the store wrote it: a ramp the change starts began then,
 * so that every instance ramps alike.
 */
struct conf_server;
struct membership_remote_member {
    const struct conf_server *server;
    int admin;
    uint64_t age_ms;
};
/* Member <i> could not be added (<err>: an errno, EEXIST when its address
 * is another member's); called as it happens, so that what the store's
 * module logs about it comes in order. */
typedef void membership_remote_refused_fn(size_t i, int err, void *arg);
/*
 * Make pool <p> hold exactly the store's <members> (<n> of them, sorted by
 * name as strcmp orders them, names distinct): removals first (an address
 * may pass from one name to another: a member whose address changed is
 * removed, then added again), then changes of weight and admin state, then
 * additions; all in one control-loop step (the caller may hold them in
 * one snapshot with pool_batch). What changed is logged and entered in the
 * change log with its report, as <verb> ("etcd revision 42") by source
 * "etcd"; a removed member's reason is "removed in etcd". <refused> gets
 * each member that cannot be added. Control thread. Returns whether
 * anything changed.
 */
bool membership_apply_remote(struct pool *p,
                             const struct membership_remote_member *members,
                             size_t n, const char *verb,
                             membership_remote_refused_fn *refused, void *arg);

#endif /* CHASHD_MEMBERSHIP_H */

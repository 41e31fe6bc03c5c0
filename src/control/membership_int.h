/* membership_int.h -- what the files of the membership module share (not
 * for other modules: they use membership.h). membership.c holds the model
 * of a pool's placement, the change log, the events, the state file, the
 * migrations' host and the store's members, and owns the state below;
 * membership_report.c the reports on the builder thread;
 * membership_reload.c reloads; membership_change.c runtime changes;
 * membership_batch.c a batch of changes, one etcd transaction. Control
 * thread only, like the whole module (the builder thread touches only a
 * report job's own copies).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_MEMBERSHIP_INT_H
#define CHASHD_MEMBERSHIP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "conf/ring.h"
#include "control/membership.h"
#include "control/migration.h"
#include "loop/builder.h"

#include "chash/chash.h"

struct conf;
struct pool;
struct pool_change;
struct server;
struct state;

/*
 * What more than one file of the module keeps: the state file's delta
 * and the config the pools run (a reload replaces them in
 * membership_state_settle, membership_reload.c), and the shared store of
 * members. membership.c defines it.
 */
struct membership_state {
    struct state *state;   /* the delta the running pools have */
    struct state *pending; /* applied to a config being loaded */
    bool state_loaded;     /* the file was read (first load) */
    char *state_file;      /* NULL: changes are not persisted */
    /* The config the pools run (borrowed from main, which keeps it until
     * the next reload settles). */
    const struct conf *running_conf;
    /* The shared store of members (etcd), while it runs. */
    struct membership_remote remote;
};
extern struct membership_state membership_shared;

/*
 * The membership reports of runtime changes compare: the members the
 * operator has in the ring (admin up: drained and maintenance members own
 * nothing new), at their weight and current ramp. Health is left out on
 * purpose: such a report says where keys belong, not which member is up
 * this second (events say that: see membership_event_log).
 */
struct model {
    struct chash_member *m;
    size_t n, cap;
};

/*
 * A migration report computed on the builder thread (report_migration
 * builds four rings: seconds for millions of points). The member lists
 * are the job's own copies (names duplicated): members may leave their
 * pool meanwhile. <then> runs on the control thread and frees the job
 * (membership_report_job_free).
 */
struct report_job {
    struct builder_job job;
    struct chash_config cfg;
    struct chash_member *before, *after;
    size_t nb, na;
    /* zone_policy: hierarchical: every member's zone by name (a copy of
     * the pool's, and a joining member's); nz 0: flat */
    char **znames, **zzones;
    size_t nz;
    struct ring_zone_weight zw[RING_ZONE_WEIGHTS_MAX];
    size_t nzw;
    char *changed;  /* the member the report is about, or NULL */
    json_t *report; /* the result, or NULL with <err> */
    char err[256];
    void (*then)(struct report_job *rj);
    /* migration: copy pools: the members' key counts, asked on the
     * builder thread (never the control thread) */
    struct migration_probe probe;
    char **addrs;  /* [probe.n] owned */
    char *auth;    /* owned */
    int64_t *keys; /* [probe.n] */
    int joiner;    /* index of a joining member, -1: none */
    int leaver;    /* index of a member removed at once, -1: none */
    /* a pool that does not move data (redis): the same key counts, to say
     * how many keys the change leaves out of reach */
    bool counting;
    char **names;       /* [probe.n] owned: the member at addrs[i] */
    double keys_moving; /* report_keys_leaving's figure */
    bool keys_known;    /* ... when every count needed was answered */
};

/* ---- membership.c: the model, the change log, events, the state file ---- */

/* Whether <s> is a member of its pool (not removed). */
bool membership_server_member(const struct server *s);
/* Append a member to <md>. 0 or -1 (out of memory). */
int membership_model_push(struct model *md, const char *name, uint32_t weight,
                          double ramp);
/* The pool's model, leaving out member <skip> (NULL: none). 0 or -1;
 * <md>->m is the caller's to free either way. */
int membership_model_build(const struct pool *p, const char *skip,
                           struct model *md);
/* Does a change of <p>'s members leave keys out of reach? (membership.c
 * says when.) */
bool membership_pool_hides(const struct pool *p);
/* Is the pool's distribution a ring libchash can compare? */
bool membership_pool_comparable(const struct pool *p);
/* <j>'s number, or <dflt> when it is none. */
double membership_json_num(const json_t *j, double dflt);
/* Append to <buf> at *<len>, truncating at <cap>. */
void membership_append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Enter a change in the change log (<report>: its figures, or NULL). */
void membership_change_log(const char *pool, const char *member, const char *op,
                           int source, const char *detail,
                           const json_t *report);
/* The one log line of an event of <p> (membership.c says what "moved"
 * means). */
void membership_event_log(const struct pool *p, const struct server *s,
                          const char *name, const char *what,
                          const struct pool_change *chg, double eventual);
/* Whether <p> takes its members from the shared store (etcd). */
bool membership_remote_owns(const struct pool *p);
/* Record <p>'s membership in the state and write the file; a failed
 * write is logged and said in <warn>. 0 or -1. */
int membership_state_persist(struct pool *p, char *warn, size_t warnlen);

/* ---- membership_report.c: reports on the builder thread ---------------- */

/* Free <m>[0..<n>) and the names it owns. */
void membership_members_free(struct chash_member *m, size_t n);
/* Free what <rj>'s probe took (and stop counting). */
void membership_probe_free(struct report_job *rj);
/* Free what <rj> owns, and <rj>: the whole structure it begins (a
 * pending change, a batch, a reload's report put it first). */
void membership_report_job_free(struct report_job *rj);
/* A report job's work (builder thread) and completion (control thread:
 * calls <then>). */
void membership_report_work(struct builder_job *job);
void membership_report_done(struct builder_job *job);
/* A report of <p> from members <b> to <a> into <rj>. 0 or -1 (out of
 * memory). */
int membership_report_job_init(struct report_job *rj, const struct pool *p,
                               const struct chash_member *b, size_t nb,
                               const struct chash_member *a, size_t na,
                               const char *changed, const char *jname,
                               const char *jzone);
/* A pool that does not move data: its redis members' key counts, asked
 * with the report. 0 or -1 (out of memory). */
int membership_count_setup(struct report_job *rj, const struct pool *p);
/* What a change of <p> (which does not move data) leaves out of reach,
 * as a sentence into <buf>. */
void membership_unreachable_text(const struct pool *p, const json_t *rep,
                                 bool counted, char *buf, size_t cap);
/* Add what such a change leaves out of reach to its report <rep>;
 * whether applying it needs "force". */
bool membership_unreachable_report(const struct pool *p, json_t *rep,
                                   const struct report_job *rj, bool force);
/* Call <then>(<arg>) once every job submitted so far has completed. */
void membership_after_jobs(void (*then)(void *arg), void *arg);

/* ---- membership_change.c: runtime changes ------------------------------ */

/* Refuse with <error> and a message into <res>. Returns -1. */
int membership_refuse(struct membership_result *res, int error, const char *fmt,
                      ...) __attribute__((format(printf, 3, 4)));
/* Whether address <a> carries exactly one port; whether it names its
 * host numerically (runtime changes do not resolve names). */
bool membership_address_has_port(const char *a);
bool membership_address_numeric(const char *a);
void membership_report_flags(json_t *rep, bool dry_run, bool applied);
/* What etcd said of a write into <res>, whose report was computed before
 * the write. */
void membership_etcd_result(struct membership_result *res, const char *pool,
                            int status, uint64_t rev, const char *msg);

#endif /* CHASHD_MEMBERSHIP_INT_H */

/* etcd.h -- pools whose members come from etcd (doc/etcd.md). Two
 * threads talk to etcd's JSON gateway through libcurl: the watcher lists
 * and watches <prefix>/ (and seeds empty pools), the session keeps the
 * instance's lease, publishes its record and runs the admin API's writes.
 * Everything they learn reaches the control thread as messages; the
 * functions below are for the control thread only.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ETCD_H
#define CHASHD_ETCD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

struct conf;
struct pool;

/* Start the threads when <conf> has a pool with `members_from: etcd`
 * (else nothing). 0, or -1 with <err>. */
int etcd_start(const struct conf *conf, char *err, size_t errlen);
/* A reload: the pools and seeds of <conf> (the connection settings need a
 * restart: logged). Call before the pools are reconfigured: it puts the
 * members etcd gave into <conf>'s etcd pools, so that a reload keeps them. */
void etcd_conf_apply(struct conf *conf);
void etcd_stop(void);
/* A reload that needs etcd where it does not run (it starts only with the
 * daemon) is refused: -1 with <err>. */
int etcd_reload_check(const struct conf *conf, char *err, size_t errlen);

/* A pool that copies keys (migration: copy) and takes its members from
 * etcd listens only once etcd's members are applied and this instance is
 * registered (doc/etcd.md): etcd then calls <fn>(p). */
typedef void etcd_listen_fn(struct pool *p);
bool etcd_defers_listen(const struct pool *p);
/* Whether etcd started <p>'s listeners already (or need not). */
bool etcd_listening(const struct pool *p);
void etcd_set_listen(etcd_listen_fn *fn);
/* Does <p> take its members from etcd (and etcd runs)? */
bool etcd_pool(const struct pool *p);


/* GET /api/cluster. */
json_t *etcd_cluster_json(void);
/* The chashd_etcd_* families into <f> (nothing without etcd). */
void etcd_metrics(FILE *f);

/*
 * A change of members of etcd pool <p> made through the admin API, as one
 * etcd transaction (every instance applies it at one revision):
 *   op 'a' add <name> at <address> with <weight> (create if absent),
 *   op 'u' update <name>'s weight (<weight> > 0) and/or state (<state>
 *          "up", "drain", "maint"; NULL: unchanged), compare-and-swap on
 *          the record's revision,
 *   op 'r' remove <name> (guarded by its revision).
 * <done>(<status>, <rev>, <msg>, <arg>) runs once on the control thread:
 * status 0 once this instance has applied revision <rev>;
 * ETCD_WRITTEN_NOT_APPLIED when etcd took it (<rev>) but this instance did
 * not apply it in 10 s (its watch is down: <msg> says so); 400 a bad name
 * or too many operations; 404 no such record; 409 a record changed
 * meanwhile (or exists); 503 etcd cannot be reached. Nothing changes
 * unless status is 0. <migration>, when not NULL, is the descriptor of
 * the migration the change starts (migration.h), created in the same
 * transaction, which fails (409) while another migration runs.
 */
#define ETCD_WRITTEN_NOT_APPLIED 202
struct etcd_op {
    char op;
    const char *name;
    const char *address;
    uint32_t weight;
    const char *state;
};
typedef void etcd_done_fn(int status, uint64_t rev, const char *msg, void *arg);
void etcd_member_write(struct pool *p, const struct etcd_op *ops, size_t n,
                       const json_t *migration, etcd_done_fn *done, void *arg);

#endif /* CHASHD_ETCD_H */

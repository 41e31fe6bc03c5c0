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

#include "control/membership.h"

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

/* A change of members of etcd pool <p> made through the admin API, as one
 * etcd transaction (every instance applies it at one revision): the
 * membership_remote's write (membership.h), registered by etcd_start. */
void etcd_member_write(struct pool *p, const struct membership_remote_op *ops,
                       size_t n, const json_t *migration,
                       membership_remote_done_fn *done, void *arg);

#endif /* CHASHD_ETCD_H */

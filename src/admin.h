/* admin.h -- chashd's admin plane: the HTTP API (pools, members with
 * migration reports, lookups, ring arcs, state, changes), Prometheus
 * metrics and the dashboard, served by libmicrohttpd inside the control
 * thread; and the runtime state file that keeps membership changes.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ADMIN_H
#define CHASHD_ADMIN_H

#include <stddef.h>
#include <stdint.h>

struct conf;

/*
 * Control-thread API. libmicrohttpd runs without a thread of its own
 * (external epoll mode): the control loop watches admin_fd() for input and
 * calls admin_run() when it is readable and on every tick, so request
 * handlers run on the control thread and change pools directly (pool.h:
 * the control thread is the single writer). Nothing here touches the data
 * path.
 */

/*
 * Bind conf->admin and start serving (no-op returning 0 when the admin
 * API is off, family AF_UNSPEC). Keeps a copy of the token. 0, or -1 with
 * "admin <address>: what failed" in <err>.
 */
int admin_start(const struct conf *conf, char *err, size_t errlen);

/* Stop serving and close every admin connection. Safe when not started. */
void admin_stop(void);

/* The fd to watch for EPOLLIN (an epoll fd of libmicrohttpd's), or -1. */
int admin_fd(void);

/* Serve whatever is ready without blocking (accept, read, answer, time
 * out idle connections). */
void admin_run(void);

/* A reload: take the new token. The listen address is kept (a change is
 * logged; it needs a restart). */
void admin_reconfigure(const struct conf *conf);

/*
 * The state file. Call admin_state_apply() on every freshly loaded config
 * (start-up and reload) BEFORE pools are created or reconfigured from it:
 * the first call reads global.state_file (a missing file is an empty
 * state; a corrupt one is an error: the daemon refuses to start rather
 * than silently drop operators' changes), and every call applies the
 * runtime delta to <conf> (members added/removed, weights) in a pending
 * copy of the state. Then, AFTER pool_create()/pool_reconfigure(), call
 * admin_state_settle(): it commits the pending state (a reload refused in
 * between leaves the running one untouched) and puts the members the
 * state drains or holds in maintenance into that state.
 * 0, or -1 with the message in <err>.
 */
int admin_state_apply(struct conf *conf, char *err, size_t errlen);
void admin_state_settle(void);

/* Free the state (at exit). */
void admin_state_free(void);

/* Membership changes made through the API for <pool>, and the moved
 * fraction of the last one (0 when none): for the metrics. */
uint64_t admin_pool_changes(const char *pool, double *last_moved);

#endif /* CHASHD_ADMIN_H */

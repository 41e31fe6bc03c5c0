/* admin.h -- chashd's admin plane: the HTTP API (pools, members with
 * migration reports, lookups, ring arcs, state, changes), Prometheus
 * metrics and the dashboard, served by libmicrohttpd inside the control
 * thread. HTTP glue only: changes go through membership.h.
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

/*
 * Before a reload changes anything: 0 when <next> can run with the admin
 * listener that is bound now, or -1 with why in <err>. The listen address
 * changes only at a restart, so the old listener stays; its token must
 * stay in force with it. A listener that is not loopback (0.0.0.0, a
 * public address) refuses a <next> without `admin_token`, whatever
 * address or `admin: off` it names; a loopback one takes it (as a start
 * on that config would). A token changed to another is fine.
 */
int admin_reload_check(const struct conf *next, char *err, size_t errlen);

/* A reload (after admin_reload_check): take the new token. The listen
 * address is kept (a change is logged; it needs a restart). */
void admin_reconfigure(const struct conf *conf);

#endif /* CHASHD_ADMIN_H */

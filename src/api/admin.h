/* admin.h -- chashd's admin plane: the HTTP API (pools, members with
 * migration reports, lookups, ring arcs, state, changes), Prometheus
 * metrics and the dashboard, served by libmicrohttpd inside the control
 * thread. HTTP glue only: changes go through membership.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ADMIN_H
#define CHASHD_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf;
struct json_t;
struct membership_batch_op;
struct membership_request;

/* Most changes in one POST /api/pools/{pool}/changes: one etcd
 * transaction holds 128 operations. */
#define ADMIN_BATCH_MAX 127

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

/*
 * The request's pure parts, as the handlers use them (and
 * tests/fuzz/fuzz_admin.c): no connection, no pool, no global state.
 * libmicrohttpd has already percent-decoded <url> and the query values,
 * and the raw URL has been refused when it decodes to a control byte
 * (text_url_control).
 */

/* Split <url> into at most <max> segments (modifies a copy in <buf> of
 * <buflen> bytes; the segments point into it). Returns how many, or -1
 * when there are too many, an empty one (a doubled or trailing slash
 * beyond the root) or <url> does not fit. "/" is 0 segments. */
int admin_split_path(const char *url, char *buf, size_t buflen, char **seg,
                     int max);

/*
 * "/api/pools/<pool>/members/<name>": <pool> into <pool> (<poollen>
 * bytes), and the name, everything after "members/", returned; NULL when
 * <url> is not such a path or the pool name does not fit. A member name
 * may hold '/': a unix socket member the config names by its path
 * ("/run/app.sock") is ".../members//run/app.sock" (or %2F-encoded),
 * which admin_split_path's segments could not address.
 */
const char *admin_member_path(const char *url, char *pool, size_t poollen);

/* "/api/state/pools/<pool>[/members/<name>]": true with <pool> (never
 * empty) filled and *<name> the member's name (pointing into <url>) or
 * NULL for the whole pool; false when <url> is not such a path. */
bool admin_state_path(const char *url, char *pool, size_t poollen,
                      const char **name);

/* A query flag's value <v> (NULL: the flag is absent, 0): "" (a bare
 * "?dry_run"), 1, true, yes or on is 1; 0, false, no or off is 0, in any
 * case; anything else -1: reading "?dry_run=True" or "?dry_run=y" as "no"
 * applied a change the operator meant only to preview, so such a request
 * is refused instead. */
int admin_flag(const char *v);

/* A count in [1, <max>] written in decimal ("replicas", "segments"): 0
 * with it in *<out>, or -1 (a sign, a fraction, text after the digits,
 * out of range) with *<out> untouched. */
int admin_count_arg(const char *s, unsigned long max, unsigned long *out);

/* A rebalance's "target": a number in [1, 100] (NaN refused): 0 with it
 * in *<out>, or -1 with *<out> untouched. */
int admin_target_arg(const char *s, double *out);

/* The host of an authority "<host>[:<port>]" ("127.0.0.1:8404",
 * "[::1]", "localhost:9000"): its length, or 0 when <s> is not such an
 * authority (a space, a path, text after "]", a port that is not
 * digits). */
size_t admin_authority_host(const char *s);

/* A media type is application/json, parameters aside ("; charset=utf-8").
 * NULL is not. */
bool admin_json_media_type(const char *ct);

/* The Authorization header <given> (NULL: none) carries token <want>:
 * "Bearer" in any case, one or more spaces, then exactly the token. The
 * comparison takes the same time wherever they differ. */
bool admin_token_ok(const char *want, const char *given);

/*
 * The bodies of the changes, checked as the handlers answer them. Each
 * takes <body> (<len> bytes, any bytes) and returns the parsed JSON
 * object, which the caller must json_decref() after it is done with the
 * request, since the strings in it point into it; or NULL with the 400's
 * text in <err> (never empty when <errlen> > 0) and nothing filled in.
 *
 * POST /api/pools/{pool}/members: {"name", "address", "weight", "zone",
 * "force"} into <mr> (op MEMBERSHIP_ADD; no "name": NULL, the config's
 * rule names it). The address is a non-empty string, the name passes
 * text_name_ok, the weight is in [0, MEMBERSHIP_MAX_WEIGHT].
 */
struct json_t *admin_member_add_body(const char *body, size_t len,
                                     struct membership_request *mr, char *err,
                                     size_t errlen);

/* PATCH /api/pools/{pool}/members/{name}: {"weight", "state", "force"}
 * into <mr>
 * (op MEMBERSHIP_UPDATE; the caller sets the name from the path). "state"
 * is "up", "drain" ("draining" too, as it reads back) or "maint". */
struct json_t *admin_member_patch_body(const char *body, size_t len,
                                       struct membership_request *mr, char *err,
                                       size_t errlen);

/* DELETE /api/pools/{pool}/members/{name} and /api/state/pools/...: no
 * body, or {"force": true|false} into *<force> (a pool that does not move
 * data: apply a change that leaves keys out of reach). */
struct json_t *admin_delete_body(const char *body, size_t len, bool *force,
                                 char *err, size_t errlen);

/* POST /api/pools/{pool}/changes: {"changes": [...]} with 1 to
 * ADMIN_BATCH_MAX changes into <ops> (room for ADMIN_BATCH_MAX), their
 * number in *<n>. Each is {"op": "add", "name", "address", "weight"},
 * {"op": "remove", "name"} or {"op": "update", "name", "weight",
 * "state"}; a weight is in [1, MEMBERSHIP_MAX_WEIGHT]. An optional
 * top-level "force" (true or false, checked here) is the caller's to
 * read from the returned object. */
struct json_t *admin_changes_body(const char *body, size_t len,
                                  struct membership_batch_op *ops, size_t *n,
                                  char *err, size_t errlen);

#endif /* CHASHD_ADMIN_H */

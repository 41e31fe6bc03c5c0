/* state.h -- runtime membership changes (admin API) kept as a delta from the
 * config, written atomically to global.state_file and re-applied to every
 * freshly loaded config (start-up and reload), so no change is ever lost.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_STATE_H
#define CHASHD_STATE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct conf;

/* Administrative state of a member, set by an operator. Health states
 * (down, ejected) are not persisted: they are observed, not decided. */
enum state_admin {
    STATE_ADMIN_UP = 0, /* in the ring */
    STATE_ADMIN_DRAIN,  /* no new keys; existing connections stay */
    STATE_ADMIN_MAINT   /* out of the ring, not health-checked */
};

/* A member as the runtime holds it, for state_record(). */
struct state_member {
    const char *name;
    const char *address; /* as written ("127.0.0.1:9001") */
    uint32_t weight;
    int admin;        /* enum state_admin */
    const char *zone; /* its zone, or NULL (kept for added members) */
};

/*
 * The state: for each pool, the servers as the config file wrote them (the
 * base, captured by state_apply) and the delta the runtime made from it:
 * members added, members removed, and weight/admin-state overrides. The
 * delta is recomputed from the whole runtime membership at each change
 * (state_record), so it is a pure function of (config, runtime): adding
 * and then removing a member leaves nothing behind.
 *
 * Not thread-safe: the control thread owns it.
 */
struct state;

struct state *state_create(void);
void state_destroy(struct state *st);

/*
 * Read the delta from <path>. A missing file is an empty state (0). A file
 * that is not a valid state file returns -1 with "path: what is wrong" in
 * <err>, and <st> is left unchanged.
 */
int state_load(struct state *st, const char *path, char *err, size_t errlen);

/* The same from a JSON text (tests); <name> is used in messages. */
int state_load_string(struct state *st, const char *name, const char *text,
                      char *err, size_t errlen);

/*
 * Apply the delta to a freshly loaded <conf>, before any pool or snapshot
 * is built from it: removed members are dropped, added members appended
 * (named and parsed exactly as `servers:` entries), weights overridden.
 * Captures <conf>'s servers, before the change, as the base of later
 * state_record() calls. Entries that no longer fit the config (a pool or
 * member the config dropped, an address now taken by a config server or
 * now one of chashd's own listen/admin addresses, a removal that would
 * leave a pool empty) are skipped, and a pool whose delta would give no
 * ring (the algorithm's limits, or more than its max_points) keeps the
 * config as written; one line per skipped entry is written to <warn>
 * (NULL: not reported), ';'-separated. Returns 0, or -1 with errno
 * ENOMEM.
 */
int state_apply(struct state *st, struct conf *conf, char *warn,
                size_t warnlen);

/* The administrative state the delta gives member <member> of <pool>
 * (enum state_admin; STATE_ADMIN_UP when none). */
int state_admin(const struct state *st, const char *pool, const char *member);

/*
 * Recompute <pool>'s delta from its whole runtime membership <members>
 * [0..<n>) against the base captured by state_apply. 0, or -1 (ENOENT for a
 * pool state_apply never saw, ENOMEM).
 */
int state_record(struct state *st, const char *pool,
                 const struct state_member *members, size_t n);

/*
 * Write the delta to <path> atomically: a temporary file in the same
 * directory with an unpredictable name (mkostemp: it never opens a file
 * or link that exists), mode 0644, fsync, rename over <path>, fsync of
 * the directory. 0, or -1 with errno kept and "path: what failed" in
 * <err>.
 */
int state_save(const struct state *st, const char *path, char *err,
               size_t errlen);

/* The delta as the state file holds it (a new reference). */
json_t *state_json(const struct state *st);

/*
 * Every override the delta makes to the config, for logs and GET
 * /api/state: a new JSON array of
 *   {"pool", "member", "what", "config", "runtime"}
 * with <what> and the two values:
 *   "added"    null                          {"address", "weight", "state"}
 *   "removed"  {"address", "weight"}         null
 *   "address"  the written address           the runtime's
 *   "weight"   the written weight            the runtime's
 *   "state"    "up"                          "drain" or "maint"
 * one entry per overridden field, the config's members first, in its
 * order, then the added ones. Call it AFTER state_apply(<st>, <conf>): it
 * then reports exactly what applied (state_apply drops what no longer
 * fits), against the servers as the file wrote them (the base state_apply
 * captured), whatever <conf> became; <conf> gives the pools and their
 * order. Before state_apply it compares the delta as loaded with <conf>'s
 * servers, entries that will be skipped included. NULL when out of
 * memory.
 */
json_t *state_overrides_json(const struct state *st, const struct conf *conf);

/*
 * Forget runtime changes: the whole delta of <pool> (<member> NULL), or
 * every entry of <member> in it (added, removed or changed). Returns how
 * many entries were dropped (0 when none), or -1 with errno ENOENT for a
 * pool the state does not know. The caller puts the runtime membership
 * back to the config and saves; a later state_record() against the same
 * base starts from the config again.
 */
int state_reset(struct state *st, const char *pool, const char *member);

/* The migration running in <pool> as the file keeps it (borrowed), or
 * NULL; set it (a copy is kept; NULL drops it). 0 or -1. */
json_t *state_migration(const struct state *st, const char *pool);
int state_set_migration(struct state *st, const char *pool, json_t *m);

/* "up", "drain", "maint"; and back (-1 for an unknown name). */
const char *state_admin_name(int admin);
int state_admin_from_name(const char *name);

#endif /* CHASHD_STATE_H */

/* ctl_int.h -- what the files of `chash ctl` share: its options, the
 * HTTP client (ctl_http.c) and the tables it prints (ctl_print.c).
 * ctl.c parses the command line and runs the subcommands.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_CTL_INT_H
#define CHASH_CTL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define CMD "ctl"

/* A `chash ctl` invocation: its options, then its subcommand's words. */
struct ctl {
    const char *admin;
    const char *token;
    bool json;
    bool dry_run;
    bool have_weight;
    uint32_t weight;
    bool have_replicas;
    uint32_t replicas;
    bool reset;
    bool force;          /* "force": true: a pool that does not move data:
                            apply a change that hides keys; add in a
                            migration: copy pool: flush a joining member
                            that holds keys */
    bool now;            /* remove: ?now=true, leave at once, nothing moved */
    const char *target;  /* rebalance: the load ratio to stay under */
    const char *give_up; /* migration: the old owner to give up (ref in
                            argv), or NULL */
    const char *verb;    /* the subcommand as typed (ref in argv) */
    char **args;         /* its arguments (ref in argv) */
    int nargs;
    char pool[800]; /* args[0] percent-encoded, when given */
    char name[800]; /* args[1] percent-encoded, when given */
};

/* ---- ctl_http.c ---------------------------------------------------------- */

struct ctl_reply {
    int status;
    char *body; /* NUL-terminated */
    size_t len;
};

/*
 * One request: <method> <path> with an optional JSON <body>, Connection:
 * close, the answer read to the end. 0 with <r> filled (any status; the
 * caller frees r->body), or -1 after printing what failed (connect,
 * send, a malformed answer).
 */
int ctl_http_request(const struct ctl *c, const char *method, const char *path,
                     const char *body, struct ctl_reply *r);

/* Percent-encode <s> for a path segment or a query value. */
void ctl_url_escape(const char *s, char *out, size_t outlen);

/*
 * Call the API and parse its JSON. On a non-2xx answer print its "error"
 * and return NULL with *<exit_code> = 1; on a transport failure the same.
 * With --json the body is printed as is (the caller prints nothing more).
 */
json_t *ctl_call(const struct ctl *c, const char *method, const char *path,
                 json_t *body, int *exit_code);

/*
 * ctl_call() for a change printed as <what> (<pool> as typed; NULL: as
 * ctl_call()): a refusal for want of --force prints its report first.
 */
json_t *ctl_call_change(const struct ctl *c, const char *method,
                        const char *path, json_t *body, const char *what,
                        const char *pool, int *exit_code);

/*
 * <body> with "force": true when --force was given (NULL, a change
 * without a body, becomes {"force": true}); else <body> as it is: an
 * older chashd refuses the field, so it goes only when asked.
 */
json_t *ctl_forced(const struct ctl *c, json_t *body);

/* ---- ctl_print.c --------------------------------------------------------- */

/* The string <key> of <j>, or "-". */
const char *ctl_str(json_t *j, const char *key);
/* The number <key> of <j> as an integer (0 when absent). */
long long ctl_num(json_t *j, const char *key);

/* A change's migration report <r>, under the line <what>; <pool> (as
 * typed) names the pool in its hints. */
void ctl_print_report(json_t *r, const char *what, const char *pool);
void ctl_print_pools(json_t *j);
void ctl_print_pool(const struct ctl *c, json_t *p); /* fetches /metrics */
void ctl_print_cluster(json_t *j);
void ctl_print_hot(json_t *j);
void ctl_print_lookup(json_t *j);
void ctl_print_migration(json_t *j);
void ctl_print_replication(json_t *j);
void ctl_print_rebalance(json_t *j);
/* 0, or -1 after printing what is wrong with the answer. */
int ctl_print_state(json_t *j);

#endif /* CHASH_CTL_INT_H */

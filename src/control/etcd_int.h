/* etcd_int.h -- what the files of module etcd share (etcd.c and its parts
 * etcd_*.c): the settings, the state of its three threads, the messages
 * between them, and the functions one part calls in another. Private to
 * the module: nothing outside src/control/etcd*.c includes it.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_ETCD_INT_H
#define CHASHD_ETCD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "control/etcd.h"
#include "control/membership.h"
#include "loop/control.h"

struct migration_etcd_ops;
struct pool;

/*
 * Three threads make the module (etcd.h): the watcher (etcd_watch.c)
 * lists and watches the prefix, the session (etcd_session.c) keeps the
 * lease, publishes the instance record and runs the admin writes; both
 * block in libcurl (etcd_http.c) and hand everything they learn to the
 * control thread as messages (etcd.c drains them; etcd_apply.c,
 * etcd_migration.c, etcd_write.c and etcd_status.c act on them there).
 */

#define ETCD_BACKOFF_MIN_MS 100
#define ETCD_BACKOFF_MAX_MS 2000
#define ETCD_IGNORED_KEPT 64 /* malformed records listed in /api/cluster */
#define ETCD_TXN_OPS_MAX 128 /* etcd's --max-txn-ops default */

/* ---- the settings the threads use (immutable while they run) ------------- */

struct etcd_settings {
    char **endpoints;
    size_t nendpoints;
    char *prefix; /* "/chash" */
    char *instance;
    uint32_t lease_ttl_ms, timeout_ms;
    char *username, *password, *ca_file, *cert_file, *key_file;
};
/* Set by etcd_start before the threads start, freed by etcd_stop after
 * they are joined: read-only for everyone in between. */
extern struct etcd_settings etcd_cfg;

/* The config's servers of an etcd pool: written to etcd when it holds no
 * member of the pool. */
struct etcd_seed {
    char *pool;
    json_t *members; /* {name: value text} the config's servers */
};

/* ---- messages to the control thread -------------------------------------- */

enum etcd_msg_type {
    ETCD_MSG_POOLS,     /* records of pools (a list, or events) */
    ETCD_MSG_INSTANCES, /* the instance records */
    ETCD_MSG_STATUS,    /* link up/down, counters */
    ETCD_MSG_WRITTEN    /* an admin write's result */
};

struct etcd_msg {
    struct etcd_msg *next;
    int type;
    uint64_t rev; /* POOLS: the revision applied with it */
    bool list;    /* POOLS: a full list (every etcd pool in it) */
    json_t *data; /* POOLS: {pool: {member: [mod_rev, value]}};
                     INSTANCES: {id: value object} */
    json_t *revs; /* POOLS (events): {pool: the revision of its last event}:
                     a catch-up message spans revisions */
    /* STATUS */
    bool up;
    char state[32];
    char error[256];
    /* WRITTEN */
    struct etcd_write *w;
};

/* An admin write, from the control thread to the session. */
struct etcd_write {
    struct etcd_write *next;
    json_t *txn; /* the /v3/kv/txn body */
    bool lease;  /* its puts go under the instance's lease */
    bool raw;    /* answered as soon as etcd answers (not once applied) */
    char pool[128];
    membership_remote_done_fn *done;
    void *arg;
    /* the answer */
    int status;
    uint64_t rev;
    char msg[320];
    uint64_t deadline_ms;   /* written: answered by then, applied or not */
    struct etcd_msg answer; /* how the session hands the answer back: no
                               allocation that could fail on its side */
};

/* ---- what the threads share (under mu, unless said) ---------------------- */

struct etcd_shared_state {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct etcd_msg *head, **tail;
    int efd;
    struct control_watch watch;
    /* session work */
    struct etcd_write *writes, **wtail;
    char *publish; /* the instance record to put (owned), NULL: none */
    /* seeds (the watcher reads them under mu) */
    struct etcd_seed *seeds;
    size_t nseeds;
    bool relist; /* the pools changed (reload): list again */
    atomic_bool stop;
    atomic_bool kick; /* session -> watcher: the link is dead, reconnect */
    pthread_t watcher, session;
    bool running; /* control thread: the threads run */
    int watch_fd; /* the watch stream's socket, -1: none (under mu) */
};
extern struct etcd_shared_state etcd_shared;

/* The fence of copy pools (etcd_fence.c says why). */
struct etcd_fence {
    int64_t rejoin_lease; /* under etcd_shared.mu; the new lease, 0: none yet */
    bool said;            /* control thread: the fence is logged */
    uint64_t fences;      /* control thread: times it was raised */
};
extern struct etcd_fence etcd_fence_state;

/* ---- the control thread's side ------------------------------------------- */

/* A malformed record, as listed in /api/cluster. */
struct etcd_ignored {
    char key[256];
    int64_t mod_rev;
    char why[160];
};

/* What the control thread knows of one etcd pool. */
struct etcd_cpool {
    char *name;
    json_t *records;   /* {member: [mod_rev, value]} as etcd has them */
    uint64_t checksum; /* of the ring input, once applied */
    uint64_t changed_rev;
    uint64_t changed_ms; /* wall time it was applied */
    uint64_t since_ms;   /* the newest `since` of the change, 0: none */
    bool kept;           /* etcd holds no valid record: members kept */
    bool listed;         /* etcd's records were applied at least once */
    /* migration: copy (migration.h, "one migration, several instances") */
    bool listening;        /* a copy pool listens once etcd is applied */
    uint64_t failed_epoch; /* a descriptor that could not be run (said) */
    uint64_t lock_ms;      /* the copier lock was last asked for */
    uint64_t ack_ms;       /* our barrier key was last put */
};

/* The control thread's state: only the control thread touches it. */
struct etcd_control {
    struct etcd_cpool *pools;
    size_t npools;
    json_t *instances; /* {id: [mod_rev, value]} */
    struct etcd_ignored ignored[ETCD_IGNORED_KEPT];
    size_t nignored;
    bool up;
    char state[32];
    char error[300];
    uint64_t down_since_ms; /* wall; 0 while up */
    uint64_t lists, reconnects, events, ignored_total, writes;
    uint64_t applied_rev, applied_ms, started_ms;
    /* admin writes waiting for their revision to be applied */
    struct etcd_write *waiting;
    unsigned pending_pubs; /* pools whose publication is awaited */
    uint64_t pending_rev;
    uint64_t reconcile_ms; /* migrations are looked at again then */
    etcd_listen_fn *listen;
};
extern struct etcd_control etcd_ctl;

/* ---- etcd.c: the message queue, the pools -------------------------------- */

/* Hand <m> (owned) to the control thread. Any thread. */
void etcd_post(struct etcd_msg *m);
void etcd_post_status(bool up, const char *state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* What the control thread knows of etcd pool <name>, or NULL. */
struct etcd_cpool *etcd_cpool_find(const char *name);

/* ---- etcd_http.c: HTTP to etcd's JSON gateway (the etcd threads) --------- */

struct etcd_http {
    CURL *h;
    size_t ep;       /* the endpoint in use */
    char token[512]; /* etcd auth token, "" without auth */
    /* the body of the answer */
    char *buf;
    size_t len, cap;
    /* watch streaming: called per complete line; nonzero stops */
    int (*line)(struct etcd_http *eh, const char *s, size_t n, void *arg);
    void *arg;
    size_t done; /* bytes of buf handed to line() */
    bool watch;
    bool last; /* the revoke at a stop: runs although etcd_shared.stop is set */
};

int etcd_http_init(struct etcd_http *eh);
void etcd_http_deinit(struct etcd_http *eh);
/* etcd auth: a token from /v3/auth/authenticate. 0 or -1. */
int etcd_http_auth(struct etcd_http *eh, char *err, size_t errlen);
/* Set up <eh>'s handle for a POST of <body> to <path> on the current
 * endpoint; the headers returned are the caller's to free. */
struct curl_slist *etcd_http_setup(struct etcd_http *eh, const char *path,
                                   const char *body, char *url, size_t urllen);
int etcd_http_post(struct etcd_http *eh, const char *path, json_t *body,
                   json_t **out, long *status, char *err, size_t errlen);
/* End the watch stream now (the watcher reconnects, or stops). */
void etcd_kick_watch(void);
/* Sleep <ms>, or less when the module stops. */
void etcd_sleep_ms(uint64_t ms);
/* Sleep *<backoff> ms (less when the module stops), then double it, up to
 * ETCD_BACKOFF_MAX_MS. */
void etcd_backoff(uint64_t *backoff);

/* The JSON of etcd's gateway. */
int64_t etcd_jint(const json_t *j);
json_t *etcd_jpath(const json_t *j, const char *a, const char *b);
json_t *etcd_jb64(const char *s);
json_t *etcd_jb64_end(const char *s);
void etcd_member_key(char *buf, size_t len, const char *pool, const char *name);
void etcd_pool_key(char *buf, size_t len, const char *pool, const char *rest);
json_t *etcd_put_op(const char *key, const char *value);
json_t *etcd_delete_op(const char *key, bool prefix);

/* ---- the threads' bodies ------------------------------------------------- */

void *etcd_watcher_main(void *arg); /* etcd_watch.c */
void *etcd_session_main(void *arg); /* etcd_session.c */

/* ---- etcd_fence.c -------------------------------------------------------- */

/* The session: the lease granted or renewed, the lease lost. */
void etcd_fence_lease(uint64_t sent_ms, int64_t ttl_s);
void etcd_fence_rejoin(void);
/* The control thread: back once registered again; the fence's log lines;
 * whether any pool is subject to it. */
void etcd_fence_check(void);
void etcd_fence_tick(uint64_t now_ms);
bool etcd_fenced_pools(void);

/* ---- etcd_apply.c: etcd's records into the pools (control thread) -------- */

/* A message of pool records: applied, each pool in one snapshot. */
void etcd_on_pools(struct etcd_msg *m);
/* Copy pools whose members are etcd's and which this instance's record
 * names start listening. */
void etcd_listen_check(void);
/* Whether instance record <value> (text) says it routes <pool>. */
bool etcd_routes_pool(const char *value, const char *pool);

/* ---- etcd_migration.c: one migration, several instances ------------------ */

/* What migration calls (migration_etcd_set, registered by etcd_start). */
extern const struct migration_etcd_ops etcd_migration_ops;
bool etcd_copies_keys(const struct pool *p);
/* A copy pool's migration keys, before its members are applied: 0, or -1
 * (the descriptor cannot run: the pool keeps its members). */
int etcd_migration_before(struct pool *p, struct etcd_cpool *cp, json_t **later,
                          uint64_t *later_epoch);
/* Every copy pool's migration brought in line with etcd again. */
void etcd_migration_reconcile_all(void);

/* ---- etcd_write.c: the admin API's writes -------------------------------- */

/* Hand <w> (owned) to the session. */
void etcd_write_queue(struct etcd_write *w);
/* Answer <w> (its done callback) and free it. */
void etcd_write_answer(struct etcd_write *w, int status, uint64_t rev,
                       const char *msg);
/* Answer the writes whose revision is applied; those not applied in time. */
void etcd_writes_settle(void);
void etcd_writes_expire(uint64_t now_ms);
/* The session's answer to <w>. */
void etcd_on_written(struct etcd_write *w);

/* ---- etcd_status.c ------------------------------------------------------- */

/* The watcher's word on the link (up, down, why). */
void etcd_on_status(struct etcd_msg *m);

#endif /* CHASHD_ETCD_INT_H */

/* migration.c -- live data migration of redis pools: the migration's
 * life on the control thread (prepare, drain, copy, verify, finish,
 * persist, resume), the copier threads and their blocking RESP client,
 * and the probe of a change's members. See migration.h.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/migration.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/clock.h"
#include "conf/conf.h"
#include "loop/control.h"
#include "model/fence.h"
#include "base/invariant.h"
#include "base/log.h"
#include "model/pool.h"
#include "loop/rconn.h"
#include "data/request.h"
#include "model/state.h"
#include "base/stats.h"

/* How often the control thread looks at running migrations and saves
 * their progress. */
#define TICK_MS 100
#define SAVE_MS 100
/* A copier that cannot reach its member tries again after this long,
 * doubling up to RETRY_MAX_MS. */
#define RETRY_MS 200
#define RETRY_MAX_MS 5000
/* Tries of a key whose MIGRATE says the target has it or timed out. */
#define KEY_TRIES 4
/* Big keys listed. */
#define BIG_KEYS_MAX 20

enum mig_phase {
    MIG_DRAINING,
    MIG_COPYING,
    MIG_VERIFYING,
    MIG_FINISHING,
    MIG_DONE,
    MIG_WARMING /* memcache: keys warm up on touch until the window ends */
};

static const char *const phase_names[] = {"draining",  "copying", "verifying",
                                          "finishing", "done",    "warming"};

struct migration;

/* One old owner and its copier. Fields below <lock> are the migration's
 * lock's. */
struct msource {
    struct migration *m;
    struct server *srv; /* (ref held) */
    pthread_t thread;
    bool started;
    /* under m->lock */
    int phase;     /* MIG_COPYING, MIG_VERIFYING, MIG_DONE */
    unsigned pass; /* 1: copy; 2 and later: verification */
    char cursor[24];
    uint64_t scanned, moved, bytes, absent, failed, anomalies, errors;
    uint64_t retry_failed; /* failed in the last pass, to find again */
    uint64_t pass_failed;  /* failed in this pass */
    int64_t dbsize_start;
    char last_error[200];
    bool skipped; /* given up by the operator (a dead member) */
};

struct migration {
    struct pool *pool; /* (ref held) */
    uint64_t epoch;
    int phase; /* control thread */
    char change[300];
    char **leaving; /* members removed once done */
    size_t nleaving;
    uint64_t keys_predicted, keys_total;
    double moved_fraction; /* of the key space, -1: not known */
    bool late_count;       /* a reload's: counted from the sources */
    time_t started_wall;
    uint64_t started_ms, finished_ms;
    struct migration_view *view;    /* (ref held) */
    struct pool_snapshot *new_snap; /* pinned once started */
    struct migration_drain *drain;  /* (ref held) while draining */
    /* settings, copied at start */
    char *auth;
    int db;
    uint32_t timeout_ms, batch, rate;
    uint64_t bandwidth, big_key;
    struct msource *src;
    size_t nsrc;
    pthread_mutex_t lock;
    _Atomic bool stop;
    /* the throttle: a debt-free token bucket per unit */
    double tok_keys, tok_bytes;
    uint64_t tok_ms;
    json_t *big_keys; /* under lock */
    /* the pool's gate counters when it started, and what resumed */
    uint64_t gate_base_moved, gate_base_absent, gate_base_failed;
    uint64_t gate_moved_before; /* moved by traffic before a restart */
    uint64_t saved_ms;
    uint64_t saved_sig;     /* what the last save had: saved again on change */
    bool detached;          /* chashd stopped while it was finishing */
    bool warmup;            /* migration: warmup (memcache) */
    uint64_t warm_until_ms; /* its window's end */
    /* run with other instances through etcd (migration.h) */
    bool etcd;
    bool holder;        /* this instance holds the copier lock */
    bool barrier_wait;  /* drained here; the others are awaited */
    char holder_of[64]; /* who holds it, as etcd says ("": nobody) */
    uint64_t copied_ms; /* the end of a stage went to etcd then */
    int copied_stage;
};

/* The last finished migration of each pool, for the API. */
struct last {
    char *pool;
    json_t *j;
    /* every finished migration of the pool, summed (the metrics) */
    uint64_t count, moved, by_request, scanned, bytes, anomalies, failed;
    struct migration *ending; /* finishing: shown until it is done */
    struct last *next;
};
static struct last *lasts;
static struct migration **running; /* the pools' */
static size_t nrunning, caprunning;
static uint64_t next_epoch;
static migration_barrier_fn *barrier;
static const struct migration_etcd_ops *etcd_ops;
/* A copier's end of a stage that etcd did not apply is sent again. */
#define COPIED_AGAIN_MS 2000

static struct migration_host host;

void
migration_set_host(const struct migration_host *h)
{
    host = *h;
}

static void
host_save(const char *pool, json_t *m)
{
    if (host.save != NULL)
        host.save(pool, m);
}

static void
host_leave(struct pool *p, const char *name)
{
    if (host.leave != NULL)
        host.leave(p, name);
}

void
migration_set_barrier(migration_barrier_fn *fn)
{
    barrier = fn;
}

/* ---- the probe ----------------------------------------------------------- */

void
migration_probe(struct migration_probe *pr)
{
    struct rconn c = {.fd = -1};

    pr->why[0] = '\0';
    for (size_t i = 0; i < pr->n; i++) {
        struct conf_addr a = {0};
        char err[256];
        struct rval v;

        pr->keys[i] = -1;
        if (conf_parse_addr(pr->addresses[i], &a, err, sizeof(err)) != 0) {
            if (pr->why[0] == '\0')
                snprintf(pr->why, sizeof(pr->why), "%s", err);
            continue;
        }
        if (rc_open(&c, &a, pr->timeout_ms, pr->auth, pr->db, err,
                    sizeof(err)) != 0) {
            if (pr->why[0] == '\0')
                snprintf(pr->why, sizeof(pr->why), "%s", err);
            conf_addr_deinit(&a);
            continue;
        }
        if ((int)i == pr->flush) {
            const char *argv[] = {"FLUSHDB"};

            if (rc_cmd(&c, 1, argv, NULL) < 0 || rc_call(&c, &v) < 0 ||
                v.type == '-') {
                if (pr->why[0] == '\0')
                    snprintf(pr->why, sizeof(pr->why), "FLUSHDB on %s: %s",
                             pr->addresses[i],
                             v.type == '-' ? v.s : "no answer");
                rval_free(&v);
                rc_close(&c);
                conf_addr_deinit(&a);
                continue;
            }
            rval_free(&v);
        }
        {
            const char *argv[] = {"DBSIZE"};

            if (rc_cmd(&c, 1, argv, NULL) == 0 && rc_call(&c, &v) == 0 &&
                v.type == ':')
                pr->keys[i] = v.i;
            else if (pr->why[0] == '\0')
                snprintf(pr->why, sizeof(pr->why), "DBSIZE on %s: %s",
                         pr->addresses[i], v.type == '-' ? v.s : "no answer");
            rval_free(&v);
        }
        rc_close(&c);
        conf_addr_deinit(&a);
    }
    rc_free(&c);
}

/* ---- the copier ------------------------------------------------------------
 */

static void
sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Wait until <keys> keys and <bytes> bytes may go (migration_rate,
 * migration_bandwidth), or the migration stops. With etcd, nothing goes
 * while this instance's lease may have expired (fence_up): another
 * instance may hold the copier lock by then. */
static void
throttle(struct migration *m, uint64_t keys, uint64_t bytes)
{
    for (;;) {
        uint64_t now = clock_ms();
        double dt;
        bool ok;

        if (m->etcd && fence_up(now)) {
            if (atomic_load(&m->stop))
                return;
            sleep_ms(20);
            continue;
        }
        pthread_mutex_lock(&m->lock);
        dt = (double)(now - m->tok_ms) / 1000.0;
        m->tok_ms = now;
        /* bursts of a tenth of a second at most (or one batch) */
        if (m->rate > 0) {
            double cap = m->rate / 10.0 > m->batch ? m->rate / 10.0 : m->batch;

            m->tok_keys += dt * m->rate;
            if (m->tok_keys > cap)
                m->tok_keys = cap;
        }
        if (m->bandwidth > 0) {
            m->tok_bytes += dt * (double)m->bandwidth;
            if (m->tok_bytes > (double)m->bandwidth / 10.0)
                m->tok_bytes = (double)m->bandwidth / 10.0;
        }
        ok = (m->rate == 0 || m->tok_keys > 0) &&
             (m->bandwidth == 0 || m->tok_bytes > 0);
        if (ok) {
            /* may go below 0: the next ones wait for it */
            if (m->rate > 0)
                m->tok_keys -= (double)keys;
            if (m->bandwidth > 0)
                m->tok_bytes -= (double)bytes;
        }
        pthread_mutex_unlock(&m->lock);
        if (ok || atomic_load(&m->stop))
            return;
        sleep_ms(m->rate > 0 && m->rate < 100 ? 50 : 5);
    }
}

/* What a batch of moves did. */
struct tally {
    uint64_t moved, absent, failed, bytes;
};

struct moving {
    char *key;
    size_t len;
    struct server *to;
    long long bytes; /* MEMORY USAGE, -1: gone */
};

/* The words of "MIGRATE <host> <port> "" <db> <timeout> [REPLACE] [AUTH
 * pw] KEYS" to member <to>, their text kept in <h>: into <argv> (room
 * for 10) with their lengths in <lens>; how many, or 0 when <to> is a
 * unix socket. */
struct mhead {
    char host[64], port[8], db[16], timeout[16];
};

static size_t
migrate_head(const struct migration *m, const struct server *to, bool replace,
             struct mhead *h, const char **argv, size_t *lens)
{
    size_t argc = 0;

    if (migration_host_port(&to->addr, h->host, sizeof(h->host), h->port,
                            sizeof(h->port)) < 0)
        return 0;
    snprintf(h->db, sizeof(h->db), "%d", m->db);
    snprintf(h->timeout, sizeof(h->timeout), "%u", m->timeout_ms);
    argv[argc++] = "MIGRATE";
    argv[argc++] = h->host;
    argv[argc++] = h->port;
    argv[argc++] = "";
    argv[argc++] = h->db;
    argv[argc++] = h->timeout;
    if (replace)
        argv[argc++] = "REPLACE";
    if (m->auth != NULL) {
        argv[argc++] = "AUTH";
        argv[argc++] = m->auth;
    }
    argv[argc++] = "KEYS";
    for (size_t a = 0; a < argc; a++)
        lens[a] = strlen(argv[a]);
    return argc;
}

/* MIGRATE each of <k>[0..<n>) to its new owner, one key per MIGRATE,
 * pipelined; keys that the target already has (or that timed out) are
 * tried again with REPLACE. -1 when the connection failed. */
static int
migrate_each(struct msource *ms, struct rconn *c, struct moving *k, size_t n,
             struct tally *t, char *err, size_t errlen)
{
    struct migration *m = ms->m;
    unsigned *tries = calloc(n ? n : 1, sizeof(*tries));
    int *res = calloc(n ? n : 1, sizeof(*res));
    bool again = true;
    int rc = 0;

    if (tries == NULL || res == NULL) {
        free(tries);
        free(res);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        res[i] = k[i].bytes < 0 ? GATE_ABSENT : GATE_RETRY;
    while (again && rc == 0 && !atomic_load(&m->stop)) {
        size_t sent = 0;

        again = false;
        for (size_t i = 0; i < n; i++) {
            struct mhead h;
            const char *argv[12];
            size_t lens[12], argc;

            if (res[i] != GATE_RETRY)
                continue;
            argc = migrate_head(m, k[i].to, tries[i] > 0, &h, argv, lens);
            if (argc == 0) {
                res[i] = GATE_FAILED;
                continue;
            }
            lens[argc] = k[i].len;
            argv[argc++] = k[i].key;
            if (rc_cmd(c, (int)argc, argv, lens) < 0) {
                rc = -1;
                break;
            }
            sent++;
        }
        if (rc == 0 && sent > 0 && rc_flush(c) < 0)
            rc = -1;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            struct rval v;
            int r;

            if (res[i] != GATE_RETRY)
                continue;
            if (rc_reply(c, &v) < 0) {
                rc = -1;
                break;
            }
            r = v.type == '+' || v.type == '-'
                    ? migration_migrate_result(v.type == '+' ? "+" : "-", 1)
                    : GATE_FAILED;
            if (v.type == '+' || v.type == '-') {
                char line[300];
                snprintf(line, sizeof(line), "%c%s", v.type, v.s);
                r = migration_migrate_result(line, strlen(line));
            }
            tries[i]++;
            if (r == GATE_RETRY && tries[i] < KEY_TRIES) {
                again = true;
            } else if (r == GATE_RETRY || r == GATE_FAILED) {
                r = GATE_FAILED;
                snprintf(err, errlen, "MIGRATE of '%.*s' to %s: %s",
                         (int)(k[i].len > 60 ? 60 : k[i].len), k[i].key,
                         k[i].to->name, v.s != NULL ? v.s : "bad reply");
            }
            res[i] = r;
            rval_free(&v);
        }
        if (again)
            sleep_ms(20);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (res[i] == GATE_MOVED) {
            t->moved++;
            t->bytes += (uint64_t)(k[i].bytes > 0 ? k[i].bytes : 0);
        } else if (res[i] == GATE_ABSENT) {
            t->absent++;
        } else {
            t->failed++;
        }
    }
    free(tries);
    free(res);
    return rc;
}

/*
 * Move <k>[0..<n>) (all to one member) with one MIGRATE ... KEYS, inside
 * MULTI with an EXISTS per key before it: the replies say exactly which
 * keys it moved (a request may move one of them just before; that one
 * is then absent here, not counted twice). A MIGRATE error (the target
 * has a key, an I/O error: some keys may have moved) sends what is still
 * there through migrate_each. -1 when the connection failed.
 */
static int
migrate_batch(struct msource *ms, struct rconn *c, struct moving *k, size_t n,
              struct tally *t, char *err, size_t errlen)
{
    struct migration *m = ms->m;
    struct mhead h;
    const char **argv = calloc(n + 10, sizeof(*argv));
    size_t *lens = calloc(n + 10, sizeof(*lens));
    struct rval v;
    size_t argc = 0, left = 0;
    int rc = 0;

    if (argv == NULL || lens == NULL) {
        free(argv);
        free(lens);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    argc = migrate_head(m, k[0].to, false, &h, argv, lens);
    if (argc == 0) {
        free(argv);
        free(lens);
        t->failed += n;
        return 0;
    }
    {
        const char *multi[] = {"MULTI"};

        if (rc_cmd(c, 1, multi, NULL) < 0)
            rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *ex[] = {"EXISTS", k[i].key};
        size_t exl[] = {6, k[i].len};

        if (rc_cmd(c, 2, ex, exl) < 0)
            rc = -1;
    }
    for (size_t i = 0; i < n; i++) {
        lens[argc] = k[i].len;
        argv[argc++] = k[i].key;
    }
    if (rc == 0 && rc_cmd(c, (int)argc, argv, lens) < 0)
        rc = -1;
    {
        const char *exec[] = {"EXEC"};

        if (rc == 0 && (rc_cmd(c, 1, exec, NULL) < 0 || rc_flush(c) < 0))
            rc = -1;
    }
    /* +OK, a +QUEUED per command, then EXEC's array */
    for (size_t i = 0; rc == 0 && i < n + 2; i++) {
        if (rc_reply(c, &v) < 0) {
            rc = -1;
            break;
        }
        if (v.type == '-') {
            snprintf(err, errlen, "MULTI on %s: %s", ms->srv->name, v.s);
            rval_free(&v);
            rc = -1;
            break;
        }
        rval_free(&v);
    }
    if (rc == 0 && rc_reply(c, &v) < 0)
        rc = -1;
    if (rc == 0) {
        if (v.type != '*' || v.n != n + 1) {
            snprintf(err, errlen, "EXEC on %s: unexpected reply",
                     ms->srv->name);
            rc = -1;
        } else {
            const struct rval *res = &v.el[n];
            char line[300];
            int r;

            snprintf(line, sizeof(line), "%c%s", res->type,
                     res->s != NULL ? res->s : "");
            r = migration_migrate_result(line, strlen(line));
            for (size_t i = 0; i < n; i++) {
                bool there = v.el[i].type == ':' && v.el[i].i == 1;

                if (r == GATE_MOVED || r == GATE_ABSENT) {
                    if (there) {
                        t->moved++;
                        t->bytes += (uint64_t)(k[i].bytes > 0 ? k[i].bytes : 0);
                    } else {
                        t->absent++;
                    }
                } else if (there) {
                    k[left++] = k[i]; /* try it alone */
                } else {
                    t->absent++;
                }
            }
            if (r != GATE_MOVED && r != GATE_ABSENT && left > 0) {
                pthread_mutex_lock(&m->lock);
                snprintf(ms->last_error, sizeof(ms->last_error),
                         "MIGRATE to %.40s: %.140s", k[0].to->name, line + 1);
                pthread_mutex_unlock(&m->lock);
                rc = migrate_each(ms, c, k, left, t, err, errlen);
            }
        }
        rval_free(&v);
    }
    free(argv);
    free(lens);
    return rc;
}

/* Move <k>[0..<n>): one batch per new owner. */
static int
migrate_keys(struct msource *ms, struct rconn *c, struct moving *k, size_t n,
             struct tally *t, char *err, size_t errlen)
{
    bool *sent = calloc(n ? n : 1, sizeof(*sent));
    struct moving *grp = calloc(n ? n : 1, sizeof(*grp));
    int rc = 0;

    if (sent == NULL || grp == NULL) {
        free(sent);
        free(grp);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t g = 0;

        if (sent[i])
            continue;
        if (k[i].bytes < 0) { /* gone since SCAN (MEMORY USAGE: nil) */
            t->absent++;
            sent[i] = true;
            continue;
        }
        for (size_t j = i; j < n; j++)
            if (!sent[j] && k[j].to == k[i].to && k[j].bytes >= 0) {
                grp[g++] = k[j];
                sent[j] = true;
            }
        rc = migrate_batch(ms, c, grp, g, t, err, errlen);
    }
    free(sent);
    free(grp);
    return rc;
}

static void
big_key(struct msource *ms, const struct moving *k, uint64_t ms_taken)
{
    struct migration *m = ms->m;
    json_t *j;

    pthread_mutex_lock(&m->lock);
    if (json_array_size(m->big_keys) < BIG_KEYS_MAX &&
        (j = json_object()) != NULL) {
        json_object_set_new(j, "member", json_string(ms->srv->name));
        json_object_set_new(
            j, "key",
            json_stringn_nocheck(k->key, k->len > 200 ? 200 : k->len));
        json_object_set_new(j, "bytes", json_integer(k->bytes));
        json_object_set_new(j, "ms", json_integer((json_int_t)ms_taken));
        json_array_append_new(m->big_keys, j);
    }
    pthread_mutex_unlock(&m->lock);
    log_info("pool %s: migration: big key '%.*s' (%lld bytes) moved from %s "
             "to %s in %" PRIu64 " ms",
             m->pool->name, (int)(k->len > 60 ? 60 : k->len), k->key, k->bytes,
             ms->srv->name, k->to->name, ms_taken);
}

static void
source_error(struct msource *ms, const char *err)
{
    pthread_mutex_lock(&ms->m->lock);
    ms->errors++;
    snprintf(ms->last_error, sizeof(ms->last_error), "%s", err);
    pthread_mutex_unlock(&ms->m->lock);
    log_warn_limited(1, "pool %s: migration from %s: %s", ms->m->pool->name,
                     ms->srv->name, err);
}

/* Count what a batch of <ms> in pass <pass> did (<t> goes back to 0):
 * shown, and saved, batch by batch. */
static void
account(struct msource *ms, unsigned pass, struct tally *t, const char *err)
{
    pthread_mutex_lock(&ms->m->lock);
    ms->bytes += t->bytes;
    ms->absent += t->absent;
    ms->moved += t->moved;
    if (pass >= 2) {
        /* a moving key on its old owner after the copy pass: one that
         * failed in the pass before, or an anomaly */
        for (uint64_t x = 0; x < t->moved; x++) {
            if (ms->retry_failed > 0)
                ms->retry_failed--;
            else
                ms->anomalies++;
        }
    }
    ms->failed += t->failed;
    ms->pass_failed += t->failed;
    if (t->failed > 0) {
        ms->errors++;
        snprintf(ms->last_error, sizeof(ms->last_error), "%.190s", err);
    }
    pthread_mutex_unlock(&ms->m->lock);
    if (t->failed > 0)
        log_warn_limited(1,
                         "pool %s: migration from %s: %" PRIu64 " keys not "
                         "moved (tried again in the next pass): %s",
                         ms->m->pool->name, ms->srv->name, t->failed, err);
    memset(t, 0, sizeof(*t));
}

/* One SCAN step of <ms> and the moves it finds. 0, or -1 when the
 * connection failed (<err>). */
static int
copy_step(struct msource *ms, struct rconn *c, char *err, size_t errlen)
{
    struct migration *m = ms->m;
    const struct pool_snapshot *was = m->view->old, *now = m->new_snap;
    char cursor[24], count[16];
    unsigned pass;
    struct rval v, *keys;
    struct moving *mv = NULL;
    size_t nmv = 0;
    struct tally t = {0};
    int rc = 0;

    int stage = atomic_load(&m->view->stage);

    err[0] = '\0';
    pthread_mutex_lock(&m->lock);
    snprintf(cursor, sizeof(cursor), "%s", ms->cursor);
    pass = ms->pass;
    pthread_mutex_unlock(&m->lock);
    snprintf(count, sizeof(count), "%u", m->batch < 100 ? 100 : m->batch);
    {
        const char *argv[] = {"SCAN", cursor, "COUNT", count};

        if (rc_cmd(c, 4, argv, NULL) < 0 || rc_call(c, &v) < 0) {
            snprintf(err, errlen, "SCAN on %s: no answer", ms->srv->name);
            return -1;
        }
    }
    if (v.type != '*' || v.n != 2 || v.el[0].type != '$' ||
        v.el[1].type != '*') {
        snprintf(err, errlen, "SCAN on %s: %s", ms->srv->name,
                 v.type == '-' ? v.s : "unexpected reply");
        rval_free(&v);
        return -1;
    }
    keys = &v.el[1];
    mv = calloc(keys->n ? keys->n : 1, sizeof(*mv));
    if (mv == NULL) {
        rval_free(&v);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < keys->n; i++) {
        const struct rval *k = &keys->el[i];
        struct server *o, *n;

        if (k->type != '$')
            continue;
        o = pool_snapshot_owner(was, k->s, k->len);
        n = pool_snapshot_owner(now, k->s, k->len);
        if (o != ms->srv || n == NULL || n == ms->srv)
            continue; /* stays, or not ours to move */
        if (stage == 1 && migration_deferred(o->name, n->name))
            continue; /* the second stage's */
        mv[nmv].key = k->s;
        mv[nmv].len = k->len;
        mv[nmv].to = n;
        mv[nmv].bytes = 0;
        nmv++;
    }
    /* their sizes, for the bandwidth cap and the big keys */
    for (size_t i = 0; i < nmv && rc == 0; i++) {
        const char *argv[] = {"MEMORY", "USAGE", mv[i].key};
        size_t lens[] = {6, 5, mv[i].len};

        if (rc_cmd(c, 3, argv, lens) < 0)
            rc = -1;
    }
    if (rc == 0 && nmv > 0 && rc_flush(c) < 0)
        rc = -1;
    for (size_t i = 0; i < nmv && rc == 0; i++) {
        struct rval u;

        if (rc_reply(c, &u) < 0) {
            rc = -1;
            break;
        }
        mv[i].bytes = u.type == ':' ? u.i : u.type == 0 ? -1 : 0;
        rval_free(&u);
    }
    if (rc < 0)
        snprintf(err, errlen, "MEMORY USAGE on %s: no answer", ms->srv->name);
    /* in batches: a big key alone */
    for (size_t i = 0; i < nmv && rc == 0 && !atomic_load(&m->stop);) {
        size_t j = i, nbytes = 0;

        if (mv[i].bytes >= (long long)m->big_key) {
            uint64_t t0 = clock_ms();

            throttle(m, 1, (uint64_t)mv[i].bytes);
            rc = migrate_keys(ms, c, &mv[i], 1, &t, err, errlen);
            if (rc == 0 && t.moved > 0)
                big_key(ms, &mv[i], clock_ms() - t0);
            account(ms, pass, &t, err);
            i++;
            continue;
        }
        while (j < nmv && j - i < m->batch &&
               mv[j].bytes < (long long)m->big_key) {
            nbytes += mv[j].bytes > 0 ? (size_t)mv[j].bytes : 0;
            j++;
        }
        throttle(m, j - i, nbytes);
        rc = migrate_keys(ms, c, &mv[i], j - i, &t, err, errlen);
        account(ms, pass, &t, err);
        i = j;
    }
    account(ms, pass, &t, err);
    pthread_mutex_lock(&m->lock);
    ms->scanned += keys->n;
    if (rc == 0 && !atomic_load(&m->stop)) {
        snprintf(ms->cursor, sizeof(ms->cursor), "%s", v.el[0].s);
        if (strcmp(ms->cursor, "0") == 0) {
            /* a whole pass: the next verifies; done once a verification
             * pass found nothing it could not move */
            if (pass >= 2 && ms->pass_failed == 0)
                ms->phase = MIG_DONE;
            else
                ms->phase = MIG_VERIFYING;
            ms->retry_failed = ms->pass_failed;
            ms->pass_failed = 0;
            ms->pass++;
        }
    }
    pthread_mutex_unlock(&m->lock);
    free(mv);
    rval_free(&v);
    return rc;
}

static void *
copier(void *arg)
{
    struct msource *ms = arg;
    struct migration *m = ms->m;
    struct rconn c = {.fd = -1};
    uint32_t backoff = RETRY_MS;
    char err[300];

    while (!atomic_load(&m->stop)) {
        bool done, verify_again;

        pthread_mutex_lock(&m->lock);
        done = ms->phase == MIG_DONE || ms->skipped;
        verify_again = ms->pass > 2 && strcmp(ms->cursor, "0") == 0;
        pthread_mutex_unlock(&m->lock);
        if (done)
            break;
        if (c.fd < 0) {
            if (rc_open(&c, &ms->srv->addr, m->timeout_ms, m->auth, m->db, err,
                        sizeof(err)) != 0) {
                source_error(ms, err);
                for (uint32_t t = 0; t < backoff && !atomic_load(&m->stop);
                     t += 50)
                    sleep_ms(50);
                backoff =
                    backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
                continue;
            }
            backoff = RETRY_MS;
            pthread_mutex_lock(&m->lock);
            if (ms->dbsize_start < 0) {
                const char *argv[] = {"DBSIZE"};
                struct rval v;

                pthread_mutex_unlock(&m->lock);
                if (rc_cmd(&c, 1, argv, NULL) == 0 && rc_call(&c, &v) == 0 &&
                    v.type == ':') {
                    pthread_mutex_lock(&m->lock);
                    ms->dbsize_start = v.i;
                    pthread_mutex_unlock(&m->lock);
                }
                rval_free(&v);
            } else {
                pthread_mutex_unlock(&m->lock);
            }
        }
        if (verify_again) {
            /* keys failed to move: try again in a while */
            for (int t = 0; t < 20 && !atomic_load(&m->stop); t++)
                sleep_ms(50);
        }
        if (copy_step(ms, &c, err, sizeof(err)) != 0) {
            if (err[0] == '\0')
                snprintf(err, sizeof(err), "connection to %s (%s) lost",
                         ms->srv->name, ms->srv->addr.text);
            source_error(ms, err);
            rc_close(&c);
        }
    }
    rc_free(&c);
    return NULL;
}

/* ---- the migration on the control thread ------------------------------- */

static void
running_del(struct migration *m)
{
    for (size_t i = 0; i < nrunning; i++) {
        if (running[i] == m) {
            running[i] = running[--nrunning];
            return;
        }
    }
}

static int
running_add(struct migration *m)
{
    if (nrunning == caprunning) {
        size_t cap = caprunning ? caprunning * 2 : 8;
        struct migration **r = realloc(running, cap * sizeof(*r));

        if (r == NULL)
            return -1;
        running = r;
        caprunning = cap;
    }
    running[nrunning++] = m;
    return 0;
}

static struct last *
last_get(const char *pool)
{
    for (struct last *l = lasts; l != NULL; l = l->next)
        if (strcmp(l->pool, pool) == 0)
            return l;
    return NULL;
}

bool
migration_active(const struct pool *p)
{
    return p->migration != NULL;
}

bool
migration_exclusive(const struct pool *p)
{
    return p->migration != NULL && !p->migration->warmup;
}

/* Totals over the sources (under m->lock). */
struct totals {
    uint64_t scanned, moved, bytes, absent, failed, anomalies, errors;
    uint64_t gate_moved, gate_absent, gate_failed;
};

static void
totals(struct migration *m, struct totals *t)
{
    struct stats_pool_sum ps;

    memset(t, 0, sizeof(*t));
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        t->scanned += m->src[i].scanned;
        t->moved += m->src[i].moved;
        t->bytes += m->src[i].bytes;
        t->absent += m->src[i].absent;
        t->failed += m->src[i].failed;
        t->anomalies += m->src[i].anomalies;
        t->errors += m->src[i].errors;
    }
    pthread_mutex_unlock(&m->lock);
    stats_pool_sum(m->pool->stats, pool_workers(), &ps);
    t->gate_moved = ps.gate_moved - m->gate_base_moved + m->gate_moved_before;
    t->gate_absent = ps.gate_absent - m->gate_base_absent;
    t->gate_failed = ps.gate_failed - m->gate_base_failed;
}

void
migration_busy(const struct pool *p, char *buf, size_t cap)
{
    struct migration *m = p->migration;
    struct totals t;

    if (m == NULL) {
        snprintf(buf, cap, "no migration in pool %s", p->name);
        return;
    }
    totals(m, &t);
    snprintf(buf, cap,
             "migration in progress in pool %s (%s, phase %s, %" PRIu64
             " of about %" PRIu64 " keys moved): one change at a time; "
             "`chash ctl migration %s` shows its progress",
             p->name, m->change, phase_names[m->phase], t.moved + t.gate_moved,
             m->keys_predicted, p->name);
}

static void
iso_time(time_t t, char *buf, size_t cap)
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *
leaving_json(const struct migration *m)
{
    json_t *a = json_array();

    for (size_t i = 0; i < m->nleaving; i++)
        json_array_append_new(a, json_string(m->leaving[i]));
    return a;
}

bool
migration_is_leaving(const struct pool *p, const char *name)
{
    const struct migration *m = p->migration;

    for (size_t i = 0; m != NULL && i < m->nleaving; i++)
        if (strcmp(m->leaving[i], name) == 0)
            return true;
    return false;
}

/* The migration as the API shows it. */
static json_t *
migration_to_json(struct migration *m)
{
    struct totals t;
    json_t *j = json_object(), *srcs = json_array();
    char when[32];
    uint64_t now = clock_ms();
    uint64_t end = m->finished_ms ? m->finished_ms : now;
    double elapsed = (double)(end - m->started_ms) / 1000.0;
    uint64_t done_keys;
    double rate;

    totals(m, &t);
    done_keys = t.moved + t.gate_moved;
    rate = elapsed > 0 ? (double)t.moved / elapsed : 0;
    iso_time(m->started_wall, when, sizeof(when));
    json_object_set_new(j, "pool", json_string(m->pool->name));
    json_object_set_new(j, "migration",
                        json_string(m->warmup ? "warmup" : "copy"));
    if (m->warmup) {
        json_object_set_new(
            j, "warmup_s",
            json_real(m->pool->cfg.migration_warmup_ms / 1000.0));
        json_object_set_new(
            j, "warmup_left_s",
            json_real(m->phase == MIG_WARMING && m->warm_until_ms > now
                          ? (double)(m->warm_until_ms - now) / 1000.0
                          : 0.0));
    }
    json_object_set_new(j, "active", json_boolean(m->phase != MIG_DONE));
    json_object_set_new(j, "epoch", json_integer((json_int_t)m->epoch));
    json_object_set_new(j, "phase", json_string(phase_names[m->phase]));
    if (m->view != NULL && atomic_load(&m->view->stage) > 0)
        json_object_set_new(j, "stage",
                            json_integer(atomic_load(&m->view->stage)));
    json_object_set_new(j, "change", json_string(m->change));
    json_object_set_new(j, "leaving", leaving_json(m));
    json_object_set_new(j, "started", json_string(when));
    if (m->etcd) {
        /* run by every instance: who copies, whether this one waits */
        json_object_set_new(j, "etcd", json_true());
        json_object_set_new(j, "copier",
                            m->holder_of[0] ? json_string(m->holder_of)
                                            : json_null());
        json_object_set_new(j, "copying_here", json_boolean(m->holder));
        json_object_set_new(j, "waiting_for_instances",
                            json_boolean(m->barrier_wait));
    }
    json_object_set_new(j, "elapsed_s", json_real(elapsed));
    json_object_set_new(j, "keys_predicted",
                        json_integer((json_int_t)m->keys_predicted));
    json_object_set_new(j, "keys_total",
                        json_integer((json_int_t)m->keys_total));
    json_object_set_new(j, "keys_scanned", json_integer((json_int_t)t.scanned));
    json_object_set_new(j, "keys_moved", json_integer((json_int_t)t.moved));
    json_object_set_new(j, "keys_moved_by_traffic",
                        json_integer((json_int_t)t.gate_moved));
    json_object_set_new(j, "keys_absent",
                        json_integer((json_int_t)(t.absent + t.gate_absent)));
    json_object_set_new(j, "bytes_moved", json_integer((json_int_t)t.bytes));
    json_object_set_new(j, "rate_keys_s", json_real(rate));
    if (m->phase == MIG_DONE || rate <= 0 || done_keys >= m->keys_predicted)
        json_object_set_new(j, "eta_s",
                            m->phase == MIG_DONE ? json_real(0) : json_null());
    else
        json_object_set_new(
            j, "eta_s",
            json_real((double)(m->keys_predicted - done_keys) / rate));
    json_object_set_new(j, "anomalies", json_integer((json_int_t)t.anomalies));
    json_object_set_new(j, "failed_keys",
                        json_integer((json_int_t)(t.failed + t.gate_failed)));
    json_object_set_new(j, "errors", json_integer((json_int_t)t.errors));
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        const struct msource *ms = &m->src[i];
        json_t *s = json_object();
        double progress = ms->phase == MIG_DONE ? 1.0
                          : ms->pass >= 2       ? 0.99
                          : ms->dbsize_start > 0
                              ? (double)ms->scanned / (double)ms->dbsize_start
                              : 0.0;

        if (progress > 0.99 && ms->phase != MIG_DONE)
            progress = 0.99;
        json_object_set_new(s, "member", json_string(ms->srv->name));
        json_object_set_new(s, "address", json_string(ms->srv->addr.text));
        json_object_set_new(s, "phase",
                            json_string(m->phase == MIG_DRAINING
                                            ? "draining"
                                            : phase_names[ms->phase]));
        json_object_set_new(s, "pass", json_integer(ms->pass));
        json_object_set_new(s, "cursor", json_string(ms->cursor));
        json_object_set_new(s, "keys_scanned",
                            json_integer((json_int_t)ms->scanned));
        json_object_set_new(s, "keys_moved",
                            json_integer((json_int_t)ms->moved));
        json_object_set_new(s, "bytes_moved",
                            json_integer((json_int_t)ms->bytes));
        json_object_set_new(s, "failed_keys",
                            json_integer((json_int_t)ms->failed));
        json_object_set_new(s, "anomalies",
                            json_integer((json_int_t)ms->anomalies));
        json_object_set_new(s, "dbsize_at_start",
                            ms->dbsize_start >= 0
                                ? json_integer(ms->dbsize_start)
                                : json_null());
        json_object_set_new(s, "progress", json_real(progress));
        json_object_set_new(s, "done", json_boolean(ms->phase == MIG_DONE));
        json_object_set_new(s, "skipped", json_boolean(ms->skipped));
        json_object_set_new(s, "last_error",
                            ms->last_error[0] ? json_string(ms->last_error)
                                              : json_null());
        json_array_append_new(srcs, s);
    }
    json_object_set_new(j, "big_keys", json_deep_copy(m->big_keys));
    pthread_mutex_unlock(&m->lock);
    json_object_set_new(j, "sources", srcs);
    return j;
}

json_t *
migration_json(const struct pool *p)
{
    struct last *l = last_get(p->name);
    json_t *j;

    if (p->migration != NULL) {
        j = migration_to_json(p->migration);
    } else if (l != NULL && l->ending != NULL) {
        j = migration_to_json(l->ending); /* finishing */
    } else {
        j = json_object();
        json_object_set_new(j, "pool", json_string(p->name));
        json_object_set_new(j, "migration",
                            json_string(conf_migration_name(p->cfg.migration)));
        json_object_set_new(j, "active", json_false());
        if (l != NULL)
            json_object_set_new(j, "phase", json_string("done"));
    }
    json_object_set(j, "last", l != NULL ? l->j : json_null());
    return j;
}

/* The placement <snap> holds, as a migration keeps its old one (the state
 * file's, an etcd descriptor's): [{"name", "weight"}], what saved_load
 * reads back. */
static json_t *
placement_json(const struct pool_snapshot *snap)
{
    json_t *o = json_array();

    for (size_t i = 0; snap != NULL && i < snap->n; i++)
        json_array_append_new(
            o, json_pack("{s:s,s:I}", "name", snap->members[i].name, "weight",
                         (json_int_t)snap->members[i].weight));
    return o;
}

/* What the state file keeps of <m>: enough to resume it. */
static json_t *
saved_json(struct migration *m)
{
    json_t *j = json_object(), *srcs = json_object();
    struct totals t;
    char when[32];

    totals(m, &t);
    iso_time(m->started_wall, when, sizeof(when));
    json_object_set_new(j, "epoch", json_integer((json_int_t)m->epoch));
    json_object_set_new(j, "change", json_string(m->change));
    json_object_set_new(j, "leaving", leaving_json(m));
    json_object_set_new(j, "started", json_string(when));
    json_object_set_new(j, "started_unix",
                        json_integer((json_int_t)m->started_wall));
    json_object_set_new(j, "keys_predicted",
                        json_integer((json_int_t)m->keys_predicted));
    json_object_set_new(j, "keys_total",
                        json_integer((json_int_t)m->keys_total));
    json_object_set_new(j, "moved_by_traffic",
                        json_integer((json_int_t)t.gate_moved));
    json_object_set_new(j, "stage",
                        json_integer(atomic_load(&m->view->stage) > 0
                                         ? atomic_load(&m->view->stage)
                                         : 0));
    json_object_set_new(j, "old", placement_json(m->view->old));
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        const struct msource *ms = &m->src[i];

        json_object_set_new(
            srcs, ms->srv->name,
            json_pack(
                "{s:i,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "pass",
                (int)ms->pass, "cursor", ms->cursor, "scanned",
                (json_int_t)ms->scanned, "moved", (json_int_t)ms->moved,
                "bytes", (json_int_t)ms->bytes, "failed",
                (json_int_t)ms->failed, "anomalies", (json_int_t)ms->anomalies,
                "dbsize_start", (json_int_t)ms->dbsize_start, "done",
                (json_int_t)(ms->phase == MIG_DONE), "skipped", ms->skipped));
    }
    pthread_mutex_unlock(&m->lock);
    json_object_set_new(j, "sources", srcs);
    return j;
}

static void
save(struct migration *m)
{
    json_t *j;

    if (m->etcd)
        return; /* etcd holds it (the descriptor), not the state file */
    j = saved_json(m);

    host_save(m->pool->name, j);
    json_decref(j);
    m->saved_ms = clock_ms();
}

static void
migration_free(struct migration *m)
{
    for (size_t i = 0; i < m->nsrc; i++) {
        atomic_store(&m->src[i].srv->mig_skip, false);
        server_unref(m->src[i].srv);
    }
    free(m->src);
    for (size_t i = 0; i < m->nleaving; i++)
        free(m->leaving[i]);
    free(m->leaving);
    free(m->auth);
    json_decref(m->big_keys);
    migration_drain_unref(m->drain);
    pthread_mutex_destroy(&m->lock);
    pool_unref(m->pool);
    free(m);
}

/* A migration of <p> from placement <old> (pinned by the view made here). */
static struct migration *
migration_new(struct pool *p, struct pool_snapshot *old, uint64_t epoch,
              const char *change, const char *const *leaving, size_t nleaving)
{
    struct migration *m = calloc(1, sizeof(*m));
    struct migration_view *v = calloc(1, sizeof(*v));

    bool warm = p->cfg.migration == CONF_MIGRATION_WARMUP;

    if (m == NULL || v == NULL ||
        (!warm && old->n > 0 &&
         (m->src = calloc(old->n, sizeof(*m->src))) == NULL)) {
        free(m != NULL ? m->src : NULL);
        free(m);
        free(v);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->big_keys = json_array();
    m->pool = p;
    pool_ref(p);
    m->epoch = epoch;
    m->phase = MIG_DRAINING;
    snprintf(m->change, sizeof(m->change), "%s", change);
    m->leaving = calloc(nleaving ? nleaving : 1, sizeof(*m->leaving));
    for (size_t i = 0; m->leaving != NULL && i < nleaving; i++)
        if ((m->leaving[m->nleaving] = strdup(leaving[i])) != NULL)
            m->nleaving++;
    m->auth = p->cfg.redis_auth != NULL ? strdup(p->cfg.redis_auth) : NULL;
    m->db = p->cfg.redis_db;
    m->timeout_ms = p->cfg.migration_timeout_ms;
    m->batch = p->cfg.migration_batch ? p->cfg.migration_batch : 100;
    m->rate = p->cfg.migration_rate;
    m->bandwidth = p->cfg.migration_bandwidth;
    m->big_key = p->cfg.migration_big_key;
    m->started_wall = time(NULL);
    m->started_ms = clock_ms();
    m->tok_ms = m->started_ms;
    /* one batch may go at once; then the rate (no second of burst) */
    m->tok_keys = m->rate < m->batch ? m->rate : m->batch;
    m->tok_bytes = (double)m->bandwidth;
    m->warmup = warm;
    m->warm_until_ms = m->started_ms + p->cfg.migration_warmup_ms;
    for (size_t i = 0; !warm && i < old->n; i++) {
        struct msource *ms = &m->src[m->nsrc++];

        ms->m = m;
        ms->srv = old->servers[i];
        server_ref(ms->srv);
        ms->phase = MIG_COPYING;
        ms->pass = 1;
        ms->dbsize_start = -1;
        snprintf(ms->cursor, sizeof(ms->cursor), "0");
    }
    v->refs = 1; /* the pool's */
    v->epoch = epoch;
    /* a warm-up has one stage; a copy's stages are decided by the first
     * snapshot that moves keys (migration_view_decide) */
    atomic_store(&v->stage, warm ? 0 : MIG_STAGE_UNDECIDED);
    v->old = old;
    pool_snapshot_pin(old);
    m->view = v;
    {
        struct stats_pool_sum ps;

        stats_pool_sum(p->stats, pool_workers(), &ps);
        m->gate_base_moved = ps.gate_moved;
        m->gate_base_absent = ps.gate_absent;
        m->gate_base_failed = ps.gate_failed;
    }
    return m;
}

static void warmup_end(struct migration *m);
static void copiers_start(struct migration *m);

int
migration_prepare(struct pool *p, const char *change,
                  const char *const *leaving, size_t nleaving,
                  uint64_t keys_predicted, uint64_t keys_total, char *err,
                  size_t errlen)
{
    struct pool_snapshot *old = atomic_load(&p->snap);
    struct migration *m;

    bool ended = false;

    if (p->migration != NULL && p->migration->warmup) {
        /* a cache's warm-up gives way to the next change: the keys it
         * did not warm stay cold. (The snapshot it schedules has the
         * placement of the current one: this change may go on.) */
        log_info("pool %s: warm-up %" PRIu64 " (%s) ends early: a new "
                 "change",
                 p->name, p->migration->epoch, p->migration->change);
        warmup_end(p->migration);
        ended = true;
    }
    if (p->migration != NULL) {
        migration_busy(p, err, errlen);
        return -1;
    }
    if (!ended && (p->build != NULL || p->dirty)) {
        snprintf(err, errlen, "pool %s: a change is being published; try again",
                 p->name);
        return -1;
    }
    m = migration_new(p, old, ++next_epoch, change, leaving, nleaving);
    if (m == NULL || running_add(m) != 0) {
        if (m != NULL) {
            migration_view_unref(m->view);
            migration_free(m);
        }
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->keys_predicted = keys_predicted;
    m->keys_total = keys_total;
    p->migration = m;
    p->mig_view = m->view;
    if (!m->warmup)
        save(m); /* written with the membership change that follows */
    return 0;
}

void
migration_cancel(struct pool *p)
{
    struct migration *m = p->migration;

    if (m == NULL)
        return;
    p->migration = NULL;
    p->mig_view = NULL;
    running_del(m);
    migration_view_unref(m->view);
    if (!m->warmup && !m->etcd)
        host_save(p->name, NULL);
    migration_free(m);
}

/* Old members that give no key (the flows between the rings say so) have
 * nothing to copy: done at once, their keyspaces not scanned. */
static void
idle_sources(struct migration *m)
{
    const struct pool_snapshot *was = m->view->old, *now = m->new_snap;
    struct chash_flow *fl = NULL;
    size_t n = 0;

    /* (only where the flows are exact: sampled ones could miss a small
     * giver, whose keys would stay behind) */
    if (was->ring == NULL || now->ring == NULL ||
        !chash_ring_diff_exact(was->ring) ||
        chash_ring_flows(was->ring, now->ring, NULL, 0, &n) != 0 ||
        (n > 0 && ((fl = calloc(n, sizeof(*fl))) == NULL ||
                   chash_ring_flows(was->ring, now->ring, fl, n, &n) != 0))) {
        free(fl);
        return; /* cannot tell: every member is scanned */
    }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        bool gives = false;

        for (size_t k = 0; k < n && !gives; k++)
            gives = was->servers[fl[k].from] == m->src[i].srv;
        if (!gives && m->src[i].phase != MIG_DONE) {
            m->src[i].phase = MIG_DONE;
            m->src[i].dbsize_start = 0;
        }
    }
    pthread_mutex_unlock(&m->lock);
    free(fl);
}

/* Hand a new drain barrier to every worker. */
static void
drain_start(struct migration *m)
{
    struct migration_drain *d = calloc(1, sizeof(*d));

    if (d == NULL) {
        log_error("pool %s: migration: out of memory for the drain barrier",
                  m->pool->name);
        atomic_store(&m->pool->mig_drained,
                     migration_gen(m->epoch, atomic_load(&m->view->stage)));
        m->phase = MIG_COPYING;
        copiers_start(m);
        return;
    }
    atomic_store(&d->refs, 1);
    d->pool = m->pool;
    m->drain = d;
    m->phase = MIG_DRAINING;
    d->workers = barrier != NULL ? barrier(d) : 0;
}

/* The first stage of a two-stage migration is done: the keys moving the
 * other way may go now, once what was sent to their old owners during
 * the first stage has been answered. */
static void
stage_two(struct migration *m)
{
    for (size_t i = 0; i < m->nsrc; i++)
        if (m->src[i].started) {
            pthread_join(m->src[i].thread, NULL);
            m->src[i].started = false;
        }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsrc; i++) {
        struct msource *ms = &m->src[i];

        if (ms->skipped)
            continue;
        ms->phase = MIG_COPYING;
        ms->pass = 1;
        ms->retry_failed = ms->pass_failed = 0;
        snprintf(ms->cursor, sizeof(ms->cursor), "0");
    }
    pthread_mutex_unlock(&m->lock);
    idle_sources(m);
    atomic_store(&m->view->stage, 2);
    log_info("pool %s: migration %" PRIu64 ": first stage done; the keys "
             "moving the other way go now",
             m->pool->name, m->epoch);
    save(m);
    drain_start(m);
}

void
migration_start(struct pool *p)
{
    struct migration *m = p->migration;
    struct migration_drain *d;

    if (m == NULL || m->new_snap != NULL)
        return;
    m->new_snap = atomic_load(&p->snap);
    pool_snapshot_pin(m->new_snap);
    if (m->warmup) {
        /* a cache: no barrier (nothing is moved that a late write could
         * undo); warm-ups may start at once */
        atomic_store(&p->mig_drained, migration_gen(m->epoch, 1));
        m->phase = MIG_WARMING;
        log_info("pool %s: warm-up %" PRIu64 " (%s) for %.0f s: keys whose "
                 "member changed are read from their old member on a miss",
                 p->name, m->epoch, m->change,
                 (double)p->cfg.migration_warmup_ms / 1000.0);
        return;
    }
    if (m->keys_predicted == 0 && m->view->old->ring != NULL &&
        m->new_snap->ring != NULL &&
        chash_ring_diff(m->view->old->ring, m->new_snap->ring,
                        &m->moved_fraction) == 0) {
        /* a reload's (or a resumed one's): no report gave the fraction;
         * the key count comes from the sources once they answered */
        m->late_count = true;
        m->keys_predicted =
            (uint64_t)(m->moved_fraction * (double)m->keys_total + 0.5);
    }
    /* (decided when the snapshot was built; a migration that moves no
     * key is left undecided there: one stage) */
    migration_view_decide(m->view, m->new_snap);
    {
        int undecided = MIG_STAGE_UNDECIDED;

        atomic_compare_exchange_strong(&m->view->stage, &undecided, 0);
    }
    idle_sources(m);
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        /* no barrier to wait for: as good as none; log it */
        log_error("pool %s: migration: out of memory for the drain barrier",
                  p->name);
        atomic_store(&p->mig_drained, migration_gen(m->epoch, 1));
        m->phase = MIG_COPYING;
        return;
    }
    atomic_store(&d->refs, 1);
    d->pool = p;
    m->drain = d;
    d->workers = barrier != NULL ? barrier(d) : 0;
    log_info("pool %s: migration %" PRIu64 " (%s): about %" PRIu64
             " keys to move; waiting for the requests sent under the old "
             "ring",
             p->name, m->epoch, m->change, m->keys_predicted);
}

static void
copiers_start(struct migration *m)
{
    for (size_t i = 0; i < m->nsrc; i++) {
        if (m->src[i].phase == MIG_DONE)
            continue;
        if (pthread_create(&m->src[i].thread, NULL, copier, &m->src[i]) != 0) {
            log_error("pool %s: migration: cannot start a copier thread: %s",
                      m->pool->name, strerror(errno));
            continue;
        }
        m->src[i].started = true;
    }
}

static void
copiers_stop(struct migration *m)
{
    atomic_store(&m->stop, true);
    for (size_t i = 0; i < m->nsrc; i++)
        if (m->src[i].started) {
            pthread_join(m->src[i].thread, NULL);
            m->src[i].started = false;
        }
}

/* The pool's record of finished migrations (made on first use). */
static struct last *
last_make(const char *pool)
{
    struct last *l = last_get(pool);

    if (l == NULL && (l = calloc(1, sizeof(*l))) != NULL) {
        if ((l->pool = strdup(pool)) == NULL) {
            free(l);
            return NULL;
        }
        l->next = lasts;
        lasts = l;
    }
    return l;
}

static void
finished(struct pool *p, const struct pool_change *chg, void *arg)
{
    struct migration *m = arg;
    struct last *l;
    struct totals t;

    (void)chg;
    if (m->detached) { /* chashd is stopping */
        if (m->new_snap != NULL)
            pool_snapshot_unpin(m->new_snap);
        migration_free(m);
        return;
    }
    l = last_make(m->pool->name);
    m->phase = MIG_DONE;
    m->finished_ms = clock_ms();
    totals(m, &t);
    if (l != NULL) {
        l->ending = NULL;
        json_decref(l->j);
        l->j = migration_to_json(m);
        l->count++;
        l->moved += t.moved;
        l->by_request += t.gate_moved;
        l->scanned += t.scanned;
        l->bytes += t.bytes;
        l->anomalies += t.anomalies;
        l->failed += t.failed + t.gate_failed;
    }
    log_info("pool %s: migration %" PRIu64 " (%s) done in %.1f s: %" PRIu64
             " keys moved by the copier, %" PRIu64 " by requests, %" PRIu64
             " anomalies",
             p->name, m->epoch, m->change,
             (double)(m->finished_ms - m->started_ms) / 1000.0, t.moved,
             t.gate_moved, t.anomalies);
    if (m->new_snap != NULL)
        pool_snapshot_unpin(m->new_snap);
    m->new_snap = NULL;
    running_del(m);
    if (!m->warmup && !m->etcd)
        host_save(p->name, NULL);
    migration_free(m);
}

/* Every source is done: the member leaving goes, the pool's snapshots
 * stop carrying the old placement. */
static void
finish(struct migration *m)
{
    struct pool *p = m->pool;

    struct last *l = last_make(p->name);

    copiers_stop(m);
    m->phase = MIG_FINISHING;
    if (l != NULL)
        l->ending = m; /* the API shows it until it is done */
    if (p->migration == m) {
        p->migration = NULL;
        p->mig_view = NULL;
        migration_view_unref(m->view);
        m->view = NULL;
    }
    /* (in etcd, the transaction that ended it removed them) */
    for (size_t i = 0; !m->etcd && i < m->nleaving; i++)
        host_leave(p, m->leaving[i]);
    pool_schedule(p);
    if (pool_on_published(p, finished, m) != 0)
        finished(p, NULL, m);
}

/* A warm-up's window ended (or a new change came): its snapshots stop
 * carrying the old placement. */
static void
warmup_end(struct migration *m)
{
    finish(m);
}

static void
migration_tick(uint64_t now_ms, void *arg)
{
    static uint64_t next;

    (void)arg;
    if (now_ms < next)
        return;
    next = now_ms + TICK_MS;
    for (size_t i = 0; i < nrunning; i++) {
        struct migration *m = running[i];
        bool all = true, verifying = true;

        if (m->pool->removed && m->phase != MIG_FINISHING) {
            /* a reload dropped the pool: its migration goes with it */
            log_warn("pool %s: removed while migration %" PRIu64
                     " ran: stopped; keys may still be on their old owners",
                     m->pool->name, m->epoch);
            if (last_get(m->pool->name) != NULL &&
                last_get(m->pool->name)->ending == m)
                last_get(m->pool->name)->ending = NULL;
            copiers_stop(m);
            m->pool->migration = NULL;
            m->pool->mig_view = NULL;
            migration_view_unref(m->view);
            if (m->new_snap != NULL)
                pool_snapshot_unpin(m->new_snap);
            running_del(m);
            migration_free(m);
            i--;
            continue;
        }

        if (m->phase == MIG_DRAINING && m->drain != NULL &&
            atomic_load(&m->drain->done) >= m->drain->workers && m->etcd) {
            /* drained here: the gates open once every instance is */
            migration_drain_unref(m->drain);
            m->drain = NULL;
            m->barrier_wait = true;
            log_info("pool %s: migration %" PRIu64 ": drained here; waiting "
                     "for the other instances",
                     m->pool->name, m->epoch);
            if (etcd_ops != NULL)
                etcd_ops->drained(m->pool, m->epoch,
                                  atomic_load(&m->view->stage));
        }
        if (m->phase == MIG_DRAINING && m->drain != NULL &&
            atomic_load(&m->drain->done) >= m->drain->workers) {
            atomic_store(&m->pool->mig_drained,
                         migration_gen(m->epoch, atomic_load(&m->view->stage)));
            migration_drain_unref(m->drain);
            m->drain = NULL;
            m->phase = MIG_COPYING;
            log_info("pool %s: migration %" PRIu64 ": drained; copying",
                     m->pool->name, m->epoch);
            copiers_start(m);
        }
        if (m->phase == MIG_WARMING && now_ms >= m->warm_until_ms) {
            warmup_end(m);
            i--;
            continue;
        }
        if (m->phase != MIG_COPYING && m->phase != MIG_VERIFYING)
            continue;
        if (m->etcd && !m->holder)
            continue; /* another instance copies */
        pthread_mutex_lock(&m->lock);
        for (size_t k = 0; k < m->nsrc; k++) {
            all = all && m->src[k].phase == MIG_DONE;
            verifying = verifying && m->src[k].phase != MIG_COPYING;
        }
        if (m->late_count) {
            uint64_t total = 0;
            bool known = true;

            for (size_t k = 0; k < m->nsrc; k++) {
                known = known && m->src[k].dbsize_start >= 0;
                total += m->src[k].dbsize_start > 0
                             ? (uint64_t)m->src[k].dbsize_start
                             : 0;
            }
            if (known) {
                m->late_count = false;
                m->keys_total = total;
                m->keys_predicted =
                    (uint64_t)(m->moved_fraction * (double)total + 0.5);
            }
        }
        pthread_mutex_unlock(&m->lock);
        m->phase = verifying ? MIG_VERIFYING : MIG_COPYING;
        if (all && m->etcd) {
            /* the next stage, or the end, is etcd's to say */
            int stage = atomic_load(&m->view->stage);

            if (etcd_ops != NULL &&
                (m->copied_stage != stage + 1 ||
                 now_ms - m->copied_ms >= COPIED_AGAIN_MS)) {
                m->copied_stage = stage + 1;
                m->copied_ms = now_ms;
                etcd_ops->copied(m->pool, m->epoch, stage);
            }
            continue;
        }
        if (all && atomic_load(&m->view->stage) == 1) {
            stage_two(m);
            continue;
        }
        if (all) {
            save(m);
            finish(m);
            i--; /* <finished> may have taken it off the list */
            if (i + 1 > nrunning)
                break;
            continue;
        }
        if (now_ms - m->saved_ms >= SAVE_MS) {
            struct totals t;
            uint64_t sig;

            totals(m, &t);
            sig = t.scanned + t.moved + t.absent + t.failed + t.gate_moved;
            if (sig != m->saved_sig) {
                m->saved_sig = sig;
                save(m);
            }
        }
    }
}

int
migration_init(void)
{
    return control_tick_add(migration_tick, NULL);
}

void
migration_deinit(void)
{
    while (nrunning > 0) {
        struct migration *m = running[nrunning - 1];
        struct pool *p = m->pool;

        if (m->phase == MIG_FINISHING) {
            /* its publication's callback frees it (pools go last) */
            m->detached = true;
            nrunning--;
            continue;
        }
        copiers_stop(m);
        if (m->view != NULL && !p->removed)
            save(m);
        if (p->migration == m) {
            p->migration = NULL;
            p->mig_view = NULL;
            migration_view_unref(m->view);
        }
        if (m->new_snap != NULL)
            pool_snapshot_unpin(m->new_snap);
        nrunning--;
        migration_free(m);
    }
    free(running);
    running = NULL;
    caprunning = 0;
    while (lasts != NULL) {
        struct last *l = lasts;
        lasts = l->next;
        json_decref(l->j);
        free(l->pool);
        free(l);
    }
}

static void
resumed(struct pool *p, const struct pool_change *chg, void *arg)
{
    (void)arg;
    if (chg != NULL)
        migration_start(p);
}

/* The migration <saved> describes (a state file's, or an etcd
 * descriptor; <where> says which), numbered <epoch>: its old placement,
 * what it moved, its stage. NULL with <err>. */
static struct migration *
saved_load(struct pool *p, const json_t *saved, uint64_t epoch,
           const char *where, char *err, size_t errlen)
{
    json_t *old = json_object_get(saved, "old"), *srcs, *v;
    json_t *jl = json_object_get(saved, "leaving");
    struct chash_member *mem;
    struct pool_snapshot *snap;
    struct migration *m;
    size_t n = json_array_size(old);
    const char *leaving[64];
    size_t nleaving = 0;

    if (!json_is_array(old) || n == 0 || epoch == 0) {
        snprintf(err, errlen,
                 "%s migration of pool %s is malformed (no \"old\" members "
                 "or epoch)",
                 where, p->name);
        return NULL;
    }
    mem = calloc(n, sizeof(*mem));
    if (mem == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(old, i);

        mem[i].name = json_string_value(json_object_get(e, "name"));
        mem[i].weight =
            (uint32_t)json_integer_value(json_object_get(e, "weight"));
        mem[i].ramp = 1.0;
        if (mem[i].name == NULL || mem[i].weight == 0) {
            free(mem);
            snprintf(err, errlen,
                     "%s migration of pool %s names a member without a "
                     "name or weight",
                     where, p->name);
            return NULL;
        }
    }
    snap = pool_snapshot_of(p, mem, n, err, errlen);
    free(mem);
    if (snap == NULL)
        return NULL;
    for (size_t i = 0; i < json_array_size(jl) && nleaving < 64; i++)
        if (json_is_string(json_array_get(jl, i)))
            leaving[nleaving++] = json_string_value(json_array_get(jl, i));
    m = migration_new(p, snap, epoch,
                      json_string_value(json_object_get(saved, "change"))
                          ?: "resumed",
                      leaving, nleaving);
    if (m == NULL || running_add(m) != 0) {
        if (m != NULL) {
            migration_view_unref(m->view);
            migration_free(m);
        } else {
            pool_snapshot_pin(snap);
            pool_snapshot_unpin(snap); /* frees it */
        }
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (epoch > next_epoch)
        next_epoch = epoch;
    m->keys_predicted =
        (uint64_t)json_integer_value(json_object_get(saved, "keys_predicted"));
    m->keys_total =
        (uint64_t)json_integer_value(json_object_get(saved, "keys_total"));
    m->gate_moved_before = (uint64_t)json_integer_value(
        json_object_get(saved, "moved_by_traffic"));
    v = json_object_get(saved, "started_unix");
    if (json_is_integer(v) && json_integer_value(v) <= (json_int_t)time(NULL)) {
        m->started_wall = (time_t)json_integer_value(v);
        m->started_ms -= (uint64_t)(time(NULL) - m->started_wall) * 1000u;
    }
    srcs = json_object_get(saved, "sources");
    for (size_t i = 0; i < m->nsrc; i++) {
        struct msource *ms = &m->src[i];
        json_t *s = json_object_get(srcs, ms->srv->name);
        const char *cur = json_string_value(json_object_get(s, "cursor"));

        if (s == NULL)
            continue;
        ms->pass = (unsigned)json_integer_value(json_object_get(s, "pass"));
        if (ms->pass == 0)
            ms->pass = 1;
        if (cur != NULL && strlen(cur) < sizeof(ms->cursor))
            snprintf(ms->cursor, sizeof(ms->cursor), "%s", cur);
        ms->scanned =
            (uint64_t)json_integer_value(json_object_get(s, "scanned"));
        ms->moved = (uint64_t)json_integer_value(json_object_get(s, "moved"));
        ms->bytes = (uint64_t)json_integer_value(json_object_get(s, "bytes"));
        ms->failed = (uint64_t)json_integer_value(json_object_get(s, "failed"));
        ms->anomalies =
            (uint64_t)json_integer_value(json_object_get(s, "anomalies"));
        v = json_object_get(s, "dbsize_start");
        ms->dbsize_start = json_is_integer(v) ? json_integer_value(v) : -1;
        ms->phase = json_integer_value(json_object_get(s, "done")) ? MIG_DONE
                    : ms->pass >= 2 ? MIG_VERIFYING
                                    : MIG_COPYING;
        if (json_is_true(json_object_get(s, "skipped"))) {
            ms->skipped = true;
            ms->phase = MIG_DONE;
            atomic_store(&ms->srv->mig_skip, true);
        }
    }
    /* (0: one stage, or not yet decided when saved: decided again, alike,
     * by the snapshot that carries it) */
    v = json_object_get(saved, "stage");
    if (json_is_integer(v) && json_integer_value(v) >= 1 &&
        json_integer_value(v) <= 2)
        atomic_store(&m->view->stage, (int)json_integer_value(v));
    return m;
}

/* <m> (saved_load's) runs in <p> from the snapshot built now on: its
 * drain begins once that snapshot is live. */
static void
adopt(struct pool *p, struct migration *m)
{
    p->migration = m;
    p->mig_view = m->view;
    pool_schedule(p);
    if (pool_on_published(p, resumed, NULL) != 0)
        migration_start(p);
}

int
migration_resume(struct pool *p, json_t *saved, char *err, size_t errlen)
{
    uint64_t epoch =
        (uint64_t)json_integer_value(json_object_get(saved, "epoch"));
    struct migration *m =
        saved_load(p, saved, epoch, "the state file's", err, errlen);

    if (m == NULL)
        return -1;
    log_info("pool %s: resuming migration %" PRIu64 " (%s) from the state "
             "file",
             p->name, epoch, m->change);
    adopt(p, m);
    return 0;
}

/* ---- reloads ---------------------------------------------------------------
 */

/* Member <name> of <p> in its placement (a member, admin up, weight > 0). */
static const struct server *
placed(const struct pool *p, const char *name)
{
    const struct server *s = pool_server_find(p, name);

    if (s == NULL || atomic_load(&s->state) == SERVER_REMOVED ||
        s->admin != STATE_ADMIN_UP || s->weight == 0)
        return NULL;
    return s;
}

/* A reload of a warm-up pool: 1 when its placement changes (members
 * added, removed or reweighted), else 0. */
static int
warmup_plan(const struct pool *p, const struct conf_pool *cp,
            struct migration_plan *pl)
{
    for (size_t i = 0; i < cp->nservers && !pl->change; i++) {
        const struct conf_server *cs = &cp->servers[i];
        const struct server *s = pool_server_find(p, cs->name);

        if (s != NULL && atomic_load(&s->state) != SERVER_REMOVED &&
            s->admin != STATE_ADMIN_UP)
            continue; /* the state keeps it out of the ring */
        if (cs->weight == 0)
            continue;
        pl->change = s == NULL || placed(p, cs->name) == NULL ||
                     s->weight != cs->weight ||
                     !conf_addr_equal(&s->addr, &cs->addr);
    }
    for (size_t i = 0; i < p->nservers && !pl->change; i++) {
        const struct server *s = placed(p, p->servers[i]->name);
        bool kept = false;

        if (s == NULL)
            continue;
        for (size_t k = 0; k < cp->nservers && !kept; k++)
            kept = strcmp(cp->servers[k].name, s->name) == 0 &&
                   cp->servers[k].weight > 0;
        pl->change = !kept;
    }
    return pl->change ? 1 : 0;
}

void
migration_plan_free(struct migration_plan *pl)
{
    free(pl->leaving);
    memset(pl, 0, sizeof(*pl));
}

int
migration_reload_plan(const struct pool *p, const struct conf_pool *cp,
                      struct migration_plan *pl, char *err, size_t errlen)
{
    const struct conf_pool *was = &p->cfg;
    bool change = false;
    size_t before = 0, after = 0;

    memset(pl, 0, sizeof(*pl));
    if (was->migration == CONF_MIGRATION_WARMUP &&
        cp->migration == CONF_MIGRATION_WARMUP)
        return warmup_plan(p, cp, pl);
    if (was->migration != CONF_MIGRATION_COPY &&
        cp->migration != CONF_MIGRATION_COPY)
        return 0;
    if (p->migration != NULL && cp->migration != CONF_MIGRATION_COPY) {
        snprintf(err, errlen,
                 "pool %s: its migration is running: 'migration' cannot be "
                 "turned off before it ends",
                 p->name);
        return -1;
    }
    if (was->migration != CONF_MIGRATION_COPY ||
        cp->migration != CONF_MIGRATION_COPY)
        return 0; /* turned on or off: nothing moves by this reload */
    if (conf_pool_hashing_differs(was, cp)) {
        snprintf(err, errlen,
                 "pool %s: a reload may not change its hash, distribution, "
                 "points, hash_tag, redis_db or zones: with migration: copy "
                 "that would move keys it cannot copy (set migration: off "
                 "first, or start a new pool; a member changes zone by a "
                 "remove and an add)",
                 p->name);
        return -1;
    }
    {
        const struct server *s;
        const struct conf_server *cs = pool_member_moved(p, cp, &s);

        if (cs != NULL) {
            snprintf(err, errlen,
                     "pool %s: member %s moves from %s to %s: with "
                     "migration: copy its keys would be lost; add the "
                     "new address under another name, then remove %s",
                     p->name, cs->name, s->addr.text, cs->addr.text, cs->name);
            return -1;
        }
    }
    for (size_t i = 0; i < cp->nservers; i++) {
        const struct conf_server *cs = &cp->servers[i];
        const struct server *s = pool_server_find(p, cs->name);

        if (s != NULL && atomic_load(&s->state) != SERVER_REMOVED) {
            if (s->admin != STATE_ADMIN_UP)
                continue; /* the state keeps it drained or in maintenance */
            if (s->weight != cs->weight)
                change = true;
        } else {
            if (cs->weight == 0)
                continue;
            change = true;
            if (!cs->probed || cs->keys != 0) {
                if (cs->probed && cs->keys > 0)
                    snprintf(err, errlen,
                             "pool %s: member %s (%s) holds %" PRId64
                             " keys: a joining member must be empty "
                             "(FLUSHDB it, then reload)",
                             p->name, cs->name, cs->addr.text, cs->keys);
                else
                    snprintf(err, errlen,
                             "pool %s: member %s (%s) cannot be asked how "
                             "many keys it holds: a joining member must be "
                             "empty and reachable",
                             p->name, cs->name, cs->addr.text);
                return -1;
            }
        }
        if (cs->weight > 0)
            after++;
        if (cs->probed && cs->keys > 0)
            pl->keys_total += (uint64_t)cs->keys;
    }
    pl->leaving = calloc(p->nservers ? p->nservers : 1, sizeof(*pl->leaving));
    if (pl->leaving == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < p->nservers; i++) {
        const struct server *s = placed(p, p->servers[i]->name);
        bool kept = false;

        if (s == NULL)
            continue;
        before++;
        for (size_t k = 0; k < cp->nservers && !kept; k++)
            kept = strcmp(cp->servers[k].name, s->name) == 0;
        if (!kept) {
            pl->leaving[pl->nleaving++] = s;
            change = true;
        }
    }
    if (change && after == 0) {
        migration_plan_free(pl);
        snprintf(err, errlen,
                 "pool %s: the reload leaves no member to move its keys to",
                 p->name);
        return -1;
    }
    if (change && p->migration != NULL) {
        migration_plan_free(pl);
        migration_busy(p, err, errlen);
        return -1;
    }
    (void)before;
    pl->change = change;
    return change ? 1 : 0;
}

/* ---- metrics ---------------------------------------------------------------
 */

static void
label(FILE *f, const char *name, const char *pool, const char *source)
{
    fprintf(f, "%s{pool=\"", name);
    stats_label_escape(f, pool);
    if (source != NULL) {
        fputs("\",source=\"", f);
        stats_label_escape(f, source);
    }
    fputs("\"}", f);
}

void
migration_metrics(FILE *f)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"chashd_migration_active", "gauge",
         "1 while a migration moves keys in the pool (migration: copy)."},
        {"chashd_migrations_total", "counter", "Migrations finished."},
        {"chashd_migration_keys_moved_total", "counter",
         "Keys moved to their new owner, by the copier (by=copier) or by a "
         "request that touched a moving key first (by=request)."},
        {"chashd_migration_keys_scanned_total", "counter",
         "Keys the copiers looked at on the old owners."},
        {"chashd_migration_bytes_total", "counter",
         "Bytes the copier moved (MEMORY USAGE of each key)."},
        {"chashd_migration_anomalies_total", "counter",
         "Moving keys the verification pass found still on an old owner "
         "(expected 0)."},
        {"chashd_migration_failed_keys_total", "counter",
         "Moves that failed (tried again later; a request whose key could "
         "not move got an error)."},
        {"chashd_migration_progress_ratio", "gauge",
         "Progress of each old owner's copier in the running migration."},
    };

    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        bool any = false;

        /* a family only with samples: pools that copy (or did), and for
         * the progress, a migration running */
        for (size_t i = 0; i < pool_count() && !any; i++) {
            struct pool *p = pool_at(i);

            any = k == 7 ? p->migration != NULL
                         : p->cfg.migration == CONF_MIGRATION_COPY ||
                               last_get(p->name) != NULL;
        }
        if (!any)
            continue;
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam[k].name, fam[k].help,
                fam[k].name, fam[k].type);
        for (size_t i = 0; i < pool_count(); i++) {
            struct pool *p = pool_at(i);
            struct migration *m = p->migration;
            struct last *l = last_get(p->name);
            struct last sum = {0};
            struct totals t = {0};

            if (p->cfg.migration != CONF_MIGRATION_COPY && l == NULL)
                continue;
            if (l != NULL)
                sum = *l;
            if (m != NULL)
                totals(m, &t);
            switch (k) {
            case 0:
                label(f, fam[k].name, p->name, NULL);
                fprintf(f, " %d\n", m != NULL);
                break;
            case 1:
                label(f, fam[k].name, p->name, NULL);
                fprintf(f, " %" PRIu64 "\n", sum.count);
                break;
            case 2:
                fprintf(f, "%s{pool=\"", fam[k].name);
                stats_label_escape(f, p->name);
                fprintf(f, "\",by=\"copier\"} %" PRIu64 "\n",
                        sum.moved + t.moved);
                fprintf(f, "%s{pool=\"", fam[k].name);
                stats_label_escape(f, p->name);
                fprintf(f, "\",by=\"request\"} %" PRIu64 "\n",
                        sum.by_request + t.gate_moved);
                break;
            case 3:
                label(f, fam[k].name, p->name, NULL);
                fprintf(f, " %" PRIu64 "\n", sum.scanned + t.scanned);
                break;
            case 4:
                label(f, fam[k].name, p->name, NULL);
                fprintf(f, " %" PRIu64 "\n", sum.bytes + t.bytes);
                break;
            case 5:
                label(f, fam[k].name, p->name, NULL);
                fprintf(f, " %" PRIu64 "\n", sum.anomalies + t.anomalies);
                break;
            case 6:
                label(f, fam[k].name, p->name, NULL);
                fprintf(f, " %" PRIu64 "\n",
                        sum.failed + t.failed + t.gate_failed);
                break;
            case 7:
                for (size_t j = 0; m != NULL && j < m->nsrc; j++) {
                    const struct msource *ms = &m->src[j];
                    double pr;

                    pthread_mutex_lock(&m->lock);
                    pr = ms->phase == MIG_DONE ? 1.0
                         : ms->pass >= 2       ? 0.99
                         : ms->dbsize_start > 0
                             ? (double)ms->scanned / (double)ms->dbsize_start
                             : 0.0;
                    pthread_mutex_unlock(&m->lock);
                    if (pr > 0.99 && ms->phase != MIG_DONE)
                        pr = 0.99;
                    label(f, fam[k].name, p->name, ms->srv->name);
                    fprintf(f, " %.4f\n", pr);
                }
                break;
            }
        }
    }
}

/* ---- giving up a source ----------------------------------------------------
 */

int
migration_skip(struct pool *p, const char *member, char *err, size_t errlen)
{
    struct migration *m = p->migration;
    struct msource *ms = NULL;

    if (m == NULL) {
        snprintf(err, errlen, "pool %s has no migration running", p->name);
        return -1;
    }
    if (m->warmup) {
        snprintf(err, errlen,
                 "pool %s is warming up (migration: warmup): nothing is "
                 "copied from its old members, nothing to give up",
                 p->name);
        return -1;
    }
    if (m->etcd) {
        snprintf(err, errlen,
                 "pool %s takes its members from etcd: giving up a source "
                 "is not supported there yet (every instance would have "
                 "to agree); bring the member back, or remove it with "
                 "\"now\"",
                 p->name);
        return -1;
    }
    for (size_t i = 0; i < m->nsrc; i++)
        if (strcmp(m->src[i].srv->name, member) == 0)
            ms = &m->src[i];
    if (ms == NULL) {
        snprintf(err, errlen,
                 "member \"%s\" is not a source of pool %s's migration", member,
                 p->name);
        return -1;
    }
    pthread_mutex_lock(&m->lock);
    if (ms->phase == MIG_DONE && !ms->skipped) {
        pthread_mutex_unlock(&m->lock);
        snprintf(err, errlen,
                 "member %s has given away its keys already: nothing to "
                 "skip",
                 member);
        return -1;
    }
    ms->skipped = true;
    ms->phase = MIG_DONE;
    pthread_mutex_unlock(&m->lock);
    /* its moving keys are served by their new owners from now on: what
     * was not moved is lost (the member is dead, or the operator says so) */
    atomic_store(&ms->srv->mig_skip, true);
    log_warn("pool %s: migration %" PRIu64 ": moving keys from %s given up "
             "by the operator; those not moved yet are lost",
             p->name, m->epoch, member);
    save(m);
    return 0;
}

/* ---- one migration, several instances (etcd pools) ----------------------
 */

void
migration_etcd_set(const struct migration_etcd_ops *ops)
{
    etcd_ops = ops;
}

json_t *
migration_etcd_descriptor(const struct pool *p, const char *change,
                          const char *const *leaving, size_t nleaving,
                          uint64_t keys_predicted, uint64_t keys_total)
{
    const struct pool_snapshot *cur = atomic_load(&p->snap);
    json_t *j = json_object(), *o = placement_json(cur), *l = json_array();

    for (size_t i = 0; i < nleaving; i++)
        json_array_append_new(l, json_string(leaving[i]));
    json_object_set_new(j, "change", json_string(change));
    json_object_set_new(j, "old", o);
    json_object_set_new(j, "leaving", l);
    json_object_set_new(j, "keys_predicted",
                        json_integer((json_int_t)keys_predicted));
    json_object_set_new(j, "keys_total", json_integer((json_int_t)keys_total));
    json_object_set_new(j, "started_unix",
                        json_integer((json_int_t)time(NULL)));
    json_object_set_new(j, "stage", json_integer(0));
    if (json_array_size(o) == 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int
migration_etcd_begin(struct pool *p, const json_t *desc, uint64_t epoch,
                     char *err, size_t errlen)
{
    struct migration *m;

    if (p->migration != NULL) {
        migration_busy(p, err, errlen);
        return -1;
    }
    if ((m = saved_load(p, desc, epoch, "etcd's", err, errlen)) == NULL)
        return -1;
    m->etcd = true;
    log_info("pool %s: migration %" PRIu64 " (%s) from etcd: every instance "
             "gates its moving keys; one copies",
             p->name, epoch, m->change);
    adopt(p, m);
    return 0;
}

uint64_t
migration_etcd_epoch(const struct pool *p, int *stage, bool *waiting)
{
    const struct migration *m = p->migration;

    if (m == NULL || !m->etcd)
        return 0;
    *stage = atomic_load(&m->view->stage);
    *waiting = m->barrier_wait;
    return m->epoch;
}

void
migration_etcd_pass(struct pool *p)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd || !m->barrier_wait)
        return;
    m->barrier_wait = false;
    atomic_store(&p->mig_drained,
                 migration_gen(m->epoch, atomic_load(&m->view->stage)));
    m->phase = MIG_COPYING;
    log_info("pool %s: migration %" PRIu64 ": every instance drained; %s",
             p->name, m->epoch,
             m->holder ? "copying" : "another instance copies");
    if (m->holder)
        copiers_start(m);
}

void
migration_etcd_stage(struct pool *p, int stage)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd || stage != 2 ||
        atomic_load(&m->view->stage) != 1 || m->new_snap == NULL)
        return;
    m->barrier_wait = false;
    stage_two(m);
}

void
migration_etcd_copier(struct pool *p, bool hold, const char *holder)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd)
        return;
    snprintf(m->holder_of, sizeof(m->holder_of), "%s", holder ? holder : "");
    if (hold == m->holder)
        return;
    m->holder = hold;
    if (!hold) {
        /* the lock went (our lease): another instance copies on */
        log_warn("pool %s: migration %" PRIu64 ": this instance no longer "
                 "holds the copier lock; its copiers stop",
                 p->name, m->epoch);
        copiers_stop(m);
        atomic_store(&m->stop, false);
        return;
    }
    log_info("pool %s: migration %" PRIu64 ": this instance holds the "
             "copier lock",
             p->name, m->epoch);
    m->copied_stage = 0;
    if ((m->phase == MIG_COPYING || m->phase == MIG_VERIFYING) &&
        !m->barrier_wait)
        copiers_start(m);
}

void
migration_etcd_end(struct pool *p)
{
    struct migration *m = p->migration;

    if (m == NULL || !m->etcd)
        return;
    if (m->drain != NULL) {
        migration_drain_unref(m->drain);
        m->drain = NULL;
    }
    m->barrier_wait = false;
    if (m->new_snap == NULL) {
        /* never started here (its publication is awaited): the callback
         * finds no migration and does nothing */
        migration_cancel(p);
        pool_schedule(p);
        return;
    }
    finish(m);
}

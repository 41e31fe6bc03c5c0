/* migration_copy.c -- the copiers of a migration (migration_int.h): a
 * thread per old owner, with its own blocking RESP connection
 * (loop/rconn.h), SCANs its member and MIGRATEs each key that moves,
 * throttled, then verifies. Counters go to the source under the
 * migration's lock; the control thread reads them (migration.c).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/migration_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "conf/conf.h"
#include "loop/rconn.h"
#include "model/fence.h"
#include "model/pool.h"

/* A copier that cannot reach its member tries again after this long,
 * doubling up to RETRY_MAX_MS. */
#define RETRY_MS 200
#define RETRY_MAX_MS 5000
/* Tries of a key whose MIGRATE says the target has it or timed out. */
#define KEY_TRIES 4
/* Big keys listed. */
#define BIG_KEYS_MAX 20

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

/* Send a MIGRATE for each key of <k>[0..<n>) whose <res> is GATE_RETRY
 * (with REPLACE once it was tried), pipelined; a key whose member has no
 * host and port fails. How many went, or -1 when the connection failed. */
static long
each_send(const struct migration *m, struct rconn *c, const struct moving *k,
          size_t n, const unsigned *tries, int *res)
{
    size_t sent = 0;

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
        if (rc_cmd(c, (int)argc, argv, lens) < 0)
            return -1;
        sent++;
    }
    if (sent > 0 && rc_flush(c) < 0)
        return -1;
    return (long)sent;
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
        again = false;
        if (each_send(m, c, k, n, tries, res) < 0)
            rc = -1;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            struct rval v;
            int r = GATE_FAILED;

            if (res[i] != GATE_RETRY)
                continue;
            if (rc_reply(c, &v) < 0) {
                rc = -1;
                break;
            }
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

/* Send MULTI, an EXISTS per key of <k>[0..<n>), the MIGRATE ... KEYS
 * <argv> (its head, <argc> words, then room for the keys) and EXEC. 0,
 * or -1 when the connection failed. */
static int
batch_send(struct rconn *c, const struct moving *k, size_t n, const char **argv,
           size_t *lens, size_t argc)
{
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};

    if (rc_cmd(c, 1, multi, NULL) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *ex[] = {"EXISTS", k[i].key};
        size_t exl[] = {6, k[i].len};

        if (rc_cmd(c, 2, ex, exl) < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        lens[argc] = k[i].len;
        argv[argc++] = k[i].key;
    }
    if (rc_cmd(c, (int)argc, argv, lens) < 0 || rc_cmd(c, 1, exec, NULL) < 0 ||
        rc_flush(c) < 0)
        return -1;
    return 0;
}

/* Count what EXEC's array <v> says of the batch <k>[0..<n>): an EXISTS
 * reply per key, then MIGRATE's. A key that was there when MIGRATE
 * failed is tried alone (migrate_each). -1 when the connection failed. */
static int
batch_result(struct msource *ms, struct rconn *c, const struct rval *v,
             struct moving *k, size_t n, struct tally *t, char *err,
             size_t errlen)
{
    struct migration *m = ms->m;
    const struct rval *res = &v->el[n];
    char line[300];
    size_t left = 0;
    int r;

    snprintf(line, sizeof(line), "%c%s", res->type,
             res->s != NULL ? res->s : "");
    r = migration_migrate_result(line, strlen(line));
    for (size_t i = 0; i < n; i++) {
        bool there = v->el[i].type == ':' && v->el[i].i == 1;

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
    if (r == GATE_MOVED || r == GATE_ABSENT || left == 0)
        return 0;
    pthread_mutex_lock(&m->lock);
    snprintf(ms->last_error, sizeof(ms->last_error), "MIGRATE to %.40s: %.140s",
             k[0].to->name, line + 1);
    pthread_mutex_unlock(&m->lock);
    return migrate_each(ms, c, k, left, t, err, errlen);
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
    struct mhead h;
    const char **argv = calloc(n + 10, sizeof(*argv));
    size_t *lens = calloc(n + 10, sizeof(*lens));
    struct rval v;
    size_t argc;
    int rc = 0;

    if (argv == NULL || lens == NULL) {
        free(argv);
        free(lens);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    argc = migrate_head(ms->m, k[0].to, false, &h, argv, lens);
    if (argc == 0) {
        free(argv);
        free(lens);
        t->failed += n;
        return 0;
    }
    rc = batch_send(c, k, n, argv, lens, argc);
    /* +OK, a +QUEUED per command, then EXEC's array */
    for (size_t i = 0; rc == 0 && i < n + 2; i++) {
        if (rc_reply(c, &v) < 0) {
            rc = -1;
            break;
        }
        if (v.type == '-') {
            snprintf(err, errlen, "MULTI on %s: %s", ms->srv->name, v.s);
            rc = -1;
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
            rc = batch_result(ms, c, &v, k, n, t, err, errlen);
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

/* SCAN <ms>'s member from <cursor>: *<v> gets the reply, checked to be
 * [cursor, [keys]]. 0, or -1 with <err>. */
static int
copy_scan(struct msource *ms, struct rconn *c, const char *cursor,
          struct rval *v, char *err, size_t errlen)
{
    struct migration *m = ms->m;
    char count[16];
    const char *argv[] = {"SCAN", cursor, "COUNT", count};

    snprintf(count, sizeof(count), "%u", m->batch < 100 ? 100 : m->batch);
    if (rc_cmd(c, 4, argv, NULL) < 0 || rc_call(c, v) < 0) {
        snprintf(err, errlen, "SCAN on %s: no answer", ms->srv->name);
        return -1;
    }
    if (v->type != '*' || v->n != 2 || v->el[0].type != '$' ||
        v->el[1].type != '*') {
        snprintf(err, errlen, "SCAN on %s: %s", ms->srv->name,
                 v->type == '-' ? v->s : "unexpected reply");
        rval_free(v);
        return -1;
    }
    return 0;
}

/* The keys of <keys> (a SCAN's) that move from <ms>'s member in stage
 * <stage>, into <mv>: how many. */
static size_t
copy_moving(const struct msource *ms, const struct rval *keys, int stage,
            struct moving *mv)
{
    const struct migration *m = ms->m;
    const struct pool_snapshot *was = m->view->old, *now = m->new_snap;
    size_t nmv = 0;

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
    return nmv;
}

/* The sizes of <mv>[0..<n>) (MEMORY USAGE, pipelined; -1: gone), for
 * the bandwidth cap and the big keys. 0, or -1 with <err>. */
static int
copy_sizes(const struct msource *ms, struct rconn *c, struct moving *mv,
           size_t n, char *err, size_t errlen)
{
    int rc = 0;

    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *argv[] = {"MEMORY", "USAGE", mv[i].key};
        size_t lens[] = {6, 5, mv[i].len};

        if (rc_cmd(c, 3, argv, lens) < 0)
            rc = -1;
    }
    if (rc == 0 && n > 0 && rc_flush(c) < 0)
        rc = -1;
    for (size_t i = 0; i < n && rc == 0; i++) {
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
    return rc;
}

/* Move <mv>[0..<n>) in pass <pass>, throttled: in batches, a big key
 * alone. 0, or -1 when the connection failed (<err>). */
static int
copy_moves(struct msource *ms, struct rconn *c, struct moving *mv, size_t n,
           unsigned pass, char *err, size_t errlen)
{
    struct migration *m = ms->m;
    struct tally t = {0};
    int rc = 0;

    for (size_t i = 0; i < n && rc == 0 && !atomic_load(&m->stop);) {
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
        while (j < n && j - i < m->batch &&
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
    return rc;
}

/* A SCAN step of pass <pass> looked at <scanned> keys and, when it went
 * well (<ok>), moves <ms> on to <cursor>: the end of a pass starts the
 * next, a verification. */
static void
copy_advance(struct msource *ms, unsigned pass, size_t scanned, bool ok,
             const char *cursor)
{
    struct migration *m = ms->m;

    pthread_mutex_lock(&m->lock);
    ms->scanned += scanned;
    if (ok && !atomic_load(&m->stop)) {
        snprintf(ms->cursor, sizeof(ms->cursor), "%s", cursor);
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
}

/* One SCAN step of <ms> and the moves it finds. 0, or -1 when the
 * connection failed (<err>). */
static int
copy_step(struct msource *ms, struct rconn *c, char *err, size_t errlen)
{
    struct migration *m = ms->m;
    char cursor[24];
    unsigned pass;
    struct rval v, *keys;
    struct moving *mv;
    size_t nmv;
    int stage = atomic_load(&m->view->stage);
    int rc;

    err[0] = '\0';
    pthread_mutex_lock(&m->lock);
    snprintf(cursor, sizeof(cursor), "%s", ms->cursor);
    pass = ms->pass;
    pthread_mutex_unlock(&m->lock);
    if (copy_scan(ms, c, cursor, &v, err, errlen) < 0)
        return -1;
    keys = &v.el[1];
    mv = calloc(keys->n ? keys->n : 1, sizeof(*mv));
    if (mv == NULL) {
        rval_free(&v);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    nmv = copy_moving(ms, keys, stage, mv);
    rc = copy_sizes(ms, c, mv, nmv, err, errlen);
    if (rc == 0)
        rc = copy_moves(ms, c, mv, nmv, pass, err, errlen);
    copy_advance(ms, pass, keys->n, rc == 0, v.el[0].s);
    free(mv);
    rval_free(&v);
    return rc;
}

/* (Re)connect <ms>'s copier: 0, or -1 after a back-off (<backoff>
 * doubles). The first connection notes the member's key count. */
static int
copier_connect(struct msource *ms, struct rconn *c, uint32_t *backoff)
{
    struct migration *m = ms->m;
    char err[300];
    bool count;

    if (rc_open(c, &ms->srv->addr, m->timeout_ms, m->auth, m->db, err,
                sizeof(err)) != 0) {
        source_error(ms, err);
        for (uint32_t t = 0; t < *backoff && !atomic_load(&m->stop); t += 50)
            sleep_ms(50);
        *backoff = *backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : *backoff * 2;
        return -1;
    }
    *backoff = RETRY_MS;
    pthread_mutex_lock(&m->lock);
    count = ms->dbsize_start < 0;
    pthread_mutex_unlock(&m->lock);
    if (count) {
        const char *argv[] = {"DBSIZE"};
        struct rval v;

        if (rc_cmd(c, 1, argv, NULL) == 0 && rc_call(c, &v) == 0 &&
            v.type == ':') {
            pthread_mutex_lock(&m->lock);
            ms->dbsize_start = v.i;
            pthread_mutex_unlock(&m->lock);
        }
        rval_free(&v);
    }
    return 0;
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
        if (c.fd < 0 && copier_connect(ms, &c, &backoff) < 0)
            continue;
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

void
migration_copiers_start(struct migration *m)
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

void
migration_copiers_stop(struct migration *m)
{
    atomic_store(&m->stop, true);
    for (size_t i = 0; i < m->nsrc; i++)
        if (m->src[i].started) {
            pthread_join(m->src[i].thread, NULL);
            m->src[i].started = false;
        }
}

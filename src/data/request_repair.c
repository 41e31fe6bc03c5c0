/* request_repair.c -- replication's repairs on the workers (request.h's
 * request_repair): each key's repair runs on the key's home worker
 * (request_rep.c), between two of the key's requests, reading and
 * writing the members' copies on the connections the key's writes use;
 * the barrier a fill waits for; and the ordered fan-out of a flush, which
 * pauses a replicated pool on every worker. doc/internals/replication.md.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/request_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"
#include "base/invariant.h"
#include "base/log.h"
#include "conf/conf.h"
#include "loop/worker.h"
#include "model/pool.h"
#include "model/replica_log.h"
#include "proto/memcache.h"
#include "proto/proto.h"

/* ---- repairs ------------------------------------------------------------- */

/* A member of a repair: of the key's set, a holder of the copy in the
 * filled placement, or a member that left the set (its copy goes). */
enum jrole { J_SET = 1, J_HOLDER = 2, J_LEAVER = 4 };
/* Where a member is in the repair. */
enum jstate { J_IDLE, J_READING, J_READ, J_WRITING, J_DONE, J_FAILED };

struct jmember {
    struct server *s; /* (ref held) */
    unsigned role;
    bool cur;      /* its copy is a current one (a voter) */
    int st;        /* enum jstate */
    unsigned want; /* replies still to come */
    bool present;  /* its copy, once read */
    char *val;     /* redis: DUMP's payload; memcache: flags, a space,
                      the data */
    size_t len;
    long long ttl_ms; /* -1: none */
    bool ttl_read;
    uint64_t gen; /* its log's generation before the reads */
    bool whole;   /* compared whole (replica.h) */
};

struct rjob {
    struct request_repair *r;
    struct rheld held;
    struct worker *w;
    struct rworker *rw;
    const struct request_mode *mode;
    bool memcache;
    uint64_t hash;
    struct jmember *jm;
    size_t n;
    unsigned out; /* requests on their way */
    int truth;    /* the member whose copy is the copy, -1 */
    char *packed; /* the key as request_key_pack packs it */
    size_t plen;
};

static void job_hold(struct rjob *job);
static void job_run(struct rjob *job);

static struct rjob *
job_of_held(struct rheld *x)
{
    return WORKER_OF(x, struct rjob, held);
}

static void
job_free(struct rjob *job)
{
    for (size_t i = 0; i < job->n; i++) {
        server_unref(job->jm[i].s);
        free(job->jm[i].val);
    }
    free(job->jm);
    free(job->packed);
    free(job);
}

/* The repair is over: what waited for the key goes on, and the caller
 * hears of it. */
static void
job_end(struct rjob *job, int result)
{
    struct request_repair *r = job->r;
    struct rworker *rw = job->rw;
    struct rhold *h = request_hold_find(rw, r->pool, job->hash);

    if (r->verify && result == REPAIR_OK)
        request_verified_put(rw, r->pool, job->hash);
    r->result = result;
    r->priv = NULL;
    job_free(job);
    if (h != NULL)
        request_hold_release(rw, h);
    r->done(r);
}

/* Add member <s> with <role> (or the role to it, when it is there). */
static int
job_add(struct rjob *job, struct server *s, unsigned role, size_t cap)
{
    for (size_t i = 0; i < job->n; i++)
        if (job->jm[i].s == s) {
            job->jm[i].role |= role;
            return 0;
        }
    if (job->n == cap)
        return -1;
    job->jm[job->n].s = s;
    job->jm[job->n].role = role;
    job->jm[job->n].ttl_ms = -1;
    server_ref(s);
    job->n++;
    return 0;
}

/* Send the job's request <buf> (<len> bytes) to member <i>, as <which>
 * (0: its read or write; 1: a second read, PTTL). */
static void
job_send(struct rjob *job, size_t i, unsigned which, int command,
         const char *buf, size_t len)
{
    struct rreq *q = calloc(1, sizeof(*q));
    struct rserver *s;

    job->out++;
    job->jm[i].want++;
    if (q == NULL || request_frags(q, 1) < 0) {
        free(q);
        job->jm[i].st = J_FAILED;
        job->jm[i].want--;
        job->out--;
        return;
    }
    q->mode = job->mode;
    q->command = command;
    q->start_us = clock_us();
    q->start_ms = job->w->now_ms;
    q->job = job;
    q->rep_idx = (unsigned)(i * 2 + which);
    s = request_send_on(job->w, job->r->pool, job->mode, &q->one, job->jm[i].s,
                        job->hash);
    if (s != NULL)
        request_conn_queue(s, &q->one, buf, len, NULL);
}

/* Whether a repair may talk to member <s>: not known to be down (a
 * member that left the pool, or is drained, still holds its copies). */
static bool
job_reachable(const struct server *s)
{
    int st =
        atomic_load_explicit((_Atomic int *)&s->state, memory_order_relaxed);

    return st != SERVER_DOWN && st != SERVER_EJECTED;
}

/* RESP: "*<n>" then each argument as a bulk string, into <b>. */
static int
resp_cmd(struct buf *b, size_t argc, const char *const *argv,
         const size_t *lens)
{
    if (buf_printf(b, "*%zu\r\n", argc) < 0)
        return -1;
    for (size_t i = 0; i < argc; i++)
        if (buf_printf(b, "$%zu\r\n", lens[i]) < 0 ||
            buf_append(b, argv[i], lens[i]) < 0 || buf_append(b, "\r\n", 2) < 0)
            return -1;
    return 0;
}

/* Read every member that may hold a copy (the set and the holders). */
static void
job_read(struct rjob *job)
{
    struct request_repair *r = job->r;
    struct buf a = {0}, b = {0};
    int ok;

    if (job->memcache) {
        ok = buf_append(&a, "mg ", 3) == 0 &&
             buf_append(&a, r->key, r->klen) == 0 &&
             buf_append(&a, " v f t\r\n", 8) == 0;
    } else {
        const char *dump[] = {"DUMP", r->key}, *pttl[] = {"PTTL", r->key};
        size_t l[] = {4, r->klen};

        ok = resp_cmd(&a, 2, dump, l) == 0 && resp_cmd(&b, 2, pttl, l) == 0;
    }
    job->out++; /* (held through the sends: one may fail at once) */
    for (size_t i = 0; i < job->n; i++) {
        struct jmember *m = &job->jm[i];

        if (!(m->role & (J_SET | J_HOLDER)))
            continue;
        if (!ok || !job_reachable(m->s)) {
            m->st = J_FAILED;
            continue;
        }
        m->gen = replica_gen(m->s);
        m->st = J_READING;
        if (job->memcache) {
            job_send(job, i, 0, MC_MG, a.data, a.len);
        } else {
            job_send(job, i, 0, -1, a.data, a.len);
            job_send(job, i, 1, -1, b.data, b.len);
        }
    }
    buf_free(&a);
    buf_free(&b);
    job->out--;
}

static void job_decide(struct rjob *job);
static void job_write(struct rjob *job);

/* Start the repair on its home (the hold is its own). */
static void
job_run(struct rjob *job)
{
    struct request_repair *r = job->r;
    struct pool_snapshot *snap = pool_snapshot(r->pool);
    size_t idx[REPLICAS_MAX], n = 0,
                              cap = REPLICAS_MAX + r->nholders + r->nleavers;
    bool filling = snap->fill != NULL && !snap->fill_same;

    job->jm = calloc(cap, sizeof(*job->jm));
    if (job->jm == NULL) {
        job_end(job, REPAIR_FAILED);
        return;
    }
    if (snap->ring != NULL && snap->set.replicas > 1 &&
        snap->set.proto == job->mode->proto)
        n = pool_replica_set(snap, job->hash, idx);
    for (size_t i = 0; i < n; i++)
        job_add(job, snap->servers[idx[i]], J_SET, cap);
    for (size_t i = 0; i < r->nholders; i++)
        job_add(job, r->holders[i], J_HOLDER, cap);
    for (size_t i = 0; i < r->nleavers; i++) {
        bool in = false;

        for (size_t k = 0; k < n && !in; k++)
            in = snap->servers[idx[k]] == r->leavers[i];
        if (!in)
            job_add(job, r->leavers[i], J_LEAVER, cap);
    }
    for (size_t i = 0; i < job->n; i++) {
        struct jmember *m = &job->jm[i];

        m->cur = replica_keys_current(m->s, job->packed, job->plen) &&
                 (!(m->role & J_SET) || !filling ||
                  replica_current(snap->fill, job->hash, m->s));
    }
    job_read(job);
    if (job->out == 0)
        job_decide(job);
}

/* memcached's mg reply at <buf> (<len> bytes): the copy into <m>. 0, or
 * -1 when it is not one. */
static int
mc_copy(const char *buf, size_t len, struct jmember *m)
{
    unsigned long long flags = 0;
    long long ttl = -1;
    const char *nl = memchr(buf, '\n', len);
    char *p;
    size_t n;

    if (len >= 2 && memcmp(buf, "EN", 2) == 0) {
        m->present = false;
        return 0;
    }
    if (nl == NULL || len < 4 || memcmp(buf, "VA ", 3) != 0)
        return -1;
    n = strtoull(buf + 3, &p, 10);
    while (p < nl && *p != '\r') {
        if (*p == 'f')
            flags = strtoull(p + 1, &p, 10);
        else if (*p == 't')
            ttl = strtoll(p + 1, &p, 10);
        else
            p++;
    }
    if ((size_t)(nl + 1 - buf) + n > len)
        return -1;
    m->val = malloc(24 + n);
    if (m->val == NULL)
        return -1;
    m->len = (size_t)snprintf(m->val, 24, "%llu ", flags);
    memcpy(m->val + m->len, nl + 1, n);
    m->len += n;
    m->present = true;
    m->ttl_ms = ttl < 0 ? -1 : ttl * 1000;
    return 0;
}

/* A read's reply <buf> (<len> bytes, <error>) from member <i>, <which>. */
static void
job_take(struct rjob *job, size_t i, unsigned which, const char *buf,
         size_t len, bool error)
{
    struct jmember *m = &job->jm[i];
    const char *v;
    size_t vlen;
    int rc;

    if (error || m->st == J_FAILED) {
        m->st = J_FAILED;
        return;
    }
    if (job->memcache) {
        if (mc_copy(buf, len, m) < 0)
            m->st = J_FAILED;
        return;
    }
    if (which == 1) {
        if (len < 3 || buf[0] != ':') {
            m->st = J_FAILED;
            return;
        }
        m->ttl_ms = strtoll(buf + 1, NULL, 10);
        m->ttl_read = true;
        return;
    }
    rc = request_resp_bulk(buf, len, &v, &vlen);
    if (rc < 0 || (rc > 0 && (m->val = malloc(vlen ? vlen : 1)) == NULL)) {
        m->st = J_FAILED;
        return;
    }
    m->present = rc > 0;
    if (rc > 0) {
        memcpy(m->val, v, vlen);
        m->len = vlen;
    }
}

static bool
copy_same(const struct jmember *a, const struct jmember *b)
{
    return a->present == b->present &&
           (!a->present ||
            (a->len == b->len && memcmp(a->val, b->val, a->len) == 0));
}

/*
 * The copy the others are brought to, among the members read (J_READ)
 * that <pick> accepts: the one most of them hold, if more than half of
 * them do; else, when <all_in> (every member of the set answered: nothing
 * better will be learnt), the first in preference order among the most
 * held; else -1 (undecided). *<voters>: how many were counted.
 */
static int
job_vote(const struct rjob *job, bool (*pick)(const struct jmember *),
         bool all_in, size_t *voters)
{
    int best = -1;
    size_t bestn = 0, total = 0;

    for (size_t i = 0; i < job->n; i++) {
        size_t k = 0;

        if (job->jm[i].st != J_READ || !pick(&job->jm[i]))
            continue;
        total++;
        for (size_t j = 0; j < job->n; j++)
            k += job->jm[j].st == J_READ && pick(&job->jm[j]) &&
                 copy_same(&job->jm[i], &job->jm[j]);
        if (k > bestn) {
            bestn = k;
            best = (int)i;
        }
    }
    *voters = total;
    if (best < 0 || bestn * 2 > total || all_in)
        return best;
    return -1;
}

static bool
pick_current(const struct jmember *m)
{
    return (m->role & J_SET) && m->cur;
}

static bool
pick_holder(const struct jmember *m)
{
    return (m->role & J_HOLDER) && m->cur;
}

/* (a member compared whole -- restarted, or its log overflowed -- is
 * behind on everything: never a voter) */
static bool
pick_any(const struct jmember *m)
{
    return (m->role & (J_SET | J_HOLDER)) != 0 && !m->whole;
}

/*
 * The first comparison since chashd started (r->verify): among the
 * members <pick> accepts, a copy beats the key's absence (a key written
 * before replicas was raised lives on its primary alone; a write that
 * was on its way when chashd stopped may be anywhere: either is a state
 * a client may see), and among copies the one most hold, the first in
 * preference order on a tie. -1 when none was read.
 */
static int
job_vote_present(const struct rjob *job, bool (*pick)(const struct jmember *),
                 size_t *voters)
{
    int best = -1, absent = -1;
    size_t bestn = 0;

    *voters = 0;
    for (size_t i = 0; i < job->n; i++) {
        size_t k = 0;

        if (job->jm[i].st != J_READ || !pick(&job->jm[i]))
            continue;
        (*voters)++;
        if (!job->jm[i].present) {
            if (absent < 0)
                absent = (int)i;
            continue;
        }
        for (size_t j = 0; j < job->n; j++)
            k += job->jm[j].st == J_READ && pick(&job->jm[j]) &&
                 copy_same(&job->jm[i], &job->jm[j]);
        if (k > bestn) {
            bestn = k;
            best = (int)i;
        }
    }
    return best >= 0 ? best : absent;
}

/*
 * Every read is in: which copy is the copy. The members that hold
 * current copies vote (they are equal, unless something wrote to the
 * members behind chashd's back, or chashd restarted with writes on their
 * way); when none of the set does, the holders of the filled placement;
 * when none of those either, every member read. A tie is left undecided
 * (noted) unless every member of the set answered.
 */
static void
job_decide(struct rjob *job)
{
    bool set_in = true;
    size_t voters = 0;

    for (size_t i = 0; i < job->n; i++) {
        struct jmember *m = &job->jm[i];

        if (m->st == J_READING)
            m->st = J_READ;
        if ((m->role & J_SET) && m->st != J_READ)
            set_in = false;
        /* behind since the reads began (a restart seen on the connection
         * that carried them, a write missed): not a voter */
        if (m->cur && !replica_keys_current(m->s, job->packed, job->plen))
            m->cur = false;
        m->whole = replica_whole(m->s);
    }
    if (job->r->verify) {
        job->truth = job_vote_present(job, pick_current, &voters);
        if (voters == 0)
            job->truth = job_vote_present(job, pick_any, &voters);
        /* a member of the set that could not be compared: behind */
        for (size_t i = 0; i < job->n && voters > 0; i++)
            if ((job->jm[i].role & J_SET) && job->jm[i].st != J_READ)
                replica_note(job->jm[i].s, job->packed, job->plen, SIZE_MAX);
    } else {
        job->truth = job_vote(job, pick_current, set_in, &voters);
        if (voters == 0)
            job->truth = job_vote(job, pick_holder, set_in, &voters);
        if (voters == 0)
            job->truth = job_vote(job, pick_any, set_in, &voters);
    }
    if (voters == 0) {
        job->r->failed = NULL;
        for (size_t i = 0; i < job->n && job->r->failed == NULL; i++)
            if (job->jm[i].role & J_SET)
                job->r->failed = job->jm[i].s;
        job_end(job, REPAIR_FAILED);
        return;
    }
    if (job->truth < 0) {
        /* a tie: every voter stays behind until a majority can say */
        for (size_t i = 0; i < job->n; i++)
            if (job->jm[i].st == J_READ && (job->jm[i].role & J_SET))
                replica_note(job->jm[i].s, job->packed, job->plen, SIZE_MAX);
        job_end(job, REPAIR_UNDECIDED);
        return;
    }
    for (size_t i = 0; i < job->n; i++)
        if (job->jm[i].st == J_READ && pick_current(&job->jm[i]) &&
            !copy_same(&job->jm[i], &job->jm[(size_t)job->truth]))
            job->r->divergent = true;
    job_write(job);
}

/* Write the copy (or its absence) to member <i>. */
static void
job_put(struct rjob *job, size_t i, const struct jmember *w)
{
    struct request_repair *r = job->r;
    struct buf b = {0};
    int ok;

    if (job->memcache) {
        if (!w->present) {
            ok = buf_append(&b, "md ", 3) == 0 &&
                 buf_append(&b, r->key, r->klen) == 0 &&
                 buf_append(&b, "\r\n", 2) == 0;
        } else {
            const char *sp = memchr(w->val, ' ', w->len);
            unsigned long long flags = strtoull(w->val, NULL, 10);
            size_t n = sp != NULL ? w->len - (size_t)(sp + 1 - w->val) : 0;

            ok =
                sp != NULL && buf_append(&b, "ms ", 3) == 0 &&
                buf_append(&b, r->key, r->klen) == 0 &&
                buf_printf(&b, " %zu F%llu T%lld\r\n", n, flags,
                           w->ttl_ms > 0 ? (w->ttl_ms + 999) / 1000 : 0) == 0 &&
                buf_append(&b, sp + 1, n) == 0 &&
                buf_append(&b, "\r\n", 2) == 0;
        }
    } else if (!w->present) {
        const char *del[] = {"DEL", r->key};
        size_t l[] = {3, r->klen};

        ok = resp_cmd(&b, 2, del, l) == 0;
    } else {
        char ttl[32];
        const char *rs[] = {"RESTORE", r->key, ttl, w->val, "REPLACE"};
        size_t l[] = {7, r->klen, 0, w->len, 7};

        snprintf(ttl, sizeof(ttl), "%lld", w->ttl_ms > 0 ? w->ttl_ms : 0);
        l[2] = strlen(ttl);
        ok = resp_cmd(&b, 5, rs, l) == 0;
    }
    if (!ok) {
        job->jm[i].st = J_FAILED;
        buf_free(&b);
        return;
    }
    job->jm[i].st = J_WRITING;
    job_send(job, i, 0, job->memcache ? (w->present ? MC_MS : MC_MD) : -1,
             b.data, b.len);
    buf_free(&b);
}

static void job_done(struct rjob *job);

/* Bring the members behind (or apart) to the copy; delete it where it
 * left. The key's requests are still held: nothing lands between these
 * writes and the reads they follow. */
static void
job_write(struct rjob *job)
{
    const struct jmember *t = &job->jm[(size_t)job->truth];
    static const struct jmember none = {.present = false, .ttl_ms = -1};

    job->out++;
    for (size_t i = 0; i < job->n; i++) {
        struct jmember *m = &job->jm[i];

        if (m->role & J_SET) {
            if (m->st != J_READ || !replica_settled(m->s))
                continue; /* not read, or may still run an old
                             connection's writes: later */
            if (copy_same(m, t)) {
                m->st = J_DONE; /* right already */
                continue;
            }
            job_put(job, i, t);
        } else if ((m->role & J_LEAVER) && job_reachable(m->s) &&
                   replica_settled(m->s)) {
            job_put(job, i, &none);
        }
    }
    job->out--;
    if (job->out == 0)
        job_done(job);
}

/* Every write is in. */
static void
job_done(struct rjob *job)
{
    struct request_repair *r = job->r;
    bool all = true;

    for (size_t i = 0; i < job->n; i++) {
        struct jmember *m = &job->jm[i];

        if (m->st == J_WRITING)
            m->st = J_DONE; /* (a failed write set J_FAILED) */
        if (m->role & J_SET) {
            if (m->st == J_DONE) {
                replica_clear(m->s, r->key, r->klen, m->gen);
            } else {
                all = false;
                if (r->failed == NULL)
                    r->failed = m->s;
            }
        } else if ((m->role & J_LEAVER) && m->st != J_DONE &&
                   job_reachable(m->s)) {
            all = false;
        }
    }
    job_end(job, all ? REPAIR_OK : REPAIR_FAILED);
}

/* A repair's request is answered. */
void
request_job_report(struct rreq *q)
{
    struct rjob *job = q->job;
    size_t i = q->rep_idx / 2;
    unsigned which = q->rep_idx % 2;
    struct jmember *m = &job->jm[i];
    bool failed = q->one.failed;

    m->want--;
    if (m->st == J_READING || m->st == J_FAILED) {
        if (failed)
            m->st = J_FAILED;
        else if (m->st == J_READING)
            job_take(job, i, which, q->reply.data + q->reply.off,
                     buf_size(&q->reply), q->one.error);
    } else if (m->st == J_WRITING) {
        if (failed || q->one.error)
            m->st = J_FAILED;
        else if (m->role & J_SET)
            job->r->written++;
        else
            job->r->deleted++;
    }
    q->job = NULL;
    request_req_free(q);
    if (--job->out > 0)
        return;
    /* every request of the step is in */
    for (size_t k = 0; k < job->n; k++)
        if (job->jm[k].st == J_READING) {
            job_decide(job);
            return;
        }
    for (size_t k = 0; k < job->n; k++)
        if (job->jm[k].st == J_WRITING) {
            job_done(job);
            return;
        }
    job_done(job); /* (only failures) */
}

static void
job_msg_run(struct worker *w, struct worker_msg *m)
{
    request_job_arrive(w, WORKER_OF(m, struct request_repair, msg));
}

/* Repair <r> reached its home <w>: it runs, or waits behind another
 * repair of its key. */
void
request_job_arrive(struct worker *w, struct request_repair *r)
{
    struct pool_snapshot *snap = pool_snapshot(r->pool);
    struct rworker *rw = request_rworker(w);
    struct rjob *job = calloc(1, sizeof(*job));
    uint32_t kl = (uint32_t)r->klen;

    if (job == NULL || rw == NULL || rw->closing ||
        (job->packed = malloc(sizeof(kl) + r->klen)) == NULL ||
        snap->set.replicas <= 1 ||
        (snap->set.mode != CONF_MODE_REDIS &&
         snap->set.mode != CONF_MODE_MEMCACHE)) {
        if (job != NULL)
            free(job->packed);
        free(job);
        r->result = REPAIR_FAILED;
        r->done(r);
        return;
    }
    memcpy(job->packed, &kl, sizeof(kl));
    memcpy(job->packed + sizeof(kl), r->key, r->klen);
    job->plen = sizeof(kl) + r->klen;
    job->r = r;
    r->priv = job;
    job->w = w;
    job->rw = rw;
    job->memcache = snap->set.mode == CONF_MODE_MEMCACHE;
    job->mode = request_mode_of(snap);
    job->hash = r->hash;
    job->truth = -1;
    if (request_pause_hold(rw, r->pool, &job->held, true))
        return; /* behind an ordered fan-out of its pool */
    job_hold(job);
}

/* <job> takes its key's hold and runs, or waits behind the repair that
 * holds it. */
static void
job_hold(struct rjob *job)
{
    struct request_repair *r = job->r;
    struct rhold *h;

    if ((h = request_hold_find(job->rw, r->pool, job->hash)) != NULL) {
        job->held.job = true;
        request_hold_push(h, &job->held);
        return;
    }
    if (request_hold_make(job->rw, r->pool, job->hash) == NULL) {
        job_free(job);
        r->priv = NULL;
        r->result = REPAIR_FAILED;
        r->done(r);
        return;
    }
    job_run(job);
}

static void
job_msg_drop(struct worker_msg *m)
{
    struct request_repair *r = WORKER_OF(m, struct request_repair, msg);

    r->result = REPAIR_FAILED;
    r->done(r);
}

void
request_repair_submit(struct request_repair *r)
{
    r->msg.run = job_msg_run;
    r->msg.drop = job_msg_drop;
    if (worker_post(request_rep_home(r->hash), &r->msg) < 0) {
        r->result = REPAIR_FAILED;
        r->done(r);
    }
}

void
request_job_take_hold(struct rheld *x)
{
    job_run(job_of_held(x));
}

void
request_job_resume(struct rheld *x)
{
    job_hold(job_of_held(x));
}

void
request_job_fail_held(struct rheld *x)
{
    struct rjob *job = job_of_held(x);
    struct request_repair *r = job->r;

    job_free(job);
    r->priv = NULL;
    r->result = REPAIR_FAILED;
    r->done(r);
}

/* ---- barriers ------------------------------------------------------------ */

/* A barrier in one worker: the connections of its pool's members, each
 * with the count of requests it had been sent when the barrier came. */
struct rbar {
    struct worker_msg msg;
    struct rbar *next;
    struct request_barrier *b; /* (ref held) */
    size_t n;
    struct rbar_mark {
        struct rserver *s;
        uint64_t mark;
    } * marks;
};

#define BAR_CHECK_MS 5

static void pause_check(struct rworker *rw);
static void bar_run(struct worker *w, struct worker_msg *m);
static void bar_drop(struct worker_msg *m);

struct request_barrier *
request_barrier_start(struct pool *p)
{
    struct request_barrier *b = calloc(1, sizeof(*b));
    unsigned n = worker_count();

    if (b == NULL)
        return NULL;
    b->pool = p;
    pool_ref(p);
    atomic_store(&b->refs, 1);
    atomic_store(&b->left, n);
    for (unsigned i = 0; i < n; i++) {
        struct rbar *x = calloc(1, sizeof(*x));

        if (x == NULL)
            continue; /* it never passes: its waiter gives up, later */
        x->b = b;
        atomic_fetch_add(&b->refs, 1);
        x->msg.run = bar_run;
        x->msg.drop = bar_drop;
        if (worker_post(i, &x->msg) < 0)
            bar_drop(&x->msg);
    }
    return b;
}

bool
request_barrier_passed(struct request_barrier *b)
{
    return atomic_load(&b->left) == 0;
}

void
request_barrier_unref(struct request_barrier *b)
{
    if (b == NULL || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    pool_unref(b->pool);
    free(b);
}

static void
bar_pass(struct rbar *x)
{
    atomic_fetch_sub(&x->b->left, 1);
    request_barrier_unref(x->b);
    free(x->marks);
    free(x);
}

/* Whether every marked connection of <x> answered up to its mark. */
static bool
bar_clear(const struct rbar *x)
{
    for (size_t i = 0; i < x->n; i++)
        if (x->marks[i].s->answered < x->marks[i].mark)
            return false;
    return true;
}

static void
bar_timer(struct worker *w, struct timer *t)
{
    struct rworker *rw = WORKER_OF(t, struct rworker, bar_timer);
    struct rbar **pp = &rw->bars;

    while (*pp != NULL) {
        struct rbar *x = *pp;

        if (!bar_clear(x)) {
            pp = &x->next;
            continue;
        }
        *pp = x->next;
        bar_pass(x);
    }
    pause_check(rw);
    if (rw->bars != NULL || rw->pws != NULL)
        worker_timer_set(w, &rw->bar_timer, w->now_ms + BAR_CHECK_MS);
}

static void
bar_run(struct worker *w, struct worker_msg *m)
{
    struct rbar *x = WORKER_OF(m, struct rbar, msg);
    struct rworker *rw = request_rworker(w);
    size_t cap = 0;

    if (rw == NULL) {
        bar_pass(x); /* (nothing was sent by a worker with no engine) */
        return;
    }
    for (size_t b = 0; b < MEMBER_BUCKETS; b++)
        for (struct rmember *mb = rw->table[b]; mb != NULL; mb = mb->next)
            cap += mb->pool == x->b->pool ? mb->nconns : 0;
    x->marks = cap ? calloc(cap, sizeof(*x->marks)) : NULL;
    for (size_t b = 0; b < MEMBER_BUCKETS && (cap == 0 || x->marks); b++)
        for (struct rmember *mb = rw->table[b]; mb != NULL; mb = mb->next)
            for (size_t c = 0; mb->pool == x->b->pool && c < mb->nconns; c++)
                if (mb->conns[c] != NULL &&
                    mb->conns[c]->sent > mb->conns[c]->answered) {
                    x->marks[x->n].s = mb->conns[c];
                    x->marks[x->n++].mark = mb->conns[c]->sent;
                }
    if (cap > 0 && x->marks == NULL) {
        /* out of memory: it does not pass here (the fill waits, fails,
         * and is tried again) */
        request_barrier_unref(x->b);
        free(x);
        return;
    }
    if (bar_clear(x)) {
        bar_pass(x);
        return;
    }
    rw->bar_timer.on_expire = bar_timer;
    x->next = rw->bars;
    rw->bars = x;
    worker_timer_set(w, &rw->bar_timer, w->now_ms + BAR_CHECK_MS);
}

static void
bar_drop(struct worker_msg *m)
{
    struct rbar *x = WORKER_OF(m, struct rbar, msg);

    request_barrier_unref(x->b);
    free(x->marks);
    free(x);
}

/* ---- ordered fan-outs (a flush in a pool with replicas) ----------------- */

/*
 * A write to every member that touches every key (FLUSHALL, FLUSHDB,
 * flush_all). Each key's writes reach the members in one order, through
 * its home; a flush sent at once by the client's worker could land
 * before a key's write on one member and after it on another. So the
 * pool pauses: every worker stops starting the pool's requests (they
 * wait, in order), lets its running repairs end, and waits until what it
 * sent the members is answered; once all have, the flush goes out; once
 * every member answered it, the workers go on. A member that did not
 * take it is compared whole.
 */
struct rpause {
    struct worker_msg msg; /* GO, to the origin */
    _Atomic int refs;      /* (atomic) the origin, each worker's pause */
    _Atomic unsigned left; /* (atomic) workers not paused yet */
    struct pool *pool;     /* (ref held) */
    struct worker *origin;
    struct rreq *r;    /* the client's request (the origin's) */
    struct server **m; /* [n] (refs held) */
    size_t n;
    char *buf; /* what each member is sent */
    size_t len;
    size_t out; /* fan-out copies not answered yet (the origin's) */
};

/* The pause of one pool on one worker: what waits for it. */
struct rpaused {
    struct rpaused *next;
    const struct pool *pool;
    unsigned count; /* fan-outs pausing it */
    struct rheld *head, *tail;
};

/* A fan-out's pause on one worker, until its sent requests are answered
 * and its repairs of the pool are over. */
struct rpw {
    struct worker_msg msg;
    struct rpw *next;
    struct rpause *p;
    bool resume; /* the message resumes (else it pauses) */
    size_t n;
    struct rbar_mark *marks;
};

static void
pause_unref(struct rpause *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    for (size_t i = 0; i < p->n; i++)
        server_unref(p->m[i]);
    free(p->m);
    free(p->buf);
    pool_unref(p->pool);
    free(p);
}

static struct rpaused *
paused_of(struct rworker *rw, const struct pool *p)
{
    for (struct rpaused *x = rw->paused; x != NULL; x = x->next)
        if (x->pool == p)
            return x;
    return NULL;
}

/* <x> (a request, or a repair when <job>) of pool <p> waits when the pool
 * is paused on <rw>: true then. */
bool
request_pause_hold(struct rworker *rw, const struct pool *p, struct rheld *x,
                   bool job)
{
    struct rpaused *pz;

    if (rw->paused == NULL || (pz = paused_of(rw, p)) == NULL)
        return false;
    x->job = job;
    x->next = NULL;
    if (pz->tail != NULL)
        pz->tail->next = x;
    else
        pz->head = x;
    pz->tail = x;
    return true;
}

/* A repair of a paused pool is over: what waited behind it arrived before
 * the pause, so it goes first in the pause's queue. True when it did. */
bool
request_pause_take_held(struct rworker *rw, struct rhold *h)
{
    struct rpaused *pz;

    if (rw->paused == NULL || h->head == NULL ||
        (pz = paused_of(rw, h->pool)) == NULL)
        return false;
    h->tail->next = pz->head;
    pz->head = h->head;
    if (pz->tail == NULL)
        pz->tail = h->tail;
    h->head = h->tail = NULL;
    return true;
}

/* Whether a repair of pool <p> runs on <rw>. */
static bool
repair_pool_repairing(const struct rworker *rw, const struct pool *p)
{
    if (rw->nholds == 0)
        return false;
    for (size_t b = 0; b < HOLD_BUCKETS; b++)
        for (const struct rhold *h = rw->holds[b]; h != NULL; h = h->next)
            if (h->pool == p)
                return true;
    return false;
}

static void pause_go(struct worker *w, struct worker_msg *m);
static void pause_go_drop(struct worker_msg *m);

/* <x>'s worker is paused for its fan-out: counted, and the last one tells
 * the origin to send it. Frees <x>. */
static void
pause_ready(struct rpw *x)
{
    struct rpause *p = x->p;

    free(x->marks);
    free(x);
    if (atomic_fetch_sub(&p->left, 1) == 1) {
        p->msg.run = pause_go;
        p->msg.drop = pause_go_drop;
        if (worker_post(p->origin->id, &p->msg) < 0)
            pause_go_drop(&p->msg);
    }
    pause_unref(p);
}

/* The bar timer's: the pauses whose replies came. */
static void
pause_check(struct rworker *rw)
{
    struct rpw **pp = &rw->pws;

    while (*pp != NULL) {
        struct rpw *x = *pp;
        bool clear = !repair_pool_repairing(rw, x->p->pool);

        for (size_t i = 0; clear && i < x->n; i++)
            clear = x->marks[i].s->answered >= x->marks[i].mark;
        if (!clear) {
            pp = &x->next;
            continue;
        }
        *pp = x->next;
        pause_ready(x);
    }
}

static void bar_timer(struct worker *w, struct timer *t);

/* PAUSE, on each worker. */
static void
pause_run(struct worker *w, struct worker_msg *m)
{
    struct rpw *x = WORKER_OF(m, struct rpw, msg);
    struct rworker *rw = request_rworker(w);
    struct rpaused *pz;
    size_t cap = 0;

    if (rw == NULL) {
        pause_ready(x);
        return;
    }
    if ((pz = paused_of(rw, x->p->pool)) == NULL) {
        pz = calloc(1, sizeof(*pz));
        if (pz == NULL) {
            pause_ready(x); /* (out of memory: not paused; rare) */
            return;
        }
        pz->pool = x->p->pool;
        pz->next = rw->paused;
        rw->paused = pz;
    }
    pz->count++;
    for (size_t b = 0; b < MEMBER_BUCKETS; b++)
        for (struct rmember *mb = rw->table[b]; mb != NULL; mb = mb->next)
            cap += mb->pool == x->p->pool ? mb->nconns : 0;
    x->marks = cap ? calloc(cap, sizeof(*x->marks)) : NULL;
    for (size_t b = 0; b < MEMBER_BUCKETS && x->marks != NULL; b++)
        for (struct rmember *mb = rw->table[b]; mb != NULL; mb = mb->next)
            for (size_t c = 0; mb->pool == x->p->pool && c < mb->nconns; c++)
                if (mb->conns[c] != NULL &&
                    mb->conns[c]->sent > mb->conns[c]->answered) {
                    x->marks[x->n].s = mb->conns[c];
                    x->marks[x->n++].mark = mb->conns[c]->sent;
                }
    x->next = rw->pws;
    rw->pws = x;
    pause_check(rw);
    if (rw->pws != NULL) {
        rw->bar_timer.on_expire = bar_timer;
        worker_timer_set(w, &rw->bar_timer, w->now_ms + BAR_CHECK_MS);
    }
}

/* RESUME, on each worker: the pool goes on when no fan-out pauses it,
 * what waited first, in its order. */
static void
resume_run(struct worker *w, struct worker_msg *m)
{
    struct rpw *x = WORKER_OF(m, struct rpw, msg);
    struct rworker *rw = w->requests;
    struct rpaused **pp = rw != NULL ? &rw->paused : NULL, *pz;
    struct rheld *q;

    while (pp != NULL && *pp != NULL && (*pp)->pool != x->p->pool)
        pp = &(*pp)->next;
    pause_unref(x->p);
    free(x);
    if (pp == NULL || (pz = *pp) == NULL || --pz->count > 0)
        return;
    *pp = pz->next;
    q = pz->head;
    free(pz);
    while (q != NULL) {
        struct rheld *next = q->next;

        q->next = NULL;
        if (q->job)
            request_job_resume(q);
        else
            request_rep_arrive_held(w, q);
        q = next;
    }
}

static void
pw_drop(struct worker_msg *m)
{
    struct rpw *x = WORKER_OF(m, struct rpw, msg);

    pause_unref(x->p);
    free(x->marks);
    free(x);
}

/* Post PAUSE (or RESUME) of <p> to every worker. */
static void
pause_post(struct rpause *p, bool resume)
{
    unsigned n = worker_count();

    for (unsigned i = 0; i < n; i++) {
        struct rpw *x = calloc(1, sizeof(*x));

        if (x == NULL) {
            /* (a pause not sent never ends: its fan-out waits for good;
             * a resume not sent leaves the pool paused there: both only
             * when out of memory, said in the log) */
            log_error("replication: out of memory: pool %s's ordered "
                      "fan-out cannot reach worker %u",
                      p->pool->name, i);
            continue;
        }
        atomic_fetch_add(&p->refs, 1);
        x->p = p;
        x->resume = resume;
        x->msg.run = resume ? resume_run : pause_run;
        x->msg.drop = pw_drop;
        if (worker_post(i, &x->msg) < 0)
            pw_drop(&x->msg);
    }
}

/* Every worker is paused: the origin sends the fan-out, a copy per member
 * (each answers the client's fragment of it). */
static void
pause_go(struct worker *w, struct worker_msg *m)
{
    struct rpause *p = WORKER_OF(m, struct rpause, msg);

    p->out = p->n + 1; /* (held through the sends) */
    for (size_t i = 0; i < p->n; i++) {
        struct rreq *copy = calloc(1, sizeof(*copy));
        struct rserver *s;

        if (copy == NULL || request_frags(copy, 1) < 0) {
            free(copy);
            p->out--;
            request_frag_fail(&p->r->frags[i], PROTO_ERR_CLOSED);
            replica_note_whole(p->m[i], "it missed a flush");
            continue;
        }
        copy->mode = p->r->mode;
        copy->command = p->r->command;
        copy->flags = p->r->flags;
        copy->start_us = clock_us();
        copy->start_ms = w->now_ms;
        copy->pause = p;
        copy->rep_idx = (unsigned)i;
        s = request_send_on(w, p->pool, copy->mode, &copy->one, p->m[i],
                            p->m[i]->id);
        if (s != NULL)
            request_conn_queue(s, &copy->one, p->buf, p->len, NULL);
    }
    if (--p->out == 0) {
        pause_post(p, true);
        pause_unref(p);
    }
}

/* The origin exited before the fan-out could go: its request is an
 * orphan, freed with the fragments that never get their answer. */
static void
pause_go_drop(struct worker_msg *m)
{
    struct rpause *p = WORKER_OF(m, struct rpause, msg);

    for (size_t i = 0; i < p->n; i++)
        request_orphan_drop(&p->r->frags[i]);
    pause_unref(p);
}

/* A fan-out copy is answered: the client's fragment gets its reply; a
 * member that did not take it is compared whole; the last one lets the
 * workers go on. */
void
request_pause_report(struct rreq *copy)
{
    struct rpause *p = copy->pause;
    size_t i = copy->rep_idx;
    struct rfrag *f = &p->r->frags[i];

    if (copy->one.failed || copy->one.error)
        replica_note_whole(p->m[i], copy->one.failed ? "it missed a flush"
                                                     : "it refused a flush");
    f->error = copy->one.error;
    if (request_frag_data(f, copy->reply.data + copy->reply.off,
                          buf_size(&copy->reply)) < 0 &&
        f->req->client != NULL)
        f->req->client->closing = true;
    copy->pause = NULL;
    request_req_free(copy);
    request_frag_done(f);
    if (--p->out == 0) {
        pause_post(p, true);
        pause_unref(p);
    }
}

void
request_send_every(struct rreq *r, const struct pool_snapshot *snap,
                   struct server *const *members, size_t n, const char *buf,
                   size_t len)
{
    struct rpause *p;

    if (snap->set.replicas <= 1 || !(r->flags & PROTO_REQ_WRITE)) {
        for (size_t i = 0; i < n; i++)
            request_send(r, &r->frags[i], members[i], members[i]->id, buf, len,
                         0);
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL || (p->m = calloc(n ? n : 1, sizeof(*p->m))) == NULL ||
        (p->buf = malloc(len ? len : 1)) == NULL) {
        if (p != NULL)
            free(p->m);
        free(p);
        for (size_t i = 0; i < n; i++)
            request_frag_fail(&r->frags[i], PROTO_ERR_CLOSED);
        return;
    }
    atomic_store(&p->refs, 1);
    atomic_store(&p->left, worker_count());
    p->pool = r->client->pool;
    pool_ref(p->pool);
    p->origin = r->client->w;
    p->r = r;
    for (size_t i = 0; i < n; i++) {
        p->m[i] = members[i];
        server_ref(members[i]);
    }
    p->n = n;
    memcpy(p->buf, buf, len);
    p->len = len;
    pause_post(p, false);
}

void
request_repair_close(struct rworker *rw)
{
    while (rw->pws != NULL) {
        struct rpw *x = rw->pws;

        rw->pws = x->next;
        pw_drop(&x->msg); /* (its fan-out never goes: chashd stops) */
    }
    while (rw->paused != NULL) {
        struct rpaused *pz = rw->paused;

        rw->paused = pz->next;
        while (pz->head != NULL) {
            struct rheld *x = pz->head;

            pz->head = x->next;
            request_held_fail(x);
        }
        free(pz);
    }
    worker_timer_del(rw->w, &rw->bar_timer);
    while (rw->bars != NULL) {
        struct rbar *x = rw->bars;

        rw->bars = x->next;
        request_barrier_unref(x->b); /* (never passes: the worker exits) */
        free(x->marks);
        free(x);
    }
}

/* request_rep.c -- replication's data path (`replicas: N`): every request
 * of a key runs on the key's HOME worker, which sends its copies to the
 * members of the key's replica set on its own connections, decides by the
 * pool's quorums, and answers the client's worker; and the repairs of a
 * key, which its home runs between two of the key's requests.
 *
 * Why a home. A member runs one connection's commands in the order they
 * came; two connections' in any order. With every worker sending a key's
 * writes on its own connections, two clients writing one key reached the
 * members in different orders: INCR handed out one value twice, and a
 * repair that overwrote a copy lost the writes it raced with. Now all
 * requests of a key pass through one worker and one connection per member
 * (the key's ring hash picks both), so every member applies them in one
 * order: the copies of the members that took every write are equal, and a
 * member's reply is the reply one server would have given. A member that
 * missed a write (no reply, an error where the others succeeded) is noted
 * behind on the key (replica.h) and does not count, for reads or for
 * quorums, until a repair -- run by the same home, holding the key's
 * requests meanwhile (request_repair.c) -- brought its copy forward.
 * doc/internals/replication.md has the argument in full.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/request_int.h"

#include <errno.h>
#include <inttypes.h>
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

/* A read not answered after this fraction of the pool's timeout is also
 * asked of the next member (bounded below and above). */
#define HEDGE_DIV 10
#define HEDGE_MIN_MS 10
#define HEDGE_MAX_MS 200
#define HEDGE_NO_TIMEOUT_MS 100

/* ---- a key's home -------------------------------------------------------- */

/* The worker that runs every request of a key of ring hash <hash>. The
 * ring hash's bits are mixed first: keys of one arc of the ring do not all
 * go to one worker. The number of workers is fixed for the life of the
 * process, so a key's home never changes. */
unsigned
request_rep_home(uint64_t hash)
{
    unsigned n = worker_count();
    uint64_t h = hash * UINT64_C(0x9E3779B97F4A7C15);

    return n <= 1 ? 0 : (unsigned)((h >> 32) % n);
}

/* ---- holds: a key's requests wait while its repair runs ------------------ */

static size_t
hold_bucket(const struct pool *p, uint64_t hash)
{
    return (size_t)((hash ^ (uint64_t)(uintptr_t)p) % HOLD_BUCKETS);
}

struct rhold *
request_hold_find(struct rworker *rw, const struct pool *p, uint64_t hash)
{
    if (rw->nholds == 0)
        return NULL;
    for (struct rhold *h = rw->holds[hold_bucket(p, hash)]; h != NULL;
         h = h->next)
        if (h->pool == p && h->hash == hash)
            return h;
    return NULL;
}

struct rhold *
request_hold_make(struct rworker *rw, const struct pool *p, uint64_t hash)
{
    struct rhold *h = calloc(1, sizeof(*h));
    size_t b = hold_bucket(p, hash);

    if (h == NULL)
        return NULL;
    h->pool = p;
    h->hash = hash;
    h->next = rw->holds[b];
    rw->holds[b] = h;
    rw->nholds++;
    return h;
}

void
request_hold_push(struct rhold *h, struct rheld *x)
{
    x->next = NULL;
    if (h->tail != NULL)
        h->tail->next = x;
    else
        h->head = x;
    h->tail = x;
}

static void
hold_drop(struct rworker *rw, struct rhold *h)
{
    struct rhold **pp = &rw->holds[hold_bucket(h->pool, h->hash)];

    while (*pp != h)
        pp = &(*pp)->next;
    *pp = h->next;
    rw->nholds--;
    free(h);
}

struct rrep;
static void rep_run(struct rrep *rep);
static struct rrep *rep_of_held(struct rheld *x);

/* The repair holding <h> is over: what waited runs, in order, up to the
 * next repair of the key (which takes the hold in its turn). */
void
request_hold_release(struct rworker *rw, struct rhold *h)
{
    if (request_pause_take_held(rw, h)) {
        hold_drop(rw, h); /* what waited waits for the fan-out now */
        return;
    }
    while (h->head != NULL) {
        struct rheld *x = h->head;

        h->head = x->next;
        if (h->head == NULL)
            h->tail = NULL;
        x->next = NULL;
        if (x->job) {
            request_job_take_hold(x);
            return;
        }
        rep_run(rep_of_held(x));
    }
    hold_drop(rw, h);
}

/* ---- a replicated request ------------------------------------------------ */

/* How a replicated fragment runs. */
enum rep_policy {
    REP_WRITE,      /* every member; write_quorum successes answer */
    REP_READ_ONE,   /* one member at a time, the next when one fails */
    REP_READ_QUORUM /* every current member; read_quorum equal replies */
};

/* Where one member of the set is. */
enum rep_state {
    REP_NOT_SENT, /* not asked (yet: a read's next member) */
    REP_SKIPPED,  /* not asked: not current for the key (a read) */
    REP_PENDING,  /* its copy is on its way */
    REP_OK,       /* answered, not an error */
    REP_ERROR,    /* answered with an error reply */
    REP_FAILED    /* no reply: down, refused, reset */
};

/*
 * A fragment on the members of its key's replica set. Made by the
 * client's worker (the ORIGIN), which keeps the client's fragment <f>
 * pending; run by the key's HOME (posted to it when it is another
 * worker). Each member gets its own copy (a request of no client,
 * struct rreq.rep), which may still be on its way after the client was
 * answered (a write acknowledged by a quorum): the last copy to report
 * frees this.
 */
struct rrep {
    struct worker_msg msg; /* to its home */
    struct rheld held;     /* waiting behind a repair of its key */
    /* the origin's */
    struct rfrag *f; /* the client's fragment: touched only by the
                        origin (the answer is posted back) */
    struct worker *origin;
    /* the request */
    struct pool *pool; /* (ref held) */
    const struct request_mode *mode;
    int command;
    unsigned flags;
    bool rep_one; /* a reply that differs by member (TTL...): one
                     member answers a read */
    bool rotate;  /* read_policy any, or a hot key: the set's order
                     starts at <rot> */
    unsigned rot;
    uint64_t hash; /* the ring hash of its keys (one for all) */
    size_t reqlen, keyslen;
    /* the home's */
    struct worker *w;
    struct timer timer;   /* the deadline, or a read's hedge */
    uint64_t deadline_ms; /* the client is answered by then (0: no
                             timeout) */
    uint64_t hedge_ms;    /* a read asks the next member too then (0: no) */
    int policy;           /* enum rep_policy */
    unsigned n, need, out;
    unsigned next; /* REP_READ_ONE: the next member to ask */
    int chosen;    /* the member whose reply answered, -1 */
    bool answered;
    bool sending; /* the first copies are being sent: no decision
                     before all are (one may fail at once) */
    bool expired; /* past the deadline: what is pending counts as
                     missing for the answer (it still reports) */
    bool differ;  /* current members answered apart */
    bool quorum_failed;
    size_t log_cap; /* repair_log */
    /* From here on, not zeroed when a cached one is reused (rep_get): the
     * arrays' first <n> entries are set by rep_run, the buffers kept. */
    struct server *m[REPLICAS_MAX]; /* in preference order (refs held) */
    int st[REPLICAS_MAX];           /* enum rep_state */
    bool cur[REPLICAS_MAX];         /* current for the key (replica.h):
                                       its reply counts */
    bool judged[REPLICAS_MAX];      /* noted (or found right) already */
    struct buf reply[REPLICAS_MAX];
    char *req; /* what each member is sent */
    size_t reqcap;
    char *keys; /* packed (request_key_pack) */
    size_t keyscap;
};

static struct rrep *
rep_of_held(struct rheld *x)
{
    return WORKER_OF(x, struct rrep, held);
}

/* The answer on its way back to the origin. */
struct rreply {
    struct worker_msg msg;
    struct rfrag *f;
    bool error;
    size_t len, cap;
    char data[];
};

/* ---- the pieces' caches -------------------------------------------------- */

/* What each worker keeps (struct rworker's cache): requests (struct rrep,
 * with their buffers), copies (struct rreq, with their reply buffer),
 * answers (struct rreply of REPLY_INLINE bytes). A piece freed by one
 * worker goes to its cache, whoever allocated it: the traffic between
 * two workers goes both ways, the caches stay fed. */
enum { CACHE_REP, CACHE_COPY, CACHE_REPLY };
#define CACHE_MAX 4096
#define CACHE_BUF_MAX (64 * 1024) /* a larger buffer is not kept */
#define REPLY_INLINE 256

static void *
cache_get(struct rworker *rw, int kind)
{
    void *p = rw != NULL ? rw->cache[kind] : NULL;

    if (p != NULL) {
        memcpy(&rw->cache[kind], p, sizeof(void *));
        rw->ncache[kind]--;
    }
    return p;
}

/* Keep <p> (its first bytes become the link); false when it must be freed
 * instead (no worker, one that exits, a full cache). */
static bool
cache_put(struct rworker *rw, int kind, void *p)
{
    if (rw == NULL || rw->closing || rw->ncache[kind] >= CACHE_MAX)
        return false;
    memcpy(p, &rw->cache[kind], sizeof(void *));
    rw->cache[kind] = p;
    rw->ncache[kind]++;
    return true;
}

/* A copy (a request of no client with one fragment), from <rw>'s cache. */
static struct rreq *
copy_get(struct rworker *rw)
{
    struct rreq *q = cache_get(rw, CACHE_COPY);

    if (q != NULL) {
        struct buf keep = q->reply;

        memset(q, 0, sizeof(*q));
        q->reply = keep;
    } else if ((q = calloc(1, sizeof(*q))) == NULL) {
        return NULL;
    }
    if (request_frags(q, 1) < 0) {
        free(q);
        return NULL;
    }
    return q;
}

/* A copy that reported: kept by <rw>, or freed. */
static void
copy_put(struct rworker *rw, struct rreq *q)
{
    buf_free(&q->one.pending);
    buf_free(&q->one.reply);
    buf_free(&q->one.bkeys);
    buf_reset(&q->reply, CACHE_BUF_MAX);
    if (q->one.keys != NULL || q->one.gate_error != NULL ||
        q->one.hold_to != NULL || q->one.gates != NULL ||
        !cache_put(rw, CACHE_COPY, q)) {
        q->rep = NULL;
        q->job = NULL;
        q->pause = NULL;
        request_req_free(q);
    }
}

/* Free what <rw>'s caches hold (worker exit). */
static void
cache_free(struct rworker *rw)
{
    void *p;

    while ((p = cache_get(rw, CACHE_REP)) != NULL) {
        struct rrep *rep = p;

        free(rep->req);
        free(rep->keys);
        for (unsigned i = 0; i < REPLICAS_MAX; i++)
            buf_free(&rep->reply[i]);
        free(rep);
    }
    while ((p = cache_get(rw, CACHE_COPY)) != NULL) {
        struct rreq *q = p;

        buf_free(&q->reply);
        free(q);
    }
    while ((p = cache_get(rw, CACHE_REPLY)) != NULL)
        free(p);
}

int
request_key_pack(const struct pool_snapshot *snap, struct buf *keys,
                 const char *k, size_t len)
{
    uint32_t n = (uint32_t)len;

    if (snap->set.replicas <= 1)
        return 0;
    return buf_append(keys, &n, sizeof(n)) < 0 || buf_append(keys, k, len) < 0
               ? -1
               : 0;
}

/* Free <rep>, or keep it in the cache of <rw> (the worker freeing it; NULL
 * off the workers). */
static void
rep_free(struct rrep *rep, struct rworker *rw)
{
    if (rep->w != NULL)
        worker_timer_del(rep->w, &rep->timer);
    for (unsigned i = 0; i < rep->n; i++)
        server_unref(rep->m[i]);
    for (unsigned i = 0; i < REPLICAS_MAX; i++)
        buf_reset(&rep->reply[i], CACHE_BUF_MAX);
    pool_unref(rep->pool);
    if (rep->reqcap > CACHE_BUF_MAX || rep->keyscap > CACHE_BUF_MAX ||
        !cache_put(rw, CACHE_REP, rep)) {
        free(rep->req);
        free(rep->keys);
        for (unsigned i = 0; i < REPLICAS_MAX; i++)
            buf_free(&rep->reply[i]);
        free(rep);
    }
}

/* At least <need> bytes at *<p> (*<cap> of them now). 0 or -1. */
static int
room(char **p, size_t *cap, size_t need)
{
    char *n;

    if (*cap >= need)
        return 0;
    if ((n = realloc(*p, need)) == NULL)
        return -1;
    *p = n;
    *cap = need;
    return 0;
}

/* A request with room for <len> bytes and <keyslen> of keys, from <rw>'s
 * cache; NULL when out of memory. */
static struct rrep *
rep_get(struct rworker *rw, size_t len, size_t keyslen)
{
    struct rrep *rep = cache_get(rw, CACHE_REP);

    if (rep != NULL)
        memset(rep, 0, offsetof(struct rrep, m));
    else if ((rep = calloc(1, sizeof(*rep))) == NULL)
        return NULL;
    if (room(&rep->req, &rep->reqcap, len + 1) < 0 ||
        room(&rep->keys, &rep->keyscap, keyslen + 1) < 0)
        goto fail;
    return rep;
fail:
    free(rep->req);
    free(rep->keys);
    for (unsigned i = 0; i < REPLICAS_MAX; i++)
        buf_free(&rep->reply[i]);
    free(rep);
    return NULL;
}

/* A fragment whose answer will never come (its worker, and every other,
 * exited): its request, an orphan by now, goes with its last one. */
void
request_orphan_drop(struct rfrag *f)
{
    struct rreq *r = f->req;

    INVARIANT(r->pending > 0);
    if (--r->pending == 0 && r->client == NULL)
        request_req_free(r);
}

static void
reply_run(struct worker *w, struct worker_msg *m)
{
    struct rreply *rr = WORKER_OF(m, struct rreply, msg);
    struct rfrag *f = rr->f;

    f->error = rr->error;
    if (request_frag_data(f, rr->data, rr->len) < 0 && f->req->client != NULL)
        f->req->client->closing = true; /* out of memory: close, in order */
    request_frag_done(f);
    if (rr->cap != REPLY_INLINE || !cache_put(w->requests, CACHE_REPLY, rr))
        free(rr);
}

static void
reply_drop(struct worker_msg *m)
{
    struct rreply *rr = WORKER_OF(m, struct rreply, msg);

    request_orphan_drop(rr->f);
    free(rr);
}

/* Give the client's fragment its answer: <len> bytes at <data>. */
static void
rep_deliver(struct rrep *rep, const char *data, size_t len, bool error)
{
    struct rfrag *f = rep->f;
    struct rreply *rr;

    rep->f = NULL;
    rep->answered = true;
    if (rep->origin == rep->w) {
        f->error = error;
        if (request_frag_data(f, data, len) < 0 && f->req->client != NULL)
            f->req->client->closing = true;
        request_frag_done(f);
        return;
    }
    rr = len <= REPLY_INLINE ? cache_get(rep->w->requests, CACHE_REPLY) : NULL;
    if (rr == NULL)
        rr = malloc(sizeof(*rr) + (len <= REPLY_INLINE ? REPLY_INLINE : len));
    if (rr == NULL) {
        /* No memory for the answer: the fragment must still end, and an
         * error reply is what is left (a static one, no allocation). */
        static const char oom_redis[] = "-ERR out of memory\r\n";
        static const char oom_mc[] = "SERVER_ERROR out of memory\r\n";
        bool mc = rep->mode->proto->mode == CONF_MODE_MEMCACHE;

        len = mc ? sizeof(oom_mc) - 1 : sizeof(oom_redis) - 1;
        rr = malloc(sizeof(*rr) + REPLY_INLINE);
        if (rr == NULL) {
            log_error("replication: out of memory: a client's reply is "
                      "lost");
            return;
        }
        data = mc ? oom_mc : oom_redis;
        error = true;
    }
    rr->msg.run = reply_run;
    rr->msg.drop = reply_drop;
    rr->f = f;
    rr->error = error;
    rr->len = len;
    rr->cap = len <= REPLY_INLINE ? REPLY_INLINE : len;
    memcpy(rr->data, data, len);
    if (worker_post(rep->origin->id, &rr->msg) < 0)
        reply_drop(&rr->msg);
}

/* Answer with member <i>'s reply, or, <i> < 0, with the error <msg> (the
 * protocol's words around it). */
static void
rep_answer(struct rrep *rep, int i, const char *msg)
{
    rep->chosen = i;
    if (i >= 0) {
        rep_deliver(rep, rep->reply[i].data + rep->reply[i].off,
                    buf_size(&rep->reply[i]), rep->st[i] == REP_ERROR);
    } else {
        char buf[512], text[400];
        const struct proto *pr = rep->mode->proto;
        size_t n;

        snprintf(text, sizeof(text), "%s%s",
                 pr->mode == CONF_MODE_MEMCACHE ? "SERVER_ERROR " : "", msg);
        n = pr->error_reply(buf, sizeof(buf), PROTO_ERR_REQUEST, text);
        rep->quorum_failed = true;
        rep_deliver(rep, buf, n, true);
    }
}

/* Whether members <a> and <b> gave the same reply. */
static bool
rep_same(const struct rrep *rep, unsigned a, unsigned b)
{
    return rep->st[a] == rep->st[b] &&
           buf_size(&rep->reply[a]) == buf_size(&rep->reply[b]) &&
           memcmp(rep->reply[a].data + rep->reply[a].off,
                  rep->reply[b].data + rep->reply[b].off,
                  buf_size(&rep->reply[a])) == 0;
}

static bool
rep_answered(const struct rrep *rep, unsigned i)
{
    return rep->st[i] == REP_OK || rep->st[i] == REP_ERROR;
}

/* The reply given by most current members (REP_OK only, or errors too
 * when <errors>): the first of them in preference order, and its count
 * in *<count>; -1 when none. */
static int
rep_best(const struct rrep *rep, bool errors, unsigned *count)
{
    int best = -1;

    *count = 0;
    for (unsigned i = 0; i < rep->n; i++) {
        unsigned k = 1;
        bool counted = false;

        if (!rep->cur[i] ||
            !(rep->st[i] == REP_OK || (errors && rep->st[i] == REP_ERROR)))
            continue;
        /* each reply once: one equal to an earlier one was counted there */
        for (unsigned j = 0; j < i && !counted; j++)
            counted = rep->cur[j] && rep_same(rep, j, i);
        if (counted)
            continue;
        for (unsigned j = i + 1; j < rep->n; j++)
            k += rep->cur[j] && rep_same(rep, i, j);
        if (k > *count) {
            *count = k;
            best = (int)i;
        }
    }
    return best;
}

/* Member <i> is behind on the fragment's keys: noted before anything
 * else may read it (replica_note). */
static void
rep_note(struct rrep *rep, unsigned i)
{
    rep->judged[i] = true;
    rep->cur[i] = false;
    replica_note(rep->m[i], rep->keys, rep->keyslen, rep->log_cap);
}

/*
 * Member <i> answered and the decision is known: note it behind when its
 * reply says it did not take what the others took (a write: an error
 * where the answer is a success, a success where the answer is an error;
 * an error where another member succeeded and the write failed), or
 * when, a current member, it answered apart from the answer (a
 * divergence: it cannot happen while the members take one order, unless
 * something else writes to them, or chashd restarted with writes on
 * their way). A write that failed because the current members answered
 * apart leaves them all behind: a repair decides between them.
 */
static void
rep_judge(struct rrep *rep, unsigned i)
{
    int d = rep->chosen;
    bool behind = false, write = rep->policy == REP_WRITE;

    if (rep->judged[i] || !rep->answered || !rep_answered(rep, i) ||
        rep->policy == REP_READ_ONE)
        return;
    rep->judged[i] = true;
    if (d >= 0) {
        if (rep_same(rep, (unsigned)d, i))
            return;
        if (rep->st[i] != rep->st[(unsigned)d]) {
            behind = write;
        } else if (rep->cur[i]) {
            behind = true;
            rep->differ = true;
        }
    } else if (rep->differ) {
        behind = rep->cur[i];
    } else if (write && rep->st[i] == REP_ERROR) {
        for (unsigned j = 0; j < rep->n && !behind; j++)
            behind = rep->st[j] == REP_OK;
    }
    if (behind)
        rep_note(rep, i);
}

static void rep_send(struct rrep *rep, unsigned i);

/* Whether member <i>'s connection from this home has not answered for a
 * while with requests waiting (a member hung, or far behind): a read
 * asks it last. */
static bool
rep_stalled(const struct rrep *rep, unsigned i, uint64_t after_ms)
{
    const struct rserver *s =
        request_conn_of(rep->w, rep->m[i], rep->mode, rep->hash);
    uint64_t since;

    if (s == NULL || s->head == NULL)
        return false;
    since = s->head->req->start_ms > s->heard_ms ? s->head->req->start_ms
                                                 : s->heard_ms;
    return rep->w->now_ms >= since + after_ms;
}

/* A read's next member to ask: the first current one not asked yet;
 * false when none is left. */
static bool
rep_next(struct rrep *rep)
{
    while (rep->next < rep->n) {
        unsigned i = rep->next++;

        if (!server_usable(rep->m[i]) || !rep->cur[i]) {
            rep->st[i] = REP_SKIPPED;
            continue;
        }
        rep_send(rep, i);
        return true;
    }
    return false;
}

/* Arm the timer for what comes next: the hedge of a read, the deadline. */
static void
rep_arm(struct rrep *rep)
{
    uint64_t at = rep->deadline_ms;

    if (rep->hedge_ms > 0 && (at == 0 || rep->hedge_ms < at))
        at = rep->hedge_ms;
    if (rep->answered || at == 0)
        worker_timer_del(rep->w, &rep->timer);
    else
        worker_timer_set(rep->w, &rep->timer, at);
}

/* Decide, if the replies so far allow it. */
static void
rep_decide(struct rrep *rep)
{
    unsigned ok = 0, pending = 0, answered = 0, count, cok, n = rep->n;
    char msg[256];
    int best, bok;

    if (rep->answered || rep->sending)
        return;
    for (unsigned i = 0; i < n; i++) {
        if (!rep->cur[i])
            continue;
        ok += rep->st[i] == REP_OK;
        pending += rep->st[i] == REP_PENDING && !rep->expired;
        answered += rep_answered(rep, i);
    }
    if (rep->policy == REP_READ_ONE) {
        for (unsigned i = 0; i < n; i++)
            if (rep->cur[i] && rep_answered(rep, i)) {
                rep_answer(rep, (int)i, NULL);
                return;
            }
        if (pending > 0 || (!rep->expired && rep_next(rep)))
            return;
        atomic_fetch_add(&rep->pool->rstats.read_failures, 1);
        rep_answer(rep, -1,
                   rep->expired ? "replication: no member of the key's "
                                  "replica set answered in time"
                                : "replication: no member of the key's "
                                  "replica set could answer");
        return;
    }
    best = rep_best(rep, true, &count);
    if (best < 0 || rep->st[best] == REP_OK) {
        /* the reply most gave is a success: it is also the success most
         * gave (an error never equals a success) */
        bok = best;
        cok = count;
    } else {
        bok = rep_best(rep, false, &cok);
    }
    if (rep->policy == REP_WRITE) {
        if (bok >= 0 && cok >= rep->need) {
            rep_answer(rep, bok, NULL); /* its acknowledgement */
            goto judge;
        }
        if (ok == 0 && best >= 0 && count >= rep->need) {
            /* an error every current member gave (WRONGTYPE): the
             * command's own reply */
            rep_answer(rep, best, NULL);
            goto judge;
        }
        if (pending > 0)
            return; /* still possible; or, when not, the error counts the
                       acknowledgements of every member that answers */
    } else {
        if (best >= 0 && count >= rep->need) {
            rep_answer(rep, best, NULL);
            goto judge;
        }
        if (pending > 0 && count + pending >= rep->need)
            return;
        /* one failed, or they answered apart: one more member, if any
         * (its answer may make the quorum) */
        if (!rep->expired && rep_next(rep))
            return;
        if (pending > 0)
            return;
    }
    rep->differ = answered > count;
    if (rep->policy == REP_WRITE) {
        atomic_fetch_add(&rep->pool->rstats.write_failures, 1);
        if (rep->differ)
            snprintf(msg, sizeof(msg),
                     "replication: the members' replies differ (%u answered, "
                     "at most %u equal; need %u): the write may have been "
                     "applied",
                     answered, count, rep->need);
        else
            snprintf(msg, sizeof(msg),
                     "replication: %u of %u members acknowledged (need %u): "
                     "the write may have been applied",
                     ok, n, rep->need);
    } else {
        atomic_fetch_add(&rep->pool->rstats.read_failures, 1);
        if (answered < rep->need || !rep->differ)
            snprintf(msg, sizeof(msg),
                     "replication: %u of %u members answered (need %u)",
                     answered, n, rep->need);
        else
            snprintf(msg, sizeof(msg),
                     "replication: the members disagree on the key (%u "
                     "replies, at most %u equal; need %u)",
                     answered, count, rep->need);
    }
    rep_answer(rep, -1, msg);
judge:
    for (unsigned i = 0; i < n; i++)
        rep_judge(rep, i);
}

/* Every copy is in: count, free. */
static void
rep_finish(struct rrep *rep)
{
    bool missed = false;

    for (unsigned i = 0; i < rep->n; i++)
        missed |= rep->st[i] == REP_FAILED ||
                  (rep->judged[i] && !rep->cur[i] && rep_answered(rep, i));
    if (rep->differ)
        atomic_fetch_add(&rep->pool->rstats.divergences, 1);
    if (rep->policy == REP_WRITE && missed && !rep->quorum_failed)
        atomic_fetch_add(&rep->pool->rstats.partial_writes, 1);
    rep_free(rep, rep->w->requests);
}

static void
rep_timer(struct worker *w, struct timer *t)
{
    struct rrep *rep = WORKER_OF(t, struct rrep, timer);

    (void)w;
    if (rep->answered)
        return;
    rep->out++; /* (a decision may finish it) */
    if (rep->hedge_ms > 0 && rep->w->now_ms >= rep->hedge_ms) {
        /* a read its member has not answered: the next one too */
        rep->hedge_ms = 0;
        rep_next(rep);
    }
    if (rep->deadline_ms > 0 && rep->w->now_ms >= rep->deadline_ms)
        rep->expired = true;
    rep_decide(rep);
    rep_arm(rep);
    if (--rep->out == 0 && rep->answered)
        rep_finish(rep);
}

/* A copy is answered (or failed): take its reply, decide, and finish
 * once every copy is in. Frees <copy>. */
static void
rep_report(struct rreq *copy)
{
    struct rrep *rep = copy->rep;
    unsigned i = copy->rep_idx;
    struct rfrag *f = &copy->one;
    struct buf t;

    rep->st[i] = f->failed ? REP_FAILED : f->error ? REP_ERROR : REP_OK;
    t = rep->reply[i];
    rep->reply[i] = copy->reply;
    copy->reply = t;
    copy->rep = NULL;
    copy_put(rep->w->requests, copy);
    /* (its count on rep->out is held through the decision, which may
     * send, and see a send fail at once) */
    if (rep->st[i] == REP_FAILED) {
        /* no reply: whatever it was sent may or may not have run */
        if (rep->policy == REP_WRITE)
            rep_note(rep, i);
        else
            rep->cur[i] = false; /* (for this read: ask another) */
    } else if (rep->cur[i] &&
               !replica_keys_current(rep->m[i], rep->keys, rep->keyslen)) {
        /* behind since it was asked (a restart seen, a miss noted) */
        rep->cur[i] = false;
    }
    rep_decide(rep);
    if (rep->answered)
        rep_judge(rep, i);
    rep_arm(rep);
    if (--rep->out == 0 && rep->answered)
        rep_finish(rep);
}

/* Send member <i> its copy. */
static void
rep_send(struct rrep *rep, unsigned i)
{
    struct rreq *copy = copy_get(rep->w->requests);
    struct rserver *s;

    rep->st[i] = REP_PENDING;
    rep->out++;
    if (copy == NULL) {
        rep->st[i] = REP_FAILED;
        rep->out--;
        if (rep->policy == REP_WRITE)
            rep_note(rep, i);
        return;
    }
    copy->mode = rep->mode;
    copy->command = rep->command;
    copy->flags = rep->flags;
    copy->start_us = clock_us();
    copy->start_ms = rep->w->now_ms;
    copy->rep = rep;
    copy->rep_idx = i;
    s = request_send_on(rep->w, rep->pool, rep->mode, &copy->one, rep->m[i],
                        rep->hash);
    if (s != NULL)
        request_conn_queue(s, &copy->one, rep->req, rep->reqlen, NULL);
    /* (a copy that failed at once has reported already) */
}

/* Whether reads of the key of ring hash <hash> spread over its replica
 * set (hot_keys: spread; hot.c names them). */
static bool
spread_key(const struct pool *p, uint64_t hash)
{
    for (unsigned i = 0; i < POOL_HOT_SPREAD; i++) {
        uint64_t h =
            atomic_load_explicit(&p->hot_spread[i], memory_order_relaxed);
        if (h == 0)
            return false;
        if (h == hash)
            return true;
    }
    return false;
}

/* The delay after which a read also asks the next member. */
static uint64_t
hedge_delay(const struct pool_settings *set)
{
    uint64_t d;

    if (set->timeout_ms == 0)
        return HEDGE_NO_TIMEOUT_MS;
    d = set->timeout_ms / HEDGE_DIV;
    return d < HEDGE_MIN_MS   ? HEDGE_MIN_MS
           : d > HEDGE_MAX_MS ? HEDGE_MAX_MS
                              : d;
}

/* The members of the key's set, in the order a read asks them: rotated
 * (read_policy any, a hot key), and those whose connection stalls last. */
static void
rep_order(struct rrep *rep, uint64_t stall_ms)
{
    struct server *m[REPLICAS_MAX];
    bool cur[REPLICAS_MAX];
    unsigned k = 0, n = rep->n, at;

    at = rep->rotate ? rep->rot % n : 0;
    for (int pass = 0; pass < 2; pass++)
        for (unsigned j = 0; j < n; j++) {
            unsigned i = (j + at) % n;
            bool stalled = rep_stalled(rep, i, stall_ms);

            if (stalled != (pass == 1))
                continue;
            m[k] = rep->m[i];
            cur[k++] = rep->cur[i];
        }
    memcpy(rep->m, m, n * sizeof(*m));
    memcpy(rep->cur, cur, n * sizeof(*cur));
}

/* Run <rep> on its home <rep->w>: its key's set in the home's snapshot,
 * its copies sent. */
static void
rep_run(struct rrep *rep)
{
    struct pool_snapshot *snap = pool_snapshot(rep->pool);
    const struct pool_settings *set = &snap->set;
    size_t idx[REPLICAS_MAX];
    unsigned n = 0;
    bool filling = snap->fill != NULL && !snap->fill_same;
    uint64_t hedge = hedge_delay(set);

    rep->timer.on_expire = rep_timer;
    rep->chosen = -1;
    if (snap->ring != NULL && set->proto == rep->mode->proto)
        n = (unsigned)pool_replica_set(snap, rep->hash, idx);
    if (n == 0) {
        rep_answer(rep, -1, "no member available: no member owns any key");
        rep_free(rep, rep->w->requests);
        return;
    }
    rep->n = n;
    rep->log_cap = set->repair_log;
    for (unsigned i = 0; i < n; i++) {
        rep->st[i] = REP_NOT_SENT;
        rep->judged[i] = false;
        rep->reply[i].off = rep->reply[i].len = 0;
        rep->m[i] = snap->servers[idx[i]];
        server_ref(rep->m[i]);
        /* current: holds the current placement's copy (not being filled)
         * and is behind on none of the keys */
        rep->cur[i] =
            (!filling || replica_current(snap->fill, rep->hash, rep->m[i])) &&
            replica_keys_current(rep->m[i], rep->keys, rep->keyslen);
    }
    if (set->timeout_ms > 0)
        rep->deadline_ms = rep->w->now_ms + set->timeout_ms;
    if (rep->flags & PROTO_REQ_WRITE) {
        rep->policy = REP_WRITE;
        rep->need = set->write_quorum < n ? set->write_quorum : n;
    } else if (rep->rep_one || set->read_policy != CONF_READ_QUORUM) {
        rep->policy = REP_READ_ONE;
        rep->need = 1;
        rep_order(rep, hedge);
        rep->hedge_ms = n > 1 ? rep->w->now_ms + hedge : 0;
    } else {
        /* read_quorum of the current members, the next one asked only
         * when one fails, answers apart or is slow: the current members
         * hold equal copies, a third copy read would say the same */
        rep->policy = REP_READ_QUORUM;
        rep->need = set->read_quorum < n ? set->read_quorum : n;
        rep_order(rep, hedge);
        rep->hedge_ms = n > rep->need ? rep->w->now_ms + hedge : 0;
    }
    /* the copies hold references: the last one frees <rep> */
    rep->out++;
    rep->sending = true;
    if (rep->policy == REP_READ_ONE) {
        rep_next(rep);
    } else if (rep->policy == REP_READ_QUORUM) {
        for (unsigned k = 0; k < rep->need && rep_next(rep); k++)
            ;
    } else {
        for (unsigned i = 0; i < n; i++) {
            if (!server_usable(rep->m[i])) {
                rep->st[i] = REP_FAILED; /* down: it misses the write */
                if (rep->policy == REP_WRITE)
                    rep_note(rep, i);
                continue;
            }
            rep_send(rep, i);
        }
    }
    rep->sending = false;
    rep_decide(rep);
    rep_arm(rep);
    if (--rep->out == 0 && rep->answered)
        rep_finish(rep);
}

static bool verify_first(struct rworker *rw, struct rrep *rep);

/* <rep> reached its home <w>: it runs, or waits behind a repair of its
 * key (or the first comparison of its key since chashd started). */
static void
rep_arrive(struct worker *w, struct rrep *rep)
{
    struct rworker *rw = request_rworker(w);
    struct rhold *h;

    rep->w = w;
    if (rw == NULL) {
        rep_answer(rep, -1, "out of memory");
        rep_free(rep, NULL);
        return;
    }
    if (request_pause_hold(rw, rep->pool, &rep->held, false))
        return; /* behind an ordered fan-out of its pool */
    if (verify_first(rw, rep))
        return; /* behind its key's comparison */
    if ((h = request_hold_find(rw, rep->pool, rep->hash)) != NULL) {
        rep->held.job = false;
        request_hold_push(h, &rep->held);
        return;
    }
    rep_run(rep);
}

void
request_rep_arrive_held(struct worker *w, struct rheld *x)
{
    rep_arrive(w, rep_of_held(x));
}

static void
rep_msg_run(struct worker *w, struct worker_msg *m)
{
    rep_arrive(w, WORKER_OF(m, struct rrep, msg));
}

static void
rep_msg_drop(struct worker_msg *m)
{
    struct rrep *rep = WORKER_OF(m, struct rrep, msg);

    request_orphan_drop(rep->f);
    rep_free(rep, NULL);
}

void
request_send_keyed(struct rreq *r, const struct pool_snapshot *snap,
                   struct rfrag *f, struct server *s, uint64_t hash,
                   const char *buf, size_t len, uint64_t stream,
                   const char *keys, size_t keyslen)
{
    const struct pool_settings *set = &snap->set;
    struct worker *origin = r->client->w;
    struct rrep *rep;
    unsigned home;

    if (set->replicas <= 1 || snap->ring == NULL) {
        request_send(r, f, s, hash, buf, len, stream);
        return;
    }
    INVARIANT(stream == 0);
    rep = rep_get(origin->requests, len, keyslen);
    if (rep == NULL) {
        request_frag_fail(f, PROTO_ERR_CLOSED);
        return;
    }
    memcpy(rep->req, buf, len);
    rep->reqlen = len;
    memcpy(rep->keys, keys, keyslen);
    rep->keyslen = keyslen;
    rep->f = f;
    rep->origin = origin;
    rep->pool = r->client->pool;
    pool_ref(rep->pool);
    rep->mode = r->mode;
    rep->command = r->command;
    rep->flags = r->flags;
    rep->rep_one = r->rep_one;
    rep->hash = hash;
    if (!(r->flags & PROTO_REQ_WRITE) && !r->rep_one) {
        /* spread by client (read_policy any), or a hot key's reads
         * request by request (hot_keys: spread): where the set's order
         * starts, decided here (the client's worker counts) */
        bool hot = set->hot_spread && spread_key(rep->pool, hash);

        if (hot) {
            struct rworker *rw = origin->requests;

            rep->rotate = true;
            rep->rot = (unsigned)rw->spread++;
        } else if (set->read_policy == CONF_READ_ANY) {
            rep->rotate = true;
            rep->rot = (unsigned)r->client->id;
        }
    }
    home = request_rep_home(hash);
    if (home == origin->id) {
        rep_arrive(origin, rep);
        return;
    }
    rep->msg.run = rep_msg_run;
    rep->msg.drop = rep_msg_drop;
    if (worker_post(home, &rep->msg) < 0) {
        rep_free(rep, origin->requests);
        request_frag_fail(f, PROTO_ERR_CLOSED);
    }
}

/* ---- the first comparison of each key since chashd started -------------- */

/* Keys a worker remembers having compared, per pool verification: beyond,
 * it forgets them all (they are compared again on their next request). */
#define VERIFIED_MAX (1u << 22)

static uint64_t
verified_key(const struct pool *p, uint64_t hash)
{
    return (hash ^ ((uint64_t)(uintptr_t)p * UINT64_C(0x9E3779B97F4A7C15))) | 1;
}

/* Remember that the key of ring hash <hash> of <p> is compared (or being
 * compared); false when it was already. */
bool
request_verified_put(struct rworker *rw, const struct pool *p, uint64_t hash)
{
    int rc = u64set_put(&rw->verified, verified_key(p, hash), VERIFIED_MAX);

    if (rc < 0)
        u64set_clear(&rw->verified); /* compared again: harmless */
    return rc != 0;
}

/* A comparison this home started for a request: counted, freed. */
static void
verify_done(struct request_repair *r)
{
    struct replica_stats *st = &r->pool->rstats;

    atomic_fetch_add(&st->repairs, r->written);
    if (r->divergent)
        atomic_fetch_add(&st->divergences, 1);
    if (r->result != REPAIR_OK)
        atomic_fetch_add(&st->repair_errors, 1);
    pool_unref(r->pool);
    free(r->key);
    free(r);
}

/*
 * Since chashd started, a key's copies are not known to agree (writes may
 * have been on their way when the last chashd stopped, or replicas was
 * raised): until the repairer compared every key (the pool's
 * <verifying>), the first request of each key on its home waits for the
 * key's comparison, a repair with r->verify. True when <rep> waits
 * behind it (held).
 */
static bool
verify_first(struct rworker *rw, struct rrep *rep)
{
    size_t off = 0;
    struct rhold *h;

    if (!atomic_load_explicit(&rep->pool->rstats.verifying,
                              memory_order_relaxed)) {
        if (rw->verified.n > 0 && rw->nholds == 0)
            /* (a pool verified: what was remembered may go; another
             * still verifying compares its keys again) */
            u64set_clear(&rw->verified);
        return false;
    }
    if (!request_verified_put(rw, rep->pool, rep->hash))
        return false; /* compared, or held behind its comparison */
    while (off + sizeof(uint32_t) <= rep->keyslen) {
        struct request_repair *r = calloc(1, sizeof(*r));
        uint32_t len;

        memcpy(&len, rep->keys + off, sizeof(len));
        off += sizeof(len);
        if (len > rep->keyslen - off || r == NULL ||
            (r->key = malloc(len ? len : 1)) == NULL) {
            free(r);
            break;
        }
        memcpy(r->key, rep->keys + off, len);
        off += len;
        r->klen = len;
        r->hash = rep->hash;
        r->pool = rep->pool;
        pool_ref(r->pool);
        r->verify = true;
        r->done = verify_done;
        request_job_arrive(rep->w, r);
    }
    if ((h = request_hold_find(rw, rep->pool, rep->hash)) == NULL)
        return false;
    rep->held.job = false;
    request_hold_push(h, &rep->held);
    return true;
}

void
request_rep_report(struct rreq *copy)
{
    if (copy->job != NULL)
        request_job_report(copy);
    else if (copy->pause != NULL)
        request_pause_report(copy);
    else
        rep_report(copy);
}

/* ---- connections: reset, identity ---------------------------------------- */

void
request_rep_conn_reset(struct rserver *s, size_t n)
{
    struct pool_snapshot *snap = pool_snapshot(s->m->pool);

    if (snap->set.replicas <= 1 || s->laddr[0] == 0)
        return;
    log_warn("pool %s: member %s: connection %s reset with %zu requests on "
             "it: the member is told to drop it before it is repaired",
             s->m->pool->name, s->m->server->name, s->laddr, n);
    replica_unsettled(s->m->server, s->laddr);
}

int
request_rep_ident_request(const struct pool_snapshot *snap, char *out,
                          size_t cap)
{
    static const char redis[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
    static const char mc[] = "stats\r\n";
    const char *q = snap->set.mode == CONF_MODE_MEMCACHE ? mc : redis;
    size_t n = strlen(q);

    if (n > cap)
        return -1;
    memcpy(out, q, n);
    return (int)n;
}

/* Find "<name> <number>" in a memcached stats reply. */
static long long
stat_of(const char *buf, size_t len, const char *name)
{
    size_t nl = strlen(name);

    for (size_t i = 0; i + 5 + nl < len; i++)
        if ((i == 0 || buf[i - 1] == '\n') &&
            memcmp(buf + i, "STAT ", 5) == 0 &&
            memcmp(buf + i + 5, name, nl) == 0 && buf[i + 5 + nl] == ' ')
            return strtoll(buf + i + 6 + nl, NULL, 10);
    return -1;
}

long
request_rep_ident_reply(struct rserver *s, const char *buf, size_t len)
{
    struct server *srv = s->m->server;
    char id[64] = "";
    long took;

    if (s->m->mode->proto->mode == CONF_MODE_MEMCACHE) {
        /* STAT lines, then END (or ERROR: no stats); anything else is
         * not a memcached (something that echoes, say) */
        const char *end = NULL;
        size_t i = 0;

        while (end == NULL && i < len) {
            const char *nl = memchr(buf + i, '\n', len - i);
            size_t ll;

            if (nl == NULL)
                return len - i > 4096 ? -1 : 0;
            ll = (size_t)(nl + 1 - (buf + i));
            if ((ll == 5 && memcmp(buf + i, "END\r\n", 5) == 0) ||
                (ll == 7 && memcmp(buf + i, "ERROR\r\n", 7) == 0))
                end = buf + i;
            else if (ll < 7 || memcmp(buf + i, "STAT ", 5) != 0)
                return -1;
            i += ll;
        }
        if (end == NULL)
            return 0;
        took = (long)(end - buf) + (end[0] == 'E' && end[1] == 'N' ? 5 : 7);
        if (end[1] == 'N') {
            long long pid = stat_of(buf, (size_t)took, "pid"),
                      now = stat_of(buf, (size_t)took, "time"),
                      up = stat_of(buf, (size_t)took, "uptime");

            /* the start time, to 10 s: a clock step is not a restart */
            if (pid >= 0 && now >= 0 && up >= 0)
                snprintf(id, sizeof(id), "%lld@%lld", pid, (now - up) / 10);
        }
    } else {
        struct proto_reply rp = {0};
        const char *v, *p;
        size_t vlen;
        int st = s->m->mode->proto->parse_reply(buf, len, NULL, &rp);

        if (st == PROTO_AGAIN)
            return 0;
        if (st != PROTO_OK || rp.body > 0)
            return -1;
        took = (long)rp.len;
        if (buf[0] != '$' && buf[0] != '-')
            return -1; /* not what a redis says to INFO (an echo?) */
        if (request_resp_bulk(buf, (size_t)rp.len, &v, &vlen) > 0 &&
            (p = memmem(v, vlen, "run_id:", 7)) != NULL &&
            (size_t)(v + vlen - p) >= 7 + 40)
            snprintf(id, sizeof(id), "%.40s", p + 7);
    }
    if (id[0] == 0) {
        log_warn_limited(10,
                         "pool %s: member %s does not say who it is (%s): a "
                         "restart of it is seen only by the repairer",
                         s->m->pool->name, srv->name,
                         s->m->mode->proto->mode == CONF_MODE_MEMCACHE
                             ? "stats"
                             : "INFO server");
        return took;
    }
    if (replica_identity(srv, id) > 0)
        log_warn("pool %s: member %s restarted (a new %s): it is behind on "
                 "every key until it is compared with the others",
                 s->m->pool->name, srv->name,
                 s->m->mode->proto->mode == CONF_MODE_MEMCACHE ? "pid"
                                                               : "run_id");
    return took;
}

/* Parse a RESP bulk string or nil at <buf> (<len> bytes, one whole
 * reply): 1 with its bytes, 0 for nil, -1 otherwise. */
int
request_resp_bulk(const char *buf, size_t len, const char **out, size_t *outlen)
{
    char *end;
    long long n;

    if (len < 4 || buf[0] != '$')
        return -1;
    n = strtoll(buf + 1, &end, 10);
    if (n < 0)
        return 0;
    if (end + 2 > buf + len || end[0] != '\r' ||
        (size_t)(end + 2 - buf) + (size_t)n + 2 > len)
        return -1;
    *out = end + 2;
    *outlen = (size_t)n;
    return 1;
}

/* ---- worker exit --------------------------------------------------------- */

/* What waited (behind a repair, or a fan-out) when the worker exits: a
 * request is answered with the error, a repair fails. */
void
request_held_fail(struct rheld *x)
{
    if (x->job) {
        request_job_fail_held(x);
    } else {
        struct rrep *rep = rep_of_held(x);

        rep_answer(rep, -1, "chashd is stopping");
        rep_free(rep, NULL);
    }
}

void
request_rep_close(struct rworker *rw)
{
    u64set_clear(&rw->verified);
    cache_free(rw);
    request_repair_close(rw);
    for (size_t b = 0; b < HOLD_BUCKETS; b++) {
        while (rw->holds[b] != NULL) {
            struct rhold *h = rw->holds[b];

            while (h->head != NULL) {
                struct rheld *x = h->head;

                h->head = x->next;
                request_held_fail(x);
            }
            rw->holds[b] = h->next;
            rw->nholds--;
            free(h);
        }
    }
}

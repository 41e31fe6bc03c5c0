/* memcache_mode.c -- the memcache mode's part of the request engine.
 *
 * A request with one key goes whole to its key's member (a base64 key,
 * meta's `b`, by what it decodes to: where the same key sent as text
 * lives). A retrieval of keys on several members is split, one get per
 * member, and the replies merged into one: VALUE blocks in the client's
 * key order, one END. Replies stay matched to requests because every
 * request sent gets exactly one reply: a text request's noreply is taken
 * off on the way (its reply is dropped here), and a quiet meta request
 * (q) is followed by an mn, so its reply is whatever the member says up
 * to MN -- exactly what memcached would have sent the client. version,
 * verbosity, stats, mn and quit are chashd's; flush_all goes to every
 * member only where the pool allows it (allow_fanout_admin).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/memcache_mode.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/stats.h"
#include "conf/conf.h"
#include "model/pool.h"
#include "proto/memcache.h"

/* The memcached protocol level chashd speaks (meta commands: 1.6), then
 * what it is: clients that parse the number read "1.6.0". */
#define VERSION_TEXT "1.6.0 (chashd " CHASH_VERSION_STRING ")"

/* How the replies of a request become the client's reply. */
enum merge_kind {
    MERGE_GET,     /* a split retrieval: VALUE blocks in key order, END */
    MERGE_FLUSH,   /* flush_all: OK when every member said OK */
    MERGE_NOREPLY, /* noreply: nothing */
    MERGE_QUIET    /* q: the member's reply up to its MN, MN left out */
};

struct merge {
    int kind;               /* enum merge_kind */
    size_t nkeys;           /* MERGE_GET: the client's keys */
    uint32_t *frag;         /* [nkeys] the fragment of key i */
    struct proto_span *key; /* [nkeys] key i in <text> */
    char *text;             /* the keys' bytes */
};

/* Kinds of batches (request_send_batch): gets of one kind share a line. */
enum { BATCH_GET = 1, BATCH_GETS };

/* noreply and q need no state: one shared merge each, never freed. */
static struct merge noreply_merge = {.kind = MERGE_NOREPLY};
static struct merge quiet_merge = {.kind = MERGE_QUIET};

static void
answer(struct rreq *r, const char *text)
{
    request_answer(r, text, strlen(text));
}

static const char *
word(const char *buf, const struct proto_request *rq, size_t i, size_t *len)
{
    *len = rq->args[i].len;
    return buf + rq->args[i].off;
}

static bool
word_is(const char *buf, const struct proto_request *rq, size_t i,
        const char *text)
{
    size_t n;
    const char *w = word(buf, rq, i, &n);

    return n == strlen(text) && memcmp(w, text, n) == 0;
}

/* ---- warm-up (migration: warmup) ----------------------------------------- */

/*
 * While a warm-up runs (a member joined or left, migration: warmup), a key
 * whose owner changed may still be only on its old owner. Before a
 * request that reads or changes an existing value runs on the new owner,
 * the key is read on the old one (mg) and, when there, added to the new
 * one (ms mode E: never over a value it has); a delete also deletes on
 * the old owner, so that no later warm-up brings the value back. A plain
 * set needs neither. Best effort: a cache's warm-up never fails a
 * request (doc/migration.md says what it cannot promise).
 */
enum gate_kind { GATE_NONE, GATE_WARM, GATE_DELETE };

static int
gate_kind(const char *buf, const struct proto_request *rq)
{
    switch (rq->command) {
    case MC_SET:
        return GATE_NONE;
    case MC_DELETE:
    case MC_MD:
        return GATE_DELETE;
    case MC_MS:
        /* ms sets, unless its M flag says add, append, prepend, replace */
        for (size_t i = 3; i < rq->nargs; i++) {
            size_t n;
            const char *w = word(buf, rq, i, &n);

            if (n >= 2 && w[0] == 'M' && w[1] != 'S' && w[1] != 's')
                return GATE_WARM;
        }
        return GATE_NONE;
    case MC_ME:
        return GATE_NONE;
    default:
        return GATE_WARM;
    }
}

/* <key> base64-encoded into <b> (a meta command's key, with flag b: any
 * bytes a text key or a decoded one may hold). */
static int
b64_append(struct buf *b, const char *key, size_t len)
{
    char enc[(MC_KEY_MAX + 2) / 3 * 4];

    if (len > MC_KEY_MAX)
        return -1;
    return buf_append(b, enc, mc_base64_encode(key, len, enc));
}

static int
mc_gate_build(const struct pool_snapshot *snap, const struct server *to,
              const char *key, size_t len, int command, bool again,
              struct buf *out, int *sent)
{
    (void)snap;
    (void)to;
    (void)again;
    (void)command;
    *sent = MC_MG;
    if (buf_append(out, "mg ", 3) < 0 || b64_append(out, key, len) < 0 ||
        buf_printf(out, " b v f t\r\n") < 0)
        return -1;
    return 0;
}

/* The number after flag letter <f> in the meta reply line <line> (<n>
 * bytes): 0, or -1 when absent. */
static int
meta_flag(const char *line, size_t n, char f, long long *v)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (line[i] == ' ' && line[i + 1] == f) {
            char tmp[24];
            size_t k = 0;

            for (i += 2; i < n && k + 1 < sizeof(tmp) &&
                         (line[i] == '-' || (line[i] >= '0' && line[i] <= '9'));
                 i++)
                tmp[k++] = line[i];
            tmp[k] = '\0';
            if (k == 0)
                return -1;
            *v = strtoll(tmp, NULL, 10);
            return 0;
        }
    }
    return -1;
}

/*
 * The steps: 0, mg on the old member: a miss ends it; a hit: 1, ms (add)
 * of what it read on the new member. For a delete: 2, md on the old
 * member -- the copy is deleted there, and the client's delete finds it
 * on the new member (DELETED, as memcached would say).
 */
static int
mc_gate_result(int step, int command, const char *buf, size_t len,
               const char *key, size_t klen, struct buf *next, int *sent)
{
    const char *nl = memchr(buf, '\n', len);
    size_t line = nl != NULL ? (size_t)(nl - buf) + 1 : len;
    long long vlen, flags = 0, ttl = -1;
    bool del = command == MC_DELETE || command == MC_MD;

    if (step == 2) /* md on the old member: done (not a warmed key) */
        return GATE_ABSENT;
    if (step == 1) {
        bool stored = len >= 2 && memcmp(buf, "HD", 2) == 0;

        if (!del) /* the add on the new member: HD stored, NS it had one */
            return stored ? GATE_MOVED : GATE_ABSENT;
        if (buf_append(next, "md ", 3) < 0 || b64_append(next, key, klen) < 0 ||
            buf_append(next, " b\r\n", 4) < 0)
            return GATE_ABSENT;
        *sent = MC_MD;
        return GATE_NEXT_OLD;
    }
    if (len < 3 || memcmp(buf, "VA ", 3) != 0)
        return GATE_ABSENT; /* EN, NF, an error: nothing to warm */
    vlen = strtoll(buf + 3, NULL, 10);
    if (vlen < 0 || line + (size_t)vlen + 2 > len)
        return GATE_ABSENT;
    meta_flag(buf, line - 2, 'f', &flags);
    meta_flag(buf, line - 2, 't', &ttl);
    /* ms <key> <len> b ME F<flags> T<ttl>: add, with what it had */
    if (buf_append(next, "ms ", 3) < 0 || b64_append(next, key, klen) < 0 ||
        buf_printf(next, " %lld b ME F%lld T%lld\r\n", vlen, flags,
                   ttl < 0 ? 0 : ttl) < 0 ||
        buf_append(next, buf + line, (size_t)vlen + 2) < 0)
        return GATE_ABSENT;
    *sent = MC_MS;
    return GATE_NEXT;
}

/* The key of <rq> as the member stores it: a meta request's base64 key
 * (flag b) decoded into <raw>; else its text. */
static const char *
raw_key(const char *buf, const struct proto_request *rq, size_t i,
        unsigned char *raw, size_t *len)
{
    const char *key = buf + rq->keys[i].off;

    *len = rq->keys[i].len;
    if (mc_is_meta(rq->command)) {
        size_t first = rq->command == MC_MS ? 3 : 2;

        for (size_t a = first; a < rq->nargs; a++) {
            long n;

            if (!word_is(buf, rq, a, "b"))
                continue;
            n = mc_base64_decode(key, *len, raw, MC_KEY_MAX);
            if (n > 0) {
                *len = (size_t)n;
                return (const char *)raw;
            }
            break;
        }
    }
    return key;
}

/* While a warm-up runs: gate key <i> of <rq> (going to <to>, ring hash
 * <hash>) on fragment <f> when it moved. 0, or -1 (out of memory). */
static int
warm_key(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
         const struct proto_request *rq, size_t i, struct server *to,
         uint64_t hash, struct rfrag *f)
{
    unsigned char raw[MC_KEY_MAX];
    struct server *from;
    const char *why, *key;
    size_t len;

    if (snap->mig == NULL || gate_kind(buf, rq) == GATE_NONE)
        return 0;
    key = raw_key(buf, rq, i, raw, &len);
    if (request_key_source(snap, key, len, hash, to, &from, &why) <= 0)
        return 0; /* not moving, or its old owner is not up: cold */
    return request_gate(r, snap, f, from, to, key, len);
}

/* ---- one key ------------------------------------------------------------- */

/* The member of <rq>'s key: a meta request's base64 key (flag b) by what
 * it decodes to; one that does not decode by its text (the member then
 * says "CLIENT_ERROR error decoding key", as it would directly). */
static struct server *
member_of(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
          const struct proto_request *rq, uint64_t *hash, const char **why)
{
    unsigned char raw[MC_KEY_MAX];
    size_t len;
    const char *key = raw_key(buf, rq, 0, raw, &len);

    request_hot_note(r, snap, key, len);
    return request_key_member(snap, key, len, hash, why);
}

/*
 * Send <rq> to its key's member. A text noreply is sent without the
 * word (the member answers, and the answer is dropped: memcached stays
 * silent about errors too); a quiet meta request with an mn after it.
 */
static int
one_key(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
        const struct proto_request *rq)
{
    const char *why;
    uint64_t hash = 0;
    struct server *s = member_of(r, snap, buf, rq, &hash, &why);
    struct buf b = {0}, keys = {0};

    if (s == NULL) {
        if (rq->flags & PROTO_REQ_NOREPLY)
            answer(r, "");
        else
            request_error(r, PROTO_ERR_NO_MEMBER, why);
        return 0;
    }
    if (request_frags(r, 1) < 0 ||
        warm_key(r, snap, buf, rq, 0, s, hash, &r->frags[0]) < 0)
        return -1;
    if (request_key_pack(snap, &keys, buf + rq->keys[0].off, rq->keys[0].len) <
        0)
        goto oom;
    if (!(rq->flags & PROTO_REQ_NOREPLY)) {
        request_send_keyed(r, snap, &r->frags[0], s, hash, buf, rq->head, 0,
                           keys.data, keys.len);
        buf_free(&keys);
        return 0;
    }
    if (mc_is_meta(rq->command)) {
        r->mode_data = &quiet_merge;
        if (buf_append(&b, buf, rq->head) < 0 ||
            buf_append(&b, "mn\r\n", 4) < 0)
            goto oom;
    } else {
        /* the line up to its last word (noreply), then any value */
        const struct proto_span *last = &rq->args[rq->nargs - 1];
        const char *nl = memchr(buf, '\n', rq->head);
        size_t line = (size_t)(nl - buf) + 1, cut = last->off;

        r->mode_data = &noreply_merge;
        while (cut > 0 && buf[cut - 1] == ' ')
            cut--;
        if (buf_append(&b, buf, cut) < 0 || buf_append(&b, "\r\n", 2) < 0 ||
            buf_append(&b, buf + line, rq->head - line) < 0)
            goto oom;
    }
    request_send_keyed(r, snap, &r->frags[0], s, hash, b.data + b.off,
                       b.len - b.off, 0, keys.data, keys.len);
    buf_free(&b);
    buf_free(&keys);
    return 0;
oom:
    buf_free(&b);
    buf_free(&keys);
    return -1;
}

/* ---- retrievals ---------------------------------------------------------- */

/* A retrieval whose keys (all of <rq>'s) live on one member (<rt>): the
 * line as it is, or a batch of gets (<batch>; <keys> packs the keys for a
 * replicated one). 0 or -1. */
static int
retrieval_one(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
              const struct proto_request *rq, const struct request_route *rt,
              int batch, struct buf *keys)
{
    size_t nkeys = rq->nkeys;

    if (request_frags(r, 1) < 0)
        return -1;
    for (size_t i = 0; i < nkeys; i++)
        if (warm_key(r, snap, buf, rq, i, rt->owner[0], rt->hash[i],
                     &r->frags[0]) < 0)
            return -1;
    if (batch == 0) { /* gat: its exptime is its own */
        for (size_t i = 0; i < nkeys; i++)
            if (request_key_pack(snap, keys, buf + rq->keys[i].off,
                                 rq->keys[i].len) < 0)
                return -1;
        request_send_keyed(r, snap, &r->frags[0], rt->owner[0], rt->hash[0],
                           buf, rq->head, 0, keys->data, keys->len);
    } else { /* the keys as the line has them, spaces and all */
        request_send_batch(r, &r->frags[0], rt->owner[0], rt->hash[0], batch,
                           rq->command == MC_GETS ? "gets" : "get",
                           buf + rq->keys[0].off,
                           rq->keys[nkeys - 1].off + rq->keys[nkeys - 1].len -
                               rq->keys[0].off);
    }
    return 0;
}

/*
 * get/gets/gat/gats over keys that live on several members: one request
 * per member with its keys in the client's order (gat's exptime before
 * them), merged by MERGE_GET. Keys all on one member: the line as it is.
 */
static int
retrieval(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
          const struct proto_request *rq)
{
    size_t nkeys = rq->nkeys, first, textlen = 0;
    /* (no batching while a warm-up runs: a gated get waits alone) */
    int batch = snap->mig != NULL || snap->set.replicas > 1 ? 0
                : rq->command == MC_GET                     ? BATCH_GET
                : rq->command == MC_GETS                    ? BATCH_GETS
                                                            : 0;
    struct request_route rt;
    struct merge *m;
    struct buf keys = {0};
    int rc = request_route(r, snap, buf, rq->keys, nkeys, &rt);

    if (rc <= 0)
        goto out;
    rc = -1;
    for (size_t i = 0; i < nkeys; i++)
        textlen += rq->keys[i].len;
    if (rt.nmembers == 1) {
        rc = retrieval_one(r, snap, buf, rq, &rt, batch, &keys);
        goto out;
    }
    m = request_mode_data(r, sizeof(*m));
    if (m == NULL || request_frags(r, rt.nmembers) < 0)
        goto out;
    m->kind = MERGE_GET;
    m->nkeys = nkeys;
    m->frag = calloc(nkeys, sizeof(*m->frag));
    m->key = calloc(nkeys, sizeof(*m->key));
    m->text = malloc(textlen ? textlen : 1);
    if (m->frag == NULL || m->key == NULL || m->text == NULL)
        goto out;
    textlen = 0;
    for (size_t i = 0; i < nkeys; i++) {
        memcpy(m->text + textlen, buf + rq->keys[i].off, rq->keys[i].len);
        m->key[i].off = textlen;
        m->key[i].len = rq->keys[i].len;
        textlen += rq->keys[i].len;
    }
    first = rq->command == MC_GAT || rq->command == MC_GATS ? 2 : 1;
    for (size_t f = 0; f < rt.nmembers; f++) {
        struct buf b = {0};
        uint64_t fhash = 0;
        int bad = 0;

        /* the command word, and gat's exptime */
        for (size_t a = 0; a < first; a++) {
            bad |= buf_append(&b, buf + rq->args[a].off, rq->args[a].len);
            bad |= buf_append(&b, " ", 1);
        }
        for (size_t i = 0; i < nkeys; i++) {
            if (rt.group[i] != f)
                continue;
            bad |= request_key_pack(snap, &keys, buf + rq->keys[i].off,
                                    rq->keys[i].len);
            m->frag[i] = (uint32_t)f;
            if (fhash == 0)
                fhash = rt.hash[i];
            if (warm_key(r, snap, buf, rq, i, rt.members[f], rt.hash[i],
                         &r->frags[f]) < 0) {
                buf_free(&b);
                goto out;
            }
            bad |= buf_append(&b, buf + rq->keys[i].off, rq->keys[i].len);
            bad |= buf_append(&b, " ", 1);
        }
        if (bad < 0) {
            buf_free(&b);
            goto out;
        }
        b.len--; /* the last space */
        if (buf_append(&b, "\r\n", 2) < 0) {
            buf_free(&b);
            goto out;
        }
        r->frags[f].member = f;
        if (batch == 0) {
            request_send_keyed(r, snap, &r->frags[f], rt.members[f], fhash,
                               b.data, b.len, 0, keys.data, keys.len);
        } else {
            /* the keys, without the command word and the CRLF */
            size_t word = rq->args[0].len + 1;
            request_send_batch(r, &r->frags[f], rt.members[f], fhash, batch,
                               rq->command == MC_GETS ? "gets" : "get",
                               b.data + word, b.len - word - 2);
        }
        buf_free(&b);
        keys.len = 0;
    }
    rc = 0;
out:
    buf_free(&keys);
    request_route_free(&rt);
    return rc;
}

/* ---- every member -------------------------------------------------------- */

static int
flush_all(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
          const struct proto_request *rq)
{
    bool quiet = rq->flags & PROTO_REQ_NOREPLY;
    size_t n = snap->ring != NULL ? snap->n : 0;
    struct buf b = {0};
    struct merge *m;

    if (!snap->set.allow_fanout_admin) {
        answer(r, quiet ? ""
                        : "SERVER_ERROR flush_all runs on every member: "
                          "refused in this pool (allow_fanout_admin: false)"
                          "\r\n");
        return 0;
    }
    if (n == 0) {
        if (quiet)
            answer(r, "");
        else
            request_error(r, PROTO_ERR_NO_MEMBER, "the pool has no member");
        return 0;
    }
    if (quiet) {
        /* each member answers (noreply taken off); nothing reaches the
         * client */
        const struct proto_span *last = &rq->args[rq->nargs - 1];
        size_t cut = last->off;

        while (cut > 0 && buf[cut - 1] == ' ')
            cut--;
        if (buf_append(&b, buf, cut) < 0 || buf_append(&b, "\r\n", 2) < 0) {
            buf_free(&b);
            return -1;
        }
        buf = b.data;
    }
    m = request_mode_data(r, sizeof(*m));
    if (m == NULL || request_frags(r, n) < 0) {
        buf_free(&b);
        return -1;
    }
    m->kind = MERGE_FLUSH;
    for (size_t i = 0; i < n; i++)
        r->frags[i].member = i;
    /* (with replicas: between the same writes of every key on every
     * member) */
    request_send_every(r, snap, snap->servers, n, buf,
                       quiet ? b.len : rq->head);
    buf_free(&b);
    return 0;
}

/* ---- chashd's own -------------------------------------------------------- */

/* stats: chashd's figures for this pool, in memcached's form. */
static void
stats(struct rreq *r, const struct pool_snapshot *snap)
{
    struct pool *p = r->client->pool;
    struct stats_pool_sum ps;
    struct buf b = {0};
    size_t up = 0;

    stats_pool_sum(p->stats, pool_workers(), &ps);
    for (size_t i = 0; i < snap->n; i++)
        up += server_usable(snap->servers[i]);
    buf_printf(&b,
               "STAT pid %ld\r\nSTAT uptime %.0f\r\nSTAT time %ld\r\n"
               "STAT version %s\r\nSTAT threads %u\r\n"
               "STAT curr_connections %" PRIu64
               "\r\nSTAT total_connections %" PRIu64
               "\r\nSTAT cmd_total %" PRIu64 "\r\nSTAT cmd_forwarded %" PRIu64
               "\r\nSTAT cmd_local %" PRIu64 "\r\nSTAT cmd_refused %" PRIu64
               "\r\nSTAT cmd_errors %" PRIu64 "\r\nSTAT bytes_read %" PRIu64
               "\r\nSTAT bytes_written %" PRIu64
               "\r\nSTAT pool %s\r\nSTAT members %zu\r\n"
               "STAT members_up %zu\r\nEND\r\n",
               (long)getpid(), stats_uptime(), (long)time(NULL), VERSION_TEXT,
               (unsigned)pool_workers(),
               atomic_load_explicit(&p->active, memory_order_relaxed),
               ps.accepted, ps.requests, ps.fragments, ps.local, ps.refused,
               ps.errors, ps.bytes_in, ps.bytes_out, p->name, snap->n, up);
    if (b.data == NULL) {
        request_error(r, PROTO_ERR_REQUEST, "SERVER_ERROR out of memory");
        return;
    }
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

static void
local(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
      const struct proto_request *rq)
{
    switch (rq->command) {
    case MC_MN:
        answer(r, "MN\r\n");
        return;
    case MC_GAT: /* an exptime and no key: nothing found, as memcached */
    case MC_GATS:
        answer(r, "END\r\n");
        return;
    case MC_VERSION:
        answer(r, "VERSION " VERSION_TEXT "\r\n");
        return;
    case MC_VERBOSITY: /* the members' log levels are their own */
        answer(r, rq->flags & PROTO_REQ_NOREPLY ? "" : "OK\r\n");
        return;
    case MC_QUIT:
        r->quit = true;
        answer(r, "");
        return;
    case MC_STATS:
        if (rq->nargs == 1) {
            stats(r, snap);
            return;
        }
        {
            char msg[128];
            size_t n;
            const char *w = word(buf, rq, 1, &n);

            snprintf(msg, sizeof(msg),
                     "SERVER_ERROR stats %.*s is a member's own: chashd "
                     "answers plain stats only\r\n",
                     (int)(n > 40 ? 40 : n), w);
            for (char *c = msg + 13; *c != '\r'; c++)
                if ((unsigned char)*c < ' ' || *c == 127)
                    *c = '?';
            answer(r, msg);
        }
        return;
    default:
        answer(r, "ERROR\r\n");
        return;
    }
}

/* ---- dispatch ------------------------------------------------------------ */

static int
mc_dispatch(struct rclient *c, struct rreq *r, const struct pool_snapshot *snap,
            const char *buf, const struct proto_request *rq)
{
    (void)c;

    r->kind = rq->command;
    if (rq->flags & PROTO_REQ_REFUSED) {
        /* a value too large (memcached's words), a member's command */
        if (rq->flags & PROTO_REQ_NOREPLY)
            answer(r, "");
        else
            request_error(r, PROTO_ERR_REQUEST, rq->err);
        return 0;
    }
    if (rq->flags & PROTO_REQ_LOCAL) {
        local(r, snap, buf, rq);
        return 0;
    }
    if (rq->command == MC_FLUSH_ALL)
        return flush_all(r, snap, buf, rq);
    if (snap->set.replicas > 1 &&
        (rq->command == MC_GETS || rq->command == MC_GATS ||
         rq->command == MC_CAS ||
         (mc_is_meta(rq->command) && rq->command != MC_MN))) {
        /* each member keeps its own cas unique; meta flags ask for
         * what differs by member (cas, time to live) */
        if (rq->flags & PROTO_REQ_NOREPLY)
            answer(r, "");
        else
            request_error(r, PROTO_ERR_REQUEST,
                          "SERVER_ERROR this command is not supported in a "
                          "pool with replicas (cas and meta commands)");
        return 0;
    }
    if (mc_is_retrieval(rq->command))
        return retrieval(r, snap, buf, rq);
    return one_key(r, snap, buf, rq);
}

/* ---- merging ------------------------------------------------------------- */

/* The blocks go straight into the client's reply (empty until now: a
 * merged request's fragments keep their own), not through a copy. */
static void
merge_get(struct rreq *r, struct merge *m)
{
    size_t *at = calloc(r->nfrags, sizeof(*at));
    struct buf *b = &r->reply;
    const char *err = "SERVER_ERROR out of memory";

    if (at == NULL)
        goto fail;
    for (size_t i = 0; i < m->nkeys; i++) {
        const struct rfrag *f = &r->frags[m->frag[i]];
        const char *rep = f->reply.data + f->reply.off;
        size_t len = f->reply.len - f->reply.off, *pos = &at[m->frag[i]];
        struct proto_span k;
        size_t block;
        int st = mc_value_block(rep + *pos, len - *pos, &k, &block);

        if (st < 0) {
            err = "SERVER_ERROR a member answered get with an unexpected "
                  "reply";
            goto fail;
        }
        /* a member answers a get's hits in its order: a block for
         * another key means this one missed */
        if (st == 1 && k.len == m->key[i].len &&
            memcmp(rep + *pos + k.off, m->text + m->key[i].off, k.len) == 0) {
            if (buf_append(b, rep + *pos, block) < 0)
                goto fail;
            *pos += block;
        }
    }
    if (buf_append(b, "END\r\n", 5) < 0)
        goto fail;
    r->done = true;
    free(at);
    return;
fail:
    b->off = b->len = 0;
    request_error(r, PROTO_ERR_REQUEST, err);
    free(at);
}

static void
mc_complete(struct rreq *r)
{
    struct merge *m = r->mode_data;
    const struct rfrag *err = request_first_error(r);
    const struct rfrag *f0 = &r->frags[0];
    const char *rep;
    size_t len;

    if (m == NULL)
        return;
    switch (m->kind) {
    case MERGE_NOREPLY:
        answer(r, "");
        return;
    case MERGE_QUIET:
        /* what the member said, then "MN\r\n" of our mn; a failed
         * connection's error has no MN */
        rep = f0->reply.data + f0->reply.off;
        len = f0->reply.len - f0->reply.off;
        if (!f0->error || (len >= 4 && memcmp(rep + len - 4, "MN\r\n", 4) == 0))
            len = len >= 4 ? len - 4 : 0;
        request_answer(r, rep, len);
        return;
    default:
        break;
    }
    if (r->flags & PROTO_REQ_NOREPLY) {
        answer(r, ""); /* flush_all noreply: silent, errors too */
        return;
    }
    if (err != NULL) {
        /* One failed fragment fails the request: its error, once. */
        request_answer(r, err->reply.data + err->reply.off,
                       err->reply.len - err->reply.off);
        return;
    }
    if (m->kind == MERGE_GET) {
        merge_get(r, m);
        return;
    }
    /* MERGE_FLUSH: every member said OK (an error would be <err>) */
    answer(r, "OK\r\n");
}

static void
mc_release(struct rreq *r)
{
    struct merge *m = r->mode_data;

    r->mode_data = NULL;
    if (m == NULL || m == &noreply_merge || m == &quiet_merge)
        return;
    free(m->frag);
    free(m->key);
    free(m->text);
    free(m);
}

/*
 * A batch's reply: the VALUE blocks of every fragment's keys, in their
 * order on the line (memcached answers a get's hits in the order asked),
 * then END. Each fragment gets the blocks of its own keys, then its END.
 */
static void
mc_unbatch(const char *buf, size_t len, struct rfrag *const *frags, size_t n)
{
    size_t pos = 0;

    for (size_t i = 0; i < n; i++) {
        struct rfrag *f = frags[i];
        const char *k = f->bkeys.data + f->bkeys.off;
        size_t klen = f->bkeys.len - f->bkeys.off, at = 0;

        while (at < klen) {
            struct proto_span key;
            size_t start, block;

            while (at < klen && k[at] == ' ')
                at++;
            start = at;
            while (at < klen && k[at] != ' ')
                at++;
            if (at == start)
                break;
            if (mc_value_block(buf + pos, len - pos, &key, &block) == 1 &&
                key.len == at - start &&
                memcmp(buf + pos + key.off, k + start, key.len) == 0) {
                request_frag_reply(f, buf + pos, block);
                pos += block;
            }
        }
        request_frag_reply(f, "END\r\n", 5);
    }
}

/* memcached needs no handshake. */
static int
mc_handshake(const struct pool_snapshot *snap, char *out, size_t cap,
             unsigned *replies)
{
    (void)snap;
    (void)out;
    (void)cap;
    *replies = 0;
    return 0;
}

const struct request_mode memcache_request_mode = {
    .proto = &proto_memcache,
    .dispatch = mc_dispatch,
    .complete = mc_complete,
    .release = mc_release,
    .handshake = mc_handshake,
    .is_error = mc_reply_is_error,
    .unbatch = mc_unbatch,
    .gate_build = mc_gate_build,
    .gate_result = mc_gate_result,
};

/* redis_mode.c -- the redis mode's part of the request engine: each
 * command class (proto/redis.h) routed by its key, split per member and
 * merged (MGET in the client's key order, DEL/EXISTS summed, MSET one
 * +OK), refused when its keys live on several members (-CROSSSERVER, where
 * twemproxy silently runs it on the first key's member), fanned out to
 * every member (SCAN with the member in its cursor, DBSIZE, RANDOMKEY,
 * INFO's keyspace), or answered by chashd (PING, ECHO, QUIT, SELECT, AUTH,
 * HELLO, COMMAND, CLIENT, TIME). Refusals are error replies: the
 * connection and the pipeline go on (twemproxy closes the connection and
 * loses the replies pipelined before). A MULTI block is refused whole:
 * nothing between MULTI and EXEC or DISCARD runs (transactions, below).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/redis_mode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/invariant.h"
#include "conf/conf.h"
#include "model/migration_view.h"
#include "model/pool.h"
#include "proto/redis.h"

/* How the replies of a request's fragments become the client's reply. */
enum merge_kind {
    MERGE_BY_KEY, /* MGET: one array, values in the client's key order */
    MERGE_SUM,    /* DEL UNLINK TOUCH EXISTS DBSIZE: integers summed */
    MERGE_OK,     /* MSET FLUSHDB FLUSHALL: +OK when every member said so */
    MERGE_CONCAT, /* KEYS: the arrays one after the other */
    MERGE_SCAN,   /* SCAN: the member's cursor folded into ours */
    MERGE_RANDOM, /* RANDOMKEY: the first member with a key */
    MERGE_INFO    /* INFO: chashd's sections, the members' keyspace summed */
};

struct merge {
    int kind;        /* enum merge_kind */
    size_t nkeys;    /* MERGE_BY_KEY: the client's keys */
    uint32_t *frag;  /* [nkeys] the fragment of key i */
    uint32_t *pos;   /* [nkeys] its place in that fragment's reply */
    size_t member;   /* MERGE_SCAN: the member scanned; RANDOM: start */
    size_t nmembers; /* MERGE_SCAN: members in the cursor's order */
    struct buf text; /* MERGE_INFO: chashd's own sections */
    bool keyspace;   /* MERGE_INFO: the keyspace section is wanted */
};

/* What one parse produced, with where its bytes are. */
struct parsed {
    const struct proto_request *rq;
    const char *buf; /* the request's bytes: the client's input, or the
                        scratch holding an inline request re-encoded */
    size_t len;      /* bytes to forward as they are */
};

static const char *
arg(const struct parsed *pr, size_t i, size_t *len)
{
    const struct proto_span *a = &pr->rq->args[i];

    *len = a->len;
    return pr->buf + a->off;
}

/* Whether argument <i> is <word> (any case). */
static bool
arg_is(const struct parsed *pr, size_t i, const char *word)
{
    size_t n;
    const char *a = i < pr->rq->nargs ? arg(pr, i, &n) : NULL;

    return a != NULL && n == strlen(word) && strncasecmp(a, word, n) == 0;
}

/* The decimal number argument <i> is, or -1 for anything else. */
static int
arg_u64(const struct parsed *pr, size_t i, uint64_t *v)
{
    size_t n;
    const char *a = arg(pr, i, &n);
    uint64_t x = 0;

    if (n == 0 || n > 20)
        return -1;
    for (size_t k = 0; k < n; k++) {
        if (a[k] < '0' || a[k] > '9' || x > (UINT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (uint64_t)(a[k] - '0');
    }
    *v = x;
    return 0;
}

static void
answer(struct rreq *r, const char *text)
{
    request_answer(r, text, strlen(text));
}

static void
answer_bulk(struct rreq *r, const char *s, size_t n)
{
    struct buf b = {0};

    if (buf_printf(&b, "$%zu\r\n", n) < 0 || buf_append(&b, s, n) < 0 ||
        buf_append(&b, "\r\n", 2) < 0) {
        buf_free(&b);
        request_error(r, PROTO_ERR_REQUEST, "out of memory");
        return;
    }
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

/* An error reply "-<text>" (a code word first: ERR, NOAUTH, ...). */
static void __attribute__((format(printf, 2, 3)))
answer_error(struct rreq *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    request_error(r, PROTO_ERR_REQUEST, msg);
}

/*
 * The commands this mode tells apart, by the index the parser found
 * (proto_request.command): looked up once in the table by name (at
 * start: redis_mode_init), compared as integers per request.
 */
static struct {
    int ping;
    int echo;
    int quit;
    int select;
    int auth;
    int hello;
    int command;
    int client;
    int time;
    int reset;
    int info;
    int multi;
    int exec;
    int discard;
    int watch;
    int unwatch;
    int spop;
    int mget;
    int scan;
    int dbsize;
    int keys;
    int randomkey;
} ids;

void
redis_mode_init(void)
{
    static const struct {
        const char *name;
        int *id;
    } want[] = {
        {"ping", &ids.ping},       {"echo", &ids.echo},
        {"quit", &ids.quit},       {"select", &ids.select},
        {"auth", &ids.auth},       {"hello", &ids.hello},
        {"command", &ids.command}, {"client", &ids.client},
        {"time", &ids.time},       {"reset", &ids.reset},
        {"info", &ids.info},       {"multi", &ids.multi},
        {"exec", &ids.exec},       {"discard", &ids.discard},
        {"watch", &ids.watch},     {"unwatch", &ids.unwatch},
        {"spop", &ids.spop},       {"mget", &ids.mget},
        {"scan", &ids.scan},       {"dbsize", &ids.dbsize},
        {"keys", &ids.keys},       {"randomkey", &ids.randomkey},
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        *want[i].id = redis_command_find(want[i].name, strlen(want[i].name));
        INVARIANT(*want[i].id >= 0); /* every one is in the table */
    }
}

/* The command's name as the client wrote it, lower-cased, for messages
 * (only: commands are told apart by the parser's index, ids). */
static const char *
command_name(const struct parsed *pr, char *out, size_t cap)
{
    size_t n, k;
    const char *a = pr->rq->nargs > 0 ? arg(pr, 0, &n) : "";

    if (pr->rq->nargs == 0)
        n = 0;
    for (k = 0; k < n && k + 1 < cap; k++) {
        char ch = a[k];
        out[k] = ch >= 'A' && ch <= 'Z'                 ? (char)(ch - 'A' + 'a')
                 : ch >= ' ' && ch <= '~' && ch != '\'' ? ch
                                                        : '?';
    }
    out[k] = '\0';
    return out;
}

/* ---- routing ------------------------------------------------------------- */

/* ---- migration ----------------------------------------------------------- */

static int bulk(struct buf *b, const char *s, size_t n);

/*
 * While a migration runs: whether the keys of <pr> can be served where
 * they go (key i to <owner>[i], or every key to <to> when <owner> is
 * NULL; with both, only the keys whose owner is <to>): 1, or 0 when one
 * cannot (moving from or to a member that is not up: <r> is answered), or
 * -1 (out of memory). With <f>, each moving key is gated on it.
 */
static int
gate_keys(struct rreq *r, const struct pool_snapshot *snap,
          const struct parsed *pr, struct server *const *owner,
          struct server *to, struct rfrag *f)
{
    const struct proto_request *rq = pr->rq;

    if (snap->mig == NULL || snap->ring == NULL)
        return 1;
    for (size_t i = 0; i < rq->nkeys; i++) {
        const char *k = pr->buf + rq->keys[i].off;
        size_t len = rq->keys[i].len, off, n;
        struct server *from;
        const char *why;
        int rc;

        struct server *dest = owner != NULL ? owner[i] : to;

        if (to != NULL && dest != to)
            continue;
        n = chash_key_tag(k, len, snap->set.hash_tag, &off);
        rc = request_key_source(snap, k, len,
                                chash_ring_hash(snap->ring, k + off, n), dest,
                                &from, &why);
        if (rc < 0) {
            request_error(r, PROTO_ERR_NO_MEMBER, why);
            return 0;
        }
        if (rc > 0 && f != NULL &&
            request_gate(r, snap, f, from, dest, k, len) < 0)
            return -1;
    }
    return 1;
}

/* MIGRATE <host> <port> "" <db> <timeout> [REPLACE] [AUTH pw] KEYS <key>:
 * one key at a time, so that its reply says exactly whether it moved. */
static int
redis_gate_build(const struct pool_snapshot *snap, const struct server *to,
                 const char *key, size_t len, int command, bool replace,
                 struct buf *out, int *sent)
{
    char host[64], port[8], db[16], timeout[16];
    const char *pw = snap->set.redis_auth;
    size_t nargs = 8 + (replace ? 1 : 0) + (pw != NULL ? 2 : 0);
    int rc;

    (void)command;
    *sent = -1; /* the reply's parse needs no command in RESP */
    if (migration_host_port(&to->addr, host, sizeof(host), port, sizeof(port)) <
        0)
        return -1;
    snprintf(db, sizeof(db), "%d", snap->set.redis_db);
    snprintf(timeout, sizeof(timeout), "%u", snap->set.migration_timeout_ms);
    rc = buf_printf(out, "*%zu\r\n$7\r\nMIGRATE\r\n", nargs);
    rc = rc < 0 ? rc : bulk(out, host, strlen(host));
    rc = rc < 0 ? rc : bulk(out, port, strlen(port));
    rc = rc < 0 ? rc : bulk(out, "", 0);
    rc = rc < 0 ? rc : bulk(out, db, strlen(db));
    rc = rc < 0 ? rc : bulk(out, timeout, strlen(timeout));
    if (replace)
        rc = rc < 0 ? rc : bulk(out, "REPLACE", 7);
    if (pw != NULL) {
        rc = rc < 0 ? rc : bulk(out, "AUTH", 4);
        rc = rc < 0 ? rc : bulk(out, pw, strlen(pw));
    }
    rc = rc < 0 ? rc : bulk(out, "KEYS", 4);
    rc = rc < 0 ? rc : bulk(out, key, len);
    return rc;
}

static int
redis_gate_result(int step, int command, const char *buf, size_t len,
                  const char *key, size_t klen, struct buf *next, int *sent)
{
    (void)step;
    (void)command;
    (void)key;
    (void)klen;
    (void)next;
    (void)sent;
    return migration_migrate_result(buf, len);
}

/* The keys of <pr>, packed for request_send_keyed into <out>. 0 or -1. */
static int
pack_keys(const struct pool_snapshot *snap, const struct parsed *pr,
          struct buf *out)
{
    const struct proto_request *rq = pr->rq;

    for (size_t i = 0; i < rq->nkeys; i++)
        if (request_key_pack(snap, out, pr->buf + rq->keys[i].off,
                             rq->keys[i].len) < 0)
            return -1;
    return 0;
}

/* Send the whole request (<pr>) to <s> as its one fragment; <snap> is
 * the snapshot <s> was chosen in (one loaded again may be newer). With
 * replicas, to the keys' replica set (<s> its primary). */
static int
send_whole(struct rreq *r, const struct pool_snapshot *snap,
           const struct parsed *pr, struct server *s, uint64_t hash)
{
    const struct redis_command *cmd;
    struct buf keys = {0};
    int rc = gate_keys(r, snap, pr, NULL, s, NULL);

    if (rc <= 0)
        return rc;
    if (request_frags(r, 1) < 0)
        return -1;
    if (pr->rq->nkeys > 0 && gate_keys(r, snap, pr, NULL, s, &r->frags[0]) < 0)
        return -1;
    if (pr->rq->nkeys == 0 || snap->set.replicas <= 1) {
        request_send(r, &r->frags[0], s, hash, pr->buf, pr->len, pr->rq->body);
        return 0;
    }
    if (pack_keys(snap, pr, &keys) < 0)
        return -1;
    cmd = redis_command_at(r->command);
    r->rep_one = cmd != NULL && (cmd->flags & REDIS_VOLATILE);
    request_send_keyed(r, snap, &r->frags[0], s, hash, pr->buf, pr->len,
                       pr->rq->body, keys.data, keys.len);
    buf_free(&keys);
    return 0;
}

/*
 * Keys <first>..<last> by <step> of <pr> (indexes into its keys array)
 * all on one member: that member, else NULL with a -CROSSSERVER reply
 * naming where they live (never run on the first key's member with a
 * silently wrong result).
 */
static struct server *
same_member(struct rreq *r, const struct pool_snapshot *snap,
            const struct parsed *pr, uint64_t *hash)
{
    const struct proto_request *rq = pr->rq;
    struct server *first = NULL;
    const char *why;
    char list[400] = "";
    size_t used = 0;
    bool cross = false;

    for (size_t i = 0; i < rq->nkeys; i++) {
        const char *k = pr->buf + rq->keys[i].off;
        uint64_t h;
        struct server *s =
            request_key_member(snap, k, rq->keys[i].len, &h, &why);

        request_hot_note(r, snap, k, rq->keys[i].len);
        if (s == NULL) {
            request_error(r, PROTO_ERR_NO_MEMBER, why);
            return NULL;
        }
        if (i == 0) {
            first = s;
            *hash = h;
        } else if (s != first || (snap->set.replicas > 1 &&
                                  !request_same_set(snap, *hash, h))) {
            cross = true;
        }
    }
    /* the error names where each key lives: built only when it is sent */
    for (size_t i = 0; cross && i < rq->nkeys && used + 1 < sizeof(list); i++) {
        const char *k = pr->buf + rq->keys[i].off;
        uint64_t h;
        struct server *s =
            request_key_member(snap, k, rq->keys[i].len, &h, &why);

        used += (size_t)snprintf(
            list + used, sizeof(list) - used, "%s%.*s: %s", i ? ", " : "",
            (int)(rq->keys[i].len > 40 ? 40 : rq->keys[i].len), k,
            s != NULL ? s->name : "?");
        if (used >= sizeof(list))
            used = sizeof(list) - 1;
    }
    if (cross && snap->set.replicas > 1) {
        answer_error(r,
                     "CROSSSERVER Keys in request don't share a hash (%s): "
                     "in a pool with replicas the keys of one command must "
                     "have one hash tag, so that one order holds for their "
                     "writes",
                     list);
        return NULL;
    }
    if (cross) {
        answer_error(r,
                     "CROSSSERVER Keys in request don't hash to the same "
                     "member (%s); use a hash tag to keep them together",
                     list);
        return NULL;
    }
    return first;
}

/* ---- split requests ------------------------------------------------------ */

static struct merge *
merge_new(struct rreq *r, int kind)
{
    struct merge *m = request_mode_data(r, sizeof(*m));

    if (m != NULL)
        m->kind = kind;
    return m;
}

/* Append "*<n>\r\n$<len>\r\n<command>\r\n" to <b>: a fragment's header. */
static int
frag_header(struct buf *b, const struct parsed *pr, size_t nargs)
{
    size_t n;
    const char *name = arg(pr, 0, &n);

    return buf_printf(b, "*%zu\r\n$%zu\r\n", nargs, n) < 0 ||
                   buf_append(b, name, n) < 0 || buf_append(b, "\r\n", 2) < 0
               ? -1
               : 0;
}

static int
bulk(struct buf *b, const char *s, size_t n)
{
    return buf_printf(b, "$%zu\r\n", n) < 0 || buf_append(b, s, n) < 0 ||
                   buf_append(b, "\r\n", 2) < 0
               ? -1
               : 0;
}

/*
 * MGET, DEL, UNLINK, TOUCH, EXISTS (<pairs> 1: each key alone) and MSET
 * (<pairs> 2: key value): one fragment per member holding its keys in the
 * client's order; the replies are merged by <kind>. All on one member:
 * the request goes as it is.
 */
static int
split(struct rreq *r, const struct pool_snapshot *snap, const struct parsed *pr,
      int pairs, int kind)
{
    const struct proto_request *rq = pr->rq;
    size_t nkeys = rq->nkeys;
    struct request_route rt;
    struct merge *m = NULL;
    struct buf keys = {0};
    int rc = request_route(r, snap, pr->buf, rq->keys, nkeys, &rt);

    if (rc <= 0)
        goto out;
    rc = -1;
    if (rt.nmembers == 1) {
        rc = send_whole(r, snap, pr, rt.owner[0], rt.hash[0]);
        goto out;
    }
    if ((rc = gate_keys(r, snap, pr, rt.owner, NULL, NULL)) <= 0)
        goto out; /* a moving key nobody may serve now: answered */
    rc = -1;
    m = merge_new(r, kind);
    if (m == NULL || request_frags(r, rt.nmembers) < 0)
        goto out;
    m->nkeys = nkeys;
    m->frag = calloc(nkeys, sizeof(*m->frag));
    m->pos = calloc(nkeys, sizeof(*m->pos));
    if (m->frag == NULL || m->pos == NULL)
        goto out;
    for (size_t f = 0; f < rt.nmembers; f++) {
        struct buf b = {0};
        size_t mine = 0;
        uint64_t fhash = 0;

        for (size_t i = 0; i < nkeys; i++)
            mine += rt.group[i] == f;
        if (frag_header(&b, pr, 1 + mine * (size_t)pairs) < 0) {
            buf_free(&b);
            goto out;
        }
        for (size_t i = 0; i < nkeys; i++) {
            size_t a = 1 + i * (size_t)pairs; /* the key's argument */

            if (rt.group[i] != f)
                continue;
            if (request_key_pack(snap, &keys, pr->buf + rq->keys[i].off,
                                 rq->keys[i].len) < 0) {
                buf_free(&b);
                goto out;
            }
            m->frag[i] = (uint32_t)f;
            m->pos[i] = (uint32_t)r->frags[f].nkeys++;
            if (fhash == 0)
                fhash = rt.hash[i];
            for (int k = 0; k < pairs; k++) {
                size_t n;
                const char *v = arg(pr, a + (size_t)k, &n);
                if (bulk(&b, v, n) < 0) {
                    buf_free(&b);
                    goto out;
                }
            }
        }
        if (gate_keys(r, snap, pr, rt.owner, rt.members[f], &r->frags[f]) < 0) {
            buf_free(&b);
            goto out;
        }
        request_send_keyed(r, snap, &r->frags[f], rt.members[f], fhash, b.data,
                           b.len, 0, keys.data, keys.len);
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

/* Whether <s> is in <snap>'s ring. */
static bool
in_snapshot(const struct pool_snapshot *snap, const struct server *s)
{
    for (size_t i = 0; i < snap->n; i++)
        if (snap->servers[i] == s)
            return true;
    return false;
}

/* The members a request for every member goes to, in order (the SCAN
 * cursor's): the snapshot's; while a migration runs, also the old
 * owners that are no longer in the ring (a member leaving still holds
 * keys until they have moved). */
static size_t
fanout_members(const struct pool_snapshot *snap)
{
    const struct pool_snapshot *old = snap->mig ? snap->mig->old : NULL;
    size_t n = snap->ring != NULL ? snap->n : 0;

    for (size_t i = 0; old != NULL && n > 0 && i < old->n; i++)
        n += !in_snapshot(snap, old->servers[i]);
    return n;
}

/* The <i>th of them. */
static struct server *
fanout_at(const struct pool_snapshot *snap, size_t i)
{
    const struct pool_snapshot *old = snap->mig ? snap->mig->old : NULL;

    if (i < snap->n)
        return snap->servers[i];
    i -= snap->n;
    for (size_t k = 0; old != NULL && k < old->n; k++)
        if (!in_snapshot(snap, old->servers[k]) && i-- == 0)
            return old->servers[k];
    return NULL;
}

/* Send <len> bytes at <buf> to every member, merged by <kind>. */
static int
fanout(struct rreq *r, const struct pool_snapshot *snap, const char *buf,
       size_t len, struct merge *m)
{
    size_t n = fanout_members(snap);
    struct server **members;

    if (n == 0) {
        request_error(r, PROTO_ERR_NO_MEMBER, "the pool has no member");
        return 0;
    }
    if (request_frags(r, n) < 0 ||
        (members = calloc(n, sizeof(*members))) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        members[i] = fanout_at(snap, i);
        r->frags[i].member = i;
    }
    /* (a FLUSHALL with replicas: between the same writes of every key on
     * every member) */
    request_send_every(r, snap, members, n, buf, len);
    free(members);
    (void)m;
    return 0;
}

/*
 * SCAN <cursor> [MATCH p] [COUNT n] [TYPE t] across members: our cursor
 * is <member cursor> * <members> + <member index>, so a full iteration
 * visits every member in turn, each with its own cursor (Redis' SCAN
 * guarantees hold per member while the membership does not change).
 */
static int
scan(struct rreq *r, const struct pool_snapshot *snap, const struct parsed *pr)
{
    size_t n = fanout_members(snap), idx;
    uint64_t cursor, mine;
    struct merge *m;
    struct buf b = {0};
    char num[24];

    if (n == 0) {
        request_error(r, PROTO_ERR_NO_MEMBER, "the pool has no member");
        return 0;
    }
    if (arg_u64(pr, 1, &cursor) < 0) {
        answer_error(r, "ERR invalid cursor");
        return 0;
    }
    idx = (size_t)(cursor % n);
    mine = cursor / n;
    m = merge_new(r, MERGE_SCAN);
    if (m == NULL || request_frags(r, 1) < 0)
        return -1;
    m->member = idx;
    m->nmembers = n;
    snprintf(num, sizeof(num), "%" PRIu64, mine);
    if (frag_header(&b, pr, pr->rq->nargs) < 0 ||
        bulk(&b, num, strlen(num)) < 0)
        goto fail;
    for (size_t i = 2; i < pr->rq->nargs; i++) {
        size_t len;
        const char *a = arg(pr, i, &len);
        if (bulk(&b, a, len) < 0)
            goto fail;
    }
    request_send(r, &r->frags[0], fanout_at(snap, idx),
                 fanout_at(snap, idx)->id, b.data, b.len, 0);
    buf_free(&b);
    return 0;
fail:
    buf_free(&b);
    return -1;
}

/* ---- answered by chashd -------------------------------------------------- */

static void
answer_hello(struct rreq *r, const struct pool_snapshot *snap)
{
    struct buf b = {0};

    buf_printf(&b,
               "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n"
               "$6\r\n7.0.15\r\n$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:%" PRIu64
               "\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n"
               "$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
               r->client->id);
    (void)snap;
    if (b.data == NULL) {
        request_error(r, PROTO_ERR_REQUEST, "out of memory");
        return;
    }
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

/* AUTH [user] password (and HELLO's AUTH): 0 accepted, -1 answered. */
static int
check_auth(struct rreq *r, const struct pool_snapshot *snap,
           const struct parsed *pr, size_t user, size_t pass)
{
    size_t n, un;
    const char *pw = arg(pr, pass, &n);
    const char *want = snap->set.redis_auth;

    if (want == NULL) {
        /* twemproxy's text */
        answer_error(r, "ERR Client sent AUTH, but no password is set");
        return -1;
    }
    if (user != pass) {
        const char *u = arg(pr, user, &un);
        if (un != 7 || strncmp(u, "default", 7) != 0) {
            answer_error(r, "WRONGPASS invalid username-password pair or "
                            "user is disabled.");
            return -1;
        }
    }
    if (n != strlen(want) || memcmp(pw, want, n) != 0) {
        r->client->authed = false;
        answer_error(r, "ERR invalid password");
        return -1;
    }
    r->client->authed = true;
    return 0;
}

static void
answer_command(struct rreq *r, const struct parsed *pr)
{
    struct buf b = {0};
    size_t total = redis_command_count();

    if (pr->rq->nargs >= 2 && arg_is(pr, 1, "count")) {
        buf_printf(&b, ":%zu\r\n", total);
    } else if (pr->rq->nargs >= 2 && arg_is(pr, 1, "docs")) {
        buf_printf(&b, "*0\r\n");
    } else if (pr->rq->nargs >= 2 && arg_is(pr, 1, "list")) {
        buf_printf(&b, "*%zu\r\n", total);
        for (size_t i = 0; i < total; i++) {
            const char *name = redis_command_at((int)i)->name;
            bulk(&b, name, strlen(name));
        }
    } else if (pr->rq->nargs == 1 ||
               (pr->rq->nargs >= 2 && arg_is(pr, 1, "info"))) {
        /* COMMAND, COMMAND INFO [name ...]: name, arity, flags, first key,
         * last key, step (the six fields every client reads). */
        size_t want = pr->rq->nargs <= 2 ? total : pr->rq->nargs - 2;

        buf_printf(&b, "*%zu\r\n", want);
        for (size_t i = 0; i < want; i++) {
            const struct redis_command *cmd;
            int idx = (int)i;

            if (pr->rq->nargs > 2) {
                size_t n;
                const char *a = arg(pr, i + 2, &n);
                idx = redis_command_find(a, n);
            }
            cmd = redis_command_at(idx);
            if (cmd == NULL) {
                buf_printf(&b, "*-1\r\n");
                continue;
            }
            buf_printf(&b, "*6\r\n");
            bulk(&b, cmd->name, strlen(cmd->name));
            buf_printf(&b, ":%d\r\n*%d\r\n", cmd->arity,
                       cmd->flags & REDIS_WRITE ? 1 : 0);
            if (cmd->flags & REDIS_WRITE)
                buf_printf(&b, "+write\r\n");
            buf_printf(&b, ":%d\r\n:%d\r\n:%d\r\n",
                       cmd->kind == REDIS_NUMKEYS ? 0 : cmd->first,
                       cmd->kind == REDIS_NUMKEYS ? 0 : cmd->last,
                       cmd->kind == REDIS_NUMKEYS ? 0 : cmd->step);
        }
    } else {
        char name[64];
        size_t n;
        const char *sub = arg(pr, 1, &n);

        (void)sub;
        command_name(pr, name, sizeof(name));
        answer_error(r,
                     "ERR unsupported command 'command %.*s' in a chashd "
                     "redis pool",
                     (int)(n > 32 ? 32 : n), sub);
        return;
    }
    if (b.data == NULL) {
        request_error(r, PROTO_ERR_REQUEST, "out of memory");
        return;
    }
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

static void
answer_client(struct rreq *r, const struct parsed *pr)
{
    struct rclient *c = r->client;
    struct buf b = {0};
    size_t n;
    const char *a;

    if (pr->rq->nargs >= 3 && arg_is(pr, 1, "setname")) {
        a = arg(pr, 2, &n);
        for (size_t i = 0; i < n; i++)
            if (a[i] <= ' ' || a[i] > '~') {
                answer_error(r, "ERR Client names cannot contain spaces, "
                                "newlines or special characters.");
                return;
            }
        free(c->name);
        c->name = n > 0 ? strndup(a, n) : NULL;
        answer(r, "+OK\r\n");
    } else if (pr->rq->nargs == 2 && arg_is(pr, 1, "getname")) {
        if (c->name == NULL)
            answer(r, "$-1\r\n");
        else
            answer_bulk(r, c->name, strlen(c->name));
    } else if (pr->rq->nargs == 2 && arg_is(pr, 1, "id")) {
        buf_printf(&b, ":%" PRIu64 "\r\n", c->id);
        request_answer(r, b.data, b.len);
        buf_free(&b);
    } else if (pr->rq->nargs >= 2 && arg_is(pr, 1, "setinfo")) {
        answer(r, "+OK\r\n"); /* library name and version: nothing to do */
    } else {
        a = pr->rq->nargs >= 2 ? arg(pr, 1, &n) : "";
        if (pr->rq->nargs < 2)
            n = 0;
        answer_error(r,
                     "ERR unsupported command 'client %.*s' in a chashd "
                     "redis pool",
                     (int)(n > 32 ? 32 : n), a);
    }
}

static void
answer_time(struct rreq *r)
{
    struct timeval tv;
    struct buf b = {0};
    char s[24], us[24];

    gettimeofday(&tv, NULL);
    snprintf(s, sizeof(s), "%ld", (long)tv.tv_sec);
    snprintf(us, sizeof(us), "%ld", (long)tv.tv_usec);
    buf_printf(&b, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(s), s,
               strlen(us), us);
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

/* INFO [section]: chashd's sections now, the members' keyspace summed
 * when their replies come (MERGE_INFO). */
static int
info(struct rreq *r, const struct pool_snapshot *snap, const struct parsed *pr)
{
    static const char keyspace[] = "*2\r\n$4\r\nINFO\r\n$8\r\nkeyspace\r\n";
    struct merge *m = merge_new(r, MERGE_INFO);
    struct stats_pool_sum ps;
    struct pool *p = r->client->pool;
    bool all = pr->rq->nargs < 2 || arg_is(pr, 1, "all") ||
               arg_is(pr, 1, "everything") || arg_is(pr, 1, "default");
    bool ks = all || arg_is(pr, 1, "keyspace");
    bool server = all || arg_is(pr, 1, "server");
    bool stats = all || arg_is(pr, 1, "stats") || arg_is(pr, 1, "clients");

    if (m == NULL)
        return -1;
    m->keyspace = ks;
    stats_pool_sum(p->stats, pool_workers(), &ps);
    if (server)
        buf_printf(&m->text,
                   "# Server\r\nredis_version:7.0.15\r\n"
                   "chashd_version:%s\r\nredis_mode:standalone\r\n"
                   "process_id:%ld\r\nchashd_pool:%s\r\n"
                   "chashd_members:%zu\r\n\r\n",
                   CHASH_VERSION_STRING, (long)getpid(), p->name, snap->n);
    if (stats)
        buf_printf(&m->text,
                   "# Clients\r\nconnected_clients:%" PRIu64
                   "\r\n\r\n# Stats\r\ntotal_connections_received:%" PRIu64
                   "\r\ntotal_commands_processed:%" PRIu64 "\r\n\r\n",
                   atomic_load_explicit(&p->active, memory_order_relaxed),
                   ps.accepted, ps.requests);
    if (!ks) {
        /* answered from chashd's own sections alone */
        struct buf b = {0};

        buf_printf(&b, "$%zu\r\n", m->text.len);
        buf_append(&b, m->text.data, m->text.len);
        buf_append(&b, "\r\n", 2);
        request_answer(r, b.data, b.len);
        buf_free(&b);
        return 0;
    }
    return fanout(r, snap, keyspace, sizeof(keyspace) - 1, m);
}

/* The commands chashd answers itself. */
static int
local(struct rreq *r, const struct pool_snapshot *snap, const struct parsed *pr)
{
    int id = pr->rq->command;
    char name[64];
    struct rclient *c = r->client;
    size_t n;
    const char *a;

    if (id == ids.ping) {
        if (pr->rq->nargs > 1) {
            a = arg(pr, 1, &n);
            answer_bulk(r, a, n);
        } else {
            answer(r, "+PONG\r\n");
        }
    } else if (id == ids.echo) {
        a = arg(pr, 1, &n);
        answer_bulk(r, a, n);
    } else if (id == ids.quit) {
        answer(r, "+OK\r\n");
        r->quit = true;
    } else if (id == ids.select) {
        uint64_t db;
        if (arg_u64(pr, 1, &db) == 0 && db == (uint64_t)snap->set.redis_db)
            answer(r, "+OK\r\n");
        else
            answer_error(r,
                         "ERR SELECT: this chashd pool serves database %d "
                         "only (its redis_db)",
                         snap->set.redis_db);
    } else if (id == ids.auth) {
        size_t last = pr->rq->nargs - 1;
        if (check_auth(r, snap, pr, pr->rq->nargs == 3 ? 1 : last, last) == 0)
            answer(r, "+OK\r\n");
    } else if (id == ids.hello) {
        uint64_t v = 2;
        size_t i = 2;

        if (pr->rq->nargs >= 2 && (arg_u64(pr, 1, &v) < 0 || v != 2)) {
            answer_error(r, "NOPROTO sorry, this protocol version is not "
                            "supported (chashd speaks RESP2)");
            return 0;
        }
        while (i < pr->rq->nargs) {
            if (arg_is(pr, i, "auth") && i + 2 < pr->rq->nargs) {
                if (check_auth(r, snap, pr, i + 1, i + 2) < 0)
                    return 0;
                i += 3;
            } else if (arg_is(pr, i, "setname") && i + 1 < pr->rq->nargs) {
                a = arg(pr, i + 1, &n);
                free(c->name);
                c->name = strndup(a, n);
                i += 2;
            } else {
                answer_error(r, "ERR Syntax error in HELLO option");
                return 0;
            }
        }
        if (!c->authed) {
            answer_error(r, "NOAUTH HELLO must be called with the client "
                            "already authenticated, otherwise the HELLO "
                            "AUTH <user> <pass> option can be used to "
                            "authenticate the client and select the RESP "
                            "protocol version at the same time");
            return 0;
        }
        answer_hello(r, snap);
    } else if (id == ids.command) {
        answer_command(r, pr);
    } else if (id == ids.client) {
        answer_client(r, pr);
    } else if (id == ids.time) {
        answer_time(r);
    } else if (id == ids.reset) {
        free(c->name);
        c->name = NULL;
        c->authed = snap->set.redis_auth == NULL;
        c->multi_refused = false; /* RESET discards a MULTI block */
        answer(r, "+RESET\r\n");
    } else if (id == ids.info) {
        return info(r, snap, pr);
    } else {
        answer_error(r, "ERR unsupported command '%s' in a chashd redis pool",
                     command_name(pr, name, sizeof(name)));
    }
    return 0;
}

/* ---- transactions -------------------------------------------------------- */

/*
 * chashd does not run transactions yet (a later change adds them), and a
 * client that sent MULTI must never find the commands it meant to queue
 * run one by one -- it is told at EXEC that the transaction failed. So a
 * MULTI block is refused whole, in the shape Redis itself gives a
 * transaction whose commands failed to queue, which client libraries
 * read to the end as they do Redis' (a MULTI answered with an error
 * instead would tell the client it is in no block while its next
 * commands are refused, and go-redis' transactional pipeline stops
 * reading at MULTI's error, leaving the other replies unread):
 *
 *   MULTI              +OK, and the connection enters the refused block
 *   any command in it  -ERR MULTI is refused ...: this command was not run
 *                      (nothing is queued, nothing reaches a member)
 *   EXEC               -EXECABORT Transaction discarded because MULTI is
 *                      refused ...; the block ends
 *   DISCARD            +OK; the block ends (nothing ran, nothing is left)
 *   RESET, QUIT        run, as Redis runs them inside MULTI (RESET ends
 *                      the block: local())
 *
 * and, as Redis answers them: MULTI inside the block "-ERR MULTI calls
 * can not be nested", WATCH inside it "-ERR WATCH inside MULTI is not
 * allowed", EXEC or DISCARD outside one "-ERR EXEC (DISCARD) without
 * MULTI", an EXEC with arguments "-EXECABORT Transaction discarded
 * because of: wrong number of arguments for 'exec' command" (the block
 * ends). Outside a block, WATCH is refused (no key can be watched) and
 * UNWATCH answers +OK (no key is ever watched on a chashd connection).
 */
#define MULTI_WHY                                                              \
    "MULTI is refused by chashd (transactions are not supported yet)"

/* Whether <pr> has the number of arguments <cmd> takes (the parser
 * refused it with Redis' text in rq->err otherwise). */
static bool
arity_fits(const struct redis_command *cmd, const struct parsed *pr)
{
    size_t n = pr->rq->nargs;

    return cmd->arity > 0 ? n == (size_t)cmd->arity : n >= (size_t)-cmd->arity;
}

/* The transaction commands outside a refused block: true when <r> was
 * answered here. */
static bool
multi_outside(struct rclient *c, struct rreq *r, const struct parsed *pr,
              const struct redis_command *cmd)
{
    int id = pr->rq->command;
    bool fits = cmd != NULL && arity_fits(cmd, pr);
    const char *err = pr->rq->err ? pr->rq->err : "bad request";

    if (id == ids.multi) {
        if (!fits) {
            answer_error(r, "ERR %s", err);
            return true;
        }
        c->multi_refused = true;
        answer(r, "+OK\r\n");
    } else if (id == ids.exec) {
        if (fits)
            answer_error(r, "ERR EXEC without MULTI");
        else
            answer_error(r, "EXECABORT Transaction discarded because of: %s",
                         err);
    } else if (id == ids.discard) {
        if (fits)
            answer_error(r, "ERR DISCARD without MULTI");
        else
            answer_error(r, "ERR %s", err);
    } else if (id == ids.watch) {
        if (fits)
            answer_error(r, "ERR WATCH is refused by chashd (transactions "
                            "are not supported yet): no key is watched");
        else
            answer_error(r, "ERR %s", err);
    } else if (id == ids.unwatch) {
        if (fits)
            answer(r, "+OK\r\n"); /* nothing is ever watched here */
        else
            answer_error(r, "ERR %s", err);
    } else {
        return false;
    }
    return true;
}

/*
 * MULTI blocks (see above): true when <r> (command <cmd>, NULL when
 * unknown) was answered here, false when it goes on to be
 * served as usual.
 */
static bool
multi_gate(struct rclient *c, struct rreq *r, const struct parsed *pr,
           const struct redis_command *cmd)
{
    int id = pr->rq->command;
    bool fits;
    const char *err;

    /* (outside a block, only MULTI EXEC DISCARD WATCH UNWATCH -- refused
     * in the table -- are this gate's: no name compared per request) */
    if (!c->multi_refused)
        return cmd != NULL && cmd->kind == REDIS_REFUSED &&
               multi_outside(c, r, pr, cmd);
    fits = cmd != NULL && arity_fits(cmd, pr);
    err = pr->rq->err ? pr->rq->err : "bad request";
    if (id == ids.exec) {
        c->multi_refused = false;
        if (fits)
            answer_error(r, "EXECABORT Transaction discarded because " MULTI_WHY
                            ": none of its commands was run");
        else
            answer_error(r, "EXECABORT Transaction discarded because of: %s",
                         err);
    } else if (id == ids.discard) {
        if (!fits) {
            answer_error(r, "ERR %s", err); /* the block goes on */
            return true;
        }
        c->multi_refused = false;
        answer(r, "+OK\r\n");
    } else if (id == ids.multi && fits) {
        answer_error(r, "ERR MULTI calls can not be nested");
    } else if (id == ids.watch && fits) {
        answer_error(r, "ERR WATCH inside MULTI is not allowed");
    } else if ((id == ids.reset || id == ids.quit) && fits) {
        return false; /* run now, as Redis runs them (local) */
    } else {
        answer_error(r, "ERR " MULTI_WHY ": this command was not run");
    }
    return true;
}

/* ---- dispatch ------------------------------------------------------------ */

/* A command every member runs (DBSIZE, KEYS, SCAN, FLUSHALL...): refused
 * when it administers the members and the pool does not allow it; else
 * sent to each member, the replies merged as the command wants. */
static int
fanout_command(struct rclient *c, struct rreq *r,
               const struct pool_snapshot *snap, const struct parsed *pr,
               const struct redis_command *cmd)
{
    int id = pr->rq->command;
    char name[64];
    struct merge *m;
    int kind;

    if ((cmd->flags & REDIS_ADMIN) && !snap->set.allow_fanout_admin) {
        answer_error(r,
                     "ERR '%s' runs on every member: refused in this "
                     "pool (allow_fanout_admin: false)",
                     command_name(pr, name, sizeof(name)));
        return 0;
    }
    if (id == ids.scan)
        return scan(r, snap, pr);
    kind = id == ids.dbsize      ? MERGE_SUM
           : id == ids.keys      ? MERGE_CONCAT
           : id == ids.randomkey ? MERGE_RANDOM
                                 : MERGE_OK;
    m = merge_new(r, kind);
    if (m == NULL)
        return -1;
    m->member = (size_t)(c->id % (snap->n ? snap->n : 1));
    return fanout(r, snap, pr->buf, pr->len, m);
}

static int
redis_dispatch(struct rclient *c, struct rreq *r,
               const struct pool_snapshot *snap, const char *buf,
               const struct proto_request *rq)
{
    const struct redis_command *cmd = redis_command_at(rq->command);
    int id = rq->command;
    struct parsed pr = {.rq = rq};
    char name[64];
    uint64_t hash = 0;
    struct server *s;

    if (rq->flags & PROTO_REQ_INLINE) {
        pr.buf = rq->scratch;
        pr.len = rq->scratchlen;
    } else {
        pr.buf = buf;
        pr.len = rq->head;
    }
    r->kind = cmd ? cmd->kind : REDIS_REFUSED;
    /* Nothing but AUTH (and HELLO, QUIT) before a client authenticates. */
    if (!c->authed && id != ids.auth && id != ids.hello && id != ids.quit) {
        answer_error(r, "NOAUTH Authentication required.");
        return 0;
    }
    if (multi_gate(c, r, &pr, cmd))
        return 0;
    if (cmd == NULL) {
        answer_error(r, "ERR unsupported command '%s' in a chashd redis pool",
                     command_name(&pr, name, sizeof(name)));
        return 0;
    }
    if (cmd->kind == REDIS_REFUSED) {
        answer_error(r, "ERR unsupported command '%s' in a chashd redis pool",
                     command_name(&pr, name, sizeof(name)));
        return 0;
    }
    if (rq->flags & PROTO_REQ_REFUSED) {
        /* a wrong arity, and the like: Redis' own words */
        answer_error(r, "ERR %s", rq->err ? rq->err : "bad request");
        return 0;
    }
    if (snap->set.replicas > 1 && id == ids.spop) {
        /* each member would pop a member of its own choice: the copies
         * would part at once (Redis' own replication sends an SREM of the
         * one it popped) */
        answer_error(r, "ERR SPOP removes a random member: in a pool with "
                        "replicas each copy would lose a different one; use "
                        "SRANDMEMBER, then SREM what it gave");
        return 0;
    }
    switch (cmd->kind) {
    case REDIS_KEY:
    case REDIS_SAME:
    case REDIS_NUMKEYS:
        if (rq->nkeys == 0 && cmd->kind == REDIS_KEY) {
            /* LOLWUT, and the HELP of OBJECT, MEMORY, XINFO, XGROUP: the
             * table says any member answers */
            s = request_any_member(snap, c->id);
            if (s == NULL) {
                request_error(r, PROTO_ERR_NO_MEMBER, "no member is up");
                return 0;
            }
            return send_whole(r, snap, &pr, s, 0);
        }
        if (rq->nkeys == 0) {
            answer_error(r,
                         "ERR '%s' names no key: chashd cannot tell which "
                         "member should run it",
                         command_name(&pr, name, sizeof(name)));
            return 0;
        }
        s = same_member(r, snap, &pr, &hash);
        if (s == NULL)
            return 0; /* answered */
        return send_whole(r, snap, &pr, s, hash);
    case REDIS_SPLIT_KEYS:
        return split(r, snap, &pr, 1,
                     id == ids.mget ? MERGE_BY_KEY : MERGE_SUM);
    case REDIS_SPLIT_KV:
        return split(r, snap, &pr, 2, MERGE_OK);
    case REDIS_LOCAL:
        return local(r, snap, &pr);
    case REDIS_FANOUT:
        return fanout_command(c, r, snap, &pr, cmd);
    default:
        answer_error(r, "ERR unsupported command '%s' in a chashd redis pool",
                     command_name(&pr, name, sizeof(name)));
        return 0;
    }
}

/* ---- merging ------------------------------------------------------------- */

static const char *
frag_reply(const struct rfrag *f, size_t *len)
{
    *len = f->reply.len - f->reply.off;
    return f->reply.data + f->reply.off;
}

static void
merge_by_key(struct rreq *r, struct merge *m)
{
    struct proto_span **el = calloc(r->nfrags, sizeof(*el));
    struct buf b = {0};

    if (el == NULL)
        goto oom;
    for (size_t f = 0; f < r->nfrags; f++) {
        size_t len;
        const char *rep = frag_reply(&r->frags[f], &len);
        long n;

        el[f] = calloc(r->frags[f].nkeys ? r->frags[f].nkeys : 1, sizeof(**el));
        if (el[f] == NULL)
            goto oom;
        n = redis_reply_elements(rep, len, el[f], r->frags[f].nkeys);
        if (n != (long)r->frags[f].nkeys) {
            request_error(r, PROTO_ERR_REQUEST,
                          "ERR a member answered MGET with an unexpected "
                          "reply");
            goto out;
        }
    }
    buf_printf(&b, "*%zu\r\n", m->nkeys);
    for (size_t i = 0; i < m->nkeys; i++) {
        size_t len;
        const char *rep = frag_reply(&r->frags[m->frag[i]], &len);
        const struct proto_span *e = &el[m->frag[i]][m->pos[i]];

        if (buf_append(&b, rep + e->off, e->len) < 0)
            goto oom;
    }
    request_answer(r, b.data, b.len);
    goto out;
oom:
    request_error(r, PROTO_ERR_REQUEST, "ERR out of memory");
out:
    for (size_t f = 0; el != NULL && f < r->nfrags; f++)
        free(el[f]);
    free(el);
    buf_free(&b);
}

static void
merge_scan(struct rreq *r, struct merge *m)
{
    size_t len, clen;
    const char *rep = frag_reply(&r->frags[0], &len);
    struct proto_span el[2];
    uint64_t next = 0, ours;
    struct buf b = {0};
    char num[24];
    const char *c;

    if (redis_reply_elements(rep, len, el, 2) != 2 || rep[el[0].off] != '$')
        goto bad;
    /* "$<n>\r\n<digits>\r\n" */
    c = memchr(rep + el[0].off, '\n', el[0].len);
    if (c == NULL)
        goto bad;
    c++;
    clen = (size_t)(rep + el[0].off + el[0].len - 2 - c);
    for (size_t i = 0; i < clen; i++) {
        if (c[i] < '0' || c[i] > '9')
            goto bad;
        next = next * 10 + (uint64_t)(c[i] - '0');
    }
    if (next == 0) {
        /* this member is done: the next one from its start, or the end */
        ours = m->member + 1 < m->nmembers ? m->member + 1 : 0;
    } else {
        if (next > (UINT64_MAX - m->member) / m->nmembers)
            goto bad;
        ours = next * m->nmembers + m->member;
    }
    snprintf(num, sizeof(num), "%" PRIu64, ours);
    buf_printf(&b, "*2\r\n$%zu\r\n%s\r\n", strlen(num), num);
    buf_append(&b, rep + el[1].off, el[1].len);
    request_answer(r, b.data, b.len);
    buf_free(&b);
    return;
bad:
    request_error(r, PROTO_ERR_REQUEST,
                  "ERR a member answered SCAN with an unexpected reply");
}

/* Sum "dbN:keys=K,expires=E,..." lines of every member's INFO keyspace. */
static void
merge_info(struct rreq *r, struct merge *m)
{
    uint64_t keys[16] = {0}, expires[16] = {0};
    bool seen[16] = {false};
    struct buf b = {0};

    for (size_t f = 0; f < r->nfrags; f++) {
        size_t len;
        const char *rep = frag_reply(&r->frags[f], &len), *p = rep,
                   *end = rep + len;

        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            unsigned db;
            unsigned long long k, e;

            if (nl == NULL)
                nl = end;
            if (sscanf(p, "db%u:keys=%llu,expires=%llu", &db, &k, &e) == 3 &&
                db < 16) {
                keys[db] += k;
                expires[db] += e;
                seen[db] = true;
            }
            p = nl + 1;
        }
    }
    buf_append(&m->text, "# Keyspace\r\n", 12);
    for (unsigned db = 0; db < 16; db++)
        if (seen[db])
            buf_printf(&m->text,
                       "db%u:keys=%" PRIu64 ",expires=%" PRIu64
                       ",avg_ttl=0\r\n",
                       db, keys[db], expires[db]);
    buf_printf(&b, "$%zu\r\n", m->text.len);
    buf_append(&b, m->text.data, m->text.len);
    buf_append(&b, "\r\n", 2);
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

static void
redis_complete(struct rreq *r)
{
    struct merge *m = r->mode_data;
    const struct rfrag *err = request_first_error(r);
    struct buf b = {0};
    size_t len;
    const char *rep;

    if (m == NULL)
        return;
    if (err != NULL && m->kind != MERGE_RANDOM) {
        /* One failed fragment fails the request: its error, once. */
        rep = frag_reply(err, &len);
        request_answer(r, rep, len);
        return;
    }
    switch (m->kind) {
    case MERGE_BY_KEY:
        merge_by_key(r, m);
        return;
    case MERGE_SUM: {
        long long sum = 0, v;

        for (size_t f = 0; f < r->nfrags; f++) {
            rep = frag_reply(&r->frags[f], &len);
            if (redis_reply_integer(rep, len, &v) < 0) {
                request_error(r, PROTO_ERR_REQUEST,
                              "ERR a member answered with an unexpected "
                              "reply where an integer was due");
                return;
            }
            sum += v;
        }
        buf_printf(&b, ":%lld\r\n", sum);
        break;
    }
    case MERGE_OK:
        buf_printf(&b, "+OK\r\n");
        break;
    case MERGE_CONCAT: {
        size_t total = 0;
        struct proto_span one;

        for (size_t f = 0; f < r->nfrags; f++) {
            long n;
            rep = frag_reply(&r->frags[f], &len);
            n = redis_reply_elements(rep, len, &one, 0);
            if (n < 0) {
                request_error(r, PROTO_ERR_REQUEST,
                              "ERR a member answered with an unexpected "
                              "reply where an array was due");
                return;
            }
            total += (size_t)n;
        }
        buf_printf(&b, "*%zu\r\n", total);
        for (size_t f = 0; f < r->nfrags; f++) {
            const char *body;
            rep = frag_reply(&r->frags[f], &len);
            /* the elements follow the first line "*<n>\r\n" */
            body = memchr(rep, '\n', len);
            if (body != NULL)
                buf_append(&b, body + 1, len - (size_t)(body + 1 - rep));
        }
        break;
    }
    case MERGE_SCAN:
        merge_scan(r, m);
        return;
    case MERGE_RANDOM:
        /* The first member that has a key, from a start that moves with
         * the client so members are not always asked in one order. */
        for (size_t k = 0; k < r->nfrags; k++) {
            const struct rfrag *f = &r->frags[(m->member + k) % r->nfrags];
            rep = frag_reply(f, &len);
            if (!f->error && len >= 3 && rep[0] == '$' && rep[1] != '-') {
                request_answer(r, rep, len);
                return;
            }
        }
        if (err != NULL) {
            rep = frag_reply(err, &len);
            request_answer(r, rep, len);
            return;
        }
        buf_printf(&b, "$-1\r\n");
        break;
    case MERGE_INFO:
        merge_info(r, m);
        return;
    }
    if (b.data == NULL) {
        request_error(r, PROTO_ERR_REQUEST, "ERR out of memory");
        return;
    }
    request_answer(r, b.data, b.len);
    buf_free(&b);
}

static void
redis_release(struct rreq *r)
{
    struct merge *m = r->mode_data;

    if (m == NULL)
        return;
    free(m->frag);
    free(m->pos);
    buf_free(&m->text);
    free(m);
    r->mode_data = NULL;
}

/* AUTH <redis_auth> and SELECT <redis_db> on a fresh member connection. */
static int
redis_handshake(const struct pool_snapshot *snap, char *out, size_t cap,
                unsigned *replies)
{
    return redis_prelude(out, cap, snap->set.redis_auth, snap->set.redis_db,
                         replies);
}

/* A merged reply is an error when it is one error reply. */
static bool
redis_is_error(const char *buf, size_t len)
{
    return len > 0 && buf[0] == '-';
}

const struct request_mode redis_request_mode = {
    .proto = &proto_redis,
    .dispatch = redis_dispatch,
    .complete = redis_complete,
    .release = redis_release,
    .handshake = redis_handshake,
    .is_error = redis_is_error,
    .gate_build = redis_gate_build,
    .gate_result = redis_gate_result,
};

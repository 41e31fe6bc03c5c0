/* http.c -- the http mode's engine (http.h): clients parsed into requests
 * by the strict parser of proto/http.c, each routed by the pool's hash_key
 * chain to a member over the worker's pooled keep-alive connections, its
 * head rewritten (hop-by-hop headers out, X-Forwarded-* in), its body and
 * its response's body streamed through, errors answered in place, and an
 * idempotent request retried on the next member when its member fails
 * before a byte of the response. The design: doc/internals/chashd.md,
 * "The http engine".
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/buf.h"
#include "base/invariant.h"
#include "base/log.h"
#include "conf/conf.h"
#include "data/engine.h"
#include "loop/access_log.h"
#include "loop/io.h"
#include "model/hotkeys.h"
#include "model/pool.h"
#include "proto/http.h"
#include "proto/proxy.h"
#include "proto/tcp.h"

/* A request is kept whole for a retry while it is at most this large. */
#define RETRY_MAX (64 * 1024)
/* The largest response head a member may send (more: 502). */
#define RESP_HEAD_MAX (64 * 1024)
/* Members remembered as failed for one request. */
#define TRIED_MAX 8
#define MEMBER_BUCKETS 64
#define SWEEP_MS 1000 /* removed members' connections: see hworker_sweep */
/* Reads per side per event (then a `soon` task), as the splice does. */
#define PUMP_READS 8
/* How long chashd waits for a client to read an error before closing. */
#define CLOSING_MS 2000
/* The longest routing key copied (a lower-cased host). */
#define KEY_MAX 256
/* What one read of a member's response takes at most: a 64 KiB body in
 * one read and one write rather than four of each. */
#define READ_MAX (64 * 1024)
/* The least time an accept_proxy client has to send its PROXY header
 * (the spec's advice), as the tcp mode's. */
#define PROXY_WAIT_MIN_MS 3000

struct hclient;

/* A connection to a member: in use by one client, or idle in its
 * member's list, or connecting. */
struct hconn {
    struct io_side side;
    struct worker_conn link; /* the worker's list: closed at exit */
    struct hmember *m;
    struct hclient *c; /* its user, NULL when idle */
    struct hconn *next;
    struct hclient *owner; /* send_proxy: the client it is private to,
                              while it waits for that client's next
                              request */
    bool connecting;
    bool reused; /* taken from the idle list */
    bool idle;   /* in its member's idle list */
};

/* The pooled connections of one member in this worker. */
struct hmember {
    uint64_t id;
    struct server *server; /* (ref held) */
    struct hconn *idle;
    uint32_t nidle;
    uint32_t nconns; /* connections whose <m> is this one: idle, in use,
                        connecting; the entry is freed only at 0 */
    struct hmember *next;
};

/* The engine's state in one worker. */
struct hworker {
    struct worker *w;
    struct worker_conn link;
    struct hmember *buckets[MEMBER_BUCKETS];
    struct timer sweep; /* hworker_sweep, every SWEEP_MS */
    struct http_header headers[HTTP_HEADERS_MAX];
    char rbuf[READ_MAX]; /* the members' responses are read here */
};

enum hstate {
    H_PROXY,   /* accept_proxy: the PROXY header first */
    H_HEAD,    /* waiting for a whole request head */
    H_CONNECT, /* its member connection is being opened */
    H_FORWARD, /* the request goes up, its response comes down */
    H_TUNNEL,  /* after a 101: bytes both ways */
    H_CLOSING, /* an answer goes out, then the close */
    H_CLOSED
};
enum rstate { R_HEAD, R_BODY };

struct hclient {
    struct io_side side;
    struct worker_conn link;
    struct worker_task more;
    struct timer timer;
    struct worker *w;
    struct pool *pool; /* (ref held) */
    char ip[INET6_ADDRSTRLEN + 2];
    char ipport[INET6_ADDRSTRLEN + 10];
    bool v6;
    /* send_proxy: the header every new member connection starts with, and
     * the connection kept for this client's next request (a connection
     * that said who its client is serves no other client) */
    char hello[PROXY_WRITE_MAX];
    size_t hello_len;
    struct hconn *priv;
    /* the client's address (the PROXY header's when one was taken), and
     * with an access log, the request line's method and target, copied
     * (the input buffer moves) */
    struct sockaddr_storage peer;
    socklen_t peerlen;
    char *logbuf; /* [ACCESS_METHOD_MAX + ACCESS_TARGET_MAX], lazily */
    size_t log_method, log_target;
    int state;     /* enum hstate */
    struct buf in; /* from the client, not consumed yet */
    struct buf up; /* to the member: [0, up_sent) sent */
    size_t up_sent;
    struct buf down;  /* to the client, not taken yet */
    struct buf rhead; /* the member's response head, arriving */
    uint64_t in_cap;  /* the most <in> holds */
    uint64_t last_ms; /* the timer's reference */
    /* the request */
    int method, minor;
    bool keep_alive, upgrade, idempotent, retryable;
    int body; /* enum http_body */
    bool body_done;
    uint64_t body_left, body_total;
    struct http_chunked chunk;
    uint64_t start_us;
    /* its member */
    struct server *server; /* (ref held) */
    bool counted;          /* its `active` counts this request */
    struct hconn *be;
    uint64_t hash;
    uint64_t tried[TRIED_MAX];
    uint32_t attempts;
    bool decided;
    bool stale_retried; /* a reused connection that was closed */
    bool timed_out;     /* the last failure was a timeout */
    int routing;        /* the last routing decision (enum stats_decision) */
    size_t key_link;    /* the hash_key link the key came from */
    uint64_t req_in;    /* bytes of it read from the client */
    uint64_t req_out;   /* bytes of its answer for the client */
    int status;         /* the status the client got, 0: none yet */
    const char *error;  /* why chashd answered itself (static) */
    /* its response */
    int rstate; /* enum rstate */
    int rbody;  /* enum http_body */
    uint64_t rleft;
    struct http_chunked rchunk;
    bool rkeep;
    bool answered;    /* the member sent a byte of it */
    bool replied;     /* the client got a byte of it */
    bool close_after; /* close the client once it is out */
    /* settings of the request's snapshot */
    uint32_t connect_timeout_ms, timeout_ms, idle_timeout_ms, retries;
    uint64_t max_body;
};

static void run(struct worker *w, struct hclient *c);
static void idle_unlink(struct hconn *b);
static void conn_close(struct worker *w, struct hconn *b);
static void connect_next(struct worker *w, struct hclient *c);
static void connect_failed(struct worker *w, struct hclient *c, bool timeout,
                           int err);
static void backend_event(struct worker *w, struct ev *ev, uint32_t events);

/* ---- buffers ------------------------------------------------------------- */

/*
 * Write what <b> holds from *<sent> to <side>, after what the side holds
 * itself. 1: all out; 0: some waits (an output edge will come); -1: the
 * peer is gone. With <keep>, the bytes sent stay in <b> (a retry sends
 * them again); else <b> is emptied as it goes.
 */
static int
out_flush(struct io_side *side, struct buf *b, size_t *sent, bool keep)
{
    if (side->len > 0) {
        if (io_side_flush(side) < 0)
            return -1;
        if (side->len > 0)
            return 0;
    }
    while (*sent < b->len) {
        /* straight from <b>, whatever its size: no second copy */
        ssize_t m = io_side_send(side, b->data + *sent, b->len - *sent);
        if (m < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0; /* an output edge will come */
            return -1;
        }
        *sent += (size_t)m;
    }
    if (!keep)
        b->off = b->len = *sent = 0;
    return 1;
}

/* Whether <side> and <b> have nothing waiting. */
static bool
out_empty(const struct io_side *side, const struct buf *b, size_t sent)
{
    return side->len == 0 && sent >= b->len;
}

/* ---- the worker's state and the member connections --------------------- */

static void
hworker_close(struct worker *w, struct worker_conn *l)
{
    struct hworker *hw = WORKER_OF(l, struct hworker, link);

    worker_conn_del(&hw->link);
    worker_timer_del(w, &hw->sweep);
    for (size_t i = 0; i < MEMBER_BUCKETS; i++) {
        struct hmember *m = hw->buckets[i], *next;
        for (; m != NULL; m = next) {
            next = m->next;
            while (m->idle != NULL) {
                struct hconn *b = m->idle;
                conn_close(w, b);
            }
            server_unref(m->server);
            free(m);
        }
    }
    w->http = NULL;
    free(hw);
}

/* Members that a reload, the admin API or etcd removed: nothing takes
 * their idle connections again (conn_release closes those in use), yet
 * they stayed open, and the entry with its server reference stayed for
 * the worker's life -- every remove and add of a member left one more
 * set (descriptors and memory growing under membership churn). Close
 * them, and free the entry once no connection points to it. */
static void
hworker_sweep(struct worker *w, struct timer *t)
{
    struct hworker *hw = WORKER_OF(t, struct hworker, sweep);

    for (size_t i = 0; i < MEMBER_BUCKETS; i++) {
        struct hmember **pp = &hw->buckets[i];

        while (*pp != NULL) {
            struct hmember *m = *pp;

            if (atomic_load_explicit(&m->server->state, memory_order_relaxed) !=
                SERVER_REMOVED) {
                pp = &m->next;
                continue;
            }
            while (m->idle != NULL)
                conn_close(w, m->idle);
            if (m->nconns > 0) {
                pp = &m->next; /* in use: at a later sweep */
                continue;
            }
            *pp = m->next;
            server_unref(m->server);
            free(m);
        }
    }
    worker_timer_set(w, &hw->sweep, w->now_ms + SWEEP_MS);
}

static struct hworker *
hworker_get(struct worker *w)
{
    struct hworker *hw = w->http;

    if (hw != NULL)
        return hw;
    hw = calloc(1, sizeof(*hw));
    if (hw == NULL)
        return NULL;
    hw->w = w;
    hw->link.close = hworker_close;
    hw->sweep.on_expire = hworker_sweep;
    worker_timer_set(w, &hw->sweep, w->now_ms + SWEEP_MS);
    /* At worker exit its close takes the idle connections; those in use
     * close with their clients, in any order (neither reads the other's
     * memory then). */
    worker_conn_add(w, &hw->link);
    w->http = hw;
    return hw;
}

static struct hmember *
member_get(struct hworker *hw, struct server *s)
{
    size_t b = s->id % MEMBER_BUCKETS;
    struct hmember *m;

    for (m = hw->buckets[b]; m != NULL; m = m->next)
        if (m->id == s->id)
            return m;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->id = s->id;
    m->server = s;
    server_ref(s);
    m->next = hw->buckets[b];
    hw->buckets[b] = m;
    return m;
}

static void
idle_unlink(struct hconn *b)
{
    struct hconn **pp;

    for (pp = &b->m->idle; *pp != NULL; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            b->m->nidle--;
            break;
        }
    b->next = NULL;
    b->idle = false;
}

static void
conn_close(struct worker *w, struct hconn *b)
{
    if (b->owner != NULL) {
        b->owner->priv = NULL;
        b->owner = NULL;
    } else if (b->idle) {
        idle_unlink(b);
    }
    if (b->c != NULL && b->c->be == b)
        b->c->be = NULL;
    b->c = NULL;
    /* at worker exit hworker_close may have freed the entries already
     * (and cleared w->http): nothing to count then */
    if (b->m != NULL && w->http != NULL)
        b->m->nconns--;
    b->m = NULL;
    io_side_close(&b->side);
    worker_conn_del(&b->link);
    worker_defer_free(w, b);
}

static void
conn_link_close(struct worker *w, struct worker_conn *l)
{
    conn_close(w, WORKER_OF(l, struct hconn, link));
}

/* Close the member connection <c> is using (its request failed, or was
 * cut): it cannot serve another. */
static void
be_drop(struct worker *w, struct hclient *c)
{
    if (c->be != NULL)
        conn_close(w, c->be); /* clears c->be */
}

/* An idle connection the member has not closed, as far as its events
 * say (an event on an idle connection closes it at once). A close that
 * is on its way as it is taken is the stale case of member_failed: a new
 * connection to the same member, for a request that may be sent again. */
static struct hconn *
idle_take(struct worker *w, struct hmember *m)
{
    while (m->idle != NULL) {
        struct hconn *b = m->idle;

        idle_unlink(b);
        if (!b->side.eof_in && !b->side.rdhup && !b->side.failed &&
            !b->side.readable)
            return b;
        conn_close(w, b);
    }
    return NULL;
}

/* The client is done with its member connection: back to the idle list
 * when <reusable> and there is room, else closed. */
static void
conn_release(struct worker *w, struct hclient *c, bool reusable,
             uint32_t keepalive)
{
    struct hconn *b = c->be;

    if (b == NULL)
        return;
    c->be = NULL;
    b->c = NULL;
    if (c->hello_len > 0) {
        /* send_proxy: kept for this client only */
        if (reusable && c->priv == NULL && b->m != NULL && b->side.len == 0 &&
            !b->side.eof_in && !b->side.failed) {
            b->owner = c;
            c->priv = b;
        } else {
            conn_close(w, b);
        }
        return;
    }
    if (!reusable || b->m == NULL || b->m->nidle >= keepalive ||
        b->side.len > 0 || b->side.eof_in || b->side.failed ||
        atomic_load_explicit(&b->m->server->state, memory_order_relaxed) ==
            SERVER_REMOVED) {
        conn_close(w, b);
        return;
    }
    b->next = b->m->idle;
    b->m->idle = b;
    b->m->nidle++;
    b->idle = true;
}

/* ---- closing ------------------------------------------------------------- */

static void
release_server(struct hclient *c)
{
    engine_release_member(c->pool, &c->server, &c->counted);
}

static void
client_close(struct worker *w, struct hclient *c)
{
    INVARIANT(c->state != H_CLOSED);
    worker_soon_cancel(w, &c->more);
    worker_timer_del(w, &c->timer);
    be_drop(w, c);
    if (c->priv != NULL)
        conn_close(w, c->priv);
    release_server(c);
    atomic_fetch_sub_explicit(&c->pool->active, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
    io_side_close(&c->side);
    buf_free(&c->in);
    buf_free(&c->up);
    buf_free(&c->down);
    buf_free(&c->rhead);
    free(c->logbuf);
    worker_conn_del(&c->link);
    pool_unref(c->pool);
    c->pool = NULL;
    c->state = H_CLOSED;
    worker_defer_free(w, c);
}

static void
client_link_close(struct worker *w, struct worker_conn *l)
{
    client_close(w, WORKER_OF(l, struct hclient, link));
}

/* ---- timers -------------------------------------------------------------- */

/* What the timer waits for in the client's state, from c->last_ms; 0:
 * nothing. */
static uint32_t
state_limit(const struct hclient *c)
{
    switch (c->state) {
    case H_PROXY:
        return c->connect_timeout_ms > PROXY_WAIT_MIN_MS ? c->connect_timeout_ms
                                                         : PROXY_WAIT_MIN_MS;
    case H_HEAD:
    case H_TUNNEL:
        return c->idle_timeout_ms;
    case H_CONNECT:
        return c->connect_timeout_ms;
    case H_FORWARD:
        return c->timeout_ms;
    case H_CLOSING:
        return CLOSING_MS;
    default:
        return 0;
    }
}

static void
arm(struct worker *w, struct hclient *c)
{
    uint32_t limit = state_limit(c);

    c->last_ms = w->now_ms;
    if (limit > 0)
        worker_timer_set(w, &c->timer, w->now_ms + limit);
    else
        worker_timer_del(w, &c->timer);
}

/* ---- the access log -------------------------------------------------------
 */

static uint64_t
now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The request's line in its pool's access log, when it keeps one. */
static void
log_request(struct hclient *c)
{
    const struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct access_log *alog = snap->set.access_log;
    struct access_entry e = {0};
    char key[CONF_KEY_NAME_MAX + 16];

    if (alog == NULL)
        return;
    engine_access_entry(&e, c->pool, &c->peer, c->peerlen, c->server,
                        c->decided ? c->routing : ACCESS_NO_ROUTING,
                        c->attempts);
    e.duration_ms = (now_us() - c->start_us) / 1000;
    e.bytes_in = c->req_in;
    e.bytes_out = c->req_out;
    e.method = c->logbuf != NULL && c->log_method > 0 ? c->logbuf : "-";
    e.method_len = c->logbuf != NULL && c->log_method > 0 ? c->log_method : 1;
    e.target = c->logbuf != NULL && c->log_target > 0
                   ? c->logbuf + ACCESS_METHOD_MAX
                   : "-";
    e.target_len = c->logbuf != NULL && c->log_target > 0 ? c->log_target : 1;
    e.version = c->minor == 0 ? "HTTP/1.0" : "HTTP/1.1";
    e.version_len = 8;
    e.status = c->status;
    if (c->decided) {
        const struct conf_key_source *k =
            c->key_link < snap->set.nhash_chain
                ? &snap->set.hash_chain[c->key_link]
                : NULL;
        if (k == NULL)
            snprintf(key, sizeof(key), "source_ip");
        else if (k->name[0] != '\0')
            snprintf(key, sizeof(key), "%s:%s", conf_hash_key_name(k->kind),
                     k->name);
        else
            snprintf(key, sizeof(key), "%s", conf_hash_key_name(k->kind));
        e.key_source = key;
    }
    e.error = c->error;
    access_log_write(alog, &e);
}

/* With an access log: keep the request's method and target (cut). */
static void
log_keep(struct hclient *c, const char *buf, const struct http_request *rq)
{
    if (pool_snapshot(c->pool)->set.access_log == NULL)
        return;
    if (c->logbuf == NULL &&
        (c->logbuf = malloc(ACCESS_METHOD_MAX + ACCESS_TARGET_MAX)) == NULL)
        return;
    c->log_method = rq->method_text.len < ACCESS_METHOD_MAX
                        ? rq->method_text.len
                        : ACCESS_METHOD_MAX;
    memcpy(c->logbuf, buf + rq->method_text.off, c->log_method);
    c->log_target =
        rq->target.len < ACCESS_TARGET_MAX ? rq->target.len : ACCESS_TARGET_MAX;
    memcpy(c->logbuf + ACCESS_METHOD_MAX, buf + rq->target.off, c->log_target);
}

/* ---- answers chashd writes ----------------------------------------------- */

/* The request is over (answered, or refused): the member connection goes
 * back (or is closed), and the client waits for its next request, or is
 * closed once its answer is out. */
static void
request_end(struct worker *w, struct hclient *c, bool reusable)
{
    const struct pool_snapshot *snap = pool_snapshot(c->pool);

    log_request(c);
    conn_release(w, c, reusable, snap->set.backend_keepalive);
    release_server(c);
    buf_reset(&c->up, IO_BUF);
    c->up_sent = 0;
    c->rhead.off = c->rhead.len = 0;
    if (!c->keep_alive || c->close_after || !c->body_done || c->side.eof_in) {
        c->state = H_CLOSING;
    } else {
        c->state = H_HEAD;
    }
    arm(w, c);
}

/* Answer <status> in place of a member's response (none of which reached
 * the client). */
static void
respond(struct worker *w, struct hclient *c, int status, const char *detail,
        bool close, unsigned retry_after)
{
    char out[512];
    size_t n;

    INVARIANT(!c->replied);
    if (close || !c->body_done)
        c->close_after = true;
    n = http_error_response(out, sizeof(out), status, detail, c->close_after,
                            retry_after);
    c->replied = true;
    c->status = status;
    c->error = detail;
    c->req_out += n;
    stats_add(&c->pool->stats[w->id].refused, 1);
    if (n == 0 || buf_append(&c->down, out, n) != 0)
        c->close_after = true;
    log_debug("pool %s: %s answered %d: %s", c->pool->name, c->ip, status,
              detail ? detail : "");
    request_end(w, c, false);
}

/* The client broke its request after it was on its way to the member
 * (a malformed chunk, a body over client_max_request): the member
 * connection cannot be reused (the request is cut), the member did
 * nothing wrong, and the client is answered <status> and closed. */
static void
client_fault(struct worker *w, struct hclient *c, int status, const char *why)
{
    be_drop(w, c);
    release_server(c);
    stats_add(&c->pool->stats[w->id].protocol_errors, 1);
    log_info_limited(10, "pool %s: request body from %s refused (%d): %s",
                     c->pool->name, c->ip, status, why);
    if (c->replied) {
        client_close(w, c);
        return;
    }
    respond(w, c, status, why, true, 0);
}

/* ---- the request --------------------------------------------------------- */

/* The head chashd sends the member: the request line and the headers as
 * they came, less the hop-by-hop ones, plus the framing and forwarding
 * headers of this hop. */
static int
build_head(struct hclient *c, const char *buf, const struct http_request *rq,
           const struct pool_settings *set)
{
    struct buf *b = &c->up;
    char line[INET6_ADDRSTRLEN + 64];
    int rc = 0;

    rc |= buf_append(b, buf + rq->line.off, rq->line.len);
    rc |= buf_str(b, "\r\n");
    for (size_t i = 0; i < rq->nheaders; i++) {
        const struct http_header *h = &rq->headers[i];

        if (h->hop_by_hop && !(rq->upgrade && h->known == HTTP_H_UPGRADE))
            continue;
        if (h->known == HTTP_H_X_FORWARDED_PROTO &&
            (set->forward_headers & CONF_FWD_X_FORWARDED_PROTO))
            continue; /* ours replaces it: this hop is plain http */
        rc |= buf_append(b, buf + h->line.off, h->line.len);
    }
    if (rq->upgrade)
        rc |= buf_str(b, "Connection: upgrade\r\n");
    else if (rq->minor == 0)
        rc |= buf_str(b, "Connection: keep-alive\r\n");
    if (rq->body == HTTP_BODY_CHUNKED)
        rc |= buf_str(b, "Transfer-Encoding: chunked\r\n");
    if ((set->forward_headers & CONF_FWD_X_FORWARDED_FOR) && c->ip[0]) {
        snprintf(line, sizeof(line), "X-Forwarded-For: %s\r\n", c->ip);
        rc |= buf_str(b, line);
    }
    if (set->forward_headers & CONF_FWD_X_FORWARDED_PROTO)
        rc |= buf_str(b, "X-Forwarded-Proto: http\r\n");
    if ((set->forward_headers & CONF_FWD_FORWARDED) && c->ip[0]) {
        snprintf(line, sizeof(line),
                 c->v6 ? "Forwarded: for=\"[%s]\";proto=http\r\n"
                       : "Forwarded: for=%s;proto=http\r\n",
                 c->ip);
        rc |= buf_str(b, line);
    }
    rc |= buf_str(b, "\r\n");
    return rc != 0 ? -1 : 0;
}

/* A whole request head is at the start of c->in: route it. */
static void
request_start(struct worker *w, struct hclient *c, struct http_request *rq)
{
    const struct pool_snapshot *snap = pool_snapshot(c->pool);
    const struct pool_settings *set = &snap->set;
    const char *buf = c->in.data + c->in.off, *key;
    char keybuf[KEY_MAX];
    size_t klen;

    c->method = rq->method;
    c->minor = rq->minor;
    c->keep_alive = rq->keep_alive;
    c->upgrade = rq->upgrade;
    c->idempotent = http_method_idempotent(rq->method);
    c->retryable = true;
    c->body = rq->body;
    c->body_left = rq->length;
    c->body_total = 0;
    memset(&c->chunk, 0, sizeof(c->chunk));
    c->body_done = rq->body == HTTP_BODY_NONE ||
                   (rq->body == HTTP_BODY_LENGTH && rq->length == 0);
    c->start_us = now_us();
    c->attempts = 0;
    c->decided = c->stale_retried = c->timed_out = false;
    c->answered = c->replied = c->close_after = false;
    c->rstate = R_HEAD;
    c->status = 0;
    c->error = NULL;
    c->req_in = rq->head;
    c->req_out = 0;
    c->log_method = c->log_target = 0;
    log_keep(c, buf, rq);
    c->connect_timeout_ms = set->connect_timeout_ms;
    c->timeout_ms = set->timeout_ms;
    c->idle_timeout_ms = set->idle_timeout_ms;
    c->retries = set->retries;
    c->max_body = set->client_max_request;
    stats_add(&c->pool->stats[w->id].requests, 1);
    buf_reset(&c->up, IO_BUF);
    c->up_sent = 0;
    if (build_head(c, buf, rq, set) != 0) {
        c->in.off += rq->head;
        respond(w, c, 500, "out of memory", true, 0);
        return;
    }
    c->key_link =
        http_request_key(buf, rq, set->hash_chain, set->nhash_chain, c->ip,
                         c->ipport, keybuf, sizeof(keybuf), &key, &klen);
    c->hash = snap->ring != NULL ? chash_ring_hash(snap->ring, key, klen) : 0;
    if (set->hot && c->pool->hot != NULL)
        hot_note(&c->pool->hot[w->id], w->now_ms, key, klen,
                 hot_hash(key, klen));
    c->in.off += rq->head;
    if (rq->body == HTTP_BODY_LENGTH && rq->length > c->max_body) {
        respond(w, c, 413, "the body is larger than client_max_request", true,
                0);
        return;
    }
    connect_next(w, c);
}

/* Parse what c->in holds: a request starts, or a refusal is answered. */
static void
parse_next(struct worker *w, struct hclient *c)
{
    struct hworker *hw = w->http;
    const struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct http_request rq;
    int rc;

    if (c->in.len == c->in.off)
        return;
    memset(&rq, 0, sizeof(rq));
    rq.headers = hw->headers;
    rq.max_head = snap->set.client_max_header;
    rq.max_uri = snap->set.client_max_uri;
    rc = http_parse_request(c->in.data + c->in.off, c->in.len - c->in.off, &rq);
    if (rc == PROTO_AGAIN)
        return;
    if (rc != PROTO_OK) {
        stats_add(&c->pool->stats[w->id].protocol_errors, 1);
        stats_add(&c->pool->stats[w->id].requests, 1);
        log_info_limited(10, "pool %s: request from %s refused (%d): %s",
                         c->pool->name, c->ip, rq.status, rq.err);
        c->req_in = c->in.len - c->in.off;
        c->in.off = c->in.len; /* out of sync: nothing after it is read */
        c->start_us = now_us();
        c->decided = false;
        c->attempts = 0;
        c->req_out = 0;
        c->log_method = c->log_target = 0;
        c->minor = 1;
        c->body_done = true;
        c->replied = false;
        c->keep_alive = false;
        c->state = H_FORWARD; /* respond() ends the request */
        respond(w, c, rq.status ? rq.status : 400, rq.err, true, 0);
        return;
    }
    request_start(w, c, &rq);
}

/* ---- choosing and connecting --------------------------------------------- */

/* The member connection is ready: send the request. */
static void
established(struct worker *w, struct hclient *c)
{
    c->be->connecting = false;
    /* send_proxy: the header first, on the fresh (empty) socket */
    if (c->hello_len > 0 &&
        io_side_write(&c->be->side, c->hello, c->hello_len, false) < 0) {
        connect_failed(w, c, false, errno);
        return;
    }
    stats_add(&c->server->stats[w->id].conns_total, 1);
    c->state = H_FORWARD;
    arm(w, c);
}

static void
connect_failed(struct worker *w, struct hclient *c, bool timeout, int err)
{
    struct server *s = c->server;

    engine_connect_failed(w, c->pool, s, timeout, err);
    if (c->attempts <= TRIED_MAX)
        c->tried[c->attempts - 1] = s->id;
    c->timed_out = timeout;
    be_drop(w, c);
    release_server(c);
    connect_next(w, c);
}

/* A new connection to c->server. 0: connecting or connected (the state
 * says which), -1: failed at once (handled). */
static void
connect_new(struct worker *w, struct hclient *c, struct hmember *m)
{
    struct server *s = c->server;
    const struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct hconn *b = calloc(1, sizeof(*b));
    int fd = -1, dial;

    dial = b != NULL ? engine_member_dial(s, snap->set.tcpkeepalive, &fd)
                     : ENGINE_NO_SOCKET;
    if (dial == ENGINE_NO_SOCKET) {
        int err = b != NULL ? errno : ENOMEM;
        free(b);
        log_warn("pool %s: socket: %s", c->pool->name, strerror(err));
        release_server(c);
        stats_add(&c->pool->stats[w->id].no_member, 1);
        respond(w, c, 503, "no socket for a member connection", false, 1);
        return;
    }
    io_side_init(&b->side, fd, backend_event);
    b->link.close = conn_link_close;
    b->m = m;
    m->nconns++;
    b->c = c;
    c->be = b;
    worker_conn_add(w, &b->link);
    if (dial == ENGINE_CONNECT_FAILED) {
        connect_failed(w, c, false, errno);
        return;
    }
    if (io_side_register(w, &b->side) < 0) {
        connect_failed(w, c, false, errno);
        return;
    }
    if (dial == ENGINE_CONNECTED) {
        established(w, c);
        return;
    }
    b->connecting = true;
    c->state = H_CONNECT;
    arm(w, c);
}

/* Pick the request's member (skipping those that failed it) and a
 * connection to it: an idle one, or a new one. */
static void
connect_next(struct worker *w, struct hclient *c)
{
    struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct stats_pool *st = &c->pool->stats[w->id];
    struct hworker *hw = w->http;
    size_t ntried = c->attempts < TRIED_MAX ? c->attempts : TRIED_MAX;
    struct hmember *m;
    struct hconn *b;
    struct server *s;
    int decision;

    c->rstate = R_HEAD;
    c->rhead.off = c->rhead.len = 0;
    c->answered = false;
    c->up_sent = 0;
    if (c->attempts > c->retries) {
        log_info_limited(10, "pool %s: request from %s failed on %u members",
                         c->pool->name, c->ip, c->attempts);
        respond(w, c, c->timed_out ? 504 : 502,
                c->timed_out ? "the member timed out"
                             : "the member refused or reset the connection",
                false, 0);
        return;
    }
    s = snap->ring != NULL
            ? pool_choose(c->pool, snap, c->hash, c->tried, ntried, &decision)
            : (decision = STATS_NO_MEMBER, NULL);
    if (!c->decided || s == NULL)
        engine_count_decision(st, decision);
    c->decided = true;
    c->routing = decision;
    if (s == NULL) {
        respond(w, c, 503,
                decision == STATS_REFUSED_ERROR
                    ? "the key's member is not up (on_failure: error)"
                    : "no member can take the request",
                false, 1);
        return;
    }
    c->attempts++;
    if (c->attempts > 1)
        stats_add(&st->retries, 1);
    server_ref(s);
    c->server = s;
    c->counted = true; /* s->active: taken by pool_choose */
    atomic_fetch_add_explicit(&c->pool->active_backends, 1,
                              memory_order_relaxed);
    m = member_get(hw, s);
    if (m == NULL) {
        release_server(c);
        respond(w, c, 500, "out of memory", true, 0);
        return;
    }
    if (c->hello_len > 0) {
        /* send_proxy: only this client's own connection may be reused */
        b = c->priv;
        if (b != NULL) {
            c->priv = NULL;
            b->owner = NULL;
            if (b->m != m || b->side.eof_in || b->side.rdhup ||
                b->side.failed || b->side.readable) {
                conn_close(w, b);
                b = NULL;
            }
        }
    } else {
        b = idle_take(w, m);
    }
    if (b != NULL) {
        b->c = c;
        b->reused = true;
        c->be = b;
        c->state = H_FORWARD;
        arm(w, c);
        return;
    }
    connect_new(w, c, m);
}

/* A retry decided inside run() (a member failed while its response was
 * read) may take an idle connection, or one connected at once: the state
 * stays H_FORWARD with every buffer as it was, which run() reads as "no
 * progress", and no event of the new connection is due -- the request
 * would wait for the timer (forever with `timeout: 0`). Run once more. */
static void
retry_soon(struct worker *w, struct hclient *c)
{
    if (c->state != H_CLOSED)
        worker_soon(w, &c->more);
}

/*
 * The member failed the request (reset, closed, garbage, timeout): count
 * it, then try the next member when nothing reached the client yet and the
 * request may be sent again, else answer 502/504 (or cut the client when
 * its response had begun).
 */
static void
member_failed(struct worker *w, struct hclient *c, const char *why,
              bool timeout, bool garbage)
{
    struct server *s = c->server;
    struct hconn *b = c->be;
    bool stale = b != NULL && b->reused && !c->answered && !timeout &&
                 !garbage && !c->stale_retried;

    be_drop(w, c);
    if (s != NULL && !stale) {
        uint32_t fails;
        if (timeout)
            stats_add(&s->stats[w->id].request_timeouts, 1);
        else
            stats_add(&s->stats[w->id].request_failures, 1);
        if (!c->answered)
            stats_add(&s->stats[w->id].early_closes, 1);
        fails = pool_member_failed(c->pool, s);
        log_info_limited(10,
                         "pool %s: member %s (%s) %s (%u failures in a row)",
                         c->pool->name, s->name, s->addr.text, why, fails);
    }
    if (c->replied) {
        c->close_after = true;
        release_server(c);
        client_close(w, c); /* a response cut short: nothing else says so */
        return;
    }
    c->timed_out = timeout;
    if (stale && c->idempotent && c->retryable) {
        /* An idle connection the member closed as it was taken: the same
         * member again, on a new connection; not its failure. */
        c->stale_retried = true;
        struct hmember *m = member_get(w->http, c->server);
        c->rstate = R_HEAD;
        c->rhead.off = c->rhead.len = 0;
        c->up_sent = 0;
        if (m != NULL) {
            connect_new(w, c, m);
            retry_soon(w, c);
            return;
        }
    }
    if (s != NULL && c->attempts <= TRIED_MAX)
        c->tried[c->attempts - 1] = s->id;
    release_server(c);
    if (!garbage && c->idempotent && c->retryable) {
        connect_next(w, c);
        retry_soon(w, c);
        return;
    }
    respond(w, c, timeout ? 504 : 502, why, !c->body_done, 0);
}

/* ---- moving bytes -------------------------------------------------------- */

/* Read what the client sent into c->in, up to its cap. -1: the client
 * reset; else whether the read budget ran out with input left. */
static int
client_read(struct worker *w, struct hclient *c)
{
    int reads = 0;

    while (c->side.readable && !c->side.eof_in) {
        size_t room;
        ssize_t n;

        if (c->in.len - c->in.off >= c->in_cap)
            return 0; /* full: read once it is consumed */
        if (reads++ == PUMP_READS)
            return 1;
        if (buf_reserve(&c->in, IO_BUF) != 0)
            return -1;
        room = c->in.cap - c->in.len;
        n = io_side_read(&c->side, c->in.data + c->in.len, room);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        /* A head's idle_timeout runs from its first byte: the bytes after
         * it do not extend it, or a client sending a byte at a time would
         * keep its connection forever (slowloris). Elsewhere a byte is
         * traffic. */
        if (c->state != H_HEAD || c->in.len == c->in.off)
            c->last_ms = w->now_ms;
        c->in.len += (size_t)n;
        stats_add(&c->pool->stats[w->id].bytes_in, (uint64_t)n);
    }
    return 0;
}

/* Move the request's body from c->in to c->up, as its framing allows.
 * -1: the body is malformed or too large (answered). */
static int
body_up(struct worker *w, struct hclient *c)
{
    while (!c->body_done && c->in.len > c->in.off &&
           c->up.len - c->up_sent < IO_BUF) {
        const char *p = c->in.data + c->in.off;
        size_t avail = c->in.len - c->in.off, n = avail;

        if (c->body == HTTP_BODY_LENGTH) {
            if (n > c->body_left)
                n = (size_t)c->body_left;
            c->body_left -= n;
            c->body_done = c->body_left == 0;
        } else {
            const char *err = NULL;
            bool done = false;
            ssize_t k = http_chunked_scan(
                &c->chunk, p, avail,
                (size_t)pool_snapshot(c->pool)->set.client_max_header, &done,
                &err);
            if (k < 0) {
                client_fault(w, c, 400, err);
                return -1;
            }
            n = (size_t)k;
            c->body_done = done;
        }
        c->body_total += n;
        c->req_in += n;
        if (c->body_total > c->max_body) {
            c->body_done = false;
            client_fault(w, c, 413,
                         "the body is larger than client_max_request");
            return -1;
        }
        if (buf_append(&c->up, p, n) != 0) {
            client_fault(w, c, 500, "out of memory");
            return -1;
        }
        c->in.off += n;
        if (c->up.len > RETRY_MAX)
            c->retryable = false;
    }
    return 0;
}

/* The head chashd gives the client: the member's status line and headers
 * less the hop-by-hop ones, plus this hop's framing and connection. */
static int
response_head(struct hclient *c, const char *buf,
              const struct http_response *rp)
{
    struct buf *b = &c->down;
    const char *eol = memchr(buf, '\n', rp->head);
    int rc = 0;

    rc |= buf_append(b, buf, (size_t)(eol - buf) + 1);
    for (size_t i = 0; i < rp->nheaders; i++) {
        const struct http_header *h = &rp->headers[i];
        if (!h->hop_by_hop)
            rc |= buf_append(b, buf + h->line.off, h->line.len);
    }
    if (rp->body == HTTP_BODY_CHUNKED)
        rc |= buf_str(b, "Transfer-Encoding: chunked\r\n");
    if (pool_snapshot(c->pool)->set.member_header && c->server != NULL) {
        rc |= buf_str(b, "X-Chash-Member: ");
        rc |= buf_str(b, c->server->name);
        rc |= buf_str(b, "\r\n");
    }
    if (c->close_after || !c->keep_alive)
        rc |= buf_str(b, "Connection: close\r\n");
    else if (c->minor == 0)
        rc |= buf_str(b, "Connection: keep-alive\r\n");
    rc |= buf_str(b, "\r\n");
    return rc != 0 ? -1 : 0;
}

/* The response is all out of the member: count it, end the request. */
static void
response_done(struct worker *w, struct hclient *c, bool extra)
{
    struct server *s = c->server;
    uint64_t us = now_us() - c->start_us;
    bool reusable = c->rkeep && c->body_done && !extra;

    if (s != NULL) {
        struct stats_server *st = &s->stats[w->id];
        stats_add(&st->requests, 1);
        stats_add(&st->latency[stats_latency_bucket(us)], 1);
        stats_add(&st->latency_sum_us, us);
    }
    request_end(w, c, reusable);
}

/* <n> bytes for the client, after what waits in c->down: both go in one
 * write when the socket's own buffer is empty (no copy of <p>), and
 * what the socket does not take is queued. -1: the client is gone. */
static int
down_put(struct hclient *c, const char *p, size_t n)
{
    if (c->side.len == 0) {
        size_t pend = c->down.len - c->down.off;
        struct iovec iov[2];
        int niov = 0;
        ssize_t m;

        if (pend > 0) {
            iov[0].iov_base = c->down.data + c->down.off;
            iov[0].iov_len = pend;
            niov = 1;
        }
        iov[niov].iov_base = (void *)(uintptr_t)p;
        iov[niov].iov_len = n;
        niov++;
        m = io_side_sendv(&c->side, iov, niov);
        if (m < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (m < 0)
            m = 0;
        if ((size_t)m < pend) {
            c->down.off += (size_t)m; /* the sent mark (out_flush's) */
            return buf_append(&c->down, p, n);
        }
        c->down.off = c->down.len = 0;
        p += (size_t)m - pend;
        n -= (size_t)m - pend;
        if (n == 0)
            return 0;
    }
    return buf_append(&c->down, p, n);
}

/* Bytes of the response body: to the client, as the framing allows. */
static void
body_down(struct worker *w, struct hclient *c, const char *p, size_t n)
{
    size_t take = n;
    bool done = false;

    if (c->rbody == HTTP_BODY_LENGTH) {
        if (take > c->rleft)
            take = (size_t)c->rleft;
        c->rleft -= take;
        done = c->rleft == 0;
    } else if (c->rbody == HTTP_BODY_CHUNKED) {
        const char *err = NULL;
        ssize_t k =
            http_chunked_scan(&c->rchunk, p, n, RESP_HEAD_MAX, &done, &err);
        if (k < 0) {
            member_failed(w, c, err, false, true);
            return;
        }
        take = (size_t)k;
    }
    c->req_out += take;
    if (take > 0 && down_put(c, p, take) != 0) {
        client_close(w, c);
        return;
    }
    if (done)
        response_done(w, c, take < n);
}

/* The member switched protocols (101, to the client's Upgrade): its
 * head verbatim (<buf>, <len> bytes), and everything after it, both ways:
 * the tunnel starts. */
static void
tunnel_start(struct worker *w, struct hclient *c, const char *buf, size_t len)
{
    c->replied = true;
    c->status = 101;
    c->req_out += len;
    log_request(c);
    if (buf_append(&c->down, buf, len) != 0) {
        client_close(w, c);
        return;
    }
    c->rhead.off = c->rhead.len = 0;
    c->retryable = false;
    c->up.off = c->up.len = c->up_sent = 0;
    c->state = H_TUNNEL;
    /* what the client sent after its request is the tunnel's */
    if (c->in.len > c->in.off && buf_append(&c->up, c->in.data + c->in.off,
                                            c->in.len - c->in.off) != 0) {
        client_close(w, c);
        return;
    }
    c->in.off = c->in.len = 0;
    arm(w, c);
}

/* Bytes from the member while its response head is not all in. */
static void
head_down(struct worker *w, struct hclient *c, const char *p, size_t n)
{
    struct hworker *hw = w->http;
    /* Parsed where the bytes are: in the read buffer when no part of a
     * head waits in rhead (the usual case, no copy), else in rhead. */
    bool direct = c->rhead.len == c->rhead.off;
    const char *buf = p;
    size_t len = n;

    if (!direct) {
        if (buf_append(&c->rhead, p, n) != 0) {
            client_close(w, c);
            return;
        }
        buf = c->rhead.data + c->rhead.off;
        len = c->rhead.len - c->rhead.off;
    }
    for (;;) {
        struct http_response rp;
        int rc;

        memset(&rp, 0, sizeof(rp));
        rp.headers = hw->headers;
        rc = http_parse_response(buf, len, c->method, RESP_HEAD_MAX, &rp);
        if (rc == PROTO_AGAIN) {
            /* keep the part of a head for the next read */
            if (direct) {
                c->rhead.off = c->rhead.len = 0;
                if (buf_append(&c->rhead, buf, len) != 0)
                    client_close(w, c);
            } else {
                c->rhead.off = (size_t)(buf - c->rhead.data);
            }
            return;
        }
        if (rc != PROTO_OK) {
            member_failed(w, c, rp.err, false, true);
            return;
        }
        if (rp.status == 101) {
            if (!c->upgrade) {
                member_failed(w, c, "switched protocols unasked", false, true);
                return;
            }
            tunnel_start(w, c, buf, len);
            return;
        }
        if (rp.status < 200) {
            /* 100 Continue and the like: an HTTP/1.0 client gets none. */
            c->req_out += c->minor == 1 ? rp.head : 0;
            if (c->minor == 1 && buf_append(&c->down, buf, rp.head) != 0) {
                client_close(w, c);
                return;
            }
            buf += rp.head;
            len -= rp.head;
            continue;
        }
        if (rp.body == HTTP_BODY_CHUNKED && c->minor == 0) {
            member_failed(w, c, "a chunked response to an HTTP/1.0 request",
                          false, true);
            return;
        }
        c->rbody = rp.body;
        c->rleft = rp.length;
        c->rkeep = rp.keep_alive;
        memset(&c->rchunk, 0, sizeof(c->rchunk));
        if (rp.body == HTTP_BODY_CLOSE)
            c->close_after = true;
        c->status = rp.status;
        size_t before = c->down.len;
        if (response_head(c, buf, &rp) != 0) {
            client_close(w, c);
            return;
        }
        c->req_out += c->down.len - before;
        c->replied = true;
        c->rstate = R_BODY;
        {
            size_t rest = len - rp.head;
            const char *after = buf + rp.head;
            if (rp.body == HTTP_BODY_NONE ||
                (rp.body == HTTP_BODY_LENGTH && rp.length == 0)) {
                response_done(w, c, rest > 0);
                return;
            }
            /* What came after the head is body. <after> stays valid: it
             * is the read buffer, or rhead, which is emptied, never freed,
             * and read into only by the next response. */
            c->rhead.off = c->rhead.len = 0;
            if (rest > 0)
                body_down(w, c, after, rest);
            return;
        }
    }
}

/* Read the member's response and pass it on, while the client takes it. */
static int
forward_down(struct worker *w, struct hclient *c)
{
    struct hworker *hw = w->http;
    int reads = 0;

    while (c->state == H_FORWARD && c->be != NULL) {
        struct hconn *b = c->be;
        ssize_t n;
        int rc = out_flush(&c->side, &c->down, &c->down.off, false);

        if (rc < 0) {
            client_close(w, c);
            return 0;
        }
        if (rc == 0)
            return 0; /* the client's output edge brings us back */

        if (!b->side.readable || b->side.eof_in) {
            if (!b->side.eof_in)
                return 0;
            /* The member closed. */
            if (c->rstate == R_BODY && c->rbody == HTTP_BODY_CLOSE) {
                response_done(w, c, false);
            } else {
                member_failed(w, c,
                              c->answered ? "closed the connection mid-response"
                                          : "closed the connection before its "
                                            "first byte",
                              false, false);
            }
            return 0;
        }
        if (reads++ == PUMP_READS)
            return 1;
        n = io_side_read(&b->side, hw->rbuf, sizeof(hw->rbuf));
        if (n < 0) {
            member_failed(w, c, "reset the connection", false, false);
            return 0;
        }
        if (n == 0)
            continue; /* drained (readable cleared), or FIN (eof_in) */
        stats_add(&c->server->stats[w->id].bytes_in, (uint64_t)n);
        stats_add(&c->pool->stats[w->id].bytes_out, (uint64_t)n);
        c->last_ms = w->now_ms;
        if (!c->answered) {
            c->answered = true;
            if (atomic_load_explicit(&c->server->fails, memory_order_relaxed))
                atomic_store_explicit(&c->server->fails, 0,
                                      memory_order_relaxed);
        }
        if (c->rstate == R_HEAD)
            head_down(w, c, hw->rbuf, (size_t)n);
        else
            body_down(w, c, hw->rbuf, (size_t)n);
        if (c->state == H_CLOSED)
            return 0;
    }
    return 0;
}

/* The request (head and body) to the member. */
static int
forward_up(struct worker *w, struct hclient *c)
{
    struct hconn *b = c->be;
    int more = 0, rc;

    for (;;) {
        rc = out_flush(&b->side, &c->up, &c->up_sent, c->retryable);
        if (rc < 0) {
            member_failed(w, c, "reset the connection", false, false);
            return 0;
        }
        if (rc == 0 || c->body_done)
            break;
        if (!c->retryable) {
            c->up.off = c->up.len = c->up_sent = 0;
        }
        if (c->in.len == c->in.off) {
            more = client_read(w, c);
            if (more < 0) {
                client_close(w, c);
                return 0;
            }
            if (c->in.len == c->in.off) {
                if (c->side.eof_in) {
                    /* the client went away in the middle of its body */
                    client_close(w, c);
                    return 0;
                }
                break;
            }
        }
        if (body_up(w, c) < 0)
            return 0;
    }
    return more;
}

/* After a 101: bytes both ways until both ends are done. */
static int
tunnel(struct worker *w, struct hclient *c)
{
    struct hconn *b = c->be;
    int more = 0;

    for (int dir = 0; dir < 2; dir++) {
        struct io_side *from = dir == 0 ? &c->side : &b->side;
        struct io_side *to = dir == 0 ? &b->side : &c->side;
        struct buf *q = dir == 0 ? &c->up : &c->down;
        size_t *sent = dir == 0 ? &c->up_sent : &c->down.off;
        int reads = 0, rc;

        for (;;) {
            ssize_t n;

            rc = out_flush(to, q, sent, false);
            if (rc < 0)
                return -1;
            if (rc == 0)
                break;
            if (!from->readable || from->eof_in)
                break;
            if (reads++ == PUMP_READS) {
                more = 1;
                break;
            }
            n = io_side_read(from, w->scratch, IO_BUF);
            if (n < 0)
                return -1;
            if (n == 0)
                continue;
            c->last_ms = w->now_ms;
            if (buf_append(q, w->scratch, (size_t)n) != 0)
                return -1;
        }
        if (from->eof_in && out_empty(to, q, *sent))
            io_side_shutdown(to);
    }
    if (c->side.eof_in && b->side.eof_in &&
        out_empty(&b->side, &c->up, c->up_sent) &&
        out_empty(&c->side, &c->down, c->down.off))
        return -1;
    return more;
}

/* ---- the PROXY protocol -------------------------------------------------- */

/* send_proxy: the header for a connection from <src> to <dst> (NULL: the
 * address the client reached). */
static void
hello_make(struct hclient *c, int version, const struct sockaddr *src,
           socklen_t srclen, const struct sockaddr *dst, socklen_t dstlen)
{
    c->hello_len = engine_proxy_hello(c->side.fd, version, src, srclen, dst,
                                      dstlen, c->hello);
}

/* The client's address as the keys and X-Forwarded-For write it. */
static void
client_address(struct hclient *c, const struct sockaddr *peer, socklen_t len)
{
    if (tcp_conn_key(peer, len, CONF_HASH_KEY_SOURCE_IP, c->ip, sizeof(c->ip)) <
        0)
        c->ip[0] = '\0'; /* a unix client: no address */
    if (tcp_conn_key(peer, len, CONF_HASH_KEY_SOURCE_IP_PORT, c->ipport,
                     sizeof(c->ipport)) < 0)
        c->ipport[0] = '\0';
    c->v6 = strchr(c->ip, ':') != NULL;
}

/* accept_proxy: the header at the start of c->in. 1: taken (the client's
 * address is its), 0: more to come, -1: refused (closed). */
static int
proxy_take(struct worker *w, struct hclient *c)
{
    const struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct proxy_header h;
    const char *err = NULL;
    int r =
        proxy_parse(c->in.data + c->in.off, c->in.len - c->in.off, &h, &err);

    if (r == PROXY_AGAIN && !c->side.eof_in)
        return 0;
    if (r != PROXY_OK) {
        stats_add(&c->pool->stats[w->id].protocol_errors, 1);
        log_warn_limited(10,
                         "pool %s: client %s closed: no valid PROXY header "
                         "(accept_proxy): %s",
                         c->pool->name, c->ipport,
                         r == PROXY_AGAIN ? "the client closed before it"
                                          : err);
        client_close(w, c);
        return -1;
    }
    c->in.off += h.len;
    if (!h.local) {
        client_address(c, (const struct sockaddr *)&h.src, h.srclen);
        memcpy(&c->peer, &h.src, sizeof(c->peer));
        c->peerlen = h.srclen;
    }
    if (snap->set.send_proxy != CONF_PROXY_OFF) {
        if (h.local) {
            struct sockaddr_storage peer;
            socklen_t plen = sizeof(peer);
            if (getpeername(c->side.fd, (struct sockaddr *)&peer, &plen) < 0)
                plen = 0;
            hello_make(c, snap->set.send_proxy, (struct sockaddr *)&peer, plen,
                       NULL, 0);
        } else {
            hello_make(c, snap->set.send_proxy, (const struct sockaddr *)&h.src,
                       h.srclen, (const struct sockaddr *)&h.dst, h.dstlen);
        }
    }
    c->state = H_HEAD;
    arm(w, c);
    return 1;
}

/* ---- the state machine --------------------------------------------------- */

static void
run(struct worker *w, struct hclient *c)
{
    int more = 0, round;

    for (round = 0; round < 16 && c->state != H_CLOSED; round++) {
        int before = c->state;
        size_t in_len = c->in.len, in_off = c->in.off;
        size_t down_len = c->down.len, down_off = c->down.off;

        switch (c->state) {
        case H_PROXY:
            if (client_read(w, c) < 0) {
                client_close(w, c);
                return;
            }
            if (c->in.len > c->in.off || c->side.eof_in)
                if (proxy_take(w, c) < 0)
                    return;
            break;
        case H_HEAD:
            if (out_flush(&c->side, &c->down, &c->down.off, false) < 0) {
                client_close(w, c);
                return;
            }
            more = client_read(w, c);
            if (more < 0) {
                client_close(w, c);
                return;
            }
            parse_next(w, c);
            if (c->state == H_HEAD && c->side.eof_in) {
                /* the client is done: its last answer out, then close */
                c->state = H_CLOSING;
                arm(w, c);
            }
            break;
        case H_CONNECT:
            /* the body waits in c->in (bounded) until the member is there */
            if (client_read(w, c) < 0) {
                client_close(w, c);
                return;
            }
            break;
        case H_FORWARD:
            more = forward_up(w, c);
            if (c->state == H_FORWARD)
                more |= forward_down(w, c);
            if (c->state == H_FORWARD &&
                out_flush(&c->side, &c->down, &c->down.off, false) < 0) {
                client_close(w, c);
                return;
            }
            break;
        case H_TUNNEL:
            more = tunnel(w, c);
            if (more < 0) {
                client_close(w, c);
                return;
            }
            break;
        case H_CLOSING: {
            /* The answer out, then our FIN; what the client still sends
             * is read and dropped until its own FIN (or CLOSING_MS): a
             * close with unread input would reset the connection, and a
             * reset can destroy the answer before the client reads it. */
            int rc = out_flush(&c->side, &c->down, &c->down.off, false);
            if (rc < 0) {
                client_close(w, c);
                return;
            }
            if (rc == 0)
                break;
            io_side_shutdown(&c->side);
            while (c->side.readable && !c->side.eof_in)
                if (io_side_read(&c->side, w->scratch, IO_BUF) < 0)
                    break;
            if (c->side.eof_in || c->side.failed) {
                client_close(w, c);
                return;
            }
            break;
        }
        default:
            return;
        }
        if (c->state == H_CLOSED)
            return;
        if (c->state == before && c->in.len == in_len && c->in.off == in_off &&
            c->down.len == down_len && c->down.off == down_off)
            break;
    }
    if ((more > 0 || round == 16) && c->state != H_CLOSED)
        worker_soon(w, &c->more);
}

static void
more_run(struct worker *w, struct worker_task *t)
{
    struct hclient *c = WORKER_OF(t, struct hclient, more);

    if (c->state != H_CLOSED)
        run(w, c);
}

static void
http_client_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct hclient *c = WORKER_OF(ev, struct hclient, side.ev);

    if (c->state == H_CLOSED)
        return;
    io_side_edges(&c->side, events);
    if (events & (EPOLLERR | EPOLLHUP)) {
        /* reset, or both ways closed: nobody to answer */
        client_close(w, c);
        return;
    }
    run(w, c);
}

static void
backend_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct hconn *b = WORKER_OF(ev, struct hconn, side.ev);
    struct hclient *c = b->c;

    if (b->side.fd < 0)
        return; /* closed earlier in this batch */
    io_side_edges(&b->side, events);
    if (c == NULL) {
        /* Idle: the member closed it, or sent what nobody asked for. */
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_close(w, b);
        return;
    }
    if (c->state == H_CLOSED)
        return;
    if (b->connecting) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (!(events & (EPOLLERR | EPOLLHUP))) {
            if (!(events & EPOLLOUT))
                return;
            if (io_connected_to_self(b->side.fd, &b->m->server->addr.sa))
                connect_failed(w, c, false, ECONNREFUSED);
            else
                established(w, c);
        } else {
            if (getsockopt(b->side.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
            connect_failed(w, c, false, err ? err : ECONNREFUSED);
        }
        if (c->state == H_CLOSED)
            return;
    }
    run(w, c);
}

static void
timer_expired(struct worker *w, struct timer *t)
{
    struct hclient *c = WORKER_OF(t, struct hclient, timer);
    uint32_t limit = state_limit(c);

    if (c->state == H_CLOSED || limit == 0)
        return;
    if (w->now_ms - c->last_ms < limit) {
        worker_timer_set(w, &c->timer, c->last_ms + limit);
        return;
    }
    switch (c->state) {
    case H_PROXY:
        log_warn_limited(10,
                         "pool %s: client %s closed: no valid PROXY header "
                         "(accept_proxy): none within %ums",
                         c->pool->name, c->ipport, limit);
        stats_add(&c->pool->stats[w->id].protocol_errors, 1);
        client_close(w, c);
        return;
    case H_HEAD:
        stats_add(&c->pool->stats[w->id].idle_timeouts, 1);
        if (c->in.len > c->in.off) {
            c->body_done = true;
            c->replied = false;
            c->state = H_FORWARD;
            respond(w, c, 408, "the request head did not come in time", true,
                    0);
            run(w, c);
            return;
        }
        client_close(w, c);
        return;
    case H_CONNECT:
        connect_failed(w, c, true, ETIMEDOUT);
        if (c->state != H_CLOSED)
            run(w, c);
        return;
    case H_FORWARD:
        if (io_side_draining(&c->side) ||
            (c->be != NULL && io_side_draining(&c->be->side))) {
            arm(w, c); /* a slow peer still takes bytes: not idle */
            return;
        }
        if (c->replied) {
            client_close(w, c);
            return;
        }
        member_failed(w, c, "did not answer in time", true, false);
        if (c->state != H_CLOSED)
            run(w, c);
        return;
    case H_TUNNEL:
        stats_add(&c->pool->stats[w->id].idle_timeouts, 1);
        client_close(w, c);
        return;
    default:
        client_close(w, c);
        return;
    }
}

/* ---- accepting ----------------------------------------------------------- */

void
http_accept(struct worker *w, struct listener *l, int fd,
            const struct sockaddr *peer, socklen_t peerlen)
{
    struct pool *p = l->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    struct hworker *hw = hworker_get(w);
    struct hclient *c;

    if (!engine_admit(w, p, fd))
        return;
    c = hw != NULL ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_relaxed);
        close(fd);
        return;
    }
    client_address(c, peer, peerlen);
    if (peerlen <= sizeof(c->peer)) {
        memcpy(&c->peer, peer, peerlen);
        c->peerlen = peerlen;
    }
    io_side_init(&c->side, fd, http_client_event);
    c->w = w;
    c->pool = p;
    pool_ref(p);
    c->link.close = client_link_close;
    c->more.run = more_run;
    c->timer.on_expire = timer_expired;
    c->in_cap = snap->set.client_max_header + IO_BUF;
    c->idle_timeout_ms = snap->set.idle_timeout_ms;
    c->keep_alive = true;
    c->body_done = true;
    c->connect_timeout_ms = snap->set.connect_timeout_ms;
    c->state = snap->set.accept_proxy ? H_PROXY : H_HEAD;
    worker_conn_add(w, &c->link);
    atomic_fetch_add_explicit(&w->nconns, 1, memory_order_relaxed);
    if (io_side_register(w, &c->side) < 0) {
        client_close(w, c);
        return;
    }
    if (!snap->set.accept_proxy && snap->set.send_proxy != CONF_PROXY_OFF)
        hello_make(c, snap->set.send_proxy, peer, peerlen, NULL, 0);
    arm(w, c);
}

/* splice.c -- the tcp mode's engine inside one worker: accept, key, choice
 * of a member in the pool's current snapshot, non-blocking connect with
 * retries on the next member, then bytes both ways on the I/O layer
 * (io.h): sockets registered once, edge-triggered; back-pressure (a side
 * is read only while its peer has nothing pending); half-close (a FIN
 * read on one side becomes shutdown(SHUT_WR) on the other, the other
 * direction keeps flowing). A member that resets or closes before its
 * first byte counts as a passive failure, as a refused connect does.
 * With accept_proxy a client's first bytes are a PROXY header naming the
 * real client, whose address keys the ring; with send_proxy a member
 * connection starts with one (src/proto/proxy.h). With `fast_path:
 * sockmap` the pair's bytes then move in the kernel (fastpath.h): the
 * pump below only passes FINs on, and takes a direction over while the
 * kernel hands it bytes (a peer that stopped reading: the bound).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/splice.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chash/chash.h"
#include "base/invariant.h"
#include "base/log.h"
#include "conf/conf.h"
#include "data/engine.h"
#include "loop/access_log.h"
#include "model/pool.h"
#include "proto/proto.h"
#include "proto/proxy.h"
#include "proto/tcp.h"

#define SPLICE_OF(ptr, field)                                                  \
    ((struct splice *)((char *)(ptr)-offsetof(struct splice, field)))

/* Out of descriptors for a backend socket: the client waits this long
 * before the next try (as long as a listener pauses). */
#define SPLICE_FD_WAIT_MS 100

/* Reads per side per event: a fast sender cannot starve the others; what
 * is left is resumed before the next epoll_wait (worker_soon). */
#define PUMP_READS 8

/* The least time an accept_proxy client has to send its whole PROXY
 * header (more when connect_timeout is longer): the spec's advice, long
 * enough for a TCP retransmit of the header's segment. */
#define SPLICE_HEADER_WAIT_MIN_MS 3000

/* Fast path: how long a closing pair waits for the kernel's last bytes to
 * reach the end that is still healthy; and the longest pause between two
 * looks at bytes of the kernel's still on their way (the first is one
 * wheel slot, doubled each time: a peer that stopped reading costs two
 * system calls a few times a second, not a hundred). */
#define FAST_CLOSE_WAIT_MS 1000
#define FAST_WAIT_MAX_MS 160

/* The header is peeked into the worker's scratch buffer whole. */
_Static_assert(PROXY_V2_MAX <= WORKER_SCRATCH, "a PROXY header fits scratch");

static void connect_next(struct worker *w, struct splice *c);
static void splice_pump(struct worker *w, struct splice *c);
static void header_read(struct worker *w, struct splice *c);
static void header_refused(struct worker *w, struct splice *c, const char *why);
static void count_bytes(struct worker *w, struct splice *c,
                        struct io_side *from, size_t n);
static void splice_close(struct worker *w, struct splice *c);

/* ---- the fast path's counters ------------------------------------------- */

static struct io_side *
side_of(struct splice *c, int i)
{
    return i == FASTPATH_CLIENT ? &c->client : &c->backend;
}

/* Count what the kernel moved since the last fold as if the pump had
 * moved it: the stats, the access log's bytes, the member's first byte,
 * and activity for idle_timeout. */
static void
fast_fold(struct worker *w, struct splice *c)
{
    for (int i = 0; i < 2; i++) {
        uint64_t r = fastpath_redirected(&c->fp, i);

        if (r == c->fast_folded[i])
            continue;
        count_bytes(w, c, side_of(c, i), (size_t)(r - c->fast_folded[i]));
        c->fast_folded[i] = r;
        c->last_active_ms = w->now_ms;
    }
}

static void fast_look(struct worker *w, struct splice *c, int i);
static void fast_loud(struct worker *w, struct splice *c);

/* The worker's sweep, and the program's notes: counters folded, the
 * kernel's queue looked at for a direction that moved FASTPATH_NOTE since
 * the last look, a direction the program handed over pumped. */
static void
fast_sweep(struct worker *w, struct fastpath_pair *fp)
{
    struct splice *c = SPLICE_OF(fp, fp);

    fast_fold(w, c);
    for (int i = 0; i < 2; i++) {
        if (!fp->in[i] || side_of(c, i ^ 1)->shut_out)
            continue;
        if (fastpath_due(fp, i)) {
            /* The program left bytes to chashd (the bound, or the peer
             * left): the direction is chashd's now. Its edges again,
             * and a pump before the next wait. */
            uint64_t left = fastpath_left(fp, i);

            if (left > FASTPATH_HARD) {
                log_warn_limited(1,
                                 "pool %s: connection closed: %s sends and "
                                 "does not read what it is sent; the kernel "
                                 "held %llu MB of it (fast_path's bound)",
                                 c->pool->name,
                                 i == FASTPATH_CLIENT ? "a client" : "a member",
                                 (unsigned long long)(left >> 20));
                splice_close(w, c);
                return;
            }
            fast_loud(w, c);
            worker_soon(w, &c->more);
        } else {
            fast_look(w, c, i);
        }
    }
}

/* Look again at the kernel's bytes a little later (an output edge of the
 * peer may come first: the pump looks then too). */
static void
fast_wait(struct worker *w, struct splice *c)
{
    if (c->wait_ms == 0)
        c->wait_ms = WHEEL_MS;
    worker_timer_set(w, &c->wait, w->now_ms + c->wait_ms);
    if (c->wait_ms < FAST_WAIT_MAX_MS)
        c->wait_ms *= 2;
}

/*
 * Whether the kernel still has bytes read from end <i> on their way to
 * the other end: then nothing of chashd's may go there (neither bytes it
 * read nor a FIN) and the caller waits (fast_wait is armed). An error
 * counts as none: the write that follows meets it.
 */
static bool
fast_in_flight(struct worker *w, struct splice *c, int i)
{
    int64_t n = fastpath_pending(&c->fp, i);

    if (n > 0) {
        fast_wait(w, c);
        return true;
    }
    c->wait_ms = 0;
    return false;
}

/* The pair's edges again, input and output: chashd moves a direction the
 * program handed it (the bound, or the peer left) and waits on the peer's
 * output edges. */
static void
fast_loud(struct worker *w, struct splice *c)
{
    if (!c->fast_quiet)
        return;
    c->fast_quiet = false;
    if (io_side_watch(w, &c->client, true) < 0 ||
        io_side_watch(w, &c->backend, true) < 0)
        log_warn("pool %s: epoll: %s", c->pool->name, strerror(errno));
    /* edges that came meanwhile: look now */
    c->client.readable = c->backend.readable = true;
}

/* Try to put the pair into the fast path, once: established, both ways
 * open, both ends have spoken, chashd holding none of its bytes (a PROXY
 * header, bytes a peer did not take yet: then later). */
static void
fast_try(struct worker *w, struct splice *c)
{
    struct pool_snapshot *snap;

    if (c->fast_tried || c->state != SPLICE_ESTABLISHED)
        return;
    /* After the first exchange, not before: a connection that carries one
     * request and its answer (HTTP/1.0, `Connection: close`) is over
     * before the kernel would move a byte, and entering costs about ten
     * system calls and a socket state in the kernel. */
    if (!c->answered || c->sent_up == 0)
        return;
    if (c->client.len > 0 || c->backend.len > 0 || c->client.readable ||
        c->backend.readable)
        return;
    c->fast_tried = true;
    snap = pool_snapshot(c->pool);
    if (snap->set.fast_path != CONF_FAST_PATH_SOCKMAP || !fastpath_ready())
        return;
    /* A FIN or an error already: the pair is ending, the splice ends it.
     * Unix sockets: the kernel's count of written bytes (TCP_INFO), which
     * FINs and the bound rest on, is TCP's. */
    if (c->client.eof_in || c->backend.eof_in || c->client.failed ||
        c->backend.failed || c->client.rdhup || c->backend.rdhup ||
        c->client_family == AF_UNIX || c->server->addr.family == AF_UNIX)
        return;
    if (fastpath_enter(w, &c->fp, c->client.fd, c->backend.fd, fast_sweep) <
        0) {
        if (errno == EAGAIN) {
            c->fast_tried = false; /* input came: after the splice reads it */
            return;
        }
        log_info_limited(1,
                         "pool %s: a connection stays in the user-space "
                         "splice: %s",
                         c->pool->name,
                         errno == ENOSPC ? "no fast path slot left"
                                         : strerror(errno));
        return;
    }
    c->fast = true;
    /* Hang-ups and errors only, while the kernel moves both ways: its
     * segments would wake the worker for nothing (it reads none of them);
     * the program's notes come through the worker's ring. */
    if (c->fp.in[FASTPATH_CLIENT] && c->fp.in[FASTPATH_MEMBER]) {
        c->fast_quiet = true;
        /* Half of it done is undone whole: both watched again. */
        if (io_side_watch(w, &c->client, false) < 0 ||
            io_side_watch(w, &c->backend, false) < 0)
            fast_loud(w, c);
    }
}

/* ---- closing ------------------------------------------------------------- */

/* Drop the member of <c> (backend closed): counters and reference. */
static void
release_server(struct splice *c)
{
    engine_release_member(c->pool, &c->server, &c->counted);
}

/*
 * A member that takes the connection and then resets it, or closes it
 * without a byte while its client waits, fails every client it gets, yet
 * a tcp health check (a connect) finds it up: count it against the member
 * like a refused connect, so auto_eject_hosts takes it out. <why> for the
 * debug line.
 */
static void
member_failed(struct worker *w, struct splice *c, const char *why)
{
    struct server *s = c->server;
    uint32_t fails;

    if (s == NULL || c->answered || c->blamed)
        return;
    c->blamed = true;
    stats_add(&s->stats[w->id].early_closes, 1);
    fails = pool_member_failed(c->pool, s);
    log_info_limited(10,
                     "pool %s: member %s (%s) %s before its first byte (%u "
                     "failures in a row)",
                     c->pool->name, s->name, s->addr.text, why, fails);
}

/* The access log's line for <c>, closing, when its pool keeps a log: one
 * per connection, whatever ended it (a refusal included). */
static void
log_access(struct worker *w, struct splice *c)
{
    struct access_log *alog = pool_snapshot(c->pool)->set.access_log;
    struct access_entry e = {0};

    if (alog == NULL)
        return;
    engine_access_entry(&e, c->pool, &c->peer, c->peerlen, c->server,
                        c->decided ? c->routing : ACCESS_NO_ROUTING,
                        c->attempts);
    e.duration_ms = w->now_ms - c->start_ms;
    e.bytes_in = c->sent_up;
    e.bytes_out = c->sent_down;
    access_log_write(alog, &e);
}

/* Close the pair; it is freed after this loop iteration. */
static void
splice_close(struct worker *w, struct splice *c)
{
    INVARIANT(c->state != SPLICE_CLOSED);
    /* The kernel's last bytes counted before anything reads them. */
    if (c->fast)
        fast_fold(w, c);
    /* While the member is still ours: the line names it. */
    log_access(w, c);
    worker_soon_cancel(w, &c->more);
    worker_timer_del(w, &c->timer);
    worker_timer_del(w, &c->wait);
    if (c->state == SPLICE_ESTABLISHED && c->backend.eof_in && c->sent_up > 0)
        member_failed(w, c, "closed the connection");
    /* Counters first: once a peer sees the close, they are up to date. */
    release_server(c);
    atomic_fetch_sub_explicit(&c->pool->active, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
    io_side_close(&c->client);
    io_side_close(&c->backend);
    /* Closed, the sockets have left the sockhash: the slot is free. */
    if (c->fast)
        fastpath_leave(w, &c->fp);
    c->fast = false;
    free(c->hello);
    c->hello = NULL;
    worker_conn_del(&c->link);
    pool_unref(c->pool);
    c->pool = NULL;
    c->state = SPLICE_CLOSED;
    worker_defer_free(w, c);
}

static void
link_close(struct worker *w, struct worker_conn *l)
{
    splice_close(w, SPLICE_OF(l, link));
}

/* ---- connecting ---------------------------------------------------------- */

static void connect_failed(struct worker *w, struct splice *c, bool timeout,
                           int err);

static void
connect_established(struct worker *w, struct splice *c)
{
    /* send_proxy: the header first, on the fresh socket, which takes it
     * whole (or its buffer does: the pump flushes it before any byte of
     * the client's). A member that resets right away failed its
     * connect. */
    if (c->hello != NULL &&
        io_side_write(&c->backend, c->hello, c->hello_len, false) < 0) {
        connect_failed(w, c, false, errno);
        return;
    }
    c->state = SPLICE_ESTABLISHED;
    stats_add(&c->server->stats[w->id].conns_total, 1);
    c->last_active_ms = w->now_ms;
    worker_timer_del(w, &c->timer);
    if (c->idle_timeout_ms > 0)
        worker_timer_set(w, &c->timer, w->now_ms + c->idle_timeout_ms);
    /* The client may have sent its first bytes (even its FIN) already. */
    splice_pump(w, c);
}

/* The connect to c->server failed (refused, reset, or timed out): count
 * it, let the control thread know when the member reaches its
 * server_failure_limit, and try the next member. */
static void
connect_failed(struct worker *w, struct splice *c, bool timeout, int err)
{
    struct server *s = c->server;

    engine_connect_failed(w, c->pool, s, timeout, err);
    if (c->attempts <= SPLICE_TRIED_MAX)
        c->tried[c->attempts - 1] = s->id;
    io_side_close(&c->backend);
    release_server(c);
    connect_next(w, c);
}

/*
 * Pick a member (skipping those tried) and start a non-blocking connect,
 * until one is in progress or done, or the retries are spent (then the
 * client is closed).
 */
static void
connect_next(struct worker *w, struct splice *c)
{
    struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct stats_pool *st = &c->pool->stats[w->id];

    for (;;) {
        size_t ntried =
            c->attempts < SPLICE_TRIED_MAX ? c->attempts : SPLICE_TRIED_MAX;
        struct server *s;
        int decision, fd, dial;

        if (c->attempts > snap->set.retries) {
            stats_add(&st->no_member, 1);
            c->routing = STATS_NO_MEMBER;
            log_info_limited(10,
                             "pool %s: client refused: %u connects failed "
                             "(retries: %u)",
                             c->pool->name, c->attempts, snap->set.retries);
            goto refuse;
        }
        s = pool_choose(c->pool, snap, c->hash, c->tried, ntried, &decision);
        if (!c->decided || s == NULL)
            engine_count_decision(st, decision);
        c->decided = true;
        c->routing = decision;
        if (s == NULL) {
            log_info_limited(10, "pool %s: client refused: %s", c->pool->name,
                             decision == STATS_REFUSED_ERROR
                                 ? "its member is not up (on_failure: error)"
                                 : "no member can take it");
            goto refuse;
        }
        c->attempts++;
        server_ref(s);
        c->server = s;
        c->counted = true; /* s->active: taken by pool_choose */
        atomic_fetch_add_explicit(&c->pool->active_backends, 1,
                                  memory_order_relaxed);
        dial = engine_member_dial(s, snap->set.tcpkeepalive, &fd);
        if (dial == ENGINE_NO_SOCKET) {
            int err = errno;
            release_server(c);
            if (err == EMFILE || err == ENFILE || err == ENOBUFS ||
                err == ENOMEM) {
                /* accept() took the last descriptor: this client waits,
                 * like those still in the backlog (no listener of this
                 * worker accepts meanwhile), and tries again then. Not a
                 * connect attempt, nor a failure of the member. */
                c->attempts--;
                log_warn("pool %s: socket: %s; client waits %ums",
                         c->pool->name, strerror(err), SPLICE_FD_WAIT_MS);
                worker_pause_accepting(w);
                worker_timer_set(w, &c->timer, w->now_ms + SPLICE_FD_WAIT_MS);
                return;
            }
            log_error("pool %s: socket: %s", c->pool->name, strerror(err));
            goto refuse;
        }
        if (c->attempts > 1)
            stats_add(&st->retries, 1); /* counted once a connect starts */
        c->backend.fd = fd;
        c->backend.eof_in = c->backend.shut_out = c->backend.failed = false;
        if (dial == ENGINE_CONNECTED) {
            if (io_side_register(w, &c->backend) < 0)
                goto refuse;
            connect_established(w, c);
            return;
        }
        if (dial == ENGINE_CONNECTING) {
            if (io_side_register(w, &c->backend) < 0)
                goto refuse;
            worker_timer_set(w, &c->timer, w->now_ms + c->connect_timeout_ms);
            return;
        }
        /* Immediate failure (unix socket gone, no route): next member. */
        connect_failed(w, c, false, errno);
        return;
    }
refuse:
    splice_close(w, c);
}

/* ---- forwarding ---------------------------------------------------------- */

/* Account <n> bytes moved in direction <from> -> peer. */
static void
count_bytes(struct worker *w, struct splice *c, struct io_side *from, size_t n)
{
    struct stats_pool *ps = &c->pool->stats[w->id];
    struct stats_server *ss = &c->server->stats[w->id];

    if (from == &c->client) {
        stats_add(&ps->bytes_in, n);
        stats_add(&ss->bytes_out, n);
        c->sent_up += n;
    } else {
        stats_add(&ss->bytes_in, n);
        stats_add(&ps->bytes_out, n);
        c->sent_down += n;
        if (!c->answered) {
            /* The member answers: its run of failures (refused or
             * broken connections) ends here, not at a mere connect, which
             * a member that accepts and resets passes every time. */
            c->answered = true;
            if (atomic_load_explicit(&c->server->fails, memory_order_relaxed) !=
                0)
                atomic_store_explicit(&c->server->fails, 0,
                                      memory_order_relaxed);
        }
    }
}

/*
 * A look at the kernel's queue for the direction from end <i>, once it
 * moved FASTPATH_NOTE since the last look (the program's note in the
 * worker's ring, or the sweep): two system calls, at most one look per
 * loop turn. It moves the bound (the program hands the direction to
 * chashd past it) and the next note.
 */
static void
fast_look(struct worker *w, struct splice *c, int i)
{
    if (!fastpath_near_limit(&c->fp, i))
        return;
    if (c->fast_looked_ms[i] == w->now_ms) {
        fast_wait(w, c); /* looked this turn: again a little later */
        return;
    }
    c->fast_looked_ms[i] = w->now_ms;
    fastpath_pending(&c->fp, i);
}

/*
 * Fast path: what chashd has to do for the direction from end <i> before
 * the ordinary pump may run. Returns true when the pump must not run now:
 * the kernel moves the direction and nothing is chashd's (the common
 * case: memory reads only), or the kernel's bytes are still on their way
 * and whatever chashd would write must come after them (fast_wait is
 * armed: the peer's output edge or the timer looks again). *<held>: the
 * program leaves the direction's bytes to chashd (fastpath_abi.h), so no
 * new byte of the kernel's can come before chashd's.
 */
static bool
fast_hold(struct worker *w, struct splice *c, int i, bool *held)
{
    struct io_side *from = side_of(c, i), *to = side_of(c, i ^ 1);

    *held = false;
    if (!c->fp.in[i])
        return false; /* its input never went through the program */
    if (from->eof_in && to->shut_out)
        return true; /* this way is done */
    *held = fastpath_due(&c->fp, i);
    if (!*held) {
        c->fast_out[i] = false; /* the kernel may move bytes again */
        if (!from->rdhup && !from->eof_in && to->len == 0) {
            fast_look(w, c, i);
            return true;
        }
    } else if (c->fast_out[i] &&
               fastpath_redirected(&c->fp, i) == c->fp.drained[i]) {
        /* The program holds the direction for us, its queue was out at
         * the last look and it moved nothing since: no byte of the
         * kernel's can be on the way. (A hold can end between two pumps
         * -- chashd wrote all it was left -- and the kernel move bytes
         * before the next one: the count says so.) */
        return false;
    }
    /* A FIN to pass on, bytes the program left us, or ours to flush:
     * once the kernel's are out. */
    if (fast_in_flight(w, c, i))
        return true;
    c->fast_out[i] = *held;
    return false;
}

/*
 * Move bytes from <from> to <to>: flush what <to> has pending, then read
 * while <from> has input and <to> takes everything; what <to> cannot take
 * stays in its buffer and reading stops (back-pressure) until its output
 * edge. A FIN from <from>, once all is written, is passed on.
 *
 * In the fast path this runs only when fast_hold() lets it: a FIN to pass
 * on, or a direction that is chashd's again (the bound). A FIN waits for
 * the kernel's last bytes: the read that saw it took the socket's lock,
 * so every segment before it has been counted by then.
 *
 * Returns 1 when the read budget ran out with input left, 0, or -1 when
 * the pair must close.
 */
static int
pump(struct worker *w, struct splice *c, struct io_side *from,
     struct io_side *to)
{
    int i = from == &c->client ? FASTPATH_CLIENT : FASTPATH_MEMBER;
    bool fast = c->fast && c->fp.in[i], held = false;
    int reads = 0;

    if (fast && fast_hold(w, c, i, &held))
        return 0;
    if (to->len > 0) {
        ssize_t n = io_side_flush(to);
        if (n < 0)
            return -1;
        /* Bytes written are traffic too: a slow peer keeps us from reading
         * for longer than idle_timeout, yet the pair is not idle. */
        if (n > 0)
            c->last_active_ms = w->now_ms;
        if (to->len > 0)
            return 0; /* still full: wait for its output edge */
    }
    while (from->readable && !from->eof_in) {
        ssize_t n;
        int wr;

        if (reads++ == PUMP_READS)
            return 1;
        n = io_side_read(from, w->scratch, IO_BUF);
        if (n < 0)
            return -1;
        if (n == 0)
            break; /* drained for now, or FIN */
        c->last_active_ms = w->now_ms;
        count_bytes(w, c, from, (size_t)n);
        if (fast) {
            c->fast_read[i] += (uint64_t)n;
            /* The program left these after our look: the kernel may
             * have moved bytes before them since. */
            if (!held && fast_in_flight(w, c, i)) {
                if (io_side_hold(to, w->scratch, (size_t)n) < 0)
                    return -1;
                return 0;
            }
            held = true;
        }
        wr = io_side_write(to, w->scratch, (size_t)n, from->rdhup);
        if (wr < 0)
            return -1;
        if (wr == 0)
            return 0; /* back-pressure: <from> stays readable */
    }
    if (from->eof_in) {
        if (fast && fastpath_unread(&c->fp, i, c->fast_read[i])) {
            /* Not the end yet: bytes the program left to chashd wait in
             * the kernel behind the socket's own output, and a read
             * meets the FIN before them. Read again a little later. */
            from->eof_in = false;
            from->readable = true;
            fast_wait(w, c);
            return 0;
        }
        /* The last of the kernel's bytes before the FIN may have come
         * after the look: the read that saw it took the socket's lock,
         * so they are counted by now. */
        if (fast && !to->shut_out && fast_in_flight(w, c, i))
            return 0;
        io_side_shutdown(to);
    }
    return 0;
}

/* pump(), then tell the program what chashd has written of the
 * direction: bytes it read, less those still in <to>'s buffer. */
static int
pump_way(struct worker *w, struct splice *c, struct io_side *from,
         struct io_side *to)
{
    int r = pump(w, c, from, to);
    int i = from == &c->client ? FASTPATH_CLIENT : FASTPATH_MEMBER;

    if (c->fast && c->fp.in[i])
        fastpath_consume(&c->fp, i, c->fast_read[i] - to->len);
    return r;
}

/*
 * Fast path: a side of the pair failed (<bad>: its index). Bytes the
 * kernel read from it before the error may still be on their way to the
 * other end, as chashd's own would be: the close waits for them, at most
 * FAST_CLOSE_WAIT_MS.
 */
static void
fast_close(struct worker *w, struct splice *c, int bad)
{
    if (c->close_by_ms == 0) {
        c->close_by_ms = w->now_ms + FAST_CLOSE_WAIT_MS;
        c->fast_bad = bad;
    }
    if (w->now_ms < c->close_by_ms && fastpath_pending(&c->fp, bad) > 0) {
        worker_soon_cancel(w, &c->more);
        fast_wait(w, c);
        return;
    }
    splice_close(w, c);
}

/* Move what can move both ways; close the pair when both ends are done. */
static void
splice_pump(struct worker *w, struct splice *c)
{
    /* Both ways even when the first fails: a backend that answers and
     * resets at once makes the client's bytes fail to go up, yet its
     * answer, already with us, must still go down (as it would without
     * a proxy). */
    int up, down;

    if (c->close_by_ms != 0) {
        fast_close(w, c, c->fast_bad);
        return;
    }
    up = pump_way(w, c, &c->client, &c->backend);
    down = pump_way(w, c, &c->backend, &c->client);
    if (c->backend.failed)
        member_failed(w, c, "reset the connection");
    if (up < 0 || down < 0)
        goto close;
    /* Both FINs in and passed on (in the fast path a FIN waits for the
     * kernel's bytes before it: not passed on yet means not done). */
    if (c->client.eof_in && c->backend.eof_in && c->client.len == 0 &&
        c->backend.len == 0 &&
        (!c->fast || (c->client.shut_out && c->backend.shut_out)))
        goto close;
    if (up > 0 || down > 0)
        worker_soon(w, &c->more);
    fast_try(w, c);
    return;
close:
    splice_close(w, c);
}

static void
more_run(struct worker *w, struct worker_task *t)
{
    struct splice *c = SPLICE_OF(t, more);

    if (c->state == SPLICE_ESTABLISHED)
        splice_pump(w, c);
}

static void
splice_client_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct splice *c = SPLICE_OF(ev, client.ev);

    if (c->state == SPLICE_CLOSED)
        return; /* closed earlier in this batch */
    io_side_edges(&c->client, events);
    if (c->state == SPLICE_HEADER) {
        header_read(w, c);
        return;
    }
    if (c->state == SPLICE_CONNECTING)
        return; /* the client's edges wait in its flags */
    if (events & EPOLLERR) {
        /* A reset. What the member sent before is still passed on. */
        splice_pump(w, c);
        if (c->state == SPLICE_CLOSED)
            return;
        if (c->fast)
            fast_close(w, c, FASTPATH_CLIENT);
        else
            splice_close(w, c);
        return;
    }
    splice_pump(w, c);
}

static void
backend_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct splice *c = SPLICE_OF(ev, backend.ev);

    if (c->state == SPLICE_CLOSED)
        return;
    io_side_edges(&c->backend, events);
    if (c->state == SPLICE_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (!(events & (EPOLLERR | EPOLLHUP))) {
            /* Writable without error or hang-up: connected -- unless to
             * our own port (io_connected_to_self): the client's bytes
             * would come back to it. */
            if (!(events & EPOLLOUT))
                return;
            if (io_connected_to_self(c->backend.fd, &c->server->addr.sa))
                connect_failed(w, c, false, ECONNREFUSED);
            else
                connect_established(w, c);
            return;
        }
        if (getsockopt(c->backend.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        connect_failed(w, c, false, err ? err : ECONNREFUSED);
        return;
    }
    if (events & EPOLLERR) {
        /* A reset. What the member sent before it is still ours to pass
         * on (an answer right before the reset); then the pair closes. */
        splice_pump(w, c);
        if (c->state == SPLICE_CLOSED)
            return;
        if (c->fast)
            fast_fold(w, c); /* its first byte may be the kernel's */
        member_failed(w, c, "reset the connection");
        if (c->fast)
            fast_close(w, c, FASTPATH_MEMBER);
        else
            splice_close(w, c);
        return;
    }
    splice_pump(w, c);
}

static void
timer_expired(struct worker *w, struct timer *t)
{
    struct splice *c = SPLICE_OF(t, timer);

    if (c->state == SPLICE_HEADER) {
        header_refused(w, c, "no whole header in time");
        return;
    }
    if (c->state == SPLICE_CONNECTING && c->server == NULL) {
        /* Waiting for a descriptor (connect_next): try again. */
        connect_next(w, c);
        return;
    }
    if (c->state == SPLICE_CONNECTING) {
        connect_failed(w, c, true, ETIMEDOUT);
        return;
    }
    if (c->idle_timeout_ms == 0)
        return;
    /* The kernel's bytes are activity too. */
    if (c->fast)
        fast_fold(w, c);
    if (w->now_ms - c->last_active_ms >= c->idle_timeout_ms) {
        bool to_client = io_side_draining(&c->client);
        bool to_backend = io_side_draining(&c->backend);
        if (to_client || to_backend) {
            c->last_active_ms = w->now_ms; /* still sending: not idle */
            worker_timer_set(w, &c->timer, w->now_ms + c->idle_timeout_ms);
            return;
        }
        stats_add(&c->pool->stats[w->id].idle_timeouts, 1);
        log_debug("pool %s: connection to %s idle for %ums: closed",
                  c->pool->name, c->server ? c->server->name : "-",
                  c->idle_timeout_ms);
        /* The client spoke and the member never answered in all that
         * time: a stopped member (SIGSTOP, a hung process) accepts
         * connections into its backlog and answers none. */
        if (c->sent_up > 0)
            member_failed(w, c, "sent nothing for idle_timeout");
        splice_close(w, c);
        return;
    }
    worker_timer_set(w, &c->timer, c->last_active_ms + c->idle_timeout_ms);
}

/* Fast path: time to look again at the kernel's bytes on their way. */
static void
wait_expired(struct worker *w, struct timer *t)
{
    struct splice *c = SPLICE_OF(t, wait);

    if (c->state == SPLICE_ESTABLISHED)
        splice_pump(w, c);
}

/* ---- accepting ----------------------------------------------------------- */

/* The ring hash of a client at <addr> (<len> bytes) in <snap>, into
 * *<hash>; -1 when the address makes no key (a unix socket). */
static int
client_hash(struct pool_snapshot *snap, const struct sockaddr *addr,
            socklen_t len, uint64_t *hash)
{
    char key[PROTO_KEY_MAX];
    int klen;

    klen = snap->set.proto->conn_key(addr, len, snap->set.hash_key, key,
                                     sizeof(key));
    if (klen < 0)
        return -1;
    *hash =
        snap->ring != NULL ? chash_ring_hash(snap->ring, key, (size_t)klen) : 0;
    return 0;
}

/*
 * send_proxy: the header for <c>'s members, a connection from <src> to
 * <dst> (NULL: the address the client reached on our listener). 0, or -1
 * when out of memory.
 */
static int
hello_make(struct splice *c, int version, const struct sockaddr *src,
           socklen_t srclen, const struct sockaddr *dst, socklen_t dstlen)
{
    char buf[PROXY_WRITE_MAX];
    size_t n = engine_proxy_hello(c->client.fd, version, src, srclen, dst,
                                  dstlen, buf);

    c->hello = malloc(n);
    if (c->hello == NULL)
        return -1;
    memcpy(c->hello, buf, n);
    c->hello_len = n;
    return 0;
}

/*
 * accept_proxy: the client's PROXY header is missing, invalid, or late.
 * The spec asks for the connection to be closed (never guessed at: the
 * client's address is what the header is trusted for); the operator gets
 * the reason, rate-limited, and a protocol error in the pool's counters.
 */
static void
header_refused(struct worker *w, struct splice *c, const char *why)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof(peer);
    char who[PROTO_KEY_MAX];

    stats_add(&c->pool->stats[w->id].protocol_errors, 1);
    if (getpeername(c->client.fd, (struct sockaddr *)&peer, &len) < 0 ||
        tcp_conn_key((struct sockaddr *)&peer, len,
                     CONF_HASH_KEY_SOURCE_IP_PORT, who, sizeof(who)) < 0)
        strcpy(who, "-");
    log_warn_limited(10,
                     "pool %s: client %s closed: no valid PROXY header "
                     "(accept_proxy): %s",
                     c->pool->name, who, why);
    splice_close(w, c);
}

/*
 * The header is whole: key the ring on the client it names (a LOCAL or
 * UNKNOWN one keeps the socket's peer), then connect as any client. The
 * bytes after the header are still in the socket: the pump passes them
 * on once the member is connected.
 */
static void
header_taken(struct worker *w, struct splice *c, const struct proxy_header *h)
{
    struct pool_snapshot *snap = pool_snapshot(c->pool);
    struct sockaddr_storage peer;
    socklen_t peerlen = sizeof(peer);
    const struct sockaddr *src = (const struct sockaddr *)&h->src;
    const struct sockaddr *dst = (const struct sockaddr *)&h->dst;
    socklen_t srclen = h->srclen;

    if (h->local) {
        if (getpeername(c->client.fd, (struct sockaddr *)&peer, &peerlen) < 0) {
            header_refused(w, c, strerror(errno));
            return;
        }
        src = (const struct sockaddr *)&peer;
        srclen = peerlen;
        dst = NULL;
    }
    if (client_hash(snap, src, srclen, &c->hash) < 0) {
        header_refused(w, c,
                       "a LOCAL or UNKNOWN header on a unix socket: no "
                       "client address to hash");
        return;
    }
    /* The access log names the client the header names. */
    if (srclen <= sizeof(c->peer)) {
        memcpy(&c->peer, src, srclen);
        c->peerlen = srclen;
    }
    /* Forwarded, the header describes the same connection as the one we
     * took: the client and the address it reached in the first place. */
    if (snap->set.send_proxy != CONF_PROXY_OFF &&
        hello_make(c, snap->set.send_proxy, src, srclen, dst,
                   dst != NULL ? h->dstlen : 0) < 0) {
        log_error("pool %s: out of memory for a PROXY header", c->pool->name);
        splice_close(w, c);
        return;
    }
    worker_timer_del(w, &c->timer);
    c->state = SPLICE_CONNECTING;
    /* Bytes may follow the header, or a FIN: the pump reads on (a read
     * that finds nothing clears this). */
    c->client.readable = true;
    connect_next(w, c);
}

/*
 * accept_proxy: peek at what the client sent; once it holds a whole
 * header, consume exactly the header. Peeking keeps no buffer in the pair
 * and leaves the client's own bytes in the socket for the pump. A header
 * split over segments is peeked again from its start at the next input
 * edge (edge-triggered: new bytes make a new edge).
 */
static void
header_read(struct worker *w, struct splice *c)
{
    struct proxy_header h;
    const char *err = NULL;
    ssize_t n;
    int r;

    if (!c->client.readable)
        return;
    do
        n = recv(c->client.fd, w->scratch, PROXY_V2_MAX, MSG_PEEK);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) {
        c->client.readable = false;
        return;
    }
    if (n < 0) {
        header_refused(w, c, strerror(errno));
        return;
    }
    if (n == 0) {
        header_refused(w, c, "the client closed before it");
        return;
    }
    r = proxy_parse(w->scratch, (size_t)n, &h, &err);
    if (r == PROXY_AGAIN) {
        /* part of a header: more comes, unless the client sent its FIN */
        if (c->client.rdhup) {
            header_refused(w, c, "the client closed in the middle of it");
            return;
        }
        c->client.readable = false;
        return;
    }
    if (r == PROXY_INVALID) {
        header_refused(w, c, err);
        return;
    }
    /* the bytes peeked are there: this read takes exactly them */
    do
        n = recv(c->client.fd, w->scratch, h.len, 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)h.len) {
        header_refused(w, c, n < 0 ? strerror(errno) : "a short read");
        return;
    }
    header_taken(w, c, &h);
}

void
splice_accept(struct worker *w, struct listener *l, int fd,
              const struct sockaddr *peer, socklen_t peerlen)
{
    struct pool *p = l->pool;
    struct pool_snapshot *snap = pool_snapshot(p);
    struct stats_pool *st = &p->stats[w->id];
    bool header = snap->set.accept_proxy;
    uint64_t hash = 0;
    struct splice *c;

    if (!engine_admit(w, p, fd))
        return;
    /* The key is the peer's, or with accept_proxy the header's (later). */
    if (!header && client_hash(snap, peer, peerlen, &hash) < 0)
        c = NULL;
    else
        c = calloc(1, sizeof(*c));
    if (c == NULL) {
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_relaxed);
        stats_add(&st->no_member, 1);
        close(fd);
        return;
    }
    io_side_init(&c->client, fd, splice_client_event);
    io_side_init(&c->backend, -1, backend_event);
    c->link.close = link_close;
    c->more.run = more_run;
    c->timer.on_expire = timer_expired;
    c->wait.on_expire = wait_expired;
    c->client_family = peer->sa_family;
    c->pool = p;
    pool_ref(p);
    c->start_ms = w->now_ms;
    if (peerlen <= sizeof(c->peer)) {
        memcpy(&c->peer, peer, peerlen);
        c->peerlen = peerlen;
    }
    c->connect_timeout_ms = snap->set.connect_timeout_ms;
    c->idle_timeout_ms = snap->set.idle_timeout_ms;
    c->hash = hash;
    worker_conn_add(w, &c->link);
    atomic_fetch_add_explicit(&w->nconns, 1, memory_order_relaxed);
    /* Registered now: edges that come while the backend connects are
     * remembered in the side's flags. */
    if (io_side_register(w, &c->client) < 0) {
        splice_close(w, c);
        return;
    }
    if (header) {
        /* No connect before the header: the member depends on it. The
         * header usually came with the connection: try it at once. */
        uint32_t wait = c->connect_timeout_ms > SPLICE_HEADER_WAIT_MIN_MS
                            ? c->connect_timeout_ms
                            : SPLICE_HEADER_WAIT_MIN_MS;
        c->state = SPLICE_HEADER;
        worker_timer_set(w, &c->timer, w->now_ms + wait);
        c->client.readable = true;
        header_read(w, c);
        return;
    }
    if (snap->set.send_proxy != CONF_PROXY_OFF &&
        hello_make(c, snap->set.send_proxy, peer, peerlen, NULL, 0) < 0) {
        log_error("pool %s: out of memory for a PROXY header", p->name);
        splice_close(w, c);
        return;
    }
    connect_next(w, c);
}

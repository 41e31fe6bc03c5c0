/* request_int.h -- what the files of the request engine share and nobody
 * else sees: a worker's connections to a member (struct rserver), the
 * engine's per-worker state (struct rworker), and the few steps of a
 * fragment's life that both the engine (request.c) and its replication
 * (request_rep.c: a key's home worker, copies, quorums; request_repair.c:
 * repairs, barriers, ordered fan-outs) take.
 * Worker threads only; nothing here is shared between threads unless a
 * field says so.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_REQUEST_INT_H
#define CHASHD_REQUEST_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/u64set.h"
#include "data/request.h"

/* Buckets of a worker's member table (server id -> connections). */
#define MEMBER_BUCKETS 256
/* A replicated request's copy (or a repair's request) waits for its member
 * while the member says anything; one that said nothing for ten times the
 * pool's timeout (at least REQUEST_STUCK_MIN_MS; REQUEST_STUCK_MS without
 * a timeout) with requests waiting is stuck: its connection is reset
 * (request_stuck_ms). */
#define REQUEST_STUCK_MS 10000
#define REQUEST_STUCK_MIN_MS 2000

static inline uint64_t
request_stuck_ms(uint32_t timeout_ms)
{
    uint64_t t = (uint64_t)timeout_ms * 10;

    return timeout_ms == 0            ? REQUEST_STUCK_MS
           : t < REQUEST_STUCK_MIN_MS ? REQUEST_STUCK_MIN_MS
                                      : t;
}
/* Buckets of a worker's table of keys held for a repair (request_rep.c). */
#define HOLD_BUCKETS 64

enum rs_state { RS_IDLE, RS_CONNECTING, RS_READY };

/* A connection of this worker to one member. */
struct rserver {
    struct io_side side;
    struct worker_task more;  /* input left after the read budget */
    struct worker_task flush; /* write what was queued this iteration */
    struct timer timer;       /* connect deadline, or the oldest request's */
    struct worker *w;
    struct rmember *m;         /* its member (owns it) */
    int state;                 /* enum rs_state */
    struct buf out;            /* bytes for the member, in FIFO order */
    struct buf in;             /* bytes from it, replies not parsed yet */
    struct rfrag *head, *tail; /* queued, waiting for their replies */
    size_t nfifo;
    unsigned swallow;            /* handshake replies still to drop */
    bool ident;                  /* the last of them says who the member
                                    is (a replicated pool's: request_rep) */
    struct rclient *stream_from; /* a client's value being forwarded */
    struct rfrag *lhead, *ltail; /* queued behind it, their bytes kept in
                                    each fragment (in order) */
    struct rfrag *reply_to;      /* the fragment a value streams to */
    uint64_t reply_left;         /* its bytes still to come */
    bool paused;                 /* not read: a reply waits for its client */
    struct rfrag *open; /* a batch whose line ends <out>, unwritten: more
                           keys may join it until the next flush */
    size_t open_len;    /* that line's length */
    size_t open_keys;   /* the keys it asks for */
    uint64_t sent;      /* fragments queued on it, ever */
    uint64_t answered;  /* of them, answered or failed (a drain barrier
                           waits for <answered> to reach a mark) */
    uint64_t heard_ms;  /* when it last answered anything (or was
                           connected): a member that has not for long,
                           with requests waiting, is stuck */
    char laddr[64];     /* our end of it ("ip:port"), once connected: a
                           member is told to drop it after we reset it
                           with requests on it (request_rep.c) */
};

struct rhold;
struct rbar;
struct rpaused;
struct rpw;
struct moved;
struct rdrain;

/* The engine's state of one worker. */
struct rworker {
    struct worker_conn link; /* closed at worker exit: every member */
    struct worker *w;
    struct rmember *table[MEMBER_BUCKETS];
    uint64_t next_client_id;
    /* migrations: drain barriers to pass, gates waiting for one */
    struct rdrain *drains;
    struct rgate *gwait, *gwait_tail;
    struct timer mig_timer;
    struct timer sweep_timer; /* members that left: their connections */
    uint64_t spread;          /* hot keys' reads, in turn over their sets */
    struct moved *moved;      /* [MOVED_SLOTS], made on first use */
    bool closing;             /* the worker exits: no new member connection */
    /* Replication (request_rep.c): the keys this worker is the home of
     * that a repair holds (their requests wait behind it), by ring hash. */
    struct rhold *holds[HOLD_BUCKETS];
    size_t nholds;
    struct rbar *bars; /* barriers waiting for replies (request_rep) */
    struct timer bar_timer;
    /* pools whose requests wait for an ordered fan-out (request_rep) */
    struct rpaused *paused;
    struct rpw *pws; /* pauses waiting for their replies */
    /* freed pieces of replicated requests kept for reuse (request_rep.c:
     * a replicated request took a dozen allocations, a quarter of the
     * CPU of a pipelined load, half of them freed by another thread) */
    void *cache[3];
    size_t ncache[3];
    /* the keys (by pool and ring hash) whose copies this home compared
     * since chashd started, while their pool verifies (request_rep) */
    struct u64set verified;
};

/* The engine's state of worker <w>, made on first use; NULL when out of
 * memory. */
struct rworker *request_rworker(struct worker *w);

/* The connection of worker <w> to member <srv> of pool <p> (in mode
 * <mode>) that a key of ring hash <hash> takes, counted as sent for
 * fragment <f>; NULL when none can be had (<f> is answered with the
 * error). */
struct rserver *request_send_on(struct worker *w, struct pool *p,
                                const struct request_mode *mode,
                                struct rfrag *f, struct server *srv,
                                uint64_t hash);
/* That connection if it exists, without making or counting anything. */
struct rserver *request_conn_of(struct worker *w, const struct server *srv,
                                const struct request_mode *mode, uint64_t hash);

/* ==== the engine's parts: request.c, request_conn.c, request_gate.c,
 * request_client.c (and request_rep.c, request_repair.c below) ==== */

/* Reads per connection per event before yielding (as the splice). */
#define READS_PER_EVENT 8
/* A client stops being read while it has this many requests in flight:
 * a client that pipelines without reading replies cannot grow our memory
 * without bound. */
#define MAX_PIPELINE 4096
/* Bytes a reply may hold unsent before its member's connection is not
 * read any more (back-pressure from a slow client to the member). */
#define REPLY_HIGH (1024 * 1024)
/* Bytes queued for a member before the client streaming to it is not
 * read any more. */
#define OUT_HIGH (1024 * 1024)
/* Replies written to a client per writev(). */
#define WRITE_BATCH 64
/* A batch (request_send_batch): at most this many requests ride on one
 * line, and the line is at most this long (memcached takes longer get
 * lines; a bound keeps one reply, and its latency, reasonable). */
#define BATCH_MAX 128
#define BATCH_LINE_MAX (16 * 1024)
/* ... and asks for at most this many keys: its reply is held whole before
 * any of its requests is answered, so large values want small batches. */
#define BATCH_KEYS_MAX 64
/* How long a closing client may go on sending before we close anyway. */
#define LINGER_MS 2000
/* A client that streams a value into a member connection and then sends
 * nothing for this long (in a pool without `timeout`) loses the value:
 * the connection is shared, the other requests on it would wait for
 * good. */
#define STREAM_STALL_MS 10000
/* Initial sizes of the per-client parse arrays. */
#define KEYS_INIT 16
#define SCRATCH_INIT 1024

/* A migration's gate: the request that moves one key off its old owner
 * before the fragment that needs it runs on the new one. */
struct rgate {
    struct rfrag frag;        /* its own, on the old owner's connection */
    struct rfrag *opens;      /* the fragment waiting for it */
    struct server *from, *to; /* old and new owner (refs held) */
    struct pool *pool;        /* (ref held) */
    struct worker *w;
    uint64_t epoch; /* the migration's: sent once it drained */
    uint64_t hash;  /* the key's: its connection among several */
    char *key;
    size_t len;
    unsigned tries;
    int step;    /* 0: on the old owner; 1: the next step, on the new one */
    bool cache;  /* its answer may go in the moved cache (a copy: a key
                    gone from its old owner stays gone) */
    int command; /* the mode's index of what it sent (its reply's parse) */
    uint64_t held_ms;   /* when it began to wait for the drain, 0: never */
    struct rgate *next; /* the fragment's, then the worker's wait list */
};

/* A gate waits so long for its migration's drain barrier (with several
 * chashd instances, for every one of them) before its request fails. */
#define GATE_HOLD_MS 10000

/* A drain barrier in one worker (request_drain). */
struct rdrain {
    struct rdrain *next;
    struct migration_drain *d; /* (ref held) */
    size_t n;
    struct rdrain_mark {
        struct rserver *s;
        uint64_t mark;
    } * marks;
};

/* Keys a gate found gone from their old owner (moved, or never there),
 * per migration: while it runs, "absent from the old owner" stays true
 * (nothing writes a moving key there after the drain barrier), so later
 * requests on them need no gate. Direct-mapped, one key per slot. */
#define MOVED_SLOTS 16384
/* How often a worker closes the connections of members that left. */
#define SWEEP_MS 1000
struct moved {
    uint64_t epoch; /* 0: empty */
    char *key;
    size_t len;
};

/* request.c: requests, fragments, routing, the worker's members */
struct rmember *request_member_get(struct rworker *rw, struct server *s,
                                   struct pool *p, size_t nconns,
                                   const struct request_mode *mode);
const struct proto *request_req_proto(const struct rreq *r);
void request_req_free(struct rreq *r);
bool request_reply_is_error(const struct rreq *r);
/* Fragment <f>'s reply bytes; <f> answered; <f> failed with the mode's
 * error reply of <kind> in its place. */
int request_frag_data(struct rfrag *f, const char *data, size_t len);
void request_frag_done(struct rfrag *f);
void request_frag_fail(struct rfrag *f, int kind);
struct server *request_old_owner(const struct pool_snapshot *snap,
                                 const char *key, size_t len, uint64_t hash);
bool request_deferred(const struct pool_snapshot *snap, const struct server *o,
                      const struct server *n);

/* request_conn.c: member connections, sending */
void request_conn_queue(struct rserver *s, struct rfrag *f, const char *buf,
                        size_t len, struct rclient *streamer);
void request_conn_flush(struct rserver *s);
void request_conn_read(struct rserver *s);
void request_conn_fail(struct rserver *s, int kind, int err);
void request_conn_abandon(struct rserver *s, int kind);
void request_conn_stream_done(struct rserver *s);
void request_conn_destroy(struct rserver *s);
struct rserver *request_send_to(struct rreq *r, struct rfrag *f,
                                struct server *srv, uint64_t hash);

/* request_gate.c: a migration's gates and drain barriers */
void request_gate_hold(struct rreq *r, struct rfrag *f, struct server *srv,
                       uint64_t hash, const char *buf, size_t len,
                       uint64_t stream);
void request_gate_done(struct rgate *g);
void request_gate_free(struct rgate *g);
void request_mig_timer(struct worker *w, struct timer *t);
void request_client_release(struct rclient *c);
void request_client_abandon(struct rclient *c);

/* request_client.c: clients */
void request_client_flush(struct rclient *c);
void request_client_read(struct rclient *c);
void request_client_close(struct rclient *c);
void request_client_unstream(struct rclient *c, int kind);

/* ---- replication's internals (request_rep.c, request_repair.c) ---------- */

/* Something waiting for a held key: a request (struct rrep) or another
 * repair of the same key. */
struct rheld {
    struct rheld *next;
    bool job; /* a repair: it takes the hold when its turn comes */
};

/* A key of this home being repaired, and what waits for it. Keyed by the
 * ring hash: the keys of one hash tag are held together. */
struct rhold {
    struct rhold *next;
    const struct pool *pool; /* identity only (the waiters hold refs) */
    uint64_t hash;
    struct rheld *head, *tail;
};

/* The worker that runs every request of a key of ring hash <hash>. */
unsigned request_rep_home(uint64_t hash);
/* A key's hold (request_rep.c): the repair of <p>'s key of <hash> on
 * <rw> (NULL: none runs), a new one, a waiter queued behind it, and its
 * end (what waited runs, up to the next repair of the key). */
struct rhold *request_hold_find(struct rworker *rw, const struct pool *p,
                                uint64_t hash);
struct rhold *request_hold_make(struct rworker *rw, const struct pool *p,
                                uint64_t hash);
void request_hold_push(struct rhold *h, struct rheld *x);
void request_hold_release(struct rworker *rw, struct rhold *h);
/* A request that waited (x->job false) arrives at its home <w> again. */
void request_rep_arrive_held(struct worker *w, struct rheld *x);
/* What waited when the worker exits: a request is answered with the
 * error, a repair fails. */
void request_held_fail(struct rheld *x);
/* A fragment whose answer never comes (every worker exited). */
void request_orphan_drop(struct rfrag *f);
/* The key of <hash> of <p> is compared since chashd started (or being
 * compared): false when it was already. */
bool request_verified_put(struct rworker *rw, const struct pool *p,
                          uint64_t hash);
/* A RESP bulk string or nil at <buf> (one whole reply): 1 with its bytes,
 * 0 for nil, -1 otherwise. */
int request_resp_bulk(const char *buf, size_t len, const char **out,
                      size_t *outlen);

/* request_repair.c. A repair reaches its home <w>; a waiting one
 * (x->job) takes the hold it waited for, arrives again, or fails. */
void request_job_arrive(struct worker *w, struct request_repair *r);
void request_job_take_hold(struct rheld *x);
void request_job_resume(struct rheld *x);
void request_job_fail_held(struct rheld *x);
/* A repair's request, a fan-out's copy: answered. */
void request_job_report(struct rreq *q);
void request_pause_report(struct rreq *copy);
/* <x> (a request, or a repair when <job>) of pool <p> waits when an
 * ordered fan-out pauses the pool on <rw>: true then. */
bool request_pause_hold(struct rworker *rw, const struct pool *p,
                        struct rheld *x, bool job);
/* The repair holding <h> is over while the pool is paused: what waited
 * behind it joins the pause's queue, first. True when it did. */
bool request_pause_take_held(struct rworker *rw, struct rhold *h);
/* Worker exit: barriers and pauses of <rw>. */
void request_repair_close(struct rworker *rw);

/* request_rep.c, called by the engine. A copy of a replicated request, or
 * a repair's own request, is answered (its one fragment done): it reports
 * and is freed. */
void request_rep_report(struct rreq *copy);
/* Member connection <s> of a replicated pool is reset by us with <n>
 * requests unanswered (stuck, a malformed reply, out of memory): the
 * member may still run them, so it is told to drop the connection before
 * it is repaired (replica_unsettled). */
void request_rep_conn_reset(struct rserver *s, size_t n);
/* The handshake of a replicated pool's connections: the request that
 * asks the member who it is, appended to <out> (<cap> bytes): its length,
 * or -1 when it does not fit. */
int request_rep_ident_request(const struct pool_snapshot *snap, char *out,
                              size_t cap);
/* Its reply at <buf> (<len> bytes) on <s>: the bytes it takes, 0 when it
 * is not all in, -1 when malformed. The member's identity is checked
 * against the one known (a new one: it restarted, and is compared
 * whole). */
long request_rep_ident_reply(struct rserver *s, const char *buf, size_t len);
/* Worker exit: what request_rep.c keeps in <rw> (held requests fail). */
void request_rep_close(struct rworker *rw);

#endif /* CHASHD_REQUEST_INT_H */

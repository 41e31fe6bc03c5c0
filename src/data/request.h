/* request.h -- the request engine of the store modes, beside the tcp
 * splice on the I/O layer: a client connection is parsed into requests by
 * the mode's pure parser; each request (or each fragment of a multi-key
 * request) goes to a per-worker, per-member server connection (pipelined,
 * replies matched in FIFO order); the client gets its replies in request
 * order, whatever order the members answer in. Per-request timeouts,
 * error replies in place, large values streamed through. What is
 * specific to a protocol (how a request is split, merged, answered
 * locally) is the mode's (struct request_mode: redis.c).
 * Runs inside one worker; nothing here is shared between threads.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_REQUEST_H
#define CHASHD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/buf.h"
#include "loop/io.h"
#include "loop/worker.h"
#include "model/migration_view.h"
#include "proto/proto.h"

struct pool;
struct pool_snapshot;
struct server;
struct rclient;
struct rreq;
struct rserver;
struct rgate;
struct rrep;
struct rjob;
struct rpause;

/*
 * One piece of a request on its way to one member, and back. A plain
 * request has one fragment; a split one (MGET over three members) one per
 * member, each carrying its own keys; a fan-out one (DBSIZE) one per
 * member. A fragment is on its server connection's FIFO from the moment
 * its bytes are queued there until its reply is parsed (or the connection
 * fails).
 */
struct rfrag {
    struct rreq *req;     /* the request it belongs to */
    struct rserver *conn; /* where it was sent, NULL before */
    struct rfrag *next;   /* the connection's FIFO */
    size_t member;        /* the member's index in the request's view */
    uint32_t *keys;       /* split: indexes of the request's keys it
                             carries, in the client's order (owned) */
    size_t nkeys;
    struct buf reply; /* its reply, when the request merges them */
    bool done;
    bool error;           /* its reply (or its failure) is an error */
    uint64_t deadline_ms; /* `timeout`: answered by then, or failed */
    /* Queued behind another client's value being streamed to the same
     * connection: its bytes wait here, and <streamer> is its own client
     * when a value of its own follows them. */
    struct buf pending;
    struct rclient *streamer;
    /* Batched (request_send_batch): its kind, the keys it asks for (as
     * the line carries them), and, for the first of a batch, how many
     * fragments that follow it in the FIFO ride on its line (one line,
     * one reply, split by the mode's unbatch). */
    int batch;
    struct buf bkeys;
    uint32_t riders;
    /* Migration (request_gate): the keys that must leave their old owner
     * before this fragment may run on its new one. While any gate is on
     * its way the fragment is held: its bytes wait in <pending>, in its
     * client's held FIFO (<hnext>), and everything the client sends
     * after it waits behind it (per-client order). */
    struct rgate *gates;    /* registered, not sent yet */
    unsigned gates_pending; /* sent, not answered */
    bool held;
    bool failed;    /* no reply came (refused, reset, timed out) */
    bool abandoned; /* its client is gone: fails once released */
    struct rfrag *hnext;
    struct server *hold_to; /* where it goes when released (ref held) */
    uint64_t hold_hash, hold_stream;
    char *gate_error;   /* why a gate failed: the fragment's error */
    struct rgate *gate; /* this fragment is a gate's own */
};

/* A client request, from parse to the last byte of its reply. */
struct rreq {
    struct rclient *client;
    const struct request_mode *mode; /* its client's (an orphan keeps it) */
    struct rreq *next;               /* the client's FIFO */
    int command;                     /* the mode's command index, -1 unknown */
    int kind;                        /* the mode's class of it */
    unsigned flags;                  /* enum proto_request_flag */
    struct rfrag *frags;             /* [nfrags] */
    size_t nfrags, pending;          /* fragments, and those not answered yet */
    struct rfrag one;                /* the fragment of a plain request */
    struct buf reply;                /* what the client gets, in order */
    bool done;                       /* <reply> is complete */
    bool streaming;                  /* its reply body is still arriving */
    bool quit;                       /* close once it is answered */
    uint64_t start_ms;
    uint64_t start_us; /* parsed at (monotonic): latency */
    void *mode_data;   /* the mode's (merge state), freed by it */
    /* Replication (request_send_keyed): a copy of a fragment on its way
     * to one member of the key's replica set -- its own request, with no
     * client, that reports to <rep> (its slot <rep_idx>) when answered;
     * or a repair's request to one member, reporting to <job>. */
    struct rrep *rep;
    struct rjob *job;
    struct rpause *pause; /* or of an ordered fan-out (request_send_every) */
    unsigned rep_idx;
    bool rep_one; /* set by the mode: a reply that differs by member
                     (TTL, SRANDMEMBER...): one member answers a read */
};

/* The engine's per-worker, per-member state. */
struct rmember {
    uint64_t id;            /* server->id */
    struct server *server;  /* (ref held) */
    struct pool *pool;      /* (ref held) */
    struct rserver **conns; /* [nconns] server_connections of it */
    size_t nconns;
    const struct request_mode *mode; /* the protocol its connections speak */
    struct rmember *next;            /* hash chain */
};

/* What a store mode supplies to the engine (data/redis_mode.c,
 * data/memcache_mode.c). */
struct request_mode {
    const struct proto *proto; /* its parsers and error replies */
    /*
     * Route parsed request <rq> (its bytes at <buf>, <rq->head> of them,
     * then <rq->body> streamed) of client <c> by snapshot <snap> (the one
     * its parse read: one snapshot's settings for the whole request):
     * answer it locally, refuse it, or send its fragments (request_send).
     * Returns 0, or -1 when the client must close (out of memory).
     */
    int (*dispatch)(struct rclient *c, struct rreq *r,
                    const struct pool_snapshot *snap, const char *buf,
                    const struct proto_request *rq);
    /* Every fragment of <r> is answered: write the client's reply from
     * them (merge). */
    void (*complete)(struct rreq *r);
    /* Free what dispatch hung on r->mode_data. */
    void (*release)(struct rreq *r);
    /* The bytes a fresh server connection sends first (AUTH, SELECT) and
     * how many replies they produce (swallowed): their length, or -1 when
     * they do not fit <cap>. */
    int (*handshake)(const struct pool_snapshot *snap, char *out, size_t cap,
                     unsigned *replies);
    /* Whether the reply <buf> (<len> bytes) a mode wrote (a merge) is an
     * error, for the pool's error count. */
    bool (*is_error)(const char *buf, size_t len);
    /* A batch's reply <buf> (<len> bytes, not an error): give each of the
     * <n> fragments <frags> its own (request_frag_reply). NULL: the mode
     * does not batch. */
    void (*unbatch)(const char *buf, size_t len, struct rfrag *const *frags,
                    size_t n);
    /*
     * Migration. The request, sent to a key's old owner, that makes <key>
     * (<len> bytes) ready for a request <command> (the client's) on member
     * <to>, its new owner -- redis: MIGRATE it there; memcache: read it
     * for a warm-up, or delete it --, appended to <out>, and the mode's
     * command index of what it sent in *<sent> (to parse its reply). <again>:
     * the previous try asked to overwrite (GATE_RETRY). 0, or -1 (out of
     * memory). NULL: the mode does not migrate (the mode calls
     * request_gate only for the requests that need one).
     */
    int (*gate_build)(const struct pool_snapshot *snap, const struct server *to,
                      const char *key, size_t len, int command, bool again,
                      struct buf *out, int *sent);
    /*
     * What the reply <buf> (<len> bytes) to step <step> (0: gate_build's)
     * of the gate for <key> (before the client's request <command>) says:
     * enum migration_gate. GATE_NEXT (GATE_NEXT_OLD): <next> holds
     * the request of the next step, for the new (old) owner, and *<sent>
     * its command index.
     */
    int (*gate_result)(int step, int command, const char *buf, size_t len,
                       const char *key, size_t klen, struct buf *next,
                       int *sent);
};

/* The store modes' tables (redis_mode.c, memcache_mode.c), registered once
 * at start by data/dispatch.c: the engine names no mode. */
void request_register_modes(const struct request_mode *redis,
                            const struct request_mode *memcache);
/* The table of the mode of <snap> (a redis or memcache pool's). */
struct pool_snapshot;
const struct request_mode *request_mode_of(const struct pool_snapshot *snap);

/* A client of a store pool. */
struct rclient {
    struct io_side side;
    struct worker_conn link;
    struct worker_task more;  /* input left after the read budget */
    struct worker_task ready; /* replies ready to be written */
    struct worker *w;
    struct pool *pool; /* (ref held) */
    const struct request_mode *mode;
    uint64_t id;              /* CLIENT ID */
    struct buf in;            /* bytes read, not yet parsed */
    struct rreq *head, *tail; /* requests in order */
    size_t nreqs;
    struct proto_span *keys, *args; /* parse arrays, grown on demand */
    size_t keycap, argcap;
    char *scratch; /* inline re-encoding */
    size_t scratchcap;
    struct proto_progress progress; /* through the request coming in */
    struct rserver *stream_to;      /* a request body being forwarded there */
    uint64_t stream_left;
    bool stream_wait;        /* ...once that connection is free: another
                                client's value goes first */
    bool authed;             /* AUTH given (or none required) */
    bool closing;            /* close once every reply is written */
    bool lingering;          /* replies written and FIN sent: what the
                                client still sends is read and dropped
                                (so its kernel does not reset the
                                connection before it reads our last
                                reply), until its FIN or <timer> */
    struct timer timer;      /* lingering, or watching a value's stream */
    bool stall_armed;        /* <timer> watches the stream */
    uint64_t stream_seen_ms; /* when its value last moved */
    bool closed;
    char *name; /* CLIENT SETNAME */
    /* fragments held for a migration's gate, in order (request_gate) */
    struct rfrag *hhead, *htail;
    bool stream_held; /* its value waits for a held fragment */
    /* redis: inside a MULTI block, refused whole until EXEC, DISCARD or
     * RESET (redis_mode.c) */
    bool multi_refused;
};

/* `preconnect: true`: open worker <w>'s connections to every member of
 * pool <p> now (as twemproxy does at start), not at the first request. */
void request_preconnect(struct worker *w, struct pool *p);

/* engine_accept_fn for redis and memcache pools. */
void request_accept(struct worker *w, struct listener *l, int fd,
                    const struct sockaddr *peer, socklen_t peerlen);

/*
 * For the modes. Create <r>'s fragments: <n> of them (1: the embedded
 * one). The mode fills each fragment's member and keys, then sends it.
 */
int request_frags(struct rreq *r, size_t n);

/*
 * Queue fragment <f> of <r> to member <s> of the pool: <len> bytes at
 * <buf>, then, when <stream> is not 0, that many bytes of the client's
 * following input forwarded as they come (a large value). The member's
 * connection is chosen by <hash> among its server_connections (one key
 * always takes the same one: per-key order). On a connection that cannot
 * be had (refused, no descriptor), <f> is answered with the error at once.
 */
void request_send(struct rreq *r, struct rfrag *f, struct server *s,
                  uint64_t hash, const char *buf, size_t len, uint64_t stream);

/*
 * request_send for a fragment whose keys (<nkeys> of them, packed: each
 * a 4-byte length then its bytes, in <keys>) all share one replica set
 * in <snap>, <s> being its primary (request_key_member's or
 * request_route's answer) and <hash> the ring hash of its first key.
 * With replicas: 1, request_send. Else it runs on the members of the
 * key's replica set by the pool's policy: a write (PROTO_REQ_WRITE) on
 * every member, answered once write_quorum of them succeeded; a read on
 * one member (read_policy primary or any; the next one when it fails) or
 * on every readable member (quorum, the reply that read_quorum of them
 * agree on). <stream> is request_send's; 0 when replicated (a replicated
 * pool's parser takes values whole).
 */
void request_send_keyed(struct rreq *r, const struct pool_snapshot *snap,
                        struct rfrag *f, struct server *s, uint64_t hash,
                        const char *buf, size_t len, uint64_t stream,
                        const char *keys, size_t keyslen);

/*
 * Send fragment i of <r> (its fragments made, one per member) to
 * <members>[i], <len> bytes at <buf> each: a fan-out (FLUSHALL, flush_all,
 * DBSIZE). A write in a pool with replicas touches every key: it goes out
 * once every worker stopped starting the pool's requests and had every
 * request it sent them answered, and they go on once every member
 * answered it -- so it falls between the same two writes of each key on
 * every member (request_repair.c). A member that misses it is compared
 * whole. Otherwise request_send, fragment by fragment.
 */
void request_send_every(struct rreq *r, const struct pool_snapshot *snap,
                        struct server *const *members, size_t n,
                        const char *buf, size_t len);

/* Append key <k> (<len> bytes) to <keys>, packed for request_send_keyed
 * -- only in a pool of <snap> with replicas (the others need no keys:
 * nothing is done). 0 or -1 (out of memory). */
int request_key_pack(const struct pool_snapshot *snap, struct buf *keys,
                     const char *k, size_t len);

/*
 * Queue fragment <f> of <r> as request_send does, as the line "<cmd>
 * <keys>\r\n" -- or, when the connection's last queued line is a batch
 * of the same <kind> not written yet, by adding " <keys>" to that line:
 * many requests, one request on the wire, one reply that the mode's
 * unbatch splits. For reads whose reply names its keys (memcached's get).
 */
void request_send_batch(struct rreq *r, struct rfrag *f, struct server *s,
                        uint64_t hash, int kind, const char *cmd,
                        const char *keys, size_t keyslen);

/* For unbatch: <len> bytes of <f>'s reply. */
void request_frag_reply(struct rfrag *f, const char *data, size_t len);

/* <r> routes <key> (<len> bytes): counted in its worker's hot key
 * summary of the pool (hot.h) when the pool tracks them. */
void request_hot_note(const struct rreq *r, const struct pool_snapshot *snap,
                      const char *key, size_t len);

/*
 * The member that serves <key> (<len> bytes) in <snap>: the ring's owner
 * of its hash tag's part (*<hash>), or, when that member is not up and
 * on_failure allows it, the next up member in the key's preference order.
 * NULL when none may: *<why> says why.
 */
struct server *request_key_member(const struct pool_snapshot *snap,
                                  const char *key, size_t len, uint64_t *hash,
                                  const char **why);

/* Where the keys of a multi-key request live. */
#define REQUEST_ROUTE_INLINE 16
struct request_route {
    struct server **owner;   /* [nkeys] key i's member */
    uint64_t *hash;          /* [nkeys] key i's ring hash */
    struct server **members; /* the distinct ones, in their first key's
                                order (replicas > 1: the primary of each
                                distinct replica set, maybe twice) */
    uint32_t *group;         /* [nkeys] key i's index in <members> */
    size_t nmembers;
    /* the arrays themselves for up to REQUEST_ROUTE_INLINE keys (no
     * allocation for the usual request) */
    struct server *owner_in[REQUEST_ROUTE_INLINE];
    uint64_t hash_in[REQUEST_ROUTE_INLINE];
    struct server *members_in[REQUEST_ROUTE_INLINE];
    uint32_t group_in[REQUEST_ROUTE_INLINE];
};

/*
 * Route the <nkeys> keys of <r> (spans of <buf>) into <rt>: 1 when every
 * key has a member; 0 when one has none, and <r> is answered with the
 * error; -1 when out of memory. <rt> is the caller's to
 * request_route_free in every case.
 */
int request_route(struct rreq *r, const struct pool_snapshot *snap,
                  const char *buf, const struct proto_span *keys, size_t nkeys,
                  struct request_route *rt);
void request_route_free(struct request_route *rt);

/* Whether keys of ring hashes <a> and <b> (of one member) may go in one
 * fragment in <snap>: with replicas, only keys of one hash (one hash
 * tag): all requests of a key run on the worker its hash names, one
 * order per key (request_rep.c). */
bool request_same_set(const struct pool_snapshot *snap, uint64_t a, uint64_t b);

/*
 * Migration. Key <key> (<len> bytes, ring hash <hash>) goes to <to>
 * (request_key_member's answer) in <snap>: 1 when a migration moves it
 * and it may still be on its old owner (*<from>), 0 when it is not
 * moving, -1 when it cannot be served now (*<why>: its old or new owner
 * is not up -- a moving key is served by nobody else).
 */
int request_key_source(const struct pool_snapshot *snap, const char *key,
                       size_t len, uint64_t hash, const struct server *to,
                       struct server **from, const char **why);

/*
 * Before fragment <f> of <r> runs on <to>, key <key> must have left
 * <from> (as request_key_source said of it in <snap>: the same snapshot,
 * not one loaded again, which may be newer and carry no migration): the
 * mode's gate_build request goes to <from> first, and <f>
 * (sent with request_send as usual) waits for its answer. 0 or -1 (out of
 * memory).
 */
int request_gate(struct rreq *r, const struct pool_snapshot *snap,
                 struct rfrag *f, struct server *from, struct server *to,
                 const char *key, size_t len);

/*
 * A repair of one key of a replicated pool (replica.c's repairer asks,
 * request_repair.c runs it): its home worker, the one every request of the
 * key goes through, holds the key's requests, reads every member's copy,
 * writes the copy the members that hold the current one agree on where
 * it differs (or where a member is behind), deletes it on <leavers>, and
 * lets the held requests go. The members' FIFO connections put the
 * repair exactly between two of the key's writes: it can never undo one.
 * The caller fills the fields up to <done> (references held, freed by
 * <done>'s caller), then request_repair_submit; <done> runs once, on the
 * home worker (or at exit on the stopping thread), and owns <r> from
 * then on.
 */
enum request_repair_result {
    REPAIR_OK,        /* every member of the set holds the copy */
    REPAIR_UNDECIDED, /* no copy has a majority among the members that
                         hold current ones: left, noted */
    REPAIR_FAILED     /* a member could not be read or written: again
                         later */
};

struct request_repair {
    struct worker_msg msg; /* (the engine's) */
    struct pool *pool;     /* (ref held) */
    char *key;             /* (owned) */
    size_t klen;
    uint64_t hash; /* its ring hash (picks its home) */
    /* read as voters when no member of the key's set holds its current
     * copy (a fill: the members of the placement that held it) */
    struct server **holders; /* (refs held, owned array) */
    size_t nholders;
    /* members that left the key's set: its copy there is deleted */
    struct server **leavers; /* (refs held, owned array) */
    size_t nleavers;
    /* The first comparison of the key since chashd started (its writes
     * may have been on their way when the last one stopped): a copy
     * beats the key's absence, and a member of the set that cannot be
     * read is noted behind (it was not compared). */
    bool verify;
    void (*done)(struct request_repair *r);
    void *arg; /* the caller's */
    /* results */
    int result;            /* enum request_repair_result */
    unsigned written;      /* copies written */
    unsigned deleted;      /* copies deleted on leavers */
    bool divergent;        /* members holding current copies disagreed */
    struct server *failed; /* the member that could not be reached, or
                              NULL (a borrowed pointer, for the log) */
    void *priv;            /* (the engine's) */
};

/* Any thread: run <r> on its key's home worker. */
void request_repair_submit(struct request_repair *r);

/*
 * A barrier over every worker for pool <pool>: passed once each worker
 * has taken it -- every request of the pool it runs after that uses the
 * snapshot published before the barrier began -- and every request it
 * had sent to the pool's members by then is answered (or failed). A fill
 * lists the members' keys after one: a key a request of the old
 * placement was creating is on some member by then.
 */
struct request_barrier {
    struct pool *pool;     /* (ref held) */
    _Atomic unsigned left; /* (atomic) workers yet to pass it */
    _Atomic int refs;      /* (atomic) */
};

/* Any thread: start one (a reference for the caller); NULL when out of
 * memory. */
struct request_barrier *request_barrier_start(struct pool *p);
bool request_barrier_passed(struct request_barrier *b);
void request_barrier_unref(struct request_barrier *b);

/* worker_call target: the drain barrier of a migration (struct
 * migration_drain *<arg>, whose reference it takes) in worker <w>. */
void request_drain(struct worker *w, void *arg);

/* Any member that is up, spread by <client>, for a request whose reply
 * is the same on every member. NULL when none is. */
struct server *request_any_member(const struct pool_snapshot *snap,
                                  uint64_t client);

/* The mode's state of <r> (a merge): <size> zeroed bytes, hung on
 * r->mode_data (the mode's release frees it). NULL when out of memory. */
void *request_mode_data(struct rreq *r, size_t size);

/* The first fragment of <r> whose reply is an error, or NULL. */
const struct rfrag *request_first_error(const struct rreq *r);

/* Answer <r> with <len> bytes (a local reply, an error): it is done. */
void request_answer(struct rreq *r, const char *reply, size_t len);
/* Answer <r> with the mode's error reply of <kind> (enum proto_error). */
void request_error(struct rreq *r, int kind, const char *msg);

/* The current snapshot of <c>'s pool (inside the worker's epoch). */
struct pool_snapshot *request_snapshot(struct rclient *c);

#endif /* CHASHD_REQUEST_H */

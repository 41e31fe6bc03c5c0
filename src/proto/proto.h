/* proto.h -- the table a mode fills in: the pure functions the engines
 * call to understand a protocol. A connection mode (tcp, and http for its
 * first request) gives the key of a connection; a request mode (redis,
 * memcache, http) parses requests into their routing keys, parses
 * replies, writes error replies in place, and names its health probe.
 * Every function here is pure -- no I/O, no allocation, no global state --
 * so that each has a libFuzzer target (tests/fuzz/) and a unit test.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_H
#define CHASHD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Longest key a mode produces from a connection ("[v6]:port"). */
#define PROTO_KEY_MAX 64

/* What a parse function found. */
enum proto_status {
    PROTO_OK = 0,  /* a whole request (or reply) head was parsed */
    PROTO_AGAIN,   /* incomplete: call again with more bytes */
    PROTO_KEYS,    /* more keys than the caller's array holds: grow it to
                      nkeys and call again */
    PROTO_INVALID, /* malformed, but the stream can be resynchronised
                      past <head> bytes: answer an error and go on */
    PROTO_FATAL    /* malformed, no resynchronisation possible: answer an
                      error if the protocol has one, then close */
};

/* A span of the caller's buffer. */
struct proto_span {
    size_t off, len;
};

/* How a request is served (flags of struct proto_request). */
enum proto_request_flag {
    PROTO_REQ_LOCAL = 1u << 0,   /* answered by chashd (PING, version...) */
    PROTO_REQ_NOKEY = 1u << 1,   /* no key: any member (or refused) */
    PROTO_REQ_SPLIT = 1u << 2,   /* one fragment per member, replies
                                    merged (MGET, DEL, get k1 k2 ...) */
    PROTO_REQ_SAME = 1u << 3,    /* several keys that must share a member
                                    (SUNIONSTORE, EVAL): refused when not */
    PROTO_REQ_WRITE = 1u << 4,   /* changes data: replication and the
                                    migration gate care */
    PROTO_REQ_NOREPLY = 1u << 5, /* the member sends no reply (noreply, q) */
    PROTO_REQ_QUIT = 1u << 6,    /* close after the replies before it */
    PROTO_REQ_FANOUT = 1u << 7,  /* every member (flush_all, with leave) */
    PROTO_REQ_REFUSED = 1u << 8, /* understood but not served: answer the
                                    error in <err> and keep the connection */
    PROTO_REQ_INLINE = 1u << 9,  /* an inline (telnet) request: <args> point
                                    into <scratch>, where the parser wrote it
                                    re-encoded in the protocol's own form */
    PROTO_REQ_PLAIN = 1u << 10   /* one key, sent as it is to its member,
                                    the reply returned as it is: the engine
                                    routes it without the mode (GET, SET,
                                    INCR; set, incr, delete) */
};

/* The smallest value a parser streams instead of waiting for it whole:
 * smaller ones are simply parsed once they are all in the buffer. */
#define PROTO_STREAM_MIN (16 * 1024)

/*
 * How far a parser got through a request that is not all in yet: the
 * caller keeps it between calls on the same (growing) input, zeroed for
 * each new request, so that a request arriving over many reads is not
 * walked again from its start each time (quadratic in its arguments).
 * Valid only while the caller's <args> keep what the parser stored.
 */
struct proto_progress {
    size_t pos;            /* bytes verified, from the request's start */
    size_t done;           /* arguments verified */
    struct proto_span arg; /* the first argument (the command name) */
};

/*
 * One parsed request. The caller provides <keys> (<keycap> entries) and
 * keeps the buffer; the parser fills the rest. A request is <head> bytes
 * that were parsed (the command and every key) followed by <body> bytes
 * the engine forwards without looking at them, so a large value streams
 * through without being held whole.
 */
struct proto_request {
    size_t head;             /* bytes of the command and its keys */
    uint64_t body;           /* bytes that follow verbatim (a value) */
    int command;             /* the mode's command index, -1: unknown */
    unsigned flags;          /* enum proto_request_flag */
    struct proto_span *keys; /* (caller's) the routing keys, in order */
    size_t keycap;           /* entries in <keys> */
    size_t nkeys;            /* keys found (may exceed keycap: PROTO_KEYS) */
    struct proto_span *args; /* (caller's) every argument, the command
                                name first; a streamed last argument's span
                                starts at <head> with its declared length */
    size_t argcap;           /* entries in <args> */
    size_t nargs;            /* arguments found (> argcap: PROTO_KEYS) */
    char *scratch;           /* (caller's) room for an inline request's
                                re-encoding (PROTO_REQ_INLINE) */
    size_t scratchcap;
    size_t scratchlen;  /* bytes of it used */
    uint64_t max;       /* the largest request accepted (bytes); more
                           is PROTO_FATAL ("too large") */
    uint64_t value_max; /* memcache: the largest value stored (the
                           pool's item_size_max); 0: MC_ITEM_SIZE_MAX */
    bool whole;         /* (caller's) never stream a value: the
                           request is complete when parsed (a
                           replicated pool sends it to several
                           members) */
    struct proto_progress *progress; /* (caller's, may be NULL) where a
                                        parse that said PROTO_AGAIN goes
                                        on from */
    const char *err;                 /* a static reason for PROTO_INVALID,
                                        PROTO_FATAL and PROTO_REQ_REFUSED */
};

/* One parsed reply: <len> bytes parsed (the whole reply, or the head of a
 * large value), <body> bytes that follow verbatim (0 unless the parser
 * streams the value), whether it is an error reply, and whether the error
 * says the member cannot serve at all (-LOADING, -OOM, -BUSY: counted
 * toward its failures, as twemproxy does). */
struct proto_reply {
    uint64_t len;
    uint64_t body;
    bool error;
    bool member_failure;
};

/* Kinds of error replies chashd writes in place of a member's reply. */
enum proto_error {
    PROTO_ERR_REFUSED,   /* the member refused the connection */
    PROTO_ERR_TIMEOUT,   /* the member did not answer in `timeout` */
    PROTO_ERR_CLOSED,    /* the member closed before answering */
    PROTO_ERR_NO_MEMBER, /* no member may serve the key */
    PROTO_ERR_REQUEST    /* the request itself: <msg> says why */
};

struct proto {
    const char *name; /* the config's mode name */
    int mode;         /* enum conf_mode */

    /*
     * Connection modes. The ring key for a client whose address is
     * <peer>/<peerlen>, as text into <buf> (<cap> bytes): <hash_key>
     * (enum conf_hash_key) selects the attribute. Returns the key length,
     * or -1 when the address family has no key (the connection is
     * refused).
     */
    int (*conn_key)(const struct sockaddr *peer, socklen_t peerlen,
                    int hash_key, char *buf, size_t cap);

    /*
     * Request modes (NULL in tcp). Parse the request at the start of
     * <buf> (<len> bytes) into <rq>. Returns an enum proto_status; with
     * PROTO_OK, rq->head bytes are consumed and rq->body follow.
     */
    int (*parse_request)(const char *buf, size_t len, struct proto_request *rq);

    /* Parse the reply at the start of <buf> to request <rq>; same
     * statuses (PROTO_KEYS is not used). */
    int (*parse_reply)(const char *buf, size_t len,
                       const struct proto_request *rq, struct proto_reply *rp);

    /* Write the error reply of <kind> (<msg>: a detail, may be NULL) into
     * <out> (<cap> bytes); returns its length (cut to fit). */
    size_t (*error_reply)(char *out, size_t cap, int kind, const char *msg);

    /*
     * The health probe: <probe_len> bytes to send on a fresh connection
     * to a member, and the check of what comes back: 1 healthy, 0 need
     * more bytes, -1 unhealthy. NULL probe: a connect is the check (tcp).
     */
    const char *probe;
    size_t probe_len;
    int (*probe_reply)(const char *buf, size_t len);
};

/* What a parse_request sets before it looks at a byte: nothing parsed,
 * no flags, no error. */
static inline void
proto_request_reset(struct proto_request *rq)
{
    rq->head = 0;
    rq->body = 0;
    rq->command = -1;
    rq->flags = 0;
    rq->nkeys = 0;
    rq->nargs = 0;
    rq->scratchlen = 0;
    rq->err = NULL;
}

/* A request mode's error texts, for proto_error_reply. */
struct proto_error_texts {
    const char *lead;                     /* the line's first bytes ("-") */
    const char *kinds[PROTO_ERR_REQUEST]; /* refused, timed out, closed, no
                                             member; a detail follows ": " */
    const char *request;                  /* a bad request, without a message */
    const char *request_prefix; /* before a message without its own code */
    bool (*has_code)(const char *msg); /* the message has its code */
};

/* The error reply of <kind> (enum proto_error; <msg>: a detail, may be
 * NULL) in the texts <t>, into <out> (<cap> bytes): one line, CR and LF
 * of the texts made blanks, cut to fit and still ended. Its length, or
 * 0 when <cap> cannot hold an empty one. Pure. */
size_t proto_error_reply(const struct proto_error_texts *t, char *out,
                         size_t cap, int kind, const char *msg);

#endif /* CHASHD_PROTO_H */

/* splice.h -- the tcp mode's engine: one client connection spliced to one
 * member, chosen once by the client's key; non-blocking connect with
 * retries on the next member, then bytes both ways with back-pressure and
 * half-close; the PROXY protocol on either side when asked (accept_proxy,
 * send_proxy). Runs inside one worker; nothing here is shared.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_SPLICE_H
#define CHASHD_SPLICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "data/fastpath.h"
#include "loop/io.h"
#include "loop/worker.h"

/* Members remembered as tried for one client (retries beyond it may
 * retry a member). */
#define SPLICE_TRIED_MAX 8

struct server;

/* CONNECTING is 0: a new pair (calloc) connects. SPLICE_HEADER: an
 * accept_proxy client waits for its PROXY header, before any connect. */
enum splice_state {
    SPLICE_CONNECTING,
    SPLICE_ESTABLISHED,
    SPLICE_CLOSED,
    SPLICE_HEADER
};

/*
 * A client and its member. Owned by its worker: linked in the worker's
 * connection list from accept to close, freed after the loop iteration in
 * which it closed (worker_defer_free), since a later event of the same
 * batch may still point at one of its sides.
 */
struct splice {
    struct io_side client;
    struct io_side backend;
    struct worker_conn link; /* the worker's list */
    struct worker_task more; /* input left after the read budget */
    struct timer timer;      /* connect deadline, idle check, fd wait */
    struct pool *pool;       /* (ref held) */
    struct server *server;   /* (ref held) NULL before the first pick */
    int state;               /* enum splice_state */
    uint64_t last_active_ms;
    uint32_t connect_timeout_ms;
    uint32_t idle_timeout_ms;
    uint64_t hash;                    /* of the key, for retries */
    uint64_t tried[SPLICE_TRIED_MAX]; /* ids of members that failed */
    uint32_t attempts;                /* connects started */
    uint64_t sent_up; /* bytes passed from the client to the member */
    bool answered;    /* the member has sent a byte */
    bool blamed;      /* counted as a passive failure of the member */
    bool decided;     /* the routing decision has been counted */
    bool counted;     /* counted in server/pool active_backends */
    /* send_proxy: the PROXY header each member connection starts with
     * (owned; NULL when off), written before any byte of the client's */
    char *hello;
    size_t hello_len;
    /* for the access log (access_log.h) */
    uint64_t sent_down; /* bytes passed from the member to the client */
    uint64_t start_ms;  /* w->now_ms at accept */
    int routing;        /* the last enum stats_decision, once <decided> */
    struct sockaddr_storage peer; /* the client as logged: the socket's
                                     peer, or the PROXY header's source
                                     when one was taken */
    socklen_t peerlen;            /* 0: unknown ("-") */
    int client_family;            /* the client socket's (AF_INET...) */
    /* The fast path (fastpath.h): once chashd holds none of the pair's
     * bytes, the kernel moves them; chashd still sees every edge. */
    bool fast;                  /* in the fast path */
    bool fast_tried;            /* entered it, or will not */
    bool fast_quiet;            /* watched for hang-ups and errors only */
    bool fast_out[2];           /* the program held the way from end i for
                                   chashd, its queue out (fast_hold) */
    uint64_t fast_read[2];      /* bytes chashd read from end i since then */
    uint64_t fast_folded[2];    /* the kernel's bytes counted in the stats */
    uint64_t fast_looked_ms[2]; /* when its bound was last raised */
    uint64_t close_by_ms;       /* closing once the kernel's bytes for the
                                   healthy end are out, at the latest then
                                   (0: not closing) */
    int fast_bad;               /* closing: the end that failed */
    uint32_t wait_ms;           /* the back-off of <wait> */
    struct timer wait;          /* bytes of the kernel's still on their way */
    struct fastpath_pair fp;
};

/* engine_accept_fn for tcp pools (engine.h). */
void splice_accept(struct worker *w, struct listener *l, int fd,
                   const struct sockaddr *peer, socklen_t peerlen);

#endif /* CHASHD_SPLICE_H */

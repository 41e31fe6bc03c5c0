/* proxy.h -- connection pairs: accept, choose a member, non-blocking
 * connect with retries, then bytes both ways with back-pressure and
 * half-close. Runs inside one worker; nothing here is shared.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROXY_H
#define CHASHD_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker.h"

/* Bytes read per call, and the most a direction buffers for a peer that
 * cannot take more: back-pressure starts there. */
#define PROXY_BUF (16 * 1024)
/* Members remembered as tried for one client (retries beyond it may
 * retry a member). */
#define PROXY_TRIED_MAX 8

struct server;

/*
 * One end of a pair, registered once with epoll, edge-triggered, for
 * input, output and read hang-up: no epoll_ctl after that. <readable>
 * remembers an input edge not yet drained (reads stop while the peer has
 * bytes pending: that is the back-pressure). <buf> holds bytes waiting to
 * be written TO this end, allocated on the first partial write.
 */
struct side {
    struct ev ev; /* EV_CLIENT or EV_BACKEND */
    int fd;
    bool readable; /* input edge seen, not drained */
    bool rdhup;    /* FIN seen with the edge: read to EOF */
    bool eof_in;   /* this end sent FIN (read returned 0) */
    bool shut_out; /* FIN passed on to this end (or due at
                      close, both ends having sent theirs) */
    char *buf;
    size_t off, len;
    int outq; /* its kernel send queue at the last idle check */
};

enum conn_state { CONN_CONNECTING, CONN_ESTABLISHED, CONN_CLOSED };

struct conn {
    struct side client;
    struct side backend;
    struct worker *w;
    struct pool *pool;     /* (ref held) */
    struct server *server; /* (ref held) NULL before the first pick */
    int state;             /* enum conn_state */
    struct timer timer;    /* connect deadline or idle check */
    uint64_t last_active_ms;
    uint32_t connect_timeout_ms;
    uint32_t idle_timeout_ms;
    uint64_t hash;                   /* of the key, for retries */
    uint64_t tried[PROXY_TRIED_MAX]; /* ids of members that failed */
    uint32_t attempts;               /* connects started */
    bool decided;                    /* the routing decision has been counted */
    bool counted;             /* counted in server/pool active_backends */
    bool pending;             /* on the worker's pending list */
    struct conn *prev, *next; /* worker's list */
    struct conn *next_pending;
};

/* Accept what is pending on <l> (worker). */
void proxy_accept(struct worker *w, struct listener *l);
/* Readiness on one end of a connection. */
void proxy_event(struct worker *w, struct side *s, uint32_t events);
/* The timer of <c> expired. */
void proxy_timeout(struct worker *w, struct conn *c);
/* Close every connection of <w> (worker exit). */
void proxy_close_all(struct worker *w);
/* Free the connections closed during this loop iteration. */
void proxy_reap(struct worker *w);
/* Resume the pairs that stopped reading at their per-event budget with
 * input left (edge-triggered: no new edge would come). */
void proxy_run_pending(struct worker *w);

#endif /* CHASHD_PROXY_H */

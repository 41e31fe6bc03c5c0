/* fastpath.h -- the tcp fast path: once a client is paired with its member
 * and chashd holds none of their bytes, both sockets go into a sockhash
 * whose BPF verdict program (src/data/bpf/fastpath.bpf.c) writes each
 * segment read from one end straight to the other, in the kernel, and
 * counts it. chashd keeps the rest: routing, FINs (half-close), errors,
 * closes, idle_timeout, and the bound on what the kernel may queue for a
 * peer that stops reading. Loaded once at start; per worker, pair slots
 * and a sweep that folds the kernel's byte counts into the stats.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_FASTPATH_H
#define CHASHD_FASTPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop/worker.h"

/* The most the kernel may hold of one direction's bytes on their way to
 * a peer that does not take them (beyond that peer's send buffer): past
 * it the program leaves the sender's bytes in its socket for chashd
 * (charged to its receive buffer: TCP's window stops the sender), and
 * chashd moves them once the kernel's are out (fastpath_abi.h). */
#define FASTPATH_WINDOW (2u * 1024 * 1024)

/*
 * What may wait, left to chashd, in a socket whose own output the kernel
 * cannot deliver (a client that sends without end and reads nothing of
 * what its member answers): there the kernel queues the left bytes behind
 * that output, outside the socket's receive buffer, so TCP's window does
 * not close. chashd closes such a pair once this much piles up (a log
 * line says so): the kernel's memory is not the client's to fill.
 */
#define FASTPATH_HARD (64u * 1024 * 1024)

/* How often chashd looks at a moving direction: each time the kernel has
 * moved this much more than its peer had taken at the last look (the
 * program's note wakes the worker). What the kernel may hold beyond the
 * window is what it moves before chashd looks: the sooner, the less. */
#define FASTPATH_NOTE (FASTPATH_WINDOW / 4)

/* The sides of a pair (fastpath_abi.h's FP_CLIENT and FP_MEMBER). */
enum fastpath_side { FASTPATH_CLIENT, FASTPATH_MEMBER };

struct fastpath_pair;

/* What the worker's sweep calls for each pair in the fast path, about
 * every FASTPATH_SWEEP_MS: fold the counters, raise the bounds. */
typedef void fastpath_sweep_fn(struct worker *w, struct fastpath_pair *fp);

/*
 * A pair in the fast path, embedded in its owner (splice.c). Worker
 * only. <slot> is the pair's index in the shared `pairs` map; <base>[i]
 * is where end i's byte stream stood (bytes written to it) when the pair
 * entered, so that the kernel's bytes can be told from chashd's.
 */
struct fastpath_pair {
    struct fastpath_pair *prev, *next; /* the worker's pairs in */
    fastpath_sweep_fn *sweep;
    uint32_t slot;
    bool in[2];           /* end i is in `socks`: the kernel moves its
                             input */
    int fd[2];            /* the ends (ref: the owner closes them) */
    uint64_t cookie[2];   /* their socket cookies (the `ends` keys) */
    uint64_t base[2];     /* end i's bytes written, at entry */
    uint64_t consumed[2]; /* bytes from end i chashd wrote to the other
                             end since entry (published to the program) */
    uint64_t drained[2];  /* of end i's input moved by the kernel, what
                             the other end had taken at the last look */
};

/*
 * Control thread, once, before the workers start: load the program,
 * create the maps for <workers> workers, attach. 0; or -1 with why the
 * fast path cannot run here in <why> (not built in, no privilege, the
 * kernel refused the program); tcp pools then use the user-space splice.
 */
int fastpath_init(unsigned workers, char *why, size_t whylen);

/* Control thread, after the workers stopped: maps, rings and slots
 * given back (the program goes with its last map). */
void fastpath_deinit(void);

/* Whether fastpath_init succeeded (any thread, after it). */
bool fastpath_ready(void);

/* Whether this chashd was built with the fast path (clang and libbpf at
 * build time). */
bool fastpath_built_in(void);

/*
 * Worker: put the pair of <client_fd> and <member_fd> (TCP sockets,
 * established, nothing of theirs held by chashd) into the fast path, with
 * <sweep> to call. 0; or -1 and the pair stays in user space, its sockets
 * untouched: EAGAIN when a socket has unread input (try again once the
 * splice has read it all), ENOSPC when no slot is left, else why a map
 * refused the sockets.
 */
int fastpath_enter(struct worker *w, struct fastpath_pair *fp, int client_fd,
                   int member_fd, fastpath_sweep_fn *sweep);

/* Worker: the pair leaves (its sockets are closed or about to be): its
 * slot and map entries are given back. */
void fastpath_leave(struct worker *w, struct fastpath_pair *fp);

/* Bytes read from end <side> and written to the other end by the
 * kernel, since the pair entered (a memory read). */
uint64_t fastpath_redirected(const struct fastpath_pair *fp, int side);

/* Whether the program left bytes from end <side> in its socket for
 * chashd (the bound was reached, or the peer left): the direction is then
 * chashd's until it has written them all. A memory read. */
bool fastpath_due(const struct fastpath_pair *fp, int side);

/* Bytes the program left to chashd from end <side> that chashd has not
 * written yet (a memory read). */
uint64_t fastpath_left(const struct fastpath_pair *fp, int side);

/* Whether the program left more bytes from end <side> to chashd than
 * the <read> chashd has read of them: a read that meets a FIN before them
 * (the kernel queues such bytes behind the socket's own output) is not
 * the end of that input. A memory read. */
bool fastpath_unread(const struct fastpath_pair *fp, int side, uint64_t read);

/* chashd has written <n> bytes of end <side>'s input to the other end
 * since the pair entered: once that covers what the program left it, the
 * program takes the direction back. */
void fastpath_consume(struct fastpath_pair *fp, int side, uint64_t n);

/*
 * Bytes the kernel read from end <side> that have not reached the other
 * end's socket yet (they wait in the kernel's queue for it); -1 when the
 * socket cannot say (errno). Nothing chashd writes there may go before
 * them, nor a FIN. Two system calls on the other end. The bound and the
 * next note move with the answer (FASTPATH_WINDOW, FASTPATH_NOTE beyond
 * what the other end has taken).
 */
int64_t fastpath_pending(struct fastpath_pair *fp, int side);

/* Whether the kernel moved FASTPATH_NOTE bytes from end <side> since the
 * last fastpath_pending() (a memory read): time to look. */
bool fastpath_near_limit(const struct fastpath_pair *fp, int side);

#endif /* CHASHD_FASTPATH_H */

/* worker.h -- the data-path threads: one epoll loop per worker, its own
 * SO_REUSEPORT listening socket per pool, a timer wheel for connect and
 * idle timeouts, and a small command queue from the control thread.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_WORKER_H
#define CHASHD_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pool;
struct conf_addr;
struct conn;

/* What an epoll event's data.ptr points at: the first member of each. */
enum ev_kind { EV_LISTENER, EV_CLIENT, EV_BACKEND, EV_COMMAND };
struct ev {
    int kind;
};

struct listener {
    struct ev ev;
    int fd;
    struct pool *pool; /* (ref held) */
    bool paused;       /* out of epoll: no file descriptor left */
    struct listener *next;
};

/* A timer wheel entry, embedded in what it times (conn). */
struct timer {
    struct timer *prev, *next; /* NULL when not armed */
    uint64_t deadline_ms;
};

#define WHEEL_MS 10
#define WHEEL_SLOTS 4096

struct worker_cmd;

struct worker {
    unsigned id; /* stats and epoch slot */
    pthread_t thread;
    int ep;    /* epoll */
    int cmdfd; /* eventfd: commands queued */
    struct ev cmd_ev;
    pthread_mutex_t lock; /* guards <cmds> only (control path) */
    struct worker_cmd *cmds;
    struct listener *listeners;
    struct listener *dead_listeners; /* closed this iteration (as dead) */
    struct conn *conns;              /* every live connection (list) */
    struct conn *pending;            /* pairs with input left to read */
    struct conn *dead;               /* closed this iteration, freed after it:
                                        later events of the same epoll batch
                                        may still point at them */
    _Atomic uint64_t nconns;         /* (atomic) live client connections */
    uint64_t now_ms;                 /* coarse clock of this iteration */
    char *scratch;                   /* read buffer, PROXY_BUF bytes */
    struct timer wheel[WHEEL_SLOTS]; /* list heads */
    uint64_t wheel_pos;              /* last slot processed (ms / WHEEL_MS) */
    size_t ntimers;
    uint64_t accept_resume_ms; /* paused listeners come back then (0: none) */
    bool exiting;
};

/*
 * Start <n> workers (threads). Signals must already be blocked in the
 * calling thread (the workers inherit the mask). 0 or -1.
 */
int worker_start_all(unsigned n);
unsigned worker_count(void);

/* Ask every worker to exit: live connections are closed; joins them. */
void worker_stop_all(void);

/*
 * Open <n> listening sockets on <addr> with SO_REUSEPORT (one per
 * worker) into <fds>. 0, or -1 with "cannot listen on ADDR: why" in <err>
 * (no socket left open).
 */
int listener_open(const struct conf_addr *addr, uint32_t backlog, int *fds,
                  unsigned n, char *err, size_t errlen);

/* Control thread: hand listening socket <fd> of pool <p> to worker <w>
 * (which takes ownership and a pool reference). */
int worker_add_listener(unsigned w, struct pool *p, int fd);
/* Control thread: worker <w> closes its listener <fd>. */
int worker_del_listener(unsigned w, int fd);
/* Control thread: every worker closes every listener (drain). */
void worker_stop_accepting(void);
/* Any thread: live client connections over all workers. */
uint64_t worker_connections(void);

/* Out of file descriptors: take <l> out of epoll for a moment (a
 * level-triggered listener would otherwise spin). Worker only. */
void worker_pause_listener(struct worker *w, struct listener *l);

/* Worker's own timer wheel (proxy.c). */
void worker_timer_set(struct worker *w, struct timer *t, uint64_t deadline_ms);
void worker_timer_del(struct worker *w, struct timer *t);

#endif /* CHASHD_WORKER_H */

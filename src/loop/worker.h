/* worker.h -- the data-path threads: one epoll loop per worker, its own
 * SO_REUSEPORT listening socket per pool, a timer wheel, deferred frees,
 * and a small command queue from the control thread. The loop knows no
 * connection type: every epoll event carries its handler, every timer its
 * expiry callback (as Redis' ae and libuv do).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_WORKER_H
#define CHASHD_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct pool;
struct conf_addr;
struct worker;

/*
 * What an epoll event's data.ptr points at: embed it in the object the fd
 * belongs to; <handler> gets the object back with container_of-style
 * arithmetic. Set before the fd is added to epoll, never changed while it
 * is.
 */
struct ev {
    void (*handler)(struct worker *w, struct ev *ev, uint32_t events);
};

/* The object of type <type> whose member <field> is at <ptr>: how a
 * handler gets back what embeds its ev, timer, task or message. */
#define WORKER_OF(ptr, type, field)                                            \
    ((type *)((char *)(ptr)-offsetof(type, field)))

/* A timer wheel entry, embedded in what it times. <on_expire> runs on the
 * worker when the deadline has passed (coarse: WHEEL_MS slots). */
struct timer {
    struct timer *prev, *next; /* NULL when not armed */
    uint64_t deadline_ms;
    void (*on_expire)(struct worker *w, struct timer *t);
};

/* A connection as the worker knows it: linked into the worker's list so
 * that worker exit closes it through <close> (which unlinks it). */
struct worker_conn {
    struct worker_conn *prev, *next;
    void (*close)(struct worker *w, struct worker_conn *c);
};

/* Work to run before the next epoll_wait (which then does not block): a
 * connection that stopped reading at its per-event budget with input
 * left, since an edge-triggered socket gives no new edge for it. */
struct worker_task {
    struct worker_task *next;
    bool queued;
    void (*run)(struct worker *w, struct worker_task *t);
};

struct listener {
    struct ev ev;
    int fd;
    struct pool *pool; /* (ref held) */
    bool paused;       /* out of epoll: no file descriptor left */
    struct listener *next;
};

#define WHEEL_MS 10
/* The per-worker read buffer every connection of the worker shares. */
#define WORKER_SCRATCH (16 * 1024)
#define WHEEL_SLOTS 4096

struct worker_cmd;

/*
 * A message from one thread to a worker (worker_post): a request of a
 * store pool handed to the worker that orders its key's writes, its reply
 * on the way back, a repair to run. Embed it in what it carries. <run>
 * runs on the target worker, in the order the messages were posted (one
 * order over every poster); <drop> runs instead when the target worker
 * has exited before it could run it (after every worker is joined, on
 * the thread that stops them): it must free what the message holds
 * without touching any worker.
 */
struct worker_msg {
    struct worker_msg *next;
    void (*run)(struct worker *w, struct worker_msg *m);
    void (*drop)(struct worker_msg *m);
};

struct worker {
    unsigned id; /* stats and epoch slot */
    pthread_t thread;
    int ep;    /* epoll */
    int cmdfd; /* eventfd: commands queued */
    struct ev cmd_ev;
    pthread_mutex_t lock; /* guards <cmds> only (control path) */
    struct worker_cmd *cmds;
    /* (atomic) messages posted to it, newest first (a lock-free stack
     * that the worker takes whole and reverses: worker_post) */
    _Atomic(struct worker_msg *) mail;
    /* What this worker posted to each worker during the current round of
     * its loop, newest first, and the oldest: delivered at the round's
     * end in one push and at most one wake-up (worker_post). */
    struct worker_msg **out_head, **out_tail; /* [nworkers] */
    struct listener *listeners;
    struct worker_conn conns; /* every live connection: list head */
    struct worker_task *soon; /* run before the next wait */
    void **dead;              /* freed after this iteration: later events of
                                 the same epoll batch may still point at
                                 them (worker_defer_free) */
    size_t ndead, capdead;
    _Atomic uint64_t nconns;         /* (atomic) live client connections */
    uint64_t now_ms;                 /* coarse clock of this iteration */
    char *scratch;                   /* read buffer, WORKER_SCRATCH bytes */
    struct timer wheel[WHEEL_SLOTS]; /* list heads */
    uint64_t wheel_pos;              /* last slot processed (ms / WHEEL_MS) */
    size_t ntimers;
    uint64_t accept_resume_ms; /* paused listeners come back then (0: none) */
    /* The engines' state in this worker, NULL until first used: opaque
     * here (the loop never looks inside; data/request.c, data/http.c). */
    struct rworker *requests;
    struct hworker *http;
    bool exiting;
};

/*
 * What a worker needs from the layers above it, registered once before
 * worker_start_all (data/dispatch.c's dispatch_init). The loop
 * holds a listener's pool only as a pointer it passes back.
 */
struct worker_hooks {
    /* a client <fd> accepted on <l> from <peer>: the engine of the
     * listener's pool owns it from here (closes it on any failure) */
    void (*accept)(struct worker *w, struct listener *l, int fd,
                   const struct sockaddr *peer, socklen_t peerlen);
    /* <w> started listening on <l> (at start, or its pool came with a
     * reload): the engine's chance to get ready (preconnect) */
    void (*listening)(struct worker *w, struct listener *l);
    void (*pool_ref)(struct pool *p);
    void (*pool_unref)(struct pool *p);
    const char *(*pool_name)(const struct pool *p);
    /* whether one of our pools listens on <addr> now (control thread) */
    bool (*address_ours)(const struct conf_addr *addr);
    /* the snapshot epochs: entered after each wait, quiescent before */
    void (*enter)(unsigned worker);
    void (*quiesce)(unsigned worker);
};
void worker_set_hooks(const struct worker_hooks *h);

/*
 * Start <n> workers (threads). Signals must already be blocked in the
 * calling thread (the workers inherit the mask). 0 or -1.
 */
int worker_start_all(unsigned n);
unsigned worker_count(void);

/* Ask every worker to exit: live connections are closed; joins them. */
void worker_stop_all(void);

/*
 * Open <n> listening sockets on <addr> with SO_REUSEPORT (one per worker)
 * into <fds>. Refuses an address another process already listens on (a
 * second chashd would silently share its clients through SO_REUSEPORT and
 * break stickiness). A unix path is bound once and shared (<perm> >= 0:
 * its mode). 0, or -1 with "cannot listen on ADDR: why" in <err> (no
 * socket left open).
 */
int listener_open(const struct conf_addr *addr, uint32_t backlog, int perm,
                  int *fds, unsigned n, char *err, size_t errlen);

/* Control thread: hand listening socket <fd> of pool <p> to worker <w>
 * (which takes ownership and a pool reference). */
int worker_add_listener(unsigned w, struct pool *p, int fd);
/* Control thread: worker <w> closes its listener <fd>. */
int worker_del_listener(unsigned w, int fd);
/* Control thread: every worker closes every listener (drain). */
void worker_stop_accepting(void);
/* Control thread: run <fn>(<w>, <arg>) on worker <w> (in its loop, in
 * order with the other commands). 0 or -1 (then <fn> is not called). */
int worker_call(unsigned w, void (*fn)(struct worker *w, void *arg), void *arg);
/*
 * Any thread: post <m> to worker <w>, which runs m->run in its loop, in
 * post order. Lock-free; the target is woken (its eventfd) only when its
 * mailbox was empty. 0, or -1 when there is no such worker (m->drop is
 * not called: the message is still the caller's).
 */
int worker_post(unsigned w, struct worker_msg *m);
/* Any thread: live client connections over all workers. */
uint64_t worker_connections(void);

/* Out of file descriptors: every listener of <w> leaves epoll for a moment
 * (a level-triggered listener would otherwise spin). Worker only. */
void worker_pause_accepting(struct worker *w);

/* Arm <t> for <deadline_ms> (re-arms an armed one), or disarm it. */
void worker_timer_set(struct worker *w, struct timer *t, uint64_t deadline_ms);
void worker_timer_del(struct worker *w, struct timer *t);

/* free(<p>) after the current loop iteration (NULL is ignored). Worker
 * only. Out of memory: freed at once, which is safe for objects no other
 * event of the batch can point at. */
void worker_defer_free(struct worker *w, void *p);

/* Link <c> into the worker's connections (closed at exit) / unlink it. */
void worker_conn_add(struct worker *w, struct worker_conn *c);
void worker_conn_del(struct worker_conn *c);

/* Queue <t> to run before the next epoll_wait (once, however often it is
 * queued); cancel it. Worker only. */
void worker_soon(struct worker *w, struct worker_task *t);
void worker_soon_cancel(struct worker *w, struct worker_task *t);

#endif /* CHASHD_WORKER_H */

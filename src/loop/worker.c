/* worker.c -- the data-path threads: one epoll loop per worker, each with
 * its own SO_REUSEPORT listening socket per pool, a timer wheel, deferred
 * frees, and a command queue the control thread fills (listeners in and
 * out, exit). Events and timers carry their handlers: this file knows no
 * connection type and no pool: what a listener's pool means (its engine,
 * its references, its snapshots' epochs) comes from the hooks the layers
 * above register (worker_set_hooks; data/dispatch.c).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "loop/worker.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/invariant.h"
#include "base/log.h"
#include "conf/conf.h"

/* The layers above (worker_set_hooks); set before worker_start_all. */
static struct worker_hooks hooks;

void
worker_set_hooks(const struct worker_hooks *h)
{
    hooks = *h;
}

enum cmd_type {
    CMD_ADD_LISTENER,
    CMD_DEL_LISTENER,
    CMD_STOP_ACCEPTING,
    CMD_CALL,
    CMD_EXIT
};

struct worker_cmd {
    int type;
    struct pool *pool; /* ADD: (ref held) */
    int fd;
    void (*fn)(struct worker *w, void *arg); /* CALL */
    void *arg;
    struct worker_cmd *next;
};

static struct worker *workers;
static unsigned nworkers;

unsigned
worker_count(void)
{
    return nworkers;
}

uint64_t
worker_connections(void)
{
    uint64_t n = 0;

    for (unsigned i = 0; i < nworkers; i++)
        n += atomic_load_explicit(&workers[i].nconns, memory_order_relaxed);
    return n;
}

/* ---- timer wheel --------------------------------------------------------
 * Slots of WHEEL_MS; an entry whose deadline is more than one revolution
 * away is simply put back when its slot comes round. Idle timeouts are
 * checked lazily: activity does not move an entry, the expiry handler
 * re-arms it from the last activity. */

void
worker_timer_del(struct worker *w, struct timer *t)
{
    if (t->next == NULL)
        return;
    t->prev->next = t->next;
    t->next->prev = t->prev;
    t->prev = t->next = NULL;
    INVARIANT(w->ntimers > 0);
    w->ntimers--;
}

void
worker_timer_set(struct worker *w, struct timer *t, uint64_t deadline_ms)
{
    uint64_t tick = deadline_ms / WHEEL_MS;
    struct timer *head;

    INVARIANT(t->on_expire != NULL);
    worker_timer_del(w, t);
    if (tick <= w->wheel_pos)
        tick = w->wheel_pos + 1;
    head = &w->wheel[tick & (WHEEL_SLOTS - 1)];
    t->deadline_ms = deadline_ms;
    t->next = head->next;
    t->prev = head;
    head->next->prev = t;
    head->next = t;
    w->ntimers++;
}

static void
wheel_advance(struct worker *w)
{
    uint64_t target = w->now_ms / WHEEL_MS;

    if (w->ntimers == 0) {
        w->wheel_pos = target;
        return;
    }
    while (w->wheel_pos < target && w->ntimers > 0) {
        struct timer *head = &w->wheel[++w->wheel_pos & (WHEEL_SLOTS - 1)];
        struct timer due = {&due, &due, 0, NULL};

        if (head->next == head)
            continue;
        /* Move the slot to a local list: handlers may re-arm into the
         * same slot (next revolution) or cancel other entries. */
        due.next = head->next;
        due.prev = head->prev;
        due.next->prev = &due;
        due.prev->next = &due;
        head->next = head->prev = head;
        while (due.next != &due) {
            struct timer *t = due.next;
            t->prev->next = t->next;
            t->next->prev = t->prev;
            t->prev = t->next = NULL;
            w->ntimers--;
            if (t->deadline_ms > w->now_ms) {
                worker_timer_set(w, t, t->deadline_ms);
                continue;
            }
            t->on_expire(w, t);
        }
    }
    if (w->ntimers == 0)
        w->wheel_pos = target;
}

/* ---- listeners ----------------------------------------------------------- */

/*
 * Whether another socket already listens on <addr>: a bind without
 * SO_REUSEPORT fails with EADDRINUSE when one does (SO_REUSEADDR lets
 * TIME_WAIT leftovers pass), whoever owns it. chashd's own listeners of
 * the same address are kept across reloads, never opened twice, so the
 * one found is another process's. 0 (free), 1 (taken), -1 (other error,
 * left to the real bind to report).
 */
static int
address_taken(const struct conf_addr *addr)
{
    int fd = socket(addr->family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    int rc = 0;

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&addr->sa, addr->salen) < 0)
        rc = errno == EADDRINUSE ? 1 : -1;
    close(fd);
    return rc;
}

/* Listening sockets handed to the workers to close (CMD_DEL_LISTENER) and
 * not closed yet: a reload that removed a pool, followed at once by one
 * that adds it back (a burst of SIGHUPs), finds the address still bound
 * -- by us. */
static _Atomic unsigned listeners_closing;

/* Whether <addr> is bound by another process: bound now, and still bound
 * once the listeners we are closing are closed (waited for, up to 1 s). */
static bool
address_foreign(const struct conf_addr *addr)
{
    struct timespec ts = {0, 10 * 1000 * 1000};

    if (address_taken(addr) != 1)
        return false;
    for (int i = 0; i < 100 && atomic_load(&listeners_closing) > 0; i++)
        nanosleep(&ts, NULL);
    return address_taken(addr) == 1;
}

/* Whether one of our pools listens on <addr> now (a reload moving an
 * address from one pool to another binds the new sockets first). */
static bool
address_ours(const struct conf_addr *addr)
{
    return hooks.address_ours != NULL && hooks.address_ours(addr);
}

/*
 * A unix socket path: SO_REUSEPORT does not spread accepts over unix
 * sockets, so one socket is bound and every worker accepts from a copy of
 * it. A socket file left behind by a dead process (nothing answers a
 * connect) is replaced; a live one, or a file that is not a socket, is
 * refused. <perm> (>= 0) is chmod'ed on the path (twemproxy's
 * "listen: /path 0666").
 */
static int
listener_open_unix(const struct conf_addr *addr, uint32_t backlog, int perm,
                   int *fds, unsigned n, char *err, size_t errlen)
{
    const char *path = ((const struct sockaddr_un *)&addr->sa)->sun_path;
    struct stat st;
    unsigned i = 0;
    int fd;

    if (lstat(path, &st) == 0) {
        int probe;

        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen,
                     "cannot listen on %s: the path exists and is not a "
                     "socket",
                     addr->text);
            return -1;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (const struct sockaddr *)&addr->sa,
                                  addr->salen) == 0) {
            close(probe);
            snprintf(err, errlen,
                     "cannot listen on %s: another process already listens "
                     "there",
                     addr->text);
            return -1;
        }
        if (probe >= 0)
            close(probe);
        unlink(path); /* a dead process's socket */
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    if (bind(fd, (const struct sockaddr *)&addr->sa, addr->salen) < 0 ||
        (perm >= 0 && chmod(path, (mode_t)perm) < 0) ||
        listen(fd, backlog > 0 ? (int)backlog : 512) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        goto fail;
    }
    fds[0] = fd;
    for (i = 1; i < n; i++) {
        fds[i] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (fds[i] < 0)
            goto fail_dup;
    }
    return 0;
fail_dup:
    while (i-- > 0)
        close(fds[i]);
    unlink(path);
fail:
    snprintf(err, errlen, "cannot listen on %s: %s", addr->text,
             strerror(errno));
    return -1;
}

int
listener_open(const struct conf_addr *addr, uint32_t backlog, int perm,
              int *fds, unsigned n, char *err, size_t errlen)
{
    unsigned i;
    int one = 1;

    if (addr->family == AF_UNIX)
        return listener_open_unix(addr, backlog, perm, fds, n, err, errlen);

    /* SO_REUSEPORT would let us join another process's listener and take
     * half its clients without a word, breaking stickiness for all. */
    if (addr->family != AF_UNIX && !address_ours(addr) &&
        address_foreign(addr)) {
        snprintf(err, errlen,
                 "cannot listen on %s: another process already listens "
                 "there (a second chashd would share its clients and "
                 "break stickiness)",
                 addr->text);
        return -1;
    }
    for (i = 0; i < n; i++) {
        int fd =
            socket(addr->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            goto fail;
        fds[i] = fd;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
            bind(fd, (const struct sockaddr *)&addr->sa, addr->salen) < 0 ||
            listen(fd, backlog > 0 ? (int)backlog : 512) < 0) {
            i++;
            goto fail;
        }
    }
    return 0;
fail:
    snprintf(err, errlen, "cannot listen on %s: %s", addr->text,
             strerror(errno));
    while (i-- > 0)
        close(fds[i]);
    return -1;
}

#define ACCEPT_PAUSE_MS 100

void
worker_pause_accepting(struct worker *w)
{
    for (struct listener *l = w->listeners; l != NULL; l = l->next) {
        if (l->paused)
            continue;
        epoll_ctl(w->ep, EPOLL_CTL_DEL, l->fd, NULL);
        l->paused = true;
    }
    w->accept_resume_ms = w->now_ms + ACCEPT_PAUSE_MS;
}

static void
listeners_resume(struct worker *w)
{
    if (w->accept_resume_ms == 0 || w->now_ms < w->accept_resume_ms)
        return;
    w->accept_resume_ms = 0;
    for (struct listener *l = w->listeners; l != NULL; l = l->next) {
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = l};
        if (!l->paused)
            continue;
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, l->fd, &e) == 0)
            l->paused = false;
        else
            w->accept_resume_ms = w->now_ms + ACCEPT_PAUSE_MS;
    }
}

/* Close <l>; it is freed after this loop iteration, since an event of
 * the current batch may still point at it. */
static void
listener_close(struct worker *w, struct listener *l)
{
    if (!l->paused)
        epoll_ctl(w->ep, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    l->fd = -1;
    hooks.pool_unref(l->pool);
    l->pool = NULL;
    worker_defer_free(w, l);
}

/* ---- accepting ----------------------------------------------------------- */

/*
 * Readiness on a listening socket: accept a bounded batch (other events
 * of this iteration wait for it) and hand each client to the engine of
 * the pool's mode, read from the current snapshot (a reload may change
 * the mode while the listener is kept).
 */
static void
listener_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct listener *l = (struct listener *)ev;

    (void)events;
    for (int i = 0; i < 64 && l->fd >= 0 && !l->paused; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &peerlen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* Clients wait in the backlog until descriptors free up. */
                log_warn("pool %s: accept: %s; pausing new connections for "
                         "%dms",
                         hooks.pool_name(l->pool), strerror(errno), ACCEPT_PAUSE_MS);
                worker_pause_accepting(w);
            }
            return;
        }
        hooks.accept(w, l, fd, (const struct sockaddr *)&peer, peerlen);
    }
}

static int
worker_push(struct worker *w, int type, struct pool *p, int fd)
{
    struct worker_cmd *cmd = calloc(1, sizeof(*cmd)), **pp;
    uint64_t one = 1;

    if (cmd == NULL)
        return -1;
    cmd->type = type;
    cmd->pool = p;
    cmd->fd = fd;
    if (p != NULL)
        hooks.pool_ref(p);
    /* FIFO: a DEL after an ADD of the same fd must run in that order. */
    pthread_mutex_lock(&w->lock);
    for (pp = &w->cmds; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = cmd;
    if (type == CMD_DEL_LISTENER)
        atomic_fetch_add(&listeners_closing, 1);
    pthread_mutex_unlock(&w->lock);
    if (write(w->cmdfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        return -1;
    return 0;
}

int
worker_add_listener(unsigned w, struct pool *p, int fd)
{
    return worker_push(&workers[w], CMD_ADD_LISTENER, p, fd);
}

int
worker_del_listener(unsigned w, int fd)
{
    return worker_push(&workers[w], CMD_DEL_LISTENER, NULL, fd);
}

int
worker_call(unsigned w, void (*fn)(struct worker *w, void *arg), void *arg)
{
    struct worker_cmd *cmd = calloc(1, sizeof(*cmd)), **pp;
    uint64_t one = 1;

    if (cmd == NULL || w >= nworkers) {
        free(cmd);
        return -1;
    }
    cmd->type = CMD_CALL;
    cmd->fn = fn;
    cmd->arg = arg;
    pthread_mutex_lock(&workers[w].lock);
    for (pp = &workers[w].cmds; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = cmd;
    pthread_mutex_unlock(&workers[w].lock);
    if (write(workers[w].cmdfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_error("worker %u: command eventfd: %s", w, strerror(errno));
    return 0;
}

/* The worker whose loop runs on this thread, NULL on any other. */
static _Thread_local struct worker *self;

/* Push the messages <head> (newest) .. <tail> (oldest), already linked
 * newest first, onto <to>'s mailbox in one step. */
static void
mail_push(struct worker *to, struct worker_msg *head, struct worker_msg *tail)
{
    struct worker_msg *old;
    uint64_t one = 1;

    old = atomic_load_explicit(&to->mail, memory_order_relaxed);
    do
        tail->next = old;
    while (!atomic_compare_exchange_weak_explicit(
        &to->mail, &old, head, memory_order_release, memory_order_relaxed));
    /* Only the push that found the box empty wakes the worker: the
     * worker reads its eventfd before it takes the box (worker_mail), so
     * messages that found it full are taken with the ones that woke it. */
    if (old == NULL && write(to->cmdfd, &one, sizeof(one)) < 0 &&
        errno != EAGAIN)
        log_error("worker %u: mail eventfd: %s", to->id, strerror(errno));
}

int
worker_post(unsigned w, struct worker_msg *m)
{
    if (w >= nworkers)
        return -1;
    if (self == NULL) {
        m->next = NULL;
        mail_push(&workers[w], m, m);
        return 0;
    }
    /* A worker's posts wait for the end of its round: each target gets
     * them in one push, with at most one eventfd write and one wake-up
     * (a pipelined client's requests hand many over at once). */
    m->next = self->out_head[w];
    self->out_head[w] = m;
    if (self->out_tail[w] == NULL)
        self->out_tail[w] = m;
    return 0;
}

/* The end of <w>'s round: what it posted goes. */
static void
mail_flush(struct worker *w)
{
    for (unsigned i = 0; i < nworkers; i++) {
        struct worker_msg *head = w->out_head[i];

        if (head == NULL)
            continue;
        w->out_head[i] = NULL;
        mail_push(&workers[i], head, w->out_tail[i]);
        w->out_tail[i] = NULL;
    }
}

/* Take the messages posted so far, oldest first. */
static struct worker_msg *
mail_take(struct worker *w)
{
    struct worker_msg *m =
        atomic_exchange_explicit(&w->mail, NULL, memory_order_acquire);
    struct worker_msg *fifo = NULL;

    while (m != NULL) {
        struct worker_msg *next = m->next;

        m->next = fifo;
        fifo = m;
        m = next;
    }
    return fifo;
}

/* Run what was posted to <w> (after its eventfd was read). */
static void
worker_mail(struct worker *w)
{
    struct worker_msg *m = mail_take(w);

    while (m != NULL) {
        struct worker_msg *next = m->next;

        m->next = NULL;
        m->run(w, m);
        m = next;
    }
}

void
worker_stop_accepting(void)
{
    for (unsigned i = 0; i < nworkers; i++)
        worker_push(&workers[i], CMD_STOP_ACCEPTING, NULL, -1);
}

static void
worker_commands(struct worker *w, struct ev *ev, uint32_t events)
{
    struct worker_cmd *cmd, *next;
    uint64_t v;

    (void)ev;
    (void)events;
    if (read(w->cmdfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_error("worker %u: command eventfd: %s", w->id, strerror(errno));
    pthread_mutex_lock(&w->lock);
    cmd = w->cmds;
    w->cmds = NULL;
    pthread_mutex_unlock(&w->lock);
    for (; cmd != NULL; cmd = next) {
        next = cmd->next;
        switch (cmd->type) {
        case CMD_ADD_LISTENER: {
            struct listener *l = calloc(1, sizeof(*l));
            struct epoll_event e = {.events = EPOLLIN};
            if (l == NULL) {
                close(cmd->fd);
                break;
            }
            l->ev.handler = listener_event;
            l->fd = cmd->fd;
            l->pool = cmd->pool;
            cmd->pool = NULL; /* the listener keeps the reference */
            e.data.ptr = l;
            if (epoll_ctl(w->ep, EPOLL_CTL_ADD, l->fd, &e) < 0) {
                log_error("worker %u: epoll_ctl: %s", w->id, strerror(errno));
                listener_close(w, l);
                break;
            }
            l->next = w->listeners;
            w->listeners = l;
            hooks.listening(w, l);
            break;
        }
        case CMD_DEL_LISTENER:
            for (struct listener **pp = &w->listeners; *pp != NULL;
                 pp = &(*pp)->next) {
                if ((*pp)->fd == cmd->fd) {
                    struct listener *l = *pp;
                    *pp = l->next;
                    listener_close(w, l);
                    break;
                }
            }
            atomic_fetch_sub(&listeners_closing, 1);
            break;
        case CMD_STOP_ACCEPTING:
            while (w->listeners != NULL) {
                struct listener *l = w->listeners;
                w->listeners = l->next;
                listener_close(w, l);
            }
            break;
        case CMD_CALL:
            cmd->fn(w, cmd->arg);
            break;
        case CMD_EXIT:
            w->exiting = true;
            break;
        }
        if (cmd->pool != NULL)
            hooks.pool_unref(cmd->pool);
        free(cmd);
    }
    worker_mail(w);
}

/* ---- deferred frees, connections, soon ----------------------------------- */

void
worker_defer_free(struct worker *w, void *p)
{
    if (p == NULL)
        return;
    if (w->ndead == w->capdead) {
        size_t cap = w->capdead ? w->capdead * 2 : 64;
        void **v = realloc(w->dead, cap * sizeof(*v));
        if (v == NULL) {
            free(p);
            return;
        }
        w->dead = v;
        w->capdead = cap;
    }
    w->dead[w->ndead++] = p;
}

static void
reap(struct worker *w)
{
    for (size_t i = 0; i < w->ndead; i++)
        free(w->dead[i]);
    w->ndead = 0;
}

void
worker_conn_add(struct worker *w, struct worker_conn *c)
{
    INVARIANT(c->next == NULL && c->prev == NULL && c->close != NULL);
    c->next = w->conns.next;
    c->prev = &w->conns;
    w->conns.next->prev = c;
    w->conns.next = c;
}

void
worker_conn_del(struct worker_conn *c)
{
    INVARIANT(c->next != NULL && c->prev != NULL);
    INVARIANT(c->next->prev == c && c->prev->next == c);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

void
worker_soon(struct worker *w, struct worker_task *t)
{
    if (t->queued)
        return;
    t->queued = true;
    t->next = w->soon;
    w->soon = t;
}

void
worker_soon_cancel(struct worker *w, struct worker_task *t)
{
    if (!t->queued)
        return;
    for (struct worker_task **pp = &w->soon; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    t->queued = false;
}

/* Run what was queued: a task may queue itself again (for the next
 * round, not this one). */
static void
run_soon(struct worker *w)
{
    struct worker_task *list = w->soon;

    w->soon = NULL;
    while (list != NULL) {
        struct worker_task *t = list;
        list = t->next;
        t->queued = false;
        t->run(w, t);
    }
}

/* ---- the loop ------------------------------------------------------------ */

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event evs[256];

    self = w;
    w->now_ms = clock_coarse_ms();
    w->wheel_pos = w->now_ms / WHEEL_MS;
    while (!w->exiting) {
        int timeout = w->soon != NULL                             ? 0
                      : w->ntimers > 0 || w->accept_resume_ms > 0 ? WHEEL_MS
                                                                  : -1;
        int n;

        /* Hold no snapshot while blocked: the control thread may free
         * retired ones meanwhile. */
        hooks.quiesce(w->id);
        n = epoll_wait(w->ep, evs, 256, timeout);
        hooks.enter(w->id);
        w->now_ms = clock_coarse_ms();
        if (n < 0 && errno != EINTR) {
            log_error("worker %u: epoll_wait: %s", w->id, strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            struct ev *ev = evs[i].data.ptr;
            ev->handler(w, ev, evs[i].events);
        }
        run_soon(w);
        wheel_advance(w);
        listeners_resume(w);
        mail_flush(w); /* (what the round posted; the timers' too) */
        reap(w);
    }
    while (w->conns.next != &w->conns)
        w->conns.next->close(w, w->conns.next);
    while (w->listeners != NULL) {
        struct listener *l = w->listeners;
        w->listeners = l->next;
        listener_close(w, l);
    }
    mail_flush(w); /* (answers of what closing failed) */
    reap(w);
    INVARIANT(w->ntimers == 0);
    hooks.quiesce(w->id);
    return NULL;
}

int
worker_start_all(unsigned n)
{
    workers = calloc(n, sizeof(*workers));
    if (workers == NULL)
        return -1;
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = &workers[i];
        struct epoll_event e = {.events = EPOLLIN};

        w->id = i;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->cmdfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        w->scratch = malloc(WORKER_SCRATCH);
        w->out_head = calloc(n, sizeof(*w->out_head));
        w->out_tail = calloc(n, sizeof(*w->out_tail));
        w->cmd_ev.handler = worker_commands;
        w->conns.next = w->conns.prev = &w->conns;
        pthread_mutex_init(&w->lock, NULL);
        for (size_t s = 0; s < WHEEL_SLOTS; s++)
            w->wheel[s].prev = w->wheel[s].next = &w->wheel[s];
        e.data.ptr = &w->cmd_ev;
        if (w->ep < 0 || w->cmdfd < 0 || w->scratch == NULL ||
            w->out_head == NULL || w->out_tail == NULL ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, w->cmdfd, &e) < 0 ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            /* Workers 0..i-1 run; worker_stop_all() stops them. */
            int saved = errno;
            if (w->ep >= 0)
                close(w->ep);
            if (w->cmdfd >= 0)
                close(w->cmdfd);
            free(w->scratch);
            free(w->out_head);
            free(w->out_tail);
            pthread_mutex_destroy(&w->lock);
            errno = saved;
            return -1;
        }
        nworkers = i + 1;
    }
    return 0;
}

void
worker_stop_all(void)
{
    for (unsigned i = 0; i < nworkers; i++)
        worker_push(&workers[i], CMD_EXIT, NULL, -1);
    for (unsigned i = 0; i < nworkers; i++)
        pthread_join(workers[i].thread, NULL);
    /* Every worker has exited: messages nobody ran are dropped (a worker
     * may post to one that exited before it). */
    for (unsigned i = 0; i < nworkers; i++) {
        struct worker_msg *m = mail_take(&workers[i]);

        while (m != NULL) {
            struct worker_msg *next = m->next;

            m->next = NULL;
            m->drop(m);
            m = next;
        }
    }
    for (unsigned i = 0; i < nworkers; i++) {
        struct worker *w = &workers[i];
        struct worker_cmd *cmd, *next;

        for (cmd = w->cmds; cmd != NULL; cmd = next) {
            next = cmd->next;
            if (cmd->type == CMD_ADD_LISTENER)
                close(cmd->fd);
            if (cmd->pool != NULL)
                hooks.pool_unref(cmd->pool);
            free(cmd);
        }
        close(w->ep);
        close(w->cmdfd);
        free(w->scratch);
        free(w->out_head);
        free(w->out_tail);
        free(w->dead);
        pthread_mutex_destroy(&w->lock);
    }
    free(workers);
    workers = NULL;
    nworkers = 0;
}

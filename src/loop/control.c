/* control.c -- the control thread's event loop (epoll): watched fds with
 * callbacks, ticks, and frees deferred past the current batch of events
 * so a callback may drop another watch whose event is still pending.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "loop/control.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"

struct tick {
    void (*fn)(uint64_t now_ms, void *arg);
    void *arg;
};

static int ep = -1;
static struct tick *ticks;
static size_t nticks;
static void **deferred;
static size_t ndeferred, capdeferred;
static bool stopping;
static int stop_code;
/* Watches deleted during the batch being handled: their pending events
 * are skipped. */
static struct control_watch **dropped;
static size_t ndropped, capdropped;

int
control_init(void)
{
    ep = epoll_create1(EPOLL_CLOEXEC);
    return ep < 0 ? -1 : 0;
}

void
control_deinit(void)
{
    for (size_t i = 0; i < ndeferred; i++)
        free(deferred[i]);
    free(deferred);
    deferred = NULL;
    ndeferred = capdeferred = 0;
    free(dropped);
    dropped = NULL;
    ndropped = capdropped = 0;
    free(ticks);
    ticks = NULL;
    nticks = 0;
    if (ep >= 0)
        close(ep);
    ep = -1;
}

static int
push(void ***v, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        void **nv = realloc(*v, c * sizeof(*nv));
        if (nv == NULL)
            return -1;
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = p;
    return 0;
}

int
control_watch_add(struct control_watch *w, uint32_t events)
{
    struct epoll_event e = {.events = events, .data.ptr = w};

    /* A watch re-added in the same batch is live again. */
    for (size_t i = 0; i < ndropped; i++)
        if (dropped[i] == w)
            dropped[i] = NULL;
    return epoll_ctl(ep, EPOLL_CTL_ADD, w->fd, &e);
}

void
control_watch_del(struct control_watch *w)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, w->fd, NULL);
    if (push((void ***)&dropped, &ndropped, &capdropped, w) < 0)
        log_error("control: out of memory");
}

void
control_defer_free(void *p)
{
    if (p == NULL)
        return;
    if (push(&deferred, &ndeferred, &capdeferred, p) < 0)
        free(p); /* out of memory: free now, rarely unsafe */
}

int
control_tick_add(void (*fn)(uint64_t now_ms, void *arg), void *arg)
{
    struct tick *v = realloc(ticks, (nticks + 1) * sizeof(*v));

    if (v == NULL)
        return -1;
    ticks = v;
    ticks[nticks].fn = fn;
    ticks[nticks].arg = arg;
    nticks++;
    return 0;
}

void
control_stop(int code)
{
    stopping = true;
    stop_code = code;
}

static bool
was_dropped(const struct control_watch *w)
{
    for (size_t i = 0; i < ndropped; i++)
        if (dropped[i] == w)
            return true;
    return false;
}

int
control_run(void)
{
    uint64_t next_tick = clock_ms();

    while (!stopping) {
        struct epoll_event evs[64];
        uint64_t now = clock_ms();
        int timeout = next_tick > now ? (int)(next_tick - now) : 0;
        int n = epoll_wait(ep, evs, 64, timeout);

        if (n < 0 && errno != EINTR) {
            log_error("control: epoll_wait: %s", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n && !stopping; i++) {
            struct control_watch *w = evs[i].data.ptr;
            if (!was_dropped(w))
                w->cb(w, evs[i].events);
        }
        now = clock_ms();
        if (now >= next_tick && !stopping) {
            for (size_t i = 0; i < nticks; i++)
                ticks[i].fn(now, ticks[i].arg);
            next_tick = now + CONTROL_TICK_MS;
        }
        ndropped = 0;
        for (size_t i = 0; i < ndeferred; i++)
            free(deferred[i]);
        ndeferred = 0;
    }
    return stop_code;
}

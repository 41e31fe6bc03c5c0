/* control.h -- the control thread's event loop: file descriptors with
 * callbacks, a 10 ms tick, deferred frees. Config reload, health checks,
 * ramps and the admin API all run here, one at a time.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_CONTROL_H
#define CHASHD_CONTROL_H

#include <stdint.h>

/* Tick period: timers of the control thread have this resolution. */
#define CONTROL_TICK_MS 10

/* A watched descriptor. Embed it; <cb> runs on the control thread. */
struct control_watch {
    int fd;
    void (*cb)(struct control_watch *watch, uint32_t events);
};

int control_init(void);
void control_deinit(void);

/* Watch <w>->fd for <events> (EPOLLIN, EPOLLOUT); 0 or -1. */
int control_watch_add(struct control_watch *w, uint32_t events);
/* Stop watching; events of the current batch for <w> are dropped. The
 * caller closes the fd; free <w> with control_defer_free if it is heap. */
void control_watch_del(struct control_watch *w);

/* Call <fn>(<now_ms>, <arg>) on every tick, in registration order. */
int control_tick_add(void (*fn)(uint64_t now_ms, void *arg), void *arg);

/* free(<p>) once the current batch of events is handled. */
void control_defer_free(void *p);

/* Run until control_stop(); returns the code given to it. */
int control_run(void);
void control_stop(int code);

#endif /* CHASHD_CONTROL_H */

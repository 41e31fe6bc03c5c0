/* notify.h -- readiness notification to the service manager: systemd's
 * sd_notify(3) datagram protocol on $NOTIFY_SOCKET, without libsystemd.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_NOTIFY_H
#define CHASHD_NOTIFY_H

#include <stdbool.h>

/*
 * Read $NOTIFY_SOCKET once: an absolute path, or '@' and a name in the
 * abstract namespace. Unset or empty: every later call is a no-op that
 * succeeds. 0, or -1 with errno EINVAL (not a unix socket address we can
 * use: a relative path, too long, vsock) and every later call a no-op.
 * The variable is left in the environment. Control thread only, like
 * every function here.
 */
int notify_init(void);
void notify_deinit(void);

/* True when notify_init found a socket to talk to. */
bool notify_enabled(void);

/*
 * Send one datagram: <state> ("READY=1", "STOPPING=1", or several such
 * lines) and a STATUS= line formatted from <fmt> (a newline in it becomes
 * a space: one assignment per line; cut at about 1 KiB). The send never
 * blocks. 0, or -1 with errno (the manager is gone, its queue
 * is full); the daemon carries on either way.
 */
int notify_send(const char *state, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "RELOADING=1" with the MONOTONIC_USEC= that Type=notify-reload wants
 * beside it, and a STATUS= line from <fmt> as notify_send does. */
int notify_reloading(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

#endif /* CHASHD_NOTIFY_H */

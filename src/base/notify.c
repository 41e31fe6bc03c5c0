/* notify.c -- sd_notify(3) without libsystemd: each state change is one
 * datagram of "KEY=value" lines sent to the unix socket named by
 * $NOTIFY_SOCKET ('@' at the start names the abstract namespace).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "base/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A message is a few short lines; a longer STATUS is cut. */
#define NOTIFY_MAX 1024

static struct sockaddr_un notify_addr;
static socklen_t notify_addrlen; /* 0: notifications are off */

int
notify_init(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    size_t len;

    notify_addrlen = 0;
    if (path == NULL || path[0] == '\0')
        return 0;
    len = strlen(path);
    /* The abstract name has no terminating NUL and may fill sun_path; a
     * path needs room for its NUL. vsock: (systemd 254) is not a unix
     * address and is refused like any relative path. */
    if ((path[0] != '/' && path[0] != '@') ||
        len > sizeof(notify_addr.sun_path) - (path[0] == '/')) {
        errno = EINVAL;
        return -1;
    }
    memset(&notify_addr, 0, sizeof(notify_addr));
    notify_addr.sun_family = AF_UNIX;
    memcpy(notify_addr.sun_path, path, len);
    if (path[0] == '@') {
        notify_addr.sun_path[0] = '\0';
        notify_addrlen =
            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    } else {
        notify_addrlen =
            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    }
    return 0;
}

void
notify_deinit(void)
{
    notify_addrlen = 0;
}

bool
notify_enabled(void)
{
    return notify_addrlen > 0;
}

/* Send <msg> (<len> bytes) on a socket of its own, as sd_notify does: no
 * descriptor is kept across a manager that re-executes itself. */
static int
send_msg(const char *msg, size_t len)
{
    ssize_t n;
    int fd, saved;

    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    n = sendto(fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL,
               (const struct sockaddr *)&notify_addr, notify_addrlen);
    saved = errno;
    close(fd);
    if (n < 0) {
        errno = saved;
        return -1;
    }
    if ((size_t)n != len) {
        errno = EMSGSIZE;
        return -1;
    }
    return 0;
}

/* Append "STATUS=<fmt ...>" to <msg> (holding <len> bytes), newlines in
 * the status turned into spaces. The new length. */
static size_t __attribute__((format(printf, 3, 0)))
put_status(char *msg, size_t len, const char *fmt, va_list ap)
{
    size_t start;
    int n;

    n = snprintf(msg + len, NOTIFY_MAX - len, "STATUS=");
    if (n < 0 || (size_t)n >= NOTIFY_MAX - len)
        return len;
    start = len += (size_t)n;
    n = vsnprintf(msg + len, NOTIFY_MAX - len, fmt, ap);
    if (n < 0)
        return start;
    len += (size_t)n < NOTIFY_MAX - len ? (size_t)n : NOTIFY_MAX - len - 1;
    for (size_t i = start; i < len; i++)
        if (msg[i] == '\n' || msg[i] == '\r')
            msg[i] = ' ';
    return len;
}

static int __attribute__((format(printf, 2, 0)))
vsend(const char *state, const char *fmt, va_list ap)
{
    char msg[NOTIFY_MAX];
    int n;
    size_t len;

    if (!notify_enabled())
        return 0;
    n = snprintf(msg, sizeof(msg), "%s\n", state);
    if (n < 0 || (size_t)n >= sizeof(msg)) {
        errno = EMSGSIZE;
        return -1;
    }
    len = put_status(msg, (size_t)n, fmt, ap);
    return send_msg(msg, len);
}

int
notify_send(const char *state, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vsend(state, fmt, ap);
    va_end(ap);
    return rc;
}

int
notify_reloading(const char *fmt, ...)
{
    char state[64];
    struct timespec ts;
    va_list ap;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(state, sizeof(state), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull +
                 (unsigned long long)ts.tv_nsec / 1000ull);
    va_start(ap, fmt);
    rc = vsend(state, fmt, ap);
    va_end(ap);
    return rc;
}

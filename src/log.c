/* log.c -- chashd's log. Each line is formatted into a local buffer and
 * written with a single write(2) on an O_APPEND descriptor, which keeps
 * concurrent lines whole without a lock.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_fd = STDERR_FILENO;
static _Atomic int log_level = LOG_INFO;
static char *log_path;
static int log_prev_fd = -1; /* the file before the last reopen */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int
log_open(const char *path)
{
    int fd;

    if (path == NULL) {
        atomic_store(&log_fd, STDERR_FILENO);
        return 0;
    }
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    free(log_path);
    log_path = strdup(path);
    atomic_store(&log_fd, fd);
    return 0;
}

int
log_reopen(void)
{
    int fd, old;

    if (log_path == NULL)
        return 0;
    fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    /* A thread may have loaded the old descriptor and not written yet:
     * keep it open until the next rotation, so its line lands in the old
     * file rather than in whatever file reuses the number. */
    old = atomic_exchange(&log_fd, fd);
    if (log_prev_fd >= 0)
        close(log_prev_fd);
    log_prev_fd = old != STDERR_FILENO ? old : -1;
    return 0;
}

void
log_close(void)
{
    int fd = atomic_exchange(&log_fd, STDERR_FILENO);

    if (fd != STDERR_FILENO)
        close(fd);
    if (log_prev_fd >= 0)
        close(log_prev_fd);
    log_prev_fd = -1;
    free(log_path);
    log_path = NULL;
}

void
log_set_level(int level)
{
    if (level < LOG_ERROR)
        level = LOG_ERROR;
    if (level > LOG_DEBUG)
        level = LOG_DEBUG;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int
log_get_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

bool
log_enabled(int level)
{
    return level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

const char *
log_level_name(int level)
{
    if (level < LOG_ERROR || level > LOG_DEBUG)
        return NULL;
    return level_names[level];
}

int
log_level_from_name(const char *name)
{
    for (int i = LOG_ERROR; i <= LOG_DEBUG; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    if (strcasecmp(name, "warning") == 0)
        return LOG_WARN;
    return -1;
}

void
log_write(int level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    size_t len;
    int n, saved = errno;

    if (!log_enabled(level))
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    len = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n = snprintf(line + len, sizeof(line) - len, ".%03ldZ [%s] ",
                 ts.tv_nsec / 1000000, log_level_name(level));
    len += n > 0 ? (size_t)n : 0;
    va_start(ap, fmt);
    n = vsnprintf(line + len, sizeof(line) - len - 1, fmt, ap);
    va_end(ap);
    if (n > 0)
        len += (size_t)n < sizeof(line) - len - 1 ? (size_t)n
                                                  : sizeof(line) - len - 2;
    line[len++] = '\n';
    /* A failed log write has nowhere to be reported. */
    if (write(atomic_load(&log_fd), line, len) < 0)
        errno = saved;
    errno = saved;
}

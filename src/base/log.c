/* log.c -- chashd's log. Each line is formatted into a local buffer and
 * written with a single write(2) on an O_APPEND descriptor (or handed to
 * syslog(3) whole), which keeps concurrent lines whole without a lock.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "base/log.h"

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

#include "base/clock.h"
#include "base/text.h"

/* <syslog.h> #defines LOG_INFO and LOG_DEBUG, our level names too: keep
 * its priorities under other names and drop its macros, so that below
 * LOG_INFO and LOG_DEBUG mean enum log_level again. */
#include <syslog.h>
static const int syslog_priority[] = {LOG_ERR, LOG_WARNING, LOG_INFO,
                                      LOG_DEBUG};
#undef LOG_INFO
#undef LOG_DEBUG

/* The message as formatted, and the line around it once escaped (a byte
 * of the message takes at most 6 in JSON: \u00XX). */
#define LOG_MSG_MAX 2048
#define LOG_LINE_MAX (LOG_MSG_MAX * 6 + 128)

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "struct log_limit needs lock-free 64-bit atomics");

static _Atomic int log_fd = STDERR_FILENO;
static _Atomic int log_level = LOG_INFO;
static int log_format = LOG_FORMAT_TEXT; /* set before threads start */
static bool log_syslog;                  /* set before threads start */
static char *log_path;
static int log_prev_fd = -1; /* the file before the last reopen */

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const format_names[] = {"text", "json"};

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

void
log_open_syslog(const char *ident)
{
    /* LOG_NDELAY connects to /dev/log now, before anything can make it
     * harder (a full descriptor table, a sandbox). */
    openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
    log_syslog = true;
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
    if (log_syslog)
        closelog();
    log_syslog = false;
}

void
log_set_format(int format)
{
    log_format = format == LOG_FORMAT_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
}

int
log_format_from_name(const char *name)
{
    for (int i = LOG_FORMAT_TEXT; i <= LOG_FORMAT_JSON; i++)
        if (strcmp(name, format_names[i]) == 0)
            return i;
    return -1;
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

/* ---- escaping ------------------------------------------------------------ */

/* Append <msg> for a text line: control characters as \n, \r, \t or
 * \xNN, so a message can never end its line early or forge the next
 * one; every other byte as it is. */
static void
put_text(struct text_line *l, const char *msg, size_t n)
{
    const unsigned char *s = (const unsigned char *)msg;
    char esc[8];

    for (size_t i = 0; i < n && !l->full; i++) {
        if (s[i] >= 0x20 && s[i] != 0x7f) {
            text_put(l, msg + i, 1);
        } else if (s[i] == '\n') {
            text_puts(l, "\\n");
        } else if (s[i] == '\r') {
            text_puts(l, "\\r");
        } else if (s[i] == '\t') {
            text_puts(l, "\\t");
        } else {
            snprintf(esc, sizeof(esc), "\\x%02x", s[i]);
            text_puts(l, esc);
        }
    }
}

/* ---- writing ------------------------------------------------------------- */

static void __attribute__((format(printf, 2, 0)))
log_vwrite(int level, const char *fmt, va_list ap)
{
    char msg[LOG_MSG_MAX], stamp[64], line[LOG_LINE_MAX];
    /* The last 3 bytes are kept for the JSON tail and the newline. */
    struct text_line l = {.buf = line, .cap = sizeof(line) - 3};
    struct timespec ts;
    struct tm tm;
    size_t mlen;
    int n;

    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    mlen = n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = (int)strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof(stamp) - (size_t)n, ".%03ldZ",
             ts.tv_nsec / 1000000);

    if (log_format == LOG_FORMAT_JSON) {
        text_puts(&l, "{\"time\":\"");
        text_puts(&l, stamp);
        text_puts(&l, "\",\"level\":\"");
        text_puts(&l, level_names[level]);
        text_puts(&l, "\",\"msg\":\"");
        text_put_json(&l, msg, mlen);
        /* A cut message still closes its object. */
        l.full = false;
        l.cap = sizeof(line);
        text_puts(&l, "\"}");
    } else {
        if (!log_syslog) {
            text_puts(&l, stamp);
            text_puts(&l, " [");
            text_puts(&l, level_names[level]);
            text_puts(&l, "] ");
        }
        put_text(&l, msg, mlen);
        l.cap = sizeof(line);
    }
    if (log_syslog) {
        syslog(syslog_priority[level], "%.*s", (int)l.len, line);
        return;
    }
    l.full = false;
    text_put(&l, "\n", 1);
    /* A failed log write has nowhere to be reported. */
    if (write(atomic_load(&log_fd), line, l.len) < 0)
        return;
}

void
log_write(int level, const char *fmt, ...)
{
    va_list ap;
    int saved = errno;

    if (level < LOG_ERROR || level > LOG_DEBUG || !log_enabled(level))
        return;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
    errno = saved;
}

/* ---- rate limiting ------------------------------------------------------- */

static void __attribute__((format(printf, 4, 0)))
log_vlimited(struct log_limit *rl, uint64_t now_ms, int level, const char *fmt,
             va_list ap)
{
    uint64_t second = (now_ms / 1000) & 0xffffffffu;
    uint64_t w = atomic_load_explicit(&rl->window, memory_order_relaxed);
    uint64_t next, dropped = 0;

    /* One CAS moves <window> either to the next line of this second or
     * to the first line of a new one; the thread whose CAS opens a new
     * second is the one that reports what the previous ones dropped. */
    for (;;) {
        bool opens = (w >> 32) != second;

        if (!opens && (w & 0xffffffffu) >= rl->burst) {
            atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
            return;
        }
        if (opens && rl->burst == 0) {
            atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
            return;
        }
        next = opens ? second << 32 | 1 : w + 1;
        if (atomic_compare_exchange_weak_explicit(&rl->window, &w, next,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed)) {
            if (opens)
                dropped = atomic_exchange_explicit(&rl->suppressed, 0,
                                                   memory_order_relaxed);
            break;
        }
    }
    if (dropped > 0)
        log_write(level, "(%llu similar messages suppressed)",
                  (unsigned long long)dropped);
    log_vwrite(level, fmt, ap);
}

void
log_limited_at(struct log_limit *rl, uint64_t now_ms, int level,
               const char *fmt, ...)
{
    va_list ap;
    int saved = errno;

    if (level < LOG_ERROR || level > LOG_DEBUG || !log_enabled(level))
        return;
    va_start(ap, fmt);
    log_vlimited(rl, now_ms, level, fmt, ap);
    va_end(ap);
    errno = saved;
}

void
log_limited(struct log_limit *rl, int level, const char *fmt, ...)
{
    va_list ap;
    int saved = errno;

    if (level < LOG_ERROR || level > LOG_DEBUG || !log_enabled(level))
        return;
    va_start(ap, fmt);
    log_vlimited(rl, clock_coarse_ms(), level, fmt, ap);
    va_end(ap);
    errno = saved;
}

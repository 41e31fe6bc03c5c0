/* log.h -- chashd's log: levels, timestamps, text or JSON lines to stderr,
 * a file or syslog, one write(2) per line so lines from the control thread
 * and the workers never interleave; a rate limiter for the data path.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_LOG_H
#define CHASHD_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Same order as conf's log_level (0 error .. 3 debug). */
enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

enum log_format {
    LOG_FORMAT_TEXT, /* "2026-11-30T10:42:27.123Z [info] message" */
    LOG_FORMAT_JSON  /* {"time":"...","level":"info","msg":"message"} */
};

/*
 * Send lines to <path> (opened O_APPEND, created 0644), or to stderr when
 * <path> is NULL. 0, or -1 with errno kept. Call before any thread starts.
 */
int log_open(const char *path);

/*
 * Send lines to syslog(3) as <ident>, facility LOG_DAEMON, with the
 * pid; error, warn, info and debug become LOG_ERR, LOG_WARNING, LOG_INFO
 * and LOG_DEBUG. In text format a line is the message alone (syslog adds
 * the time and the priority); in JSON format it is the whole object.
 * Call before any thread starts. Cannot fail (syslog(3) reports nothing).
 */
void log_open_syslog(const char *ident);
void log_close(void);

/* Reopen the file given to log_open (after rotation); no-op on stderr and
 * syslog. 0, or -1 with errno kept (the old file stays in use). */
int log_reopen(void);

/* Text (the default) or JSON lines; set before any thread starts. */
void log_set_format(int format);
/* "text" or "json" to enum log_format, -1 when unknown. */
int log_format_from_name(const char *name);

void log_set_level(int level);
int log_get_level(void);
bool log_enabled(int level);

/* "error", "warn", "info", "debug" and back (-1 if unknown). */
const char *log_level_name(int level);
int log_level_from_name(const char *name);

/*
 * One line: "2026-11-30T10:42:27.123Z [info] <message>\n", or in JSON
 * {"time":"2026-11-30T10:42:27.123Z","level":"info","msg":"<message>"}.
 * Whatever the message holds cannot break a line: in text, control
 * characters are written as \n, \t, \r or \xNN; in JSON every character
 * JSON requires is escaped, and a byte that is not UTF-8 becomes U+FFFD,
 * so each line is one valid JSON object. Messages longer than about 2 KiB
 * are cut. Thread-safe; errno is kept.
 */
void log_write(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_info(...)                                                          \
    do {                                                                       \
        if (log_enabled(LOG_INFO))                                             \
            log_write(LOG_INFO, __VA_ARGS__);                                  \
    } while (0)
#define log_debug(...)                                                         \
    do {                                                                       \
        if (log_enabled(LOG_DEBUG))                                            \
            log_write(LOG_DEBUG, __VA_ARGS__);                                 \
    } while (0)

/*
 * A rate limiter for one call site on the data path, where a flood of
 * the same event (a backend refusing every connect) must not flood the
 * log or cost a write per event. At most <burst> lines per second go
 * out; the rest are counted, and the first line of a later second is
 * preceded by one "(K similar messages suppressed)" line at the same
 * level. A count is reported when the site logs again, as the kernel's
 * printk_ratelimit does: a flood that stops for good leaves its last
 * count unreported.
 *
 * Lock-free: a line let through costs one compare-and-swap on <window>,
 * a line suppressed one atomic add on <suppressed>; any number of
 * threads may share one limiter. Zero-initialise everything but <burst>
 * (LOG_LIMIT_INIT); <burst> 0 suppresses every line.
 */
struct log_limit {
    uint32_t burst;              /* lines per second; set once */
    _Atomic uint64_t window;     /* second << 32 | lines let through in it */
    _Atomic uint64_t suppressed; /* lines dropped since the last report */
};

#define LOG_LIMIT_INIT(lines_per_second)                                       \
    {                                                                          \
        .burst = (lines_per_second)                                            \
    }

void log_limited(struct log_limit *rl, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* log_limited at <now_ms> on the monotonic clock (for tests). */
void log_limited_at(struct log_limit *rl, uint64_t now_ms, int level,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* One limiter per call site: log_info_limited(10, "pool %s: ...", ...). */
#define log_limited_site(level, lines_per_second, ...)                         \
    do {                                                                       \
        static struct log_limit log_site_ = LOG_LIMIT_INIT(lines_per_second);  \
        if (log_enabled(level))                                                \
            log_limited(&log_site_, level, __VA_ARGS__);                       \
    } while (0)
#define log_warn_limited(n, ...) log_limited_site(LOG_WARN, n, __VA_ARGS__)
#define log_info_limited(n, ...) log_limited_site(LOG_INFO, n, __VA_ARGS__)

#endif /* CHASHD_LOG_H */

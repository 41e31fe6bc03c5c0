/* log.h -- chashd's log: levels, timestamps, one write(2) per line so
 * lines from the control thread and the workers never interleave.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_LOG_H
#define CHASHD_LOG_H

#include <stdbool.h>

/* Same order as conf's log_level (0 error .. 3 debug). */
enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/*
 * Send lines to <path> (opened O_APPEND, created 0644), or to stderr when
 * <path> is NULL. 0, or -1 with errno kept. Call before any thread starts.
 */
int log_open(const char *path);
void log_close(void);

/* Reopen the file given to log_open (after rotation); no-op on stderr. */
int log_reopen(void);

void log_set_level(int level);
int log_get_level(void);
bool log_enabled(int level);

/* "error", "warn", "info", "debug" and back (-1 if unknown). */
const char *log_level_name(int level);
int log_level_from_name(const char *name);

/* One line: "2026-11-30T10:42:27.123Z [info] <message>\n". Thread-safe. */
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

#endif /* CHASHD_LOG_H */

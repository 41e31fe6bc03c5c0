/* access_log.c -- the pools' access logs. A line is formatted on the
 * caller's stack and leaves in one write(2) on an O_APPEND descriptor (or
 * one syslog(3) call), so lines of concurrent workers never interleave and
 * no lock is taken. Everything taken from the network is escaped: a line
 * can neither be cut short nor forge the next one, and a JSON line is
 * always one valid object.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "loop/access_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* <syslog.h> #defines LOG_INFO and LOG_DEBUG, which are log.h's level
 * names too: take the priority under another name, then drop its macros
 * (as log.c does). */
#include <syslog.h>
static const int access_syslog_priority = LOG_DAEMON | LOG_INFO;
#undef LOG_INFO
#undef LOG_DEBUG

#include "base/invariant.h"
#include "base/log.h"
#include "base/stats.h"
#include "base/text.h"
#include "conf/conf.h"

struct access_log {
    _Atomic int refs;
    int format;  /* enum conf_log_format */
    bool syslog; /* syslog(3), no descriptor */
    int fd;      /* O_APPEND; its number never changes (reopen: dup3) */
    char *path;  /* "syslog" for syslog */
};

static const char *const routing_names[] = {
    [STATS_FIRST_CHOICE] = "first",      [STATS_SPILLED] = "spilled",
    [STATS_FAILED_OVER] = "failed_over", [STATS_REFUSED_ERROR] = "refused",
    [STATS_NO_MEMBER] = "no_member",
};
_Static_assert(sizeof(routing_names) / sizeof(routing_names[0]) ==
                   STATS_NO_MEMBER + 1,
               "a routing decision without a name");

const char *
access_routing_name(int routing)
{
    if (routing < 0 || routing > STATS_NO_MEMBER)
        return "-";
    return routing_names[routing];
}

/* ---- the sink ------------------------------------------------------------ */

static int
open_file(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

int
access_log_check(const char *where, char *err, size_t errlen)
{
    int fd;

    if (strcmp(where, "syslog") == 0)
        return 0;
    fd = open_file(where);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", where, strerror(errno));
        return -1;
    }
    close(fd);
    return 0;
}

struct access_log *
access_log_open(const char *where, int format, char *err, size_t errlen)
{
    struct access_log *l = calloc(1, sizeof(*l));

    if (l == NULL || (l->path = strdup(where)) == NULL) {
        free(l);
        snprintf(err, errlen, "access log %s: out of memory", where);
        return NULL;
    }
    atomic_init(&l->refs, 1);
    l->format = format == CONF_LOG_FORMAT_JSON ? CONF_LOG_FORMAT_JSON
                                               : CONF_LOG_FORMAT_TEXT;
    l->fd = -1;
    /* syslog(3) needs no openlog(): the daemon log's, when it has made
     * one, sets the ident for the whole process, and a call of ours here
     * would change its ident and options. The facility travels in each
     * priority. */
    l->syslog = strcmp(where, "syslog") == 0;
    if (!l->syslog) {
        l->fd = open_file(where);
        if (l->fd < 0) {
            snprintf(err, errlen, "cannot open %s: %s", where, strerror(errno));
            free(l->path);
            free(l);
            return NULL;
        }
    }
    return l;
}

void
access_log_ref(struct access_log *l)
{
    if (l == NULL)
        return;
    /* Only a holder takes another reference. */
    INVARIANT(atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed) > 0);
}

void
access_log_unref(struct access_log *l)
{
    int was;

    if (l == NULL)
        return;
    was = atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel);
    INVARIANT(was > 0);
    if (was != 1)
        return;
    if (l->fd >= 0)
        close(l->fd);
    free(l->path);
    free(l);
}

int
access_log_reopen(struct access_log *l)
{
    int fd, rc = 0, saved;

    if (l->syslog)
        return 0;
    fd = open_file(l->path);
    if (fd < 0)
        return -1;
    /* dup3 swaps the file behind l->fd atomically: a worker's write(2)
     * in flight holds the old file and completes there; the next one goes
     * to the new file. No descriptor number is ever closed under a
     * worker (a close then reopen could hand its number to a socket). */
    if (dup3(fd, l->fd, O_CLOEXEC) < 0)
        rc = -1;
    saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

const char *
access_log_where(const struct access_log *l)
{
    return l->path;
}

/* ---- formatting ---------------------------------------------------------- */

static void putf(struct text_line *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
putf(struct text_line *l, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    text_put(l, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* "key":"<escaped s>" (a comma before unless <first>); NULL s: null. */
static void
put_json_str(struct text_line *l, const char *key, const char *s, size_t n)
{
    putf(l, ",\"%s\":", key);
    if (s == NULL) {
        text_puts(l, "null");
        return;
    }
    text_puts(l, "\"");
    text_put_json(l, s, n);
    text_puts(l, "\"");
}

/*
 * Text: printable ASCII as it is; '"', '\', every control byte, DEL and
 * every byte >= 0x80 as \xNN (the log stays ASCII: nothing a terminal
 * would interpret, nothing that breaks a line); a space too when <quoted>
 * is false, so an unquoted field is one word.
 */
static void
put_text_chars(struct text_line *l, const char *str, size_t n, bool quoted)
{
    const unsigned char *s = (const unsigned char *)str;
    char esc[8];

    for (size_t i = 0; i < n && !l->full; i++) {
        if (s[i] > 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\') {
            text_put(l, str + i, 1);
        } else if (s[i] == ' ' && quoted) {
            text_put(l, " ", 1);
        } else {
            snprintf(esc, sizeof(esc), "\\x%02x", s[i]);
            text_puts(l, esc);
        }
    }
}

/* An unquoted text field: " <s>", or " -" when it is NULL or empty. */
static void
put_text_word(struct text_line *l, const char *s)
{
    text_puts(l, " ");
    if (s == NULL || s[0] == '\0') {
        text_puts(l, "-");
        return;
    }
    put_text_chars(l, s, strnlen(s, ACCESS_NAME_MAX), false);
}

/* <sa> as "a.b.c.d:port", "[v6]:port" or "unix", into <out>. */
static void
addr_text(const struct sockaddr *sa, socklen_t len, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN];

    snprintf(out, outlen, "-");
    if (sa == NULL || len < sizeof(sa_family_t))
        return;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)) != NULL)
            snprintf(out, outlen, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6 &&
               len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)) != NULL)
            snprintf(out, outlen, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else if (sa->sa_family == AF_UNIX) {
        snprintf(out, outlen, "unix");
    }
}

/* <ms> since the epoch as "2026-12-01T17:05:33.123Z". */
static void
time_text(uint64_t ms, char *out, size_t outlen)
{
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    size_t n;

    if (gmtime_r(&sec, &tm) == NULL) {
        snprintf(out, outlen, "-");
        return;
    }
    n = strftime(out, outlen, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, outlen - n, ".%03uZ", (unsigned)(ms % 1000));
}

static size_t
bounded(const char *s, size_t n, size_t max)
{
    return s == NULL ? 0 : n < max ? n : max;
}

static void
format_text(struct text_line *l, const struct access_entry *e,
            const char *stamp, const char *client)
{
    text_puts(l, stamp);
    put_text_word(l, e->pool);
    put_text_word(l, client);
    text_puts(l, " ->");
    put_text_word(l, e->member);
    put_text_word(l, e->member_addr);
    put_text_word(l, access_routing_name(e->routing));
    putf(l, " retries=%u %llums %lluB/%lluB", e->retries,
         (unsigned long long)e->duration_ms, (unsigned long long)e->bytes_in,
         (unsigned long long)e->bytes_out);
    if (e->method == NULL)
        return;
    /* The request line as nginx quotes it: one field between quotes. */
    text_puts(l, " \"");
    put_text_chars(l, e->method,
                   bounded(e->method, e->method_len, ACCESS_METHOD_MAX), true);
    text_puts(l, " ");
    put_text_chars(l, e->target,
                   bounded(e->target, e->target_len, ACCESS_TARGET_MAX), true);
    if (e->target_len > ACCESS_TARGET_MAX)
        text_puts(l, "...");
    text_puts(l, " ");
    put_text_chars(l, e->version,
                   bounded(e->version, e->version_len, ACCESS_VERSION_MAX),
                   true);
    text_puts(l, "\"");
    if (e->status > 0)
        putf(l, " %d", e->status);
    else
        text_puts(l, " -");
    text_puts(l, " key=");
    if (e->key_source != NULL && e->key_source[0] != '\0')
        put_text_chars(l, e->key_source,
                       strnlen(e->key_source, ACCESS_NAME_MAX), false);
    else
        text_puts(l, "-");
    if (e->error != NULL) {
        text_puts(l, " error=\"");
        put_text_chars(l, e->error, strnlen(e->error, ACCESS_NAME_MAX), true);
        text_puts(l, "\"");
    }
}

/* A NUL-terminated string of the entry as a JSON member, cut at the
 * names' bound. */
static void
put_json_cstr(struct text_line *l, const char *key, const char *s)
{
    put_json_str(l, key, s, s != NULL ? strnlen(s, ACCESS_NAME_MAX) : 0);
}

static void
format_json(struct text_line *l, const struct access_entry *e,
            const char *stamp, const char *client)
{
    /* The first member opens the object; each later one brings its
     * comma (put_json_str). */
    text_puts(l, "{\"time\":\"");
    text_puts(l, stamp);
    text_puts(l, "\"");
    put_json_cstr(l, "pool", e->pool);
    put_json_cstr(l, "client", strcmp(client, "-") != 0 ? client : NULL);
    put_json_cstr(l, "member", e->member);
    put_json_cstr(l, "member_addr", e->member_addr);
    put_json_cstr(l, "routing",
                  e->routing >= 0 && e->routing <= STATS_NO_MEMBER
                      ? access_routing_name(e->routing)
                      : NULL);
    putf(l, ",\"retries\":%u,\"duration_ms\":%llu", e->retries,
         (unsigned long long)e->duration_ms);
    putf(l, ",\"bytes_in\":%llu,\"bytes_out\":%llu",
         (unsigned long long)e->bytes_in, (unsigned long long)e->bytes_out);
    if (e->method != NULL) {
        put_json_str(l, "method", e->method,
                     bounded(e->method, e->method_len, ACCESS_METHOD_MAX));
        put_json_str(l, "target", e->target != NULL ? e->target : "",
                     bounded(e->target, e->target_len, ACCESS_TARGET_MAX));
        if (e->target_len > ACCESS_TARGET_MAX)
            text_puts(l, ",\"target_truncated\":true");
        put_json_str(l, "version", e->version != NULL ? e->version : "",
                     bounded(e->version, e->version_len, ACCESS_VERSION_MAX));
        if (e->status > 0)
            putf(l, ",\"status\":%d", e->status);
        else
            text_puts(l, ",\"status\":null");
        put_json_cstr(l, "key", e->key_source);
        put_json_cstr(l, "error", e->error);
    }
    text_puts(l, "}");
}

size_t
access_log_format(int format, const struct access_entry *e, char *buf,
                  size_t len)
{
    /* Two bytes kept for the newline and the NUL: a cut line still ends
     * its line. */
    struct text_line l = {.buf = buf, .cap = len >= 2 ? len - 2 : 0};
    char stamp[40], client[INET6_ADDRSTRLEN + 16];
    uint64_t ms = e->time_ms;

    if (len == 0)
        return 0;
    if (ms == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    }
    time_text(ms, stamp, sizeof(stamp));
    addr_text(e->client, e->client_len, client, sizeof(client));
    if (format == CONF_LOG_FORMAT_JSON)
        format_json(&l, e, stamp, client);
    else
        format_text(&l, e, stamp, client);
    l.cap = len - 1;
    l.full = false;
    text_put(&l, "\n", 1);
    buf[l.len] = '\0';
    return l.len;
}

/* ---- writing ------------------------------------------------------------- */

void
access_log_write(struct access_log *l, const struct access_entry *e)
{
    char line[ACCESS_LINE_MAX];
    size_t n;
    int saved = errno;

    n = access_log_format(l->format, e, line, sizeof(line));
    if (l->syslog) {
        /* syslog adds its own newline. */
        syslog(access_syslog_priority, "%.*s", (int)(n - 1), line);
    } else {
        errno = 0;
        if (write(l->fd, line, n) != (ssize_t)n)
            log_warn_limited(1, "access log %s: cannot write: %s", l->path,
                             errno ? strerror(errno) : "short write");
    }
    errno = saved;
}

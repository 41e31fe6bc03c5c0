/* health.c -- health of members, on the control thread. Active checks
 * are non-blocking TCP connects watched by the control loop (no thread per
 * check), followed for the protocol types by a probe and its answer (redis
 * PING, memcache version, an HTTP GET whose status line is judged):
 * `rise` successes bring a member up, `fall` failures take it down. Passive:
 * workers count consecutive connect failures; at server_failure_limit the
 * member is ejected for server_retry_timeout and re-admitted only when a probe
 * then succeeds (twemproxy re-admits blindly; we probe first).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "control/health.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "control/membership.h"
#include "loop/control.h"
#include "loop/io.h"
#include "model/pool.h"
#include "model/state.h"
#include "proto/modes.h"
#include "proto/redis.h"

struct health_probe {
    struct control_watch watch;
    struct server *s; /* borrowed: cancelled before s leaves */
    uint64_t deadline_ms;
    /* A protocol check (types redis, memcache, http): after the connect,
     * what to send and what came back. */
    bool asking;      /* sent; reading the answer */
    unsigned swallow; /* AUTH replies still to check before PING's */
    char buf[512];
    size_t len;
};

static struct control_watch passive = {.fd = -1};

/* The first bytes that decide an http check: "HTTP/1.1 200" and the byte
 * after the code (a space, or CR or LF for a status line without a
 * reason phrase). */
#define HTTP_STATUS_DECIDES 13

/* How many bytes of an answer a reason quotes: what tells garbage apart
 * ("SSH-2.0-OpenSSH", "-ERR", "<html>") and fits s->reason escaped. */
#define HTTP_QUOTE_MAX 16
/* A pool with nothing due is walked at least this often anyway. */
#define HEALTH_RESCAN_MS 100

static void probe_done(struct server *s, bool ok, const char *why);

void
health_passive_failure(struct pool *p, uint32_t fails)
{
    struct pool_snapshot *snap;
    uint64_t one = 1;

    /* <p> is kept alive by the caller's connection; its snapshot is valid
     * inside the worker's epoch section. */
    if (passive.fd < 0)
        return;
    snap = pool_snapshot(p);
    if (!snap->set.auto_eject || snap->set.failure_limit == 0 ||
        fails < snap->set.failure_limit)
        return;
    if (write(passive.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_error("health: eventfd: %s", strerror(errno));
}

/* Workers reported members at their failure limit: eject them. */
static void
passive_cb(struct control_watch *w, uint32_t events)
{
    uint64_t v, now = clock_ms();

    (void)events;
    if (read(w->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        return;
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        uint32_t limit = p->cfg.server_failure_limit;
        if (!p->cfg.auto_eject_hosts || limit == 0)
            continue;
        for (size_t j = 0; j < p->nservers; j++) {
            struct server *s = p->servers[j];
            uint32_t fails = atomic_load(&s->fails);
            char why[192];
            if (fails < limit || s->health == HEALTH_EJECTED)
                continue;
            atomic_store(&s->fails, 0);
            health_cancel(s);
            s->eject_until_ms = now + p->cfg.server_retry_timeout_ms;
            s->check_ok = s->check_fail = 0;
            snprintf(why, sizeof(why),
                     "%u failures in a row (refused, timed out or broken "
                     "before a byte); probe again in %ums",
                     fails, p->cfg.server_retry_timeout_ms);
            membership_health(s, HEALTH_EJECTED, why);
            p->health_due_ms = 0; /* its probe time: the next tick */
        }
    }
}

/* ---- http checks: the request, the status line (pure) -------------------- */

int
health_http_request(char *out, size_t len, const struct conf_health *hc,
                    const struct conf_addr *addr)
{
    const char *host = hc->host[0] != '\0'       ? hc->host
                       : addr->family == AF_UNIX ? "localhost"
                                                 : addr->text;
    int n;

    /* conf refuses spaces and control bytes in path and host; an address
     * added at run time went through the same parser, but a header that
     * a CR or LF could split is not sent on a hunch. */
    for (const char *c = host; *c != '\0'; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            return -1;
    n = snprintf(out, len,
                 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: "
                 "chashd-health\r\nConnection: close\r\n\r\n",
                 hc->path[0] != '\0' ? hc->path : "/", host);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

/* The first bytes of <s> (<n>) for a message: printable ASCII as it is,
 * '"', '\' and any other byte as \xNN; "..." when cut. */
static void
quote_bytes(const char *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n && i < HTTP_QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        int k;

        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            k = snprintf(out + o, outlen - o, "%c", c);
        else
            k = snprintf(out + o, outlen - o, "\\x%02x", c);
        if (k < 0 || (size_t)k >= outlen - o)
            return;
        o += (size_t)k;
    }
    if (n > HTTP_QUOTE_MAX)
        snprintf(out + o, outlen - o, "...");
}

int
health_http_status(const char *buf, size_t len, uint32_t expect, bool closed,
                   char *why, size_t whylen)
{
    static const char version[] = "HTTP/1.";
    char seen[4 * HTTP_QUOTE_MAX + 8];
    unsigned status = 0;
    size_t i;

    /* Byte by byte, so that garbage fails at its first wrong byte rather
     * than at the timeout: "HTTP/1." a digit, a space, three digits, and
     * a space, CR or LF. */
    for (i = 0; i < len && i < HTTP_STATUS_DECIDES; i++) {
        unsigned char c = (unsigned char)buf[i];
        bool digit = c >= '0' && c <= '9', good;

        if (i < sizeof(version) - 1)
            good = c == (unsigned char)version[i];
        else if (i == 7 || (i >= 9 && i <= 11))
            good = digit;
        else if (i == 8)
            good = c == ' ';
        else
            good = c == ' ' || c == '\r' || c == '\n';
        if (!good) {
            quote_bytes(buf, len, seen, sizeof(seen));
            snprintf(why, whylen, "not an HTTP status line: \"%s\"", seen);
            return -1;
        }
        if (i >= 9 && i <= 11)
            status = status * 10 + (unsigned)(c - '0');
    }
    if (i < HTTP_STATUS_DECIDES) {
        if (!closed)
            return 0;
        if (len == 0) {
            snprintf(why, whylen, "closed before answering");
        } else {
            quote_bytes(buf, len, seen, sizeof(seen));
            snprintf(why, whylen, "closed before a status line: \"%s\"", seen);
        }
        return -1;
    }
    if (expect != 0 ? status == expect : status >= 200 && status <= 399)
        return 1;
    if (expect != 0)
        snprintf(why, whylen, "http status %u, expected %u", status,
                 (unsigned)expect);
    else
        snprintf(why, whylen, "http status %u, expected 2xx or 3xx", status);
    return -1;
}

void
health_cancel(struct server *s)
{
    struct health_probe *pr = s->probe;

    if (pr == NULL)
        return;
    control_watch_del(&pr->watch);
    close(pr->watch.fd);
    s->probe = NULL;
    control_defer_free(pr);
}

/* The pool checks its members by their store protocol (redis, memcache),
 * not a bare connect. */
static const struct proto *
probe_proto(const struct server *s)
{
    const struct pool *p = s->pool;

    if (p == NULL || !p->cfg.health.enabled ||
        p->cfg.health.type == CONF_HEALTH_TCP ||
        p->cfg.health.type == CONF_HEALTH_HTTP)
        return NULL;
    return proto_find(p->cfg.mode);
}

/* The pool checks its members with an HTTP GET (tcp and http pools). */
static bool
probe_http(const struct server *s)
{
    const struct pool *p = s->pool;

    return p != NULL && p->cfg.health.enabled &&
           p->cfg.health.type == CONF_HEALTH_HTTP;
}

/* After the connect, something is sent and an answer judged. */
static bool
probe_asks(const struct server *s)
{
    return probe_proto(s) != NULL || probe_http(s);
}

/* Connected: send the pool's probe (redis: AUTH first with redis_auth;
 * http: the GET of the check), then wait for its answer. */
static void
probe_ask(struct health_probe *pr)
{
    const struct proto *pt = probe_proto(pr->s);
    const struct conf_pool *cp = &pr->s->pool->cfg;
    char out[700];
    unsigned swallow = 0;
    int k = 0;
    size_t n;
    ssize_t w;

    if (pt == NULL) {
        /* type http: path and host are bounded by the config (255 bytes
         * each), so the request fits. */
        k = health_http_request(out, sizeof(out), &cp->health, &pr->s->addr);
        if (k < 0) {
            probe_done(pr->s, false,
                       "http check: no request to send (the member's "
                       "address cannot be a Host header)");
            return;
        }
        n = (size_t)k;
    } else {
        if (cp->health.type == CONF_HEALTH_REDIS)
            k = redis_prelude(out, sizeof(out) - pt->probe_len, cp->redis_auth,
                              0, &swallow);
        if (k < 0) {
            probe_done(pr->s, false, "redis_auth too long for a probe");
            return;
        }
        n = (size_t)k;
        pr->swallow = swallow;
        memcpy(out + n, pt->probe, pt->probe_len);
        n += pt->probe_len;
    }
    /* A probe is a few bytes into an empty socket buffer: all or nothing. */
    w = send(pr->watch.fd, out, n, MSG_NOSIGNAL);
    if (w != (ssize_t)n) {
        probe_done(pr->s, false, w < 0 ? strerror(errno) : "short write");
        return;
    }
    control_watch_del(&pr->watch);
    if (control_watch_add(&pr->watch, EPOLLIN) < 0) {
        probe_done(pr->s, false, strerror(errno));
        return;
    }
    pr->asking = true;
}

/* The member's answer to an http check, as far as it has come: judged
 * once its status line is in (the rest is never read; the close resets
 * it), or at its end. */
static void
http_answer(struct health_probe *pr)
{
    char why[128];
    ssize_t n;
    int st;

    n = read(pr->watch.fd, pr->buf + pr->len, sizeof(pr->buf) - pr->len);
    if (n < 0) {
        if (errno == EAGAIN)
            return;
        probe_done(pr->s, false, strerror(errno));
        return;
    }
    pr->len += (size_t)n;
    st = health_http_status(
        pr->buf, pr->len, pr->s->pool->cfg.health.expect_status,
        n == 0 || pr->len == sizeof(pr->buf), why, sizeof(why));
    if (st != 0)
        probe_done(pr->s, st > 0, st > 0 ? NULL : why);
}

/* The member's answer to a protocol probe, as far as it has come. */
static void
probe_answer(struct health_probe *pr)
{
    const struct proto *pt = probe_proto(pr->s);
    ssize_t n;

    if (pt == NULL) {
        http_answer(pr);
        return;
    }
    n = read(pr->watch.fd, pr->buf + pr->len, sizeof(pr->buf) - pr->len);
    if (n <= 0) {
        if (n < 0 && errno == EAGAIN)
            return;
        probe_done(pr->s, false,
                   n == 0 ? "closed before answering" : strerror(errno));
        return;
    }
    pr->len += (size_t)n;
    while (pr->swallow > 0) {
        struct proto_reply rp = {0};
        int st = pt->parse_reply(pr->buf, pr->len, NULL, &rp);

        if (st == PROTO_AGAIN)
            return;
        if (st != PROTO_OK || rp.error) {
            probe_done(pr->s, false, "AUTH refused (check redis_auth)");
            return;
        }
        memmove(pr->buf, pr->buf + rp.len, pr->len - (size_t)rp.len);
        pr->len -= (size_t)rp.len;
        pr->swallow--;
    }
    switch (pt->probe_reply(pr->buf, pr->len)) {
    case 1:
        probe_done(pr->s, true, NULL);
        return;
    case 0:
        if (pr->len == sizeof(pr->buf))
            probe_done(pr->s, false, "answer too long");
        return;
    default:
        pr->buf[pr->len < sizeof(pr->buf) ? pr->len : sizeof(pr->buf) - 1] =
            '\0';
        pr->buf[strcspn(pr->buf, "\r\n")] = '\0';
        {
            char why[96];
            snprintf(why, sizeof(why), "answered %.60s", pr->buf);
            probe_done(pr->s, false, why);
        }
        return;
    }
}

static void
probe_cb(struct control_watch *w, uint32_t events)
{
    struct health_probe *pr = (struct health_probe *)w;
    int err = 0;
    socklen_t len = sizeof(err);

    if (pr->asking) {
        probe_answer(pr);
        return;
    }
    if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == 0 && (events & EPOLLERR))
        err = ECONNREFUSED;
    if (err == 0 && io_connected_to_self(w->fd, &pr->s->addr.sa))
        err = ECONNREFUSED; /* our own port: the member is not there */
    if (err == 0 && probe_asks(pr->s)) {
        probe_ask(pr);
        return;
    }
    probe_done(pr->s, err == 0, err == 0 ? NULL : strerror(err));
}

/* Start a TCP connect probe of <s> with <timeout_ms>. */
static void
probe_start(struct server *s, uint32_t timeout_ms, uint64_t now)
{
    struct health_probe *pr;
    int fd, rc;

    fd = socket(s->addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
            /* Our own clients hold every descriptor: that says nothing
             * about the member (counting it would take every member
             * down under load). No result; the next check is due one
             * interval (or one retry timeout) later. */
            struct pool *p = s->pool;
            log_warn("pool %s: health check of %s skipped: %s", p->name,
                     s->name, strerror(err));
            if (s->health == HEALTH_EJECTED)
                s->eject_until_ms = now + p->cfg.server_retry_timeout_ms;
            else
                s->next_check_ms = now + p->cfg.health.interval_ms;
            return;
        }
        probe_done(s, false, strerror(err));
        return;
    }
    rc = connect(fd, (const struct sockaddr *)&s->addr.sa, s->addr.salen);
    if (rc < 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        probe_done(s, false, strerror(err));
        return;
    }
    if (rc == 0 && !probe_asks(s)) {
        close(fd);
        probe_done(s, true, NULL);
        return;
    }
    pr = calloc(1, sizeof(*pr));
    if (pr == NULL) {
        close(fd);
        return;
    }
    pr->watch.fd = fd;
    pr->watch.cb = probe_cb;
    pr->s = s;
    pr->deadline_ms = now + timeout_ms;
    if (control_watch_add(&pr->watch, EPOLLOUT) < 0) {
        close(fd);
        free(pr);
        return;
    }
    s->probe = pr;
    if (rc == 0)
        probe_ask(pr); /* connected at once (a unix socket) */
}

/* A probe of <s> finished: <ok>, or failed because <why>. */
static void
probe_done(struct server *s, bool ok, const char *why)
{
    struct pool *p = s->pool;
    uint64_t now = clock_ms();
    char msg[160];

    if (s->probe != NULL) {
        struct health_probe *pr = s->probe;
        control_watch_del(&pr->watch);
        close(pr->watch.fd);
        s->probe = NULL;
        control_defer_free(pr);
    }
    if (p == NULL)
        return;
    p->health_due_ms = 0; /* its next check or probe: the next tick */
    if (ok)
        s->checks_ok++;
    else
        s->checks_failed++;
    if (s->health == HEALTH_EJECTED) {
        if (ok) {
            s->check_ok = s->check_fail = 0;
            atomic_store(&s->fails, 0);
            s->next_check_ms = now + p->cfg.health.interval_ms;
            membership_health(s, HEALTH_UP, "probe after ejection succeeded");
        } else {
            s->eject_until_ms = now + p->cfg.server_retry_timeout_ms;
            log_debug("pool %s: member %s still failing (%s); next probe in "
                      "%ums",
                      p->name, s->name, why, p->cfg.server_retry_timeout_ms);
        }
        return;
    }
    s->next_check_ms = now + p->cfg.health.interval_ms;
    if (ok) {
        s->check_fail = 0;
        s->check_ok++;
        if (s->health == HEALTH_DOWN && s->check_ok >= p->cfg.health.rise) {
            snprintf(msg, sizeof(msg), "%u checks passed", s->check_ok);
            atomic_store(&s->fails, 0);
            membership_health(s, HEALTH_UP, msg);
        }
    } else {
        s->check_ok = 0;
        s->check_fail++;
        if (s->health == HEALTH_UP && s->check_fail >= p->cfg.health.fall) {
            snprintf(msg, sizeof(msg), "%u checks failed (last: %s)",
                     s->check_fail, why);
            membership_health(s, HEALTH_DOWN, msg);
        }
    }
}

static void
health_tick(uint64_t now, void *arg)
{
    (void)arg;
    for (size_t i = 0; i < pool_count(); i++) {
        struct pool *p = pool_at(i);
        const struct conf_health *hc = &p->cfg.health;
        uint64_t due = now + HEALTH_RESCAN_MS;

        /* A pool is walked when something in it is due, or when it
         * changed (members, states, settings); at least every
         * HEALTH_RESCAN_MS. 100 pools of 100 members, walked every 10 ms
         * with nothing to do, cost 7.6% of a core. */
        if (p->gen == p->health_gen && now < p->health_due_ms)
            continue;
        for (size_t j = 0; j < p->nservers; j++) {
            struct server *s = p->servers[j];
            if (s->admin == STATE_ADMIN_MAINT)
                continue;
            if (s->probe != NULL) {
                if (now >= s->probe->deadline_ms) {
                    probe_done(s, false, "timed out");
                    due = now; /* its next check: seen on the next tick */
                } else if (s->probe->deadline_ms < due) {
                    due = s->probe->deadline_ms;
                }
                continue;
            }
            if (s->health == HEALTH_EJECTED) {
                /* Re-admission probe: the check's timeout when checks
                 * are configured, else the connect timeout. */
                if (now >= s->eject_until_ms) {
                    probe_start(s,
                                hc->enabled ? hc->timeout_ms
                                            : p->cfg.connect_timeout_ms,
                                now);
                    if (s->probe != NULL && s->probe->deadline_ms < due)
                        due = s->probe->deadline_ms;
                } else if (s->eject_until_ms < due) {
                    due = s->eject_until_ms;
                }
                continue;
            }
            if (!hc->enabled)
                continue;
            if (now >= s->next_check_ms) {
                probe_start(s, hc->timeout_ms, now);
                if (s->probe != NULL && s->probe->deadline_ms < due)
                    due = s->probe->deadline_ms;
            } else if (s->next_check_ms < due) {
                due = s->next_check_ms;
            }
        }
        p->health_gen = p->gen;
        p->health_due_ms = due;
    }
}

int
health_init(void)
{
    static const struct pool_hooks hooks = {
        .member_failing = health_passive_failure,
        .member_leaving = health_cancel,
    };

    pool_set_hooks(&hooks);
    passive.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    passive.cb = passive_cb;
    if (passive.fd < 0 || control_watch_add(&passive, EPOLLIN) < 0)
        return -1;
    return control_tick_add(health_tick, NULL);
}

void
health_deinit(void)
{
    if (passive.fd >= 0) {
        control_watch_del(&passive);
        close(passive.fd);
    }
    passive.fd = -1;
}

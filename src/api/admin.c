/* admin.c -- the admin API's HTTP server: libmicrohttpd in the control
 * thread, fed the connections chashd accepts; per-request deadlines; the
 * checks a request passes on its headers (Host, Origin, token, control
 * bytes, body size) before admin_route.c routes it; start, stop, reload.
 * The API itself: pools and members as JSON, runtime membership changes
 * answered with their migration report, lookups, ring arcs, the state
 * file, the change log, /metrics and the dashboard page. Every bad
 * request gets a 4xx and a JSON {"error": ...} naming the problem, and
 * changes nothing.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "api/admin.h"
#include "api/admin_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "api/metrics.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/text.h"
#include "conf/conf.h"
#include "loop/control.h"

#define ADMIN_MAX_BODY (64 * 1024)      /* request bodies above are 413 */
#define ADMIN_DISCARD_MAX (1024 * 1024) /* dropped before a 413 */
#define ADMIN_RUN_ROUNDS 16 /* MHD_run rounds per event while data waits */
/* A request (its head and body) must arrive within this, whatever its
 * pace: libmicrohttpd's timeout is an idle one, and a client that sends a
 * byte every few seconds kept its connection, and the 64th of them locked
 * everyone out. */
#define ADMIN_REQUEST_DEADLINE_MS 10000
/* ... and within this for ADMIN_REQUEST_DEADLINE_MS after the connection
 * limit was last reached: the first cut of the oldest frees places that
 * the backlog fills at once, and the younger slow ones would otherwise
 * keep theirs for the full 10 s. */
#define ADMIN_PRESSURE_DEADLINE_MS 1000
#define ADMIN_MAX_CONNECTIONS 64
#define ADMIN_ACCEPT_BATCH 16     /* accepts per wake-up, the rest next turn */
#define ADMIN_ACCEPT_PAUSE_MS 100 /* as the workers' listeners */

/*
 * The admin server: one per process, control thread only. The token is in
 * force for as long as the listener is bound: a listener that is not on
 * loopback always has one (conf refuses such a config without it at
 * start-up, admin_reload_check at a reload, admin_reconfigure keeps it).
 */
static struct MHD_Daemon *mhd;
static char *token;                   /* NULL: no authentication */
static char *address;                 /* as written, for messages */
static char *host;                    /* its host part: "127.0.0.1", "[::1]" */
static bool loopback;                 /* bound to loopback or a unix socket */
static int family;                    /* of the bound address */
static int listen_fd = -1;            /* ours: we accept, MHD serves */
static struct control_watch listener; /* listen_fd */
static bool listening;                /* listener is in the control loop */
static uint64_t resume_ms;            /* paused: watch it again then, or 0 */
static uint64_t starved_ms;           /* out of descriptors since, or 0 */
static struct control_watch watch;    /* libmicrohttpd's epoll fd */
static bool watching;
static bool tick_added;

static const char *
header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/*
 * DNS rebinding: a name the attacker owns resolves to 127.0.0.1 once its
 * page is loaded, and the page reads and changes the API as its own
 * origin, which no Origin check can tell. The name it uses is in Host.
 * Without a token (only on loopback, see above) the Host must name this
 * API: the admin address as written, localhost, 127.0.0.1 or [::1], on
 * any port (the port is not the attacker's to choose the name by, and an
 * ssh tunnel from another port is how loopback APIs are reached). With a
 * token the token authenticates: a browser never adds a Bearer header by
 * itself, and a non-loopback API is reached through names chashd cannot
 * know. A unix socket is out of a browser's reach. A missing or empty
 * Host (HTTP/1.0, health checkers) is no browser's either.
 */
static bool
host_ok(const char *h)
{
    static const char *const names[] = {"localhost", "127.0.0.1", "[::1]"};
    size_t n;

    if (token != NULL || family == AF_UNIX || h == NULL || h[0] == '\0')
        return true;
    n = admin_authority_host(h);
    if (n == 0)
        return false;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == n && strncasecmp(h, names[i], n) == 0)
            return true;
    return host != NULL && strlen(host) == n && strncasecmp(h, host, n) == 0;
}

/*
 * The checks a request passes once its headers are in, before its body is
 * read or its route looked at; the first that fails answers it (and
 * marks <rq> answered, its body is then discarded):
 *   421 a Host that does not name this API (host_ok);
 *   403 an Origin that is not the API's own: "http://" and the Host. A
 *       browser sends Origin with every POST, PATCH and DELETE, and with
 *       a cross-origin fetch; the dashboard's own GETs carry none or its
 *       own. "null" (sandboxed frames, file:) is foreign too;
 *   401 no token, or a wrong one, when one is set (GET / aside: the page
 *       holds no data and a browser cannot send a header on navigation);
 *   400 a URL that decodes to a control byte (text_url_control);
 *   413 an announced body over ADMIN_MAX_BODY.
 * The Content-Type of a change is checked with its route (json_content),
 * so that a method a path does not take is still a 405.
 */
static enum MHD_Result
admit(struct MHD_Connection *c, const char *url, struct admin_request *rq)
{
    const char *h = header(c, MHD_HTTP_HEADER_HOST);
    const char *origin = header(c, MHD_HTTP_HEADER_ORIGIN);
    const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long announced = cl != NULL ? strtoull(cl, NULL, 10) : 0;

    rq->admitted = true;
    rq->answered = true; /* unless every check passes */
    if (!host_ok(h))
        return admin_respond_error(
            c, MHD_HTTP_MISDIRECTED_REQUEST,
            "Host \"%s\" does not name this admin API (%s, "
            "localhost, 127.0.0.1 or [::1]); refused "
            "against DNS rebinding",
            h, address);
    if (origin != NULL &&
        (h == NULL || strncasecmp(origin, "http://", 7) != 0 ||
         strcasecmp(origin + 7, h) != 0))
        return admin_respond_error(
            c, MHD_HTTP_FORBIDDEN,
            "cross-origin request refused: Origin \"%s\" is "
            "not this API's own (http://%s)",
            origin, h != NULL ? h : address);
    if (token != NULL && strcmp(url, "/") != 0 &&
        !admin_token_ok(token, header(c, MHD_HTTP_HEADER_AUTHORIZATION)))
        return admin_respond_error(
            c, MHD_HTTP_UNAUTHORIZED,
            "missing or wrong token: send \"Authorization: "
            "Bearer <admin_token>\"");
    if (rq->control >= 0)
        return admin_respond_error(
            c, MHD_HTTP_BAD_REQUEST,
            "the URL decodes to a control byte (%%%02X) in "
            "its %s: names, keys and values cannot hold "
            "bytes 0x00-0x1F or 0x7F (nothing was changed)",
            (unsigned)rq->control, rq->control_in_query ? "query" : "path");
    if (announced > ADMIN_MAX_BODY)
        return admin_respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                   "request body over %d bytes",
                                   ADMIN_MAX_BODY);
    rq->answered = false;
    return MHD_YES;
}

/* ---- per-request deadline ------------------------------------------------ */

/* Each open admin connection: when its current request began, and whether
 * the request is whole (being answered, maybe suspended on a change). */
struct aconn {
    struct aconn *next, *prev;
    int fd;
    uint64_t since_ms; /* accepted, or its last answer completed */
    bool whole;
    bool cut;
};
static struct aconn *aconns;
/* Until when requests get ADMIN_PRESSURE_DEADLINE_MS (0: they do not). */
static uint64_t pressure_until_ms;

static void
on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
              enum MHD_ConnectionNotificationCode code)
{
    struct aconn *ac = *socket_context;

    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

        ac = calloc(1, sizeof(*ac));
        if (ac == NULL || info == NULL) {
            free(ac);
            return; /* not tracked: MHD's idle timeout still applies */
        }
        ac->fd = info->connect_fd;
        ac->since_ms = clock_ms();
        ac->next = aconns;
        if (aconns != NULL)
            aconns->prev = ac;
        aconns = ac;
        *socket_context = ac;
        return;
    }
    if (ac == NULL)
        return;
    if (ac->prev != NULL)
        ac->prev->next = ac->next;
    else
        aconns = ac->next;
    if (ac->next != NULL)
        ac->next->prev = ac->prev;
    free(ac);
    *socket_context = NULL;
}

static struct aconn *
aconn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return info != NULL ? info->socket_context : NULL;
}

/* Cut the connections whose request has taken longer than the deadline
 * to arrive: shut down, libmicrohttpd closes them on its next run. */
static void
deadlines(uint64_t now_ms, uint64_t deadline_ms)
{
    for (struct aconn *ac = aconns; ac != NULL; ac = ac->next) {
        if (ac->whole || ac->cut || now_ms - ac->since_ms < deadline_ms)
            continue;
        ac->cut = true;
        log_debug("admin: a request took over %llu ms to arrive: connection "
                  "closed",
                  (unsigned long long)deadline_ms);
        shutdown(ac->fd, SHUT_RDWR);
    }
}

/* A request line came in: its state, with what the raw URL holds that
 * the decoded one can no longer show (libmicrohttpd hands the handler a
 * C string). NULL when out of memory: on_request then drops the
 * connection. */
static void *
on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct admin_request *rq = calloc(1, sizeof(*rq));

    (void)cls;
    (void)c;
    if (rq != NULL)
        rq->control = text_url_control(uri, &rq->control_in_query);
    return rq;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url,
           const char *method, const char *version, const char *upload,
           size_t *upload_size, void **con_cls)
{
    struct admin_request *rq = *con_cls;
    struct aconn *ac;

    (void)cls;
    (void)version;
    if (rq == NULL)
        return MHD_NO;
    if (!rq->admitted)
        return admit(c, url, rq);
    if (*upload_size > 0) {
        if (!rq->answered && !rq->too_large) {
            if (rq->len + *upload_size > ADMIN_MAX_BODY) {
                rq->too_large = true;
            } else {
                if (rq->len + *upload_size + 1 > rq->cap) {
                    size_t cap = rq->len + *upload_size + 1;
                    char *nb = realloc(rq->body, cap < 4096 ? 4096 : cap);

                    if (nb == NULL)
                        return MHD_NO;
                    rq->body = nb;
                    rq->cap = cap < 4096 ? 4096 : cap;
                }
                memcpy(rq->body + rq->len, upload, *upload_size);
                rq->len += *upload_size;
                rq->body[rq->len] = '\0';
            }
        }
        if (rq->too_large && !rq->answered) {
            /* A body over the limit is read and dropped, so that the
             * client, still sending, gets its 413 (a close with unread
             * bytes would reset the connection under the answer); past
             * ADMIN_DISCARD_MAX the 413 goes at once and the connection
             * closes: no client sends that much to this API. */
            rq->discarded += *upload_size;
            if (rq->discarded > ADMIN_DISCARD_MAX) {
                rq->answered = true;
                *upload_size = 0;
                return admin_respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                           "request body over %d bytes",
                                           ADMIN_MAX_BODY);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->ready) /* resumed: the membership change is done */
        return admin_respond_ready(c, rq);
    if ((ac = aconn_of(c)) != NULL)
        ac->whole = true; /* all of it came in time */
    if (rq->answered)
        return MHD_YES;
    rq->answered = true;
    if (rq->too_large)
        return admin_respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                   "request body over %d bytes",
                                   ADMIN_MAX_BODY);
    return admin_route(c, url, method, rq);
}

static void
on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
             enum MHD_RequestTerminationCode toe)
{
    struct admin_request *rq = *con_cls;

    struct aconn *ac = aconn_of(c);

    (void)cls;
    (void)toe;
    if (ac != NULL) {
        /* the next request on the connection has its own deadline */
        ac->since_ms = clock_ms();
        ac->whole = false;
    }
    if (rq != NULL) {
        free(rq->body);
        free(rq->text);
        json_decref(rq->wrap);
        free(rq);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's format strings: tell the compiler so -Wformat=2 checks
 * our use of them instead of refusing a non-literal format. */
__attribute__((format(printf, 2, 0))) static void
on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    log_debug("admin: %s", msg);
}

/* ---- lifecycle ----------------------------------------------------------- */

static void
on_ready(struct control_watch *w, uint32_t events)
{
    (void)w;
    (void)events;
    admin_run();
}

/*
 * Stop accepting for ADMIN_ACCEPT_PAUSE_MS; on_tick watches the listener
 * again then. Clients wait in the backlog meanwhile. <why>: the accept
 * error that found no descriptor (logged once per episode), or NULL for
 * the connection limit.
 */
static void
listener_pause(const char *why)
{
    uint64_t now = clock_ms();

    if (listening)
        control_watch_del(&listener);
    listening = false;
    resume_ms = now + ADMIN_ACCEPT_PAUSE_MS;
    if (why != NULL && starved_ms == 0) {
        starved_ms = now;
        log_warn("admin: accept: %s; pausing new admin connections for "
                 "%d ms at a time until descriptors free up",
                 why, ADMIN_ACCEPT_PAUSE_MS);
    }
}

static unsigned
connections(void)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

    return info != NULL ? info->num_connections : 0;
}

/*
 * The listener is readable: accept, and hand each connection to
 * libmicrohttpd. chashd accepts rather than libmicrohttpd because of what
 * happens when descriptors run out: accept() fails with EMFILE, the
 * connection stays in the backlog and the listener stays readable, and
 * libmicrohttpd (0.9.75, with no connection open) tries again at once,
 * forever: the control thread spun at 100% and health checks, ramps and
 * reloads starved. Here the listener leaves the loop for 100 ms instead,
 * as the workers' listeners do. At the connection limit it pauses the
 * same way (libmicrohttpd would close the connection).
 */
static void
on_accept(struct control_watch *w, uint32_t events)
{
    (void)w;
    (void)events;
    for (int i = 0; i < ADMIN_ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd;

        if (connections() >= ADMIN_MAX_CONNECTIONS) {
            /* full: the requests still arriving after a second give
             * their place (slow clients must not lock the others out) */
            uint64_t now = clock_ms();

            if (pressure_until_ms == 0)
                log_info("admin: at its %d connections: a request must "
                         "arrive within %d ms, until %d ms after the last "
                         "time it is full",
                         ADMIN_MAX_CONNECTIONS, ADMIN_PRESSURE_DEADLINE_MS,
                         ADMIN_REQUEST_DEADLINE_MS);
            pressure_until_ms = now + ADMIN_REQUEST_DEADLINE_MS;
            deadlines(now, ADMIN_PRESSURE_DEADLINE_MS);
            listener_pause(NULL);
            break;
        }
        fd = accept4(listen_fd, (struct sockaddr *)&peer, &peerlen,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue; /* that connection is gone; the next one */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM)
                listener_pause(strerror(errno));
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_error("admin: accept: %s", strerror(errno));
            break;
        }
        if (starved_ms != 0) {
            log_info("admin: accepting again after %llu ms without "
                     "descriptors",
                     (unsigned long long)(clock_ms() - starved_ms));
            starved_ms = 0;
        }
        /* It takes the descriptor, and closes it on failure. */
        if (MHD_add_connection(mhd, fd, (struct sockaddr *)&peer, peerlen) !=
            MHD_YES)
            log_debug("admin: connection dropped: %s", strerror(errno));
    }
    admin_run();
}

/* Whether libmicrohttpd has work now: a connection with bytes it has not
 * read yet. Its epoll is edge-triggered, so such bytes raise no new event:
 * run only on events and a slow tick, it read a 1 MB body in 5 s. */
static bool
mhd_due(void)
{
    MHD_UNSIGNED_LONG_LONG t;

    return mhd != NULL && MHD_get_timeout(mhd, &t) == MHD_YES && t == 0;
}

/* Connection timeouts need MHD_run() even when nothing is readable; every
 * 100 ms is plenty for a 10 s timeout. A paused listener is watched again
 * once its pause is over. */
static void
on_tick(uint64_t now_ms, void *arg)
{
    static uint64_t last;

    (void)arg;
    if (mhd == NULL)
        return;
    if (!listening && resume_ms != 0 && now_ms >= resume_ms) {
        resume_ms = 0;
        if (control_watch_add(&listener, EPOLLIN) == 0)
            listening = true;
        else
            resume_ms = now_ms + ADMIN_ACCEPT_PAUSE_MS;
    }
    if (now_ms - last >= 100 || mhd_due()) {
        last = now_ms;
        if (pressure_until_ms != 0 && now_ms >= pressure_until_ms) {
            pressure_until_ms = 0;
            log_info("admin: not full for %d ms: a request has %d ms again",
                     ADMIN_REQUEST_DEADLINE_MS, ADMIN_REQUEST_DEADLINE_MS);
        }
        deadlines(now_ms, pressure_until_ms != 0 ? ADMIN_PRESSURE_DEADLINE_MS
                                                 : ADMIN_REQUEST_DEADLINE_MS);
        admin_run();
    }
}

/* A copy of <conf>'s token, NULL when it has none; -1 when out of memory. */
static int
token_copy(const struct conf *conf, char **out)
{
    *out = NULL;
    if (conf->admin_token == NULL || conf->admin_token[0] == '\0')
        return 0;
    *out = strdup(conf->admin_token);
    return *out != NULL ? 0 : -1;
}

int
admin_start(const struct conf *conf, char *err, size_t errlen)
{
    const struct conf_addr *a = &conf->admin;
    size_t hl;
    int one = 1;

    if (mhd != NULL)
        return 0;
    if (a->family == AF_UNSPEC)
        return 0;
    /* Before anything listens: without its token, a non-loopback API
     * would be open to anyone. */
    if (token_copy(conf, &token) < 0 || (address = strdup(a->text)) == NULL) {
        snprintf(err, errlen, "admin %s: out of memory", a->text);
        goto fail;
    }
    hl = a->family != AF_UNIX ? admin_authority_host(a->text) : 0;
    if (hl > 0 && (host = strndup(a->text, hl)) == NULL) {
        snprintf(err, errlen, "admin %s: out of memory", a->text);
        goto fail;
    }
    loopback = conf_addr_is_loopback(a);
    family = a->family;
    listen_fd =
        socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) {
        snprintf(err, errlen, "admin %s: socket: %s", a->text, strerror(errno));
        goto fail;
    }
    if (a->family != AF_UNIX)
        setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    else
        unlink(((const struct sockaddr_un *)&a->sa)->sun_path);
    if (bind(listen_fd, (const struct sockaddr *)&a->sa, a->salen) != 0 ||
        listen(listen_fd, 64) != 0) {
        snprintf(err, errlen, "admin %s: %s", a->text, strerror(errno));
        goto fail;
    }
    /* No listening socket of its own: on_accept hands it connections.
     * The logger goes first, or libmicrohttpd prints the options' own
     * messages to stderr. */
    mhd = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG |
            MHD_ALLOW_SUSPEND_RESUME,
        0, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        NULL, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)ADMIN_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (mhd == NULL) {
        snprintf(err, errlen, "admin %s: cannot start the HTTP server",
                 a->text);
        goto fail;
    }
    watch.fd = admin_fd();
    watch.cb = on_ready;
    listener.fd = listen_fd;
    listener.cb = on_accept;
    if (watch.fd < 0 || control_watch_add(&watch, EPOLLIN) != 0) {
        snprintf(err, errlen, "admin %s: cannot watch the HTTP server: %s",
                 a->text, strerror(errno));
        goto fail;
    }
    watching = true;
    if (control_watch_add(&listener, EPOLLIN) != 0 ||
        (!tick_added && control_tick_add(on_tick, NULL) != 0)) {
        snprintf(err, errlen, "admin %s: cannot watch the HTTP server: %s",
                 a->text, strerror(errno));
        goto fail;
    }
    listening = true;
    tick_added = true;
    metrics_init();
    log_info("admin API, metrics and dashboard on http://%s/%s", a->text,
             token ? " (token required)" : "");
    return 0;
fail:
    admin_stop();
    return -1;
}

void
admin_stop(void)
{
    if (watching)
        control_watch_del(&watch);
    watching = false;
    if (listening)
        control_watch_del(&listener);
    listening = false;
    resume_ms = starved_ms = 0;
    if (mhd != NULL)
        MHD_stop_daemon(mhd); /* closes every admin connection */
    mhd = NULL;
    if (listen_fd >= 0)
        close(listen_fd);
    listen_fd = -1;
    free(token);
    token = NULL;
    free(address);
    address = NULL;
    free(host);
    host = NULL;
}

int
admin_fd(void)
{
    const union MHD_DaemonInfo *info;

    if (mhd == NULL)
        return -1;
    info = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

void
admin_run(void)
{
    /* bounded: other control work (health checks, etcd, ramps) runs
     * between rounds; the tick comes back for the rest */
    for (int i = 0; mhd != NULL && i < ADMIN_RUN_ROUNDS; i++) {
        MHD_run(mhd);
        if (!mhd_due())
            break;
    }
}

int
admin_reload_check(const struct conf *next, char *err, size_t errlen)
{
    if (mhd == NULL || loopback ||
        (next->admin_token != NULL && next->admin_token[0] != '\0'))
        return 0;
    snprintf(err, errlen,
             "the admin API stays on %s until a restart, which is not "
             "loopback, and the new config has no 'admin_token'%s: keep the "
             "token until chashd restarts",
             address,
             next->admin.family == AF_UNSPEC ? " ('admin: off' is applied "
                                               "only at a restart)"
                                             : "");
    return -1;
}

void
admin_reconfigure(const struct conf *conf)
{
    char *next;

    if (mhd == NULL)
        return;
    if (conf->admin.text == NULL || address == NULL ||
        strcmp(conf->admin.text, address) != 0)
        log_warn("admin: the admin address changed to %s; it takes effect "
                 "at the next restart",
                 conf->admin.text ? conf->admin.text : "off");
    if (token_copy(conf, &next) < 0) {
        log_error("admin: out of memory: the admin token stays as it was");
        return;
    }
    /* admin_reload_check refused such a config; never open a bound
     * non-loopback listener, whoever calls. */
    if (next == NULL && !loopback) {
        log_error("admin: the API on %s is not loopback: its token stays "
                  "until a restart",
                  address);
        return;
    }
    if (token != NULL && next == NULL)
        log_warn("admin: the token is removed: the API on %s answers "
                 "without one",
                 address);
    else if (token == NULL && next != NULL)
        log_info("admin: the API on %s requires a token from now on", address);
    else if (token != NULL && strcmp(token, next) != 0)
        log_info("admin: the token changed");
    free(token);
    token = next;
}

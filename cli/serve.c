/* serve.c -- `chash serve`: a tiny epoll backend for demos and tests.
 * Answers every HTTP request with "200 OK" and its own name (keep-alive
 * honoured), or echoes bytes back with --echo (half-close passed through).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

#define SERVE_BUF (64 * 1024)

static const char serve_usage[] =
    "usage: chash serve --listen HOST:PORT [--name NAME] [--echo]\n"
    "                   [--read-delay MS] [--recv-buf BYTES]\n"
    "  --listen HOST:PORT  address to listen on (IPv4, or [IPv6]:port)\n"
    "  --name NAME         name in every HTTP answer (default: the address)\n"
    "  --echo              echo bytes back instead of answering HTTP; a FIN\n"
    "                      from the client is passed back once all is echoed\n"
    "  --read-delay MS     wait MS milliseconds between reads (a slow reader)\n"
    "  --recv-buf BYTES    SO_RCVBUF of accepted sockets (small = slow "
    "reader)\n";

/*
 * One client. <in> holds bytes read and not yet consumed (HTTP: a partial
 * request; echo: bytes not yet written back). We stop reading while <in>
 * is full, so a client that does not read its answers is slowed down, not
 * buffered without bound.
 */
struct serve_conn {
    int fd;
    bool eof;     /* client sent FIN */
    bool closing; /* close once <out> is written (HTTP/1.0, close) */
    size_t inlen;
    size_t outlen, outoff;
    uint32_t events; /* epoll interest currently set */
    char in[SERVE_BUF];
    char out[SERVE_BUF];
};

struct serve {
    int ep;
    const char *name;
    bool echo;
    unsigned read_delay_ms;
    int recv_buf;
};

static int
parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(s, ':');
    char *end;
    long port;

    if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || colon[1] == '\0' || port < 0 ||
        port > 65535)
        return -1;
    memset(ss, 0, sizeof(*ss));
    if (host[0] == '[') {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
        size_t hl = strlen(host);
        if (hl < 2 || host[hl - 1] != ']')
            return -1;
        host[hl - 1] = '\0';
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &sin6->sin6_addr) != 1)
            return -1;
        *len = sizeof(*sin6);
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
            return -1;
        *len = sizeof(*sin);
    }
    return 0;
}

static void
conn_close(struct serve *sv, struct serve_conn *c)
{
    epoll_ctl(sv->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

/* Set the epoll interest of <c> from its buffers: read while there is
 * room and no FIN yet, write while output is pending. */
static void
conn_update(struct serve *sv, struct serve_conn *c)
{
    uint32_t ev = 0;
    struct epoll_event e;
    bool room = sv->echo ? c->inlen < sizeof(c->in)
                         : c->inlen < sizeof(c->in) && c->outlen == 0;

    if (!c->eof && !c->closing && room)
        ev |= EPOLLIN;
    if (c->outlen > c->outoff || (sv->echo && c->inlen > 0))
        ev |= EPOLLOUT;
    if (ev == c->events)
        return;
    e.events = ev;
    e.data.ptr = c;
    epoll_ctl(sv->ep, EPOLL_CTL_MOD, c->fd, &e);
    c->events = ev;
}

/* Case-insensitive search for a header token in the request head. */
static bool
head_has(const char *head, size_t len, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= len; i++)
        if (strncasecmp(head + i, needle, nl) == 0)
            return true;
    return false;
}

/*
 * Answer every complete request in <c->in>. A request is a head ending
 * in an empty line plus Content-Length bytes of body. Keep-alive follows
 * HTTP/1.1 (default on) and HTTP/1.0 (default off) rules.
 * Returns -1 on a request we cannot parse (the connection is closed).
 */
static int
http_answer(struct serve *sv, struct serve_conn *c)
{
    while (c->outlen == 0 && c->inlen > 0) {
        char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
        size_t head, body = 0, total;
        bool keep;
        char *cl;
        int n;

        if (end == NULL) {
            if (c->inlen == sizeof(c->in))
                return -1; /* head larger than the buffer */
            return 0;
        }
        head = (size_t)(end - c->in) + 4;
        cl = NULL;
        for (size_t i = 0; i + 15 < head; i++)
            if (strncasecmp(c->in + i, "\ncontent-length:", 16) == 0) {
                cl = c->in + i + 16;
                break;
            }
        if (cl != NULL)
            body = strtoul(cl, NULL, 10);
        if (body > sizeof(c->in) - head)
            return -1;
        total = head + body;
        if (c->inlen < total)
            return 0;
        if (memmem(c->in, head, "HTTP/1.0", 8) != NULL)
            keep = head_has(c->in, head, "connection: keep-alive");
        else
            keep = !head_has(c->in, head, "connection: close");
        n = snprintf(c->out, sizeof(c->out),
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n\r\n%s\n",
                     strlen(sv->name) + 1, keep ? "keep-alive" : "close",
                     sv->name);
        if (n < 0 || (size_t)n >= sizeof(c->out))
            return -1;
        c->outlen = (size_t)n;
        c->outoff = 0;
        c->closing = !keep;
        memmove(c->in, c->in + total, c->inlen - total);
        c->inlen -= total;
    }
    return 0;
}

/* Handle readiness on <c>; returns -1 when the connection is finished. */
static int
conn_event(struct serve *sv, struct serve_conn *c, uint32_t ev)
{
    ssize_t n;

    if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c->eof &&
        c->inlen < sizeof(c->in)) {
        if (sv->read_delay_ms > 0)
            usleep(sv->read_delay_ms * 1000u);
        n = read(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (n == 0)
            c->eof = true;
        if (n > 0)
            c->inlen += (size_t)n;
    }
    if (!sv->echo && http_answer(sv, c) < 0)
        return -1;
    if (sv->echo && c->inlen > 0) {
        n = write(c->fd, c->in, c->inlen);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (n > 0) {
            memmove(c->in, c->in + n, c->inlen - (size_t)n);
            c->inlen -= (size_t)n;
        }
    }
    if (c->outlen > c->outoff) {
        n = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (n > 0)
            c->outoff += (size_t)n;
        if (c->outoff == c->outlen) {
            c->outlen = c->outoff = 0;
            if (c->closing)
                return -1;
            if (!sv->echo && http_answer(sv, c) < 0)
                return -1;
        }
    }
    if (c->eof) {
        if (sv->echo && c->inlen == 0) {
            /* Pass the half-close back; the client closes when it is
             * done reading. */
            shutdown(c->fd, SHUT_WR);
            return -1;
        }
        if (!sv->echo && c->outlen == 0)
            return -1;
    }
    conn_update(sv, c);
    return 0;
}

static void
serve_accept(struct serve *sv, int lfd)
{
    for (int i = 0; i < 64; i++) {
        struct epoll_event e;
        struct serve_conn *c;
        int one = 1;
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0)
            return;
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            return;
        }
        c->fd = fd;
        c->events = EPOLLIN;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (sv->recv_buf > 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sv->recv_buf,
                       sizeof(sv->recv_buf));
        e.events = EPOLLIN;
        e.data.ptr = c;
        if (epoll_ctl(sv->ep, EPOLL_CTL_ADD, fd, &e) < 0) {
            close(fd);
            free(c);
        }
    }
}

/* `chash serve`: options, listeners, then the epoll loop. Long (about
 * 120 lines) because it is the command's getopt loop and its one loop;
 * the per-connection work is in the functions above. */
int
cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"name", required_argument, NULL, 'n'},
        {"echo", no_argument, NULL, 'e'},
        {"read-delay", required_argument, NULL, 'd'},
        {"recv-buf", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct serve sv = {.ep = -1};
    const char *listen_at = NULL;
    struct sockaddr_storage ss;
    socklen_t sslen;
    struct epoll_event e;
    sigset_t mask;
    int c, lfd = -1, sfd = -1, one = 1, rc = CLI_EXIT_FAIL;
    uint32_t u;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            listen_at = optarg;
            break;
        case 'n':
            sv.name = optarg;
            break;
        case 'e':
            sv.echo = true;
            break;
        case 'd':
            if (cli_parse_u32("serve", "--read-delay", optarg, 0, 60000, &u) <
                0)
                return CLI_EXIT_USAGE;
            sv.read_delay_ms = u;
            break;
        case 'r':
            if (cli_parse_u32("serve", "--recv-buf", optarg, 1, 1u << 26, &u) <
                0)
                return CLI_EXIT_USAGE;
            sv.recv_buf = (int)u;
            break;
        case 'h':
            fputs(serve_usage, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_bad_option("serve", serve_usage, argv, c);
        }
    }
    if (optind < argc)
        return cli_usage_error("serve", serve_usage, "unexpected argument '%s'",
                               argv[optind]);
    if (listen_at == NULL)
        return cli_usage_error("serve", serve_usage, "--listen is required");
    if (parse_listen(listen_at, &ss, &sslen) < 0)
        return cli_usage_error("serve", serve_usage,
                               "--listen '%s': expected HOST:PORT or "
                               "[IPv6]:PORT with a numeric address",
                               listen_at);
    if (sv.name == NULL)
        sv.name = listen_at;

    /* SIGINT/SIGTERM end the loop cleanly through a signalfd. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    sv.ep = epoll_create1(EPOLL_CLOEXEC);
    lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sfd < 0 || sv.ep < 0 || lfd < 0) {
        cli_error("serve", "%s", strerror(errno));
        goto out;
    }
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&ss, sslen) < 0 || listen(lfd, 1024) < 0) {
        cli_error("serve", "cannot listen on %s: %s", listen_at,
                  strerror(errno));
        goto out;
    }
    e.events = EPOLLIN;
    e.data.ptr = &lfd;
    epoll_ctl(sv.ep, EPOLL_CTL_ADD, lfd, &e);
    e.data.ptr = &sfd;
    epoll_ctl(sv.ep, EPOLL_CTL_ADD, sfd, &e);
    fprintf(stderr, "chash serve: %s listening on %s%s\n", sv.name, listen_at,
            sv.echo ? " (echo)" : "");

    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(sv.ep, evs, 64, -1);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cli_error("serve", "epoll_wait: %s", strerror(errno));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &lfd) {
                serve_accept(&sv, lfd);
            } else if (evs[i].data.ptr == &sfd) {
                rc = CLI_EXIT_OK;
                goto out;
            } else {
                struct serve_conn *sc = evs[i].data.ptr;
                if (conn_event(&sv, sc, evs[i].events) < 0)
                    conn_close(&sv, sc);
            }
        }
    }
out:
    /* Open client connections die with the process. */
    if (lfd >= 0)
        close(lfd);
    if (sfd >= 0)
        close(sfd);
    if (sv.ep >= 0)
        close(sv.ep);
    return rc;
}

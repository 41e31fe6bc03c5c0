/* ctl_http.c -- `chash ctl`'s HTTP/1.1 client: one request per
 * connection to the admin API, its answer read within one deadline, its
 * JSON parsed, a refusal printed.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "ctl_int.h"

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "chash/chash.h"
#include "util.h"

#define CTL_MAX_RESPONSE (16 * 1024 * 1024)
#define CTL_TIMEOUT_S 10

/* Split "host:port" / "[v6]:port" into <host> and <port>. 0 or -1. */
static int
split_hostport(const char *s, char *host, size_t hostlen, char *port,
               size_t portlen)
{
    const char *colon;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':' || close[2] == '\0')
            return -1;
        snprintf(host, hostlen, "%.*s", (int)(close - s - 1), s + 1);
        snprintf(port, portlen, "%s", close + 2);
        return 0;
    }
    colon = strrchr(s, ':');
    if (colon == NULL || colon == s || colon[1] == '\0')
        return -1;
    snprintf(host, hostlen, "%.*s", (int)(colon - s), s);
    snprintf(port, portlen, "%s", colon + 1);
    return 0;
}

static int
send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Find header <name> in the header block [<h>, <end>) (case-insensitive);
 * its value into <out>. */
static bool
header_value(const char *h, const char *end, const char *name, char *out,
             size_t outlen)
{
    size_t nl = strlen(name);

    while (h < end) {
        const char *eol = memchr(h, '\n', (size_t)(end - h));

        if (eol == NULL)
            eol = end;
        if ((size_t)(eol - h) > nl && strncasecmp(h, name, nl) == 0 &&
            h[nl] == ':') {
            const char *v = h + nl + 1;
            size_t vl;

            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            vl = (size_t)(eol - v);
            while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
                vl--;
            snprintf(out, outlen, "%.*s", (int)vl, v);
            return true;
        }
        h = eol + 1;
    }
    return false;
}

/* Connect to the admin API: the socket (its send and receive timeouts
 * set), or -1 after printing what failed. */
static int
http_connect(const struct ctl *c)
{
    char host[256], port[32];
    struct addrinfo hints = {0}, *ai = NULL, *a;
    struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};
    int fd = -1, rc;

    if (split_hostport(c->admin, host, sizeof(host), port, sizeof(port)) != 0) {
        cli_error(CMD, "bad --admin '%s': expected HOST:PORT", c->admin);
        return -1;
    }
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        cli_error(CMD, "cannot resolve %s: %s", c->admin, gai_strerror(rc));
        return -1;
    }
    for (a = ai; a != NULL; a = a->ai_next) {
        fd =
            socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        rc = errno;
        close(fd);
        fd = -1;
        errno = rc;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        cli_error(CMD, "cannot connect to the admin API at %s: %s", c->admin,
                  strerror(errno));
        return -1;
    }
    return fd;
}

/* Send <method> <path> with an optional JSON <body> on <fd>, Connection:
 * close. 0, or -1 after printing what failed. */
static int
http_send(const struct ctl *c, int fd, const char *method, const char *path,
          const char *body)
{
    char hdr[1024];
    size_t blen = body ? strlen(body) : 0;
    int n;

    n = snprintf(hdr, sizeof(hdr),
                 "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
                 "Accept: application/json\r\nUser-Agent: chash-ctl/%s\r\n",
                 method, path, c->admin, CHASH_VERSION_STRING);
    if (c->token != NULL)
        n += snprintf(hdr + n, sizeof(hdr) - (size_t)n,
                      "Authorization: Bearer %s\r\n", c->token);
    if (body != NULL)
        n += snprintf(hdr + n, sizeof(hdr) - (size_t)n,
                      "Content-Type: application/json\r\n"
                      "Content-Length: %zu\r\n",
                      blen);
    n += snprintf(hdr + n, sizeof(hdr) - (size_t)n, "\r\n");
    if ((size_t)n >= sizeof(hdr)) {
        cli_error(CMD, "request too long");
        return -1;
    }
    if (send_all(fd, hdr, (size_t)n) != 0 ||
        (body != NULL && send_all(fd, body, blen) != 0)) {
        cli_error(CMD, "sending to %s: %s", c->admin, strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * Read the answer on <fd> to its end into *<buf> (*<len> bytes, with room
 * for a NUL after them; NULL when nothing came), which the caller frees
 * whatever the outcome. 0, or -1 after printing what failed.
 */
static int
http_read(const struct ctl *c, int fd, char **buf, size_t *len)
{
    struct timeval tv;
    struct timespec deadline;
    size_t cap = 0;

    /* One deadline for the whole answer: SO_RCVTIMEO bounds each recv()
     * only, and a server trickling a byte every few seconds kept `chash
     * ctl` waiting for as long as it liked. */
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += CTL_TIMEOUT_S;
    for (;;) {
        ssize_t got;
        struct timespec now;
        long long left_us;

        clock_gettime(CLOCK_MONOTONIC, &now);
        left_us = (long long)(deadline.tv_sec - now.tv_sec) * 1000000 +
                  (deadline.tv_nsec - now.tv_nsec) / 1000;
        if (left_us <= 0) {
            cli_error(CMD, "reading from %s: timed out after %d s", c->admin,
                      CTL_TIMEOUT_S);
            return -1;
        }
        tv.tv_sec = (time_t)(left_us / 1000000);
        tv.tv_usec = (suseconds_t)(left_us % 1000000);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (*len + 4096 + 1 > cap) {
            char *nb;

            cap = cap ? cap * 2 : 16384;
            if (cap > CTL_MAX_RESPONSE) {
                cli_error(CMD, "answer from %s is too large", c->admin);
                return -1;
            }
            nb = realloc(*buf, cap);
            if (nb == NULL) {
                cli_error(CMD, "out of memory");
                return -1;
            }
            *buf = nb;
        }
        got = recv(fd, *buf + *len, cap - *len - 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            cli_error(CMD, "reading from %s: %s", c->admin,
                      errno == EAGAIN ? "timed out" : strerror(errno));
            return -1;
        }
        if (got == 0)
            return 0;
        *len += (size_t)got;
    }
}

/* The answer <buf> (<len> bytes, NUL-terminated) into <r>: its status
 * and its body (a copy). 0, or -1 after printing what is wrong. */
static int
http_parse(const struct ctl *c, const char *buf, size_t len,
           struct ctl_reply *r)
{
    const char *hend = strstr(buf, "\r\n\r\n"), *sp;
    char cl[32];

    if (hend == NULL || strncmp(buf, "HTTP/1.", 7) != 0)
        goto bad;
    sp = strchr(buf, ' ');
    if (sp == NULL || sp > hend)
        goto bad;
    r->status = atoi(sp + 1);
    if (r->status < 100 || r->status > 599)
        goto bad;
    if (header_value(buf, hend, "Transfer-Encoding", cl, sizeof(cl)) &&
        strcasecmp(cl, "identity") != 0) {
        cli_error(CMD, "unsupported Transfer-Encoding '%s' from %s", cl,
                  c->admin);
        return -1;
    }
    r->len = len - (size_t)(hend + 4 - buf);
    if (header_value(buf, hend, "Content-Length", cl, sizeof(cl))) {
        size_t want = strtoull(cl, NULL, 10);

        if (want > r->len) {
            cli_error(CMD, "short answer from %s (%zu of %zu bytes)", c->admin,
                      r->len, want);
            return -1;
        }
        r->len = want;
    }
    r->body = malloc(r->len + 1);
    if (r->body == NULL) {
        cli_error(CMD, "out of memory");
        return -1;
    }
    memcpy(r->body, hend + 4, r->len);
    r->body[r->len] = '\0';
    return 0;
bad:
    cli_error(CMD, "malformed HTTP answer from %s", c->admin);
    return -1;
}

int
ctl_http_request(const struct ctl *c, const char *method, const char *path,
                 const char *body, struct ctl_reply *r)
{
    char *buf = NULL;
    size_t len = 0;
    int fd, rc = -1;

    memset(r, 0, sizeof(*r));
    fd = http_connect(c);
    if (fd < 0)
        return -1;
    if (http_send(c, fd, method, path, body) != 0 ||
        http_read(c, fd, &buf, &len) != 0) {
        close(fd);
        free(buf);
        return -1;
    }
    close(fd);
    if (buf == NULL) {
        cli_error(CMD, "malformed HTTP answer from %s", c->admin);
        return -1;
    }
    buf[len] = '\0';
    rc = http_parse(c, buf, len, r);
    free(buf);
    return rc;
}

/* Percent-encode <s> for a path segment or a query value. */
void
ctl_url_escape(const char *s, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (; *s && o + 4 < outlen; s++) {
        unsigned char ch = (unsigned char)*s;

        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
            ch == '~' || ch == ':') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
}

/*
 * A refused change whose answer carries its report <j> (a pool that does
 * not move data, changed without --force): print the report under
 * <what> (<pool> as typed), then why, naming the option that applies it.
 * False when <j> is another refusal.
 */
static bool
refusal_print(const struct ctl *c, json_t *j, int status, const char *what,
              const char *pool)
{
    json_t *rep = json_object_get(j, "report");
    char head[1100];

    if (what == NULL || !json_is_true(json_object_get(rep, "force_required")))
        return false;
    if (!c->json) {
        snprintf(head, sizeof(head), "refused, nothing changed: %s", what);
        ctl_print_report(rep, head, pool);
    }
    cli_error(CMD,
              "refused: %s; nothing was changed; --force applies it "
              "anyway (HTTP %d)",
              json_string_value(json_object_get(rep, "data_warning"))
                  ? json_string_value(json_object_get(rep, "data_warning"))
                  : "the change hides keys",
              status);
    return true;
}

/*
 * ctl_call() for a change printed as <what> (<pool> as typed; NULL: as
 * ctl_call()): a refusal for want of --force prints its report first.
 */
json_t *
ctl_call_change(const struct ctl *c, const char *method, const char *path,
                json_t *body, const char *what, const char *pool,
                int *exit_code)
{
    struct ctl_reply r;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_error_t jerr;
    json_t *j;
    int rc = ctl_http_request(c, method, path, text, &r);

    free(text);
    *exit_code = CLI_EXIT_FAIL;
    if (rc != 0)
        return NULL;
    j = json_loadb(r.body, r.len, 0, &jerr);
    if (r.status < 200 || r.status > 299) {
        const char *msg =
            j ? json_string_value(json_object_get(j, "error")) : NULL;

        if (c->json && j != NULL)
            fputs(r.body, stdout);
        if (!refusal_print(c, j, r.status, what, pool))
            cli_error(CMD, "%s (HTTP %d)", msg ? msg : "request failed",
                      r.status);
        json_decref(j);
        free(r.body);
        return NULL;
    }
    if (j == NULL) {
        cli_error(CMD, "the answer is not JSON: %s", jerr.text);
        free(r.body);
        return NULL;
    }
    if (c->json)
        fputs(r.body, stdout);
    free(r.body);
    *exit_code = CLI_EXIT_OK;
    return j;
}

/*
 * Call the API and parse its JSON. On a non-2xx answer print its "error"
 * and return NULL with *<exit> = 1; on a transport failure the same.
 * With --json the body is printed as is (the caller prints nothing more).
 */
json_t *
ctl_call(const struct ctl *c, const char *method, const char *path,
         json_t *body, int *exit_code)
{
    return ctl_call_change(c, method, path, body, NULL, NULL, exit_code);
}

/*
 * <body> with "force": true when --force was given (NULL, a change
 * without a body, becomes {"force": true}); else <body> as it is: an
 * older chashd refuses the field, so it goes only when asked.
 */
json_t *
ctl_forced(const struct ctl *c, json_t *body)
{
    if (!c->force)
        return body;
    if (body == NULL)
        body = json_object();
    if (json_is_object(body))
        json_object_set_new(body, "force", json_true());
    return body;
}

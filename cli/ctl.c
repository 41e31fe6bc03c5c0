/* ctl.c -- `chash ctl`: drive a running chashd through its admin API: list
 * pools, show members, add/remove/reweight/drain members with their
 * migration report, look keys up. A tiny HTTP/1.1 client over a socket.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "util.h"

#define CMD "ctl"
#define CTL_MAX_RESPONSE (16 * 1024 * 1024)
#define CTL_TIMEOUT_S 10

static const char usage_text[] =
    "usage: chash ctl [--admin HOST:PORT] [--token T] [--json] COMMAND\n"
    "commands:\n"
    "  pools                                 list the pools\n"
    "  show POOL                             a pool's settings and members;\n"
    "                                        in the request modes (redis)\n"
    "                                        also their requests, errors,\n"
    "                                        latency and bytes\n"
    "  add POOL NAME ADDRESS [--weight W] [--force] [--dry-run]\n"
    "                                        add a member; in a migration:\n"
    "                                        copy pool --force flushes a\n"
    "                                        joining member that holds keys\n"
    "  remove POOL NAME [--now] [--dry-run]  remove a member; --now: at once,\n"
    "                                        its keys are not moved off it\n"
    "                                        (migration: copy)\n"
    "  weight POOL NAME W [--dry-run]        change a member's weight\n"
    "  reweight POOL NAME W [--dry-run]      the same as weight\n"
    "  drain POOL NAME [--dry-run]           no new keys to the member\n"
    "  up POOL NAME [--dry-run]              back in the ring\n"
    "  maint POOL NAME [--dry-run]           out of the ring, not checked\n"
    "    In a redis or memcache pool that does not move data (migration:\n"
    "    off, replicas: 1) a key whose owner changes stays on its old\n"
    "    member, out of reach: each change above (and batch, rebalance,\n"
    "    state --reset) says how much of the keyspace it hides, and is\n"
    "    refused unless given --force.\n"
    "  lookup POOL KEY [--replicas N]        the member(s) owning KEY\n"
    "  migration POOL                        the live migration of a pool:\n"
    "                                        phase, keys moved, rate, ETA,\n"
    "                                        progress per source, and the\n"
    "                                        last finished one\n"
    "  migration POOL --give-up NAME         stop waiting for a dead old\n"
    "                                        owner: its keys not moved yet\n"
    "                                        are lost\n"
    "  replication POOL                      a replicated pool: quorums,\n"
    "                                        repairs, divergences, and per\n"
    "                                        member whether it serves reads\n"
    "                                        and the keys it still misses\n"
    "  batch POOL FILE [--dry-run]           several changes as one etcd\n"
    "                                        transaction (members_from:\n"
    "                                        etcd); FILE ('-': stdin) holds\n"
    "                                        {\"changes\": [{\"op\": \"add\",\n"
    "                                        \"name\", \"address\", "
    "\"weight\"},\n"
    "                                        {\"op\": \"remove\", \"name\"},\n"
    "                                        {\"op\": \"update\", \"name\",\n"
    "                                        \"weight\", \"state\"}]}\n"
    "  rebalance POOL [--target R] [--dry-run]\n"
    "                                        weights that bring every\n"
    "                                        member's measured load within\n"
    "                                        R (default 1.2) of its share,\n"
    "                                        with the migration report of\n"
    "                                        them all; without --dry-run\n"
    "                                        applied one member at a time\n"
    "                                        (each change through slow\n"
    "                                        start or its migration)\n"
    "  hot POOL                              the pool's hottest keys\n"
    "                                        (requests/s, the member of\n"
    "                                        each) and each member's rate\n"
    "                                        against its share of the ring\n"
    "  cluster                               the chashd instances sharing\n"
    "                                        pools through etcd: whether\n"
    "                                        their rings agree, and how long\n"
    "                                        the last change took to reach\n"
    "                                        all of them\n"
    "  state                                 the runtime overrides of the\n"
    "                                        config (kept in the state file)\n"
    "  state --reset POOL [NAME] [--dry-run] drop the overrides of a pool or\n"
    "                                        of one member (back to the\n"
    "                                        config file)\n"
    "options:\n"
    "  --admin HOST:PORT  the admin API (default $CHASH_ADMIN or "
    "127.0.0.1:8404)\n"
    "  --token T          bearer token (default $CHASH_TOKEN)\n"
    "  --json             print the API's JSON instead of tables\n"
    "  --force            apply a change that leaves keys unreachable (a\n"
    "                     pool that does not move data; see above)\n"
    "Each change prints its migration report. Exit: 0 done, 1 the API or the\n"
    "connection failed (its error is printed), 2 bad arguments.\n";

struct ctl {
    const char *admin;
    const char *token;
    bool json;
    bool dry_run;
    bool have_weight;
    uint32_t weight;
    bool have_replicas;
    uint32_t replicas;
    bool reset;
    bool force;          /* "force": true: a pool that does not move data:
                            apply a change that hides keys; add in a
                            migration: copy pool: flush a joining member
                            that holds keys */
    bool now;            /* remove: ?now=true, leave at once, nothing moved */
    const char *target;  /* rebalance: the load ratio to stay under */
    const char *give_up; /* migration: the old owner to give up (ref in
                            argv), or NULL */
};

/* ---- HTTP client ------------------------------------------------------- */

struct reply {
    int status;
    char *body; /* NUL-terminated */
    size_t len;
};

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

/*
 * One request: <method> <path> with an optional JSON <body>, Connection:
 * close, the answer read to the end. 0 with <r> filled (any status), or -1
 * after printing what failed (connect, send, a malformed answer).
 */
static int
http_request(const struct ctl *c, const char *method, const char *path,
             const char *body, struct reply *r)
{
    char host[256], port[32], hdr[1024], cl[32];
    struct addrinfo hints = {0}, *ai = NULL, *a;
    struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};
    struct timespec deadline;
    char *buf = NULL, *hend, *sp;
    size_t len = 0, cap = 0, blen = body ? strlen(body) : 0;
    int fd = -1, rc, n;

    memset(r, 0, sizeof(*r));
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
        goto fail;
    }
    if (send_all(fd, hdr, (size_t)n) != 0 ||
        (body != NULL && send_all(fd, body, blen) != 0)) {
        cli_error(CMD, "sending to %s: %s", c->admin, strerror(errno));
        goto fail;
    }
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
            goto fail;
        }
        tv.tv_sec = (time_t)(left_us / 1000000);
        tv.tv_usec = (suseconds_t)(left_us % 1000000);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (len + 4096 + 1 > cap) {
            char *nb;

            cap = cap ? cap * 2 : 16384;
            if (cap > CTL_MAX_RESPONSE) {
                cli_error(CMD, "answer from %s is too large", c->admin);
                goto fail;
            }
            nb = realloc(buf, cap);
            if (nb == NULL) {
                cli_error(CMD, "out of memory");
                goto fail;
            }
            buf = nb;
        }
        got = recv(fd, buf + len, cap - len - 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            cli_error(CMD, "reading from %s: %s", c->admin,
                      errno == EAGAIN ? "timed out" : strerror(errno));
            goto fail;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    fd = -1;
    if (buf == NULL)
        goto bad;
    buf[len] = '\0';
    hend = strstr(buf, "\r\n\r\n");
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
        goto fail;
    }
    r->len = len - (size_t)(hend + 4 - buf);
    if (header_value(buf, hend, "Content-Length", cl, sizeof(cl))) {
        size_t want = strtoull(cl, NULL, 10);

        if (want > r->len) {
            cli_error(CMD, "short answer from %s (%zu of %zu bytes)", c->admin,
                      r->len, want);
            goto fail;
        }
        r->len = want;
    }
    r->body = malloc(r->len + 1);
    if (r->body == NULL) {
        cli_error(CMD, "out of memory");
        goto fail;
    }
    memcpy(r->body, hend + 4, r->len);
    r->body[r->len] = '\0';
    free(buf);
    return 0;
bad:
    cli_error(CMD, "malformed HTTP answer from %s", c->admin);
fail:
    if (fd >= 0)
        close(fd);
    free(buf);
    return -1;
}

/* Percent-encode <s> for a path segment or a query value. */
static void
url_escape(const char *s, char *out, size_t outlen)
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

static void print_report(json_t *r, const char *what, const char *pool);

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
        print_report(rep, head, pool);
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
 * call() for a change printed as <what> (<pool> as typed; NULL: as
 * call()): a refusal for want of --force prints its report first.
 */
static json_t *
call_change(const struct ctl *c, const char *method, const char *path,
            json_t *body, const char *what, const char *pool, int *exit_code)
{
    struct reply r;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_error_t jerr;
    json_t *j;
    int rc = http_request(c, method, path, text, &r);

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
static json_t *
call(const struct ctl *c, const char *method, const char *path, json_t *body,
     int *exit_code)
{
    return call_change(c, method, path, body, NULL, NULL, exit_code);
}

/*
 * <body> with "force": true when --force was given (NULL, a change
 * without a body, becomes {"force": true}); else <body> as it is: an
 * older chashd refuses the field, so it goes only when asked.
 */
static json_t *
forced(const struct ctl *c, json_t *body)
{
    if (!c->force)
        return body;
    if (body == NULL)
        body = json_object();
    if (json_is_object(body))
        json_object_set_new(body, "force", json_true());
    return body;
}

/* ---- printing ----------------------------------------------------------- */

static const char *
str(json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));

    return s ? s : "-";
}

static long long
num(json_t *j, const char *key)
{
    json_t *v = json_object_get(j, key);

    return json_is_integer(v) ? (long long)json_integer_value(v)
                              : (long long)json_number_value(v);
}

static double
real(json_t *j, const char *key)
{
    return json_number_value(json_object_get(j, key));
}

/* ---- request statistics (redis and the other request modes) ------------ */

/* Room for the latency buckets /metrics gives per member: chashd has 12
 * (src/stats.h); more are ignored rather than overrun. */
#define CTL_LATENCY_BUCKETS 32

/*
 * One member's reply latency as the Prometheus histogram
 * chashd_member_request_duration_seconds holds it: cumulative counts per
 * upper bound, in /metrics order (ascending, +Inf last).
 */
struct latency {
    double le[CTL_LATENCY_BUCKETS];    /* upper bounds, seconds */
    uint64_t cum[CTL_LATENCY_BUCKETS]; /* replies at or under le[i] */
    size_t nbuckets;
    double sum;     /* seconds, all replies */
    uint64_t count; /* replies timed */
    bool seen;      /* the member has a series at all */
};

/* Whether pool <p> serves requests (a request engine mode, not tcp) and
 * its answer carries the request counters. A tcp pool's output stays as
 * it was: its "requests" blocks are all zero and say nothing. */
static bool
serves_requests(json_t *p)
{
    return strcmp(str(p, "mode"), "tcp") != 0 &&
           json_is_object(
               json_object_get(json_object_get(p, "stats"), "requests"));
}

/*
 * Read a quoted label value at *<s> (just after its opening quote) into
 * <out>, undoing the exposition format's escapes (\\, \", \n), and move
 * *<s> past the closing quote. false on a value that does not end on
 * the line; a value longer than <outlen> is cut (it then matches no
 * name).
 */
static bool
label_value(const char **s, char *out, size_t outlen)
{
    const char *p = *s;
    size_t o = 0;

    for (; *p != '"'; p++) {
        char ch = *p;

        if (ch == '\0' || ch == '\n')
            return false;
        if (ch == '\\') {
            p++;
            if (*p == 'n')
                ch = '\n';
            else if (*p == '\\' || *p == '"')
                ch = *p;
            else
                return false;
        }
        if (o + 1 < outlen)
            out[o++] = ch;
    }
    out[o] = '\0';
    *s = p + 1;
    return true;
}

/* Skip <lit> at *<s>: true and *<s> past it when it is there. */
static bool
skip(const char **s, const char *lit)
{
    size_t n = strlen(lit);

    if (strncmp(*s, lit, n) != 0)
        return false;
    *s += n;
    return true;
}

/*
 * One line of /metrics into <lat> when it is a sample of
 * chashd_member_request_duration_seconds for pool <pool> and one of
 * <members> (<lat> indexed like <members>). Labels come in chashd's
 * order: pool, member[, le]. Any other line, or one that does not parse,
 * is passed over: that latency then shows as "-".
 */
static void
latency_line(const char *s, const char *pool, json_t *members,
             struct latency *lat)
{
    char pname[1024], mname[1024], le[64] = "";
    struct latency *l = NULL;
    bool bucket = false, sum = false;
    json_t *m;
    size_t i;
    char *end;
    double v;

    if (!skip(&s, "chashd_member_request_duration_seconds_"))
        return;
    if (skip(&s, "bucket{"))
        bucket = true;
    else if (skip(&s, "sum{"))
        sum = true;
    else if (!skip(&s, "count{"))
        return;
    if (!skip(&s, "pool=\"") || !label_value(&s, pname, sizeof(pname)) ||
        strcmp(pname, pool) != 0 || !skip(&s, ",member=\"") ||
        !label_value(&s, mname, sizeof(mname)))
        return;
    if (bucket && (!skip(&s, ",le=\"") || !label_value(&s, le, sizeof(le))))
        return;
    if (!skip(&s, "} "))
        return;
    json_array_foreach(members, i, m)
    {
        if (strcmp(str(m, "name"), mname) == 0) {
            l = &lat[i];
            break;
        }
    }
    errno = 0;
    v = strtod(s, &end);
    /* counts go into uint64_t: no NaN, no negative, nothing from 2^64 */
    if (l == NULL || end == s || errno != 0 || !(v >= 0) ||
        v >= 18446744073709551616.0)
        return;
    l->seen = true;
    if (sum) {
        l->sum = v;
    } else if (!bucket) {
        l->count = (uint64_t)v;
    } else if (l->nbuckets < CTL_LATENCY_BUCKETS) {
        /* strtod() reads "+Inf" as infinity */
        l->le[l->nbuckets] = strtod(le, NULL);
        l->cum[l->nbuckets] = (uint64_t)v;
        l->nbuckets++;
    }
}

/*
 * The latency of each of <members> (pool <pool>) from the /metrics text
 * <text> into <lat>: the admin API's JSON has no latency histogram, and
 * /metrics has it, one sample a line.
 */
static void
latency_parse(const char *text, const char *pool, json_t *members,
              struct latency *lat)
{
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        latency_line(line, pool, members, lat);
        line = nl ? nl + 1 : NULL;
    }
}

/*
 * The <q> quantile of <l> into *<out> (seconds), estimated as Prometheus'
 * histogram_quantile() does: find the bucket holding rank q * count and
 * interpolate linearly inside it (from 0 for the first bucket). 0 done;
 * 1 when the rank falls in the +Inf bucket, *<out> then being the last
 * finite bound (the quantile is above it: nothing finer is known); -1 with
 * no reply timed.
 */
static int
latency_quantile(const struct latency *l, double q, double *out)
{
    double rank, lo = 0, below = 0;

    if (!l->seen || l->nbuckets == 0 || l->cum[l->nbuckets - 1] == 0)
        return -1;
    rank = q * (double)l->cum[l->nbuckets - 1];
    for (size_t i = 0; i < l->nbuckets; i++) {
        double c = (double)l->cum[i];

        if (c >= rank && c > below) {
            if (isinf(l->le[i])) {
                *out = lo;
                return 1;
            }
            *out = lo + (l->le[i] - lo) * (rank - below) / (c - below);
            return 0;
        }
        lo = l->le[i];
        below = c;
    }
    *out = lo;
    return 1;
}

/* <s> seconds for a table cell, in the unit that keeps 2-3 digits:
 * "85us", "1.25ms", "37.5ms", "250ms", "1.50s". */
static void
duration_cell(double s, char *buf, size_t len)
{
    if (s < 1e-3)
        snprintf(buf, len, "%.0fus", s * 1e6);
    else if (s < 1e-2)
        snprintf(buf, len, "%.2fms", s * 1e3);
    else if (s < 1e-1)
        snprintf(buf, len, "%.1fms", s * 1e3);
    else if (s < 1)
        snprintf(buf, len, "%.0fms", s * 1e3);
    else
        snprintf(buf, len, "%.2fs", s);
}

/* The <q> quantile of <l> as a cell: "-" with no reply timed, ">250ms"
 * when it lies above the last finite bucket. */
static void
quantile_cell(const struct latency *l, double q, char *buf, size_t len)
{
    double v;
    int rc = latency_quantile(l, q, &v);

    if (rc < 0) {
        snprintf(buf, len, "-");
        return;
    }
    buf[0] = '>';
    duration_cell(v, rc == 1 ? buf + 1 : buf, rc == 1 ? len - 1 : len);
}

/*
 * GET /metrics and the latency histograms of <p>'s members into <lat>
 * (zeroed, one per member). On any failure <lat> stays empty, so the
 * latency columns show "-", and a note says why: the counters from the
 * JSON are still worth showing.
 */
static void
latency_fetch(const struct ctl *c, json_t *p, struct latency *lat)
{
    struct reply r;

    if (http_request(c, "GET", "/metrics", NULL, &r) != 0)
        return;
    if (r.status != 200)
        cli_error(CMD, "latency not shown: GET /metrics answered HTTP %d",
                  r.status);
    else
        latency_parse(r.body, str(p, "name"), json_object_get(p, "members"),
                      lat);
    free(r.body);
}

/* The pool's request counters, one line under its connection counters. */
static void
print_pool_requests(json_t *p)
{
    json_t *rq = json_object_get(json_object_get(p, "stats"), "requests");

    printf("  requests %lld (local %lld, refused %lld), fragments %lld, "
           "errors %lld, protocol errors %lld\n",
           num(rq, "total"), num(rq, "local"), num(rq, "refused"),
           num(rq, "fragments"), num(rq, "errors"), num(rq, "protocol_errors"));
}

/*
 * Each member's requests: how many were sent, in flight, how they failed
 * (the JSON's error_replies, timeouts, failed), reply latency, bytes to
 * and from it. <lat> is indexed like <members>.
 */
static void
print_member_requests(json_t *members, const struct latency *lat)
{
    char p50[32], p99[32], mean[32];
    json_t *m;
    size_t i;

    printf("%-20s %10s %8s %11s %8s %8s %8s %8s %8s %12s %12s\n", "MEMBER",
           "REQUESTS", "INFLIGHT", "ERR_REPLIES", "TIMEOUTS", "FAILED", "P50",
           "P99", "MEAN", "BYTES_IN", "BYTES_OUT");
    json_array_foreach(members, i, m)
    {
        json_t *rq = json_object_get(m, "requests");
        const struct latency *l = &lat[i];

        quantile_cell(l, 0.50, p50, sizeof(p50));
        quantile_cell(l, 0.99, p99, sizeof(p99));
        if (l->count > 0)
            duration_cell(l->sum / (double)l->count, mean, sizeof(mean));
        else
            snprintf(mean, sizeof(mean), "-");
        printf("%-20s %10lld %8lld %11lld %8lld %8lld %8s %8s %8s %12lld "
               "%12lld\n",
               str(m, "name"), num(rq, "total"), num(rq, "inflight"),
               num(rq, "error_replies"), num(rq, "timeouts"), num(rq, "failed"),
               p50, p99, mean, num(m, "bytes_in"), num(m, "bytes_out"));
    }
    printf("P50, P99: reply latency estimated from the histogram buckets "
           "(linear within\na bucket, as Prometheus' histogram_quantile); "
           "MEAN: exact, sum / count\n");
}

static void
print_pools(json_t *j)
{
    json_t *pools = json_object_get(j, "pools"), *p;
    size_t i;

    printf("%-16s %-6s %-22s %-10s %-10s %7s %7s  %s\n", "POOL", "MODE",
           "LISTEN", "ALGORITHM", "HASH", "MEMBERS", "ACTIVE", "CHECKSUM");
    json_array_foreach(pools, i, p)
    {
        printf("%-16s %-6s %-22s %-10s %-10s %7zu %7lld  %s\n", str(p, "name"),
               str(p, "mode"), str(p, "listen"), str(p, "algorithm"),
               str(p, "hash"), json_array_size(json_object_get(p, "members")),
               num(p, "active"), str(p, "checksum"));
    }
}

/* `chash ctl hot POOL`: the hottest keys, then every member's rate
 * against its share. */
static void
print_hot(json_t *j)
{
    json_t *k, *m;
    size_t i;

    printf("pool %s: %.0f keys/s routed (hot_keys: %s, windows of %.0f s)\n",
           str(j, "pool"), json_number_value(json_object_get(j, "keys_per_s")),
           str(j, "hot_keys"),
           json_number_value(json_object_get(j, "window_s")));
    if (json_array_size(json_object_get(j, "keys")) == 0)
        printf("no key stands out\n");
    else
        printf("%-40s %12s %8s  %s\n", "KEY", "REQUESTS/S", "SHARE", "MEMBER");
    json_array_foreach(json_object_get(j, "keys"), i, k) printf(
        "%-40s %12.1f %7.1f%%  %s\n", str(k, "key"),
        json_number_value(json_object_get(k, "rate")),
        100.0 * json_number_value(json_object_get(k, "fraction")),
        json_is_string(json_object_get(k, "member")) ? str(k, "member") : "-");
    printf("\n%-24s %12s %8s %10s\n", "MEMBER", "REQUESTS/S", "SHARE",
           "LOAD RATIO");
    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        json_t *r = json_object_get(m, "load_ratio");
        char ratio[32] = "-";

        if (json_is_number(r))
            snprintf(ratio, sizeof(ratio), "%.2f", json_number_value(r));
        printf("%-24s %12.1f %7.1f%% %10s\n", str(m, "name"),
               json_number_value(json_object_get(m, "requests_per_s")),
               100.0 * json_number_value(json_object_get(m, "share")), ratio);
    }
}

/* `chash ctl cluster`: this instance's link to etcd, then every live
 * instance, its applied revision and its checksum per pool. */
static void
print_cluster(json_t *j)
{
    json_t *e = json_object_get(j, "etcd"), *insts, *inst, *pools, *last;
    const char *pn;
    json_t *pv;
    size_t i;

    if (!json_is_object(e)) {
        printf("no pool takes its members from etcd on this instance\n");
        return;
    }
    printf("instance %s: etcd %s (%s) at %s, applied revision %lld, %lld "
           "lists, %lld reconnects\n",
           str(j, "instance"),
           json_is_true(json_object_get(e, "up")) ? "up" : "DOWN",
           str(e, "state"), str(e, "prefix"), num(e, "applied_rev"),
           num(e, "lists"), num(e, "reconnects"));
    if (json_is_string(json_object_get(e, "last_error")) &&
        !json_is_true(json_object_get(e, "up")))
        printf("  last error: %s\n", str(e, "last_error"));
    if (json_is_true(json_object_get(e, "fenced")))
        printf("  FENCED: this instance may have lost its lease; pools "
               "with migration: copy answer no key until it is back\n");
    json_array_foreach(json_object_get(e, "ignored"), i, inst)
        printf("  ignored: %s (revision %lld): %s\n", str(inst, "key"),
               num(inst, "mod_revision"), str(inst, "why"));
    insts = json_object_get(j, "instances");
    printf("%-24s %7s %10s  %-16s %s\n", "INSTANCE", "PID", "APPLIED", "POOL",
           "CHECKSUM (MEMBERS)");
    json_array_foreach(insts, i, inst)
    {
        bool first = true;
        json_object_foreach(json_object_get(inst, "pools"), pn, pv)
        {
            char who[64];
            snprintf(who, sizeof(who), "%s%s", str(inst, "instance"),
                     json_is_true(json_object_get(inst, "self")) ? " (this)"
                                                                 : "");
            if (first)
                printf("%-24s %7lld %10lld  %-16s %s (%lld)\n", who,
                       num(inst, "pid"), num(inst, "applied_rev"), pn,
                       str(pv, "checksum"), num(pv, "members"));
            else
                printf("%-24s %7s %10s  %-16s %s (%lld)\n", "", "", "", pn,
                       str(pv, "checksum"), num(pv, "members"));
            first = false;
        }
    }
    pools = json_object_get(j, "pools");
    json_object_foreach(pools, pn, pv) printf(
        "pool %s: %s over %lld instances\n", pn,
        json_is_true(json_object_get(pv, "agree")) ? "agree" : "DISAGREE",
        num(pv, "instances"));
    last = json_object_get(j, "last_change");
    if (json_is_object(last))
        printf("last change: revision %lld reached %lld of %lld instances in "
               "%.1f ms\n",
               num(last, "revision"), num(last, "reached"), num(last, "of"),
               json_number_value(json_object_get(last, "took_ms")));
}

/* Whether member <m> is leaving its pool: a removal in a `migration:
 * copy` pool keeps it, drained, until its keys have moved. The API says
 * so in the running migration's "leaving" (<leaving>, may be NULL), or
 * on the member itself. */
static bool
member_leaving(json_t *m, json_t *leaving)
{
    json_t *name;
    size_t i;

    if (json_is_true(json_object_get(m, "leaving")))
        return true;
    json_array_foreach(leaving, i, name)
    {
        if (json_is_string(name) &&
            strcmp(json_string_value(name), str(m, "name")) == 0)
            return true;
    }
    return false;
}

static void
print_members(json_t *members, json_t *leaving)
{
    json_t *m;
    size_t i;

    printf("%-20s %-22s %-9s %6s %6s %7s %9s %6s %8s\n", "MEMBER", "ADDRESS",
           "STATE", "WEIGHT", "RAMP", "ACTIVE", "TOTAL", "FAILS", "SHARE");
    json_array_foreach(members, i, m)
    {
        printf("%-20s %-22s %-9s %6lld %5.0f%% %7lld %9lld %6lld %7.3f%%\n",
               str(m, "name"), str(m, "address"),
               member_leaving(m, leaving) ? "leaving" : str(m, "state"),
               num(m, "weight"), 100 * real(m, "ramp"), num(m, "active"),
               num(m, "connections_total"), num(m, "connect_failures"),
               100 * real(m, "share"));
    }
}

/*
 * The members leaving redis pool <p> while a migration runs, from GET
 * /api/pools/{pool}/migration ("leaving"); NULL when none, or without
 * that answer (a chashd older than live migration): `show` then prints
 * the states as they are.
 */
static json_t *
leaving_fetch(const struct ctl *c, json_t *p)
{
    char pool[800], path[900];
    struct reply r;
    json_t *j, *l = NULL;

    if (strcmp(str(p, "mode"), "redis") != 0)
        return NULL;
    url_escape(str(p, "name"), pool, sizeof(pool));
    snprintf(path, sizeof(path), "/api/pools/%s/migration", pool);
    if (http_request(c, "GET", path, NULL, &r) != 0)
        return NULL;
    j = r.status == 200 ? json_loadb(r.body, r.len, 0, NULL) : NULL;
    if (json_is_true(json_object_get(j, "active")))
        l = json_incref(json_object_get(j, "leaving"));
    json_decref(j);
    free(r.body);
    return l;
}

/*
 * `show`: the pool's settings, counters and members. A pool that serves
 * requests adds its request counters and a second table of each member's
 * requests, errors, latency (from /metrics) and bytes; a tcp pool's
 * output is what it always was.
 */
static void
print_pool(const struct ctl *c, json_t *p)
{
    json_t *s = json_object_get(p, "settings"),
           *st = json_object_get(p, "stats"),
           *members = json_object_get(p, "members");
    bool requests = serves_requests(p);
    struct latency *lat = NULL;
    json_t *leaving = leaving_fetch(c, p);

    if (requests) {
        size_t n = json_array_size(members);

        lat = calloc(n ? n : 1, sizeof(*lat));
        if (lat == NULL) {
            cli_error(CMD, "out of memory");
            requests = false;
        } else {
            latency_fetch(c, p, lat);
        }
    }
    if (requests) {
        /* keys route requests: the tcp pools' client-address hashing,
         * bounded loads and per-connection counters do not apply */
        printf("pool %s: %s on %s, %s/%s\n", str(p, "name"), str(p, "mode"),
               str(p, "listen"), str(p, "algorithm"), str(p, "hash"));
        printf("  slow_start %lld ms, on_failure %s, snapshot v%lld, "
               "checksum %s\n",
               num(s, "slow_start_ms"), str(s, "on_failure"),
               num(p, "snapshot"), str(p, "checksum"));
        printf("  active %lld, accepted %lld\n", num(p, "active"),
               num(st, "accepted"));
        print_pool_requests(p);
    } else {
        printf("pool %s: %s on %s, %s/%s, hash_key %s\n", str(p, "name"),
               str(p, "mode"), str(p, "listen"), str(p, "algorithm"),
               str(p, "hash"), str(s, "hash_key"));
        printf("  balance_factor %g, slow_start %lld ms, on_failure %s, "
               "snapshot v%lld, checksum %s\n",
               real(s, "balance_factor"), num(s, "slow_start_ms"),
               str(s, "on_failure"), num(p, "snapshot"), str(p, "checksum"));
        printf("  active %lld, accepted %lld, first choice %lld, spilled "
               "%lld, failed over %lld\n",
               num(p, "active"), num(st, "accepted"), num(st, "first_choice"),
               num(st, "spilled"), num(st, "failed_over"));
    }
    printf("\n");
    print_members(members, leaving);
    if (requests) {
        printf("\n");
        print_member_requests(members, lat);
    }
    free(lat);
    json_decref(leaving);
}

/*
 * What a change means for the data of a pool with `migration: copy`
 * (redis): how many keys move (a dry run counts them: the exact moved
 * fraction times the pool's keys), the migration the change started, and
 * what a removal with --now lost. A report without these fields (a tcp
 * pool, migration off, an older chashd) prints nothing here.
 */
static void
print_data_report(json_t *r, bool dry, const char *pool)
{
    json_t *mig = json_object_get(r, "migration"),
           *lost = json_object_get(r, "lost_keys");

    if (json_is_number(json_object_get(r, "keys_to_move")) &&
        json_is_number(json_object_get(r, "keys_total")))
        printf("  %s %lld of the pool's %lld keys\n",
               dry ? "would move" : "moves", num(r, "keys_to_move"),
               num(r, "keys_total"));
    else if (json_object_get(r, "keys_to_move") != NULL)
        printf("  %s an unknown number of keys: a member did not answer "
               "DBSIZE\n",
               dry ? "would move" : "moves");
    if (json_is_object(mig) && strcmp(str(mig, "phase"), "warming") == 0)
        printf("  warm-up %lld started: a key missing on its new member is "
               "read from its old one; follow it with `chash ctl migration "
               "%s`\n",
               num(mig, "epoch"), pool);
    else if (json_is_object(mig))
        printf("  migration %lld started: %lld keys predicted to move; "
               "follow it with `chash ctl migration %s`\n",
               num(mig, "epoch"), num(mig, "keys_predicted"), pool);
    if (json_is_number(lost))
        printf("  %s at once: %lld key%s on it %s\n",
               dry ? "would leave" : "left", num(r, "lost_keys"),
               num(r, "lost_keys") == 1 ? "" : "s",
               dry                        ? "would not be moved"
               : num(r, "lost_keys") == 1 ? "was not moved"
                                          : "were not moved");
    else if (lost != NULL && json_is_null(lost))
        printf("  %s at once: its keys %s (how many is unknown: it did not "
               "answer DBSIZE)\n",
               dry ? "would leave" : "left",
               dry ? "would not be moved" : "were not moved");
    /* a pool that does not move data: what the change hides */
    if (json_is_string(json_object_get(r, "data_warning"))) {
        bool forced = json_is_true(json_object_get(r, "forced"));

        printf("  warning: %s\n", str(r, "data_warning"));
        if (dry)
            printf("  %s\n", forced ? "--force given: it would be applied"
                                    : "applying it needs --force");
        else if (json_is_true(json_object_get(r, "applied")))
            printf("  applied with --force\n");
    }
}

static void
print_report(json_t *r, const char *what, const char *pool)
{
    json_t *flows = json_object_get(r, "flows"), *f, *imm;
    bool dry = json_is_true(json_object_get(r, "dry_run"));
    size_t i;

    printf("%s%s\n", dry ? "dry run, nothing changed: " : "", what);
    /* state --reset: how many runtime overrides go */
    if (json_is_integer(json_object_get(r, "dropped"))) {
        long long n = num(r, "dropped");

        printf("  %s %lld override%s\n", dry ? "would drop" : "dropped", n,
               n == 1 ? "" : "s");
    }
    if (json_is_null(json_object_get(r, "moved"))) {
        printf("  %s\n", str(r, "note"));
        print_data_report(r, dry, pool);
        return;
    }
    printf("  moved %.4f%% of the key space at full ramp (optimal %.4f%%)%s\n",
           100 * real(r, "moved"), 100 * real(r, "optimal"),
           json_is_false(json_object_get(r, "exact")) ? ", measured" : "");
    imm = json_object_get(r, "immediate");
    if (json_is_number(imm) &&
        fabs(json_number_value(imm) - real(r, "moved")) > 1e-9)
        printf("  moves %.4f%% at once, with the slow-start ramps as they "
               "are%s\n",
               100 * json_number_value(imm),
               json_number_value(imm) < real(r, "moved")
                   ? " (the ramp brings the rest)"
                   : "");
    if (json_array_size(flows) > 0)
        printf("  %-20s    %-20s %10s\n", "FROM", "TO", "FRACTION");
    json_array_foreach(flows, i, f)
    {
        printf("  %-20s -> %-20s %9.4f%%\n", str(f, "from"), str(f, "to"),
               100 * real(f, "fraction"));
    }
    print_data_report(r, dry, pool);
    if (json_object_get(r, "warning") != NULL)
        printf("  warning: %s\n", str(r, "warning"));
}

static void
print_lookup(json_t *j)
{
    json_t *members = json_object_get(j, "members"), *m;
    size_t i;

    printf("%s", str(j, "key"));
    json_array_foreach(members, i, m)
    {
        printf("\t%s (%s, %s)", str(m, "name"), str(m, "address"),
               str(m, "state"));
    }
    printf("\n");
}

/* One override value as a table cell: null as "-", numbers and strings
 * as they are, an added member as "ADDRESS weight W STATE", a removed one
 * as "ADDRESS weight W"; anything else as compact JSON, so what a newer
 * chashd reports still shows. */
static void
state_cell(json_t *v, char *buf, size_t len)
{
    json_t *addr = json_object_get(v, "address");
    char *text;
    int n;

    if (v == NULL || json_is_null(v)) {
        snprintf(buf, len, "-");
    } else if (json_is_integer(v)) {
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    } else if (json_is_string(v)) {
        snprintf(buf, len, "%s", json_string_value(v));
    } else if (json_is_object(v) && json_is_string(addr)) {
        n = snprintf(buf, len, "%s", json_string_value(addr));
        if (n >= 0 && (size_t)n < len &&
            json_is_integer(json_object_get(v, "weight")))
            n += snprintf(buf + n, len - (size_t)n, " weight %lld",
                          num(v, "weight"));
        if (n >= 0 && (size_t)n < len &&
            json_is_string(json_object_get(v, "state")))
            snprintf(buf + n, len - (size_t)n, " %s", str(v, "state"));
    } else {
        text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, len, "%s", text ? text : "?");
        free(text);
    }
}

/* Rows in a stable order whatever order the API lists them in: by pool,
 * then member, then what. */
static int
override_cmp(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    int d = strcmp(str(x, "pool"), str(y, "pool"));

    if (d == 0)
        d = strcmp(str(x, "member"), str(y, "member"));
    if (d == 0)
        d = strcmp(str(x, "what"), str(y, "what"));
    return d;
}

/* GET /api/state's "overrides" as a table. -1 when the answer has none
 * (a chashd older than `chash ctl state`). */
static int
print_state(json_t *j)
{
    json_t *ov = json_object_get(j, "overrides");
    json_t **rows;
    size_t n = json_array_size(ov);
    char config[256], runtime[256];

    if (!json_is_array(ov)) {
        cli_error(CMD, "the answer of GET /api/state has no \"overrides\": "
                       "this chashd is older than `chash ctl state`");
        return -1;
    }
    if (n == 0) {
        printf("no runtime overrides: every pool runs as its config says\n");
    } else {
        rows = calloc(n, sizeof(*rows));
        if (rows == NULL) {
            cli_error(CMD, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            rows[i] = json_array_get(ov, i);
        qsort(rows, n, sizeof(*rows), override_cmp);
        printf("%-12s %-20s %-8s %-28s %s\n", "POOL", "MEMBER", "WHAT",
               "CONFIG", "RUNTIME");
        for (size_t i = 0; i < n; i++) {
            state_cell(json_object_get(rows[i], "config"), config,
                       sizeof(config));
            state_cell(json_object_get(rows[i], "runtime"), runtime,
                       sizeof(runtime));
            printf("%-12s %-20s %-8s %-28s %s\n", str(rows[i], "pool"),
                   str(rows[i], "member"), str(rows[i], "what"), config,
                   runtime);
        }
        free(rows);
    }
    if (json_is_null(json_object_get(j, "file")))
        printf("no state_file: the overrides are lost when chashd stops\n");
    return 0;
}

/* ---- live migration (redis pools, `migration: copy`) ------------------ */

/* Width of the text progress bar of a migration's source. */
#define CTL_BAR_WIDTH 20

/* <v> as a number when it is one (the API's nullable figures: rate, ETA,
 * progress), else false. */
static bool
number(json_t *j, const char *key, double *v)
{
    json_t *x = json_object_get(j, key);

    if (!json_is_number(x))
        return false;
    *v = json_number_value(x);
    return isfinite(*v);
}

/* <s> seconds as an operator reads a wait: "4.5s", "2m05s", "1h02m";
 * "-" when not known. */
static void
span_cell(json_t *j, const char *key, char *buf, size_t len)
{
    double s;

    if (!number(j, key, &s) || s < 0) {
        snprintf(buf, len, "-");
    } else if (s < 60) {
        snprintf(buf, len, "%.1fs", s);
    } else if (s < 3600) {
        long t = lround(s);

        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    } else {
        long t = lround(s / 60);

        snprintf(buf, len, "%ldh%02ldm", t / 60, t % 60);
    }
}

/* <n> bytes with a binary unit: "900 B", "120.6 KiB", "8.6 MiB". */
static void
bytes_cell(double n, char *buf, size_t len)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;

    if (n < 1024) {
        snprintf(buf, len, "%.0f B", n);
        return;
    }
    n /= 1024;
    while (n >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        n /= 1024;
        u++;
    }
    snprintf(buf, len, "%.1f %s", n, unit[u]);
}

/*
 * A source's progress as "[#########-----------]  45%": the part of its
 * keys (DBSIZE when it started) the copier has scanned in this pass, as
 * the API's "progress" says. A source that is done is full; one whose
 * progress is not known (null) shows an empty bar and "-". The percent is
 * rounded down, so 100% means done and never "almost".
 */
static void
progress_cell(json_t *src, char *buf, size_t len)
{
    char bar[CTL_BAR_WIDTH + 1];
    double p;
    bool known = number(src, "progress", &p);
    size_t fill;

    if (json_is_true(json_object_get(src, "done"))) {
        p = 1;
        known = true;
    }
    if (known)
        p = p < 0 ? 0 : p > 1 ? 1 : p;
    fill = known ? (size_t)floor(p * CTL_BAR_WIDTH) : 0;
    memset(bar, '#', fill);
    memset(bar + fill, '-', CTL_BAR_WIDTH - fill);
    bar[CTL_BAR_WIDTH] = '\0';
    if (known)
        snprintf(buf, len, "[%s] %3.0f%%", bar, floor(100 * p));
    else
        snprintf(buf, len, "[%s]    -", bar);
}

/* What migration <m> moved (the copier's keys and those a client request
 * moved first), against the prediction, and what went wrong: the same
 * lines for the running migration and the last finished one. */
static void
print_migration_counts(json_t *m)
{
    char bytes[32];

    bytes_cell(real(m, "bytes_moved"), bytes, sizeof(bytes));
    printf("  moved %lld of %lld predicted keys (%lld by the copier, %lld by "
           "traffic), %s\n",
           num(m, "keys_moved") + num(m, "keys_moved_by_traffic"),
           num(m, "keys_predicted"), num(m, "keys_moved"),
           num(m, "keys_moved_by_traffic"), bytes);
    printf("  anomalies %lld, failed keys %lld, errors %lld\n",
           num(m, "anomalies"), num(m, "failed_keys"), num(m, "errors"));
}

/* The sources of a running migration: one line each with its progress
 * bar, then the last error of those that have one. */
static void
print_migration_sources(json_t *sources)
{
    char bar[64];
    json_t *src;
    size_t i;

    printf("%-20s %-22s %-10s %4s %10s %10s %10s  %s\n", "SOURCE", "ADDRESS",
           "PHASE", "PASS", "DBSIZE", "SCANNED", "MOVED", "PROGRESS");
    json_array_foreach(sources, i, src)
    {
        char dbsize[32] = "-";

        /* null: the source did not answer DBSIZE when it started */
        if (json_is_number(json_object_get(src, "dbsize_at_start")))
            snprintf(dbsize, sizeof(dbsize), "%lld",
                     num(src, "dbsize_at_start"));
        progress_cell(src, bar, sizeof(bar));
        /* an old owner the operator gave up (migration --give-up): its
         * keys not moved are lost, its bar is full because it is done */
        printf("%-20s %-22s %-10s %4lld %10s %10lld %10lld  %s\n",
               str(src, "member"), str(src, "address"),
               json_is_true(json_object_get(src, "skipped"))
                   ? "given-up"
                   : str(src, "phase"),
               num(src, "pass"), dbsize, num(src, "keys_scanned"),
               num(src, "keys_moved"), bar);
    }
    json_array_foreach(sources, i, src)
    {
        if (json_is_string(json_object_get(src, "last_error")))
            printf("  %s: last error: %s\n", str(src, "member"),
                   str(src, "last_error"));
    }
}

/* The keys big enough (migration_big_key) to be moved alone. */
static void
print_big_keys(json_t *big)
{
    char bytes[32], ms[32];
    json_t *k;
    size_t i;

    if (json_array_size(big) == 0)
        return;
    printf("\nbig keys, moved one per MIGRATE:\n");
    printf("%-20s %12s %10s  %s\n", "MEMBER", "BYTES", "TIME", "KEY");
    json_array_foreach(big, i, k)
    {
        bytes_cell(real(k, "bytes"), bytes, sizeof(bytes));
        snprintf(ms, sizeof(ms), "%lldms", num(k, "ms"));
        printf("%-20s %12s %10s  %s\n", str(k, "member"), bytes, ms,
               str(k, "key"));
    }
}

/*
 * `migration POOL`: GET /api/pools/{pool}/migration for an operator. A
 * running migration shows its phase, the change that started it, keys
 * moved (by the copier and by client traffic touching a moving key first)
 * against the prediction, rate and ETA, what went wrong, a progress line
 * per source member and the big keys; then, running or not, the last
 * finished migration in one line.
 */
/*
 * A memcache pool's warm-up (`migration: warmup`): for a while after a
 * change, a key missing on its new member is read from its old one and
 * added to the new one. No copier: nothing to scan, no sources.
 */
static void
print_warmup(json_t *j)
{
    json_t *last = json_object_get(j, "last");
    char elapsed[32], left[32], span[32];

    if (!json_is_true(json_object_get(j, "active"))) {
        printf("pool %s: migration warmup, none running\n", str(j, "pool"));
    } else {
        span_cell(j, "elapsed_s", elapsed, sizeof(elapsed));
        span_cell(j, "warmup_left_s", left, sizeof(left));
        span_cell(j, "warmup_s", span, sizeof(span));
        printf("pool %s: migration warmup, epoch %lld, phase %s\n",
               str(j, "pool"), num(j, "epoch"), str(j, "phase"));
        printf("  change %s, started %s, elapsed %s, %s left of %s\n",
               str(j, "change"), str(j, "started"), elapsed, left, span);
        printf("  warmed %lld keys (missing on their new member, read from "
               "the old one and added)\n",
               num(j, "keys_moved_by_traffic"));
        printf("  failed keys %lld, errors %lld\n", num(j, "failed_keys"),
               num(j, "errors"));
        printf("\n");
    }
    if (!json_is_object(last)) {
        printf("last warm-up: none\n");
        return;
    }
    span_cell(last, "elapsed_s", elapsed, sizeof(elapsed));
    printf("last warm-up: epoch %lld, %s, started %s, %s in %s\n",
           num(last, "epoch"), str(last, "change"), str(last, "started"),
           str(last, "phase"), elapsed);
    printf("  warmed %lld keys, failed keys %lld, errors %lld\n",
           num(last, "keys_moved_by_traffic"), num(last, "failed_keys"),
           num(last, "errors"));
}

/*
 * `migration POOL`: GET /api/pools/{pool}/migration for an operator. A
 * running migration shows its phase (and stage: members that both give
 * and take keys migrate in two stages), the change that started it, keys
 * moved (by the copier and by client traffic touching a moving key
 * first) against the prediction, rate and ETA, what went wrong, a
 * progress line per source member and the big keys; then, running or
 * not, the last finished migration.
 */
static void
print_migration(json_t *j)
{
    json_t *last = json_object_get(j, "last");
    char elapsed[32], eta[32], rcell[48], stage[32] = "";
    double rate;

    if (strcmp(str(j, "migration"), "warmup") == 0) {
        print_warmup(j);
        return;
    }
    if (strcmp(str(j, "migration"), "copy") != 0) {
        printf("pool %s: migration %s: a membership change moves which "
               "member owns a key, not its data\n",
               str(j, "pool"), str(j, "migration"));
        return;
    }
    if (!json_is_true(json_object_get(j, "active"))) {
        printf("pool %s: migration copy, none running\n", str(j, "pool"));
    } else {
        span_cell(j, "elapsed_s", elapsed, sizeof(elapsed));
        span_cell(j, "eta_s", eta, sizeof(eta));
        if (json_is_integer(json_object_get(j, "stage")))
            snprintf(stage, sizeof(stage), ", stage %lld of 2",
                     num(j, "stage"));
        printf("pool %s: migration copy, epoch %lld, phase %s%s\n",
               str(j, "pool"), num(j, "epoch"), str(j, "phase"), stage);
        printf("  change %s, started %s, elapsed %s\n", str(j, "change"),
               str(j, "started"), elapsed);
        /* keys_scanned counts every pass over every source: it passes
         * the pool's keys_total once the verification passes run */
        if (number(j, "rate_keys_s", &rate))
            snprintf(rcell, sizeof(rcell), "%.0f keys/s", rate);
        else
            snprintf(rcell, sizeof(rcell), "-");
        printf("  scanned %lld keys (all passes; the pool held %lld), rate "
               "%s, ETA %s\n",
               num(j, "keys_scanned"), num(j, "keys_total"), rcell, eta);
        print_migration_counts(j);
        printf("\n");
        print_migration_sources(json_object_get(j, "sources"));
        print_big_keys(json_object_get(j, "big_keys"));
        printf("\n");
    }
    if (!json_is_object(last)) {
        printf("last migration: none\n");
        return;
    }
    span_cell(last, "elapsed_s", elapsed, sizeof(elapsed));
    printf("last migration: epoch %lld, %s, started %s, %s in %s\n",
           num(last, "epoch"), str(last, "change"), str(last, "started"),
           str(last, "phase"), elapsed);
    print_migration_counts(last);
}

/*
 * `replication POOL`: GET /api/pools/{pool}/replication for an operator:
 * the policy, whether a fill runs, the counters, then a line per member
 * (serves reads or not, keys noted for its repair).
 */
static void
print_replication(json_t *j)
{
    json_t *members = json_object_get(j, "members");
    size_t i;
    json_t *m;

    printf("replicas %lld, write_quorum %lld, read_policy %s",
           num(j, "replicas"), num(j, "write_quorum"), str(j, "read_policy"));
    if (strcmp(str(j, "read_policy"), "quorum") == 0)
        printf(", read_quorum %lld", num(j, "read_quorum"));
    printf("; repair_log %lld keys per member\n", num(j, "repair_log"));
    printf("%s; %lld fills done, %lld copies cleaned from members that left "
           "a key's set\n",
           json_is_true(json_object_get(j, "filling"))
               ? "filling: members that joined replica sets are being filled"
               : "no fill running",
           num(j, "fills"), num(j, "cleaned"));
    printf("writes refused (no quorum) %lld, acknowledged with a member "
           "missing %lld; reads refused %lld\n",
           num(j, "write_failures"), num(j, "partial_writes"),
           num(j, "read_failures"));
    printf("divergences %lld, repairs %lld, repair errors %lld, whole "
           "comparisons %lld\n\n",
           num(j, "divergences"), num(j, "repairs"), num(j, "repair_errors"),
           num(j, "full_compares"));
    printf("%-20s %-9s %12s\n", "MEMBER", "READS", "TO REPAIR");
    json_array_foreach(members, i, m)
    {
        char pending[32];

        if (json_is_true(json_object_get(m, "overflow")))
            snprintf(pending, sizeof(pending), "all (log full)");
        else
            snprintf(pending, sizeof(pending), "%lld", num(m, "pending_keys"));
        printf("%-20s %-9s %12s\n", str(m, "name"),
               json_is_true(json_object_get(m, "readable")) ? "serves"
                                                            : "repairing",
               pending);
    }
}

/* ---- commands -------------------------------------------------------------
 */

static int
need(int have, int want, const char *cmd)
{
    if (have != want)
        return cli_usage_error(CMD, usage_text,
                               "'%s' takes %d argument%s, got %d", cmd, want,
                               want == 1 ? "" : "s", have);
    return 0;
}

/* A change: <method> on <path> (which may carry a query already) with
 * <body>, report printed as <what>; <pool> (as typed) names the pool in
 * the report's hints. */
static int
change(const struct ctl *c, const char *method, const char *path, json_t *body,
       const char *what, const char *pool)
{
    char full[2700];
    int ex;
    json_t *r;

    snprintf(full, sizeof(full), "%s%s", path,
             !c->dry_run                 ? ""
             : strchr(path, '?') != NULL ? "&dry_run=1"
                                         : "?dry_run=1");
    r = call_change(c, method, full, body, what, pool, &ex);
    json_decref(body);
    if (r == NULL)
        return ex;
    if (!c->json)
        print_report(r, what, pool);
    json_decref(r);
    return CLI_EXIT_OK;
}

/* `chash ctl rebalance`: the measured load, the proposal, its report. */
static void
print_rebalance(json_t *j)
{
    json_t *m, *r = json_object_get(j, "report");
    size_t i;

    printf("pool %s: the most loaded member gets x%.2f its capacity (target "
           "x%.2f)\n",
           str(j, "pool"), json_number_value(json_object_get(j, "worst_ratio")),
           json_number_value(json_object_get(j, "target")));
    printf("%-24s %10s %12s\n", "MEMBER", "WEIGHT", "PROPOSED");
    json_array_foreach(json_object_get(j, "members"), i, m)
        printf("%-24s %10lld %12lld\n", str(m, "name"), num(m, "weight"),
               num(m, "new_weight"));
    if (json_is_number(json_object_get(j, "predicted_worst_ratio")))
        printf("predicted: the most loaded member at x%.2f its capacity "
               "(%s)\n",
               json_number_value(json_object_get(j, "predicted_worst_ratio")),
               json_is_true(json_object_get(j, "meets_target"))
                   ? "meets the target"
                   : "MISSES the target");
    printf("%s\n", str(j, "note"));
    if (json_is_object(r)) {
        printf("\n");
        print_report(r, "the proposal, all of it at once:", str(j, "pool"));
    }
}

/* Apply a rebalance proposal: one weight change per member, in turn;
 * in a pool that moves data, each waits for the migration the last one
 * started (bounded: an hour each). */
static int
rebalance_apply(const struct ctl *c, const char *pool, const char *label,
                json_t *j)
{
    json_t *m;
    size_t i;
    int ex = CLI_EXIT_OK;

    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        char name[800], path[2600], what[1024];
        long long w = num(m, "new_weight");
        json_t *r, *body;

        if (w == num(m, "weight"))
            continue;
        url_escape(str(m, "name"), name, sizeof(name));
        snprintf(path, sizeof(path), "/api/pools/%s/members/%s", pool, name);
        snprintf(what, sizeof(what), "pool %s: weight of %s -> %lld", label,
                 str(m, "name"), w);
        body = forced(c, json_pack("{s:I}", "weight", (json_int_t)w));
        r = call_change(c, "PATCH", path, body, what, label, &ex);
        json_decref(body);
        if (r == NULL)
            return ex;
        if (!c->json)
            print_report(r, what, label);
        if (json_is_object(json_object_get(r, "migration"))) {
            char mpath[2600];
            int waited = 0;

            snprintf(mpath, sizeof(mpath), "/api/pools/%s/migration", pool);
            for (;;) {
                json_t *mg = call(c, "GET", mpath, NULL, &ex);
                bool active = json_is_true(json_object_get(mg, "active"));

                json_decref(mg);
                if (mg == NULL) {
                    json_decref(r);
                    return ex;
                }
                if (!active)
                    break;
                if (++waited > 7200) {
                    fprintf(stderr,
                            "chash ctl: the migration of %s did not end in "
                            "an hour: the rest of the proposal is not "
                            "applied\n",
                            str(m, "name"));
                    json_decref(r);
                    return CLI_EXIT_FAIL;
                }
                usleep(500000);
            }
        }
        json_decref(r);
    }
    return ex;
}

/*
 * `state`: the runtime overrides; `state --reset POOL [NAME]`: drop those
 * of a pool (it returns to its config's membership) or of one member,
 * with the migration report of going back.
 */
static int
state_cmd(const struct ctl *c, char **args, int nargs)
{
    char pool[800], name[800], path[2600], what[1024];
    json_t *j;
    int ex;

    if (!c->reset) {
        if (nargs != 0)
            return cli_usage_error(CMD, usage_text,
                                   "'state' takes no argument (to drop "
                                   "overrides: state --reset POOL [NAME])");
        j = call(c, "GET", "/api/state", NULL, &ex);
        if (j != NULL && !c->json && print_state(j) != 0)
            ex = CLI_EXIT_FAIL;
        json_decref(j);
        return ex;
    }
    if (nargs < 1 || nargs > 2)
        return cli_usage_error(CMD, usage_text,
                               "'state --reset' takes POOL and an optional "
                               "NAME, got %d argument%s",
                               nargs, nargs == 1 ? "" : "s");
    url_escape(args[0], pool, sizeof(pool));
    if (nargs == 1) {
        snprintf(path, sizeof(path), "/api/state/pools/%s", pool);
        snprintf(what, sizeof(what), "pool %s: reset to its config", args[0]);
    } else {
        url_escape(args[1], name, sizeof(name));
        snprintf(path, sizeof(path), "/api/state/pools/%s/members/%s", pool,
                 name);
        snprintf(what, sizeof(what), "pool %s: reset %s to its config", args[0],
                 args[1]);
    }
    return change(c, "DELETE", path, forced(c, NULL), what, args[0]);
}

/* Whether <verb> (with --reset: <reset>) changes a pool's members. */
static bool
is_change(const char *verb, bool reset)
{
    static const char *const verbs[] = {
        "add", "remove", "weight", "reweight",  "drain",
        "up",  "maint",  "batch",  "rebalance", NULL};

    for (size_t i = 0; verbs[i] != NULL; i++)
        if (strcmp(verb, verbs[i]) == 0)
            return true;
    return strcmp(verb, "state") == 0 && reset;
}

/* After cli_parse_*() printed what is wrong: the usage, exit 2. */
static int
usage_after_error(void)
{
    fputs(usage_text, stderr);
    return CLI_EXIT_USAGE;
}

int
cmd_ctl(int argc, char **argv)
{
    static const struct option opts[] = {
        {"admin", required_argument, NULL, 'a'},
        {"token", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"weight", required_argument, NULL, 'w'},
        {"dry-run", no_argument, NULL, 'n'},
        {"replicas", required_argument, NULL, 'r'},
        {"reset", no_argument, NULL, 'R'},
        {"force", no_argument, NULL, 'f'},
        {"now", no_argument, NULL, 'N'},
        {"give-up", required_argument, NULL, 'G'},
        {"target", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct ctl c = {0};
    char pool[800], name[800], path[2600], what[1024], key[800];
    const char *verb;
    json_t *j;
    int opt, nargs, ex, rc;
    char **args;

    c.admin = getenv("CHASH_ADMIN") ? getenv("CHASH_ADMIN") : "127.0.0.1:8404";
    c.token = getenv("CHASH_TOKEN");
    if (c.token != NULL && c.token[0] == '\0')
        c.token = NULL;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":a:t:jw:nr:RfNG:T:h", opts, NULL)) !=
           -1) {
        switch (opt) {
        case 'a':
            c.admin = optarg;
            break;
        case 't':
            c.token = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'n':
            c.dry_run = true;
            break;
        case 'w':
            if (cli_parse_u32(CMD, "--weight", optarg, 0, 1000000, &c.weight) !=
                0)
                return usage_after_error();
            c.have_weight = true;
            break;
        case 'r':
            if (cli_parse_u32(CMD, "--replicas", optarg, 1, 64, &c.replicas) !=
                0)
                return usage_after_error();
            c.have_replicas = true;
            break;
        case 'R':
            c.reset = true;
            break;
        case 'f':
            c.force = true;
            break;
        case 'N':
            c.now = true;
            break;
        case 'G':
            c.give_up = optarg;
            break;
        case 'T': {
            char *end;
            double t = strtod(optarg, &end);

            if (*end != '\0' || end == optarg || !(t >= 1.0) || t > 100)
                return cli_usage_error(CMD, usage_text,
                                       "--target takes a load ratio from 1 "
                                       "to 100, not '%s'",
                                       optarg);
            c.target = optarg;
            break;
        }
        case 'h':
            fputs(usage_text, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_bad_option(CMD, usage_text, argv, opt);
        }
    }
    if (optind >= argc)
        return cli_usage_error(CMD, usage_text, "a command is needed");
    /* The token goes into a header line: a CR or LF in it would end the
     * line and write headers of its own. */
    for (const char *t = c.token; t != NULL && *t != '\0'; t++)
        if ((unsigned char)*t < ' ' || *t == 0x7f)
            return cli_usage_error(CMD, usage_text,
                                   "the token contains a control character");
    verb = argv[optind];
    args = argv + optind + 1;
    nargs = argc - optind - 1;
    if (c.have_weight && strcmp(verb, "add") != 0)
        return cli_usage_error(CMD, usage_text,
                               "--weight goes with 'add' (use 'weight POOL "
                               "NAME W' to change one)");
    if (c.have_replicas && strcmp(verb, "lookup") != 0)
        return cli_usage_error(CMD, usage_text,
                               "--replicas goes with 'lookup'");
    if (c.reset && strcmp(verb, "state") != 0)
        return cli_usage_error(CMD, usage_text,
                               "--reset goes with 'state' (state --reset "
                               "POOL [NAME])");
    if (c.force && !is_change(verb, c.reset))
        return cli_usage_error(CMD, usage_text,
                               "--force goes with a change: add, remove, "
                               "weight, drain, up, maint, batch, rebalance "
                               "or state --reset");
    if (c.give_up != NULL && strcmp(verb, "migration") != 0)
        return cli_usage_error(CMD, usage_text,
                               "--give-up goes with 'migration' (migration "
                               "POOL --give-up NAME)");
    if (c.give_up != NULL && strlen(c.give_up) > 255)
        return cli_usage_error(CMD, usage_text,
                               "--give-up's NAME is longer than 255 bytes");
    if (c.now && strcmp(verb, "remove") != 0)
        return cli_usage_error(CMD, usage_text,
                               "--now goes with 'remove' (it removes a "
                               "member without moving its keys)");
    if (c.target != NULL && strcmp(verb, "rebalance") != 0)
        return cli_usage_error(CMD, usage_text,
                               "--target goes with 'rebalance'");
    if (c.dry_run &&
        (strcmp(verb, "pools") == 0 || strcmp(verb, "show") == 0 ||
         strcmp(verb, "cluster") == 0 || strcmp(verb, "lookup") == 0 ||
         strcmp(verb, "hot") == 0 || strcmp(verb, "migration") == 0 ||
         strcmp(verb, "replication") == 0 ||
         (strcmp(verb, "state") == 0 && !c.reset)))
        return cli_usage_error(CMD, usage_text, "--dry-run goes with a change");
    for (int i = 0; i < nargs; i++)
        if (strlen(args[i]) > 255)
            return cli_usage_error(
                CMD, usage_text, "argument %d is longer than 255 bytes", i + 1);
    if (nargs >= 1)
        url_escape(args[0], pool, sizeof(pool));
    if (nargs >= 2)
        url_escape(args[1], name, sizeof(name));

    if (strcmp(verb, "pools") == 0) {
        if ((rc = need(nargs, 0, verb)) != 0)
            return rc;
        j = call(&c, "GET", "/api/pools", NULL, &ex);
        if (j != NULL && !c.json)
            print_pools(j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "cluster") == 0) {
        if ((rc = need(nargs, 0, verb)) != 0)
            return rc;
        j = call(&c, "GET", "/api/cluster", NULL, &ex);
        if (j != NULL && !c.json)
            print_cluster(j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "rebalance") == 0) {
        if ((rc = need(nargs, 1, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s/rebalance?target=%s", pool,
                 c.target ? c.target : "1.2");
        j = call(&c, "GET", path, NULL, &ex);
        if (j != NULL && !c.json)
            print_rebalance(j);
        if (j != NULL && !c.dry_run)
            ex = rebalance_apply(&c, pool, args[0], j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "hot") == 0) {
        if ((rc = need(nargs, 1, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s/hot", pool);
        j = call(&c, "GET", path, NULL, &ex);
        if (j != NULL && !c.json)
            print_hot(j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "show") == 0) {
        if ((rc = need(nargs, 1, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s", pool);
        j = call(&c, "GET", path, NULL, &ex);
        if (j != NULL && !c.json)
            print_pool(&c, j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "migration") == 0) {
        if ((rc = need(nargs, 1, verb)) != 0)
            return rc;
        if (c.give_up == NULL) {
            snprintf(path, sizeof(path), "/api/pools/%s/migration", pool);
            j = call(&c, "GET", path, NULL, &ex);
        } else {
            /* the answer is the migration as it is after giving up */
            url_escape(c.give_up, name, sizeof(name));
            snprintf(path, sizeof(path), "/api/pools/%s/migration/sources/%s",
                     pool, name);
            j = call(&c, "DELETE", path, NULL, &ex);
            if (j != NULL && !c.json)
                printf("pool %s: gave up moving keys from %s: those not "
                       "moved yet are lost; their new owners serve them\n\n",
                       args[0], c.give_up);
        }
        if (j != NULL && !c.json)
            print_migration(j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "replication") == 0) {
        if ((rc = need(nargs, 1, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s/replication", pool);
        j = call(&c, "GET", path, NULL, &ex);
        if (j != NULL && !c.json) {
            printf("pool %s: ", args[0]);
            print_replication(j);
        }
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "lookup") == 0) {
        if ((rc = need(nargs, 2, verb)) != 0)
            return rc;
        url_escape(args[1], key, sizeof(key));
        snprintf(path, sizeof(path), "/api/pools/%s/lookup?key=%s&replicas=%u",
                 pool, key, c.have_replicas ? c.replicas : 1);
        j = call(&c, "GET", path, NULL, &ex);
        if (j != NULL && !c.json)
            print_lookup(j);
        json_decref(j);
        return ex;
    }
    if (strcmp(verb, "add") == 0) {
        if ((rc = need(nargs, 3, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s/members", pool);
        snprintf(what, sizeof(what), "pool %s: add %s (%s, weight %u)", args[0],
                 args[1], args[2], c.have_weight ? c.weight : 1);
        j = json_pack("{s:s,s:s,s:i}", "name", args[1], "address", args[2],
                      "weight", (int)(c.have_weight ? c.weight : 1));
        /* JSON holds UTF-8 text only: without this the request went out
         * with no body and the API's answer did not say what was wrong. */
        if (j == NULL)
            return cli_usage_error(CMD, usage_text,
                                   "NAME and ADDRESS must be UTF-8 text");
        return change(&c, "POST", path, forced(&c, j), what, args[0]);
    }
    if (strcmp(verb, "remove") == 0) {
        if ((rc = need(nargs, 2, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s/members/%s%s", pool, name,
                 c.now ? "?now=true" : "");
        snprintf(what, sizeof(what), "pool %s: remove %s%s", args[0], args[1],
                 c.now ? " now, its keys not moved" : "");
        return change(&c, "DELETE", path, forced(&c, NULL), what, args[0]);
    }
    /* reweight: the word HAProxy and most operators use for it */
    if (strcmp(verb, "weight") == 0 || strcmp(verb, "reweight") == 0) {
        uint32_t w;

        if ((rc = need(nargs, 3, verb)) != 0)
            return rc;
        if (cli_parse_u32(CMD, "W", args[2], 0, 1000000, &w) != 0)
            return usage_after_error();
        snprintf(path, sizeof(path), "/api/pools/%s/members/%s", pool, name);
        snprintf(what, sizeof(what), "pool %s: weight of %s -> %u", args[0],
                 args[1], w);
        return change(&c, "PATCH", path,
                      forced(&c, json_pack("{s:i}", "weight", (int)w)), what,
                      args[0]);
    }
    if (strcmp(verb, "drain") == 0 || strcmp(verb, "up") == 0 ||
        strcmp(verb, "maint") == 0) {
        if ((rc = need(nargs, 2, verb)) != 0)
            return rc;
        snprintf(path, sizeof(path), "/api/pools/%s/members/%s", pool, name);
        snprintf(what, sizeof(what), "pool %s: %s %s", args[0], verb, args[1]);
        return change(&c, "PATCH", path,
                      forced(&c, json_pack("{s:s}", "state", verb)), what,
                      args[0]);
    }
    if (strcmp(verb, "state") == 0)
        return state_cmd(&c, args, nargs);
    if (strcmp(verb, "batch") == 0) {
        json_error_t jerr;
        json_t *body;

        if ((rc = need(nargs, 2, verb)) != 0)
            return rc;
        body = strcmp(args[1], "-") == 0 ? json_loadf(stdin, 0, &jerr)
                                         : json_load_file(args[1], 0, &jerr);
        if (body == NULL) {
            fprintf(stderr, "chash ctl: %s:%d: %s\n",
                    strcmp(args[1], "-") == 0 ? "stdin" : args[1], jerr.line,
                    jerr.text);
            return CLI_EXIT_USAGE;
        }
        body = forced(&c, body);
        snprintf(path, sizeof(path), "/api/pools/%s/changes", pool);
        snprintf(what, sizeof(what),
                 "pool %s: %zu changes in one etcd "
                 "transaction",
                 args[0], json_array_size(json_object_get(body, "changes")));
        return change(&c, "POST", path, body, what, args[0]);
    }
    return cli_usage_error(CMD, usage_text, "unknown command '%s'", verb);
}

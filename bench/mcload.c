/* mcload.c -- a load generator for the memcached text protocol, written for
 * bench/memcache.sh: get, set or a 10-key multi-get over many connections,
 * each with batches of -P pipelined requests, one epoll loop per thread. It
 * checks every reply (the key of each VALUE, the length and the bytes of each
 * value, STORED), measures each request from its send to its reply, and
 * prints one machine-readable line. It exits non-zero on an error reply, a
 * protocol error, a closed connection or a stall, so a broken proxy cannot
 * look fast. libc only.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

/* Keys are "key:" and 12 decimal digits, the names redis-benchmark uses, so
 * both benches read alike; a key number fits in 32 bits. */
#define KEY_LEN 16
#define MGET_KEYS 10
#define IN_SIZE 32768     /* a connection's read buffer */
#define MAX_LINE 1024     /* longer reply lines are protocol errors */
#define MAX_VALUE 1000000 /* below memcached's default 1 MB item limit */
#define EVENTS 256

/* Latency histogram, log-linear in nanoseconds: values below 2*SUB are
 * exact, above that every power of two is cut into SUB equal buckets, so a
 * bucket is at most 1/SUB = 0.8% wide relative to its value (the same idea
 * as HdrHistogram, in 40 lines). SHIFTS powers of two reach 2^47 ns, about
 * 39 hours: nothing is clamped in a bounded run. */
#define SUB_BITS 7
#define SUB (1u << SUB_BITS)
#define SHIFTS 40
#define BUCKETS (2 * SUB + SHIFTS * SUB)

enum test { TEST_GET, TEST_SET, TEST_MGET };
static const char *const test_names[] = {"get", "set", "mget"};

static struct {
    const char *host;
    const char *port;
    unsigned conns;
    unsigned pipeline;
    unsigned threads;
    enum test test;
    size_t size;
    uint32_t keyspace;
    uint64_t requests; /* 0: bounded by the duration only */
    double duration;   /* seconds of issuing; 0: by -n only */
    double timeout;    /* seconds without a reply that fail the run */
    double max_time;   /* seconds after which the run fails */
    uint64_t seed;
    bool prefill;
    bool verify;
    bool refill;
} opt = {
    .host = "127.0.0.1",
    .conns = 50,
    .pipeline = 1,
    .threads = 1,
    .test = TEST_GET,
    .size = 16,
    .keyspace = 100000,
    .timeout = 5,
    .max_time = 300,
    .seed = 1,
    .verify = true,
};

/* The run's clock marks, shared read-only by the threads. */
static uint64_t start_ns;
static uint64_t issue_end_ns; /* UINT64_MAX without a duration */
static uint64_t hard_end_ns;

/* The bytes of every value after its first KEY_LEN: a value is its key
 * (cut to the size when shorter) then this filler, so a value handed back
 * for the wrong key or cut short is caught by two memcmp()s. */
static char *filler;
/* " 0 0 <size>\r\n": the tail of every set command line. */
static char set_tail[32];
static size_t set_tail_len;

struct request {
    uint64_t sent_ns;
    uint32_t key[MGET_KEYS];
    unsigned nkeys;
    unsigned found; /* bit i: key[i] was answered by a VALUE */
};

enum parse_state {
    AT_LINE,  /* expecting a reply line */
    IN_VALUE, /* inside the data block of a VALUE */
    AT_CRLF   /* expecting the CRLF after a data block */
};

/* One client connection. Requests leave in order and memcached answers in
 * order, so the requests in flight are a FIFO (a ring of <pipeline> slots)
 * and a reply always belongs to the oldest one. <out> holds the bytes not
 * yet sent, which always belong to requests already in the FIFO, so
 * <pipeline> maximal requests bound it. */
struct conn {
    int fd;
    unsigned id;           /* 0 .. conns-1, for messages */
    struct worker *worker; /* (ref) the thread that owns the connection */
    char *in;
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap;
    bool out_wanted; /* EPOLLOUT is armed */
    struct request *fifo;
    unsigned head, pending;
    enum parse_state state;
    char value_key[KEY_LEN]; /* the key of the VALUE being read */
    size_t value_len, value_off;
};

/* One thread: its connections, its share of the requests and its counts.
 * Only the thread touches it until it is joined. */
struct worker {
    pthread_t thread;
    unsigned id;
    int epfd;
    struct conn *conns;
    unsigned nconns;
    uint64_t rng;
    uint64_t limit, issued, done;
    uint32_t next_key; /* --prefill: the next key of this thread's range */
    uint64_t hits, misses, errors;
    char first_error[160];
    uint64_t last_done_ns, progress_ns;
    uint64_t *hist;
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A fatal error: the message names what went wrong and the run ends with
 * status 2 at once, from any thread (nothing was printed on stdout yet). */
static void
die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fputs("mcload: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    _exit(2);
}

static uint64_t
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- keys and values ----------------------------------------------------- */

/* xorshift64*: fast, and good enough to spread keys uniformly. */
static uint64_t
rng_next(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* A key number uniform in [0, keyspace): the high 32 random bits scaled,
 * which has no modulo bias worth the name at these sizes. */
static uint32_t
key_random(struct worker *w)
{
    return (uint32_t)(((rng_next(&w->rng) >> 32) * opt.keyspace) >> 32);
}

static void
key_format(char *dst, uint32_t key)
{
    memcpy(dst, "key:", 4);
    for (int i = KEY_LEN - 1; i >= 4; i--) {
        dst[i] = (char)('0' + key % 10);
        key /= 10;
    }
}

/* Parses a key written by key_format(); refuses anything else. */
static bool
key_parse(const char *s, size_t len, uint32_t *key)
{
    uint64_t v = 0;

    if (len != KEY_LEN || memcmp(s, "key:", 4) != 0)
        return false;
    for (size_t i = 4; i < KEY_LEN; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX)
        return false;
    *key = (uint32_t)v;
    return true;
}

/* Checks <len> bytes of a value of key <keytext> starting at offset <off>
 * against what request_add() writes. */
static bool
value_check(const char *keytext, size_t off, const char *p, size_t len)
{
    if (off < KEY_LEN) {
        size_t n = len < KEY_LEN - off ? len : KEY_LEN - off;

        if (memcmp(p, keytext + off, n) != 0)
            return false;
        off += n;
        p += n;
        len -= n;
    }
    return len == 0 || memcmp(p, filler + off - KEY_LEN, len) == 0;
}

/* ---- the histogram ------------------------------------------------------- */

static unsigned
hist_index(uint64_t ns)
{
    unsigned msb, shift;
    uint64_t idx;

    if (ns < 2 * SUB)
        return (unsigned)ns;
    msb = 63u - (unsigned)__builtin_clzll(ns);
    shift = msb - SUB_BITS; /* >= 1: ns >> shift is in [SUB, 2*SUB) */
    idx = 2 * SUB + (uint64_t)(shift - 1) * SUB + ((ns >> shift) - SUB);
    return idx < BUCKETS ? (unsigned)idx : BUCKETS - 1;
}

/* The middle of bucket <idx>, in nanoseconds. */
static double
hist_value(unsigned idx)
{
    unsigned shift;
    uint64_t mantissa;

    if (idx < 2 * SUB)
        return idx;
    shift = (idx - 2 * SUB) / SUB + 1;
    mantissa = (idx - 2 * SUB) % SUB + SUB;
    return (double)(mantissa << shift) + (double)(1ull << shift) / 2;
}

/* The value at quantile <q> of <total> samples: the bucket holding the
 * ceil(q * total)-th smallest. */
static double
hist_quantile(const uint64_t *hist, uint64_t total, double q)
{
    uint64_t rank = (uint64_t)(q * (double)total + 0.999999);
    uint64_t seen = 0;

    if (rank == 0)
        rank = 1;
    for (unsigned i = 0; i < BUCKETS; i++) {
        seen += hist[i];
        if (seen >= rank)
            return hist_value(i);
    }
    return 0;
}

/* ---- requests ------------------------------------------------------------ */

static bool
can_issue(const struct worker *w, uint64_t now)
{
    return w->issued < w->limit && now < issue_end_ns;
}

static char *
out_put(char *p, const void *src, size_t len)
{
    memcpy(p, src, len);
    return p + len;
}

/* Appends one request to <c>'s FIFO and its bytes to <c>'s output. The
 * caller has checked that the FIFO has a free slot. */
static void
request_add(struct conn *c, uint64_t now)
{
    struct worker *w = c->worker;
    struct request *rq = &c->fifo[(c->head + c->pending) % opt.pipeline];
    char *p = c->out + c->out_len;
    char key[KEY_LEN];

    rq->sent_ns = now;
    rq->found = 0;
    rq->nkeys = opt.test == TEST_MGET ? MGET_KEYS : 1;
    for (unsigned i = 0; i < rq->nkeys; i++)
        rq->key[i] = opt.prefill ? w->next_key++ : key_random(w);

    if (opt.test == TEST_SET) {
        key_format(key, rq->key[0]);
        p = out_put(p, "set ", 4);
        p = out_put(p, key, KEY_LEN);
        p = out_put(p, set_tail, set_tail_len);
        p = out_put(p, key, opt.size < KEY_LEN ? opt.size : KEY_LEN);
        if (opt.size > KEY_LEN)
            p = out_put(p, filler, opt.size - KEY_LEN);
    } else {
        p = out_put(p, "get", 3);
        for (unsigned i = 0; i < rq->nkeys; i++) {
            *p++ = ' ';
            key_format(p, rq->key[i]);
            p += KEY_LEN;
        }
    }
    p = out_put(p, "\r\n", 2);
    c->out_len = (size_t)(p - c->out);
    if (c->out_len > c->out_cap)
        die("internal: output of connection %u overflows", c->id);
    c->pending++;
    w->issued++;
}

static void
conn_want_out(struct conn *c, bool on)
{
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0u),
                             .data.ptr = c};

    if (c->out_wanted == on)
        return;
    if (epoll_ctl(c->worker->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        die("epoll_ctl: %s", strerror(errno));
    c->out_wanted = on;
}

static void
conn_flush(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL);

        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            conn_want_out(c, true);
            return;
        } else if (errno != EINTR) {
            die("connection %u: send: %s", c->id, strerror(errno));
        }
    }
    c->out_off = c->out_len = 0;
    conn_want_out(c, false);
}

/* Gives <c> its next requests while the run still issues, and sends what
 * it can. By default <c> gets a batch of <pipeline> requests, written
 * together, once every reply of the previous batch is in: redis-benchmark's
 * -P, so bench/redis.sh and bench/memcache.sh mean the same by -P 16. With
 * --refill every reply makes room for one new request at once, keeping
 * <pipeline> in flight (memtier_benchmark's --pipeline); a server that
 * answers a batch in pieces then gets its requests in pieces too. */
static void
conn_fill(struct conn *c)
{
    uint64_t now = now_ns();

    if (c->pending >= (opt.refill ? opt.pipeline : 1) ||
        !can_issue(c->worker, now))
        return;
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    while (c->pending < opt.pipeline && can_issue(c->worker, now))
        request_add(c, now);
    conn_flush(c);
}

/* ---- replies ------------------------------------------------------------- */

static void
request_done(struct conn *c, uint64_t now)
{
    struct worker *w = c->worker;
    struct request *rq = &c->fifo[c->head];

    w->hist[hist_index(now - rq->sent_ns)]++;
    c->head = (c->head + 1) % opt.pipeline;
    c->pending--;
    w->done++;
    w->last_done_ns = now;
}

/* "VALUE <key> <flags> <bytes>[ <cas>]": the key must be one the oldest
 * request asked for and not yet answered (a multi-get may name a key twice,
 * and then gets it twice); with verification the length must be -d. */
static void
value_start(struct conn *c, const char *line, size_t len)
{
    struct request *rq = &c->fifo[c->head];
    const char *p = line + 6, *end = line + len, *tok;
    uint64_t bytes = 0;
    uint32_t key;
    unsigned i;

    tok = p;
    while (p < end && *p != ' ')
        p++;
    if (!key_parse(tok, (size_t)(p - tok), &key))
        die("connection %u: bad key in '%.*s'", c->id, (int)len, line);
    for (i = 0; i < rq->nkeys; i++)
        if (rq->key[i] == key && !(rq->found & (1u << i)))
            break;
    if (i == rq->nkeys)
        die("connection %u: '%.*s' answers a key the request did not ask "
            "for, or answers it twice",
            c->id, (int)len, line);
    rq->found |= 1u << i;
    memcpy(c->value_key, tok, KEY_LEN);

    /* the flags, then the length */
    if (p == end || *p++ != ' ')
        die("connection %u: no flags in '%.*s'", c->id, (int)len, line);
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    if (p == end || *p++ != ' ' || p == end || *p < '0' || *p > '9')
        die("connection %u: no length in '%.*s'", c->id, (int)len, line);
    while (p < end && *p >= '0' && *p <= '9' && bytes <= MAX_VALUE)
        bytes = bytes * 10 + (uint64_t)(*p++ - '0');
    if (bytes > MAX_VALUE || (p < end && *p != ' '))
        die("connection %u: bad length in '%.*s'", c->id, (int)len, line);
    if (opt.verify && bytes != opt.size)
        die("connection %u: %.*s has %" PRIu64 " bytes, not -d %zu (values "
            "of another size in the keyspace: flush it, or --no-verify)",
            c->id, KEY_LEN, c->value_key, bytes, opt.size);
    c->value_len = (size_t)bytes;
    c->value_off = 0;
    c->state = bytes > 0 ? IN_VALUE : AT_CRLF;
    c->worker->hits++;
}

static bool
line_is(const char *line, size_t len, const char *word)
{
    size_t n = strlen(word);

    return len == n && memcmp(line, word, n) == 0;
}

static bool
line_starts(const char *line, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);

    return len >= n && memcmp(line, prefix, n) == 0;
}

/* One reply line (without its CRLF) for the oldest request of <c>. */
static void
reply_line(struct conn *c, const char *line, size_t len, uint64_t now)
{
    struct worker *w = c->worker;
    struct request *rq;

    if (c->pending == 0)
        die("connection %u: reply '%.*s' to no request", c->id, (int)len, line);
    rq = &c->fifo[c->head];
    if (opt.test != TEST_SET && line_starts(line, len, "VALUE ")) {
        value_start(c, line, len);
        return;
    }
    if (opt.test != TEST_SET && line_is(line, len, "END")) {
        w->misses += rq->nkeys - (unsigned)__builtin_popcount(rq->found);
        request_done(c, now);
        return;
    }
    if (opt.test == TEST_SET && line_is(line, len, "STORED")) {
        request_done(c, now);
        return;
    }
    /* An error reply ends its request (memcached and the proxies go on
     * with the next one); the run goes on and fails at its end. */
    if (line_is(line, len, "ERROR") || line_starts(line, len, "ERROR ") ||
        line_starts(line, len, "CLIENT_ERROR") ||
        line_starts(line, len, "SERVER_ERROR")) {
        if (w->errors++ == 0)
            snprintf(w->first_error, sizeof(w->first_error),
                     "connection %u: %s: %.*s", c->id, test_names[opt.test],
                     (int)(len < 100 ? len : 100), line);
        request_done(c, now);
        return;
    }
    die("connection %u: unexpected reply '%.*s' to %s", c->id,
        (int)(len < 100 ? len : 100), line, test_names[opt.test]);
}

/* Consumes the complete replies in <c>'s input; keeps a partial line for
 * the next read. Value bytes are checked as they stream by, so a value
 * need not fit in the buffer. */
static void
conn_parse(struct conn *c, uint64_t now)
{
    size_t pos = 0;

    while (pos < c->in_len) {
        const char *p = c->in + pos, *nl;
        size_t avail = c->in_len - pos, n;

        if (c->state == IN_VALUE) {
            n = c->value_len - c->value_off;
            n = n < avail ? n : avail;
            if (opt.verify && !value_check(c->value_key, c->value_off, p, n))
                die("connection %u: the value of %.*s is not the one "
                    "written",
                    c->id, KEY_LEN, c->value_key);
            c->value_off += n;
            pos += n;
            if (c->value_off == c->value_len)
                c->state = AT_CRLF;
            continue;
        }
        if (c->state == AT_CRLF) {
            if (avail < 2)
                break;
            if (p[0] != '\r' || p[1] != '\n')
                die("connection %u: no CRLF after the value of %.*s", c->id,
                    KEY_LEN, c->value_key);
            pos += 2;
            c->state = AT_LINE;
            continue;
        }
        nl = memchr(p, '\n', avail);
        if (nl == NULL) {
            if (avail > MAX_LINE)
                die("connection %u: a reply line longer than %d bytes", c->id,
                    MAX_LINE);
            break;
        }
        n = (size_t)(nl - p);
        if (n == 0 || p[n - 1] != '\r')
            die("connection %u: a reply line without CRLF: '%.*s'", c->id,
                (int)(n < 100 ? n : 100), p);
        reply_line(c, p, n - 1, now);
        pos += n + 1;
    }
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
}

static void
conn_read(struct conn *c)
{
    for (;;) {
        size_t room = IN_SIZE - c->in_len;
        ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);

        if (n > 0) {
            c->in_len += (size_t)n;
            conn_parse(c, now_ns());
            c->worker->progress_ns = now_ns();
            if ((size_t)n < room)
                break;
        } else if (n == 0) {
            die("connection %u: closed by the server with %u requests in "
                "flight",
                c->id, c->pending);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
        } else if (errno != EINTR) {
            die("connection %u: recv: %s", c->id, strerror(errno));
        }
    }
    conn_fill(c);
}

/* ---- the threads --------------------------------------------------------- */

static void *
worker_run(void *arg)
{
    struct worker *w = arg;
    struct epoll_event ev[EVENTS];

    w->progress_ns = now_ns();
    for (unsigned i = 0; i < w->nconns; i++)
        conn_fill(&w->conns[i]);
    for (;;) {
        uint64_t now = now_ns();
        int n;

        if (w->done == w->issued && !can_issue(w, now))
            break;
        if (now > hard_end_ns)
            die("the run did not end within --max-time %g s (%" PRIu64
                " of %" PRIu64 " requests done)",
                opt.max_time, w->done, w->limit);
        if (now - w->progress_ns > (uint64_t)(opt.timeout * 1e9))
            die("no reply for %g s (--timeout) with %" PRIu64
                " requests in flight",
                opt.timeout, w->issued - w->done);
        n = epoll_wait(w->epfd, ev, EVENTS, 100);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            struct conn *c = ev[i].data.ptr;

            if (ev[i].events & EPOLLOUT)
                conn_flush(c);
            if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_read(c);
        }
    }
    return NULL;
}

static void
conn_open(struct conn *c, const struct addrinfo *ai)
{
    struct timeval tv = {.tv_sec = 5};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    int one = 1;

    c->fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (c->fd < 0)
        die("socket: %s", strerror(errno));
    /* a blocking connect bounded by SO_SNDTIMEO, then non-blocking */
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) != 0)
        die("connection %u: connect to %s:%s: %s", c->id, opt.host, opt.port,
            strerror(errno));
    if (fcntl(c->fd, F_SETFL, O_NONBLOCK) != 0)
        die("fcntl: %s", strerror(errno));
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (epoll_ctl(c->worker->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        die("epoll_ctl: %s", strerror(errno));
}

/* ---- options ------------------------------------------------------------- */

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: mcload -p PORT [options]\n"
            "  -h, --host HOST      server (default 127.0.0.1)\n"
            "  -p, --port PORT      server port (required)\n"
            "  -t, --test TEST      get | set | mget (get of %d random keys); "
            "default get\n"
            "  -c, --conns N        connections (default 50)\n"
            "  -P, --pipeline N     requests per connection written "
            "together; the next\n"
            "                       batch once all replies are in "
            "(default 1)\n"
            "  --refill             with -P: a new request for every "
            "reply, keeping N in flight\n"
            "  -T, --threads N      threads, each with its share of the "
            "connections (default 1)\n"
            "  -d, --size N         value bytes (default 16)\n"
            "  -r, --keyspace N     keys key:000000000000 .. N-1 "
            "(default 100000)\n"
            "  -n, --requests N     requests in all (default 100000 when no "
            "-D)\n"
            "  -D, --duration S     stop issuing after S seconds\n"
            "  --prefill            set every key of the keyspace once, then "
            "exit\n"
            "  --seed N             random seed (default 1)\n"
            "  --timeout S          fail after S seconds without a reply "
            "(default 5)\n"
            "  --max-time S         fail a run longer than S seconds "
            "(default 300)\n"
            "  --no-verify          do not check value lengths and bytes\n"
            "prints: test= conns= pipeline= size= requests= secs= rps= "
            "p50_ms= p99_ms= p999_ms=\n"
            "        max_ms= mean_ms= hits= misses= errors=\n"
            "exit: 0 ok, 1 error replies, 2 failure (usage, connect, protocol, "
            "closed connection, stall)\n",
            MGET_KEYS);
}

static uint64_t
parse_uint(const char *what, const char *s, uint64_t min, uint64_t max)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min ||
        v > max)
        die("%s: '%s' is not a whole number in [%" PRIu64 ", %" PRIu64 "]",
            what, s, min, max);
    return v;
}

static double
parse_seconds(const char *what, const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > 86400)
        die("%s: '%s' is not a number of seconds in (0, 86400]", what, s);
    return v;
}

static void
parse_options(int argc, char **argv)
{
    enum {
        O_PREFILL = 256,
        O_SEED,
        O_TIMEOUT,
        O_MAX_TIME,
        O_NO_VERIFY,
        O_REFILL
    };
    static const struct option longs[] = {
        {"host", required_argument, NULL, 'h'},
        {"port", required_argument, NULL, 'p'},
        {"test", required_argument, NULL, 't'},
        {"conns", required_argument, NULL, 'c'},
        {"pipeline", required_argument, NULL, 'P'},
        {"threads", required_argument, NULL, 'T'},
        {"size", required_argument, NULL, 'd'},
        {"keyspace", required_argument, NULL, 'r'},
        {"requests", required_argument, NULL, 'n'},
        {"duration", required_argument, NULL, 'D'},
        {"prefill", no_argument, NULL, O_PREFILL},
        {"seed", required_argument, NULL, O_SEED},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"max-time", required_argument, NULL, O_MAX_TIME},
        {"no-verify", no_argument, NULL, O_NO_VERIFY},
        {"refill", no_argument, NULL, O_REFILL},
        {"help", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    int o;

    while ((o = getopt_long(argc, argv, "h:p:t:c:P:T:d:r:n:D:", longs, NULL)) !=
           -1) {
        switch (o) {
        case 'h':
            opt.host = optarg;
            break;
        case 'p':
            parse_uint("-p", optarg, 1, 65535);
            opt.port = optarg;
            break;
        case 't':
            if (strcmp(optarg, "get") == 0)
                opt.test = TEST_GET;
            else if (strcmp(optarg, "set") == 0)
                opt.test = TEST_SET;
            else if (strcmp(optarg, "mget") == 0)
                opt.test = TEST_MGET;
            else
                die("-t: '%s' is not one of get, set, mget", optarg);
            break;
        case 'c':
            opt.conns = (unsigned)parse_uint("-c", optarg, 1, 60000);
            break;
        case 'P':
            opt.pipeline = (unsigned)parse_uint("-P", optarg, 1, 4096);
            break;
        case 'T':
            opt.threads = (unsigned)parse_uint("-T", optarg, 1, 256);
            break;
        case 'd':
            opt.size = parse_uint("-d", optarg, 0, MAX_VALUE);
            break;
        case 'r':
            opt.keyspace = (uint32_t)parse_uint("-r", optarg, 1, UINT32_MAX);
            break;
        case 'n':
            opt.requests = parse_uint("-n", optarg, 1, UINT64_MAX / 2);
            break;
        case 'D':
            opt.duration = parse_seconds("-D", optarg);
            break;
        case O_PREFILL:
            opt.prefill = true;
            break;
        case O_SEED:
            opt.seed = parse_uint("--seed", optarg, 0, UINT64_MAX);
            break;
        case O_TIMEOUT:
            opt.timeout = parse_seconds("--timeout", optarg);
            break;
        case O_MAX_TIME:
            opt.max_time = parse_seconds("--max-time", optarg);
            break;
        case O_NO_VERIFY:
            opt.verify = false;
            break;
        case O_REFILL:
            opt.refill = true;
            break;
        case 'H':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc)
        die("unexpected argument '%s' (see --help)", argv[optind]);
    if (opt.port == NULL)
        die("-p PORT is required (see --help)");
    if (opt.threads > opt.conns)
        die("-T %u is more than -c %u: a thread needs a connection",
            opt.threads, opt.conns);
    if (opt.prefill) {
        if (opt.requests || opt.duration > 0 || opt.test != TEST_GET)
            die("--prefill sets each key once: -t, -n and -D do not apply");
        opt.test = TEST_SET;
        opt.requests = opt.keyspace;
    } else if (opt.requests == 0 && opt.duration == 0) {
        opt.requests = 100000;
    }
}

/* Raises the soft descriptor limit to the hard one when the connections
 * need it; refuses to start when even that is too low. */
static void
fd_limit(void)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)opt.conns + opt.threads + 16;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        die("-c %u needs %lu descriptors; the limit is %lu", opt.conns,
            (unsigned long)need, (unsigned long)rl.rlim_max);
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("setrlimit(RLIMIT_NOFILE, %lu): %s", (unsigned long)need,
            strerror(errno));
}

/* ---- main ---------------------------------------------------------------- */

static void
setup(struct worker *ws, const struct addrinfo *ai)
{
    /* the longest request: a set line with its value, or a multi-get */
    size_t max_req = 4 + KEY_LEN + 32 + opt.size + 2;
    size_t mget_len = 3 + MGET_KEYS * (1 + KEY_LEN) + 2;
    unsigned next_conn = 0;
    uint32_t next_key = 0;

    if (max_req < mget_len)
        max_req = mget_len;
    for (unsigned t = 0; t < opt.threads; t++) {
        struct worker *w = &ws[t];
        uint64_t share =
            opt.requests / opt.threads + (t < opt.requests % opt.threads);

        w->id = t;
        w->nconns = opt.conns / opt.threads + (t < opt.conns % opt.threads);
        /* splitmix64 of seed and thread: distinct, never zero streams */
        w->rng = (opt.seed + t + 1) * 0x9E3779B97F4A7C15ull;
        w->rng = (w->rng ^ (w->rng >> 31)) * 0xBF58476D1CE4E5B9ull;
        w->rng = (w->rng ^ (w->rng >> 27)) | 1;
        w->limit = opt.requests ? share : UINT64_MAX;
        w->next_key = next_key; /* --prefill: keys [next_key, +share) */
        next_key += (uint32_t)share;
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->hist = calloc(BUCKETS, sizeof(*w->hist));
        w->conns = calloc(w->nconns, sizeof(*w->conns));
        if (w->epfd < 0 || w->hist == NULL || w->conns == NULL)
            die("out of memory or descriptors for thread %u", t);
        for (unsigned i = 0; i < w->nconns; i++) {
            struct conn *c = &w->conns[i];

            c->id = next_conn++;
            c->worker = w;
            c->out_cap = max_req * opt.pipeline;
            c->in = malloc(IN_SIZE);
            c->out = malloc(c->out_cap);
            c->fifo = calloc(opt.pipeline, sizeof(*c->fifo));
            if (c->in == NULL || c->out == NULL || c->fifo == NULL)
                die("out of memory for connection %u", c->id);
            conn_open(c, ai);
        }
    }
}

int
main(int argc, char **argv)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    struct worker *ws;
    uint64_t hist[BUCKETS] = {0};
    uint64_t done = 0, hits = 0, misses = 0, errors = 0, end = 0;
    uint64_t sum_ns_est = 0;
    const char *first_error = NULL;
    double secs;
    int rc;

    parse_options(argc, argv);
    fd_limit();
    rc = getaddrinfo(opt.host, opt.port, &hints, &ai);
    if (rc != 0)
        die("%s:%s: %s", opt.host, opt.port, gai_strerror(rc));
    filler = malloc(opt.size + 1);
    if (filler == NULL)
        die("out of memory");
    for (size_t i = 0; i < opt.size; i++)
        filler[i] = (char)('a' + i % 26);
    set_tail_len =
        (size_t)snprintf(set_tail, sizeof(set_tail), " 0 0 %zu\r\n", opt.size);

    ws = calloc(opt.threads, sizeof(*ws));
    if (ws == NULL)
        die("out of memory");
    setup(ws, ai);
    freeaddrinfo(ai);

    start_ns = now_ns();
    issue_end_ns = opt.duration > 0 ? start_ns + (uint64_t)(opt.duration * 1e9)
                                    : UINT64_MAX;
    hard_end_ns = start_ns + (uint64_t)(opt.max_time * 1e9);
    for (unsigned t = 0; t < opt.threads; t++) {
        rc = pthread_create(&ws[t].thread, NULL, worker_run, &ws[t]);
        if (rc != 0)
            die("pthread_create: %s", strerror(rc));
    }
    for (unsigned t = 0; t < opt.threads; t++) {
        struct worker *w = &ws[t];

        pthread_join(w->thread, NULL);
        done += w->done;
        hits += w->hits;
        misses += w->misses;
        errors += w->errors;
        if (w->last_done_ns > end)
            end = w->last_done_ns;
        if (w->errors && first_error == NULL)
            first_error = w->first_error;
        for (unsigned i = 0; i < BUCKETS; i++)
            hist[i] += w->hist[i];
    }
    for (unsigned i = 0; i < BUCKETS; i++)
        sum_ns_est += hist[i] * (uint64_t)hist_value(i);
    if (done == 0)
        die("no request was answered");
    secs = (double)(end - start_ns) / 1e9;
    printf("test=%s conns=%u pipeline=%u size=%zu requests=%" PRIu64
           " secs=%.3f rps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f "
           "max_ms=%.3f mean_ms=%.3f hits=%" PRIu64 " misses=%" PRIu64
           " errors=%" PRIu64 "\n",
           opt.prefill ? "prefill" : test_names[opt.test], opt.conns,
           opt.pipeline, opt.size, done, secs, (double)done / secs,
           hist_quantile(hist, done, 0.50) / 1e6,
           hist_quantile(hist, done, 0.99) / 1e6,
           hist_quantile(hist, done, 0.999) / 1e6,
           hist_quantile(hist, done, 1.0) / 1e6,
           (double)sum_ns_est / (double)done / 1e6, hits, misses, errors);
    fflush(stdout);
    if (errors) {
        fprintf(stderr, "mcload: %" PRIu64 " error replies; the first: %s\n",
                errors, first_error);
        return 1;
    }
    return 0;
}

/* memcache.c -- the memcached text and meta protocols (see memcache.h).
 *
 * A request is one line of words separated by spaces (memcached splits on
 * ' ' only), ended by "\n" or "\r\n"; a storage command (set, ms ...) is
 * followed by its value and "\r\n". The parser checks what memcached
 * checks before it reads a value -- the word count, the key's length, the
 * numbers -- and answers those mistakes itself, exactly as memcached
 * would (and, as memcached, without reading the value: the client's next
 * line is then taken as a command). A request that passes goes to a
 * member whole, so a member always answers it with exactly one reply and
 * its connection stays in step. What only the member can judge (meta
 * flags) it judges; memcached then swallows the value itself. A member's
 * reply is checked as far as memcached's replies allow: a line that is
 * none of them, or not one the request can have (a number for a delete),
 * is malformed, and the connection that carried it is closed -- never a
 * client's reply.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "proto/memcache.h"

#include <string.h>

#include "conf/conf.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* More words than this in an ms line: memcached refuses it without
 * reading its value ("options flags too long"). */
#define MS_WORDS_MAX 19

static const char E_ERROR[] = "ERROR";
static const char E_FORMAT[] = "CLIENT_ERROR bad command line format";
static const char E_CHUNK[] = "CLIENT_ERROR bad data chunk";
static const char E_LARGE[] = "SERVER_ERROR object too large for cache";
static const char E_FLAGS[] = "CLIENT_ERROR options flags too long";
static const char E_LINE[] = "CLIENT_ERROR line too long";
static const char E_BINARY[] =
    "CLIENT_ERROR the binary protocol is not supported by chashd: use the "
    "text or meta protocol";

/* clang-format off */
#define C(name, command) {name, sizeof(name) - 1, command}
/* clang-format on */
static const struct {
    const char *name;
    size_t len;
    int command;
} commands[] = {
    C("get", MC_GET),
    C("gets", MC_GETS),
    C("gat", MC_GAT),
    C("gats", MC_GATS),
    C("set", MC_SET),
    C("add", MC_ADD),
    C("replace", MC_REPLACE),
    C("append", MC_APPEND),
    C("prepend", MC_PREPEND),
    C("cas", MC_CAS),
    C("delete", MC_DELETE),
    C("incr", MC_INCR),
    C("decr", MC_DECR),
    C("touch", MC_TOUCH),
    C("mg", MC_MG),
    C("ms", MC_MS),
    C("md", MC_MD),
    C("ma", MC_MA),
    C("me", MC_ME),
    C("mn", MC_MN),
    C("version", MC_VERSION),
    C("verbosity", MC_VERBOSITY),
    C("stats", MC_STATS),
    C("flush_all", MC_FLUSH_ALL),
    C("quit", MC_QUIT),
    /* a member's own administration: not proxied */
    C("shutdown", MC_MEMBER_ADMIN),
    C("cache_memlimit", MC_MEMBER_ADMIN),
    C("slabs", MC_MEMBER_ADMIN),
    C("lru", MC_MEMBER_ADMIN),
    C("lru_crawler", MC_MEMBER_ADMIN),
    C("watch", MC_MEMBER_ADMIN),
    C("extstore", MC_MEMBER_ADMIN),
};
#undef C

bool
mc_is_meta(int command)
{
    return command >= MC_MG && command <= MC_MN;
}

bool
mc_is_retrieval(int command)
{
    return command >= MC_GET && command <= MC_GATS;
}

static int
command_find(const char *s, size_t n)
{
    for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
        if (strlen(commands[i].name) == n &&
            memcmp(commands[i].name, s, n) == 0)
            return commands[i].command;
    return -1;
}

static bool
word_is(const char *buf, const struct proto_span *w, const char *text)
{
    size_t n = strlen(text);

    return w->len == n && memcmp(buf + w->off, text, n) == 0;
}

/*
 * The number in word <w>, as memcached's strtoul-based checks take it:
 * an optional sign (<sign_ok>: '-' allowed; '+' always), then digits only.
 * Returns 0 with *<v> (its magnitude) and *<neg>, or -1.
 */
static int
word_number(const char *buf, const struct proto_span *w, bool sign_ok,
            uint64_t *v, bool *neg)
{
    const char *s = buf + w->off;
    size_t i = 0, n = w->len;

    *v = 0;
    *neg = false;
    if (n > 0 && (s[0] == '+' || (sign_ok && s[0] == '-'))) {
        *neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return -1;
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || *v > (UINT64_MAX - d) / 10)
            return -1;
        *v = *v * 10 + d;
    }
    return 0;
}

static int
invalid(struct proto_request *rq, size_t head, const char *err)
{
    rq->head = head;
    rq->err = err;
    return PROTO_INVALID;
}

/* Answered by chashd without a member, consuming <head> bytes, then
 * dropping <body> more (a value memcached would read and drop). */
static int
refused(struct proto_request *rq, size_t head, uint64_t body, const char *err)
{
    rq->head = head;
    rq->body = body;
    rq->flags |= PROTO_REQ_REFUSED;
    rq->err = err;
    return PROTO_OK;
}

/* A mistake found after memcached has seen noreply: it says nothing
 * (PROTO_REQ_NOREPLY with PROTO_REQ_REFUSED), else <err>. */
static int
mistake(struct proto_request *rq, size_t head, const char *err)
{
    if (rq->flags & PROTO_REQ_NOREPLY)
        return refused(rq, head, 0, err);
    return invalid(rq, head, err);
}

/* Whether the line at <buf> may be long: a retrieval of many keys. */
static bool
long_line_ok(const char *buf, size_t len)
{
    static const char *const ok[] = {"get ", "gets ", "gat ", "gats "};

    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        size_t n = strlen(ok[i]);
        if (len >= n && memcmp(buf, ok[i], n) == 0)
            return true;
    }
    return false;
}

/* A storage command's value: <line> bytes of line, then <bytes> of value
 * and "\r\n". The request is all of it, once all of it is in. */
static int
value(const char *buf, size_t len, struct proto_request *rq, size_t line,
      uint64_t bytes)
{
    uint64_t max = rq->value_max ? rq->value_max : MC_ITEM_SIZE_MAX;
    size_t total;

    if (bytes > max) /* memcached reads the value and drops it */
        return refused(rq, line, bytes + 2, E_LARGE);
    total = line + (size_t)bytes + 2;
    if (len < total)
        return PROTO_AGAIN;
    if (buf[total - 2] != '\r' || buf[total - 1] != '\n')
        return mistake(rq, total, E_CHUNK);
    rq->head = total;
    return PROTO_OK;
}

/* Check the words of a storage command: <key> <flags> <exptime> <bytes>
 * [<cas>] [noreply]. */
static int
storage(const char *buf, size_t len, struct proto_request *rq, size_t line)
{
    const struct proto_span *w = rq->args;
    size_t need = rq->command == MC_CAS ? 6 : 5;
    uint64_t flags, exptime, bytes, cas;
    bool neg, eneg;

    if (rq->nargs != need && rq->nargs != need + 1)
        return invalid(rq, line, E_ERROR);
    if (rq->nargs == need + 1 && word_is(buf, &w[need], "noreply"))
        rq->flags |= PROTO_REQ_NOREPLY;
    if (w[1].len > MC_KEY_MAX ||
        word_number(buf, &w[2], false, &flags, &neg) < 0 ||
        word_number(buf, &w[3], true, &exptime, &eneg) < 0 ||
        exptime > INT32_MAX ||
        word_number(buf, &w[4], false, &bytes, &neg) < 0 ||
        bytes > INT32_MAX - 2 ||
        (rq->command == MC_CAS &&
         word_number(buf, &w[5], false, &cas, &neg) < 0))
        return mistake(rq, line, E_FORMAT);
    rq->flags |= PROTO_REQ_WRITE;
    return value(buf, len, rq, line, bytes);
}

/* ms <key> <datalen> <flags>* */
static int
meta_set(const char *buf, size_t len, struct proto_request *rq, size_t line)
{
    const struct proto_span *w = rq->args;
    uint64_t bytes = 0;
    int st;

    if (rq->nargs == 1)
        return invalid(rq, line, E_ERROR);
    if (rq->nargs == 2 || w[1].len > MC_KEY_MAX)
        return invalid(rq, line, E_FORMAT);
    for (size_t i = 0; i < w[2].len; i++) {
        unsigned d = (unsigned char)buf[w[2].off + i] - '0';
        if (d > 9 || bytes > INT32_MAX)
            return invalid(rq, line, E_FORMAT);
        bytes = bytes * 10 + d;
    }
    if (bytes > INT32_MAX - 2)
        return invalid(rq, line, E_FORMAT);
    if (rq->nargs > MS_WORDS_MAX)
        return invalid(rq, line, E_FLAGS);
    rq->flags |= PROTO_REQ_WRITE;
    st = value(buf, len, rq, line, bytes);
    /* quiet mode hides a member's HD, never an error (too large, a bad
     * chunk) */
    if (st == PROTO_OK && !(rq->flags & PROTO_REQ_REFUSED))
        for (size_t i = 3; i < rq->nargs; i++)
            if (word_is(buf, &w[i], "q"))
                rq->flags |= PROTO_REQ_NOREPLY;
    return st;
}

/* Split the line [0, end) into words: as many as fit in rq->args, the
 * count in rq->nargs either way. */
static void
words(const char *buf, size_t end, struct proto_request *rq)
{
    size_t i = 0;

    rq->nargs = 0;
    while (i < end) {
        size_t start;

        while (i < end && buf[i] == ' ')
            i++;
        if (i == end)
            break;
        start = i;
        while (i < end && buf[i] != ' ')
            i++;
        if (rq->nargs < rq->argcap) {
            rq->args[rq->nargs].off = start;
            rq->args[rq->nargs].len = i - start;
        }
        rq->nargs++;
    }
}

/* The key of a one-key command is its second word. */
static int
one_key(struct proto_request *rq, size_t line)
{
    if (rq->args[1].len > MC_KEY_MAX)
        return mistake(rq, line, E_FORMAT);
    rq->keys[0] = rq->args[1];
    rq->nkeys = 1;
    rq->head = line;
    return PROTO_OK;
}

/* A text command on one key (not a meta one: its key may be base64)
 * whose reply the client gets as it is: the engine routes it alone. A
 * noreply is not plain (the mode sends it without the word and drops the
 * answer); nor is a get (the mode batches gets). */
static void
plain(struct proto_request *rq)
{
    if (rq->nkeys == 1 && !mc_is_meta(rq->command) &&
        !(rq->flags & PROTO_REQ_NOREPLY))
        rq->flags |= PROTO_REQ_PLAIN;
}

/* The request line at the front of <buf>: PROTO_OK with <line> its
 * length with its newline and <end> where its text ends (before "\r\n");
 * PROTO_AGAIN while it is not whole, PROTO_FATAL for the binary protocol
 * or a line too long. Where the last call stopped looking for the newline
 * is kept in <rq>'s progress. */
static int
request_line(const char *buf, size_t len, struct proto_request *rq,
             size_t *line, size_t *end)
{
    size_t from = rq->progress != NULL ? rq->progress->pos : 0;
    const char *nl;

    if (len == 0)
        return PROTO_AGAIN;
    if ((unsigned char)buf[0] == 0x80)
        return rq->err = E_BINARY, PROTO_FATAL;
    if (from > len)
        from = 0;
    nl = memchr(buf + from, '\n', len - from);
    if (nl == NULL) {
        uint64_t max = long_line_ok(buf, len) ? rq->max : MC_LINE_MAX;
        if (len > max)
            return rq->err = E_LINE, PROTO_FATAL;
        if (rq->progress != NULL)
            rq->progress->pos = len;
        return PROTO_AGAIN;
    }
    *line = (size_t)(nl - buf) + 1;
    *end = *line - 1;
    if (*end > 0 && buf[*end - 1] == '\r')
        (*end)--;
    return PROTO_OK;
}

/* get, gets, gat, gats <exptime>: their keys (several: a split). */
static int
retrieval(const char *buf, struct proto_request *rq, size_t line)
{
    const struct proto_span *w = rq->args;
    size_t first = rq->command >= MC_GAT ? 2 : 1;

    if (rq->nargs == 1)
        return invalid(rq, line, E_ERROR);
    if (first == 2) {
        /* memcached reads gat's exptime before it counts keys */
        uint64_t t;
        bool neg;
        if (word_number(buf, &w[1], true, &t, &neg) < 0)
            return invalid(rq, line, "CLIENT_ERROR invalid exptime argument");
        if (rq->nargs == 2) { /* no key: nothing found */
            rq->flags |= PROTO_REQ_LOCAL;
            rq->head = line;
            return PROTO_OK;
        }
    }
    for (size_t i = first; i < rq->nargs; i++) {
        if (w[i].len > MC_KEY_MAX)
            return invalid(rq, line, E_FORMAT);
        rq->keys[rq->nkeys++] = w[i];
    }
    if (rq->nkeys > 1)
        rq->flags |= PROTO_REQ_SPLIT;
    if (rq->command >= MC_GAT)
        rq->flags |= PROTO_REQ_WRITE; /* it touches */
    rq->head = line;
    return PROTO_OK;
}

/* verbosity <level> [noreply]: answered by chashd. */
static int
verbosity(const char *buf, struct proto_request *rq, size_t line)
{
    const struct proto_span *w = rq->args;
    uint64_t level;
    bool neg;

    if (rq->nargs < 2 || rq->nargs > 3)
        return invalid(rq, line, E_ERROR);
    if (word_is(buf, &w[rq->nargs - 1], "noreply"))
        rq->flags |= PROTO_REQ_NOREPLY;
    /* the level must be a number (a third word is ignored) */
    if (word_number(buf, &w[1], false, &level, &neg) < 0)
        return mistake(rq, line, E_FORMAT);
    rq->flags |= PROTO_REQ_LOCAL;
    rq->head = line;
    return PROTO_OK;
}

/* The table's parse_request: one request line (and a storage command's
 * value), its command, keys and flags. */
static int
mc_parse_request(const char *buf, size_t len, struct proto_request *rq)
{
    size_t line, end;
    const struct proto_span *w;
    int st;

    proto_request_reset(rq);
    st = request_line(buf, len, rq, &line, &end);
    if (st != PROTO_OK)
        return st;
    words(buf, end, rq);
    if (rq->nargs > rq->argcap || rq->nargs > rq->keycap) {
        rq->nkeys = rq->nargs; /* room for every word as a key */
        return PROTO_KEYS;
    }
    if (rq->nargs == 0)
        return invalid(rq, line, E_ERROR); /* memcached: an empty line */
    w = rq->args;
    rq->command = command_find(buf + w[0].off, w[0].len);
    switch (rq->command) {
    case MC_GET:
    case MC_GETS:
    case MC_GAT:
    case MC_GATS:
        return retrieval(buf, rq, line);
    case MC_SET:
    case MC_ADD:
    case MC_REPLACE:
    case MC_APPEND:
    case MC_PREPEND:
    case MC_CAS:
    case MC_MS:
        st = rq->command == MC_MS ? meta_set(buf, len, rq, line)
                                  : storage(buf, len, rq, line);
        if (st == PROTO_OK && !(rq->flags & PROTO_REQ_REFUSED)) {
            rq->keys[0] = w[1];
            rq->nkeys = 1;
            plain(rq);
        }
        return st;
    case MC_DELETE:
    case MC_INCR:
    case MC_DECR:
    case MC_TOUCH: {
        size_t lo = rq->command == MC_DELETE ? 2 : 3;
        if (rq->nargs < lo || rq->nargs > 4)
            return invalid(rq, line, E_ERROR);
        if (rq->nargs >= 3 && word_is(buf, &w[rq->nargs - 1], "noreply"))
            rq->flags |= PROTO_REQ_NOREPLY;
        rq->flags |= PROTO_REQ_WRITE;
        st = one_key(rq, line);
        if (st == PROTO_OK && !(rq->flags & PROTO_REQ_REFUSED))
            plain(rq);
        return st;
    }
    case MC_MG:
    case MC_MD:
    case MC_MA:
    case MC_ME:
        if (rq->nargs == 1)
            return invalid(rq, line, rq->command == MC_ME ? E_FORMAT : E_ERROR);
        if (w[1].len > MC_KEY_MAX) /* q hides no error */
            return invalid(rq, line, E_FORMAT);
        if (rq->command != MC_ME)
            for (size_t i = 2; i < rq->nargs; i++)
                if (word_is(buf, &w[i], "q"))
                    rq->flags |= PROTO_REQ_NOREPLY;
        if (rq->command == MC_MD || rq->command == MC_MA)
            rq->flags |= PROTO_REQ_WRITE;
        return one_key(rq, line);
    case MC_MN:
    case MC_VERSION:
    case MC_STATS:
        rq->flags |= PROTO_REQ_LOCAL;
        rq->head = line;
        return PROTO_OK;
    case MC_QUIT:
        rq->flags |= PROTO_REQ_LOCAL | PROTO_REQ_QUIT;
        rq->head = line;
        return PROTO_OK;
    case MC_VERBOSITY:
        return verbosity(buf, rq, line);
    case MC_FLUSH_ALL:
        if (rq->nargs > 3)
            return invalid(rq, line, E_ERROR);
        if (rq->nargs > 1 && word_is(buf, &w[rq->nargs - 1], "noreply"))
            rq->flags |= PROTO_REQ_NOREPLY;
        rq->flags |= PROTO_REQ_FANOUT | PROTO_REQ_WRITE;
        rq->head = line;
        return PROTO_OK;
    case MC_MEMBER_ADMIN:
        return refused(rq, line, 0,
                       "SERVER_ERROR a member's own administration command: "
                       "send it to that member, not through chashd");
    default:
        return invalid(rq, line, E_ERROR); /* unknown, as memcached */
    }
}

/* ---- replies ------------------------------------------------------------- */

static bool
starts(const char *buf, size_t len, const char *text)
{
    size_t n = strlen(text);

    return len >= n && memcmp(buf, text, n) == 0;
}

bool
mc_reply_is_error(const char *buf, size_t len)
{
    return starts(buf, len, "ERROR") || starts(buf, len, "CLIENT_ERROR") ||
           starts(buf, len, "SERVER_ERROR");
}

/* The decimal number at <s> (<n> bytes, digits only). -1 if not. */
static int
number(const char *s, size_t n, uint64_t *v)
{
    *v = 0;
    if (n == 0 || n > 19)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9)
            return -1;
        *v = *v * 10 + d;
    }
    return 0;
}

/* The <i>th word (0-based) of the line [s, s+n): its span, or -1. */
static int
nth_word(const char *s, size_t n, size_t i, struct proto_span *out)
{
    size_t p = 0;

    for (;;) {
        size_t start;
        while (p < n && s[p] == ' ')
            p++;
        if (p == n)
            return -1;
        start = p;
        while (p < n && s[p] != ' ')
            p++;
        if (i-- == 0) {
            out->off = start;
            out->len = p - start;
            return 0;
        }
    }
}

/* Length of the line at <buf> with its end, and of its text without it.
 * 0 when it is not all in; -1 when too long. */
static long
reply_line(const char *buf, size_t len, size_t *text)
{
    const char *nl = memchr(buf, '\n', len < MC_LINE_MAX ? len : MC_LINE_MAX);

    if (nl == NULL)
        return len < MC_LINE_MAX ? 0 : -1;
    *text = (size_t)(nl - buf);
    if (*text > 0 && buf[*text - 1] == '\r')
        (*text)--;
    return (long)(nl - buf) + 1;
}

/* A line followed by a value whose length is its word <word>: the whole
 * block's length, 0 when it is not all in, -1 when malformed. */
static long
with_value(const char *buf, size_t len, long line, size_t text, size_t word)
{
    struct proto_span w;
    uint64_t n;

    if (nth_word(buf, text, word, &w) < 0 ||
        number(buf + w.off, w.len, &n) < 0 || n > INT32_MAX)
        return -1;
    if (len < (size_t)line + n + 2)
        return 0;
    if (buf[(size_t)line + n] != '\r' || buf[(size_t)line + n + 1] != '\n')
        return -1;
    return line + (long)n + 2;
}

int
mc_value_block(const char *buf, size_t len, struct proto_span *key,
               size_t *block)
{
    size_t text;
    long line = reply_line(buf, len, &text), n;

    if (line <= 0)
        return line < 0 ? -1 : 0;
    if (!starts(buf, text, "VALUE "))
        return 0;
    if (nth_word(buf, text, 1, key) < 0)
        return -1;
    n = with_value(buf, len, line, text, 3);
    if (n <= 0)
        return -1;
    *block = (size_t)n;
    return 1;
}

/* Whether the first word of the line <buf> (<text> bytes) is <code>. */
static bool
first_word_is(const char *buf, size_t text, const char *code)
{
    size_t n = strlen(code);

    return text >= n && memcmp(buf, code, n) == 0 &&
           (text == n || buf[n] == ' ');
}

/* Whether the line <buf> (<text> bytes) is a number and nothing else:
 * incr's and decr's reply (up to 2^64 - 1: 20 digits). */
static bool
number_line(const char *buf, size_t text)
{
    if (text == 0 || text > 20)
        return false;
    for (size_t i = 0; i < text; i++)
        if (buf[i] < '0' || buf[i] > '9')
            return false;
    return true;
}

/*
 * Whether the line <buf> (<text> bytes, its end not counted) can be a
 * reply of memcached 1.6 at all: an error, one of its reply codes (text
 * and meta, all upper case) or a number. Nothing else ever comes from a
 * member -- and what does is not a reply to hand to a client: a request
 * echoed back by a connection that reached itself (a connect to a member
 * that is down can, on Linux, connect to its own port), a stream out of
 * step. The parser calls it malformed, and the engine closes the
 * connection. Every request is lower case, so an echoed one never
 * passes.
 */
static bool
reply_code(const char *buf, size_t text)
{
    static const char *const codes[] = {
        "VALUE",   "STORED",  "NOT_STORED", "EXISTS", "NOT_FOUND",
        "DELETED", "TOUCHED", "END",        "OK",     "VERSION",
        "STAT",    "RESET",   "VA",         "HD",     "EN",
        "NF",      "NS",      "EX",         "MN",     "ME"};

    if (mc_reply_is_error(buf, text) || number_line(buf, text))
        return true;
    for (size_t i = 0; i < ARRAY_SIZE(codes); i++)
        if (first_word_is(buf, text, codes[i]))
            return true;
    return false;
}

/*
 * Whether a reply whose first line is <buf> (<text> bytes; <value>: it
 * is VALUE blocks) can answer <command> (-1: any): what memcached 1.6
 * answers the commands whose replies do not overlap -- a retrieval VALUE
 * blocks or END, incr and decr a number or NOT_FOUND, delete DELETED or
 * NOT_FOUND, touch TOUCHED or NOT_FOUND, flush_all OK --, an error to
 * any. The others (storage, meta) are checked by reply_code only.
 */
static bool
reply_fits(int command, const char *buf, size_t text, bool value)
{
    if (command < 0 || (!value && mc_reply_is_error(buf, text)))
        return true;
    if (mc_is_retrieval(command))
        return value || (text == 3 && memcmp(buf, "END", 3) == 0);
    if (value)
        return false;
    switch (command) {
    case MC_INCR:
    case MC_DECR:
        return number_line(buf, text) || first_word_is(buf, text, "NOT_FOUND");
    case MC_DELETE:
        return first_word_is(buf, text, "DELETED") ||
               first_word_is(buf, text, "NOT_FOUND");
    case MC_TOUCH:
        return first_word_is(buf, text, "TOUCHED") ||
               first_word_is(buf, text, "NOT_FOUND");
    case MC_FLUSH_ALL:
        return first_word_is(buf, text, "OK");
    default:
        return true;
    }
}

/* One reply at <buf>, the reply of <command> (-1: of any): its length, 0
 * when not all in, -1 malformed (or not a reply <command> can have:
 * reply_code, reply_fits); *<error> whether it is an error line, *<mn>
 * whether it is "MN". */
static long
one_reply(const char *buf, size_t len, int command, bool *error, bool *mn)
{
    size_t text, off;
    long line = reply_line(buf, len, &text);

    *error = *mn = false;
    if (line <= 0)
        return line;
    if (!reply_code(buf, text) ||
        !reply_fits(command, buf, text, starts(buf, text, "VALUE ")))
        return -1;
    if (starts(buf, text, "VA ")) /* mg, ma: a value */
        return with_value(buf, len, line, text, 1);
    if (!starts(buf, text, "VALUE ")) {
        *error = mc_reply_is_error(buf, text);
        *mn = text == 2 && buf[0] == 'M' && buf[1] == 'N';
        return line;
    }
    /* a retrieval: VALUE blocks, then END (or an error line) */
    off = 0;
    for (;;) {
        long n;
        if (starts(buf + off, len - off, "VALUE ")) {
            line = reply_line(buf + off, len - off, &text);
            if (line <= 0)
                return line;
            n = with_value(buf + off, len - off, line, text, 3);
            if (n <= 0)
                return n;
            off += (size_t)n;
            continue;
        }
        line = reply_line(buf + off, len - off, &text);
        if (line <= 0)
            return line;
        if (text == 3 && memcmp(buf + off, "END", 3) == 0)
            return (long)(off + (size_t)line);
        if (mc_reply_is_error(buf + off, text)) {
            *error = true;
            return (long)(off + (size_t)line);
        }
        return -1;
    }
}

/*
 * A member's reply. A quiet meta request (q) was sent with an "mn" after
 * it, so that its reply is whatever the member says -- nothing, or what
 * quiet mode does not hide -- then "MN": all of it is the reply.
 */
static int
mc_parse_reply(const char *buf, size_t len, const struct proto_request *rq,
               struct proto_reply *rp)
{
    bool quiet = rq != NULL && (rq->flags & PROTO_REQ_NOREPLY) &&
                 mc_is_meta(rq->command);
    /* what the reply must be: a quiet request's is any lines up to MN */
    int command = rq != NULL && !quiet ? rq->command : -1;
    size_t off = 0;

    rp->len = rp->body = 0;
    rp->error = rp->member_failure = false;
    for (;;) {
        bool error, mn;
        long n = one_reply(buf + off, len - off, command, &error, &mn);

        if (n < 0)
            return PROTO_FATAL;
        if (n == 0)
            return PROTO_AGAIN;
        off += (size_t)n;
        rp->error |= error;
        if (!quiet || mn)
            break;
    }
    rp->len = off;
    return PROTO_OK;
}

static bool
has_code(const char *msg)
{
    return mc_reply_is_error(msg, strlen(msg));
}

static const struct proto_error_texts mc_errors = {
    .lead = "",
    .kinds = {"SERVER_ERROR Connection refused",
              "SERVER_ERROR Connection timed out",
              "SERVER_ERROR Connection reset by peer",
              "SERVER_ERROR no member available"},
    .request = "CLIENT_ERROR invalid request",
    .request_prefix = "CLIENT_ERROR ",
    .has_code = has_code,
};

static size_t
mc_error_reply(char *out, size_t cap, int kind, const char *msg)
{
    return proto_error_reply(&mc_errors, out, cap, kind, msg);
}

/* ---- base64 -------------------------------------------------------------- */

static const char b64_digits[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
mc_base64_encode(const void *in, size_t len, char *out)
{
    const unsigned char *k = in;
    size_t o = 0;

    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)k[i] << 16;

        if (i + 1 < len)
            v |= (uint32_t)k[i + 1] << 8;
        if (i + 2 < len)
            v |= k[i + 2];
        out[o++] = b64_digits[(v >> 18) & 63];
        out[o++] = b64_digits[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64_digits[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64_digits[v & 63] : '=';
    }
    return o;
}

static int
b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long
mc_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap)
{
    size_t o = 0;

    if (len == 0 || len % 4 != 0)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        size_t pad = 0;

        for (size_t j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)in[i + j];
            if (c == '=' && i + 4 == len && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad > 0) /* a digit after '=' */
                return -1;
            v[j] = b64_value(c);
            if (v[j] < 0)
                return -1;
        }
        if (o + 3 - pad > cap)
            return -1;
        out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
        if (pad < 2)
            out[o++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
        if (pad < 1)
            out[o++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
    }
    return (long)o;
}

/* ---- health probe -------------------------------------------------------- */

static const char mc_version[] = "version\r\n";

static int
mc_probe_reply(const char *buf, size_t len)
{
    size_t text;
    long line = reply_line(buf, len, &text);

    if (line == 0)
        return 0;
    return line > 0 && starts(buf, text, "VERSION ") ? 1 : -1;
}

const struct proto proto_memcache = {
    .name = "memcache",
    .mode = CONF_MODE_MEMCACHE,
    .parse_request = mc_parse_request,
    .parse_reply = mc_parse_reply,
    .error_reply = mc_error_reply,
    .probe = mc_version,
    .probe_len = sizeof(mc_version) - 1,
    .probe_reply = mc_probe_reply,
};

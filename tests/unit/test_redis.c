/* test_redis.c -- mode redis's pure functions: requests (multibulk and
 * inline, quoting, every class's keys, refusals with Redis' texts, every
 * protocol error, the size limit, streaming, array growth, every prefix of
 * every request), replies (every type, nesting, streaming, malformed),
 * merging helpers, error replies and the health probe.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/proto.h"
#include "proto/redis.h"

#define NSPANS 64
#define INLINE_MAX (64 * 1024) /* Redis' PROTO_INLINE_MAX_SIZE */

/* One parse with the caller's arrays of a usual size. */
struct parsed {
    struct proto_request rq;
    struct proto_span args[NSPANS];
    struct proto_span keys[NSPANS];
    char scratch[4096];
    int st;
};

static int
parse_max(struct parsed *p, const char *buf, size_t len, uint64_t max)
{
    memset(p, 0, sizeof(*p));
    p->rq.args = p->args;
    p->rq.argcap = NSPANS;
    p->rq.keys = p->keys;
    p->rq.keycap = NSPANS;
    p->rq.scratch = p->scratch;
    p->rq.scratchcap = sizeof(p->scratch);
    p->rq.max = max;
    p->st = proto_redis.parse_request(buf, len, &p->rq);
    return p->st;
}

static int
parse(struct parsed *p, const char *buf, size_t len)
{
    return parse_max(p, buf, len, 0);
}

/* Where the spans of <p> point: the scratch for an inline request. */
static const char *
base_of(const struct parsed *p, const char *buf)
{
    return (p->rq.flags & PROTO_REQ_INLINE) ? p->scratch : buf;
}

static void
assert_span(const char *base, struct proto_span s, const char *want)
{
    char got[256];

    assert_true(s.len < sizeof(got));
    memcpy(got, base + s.off, s.len);
    got[s.len] = '\0';
    assert_string_equal(got, want);
    assert_int_equal(s.len, strlen(want));
}

/* The keys of <p>, exactly <n> of them, in order. */
static void
assert_keys(const struct parsed *p, const char *buf, size_t n, ...)
{
    va_list ap;
    size_t i;

    assert_int_equal(p->rq.nkeys, n);
    va_start(ap, n);
    for (i = 0; i < n; i++)
        assert_span(base_of(p, buf), p->rq.keys[i], va_arg(ap, const char *));
    va_end(ap);
}

static void
assert_args(const struct parsed *p, const char *buf, size_t n, ...)
{
    va_list ap;
    size_t i;

    assert_int_equal(p->rq.nargs, n);
    va_start(ap, n);
    for (i = 0; i < n; i++)
        assert_span(base_of(p, buf), p->rq.args[i], va_arg(ap, const char *));
    va_end(ap);
}

/* Every proper prefix of the request <s> (<len> bytes) waits for more. */
static void
prefixes_wait(const char *s, size_t len)
{
    static struct parsed p;
    size_t n;

    for (n = 0; n < len; n++)
        assert_int_equal(parse(&p, s, n), PROTO_AGAIN);
}

/* Parse the NUL-terminated request <s>, which must be whole and served
 * (and wait for more bytes at every shorter length). */
static void
served(struct parsed *p, const char *s)
{
    prefixes_wait(s, strlen(s));
    assert_int_equal(parse(p, s, strlen(s)), PROTO_OK);
    assert_false(p->rq.flags & PROTO_REQ_REFUSED);
    assert_null(p->rq.err);
    assert_int_equal(p->rq.head, strlen(s));
    assert_int_equal(p->rq.body, 0);
}

/* Parse <s>: a whole request refused with <err>, the connection kept. */
static void
refused(const char *s, const char *err)
{
    struct parsed p;

    prefixes_wait(s, strlen(s));
    assert_int_equal(parse(&p, s, strlen(s)), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_int_equal(p.rq.nkeys, 0);
    assert_int_equal(p.rq.head, strlen(s));
    assert_non_null(p.rq.err);
    assert_string_equal(p.rq.err, err);
}

/* Parse <s> (<len> bytes): a protocol error with <err>. */
static void
fatal_n(const char *s, size_t len, const char *err)
{
    struct parsed p;

    assert_int_equal(parse(&p, s, len), PROTO_FATAL);
    assert_non_null(p.rq.err);
    assert_string_equal(p.rq.err, err);
}

static void
fatal(const char *s, const char *err)
{
    fatal_n(s, strlen(s), err);
}

static int
cmd(const char *name)
{
    int i = redis_command_find(name, strlen(name));

    assert_true(i >= 0);
    return i;
}

/* ---- the table ---------------------------------------------------------- */

static void
test_table_sorted_and_found(void **state)
{
    size_t i, n = redis_command_count();
    char up[64];

    (void)state;
    assert_int_equal(n, 240); /* redis-server 7.0.15's COMMAND COUNT */
    for (i = 0; i < n; i++) {
        const struct redis_command *c = redis_command_at((int)i);
        size_t j, len = strlen(c->name);

        assert_non_null(c);
        if (i > 0)
            assert_true(strcmp(redis_command_at((int)i - 1)->name, c->name) <
                        0);
        for (j = 0; j <= len; j++) {
            assert_false(c->name[j] >= 'A' && c->name[j] <= 'Z');
            up[j] = (c->name[j] >= 'a' && c->name[j] <= 'z')
                        ? (char)(c->name[j] - 'a' + 'A')
                        : c->name[j];
        }
        assert_int_equal(redis_command_find(c->name, len), (int)i);
        assert_int_equal(redis_command_find(up, len), (int)i);
        assert_true(c->kind >= REDIS_KEY && c->kind <= REDIS_REFUSED);
        /* a key range walks forward; a count has a position */
        if (c->first > 0)
            assert_true(c->step >= 1);
        if (c->kind == REDIS_NUMKEYS)
            assert_true(c->first >= 1);
        if (c->kind == REDIS_SAME || c->kind == REDIS_SPLIT_KEYS ||
            c->kind == REDIS_SPLIT_KV)
            assert_true(c->first >= 1 || strncmp(c->name, "xread", 5) == 0);
        if (c->flags & REDIS_ADMIN)
            assert_int_equal(c->kind, REDIS_FANOUT);
    }
    assert_null(redis_command_at(-1));
    assert_null(redis_command_at((int)n));
    /* any case; only <len> bytes are read */
    assert_int_equal(redis_command_find("gEt", 3), cmd("get"));
    assert_int_equal(redis_command_find("GETDEL", 3), cmd("get"));
    assert_int_equal(redis_command_find("getx", 4), -1);
    assert_int_equal(redis_command_find("", 0), -1);
    assert_int_equal(redis_command_find("ge", 2), -1);
    assert_int_equal(
        redis_command_find("georadiusbymember_ro_and_then_some_more_bytes", 45),
        -1);
}

static void
test_table_classes(void **state)
{
    const struct redis_command *c;

    (void)state;
    c = redis_command_at(cmd("get"));
    assert_int_equal(c->kind, REDIS_KEY);
    assert_int_equal(c->first, 1);
    assert_int_equal(c->flags & REDIS_WRITE, 0);
    assert_true(redis_command_at(cmd("set"))->flags & REDIS_WRITE);
    assert_int_equal(redis_command_at(cmd("mget"))->kind, REDIS_SPLIT_KEYS);
    assert_int_equal(redis_command_at(cmd("exists"))->kind, REDIS_SPLIT_KEYS);
    assert_int_equal(redis_command_at(cmd("mset"))->kind, REDIS_SPLIT_KV);
    assert_int_equal(redis_command_at(cmd("msetnx"))->kind, REDIS_SAME);
    c = redis_command_at(cmd("bitop"));
    assert_int_equal(c->kind, REDIS_SAME);
    assert_int_equal(c->first, 2);
    assert_int_equal(c->last, -1);
    c = redis_command_at(cmd("eval"));
    assert_int_equal(c->kind, REDIS_NUMKEYS);
    assert_int_equal(c->first, 2);
    assert_true(c->flags & REDIS_WRITE); /* a script may write */
    assert_int_equal(redis_command_at(cmd("eval_ro"))->flags & REDIS_WRITE, 0);
    assert_int_equal(redis_command_at(cmd("zunion"))->first, 1);
    assert_int_equal(redis_command_at(cmd("ping"))->kind, REDIS_LOCAL);
    assert_int_equal(redis_command_at(cmd("scan"))->kind, REDIS_FANOUT);
    assert_int_equal(redis_command_at(cmd("scan"))->flags, 0);
    assert_true(redis_command_at(cmd("keys"))->flags & REDIS_ADMIN);
    assert_true(redis_command_at(cmd("flushall"))->flags & REDIS_ADMIN);
    assert_int_equal(redis_command_at(cmd("blpop"))->kind, REDIS_REFUSED);
    assert_int_equal(redis_command_at(cmd("multi"))->kind, REDIS_REFUSED);
    assert_int_equal(redis_command_at(cmd("object"))->kind, REDIS_KEY);
    assert_int_equal(redis_command_at(cmd("object"))->first, 2);
}

/* ---- requests ----------------------------------------------------------- */

static void
test_multibulk(void **state)
{
    const char *s = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
    struct parsed p;

    (void)state;
    served(&p, s);
    assert_int_equal(p.rq.command, cmd("set"));
    assert_int_equal(p.rq.flags, PROTO_REQ_WRITE | PROTO_REQ_PLAIN);
    assert_args(&p, s, 3, "SET", "k", "value");
    assert_keys(&p, s, 1, "k");
    assert_int_equal(p.rq.scratchlen, 0);

    /* empty and binary arguments */
    s = "*3\r\n$4\r\nhset\r\n$0\r\n\r\n$3\r\n\r\n\0\r\n";
    assert_int_equal(parse(&p, s, 29), PROTO_OK);
    assert_int_equal(p.rq.head, 29);
    assert_int_equal(p.rq.nargs, 3);
    assert_int_equal(p.rq.args[1].len, 0);
    assert_int_equal(p.rq.args[2].len, 3);
    assert_memory_equal(s + p.rq.args[2].off, "\r\n\0", 3);
    /* HSET needs 4: refused, consumed */
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);

    /* a pipeline: each parse takes one request */
    s = "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n";
    served(&p, "*1\r\n$4\r\nPING\r\n");
    assert_int_equal(parse(&p, s, strlen(s)), PROTO_OK);
    assert_int_equal(p.rq.head, 14);
    assert_int_equal(parse(&p, s + 14, strlen(s) - 14), PROTO_OK);
    assert_keys(&p, s + 14, 1, "a");
}

/* PROTO_REQ_PLAIN: one key, sent and answered as it is -- what the
 * engine routes without the mode; nothing the mode must see. */
static void
test_plain(void **state)
{
    struct parsed p;

    (void)state;
    served(&p, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    assert_int_equal(p.rq.flags, PROTO_REQ_PLAIN);
    served(&p, "*3\r\n$6\r\nINCRBY\r\n$1\r\nk\r\n$1\r\n2\r\n");
    assert_int_equal(p.rq.flags, PROTO_REQ_WRITE | PROTO_REQ_PLAIN);
    /* one key given by numkeys */
    served(&p, "*4\r\n$4\r\nEVAL\r\n$1\r\nx\r\n$1\r\n1\r\n$1\r\nk\r\n");
    assert_true(p.rq.flags & PROTO_REQ_PLAIN);
    /* a split command on one key is still merged by the mode */
    served(&p, "*2\r\n$4\r\nMGET\r\n$1\r\nk\r\n");
    assert_int_equal(p.rq.flags, PROTO_REQ_SPLIT);
    served(&p, "*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n");
    assert_false(p.rq.flags & PROTO_REQ_PLAIN);
    /* two keys that must share a member, no key, a local answer */
    served(&p, "*3\r\n$6\r\nRENAME\r\n$1\r\na\r\n$1\r\nb\r\n");
    assert_false(p.rq.flags & PROTO_REQ_PLAIN);
    assert_true(p.rq.flags & PROTO_REQ_SAME);
    served(&p, "*1\r\n$4\r\nPING\r\n");
    assert_false(p.rq.flags & PROTO_REQ_PLAIN);
    served(&p, "*2\r\n$4\r\nAUTH\r\n$1\r\np\r\n");
    assert_false(p.rq.flags & PROTO_REQ_PLAIN);
    /* inline: re-encoded in the scratch, the mode's */
    served(&p, "GET k\r\n");
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE);
}

static void
test_inline(void **state)
{
    const char *s;
    struct parsed p;

    (void)state;
    s = "SET k v\r\n";
    served(&p, s);
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE | PROTO_REQ_WRITE);
    assert_int_equal(p.rq.command, cmd("set"));
    assert_args(&p, s, 3, "SET", "k", "v");
    assert_keys(&p, s, 1, "k");
    /* the re-encoding the engine forwards */
    assert_int_equal(p.rq.scratchlen, 27);
    assert_memory_equal(p.scratch, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
                        27);

    s = "PING\n"; /* a bare \n ends a line too */
    served(&p, s);
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE | PROTO_REQ_LOCAL);

    s = "  get\t \x0b key  \r\n"; /* blanks around and between */
    served(&p, s);
    assert_args(&p, s, 2, "get", "key");

    /* quotes and escapes, as sdssplitargs() */
    s = "SET \"a b\" 'c \"d'\r\n";
    served(&p, s);
    assert_args(&p, s, 3, "SET", "a b", "c \"d");
    s = "ECHO \"\\x41\\x4a\\n\\r\\t\\b\\a\\\\\\\"\\q\\xZZ\"\r\n";
    served(&p, s);
    assert_args(&p, s, 2, "ECHO", "AJ\n\r\t\b\a\\\"qxZZ");
    s = "SET 'it\\'s' '\\n'\r\n"; /* single quotes: only \' */
    served(&p, s);
    assert_args(&p, s, 3, "SET", "it's", "\\n");
    s = "SET a\"b c\"d\r\n"; /* a quote opens inside an argument */
    assert_int_equal(parse(&p, s, strlen(s)), PROTO_FATAL); /* "d after */
    s = "SET a\"b c\" d\r\n";
    served(&p, s);
    assert_args(&p, s, 3, "SET", "ab c", "d");
    s = "SET \"\" ''\r\n"; /* empty arguments */
    served(&p, s);
    assert_args(&p, s, 3, "SET", "", "");
    assert_int_equal(p.rq.scratchlen, 25);
    assert_memory_equal(p.scratch, "*3\r\n$3\r\nSET\r\n$0\r\n\r\n$0\r\n\r\n",
                        25);

    /* a NUL ends the line for Redis (a C string); the bytes up to \n are
     * still consumed */
    assert_int_equal(parse(&p, "GET a\0b c\r\n", 11), PROTO_OK);
    assert_int_equal(p.rq.head, 11);
    assert_args(&p, NULL, 2, "GET", "a");

    /* a lone \r inside the line is a blank */
    s = "GET\ra\r\n";
    served(&p, s);
    assert_args(&p, s, 2, "GET", "a");
}

static void
test_skipped(void **state)
{
    static const char *const skips[] = {"\r\n",   "\n",      "   \t \r\n",
                                        "*0\r\n", "*-1\r\n", "*-7\r\n"};
    struct parsed p;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(skips) / sizeof(skips[0]); i++) {
        assert_int_equal(parse(&p, skips[i], strlen(skips[i])), PROTO_OK);
        assert_int_equal(p.rq.head, strlen(skips[i]));
        assert_int_equal(p.rq.nargs, 0);
        assert_int_equal(p.rq.command, -1);
        assert_true(p.rq.flags & PROTO_REQ_LOCAL);
        assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
        assert_false(p.rq.flags & PROTO_REQ_REFUSED);
    }
}

static void
test_keys_by_class(void **state)
{
    struct parsed p;
    const char *s;

    (void)state;
    served(&p, s = "MGET a b c\r\n");
    assert_keys(&p, s, 3, "a", "b", "c");
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE | PROTO_REQ_SPLIT);
    served(&p, s = "EXISTS a\r\n"); /* split even with one key */
    assert_true(p.rq.flags & PROTO_REQ_SPLIT);
    served(&p, s = "DEL a b\r\n");
    assert_int_equal(p.rq.flags,
                     PROTO_REQ_INLINE | PROTO_REQ_SPLIT | PROTO_REQ_WRITE);
    served(&p, s = "MSET a 1 b 2\r\n");
    assert_keys(&p, s, 2, "a", "b");
    assert_true(p.rq.flags & PROTO_REQ_SPLIT);
    served(&p, s = "MSETNX a 1 b 2\r\n");
    assert_keys(&p, s, 2, "a", "b");
    assert_true(p.rq.flags & PROTO_REQ_SAME);
    assert_false(p.rq.flags & PROTO_REQ_SPLIT);
    served(&p, s = "SUNIONSTORE d a b\r\n");
    assert_keys(&p, s, 3, "d", "a", "b");
    assert_int_equal(p.rq.flags,
                     PROTO_REQ_INLINE | PROTO_REQ_SAME | PROTO_REQ_WRITE);
    served(&p, s = "SINTER a\r\n"); /* one key: nothing to check */
    assert_keys(&p, s, 1, "a");
    assert_false(p.rq.flags & PROTO_REQ_SAME);
    served(&p, s = "BITOP AND d a b\r\n");
    assert_keys(&p, s, 3, "d", "a", "b");
    served(&p, s = "RENAME a b\r\n");
    assert_keys(&p, s, 2, "a", "b");
    served(&p, s = "EVAL \"return 1\" 2 a b x y\r\n");
    assert_keys(&p, s, 2, "a", "b");
    assert_int_equal(p.rq.flags,
                     PROTO_REQ_INLINE | PROTO_REQ_SAME | PROTO_REQ_WRITE);
    served(&p, s = "EVALSHA abc 1 a x\r\n");
    assert_keys(&p, s, 1, "a");
    assert_false(p.rq.flags & PROTO_REQ_SAME);
    served(&p, s = "FCALL_RO f 1 a\r\n");
    assert_keys(&p, s, 1, "a");
    assert_false(p.rq.flags & PROTO_REQ_WRITE);
    served(&p, s = "ZUNION 2 a b WITHSCORES\r\n");
    assert_keys(&p, s, 2, "a", "b");
    served(&p, s = "LMPOP 1 a LEFT\r\n");
    assert_keys(&p, s, 1, "a");
    served(&p, s = "ZUNIONSTORE d 2 a b WEIGHTS 1 2\r\n");
    assert_keys(&p, s, 3, "d", "a", "b");
    served(&p, s = "SORT k LIMIT 0 5 BY w_* GET # STORE d\r\n");
    assert_keys(&p, s, 2, "k", "d");
    served(&p, s = "SORT k GET store\r\n"); /* a pattern named store */
    assert_keys(&p, s, 1, "k");
    served(&p, s = "GEORADIUS k 15 37 200 km STORE d STOREDIST e\r\n");
    assert_keys(&p, s, 3, "k", "d", "e");
    served(&p, s = "GEORADIUSBYMEMBER k m 200 km STOREDIST d\r\n");
    assert_keys(&p, s, 2, "k", "d");
    served(&p, s = "XREAD COUNT 2 STREAMS a b 0 0\r\n");
    assert_keys(&p, s, 2, "a", "b");
    assert_false(p.rq.flags & PROTO_REQ_WRITE);
    served(&p, s = "XREADGROUP GROUP g c NOACK STREAMS a >\r\n");
    assert_keys(&p, s, 1, "a");
    assert_true(p.rq.flags & PROTO_REQ_WRITE);
    served(&p, s = "COPY a b REPLACE\r\n");
    assert_keys(&p, s, 2, "a", "b");

    /* containers */
    served(&p, s = "OBJECT ENCODING k\r\n");
    assert_keys(&p, s, 1, "k");
    assert_int_equal(p.rq.command, cmd("object"));
    served(&p, s = "memory usage k SAMPLES 5\r\n");
    assert_keys(&p, s, 1, "k");
    served(&p, s = "XGROUP CREATE k g $ MKSTREAM\r\n");
    assert_keys(&p, s, 1, "k");
    assert_true(p.rq.flags & PROTO_REQ_WRITE);
    served(&p, s = "XINFO STREAM k\r\n");
    assert_false(p.rq.flags & PROTO_REQ_WRITE);
    served(&p, s = "OBJECT HELP\r\n");
    assert_int_equal(p.rq.nkeys, 0);
    assert_true(p.rq.flags & PROTO_REQ_NOKEY);
    served(&p, s = "LOLWUT VERSION 5\r\n");
    assert_true(p.rq.flags & PROTO_REQ_NOKEY);

    /* local, fan-out */
    served(&p, s = "QUIT\r\n");
    assert_int_equal(p.rq.flags,
                     PROTO_REQ_INLINE | PROTO_REQ_LOCAL | PROTO_REQ_QUIT);
    served(&p, s = "CLIENT SETNAME x\r\n");
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE | PROTO_REQ_LOCAL);
    assert_int_equal(p.rq.nargs, 3);
    served(&p, s = "HELLO 3\r\n");
    assert_true(p.rq.flags & PROTO_REQ_LOCAL);
    served(&p, s = "SCAN 0 COUNT 10\r\n");
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE | PROTO_REQ_FANOUT);
    served(&p, s = "FLUSHALL\r\n");
    assert_int_equal(p.rq.flags,
                     PROTO_REQ_INLINE | PROTO_REQ_FANOUT | PROTO_REQ_WRITE);
    assert_int_equal(p.rq.command, cmd("flushall"));
}

static void
test_refusals(void **state)
{
    struct parsed p;

    (void)state;
    /* Redis' own texts; the request is consumed, the connection kept */
    refused("*1\r\n$3\r\nGET\r\n",
            "wrong number of arguments for 'get' command");
    refused("GET a b\r\n", "wrong number of arguments for 'get' command");
    refused("MSET a 1 b\r\n", "wrong number of arguments for 'mset' command");
    refused("MSETNX a\r\n", "wrong number of arguments for 'msetnx' command");
    refused("MSETNX a 1 b\r\n",
            "wrong number of arguments for 'msetnx' command");
    refused("OBJECT ENCODING\r\n",
            "wrong number of arguments for 'object|encoding' command");
    refused("OBJECT FOO k\r\n", "unknown subcommand. Try OBJECT HELP.");
    refused("MEMORY STATS\r\n", "unsupported command 'memory|stats'");
    refused("EVAL s x\r\n", "value is not an integer or out of range");
    refused("EVAL s -1\r\n", "Number of keys can't be negative");
    refused("EVAL s 2 a\r\n",
            "Number of keys can't be greater than number of args");
    refused("EVAL s 01 a\r\n", "value is not an integer or out of range");
    refused("ZUNION 0 a\r\n", "numkeys should be greater than 0");
    refused("ZUNIONSTORE d 3 a b\r\n",
            "Number of keys can't be greater than number of args");
    refused("EVAL \"return 1\" 0\r\n",
            "numkeys 0 cannot be routed: chashd sends a script to the "
            "member of its keys");
    refused("XREAD BLOCK 0 STREAMS a 0\r\n",
            "XREAD and XREADGROUP with BLOCK are not supported: chashd does "
            "not block members");
    refused("XREAD STREAMS a b 0\r\n",
            "Unbalanced 'xread' list of streams: for each stream key an ID "
            "or '$' must be specified.");
    refused("XREAD COUNT 1 FOO a 0\r\n", "syntax error");
    refused("XREAD COUNT 1 a 0\r\n", "syntax error");
    refused("COPY a b DB 1\r\n", "COPY with DB is not supported: chashd "
                                 "does not route between databases");
    refused("MULTI\r\n", "unsupported command 'multi'");
    refused("BLPOP a 0\r\n", "unsupported command 'blpop'");
    refused("SUBSCRIBE c\r\n", "unsupported command 'subscribe'");
    refused("MOVE a 1\r\n", "unsupported command 'move'");
    refused("CONFIG GET *\r\n", "unsupported command 'config'");
    refused("FOO a\r\n", "unknown command");
    refused("*2\r\n$36\r\nthis-is-longer-than-any-command-name\r\n$1\r\na\r\n",
            "unknown command");

    /* a refused request keeps the index of a command Redis has */
    assert_int_equal(parse(&p, "MULTI\r\n", 7), PROTO_OK);
    assert_int_equal(p.rq.command, cmd("multi"));
    assert_int_equal(parse(&p, "FOO\r\n", 5), PROTO_OK);
    assert_int_equal(p.rq.command, -1);
    /* an inline refusal keeps its INLINE flag */
    assert_int_equal(p.rq.flags, PROTO_REQ_INLINE | PROTO_REQ_REFUSED);
}

static void
test_protocol_errors(void **state)
{
    char big[INLINE_MAX];

    (void)state;
    fatal("*x\r\n", "Protocol error: invalid multibulk length");
    fatal("*01\r\n", "Protocol error: invalid multibulk length");
    fatal("*+1\r\n", "Protocol error: invalid multibulk length");
    fatal("*1\rX", "Protocol error: invalid multibulk length");
    fatal("*1\n", "Protocol error: invalid multibulk length");
    fatal("* 1\r\n", "Protocol error: invalid multibulk length");
    fatal("*\r\n", "Protocol error: invalid multibulk length");
    fatal("*1048577\r\n", "Protocol error: invalid multibulk length");
    fatal("*99999999999999999999\r\n",
          "Protocol error: invalid multibulk length");
    fatal("*123456789012345678901", /* too long to be a number, no CR yet */
          "Protocol error: invalid multibulk length");
    fatal("*1\r\n$x\r\n", "Protocol error: invalid bulk length");
    fatal("*1\r\n$-1\r\n", "Protocol error: invalid bulk length");
    fatal("*1\r\n$04\r\nPING\r\n", "Protocol error: invalid bulk length");
    fatal("*1\r\n$9223372036854775808\r\n",
          "Protocol error: invalid bulk length");
    fatal("*2\r\n:1\r\n", "Protocol error: expected '$', got ':'");
    fatal("*1\r\nPING\r\n", "Protocol error: expected '$', got 'P'");
    fatal("*2\r\n$3\r\nGET\r\n*1\r\n", "Protocol error: expected '$', got '*'");
    fatal("*1\r\n$4\r\nPINGxx", "Protocol error: missing CRLF after bulk data");
    fatal("*1\r\n$4\r\nPING\rx",
          "Protocol error: missing CRLF after bulk data");
    fatal("SET \"a\r\n", "Protocol error: unbalanced quotes in request");
    fatal("SET 'a\r\n", "Protocol error: unbalanced quotes in request");
    fatal("SET \"a\"b\r\n", "Protocol error: unbalanced quotes in request");
    fatal("SET 'a'b\r\n", "Protocol error: unbalanced quotes in request");
    fatal("SET \"a\\\"\r\n", "Protocol error: unbalanced quotes in request");
    fatal("POST / HTTP/1.1\r\n", "Protocol error: possible SECURITY ATTACK "
                                 "detected (POST or Host: command)");
    fatal("*2\r\n$5\r\nHost:\r\n$1\r\nx\r\n",
          "Protocol error: possible SECURITY ATTACK detected (POST or Host: "
          "command)");

    /* 64 KiB without a line end: too big; one byte less: wait */
    memset(big, 'a', sizeof(big));
    {
        struct parsed p;

        assert_int_equal(parse(&p, big, sizeof(big) - 1), PROTO_AGAIN);
        fatal_n(big, sizeof(big), "Protocol error: too big inline request");
        /* the line fits exactly: blanks, then "x\n" */
        memset(big, ' ', sizeof(big));
        big[sizeof(big) - 2] = 'x';
        big[sizeof(big) - 1] = '\n';
        assert_int_equal(parse(&p, big, sizeof(big)), PROTO_OK);
        assert_int_equal(p.rq.head, sizeof(big));
        assert_string_equal(p.rq.err, "unknown command");
    }
}

static void
test_size_limit(void **state)
{
    const char *s = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
    size_t len = strlen(s);
    struct parsed p;

    (void)state;
    assert_int_equal(parse_max(&p, s, len, len), PROTO_OK);
    assert_int_equal(parse_max(&p, s, len, len - 1), PROTO_FATAL);
    assert_string_equal(p.rq.err, "Protocol error: request too large");
    /* decided as soon as the length is read, without the payload */
    s = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n";
    assert_int_equal(parse_max(&p, s, strlen(s), 1 << 20), PROTO_FATAL);
    assert_string_equal(p.rq.err, "Protocol error: request too large");
    /* also for a streamed value */
    assert_int_equal(parse_max(&p, s, strlen(s), 200000000), PROTO_OK);
    assert_int_equal(p.rq.body, 100000002);
    /* and for an inline line */
    s = "SET k value\r\n";
    assert_int_equal(parse_max(&p, s, strlen(s), 10), PROTO_FATAL);
    assert_string_equal(p.rq.err, "Protocol error: request too large");
    assert_int_equal(parse_max(&p, s, strlen(s), 13), PROTO_OK);
    /* an inline line is refused once it is longer than the limit, before
     * its line end comes */
    assert_int_equal(parse_max(&p, "SET k value", 11, 10), PROTO_FATAL);
    assert_string_equal(p.rq.err, "Protocol error: request too large");
    assert_int_equal(parse_max(&p, "SET k valu", 10, 10), PROTO_AGAIN);
}

static void
test_streaming(void **state)
{
    const size_t vlen = 1024 * 1024;
    const char *head = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1048576\r\n";
    size_t hlen = strlen(head), total = hlen + vlen + 2, n;
    char *buf = malloc(total + 16);
    struct parsed p;

    (void)state;
    assert_non_null(buf);
    memcpy(buf, head, hlen);
    memset(buf + hlen, 'v', vlen);
    memcpy(buf + hlen + vlen, "\r\n", 2);

    /* delivered in pieces: nothing until the value's length is in, then
     * the head alone is parsed whatever else has arrived */
    for (n = 0; n < hlen; n++)
        assert_int_equal(parse(&p, buf, n), PROTO_AGAIN);
    for (n = hlen; n <= total; n += n < hlen + 64 ? 1 : 65521) {
        assert_int_equal(parse(&p, buf, n), PROTO_OK);
        assert_int_equal(p.rq.head, hlen);
        assert_int_equal(p.rq.body, vlen + 2);
        assert_int_equal(p.rq.nargs, 3);
        assert_int_equal(p.rq.args[2].off, hlen);
        assert_int_equal(p.rq.args[2].len, vlen);
        assert_keys(&p, buf, 1, "key");
        assert_int_equal(p.rq.flags, PROTO_REQ_WRITE | PROTO_REQ_PLAIN);
    }

    /* the value is not last (SET k v EX 10): the request is waited for */
    head = "*5\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1048576\r\n";
    hlen = strlen(head);
    memcpy(buf, head, hlen);
    memset(buf + hlen, 'v', vlen);
    memcpy(buf + hlen + vlen, "\r\n$2\r\nEX\r\n$2\r\n10\r\n", 18);
    total = hlen + vlen + 18;
    assert_int_equal(parse(&p, buf, total - 1), PROTO_AGAIN);
    assert_int_equal(parse(&p, buf, total), PROTO_OK);
    assert_int_equal(p.rq.head, total);
    assert_int_equal(p.rq.body, 0);

    /* a multi-key command never streams (MSET) */
    head = "*3\r\n$4\r\nMSET\r\n$1\r\nk\r\n$1048576\r\n";
    hlen = strlen(head);
    memcpy(buf, head, hlen);
    assert_int_equal(parse(&p, buf, hlen + 10), PROTO_AGAIN);

    /* below PROTO_STREAM_MIN: parsed whole */
    n = sprintf(buf, "*3\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n$%d\r\n",
                PROTO_STREAM_MIN - 1);
    assert_int_equal(parse(&p, buf, (size_t)n), PROTO_AGAIN);
    n = sprintf(buf, "*3\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n$%d\r\n",
                PROTO_STREAM_MIN);
    assert_int_equal(parse(&p, buf, (size_t)n), PROTO_OK);
    assert_int_equal(p.rq.body, PROTO_STREAM_MIN + 2);

    /* a wrong arity is never streamed: it is refused once whole */
    n = sprintf(buf, "*2\r\n$4\r\nINCR\r\n$%d\r\n", PROTO_STREAM_MIN);
    assert_int_equal(parse(&p, buf, (size_t)n), PROTO_AGAIN);
    free(buf);
}

static void
test_grow(void **state)
{
    const char *s = "*11\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
                    "$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n"
                    "$1\r\ni\r\n$1\r\nj\r\n";
    struct proto_span args[16], keys[16];
    char scratch[64];
    struct proto_request rq = {
        .args = args, .argcap = 2, .keys = keys, .keycap = 2};
    size_t n, len = strlen(s);

    (void)state;
    /* not before the request is whole: growth follows bytes received */
    for (n = 0; n < len; n++)
        assert_int_equal(proto_redis.parse_request(s, n, &rq), PROTO_AGAIN);
    assert_int_equal(proto_redis.parse_request(s, len, &rq), PROTO_KEYS);
    assert_int_equal(rq.nargs, 11);
    assert_int_equal(rq.nkeys, 11); /* an upper bound while args are short */
    rq.argcap = 11;
    assert_int_equal(proto_redis.parse_request(s, len, &rq), PROTO_KEYS);
    assert_int_equal(rq.nkeys, 10); /* exact once the args fit */
    rq.keycap = 10;
    assert_int_equal(proto_redis.parse_request(s, len, &rq), PROTO_OK);
    assert_int_equal(rq.nkeys, 10);
    assert_int_equal(rq.head, len);
    assert_memory_equal(s + keys[9].off, "j", 1);

    /* an inline request needs room for its re-encoding */
    s = "MGET aaaa bbbb cccc\r\n";
    rq.scratch = scratch;
    rq.scratchcap = 8;
    assert_int_equal(proto_redis.parse_request(s, strlen(s), &rq), PROTO_KEYS);
    assert_int_equal(rq.scratchlen, 44);
    rq.scratchcap = 44;
    assert_int_equal(proto_redis.parse_request(s, strlen(s), &rq), PROTO_OK);
    assert_int_equal(rq.scratchlen, 44);
    assert_memory_equal(scratch,
                        "*4\r\n$4\r\nMGET\r\n$4\r\naaaa\r\n$4\r\nbbbb\r\n"
                        "$4\r\ncccc\r\n",
                        44);

    /* no arrays at all: the same protocol */
    memset(&rq, 0, sizeof(rq));
    assert_int_equal(proto_redis.parse_request("GET a\r\n", 7, &rq),
                     PROTO_KEYS);
    assert_int_equal(rq.nargs, 2);
}

/* ---- what a member connection says first -------------------------------- */

static void
test_prelude(void **state)
{
    static const char want[] = "*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n"
                               "*2\r\n$6\r\nSELECT\r\n$2\r\n12\r\n";
    char out[128];
    unsigned replies = 9;

    (void)state;
    assert_int_equal(redis_prelude(out, sizeof(out), NULL, 0, &replies), 0);
    assert_int_equal(replies, 0);
    assert_int_equal(redis_prelude(out, sizeof(out), "s3cret", 12, &replies),
                     (int)sizeof(want) - 1);
    assert_int_equal(replies, 2);
    assert_memory_equal(out, want, sizeof(want) - 1);
    /* exactly the room it needs, and one byte less */
    assert_int_equal(
        redis_prelude(out, sizeof(want) - 1, "s3cret", 12, &replies),
        (int)sizeof(want) - 1);
    assert_int_equal(
        redis_prelude(out, sizeof(want) - 2, "s3cret", 12, &replies), -1);
    assert_int_equal(redis_prelude(out, sizeof(out), NULL, 7, &replies), 23);
    assert_memory_equal(out, "*2\r\n$6\r\nSELECT\r\n$1\r\n7\r\n", 23);
    assert_int_equal(replies, 1);
}

/* ---- resuming a request that comes in pieces ----------------------------- */

/* An MSET of 2000 arguments fed 100 bytes more at a time, as the engine
 * feeds a growing input: each call goes on from the progress of the one
 * before (the arguments it already verified stay verified), and the last
 * one parses exactly as the whole request does in one call. */
static void
test_resume(void **state)
{
    enum { NARGS = 2001 };
    static struct proto_span args[NARGS], keys[NARGS], whole[NARGS];
    struct proto_progress progress = {0};
    struct proto_request rq = {
        .args = args, .argcap = NARGS, .keys = keys, .keycap = NARGS};
    char *buf = malloc(64 * NARGS);
    size_t len, n, done = 0, i;

    (void)state;
    assert_non_null(buf);
    len = (size_t)sprintf(buf, "*%d\r\n$4\r\nMSET\r\n", NARGS);
    for (i = 1; i < NARGS; i++)
        len += (size_t)sprintf(buf + len, "$4\r\nk%03zu\r\n", i % 1000);
    assert_int_equal(proto_redis.parse_request(buf, len, &rq), PROTO_OK);
    memcpy(whole, args, sizeof(whole));
    memset(args, 0, sizeof(args));
    rq.progress = &progress;
    for (n = 100; n < len; n += 100) {
        assert_int_equal(proto_redis.parse_request(buf, n, &rq), PROTO_AGAIN);
        /* every argument wholly inside the first n bytes is verified */
        assert_true(progress.done >= done);
        done = progress.done;
        assert_true(progress.pos <= n);
        assert_true(done == NARGS - 1 || progress.pos + 11 > n);
    }
    assert_int_equal(proto_redis.parse_request(buf, len, &rq), PROTO_OK);
    assert_int_equal(rq.head, len);
    assert_int_equal(rq.nargs, NARGS);
    assert_int_equal(rq.nkeys, (NARGS - 1) / 2);
    assert_memory_equal(args, whole, sizeof(whole));
    free(buf);
}

/* ---- every prefix of every request -------------------------------------- */

static const struct {
    const char *s;
    size_t len; /* 0: strlen */
    uint64_t max;
} requests[] = {
    {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n", 0, 0},
    {"*2\r\n$3\r\nGET\r\n$0\r\n\r\n", 0, 0},
    {"*1\r\n$4\r\nPING\r\n", 0, 0},
    {"*0\r\n", 0, 0},
    {"*-1\r\n", 0, 0},
    {"*4\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", 0, 0},
    {"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n", 0, 0},
    {"*5\r\n$4\r\nEVAL\r\n$1\r\ns\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\nb\r\n", 0, 0},
    {"*1\r\n$3\r\nGET\r\n", 0, 0},
    {"*2\r\n$3\r\nFOO\r\n$1\r\na\r\n", 0, 0},
    {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n", 0, 0},
    {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n", 0, 20},
    {"SET k v\r\n", 0, 0},
    {"PING\n", 0, 0},
    {"\r\n", 0, 0},
    {"ECHO \"a\\x41 b\" 'c\\'d'\r\n", 0, 0},
    {"GET a\0b\r\n", 9, 0},
    {"SET \"a\r\n", 0, 0},
    {"*x\r\n", 0, 0},
    {"*2\r\n$3\r\nGET\r\n:1\r\n", 0, 0},
    {"*1\r\n$-1\r\n", 0, 0},
    {"*1\r\n$4\r\nPINGxx", 0, 0},
    {"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", 0, 0},
    {"XREAD COUNT 1 STREAMS a b 0 0\r\n", 0, 0},
    {"OBJECT ENCODING k\r\n", 0, 0},
    {"POST / HTTP/1.1\r\n", 0, 0},
    {"SET key value\r\n", 0, 8},
    {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n", 0, 4096},
    {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", 0, 8},
    {"*12\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
     "$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n$1\r\ni\r\n"
     "$1\r\nj\r\n$1\r\nk\r\n",
     0, 0},
};

static void
assert_same(const struct parsed *a, const struct parsed *b, const char *buf)
{
    size_t i;

    assert_int_equal(a->st, b->st);
    if (a->st == PROTO_FATAL) {
        assert_string_equal(a->rq.err, b->rq.err);
        return;
    }
    assert_int_equal(a->rq.head, b->rq.head);
    assert_int_equal(a->rq.body, b->rq.body);
    assert_int_equal(a->rq.command, b->rq.command);
    assert_int_equal(a->rq.flags, b->rq.flags);
    assert_int_equal(a->rq.nargs, b->rq.nargs);
    assert_int_equal(a->rq.nkeys, b->rq.nkeys);
    assert_int_equal(a->rq.scratchlen, b->rq.scratchlen);
    assert_ptr_equal(a->rq.err, b->rq.err);
    for (i = 0; i < a->rq.nargs; i++) {
        assert_int_equal(a->rq.args[i].off, b->rq.args[i].off);
        assert_int_equal(a->rq.args[i].len, b->rq.args[i].len);
    }
    for (i = 0; i < a->rq.nkeys; i++) {
        assert_int_equal(a->rq.keys[i].off, b->rq.keys[i].off);
        assert_int_equal(a->rq.keys[i].len, b->rq.keys[i].len);
    }
    assert_memory_equal(a->scratch, b->scratch, a->rq.scratchlen);
    (void)buf;
}

static void
test_every_prefix(void **state)
{
    static struct parsed whole, part;
    size_t i, n, len;

    (void)state;
    for (i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
        bool seen = false;
        const char *s = requests[i].s;

        len = requests[i].len ? requests[i].len : strlen(s);
        parse_max(&whole, s, len, requests[i].max);
        assert_int_not_equal(whole.st, PROTO_AGAIN);
        for (n = 0; n <= len; n++) {
            parse_max(&part, s, n, requests[i].max);
            if (whole.st != PROTO_FATAL) {
                /* nothing until the request (or its head) is in */
                if (n < whole.rq.head)
                    assert_int_equal(part.st, PROTO_AGAIN);
                else
                    assert_same(&part, &whole, s);
            } else if (part.st == PROTO_AGAIN) {
                /* an error, once seen, stays */
                assert_false(seen);
            } else {
                assert_same(&part, &whole, s);
                seen = true;
            }
        }
    }
}

/* ---- replies ------------------------------------------------------------ */

static int
reply(const char *s, size_t len, struct proto_reply *rp)
{
    return proto_redis.parse_reply(s, len, NULL, rp);
}

/* <s> is one whole reply: every shorter prefix is PROTO_AGAIN. */
static void
whole_reply(const char *s, size_t len, bool error, bool failure)
{
    struct proto_reply rp;
    size_t n;

    for (n = 0; n < len; n++)
        assert_int_equal(reply(s, n, &rp), PROTO_AGAIN);
    assert_int_equal(reply(s, len, &rp), PROTO_OK);
    assert_int_equal(rp.len, len);
    assert_int_equal(rp.body, 0);
    assert_int_equal(rp.error, error);
    assert_int_equal(rp.member_failure, failure);
}

static void
bad_reply(const char *s, size_t len)
{
    struct proto_reply rp;
    size_t n;
    bool seen = false;

    for (n = 0; n <= len; n++) {
        int st = reply(s, n, &rp);

        if (st == PROTO_AGAIN) {
            assert_false(seen);
            continue;
        }
        assert_int_equal(st, PROTO_FATAL);
        seen = true;
    }
    assert_true(seen);
}

#define WHOLE(s, e, f) whole_reply(s, sizeof(s) - 1, e, f)
#define BAD(s) bad_reply(s, sizeof(s) - 1)

static void
test_replies(void **state)
{
    struct proto_reply rp;
    char buf[512];
    size_t i, n;

    (void)state;
    WHOLE("+OK\r\n", false, false);
    WHOLE("+\r\n", false, false);
    WHOLE(":0\r\n", false, false);
    WHOLE(":-42\r\n", false, false);
    WHOLE("$3\r\nfoo\r\n", false, false);
    WHOLE("$0\r\n\r\n", false, false);
    WHOLE("$-1\r\n", false, false);
    WHOLE("$4\r\n\r\n\r\n\r\n", false, false); /* a value may hold CRLF */
    WHOLE("*-1\r\n", false, false);
    WHOLE("*0\r\n", false, false);
    WHOLE("*3\r\n$1\r\na\r\n$-1\r\n:7\r\n", false, false);
    WHOLE("*2\r\n*2\r\n+a\r\n*0\r\n*1\r\n*-1\r\n", false, false);
    WHOLE("*2\r\n$1\r\n0\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", false,
          false); /* a SCAN reply */
    WHOLE("*1\r\n-ERR inside\r\n", false, false);

    WHOLE("-ERR unknown command\r\n", true, false);
    WHOLE("-WRONGTYPE Operation against a key\r\n", true, false);
    WHOLE("-LOADING Redis is loading the dataset in memory\r\n", true, true);
    WHOLE("-OOM command not allowed\r\n", true, true);
    WHOLE("-BUSY Redis is busy running a script\r\n", true, true);
    WHOLE("-MASTERDOWN Link with MASTER is down\r\n", true, true);
    WHOLE("-BUSYKEY Target key name already exists.\r\n", true, false);
    WHOLE("-LOADINGX no\r\n", true, false);
    WHOLE("-OOM\r\n", true, true);

    /* a reply followed by the next one: only the first is measured */
    assert_int_equal(reply("+OK\r\n:1\r\n", 9, &rp), PROTO_OK);
    assert_int_equal(rp.len, 5);

    BAD("?\r\n");
    BAD("%1\r\n"); /* RESP3 never reaches us */
    BAD("+OK\rX\r\n");
    BAD("+O\nK\r\n");
    BAD(":abc\r\n");
    BAD(":01\r\n");
    BAD(":\r\n");
    BAD("$-2\r\n");
    BAD("$3\r\nfooXX");
    BAD("*-2\r\n");
    BAD("*2147483648\r\n");
    BAD("*1\r\n!\r\n");
    BAD("$99999999999999999999\r\n");

    /* a large count costs nothing until its elements come */
    assert_int_equal(reply("*2147483647\r\n", 13, &rp), PROTO_AGAIN);

    /* nesting: 64 deep is fine, 65 is refused, without recursion */
    for (n = 0, i = 0; i < 64; i++)
        n += (size_t)sprintf(buf + n, "*1\r\n");
    n += (size_t)sprintf(buf + n, ":1\r\n");
    assert_int_equal(reply(buf, n, &rp), PROTO_OK);
    assert_int_equal(rp.len, n);
    for (n = 0, i = 0; i < 65; i++)
        n += (size_t)sprintf(buf + n, "*1\r\n");
    assert_int_equal(reply(buf, n, &rp), PROTO_FATAL);
}

static void
test_reply_streaming(void **state)
{
    const size_t vlen = PROTO_STREAM_MIN;
    char *buf = malloc(vlen + 64);
    struct proto_reply rp;
    size_t h, n;

    (void)state;
    assert_non_null(buf);
    h = (size_t)sprintf(buf, "$%zu\r\n", vlen);
    memset(buf + h, 'x', vlen);
    memcpy(buf + h + vlen, "\r\n", 2);
    for (n = 0; n < h; n++)
        assert_int_equal(reply(buf, n, &rp), PROTO_AGAIN);
    for (n = h; n <= h + vlen + 2; n += 97) {
        assert_int_equal(reply(buf, n, &rp), PROTO_OK);
        assert_int_equal(rp.len, h);
        assert_int_equal(rp.body, vlen + 2);
        assert_false(rp.error);
    }
    /* one byte less: parsed whole */
    h = (size_t)sprintf(buf, "$%zu\r\n", vlen - 1);
    memset(buf + h, 'x', vlen - 1);
    memcpy(buf + h + vlen - 1, "\r\n", 2);
    assert_int_equal(reply(buf, h + vlen, &rp), PROTO_AGAIN);
    assert_int_equal(reply(buf, h + vlen + 1, &rp), PROTO_OK);
    assert_int_equal(rp.len, h + vlen + 1);
    assert_int_equal(rp.body, 0);
    /* inside an array a value is never streamed */
    h = (size_t)sprintf(buf, "*1\r\n$%zu\r\n", vlen);
    assert_int_equal(reply(buf, h, &rp), PROTO_AGAIN);
    free(buf);
}

static void
test_reply_elements(void **state)
{
    const char *s = "*4\r\n$1\r\na\r\n$-1\r\n*2\r\n:1\r\n+x\r\n$3\r\nbcd\r\n";
    struct proto_span out[4];

    (void)state;
    assert_int_equal(redis_reply_elements(s, strlen(s), out, 4), 4);
    assert_int_equal(out[0].off, 4);
    assert_int_equal(out[0].len, 7);
    assert_int_equal(out[1].off, 11);
    assert_int_equal(out[1].len, 5);
    assert_int_equal(out[2].off, 16);
    assert_int_equal(out[2].len, 12); /* the nested array whole */
    assert_memory_equal(s + out[3].off, "$3\r\nbcd\r\n", out[3].len);
    /* fewer entries than elements: the count says how many to make room
     * for, the first ones are filled */
    memset(out, 0, sizeof(out));
    assert_int_equal(redis_reply_elements(s, strlen(s), out, 2), 4);
    assert_int_equal(out[1].off, 11);
    assert_int_equal(out[2].len, 0);
    assert_int_equal(redis_reply_elements("*0\r\n", 4, out, 4), 0);
    assert_int_equal(redis_reply_elements("*-1\r\n", 5, out, 4), 0);
    assert_int_equal(redis_reply_elements(s, strlen(s) - 1, out, 4), -1);
    assert_int_equal(redis_reply_elements("$1\r\na\r\n", 7, out, 4), -1);
    assert_int_equal(redis_reply_elements("*1\r\n?\r\n", 7, out, 4), -1);
    assert_int_equal(redis_reply_elements("", 0, out, 4), -1);
}

static void
test_reply_integer(void **state)
{
    long long v = 99;

    (void)state;
    assert_int_equal(redis_reply_integer(":12\r\n", 5, &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(redis_reply_integer(":-3\r\n", 5, &v), 0);
    assert_int_equal(v, -3);
    assert_int_equal(redis_reply_integer(":9223372036854775807\r\n", 22, &v),
                     0);
    assert_int_equal(v, 9223372036854775807LL);
    v = 99;
    assert_int_equal(redis_reply_integer("+OK\r\n", 5, &v), -1);
    assert_int_equal(redis_reply_integer(":1x\r\n", 5, &v), -1);
    assert_int_equal(redis_reply_integer(":1\r", 3, &v), -1);
    assert_int_equal(redis_reply_integer("", 0, &v), -1);
    assert_int_equal(v, 99);
}

/* ---- error replies and the probe ---------------------------------------- */

static void
assert_error(int kind, const char *msg, const char *want)
{
    char out[128];
    size_t n = proto_redis.error_reply(out, sizeof(out), kind, msg);

    assert_int_equal(n, strlen(want));
    assert_memory_equal(out, want, n);
}

static void
test_error_reply(void **state)
{
    char out[16];
    size_t n;

    (void)state;
    assert_error(PROTO_ERR_REFUSED, NULL, "-ERR Connection refused\r\n");
    assert_error(PROTO_ERR_TIMEOUT, NULL, "-ERR Connection timed out\r\n");
    assert_error(PROTO_ERR_CLOSED, NULL, "-ERR Connection reset by peer\r\n");
    assert_error(PROTO_ERR_NO_MEMBER, NULL, "-ERR no member available\r\n");
    assert_error(PROTO_ERR_NO_MEMBER, "pool cache is empty",
                 "-ERR no member available: pool cache is empty\r\n");
    assert_error(PROTO_ERR_REQUEST,
                 "wrong number of arguments for 'get' command",
                 "-ERR wrong number of arguments for 'get' command\r\n");
    assert_error(PROTO_ERR_REQUEST, "Protocol error: invalid bulk length",
                 "-ERR Protocol error: invalid bulk length\r\n");
    assert_error(PROTO_ERR_REQUEST,
                 "CROSSSERVER Keys in request don't hash to the same member",
                 "-CROSSSERVER Keys in request don't hash to the same "
                 "member\r\n");
    assert_error(PROTO_ERR_REQUEST, "OK", "-ERR OK\r\n");
    assert_error(PROTO_ERR_REQUEST, "NO way", "-ERR NO way\r\n");
    assert_error(PROTO_ERR_REQUEST, NULL, "-ERR invalid request\r\n");
    assert_error(PROTO_ERR_REQUEST, "two\r\nlines\n", "-ERR two  lines \r\n");

    /* cut to fit, still one terminated line */
    n = proto_redis.error_reply(out, 10, PROTO_ERR_REFUSED, NULL);
    assert_int_equal(n, 10);
    assert_memory_equal(out, "-ERR Con\r\n", 10);
    n = proto_redis.error_reply(out, 3, PROTO_ERR_REFUSED, NULL);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "-\r\n", 3);
    assert_int_equal(proto_redis.error_reply(out, 2, PROTO_ERR_REFUSED, NULL),
                     0);
}

static void
test_probe(void **state)
{
    struct parsed p;

    (void)state;
    assert_string_equal(proto_redis.name, "redis");
    assert_int_equal(proto_redis.probe_len, 14);
    assert_memory_equal(proto_redis.probe, "*1\r\n$4\r\nPING\r\n", 14);
    /* the probe is a request we parse ourselves */
    assert_int_equal(parse(&p, proto_redis.probe, proto_redis.probe_len),
                     PROTO_OK);
    assert_int_equal(p.rq.command, cmd("ping"));
    assert_int_equal(proto_redis.probe_reply("+PONG\r\n", 7), 1);
    assert_int_equal(proto_redis.probe_reply("+PO", 3), 0);
    assert_int_equal(proto_redis.probe_reply("", 0), 0);
    assert_int_equal(proto_redis.probe_reply("-LOADING Redis is loading", 25),
                     -1);
    assert_int_equal(proto_redis.probe_reply("-NOAUTH Authentication", 22), -1);
    assert_int_equal(proto_redis.probe_reply("+PONGX", 6), -1);
    assert_int_equal(proto_redis.probe_reply("+OK\r\n", 5), -1);
    assert_null(proto_redis.conn_key);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_sorted_and_found),
        cmocka_unit_test(test_table_classes),
        cmocka_unit_test(test_multibulk),
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_inline),
        cmocka_unit_test(test_skipped),
        cmocka_unit_test(test_keys_by_class),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_size_limit),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_prelude),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_replies),
        cmocka_unit_test(test_reply_streaming),
        cmocka_unit_test(test_reply_elements),
        cmocka_unit_test(test_reply_integer),
        cmocka_unit_test(test_error_reply),
        cmocka_unit_test(test_probe),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

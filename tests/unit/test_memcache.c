/* test_memcache.c -- mode memcache's pure functions: requests (every
 * command's words and keys, noreply and q, values whole, too large,
 * badly ended, memcached's refusals and their texts, the binary protocol,
 * long lines, array growth, every prefix of every request), replies
 * (VALUE blocks to END, VA values, lines, errors, a quiet request's reply
 * up to MN, malformed), VALUE block walking, base64 keys, error replies
 * and the health probe.
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

#include "proto/memcache.h"
#include "proto/proto.h"

#define NSPANS 32

struct parsed {
    struct proto_request rq;
    struct proto_span args[NSPANS];
    struct proto_span keys[NSPANS];
    struct proto_progress progress;
    int st;
};

static int
parse_n(struct parsed *p, const char *buf, size_t len, uint64_t value_max)
{
    memset(p, 0, sizeof(*p));
    p->rq.args = p->args;
    p->rq.argcap = NSPANS;
    p->rq.keys = p->keys;
    p->rq.keycap = NSPANS;
    p->rq.max = 1024 * 1024;
    p->rq.value_max = value_max;
    p->st = proto_memcache.parse_request(buf, len, &p->rq);
    return p->st;
}

static int
parse(struct parsed *p, const char *s)
{
    return parse_n(p, s, strlen(s), 0);
}

static void
assert_key(const struct parsed *p, const char *buf, size_t i, const char *key)
{
    assert_true(i < p->rq.nkeys);
    assert_int_equal(p->rq.keys[i].len, strlen(key));
    assert_memory_equal(buf + p->rq.keys[i].off, key, strlen(key));
}

/* Every strict prefix of <s> is incomplete (never a wrong answer). */
static void
assert_prefixes_again(const char *s, size_t len)
{
    struct parsed p;

    for (size_t n = 0; n < len; n++) {
        parse_n(&p, s, n, 0);
        if (p.st != PROTO_AGAIN)
            fail_msg("prefix of %zu bytes of \"%.*s\": status %d", n, (int)len,
                     s, p.st);
    }
}

static void
test_get_keys(void **state)
{
    static const char get[] = "get a bb ccc\r\n";
    static const char gat[] = "gat 100 x y\r\n";
    struct parsed p;

    (void)state;
    assert_int_equal(parse(&p, get), PROTO_OK);
    assert_int_equal(p.rq.command, MC_GET);
    assert_int_equal(p.rq.head, strlen(get));
    assert_int_equal(p.rq.nkeys, 3);
    assert_key(&p, get, 0, "a");
    assert_key(&p, get, 2, "ccc");
    assert_true(p.rq.flags & PROTO_REQ_SPLIT);
    assert_int_equal(parse(&p, "gets one\n"), PROTO_OK); /* "\n" alone */
    assert_int_equal(p.rq.command, MC_GETS);
    assert_int_equal(p.rq.nkeys, 1);
    assert_false(p.rq.flags & PROTO_REQ_SPLIT);
    assert_int_equal(parse(&p, gat), PROTO_OK);
    assert_int_equal(p.rq.command, MC_GAT);
    assert_int_equal(p.rq.nkeys, 2); /* the exptime is not a key */
    assert_key(&p, gat, 0, "x");
    assert_int_equal(parse(&p, "get   spaced   \r\n"), PROTO_OK);
    assert_int_equal(p.rq.nkeys, 1);
    /* no key: memcached's ERROR */
    assert_int_equal(parse(&p, "get\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    assert_int_equal(parse(&p, "gat\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    /* gat's exptime is read first: none is an error, no key finds none */
    assert_int_equal(parse(&p, "gat a\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR invalid exptime argument");
    assert_int_equal(parse(&p, "gats -1\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_LOCAL);
    assert_int_equal(p.rq.nkeys, 0);
    assert_prefixes_again(get, strlen(get));
}

static void
test_key_length(void **state)
{
    char line[400];
    struct parsed p;

    (void)state;
    memset(line, 'k', sizeof(line));
    memcpy(line, "get ", 4);
    memcpy(line + 4 + MC_KEY_MAX, "\r\n", 2);
    assert_int_equal(parse_n(&p, line, 4 + MC_KEY_MAX + 2, 0), PROTO_OK);
    memcpy(line + 4 + MC_KEY_MAX + 1, "\r\n", 2);
    assert_int_equal(parse_n(&p, line, 4 + MC_KEY_MAX + 3, 0), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR bad command line format");
    /* a set with a long key: refused, its value not read (memcached) */
    memcpy(line, "set ", 4);
    memcpy(line + 4 + MC_KEY_MAX + 1, " 0 0 1\r\nx\r\n", 11);
    assert_int_equal(parse_n(&p, line, 4 + MC_KEY_MAX + 12, 0), PROTO_INVALID);
    assert_int_equal(p.rq.head, 4 + MC_KEY_MAX + 1 + 8);
}

static void
test_storage(void **state)
{
    static const char set[] = "set k 5 0 3\r\nabc\r\n";
    static const char cas[] = "cas k 0 0 1 99 noreply\r\nz\r\n";
    struct parsed p;

    (void)state;
    assert_int_equal(parse(&p, set), PROTO_OK);
    assert_int_equal(p.rq.command, MC_SET);
    assert_int_equal(p.rq.head, strlen(set)); /* line and value */
    assert_int_equal(p.rq.body, 0);
    assert_key(&p, set, 0, "k");
    assert_true(p.rq.flags & PROTO_REQ_WRITE);
    assert_false(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_prefixes_again(set, strlen(set));
    assert_int_equal(parse(&p, cas), PROTO_OK);
    assert_int_equal(p.rq.command, MC_CAS);
    assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
    /* a sixth word that is not noreply is ignored, as memcached does */
    assert_int_equal(parse(&p, "set k 0 0 1 2\r\nx\r\n"), PROTO_OK);
    assert_false(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_int_equal(parse(&p, "append k 0 0 +1\r\nx\r\n"), PROTO_OK);
    assert_int_equal(parse(&p, "prepend k 0 -5 01\r\nx\r\n"), PROTO_OK);
}

/* PROTO_REQ_PLAIN: a text command on one key whose reply the client gets
 * as it is -- the engine routes it without the mode. */
static void
test_plain(void **state)
{
    static const char *const plain[] = {
        "set k 0 0 1\r\nx\r\n",
        "cas k 0 0 1 7\r\nx\r\n",
        "append k 0 0 1\r\nx\r\n",
        "incr k 1\r\n",
        "decr k 1\r\n",
        "delete k\r\n",
        "touch k 10\r\n",
    };
    static const char *const not_plain[] = {
        "set k 0 0 1 noreply\r\nx\r\n", /* sent without the word */
        "delete k noreply\r\n",
        "get k\r\n", /* the mode batches gets */
        "gets k\r\n",
        "get a b\r\n",
        "mg k v\r\n", /* meta: the key may be base64 */
        "ms k 1\r\nx\r\n",
        "md k q\r\n",
        "version\r\n",
        "flush_all\r\n",
    };
    struct parsed p;

    (void)state;
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        assert_int_equal(parse(&p, plain[i]), PROTO_OK);
        assert_true(p.rq.flags & PROTO_REQ_PLAIN);
        assert_int_equal(p.rq.nkeys, 1);
    }
    for (size_t i = 0; i < sizeof(not_plain) / sizeof(not_plain[0]); i++) {
        assert_int_equal(parse(&p, not_plain[i]), PROTO_OK);
        assert_false(p.rq.flags & PROTO_REQ_PLAIN);
    }
    /* refused: a key too long */
    {
        char line[400];
        snprintf(line, sizeof(line), "incr %0300d 1\r\n", 0);
        parse(&p, line);
        assert_false(p.rq.flags & PROTO_REQ_PLAIN);
    }
}

static void
test_storage_refusals(void **state)
{
    struct parsed p;
    static const char *const format[] = {
        "set k 0 0 1x\r\nx\r\n",  "set k -1 0 1\r\nx\r\n",
        "set k 0 x 1\r\nx\r\n",   "set k 0 0 -1\r\nx\r\n",
        "cas k 0 0 1 c\r\nx\r\n", "set k 0 0 4294967296\r\nx\r\n",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(format) / sizeof(format[0]); i++) {
        const char *nl = strchr(format[i], '\n');
        assert_int_equal(parse(&p, format[i]), PROTO_INVALID);
        assert_string_equal(p.rq.err, "CLIENT_ERROR bad command line format");
        /* the value is not read: the next line is the client's next */
        assert_int_equal(p.rq.head, (size_t)(nl - format[i]) + 1);
    }
    /* wrong word counts: ERROR */
    assert_int_equal(parse(&p, "set k 0 0\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    assert_int_equal(parse(&p, "set k 0 0 1 noreply extra\r\nx\r\n"),
                     PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    /* noreply hides the mistake (memcached has seen it first) */
    assert_int_equal(parse(&p, "set k 0 0 1x noreply\r\nx\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_int_equal(p.rq.head, strlen("set k 0 0 1x noreply\r\n"));
    /* a value that does not end in \r\n: all of it is read, then refused */
    assert_int_equal(parse(&p, "set k 0 0 1\r\nxyz\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR bad data chunk");
    assert_int_equal(p.rq.head, strlen("set k 0 0 1\r\nxyz"));
}

static void
test_too_large(void **state)
{
    static const char set[] = "set k 0 0 2000\r\n";
    static const char ms[] = "ms k 11 T0\r\n";
    struct parsed p;

    (void)state;
    /* refused as memcached refuses it, the value dropped as it comes */
    assert_int_equal(parse_n(&p, set, strlen(set), 1000), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_string_equal(p.rq.err, "SERVER_ERROR object too large for cache");
    assert_int_equal(p.rq.head, strlen(set));
    assert_int_equal(p.rq.body, 2002);
    assert_int_equal(parse_n(&p, ms, strlen(ms), 10), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_int_equal(p.rq.body, 13);
    /* quiet mode hides no error: too large, a bad chunk */
    assert_int_equal(parse_n(&p, "ms k 11 q\r\n", 11, 10), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_false(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_int_equal(parse(&p, "ms k 1 q\r\nxy\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR bad data chunk");
    /* the default is memcached's 1 MB */
    assert_int_equal(parse(&p, "set k 0 0 1048577\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_int_equal(parse(&p, "set k 0 0 1048576\r\n"), PROTO_AGAIN);
}

static void
test_one_key_commands(void **state)
{
    struct parsed p;
    static const struct {
        const char *line;
        int command;
        bool noreply;
    } ok[] = {
        {"delete k\r\n", MC_DELETE, false},
        {"delete k 0\r\n", MC_DELETE, false},
        {"delete k noreply\r\n", MC_DELETE, true},
        {"incr k 5\r\n", MC_INCR, false},
        {"decr k 5 noreply\r\n", MC_DECR, true},
        {"touch k 10\r\n", MC_TOUCH, false},
        {"touch k 10 noreply\r\n", MC_TOUCH, true},
        {"mg k v f t\r\n", MC_MG, false},
        {"mg k v q\r\n", MC_MG, true},
        {"md k q O1\r\n", MC_MD, true},
        {"ma k N0 J5\r\n", MC_MA, false},
        {"me k\r\n", MC_ME, false},
        {"me k q\r\n", MC_ME, false}, /* me has no quiet mode */
    };

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(parse(&p, ok[i].line), PROTO_OK);
        assert_int_equal(p.rq.command, ok[i].command);
        assert_int_equal(p.rq.nkeys, 1);
        assert_key(&p, ok[i].line, 0, "k");
        assert_int_equal(!!(p.rq.flags & PROTO_REQ_NOREPLY), ok[i].noreply);
        assert_int_equal(p.rq.head, strlen(ok[i].line));
    }
    assert_int_equal(parse(&p, "delete\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    assert_int_equal(parse(&p, "incr k\r\n"), PROTO_INVALID);
    assert_int_equal(parse(&p, "mg\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    assert_int_equal(parse(&p, "me\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR bad command line format");
}

static void
test_meta_set(void **state)
{
    static const char ms[] = "ms k 2 T10 F3 q\r\nhi\r\n";
    char many[256];
    struct parsed p;
    int n;

    (void)state;
    assert_int_equal(parse(&p, ms), PROTO_OK);
    assert_int_equal(p.rq.command, MC_MS);
    assert_int_equal(p.rq.head, strlen(ms));
    assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_key(&p, ms, 0, "k");
    assert_prefixes_again(ms, strlen(ms));
    assert_int_equal(parse(&p, "ms\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    assert_int_equal(parse(&p, "ms k\r\nx\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR bad command line format");
    assert_int_equal(parse(&p, "ms k 1x\r\nx\r\n"), PROTO_INVALID);
    assert_int_equal(parse(&p, "ms k -1\r\nx\r\n"), PROTO_INVALID);
    /* 16 flags pass to the member; 17 are refused without the value */
    n = snprintf(many, sizeof(many), "ms k 1");
    for (int i = 0; i < 16; i++)
        n += snprintf(many + n, sizeof(many) - (size_t)n, " T%d", i);
    n += snprintf(many + n, sizeof(many) - (size_t)n, "\r\nx\r\n");
    assert_int_equal(parse_n(&p, many, (size_t)n, 0), PROTO_OK);
    n -= 5;
    n += snprintf(many + n, sizeof(many) - (size_t)n, " T\r\nx\r\n");
    assert_int_equal(parse_n(&p, many, (size_t)n, 0), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR options flags too long");
}

static void
test_local_and_unknown(void **state)
{
    struct parsed p;

    (void)state;
    assert_int_equal(parse(&p, "version\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_LOCAL);
    assert_int_equal(parse(&p, "mn\r\n"), PROTO_OK);
    assert_int_equal(p.rq.command, MC_MN);
    assert_int_equal(parse(&p, "stats\r\n"), PROTO_OK);
    assert_int_equal(p.rq.command, MC_STATS);
    assert_int_equal(parse(&p, "quit\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_QUIT);
    assert_int_equal(parse(&p, "verbosity 1 noreply\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_int_equal(parse(&p, "verbosity\r\n"), PROTO_INVALID);
    assert_int_equal(parse(&p, "verbosity x\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "CLIENT_ERROR bad command line format");
    assert_int_equal(parse(&p, "verbosity 1 x\r\n"), PROTO_OK);
    /* noreply silences the mistake too, as in memcached */
    assert_int_equal(parse(&p, "verbosity noreply\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_int_equal(parse(&p, "flush_all 10\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_FANOUT);
    assert_int_equal(parse(&p, "flush_all noreply\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_NOREPLY);
    assert_int_equal(parse(&p, "shutdown\r\n"), PROTO_OK);
    assert_true(p.rq.flags & PROTO_REQ_REFUSED);
    /* memcached's commands are case-sensitive; unknown ones are ERROR */
    assert_int_equal(parse(&p, "GET k\r\n"), PROTO_INVALID);
    assert_string_equal(p.rq.err, "ERROR");
    assert_int_equal(p.rq.head, 7);
    assert_int_equal(parse(&p, "\r\n"), PROTO_INVALID); /* an empty line */
    assert_string_equal(p.rq.err, "ERROR");
}

static void
test_binary_and_long_lines(void **state)
{
    static const char bin[] = "\x80\x00\x00\x05";
    char *big = malloc(MC_LINE_MAX + 10);
    struct parsed p;

    (void)state;
    assert_int_equal(parse_n(&p, bin, 4, 0), PROTO_FATAL);
    assert_non_null(strstr(p.rq.err, "binary"));
    assert_non_null(big);
    memset(big, 'x', MC_LINE_MAX + 10);
    assert_int_equal(parse_n(&p, big, MC_LINE_MAX, 0), PROTO_AGAIN);
    assert_int_equal(parse_n(&p, big, MC_LINE_MAX + 10, 0), PROTO_FATAL);
    /* a get of many keys may be longer, up to the request limit */
    memcpy(big, "get ", 4);
    for (size_t i = 8; i < MC_LINE_MAX + 10; i += 8)
        big[i] = ' ';
    assert_int_equal(parse_n(&p, big, MC_LINE_MAX + 10, 0), PROTO_AGAIN);
    free(big);
}

static void
test_grow_and_progress(void **state)
{
    char line[1024];
    struct proto_span args[4], keys[4], *a2, *k2;
    struct proto_progress prog = {0};
    struct proto_request rq = {0};
    int n = snprintf(line, sizeof(line), "get");

    (void)state;
    for (int i = 0; i < 50; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, " key%d", i);
    n += snprintf(line + n, sizeof(line) - (size_t)n, "\r\n");
    rq.args = args;
    rq.argcap = 4;
    rq.keys = keys;
    rq.keycap = 4;
    rq.max = 1 << 20;
    rq.progress = &prog;
    /* in pieces: the search goes on from where it stopped */
    assert_int_equal(proto_memcache.parse_request(line, 100, &rq), PROTO_AGAIN);
    assert_int_equal(prog.pos, 100);
    assert_int_equal(proto_memcache.parse_request(line, (size_t)n, &rq),
                     PROTO_KEYS);
    assert_true(rq.nargs >= 51 && rq.nkeys >= 51);
    a2 = calloc(rq.nargs, sizeof(*a2));
    k2 = calloc(rq.nkeys, sizeof(*k2));
    assert_non_null(a2);
    assert_non_null(k2);
    rq.argcap = rq.nargs;
    rq.keycap = rq.nkeys;
    rq.args = a2;
    rq.keys = k2;
    prog.pos = 0;
    assert_int_equal(proto_memcache.parse_request(line, (size_t)n, &rq),
                     PROTO_OK);
    assert_int_equal(rq.nkeys, 50);
    assert_int_equal(rq.keys[49].len, 5);
    assert_memory_equal(line + rq.keys[49].off, "key49", 5);
    free(a2);
    free(k2);
}

/* ---- replies ------------------------------------------------------------- */

static int
reply(const char *s, size_t len, const struct proto_request *ctx,
      struct proto_reply *rp)
{
    memset(rp, 0, sizeof(*rp));
    return proto_memcache.parse_reply(s, len, ctx, rp);
}

static void
assert_reply(const char *s, bool error)
{
    struct proto_reply rp;
    size_t len = strlen(s);

    assert_int_equal(reply(s, len, NULL, &rp), PROTO_OK);
    assert_int_equal(rp.len, len);
    assert_int_equal(rp.body, 0);
    assert_int_equal(rp.error, error);
    for (size_t n = 0; n < len; n++)
        if (reply(s, n, NULL, &rp) != PROTO_AGAIN)
            fail_msg("reply prefix %zu of \"%s\" is not incomplete", n, s);
}

static void
test_replies(void **state)
{
    struct proto_reply rp;
    static const char two[] = "STORED\r\nEND\r\n";

    (void)state;
    assert_reply("STORED\r\n", false);
    assert_reply("END\r\n", false);
    assert_reply("VALUE a 0 1\r\nx\r\nVALUE bb 5 3 77\r\nEND\r\nEND\r\n",
                 false);
    assert_reply("VA 2 f1 t-1\r\nhi\r\n", false);
    assert_reply("HD O5\r\n", false);
    assert_reply("42\r\n", false);
    assert_reply("ERROR\r\n", true);
    assert_reply("CLIENT_ERROR bad data chunk\r\n", true);
    assert_reply("SERVER_ERROR out of memory\r\n", true);
    assert_reply("VALUE a 0 1\r\nx\r\nSERVER_ERROR out of memory\r\n", true);
    /* one reply at a time */
    assert_int_equal(reply(two, strlen(two), NULL, &rp), PROTO_OK);
    assert_int_equal(rp.len, 8);
    /* malformed: the stream is out of step */
    assert_int_equal(reply("VALUE a 0 x\r\n", 13, NULL, &rp), PROTO_FATAL);
    assert_int_equal(reply("VALUE a 0 1\r\nxyz\r\n", 18, NULL, &rp),
                     PROTO_FATAL);
    assert_int_equal(reply("VA 1\r\nxyz", 9, NULL, &rp), PROTO_FATAL);
    assert_int_equal(reply("VALUE a 0 1\r\nx\r\nSTORED\r\n", 24, NULL, &rp),
                     PROTO_FATAL);
}

static void
test_quiet_reply(void **state)
{
    struct proto_request ctx = {.command = MC_MG, .flags = PROTO_REQ_NOREPLY};
    struct proto_reply rp;
    static const char hidden[] = "MN\r\nHD\r\n";
    static const char shown[] = "VA 1 O9\r\nx\r\nMN\r\n";
    static const char err[] = "CLIENT_ERROR bad\r\nMN\r\n";

    (void)state;
    /* what the member hid: just our mn's MN */
    assert_int_equal(reply(hidden, strlen(hidden), &ctx, &rp), PROTO_OK);
    assert_int_equal(rp.len, 4);
    assert_int_equal(reply(shown, strlen(shown), &ctx, &rp), PROTO_OK);
    assert_int_equal(rp.len, strlen(shown));
    assert_int_equal(reply(shown, strlen(shown) - 1, &ctx, &rp), PROTO_AGAIN);
    assert_int_equal(reply(err, strlen(err), &ctx, &rp), PROTO_OK);
    assert_true(rp.error);
    /* a text request's noreply is taken off: one reply, no MN */
    ctx.command = MC_SET;
    assert_int_equal(reply(shown, strlen(shown), &ctx, &rp), PROTO_OK);
    assert_int_equal(rp.len, strlen("VA 1 O9\r\nx\r\n"));
}

static void
test_value_block(void **state)
{
    static const char r[] = "VALUE key 1 3 55\r\nabc\r\nEND\r\n";
    struct proto_span k;
    size_t block;

    (void)state;
    assert_int_equal(mc_value_block(r, strlen(r), &k, &block), 1);
    assert_int_equal(k.len, 3);
    assert_memory_equal(r + k.off, "key", 3);
    assert_int_equal(block, strlen("VALUE key 1 3 55\r\nabc\r\n"));
    assert_int_equal(mc_value_block(r + block, strlen(r) - block, &k, &block),
                     0);
    assert_int_equal(mc_value_block("VALUE k 0 z\r\n", 13, &k, &block), -1);
}

static void
test_base64(void **state)
{
    unsigned char out[16];

    (void)state;
    assert_int_equal(mc_base64_decode("YWJj", 4, out, sizeof(out)), 3);
    assert_memory_equal(out, "abc", 3);
    assert_int_equal(mc_base64_decode("YQ==", 4, out, sizeof(out)), 1);
    assert_int_equal(out[0], 'a');
    assert_int_equal(mc_base64_decode("YWI=", 4, out, sizeof(out)), 2);
    assert_int_equal(mc_base64_decode("a", 1, out, sizeof(out)), -1);
    assert_int_equal(mc_base64_decode("YW=j", 4, out, sizeof(out)), -1);
    assert_int_equal(mc_base64_decode("Y!==", 4, out, sizeof(out)), -1);
    assert_int_equal(mc_base64_decode("YWJjYWJj", 8, out, 3), -1);
}

/* The encoder (a warm-up's meta keys) round-trips through the decoder. */
static void
test_base64_encode(void **state)
{
    char enc[16];
    unsigned char out[16];

    (void)state;
    assert_int_equal(mc_base64_encode("abc", 3, enc), 4);
    assert_memory_equal(enc, "YWJj", 4);
    assert_int_equal(mc_base64_encode("a", 1, enc), 4);
    assert_memory_equal(enc, "YQ==", 4);
    assert_int_equal(mc_base64_encode("a b\r\n", 5, enc), 8);
    assert_int_equal(mc_base64_decode(enc, 8, out, sizeof(out)), 5);
    assert_memory_equal(out, "a b\r\n", 5);
}

static void
test_error_reply_and_probe(void **state)
{
    char out[128];
    size_t n;

    (void)state;
    n = proto_memcache.error_reply(out, sizeof(out), PROTO_ERR_REFUSED, NULL);
    assert_int_equal(n, strlen("SERVER_ERROR Connection refused\r\n"));
    assert_memory_equal(out, "SERVER_ERROR Connection refused\r\n", n);
    n = proto_memcache.error_reply(out, sizeof(out), PROTO_ERR_TIMEOUT, NULL);
    assert_memory_equal(out, "SERVER_ERROR Connection timed out\r\n", n);
    n = proto_memcache.error_reply(out, sizeof(out), PROTO_ERR_REQUEST,
                                   "ERROR");
    assert_int_equal(n, 7);
    n = proto_memcache.error_reply(out, sizeof(out), PROTO_ERR_REQUEST,
                                   "odd\r\nline");
    assert_memory_equal(out, "CLIENT_ERROR odd  line\r\n", n);
    n = proto_memcache.error_reply(out, 12, PROTO_ERR_REFUSED, NULL);
    assert_int_equal(n, 12); /* cut to fit, still ended */
    assert_memory_equal(out + 10, "\r\n", 2);
    assert_memory_equal(proto_memcache.probe, "version\r\n", 9);
    assert_int_equal(proto_memcache.probe_reply("VERSION 1.6.18\r\n", 16), 1);
    assert_int_equal(proto_memcache.probe_reply("VERSION 1.6", 11), 0);
    assert_int_equal(proto_memcache.probe_reply("ERROR\r\n", 7), -1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_keys),
        cmocka_unit_test(test_key_length),
        cmocka_unit_test(test_storage),
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_storage_refusals),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_one_key_commands),
        cmocka_unit_test(test_meta_set),
        cmocka_unit_test(test_local_and_unknown),
        cmocka_unit_test(test_binary_and_long_lines),
        cmocka_unit_test(test_grow_and_progress),
        cmocka_unit_test(test_replies),
        cmocka_unit_test(test_quiet_reply),
        cmocka_unit_test(test_value_block),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_base64_encode),
        cmocka_unit_test(test_error_reply_and_probe),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

# test_redis_table.py -- the redis mode's command table and key finder
# (src/proto/redis.c) checked against a live redis-server 7.0: every
# command Redis has is in the table and nothing else, with Redis' arity,
# key range and write flag; for every command chashd routes by key, the
# keys our parser takes from a sample request are the keys Redis' own
# COMMAND GETKEYS names; a request with too few arguments is refused with
# the very text Redis answers.
#
# The table is read through a tiny C program compiled here from
# src/proto/redis.c (with the sanitizers of the build under test): it
# prints the table, and parses requests given on stdin with
# proto_redis.parse_request, printing what it found.
# SPDX-License-Identifier: BSD-2-Clause
import os
import shutil
import socket
import subprocess

import pytest

from base_util import can_connect, free_port, wait_for

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

DUMPER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/redis.h"

static const char *kinds[] = {"KEY", "SPLIT_KEYS", "SPLIT_KV", "SAME",
                              "NUMKEYS", "LOCAL", "FANOUT", "REFUSED"};

static void
hex(const char *p, size_t n)
{
    size_t i;

    putchar(' ');
    for (i = 0; i < n; i++)
        printf("%02x", (unsigned char)p[i]);
    if (n == 0)
        putchar('-');
}

int
main(int argc, char **argv)
{
    static struct proto_span args[4096], keys[4096];
    static char scratch[1 << 16];
    char *buf = NULL;
    size_t len = 0, cap = 0, pos = 0, n, i;

    if (argc > 1 && strcmp(argv[1], "table") == 0) {
        for (i = 0; i < redis_command_count(); i++) {
            const struct redis_command *c = redis_command_at((int)i);
            printf("%s %d %s %d %d %d %u\n", c->name, c->arity,
                   kinds[c->kind], c->first, c->last, c->step, c->flags);
        }
        return 0;
    }
    /* requests back to back on stdin: one line out for each */
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            buf = realloc(buf, cap);
            if (buf == NULL)
                return 1;
        }
        n = fread(buf + len, 1, cap - len, stdin);
        if (n == 0)
            break;
        len += n;
    }
    while (pos < len) {
        struct proto_request rq = {.args = args, .argcap = 4096,
                                   .keys = keys, .keycap = 4096,
                                   .scratch = scratch,
                                   .scratchcap = sizeof(scratch)};
        const char *base;
        int st = proto_redis.parse_request(buf + pos, len - pos, &rq);

        base = (rq.flags & PROTO_REQ_INLINE) ? scratch : buf + pos;
        printf("%d %u %d %zu", st, rq.flags, rq.command, rq.nkeys);
        for (i = 0; st == PROTO_OK && i < rq.nkeys; i++)
            hex(base + keys[i].off, keys[i].len);
        printf(" | %s\n", rq.err ? rq.err : "");
        if (st != PROTO_OK)
            break;
        pos += rq.head + rq.body;
    }
    free(buf);
    return 0;
}
"""

PROTO_OK = 0
REQ = {"LOCAL": 1 << 0, "NOKEY": 1 << 1, "SPLIT": 1 << 2, "SAME": 1 << 3,
       "WRITE": 1 << 4, "QUIT": 1 << 6, "FANOUT": 1 << 7,
       "REFUSED": 1 << 8}
REDIS_WRITE = 1 << 0

# Commands that name keys outside Redis' legacy range, and the containers:
# their keys are checked with these requests (each valid for Redis).
SAMPLES = {
    "eval": [["eval", "return 1", "2", "ka", "kb", "x"]],
    "evalsha": [["evalsha", "0" * 40, "1", "ka"]],
    "eval_ro": [["eval_ro", "return 1", "2", "ka", "kb"]],
    "evalsha_ro": [["evalsha_ro", "0" * 40, "1", "ka", "x"]],
    "fcall": [["fcall", "f", "2", "ka", "kb", "x"]],
    "fcall_ro": [["fcall_ro", "f", "1", "ka"]],
    "zunion": [["zunion", "2", "ka", "kb", "withscores"]],
    "zinter": [["zinter", "3", "ka", "kb", "kc"]],
    "zdiff": [["zdiff", "2", "ka", "kb"]],
    "zintercard": [["zintercard", "2", "ka", "kb", "limit", "3"]],
    "sintercard": [["sintercard", "2", "ka", "kb"]],
    "lmpop": [["lmpop", "2", "ka", "kb", "left", "count", "2"]],
    "zmpop": [["zmpop", "1", "ka", "min"]],
    "zunionstore": [["zunionstore", "kd", "2", "ka", "kb", "weights", "1",
                     "2"]],
    "zinterstore": [["zinterstore", "kd", "1", "ka"]],
    "zdiffstore": [["zdiffstore", "kd", "2", "ka", "kb"]],
    "sort": [["sort", "ka"], ["sort", "ka", "store", "kd"],
             ["sort", "ka", "limit", "0", "5", "by", "w_*", "get", "#",
              "store", "kd"],
             ["sort", "ka", "get", "store", "store", "kd"],
             ["sort", "ka", "store", "kd", "store", "ke"]],
    "sort_ro": [["sort_ro", "ka", "by", "w_*"]],
    "georadius": [["georadius", "ka", "15", "37", "200", "km"],
                  ["georadius", "ka", "15", "37", "200", "km", "store",
                   "kd"],
                  ["georadius", "ka", "15", "37", "200", "km", "asc",
                   "storedist", "kd"],
                  ["georadius", "ka", "15", "37", "200", "km", "store",
                   "kd", "storedist", "ke"]],
    "georadiusbymember": [["georadiusbymember", "ka", "m", "200", "km",
                           "store", "kd"]],
    "xread": [["xread", "count", "2", "streams", "ka", "kb", "0", "0"]],
    "xreadgroup": [["xreadgroup", "group", "g", "c", "noack", "streams",
                    "ka", "kb", ">", ">"]],
    "copy": [["copy", "ka", "kb", "replace"]],
    "bitop": [["bitop", "and", "kd", "ka", "kb"]],
    "mset": [["mset", "ka", "1", "kb", "2", "kc", "3"]],
    "msetnx": [["msetnx", "ka", "1", "kb", "2"]],
    "object": [["object", "encoding", "ka"], ["object", "freq", "ka"],
               ["object", "idletime", "ka"], ["object", "refcount", "ka"]],
    "memory": [["memory", "usage", "ka", "samples", "5"]],
    "xinfo": [["xinfo", "stream", "ka", "full"], ["xinfo", "groups", "ka"],
              ["xinfo", "consumers", "ka", "g"]],
    "xgroup": [["xgroup", "create", "ka", "g", "$", "mkstream"],
               ["xgroup", "setid", "ka", "g", "0"],
               ["xgroup", "destroy", "ka", "g"],
               ["xgroup", "createconsumer", "ka", "g", "c"],
               ["xgroup", "delconsumer", "ka", "g", "c"]],
}
CONTAINERS = ("object", "memory", "xinfo", "xgroup")
# Redis leaves the write decision to the script's own flags; a proxy
# cannot see them and must assume a script writes.
WRITE_EXCEPTIONS = {"eval", "evalsha", "fcall"}


def resp(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Redis:
    """A minimal RESP2 client over one connection."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rb")

    def read(self):
        line = self.f.readline()
        assert line.endswith(b"\r\n"), line
        t, v = line[:1], line[1:-2]
        if t == b"+":
            return v.decode()
        if t == b"-":
            return RuntimeError(v.decode())
        if t == b":":
            return int(v)
        if t == b"$":
            n = int(v)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        if t == b"*":
            n = int(v)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise AssertionError("bad reply %r" % line)

    def call(self, *args):
        self.sock.sendall(resp(args))
        return self.read()

    def close(self):
        self.f.close()
        self.sock.close()


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    d = tmp_path_factory.mktemp("redis")
    port = free_port()
    log = open(d / "redis.log", "wb")
    p = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir",
                          str(d)], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    log.close()
    try:
        wait_for(lambda: p.poll() is not None or can_connect(port),
                 timeout=10, what="redis-server")
        assert p.poll() is None, (d / "redis.log").read_text()
        r = Redis(port)
        assert r.call("PING") == "PONG"
        yield r
        r.close()
    finally:
        p.kill()
        p.wait(timeout=5)


@pytest.fixture(scope="module")
def dumper(tmp_path_factory):
    d = tmp_path_factory.mktemp("dumper")
    src = d / "dump.c"
    src.write_text(DUMPER)
    exe = str(d / "dump")
    cc = os.environ.get("CC", "cc")
    flags = ["-std=c11", "-D_GNU_SOURCE", "-g", "-O1",
             "-I" + os.path.join(ROOT, "src"),
             "-I" + os.path.join(ROOT, "include")]
    san = os.environ.get("CHASH_SANITIZE", "")
    if san:
        flags += ["-fsanitize=" + san, "-fno-sanitize-recover=all"]
    r = subprocess.run([cc] + flags + ["-o", exe, str(src),
                                       os.path.join(ROOT, "src/proto/redis.c"),
                                       os.path.join(ROOT, "src/proto/error.c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.fixture(scope="module")
def table(dumper):
    r = subprocess.run([dumper, "table"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        name, arity, kind, first, last, step, flags = line.split()
        out[name] = dict(arity=int(arity), kind=kind, first=int(first),
                         last=int(last), step=int(step), flags=int(flags))
    return out


@pytest.fixture(scope="module")
def live(redis):
    """{name: COMMAND INFO entry} of the running server, subcommands
    under "sub" as {name: entry}."""
    out = {}
    for c in redis.call("COMMAND"):
        name, arity, flags, first, last, step = c[:6]
        sub = {s[0].split("|")[1]: dict(arity=s[1], flags=s[2], first=s[3],
                                        last=s[4], step=s[5])
               for s in c[9]}
        out[name] = dict(arity=arity, flags=flags, first=first, last=last,
                         step=step, sub=sub)
    return out


def parse(dumper, requests):
    """Parse <requests> (bytes, back to back) with proto_redis: one
    (status, flags, command, keys, err) per request."""
    r = subprocess.run([dumper], input=b"".join(requests),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    out = []
    for line in r.stdout.decode().splitlines():
        head, err = line.split(" | ", 1)
        f = head.split()
        keys = [bytes.fromhex(k).decode() if k != "-" else ""
                for k in f[4:]]
        assert len(keys) == int(f[3]) or int(f[0]) != PROTO_OK
        out.append((int(f[0]), int(f[1]), int(f[2]), keys, err))
    assert len(out) == len(requests), r.stdout.decode()
    return out


def generic_sample(name, c):
    """Arguments for a command whose keys are at fixed positions: k1, k2,
    ... one more pair than the minimum for a variadic command."""
    n = c["arity"] if c["arity"] > 0 else -c["arity"] + 2
    return [name] + ["k%d" % i for i in range(1, n)]


def test_every_command_and_nothing_else(table, live, redis):
    assert sorted(table) == sorted(live)
    assert len(table) == redis.call("COMMAND", "COUNT")
    # sorted as redis_command_find's binary search needs
    assert list(table) == sorted(table)


def test_arity_and_write_flag(table, live):
    for name, c in table.items():
        assert c["arity"] == live[name]["arity"], name
        redis_write = "write" in live[name]["flags"]
        if name in WRITE_EXCEPTIONS:
            assert not redis_write and c["flags"] & REDIS_WRITE, name
        else:
            assert bool(c["flags"] & REDIS_WRITE) == redis_write, name


def test_key_ranges(table, live):
    for name, c in table.items():
        lv = live[name]
        if name in CONTAINERS:
            keyed = [s for s in lv["sub"].values() if s["first"] > 0]
            assert keyed, name
            for s in keyed:
                assert (c["first"], c["last"], c["step"]) == \
                    (s["first"], s["last"], s["step"]), name
        elif c["kind"] == "NUMKEYS":
            assert "movablekeys" in lv["flags"], name
        else:
            assert (c["first"], c["last"], c["step"]) == \
                (lv["first"], lv["last"], lv["step"]), name


def test_policy_follows_redis_flags(table, live):
    """What Redis itself calls blocking, pub/sub or admin is refused (XREAD
    and XREADGROUP are served without their BLOCK option)."""
    for name, c in table.items():
        flags = live[name]["flags"]
        if name in ("xread", "xreadgroup"):
            continue
        if {"blocking", "pubsub", "admin"} & set(flags):
            assert c["kind"] == "REFUSED", name


def test_keys_agree_with_command_getkeys(table, live, redis, dumper):
    cases = []
    for name, c in table.items():
        if c["kind"] in ("LOCAL", "FANOUT", "REFUSED") or c["first"] == 0 \
                and c["kind"] == "KEY":
            continue
        for args in SAMPLES.get(name, [generic_sample(name, c)]):
            cases.append(args)
    assert len(cases) > 150
    got = parse(dumper, [resp(a) for a in cases])
    for args, (st, flags, cmd, keys, err) in zip(cases, got):
        want = redis.call("COMMAND", "GETKEYS", *args)
        assert not isinstance(want, Exception), (args, want)
        assert st == PROTO_OK and not flags & REQ["REFUSED"], (args, err)
        assert keys == want, args
        kind = table[args[0]]["kind"]
        if kind.startswith("SPLIT"):
            assert flags & REQ["SPLIT"], args
        else:
            assert bool(flags & REQ["SAME"]) == (len(keys) > 1), args


def test_subcommands(table, live, redis, dumper):
    """The containers' subcommands: keyed ones carry their key and write
    flag, HELP goes to any member, MEMORY's server-wide ones are refused,
    and a wrong arity is refused with Redis' text."""
    for name in CONTAINERS:
        for sub, s in live[name]["sub"].items():
            args = [name, sub] + ["ka", "g", "c", "x"][:max(
                abs(s["arity"]) - 2, 0)]
            (st, flags, _, keys, err), = parse(dumper, [resp(args)])
            assert st == PROTO_OK, args
            if s["first"] > 0:
                assert keys == ["ka"], args
                assert bool(flags & REQ["WRITE"]) == \
                    ("write" in s["flags"]), args
            elif sub == "help":
                assert flags & REQ["NOKEY"] and not keys, args
            else:
                assert name == "memory" and flags & REQ["REFUSED"], args
            if abs(s["arity"]) > 2:
                short = args[:abs(s["arity"]) - 1]
                (st, flags, _, _, err), = parse(dumper, [resp(short)])
                want = redis.call(*short)
                assert flags & REQ["REFUSED"] and str(want) == "ERR " + err


def test_arity_refusals_match_redis_text(table, redis, dumper):
    cases = []
    for name, c in table.items():
        if c["arity"] == -1:
            continue                      # any count is right
        if c["arity"] > 0:
            n = c["arity"] - 1 if c["arity"] > 1 else 2
        else:
            n = -c["arity"] - 1
        cases.append([name] + ["x"] * (n - 1))
    got = parse(dumper, [resp(a) for a in cases])
    for args, (st, flags, cmd, keys, err) in zip(cases, got):
        want = redis.call(*args)
        assert isinstance(want, Exception), args
        assert st == PROTO_OK and flags & REQ["REFUSED"], args
        if args[0] == "exec":
            # a rejected EXEC always aborts the transaction, in these words
            assert str(want) == "EXECABORT Transaction discarded because " \
                "of: " + err
        else:
            assert str(want) == "ERR " + err, args

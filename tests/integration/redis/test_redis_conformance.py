# test_redis_conformance.py -- chashd in front of 3 redis-servers answers
# as ONE redis-server holding every key: a script of commands of every
# class (single key of each type, TTLs, counters; multi-key commands split
# across members; same-member commands with hash tags; errors from the
# server; commands chashd answers itself), sent through chashd and to a
# reference redis-server with the raw RESP client, python3-redis and
# redis-cli, one command at a time and pipelined in one write, compared
# reply by reply. The exceptions are chashd's by design and listed here
# with the reply expected (ONLY steps): cross-member commands refused with
# -CROSSSERVER, transactions, pub/sub, blocking and admin commands refused
# with an error naming the command -- and the connection stays usable.
# The reference half and the nutcracker contrast run today; the chashd
# half waits for the redis mode (need_chashd_redis).
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import subprocess

import pytest
import redis

from base_util import CHASH, free_port
from redis_util import (CLOSED, REDIS_CLI, ChashdRedis, Err, Nutcracker,
                        RedisServer, Resp, Simple, encode, need_chashd_redis,
                        redis_pool, spread_keys)

NOEXPECT = object()


class Step:
    """One command of the script. <check>: how chashd's reply is compared
    with the reference's -- "same", "unordered" (an array compared as a
    set), "ttl"/"pttl" (the runs are apart in time: within 2 s). <expect>:
    the reply real Redis gives, checked on the reference (so the script
    itself is known right). <only>: (what, predicate) for a step chashd
    answers by design: not sent to the reference, chashd's reply must pass
    <predicate>."""

    def __init__(self, cmd, check="same", expect=NOEXPECT, only=None,
                 cli=True):
        self.cmd = tuple(str(a) if isinstance(a, int) else a for a in cmd)
        self.check = check
        self.expect = expect
        self.only = only
        self.cli = cli    # redis-cli waits for messages after SUBSCRIBE


# ---- the predicates of chashd's own answers; they take the raw form
# (Err/Simple/int/bytes/list) or python3-redis' (exception/bytes/int/list)
# or redis-cli's text ("(error) ...").

def error_text(r):
    """The text of an error reply in any client's form, else None."""
    if isinstance(r, Err):
        return str(r)
    if isinstance(r, Exception):
        return str(r)
    if isinstance(r, str) and r.startswith("(error) "):
        return r[len("(error) "):]
    return None


def refused_naming(name):
    """An error reply that names the command refused (any case)."""
    def pred(r):
        t = error_text(r)
        return t is not None and name.lower() in t.lower()
    pred.__doc__ = "an error naming %r" % name
    return ("refused", pred)


def crossserver():
    def pred(r):
        t = error_text(r)
        return t is not None and t.startswith("CROSSSERVER")
    pred.__doc__ = "-CROSSSERVER ..."
    return ("cross", pred)


def any_error():
    def pred(r):
        return error_text(r) is not None
    pred.__doc__ = "an error"
    return ("refused", pred)


def positive_integer():
    def pred(r):
        if isinstance(r, str):
            m = re.fullmatch(r"\(integer\) (\d+)", r)
            return bool(m) and int(m.group(1)) > 0
        return type(r) is int and r > 0
    pred.__doc__ = "a positive integer (chashd's own command table)"
    return ("local", pred)


# ---------------------------------------------------------------- keys --

POOL = "conf"


class Keys:
    """Keys chosen by where chashd's ring puts them: `chash lookup
    --config` on the pool's file. Servers are named conf-1..conf-3, so the
    ring, and these keys, are the same in every run."""

    def __init__(self, conf):
        cands = ["k:%d" % i for i in range(400)]
        owner = spread_keys(conf, POOL, cands, CHASH)
        self.by_member = {}
        for k in cands:
            self.by_member.setdefault(owner[k], []).append(k)
        assert len(self.by_member) == 3, self.by_member.keys()
        self.members = sorted(self.by_member)
        self.owner = owner
        self.turn = 0

    def on(self, m):
        """A fresh key on member number <m> (0..2)."""
        return self.by_member[self.members[m]].pop(0)

    def any(self):
        """A fresh key, members taken in turn."""
        self.turn += 1
        return self.on(self.turn % 3)


def script(keys):
    """The command script, built on <keys>."""
    s = []

    def add(*cmd, check="same", expect=NOEXPECT):
        s.append(Step(cmd, check, expect))

    def only(*cmd, why, cli=True):
        s.append(Step(cmd, only=why, cli=cli))

    OK = Simple("OK")
    k = keys.any
    # -- strings
    s1, s2, s3, s4 = k(), k(), k(), k()
    add("SET", s1, "hello", expect=OK)
    add("GET", s1, expect=b"hello")
    add("APPEND", s1, " world", expect=11)
    add("STRLEN", s1, expect=11)
    add("GETRANGE", s1, 0, 4, expect=b"hello")
    add("SETRANGE", s1, 0, "J", expect=11)
    add("GET", s1, expect=b"Jello world")
    add("SETNX", s1, "x", expect=0)
    add("SET", s2, "v", "NX", expect=OK)
    add("SET", s2, "w", "XX", "GET", expect=b"v")
    add("GETSET", s2, "z", expect=b"w")
    add("GETDEL", s2, expect=b"z")
    add("GET", s2, expect=None)
    add("SETEX", s3, 1000, "v", expect=OK)
    add("TTL", s3, check="ttl")
    add("GETEX", s3, "PERSIST", expect=b"v")
    add("TTL", s3, expect=-1)
    add("PSETEX", s4, 100000, "v", expect=OK)
    add("PTTL", s4, check="pttl")
    add("TYPE", s1, expect=Simple("string"))
    add("GET", k(), expect=None)
    # -- TTLs
    t1 = k()
    add("SET", t1, "v", expect=OK)
    add("EXPIRE", t1, 1000, expect=1)
    add("TTL", t1, check="ttl")
    add("PERSIST", t1, expect=1)
    add("TTL", t1, expect=-1)
    add("TTL", k(), expect=-2)
    add("EXPIREAT", t1, 4102444800, expect=1)
    add("EXPIRETIME", t1, expect=4102444800)
    add("PEXPIRE", t1, 500000, expect=1)
    add("PTTL", t1, check="pttl")
    # -- counters and bits
    c1, f1, b1 = k(), k(), k()
    add("INCR", c1, expect=1)
    add("INCRBY", c1, 10, expect=11)
    add("DECR", c1, expect=10)
    add("DECRBY", c1, 3, expect=7)
    add("INCRBYFLOAT", f1, "1.5", expect=b"1.5")
    add("SETBIT", b1, 7, 1, expect=0)
    add("GETBIT", b1, 7, expect=1)
    add("BITCOUNT", b1, expect=1)
    add("BITPOS", b1, 1, expect=7)
    # -- hashes
    h = k()
    add("HSET", h, "f1", "v1", "f2", "v2", expect=2)
    add("HGET", h, "f1", expect=b"v1")
    add("HMGET", h, "f1", "f2", "nof", expect=[b"v1", b"v2", None])
    add("HGETALL", h, expect=[b"f1", b"v1", b"f2", b"v2"])
    add("HKEYS", h, expect=[b"f1", b"f2"])
    add("HVALS", h, expect=[b"v1", b"v2"])
    add("HLEN", h, expect=2)
    add("HEXISTS", h, "f1", expect=1)
    add("HSETNX", h, "f1", "x", expect=0)
    add("HSTRLEN", h, "f1", expect=2)
    add("HINCRBY", h, "n", 5, expect=5)
    add("HINCRBYFLOAT", h, "fl", "0.5", expect=b"0.5")
    add("HDEL", h, "f2", "nof", expect=1)
    add("HGETALL", h)
    # -- lists
    ls = k()
    add("RPUSH", ls, "a", "b", "c", expect=3)
    add("LPUSH", ls, "z", expect=4)
    add("LRANGE", ls, 0, -1, expect=[b"z", b"a", b"b", b"c"])
    add("LLEN", ls, expect=4)
    add("LINDEX", ls, 1, expect=b"a")
    add("LSET", ls, 0, "y", expect=OK)
    add("LINSERT", ls, "BEFORE", "b", "x", expect=5)
    add("LREM", ls, 1, "a", expect=1)
    add("LPOS", ls, "b", expect=2)
    add("LPOP", ls, expect=b"y")
    add("RPOP", ls, expect=b"c")
    add("LPUSHX", ls, "q", expect=3)
    add("RPUSHX", k(), "a", expect=0)
    add("LPOP", ls, 2, expect=[b"q", b"x"])
    add("LRANGE", ls, 0, -1, expect=[b"b"])
    # -- sets
    st = k()
    add("SADD", st, "a", "b", "c", expect=3)
    add("SADD", st, "a", expect=0)
    add("SCARD", st, expect=3)
    add("SISMEMBER", st, "a", expect=1)
    add("SMISMEMBER", st, "a", "z", expect=[1, 0])
    add("SMEMBERS", st, check="unordered")
    add("SREM", st, "a", expect=1)
    add("SMEMBERS", st, check="unordered")
    # -- sorted sets
    z = k()
    add("ZADD", z, 1, "a", 2, "b", 3, "c", expect=3)
    add("ZRANGE", z, 0, -1, "WITHSCORES",
        expect=[b"a", b"1", b"b", b"2", b"c", b"3"])
    add("ZSCORE", z, "b", expect=b"2")
    add("ZRANK", z, "c", expect=2)
    add("ZREVRANGE", z, 0, 0, expect=[b"c"])
    add("ZINCRBY", z, 5, "a", expect=b"6")
    add("ZCOUNT", z, 2, 10, expect=3)
    add("ZRANGEBYSCORE", z, "(1", "+inf", "LIMIT", 0, 2, expect=[b"b", b"c"])
    add("ZREM", z, "b", expect=1)
    add("ZCARD", z, expect=2)
    add("ZMSCORE", z, "a", "c", "nope", expect=[b"6", b"3", None])
    add("ZPOPMIN", z, expect=[b"c", b"3"])
    # -- errors from the server, passed through
    add("LPUSH", s1, "x", expect=Err("WRONGTYPE Operation against a key "
                                     "holding the wrong kind of value"))
    add("INCR", s1, expect=Err("ERR value is not an integer or out of range"))
    add("EXPIRE", s1, "abc",
        expect=Err("ERR value is not an integer or out of range"))
    add("ZADD", z, "x", "a", expect=Err("ERR value is not a valid float"))
    add("SET", k(), "v", "EX", 0,
        expect=Err("ERR invalid expire time in 'set' command"))
    # -- wrong arity: no key to route by, or too many arguments
    add("GET", expect=Err("ERR wrong number of arguments for 'get' command"))
    add("GET", s1, "extra",
        expect=Err("ERR wrong number of arguments for 'get' command"))
    add("SET", s1, expect=Err("ERR wrong number of arguments for 'set' "
                              "command"))
    add("HSET", h, "f", expect=Err("ERR wrong number of arguments for "
                                   "'hset' command"))
    add("MGET", expect=Err("ERR wrong number of arguments for 'mget' "
                           "command"))
    add("MSET", s1, "v", s2, expect=Err("ERR wrong number of arguments for "
                                        "'mset' command"))
    add("GET", s1, expect=b"Jello world")
    # -- multi-key commands split across the three members
    a0, a1, a2, a0b = keys.on(0), keys.on(1), keys.on(2), keys.on(0)
    none = keys.on(1)
    add("MSET", a0, "1", a1, "2", a2, "3", a0b, "4", expect=OK)
    add("MGET", a2, none, a0, a1, a0b, a2,
        expect=[b"3", None, b"1", b"2", b"4", b"3"])
    add("MGET", h, a1, expect=[None, b"2"])
    add("EXISTS", a0, a1, a2, none, a0, expect=4)
    add("TOUCH", a0, a1, a2, none, expect=3)
    add("DEL", a0, a1, none, expect=2)
    add("UNLINK", a2, a0b, expect=2)
    add("MGET", a0, a1, a2, a0b, expect=[None, None, None, None])
    add("MSET", a1, "x", expect=OK)
    add("DEL", a1, ls, st, expect=3)
    add("EXISTS", a1, ls, st, expect=0)
    # -- several keys on one member by hash tag
    u = ["{u7}:%s" % n for n in ("a", "b", "c", "s1", "s2", "d", "l1", "l2",
                                 "z1", "z2", "zd", "h1", "h2", "hm", "e")]
    (ua, ub, uc, us1, us2, ud, ul1, ul2, uz1, uz2, uzd, uh1, uh2, uhm,
     ue) = u
    add("MSETNX", ua, "1", ub, "2", expect=1)
    add("MGET", ua, ub, expect=[b"1", b"2"])
    add("RENAME", ua, uc, expect=OK)
    add("EXISTS", ua, uc, expect=1)
    add("COPY", ub, ue, expect=1)
    add("SADD", us1, "a", "b", expect=2)
    add("SADD", us2, "b", "c", expect=2)
    add("SUNIONSTORE", ud, us1, us2, expect=3)
    add("SINTER", us1, us2, expect=[b"b"])
    add("SDIFF", us1, us2, expect=[b"a"])
    add("SINTERCARD", 2, us1, us2, expect=1)
    add("SMOVE", us1, us2, "a", expect=1)
    add("SMEMBERS", us2, check="unordered")
    add("RPUSH", ul1, "a", "b", expect=2)
    add("RPOPLPUSH", ul1, ul2, expect=b"b")
    add("LMOVE", ul1, ul2, "LEFT", "RIGHT", expect=b"a")
    add("LRANGE", ul2, 0, -1, expect=[b"b", b"a"])
    add("ZADD", uz1, 1, "a", expect=1)
    add("ZADD", uz2, 2, "a", 3, "b", expect=2)
    add("ZUNIONSTORE", uzd, 2, uz1, uz2, expect=2)
    add("ZRANGE", uzd, 0, -1, "WITHSCORES",
        expect=[b"a", b"3", b"b", b"3"])
    add("PFADD", uh1, "a", "b", expect=1)
    add("PFADD", uh2, "c", expect=1)
    add("PFMERGE", uhm, uh1, uh2, expect=OK)
    add("PFCOUNT", uhm, expect=3)
    add("EVAL", "return redis.call('GET', KEYS[1])", 1, ub, expect=b"2")
    add("EVAL", "return #KEYS", 2, ub, uc, expect=2)
    add("DEL", *u, check="same")
    # -- the same commands across members: refused, and nothing done
    x0, x1, xs0, xs1, xl0, xl1, xd0, xh0, xh1 = (
        keys.on(0), keys.on(1), keys.on(0), keys.on(1), keys.on(0),
        keys.on(2), keys.on(0), keys.on(0), keys.on(2))
    add("SET", x0, "v", expect=OK)
    add("SADD", xs0, "a", expect=1)
    add("SADD", xs1, "b", expect=1)
    add("RPUSH", xl0, "a", expect=1)
    add("PFADD", xh0, "a", expect=1)
    add("PFADD", xh1, "b", expect=1)
    only("MSETNX", x0, "1", x1, "2", why=crossserver())
    only("RENAME", x0, x1, why=crossserver())
    only("COPY", x0, x1, why=crossserver())
    only("SUNIONSTORE", xd0, xs0, xs1, why=crossserver())
    only("SINTER", xs0, xs1, why=crossserver())
    only("SMOVE", xs0, xs1, "a", why=crossserver())
    only("RPOPLPUSH", xl0, xl1, why=crossserver())
    only("LMOVE", xl0, xl1, "LEFT", "RIGHT", why=crossserver())
    only("ZUNIONSTORE", xd0, 2, xs0, xs1, why=crossserver())
    only("PFMERGE", xh0, xh1, why=crossserver())
    only("EVAL", "return #KEYS", 2, x0, x1, why=crossserver())
    only("EVAL", "return 1", 0, why=any_error())
    add("GET", x0, expect=b"v")
    add("EXISTS", x1, xd0, xl1, expect=0)
    add("PFCOUNT", xh0, expect=1)
    add("SMEMBERS", xs0, expect=[b"a"])
    add("SMEMBERS", xs1, expect=[b"b"])
    add("LRANGE", xl0, 0, -1, expect=[b"a"])
    # -- answered by chashd, as Redis answers
    add("PING", expect=Simple("PONG"))
    add("PING", "hi", expect=b"hi")
    add("ECHO", "hello there", expect=b"hello there")
    add("SELECT", 0, expect=OK)
    add("CLIENT", "SETNAME", "conformance", expect=OK)
    add("CLIENT", "GETNAME", expect=b"conformance")
    only("COMMAND", "COUNT", why=positive_integer())
    # -- refused, each with an error naming it; the connection goes on
    only("SELECT", 1, why=any_error())
    add("PING", expect=Simple("PONG"))
    add("GET", x0, expect=b"v")
    only("EXEC", why=refused_naming("exec"))
    only("SUBSCRIBE", "ch", why=refused_naming("subscribe"), cli=False)
    add("GET", x0, expect=b"v")
    only("BLPOP", xl0, 0, why=refused_naming("blpop"))
    only("CONFIG", "GET", "maxmemory", why=refused_naming("config"))
    only("KEYS", "*", why=refused_naming("keys"))
    only("FLUSHDB", why=refused_naming("flushdb"))
    only("FOO", "bar", why=refused_naming("foo"))
    add("GET", x0, expect=b"v")
    add("SMEMBERS", xs0, expect=[b"a"])
    # -- every member's keys counted: the sum is the single server's
    add("DBSIZE")
    return s


QUIT = Step(("QUIT",), expect=Simple("OK"))


# ------------------------------------------------------------ running --

def compare(check, got, ref):
    """Whether chashd's <got> passes against the reference's <ref>."""
    if check == "same":
        return got == ref
    if check == "unordered":
        return (isinstance(got, list) and isinstance(ref, list)
                and sorted(got) == sorted(ref))
    if check in ("ttl", "pttl"):
        slack = 2 if check == "ttl" else 2000
        if isinstance(got, str):    # redis-cli's "(integer) N"
            got, ref = [int(x.split()[-1]) for x in (got, ref)]
        return (type(got) is int and type(ref) is int and got >= 0
                and abs(got - ref) <= slack)
    raise AssertionError(check)


def run_raw(port, steps, pipelined):
    """Replies through the raw client; QUIT last, then the close."""
    cmds = [st.cmd for st in steps] + [QUIT.cmd]
    with Resp(port, timeout=10) as c:
        if pipelined:
            out = c.pipeline(cmds)
        else:
            out = []
            for cmd in cmds:
                c.send(encode(*cmd))
                out.append(c.read_replies(1)[0])
        closed = c.peer_closed(timeout=3)
    return out[:-1], out[-1], closed


def pyredis_reply(r):
    """An exception python3-redis made of an error reply as an Err: its
    text (the library strips a leading "ERR "), the class when it is more
    than a plain ResponseError."""
    if type(r) is redis.exceptions.ResponseError:
        return Err(str(r))
    if isinstance(r, redis.exceptions.RedisError):
        return Err("%s: %s" % (type(r).__name__, r))
    return r


def run_pyredis(port, steps, pipelined):
    """Replies through python3-redis, its reply callbacks removed, so
    each is as the library parsed it off the wire."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    r.response_callbacks = {}
    try:
        if pipelined:
            p = r.pipeline(transaction=False)
            p.response_callbacks = {}
            for st in steps:
                p.execute_command(*st.cmd)
            out = p.execute(raise_on_error=False)
        else:
            out = []
            for st in steps:
                try:
                    out.append(r.execute_command(*st.cmd))
                except redis.exceptions.RedisError as e:
                    out.append(e)
    finally:
        r.close()
    return [pyredis_reply(x) for x in out]


def cli_quote(a):
    return '"%s"' % a.replace("\\", "\\\\").replace('"', '\\"')


def run_cli(port, steps):
    """One redis-cli, commands one per line on stdin, each followed by an
    ECHO marker, so its output is cut back into one text per command."""
    lines = []
    for i, st in enumerate(steps):
        lines.append(" ".join(cli_quote(a) for a in st.cmd))
        lines.append('ECHO "--mark-%d--"' % i)
    r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port),
                        "--no-raw"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    parts = re.split(r'^"--mark-(\d+)--"\n', r.stdout, flags=re.M)
    # parts: text0, "0", text1, "1", ..., tail
    assert parts[-1] == "", "output after the last marker: %r" % parts[-1]
    texts = parts[0:-1:2]
    marks = [int(m) for m in parts[1::2]]
    assert marks == list(range(len(steps))), "markers out of order"
    return [t.rstrip("\n") for t in texts]


def cli_unordered(text):
    return sorted(re.sub(r"^\d+\) ", "", ln) for ln in text.splitlines())


def run_cli_pipe(port, steps):
    """redis-cli --pipe: (errors, replies) it counted."""
    data = b"".join(encode(*st.cmd) for st in steps)
    r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port),
                        "--pipe", "--pipe-timeout", "10"], input=data,
                       capture_output=True, timeout=60)
    out = r.stdout.decode(errors="replace")
    m = re.search(r"errors: (\d+), replies: (\d+)", out)
    assert m, out + r.stderr.decode(errors="replace")
    return int(m.group(1)), int(m.group(2))


# ------------------------------------------------------------ fixture --

class Setup:
    """3 redis-servers behind a redis pool (conf-1..conf-3, murmur,
    ketama, hash tags "{}"), and a reference redis-server."""

    def __init__(self, procs):
        self.procs = procs
        self.servers = [RedisServer(procs) for _ in range(3)]
        self.ref = RedisServer(procs)
        self.port = free_port()
        self.text = ("global:\n  admin: off\n  workers: 2\n"
                     + redis_pool(POOL, self.port, self.servers,
                                  hash="murmur", distribution="ketama",
                                  hash_tag='"{}"', timeout=5000,
                                  server_connections=1,
                                  auto_eject_hosts="false"))
        self.conf = os.path.join(str(procs.tmp), "conf.yml")
        with open(self.conf, "w") as f:
            f.write(self.text)
        self.keys = Keys(self.conf)
        self.steps = script(self.keys)

    def sent_to_ref(self):
        return [st for st in self.steps if st.only is None]

    def chashd(self):
        need_chashd_redis()
        return ChashdRedis(self.procs, self.text, name="chashd")

    def flush(self):
        for s in self.servers + [self.ref]:
            s.flush()


@pytest.fixture
def setup(procs):
    return Setup(procs)


def check_against_ref(steps, got, ref):
    """chashd's replies <got> (one per step) against the reference's <ref>
    (one per step sent to it); a list of the mismatches."""
    bad = []
    it = iter(ref)
    for i, (st, g) in enumerate(zip(steps, got)):
        if st.only is not None:
            what, pred = st.only
            if not pred(g):
                bad.append("#%d %s: chashd %r, expected %s (%s)"
                           % (i, " ".join(st.cmd), g, pred.__doc__, what))
            continue
        r = next(it)
        if not compare(st.check, g, r):
            bad.append("#%d %s: chashd %r, redis %r"
                       % (i, " ".join(st.cmd), g, r))
    assert len(got) == len(steps)
    return bad


# ------------------------------------------------------ reference half --

def test_script_holds_on_redis(setup):
    """The script is right about real Redis: every reply the script
    expects is what a redis-server answers, one command at a time and
    pipelined alike (so chashd is compared with a known truth)."""
    steps = setup.sent_to_ref()
    for pipelined in (False, True):
        setup.flush()
        got, quit_reply, closed = run_raw(setup.ref.port, steps, pipelined)
        bad = ["#%d %s: redis %r, script expects %r"
               % (i, " ".join(st.cmd), g, st.expect)
               for i, (st, g) in enumerate(zip(steps, got))
               if st.expect is not NOEXPECT and g != st.expect]
        assert not bad, "\n".join(bad)
        assert CLOSED not in got
        assert quit_reply == Simple("OK") and closed


def test_clients_agree_on_redis(setup):
    """The four ways of sending the script agree with each other on the
    reference: raw one by one = raw pipelined; python3-redis one by one =
    pipelined; redis-cli gives one answer per command and --pipe counts
    every reply. What differs through chashd is then chashd's doing."""
    steps = setup.sent_to_ref()
    setup.flush()
    single, _, _ = run_raw(setup.ref.port, steps, False)
    setup.flush()
    piped, _, _ = run_raw(setup.ref.port, steps, True)
    bad = check_against_ref(steps, piped, single)
    assert not bad, "\n".join(bad)
    setup.flush()
    py1 = run_pyredis(setup.ref.port, steps, False)
    setup.flush()
    py2 = run_pyredis(setup.ref.port, steps, True)
    assert not check_against_ref(steps, py2, py1)
    errors = sum(isinstance(r, Err) for r in single)
    assert errors == sum(isinstance(r, Err) for r in py1) > 5
    setup.flush()
    texts = run_cli(setup.ref.port, steps)
    assert sum(t.startswith("(error) ") for t in texts) == errors
    setup.flush()
    assert run_cli_pipe(setup.ref.port, steps) == (errors, len(steps))


def test_script_spreads_over_members(setup):
    """The script exercises every member: its single-key commands and its
    split commands reach all three, each tagged family sits on one."""
    owner = spread_keys(setup.conf, POOL,
                        sorted({a for st in setup.steps for a in st.cmd[1:]
                                if a.startswith(("k:", "{u7}"))}), CHASH)
    assert len(set(owner.values())) == 3
    tagged = {m for k, m in owner.items() if k.startswith("{u7}")}
    assert len(tagged) == 1
    for st in setup.steps:
        if st.cmd[0] in ("MGET", "EXISTS") and len(st.cmd) > 4:
            assert len({owner[a] for a in st.cmd[1:]}) == 3, st.cmd
        if st.only and st.only[0] == "cross":
            ks = [a for a in st.cmd[1:] if a in owner]
            assert len({owner[a] for a in ks}) > 1, st.cmd


def test_exceptions_are_chashd_s_own(setup):
    """Each step chashd refuses by design is one a single Redis runs (a
    cross-member command, MULTI, SUBSCRIBE, KEYS, SELECT 1...): the
    exceptions list only what a sharding proxy must do differently.
    Each is replayed on the reference with the script's data before it,
    then sent on a connection of its own."""
    ran = 0
    for i, st in enumerate(setup.steps):
        if st.only is None or st.only[0] == "local":
            continue
        setup.ref.flush()
        before = [b.cmd for b in setup.steps[:i] if b.only is None]
        with setup.ref.client() as c:
            assert CLOSED not in c.pipeline(before)
        with setup.ref.client() as c:
            r = c.call(*st.cmd)
        if st.cmd[0] in ("EXEC", "FOO"):
            # Redis refuses these too (EXEC without MULTI, unknown
            # command), naming them: chashd must not forward them all
            # the same
            assert st.only[1](r), r
        else:
            assert error_text(r) is None, "%s: Redis answers %r" % (
                " ".join(st.cmd), r)
            ran += 1
    assert ran >= 15


# ---------------------------------------------------------- chashd half --

@pytest.mark.parametrize("pipelined", [False, True],
                         ids=["one-by-one", "pipelined"])
def test_chashd_raw_client(setup, pipelined):
    cd = setup.chashd()
    ref_steps = setup.sent_to_ref()
    setup.flush()
    ref, rq, _ = run_raw(setup.ref.port, ref_steps, pipelined)
    got, gq, closed = run_raw(cd.port, setup.steps, pipelined)
    bad = check_against_ref(setup.steps, got, ref)
    assert not bad, "\n".join(bad)
    assert gq == rq == Simple("OK") and closed, "QUIT: %r" % gq


@pytest.mark.parametrize("pipelined", [False, True],
                         ids=["one-by-one", "pipelined"])
def test_chashd_python_redis(setup, pipelined):
    cd = setup.chashd()
    setup.flush()
    ref = run_pyredis(setup.ref.port, setup.sent_to_ref(), pipelined)
    got = run_pyredis(cd.port, setup.steps, pipelined)
    bad = check_against_ref(setup.steps, got, ref)
    assert not bad, "\n".join(bad)


def test_chashd_redis_cli(setup):
    cd = setup.chashd()
    setup.flush()
    steps = [st for st in setup.steps if st.cli]
    ref = run_cli(setup.ref.port, [st for st in steps if st.only is None])
    got = run_cli(cd.port, steps)
    bad = []
    it = iter(ref)
    for i, (st, g) in enumerate(zip(steps, got)):
        if st.only is not None:
            if not st.only[1](g):
                bad.append("#%d %s: chashd %r" % (i, " ".join(st.cmd), g))
            continue
        r = next(it)
        ok = (cli_unordered(g) == cli_unordered(r)
              if st.check == "unordered" else compare(st.check, g, r))
        if not ok:
            bad.append("#%d %s: chashd %r, redis %r"
                       % (i, " ".join(st.cmd), g, r))
    assert not bad, "\n".join(bad)


def test_chashd_redis_cli_pipe(setup):
    """redis-cli --pipe: every command answered, the errors are the
    reference's plus chashd's refusals."""
    cd = setup.chashd()
    setup.flush()
    ref_errors, ref_replies = run_cli_pipe(setup.ref.port,
                                           setup.sent_to_ref())
    refusals = sum(1 for st in setup.steps
                   if st.only is not None and st.only[0] != "local")
    assert run_cli_pipe(cd.port, setup.steps) == (
        ref_errors + refusals, ref_replies + sum(
            1 for st in setup.steps if st.only is not None))


# ------------------------------------------ a refusal inside a pipeline --

# (MULTI is no refusal of one command: a MULTI block is refused whole,
# test_redis_multi.py)
REFUSED_IN_PIPELINE = [("KEYS", "*"), ("WATCH", "k:pipe"),
                       ("SUBSCRIBE", "ch"), ("CONFIG", "GET", "maxmemory"),
                       ("FOO",)]


def pipeline_with(c, key, refused):
    return c.pipeline([("SET", key, "1"), refused, ("INCR", key),
                       ("GET", key)])


@pytest.mark.parametrize("refused", REFUSED_IN_PIPELINE,
                         ids=lambda c: c[0])
def test_chashd_refusal_mid_pipeline_keeps_the_rest(setup, refused):
    """A refused command in the middle of a pipeline: its own error, every
    other reply in order, and the connection still open."""
    cd = setup.chashd()
    with cd.client() as c:
        r = pipeline_with(c, "k:pipe", refused)
        assert r[0] == Simple("OK"), r
        assert refused_naming(refused[0])[1](r[1]), r
        assert r[2:] == [2, b"2"], r
        assert c.call("PING") == Simple("PONG")


@pytest.mark.parametrize("refused", REFUSED_IN_PIPELINE + [("ECHO", "x"),
                                                          ("SELECT", "0")],
                         ids=lambda c: c[0])
def test_nutcracker_refusal_mid_pipeline_loses_the_rest(setup, refused):
    """The contrast: nutcracker closes the connection on a command it does
    not support, and the pipeline's other replies are lost -- the SET's
    before it as well as the INCR and GET after it. (The SET itself may
    have run: the client cannot know.)"""
    text = redis_pool("nc", free_port(), setup.servers, hash="murmur",
                      distribution="ketama", hash_tag='"{}"')
    nc = Nutcracker(setup.procs, text)
    with nc.client() as c:
        r = pipeline_with(c, "k:pipe", refused)
        assert r == [CLOSED] * 4, r


def test_cross_member_command_nutcracker_vs_chashd(setup):
    """SUNIONSTORE over sets on two members: nutcracker runs it on the
    first key's server with the keys it has there, a silently wrong
    result; chashd refuses it with -CROSSSERVER."""
    xs0, xs1, xd = (setup.keys.on(0), setup.keys.on(1), setup.keys.on(0))
    text = redis_pool("nc", free_port(), setup.servers, hash="murmur",
                      distribution="ketama", hash_tag='"{}"',
                      names=["conf-1", "conf-2", "conf-3"])
    nc = Nutcracker(setup.procs, text)
    with nc.client() as c:
        assert c.call("SADD", xs0, "a") == 1
        assert c.call("SADD", xs1, "b") == 1
        got = c.call("SUNIONSTORE", xd, xs0, xs1)
        # a single Redis holding both sets would say 2
        assert got == 1, got
        assert c.call("SMEMBERS", xd) == [b"a"]
    setup.flush()
    cd = setup.chashd()
    with cd.client() as c:
        assert c.call("SADD", xs0, "a") == 1
        assert c.call("SADD", xs1, "b") == 1
        got = c.call("SUNIONSTORE", xd, xs0, xs1)
        assert crossserver()[1](got), got
        assert c.call("EXISTS", xd) == 0

# test_redis_engine.py -- the redis mode's request engine as a user
# checks it, on real redis-servers: replies in request order while one
# member answers late; a per-request timeout that leaves the client
# connection usable; a killed member; 1 MB and 64 MB values byte-exact and
# streamed (chashd's RSS stays far below value x clients); the request
# size limit; inline commands; redis_auth on both sides; SCAN, DBSIZE,
# KEYS and FLUSHDB across members; EXISTS summed. Behaviour nutcracker
# shares runs against it too (today), and where nutcracker is known to be
# wrong its fault is asserted beside chashd's expected answer.
# SPDX-License-Identifier: BSD-2-Clause
import hashlib
import os
import select
import signal
import socket
import subprocess
import threading
import time

import pytest

from admin_util import Api
from base_util import CHASH, free_port, wait_for
from redis_util import (CLOSED, REDIS_BENCHMARK, ChashdRedis, Err,
                        Nutcracker, RedisServer, Resp, Simple, encode,
                        need_chashd_redis, redis_pool, spread_keys)

POOL = "eng"
NAMES = ["eng-1", "eng-2", "eng-3"]
GLOBAL = "global:\n  admin: off\n  workers: 2\n"
KINDS = ["nutcracker", "chashd"]


class Env:
    """3 redis-servers (named eng-1..eng-3 in the pool) and the keys each
    owns, from `chash lookup --config` on the pool."""

    def __init__(self, procs, password=None):
        self.procs = procs
        self.servers = [RedisServer(procs, password=password)
                        for _ in NAMES]
        conf = os.path.join(str(procs.tmp), "ring.yml")
        with open(conf, "w") as f:
            f.write(self.pool_text(free_port()))
        cands = ["k:%d" % i for i in range(3000)]
        owner = spread_keys(conf, POOL, cands, CHASH)
        self.keys = [[k for k in cands if owner[k] == n] for n in NAMES]
        assert all(len(ks) > 100 for ks in self.keys)

    def pool_text(self, port, **opts):
        base = dict(hash="murmur", distribution="ketama", timeout=5000,
                    server_connections=1, preconnect="true",
                    auto_eject_hosts="false")
        base.update(opts)
        return redis_pool(POOL, port, self.servers, names=NAMES, **base)

    def proxy(self, kind, chashd_only=None, **opts):
        """nutcracker or chashd on the pool with <opts>; <chashd_only>:
        chashd's own pool keys (nutcracker refuses them)."""
        port = free_port()
        if kind == "chashd":
            need_chashd_redis()
            opts.update(chashd_only or {})
            return ChashdRedis(self.procs,
                               GLOBAL + self.pool_text(port, **opts))
        return Nutcracker(self.procs, self.pool_text(port, **opts))


@pytest.fixture
def env(procs):
    return Env(procs)


def readable(sock, timeout=0.0):
    return bool(select.select([sock], [], [], timeout)[0])


# ---------------------------------------------------------------- order --

@pytest.mark.parametrize("kind", KINDS)
def test_replies_in_request_order_when_a_member_is_slow(env, kind):
    """One member paused (CLIENT PAUSE 3 s): a pipeline mixing its keys
    with the fast members' gets every reply in request order. Meanwhile
    the fast members have already executed their part (an INCR is seen on
    the member directly), and the client has received nothing: the
    replies the fast members gave are held back behind the slow one."""
    p = env.proxy(kind)
    slow, fast = env.servers[0], env.servers[1]
    ks, kf, kg = env.keys[0], env.keys[1], env.keys[2]
    with p.client() as c:
        setup = [("SET", k, k) for k in ks[:3] + kf[:4] + kg[:2]]
        assert c.pipeline(setup) == [Simple("OK")] * len(setup)
        counter = kf[10]
        cmds = [("GET", ks[0]), ("INCR", counter), ("GET", kf[0]),
                ("GET", ks[1]), ("GET", kg[0]), ("MGET", kf[1], ks[2], kg[1]),
                ("SET", kf[2], "new"), ("GET", kf[2]), ("GET", kf[3])]
        with slow.client() as d:
            assert d.call("CLIENT", "PAUSE", 3000, "ALL") == Simple("OK")
        t0 = time.monotonic()
        c.send(b"".join(encode(*cmd) for cmd in cmds))
        wait_for(lambda: fast.call("GET", counter) == b"1", timeout=2,
                 what="the fast member to run the INCR")
        # still inside the pause: what the client has is what it can see
        assert time.monotonic() - t0 < 2.5, "the check came too late"
        assert not readable(c.sock), "a reply overtook the slow member's"
        got = c.read_replies(len(cmds))
        assert time.monotonic() - t0 > 2.5, "the member was not paused"
    assert got == [ks[0].encode(), 1, kf[0].encode(), ks[1].encode(),
                   kg[0].encode(), [kf[1].encode(), ks[2].encode(),
                                    kg[1].encode()],
                   Simple("OK"), b"new", kf[3].encode()], got


# -------------------------------------------------------------- timeout --

@pytest.mark.parametrize("kind", KINDS)
def test_request_timeout_keeps_the_connection(env, kind):
    """timeout: 400 and a member paused 1.5 s: its request gets -ERR
    Connection timed out; the same client connection goes on (other
    members answer at once, in order); once the member is back its keys
    read their own values -- no late reply is matched to a later
    request."""
    p = env.proxy(kind, timeout=400)
    slow = env.servers[0]
    ks, kf = env.keys[0], env.keys[1]
    with p.client() as c:
        keys = ks[:3] + kf[:3]
        assert c.pipeline([("SET", k, k) for k in keys]) == \
            [Simple("OK")] * 6
        with slow.client() as d:
            assert d.call("CLIENT", "PAUSE", 1500, "ALL") == Simple("OK")
        assert c.call("GET", ks[0]) == Err("ERR Connection timed out")
        assert c.call("GET", kf[0]) == kf[0].encode()
        got = c.pipeline([("GET", ks[1]), ("GET", kf[1])])
        assert got == [Err("ERR Connection timed out"), kf[1].encode()]
        # a direct PING blocks until the pause ends: the readiness probe
        assert slow.call("PING") == Simple("PONG")
        got = c.pipeline([("GET", k) for k in keys])
        assert got == [k.encode() for k in keys], got


# --------------------------------------------------------- dead member --

@pytest.mark.parametrize("kind", KINDS)
def test_killed_member_refuses_only_its_keys(env, kind):
    """A member killed (SIGKILL): its keys get -ERR Connection refused in
    place, the other members' keys are served on the same connection and
    new ones; after it restarts (empty), its keys are served again. An
    MGET touching it fails as a whole: chashd answers the error and keeps
    the connection; nutcracker answers it and then closes (its known
    fault)."""
    p = env.proxy(kind)
    dead = env.servers[0]
    kd, kf, kg = env.keys[0], env.keys[1], env.keys[2]
    with p.client() as c:
        keys = kd[:2] + kf[:2] + kg[:1]
        assert c.pipeline([("SET", k, k) for k in keys]) == \
            [Simple("OK")] * 5
        dead.stop()
        refused = Err("ERR Connection refused")
        got = c.pipeline([("GET", kd[0]), ("GET", kf[0]), ("SET", kg[0], "x"),
                          ("GET", kd[1]), ("MGET", kf[0], kf[1])])
        assert got == [refused, kf[0].encode(), Simple("OK"), refused,
                       [kf[0].encode(), kf[1].encode()]], got
        with p.client() as c2:
            assert c2.pipeline([("GET", kd[0]), ("GET", kg[0])]) == \
                [refused, b"x"]
        got = c.pipeline([("MGET", kf[0], kd[0]), ("GET", kf[1])])
        assert got[0] == refused, got
        if kind == "nutcracker":
            assert c.peer_closed(timeout=3), "nutcracker kept it open"
        else:
            assert got[1] == kf[1].encode()
            assert c.call("PING") == Simple("PONG")
    dead.start()
    with p.client() as c:
        wait_for(lambda: c.call("GET", kd[0]) is None, timeout=5,
                 what="the restarted member to be used again")
        assert c.call("SET", kd[0], "back") == Simple("OK")
    assert dead.call("GET", kd[0]) == b"back"


# -------------------------------------------------------- large values --

def big_value(n, tag):
    """<n> pseudo-random bytes, distinct per <tag> (CR LF inside, as any
    binary value may have)."""
    seed = hashlib.sha256(tag.encode()).digest()
    block = hashlib.shake_256(seed).digest(1 << 20)
    out = bytearray(block * (n >> 20)) + block[:n & ((1 << 20) - 1)]
    out[:len(seed)] = seed
    out[100:104] = b"\r\n\r\n"
    return bytes(out)


@pytest.mark.parametrize("kind", KINDS)
def test_large_values_round_trip(env, kind):
    """SET then GET of 1 MB and 64 MB values through the proxy, byte for
    byte, on keys of different members; the member holds exactly the
    bytes sent."""
    p = env.proxy(kind, timeout=30000)
    with p.client(timeout=60) as c:
        for size, m in ((1 << 20, 0), (64 << 20, 1), (64 << 20, 2)):
            key = env.keys[m][0]
            v = big_value(size, key)
            assert c.call("SET", key, v) == Simple("OK")
            assert c.call("STRLEN", key) == size
            got = c.call("GET", key)
            assert got == v, "%d-byte value changed on its way" % size
            assert env.servers[m].call("GETRANGE", key, size - 8,
                                       size - 1) == v[-8:]
            c.call("DEL", key)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def push_in_parallel(port, keys, size):
    """<keys> SET to <size>-byte values, one client each, all at once;
    every reply must be +OK. The value is sent from one shared buffer."""
    base = big_value(size, "shared")
    errors = []

    def one(key):
        try:
            with Resp(port, timeout=120) as c:
                head = (b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n"
                        % (len(key), key.encode(), size))
                c.sock.sendall(head)
                mv = memoryview(base)
                for i in range(0, size, 1 << 20):
                    c.sock.sendall(mv[i:i + (1 << 20)])
                c.sock.sendall(b"\r\n")
                r = c.read_reply()
                if r != Simple("OK"):
                    errors.append((key, r))
        except Exception as e:      # reported below, in the test's thread
            errors.append((key, e))
    threads = [threading.Thread(target=one, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    return threads, errors, base


@pytest.mark.parametrize("kind", KINDS)
def test_large_values_are_streamed(env, kind, monkeypatch):
    """8 clients each push a 64 MB value at once (512 MB in flight):
    chashd's RSS, sampled throughout, grows by less than ONE value -- it
    streams values through instead of holding them whole. nutcracker,
    the contrast, holds each request whole in its buffers: it grows by
    more than the values in flight."""
    size, n = 64 << 20, 8
    if os.environ.get("CHASH_SANITIZE"):
        # AddressSanitizer keeps freed memory in a quarantine (256 MB by
        # default): that is the sanitizer's memory, not chashd's
        monkeypatch.setenv("ASAN_OPTIONS", os.environ.get(
            "ASAN_OPTIONS", "") + ":quarantine_size_mb=8")
    p = env.proxy(kind, timeout=60000)
    keys = [env.keys[i % 3][i] for i in range(n)]
    with p.client() as c:
        assert c.call("SET", "warm", "x") == Simple("OK")
    base_rss = rss_kib(p.proc.pid)
    peak = [base_rss]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(p.proc.pid))
            time.sleep(0.005)
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        threads, errors, value = push_in_parallel(p.port, keys, size)
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a client hung"
    finally:
        stop.set()
        sampler.join()
    assert not errors, errors[:2]
    for k in keys:
        srv = env.servers[[k in ks for ks in env.keys].index(True)]
        assert srv.call("STRLEN", k) == size
    with p.client(timeout=60) as c:
        assert c.call("GET", keys[0]) == value
    grew = (peak[0] - base_rss) * 1024
    if kind == "chashd":
        assert grew < size, "chashd grew by %d MB pushing %d x %d MB" % (
            grew >> 20, n, size >> 20)
    else:
        assert grew > size, "nutcracker grew by only %d MB" % (grew >> 20)


# ------------------------------------------------- request size limit --

def test_request_over_client_max_request_is_refused(env):
    """client_max_request: 1 MiB. A SET of 2 MiB gets -ERR Protocol
    error... and the connection is closed (the rest of the request cannot
    be skipped safely); one of 256 KiB on a new connection works, and
    nothing of the refused request reached a member."""
    p = env.proxy("chashd", chashd_only={"client_max_request": 1 << 20})
    key = env.keys[0][0]
    with p.client() as c:
        c.send(encode("SET", key, big_value(2 << 20, "over")))
        r = c.read_replies(1)[0]
        assert isinstance(r, Err) and r.startswith("ERR Protocol error"), r
        assert c.peer_closed(timeout=5)
    with p.client() as c:
        assert c.call("EXISTS", key) == 0
        v = big_value(256 << 10, "under")
        assert c.call("SET", key, v) == Simple("OK")
        assert c.call("GET", key) == v


# ------------------------------------------------------------- inline --

@pytest.mark.parametrize("kind", ["redis", "chashd"])
def test_inline_commands(env, kind):
    """Inline (telnet-style) commands over a raw socket: PING, SET and
    GET, several in one write; empty and blank lines between them get no
    reply at all, as Redis ignores them (redis-cli --pipe sends one);
    redis-benchmark -t ping_inline runs without an error. Checked on a
    redis-server itself too, so the expectation is Redis'."""
    if kind == "redis":
        port, key = env.servers[1].port, env.keys[1][0]
    else:
        port, key = env.proxy("chashd").port, env.keys[1][0]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b"+PONG\r\n"
    with Resp(port) as c:
        c.send(b"SET %s inline-value\r\nGET %s\r\nEXISTS %s nokey\r\n"
               % (key.encode(), key.encode(), key.encode()))
        assert c.read_replies(3) == [Simple("OK"), b"inline-value", 1]
        c.send(b"\r\nPING\r\n  \r\n\n*1\r\n$4\r\nPING\r\n")
        assert c.read_replies(2) == [Simple("PONG")] * 2
        # an answer to a blank line would come before this one
        assert c.call("ECHO", "next") == b"next"
    assert env.servers[1].call("GET", key) == b"inline-value"
    r = subprocess.run([REDIS_BENCHMARK, "-p", str(port), "-t",
                        "ping_inline", "-n", "5000", "-c", "4", "--csv"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, \
        r.stdout + r.stderr
    assert '"PING_INLINE"' in r.stdout


def test_nutcracker_closes_on_inline(env):
    """The contrast: nutcracker parses only multibulk requests and closes
    the connection on an inline PING."""
    p = env.proxy("nutcracker")
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b""


# --------------------------------------------------------------- auth --

@pytest.mark.parametrize("kind", KINDS)
def test_redis_auth(procs, kind):
    """redis_auth: the members require the password and so does the pool.
    Before AUTH a command gets -NOAUTH; a wrong password -ERR invalid
    password and still -NOAUTH after it; with the right one, commands on
    every member work (the proxy authenticated its member connections)."""
    env = Env(procs, password="s3cret")
    p = env.proxy(kind, redis_auth="s3cret")
    keys = [ks[0] for ks in env.keys]
    with p.client() as c:
        r = c.call("GET", keys[0])
        assert isinstance(r, Err) and r.startswith("NOAUTH"), r
        r = c.call("AUTH", "wrong")
        assert isinstance(r, Err) and r.startswith("ERR invalid password"), r
        r = c.call("SET", keys[1], "x")
        assert isinstance(r, Err) and r.startswith("NOAUTH"), r
        assert c.call("AUTH", "s3cret") == Simple("OK")
        args = []
        for k in keys:
            args += [k, k]
        assert c.call("MSET", *args) == Simple("OK")
        assert c.call("MGET", *keys) == [k.encode() for k in keys]
    for srv, k in zip(env.servers, keys):
        assert srv.call("GET", k) == k.encode()
    with p.client() as c:     # a new client starts unauthenticated
        r = c.call("GET", keys[0])
        assert isinstance(r, Err) and r.startswith("NOAUTH"), r


# ---------------------------------------------------- across members --

def fill(c, keys):
    """Write <keys> (value = key) through the proxy with MSETs."""
    cmds = []
    for i in range(0, len(keys), 50):
        args = ["MSET"]
        for k in keys[i:i + 50]:
            args += [k, k]
        cmds.append(args)
    assert c.pipeline(cmds) == [Simple("OK")] * len(cmds)


def scan_all(c, *opts):
    """A full SCAN iteration through the proxy: every key returned, in
    order, duplicates kept."""
    cursor, seen, rounds = b"0", [], 0
    while True:
        r = c.call("SCAN", cursor, *opts)
        assert isinstance(r, list) and len(r) == 2, r
        cursor, batch = r
        seen += [k.decode() for k in batch]
        rounds += 1
        assert rounds < 10000, "SCAN does not end"
        if cursor == b"0":
            return seen, rounds


def test_scan_visits_every_key_once(env):
    """SCAN through chashd walks all members: a full iteration returns
    every key exactly once, with MATCH only the matching ones, and COUNT
    changes how many rounds it takes, not what it returns."""
    p = env.proxy("chashd")
    keys = ["s:%d" % i for i in range(3000)]
    with p.client() as c:
        fill(c, keys)
        assert all(s.dbsize() > 0 for s in env.servers)
        seen, rounds10 = scan_all(c, "COUNT", 10)
        assert len(seen) == len(set(seen)), "SCAN returned duplicates"
        assert set(seen) == set(keys)
        seen, rounds1000 = scan_all(c, "COUNT", 1000)
        assert sorted(seen) == sorted(keys)
        assert rounds1000 < rounds10
        seen, _ = scan_all(c, "MATCH", "s:1*", "COUNT", 100)
        assert sorted(seen) == sorted(k for k in keys
                                      if k.startswith("s:1"))


def test_dbsize_is_the_sum(env):
    """DBSIZE through chashd is the sum over the members."""
    p = env.proxy("chashd")
    with p.client() as c:
        fill(c, ["d:%d" % i for i in range(1000)])
        env.servers[0].call("SET", "direct-only", "1")
        total = sum(s.dbsize() for s in env.servers)
        assert total == 1001
        assert c.call("DBSIZE") == total


def test_admin_fanout_refused_by_default(env):
    """Without allow_fanout_admin, FLUSHDB, FLUSHALL and KEYS are refused
    with an error naming them, and nothing is flushed."""
    p = env.proxy("chashd")
    with p.client() as c:
        fill(c, ["f:%d" % i for i in range(300)])
        for cmd in (("FLUSHDB",), ("FLUSHALL",), ("KEYS", "*")):
            r = c.call(*cmd)
            assert isinstance(r, Err) and cmd[0].lower() in r.lower(), r
        assert c.call("DBSIZE") == 300
    assert sum(s.dbsize() for s in env.servers) == 300


def test_admin_fanout_when_allowed(env):
    """With allow_fanout_admin: true, KEYS returns every member's keys and
    FLUSHDB empties every member."""
    p = env.proxy("chashd", chashd_only={"allow_fanout_admin": "true"})
    keys = ["f:%d" % i for i in range(300)]
    with p.client() as c:
        fill(c, keys)
        assert sorted(k.decode() for k in c.call("KEYS", "*")) == \
            sorted(keys)
        assert sorted(k.decode() for k in c.call("KEYS", "f:1*")) == \
            sorted(k for k in keys if k.startswith("f:1"))
        assert c.call("FLUSHDB") == Simple("OK")
        assert c.call("DBSIZE") == 0
    assert [s.dbsize() for s in env.servers] == [0, 0, 0]


@pytest.mark.parametrize("kind", KINDS)
def test_exists_across_members_is_summed(env, kind):
    """EXISTS over keys on three members counts them all (a key named
    twice counts twice, as in Redis). nutcracker routes EXISTS to the
    first key's server only and answers 1 (its known fault)."""
    p = env.proxy(kind)
    a, b, c_ = env.keys[0][0], env.keys[1][0], env.keys[2][0]
    with p.client() as c:
        assert c.pipeline([("SET", k, "1") for k in (a, b, c_)]) == \
            [Simple("OK")] * 3
        got = c.pipeline([("EXISTS", a, b), ("EXISTS", a, b, c_, "nokey", b)])
    if kind == "nutcracker":
        assert got == [1, 1], got
    else:
        assert got == [2, 4], got


def test_nutcracker_cannot_scan(env):
    """The contrast: nutcracker does not support SCAN or DBSIZE; it closes
    the connection."""
    p = env.proxy("nutcracker")
    for cmd in (("SCAN", "0"), ("DBSIZE",)):
        with p.client() as c:
            assert c.pipeline([cmd]) == [CLOSED]


# ----------------------------------------------------------- preconnect --

def connected_clients(server):
    info = server.call("INFO", "clients")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return int(text.split("connected_clients:")[1].split()[0])


@pytest.mark.parametrize("pre", [True, False])
def test_preconnect_opens_member_connections_at_start(env, pre):
    """preconnect: true opens each worker's server_connections to every
    member before any client comes (2 workers x 2 = 4 on each); false
    opens none until a request needs one. Only the test's own client is
    counted besides."""
    env.proxy("chashd", preconnect="true" if pre else "false",
              server_connections=2)
    want = 1 + (4 if pre else 0)
    wait_for(lambda: all(connected_clients(s) == want for s in env.servers),
             timeout=5, what="%d clients on each redis-server" % want)
    time.sleep(0.3)
    assert [connected_clients(s) for s in env.servers] == [want] * 3


def test_idle_close_by_a_member_is_not_a_failure(env):
    """Redis' own `timeout` closes chashd's idle (preconnected) server
    connections: that is no member failure. With auto_eject_hosts and
    server_failure_limit 1, the member stays in the ring and its keys
    are answered from it afterwards (an ejection would send them to
    another member, where they are missing)."""
    p = env.proxy("chashd", auto_eject_hosts="true", server_failure_limit=1,
                  server_retry_timeout=30000)
    k = env.keys[0][0]
    with p.client() as c:
        assert c.call("SET", k, "kept") == Simple("OK")
    env.servers[0].call("CONFIG", "SET", "timeout", "1")
    # every connection of chashd's to it gone (only this query's own left)
    wait_for(lambda: connected_clients(env.servers[0]) == 1, timeout=8,
             what="redis-server to close chashd's idle connections")
    with p.client() as c:
        assert c.call("GET", k) == b"kept"


# ------------------------------------------ a client stopping mid-value --

def one_worker(env, **opts):
    """chashd with ONE worker on the pool: every client shares its one
    connection to each member."""
    need_chashd_redis()
    port = free_port()
    return ChashdRedis(env.procs, "global:\n  admin: off\n  workers: 1\n" +
                       env.pool_text(port, **opts))


def half_a_value(key, size):
    """The bytes of SET <key> <size-byte value> up to half its value."""
    whole = encode("SET", key, b"v" * size)
    return whole, whole[:len(whole) - size // 2]


def test_fin_in_the_middle_of_a_value_frees_the_member(env):
    """A client sends half of a 100 KB value (streamed into the member's
    connection) and then closes its side (FIN). Its SET fails, nothing is
    stored, and another client's request for the same member is answered
    at once -- in a pool without `timeout`, where a held connection would
    make it wait for good. A client that sends the WHOLE value and then
    FIN gets its +OK, the value stored."""
    p = one_worker(env, timeout=0)
    k1, k2, k3 = env.keys[0][:3]
    env.servers[0].call("SET", k2, "other")
    whole, half = half_a_value(k1, 100 * 1024)
    with p.client() as a, p.client(timeout=5) as b:
        a.send(half)
        time.sleep(0.3)             # the head is forwarded, then silence
        a.sock.shutdown(socket.SHUT_WR)
        got = a.read_reply()
        assert isinstance(got, Err), got
        assert a.peer_closed(timeout=3)
        assert b.call("GET", k2) == b"other"
    assert env.servers[0].call("EXISTS", k1) == 0
    whole3 = encode("SET", k3, b"w" * (100 * 1024))
    with p.client() as a:
        a.send(whole3)
        a.sock.shutdown(socket.SHUT_WR)
        assert a.read_reply() == Simple("OK")
        assert a.peer_closed(timeout=3)
    assert env.servers[0].call("STRLEN", k3) == 100 * 1024


def test_stalled_value_is_dropped_and_the_queue_goes_on(env):
    """A client sends half of a value and then nothing (no FIN), in a pool
    without `timeout`. Another client's GET for that member waits behind
    it, unsent -- then, after the stall limit (10 s), is sent on a new
    member connection and answered with the value (not an error). The
    stalled client gets an error reply for its SET and keeps its
    connection: the rest of its value, when it comes, is dropped, and its
    next command is served."""
    p = one_worker(env, timeout=0)
    k1, k2 = env.keys[0][:2]
    big = 100 * 1024
    env.servers[0].call("SET", k2, "queued")
    whole, half = half_a_value(k1, big)
    with p.client(timeout=20) as a, p.client(timeout=20) as b:
        a.send(half)
        time.sleep(0.3)
        # a second streamed value for the member waits behind the first
        b.send(encode("SET", k2 + "x", b"y" * big) + encode("GET", k2))
        t0 = time.monotonic()
        assert b.read_reply() == Simple("OK")
        assert b.read_reply() == b"queued"
        waited = time.monotonic() - t0
        assert 5 < waited < 16, waited
        assert a.read_reply() == Err("ERR Connection timed out")
        a.send(whole[len(half):] + encode("PING"))
        assert a.read_reply() == Simple("PONG")
    assert env.servers[0].call("EXISTS", k1) == 0
    assert env.servers[0].call("STRLEN", k2 + "x") == big


@pytest.mark.parametrize("kind", ["redis", "chashd"])
def test_nothing_runs_after_quit(env, kind):
    """SET, QUIT and another SET in ONE write: as on redis-server itself,
    the first SET and QUIT are answered (+OK, +OK), then the connection
    closes, and the SET after QUIT never runs."""
    k = env.keys[1][0]
    port = env.proxy("chashd").port if kind == "chashd" else \
        env.servers[1].port
    with Resp(port) as c:
        c.send(encode("SET", k, "before") + encode("QUIT") +
               encode("SET", k, "after"))
        assert c.read_replies(2) == [Simple("OK"), Simple("OK")]
        assert c.peer_closed(timeout=3)
    assert env.servers[1].call("GET", k) == b"before"


def test_keyless_commands_any_member_answers(env):
    """LOLWUT VERSION 5 and the HELP of OBJECT, MEMORY, XINFO and XGROUP
    name no key; every member answers them the same, so chashd sends
    them to one that is up and relays its reply -- the same reply a
    redis-server gives directly. With two members down (and ejected after
    their first failure), the third answers."""
    p = env.proxy("chashd", auto_eject_hosts="true", server_failure_limit=1,
                  server_retry_timeout=60000)
    cmds = [("LOLWUT", "VERSION", "5"), ("OBJECT", "HELP"), ("MEMORY", "HELP"),
            ("XINFO", "HELP"), ("XGROUP", "HELP")]
    want = [env.servers[0].call(*cmd) for cmd in cmds]
    assert all(not isinstance(w, Err) for w in want), want
    with p.client() as c:
        got = c.pipeline(cmds)
    # LOLWUT's art is random; its signature line is not
    tail = want[0].rsplit(b"\n", 2)[-2]
    assert b"Redis ver." in tail and got[0].rsplit(b"\n", 2)[-2] == tail, \
        got[0][-200:]
    assert got[1:] == want[1:]
    env.servers[0].stop()
    env.servers[1].stop()
    with p.client() as c:
        wait_for(lambda: c.pipeline(cmds[1:]) == want[1:], timeout=5,
                 what="the HELP replies from the member still up")


def test_failover_past_sixteen_members_down(procs, tmp_path):
    """18 members, 16 of them down (on_failure: failover, ejected after one
    failure): every key is served by one of the two still up -- also the
    keys whose first 16 members in preference order are all down (found
    with `chash lookup --replicas 17` on the pool)."""
    need_chashd_redis()
    servers = [RedisServer(procs) for _ in range(18)]
    port = free_port()
    text = redis_pool("big", port, servers, hash="murmur",
                      distribution="ketama", on_failure="failover",
                      auto_eject_hosts="true", server_failure_limit=1,
                      server_retry_timeout=60000)
    conf = tmp_path / "big.yml"
    conf.write_text(text)
    cands = ["k:%d" % i for i in range(8000)]
    r = subprocess.run([CHASH, "lookup", "--config", str(conf), "--pool",
                        "big", "--replicas", "17"],
                       input="\n".join(cands) + "\n", capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    deep = [ln.split("\t")[0] for ln in r.stdout.splitlines()
            if not {"big-1", "big-2"} & set(ln.split("\t")[1:17])]
    assert len(deep) >= 3, deep
    keys = deep + cands[:200]
    p = ChashdRedis(procs, GLOBAL + text)
    for s in servers[2:]:
        s.stop()
    with p.client() as c:
        for _ in range(20):          # each round ejects the members it met
            got = c.pipeline([("SET", k, k) for k in keys])
            if got == [Simple("OK")] * len(keys):
                break
        assert got == [Simple("OK")] * len(keys), \
            [(k, g) for k, g in zip(keys, got) if g != Simple("OK")][:3]
        assert c.call("MGET", *keys) == [k.encode() for k in keys]
    assert servers[0].dbsize() + servers[1].dbsize() == len(keys)


def test_client_connections_limit(env):
    """client_connections: 2 in a redis pool: a third client is closed at
    once (as nutcracker does at its limit) while the two keep being
    served; once one leaves, a new client is served."""
    p = env.proxy("chashd", client_connections=2)
    k = env.keys[0][0]

    def served(*clients):
        try:
            return all(c.call("PING") == Simple("PONG") for c in clients)
        except Exception:
            return False

    def two_clients():
        """two served clients (the readiness probe's connection may still
        hold a slot for a moment after it closed)"""
        pair = [p.client(timeout=2), p.client(timeout=2)]
        if served(*pair):
            return pair
        for c in pair:
            c.close()
        return None
    a, b = wait_for(two_clients, timeout=5, what="two clients served")
    try:
        assert a.call("SET", k, "1") == Simple("OK")
        assert b.call("GET", k) == b"1"
        with p.client() as third:
            assert third.peer_closed(timeout=3)
        assert a.call("GET", k) == b"1"
    finally:
        a.close()
        b.close()

    def new_client_served():
        try:
            with p.client(timeout=2) as c:
                return served(c)
        except OSError:
            return False
    wait_for(new_client_served, timeout=5,
             what="a new client served after the others left")


# ------------------------------------------------ redis_db, health checks --

def test_redis_db_is_selected_on_member_connections(env):
    """redis_db: 3 -- chashd's member connections SELECT 3, so what a
    client writes lands in database 3 of its member, not in 0; the client
    may SELECT 3 (the pool's) but not another database."""
    p = env.proxy("chashd", redis_db=3)
    k = env.keys[2][0]
    with p.client() as c:
        assert c.call("SET", k, "in-3") == Simple("OK")
        assert c.call("SELECT", "3") == Simple("OK")
        r = c.call("SELECT", "0")
        assert isinstance(r, Err) and "redis_db" in r, r
        assert c.call("GET", k) == b"in-3"
    with env.servers[2].client() as direct:
        assert direct.call("GET", k) is None                 # database 0
        assert direct.pipeline([("SELECT", "3"), ("GET", k)]) == \
            [Simple("OK"), b"in-3"]


def admin_chashd(procs, env, health, **opts):
    """chashd with the admin API on, on env's pool with <health> as its
    health_check (a flow map)."""
    need_chashd_redis()
    admin = free_port()
    text = env.pool_text(free_port(), **opts)
    text = text.replace("  servers:\n", "  health_check: %s\n  servers:\n"
                        % health, 1)
    d = ChashdRedis(procs, "global:\n  admin: 127.0.0.1:%d\n  workers: 2\n"
                    % admin + text)
    return d, Api(admin)


def states(api):
    return {n: m["state"] for n, m in api.members(POOL).items()}


def test_health_redis_sees_a_hung_member(procs):
    """health_check type redis (AUTH first, then PING, expects PONG): a
    member that is stopped (SIGSTOP) still accepts TCP connections -- a
    tcp check would keep it up -- but answers no PING, so it goes down;
    after SIGCONT it comes back. The members require a password: the
    probe's AUTH is what lets the others stay up."""
    env = Env(procs, password="s3cret")
    d, api = admin_chashd(procs, env, "{ type: redis, interval: 200ms, "
                          "timeout: 300ms, rise: 1, fall: 1 }",
                          redis_auth="s3cret")
    wait_for(lambda: set(states(api).values()) == {"up"}, timeout=5,
             what="every member up")
    hung = env.servers[1]
    os.kill(hung.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: states(api)["eng-2"] == "down", timeout=5,
                 what="the stopped member down")
        assert states(api)["eng-1"] == states(api)["eng-3"] == "up"
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    wait_for(lambda: states(api)["eng-2"] == "up", timeout=5,
             what="the member back up after SIGCONT")


def test_health_redis_with_a_wrong_password_is_down(procs):
    """The members require a password the pool does not have: the probe's
    AUTH is refused, and every member is down -- the check does not pass
    on a PONG it never got."""
    env = Env(procs, password="s3cret")
    d, api = admin_chashd(procs, env, "{ type: redis, interval: 200ms, "
                          "timeout: 300ms, rise: 1, fall: 1 }",
                          redis_auth="wrong")
    wait_for(lambda: set(states(api).values()) == {"down"}, timeout=5,
             what="every member down")

    def log():
        with open(d.log_path, errors="replace") as f:
            return f.read()  # whole: the handshakes' warnings come after
    # (the line may be written a moment after the state is seen)
    wait_for(lambda: "AUTH refused" in log(), timeout=5,
             what="'AUTH refused' in the log")

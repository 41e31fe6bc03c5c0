# test_replication_order.py -- what the one-order-per-key design of
# replicated pools promises beyond the checker's histories
# (test_replication_checker.py): a member restarted empty is known before
# it answers anything; a hung primary costs a read the hedge, not the
# timeout; a slow client never makes another one's request fail; the
# keys of one command share a hash tag; raising `replicas` across a
# restart keeps every key; a member connection reset with requests on it
# is dropped by the member before the member is repaired; several chashd
# instances cannot share a replicated pool through etcd yet. Real
# redis-servers, chashd with its admin API; every wait bounded.
# SPDX-License-Identifier: BSD-2-Clause
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from admin_util import admin_global
from base_util import CHASHD, free_port, wait_for
from redis_util import Err, RedisServer, Simple, pool_yaml
from redis_util import chashd_redis  # noqa: F401 (a fixture)
from mc_util import chashd_memcache  # noqa: F401 (a fixture)
from replication_util import Replicated, join_all, start_clients

POOL = "store"


def redis_text(pool, port, servers, names, **opts):
    return pool_yaml(pool, port, servers, names, ["  mode: redis"], **opts)


class Rep(Replicated):
    def __init__(self, procs, chashd_redis, n=3, **opts):
        super().__init__(procs, chashd_redis, RedisServer, redis_text, POOL,
                         "r", n, **opts)

    def direct(self, name, *args):
        return self.by_name(name).call(*args)


@pytest.fixture
def rep(procs, chashd_redis):
    def make(**kw):
        return Rep(procs, chashd_redis, **kw)
    return make


def keys_with_primary(r, name, n, prefix="k"):
    """<n> keys whose replica set starts with member <name>."""
    cand = ["%s%d" % (prefix, i) for i in range(40 * n)]
    sets = r.sets(cand)
    out = [k for k in cand if sets[k][0] == name][:n]
    assert len(out) == n, (name, len(out))
    return out


def test_a_member_restarted_empty_answers_no_read_before_it_is_known(rep):
    """read_policy primary: the primary of 30 keys is killed and restarted
    empty, and the keys are read through chashd at once -- before the
    repairer's once-a-second look at the members could notice. chashd's
    new connection to it asked who it is first (a new run_id: behind on
    every key), so each read is answered by another member of the set:
    the value, never nil."""
    r = rep(read_policy="primary")
    keys = keys_with_primary(r, "r1", 30)
    with r.client() as c:
        assert c.pipeline([("SET", k, "v-" + k) for k in keys]) == \
            [Simple("OK")] * len(keys)
        assert c.pipeline([("GET", k) for k in keys]) == \
            [("v-" + k).encode() for k in keys]
        victim = r.by_name("r1")
        victim.stop()
        victim.start()                         # empty, a new run_id
        got = c.pipeline([("GET", k) for k in keys])
    assert got == [("v-" + k).encode() for k in keys], got
    r.wait_repaired()
    for k in keys:
        assert r.direct("r1", "GET", k) == ("v-" + k).encode(), k


def test_a_hung_primary_costs_a_read_its_hedge_not_the_timeout(rep):
    """read_policy primary, timeout 2s: the primary of the keys is frozen
    (SIGSTOP) for 2.5 s while a client writes and reads them. Writes are
    acknowledged by the other two members (write_quorum 2) without
    waiting for it; a read it does not answer is asked of the next member
    after a tenth of the timeout. No request fails, none waits anywhere
    near the timeout, and nothing is lost once it is back."""
    r = rep(read_policy="primary", timeout="2s")
    keys = keys_with_primary(r, "r1", 10)
    victim = r.by_name("r1")
    worst, errors, n = 0.0, [], 0
    with r.client(timeout=10) as c:
        for k in keys:
            assert c.call("SET", k, "0") == Simple("OK")
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            until = time.monotonic() + 2.5
            while time.monotonic() < until:
                for k in keys:
                    t = time.monotonic()
                    got = c.call("SET", k, str(n))
                    back = c.call("GET", k)
                    worst = max(worst, time.monotonic() - t)
                    if got != Simple("OK") or back != str(n).encode():
                        errors.append((k, n, got, back))
                    n += 1
        finally:
            victim.proc.send_signal(signal.SIGCONT)
    print("hung primary: %d SET+GET pairs, the slowest %.0f ms" %
          (n, worst * 1000))
    assert errors == [], errors[:5]
    assert n > 20, n
    # two requests: a write (the others ack it) and a read (the hedge,
    # 200 ms); far from the 2 s timeout even on a loaded machine
    assert worst < 1.0, worst
    r.wait_repaired()
    last = {}
    for i, k in enumerate(keys * ((n + len(keys) - 1) // len(keys))):
        if i < n:
            last[k] = str(i).encode()
    for k, v in last.items():
        for m in r.sets([k])[k]:
            assert r.direct(m, "GET", k) == v, (k, m)


def slow_read(port, key, size, slow_s, per_read):
    """GET <key> on a raw socket with a small receive buffer, reading
    <per_read> bytes every 20 ms for <slow_s> seconds, then the rest at
    full speed: the reply's bytes."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(20)
    s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
    got = bytearray()
    until = time.monotonic() + slow_s
    while time.monotonic() < until:
        got += s.recv(per_read)
        time.sleep(0.02)
    head = b"$%d\r\n" % size
    while len(got) < len(head) + size + 2:
        d = s.recv(1 << 20)
        if not d:
            break
        got += d
    s.close()
    return bytes(got)


@pytest.mark.parametrize("replicas", [1, 3])
def test_a_slow_reader_never_makes_another_client_fail(rep, replicas):
    """A client reads a 16 MB value at a crawl (64 KiB per 20 ms, 4 s) while
    another client reads small keys on the same member, the pool's
    timeout 3 s: every one of its GETs is answered right (the slow
    client's value is held for it rather than the member's connection
    being stopped with the other replies behind it), and the slow client
    gets its value whole, byte for byte."""
    opts = dict(replicas=replicas, timeout="3s", workers=1)
    if replicas == 1:
        opts["migration"] = "off"
    r = rep(n=3 if replicas > 1 else 1, **opts)
    size = 16 << 20
    big = bytes(range(256)) * (size // 256)
    with r.client(timeout=30) as c:
        assert c.call("SET", "big", big) == Simple("OK")
        for i in range(20):
            assert c.call("SET", "k%d" % i, "v%d" % i) == Simple("OK")
    errors, ok = [], [0]
    stop = threading.Event()

    def other(stop):
        with r.client(timeout=10) as c:
            while not stop.is_set():
                for i in range(20):
                    got = c.call("GET", "k%d" % i)
                    if got != b"v%d" % i:
                        errors.append((i, got))
                    else:
                        ok[0] += 1
                time.sleep(0.01)
    threads = []
    try:
        time.sleep(0.1)
        reader = threading.Thread(target=lambda: out.append(
            slow_read(r.port, b"big", size, 4.0, 64 * 1024)))
        out = []
        reader.start()
        time.sleep(0.2)
        threads = start_clients(stop, [other])
        reader.join(timeout=60)
        assert not reader.is_alive()
    finally:
        join_all(stop, threads)
    assert errors == [], errors[:5]
    assert ok[0] > 100, ok
    assert out and out[0] == b"$%d\r\n" % size + big + b"\r\n", \
        len(out[0]) if out else None


def test_the_keys_of_one_command_share_a_hash_tag(rep):
    """Every request of a key runs on the worker its ring hash names: a
    command over keys of different hashes that cannot be split (SUNIONSTORE,
    RENAME) is refused with -CROSSSERVER, even when the keys have the same
    replica set; with a hash tag it runs. Split commands (MSET, MGET, DEL)
    are split per hash and answer as one redis would. SPOP, whose effect
    is random, is refused (each copy would lose another member)."""
    r = rep(n=3, hash_tag='"{}"')  # replicas 3 over 3
    keys = ["a", "b", "c", "d"]
    # three keys of one replica set, in one preference order: one member
    # and one set for all, different hashes
    cand = ["s%d" % i for i in range(200)]
    by_set = {}
    for k, members in r.sets(cand).items():
        by_set.setdefault(tuple(members), []).append(k)
    s1, s2, dst = next(v for v in by_set.values() if len(v) >= 3)[:3]
    with r.client() as c:
        assert c.call("MSET", *[x for k in keys for x in (k, k)]) == \
            Simple("OK")
        assert c.call("MGET", *keys) == [k.encode() for k in keys]
        assert c.call("SADD", s1, "x") == 1
        assert c.call("SADD", s2, "y") == 1
        got = c.call("SUNIONSTORE", dst, s1, s2)
        assert isinstance(got, Err) and got.startswith("CROSSSERVER"), got
        assert c.call("SADD", "{t}s1", "x") == 1
        assert c.call("SADD", "{t}s2", "y") == 1
        assert c.call("SUNIONSTORE", "{t}dst", "{t}s1", "{t}s2") == 2
        assert c.call("DEL", *keys) == 4
        assert c.call("MGET", *keys) == [None] * 4
        # a write whose effect is random would part the copies at once
        got = c.call("SPOP", "{t}dst")
        assert isinstance(got, Err) and "SPOP removes a random member" in \
            got, got
    for name in r.names:
        assert r.direct(name, "SCARD", "{t}dst") == 2, name
        assert r.direct(name, "EXISTS", dst) == 0, name


def test_raising_replicas_across_a_restart_keeps_every_key(
        procs, chashd_redis):
    """A pool with one copy of each key (replicas 1) is restarted with
    replicas 3: its members hold each key on its primary only. chashd
    compares every key after a start, where a copy beats the key's
    absence, and a key's first request waits for its comparison: a
    counter INCRed right after the restart goes on from its value (not
    from 1), and every key ends on the three members of its new set."""
    servers = [RedisServer(procs) for _ in range(3)]
    names = ["r1", "r2", "r3"]
    port, aport = free_port(), free_port()
    one = chashd_redis(admin_global(aport) + redis_text(
        POOL, port, servers, names, replicas=1, migration="off"),
        name="one")
    keys = ["key:%d" % i for i in range(200)]
    with one.client() as c:
        assert c.pipeline([("SET", k, k) for k in keys]) == \
            [Simple("OK")] * len(keys)
        for _ in range(5):
            c.call("INCR", "ctr")
    one.proc.send_signal(signal.SIGTERM)
    one.proc.wait(timeout=10)
    assert sum(s.dbsize() for s in servers) == len(keys) + 1
    three = chashd_redis(admin_global(aport) + redis_text(
        POOL, port, servers, names, replicas=3), name="three")
    with three.client() as c:
        assert c.call("INCR", "ctr") == 6
        assert c.pipeline([("GET", k) for k in keys]) == \
            [k.encode() for k in keys]

    def verified():
        from admin_util import Api
        st, body, _ = Api(aport).get("/api/pools/%s/replication" % POOL)
        return st == 200 and not body["verifying"]
    wait_for(verified, timeout=30, what="the start's comparison")
    for s in servers:
        assert s.dbsize() == len(keys) + 1, s.addr
        assert s.call("GET", "ctr") == b"6", s.addr


def test_a_stuck_member_drops_its_old_connection_before_repair(rep):
    """timeout 200ms: a member frozen for 3 s under INCRs of ten clients
    on one key goes quiet for more than ten times the timeout (2 s):
    chashd resets that connection, thousands of INCRs unanswered on it.
    The member would still run them once thawed: before its key is
    repaired it is told to drop the connection (CLIENT KILL), so the
    repair is never overtaken by them. Every reply unique, the final
    count exact on every copy."""
    r = rep(read_policy="primary", timeout="200ms")
    victim = r.sets(["hits"])["hits"][1]
    replies, errors = [], []
    lock = threading.Lock()

    def client(stop):
        with r.client(timeout=10) as c:
            while not stop.is_set():
                got = c.call("INCR", "hits")
                with lock:
                    (replies if isinstance(got, int) else errors).append(got)
    stop = threading.Event()
    threads = start_clients(stop, [client] * 10)
    try:
        time.sleep(0.5)
        r.by_name(victim).proc.send_signal(signal.SIGSTOP)
        time.sleep(3.0)
        r.by_name(victim).proc.send_signal(signal.SIGCONT)
        time.sleep(0.5)
    finally:
        join_all(stop, threads)
    log = r.chashd.log()
    assert re.search(r"member %s: connection \S+ reset with \d+ requests"
                     % victim, log), log[-2000:]
    r.wait_repaired()
    assert re.search(r"member %s (dropped|no longer holds) the connection"
                     % victim, r.chashd.log()), r.chashd.log()[-2000:]
    assert len(set(replies)) == len(replies)
    # failed INCRs (quorum errors) may or may not have run
    final = int(r.direct(r.names[0], "GET", "hits") or 0)
    assert len(replies) <= final <= len(replies) + len(errors)
    assert max(replies) <= final
    for m in r.sets(["hits"])["hits"]:
        assert int(r.direct(m, "GET", "hits")) == final, m


def test_members_from_etcd_with_replicas_is_refused(tmp_path):
    """Several chashd instances sharing a pool through etcd would each
    order a key's writes their own way: `replicas` > 1 with
    `members_from: etcd` is refused at start, naming why."""
    conf = tmp_path / "c.yml"
    conf.write_text(
        "global:\n  etcd: {endpoints: [http://127.0.0.1:2379], "
        "prefix: /chash, instance: a}\n"
        "store:\n  listen: 127.0.0.1:%d\n  mode: redis\n  replicas: 3\n"
        "  members_from: etcd\n  servers: [127.0.0.1:7001:1 a, "
        "127.0.0.1:7002:1 b, 127.0.0.1:7003:1 c]\n" % free_port())
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode != 0
    assert re.search(r"c\.yml:\d+: 'replicas: 3' is not supported in pool "
                     r"'store' with 'members_from: etcd' yet", p.stderr), \
        p.stderr


def flush_race(r, clients, write, flush, read_copies, seconds=2.0):
    """<clients> threads call write(c, [(key, value)...]) -- pipelined
    appends of unique elements, so nothing a later write does hides an
    earlier one -- on 40 keys while one calls flush(c) over and over, for
    <seconds>. Then,
    for every key, the copies on the members of its set (read_copies(key))
    must be all equal: a flush that fell after an append of a key on one
    member and before it on another would leave them apart for good
    (nothing notes that for a repair). Returns (writes, flushes,
    problems)."""
    keys = ["fk%d" % i for i in range(40)]
    stop = threading.Event()
    counts, problems = {"w": 0, "f": 0}, []
    lock = threading.Lock()

    def writer(stop, tid):
        with r.client(timeout=10) as c:
            n = 0
            while not stop.is_set():
                batch = [(keys[(tid * 7 + n + i) % len(keys)],
                          "%d.%d" % (tid, n + i)) for i in range(20)]
                got = write(c, batch)
                with lock:
                    problems.extend(("write", g) for g in got
                                    if g is not True)
                    counts["w"] += len(batch)
                n += len(batch)

    def flusher(stop):
        with r.client(timeout=10) as c:
            while not stop.is_set():
                got = flush(c)
                with lock:
                    if got is not True:
                        problems.append(("flush", got))
                    counts["f"] += 1
    threads = start_clients(stop, [lambda s, t=t: writer(s, t)
                                   for t in range(clients)] + [flusher])
    try:
        time.sleep(seconds)
    finally:
        join_all(stop, threads)
    r.wait_repaired()
    for k in keys:
        copies = read_copies(k)
        if len(set(copies.values())) != 1:
            problems.append(("apart", k, copies))
    return counts["w"], counts["f"], problems


def test_a_flushall_falls_between_the_same_writes_on_every_member(rep):
    """FLUSHALL (allow_fanout_admin) while eight clients SET forty keys:
    the pool pauses its writes, the flush goes to every member between the
    same two writes of each key, and the writes go on. Afterwards every
    key's copies are equal on its members, and no request failed."""
    r = rep(n=4, allow_fanout_admin="true", read_policy="primary")

    def write(c, batch):
        got = c.pipeline([("RPUSH", k, v) for k, v in batch])
        return [isinstance(g, int) or g for g in got]

    def flush(c):
        got = c.call("FLUSHALL")
        return got == Simple("OK") or got

    def copies(k):
        return {m: tuple(r.direct(m, "LRANGE", k, 0, -1))
                for m in r.sets([k])[k]}
    writes, flushes, problems = flush_race(r, 8, write, flush, copies)
    assert problems == [], problems[:5]
    assert writes > 200 and flushes > 10, (writes, flushes)


def test_a_memcache_flush_all_falls_between_the_same_writes(procs,
                                                          chashd_memcache):
    """The same with memcached's flush_all (the element appended with
    `append`, or `add` when the key is gone)."""
    from mc_util import MemcachedServer, mc_pool

    class McRep(Replicated):
        def __init__(self):
            super().__init__(procs, chashd_memcache, MemcachedServer,
                             lambda *a, **o: mc_pool(*a, **o), POOL, "m", 4,
                             allow_fanout_admin="true")
    r = McRep()

    def write1(c, k, v):
        v = v + ","
        for verb in (b"append", b"add", b"append"):
            got = c.call(b"%s %s 0 0 %d\r\n%s\r\n" % (
                verb, k.encode(), len(v), v.encode()))
            if got == b"STORED\r\n":
                return True
            if got != b"NOT_STORED\r\n":
                return got
        return True  # (a flush between each: the element is simply gone)

    def write(c, batch):
        return [write1(c, k, v) for k, v in batch]

    def flush(c):
        got = c.call(b"flush_all\r\n")
        return got == b"OK\r\n" or got

    def copies(k):
        out = {}
        for m in r.sets([k])[k]:
            with r.by_name(m).client() as c:
                out[m] = c.call(b"get %s\r\n" % k.encode())
        return out
    writes, flushes, problems = flush_race(r, 8, write, flush, copies)
    assert problems == [], problems[:5]
    assert writes > 200 and flushes > 10, (writes, flushes)

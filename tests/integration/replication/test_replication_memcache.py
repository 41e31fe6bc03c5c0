# test_replication_memcache.py -- replication in memcache pools (issue
# 12): each key on the members of its replica set, writes acknowledged by
# write_quorum of them, a member killed under load costs no request, and
# once back (empty: a new pid) it is compared whole (lru_crawler
# metadump of every member) before it serves reads. Real memcacheds,
# chashd with its admin API, concurrent clients (10 of them on the same
# keys with incr and append, issue 25: jepsen_util.Shared checks the
# replies and copies exactly); every wait bounded.
# SPDX-License-Identifier: BSD-2-Clause
import threading
import time

import pytest

from base_util import wait_for
from jepsen_util import Shared
from mc_util import MemcachedServer, mc_pool
from mc_util import chashd_memcache  # noqa: F401 (a fixture)
from replication_util import Replicated, join_all, start_clients

POOL = "cache"


def memcache_text(pool, port, servers, names, **opts):
    opts.setdefault("hash", "md5")
    return mc_pool(pool, port, servers, names, **opts)


class McRep(Replicated):
    """<n> memcacheds m1.. and chashd with pool `cache` (replicas 3 and
    the given keys, hash md5) over them, with the admin API."""

    def __init__(self, procs, chashd_memcache, n=3, **opts):
        super().__init__(procs, chashd_memcache, MemcachedServer,
                         memcache_text, POOL, "m", n, **opts)


@pytest.fixture
def mcrep(procs, chashd_memcache):
    def make(**kw):
        return McRep(procs, chashd_memcache, **kw)
    return make


def test_copies_on_the_set_members_and_replies_once(mcrep):
    """4 memcacheds, replicas 3: a set lands on the 3 members of the key's
    set only; get of many keys, delete and incr answer as one memcached
    would."""
    r = mcrep(n=4, read_policy="quorum")
    keys = ["item:%d" % i for i in range(120)]
    with r.client() as c:
        for k in keys:
            assert c.call(b"set %s 7 0 %d\r\n%s\r\n"
                          % (k.encode(), len(k), k.encode())) == b"STORED\r\n"
        c.send(b"get %s\r\n" % " ".join(keys[:20]).encode())
        units = c.units_until(b"END\r\n")
        assert len(units) == 21, units
        for k, u in zip(keys[:20], units):
            assert u == b"VALUE %s 7 %d\r\n%s\r\n" % (k.encode(), len(k),
                                                       k.encode())
        assert c.call(b"delete item:0\r\n") == b"DELETED\r\n"
        assert c.call(b"delete item:0\r\n") == b"NOT_FOUND\r\n"
        assert c.call(b"set n 0 0 1\r\n5\r\n") == b"STORED\r\n"
        assert c.call(b"incr n 10\r\n") == b"15\r\n"
        assert c.call(b"set q 0 0 1 noreply\r\nz\r\nget q\r\n") == \
            b"VALUE q 0 1\r\nz\r\n"
        assert c.unit() == b"END\r\n"
    sets = r.sets(keys + ["n", "q"])
    for k in keys[1:] + ["n", "q"]:
        for name in r.names:
            held = k in r.by_name(name).holds([k])
            assert held == (name in sets[k]), (k, name, sets[k])
    for name in sets["n"]:
        assert r.by_name(name).values(["n"]) == {"n": b"15"}


def test_cas_and_meta_are_refused_with_replicas(mcrep):
    """Each member keeps its own cas unique: gets, cas and the meta
    commands are refused with a SERVER_ERROR, the connection lives."""
    r = mcrep()
    with r.client() as c:
        for req in (b"gets a\r\n", b"cas a 0 0 1 5\r\nx\r\n",
                    b"mg a v\r\n", b"ms a 1\r\nx\r\n"):
            got = c.call(req)
            assert got.startswith(b"SERVER_ERROR ") and b"replicas" in got, \
                (req, got)
        assert c.call(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"


CLIENTS = 10            # clients of the load: all of them on the shared keys


def load(r, stop, errors, acked, tid, shared, keys=40):
    """One client: set then get its own keys until <stop> (the get returns
    what the set before it wrote), and every round, as every other
    client, `incr ctr 1` and an `append` of a unique token to `log`
    (<shared>: many clients on one key, non-idempotent commands, issue
    25)."""
    n = 0
    deadline = time.monotonic() + 60
    with r.client(timeout=15) as c:
        while not stop.is_set() and time.monotonic() < deadline:
            got = c.call(b"incr ctr 1\r\n")
            shared[0].add_incr(int(got) if got.rstrip().isdigit() else got)
            tok = b"%d.%d," % (tid, n)
            got = c.call(b"append log 0 0 %d\r\n%s\r\n" % (len(tok), tok))
            shared[1].add_element(tid, tok[:-1], got == b"STORED\r\n", got)
            k = b"t%d:%d" % (tid, n % keys)
            v = b"%d-%d" % (tid, n)
            got = c.call(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            if got != b"STORED\r\n":
                errors.append(("set", k, got))
            else:
                acked[k] = v
            got = c.call(b"get %s\r\n" % k)
            want = (b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(acked[k]), acked[k])
                    if k in acked else None)
            if got != want:
                errors.append(("get", k, got, want))
            else:
                assert c.unit() == b"END\r\n"
            n += 1


@pytest.mark.parametrize("policy", ["quorum", "primary"])
def test_kill_one_of_three_under_load_loses_nothing(mcrep, policy):
    """A memcached killed during a set/get load: no request fails. Back,
    empty, it is noticed (a new pid), compared whole with the others and
    refilled before it serves reads; then all three hold every key."""
    r = mcrep(read_policy=policy)
    cold = [b"cold:%d" % i for i in range(200)]
    with r.client() as c:
        for k in cold:
            assert c.call(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(k), k)) \
                == b"STORED\r\n"
        assert c.call(b"set ctr 0 0 1\r\n0\r\n") == b"STORED\r\n"
        assert c.call(b"set log 0 0 0\r\n\r\n") == b"STORED\r\n"
    stop = threading.Event()
    errors, acked, shared = [], {}, (Shared(), Shared())
    threads = start_clients(stop, [
        lambda stop, t=t: load(r, stop, errors, acked, t, shared)
        for t in range(CLIENTS)])
    try:
        time.sleep(1.0)
        r.by_name("m2").stop()
        wait_for(lambda: not r.member("m2")["readable"], timeout=10,
                 what="m2 to stop serving reads")
        time.sleep(1.0)
        r.by_name("m2").start()
        r.wait_repaired()
        time.sleep(1.0)
    finally:
        join_all(stop, threads)
    assert errors == [], errors[:10]
    rp = r.rep()
    assert rp["write_failures"] == 0 and rp["read_failures"] == 0, rp
    assert rp["full_compares"] >= 1, rp
    assert rp["repairs"] >= len(cold), rp
    want = dict(acked)
    want.update({k: k for k in cold})
    names = [k.decode() for k in want]
    for s in r.servers:
        got = s.values(names)
        assert got == {k.decode(): v for k, v in want.items()}
    # the shared keys: incr's replies exactly 1..n, n and the whole log,
    # in each client's order, on every copy
    assert shared[0].errors == [] and shared[1].errors == [], \
        (shared[0].errors[:5], shared[1].errors[:5])
    assert len(shared[0].replies) > 100, len(shared[0].replies)
    for s in r.servers:
        held = s.values(["ctr", "log"])
        assert shared[0].counter_problems(
            int(held.get("ctr", b"-1").strip())) == [], s.addr
        assert shared[1].sequence_problems(
            held.get("log", b"").split(b",")[:-1]) == [], s.addr


def test_two_of_three_down_refuse_writes(mcrep):
    """Two memcacheds of three killed: a set is refused with a
    SERVER_ERROR naming the quorum; a quorum read too."""
    r = mcrep(read_policy="quorum")
    with r.client() as c:
        assert c.call(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    r.by_name("m1").stop()
    r.by_name("m3").stop()
    with r.client() as c:
        got = c.call(b"set k 0 0 1\r\nw\r\n")
        # (the engine may say more after it: that the write may have run)
        assert got.startswith(b"SERVER_ERROR replication: 1 of 3 members "
                              b"acknowledged (need 2)") and \
            got.endswith(b"\r\n") and got.count(b"\n") == 1, got
        got = c.call(b"get k\r\n")
        assert got.startswith(b"SERVER_ERROR replication: 1 of 3 members "
                              b"answered (need 2)"), got
        assert c.call(b"version\r\n").startswith(b"VERSION")
    assert r.rep()["write_failures"] == 1


def test_a_member_added_is_filled_before_it_serves_reads(mcrep, tmp_path):
    """replicas 2 over 3 memcacheds, a 4th added while clients read keys
    written before: not one read misses (the new member serves no read
    of a key before it holds it; its keys come from the others' metadump),
    and afterwards each key is on exactly the two members of its new set."""
    r = mcrep(n=4, replicas=2, read_policy="primary")
    st, body, _ = r.api.call("DELETE", "/api/pools/%s/members/m4?now=1"
                             % POOL)
    assert st == 200, body
    r.wait_filled(1)
    r.by_name("m4").flush()
    keys = [b"k:%d" % i for i in range(1500)]
    with r.client() as c:
        c.send(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(k), k)
                        for k in keys))
        assert c.call(b"version\r\n").startswith(b"VERSION")
    stop = threading.Event()
    errors = []

    def reader(stop):
        deadline = time.monotonic() + 60
        with r.client(timeout=15) as c:
            while not stop.is_set() and time.monotonic() < deadline:
                for i in range(0, len(keys), 50):
                    part = keys[i:i + 50]
                    c.send(b"get %s\r\n" % b" ".join(part))
                    units = c.units_until(b"END\r\n")
                    if len(units) != len(part) + 1:
                        errors.append(len(units))
    threads = start_clients(stop, [reader])
    try:
        time.sleep(0.3)
        st, body, _ = r.api.call(
            "POST", "/api/pools/%s/members" % POOL,
            {"name": "m4", "address": r.by_name("m4").addr, "weight": 1})
        assert st in (200, 201), body
        r.wait_filled(2)
        time.sleep(0.3)
    finally:
        join_all(stop, threads)
    assert errors == [], errors[:10]
    sets = r.sets([k.decode() for k in keys])
    assert {len(m) for m in sets.values()} == {2}
    held = {name: r.by_name(name).holds([k.decode() for k in keys])
            for name in r.names}
    moved = 0
    for k in keys:
        ks = k.decode()
        for name in r.names:
            assert (ks in held[name]) == (name in sets[ks]), \
                (ks, name, sets[ks])
        moved += "m4" in sets[ks]
    assert moved > 200          # m4 took about half of the keys' copies
    assert r.rep()["cleaned"] >= moved

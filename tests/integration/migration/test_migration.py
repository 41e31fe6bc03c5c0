# test_migration.py -- live migration of a redis pool as a user checks it,
# on real redis-servers behind chashd (`migration: copy`): a member added
# and one removed while client threads run a mixed workload through
# chashd, then the invariants of reference/redis-memcached.md 3.8 read
# off the redis-servers directly (no lost acked write, no resurrected
# delete, TTLs kept, short TTLs expired, types equal, every key once and
# on its new owner, the moved count exact); the race scenarios S1-S7 as
# deterministic tests with a copier slowed to 1 key/s so the keys a
# client touches are still on their old owner; the dry run's
# keys_to_move; one migration at a time. On a chashd that does not move
# data (nutcracker's behaviour) every test here fails.
# SPDX-License-Identifier: BSD-2-Clause
import re
import signal
import threading
import time

import pytest

from admin_util import parse_metrics
from base_util import wait_for
from migration_util import store_fixture  # noqa: F401 (the fixture store)
from migration_util import (brief, POOL, Change, Sampler, Store, Workload,
                            binomial_slack, check_placement, check_workload,
                            moving_keys, plan, wait_shorts_expired)
from redis_util import Err, Simple, encode

SLOW = {"migration_rate": 1, "migration_batch": 1}



def moved_total(rep):
    return rep["keys_moved"] + rep["keys_moved_by_traffic"]


def check_finished(last, epoch):
    assert last["epoch"] == epoch, last
    assert last["phase"] == "done", last
    assert last["anomalies"] == 0, last
    assert last["failed_keys"] == 0, last


# ------------------------------------------------- add / remove under load --

def run_change(st, wl, change, do_change, settle=0.5):
    """Workload started, <do_change>() mid-way (returns the change's
    report), the sampler watching moving keys until the migration ends,
    the workload stopped; the finished migration's `last`."""
    sampler = Sampler(st, change)
    wl.start()
    try:
        time.sleep(settle)
        status, rep = do_change()
        assert status in (200, 201), (status, rep)
        assert "migration" in rep, rep
        epoch = rep["migration"]["epoch"]
        sampler.start()
        last = st.wait_done(epoch)
        sampler.stop()
        time.sleep(0.3)           # traffic after the end, on the new ring
    finally:
        if sampler.th.is_alive():
            sampler.stop()
        wl.stop()
    return rep, last, sampler


def check_counts(change, wl, rep, last):
    """keys moved == the keys whose owner changed: exactly the moving
    stable keys, plus at most the moving volatile ones (deleted, expired
    or created during the move); keys_predicted near them."""
    stable = set(wl.stable_keys())
    lo = len([k for k in change.moving if k in stable])
    vol = len([k for k in change.moving if k not in stable])
    moved = moved_total(last)
    assert lo <= moved <= lo + vol, \
        "keys moved %d (copier %d + traffic %d); %d stable keys changed " \
        "owner, %d volatile" % (moved, last["keys_moved"],
                                last["keys_moved_by_traffic"], lo, vol)
    frac = lo / float(len(stable))
    nvol = len(wl.volatile_keys())
    slack = binomial_slack(len(stable), frac) + frac * nvol
    assert abs(rep["migration"]["keys_predicted"] - lo) <= slack, \
        (rep["migration"], lo, slack)


@pytest.mark.parametrize("conns", [1, 4])
def test_add_member_mid_workload(store, conns):
    """4 client threads through chashd (server_connections 1, or 4: the
    gate and the command must still keep each key's order); s1 added
    mid-way; the copier at
    150 keys/s (after a second's burst) so the move overlaps the
    traffic. Afterwards every
    invariant holds on the servers read directly, no client got an error,
    keys moved by traffic (the gate) and by the copier add up to the
    keys whose owner changed."""
    st = store(n=3, spares=1, opts={"migration_rate": 150,
                                    "migration_batch": 10,
                                    "server_connections": conns})
    wl = Workload(st.port, threads=4)
    with st.client() as c:
        wl.prepare(c)
    ch = plan(st, wl.all_keys(), add="s1")
    st.check_owners_match_api(ch.old)
    assert len(ch.moving) > 200

    def add():
        with st.client() as c:
            wl.set_shorts(c)      # 300 ms keys expire during the move
        return st.add("s1")
    rep, last, sampler = run_change(st, wl, ch, add)
    check_finished(last, rep["migration"]["epoch"])
    st.check_owners_match_api(ch.new)
    wait_shorts_expired(wl)
    bad = check_workload(st, wl, ch.new)
    assert not bad, brief(bad) + "\n" + wl.summary()
    assert not sampler.both, "on old and new owner at once: %s" % sampler.both
    assert sampler.rounds > 0
    assert wl.error_count() == 0, "%s; e.g. %s" % (wl.summary(), wl.errors[:3])
    assert wl.lost == 0, wl.summary()
    check_counts(ch, wl, rep, last)
    # the clients touched moving keys before the copier did
    assert last["keys_moved_by_traffic"] > 0, last
    assert st.servers["s1"].dbsize() > 0
    assert wl.gets > 1000 and wl.ops > 3000, wl.summary()


def test_remove_member_mid_workload(store):
    """r2 removed mid-workload: shown draining and leaving while its keys
    move, gone from the pool after; every invariant holds; r2 is empty."""
    st = store(n=4, spares=0, opts={"migration_rate": 150,
                                    "migration_batch": 10})
    wl = Workload(st.port, threads=4)
    with st.client() as c:
        wl.prepare(c)
    ch = plan(st, wl.all_keys(), remove="r2")
    assert len(ch.moving) > 200
    assert {ch.old[k] for k in ch.moving} == {"r2"}
    seen = {}

    def remove():
        with st.client() as c:
            wl.set_shorts(c)
        status, rep = st.remove("r2")
        st_, pool, _ = st.api.get("/api/pools/" + POOL)
        seen["pool"] = pool
        return status, rep
    rep, last, sampler = run_change(st, wl, ch, remove)
    check_finished(last, rep["migration"]["epoch"])
    members = {m["name"] for m in st.api.pool(POOL)["members"]}
    assert members == {"r1", "r3", "r4"}, members
    st.check_owners_match_api(ch.new)
    wait_shorts_expired(wl)
    bad = check_workload(st, wl, ch.new)
    assert not bad, brief(bad) + "\n" + wl.summary()
    assert not sampler.both, sampler.both
    assert wl.error_count() == 0, "%s; e.g. %s" % (wl.summary(), wl.errors[:3])
    check_counts(ch, wl, rep, last)
    assert st.servers["r2"].dbsize() == 0
    # while it ran, the pool showed r2 draining and leaving
    during = {m["name"]: m for m in seen["pool"]["members"]}
    assert "r2" in during, "r2 gone from the pool at once: %s" % during
    assert during["r2"]["state"] == "draining", during["r2"]
    assert during["r2"].get("leaving") is True, \
        "r2 while it leaves: %s" % during["r2"]


# ---------------------------------------------------- race scenarios S1-S7 --

class Slow:
    """A store whose copier moves 1 key per second (its bucket lets the
    first key go at once), <nfill> filler keys (the copier has work to
    do), and s1 about to be added. `sets(prefix, n)`: three sets of <n>
    key names that move to s1, each set up alike by the test before
    add(); add() returns once the copier's first keys are on s1, and
    pick() then gives a set that is wholly on its old owners (the copier
    takes at most two keys before the next second): the keys a client
    touches next are not yet copied."""

    def __init__(self, store, nfill=200, opts=None):
        o = dict(SLOW)
        o.update(opts or {})
        self.st = store(n=3, spares=1, opts=o)
        self.new_ring = dict(self.st.members)
        self.new_ring["s1"] = 1
        with self.st.client() as c:
            got = c.pipeline([("SET", "fill:%d" % i, i)
                              for i in range(nfill)])
            assert all(r == Simple("OK") for r in got)
        self.owner = {}
        self.candidates = []

    def sets(self, prefix, n, count=3):
        out = []
        for k, o, nw in moving_keys(self.st, self.new_ring, count * n,
                                    prefix):
            assert nw == "s1"
            self.owner[k] = (o, nw)
            out.append(k)
        self.candidates = [out[i * n:(i + 1) * n] for i in range(count)]
        return self.candidates

    def tag_sets(self, prefix, fields):
        """Like sets(), for two hash tags that move to s1: each set is
        the keys {prefix:i}field of one tag (they move together)."""
        tags, i = [], 0
        while len(tags) < 3:
            names = ["{%s:%d}" % (prefix, j) for j in range(i, i + 200)]
            o = self.st.owners([t + "x" for t in names])
            nw = self.st.owners([t + "x" for t in names], self.new_ring)
            tags += [t for t in names if o[t + "x"] != nw[t + "x"]]
            i += 200
            assert i < 20000, "no moving hash tag"
        self.candidates = []
        for t in tags[:3]:
            ks = [t + f for f in fields]
            for k in ks:
                self.owner[k] = (self.st.owners([k])[k], "s1")
            self.candidates.append(ks)
        return self.candidates

    def add(self):
        status, rep = self.st.add("s1")
        assert status == 201, (status, rep)
        self.epoch = rep["migration"]["epoch"]
        m = self.st.migration()
        assert m["active"] is True and m["epoch"] == self.epoch, m
        s1 = self.st.servers["s1"]
        wait_for(lambda: s1.dbsize() >= 1, timeout=5,
                 what="the copier's first key on s1")
        self.t_first = time.monotonic()
        time.sleep(0.15)   # its bucket may let a second key go at once
        return rep

    def pick(self):
        for ks in self.candidates:
            if all(self.st.holder(k) == [self.owner[k][0]] for k in ks):
                self.before = self.traffic_moved()
                assert time.monotonic() - self.t_first < 0.5, \
                    "too slow to pick before the copier's next key"
                return ks
        raise AssertionError("no candidate set wholly on its old owners: "
                             "%s" % self.st.migration())

    def server(self, name):
        return self.st.servers[name]

    def uncopied(self, k):
        """<k> is on its old owner only (the copier has not moved it)."""
        o, n = self.owner[k]
        assert self.st.holder(k) == [o], \
            "%s: on %s, want still on its old owner %s only (copier too " \
            "fast at migration_rate: 1? %s)" % (k, self.st.holder(k), o,
                                                self.st.migration())

    def on_new_only(self, k):
        o, n = self.owner[k]
        assert self.st.holder(k) == [n], \
            "%s on %s, want on its new owner %s only" % (k, self.st.holder(k),
                                                         n)

    def traffic_moved(self):
        return self.st.migration()["keys_moved_by_traffic"]

    def check_gated(self, ks):
        """Each of <ks> was moved by the client's request (the gate), not
        by the copier."""
        m = self.st.migration()
        assert m["keys_moved_by_traffic"] - self.before == len(ks), m


def test_s1_s2_read_modify_write_on_an_uncopied_key(store):
    """S1/S2: INCR on a moving key the copier has not reached runs against
    the real old value (101, not 1), and so does every read-modify-write:
    APPEND, LPUSH, SADD, HINCRBY, SETRANGE, ZINCRBY, DECRBY. Each key then
    lives on its new owner only, moved there by the request (the gate)."""
    s = Slow(store)
    with s.st.client() as c:
        for ks in s.sets("rmw", 8):
            setup = [("SET", ks[0], 100), ("SET", ks[1], "abc"),
                     ("RPUSH", ks[2], "a", "b"), ("SADD", ks[3], "x", "y"),
                     ("HSET", ks[4], "f", 10), ("SET", ks[5], "hello"),
                     ("ZADD", ks[6], 5, "m"), ("SET", ks[7], 50)]
            assert not any(isinstance(r, Err) for r in c.pipeline(setup))
        s.add()
        ks = s.pick()
        got = [c.call("INCR", ks[0]), c.call("APPEND", ks[1], "d"),
               c.call("LPUSH", ks[2], "z"), c.call("SADD", ks[3], "z"),
               c.call("HINCRBY", ks[4], "f", 5),
               c.call("SETRANGE", ks[5], 0, "J"),
               c.call("ZINCRBY", ks[6], 2, "m"), c.call("DECRBY", ks[7], 8)]
        s.check_gated(ks)
        assert got == [101, 4, 3, 1, 15, 5, b"7", 42], got
        assert c.call("GET", ks[0]) == b"101"
        assert c.call("GET", ks[1]) == b"abcd"
        assert c.call("LRANGE", ks[2], 0, -1) == [b"z", b"a", b"b"]
        assert c.call("GET", ks[5]) == b"Jello"
    for k in ks:
        s.on_new_only(k)
    assert s.server("s1").call("GET", ks[0]) == b"101"


def test_s3_reads_of_uncopied_keys_are_never_nil(store):
    """S3: reads during the move see the value wherever the key is: GET,
    MGET across moving and non-moving keys, EXISTS, TYPE, STRLEN, LRANGE,
    HGETALL, SMEMBERS on keys the copier has not reached."""
    s = Slow(store)
    still = "fill:0"       # may or may not move: MGET mixes both kinds
    with s.st.client() as c:
        for ks in s.sets("rd", 6):
            setup = [("SET", ks[0], "v0"), ("SET", ks[1], "v1"),
                     ("SET", ks[2], "v2"), ("RPUSH", ks[3], 1, 2, 3),
                     ("HSET", ks[4], "a", 1), ("SADD", ks[5], "q")]
            assert not any(isinstance(r, Err) for r in c.pipeline(setup))
        s.add()
        ks = s.pick()
        assert c.call("GET", ks[0]) == b"v0"
        assert c.call("MGET", ks[1], still, ks[2], "nokey:1") == \
            [b"v1", b"0", b"v2", None]
        assert c.call("EXISTS", ks[3], ks[4], ks[5]) == 3
        assert c.call("TYPE", ks[3]) == Simple("list")
        assert c.call("LRANGE", ks[3], 0, -1) == [b"1", b"2", b"3"]
        assert c.call("HGETALL", ks[4]) == [b"a", b"1"]
        assert c.call("SMEMBERS", ks[5]) == [b"q"]
        assert c.call("STRLEN", ks[0]) == 2
    # a read moved the key too (gate everything), or left it in place
    # (old-then-new fast path); either way it is on one server
    for k in ks:
        assert len(s.st.holder(k)) == 1, (k, s.st.holder(k))


def test_s4_delete_before_the_copy_is_not_resurrected(store):
    """S4: DEL / UNLINK of moving keys the copier has not reached: the
    reply counts them, and they exist on neither the old nor the new
    owner, so no later copy can bring them back."""
    s = Slow(store)
    with s.st.client() as c:
        for ks in s.sets("dl", 5):
            assert c.pipeline([("SET", k, "x") for k in ks]) == \
                [Simple("OK")] * len(ks)
        s.add()
        ks = s.pick()
        assert c.call("DEL", ks[0]) == 1
        assert c.call("DEL", ks[1], ks[2], "nokey:2") == 2
        assert c.call("UNLINK", ks[3]) == 1
        assert c.call("GET", ks[0]) is None
        assert c.call("EXISTS", *ks[:4]) == 0
    for k in ks[:4]:
        assert s.st.holder(k) == [], (k, s.st.holder(k))
    time.sleep(1.5)        # the copier goes on (1 key/s)
    for k in ks[:4]:
        assert s.st.holder(k) == [], (k, s.st.holder(k))


def test_s5_late_in_flight_write_and_the_drain_barrier(store):
    """S5: the old owner paused for writes (CLIENT PAUSE 1500 WRITE); INCRs
    sent through chashd before the change are stuck there; s1 is added.
    While they are stuck the migration is draining (the copier waits).
    When the pause ends the late INCRs run, then the keys move: a
    following INCR counts on from them, and each key lives on s1 only."""
    s = Slow(store)
    ks = s.sets("late", 6)
    ks = ks[0] + ks[1]
    by_o = {}
    for k in ks:
        by_o.setdefault(s.owner[k][0], []).append(k)
    o, group = max(by_o.items(), key=lambda t: len(t[1]))
    x, y = group[0], group[1]         # x = 1 before; y absent
    with s.st.client() as c:
        assert c.call("SET", x, 1) == Simple("OK")
    late = s.st.client()
    with late, s.server(o).client() as d:
        assert d.call("CLIENT", "PAUSE", 1500, "WRITE") == Simple("OK")
        t_pause = time.monotonic()
        late.send(encode("INCR", x) + encode("INCR", y))
        time.sleep(0.2)               # they reach o and wait there
        res = {}

        def add():
            res["rep"] = s.st.add("s1")
        th = threading.Thread(target=add, daemon=True)
        th.start()
        phases = []
        while time.monotonic() - t_pause < 1.3:
            if "rep" in res:      # the change is made; the drain waits
                st_, m, _ = s.st.api.get("/api/pools/%s/migration" % POOL)
                if st_ == 200 and m.get("active") and \
                        time.monotonic() - t_pause < 1.4:
                    src = {e["member"]: e for e in m.get("sources", [])}
                    phases.append((m.get("phase"),
                                   src.get(o, {}).get("phase")))
            time.sleep(0.05)
        th.join(10)
        assert not th.is_alive(), "POST of s1 still blocked after the pause"
        assert res["rep"][0] == 201, res["rep"]
        # a POST that answers during the pause shows the drain waiting
        # (one that waits for the drain itself is fine too)
        assert all("draining" in p for p in phases), \
            "while a write to %s was in flight: %s" % (o, phases)
        got = late.read_replies(2)
        assert time.monotonic() - t_pause >= 1.4, "the pause did not hold"
    assert got == [2, 1], got
    with s.st.client() as c:
        assert c.call("INCR", x) == 3
        assert c.call("INCR", y) == 2
    s.on_new_only(x)
    s.on_new_only(y)
    time.sleep(0.3)
    assert s.server(o).call("EXISTS", x, y) == 0
    assert s.server("s1").call("MGET", x, y) == [b"3", b"2"]


def test_s6_ttl_commands_on_an_uncopied_key_keep_the_ttl(store):
    """S6: TTL / PTTL read the real TTL of a key not yet copied; EXPIRE
    sets it; PERSIST clears it; SET KEEPTTL keeps it; each key then has
    on s1 the TTL the commands gave it (not -1, not the old one)."""
    s = Slow(store)
    with s.st.client() as c:
        for ks in s.sets("tt", 5):
            setup = [("SET", ks[0], "a", "EX", 50),
                     ("SET", ks[1], "b", "EX", 50),
                     ("SET", ks[2], "c", "PX", 50000),
                     ("SET", ks[3], "d", "EX", 50), ("SET", ks[4], "e")]
            assert c.pipeline(setup) == [Simple("OK")] * 5
        s.add()
        ks = s.pick()
        assert c.call("EXPIRE", ks[0], 40) == 1
        assert c.call("TTL", ks[0]) in (39, 40)
        p = c.call("PTTL", ks[2])
        assert 45000 < p <= 50000, p
        assert c.call("PERSIST", ks[1]) == 1
        assert c.call("TTL", ks[1]) == -1
        assert c.call("SET", ks[3], "d2", "KEEPTTL") == Simple("OK")
        assert c.call("TTL", ks[4]) == -1
    n = s.server("s1")
    for k in ks[:2] + ks[3:]:
        s.on_new_only(k)
    assert 39000 < n.call("PTTL", ks[0]) <= 40000
    assert n.call("PTTL", ks[1]) == -1
    assert 45000 < n.call("PTTL", ks[3]) <= 50000
    assert n.call("GET", ks[3]) == b"d2"
    assert n.call("PTTL", ks[4]) == -1


def test_s7_conditional_writes_decided_on_the_old_value(store):
    """S7: SET NX / SETNX refuse, SET XX accepts, GETSET and SET GET return
    the real old value, GETDEL returns it and leaves the key nowhere --
    on moving keys the copier has not reached."""
    s = Slow(store)
    with s.st.client() as c:
        for ks in s.sets("cw", 6):
            assert c.pipeline([("SET", k, "old%d" % i)
                               for i, k in enumerate(ks)]) == \
                [Simple("OK")] * len(ks)
        s.add()
        ks = s.pick()
        assert c.call("SET", ks[0], "new", "NX") is None
        assert c.call("SETNX", ks[1], "new") == 0
        assert c.call("SET", ks[2], "new", "XX") == Simple("OK")
        assert c.call("GETSET", ks[3], "new") == b"old3"
        assert c.call("SET", ks[4], "new", "GET") == b"old4"
        assert c.call("GETDEL", ks[5]) == b"old5"
        s.check_gated(ks)
        assert c.call("MGET", *ks) == [b"old0", b"old1", b"new", b"new",
                                       b"new", None]
    for k in ks[:5]:
        s.on_new_only(k)
    assert s.st.holder(ks[5]) == []


def test_s8_multi_key_and_destination_keys_move_first(store):
    """Multi-key commands on one hash tag whose keys the copier has not
    reached: every key they name is moved first, destinations included --
    RPOPLPUSH, SUNIONSTORE and RENAME onto existing keys, MSETNX against
    an existing key, EVAL on a declared key. No old destination is left
    on the old owner for a later copy to bring back."""
    s = Slow(store)
    fields = ["src", "dst", "s1", "s2", "st", "r1", "r2", "m1", "e"]
    with s.st.client() as c:
        for ks in s.tag_sets("mk", fields):
            k = dict(zip(fields, ks))
            setup = [("RPUSH", k["src"], "a", "b"), ("RPUSH", k["dst"], "x"),
                     ("SADD", k["s1"], "p", "q"), ("SADD", k["s2"], "q", "r"),
                     ("SADD", k["st"], "old"), ("SET", k["r1"], "one"),
                     ("SET", k["r2"], "two"), ("SET", k["m1"], "m"),
                     ("SET", k["e"], 100)]
            assert not any(isinstance(r, Err) for r in c.pipeline(setup))
        s.add()
        ks = s.pick()
        k = dict(zip(fields, ks))
        t = k["src"][:k["src"].index("}") + 1]
        assert c.call("RPOPLPUSH", k["src"], k["dst"]) == b"b"
        assert c.call("SUNIONSTORE", k["st"], k["s1"], k["s2"]) == 3
        assert c.call("RENAME", k["r1"], k["r2"]) == Simple("OK")
        assert c.call("MSETNX", k["m1"], "new", t + "m2", "new") == 0
        assert c.call("EVAL", "return redis.call('INCR', KEYS[1])", 1,
                      k["e"]) == 101
        assert c.call("LRANGE", k["dst"], 0, -1) == [b"b", b"x"]
        assert sorted(c.call("SMEMBERS", k["st"])) == [b"p", b"q", b"r"]
        assert c.call("MGET", k["r1"], k["r2"], k["m1"], t + "m2") == \
            [None, b"one", b"m", None]
    for f in ("src", "dst", "s1", "s2", "st", "r2", "m1", "e"):
        s.on_new_only(k[f])
    assert s.st.holder(k["r1"]) == []
    n = s.server("s1")
    assert n.call("LRANGE", k["dst"], 0, -1) == [b"b", b"x"]
    assert sorted(n.call("SMEMBERS", k["st"])) == [b"p", b"q", b"r"]
    assert n.call("GET", k["e"]) == b"101"


# ----------------------------------------------------- dry run, exact count --

def test_dry_run_keys_to_move_then_the_move_is_exact(store):
    """10k keys: the dry run of adding s1 says keys_to_move within 5% of
    the exact count of keys whose owner changes, keys_total = 10000, and
    changes nothing; removing r1 likewise. Then the add with no traffic:
    the keys moved are exactly the keys that changed owner, every one on
    its new owner only."""
    st = store(n=3, spares=1, opts={"migration_rate": 0,
                                    "migration_batch": 100})
    keys = ["u:%d" % i for i in range(10000)]
    with st.client() as c:
        for i in range(0, len(keys), 1000):
            got = c.pipeline([("SET", k, k) for k in keys[i:i + 1000]])
            assert all(r == Simple("OK") for r in got)
    assert sum(st.servers[n].dbsize() for n in ("r1", "r2", "r3")) == 10000
    add = plan(st, keys, add="s1")
    rem = plan(st, keys, remove="r1")
    for (status, rep), exact in ((st.add("s1", dry_run=True), add),
                                 (st.remove("r1", dry_run=True), rem)):
        assert status == 200 and rep["dry_run"] is True, rep
        assert rep["keys_total"] == 10000, rep
        n = len(exact.moving)
        assert abs(rep["keys_to_move"] - n) <= 0.05 * n, \
            (rep["keys_to_move"], n)
    assert st.migration()["active"] is False
    assert {m["name"] for m in st.api.pool(POOL)["members"]} == \
        {"r1", "r2", "r3"}
    assert st.servers["s1"].dbsize() == 0

    status, rep = st.add("s1")
    assert status == 201, rep
    mig = rep["migration"]
    assert abs(mig["keys_predicted"] - len(add.moving)) <= \
        0.05 * len(add.moving), (mig, len(add.moving))
    last = st.wait_done(mig["epoch"])
    check_finished(last, mig["epoch"])
    assert moved_total(last) == len(add.moving), (last, len(add.moving))
    assert last["keys_moved_by_traffic"] == 0, last
    assert last["keys_total"] == 10000
    bad, where = check_placement(st, keys, add.new, set(keys))
    assert not bad, brief(bad)
    assert st.servers["s1"].dbsize() == len(add.moving)
    with st.client() as c:
        sample = keys[::97]
        assert c.call("MGET", *sample) == [k.encode() for k in sample]


def test_prometheus_families_follow_the_api(store):
    """After an add with no traffic, /metrics has the migration families
    and they agree with GET .../migration: active 0, 1 finished, keys
    moved by the copier equal to keys_moved, by requests 0, keys scanned,
    anomalies 0."""
    st = store(n=3, spares=1, opts={"migration_rate": 0})
    keys = ["pm:%d" % i for i in range(2000)]
    with st.client() as c:
        for i in range(0, len(keys), 1000):
            c.pipeline([("SET", k, k) for k in keys[i:i + 1000]])
    status, rep = st.add("s1")
    assert status == 201, rep
    last = st.wait_done(rep["migration"]["epoch"])
    code, text, _ = st.api.get("/metrics")
    assert code == 200
    _, _, samples = parse_metrics(text)

    def metric(name, **labels):
        return [(lb, v) for n, lb, v in samples if n == name and
                all(lb.get(a) == b for a, b in labels.items())]
    assert [v for _, v in metric("chashd_migration_active", pool=POOL)] \
        == [0]
    assert [v for _, v in metric("chashd_migrations_total", pool=POOL)] \
        == [1]
    moved = metric("chashd_migration_keys_moved_total", pool=POOL)
    assert {lb.get("by") for lb, _ in moved} == {"copier", "request"}, moved
    assert [v for lb, v in moved if lb["by"] == "copier"] == \
        [last["keys_moved"]]
    assert [v for lb, v in moved if lb["by"] == "request"] == \
        [last["keys_moved_by_traffic"]] == [0]
    assert [v for _, v in metric("chashd_migration_keys_scanned_total",
                                 pool=POOL)] == [last["keys_scanned"]]
    assert [v for _, v in metric("chashd_migration_anomalies_total",
                                 pool=POOL)] == [0]
    # the progress of each source only while one runs
    assert metric("chashd_migration_progress_ratio", pool=POOL) == []


# ------------------------------------------------ one migration at a time --

def test_one_migration_at_a_time(store):
    """While s1's migration runs (copier at 1 key/s): adding s2, removing
    r1, reweighting or draining r2 are each refused with 409 `migration in
    progress`, and so is a reload that changes members (chashd keeps its
    config); nothing changes in the pool."""
    st = store(n=3, spares=2, opts=SLOW)
    with st.client() as c:
        c.pipeline([("SET", "fill:%d" % i, i) for i in range(200)])
    status, rep = st.add("s1")
    assert status == 201, rep
    before = {m["name"]: (m["weight"], m["state"])
              for m in st.api.pool(POOL)["members"]}
    assert set(before) == {"r1", "r2", "r3", "s1"}
    tries = [("POST", "/api/pools/%s/members" % POOL,
              {"name": "s2", "address": st.servers["s2"].addr}),
             ("DELETE", "/api/pools/%s/members/r1" % POOL, None),
             ("PATCH", "/api/pools/%s/members/r2" % POOL, {"weight": 3}),
             ("PATCH", "/api/pools/%s/members/r2" % POOL,
              {"state": "drain"})]
    for method, path, body in tries:
        code, j, _ = st.api.call(method, path, body)
        assert code == 409, (method, path, code, j)
        assert "migration in progress" in str(j), j
    # a reload that adds s2 to the config
    text = st.config_text().replace(
        "  servers:\n", "  servers:\n    - %s:1 s2\n" % st.servers["s2"].addr)
    assert "s2" in text

    def reloads():
        return re.findall(r"^.*reload(?:: | )(?:done|refused).*$",
                          st.log(10 ** 7), re.M)
    n0 = len(reloads())
    with open(st.conf, "w") as f:
        f.write(text)
    st.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: len(reloads()) > n0, timeout=10,
             what="the reload to end in the log")
    assert st.proc.poll() is None
    after = {m["name"]: (m["weight"], m["state"])
             for m in st.api.pool(POOL)["members"]}
    assert after == before, "a reload during the migration changed the " \
        "members: %s -> %s" % (sorted(before), sorted(after))
    line = reloads()[-1]
    assert "refused" in line and "migration in progress" in line, line
    m = st.migration()
    assert m["active"] is True and m["change"] == "add s1", m
    assert st.servers["s2"].dbsize() == 0
    with st.client() as c:
        got = c.call("MGET", *["fill:%d" % i for i in range(200)])
    assert got == [b"%d" % i for i in range(200)]


def test_reload_that_adds_a_member_migrates(store):
    """With no migration running, a reload whose config adds s1 starts
    one (as an API add would): it finishes, every key is on its new owner
    only and reads back through chashd."""
    st = store(n=3, spares=1, opts={"migration_rate": 0})
    keys = ["rl:%d" % i for i in range(2000)]
    with st.client() as c:
        for i in range(0, len(keys), 1000):
            c.pipeline([("SET", k, k) for k in keys[i:i + 1000]])
    ch = plan(st, keys, add="s1")
    st.members["s1"] = 1
    with open(st.conf, "w") as f:
        f.write(st.config_text())
    st.proc.send_signal(signal.SIGHUP)
    def started():
        m = st.migration()
        return m["active"] or m.get("last") is not None
    try:
        wait_for(started, timeout=5, what="a migration after the reload")
    except AssertionError:
        pass
    with st.client() as c:
        got = c.call("MGET", *keys)
    nil = [k for k, v in zip(keys, got) if v is None]
    assert not nil, "%d of %d keys (%d moving) read nil after the reload; " \
        "migration: %s" % (len(nil), len(keys), len(ch.moving),
                           st.migration())
    last = st.wait_done()
    assert last["phase"] == "done" and last["change"], last
    assert moved_total(last) == len(ch.moving), (last, len(ch.moving))
    bad, _ = check_placement(st, keys, ch.new, set(keys))
    assert not bad, brief(bad)
    with st.client() as c:
        got = c.call("MGET", *keys)
    assert got == [k.encode() for k in keys]


# ------------------------------------------------- PATCH weight, drain, up --

def test_weight_drain_and_up_each_migrate(store):
    """PATCH r3 drain, PATCH r3 up, PATCH r2 weight 2: each starts a
    migration (the report says so), and after each every key is on the
    owner of the ring as changed, once, reading back through chashd; a
    drained member ends empty."""
    st = store(n=3, spares=0, opts={"migration_rate": 0})
    keys = ["w:%d" % i for i in range(3000)]
    with st.client() as c:
        for i in range(0, len(keys), 1000):
            c.pipeline([("SET", k, k) for k in keys[i:i + 1000]])
    # a reweight last: it moves keys both ways between two members
    steps = [("r3", {"state": "drain"}, {"r1": 1, "r2": 1}),
             ("r3", {"state": "up"}, {"r1": 1, "r2": 1, "r3": 1}),
             ("r2", {"weight": 2}, {"r1": 1, "r2": 2, "r3": 1})]
    for name, body, ring in steps:
        ch = Change(st, keys, dict(st.members), ring)
        assert ch.moving
        code, rep, _ = st.api.call("PATCH", "/api/pools/%s/members/%s"
                                   % (POOL, name), body)
        assert code == 200, (body, code, rep)
        assert rep.get("migration"), (body, rep)
        # 3000 keys, no rate limit: well under a second when it works
        last = st.wait_done(rep["migration"]["epoch"], timeout=10)
        check_finished(last, rep["migration"]["epoch"])
        st.members = dict(ring)
        assert moved_total(last) == len(ch.moving), (body, last,
                                                     len(ch.moving))
        bad, _ = check_placement(st, keys, ch.new, set(keys))
        assert not bad, "after %s: %s" % (body, brief(bad))
        if body == {"state": "drain"}:
            assert st.servers["r3"].dbsize() == 0
        with st.client() as c:
            assert c.call("MGET", *keys[::37]) == \
                [k.encode() for k in keys[::37]]


# ---------------------------------------------------------------- odds --

def test_migration_endpoint_shapes(store, procs):
    """GET .../migration: 404 for an unknown pool; before any change
    active false and last null; `migration: off` says so and an add then
    moves nothing (nutcracker's behaviour, on purpose: applied with
    "force", since it leaves the moved keys out of reach)."""
    st = store(n=2, spares=1)
    st_, j, _ = st.api.get("/api/pools/nope/migration")
    assert st_ == 404, j
    m = st.migration()
    assert m["pool"] == POOL and m["migration"] == "copy", m
    assert m["active"] is False and m.get("last") is None, m

    off = Store(procs, n=2, spares=1, migration="off")
    m = off.migration()
    assert (m["pool"], m["migration"], m["active"]) == \
        (POOL, "off", False), m
    assert m.get("last") is None, m
    with off.client() as c:
        c.pipeline([("SET", "o:%d" % i, i) for i in range(300)])
    ch = plan(off, ["o:%d" % i for i in range(300)], add="s1")
    status, rep = off.add("s1")
    assert status == 409 and rep["report"]["unreachable"] > 0, rep
    status, rep = off.add("s1", force=True)
    assert status == 201, rep
    assert "migration" not in rep or not rep["migration"], rep
    assert off.servers["s1"].dbsize() == 0
    bad, _ = check_placement(off, ch.keys, ch.old, set(ch.keys))
    assert not bad, brief(bad)


def test_remove_now_moves_nothing_and_reports_lost_keys(store):
    """DELETE ...?now=true: the member leaves at once, nothing is moved,
    the report says how many keys it held."""
    st = store(n=3, spares=0)
    keys = ["n:%d" % i for i in range(600)]
    with st.client() as c:
        c.pipeline([("SET", k, 1) for k in keys])
    held = st.servers["r3"].dbsize()
    assert held > 50
    status, rep = st.remove("r3", now=True)
    assert status == 200, rep
    assert rep["lost_keys"] == held, rep
    assert st.migration()["active"] is False
    assert st.servers["r3"].dbsize() == held
    assert {m["name"] for m in st.api.pool(POOL)["members"]} == {"r1", "r2"}
    ch = Change(st, keys, {"r1": 1, "r2": 1, "r3": 1}, {"r1": 1, "r2": 1})
    with st.client() as c:
        got = c.call("MGET", *ch.moving[:20])
    assert got == [None] * len(ch.moving[:20])

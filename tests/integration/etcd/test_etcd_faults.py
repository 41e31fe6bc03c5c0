# test_etcd_faults.py -- chashd instances on one etcd when things break
# (doc/etcd.md): a killed instance's record goes with its lease; an etcd
# restart is resumed without a re-list; a watch that fell behind a
# compaction re-lists; a wiped etcd is seeded again once and the instances
# publish themselves again; while etcd is down the pools keep their rings
# (clients see no failure) and the next change after it converges.
# SPDX-License-Identifier: BSD-2-Clause
import json
import re
import signal
import threading
import time

from base_util import client_ip, fetch, wait_for
from etcd_util import (Instance, Tree, etcd,  # noqa: F401 (fixture)
                       start_instances, wait_converged)

POOL = "web"
CONVERGE_TIMEOUT = 10.0


def start_set(procs, tmp_path, etcd, backends, n=2, lease_ttl="2s",
          n_backends=5, n_seed=3):
    """etcd's tree, backends web-1..n_backends, <n> instances seeded with
    web-1..n_seed, converged on the seed; (tree, backends, instances, W)."""
    tree = Tree(etcd)
    bs = backends(n_backends)
    seed = [(b.name, b.addr, 1) for b in bs[:n_seed]]
    lbs = start_instances(procs, tmp_path, etcd, tree.prefix, n,
                          {POOL: seed}, lease_ttl=lease_ttl)
    wait_for(lambda: len(tree.member_kvs(POOL)) >= n_seed, timeout=5,
             what="the seed in etcd")
    W = max(kv["mod_revision"] for kv in tree.member_kvs(POOL).values())
    wait_converged(etcd, tree.prefix, n, W, timeout=CONVERGE_TIMEOUT)
    return tree, bs, lbs, W


def members_of(tree):
    return {n: (r["address"], r.get("weight", 1), r.get("state", "up"))
            for n, r in tree.members(POOL).items()}


def check_routes_by_etcd(tree, lbs):
    want = members_of(tree)
    for lb in lbs:
        assert lb.members(POOL) == want, lb.name


def test_killed_instance_record_goes_with_its_lease(procs, tmp_path, etcd,
                                                    backends):
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                             lease_ttl="2s")
    kvs = tree.instance_kvs()
    assert set(kvs) == {"lb-1", "lb-2"}
    lease = kvs["lb-2"]["lease"]
    assert lease != 0, "lb-2's record has no lease"
    assert 0 < etcd.lease_ttl(lease) <= 2
    # the record stays while the instance lives (its keepalives work):
    # longer than the TTL
    time.sleep(2.5)
    assert set(tree.instance_kvs()) == {"lb-1", "lb-2"}

    lbs[1].kill(signal.SIGKILL)
    t0 = time.monotonic()
    wait_for(lambda: "lb-2" not in tree.instance_kvs(), timeout=2 + 3,
             interval=0.05, what="lb-2's record to go with its lease")
    gone = time.monotonic() - t0
    assert gone > 0.5, "lb-2's record went %.2f s after the kill" % gone
    assert set(tree.instance_kvs()) == {"lb-1"}
    c = wait_for(lambda: (lambda c: len(c["instances"]) == 1 and c)(
        lbs[0].cluster()), timeout=5, what="lb-1 to see lb-2 gone")
    assert c["instances"][0]["instance"] == "lb-1"
    # the survivor goes on applying changes
    W = tree.put_member(POOL, "web-4", bs[3].addr)
    wait_converged(etcd, tree.prefix, 1, W, timeout=CONVERGE_TIMEOUT)
    check_routes_by_etcd(tree, lbs[:1])

    # a clean stop revokes the lease: the record goes at once, long
    # before its 10 s TTL
    lb3 = Instance(procs, tmp_path, etcd, tree.prefix, "lb-3",
                   {POOL: [(b.name, b.addr, 1) for b in bs[:3]]},
                   lease_ttl="10s")
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    assert etcd.lease_ttl(tree.instance_kvs()["lb-3"]["lease"]) > 5
    lb3.kill(signal.SIGTERM)
    t0 = time.monotonic()
    wait_for(lambda: "lb-3" not in tree.instance_kvs(), timeout=3,
             interval=0.05, what="lb-3's record to go at its clean stop")
    assert time.monotonic() - t0 < 3


def test_etcd_restart_resumes_without_relist(procs, tmp_path, etcd,
                                             backends):
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=3,
                             lease_ttl="5s")
    W = tree.put_member(POOL, "web-4", bs[3].addr)
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    before = {lb.name: lb.etcd_state() for lb in lbs}
    for lb in lbs:
        assert before[lb.name]["lists"] == 1, before

    etcd.restart()

    def back(lb):
        e = lb.etcd_state()
        return (e["up"] and e["state"] == "watching" and
                e["reconnects"] > before[lb.name]["reconnects"]) and e
    for lb in lbs:
        e = wait_for(lambda: back(lb), timeout=10,
                     what="%s to reconnect to etcd" % lb.name)
        assert e["lists"] == 1, (lb.name, e)

    # the next changes converge, each on every instance
    W = tree.txn_members(POOL, put={"web-5": (bs[4].addr, 2, "up")},
                         delete=["web-1"])
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    W = tree.put_member(POOL, "web-2", bs[1].addr, state="drain")
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    check_routes_by_etcd(tree, lbs)
    for lb in lbs:
        e = lb.etcd_state()
        assert e["lists"] == 1 and e["applied_rev"] >= W, (lb.name, e)


def test_compacted_watch_relists(procs, tmp_path, etcd, backends):
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                             lease_ttl="5s")
    lb1, lb2 = lbs
    lists = {lb.name: lb.etcd_state()["lists"] for lb in lbs}
    reconnects1 = lb1.etcd_state()["reconnects"]

    lb2.kill(signal.SIGSTOP)
    try:
        etcd.restart()      # breaks lb-2's watch while it cannot notice
        # lb-1 is watching again before the history goes
        wait_for(lambda: (lambda e: e["up"] and e["state"] == "watching"
                          and e["reconnects"] > reconnects1)(
            lb1.etcd_state()), timeout=10, what="lb-1 to reconnect")
        # changes lb-2 misses: an add, a removal (a re-list must drop it),
        # a weight
        tree.put_member(POOL, "web-4", bs[3].addr)
        tree.delete_member(POOL, "web-2")
        W = tree.put_member(POOL, "web-3", bs[2].addr, weight=4)
        etcd.compact(etcd.revision(), physical=True)
    finally:
        lb2.kill(signal.SIGCONT)

    t0 = time.monotonic()
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    took = time.monotonic() - t0
    e2 = wait_for(lambda: (lambda e: e["lists"] > lists["lb-2"] and e)(
        lb2.etcd_state()), timeout=5, what="lb-2 to re-list")
    assert e2["up"] and e2["applied_rev"] >= W, e2
    assert lb1.etcd_state()["lists"] == lists["lb-1"]
    check_routes_by_etcd(tree, lbs)
    assert "web-2" not in lb2.members(POOL)
    print("compaction: lb-2 converged %.0f ms after SIGCONT" % (took * 1e3))


def test_catch_up_after_a_broken_watch(procs, tmp_path, etcd, backends):
    # lb-2 misses a change while its watch is broken; it resumes from its
    # revision (no list: nothing was compacted) and gets the change in one
    # catch-up message with later writes (lb-1's record): the change keeps
    # its own revision, and /api/cluster sees it reach both
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                                 lease_ttl="5s")
    lb1, lb2 = lbs
    before = {lb.name: lb.etcd_state() for lb in lbs}
    lb2.kill(signal.SIGSTOP)
    try:
        etcd.restart()
        wait_for(lambda: (lambda e: e["up"] and e["state"] == "watching"
                          and e["reconnects"] > before["lb-1"]["reconnects"])(
            lb1.etcd_state()), timeout=10, what="lb-1 to reconnect")
        W = tree.put_member(POOL, "web-4", bs[3].addr, weight=2)
        wait_for(lambda: tree.instances()["lb-1"]["applied_rev"] >= W,
                 timeout=CONVERGE_TIMEOUT, what="lb-1 to apply the change")
        assert etcd.revision() > W
    finally:
        lb2.kill(signal.SIGCONT)
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    e2 = lb2.etcd_state()
    assert e2["lists"] == before["lb-2"]["lists"], e2
    assert e2["reconnects"] > before["lb-2"]["reconnects"], e2
    check_routes_by_etcd(tree, lbs)
    for name, r in tree.instances().items():
        assert r["pools"][POOL]["changed_rev"] == W, (name, W, r)
    for lb in lbs:
        wait_for(lambda: (lambda c: c["last_change"] and
                          c["last_change"]["revision"] == W and
                          c["last_change"]["reached"] == 2 and
                          c["last_change"]["of"] == 2)(lb.cluster()),
                 timeout=5, what="%s: last_change %d reached 2 of 2"
                 % (lb.name, W))


def test_stopped_past_its_lease_publishes_again(procs, tmp_path, etcd,
                                                backends):
    # lb-2 frozen longer than its lease: its record goes; thawed, its
    # keepalive finds the lease gone, it takes a new one and puts its
    # record again, and follows the changes it missed
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                                 lease_ttl="2s")
    lb1, lb2 = lbs
    old = tree.instance_kvs()["lb-2"]["lease"]
    lb2.kill(signal.SIGSTOP)
    try:
        wait_for(lambda: "lb-2" not in tree.instance_kvs(), timeout=2 + 3,
                 interval=0.05, what="lb-2's lease to run out")
        W = tree.txn_members(POOL, put={"web-4": (bs[3].addr, 1, "up")},
                             delete=["web-3"])
    finally:
        lb2.kill(signal.SIGCONT)
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    new = tree.instance_kvs()["lb-2"]["lease"]
    assert new != 0 and new != old and etcd.lease_ttl(new) > 0
    assert etcd.lease_ttl(old) == -1
    check_routes_by_etcd(tree, lbs)
    # the record stays now (the new lease is kept alive)
    time.sleep(2.5)
    assert set(tree.instance_kvs()) == {"lb-1", "lb-2"}


def test_wiped_etcd_is_seeded_again(procs, tmp_path, etcd, backends):
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                                 lease_ttl="2s")
    seed = members_of(tree)
    seed_sums = {r["pools"][POOL]["checksum"]
                 for r in tree.instances().values()}
    assert len(seed_sums) == 1
    # move away from the seed, so that a re-list shows
    W = tree.txn_members(POOL, put={"web-4": (bs[3].addr, 1, "up"),
                                    "web-5": (bs[4].addr, 3, "up")},
                         delete=["web-1"])
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    assert {r["pools"][POOL]["checksum"]
            for r in tree.instances().values()}.isdisjoint(seed_sums)
    lists = {lb.name: lb.etcd_state()["lists"] for lb in lbs}

    etcd.wipe_restart()
    # the seed goes in again, from the config, once
    wait_for(lambda: len(tree.member_kvs(POOL)) >= len(seed), timeout=10,
             what="the seed in the wiped etcd")
    kvs = tree.member_kvs(POOL)
    assert members_of(tree) == seed
    assert {kv["version"] for kv in kvs.values()} == {1}
    assert len({kv["create_revision"] for kv in kvs.values()}) == 1
    W = next(iter(kvs.values()))["create_revision"]
    # both instances re-list, apply it and publish themselves again (the
    # records went with the wiped store): the seed's checksum again. A
    # revision of the old store proves nothing here, the checksum does.

    def republished():
        recs = tree.instances()
        return (len(recs) == 2 and all(
            r["pools"][POOL]["checksum"] in seed_sums and
            r["pools"][POOL]["members"] == len(seed)
            for r in recs.values())) and recs
    wait_for(republished, timeout=CONVERGE_TIMEOUT,
             what="both instances to publish the seed's checksum")
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        e = wait_for(lambda: (lambda e: e["lists"] > lists[lb.name] and e)(
            lb.etcd_state()), timeout=5, what=lb.name + " to re-list")
        assert e["up"], e
    check_routes_by_etcd(tree, lbs)
    # an instance cannot have applied a revision the store has not reached:
    # after a wipe its applied_rev is the new store's
    rev = etcd.revision()
    for name, r in tree.instances().items():
        assert r["applied_rev"] <= rev, \
            "%s publishes applied_rev %d, the store is at %d" % (
                name, r["applied_rev"], rev)
    for lb in lbs:
        e = lb.etcd_state()
        assert e["applied_rev"] <= etcd.revision(), (lb.name, e)
    for name, kv in tree.instance_kvs().items():
        assert kv["lease"] != 0 and etcd.lease_ttl(kv["lease"]) > 0, \
            (name, kv)
    assert tree.member_kvs(POOL) == kvs, "seeded more than once"
    # and follow changes again
    W = tree.put_member(POOL, "web-4", bs[3].addr)
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    check_routes_by_etcd(tree, lbs)
    assert sorted(json.loads(tree.instance_kvs()["lb-1"]["value"])
                  ["pools"]) == [POOL]


def etcd_warnings(lb):
    return [ln for ln in lb.log().splitlines()
            if re.search(r"\[(warn|error)\] etcd", ln)]


class Load(threading.Thread):
    """Short tcp requests through one instance from a set of client
    addresses, in a loop until stopped (at most <limit> s): counts the
    answers, and every answer that is no answer or another member than
    the one the client had before."""

    def __init__(self, lb, sources, want, limit=30.0):
        super().__init__(daemon=True)
        self.lb, self.sources, self.want = lb, sources, want
        self.limit = limit
        self.stop = threading.Event()
        self.ok = 0
        self.bad = []

    def run(self):
        end = time.monotonic() + self.limit
        while not self.stop.is_set() and time.monotonic() < end:
            for src in self.sources:
                got = fetch(self.lb.port, src, timeout=3.0)
                if got is None or got != self.want[src]:
                    self.bad.append((time.monotonic(), src, got))
                else:
                    self.ok += 1
            time.sleep(0.005)


def test_etcd_down_keeps_rings(procs, tmp_path, etcd, backends):
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                             lease_ttl="2s")
    W = tree.put_member(POOL, "web-4", bs[3].addr, weight=2)
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    members = {lb.name: lb.members(POOL) for lb in lbs}
    sources = [client_ip(i) for i in range(16)]
    want = {src: fetch(lbs[0].port, src) for src in sources}
    assert None not in want.values()
    assert {src: fetch(lbs[1].port, src) for src in sources} == want
    loads = [Load(lb, sources, want) for lb in lbs]
    for ld in loads:
        ld.start()
    try:
        time.sleep(0.3)
        logged = {lb.name: len(etcd_warnings(lb)) for lb in lbs}
        etcd.stop()
        down_at = time.monotonic()
        for lb in lbs:
            e = wait_for(lambda: (lambda e: e["up"] is False and e)(
                lb.etcd_state()), timeout=5,
                what="%s to show etcd down" % lb.name)
            assert e["down_since_ms"] is not None and e["last_error"], e
        # an admin change cannot reach etcd: refused, nothing changes
        st, j, _ = lbs[0].api.call("POST", "/api/pools/web/members",
                                   {"name": "web-5", "address": bs[4].addr})
        assert st == 503, j
        st, j, _ = lbs[1].api.call("PATCH", "/api/pools/web/members/web-1",
                                   {"state": "drain"})
        assert st == 503, j
        # 10 s without etcd (more than the lease TTL): same members, same
        # routes
        while time.monotonic() < down_at + 10:
            for lb in lbs:
                assert lb.members(POOL) == members[lb.name], lb.name
                assert lb.etcd_state()["up"] is False
            time.sleep(0.5)
        # the outage is logged once, not at every retry (about 10 in 10 s)
        for lb in lbs:
            more = etcd_warnings(lb)[logged[lb.name]:]
            assert 1 <= len(more) <= 3, (lb.name, more)
        etcd.start()
        for lb in lbs:
            wait_for(lambda: lb.etcd_state()["up"] is True, timeout=10,
                     what="%s to see etcd again" % lb.name)
        time.sleep(0.3)
    finally:
        for ld in loads:
            ld.stop.set()
        for ld in loads:
            ld.join(timeout=40)
    for ld in loads:
        assert not ld.is_alive()
        assert ld.bad == [], "%s: %d bad answers of %d, first %s" % (
            ld.lb.name, len(ld.bad), ld.ok + len(ld.bad), ld.bad[:3])
        assert ld.ok >= 200, (ld.lb.name, ld.ok)
    # a change after etcd is back converges (the instances publish again,
    # under a new lease if theirs ran out)
    W = tree.txn_members(POOL, put={"web-5": (bs[4].addr, 1, "up")},
                         delete=["web-2"])
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    check_routes_by_etcd(tree, lbs)


def test_start_without_etcd_serves_the_config(procs, tmp_path, etcd,
                                               backends):
    # etcd down at start: the pool serves its config's servers (never an
    # empty ring because of etcd); once etcd comes, the config seeds it
    tree = Tree(etcd)
    bs = backends(3)
    etcd.stop()
    seed = [(b.name, b.addr, 1) for b in bs]
    lb1, lb2 = start_instances(procs, tmp_path, etcd, tree.prefix, 2,
                               {POOL: seed}, lease_ttl="2s")
    for lb in (lb1, lb2):
        e = lb.etcd_state()
        assert e["up"] is False, e
        assert lb.members(POOL) == {n: (a, w, "up") for n, a, w in seed}
    sources = [client_ip(i) for i in range(20)]
    got = {src: fetch(lb1.port, src) for src in sources}
    assert None not in got.values()
    assert {src: fetch(lb2.port, src) for src in sources} == got
    assert len(set(got.values())) >= 2

    etcd.start()
    wait_for(lambda: len(tree.member_kvs(POOL)) >= 3, timeout=10,
             what="the seed once etcd is up")
    kvs = tree.member_kvs(POOL)
    assert members_of(tree) == {n: (a, w, "up") for n, a, w in seed}
    assert {kv["version"] for kv in kvs.values()} == {1}
    W = max(kv["mod_revision"] for kv in kvs.values())
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    for lb in (lb1, lb2):
        assert lb.etcd_state()["up"] is True
    W = tree.put_member(POOL, "web-2", bs[1].addr, weight=3)
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    check_routes_by_etcd(tree, [lb1, lb2])


def test_all_records_gone_keeps_the_members(procs, tmp_path, etcd,
                                            backends):
    tree, bs, lbs, W = start_set(procs, tmp_path, etcd, backends, n=2,
                                 lease_ttl="2s")
    before = {lb.name: lb.members(POOL) for lb in lbs}
    sources = [client_ip(i) for i in range(20)]
    want = {src: fetch(lbs[0].port, src) for src in sources}
    W, n = etcd.delete_prefix(tree.members_prefix(POOL))
    assert n == 3
    # both apply the deletion (their records say so) and keep the members
    recs = wait_for(lambda: (lambda r: len(r) == 2 and all(
        x["applied_rev"] >= W for x in r.values()) and r)(tree.instances()),
        timeout=CONVERGE_TIMEOUT, what="the instances to apply the delete")
    for lb in lbs:
        assert lb.members(POOL) == before[lb.name], lb.name
        assert {src: fetch(lb.port, src) for src in sources} == want
        assert [ln for ln in lb.log().splitlines()
                if "[warn]" in ln and "keeps" in ln], lb.name
    assert len({r["pools"][POOL]["checksum"] for r in recs.values()}) == 1
    # records written again take over
    W = tree.txn_members(POOL, put={"web-4": (bs[3].addr, 1, "up"),
                                    "web-5": (bs[4].addr, 2, "drain")})
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    check_routes_by_etcd(tree, lbs)

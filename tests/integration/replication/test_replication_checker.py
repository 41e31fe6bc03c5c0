# test_replication_checker.py -- the Jepsen-style checker (jepsen_util.py,
# doc/jepsen.md) in `make test`: replicated pools (4 members, replicas 3,
# write_quorum 2, timeout 1 s) under >= 10 clients per key of counters,
# registers, lists and append registers, with and without faults; every
# scenario must show 0 anomalies of every kind and a minimum of
# acknowledged operations. The checker is checked too: its rules on
# histories with planted anomalies, and a lone redis-server / memcached
# (linearizable by construction) that must pass under the same load.
# scripts/jepsen runs the whole matrix for longer (`make jepsen`).
# SPDX-License-Identifier: BSD-2-Clause
import os

import pytest

import jepsen_util as J
from mc_util import need_chashd_memcache
from redis_util import need_chashd_redis

# seconds of load per scenario (the file stays under a minute with -n 2)
SECONDS = float(os.environ.get("CHASH_JEPSEN_SECONDS", "4"))
# faults of `make test`: short holds, bounded heals
PARAMS = {
    "kill9": J.FaultParams(hold=(0.4, 0.8), gap=(0.2, 0.4),
                           heal_timeout=8),
    "sigstop1": J.FaultParams(hold=(1.0, 1.5), gap=(0.2, 0.4),
                              heal_timeout=8),
    "sigstop2": J.FaultParams(hold=(1.0, 1.5), gap=(0.2, 0.4),
                              heal_timeout=8),
    "member": J.FaultParams(gap=(0.2, 0.4), heal_timeout=8),
    "chashd": J.FaultParams(hold=(0.2, 0.5), gap=(0.3, 0.6),
                            heal_timeout=8),
    "none": J.FaultParams(),
}
MIN_ACKED = 150        # acknowledged writes per workload, whatever the fault
MIN_READS = 20         # successful reads per workload without a fault


def judge(res, tmp_path, fault):
    """Print the scenario's line; fail with every anomaly kind counted,
    examples and the history's path when it found any, or when the pool
    did too little for the run to mean anything."""
    print("\n" + res.summary())
    path = os.path.join(str(tmp_path), "history.jsonl")
    if res.anomalies:
        res.hist.dump(path)
    assert res.anomaly_counts() == {}, "%s\nhistory: %s" % (
        res.describe(), path)
    for wl in res.workloads:
        assert res.acked_writes(wl.name) >= MIN_ACKED, res.describe()
        if fault == "none":
            assert res.ok_reads(wl.name) >= MIN_READS, res.describe()
    if fault != "none":
        done, _ = res.faults()
        assert done >= 1, "no fault was injected: %s" % res.describe()


# (mode, fault, workers, read_policy): the representative subset; the
# whole matrix is scripts/jepsen's
SCENARIOS = [
    ("redis", "none", 1, "primary"),
    ("redis", "none", 2, "quorum"),
    ("redis", "kill9", 2, "quorum"),
    ("redis", "sigstop1", 2, "primary"),
    ("redis", "sigstop2", 2, "quorum"),
    ("redis", "member", 2, "primary"),
    ("redis", "chashd", 1, "quorum"),
    ("memcache", "none", 2, "quorum"),
    ("memcache", "kill9", 2, "primary"),
]


@pytest.mark.parametrize("mode,fault,workers,policy", SCENARIOS,
                         ids=["%s-%s-w%d-%s" % s for s in SCENARIOS])
def test_replicated_pool_has_no_anomaly(procs, tmp_path, mode, fault,
                                        workers, policy):
    """>= 10 clients per key through chashd under <fault>: no acked write
    lost, no value handed out twice, no stale or resurrected read, lists
    and appends whole and in order, copies equal once healed."""
    if mode == "redis":
        need_chashd_redis()
    else:
        need_chashd_memcache()
    res = J.run_scenario(procs, mode, fault, workers, policy,
                         duration=SECONDS, params=PARAMS[fault],
                         final_timeout=15)
    judge(res, tmp_path, fault)


@pytest.mark.parametrize("mode", ["redis", "memcache"])
def test_the_checker_passes_a_single_server(procs, tmp_path, mode):
    """The control: the same workloads straight to one redis-server or
    memcached, SIGSTOPped under the load with a client timeout shorter
    than the stop (so writes time out and land later: indeterminate).
    One server is linearizable: a checker that flags anything here is
    wrong, not the server."""
    target = J.Single(procs, mode)
    res = J.run_scenario(procs, mode, "sigstop1", target=target,
                         duration=SECONDS, timeout=0.5,
                         params=J.FaultParams(hold=(0.8, 1.2),
                                              gap=(0.2, 0.4)))
    judge(res, tmp_path, "sigstop1")
    indet = len([o for o in res.hist.ops if o.write and not o.acked])
    assert indet > 0, "no write timed out: the control tested nothing " \
        "indeterminate: %s" % res.describe()


# ------------------------------------------------- the rules themselves --


def op(f, arg, t0, t1, value=None, type_="ok", write=None, key="k"):
    o = J.Op(1, "t", f, key, arg,
             f not in ("read", "get") if write is None else write)
    o.t0, o.t1, o.type, o.value = t0, t1, type_, value
    return o


def kinds(anomalies):
    return sorted({a.kind for a in anomalies})


def test_counter_rules():
    ok = [op("add", 1, 0, 1, 1), op("add", 2, 0.5, 2, 3),
          op("add", 1, 3, 4, 4), op("read", 0, 5, 6, 4),
          op("add", 5, 6, 7, None, "info")]
    assert J.check_counter("t", "k", ok, 0, 4, True) == []
    assert J.check_counter("t", "k", ok, 0, 9, True) == []   # info applied
    # two clients given 3 (the duplicate INCR replies)
    dup = ok[:2] + [op("add", 1, 1.5, 2.5, 3)]
    assert "duplicate-reply" in kinds(J.check_counter("t", "k", dup, 0, 4,
                                                      True))
    # a reply that misses an increment acked before it began
    stale = ok[:2] + [op("add", 1, 3, 4, 2)]
    assert "counter-stale" in kinds(J.check_counter("t", "k", stale, 0,
                                                    J.MISSING, True))
    # a read of a value no write could have made yet
    future = ok[:1] + [op("read", 0, 1.5, 1.8, 7)]
    assert kinds(J.check_counter("t", "k", future, 0, J.MISSING, True)) \
        == ["counter-future"]
    # the final value below the acked sum: lost acknowledged writes
    assert kinds(J.check_counter("t", "k", ok, 0, 3, True)) == [
        "counter-final-low", "reply-above-final"]
    assert kinds(J.check_counter("t", "k", ok, 0, 10, True)) == [
        "counter-final-high"]
    # with decrements, a reply may repeat a value; bounds still hold
    mix = [op("add", 3, 0, 1, 13), op("add", -3, 2, 3, 10),
           op("add", 3, 4, 5, 13)]
    assert J.check_counter("t", "k", mix, 10, 13, False) == []


def test_register_rules():
    w1, w2 = op("set", b"a", 0, 1, "OK"), op("set", b"b", 2, 3, "OK")
    d = op("del", None, 4, 5, 1)
    good = [w1, w2, op("get", None, 1.5, 2.5, b"a"),
            op("get", None, 2.5, 3.5, b"b"), op("get", None, 6, 7, None)]
    assert J.check_register("t", "k", good + [d], None) == []
    cases = {
        "stale-read": op("get", None, 3.5, 3.8, b"a"),
        "resurrected-delete": op("get", None, 6, 7, b"b"),
        "phantom-read": op("get", None, 6, 7, b"zz"),
        "future-read": op("get", None, 0.1, 0.2, b"b"),
    }
    for kind, r in cases.items():
        assert kinds(J.check_register("t", "k", [w1, w2, d, r], None)) \
            == [kind], kind
    # nil although b was acked and no DEL can fall between
    lost = op("get", None, 3.5, 3.8, None)
    assert kinds(J.check_register("t", "k", [w1, w2, d, lost], None)) == [
        "lost-write"]
    # ...unless a DEL that failed (indeterminate) may have run
    maybe = op("del", None, 3.4, 3.6, "ERR replication", "fail")
    assert J.check_register("t", "k", [w1, w2, maybe, lost], b"b") == []
    # a read of b proves b was written: a later stale read of a is caught
    # even though b's SET was never acknowledged
    w2x = op("set", b"b", 2, 9, "timeout", "info")
    seen = op("get", None, 2.5, 3, b"b")
    assert kinds(J.check_register("t", "k", [w1, w2x, seen,
                                             op("get", None, 4, 5, b"a")],
                                  b"b")) == ["stale-read"]
    # final values no linearization ends with
    assert kinds(J.check_register("t", "k", [w1, w2], b"a")) == [
        "final-register"]
    assert kinds(J.check_register("t", "k", [w1, w2], None)) == [
        "final-register"]
    assert J.check_register("t", "k", [w1, w2x], b"a") == []


def test_list_rules():
    pushes = [op("rpush", b"x", 0, 1, 1), op("rpush", b"y", 2, 3, 2),
              op("lpush", b"z", 4, 5, 3), op("rpush", b"q", 6, 7, None,
                                              "info")]
    assert J.check_list("t", "k", pushes, [b"z", b"x", b"y"]) == []
    assert J.check_list("t", "k", pushes, [b"z", b"x", b"y", b"q"]) == []
    bad = {
        "lost-element": [b"z", b"x"],
        "duplicate-element": [b"z", b"x", b"y", b"y"],
        "phantom-element": [b"z", b"x", b"y", b"w"],
        "reordered-element": [b"z", b"y", b"x"],
    }
    for kind, final in bad.items():
        assert kind in kinds(J.check_list("t", "k", pushes, final)), kind
    dup = pushes[:2] + [op("rpush", b"w", 2.5, 3.5, 2)]
    assert "duplicate-length" in kinds(J.check_list("t", "k", dup,
                                                    J.MISSING))


def test_append_rules():
    apps = [op("append", b"c1.1", 0, 1, "STORED"),
            op("append", b"c2.1", 2, 3, "STORED"),
            op("append", b"c1.2", 4, 5, None, "info")]
    reads = [op("read", None, 1.5, 1.8, b"c1.1,"),
             op("read", None, 3.5, 3.8, b"c1.1,c2.1,")]
    assert J.check_append("t", "k", apps + reads, b"c1.1,c2.1,") == []
    assert J.check_append("t", "k", apps + reads,
                          b"c1.1,c2.1,c1.2,") == []
    assert kinds(J.check_append("t", "k", apps, b"c2.1,c1.1,")) == [
        "reordered-append"]
    assert kinds(J.check_append("t", "k", apps, b"c1.1,")) == [
        "lost-append"]
    assert "append-read-not-prefix" in kinds(J.check_append(
        "t", "k", apps + [op("read", None, 3.5, 3.8, b"c2.1,")],
        b"c1.1,c2.1,"))
    assert kinds(J.check_append(
        "t", "k", apps + [op("read", None, 3.5, 3.8, b"c1.1,")],
        b"c1.1,c2.1,")) == ["append-read-stale"]
    assert kinds(J.check_append(
        "t", "k", apps + [op("read", None, 1.2, 1.4, b"c1.1,c2.1,")],
        b"c1.1,c2.1,")) == ["append-read-future"]


def test_replies_a_command_cannot_have_are_anomalies():
    """A number asked, a line given (memcache incr answered with the
    client's own request line, issue 25): an invalid reply, never ok."""
    with pytest.raises(J.Invalid):
        J.m_number(b"incr ctr 4")
    with pytest.raises(J.Invalid):
        J.r_int(J.Status("OK"))
    with pytest.raises(J.Invalid):
        J.m_get("k")([(b"other", b"0", b"v")])
    assert J.m_number(b"NOT_FOUND")[2] == "missing-key"
    assert J.m_number(b"SERVER_ERROR replication: 1 of 3")[0] == "fail"

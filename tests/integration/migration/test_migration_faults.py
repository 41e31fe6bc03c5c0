# test_migration_faults.py -- live migration of a redis pool under faults,
# on real redis-servers behind chashd (`migration: copy`): the source or
# the target paused mid-move (CLIENT PAUSE, MIGRATE timeouts), the target
# killed and restarted empty, chashd SIGKILLed and started again on the
# same config and state file (resume, same epoch), a 1M-element list, keys
# with 200 ms TTLs expiring while they move, a joining member that is not
# empty (refused, then forced). After each: the invariants of
# reference/redis-memcached.md 3.8 read off the servers directly.
# SPDX-License-Identifier: BSD-2-Clause
import random
import time

import pytest

from base_util import wait_for
from migration_util import store_fixture  # noqa: F401 (the fixture store)
from migration_util import (brief, POOL, Workload, check_placement,
                            check_workload, moving_keys, plan)
from redis_util import Simple



def fill(st, keys):
    with st.client() as c:
        for i in range(0, len(keys), 1000):
            got = c.pipeline([("SET", k, k) for k in keys[i:i + 1000]])
            assert all(r == Simple("OK") for r in got), got[:3]


def moved_so_far(st):
    m = st.migration()
    return m.get("keys_moved", 0) + m.get("keys_moved_by_traffic", 0)


# ------------------------------------------------------------ pauses --

def start_workload(st):
    """A running workload (3 threads) over keys it prepared, and the
    Change of adding s1 for them."""
    wl = Workload(st.port, threads=3, shorts=0)
    with st.client() as c:
        wl.prepare(c)
    ch = plan(st, wl.all_keys(), add="s1")
    wl.start()
    return wl, ch


def add_s1(st):
    """s1 added (after the workload ran a moment): its migration's epoch."""
    time.sleep(0.3)
    status, rep = st.add("s1")
    assert status == 201, rep
    return rep["migration"]["epoch"]


@pytest.mark.parametrize("side", ["source", "target"])
def test_paused_server_mid_migration(store, side):
    """A source (r1) or the target (s1) paused 1.5 s for everything while
    s1 is being added under a workload, migration_timeout 300ms: MIGRATE
    times out (IOERR on a paused target), chashd retries, and once the
    pause ends the migration finishes with every invariant holding."""
    st = store(n=3, spares=1, opts={"migration_rate": 100,
                                    "migration_batch": 10,
                                    "migration_timeout": "300ms"})
    wl, ch = start_workload(st)
    try:
        epoch = add_s1(st)
        # the copier's first second's burst (100 keys) is on s1: pause
        wait_for(lambda: st.servers["s1"].dbsize() >= 1, timeout=10,
                 what="the first keys to move")
        victim = st.servers["r1" if side == "source" else "s1"]
        with victim.client() as d:
            assert d.call("CLIENT", "PAUSE", 1500, "ALL") == Simple("OK")
        t0 = time.monotonic()
        time.sleep(0.8)
        mid = st.migration()
        assert mid["active"] is True, "finished while %s was paused: %s" \
            % (side, mid)
        assert victim.call("PING") == Simple("PONG")   # after the pause
        assert time.monotonic() - t0 >= 1.4
        last = st.wait_done(epoch)
    finally:
        wl.stop()
    assert last["phase"] == "done" and last["anomalies"] == 0, last
    # no key left behind (failed_keys counts the moves that failed
    # during the pause and were made later, so it may be > 0)
    bad = check_workload(st, wl, ch.new)
    assert not bad, brief(bad) + "\n" + wl.summary()


# ------------------------------------------------------- target restart --

def test_target_killed_and_restarted_empty(store):
    """s1 killed (SIGKILL, no persistence) after some keys moved to it:
    chashd reports errors and keeps every key not yet moved on its source
    (nothing vanishes while s1 is down); s1 restarted empty on the same
    port: the migration goes on and every key that was still on a source
    ends on s1 only. Only the keys s1 held when it died are lost."""
    st = store(n=3, spares=1, opts={"migration_rate": 300,
                                    "migration_batch": 10,
                                    "migration_timeout": "300ms"})
    keys = ["t:%d" % i for i in range(2400)]
    fill(st, keys)
    ch = plan(st, keys, add="s1")
    status, rep = st.add("s1")
    assert status == 201, rep
    epoch = rep["migration"]["epoch"]
    wait_for(lambda: moved_so_far(st) > 40, timeout=10,
             what="the first keys to move")
    s1 = st.servers["s1"]
    s1.stop()
    sources = ("r1", "r2", "r3")
    time.sleep(0.3)

    def still_on_sources():
        w = st.where(ch.moving, sources)
        return {k for k, names in w.items() if names}
    snap = still_on_sources()
    assert snap, "every key moved before s1 died: nothing left to check"
    time.sleep(1.0)
    m = st.migration()
    assert m["active"] is True, m
    errs = m["errors"] + m["failed_keys"] + \
        sum(1 for s in m["sources"] if s["last_error"])
    assert errs > 0, "s1 down and no error reported: %s" % m
    assert still_on_sources() == snap, "keys left a source while s1 was down"
    # the keys that never move are untouched
    stay = [k for k in keys if k not in ch.moving_set]
    bad, _ = check_placement(st, stay, ch.old, set(stay))
    assert not bad, brief(bad)

    s1.start()                         # empty, same port
    last = st.wait_done(epoch)
    assert last["phase"] == "done", last
    w = st.where(ch.moving)
    wrong = [k for k in snap if w[k] != ["s1"]]
    assert not wrong, "%d of %d keys still on a source at the restart are " \
        "not on s1 only, e.g. %s on %s" % (len(wrong), len(snap), wrong[0],
                                           w[wrong[0]])
    lost = [k for k in ch.moving if not w[k]]
    assert set(lost) == set(ch.moving) - snap
    vals = s1.client()
    with vals:
        sample = sorted(snap)[:200]
        assert vals.call("MGET", *sample) == [k.encode() for k in sample]
    bad, _ = check_placement(st, keys, ch.new, set(stay) | snap)
    assert not bad, brief(bad)


# ------------------------------------------------------ chashd restart --

def test_chashd_killed_mid_migration_resumes(store):
    """chashd SIGKILLed while s1's migration runs under a workload, then
    started again on the same config and state file: the migration is
    still active with the same epoch, finishes, and every invariant
    holds (requests in flight at the kill count as unknown outcomes)."""
    st = store(n=3, spares=1, opts={"migration_rate": 100,
                                    "migration_batch": 10})
    wl, ch = start_workload(st)
    try:
        epoch = add_s1(st)
        wait_for(lambda: moved_so_far(st) > 60, timeout=10,
                 what="the first keys to move")
        before = st.migration()
        st.restart()
        m = st.migration()
        assert m["active"] is True, "not resumed after the restart: %s" % m
        assert m["epoch"] == epoch, (m["epoch"], epoch)
        assert m["phase"] in ("copying", "verifying", "draining"), m
        after = m
        assert {mm["name"] for mm in st.api.pool(POOL)["members"]} == \
            {"r1", "r2", "r3", "s1"}
        last = st.wait_done(epoch)
        time.sleep(0.2)
    finally:
        wl.stop()
    assert last["phase"] == "done" and last["anomalies"] == 0, last
    bad = check_workload(st, wl, ch.new)
    assert not bad, brief(bad) + "\n" + wl.summary()
    # every key moved in the end: none is reported as failed
    assert last["failed_keys"] == 0, last
    assert wl.ops > 500, wl.summary()
    # the progress as last saved: at most one batch (10 keys) per source
    # redone, so the counters go back by no more than that
    assert after["keys_moved"] >= before["keys_moved"] - 10 * 3, \
        "keys_moved %d before the kill, %d after the restart" % (
            before["keys_moved"], after["keys_moved"])


# -------------------------------------------------------------- big key --

FILL_LIST = """
local n = tonumber(ARGV[1])
for i = 1, n, 1000 do
  local t = {}
  for j = i, math.min(i + 999, n) do t[#t + 1] = j end
  redis.call('RPUSH', KEYS[1], unpack(t))
end
return redis.call('LLEN', KEYS[1])
"""

CHECK_LIST = """
local l = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #l do
  if tonumber(l[i]) ~= i then return i end
end
return 0
"""


def test_big_list_moves_and_is_reported(store):
    """A 1M-element list on a key that moves to s1 (created on its owner
    directly): after the migration it is on s1 only, every element equal
    and in order (checked on s1 by a script), readable through chashd,
    and listed in big_keys with its old owner and size."""
    st = store(n=3, spares=1, opts={"migration_rate": 0})
    new_ring = dict(st.members, s1=1)
    (big, o, n), = moving_keys(st, new_ring, 1, prefix="biglist")
    small = ["sm:%d" % i for i in range(500)]
    fill(st, small)
    src = st.servers[o]
    assert src.call("EVAL", FILL_LIST, 1, big, 1000000) == 1000000
    usage = src.call("MEMORY", "USAGE", big)
    assert usage > 1 << 20, usage
    ch = plan(st, small + [big], add="s1")
    status, rep = st.add("s1")
    assert status == 201, rep
    last = st.wait_done(rep["migration"]["epoch"], timeout=60)
    assert last["phase"] == "done" and last["failed_keys"] == 0, last
    assert st.holder(big) == ["s1"], st.holder(big)
    s1 = st.servers["s1"]
    assert s1.call("LLEN", big) == 1000000
    assert s1.call("EVAL", CHECK_LIST, 1, big) == 0
    assert s1.call("PTTL", big) == -1
    bigs = [b for b in last["big_keys"] if b["key"] == big]
    assert len(bigs) == 1, last["big_keys"]
    assert bigs[0]["member"] == o and bigs[0]["bytes"] >= 1 << 20, bigs
    assert all(b["bytes"] >= 1 << 20 for b in last["big_keys"])
    with st.client() as c:
        assert c.call("LLEN", big) == 1000000
        assert c.call("LINDEX", big, -1) == b"1000000"
    bad, _ = check_placement(st, ch.keys, ch.new, set(ch.keys))
    assert not bad, brief(bad)


# ---------------------------------------------------------- short TTLs --

def test_keys_expiring_while_they_move_are_not_resurrected(store):
    """1500 keys with TTLs of 150..400 ms set just before s1 is added (the
    copier at 1500 keys/s, so expiry and copying overlap): while moving,
    none is ever seen without a TTL; afterwards none exists anywhere,
    and the long-lived keys are all on their new owners."""
    st = store(n=3, spares=1, opts={"migration_rate": 1500,
                                    "migration_batch": 10})
    stable = ["st:%d" % i for i in range(1500)]
    fill(st, stable)
    rnd = random.Random(5)
    shorts = ["ex:%d" % i for i in range(1500)]
    ch = plan(st, stable + shorts, add="s1")
    ttl = {k: rnd.randint(150, 400) for k in shorts}
    with st.client() as c:
        got = c.pipeline([("SET", k, "v", "PX", ttl[k]) for k in shorts])
        assert all(r == Simple("OK") for r in got)
    t_set = time.monotonic()
    status, rep = st.add("s1")
    assert status == 201, rep
    epoch = rep["migration"]["epoch"]
    no_ttl = set()
    moving_shorts = [k for k in shorts if k in ch.moving_set]
    while time.monotonic() - t_set < 0.6:
        for name, srv in st.servers.items():
            with srv.client() as d:
                ps = d.pipeline([("PTTL", k) for k in moving_shorts])
            no_ttl |= {k for k, p in zip(moving_shorts, ps) if p == -1}
    assert not no_ttl, "%d short keys lost their TTL, e.g. %s" % (
        len(no_ttl), sorted(no_ttl)[:5])
    last = st.wait_done(epoch)
    assert last["phase"] == "done" and last["anomalies"] == 0, last
    left = max(0.0, t_set + 0.4 + 0.2 - time.monotonic())
    time.sleep(left)
    w = st.where(shorts)
    alive = [k for k in shorts if w[k]]
    assert not alive, "%d keys past their TTL exist, e.g. %s on %s" % (
        len(alive), alive[0], w[alive[0]])
    bad, _ = check_placement(st, stable, ch.new, set(stable))
    assert not bad, brief(bad)
    assert moved_total_ok(last, ch, stable)


def moved_total_ok(last, ch, stable):
    s = set(stable)
    lo = len([k for k in ch.moving if k in s])
    hi = len(ch.moving)
    moved = last["keys_moved"] + last["keys_moved_by_traffic"]
    assert lo <= moved <= hi, (moved, lo, hi)
    return True


# ------------------------------------------------------ joining member --

def test_non_empty_joining_member_is_refused_then_forced(store):
    """s1 holds 5 keys: adding it is refused with 409 naming it and its
    key count, nothing changes; with `force: true` it is flushed, the
    migration runs and the pool's keys end on their new owners."""
    st = store(n=3, spares=1, opts={"migration_rate": 0})
    keys = ["j:%d" % i for i in range(1500)]
    fill(st, keys)
    s1 = st.servers["s1"]
    for i in range(5):
        s1.call("SET", "junk:%d" % i, "x")
    status, rep = st.add("s1")
    assert status == 409, rep
    msg = str(rep)
    assert "member s1 (%s) holds 5 keys: a joining member must be empty" \
        % s1.addr in msg, msg
    assert {m["name"] for m in st.api.pool(POOL)["members"]} == \
        {"r1", "r2", "r3"}
    assert st.migration()["active"] is False
    assert s1.dbsize() == 5
    st.members.pop("s1", None)

    ch = plan(st, keys, add="s1")
    status, rep = st.add("s1", force=True)
    assert status == 201, rep
    last = st.wait_done(rep["migration"]["epoch"])
    assert last["phase"] == "done" and last["failed_keys"] == 0, last
    assert s1.call("EXISTS", *["junk:%d" % i for i in range(5)]) == 0
    assert s1.dbsize() == len(ch.moving)
    bad, _ = check_placement(st, keys, ch.new, set(keys))
    assert not bad, brief(bad)
    assert last["keys_moved"] + last["keys_moved_by_traffic"] == \
        len(ch.moving), last

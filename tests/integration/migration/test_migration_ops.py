# test_migration_ops.py -- what an operator does around a live migration
# of a redis pool (`migration: copy`), on real redis-servers behind chashd
# (migration_util's Store): giving up a source that died mid-move (DELETE
# .../migration/sources/{member}: its moving keys are then served by
# their new owners, the rest of the migration finishes; 409 when there is
# nothing to give up), the copier's `migration_bandwidth` cap honoured
# (the elapsed time against the bytes moved), a weight change in which a
# member both gives and takes keys (two stages: no two redis-servers
# MIGRATE to each other at once, every member answers PING throughout),
# and chashd SIGKILLed in the middle of a scale-in (resumed; the member
# leaves at the end). Every key's place is read off the redis-servers
# directly. Every process is started through the test's Procs (killed at
# teardown); every wait is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import subprocess
import threading
import time

from base_util import wait_for
from migration_util import store_fixture  # noqa: F401 (the fixture store)
from migration_util import brief
from migration_util import POOL, Change, check_placement, plan
from redis_util import REDIS_CLI, Closed, Err, Simple



def fill(st, keys, value=None):
    """Each key set through chashd to <value>(key) (default: its name)."""
    with st.client() as c:
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            got = c.pipeline([("SET", k, value(k) if value else k)
                              for k in part])
            assert all(r == Simple("OK") for r in got), got[:3]


def moved_total(j):
    return j["keys_moved"] + j["keys_moved_by_traffic"]


def values_through(st, keys):
    with st.client() as c:
        out = []
        for i in range(0, len(keys), 500):
            out += c.call("MGET", *keys[i:i + 500])
    return dict(zip(keys, out))


def source(j, name):
    got = [s for s in j["sources"] if s["member"] == name]
    assert len(got) == 1, (name, j["sources"])
    return got[0]


# ------------------------------------------------- giving up a dead source --

def test_dead_source_given_up(store):
    """s1 added with a slow copier; r1 shut down (SHUTDOWN NOSAVE) while
    keys moving off it are still on it: requests on those keys get an
    error (never a silent nil) while it is gone; DELETE .../migration/
    sources/r1 answers 200 with r1 `skipped`; its moving keys are then
    answered by s1 (nil for those not moved: lost, as documented); the
    migration finishes with every other key on its new owner. A DELETE
    for a member that is no source, or with no migration running: 409."""
    st = store(n=3, spares=1, opts={"migration_rate": 40,
                                    "migration_batch": 5,
                                    "migration_timeout": "500ms"})
    keys = ["d:%d" % i for i in range(480)]
    fill(st, keys)
    ch = plan(st, keys, add="s1")
    off_r1 = [k for k in ch.moving if ch.old[k] == "r1"]
    others = [k for k in keys if ch.old[k] != "r1"]
    assert len(off_r1) >= 15, len(off_r1)
    path = "/api/pools/%s/migration/sources/" % POOL
    # nothing to give up yet
    code, j, _ = st.api.call("DELETE", path + "r1", {})
    assert code == 409 and "no migration running" in str(j), (code, j)

    code, rep = st.add("s1")
    assert code == 201, rep
    epoch = rep["migration"]["epoch"]
    # no source by that name: the target, an unknown member
    for name in ("s1", "nope"):
        code, j, _ = st.api.call("DELETE", path + name, {})
        assert code == 409 and "not a source" in str(j), (name, code, j)
    r1 = st.servers["r1"]
    # r1 dies after giving a few of its keys, with more still on it
    wait_for(lambda: len(r1.holds(off_r1)) <= len(off_r1) - 5, timeout=10,
             what="r1 to give its first keys")
    still = r1.holds(off_r1)
    assert len(still) >= 10, "r1 moved %d of its %d keys already" % (
        len(off_r1) - len(still), len(off_r1))
    subprocess.run([REDIS_CLI, "-h", r1.host, "-p", str(r1.port),
                        "SHUTDOWN", "NOSAVE"], capture_output=True,
                       text=True, timeout=10)
    r1.proc.wait(timeout=10)
    # what was on r1 and not moved, as r1 died
    on_s1 = st.servers["s1"].holds(off_r1)
    lost = [k for k in off_r1 if k not in on_s1]
    assert lost and on_s1, (len(lost), len(on_s1))
    # while r1 is gone: an error for its keys, never a nil
    bad = []
    with st.client(timeout=5) as c:
        for k in lost[:5]:
            try:
                got = c.call("GET", k)
            except (Closed, OSError):
                break                     # a connection error is fine too
            if not isinstance(got, Err):
                bad.append("GET %s -> %r" % (k, got))
            elif "migration of key" not in got and "not up" not in got:
                bad.append("GET %s -> %r (no reason given)" % (k, got))
    assert not bad, bad
    assert st.migration()["active"] is True

    code, j, _ = st.api.call("DELETE", path + "r1", {},
                             headers={"Content-Type": "application/json"})
    assert code == 200, (code, j)
    assert source(j, "r1")["skipped"] is True, j
    assert not any(s.get("skipped") for s in j["sources"]
                   if s["member"] != "r1"), j
    # r1's moving keys: s1 answers (what r1 had not given away is lost)
    got = values_through(st, off_r1)
    for k in off_r1:
        want = k.encode() if k in on_s1 else None
        assert got[k] == want, "%s -> %r after r1 was given up (on s1: %s)" \
            % (k, got[k], k in on_s1)
    last = st.wait_done(epoch, timeout=20)
    assert last["phase"] == "done" and last["anomalies"] == 0, last
    assert source(last, "r1")["skipped"] is True, last
    # every key not on r1 is on its new owner, once, with its value
    bad, _ = check_placement(st, others, ch.new, set(others))
    assert not bad, brief(bad)
    got = values_through(st, others)
    assert all(got[k] == k.encode() for k in others), \
        [(k, got[k]) for k in others if got[k] != k.encode()][:5]
    # and now there is nothing to give up
    code, j, _ = st.api.call("DELETE", path + "r2", {})
    assert code == 409 and "no migration running" in str(j), (code, j)


# ------------------------------------------------------------ bandwidth --

def test_bandwidth_cap_is_honoured(store):
    """migration_bandwidth 100kb (rate unlimited, 4 keys per batch) with
    about 500 KB of values moving to s1: bytes_moved never runs ahead of
    the cap (plus its tenth of a second of burst and a batch in flight),
    and the whole migration takes at least bytes / cap, not much more."""
    bw = 100 * 1024
    batch = 4
    st = store(n=3, spares=1, opts={"migration_bandwidth": "100kb",
                                    "migration_rate": 0,
                                    "migration_batch": batch})
    keys = ["b:%d" % i for i in range(480)]
    fill(st, keys, lambda k: ("%s|" % k).ljust(4000, "x"))
    ch = plan(st, keys, add="s1")
    # the bytes the copier will count: MEMORY USAGE of each moving key
    usage = {}
    for name in ("r1", "r2", "r3"):
        ks = [k for k in ch.moving if ch.old[k] == name]
        with st.servers[name].client() as c:
            for k, u in zip(ks, c.pipeline([("MEMORY", "USAGE", k)
                                            for k in ks])):
                usage[k] = u
    total = sum(usage.values())
    big = max(usage.values()) * batch
    assert 350000 < total < 800000, total
    code, rep = st.add("s1")
    assert code == 201, rep
    epoch = rep["migration"]["epoch"]
    samples = []

    def poll():
        j = st.migration()
        if j["active"]:
            samples.append((j["elapsed_s"], j["bytes_moved"]))
            return None
        return j
    j = wait_for(poll, timeout=total / bw + 8, interval=0.25,
                 what="the migration to end")
    last = j["last"]
    assert last["epoch"] == epoch and last["phase"] == "done", last
    assert last["bytes_moved"] == total, (last["bytes_moved"], total)
    assert last["keys_moved"] == len(ch.moving), last
    ahead = [(t, b) for t, b in samples if b > bw * t + bw / 10 + 2 * big]
    assert not ahead, "bytes moved ahead of %d B/s: %s" % (bw, ahead[:5])
    floor = (total - bw / 10 - 2 * big) / bw
    assert last["elapsed_s"] >= floor, \
        "%d bytes moved in %.2f s at %d B/s (at least %.2f s wanted)" % (
            total, last["elapsed_s"], bw, floor)
    assert last["elapsed_s"] <= total / bw + 3, last["elapsed_s"]
    bad, _ = check_placement(st, keys, ch.new, set(keys))
    assert not bad, brief(bad)


# --------------------------------------------------------- two stages --

class Pinger:
    """PING every redis-server of <servers> directly, in turn, until
    stopped; records the slowest answer of each (a 1 s timeout: a member
    blocked in a MIGRATE that waits for another shows as a timeout)."""

    def __init__(self, servers, max_seconds=30.0):
        self.servers = servers
        self.max_seconds = max_seconds
        self.worst = {n: 0.0 for n in servers}
        self.errors = []
        self.rounds = 0
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        conns = {n: s.client(timeout=1.0) for n, s in self.servers.items()}
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self.stop_ev.is_set() and time.monotonic() < deadline:
                for n, c in conns.items():
                    t0 = time.monotonic()
                    try:
                        r = c.call("PING")
                    except (OSError, Closed) as e:
                        self.errors.append("%s: %r after %.2f s"
                                           % (n, e, time.monotonic() - t0))
                        return
                    dt = time.monotonic() - t0
                    self.worst[n] = max(self.worst[n], dt)
                    if r != Simple("PONG"):
                        self.errors.append("%s: PING -> %r" % (n, r))
                self.rounds += 1
                time.sleep(0.01)
        finally:
            for c in conns.values():
                c.close()

    def stop(self):
        self.stop_ev.set()
        self.th.join(5)
        assert not self.th.is_alive()


def test_weight_change_both_ways_runs_in_two_stages(store):
    """r1's weight 1 -> 3 in a 3-member ketama/md5 pool: the dry run's
    flows show a member that both gives and takes keys; the migration
    shows stage 1 then stage 2, every member answers PING within 1 s
    throughout, reads of moving keys through chashd are never nil, and it
    finishes with every key on its new owner with its value."""
    st = store(n=3, spares=0, opts={"migration_rate": 1500,
                                    "migration_batch": 20})
    keys = ["s:%d" % i for i in range(4000)]
    fill(st, keys)
    path = "/api/pools/%s/members/r1" % POOL
    code, dry, _ = st.api.call("PATCH", path + "?dry_run=true",
                               {"weight": 3})
    assert code == 200, (code, dry)
    froms = {f["from"] for f in dry["flows"]}
    tos = {f["to"] for f in dry["flows"]}
    assert froms & tos, "no member both gives and takes: %s" % dry["flows"]
    ch = Change(st, keys, {"r1": 1, "r2": 1, "r3": 1},
                {"r1": 3, "r2": 1, "r3": 1})
    pairs = {(ch.old[k], ch.new[k]) for k in ch.moving}
    assert any((b, a) in pairs for a, b in pairs), pairs
    assert len(ch.moving) > 500, len(ch.moving)
    pinger = Pinger({n: st.servers[n] for n in ("r1", "r2", "r3")})
    stages, nil = [], []
    try:
        code, rep, _ = st.api.call("PATCH", path, {"weight": 3})
        assert code == 200, (code, rep)
        epoch = rep["migration"]["epoch"]
        deadline = time.monotonic() + 20
        probe = iter(ch.moving[::7])
        with st.client(timeout=5) as c:
            while time.monotonic() < deadline:
                j = st.migration()
                if not j["active"]:
                    break
                if "stage" in j and (not stages or stages[-1] != j["stage"]):
                    stages.append(j["stage"])
                k = next(probe, None)
                if k is not None:
                    got = c.call("GET", k)
                    if got != k.encode():
                        nil.append((k, got))
                time.sleep(0.02)
        last = st.wait_done(epoch, timeout=2)
    finally:
        pinger.stop()
    assert not pinger.errors, pinger.errors
    slow = {n: round(t, 3) for n, t in pinger.worst.items() if t >= 1.0}
    assert not slow and pinger.rounds > 10, (slow, pinger.rounds)
    assert stages == [1, 2], "stages seen: %s" % stages
    assert not nil, "reads of moving keys: %s" % nil[:5]
    assert last["phase"] == "done" and last["anomalies"] == 0, last
    assert last["failed_keys"] == 0, last
    assert moved_total(last) == len(ch.moving), (last, len(ch.moving))
    bad, _ = check_placement(st, keys, ch.new, set(keys))
    assert not bad, brief(bad)
    got = values_through(st, keys)
    assert all(got[k] == k.encode() for k in keys)


# ---------------------------------------------- chashd killed in a scale-in --

SCALE_IN = {"migration_rate": 150, "migration_batch": 10}
# how far the counters may trail the keys really moved: the batch in
# flight, and what the copier moves between two saves (100 ms)
COUNT_SLACK = 2 * SCALE_IN["migration_batch"] + \
    SCALE_IN["migration_rate"] // 10


def scale_in(st, keys):
    """<keys> set, r4 removed (a scale-in: its keys move, then it
    leaves); (the Change, the migration's epoch)."""
    fill(st, keys)
    ch = plan(st, keys, remove="r4")
    assert len(ch.moving) > 250
    code, rep = st.remove("r4")
    assert code == 200, rep
    return ch, rep["migration"]["epoch"]


def test_chashd_killed_mid_scale_in_resumes(store):
    """DELETE r4 (scale-in) with a slow copier, chashd SIGKILLed while r4
    still holds moving keys and started again: the migration resumes
    (same epoch, r4 still leaving), reads through the new chashd find
    every key, it finishes, r4 leaves the pool empty, and every key is on
    its new owner with its value."""
    st = store(n=4, spares=0, opts=SCALE_IN)
    keys = ["r:%d" % i for i in range(1600)]
    ch, epoch = scale_in(st, keys)
    m4 = {m["name"]: m for m in st.api.pool(POOL)["members"]}["r4"]
    assert m4["state"] == "draining" and m4["leaving"] is True, m4
    r4 = st.servers["r4"]
    wait_for(lambda: r4.dbsize() <= len(ch.moving) - 50, timeout=10,
             what="r4 to give its first keys")
    left = r4.dbsize()
    assert left >= 50, "r4 gave away all but %d keys before the kill" % left
    st.restart()
    m = st.migration()
    assert m["active"] is True and m["epoch"] == epoch, m
    assert m["leaving"] == ["r4"], m
    # reads through the resumed chashd: nothing missing
    sample = ch.moving[::5]
    got = values_through(st, sample)
    assert all(got[k] == k.encode() for k in sample), \
        [(k, got[k]) for k in sample if got[k] != k.encode()][:5]
    last = st.wait_done(epoch, timeout=20)
    assert last["phase"] == "done" and last["anomalies"] == 0, last
    assert last["failed_keys"] == 0, last
    assert last["leaving"] == ["r4"], last
    assert {mm["name"] for mm in st.api.pool(POOL)["members"]} == \
        {"r1", "r2", "r3"}
    assert r4.dbsize() == 0
    bad, _ = check_placement(st, keys, ch.new, set(keys))
    assert not bad, brief(bad)
    got = values_through(st, keys)
    assert all(got[k] == k.encode() for k in keys)


def test_scale_in_counts_survive_a_kill(store):
    """The counts of a scale-in killed and resumed: while it runs the
    API's keys_moved trails the keys r4 really gave by no more than a
    batch and a save interval; the resumed migration starts from what was
    saved, no further behind; and at the end keys_moved +
    keys_moved_by_traffic is the number of moving keys, give or take that
    much (the spec: at most one batch redone). chashd is killed while the
    counters trail the most (or after 3 s)."""
    st = store(n=4, spares=0, opts=SCALE_IN)
    keys = ["c:%d" % i for i in range(1600)]
    ch, epoch = scale_in(st, keys)
    r4 = st.servers["r4"]
    given = 0
    worst = 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        m = st.migration()
        assert m["active"] is True, "ended before the kill: %s" % m
        counted = m["keys_moved"]
        given = len(ch.moving) - r4.dbsize()    # r4 only gives
        worst = max(worst, given - counted)
        if (given - counted > COUNT_SLACK or given >= 120) and given >= 30:
            break
        time.sleep(0.02)
    st.kill()
    given = len(ch.moving) - r4.dbsize()
    assert 0 < given < len(ch.moving) - 50, given
    st.start()
    restored = st.migration()["keys_moved"]
    last = st.wait_done(epoch, timeout=20)
    bad, _ = check_placement(st, keys, ch.new, set(keys))
    assert not bad, brief(bad)
    problems = []
    if worst > COUNT_SLACK:
        problems.append("while copying, keys_moved trailed the keys r4 had "
                        "given by up to %d" % worst)
    if given - restored > COUNT_SLACK:
        problems.append("resumed with keys_moved %d; r4 had given %d keys "
                        "when chashd was killed" % (restored, given))
    total = moved_total(last)
    if not len(ch.moving) - COUNT_SLACK <= total <= len(ch.moving):
        problems.append("keys_moved %d + keys_moved_by_traffic %d = %d for "
                        "%d keys moved" % (last["keys_moved"],
                                           last["keys_moved_by_traffic"],
                                           total, len(ch.moving)))
    assert not problems, "slack %d: %s" % (COUNT_SLACK, "; ".join(problems))

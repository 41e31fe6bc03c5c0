# test_membership.py -- membership changes as an operator sees them: one
# meaning of "moved" in the API's report, the log line and the change log;
# health transitions entered in the change log; the dashboard's ring view
# (where new keys go) leaving drained members out; weight raises through
# slow start; no DNS on the control thread for runtime adds.
# SPDX-License-Identifier: BSD-2-Clause
import re
import time

import pytest

from admin_util import cluster  # noqa: F401 (fixture)
from base_util import wait_for

KEYS = ["127.0.%d.%d" % (10 + i // 250, 2 + i % 250) for i in range(300)]


def newest_change(c, **want):
    """The newest change-log entry matching every field of <want>."""
    for ch in c.api.ok("GET", "/api/changes")["changes"]:
        if all(ch.get(k) == v for k, v in want.items()):
            return ch
    return None


def test_drain_moves_one_figure_in_report_log_and_change_log(cluster):
    c = cluster(3)
    share = c.api.members("web")["web-2"]["share"]
    rep = c.api.ok("PATCH", "/api/pools/web/members/web-2",
                   {"state": "drain"})
    assert rep["applied"] and rep["moved"] == pytest.approx(share, abs=1e-9)
    # The log line of the drain says the same fraction (it said 0 when the
    # ring kept the drained member's points under failover).
    line = c.d.wait_log(r"member web-2 \S+ up -> draining: by the operator; "
                        r"share ([0-9.]+) -> ([0-9.]+); moved ([0-9.]+) of "
                        r"the keys")
    before, after, moved = map(float, line[0])
    assert before == pytest.approx(share, abs=1e-6) and after == 0
    assert moved == pytest.approx(rep["moved"], abs=1e-6)
    ch = newest_change(c, member="web-2", op="drain")
    assert ch["source"] == "admin"
    assert ch["moved"] == pytest.approx(rep["moved"], abs=1e-9)


def test_a_drained_member_owns_no_arc_and_routes_nothing(cluster):
    c = cluster(3)
    ring = c.api.ok("GET", "/api/pools/web/ring?segments=4096")
    assert {a["member"] for a in ring["arcs"]} == {"web-1", "web-2", "web-3"}
    c.api.ok("PATCH", "/api/pools/web/members/web-2", {"state": "drain"})
    ring = c.api.ok("GET", "/api/pools/web/ring?segments=4096")
    assert {a["member"] for a in ring["arcs"]} == {"web-1", "web-3"}
    assert set(ring["shares"]) == {"web-1", "web-3"}
    assert sum(ring["shares"].values()) == pytest.approx(1, abs=1e-9)
    ms = c.api.members("web")
    # placed where it was (its keys come back when it is up again), but
    # it takes none of the new ones
    assert ms["web-2"]["share"] > 0.1 and ms["web-2"]["routing_share"] == 0
    assert ms["web-1"]["routing_share"] == pytest.approx(
        ring["shares"]["web-1"], abs=1e-12)
    # the arcs are the data path's choices: a drained member's key goes to
    # its next preference
    for k in KEYS[:40]:
        prefs = c.api.lookup("web", k, replicas=2)
        owner = prefs[1] if prefs[0] == "web-2" else prefs[0]
        h = int(c.api.ok("GET", "/api/pools/web/lookup?key=" + k)["hash"], 16)
        pos = h / 2.0 ** 64
        arc = next(a for a in ring["arcs"] if a["start"] <= pos < a["end"]
                   or (a["end"] == 1 and pos >= a["start"]))
        # the arcs are sampled at 4096 points: near an edge either side
        if min(pos - arc["start"], arc["end"] - pos) > 1 / 4096:
            assert arc["member"] == owner, (k, arc, owner)


def test_health_transitions_enter_the_change_log(cluster):
    c = cluster(3, pool_opts={
        "slow_start": "300ms",
        "health_check": "{ type: tcp, interval: 100ms, timeout: 100ms, "
                        "rise: 1, fall: 1 }"})
    share = c.api.members("web")["web-3"]["share"]
    c.backends[2].stop()
    down = wait_for(lambda: newest_change(c, member="web-3", op="down"),
                    what="a 'down' entry in /api/changes")
    assert down["source"] == "health"
    assert down["moved"] == pytest.approx(share, abs=1e-9)
    assert "up -> down" in down["detail"]
    c.backends[2].start()
    up = wait_for(lambda: newest_change(c, member="web-3", op="up"),
                  what="an 'up' entry")
    assert up["seq"] > down["seq"] and up["immediate"] == 0
    done = wait_for(lambda: newest_change(c, member="web-3", op="ramp done"),
                    timeout=5, what="a 'ramp done' entry")
    assert done["seq"] > up["seq"]
    # the dashboard's change list is /api/changes: the same entries
    assert [ch["op"] for ch in c.api.ok("GET", "/api/changes")["changes"]
            if ch["member"] == "web-3"][:3] == ["ramp done", "up", "down"]


def owners(c):
    return {k: c.api.lookup("web", k)[0] for k in KEYS}


def test_a_weight_raised_from_zero_ramps_in(cluster):
    c = cluster(3, pool_opts={"slow_start": "2s"})
    c.api.ok("PATCH", "/api/pools/web/members/web-3", {"weight": 0})
    assert c.api.members("web")["web-3"]["routing_share"] == 0
    start = owners(c)
    assert "web-3" not in start.values()
    rep = c.api.ok("PATCH", "/api/pools/web/members/web-3", {"weight": 2})
    # the whole share moves in the end, none of it at once
    assert rep["moved"] > 0.3 and rep["immediate"] == 0
    m = c.api.members("web")["web-3"]
    assert m["weight"] == 2 and m["ramp"] < 0.5
    c.d.wait_log(r"member web-3 \S+ weight 0 -> 2, ramping.*moved 0\.000000 "
                 r"of the keys, ([0-9.]+) once ramped")
    seen, last = [], -1.0
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        now = owners(c)
        # keys only ever move onto the ramping member
        for k in KEYS:
            assert now[k] in (start[k], "web-3"), k
        n = list(now.values()).count("web-3")
        assert n >= last
        last = n
        seen.append(n)
        if c.api.members("web")["web-3"]["ramp"] == 1:
            break
        time.sleep(0.2)
    assert c.api.members("web")["web-3"]["ramp"] == 1
    assert seen[0] < seen[-1] and seen[-1] > len(KEYS) * 0.3


def test_a_weight_raise_keeps_what_the_member_owned(cluster):
    c = cluster(3, pool_opts={"slow_start": "5s"})
    start = owners(c)
    rep = c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 3})
    assert rep["moved"] > 0.2
    assert rep["immediate"] < 0.01  # continues from weight 1, not from 0
    now = owners(c)
    for k in KEYS:
        assert now[k] in (start[k], "web-1")
    assert list(now.values()).count("web-1") >= \
        list(start.values()).count("web-1")
    assert 0.3 <= c.api.members("web")["web-1"]["ramp"] < 0.6


def test_a_runtime_add_does_not_resolve_host_names(cluster):
    c = cluster(2)
    before = c.api.pool("web")
    st, j, _ = c.api.call("POST", "/api/pools/web/members",
                          {"address": "localhost:9", "name": "x"})
    assert st == 400 and "numeric" in j["error"], j
    assert c.api.pool("web")["checksum"] == before["checksum"]
    # a numeric address of the same host is fine (dry run)
    j = c.api.ok("POST", "/api/pools/web/members?dry_run=1",
                 {"address": "127.0.0.1:9", "name": "x"})
    assert j["dry_run"] is True and j["applied"] is False
    assert re.match(r"^\d", str(j["moved"]))

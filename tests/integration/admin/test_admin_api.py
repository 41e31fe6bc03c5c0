# test_admin_api.py -- chashd's admin API through real HTTP against a running
# chashd with live backends: pools, members, migration reports (applied and
# dry runs), lookups, ring arcs for every algorithm, and every class of bad
# request answered with a 4xx and a JSON error that changes nothing.
# SPDX-License-Identifier: BSD-2-Clause
import json
import os

import pytest

from admin_util import Api, admin_global, cluster  # noqa: F401 (fixture)
from base_util import (Backend, can_connect, fetch, free_port, lookup_config,
                       pool_yaml, wait_for)

ALGOS = ["ring", "maglev", "rendezvous", "jump", "ketama", "nginx"]
# Adding a member moves keys only to it. Not weighted ketama: libmemcached
# gives each server floor(weight/total * 40 * n) * 4 points, so a new
# member changes everyone's points (the report shows those flows).
CONTINUA = ["ring", "nginx", "rendezvous", "jump"]


def ring_view(p):
    """What a membership change alters (counters aside: the fixture's
    readiness probes are connections too)."""
    return (p["checksum"], p["snapshot"],
            [(m["name"], m["address"], m["weight"], m["state"], m["share"])
             for m in p["members"]])


def test_pools_show_settings_members_and_exact_shares(cluster):
    c = cluster(3, pool_opts={"balance_factor": 1.25, "slow_start": "5s"})
    pools = c.api.ok("GET", "/api/pools")["pools"]
    assert [p["name"] for p in pools] == ["web"]
    p = c.api.pool("web")
    assert p == pools[0]
    assert p["algorithm"] == "ring" and p["hash"] == "xxh3"
    assert p["mode"] == "tcp" and p["listen"] == "127.0.0.1:%d" % c.port
    assert p["settings"]["balance_factor"] == 1.25
    assert p["settings"]["slow_start_ms"] == 5000
    assert p["settings"]["hash_key"] == "source_ip"
    assert len(p["checksum"]) == 16
    int(p["checksum"], 16)
    ms = p["members"]
    assert [m["name"] for m in ms] == ["web-1", "web-2", "web-3"]
    for m, b in zip(ms, c.backends):
        assert m["address"] == b.addr
        assert m["state"] == "up" and m["weight"] == 1 and m["ramp"] == 1
        assert 0.2 < m["share"] < 0.5
    assert abs(sum(m["share"] for m in ms) - 1) < 1e-9
    # a member by itself
    st, m, _ = c.api.get("/api/pools/web/members/web-2")
    assert st == 200 and m["name"] == "web-2" and m["share"] == ms[1]["share"]


def test_lookup_agrees_with_the_cli_and_with_traffic(cluster):
    c = cluster(3)
    keys = ["127.0.%d.%d" % (10 + i // 250, 2 + i % 250) for i in range(60)]
    cli = lookup_config(c.d.conf, "web", keys, replicas=2)
    for k in keys:
        assert c.api.lookup("web", k, replicas=2) == cli[k]
    # and the data path sends each client to the member the API names
    for k in keys[:30]:
        assert fetch(c.port, src=k) == c.api.lookup("web", k)[0]
    j = c.api.ok("GET", "/api/pools/web/lookup?key=127.0.10.2&replicas=9")
    assert len(j["members"]) == 3  # never more than the distinct members


def test_add_reports_exact_migration_and_only_moves_keys_to_it(cluster,
                                                               backends):
    c = cluster(3)
    new = Backend(c.d.procs, "web-4")
    keys = ["127.0.%d.%d" % (10 + i // 250, 2 + i % 250) for i in range(400)]
    before = {k: c.api.lookup("web", k) for k in keys}
    old = c.api.pool("web")

    rep = c.api.ok("POST", "/api/pools/web/members",
                   {"name": "web-4", "address": new.addr, "weight": 1},
                   status=201)
    assert rep["applied"] is True and rep["dry_run"] is False
    assert rep["exact"] is True
    # ring: the minimum moves, all of it to the new member, from each
    # old member exactly the part of its arcs web-4 takes
    assert rep["moved"] == pytest.approx(rep["optimal"], abs=1e-12)
    assert 0.15 < rep["moved"] < 0.35
    assert {f["to"] for f in rep["flows"]} == {"web-4"}
    assert {f["from"] for f in rep["flows"]} == {"web-1", "web-2", "web-3"}
    assert sum(f["fraction"] for f in rep["flows"]) == \
        pytest.approx(rep["moved"], abs=1e-9)
    assert rep["immediate"] == pytest.approx(rep["moved"], abs=1e-12)

    after = c.api.pool("web")
    assert after["checksum"] != old["checksum"]
    shares = {m["name"]: m["share"] for m in after["members"]}
    assert shares["web-4"] == pytest.approx(rep["optimal"], abs=1e-9)
    moved = 0
    for k in keys:
        now = c.api.lookup("web", k)
        if now != before[k]:
            assert now == ["web-4"], (k, before[k], now)
            moved += 1
    # 400 keys: the share of keys moved is near the exact fraction
    assert abs(moved / len(keys) - rep["moved"]) < 0.08
    assert fetch(c.port, src=[k for k in keys
                              if c.api.lookup("web", k) == ["web-4"]][0]) \
        == "web-4"


def test_dry_run_reports_and_changes_nothing(cluster):
    c = cluster(3)
    before = c.api.pool("web")
    st, rep, _ = c.api.call("POST", "/api/pools/web/members?dry_run=1",
                            {"name": "web-9", "address": "127.0.0.1:1"})
    assert st == 200 and rep["dry_run"] is True and rep["applied"] is False
    assert rep["moved"] > 0 and rep["flows"]
    for path, body in [("/api/pools/web/members/web-1?dry_run=1",
                        {"weight": 4}),
                       ("/api/pools/web/members/web-1?dry_run=1",
                        {"state": "maint"})]:
        st, rep, _ = c.api.call("PATCH", path, body)
        assert st == 200 and rep["dry_run"] is True and rep["moved"] > 0
    st, rep, _ = c.api.call("DELETE", "/api/pools/web/members/web-2?dry_run=1")
    assert st == 200 and rep["dry_run"] is True
    # removing web-2 moves exactly its share, all of it away from it
    assert rep["moved"] == pytest.approx(
        [m["share"] for m in before["members"] if m["name"] == "web-2"][0],
        abs=1e-9)
    assert {f["from"] for f in rep["flows"]} == {"web-2"}
    assert ring_view(c.api.pool("web")) == ring_view(before)
    assert c.api.ok("GET", "/api/changes")["total"] == 0
    assert not os.path.exists(c.state_file)


def test_weight_drain_maint_up_and_remove(cluster):
    c = cluster(3)
    shares0 = {n: m["share"] for n, m in c.api.members("web").items()}

    rep = c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 3})
    # a reweight moves keys only to the reweighted member
    assert {f["to"] for f in rep["flows"]} == {"web-1"}
    assert rep["moved"] == pytest.approx(rep["optimal"], abs=1e-12)
    ms = c.api.members("web")
    assert ms["web-1"]["weight"] == 3
    # asking again changes nothing, and says so
    again = c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 3})
    assert again["applied"] is False and again["moved"] == 0
    assert again["note"] == "nothing to change"
    assert ms["web-1"]["share"] - shares0["web-1"] == \
        pytest.approx(rep["optimal"], abs=1e-9)

    # drain: no new client reaches web-2, the ones it had go elsewhere
    web2_keys = [k for k in ("127.0.%d.%d" % (10 + i // 250, 2 + i % 250)
                             for i in range(200))
                 if c.api.lookup("web", k) == ["web-2"]][:10]
    assert web2_keys
    rep = c.api.ok("PATCH", "/api/pools/web/members/web-2",
                   {"state": "drain"})
    assert {f["from"] for f in rep["flows"]} == {"web-2"}
    assert c.api.members("web")["web-2"]["state"] == "draining"
    for k in web2_keys:
        assert fetch(c.port, src=k) in ("web-1", "web-3")

    rep = c.api.ok("PATCH", "/api/pools/web/members/web-2", {"state": "up"})
    assert {f["to"] for f in rep["flows"]} == {"web-2"}
    assert c.api.members("web")["web-2"]["state"] == "up"
    assert fetch(c.port, src=web2_keys[0]) == "web-2"

    c.api.ok("PATCH", "/api/pools/web/members/web-3", {"state": "maint"})
    m3 = c.api.members("web")["web-3"]
    assert m3["state"] == "maint" and m3["share"] == 0

    rep = c.api.ok("DELETE", "/api/pools/web/members/web-3")
    assert rep["moved"] == 0  # it owned nothing any more
    assert set(c.api.members("web")) == {"web-1", "web-2"}

    ch = c.api.ok("GET", "/api/changes")
    assert ch["total"] == 5
    assert [x["op"] for x in ch["changes"]] == \
        ["remove", "maint", "up", "drain", "weight"]
    assert all(x["pool"] == "web" and x["time"] > 0 for x in ch["changes"])


def bad_requests(c, other):
    """(method, path, body, status, words the error must contain)."""
    big = json.dumps({"name": "x" * (70 * 1024), "address": "127.0.0.1:9"})
    return [
        ("GET", "/api/pools/nope", None, 404, "nope"),
        ("GET", "/api/pools/web/members/nope", None, 404, "nope"),
        ("PATCH", "/api/pools/web/members/nope", {"weight": 2}, 404, "nope"),
        ("DELETE", "/api/pools/web/members/nope", None, 404, "nope"),
        ("POST", "/api/pools/nope/members", {"address": other}, 404, "nope"),
        ("POST", "/api/pools/web/members", "{\"name\": ", 400, "malformed"),
        ("POST", "/api/pools/web/members", "[1,2]", 400, "object"),
        ("POST", "/api/pools/web/members", "", 400, "body"),
        ("POST", "/api/pools/web/members", {"name": "a"}, 400, "address"),
        ("POST", "/api/pools/web/members", {"name": 5, "address": other},
         400, "name"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": other, "weight": "3"}, 400, "weight"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": other, "weight": 1.5}, 400, "weight"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": other, "weight": -1}, 400, "weight"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": other, "weight": 10 ** 7}, 400, "weight"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": other, "colour": "red"}, 400, "colour"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": "nohost"}, 400, "address"),
        ("POST", "/api/pools/web/members",
         {"name": "a b", "address": other}, 400, "name"),
        ("POST", "/api/pools/web/members",
         {"name": "web-1", "address": other}, 409, "web-1"),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": c.backends[0].addr}, 409,
         c.backends[0].addr),
        ("POST", "/api/pools/web/members",
         {"name": "a", "address": other, "weight": 100000}, 409,
         "too many points"),
        ("PATCH", "/api/pools/web/members/web-1", {}, 400, "nothing"),
        ("PATCH", "/api/pools/web/members/web-1", {"state": "off"}, 400,
         "state"),
        ("PATCH", "/api/pools/web/members/web-1", {"weight": None}, 400,
         "weight"),
        ("PATCH", "/api/pools/web/members/web-1", {"address": other}, 400,
         "address"),
        ("POST", "/api/pools/web/members", big, 413, "body"),
        ("GET", "/api/nothing", None, 404, "/api/nothing"),
        ("GET", "/api/pools/web/members/web-1/x", None, 404, "no such path"),
        ("GET", "/api//pools", None, 404, "no such path"),
        ("PUT", "/api/pools/web/members/web-1", {"weight": 2}, 405, "PUT"),
        ("POST", "/api/pools", {}, 405, "POST"),
        ("DELETE", "/metrics", None, 405, "DELETE"),
        ("POST", "/api/pools/web/lookup?key=a", None, 405, "POST"),
        ("GET", "/api/pools/web/lookup", None, 400, "key"),
        ("GET", "/api/pools/web/lookup?key=a&replicas=0", None, 400,
         "replicas"),
        ("GET", "/api/pools/web/lookup?key=a&replicas=x", None, 400,
         "replicas"),
        ("GET", "/api/pools/web/ring?segments=0", None, 400, "segments"),
        ("GET", "/api/pools/web/ring?segments=99999999", None, 400,
         "segments"),
    ]


def test_every_bad_request_is_a_4xx_json_error_that_changes_nothing(cluster):
    c = cluster(2)
    other = "127.0.0.1:%d" % free_port()
    before = c.api.pool("web")
    for method, path, body, status, words in bad_requests(c, other):
        st, j, headers = c.api.call(method, path, body)
        assert st == status, (method, path, body, st, j)
        assert isinstance(j, dict) and set(j) == {"error"}, (path, j)
        assert words in j["error"], (path, j["error"])
        if status == 405:
            assert "Allow" in headers
    assert ring_view(c.api.pool("web")) == ring_view(before)
    assert c.api.ok("GET", "/api/changes")["total"] == 0
    # one member left in the ring: removing or draining it would leave the
    # pool with nobody owning the key space
    c.api.ok("DELETE", "/api/pools/web/members/web-2")
    mid = c.api.pool("web")
    for method, path, body in [
            ("DELETE", "/api/pools/web/members/web-1", None),
            ("PATCH", "/api/pools/web/members/web-1", {"state": "maint"}),
            ("PATCH", "/api/pools/web/members/web-1", {"weight": 0})]:
        st, j, _ = c.api.call(method, path, body)
        assert st == 409, (path, body, j)
        assert "web-1" in j["error"] or "no member" in j["error"] or \
            "owns" in j["error"], j
    assert ring_view(c.api.pool("web")) == ring_view(mid)
    assert ring_view(before)[2][0][:3] == ring_view(mid)[2][0][:3]
    assert c.api.ok("GET", "/api/changes")["total"] == 1
    # the daemon is still serving
    assert fetch(c.port) == "web-1"


def test_ring_arcs_cover_the_circle_for_every_algorithm(procs, backends,
                                                        chashd, tmp_path):
    bs = backends(3)
    aport = free_port()
    ports = [free_port() for _ in ALGOS]
    # weights 1, 2, 1 (jump takes weights 0/1 only: 1, 1, 1 there)
    text = admin_global(aport) + "".join(
        pool_yaml(a, p, bs if a == "jump" else [bs[0], (bs[1], 2), bs[2]],
                  distribution=a)
        for a, p in zip(ALGOS, ports))
    chashd(text, ports[0])
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    for algo in ALGOS:
        j = api.ok("GET", "/api/pools/%s/ring?segments=65536" % algo)
        arcs = j["arcs"]
        assert arcs[0]["start"] == 0 and arcs[-1]["end"] == 1, algo
        for a, b in zip(arcs, arcs[1:]):
            assert a["end"] == b["start"], algo
            assert a["member"] != b["member"], algo
        got = {}
        for a in arcs:
            got[a["member"]] = got.get(a["member"], 0) + a["end"] - a["start"]
        assert set(got) == set(j["shares"]) == {"web-1", "web-2", "web-3"}
        for name, share in j["shares"].items():
            assert abs(got[name] - share) < 0.01, (algo, name, got, share)
        p = api.pool(algo)
        assert {m["name"]: m["share"] for m in p["members"]} == j["shares"]
        # the report machinery works for every algorithm too
        st, rep, _ = api.call("POST", "/api/pools/%s/members?dry_run=1"
                              % algo, {"name": "web-9",
                                       "address": "127.0.0.1:1"})
        assert st == 200 and 0.1 < rep["moved"] < 0.45, (algo, rep)
        if algo in CONTINUA:
            assert {f["to"] for f in rep["flows"]} == {"web-9"}, algo
        assert rep["exact"] is (algo not in ("rendezvous", "jump"))
    st, j, _ = api.call("PATCH", "/api/pools/jump/members/web-1",
                        {"weight": 2})
    assert st == 400 and "jump" in j["error"]


def test_lookup_honours_the_hash_tag(procs, backends, chashd):
    bs = backends(3)
    aport, port = free_port(), free_port()
    chashd(admin_global(aport) + pool_yaml("t", port, bs, hash_tag='"{}"'),
           port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    keys = ["user:%d" % i for i in range(40)]
    owners = {api.lookup("t", k)[0] for k in keys}
    assert len(owners) > 1  # plain keys spread
    for i in range(10):
        tag = "{%d}" % i
        want = api.lookup("t", str(i))
        assert api.lookup("t", "a" + tag + "x") == want
        assert api.lookup("t", "zz" + tag) == want

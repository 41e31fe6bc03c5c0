# test_admin_state.py -- runtime membership changes survive: the state file
# is written atomically at each change, re-applied after a crash (SIGKILL)
# and a restart, and on SIGHUP reload on top of an edited config; and the
# admin token is enforced.
# SPDX-License-Identifier: BSD-2-Clause
import os
import signal
import subprocess

from admin_util import CHASHD, Api, admin_global, cluster  # noqa: F401
from base_util import (Backend, can_connect, fetch, free_port, pool_yaml,
                       wait_for)


def membership(api):
    return {n: (m["address"], m["weight"], m["state"])
            for n, m in api.members("web").items()}


def test_changes_survive_a_crash_restart_and_a_reload(cluster, chashd):
    c = cluster(3)
    b4 = Backend(c.d.procs, "web-4")
    c.api.ok("POST", "/api/pools/web/members",
             {"name": "web-4", "address": b4.addr, "weight": 2})
    c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 3})
    c.api.ok("PATCH", "/api/pools/web/members/web-2", {"state": "drain"})
    c.api.ok("DELETE", "/api/pools/web/members/web-3")
    want = membership(c.api)
    assert want == {"web-1": (c.backends[0].addr, 3, "up"),
                    "web-2": (c.backends[1].addr, 1, "draining"),
                    "web-4": (b4.addr, 2, "up")}
    checksum = c.api.pool("web")["checksum"]

    # the file says exactly what changed from the config, and /api/state
    # shows the same
    st = c.state()
    assert st["version"] == 1
    web = st["pools"]["web"]
    assert web["added"] == [{"name": "web-4", "address": b4.addr,
                             "weight": 2, "state": "up"}]
    assert web["removed"] == ["web-3"]
    assert sorted(web["changed"], key=lambda e: e["name"]) == [
        {"name": "web-1", "weight": 3, "state": "up"},
        {"name": "web-2", "weight": 1, "state": "drain"}]
    api_state = c.api.ok("GET", "/api/state")
    assert api_state["pools"] == st["pools"]
    assert api_state["file"] == c.state_file
    # no temporary file left behind by the atomic writes
    assert [f for f in os.listdir(c.tmp) if ".tmp." in f] == []

    # a crash and a restart on the same config: the same ring
    c.restart(chashd)
    assert membership(c.api) == want
    assert c.api.pool("web")["checksum"] == checksum
    assert fetch(c.port) in ("web-1", "web-4")

    # SIGHUP with an edited config: a new config member web-5; the runtime
    # changes are applied on top
    b5 = Backend(c.d.procs, "web-5")
    text = c.text.replace(
        "    - %s:1 web-3\n" % c.backends[2].addr,
        "    - %s:1 web-3\n    - %s:1 web-5\n" % (c.backends[2].addr, b5.addr))
    assert text != c.text
    c.d.reload(text)
    got = membership(c.api)
    assert got == dict(want, **{"web-5": (b5.addr, 1, "up")})
    # the delta is still relative to the config: web-5 is not "added"
    assert c.state()["pools"]["web"]["added"] == web["added"]

    # undoing every change empties the delta
    c.api.ok("DELETE", "/api/pools/web/members/web-4")
    c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 1})
    c.api.ok("PATCH", "/api/pools/web/members/web-2", {"state": "up"})
    c.api.ok("POST", "/api/pools/web/members",
             {"name": "web-3", "address": c.backends[2].addr})
    assert c.state()["pools"] == {}


def test_a_corrupt_state_file_stops_start_up(procs, backends, tmp_path):
    bs = backends(1)
    port, aport = free_port(), free_port()
    state = os.path.join(str(tmp_path), "state.json")
    with open(state, "w") as f:
        f.write('{"version": 1, "pools": {"web": {"added": [{"name": 3}]}}}')
    conf = os.path.join(str(tmp_path), "c.yml")
    with open(conf, "w") as f:
        f.write(admin_global(aport, state) + pool_yaml("web", port, bs))
    p = subprocess.run([CHASHD, "-c", conf], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode != 0
    assert "state.json" in p.stderr and "added[0].name" in p.stderr, p.stderr
    assert not can_connect(port)


def test_the_token_is_required_when_set(cluster):
    c = cluster(2, token="s3cret-t0ken")
    anon = Api(c.admin_port)
    for path in ("/api/pools", "/metrics", "/api/state", "/api/changes",
                 "/api/pools/web/lookup?key=a"):
        st, j, h = anon.get(path)
        assert st == 401 and "token" in j["error"], path
        assert h.get("WWW-Authenticate", "").startswith("Bearer")
        st, j, _ = anon.get(path, token="wrong")
        assert st == 401, path
        st, j, _ = anon.get(path, token="s3cret-t0ken" + "x")
        assert st == 401, path
        st, _, _ = c.api.get(path)
        assert st == 200, path
    st, j, _ = anon.call("POST", "/api/pools/web/members",
                         {"name": "x", "address": "127.0.0.1:1"})
    assert st == 401
    assert set(c.api.members("web")) == {"web-1", "web-2"}
    # the page itself holds no data and loads without the header; its
    # scripts send the token from the URL fragment
    st, text, _ = anon.get("/")
    assert st == 200 and "<svg" not in text and "TOKEN" in text


def test_chashd_t_refuses_a_public_admin_without_a_token(tmp_path):
    conf = os.path.join(str(tmp_path), "c.yml")
    pool = ("web:\n  listen: 127.0.0.1:%d\n  mode: tcp\n  servers:\n"
            "    - 127.0.0.1:%d:1 a\n" % (free_port(), free_port()))
    with open(conf, "w") as f:
        f.write("global:\n  admin: 0.0.0.0:%d\n" % free_port() + pool)
    p = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode != 0 and "admin_token" in p.stderr, p.stderr
    # start-up refuses it the same way
    p = subprocess.run([CHASHD, "-c", conf], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode != 0 and "admin_token" in p.stderr, p.stderr
    with open(conf, "w") as f:
        f.write("global:\n  admin: 0.0.0.0:%d\n  admin_token: abc\n"
                % free_port() + pool)
    p = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr


def test_a_refused_reload_leaves_the_state_alone(cluster):
    import socket
    c = cluster(3)
    b4 = Backend(c.d.procs, "web-4")
    c.api.ok("POST", "/api/pools/web/members",
             {"name": "web-4", "address": b4.addr})
    # a config that adds web-5 and a pool whose port is taken: refused
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        bad = c.text.replace(
            "    - %s:1 web-3\n" % c.backends[2].addr,
            "    - %s:1 web-3\n    - 127.0.0.1:%d:1 web-5\n"
            % (c.backends[2].addr, free_port())) + pool_yaml(
            "other", busy.getsockname()[1], c.backends[:1])
        c.d.reload(bad)
        assert "reload refused" in c.d.log()
    finally:
        busy.close()
    assert set(c.api.members("web")) == {"web-1", "web-2", "web-3", "web-4"}
    # a change after it: the delta is still against the running config
    c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 2})
    web = c.state()["pools"]["web"]
    assert web["removed"] == [] and [a["name"] for a in web["added"]] == \
        ["web-4"]
    assert web["changed"] == [{"name": "web-1", "weight": 2, "state": "up"}]


def test_a_reload_changes_the_token(cluster):
    c = cluster(1, token="first")
    assert c.api.get("/api/pools")[0] == 200
    c.d.reload(c.text.replace("admin_token: first", "admin_token: second"))
    assert c.api.get("/api/pools")[0] == 401
    assert c.api.get("/api/pools", token="second")[0] == 200


def test_a_reload_that_changes_members_is_a_logged_change(cluster):
    c = cluster(3)
    b5 = Backend(c.d.procs, "web-5")
    text = c.text.replace(
        "    - %s:1 web-3\n" % c.backends[2].addr,
        "    - %s:1 web-5\n" % b5.addr).replace(
        "    - %s:1 web-1\n" % c.backends[0].addr,
        "    - %s:2 web-1\n" % c.backends[0].addr)
    before = {n: m["share"] for n, m in c.api.members("web").items()}
    c.d.reload(text)
    after = {n: m["share"] for n, m in c.api.members("web").items()}
    ch = c.api.ok("GET", "/api/changes")
    assert ch["total"] == 1
    x = ch["changes"][0]
    assert x["op"] == "reload" and x["pool"] == "web"
    assert x["detail"] == "~web-1 +web-5 -web-3"
    # optimal: the total variation distance of the shares
    names = set(before) | set(after)
    tv = sum(abs(after.get(n, 0) - before.get(n, 0)) for n in names) / 2
    assert abs(x["optimal"] - tv) < 1e-9
    assert x["moved"] >= x["optimal"] - 1e-9 and x["moved"] > 0
    # a reload that changes no member is not a change
    c.d.reload(text)
    assert c.api.ok("GET", "/api/changes")["total"] == 1

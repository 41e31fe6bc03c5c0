# test_admin_adversarial.py -- hostile input to chashd's admin plane: URLs
# that decode to bytes that are not UTF-8 or to control bytes, dry-run
# flags that must never apply a change, the bearer scheme as clients write
# it, a reload that would drop the token of a bound listener, cross-origin
# pages and rebound names in a real browser, foreign Host and Origin
# headers, bodies that are not JSON, descriptors running out, member
# addresses without a port, stalled clients next to the health checks, and
# `chash ctl` against servers that trickle or never answer.
# SPDX-License-Identifier: BSD-2-Clause
import json
import os
import resource
import socket
import subprocess
import threading
import time

import pytest

from admin_util import (CHASH, CHROMIUM, Api, admin_global,  # noqa: F401
                        cluster, dom_elements, dump_dom)
from base_util import can_connect, free_port, pool_yaml, recv_all, wait_for


def state_bytes(c):
    if not os.path.exists(c.state_file):
        return None
    with open(c.state_file, "rb") as f:
        return f.read()


def test_urls_that_decode_to_non_utf8_get_a_json_error(cluster):
    c = cluster(2)
    # %FF decodes to a byte JSON cannot hold: the 404 still comes, with it
    # shown as '?'
    st, j, _ = c.api.get("/api/pools/%FF")
    assert st == 404 and j["error"] == 'no pool named "?"'
    st, j, _ = c.api.call("PUT", "/api/pools/web/members/%C3%28")
    assert st == 404 and "?" in j["error"]
    # a long name of 2-byte characters: the 512-byte message is cut inside
    # one of them at every other offset
    for pad in range(1, 5):
        st, j, _ = c.api.get("/api/pools/" + "a" * pad + "%C3%A9" * 300)
        assert st == 404, (pad, st)
        assert j["error"].startswith('no pool named "' + "a" * pad + "\u00e9")
    # a lookup hashes the key as sent and echoes it as text
    st, j, _ = c.api.get("/api/pools/web/lookup?key=a%FFb")
    assert st == 200 and j["key"] == "a?b" and len(j["members"]) == 1
    st, j, _ = c.api.get("/api/pools/web/lookup?key=a%C3%A9b")
    assert st == 200 and j["key"] == "a\u00e9b"
    assert c.d.proc.poll() is None


def test_dry_run_values_never_apply_a_change(cluster):
    c = cluster(3)
    # one real change so the state file exists and its bytes can be compared
    c.api.ok("PATCH", "/api/pools/web/members/web-3", {"weight": 2})
    before, file_before = c.api.pool("web"), state_bytes(c)
    assert file_before is not None
    for v in ("True", "YES", "on", "1", ""):
        st, j, _ = c.api.call("PATCH", "/api/pools/web/members/web-1?dry_run="
                              + v, {"weight": 5})
        assert st == 200 and j["dry_run"] is True and j["applied"] is False, v
        st, j, _ = c.api.call("DELETE",
                              "/api/pools/web/members/web-2?dry_run=" + v)
        assert st == 200 and j["dry_run"] is True, v
        st, j, _ = c.api.call("POST", "/api/pools/web/members?dry_run=" + v,
                              {"address": "127.0.0.1:1", "name": "x"})
        assert st == 200 and j["dry_run"] is True, v
    for v in ("maybe", "y", "2", "tru"):
        for method, path, body in (
                ("PATCH", "/api/pools/web/members/web-1", {"weight": 5}),
                ("DELETE", "/api/pools/web/members/web-2", None),
                ("POST", "/api/pools/web/members",
                 {"address": "127.0.0.1:1", "name": "x"})):
            st, j, _ = c.api.call(method, path + "?dry_run=" + v, body)
            assert st == 400 and "dry_run" in j["error"], (method, v, st, j)
    after = c.api.pool("web")
    assert [(m["name"], m["weight"]) for m in after["members"]] == \
        [(m["name"], m["weight"]) for m in before["members"]]
    assert after["checksum"] == before["checksum"]
    assert state_bytes(c) == file_before
    # and the explicit "no" still applies
    st, j, _ = c.api.call("PATCH", "/api/pools/web/members/web-1?dry_run=False",
                          {"weight": 5})
    assert st == 200 and j["applied"] is True
    assert c.api.members("web")["web-1"]["weight"] == 5


def test_bearer_scheme_is_case_insensitive_and_the_token_exact(cluster):
    c = cluster(2, token="s3cret")

    def status(auth):
        st, _, _ = c.api.raw("GET", "/api/state", token="",
                             headers={"Authorization": auth} if auth else {})
        return st

    assert status("Bearer s3cret") == 200
    assert status("bearer s3cret") == 200
    assert status("BEARER s3cret") == 200
    assert status("Bearer   s3cret") == 200
    for bad in (None, "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cretx",
                "Bearer S3CRET", "Basic s3cret", "s3cret", "Bearers3cret",
                "Bearer s3cret extra"):
        assert status(bad) == 401, bad


def test_member_address_without_port_is_refused(cluster):
    c = cluster(2)
    before = c.api.pool("web")
    for addr in ("127.0.0.1", "[::1]", "localhost", "127.0.0.1:",
                 "127.0.0.1:80:3"):
        st, j, _ = c.api.call("POST", "/api/pools/web/members",
                              {"address": addr, "name": "n"})
        assert st == 400, (addr, st, j)
        assert addr in j["error"], j
    assert c.api.pool("web")["checksum"] == before["checksum"]
    assert sorted(c.api.members("web")) == ["web-1", "web-2"]
    # the forms that carry a port still work
    st, j, _ = c.api.call("POST", "/api/pools/web/members?dry_run=1",
                          {"address": "[::1]:9", "name": "v6"})
    assert st == 200, j


def test_members_named_by_a_unix_path_can_be_managed(chashd, backends,
                                                    tmp_path):
    """A unix socket member without a name is named by its path, slashes
    and all: the API must still reach it, with the slashes as they are or
    %2F-encoded (as `chash ctl` sends them)."""
    bs = backends(1)
    port, aport = free_port(), free_port()
    sock = os.path.join(str(tmp_path), "m.sock")
    state_file = os.path.join(str(tmp_path), "state.json")
    text = (admin_global(aport, state_file) + pool_yaml("web", port, bs) +
            "    - %s:1\n" % sock)
    chashd(text, port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    assert sock in api.members("web")
    j = api.ok("PATCH", "/api/pools/web/members/" + sock, {"weight": 3})
    assert j["applied"] is True
    enc = sock.replace("/", "%2F")
    assert api.ok("GET", "/api/pools/web/members/" + enc)["weight"] == 3
    p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d" % aport,
                        "drain", "web", sock], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    assert api.members("web")[sock]["admin"] == "drain"
    api.ok("DELETE", "/api/pools/web/members/" + enc)
    assert sock not in api.members("web")
    with open(state_file) as f:
        assert json.load(f)["pools"]["web"]["removed"] == [sock]
    # what is not a member is still a 404, not another route
    st, j, _ = api.get("/api/pools/web/members/web-1/extra")
    assert st == 404 and "web-1/extra" in j["error"]
    st, j, _ = api.get("/api/pools/nope/members/" + sock)
    assert st == 404 and "nope" in j["error"]


def test_a_state_file_that_cannot_be_written_is_reported(chashd, backends,
                                                        tmp_path):
    """The change is live (it already moved traffic) and the answer says
    the file was not written; the next change that can write it writes
    the whole delta, this one included."""
    bs = backends(3)
    port, aport = free_port(), free_port()
    # two levels missing: chashd creates only the last one at start
    sdir = os.path.join(str(tmp_path), "later", "state")
    state_file = os.path.join(sdir, "state.json")
    chashd(admin_global(aport, state_file) + pool_yaml("web", port, bs), port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    st, j, _ = api.call("PATCH", "/api/pools/web/members/web-1",
                        {"weight": 4})
    assert st == 200 and j["applied"] is True
    assert "later" in j["warning"], j
    assert api.members("web")["web-1"]["weight"] == 4
    assert api.get("/api/state")[1]["pools"]["web"]["changed"][0]["weight"] \
        == 4
    assert not os.path.exists(state_file)
    os.makedirs(sdir)
    st, j, _ = api.call("PATCH", "/api/pools/web/members/web-2",
                        {"state": "drain"})
    assert st == 200 and "warning" not in j
    with open(state_file) as f:
        changed = {e["name"]: e for e in
                   json.load(f)["pools"]["web"]["changed"]}
    assert changed["web-1"]["weight"] == 4
    assert changed["web-2"]["state"] == "drain"
    assert [n for n in os.listdir(sdir) if n != "state.json"] == []


def test_a_reload_of_long_utf8_names_is_in_the_change_log(cluster):
    """The reload's "+name" detail is cut to 127 bytes: cut inside a
    2-byte character, the entry must still be listed."""
    c = cluster(2)
    long_a, long_b = "\u00e9" * 60 + "a", "\u00e9" * 60 + "b"
    text = c.text + "    - 127.0.0.1:1:1 %s\n    - 127.0.0.1:2:1 %s\n" % (
        long_a, long_b)
    c.d.reload(text)
    assert long_a in c.api.members("web")
    ch = c.api.ok("GET", "/api/changes")
    assert ch["total"] == 1 and len(ch["changes"]) == 1, ch
    assert ch["changes"][0]["op"] == "reload"
    assert ch["changes"][0]["detail"].startswith("+" + long_a + " +")


def test_a_restart_on_a_config_the_state_no_longer_fits(cluster, chashd):
    """A weight set under rendezvous does not fit jump: after the config
    changes, chashd starts on the config as written and says why."""
    c = cluster(3, pool_opts={"distribution": "rendezvous"})
    c.api.ok("PATCH", "/api/pools/web/members/web-1", {"weight": 5})
    c.text = c.text.replace("distribution: rendezvous", "distribution: jump")
    d = c.restart(chashd)
    assert d.proc.poll() is None
    d.wait_log(r"pool web: its runtime changes do not fit the config")
    assert c.api.members("web")["web-1"]["weight"] == 1
    assert c.api.pool("web")["algorithm"] == "jump"


def test_stalled_admin_clients_do_not_stop_health_checks(cluster):
    """The admin API runs on the control thread, next to health checks:
    clients that stall mid-request must not hold it up."""
    c = cluster(3, pool_opts={
        "health_check": "{type: tcp, interval: 100ms, timeout: 100ms, fall: 1}"})
    stalled = []
    host = b"Host: 127.0.0.1:%d\r\n" % c.admin_port
    try:
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", c.admin_port))
            if i % 2:
                s.sendall(b"GET /api/state HTTP/1.1\r\n" + host)
            else:
                s.sendall(b"POST /api/pools/web/members HTTP/1.1\r\n" +
                          host + b"Content-Type: application/json\r\n"
                          b"Content-Length: 1000\r\n\r\n{\"ad")
            stalled.append(s)
        c.backends[1].stop()
        wait_for(lambda: c.api.members("web")["web-2"]["health"] == "down",
                 timeout=5, what="the health check to see web-2 down")
    finally:
        for s in stalled:
            s.close()


def serve_once(behaviour):
    """A one-connection TCP server on a free port that reads the request
    and then does <behaviour>(conn). Returns (port, thread, stop event)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    port = ls.getsockname()[1]
    stop = threading.Event()

    def run():
        ls.settimeout(30)
        try:
            conn, _ = ls.accept()
        except OSError:
            return
        try:
            conn.settimeout(1)
            try:
                conn.recv(65536)
            except OSError:
                pass
            behaviour(conn, stop)
        finally:
            conn.close()
            ls.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return port, t, stop


def test_ctl_gives_up_on_a_trickling_server(tmp_path):
    """A server that sends a byte every second forever: each read returns
    within the 10 s socket timeout, but the whole request must not."""
    def trickle(conn, stop):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        for i in range(60):
            if stop.is_set():
                return
            try:
                conn.sendall(head[i:i + 1] if i < len(head) else b" ")
            except OSError:
                return
            time.sleep(1)

    port, t, stop = serve_once(trickle)
    t0 = time.monotonic()
    try:
        p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d" % port,
                            "pools"], capture_output=True, text=True,
                           timeout=40)
    finally:
        stop.set()
    took = time.monotonic() - t0
    assert p.returncode == 1, p
    assert "timed out" in p.stderr, p.stderr
    assert took < 20, took
    t.join(timeout=5)


def test_ctl_reports_answers_that_are_not_http(tmp_path):
    for answer, want in ((b"SSH-2.0-OpenSSH\r\n", "malformed"),
                         (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",
                          "short answer"),
                         (b"HTTP/1.1 200 OK\r\n\r\nnot json", "not JSON"),
                         (b"", "malformed")):
        port, t, _ = serve_once(lambda conn, stop, a=answer: conn.sendall(a))
        p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d" % port,
                            "pools"], capture_output=True, text=True,
                           timeout=30)
        t.join(timeout=5)
        assert p.returncode == 1, (answer, p)
        assert want in p.stderr, (answer, p.stderr)


def test_ctl_refuses_arguments_it_cannot_send():
    admin = "127.0.0.1:%d" % free_port()
    # a name that is not UTF-8 cannot go into JSON: said before any request
    p = subprocess.run([CHASH.encode(), b"ctl", b"--admin", admin.encode(),
                        b"add", b"web", b"n\xff", b"127.0.0.1:9"],
                       capture_output=True, timeout=30)
    assert p.returncode == 2, p
    assert b"UTF-8" in p.stderr, p.stderr
    # a token with CR LF would write headers of its own
    p = subprocess.run([CHASH, "ctl", "--admin", admin, "--token",
                        "t\r\nX-Evil: 1", "pools"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2, p
    assert "control character" in p.stderr, p.stderr


# ---- the token across a reload -------------------------------------------

def start_on_wildcard(chashd, tmp_path, pool, port, token):
    """chashd with its admin API on 0.0.0.0 and <token>: (Chashd, port).
    A port free on 127.0.0.1 may be in use on another address (another
    test's connection): a start that finds it taken tries another."""
    log = os.path.join(str(tmp_path), "chashd.log")
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            aport = s.getsockname()[1]
        try:
            d = chashd(admin_global(aport, token=token, admin_host="0.0.0.0")
                       + pool, port)
        except AssertionError:
            with open(log) as f:
                if "Address already in use" not in f.read():
                    raise
            continue
        wait_for(lambda: can_connect(aport), what="admin API")
        return d, aport
    raise AssertionError("no free port on 0.0.0.0 in 5 tries")


def test_a_reload_cannot_drop_the_token_of_a_wildcard_listener(
        chashd, backends, tmp_path):
    """The admin address changes only at a restart: a reload to a loopback
    address without a token, or to `admin: off`, would leave 0.0.0.0 open
    to anyone. Such a reload is refused whole; a new token is taken."""
    bs = backends(2)
    port = free_port()
    pool = pool_yaml("web", port, bs)
    d, aport = start_on_wildcard(chashd, tmp_path, pool, port, "s3cret")
    api, anon = Api(aport, "s3cret"), Api(aport)
    before = api.pool("web")
    # each refused file also adds a member: nothing of it may apply
    grown = pool + "    - 127.0.0.1:1:1 web-9\n"
    for n, glob in enumerate((admin_global(aport), admin_global(aport + 1),
                              "global:\n  admin: off\n  workers: 2\n"), 1):
        d.reload(glob + grown)
        st, j, _ = anon.get("/api/pools")
        assert st == 401, (glob, st, j)
        st, j, _ = anon.call("POST", "/api/pools/web/members",
                             {"name": "x", "address": "127.0.0.1:9"})
        assert st == 401, (glob, st, j)
        line = d.wait_log(r"reload refused, the running config stays: "
                          r"[^\n]*", count=n)[n - 1]
        assert "0.0.0.0:%d" % aport in line and "admin_token" in line, line
        assert api.pool("web")["checksum"] == before["checksum"]
        assert sorted(api.members("web")) == ["web-1", "web-2"]
    # another token is fine: it protects the listener from now on
    d.reload(admin_global(aport, token="n3w", admin_host="0.0.0.0") + pool)
    assert api.get("/api/pools")[0] == 401
    assert Api(aport, "n3w").get("/api/pools")[0] == 200
    assert d.proc.poll() is None


def test_a_reload_may_drop_the_token_of_a_loopback_listener(cluster):
    """On loopback a token is not required, at start-up or at a reload:
    the file as written is what runs, and the log says the API is now
    open to local clients."""
    c = cluster(2, token="s3cret")
    assert Api(c.admin_port).get("/api/pools")[0] == 401
    c.d.reload(c.text.replace("  admin_token: s3cret\n", ""))
    c.d.wait_log(r"admin: the token is removed")
    assert Api(c.admin_port).get("/api/pools")[0] == 200


# ---- CSRF and DNS rebinding ----------------------------------------------

ATTACK_PAGE = """<!doctype html>
<html><body>
<div id="fetch">pending</div><div id="form">pending</div>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink"
      action="%(api)s/api/pools/web/members">
<input type="hidden" name='{"address": "127.0.0.1:9", "name": "evil' value='3"}'>
</form>
<script>
var api = "%(api)s";
function add(name, ctype) {
  return fetch(api + "/api/pools/web/members", {
    method: "POST", mode: "no-cors", headers: {"Content-Type": ctype},
    body: JSON.stringify({name: name, address: "127.0.0.1:9"})});
}
Promise.all([add("evil1", "text/plain"),
             add("evil2", "application/x-www-form-urlencoded"),
             fetch(api + "/api/pools/web/members/web-1?dry_run=0",
                   {method: "POST", mode: "no-cors",
                    body: '{"weight": 7}'})])
  .then(function () { document.getElementById("fetch").textContent = "sent"; },
        function (e) { document.getElementById("fetch").textContent =
                         "error " + e; });
document.getElementById("sink").onload = function () {
  document.getElementById("form").textContent = "sent";
};
document.getElementById("f").submit();
</script></body></html>
"""


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                    reason="chromium is not installed (scripts/deps)")
def test_a_page_of_another_origin_cannot_change_the_pool(cluster, procs,
                                                         tmp_path):
    """A web page on another port of the same machine POSTs to the admin
    API from a real browser: no-cors fetches with the content types a
    browser sends without asking (text/plain, form-urlencoded) and a form
    with enctype text/plain whose body is JSON. The browser sends them;
    chashd must change nothing."""
    c = cluster(2)
    before = c.api.pool("web")
    site = os.path.join(str(tmp_path), "site")
    os.mkdir(site)
    with open(os.path.join(site, "attack.html"), "w") as f:
        f.write(ATTACK_PAGE % {"api": "http://127.0.0.1:%d" % c.admin_port})
    wport = free_port()
    procs.start(["/usr/bin/python3", "-m", "http.server", str(wport),
                 "--bind", "127.0.0.1", "--directory", site], "site.log")
    wait_for(lambda: can_connect(wport), what="the attacking site")
    dom = dump_dom("http://127.0.0.1:%d/attack.html" % wport)
    # the browser did send every request (none was blocked before chashd)
    assert '<div id="fetch">sent</div>' in dom, dom
    assert '<div id="form">sent</div>' in dom, dom
    after = c.api.pool("web")
    assert sorted(m["name"] for m in after["members"]) == ["web-1", "web-2"]
    assert [m["weight"] for m in after["members"]] == [1, 1]
    assert after["checksum"] == before["checksum"]
    assert c.api.ok("GET", "/api/changes")["total"] == 0
    assert not os.path.exists(c.state_file)


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                    reason="chromium is not installed (scripts/deps)")
def test_a_rebound_name_cannot_read_the_api(cluster):
    """DNS rebinding: a name the attacker controls resolves to 127.0.0.1
    once its page is loaded, and the page reads the API as its own
    origin. Chromium maps rebind.test to 127.0.0.1 and loads the
    dashboard through it: chashd refuses the Host, nothing is drawn."""
    c = cluster(2)
    args = ["--host-resolver-rules=MAP rebind.test 127.0.0.1"]
    dom = dump_dom("http://rebind.test:%d/" % c.admin_port, extra=args)
    rows = dom_elements(dom, "tr", "member")
    assert rows == [], "the rebound page read the pool: %s" % rows
    assert "web-1" not in dom and "rebind.test" in dom, dom[:2000]
    # the same browser through the address itself draws the pool
    dom = dump_dom("http://127.0.0.1:%d/" % c.admin_port)
    rows = dom_elements(dom, "tr", "member")
    assert [r["data-member"] for r in rows] == ["web-1", "web-2"]


def test_foreign_hosts_are_refused(cluster):
    c = cluster(2)
    p = c.admin_port
    add = {"name": "x", "address": "127.0.0.1:9"}
    for host in ("rebind.test:%d" % p, "rebind.test", "127.0.0.1.rebind.test",
                 "localhost.rebind.test:%d" % p, "localhost.:%d" % p,
                 "127.0.0.1 :%d" % p, "[::1]x:%d" % p, "127.0.0.1:8x",
                 "[::1"):
        for method, path, body in (("GET", "/api/pools", None),
                                   ("GET", "/", None),
                                   ("GET", "/metrics", None),
                                   ("POST", "/api/pools/web/members", add),
                                   ("DELETE", "/api/pools/web/members/web-1",
                                    None)):
            st, j, _ = c.api.call(method, path, body,
                                  headers={"Host": host})
            assert st == 421, (host, method, path, st, j)
            assert "Host" in j["error"], j
    assert sorted(c.api.members("web")) == ["web-1", "web-2"]
    # the admin address and the loopback names, on any port (an ssh
    # tunnel from another port reaches the API under its own port)
    for host in ("127.0.0.1:%d" % p, "localhost:%d" % p, "LocalHost:%d" % p,
                 "[::1]:%d" % p, "localhost:9999", "127.0.0.1"):
        st, j, _ = c.api.get("/api/pools", headers={"Host": host})
        assert st == 200, (host, st, j)
    # no name at all is no browser's (HTTP/1.0 health checkers send none)
    st, j, _ = c.api.get("/api/pools", headers={"Host": ""})
    assert st == 200, j
    with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert recv_all(s).startswith(b"HTTP/1.1 200"), "HTTP/1.0, no Host"


def test_with_a_token_any_host_is_served(cluster):
    """A token in force is what authenticates (a browser never adds a
    Bearer header by itself), and a non-loopback API is reached through
    names chashd cannot know: the Host is not checked then."""
    c = cluster(2, token="s3cret")
    st, j, _ = c.api.get("/api/pools", headers={"Host": "lb1.example:8404"})
    assert st == 200, j
    st, j, _ = c.api.get("/api/pools", token="",
                         headers={"Host": "lb1.example:8404"})
    assert st == 401, j


def test_foreign_origins_are_refused(cluster):
    c = cluster(2)
    p = c.admin_port
    add = {"name": "x", "address": "127.0.0.1:9"}
    for origin in ("http://rebind.test", "null", "http://127.0.0.1:%d" % (
            p + 1), "https://127.0.0.1:%d" % p, "http://localhost:%d" % p,
            "http://127.0.0.1", "http://127.0.0.1:%d/" % p):
        for method, path, body in (("POST", "/api/pools/web/members", add),
                                   ("PATCH", "/api/pools/web/members/web-1",
                                    {"weight": 5}),
                                   ("DELETE", "/api/pools/web/members/web-1",
                                    None),
                                   ("GET", "/api/pools", None)):
            st, j, _ = c.api.call(method, path, body,
                                  headers={"Origin": origin})
            assert st == 403, (origin, method, st, j)
            assert "Origin" in j["error"] and origin in j["error"], j
    after = c.api.members("web")
    assert sorted(after) == ["web-1", "web-2"]
    assert after["web-1"]["weight"] == 1
    # the API's own origin (the dashboard's) is served
    st, j, _ = c.api.call("POST", "/api/pools/web/members?dry_run=1", add,
                          headers={"Origin": "http://127.0.0.1:%d" % p})
    assert st == 200 and j["dry_run"] is True, j
    st, j, _ = c.api.get("/api/pools", headers={
        "Origin": "http://LOCALHOST:%d" % p, "Host": "localhost:%d" % p})
    assert st == 200, j


def test_a_body_must_be_json(cluster):
    """A browser sends text/plain, form-urlencoded and multipart bodies to
    any origin without asking: a change needs application/json."""
    c = cluster(2)
    add = json.dumps({"name": "x", "address": "127.0.0.1:9"})
    for ctype in (None, "text/plain", "text/plain;charset=UTF-8",
                  "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=b", "application/jsonx",
                  "text/json", ""):
        for method, path, body in (
                ("POST", "/api/pools/web/members", add),
                ("POST", "/api/pools/web/members", ""),
                ("PATCH", "/api/pools/web/members/web-1", '{"weight": 4}'),
                ("DELETE", "/api/pools/web/members/web-1", "{}")):
            st, j, _ = c.api.call(method, path, body,
                                  headers={"Content-Type": ctype})
            assert st == 415, (ctype, method, st, j)
            assert "application/json" in j["error"], j
    after = c.api.members("web")
    assert sorted(after) == ["web-1", "web-2"]
    assert after["web-1"]["weight"] == 1
    for ctype in ("application/json", "application/json; charset=utf-8",
                  "Application/JSON"):
        st, j, _ = c.api.call("POST", "/api/pools/web/members?dry_run=1",
                              add, headers={"Content-Type": ctype})
        assert st == 200 and j["dry_run"] is True, (ctype, st, j)
    # a DELETE without a body needs no Content-Type (`curl -X DELETE`,
    # `chash ctl remove`): a browser cannot send one to another origin
    st, j, _ = c.api.call("DELETE", "/api/pools/web/members/web-2?dry_run=1",
                          headers={"Content-Type": None})
    assert st == 200 and j["dry_run"] is True, j


def test_a_refused_body_is_not_read_as_the_next_request(cluster):
    """A body refused before or after it is read must not be parsed as a
    request of its own on a kept-alive connection."""
    c = cluster(2)
    inner = ("POST /api/pools/web/members HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
             "Content-Type: application/json\r\nContent-Length: 46\r\n\r\n"
             '{"name": "smuggled", "address": "127.0.0.1:9"}'
             % c.admin_port).encode()
    for extra, status in ((b"Content-Type: text/plain\r\n", b"415"),
                          (b"Content-Type: application/json\r\n"
                           b"Origin: http://rebind.test\r\n", b"403"),
                          (b"Content-Type: application/json\r\n"
                           b"Host: rebind.test\r\n", b"421")):
        host = b"" if b"Host" in extra else \
            b"Host: 127.0.0.1:%d\r\n" % c.admin_port
        head = (b"POST /api/pools/web/members HTTP/1.1\r\n" + host + extra +
                b"Content-Length: %d\r\n\r\n" % len(inner))
        # kept alive after a body that was read: 2 s for an answer to the
        # smuggled request to show, as a bound
        s = socket.create_connection(("127.0.0.1", c.admin_port), timeout=2)
        with s:
            s.sendall(head + inner)
            data = recv_all(s)
        assert data.startswith(b"HTTP/1.1 " + status), data
        assert b"HTTP/1.1 201" not in data, data
    assert sorted(c.api.members("web")) == ["web-1", "web-2"]


# ---- descriptors running out ----------------------------------------------

def fd_numbers(pid):
    return {int(n) for n in os.listdir("/proc/%d/fd" % pid)}


def thread_cpu_seconds(pid, tid):
    with open("/proc/%d/task/%d/stat" % (pid, tid)) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_running_out_of_descriptors_does_not_spin_the_control_thread(
        chashd, backends):
    """With no descriptor left, accept() on the admin listener fails while
    the listener stays readable: the control thread must pause it, not
    retry in a loop, and serve the waiting clients once descriptors come
    back."""
    bs = backends(1)
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport, workers=1) + pool_yaml("web", port, bs),
               port)
    wait_for(lambda: can_connect(aport), what="admin API")
    pid = d.proc.pid
    used = fd_numbers(pid)
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    # room for 10 clients (a client and a member side each) and whatever
    # holes the readiness probes left below; 20 clients fill it all
    limit = max(used) + 1 + 20
    clients, admins = [], []
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
    try:
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5)
                   for _ in range(20)]
        # every descriptor number below the limit is taken (the kernel
        # gives the lowest free one): the next accept fails
        wait_for(lambda: set(range(limit)) <= fd_numbers(pid), timeout=10,
                 what="chashd to run out of descriptors")
        req = ("GET /api/pools/web HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               "Connection: close\r\n\r\n" % aport).encode()
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", aport), timeout=5)
            s.sendall(req)
            admins.append(s)
        # a measurement window, not a wait for something to happen: the
        # admin clients are in the listener's backlog from here on
        t0 = thread_cpu_seconds(pid, pid)
        time.sleep(2)
        used_cpu = thread_cpu_seconds(pid, pid) - t0
        assert used_cpu < 0.3, "control thread used %.2fs of 2s" % used_cpu
        d.wait_log(r"admin: accept: Too many open files")
        assert d.proc.poll() is None
        # descriptors come back: every waiting admin client is answered
        for s in clients:
            s.close()
        clients = []
        for s in admins:
            s.settimeout(10)
            data = recv_all(s)
            assert data.startswith(b"HTTP/1.1 200"), data[:200]
            assert b'"name": "web"' in data
    finally:
        for s in clients + admins:
            s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert Api(aport).pool("web")["name"] == "web"
    d.wait_log(r"admin: accepting again")


# ---- control bytes in names -----------------------------------------------

def test_control_bytes_in_a_url_are_refused(cluster):
    """libmicrohttpd decodes the URL into a C string: %00 cut
    "web-1%00junk" to "web-1", and a lookup key or a flag the same way.
    A URL that decodes to a control byte is a 400 naming it."""
    c = cluster(2)
    c.api.ok("PATCH", "/api/pools/web/members/web-2", {"weight": 2})
    before, file_before = c.api.pool("web"), state_bytes(c)
    add = {"name": "x", "address": "127.0.0.1:9"}
    for esc in ("%00", "%0a", "%0D", "%09", "%1f", "%7f", "%7F"):
        shown = "%%%02X" % int(esc[1:], 16)
        for method, path, body in (
                ("GET", "/api/pools/web/members/web-1%sjunk", None),
                ("PATCH", "/api/pools/web/members/web-1%sjunk",
                 {"weight": 3}),
                ("DELETE", "/api/pools/web/members/web-1%s", None),
                ("GET", "/api/pools/web%s", None),
                ("GET", "/api/pools/web%s/members", None),
                ("POST", "/api/pools/web%sx/members", add),
                ("GET", "/api/pools/web/lookup?key=127.0.0.5%sx", None),
                ("GET", "/api/pools/web/lookup?key%s=127.0.0.5", None),
                ("PATCH", "/api/pools/web/members/web-1?dry_run=0%s1",
                 {"weight": 3}),
                ("GET", "/api/pools/web/ring?segments=8%s0", None)):
            st, j, _ = c.api.call(method, path % esc, body)
            assert st == 400, (method, path % esc, st, j)
            assert shown in j["error"] and "control" in j["error"], j
    after = c.api.pool("web")
    assert after["checksum"] == before["checksum"]
    assert [(m["name"], m["weight"]) for m in after["members"]] == \
        [("web-1", 1), ("web-2", 2)]
    assert state_bytes(c) == file_before
    assert c.api.ok("GET", "/api/changes")["total"] == 1
    # printable escapes still decode
    assert c.api.ok("GET", "/api/pools/web/members/web%2D1")["name"] == \
        "web-1"


# ---- slow and endless bodies, slow clients ----------------------------------

def post_chunked(port, size, timeout):
    """POST a chunked body of <size> bytes in 16 KiB chunks; the answer's
    status line (b"" when the connection closed without one)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    with s:
        s.sendall(b"POST /api/pools/web/members HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"4000\r\n" + b"a" * 0x4000 + b"\r\n"
        try:
            for _ in range(size // 0x4000):
                s.sendall(chunk)
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # refused before the end: the answer is read below
        data = recv_all(s)
    return data.split(b"\r\n", 1)[0]


def test_an_oversized_chunked_body_is_refused_at_once(cluster):
    """A chunked body announces no size. libmicrohttpd was run only on
    events and a 100 ms tick, and its epoll is edge-triggered: a 1 MB body
    took 5 s to read before its 413, 10 MB took 53 s. Now the 413 comes
    as fast as the bytes (each wait bounded by the socket's 2 s timeout);
    past 1 MB the rest is not read at all."""
    c = cluster(2)
    assert post_chunked(c.admin_port, 1 << 20, 2) == \
        b"HTTP/1.1 413 Content Too Large"
    # 10 MB: answered (or cut) after about 1 MB; never read to the end
    t0 = time.monotonic()
    post_chunked(c.admin_port, 10 << 20, 2)
    assert time.monotonic() - t0 < 2
    # a body under the limit, chunked, is still served
    st, j, _ = c.api.call("POST", "/api/pools/web/members?dry_run=1",
                          json.dumps({"address": "127.0.0.1:9",
                                      "pad": " " * 60000}))
    assert st == 400 and "unknown field \"pad\"" in j["error"], j
    assert sorted(c.api.members("web")) == ["web-1", "web-2"]
    assert c.d.proc.poll() is None


def test_slow_clients_cannot_lock_the_api(cluster):
    """70 clients that send a header line every second never finish their
    request; libmicrohttpd's timeout is an idle one, so they kept their
    connections, and at 64 nobody else got in. A request must arrive
    within 10 s, and within 1 s while the connection limit is reached:
    a normal request is answered within seconds."""
    c = cluster(2)
    socks = []
    for i in range(70):
        s = socket.create_connection(("127.0.0.1", c.admin_port), timeout=2)
        s.sendall(b"GET /api/pools HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    stop = threading.Event()

    def drip():
        while not stop.is_set():
            for s in socks:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            stop.wait(1)
    t = threading.Thread(target=drip)
    t.start()
    try:
        time.sleep(1.5)
        t0 = time.monotonic()
        st, j, _ = c.api.get("/api/pools")  # its own timeout bounds it
        waited = time.monotonic() - t0
        assert st == 200 and j["pools"][0]["name"] == "web"
        assert waited < 5, waited
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()
    assert c.d.proc.poll() is None

# test_admin_adversarial.py -- hostile input to chashd's admin plane: URLs
# that decode to bytes that are not UTF-8, dry-run flags that must never
# apply a change, the bearer scheme as clients write it, member addresses
# without a port, stalled clients next to the health checks, and `chash
# ctl` against servers that trickle or never answer.
# SPDX-License-Identifier: BSD-2-Clause
import json
import os
import socket
import subprocess
import threading
import time

from admin_util import CHASH, Api, admin_global, cluster  # noqa: F401
from conftest import can_connect, free_port, pool_yaml, wait_for


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
    try:
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", c.admin_port))
            if i % 2:
                s.sendall(b"GET /api/state HTTP/1.1\r\nHost: x\r\n")
            else:
                s.sendall(b"POST /api/pools/web/members HTTP/1.1\r\n"
                          b"Host: x\r\nContent-Length: 1000\r\n\r\n{\"ad")
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

# test_health_http.py -- health_check type http on a tcp pool in front of
# HTTP members: a stub of ours (this file run as a script) answers each
# request as its switch file says (200, 503, garbage, a close, silence)
# and notes what it was asked. A member answering 503 goes down after
# `fall` checks and comes back after `rise` once it answers 200, clients
# failing over meanwhile; garbage, a close, silence and a status other
# than expect_status take it down too; the reason, as GET
# /api/pools/<pool> shows it, names what came.
# SPDX-License-Identifier: BSD-2-Clause
import json
import os
import socket
import sys
import threading

import pytest

from admin_util import Api, admin_global
from conftest import (can_connect, client_ip, fetch, free_port, pool_yaml,
                      wait_for)

CHECK = ("{ type: http, path: /healthz, host: example.com, interval: 100ms, "
         "timeout: 400ms, rise: 2, fall: 3%s }")


# ---- the stub member ---------------------------------------------------------

def stub_main(port, name, state_dir):
    """Serve HTTP on 127.0.0.1:<port> until killed. Each request's head is
    read (bounded), then answered as <state_dir>/<name>.mode says, and
    noted in <name>.requests as one JSON line."""
    mode_file = os.path.join(state_dir, name + ".mode")
    log_file = os.path.join(state_dir, name + ".requests")
    lock = threading.Lock()

    def answer(c):
        with c:
            c.settimeout(5)
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < 8192:
                    chunk = c.recv(4096)
                    if not chunk:
                        return
                    head += chunk
            except OSError:
                return
            try:
                with open(mode_file) as f:
                    mode = f.read().strip() or "200"
            except OSError:
                mode = "200"
            with lock, open(log_file, "a") as f:
                f.write(json.dumps({"mode": mode,
                                    "head": head.decode("latin-1")}) + "\n")
            body = (name + "\n").encode()
            try:
                if mode == "200":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n%s"
                              % (len(body), body))
                elif mode == "503":
                    c.sendall(b"HTTP/1.1 503 Service Unavailable\r\n"
                              b"Content-Length: 0\r\nConnection: close"
                              b"\r\n\r\n")
                elif mode == "garbage":
                    c.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
                elif mode == "silent":
                    # hold the connection until the checker gives up
                    while c.recv(4096):
                        pass
                # "close": nothing at all
            except OSError:
                pass

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(128)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=answer, args=(c,), daemon=True).start()


class Stub:
    def __init__(self, procs, tmp, name):
        self.name = name
        self.tmp = tmp
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port
        procs.start([sys.executable, os.path.abspath(__file__), "stub",
                     str(self.port), name, tmp], "stub-%s.log" % name)
        wait_for(lambda: can_connect(self.port), what="stub " + name)

    def set(self, mode):
        path = os.path.join(self.tmp, self.name + ".mode")
        with open(path + ".new", "w") as f:
            f.write(mode)
        os.replace(path + ".new", path)

    def checks(self):
        """The health checks received so far: (mode answered, head)."""
        try:
            with open(os.path.join(self.tmp, self.name + ".requests")) as f:
                rows = [json.loads(line) for line in f]
        except FileNotFoundError:
            return []
        return [(r["mode"], r["head"]) for r in rows
                if "User-Agent: chashd-health" in r["head"]]


def member(api, name):
    st, j, _ = api.get("/api/pools/web")
    assert st == 200, j
    for m in j["members"]:
        if m["name"] == name:
            return m
    raise AssertionError("no member %s in %r" % (name, j["members"]))


def start(procs, tmp_path, chashd, n=2, extra="", modes=()):
    """<n> stubs web-1.. (answering as <modes> says, else 200) behind
    pool web with the http check (+ <extra> keys), the admin API on."""
    tmp = str(tmp_path)
    stubs = [Stub(procs, tmp, "web-%d" % (i + 1)) for i in range(n)]
    for stub, mode in zip(stubs, modes):
        stub.set(mode)
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport) +
               pool_yaml("web", port, stubs, health_check=CHECK % extra),
               port)
    wait_for(lambda: can_connect(aport), what="admin API")
    return d, port, Api(aport), stubs


def health_is(api, name, health):
    return member(api, name)["health"] == health


# ---- tests ------------------------------------------------------------------

def test_503_down_after_fall_up_after_rise(procs, tmp_path, chashd):
    d, port, api, (s1, s2) = start(procs, tmp_path, chashd)
    # the check's request, as the member sees it
    wait_for(lambda: len(s1.checks()) >= 2, what="checks of web-1")
    head = s1.checks()[0][1]
    assert head == ("GET /healthz HTTP/1.1\r\nHost: example.com\r\n"
                    "User-Agent: chashd-health\r\nConnection: close\r\n\r\n")
    assert health_is(api, "web-1", "up")

    s1.set("503")
    wait_for(lambda: health_is(api, "web-1", "down"), timeout=10,
             what="web-1 down")
    m = member(api, "web-1")
    assert m["state"] == "down"
    assert m["reason"] == ("3 checks failed (last: http status 503, "
                           "expected 2xx or 3xx)")
    # `fall` is 3: at least three checks were answered 503 by then
    assert sum(1 for mode, _ in s1.checks() if mode == "503") >= 3
    assert health_is(api, "web-2", "up")
    # every client now reaches web-2, whoever owns it
    assert {fetch(port, client_ip(i)) for i in range(30)} == {"web-2"}

    n200 = len(s1.checks())
    s1.set("200")
    wait_for(lambda: health_is(api, "web-1", "up"), timeout=10,
             what="web-1 up again")
    m = member(api, "web-1")
    assert m["reason"] == "2 checks passed"
    assert sum(1 for mode, _ in s1.checks()[n200:] if mode == "200") >= 2
    assert "web-1" in {fetch(port, client_ip(i)) for i in range(30)}


@pytest.mark.parametrize("mode,extra,reason", [
    ("garbage", "",
     'not an HTTP status line: "SSH-2.0-OpenSSH_..."'),
    ("close", "", "closed before answering"),
    ("silent", "", "timed out"),
    ("200", ", expect_status: 204", "http status 200, expected 204"),
])
def test_bad_answers_take_a_member_down(procs, tmp_path, chashd, mode, extra,
                                        reason):
    d, port, api, (s1, s2) = start(procs, tmp_path, chashd, extra=extra)
    # (expect_status 204: web-1 answers 200 as it is, and fails)
    if mode != "200":
        s1.set(mode)
    wait_for(lambda: health_is(api, "web-1", "down"), timeout=10,
             what="web-1 down")
    assert member(api, "web-1")["reason"] == \
        "3 checks failed (last: %s)" % reason
    assert d.proc.poll() is None


def test_expect_status_exact(procs, tmp_path, chashd):
    # expect_status 503: the member that answers 503 is the healthy one
    d, port, api, (s1, s2) = start(procs, tmp_path, chashd,
                                   extra=", expect_status: 503",
                                   modes=("503",))
    wait_for(lambda: health_is(api, "web-2", "down"), timeout=10,
             what="web-2 down")
    assert member(api, "web-2")["reason"] == \
        "3 checks failed (last: http status 200, expected 503)"
    # web-1 answers 503 to as many checks (`fall` of them would take it
    # down) and stays up
    wait_for(lambda: sum(1 for mode, _ in s1.checks() if mode == "503") >= 4,
             what="four checks of web-1")
    m = member(api, "web-1")
    assert (m["health"], m.get("reason")) == ("up", None)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "stub":
    stub_main(int(sys.argv[2]), sys.argv[3], sys.argv[4])

# test_faults_process.py -- faults of the whole daemon under load: storms
# of SIGHUP while tcp and http clients are served (reloads that add and
# remove members and a listener), and admin API changes in a loop under
# http keep-alive traffic. Each: no client request fails that the policy
# would not fail, the last config (or change) is the one in force, the
# descriptors come back to the baseline and RSS stays within a bound
# across rounds, and SIGTERM still ends the daemon cleanly.
# (Descriptor exhaustion: test_chashd_lifecycle.py, test_chashd_stress.py,
# test_admin_adversarial.py, and test_faults_http.py for the http mode.)
# SPDX-License-Identifier: BSD-2-Clause
import os
import signal
import socket
import threading
import time

from admin_util import Api, admin_global
from base_util import Backend, can_connect, client_ip, fetch, free_port, \
    wait_for
from fault_util import Stub, assert_flat, connections_to, http_complete, \
    http_reply, read_outcome

RSS_KIB = 4096        # RSS growth allowed over the rounds of one test


def http_text(port, members, extra=""):
    lines = ["http:", "  listen: 127.0.0.1:%d" % port, "  mode: http",
             "  hash_key: [header:X-User-Id, source_ip]", "  timeout: 2s",
             "  retries: 1",
             # one idle connection per worker and member: after any round
             # of load each holds exactly that, and a count of descriptors
             # can be compared with the baseline
             "  backend_keepalive: 1", "  servers:"]
    lines += ["    - %s:%s %s" % (m.addr, w, m.name) for m, w in members]
    return "\n".join(lines) + "\n" + extra


def tcp_text(port, members, name="web"):
    lines = ["%s:" % name, "  listen: 127.0.0.1:%d" % port, "  mode: tcp",
             "  servers:"]
    lines += ["    - %s:%s %s" % (m.addr, w, m.name) for m, w in members]
    return "\n".join(lines) + "\n"


class KeepAliveLoad:
    """Threads that send requests on keep-alive http connections, ten on
    each (and HTTP/1.0 requests through a tcp pool) until stopped; every
    answer
    that is not a 200 from a member, or that takes over 3 s, is kept in
    <bad>."""

    def __init__(self, http_port, tcp_port=None, threads=3):
        self.http_port, self.tcp_port = http_port, tcp_port
        self.stop = threading.Event()
        self.bad, self.served = [], [0]
        self.names = set()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,))
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def note(self, ok, what, name=None):
        with self.lock:
            if ok:
                self.served[0] += 1
                if name:
                    self.names.add(name)
            else:
                self.bad.append(what)

    def run(self, i):
        s, k = None, 0
        deadline = time.monotonic() + 30        # bounded whatever happens
        while not self.stop.is_set() and time.monotonic() < deadline:
            k += 1
            if s is None:
                s = socket.create_connection(("127.0.0.1", self.http_port),
                                             timeout=3)
            s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-User-Id: u%d-%d\r\n"
                      b"\r\n" % (i, k % 50))
            out = read_outcome(s, 3, stop_at=http_complete)
            body = out.data.partition(b"\r\n\r\n")[2].decode()
            self.note(out.how == "done" and out.status() == 200, out, body)
            # a new connection every 10 requests: each worker gets some,
            # and ends a round with an idle connection to every member
            if out.how != "done" or k % 10 == 0:
                s.close()
                s = None
            if self.tcp_port:
                name = fetch(self.tcp_port, client_ip(i * 50 + k % 50))
                self.note(name is not None, ("tcp", k), name)
        if s is not None:
            s.close()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in self.threads)


def write_atomically(path, text):
    """The config as a reload reads it: whole, never half written."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def reloads(d):
    return d.log().count("reload: done")


def test_sighup_storm_under_load(procs, chashd):
    """40 SIGHUPs 5 ms apart, the file switching between two configs (a
    member out and one in, weights, a pool's listener gone and back),
    while keep-alive http clients and tcp clients are served: no request
    fails, no reload is refused (a pool added back right after its
    removal found its own listener still open, "another process already
    listens there", and the file's text was not what ran), the file's
    last text is what serves, no connection to a member out of the ring
    is left (idle http ones stayed), and the daemon's descriptors and
    memory come back."""
    bs = [Backend(procs, "web-%d" % (i + 1)) for i in range(4)]
    hs = [Stub(procs, "h%d" % (i + 1), reply=http_reply("h%d" % (i + 1)))
          for i in range(4)]
    port, hport, xport = free_port(), free_port(), free_port()
    head = "global:\n  admin: off\n  workers: 2\n"
    a = (head + tcp_text(port, [(b, 1) for b in bs[:3]]) +
         http_text(hport, [(h, 1) for h in hs[:3]]) +
         tcp_text(xport, [(bs[0], 1)], name="extra"))
    b = (head + tcp_text(port, [(bs[1], 2), (bs[2], 1), (bs[3], 1)]) +
         http_text(hport, [(hs[1], 1), (hs[2], 3), (hs[3], 1)]))
    d = chashd(a, port)
    d.reload(b)

    def settle():
        """Wait until the reloads stop (none for 0.5 s)."""
        n, t = reloads(d), time.monotonic()
        deadline = t + 10
        while time.monotonic() - t < 0.5:
            assert time.monotonic() < deadline, "reloads never stopped"
            time.sleep(0.05)
            if reloads(d) != n:
                n, t = reloads(d), time.monotonic()

    def round_(i):
        load = KeepAliveLoad(hport, port)
        try:
            wait_for(lambda: load.served[0] > 20, what="load to start")
            before = reloads(d)
            for k in range(40):
                write_atomically(d.conf, a if k % 2 == 0 else b)
                d.proc.send_signal(signal.SIGHUP)
                time.sleep(0.005)
            settle()
            # (signals that come during a reload make one more, so a
            # storm is not 40 reloads when they are slower than 5 ms)
            assert reloads(d) > before
            served = load.served[0]
            wait_for(lambda: load.served[0] > served + 20,
                     what="load after the storm")
        finally:
            load.finish()
        assert not load.bad, load.bad[:5]
        # the last text (b) serves: web-1 and h1 are out, extra is gone
        names = {fetch(port, client_ip(500 + k)) for k in range(60)}
        assert names == {"web-2", "web-3", "web-4"}, names
        assert not can_connect(xport)
        # no connection to a member out of the ring is left (h1's idle
        # ones stayed open for the life of the worker)
        wait_for(lambda: connections_to(d.proc.pid, hs[0].port) == 0 and
                 connections_to(d.proc.pid, bs[0].port) == 0, timeout=3,
                 what="the connections to h1 and web-1 to close")

    assert_flat(d.proc, round_, 2, RSS_KIB)
    assert "reload refused" not in d.log()
    assert d.proc.poll() is None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=10) == 0


def test_admin_changes_under_load(procs, chashd):
    """Members added, reweighted, drained, put back and removed through
    the admin API in a loop while keep-alive http clients are served:
    every request gets a 200 from a member, the pool ends as it began,
    and descriptors and memory come back."""
    hs = [Stub(procs, "h%d" % (i + 1), reply=http_reply("h%d" % (i + 1)))
          for i in range(4)]
    hport, aport = free_port(), free_port()
    d = chashd(admin_global(aport) + http_text(hport, [(h, 1)
                                                        for h in hs[:3]]),
               hport)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    pool = "/api/pools/http/members"

    def round_(i):
        load = KeepAliveLoad(hport)
        try:
            wait_for(lambda: load.served[0] > 20, what="load to start")
            for _ in range(3):
                api.ok("POST", pool, {"name": "h4", "address": hs[3].addr})
                api.ok("PATCH", pool + "/h4", {"weight": 3})
                api.ok("PATCH", pool + "/h1", {"state": "drain"})
                api.ok("PATCH", pool + "/h2", {"weight": 2})
                api.ok("PATCH", pool + "/h1", {"state": "up"})
                api.ok("PATCH", pool + "/h2", {"weight": 1})
                api.ok("DELETE", pool + "/h4")
            served = load.served[0]
            wait_for(lambda: load.served[0] > served + 20,
                     what="load after the changes")
        finally:
            load.finish()
        assert not load.bad, load.bad[:5]
        assert "h4" in load.names        # the added member was used
        members = api.members("http")
        assert sorted(members) == ["h1", "h2", "h3"], members
        assert all(m["weight"] == 1 for m in members.values()), members
        # no connection to the removed member is left (its idle ones
        # stayed open for the life of the worker, one set per removal)
        wait_for(lambda: connections_to(d.proc.pid, hs[3].port) == 0,
                 timeout=3, what="the connections to h4 to close")

    assert_flat(d.proc, round_, 2, RSS_KIB)
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=10) == 0

# test_chashd_passive.py -- what a tcp health check (a connect) cannot see,
# passive failures catch: a member that accepts and resets at once, and a
# stopped member whose kernel still accepts connections into its backlog.
# And one chashd per listen address: a second one refuses to start.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import signal
import time
import subprocess
import sys

from admin_util import Api, admin_global
from base_util import (CHASHD, GLOBAL, can_connect, client_ip, ejected_at_2,
                       fetch, free_port, lookup_config, pool_yaml, wait_for)

N = 60

# A real process that accepts every connection and resets it at once
# (SO_LINGER 0): TCP connects to it succeed, every client gets nothing.
RESETTER = r"""
import socket, struct, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    try:
        c.recv(1024)
    except OSError:
        pass
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
"""


class Resetter:
    def __init__(self, procs, name):
        self.name = name
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port
        procs.start([sys.executable, "-c", RESETTER, str(self.port)],
                    "resetter.log")
        wait_for(lambda: can_connect(self.port), what="the resetter")


def test_a_member_that_accepts_and_resets_is_ejected(backends, chashd, procs):
    good = backends(2)
    bad = Resetter(procs, "bad")
    port = free_port()
    d = chashd(GLOBAL + pool_yaml(
        "web", port, good + [bad], on_failure="remap",
        auto_eject_hosts="true", server_failure_limit=2,
        server_retry_timeout="30s",
        # the active check connects fine: it cannot see the resets
        health_check="{ type: tcp, interval: 100ms, timeout: 100ms, "
                     "rise: 1, fall: 1 }"), port)
    clients = [client_ip(i) for i in range(N)]
    prefs = lookup_config(d.conf, "web", clients, replicas=2)
    victims = [c for c in clients if prefs[c][0] == "bad"]
    assert len(victims) >= 3
    # the first two clients of it get nothing: it resets them
    assert fetch(port, victims[0]) is None
    assert fetch(port, victims[1]) is None
    d.wait_log(ejected_at_2("bad"))
    # ejected (remap): its clients are answered by their next member
    for c in victims:
        assert fetch(port, c) == prefs[c][1], c


def test_a_stopped_member_is_ejected_through_idle_timeout(backends, chashd):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml(
        "web", port, bs, on_failure="remap", idle_timeout="300ms",
        auto_eject_hosts="true", server_failure_limit=2,
        server_retry_timeout="30s"), port)
    clients = [client_ip(i) for i in range(N)]
    prefs = lookup_config(d.conf, "web", clients, replicas=2)
    victims = [c for c in clients if prefs[c][0] == "web-2"]
    assert len(victims) >= 3
    bs[1].proc.send_signal(signal.SIGSTOP)
    try:
        # connects succeed (the kernel's backlog), nothing answers: each
        # client is closed at idle_timeout, and that counts
        assert fetch(port, victims[0], timeout=3) is None
        assert fetch(port, victims[1], timeout=3) is None
        d.wait_log(ejected_at_2("web-2"))
        for c in victims[2:]:
            assert fetch(port, c) == prefs[c][1], c
    finally:
        bs[1].proc.send_signal(signal.SIGCONT)


def test_early_closes_are_counted_per_member(backends, chashd, procs):
    good = backends(1)
    bad = Resetter(procs, "bad")
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport) + pool_yaml(
        "web", port, good + [bad], on_failure="failover",
        auto_eject_hosts="false"), port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    clients = [client_ip(i) for i in range(N)]
    prefs = lookup_config(d.conf, "web", clients)
    victims = [c for c in clients if prefs[c][0] == "bad"][:5]
    for c in victims:
        assert fetch(port, c) is None
    m = wait_for(lambda: api.members("web")["bad"]["early_closes"] ==
                 len(victims) and api.members("web"),
                 what="early_closes to count the resets")
    assert m["web-1"]["early_closes"] == 0
    st, text, _ = api.get("/metrics")
    assert re.search(r'chashd_member_early_closes_total\{pool="web",'
                     r'member="bad"\} %d' % len(victims), text), text


def test_a_second_chashd_on_the_same_address_refuses_to_start(backends,
                                                              chashd,
                                                              tmp_path):
    bs = backends(1)
    port = free_port()
    text = GLOBAL + pool_yaml("web", port, bs)
    chashd(text, port)
    other = os.path.join(str(tmp_path), "second.yml")
    with open(other, "w") as f:
        f.write(text)
    p = subprocess.run([CHASHD, "-c", other], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode != 0
    assert re.search(r"cannot listen on 127\.0\.0\.1:%d: another process "
                     r"already listens there" % port, p.stderr), p.stderr


def test_connect_failures_are_logged_at_info_and_rate_limited(backends,
                                                              chashd):
    bs = backends(2)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, on_failure="failover",
                                  auto_eject_hosts="false", retries=1),
               port, args=("--log-level", "info"))
    clients = [client_ip(i) for i in range(200)]
    prefs = lookup_config(d.conf, "web", clients)
    victims = [c for c in clients if prefs[c][0] == "web-1"]
    assert len(victims) > 40
    bs[0].stop()
    for c in victims:
        assert fetch(port, c) == "web-2"     # failed over, served
    time.sleep(1.1)                            # the next second...
    assert fetch(port, victims[0]) == "web-2"  # ...says what it held back
    log = d.log()
    lines = re.findall(r"\[info\] pool web: connect to web-1 \S+ failed", log)
    # every failure is not a line: at most 10 a second
    assert 1 <= len(lines) < len(victims), len(lines)
    assert re.search(r"\(\d+ similar messages suppressed\)", log), log

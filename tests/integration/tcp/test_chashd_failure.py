# test_chashd_failure.py -- what chashd does when a member dies: failover
# moves only the dead member's clients (to their next preference) and
# brings them back; remap takes it out of the ring; error refuses its
# clients; passive ejection after connect failures, and re-admission only
# after a probe succeeds.
# SPDX-License-Identifier: BSD-2-Clause
import re

import pytest
import time

from base_util import (GLOBAL, client_ip, ejected_at_2, fetch, free_port,
                       lookup_config, pool_yaml)

CHECKS = "{ type: tcp, interval: 100ms, timeout: 100ms, rise: 2, fall: 2 }"
N = 150


def fetch_all(port, clients):
    return {c: fetch(port, c) for c in clients}


def run_member_death(backends, chashd, policy):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, on_failure=policy,
                                  health_check=CHECKS, retries=2,
                                  connect_timeout="300ms"), port)
    clients = [client_ip(i) for i in range(N)]
    before = fetch_all(port, clients)
    prefs = lookup_config(d.conf, "web", clients, replicas=2)
    assert before == {c: prefs[c][0] for c in clients}
    victim = bs[1]
    assert list(before.values()).count(victim.name) > 0
    victim.stop()
    line = d.wait_log(r"member web-2 \S+ up -> down: 2 checks failed")
    return d, bs, port, clients, before, prefs, victim, line


def test_failover_moves_only_the_dead_members_clients_and_back(backends,
                                                               chashd):
    d, bs, port, clients, before, prefs, victim, _ = run_member_death(
        backends, chashd, "failover")
    # The ring keeps its points with failover, but new connections of the
    # dead member's keys go elsewhere: the log's "moved" counts them (one
    # meaning of moved everywhere: the share whose member changes), and
    # says where they go.
    m = re.search(r"web-2 .* up -> down: .*share ([0-9.]+) -> ([0-9.]+); "
                  r"moved ([0-9.]+) of the keys .*fail over", d.log())
    assert m, d.log()
    old_share, new_share, moved = map(float, m.groups())
    assert new_share == 0 and old_share > 0.15
    assert moved == pytest.approx(old_share, abs=1e-6)
    during = fetch_all(port, clients)
    for c in clients:
        if before[c] == victim.name:
            assert during[c] == prefs[c][1], c   # its next preference
        else:
            assert during[c] == before[c], c     # untouched
    victim.start()
    d.wait_log(r"member web-2 \S+ down -> up")
    assert fetch_all(port, clients) == before


def test_remap_takes_the_dead_member_out_of_the_ring(backends, chashd):
    d, bs, port, clients, before, prefs, victim, _ = run_member_death(
        backends, chashd, "remap")
    m = re.search(r"web-2 .* up -> down: .*share ([0-9.]+) -> ([0-9.]+); "
                  r"moved ([0-9.]+)", d.log())
    assert m, d.log()
    old_share, new_share, moved = map(float, m.groups())
    assert new_share == 0 and old_share > 0.15
    assert abs(moved - old_share) < 1e-6      # exactly its keys moved
    during = fetch_all(port, clients)
    for c in clients:
        if before[c] == victim.name:
            assert during[c] == prefs[c][1], c
        else:
            assert during[c] == before[c], c
    victim.start()
    d.wait_log(r"member web-2 \S+ down -> up")
    assert fetch_all(port, clients) == before


def test_error_policy_refuses_the_dead_members_clients(backends, chashd):
    d, bs, port, clients, before, prefs, victim, _ = run_member_death(
        backends, chashd, "error")
    during = fetch_all(port, clients)
    for c in clients:
        if before[c] == victim.name:
            assert during[c] is None, c           # closed, not misrouted
        else:
            assert during[c] == before[c], c


def test_error_policy_refuses_even_before_the_checks_notice(backends,
                                                            chashd):
    bs = backends(2)
    port = free_port()
    chashd(GLOBAL + pool_yaml("web", port, bs, on_failure="error",
                              retries=2), port)
    clients = [client_ip(i) for i in range(40)]
    before = fetch_all(port, clients)
    bs[0].stop()
    during = fetch_all(port, clients)
    for c in clients:
        assert during[c] == (None if before[c] == "web-1" else before[c])


def test_passive_ejection_and_probe_before_readmit(backends, chashd):
    bs = backends(3)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, on_failure="failover",
                                  retries=2, auto_eject_hosts="true",
                                  server_failure_limit=2,
                                  server_retry_timeout="300ms"), port)
    clients = [client_ip(i) for i in range(N)]
    before = fetch_all(port, clients)
    prefs = lookup_config(d.conf, "web", clients, replicas=2)
    victim = bs[0]
    mine = [c for c in clients if before[c] == victim.name]
    assert len(mine) >= 2
    victim.stop()
    # its clients are answered by their next member (connect failed,
    # retried), and two failures in a row eject it
    during = fetch_all(port, clients)
    for c in clients:
        assert during[c] == (prefs[c][1] if c in mine else before[c]), c
    d.wait_log(ejected_at_2("web-1"))
    # past the retry timeout the member is probed, not re-admitted blindly
    d.wait_log(r"member web-1 still failing", timeout=3)
    time.sleep(0.4)
    assert not re.search(r"web-1 .* ejected -> up", d.log())
    failures = len(re.findall(r"connect to web-1 .* failed", d.log()))
    assert fetch_all(port, mine) == {c: prefs[c][1] for c in mine}
    # ejected: new clients did not even try it
    assert len(re.findall(r"connect to web-1 .* failed", d.log())) == failures
    victim.start()
    d.wait_log(r"member web-1 \S+ ejected -> up: probe after ejection "
               r"succeeded", timeout=3)
    assert fetch_all(port, clients) == before


def test_connect_timeout_tries_the_next_member(backends, chashd):
    # A member whose accept queue is full drops SYNs: connects to it hang
    # until connect_timeout, then the next member answers.
    import socket
    bs = backends(2)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    fill = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(hole.getsockname())
            except BlockingIOError:
                pass
            fill.append(s)
        hole_addr = "127.0.0.1:%d" % hole.getsockname()[1]
        port = free_port()
        text = GLOBAL + pool_yaml("web", port, bs, connect_timeout="200ms",
                                  retries=1, auto_eject_hosts="false")
        text += "    - %s:1 hole\n" % hole_addr
        d = chashd(text, port)
        clients = [client_ip(i) for i in range(60)]
        prefs = lookup_config(d.conf, "web", clients, replicas=2)
        mine = [c for c in clients if prefs[c][0] == "hole"][:3]
        assert mine
        for c in mine:
            t0 = time.monotonic()
            assert fetch(port, c) == prefs[c][1]
            assert 0.15 < time.monotonic() - t0 < 2
        assert re.search(r"connect to hole \S+ failed: timed out", d.log())
    finally:
        for s in fill:
            s.close()
        hole.close()

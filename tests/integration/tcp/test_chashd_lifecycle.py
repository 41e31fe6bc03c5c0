# test_chashd_lifecycle.py -- reload (diffed, established connections
# kept, a broken file refused), drain on SIGTERM, half-close,
# back-pressure with a slow reader, idle timeout, client_connections.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import signal
import socket
import time

from base_util import (GLOBAL, KeepAlive, can_connect, client_ip, connect_from,
                       fetch, flood, free_port, lookup_config, pool_yaml,
                       recv_all, wait_for)


def test_reload_keeps_established_connections(backends, chashd):
    bs = backends(4)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs[:3]), port)
    clients = [client_ip(i) for i in range(100)]
    src = next(c for c in clients if fetch(port, c) == "web-2")
    ka = KeepAlive(port, src)
    assert ka.ask() == "web-2"
    # web-2 leaves, web-4 joins (no slow start): applied to new connections
    d.reload(GLOBAL + pool_yaml("web", port, [bs[0], bs[2], bs[3]]))
    assert re.search(r"pool web: reloaded: 3 members \(\+1 -1, 0 reweighted\)"
                     r"; moved ([0-9.]+)", d.log())
    assert ka.ask() == "web-2"          # the old connection is untouched
    want = lookup_config(d.conf, "web", clients)
    got = {c: fetch(port, c) for c in clients}
    assert got == {c: want[c][0] for c in clients}
    assert "web-2" not in got.values()
    assert ka.ask() == "web-2"
    ka.close()


def test_reload_refuses_a_broken_file(backends, chashd):
    bs = backends(2)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port)
    clients = [client_ip(i) for i in range(40)]
    before = {c: fetch(port, c) for c in clients}
    d.reload(GLOBAL + pool_yaml("web", port, bs) + "  retries: many\n")
    assert re.search(r"reload refused, the running config stays: "
                     + re.escape(d.conf) + r":\d+: ", d.log()), d.log()
    assert d.proc.poll() is None
    assert {c: fetch(port, c) for c in clients} == before


def test_reload_refuses_a_deeply_nested_file_at_once(backends, chashd):
    # 60,000 levels of '[' kept libyaml 10 s on the control thread (no
    # health check, ramp or admin request meanwhile); now the reload is
    # refused at level 65 and chashd serves on, its admin API answering
    bs = backends(2)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port)
    before = fetch(port)
    d.reload(GLOBAL + pool_yaml("web", port, bs) + "  hash_tag: " +
             "[" * 60000 + "]" * 60000 + "\n")
    assert re.search(r"reload refused, the running config stays: "
                     + re.escape(d.conf) + r":\d+: nested deeper than 64 "
                     r"levels", d.log()), d.log()[-2000:]
    assert d.proc.poll() is None
    assert fetch(port) == before


def test_reload_refuses_what_it_cannot_run(backends, chashd):
    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port)
    d.reload(GLOBAL + pool_yaml("web", port, bs, distribution="modula"))
    # the same check and message as `chashd -t` and a start: file:line
    assert re.search(r"reload refused, the running config stays: "
                     + re.escape(d.conf) + r":4: pool 'web': distribution "
                     r"modula is not supported by chashd yet", d.log()), \
        d.log()
    assert fetch(port) == "web-1"


def test_reload_adds_removes_and_moves_listeners(backends, chashd):
    bs = backends(2)
    p1, p2, p3 = free_port(), free_port(), free_port()
    d = chashd(GLOBAL + pool_yaml("a", p1, bs[:1]) +
               pool_yaml("b", p2, bs[1:]), p1)
    assert fetch(p2) == "web-2"
    # pool b moves to p3, pool c appears on p2's old neighbour... and a goes
    d.reload(GLOBAL + pool_yaml("b", p3, bs[1:]) +
             pool_yaml("c", p1, bs[:1]))
    wait_for(lambda: not can_connect(p2), what="old listener closed")
    assert fetch(p3) == "web-2"
    assert fetch(p1) == "web-1"
    # a listen address another process holds refuses the reload whole
    with socket.socket() as hog:
        hog.bind(("127.0.0.1", 0))
        hog.listen()
        busy = hog.getsockname()[1]
        d.reload(GLOBAL + pool_yaml("b", busy, bs[1:]) +
                 pool_yaml("c", p1, bs[:1]))
        assert re.search(r"reload refused.*pool b: cannot listen on "
                         r"127\.0\.0\.1:%d" % busy, d.log())
    assert fetch(p3) == "web-2"


def test_sigterm_drains_then_exits(backends, chashd):
    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs,
                                  shutdown_timeout="5s"), port)
    ka = KeepAlive(port)
    assert ka.ask() == "web-1"
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: not can_connect(port), what="listener closed")
    assert ka.ask() == "web-1"          # still served while draining
    assert d.proc.poll() is None
    ka.close()
    assert d.proc.wait(timeout=3) == 0
    assert "drained: all connections closed" in d.log()


def test_sigterm_drain_is_bounded_by_shutdown_timeout(backends, chashd):
    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs,
                                  shutdown_timeout="300ms"), port)
    ka = KeepAlive(port)
    assert ka.ask() == "web-1"
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=3) == 0
    assert time.monotonic() - t0 < 2
    assert "shutdown_timeout reached: closing 1 connections" in d.log()
    ka.close()


def test_half_close_passes_fin_and_keeps_the_other_way(backends, chashd):
    bs = backends(1, echo=True)
    port = free_port()
    chashd(GLOBAL + pool_yaml("web", port, bs), port)
    s = connect_from("127.0.0.5", port, timeout=5)
    payload = os.urandom(300 * 1024)
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)          # our FIN reaches the echo server...
    got = recv_all(s, limit=len(payload) + 1)
    s.close()
    assert got == payload               # ...which still answers in full


def test_back_pressure_bounds_memory(backends, chashd):
    # the user-space splice's bound: nothing beyond the sockets' buffers
    # (the kernel's fast path holds more before its sender stops:
    # test_fastpath.py)
    bs = backends(1, echo=True)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, fast_path="off"), port)
    rss0 = d.rss_kib()
    s = connect_from("127.0.0.5", port, timeout=5)
    # we never read: the echo server's writes block, so it stops reading,
    # so chashd must stop reading us, so our sends must stall
    sent, how = flood(s, 256 * 1024 * 1024, seconds=10)
    assert how == "stalled", "sender never blocked (%d bytes): %s" % (sent,
                                                                      how)
    assert sent < 64 * 1024 * 1024      # kernel buffers, not unbounded
    assert d.rss_kib() - rss0 < 8 * 1024, (rss0, d.rss_kib())
    # and nothing was lost: read back everything, in order
    s.setblocking(True)
    s.settimeout(5)
    s.shutdown(socket.SHUT_WR)
    got = 0
    while True:
        data = s.recv(1 << 20)
        if not data:
            break
        got += len(data)
    s.close()
    assert got == sent


def test_idle_timeout_closes_idle_connections(backends, chashd):
    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, idle_timeout="300ms"),
               port)
    ka = KeepAlive(port)
    assert ka.ask() == "web-1"
    ka.sock.settimeout(3)
    t0 = time.monotonic()
    assert ka.sock.recv(1) == b""      # closed by chashd, not by us
    assert 0.2 < time.monotonic() - t0 < 2
    ka.close()
    assert re.search(r"idle for 300ms: closed", d.log())


def test_client_connections_limit(backends, chashd):
    bs = backends(1)
    port = free_port()
    chashd(GLOBAL + pool_yaml("web", port, bs, client_connections=2), port)
    def open_one():
        # a connection of an earlier check may still hold a slot briefly
        ka = KeepAlive(port)
        try:
            if ka.ask() == "web-1":
                return ka
        except OSError:
            pass
        ka.close()
        return None

    a = wait_for(open_one, what="a first slot")
    b = wait_for(open_one, what="a second slot")
    assert fetch(port) is None          # the third is closed at once
    a.close()
    wait_for(lambda: fetch(port) == "web-1", what="a slot after a close")
    b.close()


def test_out_of_descriptors_pauses_accepting_without_spinning(backends,
                                                              chashd):
    import resource

    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port,
               preexec_fn=low_nofile)
    held = []
    try:
        # more pairs than 48 descriptors allow: the rest wait in the backlog
        for _ in range(30):
            ka = KeepAlive(port)
            ka.sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            held.append(ka)
        # the last descriptor goes to accept() or to the member's socket(),
        # depending on how many the daemon holds: either pauses accepting
        d.wait_log(r"(accept: Too many open files; pausing|"
                   r"socket: Too many open files; client waits)")
        cpu0 = d.cpu_seconds()
        time.sleep(1)
        assert d.cpu_seconds() - cpu0 < 0.3      # paused, not spinning
        # free the first half: every waiting client is then served
        for ka in held[:15]:
            ka.close()
        for ka in held[15:]:
            ka.sock.settimeout(5)
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = ka.sock.recv(4096)
                assert chunk, "closed without an answer"
                got += chunk
            assert got.startswith(b"HTTP/1.1 200")
    finally:
        for ka in held:
            ka.close()
    assert d.proc.poll() is None


def test_reloads_under_traffic_lose_no_request(backends, chashd):
    import threading

    bs = backends(4)
    port, port2 = free_port(), free_port()
    confs = [
        GLOBAL + pool_yaml("web", port, bs[:3]),
        GLOBAL + pool_yaml("web", port, bs[1:], slow_start="300ms") +
        pool_yaml("extra", port2, bs[:1]),
        GLOBAL + pool_yaml("web", port, [bs[0], bs[3]], on_failure="remap",
                           balance_factor=1.5),
    ]
    d = chashd(confs[0], port)
    results, stop = [], threading.Event()

    def traffic(i):
        n = 0
        while not stop.is_set():
            results.append(fetch(port, client_ip(i * 50 + n % 50)))
            n += 1

    threads = [threading.Thread(target=traffic, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        for k in range(9):
            d.reload(confs[(k + 1) % 3])
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert d.proc.poll() is None
    assert len(results) > 50
    assert None not in results
    assert d.log().count("reload: done") == 9

# test_faults_tcp.py -- faults of a tcp pool's members and clients, each
# with what the client sees (its bytes, then a close within the configured
# timeout plus a margin, never a hang), chashd still serving the other
# members' clients, and its descriptors back to the baseline (RSS flat)
# across repeated rounds: a member SIGSTOPped mid-stream, one that accepts
# and never reads, a slow one, one that resets mid-reply, refused
# connects, silent clients (slowloris), members flapping.
# SPDX-License-Identifier: BSD-2-Clause
import socket
import threading
import time

from base_util import (GLOBAL, Backend, client_ip, connect_from, free_port,
                       lookup_config, pool_yaml)
from fault_util import (RefusedPort, Stub, assert_flat, read_outcome,
                        stopped)

IDLE_S = 0.4          # idle_timeout of every pool here
MARGIN = 1.0          # scheduling slack on top of a configured timeout
RSS_KIB = 2048        # RSS growth allowed over the rounds of one test


def clients_of(d, names, n=80):
    """{member name: [client addresses whose first member it is]}."""
    ips = [client_ip(i) for i in range(n)]
    owner = lookup_config(d.conf, "web", ips)
    out = {name: [ip for ip in ips if owner[ip][0] == name]
           for name in names}
    for name, ips_of in out.items():
        assert ips_of, "no client of %s among %d" % (name, n)
    return out


def echo_ok(port, src):
    """A normal exchange through an echo member: bytes sent come back."""
    with connect_from(src, port, timeout=3) as s:
        s.sendall(b"ping\n")
        s.shutdown(socket.SHUT_WR)
        got = read_outcome(s, 3)
    assert got.data == b"ping\n" and got.how == "eof", got


def start_pool(chashd, members, **opts):
    port = free_port()
    opts.setdefault("idle_timeout", "%dms" % (IDLE_S * 1000))
    d = chashd(GLOBAL + pool_yaml("web", port, members, **opts), port)
    return d, port


def test_member_stopped_mid_stream_is_cut_at_idle_timeout(procs, chashd):
    """An established pair whose member is SIGSTOPped: the kernel still
    takes the client's bytes, nothing comes back; chashd closes the pair
    at idle_timeout, and the other member's clients are served meanwhile."""
    victim = Backend(procs, "web-1", echo=True)
    other = Backend(procs, "web-2", echo=True)
    d, port = start_pool(chashd, [victim, other])
    who = clients_of(d, ["web-1", "web-2"])

    def round_(i):
        s = connect_from(who["web-1"][0], port, timeout=3)
        with s:
            s.sendall(b"one\n")
            assert read_outcome(s, 2, stop_at=lambda b: b == b"one\n").how \
                == "done"
            with stopped(victim.proc.pid):
                s.sendall(b"two\n")
                got = read_outcome(s, IDLE_S + 3)
                echo_ok(port, who["web-2"][0])
        assert got.how in ("eof", "reset") and got.data == b"", got
        assert IDLE_S * 0.8 < got.elapsed < IDLE_S + MARGIN, got

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: echo_ok(port, who["web-1"][1 % len(
                    who["web-1"])]))
    assert "idle for 400ms: closed" in d.log()


def test_member_that_never_reads_is_cut_at_idle_timeout(procs, chashd):
    """A member that accepts and never reads: the client's bytes fill the
    buffers on the way, then its sends stall (back-pressure, no memory
    growth); nothing moves for idle_timeout and the client is closed."""
    hole = Stub(procs, "web-1", behaviour="blackhole", rcvbuf=4096)
    other = Backend(procs, "web-2", echo=True)
    d, port = start_pool(chashd, [hole, other])
    who = clients_of(d, ["web-1", "web-2"])
    chunk = b"x" * 65536

    def round_(i):
        s = connect_from(who["web-1"][i % len(who["web-1"])], port)
        with s:
            s.setblocking(False)
            sent, t0 = 0, time.monotonic()
            # send until the way is full (bounded: 8 MB or 3 s)
            while sent < 8 << 20 and time.monotonic() - t0 < 3:
                try:
                    sent += s.send(chunk)
                except BlockingIOError:
                    break
                except OSError:
                    break
            assert sent < 8 << 20, "8 MB went into a member that never reads"
            got = read_outcome(s, IDLE_S + 3)
        assert got.how in ("eof", "reset") and got.data == b"", got
        assert got.elapsed < IDLE_S + MARGIN, got

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: echo_ok(port, who["web-2"][0]))
    assert hole.accepted() >= 3


def test_slow_member_is_served_while_bytes_move_and_cut_when_they_stop(
        procs, chashd):
    """A member that answers at 200 bytes/s, in pieces every 100 ms: the
    pair is never idle (idle_timeout 400 ms), the client gets every byte
    though the answer takes twice that; one that sends a byte every 500 ms
    is closed at idle_timeout after its first byte."""
    reply = bytes(range(48, 48 + 60)) * 3            # 180 bytes
    slow = Stub(procs, "web-1", reply=reply, until=b"\n", rate=200)
    slower = Stub(procs, "web-2", reply=reply, until=b"\n", rate=2)
    d, port = start_pool(chashd, [slow, slower])
    who = clients_of(d, ["web-1", "web-2"])

    def round_(i):
        with connect_from(who["web-1"][0], port) as s:
            s.sendall(b"go\n")
            got = read_outcome(s, 5, stop_at=lambda b: len(b) >= len(reply))
        assert got.how == "done" and got.data == reply, got
        assert got.elapsed > 2 * IDLE_S, got         # it was really slow
        with connect_from(who["web-2"][0], port) as s:
            s.sendall(b"go\n")
            got = read_outcome(s, IDLE_S + 3)
        assert got.how in ("eof", "reset") and got.data == reply[:1], got
        assert got.elapsed < IDLE_S + MARGIN, got

    assert_flat(d.proc, round_, 2, RSS_KIB)


def test_reset_mid_reply_reaches_the_client_as_a_close(procs, chashd):
    """A member that sends 100 bytes of its answer and resets: the client
    gets those 100 bytes, then its connection ends at once (no wait for a
    timeout: idle_timeout is off here)."""
    reply = b"r" * 100 + b"s" * 900
    rst = Stub(procs, "web-1", behaviour="reset", reply=reply, cut=100,
               until=b"\n")
    other = Backend(procs, "web-2", echo=True)
    d, port = start_pool(chashd, [rst, other], idle_timeout="0")
    who = clients_of(d, ["web-1", "web-2"])

    def round_(i):
        for ip in who["web-1"][:5]:
            with connect_from(ip, port) as s:
                s.sendall(b"go\n")
                got = read_outcome(s, 3)
            assert got.how in ("eof", "reset"), got
            assert got.data == reply[:100], got
            assert got.elapsed < MARGIN, got

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: echo_ok(port, who["web-2"][0]))


def test_refused_connects_close_the_client_at_once(procs, chashd):
    """Every member refuses (nobody listens): with failover and retries
    each client is closed, not held, and nothing is left open; a member
    that listens again is used at once."""
    with RefusedPort() as r1, RefusedPort() as r2:
        text = GLOBAL + ("web:\n  listen: 127.0.0.1:%d\n  mode: tcp\n"
                         "  on_failure: failover\n  retries: 2\n"
                         "  connect_timeout: 500ms\n  servers:\n"
                         "    - %s:1 gone-1\n    - %s:1 gone-2\n")
        port = free_port()
        d = chashd(text % (port, r1.addr, r2.addr), port)

        def round_(i):
            for k in range(20):
                with connect_from(client_ip(k), port) as s:
                    s.sendall(b"hello\n")
                    got = read_outcome(s, 3)
                assert got.how in ("eof", "reset") and got.data == b"", got
                assert got.elapsed < 0.5, got       # no connect_timeout

        assert_flat(d.proc, round_, 2, RSS_KIB)
        assert "connect to gone-" in d.log()


def test_silent_clients_do_not_lock_out_others_and_are_closed(
        backends, chashd):
    """150 clients connect and send nothing (slowloris on a tcp port):
    a normal client is served meanwhile, and every silent one is closed
    at idle_timeout (with the member connection chashd opened for it)."""
    bs = backends(2, echo=True)
    d, port = start_pool(chashd, bs)
    who = clients_of(d, ["web-1", "web-2"])

    def round_(i):
        silent = []
        try:
            for k in range(150):
                silent.append(connect_from(client_ip(200 + k), port))
            echo_ok(port, who["web-1"][0])
            t0 = time.monotonic()
            for s in silent:
                got = read_outcome(s, IDLE_S + 3, start=t0)
                assert got.how in ("eof", "reset") and got.data == b"", got
                assert got.elapsed < IDLE_S + MARGIN, got
        finally:
            for s in silent:
                s.close()

    assert_flat(d.proc, round_, 2, RSS_KIB)


def test_members_flapping_under_traffic(procs, chashd):
    """A member killed and restarted every 300 ms while clients connect:
    the other member's clients never fail, the flapping member's clients
    get their answer or a prompt close (never a hang past
    connect_timeout), and nothing is left open."""
    flappy = Backend(procs, "web-1", echo=True)
    steady = Backend(procs, "web-2", echo=True)
    d, port = start_pool(chashd, [flappy, steady], on_failure="failover",
                         connect_timeout="300ms", retries=1,
                         health_check="{ type: tcp, interval: 100ms, "
                                      "timeout: 100ms, rise: 1, fall: 1 }")
    who = clients_of(d, ["web-1", "web-2"])
    stop = threading.Event()
    errors, served, slow = [], [0], []

    def one(ip, must):
        t0 = time.monotonic()
        try:
            with connect_from(ip, port, timeout=3) as s:
                s.sendall(b"ping\n")
                s.shutdown(socket.SHUT_WR)
                got = read_outcome(s, 3)
        except OSError as e:
            got = None
            if must:
                errors.append((ip, repr(e)))
        took = time.monotonic() - t0
        if got is not None:
            if got.data == b"ping\n":
                served[0] += 1
            elif must:
                errors.append((ip, got))
        if took > 0.3 + MARGIN:
            slow.append((ip, took, got))

    def traffic():
        k = 0
        while not stop.is_set():
            one(who["web-2"][k % len(who["web-2"])], True)
            one(who["web-1"][k % len(who["web-1"])], False)
            k += 1

    def round_(i):
        stop.clear()
        t = threading.Thread(target=traffic)
        t.start()
        try:
            for _ in range(2):
                flappy.proc.kill()
                flappy.proc.wait(timeout=5)
                time.sleep(0.3)
                flappy.start()
                time.sleep(0.3)
        finally:
            stop.set()
            t.join(timeout=10)
        assert not t.is_alive()

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: echo_ok(port, who["web-1"][0]))
    assert not errors, errors[:5]
    assert not slow, slow[:5]
    assert served[0] > 20
    assert "up -> down" in d.log() and "down -> up" in d.log()

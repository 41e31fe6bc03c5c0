# test_chashd_stress.py -- a bounded stress run: many 127.x.y.z clients,
# keep-alive pairs, connect/close storms and resets while reloads (weights,
# on_failure, members, slow start) and admin API member churn run at the
# same time. No request fails that the policy would not fail, no
# established connection is dropped, the daemon's descriptors come back to
# where they were, and SIGTERM ends it with status 0 and, in a sanitizer
# build, no report (ASan's leak check runs at that exit).
# SPDX-License-Identifier: BSD-2-Clause
import os
import random
import re
import signal
import socket
import struct
import sys
import threading
import time

import pytest

from admin_util import Api, admin_global
from base_util import (GLOBAL, KeepAlive, Backend, can_connect, client_ip,
                       connect_from, fetch, free_port, pool_yaml, wait_for)

RUN_S = 6.0


def pool_text(port, live, dead_port, weights, on_failure, extra=()):
    lines = ["web:", "  listen: 127.0.0.1:%d" % port, "  mode: tcp",
             "  on_failure: %s" % on_failure, "  retries: 3",
             "  connect_timeout: 300ms", "  balance_factor: 1.25",
             "  slow_start: 300ms", "  servers:"]
    for b in live:
        lines.append("    - %s:%d %s" % (b.addr, weights.get(b.name, 1),
                                         b.name))
    # a member nobody listens on: every client it owns fails over
    lines.append("    - 127.0.0.1:%d:1 dead-1" % dead_port)
    return "\n".join(list(lines) + list(extra)) + "\n"


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def sanitizer_reports(text):
    return re.findall(r"(ERROR: AddressSanitizer|ERROR: LeakSanitizer|"
                      r"WARNING: ThreadSanitizer|runtime error:)", text)


def test_traffic_through_reloads_and_member_churn(procs, chashd, tmp_path):
    bs = [Backend(procs, "web-%d" % (i + 1)) for i in range(6)]
    port, aport, dead_port = free_port(), free_port(), free_port()
    xport, xport2 = free_port(), free_port()
    head = admin_global(aport)
    # pool extra: present on xport, then gone, then back on another port
    extra = ("extra:\n  listen: 127.0.0.1:%d\n  mode: tcp\n  servers:\n"
             "    - %s:1 web-6\n")
    v1 = (head + pool_text(port, bs[:4], dead_port, {}, "failover") +
          extra % (xport, bs[5].addr))
    # web-4 leaves, web-5 joins (ramping), weights and policy change
    v2 = head + pool_text(port, bs[:3] + [bs[4]], dead_port,
                          {"web-1": 3, "web-3": 2}, "remap")
    v3 = (head + pool_text(port, bs[:4], dead_port, {}, "failover") +
          extra % (xport2, bs[5].addr))
    d = chashd(v1, port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    base_fds = nfds(d.proc.pid)

    stop = threading.Event()
    failures, served, errors = [], [0], []
    lock = threading.Lock()

    # established keep-alive pairs, one per client address: each must keep
    # its member whatever happens to the ring
    keep = []
    for i in range(24):
        ka = KeepAlive(port, client_ip(1000 + i), timeout=5)
        keep.append((ka, ka.ask()))
    # and pairs of a pool that reloads remove (and add back elsewhere)
    for i in range(4):
        ka = KeepAlive(xport, client_ip(1100 + i), timeout=5)
        keep.append((ka, ka.ask()))
    assert all(name is not None for _, name in keep)

    def guard(fn):
        def run(*args):
            try:
                fn(*args)
            except Exception as e:  # reported by the main thread
                errors.append("%s: %r" % (fn.__name__, e))
                stop.set()
        return run

    def requests(seed):
        rnd = random.Random(seed)
        while not stop.is_set():
            src = client_ip(rnd.randrange(600))
            got = fetch(port, src, timeout=5)
            with lock:
                if got is None or not got.startswith("web-"):
                    failures.append((src, got))
                else:
                    served[0] += 1

    def storm():
        # connect and go at once: FIN, reset, or FIN after a partial
        # request; thousands of times
        n = 0
        while not stop.is_set() and n < 3000:
            s = socket.socket()
            s.bind((client_ip(n % 700), 0))
            try:
                s.connect(("127.0.0.1", port))
                if n % 3 == 0:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
                elif n % 3 == 1:
                    s.sendall(b"GET / HT")
                    s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            s.close()
            n += 1

    def churn():
        admin_ok = 0
        n = 0
        while not stop.is_set():
            n += 1
            d.reload((v1, v2, v3, v2)[n % 4])
            for method, path, body in (
                    ("PATCH", "/api/pools/web/members/web-2",
                     {"state": "drain"}),
                    ("POST", "/api/pools/web/members",
                     {"name": "web-6", "address": bs[5].addr}),
                    ("PATCH", "/api/pools/web/members/web-3",
                     {"weight": 4}),
                    ("PATCH", "/api/pools/web/members/web-2",
                     {"state": "up"}),
                    ("DELETE", "/api/pools/web/members/web-6", None),
                    ("PATCH", "/api/pools/web/members/web-3",
                     {"weight": 1})):
                st, _, _ = api.raw(method, path, body)
                assert st < 500, (method, path, st)
                admin_ok += st < 300
                time.sleep(0.02)
        assert admin_ok > 0

    threads = [threading.Thread(target=guard(requests), args=(i,))
               for i in range(4)]
    threads += [threading.Thread(target=guard(storm)),
                threading.Thread(target=guard(churn))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + RUN_S
    try:
        while time.monotonic() < deadline and not stop.is_set():
            for ka, name in keep:
                assert ka.ask() == name
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors
    assert d.proc.poll() is None, d.log()[-3000:]
    assert served[0] > 100
    assert not failures, failures[:10]
    # the pairs opened before any of it still reach their member
    for ka, name in keep:
        assert ka.ask() == name
        ka.close()
    assert "moved" in d.log()
    # every connection gone: no live count left behind on a member or
    # the pool (bounded loads compare them) ...
    def counts():
        pool = api.pool("web")
        return [pool["active"]] + [m["active"] for m in pool["members"]]
    wait_for(lambda: not any(counts()), timeout=10,
             what="live counts back to 0 (now %r)" % counts())
    # ... and chashd holds the descriptors it started with
    wait_for(lambda: nfds(d.proc.pid) <= base_fds, timeout=10,
             what="chashd's descriptors back to %d (now %d)"
             % (base_fds, nfds(d.proc.pid)))
    d.proc.send_signal(signal.SIGTERM)
    rc = d.proc.wait(timeout=20)
    log = d.log()
    assert rc == 0, log[-3000:]
    assert not sanitizer_reports(log), log[-6000:]


@pytest.mark.parametrize("nofile", [47, 48])
def test_out_of_descriptors_drops_no_waiting_client(backends, chashd,
                                                    nofile):
    # Either parity of the descriptors left: with one left, accept() takes
    # it and the backend's socket() has none; that client must wait like
    # the others rather than be closed without an answer.
    import resource

    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs), port,
               preexec_fn=low_nofile)
    held = []
    try:
        for i in range(30):
            ka = KeepAlive(port, client_ip(i))
            ka.sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            held.append(ka)
        d.wait_log(r"Too many open files")
        # free the first ten: every other client is then served
        for ka in held[:10]:
            ka.close()
        for ka in held[10:]:
            ka.sock.settimeout(5)
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = ka.sock.recv(4096)
                assert chunk, ("closed without an answer", d.log()[-2000:])
                got += chunk
            assert got.startswith(b"HTTP/1.1 200")
            ka.close()
    finally:
        for ka in held:
            ka.close()
    assert d.proc.poll() is None


def test_out_of_descriptors_is_not_a_failed_health_check(backends, chashd):
    # The active check's socket() finds no descriptor because chashd's own
    # clients hold them all: that says nothing about the member, which
    # must stay up (it would otherwise go down under load, and its clients
    # be refused once descriptors are back).
    import resource

    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    bs = backends(1)
    port = free_port()
    d = chashd(GLOBAL + pool_yaml(
        "web", port, bs, on_failure="error",
        health_check="{ type: tcp, interval: 50ms, timeout: 100ms, "
        "rise: 1, fall: 2 }"), port, preexec_fn=low_nofile)
    held = []
    try:
        for i in range(30):
            ka = KeepAlive(port, client_ip(i))
            ka.sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            held.append(ka)
        d.wait_log(r"Too many open files")
        time.sleep(0.5)                  # ten check intervals
    finally:
        for ka in held:
            ka.close()
    assert "up -> down" not in d.log(), d.log()[-3000:]
    assert fetch(port) == "web-1"


def test_slow_transfer_is_not_idle(backends, chashd):
    # A backend that reads slowly keeps chashd from reading the client for
    # longer than idle_timeout at a time (back-pressure), yet bytes move
    # the whole time: writes are traffic too, the pair must not be closed.
    bs = backends(1, echo=True, extra=["--read-delay", "100",
                                       "--recv-buf", "4096"])
    port = free_port()
    d = chashd(GLOBAL + pool_yaml("web", port, bs, idle_timeout="300ms"),
               port)
    s = connect_from("127.0.0.5", port, timeout=10)
    payload = os.urandom(96 * 1024)
    got = []

    def reader():
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                break
            if not data:
                break
            got.append(data)

    t = threading.Thread(target=reader)
    t.start()
    t0 = time.monotonic()
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    t.join(timeout=60)
    s.close()
    total = sum(len(g) for g in got)
    assert total == len(payload), (total, time.monotonic() - t0,
                                   d.log()[-1500:])
    assert b"".join(got) == payload


# A backend that answers after a few bytes of the request and resets the
# connection right behind its answer (SO_LINGER 0), as a server refusing
# an upload does.
ANSWER_AND_RESET = r"""
import socket, struct, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(64)
while True:
    c, _ = l.accept()
    c.recv(10)
    c.sendall(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
"""


def test_an_answer_right_before_a_reset_reaches_the_client(procs, chashd):
    bport = free_port()
    procs.start([sys.executable, "-c", ANSWER_AND_RESET, str(bport)],
                "answer-reset.log")
    wait_for(lambda: can_connect(bport), what="the resetting backend")
    port = free_port()
    d = chashd(GLOBAL + "web:\n  listen: 127.0.0.1:%d\n  mode: tcp\n"
               "  servers:\n    - 127.0.0.1:%d:1 rst-1\n" % (port, bport),
               port)
    answered = 0
    for i in range(20):
        s = connect_from(client_ip(i), port, timeout=5)
        s.sendall(b"POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" +
                  b"x" * 1000)
        time.sleep(0.05)                 # the answer and the reset are in
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        s.close()
        answered += data.startswith(b"HTTP/1.1 413")
    # without a proxy every answer is read (the client's kernel has it
    # before the reset): so through chashd
    assert answered == 20, d.log()[-2000:]
    assert d.proc.poll() is None

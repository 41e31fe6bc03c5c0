# test_fastpath.py -- `fast_path: sockmap`: once a client and its member
# have spoken, the kernel moves their bytes (chashd reads none of them),
# and what users see stays right: the byte counters, half-close both
# ways, a client that sends all before it reads, a sender held back when
# the other side stops reading (and a pair closed when a client floods and
# reads nothing), idle_timeout that counts the kernel's bytes as activity,
# and the config. Skipped, with the reason chashd gives, where the kernel
# refuses the program.
# SPDX-License-Identifier: BSD-2-Clause
import hashlib
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from admin_util import parse_metrics
from base_util import (CHASHD, connect_from, flood, free_port, pool_yaml,
                       recv_all, wait_for)

MB = 1024 * 1024


def fast_path_state(tmp_path):
    """What `chashd -t` says of a tcp pool's fast path here."""
    conf = os.path.join(str(tmp_path), "probe.yml")
    with open(conf, "w") as f:
        f.write("global:\n  admin: off\nweb:\n  listen: 127.0.0.1:%d\n"
                "  mode: tcp\n  fast_path: sockmap\n  servers:\n"
                "    - 127.0.0.1:9:1 a\n" % free_port())
    p = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    return re.search(r"fast_path (.*)$", p.stdout.splitlines()[0]).group(1)


@pytest.fixture
def sockmap(tmp_path):
    state = fast_path_state(tmp_path)
    if state != "sockmap":
        pytest.skip("the kernel's fast path is not available here: " + state)


def rchar(pid):
    """Bytes process <pid> has read through read(2)-like calls (sockets
    included): what chashd moved itself."""
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar")


def metrics(aport):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % aport,
                                timeout=5) as r:
        _, _, samples = parse_metrics(r.read().decode())
    return {(n, tuple(sorted(lb.items()))): v for n, lb, v in samples}


def start(chashd, backends, fast_path, aport=None, **opts):
    bs = backends(1, echo=True)
    port = free_port()
    glob = "global:\n  admin: %s\n  workers: 2\n" % (
        "127.0.0.1:%d" % aport if aport else "off")
    d = chashd(glob + pool_yaml("web", port, bs, fast_path=fast_path,
                                **opts), port)
    return d, port


def to_member(chashd, port, mport):
    """chashd on <port>, a sockmap tcp pool whose one member is the
    test's own server on <mport>."""
    return chashd("global:\n  admin: off\n  workers: 2\nweb:\n"
                  "  listen: 127.0.0.1:%d\n  mode: tcp\n"
                  "  fast_path: sockmap\n  servers:\n"
                  "    - 127.0.0.1:%d:1 m\n" % (port, mport), port)


def spoken(port, src="127.0.0.9"):
    """A client that has had one exchange with the echo member (the pair
    enters the fast path after it)."""
    s = connect_from(src, port, timeout=5)
    s.sendall(b"hi")
    assert s.recv(2) == b"hi"
    time.sleep(0.05)
    return s


@pytest.mark.parametrize("fast_path", ["sockmap", "off"])
def test_the_kernel_moves_the_bytes_and_counts_them(request, backends,
                                                    chashd, fast_path):
    # request and answer, 2000 times (8 KiB each way, as a chatty
    # protocol would): with the fast path chashd reads none of it, with
    # the splice all of it; the counters are exact either way. (A bulk
    # transfer is another matter: the kernel's redirect, one work item per
    # segment, falls behind a fast sender, its queue reaches the bound and
    # the direction goes to chashd -- doc/benchmarks.md.)
    if fast_path == "sockmap":
        request.getfixturevalue("sockmap")
    aport = free_port()
    d, port = start(chashd, backends, fast_path, aport)
    s = spoken(port)
    r0 = rchar(d.proc.pid)
    n, size = 2000, 8 * 1024
    for i in range(n):
        msg = os.urandom(size)
        s.sendall(msg)
        assert recv_exact(s, size) == msg
    moved_by_chashd = rchar(d.proc.pid) - r0
    print("%s: chashd itself read %.1f of %.1f MB" %
          (fast_path, moved_by_chashd / MB, 2 * n * size / MB))
    if fast_path == "sockmap":
        assert moved_by_chashd < n * size // 10, moved_by_chashd
    else:
        assert moved_by_chashd >= 2 * n * size, moved_by_chashd
    s.close()
    want = 2 + n * size
    keys = {
        ("chashd_pool_received_bytes_total", (("pool", "web"),)): want,
        ("chashd_pool_sent_bytes_total", (("pool", "web"),)): want,
        ("chashd_member_sent_bytes_total",
         (("member", "web-1"), ("pool", "web"))): want,
        ("chashd_member_received_bytes_total",
         (("member", "web-1"), ("pool", "web"))): want,
    }
    wait_for(lambda: all(metrics(aport).get(k) == v for k, v in keys.items()),
             timeout=5, what="byte counters of %d each way" % want)


def test_half_close_in_the_kernel_client_first(sockmap, backends, chashd):
    # the client's FIN reaches the member after its last byte, and the
    # member's whole answer still comes back (the echo passes the FIN back
    # once all is echoed)
    d, port = start(chashd, backends, "sockmap")
    for _ in range(20):
        s = spoken(port)
        payload = os.urandom(1 * MB + 7)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        got = recv_all(s, limit=len(payload) + 1)
        s.close()
        assert got == payload


def test_half_close_in_the_kernel_member_first(sockmap, chashd):
    # a member that says its last word and half-closes: the client gets
    # every byte, then EOF, and may still send; the member gets it all
    port = free_port()
    got = {}

    def talk(c):
        c.sendall(b"hello")
        buf = b""
        while not buf.endswith(b"go\n"):
            buf += c.recv(100)
        c.sendall(b"x" * (3 * MB) + b"bye")
        c.shutdown(socket.SHUT_WR)
        got["after"], _ = read_to_eof(c)

    mport, lst, t = member_once(talk, timeout=10)
    try:
        to_member(chashd, port, mport)
        s = greeted(port, b"hello", timeout=10)
        time.sleep(0.05)                 # the pair enters the fast path
        s.sendall(b"go\n")
        answer = recv_all(s, limit=4 * MB)
        assert answer == b"x" * (3 * MB) + b"bye"   # then EOF
        s.sendall(b"y" * (2 * MB))       # our way is still open
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""
        s.close()
        t.join(timeout=10)
        assert got.get("after") == 2 * MB
    finally:
        lst.close()


def member_once(talk, timeout):
    """The test's own member, on a free port: the first connection that
    says "hi" goes to talk(conn), in a thread (chashd's readiness probes,
    which say nothing, are closed). (port, listener, thread)."""
    mport = free_port()
    lst = socket.create_server(("127.0.0.1", mport))
    lst.settimeout(10)

    def member():
        while True:
            c, _ = lst.accept()
            with c:
                c.settimeout(timeout)
                if recv_exact(c, 2) == b"hi":
                    talk(c)
                    return

    t = threading.Thread(target=member, daemon=True)
    t.start()
    return mport, lst, t


def read_to_eof(c):
    """Read <c> to its EOF: (bytes, their SHA-256 in hex)."""
    h, n = hashlib.sha256(), 0
    while True:
        chunk = c.recv(MB)
        if not chunk:
            return n, h.hexdigest()
        h.update(chunk)
        n += len(chunk)


def greeted(port, answer, timeout):
    """A client that said "hi" through chashd on <port> and got <answer>
    from the test's member."""
    s = connect_from("127.0.0.9", port, timeout=timeout)
    s.sendall(b"hi")
    assert recv_exact(s, len(answer)) == answer
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def test_a_member_that_stops_reading_holds_the_client_back(sockmap, chashd):
    # a member that answers once, then reads nothing more: the kernel
    # would queue the client's bytes for it without end; past
    # FASTPATH_WINDOW the program leaves them in the client's socket,
    # whose receive buffer fills, and TCP's window stops the client
    port, mport = free_port(), free_port()
    lst = socket.create_server(("127.0.0.1", mport))
    lst.settimeout(10)
    stop = threading.Event()
    held = []

    def member():
        while not stop.is_set():
            try:
                c, _ = lst.accept()
            except OSError:
                return
            if recv_exact(c, 2) == b"hi":
                c.sendall(b"hi")
                held.append(c)           # never read again
            else:
                c.close()

    t = threading.Thread(target=member, daemon=True)
    t.start()
    try:
        d = to_member(chashd, port, mport)
        rss0 = d.rss_kib()
        s = spoken(port)
        sent, how = flood(s, 1024 * MB)
        print("fast path, a member that stops reading: the client was "
              "held back after %.1f MB" % (sent / MB))
        assert how == "stalled", (how, sent)
        # the window (2 MiB), the member's socket buffers, the client's
        # socket buffers: nothing more
        assert sent < 64 * MB, sent
        assert d.rss_kib() - rss0 < 8 * 1024   # chashd itself holds nothing
        s.close()
    finally:
        stop.set()
        lst.close()
        for c in held:
            c.close()


def test_a_client_that_sends_all_then_reads_gets_all_through(sockmap,
                                                             chashd):
    # a client that writes its whole request before it reads (a pipelining
    # client, `cat reqs | nc`), to a member that answers as it reads: the
    # member's answer fills the client's way, so what the client sends
    # next goes partly to chashd, queued in the kernel behind that answer.
    # The client's FIN must wait for those bytes: the member gets every
    # byte, in order, then EOF; the client gets the whole answer.
    port = free_port()
    got = {}

    def talk(c):
        c.sendall(b"hi")
        push = threading.Thread(target=c.sendall, args=(b"d" * 8 * MB,),
                                daemon=True)
        push.start()
        got["n"], got["sha"] = read_to_eof(c)
        push.join(timeout=20)

    mport, lst, t = member_once(talk, timeout=20)
    try:
        to_member(chashd, port, mport)
        s = greeted(port, b"hi", timeout=20)
        time.sleep(0.3)          # the member's answer fills the client's way
        up = os.urandom(16 * MB)
        s.sendall(up)
        s.shutdown(socket.SHUT_WR)
        down = recv_all(s, limit=9 * MB)
        s.close()
        t.join(timeout=20)
        assert got.get("n") == len(up)
        assert got.get("sha") == hashlib.sha256(up).hexdigest()
        assert down == b"d" * 8 * MB
    finally:
        lst.close()


def test_a_client_that_floods_and_never_reads_is_bounded(sockmap, backends,
                                                         chashd):
    # the echo member answers everything; the client never reads: both
    # ways fill. The kernel then queues what the client sends behind the
    # answers it cannot deliver, outside the receive buffer (TCP's window
    # does not close): chashd closes the pair once 64 MiB pile up, or the
    # client is held back first. Either way the sender stops, chashd's
    # memory does not grow, and nothing of what came back was corrupted.
    d, port = start(chashd, backends, "sockmap")
    rss0 = d.rss_kib()
    s = spoken(port)
    sent, how = flood(s, 1024 * MB)
    print("fast path, a client that floods and never reads: %s after "
          "%.1f MB" % (how, sent / MB))
    assert how in ("stalled", "closed"), (how, sent)
    assert sent < 256 * MB, sent
    assert d.rss_kib() - rss0 < 8 * 1024
    if how == "closed":
        assert re.search(r"connection closed: a client sends and does not "
                         r"read what it is sent; the kernel held \d+ MB",
                         d.log())
    s.close()


def test_idle_timeout_counts_the_kernels_bytes(sockmap, backends, chashd):
    d, port = start(chashd, backends, "sockmap", idle_timeout="600ms")
    s = spoken(port)
    s.settimeout(5)
    # traffic every 200 ms for 2 s: only the kernel sees it, and the pair
    # is not idle
    for i in range(10):
        s.sendall(b"%02d" % i)
        assert recv_exact(s, 2) == b"%02d" % i
        time.sleep(0.2)
    # then silence: closed by chashd after idle_timeout
    t0 = time.monotonic()
    assert s.recv(1) == b""
    assert 0.4 < time.monotonic() - t0 < 3
    s.close()
    assert re.search(r"idle for 600ms: closed", d.log())


def test_the_config_says_who_moves_the_bytes(tmp_path):
    port = free_port()
    conf = tmp_path / "c.yml"
    conf.write_text("global:\n  admin: off\nweb:\n  listen: 127.0.0.1:%d\n"
                    "  mode: tcp\n  fast_path: off\n  servers:\n"
                    "    - 127.0.0.1:9:1 a\n" % port)
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert ", fast_path off\n" in p.stdout
    # a bad value: file:line, and the valid ones
    conf.write_text("global:\n  admin: off\nweb:\n  listen: 127.0.0.1:%d\n"
                    "  mode: tcp\n  fast_path: splice\n  servers:\n"
                    "    - 127.0.0.1:9:1 a\n" % port)
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2
    assert "%s:6: unknown fast_path 'splice' (valid: sockmap, off)" % conf \
        in p.stderr, p.stderr
    # the environment's default, for pools that do not say
    conf.write_text("global:\n  admin: off\nweb:\n  listen: 127.0.0.1:%d\n"
                    "  mode: tcp\n  servers:\n    - 127.0.0.1:9:1 a\n" % port)
    env = dict(os.environ)
    env.pop("CHASHD_FAST_PATH", None)
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10, env=env)
    assert p.returncode == 0 and ", fast_path off\n" in p.stdout, p.stdout
    env["CHASHD_FAST_PATH"] = "sockmap"
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10, env=env)
    assert p.returncode == 0 and ", fast_path sockmap\n" in p.stdout, p.stdout
    # only tcp pools have one: elsewhere it loads with a warning
    conf.write_text("global:\n  admin: off\nkv:\n  listen: 127.0.0.1:%d\n"
                    "  mode: redis\n  fast_path: sockmap\n  servers:\n"
                    "    - 127.0.0.1:9:1 a\n" % port)
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert re.search(r"c\.yml:6: .*fast_path", p.stderr), p.stderr

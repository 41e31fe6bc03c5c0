# test_faults_http.py -- faults of an http pool's members and clients, each
# with what the client sees (a status chashd answers, or a close of a cut
# response) within the configured timeout plus a margin, chashd still
# serving, and its descriptors back to the baseline (RSS flat) across
# repeated rounds: a member SIGSTOPped mid-response, one that accepts and
# never reads, a slow one, resets mid-reply, refused connects, slowloris
# clients, oversized requests, descriptor exhaustion, members flapping.
# SPDX-License-Identifier: BSD-2-Clause
import json
import select
import socket
import threading
import time

from base_util import free_port, lookup_config, wait_for
from fault_util import (RefusedPort, Stub, assert_flat, exchange, fd_count,
                        http_complete, http_reply, nofile_limit,
                        read_outcome, stopped)
from http_util import HttpBackend, http_pool

TIMEOUT_S = 0.5       # the pools' `timeout` (a member's first byte)
IDLE_S = 0.5          # the pools' `idle_timeout` (a client's head)
MARGIN = 1.0          # scheduling slack on top of a configured timeout
RSS_KIB = 2048        # RSS growth allowed over the rounds of one test
# one worker: the idle member connections it keeps (backend_keepalive)
# are then the same after every round, and the descriptors comparable
ONE_WORKER = "global:\n  admin: off\n  workers: 1\n"


def key_of(d, *names, n=300):
    """A routing key (X-User-Id) whose members in preference order begin
    with <names>."""
    keys = ["u%d" % i for i in range(n)]
    owner = lookup_config(d.conf, "web", keys, replicas=len(names))
    return next(k for k in keys if tuple(owner[k]) == names)


def req(key, method="GET", body=b"", close=False, extra=b""):
    head = b"%s / HTTP/1.1\r\nHost: t\r\nX-User-Id: %s\r\n" % (
        method.encode(), key.encode())
    if body or method == "POST":
        head += b"Content-Length: %d\r\n" % len(body)
    if close:
        head += b"Connection: close\r\n"
    return head + extra + b"\r\n" + body


def body_of(out):
    return out.data.partition(b"\r\n\r\n")[2]


def send_until_answer(s, data, limit, within):
    """Send <data> on <s> again and again until the peer answers (a byte
    to read, or a close), <limit> bytes are sent or <within> s pass; the
    bytes sent. <s> is left blocking."""
    s.setblocking(False)
    sent, t0 = 0, time.monotonic()
    try:
        while sent < limit and time.monotonic() - t0 < within:
            try:
                if s.recv(1, socket.MSG_PEEK):
                    break
            except BlockingIOError:
                pass
            try:
                sent += s.send(data)
            except BlockingIOError:
                time.sleep(0.005)
    except OSError:
        pass            # reset or closed: the answer is read after
    s.setblocking(True)
    return sent


def start(chashd, members, **opts):
    port = free_port()
    opts.setdefault("timeout", "%dms" % (TIMEOUT_S * 1000))
    opts.setdefault("idle_timeout", "%dms" % (IDLE_S * 1000))
    opts.setdefault("connect_timeout", "300ms")
    d = chashd(http_pool(port, members, global_text=ONE_WORKER, **opts),
               port)
    return d, port


def served_by(port, key, name):
    """A normal request for <key> is answered 200 by member <name>."""
    out = exchange(port, req(key, close=True), 3, stop_at=http_complete)
    assert out.status() == 200 and body_of(out) == name.encode(), out


def test_member_stopped_mid_response(procs, chashd):
    """A member SIGSTOPped while its response streams: the client has the
    head and part of the body, then its connection is closed (HTTP's way
    to say "incomplete") within `timeout`; stopped before a request, a GET
    is answered by the key's next member and a POST gets 504, each right
    after `timeout`."""
    body = b"b" * 40000
    slow = Stub(procs, "h1", reply=http_reply(body), rate=40000, fast=100)
    other = Stub(procs, "h2", reply=http_reply("h2"))
    d, port = start(chashd, [slow, other], retries=1)
    k1, k2 = key_of(d, "h1"), key_of(d, "h2")

    def round_(i):
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        with s:
            s.sendall(req(k1))
            first = read_outcome(s, 3, stop_at=lambda b: len(b) > 2000)
            assert first.how == "done" and first.status() == 200, first
            with stopped(slow.proc.pid):
                rest = read_outcome(s, TIMEOUT_S + 3)
        got = first.data + rest.data
        assert rest.how in ("eof", "reset"), rest
        assert not http_complete(got) and len(got) < len(body), len(got)
        assert rest.elapsed < TIMEOUT_S + MARGIN, rest
        with stopped(slow.proc.pid):
            g = exchange(port, req(k1, close=True), TIMEOUT_S + 3,
                         stop_at=http_complete)
            p = exchange(port, req(k1, "POST", b"once", close=True),
                         TIMEOUT_S + 3, stop_at=http_complete)
            served_by(port, k2, "h2")
        assert g.status() == 200 and body_of(g) == b"h2", g
        assert TIMEOUT_S * 0.8 < g.elapsed < TIMEOUT_S + MARGIN, g
        assert p.status() == 504 and p.how in ("done", "eof"), p
        assert TIMEOUT_S * 0.8 < p.elapsed < TIMEOUT_S + MARGIN, p

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: served_by(port, k2, "h2"))


def test_member_that_never_reads(procs, chashd):
    """A member that accepts and never reads: a GET is answered by the
    key's next member after `timeout`; a POST gets 504 after `timeout`,
    also one whose 2 MB body cannot be forwarded (the client's sends
    stall: its connection is closed after the 504)."""
    hole = Stub(procs, "h1", behaviour="blackhole", rcvbuf=4096)
    other = Stub(procs, "h2", reply=http_reply("h2"))
    d, port = start(chashd, [hole, other], retries=1)
    k1, k2 = key_of(d, "h1"), key_of(d, "h2")

    def big_post():
        """A 64 MB POST body sent until an answer comes (or 64 MB)."""
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        with s:
            t0 = time.monotonic()
            s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nX-User-Id: %s\r\n"
                      b"Content-Length: %d\r\n\r\n" % (k1.encode(), 64 << 20))
            sent = send_until_answer(s, b"x" * 65536, 64 << 20,
                                     TIMEOUT_S + 3)
            assert sent < 64 << 20, "the whole body went through"
            return read_outcome(s, TIMEOUT_S + 3, start=t0)

    def round_(i):
        g = exchange(port, req(k1, close=True), TIMEOUT_S + 3,
                     stop_at=http_complete)
        assert g.status() == 200 and body_of(g) == b"h2", g
        assert TIMEOUT_S * 0.8 < g.elapsed < TIMEOUT_S + MARGIN, g
        p = exchange(port, req(k1, "POST", b"abc", close=True),
                     TIMEOUT_S + 3, stop_at=http_complete)
        assert p.status() == 504, p
        assert TIMEOUT_S * 0.8 < p.elapsed < TIMEOUT_S + MARGIN, p
        b = big_post()
        assert b.status() == 504 and b.how in ("eof", "reset"), b
        assert b.elapsed < TIMEOUT_S + MARGIN, b

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: served_by(port, k2, "h2"))


def test_slow_member(procs, chashd):
    """A member whose body trickles in pieces every 100 ms: each piece
    comes within `timeout`, so the client gets all of it though it takes
    about twice `timeout`; one whose body stops for longer than `timeout` after
    the head is cut: the client has the head, then a close (a byte a
    second, with `timeout` 500 ms)."""
    body = b"s" * 1000
    slow = Stub(procs, "h1", reply=http_reply(body), rate=1000, fast=40)
    stuck = Stub(procs, "h2", reply=http_reply(body), rate=1, fast=40)
    d, port = start(chashd, [slow, stuck], retries=1)
    k1, k2 = key_of(d, "h1"), key_of(d, "h2")

    def round_(i):
        g = exchange(port, req(k1, close=True), 5, stop_at=http_complete)
        assert g.status() == 200 and body_of(g) == body, g
        assert g.elapsed > 1.5 * TIMEOUT_S, g
        c = exchange(port, req(k2, close=True), TIMEOUT_S + 3,
                     stop_at=http_complete)
        assert c.status() == 200 and not http_complete(c.data), c
        assert c.how in ("eof", "reset"), c
        assert c.elapsed < TIMEOUT_S + MARGIN, c

    assert_flat(d.proc, round_, 2, RSS_KIB)


def test_reset_mid_reply(procs, chashd):
    """A member that resets in the middle of its response head: nothing
    reached the client yet, so a GET goes to the next member -- at once,
    also on an idle connection of it (that retry used to wait for
    `timeout`, then 504: forever with `timeout: 0`) -- and a POST gets
    502; in the middle of its body: the client has the part sent, then a
    close. Each at once, not after a timeout."""
    full = http_reply(b"r" * 5000)
    in_head = Stub(procs, "h1", behaviour="reset", reply=full, cut=12)
    in_body = Stub(procs, "h2", behaviour="reset", reply=full, cut=1000)
    good = Stub(procs, "h3", reply=http_reply("h3"))
    d, port = start(chashd, [in_head, in_body, good], retries=1)
    k1, k2, k3 = key_of(d, "h1", "h3"), key_of(d, "h2"), key_of(d, "h3")
    served_by(port, k3, "h3")       # an idle connection to h3 is kept
    sent_body = full[:1000].partition(b"\r\n\r\n")[2]

    def cut_short(out):
        """The head, the body's bytes the member sent, then a close."""
        assert out.status() == 200 and out.how in ("eof", "reset"), out
        assert body_of(out) == sent_body, out

    def round_(i):
        g = exchange(port, req(k1, close=True), 3, stop_at=http_complete)
        assert g.status() == 200 and body_of(g) == b"h3", g
        assert g.elapsed < TIMEOUT_S * 0.8, g
        p = exchange(port, req(k1, "POST", b"once", close=True), 3,
                     stop_at=http_complete)
        assert p.status() == 502 and b"reset" in body_of(p), p
        assert p.elapsed < MARGIN, p
        b = exchange(port, req(k2, close=True), 3, stop_at=http_complete)
        cut_short(b)
        assert b.elapsed < MARGIN, b

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: served_by(port, k3, "h3"))


def test_a_retry_on_an_idle_connection_needs_no_timeout(procs, chashd):
    """With `timeout: 0` (the default: no response timeout), a GET whose
    member resets before answering is retried on an idle connection of
    the key's next member, and answered at once: the retry used to wait
    for an event that never came, and the client hung."""
    rst = Stub(procs, "h1", behaviour="reset", reply=b"", cut=0)
    good = Stub(procs, "h2", reply=http_reply("h2"))
    d, port = start(chashd, [rst, good], timeout="0", retries=1)
    k1, k2 = key_of(d, "h1", "h2"), key_of(d, "h2")

    def round_(i):
        served_by(port, k2, "h2")        # an idle connection to h2 is kept
        g = exchange(port, req(k1, close=True), 3, stop_at=http_complete)
        assert g.status() == 200 and body_of(g) == b"h2", g
        assert g.elapsed < MARGIN, g

    assert_flat(d.proc, round_, 2, RSS_KIB)


def test_refused_connects(procs, chashd):
    """Every member refuses: each request gets 502 at once (no
    connect_timeout wait), on a connection that stays open for the next
    one; a member that comes back is used."""
    with RefusedPort() as r1, RefusedPort() as r2:
        r1.name, r2.name = "h1", "h2"
        gone = [r1, r2]
        d, port = start(chashd, gone, retries=1)

        def round_(i):
            s = socket.create_connection(("127.0.0.1", port), timeout=3)
            with s:
                for k in range(10):
                    s.sendall(req("u%d" % k))
                    out = read_outcome(s, 3, stop_at=http_complete)
                    assert out.status() == 502 and out.how == "done", out
                    assert b"refused" in body_of(out), out
                    assert out.elapsed < 0.3, out

        assert_flat(d.proc, round_, 2, RSS_KIB)


def test_slowloris_clients(procs, chashd):
    """A head sent a byte every 50 ms gets 408 once `idle_timeout` has
    passed since its first byte (bytes coming do not extend it: they
    did, and such a client was served after 2.6 s with idle_timeout
    500 ms, so a byte every 400 ms held a connection forever); 150
    clients that send nothing do not keep a normal client out, and are
    closed at `idle_timeout`; a body that stops half way gets 504 after
    `timeout` (the member, http_backend.py, waits for all of it) and
    the connection closes."""
    good = HttpBackend(procs, "h1")
    d, port = start(chashd, [good])

    def served():
        out = exchange(port, req("u1", close=True), 3, stop_at=http_complete)
        assert out.status() == 200, out
        assert json.loads(body_of(out))["member"] == "h1", out

    def trickle_head():
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        with s:
            t0 = time.monotonic()
            for byte in req("u1"):
                s.send(bytes([byte]))
                if select.select([s], [], [], 0.05)[0]:
                    break       # an answer (or a close) came
            return read_outcome(s, IDLE_S + 3, start=t0)

    def round_(i):
        out = trickle_head()
        assert out.status() == 408 and out.how in ("eof", "reset"), out
        assert IDLE_S * 0.8 < out.elapsed < IDLE_S + MARGIN, out
        silent = []
        try:
            for _ in range(150):
                silent.append(socket.create_connection(("127.0.0.1", port),
                                                       timeout=3))
            served()
            t0 = time.monotonic()
            for s in silent:
                o = read_outcome(s, IDLE_S + 3, start=t0)
                assert o.how in ("eof", "reset") and o.data == b"", o
                assert o.elapsed < IDLE_S + MARGIN, o
        finally:
            for s in silent:
                s.close()
        half = exchange(port, b"POST / HTTP/1.1\r\nHost: t\r\nX-User-Id: u1"
                        b"\r\nContent-Length: 100\r\n\r\n" + b"x" * 50,
                        TIMEOUT_S + 3)
        assert half.status() == 504 and half.how in ("eof", "reset"), half
        assert TIMEOUT_S * 0.8 < half.elapsed < TIMEOUT_S + MARGIN, half

    assert_flat(d.proc, round_, 2, RSS_KIB, check=served)


def test_oversized_requests(procs, chashd):
    """A chunked body over client_max_request is answered 413 once that
    many bytes arrived; more than 128 header lines 431; a 2 MB head 431
    as soon as client_max_header is passed (not when it ends). Each
    closes the connection; nothing of them stays in memory. (The member
    is http_backend.py: it reads bodies, and answers once a request is
    whole.)"""
    good = HttpBackend(procs, "h1")
    d, port = start(chashd, [good], client_max_request="64k",
                    client_max_header="8k")

    def served():
        out = exchange(port, req("u1", "POST", b"x" * 60000, close=True), 3,
                       stop_at=http_complete)
        assert out.status() == 200, out
        assert json.loads(body_of(out))["body_len"] == 60000, out

    def feed(prefix, data):
        """Send <prefix>, then <data> again and again until an answer
        comes (at most 64 MB); the outcome and the bytes sent."""
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        with s:
            t0 = time.monotonic()
            s.sendall(prefix)
            sent = send_until_answer(s, data, 64 << 20, 5)
            return read_outcome(s, 3, start=t0), sent

    def round_(i):
        chunk = b"1000\r\n" + b"c" * 0x1000 + b"\r\n"
        out, sent = feed(b"POST / HTTP/1.1\r\nHost: t\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n", chunk)
        assert out.status() == 413 and out.how in ("eof", "reset"), out
        assert sent < 64 << 20, "answered only when the client stopped"
        lines = b"".join(b"X-L%d: v\r\n" % n for n in range(130))
        out = exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\n" + lines +
                       b"\r\n", 3)
        assert out.status() == 431 and out.how in ("eof", "reset"), out
        out, sent = feed(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: ",
                         b"a" * 4096)
        assert out.status() == 431 and out.how in ("eof", "reset"), out
        assert sent < 64 << 20, "answered only when the client stopped"

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=served)


def test_out_of_descriptors(procs, chashd):
    """With RLIMIT_NOFILE 48 and 40 clients connected, then asking at
    once (the accepted ones hold every descriptor), a client
    whose member connection finds no descriptor is answered 503 with
    Retry-After (no socket for a member connection), the others wait in
    the backlog: none is closed without an answer or held; once they
    leave, requests are served again and the descriptors come back to
    where they were."""
    good = Stub(procs, "h1", reply=http_reply("h1"))
    port = free_port()
    # no idle member connections kept: how many a burst leaves is no
    # measure of a leak
    d = chashd(http_pool(port, [good], global_text=ONE_WORKER,
                         backend_keepalive=0), port,
               preexec_fn=nofile_limit(48))
    pid = d.proc.pid

    def round_(i):
        held = []
        try:
            # All connected before any asks: the accepted ones hold every
            # descriptor (an answered client would leave one free for the
            # next member connection when the connects come slowly).
            for k in range(40):
                held.append(socket.create_connection(("127.0.0.1", port),
                                                     timeout=5))
            wait_for(lambda: fd_count(pid) >= 48,
                     what="chashd's descriptors used up by clients")
            for k, s in enumerate(held):
                s.sendall(req("u%d" % k))
            seen = {}
            waiting, deadline = list(held), time.monotonic() + 5
            while waiting and time.monotonic() < deadline:
                ready, _, _ = select.select(waiting, [], [], 0.5)
                for s in ready:
                    out = read_outcome(s, 3, stop_at=http_complete)
                    assert out.how == "done", out
                    if out.status() == 503:
                        assert b"no socket" in body_of(out), out
                        assert b"Retry-After: 1" in out.data, out
                    else:
                        assert out.status() == 200, out
                        assert body_of(out) == b"h1", out
                    seen[out.status()] = seen.get(out.status(), 0) + 1
                    # what waits in the backlog is served as others leave
                    s.close()
                    waiting.remove(s)
            assert not waiting, "%d clients held without an answer: %r" % (
                len(waiting), seen)
            assert seen.get(503), seen
        finally:
            for s in held:
                s.close()

    assert_flat(d.proc, round_, 2, RSS_KIB,
                check=lambda: served_by(port, "u1", "h1"))
    assert "Too many open files" in d.log()
    assert fd_count(pid) <= 48


def test_members_flapping_under_traffic(procs, chashd):
    """A member killed for 300 ms and restarted, each round, under
    keep-alive traffic: the other member's requests never fail, the
    flapping member's get 200 (retried or failed over) or a 502/503 --
    not a 504 after `timeout` (a retry on an idle connection waited for
    it) and never a hang -- and nothing is left open."""
    flappy = Stub(procs, "h1", reply=http_reply("h1"))
    steady = Stub(procs, "h2", reply=http_reply("h2"))
    d, port = start(chashd, [flappy, steady], on_failure="failover",
                    retries=1, health_check="{ type: tcp, interval: 100ms, "
                    "timeout: 100ms, rise: 1, fall: 1 }")
    k1, k2 = key_of(d, "h1"), key_of(d, "h2")
    stop = threading.Event()
    bad, statuses = [], {}

    def traffic():
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        try:
            while not stop.is_set():
                for k, must in ((k2, True), (k1, False)):
                    s.sendall(req(k))
                    out = read_outcome(s, 0.3 + MARGIN, stop_at=http_complete)
                    statuses[out.status()] = statuses.get(out.status(), 0) + 1
                    if out.how != "done" or (must and out.status() != 200):
                        bad.append(out)
                    if out.how != "done":
                        s.close()
                        s = socket.create_connection(("127.0.0.1", port),
                                                     timeout=3)
        finally:
            s.close()

    def restart(stub):
        return Stub(procs, stub.name, reply=http_reply("h1"), port=stub.port)

    box = [flappy]      # the stub object is replaced at each restart

    def round_box(i):
        stop.clear()
        t = threading.Thread(target=traffic)
        t.start()
        try:
            box[0].stop()
            time.sleep(0.3)
            box[0] = restart(box[0])
            time.sleep(0.3)
        finally:
            stop.set()
            t.join(timeout=10)
        assert not t.is_alive()

    assert_flat(d.proc, round_box, 2, RSS_KIB,
                check=lambda: served_by(port, k2, "h2"))
    assert not bad, bad[:5]
    assert statuses.get(200, 0) > 20, statuses
    assert set(statuses) <= {200, 502, 503}, statuses

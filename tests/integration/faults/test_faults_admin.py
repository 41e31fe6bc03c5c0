# test_faults_admin.py -- faults on the admin API's port (libmicrohttpd on
# the control thread): oversized heads, slowloris clients at the
# connection limit, clients that pipeline requests and never read the
# answers, clients that reset in the middle of a request. Each: what the
# client sees (a status and a close, within a bound), the API still
# answering and health checks still running, and chashd's descriptors
# back to the baseline (RSS flat) across repeated rounds.
# SPDX-License-Identifier: BSD-2-Clause
import socket
import struct
import threading
import time

from admin_util import cluster  # noqa: F401 (fixture)
from fault_util import assert_flat, exchange, read_outcome

RSS_KIB = 4096        # RSS growth allowed over the rounds of one test
CHECKS = "{type: tcp, interval: 100ms, timeout: 100ms, rise: 1, fall: 1}"


def host(c):
    return b"Host: 127.0.0.1:%d\r\n" % c.admin_port


def api_ok(c, within=3.0):
    """A normal API call is answered 200 within <within> s."""
    t0 = time.monotonic()
    st, j, _ = c.api.get("/api/pools/web")
    took = time.monotonic() - t0
    assert st == 200 and j["name"] == "web", (st, j)
    assert took < within, "the API took %.1fs" % took


def test_oversized_heads_are_refused_and_closed(cluster):
    """A 100 kB URL gets 414, a 100 kB header or 5000 header lines 431,
    and a head that never ends 431 long before the client stops sending;
    each connection is closed, the API goes on answering."""
    c = cluster(2)

    def endless_head():
        s = socket.create_connection(("127.0.0.1", c.admin_port), timeout=3)
        with s:
            t0 = time.monotonic()
            s.sendall(b"GET /api/pools HTTP/1.1\r\n" + host(c) + b"X-A: ")
            sent = 0
            s.setblocking(False)
            try:
                while sent < 64 << 20 and time.monotonic() - t0 < 5:
                    try:
                        if s.recv(1, socket.MSG_PEEK):
                            break
                    except BlockingIOError:
                        pass
                    try:
                        sent += s.send(b"a" * 4096)
                    except BlockingIOError:
                        time.sleep(0.005)
            except OSError:
                pass            # reset: read what came before it
            s.setblocking(True)
            return read_outcome(s, 3, start=t0), sent

    def round_(i):
        for req, status in (
                (b"GET /api/pools/" + b"a" * 100000 + b" HTTP/1.1\r\n" +
                 host(c) + b"\r\n", 414),
                (b"GET /api/pools HTTP/1.1\r\n" + host(c) + b"X-Big: " +
                 b"b" * 100000 + b"\r\n\r\n", 431),
                (b"GET /api/pools HTTP/1.1\r\n" + host(c) +
                 b"".join(b"X-%d: v\r\n" % n for n in range(5000)) +
                 b"\r\n", 431)):
            out = exchange(c.admin_port, req, 3)
            assert out.status() == status and out.how in ("eof", "reset"), \
                out
            assert out.elapsed < 1, out
        out, sent = endless_head()
        assert out.status() == 431 and out.how in ("eof", "reset"), out
        assert sent < 64 << 20, "no answer while 64 MB of head were sent"
        assert out.elapsed < 2, out

    assert_flat(c.d.proc, round_, 2, RSS_KIB, check=lambda: api_ok(c))


def test_slowloris_at_the_connection_limit(cluster):
    """70 clients that send a header line every 300 ms and never end
    their request fill the API's 64 connections: a normal call is still
    answered within seconds, the 64 are cut (the 1 s limit once the API
    was full, each as it reaches 1 s), health checks run meanwhile, and
    nothing is left open once they go."""
    c = cluster(2, pool_opts={"health_check": CHECKS})

    def round_(i):
        socks = []
        stop = threading.Event()

        def drip():
            while not stop.is_set():
                for s in socks:
                    try:
                        s.send(b"X-Slow: 1\r\n")
                    except OSError:
                        pass
                stop.wait(0.3)

        # over about a second, as real clients come: when the first cut
        # comes the younger ones are under 1 s old, and the backlog fills
        # the places it freed at once
        for _ in range(70):
            s = socket.create_connection(("127.0.0.1", c.admin_port),
                                         timeout=3)
            s.sendall(b"GET /api/pools HTTP/1.1\r\n" + host(c))
            socks.append(s)
            time.sleep(0.015)
        t = threading.Thread(target=drip)
        t.start()
        try:
            api_ok(c, within=5)
            # the 64 that filled the API are cut as each reaches 1 s: the
            # limit once the API was full, until half its places are free
            # (the 6 the backlog held and the normal call then took places
            # too: not waited for here)
            t0 = time.monotonic()
            for s in socks[:64]:
                out = read_outcome(s, 3, start=t0)
                assert out.how in ("eof", "reset"), out
        finally:
            stop.set()
            t.join(timeout=5)
            for s in socks:
                s.close()

    assert_flat(c.d.proc, round_, 2, RSS_KIB, check=lambda: api_ok(c))
    assert "admin: at its 64 connections: a request must arrive within " \
        "1000 ms" in c.d.log()
    # the health checks ran all along: a member stopped now is seen down
    c.backends[1].stop()
    t0 = time.monotonic()
    while c.api.members("web")["web-2"]["health"] != "down":
        assert time.monotonic() - t0 < 3, "web-2 never seen down"
        time.sleep(0.05)


def test_clients_that_never_read_their_answers(cluster):
    """20 clients pipeline 300 requests for /metrics each and never read
    an answer (their receive buffers fill, then chashd's send buffers):
    the API answers others at once, and once they go nothing is left
    open and memory is back within a bound."""
    c = cluster(3)
    req = b"GET /metrics HTTP/1.1\r\n" + host(c) + b"\r\n"

    def round_(i):
        socks = []
        try:
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", c.admin_port),
                                             timeout=3)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.setblocking(False)
                try:
                    s.send(req * 300)
                except BlockingIOError:
                    pass
                socks.append(s)
            time.sleep(0.3)     # they are being answered, into full pipes
            api_ok(c, within=2)
        finally:
            for s in socks:
                s.close()

    assert_flat(c.d.proc, round_, 2, RSS_KIB, check=lambda: api_ok(c))


def test_clients_that_reset_mid_request(cluster):
    """50 clients reset (SO_LINGER 0) after half a POST body: no change
    is made, nothing is left open, and the API answers."""
    c = cluster(2)
    body = b'{"name": "x1", "address": "127.0.0.1:9"}'

    def round_(i):
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", c.admin_port),
                                         timeout=3)
            s.sendall(b"POST /api/pools/web/members HTTP/1.1\r\n" + host(c) +
                      b"Content-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) +
                      body[:len(body) // 2])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         struct.pack("ii", 1, 0))
            s.close()

    assert_flat(c.d.proc, round_, 2, RSS_KIB, check=lambda: api_ok(c))
    assert sorted(c.api.members("web")) == ["web-1", "web-2"]

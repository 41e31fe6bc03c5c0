# test_proxy_protocol.py -- the PROXY protocol in tcp pools, with real
# processes: HAProxy (Debian's /usr/sbin/haproxy) sending v1 and v2 headers
# to a chashd pool with accept_proxy, which must route each client by its
# ORIGINAL address (`chash lookup --config` of that IP, not HAProxy's);
# chashd's send_proxy v1 and v2 read by HAProxy frontends with
# accept-proxy that answer with the addresses they took; headers written
# by the test itself (split, with bytes after them, LOCAL / UNKNOWN);
# invalid, late and cut headers closed while the daemon serves others.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import socket
import time

import pytest

from admin_util import Api, admin_global
from base_util import (can_connect, client_ip, connect_from, fetch, free_port,
                       lookup_config, pool_yaml, recv_all, wait_for)
from proxy_util import (HAPROXY, V2_SIG, Haproxy, Member,
                        answering_frontends, v1_header, v2_header)

REQUEST = b"GET / HTTP/1.0\r\nHost: t\r\n\r\n"

pytestmark = pytest.mark.skipif(not os.access(HAPROXY, os.X_OK),
                                reason="needs Debian's haproxy")


def start_pool(chashd, backends, n=3, **opts):
    """A tcp pool "web" over <n> `chash serve` backends with the admin
    API on; returns (Chashd, Api, port, backends)."""
    bs = backends(n)
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport) + pool_yaml("web", port, bs, **opts), port)
    wait_for(lambda: can_connect(aport), what="admin API")
    return d, Api(aport), port, bs


def protocol_errors(api):
    return api.pool("web")["stats"]["requests"]["protocol_errors"]


def ask(port, first, src="127.0.0.1", pause_after=None):
    """Connect to <port> from <src>, send <first> (a header and the
    request; with <pause_after>, its first bytes, a pause, the rest) and
    return what comes back before the close."""
    s = connect_from(src, port, timeout=10)
    with s:
        if pause_after is None:
            s.sendall(first)
        else:
            s.sendall(first[:pause_after])
            time.sleep(0.3)
            s.sendall(first[pause_after:])
        return recv_all(s)


def body_of(reply):
    if not reply.startswith(b"HTTP/1.1 200"):
        return None
    return reply.split(b"\r\n\r\n", 1)[1].decode().strip()


def spread(conf, keys):
    """{key: member} from `chash lookup --config`; the keys must spread
    over more than one member, or a daemon that keyed every client on
    the same address (HAProxy's) would pass."""
    want = {k: v[0] for k, v in lookup_config(conf, "web", keys).items()}
    assert len(set(want.values())) > 1, want
    return want


# ---- HAProxy sends, chashd takes -----------------------------------------

@pytest.mark.parametrize("send", ["send-proxy", "send-proxy-v2"])
def test_haproxy_header_keys_the_original_client(procs, chashd, backends,
                                                 send):
    d, api, port, _ = start_pool(chashd, backends, accept_proxy="true")
    hport = free_port()
    Haproxy(procs, "frontend fe\n  mode tcp\n  bind 127.0.0.1:%d\n"
                   "  default_backend be\n\n"
                   "backend be\n  mode tcp\n  server chashd 127.0.0.1:%d %s\n"
            % (hport, port, send), [hport])
    ips = [client_ip(i) for i in range(24)]
    want = spread(d.conf, ips)
    got = {ip: fetch(hport, src=ip, timeout=10) for ip in ips}
    assert got == want
    # HAProxy's own address keys elsewhere for some of them: it was not
    # the key (spread() above makes sure the clients differ)
    assert len(set(got.values())) > 1


# ---- chashd sends, HAProxy takes -----------------------------------------

@pytest.mark.parametrize("version", ["v1", "v2"])
def test_send_proxy_tells_members_the_client(procs, chashd, version):
    members = [Member("hp-%d" % i) for i in range(1, 4)]
    Haproxy(procs, answering_frontends([(m.name, m.port) for m in members]),
            [m.port for m in members])
    port = free_port()
    d = chashd("global:\n  admin: off\n  workers: 2\n" +
               pool_yaml("web", port, members, send_proxy=version), port)
    ips = [client_ip(i) for i in range(16)]
    want = spread(d.conf, ips)
    for ip in ips:
        s = connect_from(ip, port, timeout=10)
        with s:
            sport = s.getsockname()[1]
            s.sendall(REQUEST)
            body = body_of(recv_all(s))
        # the member chosen by the client's key, told the client's
        # address and port and the listener it reached
        assert body == "%s src=%s:%d dst=127.0.0.1:%d" \
            % (want[ip], ip, sport, port), (ip, body)


def test_headers_chained_through_chashd(procs, chashd):
    """HAProxy -> (v2) chashd accept_proxy + send_proxy v1 -> HAProxy: the
    last hop sees the first client and the address it reached at the
    first proxy, not chashd's."""
    members = [Member("hp-%d" % i) for i in range(1, 4)]
    port, front = free_port(), free_port()
    Haproxy(procs, answering_frontends([(m.name, m.port) for m in members]) +
            "frontend fe\n  mode tcp\n  bind 127.0.0.1:%d\n"
            "  default_backend be\n\n"
            "backend be\n  mode tcp\n  server c 127.0.0.1:%d send-proxy-v2\n"
            % (front, port), [m.port for m in members] + [front])
    d = chashd("global:\n  admin: off\n  workers: 2\n" +
               pool_yaml("web", port, members, accept_proxy="true",
                         send_proxy="v1"), port)
    ips = [client_ip(i) for i in range(12)]
    want = spread(d.conf, ips)
    for ip in ips:
        s = connect_from(ip, front, timeout=10)
        with s:
            sport = s.getsockname()[1]
            s.sendall(REQUEST)
            body = body_of(recv_all(s))
        assert body == "%s src=%s:%d dst=127.0.0.1:%d" \
            % (want[ip], ip, sport, front), (ip, body)


# ---- headers written by the test -----------------------------------------

@pytest.mark.parametrize("make", [v1_header, v2_header], ids=["v1", "v2"])
def test_header_forms(chashd, backends, make):
    d, api, port, _ = start_pool(chashd, backends, accept_proxy="true")
    claimed = ["10.20.%d.%d" % (i // 7, 1 + i * 13 % 250) for i in range(16)]
    claimed += ["2001:db8::%x" % (i + 1) for i in range(8)]
    want = spread(d.conf, claimed)
    for i, ip in enumerate(claimed):
        dst = "::1" if ":" in ip else "127.0.0.1"
        h = make(ip, dst, 40000 + i, port)
        # the header and the request in one segment; or the header cut
        # in two (its first bytes wait in the socket), then the request
        assert body_of(ask(port, h + REQUEST)) == want[ip], ip
        assert body_of(ask(port, h + REQUEST, pause_after=9)) == want[ip], ip
    # TLVs (v2) are skipped
    if make is v2_header:
        tlvs = b"\x04\x00\x02\x00\x00" + b"\x02\x00\x05hello"
        h = v2_header(claimed[0], "127.0.0.1", 1, 2, tlvs)
        assert body_of(ask(port, h + REQUEST)) == want[claimed[0]]
    # LOCAL and UNKNOWN: the connection's own peer is the key
    peers = [client_ip(i) for i in range(12)]
    want = spread(d.conf, peers)
    local = (b"PROXY UNKNOWN\r\n" if make is v1_header
             else V2_SIG + b"\x20\x00\x00\x00")
    for ip in peers:
        assert body_of(ask(port, local + REQUEST, src=ip)) == want[ip], ip


def test_hash_key_source_ip_port_takes_the_headers_port(chashd, backends):
    d, api, port, _ = start_pool(chashd, backends, accept_proxy="true",
                                 hash_key="source_ip_port")
    keys = ["10.9.8.7:%d" % p for p in range(1000, 1016)]
    want = spread(d.conf, keys)
    for k in keys:
        ip, p = k.split(":")
        h = v1_header(ip, "127.0.0.1", int(p), port)
        assert body_of(ask(port, h + REQUEST)) == want[k], k


# ---- refusals -------------------------------------------------------------

BAD = [
    (REQUEST, "not a PROXY header"),
    (b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n" + REQUEST, "TCP4, TCP6 or"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 80\r\n" + REQUEST, "source port"),
    (b"PROXY TCP4 ::1 ::1 1 2\r\n" + REQUEST, "not its family's"),
    (b"PROXY UNKNOWN " + b"x" * 120, "no CRLF in the first 107"),
    (V2_SIG + b"\x11\x11\x00\x0c" + b"\x01" * 12 + REQUEST,
     "version is not 2"),
    (V2_SIG + b"\x23\x11\x00\x0c" + b"\x01" * 12 + REQUEST, "command"),
    (V2_SIG + b"\x21\x51\x00\x0c" + b"\x01" * 12 + REQUEST, "family"),
    (V2_SIG + b"\x21\x11\x00\x08" + b"\x01" * 8 + REQUEST, "shorter than"),
    (V2_SIG + b"\x21\x11\xff\xff" + b"\x01" * 12, "longer than 4096"),
]


def test_invalid_headers_close_the_client_only(chashd, backends):
    d, api, port, _ = start_pool(chashd, backends, accept_proxy="true")
    before = protocol_errors(api)
    ok = v1_header("10.1.1.1", "127.0.0.1", 1234, port) + REQUEST
    served = body_of(ask(port, ok))
    assert served is not None
    for i, (data, why) in enumerate(BAD):
        # the log line is rate-limited (10 a second): at most 4 a second
        # here, so that each one shows
        t0 = time.monotonic()
        # closed without a byte from any member
        assert ask(port, data, src=client_ip(i)) == b"", why
        d.wait_log(r"client %s:\d+ closed: no valid PROXY header "
                   r"\(accept_proxy\): [^\n]*%s" % (re.escape(client_ip(i)),
                                                   re.escape(why)))
        # and the others are still served, by the same member
        assert body_of(ask(port, ok)) == served
        time.sleep(max(0.0, 0.25 - (time.monotonic() - t0)))
    wait_for(lambda: protocol_errors(api) - before == len(BAD),
             what="a protocol error per refused client")
    assert d.proc.poll() is None


def test_late_and_cut_headers_are_closed(chashd, backends):
    d, api, port, _ = start_pool(chashd, backends, accept_proxy="true")
    before = protocol_errors(api)
    # a client that never finishes its header: closed after the wait
    # (connect_timeout's default 1 s is under the 3 s floor: 3 s)
    s = connect_from(client_ip(1), port, timeout=15)
    with s:
        s.sendall(b"PROXY TCP4 10.0.0.1 ")
        t0 = time.monotonic()
        assert recv_all(s) == b""
        waited = time.monotonic() - t0
    assert 2.5 <= waited <= 10, waited
    d.wait_log(r"closed: no valid PROXY header \(accept_proxy\): no whole "
               r"header in time")
    # one that sends nothing at all: the same
    s = connect_from(client_ip(2), port, timeout=15)
    with s:
        t0 = time.monotonic()
        assert recv_all(s) == b""
        assert 2.5 <= time.monotonic() - t0 <= 10
    # one that sends half a header and its FIN: closed at once
    s = connect_from(client_ip(3), port, timeout=15)
    with s:
        s.sendall(V2_SIG + b"\x21\x11\x00\x0c\x01\x02")
        s.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        assert recv_all(s) == b""
        assert time.monotonic() - t0 < 2
    d.wait_log(r"client %s:\d+ closed: no valid PROXY header \(accept_proxy"
               r"\): the client closed in the middle of it"
               % re.escape(client_ip(3)))
    # a longer connect_timeout is the wait: not covered here (a 3 s floor
    # is already the slowest part of the suite)
    wait_for(lambda: protocol_errors(api) - before == 3,
             what="three protocol errors")
    ok = v2_header("10.1.1.1", "127.0.0.1", 1234, port) + REQUEST
    assert body_of(ask(port, ok)) is not None


def test_keys_off_change_nothing(chashd, backends):
    """Both keys off (the default): a client's bytes reach the member as
    sent -- a PROXY line from a client is only bytes, and no header is
    added -- and the client's own address is the key."""
    bs = backends(2, echo=True)
    port = free_port()
    d = chashd("global:\n  admin: off\n  workers: 2\n" +
               pool_yaml("web", port, bs), port)
    line = v1_header("10.1.1.1", "127.0.0.1", 1, 2)
    s = connect_from(client_ip(0), port, timeout=10)
    with s:
        s.sendall(line + b"hello")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == line + b"hello"

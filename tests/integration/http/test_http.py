"""The http mode end to end: chashd between real clients (python's
http.client, raw sockets, curl, wrk) and stub members of ours
(http_backend.py): stickiness per header, cookie, query parameter, path,
uri and host agreeing with `chash lookup --config`, keep-alive with
per-request routing over pooled member connections, pipelining, bodies
both ways, 100-continue, HTTP/1.0, forwarded headers, upgrades, every
error chashd answers itself, retries, and the smuggling vectors."""
import hashlib
import re
import shutil
import socket
import subprocess
import time

import pytest

from base_util import client_ip, free_port, lookup_config, wait_for
from http_util import (complete, connection, get_json, http_backends,
                       http_pool, raw, responses, ws_frame, ws_key)


def start(procs, chashd, n=3, fail=None, **opts):
    members = http_backends(procs, n, fail=fail)
    port = free_port()
    d = chashd(http_pool(port, members, **opts), port)
    return members, port, d


def names(result):
    return {k: v[0] for k, v in result.items()}


# ---------------------------------------------------------------- routing --

def test_sticky_per_header_cookie_and_query(procs, chashd):
    """Hundreds of distinct values of each source, over keep-alive
    connections: every request lands on the member `chash lookup --config`
    names for the value of the first source present."""
    _, port, d = start(procs, chashd,
                       hash_key="[cookie:session, header:X-User-Id, "
                                "query:uid, source_ip]")
    keys = ["user-%d" % i for i in range(300)]
    want = names(lookup_config(d.conf, "web", keys))
    assert len(set(want.values())) == 3
    conn = connection(port)
    got = {"cookie": {}, "header": {}, "query": {}}
    for k in keys:
        _, _, j = get_json(conn, "/c", {"Cookie": "a=1; session=%s; b=2" % k,
                                        "X-User-Id": "other"})
        got["cookie"][k] = j["member"]
        _, _, j = get_json(conn, "/h", {"X-User-Id": k})
        got["header"][k] = j["member"]
        _, _, j = get_json(conn, "/q?x=1&uid=%s&y=2" % k)
        got["query"][k] = j["member"]
    for source, seen in got.items():
        wrong = [k for k in keys if seen[k] != want[k]]
        assert not wrong, "%s: %d keys on the wrong member, e.g. %s" % (
            source, len(wrong), wrong[:3])


def test_path_uri_and_host_keys(procs, chashd):
    members = http_backends(procs, 3)
    for hash_key, make in [
            ("path", lambda i: ("/p/%d?v=%d" % (i, i * 7), None, "/p/%d" % i)),
            ("uri", lambda i: ("/u/%d?v=1" % i, None, "/u/%d?v=1" % i)),
            ("host", lambda i: ("/", "Site%d.Example" % i,
                                "site%d.example" % i))]:
        port = free_port()
        procs_tmp = procs.tmp / hash_key
        procs_tmp.mkdir()
        from base_util import Chashd
        d = Chashd(procs, str(procs_tmp), http_pool(port, members,
                                                    hash_key=hash_key), port)
        cases = [make(i) for i in range(60)]
        want = names(lookup_config(d.conf, "web", [c[2] for c in cases]))
        conn = connection(port)
        for target, host, key in cases:
            headers = {"Host": host} if host else {}
            _, _, j = get_json(conn, target, headers)
            assert j["member"] == want[key], (hash_key, target)
        assert len({want[c[2]] for c in cases}) > 1


def test_fallback_to_the_client_address(procs, chashd):
    """A request without any source of the chain is keyed by its client's
    IP, so clients stay sticky."""
    _, port, d = start(procs, chashd, hash_key="[header:X-User-Id]")
    ips = [client_ip(i) for i in range(40)]
    want = names(lookup_config(d.conf, "web", ips))
    for ip in ips:
        conn = connection(port, src=ip)
        _, _, a = get_json(conn, "/")
        _, _, b = get_json(conn, "/again")
        assert a["member"] == b["member"] == want[ip]


def test_keepalive_routes_each_request_over_pooled_connections(procs,
                                                               chashd):
    """One client connection, requests for many users: they go to
    different members, the client's connection stays the same, and the
    members see their connections reused (pooled per worker)."""
    _, port, d = start(procs, chashd)
    keys = ["k%d" % i for i in range(60)]
    want = names(lookup_config(d.conf, "web", keys))
    conn = connection(port)
    conn.connect()
    sock = conn.sock
    conns = {}
    for k in keys:
        _, r, j = get_json(conn, "/", {"X-User-Id": k})
        assert j["member"] == want[k]
        assert conn.sock is sock, "chashd closed the client's connection"
        conns.setdefault(j["member"], set()).add(j["conn"])
    assert len(conns) == 3
    # 60 requests, one at a time: a handful of member connections serve
    # them (one per worker and member at most, here), not one each
    assert sum(len(c) for c in conns.values()) <= 3 * 2


def test_pipelined_requests_answered_in_order(procs, chashd):
    _, port, d = start(procs, chashd)
    keys = ["pipe%d" % i for i in range(25)]
    want = names(lookup_config(d.conf, "web", keys))
    data = b"".join(b"GET /n%d HTTP/1.1\r\nHost: x\r\nX-User-Id: %s\r\n\r\n"
                    % (i, k.encode()) for i, k in enumerate(keys))
    data += b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    out = responses(raw(port, data))
    assert len(out) == len(keys) + 1
    import json
    for i, k in enumerate(keys):
        j = json.loads(out[i][2])
        assert j["target"] == "/n%d" % i
        assert j["member"] == want[k]
    assert out[-1][1].get("connection") == "close"


# ----------------------------------------------------------------- bodies --

def test_bodies_both_ways(procs, chashd):
    _, port, _ = start(procs, chashd)
    conn = connection(port)
    body = bytes(range(256)) * 4096  # 1 MiB
    _, _, j = get_json(conn, "/up", {"X-User-Id": "a"}, "POST", body)
    assert j["body_len"] == len(body) and not j["chunked"]
    assert hashlib.sha1(j["body"].encode("latin-1")).digest() == \
        hashlib.sha1(body).digest()

    def chunks():
        for i in range(200):
            yield b"piece-%d;" % i
    _, _, j = get_json(conn, "/up", {"X-User-Id": "a",
                                     "Transfer-Encoding": "chunked"},
                       "POST", chunks(), chunked=True)
    assert j["chunked"] and j["body"] == "".join("piece-%d;" % i
                                                 for i in range(200))
    status, r, data = get_json(conn, "/chunked?n=50", {"X-User-Id": "a"})
    assert status == 200 and r.getheader("Transfer-Encoding") == "chunked"
    assert data.count(b";") == 50
    status, r, data = get_json(conn, "/big?n=5000000", {"X-User-Id": "b"})
    assert status == 200 and len(data) == 5000000
    # a response ended by the member's close reaches the client whole,
    # and chashd closes the client after it
    status, r, data = get_json(conn, "/close-delimited", {"X-User-Id": "c"})
    assert status == 200 and data["target"] == "/close-delimited"
    assert r.getheader("Connection") == "close"


def test_expect_100_continue_with_curl(procs, chashd):
    """curl waits for `100 Continue` (5 s here) before sending its body:
    the member's interim response reaches it at once."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail("curl is missing: scripts/deps installs it")
    _, port, _ = start(procs, chashd)
    t0 = time.monotonic()
    p = subprocess.run([curl, "-sv", "--expect100-timeout", "5",
                        "-H", "Expect: 100-continue", "-H", "X-User-Id: e",
                        "--data-binary", "x" * 5000,
                        "http://127.0.0.1:%d/expect" % port],
                       capture_output=True, text=True, timeout=20)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert "HTTP/1.1 100 Continue" in p.stderr
    assert '"body_len": 5000' in p.stdout
    assert elapsed < 4, "curl waited for its 100-continue timeout"


def test_http10_clients(procs, chashd):
    _, port, _ = start(procs, chashd)
    out = raw(port, b"GET /old HTTP/1.0\r\nX-User-Id: z\r\n\r\n")
    (status, hdrs, body), = responses(out)
    assert status == 200 and hdrs.get("connection") == "close"
    assert b'"version": "HTTP/1.0"' in body
    # keep-alive asked: kept, and said so
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    for i in range(3):
        s.sendall(b"GET /ka%d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" % i)
        data = b""
        while b"}" not in data:
            data += s.recv(65536)
        (status, hdrs, body), = responses(data)
        assert status == 200 and hdrs["connection"] == "keep-alive"
    s.close()


# ---------------------------------------------------------------- headers --

def test_forwarded_and_hop_by_hop_headers(procs, chashd):
    _, port, _ = start(procs, chashd, member_header="true",
                       forward_headers="[x-forwarded-for, x-forwarded-proto, "
                                       "forwarded]")
    conn = connection(port, src="127.0.0.9")
    _, r, j = get_json(conn, "/h", {
        "X-User-Id": "u", "X-Forwarded-For": "10.1.2.3",
        "X-Forwarded-Proto": "https", "Connection": "X-Secret",
        "X-Secret": "hop", "Keep-Alive": "timeout=5", "TE": "trailers"})
    hdrs = [(k.lower(), v) for k, v in j["headers"]]
    assert ("x-forwarded-for", "10.1.2.3") in hdrs
    assert ("x-forwarded-for", "127.0.0.9") in hdrs
    assert [v for k, v in hdrs if k == "x-forwarded-proto"] == ["http"]
    assert ("forwarded", "for=127.0.0.9;proto=http") in hdrs
    for gone in ("x-secret", "keep-alive", "te", "connection"):
        assert gone not in dict(hdrs), gone
    assert r.getheader("X-Chash-Member") == j["member"]
    # off: nothing added
    members = http_backends(procs, 1, prefix="o")
    port2 = free_port()
    from base_util import Chashd
    (procs.tmp / "off").mkdir()
    Chashd(procs, str(procs.tmp / "off"),
           http_pool(port2, members, forward_headers="off"), port2)
    _, r, j = get_json(connection(port2), "/")
    assert not [k for k, _ in j["headers"] if k.lower().startswith("x-forw")]
    assert r.getheader("X-Chash-Member") is None


def test_websocket_echo_through_an_upgrade(procs, chashd):
    _, port, d = start(procs, chashd)
    want = names(lookup_config(d.conf, "web", ["ws-user"]))["ws-user"]
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
               "Sec-WebSocket-Version: 13\r\nX-User-Id: ws-user\r\n\r\n"
               % ws_key()).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    assert b"X-Member: " + want.encode() in head
    for i in range(5):
        s.sendall(ws_frame("hello %d" % i))
        want_frame = ("%s: hello %d" % (want, i)).encode()
        while len(rest) < 2 + len(want_frame):
            rest += s.recv(4096)
        assert rest[:2] == bytes([0x81, len(want_frame)])
        assert rest[2:2 + len(want_frame)] == want_frame
        rest = rest[2 + len(want_frame):]
    s.sendall(bytes([0x88, 0x80]) + b"\0\0\0\0")
    assert s.recv(16)[:1] == b"\x88"
    s.close()


# ----------------------------------------------------------------- errors --

def test_errors_chashd_answers(procs, chashd):
    """Each status chashd writes, with a body naming the reason."""
    members, port, d = start(procs, chashd, n=2, retries=0, timeout="500ms",
                             client_max_request="1k", client_max_header="4k",
                             client_max_uri="1k")

    def one(data):
        out = raw(port, data, until_close=False, want=complete)
        status, hdrs, body = responses(out)[0]
        return status, hdrs, body.decode()

    st, _, body = one(b"GET /slow?ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert st == 504 and "timed out" in body.lower() or "in time" in body
    st, _, body = one(b"GET /garbage HTTP/1.1\r\nHost: x\r\n\r\n")
    assert st == 502 and "502 Bad Gateway" in body
    st, _, body = one(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: "
                      b"2000\r\n\r\n" + b"x" * 2000)
    assert st == 413 and "client_max_request" in body
    st, _, _ = one(b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert st == 414
    st, _, body = one(b"GET / HTTP/1.1\r\nHost: x\r\n" +
                      b"X-Big: " + b"b" * 5000 + b"\r\n\r\n")
    assert st == 431 and "too large" in body
    st, hdrs, body = one(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert st == 400 and hdrs["connection"] == "close"
    assert "both Content-Length and Transfer-Encoding" in body
    # every member stopped: the connect is refused -> 502
    for m in members:
        m.stop()
    st, _, body = one(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert st == 502
    assert re.search(r"pool web: connect to h\d .* failed", d.log())


def test_503_with_retry_after_when_no_member_is_up(procs, chashd):
    members, port, d = start(procs, chashd, n=2,
                             health_check="{ type: tcp, interval: 100ms, "
                                          "timeout: 100ms, rise: 1, fall: 1 }")
    for m in members:
        m.stop()
    d.wait_log(r"h2 .*down|h2.* -> down|member h2 .*down", timeout=5)
    d.wait_log(r"h1 .*down|h1.* -> down|member h1 .*down", timeout=5)
    out = raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", until_close=False,
              want=lambda o: b"\r\n\r\n" in o and o.endswith(b"\n"))
    status, hdrs, body = responses(out)[0]
    assert status == 503 and hdrs.get("retry-after") == "1"
    assert b"no member" in body


def test_idempotent_request_retried_on_the_next_member(procs, chashd):
    """The key's member resets every request: a GET is answered by the
    next member in the key's preference order; a POST is not sent twice
    (502)."""
    for fail in ("reset", "close"):
        members = http_backends(procs, 3, prefix=fail[0])
        port = free_port()
        from base_util import Chashd
        (procs.tmp / fail).mkdir()
        d = Chashd(procs, str(procs.tmp / fail),
                   http_pool(port, members, retries=2), port)
        keys = ["r%d" % i for i in range(200)]
        order = lookup_config(d.conf, "web", keys, replicas=2)
        bad = members[0].name
        key = next(k for k in keys if order[k][0] == bad)
        members[0].stop()
        members[0].fail = fail
        members[0].start()
        conn = connection(port)
        st, _, j = get_json(conn, "/", {"X-User-Id": key})
        assert st == 200 and j["member"] == order[key][1]
        st, _, body = get_json(connection(port), "/", {"X-User-Id": key},
                               "POST", b"once")
        assert st == 502, body


# -------------------------------------------------------------- smuggling --

SMUGGLING = [
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, b"both"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     b"Content-Length: 5\r\n\r\nabcde", 400, b"duplicate Content-Length"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     b"Content-Length: 4\r\n\r\nabcd", 400, b"duplicate Content-Length"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +4\r\n\r\nabcd", 400,
     b"invalid Content-Length"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 4\r\n\r\nabcd", 400,
     b"invalid Content-Length"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"zz\r\nabc\r\n0\r\n\r\n", 400, b"chunk size"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\nabcX\r\n0\r\n\r\n", 400, b"CRLF"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"fffffffffffffffff\r\n", 400, b"too large"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n"
     b"\r\n", 501, b"other than chunked"),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, b"duplicate"),
    (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
     400, b"HTTP/1.0"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n", 400,
     b"obs-fold"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 400, b"NUL"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400, b"bare CR"),
    (b"GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", 400, b"bare LF"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n", 400,
     b"whitespace"),
    (b"GET x HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"bad form"),
    (b"GET example.com:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"bad form"),
    (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"bad form"),
    (b"GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"bad form"),
    (b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n", 405, b"CONNECT"),
    (b"GET / HTTP/1.1\r\n\r\n", 400, b"without Host"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, b"duplicate Host"),
    (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, b"version"),
    (b"GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400, b"request line"),
    (b"GET http://x/ HTTP/1.1\r\n\r\n", 400, b"without Host"),
]


def test_framing_headers_survive_connection(procs, chashd):
    """`Connection: Content-Length` must not make chashd drop the body's
    length (the member would read the body as the next request)."""
    _, port, _ = start(procs, chashd, n=1)
    body = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    out = raw(port, b"POST /p HTTP/1.1\r\nHost: x\r\nConnection: close, "
              b"Content-Length, Host\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))
    got = responses(out)
    assert len(got) == 1
    import json
    j = json.loads(got[0][2])
    assert j["target"] == "/p" and j["body_len"] == len(body)
    assert j["body"].startswith("GET /smuggled")


def test_smuggling_vectors_refused(procs, chashd):
    """Each is refused with its status and reason, the connection is
    closed (nothing after it is read), no member is served a request from
    it, and chashd goes on serving. (A body whose chunk framing breaks is
    refused as it streams: the member has its head, then a closed
    connection, and never a whole request.)"""
    _, port, d = start(procs, chashd, n=1)
    for data, status, reason in SMUGGLING:
        out = raw(port, data + b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        got = responses(out)
        assert len(got) == 1, (data, out)
        st, hdrs, body = got[0]
        assert st == status, (data, out)
        assert hdrs["connection"] == "close"
        assert reason in body, (data, body)
    st, _, j = get_json(connection(port), "/ok")
    assert st == 200
    assert j["served"] == 1, "a refused request reached the member"


def test_wrk_keepalive_and_close(procs, chashd):
    """wrk's keep-alive and Connection: close loads: every response 2xx,
    spread over the members by the header's values."""
    wrk = shutil.which("wrk")
    if wrk is None:
        pytest.fail("wrk is missing: scripts/deps installs it")
    _, port, d = start(procs, chashd)
    script = procs.tmp / "users.lua"
    script.write_text(
        'local n = 0\n'
        'request = function()\n'
        '  n = n + 1\n'
        '  return wrk.format("GET", "/w", {["X-User-Id"] = "u" .. (n % 997)})\n'
        'end\n')
    for extra in ([], ["-H", "Connection: close"]):
        p = subprocess.run([wrk, "-t1", "-c8", "-d1s", "-s", str(script)] +
                           extra + ["http://127.0.0.1:%d/" % port],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        m = re.search(r"(\d+) requests in", p.stdout)
        assert m and int(m.group(1)) > 100, p.stdout
        assert "Non-2xx" not in p.stdout, p.stdout
        assert "Socket errors" not in p.stdout, p.stdout

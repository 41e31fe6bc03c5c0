"""http pools in operation: the admin API's drain and add under keep-alive
clients, bounded loads for a hot user, a reload that changes the hash_key
chain, timeouts of slow clients, clients that go away mid-request or
mid-response, and counters."""
import json
import socket
import threading
import time

from admin_util import Api, admin_global
from base_util import can_connect, free_port, lookup_config, wait_for
from http_util import (complete, connection, get_json, http_backends,
                       http_pool, raw, responses)


def start_admin(procs, chashd, n=3, **opts):
    members = http_backends(procs, n)
    port, aport = free_port(), free_port()
    text = http_pool(port, members, global_text=admin_global(aport), **opts)
    d = chashd(text, port)
    wait_for(lambda: can_connect(aport), what="admin API")
    return members, port, d, Api(aport), text


def test_add_and_drain_under_keepalive(procs, chashd):
    """On one keep-alive connection opened before the changes: a member
    added takes exactly the keys the admin API's lookup gives it; a member
    drained gets no request any more, its keys go to their next member in
    preference order, and no other key moves."""
    members, port, d, api, _ = start_admin(procs, chashd)
    keys = ["d%d" % i for i in range(150)]
    conn = connection(port)
    for k in keys[:10]:
        get_json(conn, "/", {"X-User-Id": k})
    extra = http_backends(procs, 1, prefix="x")[0]
    api.ok("POST", "/api/pools/web/members",
           {"name": "x1", "address": extra.addr})
    order = {k: api.lookup("web", k, replicas=2) for k in keys}
    for k in keys:
        _, _, j = get_json(conn, "/", {"X-User-Id": k})
        assert j["member"] == order[k][0], k
    assert any(order[k][0] == "x1" for k in keys)
    api.ok("PATCH", "/api/pools/web/members/h1", {"state": "drain"})
    for k in keys:
        _, _, j = get_json(conn, "/", {"X-User-Id": k})
        want = order[k][1] if order[k][0] == "h1" else order[k][0]
        assert j["member"] == want, (k, order[k])


def test_bounded_loads_spread_a_hot_user(procs, chashd):
    """Twelve slow requests of one user at once: with balance_factor 1.25
    its member takes its fair share and the rest spill to the next
    members (counted as spilled); without it, all go to one member."""
    for factor, want_spill in (("1.25", True), (None, False)):
        members = http_backends(procs, 3, prefix="b%s" % (factor or "0")[0])
        port, aport = free_port(), free_port()
        opts = {"balance_factor": factor} if factor else {}
        sub = procs.tmp / ("f%s" % factor)
        sub.mkdir()
        from base_util import Chashd
        d = Chashd(procs, str(sub), http_pool(
            port, members, global_text=admin_global(aport), **opts), port)
        wait_for(lambda: can_connect(aport), what="admin API")
        got = []

        def one():
            c = connection(port, timeout=10)
            _, _, j = get_json(c, "/slow?ms=400", {"X-User-Id": "hot"})
            got.append(j["member"])
        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        assert len(got) == 12
        body = Api(aport).ok("GET", "/api/pools/web")
        spilled = body["stats"]["spilled"]
        if want_spill:
            assert len(set(got)) > 1, got
            assert spilled and spilled > 0, body
        else:
            assert len(set(got)) == 1, got


def test_reload_changes_the_chain(procs, chashd):
    members, port, d, api, text = start_admin(procs, chashd,
                                              hash_key="header:X-A")
    keys = ["k%d" % i for i in range(40)]
    want = {k: v[0] for k, v in lookup_config(d.conf, "web", keys).items()}
    conn = connection(port)
    for k in keys:
        _, _, j = get_json(conn, "/", {"X-A": k, "X-B": "fixed"})
        assert j["member"] == want[k]
    d.reload(text.replace("hash_key: header:X-A", "hash_key: header:X-B"))
    fixed = lookup_config(d.conf, "web", ["fixed"])["fixed"][0]
    conn = connection(port)
    for k in keys:
        _, _, j = get_json(conn, "/", {"X-A": k, "X-B": "fixed"})
        assert j["member"] == fixed
    body = api.ok("GET", "/api/pools/web")
    assert body["settings"]["hash_key"] == "header:X-B"


def test_slow_clients_and_clients_that_leave(procs, chashd):
    """A head that does not come within idle_timeout gets 408; a client
    that goes away in the middle of its body or of a large response costs
    nothing but its own connection: chashd goes on serving, and the
    members' connections are not left half used."""
    members, port, d, api, _ = start_admin(procs, chashd,
                                           idle_timeout="500ms")
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    assert data.startswith(b"HTTP/1.1 408 "), data
    s.close()
    # an idle keep-alive client is closed quietly after idle_timeout
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while not complete(got):
        got += s.recv(65536)
    t0 = time.monotonic()
    assert s.recv(4096) == b""
    assert 0.3 < time.monotonic() - t0 < 3
    s.close()
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  b"100000\r\n\r\n" + b"x" * 5000)
        s.close()
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /big?n=3000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(1000)
        s.close()
    conn = connection(port)
    for i in range(30):
        st, _, j = get_json(conn, "/after", {"X-User-Id": "u%d" % i})
        assert st == 200 and j["target"] == "/after"
    body = api.ok("GET", "/api/pools/web")
    assert body["active"] <= 2, body["active"]


def test_request_counters(procs, chashd):
    """Requests served, refused and unparsable, in the API and /metrics."""
    members, port, d, api, _ = start_admin(procs, chashd)
    conn = connection(port)
    for i in range(50):
        get_json(conn, "/", {"X-User-Id": "c%d" % i})
    raw(port, b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
    body = api.ok("GET", "/api/pools/web")
    assert sum(m["requests"]["total"] for m in body["members"]) == 50
    req = body["stats"]["requests"]
    assert req["total"] == 51 and req["protocol_errors"] == 1
    assert req["refused"] == 1
    st, text, _ = api.call("GET", "/metrics")
    assert 'chashd_pool_protocol_errors_total{pool="web"} 1' in text


def test_http_health_checks_in_an_http_pool(procs, chashd):
    """health_check type http on a live http pool: a member that answers
    503 goes down after `fall` checks and its users are served by
    their next member; once it answers 200 again it comes back after
    `rise`, and takes its users back."""
    members, port, d, api, _ = start_admin(
        procs, chashd, health_check="{ type: http, path: /health, "
                                    "interval: 100ms, timeout: 500ms, "
                                    "rise: 2, fall: 2 }")
    keys = ["h%d" % i for i in range(60)]
    order = {k: v for k, v in lookup_config(d.conf, "web", keys,
                                            replicas=2).items()}
    sick = members[0]
    mine = [k for k in keys if order[k][0] == sick.name]
    assert mine
    sick.set("503")
    wait_for(lambda: api.ok("GET", "/api/pools/web/members/%s"
                            % sick.name)["state"] == "down",
             timeout=5, what="the member to go down")
    reason = api.ok("GET", "/api/pools/web/members/%s" % sick.name)["reason"]
    assert "503" in reason, reason
    conn = connection(port)
    for k in mine:
        _, _, j = get_json(conn, "/", {"X-User-Id": k})
        assert j["member"] == order[k][1]
    sick.set("200")
    wait_for(lambda: api.ok("GET", "/api/pools/web/members/%s"
                            % sick.name)["state"] == "up",
             timeout=5, what="the member to come back")
    for k in mine:
        _, _, j = get_json(conn, "/", {"X-User-Id": k})
        assert j["member"] == sick.name

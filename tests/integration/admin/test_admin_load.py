# test_admin_load.py -- a member added through the admin API while traffic
# flows from many client addresses (127.0.x.y): no request fails, no
# established connection is dropped, and exactly the clients whose key now
# belongs to the new member move -- all of them to it.
# SPDX-License-Identifier: BSD-2-Clause
import threading
import time

from admin_util import cluster  # noqa: F401 (fixture)
from base_util import Backend, KeepAlive, client_ip, fetch

CLIENTS = 150


def test_add_under_load_moves_only_the_new_members_keys(cluster):
    c = cluster(3)
    ips = [client_ip(i) for i in range(CLIENTS)]
    baseline = {ip: fetch(c.port, src=ip) for ip in ips}
    assert None not in baseline.values()
    assert set(baseline.values()) == {"web-1", "web-2", "web-3"}
    for ip in ips[:20]:
        assert c.api.lookup("web", ip) == [baseline[ip]]

    # established keep-alive connections, one per old member
    pinned = {}
    for ip in ips:
        if baseline[ip] not in pinned:
            pinned[baseline[ip]] = (ip, KeepAlive(c.port, src=ip))
    assert all(ka.ask() == name for name, (ip, ka) in pinned.items())

    results = []  # (start, end, ip, answer)
    stop = threading.Event()

    def load():
        deadline = time.monotonic() + 20  # bounded whatever happens
        i = 0
        while not stop.is_set() and time.monotonic() < deadline:
            ip = ips[i % CLIENTS]
            t0 = time.monotonic()
            got = fetch(c.port, src=ip)
            results.append((t0, time.monotonic(), ip, got))
            i += 1

    new = Backend(c.d.procs, "web-4")
    th = threading.Thread(target=load)
    th.start()
    try:
        while len(results) < 100 and th.is_alive():
            time.sleep(0.01)
        t_post = time.monotonic()
        rep = c.api.ok("POST", "/api/pools/web/members",
                       {"name": "web-4", "address": new.addr})
        t_done = time.monotonic()
        n_at_done = len(results)
        while len(results) < n_at_done + 2 * CLIENTS and th.is_alive():
            time.sleep(0.01)
    finally:
        stop.set()
        th.join(timeout=30)
    assert not th.is_alive()

    owner = {ip: c.api.lookup("web", ip)[0] for ip in ips}
    movers = {ip for ip in ips if owner[ip] != baseline[ip]}
    assert all(owner[ip] == "web-4" for ip in movers)
    # the fraction of clients that moved is near the exact report
    assert abs(len(movers) / CLIENTS - rep["moved"]) < 0.1, \
        (len(movers), rep["moved"])
    assert movers, "adding a fourth member moved nobody"

    before = [r for r in results if r[1] < t_post]
    after = [r for r in results if r[0] > t_done]
    assert len(before) >= 100 and len(after) >= 2 * CLIENTS - 5
    # traffic kept flowing: every request got an answer
    assert [r for r in results if r[3] is None] == []
    for t0, t1, ip, got in before:
        assert got == baseline[ip], (ip, got)
    for t0, t1, ip, got in after:
        assert got == owner[ip], (ip, got, baseline[ip])
    # requests in flight during the change went to the old or new owner
    for t0, t1, ip, got in results:
        assert got in (baseline[ip], owner[ip])

    # established connections stay where they were, even the ones whose
    # client now belongs to web-4
    for name, (ip, ka) in pinned.items():
        assert ka.ask() == name
        ka.close()
    m = c.api.members("web")
    assert m["web-4"]["connections_total"] >= len(movers)


def test_remove_and_maint_keep_established_connections(cluster):
    c = cluster(3)
    pinned = {}
    for i in range(200):
        ip = client_ip(i)
        owner = c.api.lookup("web", ip)[0]
        if owner not in pinned:
            pinned[owner] = KeepAlive(c.port, src=ip)
        if len(pinned) == 3:
            break
    assert {n: ka.ask() for n, ka in pinned.items()} == \
        {"web-1": "web-1", "web-2": "web-2", "web-3": "web-3"}
    c.api.ok("DELETE", "/api/pools/web/members/web-2")
    c.api.ok("PATCH", "/api/pools/web/members/web-3", {"state": "maint"})
    # new connections go only to web-1 now ...
    assert {fetch(c.port, src=client_ip(i)) for i in range(30)} == {"web-1"}
    # ... and the established ones still reach their member
    for name, ka in pinned.items():
        assert ka.ask() == name
        ka.close()

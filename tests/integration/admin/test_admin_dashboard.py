# test_admin_dashboard.py -- the dashboard in a real browser: headless
# Chromium loads GET / from a running chashd, its scripts fetch the JSON
# API, and the rendered DOM shows an arc per member, the member table and
# the change log, before and after a member is added through the API; for
# a redis pool (real redis-servers) each member's requests, requests/s
# from successive polls, in-flight requests and errors, beside a tcp pool
# whose rows stay as they were.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import shutil

import pytest

from admin_util import (CHASH, CHROMIUM, REPO, Api, admin_global,  # noqa
                        cluster, dashboard_c, dom_elements, dump_dom)
from base_util import Backend, can_connect, free_port, pool_yaml, wait_for
from redis_util import (REDIS_BENCHMARK, ChashdRedis, Err, RedisServer,
                        Simple, need_chashd_redis, redis_pool, spread_keys)

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason="chromium is not installed (scripts/deps installs it)")


def test_the_served_page_is_the_embedded_source(cluster):
    c = cluster(1, state=False)
    st, body, headers = c.api.raw("GET", "/")
    assert st == 200 and headers["Content-Type"].startswith("text/html")
    with open(os.path.join(REPO, "src", "api", "dashboard.html"), "rb") as f:
        html = f.read()
    assert body == html
    # self-contained: no external script, style, font or image
    assert not re.search(rb"""(src|href)\s*=""", body)
    assert b"<link" not in body and b"@import" not in body
    assert b"url(" not in body
    assert re.findall(rb'api\("([^"]*)', body) == \
        [b"/api/pools", b"/api/pools/", b"/api/pools/", b"/api/pools/",
         b"/api/changes"]
    with open(os.path.join(REPO, "src", "api", "dashboard.c")) as f:
        assert f.read() == dashboard_c(html), \
            "src/api/dashboard.c is stale: run admin_util.py --regen-dashboard"


def rendered(port, token=None):
    url = "http://127.0.0.1:%d/" % port
    if token:
        url += "#token=" + token
    dom = dump_dom(url)
    arcs = dom_elements(dom, "path", "arc")
    rows = dom_elements(dom, "tr", "member")
    changes = dom_elements(dom, "tr", "change")
    return dom, arcs, rows, changes


def test_the_ring_members_and_changes_render_and_follow_an_add(cluster):
    c = cluster(3, token="tok3n")
    dom, arcs, rows, changes = rendered(c.admin_port, "tok3n")
    assert 'class="status"' in dom and "live" in dom
    assert {a["data-member"] for a in arcs} == {"web-1", "web-2", "web-3"}
    assert all(a["data-pool"] == "web" for a in arcs)
    # the arcs tile the circle
    spans = sorted((float(a["data-start"]), float(a["data-end"]))
                   for a in arcs)
    assert spans[0][0] == 0 and spans[-1][1] == 1
    assert all(x[1] == y[0] for x, y in zip(spans, spans[1:]))
    assert [r["data-member"] for r in rows] == ["web-1", "web-2", "web-3"]
    assert all(r["data-state"] == "up" for r in rows)
    assert abs(sum(float(r["data-share"]) for r in rows) - 1) < 1e-9
    assert changes == []

    new = Backend(c.d.procs, "web-4")
    c.api.ok("POST", "/api/pools/web/members",
             {"name": "web-4", "address": new.addr, "weight": 2})
    c.api.ok("PATCH", "/api/pools/web/members/web-1", {"state": "drain"})

    dom, arcs, rows, changes = rendered(c.admin_port, "tok3n")
    # the ring shows where new keys go: the draining web-1 owns no arc
    assert {a["data-member"] for a in arcs} == {"web-2", "web-3", "web-4"}
    routing = {r["data-member"]: float(r["data-routing-share"]) for r in rows}
    assert routing["web-1"] == 0 and routing["web-4"] > 0.2
    assert sum(routing.values()) == pytest.approx(1, abs=1e-9)
    states = {r["data-member"]: r["data-state"] for r in rows}
    assert states == {"web-1": "draining", "web-2": "up", "web-3": "up",
                      "web-4": "up"}
    share = {r["data-member"]: float(r["data-share"]) for r in rows}
    assert share == pytest.approx(
        {n: m["share"] for n, m in c.api.members("web").items()}, abs=1e-9)
    assert [(x["data-op"], x["data-member"]) for x in changes] == \
        [("drain", "web-1"), ("add", "web-4")]
    assert float(changes[1]["data-moved"]) > 0

    # without the token the page says so instead of drawing
    dom, arcs, rows, _ = rendered(c.admin_port)
    assert arcs == [] and rows == []
    assert "401" in dom


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium")
def test_screenshot_renders(cluster, tmp_path):
    """A screenshot is produced (a human looked at one while writing the
    page: doc/admin.md describes what it shows)."""
    from admin_util import screenshot
    c = cluster(3, state=False)
    path = os.path.join(str(tmp_path), "dashboard.png")
    screenshot("http://127.0.0.1:%d/" % c.admin_port, path)
    with open(path, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 20000  # more than a blank page


# ---- request modes: requests/s, in flight and errors per member --------

def dashboard_reads(html, obj):
    """The fields of <obj> ("q", a member's or the pool's "requests"
    block as the page names it) that the page's script reads."""
    return set(re.findall(r"\b%s\.([a-z_]+)" % obj, html))


class RedisDashboard:
    """3 redis-servers in redis pool "cache" (cache-1..cache-3) and 2
    `chash serve` backends in tcp pool "web", one chashd, its admin API
    on; <owner>: which member owns each of <keys> (`chash lookup
    --config`, independent of the proxy)."""

    def __init__(self, procs, backends):
        need_chashd_redis()
        self.servers = [RedisServer(procs) for _ in range(3)]
        self.port, web_port, self.admin_port = (free_port(), free_port(),
                                                free_port())
        text = (admin_global(self.admin_port) +
                redis_pool("cache", self.port, self.servers, hash="murmur",
                           distribution="ketama", timeout=5000,
                           auto_eject_hosts="false") +
                pool_yaml("web", web_port, backends(2)))
        self.d = ChashdRedis(procs, text)
        wait_for(lambda: can_connect(self.admin_port), what="admin API")
        self.api = Api(self.admin_port)
        self.keys = ["dash:%d" % i for i in range(90)]
        self.owner = spread_keys(self.d.conf, "cache", self.keys, CHASH)


def cache_rows(dom):
    return {r["data-member"]: r for r in dom_elements(dom, "tr", "member")
            if r["data-pool"] == "cache"}


def test_request_pool_members_show_requests_in_flight_and_errors(
        procs, backends):
    """A redis pool's member rows carry the requests each member got, none
    in flight, and the request that failed on a killed member; the rate
    column is computed from two polls (0 req/s at rest); the tcp pool's
    rows and header stay as they were. Every field the page reads from the
    "requests" blocks exists in the API's answer for a redis pool."""
    env = RedisDashboard(procs, backends)
    with env.d.client() as c:
        assert c.pipeline([("SET", k, "v") for k in env.keys]) == \
            [Simple("OK")] * len(env.keys)
        env.servers[0].stop()
        dead_key = next(k for k in env.keys if env.owner[k] == "cache-1")
        assert c.call("GET", dead_key) == Err("ERR Connection refused")
    want = {n: sum(1 for k in env.keys if env.owner[k] == n)
            for n in ("cache-1", "cache-2", "cache-3")}
    want["cache-1"] += 1
    assert all(n > 10 for n in want.values())

    # the fields the page reads are in the API's answer
    with open(os.path.join(REPO, "src", "api", "dashboard.html")) as f:
        html = f.read()
    pool = env.api.pool("cache")
    member_fields = dashboard_reads(html, "q") - {"fragments", "local",
                                                  "refused", "errors",
                                                  "protocol_errors"}
    assert member_fields == {"total", "error_replies", "timeouts", "failed",
                             "inflight"}, member_fields
    for m in pool["members"]:
        assert member_fields <= set(m["requests"]), m["requests"]
    assert {"total", "fragments", "local", "refused", "errors",
            "protocol_errors"} <= set(pool["stats"]["requests"])

    dom = dump_dom("http://127.0.0.1:%d/" % env.admin_port)
    rows = cache_rows(dom)
    assert set(rows) == {"cache-1", "cache-2", "cache-3"}, dom[-2000:]
    assert {n: int(r["data-requests"]) for n, r in rows.items()} == want
    assert {n: int(r["data-errors"]) for n, r in rows.items()} == \
        {"cache-1": 1, "cache-2": 0, "cache-3": 0}
    assert {n: int(r["data-inflight"]) for n, r in rows.items()} == \
        {"cache-1": 0, "cache-2": 0, "cache-3": 0}
    # nothing sent while the page polled: a rate, and it is 0
    assert {n: float(r["data-rps"]) for n, r in rows.items()} == \
        {"cache-1": 0, "cache-2": 0, "cache-3": 0}
    card = re.search(r'<section class="pool" data-pool="cache">.*?</section>',
                     dom, re.S).group(0)
    assert "<th class=\"num\">req/s</th>" in card
    assert "<th class=\"num\">in flight</th>" in card
    pstats = dom_elements(card, "div", "requests")
    assert len(pstats) == 1
    assert int(pstats[0]["data-requests"]) == \
        pool["stats"]["requests"]["total"] == len(env.keys) + 1

    # the tcp pool: no request columns, no request attributes
    web = re.search(r'<section class="pool" data-pool="web">.*?</section>',
                    dom, re.S).group(0)
    assert "req/s" not in web and "in flight" not in web
    web_rows = [r for r in dom_elements(dom, "tr", "member")
                if r["data-pool"] == "web"]
    assert len(web_rows) == 2
    assert not any("data-rps" in r or "data-requests" in r for r in web_rows)
    assert dom_elements(web, "div", "requests") == []


def test_request_pool_rate_follows_live_traffic(procs, backends):
    """With redis-benchmark sending to the pool while the page polls, every
    member's requests/s and the pool's are above 0; once it stops, the
    next rendering shows 0 again. (dump_dom runs the page in Chromium's
    virtual time: its polls are a virtual second apart but only some real
    milliseconds, so the figure is not redis-benchmark's real rate; what
    this proves is that the rate follows the counters between polls.)"""
    env = RedisDashboard(procs, backends)
    bench = procs.start([REDIS_BENCHMARK, "-p", str(env.port), "-t",
                         "set,get", "-n", "100000000", "-r", "100000",
                         "-P", "16", "-c", "4", "-q"], "bench.log")

    def total():
        return env.api.pool("cache")["stats"]["requests"]["total"]
    start = total()
    wait_for(lambda: total() > start + 1000, timeout=10,
             what="redis-benchmark's requests through chashd")
    try:
        dom = dump_dom("http://127.0.0.1:%d/" % env.admin_port)
    finally:
        bench.kill()
        bench.wait(timeout=5)
    rows = cache_rows(dom)
    assert set(rows) == {"cache-1", "cache-2", "cache-3"}, dom[-2000:]
    assert all(float(r["data-rps"]) > 0 for r in rows.values()), rows
    pstats = dom_elements(dom, "div", "requests")
    assert len(pstats) == 1 and float(pstats[0]["data-rps"]) > 0

    # at rest again (the last requests answered), the rate falls to 0
    wait_for(lambda: all(m["requests"]["inflight"] == 0 for m in
                         env.api.pool("cache")["members"]),
             what="the benchmark's requests to be answered")
    rows = cache_rows(dump_dom("http://127.0.0.1:%d/" % env.admin_port))
    assert all(float(r["data-rps"]) == 0 for r in rows.values()), rows


def test_hot_keys_show_in_a_keyed_pool_card(procs, backends):
    """Under a load where one key takes half the requests, the redis
    pool's card names that key with its member (the API's answer), and the
    tcp pool's card has no hot key box."""
    import threading
    import time
    env = RedisDashboard(procs, backends)
    stop = threading.Event()

    def load():
        with env.d.client() as c:
            deadline = time.monotonic() + 60
            i = 0
            while not stop.is_set() and time.monotonic() < deadline:
                c.call("GET", "hot:1" if i % 2 == 0 else "cold:%d" % i)
                i += 1
    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        hot = wait_for(lambda: (lambda j: j if j["keys"] else None)(
            env.api.ok("GET", "/api/pools/cache/hot")), timeout=15,
            what="the API to name a hot key")
        assert hot["keys"][0]["key"] == "hot:1", hot
        dom = dump_dom("http://127.0.0.1:%d/" % env.admin_port)
    finally:
        stop.set()
        t.join(10)
    card = re.search(r'<section class="pool" data-pool="cache">.*?</section>',
                     dom, re.S).group(0)
    keys = dom_elements(card, "div", "hot-key")
    assert [k["data-key"] for k in keys] == ["hot:1"], card[-1500:]
    assert "on %s" % hot["keys"][0]["member"] in card
    web = re.search(r'<section class="pool" data-pool="web">.*?</section>',
                    dom, re.S).group(0)
    assert 'class="hot"' not in web

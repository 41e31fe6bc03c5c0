# test_admin_dashboard.py -- the dashboard in a real browser: headless
# Chromium loads GET / from a running chashd, its scripts fetch the JSON
# API, and the rendered DOM shows an arc per member, the member table and
# the change log, before and after a member is added through the API.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import shutil

import pytest

from admin_util import (CHROMIUM, REPO, Api, cluster, dashboard_c,  # noqa
                        dom_elements, dump_dom)
from conftest import Backend

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason="chromium is not installed (scripts/deps installs it)")


def test_the_served_page_is_the_embedded_source(cluster):
    c = cluster(1, state=False)
    st, body, headers = c.api.raw("GET", "/")
    assert st == 200 and headers["Content-Type"].startswith("text/html")
    with open(os.path.join(REPO, "src", "dashboard.html"), "rb") as f:
        html = f.read()
    assert body == html
    # self-contained: no external script, style, font or image
    assert not re.search(rb"""(src|href)\s*=""", body)
    assert b"<link" not in body and b"@import" not in body
    assert b"url(" not in body
    assert re.findall(rb'api\("([^"]*)', body) == \
        [b"/api/pools", b"/api/pools/", b"/api/changes"]
    with open(os.path.join(REPO, "src", "dashboard.c")) as f:
        assert f.read() == dashboard_c(html), \
            "src/dashboard.c is stale: run admin_util.py --regen-dashboard"


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

# test_membership_big.py -- big rings do not stall the control thread: a
# membership change of a pool near its max_points, and a reload whose
# rings take long to check, leave the admin API (and with it health
# checks, ramps and signals, on the same thread) answering meanwhile.
# Runtime changes that would exceed max_points, or make chashd a member of
# itself, are refused; a reload says which members the state file
# overrides.
# SPDX-License-Identifier: BSD-2-Clause
import os
import re
import threading

from admin_util import Api, admin_global, cluster  # noqa: F401 (fixture)
from base_util import can_connect, free_port, wait_for

HEAVY = 1000  # x 160 points per weight: 160,000 points per member


def heavy_pool(port, n, max_points=None):
    lines = ["web:", "  listen: 127.0.0.1:%d" % port, "  mode: tcp",
             "  slow_start: 0"]
    if max_points:
        lines.append("  max_points: %d" % max_points)
    lines.append("  servers:")
    # members nobody listens on: the ring is all this test needs
    for i in range(n):
        lines.append("    - 127.0.0.1:%d:%d m%d" % (free_port(), HEAVY, i))
    return "\n".join(lines) + "\n"


def answered_before(api, slow_call):
    """Run <slow_call> in a thread; while it is out, GET /api/pools. True
    when a GET came back before the slow call did."""
    done = threading.Event()
    result = {}

    def run():
        result["slow"] = slow_call()
        done.set()

    t = threading.Thread(target=run)
    t.start()
    got_first = False
    while not done.is_set():
        st, _, _ = api.get("/api/pools")
        assert st == 200
        if not done.is_set():
            got_first = True
            break
    t.join(timeout=60)
    assert done.is_set()
    return got_first, result["slow"]


def test_a_change_to_a_big_ring_does_not_stall_the_api(chashd):
    port, aport = free_port(), free_port()
    # 12 x 160,000 = 1.92 million points: over a second to build and
    # compare the rings of one change on this machine
    d = chashd(admin_global(aport) + heavy_pool(port, 12), port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    first, (st, rep, _) = answered_before(
        api, lambda: api.call("PATCH", "/api/pools/web/members/m3",
                              {"weight": 900}))
    assert st == 200 and rep["applied"] and rep["moved"] > 0
    assert first, "the admin API did not answer while the change was built"
    assert api.members("web")["m3"]["weight"] == 900
    d.wait_log(r"member m3 \S+ weight 1000 -> 900")


def test_a_change_over_max_points_is_refused(chashd):
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport) + heavy_pool(port, 3, max_points=500000),
               port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    before = api.pool("web")["checksum"]
    st, j, _ = api.call("POST", "/api/pools/web/members",
                        {"name": "m9", "address": "127.0.0.1:9",
                         "weight": HEAVY})
    assert st == 409 and "max_points 500000" in j["error"], j
    st, j, _ = api.call("PATCH", "/api/pools/web/members/m1",
                        {"weight": 5 * HEAVY})
    assert st == 409 and "max_points" in j["error"], j
    assert api.pool("web")["checksum"] == before
    # lowering stays allowed
    st, j, _ = api.call("PATCH", "/api/pools/web/members/m1", {"weight": 10})
    assert st == 200, j
    assert d.proc.poll() is None


def test_a_reload_whose_rings_take_long_does_not_stall_the_api(chashd,
                                                               tmp_path):
    port, aport = free_port(), free_port()
    d = chashd(admin_global(aport) + heavy_pool(port, 2), port)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    # the new file's ring check builds 1.92 million points
    with open(d.conf, "w") as f:
        f.write(admin_global(aport) + heavy_pool(port, 12))
    n = len(re.findall(r"reload: done", d.log()))

    def reload_and_wait():
        d.proc.send_signal(1)  # SIGHUP
        wait_for(lambda: len(re.findall(r"reload: done", d.log())) > n,
                 timeout=60, what="the reload")
        return True

    first, _ = answered_before(api, reload_and_wait)
    assert first, "the admin API did not answer while the reload loaded"
    assert len(api.members("web")) == 12


def test_a_runtime_member_may_not_be_chashd_itself(cluster):
    c = cluster(2)
    # its listen address, its admin address, and the wildcard address
    # Linux connects to the local host
    for addr in ("127.0.0.1:%d" % c.port, "127.0.0.1:%d" % c.admin_port,
                 "0.0.0.0:%d" % c.port):
        st, j, _ = c.api.call("POST", "/api/pools/web/members",
                              {"name": "me", "address": addr})
        assert st == 400 and "itself" in j["error"], (addr, j)
    assert set(c.api.members("web")) == {"web-1", "web-2"}


def test_a_reload_says_what_the_state_file_overrides(cluster):
    c = cluster(3)
    c.api.ok("PATCH", "/api/pools/web/members/web-2",
             {"weight": 4, "state": "drain"})
    c.d.reload(c.text)
    line = c.d.wait_log(r"\[warn\] pool web: member web-2: the state file "
                        r"overrides the config: (.*)")
    assert "weight 1 in the config, 4 at run time" in line[0]
    assert "state up in the config, drain at run time" in line[0]
    assert "chash ctl state --reset web web-2" in line[0]
    st = c.api.ok("GET", "/api/state")
    assert {(o["member"], o["what"]) for o in st["overrides"]} == \
        {("web-2", "weight"), ("web-2", "state")}
    assert os.path.exists(c.state_file)

# test_zones.py -- zone-then-member placement in chashd (zone_policy:
# hierarchical, doc/internals/placement.md "Zones"): 6 real redis-servers
# in 3 zones, replicas 3. Each key is kept on the 3 members `chash lookup
# --config --replicas 3` names (computed by the CLI from the same config,
# not by the proxy), in 3 distinct zones; with a whole zone killed every
# key still reads back its value. The config refuses a hierarchical pool
# with a server without a zone, and the admin API an add without one.
# SPDX-License-Identifier: BSD-2-Clause
import subprocess

from admin_util import CHASH, Api
from base_util import CHASHD, free_port
from redis_util import RedisServer, Simple, chashd_redis  # noqa: F401

ZONES = {"r1": "a", "r2": "a", "r3": "b", "r4": "b", "r5": "c", "r6": "c"}


def conf_text(aport, port, servers, **opts):
    lines = ["global:", "  admin: 127.0.0.1:%d" % aport, "  workers: 2",
             "store:", "  listen: 127.0.0.1:%d" % port, "  mode: redis",
             "  zone_policy: hierarchical", "  hash: murmur", "  replicas: 3",
             "  write_quorum: 3", "  auto_eject_hosts: false",
             "  timeout: 2000"]
    for k, v in opts.items():
        lines.append("  %s: %s" % (k, v))
    lines.append("  servers:")
    for name, srv in servers.items():
        lines.append("    - %s:1 %s %s" % (srv.addr, name, ZONES[name]))
    return "\n".join(lines) + "\n"


def replica_sets(conf, keys):
    """{key: [member, ...]} as `chash lookup --config --replicas 3` says."""
    r = subprocess.run([CHASH, "lookup", "--config", conf, "--pool", "store",
                        "--replicas", "3"] + keys, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        k, rest = line.split("\t", 1)
        out[k] = rest.replace(",", " ").split()
    assert set(out) == set(keys), r.stdout[:500]
    return out


def test_replicas_in_distinct_zones_survive_a_lost_zone(procs, chashd_redis):
    servers = {n: RedisServer(procs) for n in ZONES}
    aport, port = free_port(), free_port()
    d = chashd_redis(conf_text(aport, port, servers))
    keys = ["user:%d" % i for i in range(300)]
    sets = replica_sets(d.conf, keys)
    for k, members in sets.items():
        assert len(members) == 3, (k, members)
        assert len({ZONES[m] for m in members}) == 3, (k, members)
    # the keys spread over every member (murmur: no clustering)
    assert {m for ms in sets.values() for m in ms} == set(ZONES)
    c = d.client()
    for k in keys:
        assert c.call("SET", k, "v-" + k) == Simple("OK"), k
    # each key on exactly the members its set names
    wrong = []
    for k in keys:
        on = sorted(n for n, s in servers.items() if s.call("EXISTS", k) == 1)
        if on != sorted(sets[k]):
            wrong.append((k, on, sets[k]))
    assert wrong == [], wrong[:5]
    # the API shows each member's zone
    mem = Api(aport).members("store")
    assert {n: m["zone"] for n, m in mem.items()} == ZONES
    # zone c lost whole: every key reads back from its other zones
    for n in ("r5", "r6"):
        servers[n].stop()
    bad = [k for k in keys if c.call("GET", k) != ("v-" + k).encode()]
    assert bad == [], bad[:10]


def test_a_hierarchical_pool_needs_zones(procs, chashd_redis, tmp_path):
    servers = {n: RedisServer(procs) for n in ("r1", "r3")}
    conf = tmp_path / "nozone.yml"
    conf.write_text("store:\n  listen: 127.0.0.1:%d\n  mode: redis\n"
                    "  zone_policy: hierarchical\n  servers:\n"
                    "    - %s:1 r1 a\n    - %s:1 r3\n"
                    % (free_port(), servers["r1"].addr, servers["r3"].addr))
    r = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode != 0
    assert "server 'r3'" in r.stderr and "has no zone" in r.stderr, r.stderr
    # an add without a zone is refused; with one it joins its zone
    aport, port = free_port(), free_port()
    ZONES.setdefault("r3", "b")
    text = ("global:\n  admin: 127.0.0.1:%d\n" % aport +
            "store:\n  listen: 127.0.0.1:%d\n  mode: redis\n" % port +
            "  zone_policy: hierarchical\n  servers:\n"
            "    - %s:1 r1 a\n" % servers["r1"].addr)
    chashd_redis(text)
    api = Api(aport)
    st, j, _ = api.call("POST", "/api/pools/store/members",
                        {"name": "r3", "address": servers["r3"].addr})
    assert st == 400 and "zone" in j["error"], j
    st, j, _ = api.call("POST", "/api/pools/store/members",
                        {"name": "r3", "address": servers["r3"].addr,
                         "zone": "b"})
    assert st == 201, j
    # a second zone of equal weight takes about half the keys
    assert 0.3 < j["moved"] < 0.7, j
    assert api.members("store")["r3"]["zone"] == "b"


def test_sim_and_plot_show_zones(tmp_path):
    conf = tmp_path / "z.yml"
    lines = ["store:", "  listen: 127.0.0.1:%d" % free_port(),
             "  mode: redis", "  zone_policy: hierarchical", "  hash: murmur",
             "  servers:"]
    for i, (name, zone) in enumerate(sorted(ZONES.items())):
        lines.append("    - 127.0.0.1:%d:1 %s %s" % (7301 + i, name, zone))
    conf.write_text("\n".join(lines) + "\n")
    sim = subprocess.run([CHASH, "sim", "--config", str(conf), "--pool",
                          "store", "--keys", "20000"], capture_output=True,
                         text=True, timeout=60)
    assert sim.returncode == 0, sim.stderr
    rows = {}
    for line in sim.stdout.split("== init")[1].splitlines()[1:8]:
        f = line.split()
        if f and f[0] in ZONES:
            rows[f[0]] = f[-1]
    assert rows == ZONES, sim.stdout[:800]
    svg = tmp_path / "z.svg"
    plot = subprocess.run([CHASH, "plot", "--config", str(conf), "--pool",
                           "store", "--out", str(svg)], capture_output=True,
                          text=True, timeout=60)
    assert plot.returncode == 0, plot.stderr
    text = svg.read_text()
    import re
    zones = set(re.findall(r'class="zone-arc" data-zone="([^"]+)"', text))
    assert zones == {"a", "b", "c"}, zones
    assert set(re.findall(r'class="legend-zone" data-zone="([^"]+)"',
                          text)) == {"a", "b", "c"}


def test_zone_weights(procs, chashd_redis, tmp_path):
    """zone_weights: zone a weighs 6 against b and c at their members' sum
    (2 each): a takes about 60% of the key space, as the API's exact
    shares say; a zone no server is in is refused."""
    servers = {n: RedisServer(procs) for n in ZONES}
    aport, port = free_port(), free_port()
    d = chashd_redis(conf_text(aport, port, servers, zone_weights="{a: 6}"))
    mem = Api(aport).members("store")
    share = {z: sum(m["share"] for n, m in mem.items() if ZONES[n] == z)
             for z in "abc"}
    assert abs(share["a"] - 0.6) < 0.05, share
    assert abs(share["b"] - 0.2) < 0.05 and abs(share["c"] - 0.2) < 0.05
    # the CLI builds the same ring from the same file
    keys = ["k%d" % i for i in range(200)]
    sets = replica_sets(d.conf, keys)
    c = d.client()
    for k in keys[:50]:
        assert c.call("SET", k, "x") == Simple("OK")
        on = sorted(n for n, s in servers.items() if s.call("EXISTS", k) == 1)
        assert on == sorted(sets[k]), (k, on, sets[k])
    # a reload may not move a member to another zone (replicas: it would
    # move copies): refused, said in the log, the placement kept
    import signal
    from base_util import wait_for
    with open(d.conf) as f:
        text = f.read()
    with open(d.conf, "w") as f:
        f.write(text.replace("%s:1 r1 a" % servers["r1"].addr,
                             "%s:1 r1 b" % servers["r1"].addr))
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "zones" in d.log() and "may not change" in d.log(),
             timeout=10, what="the reload to be refused")
    assert Api(aport).members("store")["r1"]["zone"] == "a"
    bad = tmp_path / "bad.yml"
    bad.write_text(conf_text(free_port(), free_port(), servers,
                             zone_weights="{z: 3}"))
    r = subprocess.run([CHASHD, "-t", "-c", str(bad)], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode != 0 and "zone 'z'" in r.stderr, r.stderr

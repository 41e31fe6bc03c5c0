# test_admin_ctl.py -- `chash ctl` end to end against a running chashd:
# tables by default, --json for scripts, each change with its migration
# report, API errors printed with exit 1, bad arguments exit 2 with usage;
# the ctl examples of chash(1); `chash sim` and `chash plot --config`
# checked against the rings chashd builds from the same file.
# SPDX-License-Identifier: BSD-2-Clause
import json
import re
import subprocess
import xml.etree.ElementTree as ET

import pytest

from admin_util import CHASH, cluster  # noqa: F401 (fixture)
from base_util import Backend, free_port, pool_yaml
from ctl_util import ctl, ctl_examples, run_ctl_examples


def test_ctl_reads_pools_members_and_lookups(cluster):
    c = cluster(3)
    out = ctl(c, "pools", check=0).stdout.splitlines()
    assert out[0].split()[:3] == ["POOL", "MODE", "LISTEN"]
    row = out[1].split()
    assert row[:5] == ["web", "tcp", "127.0.0.1:%d" % c.port, "ring", "xxh3"]
    assert row[5] == "3" and row[7] == c.api.pool("web")["checksum"]

    out = ctl(c, "show", "web", check=0).stdout
    assert "pool web: tcp on 127.0.0.1:%d, ring/xxh3" % c.port in out
    rows = {l.split()[0]: l.split() for l in out.splitlines()
            if l.startswith("web-")}
    api = c.api.members("web")
    assert set(rows) == set(api)
    for name, r in rows.items():
        assert r[1] == api[name]["address"] and r[2] == "up"
        assert float(r[-1].rstrip("%")) == pytest.approx(
            100 * api[name]["share"], abs=0.001)

    out = ctl(c, "lookup", "web", "127.0.0.9", "--replicas", "2",
              check=0).stdout
    want = c.api.lookup("web", "127.0.0.9", replicas=2)
    assert re.findall(r"\t(\S+) \(", out) == want

    # --json prints the API's own answer
    j = json.loads(ctl(c, "--json", "show", "web", check=0).stdout)
    p = c.api.pool("web")
    assert j["checksum"] == p["checksum"] and j["settings"] == p["settings"]
    assert [m["name"] for m in j["members"]] == ["web-1", "web-2", "web-3"]


def test_ctl_changes_print_their_migration_report(cluster):
    c = cluster(3)
    b4 = Backend(c.d.procs, "web-4")
    before = c.api.pool("web")["checksum"]
    out = ctl(c, "add", "web", "web-4", b4.addr, "--weight", "2",
              "--dry-run", check=0).stdout
    assert out.startswith("dry run, nothing changed: pool web: add web-4")
    assert c.api.pool("web")["checksum"] == before

    out = ctl(c, "add", "web", "web-4", b4.addr, "--weight", "2",
              check=0).stdout
    m = re.search(r"moved ([\d.]+)% of the key space at full ramp "
                  r"\(optimal ([\d.]+)%\)", out)
    assert m, out
    share = c.api.members("web")["web-4"]["share"]
    assert float(m.group(1)) == pytest.approx(100 * share, abs=1e-3)
    assert float(m.group(2)) == pytest.approx(100 * share, abs=1e-3)
    flows = re.findall(r"^  (\S+)\s+-> (\S+)\s+([\d.]+)%$", out, re.M)
    assert {f[1] for f in flows} == {"web-4"} and len(flows) == 3
    assert sum(float(f[2]) for f in flows) == \
        pytest.approx(float(m.group(1)), abs=1e-3)
    assert c.api.members("web")["web-4"]["weight"] == 2

    j = json.loads(ctl(c, "--json", "weight", "web", "web-1", "3",
                       check=0).stdout)
    assert j["applied"] is True and {f["to"] for f in j["flows"]} == \
        {"web-1"}
    assert c.api.members("web")["web-1"]["weight"] == 3
    ctl(c, "drain", "web", "web-2", check=0)
    assert c.api.members("web")["web-2"]["state"] == "draining"
    ctl(c, "maint", "web", "web-2", check=0)
    assert c.api.members("web")["web-2"]["state"] == "maint"
    ctl(c, "up", "web", "web-2", check=0)
    assert c.api.members("web")["web-2"]["state"] == "up"
    out = ctl(c, "remove", "web", "web-3", check=0).stdout
    assert "pool web: remove web-3" in out and "web-3 " in out
    assert set(c.api.members("web")) == {"web-1", "web-2", "web-4"}
    assert c.api.ok("GET", "/api/changes")["total"] == 6


def test_ctl_errors(cluster):
    c = cluster(2, token="t0k")
    # API errors: the JSON error, exit 1
    p = ctl(c, "show", "web", check=1)
    assert "token" in p.stderr and "401" in p.stderr
    p = ctl(c, "show", "nope", token="t0k", check=1)
    assert 'no pool named "nope"' in p.stderr and "404" in p.stderr
    p = ctl(c, "remove", "web", "nope", token="t0k", check=1)
    assert 'no member named "nope"' in p.stderr
    p = ctl(c, "add", "web", "x", c.backends[0].addr, token="t0k", check=1)
    assert "already member" in p.stderr and "409" in p.stderr
    p = ctl(c, "weight", "web", "web-1", "0", token="t0k", check=0)
    p = ctl(c, "weight", "web", "web-2", "0", token="t0k", check=1)
    assert "no ring" in p.stderr or "owns" in p.stderr, p.stderr
    # transport errors: exit 1
    p = subprocess.run([CHASH, "ctl", "--admin",
                        "127.0.0.1:%d" % free_port(), "pools"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "cannot connect" in p.stderr
    # bad arguments: exit 2 and the usage
    for args in ([], ["frobnicate"], ["show"], ["show", "a", "b"],
                 ["add", "web", "x"], ["weight", "web", "web-1", "heavy"],
                 ["pools", "--weight", "3"], ["lookup", "web"],
                 ["lookup", "web", "k", "--replicas", "0"],
                 ["show", "web", "--dry-run"], ["--bogus", "pools"],
                 ["--admin"], ["reweight", "web", "web-1"],
                 ["reweight", "web", "web-1", "heavy"],
                 ["reweight", "web", "web-1", "2", "--weight", "2"],
                 ["state", "web"], ["state", "--reset"],
                 ["state", "--reset", "web", "web-1", "x"],
                 ["state", "--dry-run"], ["show", "web", "--reset"],
                 ["remove", "web", "web-1", "--reset"]):
        p = ctl(c, *args, token="t0k")
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "usage: chash ctl" in p.stderr, args
    assert set(c.api.members("web")) == {"web-1", "web-2"}


def test_ctl_reweight_is_weight(cluster):
    c = cluster(3)
    usage = ctl(c, "--help", check=0).stdout
    assert re.search(r"^  reweight POOL NAME W \[--dry-run\]", usage, re.M)
    # the same request, the same report, word for word
    a = ctl(c, "weight", "web", "web-1", "3", "--dry-run", check=0).stdout
    b = ctl(c, "reweight", "web", "web-1", "3", "--dry-run", check=0).stdout
    assert a == b
    assert a.startswith("dry run, nothing changed: pool web: weight of "
                        "web-1 -> 3\n")
    ja = json.loads(ctl(c, "--json", "weight", "web", "web-1", "3",
                        "--dry-run", check=0).stdout)
    jb = json.loads(ctl(c, "--json", "reweight", "web", "web-1", "3",
                        "--dry-run", check=0).stdout)
    assert ja == jb and ja["applied"] is False
    assert c.api.members("web")["web-1"]["weight"] == 1
    out = ctl(c, "reweight", "web", "web-2", "2", check=0).stdout
    assert out.startswith("pool web: weight of web-2 -> 2\n")
    flows = re.findall(r"^  (\S+)\s+-> (\S+)\s+[\d.]+%$", out, re.M)
    assert flows and {f[1] for f in flows} == {"web-2"}
    assert c.api.members("web")["web-2"]["weight"] == 2
    # its errors are weight's
    p = ctl(c, "reweight", "web", "nope", "2", check=1)
    assert 'no member named "nope"' in p.stderr


def test_man_page_ctl_examples(cluster):
    # the page's chashd: web-1..3 of weight 1 on the ring, a state file
    c = cluster(3)
    examples = ctl_examples(c, "127.0.0.1:%d" % free_port())
    first_state = [i for i, (cmd, _) in enumerate(examples)
                   if cmd.startswith("chash ctl state")][0]
    # `ctl state` needs chashd's overrides: test_ctl_state.py runs those
    assert first_state >= 4
    run_ctl_examples(c, examples[:first_state])


def test_sim_and_plot_config_build_chashds_rings(cluster):
    c = cluster(3)
    # a second pool of the same backends with weights 1, 3 and 2, another
    # hash and fewer points, added to the running config by a reload
    db = pool_yaml("db", free_port(),
                   [(b, w) for b, w in zip(c.backends, (1, 3, 2))],
                   distribution="ring", hash="murmur3", points_per_weight=40)
    c.d.reload(c.text + db)
    assert c.api.members("db")["web-2"]["weight"] == 3
    conf = c.d.conf
    for pool in ("web", "db"):
        api = c.api.members(pool)
        doc = json.loads(subprocess.run(
            [CHASH, "sim", "--json", "--config", conf, "--pool", pool],
            capture_output=True, text=True, timeout=60, check=True).stdout)
        sim = {m["name"]: m for m in doc["steps"][0]["members"]}
        assert set(sim) == set(api)
        for name, m in sim.items():
            assert m["weight"] == api[name]["weight"]
            assert m["share"] == pytest.approx(api[name]["share"], abs=1e-9)
        svg = subprocess.run(
            [CHASH, "plot", "--config", conf, "--pool", pool],
            capture_output=True, text=True, timeout=60, check=True).stdout
        root = ET.fromstring(svg)
        legend = {g.get("data-member"): float(g.get("data-share"))
                  for g in root.iter("{http://www.w3.org/2000/svg}g")
                  if g.get("class") == "legend-item"}
        assert set(legend) == set(api)
        for name, share in legend.items():
            assert share == pytest.approx(api[name]["share"], abs=1e-6)

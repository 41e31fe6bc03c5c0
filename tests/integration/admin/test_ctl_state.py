# test_ctl_state.py -- `chash ctl state` against a real chashd with a state
# file: the runtime overrides it lists after changes made with `chash ctl`,
# --json, dropping one member's overrides and then a whole pool's (each
# with --dry-run first), the pool back to its config, and the errors.
# Needs chashd's GET /api/state "overrides" and DELETE /api/state/pools/...
# SPDX-License-Identifier: BSD-2-Clause
import json
import re

import pytest

from admin_util import cluster  # noqa: F401 (fixture)
from base_util import Backend, free_port
from ctl_util import ctl, ctl_examples, run_ctl_examples


def state_rows(text):
    """The rows of `chash ctl state` as (pool, member, what, config,
    runtime), cut at the header's columns (values hold blanks)."""
    lines = text.splitlines()
    head = lines[0]
    assert head.split() == ["POOL", "MEMBER", "WHAT", "CONFIG", "RUNTIME"]
    cuts = [head.index(w) for w in ("MEMBER", "WHAT", "CONFIG", "RUNTIME")]
    rows = []
    for line in lines[1:]:
        parts, start = [], 0
        for cut in cuts:
            parts.append(line[start:cut].strip())
            start = cut
        parts.append(line[start:].strip())
        rows.append(tuple(parts))
    return rows


def override_key(o):
    return (o["pool"], o["member"], o["what"])


def config_members(c):
    return {b.name: (b.addr, 1) for b in c.backends}


def members_now(c, pool="web"):
    return {n: (m["address"], m["weight"])
            for n, m in c.api.members(pool).items()}


def test_ctl_state_lists_and_resets_the_overrides(cluster, chashd):
    c = cluster(3)
    out = ctl(c, "state", check=0).stdout
    assert out == "no runtime overrides: every pool runs as its config " \
        "says\n"
    b1, b2, b3 = c.backends
    b4 = Backend(c.d.procs, "web-4")
    ctl(c, "add", "web", "web-4", b4.addr, "--weight", "2", check=0)
    ctl(c, "weight", "web", "web-1", "3", check=0)
    ctl(c, "drain", "web", "web-2", check=0)
    ctl(c, "remove", "web", "web-3", check=0)

    rows = state_rows(ctl(c, "state", check=0).stdout)
    assert rows == [
        ("web", "web-1", "weight", "1", "3"),
        ("web", "web-2", "state", "up", "drain"),
        ("web", "web-3", "removed", "%s weight 1" % b3.addr, "-"),
        ("web", "web-4", "added", "-", "%s weight 2 up" % b4.addr),
    ]
    j = json.loads(ctl(c, "--json", "state", check=0).stdout)
    assert j["file"] == c.state_file
    assert j["pools"] == c.state()["pools"]
    assert sorted(j["overrides"], key=override_key) == [
        {"pool": "web", "member": "web-1", "what": "weight",
         "config": 1, "runtime": 3},
        {"pool": "web", "member": "web-2", "what": "state",
         "config": "up", "runtime": "drain"},
        {"pool": "web", "member": "web-3", "what": "removed",
         "config": {"address": b3.addr, "weight": 1}, "runtime": None},
        {"pool": "web", "member": "web-4", "what": "added", "config": None,
         "runtime": {"address": b4.addr, "weight": 2, "state": "up"}},
    ]

    # one member, dry run first: its report is that of the change back
    checksum = c.api.pool("web")["checksum"]
    out = ctl(c, "state", "--reset", "web", "web-1", "--dry-run",
              check=0).stdout
    assert out.startswith("dry run, nothing changed: pool web: reset web-1 "
                          "to its config\n  would drop 1 override\n"), out
    assert c.api.pool("web")["checksum"] == checksum
    assert c.api.members("web")["web-1"]["weight"] == 3
    back = json.loads(ctl(c, "--json", "weight", "web", "web-1", "1",
                          "--dry-run", check=0).stdout)
    rep = json.loads(ctl(c, "--json", "state", "--reset", "web", "web-1",
                         "--dry-run", check=0).stdout)
    assert rep["dropped"] == 1
    assert rep["dry_run"] is True and rep["applied"] is False
    assert rep["moved"] == pytest.approx(back["moved"], abs=1e-9)
    assert rep["optimal"] == pytest.approx(back["optimal"], abs=1e-9)
    assert [(f["from"], f["to"]) for f in rep["flows"]] == \
        [(f["from"], f["to"]) for f in back["flows"]]

    out = ctl(c, "state", "--reset", "web", "web-1", check=0).stdout
    assert out.startswith("pool web: reset web-1 to its config\n"
                          "  dropped 1 override\n"), out
    m = re.search(r"moved ([\d.]+)% of the key space", out)
    assert m and float(m.group(1)) == pytest.approx(100 * back["moved"],
                                                    abs=1e-3)
    assert c.api.members("web")["web-1"]["weight"] == 1
    assert [r[1] for r in state_rows(ctl(c, "state", check=0).stdout)] == \
        ["web-2", "web-3", "web-4"]
    # nothing left to drop for web-1; no such pool
    p = ctl(c, "state", "--reset", "web", "web-1", check=1)
    assert "HTTP 404" in p.stderr
    p = ctl(c, "state", "--reset", "nope", check=1)
    assert "HTTP 404" in p.stderr

    # the whole pool: back to the config's membership
    members = members_now(c)
    out = ctl(c, "state", "--reset", "web", "--dry-run", check=0).stdout
    assert out.startswith("dry run, nothing changed: pool web: reset to its "
                          "config\n  would drop 3 overrides\n"), out
    assert members_now(c) == members
    out = ctl(c, "state", "--reset", "web", check=0).stdout
    assert out.startswith("pool web: reset to its config\n"
                          "  dropped 3 overrides\n"), out
    flows = re.findall(r"^  (\S+)\s+-> (\S+)\s+[\d.]+%$", out, re.M)
    # web-4's keys leave it, web-2 and web-3 take theirs back
    assert {f[0] for f in flows} >= {"web-4"}
    assert {f[1] for f in flows} >= {"web-2", "web-3"}
    assert members_now(c) == config_members(c)
    assert {m["state"] for m in c.api.members("web").values()} == {"up"}
    assert ctl(c, "state", check=0).stdout.startswith("no runtime overrides")
    assert c.state()["pools"] == {}
    # and it stays so after a restart
    c.restart(chashd)
    assert members_now(c) == config_members(c)


def test_ctl_state_address_and_maint(cluster):
    c = cluster(3)
    b3 = c.backends[2]
    moved = Backend(c.d.procs, "web-3b")
    ctl(c, "remove", "web", "web-3", check=0)
    ctl(c, "add", "web", "web-3", moved.addr, check=0)
    ctl(c, "maint", "web", "web-1", check=0)
    rows = state_rows(ctl(c, "state", check=0).stdout)
    assert rows == [("web", "web-1", "state", "up", "maint"),
                    ("web", "web-3", "address", b3.addr, moved.addr)]
    out = ctl(c, "state", "--reset", "web", "web-3", check=0).stdout
    assert "dropped 1 override" in out
    assert c.api.members("web")["web-3"]["address"] == b3.addr
    out = ctl(c, "state", "--reset", "web", "web-1", check=0).stdout
    assert "dropped 1 override" in out
    assert c.api.members("web")["web-1"]["state"] == "up"
    assert ctl(c, "state", check=0).stdout.startswith("no runtime overrides")


def test_ctl_state_needs_the_token(cluster):
    c = cluster(2, token="t0k")
    ctl(c, "drain", "web", "web-1", token="t0k", check=0)
    p = ctl(c, "state", check=1)
    assert "401" in p.stderr
    p = ctl(c, "state", "--reset", "web", check=1)
    assert "401" in p.stderr
    assert c.api.members("web")["web-1"]["state"] == "draining"
    rows = state_rows(ctl(c, "state", token="t0k", check=0).stdout)
    assert rows == [("web", "web-1", "state", "up", "drain")]
    ctl(c, "state", "--reset", "web", token="t0k", check=0)
    assert c.api.members("web")["web-1"]["state"] == "up"


def test_ctl_state_without_a_state_file(cluster):
    c = cluster(2, state=False)
    ctl(c, "weight", "web", "web-2", "2", check=0)
    out = ctl(c, "state", check=0).stdout
    assert state_rows(out.split("no state_file")[0]) == \
        [("web", "web-2", "weight", "1", "2")]
    assert "no state_file: the overrides are lost when chashd stops" in out


def test_man_page_ctl_state_examples(cluster):
    # all the page's ctl examples in order: the state ones follow from the
    # changes before them
    c = cluster(3)
    examples = ctl_examples(c, "127.0.0.1:%d" % free_port())
    assert any(cmd.startswith("chash ctl state") for cmd, _ in examples)
    run_ctl_examples(c, examples)

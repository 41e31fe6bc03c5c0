# test_cli.py -- the chash command line as a user runs it: sim (the default
# history, reweights, failures, clients, --config), lookup (arguments,
# stdin, replicas, --config), plot (a valid SVG, --config), bench --json,
# and the manual page chash(1): every option documented, every example
# printing what the page says.
# SPDX-License-Identifier: BSD-2-Clause
import json
import math
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from man_util import MAN, man_examples, man_text, run_example

BUILD = os.environ.get("CHASH_BUILD", "/work/main/build")
CHASH = os.path.join(BUILD, "chash")
SVG = "{http://www.w3.org/2000/svg}"
ALGOS = ["ring", "maglev", "rendezvous", "jump", "ketama", "nginx"]


def chash(*args, stdin=None, check=True, timeout=120):
    """Run chash; return the CompletedProcess (text mode)."""
    p = subprocess.run([CHASH, *args], input=stdin, capture_output=True,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("chash %s: exit %d\n%s" % (
            " ".join(args), p.returncode, p.stderr))
    return p


def sim_json(*args):
    return json.loads(chash("sim", "--json", *args).stdout)


def lookup_map(members, keys, *opts):
    """key -> owner through `chash lookup`, keys on stdin."""
    out = chash("lookup", "--members", members, *opts,
                stdin="".join(k + "\n" for k in keys)).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[0] for r in rows] == list(keys)
    return {r[0]: r[1] for r in rows}


DATA_KEYS = ["data_key_%d" % i for i in range(10000)]


# ---- sim: the seeds' scenario ----------------------------------------

def test_default_sim_moves_a_quarter_and_nothing_between_survivors():
    text = chash("sim").stdout
    steps = re.split(r"^== ", text, flags=re.M)[1:]
    titles = [s.split(":")[0] for s in steps]
    assert titles == ["init", "+Server-D", "-Server-B", "+Server-E"]
    moved = {}
    for s in steps[1:]:
        m = re.search(r"moved \(key by key\):\s+(\d+) of 10000 keys", s)
        assert m, s
        moved[s.split(":")[0]] = int(m.group(1))
        m = re.search(r"moved between members other than \S+: (\d+) keys", s)
        assert m and int(m.group(1)) == 0, s
    # adding a fourth member to three moves about a quarter of the keys
    assert 0.18 <= moved["+Server-D"] / 10000 <= 0.32

    doc = sim_json()
    assert [st["op"] for st in doc["steps"]] == titles
    for st in doc["steps"]:
        assert sum(m["keys"] for m in st["members"]) == 10000
        assert abs(sum(m["share"] for m in st["members"]) - 1) < 1e-6
        assert st["moved_between_survivors"] == 0
        assert st["moved_fraction"] == pytest.approx(st["moved_keys"] / 1e4)
        assert st["peak_to_mean"] >= 1
    for st in doc["steps"][1:]:
        # text and JSON tell the same story
        assert st["moved_keys"] == moved[st["op"]]
        # the ring moves exactly the optimum; keys follow within noise
        assert st["exact_moved"] == pytest.approx(st["optimal"], abs=1e-9)
        assert abs(st["moved_fraction"] - st["exact_moved"]) < 0.03
    add = doc["steps"][1]
    share_d = [m for m in add["members"] if m["name"] == "Server-D"][0]
    assert add["optimal"] == pytest.approx(share_d["share"])
    assert add["optimal_by_weight"] == pytest.approx(0.25)


def test_sim_agrees_with_lookup_key_by_key():
    # sim and lookup both default to chashd's 160 points per weight
    doc = sim_json()
    assert doc["points"] == 160
    before = lookup_map("Server-A,Server-B,Server-C", DATA_KEYS)
    after = lookup_map("Server-A,Server-B,Server-C,Server-D", DATA_KEYS)
    for st, owners in ((doc["steps"][0], before), (doc["steps"][1], after)):
        for m in st["members"]:
            assert m["keys"] == sum(1 for v in owners.values()
                                    if v == m["name"])
    changed = [k for k in DATA_KEYS if before[k] != after[k]]
    assert len(changed) == doc["steps"][1]["moved_keys"]
    assert all(after[k] == "Server-D" for k in changed)


def test_sim_reweight_moves_only_to_that_member():
    doc = sim_json("--ops", "+Server-D=2,Server-A=3,-Server-C")
    ops = [st["op"] for st in doc["steps"]]
    assert ops == ["init", "+Server-D=2", "Server-A=3", "-Server-C"]
    prev = doc["steps"][1]
    rew = doc["steps"][2]
    a_before = [m for m in prev["members"] if m["name"] == "Server-A"][0]
    a_after = [m for m in rew["members"] if m["name"] == "Server-A"][0]
    assert a_after["weight"] == 3
    # every moved key went to Server-A, and no key moved between others
    assert rew["moved_between_survivors"] == 0
    assert a_after["keys"] - a_before["keys"] == rew["moved_keys"] > 0
    assert rew["optimal"] == pytest.approx(
        a_after["share"] - a_before["share"])
    assert rew["exact_moved"] == pytest.approx(rew["optimal"], abs=1e-9)
    d = [m for m in prev["members"] if m["name"] == "Server-D"][0]
    assert d["weight"] == 2 and d["share"] > 0.3


@pytest.mark.parametrize("algo", ALGOS)
def test_sim_every_algorithm(algo):
    doc = sim_json("--algo", algo)
    assert doc["algo"] == algo
    for st in doc["steps"]:
        assert sum(m["keys"] for m in st["members"]) == 10000
    for st in doc["steps"][1:]:
        if algo == "maglev":
            # maglev states its extra movement instead of promising none
            assert st["moved_fraction"] < 3 * st["optimal"]
        elif algo == "jump" and st["op"].startswith("-"):
            # jump renumbers the members after a removed one
            assert st["moved_keys"] > 0
        else:
            assert st["moved_between_survivors"] == 0, st["op"]


@pytest.mark.parametrize("members", ["db1,db2,db3", "n10,n11,n12,n13"])
def test_sim_short_similar_names_are_balanced(members):
    # a user naming servers db1, db2, db3 expects a third of the keys each
    doc = sim_json("--members", members, "--points", "160")
    n = len(members.split(","))
    for m in doc["steps"][0]["members"]:
        assert 0.5 / n < m["share"] < 1.5 / n, m


def test_sim_seed_picks_other_keys_reproducibly():
    a = sim_json("--seed", "7", "--keys", "2000")
    b = sim_json("--seed", "7", "--keys", "2000")
    c = sim_json("--seed", "8", "--keys", "2000")
    assert a == b
    assert a["steps"][0]["members"] != c["steps"][0]["members"]


# ---- sim --fail: the avalanche view ----------------------------------

@pytest.mark.parametrize("factor", ["1.1", "1.25", "2"])
def test_sim_fail_bounded_never_above_cap(factor):
    doc = sim_json("--members", "a,b,c,d,e,f,g,h", "--points", "2",
                   "--fail", "c", "--factor", factor)
    fail = doc["fail"]
    assert fail["member"] == "c" and fail["factor"] == float(factor)
    surv = fail["survivors"]
    assert [s["name"] for s in surv] == list("abdefgh")
    assert sum(s["plain"] for s in surv) == 10000
    assert sum(s["bounded"] for s in surv) == 10000
    # equal weights: every survivor's cap is ceil(factor x keys / 7)
    cap = math.ceil(float(factor) * 10000 / 7)
    for s in surv:
        assert s["cap"] == cap
        assert s["bounded"] <= cap, s
        assert s["plain"] >= s["before"]
        assert s["bounded"] >= s["bounded_before"]
    init = {m["name"]: m["keys"] for m in doc["steps"][0]["members"]}
    assert fail["keys"] == init["c"]
    assert all(s["before"] == init[s["name"]] for s in surv)
    assert fail["peak_to_mean_bounded"] <= float(factor) + 0.01


def test_sim_fail_text_and_errors():
    out = chash("sim", "--fail", "Server-B").stdout
    assert "== fail Server-B" in out and "never above 1" in out
    p = chash("sim", "--fail", "Server-Z", check=False)
    assert p.returncode == 2 and "Server-Z" in p.stderr
    p = chash("sim", "--fail", "Server-A", "--factor", "0.5", check=False)
    assert p.returncode == 2 and "--factor" in p.stderr


# ---- sim --clients: the Java seed's scenario -------------------------

def test_sim_clients_changes_and_final_mapping():
    doc = sim_json("--clients", "60")
    steps = doc["steps"]
    for st in steps[1:]:
        assert len(st["changes"]) == st["moved_keys"]
        for ch in st["changes"]:
            assert re.fullmatch(r"10\.0\.\d+\.\d+", ch["client"])
            assert ch["from"] != ch["to"]
    final = {f["client"]: f["member"] for f in doc["final"]}
    assert len(final) == 60
    want = lookup_map("Server-A,Server-C,Server-D,Server-E", list(final))
    assert final == want
    text = chash("sim", "--clients", "60").stdout
    lines = re.findall(r"^  client (\S+)\s+(\S+) -> (\S+)$", text, re.M)
    assert len(lines) == sum(st["moved_keys"] for st in steps[1:])
    assert "== final mapping" in text


# ---- sim: bad arguments ----------------------------------------------

@pytest.mark.parametrize("args,word", [
    (["--ops", "+Server-A"], "already a member"),
    (["--ops", "-Server-Q"], "not a member"),
    (["--ops", "Server-A"], "NAME=W"),
    (["--ops", "Server-A=x"], "whole number"),
    (["--keys", "-5"], "--keys"),
    (["--points", "0"], "--points"),
    (["--members", "A,,B"], "empty member name"),
    (["--members", "A,A"], "listed twice"),
    (["--frob"], "--frob"),
    (["--points"], "needs a value"),
    (["extra"], "unexpected argument"),
    (["--factor", "1.5"], "--factor goes with --fail"),
    (["--clients", "5", "--key-prefix", "k"], "--key-prefix"),
    (["--clients", "5", "--keys", "9"], "--clients and --keys"),
])
def test_sim_bad_arguments(args, word):
    p = chash("sim", *args, check=False)
    assert p.returncode == 2
    assert word in p.stderr and "usage: chash sim" in p.stderr
    assert p.stdout == ""


# ---- lookup ----------------------------------------------------------

def test_lookup_args_stdin_and_weights():
    members = "127.0.0.1:6381=2,127.0.0.1:6382,cache-c=1"
    keys = ["user:%d" % i for i in range(300)]
    by_args = chash("lookup", "--members", members, *keys).stdout
    by_stdin = chash("lookup", "--members", members,
                     stdin="\r\n".join(keys) + "\r\n").stdout
    assert by_args == by_stdin
    owners = [line.split("\t")[1] for line in by_args.splitlines()]
    assert set(owners) == {"127.0.0.1:6381", "127.0.0.1:6382", "cache-c"}
    # the weight-2 member gets the most keys
    counts = {o: owners.count(o) for o in set(owners)}
    assert max(counts, key=counts.get) == "127.0.0.1:6381"


@pytest.mark.parametrize("algo", ALGOS)
def test_lookup_replicas_distinct(algo):
    out = chash("lookup", "--algo", algo, "--members", "a,b,c,d,e",
                "--replicas", "3", *["k%d" % i for i in range(200)]).stdout
    first = lookup_map("a,b,c,d,e", ["k%d" % i for i in range(200)],
                       "--algo", algo)
    for line in out.splitlines():
        row = line.split("\t")
        assert len(row) == 4 and len(set(row[1:])) == 3
        assert row[1] == first[row[0]]
    # more replicas than members: all members, each once
    out = chash("lookup", "--algo", algo, "--members", "a,b,c",
                "--replicas", "5", "k").stdout
    assert sorted(out.split()[1:]) == ["a", "b", "c"]


@pytest.mark.parametrize("args,word", [
    (["--algo", "consistent", "--members", "a"],
     "valid names are: ring, maglev, rendezvous, jump, ketama, nginx"),
    (["--hash", "sha1", "--members", "a"], "valid names are: xxh3"),
    (["--members", "a=heavy"], "whole number"),
    (["--members", "=3"], "empty member name"),
    (["k1"], "--members is required"),
    (["--replicas", "0", "--members", "a"], "--replicas"),
    (["--config", "/nonexistent.yml"], "--pool"),
])
def test_lookup_bad_arguments(args, word):
    p = chash("lookup", *args, check=False)
    assert p.returncode == 2, p.stderr
    assert word in p.stderr


def test_top_level_usage_and_version():
    p = chash("frobnicate", check=False)
    assert p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr
    assert "usage: chash" in p.stderr
    p = chash(check=False)
    assert p.returncode == 2
    assert re.fullmatch(r"chash \d+\.\d+\.\d+\n", chash("--version").stdout)
    out = chash("--help").stdout
    for cmd in ("sim", "lookup", "bench", "plot", "serve"):
        assert cmd in out


def test_lookup_config_matches_members(tmp_path):
    conf = tmp_path / "chashd.yml"
    conf.write_text(
        "global:\n  admin: 127.0.0.1:8404\n"
        "web:\n  listen: 127.0.0.1:18080\n  mode: tcp\n"
        "  distribution: ring\n  hash: murmur3\n  points_per_weight: 40\n"
        "  servers:\n"
        "    - 127.0.0.1:9001:1 web-1\n"
        "    - 127.0.0.1:9002:3 web-2\n"
        "    - { address: 127.0.0.1:9003, weight: 2, name: web-3 }\n")
    ips = ["127.0.%d.%d" % (i // 200, i % 200 + 1) for i in range(400)]
    got = chash("lookup", "--config", str(conf), "--pool", "web",
                stdin="\n".join(ips) + "\n").stdout
    want = chash("lookup", "--members", "web-1,web-2=3,web-3=2",
                 "--hash", "murmur3", "--points", "40",
                 stdin="\n".join(ips) + "\n").stdout
    assert got == want
    p = chash("lookup", "--config", str(conf), "--pool", "api", "x",
              check=False)
    assert p.returncode == 2 and "its pools are: web" in p.stderr
    p = chash("lookup", "--config", str(conf), "--pool", "web",
              "--members", "a", "x", check=False)
    assert p.returncode == 2


def test_lookup_config_hash_tag_and_bad_file(tmp_path):
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(
        "beta:\n  listen: 127.0.0.1:22122\n  hash: md5\n"
        "  hash_tag: \"{}\"\n  distribution: ketama\n  redis: true\n"
        "  servers:\n"
        "   - 127.0.0.1:6380:1 server1\n   - 127.0.0.1:6381:1 server2\n"
        "   - 127.0.0.1:6382:1 server3\n   - 127.0.0.1:6383:1 server4\n")
    keys = ["{user%d}.profile" % i for i in range(50)]
    tagged = chash("lookup", "--config", str(conf), "--pool", "beta",
                   *keys).stdout.splitlines()
    bare = chash("lookup", "--config", str(conf), "--pool", "beta",
                 *["user%d" % i for i in range(50)]).stdout.splitlines()
    # a tagged key goes where its tag content goes
    assert [t.split("\t")[1] for t in tagged] == \
        [b.split("\t")[1] for b in bare]
    assert len({b.split("\t")[1] for b in bare}) > 1
    bad = tmp_path / "bad.yml"
    bad.write_text("web:\n  listen: 127.0.0.1:1\n  distribution: spiral\n"
                   "  servers:\n    - 127.0.0.1:9001:1\n")
    p = chash("lookup", "--config", str(bad), "--pool", "web", "x",
              check=False)
    assert p.returncode == 2  # a config error, as for chashd -t
    assert re.search(r"bad\.yml:\d+:", p.stderr), p.stderr


def test_lookup_stdin_skips_empty_lines():
    # a blank line between keys is not the empty key
    out = chash("lookup", "--members", "a,b,c",
                stdin="k1\n\nk2\r\n\r\n\nk3").stdout
    assert [l.split("\t")[0] for l in out.splitlines()] == ["k1", "k2", "k3"]
    assert out == chash("lookup", "--members", "a,b,c", "k1", "k2",
                        "k3").stdout
    assert chash("lookup", "--members", "a,b,c", stdin="\n\n").stdout == ""
    # an empty key given as an argument is still looked up
    out = chash("lookup", "--members", "a,b,c", "").stdout
    assert len(out.splitlines()) == 1 and out.startswith("\t")


# ---- --config for sim and plot ---------------------------------------

WEB_YML = (
    "global:\n  admin: off\n"
    "web:\n  listen: 127.0.0.1:18080\n  mode: tcp\n"
    "  distribution: ring\n  hash: murmur3\n  points_per_weight: 40\n"
    "  balance_factor: 1.5\n"
    "  servers:\n"
    "    - 127.0.0.1:9001:1 web-1\n"
    "    - 127.0.0.1:9002:3 web-2\n"
    "    - { address: 127.0.0.1:9003, weight: 2, name: web-3 }\n"
    "plain:\n  listen: 127.0.0.1:18081\n  mode: tcp\n"
    "  servers:\n    - 127.0.0.1:9011:1 p-1\n    - 127.0.0.1:9012:1 p-2\n"
    "mod:\n  listen: 127.0.0.1:18082\n  distribution: modula\n"
    "  servers:\n    - 127.0.0.1:9021:1\n    - 127.0.0.1:9022:1\n")


@pytest.fixture
def web_yml(tmp_path):
    path = tmp_path / "chashd.yml"
    path.write_text(WEB_YML)
    return str(path)


def owners_by_config(conf, pool, keys):
    out = chash("lookup", "--config", conf, "--pool", pool,
                stdin="".join(k + "\n" for k in keys)).stdout
    return {l.split("\t")[0]: l.split("\t")[1] for l in out.splitlines()}


def test_sim_config_plays_the_pools_ring(web_yml):
    doc = sim_json("--config", web_yml, "--pool", "web", "--keys", "3000",
                   "--ops", "+web-4=2,-web-1")
    assert (doc["config"], doc["pool"]) == (web_yml, "web")
    assert (doc["algo"], doc["hash"], doc["points"]) == \
        ("ring", "murmur3", 40)
    init = doc["steps"][0]["members"]
    assert [(m["name"], m["weight"]) for m in init] == \
        [("web-1", 1), ("web-2", 3), ("web-3", 2)]
    # the keys sit where `chash lookup --config` (chashd's ring) puts them
    owners = owners_by_config(web_yml, "web",
                              ["data_key_%d" % i for i in range(3000)])
    for m in init:
        assert m["keys"] == sum(1 for o in owners.values() if o == m["name"])
    assert [st["op"] for st in doc["steps"]] == ["init", "+web-4=2", "-web-1"]
    for st in doc["steps"][1:]:
        assert st["moved_between_survivors"] == 0
        assert st["exact_moved"] == pytest.approx(st["optimal"], abs=1e-9)
    text = chash("sim", "--config", web_yml, "--pool", "web").stdout
    assert text.startswith("chash sim: pool web of %s, algorithm ring, "
                           "hash murmur3, 40 points per weight" % web_yml)
    # with --config there is no default history: only the initial step
    assert re.findall(r"^== (\S+):", text, re.M) == ["init"]


def test_sim_config_fail_uses_the_pools_balance_factor(web_yml):
    doc = sim_json("--config", web_yml, "--pool", "web", "--fail", "web-2")
    assert doc["fail"]["factor"] == 1.5
    assert [s["name"] for s in doc["fail"]["survivors"]] == ["web-1", "web-3"]
    doc = sim_json("--config", web_yml, "--pool", "web", "--fail", "web-2",
                   "--factor", "1.1")
    assert doc["fail"]["factor"] == 1.1
    # a pool without balance_factor: the default 1.25
    doc = sim_json("--config", web_yml, "--pool", "plain", "--fail", "p-1")
    assert doc["fail"]["factor"] == 1.25
    p = chash("sim", "--config", web_yml, "--pool", "web", "--fail", "x",
              check=False)
    assert p.returncode == 2 and "--fail x" in p.stderr


def test_sim_and_plot_config_hash_tag(tmp_path):
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(
        "beta:\n  listen: 127.0.0.1:22122\n  hash: fnv1a_64\n"
        "  hash_tag: \"{}\"\n  distribution: ketama\n  redis: true\n"
        "  servers:\n"
        "   - 127.0.0.1:6380:1 server1\n   - 127.0.0.1:6381:1 server2\n"
        "   - 127.0.0.1:6382:1 server3\n   - 127.0.0.1:6383:1 server4\n")
    # every key shares the tag {user1}: one member gets them all, the one
    # `chash lookup --config` names for the tag's content
    owner = owners_by_config(str(conf), "beta", ["user1"])["user1"]
    doc = sim_json("--config", str(conf), "--pool", "beta",
                   "--key-prefix", "{user1}.", "--keys", "500")
    keys = {m["name"]: m["keys"] for m in doc["steps"][0]["members"]}
    assert keys[owner] == 500 and sum(keys.values()) == 500
    root = parse_svg(chash("plot", "--config", str(conf), "--pool", "beta",
                           "--loads", "--key-prefix", "{user1}.",
                           "--keys", "500").stdout)
    bars = {r.get("data-member"): int(r.get("data-keys"))
            for r in root.iter(SVG + "rect") if r.get("class") == "bar"}
    assert bars[owner] == 500
    # without a tag in the keys they spread
    doc = sim_json("--config", str(conf), "--pool", "beta", "--keys", "500")
    assert all(m["keys"] > 0 for m in doc["steps"][0]["members"])


def plot_parts(text):
    """(arcs, legend) of a plot: the picture without its title."""
    root = parse_svg(text)
    arcs = [(p.get("data-member"), p.get("d")) for p in root.iter(SVG + "path")
            if p.get("class") == "arc"]
    legend = [(g.get("data-member"), g.get("data-weight"), g.get("data-share"))
              for g in root.iter(SVG + "g") if g.get("class") == "legend-item"]
    return arcs, legend


def test_plot_config_draws_the_pools_ring(web_yml):
    by_config = chash("plot", "--config", web_yml, "--pool", "web").stdout
    by_hand = chash("plot", "--members", "web-1,web-2=3,web-3=2", "--hash",
                    "murmur3", "--points", "40").stdout
    assert plot_parts(by_config) == plot_parts(by_hand)
    assert len(plot_parts(by_config)[0]) > 3
    assert "chash plot: pool web, 3 members, algorithm ring, hash murmur3, " \
        "40 points per weight" in by_config


def test_sim_and_plot_default_to_160_points_like_chashd(web_yml):
    # chashd builds a pool without points_per_weight with 160
    doc = sim_json("--config", web_yml, "--pool", "plain")
    assert doc["points"] == 160
    assert sim_json()["points"] == 160
    assert sim_json("--points", "160") == sim_json()
    text = chash("plot", "--members", "a,b,c").stdout
    assert "160 points per weight" in text
    assert text == chash("plot", "--members", "a,b,c", "--points",
                         "160").stdout
    assert plot_parts(chash("plot", "--config", web_yml, "--pool",
                            "plain").stdout) == \
        plot_parts(chash("plot", "--members", "p-1,p-2").stdout)


@pytest.mark.parametrize("cmd", ["sim", "plot", "lookup"])
@pytest.mark.parametrize("opt", [["--members", "a,b"], ["--algo", "maglev"],
                                 ["--hash", "md5"], ["--points", "10"],
                                 ["--table-size", "7"]])
def test_config_refuses_ring_options_beside_it(web_yml, cmd, opt):
    p = chash(cmd, "--config", web_yml, "--pool", "web", *opt, "k",
              check=False) if cmd == "lookup" else \
        chash(cmd, "--config", web_yml, "--pool", "web", *opt, check=False)
    assert p.returncode == 2, p.stderr
    assert "%s cannot go with --config" % opt[0] in p.stderr
    assert "usage: chash %s" % cmd in p.stderr and p.stdout == ""


@pytest.mark.parametrize("cmd", ["sim", "plot", "lookup"])
def test_config_errors(web_yml, tmp_path, cmd):
    p = chash(cmd, "--config", web_yml, check=False)
    assert p.returncode == 2 and "--config and --pool go together" in p.stderr
    p = chash(cmd, "--pool", "web", check=False)
    assert p.returncode == 2 and "--config and --pool go together" in p.stderr
    p = chash(cmd, "--config", web_yml, "--pool", "api", check=False)
    assert p.returncode == 2
    assert "has no pool 'api'; its pools are: web, plain, mod" in p.stderr
    p = chash(cmd, "--config", web_yml, "--pool", "mod", check=False)
    assert p.returncode == 1 and "not consistent hashing" in p.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text("web:\n  listen: 127.0.0.1:1\n  distribution: spiral\n"
                   "  servers:\n    - 127.0.0.1:9001:1\n")
    p = chash(cmd, "--config", str(bad), "--pool", "web", check=False)
    assert p.returncode == 2 and re.search(r"bad\.yml:3:", p.stderr), \
        p.stderr


@pytest.mark.parametrize("cmd", ["sim", "plot", "lookup"])
@pytest.mark.parametrize("args,word", [
    (["--algo", "maglev", "--points", "40"], "--points sets the points"),
    (["--algo", "ketama", "--points", "40"], "ketama gives each server"),
    (["--points", "40", "--table-size", "7"], "--table-size goes with"),
])
def test_ring_options_that_change_nothing_are_refused(cmd, args, word):
    p = chash(cmd, "--members", "a,b", *args, check=False)
    assert p.returncode == 2 and word in p.stderr, p.stderr
    assert p.stdout == ""


# ---- plot ------------------------------------------------------------

def parse_svg(text):
    root = ET.fromstring(text)
    assert root.tag == SVG + "svg"
    return root


def test_plot_svg_arcs_legend_and_loads(tmp_path):
    out = tmp_path / "ring.svg"
    members = "Server-A,Server-B=2,10.0.0.9:80,a&b<c>"
    chash("plot", "--members", members, "--points", "20", "--loads",
          "--keys", "5000", "--out", str(out))
    root = parse_svg(out.read_text())
    names = ["Server-A", "Server-B", "10.0.0.9:80", "a&b<c>"]
    colours = {}
    for path in root.iter(SVG + "path"):
        if path.get("class") != "arc":
            continue
        colours.setdefault(path.get("data-member"), set()).add(
            path.get("fill"))
    assert set(colours) == set(names)
    assert all(len(c) == 1 for c in colours.values())
    assert len({c.pop() for c in colours.values()}) == len(names)
    legend = [g for g in root.iter(SVG + "g")
              if g.get("class") == "legend-item"]
    assert [g.get("data-member") for g in legend] == names
    assert sum(float(g.get("data-share")) for g in legend) == \
        pytest.approx(1, abs=1e-6)
    assert [g.get("data-weight") for g in legend] == ["1", "2", "1", "1"]
    bars = [r for r in root.iter(SVG + "rect") if r.get("class") == "bar"]
    assert sum(int(b.get("data-keys")) for b in bars) == 5000


@pytest.mark.parametrize("algo", ALGOS)
def test_plot_stdout_every_algorithm(algo):
    text = chash("plot", "--algo", algo, "--members", "a,b,c").stdout
    root = parse_svg(text)
    members = {p.get("data-member") for p in root.iter(SVG + "path")
               if p.get("class") == "arc"}
    assert members == {"a", "b", "c"}


def test_plot_bad_arguments():
    p = chash("plot", check=False)
    assert p.returncode == 2 and "--members is required" in p.stderr
    p = chash("plot", "--members", "a", "--keys", "5", check=False)
    assert p.returncode == 2 and "--loads" in p.stderr
    p = chash("plot", "--members", "a", "--out", "/nonexistent/x.svg",
              check=False)
    assert p.returncode == 1 and "/nonexistent/x.svg" in p.stderr


# ---- bench -----------------------------------------------------------

def test_bench_json_structure():
    doc = json.loads(chash("bench", "--json", "--members", "10", "--keys",
                           "10000", "--rounds", "1").stdout)
    res = doc["results"]
    assert [r["algo"] for r in res] == ALGOS
    for r in res:
        assert r["members"] == 10 and r["keys"] == 10000
        for f in ("ns_per_lookup", "lookups_per_s", "build_ms",
                  "memory_bytes", "points", "bytes_per_point",
                  "peak_to_mean", "cv"):
            assert r[f] > 0, (r["algo"], f)
        for change in ("add", "remove"):
            mv = r[change]
            assert 0 < mv["optimal"] < 1
            assert 0 <= mv["moved_fraction"] <= 1
    ring = res[0]
    assert ring["add"]["exact_ratio"] == pytest.approx(1)
    assert ring["remove"]["exact_ratio"] == pytest.approx(1)
    assert ring["points"] == 1600
    text = chash("bench", "--algo", "ring", "--members", "10", "--keys",
                 "10000", "--rounds", "1").stdout
    assert re.search(r"^ring\s+10000\s+[\d.]+", text, re.M)
    doc = json.loads(chash("bench", "--json", "--algo", "ring", "--members",
                           "10", "--keys", "10000", "--rounds", "1",
                           "--latency").stdout)
    assert doc["results"][0]["ns_per_lookup_dependent"] > 0
    assert "ns_per_lookup_dependent" not in res[0]
    p = chash("bench", "--algo", "spiral", check=False)
    assert p.returncode == 2 and "valid names are" in p.stderr


# ---- the manual page -------------------------------------------------

def masked(text):
    """Numbers out, runs of blanks as one: what does not depend on time."""
    return [re.sub(r"\d+(\.\d+)?", "#", line).split()
            for line in text.splitlines()]


def test_man_page_examples_print_what_the_page_says(tmp_path):
    ran = []
    for cmd, expected in man_examples():
        if cmd.startswith("chash ctl"):
            continue  # test_admin_ctl.py runs them against a real chashd
        p = run_example(cmd, expected, str(tmp_path))
        assert p.returncode == 0, (cmd, p.stderr)
        if cmd.startswith("chash bench"):
            # times differ from run to run; the rest must not
            assert masked(p.stdout) == masked(expected), cmd
        else:
            assert p.stdout == expected, "%s\n%s" % (cmd, p.stdout)
        m = re.search(r"--out (\S+)", cmd)
        if m:
            parse_svg((tmp_path / m.group(1)).read_text())
        ran.append(cmd.split()[:2])
    for what in (["chash", "sim"], ["chash", "lookup"], ["chash", "plot"],
                 ["chash", "bench"], ["cat", "pool.yml"]):
        assert what in ran, what


def man_source():
    with open(MAN) as f:
        return f.read()


@pytest.mark.parametrize("cmd", ["sim", "lookup", "plot", "bench", "serve",
                                 "ctl"])
def test_man_page_documents_every_option(cmd):
    man = man_text(man_source())
    assert re.search(r"^\.SS chash %s$" % cmd, man, re.M)
    usage = chash(cmd, "--help").stdout
    options = set(re.findall(r"--[a-z][a-z-]*", usage))
    assert options
    for opt in options:
        assert opt in man, "%s %s is not in chash(1)" % (cmd, opt)


def test_man_page_documents_every_ctl_command():
    usage = chash("ctl", "--help").stdout
    commands = re.findall(r"^  ([a-z]+)\b", usage.split("commands:", 1)[1]
                          .split("options:", 1)[0], re.M)
    assert {"pools", "show", "add", "remove", "weight", "reweight", "drain",
            "up", "maint", "lookup", "state", "migration",
            "replication", "batch", "cluster", "hot",
            "rebalance"} == set(commands)
    man = man_source()
    ctl = man.split(".SS chash ctl", 1)[1].split(".SH ", 1)[0]
    for c in commands:
        assert re.search(r"^\.BI? %s\b" % c, ctl, re.M), c
    assert "\\-\\-reset" in ctl and "\\-\\-dry\\-run" in ctl
    for c in chash("--help").stdout.split("commands:")[1].split("\n\n")[0] \
            .split("\n")[1:]:
        assert ".SS chash %s" % c.split()[0] in man


def test_man_page_documents_the_sim_json(web_yml):
    man = man_text(man_source())
    doc = sim_json("--clients", "20", "--fail", "Server-A",
                   "--ops", "+Server-D")
    config = sim_json("--config", web_yml, "--pool", "web", "--keys", "10")
    keys = set(doc) | set(config)
    for st in doc["steps"]:
        keys |= set(st)
        for m in st["members"]:
            keys |= set(m)
        for ch in st.get("changes", []):
            keys |= set(ch)
    keys |= set(doc["fail"]) | set(doc["fail"]["survivors"][0])
    keys |= set(doc["final"][0])
    for k in sorted(keys):
        assert re.search(r"\b%s\b" % k, man), "sim --json's %s" % k


def test_man_page_speaks_to_users():
    man = man_text(man_source())
    shown = "\n".join(l for l in man.splitlines() if not l.startswith('.\\"'))
    for pattern in (r"(?<!-)\bseeds?\b", r"\bseed's\b", r"\bwaves?\b",
                    r"\bissues?\b", r"#\d+", r"\bJava\b", r"\bTODO\b",
                    r"\bFIXME\b"):
        assert not re.search(pattern, shown, re.I), pattern


@pytest.mark.skipif(shutil.which("groff") is None,
                    reason="groff is not installed")
def test_man_page_renders_without_warnings():
    p = subprocess.run(["groff", "-man", "-t", "-ww", "-z", MAN],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr

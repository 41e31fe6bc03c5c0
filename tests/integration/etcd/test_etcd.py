# test_etcd.py -- several chashd instances take a pool's members from one
# etcd (doc/etcd.md) and route every key alike: the first instance seeds
# etcd from its config, the others do not; 30 membership changes written
# to etcd (adds, removes, weights, drain/maint, bulk txns) converge on
# every instance (equal checksums, equal lookups of 1,000 keys, real
# client connections reaching the same member); admin API changes go
# through etcd and reach every instance (one by one and as one batch
# txn, with the same migration report in every change log); a reload
# keeps etcd's members; /api/cluster, the metrics and `chash ctl cluster`
# show the instances; malformed records are ignored alike everywhere;
# `chashd -t` wants global.etcd for `members_from: etcd` and refuses
# migration with it.
# SPDX-License-Identifier: BSD-2-Clause
import json
import os
import re
import socket
import subprocess
import time

from admin_util import parse_metrics
from base_util import CHASH, CHASHD, client_ip, fetch, free_port, wait_for
from etcd_util import (Instance, Tree, etcd, member_record,  # noqa: F401
                       now_ms, quantiles, servers_yaml, start_instances,
                       wait_converged)

POOL = "web"
N_KEYS = 1000          # keys looked up on every instance after each change
N_FETCH = 12           # real client connections per instance and change
CONVERGE_TIMEOUT = 10.0


def lookup_all(inst, keys, pool=POOL):
    """{key: owner} of <keys> on <inst>, one request after the other on one
    keep-alive connection over a plain socket (0.06 ms a lookup;
    http.client takes 0.3 ms, and libmicrohttpd answers pipelined requests
    slowly)."""
    s = socket.create_connection(("127.0.0.1", inst.admin_port), timeout=10)
    out, buf = {}, b""
    try:
        for k in keys:
            s.sendall(b"GET /api/pools/%s/lookup?key=%s HTTP/1.1\r\n"
                      b"Host: 127.0.0.1\r\n\r\n" % (pool.encode(),
                                                     k.encode()))
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(1 << 16)
                assert chunk, "%s closed after %d lookups" % (inst.name,
                                                             len(out))
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            while len(buf) < n:
                chunk = s.recv(1 << 16)
                assert chunk, "%s closed in an answer" % inst.name
                buf += chunk
            body, buf = buf[:n], buf[n:]
            assert head.startswith(b"HTTP/1.1 200"), (inst.name, k, head,
                                                       body)
            j = json.loads(body)
            assert j["key"] == k, (j, k)
            out[k] = j["members"][0]["name"]
    finally:
        s.close()
    return out


def norm(rec):
    """A member record as (address, weight, state) with the defaults."""
    return (rec["address"], rec.get("weight", 1), rec.get("state", "up"))


class Model:
    """The pool's members as the test wrote them to etcd."""

    def __init__(self, tree, addr, members):
        self.tree = tree
        self.addr = addr                      # backend name -> address
        self.m = dict(members)                # name -> (address, w, state)

    def apply(self, ops):
        """One change, ONE txn: ops are ("add", name[, weight]),
        ("rm", name), ("w", name, weight), ("st", name, state). Its
        revision W."""
        put, delete = {}, []
        for op in ops:
            kind, name = op[0], op[1]
            if kind == "add":
                assert name not in self.m, op
                self.m[name] = (self.addr[name],
                                op[2] if len(op) > 2 else 1, "up")
                put[name] = self.m[name]
            elif kind == "rm":
                del self.m[name]
                delete.append(name)
            elif kind == "w":
                a, w, st = self.m[name]
                assert w != op[2], op
                self.m[name] = put[name] = (a, op[2], st)
            elif kind == "st":
                a, w, st = self.m[name]
                assert st != op[2], op
                self.m[name] = put[name] = (a, w, op[2])
        assert any(st == "up" and w > 0 for _, w, st in self.m.values())
        return self.tree.txn_members(POOL, put=put, delete=delete)


# 30 changes starting from web-1..web-4; some bulk (several ops, one txn)
CHANGES = [
    [("add", "web-5")],
    [("w", "web-1", 3)],
    [("st", "web-2", "drain")],
    [("add", "web-6", 2)],
    [("add", "web-7"), ("add", "web-8"), ("rm", "web-3")],
    [("st", "web-4", "maint")],
    [("st", "web-2", "up")],
    [("rm", "web-5")],
    [("w", "web-6", 1)],
    [("st", "web-7", "drain"), ("w", "web-8", 5), ("add", "web-9")],
    [("add", "web-10")],
    [("st", "web-4", "up")],
    [("rm", "web-1")],
    [("add", "web-1", 2), ("add", "web-3"), ("rm", "web-9")],
    [("st", "web-10", "maint")],
    [("w", "web-2", 4)],
    [("st", "web-6", "drain")],
    [("rm", "web-7"), ("rm", "web-8"), ("st", "web-6", "up")],
    [("add", "web-5", 3)],
    [("st", "web-10", "up")],
    [("w", "web-3", 2)],
    [("st", "web-1", "maint"), ("st", "web-3", "drain"), ("add", "web-7")],
    [("rm", "web-4")],
    [("w", "web-10", 10)],
    [("add", "web-8")],
    [("st", "web-1", "up"), ("st", "web-3", "up"), ("rm", "web-2"),
     ("w", "web-5", 1)],
    [("st", "web-8", "drain")],
    [("rm", "web-10")],
    [("add", "web-2"), ("add", "web-4"), ("add", "web-9"),
     ("w", "web-7", 2), ("rm", "web-6")],
    [("st", "web-8", "up")],
]


def seed_of(bs, names, weight=1):
    return [(b.name, b.addr, weight) for b in bs if b.name in names]


def trio(procs, tmp_path, etcd, backends, n_backends=4, n_seed=3):
    """etcd's tree, the backends and 3 instances seeded with web-1..n."""
    tree = Tree(etcd)
    bs = backends(n_backends)
    seed = seed_of(bs, ["web-%d" % (i + 1) for i in range(n_seed)])
    lbs = start_instances(procs, tmp_path, etcd, tree.prefix, 3,
                          {POOL: seed})
    wait_for(lambda: len(tree.member_kvs(POOL)) >= n_seed, timeout=5,
             what="the seed in etcd")
    W = max(kv["mod_revision"] for kv in tree.member_kvs(POOL).values())
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    return tree, bs, lbs


def same_change_everywhere(lbs, report):
    """Every instance logged the change as one from etcd, with the
    migration report the writer answered."""
    for lb in lbs:
        ch = wait_for(lambda: [c for c in lb.api.get("/api/changes")[1]
                               ["changes"] if c["source"] == "etcd"],
                      timeout=5, what=lb.name + "'s change log")[0]
        assert ch["pool"] == POOL
        for k in ("moved", "optimal"):
            assert abs(ch[k] - report[k]) < 1e-9, (lb.name, k, ch, report)


def check_same_routing(lbs, model, keys, sources):
    """Every instance routes by the model's members, looks <keys> up
    alike, and sends real connections from <sources> to the same member
    (the lookup's owner when that one is up)."""
    for lb in lbs:
        assert lb.members(POOL) == model.m, lb.name
    owners = [lookup_all(lb, keys) for lb in lbs]
    for lb, o in zip(lbs[1:], owners[1:]):
        diff = [k for k in keys if o[k] != owners[0][k]]
        assert not diff, "%s and %s route %d of %d keys apart, e.g. %s" % (
            lbs[0].name, lb.name, len(diff), len(keys), diff[:3])
    assert set(owners[0].values()) <= set(model.m)
    for src in sources:
        got = [fetch(lb.port, src) for lb in lbs]
        assert None not in got, (src, got)
        assert len(set(got)) == 1, "client %s reaches %s" % (
            src, dict(zip((lb.name for lb in lbs), got)))
        owner = lookup_all(lbs[0], [src])[src]
        if model.m[owner][2] == "up":
            assert got[0] == owner, (src, got[0], owner)


def test_seed_once_then_thirty_changes_converge(procs, tmp_path, etcd,
                                                backends):
    tree = Tree(etcd)
    bs = backends(10)
    addr = {b.name: b.addr for b in bs}
    seed = seed_of(bs, ["web-1", "web-2", "web-3", "web-4"])

    # the first instance finds no record: it seeds etcd from its config,
    # all of it in one transaction, once
    lb1 = Instance(procs, tmp_path, etcd, tree.prefix, "lb-1", {POOL: seed})
    wait_for(lambda: len(tree.member_kvs(POOL)) >= 4, timeout=5,
             what="the seed in etcd")
    kvs = tree.member_kvs(POOL)
    want = {n: (a, w, "up") for n, a, w in seed}
    assert {n: norm(json.loads(kv["value"])) for n, kv in kvs.items()} == want
    assert {kv["version"] for kv in kvs.values()} == {1}
    assert len({kv["create_revision"] for kv in kvs.values()}) == 1
    seed_rev = next(iter(kvs.values()))["create_revision"]
    wait_converged(etcd, tree.prefix, 1, seed_rev, timeout=CONVERGE_TIMEOUT)

    # the others carry other servers in their config: they neither seed
    # nor use them, etcd holds the members
    other = seed_of(bs, ["web-8", "web-9", "web-10"], weight=2)
    lb2 = Instance(procs, tmp_path, etcd, tree.prefix, "lb-2", {POOL: other})
    lb3 = Instance(procs, tmp_path, etcd, tree.prefix, "lb-3", {POOL: other})
    lbs = [lb1, lb2, lb3]
    wait_converged(etcd, tree.prefix, 3, seed_rev, timeout=CONVERGE_TIMEOUT)
    assert tree.member_kvs(POOL) == kvs
    # a reload keeps the members etcd gave (not the config's servers)
    lb2.d.reload(lb2.text)
    assert lb2.members(POOL) == want
    assert "reload: done" in lb2.log()
    model = Model(tree, addr, want)
    keys = [client_ip(i) for i in range(N_KEYS)]
    check_same_routing(lbs, model, keys[:200],
                       [client_ip(i) for i in range(N_FETCH)])

    times = []
    for n, ops in enumerate(CHANGES):
        t0 = time.monotonic()
        W = model.apply(ops)
        times.append(wait_converged(etcd, tree.prefix, 3, W,
                                    timeout=CONVERGE_TIMEOUT, t0=t0))
        assert {k: norm(v) for k, v in tree.members(POOL).items()} == model.m
        recs = tree.instances()
        assert {r["pools"][POOL]["members"] for r in recs.values()} == \
            {len(model.m)}, recs
        check_same_routing(lbs, model, keys,
                           [client_ip(1000 + n * N_FETCH + j)
                            for j in range(N_FETCH)])
    assert len(times) == 30
    lo, p50, p99, hi = quantiles(times)
    line = ("etcd convergence, 3 instances, %d changes: min %.1f ms, p50 "
            "%.1f ms, p99 %.1f ms, max %.1f ms" % (
                len(times), lo * 1e3, p50 * 1e3, p99 * 1e3, hi * 1e3))
    print(line)
    if os.environ.get("CHASH_ETCD_FIGURES"):
        with open(os.environ["CHASH_ETCD_FIGURES"], "a") as f:
            f.write(line + "\n")
    # speed is for bench/etcd.sh; this bound only catches a stuck instance
    assert hi < 5.0, line


def test_admin_changes_go_through_etcd(procs, tmp_path, etcd, backends):
    tree, bs, lbs = trio(procs, tmp_path, etcd, backends, n_backends=7)
    lb1, lb2, lb3 = lbs
    b4 = bs[3]

    # add through lb-1: the record is created in etcd, lb-1 answers once
    # it applied it, and every instance gets it
    st, j, _ = lb1.api.call("POST", "/api/pools/web/members",
                            {"name": "web-4", "address": b4.addr,
                             "weight": 2})
    assert st == 201, j
    W = int(j["etcd_revision"])
    assert j["applied"] is True and j["moved"] > 0
    assert lb1.members(POOL)["web-4"] == (b4.addr, 2, "up")
    assert norm(tree.members(POOL)["web-4"]) == (b4.addr, 2, "up")
    assert tree.member_kvs(POOL)["web-4"]["mod_revision"] == W
    since = tree.members(POOL)["web-4"]["since"]
    assert abs(since - time.time() * 1000) < 60000, since
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        assert lb.members(POOL)["web-4"] == (b4.addr, 2, "up"), lb.name
    same_change_everywhere(lbs, j)

    # an add of a name etcd holds is a 409, and changes nothing
    before = tree.member_kvs(POOL)
    st, j, _ = lb3.api.call("POST", "/api/pools/web/members",
                            {"name": "web-1", "address": b4.addr})
    assert st == 409, j
    assert tree.member_kvs(POOL) == before

    # drain through lb-2
    st, j, _ = lb2.api.call("PATCH", "/api/pools/web/members/web-2",
                            {"state": "drain"})
    assert st == 200, j
    W = int(j["etcd_revision"])
    assert lb2.members(POOL)["web-2"][2] == "drain"
    assert norm(tree.members(POOL)["web-2"])[2] == "drain"
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        assert lb.members(POOL)["web-2"] == (bs[1].addr, 1, "drain"), \
            lb.name

    # remove through lb-3
    st, j, _ = lb3.api.call("DELETE", "/api/pools/web/members/web-3")
    assert st == 200, j
    W = int(j["etcd_revision"])
    assert "web-3" not in lb3.members(POOL)
    assert "web-3" not in tree.members(POOL)
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        assert set(lb.members(POOL)) == {"web-1", "web-2", "web-4"}, lb.name

    # chash ctl goes the same way: web-2 back up through lb-1
    p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d"
                        % lb1.admin_port, "--json", "up", "web", "web-2"],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stdout + p.stderr
    W = int(json.loads(p.stdout)["etcd_revision"])
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    want = {"web-1": (bs[0].addr, 1, "up"), "web-2": (bs[1].addr, 1, "up"),
            "web-4": (b4.addr, 2, "up")}
    assert {k: norm(v) for k, v in tree.members(POOL).items()} == want
    for lb in lbs:
        assert lb.members(POOL) == want, lb.name

    # a batch: checked together, ONE txn, one revision on every record
    b5, b6, b7 = bs[4], bs[5], bs[6]
    batch = {"changes": [
        {"op": "add", "name": "web-5", "address": b5.addr, "weight": 3},
        {"op": "add", "name": "web-6", "address": b6.addr},
        {"op": "remove", "name": "web-1"},
        {"op": "update", "name": "web-2", "state": "drain", "weight": 2}]}
    st, j, _ = lb2.api.call("POST", "/api/pools/web/changes", batch)
    assert st == 200, j
    W = int(j["etcd_revision"])
    kvs = tree.member_kvs(POOL)
    assert {n for n, kv in kvs.items() if kv["mod_revision"] == W} == \
        {"web-5", "web-6", "web-2"}
    assert "web-1" not in kvs
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    want = {"web-2": (bs[1].addr, 2, "drain"), "web-4": (b4.addr, 2, "up"),
            "web-5": (b5.addr, 3, "up"), "web-6": (b6.addr, 1, "up")}
    assert {k: norm(v) for k, v in tree.members(POOL).items()} == want
    for lb in lbs:
        assert lb.members(POOL) == want, lb.name
    same_change_everywhere(lbs, j)

    # a batch with one bad change is refused whole: nothing written
    before = tree.member_kvs(POOL)
    st, j, _ = lb3.api.call("POST", "/api/pools/web/changes", {"changes": [
        {"op": "add", "name": "web-7", "address": b7.addr},
        {"op": "add", "name": "web-5", "address": b7.addr}]})
    assert st == 409, j
    assert tree.member_kvs(POOL) == before
    # `chash ctl batch` sends a file of changes
    path = os.path.join(str(tmp_path), "batch.json")
    with open(path, "w") as f:
        json.dump({"changes": [
            {"op": "add", "name": "web-7", "address": b7.addr},
            {"op": "update", "name": "web-2", "state": "up"}]}, f)
    p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d"
                        % lb3.admin_port, "--json", "batch", "web", path],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stdout + p.stderr
    W = int(json.loads(p.stdout)["etcd_revision"])
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    want["web-7"] = (b7.addr, 1, "up")
    want["web-2"] = (bs[1].addr, 2, "up")
    for lb in lbs:
        assert lb.members(POOL) == want, lb.name

    # etcd holds these pools' runtime state: no state file reset
    st, j, _ = lb1.api.call("DELETE", "/api/state/pools/web")
    assert st == 409, j


def test_cluster_view_and_ctl(procs, tmp_path, etcd, backends):
    tree, bs, lbs = trio(procs, tmp_path, etcd, backends, n_backends=4)
    W = tree.put_member(POOL, "web-4", bs[3].addr, weight=3)
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    sums = {r["pools"][POOL]["checksum"] for r in tree.instances().values()}
    assert len(sums) == 1

    def settled(lb):
        c = lb.cluster()
        lc = c.get("last_change") or {}
        return (len(c["instances"]) == 3 and c["agree"] is True and
                lc.get("revision", 0) >= W and lc.get("reached") == 3 and
                lc.get("of") == 3) and c

    for lb in lbs:
        c = wait_for(lambda: settled(lb), timeout=5,
                     what="%s's /api/cluster to agree on %d" % (lb.name, W))
        assert c["instance"] == lb.name
        assert sorted(i["instance"] for i in c["instances"]) == \
            ["lb-1", "lb-2", "lb-3"]
        assert [i["instance"] for i in c["instances"]
                if i.get("self")] == [lb.name]
        assert all(i["applied_rev"] >= W for i in c["instances"])
        assert c["pools"][POOL]["agree"] is True
        assert c["pools"][POOL]["instances"] == 3
        assert c["pools"][POOL]["checksum"] in sums
        e = c["etcd"]
        assert e["up"] is True and e["state"] == "watching", e
        assert e["endpoints"] == [etcd.url]
        assert e["applied_rev"] >= W
        assert e["lists"] == 1 and e["events"] >= 1
        assert e["ignored"] == []
        assert c["last_change"]["took_ms"] >= 0
        m = metrics(lb)
        assert m["chashd_etcd_up"] == 1
        assert m["chashd_etcd_applied_revision"] >= W
        assert m["chashd_etcd_lists_total"] == 1
        assert m["chashd_etcd_reconnects_total"] == 0
        assert m["chashd_etcd_ignored_records"] == 0

    for lb in lbs:
        p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d"
                            % lb.admin_port, "cluster"],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 0, p.stdout + p.stderr
        for name in ("lb-1", "lb-2", "lb-3"):
            assert name in p.stdout, p.stdout
        assert next(iter(sums)) in p.stdout, p.stdout


def metrics(lb):
    """{name: value} of the unlabelled samples of /metrics."""
    _, _, samples = parse_metrics(lb.api.get("/metrics")[1])
    return {n: v for n, labels, v in samples if not labels}


def test_a_later_instance_reports_the_last_change(procs, tmp_path, etcd,
                                                  backends):
    # an instance started after a change gets it from its first list: it
    # counts among those that applied that change
    tree = Tree(etcd)
    bs = backends(4)
    seed = seed_of(bs, ["web-1", "web-2", "web-3"])
    lbs = start_instances(procs, tmp_path, etcd, tree.prefix, 2,
                          {POOL: seed})
    wait_for(lambda: len(tree.member_kvs(POOL)) >= 3, timeout=5,
             what="the seed in etcd")
    W = tree.put_member(POOL, "web-4", bs[3].addr, weight=2)
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    # unrelated writes after the change (the instances' own records)
    for n in range(3):
        etcd.put(tree.prefix + "/scratch/%d" % n, "x")
    lbs.append(Instance(procs, tmp_path, etcd, tree.prefix, "lb-3",
                        {POOL: seed}))
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        assert lb.members(POOL)["web-4"] == (bs[3].addr, 2, "up")
        c = wait_for(lambda: (lambda c: len(c["instances"]) == 3 and c)(
            lb.cluster()), timeout=5, what=lb.name + " to see 3 instances")
        wait_for(lambda: (lambda lc: lc and lc["revision"] == W and
                          lc["reached"] == 3 and lc["of"] == 3)(
            lb.cluster()["last_change"]), timeout=5,
            what="%s: last_change %d reached 3 of 3 (it says %s)"
            % (lb.name, W, c["last_change"]))


BAD = {
    "bad-json": '{"address": "127.0.0.1:1", ',
    "no-address": '{"weight": 1, "state": "up"}',
    "bad-weight": None,          # filled with a real address below
    "big-weight": None,
    "bad-state": None,
    "bad!name": None,
    "n" * 64: None,
}


def test_malformed_records_ignored_alike(procs, tmp_path, etcd, backends):
    tree, bs, lbs = trio(procs, tmp_path, etcd, backends, n_backends=4)
    a4 = bs[3].addr
    bad = dict(BAD)
    bad["bad-weight"] = json.dumps({"address": a4, "weight": "heavy"})
    bad["big-weight"] = json.dumps({"address": a4, "weight": 2000000})
    bad["bad-state"] = json.dumps({"address": a4, "state": "sleeping"})
    bad["bad!name"] = json.dumps({"address": a4})
    bad["n" * 64] = json.dumps({"address": a4})
    # bytes that are not UTF-8 in an otherwise good record
    bad["not-utf8"] = json.dumps({"address": a4, "note": "x"}).encode() \
        .replace(b"x", b"\xff")
    # the bad records and one good change in one txn
    W = tree.txn_members(POOL, put={"web-1": (bs[0].addr, 2, "up")},
                         raw=bad)
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    want = {"web-1": (bs[0].addr, 2, "up"), "web-2": (bs[1].addr, 1, "up"),
            "web-3": (bs[2].addr, 1, "up")}
    for lb in lbs:
        assert lb.members(POOL) == want, lb.name
        ignored = json.dumps(lb.etcd_state()["ignored"])
        for name in bad:
            assert name in ignored, (lb.name, name, ignored)
        assert metrics(lb)["chashd_etcd_ignored_records"] == len(bad)
    for lb in lbs:
        warn = [ln for ln in lb.log().splitlines() if "[warn]" in ln]
        for name in bad:
            assert [ln for ln in warn if name in ln], (lb.name, name, warn)
    keys = [client_ip(i) for i in range(300)]
    owners = [lookup_all(lb, keys) for lb in lbs]
    assert owners[0] == owners[1] == owners[2]

    # one warning per record version: an unrelated change logs none again
    def warned(lb, name):
        return len([ln for ln in lb.log().splitlines()
                    if "[warn]" in ln and name in ln])
    counts = {lb.name: warned(lb, "bad-state") for lb in lbs}
    W = tree.put_member(POOL, "web-2", bs[1].addr, weight=3)
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    assert {lb.name: warned(lb, "bad-state") for lb in lbs} == counts

    # a record made right is a member at once, and no longer ignored
    W = tree.put_member(POOL, "bad-state", a4, state="drain")
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        assert lb.members(POOL)["bad-state"] == (a4, 1, "drain"), lb.name
        assert "bad-state" not in json.dumps(lb.etcd_state()["ignored"])


def test_check_wants_global_etcd(tmp_path):
    port = free_port()
    pool = servers_yaml(POOL, port, [("web-1", "127.0.0.1:9001", 1)])
    conf = tmp_path / "no-etcd.yml"
    conf.write_text("global:\n  admin: off\n" + pool)
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "members_from" in p.stdout + p.stderr

    conf = tmp_path / "etcd.yml"
    conf.write_text("global:\n  admin: off\n  etcd:\n    endpoints: "
                    "[http://127.0.0.1:1]\n    prefix: /chash\n"
                    "    instance: lb-1\n" + pool)
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stdout + p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("pool web")]
    assert len(line) == 1 and re.search(r"\betcd\b", line[0]), p.stdout

    # a redis pool copies its keys with etcd too (test_etcd_migration.py)
    conf = tmp_path / "migration.yml"
    conf.write_text("global:\n  admin: off\n  etcd:\n    endpoints: "
                    "[http://127.0.0.1:1]\n    prefix: /chash\n"
                    "    instance: lb-1\nstore:\n  listen: 127.0.0.1:%d\n"
                    "  mode: redis\n  migration: copy\n"
                    "  members_from: etcd\n  servers:\n"
                    "    - 127.0.0.1:9001:1 r1\n" % free_port())
    p = subprocess.run([CHASHD, "-t", "-c", str(conf)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stdout + p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("pool store")]
    assert len(line) == 1 and "etcd" in line[0] and "copy" in line[0], \
        p.stdout


def test_slow_start_ramps_alike_from_the_record_time(procs, tmp_path, etcd,
                                                     backends):
    # a ramp runs from the change's time stamp in etcd ("since"), not from
    # when each instance saw it: a member that joined 10 s ago is half way
    # through a 20 s slow start on every instance, one started later too
    tree = Tree(etcd)
    bs = backends(3)
    seed = seed_of(bs, ["web-1", "web-2"])
    opts = {"slow_start": "20s"}
    lbs = start_instances(procs, tmp_path, etcd, tree.prefix, 2,
                          {POOL: seed}, pool_opts=opts)
    wait_for(lambda: len(tree.member_kvs(POOL)) >= 2, timeout=5,
             what="the seed in etcd")
    W = etcd.put(tree.member_key(POOL, "web-3"),
                 member_record(bs[2].addr, 1, "up", since=now_ms() - 10000))
    wait_converged(etcd, tree.prefix, 2, W, timeout=CONVERGE_TIMEOUT)
    lbs.append(Instance(procs, tmp_path, etcd, tree.prefix, "lb-3",
                        {POOL: seed}, pool_opts=opts))
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    # read close together; 2 s of the 20 s ramp is 0.1
    ramps = [lb.api.members(POOL)["web-3"]["ramp"] for lb in lbs]
    for r in ramps:
        assert 0.45 <= r <= 0.65, ramps
    assert max(ramps) - min(ramps) < 0.1, ramps
    # without a time stamp (a record written by hand), each instance ramps
    # from when it applied it: just begun
    W = etcd.put(tree.member_key(POOL, "web-1"),
                 member_record(bs[0].addr, 3, "up", since=False))
    wait_converged(etcd, tree.prefix, 3, W, timeout=CONVERGE_TIMEOUT)
    for lb in lbs:
        m = lb.api.members(POOL)["web-1"]
        assert m["weight"] == 3 and m["ramp"] < 0.7, (lb.name, m)

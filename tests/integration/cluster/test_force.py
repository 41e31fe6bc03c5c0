# test_force.py -- a store pool that does not move data (redis or memcache,
# migration: off, replicas: 1: a pool written twemproxy's way) keeps every
# key on the member that has it, so a membership change leaves the keys
# whose owner changes out of reach. Such a change says how much of the
# keyspace it hides and is refused unless forced: `chash ctl add, remove,
# weight, drain` (and --dry-run) and the admin API (409 without
# "force": true), nothing changed on a refusal (every key still reads
# back), applied with --force / "force": true. The figure is checked
# against chashd's ring computed without chashd (`chash sim --config`:
# the exact moved fraction; `chash lookup --config`: which of the keys
# written change owner), and after a forced change exactly those keys read
# nil while they stay on their old members. A reload (SIGHUP) that changes
# such a pool is applied and logs the figure; changes from etcd alike. A
# migration: copy pool, a replicated pool and a tcp pool need no force.
# SPDX-License-Identifier: BSD-2-Clause
import json
import os
import re
import signal
import subprocess

import pytest

from admin_util import CHASH, Api, admin_global
from base_util import can_connect, free_port, lookup_config, wait_for
from base_util import pool_yaml as tcp_pool_yaml
from etcd_util import Instance, Tree, etcd  # noqa: F401
from mc_util import ChashdMemcache, MemcachedServer
from migration_util import binomial_slack
from redis_util import (ChashdRedis, RedisServer, Simple, need_chashd_redis,
                        pool_yaml)

NKEYS = 200
# the CLI's and the API's sentence: "24.9835% of the keyspace (about 49
# of the pool's 200 keys) changes owner; its keys stay on their old
# members and become unreachable: ..."
FIGURE = re.compile(r"(\d+\.\d{4})% of the keyspace(?: \(about (\d+) of "
                    r"the pool's (\d+) keys\))? changes owner; its keys stay "
                    r"on their old members and become unreachable")
FORCE_HINT = "--force applies it anyway"


def kv_yaml(port, members):
    """Pool "kv" as the demo writes it (twemproxy's form: `redis: true`,
    no `migration:`, so migration is off) on <members> [(name, addr,
    weight)]."""
    lines = ["kv:", "  listen: 127.0.0.1:%d" % port, "  redis: true",
             "  hash: murmur", "  distribution: ketama", "  hash_tag: \"{}\"",
             "  servers:"]
    lines += ["    - %s:%d %s" % (a, w, n) for n, a, w in members]
    return "\n".join(lines) + "\n"


def sim_moved(conf, pool, ops):
    """The exact fraction of the key space whose owner changes with <ops>
    (`chash sim` syntax: +NAME, -NAME, NAME=W) from <pool> of <conf>."""
    p = subprocess.run([CHASH, "sim", "--config", conf, "--pool", pool,
                        "--keys", "10", "--ops", ops, "--json"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    steps = json.loads(p.stdout)["steps"]
    assert steps[-1]["exact_is_exact"] is True, steps[-1]
    return steps[-1]["exact_moved"]


def figure_of(text):
    """(percent, about, total) of the first figure in <text>."""
    m = FIGURE.search(text)
    assert m, "no figure in %r" % text
    return (float(m.group(1)), m.group(2) and int(m.group(2)),
            m.group(3) and int(m.group(3)))


def same_percent(printed, fraction):
    """<printed> (4 decimals) is <fraction> in percent, rounded."""
    return abs(printed - 100 * fraction) <= 0.00005 + 1e-9


class Kv:
    """Redis-servers kv-1..kv-3 in pool "kv" behind one chashd (admin API
    and state file on), a 4th not in the pool (<spare>), NKEYS keys written
    through chashd."""

    def __init__(self, procs):
        need_chashd_redis()
        self.procs = procs
        self.tmp = str(procs.tmp)
        self.servers = [RedisServer(procs) for _ in range(3)]
        self.spare = RedisServer(procs)
        self.by_name = {"kv-%d" % (i + 1): s
                        for i, s in enumerate(self.servers + [self.spare])}
        self.members = [("kv-%d" % (i + 1), s.addr, 1)
                        for i, s in enumerate(self.servers)]
        self.port, self.admin_port = free_port(), free_port()
        self.text = (admin_global(self.admin_port,
                                  os.path.join(self.tmp, "state.json")) +
                     kv_yaml(self.port, self.members))
        self.d = ChashdRedis(procs, self.text)
        wait_for(lambda: can_connect(self.admin_port), what="admin API")
        self.api = Api(self.admin_port)
        self.nconf = 0
        self.keys = ["user:%d" % i for i in range(NKEYS)]
        with self.d.client() as c:
            assert c.pipeline([("SET", k, "v-" + k) for k in self.keys]) == \
                [Simple("OK")] * NKEYS
        assert sum(s.dbsize() for s in self.servers) == NKEYS

    def ctl(self, *args):
        return subprocess.run([CHASH, "ctl", "--admin",
                               "127.0.0.1:%d" % self.admin_port, *args],
                              capture_output=True, text=True, timeout=60)

    def offline(self, members):
        """A config file of pool kv on <members>, for `chash lookup` and
        `chash sim` (chashd's ring, computed without chashd)."""
        self.nconf += 1
        path = os.path.join(self.tmp, "offline-%d.yml" % self.nconf)
        with open(path, "w") as f:
            f.write(kv_yaml(self.port, members))
        return path

    def owners(self, members):
        return {k: v[0] for k, v in
                lookup_config(self.offline(members), "kv", self.keys).items()}

    def moving(self, after):
        """The keys written whose owner differs between the pool now and
        <after>, with their owner now."""
        old, new = self.owners(self.members), self.owners(after)
        return {k: old[k] for k in self.keys if old[k] != new[k]}

    def read_all(self):
        with self.d.client() as c:
            got = c.pipeline([("GET", k) for k in self.keys])
        return dict(zip(self.keys, got))

    def member_names(self, pool="kv"):
        return set(self.api.members(pool))

    def assert_untouched(self):
        """The refused change changed nothing: the members as before, and
        every key reads back its value through chashd."""
        assert self.member_names() == {n for n, _, _ in self.members}
        assert self.read_all() == {k: b"v-" + k.encode() for k in self.keys}

    def assert_hidden_exactly(self, moving):
        """After a forced change: exactly the keys of <moving> read nil,
        and each is still on the member that held it; the others read
        their values."""
        got = self.read_all()
        nil = {k for k, v in got.items() if v is None}
        assert nil == set(moving), (sorted(nil - set(moving))[:5],
                                    sorted(set(moving) - nil)[:5])
        for k, owner in moving.items():
            assert self.by_name[owner].call("EXISTS", k) == 1, (k, owner)
        for k in set(self.keys) - nil:
            assert got[k] == b"v-" + k.encode(), k


@pytest.fixture
def kv(procs):
    return lambda: Kv(procs)


def test_ctl_add_says_refuses_then_forces(kv):
    """The issue's case: `chash ctl add kv kv-4` on the demo's pool."""
    env = kv()
    after = env.members + [("kv-4", env.spare.addr, 1)]
    frac = sim_moved(env.offline(env.members), "kv", "+kv-4")
    moving = env.moving(after)
    assert 0.1 < frac < 0.4 and moving, (frac, len(moving))

    # --dry-run: the figure, exact, and what applying it needs
    r = env.ctl("add", "kv", "kv-4", env.spare.addr, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "dry run, nothing changed" in r.stdout
    pct, about, total = figure_of(r.stdout)
    assert same_percent(pct, frac), (pct, frac)
    # the key count: DBSIZE of each member times the share of it that
    # leaves (an estimate: the keys written are a sample of the hashes)
    assert total == NKEYS
    assert abs(about - len(moving)) <= binomial_slack(NKEYS, frac), \
        (about, len(moving))
    assert "applying it needs --force" in r.stdout
    env.assert_untouched()

    # without --force: refused, exit 1, the figure and the way out
    r = env.ctl("add", "kv", "kv-4", env.spare.addr)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "refused" in r.stderr and FORCE_HINT in r.stderr, r.stderr
    assert figure_of(r.stderr) == (pct, about, total)
    assert "refused, nothing changed: pool kv: add kv-4" in r.stdout
    env.assert_untouched()
    assert env.spare.dbsize() == 0

    # with --force: applied, the same figure said again
    r = env.ctl("add", "kv", "kv-4", env.spare.addr, "--force")
    assert r.returncode == 0, r.stderr
    assert figure_of(r.stdout)[0] == pct
    assert "applied with --force" in r.stdout
    assert env.member_names() == {"kv-1", "kv-2", "kv-3", "kv-4"}
    env.assert_hidden_exactly(moving)


def test_ctl_remove_weight_drain(kv):
    env = kv()
    conf = env.offline(env.members)

    # remove: the member's keys all become unreachable, and the count is
    # its DBSIZE exactly (every key on it was written with this ring)
    held = env.servers[1].dbsize()
    r = env.ctl("remove", "kv", "kv-2")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert FORCE_HINT in r.stderr
    pct, about, total = figure_of(r.stderr)
    assert same_percent(pct, sim_moved(conf, "kv", "-kv-2")), pct
    assert (about, total) == (held, NKEYS)
    env.assert_untouched()

    r = env.ctl("remove", "kv", "kv-2", "--dry-run")
    assert r.returncode == 0 and figure_of(r.stdout) == (pct, about, total)

    # drain takes the member out of the ring: the same keys as a removal
    r = env.ctl("drain", "kv", "kv-2")
    assert r.returncode == 1 and figure_of(r.stderr) == (pct, about, total)
    assert env.api.members("kv")["kv-2"]["admin"] == "up"
    env.assert_untouched()

    # weight
    r = env.ctl("weight", "kv", "kv-1", "3")
    assert r.returncode == 1, (r.stdout, r.stderr)
    pct, _, _ = figure_of(r.stderr)
    assert same_percent(pct, sim_moved(conf, "kv", "kv-1=3")), pct
    assert env.api.members("kv")["kv-1"]["weight"] == 1
    env.assert_untouched()

    after = [("kv-1", env.servers[0].addr, 3)] + env.members[1:]
    moving = env.moving(after)
    r = env.ctl("weight", "kv", "kv-1", "3", "--force")
    assert r.returncode == 0, r.stderr
    assert figure_of(r.stdout)[0] == pct
    assert env.api.members("kv")["kv-1"]["weight"] == 3
    env.assert_hidden_exactly(moving)


def test_api_force(kv):
    env = kv()
    conf = env.offline(env.members)
    frac = sim_moved(conf, "kv", "+kv-4")
    add = {"name": "kv-4", "address": env.spare.addr}

    # a dry run: 200 with the figure and the warning, nothing changed
    st, j, _ = env.api.call("POST", "/api/pools/kv/members?dry_run=1", add)
    assert st == 200, j
    assert j["dry_run"] is True and j["applied"] is False
    assert abs(j["unreachable"] - frac) < 1e-8 and j["moved"] == \
        j["unreachable"]
    assert j["force_required"] is True and j["forced"] is False
    assert j["keys_total"] == NKEYS and isinstance(j["unreachable_keys"], int)
    assert figure_of(j["data_warning"])[1:] == (j["unreachable_keys"],
                                                NKEYS)

    # without "force": a 409 whose error gives the figure; the report too
    st, j, _ = env.api.call("POST", "/api/pools/kv/members", add)
    assert st == 409, j
    assert '"force": true applies it anyway' in j["error"], j
    assert same_percent(figure_of(j["error"])[0], frac), j["error"]
    assert abs(j["report"]["unreachable"] - frac) < 1e-8
    assert j["report"]["applied"] is False
    env.assert_untouched()

    # "force" must be a boolean
    st, j, _ = env.api.call("POST", "/api/pools/kv/members",
                            dict(add, force="yes"))
    assert st == 400 and "force" in j["error"], j
    env.assert_untouched()

    # "force": true applies it
    moving = env.moving(env.members + [("kv-4", env.spare.addr, 1)])
    st, j, _ = env.api.call("POST", "/api/pools/kv/members",
                            dict(add, force=True))
    assert st == 201, j
    assert j["applied"] is True and j["forced"] is True
    assert abs(j["unreachable"] - frac) < 1e-8
    env.assert_hidden_exactly(moving)
    env.members.append(("kv-4", env.spare.addr, 1))

    # PATCH and DELETE alike; a PATCH that changes nothing needs nothing
    st, j, _ = env.api.call("PATCH", "/api/pools/kv/members/kv-1",
                            {"weight": 2})
    assert st == 409 and "force" in j["error"], j
    st, j, _ = env.api.call("PATCH", "/api/pools/kv/members/kv-1",
                            {"state": "up"})
    assert st == 200 and j.get("note") == "nothing to change", j
    st, j, _ = env.api.call("PATCH", "/api/pools/kv/members/kv-1",
                            {"weight": 2, "force": True})
    assert st == 200 and j["forced"] is True, j
    assert env.api.members("kv")["kv-1"]["weight"] == 2

    env.members[0] = ("kv-1", env.servers[0].addr, 2)

    # ketama with unequal weights: a removal moves keys between the
    # others too (each member's points scale with the total weight)
    st, j, _ = env.api.call("DELETE", "/api/pools/kv/members/kv-4")
    assert st == 409, j
    assert abs(j["report"]["unreachable"] -
               sim_moved(env.offline(env.members), "kv", "-kv-4")) < 1e-8
    st, j, _ = env.api.call("DELETE", "/api/pools/kv/members/kv-4",
                            {"force": 1})
    assert st == 400, j
    st, j, _ = env.api.call("DELETE", "/api/pools/kv/members/kv-4",
                            {"force": True})
    assert st == 200 and j["applied"] is True, j
    assert "kv-4" not in env.member_names()

    # state --reset goes back to the config: kv-1 at weight 1 again
    r = env.ctl("state", "--reset", "kv")
    assert r.returncode == 1 and FORCE_HINT in r.stderr, r.stderr
    r = env.ctl("state", "--reset", "kv", "--force")
    assert r.returncode == 0, r.stderr
    assert env.api.members("kv")["kv-1"]["weight"] == 1


def test_reload_logs_the_figure(kv):
    """A reload is not refused (the file says what the operator wants) but
    says what it hides."""
    env = kv()
    frac = sim_moved(env.offline(env.members), "kv", "+kv-4")
    after = env.members + [("kv-4", env.spare.addr, 1)]
    moving = env.moving(after)
    text = env.text.replace(kv_yaml(env.port, env.members),
                            kv_yaml(env.port, after))
    assert text != env.text
    with open(env.d.conf, "w") as f:
        f.write(text)

    def whole_log():
        with open(env.d.log_path, errors="replace") as f:
            return f.read()
    done = whole_log().count("reload: done")
    env.d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: whole_log().count("reload: done") > done,
             what="the reload")
    log = whole_log()
    warn = [ln for ln in log.splitlines()
            if "[warn] pool kv: reloaded: 4 members" in ln]
    assert len(warn) == 1, log[-3000:]
    assert same_percent(figure_of(warn[0])[0], frac), warn[0]
    assert "this pool does not move data" in warn[0]
    assert env.member_names() == {"kv-1", "kv-2", "kv-3", "kv-4"}
    env.assert_hidden_exactly(moving)


def test_pools_that_move_data_need_no_force(procs, backends):
    """migration: copy moves the keys, a replicated pool fills its new
    members, a tcp pool carries no data: their changes are applied as
    before, with no warning and no force."""
    need_chashd_redis()
    st = [RedisServer(procs) for _ in range(3)]
    rp = [RedisServer(procs) for _ in range(3)]
    bs = backends(3)
    ports = [free_port() for _ in range(3)]
    aport = free_port()
    text = (admin_global(aport) +
            pool_yaml("store", ports[0], st[:2], True, ["  mode: redis"],
                      hash="murmur", distribution="ketama",
                      migration="copy") +
            pool_yaml("rep", ports[1], rp[:2], True, ["  mode: redis"],
                      hash="murmur", distribution="ketama", replicas=2) +
            tcp_pool_yaml("web", ports[2], bs[:2]))
    d = ChashdRedis(procs, text)
    wait_for(lambda: can_connect(aport), what="admin API")
    api = Api(aport)
    keys = ["s:%d" % i for i in range(NKEYS)]
    with d.client() as c:
        assert c.pipeline([("SET", k, k) for k in keys]) == \
            [Simple("OK")] * NKEYS

    r = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d" % aport,
                        "add", "store", "store-3", st[2].addr],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "migration" in r.stdout and "warning" not in r.stdout, r.stdout
    for pool, name, addr in (("rep", "rep-3", rp[2].addr),
                             ("web", "web-3", bs[2].addr)):
        s, j, _ = api.call("POST", "/api/pools/%s/members" % pool,
                           {"name": name, "address": addr})
        assert s == 201 and j["applied"] is True, (pool, j)
        assert "unreachable" not in j and "data_warning" not in j, j
        assert name in api.members(pool)
    wait_for(lambda: not api.ok("GET", "/api/pools/store/migration")
             ["active"], timeout=30, what="the migration to end")
    with d.client() as c:
        assert c.pipeline([("GET", k) for k in keys]) == \
            [k.encode() for k in keys]
    assert st[2].dbsize() > 0


def test_memcache_pool_alike(procs):
    """A memcache pool written twemproxy's way (no `redis:`): memcache,
    migration off. No key count (memcached has no DBSIZE)."""
    ms = [MemcachedServer(procs) for _ in range(4)]
    port, aport = free_port(), free_port()
    members = [("mc-%d" % (i + 1), m.addr, 1) for i, m in enumerate(ms[:3])]

    def yaml(mem):
        return ("mc:\n  listen: 127.0.0.1:%d\n  hash: murmur\n"
                "  distribution: ketama\n  servers:\n" % port +
                "".join("    - %s:%d %s\n" % (a, w, n) for n, a, w in mem))
    d = ChashdMemcache(procs, admin_global(aport) + yaml(members))
    api = Api(aport)
    keys = ["item:%d" % i for i in range(NKEYS)]
    with d.client() as c:
        for k in keys:
            assert c.call(b"set %s 0 0 1\r\nx\r\n" % k.encode()) == \
                b"STORED\r\n"
    conf = os.path.join(str(procs.tmp), "mc-offline.yml")
    with open(conf, "w") as f:
        f.write(yaml(members))
    frac = sim_moved(conf, "mc", "+mc-4")
    after = members + [("mc-4", ms[3].addr, 1)]
    conf2 = os.path.join(str(procs.tmp), "mc-offline-2.yml")
    with open(conf2, "w") as f:
        f.write(yaml(after))
    old, new = lookup_config(conf, "mc", keys), lookup_config(conf2, "mc",
                                                               keys)
    moving = {k for k in keys if old[k] != new[k]}
    add = {"name": "mc-4", "address": ms[3].addr}

    st, j, _ = api.call("POST", "/api/pools/mc/members?dry_run=1", add)
    assert st == 200 and abs(j["unreachable"] - frac) < 1e-8, j
    assert j["unreachable_keys"] is None and j["keys_total"] is None, j
    st, j, _ = api.call("POST", "/api/pools/mc/members", add)
    assert st == 409 and "force" in j["error"], j
    assert set(api.members("mc")) == {"mc-1", "mc-2", "mc-3"}

    def misses():
        out = set()
        with d.client() as c:
            for k in keys:
                c.send(b"get %s\r\n" % k.encode())
                reply = c.get_reply()
                if reply == [b"END\r\n"]:
                    out.add(k)
                else:
                    assert reply == [b"VALUE %s 0 1\r\nx\r\n" % k.encode(),
                                     b"END\r\n"], reply
        return out
    assert misses() == set()
    st, j, _ = api.call("POST", "/api/pools/mc/members", dict(add,
                                                              force=True))
    assert st == 201 and j["forced"] is True, j
    assert misses() == moving


def test_etcd_pool_alike(procs, tmp_path, etcd):  # noqa: F811
    """members_from: etcd: a change through the API is checked before it
    is written to etcd (refused: etcd untouched); one written to etcd by
    someone else is applied and logged with the figure, as a reload."""
    need_chashd_redis()
    rs = [RedisServer(procs) for _ in range(4)]
    tree = Tree(etcd)
    inst = Instance(procs, tmp_path, etcd, tree.prefix, "lb-1",
                    {"kv": [("kv-1", rs[0].addr, 1),
                            ("kv-2", rs[1].addr, 1)]},
                    pool_opts={"mode": "redis", "migration": "off",
                               "hash": "murmur", "distribution": "ketama"})
    wait_for(lambda: set(tree.members("kv")) == {"kv-1", "kv-2"},
             what="the seed in etcd")
    before = tree.member_kvs("kv")
    add = {"name": "kv-3", "address": rs[2].addr}
    st, j, _ = inst.api.call("POST", "/api/pools/kv/members", add)
    assert st == 409 and "force" in j["error"], j
    assert j["report"]["unreachable"] > 0
    assert tree.member_kvs("kv") == before
    st, j, _ = inst.api.call("POST", "/api/pools/kv/changes",
                             {"changes": [dict(add, op="add")]})
    assert st == 409 and "force" in j["error"], j
    assert tree.member_kvs("kv") == before
    st, j, _ = inst.api.call("POST", "/api/pools/kv/members",
                             dict(add, force=True))
    assert st == 201 and j["forced"] is True, j
    assert "kv-3" in tree.members("kv")

    # a record written straight to etcd: applied, and the warning logged
    rev = tree.put_member("kv", "kv-4", rs[3].addr)
    wait_for(lambda: "kv-4" in inst.members("kv"), what="kv-4 from etcd")
    inst.d.wait_log(r"\[warn\] pool kv: etcd revision %d: .* changes "
                    r"owner; its keys stay on their old members and become "
                    r"unreachable" % rev)

# test_ctl_migration.py -- `chash ctl migration` and the dashboard's
# migration panel against a real chashd in front of real redis-servers,
# while a live migration (`migration: copy`) runs under a slow copier
# (a small migration_rate): the phase, keys moved of predicted, a progress
# line per source member, the last finished migration's summary, --json,
# an unknown pool; `add --force` on a member that holds keys and
# `remove --now`; a change refused while a migration runs. What ctl prints
# is checked against the API's answers around it and, once the migration
# is done, against where the keys really are (DBSIZE and EXISTS on each
# server) and which keys had to move (`chash lookup --config` on the new
# membership: chashd's ring computed without chashd).
# SPDX-License-Identifier: BSD-2-Clause
import json
import os
import re
import subprocess

import pytest

from admin_util import (CHASH, CHROMIUM, Api, admin_global, dom_elements,
                        dump_dom)
from base_util import can_connect, free_port, wait_for
from redis_util import (ChashdRedis, Err, RedisServer, Simple,
                        need_chashd_redis, pool_yaml, redis_pool, spread_keys)

POOL = "store"

# "  moved M of P predicted keys (C by the copier, T by traffic), B"
MOVED = re.compile(r"^  moved (\d+) of (\d+) predicted keys \((\d+) by the "
                   r"copier, (\d+) by traffic\), ", re.M)
TROUBLE = re.compile(r"^  anomalies (\d+), failed keys (\d+), errors (\d+)$",
                     re.M)
# a source's line: name, address, phase, pass, dbsize, scanned, moved, bar
SOURCE = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+|-)\s+(\d+)\s+(\d+)"
                    r"\s+\[([#-]{20})\]\s+(\d+%|-)$", re.M)


def store_pool(port, servers, rate, batch=10):
    """Pool "store": redis (mode: redis, so migration defaults to copy;
    said here anyway), <servers> named store-1.., a copier moving at most
    <rate> keys/s in batches of <batch>."""
    return pool_yaml(POOL, port, servers, True, ["  mode: redis"],
                     hash="murmur", distribution="ketama",
                     migration="copy", migration_rate=rate,
                     migration_batch=batch)


class Env:
    """3 redis-servers in pool "store" behind one chashd (admin API on,
    a state file), a 4th redis-server not in the pool yet (<spare>), and
    a twemproxy-style pool "cache" (`redis: true`, migration off by
    default) on a 5th; <keys> written through chashd."""

    def __init__(self, procs, rate, nkeys):
        need_chashd_redis()
        self.procs = procs
        self.servers = [RedisServer(procs) for _ in range(3)]
        self.spare = RedisServer(procs)
        self.other = RedisServer(procs)
        self.port, cache_port, self.admin_port = (free_port(), free_port(),
                                                  free_port())
        self.state_file = os.path.join(str(procs.tmp), "state.json")
        self.rate = rate
        self.text = (admin_global(self.admin_port, self.state_file) +
                     store_pool(self.port, self.servers, rate) +
                     redis_pool("cache", cache_port, [self.other]))
        self.d = ChashdRedis(procs, self.text)
        wait_for(lambda: can_connect(self.admin_port), what="admin API")
        self.api = Api(self.admin_port)
        self.keys = ["mig:%d" % i for i in range(nkeys)]
        self.value = {k: "v-" + k for k in self.keys}
        with self.d.client() as c:
            for i in range(0, nkeys, 500):
                part = self.keys[i:i + 500]
                assert c.pipeline([("SET", k, self.value[k])
                                   for k in part]) == [Simple("OK")] * \
                    len(part)
        assert sum(s.dbsize() for s in self.servers) == nkeys

    def ctl(self, *args, check=None):
        p = subprocess.run([CHASH, "ctl", "--admin",
                            "127.0.0.1:%d" % self.admin_port] + list(args),
                           capture_output=True, text=True, timeout=30)
        if check is not None:
            assert p.returncode == check, (args, p.returncode, p.stdout,
                                           p.stderr)
        return p

    def migration(self, pool=POOL):
        return self.api.ok("GET", "/api/pools/%s/migration" % pool,
                           status=200)

    def owners_after(self, servers, name):
        """{key: member} on the membership <servers> (names store-1..),
        from `chash lookup --config` on a config that lists them: which
        member owns each key once the change is applied."""
        conf = os.path.join(str(self.procs.tmp), name + ".yml")
        with open(conf, "w") as f:
            f.write(store_pool(free_port(), servers, self.rate))
        return spread_keys(conf, POOL, self.keys, CHASH)

    def wait_done(self, timeout=120):
        """Wait until no migration runs in "store" and the last one is
        there; the answer then. (chashd says "not active" a moment before
        it has the last one: a leaving member is dropped in between.)"""
        def done():
            m = self.migration()
            return m if not m["active"] and m["last"] is not None else None
        return wait_for(done, timeout=timeout, interval=0.2,
                        what="the migration of pool store to finish")

    def phase_out(self, phase, timeout=20):
        """`chash ctl migration store` once it shows <phase>, with the
        API's answers just before and just after it."""
        def once():
            before = self.migration()
            out = self.ctl("migration", POOL, check=0).stdout
            after = self.migration()
            if re.search(r"^pool store: migration copy, epoch \d+, phase %s$"
                         % phase, out, re.M):
                return before, out, after
            return None
        return wait_for(once, timeout=timeout, interval=0.05,
                        what="ctl migration to show phase " + phase)


def sources(out):
    return {m.group(1): m for m in SOURCE.finditer(out)}


def check_between(before, text_value, after, what):
    """A figure ctl printed lies between the API's answers around it (they
    only grow while a migration runs)."""
    assert before <= text_value <= after, (what, before, text_value, after)


def moved_total(m):
    return m["keys_moved"] + m["keys_moved_by_traffic"]


def test_ctl_migration_follows_an_add_to_its_end(procs):
    env = Env(procs, rate=100, nkeys=2000)
    old = {s.addr: "store-%d" % (i + 1) for i, s in enumerate(env.servers)}
    owner_before = env.owners_after(env.servers, "before")
    owner_after = env.owners_after(env.servers + [env.spare], "after")
    moving = [k for k in env.keys if owner_before[k] != owner_after[k]]
    assert {owner_after[k] for k in moving} == {"store-4"}
    assert 200 < len(moving) < 1000, len(moving)

    # nothing runs yet; a pool with migration off says so
    out = env.ctl("migration", POOL, check=0).stdout
    assert out.splitlines()[0] == "pool store: migration copy, none running"
    out = env.ctl("migration", "cache", check=0).stdout
    assert out.startswith("pool cache: migration off: ")
    assert env.migration("cache") == {"pool": "cache", "migration": "off",
                                      "active": False, "last": None}

    # the add starts a migration: its report says so
    out = env.ctl("add", POOL, "store-4", env.spare.addr, check=0).stdout
    m = re.search(r"^  migration (\d+) started: (\d+) keys predicted to "
                  r"move; follow it with `chash ctl migration store`$",
                  out, re.M)
    assert m, out
    epoch, predicted = int(m.group(1)), int(m.group(2))
    # the prediction is the exact moved fraction times the keys
    assert abs(predicted - len(moving)) <= 0.1 * len(moving) + 10, \
        (predicted, len(moving))

    # client traffic touching moving keys moves them first (the gate)
    touched = moving[:20]
    with env.d.client() as c:
        assert c.pipeline([("GET", k) for k in touched]) == \
            [env.value[k].encode() for k in touched]

    before, out, after = env.phase_out("copying")
    lines = out.splitlines()
    assert lines[0] == "pool store: migration copy, epoch %d, phase " \
        "copying" % epoch
    assert re.match(r"  change add store-4, started \S+, elapsed "
                    r"[\d.]+s$", lines[1]), lines[1]
    assert re.match(r"  scanned \d+ keys \(all passes; the pool held "
                    r"2000\), rate (\d+ keys/s|-), ETA \S+$", lines[2]), \
        lines[2]
    mv = MOVED.search(out)
    assert mv, out
    total, pred, copier, traffic = map(int, mv.groups())
    assert total == copier + traffic and pred == predicted
    check_between(moved_total(before), total, moved_total(after), "moved")
    check_between(before["keys_moved_by_traffic"], traffic,
                  after["keys_moved_by_traffic"], "by traffic")
    assert TROUBLE.search(out).groups() == ("0", "0", "0"), out
    # one progress line per source: every old member gives keys to store-4
    src = sources(out)
    assert set(src) == set(old.values()), out
    api_src = {s["member"]: s for s in after["sources"]}
    assert set(api_src) == set(old.values())
    bsrc = {s["member"]: s for s in before["sources"]}
    for name, line in src.items():
        assert old[line.group(2)] == name
        check_between(bsrc[name]["keys_moved"], int(line.group(7)),
                      api_src[name]["keys_moved"], name + " moved")
        bar, pct = line.group(8), line.group(9)
        if pct != "-":
            # the bar is the percent, in twentieths, rounded down
            assert bar.count("#") == int(pct[:-1]) // 5, (bar, pct)
            assert bar == "#" * bar.count("#") + "-" * bar.count("-")
    # a source still copying is not at 100%
    assert any(line.group(9) != "100%" for line in src.values()), out

    # --json: the API's answer as is
    j = json.loads(env.ctl("--json", "migration", POOL, check=0).stdout)
    assert j["pool"] == POOL and j["active"] is True and j["epoch"] == epoch
    assert set(j) == set(after), (set(j) ^ set(after))
    assert {s["member"] for s in j["sources"]} == set(old.values())

    # a change while it runs is refused, and nothing changes
    p = env.ctl("weight", POOL, "store-1", "2", check=1)
    assert "migration in progress" in p.stderr and "409" in p.stderr, \
        p.stderr
    assert env.api.members(POOL)["store-1"]["weight"] == 1

    done = env.wait_done()
    assert done["phase"] == "done" and done["last"]["epoch"] == epoch

    # every moving key is on store-4, and only there; nothing else moved
    assert env.spare.dbsize() == len(moving)
    assert env.spare.holds(env.keys) == set(moving)
    for s in env.servers:
        assert s.holds(moving) == set()
        assert s.dbsize() == sum(1 for k in env.keys
                                 if owner_after[k] == old[s.addr])
    with env.d.client() as c:
        assert c.pipeline([("GET", k) for k in env.keys]) == \
            [env.value[k].encode() for k in env.keys]

    out = env.ctl("migration", POOL, check=0).stdout
    lines = out.splitlines()
    assert lines[0] == "pool store: migration copy, none running", out
    assert re.match(r"last migration: epoch %d, add store-4, started \S+, "
                    r"done in [\dmhs.]+$" % epoch, lines[1]), lines[1]
    mv = MOVED.search(out)
    total, pred, copier, traffic = map(int, mv.groups())
    # what moved is exactly what had to: the keys whose owner changed
    assert total == len(moving) and pred == predicted
    assert copier + traffic == total and traffic >= 1, out
    assert (copier, traffic) == (done["last"]["keys_moved"],
                                 done["last"]["keys_moved_by_traffic"])
    assert TROUBLE.search(out).groups() == ("0", "0", "0"), out
    assert not SOURCE.search(out), "no progress lines once done"
    j = json.loads(env.ctl("--json", "migration", POOL, check=0).stdout)
    assert j == env.migration()


def test_ctl_migration_errors(procs):
    env = Env(procs, rate=100, nkeys=10)
    p = env.ctl("migration", "nope", check=1)
    assert 'no pool named "nope"' in p.stderr and "(HTTP 404)" in p.stderr
    assert p.stdout == ""
    # --json prints the API's error body, still exit 1
    p = env.ctl("--json", "migration", "nope", check=1)
    assert json.loads(p.stdout)["error"] == 'no pool named "nope"'
    for args in (["migration"], ["migration", POOL, "x"],
                 ["migration", POOL, "--dry-run"],
                 ["migration", POOL, "--now"], ["show", POOL, "--force"],
                 ["add", POOL, "x", "127.0.0.1:1", "--now"],
                 ["lookup", POOL, "k", "--force"],
                 ["show", POOL, "--give-up", "store-1"],
                 ["migration", POOL, "--give-up"]):
        p = env.ctl(*args, check=2)
        assert "usage: chash ctl" in p.stderr, args
    # nothing to give up while no migration runs
    p = env.ctl("migration", POOL, "--give-up", "store-1", check=1)
    assert "pool store has no migration running" in p.stderr and \
        "(HTTP 409)" in p.stderr, p.stderr
    usage = env.ctl("--help", check=0).stdout
    assert re.search(r"^  migration POOL --give-up NAME ", usage, re.M)
    assert re.search(r"^  migration POOL ", usage, re.M)
    assert re.search(r"^  add POOL NAME ADDRESS \[--weight W\] \[--force\]",
                     usage, re.M)
    assert re.search(r"^  remove POOL NAME \[--now\]", usage, re.M)


def test_ctl_add_force_and_remove_now(procs):
    """A joining member that holds keys is refused with its count; --force
    flushes it and the add goes on (its old keys are gone, the moving
    keys arrive); `remove --now` takes a member out at once and reports
    the keys left on it, which chashd then no longer finds."""
    env = Env(procs, rate=2000, nkeys=600)
    with env.spare.client() as c:
        assert c.pipeline([("SET", "junk:%d" % i, "x") for i in range(37)]) \
            == [Simple("OK")] * 37
    p = env.ctl("add", POOL, "store-4", env.spare.addr, check=1)
    assert "member store-4 (%s) holds 37 keys: a joining member must be " \
        "empty" % env.spare.addr in p.stderr and "409" in p.stderr, p.stderr
    assert "store-4" not in env.api.members(POOL)
    assert env.spare.dbsize() == 37

    owner_after = env.owners_after(env.servers + [env.spare], "after")
    out = env.ctl("add", POOL, "store-4", env.spare.addr, "--force",
                  check=0).stdout
    assert re.search(r"^  migration \d+ started: ", out, re.M), out
    env.wait_done()
    on_new = {k for k in env.keys if owner_after[k] == "store-4"}
    assert env.spare.keys() == on_new    # the 37 junk keys were flushed

    # remove --now: nothing moved, the report counts what is left behind
    dry = env.ctl("remove", POOL, "store-4", "--now", "--dry-run",
                  check=0).stdout
    assert dry.startswith("dry run, nothing changed: pool store: remove "
                          "store-4 now, its keys not moved\n"), dry
    assert "store-4" in env.api.members(POOL)
    out = env.ctl("remove", POOL, "store-4", "--now", check=0).stdout
    assert out.startswith("pool store: remove store-4 now, its keys not "
                          "moved\n"), out
    m = re.search(r"^  left at once: (\d+) keys? on it (?:was|were) not "
                  r"moved$", out, re.M)
    assert m and int(m.group(1)) == len(on_new), (out, len(on_new))
    assert "store-4" not in env.api.members(POOL)
    assert not env.migration()["active"]
    # its keys stayed on it, and chashd no longer finds them
    assert env.spare.keys() == on_new
    lost = sorted(on_new)[:10]
    with env.d.client() as c:
        assert c.pipeline([("EXISTS", k) for k in lost]) == [0] * len(lost)


def test_ctl_show_and_migration_during_a_scale_in(procs):
    """remove without --now: the member stays, draining and leaving, until
    its keys are moved to their new owners; `ctl show` says "leaving".
    Every old member is a source (chashd scans each for keys whose owner
    changed); only the leaving one has keys to give."""
    env = Env(procs, rate=100, nkeys=2000)
    owner_after = env.owners_after(env.servers[:2], "after")
    on_3 = env.servers[2].keys()
    assert len(on_3) > 300
    out = env.ctl("remove", POOL, "store-3", check=0).stdout
    assert re.search(r"^  migration \d+ started: ", out, re.M), out
    before, out, after = env.phase_out("copying")
    src = sources(out)
    assert set(src) == {"store-1", "store-2", "store-3"}, out
    assert src["store-3"].group(3) == "copying", out
    assert src["store-1"].group(7) == src["store-2"].group(7) == "0", out
    show = env.ctl("show", POOL, check=0).stdout
    row = [l.split() for l in show.splitlines() if l.startswith("store-3 ")]
    assert row and row[0][2] == "leaving", show
    assert env.api.members(POOL)["store-3"]["state"] == "draining"
    assert env.migration()["leaving"] == ["store-3"]

    done = env.wait_done()
    assert "store-3" not in env.api.members(POOL)
    assert env.servers[2].dbsize() == 0
    for i, s in enumerate(env.servers[:2]):
        assert s.keys() == {k for k in env.keys
                            if owner_after[k] == "store-%d" % (i + 1)}
    out = env.ctl("migration", POOL, check=0).stdout
    assert re.search(r"^last migration: epoch \d+, remove store-3, ", out,
                     re.M), out
    total, _, copier, _ = map(int, MOVED.search(out).groups())
    assert total == len(on_3) == moved_total(done["last"])
    moved = {s["member"]: s["keys_moved"] for s in done["last"]["sources"]}
    assert moved == {"store-1": 0, "store-2": 0, "store-3": copier}


def test_ctl_migration_failed_keys_then_the_end(procs):
    """A new member that refuses keys (maxmemory reached: MIGRATE gets
    OOM) fails the requests that touch a moving key, with the member's
    error and without running them, and `ctl migration` counts failed
    keys; once it takes keys again, the failed keys move, the migration
    ends, and the summary keeps the failures."""
    env = Env(procs, rate=500, nkeys=1500)
    owner_before = env.owners_after(env.servers, "before")
    owner_after = env.owners_after(env.servers + [env.spare], "after")
    moving = [k for k in env.keys if owner_before[k] != owner_after[k]]
    assert env.spare.call("CONFIG", "SET", "maxmemory", "1") == Simple("OK")
    env.ctl("add", POOL, "store-4", env.spare.addr, check=0)
    with env.d.client() as c:
        r = c.call("INCR", moving[0])
    assert isinstance(r, Err) and r.startswith(
        "ERR migration of key '%s' from %s failed: " % (
            moving[0], owner_before[moving[0]])) and "OOM" in r, r
    # the INCR ran nowhere: the value is still on its old owner
    old = env.servers[int(owner_before[moving[0]].split("-")[1]) - 1]
    assert old.call("GET", moving[0]) == env.value[moving[0]].encode()

    wait_for(lambda: env.migration()["failed_keys"] >= len(moving),
             timeout=30, what="the copier's failed moves")
    before = env.migration()
    out = env.ctl("migration", POOL, check=0).stdout
    after = env.migration()
    assert after["active"], out
    failed = int(TROUBLE.search(out).group(2))
    check_between(before["failed_keys"], failed, after["failed_keys"],
                  "failed keys")
    assert env.spare.dbsize() == 0

    assert env.spare.call("CONFIG", "SET", "maxmemory", "0") == Simple("OK")
    done = env.wait_done(timeout=60)
    assert env.spare.holds(env.keys) == set(moving)
    with env.d.client() as c:
        assert c.call("GET", moving[0]) == env.value[moving[0]].encode()
    out = env.ctl("migration", POOL, check=0).stdout
    total, _, _, _ = map(int, MOVED.search(out).groups())
    anomalies, failed, _ = map(int, TROUBLE.search(out).groups())
    assert total == len(moving) == moved_total(done["last"])
    assert anomalies == 0 and failed >= len(moving), out


def test_ctl_migration_give_up_a_dead_source(procs):
    """An old owner that dies mid-migration holds its pool's migration
    up; `ctl migration POOL --give-up NAME` lets it go: the answer shows
    it given up, the migration ends, the keys the others gave are on the
    new member, and the dead one's moving keys that had not moved are
    gone from the pool (their new owner answers for them)."""
    env = Env(procs, rate=50, nkeys=2000)
    owner_before = env.owners_after(env.servers, "before")
    owner_after = env.owners_after(env.servers + [env.spare], "after")
    moving = [k for k in env.keys if owner_before[k] != owner_after[k]]
    env.ctl("add", POOL, "store-4", env.spare.addr, check=0)
    env.phase_out("copying")
    env.servers[1].stop()                     # store-2 dies, data and all
    p = env.ctl("migration", POOL, "--give-up", "store-9", check=1)
    assert 'member "store-9" is not a source' in p.stderr and "409" in \
        p.stderr, p.stderr
    out = env.ctl("migration", POOL, "--give-up", "store-2", check=0).stdout
    assert out.startswith("pool store: gave up moving keys from store-2: "
                          "those not moved yet are lost; their new owners "
                          "serve them\n\n"), out
    src = sources(out)
    if src:   # the answer may already be the finished migration
        assert src["store-2"].group(3) == "given-up", out
    done = env.wait_done()
    last = {s["member"]: s for s in done["last"]["sources"]}
    assert last["store-2"]["skipped"] is True
    assert not any(last[m]["skipped"] for m in ("store-1", "store-3"))
    on_new = env.spare.keys()
    from_live = {k for k in moving if owner_before[k] != "store-2"}
    assert from_live <= on_new
    lost = [k for k in moving if k not in on_new]
    assert lost and all(owner_before[k] == "store-2" for k in lost)
    with env.d.client() as c:
        assert c.pipeline([("EXISTS", k) for k in lost]) == [0] * len(lost)
    out = env.ctl("migration", POOL, check=0).stdout
    assert re.search(r"^last migration: epoch \d+, add store-4, ", out,
                     re.M), out


def warming_pool(procs, warmup, nkeys):
    """Memcache pool `mc` of three memcacheds (`migration: warmup` for
    <warmup>, ketama/murmur) behind chashd with its admin API, <nkeys>
    keys w:0.. set through it, and a spare memcached for an add:
    (servers, spare, chashd, api, keys)."""
    from mc_util import ChashdMemcache, MemcachedServer, mc_pool
    servers = [MemcachedServer(procs) for _ in range(3)]
    spare = MemcachedServer(procs)
    port, admin = free_port(), free_port()
    d = ChashdMemcache(procs, admin_global(admin) + mc_pool(
        "mc", port, servers, hash="murmur", distribution="ketama",
        migration="warmup", migration_warmup=warmup))
    keys = ["w:%d" % i for i in range(nkeys)]
    with d.client() as c:
        for k in keys:
            assert c.call(b"set %s 0 0 1\r\nv\r\n" % k.encode()) == \
                b"STORED\r\n"
    return servers, spare, d, Api(admin), keys


def test_ctl_migration_of_a_memcache_warm_up(procs):
    """A memcache pool with `migration: warmup`: the add's report says a
    warm-up started; while it runs, `ctl migration` counts the keys read
    from their old member on a miss (exactly the moving keys a client
    read); when its time is over, the last one's summary."""
    from mc_util import mc_pool
    servers, spare, d, api, keys = warming_pool(procs, "3s", 400)
    conf = os.path.join(str(procs.tmp), "after.yml")
    with open(conf, "w") as f:
        f.write(mc_pool("mc", free_port(), servers + [spare],
                        hash="murmur", distribution="ketama"))
    after = spread_keys(conf, "mc", keys, CHASH)
    moving = [k for k in keys if after[k] == "mc-4"]
    assert len(moving) > 30

    def ctl(*args):
        return subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d"
                               % api.port] + list(args), capture_output=True,
                              text=True, timeout=30)
    out = ctl("migration", "mc").stdout
    assert out == "pool mc: migration warmup, none running\nlast warm-up: " \
        "none\n", out
    out = ctl("add", "mc", "mc-4", spare.addr).stdout
    assert re.search(r"^  warm-up \d+ started: a key missing on its new "
                     r"member is read from its old one", out, re.M), out
    with d.client() as c:
        for k in keys:
            c.send(b"get %s\r\n" % k.encode())
            assert c.get_reply() == [b"VALUE %s 0 1\r\nv\r\n" % k.encode(),
                                     b"END\r\n"]
    out = ctl("migration", "mc").stdout
    lines = out.splitlines()
    assert re.match(r"pool mc: migration warmup, epoch \d+, phase warming$",
                    lines[0]), out
    assert re.match(r"  change add mc-4, started \S+, elapsed \S+, \S+ left "
                    r"of 3\.0s$", lines[1]), out
    assert lines[2] == "  warmed %d keys (missing on their new member, read " \
        "from the old one and added)" % len(moving), out
    wait_for(lambda: not api.ok("GET", "/api/pools/mc/migration")["active"]
             and api.ok("GET", "/api/pools/mc/migration")["last"],
             timeout=20, what="the warm-up to end")
    out = ctl("migration", "mc").stdout
    assert re.search(r"^last warm-up: epoch \d+, add mc-4, started \S+, "
                     r"done in \S+\n  warmed %d keys, failed keys 0, "
                     r"errors 0$" % len(moving), out, re.M), out


# ---- the dashboard's migration panel (headless Chromium) ---------------

@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                    reason="chromium is not installed (scripts/deps "
                    "installs it)")
def test_dashboard_migration_panel(procs):
    """While a migration runs, the redis pool's card has a migration panel
    with its phase, keys moved of predicted and a progress row and bar
    per source member; the pool with migration off has none. Once it is
    done the panel is gone and the last one's summary is there."""
    env = Env(procs, rate=40, nkeys=1500)
    url = "http://127.0.0.1:%d/" % env.admin_port
    dom = dump_dom(url)
    assert dom_elements(dom, "div", "migration") == []
    assert dom_elements(dom, "div", "migration-last") == []
    assert 'data-pool="store"' in dom and "live" in dom

    env.ctl("add", POOL, "store-4", env.spare.addr, check=0)
    env.phase_out("copying")
    before = env.migration()
    dom = dump_dom(url)
    after = env.migration()
    assert after["active"], "the migration ended before the page was drawn"
    panels = dom_elements(dom, "div", "migration")
    assert [p["data-pool"] for p in panels] == [POOL], dom[-3000:]
    panel = panels[0]
    assert panel["data-phase"] in ("copying", "verifying")
    assert int(panel["data-epoch"]) == after["epoch"]
    assert int(panel["data-keys-predicted"]) == after["keys_predicted"]
    check_between(moved_total(before), int(panel["data-keys-moved"]),
                  moved_total(after), "panel moved")
    rows = [r for r in dom_elements(dom, "tr", "msource")
            if r["data-pool"] == POOL]
    assert {r["data-member"] for r in rows} == \
        {"store-1", "store-2", "store-3"}
    card = re.search(r'<div class="migration" data-pool="store".*?</table>',
                     dom, re.S).group(0)
    # one bar per source, its width the source's progress
    bars = re.findall(r'<span class="pbar( done)?"><span style="width:'
                      r'([\d.]+)%"></span></span>', card)
    assert len(bars) == 3, card
    for r, (done, width) in zip(rows, bars):
        if "data-progress" in r:
            p = float(r["data-progress"]) if not done else 1.0
            assert float(width) == pytest.approx(100 * min(1, p), abs=0.06)
    assert "predicted keys" in card and "keys/s" in card

    done = env.wait_done()
    dom = dump_dom(url)
    assert dom_elements(dom, "div", "migration") == []
    last = dom_elements(dom, "div", "migration-last")
    assert [(x["data-pool"], int(x["data-epoch"])) for x in last] == \
        [(POOL, done["last"]["epoch"])]
    text = re.search(r'<div class="migration-last"[^>]*>([^<]*)<', dom)
    assert "add store-4" in text.group(1)
    assert "moved %d of %d predicted keys" % (
        moved_total(done["last"]), done["last"]["keys_predicted"]) in \
        text.group(1)


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                    reason="chromium is not installed (scripts/deps "
                    "installs it)")
def test_dashboard_shows_a_leaving_member(procs):
    """During a scale-in the member being removed reads "draining
    (leaving)" in its pool's table, and not once it has left."""
    env = Env(procs, rate=40, nkeys=1500)
    url = "http://127.0.0.1:%d/" % env.admin_port
    env.ctl("remove", POOL, "store-3", check=0)
    env.phase_out("copying")
    dom = dump_dom(url)
    assert env.migration()["active"], \
        "the migration ended before the page was drawn"
    def rows(dom):
        return {m.group(1): m.group(0) for m in re.finditer(
            r'<tr class="member" data-pool="store" data-member="([^"]+)"'
            r'.*?</tr>', dom, re.S)}
    during = rows(dom)
    assert set(during) == {"store-1", "store-2", "store-3"}, dom[-3000:]
    assert ">draining (leaving)</td>" in during["store-3"]
    assert "leaving" not in during["store-1"] + during["store-2"]
    env.wait_done()
    dom = dump_dom(url)
    after = rows(dom)
    assert set(after) == {"store-1", "store-2"}
    assert "leaving" not in "".join(after.values())


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                    reason="chromium is not installed (scripts/deps "
                    "installs it)")
def test_dashboard_warm_up_panel(procs):
    """A memcache pool warming up after an add has a warm-up panel with
    the keys warmed so far (the API's count), and no source rows."""
    servers, spare, d, api, keys = warming_pool(procs, "60s", 200)
    api.ok("POST", "/api/pools/mc/members",
           {"name": "mc-4", "address": spare.addr})
    with d.client() as c:
        for k in keys:
            c.send(b"get %s\r\n" % k.encode())
            assert len(c.get_reply()) == 2
    warmed = api.ok("GET", "/api/pools/mc/migration")["keys_moved_by_traffic"]
    assert warmed > 0
    dom = dump_dom("http://127.0.0.1:%d/" % api.port)
    panels = dom_elements(dom, "div", "migration")
    assert [(p["data-pool"], p["data-phase"], int(p["data-warmed"]))
            for p in panels] == [("mc", "warming", warmed)], dom[-3000:]
    assert dom_elements(dom, "tr", "msource") == []
    assert re.search(r"<h3>Warm-up \d+: add mc-4 \u2014 warming</h3>", dom)

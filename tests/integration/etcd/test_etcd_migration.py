# test_etcd_migration.py -- a redis pool with `migration: copy` that takes
# its members from etcd, run by several chashd instances (doc/etcd.md,
# "Migration"): a change made on one instance starts one migration that
# every instance runs, numbered by etcd's revision; every instance gates
# its moving keys; exactly one copies (the lock); the end removes the
# leaving member from etcd. Checked with real redis-servers and a real
# etcd, under a write load spread over every instance: no counter loses
# or gains an increment, every key ends on exactly one redis-server and
# reads back right through every instance. Also: the copier killed
# mid-copy (another instance takes the lock and finishes), an instance
# started while a migration runs (it gates too), a two-stage change (the
# second stage begins on every instance), and a frozen instance (the
# barrier waits for it until its lease ends), then resumed (it answers no
# key until it is registered again and has the migration it missed).
# SPDX-License-Identifier: BSD-2-Clause
import subprocess
import threading
import time

import pytest

from base_util import CHASH, wait_for
from etcd_util import Instance, Tree, etcd, unique_prefix  # noqa: F401
from redis_util import Err, RedisServer, Resp, Simple, encode, \
    need_chashd_redis

POOL = "store"
OPTS = {"mode": "redis", "migration": "copy", "hash": "md5",
        "distribution": "ketama", "hash_tag": '"{}"', "timeout": 10000,
        "auto_eject_hosts": "false"}


@pytest.fixture(autouse=True)
def _redis():
    need_chashd_redis()


# The instances' lease: a killed or frozen instance holds the others'
# barrier this long; a live one fences its copy pool when it cannot renew
# in time (doc/etcd.md), which two suites side by side on two loaded cores
# must not make it do by accident.
LEASE_S = 4


def start(procs, tmp_path, etcd, prefix, names, servers, **opts):
    pool_opts = dict(OPTS)
    pool_opts.update(opts)
    seeds = [(n, servers[n].addr, 1) for n in ("r1", "r2", "r3")]
    return [Instance(procs, tmp_path, etcd, prefix, n, {POOL: seeds},
                     lease_ttl="%ds" % LEASE_S, pool_opts=pool_opts)
            for n in names]


def cluster(procs, tmp_path, etcd, prefix, lbs, nkeys, spare=True, **opts):
    """redis-servers r1..r3 (and s1, empty, to add), instances <lbs>
    serving the pool, <nkeys> keys written through the first: (servers,
    instances, {key: value})."""
    servers = redis_servers(procs, ["r1", "r2", "r3"] + (["s1"] if spare
                                                        else []))
    insts = start(procs, tmp_path, etcd, prefix, lbs, servers, **opts)
    wait_listening(insts)
    return servers, insts, fill(insts[0], nkeys)


def redis_servers(procs, names):
    return {n: RedisServer(procs) for n in names}


def migration(inst):
    return inst.api.ok("GET", "/api/pools/%s/migration" % POOL)


def wait_ended(insts, epoch, timeout=40.0):
    """Every instance reports migration <epoch> over."""
    def over():
        for i in insts:
            j = migration(i)
            last = j.get("last") or {}
            if j.get("active") or last.get("epoch") != epoch:
                return None
        return True
    try:
        wait_for(over, timeout=timeout, interval=0.1,
                 what="migration %d to end everywhere" % epoch)
    except AssertionError as e:
        raise AssertionError("%s: %s; logs: %s" % (
            e, [migration(i) for i in insts],
            [i.log()[-2500:] for i in insts]))


def wait_listening(insts):
    """Each instance serves the pool (a copy pool listens once etcd's
    members are applied and it is registered)."""
    for i in insts:
        def up():
            try:
                c = Resp(i.port, timeout=2.0)
                return c.call("PING") == Simple("PONG")
            except OSError:
                return False
        wait_for(up, timeout=15.0, what="%s to serve" % i.name)


class Load:
    """INCR of <n> counters through every instance in turn, from one
    thread per instance; counts what each was told (an error reply ran
    nothing: a gate refuses before anything runs)."""

    def __init__(self, insts, n=60):
        self.insts = insts
        self.n = n
        self.acked = [0] * n
        self.unknown = [0] * n  # sent when its instance was killed
        self.killed = set()     # instances killed on purpose
        self.errors = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(k,),
                                         daemon=True)
                        for k in range(len(insts))]

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=30)

    def _run(self, k):
        c = None
        i = k
        deadline = time.monotonic() + 120
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            inst = self.insts[k]
            if c is None:
                try:
                    c = Resp(inst.port, timeout=15.0)
                except OSError as e:
                    with self.lock:
                        self.errors.append("connect %s: %r" % (inst.name, e))
                    time.sleep(0.05)
                    continue
            key = "c{%d}" % (i % self.n)
            try:
                r = c.call("INCR", key)
            except Exception as e:      # unknown outcome: connection lost
                with self.lock:
                    if inst.name in self.killed:
                        self.unknown[i % self.n] += 1
                    else:
                        self.errors.append("%s INCR %s: %r"
                                           % (inst.name, key, e))
                return
            with self.lock:
                if isinstance(r, int):
                    self.acked[i % self.n] += 1
                else:
                    self.errors.append("%s INCR %s: %r" % (inst.name, key, r))
            i += 7


def holders(servers, key):
    return [n for n, s in servers.items() if s.call("EXISTS", key) == 1]


def check_data(insts, servers, keys, load):
    """Every key on exactly one redis-server, and right through every
    instance; every counter equal to the increments acknowledged."""
    bad = []
    clients = [Resp(i.port, timeout=10.0) for i in insts]
    for k, v in keys.items():
        h = holders(servers, k)
        if len(h) != 1:
            bad.append("%s on %s" % (k, h))
        for i, c in zip(insts, clients):
            got = c.call("GET", k)
            if got != v.encode():
                bad.append("%s via %s: %r, not %r" % (k, i.name, got, v))
    for n in range(load.n if load else 0):
        k = "c{%d}" % n
        h = holders(servers, k)
        if len(h) != 1:
            bad.append("%s on %s" % (k, h))
        for i, c in zip(insts, clients):
            got = int(c.call("GET", k) or 0)
            lo, hi = load.acked[n], load.acked[n] + load.unknown[n]
            if not lo <= got <= hi:
                bad.append("%s via %s: %r, not %d..%d (acknowledged)"
                           % (k, i.name, got, lo, hi))
    assert not bad, "%d wrong: %s" % (len(bad), bad[:12])


def add(inst, servers, name):
    """Add member <name> through <inst>: (the migration's epoch, the
    answer)."""
    st, rep, _ = inst.api.call("POST", "/api/pools/%s/members" % POOL,
                               {"name": name, "address": servers[name].addr})
    assert st == 201, (st, rep)
    return rep["migration"]["epoch"], rep


def fill(inst, n):
    c = Resp(inst.port, timeout=10.0)
    keys = {"k%d" % i: "v%d" % i for i in range(n)}
    items = list(keys.items())
    for at in range(0, n, 200):
        cmd = ["MSET"]
        for k, v in items[at:at + 200]:
            cmd += [k, v]
        assert c.call(*cmd) == Simple("OK")
    return keys


def test_one_migration_on_every_instance_one_copier(procs, tmp_path, etcd):
    """Scale-out then scale-in with three instances under load: one
    migration each (the same epoch everywhere), one copier, no lost or
    doubled increment, every key on exactly one member."""
    prefix = unique_prefix()
    servers, insts, keys = cluster(
        procs, tmp_path, etcd, prefix,
        ["lb-1", "lb-2", "lb-3"], 6000, migration_rate=4000)
    load = Load(insts)
    load.start()
    try:
        time.sleep(0.3)
        # scale-out through lb-2: one etcd transaction, one migration
        epoch, rep = add(insts[1], servers, "s1")
        assert rep["etcd_revision"] == epoch, rep
        # every instance runs it, under the same number
        for i in insts:
            wait_for(lambda: (migration(i).get("epoch") == epoch or
                              (migration(i).get("last") or {}).get("epoch")
                              == epoch),
                     timeout=10.0, what="%s to run migration %d"
                     % (i.name, epoch))
        wait_ended(insts, epoch)
        lasts = [migration(i)["last"] for i in insts]
        copied = [x["keys_moved"] for x in lasts]
        assert sum(1 for c in copied if c > 0) == 1, lasts
        assert servers["s1"].dbsize() > 0
        # the migration's keys are gone from etcd
        tree = Tree(etcd, prefix)
        left = [k for k in etcd.range("%s/pools/%s/" % (prefix, POOL))[1]
                if "/members/" not in k]
        assert left == [], left
        # scale-in through lb-3: r1 leaves once its keys moved
        st, rep, _ = insts[2].api.call(
            "DELETE", "/api/pools/%s/members/r1" % POOL)
        assert st == 200, (st, rep)
        epoch2 = rep["migration"]["epoch"]
        assert epoch2 > epoch
        wait_ended(insts, epoch2)
        wait_for(lambda: "r1" not in tree.members(POOL), timeout=10.0,
                 what="r1's record to go")
        for i in insts:
            wait_for(lambda: "r1" not in i.members(POOL), timeout=10.0,
                     what="r1 to leave %s" % i.name)
        time.sleep(0.3)
    finally:
        load.stop()
    assert not load.errors, load.errors[:10]
    assert sum(load.acked) > 100, load.acked
    assert servers["r1"].dbsize() == 0
    check_data(insts, servers, keys, load)


def copying(inst, epoch):
    """<inst>'s view of migration <epoch> while it runs, or None."""
    j = migration(inst)
    return j if j.get("active") and j.get("epoch") == epoch else None


def test_copier_killed_another_instance_finishes(procs, tmp_path, etcd):
    """kill -9 the instance that copies, mid-copy: its lock goes with its
    lease, another instance takes it and finishes; nothing acknowledged
    is lost."""
    prefix = unique_prefix()
    servers, insts, keys = cluster(
        procs, tmp_path, etcd, prefix,
        ["lb-1", "lb-2", "lb-3"], 4000, migration_rate=300)
    load = Load(insts)
    load.start()
    try:
        epoch, _ = add(insts[0], servers, "s1")
        holder = wait_for(lambda: (copying(insts[0], epoch) or {}).get(
            "copier"), timeout=10.0, what="a copier")
        victim = [i for i in insts if i.name == holder][0]
        wait_for(lambda: (copying(victim, epoch) or {}).get("keys_moved", 0)
                 > 100, timeout=10.0, what="%s to copy" % holder)
        load.killed.add(victim.name)
        victim.kill()
        rest = [i for i in insts if i is not victim]
        # another instance takes the lock once the lease runs out
        wait_for(lambda: (copying(rest[0], epoch) or {}).get("copier")
                 not in (None, holder), timeout=15.0,
                 what="another instance to take the copier lock")
        wait_ended(rest, epoch)
        lasts = [migration(i)["last"] for i in rest]
        assert sum(x["keys_moved"] for x in lasts) > 0, lasts
        time.sleep(0.3)
    finally:
        load.stop()
    assert not load.errors, load.errors[:10]
    check_data(rest, servers, keys, load)


def test_instance_started_mid_migration_gates_too(procs, tmp_path, etcd):
    """An instance that starts while a migration runs takes it from etcd
    (the same epoch) and serves right at once: what it reads and writes
    mid-migration is what the others see after."""
    prefix = unique_prefix()
    servers, insts, keys = cluster(
        procs, tmp_path, etcd, prefix,
        ["lb-1", "lb-2"], 4000, migration_rate=100)
    epoch, _ = add(insts[1], servers, "s1")
    wait_for(lambda: any((copying(i, epoch) or {}).get("keys_moved", 0) > 50
                         for i in insts), timeout=10.0, what="copying")
    late = start(procs, tmp_path, etcd, prefix, ["lb-3"], servers,
                 migration_rate=100)[0]
    wait_listening([late])
    j = copying(late, epoch)
    assert j is not None, migration(late)   # still running, here too
    c = Resp(late.port, timeout=10.0)
    wrong = [k for k, v in keys.items() if c.call("GET", k) != v.encode()]
    assert wrong == [], wrong[:10]
    for n in range(300):
        keys["n{%d}" % n] = "late%d" % n
        assert c.call("SET", "n{%d}" % n, "late%d" % n) == Simple("OK")
    wait_ended(insts + [late], epoch)
    # its reads went through its gates: it moved keys itself
    assert migration(late)["last"]["keys_moved_by_traffic"] > 0, \
        migration(late)
    check_data(insts + [late], servers, keys, None)


def test_two_stages_on_every_instance(procs, tmp_path, etcd):
    """r1's weight 1 -> 3 (ketama/md5): members both give and take keys,
    so the migration runs in two stages; the second begins on every
    instance (the copier writes it into etcd) and every key ends on one
    member with its value, the counters right."""
    prefix = unique_prefix()
    servers, insts, keys = cluster(
        procs, tmp_path, etcd, prefix,
        ["lb-1", "lb-2"], 4000, spare=False, migration_rate=1500,
        migration_batch=20)
    load = Load(insts)
    load.start()
    seen = {i.name: [] for i in insts}
    try:
        st, rep, _ = insts[1].api.call(
            "PATCH", "/api/pools/%s/members/r1" % POOL, {"weight": 3})
        assert st == 200, (st, rep)
        epoch = rep["migration"]["epoch"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            active = False
            for i in insts:
                j = migration(i)
                if j.get("active") and j.get("epoch") == epoch:
                    active = True
                    s = j.get("stage")
                    if s and (not seen[i.name] or seen[i.name][-1] != s):
                        seen[i.name].append(s)
            if not active:
                break
            time.sleep(0.02)
        wait_ended(insts, epoch)
        time.sleep(0.3)
    finally:
        load.stop()
    for i in insts:
        assert seen[i.name] == [1, 2], seen
    assert not load.errors, load.errors[:10]
    check_data(insts, servers, keys, load)


def test_a_stopped_instance_holds_the_barrier_until_its_lease_ends(
        procs, tmp_path, etcd):
    """An instance frozen (SIGSTOP) when a change comes cannot drain: the
    others hold their moving keys (the barrier waits for its key) until its
    lease runs out and its record goes; then the migration runs and ends
    without it, and nothing acknowledged is lost."""
    import signal
    prefix = unique_prefix()
    servers, insts, keys = cluster(
        procs, tmp_path, etcd, prefix,
        ["lb-1", "lb-2", "lb-3"], 3000)
    frozen = insts[2]
    frozen.proc.send_signal(signal.SIGSTOP)
    live = insts[:2]
    load = Load(live)
    load.start()
    waited = False
    try:
        t0 = time.monotonic()
        epoch, _ = add(live[0], servers, "s1")
        while time.monotonic() - t0 < 1.0:
            waited |= bool(migration(live[0]).get("waiting_for_instances"))
            time.sleep(0.05)
        wait_ended(live, epoch, timeout=30.0)
        took = time.monotonic() - t0
        time.sleep(0.3)
    finally:
        load.stop()
        frozen.kill()    # resumed: the next test
    assert waited, "lb-1 never waited for the frozen instance"
    # its last renewal came at most a quarter of the lease before the
    # freeze
    assert took >= LEASE_S * 3 / 4 - 0.3, "ended in %.1f s: before lb-3's lease " \
        "(%d s) ran out" % (took, LEASE_S)
    assert not load.errors, load.errors[:10]
    check_data(live, servers, keys, load)


def test_a_resumed_instance_answers_no_key_until_it_is_back(
        procs, tmp_path, etcd):
    """The fence: an instance frozen past its lease while the others run a
    migration without it would, once resumed, send moving keys to their
    old owners until its watch caught up -- a write there is lost. It
    answers every key with an error from the moment it may have lost its
    lease until it has a new one, is registered again and has applied
    what it missed; then it serves every key right."""
    import signal
    prefix = unique_prefix()
    servers, insts, keys = cluster(
        procs, tmp_path, etcd, prefix, ["lb-1", "lb-2"], 3000)
    frozen = insts[1]
    # a client of the frozen instance; its requests wait in the socket
    c = Resp(frozen.port, timeout=10.0)
    assert c.call("GET", "k1") == b"v1"
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        epoch, _ = add(insts[0], servers, "s1")
        wait_ended(insts[:1], epoch, timeout=30.0)
        moved = [k for k in keys if holders(servers, k) == ["s1"]]
        assert moved, "nothing moved to s1"
        # sent while it is frozen: a write of a moved key, and reads
        k = moved[0]
        c.send(encode("SET", k, "lost?") + encode("GET", k) +
               encode("GET", moved[-1]))
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    replies = c.read_replies(3)
    for r in replies:
        assert isinstance(r, Err) and r.startswith(
            "ERR no member available: this chashd may have lost its etcd "
            "lease"), replies
    # back once registered again, the migration it missed applied
    wait_for(lambda: c.call("GET", moved[-1]) == keys[moved[-1]].encode(),
             timeout=15.0, what="lb-2 to serve again")
    # the write it refused never ran: every key once, right, everywhere
    check_data(insts, servers, keys, None)
    log = frozen.log()
    assert "lost its lease" in log or "could not renew its lease" in log, \
        log[-2000:]
    assert "pools with migration: copy serve again" in log, log[-2000:]
    st, m, _ = frozen.api.call("GET", "/metrics")
    assert "chashd_etcd_fences_total 1\n" in m and \
        "chashd_etcd_fenced 0\n" in m, m
    assert frozen.api.ok("GET", "/api/cluster")["etcd"]["fenced"] is False


def test_etcd_down_past_the_lease_fences_copy_pools_only(
        procs, tmp_path, etcd):
    """etcd down for longer than the lease (2 s): the instance cannot know
    whether another one, reaching etcd, was left to move keys without it,
    so its copy pool answers every key with an error (its clients'
    connections kept); a pool that does not copy keys serves on from its
    last ring. Once etcd is back and the same lease renews, the copy pool
    serves every key right again."""
    servers = redis_servers(procs, ["r1", "r2", "r3", "p1", "p2"])
    seeds = [(n, servers[n].addr, 1) for n in ("r1", "r2", "r3")]
    copy = Instance(procs, tmp_path, etcd, unique_prefix(), "lb-c",
                    {POOL: seeds}, pool_opts=OPTS)
    plain = Instance(procs, tmp_path, etcd, unique_prefix(), "lb-p",
                     {POOL: [(n, servers[n].addr, 1) for n in ("p1", "p2")]},
                     pool_opts=dict(OPTS, migration="off"))
    wait_listening([copy, plain])
    keys = fill(copy, 200)
    fill(plain, 200)
    cc, pc = Resp(copy.port, timeout=10.0), Resp(plain.port, timeout=10.0)
    etcd.stop()
    try:
        # fenced within the lease (2 s) of the last renewal
        wait_for(lambda: isinstance(cc.call("GET", "k7"), Err), timeout=5.0,
                 interval=0.1, what="the copy pool to fence")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            r = cc.call("GET", "k%d" % int(time.monotonic() * 1000 % 200))
            assert isinstance(r, Err) and "lost its etcd lease" in r, r
            assert cc.call("SET", "k3", "lost?") != Simple("OK")
            assert pc.call("GET", "k5") == b"v5"
            time.sleep(0.05)
        assert cc.call("PING") == Simple("PONG")   # no key: answered
        assert copy.etcd_state()["fenced"] is True
        assert plain.etcd_state()["fenced"] is False
        # what an operator sees
        p = subprocess.run([CHASH, "ctl", "--admin", "127.0.0.1:%d"
                            % copy.admin_port, "cluster"],
                           capture_output=True, text=True, timeout=20)
        assert "FENCED: this instance may have lost its lease" in p.stdout, \
            p.stdout + p.stderr
        st, m, _ = copy.api.call("GET", "/metrics")
        assert "chashd_etcd_fenced 1\n" in m, m
    finally:
        etcd.start()
    wait_for(lambda: cc.call("GET", "k7") == b"v7", timeout=15.0,
             interval=0.1, what="the copy pool to serve again")
    wrong = [k for k, v in keys.items() if cc.call("GET", k) != v.encode()]
    assert wrong == [], wrong[:10]
    st = copy.etcd_state()
    assert st["fenced"] is False and st["fences"] == 1, st


def test_a_copy_pool_serves_again_after_etcd_is_wiped(procs, tmp_path, etcd):
    """etcd wiped (a new, empty data dir): the instance's lease is gone with
    it, so its copy pool fences; it grants a new lease, seeds etcd again,
    sees its record back under that lease and serves every key again --
    a record of the old etcd must not pass for it."""
    prefix = unique_prefix()
    servers = redis_servers(procs, ["r1", "r2", "r3"])
    inst = start(procs, tmp_path, etcd, prefix, ["lb-1"], servers)[0]
    wait_listening([inst])
    keys = fill(inst, 300)
    etcd.wipe_restart()
    c = Resp(inst.port, timeout=10.0)
    wait_for(lambda: inst.etcd_state()["fences"] >= 1, timeout=15.0,
             interval=0.1, what="the fence to go up")
    wait_for(lambda: c.call("GET", "k9") == b"v9", timeout=20.0,
             interval=0.1, what="the copy pool to serve again")
    wrong = [k for k, v in keys.items() if c.call("GET", k) != v.encode()]
    assert wrong == [], wrong[:10]
    assert inst.etcd_state()["fenced"] is False
    assert sorted(Tree(etcd, prefix).members(POOL)) == ["r1", "r2", "r3"]

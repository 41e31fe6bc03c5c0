# migration_util.py -- what the live-migration suites share
# (test_migration.py, test_migration_faults.py): K real redis-servers and
# chashd with one redis pool `store` (migration: copy, ketama, hash_tag
# "{}", the admin API and a state file in the test's dir); adding and
# removing members through the admin API and waiting (bounded) for the
# migration to end; the old and new owner of every key (`chash lookup
# --config` on the ring before and after, checked against the API's
# lookup); which servers hold a key (EXISTS on each, read directly).
# Then a concurrent workload through chashd (Workload) that records what
# each client was told, and a checker that reads the redis-servers
# directly after the workload is quiesced and lists every violation of
# the invariants of reference/redis-memcached.md 3.8. Every process is
# started through the test's Procs (killed at teardown); every wait and
# every load loop is bounded.
# SPDX-License-Identifier: BSD-2-Clause
import pytest
import math
import os
import random
import signal
import socket
import threading
import time

from admin_util import Api
from base_util import can_connect, free_port, wait_for
from redis_util import (CLOSED, Closed, Err, RedisServer, Resp, Simple,
                        encode, spread_keys, start_chashd)

POOL = "store"
DONE_TIMEOUT = 20.0

# ------------------------------------------------------------- the store --


class Store:
    """<n> redis-servers r1..rn in pool `store` of a chashd with the admin
    API and a state file, and <spares> more redis-servers (s1..) started
    empty for adds. <migration>: the pool's `migration:` ("copy", "off",
    or None to leave the key out, as a config written before the engine
    has it); <opts>: more pool keys (migration_rate: 1, ...)."""

    def __init__(self, procs, n=3, spares=1, hash="md5",
                 migration="copy", opts=None, weights=None):
        self.procs = procs
        self.tmp = str(procs.tmp)
        self.servers = {}                 # every redis-server by member name
        self.members = {}                 # the ring now: name -> weight
        for i in range(n):
            name = "r%d" % (i + 1)
            self.servers[name] = RedisServer(procs)
            self.members[name] = (weights or {}).get(name, 1)
        self.spares = []
        for i in range(spares):
            name = "s%d" % (i + 1)
            self.servers[name] = RedisServer(procs)
            self.spares.append(name)
        self.hash = hash
        self.mode = migration
        self.opts = dict(opts or {})
        self.port, self.aport = free_port(), free_port()
        self.state_file = os.path.join(self.tmp, "state.json")
        self.conf = os.path.join(self.tmp, "chashd.yml")
        self.log_path = os.path.join(self.tmp, "chashd.log")
        self.text = self.config_text()
        with open(self.conf, "w") as f:
            f.write(self.text)
        self.api = Api(self.aport)
        self.proc = None
        self._rings = 0
        self.start()

    # -- config and process --

    def pool_lines(self, members, with_migration=True):
        lines = ["%s:" % POOL, "  listen: 127.0.0.1:%d" % self.port,
                 "  mode: redis", "  hash: %s" % self.hash,
                 "  distribution: ketama", '  hash_tag: "{}"',
                 "  timeout: 10000", "  auto_eject_hosts: false"]
        if with_migration:
            if self.mode is not None:
                lines.append("  migration: %s" % self.mode)
            for k, v in self.opts.items():
                lines.append("  %s: %s" % (k, v))
        lines.append("  servers:")
        for name, w in members.items():
            lines.append("    - %s:%d %s" % (self.servers[name].addr, w, name))
        return lines

    def config_text(self):
        g = ["global:", "  admin: 127.0.0.1:%d" % self.aport,
             "  workers: 2", "  state_file: %s" % self.state_file]
        return "\n".join(g + self.pool_lines(self.members)) + "\n"

    def start(self):
        self.proc = start_chashd(self.procs, self.conf,
                                 [self.port, self.aport])

    def kill(self, sig=signal.SIGKILL):
        """Stop chashd (SIGKILL: a crash) and wait until its ports close."""
        self.proc.send_signal(sig)
        self.proc.wait(timeout=10)
        wait_for(lambda: not can_connect(self.port) and
                 not can_connect(self.aport), timeout=10,
                 what="chashd's ports to close")

    def restart(self, sig=signal.SIGKILL):
        """chashd killed and started again on the same config and state
        file."""
        self.kill(sig)
        self.start()

    def log(self, tail=6000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-tail:]

    def client(self, timeout=10.0):
        return Resp(self.port, timeout=timeout)

    # -- membership through the admin API --

    def add(self, name, weight=1, force=False, dry_run=False):
        """POST a member (one of self.servers); (status, json). On success
        the ring kept here follows."""
        body = {"name": name, "address": self.servers[name].addr,
                "weight": weight}
        if force:
            body["force"] = True
        path = "/api/pools/%s/members" % POOL
        if dry_run:
            path += "?dry_run=true"
        st, j, _ = self.api.call("POST", path, body)
        if st in (200, 201) and not dry_run:
            self.members[name] = weight
        return st, j

    def remove(self, name, now=False, dry_run=False):
        """DELETE a member; (status, json). On success the ring kept here
        follows (a scale-in takes the member out of the ring at once)."""
        q = [x for x, on in (("now=true", now), ("dry_run=true", dry_run))
             if on]
        path = "/api/pools/%s/members/%s" % (POOL, name)
        if q:
            path += "?" + "&".join(q)
        st, j, _ = self.api.call("DELETE", path)
        if st == 200 and not dry_run:
            self.members.pop(name, None)
        return st, j

    def proc_state(self):
        rc = self.proc.poll()
        if rc is None:
            return "chashd still running"
        return "chashd exited: %s" % (
            "signal %s" % signal.Signals(-rc).name if rc < 0 else
            "status %d" % rc)

    def migration(self):
        try:
            st, j, _ = self.api.get("/api/pools/%s/migration" % POOL)
        except OSError as e:
            raise AssertionError("admin API: %r (%s); log: %s"
                                 % (e, self.proc_state(), self.log(1500)))
        assert st == 200, "GET migration -> %d %s" % (st, j)
        return j

    def wait_done(self, epoch=None, timeout=DONE_TIMEOUT):
        """Wait (bounded) until GET migration reports `active: false` with
        `last` set (of <epoch> when given); returns `last`."""
        seen = {}

        def done():
            j = self.migration()
            seen["j"] = j
            last = j.get("last")
            if j.get("active") is False and last and \
                    (epoch is None or last.get("epoch") == epoch):
                return last
            return None
        try:
            return wait_for(done, timeout=timeout, interval=0.05,
                            what="the migration to end")
        except AssertionError as e:
            raise AssertionError("%s; last answer: %s" % (e, seen.get("j")))

    # -- where keys belong and where they are --

    def ring_file(self, members):
        self._rings += 1
        path = os.path.join(self.tmp, "ring-%d.yml" % self._rings)
        with open(path, "w") as f:
            f.write("global:\n  admin: off\n" +
                    "\n".join(self.pool_lines(members, False)) + "\n")
        return path

    def owners(self, keys, members=None):
        """{key: member name} in the ring of <members> (default: the ring
        now), from `chash lookup --config` on a file of that ring."""
        return spread_keys(self.ring_file(dict(members or self.members)),
                           POOL, keys)

    def check_owners_match_api(self, owners, sample=40, seed=0):
        """The ring this suite computes is chashd's: the API's lookup names
        the same member for a sample of keys."""
        rnd = random.Random(seed)
        keys = sorted(owners)
        for k in rnd.sample(keys, min(sample, len(keys))):
            got = self.api.lookup(POOL, k)
            assert got == [owners[k]], \
                "lookup %s: API %s, chash lookup %s" % (k, got, owners[k])

    def where(self, keys, names=None):
        """{key: [member names holding it]} (EXISTS on each server)."""
        keys = list(keys)
        out = {k: [] for k in keys}
        for name in names or self.servers:
            srv = self.servers[name]
            if srv.proc.poll() is not None:
                continue
            for k in srv.holds(keys):
                out[k].append(name)
        return out

    def holder(self, key):
        return [n for n, s in self.servers.items()
                if s.proc.poll() is None and s.call("EXISTS", key) == 1]


# ------------------------------------------------------------- a change --


class Change:
    """A membership change and every key's owner before and after it."""

    def __init__(self, store, keys, old_members, new_members):
        self.keys = list(keys)
        self.old = store.owners(self.keys, old_members)
        self.new = store.owners(self.keys, new_members)
        self.moving = [k for k in self.keys if self.old[k] != self.new[k]]
        self.moving_set = set(self.moving)


def plan(store, keys, add=None, remove=None, weight=1):
    """The Change of adding <add> or removing <remove> from the ring now."""
    old = dict(store.members)
    new = dict(old)
    if add:
        new[add] = weight
    if remove:
        new.pop(remove)
    return Change(store, keys, old, new)


def moving_keys(store, change_members, n, prefix="k", tag=False, limit=200000):
    """<n> key names (prefix:i) that move under the change from the ring
    now to <change_members>, and their (old, new) owners."""
    cands = ["%s:%d" % (prefix, i) for i in range(limit)]
    out = []
    step = 2000
    for i in range(0, limit, step):
        part = cands[i:i + step]
        o = store.owners(part)
        nw = store.owners(part, change_members)
        out += [(k, o[k], nw[k]) for k in part if o[k] != nw[k]]
        if len(out) >= n:
            return out[:n]
    raise AssertionError("only %d moving keys in %d" % (len(out), limit))


def binomial_slack(n, p, sd=4.0):
    return sd * math.sqrt(max(n * p * (1 - p), 1.0)) + 2


# ----------------------------------------------------------- the workload --


class Unknown(Exception):
    """A request whose reply never came (timeout, connection closed)."""


class Refused(Exception):
    """No connection to chashd: the request was never sent."""


TYPE_KINDS = ("list", "hash", "set", "zset", "stream", "int")


def type_content(kind, i):
    """What type key <kind>:<i> holds, as the command that creates it and
    the reply its read command gives."""
    n = 5 + i % 7
    if kind == "list":
        vals = ["e%d-%d" % (i, j) for j in range(n)]
        return ("RPUSH", *vals), [v.encode() for v in vals]
    if kind == "hash":
        flat = []
        for j in range(n):
            flat += ["f%d" % j, "v%d-%d" % (i, j)]
        want = {flat[a].encode(): flat[a + 1].encode()
                for a in range(0, len(flat), 2)}
        return ("HSET", *flat), want
    if kind == "set":
        vals = ["m%d-%d" % (i, j) for j in range(n)]
        return ("SADD", *vals), {v.encode() for v in vals}
    if kind == "zset":
        flat, want = [], []
        for j in range(n):
            flat += ["%d.5" % (j * 3 - i), "z%d" % j]
            want.append((b"z%d" % j, b"%d.5" % (j * 3 - i)))
        want.sort(key=lambda t: float(t[1]))
        return ("ZADD", *flat), [x for t in want for x in t]
    if kind == "stream":
        return None, [[b"%d-1" % (j + 1), [b"f", b"s%d-%d" % (i, j)]]
                      for j in range(n)]
    if kind == "int":
        return None, b"%d" % (1000000 + i * 7)
    raise AssertionError(kind)


def type_create_cmds(key, kind, i):
    cmd, _ = type_content(kind, i)
    if kind == "stream":
        n = 5 + i % 7
        return [("XADD", key, "%d-1" % (j + 1), "f", "s%d-%d" % (i, j))
                for j in range(n)]
    if kind == "int":
        return [("SET", key, "%d" % (1000000 + i * 7))]
    return [(cmd[0], key, *cmd[1:])]


def type_read_cmd(key, kind):
    return {"list": ("LRANGE", key, 0, -1), "hash": ("HGETALL", key),
            "set": ("SMEMBERS", key),
            "zset": ("ZRANGE", key, 0, -1, "WITHSCORES"),
            "stream": ("XRANGE", key, "-", "+"), "int": ("GET", key)}[kind]


def type_normalise(kind, reply):
    if kind == "hash" and isinstance(reply, list):
        return {reply[a]: reply[a + 1] for a in range(0, len(reply), 2)}
    if kind == "set" and isinstance(reply, list):
        return set(reply)
    return reply


class Single:
    """One single-writer key: the state after its last acknowledged write,
    the states of writes with an error reply since (the op may have run
    or not), and whether a write that timed out may still run later
    (then only its location is checked)."""

    __slots__ = ("acked", "after", "wild")

    def __init__(self, state):
        self.acked = state
        self.after = []
        self.wild = False

    def ack(self, state):
        self.acked = state
        self.after = []

    def maybe(self, state):
        self.after.append(state)

    def allowed(self):
        return [self.acked] + self.after


class Workload:
    """Client threads through chashd over keys in moving and non-moving
    ranges (every category spans the whole ring). Each thread has its
    own connection and its own single-writer keys; counters are shared.
    Bounded by <max_seconds> and <max_ops> per thread."""

    def __init__(self, port, threads=4, counters=300, strings=60, ttls=30,
                 dels=30, msets=30, groups=15, shorts=150, types=15,
                 seed=7, max_seconds=30.0, max_ops=100000,
                 short_ms=300, timeout=10.0):
        self.port = port
        self.nthreads = threads
        self.seed = seed
        self.max_seconds = max_seconds
        self.max_ops = max_ops
        self.short_ms = short_ms
        self.timeout = timeout
        T = range(threads)
        self.counters = ["cnt:%d" % i for i in range(counters)]
        self.cnt_init = {k: 1000 + i for i, k in enumerate(self.counters)}
        self.pcounters = {t: ["pc:%d:%d" % (t, i) for i in range(10)]
                          for t in T}
        self.strings = {t: ["str:%d:%d" % (t, i) for i in range(strings)]
                        for t in T}
        self.ttls = {t: ["ttl:%d:%d" % (t, i) for i in range(ttls)]
                     for t in T}
        self.dels = {t: ["del:%d:%d" % (t, i) for i in range(dels)]
                     for t in T}
        self.msets = {t: ["ms:%d:%d" % (t, i) for i in range(msets)]
                      for t in T}
        self.groups = {t: [["{g%d.%d}%s" % (t, i, f) for f in "abc"]
                           for i in range(groups)] for t in T}
        self.shorts = {t: ["short:%d:%d" % (t, i) for i in range(shorts)]
                       for t in T}
        self.types = [("%s:%d" % (kind, i), kind, i)
                      for kind in TYPE_KINDS for i in range(types)]
        # shared records (one writer per key; dict stores are atomic)
        self.single = {}          # key -> Single
        self.floor = {}           # key -> last acked seq (readers' floor)
        self.sent = {}            # key -> highest seq ever sent
        self.acked = {k: 0 for k in self.all_counters()}
        self.unknown = {k: 0 for k in self.all_counters()}
        self.short_last = 0.0     # monotonic time of the last short SET
        self.lock = threading.Lock()
        self.violations = []
        self.errors = []          # (op, reply) of error replies
        self.lost = 0             # requests whose reply never came
        self.ops = 0
        self.gets = 0
        self.latencies = []
        self.stop_ev = threading.Event()
        self.threads = []

    # -- key lists --

    def all_counters(self):
        out = list(self.counters)
        for t in self.pcounters.values():
            out += t
        return out

    def stable_keys(self):
        """Keys that exist from prepare() to the end (never deleted, no
        short TTL)."""
        out = self.all_counters()
        for d in (self.strings, self.ttls, self.msets):
            for ks in d.values():
                out += ks
        for gs in self.groups.values():
            for g in gs:
                out += g
        out += [k for k, _, _ in self.types]
        return out

    def volatile_keys(self):
        out = []
        for d in (self.dels, self.shorts):
            for ks in d.values():
                out += ks
        return out

    def all_keys(self):
        return self.stable_keys() + self.volatile_keys()

    # -- setup --

    def prepare(self, client):
        """Create every key through chashd (pipelines) and record it."""
        cmds = []
        for k in self.all_counters():
            v = self.cnt_init.get(k, 0)
            cmds.append(("SET", k, v))
            self.cnt_init[k] = v
        for t in range(self.nthreads):
            for k in self.strings[t] + self.msets[t]:
                cmds.append(("SET", k, 0))
                self.single[k] = Single(("val", 0))
                self.floor[k] = self.sent[k] = 0
            for g in self.groups[t]:
                for k in g:
                    cmds.append(("SET", k, 0))
                self.single[g[0]] = Single(("val", 0))
                self.floor[g[0]] = self.sent[g[0]] = 0
            for i, k in enumerate(self.ttls[t]):
                # a TTL far out (10..20 min) that every check can measure
                ms = 600000 + 1000 * i
                t0 = time.monotonic()
                cmds.append(("SET", k, "t", "PX", ms))
                self.single[k] = Single(("ttl", ms, t0, None))
            for i, k in enumerate(self.dels[t]):
                if i % 2 == 0:
                    cmds.append(("SET", k, 0))
                    self.single[k] = Single(("val", 0))
                else:
                    self.single[k] = Single(("gone",))
                self.sent[k] = 0
        for key, kind, i in self.types:
            cmds += type_create_cmds(key, kind, i)
        for i in range(0, len(cmds), 500):
            part = cmds[i:i + 500]
            got = client.pipeline(part)
            bad = [(c, r) for c, r in zip(part, got)
                   if isinstance(r, Err) or r is CLOSED]
            assert not bad, "prepare: %s" % bad[:3]
        # the TTL keys' acked state: set between the first send and now
        now = time.monotonic()
        for t in range(self.nthreads):
            for k in self.ttls[t]:
                st = self.single[k].acked
                self.single[k].ack(("ttl", st[1], st[2], now))

    def set_shorts(self, client):
        """Every short key SET with PX <short_ms> now (before a change)."""
        cmds = [("SET", k, "s", "PX", self.short_ms)
                for ks in self.shorts.values() for k in ks]
        got = client.pipeline(cmds)
        assert all(r == Simple("OK") for r in got), got[:3]
        self.short_last = time.monotonic()

    # -- running --

    def start(self):
        self.t_start = time.monotonic()
        for t in range(self.nthreads):
            th = threading.Thread(target=self._run, args=(t,), daemon=True)
            th.start()
            self.threads.append(th)

    def stop(self, timeout=30.0):
        self.stop_ev.set()
        deadline = time.monotonic() + timeout
        for th in self.threads:
            th.join(max(0.1, deadline - time.monotonic()))
        alive = [th for th in self.threads if th.is_alive()]
        assert not alive, "%d workload threads still running" % len(alive)

    def violation(self, msg):
        with self.lock:
            if len(self.violations) < 1000:
                self.violations.append(msg)

    def _run(self, t):
        rnd = random.Random(self.seed * 1000 + t)
        conn = [None]

        def call_many(cmds):
            if conn[0] is None:
                try:
                    conn[0] = Resp(self.port, timeout=self.timeout)
                except OSError as e:      # chashd down: nothing was sent
                    time.sleep(0.05)
                    raise Refused(repr(e))
            t0 = time.monotonic()
            try:
                conn[0].send(b"".join(encode(*c) for c in cmds))
                out = [conn[0].read_reply() for _ in cmds]
            except (OSError, Closed, socket.timeout) as e:
                try:
                    conn[0].close()
                except OSError:
                    pass
                conn[0] = None
                with self.lock:
                    self.lost += 1
                raise Unknown(repr(e))
            dt = time.monotonic() - t0
            with self.lock:
                self.ops += 1
                if len(self.latencies) < 200000:
                    self.latencies.append(dt)
                for c, r in zip(cmds, out):
                    if isinstance(r, Err) and len(self.errors) < 200:
                        self.errors.append((c[:3], str(r)))
                    elif isinstance(r, Err):
                        self.errors.append(None)
            return out

        ops = [(self.op_incr, 25), (self.op_set_str, 10),
               (self.op_get_str, 15), (self.op_ttl, 8), (self.op_del, 7),
               (self.op_mset, 6), (self.op_mget, 8), (self.op_tag_mset, 5),
               (self.op_tag_mget, 5), (self.op_pipeline, 6),
               (self.op_type_read, 4)]
        table = [f for f, w in ops for _ in range(w)]
        deadline = self.t_start + self.max_seconds
        n = 0
        try:
            while not self.stop_ev.is_set() and n < self.max_ops and \
                    time.monotonic() < deadline:
                n += 1
                try:
                    rnd.choice(table)(t, rnd, call_many)
                except (Unknown, Refused):
                    pass
        except Exception as e:       # a bug in the workload itself
            self.violation("workload thread %d crashed: %r" % (t, e))
        finally:
            if conn[0] is not None:
                conn[0].close()

    # each op: send, then record what the reply says

    def _counter_op(self, k, d, call):
        try:
            r = call([("INCRBY", k, d)])[0]
        except Unknown:
            with self.lock:
                self.unknown[k] += d
            raise
        with self.lock:
            if isinstance(r, int):
                self.acked[k] += d
            else:
                self.unknown[k] += d
        return r

    def op_incr(self, t, rnd, call):
        self._counter_op(rnd.choice(self.counters), rnd.randint(1, 9), call)

    def _single_write(self, call, k, cmds, state, seq=None, keys=None):
        """A write of single-writer key(s) <keys> (default [k]) to <state>
        by <cmds>: acked on all-OK replies."""
        keys = keys or [k]
        if seq is not None:
            for x in keys:
                self.sent[x] = seq
        try:
            rs = call(cmds)
        except Unknown:
            for x in keys:
                self.single[x].wild = True
            raise
        ok = all(not isinstance(r, Err) for r in rs)
        for x in keys:
            if ok:
                self.single[x].ack(state)
                if seq is not None:
                    self.floor[x] = seq
            else:
                self.single[x].maybe(state)
        return rs

    def op_set_str(self, t, rnd, call):
        k = rnd.choice(self.strings[t])
        seq = self.sent[k] + 1
        self._single_write(call, k, [("SET", k, seq)], ("val", seq), seq)

    def _check_read(self, k, floor, r, what):
        if isinstance(r, Err):
            return
        if r is None:
            self.violation("%s %s: nil for a key that exists throughout"
                           % (what, k))
            return
        v = int(r)
        if v < floor:
            self.violation("%s %s: read %d, older than the last acked "
                           "write before the read (%d)" % (what, k, v, floor))
        if v > self.sent[k]:
            self.violation("%s %s: read %d, never written (highest sent %d)"
                           % (what, k, v, self.sent[k]))

    def op_get_str(self, t, rnd, call):
        k = rnd.choice(self.strings[rnd.randrange(self.nthreads)])
        floor = self.floor[k]
        r = call([("GET", k)])[0]
        with self.lock:
            self.gets += 1
        self._check_read(k, floor, r, "GET")

    def op_ttl(self, t, rnd, call):
        k = rnd.choice(self.ttls[t])
        x = rnd.random()
        t0 = time.monotonic()
        if x < 0.35:
            ms = rnd.randint(300, 900) * 1000
            cmd = ("SET", k, "t", "EX", ms // 1000) if x < 0.2 else \
                ("SET", k, "t", "PX", ms)
        elif x < 0.8:
            ms = rnd.randint(300, 900) * 1000
            cmd = ("PEXPIRE", k, ms) if x < 0.55 else ("EXPIRE", k, ms // 1000)
        else:
            ms = None
            cmd = ("PERSIST", k)
        try:
            r = call([cmd])[0]
        except Unknown:
            self.single[k].wild = True
            raise
        t1 = time.monotonic()
        if isinstance(r, Err):
            self.single[k].maybe(("ttl?",))
            return
        if ms is None:
            s = self.single[k]
            prev, sure = s.acked, not s.after and not s.wild
            # PERSIST answers 0 when the key had no TTL: state unchanged
            if r == 1 or prev == ("persist",) or not sure:
                s.ack(("persist",))
            else:
                self.violation("PERSIST %s: 0 for a key with a TTL (%s)"
                               % (k, prev))
            return
        if cmd[0] in ("EXPIRE", "PEXPIRE") and r != 1:
            self.violation("%s %s: %r for a key that exists throughout"
                           % (cmd[0], k, r))
            return
        self.single[k].ack(("ttl", ms, t0, t1))

    def op_del(self, t, rnd, call):
        k = rnd.choice(self.dels[t])
        if rnd.random() < 0.5:
            seq = self.sent[k] + 1
            self._single_write(call, k, [("SET", k, seq)], ("val", seq), seq)
        else:
            s = self.single[k]
            prev, sure = s.acked, not s.after and not s.wild
            r = self._single_write(call, k, [("DEL", k)], ("gone",))[0]
            if not isinstance(r, Err) and sure:
                want = 0 if prev == ("gone",) else 1
                if r != want:
                    self.violation("DEL %s: %r, the key was %s" %
                                   (k, r, prev))

    def op_mset(self, t, rnd, call):
        ks = rnd.sample(self.msets[t], 4)
        seq = max(self.sent[k] for k in ks) + 1
        args = []
        for k in ks:
            args += [k, seq]
        self._single_write(call, ks[0], [("MSET", *args)], ("val", seq),
                           seq, ks)

    def op_mget(self, t, rnd, call):
        ks = [rnd.choice(self.msets[rnd.randrange(self.nthreads)])
              for _ in range(3)]
        ks += [rnd.choice(self.strings[rnd.randrange(self.nthreads)])
               for _ in range(2)]
        floors = [self.floor[k] for k in ks]
        r = call([("MGET", *ks)])[0]
        with self.lock:
            self.gets += 1
        if isinstance(r, Err):
            return
        if not isinstance(r, list) or len(r) != len(ks):
            self.violation("MGET %s: %r" % (ks, r))
            return
        for k, f, v in zip(ks, floors, r):
            self._check_read(k, f, v, "MGET")

    def op_tag_mset(self, t, rnd, call):
        g = rnd.choice(self.groups[t])
        seq = self.sent[g[0]] + 1
        args = []
        for k in g:
            args += [k, seq]
        self._single_write(call, g[0], [("MSET", *args)], ("val", seq), seq)

    def op_tag_mget(self, t, rnd, call):
        g = rnd.choice(self.groups[rnd.randrange(self.nthreads)])
        floor = self.floor[g[0]]
        r = call([("MGET", *g)])[0]
        with self.lock:
            self.gets += 1
        if isinstance(r, Err):
            return
        if not isinstance(r, list) or len(r) != 3:
            self.violation("MGET %s: %r" % (g, r))
            return
        if len(set(r)) != 1:
            self.violation("MGET %s (one hash tag, one MSET each): %r"
                           % (g, r))
        self._check_read(g[0], floor, r[0], "MGET tag")

    def op_pipeline(self, t, rnd, call):
        """One send: INCRBY pc 1 x3, SET str seq, GET str, INCRBY pc 1:
        the INCRBY replies consecutive and in order, the GET sees the SET
        just before it (per-connection order, 3.8 item 6)."""
        pc = rnd.choice(self.pcounters[t])
        k = rnd.choice(self.strings[t])
        seq = self.sent[k] + 1
        self.sent[k] = seq
        cmds = [("INCRBY", pc, 1), ("INCRBY", pc, 1), ("SET", k, seq),
                ("GET", k), ("INCRBY", pc, 1)]
        try:
            r = call(cmds)
        except Unknown:
            with self.lock:
                self.unknown[pc] += 3
            self.single[k].wild = True
            raise
        incr = [r[0], r[1], r[4]]
        with self.lock:
            for x in incr:
                if isinstance(x, int):
                    self.acked[pc] += 1
                else:
                    self.unknown[pc] += 1
        if all(isinstance(x, int) for x in incr) and \
                not (incr[1] == incr[0] + 1 and incr[2] == incr[1] + 1):
            self.violation("pipeline INCRBY %s: replies %s not consecutive"
                           % (pc, incr))
        if r[2] == Simple("OK"):
            self.single[k].ack(("val", seq))
            self.floor[k] = seq
            if not isinstance(r[3], Err) and r[3] != b"%d" % seq:
                self.violation("pipeline SET %s %d then GET: %r"
                               % (k, seq, r[3]))
        else:
            self.single[k].maybe(("val", seq))

    def op_type_read(self, t, rnd, call):
        key, kind, i = rnd.choice(self.types)
        r = call([type_read_cmd(key, kind)])[0]
        with self.lock:
            self.gets += 1
        if isinstance(r, Err):
            return
        want = type_content(kind, i)[1]
        if type_normalise(kind, r) != want:
            self.violation("%s %s read %r, want %r" %
                           (type_read_cmd(key, kind)[0], key, r, want))

    # -- summary --

    def error_count(self):
        return len(self.errors)

    def p99_ms(self):
        if not self.latencies:
            return None
        s = sorted(self.latencies)
        return 1000 * s[min(len(s) - 1, int(len(s) * 0.99))]

    def summary(self):
        return ("%d ops (%d reads), %d error replies, %d lost replies, "
                "p99 %.1f ms" % (self.ops, self.gets, self.error_count(),
                                 self.lost, self.p99_ms() or 0))


# ---------------------------------------------------------- the checker --


def read_server(srv, cmds):
    with srv.client() as c:
        out = []
        for i in range(0, len(cmds), 500):
            out += c.pipeline(cmds[i:i + 500])
        return out


def check_placement(store, keys, owners, must_exist=None):
    """Violations of 'every key on exactly one server, its owner's'.
    <must_exist>: keys that must be somewhere. Returns (violations,
    where)."""
    where = store.where(keys)
    bad = []
    for k in keys:
        w = where[k]
        if len(w) > 1:
            bad.append("%s on %d servers %s (owner %s)" % (k, len(w), w,
                                                           owners[k]))
        elif len(w) == 1 and w[0] != owners[k]:
            bad.append("%s on %s, not on its owner %s" % (k, w[0], owners[k]))
        elif not w and must_exist and k in must_exist:
            bad.append("%s on no server" % k)
    return bad, where


def check_workload(store, wl, owners, slack_ms=300):
    """Every invariant of 3.8 (1, 2, 3 after the change, 4, 5 as recorded
    by the clients, 6, 7) on the quiesced store; <owners>: the new owner
    of every key. Returns the list of violations (empty: all hold)."""
    bad = list(wl.violations)
    keys = wl.all_keys()
    stable = set(wl.stable_keys())
    place_bad, where = check_placement(store, keys, owners, stable)
    bad += place_bad

    def on(k):
        w = where[k]
        return store.servers[w[0]] if len(w) == 1 else None

    # group reads per server
    per = {}

    def want_read(k, cmd):
        srv = on(k)
        if srv is not None:
            per.setdefault(srv.port, (srv, []))[1].append((k, cmd))

    for k in wl.all_counters():
        want_read(k, ("GET", k))
    for t in range(wl.nthreads):
        for k in wl.strings[t] + wl.msets[t]:
            want_read(k, ("GET", k))
            want_read(k, ("PTTL", k))
        for g in wl.groups[t]:
            for k in g:
                want_read(k, ("GET", k))
        for k in wl.dels[t]:
            want_read(k, ("GET", k))
        for k in wl.ttls[t]:
            want_read(k, ("PTTL", k))
    for key, kind, i in wl.types:
        want_read(key, type_read_cmd(key, kind))
        if kind == "int":
            want_read(key, ("OBJECT", "ENCODING", key))
    got = {}
    for srv, items in per.values():
        t0 = time.monotonic()
        replies = read_server(srv, [c for _, c in items])
        t1 = time.monotonic()
        for (k, c), r in zip(items, replies):
            got[(k, c[0])] = (r, t0, t1)

    def val(k, cmd="GET"):
        return got.get((k, cmd), (None, 0, 0))[0]

    # 1. counters: acked <= final - initial <= acked + unknown
    for k in wl.all_counters():
        if len(where[k]) != 1:
            continue
        v = val(k)
        lo = wl.cnt_init[k] + wl.acked[k]
        hi = lo + wl.unknown[k]
        if v is None or not (lo <= int(v) <= hi):
            bad.append("counter %s = %r, want %d..%d (initial %d, acked "
                       "+%d, unknown +%d)" % (k, v, lo, hi, wl.cnt_init[k],
                                              wl.acked[k], wl.unknown[k]))

    def allowed_vals(k):
        s = wl.single[k]
        return s, [st for st in s.allowed()]

    # 1. strings: the last acked value (or a write with an error since)
    for t in range(wl.nthreads):
        for k in wl.strings[t] + wl.msets[t]:
            s, allowed = allowed_vals(k)
            v = val(k)
            if len(where[k]) != 1:
                continue
            if not s.wild and ("val", int(v or -1)) not in allowed:
                bad.append("string %s = %r, last acked %s, maybe %s"
                           % (k, v, s.acked, s.after))
            p = val(k, "PTTL")
            if p != -1:
                bad.append("string %s (never given a TTL): PTTL %r" % (k, p))
        for g in wl.groups[t]:
            s, allowed = allowed_vals(g[0])
            vs = [val(k) for k in g]
            if len({tuple(where[k]) for k in g}) != 1:
                bad.append("tag group %s split over %s" %
                           (g, [where[k] for k in g]))
            if any(len(where[k]) != 1 for k in g):
                continue
            if len(set(vs)) != 1:
                bad.append("tag group %s (MSET together) holds %s" % (g, vs))
            elif not s.wild and ("val", int(vs[0] or -1)) not in allowed:
                bad.append("tag group %s = %r, last acked %s, maybe %s"
                           % (g, vs[0], s.acked, s.after))
    # 2. deletes: the last acked op (a DEL: on no server)
    for t in range(wl.nthreads):
        for k in wl.dels[t]:
            s, allowed = allowed_vals(k)
            if s.wild or len(where[k]) > 1:
                continue
            v = val(k)
            state = ("gone",) if not where[k] else ("val", int(v))
            if state not in allowed:
                what = "resurrected delete" if s.acked == ("gone",) else \
                    "lost write"
                bad.append("%s: %s %s, last acked %s, maybe %s"
                           % (what, k, state, s.acked, s.after))
    # 4. TTLs kept
    for t in range(wl.nthreads):
        for k in wl.ttls[t]:
            s = wl.single[k]
            if s.wild or s.after or len(where[k]) != 1:
                continue
            p, t0, t1 = got[(k, "PTTL")]
            st = s.acked
            if st == ("persist",):
                if p != -1:
                    bad.append("TTL %s: PERSISTed, PTTL now %r" % (k, p))
                continue
            _, ms, ts, ta = st
            hi = ms - (t0 - ta) * 1000 + slack_ms
            lo = ms - (t1 - ts) * 1000 - slack_ms
            if not isinstance(p, int) or not (lo <= p <= hi):
                bad.append("TTL %s: PTTL %r, want %.0f..%.0f (set %d ms)"
                           % (k, p, lo, hi, ms))
    # 4. short TTLs expired
    for t in range(wl.nthreads):
        for k in wl.shorts[t]:
            if where[k]:
                bad.append("short-TTL key %s (PX %d) still on %s"
                           % (k, wl.short_ms, where[k]))
    # 7. types equal
    for key, kind, i in wl.types:
        if len(where[key]) != 1:
            continue
        want = type_content(kind, i)[1]
        r = type_normalise(kind, val(key, type_read_cmd(key, kind)[0]))
        if r != want:
            bad.append("%s %s: %r, want %r" % (kind, key, r, want))
        if kind == "int":
            enc = val(key, "OBJECT")
            if enc != b"int":
                bad.append("int string %s: encoding %r" % (key, enc))
    return bad


def wait_shorts_expired(wl, extra=0.3):
    """Sleep until every short key is past its TTL (plus <extra> s)."""
    left = wl.short_last + wl.short_ms / 1000.0 + extra - time.monotonic()
    if left > 0:
        time.sleep(left)


class Sampler:
    """During a migration: for batches of moving keys, EXISTS on the new
    owner, then on the old one. A key seen on n and then on o exists on
    both (keys move one way, once), 3.8 item 3."""

    def __init__(self, store, change, keys=None, max_seconds=60.0):
        self.store = store
        self.change = change
        self.keys = list(keys if keys is not None else change.moving)
        self.max_seconds = max_seconds
        self.both = []
        self.rounds = 0
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.th.start()
        return self

    def stop(self):
        self.stop_ev.set()
        self.th.join(15)
        assert not self.th.is_alive(), "sampler still running"

    def _run(self):
        deadline = time.monotonic() + self.max_seconds
        rnd = random.Random(3)
        ch = self.change
        conns = {}
        try:
            while not self.stop_ev.is_set() and time.monotonic() < deadline:
                batch = rnd.sample(self.keys, min(100, len(self.keys)))
                by_pair = {}
                for k in batch:
                    by_pair.setdefault((ch.old[k], ch.new[k]), []).append(k)
                for (o, n), ks in by_pair.items():
                    for name in (o, n):
                        if name not in conns:
                            conns[name] = self.store.servers[name].client()
                    on_n = conns[n].pipeline([("EXISTS", k) for k in ks])
                    on_o = conns[o].pipeline([("EXISTS", k) for k in ks])
                    for k, a, b in zip(ks, on_n, on_o):
                        if a == 1 and b == 1 and len(self.both) < 100:
                            self.both.append(k)
                self.rounds += 1
                time.sleep(0.02)
        except (OSError, Closed):
            pass
        finally:
            for c in conns.values():
                c.close()


# ------------------------------------------------ what the suites share --

@pytest.fixture(name="store")
def store_fixture(procs):
    """store(n=3, spares=1, opts=None, ...) -> a running Store (the
    fixture `store`: a suite imports store_fixture)."""
    def make(**kw):
        return Store(procs, **kw)
    return make


def brief(bad, n=12):
    """The first <n> of a checker's violations, for an assertion."""
    return "%d violations:\n  %s" % (len(bad), "\n  ".join(bad[:n]))

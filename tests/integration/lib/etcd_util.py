# etcd_util.py -- helpers for the etcd membership suites (doc/etcd.md): a
# private etcd on free loopback ports (fast raft timing, its data dir
# under tmp_path, always stopped), a small client of etcd's v3 JSON
# gateway (urllib only: keys and values in padded standard base64, int64
# answered as strings), chash's keys under a prefix (member records,
# bulk changes in one txn, the instance records), the convergence wait,
# and chashd instances with `members_from: etcd` pools and their admin API.
# SPDX-License-Identifier: BSD-2-Clause
import base64
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from admin_util import Api
from base_util import Chashd, Procs, can_connect, free_port, wait_for

ETCD = os.environ.get("CHASH_ETCD", "/usr/bin/etcd")
ETCD_MISSING = ("%s is missing: the etcd tests need etcd 3.4 (Debian's "
                "etcd-server; scripts/deps installs it)" % ETCD)

_PREFIXES = itertools.count(1)


def unique_prefix():
    """A key root of its own for one test: /chash-test-<pid>-<n>."""
    return "/chash-test-%d-%d" % (os.getpid(), next(_PREFIXES))


def b64(s):
    if isinstance(s, str):
        s = s.encode()
    return base64.b64encode(s).decode()


def unb64(s):
    return base64.b64decode(s) if s else b""


def prefix_end(prefix):
    """The range_end of a prefix: its last byte plus one."""
    p = prefix.encode() if isinstance(prefix, str) else prefix
    while p and p[-1] == 0xff:
        p = p[:-1]
    assert p, "no range end for an all-0xff prefix"
    return p[:-1] + bytes([p[-1] + 1])


def now_ms():
    return int(time.time() * 1000)


class EtcdError(Exception):
    """A gateway answer other than 200 (status, parsed body), or no answer
    (status None)."""

    def __init__(self, status, body, what):
        super().__init__("%s: %s %s" % (what, status, body))
        self.status = status
        self.body = body


class Etcd:
    """A private etcd 3.4 on two free loopback ports, and a client of its
    JSON gateway. The data dir lives under <base>; close() stops etcd and
    removes every dir it used."""

    def __init__(self, base, name="t1"):
        if not os.access(ETCD, os.X_OK):
            pytest.fail(ETCD_MISSING)
        self.base = str(base)
        self.name = name
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = "http://127.0.0.1:%d" % self.client_port
        self.dirs = []
        self.data_dir = self._new_dir()
        self.proc = None
        self.log_path = os.path.join(self.base, "etcd-%d.log"
                                     % self.client_port)
        self.start()

    def _new_dir(self):
        d = tempfile.mkdtemp(prefix="etcd-data.", dir=self.base)  # 0700
        self.dirs.append(d)
        return d

    # ---- the process ----------------------------------------------------
    def args(self):
        peer = "http://127.0.0.1:%d" % self.peer_port
        return [ETCD, "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url,
                "--listen-peer-urls", peer,
                "--initial-advertise-peer-urls", peer,
                "--initial-cluster", "%s=%s" % (self.name, peer),
                "--heartbeat-interval", "10", "--election-timeout", "100",
                "--logger", "zap", "--log-level", "error"]

    def start(self, timeout=15.0):
        assert self.proc is None or self.proc.poll() is not None, \
            "etcd already runs"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args(), stdout=log,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None:
                raise AssertionError("etcd exited (%s): %s" % (
                    self.proc.returncode, self.log()[-2000:]))
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("etcd not healthy after %.0f s: %s"
                                     % (timeout, self.log()[-2000:]))
            time.sleep(0.01)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def healthy(self):
        try:
            with urllib.request.urlopen(self.url + "/health",
                                        timeout=0.5) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL if it has not exited within <timeout>."""
        if not self.running():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        wait_for(lambda: not can_connect(self.client_port), timeout=5,
                 what="etcd's client port to close")

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self):
        """Stop (SIGTERM) and start again on the same data dir."""
        self.stop()
        self.start()

    def wipe_restart(self):
        """Stop, and start on a new empty data dir: same ports and flags."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir = self._new_dir()
        self.start()

    def close(self):
        self.stop()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # ---- the JSON gateway -----------------------------------------------
    def call(self, path, body, timeout=5.0):
        """POST <body> to /v3/<path>; the parsed answer. Not 200: an
        EtcdError."""
        req = urllib.request.Request(self.url + "/v3/" + path,
                                     data=json.dumps(body).encode(),
                                     method="POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            data = e.read()
            try:
                data = json.loads(data)
            except ValueError:
                pass
            raise EtcdError(e.code, data, path) from None
        except OSError as e:
            raise EtcdError(None, str(e), path) from None

    @staticmethod
    def rev(answer):
        return int(answer.get("header", {}).get("revision", "0"))

    @staticmethod
    def kv(item):
        """A gateway kv as a dict of Python values."""
        return {"key": unb64(item["key"]).decode("utf-8", "replace"),
                "value": unb64(item.get("value")),
                "create_revision": int(item.get("create_revision", "0")),
                "mod_revision": int(item.get("mod_revision", "0")),
                "version": int(item.get("version", "0")),
                "lease": int(item.get("lease", "0"))}

    def put(self, key, value, lease=None):
        """Put; the revision of the write."""
        body = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return self.rev(self.call("kv/put", body))

    def get(self, key):
        """The kv of <key> (see kv()), or None."""
        kvs = self.call("kv/range", {"key": b64(key)}).get("kvs", [])
        return self.kv(kvs[0]) if kvs else None

    def range(self, prefix):
        """(revision, {key: kv}) of every key under <prefix>."""
        a = self.call("kv/range", {"key": b64(prefix),
                                   "range_end": b64(prefix_end(prefix))})
        return self.rev(a), {k["key"]: k for k in map(self.kv,
                                                     a.get("kvs", []))}

    def revision(self):
        """The store's current revision."""
        return self.rev(self.call("kv/range", {"key": b64("\0"),
                                               "count_only": True}))

    def delete(self, key):
        a = self.call("kv/deleterange", {"key": b64(key)})
        return self.rev(a), int(a.get("deleted", "0"))

    def delete_prefix(self, prefix):
        a = self.call("kv/deleterange", {
            "key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        return self.rev(a), int(a.get("deleted", "0"))

    def txn(self, compare=(), success=(), failure=()):
        """One transaction; (succeeded, revision, answer)."""
        a = self.call("kv/txn", {"compare": list(compare),
                                 "success": list(success),
                                 "failure": list(failure)})
        return bool(a.get("succeeded")), self.rev(a), a

    def compact(self, revision, physical=True):
        return self.call("kv/compaction", {"revision": str(revision),
                                           "physical": physical})

    def lease_grant(self, ttl):
        return int(self.call("lease/grant", {"TTL": str(ttl)})["ID"])

    def lease_ttl(self, lease):
        """Seconds left of <lease>; -1 when it does not exist."""
        a = self.call("lease/timetolive", {"ID": str(lease)})
        return int(a.get("TTL", "-1"))

    def lease_revoke(self, lease):
        return self.call("lease/revoke", {"ID": str(lease)})


# ---- txn operations -------------------------------------------------------
def op_put(key, value):
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def op_delete(key):
    return {"request_delete_range": {"key": b64(key)}}


# ---- chash's keys ----------------------------------------------------------
def member_key(prefix, pool, name):
    return "%s/pools/%s/members/%s" % (prefix, pool, name)


def member_record(address, weight=1, state="up", since=True):
    """A member record's JSON text (doc/etcd.md); since=True: now."""
    rec = {"address": address, "weight": weight, "state": state}
    if since is True:
        rec["since"] = now_ms()
    elif since:
        rec["since"] = since
    return json.dumps(rec)


class Tree:
    """chash's keys under one prefix of one etcd."""

    def __init__(self, etcd, prefix=None):
        self.etcd = etcd
        self.prefix = prefix or unique_prefix()

    def member_key(self, pool, name):
        return member_key(self.prefix, pool, name)

    def members_prefix(self, pool):
        return "%s/pools/%s/members/" % (self.prefix, pool)

    def put_member(self, pool, name, address, weight=1, state="up"):
        """Put one member record; the revision W of the write."""
        return self.etcd.put(self.member_key(pool, name),
                             member_record(address, weight, state))

    def put_raw(self, pool, name, value):
        return self.etcd.put(self.member_key(pool, name), value)

    def delete_member(self, pool, name):
        rev, n = self.etcd.delete(self.member_key(pool, name))
        assert n == 1, "no member %s in pool %s" % (name, pool)
        return rev

    def txn_members(self, pool, put=None, delete=(), raw=None):
        """One bulk change in ONE txn: <put> {name: (address, weight,
        state)}, <delete> [names], <raw> {name: value text}. Its revision
        W (every op of a txn shares it)."""
        ops = []
        for name, (address, weight, state) in (put or {}).items():
            ops.append(op_put(self.member_key(pool, name),
                              member_record(address, weight, state)))
        for name, value in (raw or {}).items():
            ops.append(op_put(self.member_key(pool, name), value))
        for name in delete:
            ops.append(op_delete(self.member_key(pool, name)))
        assert ops, "an empty change"
        ok, rev, a = self.etcd.txn(success=ops)
        assert ok, a
        return rev

    def members(self, pool):
        """{name: parsed record} of a pool as etcd holds it (values that
        are not JSON: the raw bytes)."""
        _, kvs = self.etcd.range(self.members_prefix(pool))
        out = {}
        for key, kv in kvs.items():
            name = key[len(self.members_prefix(pool)):]
            try:
                out[name] = json.loads(kv["value"])
            except ValueError:
                out[name] = kv["value"]
        return out

    def member_kvs(self, pool):
        """{name: kv} of a pool's records (revisions, versions)."""
        _, kvs = self.etcd.range(self.members_prefix(pool))
        return {k[len(self.members_prefix(pool)):]: v
                for k, v in kvs.items()}

    def instances_prefix(self):
        return self.prefix + "/instances/"

    def instance_kvs(self):
        _, kvs = self.etcd.range(self.instances_prefix())
        return {k[len(self.instances_prefix()):]: v for k, v in kvs.items()}

    def instances(self):
        """{instance id: parsed instance record}."""
        return {k: json.loads(v["value"])
                for k, v in self.instance_kvs().items()}


def converged(records, n_instances, W, pools=None):
    """None if <records> ({id: record}) show <n_instances> instances that
    all applied W and agree per pool (and carry every pool of <pools>);
    else why not, in words."""
    if len(records) != n_instances:
        return "%d instance records, want %d" % (len(records), n_instances)
    behind = [i for i, r in records.items()
              if int(r.get("applied_rev", 0)) < W]
    if behind:
        return "behind revision %d: %s" % (W, behind)
    names = set()
    for r in records.values():
        names |= set(r.get("pools", {}))
    for pool in pools or ():
        if pool not in names:
            return "no instance reports pool %s" % pool
    for pool in sorted(names):
        sums = {i: r.get("pools", {}).get(pool, {}).get("checksum")
                for i, r in records.items()}
        if None in sums.values() or len(set(sums.values())) != 1:
            return "pool %s: checksums %s" % (pool, sums)
    return None


def wait_converged(etcd, prefix, n_instances, W, timeout=10.0, t0=None,
                   pools=None):
    """Poll <prefix>/instances/ every 2 ms until <n_instances> records
    have applied_rev >= W and, for every pool, one common checksum. The
    seconds it took from <t0> (time.monotonic(); default: the call);
    an AssertionError after <timeout> s, with the last records."""
    start = time.monotonic()
    t0 = start if t0 is None else t0
    tree = prefix if isinstance(prefix, Tree) else Tree(etcd, prefix)
    deadline = start + timeout
    why, recs = "no answer yet", None
    while True:
        try:
            recs = tree.instances()
            why = converged(recs, n_instances, W, pools)
        except (EtcdError, ValueError) as e:
            why = "etcd: %s" % e
        if why is None:
            return time.monotonic() - t0
        if time.monotonic() > deadline:
            raise AssertionError(
                "not converged on revision %d after %.1f s: %s\nrecords: %s"
                % (W, timeout, why, json.dumps(recs, sort_keys=True)))
        time.sleep(0.002)


def quantiles(xs):
    """(min, p50, p99, max) of a list (nearest rank)."""
    s = sorted(xs)

    def q(p):
        return s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))]
    return s[0], q(0.50), q(0.99), s[-1]


# ---- chashd instances -----------------------------------------------------
def etcd_global(admin_port, etcd, prefix, instance, lease_ttl="2s",
                workers=1, timeout=None, extra=""):
    """The global: block of an instance: admin API, etcd."""
    lines = ["global:",
             "  admin: 127.0.0.1:%d" % admin_port,
             "  workers: %d" % workers,
             "  etcd:",
             "    endpoints: [%s]" % (etcd if isinstance(etcd, str)
                                      else etcd.url),
             "    prefix: %s" % prefix,
             "    instance: %s" % instance,
             "    lease_ttl: %s" % lease_ttl]
    if timeout:
        lines.append("    timeout: %s" % timeout)
    return "\n".join(lines) + "\n" + extra


def servers_yaml(name, port, servers, **opts):
    """A pool (tcp unless opts has `mode`) with `members_from: etcd`;
    <servers> [(name, address, weight)] seed an empty etcd."""
    opts = dict(opts)
    lines = ["%s:" % name, "  listen: 127.0.0.1:%d" % port,
             "  mode: %s" % opts.pop("mode", "tcp"), "  members_from: etcd"]
    for k, v in opts.items():
        lines.append("  %s: %s" % (k, v))
    lines.append("  servers:")
    for sname, addr, w in servers:
        lines.append("    - %s:%d %s" % (addr, w, sname))
    return "\n".join(lines) + "\n"


class Instance:
    """One chashd instance of a test: its config dir, pool port(s), admin
    API and the process (a base_util Chashd)."""

    def __init__(self, procs, tmp_path, etcd, prefix, name, pools,
                 lease_ttl="2s", extra_global="", pool_opts=None):
        """<pools>: {pool: [(name, address, weight)]} seeds (each pool
        gets its own port); <pool_opts>: more keys of every pool."""
        self.name = name
        self.dir = os.path.join(str(tmp_path), name)
        os.makedirs(self.dir, exist_ok=True)
        self.admin_port = free_port()
        self.ports = {p: free_port() for p in pools}
        self.port = next(iter(self.ports.values()))
        self.text = etcd_global(self.admin_port, etcd, prefix, name,
                                lease_ttl, extra=extra_global) + "".join(
            servers_yaml(p, self.ports[p], s, **(pool_opts or {}))
            for p, s in pools.items())
        self.procs = procs
        self.api = Api(self.admin_port)
        self.d = None
        self.start()

    def start(self):
        # a Procs of its own, so that the log is <dir>/chashd.log (base_util's
        # Procs writes logs in its own dir); the test's procs kill it
        own = Procs(self.dir)
        try:
            self.d = Chashd(own, self.dir, self.text, self.port)
        finally:
            self.procs.procs.extend(own.procs)
        wait_for(lambda: can_connect(self.admin_port), what="admin API of "
                 + self.name)

    @property
    def proc(self):
        return self.d.proc

    def log(self):
        return self.d.log()

    def cluster(self):
        return self.api.ok("GET", "/api/cluster")

    def etcd_state(self):
        return self.cluster()["etcd"]

    def members(self, pool):
        """{name: (address, weight, admin state)} the instance routes by."""
        return {n: (m["address"], m["weight"], m["admin"])
                for n, m in self.api.members(pool).items()}

    def kill(self, sig=signal.SIGKILL):
        self.d.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.d.proc.wait(timeout=10)


def start_instances(procs, tmp_path, etcd, prefix, n, pools, **kw):
    """<n> instances lb-1..lb-n on one etcd and prefix, started one after
    the other."""
    return [Instance(procs, tmp_path, etcd, prefix, "lb-%d" % (i + 1),
                     pools, **kw) for i in range(n)]


@pytest.fixture
def etcd(tmp_path):
    """A private etcd (an Etcd), stopped and removed at teardown."""
    e = Etcd(tmp_path)
    try:
        yield e
    finally:
        e.close()

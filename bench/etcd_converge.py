# etcd_converge.py -- what bench/etcd.sh runs (read its head for the
# knobs): how long a membership change written to etcd takes to reach
# every chashd instance (doc/etcd.md). One private etcd; for each instance
# count, a fresh prefix with POOLS pools of MEMBERS members written
# before the instances start (no seeding), the instances (`workers: 1`,
# every pool `members_from: etcd`), then TRIALS changes of one member in
# one pool and TRIALS changes of one member in each of 3 pools (one txn),
# one after the other. A trial's time: from just before the txn to the
# arrival of the watch event on <prefix>/instances/ after which every
# instance's record shows applied_rev >= the txn's revision and, for every
# pool, one checksum (a watch, not a poll: polling 10 records of 100 pools
# costs about 8 ms a time in Python). Prints min/p50/p99/max per instance
# count and kind.
# Standard library only; the processes come from bench/benchlib.py.
#
# SPDX-License-Identifier: BSD-2-Clause
import atexit, base64, json, math, os, random, shutil, socket, subprocess, sys
import threading
import time
import urllib.error, urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["BENCH_DIR"])
import benchlib

CHASHD = os.environ["CHASHD"]
ETCD = os.environ["ETCD"]


def knob(name, default, least):
    return benchlib.knob("etcd.sh", name, default, least)


POOLS = knob("POOLS", 100, 1)
MEMBERS = knob("MEMBERS", 100, 4)
TRIALS = knob("TRIALS", 100, 1)
GAP_MS = knob("GAP_MS", 20.0, 0)
TIMEOUT = knob("TIMEOUT", 10.0, 1)
INSTANCES = [int(x) for x in os.environ.get("INSTANCES", "3 10").split()]
if not INSTANCES or min(INSTANCES) < 1:
    sys.exit("bench/etcd.sh: INSTANCES=%r: want counts >= 1"
             % os.environ.get("INSTANCES"))
if MEMBERS > 250 or POOLS > 250:
    sys.exit("bench/etcd.sh: at most 250 pools and 250 members (the "
             "members' addresses are 127.1.POOL.MEMBER)")
TARGET_MS = 100.0
bench = benchlib.Bench("etcd")
LOGS = os.environ.get("LOGS", "")


def keep_logs():
    """LOGS=dir: the logs of etcd and the instances are copied there at
    exit (registered after the Bench's cleanup, so it runs first)."""
    if LOGS:
        os.makedirs(LOGS, exist_ok=True)
        for name in os.listdir(bench.tmp):
            if name.endswith(".log"):
                shutil.copy(bench.path(name), LOGS)


atexit.register(keep_logs)


GIVEN = set()


def free_port():
    """benchlib's free_port, never a port this run handed out already (the
    OS gives a port it just freed again, and a config of 100 pools then
    has two on one port)."""
    for _ in range(1000):
        port = benchlib.free_port()
        if port not in GIVEN:
            GIVEN.add(port)
            return port
    bench.die("no fresh free port in 1000 tries")


# ---- etcd's JSON gateway ---------------------------------------------------
def b64(s):
    return base64.b64encode(s.encode()).decode()


def end_of(prefix):
    return b64(prefix[:-1] + chr(ord(prefix[-1]) + 1))


class Gateway:
    def __init__(self, url):
        self.url = url

    def call(self, path, body, timeout=10):
        req = urllib.request.Request(self.url + "/v3/" + path,
                                     data=json.dumps(body).encode(),
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            bench.die("etcd %s: %d %s" % (path, e.code, e.read()[:300]))
        except OSError as e:
            bench.die("etcd %s: %s" % (path, e))

    def txn(self, puts=(), deletes=()):
        ops = [{"request_put": {"key": b64(k), "value": b64(v)}}
               for k, v in puts]
        ops += [{"request_delete_range": {"key": b64(k)}} for k in deletes]
        a = self.call("kv/txn", {"success": ops})
        if not a.get("succeeded"):
            bench.die("a txn failed: %s" % a)
        return int(a["header"]["revision"])

    def values(self, prefix):
        a = self.call("kv/range", {"key": b64(prefix),
                                   "range_end": end_of(prefix)})
        return [base64.b64decode(kv.get("value", "")) for kv in
                a.get("kvs", [])]


def start_etcd():
    client, peer = free_port(), free_port()
    url, purl = "http://127.0.0.1:%d" % client, "http://127.0.0.1:%d" % peer
    data = bench.path("etcd-data")
    os.mkdir(data, 0o700)
    p = bench.start([ETCD, "--name", "b1", "--data-dir", data,
                     "--listen-client-urls", url,
                     "--advertise-client-urls", url,
                     "--listen-peer-urls", purl,
                     "--initial-advertise-peer-urls", purl,
                     "--initial-cluster", "b1=" + purl,
                     "--heartbeat-interval", "10", "--election-timeout",
                     "100", "--logger", "zap", "--log-level", "error"],
                    "etcd.log")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        if p.poll() is not None:
            bench.die("etcd exited: " + open(bench.path("etcd.log")).read())
        try:
            with urllib.request.urlopen(url + "/health", timeout=0.5) as r:
                if json.loads(r.read()).get("health") == "true":
                    return Gateway(url)
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    bench.die("etcd not healthy after 15 s")


# ---- the membership the bench writes ----------------------------------------
def pool_name(p):
    return "p%03d" % p


def record(address, weight, state):
    return json.dumps({"address": address, "weight": weight,
                       "state": state, "since": int(time.time() * 1000)})


class Model:
    """The members of every pool under one prefix, as written."""

    def __init__(self, gw, prefix):
        self.gw, self.prefix = gw, prefix
        self.pools = {}
        self.spare = {}          # pool -> members removed, to add again
        self.rng = random.Random(14)

    def key(self, pool, name):
        return "%s/pools/%s/members/%s" % (self.prefix, pool, name)

    def populate(self):
        W = 0
        for p in range(POOLS):
            pool = pool_name(p)
            ms = {"m%03d" % m: ("127.1.%d.%d:7000" % (p, m + 1), 1, "up")
                  for m in range(MEMBERS)}
            self.pools[pool], self.spare[pool] = ms, []
            for i in range(0, MEMBERS, 100):        # 128 ops per txn at most
                part = list(ms.items())[i:i + 100]
                W = self.gw.txn([(self.key(pool, n), record(*v))
                                 for n, v in part])
        return W

    def change(self, pool):
        """One change of one member of <pool>: (puts, deletes)."""
        ms = self.pools[pool]
        kind = self.rng.choice(["weight", "state", "remove"]
                               if len(ms) > MEMBERS // 2 else
                               ["weight", "state"])
        if self.spare[pool] and self.rng.random() < 0.5:
            kind = "add"
        if kind == "add":
            name, v = self.spare[pool].pop()
            ms[name] = v
            return [(self.key(pool, name), record(*v))], []
        name = self.rng.choice(sorted(ms))
        addr, w, st = ms[name]
        if kind == "remove":
            del ms[name]
            self.spare[pool].append((name, (addr, w, st)))
            return [], [self.key(pool, name)]
        if kind == "weight":
            w = 1 + w % 5
        else:
            st = {"up": "drain", "drain": "maint", "maint": "up"}[st]
        ms[name] = (addr, w, st)
        return [(self.key(pool, name), record(addr, w, st))], []


# ---- the instances ----------------------------------------------------------
def config(url, prefix, instance):
    lines = ["global:", "  admin: off", "  workers: 1", "  log_level: warn",
             "  etcd:", "    endpoints: [%s]" % url,
             "    prefix: %s" % prefix, "    instance: %s" % instance,
             "    lease_ttl: 10s"]
    for p in range(POOLS):
        lines += ["%s:" % pool_name(p),
                  "  listen: 127.0.0.1:%d" % free_port(), "  mode: tcp",
                  "  members_from: etcd", "  servers:",
                  "    - 127.1.%d.1:7000:1 m000" % p]
    return "\n".join(lines) + "\n"


def start_instances(gw, prefix, n):
    procs = []
    for i in range(n):
        name = "lb-%d" % (i + 1)
        conf = bench.path("%s-%s.yml" % (prefix.strip("/"), name))
        with open(conf, "w") as f:
            f.write(config(gw.url, prefix, name))
        t = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
        if t.returncode != 0:
            bench.die("chashd -t: " + (t.stdout + t.stderr).strip()[-2000:])
        log = "%s-%s.log" % (prefix.strip("/"), name)
        procs.append(bench.start([CHASHD, "-c", conf], log))
        procs[-1].log = bench.path(log)
    return procs


def stop_instances(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
        bench.procs.remove(p)


def check_alive(procs):
    for p in procs:
        if p.poll() is not None:
            with open(p.log, errors="replace") as f:
                tail = f.read().splitlines()[-15:]
            bench.die("an instance exited (%s); the end of %s:\n  %s"
                      % (p.returncode, os.path.basename(p.log),
                         "\n  ".join(tail)))


def why_not(gw, prefix, n, W, procs):
    """None when <n> instance records show applied_rev >= W and one
    checksum per pool; else why not."""
    check_alive(procs)
    recs = [json.loads(v) for v in gw.values(prefix + "/instances/")]
    if len(recs) != n:
        return "%d of %d instances" % (len(recs), n)
    if min(int(r.get("applied_rev", 0)) for r in recs) < W:
        return "behind %d" % W
    first = recs[0].get("pools", {})
    if len(first) != POOLS:
        return "%d of %d pools" % (len(first), POOLS)
    for r in recs[1:]:
        pools = r.get("pools", {})
        for pool, v in first.items():
            if pools.get(pool, {}).get("checksum") != v.get("checksum"):
                return "pool %s disagrees" % pool
    return None


def wait_converged(gw, prefix, n, W, procs, t0, timeout):
    """Poll (every 20 ms) until converged on W; the seconds since t0."""
    end = t0 + timeout
    while True:
        why = why_not(gw, prefix, n, W, procs)
        if why is None:
            return time.monotonic() - t0
        if time.monotonic() > end:
            bench.die("%d instances: not converged on revision %d after "
                      "%.0f s: %s" % (n, W, timeout, why))
        time.sleep(0.02)


def agree(recs, n, W):
    """<recs> {key: record}: n records, applied_rev >= W, one checksum per
    pool."""
    if len(recs) != n:
        return False
    rs = list(recs.values())
    if min(int(r.get("applied_rev", 0)) for r in rs) < W:
        return False
    first = rs[0].get("pools", {})
    if len(first) != POOLS:
        return False
    for r in rs[1:]:
        pools = r.get("pools", {})
        for pool, v in first.items():
            if pools.get(pool, {}).get("checksum") != v.get("checksum"):
                return False
    return True


class InstanceWatch(threading.Thread):
    """A watch on <prefix>/instances/ that keeps the parsed records and,
    when a target (n, W) is set, the arrival time of the message after
    which they agree on it."""

    def __init__(self, gw, prefix):
        super().__init__(daemon=True)
        self.gw, self.prefix = gw, prefix + "/instances/"
        self.cond = threading.Condition()
        self.recs, self.last_at = {}, time.monotonic()
        self.target, self.done_at, self.error = None, None, None
        a = gw.call("kv/range", {"key": b64(self.prefix),
                                 "range_end": end_of(self.prefix)})
        for kv in a.get("kvs", []):
            self.recs[kv["key"]] = json.loads(base64.b64decode(kv["value"]))
        body = json.dumps({"create_request": {
            "key": b64(self.prefix), "range_end": end_of(self.prefix),
            "start_revision": str(int(a["header"]["revision"]) + 1)}})
        # a plain socket (urllib's stream cannot be closed while a thread
        # reads it): the answer is chunked, one JSON message a line
        host, port = gw.url.split("//")[1].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(None)
        self.sock.sendall(("POST /v3/watch HTTP/1.1\r\nHost: %s:%s\r\n"
                           "Content-Type: application/json\r\n"
                           "Content-Length: %d\r\n\r\n%s"
                           % (host, port, len(body), body)).encode())
        self.closing = False
        self.start()

    def lines(self):
        """The messages of the chunked answer, as they arrive."""
        f = self.sock.makefile("rb")
        status = f.readline()
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("watch: %r" % status)
        while f.readline() not in (b"\r\n", b""):
            pass
        pending = b""
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                return
            pending += f.read(size)
            f.read(2)
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line

    def run(self):
        try:
            for line in self.lines():
                at = time.monotonic()
                m = json.loads(line)
                if "result" not in m:
                    raise RuntimeError("watch: %s" % m)
                m = m["result"]
                if m.get("canceled"):
                    raise RuntimeError("watch canceled: %s" % m)
                with self.cond:
                    for e in m.get("events", []):
                        k = e["kv"]["key"]
                        if e.get("type") == "DELETE":
                            self.recs.pop(k, None)
                        else:
                            self.recs[k] = json.loads(
                                base64.b64decode(e["kv"]["value"]))
                    self.last_at = at
                    if (self.target and self.done_at is None and
                            agree(self.recs, *self.target)):
                        self.done_at = at
                        self.cond.notify_all()
            raise RuntimeError("the watch ended")
        except Exception as e:          # reported by wait()
            with self.cond:
                if not self.closing:
                    self.error = "%s: %s" % (type(e).__name__, e)
                self.cond.notify_all()

    def wait(self, n, W, t0, procs):
        """Seconds from t0 to the message after which <n> records agree
        on W; the bench dies after TIMEOUT."""
        with self.cond:
            self.target, self.done_at = (n, W), None
            if agree(self.recs, n, W):
                self.done_at = self.last_at
            end = t0 + TIMEOUT
            while self.done_at is None and self.error is None:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.5))
                check_alive(procs)
            done, self.target = self.done_at, None
        if self.error:
            bench.die("the watch on the instances: " + self.error)
        if done is None:
            bench.die("%d instances: not converged on revision %d after "
                      "%.0f s: %s" % (n, W, TIMEOUT, why_not(
                          self.gw, self.prefix[:-len("/instances/")], n, W,
                          procs)))
        return max(0.0, done - t0)

    def close(self):
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.join(timeout=10)
        self.sock.close()


def check_counts(gw, model, n):
    """Every instance reports every pool with the members etcd holds."""
    recs = [json.loads(v) for v in gw.values(model.prefix + "/instances/")]
    for r in recs:
        for pool, ms in model.pools.items():
            got = r["pools"][pool].get("members")
            if got != len(ms):
                bench.die("%d instances: %s reports %s members in %s, etcd "
                          "holds %d" % (n, r.get("instance"), got, pool,
                                        len(ms)))


def quantiles(xs):
    """(min, p50, p99, max), nearest rank."""
    s = sorted(xs)

    def q(p):
        return s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))]
    return s[0], q(0.50), q(0.99), s[-1]


def run(gw, n):
    prefix = "/chash-bench-%d-%d" % (os.getpid(), n)
    model = Model(gw, prefix)
    t = time.monotonic()
    W = model.populate()
    procs = start_instances(gw, prefix, n)
    start = wait_converged(gw, prefix, n, W, procs, t, 120)
    print("%d instances: %d pools x %d members in etcd; all instances "
          "started and agreed in %.2f s" % (n, POOLS, MEMBERS, start),
          flush=True)
    watch = InstanceWatch(gw, prefix)
    t_trials = time.monotonic()
    cpu0 = sum(benchlib.stat_cpu_seconds(p.pid) for p in procs)
    times = {1: [], 3: []}
    pools = [pool_name(p) for p in range(POOLS)]
    k = 0
    for trial in range(TRIALS):
        for per in (1, 3):
            puts, deletes = [], []
            for _ in range(per):
                pu, de = model.change(pools[k % POOLS])
                k += 1
                puts += pu
                deletes += de
            t0 = time.monotonic()
            W = gw.txn(puts, deletes)
            times[per].append(watch.wait(n, W, t0, procs))
            time.sleep(GAP_MS / 1000.0)
    cpu = sum(benchlib.stat_cpu_seconds(p.pid) for p in procs) - cpu0
    check_counts(gw, model, n)
    watch.close()
    t = time.monotonic()
    stop_instances(procs)
    print("%d instances: %d trials in %.1f s, the instances' CPU %.1f ms "
          "per trial and instance (gaps included); stopped in %.1f s"
          % (n, 2 * TRIALS, t - t_trials, cpu * 1e3 / (2 * TRIALS * n),
             time.monotonic() - t), flush=True)
    return times


def main():
    gw = start_etcd()
    print("bench/etcd.sh: %d pools x %d members, %d trials per kind, "
          "instances %s, workers 1 each; times from before the txn to the "
          "watch event that completes agreement; %d cores, load average %s"
          % (POOLS, MEMBERS, TRIALS, " and ".join(map(str, INSTANCES)),
             os.cpu_count(),
              " ".join(open("/proc/loadavg").read().split()[:3])),
          flush=True)
    t_all = time.monotonic()
    results = {n: run(gw, n) for n in INSTANCES}
    print("(%.0f s)" % (time.monotonic() - t_all))
    print()
    print("| instances | change (one txn) | trials | min ms | p50 ms | "
          "p99 ms | max ms |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in INSTANCES:
        for per in (1, 3):
            lo, p50, p99, hi = quantiles(results[n][per])
            print("| %d | one member in %d pool%s | %d | %.1f | %.1f | %.1f "
                  "| %.1f |" % (n, per, "s" if per > 1 else "",
                                len(results[n][per]), lo * 1e3, p50 * 1e3,
                                p99 * 1e3, hi * 1e3))
    print()
    if 3 in results:
        p99 = max(quantiles(results[3][per])[2] for per in (1, 3)) * 1e3
        print("Target: p99 under %.0f ms with 3 instances: %.1f ms, %s"
              % (TARGET_MS, p99, "MET" if p99 < TARGET_MS else "MISSED"))


main()

# migration.py -- what bench/migration.sh runs (read its head for the knobs):
# redis-benchmark's SET and GET through chashd's redis pool with no
# membership change (baseline) and while a 4th member is added (migration),
# interleaved rounds, medians, ratios; the copier's figures from
# GET /api/pools/{pool}/migration; every migration checked for lost keys.
# Standard library only; the processes come from bench/benchlib.py.
#
# SPDX-License-Identifier: BSD-2-Clause
import csv, json, os, re, statistics, subprocess, sys, threading
import time, urllib.error, urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["BENCH_DIR"])
import benchlib
from benchlib import Conn, encode, free_port, pinned

CHASHD = os.environ["CHASHD"]
POOL = "bench"
NEW = "redis-4"            # the member that joins and leaves every round
TARGET = 3.0               # p99 during the migration / baseline, at most


def knob(name, default, kind, least):
    return benchlib.knob("migration.sh", name, default, least, kind)


ROUNDS = knob("ROUNDS", 3, int, 1)
KEYS = knob("KEYS", 200000, int, 1000)
VALUE = knob("VALUE", 100, int, 1)
DURATION = knob("DURATION", 3.0, float, 0.5)
CLIENTS = knob("CLIENTS", 50, int, 1)
PIPELINE = knob("PIPELINE", 1, int, 1)
WORKERS = knob("WORKERS", 2, int, 1)
RATE = knob("RATE", None, int, 0)
WAIT = knob("WAIT", 180.0, float, 1)

bench = benchlib.Bench("migration")


def key(i):
    return b"key:%012d" % i       # redis-benchmark's name for -r


def batches(size):
    for i in range(0, KEYS, size):
        yield [key(j) for j in range(i, min(i + size, KEYS))]


def preload(port):
    c = Conn(port, timeout=30)
    value = b"x" * VALUE
    for keys in batches(1000):
        c.pipeline([encode("SET", k, value) for k in keys])
    c.close()


def found(port):
    """How many of the KEYS keys chashd finds (EXISTS of 100 keys at a time,
    which chashd splits per member and sums)."""
    c = Conn(port, timeout=30)
    n = 0
    group = []
    for keys in batches(100):
        group.append(encode("EXISTS", *keys))
        if len(group) == 20:
            n += sum(int(r[1:]) for r in c.pipeline(group))
            group = []
    if group:
        n += sum(int(r[1:]) for r in c.pipeline(group))
    c.close()
    return n


def dbsize(port):
    c = Conn(port, timeout=30)
    try:
        return c.integer("DBSIZE")
    finally:
        c.close()


# ---- the admin API -------------------------------------------------------
def api(method, path, body=None, timeout=30):
    """(HTTP status, decoded JSON or the text) of one admin API request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (admin_port, path),
                                 data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def migration():
    status, j = api("GET", "/api/pools/%s/migration" % POOL)
    if status != 200 or not isinstance(j, dict):
        bench.die("GET /api/pools/%s/migration: %d %s" % (POOL, status, j))
    return j


ACTIVE = ("draining", "copying", "verifying")


class Watch(threading.Thread):
    """Polls the migration of <report> (a change's answer) every 0.1 s
    until its own finished report is in "last" (or WAIT passes):
    <samples> is [(monotonic time, the JSON)]; <ended> the time of the
    first poll whose phase is none of ACTIVE (finishing, done, or no
    migration shown), None while there is none.

    "active": false alone is not the end: while a migration finishes
    (its snapshot being published) the API shows no migration, or the
    previous one's report in "last", before this one's report arrives."""

    def __init__(self, what, report):
        super().__init__(daemon=True)
        self.samples = []
        self.ended = None
        self.error = None
        mig = report.get("migration") if isinstance(report, dict) else None
        if not isinstance(mig, dict) or "epoch" not in mig:
            bench.die("%s: the change's report has no migration: %s"
                      % (what, json.dumps(report)))
        self.epoch = mig["epoch"]

    def run(self):
        end = time.monotonic() + WAIT
        try:
            while time.monotonic() < end:
                j = migration()
                now = time.monotonic()
                self.samples.append((now, j))
                if self.ended is None and (not j.get("active") or
                                           j.get("phase") not in ACTIVE):
                    self.ended = now
                if not j.get("active") and isinstance(j.get("last"), dict) \
                        and j["last"].get("epoch") == self.epoch:
                    return
                time.sleep(0.1)
        except BaseException as e:      # noqa: the main thread reports it
            self.error = e

    def finish(self, what):
        """Waits for the migration to end; its finished report (the
        migration's "last")."""
        self.join(WAIT + 30)
        if self.error is not None:
            bench.die("%s: polling the migration: %s" % (what, self.error))
        last = self.samples[-1][1] if self.samples else {}
        done = last.get("last")
        if last.get("active", True) or not isinstance(done, dict) or \
                done.get("epoch") != self.epoch:
            bench.die("%s: migration %s did not end within WAIT=%g s; the "
                      "API's last answer:\n%s" % (
                          what, self.epoch, WAIT, json.dumps(last, indent=1)))
        return done


# ---- the servers and chashd -------------------------------------------------
servers, server_pids = [], []
for i in range(4):
    port, p = bench.redis_server("redis-%d" % (i + 1))
    servers.append(port)
    server_pids.append(p.pid)

admin_port = free_port()
listen = free_port()
# the pool of bench/redis.sh (fnv1a_64 + ketama, server_connections 1,
# preconnect, no auto-eject) on the first 3 servers, but mode: redis,
# whose migration defaults to copy
pool = benchlib.pool_text(listen, servers[:3], "redis").replace(
    "  hash:", "  mode: redis\n" +
    ("  migration_rate: %d\n" % RATE if RATE is not None else "") +
    "  hash:", 1)
conf = bench.path("chashd.yml")
with open(conf, "w") as f:
    f.write("global:\n  admin: 127.0.0.1:%d\n  workers: %d\n"
            "  log_level: warn\n  state_file: %s\n"
            % (admin_port, WORKERS, bench.path("state.json")) + pool)
t = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                   text=True, timeout=30, stdin=subprocess.DEVNULL)
if t.returncode != 0:
    bench.die("chashd -t: " + (t.stdout + t.stderr).strip())
chashd = bench.start(pinned("0,1", [CHASHD, "-c", conf]), "chashd.log")
bench.wait_port(listen, chashd, "chashd")
bench.wait_port(admin_port, chashd, "chashd")
cfg = migration()
if cfg.get("migration") != "copy":
    bench.die("the pool's migration is %r, not copy: %s"
              % (cfg.get("migration"), json.dumps(cfg)))


def check(what, members):
    """Every key where it belongs after a migration: the <members> ports
    hold KEYS keys between them, the others none, chashd finds them all."""
    sizes = {port: dbsize(port) for port in servers}
    held = sum(sizes[p] for p in members)
    stray = sum(n for p, n in sizes.items() if p not in members)
    seen = found(listen)
    if held != KEYS or stray or seen != KEYS:
        bench.die("%s: keys wrong after the migration: the members hold "
                  "%d, the other servers %d, chashd finds %d, of %d "
                  "(DBSIZE: %s)" % (what, held, stray, seen, KEYS, sizes))
    return [sizes[p] for p in members]


# ---- the load --------------------------------------------------------------
# SET and GET run at once, each from its own redis-benchmark with half the
# clients, so both see the whole window (run one after the other, the
# first would see the migration's start, when the gate moves most keys,
# and the second its end). Each one's -n is its median req/s so far in
# windows of the same kind x DURATION, so a window lasts about DURATION
# whether or not a migration slows it down (redis-benchmark stops only
# after -n requests: an interrupted one prints nothing).
TESTS = ("SET", "GET")
speeds = {}                  # (kind, test) -> [req/s of every window]


def size(kind, test, guess):
    past = speeds.get((kind, test)) or [guess]
    return max(2000, int(statistics.median(past) * DURATION))


def load(kind, sizes):
    """The SET and GET redis-benchmarks at once, sizes[test] requests each;
    {test: (rps, p50, p99), "cpu": (chashd's CPU us per request, the
    redis-servers' together)}: the CPU of the window (the copier's
    included) over the requests of both tests."""
    procs = {}
    c0 = benchlib.stat_cpu_seconds(chashd.pid)
    s0 = sum(benchlib.stat_cpu_seconds(pid) for pid in server_pids)
    for t in TESTS:
        args = pinned("1", [
            "redis-benchmark", "-h", "127.0.0.1", "-p", str(listen), "-c",
            str(max(1, CLIENTS // 2)), "-n", str(sizes[t]), "-P",
            str(PIPELINE), "-d", str(VALUE), "-r", str(KEYS), "-t",
            t.lower(), "--csv"])
        procs[t] = subprocess.Popen(args, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL)
    got, why = {}, []
    for t, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(120, 30 * DURATION))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            why.append("%s: no end in %g s" % (t, max(120, 30 * DURATION)))
        for line in out.splitlines():
            if line.startswith('"%s"' % t):
                v = next(csv.reader([line]))
                got[t] = (float(v[1]), float(v[4]), float(v[6]))
        noise = re.sub(r"WARNING: Could not fetch server CONFIG\n?", "",
                       err)
        if p.returncode != 0 or t not in got or "rror" in noise + out:
            why.append("%s (rc %s): %s%s" % (t, p.returncode, out[-600:],
                                             noise[-600:]))
    if why:
        bench.die("%s: redis-benchmark failed: %s" % (kind, "; ".join(why)))
    c1 = benchlib.stat_cpu_seconds(chashd.pid)
    s1 = sum(benchlib.stat_cpu_seconds(pid) for pid in server_pids)
    n = sum(sizes.values())
    got["cpu"] = ((c1 - c0) * 1e6 / n, (s1 - s0) * 1e6 / n)
    for t in TESTS:
        speeds.setdefault((kind, t), []).append(got[t][0])
    return got


def add(what):
    status, j = api("POST", "/api/pools/%s/members" % POOL,
                    {"name": NEW, "address": "127.0.0.1:%d" % servers[3],
                     "weight": 1})
    if status != 201:
        bench.die("%s: POST %s: %d %s" % (what, NEW, status, j))
    return j


def remove(what):
    status, j = api("DELETE", "/api/pools/%s/members/%s" % (POOL, NEW))
    if status != 200:
        bench.die("%s: DELETE %s: %d %s" % (what, NEW, status, j))
    return j


def idle(what):
    j = migration()
    if j.get("active"):
        bench.die("%s: a migration is still active: %s" % (what,
                                                          json.dumps(j)))


baseline = {t: [] for t in TESTS + ("cpu",)}   # load()'s, per round
during = {t: [] for t in TESTS + ("cpu",)}
adds, removes = [], []                # the finished migrations' reports
copier_cpu = []                       # (chashd, servers) CPU us per key
windows = []                          # (window s, migration s, overran)


def run_baseline(rnd):
    idle("round %d baseline" % rnd)
    got = load("baseline", {t: size("baseline", t, cal[t][0])
                            for t in TESTS})
    idle("round %d baseline" % rnd)   # nothing started meanwhile
    for t in TESTS + ("cpu",):
        baseline[t].append(got[t])
    print("  round %d baseline   %s" % (rnd, fmt(got)), flush=True)


def run_migration(rnd):
    what = "round %d add %s" % (rnd, NEW)
    idle(what)
    # a first guess at the load's req/s during a migration: half the
    # baseline's (it is then that of the earlier migration windows)
    sizes = {t: size("migration", t, statistics.median(
        speeds[("baseline", t)]) / 2) for t in TESTS}
    report = add(what)
    t0 = time.monotonic()
    watch = Watch(what, report)
    watch.start()
    got = load("migration", sizes)
    t1 = time.monotonic()
    done = watch.finish(what)
    ended = watch.ended if watch.ended is not None else time.monotonic()
    overran = ended < t1
    check_done(what, done)
    sizes = check(what, servers)
    for t in TESTS + ("cpu",):
        during[t].append(got[t])
    adds.append(done)
    windows.append((t1 - t0, done["elapsed_s"], overran))
    print("  round %d migration  %s | %s%s" % (
        rnd, fmt(got), fmt_mig(done),
        " | OVERRAN: the migration ended %.1f s into the %.1f s window"
        % (ended - t0, t1 - t0) if overran else ""), flush=True)
    if rnd == 1:
        print("    predicted %s keys to move (POST's report: %s); after "
              "it, keys per member: %s" % (
                  done.get("keys_predicted"),
                  json.dumps(report.get("migration")),
                  benchlib.shares("redis", sizes)), flush=True)

    # back to 3 members: the removal is a migration too, with no load
    what = "round %d remove %s" % (rnd, NEW)
    c0 = benchlib.stat_cpu_seconds(chashd.pid)
    s0 = sum(benchlib.stat_cpu_seconds(pid) for pid in server_pids)
    watch = Watch(what, remove(what))
    watch.start()
    done = watch.finish(what)
    c1 = benchlib.stat_cpu_seconds(chashd.pid)
    s1 = sum(benchlib.stat_cpu_seconds(pid) for pid in server_pids)
    moved = max(1, done["keys_moved"])
    copier_cpu.append(((c1 - c0) * 1e6 / moved, (s1 - s0) * 1e6 / moved))
    check_done(what, done)
    check(what, servers[:3])
    status, j = api("GET", "/api/pools/%s" % POOL)
    if status != 200 or any(m.get("name") == NEW for m in j["members"]):
        bench.die("%s: %s is still in the pool after its migration: %s"
                  % (what, NEW, json.dumps(j)[:2000]))
    removes.append(done)
    print("  round %d remove     (no load) %s; CPU us/key chashd %.1f "
          "redis %.1f" % ((rnd, fmt_mig(done)) + copier_cpu[-1]), flush=True)


def check_done(what, done):
    bad = {k: done.get(k) for k in ("anomalies", "failed_keys", "errors")
           if done.get(k)}
    if done.get("phase") != "done" or bad:
        bench.die("%s: the migration ended badly (%s); its report:\n%s"
                  % (what, bad or done.get("phase"),
                     json.dumps(done, indent=1)))


def fmt(got):
    return "  ".join("%s %7.0f req/s p50 %.3f p99 %.3f ms" % ((t,) + got[t])
                     for t in TESTS) + \
        "  CPU us/req chashd %.1f redis %.1f" % got["cpu"]


def copier_rate(done):
    return done["keys_moved"] / done["elapsed_s"] if done["elapsed_s"] else 0


def fmt_mig(done):
    return ("%.1f s, copier %d keys (%.0f keys/s, API rate_keys_s %.0f), "
            "by traffic %d, already gone (NOKEY) %s"
            % (done["elapsed_s"], done["keys_moved"], copier_rate(done),
               done["rate_keys_s"], done["keys_moved_by_traffic"],
               done.get("keys_absent")))


# ---- the run -------------------------------------------------------------
print("redis-benchmark SET and GET through chashd (%d workers, redis pool, "
      "migration: copy, migration_rate %s) on 3 redis-servers, fnv1a_64 + "
      "ketama, baseline against the same load while %s joins"
      % (WORKERS, RATE if RATE is not None else "5000 (default)", NEW))
print("%d rounds, medians; %d keys of %d bytes, SET and GET at once with "
      "-c %d each, -P %d, %.1f s of load "
      "a window, pinned: %s; %d cores, load average %s"
      % (ROUNDS, KEYS, VALUE, max(1, CLIENTS // 2), PIPELINE, DURATION,
         "yes" if benchlib.PIN else "no", os.cpu_count(),
         " ".join(open("/proc/loadavg").read().split()[:3])))
print()

t_start = time.monotonic()
preload(listen)
check("preload", servers[:3])
# calibration (and warm-up): -n of every window from its req/s
cal = load("calibration", {t: max(2000, 20 * CLIENTS * PIPELINE)
                           for t in TESTS})
print("  calibration        %s" % fmt(cal))

for rnd in range(1, ROUNDS + 1):
    steps = [run_baseline, run_migration]
    if rnd % 2 == 0:
        steps.reverse()
    for step in steps:
        step(rnd)
print("(%.0f s)" % (time.monotonic() - t_start))
print()


def med(rows, i):
    return statistics.median(r[i] for r in rows)


print("| test | req/s baseline | req/s during migration | ratio | p99 ms "
      "baseline | p99 ms during migration | ratio (target <= x%.0f) |"
      % TARGET)
print("|---|---:|---:|---:|---:|---:|---|")
verdict = True
for t in TESTS:
    rb, rd = med(baseline[t], 0), med(during[t], 0)
    pb, pd = med(baseline[t], 2), med(during[t], 2)
    x = pd / pb if pb else float("inf")
    verdict = verdict and x <= TARGET
    print("| %s | %.0f | %.0f | x%.2f | %.3f | %.3f | x%.2f %s |"
          % (t, rb, rd, rd / rb, pb, pd, x,
             "MET" if x <= TARGET else "MISSED"))
print()
cb, cd = ([med(rows["cpu"], i) for i in range(2)] for rows in (baseline,
                                                               during))
print("CPU per request over each window (chashd with its copier threads; "
      "the redis-servers together), medians: chashd %.1f us baseline, %.1f "
      "during the migration (x%.2f); redis-servers %.1f, %.1f (x%.2f)."
      % (cb[0], cd[0], cd[0] / cb[0], cb[1], cd[1], cd[1] / cb[1]))
print()
print("| migration | time s | copier keys/s | copier keys | by traffic "
      "| predicted | finished |")
print("|---|---:|---:|---:|---:|---:|---|")
for label, rows in (("add %s, under the load" % NEW, adds),
                    ("remove %s, no load" % NEW, removes)):
    print("| %s | %.1f | %.0f | %.0f | %.0f | %.0f | %d of %d |"
          % (label, statistics.median(r["elapsed_s"] for r in rows),
             statistics.median(copier_rate(r) for r in rows),
             statistics.median(r["keys_moved"] for r in rows),
             statistics.median(r["keys_moved_by_traffic"] for r in rows),
             statistics.median(r["keys_predicted"] for r in rows),
             sum(r["phase"] == "done" for r in rows), len(rows)))
print()
print("The copier alone (the removals, no load): CPU per key it moved, "
      "medians: chashd %.1f us, the redis-servers together %.1f us."
      % tuple(med(copier_cpu, i) for i in range(2)))
over = sum(w[2] for w in windows)
print("Windows: the migration rounds' load ran %s s (median) of migrations "
      "that took %s s; %d of %d windows overran the migration's end%s."
      % ("%.1f" % statistics.median(w[0] for w in windows),
         "%.1f" % statistics.median(w[1] for w in windows), over,
         len(windows), " (raise KEYS or lower DURATION)" if over else ""))
print("copier keys/s = keys_moved / elapsed_s of the finished migration "
      "(the API's rate_keys_s is the same quotient); keys moved by traffic "
      "were moved by the gate before a client's command ran.")
bench.print_log("chashd.log")
print("p99 during the migration <= x%.0f the baseline's, SET and GET: %s"
      % (TARGET, "MET" if verdict and not over else
         "MISSED" if not verdict else "not measured (windows overran)"))

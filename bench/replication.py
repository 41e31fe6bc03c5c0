# replication.py -- what bench/replication.sh runs (read its head for the
# knobs): redis-benchmark's SET and GET through three redis pools of one
# chashd on the same three redis-servers -- replicas 1, replicas 3 with
# read_policy primary, replicas 3 with read_policy quorum -- interleaved
# rounds, medians, the ratios N=3 / N=1; every run checked for failed
# requests, the pools' replication counters for failed writes and reads.
# Standard library only; the processes come from bench/benchlib.py.
#
# SPDX-License-Identifier: BSD-2-Clause
import csv, json, os, statistics, subprocess, sys, time, urllib.error
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["BENCH_DIR"])
import benchlib
from benchlib import KEYSPACE, Conn, encode, free_port, pinned

CHASHD = os.environ["CHASHD"]


def knob(name, default, least):
    return benchlib.knob("replication.sh", name, default, least)


# benchlib reads ROUNDS, DURATION, REQUESTS, KEYSPACE and PIN itself; they
# are checked here, since it takes any integer
for name, value, least in (("ROUNDS", benchlib.ROUNDS, 1),
                           ("DURATION", benchlib.DURATION, 0.1),
                           ("REQUESTS", benchlib.REQUESTS, 1000),
                           ("KEYSPACE", KEYSPACE, 1000)):
    if value < least:
        sys.exit("bench/replication.sh: %s=%s: want a number >= %s"
                 % (name, value, least))
VALUE = knob("VALUE", 100, 1)
CLIENTS = knob("CLIENTS", 50, 1)
WORKERS = knob("WORKERS", 2, 1)

# the pools: name -> (label, the keys that make it what it is, the
# replication the admin API must show: replicas, write_quorum,
# read_policy, read_quorum; None for a pool of one copy)
POOLS = {
    "n1": ("N=1", "  migration: off\n", None),
    "n3_primary": ("N=3 primary", "  replicas: 3\n  write_quorum: 2\n"
                   "  read_policy: primary\n", (3, 2, "primary", None)),
    "n3_quorum": ("N=3 quorum", "  replicas: 3\n  write_quorum: 2\n"
                  "  read_policy: quorum\n  read_quorum: 2\n",
                  (3, 2, "quorum", 2)),
}
ORDER = list(POOLS)
REPLICATED = [p for p in ORDER if POOLS[p][2]]
CASES = [(test, P, CLIENTS, VALUE) for test in ("SET", "GET")
         for P in (1, 16)]

bench = benchlib.Bench("replication")


# ---- the servers and chashd ----------------------------------------------
servers, server_pids = [], []
for i in range(3):
    port, p = bench.redis_server("redis-%d" % (i + 1),
                                 ("--enable-debug-command", "local"))
    servers.append(port)
    server_pids.append(p.pid)

# one chashd, one listener per pool, the three pools on the same members:
# bench/redis.sh's pool (fnv1a_64 + ketama, server_connections 1,
# preconnect, no auto-eject) in mode: redis, plus each pool's keys. The
# N=1 pool says migration: off, which a replicated pool has anyway (no
# membership change happens here: it only keeps the two sides alike).
admin_port = free_port()
listen = {}
text = "global:\n  admin: 127.0.0.1:%d\n  workers: %d\n  log_level: warn\n" \
    % (admin_port, WORKERS)
for pool in ORDER:
    listen[pool] = free_port()
    text += benchlib.pool_text(listen[pool], servers, "redis").replace(
        "bench:", pool + ":", 1).replace(
        "  hash:", "  mode: redis\n" + POOLS[pool][1] + "  hash:", 1)
conf = bench.path("chashd.yml")
with open(conf, "w") as f:
    f.write(text)
t = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                   text=True, timeout=30, stdin=subprocess.DEVNULL)
if t.returncode != 0:
    bench.die("chashd -t: " + (t.stdout + t.stderr).strip())
chashd = bench.start(pinned("0,1", [CHASHD, "-c", conf]), "chashd.log")
for pool in ORDER:
    bench.wait_port(listen[pool], chashd, "chashd")
bench.wait_port(admin_port, chashd, "chashd")   # bound last: all is up


def api(path):
    """The decoded JSON of GET <path> on the admin API (else the run
    fails)."""
    url = "http://127.0.0.1:%d%s" % (admin_port, path)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read().decode())
    except (urllib.error.URLError, OSError, ValueError) as e:
        bench.die("GET %s: %s" % (path, e))


def replication(pool):
    return api("/api/pools/%s/replication" % pool)


def requests(pool):
    """The pool's request counters (stats.requests of GET /api/pools/P)."""
    return api("/api/pools/%s" % pool)["stats"]["requests"]


for pool in REPLICATED:
    j = replication(pool)
    want = POOLS[pool][2]
    got = (j.get("replicas"), j.get("write_quorum"), j.get("read_policy"),
           j.get("read_quorum") if want[3] is not None else None)
    if got != want:
        bench.die("pool %s runs replicas, write_quorum, read_policy, "
                  "read_quorum %s, not %s: %s" % (pool, got, want,
                                                  json.dumps(j)))


def server_cpu():
    return sum(benchlib.stat_cpu_seconds(pid) for pid in server_pids)


def dbsizes():
    out = []
    for port in servers:
        c = Conn(port, timeout=30)
        out.append(c.integer("DBSIZE"))
        c.close()
    return out


def keyspace_misses():
    """keyspace_misses of INFO stats, summed over the members."""
    n = 0
    for port in servers:
        c = Conn(port, timeout=30)
        c.s.sendall(encode("INFO", "stats"))
        head = c.line()                      # $<length> of a bulk string
        want = int(head[1:]) + 2
        while len(c.buf) < want:
            chunk = c.s.recv(1 << 16)
            if not chunk:
                bench.die("redis on %d closed during INFO" % port)
            c.buf += chunk
        for line in c.buf[:want].decode().splitlines():
            if line.startswith("keyspace_misses:"):
                n += int(line.split(":")[1])
        c.close()
    return n


# ---- the load ------------------------------------------------------------
def redis_benchmark(pool, case, n):
    """One redis-benchmark of <case> on <pool> with -n <n>; (rps, p50,
    p99, chashd CPU us/req, redis-servers' CPU us/req). An error reply
    (redis-benchmark 7 stops at the first one and says so), no result
    line or no end within its timeout fails the run."""
    test, P, c, d = case
    args = pinned("1", [
        "redis-benchmark", "-h", "127.0.0.1", "-p", str(listen[pool]),
        "-c", str(c), "-n", str(n), "-P", str(P), "-d", str(d),
        "-r", str(KEYSPACE), "-t", test.lower(), "--csv"])
    before = requests(pool)
    c0, s0 = benchlib.stat_cpu_seconds(chashd.pid), server_cpu()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    bench.procs.append(p)                # killed too if the run stops
    limit = 60 + 20 * benchlib.DURATION
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        bench.die("%s %s -P %d: redis-benchmark did not end in %g s"
                  % (pool, test, P, limit))
    finally:
        if p in bench.procs:             # (not when a signal emptied it)
            bench.procs.remove(p)
    c1, s1 = benchlib.stat_cpu_seconds(chashd.pid), server_cpu()
    after = requests(pool)
    row = None
    for line in out.splitlines():
        if line.startswith('"%s"' % test):
            v = next(csv.reader([line]))
            row = (float(v[1]), float(v[4]), float(v[6]))
    # chashd answers CONFIG GET (redis-benchmark's first command) with an
    # error of its own: only the stderr warning about it is expected
    noise = err.replace("WARNING: Could not fetch server CONFIG\n", "")
    failed = {k: after[k] - before[k] for k in ("errors", "protocol_errors")
              if after[k] != before[k]}
    if p.returncode != 0 or row is None or "rror" in out or noise.strip() \
            or failed:
        bench.die("%s %s -P %d: redis-benchmark failed (rc %s, chashd's "
                  "counters %s): %s%s" % (pool, test, P, p.returncode,
                                          failed or "clean", out[-800:],
                                          noise[-800:]))
    return row + ((c1 - c0) * 1e6 / n, (s1 - s0) * 1e6 / n)


def digests():
    """DEBUG DIGEST of each member: equal when they hold the same keys
    with the same values."""
    out = []
    for port in servers:
        c = Conn(port, timeout=30)
        out.append(c.call("DEBUG", "DIGEST")[1:].decode())
        c.close()
    return out


def write_all(port, value):
    """key:000000000000 .. KEYSPACE-1 (redis-benchmark's names for -r)
    set to <value> through <port>, pipelined 1000 at a time."""
    c = Conn(port, timeout=30)
    for i in range(0, KEYSPACE, 1000):
        c.pipeline([encode("SET", b"key:%012d" % j, value)
                    for j in range(i, min(i + 1000, KEYSPACE))])
    c.close()


def settled(limit=10.0):
    """None once every member holds KEYSPACE keys and the same copies (a
    write is acknowledged after write_quorum members: its third copy may
    still be on its way, so this waits up to <limit> s); else what
    differs."""
    end = time.monotonic() + limit
    while True:
        sizes, sums = dbsizes(), digests()
        if sizes == [KEYSPACE] * 3 and len(set(sums)) == 1:
            return None
        if time.monotonic() > end:
            return ("after %g s the members hold %s keys (%d each wanted), "
                    "digests %s (equal wanted)" % (limit, sizes, KEYSPACE,
                                                   sums))
        time.sleep(0.05)


def preload():
    """Every key written through the quorum pool: each member must then
    hold all of them (three distinct members per key), the same copies."""
    write_all(listen["n3_quorum"], b"p" * VALUE)
    why = settled()
    if why:
        bench.die("the preload through the N=3 pool: " + why)


# redis-benchmark fills its values with random bytes of its own, a new
# fill in each process: the N=1 pool's SETs leave its keys' primaries
# apart from their other members, which the quorum pool's GETs would then
# see as divergences (and repair, and read a third copy). So the members
# are made alike again, directly, between the SETs and the GETs of every
# round: each key set to one value on each member, until their digests
# agree (a third copy of a replicated SET still on its way when the
# rewrite began can land after it: then once more).
def sync(what):
    for attempt in range(5):
        value = b"%d" % attempt + b"s" * (VALUE - 1)
        for port in servers:
            write_all(port, value)
        sums = digests()
        if len(set(sums)) == 1:
            return
    bench.die("%s: the members still differ after 5 rewrites: digests %s"
              % (what, sums))


# ---- the run -------------------------------------------------------------
print("redis-benchmark SET and GET through one chashd (%d workers, mode: "
      "redis) with three pools on the same 3 redis-servers: %s"
      % (WORKERS, "; ".join(POOLS[p][0] + " (" + POOLS[p][1].strip()
                            .replace("\n  ", ", ") + ")" for p in ORDER)))
print("%d rounds, medians; -c %d, -d %d, -r %d (all keys preloaded), "
      "%.1f s a run, pinned: %s; %d cores, load average %s"
      % (benchlib.ROUNDS, CLIENTS, VALUE, KEYSPACE, benchlib.DURATION,
         "yes" if benchlib.PIN else "no", os.cpu_count(),
         " ".join(open("/proc/loadavg").read().split()[:3])))
print()

t_start = time.monotonic()
preload()
pace = benchlib.Results()     # req/s of every run, the warm-up's too: -n
results = benchlib.Results()  # the rounds': (rps, p50, p99, chashd CPU)
redis_cpu = {}                # (case, pool) -> [redis-servers' CPU us/req]


def run(case, pool, rnd):
    got = redis_benchmark(pool, case, pace.size(case, pool, False))
    pace.add(case, pool, got)
    if rnd == 0:
        return
    results.add(case, pool, got)
    redis_cpu.setdefault((case, pool), []).append(got[4])
    print("  round %d %-11s %-3s -P %-2d %9.0f req/s p50 %.3f p99 %.3f ms "
          "CPU us/req chashd %.2f redis %.2f"
          % ((rnd, POOLS[pool][0], case[0], case[1]) + got), flush=True)


# a warm-up (round 0, not reported) sizes the first round's runs; then
# the rounds, the pools' order rotated by one each round
for rnd in range(0, benchlib.ROUNDS + 1):
    k = max(0, rnd - 1) % len(ORDER)
    synced = False
    for case in CASES:
        if case[0] == "GET" and not synced:
            sync("round %d" % rnd)
            synced = True
        for pool in ORDER[k:] + ORDER[:k]:
            run(case, pool, rnd)
print("(%.0f s; load average at the end %s)" % (
    time.monotonic() - t_start,
    " ".join(open("/proc/loadavg").read().split()[:3])))
print()

# ---- the checks ----------------------------------------------------------
bad = []
counters = {}
for pool in REPLICATED:
    j = replication(pool)
    counters[pool] = j
    for k in ("write_failures", "read_failures", "divergences"):
        if j.get(k) != 0:
            bad.append("%s: %s %s" % (pool, k, j.get(k)))
why = settled()
if why:
    bad.append("at the end, " + why)
misses = keyspace_misses()
if misses:
    bad.append("%d GETs found no key on a member (keyspace_misses)" % misses)

# ---- the tables ----------------------------------------------------------
print("| test | -P | pool | req/s | p50 ms | p99 ms | chashd CPU us/req "
      "| redis CPU us/req |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for case in CASES:
    for pool in ORDER:
        m = results.med(case, pool)
        print("| %s | %d | %s | %.0f | %.3f | %.3f | %.2f | %.2f |"
              % ((case[0], case[1], POOLS[pool][0]) + tuple(m) +
                 (statistics.median(redis_cpu[(case, pool)]),)))
print()
print("| test | -P | " + " | ".join(
    "%s / N=1 %s" % (POOLS[p][0], what) for p in REPLICATED
    for what in ("req/s", "p99", "chashd CPU/req")) + " |")
print("|---|---:|" + "---:|" * 3 * len(REPLICATED))
for case in CASES:
    base = results.med(case, "n1")
    cells = []
    for pool in REPLICATED:
        m = results.med(case, pool)
        cells += ["x%.2f" % (m[i] / base[i]) for i in (0, 2, 3)]
    print("| %s | %d | " % case[:2] + " | ".join(cells) + " |")
print()
for pool in REPLICATED:
    j = counters[pool]
    print("%s: write_failures %d, read_failures %d, partial_writes %d, "
          "divergences %d, repairs %d, repair_errors %d, pending keys %d"
          % (POOLS[pool][0], j["write_failures"], j["read_failures"],
             j["partial_writes"], j["divergences"], j["repairs"],
             j["repair_errors"],
             sum(m["pending_keys"] for m in j["members"])))
print("members' keys (DBSIZE): %s, the same copies (DEBUG DIGEST): %s; "
      "keyspace_misses %d" % (dbsizes(), "yes" if why is None else "NO",
                              misses))
bench.print_log("chashd.log")
if bad:
    bench.die("FAILED: " + "; ".join(bad))
print("no request failed; no write or read failure in the replicated pools")

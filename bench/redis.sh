#!/bin/sh
# redis.sh -- chashd's redis mode against nutcracker (twemproxy 0.5.0) and
# direct Redis, on the same 3 redis-servers, load from redis-benchmark
# (redis-tools 7.0): SET, GET, INCR, LPUSH, MSET (10 keys) and MGET (10
# keys, a custom command), each at -P 1 and -P 16, -c 50 and -c 500,
# values of 16 bytes (and 4096 for SET and GET). Targets: one redis-server
# directly (the upper bound), nutcracker, chashd with 1 worker and chashd
# with 2 workers; both proxies with the same pool: fnv1a_64 + ketama,
# server_connections 1, preconnect, no auto-eject. Prints req/s, p50, p99
# and the process's CPU time per request (from /proc: robust to the rest
# of the machine's load) for each, the balance of the keys over the
# servers (DBSIZE), and the ratios chashd 2 workers / nutcracker req/s,
# chashd 1 worker / nutcracker CPU per request and p99.
#
#   B=build bench/redis.sh
#   ROUNDS=3       interleaved rounds; medians are reported
#   REQUESTS=30000 -n of the first round at -P 1 (x8 at -P 16)
#   DURATION=0.6   seconds a run aims at after the first round (-n is
#                  then the case's median req/s so far x DURATION)
#   KEYSPACE=100000  -r, and the keys written before the reads
#   THREADS=1      redis-benchmark --threads (more than 1 slows it down
#                  on 2 cores, where the servers need the other core)
#   PIN=0          1: proxies with one thread on CPU 0, chashd 2 workers
#                  on CPUs 0-1, redis-benchmark and the servers on CPU 1
#   BASE=          a build dir: its chashd ("before"; B's is "after") runs
#                  as twins of chashd 1 worker and 2 workers, the same
#                  config and pinning, each right after its own in the
#                  rotated order of every round; then a table "after /
#                  before" per case (req/s, CPU per request, p99) and a
#                  verdict per metric: within 3% (req/s >= x0.97, CPU per
#                  request <= x1.03) in every case, or which cases not
#   ONLY_CHASHD=0  1: no direct redis, no nutcracker (and no ratios
#                  against them): only the chashd targets, for a shorter
#                  BASE= run; the keys are then written through chashd
#   TESTS=         only these tests, e.g. TESTS=GET,SET,INCR,MGET10 (of
#                  SET GET INCR LPUSH MSET10 MGET10); BIG=0 skips the
#                  4096-byte cases: fewer cases, so that longer runs and
#                  more rounds fit (a BASE= run wants DURATION=2 ROUNDS=5
#                  to bring the noise under 3%)
#
#   B=build-new BASE=build-old ONLY_CHASHD=1 bench/redis.sh
#   B=build-new BASE=build-old ONLY_CHASHD=1 TESTS=GET,SET,INCR,MGET10 \
#       BIG=0 DURATION=2 ROUNDS=5 bench/redis.sh
#
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
BASE=${BASE:-}
ONLY_CHASHD=${ONLY_CHASHD:-0}
case $ONLY_CHASHD in
0 | 1) ;;
*)
    echo "bench/redis.sh: ONLY_CHASHD=$ONLY_CHASHD: want 0 or 1" >&2
    exit 1
    ;;
esac
CHASHD_BEFORE=
if [ -n "$BASE" ]; then
    [ -d "$BASE" ] || { echo "bench/redis.sh: BASE=$BASE: not a directory" \
                             "(want the build dir of the chashd before)" >&2
                        exit 1; }
    CHASHD_BEFORE=$(cd "$BASE" && pwd)/chashd
fi
PEERS=nutcracker
[ "$ONLY_CHASHD" = 0 ] || PEERS=

for tool in redis-server redis-benchmark $PEERS taskset "$CHASHD" \
    ${CHASHD_BEFORE:+"$CHASHD_BEFORE"}; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/redis.sh: $tool is missing (scripts/deps installs the" \
             "peers; make builds chashd)" >&2
        exit 1
    fi
done

export CHASHD CHASHD_BEFORE ONLY_CHASHD BENCH_DIR
exec $PY - <<'EOF'
import csv, os, re, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["BENCH_DIR"])
import benchlib
from benchlib import KEYSPACE, THREADS, Conn, encode, free_port, pinned

CHASHD = os.environ["CHASHD"]
CHASHD_BEFORE = os.environ["CHASHD_BEFORE"]     # "": no BASE=
ONLY_CHASHD = os.environ["ONLY_CHASHD"] == "1"
bench = benchlib.Bench("redis")


def populate(port, size):
    """key:000000000000 .. KEYSPACE-1 (redis-benchmark's names) with
    <size>-byte values, pipelined 1000 at a time."""
    c = Conn(port)
    value = b"x" * size
    for i in range(0, KEYSPACE, 1000):
        batch = [encode("SET", b"key:%012d" % j, value)
                 for j in range(i, min(i + 1000, KEYSPACE))]
        c.pipeline(batch)
    c.close()


# ---- the servers and the proxies ---------------------------------------------
servers = []
for i in range(3):
    port = free_port()
    d = bench.path("redis-%d" % (i + 1))
    os.mkdir(d)
    p = bench.start(pinned("1", ["redis-server", "--port", str(port),
                                 "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", d,
                                 "--daemonize", "no"]),
                    "redis-%d.log" % (i + 1))
    bench.wait_port(port, p, "redis-%d" % (i + 1))
    servers.append((port, p))


def pool_text(port):
    return benchlib.pool_text(port, [s[0] for s in servers], "redis",
                              redis=True)


targets = {}
if not ONLY_CHASHD:
    targets["direct"] = {"port": servers[0][0], "pid": servers[0][1].pid}
    nc_port, p = bench.nutcracker(pool_text)
    targets["nutcracker"] = {"port": nc_port, "pid": p.pid}
targets.update(bench.chashds(CHASHD, pool_text))
# the cost of counting hot keys (hot_keys: track, the default): the same
# chashd, 1 worker, with hot_keys: off
NOHOT = benchlib.start_chashd(bench, CHASHD, "chashd-1w-nohot", 1, "0",
                              lambda port: pool_text(port) +
                              "  hot_keys: off\n")
targets["chashd-1w-nohot"] = NOHOT
if CHASHD_BEFORE:
    targets.update(bench.chashds(CHASHD_BEFORE, pool_text, suffix="-before",
                                 hint="(the chashd of BASE=, %s)"
                                 % CHASHD_BEFORE))

ORDER = benchlib.ORDER + ["chashd-1w-nohot"]
if CHASHD_BEFORE:
    # each twin right after its own: the two meet the same machine
    ORDER = [t for name in ORDER for t in (name, name + "-before")]
LABEL = dict(benchlib.LABEL, direct="direct redis",
             **{"chashd-1w-nohot": "chashd 1 worker, hot_keys off",
                "chashd-1w-before": "chashd 1 worker, before",
                "chashd-2w-before": "chashd 2 workers, before"})
# the keys go through nutcracker (the proxies' placement), or through
# chashd 1 worker when there is no nutcracker: the same pool, the same
# placement
FILL_PORT, FILL_NAME = ((targets["chashd-1w"]["port"], "chashd 1 worker")
                        if ONLY_CHASHD else (nc_port, "nutcracker"))


# ---- the cases -------------------------------------------------------------
MGET = ["mget"] + ["key:__rand_int__"] * 10
TESTS = [("SET", ["-t", "set"]), ("GET", ["-t", "get"]),
         ("INCR", ["-t", "incr"]), ("LPUSH", ["-t", "lpush"]),
         ("MSET10", ["-t", "mset"]), ("MGET10", MGET)]
BIG = ("SET", "GET")       # the only tests run with 4096-byte values
if os.environ.get("TESTS"):
    want = os.environ["TESTS"].split(",")
    unknown = [t for t in want if t not in dict(TESTS)]
    if unknown:
        sys.exit("bench/redis.sh: TESTS=%s: no test %s (want some of %s)"
                 % (os.environ["TESTS"], ", ".join(unknown),
                    " ".join(t for t, _ in TESTS)))
    TESTS = [(t, a) for t, a in TESTS if t in want]
if os.environ.get("BIG", "1") == "0":
    BIG = ()

cases = benchlib.make_cases([t for t, _ in TESTS], BIG)   # (test, P, c, d)
ARGS = dict(TESTS)
results = benchlib.Results()
sizes = {}          # (case, target) -> the -n of each run


def run(case, target):
    test, P, c, d = case
    t = targets[target]
    n = results.size(case, target, "10" in test)
    args = pinned("1", ["redis-benchmark", "-h", "127.0.0.1", "-p",
                        str(t["port"]), "-c", str(c), "-n", str(n), "-P",
                        str(P), "-d", str(d), "-r", str(KEYSPACE),
                        "--csv"] + (["--threads", str(THREADS)]
                                    if THREADS > 1 else [])) + ARGS[test]
    c0 = benchlib.stat_cpu_seconds(t["pid"])
    r = subprocess.run(args, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    c1 = benchlib.stat_cpu_seconds(t["pid"])
    rows = [line for line in r.stdout.splitlines()
            if line.startswith('"') and not line.startswith('"test"')]
    noise = re.sub(r"WARNING: Could not fetch server CONFIG\n?", "",
                   r.stderr)
    if r.returncode != 0 or not rows or "rror" in noise + r.stdout:
        sys.stderr.write("  %s %s: redis-benchmark failed: %s%s\n"
                         % (target, case, r.stdout[-400:], noise[-400:]))
        return None
    v = next(csv.reader([rows[0]]))
    got = (float(v[1]), float(v[4]), float(v[6]), (c1 - c0) * 1e6 / n)
    results.add(case, target, got)
    sizes.setdefault((case, target), []).append(n)
    return got


# ---- rounds ------------------------------------------------------------------
present = [t for t in ORDER if t in targets]
if ONLY_CHASHD or CHASHD_BEFORE:
    print("redis-benchmark against %s%s on the same 3 redis-servers, "
          "fnv1a_64 + ketama," % (
              "chashd (1 and 2 workers, 1 worker with hot_keys off)"
              if ONLY_CHASHD else "direct redis, nutcracker and chashd (1 "
              "and 2 workers)", ", and chashd before (1 and 2 workers)"
              if CHASHD_BEFORE else ""))
    if CHASHD_BEFORE:
        print("after: %s, before: %s" % (CHASHD, CHASHD_BEFORE))
else:
    print("redis-benchmark against direct redis, nutcracker and chashd "
          "(1 and 2")
    print("workers) on the same 3 redis-servers, fnv1a_64 + ketama,")
print(benchlib.settings("client"))
print()

balance = None


def prepare(rnd, d):
    # a fresh keyspace of <d>-byte values for every read: through a
    # proxy (the proxies' placement), and all of it on the server the
    # direct runs use
    global balance
    for sport, _ in servers:
        Conn(sport).call("FLUSHALL")
    populate(FILL_PORT, d)
    if balance is None:
        balance = [int(Conn(sport).call("DBSIZE")[1:])
                   for sport, _ in servers]
    if "direct" in targets:
        populate(servers[0][0], d)


benchlib.rounds(cases, present, prepare, run)

print("keys per server after writing the %d keys through %s "
      "(DBSIZE): %s" % (KEYSPACE, FILL_NAME,
                        benchlib.shares("redis", balance)))
print("LPUSH pushes to one key (redis-benchmark's \"mylist\"): one member "
      "takes it all through a proxy.")
print("CPU us/req: the target process's own CPU time per request -- the "
      "redis-server itself for direct, the proxy for the others.")
print()
benchlib.print_table(results, cases, present, LABEL)
if "nutcracker" in targets:
    benchlib.print_ratios(results, cases)
else:
    print("ONLY_CHASHD=1: no direct redis and no nutcracker, no ratios "
          "against them.")
    print()
# the hot key summary's cost: chashd 1 worker with it (the default) over
# the same without, per case; one case swings by +-20% between rounds on
# 2 cores, far more than the cost, so the target is judged on the median
# over every case: req/s at least x0.97 (at most 3% lost) and CPU per
# request at most x1.03
import statistics
print("| test | -P | -c | -d | hot_keys track / off: req/s | CPU us/req |")
print("|---|---:|---:|---:|---:|---:|")
rps, cpu = [], []
for case in cases:
    a, b = results.med(case, "chashd-1w"), results.med(case, "chashd-1w-nohot")
    if a is None or b is None or not b[0] or not b[3]:
        print("| %s | %d | %d | %d | n/a | n/a |" % case)
        continue
    rps.append(a[0] / b[0])
    cpu.append(a[3] / b[3])
    print("| %s | %d | %d | %d | x%.3f | x%.3f |" % (case + (rps[-1], cpu[-1])))
print()
if rps:
    mr, mc = statistics.median(rps), statistics.median(cpu)
    print("hot key cost, median over %d cases: req/s x%.3f (target >= x0.97: "
          "%s), CPU per request x%.3f (target <= x1.03: %s)"
          % (len(rps), mr, "MET" if mr >= 0.97 else "MISSED", mc,
             "MET" if mc <= 1.03 else "MISSED"))

if CHASHD_BEFORE:
    # after / before: chashd 1 worker and 2 workers against their twins;
    # a CPU time is read in clock ticks: one tick is 1/HZ s over a run's
    # requests, the after's and the before's make the resolution
    def medians(case, target):
        m = results.med(case, target)        # req/s, p50, p99, CPU
        return m and (m[0], m[3], m[2])

    def tick(case, target):
        n = sizes.get((case, target))
        return n and 1e6 / benchlib.HZ / statistics.median(n)
    rows = [("%s, %s -P %d -c %d -d %d" % ((LABEL[name][7:],) + case),
             medians(case, name), medians(case, name + "-before"),
             (tick(case, name) or 0) + (tick(case, name + "-before") or 0))
            for name in ("chashd-1w", "chashd-2w") for case in cases]
    print()
    benchlib.print_after_before(rows, CHASHD, CHASHD_BEFORE,
                                ["req/s", "CPU us/req", "p99"])
EOF

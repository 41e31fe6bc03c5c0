#!/bin/sh
# memcache.sh -- chashd's memcache mode against nutcracker (twemproxy 0.5.0)
# and direct memcached, on the same 3 memcached members, load from our
# bench/mcload (the reasons are in the benchmarks doc: libmemcached-tools'
# memcslap and memcaslap report no percentiles and cannot pipeline): get,
# set and a 10-key multi-get, each at -P 1 and -P 16, -c 50 and -c 500,
# values of 16 and 4096 bytes. Targets: one memcached directly (the upper
# bound), nutcracker, chashd with 1 worker and chashd with 2 workers; both
# proxies with the same pool: fnv1a_64 + ketama, server_connections 1,
# preconnect, no auto-eject. Prints req/s, p50, p99 and the process's CPU
# time per request (from /proc: robust to the rest of the machine's load)
# for each, the balance of the keys over the members (curr_items), and the
# ratios chashd 2 workers / nutcracker req/s, chashd 1 worker / nutcracker
# CPU per request and p99, each MET or MISSED against its target.
#
#   B=build bench/memcache.sh      (make bench builds $B/mcload and chashd)
#   ROUNDS=3       interleaved rounds; medians are reported
#   REQUESTS=30000 -n of the first round at -P 1 (x8 at -P 16, /2 for mget)
#   DURATION=0.6   seconds a run aims at after the first round (-n is then
#                  the case's median req/s so far x DURATION)
#   KEYSPACE=100000  -r, and the keys written before the reads
#   THREADS=1      mcload threads
#   PIN=0          1: proxies with one thread on CPU 0, chashd 2 workers on
#                  CPUs 0-1, mcload and the memcacheds on CPU 1
#   TARGETS=direct,nutcracker,chashd-1w,chashd-2w   the targets to run
#   CASES=get,set,mget10   the tests to run (all by default)
#
# Every get and multi-get must hit (the keys were written through
# nutcracker, so a proxy that places keys differently misses) and every
# reply is checked by mcload; a run that fails either shows as failed (and
# MISSED), and the script then exits 1.
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
PY=/usr/bin/python3
TARGETS=${TARGETS:-direct,nutcracker,chashd-1w,chashd-2w}
MCLOAD=$(cd "$B" && pwd)/mcload
CHASHD=$(cd "$B" && pwd)/chashd
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)

need="memcached nutcracker taskset $MCLOAD"
case ",$TARGETS," in *,chashd-*) need="$need $CHASHD" ;; esac
for tool in $need; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/memcache.sh: $tool is missing (scripts/deps installs" \
             "the peers; make bench builds mcload and chashd)" >&2
        exit 1
    fi
done

export MCLOAD CHASHD TARGETS BENCH_DIR
exec $PY - <<'EOF'
import os, resource, socket, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["BENCH_DIR"])
import benchlib
from benchlib import KEYSPACE, THREADS, free_port, pinned

MCLOAD = os.environ["MCLOAD"]
CHASHD = os.environ["CHASHD"]
ORDER = benchlib.ORDER
LABEL = dict(benchlib.LABEL, direct="direct memcached")
WANT = [t.strip() for t in os.environ["TARGETS"].split(",") if t.strip()]
for t in WANT:
    if t not in ORDER:
        sys.exit("bench/memcache.sh: TARGETS: '%s' is not one of %s"
                 % (t, ",".join(ORDER)))

bench = benchlib.Bench("memcache")


def admin(port, command, last):
    """One memcached text command; the reply lines up to and with <last>
    (a bytes line, e.g. b"OK" or b"END")."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(command + b"\r\n")
        buf = b""
        while not (buf == last + b"\r\n" or buf.endswith(b"\r\n" + last +
                                                         b"\r\n")):
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("%r: connection closed after %r"
                                   % (command, buf[-200:]))
            buf += chunk
            if b"ERROR" in buf:
                raise RuntimeError("%r: %r" % (command, buf[-200:]))
    return buf.decode().splitlines()


def curr_items(port):
    for line in admin(port, b"stats", b"END"):
        f = line.split()
        if len(f) == 3 and f[1] == "curr_items":
            return int(f[2])
    raise RuntimeError("stats of memcached on %d: no curr_items" % port)


def mcload(port, args, timeout=600):
    """Runs mcload; its key=value line as a dict, or (None, why)."""
    r = subprocess.run(pinned("1", [MCLOAD, "-p", str(port), "-r",
                                    str(KEYSPACE), "--max-time", "300"] +
                              args),
                       capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    line = r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else []
    if r.returncode != 0 or not line:
        return None, (r.stdout[-300:] + r.stderr[-400:]).strip()
    return dict(kv.split("=", 1) for kv in line[0].split()), ""


def prefill(port, size, what):
    got, why = mcload(port, ["--prefill", "-d", str(size), "-c", "20",
                             "-P", "32"])
    if got is None:
        bench.die("prefill of %s failed: %s" % (what, why))


# ---- the members, the direct server and the proxies -----------------------
# As root memcached wants -u; the members get 256 MB each, which holds
# their third of the keyspace at 4096 bytes. The direct target is a fourth
# memcached with room for the whole keyspace (KEYSPACE x 4 KB and slab
# overhead), so its reads hit like the proxies' do.
ROOT = ["-u", "root"] if os.getuid() == 0 else []
DIRECT_MB = max(256, KEYSPACE * 6 // 1024 + 64)


def memcached(name, mb):
    port = free_port()
    p = bench.start(pinned("1", ["memcached", "-p", str(port), "-l",
                                 "127.0.0.1", "-U", "0", "-t", "1",
                                 "-m", str(mb)] + ROOT), name + ".log")
    bench.wait_port(port, p, name)
    return port, p


members = [memcached("memcached-%d" % (i + 1), 256) for i in range(3)]


def pool_text(port):
    return benchlib.pool_text(port, [m[0] for m in members], "memcached")


targets = {}
if "direct" in WANT:
    dport, dproc = memcached("direct", DIRECT_MB)
    targets["direct"] = {"port": dport, "pid": dproc.pid}

# nutcracker always runs: the keys are written through it, its placement
# is the reference the chashd targets must find them with.
nc_port, p = bench.nutcracker(pool_text)
if "nutcracker" in WANT:
    targets["nutcracker"] = {"port": nc_port, "pid": p.pid}
targets.update(bench.chashds(CHASHD, pool_text, WANT,
                             "(TARGETS=direct,nutcracker runs without it)"))


def cpu_seconds(pid):
    """The CPU time of process <pid>: the sum of its threads' schedstat run
    times (nanoseconds; the 10 ms ticks of /proc/PID/stat are too coarse
    for a run of 0.6 s), or those ticks where schedstat is missing."""
    if not os.path.exists("/proc/self/schedstat"):
        return benchlib.stat_cpu_seconds(pid)
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass      # a thread that just ended
    return total / 1e9


def children_cpu():
    """CPU seconds of the waited-for children: mcload's, as the servers and
    proxies are reaped only at the end."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---- the cases -------------------------------------------------------------
TESTS = [("get", "get"), ("set", "set"), ("mget10", "mget")]
cases = benchlib.make_cases([t for t, _ in TESTS])        # (test, P, c, d)
ONLY = [t for t in os.environ.get("CASES", "").split(",") if t]
if ONLY:
    cases = [c for c in cases if c[0] in ONLY]
ARG = dict(TESTS)
results = benchlib.Results()
failures = []              # (target, case) of every failed run
seed = 0


def run(case, target):
    global seed
    test, P, c, d = case
    t = targets[target]
    # every connection gets a few pipelines' worth, whatever REQUESTS says
    n = results.size(case, target, test == "mget10", max(2000, 4 * c * P))
    seed += 1
    args = ["-t", ARG[test], "-c", str(c), "-P", str(P), "-d", str(d),
            "-n", str(n), "-T", str(THREADS), "--seed", str(seed)]
    c0, l0 = cpu_seconds(t["pid"]), children_cpu()
    got, why = mcload(t["port"], args)
    c1, l1 = cpu_seconds(t["pid"]), children_cpu()
    if got is None:
        sys.stderr.write("  %s %s: mcload failed: %s\n" % (target, case, why))
        failures.append((target, case))
        return None
    if test != "set" and int(got["misses"]) > 0:
        sys.stderr.write("  %s %s: %s misses of %s keys on a prefilled "
                         "keyspace\n" % (target, case, got["misses"],
                                         int(got["misses"]) +
                                         int(got["hits"])))
        failures.append((target, case))
        return None
    done = int(got["requests"])
    row = (float(got["rps"]), float(got["p50_ms"]), float(got["p99_ms"]),
           (c1 - c0) * 1e6 / done, (l1 - l0) * 1e6 / done)
    results.add(case, target, row)
    return row


# ---- rounds ------------------------------------------------------------------
present = [t for t in ORDER if t in targets]
print("bench/mcload against %s on the same 3 memcached members, fnv1a_64 "
      "+ ketama," % ", ".join(LABEL[t] for t in present))
print(benchlib.settings("mcload"))
print()

balance = None


def prepare(rnd, d):
    # a fresh keyspace of <d>-byte values for every read: through
    # nutcracker (the proxies' placement), and all of it on the direct
    # server
    global balance
    for port in [m[0] for m in members] + (
            [targets["direct"]["port"]] if "direct" in targets else []):
        admin(port, b"flush_all", b"OK")
    prefill(nc_port, d, "the pool through nutcracker")
    if balance is None:
        # curr_items is exact only before the first flush_all (flushed
        # items are reclaimed lazily)
        balance = [curr_items(m[0]) for m in members]
    if "direct" in targets:
        prefill(targets["direct"]["port"], d, "the direct memcached")


benchlib.rounds(cases, present, prepare, run, " (mcload %.2f)")

print("keys per member after writing the %d keys through nutcracker "
      "(curr_items): %s" % (KEYSPACE, benchlib.shares("memcached", balance)))
print("A multi-get of 10 keys counts as one request. CPU us/req: the target "
      "process's own CPU time per request -- the memcached itself for "
      "direct, the proxy for the others; (mcload x) in the round lines: the "
      "load generator's.")
print()
benchlib.print_table(results, cases, present, LABEL)
benchlib.print_ratios(results, cases, WANT, judge=True)
if failures:
    print("%d runs FAILED (wrong replies, misses or errors: the messages "
          "above): %s" % (len(failures), ", ".join(sorted(set(
              t for t, _ in failures)))))
    sys.exit(1)
EOF

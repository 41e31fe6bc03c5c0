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

need="memcached nutcracker taskset $MCLOAD"
case ",$TARGETS," in *,chashd-*) need="$need $CHASHD" ;; esac
for tool in $need; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/memcache.sh: $tool is missing (scripts/deps installs" \
             "the peers; make bench builds mcload and chashd)" >&2
        exit 1
    fi
done

export MCLOAD CHASHD TARGETS
exec $PY - <<'EOF'
import atexit, os, resource, signal, socket, statistics, subprocess, sys
import tempfile, time

MCLOAD = os.environ["MCLOAD"]
CHASHD = os.environ["CHASHD"]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
REQUESTS = int(os.environ.get("REQUESTS", "30000"))
DURATION = float(os.environ.get("DURATION", "0.6"))
KEYSPACE = int(os.environ.get("KEYSPACE", "100000"))
THREADS = int(os.environ.get("THREADS", "1"))
PIN = os.environ.get("PIN", "0") == "1" and os.cpu_count() >= 2
HZ = os.sysconf("SC_CLK_TCK")
ORDER = ["direct", "nutcracker", "chashd-1w", "chashd-2w"]
LABEL = {"direct": "direct memcached", "nutcracker": "nutcracker 0.5.0",
         "chashd-1w": "chashd 1 worker", "chashd-2w": "chashd 2 workers"}
WANT = [t.strip() for t in os.environ["TARGETS"].split(",") if t.strip()]
for t in WANT:
    if t not in ORDER:
        sys.exit("bench/memcache.sh: TARGETS: '%s' is not one of %s"
                 % (t, ",".join(ORDER)))

TMP = tempfile.mkdtemp(prefix="chash-bench-memcache.")
procs = []


def cleanup(*_):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    procs.clear()
    subprocess.run(["rm", "-rf", TMP], stdin=subprocess.DEVNULL)


atexit.register(cleanup)


def on_signal(sig, _):
    cleanup()
    sys.exit(130)


signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpus, args):
    return ["taskset", "-c", cpus] + args if PIN else args


def start(args, log):
    p = subprocess.Popen(args, stdout=open(os.path.join(TMP, log), "wb"),
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    procs.append(p)
    return p


def wait_port(port, proc, what):
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit("bench/memcache.sh: %s exited: %s" % (what, open(
                os.path.join(TMP, what + ".log"), errors="replace").read()))
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("bench/memcache.sh: %s does not listen on %d" % (what, port))


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
        sys.exit("bench/memcache.sh: prefill of %s failed: %s" % (what, why))


# ---- the members, the direct server and the proxies -----------------------
# As root memcached wants -u; the members get 256 MB each, which holds
# their third of the keyspace at 4096 bytes. The direct target is a fourth
# memcached with room for the whole keyspace (KEYSPACE x 4 KB and slab
# overhead), so its reads hit like the proxies' do.
ROOT = ["-u", "root"] if os.getuid() == 0 else []
DIRECT_MB = max(256, KEYSPACE * 6 // 1024 + 64)


def memcached(name, mb):
    port = free_port()
    p = start(pinned("1", ["memcached", "-p", str(port), "-l", "127.0.0.1",
                           "-U", "0", "-t", "1", "-m", str(mb)] + ROOT),
              name + ".log")
    wait_port(port, p, name)
    return port, p


members = [memcached("memcached-%d" % (i + 1), 256) for i in range(3)]


def pool_text(port):
    lines = ["bench:", "  listen: 127.0.0.1:%d" % port,
             "  hash: fnv1a_64", "  distribution: ketama",
             "  server_connections: 1", "  preconnect: true",
             "  auto_eject_hosts: false", "  timeout: 10000", "  servers:"]
    for i, (mport, _) in enumerate(members):
        lines.append("    - 127.0.0.1:%d:1 memcached-%d" % (mport, i + 1))
    return "\n".join(lines) + "\n"


targets = {}
if "direct" in WANT:
    dport, dproc = memcached("direct", DIRECT_MB)
    targets["direct"] = {"port": dport, "pid": dproc.pid}

# nutcracker always runs: the keys are written through it, its placement
# is the reference the chashd targets must find them with.
nc_port = free_port()
with open(os.path.join(TMP, "nutcracker.yml"), "w") as f:
    f.write(pool_text(nc_port))
p = start(pinned("0", ["nutcracker", "-c", os.path.join(TMP, "nutcracker.yml"),
                       "-s", str(free_port()), "-a", "127.0.0.1",
                       "-p", os.path.join(TMP, "nutcracker.pid"),
                       "-o", os.path.join(TMP, "nutcracker.err")]),
          "nutcracker.log")
wait_port(nc_port, p, "nutcracker")
if "nutcracker" in WANT:
    targets["nutcracker"] = {"port": nc_port, "pid": p.pid}

for workers, cpus in ((1, "0"), (2, "0,1")):
    name = "chashd-%dw" % workers
    if name not in WANT:
        continue
    port = free_port()
    conf = os.path.join(TMP, name + ".yml")
    with open(conf, "w") as f:
        f.write("global:\n  admin: off\n  workers: %d\n  log_level: warn\n"
                % workers + pool_text(port))
    t = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    if t.returncode != 0:
        sys.exit("bench/memcache.sh: chashd -t: " + (t.stdout + t.stderr)
                 .strip() + "\n(TARGETS=direct,nutcracker runs without it)")
    p = start(pinned(cpus, [CHASHD, "-c", conf]), name + ".log")
    wait_port(port, p, name)
    targets[name] = {"port": port, "pid": p.pid}


def cpu_seconds(pid):
    """The CPU time of process <pid>: the sum of its threads' schedstat run
    times (nanoseconds; the 10 ms ticks of /proc/PID/stat are too coarse
    for a run of 0.6 s), or those ticks where schedstat is missing."""
    if os.path.exists("/proc/self/schedstat"):
        total = 0
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass      # a thread that just ended
        return total / 1e9
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / HZ


def children_cpu():
    """CPU seconds of the waited-for children: mcload's, as the servers and
    proxies are reaped only at the end."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---- the cases -------------------------------------------------------------
TESTS = [("get", "get"), ("set", "set"), ("mget10", "mget")]
cases = []                 # (test, P, c, d)
for d in (16, 4096):
    for test, _ in TESTS:
        for P in (1, 16):
            for c in (50, 500):
                cases.append((test, P, c, d))
ARG = dict(TESTS)
results = {}               # (case, target) -> [(rps, p50, p99, cpu_us)]
failures = []              # (target, case) of every failed run
seed = 0


def run(case, target):
    global seed
    test, P, c, d = case
    t = targets[target]
    past = [r[0] for r in results.get((case, target), [])]
    if past:
        n = int(statistics.median(past) * DURATION)
    else:
        n = REQUESTS * (8 if P > 1 else 1) // (2 if test == "mget10" else 1)
    # every connection gets a few pipelines' worth, whatever REQUESTS says
    n = max(2000, 4 * c * P, min(n, 5000000))
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
    rps, p50, p99 = (float(got["rps"]), float(got["p50_ms"]),
                     float(got["p99_ms"]))
    cpu_us = (c1 - c0) * 1e6 / done
    results.setdefault((case, target), []).append((rps, p50, p99, cpu_us))
    return rps, p50, p99, cpu_us, (l1 - l0) * 1e6 / done


# ---- rounds ------------------------------------------------------------------
present = [t for t in ORDER if t in targets]
print("bench/mcload against %s on the same 3 memcached members, fnv1a_64 "
      "+ ketama," % ", ".join(LABEL[t] for t in present))
print("server_connections 1; %d rounds, medians; -r %d, %d mcload "
      "thread(s), pinned: %s; %d cores, load average %s"
      % (ROUNDS, KEYSPACE, THREADS, "yes" if PIN else "no", os.cpu_count(),
         " ".join(open("/proc/loadavg").read().split()[:3])))
print()

balance = None
t_start = time.monotonic()
for rnd in range(1, ROUNDS + 1):
    for d in (16, 4096):
        # a fresh keyspace of <d>-byte values for every read: through
        # nutcracker (the proxies' placement), and all of it on the direct
        # server
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
        rot = present[(rnd - 1) % len(present):] + \
            present[:(rnd - 1) % len(present)]
        for case in [c for c in cases if c[3] == d]:
            for target in rot:
                got = run(case, target)
                if got:
                    print("  round %d %-10s %-6s -P %-2d -c %-3d -d %-4d "
                          "%9.0f req/s p50 %.3f p99 %.3f ms cpu %.2f us/req "
                          "(mcload %.2f)"
                          % ((rnd, target) + case + got), flush=True)
print("(%.0f s)" % (time.monotonic() - t_start))
print()

total = sum(balance) or 1
print("keys per member after writing the %d keys through nutcracker "
      "(curr_items): %s" % (KEYSPACE, ", ".join(
          "memcached-%d %d (%.1f%%)" % (i + 1, n, 100.0 * n / total)
          for i, n in enumerate(balance))))
print("A multi-get of 10 keys counts as one request. CPU us/req: the target "
      "process's own CPU time per request -- the memcached itself for "
      "direct, the proxy for the others; (mcload x) in the round lines: the "
      "load generator's.")
print()


def med(case, target):
    rows = results.get((case, target))
    if not rows:
        return None
    return [statistics.median(r[i] for r in rows) for i in range(4)]


print("| test | -P | -c | -d | target | req/s | p50 ms | p99 ms "
      "| CPU us/req |")
print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
for case in cases:
    for target in present:
        m = med(case, target)
        if m is None:
            print("| %s | %d | %d | %d | %s | failed | | | |"
                  % (case + (LABEL[target],)))
        else:
            print("| %s | %d | %d | %d | %s | %.0f | %.3f | %.3f | %.2f |"
                  % (case + (LABEL[target],) + tuple(m)))
print()

# (column title, numerator, denominator, index, target, better when)
RATIOS = [("nutcracker / direct req/s", "nutcracker", "direct", 0, None,
           None),
          ("chashd 2w / nutcracker req/s", "chashd-2w", "nutcracker", 0, 1.5,
           ">="),
          ("chashd 1w / nutcracker CPU/req", "chashd-1w", "nutcracker", 3,
           1.0, "<="),
          ("chashd 1w / nutcracker p99", "chashd-1w", "nutcracker", 2, 1.0,
           "<=")]
score = {r[0]: [0, 0] for r in RATIOS if r[4]}   # met, measured


def ratio_cell(case, rt):
    title, num, den, i, goal, how = rt
    a, b = med(case, num), med(case, den)
    if num not in WANT or den not in WANT:
        return "not run"
    if goal is not None:
        score[title][1] += 1      # a failed run counts as MISSED
    if a is None or b is None or not b[i]:
        return "n/a" if goal is None else "failed: MISSED"
    x = a[i] / b[i]
    if goal is None:
        return "x%.2f" % x
    met = x >= goal if how == ">=" else x <= goal
    score[title][0] += met
    return "x%.2f %s" % (x, "MET" if met else "MISSED")


print("| test | -P | -c | -d | " + " | ".join(r[0] for r in RATIOS) + " |")
print("|---|---:|---:|---:|" + "---:|" * len(RATIOS))
for case in cases:
    print("| %s | %d | %d | %d | " % case +
          " | ".join(ratio_cell(case, rt) for rt in RATIOS) + " |")
print()
print("Targets: chashd 2 workers >= x1.5 nutcracker's req/s; chashd 1 "
      "worker's CPU per request and p99 <= nutcracker's (ratios <= x1.00).")
for title, (met, measured) in score.items():
    print("  %s: %s" % (title, "%d of %d lines MET" % (met, measured)
                        if measured else "not measured"))
if failures:
    print("%d runs FAILED (wrong replies, misses or errors: the messages "
          "above): %s" % (len(failures), ", ".join(sorted(set(
              t for t, _ in failures)))))
    sys.exit(1)
EOF

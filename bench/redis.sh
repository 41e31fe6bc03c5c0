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
#
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd

for tool in redis-server redis-benchmark nutcracker taskset "$CHASHD"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/redis.sh: $tool is missing (scripts/deps installs the" \
             "peers; make builds chashd)" >&2
        exit 1
    fi
done

export CHASHD
exec $PY - <<'EOF'
import atexit, csv, os, re, signal, socket, statistics, subprocess, sys
import tempfile, time

CHASHD = os.environ["CHASHD"]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
REQUESTS = int(os.environ.get("REQUESTS", "30000"))
DURATION = float(os.environ.get("DURATION", "0.6"))
KEYSPACE = int(os.environ.get("KEYSPACE", "100000"))
THREADS = int(os.environ.get("THREADS", "1"))
PIN = os.environ.get("PIN", "0") == "1" and os.cpu_count() >= 2
HZ = os.sysconf("SC_CLK_TCK")

TMP = tempfile.mkdtemp(prefix="chash-bench-redis.")
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
            sys.exit("bench/redis.sh: %s exited: %s" % (what, open(
                os.path.join(TMP, what + ".log"), errors="replace").read()))
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("bench/redis.sh: %s does not listen on %d" % (what, port))


# ---- a RESP client for populating and DBSIZE ------------------------------
def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def replies(self, n):
        """n simple replies (status, error or integer)."""
        out = [self.line() for _ in range(n)]
        bad = [r for r in out if r[:1] not in (b"+", b":")]
        if bad:
            raise RuntimeError("error reply: %r" % bad[0])
        return out

    def call(self, *args):
        self.s.sendall(encode(*args))
        return self.replies(1)[0]

    def close(self):
        self.s.close()


def populate(port, size):
    """key:000000000000 .. KEYSPACE-1 (redis-benchmark's names) with
    <size>-byte values, pipelined 1000 at a time."""
    c = Conn(port)
    value = b"x" * size
    for i in range(0, KEYSPACE, 1000):
        batch = [encode("SET", b"key:%012d" % j, value)
                 for j in range(i, min(i + 1000, KEYSPACE))]
        c.s.sendall(b"".join(batch))
        c.replies(len(batch))
    c.close()


# ---- the servers and the proxies ---------------------------------------------
servers = []
for i in range(3):
    port = free_port()
    d = os.path.join(TMP, "redis-%d" % (i + 1))
    os.mkdir(d)
    p = start(pinned("1", ["redis-server", "--port", str(port), "--bind",
                           "127.0.0.1", "--save", "", "--appendonly", "no",
                           "--dir", d, "--daemonize", "no"]),
              "redis-%d.log" % (i + 1))
    wait_port(port, p, "redis-%d" % (i + 1))
    servers.append((port, p))


def pool_text(port):
    lines = ["bench:", "  listen: 127.0.0.1:%d" % port, "  redis: true",
             "  hash: fnv1a_64", "  distribution: ketama",
             "  server_connections: 1", "  preconnect: true",
             "  auto_eject_hosts: false", "  timeout: 10000", "  servers:"]
    for i, (sport, _) in enumerate(servers):
        lines.append("    - 127.0.0.1:%d:1 redis-%d" % (sport, i + 1))
    return "\n".join(lines) + "\n"


targets = {"direct": {"port": servers[0][0], "pid": servers[0][1].pid}}

nc_port = free_port()
with open(os.path.join(TMP, "nutcracker.yml"), "w") as f:
    f.write(pool_text(nc_port))
p = start(pinned("0", ["nutcracker", "-c", os.path.join(TMP, "nutcracker.yml"),
                       "-s", str(free_port()), "-a", "127.0.0.1",
                       "-p", os.path.join(TMP, "nutcracker.pid"),
                       "-o", os.path.join(TMP, "nutcracker.err")]),
          "nutcracker.log")
wait_port(nc_port, p, "nutcracker")
targets["nutcracker"] = {"port": nc_port, "pid": p.pid}

for workers, cpus in ((1, "0"), (2, "0,1")):
    name = "chashd-%dw" % workers
    port = free_port()
    conf = os.path.join(TMP, name + ".yml")
    with open(conf, "w") as f:
        f.write("global:\n  admin: off\n  workers: %d\n  log_level: warn\n"
                % workers + pool_text(port))
    t = subprocess.run([CHASHD, "-t", "-c", conf], capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    if t.returncode != 0:
        sys.exit("bench/redis.sh: chashd -t: " + t.stdout + t.stderr)
    p = start(pinned(cpus, [CHASHD, "-c", conf]), name + ".log")
    wait_port(port, p, name)
    targets[name] = {"port": port, "pid": p.pid}

ORDER = ["direct", "nutcracker", "chashd-1w", "chashd-2w"]
LABEL = {"direct": "direct redis", "nutcracker": "nutcracker 0.5.0",
         "chashd-1w": "chashd 1 worker", "chashd-2w": "chashd 2 workers"}


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])


# ---- the cases -------------------------------------------------------------
MGET = ["mget"] + ["key:__rand_int__"] * 10
TESTS = [("SET", ["-t", "set"]), ("GET", ["-t", "get"]),
         ("INCR", ["-t", "incr"]), ("LPUSH", ["-t", "lpush"]),
         ("MSET10", ["-t", "mset"]), ("MGET10", MGET)]
BIG = ("SET", "GET")       # the only tests run with 4096-byte values

cases = []                 # (test, P, c, d)
for d in (16, 4096):
    for test, _ in TESTS:
        if d != 16 and test not in BIG:
            continue
        for P in (1, 16):
            for c in (50, 500):
                cases.append((test, P, c, d))
ARGS = dict(TESTS)
results = {}               # (case, target) -> [(rps, p50, p99, cpu_us)]


def run(case, target):
    test, P, c, d = case
    t = targets[target]
    past = [r[0] for r in results.get((case, target), [])]
    if past:
        n = int(statistics.median(past) * DURATION)
    else:
        n = REQUESTS * (8 if P > 1 else 1) // (2 if "10" in test else 1)
    n = max(2000, min(n, 5000000))
    args = pinned("1", ["redis-benchmark", "-h", "127.0.0.1", "-p",
                        str(t["port"]), "-c", str(c), "-n", str(n), "-P",
                        str(P), "-d", str(d), "-r", str(KEYSPACE),
                        "--csv"] + (["--threads", str(THREADS)]
                                    if THREADS > 1 else [])) + ARGS[test]
    c0 = cpu_ticks(t["pid"])
    r = subprocess.run(args, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    c1 = cpu_ticks(t["pid"])
    rows = [line for line in r.stdout.splitlines()
            if line.startswith('"') and not line.startswith('"test"')]
    noise = re.sub(r"WARNING: Could not fetch server CONFIG\n?", "",
                   r.stderr)
    if r.returncode != 0 or not rows or "rror" in noise + r.stdout:
        sys.stderr.write("  %s %s: redis-benchmark failed: %s%s\n"
                         % (target, case, r.stdout[-400:], noise[-400:]))
        return None
    v = next(csv.reader([rows[0]]))
    rps, p50, p99 = float(v[1]), float(v[4]), float(v[6])
    cpu_us = (c1 - c0) * 1e6 / HZ / n
    results.setdefault((case, target), []).append((rps, p50, p99, cpu_us))
    return rps, p50, p99, cpu_us


# ---- rounds ------------------------------------------------------------------
present = [t for t in ORDER if t in targets]
print("redis-benchmark against direct redis, nutcracker and chashd (1 and 2")
print("workers) on the same 3 redis-servers, fnv1a_64 + ketama,")
print("server_connections 1; %d rounds, medians; -r %d, %d client "
      "thread(s), pinned: %s; %d cores, load average %s"
      % (ROUNDS, KEYSPACE, THREADS, "yes" if PIN else "no", os.cpu_count(),
         " ".join(open("/proc/loadavg").read().split()[:3])))
print()

balance = None
t_start = time.monotonic()
for rnd in range(1, ROUNDS + 1):
    for d in (16, 4096):
        # a fresh keyspace of <d>-byte values for every read: through
        # nutcracker (the proxies' placement), and all of it on the server
        # the direct runs use
        for sport, _ in servers:
            Conn(sport).call("FLUSHALL")
        populate(nc_port, d)
        if balance is None:
            balance = [int(Conn(sport).call("DBSIZE")[1:])
                       for sport, _ in servers]
        populate(servers[0][0], d)
        rot = present[(rnd - 1) % len(present):] + \
            present[:(rnd - 1) % len(present)]
        for case in [c for c in cases if c[3] == d]:
            for target in rot:
                got = run(case, target)
                if got:
                    print("  round %d %-10s %-6s -P %-2d -c %-3d -d %-4d "
                          "%9.0f req/s p50 %.3f p99 %.3f ms cpu %.2f us/req"
                          % ((rnd, target) + case + got), flush=True)
print("(%.0f s)" % (time.monotonic() - t_start))
print()

total = sum(balance)
print("keys per server after writing the %d keys through nutcracker "
      "(DBSIZE): %s" % (KEYSPACE, ", ".join(
          "redis-%d %d (%.1f%%)" % (i + 1, n, 100.0 * n / total)
          for i, n in enumerate(balance))))
print("LPUSH pushes to one key (redis-benchmark's \"mylist\"): one member "
      "takes it all through a proxy.")
print("CPU us/req: the target process's own CPU time per request -- the "
      "redis-server itself for direct, the proxy for the others.")
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
    for target in ORDER:
        m = med(case, target)
        if m is None:
            print("| %s | %d | %d | %d | %s | failed | | | |"
                  % (case + (LABEL[target],)))
        else:
            print("| %s | %d | %d | %d | %s | %.0f | %.3f | %.3f | %.2f |"
                  % (case + (LABEL[target],) + tuple(m)))
print()


def ratio(a, b, i):
    if a is None or b is None or not b[i]:
        return "n/a"
    return "x%.2f" % (a[i] / b[i])


print("| test | -P | -c | -d | nutcracker / direct req/s "
      "| chashd 2w / nutcracker req/s | chashd 1w / nutcracker CPU/req "
      "| chashd 1w / nutcracker p99 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for case in cases:
    nc, di = med(case, "nutcracker"), med(case, "direct")
    c1, c2 = med(case, "chashd-1w"), med(case, "chashd-2w")
    cols = (ratio(c2, nc, 0), ratio(c1, nc, 3), ratio(c1, nc, 2))
    print("| %s | %d | %d | %d | %s | %s | %s | %s |"
          % (case + (ratio(nc, di, 0),) + cols))
print()
print("Targets: chashd 2 workers >= x1.5 nutcracker's "
      "req/s; chashd 1 worker's CPU per request and p99 <= nutcracker's "
      "(ratios <= x1.00).")
EOF

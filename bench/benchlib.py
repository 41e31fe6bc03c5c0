# benchlib.py -- what bench/redis.sh and bench/memcache.sh share: the knobs
# from the environment, the processes they start (and always stop), the
# proxies' pool, nutcracker and chashd with 1 and 2 workers, the sizes of
# the runs, the interleaved rounds and the tables of medians and ratios;
# and what bench/tcp.sh, redis.sh and http.sh share for BASE=: the table
# "after / before" of one chashd build against another, with its verdict.
# Standard library only; each script imports it from $BENCH_DIR.
#
# SPDX-License-Identifier: BSD-2-Clause
import atexit, os, signal, socket, statistics, subprocess, sys, tempfile
import time

ROUNDS = int(os.environ.get("ROUNDS", "3"))
REQUESTS = int(os.environ.get("REQUESTS", "30000"))
DURATION = float(os.environ.get("DURATION", "0.6"))
KEYSPACE = int(os.environ.get("KEYSPACE", "100000"))
THREADS = int(os.environ.get("THREADS", "1"))
PIN = os.environ.get("PIN", "0") == "1" and os.cpu_count() >= 2
HZ = os.sysconf("SC_CLK_TCK")

ORDER = ["direct", "nutcracker", "chashd-1w", "chashd-2w"]
LABEL = {"nutcracker": "nutcracker 0.5.0", "chashd-1w": "chashd 1 worker",
         "chashd-2w": "chashd 2 workers"}     # + "direct", per script
# the chashd targets: name, workers, the CPUs they are pinned to
CHASHDS = (("chashd-1w", 1, "0"), ("chashd-2w", 2, "0,1"))


def knob(script, name, default, least, kind=None):
    """The environment knob <name> of bench/<script> as a number of
    <kind> (default's type), <default> when unset; anything else but a
    number >= <least> stops the bench with the knob's name."""
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        value = (kind or type(default))(text)
    except ValueError:
        value = None
    if value is None or value < least:
        sys.exit("bench/%s: %s=%r: want a number >= %s"
                 % (script, name, text, least))
    return value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- a RESP client: populating members, DBSIZE, EXISTS ------------------
def encode(*args):
    """A RESP command of <args> (bytes, or anything str() makes text)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A blocking RESP connection that reads one-line replies."""

    def __init__(self, port, timeout=60):
        self.s = socket.create_connection(("127.0.0.1", port),
                                          timeout=timeout)
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
        """n replies that are a status or an integer (an error raises)."""
        out = [self.line() for _ in range(n)]
        bad = [r for r in out if r[:1] not in (b"+", b":")]
        if bad:
            raise RuntimeError("error reply: %r" % bad[0])
        return out

    def pipeline(self, commands):
        """Send the encoded <commands> at once; their one-line replies."""
        self.s.sendall(b"".join(commands))
        return self.replies(len(commands))

    def call(self, *args):
        return self.pipeline([encode(*args)])[0]

    def integer(self, *args):
        return int(self.call(*args)[1:])

    def close(self):
        self.s.close()


def pinned(cpus, args):
    return ["taskset", "-c", cpus] + args if PIN else args


class Bench:
    """The processes of bench/<name>.sh and their directory: killed, waited
    for and removed at exit, on SIGINT and on SIGTERM."""

    def __init__(self, name):
        self.name = "bench/%s.sh" % name
        self.tmp = tempfile.mkdtemp(prefix="chash-bench-%s." % name)
        self.procs = []
        atexit.register(self.cleanup)
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)

    def cleanup(self, *_):
        # SIGTERM first: nginx's master stops its workers on it, and a
        # killed master leaves them running (and serving) behind it
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self.procs.clear()
        subprocess.run(["rm", "-rf", self.tmp], stdin=subprocess.DEVNULL)

    def on_signal(self, sig, _):
        self.cleanup()
        sys.exit(130)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def die(self, message):
        sys.exit("%s: %s" % (self.name, message))

    def start(self, args, log):
        with open(self.path(log), "wb") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def wait_port(self, port, proc, what):
        end = time.monotonic() + 10
        while time.monotonic() < end:
            if proc.poll() is not None:
                self.die("%s exited: %s" % (what, open(
                    self.path(what + ".log"), errors="replace").read()))
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.die("%s does not listen on %d" % (what, port))

    def print_log(self, name, who="chashd"):
        """Say how many lines the log <name> of a chashd (<who>) run at
        log_level warn has, and the first of them."""
        with open(self.path(name), errors="replace") as f:
            logged = f.read().splitlines()
        print("%s logged %d lines at log_level warn%s" % (
            who, len(logged), ":" if logged else "."))
        for line in logged[:8]:
            print("  " + line)

    def redis_server(self, name, extra=()):
        """A redis-server of no persistence in its own dir, on CPU 1 with
        PIN=1 (as the members of every bench): (port, process)."""
        port = free_port()
        d = self.path(name)
        os.mkdir(d)
        p = self.start(pinned("1", ["redis-server", "--port", str(port),
                                    "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", d,
                                    *extra, "--daemonize", "no"]),
                       name + ".log")
        self.wait_port(port, p, name)
        return port, p

    def nutcracker(self, pool):
        """nutcracker on CPU 0 (if pinned) with pool(port)'s text as its
        configuration; its port and process."""
        port = free_port()
        with open(self.path("nutcracker.yml"), "w") as f:
            f.write(pool(port))
        p = self.start(pinned("0", [
            "nutcracker", "-c", self.path("nutcracker.yml"),
            "-s", str(free_port()), "-a", "127.0.0.1",
            "-p", self.path("nutcracker.pid"),
            "-o", self.path("nutcracker.err")]), "nutcracker.log")
        self.wait_port(port, p, "nutcracker")
        return port, p

    def chashds(self, chashd, pool, want=ORDER, hint="", suffix=""):
        """chashd with 1 and 2 workers (those of them in <want>), each with
        pool(port)'s pool, checked by chashd -t first (a failure names
        <hint> too); {name + <suffix>: {"port", "pid"}}. A <suffix> starts
        a second build's twins of the same targets (bench/redis.sh's
        BASE=: "chashd-1w-before" runs what "chashd-1w" runs)."""
        out = {}
        for name, workers, cpus in CHASHDS:
            if name not in want:
                continue
            name += suffix
            port = free_port()
            conf = self.path(name + ".yml")
            with open(conf, "w") as f:
                f.write("global:\n  admin: off\n  workers: %d\n"
                        "  log_level: warn\n" % workers + pool(port))
            t = subprocess.run([chashd, "-t", "-c", conf],
                               capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            if t.returncode != 0:
                self.die("chashd -t: " + (t.stdout + t.stderr).strip() +
                         ("\n" + hint if hint else ""))
            p = self.start(pinned(cpus, [chashd, "-c", conf]), name + ".log")
            self.wait_port(port, p, name)
            out[name] = {"port": port, "pid": p.pid}
        return out


def start_chashd(bench, chashd, name, workers, cpus, pool):
    """One more chashd target <name> (<workers> on <cpus>) with pool(port)'s
    pool: {"port", "pid"}."""
    port = free_port()
    conf = bench.path(name + ".yml")
    with open(conf, "w") as f:
        f.write("global:\n  admin: off\n  workers: %d\n"
                "  log_level: warn\n" % workers + pool(port))
    p = bench.start(pinned(cpus, [chashd, "-c", conf]), name + ".log")
    bench.wait_port(port, p, name)
    return {"port": port, "pid": p.pid}


def pool_text(port, members, kind, redis=False):
    """The pool both proxies run: fnv1a_64 + ketama, server_connections 1,
    preconnect, no auto-eject; <members> ports named <kind>-1, -2, ..."""
    lines = ["bench:", "  listen: 127.0.0.1:%d" % port] + \
        (["  redis: true"] if redis else []) + \
        ["  hash: fnv1a_64", "  distribution: ketama",
         "  server_connections: 1", "  preconnect: true",
         "  auto_eject_hosts: false", "  timeout: 10000", "  servers:"]
    for i, mport in enumerate(members):
        lines.append("    - 127.0.0.1:%d:1 %s-%d" % (mport, kind, i + 1))
    return "\n".join(lines) + "\n"


def stat_cpu_seconds(pid):
    """User + system time of process <pid> from /proc/PID/stat (in ticks
    of 1/HZ s)."""
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / HZ


# ---- the cases and their results ----------------------------------------
def make_cases(tests, big=None):
    """(test, P, c, d) for d 16 and 4096 (only the tests in <big>, if given,
    at 4096), P 1 and 16, c 50 and 500."""
    cases = []
    for d in (16, 4096):
        for test in tests:
            if d != 16 and big is not None and test not in big:
                continue
            for P in (1, 16):
                for c in (50, 500):
                    cases.append((test, P, c, d))
    return cases


class Results:
    """(case, target) -> [(rps, p50, p99, cpu_us)], one per round."""

    def __init__(self):
        self.rows = {}

    def add(self, case, target, row):
        self.rows.setdefault((case, target), []).append(tuple(row[:4]))

    def size(self, case, target, multi, least=2000):
        """-n of the next run: REQUESTS (x8 pipelined, /2 for a multi-key
        test) in the first round, then the median req/s so far x
        DURATION; at least <least>, at most 5000000."""
        P = case[1]
        past = [r[0] for r in self.rows.get((case, target), [])]
        if past:
            n = int(statistics.median(past) * DURATION)
        else:
            n = REQUESTS * (8 if P > 1 else 1) // (2 if multi else 1)
        return max(least, min(n, 5000000))

    def med(self, case, target):
        rows = self.rows.get((case, target))
        if not rows:
            return None
        return [statistics.median(r[i] for r in rows) for i in range(4)]


# ---- the run -------------------------------------------------------------
def settings(client):
    """The header's line of the settings and the machine."""
    return ("server_connections 1; %d rounds, medians; -r %d, %d %s "
            "thread(s), pinned: %s; %d cores, load average %s"
            % (ROUNDS, KEYSPACE, THREADS, client, "yes" if PIN else "no",
               os.cpu_count(),
               " ".join(open("/proc/loadavg").read().split()[:3])))


def rounds(cases, present, prepare, run, note=""):
    """ROUNDS interleaved rounds: for each value size, prepare(rnd, d),
    then every case of that size on every target, the targets' order
    rotated by one each round. run(case, target) gives (rps, p50, p99,
    cpu_us, more...) or None; <note> formats the more."""
    t_start = time.monotonic()
    for rnd in range(1, ROUNDS + 1):
        for d in (16, 4096):
            prepare(rnd, d)
            k = (rnd - 1) % len(present)
            rot = present[k:] + present[:k]
            for case in [c for c in cases if c[3] == d]:
                for target in rot:
                    got = run(case, target)
                    if got:
                        print("  round %d %-10s %-6s -P %-2d -c %-3d -d %-4d "
                              "%9.0f req/s p50 %.3f p99 %.3f ms cpu %.2f "
                              "us/req" % ((rnd, target) + case +
                                          tuple(got[:4])) +
                              (note % tuple(got[4:]) if note else ""),
                              flush=True)
    print("(%.0f s)" % (time.monotonic() - t_start))
    print()


def shares(kind, counts):
    """<kind>-1 n (x%), ... of the keys per member."""
    total = sum(counts) or 1
    return ", ".join("%s-%d %d (%.1f%%)" % (kind, i + 1, n, 100.0 * n / total)
                     for i, n in enumerate(counts))


def print_table(results, cases, present, label):
    print("| test | -P | -c | -d | target | req/s | p50 ms | p99 ms "
          "| CPU us/req |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for case in cases:
        for target in present:
            m = results.med(case, target)
            if m is None:
                print("| %s | %d | %d | %d | %s | failed | | | |"
                      % (case + (label[target],)))
            else:
                print("| %s | %d | %d | %d | %s | %.0f | %.3f | %.3f | %.2f |"
                      % (case + (label[target],) + tuple(m)))
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


def print_ratios(results, cases, want=ORDER, judge=False):
    """The ratios of the medians per case and the targets. judge: each
    ratio with a target also MET or MISSED (a failed run: MISSED), and
    how many lines met it."""
    score = {r[0]: [0, 0] for r in RATIOS if r[4]}   # met, measured

    def cell(case, rt):
        title, num, den, i, goal, how = rt
        goal = goal if judge else None
        a, b = results.med(case, num), results.med(case, den)
        if num not in want or den not in want:
            return "not run"
        if goal is not None:
            score[title][1] += 1
        if a is None or b is None or not b[i]:
            return "n/a" if goal is None else "failed: MISSED"
        x = a[i] / b[i]
        if goal is None:
            return "x%.2f" % x
        met = x >= goal if how == ">=" else x <= goal
        score[title][0] += met
        return "x%.2f %s" % (x, "MET" if met else "MISSED")

    print("| test | -P | -c | -d | " + " | ".join(r[0] for r in RATIOS) +
          " |")
    print("|---|---:|---:|---:|" + "---:|" * len(RATIOS))
    for case in cases:
        print("| %s | %d | %d | %d | " % case +
              " | ".join(cell(case, rt) for rt in RATIOS) + " |")
    print()
    print("Targets: chashd 2 workers >= x1.5 nutcracker's req/s; chashd 1 "
          "worker's CPU per request and p99 <= nutcracker's (ratios <= "
          "x1.00).")
    if judge:
        for title, (met, measured) in score.items():
            print("  %s: %s" % (title, "%d of %d lines MET" % (met, measured)
                                if measured else "not measured"))


# ---- after / before: BASE= in bench/tcp.sh, redis.sh, http.sh -----------
# The bar for a change that must cost nothing: req/s within 3%
# (after / before >= x0.97) and CPU per request within 3% (<= x1.03), in
# every case. p99 (and tcp.sh's machine CPU) are shown with the same 3%
# rule but are not part of the bar: a p99 from a 2-core machine shared
# with the load generator swings by far more than 3% between rounds.
# (title, index in a row's figures, better when, limit, part of the bar)
AB_METRICS = [("req/s", 0, ">=", 0.97, True),
              ("CPU per request", 1, "<=", 1.03, True),
              ("p99", 2, "<=", 1.03, False),
              ("machine CPU per request", 3, "<=", 1.03, False)]


def ab_ratio(after, before, i):
    """after[i] / before[i]; None where either is missing (a failed run,
    a figure that a case has not); 0 over 0 is x1."""
    if after is None or before is None or i >= len(after):
        return None
    a, b = after[i], before[i]
    if a is None or b is None:
        return None
    if not b:
        return 1.0 if not a else None
    return a / b


def ab_judge(row, metric):
    """(ratio, verdict) of <metric> in <row>: verdict "ok", "tick" (over
    the limit, but CPU figures closer than the row's resolution: one
    clock tick over each of the two runs, the finest /proc tells apart,
    so no evidence), "over", "failed" (a run failed) or None (a figure
    the case has not)."""
    case, a, b = row[:3]
    resolution = row[3] if len(row) > 3 else None
    title, i, how, limit, judged = metric
    x = ab_ratio(a, b, i)
    if x is None:
        return None, ("failed" if a is None or b is None else None)
    if (x >= limit) if how == ">=" else (x <= limit):
        return x, "ok"
    if i == 1 and resolution and abs(a[i] - b[i]) < resolution:
        return x, "tick"
    return x, "over"


def print_after_before(rows, after, before, columns=None):
    """The table "after / before" and its verdict. <rows> are (case, a, b
    [, resolution]): a and b the medians (throughput, CPU per request,
    p99[, machine CPU per request]) of chashd <after> and chashd <before>
    in that case, a None figure where the case has none, a None a or b
    for a run that failed; resolution, if given, the CPU per request that
    one clock tick over a's run and one over b's make: CPU figures closer
    than that are the clock's noise. <columns>: the titles of the
    figures. Then one
    line per metric: every case within 3%, or which cases are not (a
    failed run is not), and the bar: req/s and CPU per request."""
    n = max((len(r) for row in rows for r in row[1:3] if r), default=3)
    metrics = AB_METRICS[:n]
    columns = columns or [m[0] for m in metrics]
    print("after / before, per case (after = %s, before = %s): the ratios "
          "of the medians" % (after, before))
    print()
    print("| case | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(metrics))
    for row in rows:
        cells = []
        for m in metrics:
            x, verdict = ab_judge(row, m)
            cells.append("x%.3f%s" % (x, " (< 2 ticks)"
                                      if verdict == "tick" else "")
                         if x is not None else verdict or "n/a")
        print("| %s | %s |" % (row[0], " | ".join(cells)))
    print()
    bar, by_tick = True, 0
    for m, column in zip(metrics, columns):
        title, i, how, limit, judged = m
        got = {"ok": [], "tick": [], "over": [], "failed": []}
        for row in rows:
            x, verdict = ab_judge(row, m)
            if verdict:
                got[verdict].append("%s x%.3f" % (row[0], x)
                                    if x is not None else row[0])
        measured = sum(len(v) for v in got.values())
        ratios = [x for x in (ab_judge(row, m)[0] for row in rows)
                  if x is not None]
        span = ("; x%.3f..x%.3f" % (min(ratios), max(ratios))
                if ratios else "")
        line = "%s (after / before %s x%.2f%s): " % (
            column, how, limit, "" if judged else "; shown, not in the bar")
        bad = got["over"] + ["%s failed" % c for c in got["failed"]]
        ticks = ("; closer than a clock tick per run, below what /proc "
                 "resolves: %s" % "; ".join(got["tick"])
                 if got["tick"] else "")
        if not measured:
            line += "not measured"
        elif not bad:
            line += "every case within 3%%%s (%d of %d%s%s)" % (
                " or the clock's resolution" if ticks else "", measured,
                measured, span, ticks)
        else:
            line += "NOT within 3%% in %d of %d cases%s: %s%s" % (
                len(bad), measured, span, "; ".join(bad), ticks)
            bar = bar and not judged
        by_tick += len(got["tick"]) if judged else 0
        print(line)
    print("no regression (req/s and CPU per request within 3%% in every "
          "case): %s%s" % ("MET" if bar else "MISSED", " (%d CPU figures "
                           "only within the clock's resolution)" % by_tick
                           if bar and by_tick else ""))
    print()

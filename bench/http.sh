#!/bin/sh
# http.sh -- chashd's http mode against HAProxy (mode http, balance
# hdr(X-User), hash-type consistent) and nginx (hash $http_x_user
# consistent, keepalive 32 to the members), routing on a header with many
# distinct values (wrk draws X-User from 100000 users per request). The
# same 4 nginx members (a 2-byte and a 64 KB response), 2 worker threads
# for each proxy, wrk with 2 threads, on loopback. Cases: keep-alive and
# `Connection: close`, 50 and 500 connections, small and 64 KB responses.
# Prints req/s, p99 and the proxy's CPU time per request (its process and
# its children, from /proc: robust to the rest of the machine's load) for
# each, and the ratios against HAProxy and nginx. No proxy adds
# forwarding headers (HAProxy's and nginx's defaults; chashd's
# forward_headers: off), so each moves the same bytes.
#
#   B=build bench/http.sh   (DURATION=3 ROUNDS=3 to change)
#
#   BASE=<build dir>  its chashd ("chashd before"; B's is "after") runs as
#                     one more proxy with the same config, in the same
#                     rotated rounds; then a table "after / before" per
#                     case (req/s, CPU per request, p99) and a verdict per
#                     metric: within 3% (req/s >= x0.97, CPU per request
#                     <= x1.03) in every case, or which cases not
#   ONLY_CHASHD=1     no HAProxy, no nginx proxy (nor the ratios against
#                     them): only chashd (and chashd before), for a
#                     shorter BASE= run
#
#   B=build-new BASE=build-old ONLY_CHASHD=1 bench/http.sh
#
# The proxies, the members and wrk share the machine's cores: ROUNDS
# interleaved rounds (the order rotates), and the medians are reported.
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
    echo "bench/http.sh: ONLY_CHASHD=$ONLY_CHASHD: want 0 or 1" >&2
    exit 1
    ;;
esac
CHASHD_BEFORE=
if [ -n "$BASE" ]; then
    [ -d "$BASE" ] || { echo "bench/http.sh: BASE=$BASE: not a directory" \
                             "(want the build dir of the chashd before)" >&2
                        exit 1; }
    CHASHD_BEFORE=$(cd "$BASE" && pwd)/chashd
fi
PEERS=haproxy
[ "$ONLY_CHASHD" = 0 ] || PEERS=

# nginx serves the members even with ONLY_CHASHD=1
for tool in nginx $PEERS wrk "$CHASHD" ${CHASHD_BEFORE:+"$CHASHD_BEFORE"}; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/http.sh: $tool is missing (scripts/deps installs the" \
             "peers; make builds chashd)" >&2
        exit 1
    fi
done

export CHASHD CHASHD_BEFORE ONLY_CHASHD BENCH_DIR
exec $PY - <<'EOF'
import os, re, statistics, subprocess, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.environ["BENCH_DIR"])
import benchlib
from benchlib import free_port

CHASHD = os.environ["CHASHD"]
CHASHD_BEFORE = os.environ["CHASHD_BEFORE"]     # "": no BASE=
ONLY_CHASHD = os.environ["ONLY_CHASHD"] == "1"
DURATION = benchlib.knob("http.sh", "DURATION", 3, 1)
ROUNDS = benchlib.knob("http.sh", "ROUNDS", 3, 1)
WORKERS = 2
bench = benchlib.Bench("http")

# ---- the members: one nginx, four servers --------------------------------
with open(bench.path("big"), "wb") as f:
    f.write(b"x" * 65536)
# nginx's workers run as nobody: they must read the body and its folder
os.chmod(bench.tmp, 0o755)
os.chmod(bench.path("big"), 0o644)
members = [free_port() for _ in range(4)]
conf = ["worker_processes 1; daemon off; pid %s;" % bench.path("m.pid"),
        "error_log %s; events { worker_connections 8192; }"
        % bench.path("m.err"),
        "http { access_log off; keepalive_requests 1000000;"]
for p in members:
    conf.append("  server { listen 127.0.0.1:%d reuseport;"
                " location = /small { return 200 \"ok\"; }"
                " location = /big { alias %s; } }" % (p, bench.path("big")))
conf.append("}")
with open(bench.path("members.conf"), "w") as f:
    f.write("\n".join(conf) + "\n")
m = bench.start(["nginx", "-p", bench.tmp, "-c", bench.path("members.conf"),
                 "-e", bench.path("m.err")], "members.log")
for p in members:
    bench.wait_port(p, m, "members")

# ---- the three proxies (and chashd before) ------------------------------
# NAMES: who runs, in the order that rotates by one each round; with
# BASE=, chashd before right after chashd: the two meet the same machine
NAMES = ["chashd"] + (["chashd-before"] if CHASHD_BEFORE else []) + \
    ([] if ONLY_CHASHD else ["haproxy", "nginx"])
ports = {name: free_port() for name in NAMES}


def chashd_conf(name):
    # chashd and chashd before: the same config but for the port
    with open(bench.path(name + ".yml"), "w") as f:
        f.write("global:\n  admin: off\n  workers: %d\n  log_level: warn\n"
                "web:\n  listen: 127.0.0.1:%d\n  mode: http\n"
                "  hash_key: header:X-User\n  distribution: ring\n"
                "  backlog: 4096\n  forward_headers: off\n  timeout: 30s\n"
                "  servers:\n" % (WORKERS, ports[name]) +
                "".join("    - 127.0.0.1:%d:1 be-%d\n" % (p, i + 1)
                        for i, p in enumerate(members)))
    return bench.path(name + ".yml")


procs = {"chashd": bench.start([CHASHD, "-c", chashd_conf("chashd")],
                               "chashd.log")}
if CHASHD_BEFORE:
    procs["chashd-before"] = bench.start(
        [CHASHD_BEFORE, "-c", chashd_conf("chashd-before")],
        "chashd-before.log")
if not ONLY_CHASHD:
    with open(bench.path("haproxy.cfg"), "w") as f:
        f.write("global\n  nbthread %d\n  maxconn 8000\n"
                "defaults\n  mode http\n  timeout connect 1s\n"
                "  timeout client 30s\n  timeout server 30s\n"
                "frontend fe\n  bind 127.0.0.1:%d\n  default_backend be\n"
                "backend be\n  balance hdr(X-User)\n  hash-type consistent\n"
                % (WORKERS, ports["haproxy"]) +
                "".join("  server be-%d 127.0.0.1:%d\n" % (i + 1, p)
                        for i, p in enumerate(members)))
    with open(bench.path("nginx.conf"), "w") as f:
        f.write("worker_processes %d; daemon off; pid %s;\n"
                "error_log %s; events { worker_connections 16384; }\n"
                "http { access_log off; keepalive_requests 1000000;\n"
                "  upstream be { hash $http_x_user consistent;\n"
                % (WORKERS, bench.path("p.pid"), bench.path("p.err")) +
                "".join("    server 127.0.0.1:%d;\n" % p for p in members) +
                "    keepalive 32; }\n"
                "  server { listen 127.0.0.1:%d reuseport; location / {\n"
                "    proxy_pass http://be; proxy_http_version 1.1;\n"
                "    proxy_set_header Connection \"\"; } } }\n"
                % ports["nginx"])
    procs["haproxy"] = bench.start(["haproxy", "-db", "-f",
                                   bench.path("haproxy.cfg")],
                                  "haproxy.log")
    procs["nginx"] = bench.start(["nginx", "-p", bench.tmp, "-c",
                                 bench.path("nginx.conf"), "-e",
                                 bench.path("p.err")], "nginx.log")
for name, p in procs.items():
    bench.wait_port(ports[name], p, name)

with open(bench.path("users.lua"), "w") as f:
    f.write('math.randomseed(os.time() + os.clock() * 1000000)\n'
            'request = function()\n'
            '  return wrk.format(nil, nil, {["X-User"] = "user-" ..\n'
            '                               math.random(100000)})\n'
            'end\n')


def cpu_seconds(pid):
    """User + system time of <pid> and its children (nginx's workers)."""
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                v = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(d) == pid or int(v[1]) == pid:
            total += (int(v[11]) + int(v[12])) / benchlib.HZ
    return total


def run(name, conns, path, close):
    args = ["wrk", "-t2", "-c%d" % conns, "-d%ds" % DURATION, "--latency",
            "-s", bench.path("users.lua")]
    if close:
        args += ["-H", "Connection: close"]
    pid = procs[name].pid
    c0 = cpu_seconds(pid)
    out = subprocess.run(args + ["http://127.0.0.1:%d%s" % (ports[name],
                                                             path)],
                         capture_output=True, text=True, timeout=DURATION + 60)
    c1 = cpu_seconds(pid)
    t = out.stdout
    rps = re.search(r"Requests/sec:\s+([0-9.]+)", t)
    n = re.search(r"(\d+) requests in", t)
    p99 = re.search(r"^\s+99%\s+([0-9.]+)(us|ms|s)\b", t, re.M)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    if not rps or not n or not p99:
        bench.die("wrk against %s: %s%s" % (name, t, out.stderr))
    if bad:
        # an error page is not the response measured: stop, say why
        bench.die("wrk against %s %s: %s non-2xx responses (members' log: "
                  "%s)" % (name, path, bad.group(1), bench.path("m.err")))
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    return (float(rps.group(1)), float(p99.group(1)) * scale,
            (c1 - c0) * 1e6 / max(1, int(n.group(1))))


CASES = [(conns, path, close) for close in (False, True)
         for conns in (50, 500) for path in ("/small", "/big")]
LABEL = {"chashd": "chashd", "chashd-before": "chashd before",
         "haproxy": "HAProxy 2.6", "nginx": "nginx 1.22"}
results = {}
print("%s: http, %d workers each, 4 nginx members, "
      "wrk -t2 -d%ds, X-User from 100000 values, on loopback (%d cores), "
      "%d interleaved rounds, medians (load average now: %s)"
      % (" vs ".join(LABEL[name].split()[0] if name in ("haproxy", "nginx")
                     else LABEL[name] for name in NAMES),
         WORKERS, DURATION, os.cpu_count(), ROUNDS,
         " ".join(open("/proc/loadavg").read().split()[:3])))
if CHASHD_BEFORE:
    print("chashd (after): %s; chashd before: %s" % (CHASHD, CHASHD_BEFORE))
print()
for r in range(ROUNDS):
    k = r % len(NAMES)
    order = NAMES[k:] + NAMES[:k]
    for case in CASES:
        for name in order:
            subprocess.run(["wrk", "-t1", "-c4", "-d1s", "-s",
                            bench.path("users.lua"),
                            "http://127.0.0.1:%d/small" % ports[name]],
                           capture_output=True, timeout=60)
            results.setdefault((case, name), []).append(run(name, *case))
    print("  round %d done" % (r + 1), flush=True)
print()
print("| case | proxy | req/s | p99 (ms) | CPU us/req |")
print("|---|---|---:|---:|---:|")
med = {}
for case in CASES:
    conns, path, close = case
    label = "%s, %d conns, %s" % ("close" if close else "keep-alive", conns,
                                  "64 KB" if path == "/big" else "2 B")
    for name in NAMES:
        rows = results[(case, name)]
        m = [statistics.median(x[i] for x in rows) for i in range(3)]
        med[(case, name)] = m
        print("| %s | %s | %.0f | %.2f | %.1f |" % (label, LABEL[name], *m))
print()
if ONLY_CHASHD:
    print("ONLY_CHASHD=1: no HAProxy and no nginx proxy, no ratios against "
          "them.")
else:
    print("chashd / HAProxy and chashd / nginx, per case: req/s, p99, CPU "
          "per request (target against HAProxy: req/s >= 1.2, p99 and CPU "
          "<= 1)")
    for case in CASES:
        conns, path, close = case
        label = "%-10s %3d conns %-5s" % ("close" if close else "keep-alive",
                                          conns, "64 KB" if path == "/big"
                                          else "2 B")
        c = med[(case, "chashd")]
        cells = []
        for other in ("haproxy", "nginx"):
            o = med[(case, other)]
            cells.append("%s x%.2f, p99 x%.2f, CPU x%.2f" % (
                other, c[0] / o[0] if o[0] else 0, c[1] / o[1] if o[1] else 0,
                c[2] / o[2] if o[2] else 0))
        print("  %s  %s" % (label, "; ".join(cells)))
bench.print_log("chashd.log")
if CHASHD_BEFORE:
    bench.print_log("chashd-before.log", "chashd before")
    # after / before, per case; a CPU time is read in clock ticks: one
    # tick over a run is 1/HZ s over the run's requests, the after's and
    # the before's make the resolution
    rows = []
    for case in CASES:
        conns, path, close = case
        a, b = med[(case, "chashd")], med[(case, "chashd-before")]
        rows.append(("%s, %d conns, %s" % (
            "close" if close else "keep-alive", conns,
            "64 KB" if path == "/big" else "2 B"),
            (a[0], a[2], a[1]), (b[0], b[2], b[1]),
            sum(1e6 / benchlib.HZ / max(1.0, m[0] * DURATION)
                for m in (a, b))))
    print()
    benchlib.print_after_before(rows, CHASHD, CHASHD_BEFORE,
                                ["req/s", "CPU us/req", "p99"])
EOF

#!/bin/sh
# tcp.sh -- chashd's tcp mode, with the kernel's fast path (fast_path:
# sockmap) and without it (off), against HAProxy (mode tcp, balance
# source, hash-type consistent) and nginx stream (hash $remote_addr
# consistent): the same 4 nginx backends, 2 worker threads each, one run on
# loopback, load from wrk. Prints keep-alive requests/s, p99 latency and
# new connections/s for each, the proxy's own CPU time per request (robust
# to other load on the machine) and the whole machine's (which counts the
# kernel's work wherever it ran: the fast path moves bytes in kworkers and
# softirqs, not in chashd), the throughput of one large transfer (curl,
# TRANSFER_MB, 1024 by default), and the ratios against HAProxy and nginx.
#
#   B=build bench/tcp.sh   (DURATION=5s ROUNDS=3 CONNS=50 THREADS=2
#                           TRANSFER_MB=1024 to change)
#
#   BASE=<build dir>  its chashd ("chashd before"; B's is "after") runs as
#                     a twin of each chashd (fast_path sockmap and off),
#                     the same config but for the port, right after its
#                     own in the same rotated rounds; then a table "after /
#                     before" per case (keep-alive, close, the transfer:
#                     req/s or MB/s, CPU per request, p99, machine CPU per
#                     request) and a verdict per metric: within 3% (req/s
#                     >= x0.97, CPU per request <= x1.03) in every case, or
#                     which cases not. Both variants get a twin: a round
#                     runs 6 proxies instead of 4 (x1.5 the time), or 4
#                     with ONLY_CHASHD=1 (the time of a run without BASE=)
#   ONLY_CHASHD=1     no HAProxy, no nginx stream proxy (nor the ratios
#                     against them): only chashd (and chashd before), for a
#                     shorter BASE= run; nginx still serves the backends
#
#   B=build-new BASE=build-old ONLY_CHASHD=1 bench/tcp.sh
#
# The proxies, the backends and wrk share the machine's cores, so a run is
# noisy: ROUNDS interleaved rounds, and the medians are reported.
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
TRANSFER_MB=${TRANSFER_MB:-1024}
WORKERS=2
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd
NGX_STREAM=/usr/lib/nginx/modules/ngx_stream_module.so
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
BASE=${BASE:-}
ONLY_CHASHD=${ONLY_CHASHD:-0}
case $ONLY_CHASHD in
0 | 1) ;;
*)
    echo "bench/tcp.sh: ONLY_CHASHD=$ONLY_CHASHD: want 0 or 1" >&2
    exit 1
    ;;
esac
CHASHD_BEFORE=
if [ -n "$BASE" ]; then
    [ -d "$BASE" ] || { echo "bench/tcp.sh: BASE=$BASE: not a directory" \
                             "(want the build dir of the chashd before)" >&2
                        exit 1; }
    CHASHD_BEFORE=$(cd "$BASE" && pwd)/chashd
fi
PEERS=haproxy
[ "$ONLY_CHASHD" = 0 ] || PEERS=

# nginx serves the backends even with ONLY_CHASHD=1
for tool in nginx $PEERS wrk curl "$CHASHD" \
    ${CHASHD_BEFORE:+"$CHASHD_BEFORE"}; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/tcp.sh: $tool is missing (scripts/deps installs the" \
             "peers; make builds chashd)" >&2
        exit 1
    fi
done
[ -f "$NGX_STREAM" ] || { echo "bench/tcp.sh: $NGX_STREAM missing" \
                               "(libnginx-mod-stream)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/chash-bench-tcp.XXXXXX)
pids=""
cleanup() {
    set +e
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill $pids 2>/dev/null
        # shellcheck disable=SC2086
        wait $pids 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    $PY - "$1" <<'EOF'
import socket, sys, time
port = int(sys.argv[1]); end = time.monotonic() + 10
while time.monotonic() < end:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close(); sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit(1)
EOF
}

# ---- the 4 backends: one nginx, four `return 200 "ok"` servers -----------
# (and /big: a TRANSFER_MB file, sparse, served from the page cache)
truncate -s "${TRANSFER_MB}M" "$TMP/big"
chmod 755 "$TMP"          # nginx's workers are not root
chmod 644 "$TMP/big"
BPORTS=""
for i in 1 2 3 4; do BPORTS="$BPORTS $(free_port)"; done
{
    echo "worker_processes 1; daemon off; pid $TMP/backends.pid;"
    echo "error_log $TMP/backends.err; events { worker_connections 4096; }"
    echo "http { access_log off; keepalive_requests 1000000;"
    for p in $BPORTS; do
        echo "  server { listen 127.0.0.1:$p reuseport; location / {" \
             "return 200 \"ok\"; } location /big { alias $TMP/big; } }"
    done
    echo "}"
} >"$TMP/backends.conf"
nginx -p "$TMP" -c "$TMP/backends.conf" -e "$TMP/backends.err" &
pids="$pids $!"
for p in $BPORTS; do wait_port "$p"; done

# ---- the four proxies (and the two chashd before) ----------------------------
P_CHASHD=$(free_port)
P_CHASHD_OFF=$(free_port)
P_HAPROXY=$(free_port)
P_NGINX=$(free_port)
P_CHASHD_BEFORE=$(free_port)
P_CHASHD_OFF_BEFORE=$(free_port)

{
    printf 'global:\n  admin: off\n  workers: %s\n  log_level: warn\n' "$WORKERS"
    printf 'web:\n  listen: 127.0.0.1:%s\n  mode: tcp\n' "$P_CHASHD"
    printf '  fast_path: sockmap\n'
    printf '  hash_key: source_ip\n  distribution: ring\n  backlog: 4096\n'
    printf '  servers:\n'
    n=1
    for p in $BPORTS; do
        printf '    - 127.0.0.1:%s:1 be-%s\n' "$p" "$n"
        n=$((n + 1))
    done
} >"$TMP/chashd.yml"
sed -e "s/127.0.0.1:$P_CHASHD\$/127.0.0.1:$P_CHASHD_OFF/" \
    -e 's/^  fast_path: sockmap$/  fast_path: off/' "$TMP/chashd.yml" \
    >"$TMP/chashd-off.yml"
# chashd before: the same two configs but for the port
sed -e "s/127.0.0.1:$P_CHASHD\$/127.0.0.1:$P_CHASHD_BEFORE/" \
    "$TMP/chashd.yml" >"$TMP/chashd-before.yml"
sed -e "s/127.0.0.1:$P_CHASHD_OFF\$/127.0.0.1:$P_CHASHD_OFF_BEFORE/" \
    "$TMP/chashd-off.yml" >"$TMP/chashd-off-before.yml"

{
    echo "global"
    echo "  nbthread $WORKERS"
    echo "  maxconn 8000"
    echo "defaults"
    echo "  mode tcp"
    echo "  timeout connect 1s"
    echo "  timeout client 30s"
    echo "  timeout server 30s"
    echo "frontend fe"
    echo "  bind 127.0.0.1:$P_HAPROXY"
    echo "  default_backend be"
    echo "backend be"
    echo "  balance source"
    echo "  hash-type consistent"
    n=1
    for p in $BPORTS; do
        echo "  server be-$n 127.0.0.1:$p"
        n=$((n + 1))
    done
} >"$TMP/haproxy.cfg"

{
    echo "load_module $NGX_STREAM;"
    echo "worker_processes $WORKERS; daemon off; pid $TMP/stream.pid;"
    echo "error_log $TMP/stream.err; events { worker_connections 16384; }"
    echo "stream { upstream be { hash \$remote_addr consistent;"
    for p in $BPORTS; do echo "  server 127.0.0.1:$p;"; done
    echo "} server { listen 127.0.0.1:$P_NGINX reuseport; proxy_pass be; } }"
} >"$TMP/stream.conf"

# NAMES: who runs, in the order that rotates by one each round; a chashd
# before right after its own: the two meet the same machine
NAMES="chashd chashd-off"
[ -z "$CHASHD_BEFORE" ] || NAMES="chashd chashd-before chashd-off \
chashd-off-before"
[ "$ONLY_CHASHD" = 1 ] || NAMES="$NAMES haproxy nginx"
PID_CHASHD_BEFORE=
PID_CHASHD_OFF_BEFORE=
PID_HAPROXY=
PID_NGINX=
"$CHASHD" -c "$TMP/chashd.yml" 2>"$TMP/chashd.err" &
PID_CHASHD=$!
"$CHASHD" -c "$TMP/chashd-off.yml" 2>"$TMP/chashd-off.err" &
PID_CHASHD_OFF=$!
pids="$pids $PID_CHASHD $PID_CHASHD_OFF"
if [ -n "$CHASHD_BEFORE" ]; then
    "$CHASHD_BEFORE" -c "$TMP/chashd-before.yml" 2>"$TMP/chashd-before.err" &
    PID_CHASHD_BEFORE=$!
    "$CHASHD_BEFORE" -c "$TMP/chashd-off-before.yml" \
        2>"$TMP/chashd-off-before.err" &
    PID_CHASHD_OFF_BEFORE=$!
    pids="$pids $PID_CHASHD_BEFORE $PID_CHASHD_OFF_BEFORE"
fi
if [ "$ONLY_CHASHD" = 0 ]; then
    haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.err" &
    PID_HAPROXY=$!
    nginx -p "$TMP" -c "$TMP/stream.conf" -e "$TMP/stream.err" &
    PID_NGINX=$!
    pids="$pids $PID_HAPROXY $PID_NGINX"
fi
# the port and the pid of proxy <name>, in $port and $pid
proxy() {
    case $1 in
    chashd) port=$P_CHASHD pid=$PID_CHASHD ;;
    chashd-off) port=$P_CHASHD_OFF pid=$PID_CHASHD_OFF ;;
    chashd-before) port=$P_CHASHD_BEFORE pid=$PID_CHASHD_BEFORE ;;
    chashd-off-before) port=$P_CHASHD_OFF_BEFORE pid=$PID_CHASHD_OFF_BEFORE ;;
    haproxy) port=$P_HAPROXY pid=$PID_HAPROXY ;;
    nginx) port=$P_NGINX pid=$PID_NGINX ;;
    esac
}
for name in $NAMES; do
    proxy "$name"
    wait_port "$port" || { echo "bench/tcp.sh: a proxy did not start" >&2;
                        cat "$TMP"/*.err >&2; exit 1; }
done

# ---- load -----------------------------------------------------------------------
# CPU time (ms) of process <pid> and its children (nginx's workers).
cpu_ms() {
    $PY - "$1" <<'EOF'
import os, sys
root = sys.argv[1]; hz = os.sysconf("SC_CLK_TCK"); total = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if pid == root or f[1] == root:   # f[1]: ppid
        total += int(f[11]) + int(f[12])   # utime + stime
print(total * 1000 // hz)
EOF
}

# Busy CPU time (ms) of the whole machine: every process, the kernel's
# threads (the fast path's kworkers), interrupts.
machine_ms() {
    $PY - <<'EOF'
import os
f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
busy = sum(f[:8]) - f[3] - f[4]     # less idle and iowait
print(busy * 1000 // os.sysconf("SC_CLK_TCK"))
EOF
}

# wrk against <pid>'s port -> "rps p99_ms cpu_us_per_request
# machine_cpu_us_per_request"
run_wrk() {
    pid=$1
    shift
    c0=$(cpu_ms "$pid")
    m0=$(machine_ms)
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$@" >"$TMP/wrk.out" 2>&1
    m1=$(machine_ms)
    c1=$(cpu_ms "$pid")
    $PY - "$TMP/wrk.out" "$c0" "$c1" "$m0" "$m1" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
cpu = int(sys.argv[3]) - int(sys.argv[2])
mcpu = int(sys.argv[5]) - int(sys.argv[4])
rps = re.search(r"Requests/sec:\s+([0-9.]+)", t)
n = re.search(r"(\d+) requests in", t)
p99 = re.search(r"^\s+99%\s+([0-9.]+)(us|ms|s)\b", t, re.M)
err = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: .*", t)
if not rps or not p99 or not n:
    sys.stderr.write(t); print("0 0 0 0"); sys.exit()
scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
reqs = max(1, int(n.group(1)))
print(rps.group(1), "%.3f" % (float(p99.group(1)) * scale),
      "%.2f" % (cpu * 1000.0 / reqs), "%.2f" % (mcpu * 1000.0 / reqs))
if err: sys.stderr.write("  wrk: " + err.group(0) + "\n")
EOF
}

# One TRANSFER_MB download through <port> (<pid>'s) -> "MB/s cpu_ms
# machine_cpu_ms"
run_transfer() {
    pid=$1
    port=$2
    c0=$(cpu_ms "$pid")
    m0=$(machine_ms)
    r=$(curl -s -o /dev/null -w '%{size_download} %{speed_download}' \
        "http://127.0.0.1:$port/big") || r="0 0"
    m1=$(machine_ms)
    c1=$(cpu_ms "$pid")
    $PY - "$r" "$TRANSFER_MB" "$c0" "$c1" "$m0" "$m1" <<'EOF'
import sys
size, speed = (float(x) for x in sys.argv[1].split())
want = int(sys.argv[2]) * 1048576
if size != want:
    sys.stderr.write("  transfer: %d of %d bytes\n" % (size, want))
    speed = 0
c0, c1, m0, m1 = (int(x) for x in sys.argv[3:7])
print("%.0f %d %d" % (speed / 1048576, c1 - c0, m1 - m0))
EOF
}

if [ "$ONLY_CHASHD" = 1 ]; then
    printf 'chashd (fast_path sockmap and off)'
else
    printf 'chashd (fast_path sockmap and off) vs HAProxy vs nginx stream'
fi
[ -z "$CHASHD_BEFORE" ] || printf ' vs chashd before (both)'
echo ": tcp,"
[ -z "$CHASHD_BEFORE" ] || echo "(chashd after: $CHASHD; chashd before:" \
                                "$CHASHD_BEFORE)"
echo "$WORKERS workers each, 4 nginx backends, wrk -t$THREADS -c$CONNS -d$DURATION"
echo "on loopback ($(nproc) cores), one $TRANSFER_MB MB transfer (curl), $ROUNDS"
echo "interleaved rounds, medians (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
: >"$TMP/results"
round=1
while [ "$round" -le "$ROUNDS" ]; do
    # rotate who goes first: no proxy always meets a cold or warm machine
    # (round r starts at the r-th of NAMES)
    # shellcheck disable=SC2086
    set -- $NAMES
    k=$(((round - 1) % $#))
    while [ "$k" -gt 0 ]; do
        first=$1
        shift
        set -- "$@" "$first"
        k=$((k - 1))
    done
    for name in "$@"; do
        proxy "$name"
        # a short warm-up, then the measured runs
        wrk -t1 -c4 -d1s "http://127.0.0.1:$port/" >/dev/null 2>&1 || true
        ka=$(run_wrk "$pid" "http://127.0.0.1:$port/")
        cc=$(run_wrk "$pid" -H 'Connection: close' "http://127.0.0.1:$port/")
        tr=$(run_transfer "$pid" "$port")
        echo "$name $ka $cc $tr" >>"$TMP/results"
        echo "  round $round $name: keep-alive req/s, p99 ms, cpu us/req," \
             "machine cpu us/req: $ka; close: $cc; transfer MB/s, cpu ms," \
             "machine cpu ms: $tr"
    done
    round=$((round + 1))
done
echo

export BENCH_DIR CHASHD CHASHD_BEFORE NAMES DURATION
$PY - "$TMP/results" "$TRANSFER_MB" <<'EOF'
import os, re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *v = line.split()
    rows.setdefault(name, []).append([float(x) for x in v])
# columns: keep-alive rps, p99, cpu/req, machine cpu/req; the same with
# Connection: close; transfer MB/s, its cpu ms, machine cpu ms
med = {k: [statistics.median(r[i] for r in v) for i in range(11)]
       for k, v in rows.items()}
mb = int(sys.argv[2])
label = {"chashd": "chashd, fast_path sockmap",
         "chashd-off": "chashd, fast_path off", "haproxy": "HAProxy 2.6",
         "nginx": "nginx stream",
         "chashd-before": "chashd before, fast_path sockmap",
         "chashd-off-before": "chashd before, fast_path off"}
names = os.environ["NAMES"].split()
# the table's order: the chashds first, as without BASE=
table = [k for k in ("chashd", "chashd-off", "chashd-before",
                     "chashd-off-before", "haproxy", "nginx") if k in names]
print("| proxy | keep-alive req/s | p99 (ms) | CPU us/req | machine CPU "
      "us/req | new conns/s | CPU us/conn | machine CPU us/conn | "
      "%d MB transfer MB/s | its CPU ms | machine CPU ms |" % mb)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k in table:
    m = med[k]
    print("| %s | %.0f | %.2f | %.1f | %.1f | %.0f | %.1f | %.1f | %.0f | "
          "%.0f | %.0f |" % (label[k], m[0], m[1], m[2], m[3], m[4], m[6],
                             m[7], m[8], m[9], m[10]))
print()
def ratio(a, b):
    return a / b if b else float("nan")
if "haproxy" in names:
    for c in ("chashd", "chashd-off"):
        for k in ("haproxy", "nginx"):
            o, m = med[k], med[c]
            print("%s / %s: keep-alive req/s x%.2f, p99 x%.2f, new conns/s "
                  "x%.2f, transfer x%.2f; CPU per request x%.2f (machine "
                  "x%.2f), per connection x%.2f (machine x%.2f)"
                  % (label[c], label[k], ratio(m[0], o[0]), ratio(m[1], o[1]),
                     ratio(m[4], o[4]), ratio(m[8], o[8]), ratio(m[2], o[2]),
                     ratio(m[3], o[3]), ratio(m[6], o[6]), ratio(m[7], o[7])))
else:
    print("ONLY_CHASHD=1: no HAProxy and no nginx stream proxy, no ratios "
          "against them.")
if "chashd-before" in names:
    # after / before per case: (throughput, CPU per request, p99, machine
    # CPU per request) and the resolution of the CPU figures, one clock
    # tick over the after's run and one over the before's (the fast
    # path's chashd spends a few ticks a keep-alive run: its ratio there
    # is the clock's, not chashd's)
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.environ["BENCH_DIR"])
    wrk_duration = os.environ.pop("DURATION")   # "5s": not benchlib's knob
    import benchlib
    d = re.fullmatch(r"([0-9.]+)([smh]?)", wrk_duration)
    secs = float(d.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[
        d.group(2)] if d else 1.0
    tick = 1e6 / benchlib.HZ

    def figures(m, i):
        # wrk's req/s (or curl's MB/s) at <i>, CPU, p99, machine CPU; a
        # run that failed measured 0 req/s
        if not m[i]:
            return None
        if i == 8:          # the transfer: no p99, CPU ms per transfer
            return (m[8], m[9], None, m[10])
        return (m[i], m[i + 2], m[i + 1], m[i + 3])
    ab = []
    for c, variant in (("chashd", "sockmap"), ("chashd-off", "off")):
        a, b = med[c], med[c + "-before"]
        for i, case in ((0, "keep-alive"), (4, "close"),
                        (8, "%d MB transfer (MB/s, CPU ms)" % mb)):
            ab.append(("fast_path %s, %s" % (variant, case), figures(a, i),
                       figures(b, i), 2 * tick / 1000.0 if i == 8 else
                       sum(tick / max(1.0, m[i] * secs) for m in (a, b))))
    print()
    benchlib.print_after_before(ab, os.environ["CHASHD"],
                                os.environ["CHASHD_BEFORE"],
                                ["req/s", "CPU us/req", "p99",
                                 "machine CPU us/req"])
EOF

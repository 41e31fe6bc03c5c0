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

for tool in nginx haproxy wrk curl "$CHASHD"; do
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

# ---- the four proxies ---------------------------------------------------------
P_CHASHD=$(free_port)
P_CHASHD_OFF=$(free_port)
P_HAPROXY=$(free_port)
P_NGINX=$(free_port)

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

"$CHASHD" -c "$TMP/chashd.yml" 2>"$TMP/chashd.err" &
PID_CHASHD=$!
"$CHASHD" -c "$TMP/chashd-off.yml" 2>"$TMP/chashd-off.err" &
PID_CHASHD_OFF=$!
haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.err" &
PID_HAPROXY=$!
nginx -p "$TMP" -c "$TMP/stream.conf" -e "$TMP/stream.err" &
PID_NGINX=$!
pids="$pids $PID_CHASHD $PID_CHASHD_OFF $PID_HAPROXY $PID_NGINX"
for p in $P_CHASHD $P_CHASHD_OFF $P_HAPROXY $P_NGINX; do
    wait_port "$p" || { echo "bench/tcp.sh: a proxy did not start" >&2;
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

echo "chashd (fast_path sockmap and off) vs HAProxy vs nginx stream: tcp,"
echo "$WORKERS workers each, 4 nginx backends, wrk -t$THREADS -c$CONNS -d$DURATION"
echo "on loopback ($(nproc) cores), one $TRANSFER_MB MB transfer (curl), $ROUNDS"
echo "interleaved rounds, medians (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
: >"$TMP/results"
round=1
while [ "$round" -le "$ROUNDS" ]; do
    # rotate who goes first: no proxy always meets a cold or warm machine
    case $((round % 4)) in
    1) order="chashd chashd-off haproxy nginx" ;;
    2) order="chashd-off haproxy nginx chashd" ;;
    3) order="haproxy nginx chashd chashd-off" ;;
    *) order="nginx chashd chashd-off haproxy" ;;
    esac
    for name in $order; do
        case $name in
        chashd) port=$P_CHASHD pid=$PID_CHASHD ;;
        chashd-off) port=$P_CHASHD_OFF pid=$PID_CHASHD_OFF ;;
        haproxy) port=$P_HAPROXY pid=$PID_HAPROXY ;;
        nginx) port=$P_NGINX pid=$PID_NGINX ;;
        esac
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

$PY - "$TMP/results" "$TRANSFER_MB" <<'EOF'
import statistics, sys
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
         "nginx": "nginx stream"}
print("| proxy | keep-alive req/s | p99 (ms) | CPU us/req | machine CPU "
      "us/req | new conns/s | CPU us/conn | machine CPU us/conn | "
      "%d MB transfer MB/s | its CPU ms | machine CPU ms |" % mb)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k in ("chashd", "chashd-off", "haproxy", "nginx"):
    m = med[k]
    print("| %s | %.0f | %.2f | %.1f | %.1f | %.0f | %.1f | %.1f | %.0f | "
          "%.0f | %.0f |" % (label[k], m[0], m[1], m[2], m[3], m[4], m[6],
                             m[7], m[8], m[9], m[10]))
print()
def ratio(a, b):
    return a / b if b else float("nan")
for c in ("chashd", "chashd-off"):
    for k in ("haproxy", "nginx"):
        o, m = med[k], med[c]
        print("%s / %s: keep-alive req/s x%.2f, p99 x%.2f, new conns/s "
              "x%.2f, transfer x%.2f; CPU per request x%.2f (machine "
              "x%.2f), per connection x%.2f (machine x%.2f)"
              % (label[c], label[k], ratio(m[0], o[0]), ratio(m[1], o[1]),
                 ratio(m[4], o[4]), ratio(m[8], o[8]), ratio(m[2], o[2]),
                 ratio(m[3], o[3]), ratio(m[6], o[6]), ratio(m[7], o[7])))
EOF

#!/bin/sh
# tcp.sh -- chashd's tcp mode against HAProxy (mode tcp, balance source,
# hash-type consistent) and nginx stream (hash $remote_addr consistent):
# the same 4 nginx backends, 2 worker threads each, one run on loopback,
# load from wrk. Prints keep-alive requests/s, p99 latency and new
# connections/s for each, and the ratios against HAProxy.
#
#   B=build bench/tcp.sh   (DURATION=5s ROUNDS=3 CONNS=50 THREADS=2 to change)
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
WORKERS=2
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd
NGX_STREAM=/usr/lib/nginx/modules/ngx_stream_module.so

for tool in nginx haproxy wrk "$CHASHD"; do
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
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill $pids 2>/dev/null
    # shellcheck disable=SC2086
    [ -n "$pids" ] && wait $pids 2>/dev/null
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
BPORTS=""
for i in 1 2 3 4; do BPORTS="$BPORTS $(free_port)"; done
{
    echo "worker_processes 1; daemon off; pid $TMP/backends.pid;"
    echo "error_log $TMP/backends.err; events { worker_connections 4096; }"
    echo "http { access_log off; keepalive_requests 1000000;"
    for p in $BPORTS; do
        echo "  server { listen 127.0.0.1:$p reuseport; location / {" \
             "return 200 \"ok\"; } }"
    done
    echo "}"
} >"$TMP/backends.conf"
nginx -p "$TMP" -c "$TMP/backends.conf" -e "$TMP/backends.err" &
pids="$pids $!"
for p in $BPORTS; do wait_port "$p"; done

# ---- the three proxies --------------------------------------------------------
P_CHASHD=$(free_port)
P_HAPROXY=$(free_port)
P_NGINX=$(free_port)

{
    printf 'global:\n  admin: off\n  workers: %s\n  log_level: warn\n' "$WORKERS"
    printf 'web:\n  listen: 127.0.0.1:%s\n  mode: tcp\n' "$P_CHASHD"
    printf '  hash_key: source_ip\n  distribution: ring\n  backlog: 4096\n'
    printf '  servers:\n'
    n=1
    for p in $BPORTS; do
        printf '    - 127.0.0.1:%s:1 be-%s\n' "$p" "$n"
        n=$((n + 1))
    done
} >"$TMP/chashd.yml"

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
pids="$pids $!"
haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.err" &
pids="$pids $!"
nginx -p "$TMP" -c "$TMP/stream.conf" -e "$TMP/stream.err" &
pids="$pids $!"
for p in $P_CHASHD $P_HAPROXY $P_NGINX; do
    wait_port "$p" || { echo "bench/tcp.sh: a proxy did not start" >&2;
                        cat "$TMP"/*.err >&2; exit 1; }
done

# ---- load -----------------------------------------------------------------------
# wrk output -> "rps p99_ms"
run_wrk() {
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$@" 2>&1 |
        $PY -c '
import re, sys
t = sys.stdin.read()
rps = re.search(r"Requests/sec:\s+([0-9.]+)", t)
p99 = re.search(r"^\s+99%\s+([0-9.]+)(us|ms|s)\b", t, re.M)
err = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: .*", t)
if not rps or not p99:
    sys.stderr.write(t); print("0 0"); sys.exit()
scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
print(rps.group(1), "%.3f" % (float(p99.group(1)) * scale))
if err: sys.stderr.write("  wrk: " + err.group(0) + "\n")
'
}

echo "chashd vs HAProxy vs nginx stream: tcp, $WORKERS workers each, 4 nginx"
echo "backends, wrk -t$THREADS -c$CONNS -d$DURATION on loopback ($(nproc) cores),"
echo "$ROUNDS interleaved rounds, medians (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
: >"$TMP/results"
round=1
while [ "$round" -le "$ROUNDS" ]; do
    for name in chashd haproxy nginx; do
        case $name in
        chashd) port=$P_CHASHD ;;
        haproxy) port=$P_HAPROXY ;;
        nginx) port=$P_NGINX ;;
        esac
        # a short warm-up, then the measured runs
        wrk -t1 -c4 -d1s "http://127.0.0.1:$port/" >/dev/null 2>&1 || true
        ka=$(run_wrk "http://127.0.0.1:$port/")
        cc=$(run_wrk -H 'Connection: close' "http://127.0.0.1:$port/")
        echo "$name $ka $cc" >>"$TMP/results"
        echo "  round $round $name: keep-alive req/s, p99 ms: $ka;" \
             "close req/s, p99 ms: $cc"
    done
    round=$((round + 1))
done
echo

$PY - "$TMP/results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, ka, p99, cc, _ = line.split()
    rows.setdefault(name, []).append((float(ka), float(p99), float(cc)))
med = {k: [statistics.median(r[i] for r in v) for i in range(3)]
       for k, v in rows.items()}
label = {"chashd": "chashd", "haproxy": "HAProxy 2.6", "nginx": "nginx stream"}
print("| proxy | keep-alive req/s | p99 latency (ms) | new conns/s |")
print("|---|---:|---:|---:|")
for k in ("chashd", "haproxy", "nginx"):
    rps, p99, cc = med[k]
    print("| %s | %.0f | %.2f | %.0f |" % (label[k], rps, p99, cc))
print()
c = med["chashd"]
def ratio(a, b):
    return a / b if b else float("nan")
for k in ("haproxy", "nginx"):
    o = med[k]
    print("chashd / %-13s keep-alive req/s x%.2f, p99 x%.2f (lower is "
          "better), new conns/s x%.2f" % (label[k] + ":", ratio(c[0], o[0]),
                                          ratio(c[1], o[1]),
                                          ratio(c[2], o[2])))
EOF

#!/bin/sh
# ring.sh -- the ring against the seed design: a C++ std::map ring
# (bench/stdmap_ring.cc, g++ -O2) and `chash bench --algo ring`, both at
# 1000 members x 160 points on the same keys; prints both and the ratios.
# SPDX-License-Identifier: BSD-2-Clause
#
# B: build folder holding chash (default build). KEYS, ROUNDS: overrides.
# CHASH_BENCH_STRICT=1: exit 1 when a target is missed.
set -eu

cd "$(dirname "$0")/.."
B=${B:-build}
MEMBERS=1000
POINTS=160
KEYS=${KEYS:-1000000}
ROUNDS=${ROUNDS:-5}

if [ ! -x "$B/chash" ]; then
    echo "ring.sh: $B/chash is missing: run make BUILD=$B first" >&2
    exit 1
fi
mkdir -p "$B/bench"
g++ -O2 -std=c++17 -Wall -o "$B/bench/stdmap_ring" bench/stdmap_ring.cc
"$B/bench/stdmap_ring" $MEMBERS $POINTS "$KEYS" "$ROUNDS" \
    >"$B/bench/stdmap_ring.out"
"$B/chash" bench --algo ring --members $MEMBERS --points $POINTS \
    --keys "$KEYS" --rounds "$ROUNDS" --latency --json >"$B/bench/ring.json"

/usr/bin/python3 - "$B/bench/stdmap_ring.out" "$B/bench/ring.json" <<'EOF'
import json, os, sys

base = dict(l.strip().split("=", 1) for l in open(sys.argv[1]) if "=" in l)
doc = json.load(open(sys.argv[2]))
ring = doc["results"][0]
smap_ns, smap_build = float(base["ns_per_lookup"]), float(base["build_ms"])
smap_bpp = float(base["bytes_per_point"])
smap_dep = float(base["ns_per_lookup_dependent"])
ns, build, bpp = ring["ns_per_lookup"], ring["build_ms"], ring["bytes_per_point"]
batch = ring["ns_per_lookup_batch"]
dep = ring["ns_per_lookup_dependent"]

print("ring lookup at %d members x %d points, %d keys, median of %d rounds, "
      "%d CPUs (other processes may share them; compare ratios)"
      % (ring["members"], doc["points"], ring["keys"], doc["rounds"],
         doc["cpus"]))
print("%-26s %10s %13s %10s %12s" % ("", "ns/lookup", "dependent ns",
                                     "build ms", "bytes/point"))
print("%-26s %10.1f %13.1f %10.2f %12.2f" % (
    "std::map ring (seed, g++)", smap_ns, smap_dep, smap_build, smap_bpp))
print("%-26s %10.1f %13.1f %10.2f %12.2f" % ("chash ring", ns, dep, build,
                                             bpp))
print("%-26s %10.1f %13s %10s %12s" % ("chash ring, batch API", batch, "-",
                                       "-", "-"))
speedup = smap_ns / ns
bspeedup = smap_ns / batch
print("speed-up: lookups %.1fx single, %.1fx with chash_ring_lookup_batch "
      "(dependent lookups %.1fx), build %.1fx, memory %.1fx less"
      % (speedup, bspeedup, smap_dep / dep, smap_build / build,
         smap_bpp / bpp))
print("ns/lookup: independent lookups (throughput); batch: "
      "chash_ring_lookup_batch with prefetching; dependent: each lookup "
      "waits for the last (latency)")
checks = [("ring lookup <= 20 ns median", ns <= 20, "%.1f ns" % ns),
          (">= 40x faster than std::map", speedup >= 40,
           "%.1fx single lookups" % speedup),
          (">= 40x faster, batch API", bspeedup >= 40,
           "%.1fx chash_ring_lookup_batch" % bspeedup),
          ("build < 30 ms", build < 30, "%.2f ms" % build),
          ("<= 16 bytes/point", bpp <= 16, "%.2f B" % bpp)]
missed = 0
for what, ok, got in checks:
    print("target %-30s %-7s (%s)" % (what, "met" if ok else "MISSED", got))
    missed += not ok
if missed and os.environ.get("CHASH_BENCH_STRICT") == "1":
    sys.exit(1)
EOF

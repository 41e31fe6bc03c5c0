#!/bin/sh
# replication.sh -- what replication costs the clients of a redis pool
# (issue 12): req/s and p99 of redis-benchmark's SET and GET (-P 1 and
# -P 16, -c 50, 100-byte values, all keys preloaded) through one chashd
# with three pools on the SAME three redis-servers: replicas 1 (N=1),
# replicas 3 with read_policy primary (N=3, W=2) and replicas 3 with
# read_policy quorum (N=3, W=2, R=2). One chashd hosts the three pools,
# each on its own port, so the rounds interleave without restarts. Prints
# the medians, the ratios N=3 / N=1 of req/s, p99 and chashd's CPU per
# request (from /proc/PID/stat around each run), the redis-servers' CPU
# per request, and the pools' replication counters
# (GET /api/pools/{pool}/replication). The logic is in
# bench/replication.py.
#
#   B=build bash bench/replication.sh
#   ROUNDS=3        interleaved rounds (the pools' order rotated by one
#                   each round, after a warm-up round that is not
#                   reported); medians are reported
#   DURATION=2      seconds a run aims at: -n is the case's median req/s
#                   so far (the warm-up's first) x DURATION
#   REQUESTS=30000  -n of the warm-up at -P 1 (x8 at -P 16)
#   KEYSPACE=100000 -r, and the keys preloaded through the N=3 pool
#   VALUE=100       value bytes (preload and redis-benchmark -d)
#   CLIENTS=50      redis-benchmark -c
#   WORKERS=2       chashd workers
#   PIN=0           1: chashd on CPUs 0-1, the redis-servers and
#                   redis-benchmark on CPU 1 (as bench/redis.sh)
#
# redis-benchmark writes random values of its own (a new fill per
# process), so the N=1 pool's SETs leave primaries apart from their other
# copies: between the SETs and the GETs of every round every key is
# rewritten on every member directly, until the members' DEBUG DIGESTs
# agree (the redis-servers run with --enable-debug-command local).
#
# The run fails (exit 1) if redis-benchmark saw an error reply (version
# 7 stops at the first one) or did not finish, if chashd counted an error
# or a protocol error on the pool during a run, if a replicated pool
# counted a write failure, a read failure or a divergence (its members
# hold the same copies when it reads), if the members do not each hold
# all KEYSPACE keys with equal digests at the end, or if a GET missed its
# key on a member (keyspace_misses).
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
DURATION=${DURATION:-2}

for tool in redis-server redis-benchmark taskset "$CHASHD"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/replication.sh: $tool is missing (scripts/deps installs" \
             "redis; make builds chashd)" >&2
        exit 1
    fi
done

export CHASHD BENCH_DIR DURATION
exec $PY "$BENCH_DIR/replication.py"

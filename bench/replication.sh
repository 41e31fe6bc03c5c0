#!/bin/sh
# replication.sh -- what replication costs the clients of a redis pool
# (issues 12 and 25): chashd's CPU per request, p99 and req/s of
# redis-benchmark's SET, INCR and GET (-P 1 and -P 16, -c 50, 100-byte
# values) through one chashd with three pools on the SAME three
# redis-servers: replicas 1 (N=1), replicas 3 with read_policy primary
# (N=3, W=2) and replicas 3 with read_policy quorum (N=3, W=2, R=2). One
# chashd hosts the three pools, each on its own port, so the rounds
# interleave without restarts. Each pool works on keys of its own
# (redis-benchmark's custom-command form: SET/GET key:POOL:__rand_int__,
# INCR ctr:POOL:__rand_int__), all preloaded through their pool; the
# measurement starts once the replicated pools compared every key since
# chashd started ("verifying" false). Prints the medians (chashd's CPU
# per request from /proc/PID/stat around each run first, then p99, req/s,
# p50, the redis-servers' CPU per request), the ratios N=3 / N=1 of each
# with the absolute figures, and a verdict per line and overall on the
# targets of issue 25: chashd's CPU per request at most 2.5x N=1's, p99
# at most 2x. Then the pools' replication counters
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
#   KEYSPACE=100000 -r, and the keys preloaded per pool (registers and
#                   counters)
#   VALUE=100       value bytes (preload and the SETs' value; at most
#                   100000, it is an argument of redis-benchmark)
#   CLIENTS=50      redis-benchmark -c
#   WORKERS=2       chashd workers
#   PIN=0           1: chashd on CPUs 0-1, the redis-servers and
#                   redis-benchmark on CPU 1 (as bench/redis.sh)
#
# The targets are reported (met or MISSED), not enforced. The run fails
# (exit 1) if redis-benchmark saw an error reply (version 7 stops at the
# first one) or did not finish, if chashd counted an error or a protocol
# error on the pool during a run, if a replicated pool counted a write
# failure, a read failure or a divergence, if at the end a key's copies
# differ on the members of its replica set (`chash lookup --config`), a
# key is on a member outside its set or a member holds a key of no pool
# (DEBUG DIGEST-VALUE, DBSIZE; the redis-servers run with
# --enable-debug-command local), if a pool's counters do not sum to the
# INCRs redis-benchmark sent it times its copies (an acknowledged INCR
# lost or applied twice), or if a GET missed its key on a member
# (keyspace_misses).
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd
CHASH=$(cd "$B" && pwd)/chash
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
DURATION=${DURATION:-2}

for tool in redis-server redis-benchmark taskset "$CHASHD" "$CHASH"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/replication.sh: $tool is missing (scripts/deps installs" \
             "redis; make builds chashd and chash)" >&2
        exit 1
    fi
done

export CHASHD CHASH BENCH_DIR DURATION
exec $PY "$BENCH_DIR/replication.py"

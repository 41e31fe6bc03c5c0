#!/bin/sh
# etcd.sh -- how fast a membership change written to etcd reaches every
# chashd instance (issue 14, doc/etcd.md): one private etcd 3.4 on
# loopback, 100 pools x 100 members (every pool `members_from: etcd`), 3
# and then 10 chashd instances with 1 worker each (to fit on 2 cores).
# Each trial changes one member (weight, drain/maint/up, remove, add
# again) in one pool, or one member in each of 3 pools, in ONE txn; its
# time runs from just before the txn to the watch event on
# <prefix>/instances/ after which every instance's record shows
# applied_rev >= the txn's revision and, for every pool, one checksum. Prints min, p50, p99
# and max per instance count and kind as a markdown table, and the target
# (p99 under 100 ms with 3 instances). The logic is in
# bench/etcd_converge.py.
#
#   B=build sh bench/etcd.sh
#   TRIALS=100      trials of each kind per instance count
#   INSTANCES="3 10" the instance counts, run one after the other
#   POOLS=100 MEMBERS=100
#   GAP_MS=20       pause between trials
#   TIMEOUT=10      seconds a trial may take before the bench fails
#   LOGS=dir        copy the logs of etcd and the instances there
#
# The run fails (exit 1) if a trial does not converge within TIMEOUT, if
# an instance exits, or if at the end an instance reports another number
# of members in a pool than etcd holds. About 1-2 minutes with defaults.
# SPDX-License-Identifier: BSD-2-Clause
set -eu

B=${B:-build}
PY=/usr/bin/python3
CHASHD=$(cd "$B" && pwd)/chashd
ETCD=${ETCD:-/usr/bin/etcd}
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)

for tool in "$ETCD" "$CHASHD"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bench/etcd.sh: $tool is missing (scripts/deps installs" \
             "etcd-server; make builds chashd)" >&2
        exit 1
    fi
done

export CHASHD ETCD BENCH_DIR
exec $PY "$BENCH_DIR/etcd_converge.py"

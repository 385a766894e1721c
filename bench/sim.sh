#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# muster-sim at scale (issue #13): a synthetic trace of JOBS jobs (muster-sim gen, seed 1, 400
# jobs an hour, gangs up to 64 x 8) replayed on NODES p5 nodes (three quarters spot, SPOT_RATE
# notices per node-hour) under one policy, timed with /usr/bin/time.  Prints one line; asserts
# nothing (docs/style.md §1.8).
#
#   bench/sim.sh [JOBS [NODES [POLICY [PASS_INTERVAL_S [SPOT_RATE]]]]]
#                                             defaults: 100000 4096 muster 0 0.05
#
#   sim jobs=100000 nodes=4096 policy=muster pass_interval_s=0 passes=… wall_s=… max_rss_mb=…
#
# MUSTER_BIN points at the binaries (default build/bin).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${MUSTER_BIN:-$src/build/bin}
jobs=${1:-100000}
nodes=${2:-4096}
policy=${3:-muster}
interval=${4:-0}
rate=${5:-0.05}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/muster-bench-sim.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$bin/muster-sim" gen --jobs "$jobs" --seed 1 --jobs-per-hour 400 --queues default,research \
    >"$tmp/trace.csv"
spot=$((nodes * 3 / 4))
/usr/bin/time -f '%e %M' -o "$tmp/time" "$bin/muster-sim" --config "$src/bench/sim-cluster.json" \
    --nodes "p5-spot=$spot,p5-od=$((nodes - spot))" --trace "$tmp/trace.csv" --policies "$policy" \
    --spot-rate "$rate" --pass-interval-s "$interval" --json >"$tmp/out.json" 2>"$tmp/err"
read -r wall rss <"$tmp/time"
passes=$(grep -o '"passes":[0-9]*' "$tmp/out.json" | cut -d: -f2)
echo "sim jobs=$jobs nodes=$nodes policy=$policy pass_interval_s=$interval spot_rate=$rate" \
    "passes=$passes" \
    "wall_s=$wall max_rss_mb=$((rss / 1024))"

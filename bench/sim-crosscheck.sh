#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# muster-sim against the real daemon (issue #13, "Trust"): JOBS whole-node gangs (1-8 x 8 GPUs,
# `sleep` 2-8 s, time limits a little above; every fourth of priority 10 and not preemptible, the
# others of priority 0 and preemptible, min_runtime_s and kill_grace_s 0, so the first preempt the
# others) submitted at planned times to a real musterd with 16 workers, then the same trace, with the submission and exit instants musterd recorded (ms),
# replayed by muster-sim (policy muster).  Prints how the two agree: the start order, and the
# largest and mean difference of the last attempts' start times, and the preemptions in each.  Asserts nothing; with --assert TOL_S it exits 1 when the
# start orders differ or a start time is further off than TOL_S.  Free-running, so load changes
# which events musterd sees in one pass: tests/integration/t2008-place-sim-crosscheck.sh is the
# test, with one event per pass.
#
#   bench/sim-crosscheck.sh [JOBS] [--assert TOL_S]     (default 60 jobs, about a minute)
source "$(dirname "$0")/../tests/integration/lib.sh"

jobs=60
tol=
while [ $# -gt 0 ]; do
    case "$1" in
    --assert) tol=$2; shift 2 ;;
    *) jobs=$1; shift ;;
    esac
done
nodes=16
command -v jq >/dev/null 2>&1 || fail "jq not found"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [{"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
             "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3}],
  "heartbeat_s": 1,
  "node_lost_after_s": 10,
  "default_time_limit_s": 3600,
  "min_runtime_s": 0,
  "kill_grace_s": 0
}
JSON
start_musterd "$CONFIG"
for i in $(seq 0 $((nodes - 1))); do
    start_worker "n$i" spot-a 8 --label zone=zone0 --label "rack=rack$((i / 8))"
done
wait_for "$nodes nodes registered" 20 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = '"$nodes"' ]'

# The planned trace: deterministic, 0 or 1 s between submissions.
awk -v n="$jobs" 'BEGIN { s = 12345
    for (i = 0; i < n; i++) {
        s = (s * 1103515245 + 12345) % 2147483648; at += int(s / 65536) % 2
        s = (s * 1103515245 + 12345) % 2147483648; d = 2 + int(s / 65536) % 7
        s = (s * 1103515245 + 12345) % 2147483648; t = 1 + int(s / 65536) % 8
        printf "%.3f %d %d %d\n", at, d, t, (i % 4 == 3 ? 10 : 0) } }' >"$T/plan.txt"

# Submissions on whole seconds (+50 ms): musterd's pass works in whole seconds of wall time
# (now_s), the simulator's clock too, so the two see the same instants.
t0=$(($(date +%s) + 2)).05
ids=()
while read -r at d tasks prio; do
    now=$(date +%s.%N)
    wait=$(awk -v a="$at" -v t0="$t0" -v n="$now" 'BEGIN { w = t0 + a - n; print (w > 0 ? w : 0) }')
    sleep "$wait"
    ids+=("$(submit_json '{"tasks":'"$tasks"',"gpus_per_task":8,"time_limit_s":'$((d + 10))',"priority":'"$prio"',"preemptible":'"$([ "$prio" = 0 ] && echo true || echo false)"',"command":["sleep","'"$d"'"]}')")
done <"$T/plan.txt"
wait_for "all $jobs jobs done" $((jobs * 3)) \
    "[ \"\$(ctl -o json jobs --all | jq '[.[] | select(.state == \"SUCCEEDED\")] | length')\" = $jobs ]"

# What musterd recorded: id, submitted, last started, finished (ms), tasks, priority, attempts;
# in submission order.
for id in "${ids[@]}"; do
    echo "$id $(rcli HMGET "${MUSTER_KEY_PREFIX}job:$id" submitted_at started_at finished_at tasks | tr '\n' ' ')$(job_field "$id" priority) $(job_field "$id" attempt)"
done >"$T/real.txt"

# The same trace for muster-sim, with musterd's own instants in ms: submitted when musterd took it,
# ending when musterd saw it end, in whichever attempt (submit_ms, end_ms).
{
    echo "submit_ms,duration_s,tasks,gpus_per_task,time_limit_s,end_ms,priority,preemptible"
    awk '{ d = int(($4 - $3 + 999) / 1000); if (d < 1) d = 1
           printf "%s,%d,%d,8,%d,%s,%d,%s\n", $2, d, $5, d + 10, $4, $6, ($6 == 0 ? "true" : "false") }' "$T/real.txt"
} >"$T/trace.csv"
"$MUSTER_BIN/muster-sim" --config "$CONFIG" --nodes "spot-a=$nodes" --trace "$T/trace.csv" \
    --policies muster --check --jobs-out "$T/sim.csv" >"$T/sim.txt" 2>&1 || fail "muster-sim: $(cat "$T/sim.txt")"

# Compare: the last attempt's real start relative to the first submission's second (muster-sim's
# clock), against the simulator's.
real_pre=$(awk '{ n += ($7 > 1 ? $7 - 1 : 0) } END { print n + 0 }' "$T/real.txt")
sim_pre=$(tail -n +2 "$T/sim.csv" | awk -F, '{ n += ($8 > 1 ? $8 - 1 : 0) } END { print n + 0 }')
paste -d' ' "$T/real.txt" <(tail -n +2 "$T/sim.csv" | cut -d, -f2,9 | sort -t, -k1,1n | tr , ' ') |
    awk 'NR == 1 { t0 = int($2 / 1000) * 1000 }
        { real = ($3 - t0) / 1000; sim = $9; d = real - sim; if (d < 0) d = -d
          sum += d; if (d > max) max = d; n++; print real, sim, $1 }
        END { printf "# n=%d max_diff_s=%.2f mean_diff_s=%.2f\n", n, max, sum / n > "/dev/stderr" }' \
    >"$T/cmp.txt" 2>"$T/stats.txt"
# Order: by real start; a pair is out of order when the simulator starts them in the opposite
# order.
inv=$(sort -n -k1,1 "$T/cmp.txt" | awk '{ s[NR] = $2 } END { for (i = 1; i <= NR; i++)
    for (j = i + 1; j <= NR; j++) if (s[j] < s[i]) bad++; print bad + 0 }')
read -r _ _ max mean <"$T/stats.txt"
echo "sim-crosscheck jobs=$jobs nodes=$nodes ${max} ${mean} order_inversions=$inv" \
    "preemptions_real=$real_pre preemptions_sim=$sim_pre"
if [ -n "$tol" ]; then
    [ "$inv" -eq 0 ] || fail "start order differs in $inv pairs (see $T/cmp.txt)"
    awk -v m="${max#max_diff_s=}" -v t="$tol" 'BEGIN { exit !(m <= t) }' ||
        fail "start times differ by up to ${max#max_diff_s=} s, tolerance $tol s"
    ok "musterd and muster-sim agree on the start order and within $tol s"
fi

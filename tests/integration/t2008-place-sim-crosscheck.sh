#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# muster-sim against the real musterd, decision by decision (issue #13, "Trust"): what keeps the
# two from drifting.  A real musterd with 16 workers (8 spot, 8 on-demand nodes) gets a planned
# sequence of events, one at a time: submit the next whole-node gang, or let one running gang
# exit.  After each event the script waits until musterd has applied it and then for one
# /metrics round trip, which the daemon's single loop thread answers only after the pass that
# followed the event, so every pass sees exactly one new event.  It records which jobs started
# after which event.  muster-sim (policy muster) then replays musterd's own record: the
# submission and exit instants in milliseconds (submit_ms, end_ms).  The test asserts that each
# job started after the same event, in the same order and on the same capacity type in both.
#
# Nothing here depends on timing: events are serialised by the barrier, whole-node gangs without
# a topology need make any choice of nodes equivalent, and time limits 1000 s apart (the run
# lasts far less) make every backfill comparison independent of the clock.  Time differences
# are printed, not asserted.  bench/sim-crosscheck.sh is the larger, free-running version.
#
#   SIM_CROSSCHECK_JOBS=N (default 20)
source "$(dirname "$0")/lib.sh"

jobs=${SIM_CROSSCHECK_JOBS:-20}
nodes=16
command -v jq >/dev/null 2>&1 || fail "jq not found"
command -v curl >/dev/null 2>&1 || fail "curl not found"

start_redis
MPORT=$(free_port)
make_config --with '{"default_time_limit_s": 3600, "bind_timeout_s": 60}' >/dev/null
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
for i in $(seq 0 $((nodes - 1))); do
    pool=spot-a
    [ "$i" -ge 8 ] && pool=od-a
    # muster-sim's labels for these nodes: 8 a rack, 4 racks a zone, the pools in config order.
    start_worker "n$i" "$pool" 8 --label zone=zone0 --label "rack=rack$((i / 8))"
done
wait_for "$nodes nodes registered" 30 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = '"$nodes"' ]'
wait_for "/metrics" 10 'curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null'

# The plan: per job its gang (1-6 nodes of 8 GPUs), capacity order and a time limit of its own
# (1000 s steps: a backfill test compares limits, never instants); and the dice of each step.
awk -v n="$jobs" 'BEGIN { s = 20261126
    for (i = 0; i < n; i++) perm[i] = i
    for (i = n - 1; i > 0; i--) { s = (s * 1103515245 + 12345) % 2147483648
        k = int(s / 65536) % (i + 1); t = perm[i]; perm[i] = perm[k]; perm[k] = t }
    for (i = 0; i < n; i++) {
        s = (s * 1103515245 + 12345) % 2147483648; tasks = 1 + int(s / 65536) % 6
        s = (s * 1103515245 + 12345) % 2147483648; c = int(s / 65536) % 10
        cap = c < 6 ? "spot;on-demand" : c < 8 ? "on-demand;spot" : "spot"
        printf "%d %d %s %d\n", i, tasks, cap, 1000 * (perm[i] + 1) } }' >"$T/plan.txt"
awk -v n="$((jobs * 4))" 'BEGIN { s = 4242
    for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648; print int(s / 65536) % 1000 } }' \
    >"$T/dice.txt"
mapfile -t dice <"$T/dice.txt"

declare -a id tasks cap limit state step
while read -r k t c l; do
    tasks[k]=$t cap[k]=$c limit[k]=$l state[k]=future
done <"$T/plan.txt"

# barrier: returns once musterd has run the pass that followed everything it has applied.
barrier() {
    curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null || fail "no /metrics on 127.0.0.1:$MPORT"
}

# After event number $1: the jobs seen started since the last look get that step.
note_started() {
    local k started
    for k in "${!state[@]}"; do
        [ "${state[k]}" = pending ] || continue
        started=$(job_field "${id[k]}" started_at)
        if [ -n "$started" ]; then
            state[k]=running step[k]=$1
        fi
    done
}

submitted=0 ev=0 d=0
: >"$T/events.txt"
while :; do
    running=()
    for k in "${!state[@]}"; do [ "${state[k]}" = running ] && running+=("$k"); done
    [ "$submitted" -ge "$jobs" ] && [ "${#running[@]}" -eq 0 ] && break
    roll=${dice[d % ${#dice[@]}]}
    d=$((d + 1))
    if [ "$submitted" -lt "$jobs" ] && { [ "$roll" -lt 600 ] || [ "${#running[@]}" -eq 0 ]; }; then
        k=$submitted
        capjson=$(jq -cn --arg c "${cap[k]}" '$c | split(";")')
        id[k]=$(submit_json '{"tasks":'"${tasks[k]}"',"gpus_per_task":8,"capacity":'"$capjson"',"time_limit_s":'"${limit[k]}"',"command":["sh","-c","while [ ! -e '"$T/done.$k"' ]; do sleep 0.05; done"]}')
        wait_for "job $k (${id[k]}) taken in" 60 '[ -n "$(job_state "${id[k]}")" ]'
        state[k]=pending
        submitted=$((submitted + 1))
        echo "$ev submit $k" >>"$T/events.txt"
    else
        k=${running[roll % ${#running[@]}]}
        touch "$T/done.$k"
        wait_for "job $k (${id[k]}) succeeded" 60 job_state_is "${id[k]}" SUCCEEDED
        state[k]=done
        echo "$ev end $k" >>"$T/events.txt"
    fi
    barrier
    note_started "$ev"
    ev=$((ev + 1))
done
for k in "${!state[@]}"; do
    [ "${state[k]}" = done ] || fail "job $k (${id[k]}) is ${state[k]} at the end"
done

# musterd's record, in plan order: k, submitted, started, finished (ms), tasks, capacity of its
# first node, the step it started after.
for k in $(seq 0 $((jobs - 1))); do
    read -r sub sta fin nodes_ < <(rcli HMGET "${MUSTER_KEY_PREFIX}job:${id[k]}" submitted_at started_at finished_at nodes | tr '\n' ' '; echo)
    first=${nodes_%%,*}
    kind=spot
    [ "${first#n}" -ge 8 ] && kind=on-demand
    echo "$k $sub $sta $fin ${tasks[k]} $kind ${step[k]} ${cap[k]} ${limit[k]}"
done >"$T/real.txt"

# The instants of the events, in order: a submission's submitted_at, an exit's finished_at.
awk 'NR == FNR { sub_[$1] = $2; fin[$1] = $4; next }
     { print $1, ($2 == "submit" ? sub_[$3] : fin[$3]) }' "$T/real.txt" "$T/events.txt" >"$T/instants.txt"
sort -k2,2n -c "$T/instants.txt" 2>/dev/null || fail "event instants out of order: $(cat "$T/instants.txt")"
[ "$(cut -d' ' -f2 "$T/instants.txt" | sort -u | wc -l)" = "$(wc -l <"$T/instants.txt")" ] ||
    fail "two events on one millisecond (the barrier should keep them apart)"

# The same run for muster-sim: musterd's instants, the planned limits and capacities.
{
    echo "submit_ms,duration_s,tasks,gpus_per_task,time_limit_s,capacity,end_ms"
    awk '{ d = int(($4 - $3 + 999) / 1000); if (d < 1) d = 1
           printf "%s,%d,%d,8,%d,%s,%s\n", $2, d, $5, $9, $8, $4 }' "$T/real.txt"
} >"$T/trace.csv"
"$MUSTER_BIN/muster-sim" --config "$CONFIG" --nodes "spot-a=8,od-a=8" --trace "$T/trace.csv" \
    --policies muster --check --jobs-out "$T/sim.csv" >"$T/sim.txt" 2>&1 ||
    fail "muster-sim: $(cat "$T/sim.txt")"

# muster-sim's clock starts at the first submission's second; its trace rows are in plan order
# (line k + 2).  Each sim start is mapped to the event at that instant.
t0=$(($(sort -n -k2,2 "$T/real.txt" | head -1 | cut -d' ' -f2) / 1000 * 1000))
awk -F, -v t0="$t0" 'NR == FNR { at[$2] = $1; next }
    FNR > 1 { k = $2 - 2; ms = sprintf("%.0f", t0 + int($4 * 1000 + 0.5))
              printf "%d %s %s %s\n", k, (ms in at ? at[ms] : "none"), $7, ms }' \
    <(tr ' ' , <"$T/instants.txt") "$T/sim.csv" | sort -n >"$T/simsteps.txt"
# k sub sta fin tasks kind step cap limit, then muster-sim's step, capacity and start (ms).
join <(sort -k1,1 "$T/real.txt") <(sort -k1,1 "$T/simsteps.txt") | sort -n >"$T/joined.txt"
awk '{ printf "job %d: real step %s on %s at +%d ms; sim step %s on %s; real start - sim start %.0f ms\n",
       $1, $7, $6, $3 - $2, $10, $11, $3 - $12 }' "$T/joined.txt" >"$T/compare.txt"
cat "$T/compare.txt"
[ "$(wc -l <"$T/joined.txt")" = "$jobs" ] || fail "not every job in both runs: $(cat "$T/joined.txt")"
bad=$(awk '$7 != $10 || $6 != $11 { print "  job " $1 ": real step " $7 " on " $6 ", sim step " $10 " on " $11 }' "$T/joined.txt")
[ -z "$bad" ] || fail "musterd and muster-sim decided differently:
$bad"
# The start order: by real start instant, and by sim start (ties in pass order, the plan's).
diff <(sort -n -k3,3 "$T/real.txt" | cut -d' ' -f1) <(sort -n -k4,4 -k1,1 "$T/simsteps.txt" | cut -d' ' -f1) \
    >"$T/order.diff" || fail "start order differs: $(cat "$T/order.diff")"
awk -v ev="$ev" '{ d = $3 - $12; d = d < 0 ? -d : d; s += d; if (d > m) m = d; n++ }
    END { printf "sim-crosscheck: %d jobs, %d events, same decisions; |real start - sim start| mean %.1f ms, max %.0f ms\n", n, ev, s / n, m }' \
    "$T/joined.txt"
ok "musterd and muster-sim started every job after the same event, in the same order, on the same capacity"

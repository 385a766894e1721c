#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# muster-sim against the real musterd, decision by decision (issue #13, "Trust"): what keeps the
# two from drifting.  A real musterd with 16 workers (8 spot, 8 on-demand nodes) gets a planned
# sequence of events, one at a time: submit the next whole-node gang, or let one running gang
# exit.  After each event the script waits until musterd has applied it and then for one
# /metrics round trip, which the daemon's single loop thread answers only after the pass that
# followed the event, so every pass sees exactly one new event; when that pass preempted, it
# waits for the victims to stop and for the pass after that.  It records which jobs started (and
# which were preempted) after which event.  muster-sim (policy muster) then replays musterd's own
# record: the submission and exit instants in milliseconds (submit_ms, end_ms).  The test asserts
# that each job first started after the same event and on the same capacity type, was started as
# many times (once more per preemption), started its last attempt after the same event, and that
# the last starts came in the same order.
#
# Preemption (kill_grace_s 0, min_runtime_s 0, so a plan's victims stop at once in both): low
# gangs are one node, preemptible, each of its own priority; high gangs (one capacity type, 1-4
# nodes) preempt them; big gangs (the placement mix) neither preempt nor are preempted.  Victims
# of one size in one capacity type make the least-lost-work choice an order of start instants,
# never a comparison of clocks.
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
make_config --with '{"default_time_limit_s": 3600, "bind_timeout_s": 60, "min_runtime_s": 0,
                     "kill_grace_s": 0}' >/dev/null
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
for i in $(seq 0 $((nodes - 1))); do
    pool=spot-a
    [ "$i" -ge 8 ] && pool=od-a
    # muster-sim's labels for these nodes: 8 a rack, 4 racks a zone, the pools in config order.
    start_worker "n$i" "$pool" 8 --label zone=zone0 --label "rack=rack$((i / 8))"
done
wait_for "$nodes nodes registered" 30 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = '"$nodes"' ]'
wait_for "/metrics" 10 'curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null'

# The plan: per job its gang, capacity order, a time limit of its own (1000 s steps: a backfill
# test compares limits, never instants), priority and preemptibility; and the dice of each step.
# Low: 1 node, priority 10 + k, preemptible; high: 1-4 nodes on one capacity type, priority 1000;
# big: 1-6 nodes, priority 0; neither of the last two preemptible.
awk -v n="$jobs" 'BEGIN { s = 20261126
    for (i = 0; i < n; i++) perm[i] = i
    for (i = n - 1; i > 0; i--) { s = (s * 1103515245 + 12345) % 2147483648
        k = int(s / 65536) % (i + 1); t = perm[i]; perm[i] = perm[k]; perm[k] = t }
    for (i = 0; i < n; i++) {
        s = (s * 1103515245 + 12345) % 2147483648; tasks = 1 + int(s / 65536) % 6
        s = (s * 1103515245 + 12345) % 2147483648; c = int(s / 65536) % 10
        cap = c < 6 ? "spot;on-demand" : c < 8 ? "on-demand;spot" : "spot"
        s = (s * 1103515245 + 12345) % 2147483648; kind = int(s / 65536) % 10
        prio = 0; pre = "false"
        if (kind < 4) { tasks = 1; prio = 10 + i; pre = "true" }
        else if (kind < 6) { tasks = 1 + tasks % 4; prio = 1000; cap = c < 5 ? "on-demand" : "spot" }
        printf "%d %d %s %d %d %s\n", i, tasks, cap, 1000 * (perm[i] + 1), prio, pre } }' >"$T/plan.txt"
awk -v n="$((jobs * 4))" 'BEGIN { s = 4242
    for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648; print int(s / 65536) % 1000 } }' \
    >"$T/dice.txt"
mapfile -t dice <"$T/dice.txt"

declare -a id tasks cap limit prio pre state step kind att natt last
while read -r k t c l p e; do
    tasks[k]=$t cap[k]=$c limit[k]=$l prio[k]=$p pre[k]=$e state[k]=future natt[k]=0
done <"$T/plan.txt"

# barrier: returns once musterd has run the pass that followed everything it has applied.
barrier() {
    curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null || fail "no /metrics on 127.0.0.1:$MPORT"
}

# True while a gang that runs is being preempted (its victims' stops are not done).
none_preempting() {
    local k states
    states=$(for k in "${!state[@]}"; do
        if [ "${state[k]}" = running ]; then echo "HGET ${MUSTER_KEY_PREFIX}job:${id[k]} state"; fi
    done | rcli) # one redis-cli for all of them
    [[ $'\n'$states$'\n' != *$'\n'PREEMPTING$'\n'* ]]
}

# After event number $1: a running job whose attempt changed was preempted; a job seen started
# since the last look gets that step (its first start's step and capacity, and its last's).
note_started() {
    local i k a started nodes_ first
    local -a ks=() fields=()
    for k in "${!state[@]}"; do
        if [ "${state[k]}" = pending ] || [ "${state[k]}" = running ]; then ks+=("$k"); fi
    done
    # One redis-cli for every job: three lines each (a nil field is an empty line).
    [ "${#ks[@]}" -eq 0 ] || mapfile -t fields < <(for k in "${ks[@]}"; do
        echo "HMGET ${MUSTER_KEY_PREFIX}job:${id[k]} attempt started_at nodes"
    done | rcli)
    [ "${#fields[@]}" -eq $((3 * ${#ks[@]})) ] || fail "HMGET of ${#ks[@]} jobs gave ${#fields[@]} lines"
    for i in "${!ks[@]}"; do
        k=${ks[i]} a=${fields[3 * i]} started=${fields[3 * i + 1]} nodes_=${fields[3 * i + 2]}
        if [ "${state[k]}" = running ] && { [ -z "$started" ] || [ "$a" != "${att[k]}" ]; }; then
            state[k]=pending
        fi
        att[k]=$a
        if [ "${state[k]}" = pending ] && [ -n "$started" ]; then
            state[k]=running last[k]=$1 natt[k]=$((natt[k] + 1))
            if [ "${natt[k]}" = 1 ]; then
                step[k]=$1 kind[k]=spot first=${nodes_%%,*}
                if [ "${first#n}" -ge 8 ]; then kind[k]=on-demand; fi
            fi
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
        id[k]=$(submit_json '{"tasks":'"${tasks[k]}"',"gpus_per_task":8,"capacity":'"$capjson"',"time_limit_s":'"${limit[k]}"',"priority":'"${prio[k]}"',"preemptible":'"${pre[k]}"',"command":'"$(await_file_json "$T/done.$k")"'}')
        wait_for "job $k (${id[k]}) taken in" 60 '[ -n "$(job_state "${id[k]}")" ]'
        state[k]=pending att[k]=$(job_field "${id[k]}" attempt)
        submitted=$((submitted + 1))
        echo "$ev submit $k" >>"$T/events.txt"
    else
        k=${running[roll % ${#running[@]}]}
        touch "$T/done.$k"
        wait_for "job $k (${id[k]}) succeeded" 60 job_state_is "${id[k]}" SUCCEEDED
        state[k]="done"
        echo "$ev end $k" >>"$T/events.txt"
    fi
    barrier
    wait_for "the victims of event $ev stopped" 60 none_preempting
    barrier
    note_started "$ev"
    ev=$((ev + 1))
done
for k in "${!state[@]}"; do
    [ "${state[k]}" = "done" ] || fail "job $k (${id[k]}) is ${state[k]} at the end"
done

# musterd's record, in plan order: k, submitted, last started, finished (ms), tasks, capacity of
# its first start, the step it first started after, capacity order, limit, priority,
# preemptible, attempts started, the step its last attempt started after.
for k in $(seq 0 $((jobs - 1))); do
    read -r sub sta fin < <(rcli HMGET "${MUSTER_KEY_PREFIX}job:${id[k]}" submitted_at started_at finished_at | tr '\n' ' '; echo)
    echo "$k $sub $sta $fin ${tasks[k]} ${kind[k]} ${step[k]} ${cap[k]} ${limit[k]} ${prio[k]} ${pre[k]} ${natt[k]} ${last[k]}"
done >"$T/real.txt"
npre=$(awk '{ n += $12 - 1 } END { print n }' "$T/real.txt")
[ "$npre" -gt 0 ] || fail "no gang was preempted: the plan no longer covers preemption"

# The instants of the events, in order: a submission's submitted_at, an exit's finished_at.
awk 'NR == FNR { sub_[$1] = $2; fin[$1] = $4; next }
     { print $1, ($2 == "submit" ? sub_[$3] : fin[$3]) }' "$T/real.txt" "$T/events.txt" >"$T/instants.txt"
sort -k2,2n -c "$T/instants.txt" 2>/dev/null || fail "event instants out of order: $(cat "$T/instants.txt")"
[ "$(cut -d' ' -f2 "$T/instants.txt" | sort -u | wc -l)" = "$(wc -l <"$T/instants.txt")" ] ||
    fail "two events on one millisecond (the barrier should keep them apart)"

# The same run for muster-sim: musterd's instants, the planned limits and capacities.
{
    echo "submit_ms,duration_s,tasks,gpus_per_task,time_limit_s,capacity,end_ms,priority,preemptible"
    awk '{ d = int(($4 - $3 + 999) / 1000); if (d < 1) d = 1
           printf "%s,%d,%d,8,%d,%s,%s,%s,%s\n", $2, d, $5, $9, $8, $4, $10, $11 }' "$T/real.txt"
} >"$T/trace.csv"
"$MUSTER_BIN/muster-sim" --config "$CONFIG" --nodes "spot-a=8,od-a=8" --trace "$T/trace.csv" \
    --policies muster --check --jobs-out "$T/sim.csv" >"$T/sim.txt" 2>&1 ||
    fail "muster-sim: $(cat "$T/sim.txt")"

# muster-sim's clock starts at the first submission's second; its trace rows are in plan order
# (line k + 2).  Each sim start, first and last, is mapped to the event at that instant.
t0=$(($(sort -n -k2,2 "$T/real.txt" | head -1 | cut -d' ' -f2) / 1000 * 1000))
awk -F, -v t0="$t0" 'NR == FNR { at[$2] = $1; next }
    FNR > 1 { k = $2 - 2; ms = sprintf("%.0f", t0 + int($4 * 1000 + 0.5))
              ls = sprintf("%.0f", t0 + int($9 * 1000 + 0.5))
              printf "%d %s %s %s %d %s %s\n", k, (ms in at ? at[ms] : "none"), $7, ms, $8,
                     (ls in at ? at[ls] : "none"), ls }' \
    <(tr ' ' , <"$T/instants.txt") "$T/sim.csv" | sort -n >"$T/simsteps.txt"
# k sub sta fin tasks kind step cap limit prio pre attempts last-step (musterd's, 1-13), then
# muster-sim's first step, capacity, first start (ms), attempts, last step, last start (14-19).
join <(sort -k1,1 "$T/real.txt") <(sort -k1,1 "$T/simsteps.txt") | sort -n >"$T/joined.txt"
awk '{ printf "job %d (priority %d): real steps %s..%s on %s, %d attempt(s), last at +%d ms; sim steps %s..%s on %s, %d attempt(s); real last start - sim last start %.0f ms\n",
       $1, $10, $7, $13, $6, $12, $3 - $2, $14, $18, $15, $17, $3 - $19 }' "$T/joined.txt" >"$T/compare.txt"
cat "$T/compare.txt"
[ "$(wc -l <"$T/joined.txt")" = "$jobs" ] || fail "not every job in both runs: $(cat "$T/joined.txt")"
bad=$(awk '$7 != $14 || $6 != $15 || $12 != $17 || $13 != $18 {
    print "  job " $1 ": real steps " $7 ".." $13 " on " $6 " in " $12 ", sim steps " $14 ".." $18 " on " $15 " in " $17 }' "$T/joined.txt")
[ -z "$bad" ] || fail "musterd and muster-sim decided differently:
$bad"
# The order of the last starts: by instant, ties (one pass) in pass order: priority, then the plan's.
diff <(sort -k3,3n -k10,10nr -k1,1n "$T/real.txt" | cut -d' ' -f1) \
    <(sort -k19,19n -k10,10nr -k1,1n "$T/joined.txt" | cut -d' ' -f1) \
    >"$T/order.diff" || fail "start order differs: $(cat "$T/order.diff")"
awk -v ev="$ev" -v npre="$npre" '{ d = $3 - $19; d = d < 0 ? -d : d; s += d; if (d > m) m = d; n++ }
    END { printf "sim-crosscheck: %d jobs, %d events, %d preemptions, same decisions; |real start - sim start| mean %.1f ms, max %.0f ms\n", n, ev, npre, s / n, m }' \
    "$T/joined.txt"
ok "musterd and muster-sim started and preempted every job after the same events, in the same order, on the same capacity"

#!/usr/bin/env bash
# A queue longer than a pass needs to look at (issue #15): 1,500 jobs wait behind a full cluster
# of 4 simulated nodes (muster-bench-fleet: the real protocol, no task processes).  Passes stop
# early once no later job can start, take the reservation or preempt
# (muster_scheduling_passes_stopped), yet a small job far down the queue that fits still starts
# at once, every job gets its reason (the last one too, from the sweep that refreshes the rest of
# the queue's reasons, a window a pass, within 10 s), `musterctl why` counts the last job's place
# in the order, and jobs start in their order.
source "$(dirname "$0")/lib.sh"

_mu_need_bin muster-bench-fleet
MPORT=$(free_port)
start_redis
make_config --with '{"node_lost_after_s": 60}' >/dev/null
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
"$MUSTER_BIN/muster-bench-fleet" --scheduler "tcp://127.0.0.1:$SCHED_PORT" --nodes spot-a=4 \
    >"$T/fleet.log" 2>&1 &
_mu_pids+=("$!")
wait_for "4 nodes registered" 30 '[ "$(rcli HLEN muster:nodes)" = 4 ]'
metric() {
    curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v n="muster_$1" '$1 == n { v = $2 } END { print v + 0 }'
}

# Every GPU but 4 busy for an hour: three whole nodes and half of the fourth.
for i in 1 2 3; do
    gang[i]=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["sleep","3600"]}')
done
half=$(submit_json '{"tasks":1,"gpus_per_task":4,"command":["sleep","3700"]}')
for id in "${gang[@]}" "$half"; do
    wait_for "gang $id running" 30 job_state_is "$id" RUNNING
done

# 1,500 whole-node jobs, then one of 2 GPUs for at most a minute.
for ((i = 0; i < 1500; i++)); do
    echo "XADD muster:submit * spec '{\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"sleep\",\"1\"]}'"
done | rcli >"$T/ids"
mapfile -t ids <"$T/ids"
[ "${#ids[@]}" = 1500 ] || fail "submitted ${#ids[@]} jobs, not 1,500"
last=${ids[1499]}
wait_for "the last job queued" 60 job_state_is "$last" PENDING
small=$(submit_json '{"tasks":1,"gpus_per_task":2,"time_limit_s":60,"command":["sleep","3600"]}')
wait_for "the small job, behind 1,500, started" 30 job_state_is "$small" RUNNING
[ "$(job_state "${ids[0]}")" = PENDING ] || fail "the first queued job is $(job_state "${ids[0]}")"
ok "a 1x2-GPU job behind 1,500 whole-node jobs backfilled at once"

# Passes stopped early, and still every job has its reason: the second's and the last's are the
# same words (one shape, one failure); the first holds the reservation.
wait_for "a pass that stopped early" 30 '[ "$(metric scheduling_passes_stopped)" -gt 0 ]'
expect_job_field "${ids[0]}" reason "waiting for reservation"
second=$(job_field "${ids[1]}" reason)
[ -n "$second" ] && [ "$second" != "waiting for the scheduler" ] || fail "the second job's reason: '$second'"
wait_for "the last job's reason" 60 '[ "$(job_field "$last" reason)" = "$second" ]'
# A pass writes hundreds of reasons in one fenced round trip: none of them is lost.
unwritten() {
    for id in "${ids[@]:1}"; do echo "HGET muster:job:$id reason"; done | rcli |
        grep -cvxF -- "$second" || true
}
wait_for "every queued job's reason written" 30 '[ "$(unwritten)" = 0 ]'
ok "passes stopped early ($(metric scheduling_passes_stopped) of $(metric scheduling_passes)); the last job's reason: $second"

ctl why "$last" >"$T/why" || fail "musterctl why $last failed: $(cat "$T/why")"
has -F -- "$last" <"$T/why" || fail "musterctl why does not name the job: $(cat "$T/why")"
# Every other queued job is ahead of it (the small one started).
has -F "order: 1499 job(s) ahead of it" <"$T/why" || fail "musterctl why's order: $(cat "$T/why")"
ok "musterctl why: the last job has the other 1,499 ahead of it"

# The cluster frees one node at a time: jobs start in their order (those that started are a
# prefix of the queue).
ctl cancel "${gang[1]}" >/dev/null || fail "cancel failed"
wait_for "the third queued job done" 60 job_state_is "${ids[2]}" SUCCEEDED
seen_pending=
for ((i = 0; i < 50; i++)); do
    s=$(job_state "${ids[i]}")
    if [ "$s" = PENDING ]; then
        seen_pending=${ids[i]}
    elif [ -n "$seen_pending" ]; then
        fail "job $i (${ids[i]}) is $s while the earlier $seen_pending is PENDING"
    fi
done
[ "$(job_state "$last")" = PENDING ] || fail "the last job is $(job_state "$last")"
ok "jobs started in their order"

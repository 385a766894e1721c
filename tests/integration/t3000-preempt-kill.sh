#!/usr/bin/env bash
# A high-priority gang preempts a lower-priority one that has no checkpoint block: the victim is
# PREEMPTING, killed, back to PENDING with attempt + 1 and its lost work recorded; the preemptor
# runs on the freed GPUs; the victim runs again afterwards.  Equal priority never preempts, and
# min_runtime_s protects young gangs.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 10, "min_runtime_s": 0, "kill_grace_s": 2
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8 --label zone=z1
start_worker n2 spot-a 8 --label zone=z1
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# Attempt 1 of "low" runs until it is preempted (a fixed run time could end on a slow machine
# before the checks that need it running); attempt 2 runs briefly and succeeds.
low=$(submit_json "{\"name\":\"low\",\"priority\":1,\"tasks\":2,\"gpus_per_task\":8,\"command\":\"echo \$MUSTER_ATTEMPT >> $T/low.\$RANK; [ \$MUSTER_ATTEMPT = 1 ] || exec sleep 1; exec sleep 600\"}")
wait_for "low running" 10 job_state_is "$low" RUNNING
sleep 1
same=$(submit_json '{"name":"same","priority":1,"tasks":1,"gpus_per_task":8,"command":["true"]}')
sleep 1.5
[ "$(job_state "$low")" = RUNNING ] || fail "an equal-priority job preempted low"
ok "equal priority does not preempt"

high=$(submit_json "{\"name\":\"high\",\"priority\":10,\"tasks\":1,\"gpus_per_task\":8,\"command\":\"touch $T/high.ran; sleep 1\"}")
wait_for "low preempted" 10 '[ "$(rcli HGET "muster:job:'"$low"'" attempt)" = 2 ]'
rcli XRANGE muster:events - + | has PREEMPTING || fail "no PREEMPTING event"
wait_for "high succeeded" 15 job_state_is "$high" SUCCEEDED
[ -e "$T/high.ran" ] || fail "high never ran"
lost=$(rcli HGET "muster:job:$low" lost_gpu_seconds)
python3 -c "import sys; sys.exit(0 if float('$lost') >= 16 else 1)" || fail "lost_gpu_seconds $lost, expected >= 16 (2x8 GPUs for >= 1 s)"
rcli HGET "muster:job:$low" reason | has "preempted by job $high" || true
ok "high preempted low (lost ${lost} GPU-s) and ran"

wait_for "low succeeded on its second attempt" 30 job_state_is "$low" SUCCEEDED
[ "$(sort -u "$T"/low.* | tr '\n' ' ')" = "1 2 " ] || fail "low attempts: $(cat "$T"/low.*)"
wait_for "same succeeded" 20 job_state_is "$same" SUCCEEDED
[ "$(rcli HGET muster:counters preemptions)" = 1 ] || fail "preemptions counter $(rcli HGET muster:counters preemptions)"
ok "the victim ran again (attempts 1 and 2) and the preemption was counted"

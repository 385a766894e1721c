#!/usr/bin/env bash
# Among several possible victims the planner stops the one that loses the least work:
# GPUs x (now - newest checkpoint, or start).  Three 1x8 gangs on three nodes: "old" started first
# and never checkpoints, "young" started later and never checkpoints, "saved" checkpoints every
# few steps; a 1x8 preemptor must take "saved"'s node.
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
for n in n1 n2 n3; do start_worker $n spot-a 8 --label zone=z1; done
wait_for "3 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 3 ]'
train="$MUSTER_SRC/tests/integration/tasks/train.sh"
mkdir -p "$T/old" "$T/young" "$T/saved"
spec() { # NAME OUT EVERY
    echo "{\"name\":\"$1\",\"priority\":1,\"tasks\":1,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"USR1\",\"grace_s\":10},\"command\":[\"$train\",\"$T/$2\",\"600\",\"$3\"]}"
}
old=$(submit_json "$(spec old old 0)")
wait_for "old running" 10 job_state_is "$old" RUNNING
sleep 2
saved=$(submit_json "$(spec saved saved 3)")
wait_for "saved running" 10 job_state_is "$saved" RUNNING
sleep 1
young=$(submit_json "$(spec young young 0)")
wait_for "young running" 10 job_state_is "$young" RUNNING
wait_for "saved has a checkpoint" 10 '[ -n "$(rcli HGET "muster:job:'"$saved"'" last_checkpoint)" ]'
# Give "young" a few seconds of uncheckpointed work, so that its loss (>= 2 s x 8 GPUs) is
# clearly above "saved"'s (< 1 s since its last checkpoint) however busy the machine is.
sleep 3

high=$(submit_json '{"name":"high","priority":5,"tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "high succeeded" 20 job_state_is "$high" SUCCEEDED
[ "$(rcli HGET "muster:job:$saved" attempt)" = 2 ] || fail "saved (least lost work) was not the victim"
[ "$(rcli HGET "muster:job:$old" attempt)" = 1 ] || fail "old was preempted"
[ "$(rcli HGET "muster:job:$young" attempt)" = 1 ] || fail "young was preempted"
ok "the gang that had just checkpointed was the victim; old and young kept running"
for j in $old $young $saved; do ctl cancel "$j" >/dev/null; done

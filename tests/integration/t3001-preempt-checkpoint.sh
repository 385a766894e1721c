#!/usr/bin/env bash
# Checkpoint-aware preemption: the victim's tasks get their checkpoint signal, write a checkpoint
# and exit; the victim goes PREEMPTING -> PENDING (attempt 2) keeping its checkpoint; the
# preemptor runs; the victim then resumes from its checkpoint (MUSTER_RESUME_FROM) in every task.
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
train="$MUSTER_SRC/tests/integration/tasks/train.sh"
mkdir -p "$T/out"

low=$(submit_json "{\"name\":\"low\",\"priority\":1,\"tasks\":2,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":20},\"command\":[\"$train\",\"$T/out\",\"60\"]}")
wait_for "low running" 10 job_state_is "$low" RUNNING
# Both tasks handle their checkpoint signal from here on (train.sh traps it first).
wait_for "low's tasks started" 10 '[ -s "$T/out/started.0" ] && [ -s "$T/out/started.1" ]'
sleep 1.5 # some steps done
high=$(submit_json "{\"name\":\"high\",\"priority\":10,\"tasks\":2,\"gpus_per_task\":8,\"command\":\"touch $T/high.\$RANK\"}")
wait_for "low checkpointed on its signal" 15 '[ -s "$T/out/signal.0" ] && [ -s "$T/out/signal.1" ]'
wait_for "low back to PENDING as attempt 2" 15 '[ "$(rcli HGET "muster:job:'"$low"'" attempt)" = 2 ]'
requeued_by=$(($(date +%s%N) / 1000000)) # the requeue happened before this
ck_at=$(rcli HGET "muster:job:$low" last_checkpoint_at)
ckpt=$(rcli HGET "muster:job:$low" last_checkpoint)
[ -n "$ckpt" ] && [ -s "$ckpt" ] || fail "last_checkpoint '$ckpt' not stored"
[ -n "$(rcli HGET "muster:job:$low" last_checkpoint_at)" ] || fail "last_checkpoint_at missing"
rcli XRANGE muster:events - + | has CHECKPOINT || fail "no CHECKPOINT event"
rcli XRANGE muster:events - + | has PREEMPTING || fail "no PREEMPTING event"
wait_for "high succeeded" 15 job_state_is "$high" SUCCEEDED
ok "low checkpointed on SIGUSR1 and was requeued keeping $ckpt; high ran"

wait_for "low succeeded" 30 job_state_is "$low" SUCCEEDED
for r in 0 1; do
    grep -q "attempt 2 resumed from $ckpt" "$T/out/resume.$r" || fail "rank $r did not resume from $ckpt: $(cat "$T/out/resume.$r" 2>/dev/null)"
done
step=$(cat "$ckpt")
[ "$step" -gt 0 ] || fail "checkpoint step $step"
# The lost work counts from the checkpoint, not from the attempt's start: at most 2x8 GPUs for
# the time between the checkpoint and the requeue, which happened before requeued_by.  (A bound
# read from the clock, not a guess of how fast this machine is: the attempt ran >= 1.5 s before
# its checkpoint, so counting from the start would lose >= 24 GPU-s more.)
lost=$(rcli HGET "muster:job:$low" lost_gpu_seconds)
python3 -c "import sys; sys.exit(0 if float('$lost') <= 16 * ($requeued_by - $ck_at) / 1000 + 0.001 else 1)" ||
    fail "lost $lost GPU-s, more than 16 GPUs x the $((requeued_by - ck_at)) ms from the checkpoint to the requeue"
ok "every task of attempt 2 resumed from the checkpoint (step $step); lost only $lost GPU-s"

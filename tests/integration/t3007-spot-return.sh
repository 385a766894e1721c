#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Back to spot (issue #16) through real musterd and workers: a checkpointing gang that asked for
# spot first lands on on-demand while the only spot node is busy.  While spot stays busy its
# checkpoints move nothing; once the spot node frees, its next checkpoint moves it: checkpoint
# signal, requeue, attempt 2 on the spot node resuming from the checkpoint, and the event says
# why and what it saves per hour.
# Standalone: tests/integration/t3007-spot-return.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3},
    {"name": "od-a", "capacity": "on-demand", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 10}
  ],
  "heartbeat_s": 1, "node_lost_after_s": 10, "min_runtime_s": 0, "kill_grace_s": 5,
  "spot_return_horizon_s": 3600, "spot_return_overhead_s": 60
}
JSON
start_musterd "$CONFIG"
start_worker s1 spot-a 8
start_worker o1 od-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

filler=$(submit_json "{\"name\":\"filler\",\"tasks\":1,\"gpus_per_task\":8,\"capacity\":[\"spot\"],\"command\":$(await_file_json "$T/release")}")
wait_for "the filler holds the spot node" 15 job_state_is "$filler" RUNNING

mkdir -p "$T/out"
train=$(submit_json "{\"name\":\"train\",\"tasks\":1,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"USR1\",\"grace_s\":30},\"command\":[\"$MUSTER_SRC/tests/integration/tasks/train.sh\",\"$T/out\",\"1000000\",\"10\"]}")
wait_for "train running" 15 job_state_is "$train" RUNNING
[ "$(rcli HGET "muster:job:$train" nodes)" = o1 ] || fail "train is not on on-demand: $(rcli HGET "muster:job:$train" nodes)"

# Checkpoints land while spot is busy: nothing moves.
wait_for "two checkpoints of train" 30 \
    "[ \"\$(ctl -o json events --job $train | jq '[.[] | select(.state == \"CHECKPOINT\")] | length')\" -ge 2 ]"
[ "$(rcli HGET "muster:job:$train" attempt)" = 1 ] || fail "train moved while spot was busy"
[ "$(job_state "$train")" = RUNNING ] || fail "train is $(job_state "$train") while spot is busy"
ok "while the spot node is busy, train's checkpoints move nothing"

: >"$T/release"
wait_for "the filler done" 15 job_state_is "$filler" SUCCEEDED
wait_for "train's attempt 2 running" 60 \
    "[ \"\$(rcli HGET muster:job:$train attempt)\" = 2 ] && job_state_is $train RUNNING"
[ "$(rcli HGET "muster:job:$train" nodes)" = s1 ] || fail "attempt 2 is not on spot: $(rcli HGET "muster:job:$train" nodes)"
grep -q "attempt 2 resumed from $T/out/ckpt.0.1." "$T/out/resume.0" ||
    fail "attempt 2 did not resume from attempt 1's checkpoint: $(cat "$T/out/resume.0" 2>/dev/null)"
ctl -o json events --job "$train" >"$T/ev" || fail "musterctl events failed"
jq -r '.[] | select(.state == "PREEMPTING") | .reason' "$T/ev" | grep -q \
    "^back to spot after checkpoint $T/out/ckpt.0.1.[0-9]*: spot capacity is free (pool spot-a), saves 7.00 per hour" ||
    fail "no PREEMPTING event says why: $(jq -r '.[].reason' "$T/ev")"
ctl show "$train" | grep -q "^spot_return .*back to spot after checkpoint .*saves 7.00 per hour" ||
    fail "musterctl show does not say why train moved: $(ctl show "$train")"
[ "$(rcli HGET muster:counters spot_returns)" = 1 ] || fail "spot_returns counter: $(rcli HGET muster:counters spot_returns)"
ok "once spot freed, train moved there at its next checkpoint and resumed from it"

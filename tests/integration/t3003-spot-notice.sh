#!/usr/bin/env bash
# The 2-minute spot notice, end to end: the metadata-service stand-in starts a notice, the worker
# (polling IMDSv2 every second) reports it, the scheduler marks the node terminating, cools the
# spot pool down, checkpoints the gang and requeues it at the head of its queue, and the gang runs
# again on on-demand capacity, resuming from its checkpoint, long before the deadline.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null # pools spot-a (spot) and od-a (on-demand), 8 GPUs per node
start_musterd "$CONFIG"
start_imds s1 --zone z1 --lifecycle spot
start_worker s1 spot-a 8 --label zone=z1 --label rack=r1 --imds "http://127.0.0.1:$IMDS_PORT" --imds-interval-s 1
start_worker o1 od-a 8 --label zone=z1 --label rack=r1
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
train="$MUSTER_SRC/tests/integration/tasks/train.sh"
mkdir -p "$T/out"

id=$(submit_json "{\"name\":\"ft\",\"tasks\":1,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":30},\"command\":[\"$train\",\"$T/out\",\"80\"]}")
wait_for "job running" 10 job_state_is "$id" RUNNING
[ "$(rcli HGET "muster:job:$id" nodes)" = s1 ] || fail "expected the spot node first, got $(rcli HGET "muster:job:$id" nodes)"
sleep 1

t0=$(date +%s%N)
curl -sf -X POST -d '{"action":"terminate","in_s":120}' "http://127.0.0.1:$IMDS_PORT/mock/notice" >/dev/null
wait_for "s1 terminating" 10 '[ "$(rcli HGET muster:nodes s1 | jq -r .state)" = terminating ]'
wait_for "the gang runs again on on-demand" 20 '[ "$(rcli HGET "muster:job:'"$id"'" attempt)" = 2 ] && [ "$(job_state "$id")" = RUNNING ]'
t1=$(date +%s%N)
[ "$(rcli HGET "muster:job:$id" nodes)" = o1 ] || fail "attempt 2 on $(rcli HGET "muster:job:$id" nodes), expected o1"
ckpt=$(rcli HGET "muster:job:$id" last_checkpoint)
wait_for "attempt 2 resumed" 10 "grep -q 'attempt 2 resumed from $ckpt' '$T/out/resume.0'"
rcli XRANGE muster:events - + | has "spot terminate of node s1" || fail "no event names the spot notice"
[ "$(rcli HGET muster:counters spot_interruptions)" = 1 ] || fail "spot_interruptions $(rcli HGET muster:counters spot_interruptions)"
cool=$(rcli HGET muster:pools spot-a | jq -r .cooldown_until)
[ "$cool" -gt "$(date +%s%3N)" ] || fail "spot-a not cooling down: $cool"
ok "notice -> checkpointed and running on on-demand in $(((t1 - t0) / 1000000)) ms (deadline 120 s), resumed from $ckpt"

# Nothing new goes to the terminating node, even a spot-only job.
spot_only=$(submit_json '{"tasks":1,"gpus_per_task":1,"capacity":["spot"],"command":["true"]}')
sleep 2
[ "$(job_state "$spot_only")" = PENDING ] || fail "a spot-only job ran while the only spot node is terminating"
ok "the terminating node takes no new work"
wait_for "job succeeded" 30 job_state_is "$id" SUCCEEDED

#!/usr/bin/env bash
# A worker that dies and stays down (issue #10 item 1b): its tasks outlive it under their
# muster-shim supervisors, so the supervisors hold the node's lease themselves: once it runs out
# (node_lost_after_s after the scheduler's last answer) each stops its task by itself, before
# the scheduler requeues the gang elsewhere (it waits node_lost_after_s, a margin and the fencing
# time).  So no two attempts of the gang ever run at once, which the tasks' own timestamps show.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "g5.xlarge",
     "gpu_type": "A10G", "gpus_per_node": 1, "price_per_hour": 1}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 4,
  "bind_timeout_s": 10
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 1
start_worker n2 spot-a 1
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# Tasks outlive their worker by design: killed at exit, by pid file.
at_exit kill_pid_files

# Each task writes when it started, and attempt 1 when SIGTERM reached it, in ms, under
# $T/{start,end}.ATTEMPT.RANK.NODE; attempt 1 runs until stopped, attempt 2 exits 0.
cat >"$T/task.sh" <<'SH'
#!/bin/sh
t=$1
tag=$MUSTER_ATTEMPT.$RANK.$MUSTER_NODE
date +%s%3N >"$t/start.$tag.tmp" && mv "$t/start.$tag.tmp" "$t/start.$tag"
[ "$MUSTER_ATTEMPT" = 1 ] || exit 0
echo $$ >"$t/pid.$tag"
trap 'date +%s%3N >"$t/end.$tag.tmp" && mv "$t/end.$tag.tmp" "$t/end.$tag"; exit 0' TERM
while :; do sleep 0.1; done
SH
chmod +x "$T/task.sh"

id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":1,\"max_retries\":0,\"command\":[\"/bin/sh\",\"$T/task.sh\",\"$T\"]}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
wait_for "both tasks of attempt 1 started" 10 '[ "$(ls "$T"/start.1.*.n[12] 2>/dev/null | wc -l)" = 2 ]'
dead_start=$(ls "$T"/start.1.*.n1)
dead_tag=${dead_start#"$T"/start.}
dead_pid=$(cat "$T/pid.$dead_tag")
dead_rank=${dead_tag#1.}
dead_rank=${dead_rank%.n1}
ok "attempt 1 runs on n1 and n2"

# n1's worker dies and stays down; a third node joins so that the gang can move.
old_worker=${WORKER_PID[n1]}
stop_worker n1 KILL
wait "$old_worker" 2>/dev/null || true
kill -0 "$dead_pid" 2>/dev/null || fail "the task on n1 died with its worker"
start_worker n3 spot-a 1

wait_for "job $id succeeded" 90 job_state_is "$id" SUCCEEDED
[ "$(rcli HGET "muster:job:$id" attempt)" = 2 ] || fail "attempt $(rcli HGET "muster:job:$id" attempt)"
[ "$(rcli HGET "muster:job:$id" exit_code)" = 0 ] || fail "exit_code $(rcli HGET "muster:job:$id" exit_code)"
ok "the gang was requeued when n1 was lost and attempt 2 succeeded"

# The task on the dead node was stopped by its supervisor, not by a worker (there is none).
wait_for "the task on the dead node stopped by itself" 30 '[ -s "$T/end.$dead_tag" ]'
wait_for "its process gone" 10 '! kill -0 '"$dead_pid"' 2>/dev/null'
grep -q "self-fencing: the node's lease ran out" "$T/w/n1/logs/$id.1.$dead_rank.err" \
    || fail "the task's log does not say its supervisor fenced it"
grep -q '"fenced":true' "$T/w/n1/tasks/$id.1.$dead_rank.exit" || fail "the exit record does not say fenced"

# No two attempts at once, from the tasks' own clocks: every task of attempt 1 (the fenced one
# on n1 first of all) ended before any task of attempt 2 started.
first2=
for f in "$T"/start.2.*; do
    [ -e "$f" ] || fail "no task of attempt 2 started"
    s=$(cat "$f")
    if [ -z "$first2" ] || [ "$s" -lt "$first2" ]; then first2=$s; fi
done
dead_end=$(cat "$T/end.$dead_tag")
[ "$dead_end" -lt "$first2" ] \
    || fail "the task on the dead node ended at $dead_end, after attempt 2 started at $first2"
for f in "$T"/start.1.*; do
    tag=${f#"$T"/start.}
    [ -s "$T/end.$tag" ] || fail "attempt 1's task $tag never got SIGTERM"
    e=$(cat "$T/end.$tag")
    [ "$e" -lt "$first2" ] || fail "attempt 1's task $tag ended at $e, after attempt 2 started at $first2"
done
ok "attempt 1 ended (n1's task fenced by its supervisor $((first2 - dead_end)) ms before) before attempt 2 started"

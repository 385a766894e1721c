#!/usr/bin/env bash
# Worker crash and restart (issue #5): each task runs under a muster-shim in its own session, so
# `kill -9` of the worker leaves the tasks running.  A worker restarted on the same --state-dir
# re-adopts them (the job stays RUNNING with the same attempt) and reports their true exit
# codes, also for a task that ended while no worker was there.
source "$(dirname "$0")/lib.sh"

# A root test run plays an operator who lets tasks run as root (t4002 checks the refusal).
[ "$(id -u)" = 0 ] && export MUSTER_ALLOW_ROOT=1

start_redis
# Long enough that the scheduler does not declare the node lost while its worker is down.
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 30,
  "bind_timeout_s": 10
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node n1 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# Tasks outlive their worker by design: killed at exit, by pid file.
at_exit kill_pid_files

alive() {
    local f
    for f in "$@"; do
        kill -0 "$(cat "$f")" 2>/dev/null || return 1
    done
}

# ---- 1: the worker dies, the gang keeps running, a new worker re-adopts it ----

id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":4,\"max_retries\":0,\"command\":\"echo \$\$ > $T/pid.a.\$MUSTER_ATTEMPT.\$RANK; while [ ! -e $T/release-a ]; do sleep 0.1; done; exit 0\"}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
wait_for "both tasks wrote their pids" 10 '[ -s "$T/pid.a.1.0" ] && [ -s "$T/pid.a.1.1" ]'
ls "$T"/w/n1/tasks/"$id".1.0.json "$T"/w/n1/tasks/"$id".1.1.json >/dev/null \
    || fail "no task records under $T/w/n1/tasks"

old_worker=${WORKER_PID[n1]}
stop_worker n1 KILL
wait "$old_worker" 2>/dev/null || true
sleep 1
alive "$T/pid.a.1.0" "$T/pid.a.1.1" || fail "the tasks died with their worker"
ok "kill -9 of the worker left both tasks running"

start_worker n1 spot-a 8
wait_for "the new worker re-adopted 2 tasks" 10 \
    '[ "$(grep -c "re-adopted: still running" "$T/worker-n1.log")" = 2 ]'
sleep 2 # a few heartbeats with the restarted worker: nothing may be requeued
[ "$(job_state "$id")" = RUNNING ] || fail "job $id is $(job_state "$id") after the restart"
[ "$(rcli HGET "muster:job:$id" attempt)" = 1 ] || fail "attempt $(rcli HGET "muster:job:$id" attempt)"
alive "$T/pid.a.1.0" "$T/pid.a.1.1" || fail "the re-adopted tasks died"
ok "the restarted worker re-adopted the gang: RUNNING, attempt 1"

: >"$T/release-a"
wait_for "job $id succeeded" 15 job_state_is "$id" SUCCEEDED
[ "$(rcli HGET "muster:job:$id" attempt)" = 1 ] || fail "attempt $(rcli HGET "muster:job:$id" attempt)"
[ "$(rcli HGET "muster:job:$id" exit_code)" = 0 ] || fail "exit_code $(rcli HGET "muster:job:$id" exit_code)"
# The scheduler's KILL acknowledges each exit; the records go with it.
wait_for "records of job $id removed" 10 '! ls "$T"/w/n1/tasks/"$id".* >/dev/null 2>&1'
ok "the re-adopted gang succeeded with attempt 1; its records are gone"

# ---- 2: a task ends with code 3 while no worker is there ----

id=$(submit_json "{\"tasks\":1,\"gpus_per_task\":1,\"max_retries\":1,\"command\":\"echo \$\$ > $T/pid.b.\$MUSTER_ATTEMPT; if [ \$MUSTER_ATTEMPT = 1 ]; then while [ ! -e $T/release-b ]; do sleep 0.1; done; exit 3; fi; exit 0\"}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
wait_for "the task wrote its pid" 10 '[ -s "$T/pid.b.1" ]'
old_worker=${WORKER_PID[n1]}
stop_worker n1 KILL
wait "$old_worker" 2>/dev/null || true
: >"$T/release-b"
wait_for "the shim recorded the exit" 10 '[ -s "$T/w/n1/tasks/$id.1.0.exit" ]'
jq -e '.exit_code == 3 and .signal == 0' "$T/w/n1/tasks/$id.1.0.exit" >/dev/null \
    || fail "exit file: $(cat "$T/w/n1/tasks/$id.1.0.exit")"
[ "$(job_state "$id")" = RUNNING ] || fail "job $id is $(job_state "$id") while no worker reported"

start_worker n1 spot-a 8
wait_for "job $id retried" 15 '[ "$(rcli HGET "muster:job:$id" attempt)" = 2 ]'
rcli XRANGE muster:events - + | has "task 0 on node n1 exited with code 3" \
    || fail "no event tells of the exit code 3"
[ "$(rcli HGET "muster:job:$id" failures)" = 1 ] || fail "failures $(rcli HGET "muster:job:$id" failures)"
wait_for "job $id succeeded on attempt 2" 15 job_state_is "$id" SUCCEEDED
ok "an exit during the worker's absence reached the scheduler as code 3 and counted as a retry"

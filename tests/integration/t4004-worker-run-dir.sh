#!/usr/bin/env bash
# --run-dir (issue #15): the task records and the node's lease live apart from the logs, on a
# directory meant for tmpfs, since they describe processes a reboot ends.  A worker killed and
# restarted on the same --run-dir re-adopts its running task from there; the logs stay in
# --state-dir.  A worker whose records were in the state directory and that comes back with a
# different --run-dir says so, with the flag that would keep them, and that flag re-adopts them.
source "$(dirname "$0")/lib.sh"

# A root test run plays an operator who lets tasks run as root (t4002 checks the refusal).
[ "$(id -u)" = 0 ] && export MUSTER_ALLOW_ROOT=1

start_redis
# Long enough that the scheduler does not judge a node lost while its worker is down.
make_config --with '{"node_lost_after_s": 30}' >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8 --run-dir "$T/r/n1"
wait_for "node n1 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# Tasks outlive their worker by design: killed at exit, by pid file.
at_exit kill_pid_files

# ---- 1: records and lease in the run directory, logs in the state directory ----

id=$(submit_json "{\"tasks\":1,\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"echo started; echo \$\$ > $T/pid.a.\$MUSTER_ATTEMPT; while [ ! -e $T/release-a ]; do sleep 0.1; done; exit 0\"}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
wait_for "the task wrote its pid" 10 '[ -s "$T/pid.a.1" ]'
wait_for "the task record in $T/r/n1/tasks" 10 '[ -s "$T/r/n1/tasks/$id.1.0.json" ]'
[ -s "$T/r/n1/lease" ] || fail "no lease in $T/r/n1"
[ ! -e "$T/w/n1/tasks" ] && [ ! -e "$T/w/n1/lease" ] \
    || fail "the state directory holds run files: $(ls "$T/w/n1")"
wait_for "the task's log in the state directory" 10 'grep -q started "$T/w/n1/logs/$id.1.0.out"'
ok "the record and the lease are in --run-dir, the log in --state-dir"

old_worker=${WORKER_PID[n1]}
stop_worker n1 KILL
wait "$old_worker" 2>/dev/null || true
start_worker n1 spot-a 8 --run-dir "$T/r/n1"
wait_for "the new worker re-adopted the task" 10 'grep -q "re-adopted: still running" "$T/worker-n1.log"'
: >"$T/release-a"
wait_for "job $id succeeded" 15 job_state_is "$id" SUCCEEDED
[ "$(rcli HGET "muster:job:$id" attempt)" = 1 ] || fail "attempt $(rcli HGET "muster:job:$id" attempt)"
wait_for "records of job $id removed" 10 '! ls "$T"/r/n1/tasks/"$id".* >/dev/null 2>&1'
ok "a worker restarted on the same --run-dir re-adopted the task; it succeeded with attempt 1"

# ---- 2: records left in the state directory, the worker back with a --run-dir ----

stop_worker n1
start_worker n1 spot-a 8
# The scheduler answered this worker's HELLO (a BIND before it would go to the stopped one).
wait_for "the third worker registered" 10 '[ "$(grep -c "scheduler epoch 1 (was 0)" "$T/worker-n1.log")" = 3 ]'
id=$(submit_json "{\"tasks\":1,\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"echo \$\$ > $T/pid.b.\$MUSTER_ATTEMPT; exec sleep 600\"}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
wait_for "the task wrote its pid" 10 '[ -s "$T/pid.b.1" ]'
wait_for "the record in the state directory (no --run-dir)" 10 '[ -s "$T/w/n1/tasks/$id.1.0.json" ]'
old_worker=${WORKER_PID[n1]}
stop_worker n1 KILL
wait "$old_worker" 2>/dev/null || true
start_worker n1 spot-a 8 --run-dir "$T/r/n1"
wait_for "the worker names the records it leaves" 10 \
    'grep -q "1 task record(s) in .$T/w/n1/tasks.*restart with --run-dir $T/w/n1\$" "$T/worker-n1.log"'
ok "a worker moved to a new --run-dir says which records it leaves and how to keep them"

# ---- 3: the advice works: --run-dir naming the state directory re-adopts the records there ----

old_worker=${WORKER_PID[n1]}
stop_worker n1 KILL
wait "$old_worker" 2>/dev/null || true
warned=$(grep -c "task record(s) in" "$T/worker-n1.log")
start_worker n1 spot-a 8 --run-dir "$T/w/n1"
wait_for "the worker re-adopted the task from the state directory" 10 \
    '[ "$(grep -c "re-adopted: still running" "$T/worker-n1.log")" = 2 ]'
[ "$(grep -c "task record(s) in" "$T/worker-n1.log")" = "$warned" ] \
    || fail "warned about records in its own run directory: $(grep "task record(s) in" "$T/worker-n1.log" | tail -1)"
ok "--run-dir naming the state directory re-adopts the records there, without the warning"

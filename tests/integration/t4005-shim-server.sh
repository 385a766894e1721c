#!/usr/bin/env bash
# The shim server (muster-shim --serve): the worker starts it once, and each task's shim is forked
# from it rather than executed.  Its faults must not reach the tasks or stop the next start:
#   1. killed while a task runs: the task goes on and its exit is reported; the next task starts
#      under a new server;
#   2. frozen: the next task still starts (the worker kills the server that does not answer);
#   3. the worker is killed: the server leaves by itself, the task's shim stays and is re-adopted
#      by its pid and start time.
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] && export MUSTER_ALLOW_ROOT=1

start_redis
make_config --with '{"node_lost_after_s": 30}' >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node n1 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
at_exit kill_pid_files

# The worker's shim server: its child with --serve.
server_pid() {
    pgrep -P "${WORKER_PID[n1]}" -f -- '--serve' || true
}

# held NAME [SECONDS]: a job whose one task writes its pid to pid.NAME and waits for the file
# release-NAME, RUNNING within SECONDS (15) and its pid written; its id in $job.
held() {
    job=$(submit_json "{\"gpus_per_task\":1,\"max_retries\":0,\"command\":\"echo \$\$ > $T/pid.$1; while [ ! -e $T/release-$1 ]; do sleep 0.1; done; exit 0\"}")
    wait_for "job $job running" "${2:-15}" job_state_is "$job" RUNNING
    wait_for "task $1 wrote its pid" 10 '[ -s "$T/pid.'"$1"'" ]'
}

# release NAME JOB: lets held NAME's task end, and waits for JOB to succeed.
release() {
    : >"$T/release-$1"
    wait_for "job $2 succeeded" 15 job_state_is "$2" SUCCEEDED
}

# ---- 1: the server is killed while a task runs ----

held a
a=$job
srv=$(server_pid)
[ -n "$srv" ] || fail "no shim server under worker ${WORKER_PID[n1]}"
grep -q "job=$a .*started pid=$(cat "$T/pid.a")" "$T/worker-n1.log" || fail "no start line for $a"
kill -KILL "$srv"
wait_for "the worker noticed the server's end" 10 \
    'grep -q "shim server (pid $srv) ended (signal 9)" "$T/worker-n1.log"'
kill -0 "$(cat "$T/pid.a")" || fail "task a died with the shim server"
release a "$a"
ok "kill -9 of the shim server: the running task went on and its exit was reported"

held b
b=$job
srv2=$(server_pid)
[ -n "$srv2" ] && [ "$srv2" != "$srv" ] || fail "no new shim server (was $srv, now '$srv2')"
shim=$(sed -n "s/.*job=$b task=0 attempt=1 started pid=[0-9]* shim=\([0-9]*\).*/\1/p" "$T/worker-n1.log")
[ "$(ps -o ppid= -p "$shim" | tr -d ' ')" = "$srv2" ] || fail "job $b's shim $shim is not the server's child"
release b "$b"
ok "the next task's shim was forked by a new shim server ($srv2)"

# ---- 2: the server freezes ----

kill -STOP "$srv2"
held c 30
c=$job
wait_for "the frozen server was killed" 10 '! kill -0 "$srv2" 2>/dev/null'
grep -q "shim server (pid $srv2) ended (signal 9)" "$T/worker-n1.log" \
    || fail "the worker did not say it ended the frozen server"
release c "$c"
ok "a frozen shim server: the worker killed it and the task started anyway"

# ---- 3: the worker is killed ----

held d
d=$job
srv3=$(server_pid)
[ -n "$srv3" ] || fail "no shim server for job $d"
stop_worker n1 KILL
wait_for "the shim server left with its worker" 10 '! kill -0 "$srv3" 2>/dev/null'
kill -0 "$(cat "$T/pid.d")" || fail "task d died with its worker"
start_worker n1 spot-a 8
wait_for "the task was re-adopted" 10 'grep -q "job=$d task=0 attempt=1 re-adopted: still running" "$T/worker-n1.log"'
release d "$d"
[ "$(rcli HGET "muster:job:$d" attempt)" = 1 ] || fail "attempt $(rcli HGET "muster:job:$d" attempt)"
ok "kill -9 of the worker: the server left, the shim stayed and was re-adopted by pid and start time"

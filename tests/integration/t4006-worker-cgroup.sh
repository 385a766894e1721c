#!/usr/bin/env bash
# A job stays in its box (issue #46): a root worker puts each task in cgroups of its own.  A
# process that daemonises (setsid) is killed with its task, on a cancel and on the task's own
# exit, at its time limit, when preempted and when its worker fences itself, and the next job
# on those GPUs starts only after it is gone; a task over its
# memory_mb_per_task is OOM-killed and the job's reason says so; a task cannot open a GPU
# device it was not given.  Skipped where the worker finds no writable cgroups (not root, none
# mounted): its start line says so.
if [ "$(id -u)" != 0 ]; then
    echo "ok t4006-worker-cgroup # skip: needs root for cgroups"
    exit 0
fi
source "$(dirname "$0")/lib.sh"

start_redis
make_config --with '{"min_runtime_s": 0}' >/dev/null # preemption below, at once
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "n1 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
wait_for "the worker's cgroup line" 10 'grep -q "cgroups" "$T/worker-n1.log"'
if ! grep -q "per-task cgroups: v" "$T/worker-n1.log"; then
    echo "ok t4006-worker-cgroup # skip: $(grep -o 'no per-task cgroups: [^;]*' "$T/worker-n1.log")"
    exit 0
fi
grep -q "per-task cgroups: v1" "$T/worker-n1.log" && v1=1 || v1=0
want=cgroup-v2
[ "$v1" = 1 ] && want=cgroup-v1
ctl -o json nodes | jq -e --arg w "$want" '.[] | select(.name == "n1") | .confinement == $w' >/dev/null ||
    fail "musterctl nodes does not say $want: $(ctl -o json nodes)"
ok "the worker reports its tasks' confinement in HELLO: musterctl -o json nodes says $want"

# A worker without cgroups says so, at start and in musterctl nodes.
start_worker n0 od-a 8 --cgroup-root ''
wait_for "n0 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
grep -q "per-task cgroups off" "$T/worker-n0.log" || fail "n0's start line: $(cat "$T/worker-n0.log")"
ctl nodes | has -E "^n0 .*no cgroups: tasks are confined by process group only" ||
    fail "musterctl nodes does not say n0 has no cgroups: $(ctl nodes)"
stop_worker n0
ctl node forget n0 >/dev/null || fail "forget n0"
ok "a worker without cgroups says so at start and in musterctl nodes"

state_of() { # pid -> its state letter, "" once it is gone (a zombie is "Z": not gone)
    awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null || true
}

# ---- cancel: a daemonised process goes with its task, before the next job starts ----
id=$(submit_json "{\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"setsid sleep 97 & echo \$! > $T/a.pid; sleep 300\"}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
wait_for "the daemon's pid" 10 "[ -s $T/a.pid ]"
apid=$(cat "$T/a.pid")
[ -n "$(state_of "$apid")" ] || fail "the daemon $apid is not running"
[ "$(ps -o sid= -p "$apid" | tr -d ' ')" = "$apid" ] || fail "sleep $apid did not leave its session"
grep -q "/$MUSTER_CGROUP_ROOT/n1/$id.1.0\$" "/proc/$apid/cgroup" ||
    fail "the daemon is not in its task's cgroup: $(cat "/proc/$apid/cgroup")"
# The next job needs the same GPUs: it may start only once the daemon is gone.
next=$(submit_json "{\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"awk '{ print \$3 }' /proc/$apid/stat > $T/b.seen 2>/dev/null; echo started >> $T/b.seen\"}")
ctl cancel "$id" >/dev/null
wait_for "job $id cancelled" 15 job_state_is "$id" CANCELLED
wait_for "job $next succeeded" 15 job_state_is "$next" SUCCEEDED
[ -z "$(state_of "$apid")" ] || fail "the daemon $apid outlived its cancelled task: state $(state_of "$apid")"
[ "$(cat "$T/b.seen")" = started ] ||
    fail "the next job on those GPUs started while the daemon still ran: $(cat "$T/b.seen")"
ok "cancel: the setsid daemon was killed with its task; the next job started after it was gone"

# ---- the task's own exit: what it left behind is killed before the exit is reported ----
id=$(submit_json "{\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"setsid sleep 98 & echo \$! > $T/c.pid; exit 0\"}")
wait_for "job $id succeeded" 15 job_state_is "$id" SUCCEEDED
cpid=$(cat "$T/c.pid")
[ -z "$(state_of "$cpid")" ] || fail "the daemon $cpid outlived its task's exit: state $(state_of "$cpid")"
for d in /sys/fs/cgroup/*/"$MUSTER_CGROUP_ROOT"/n1/"$id".1.0 /sys/fs/cgroup/"$MUSTER_CGROUP_ROOT"/n1/"$id".1.0; do
    [ ! -d "$d" ] || fail "the task's cgroup '$d' was not removed"
done
ok "exit: the daemon left behind was killed and the task's cgroups removed before the exit was reported"

# ---- memory_mb_per_task: over it, the kernel's OOM killer, and the reason says so ----
id=$(submit_json '{"gpus_per_task":1,"memory_mb_per_task":64,"max_retries":0,"command":"head -c 400000000 /dev/zero | tail > /dev/null"}')
wait_for "job $id failed" 30 job_state_is "$id" FAILED
reason=$(rcli HGET "muster:job:$id" error)
echo "$reason" | has "out of memory (memory_mb_per_task 64)" || fail "reason: $reason"
ok "a task over memory_mb_per_task 64 was OOM-killed: $reason"

# ---- cpus_per_task and memory_mb_per_task are the task's group's own limits ----
id=$(submit_json '{"gpus_per_task":1,"cpus_per_task":1,"memory_mb_per_task":100,"max_retries":0,"command":"sleep 300"}')
wait_for "job $id running" 15 job_state_is "$id" RUNNING
if [ "$v1" = 1 ]; then
    g=$MUSTER_CGROUP_ROOT/n1/$id.1.0
    wait_for "the task's cpu group" 10 "[ -d /sys/fs/cgroup/cpu/$g ] || [ -d /sys/fs/cgroup/cpu,cpuacct/$g ]"
    quota=$(cat /sys/fs/cgroup/cpu/"$g"/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu,cpuacct/"$g"/cpu.cfs_quota_us)
    [ "$quota" = 100000 ] || fail "cpu.cfs_quota_us: '$quota', want 100000 (1 CPU of a 100000 us period)"
    limit=$(cat /sys/fs/cgroup/memory/"$g"/memory.limit_in_bytes)
    [ "$limit" = 104857600 ] || fail "memory.limit_in_bytes: '$limit', want 104857600"
    ok "cpus_per_task 1 and memory_mb_per_task 100: cpu.cfs_quota_us $quota, memory.limit_in_bytes $limit"
else
    ok "limits: v2's cpu.max and memory.max are checked by hand (docs/muster-worker.md)"
fi
ctl cancel "$id" >/dev/null
wait_for "job $id cancelled" 15 job_state_is "$id" CANCELLED

# ---- GPU devices (v1's devices controller): only the task's own can be opened ----
if [ "$v1" = 1 ]; then
    mkdir "$T/dev"
    for i in 0 1 2 3 4 5 6 7; do mknod "$T/dev/nvidia$i" c 195 "$i"; done
    # A stand-in node without a driver: an allowed open fails ENXIO, a denied one EPERM.
    cmd='for i in 0 1 2 3 4 5 6 7; do if (: < '"$T"'/dev/nvidia$i) 2>&1 | grep -q "Operation not permitted"; then echo "$i denied"; else echo "$i allowed"; fi; done > '"$T"'/dev.seen; echo "$CUDA_VISIBLE_DEVICES" > '"$T"'/dev.mine'
    id=$(submit_json "$(jq -cn --arg c "$cmd" '{gpus_per_task:2,max_retries:0,command:$c}')")
    wait_for "job $id succeeded" 15 job_state_is "$id" SUCCEEDED
    mine=",$(cat "$T/dev.mine"),"
    while read -r i verdict; do
        case "$mine" in
        *",$i,"*) [ "$verdict" = allowed ] || fail "its own GPU $i was refused (mine: $mine)" ;;
        *) [ "$verdict" = denied ] || fail "GPU $i, not its own, could be opened (mine: $mine)" ;;
        esac
    done <"$T/dev.seen"
    [ "$(wc -l <"$T/dev.seen")" = 8 ] || fail "dev.seen: $(cat "$T/dev.seen")"
    ok "devices: the task opened its GPUs $mine only; the others were refused (EPERM)"
else
    ok "devices: v2's device program is checked by tests/unit/test_wrk_cgroup_dev (a cgroup2 mount of its own)"
fi

# ---- time limit, preemption, self-fencing: whoever stops the task, its daemon goes too ----
daemon_job() { # daemon_job NAME JSON_EXTRA: a job whose task leaves a setsid daemon ($T/NAME.pid)
    local id
    id=$(submit_json "{$2\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"setsid sleep 99 & echo \$! > $T/$1.pid; sleep 300\"}")
    wait_for "job $id running" 15 job_state_is "$id" RUNNING
    wait_for "the daemon's pid" 10 "[ -s $T/$1.pid ]"
    [ -n "$(state_of "$(cat "$T/$1.pid")")" ] || fail "the daemon of job $id is not running"
    echo "$id"
}
id=$(daemon_job t '"time_limit_s":2,')
wait_for "job $id timed out" 30 job_state_is "$id" TIMEOUT
[ -z "$(state_of "$(cat "$T/t.pid")")" ] || fail "the daemon outlived its task's time limit"
ok "time limit: the daemon was killed with its task"

low=$(daemon_job p '"priority":0,')
ppid=$(cat "$T/p.pid") # the requeued job writes its next attempt's daemon there
high=$(submit_json "{\"priority\":10,\"gpus_per_task\":8,\"max_retries\":0,\"command\":\"awk '{ print \$3 }' /proc/$ppid/stat > $T/p.seen 2>/dev/null; echo started >> $T/p.seen\"}")
wait_for "job $high (preempting $low) succeeded" 40 job_state_is "$high" SUCCEEDED
[ -z "$(state_of "$ppid")" ] || fail "the daemon outlived its preempted task"
[ "$(cat "$T/p.seen")" = started ] || fail "the preemptor started while the daemon still ran: $(cat "$T/p.seen")"
ctl cancel "$low" >/dev/null
wait_for "job $low cancelled" 20 job_state_is "$low" CANCELLED
ok "preemption: the daemon was gone before the preempting job started"

# Self-fencing: a worker without the Redis witness, its scheduler frozen: the lease runs out
# and the task's own supervisor stops it, daemon included.
stop_worker n1
start_worker n1 spot-a 8 --redis ''
wait_for "n1 back" 15 'ctl -o json nodes | jq -e ".[] | select(.name == \"n1\") | .state == \"ready\"" >/dev/null'
id=$(daemon_job f '')
kill -STOP "$MUSTERD_PID"
wait_for "the daemon gone with its fenced task" 40 '[ -z "$(state_of "$(cat "$T/f.pid")")" ]'
kill -CONT "$MUSTERD_PID"
grep -q "self-fencing: the node's lease ran out" "$T/w/n1/logs/$id.1.0.err" ||
    fail "the task was not stopped by self-fencing: $(cat "$T/w/n1/logs/$id.1.0.err")"
ok "self-fencing: the daemon was killed with its task when the lease ran out"

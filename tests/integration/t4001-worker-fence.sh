#!/usr/bin/env bash
# Self-fencing (issue #5 "node lost"): a worker that hears nothing from the scheduler for the
# lease (the scheduler's node_lost_after_s, sent as lease_s in every HEARTBEAT) stops its own
# tasks, checkpoint signal first, so that a requeued attempt never runs beside them.  The
# scheduler is frozen with SIGSTOP, so the worker's socket stays connected and only silence
# tells it.
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] && export MUSTER_ALLOW_ROOT=1

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 4,
  "bind_timeout_s": 10
}
JSON
start_musterd "$CONFIG"
# No witness (--redis ''): once the frozen musterd's leader key expired, a worker with one would
# see that nobody leads and hold its lease (t0416); this test is about the lease alone.
start_worker n1 spot-a 8 --redis ''
wait_for "node n1 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# Tasks outlive their worker by design, and a stopped musterd must not outlive the test.
at_exit '[ -n "$MUSTERD_PID" ] && kill -CONT "$MUSTERD_PID" 2>/dev/null'
at_exit kill_pid_files

# Job a is checkpointable: its trap writes a checkpoint on SIGUSR1, and it ignores SIGTERM, so
# only the checkpoint signal and the final SIGKILL reach it.  Job b is not: SIGTERM stops it.
# A later attempt of either just records what it resumes from.
a=$(submit_json "{\"gpus_per_task\":1,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":2},\"command\":\"if [ \$MUSTER_ATTEMPT != 1 ]; then echo \\\"\$MUSTER_RESUME_FROM\\\" > $T/resume.a; exit 0; fi; trap '' TERM; trap ': > $T/ckpt-fenced; echo $T/ckpt-fenced > $T/ck.tmp; mv $T/ck.tmp \$MUSTER_CHECKPOINT_FILE; date +%s%N > $T/usr1.a' USR1; echo \$\$ > $T/pid.a; while :; do sleep 0.1; done\"}")
b=$(submit_json "{\"gpus_per_task\":1,\"command\":\"if [ \$MUSTER_ATTEMPT != 1 ]; then exit 0; fi; echo \$\$ > $T/pid.b; exec sleep 300\"}")
wait_for "jobs running" 15 'job_state_is "$a" RUNNING && job_state_is "$b" RUNNING'
wait_for "both tasks wrote their pids" 10 '[ -s "$T/pid.a" ] && [ -s "$T/pid.b" ]'
pa=$(cat "$T/pid.a")
pb=$(cat "$T/pid.b")

kill -STOP "$MUSTERD_PID"
stopped_at=$(date +%s)
wait_for "the worker fences itself" 10 'grep -q "SELF-FENCING" "$T/worker-n1.log"'
fenced_after=$(($(date +%s) - stopped_at))
[ "$fenced_after" -ge 3 ] || fail "fenced after ${fenced_after}s, before the 4 s lease"
wait_for "task a checkpointed" 5 '[ -s "$T/usr1.a" ]'
[ "$(cat "$T/w/n1/ckpt/$a.1.0")" = "$T/ckpt-fenced" ] || fail "checkpoint file: $(cat "$T/w/n1/ckpt/$a.1.0")"
gone() { ! kill -0 "$1" 2>/dev/null; }
wait_for "task b stopped (SIGTERM)" 5 gone "$pb"
wait_for "task a stopped (SIGKILL after the grace)" 15 gone "$pa"
grep -q "job=$a task=0 attempt=1 checkpoint '$T/ckpt-fenced'" "$T/worker-n1.log" \
    || fail "the worker did not notice the checkpoint"
ok "after ${fenced_after}s of silence the worker checkpointed and stopped its tasks"

kill -CONT "$MUSTERD_PID"
wait_for "the worker hears the scheduler again" 15 'grep -q "scheduler back" "$T/worker-n1.log"'
wait_for "job $a succeeded on a later attempt" 30 job_state_is "$a" SUCCEEDED
wait_for "job $b succeeded on a later attempt" 30 job_state_is "$b" SUCCEEDED
[ "$(rcli HGET "muster:job:$a" attempt)" -ge 2 ] || fail "job $a attempt $(rcli HGET "muster:job:$a" attempt)"
ok "both gangs ran again once the scheduler was back"
[ "$(cat "$T/resume.a")" = "$T/ckpt-fenced" ] || fail "attempt 2 resumed from '$(cat "$T/resume.a")'"
ok "the next attempt resumed from the checkpoint written while fencing"

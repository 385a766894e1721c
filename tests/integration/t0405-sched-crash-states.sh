#!/usr/bin/env bash
# kill -9 musterd mid-bind and mid-preemption (issue #5):
#  1. A half-bound gang (one task started, the other's BIND lost with its worker) is rolled
#     back: after the restart the started task is stopped, and only once it is gone does the gang
#     run again, as attempt 2, not counted as a failure.  No attempt's task runs twice.
#  2. A gang being preempted (checkpoint signal sent, checkpoint not written yet) is adopted and
#     its stop carried on: it checkpoints, goes back to PENDING as attempt 2, the preemptor runs,
#     and attempt 2 resumes from the checkpoint.
#  3. musterd stays down longer than the lease: the workers fence their tasks (checkpoint
#     signal, then SIGTERM), and the workers are restarted meanwhile.  After the restart the gangs
#     are requeued, not failed, whatever their exit said (a killed task, and one that
#     checkpointed and exited 0), and resume from the checkpoint.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 5, "bind_timeout_s": 30, "min_runtime_s": 0,
  "kill_grace_s": 2
}
JSON
start_musterd "$CONFIG"
# No witness (--redis ''): with it the workers would hold their leases while no musterd leads
# (t0416); part 3 checks what a worker without one does when musterd stays away.
start_worker n1 spot-a 8 --redis ''
start_worker n2 spot-a 8 --redis ''
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
mkdir -p "$T/ran"
now_ns() { date +%s%N; }

# ---- 1: mid-bind ----
# Each (attempt, rank) marks itself with noclobber; attempt 1 runs until stopped and notes when
# (once: a stop may signal it again, as KILL is idempotent, and the note must not be cut short).
# The start mark appears whole (written aside, then renamed) and only once the trap is set, so
# the test never stops a task that could not yet note its stop.
# shellcheck disable=SC1078,SC1079 # a two-line task script, quoted across the line on purpose
cmd1='set -C; : > '"$T"'/ran/half.$MUSTER_ATTEMPT.$RANK || echo dup >> '"$T"'/dup
[ $MUSTER_ATTEMPT != 1 ] || trap "trap '' TERM; set +C; date +%s%N > '"$T"'/half.stop.\$RANK; exit 143" TERM
date +%s%N > '"$T"'/half.mark.$MUSTER_ATTEMPT.$RANK && mv '"$T"'/half.mark.$MUSTER_ATTEMPT.$RANK '"$T"'/half.start.$MUSTER_ATTEMPT.$RANK
[ $MUSTER_ATTEMPT = 1 ] || exit 0
while :; do sleep 0.1; done'
kill -STOP "${WORKER_PID[n2]}"
half=$(submit_json "$(jq -cn --arg c "$cmd1" '{name: "half", tasks: 2, gpus_per_task: 8, command: $c}')")
wait_for "one task of half started" 10 '[ -n "$(ls "$T"/half.start.1.* 2>/dev/null)" ]'
[ "$(job_state "$half")" = STARTING ] || fail "half is $(job_state "$half"), expected STARTING"
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
kill -9 "${WORKER_PID[n2]}" # its BIND dies with it, unread
wait "${WORKER_PID[n2]}" 2>/dev/null || true
start_worker n2 spot-a 8 --redis ''
start_musterd "$CONFIG"
wait_for "half succeeded" 40 job_state_is "$half" SUCCEEDED
[ "$(rcli HGET "muster:job:$half" attempt)" = 2 ] || fail "half attempt $(rcli HGET "muster:job:$half" attempt)"
[ "$(rcli HGET "muster:job:$half" failures)" = 0 ] || fail "the rollback counted as a failure"
[ ! -e "$T/dup" ] || fail "a task of one attempt ran twice"
[ "$(ls "$T"/ran/half.1.* | wc -l)" = 1 ] || fail "attempt 1 ran: $(ls "$T"/ran)"
started=$(ls "$T"/half.start.1.*)
rank=${started##*.}
[ -s "$T/half.stop.$rank" ] || fail "attempt 1's rank $rank was never stopped"
for r in 0 1; do
    [ "$(cat "$T/half.start.2.$r")" -gt "$(cat "$T/half.stop.$rank")" ] ||
        fail "attempt 2 rank $r started before attempt 1 rank $rank stopped"
done
grep -q "job=$half attempt=1 adopted after the restart (STARTING)" "$T/musterd.log" || fail "no adoption logged"
ok "a half-bound gang was rolled back (its started task stopped first) and ran once as attempt 2"

# ---- 2: mid-preemption ----
# On SIGUSR1 the victim writes its checkpoint only once the test lets it (a file), so that
# musterd surely dies in between, however slow the machine.
cmd2='if [ -n "${MUSTER_RESUME_FROM:-}" ]; then echo "$MUSTER_ATTEMPT $(cat $MUSTER_RESUME_FROM)" >> '"$T"'/resumed.$RANK; exit 0; fi
on_usr1() { echo "$MUSTER_ATTEMPT" >> '"$T"'/usr1.$RANK; while [ ! -e '"$T"'/release-ck ]; do sleep 0.1; done; echo 42 > '"$T"'/ck.$RANK
  echo '"$T"'/ck.$RANK > $MUSTER_CHECKPOINT_FILE.tmp; mv $MUSTER_CHECKPOINT_FILE.tmp $MUSTER_CHECKPOINT_FILE; exit 0; }
trap on_usr1 USR1
echo "$MUSTER_ATTEMPT" >> '"$T"'/low.$RANK
while :; do sleep 0.1; done'
low=$(submit_json "$(jq -cn --arg c "$cmd2" '{name: "low", priority: 1, tasks: 2, gpus_per_task: 8, checkpoint: {signal: "SIGUSR1", grace_s: 20}, command: $c}')")
wait_for "low running" 10 job_state_is "$low" RUNNING
high=$(submit_json "{\"name\":\"high\",\"priority\":10,\"tasks\":2,\"gpus_per_task\":8,\"command\":\"touch $T/high.\$RANK\"}")
wait_for "low got its checkpoint signal" 10 '[ -s "$T/usr1.0" ] && [ -s "$T/usr1.1" ]'
[ "$(job_state "$low")" = PREEMPTING ] || fail "low is $(job_state "$low"), expected PREEMPTING"
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
start_musterd "$CONFIG"
: >"$T/release-ck"
wait_for "high succeeded" 30 job_state_is "$high" SUCCEEDED
wait_for "low succeeded" 30 job_state_is "$low" SUCCEEDED
[ "$(rcli HGET "muster:job:$low" attempt)" = 2 ] || fail "low attempt $(rcli HGET "muster:job:$low" attempt)"
failures=$(rcli HGET "muster:job:$low" failures)
[ "${failures:-0}" = 0 ] || fail "the preemption counted as a failure ($failures)"
for r in 0 1; do
    [ "$(cat "$T/low.$r")" = 1 ] || fail "low rank $r attempt 1 ran: $(cat "$T/low.$r")"
    [ "$(cat "$T/resumed.$r" 2>/dev/null)" = "2 42" ] || fail "low rank $r attempt 2 resumed: '$(cat "$T/resumed.$r" 2>/dev/null)'"
done
grep -q "job=$low attempt=1 adopted after the restart (PREEMPTING)" "$T/musterd.log" || fail "no adoption logged"
ok "a gang caught mid-preemption was adopted, checkpointed, and resumed from it as attempt 2; the preemptor ran"

# ---- 3: down longer than the lease (node_lost_after_s = 5 s) ----
plain=$(submit_json "{\"name\":\"plain\",\"max_retries\":0,\"tasks\":1,\"gpus_per_task\":8,\"command\":\"[ \$MUSTER_ATTEMPT = 1 ] || exit 0; exec sleep 300\"}")
train="$MUSTER_SRC/tests/integration/tasks/train.sh"
mkdir -p "$T/out"
ck=$(submit_json "{\"name\":\"ck\",\"max_retries\":0,\"tasks\":1,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":5},\"command\":[\"$train\",\"$T/out\",\"150\"]}")
wait_for "plain and ck running" 10 'job_state_is "$plain" RUNNING && job_state_is "$ck" RUNNING'
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
wait_for "both workers fenced" 15 'grep -q SELF-FENCING "$T/worker-n1.log" && grep -q SELF-FENCING "$T/worker-n2.log"'
wait_for "ck checkpointed on the fencing signal" 10 '[ -s "$T/out/signal.0" ]'
sleep 1 # plain's SIGTERM lands
# The gangs are now known only from the workers' records: fencing marks and checkpoints included.
for n in n1 n2; do
    kill -9 "${WORKER_PID[$n]}"
    wait "${WORKER_PID[$n]}" 2>/dev/null || true
    start_worker "$n" spot-a 8 --redis ''
done
start_musterd "$CONFIG"
wait_for "plain succeeded" 30 job_state_is "$plain" SUCCEEDED
wait_for "ck succeeded" 30 job_state_is "$ck" SUCCEEDED
for j in "$plain" "$ck"; do
    [ "$(rcli HGET "muster:job:$j" attempt)" = 2 ] || fail "job $j attempt $(rcli HGET "muster:job:$j" attempt)"
done
grep -q "attempt 2 resumed from" "$T/out/resume.0" || fail "ck did not resume from its checkpoint"
rcli XRANGE muster:events - + | has "stopped by the node's self-fencing" || fail "no event says why"
ok "after an outage longer than the lease the fenced gangs were requeued (max_retries 0), not failed, and ck resumed"

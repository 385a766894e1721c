#!/usr/bin/env bash
# High availability (issue #14): the leader is frozen (kill -STOP) past its lease while its gang
# ends, so the exit reaches it, or the standby, while it cannot act.  The standby takes over and
# records the end.  Thawed (kill -CONT), the old leader must not write a single field: the job's
# hash and events, the leader key and the epoch are as the new leader left them; and it steps
# down (exits with status 1, saying so) instead of driving the workers.
source "$(dirname "$0")/lib.sh"

start_redis
make_config --with '{"leader_lease_s": 3, "node_lost_after_s": 20}' >/dev/null
start_musterd_ha a "$CONFIG"
wait_for "musterd a leads" 10 '[ "$(leader_pid)" = "${HA_PID[a]}" ]'
start_musterd_ha b "$CONFIG"
wait_for "musterd b stands by" 10 'grep -q "standing by" "$T/musterd-b.log"'
SCHED_ENDPOINTS="tcp://127.0.0.1:${HA_PORT[a]},tcp://127.0.0.1:${HA_PORT[b]}"
export SCHED_ENDPOINTS
mkdir -p "$T/ran"
start_worker n1 spot-a 8
wait_for "node registered" 15 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

mark='set -C; : > '"$T"'/ran/$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK 2>/dev/null || echo "$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK" >> '"$T"'/dup'
id=$(submit_json "$(jq -cn --arg c "$mark; sleep 2" '{command: $c, tasks: 2, gpus_per_task: 4, max_retries: 0}')")
wait_for "the gang running" 15 job_state_is "$id" RUNNING
epoch_a=$(rcli HGET muster:leadership epoch)

kill -STOP "${HA_PID[a]}"
wait_for "musterd b leads" 30 '[ "$(leader_pid)" = "${HA_PID[b]}" ]'
wait_for "the gang's end recorded by the new leader" 30 job_state_is "$id" SUCCEEDED
epoch_b=$(rcli HGET muster:leadership epoch)
[ "$epoch_b" -gt "$epoch_a" ] || fail "epoch did not move on: $epoch_a then $epoch_b"
ok "the standby took over from the frozen leader (epoch $epoch_a -> $epoch_b)"

job_now() {
    rcli HGETALL "muster:job:$id" | paste - - | sort
    echo "events: $(rcli XRANGE muster:events - + | grep -cx -- "$id")"
}
job_now >"$T/job.before"
leader_before=$(rcli GET muster:leader)
epoch_before=$(rcli GET muster:epoch)

kill -CONT "${HA_PID[a]}"
wait_for "the old leader to step down" 30 '! kill -0 "${HA_PID[a]}" 2>/dev/null'
rc=0
wait "${HA_PID[a]}" || rc=$?
[ "$rc" = 1 ] || fail "the old leader exited with status $rc, expected 1"
grep -q "stepping down" "$T/musterd-a.log" || fail "the old leader did not say it steps down"
ok "thawed, the old leader stepped down (exit 1)"

job_now >"$T/job.after"
diff "$T/job.before" "$T/job.after" >"$T/job.diff" || fail "the old leader changed job $id: $(cat "$T/job.diff")"
[ "$(rcli GET muster:leader)" = "$leader_before" ] || fail "leader key changed: $(rcli GET muster:leader)"
[ "$(rcli GET muster:epoch)" = "$epoch_before" ] || fail "epoch changed: $(rcli GET muster:epoch)"
[ ! -e "$T/dup" ] || fail "a task of the same attempt ran twice: $(cat "$T/dup")"
[ "$(job_field "$id" attempt)" = 1 ] || fail "the gang was restarted: attempt $(job_field "$id" attempt)"
ok "the old leader wrote nothing after the takeover"

id2=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "new work through the new leader" 30 job_state_is "$id2" SUCCEEDED
ok "the new leader keeps scheduling"

#!/usr/bin/env bash
# High availability (issue #14): every write musterd makes is fenced by the leader key.  Here
# another holder takes muster:leader (and the epoch) behind a running musterd's back, as a
# standby would after this one stalled; its next write (a new submission's job) is refused by
# Redis as a whole, and it steps down: it exits 1 saying so, the job is not stored, and the
# submission stays unacknowledged for the next leader, which takes and runs it.
source "$(dirname "$0")/lib.sh"

start_redis
# A long lease: the renewal (every 20 s) does not get in first, the fenced write does.  So that
# the node status, written every heartbeat_s and after each change, does not either: heartbeats
# a minute apart, and the writes of the first job's start and end (a cancel) seen done before
# the lease is taken.
make_config --with '{"leader_lease_s": 60, "heartbeat_s": 60, "node_lost_after_s": 180}' >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
id=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["sleep","600"]}')
wait_for "the first job shown on its node" 10 '[ "$(rcli HGET muster:nodes n1 | jq -r ".jobs[0]")" = "'"$id"'" ]'
ctl cancel "$id" >/dev/null
wait_for "a first job through" 10 job_state_is "$id" CANCELLED
wait_for "the node shown idle" 10 '[ "$(rcli HGET muster:nodes n1 | jq -r ".jobs | length")" = 0 ]'
[ "$(ctl -o json status | jq -r .pid)" = "$MUSTERD_PID" ] || fail "musterd does not lead: $(ctl -o json status)"

rcli INCR muster:epoch >/dev/null
rcli SET muster:leader "99 musterd@elsewhere tcp://10.0.0.2:7070" EX 600 >/dev/null
id2=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "musterd to step down" 30 '! kill -0 "$MUSTERD_PID" 2>/dev/null'
rc=0
wait "$MUSTERD_PID" || rc=$?
[ "$rc" = 1 ] || fail "musterd exited with status $rc, expected 1"
grep -q "stepping down" "$T/musterd.log" || fail "musterd did not say it steps down"
[ -z "$(job_state "$id2")" ] || fail "job $id2 was stored ($(job_state "$id2")) by a musterd that no longer leads"
[ "$(rcli SISMEMBER muster:active "$id2")" = 0 ] || fail "job $id2 is in the active set"
[ "$(rcli XPENDING muster:submit muster-scheduler | head -1)" = 1 ] ||
    fail "the submission is not left unacknowledged: $(rcli XPENDING muster:submit muster-scheduler)"
[ "$(rcli GET muster:leader)" = "99 musterd@elsewhere tcp://10.0.0.2:7070" ] || fail "the leader key was changed"
ok "a write without the lease was refused whole, and musterd stepped down"

# The other holder's lease lapses; a musterd that takes the lease next claims the submission the
# deposed one left pending, before it reads anything else, and runs it.  The worker starts again
# too: with heartbeats a minute apart it would take that long to find the new one.
rcli DEL muster:leader >/dev/null
stop_worker n1
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "the new leader runs the left submission" 60 job_state_is "$id2" SUCCEEDED
[ "$(rcli XPENDING muster:submit muster-scheduler | head -1)" = 0 ] || fail "submissions left unacknowledged"
ok "the next leader took the submission the deposed one had read"

#!/usr/bin/env bash
# Workers outlive a scheduler restart: they re-register with the new musterd (new epoch) and take
# new work; a pending job survives the restart.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
[ "$(rcli GET muster:epoch)" = 1 ] || fail "epoch $(rcli GET muster:epoch)"

stop_musterd
# Submitted while no scheduler runs: it waits in the stream.
id=$(submit_json '{"tasks":2,"gpus_per_task":8,"command":["true"]}')
big=$(submit_json '{"tasks":3,"gpus_per_task":8,"capacity":["spot"],"command":["true"]}')
sleep 1
start_musterd "$CONFIG"
wait_for "job $id succeeded after the restart" 20 job_state_is "$id" SUCCEEDED
[ "$(rcli GET muster:epoch)" = 2 ] || fail "epoch after restart $(rcli GET muster:epoch)"
grep -q "node=n1 registered" "$T/musterd.log" || fail "n1 did not re-register"
ok "workers re-registered with the restarted scheduler and ran a job"

# A pending job is still pending after another restart, with its reason.
wait_for "job $big pending" 10 job_state_is "$big" PENDING
stop_musterd
start_musterd "$CONFIG"
# musterd binds its port before it reads the jobs back: wait for the recovery, not a guess.
wait_for "musterd recovers the pending job" 20 'grep -q "recovered 1 active job" "$T/musterd.log"'
sleep 2 # a few passes with both workers back: the 3-node gang must still not start
[ "$(job_state "$big")" = PENDING ] || fail "job $big is $(job_state "$big") after restart"
start_worker n3 spot-a 8
wait_for "job $big succeeded once n3 joined" 20 job_state_is "$big" SUCCEEDED
ok "a pending job survived a scheduler restart"

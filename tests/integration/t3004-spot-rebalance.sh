#!/usr/bin/env bash
# A rebalance recommendation marks the node at risk: running work stays, but no new gang is placed
# there.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_imds s1 --zone z1
start_worker s1 spot-a 8 --label zone=z1 --label rack=r1 --imds "http://127.0.0.1:$IMDS_PORT" --imds-interval-s 1
wait_for "s1 registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# A gang already running on s1 when the recommendation comes keeps running.
running=$(submit_json '{"tasks":1,"gpus_per_task":4,"capacity":["spot"],"command":["sleep","6"]}')
wait_for "running" 10 job_state_is "$running" RUNNING
start_worker s2 spot-a 8 --label zone=z1 --label rack=r1
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

curl -sf -X POST "http://127.0.0.1:$IMDS_PORT/mock/rebalance" >/dev/null
wait_for "s1 at risk" 10 '[ "$(rcli HGET muster:nodes s1 | jq -r .at_risk)" = true ]'
# These two hold s2 until released (a file): s2 must be full while "third" is checked, however
# slow the machine (a 2 s sleep could end first).
for _ in 1 2; do
    id=$(submit_json "{\"tasks\":1,\"gpus_per_task\":4,\"capacity\":[\"spot\"],\"command\":$(await_file_json "$T/release")}")
    wait_for "job $id running" 10 job_state_is "$id" RUNNING
    [ "$(rcli HGET "muster:job:$id" nodes)" = s2 ] || fail "a new gang went to the at-risk node"
done
wait_for "s2 full" 5 '[ "$(rcli HGET muster:nodes s2 | jq -r .gpus_free)" = 0 ]'
third=$(submit_json '{"tasks":1,"gpus_per_task":4,"capacity":["spot"],"command":["true"]}')
sleep 1
[ "$(job_state "$third")" = PENDING ] || fail "a gang ran on the at-risk node"
[ "$(job_state "$running")" = RUNNING ] || [ "$(job_state "$running")" = SUCCEEDED ] || fail "the running gang on s1 was disturbed: $(job_state "$running")"
wait_for "the gang on s1 finished normally" 15 job_state_is "$running" SUCCEEDED
: >"$T/release"
ok "after the rebalance recommendation new gangs avoided s1; its running gang finished"

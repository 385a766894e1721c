#!/usr/bin/env bash
# Topology through real daemons: a required level keeps the gang in one domain (or waits with a
# reason), a worker without a label for every level is refused with a clear message, and a
# multi-GPU task gets its GPUs from one NVLink island (--gpu-islands).
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null # levels zone, rack; pools spot-a, od-a with 8 GPUs per node
start_musterd "$CONFIG"
start_worker a1 spot-a 8 --label zone=za --label rack=r1
start_worker a2 spot-a 8 --label zone=za --label rack=r2
start_worker b1 spot-a 8 --label zone=zb --label rack=r1
wait_for "3 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 3 ]'

three=$(submit_json '{"tasks":3,"gpus_per_task":8,"capacity":["spot"],"topology":{"required":"zone"},"command":["true"]}')
wait_for "job $three has a reason" 10 '[ -n "$(rcli HGET "muster:job:'"$three"'" reason)" ]'
rcli HGET "muster:job:$three" reason | has "one zone" || fail "reason: $(rcli HGET "muster:job:$three" reason)"
[ "$(job_state "$three")" = PENDING ] || fail "3x8 in one zone should wait"
ok "3x8 in one zone waits: $(rcli HGET "muster:job:$three" reason)"
ctl cancel "$three" >/dev/null

two=$(submit_json '{"tasks":2,"gpus_per_task":8,"capacity":["spot"],"topology":{"required":"zone"},"command":["true"]}')
wait_for "job $two succeeded" 10 job_state_is "$two" SUCCEEDED
case "$(rcli HGET "muster:job:$two" nodes)" in
a1,a2 | a2,a1) ;;
*) fail "2x8 in one zone ran on $(rcli HGET "muster:job:$two" nodes)" ;;
esac
ok "2x8 in one zone ran inside zone za"

rack=$(submit_json '{"tasks":2,"gpus_per_task":4,"capacity":["spot"],"topology":{"required":"node"},"command":["true"]}')
wait_for "job $rack succeeded" 10 job_state_is "$rack" SUCCEEDED
[ "$(rcli HGET "muster:job:$rack" nodes | tr ',' '\n' | wc -l)" = 1 ] || fail "required node spread: $(rcli HGET "muster:job:$rack" nodes)"
ok "required \"node\" kept the gang on one node"

# A node without a rack label cannot join; the worker's log says why.
start_worker c1 spot-a 8 --label zone=zc
wait_for "c1 told why it was refused" 10 'grep -q "missing topology label .rack." "$T/worker-c1.log"'
[ -z "$(rcli HGET muster:nodes c1)" ] || fail "c1 registered without a rack label"
ok "a worker missing a label is refused with: $(grep -o "missing topology label[^;]*" "$T/worker-c1.log" | head -1)"

# NVLink islands: with 2 GPUs taken from island 0 (GPUs 0-3), a 4-GPU task goes to island 1.
start_worker i1 od-a 8 --label zone=zi --label rack=r1 --gpu-islands 4,4
wait_for "i1 registered" 10 '[ -n "$(rcli HGET muster:nodes i1)" ]'
small=$(submit_json '{"tasks":1,"gpus_per_task":2,"capacity":["on-demand"],"command":["sleep","30"]}')
wait_for "job $small running" 10 job_state_is "$small" RUNNING
quad=$(submit_json '{"tasks":1,"gpus_per_task":4,"capacity":["on-demand"],"command":["true"]}')
wait_for "job $quad succeeded" 10 job_state_is "$quad" SUCCEEDED
gpus=$(rcli HGET "muster:job:$quad" placement | jq -c '.[0].gpus')
[ "$gpus" = "[4,5,6,7]" ] || fail "4-GPU task got $gpus, expected one island [4,5,6,7]"
ok "a 4-GPU task got one whole NVLink island: $gpus"

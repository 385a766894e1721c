#!/usr/bin/env bash
# A gang that cannot fit on today's nodes even with nothing running stays PENDING (nodes may
# join: autoscaled clusters) with a reason that says so and names what is largest, and it runs
# once enough nodes join (issue #10 item 7).  A task bigger than every registered node says so
# too.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null # levels zone, rack; pools spot-a, od-a with 8 GPUs per node
start_musterd "$CONFIG"
# Rack r1 has 2 nodes, rack r2 has 1: no rack holds 3 nodes.
start_worker a1 spot-a 8 --label zone=z1 --label rack=r1
start_worker a2 spot-a 8 --label zone=z1 --label rack=r1
start_worker b1 spot-a 8 --label zone=z1 --label rack=r2
wait_for "3 nodes registered" 30 '[ "$(rcli HLEN muster:nodes)" = 3 ]'

# job_says ID JQ: musterctl -o json show ID satisfies JQ (for wait_for).
job_says() {
    ctl -o json show "$1" | jq -e "$2" >/dev/null
}

never='.state == "PENDING" and (.reason | test("in one rack; the largest rack has 2 nodes \\(2x8\\)"))
    and (.reason | endswith("(cannot fit until nodes join)"))'
id=$(submit_json "{\"tasks\":3,\"gpus_per_task\":8,\"capacity\":[\"spot\"],\"topology\":{\"required\":\"rack\"},\"command\":\"touch $T/started.\$RANK\"}")
wait_for "job $id pending with a 'cannot fit until nodes join' reason" 60 job_says "$id" "$never"
ls "$T"/started.* >/dev/null 2>&1 && fail "a task started although no rack holds the gang"
ok "3x8 in one rack, largest rack 2 nodes: $(ctl -o json show "$id" | jq -r .reason)"

# The on-demand pool is configured with 8 GPUs a node (so intake accepts 8-GPU tasks), but the
# only on-demand node that registered has 4.
start_worker o1 od-a 4 --label zone=z1 --label rack=r3
wait_for "o1 registered" 30 '[ -n "$(rcli HGET muster:nodes o1)" ]'
big=$(submit_json '{"tasks":1,"gpus_per_task":8,"capacity":["on-demand"],"command":["true"]}')
wait_for "job $big pending with a 'cannot fit until nodes join' reason" 60 job_says "$big" \
    '.state == "PENDING" and .reason == "no ready on-demand node with 8+ GPUs (cannot fit until nodes join)"'
ok "an 8-GPU task, only a 4-GPU node registered: $(ctl -o json show "$big" | jq -r .reason)"
ctl cancel "$big" >/dev/null

# A third node joins rack r1: the gang fits there and runs, whole.
start_worker a3 spot-a 8 --label zone=z1 --label rack=r1
wait_for "job $id succeeded once a3 joined rack r1" 60 job_state_is "$id" SUCCEEDED
for rank in 0 1 2; do
    [ -f "$T/started.$rank" ] || fail "task $rank did not run"
done
case "$(rcli HGET "muster:job:$id" nodes | tr ',' '\n' | sort | tr '\n' ' ')" in
"a1 a2 a3 ") ;;
*) fail "job $id ran on $(rcli HGET "muster:job:$id" nodes), expected a1, a2 and a3 (rack r1)" ;;
esac
ok "the gang ran in rack r1 once a node joined it"

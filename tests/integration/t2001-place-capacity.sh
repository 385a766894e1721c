#!/usr/bin/env bash
# Spot first, on-demand as fallback, cheapest pool first, and a gang never straddles the two.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 4},
    {"name": "spot-b", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3},
    {"name": "od-a", "capacity": "on-demand", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 10}
  ],
  "heartbeat_s": 1, "node_lost_after_s": 5
}
JSON
start_musterd "$CONFIG"
start_worker sa spot-a 8 --label zone=z1
start_worker sb spot-b 8 --label zone=z1
start_worker od1 od-a 8 --label zone=z1
start_worker od2 od-a 8 --label zone=z1
wait_for "4 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 4 ]'

nodes_of() { rcli HGET "muster:job:$1" nodes; }
# Jobs a and b hold their nodes until the end of the test (a file releases them), not for a fixed
# time that a slow machine could use up before the checks that need them running.
hold_cmd="while [ ! -e $T/release ]; do sleep 0.2; done"

# 1 task: the cheapest spot pool (spot-b) wins.
a=$(submit_json "{\"tasks\":1,\"gpus_per_task\":8,\"command\":\"$hold_cmd\"}")
wait_for "job $a running" 10 job_state_is "$a" RUNNING
[ "$(nodes_of "$a")" = sb ] || fail "job $a on $(nodes_of "$a"), expected the cheaper spot node sb"
ok "cheapest spot pool first"

# 2 tasks x 8: only one spot node is left (sa), so the gang goes whole to on-demand.
b=$(submit_json "{\"tasks\":2,\"gpus_per_task\":8,\"command\":\"$hold_cmd\"}")
wait_for "job $b running" 10 job_state_is "$b" RUNNING
case "$(nodes_of "$b")" in
od1,od2 | od2,od1) ;;
*) fail "job $b on $(nodes_of "$b"): expected both on-demand nodes, never spot+on-demand" ;;
esac
ok "no straddling: the gang fell back to on-demand as a whole"

# Spot only: waits (one free spot node, no on-demand allowed) instead of straddling.
c=$(submit_json '{"tasks":2,"gpus_per_task":8,"capacity":["spot"],"command":"true"}')
sleep 1.5
[ "$(job_state "$c")" = PENDING ] || fail "job $c is $(job_state "$c"), expected PENDING"
ok "a spot-only gang waits rather than straddle"

# On-demand first when asked: 1 task with capacity [on-demand, spot] and on-demand full -> spot.
# Job c holds the reservation on the spot nodes (they free up when job a ends); d may only use sa
# because its time limit ends long before that reservation (backfill).
d=$(submit_json '{"tasks":1,"gpus_per_task":8,"capacity":["on-demand","spot"],"time_limit_s":60,"command":"true"}')
wait_for "job $d succeeded" 10 job_state_is "$d" SUCCEEDED
[ "$(nodes_of "$d")" = sa ] || fail "job $d on $(nodes_of "$d"), expected sa"
ok "capacity order honoured, fallback within the job's list"

# Without a short time limit, the same job would delay c's reservation: it waits, with a reason.
e=$(submit_json '{"tasks":1,"gpus_per_task":8,"capacity":["spot"],"command":"true"}')
wait_for "job $e has a reason" 10 '[ -n "$(rcli HGET "muster:job:'"$e"'" reason)" ]'
[ "$(job_state "$e")" = PENDING ] || fail "job $e is $(job_state "$e"), expected PENDING behind c's reservation"
rcli HGET "muster:job:$c" reason | has "reservation" || fail "job $c reason: $(rcli HGET "muster:job:$c" reason)"
ok "EASY backfill: only jobs that end before the head's reservation jump ahead"
: >"$T/release"

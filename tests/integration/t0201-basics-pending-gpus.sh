#!/usr/bin/env bash
# muster_pending_gpus, the autoscaling signal, names a pool only when growing that pool would let
# the job run (issue #10 item 9): a pool whose max_gpus cap leaves no room for the gang is
# skipped for the next capacity type, and a job no pool can ever take is counted as pool="none".
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
     "price_per_hour": 3, "max_gpus": 8},
    {"name": "od-a", "capacity": "on-demand", "gpu_type": "A100", "gpus_per_node": 8,
     "price_per_hour": 10}
  ],
  "heartbeat_s": 1, "node_lost_after_s": 10
}
JSON
MPORT=$(free_port)
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
value() { # NAME-WITH-LABELS
    curl -sf "http://127.0.0.1:$MPORT/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}

# No workers: everything stays pending.
# shellcheck disable=SC2034 # read by wait_for's condition
big=$(submit_json '{"tasks":2,"gpus_per_task":8,"command":["true"]}')     # 16 > spot-a's cap
# shellcheck disable=SC2034 # read by wait_for's condition
small=$(submit_json '{"tasks":1,"gpus_per_task":4,"command":["true"]}')   # fits under the cap
wait_for "both jobs pending" 10 'job_state_is "$big" PENDING && job_state_is "$small" PENDING'
wait_for "pending GPUs by pool" 10 '[ "$(value '"'"'muster_pending_gpus{queue="default",pool="od-a"}'"'"')" = 16 ]'
[ "$(value 'muster_pending_gpus{queue="default",pool="spot-a"}')" = 4 ] ||
    fail "spot-a: $(curl -sf "http://127.0.0.1:$MPORT/metrics" | grep pending_gpus)"
ok "a gang over spot-a's max_gpus is counted for od-a, one under the cap for spot-a"

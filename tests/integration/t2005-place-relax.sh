#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Wait, then relax (issue #16): a 2x8 gang that requires one rack, on a cluster whose two 8-GPU
# nodes sit in two racks, waits with a reason that counts down ("waiting 3s more for one rack,
# then any zone"), then is placed across the racks once relax_after_s has passed, and not before.
# Standalone: tests/integration/t2005-place-relax.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3.5}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 5
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8 --label zone=z1 --label rack=r1
start_worker n2 spot-a 8 --label zone=z1 --label rack=r2
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = 2 ]'

id=$(submit_json '{"name":"relax","tasks":2,"gpus_per_task":8,"command":["true"],
  "topology":{"required":"rack","relax_after_s":4}}')
reason() { rcli HGET "${MUSTER_KEY_PREFIX}job:$id" reason; }
# The first pass cannot place it in one rack; it says how long it waits before any zone will do.
wait_for "a reason that counts down to the relaxation" 10 \
    "reason | grep -qE 'waiting [0-9]+s more for one rack, then any zone'"
[ "$(job_state "$id")" = PENDING ] || fail "job $id is $(job_state "$id") while it waits for one rack"
ok "pending with '$(reason)'"

wait_for "job $id done once it may use any zone" 30 job_state_is "$id" SUCCEEDED
submitted=$(rcli HGET "${MUSTER_KEY_PREFIX}job:$id" submitted_at)
started=$(rcli HGET "${MUSTER_KEY_PREFIX}job:$id" started_at)
[ $((started - submitted)) -ge 4000 ] ||
    fail "job $id started $((started - submitted)) ms after submission, before relax_after_s (4 s)"
nodes=$(rcli HGET "${MUSTER_KEY_PREFIX}job:$id" nodes)
case "$nodes" in *n1*n2* | *n2*n1*) ;; *) fail "job $id placed on '$nodes', expected both racks" ;; esac
ok "placed across the two racks $((started - submitted)) ms after submission (relax_after_s 4 s)"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The consolidation signal (issue #16): a node with no task for consolidate_after_s is
# releasable (muster:nodes, musterctl nodes, /metrics), stops being releasable as soon as a job
# lands on it, and turns releasable again once it has been idle that long after the job.
# Standalone: tests/integration/t2004-place-releasable.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
command -v curl >/dev/null 2>&1 || fail "curl not found"
_mu_need_bin musterctl

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3.5}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "consolidate_after_s": 2
}
JSON
MPORT=$(free_port)
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = 2 ]'

node_field() { # node_field NODE FIELD
    ctl -o json nodes | jq -r ".[] | select(.name == \"$1\") | .$2"
}
# A scrape that fails (a busy machine) is tried again; what it read is what the checks judge.
scrape() { curl -sf --retry 5 --retry-delay 0 --retry-connrefused "http://127.0.0.1:$MPORT/metrics"; }

wait_for "n1 releasable after 2 s idle" 15 '[ "$(node_field n1 releasable)" = true ]'
[ "$(node_field n1 idle_since)" -gt 0 ] || fail "n1 idle_since: $(node_field n1 idle_since)"
wait_for "the metrics count 2 releasable nodes" 15 \
    "scrape | grep -qx 'muster_releasable_nodes{pool=\"spot-a\"} 2'"
ok "idle nodes turn releasable after consolidate_after_s"

# A job lands on one node: it stops being releasable at the placement (in /metrics at once, in
# the hash with the next status write, every 0.2 s while something changed).
gate=$(submit_json '{"name":"hold","tasks":1,"gpus_per_task":8,
  "command":'"$(await_file_json "$T/gate")"'}')
wait_for "the job running" 15 job_state_is "$gate" RUNNING
busy=$(rcli HGET "${MUSTER_KEY_PREFIX}job:$gate" nodes | tr -d '[]"' | cut -d, -f1)
[ -n "$busy" ] || fail "no node in job $gate's hash"
scrape >"$T/scrape" || fail "cannot scrape http://127.0.0.1:$MPORT/metrics"
grep -qx 'muster_releasable_nodes{pool="spot-a"} 1' "$T/scrape" ||
    fail "releasable nodes while $gate runs: $(grep releasable "$T/scrape")"
grep -qx "muster_node_idle_seconds{node=\"$busy\",pool=\"spot-a\"} 0" "$T/scrape" ||
    fail "idle seconds of $busy while $gate runs: $(grep idle_seconds "$T/scrape")"
wait_for "$busy not releasable in the hash" 5 \
    "[ \"\$(node_field $busy releasable)\" = false ] && [ \"\$(node_field $busy idle_since)\" = 0 ]"
ctl nodes >"$T/table" || fail "musterctl nodes failed"
head -1 "$T/table" | grep -qE '^NAME +POOL +CAPACITY +STATE +GPUS +LABELS +HEARTBEAT +IDLE +RELEASABLE +JOBS +REASON' ||
    fail "nodes header: $(head -1 "$T/table")"
grep -qE "^$busy +spot-a +spot +ready +0/8 +[^ ]+ +[0-9]+[smhd] +- +no +$gate" "$T/table" ||
    fail "busy row: $(cat "$T/table")"
ok "a node that gets a job stops being releasable at once (hash and table)"

touch "$T/gate"
wait_for "the job done" 15 job_state_is "$gate" SUCCEEDED
wait_for "$busy releasable again" 15 "[ \"\$(node_field $busy releasable)\" = true ]"
ctl nodes >"$T/table" || fail "musterctl nodes failed"
grep -qE "^$busy +spot-a +spot +ready +8/8 +[^ ]+ +[0-9]+[smhd] +[0-9]+[smhd] +yes" "$T/table" ||
    fail "idle row: $(cat "$T/table")"
ok "the node turns releasable again after the job ends and consolidate_after_s passes"

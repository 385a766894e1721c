#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fair share between queues (issue #11, docs/fair-share.md) through real musterd and a worker:
# team A floods the queue while its first gang holds the only node; team B submits one job
# after the flood; when the node frees, B's job starts next, before the rest of A's flood.
# Within one queue the same holds between users: alice's gate and flood, then bob's one job,
# which starts right after the gate.  Then the queues' and users' usage survives a kill -9 of
# musterd (read back, decayed by the configured fair_share_half_life_s of 60 s for the time it
# was down: less, never reset, never grown).
# Standalone: tests/integration/t1002-queue-fair.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
FLOOD=20

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3.5}
  ],
  "queues": [{"name": "team-a", "weight": 1}, {"name": "team-b", "weight": 1}],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "fair_share_half_life_s": 60
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "n1 registered" 10 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = 1 ]'


# A's first gang holds all 8 GPUs until the gate file appears.
gate=$(submit_json '{"name":"a-gate","queue":"team-a","tasks":1,"gpus_per_task":8,
  "command":'"$(await_file_json "$T/gate")"'}')
wait_for "the gate job running" 15 job_state_is "$gate" RUNNING
# Its usage shows before the gate opens, so that team A stands behind team B (an idle queue),
# whatever the ties.
# (8 GPU-seconds or more, so that the decay checked at the end shows in the stored decimals.)
wait_for "team-a usage of 8 GPU-seconds or more" 15 \
    "[ \"\$(queue_field team-a usage_gpu_s | awk '{ print (\$1 >= 8) }')\" = 1 ]"

flood=()
for i in $(seq 1 "$FLOOD"); do
    flood+=("$(submit_json '{"name":"a-'"$i"'","queue":"team-a","tasks":1,"gpus_per_task":8,"command":["true"]}')")
done
b=$(submit_json '{"name":"b-1","queue":"team-b","tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "all $((FLOOD + 1)) jobs pending" 15 \
    "[ \"\$(queue_field team-a pending_jobs)\" = $FLOOD ] && [ \"\$(queue_field team-b pending_jobs)\" = 1 ]"
ok "team A's flood and team B's later job are pending behind the gate"

touch "$T/gate"
wait_for "every job done" 60 \
    "[ \"\$(ctl -o json jobs --all | jq '[.[] | select(.state == \"SUCCEEDED\")] | length')\" = $((FLOOD + 2)) ]"

# The STARTING events in stream order: the gate's, then B's, then A's flood in submission order.
ctl -o json events --count 100000 >"$T/events" || fail "musterctl events failed"
jq -r '.[] | select(.state == "STARTING") | .job' "$T/events" >"$T/starts"
[ "$(wc -l <"$T/starts")" = $((FLOOD + 2)) ] || fail "STARTING events: $(cat "$T/starts")"
[ "$(sed -n 1p "$T/starts")" = "$gate" ] || fail "first start is not the gate: $(cat "$T/starts")"
[ "$(sed -n 2p "$T/starts")" = "$b" ] ||
    fail "team B's job did not start next after the gate (starts: $(tr '\n' ' ' <"$T/starts"); B is $b)"
printf '%s\n' "${flood[@]}" | diff - <(sed -n '3,$p' "$T/starts") >/dev/null ||
    fail "team A's flood did not start in submission order: $(tr '\n' ' ' <"$T/starts")"
ok "team B's job started right after the gate, before team A's $FLOOD flooded jobs"

# ---- users within one queue: alice floods team-a behind her own gate; bob's later job is next ----
gate=$(submit_json '{"name":"alice-gate","queue":"team-a","user":"alice","tasks":1,"gpus_per_task":8,
  "command":'"$(await_file_json "$T/gate2")"'}')
wait_for "alice's gate running" 15 job_state_is "$gate" RUNNING
flood=()
for i in $(seq 1 5); do
    flood+=("$(submit_json '{"name":"alice-'"$i"'","queue":"team-a","user":"alice","tasks":1,"gpus_per_task":8,"command":["true"]}')")
done
bob=$(submit_json '{"name":"bob-1","queue":"team-a","user":"bob","tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "alice's flood and bob's job pending" 15 "[ \"\$(queue_field team-a pending_jobs)\" = 6 ]"
# Alice's usage grows while her gate runs (8 GPU-seconds or more, so that the decay checked at
# the end shows in the stored decimals); her flood runs 'true' and adds next to nothing.
wait_for "alice's usage of 8 GPU-seconds or more" 15 \
    "[ \"\$(queue_field team-a users.alice.usage_gpu_s | awk '{ print (\$1 >= 8) }')\" = 1 ]"
touch "$T/gate2"
wait_for "bob's and alice's jobs done" 60 \
    "[ \"\$(ctl -o json jobs --all | jq '[.[] | select(.state == \"SUCCEEDED\")] | length')\" = $((FLOOD + 2 + 7)) ]"
ctl -o json events --count 100000 >"$T/events" || fail "musterctl events failed"
jq -r '.[] | select(.state == "STARTING") | .job' "$T/events" | tail -n 7 >"$T/starts"
[ "$(sed -n 1p "$T/starts")" = "$gate" ] || fail "alice's gate is not first: $(cat "$T/starts")"
[ "$(sed -n 2p "$T/starts")" = "$bob" ] ||
    fail "bob's job did not start next after alice's gate (starts: $(tr '\n' ' ' <"$T/starts"); bob is $bob)"
printf '%s\n' "${flood[@]}" | diff - <(sed -n '3,$p' "$T/starts") >/dev/null ||
    fail "alice's flood did not start in submission order: $(tr '\n' ' ' <"$T/starts")"
ok "in one queue, bob's job started right after alice's gate, before alice's 5 flooded jobs"
# The queues' status is published a moment after the jobs end: wait for alice's running GPUs
# to show 0.
wait_for "musterctl queues --users lists alice with nothing running" 15 \
    "ctl queues --users | grep -E '^team-a +alice +0 +[0-9.]+ +[0-9]+%\$' >/dev/null"

# Usage is stored with the queues' status and read back after a kill -9, decayed, not reset.
wait_for "team-b usage above 0" 15 \
    "[ \"\$(queue_field team-b usage_gpu_s | awk '{ print (\$1 > 0) }')\" = 1 ]"
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
killed_ms=$(date +%s%3N)
before_a=$(queue_field team-a usage_gpu_s) # the last the killed musterd wrote
before_alice=$(queue_field team-a users.alice.usage_gpu_s)
sleep 1 # down for 1 s at least: a 60 s half-life takes over 1 % of the usage
start_musterd "$CONFIG"
wait_for "the new musterd publishes the queues" 15 \
    "[ \"\$(queue_field team-a usage_at)\" -gt $killed_ms ]"
after_a=$(queue_field team-a usage_gpu_s)
awk -v a="$after_a" -v b="$before_a" 'BEGIN { exit !(a > 0 && a < b) }' ||
    fail "team-a usage after the restart is $after_a, before it was $before_a (want less, > 0)"
ok "queue usage survives kill -9 of musterd, decayed ($before_a -> $after_a GPU-seconds)"
after_alice=$(queue_field team-a users.alice.usage_gpu_s)
awk -v a="$after_alice" -v b="$before_alice" 'BEGIN { exit !(a > 0 && a < b) }' ||
    fail "alice's usage after the restart is $after_alice, before it was $before_alice (want less, > 0)"
ok "a user's usage survives kill -9 of musterd, decayed ($before_alice -> $after_alice GPU-seconds)"

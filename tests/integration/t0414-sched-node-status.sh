#!/usr/bin/env bash
# muster:nodes, the node status musterctl and dashboards read, with 4,200 nodes (simulated by
# muster-bench-fleet: real ZeroMQ, the real worker protocol, no task processes).  Every node gets
# its entry (more than one fenced Lua script can unpack into a single HSET: issue #15 found the
# write refused from about 4,000 nodes on); a change rewrites the entries that changed and no
# other; after a Redis outage in which the hash was lost, every entry is written again.  At over
# 1,000 heartbeats a second musterd reads the workers' messages in batches (issue #15): a gang
# still starts, and its end is still read.  musterd
# needs a descriptor per node: under an open-file limit below 4,500 the test runs with as many
# nodes as fit (at least 1,100, over one status command of 1,024 entries) and says so.
source "$(dirname "$0")/lib.sh"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
limit=$(ulimit -n)
nodes=4200
if [ "$limit" -lt $((nodes + 300)) ]; then
    nodes=$(((limit - 300) / 4 * 4))
    [ "$nodes" -ge 1100 ] ||
        fail "open-file limit $limit leaves room for $nodes nodes' connections; the test needs 1,100 (raise ulimit -Hn)"
    echo "# open-file limit $limit: $nodes nodes instead of 4,200"
fi
per_fleet=$((nodes / 4)) # a fleet process: two descriptors per node
_mu_need_bin muster-bench-fleet

start_redis
# A node's heartbeat_at is refreshed in its entry every node_lost_after_s / 3 (200 s here): no
# entry changes on its own while the test runs.
make_config --with '{"node_lost_after_s": 600}' >/dev/null
start_musterd "$CONFIG"
for ((base = 0; base < nodes; base += per_fleet)); do
    pool=spot-a
    [ "$base" -lt $((nodes / 2)) ] || pool=od-a
    "$MUSTER_BIN/muster-bench-fleet" --scheduler "tcp://127.0.0.1:$SCHED_PORT" --index-base "$base" \
        --nodes "$pool=$per_fleet" >"$T/fleet-$base.log" 2>&1 &
    _mu_pids+=("$!")
done
wait_for "$nodes nodes in muster:nodes" 180 '[ "$(rcli HLEN muster:nodes)" = '"$nodes"' ]'
grep -q "cannot write node status" "$T/musterd.log" && fail "a node status write failed"
ctl nodes >"$T/table" || fail "musterctl nodes failed"
[ "$(($(wc -l <"$T/table") - 1))" = "$nodes" ] || fail "musterctl nodes lists $(($(wc -l <"$T/table") - 1)) nodes, not $nodes"
ok "$nodes nodes registered, each with its status entry"

grep -q "worker messages are now read in batches" "$T/musterd.log" ||
    fail "$nodes nodes at heartbeat_s 1 and musterd does not say it reads heartbeats in batches"
id=$(submit_json '{"tasks":4,"gpus_per_task":8,"command":["sleep","2"]}')
wait_for "a 4-node gang to run and end" 120 job_state_is "$id" SUCCEEDED
ok "with heartbeats read in batches, a gang's BIND_ACKs and exits are still read"

# A gang of two nodes: their entries show it; an entry that did not change is not rewritten (a
# marker written over an idle node's entry stays), and the gang's end is written at once.
id=$(submit_json '{"tasks":2,"gpus_per_task":8,"command":["sleep","3600"]}')
wait_for "gang running" 60 job_state_is "$id" RUNNING
IFS=, read -r -a used <<<"$(job_field "$id" nodes)"
[ "${#used[@]}" = 2 ] || fail "the gang is on '${used[*]}', not two nodes"
for n in "${used[@]}"; do
    wait_for "$n's entry to show the gang" 30 \
        '[ "$(rcli HGET muster:nodes '"$n"' | jq -r ".jobs[0]")" = "'"$id"'" ]'
done
idle=f00000
[ "$idle" != "${used[0]}" ] && [ "$idle" != "${used[1]}" ] || idle=$(printf 'f%05d' $((nodes - 1)))
rcli HSET muster:nodes "$idle" '{"name":"'"$idle"'","marker":true}' >/dev/null
ctl cancel "$id" >/dev/null || fail "cancel failed"
for n in "${used[@]}"; do
    wait_for "$n's entry to show no job" 60 \
        '[ "$(rcli HGET muster:nodes '"$n"' | jq -r ".jobs | length")" = 0 ]'
done
[ "$(rcli HGET muster:nodes "$idle" | jq -r .marker)" = true ] ||
    fail "$idle's entry was rewritten though the node did not change: $(rcli HGET muster:nodes "$idle")"
ok "a change rewrote its nodes' entries and left the others alone"

# Redis loses the hash and stops answering: once it is back, every entry is written again.
rcli DEL muster:nodes >/dev/null
kill -STOP "$REDIS_PID"
for ((i = 0; i < 600; i++)); do
    grep -q "redis unreachable" "$T/musterd.log" && break
    sleep 0.1
done
kill -CONT "$REDIS_PID"
grep -q "redis unreachable" "$T/musterd.log" || fail "musterd did not notice the outage"
wait_for "every entry written again" 90 '[ "$(rcli HLEN muster:nodes)" = '"$nodes"' ]'
[ "$(rcli HGET muster:nodes "$idle" | jq -r .state)" = ready ] ||
    fail "$idle's entry after the outage: $(rcli HGET muster:nodes "$idle")"
ok "after the outage musterd rewrote all $nodes entries"

#!/usr/bin/env bash
# Redis behind Sentinel (issue #14): a primary, a replica and three Sentinels (redis-server
# --sentinel), musterd and musterctl given only a redis+sentinel:// URL.  Jobs flow; a gang runs
# on across a SENTINEL FAILOVER and across kill -9 of the next primary; after each failover
# musterd and musterctl find the new primary through the Sentinels, and every job submitted
# (each acknowledged once the replica had it) ends SUCCEEDED.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl

start_redis # the first primary
P1=$REDIS_PORT
P2=$(free_port)
redis-server --port "$P2" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
    --replicaof 127.0.0.1 "$P1" --daemonize no --logfile "$T/redis-replica.log" >/dev/null 2>&1 &
_mu_pids+=("$!")
declare -A redis_pid=(["$P1"]=$REDIS_PID ["$P2"]=$!)
wait_for "the replica in sync" 20 \
    "redis-cli -p $P2 INFO replication | tr -d '\r' | has '^master_link_status:up$'"

start_sentinels "$P1"
wait_sentinels "$P2"

# synced: the replica has every write of the primary (so a kill -9 of the primary loses none).
synced() {
    local p r
    p=$(redis-cli -p "$1" INFO replication | tr -d '\r' | sed -n 's/^master_repl_offset://p')
    r=$(redis-cli -p "$2" INFO replication | tr -d '\r' | sed -n 's/^master_repl_offset://p')
    [ -n "$p" ] && [ "$p" = "$r" ]
}

export MUSTER_REDIS_URL=$MUSTER_SENTINEL_URL
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
state() { ctl -o json show "$1" | jq -r .state; }
state_is() { [ "$(state "$1")" = "$2" ]; }
wait_for "n1 registered through the Sentinels" 20 '[ "$(ctl -o json nodes | jq length)" = 1 ]'

a=$(ctl submit --tasks 1 --gpus-per-task 1 -- true) || fail "submit through the Sentinels failed"
wait_for "job $a succeeded" 30 state_is "$a" SUCCEEDED
gang=$(ctl submit --tasks 2 --gpus-per-task 2 -- sh -c "while [ ! -e $T/go ]; do sleep 0.1; done") ||
    fail "submit of the gang failed"
wait_for "gang $gang running" 30 state_is "$gang" RUNNING
ok "musterd and musterctl reach the primary through a redis+sentinel:// URL"

# ---- a planned failover: SENTINEL FAILOVER -------------------------------------------------------
wait_for "replica caught up" 20 synced "$P1" "$P2"
[ "$(redis-cli -p "${SENTINELS[0]}" SENTINEL failover mymaster)" = OK ] || fail "SENTINEL FAILOVER refused"
wait_for "the Sentinels name $P2 the primary" 60 '[ "$(sentinel_primary)" = '"$P2"' ]'
wait_for "$P2 is a primary" 30 "redis-cli -p $P2 ROLE | head -n 1 | has -x master"
b=$(ctl submit --tasks 1 --gpus-per-task 1 -- true) || fail "submit after the failover failed"
wait_for "job $b succeeded after the failover" 60 state_is "$b" SUCCEEDED
state_is "$gang" RUNNING || fail "gang $gang is $(state "$gang") after the failover"
ok "after SENTINEL FAILOVER musterd and musterctl follow the new primary; the gang runs on"

# ---- an unplanned failover: kill -9 of the primary -----------------------------------------------
wait_for "$P1 replicates the new primary" 60 \
    "redis-cli -p $P1 INFO replication | tr -d '\r' | has '^master_link_status:up$'"
wait_for "replica caught up" 20 synced "$P2" "$P1"
kill -9 "${redis_pid[$P2]}"
wait_for "the Sentinels promote $P1" 90 '[ "$(sentinel_primary)" = '"$P1"' ]'
c=$(ctl submit --tasks 1 --gpus-per-task 1 -- true) || fail "submit after kill -9 of the primary failed"
: >"$T/go"
wait_for "job $c succeeded after kill -9 of the primary" 60 state_is "$c" SUCCEEDED
wait_for "gang $gang succeeded" 60 state_is "$gang" SUCCEEDED
for id in "$a" "$b"; do
    state_is "$id" SUCCEEDED || fail "job $id is $(state "$id") after the failovers"
done
grep -q "redis connection restored" "$T/musterd.log" || fail "musterd logged no reconnection"
ok "after kill -9 of the primary: the Sentinels promote the replica, musterd follows, no job is lost"

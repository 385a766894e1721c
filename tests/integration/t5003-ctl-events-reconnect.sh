#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `musterctl events -f` rides out a Redis restart (issue #10, item 9): it used to exit with
# "Server closed the connection" while musterd carried on.  Redis (AOF, fsync always, so the
# events stream survives) is killed and restarted on the same port twice while the follower
# runs: the follower says on stderr that it is reconnecting and that it is back, stays up, and
# prints the events of a job submitted after each restart.  What it printed is exactly the
# stream: every entry once, in order, none lost and none twice.  An error Redis answers on a live
# connection (WRONGTYPE) still ends it, with exit 1.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
REDIS_PORT=$(free_port)
export REDIS_PORT MUSTER_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
mkdir -p "$T/redis"
REDIS_PID=
redis_up() {
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$T/redis" --appendonly yes \
        --appendfsync always --save '' >>"$T/redis.log" 2>&1 &
    REDIS_PID=$!
    _mu_pids+=("$REDIS_PID")
    wait_for "redis up on port $REDIS_PORT" 20 '[ "$(rcli ping 2>/dev/null)" = PONG ]'
}
redis_down() {
    kill -9 "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
}
redis_up
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

a=$(submit_json '{"command":["true"]}')
wait_for "job $a succeeded" 20 job_state_is "$a" SUCCEEDED

# The binary itself (not the ctl function), so that stop_pid stops musterctl and not a subshell.
"$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" -o json events -f --count 100000 \
    >"$T/follow.jsonl" 2>"$T/follow.err" &
follow_pid=$!
_mu_pids+=("$follow_pid")
printed() { # printed ID STATE: the follower printed job ID reaching STATE
    jq -e --arg j "$1" --arg s "$2" 'select(.job == $j and .state == $s)' "$T/follow.jsonl" \
        | has .
}
wait_for "the follower lists job $a" 10 printed "$a" SUCCEEDED

for round in 1 2; do
    redis_down
    # Down long enough for several failed reconnections (the backoff), then back on the port.
    wait_for "the follower notices the outage (round $round)" 10 \
        "[ \"\$(grep -c 'reconnecting' '$T/follow.err')\" -ge $round ]"
    sleep 1
    _mu_alive "$follow_pid" || fail "events -f exited while Redis was down: $(cat "$T/follow.err")"
    redis_up
    wait_for "the follower is back (round $round)" 15 \
        "[ \"\$(grep -c 'reconnected; following after' '$T/follow.err')\" -ge $round ]"
    id=$(submit_json '{"command":["true"]}')
    wait_for "job $id succeeded after restart $round" 30 job_state_is "$id" SUCCEEDED
    wait_for "the follower prints job $id's events" 10 printed "$id" SUCCEEDED
    _mu_alive "$follow_pid" || fail "events -f exited: $(cat "$T/follow.err")"
done
ok "events -f reconnected after two Redis restarts and printed the new jobs' events"

grep -q "musterctl: events: .*; reconnecting$" "$T/follow.err" || fail "no reconnect note: $(cat "$T/follow.err")"
# Whatever it printed is the stream itself: the same ids in the same order, each once.
stop_pid "$follow_pid"
jq -r .id "$T/follow.jsonl" >"$T/printed.ids"
ctl -o json events --count 100000 | jq -r '.[].id' >"$T/stream.ids"
[ -s "$T/stream.ids" ] || fail "the events stream is empty after the restarts (no persistence?)"
diff "$T/stream.ids" "$T/printed.ids" >"$T/ids.diff" ||
    fail "events -f printed other entries than the stream holds (< stream, > printed): $(cat "$T/ids.diff")"
[ "$(sort "$T/printed.ids" | uniq -d | wc -l)" = 0 ] || fail "events -f printed an entry twice"
ok "events -f printed every entry of the stream once, in order ($(wc -l <"$T/printed.ids") events)"
kill -0 "$MUSTERD_PID" || fail "musterd died across the Redis restarts"

# An error Redis gives on a live connection is no outage: -f ends with it (exit 1) instead of
# retrying for ever.  Here the events key of another prefix turns into a string under it.
"$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" --prefix other: events -f \
    >"$T/wrong.out" 2>"$T/wrong.err" &
wrong_pid=$!
_mu_pids+=("$wrong_pid")
wait_for "the follower of other: prints its header" 10 '[ -s "$T/wrong.out" ]'
rcli SET other:events not-a-stream >/dev/null
wait_for "events -f ends on WRONGTYPE" 10 "! kill -0 $wrong_pid 2>/dev/null"
rc=0
wait "$wrong_pid" || rc=$?
[ "$rc" = 1 ] || fail "events -f on a WRONGTYPE key exited $rc, want 1: $(cat "$T/wrong.err")"
grep -q "^musterctl: events: redis: WRONGTYPE" "$T/wrong.err" || fail "WRONGTYPE: $(cat "$T/wrong.err")"
! grep -q reconnecting "$T/wrong.err" || fail "a refused read was taken for an outage: $(cat "$T/wrong.err")"
ok "an error Redis answers (WRONGTYPE) ends events -f with exit 1"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Nothing an operator says is dropped (issue #40), for real: kill -9 musterd, cordon one node
# (sent: the dead leader's lease still runs), let the lease go, then cordon it again and drain the
# other while no musterd leads.  Both are recorded in
# muster:node:wanted (musterctl nodes shows them) and nothing waits in the control stream; after
# the restart the workers register again and take the kept states: the drained node's adopted
# gang is requeued off it, the cordoned node keeps its gang but takes no new job until uncordon.
# A node never seen is refused at once.  With no leader, reload, cancel and why fail at once with
# a clear message and send nothing; a reload that a (hung) leader never answered expires, and the
# musterd that reads it later drops it, never applies it.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
start_redis
P=$MUSTER_KEY_PREFIX
err_has() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1': $(cat "$T/err")"; }
out_has() { grep -qF -- "$1" "$T/out" || fail "stdout lacks '$1': $(cat "$T/out")"; }
jqo() { jq -e "$1" "$T/out" >/dev/null || fail "jq -e '$1' failed on: $(cat "$T/out")"; }
# tctl ARGS...: musterctl, bounded generously (a busy CI host is slow; this is no timing check).
tctl() { timeout 10 "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" "$@"; }
node_state() { ctl -o json nodes | jq -r ".[] | select(.name == \"$1\") | .state"; }

# Workers keep their tasks through the outage (their lease is node_lost_after_s); the killed
# musterd's lease outlives the first command below for sure (leader_lease_s).
make_config --with '{"node_lost_after_s": 30, "leader_lease_s": 60}' >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${P}nodes")" = 2 ]'

expect_rc 1 ctl cordon nope
err_has "musterctl: cordon: node 'nope' not found"
[ "$(rcli HLEN "${P}node:wanted")" = 0 ] || fail "a never-seen node was recorded"
ok "cordon of a node never seen: refused at once, nothing recorded"

# A: one whole node (the one drained below); B: half of the other (cordoned below), leaving room
# for a probe there.  Which node each lands on is read back, not assumed.
A=$(submit_json "{\"name\":\"a\",\"tasks\":1,\"gpus_per_task\":8,\"command\":\"while [ ! -e $T/release ]; do sleep 0.1; done\"}")
wait_for "a running" 15 job_state_is "$A" RUNNING
B=$(submit_json "{\"name\":\"b\",\"tasks\":1,\"gpus_per_task\":4,\"command\":\"while [ ! -e $T/release ]; do sleep 0.1; done\"}")
wait_for "b running" 15 job_state_is "$B" RUNNING
DN=$(job_field "$A" nodes)
CN=$(job_field "$B" nodes)
[ -n "$DN" ] && [ -n "$CN" ] && [ "$DN" != "$CN" ] || fail "a on '$DN', b on '$CN'"
BIG=$(submit_json '{"name":"big","tasks":4,"gpus_per_task":8,"command":["true"]}') # never fits
wait_for "big pending" 10 job_state_is "$BIG" PENDING

# ---- musterd killed: first its lease still runs, then no musterd leads ------------------------
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
# The user's report: this cordon was dropped by the restarted musterd, read 0.4 s before the node
# registered.  It is sent (the dead leader's lease still runs) and kept.
expect_rc 0 ctl cordon "$CN"
out_has "cordon requested for node $CN"
rcli DEL "${P}leader" >/dev/null # the lease ran out (without waiting leader_lease_s for it)
n=$(rcli XLEN "${P}control")

expect_rc 0 ctl cordon "$CN"
out_has "cordon of node $CN recorded; no musterd leads right now"
expect_rc 0 ctl -o json drain "$DN"
jqo ".cmd == \"drain\" and .arg == \"$DN\" and .sent == false"
expect_rc 1 ctl drain "$DN" --wait
err_has "no musterd leads right now (${P}leader is free)"
expect_rc 0 ctl -o json nodes
jqo ".[] | select(.name == \"$CN\") | .wanted.state == \"cordoned\""
jqo ".[] | select(.name == \"$DN\") | .wanted.state == \"draining\""
expect_rc 0 ctl nodes
grep -E "^$CN +spot-a +spot +cordoned " "$T/out" >/dev/null || fail "nodes table: $(cat "$T/out")"
grep -E "^$DN +spot-a +spot +draining " "$T/out" >/dev/null || fail "nodes table: $(cat "$T/out")"
out_has "by the operator: applied when it registers"
ok "cordon and drain with no musterd: recorded, shown by musterctl nodes"

expect_rc 1 tctl reload
err_has "musterctl: reload: no musterd leads right now (${P}leader is free)"
expect_rc 1 tctl cancel "$BIG"
err_has "musterctl: cancel: no musterd leads right now"
expect_rc 1 tctl why "$BIG"
err_has "musterctl: why: no musterd leads right now (${P}leader is free), so none can say why it waits"
[ "$(rcli XLEN "${P}control")" = "$n" ] || fail "something was queued with no musterd: $(rcli XRANGE "${P}control" - +)"
ok "reload, cancel and why with no musterd: refused at once, nothing queued"

# A leader that does not answer (its key held, as by a musterd that hangs): reload is sent with
# its --timeout as the deadline, nobody answers, and musterctl says it expired.
rcli SET "${P}leader" "9 musterd@hung tcp://127.0.0.1:1" >/dev/null
expect_rc 1 tctl reload --timeout 1
err_has "no answer from musterd within 1s"
err_has "expired and is never applied"
stale=$(rcli XREVRANGE "${P}control" + - COUNT 1 | head -1)
[ "$(rcli XLEN "${P}control")" = $((n + 1)) ] && [ "$(rcli HGET "${P}reload" id)" != "$stale" ] ||
    fail "the unanswered reload: $(rcli XRANGE "${P}control" - +)"
rcli DEL "${P}leader" >/dev/null
ok "reload nobody answers: exit 1 at its deadline, saying it expired"

# ---- musterd is back -------------------------------------------------------------------------
start_musterd "$CONFIG"
wait_for "the stale reload dropped" 15 grep -q "control reload '' (entry $stale) expired" "$T/musterd.log"
[ "$(rcli HGET "${P}reload" id)" != "$stale" ] || fail "the stale reload was applied"
wait_for "$CN cordoned after it registered" 15 '[ "$(node_state "$CN")" = cordoned ]'
wait_for "$DN draining after it registered" 15 '[ "$(node_state "$DN")" = draining ]'
wait_for "a requeued off the drained node" 20 '[ "$(job_field "$A" attempt)" = 2 ]'
[ "$(job_state "$B")" = RUNNING ] && [ "$(job_field "$B" attempt)" = 1 ] ||
    fail "b on the cordoned node: $(job_state "$B"), attempt $(job_field "$B" attempt)"
rcli XRANGE "${P}events" - + | grep -qF "node $DN drained" || fail "no 'node $DN drained' event"
ok "after the restart the kept cordon and drain are applied as the nodes register"

# No new job on the cordoned node: the probe fits there and nowhere else, and waits.  (The
# requeued a and big go first: a reservation for either would hold the probe back as well.)
expect_rc 0 ctl why "$BIG" # with a leader, why answers
expect_rc 0 ctl cancel "$A" "$BIG"
wait_for "a and big cancelled" 15 'job_state_is "$A" CANCELLED && job_state_is "$BIG" CANCELLED'
PROBE=$(submit_json '{"name":"probe","tasks":1,"gpus_per_task":4,"command":["true"]}')
wait_for "the probe got a reason" 15 '[ -n "$(job_field "$PROBE" reason)" ]'
[ "$(job_state "$PROBE")" = PENDING ] || fail "probe is $(job_state "$PROBE")"
expect_rc 0 ctl uncordon "$CN"
out_has "uncordon requested for node $CN"
[ "$(rcli HEXISTS "${P}node:wanted" "$CN")" = 0 ] || fail "uncordon left the kept state"
wait_for "the probe ran on $CN once uncordoned" 20 job_state_is "$PROBE" SUCCEEDED
[ "$(job_field "$PROBE" nodes)" = "$CN" ] || fail "probe ran on $(job_field "$PROBE" nodes)"
expect_rc 0 ctl reload
out_has "ok: "
ok "the cordoned node took no new job until uncordon; reload answers with a leader"

: >"$T/release"
wait_for "b done" 20 job_state_is "$B" SUCCEEDED

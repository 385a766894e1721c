#!/usr/bin/env bash
# musterctl why (issue #18), computed by musterd with the scheduler's core on demand: a job
# pending on a spot pool cooling down after an interruption and a busy on-demand rack shows both
# reasons (the spot type's cool-down, the rack busy rather than too small) and an estimated
# start (the cool-down's end); the preemption preview lists the victim the planner would take
# (the job is held, so musterd itself preempts nothing), and nothing changes after it.  A job
# behind the victim shows its estimated start naming the victim, whose time limit frees the
# room.  musterctl show prints the same for a pending job.  A finished job and an unknown one
# exit 1.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
command -v curl >/dev/null 2>&1 || fail "curl not found"
P=$MUSTER_KEY_PREFIX

start_redis
make_config - >/dev/null <<'EOF'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3},
    {"name": "od-a", "capacity": "on-demand", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 10}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "min_runtime_s": 0,
  "spot_cooldown_s": 600
}
EOF
start_musterd "$CONFIG"
start_imds s1 --zone z1 --lifecycle spot
start_worker s1 spot-a 8 --label zone=z1 --label rack=r1 --imds "http://127.0.0.1:$IMDS_PORT" --imds-interval-s 1
start_worker s2 spot-a 8 --label zone=z1 --label rack=r3
start_worker o1 od-a 8 --label zone=z1 --label rack=r2
wait_for "3 nodes registered" 10 '[ "$(rcli HLEN "${P}nodes")" = 3 ]'

# The spot pool cools down after an interruption notice.
curl -sf -X POST -d '{"action":"terminate","in_s":120}' "http://127.0.0.1:$IMDS_PORT/mock/notice" >/dev/null
wait_for "s1 terminating" 10 '[ "$(rcli HGET "${P}nodes" s1 | jq -r .state)" = terminating ]'

# A low-priority gang fills the on-demand rack.
vid=$(submit_json '{"name":"victim","priority":0,"tasks":1,"gpus_per_task":8,"capacity":["on-demand"],"command":["sleep","300"]}')
wait_for "victim running" 20 job_state_is "$vid" RUNNING

# A held high-priority gang that wants one rack.  musterd must never see it unheld (it would
# preempt the victim itself), and a blocked XREADGROUP is answered stream by stream: so the
# submission and the hold go in while musterd is stopped, and its first read takes both in,
# submissions before commands.  It adopts the running victim when it starts again.
stop_musterd
pid=$(submit_json '{"name":"big","priority":10,"tasks":1,"gpus_per_task":8,"topology":{"required":"rack"},"command":["true"]}')
rcli XADD "${P}control" '*' cmd hold arg "$pid" >/dev/null
start_musterd "$CONFIG"
wait_for "job $pid held and pending" 20 '[ "$(rcli HGET "${P}job:$pid" held)" = 1 ] && job_state_is "$pid" PENDING'
wait_for "the victim adopted by the new musterd" 20 grep -q "job=$vid attempt=1 adopted after the restart" "$T/musterd.log"

expect_rc 0 ctl -o json why "$pid"
cp "$T/out" "$T/why.json"
jq -e --arg v "$vid" '
    .state == "PENDING" and .held == true
    and .queue.name == "default" and .queue.quota_ok == true
    and (.capacity | map(.type)) == ["spot", "on-demand"]
    and (.capacity | all(.fits == false and (.reason | length) > 0))
    and (.pools[] | select(.pool == "spot-a") | .cooldown_s > 0)
    and (.pools[] | select(.pool == "od-a") | .cooldown_s == 0 and .capacity_allowed)
    and .preemption.plan == true
    and (.preemption.victims | map(.job)) == [$v]
    and .preemption.lost_gpu_s >= 0' "$T/why.json" >/dev/null ||
    fail "why -o json: $(cat "$T/why.json")"
ok "why: a reason per capacity type, the spot pool's cool-down, the victim the planner would take"

# Both reasons and an estimated start: spot waits for the cool-down, the on-demand rack is busy
# (a rack that holds the gang exists), and the core's reservation search puts the start at the
# cool-down's end (spot-a's ready node s2), not at the victim's time limit.
jq -e '
    (.capacity[] | select(.type == "spot") | .reason | test("cooling down"))
    and (.capacity[] | select(.type == "on-demand") | .reason | test("rack"))
    and .topology.required == "rack"
    and (.topology.levels[] | select(.level == "rack") | .free_tasks == 0 and .max_tasks == 1 and .state == "busy")
    and .start.reservation == false
    and .start.freed_when == "cooldown_ends" and .start.in_s > 0 and .start.in_s <= 600
    and .order.in_pass == false
    and .backfill.state == "none"' "$T/why.json" >/dev/null ||
    fail "why, reasons and start: $(cat "$T/why.json")"
ok "why: cooled-down spot pool and busy rack, both reasons, and an estimated start"

expect_rc 0 ctl why "$pid"
grep -q "^job $pid is PENDING (held)" "$T/out" || fail "why: $(cat "$T/out")"
grep -q "^queue default: its quota admits the gang" "$T/out" || fail "why, queue: $(cat "$T/out")"
grep -qE "^  spot-a +spot +cooling down for [0-9]+m[0-9]+s more" "$T/out" || fail "why, cool-down: $(cat "$T/out")"
grep -q "^    $vid (priority 0): loses" "$T/out" || fail "why, preview: $(cat "$T/out")"
grep -q "a dry run: nothing was stopped" "$T/out" || fail "why: $(cat "$T/out")"
grep -qE "^earliest start: [0-9-]+ [0-9:]+ UTC, in [0-9]+m[0-9]+s, when a pool's cool-down ends" "$T/out" ||
    fail "why, start: $(cat "$T/out")"
grep -qE "^  rack +\(required\) +0 / +1 tasks: busy, fits once running gangs end" "$T/out" ||
    fail "why, rack: $(cat "$T/out")"
ok "why as text"

# musterctl show of the pending job carries the same answer.  show waits only a few seconds for
# musterd (without an answer it prints the job and why_error), so a busy machine retries.
show_has_why() { # ARGS...: musterctl show ARGS into $T/show.out has musterd's answer
    ctl "$@" >"$T/show.out" 2>"$T/show.err" && ! grep -q '"why_error"\|^why  ' "$T/show.out"
}
wait_for "show -o json carries why" 60 show_has_why -o json show "$pid"
jq -e --arg v "$vid" '.state == "PENDING" and .why.preemption.victims[0].job == $v
    and .why.start.freed_when == "cooldown_ends"' "$T/show.out" >/dev/null || fail "show -o json: $(cat "$T/show.out")"
wait_for "show carries why" 60 show_has_why show "$pid"
cp "$T/show.out" "$T/out"
grep -q "^why it waits (musterctl why $pid):" "$T/out" || fail "show: $(cat "$T/out")"
grep -q "^    $vid (priority 0): loses" "$T/out" || fail "show, preview: $(cat "$T/out")"
ok "show of a pending job says why it waits (table and json)"

# Nothing changed: the victim runs its first attempt, untouched; the held job still waits.
job_state_is "$vid" RUNNING || fail "victim is $(job_state "$vid") after why"
[ "$(rcli HGET "${P}job:$vid" attempt)" = 1 ] || fail "victim attempt $(rcli HGET "${P}job:$vid" attempt)"
job_state_is "$pid" PENDING || fail "held job is $(job_state "$pid") after why"
! rcli XRANGE "${P}events" - + | has "preempted by job $pid" || fail "why preempted the victim"
ok "the preview changed nothing"

# A job of the victim's priority behind it gets the pass's reservation: the estimated start from
# the victim's time limit (the default, a day), and no preemption plan (not lower priority).
qid=$(submit_json '{"name":"next","priority":0,"tasks":1,"gpus_per_task":8,"capacity":["on-demand"],"command":["true"]}')
wait_for "job $qid has an estimated start" 20 \
    'ctl -o json why "'"$qid"'" | jq -e ".est_start_in_s > 3600 and .preemption.plan == false"'
expect_rc 0 ctl -o json why "$qid"
jq -e --arg v "$vid" '.start.reservation == true and .start.freed_by == $v and .start.freed_when == "time_limit"
    and .start.in_s > 3600' "$T/out" >/dev/null || fail "why, start: $(cat "$T/out")"
expect_rc 0 ctl why "$qid"
grep -qE "^expected start: [0-9-]+ [0-9:]+ UTC, in [0-9]+h[0-9]+m, when $vid reaches its time limit \(its reservation\)" "$T/out" ||
    fail "why, expected start: $(cat "$T/out")"
ok "why gives a reserved job its estimated start, naming the gang whose time limit frees the room"

# A gang that asks for no topology may span racks: a rack that cannot hold it whole does not make
# it "never fit" (spot-a's two nodes are in two racks; the pool is cooling down, so it waits).
sid=$(submit_json '{"name":"span","tasks":2,"gpus_per_task":8,"capacity":["spot"],"command":["true"]}')
wait_for "job $sid pending with a reason" 20 '[ -n "$(job_field "'"$sid"'" reason)" ]'
expect_rc 0 ctl why "$sid"
grep -qE "^  rack +[0-9]+ / +1 tasks: none holds the whole gang; it may span several$" "$T/out" ||
    fail "why, a level the gang may span: $(cat "$T/out")"
! grep -q "never fits until nodes join" "$T/out" || fail "why says never fits: $(cat "$T/out")"
ok "why: a level the gang need not fit in one domain of is not 'never fits'"

expect_rc 1 ctl why 1-1
grep -q "job '1-1' not found" "$T/err" || fail "why of an unknown job: $(cat "$T/err")"
did=$(submit_json '{"capacity":["on-demand"],"gpus_per_task":0,"command":["true"]}')
wait_for "job $did done" 20 job_state_is "$did" SUCCEEDED
expect_rc 1 ctl why "$did"
grep -q "is SUCCEEDED, not waiting for anything" "$T/err" || fail "why of a finished job: $(cat "$T/err")"
ok "why of an unknown or finished job: exit 1"

#!/usr/bin/env bash
# High availability (issue #14): two musterd on one Redis, three workers that know both.  The
# leader is kill -9'd under a stream of submissions; the standby takes the lease, adopts the
# running gang (not restarted: attempt 1, its task ran once) and places the rest.  Every
# acknowledged submission ends SUCCEEDED, no attempt's task runs twice (t0490's accounting), and
# the epoch moved on.  Takeover time is measured in bench/, never asserted here.
source "$(dirname "$0")/lib.sh"

start_redis
# A short lease for a quick takeover; the workers' lease (node_lost_after_s) well above it.
make_config --with '{"leader_lease_s": 3, "node_lost_after_s": 20}' >/dev/null
start_musterd_ha a "$CONFIG"
wait_for "musterd a leads" 10 '[ "$(leader_pid)" = "${HA_PID[a]}" ]'
start_musterd_ha b "$CONFIG"
wait_for "musterd b stands by" 10 'grep -q "standing by" "$T/musterd-b.log"'
epoch_a=$(rcli HGET muster:leadership epoch)
wait_for "musterctl status shows a leading and b standing by" 10 \
    'ctl -o json status | jq -e --argjson p "${HA_PID[a]}" --arg a "tcp://127.0.0.1:${HA_PORT[a]}" \
        --arg b "tcp://127.0.0.1:${HA_PORT[b]}" \
        ".leading and .pid == \$p and (.holder | endswith(\$a)) and ([.standbys[].holder | endswith(\$b)] | any)" >/dev/null'
ctl status | has -F "leader:   musterd@" || fail "musterctl status names no leader: $(ctl status)"

# A list is the endpoints, comma-separated; anything else is refused as a usage error.
for bad in "tcp://127.0.0.1:${HA_PORT[a]},http://127.0.0.1:1" "tcp://127.0.0.1:${HA_PORT[a]}," \
    "$(printf 'tcp://127.0.0.1:1,%.0s' 1 2 3 4 5 6 7 8)tcp://127.0.0.1:2"; do
    expect_rc 2 "$MUSTER_BIN/muster-worker" --scheduler "$bad" --node bad --pool spot-a --gpus 1 \
        --state-dir "$T/w/bad"
    has -F "expected tcp://HOST:PORT, or up to 8 of them" <"$T/err" || fail "--scheduler '$bad': $(cat "$T/err")"
done
SCHED_ENDPOINTS="tcp://127.0.0.1:${HA_PORT[a]},tcp://127.0.0.1:${HA_PORT[b]}"
export SCHED_ENDPOINTS
mkdir -p "$T/ran"
for n in n1 n2 n3; do start_worker "$n" spot-a 8; done
wait_for "3 nodes registered" 15 '[ "$(rcli HLEN muster:nodes)" = 3 ]'

# Each task marks its attempt with noclobber: a second run of the same attempt's task is caught.
mark='set -C; : > '"$T"'/ran/$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK 2>/dev/null || echo "$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK" >> '"$T"'/dup'
long=$(submit_json "$(jq -cn --arg c "$mark; sleep 6" '{command: $c, tasks: 2, gpus_per_task: 4, max_retries: 0}')")
wait_for "the long gang running" 15 job_state_is "$long" RUNNING

submitted="$T/submitted"
: >"$submitted"
submitter() {
    local n=0 id spec
    while [ ! -e "$T/stop" ]; do
        n=$((n + 1))
        spec=$(jq -cn --arg c "$mark; sleep 0.$((RANDOM % 5 + 1))" --arg k "ha-$n" \
            '{command: $c, tasks: 1, gpus_per_task: 2, max_retries: 0, idempotency_key: $k}')
        # The idempotency key makes a retried submission land once (t0490).
        until id=$("$MUSTER_BIN/musterctl" submit - <<<"$spec" 2>/dev/null) || [ -e "$T/stop" ]; do
            sleep 0.2
        done
        case "$id" in [0-9]*-[0-9]*) echo "$id" >>"$submitted" ;; esac
        sleep 0.1
    done
}
submitter &
_mu_pids+=("$!")
sub_pid=$!

wait_for "a few submissions in" 20 '[ "$(wc -l <"$submitted")" -ge 5 ]'
kill -9 "${HA_PID[a]}"
wait "${HA_PID[a]}" 2>/dev/null || true
wait_for "musterd b leads" 30 '[ "$(leader_pid)" = "${HA_PID[b]}" ]'
epoch_b=$(rcli HGET muster:leadership epoch)
[ "$epoch_b" -gt "$epoch_a" ] || fail "epoch did not move on: $epoch_a then $epoch_b"
ctl -o json status | jq -e --argjson p "${HA_PID[b]}" --argjson e "$epoch_b" '.leading and .pid == $p and .epoch == $e and .since_ms > 0' >/dev/null ||
    fail "musterctl status after the takeover: $(ctl -o json status)"
ok "the standby took the lease after kill -9 of the leader (epoch $epoch_a -> $epoch_b)"

# Submissions keep flowing through the new leader for a while.
want=$(($(wc -l <"$submitted") + 10))
wait_for "more submissions after the takeover" 60 "[ \"\$(wc -l <'$submitted')\" -ge $want ]"
touch "$T/stop"
wait "$sub_pid" 2>/dev/null || true

wait_for "every node back with the new leader" 30 \
    '[ "$(ctl -o json nodes | jq "[.[] | select(.state == \"ready\")] | length")" = 3 ]'
total=$(sort -u "$submitted" | wc -l)
final_all() {
    local id
    while read -r id; do
        case "$(job_state "$id")" in SUCCEEDED | FAILED | CANCELLED | REJECTED | TIMEOUT) ;; *) return 1 ;; esac
    done < <(sort -u "$submitted" <(echo "$long"))
}
wait_for "every one of $total acknowledged submissions final" 120 final_all

bad=0
while read -r id; do
    st=$(job_state "$id")
    [ "$st" = SUCCEEDED ] || { echo "# job $id ended $st: $(job_field "$id" error)"; bad=$((bad + 1)); }
done < <(sort -u "$submitted")
[ "$bad" = 0 ] || fail "$bad of $total jobs did not succeed"
dups=$([ -e "$T/dup" ] && wc -l <"$T/dup" || echo 0)
[ "$dups" = 0 ] || fail "$dups task(s) of the same attempt ran twice: $(head -5 "$T/dup")"
ok "all $total submissions SUCCEEDED across the takeover; no attempt's task ran twice"

[ "$(job_state "$long")" = SUCCEEDED ] || fail "the long gang ended $(job_state "$long")"
[ "$(job_field "$long" attempt)" = 1 ] || fail "the long gang was restarted: attempt $(job_field "$long" attempt)"
ran=("$T/ran/$long".*)
[ "${#ran[@]}" = 2 ] || fail "the long gang's tasks ran ${#ran[@]} times: ${ran[*]##*/}"
grep -q "scheduler epoch $epoch_b" "$T/worker-n1.log" || fail "worker n1 never heard epoch $epoch_b"
ok "the running gang was adopted by the new leader, not restarted"
[ "$(rcli SCARD muster:active)" = 0 ] || fail "$(rcli SCARD muster:active) jobs still active"

#!/usr/bin/env bash
# shellcheck disable=SC2154 # submitted, sub_pid and task are set by soak.sh (soak_submitter_start)
# Soak test with high-availability chaos (issue #14): t0490's stream of gangs and accounting, on
# a Redis primary + replica + three Sentinels and two musterd (leader + standby) given only the
# redis+sentinel:// URL, with four workers that know both schedulers.  A chaos loop picks at
# random: kill -9 of the leading musterd, kill -STOP of it past its lease then -CONT, a SENTINEL
# FAILOVER, or kill -9 of the Redis primary (brought back as a replica of the new one).  A
# musterd that exits (killed, or stepping down after the freeze) is restarted on its endpoint, as
# systemd would.  At the end every acknowledged submission is in a final state (SUCCEEDED), no
# attempt's task ran twice, nothing is left in muster:active, and the counts add up.
# MUSTER_SOAK_S sets the chaos time (default 30 s); MUSTER_SOAK_REDIS=0 leaves the Redis
# failovers out of the draw; MUSTER_SOAK_OUTAGES=1 adds scheduler outages (issue #40): both
# musterd killed for 2 to 5 times node_lost_after_s while a gang runs, the workers' witness
# holding their leases (long: 60 to 150 s each, so not in CI's short run).  No task may be
# stopped by self-fencing in any case: no chaos here keeps Redis away for a lease.
#
# A failover loses the writes the old primary acknowledged last (asynchronous replication):
# musterd writes its jobs again on the new primary (docs/deploy.md, "What a failover can lose"),
# but a submission acknowledged and neither replicated nor read by musterd is wholly absent (no
# hash, no stream entry); it is counted apart as "lost", and allowed only when a Redis failover
# happened.  Every wait polls with a generous deadline; nothing asserts how long a step took.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/soak.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
soak_s=${MUSTER_SOAK_S:-30}
kinds=(0 1 2 3) # chaos kinds drawn: 0-1 the leader, 2-3 Redis, 4 no scheduler at all
[ "${MUSTER_SOAK_REDIS:-1}" = 0 ] && kinds=(0 1)
[ "${MUSTER_SOAK_OUTAGES:-0}" = 1 ] && kinds+=(4)
lease_s=3
lost_s=30
mkdir -p "$T/ran"

# ---- Redis: a primary, a replica, three Sentinels (as t0409) -----------------------------------
declare -A redis_pid=()
# redis_up PORT [PRIMARY_PORT]: a redis-server on PORT, a replica of PRIMARY_PORT when given.
redis_up() {
    local port=$1 of=()
    [ $# -ge 2 ] && of=(--replicaof 127.0.0.1 "$2")
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        --daemonize no --logfile "$T/redis-$port.log" "${of[@]}" >/dev/null 2>&1 &
    redis_pid[$port]=$!
    _mu_pids+=("$!")
    wait_for "redis-server on $port answers" 20 "[ \"\$(redis-cli -p $port ping 2>/dev/null)\" = PONG ]"
}
P1=$(free_port)
P2=$(free_port)
redis_up "$P1"
redis_up "$P2" "$P1"
start_sentinels "$P1"

# other PORT: the other Redis port.
other() {
    if [ "$1" = "$P1" ]; then echo "$P2"; else echo "$P1"; fi
}
# rcli ARGS...: redis-cli against the primary the Sentinels name now.
rcli() {
    redis-cli -p "$(sentinel_primary)" "$@"
}
# ha_ready: every Sentinel names the same primary, which says it is one, and its replica's link
# is up and seen by every Sentinel: a Redis failure now has a replica to fail over to.
ha_ready() {
    local p r s
    p=$(sentinel_primary)
    [ -n "$p" ] || return 1
    r=$(other "$p")
    for s in "${SENTINELS[@]}"; do
        [ "$(redis-cli -p "$s" SENTINEL get-master-addr-by-name mymaster | sed -n 2p)" = "$p" ] || return 1
        redis-cli -p "$s" SENTINEL replicas mymaster | has -x "$r" || return 1
        [ "$(redis-cli -p "$s" SENTINEL sentinels mymaster | grep -c '^name$')" = 2 ] || return 1
    done
    redis-cli -p "$p" ROLE | head -n 1 | has -x master || return 1
    redis-cli -p "$r" INFO replication | tr -d '\r' | has '^master_link_status:up$'
}
wait_for "the Sentinels see the primary $P1 and its replica" 60 ha_ready

# ---- two musterd, four workers ------------------------------------------------------------------
export MUSTER_REDIS_URL=$MUSTER_SENTINEL_URL
# A short lease for quick takeovers; the workers' lease (node_lost_after_s) well above a takeover
# plus a failover, so that no task is stopped by the chaos itself.
make_config --with "{\"leader_lease_s\": $lease_s, \"node_lost_after_s\": $lost_s}" >/dev/null
declare -A HA_PID HA_PORT
# musterd_up NAME: musterd NAME on its endpoint (the same one after a restart: the workers know it).
musterd_up() {
    HA_PORT[$1]=${HA_PORT[$1]:-$(free_port)}
    "$MUSTER_BIN/musterd" --config "$CONFIG" --redis "$MUSTER_REDIS_URL" \
        --bind "tcp://127.0.0.1:${HA_PORT[$1]}" >>"$T/musterd-$1.log" 2>&1 &
    HA_PID[$1]=$!
    _mu_pids+=("$!")
}
# revive: restarts a musterd that exited (killed, or stepped down), as Restart=on-failure does.
restarts=0
revive() {
    local n
    for n in a b; do
        _mu_alive "${HA_PID[$n]}" && continue
        wait "${HA_PID[$n]}" 2>/dev/null || true
        musterd_up "$n"
        restarts=$((restarts + 1))
    done
}
# leader_name: a or b, the musterd that holds the lease now ("" when none does).
leader_name() {
    local pid n
    [ -n "$(rcli GET muster:leader 2>/dev/null)" ] || return 0
    pid=$(rcli HGET muster:leadership pid 2>/dev/null)
    for n in a b; do
        [ "${HA_PID[$n]}" = "$pid" ] && echo "$n"
    done
    return 0
}
musterd_up a
wait_for "musterd a leads" 20 '[ "$(leader_name)" = a ]'
musterd_up b
wait_for "musterd b stands by" 20 'grep -q "standing by" "$T/musterd-b.log"'
SCHED_ENDPOINTS="tcp://127.0.0.1:${HA_PORT[a]},tcp://127.0.0.1:${HA_PORT[b]}"
export SCHED_ENDPOINTS
for n in n1 n2 n3 n4; do start_worker "$n" spot-a 8; done
wait_for "4 nodes registered" 30 '[ "$(rcli HLEN muster:nodes)" = 4 ]'

# ---- the stream of submissions (tests/integration/soak.sh, shared with t0490) ------------------
soak_submitter_start

# ---- chaos ---------------------------------------------------------------------------------------
kills_leader=0 freezes=0 failovers=0 kills_primary=0 outages=0 outage_s=0 skipped=0
end=$((SECONDS + soak_s))
while [ $SECONDS -lt $end ]; do
    sleep $((RANDOM % 4 + 2))
    revive
    case ${kinds[$((RANDOM % ${#kinds[@]}))]} in
    0) # kill -9 of the leading musterd; it comes back as the standby
        l=$(leader_name)
        [ -n "$l" ] || { skipped=$((skipped + 1)); continue; }
        kill -9 "${HA_PID[$l]}" 2>/dev/null || true
        wait "${HA_PID[$l]}" 2>/dev/null || true
        sleep 0.$((RANDOM % 9 + 1))
        revive
        kills_leader=$((kills_leader + 1))
        ;;
    1) # the leader frozen past its lease, then thawed: it must step down, and is restarted
        l=$(leader_name)
        [ -n "$l" ] || { skipped=$((skipped + 1)); continue; }
        kill -STOP "${HA_PID[$l]}"
        sleep $((lease_s + 1 + RANDOM % 3))
        kill -CONT "${HA_PID[$l]}"
        freezes=$((freezes + 1))
        ;;
    2) # a planned Redis failover
        wait_for "Redis ready for a failover" 120 ha_ready
        old=$(sentinel_primary)
        [ "$(redis-cli -p "${SENTINELS[$((RANDOM % 3))]}" SENTINEL failover mymaster)" = OK ] ||
            { skipped=$((skipped + 1)); continue; }
        wait_for "the Sentinels promote $(other "$old")" 90 '[ "$(sentinel_primary)" = "$(other "$old")" ]'
        failovers=$((failovers + 1))
        ;;
    3) # kill -9 of the Redis primary; it comes back as a replica of the new one
        wait_for "Redis ready for a failover" 120 ha_ready
        old=$(sentinel_primary)
        kill -9 "${redis_pid[$old]}"
        wait "${redis_pid[$old]}" 2>/dev/null || true
        wait_for "the Sentinels promote $(other "$old")" 120 '[ "$(sentinel_primary)" = "$(other "$old")" ]'
        redis_up "$old" "$(other "$old")"
        kills_primary=$((kills_primary + 1))
        ;;
    4) # no musterd at all for 2-5 leases, with a gang running that outlasts the outage
        out=$(((2 + RANDOM % 4) * lost_s))
        spec=$(jq -cn --arg c "${task%%; sleep*}; sleep $((out + 5))" '{command: $c, max_retries: 0, tasks: 2, gpus_per_task: 4}')
        id=$(rcli XADD muster:submit '*' spec "$spec" 2>/dev/null) || { skipped=$((skipped + 1)); continue; }
        echo "$id" >>"$submitted"
        wait_for "the gang that outlasts the outage running" 120 "[ \"\$(rcli HGET muster:job:$id state)\" = RUNNING ]"
        for n in a b; do
            kill -9 "${HA_PID[$n]}" 2>/dev/null || true
            wait "${HA_PID[$n]}" 2>/dev/null || true
        done
        sleep "$out"
        revive
        outages=$((outages + 1)) outage_s=$((outage_s + out))
        ;;
    esac
done
touch "$T/stop"
wait "$sub_pid" 2>/dev/null || true
echo "# chaos over: leader killed $kills_leader times, frozen $freezes, SENTINEL FAILOVER $failovers, primary killed $kills_primary, no scheduler $outages times ($outage_s s), skipped $skipped (no leader, failover refused)"

# ---- accounting ----------------------------------------------------------------------------------
# A leader stepping down after a thaw may exit only now: bring every musterd back, one leading.
revive
wait_for "Redis settled" 120 ha_ready
wait_for "one musterd leads" 60 '[ -n "$(leader_name)" ]'
revive

total=$(sort -u "$submitted" | wc -l)
# absent ID: no job hash and no submission entry: the acknowledged write did not survive.
absent() {
    [ "$(rcli EXISTS "muster:job:$1")" = 0 ] && [ -z "$(rcli XRANGE muster:submit "$1" "$1")" ]
}
final_all() {
    local id st
    while read -r id; do
        st=$(rcli HGET "muster:job:$id" state)
        case "$st" in
        SUCCEEDED | FAILED | CANCELLED | REJECTED) ;;
        '') absent "$id" || { echo "$id: no job hash, its submission entry still there" >"$T/pending" && return 1; } ;;
        *) echo "$id: $st" >"$T/pending" && return 1 ;;
        esac
    done < <(sort -u "$submitted" <(rcli ZRANGE muster:jobs 0 -1))
}
# Not wait_for: it runs the check in a subshell, and revive must start musterd from this shell.
deadline=$((SECONDS + 300))
until final_all; do
    [ $SECONDS -lt $deadline ] || fail "timed out after 300s waiting for every one of $total acknowledged submissions to be final (job $(cat "$T/pending"))"
    revive
    sleep 1
done

declare -A by_state=()
attempts=0 lost=0
while read -r id; do
    st=$(rcli HGET "muster:job:$id" state)
    if [ -z "$st" ]; then
        lost=$((lost + 1))
        echo "# acknowledged submission $id was lost in a Redis failover"
        continue
    fi
    by_state[$st]=$((${by_state[$st]:-0} + 1))
    attempts=$((attempts + $(rcli HGET "muster:job:$id" attempt)))
done < <(sort -u "$submitted")
dups=$([ -e "$T/dup" ] && wc -l <"$T/dup" || echo 0)
takeovers=$(($(cat "$T"/musterd-*.log | grep -c "leading: took") - 1))
unsure=$(wc -l <"$T/unsure")
indexed=$(rcli ZCARD muster:jobs)
echo "# soak: submitted=$total succeeded=${by_state[SUCCEEDED]:-0} failed=${by_state[FAILED]:-0} rejected=${by_state[REJECTED]:-0} cancelled=${by_state[CANCELLED]:-0} lost_in_failover=$lost attempts=$attempts task_runs=$(ls "$T/ran" | wc -l) duplicate_runs=$dups"
fenced=$(cat "$T"/worker-*.log | grep -c "SELF-FENCING" || true)
echo "# soak: takeovers=$takeovers musterd_restarts=$restarts epoch=$(rcli GET muster:epoch) unsure_xadds=$unsure indexed=$indexed self_fencings=$fenced"

[ "$dups" = 0 ] || fail "$dups task(s) of the same attempt ran twice: $(head -5 "$T/dup")"
[ "$fenced" = 0 ] || fail "tasks were stopped by self-fencing $fenced time(s): $(grep -h SELF-FENCING "$T"/worker-*.log | head -3)"
[ "$lost" = 0 ] || [ $((failovers + kills_primary)) -gt 0 ] ||
    fail "$lost acknowledged submission(s) lost without any Redis failover"
[ "${by_state[SUCCEEDED]:-0}" = $((total - lost)) ] || fail "not every job succeeded: $(declare -p by_state)"
[ "$indexed" -ge $((total - lost)) ] && [ "$indexed" -le $((total - lost + unsure)) ] ||
    fail "jobs index has $indexed, submitted $total (- $lost lost, + at most $unsure unsure)"
while read -r id; do
    st=$(rcli HGET "muster:job:$id" state)
    [ "$st" = SUCCEEDED ] || fail "job $id in the index is $st"
done < <(rcli ZRANGE muster:jobs 0 -1)
[ "$(rcli SCARD muster:active)" = 0 ] || fail "$(rcli SCARD muster:active) jobs still active"
ok "soak: $((total - lost)) of $total acknowledged jobs SUCCEEDED ($lost lost in Redis failovers) through $kills_leader leader kills, $freezes freezes, $failovers failovers, $kills_primary primary kills and $outages outages without a scheduler ($takeovers takeovers); no attempt ran twice, no task fenced"

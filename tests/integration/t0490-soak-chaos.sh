#!/usr/bin/env bash
# shellcheck disable=SC2154 # submitted, sub_pid and task are set by soak.sh (soak_submitter_start)
# Soak test with chaos (issue #5): a steady stream of gangs while a chaos loop kill -9s and
# restarts musterd, the workers and Redis (AOF, fsync always) at random.  At the end every
# submitted job is in a final state (SUCCEEDED: the tasks never fail on their own), no attempt's
# task ran twice, and the counts add up.  MUSTER_SOAK_S sets the chaos time (default 30 s in CI).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/soak.sh"

soak_s=${MUSTER_SOAK_S:-30}
REDIS_PORT=$(free_port)
export MUSTER_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
mkdir -p "$T/redis" "$T/ran"
REDIS_PID=
redis_up() {
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$T/redis" --appendonly yes \
        --appendfsync always --save '' >>"$T/redis.log" 2>&1 &
    REDIS_PID=$!
    _mu_pids+=("$REDIS_PID")
    wait_for "redis up" 20 '[ "$(rcli ping 2>/dev/null)" = PONG ]'
}
redis_up
make_config >/dev/null
start_musterd "$CONFIG"
nodes=(n1 n2 n3 n4)
for n in "${nodes[@]}"; do start_worker "$n" spot-a 8; done
wait_for "4 nodes registered" 15 '[ "$(rcli HLEN muster:nodes)" = 4 ]'

# The stream of submissions (tests/integration/soak.sh, shared with t0491).
soak_submitter_start

kills_sched=0 kills_worker=0 kills_redis=0
end=$((SECONDS + soak_s))
while [ $SECONDS -lt $end ]; do
    sleep $((RANDOM % 4 + 2))
    case $((RANDOM % 3)) in
    0)
        kill -9 "$MUSTERD_PID" 2>/dev/null || true
        wait "$MUSTERD_PID" 2>/dev/null || true
        sleep 0.$((RANDOM % 9 + 1))
        start_musterd "$CONFIG"
        kills_sched=$((kills_sched + 1))
        ;;
    1)
        n=${nodes[$((RANDOM % 4))]}
        kill -9 "${WORKER_PID[$n]}" 2>/dev/null || true
        wait "${WORKER_PID[$n]}" 2>/dev/null || true
        sleep 0.$((RANDOM % 9 + 1))
        start_worker "$n" spot-a 8
        kills_worker=$((kills_worker + 1))
        ;;
    2)
        kill -9 "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
        sleep 0.$((RANDOM % 9 + 1))
        redis_up
        kills_redis=$((kills_redis + 1))
        ;;
    esac
done
touch "$T/stop"
wait "$sub_pid" 2>/dev/null || true
echo "# chaos over: musterd killed $kills_sched times, workers $kills_worker, redis $kills_redis"

total=$(sort -u "$submitted" | wc -l)
final_all() {
    local id st
    while read -r id; do
        st=$(rcli HGET "muster:job:$id" state)
        case "$st" in SUCCEEDED | FAILED | CANCELLED | REJECTED) ;; *) return 1 ;; esac
    done < <(sort -u "$submitted" <(rcli ZRANGE muster:jobs 0 -1))
}
wait_for "every one of $total submitted jobs final" 300 final_all

declare -A by_state=()
attempts=0
while read -r id; do
    st=$(rcli HGET "muster:job:$id" state)
    by_state[$st]=$((${by_state[$st]:-0} + 1))
    attempts=$((attempts + $(rcli HGET "muster:job:$id" attempt)))
done < <(sort -u "$submitted")
dups=$( [ -e "$T/dup" ] && wc -l <"$T/dup" || echo 0)
echo "# soak: submitted=$total succeeded=${by_state[SUCCEEDED]:-0} failed=${by_state[FAILED]:-0} rejected=${by_state[REJECTED]:-0} cancelled=${by_state[CANCELLED]:-0} attempts=$attempts task_runs=$(ls "$T/ran" | wc -l) duplicate_runs=$dups"
[ "$dups" = 0 ] || fail "$dups task(s) of the same attempt ran twice: $(head -5 "$T/dup")"
[ "${by_state[SUCCEEDED]:-0}" = "$total" ] || fail "not every job succeeded: $(declare -p by_state)"
unsure=$(wc -l <"$T/unsure")
indexed=$(rcli ZCARD muster:jobs)
echo "# soak: $unsure bare XADD(s) without a reply; $indexed jobs in the index"
[ "$indexed" -ge "$total" ] && [ "$indexed" -le $((total + unsure)) ] ||
    fail "jobs index has $indexed, submitted $total (+ at most $unsure unsure)"
while read -r id; do
    st=$(rcli HGET "muster:job:$id" state)
    [ "$st" = SUCCEEDED ] || fail "job $id in the index is $st"
done < <(rcli ZRANGE muster:jobs 0 -1)
[ "$(rcli SCARD muster:active)" = 0 ] || fail "$(rcli SCARD muster:active) jobs still active"
ok "soak: $total jobs all SUCCEEDED through $kills_sched scheduler, $kills_worker worker and $kills_redis Redis kills; no attempt ran twice"

#!/usr/bin/env bash
# Soak test with chaos (issue #5): a steady stream of gangs while a chaos loop kill -9s and
# restarts musterd, the workers and Redis (AOF, fsync always) at random.  At the end every
# submitted job is in a final state (SUCCEEDED: the tasks never fail on their own), no attempt's
# task ran twice, and the counts add up.  MUSTER_SOAK_S sets the chaos time (default 30 s in CI).
source "$(dirname "$0")/lib.sh"

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

# Each task marks its attempt with noclobber: a second run of the same attempt's task is caught.
task='set -C; : > '"$T"'/ran/$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK 2>/dev/null || echo "$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK" >> '"$T"'/dup; sleep 0.$((RANDOM % 8 + 2))'
spec_json=$(jq -cn --arg c "$task" '{command: $c, max_retries: 0}')

# Half the jobs go in with a bare XADD, as redis-cli users do: when Redis dies between storing
# the entry and replying, the submitter cannot know whether it landed ("unsure").  The other
# half use musterctl's idempotency key and retry the same key until they get an answer, which
# is how a pipeline gets exactly-once submission.
submitted="$T/submitted"
: >"$submitted"
: >"$T/unsure"
submitter() {
    local n=0
    while [ ! -e "$T/stop" ]; do
        local tasks=$((RANDOM % 3 + 1)) gpus=$((1 << (RANDOM % 3)))
        local spec id=
        n=$((n + 1))
        if [ $((n % 2)) = 0 ]; then
            spec=$(echo "$spec_json" | jq -c --argjson t $tasks --argjson g $gpus '. + {tasks: $t, gpus_per_task: $g}')
            id=$(rcli XADD muster:submit '*' spec "$spec" 2>/dev/null) || true
            case "$id" in [0-9]*-[0-9]*) ;; *) echo "$n" >>"$T/unsure" ;; esac
        else
            spec=$(echo "$spec_json" | jq -c --argjson t $tasks --argjson g $gpus --arg k "soak-$n" '. + {tasks: $t, gpus_per_task: $g, idempotency_key: $k}')
            until id=$("$MUSTER_BIN/musterctl" submit - <<<"$spec" 2>/dev/null) || [ -e "$T/stop" ]; do
                sleep 0.2
            done
        fi
        case "$id" in [0-9]*-[0-9]*) echo "$id" >>"$submitted" ;; esac
        sleep 0.2
    done
}
submitter &
sub_pid=$!
_mu_pids+=("$sub_pid")

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

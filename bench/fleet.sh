#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/fleet.sh [NODES [JOBS [HEARTBEAT_S]]]: one musterd against NODES simulated 8-GPU nodes
# (muster-bench-fleet: one process, one ZeroMQ DEALER per node, the real protocol, no task
# processes) and JOBS queued jobs (issue #15; default 20000 nodes, 100000 jobs, heartbeat_s 10,
# the setting docs/deploy.md advises above about 10,000 nodes; node_lost_after_s is 60).
# Three quarters of the nodes are spot, 32 to a rack, 1,024 to a zone.  Prints one line per
# figure, asserts nothing:
#
#   fleet register   NODES registered: seconds from the fleet's start
#   fleet idle       musterd's CPU (% of one core), RSS and Redis writes a second, over 30 s
#                    with every node heartbeating and nothing to do
#   fleet full       the same with every GPU busy (gangs that run an hour) and JOBS more queued
#                    (1 x 8 GPUs each) while a gang ends (is cancelled) every second
#   fleet passes     the scheduling passes' mean time over that window; of them, those that
#                    stopped early (the rest of the queue could not change them; every 10 s a
#                    sweep refreshes the rest's reasons, 4,096 jobs in each) and those that
#                    looked at every job; core: of the passes' time, the stepping through the
#                    queue (the rest is mostly the gangs' starts: a pass's are written to Redis
#                    in one round trip before their BINDs go out); within_10ms: the share of
#                    passes that took at most 10 ms; p99_le_s and max_le_s: the bucket of the
#                    passes_by_duration buckets that holds 99 % of them, and all of them
#   fleet ctl        seconds for `musterctl -o json nodes` and `musterctl jobs` to answer (three
#                    calls each), and how many jobs the table listed
#   fleet recover    kill -9 of musterd, then a new one: seconds to "recovered", until every
#                    running gang is adopted, and until every node of the last run registered
#                    again (from its log); the new musterd's CPU seconds until every gang is
#                    adopted; net.core.somaxconn (the listen backlog the reconnecting nodes get)
#   fleet stop       seconds from SIGTERM to exit
#   fleet impossible_states  lines in musterd's logs saying a state it holds impossible
#                    (MU_NEVER): 0, or a bug
#   fleet floor      the idle window's floor on this machine: muster-bench-beats, the same
#                    heartbeats and as many answers (musterd answers one in answer_every) to a
#                    bare epoll server, everything else stopped; and musterd's idle CPU against it
#
# musterd holds one TCP connection per node, so it needs an open-file limit above NODES + 100
# (this script raises its soft limit to the hard one; as root, raise the hard one first: ulimit -Hn
# 65536; deploy/systemd/musterd.service sets LimitNOFILE=65536).  The simulated nodes cost two
# descriptors each (the connection and the socket's mailbox), so they run as several fleet
# processes of at most FLEET_PROCESS_NODES (default 6000) each.  They run at nice FLEET_NICE
# (default 19): on a cluster the nodes are other machines, and here, on the cores musterd uses,
# they would otherwise take the CPU in the middle of its passes (FLEET_NICE=0 measures that too).
# NODES is rounded down to a multiple of 32, so both pools fill with whole 8-node gangs.  Build
# first (cmake); MUSTER_BIN points at the binaries.
source "$(dirname "$0")/../tests/integration/lib.sh"

nodes=$((${1:-20000} / 32 * 32))
jobs=${2:-100000}
hb=${3:-10}
per_fleet=${FLEET_PROCESS_NODES:-6000}
fleet_nice=${FLEET_NICE:-19}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((nodes + 100)) ] && [ "$(ulimit -n)" -ge $((2 * per_fleet + 100)) ] ||
    fail "open-file limit $(ulimit -n) is below $nodes + 100 nodes' connections, or 2 x $per_fleet + 100 for a fleet process (hint: ulimit -Hn 65536 as root, FLEET_PROCESS_NODES)"
_mu_need_bin muster-bench-fleet
_mu_need_bin muster-bench-beats
spot=$((nodes * 3 / 4))

make_config - >/dev/null <<JSON
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "p5-spot", "capacity": "spot", "instance_type": "p5.48xlarge", "gpu_type": "H100",
     "gpus_per_node": 8, "price_per_hour": 30},
    {"name": "p5-od", "capacity": "on-demand", "instance_type": "p5.48xlarge", "gpu_type": "H100",
     "gpus_per_node": 8, "price_per_hour": 98.32}
  ],
  "heartbeat_s": $hb, "node_lost_after_s": 60, "bind_timeout_s": 120, "events_max": 100000
}
JSON
METRICS_PORT=$(free_port)
start_redis
start_musterd "$CONFIG" --log-level warn --metrics "127.0.0.1:$METRICS_PORT"

# cpu_ticks PID: user + system clock ticks of the process so far.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
rss_mb() {
    awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"
}
# writes: Redis commands that write, so far (INFO commandstats, every write command).
writes() {
    rcli INFO commandstats | tr -d '\r' | awk -F'[:=,]' '
        $1 ~ /^cmdstat_(hset|hdel|hmset|del|set|zadd|zrem|xadd|xack|eval|evalsha|expire|lpush|rpush|ltrim|incr|incrby)$/ { n += $3 }
        END { print n + 0 }'
}
metric() {
    curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v n="muster_$1" '$1 == n { v = $2 } END { print v + 0 }'
}
# metric_sum NAME TEXT: the sum of NAME's samples whose labels contain TEXT.
metric_sum() {
    curl -s "http://127.0.0.1:$METRICS_PORT/metrics" |
        awk -v n="muster_$1{" -v t="$2" 'index($1, n) == 1 && index($1, t) { v += $2 } END { printf "%d", v }'
}
# window LABEL SECONDS: musterd's CPU, RSS and Redis writes over SECONDS; the CPU also in cpu_pct.
window() {
    local c0 c1 w0 w1
    c0=$(cpu_ticks "$MUSTERD_PID")
    w0=$(writes)
    sleep "$2"
    c1=$(cpu_ticks "$MUSTERD_PID")
    w1=$(writes)
    cpu_pct=$(awk -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v s="$2" 'BEGIN { printf "%.1f", 100 * c / hz / s }')
    awk -v l="$1" -v p="$cpu_pct" -v s="$2" -v w=$((w1 - w0)) -v r="$(rss_mb "$MUSTERD_PID")" \
        -v n="$nodes" -v hb="$hb" 'BEGIN { printf "fleet %s nodes=%d heartbeat_s=%d musterd_cpu_pct=%s musterd_rss_mb=%d redis_writes_per_s=%.0f\n", l, n, hb, p, r, w / s }'
}

# fleet BASE SPOT OD: one fleet process of SPOT + OD nodes, counted from BASE.
fleet() {
    local pools=()
    [ "$2" -eq 0 ] || pools+=("p5-spot=$2")
    [ "$3" -eq 0 ] || pools+=("p5-od=$3")
    nice -n "$fleet_nice" "$MUSTER_BIN/muster-bench-fleet" --scheduler "tcp://127.0.0.1:$SCHED_PORT" --index-base "$1" \
        --nodes "$(IFS=,; echo "${pools[*]}")" >"$T/fleet-$1.log" 2>&1 &
    _mu_pids+=("$!")
    fleet_pids+=("$!")
}
fleet_pids=()
t0=$(date +%s%N)
for ((base = 0; base < spot; base += per_fleet)); do
    fleet "$base" "$((spot - base < per_fleet ? spot - base : per_fleet))" 0
done
for ((base = spot; base < nodes; base += per_fleet)); do
    fleet "$base" 0 "$((nodes - base < per_fleet ? nodes - base : per_fleet))"
done
wait_for "$nodes nodes registered" 600 '[ "$(rcli HLEN muster:nodes)" = '"$nodes"' ]'
echo "fleet register nodes=$nodes fleet_nice=$fleet_nice seconds=$(awk -v t="$(($(date +%s%N) - t0))" 'BEGIN { printf "%.1f", t / 1e9 }')"
sleep 5
window idle 30
idle_cpu_pct=$cpu_pct

# Every GPU busy: whole-node gangs of 8 x 8 GPUs that run an hour, and one that ends each second.
gangs=$((nodes / 8))
for ((i = 0; i < gangs; i++)); do
    echo "XADD muster:submit * spec '{\"tasks\":8,\"gpus_per_task\":8,\"command\":[\"sleep\",\"$((3600 + i))\"]}'"
done | rcli >"$T/gangs"
wait_for "$gangs gangs running" 900 '[ "$(metric_sum gpus state=\"used\")" = $((nodes * 8)) ]'
for ((i = 0; i < jobs; i++)); do
    echo "XADD muster:submit * spec '{\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"sleep\",\"3600\"]}'"
done | rcli >/dev/null
wait_for "$jobs jobs queued" 900 '[ "$(metric_sum jobs state=\"PENDING\")" -ge '"$jobs"' ]'
sleep 5
# One scrape before and one after the window, so that the figures agree with each other.
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" >"$T/metrics0"
# A gang ends every second (cancelled), so passes run over the whole queue and start 8 of it.
(for i in $(seq 1 30); do ctl cancel "$(sed -n "${i}p" "$T/gangs")" >/dev/null 2>&1; sleep 1; done) &
window full 30
wait $!
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" >"$T/metrics1"
awk -v j="$jobs" '
    FNR == 1 { f++ }
    { k = $1; sub(/^muster_/, "", k); v[f, k] = $2; if (f == 1) keys[k] = 1 }
    function d(k) { return v[2, k] - v[1, k] }
    END {
        p = d("scheduling_passes"); s = d("scheduling_pass_seconds"); c = d("scheduling_pass_core_seconds"); w = d("scheduling_pass_write_seconds"); u = d("scheduling_pass_cpu_seconds")
        q = d("scheduling_passes_stopped"); t = d("scheduling_pass_stopped_seconds")
        # the duration buckets: the share within 10 ms, and the bound that holds 99 % and all
        within = d("scheduling_passes_by_duration{le=\"0.01\"}")
        n = split("0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 1 +Inf", les, " ")
        p99 = ""; pmax = ""
        for (i = 1; i <= n; i++) {
            b = d("scheduling_passes_by_duration{le=\"" les[i] "\"}")
            if (p99 == "" && b >= 0.99 * p) p99 = les[i]
            if (pmax == "" && b >= p) pmax = les[i]
        }
        printf "fleet passes queued=%d passes=%d pass_mean_ms=%.1f core_mean_ms=%.1f write_mean_ms=%.1f cpu_mean_ms=%.1f stopped=%d stopped_mean_ms=%.1f whole=%d whole_mean_ms=%.1f within_10ms=%.0f%% p99_le_s=%s max_le_s=%s\n",
            j, p, p ? 1000 * s / p : 0, p ? 1000 * c / p : 0, p ? 1000 * w / p : 0, p ? 1000 * u / p : 0, q, q ? 1000 * t / q : 0, p - q,
            (p > q) ? 1000 * (s - t) / (p - q) : 0, p ? 100 * within / p : 0, p99, pmax
    }' "$T/metrics0" "$T/metrics1"

# Three calls each: one call's time moves with what else the two cores were doing just then.
ctl_seconds() {
    local out="" t
    for _ in 1 2 3; do
        t=$(date +%s%N)
        ctl "$@" >/dev/null
        out+="${out:+,}$(awk -v t="$(($(date +%s%N) - t))" 'BEGIN { printf "%.2f", t / 1e9 }')"
    done
    echo "$out"
}
echo "fleet ctl nodes_seconds=$(ctl_seconds -o json nodes)"
echo "fleet ctl jobs_seconds=$(ctl_seconds jobs) jobs_listed=$(($(ctl jobs | wc -l) - 1))"

kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
mv "$T/musterd.log" "$T/musterd-first.log" # the new musterd's log starts empty
t0=$(date +%s%N)
start_musterd "$CONFIG" --log-level info --metrics "127.0.0.1:$METRICS_PORT"
wait_for "recovered" 600 'grep -q "recovered" "$T/musterd.log"'
t1=$(date +%s%N)
# Once a second, not wait_for's ten times: each scrape walks every job in musterd's main thread
# (12-20 ms at 100,000 jobs), and ten a second slowed the very recovery being timed.
for ((i = 0; ; i++)); do
    [ "$(metric_sum gpus state=\"used\")" = $((nodes * 8)) ] && break
    [ "$i" -lt 600 ] || fail "not every gang adopted after 600 s"
    sleep 1
done
t2=$(date +%s%N)
cpu=$(cpu_ticks "$MUSTERD_PID")
# when the last node of the last run registered again, from musterd's first log line
back=$(awk '{ split($1, d, "T"); split(d[2], t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3] }
    NR == 1 { first = s } /every node of the last run is back/ { printf "%.2f", s - first; exit }' "$T/musterd.log")
awk -v a="$((t1 - t0))" -v b="$((t2 - t0))" -v c="$cpu" -v hz="$(getconf CLK_TCK)" -v back="${back:-none}" \
    -v somax="$(cat /proc/sys/net/core/somaxconn 2>/dev/null || echo unknown)" \
    'BEGIN { printf "fleet recover recovered_s=%.2f all_adopted_s=%.2f nodes_back_s=%s musterd_cpu_s=%.1f somaxconn=%s\n", a / 1e9, b / 1e9, back, c / hz, somax }'

t0=$(date +%s%N)
kill -TERM "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
echo "fleet stop seconds=$(awk -v t="$(($(date +%s%N) - t0))" 'BEGIN { printf "%.2f", t / 1e9 }')"
# MU_NEVER's "believed impossible state" is a bug whatever the figures say.
echo "fleet impossible_states=$(cat "$T"/musterd*.log | grep -c 'believed impossible state' || true)"

# The floor of the idle window: the same heartbeats and answers (as many of them as musterd
# answered, the fleet's status line says) to a bare epoll server, everything else stopped.
kill -9 "${fleet_pids[@]}" 2>/dev/null || true
wait "${fleet_pids[@]}" 2>/dev/null || true
every=$(grep -ho 'answer_every=[0-9]*' "$T"/fleet-*.log | tail -1 | cut -d= -f2)
floor=$("$MUSTER_BIN/muster-bench-beats" --nodes "$nodes" --heartbeat-s "$hb" --answer-every "${every:-1}" \
    --seconds 30 --per-process "$per_fleet" --nice "$fleet_nice")
echo "fleet floor $floor"
awk -v m="$idle_cpu_pct" -v f="$(echo "$floor" | grep -o 'server_cpu_pct=[0-9.]*' | cut -d= -f2)" \
    'BEGIN { printf "fleet idle_vs_floor musterd_cpu_pct=%s floor_cpu_pct=%s ratio=%.1f\n", m, f, (f > 0 ? m / f : 0) }'

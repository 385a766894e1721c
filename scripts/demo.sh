#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/demo.sh: a local muster cluster on this machine, end to end.
#
# Installs the dependencies (scripts/deps.sh), builds build/, starts a private redis-server on a
# free loopback port, musterd with config/examples/dev.json (pools g6e-spot and g6e-od, 4 GPUs
# per node), four workers with simulated GPUs (spot-1, spot-2 in g6e-spot; od-1, od-2 in g6e-od),
# submits a 2-task gang job asking for 4 GPUs per task, shows it running and finished, prints the
# tasks' output, and stops everything it started.
#
# usage: scripts/demo.sh [--keep]    --keep: leave the cluster running and print how to use it
#        scripts/demo.sh --stop      stop a cluster left running by --keep
#
# Environment: MUSTER_BUILD_DIR (default build), MUSTER_BIN (default $MUSTER_BUILD_DIR/bin).  Progress goes to stderr, results to stdout.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

build_dir=${MUSTER_BUILD_DIR:-build}
case "$build_dir" in /*) ;; *) build_dir=$repo/$build_dir ;; esac
bin=${MUSTER_BIN:-$build_dir/bin} # MUSTER_BIN: run other binaries than the ones just built
state_file=$build_dir/demo.state # PIDS, DIR and the URLs of a cluster left running by --keep
config=$repo/config/examples/dev.json
job_timeout_s=60

say() { echo "==> $*" >&2; }
die() {
    echo "demo.sh: $*" >&2
    exit 1
}

# ---- --stop -------------------------------------------------------------------------------------

# stop_pids PID...: TERM each (in the order given), then KILL whatever is left after 5 s.
stop_pids() {
    local pid i
    for pid in "$@"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        local alive=0
        for pid in "$@"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ "$alive" -eq 1 ] || return 0
        sleep 0.1
    done
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then
            echo "demo.sh: pid $pid ignored SIGTERM; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}

# The PIDs in the state file that still run one of our programs (a PID may have been reused).
kept_pids() {
    local pid args
    # shellcheck disable=SC2153 # PIDS comes from the state file
    for pid in $PIDS; do
        args=$(ps -o args= -p "$pid" 2>/dev/null || true)
        case "$args" in
        *redis-server* | *musterd\ * | *muster-worker\ *) echo "$pid" ;;
        esac
    done
}

if [ "${1:-}" = --stop ]; then
    [ -f "$state_file" ] || die "no demo cluster recorded in $state_file; nothing to stop"
    # shellcheck source=/dev/null
    . "$state_file"
    mapfile -t live < <(kept_pids)
    if [ "${#live[@]}" -gt 0 ]; then
        say "stopping ${#live[@]} processes: ${live[*]}"
        stop_pids "${live[@]}"
    fi
    [ -z "${DIR:-}" ] || [ ! -d "$DIR" ] || rm -rf "$DIR"
    rm -f "$state_file"
    say "demo cluster stopped"
    exit 0
fi

keep=0
case "${1:-}" in
'') ;;
--keep) keep=1 ;;
-h | --help)
    sed -n '3,15s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
*)
    echo "usage: scripts/demo.sh [--keep | --stop]" >&2
    exit 2
    ;;
esac

if [ -f "$state_file" ]; then
    # shellcheck source=/dev/null
    . "$state_file"
    if [ -n "$(kept_pids)" ]; then
        die "a demo cluster is still running ($state_file); stop it first: scripts/demo.sh --stop"
    fi
    rm -f "$state_file"
fi

# ---- build --------------------------------------------------------------------------------------

bash scripts/deps.sh || die "scripts/deps.sh failed; install the packages it names and retry"
say "building $build_dir (musterd, muster-worker, musterctl)"
cmake -S . -B "$build_dir" >/dev/null || die "cmake configure failed"
cmake --build "$build_dir" -j"$(nproc 2>/dev/null || echo 2)" \
    --target musterd muster-worker muster-shim musterctl >/dev/null || die "build failed; run: cmake --build $build_dir"

# ---- cluster ------------------------------------------------------------------------------------

D=$(mktemp -d "${TMPDIR:-/tmp}/muster-demo.XXXXXX")
pids=() # every process started here, in start order
# Each daemon runs in its own session (setsid keeps the PID), so a terminal's ^C reaches only
# this script, whose trap then stops them in order; with --keep they outlive the terminal.
display_failed=0

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

show_logs() {
    local f
    while IFS= read -r f; do
        echo "----- ${f#"$D"/} (last 20 lines) -----" >&2
        tail -n 20 "$f" >&2 || true
    done < <(find "$D" -type f \( -name '*.log' -o -name '*.out' -o -name '*.err' \) | sort)
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [ "$keep" -eq 1 ] && [ "$rc" -eq 0 ]; then
        return 0
    fi
    if [ "$rc" -ne 0 ] && [ -d "$D" ]; then
        show_logs
    fi
    if [ "${#pids[@]}" -gt 0 ]; then
        say "stopping the demo cluster"
        # Workers first (they stop their tasks), then musterd, then redis.
        local rev=() i
        for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
            rev+=("${pids[i]}")
        done
        stop_pids "${rev[@]}"
        wait 2>/dev/null
    fi
    if [ "$rc" -eq 0 ]; then
        rm -rf "$D"
    else
        echo "demo.sh: failed; logs kept in $D" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_until DESC TIMEOUT_S PID CMD: polls CMD (a string) every 0.2 s; dies when PID exits or
# the time runs out.
wait_until() {
    local desc=$1 timeout_s=$2 pid=$3 cmd=$4 i
    for ((i = 0; i < timeout_s * 5; i++)); do
        if (eval "$cmd") >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "gave up waiting for $desc: pid $pid exited"
        sleep 0.2
    done
    die "timed out after ${timeout_s}s waiting for $desc"
}

redis_port=$(free_port)
export MUSTER_REDIS_URL="redis://127.0.0.1:$redis_port"
say "starting redis on 127.0.0.1:$redis_port (no persistence, dir $D)"
setsid redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$D" \
    --daemonize no --logfile "$D/redis.log" >/dev/null 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
wait_until "redis to answer PING" 10 "$redis_pid" "[ \"\$(redis-cli -p $redis_port ping)\" = PONG ]"

sched_port=$(free_port)
sched_url="tcp://127.0.0.1:$sched_port"
say "starting musterd on $sched_url with ${config#"$repo"/} (log $D/musterd.log)"
setsid "$bin/musterd" --config "$config" --redis "$MUSTER_REDIS_URL" --bind "$sched_url" \
    >"$D/musterd.log" 2>&1 &
musterd_pid=$!
pids+=("$musterd_pid")
wait_until "musterd to listen on $sched_url" 15 "$musterd_pid" "port_open $sched_port"

declare -A worker_pid
start_worker() { # NAME POOL RACK
    local name=$1 pool=$2 rack=$3
    say "starting worker $name (pool $pool, 4 simulated GPUs, zone=z1 rack=$rack)"
    mkdir -p "$D/w/$name"
    # As root the demo lets tasks run as root; a real cluster uses --run-as USER instead.
    local as_root=()
    [ "$(id -u)" = 0 ] && as_root=(--allow-root)
    setsid "$bin/muster-worker" --scheduler "$sched_url" --node "$name" --pool "$pool" --gpus 4 \
        --addr 127.0.0.1 --state-dir "$D/w/$name" --label zone=z1 --label "rack=$rack" \
        "${as_root[@]}" >"$D/worker-$name.log" 2>&1 &
    worker_pid[$name]=$!
    pids+=("$!")
}
start_worker spot-1 g6e-spot r1
start_worker spot-2 g6e-spot r2
start_worker od-1 g6e-od r1
start_worker od-2 g6e-od r2

ctl() {
    "$bin/musterctl" "$@"
}

# show CMD...: prints a musterctl view; a failure is reported and fails the demo at the end.
show() {
    if ! ctl "$@"; then
        echo "demo.sh: 'musterctl $*' failed" >&2
        display_failed=1
    fi
}

say "waiting for the 4 nodes to register"
wait_until "4 nodes in 'musterctl -o json nodes'" 30 "$musterd_pid" \
    '[ "$(ctl -o json nodes | jq length)" = 4 ]'
for name in "${!worker_pid[@]}"; do
    kill -0 "${worker_pid[$name]}" 2>/dev/null || die "worker $name exited"
done
show nodes

# ---- the gang job -------------------------------------------------------------------------------

spec=$(
    cat <<'EOF'
{"name":"demo-gang","tasks":2,"gpus_per_task":4,"command":["/bin/sh","-c","echo rank $RANK of $WORLD_SIZE on $MUSTER_NODE gpus $CUDA_VISIBLE_DEVICES master $MASTER_ADDR:$MASTER_PORT; sleep 3"]}
EOF
)
say "submitting: redis-cli XADD muster:submit '*' spec '$spec'"
job=$(redis-cli -p "$redis_port" XADD muster:submit '*' spec "$spec")
case "$job" in
[0-9]*-[0-9]*) ;;
*) die "XADD failed: $job" ;;
esac
say "job $job submitted"

job_state() {
    redis-cli -p "$redis_port" HGET "muster:job:$job" state
}

# Wait for the end, showing the job list once while it runs.
shown_running=0
state=
for ((i = 0; i < job_timeout_s * 5; i++)); do
    state=$(job_state)
    case "$state" in
    RUNNING)
        if [ "$shown_running" -eq 0 ]; then
            say "job $job is RUNNING: musterctl jobs"
            show jobs
            shown_running=1
        fi
        ;;
    SUCCEEDED | FAILED | CANCELLED | REJECTED) break ;;
    esac
    kill -0 "$musterd_pid" 2>/dev/null || die "musterd exited while job $job was $state"
    sleep 0.2
done

say "musterctl jobs --all"
show jobs --all
say "musterctl show $job"
show show "$job"

say "task output (from the workers' state dirs)"
while IFS= read -r f; do
    [ -s "$f" ] || continue
    echo "--- ${f#"$D"/w/}"
    cat "$f"
done < <(find "$D/w" -path '*/logs/*' -type f \( -name '*.out' -o -name '*.err' \) | sort)

case "$state" in
SUCCEEDED) say "job $job SUCCEEDED" ;;
'' | PENDING | STARTING | RUNNING | PREEMPTING)
    die "job $job did not finish within ${job_timeout_s}s (state '${state:-none}')"
    ;;
*) die "job $job ended $state" ;;
esac
[ "$display_failed" -eq 0 ] || die "a musterctl command failed (see above)"

if [ "$keep" -eq 0 ]; then
    say "demo done; stopping everything (run with --keep to leave the cluster up)"
    exit 0
fi

# ---- --keep -------------------------------------------------------------------------------------

{
    printf 'PIDS=%q\n' "${pids[*]}"
    printf 'DIR=%q\n' "$D"
    printf 'MUSTER_REDIS_URL=%q\n' "$MUSTER_REDIS_URL"
    printf 'SCHED_URL=%q\n' "$sched_url"
} >"$state_file"
cat <<EOF

The demo cluster is running (state in $state_file, logs in $D):
  redis     $MUSTER_REDIS_URL   pid $redis_pid
  musterd   $sched_url   pid $musterd_pid
  workers   spot-1 spot-2 (g6e-spot), od-1 od-2 (g6e-od)   pids ${worker_pid[spot-1]} ${worker_pid[spot-2]} ${worker_pid[od-1]} ${worker_pid[od-2]}

Use it:
  export MUSTER_REDIS_URL=$MUSTER_REDIS_URL
  export PATH=$bin:\$PATH
  musterctl nodes
  musterctl jobs --all
  musterctl show $job
  echo '{"tasks":1,"gpus_per_task":2,"command":"nvidia-smi -L || env | grep CUDA"}' | musterctl submit -
  redis-cli -p $redis_port XADD muster:submit '*' spec '{"command":["sleep","30"],"priority":5}'
  musterctl events

Stop it:
  scripts/demo.sh --stop
  (or: kill ${pids[*]}; rm -rf $D $state_file)
EOF

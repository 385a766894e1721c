# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# tests/integration/lib.sh: the harness every tests/integration/tNNNN-<area>-<what>.sh sources.
#
# Each test gets a private temp dir $T, its own redis-server on a free loopback port and its own
# daemons, so tests run in parallel (ctest -j).  An EXIT trap stops exactly the PIDs this file
# started (TERM, then KILL after 3 s) and removes $T and the directories a test adds to _mu_dirs
# (kept with MUSTER_KEEP_TMP=1).
#
#   source "$(dirname "$0")/lib.sh"
#   start_redis
#   make_config                      # default 2-pool config -> $T/config.json ($CONFIG)
#   start_musterd "$CONFIG"
#   start_worker n1 spot-a 8
#   id=$(submit_json '{"command":["true"]}')
#   wait_for "job $id succeeded" 30 job_state_is "$id" SUCCEEDED
#   ok "gang job ran"
#
# Environment: MUSTER_BIN (default $repo/build/bin; ctest sets it), MUSTER_KEEP_TMP=1,
# MUSTER_KEY_PREFIX (default "muster:").
set -euo pipefail

MUSTER_SRC=${MUSTER_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
MUSTER_BIN=${MUSTER_BIN:-$MUSTER_SRC/build/bin}
# Absolute: tasks name programs under it and run in their own working directory.
[ -d "$MUSTER_BIN" ] && MUSTER_BIN=$(cd "$MUSTER_BIN" && pwd)
MUSTER_KEY_PREFIX=${MUSTER_KEY_PREFIX:-muster:}
# Debian's python3 (scripts/deps.sh installs it) rather than a version manager's shim on PATH,
# which starts a dozen processes per call.
_mu_python=/usr/bin/python3
[ -x "$_mu_python" ] || _mu_python=python3
# CI runs as root; a root worker refuses to run tasks as root unless told to.
[ "$(id -u)" = 0 ] && export MUSTER_ALLOW_ROOT=${MUSTER_ALLOW_ROOT:-1}
export MUSTER_SRC MUSTER_BIN

TEST_NAME=$(basename "${0%.sh}")
# A root worker puts each task in cgroups under MUSTER_CGROUP_ROOT/NODE (docs/muster-worker.md):
# one root per test run, so that tests running side by side with the same node names never
# share a task's group, removed with the test.
export MUSTER_CGROUP_ROOT=${MUSTER_CGROUP_ROOT-muster-$TEST_NAME-$$}
T=$(mktemp -d "${TMPDIR:-/tmp}/muster-$TEST_NAME.XXXXXX")
export T
mkfifo "$T/.nap" # what _mu_nap and await_file_json's tasks wait on

_mu_pids=()         # every PID started here, in start order
_mu_dirs=()         # directories outside $T (a tmpfs one, say) to remove with it
_mu_at_exit=()      # commands run at exit before the daemons stop (at_exit)
declare -gA WORKER_PID # node name -> worker PID
MUSTERD_PID=
REDIS_PID=

echo "# running $TEST_NAME (tmp $T)"

# ---- output -------------------------------------------------------------------------------------

ok() {
    echo "ok - $*"
}

# Prints the last lines of every log under $T (daemon logs, task logs), for a failure report.
dump_logs() {
    local f
    while IFS= read -r f; do
        echo "----- ${f#"$T"/} (last 30 lines) -----"
        tail -n 30 "$f" || true
    done < <(find "$T" -type f \( -name '*.log' -o -name '*.out' -o -name '*.err' \) 2>/dev/null | sort)
}

# fail MSG: reports MSG and the log tails on stderr (so it shows even inside $(...)), exits 1.
fail() {
    {
        echo "FAIL - $TEST_NAME: $*"
        dump_logs
    } >&2
    : >"$T/.fail-reported" 2>/dev/null || true # a file: fail may run inside $(...)
    exit 1
}

# ---- cleanup ------------------------------------------------------------------------------------

_mu_alive() {
    kill -0 "$1" 2>/dev/null
}

# stop_pid PID: TERM, then KILL after 3 s; waits for it.  Only for PIDs this shell started.
stop_pid() {
    local pid=$1 i
    _mu_alive "$pid" || {
        wait "$pid" 2>/dev/null || true
        return 0
    }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        _mu_alive "$pid" || break
        _mu_nap
    done
    if _mu_alive "$pid"; then
        echo "# pid $pid ignored SIGTERM for 3 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# _mu_log_failure WHAT ERE [GREP_OPTION...]: 0 when no log under $T has a line matching ERE;
# else names the logs, shows the lines (GREP_OPTION: -A12 for context), marks the failure as
# reported and returns 1.
_mu_log_failure() {
    local what=$1 ere=$2 reports
    shift 2
    reports=$(grep -rlE "$ere" "$T" --include='*.log' 2>/dev/null)
    [ -n "$reports" ] || return 0
    echo "FAIL - $TEST_NAME: $what in: ${reports//$T\//}" >&2
    # shellcheck disable=SC2086 # one path per line, none with spaces ($T is mktemp's)
    grep -hE "$@" "$ere" $reports | head -n 60 >&2
    : >"$T/.fail-reported"
    return 1
}

_mu_cleanup() {
    local rc=$? i
    trap - EXIT INT TERM ERR
    set +e
    for i in "${!_mu_at_exit[@]}"; do
        eval "${_mu_at_exit[i]}"
    done
    # Reverse start order: workers, then musterd, then redis, so each sees its peers go cleanly.
    for ((i = ${#_mu_pids[@]} - 1; i >= 0; i--)); do
        stop_pid "${_mu_pids[i]}"
    done
    _mu_cgroups_remove
    # Under -DMUSTER_SANITIZE a daemon's report lands in its log (a leak one at its clean exit).
    _mu_log_failure "sanitizer report(s)" 'ERROR: (Address|Leak)Sanitizer|runtime error:' -A12 || rc=1
    # MU_NEVER logs a state the code holds impossible: a bug, whatever the test asserted.
    _mu_log_failure "impossible state(s) logged" 'believed impossible state' || rc=1
    if [ "$rc" -ne 0 ] && [ ! -e "$T/.fail-reported" ]; then
        # set -e stopped the test: name the command, then show what the daemons said.
        if [ "$_mu_err_line" = "?" ]; then
            echo "FAIL - $TEST_NAME: stopped with status $rc" >&2
        else
            echo "FAIL - $TEST_NAME: line $_mu_err_line: '$_mu_err_cmd' exited $rc" >&2
        fi
        dump_logs >&2
    fi
    if [ "$rc" -eq 0 ]; then
        echo "ok $TEST_NAME"
    else
        echo "FAIL $TEST_NAME (exit $rc)"
    fi
    if [ "${MUSTER_KEEP_TMP:-0}" = 1 ]; then
        echo "# kept $T ${_mu_dirs[*]}"
    else
        rm -rf "$T" "${_mu_dirs[@]}"
    fi
    exit "$rc"
}
# Removes this test's cgroup trees, deepest first (a group still busy stays: best effort).
_mu_cgroups_remove() {
    local d
    [ -n "$MUSTER_CGROUP_ROOT" ] || return 0
    for d in /sys/fs/cgroup/"$MUSTER_CGROUP_ROOT" /sys/fs/cgroup/*/"$MUSTER_CGROUP_ROOT"; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    return 0
}
_mu_err_line='?'
_mu_err_cmd='?'
set -o errtrace
trap '_mu_err_line=$LINENO _mu_err_cmd=$BASH_COMMAND' ERR
trap _mu_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- helpers ------------------------------------------------------------------------------------

# at_exit CMD: eval CMD when the test ends, pass or fail, before its daemons are stopped: resume
# a process the test stopped, remove a user it added, kill the tasks that outlive their worker.
at_exit() {
    _mu_at_exit+=("$1")
}

# kill_pid_files: SIGKILL to every pid written in $T/pid.* (tasks run under muster-shim outlive
# their worker by design); for at_exit.
kill_pid_files() {
    local f
    for f in "$T"/pid.*; do
        [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    return 0
}

# CMD | has [GREP_ARGS] PATTERN: true when a line matches.  Unlike `grep -q` it reads all its
# input: grep -q leaves at the first match, the writer then dies of SIGPIPE, and with pipefail
# the whole pipeline reads as "no match" (a flaky failure under load).
has() {
    grep "$@" >/dev/null
}

# free_port: prints a TCP port that is free on 127.0.0.1 right now.
free_port() {
    "$_mu_python" -S -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# _mu_port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
_mu_port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# wait_for DESC TIMEOUT_S CMD [ARGS...]: runs CMD every 0.1 s until it succeeds; fails the test
# (naming DESC, with the log tails) after TIMEOUT_S seconds.  A single CMD string is eval'ed, so
#   wait_for "two nodes" 10 '[ "$(ctl -o json nodes | jq length)" = 2 ]'
# works as well as  wait_for "job done" 30 job_state_is "$id" SUCCEEDED
wait_for() {
    local desc=$1 timeout_s=$2
    shift 2
    local now deadline
    _mu_clock_ms deadline
    if [[ $timeout_s =~ ^[0-9]+$ ]]; then
        deadline=$((deadline + timeout_s * 1000))
    else
        deadline=$((deadline + $(awk -v t="$timeout_s" 'BEGIN { printf "%d", t * 1000 }')))
    fi
    while :; do
        if [ $# -eq 1 ]; then
            if (eval "$1") >/dev/null 2>&1; then
                return 0
            fi
        elif "$@" >/dev/null 2>&1; then
            return 0
        fi
        _mu_clock_ms now
        if [ "$now" -ge "$deadline" ]; then
            fail "timed out after ${timeout_s}s waiting for: $desc"
        fi
        _mu_nap
    done
}

# _mu_clock_ms VAR: sets VAR to the wall clock in milliseconds, without starting a process.
_mu_clock_ms() {
    local t=${EPOCHREALTIME/[.,]/}
    printf -v "$1" '%d' $((10#$t / 1000))
}

# await_file_json FILE: a task command, as a JSON array, that waits until FILE exists.  It polls
# every 0.05 s as a sleep loop would, without starting a process (bash's read -t on a FIFO): a
# gang of tasks waiting on a gate for a minute costs the CI machine nothing.
await_file_json() {
    printf '["bash","-c","while [ ! -e \\"$1\\" ]; do read -rt 0.05 <>\\"$2\\" || :; done","await","%s","%s"]' \
        "$1" "$T/.nap"
}

# _mu_nap: 0.1 s without starting a process: a read that times out on a FIFO nobody writes
# (opened read-write, so the open does not wait for a writer).  wait_for polls with it: tests
# spend most of their time there, and on a loaded CI machine every fork+exec of sleep and date
# was CPU taken from the daemons under test.
_mu_nap() {
    read -rt 0.1 _ <>"$T/.nap" || true
}

# start_imds NAME [MOCK_ARGS...]: the EC2 instance metadata stand-in (tests/imds/imds_mock.py)
# on a free port, with MOCK_ARGS (--zone z1 --lifecycle spot, say); its log is
# $T/imds-NAME.log.  Sets IMDS_PORT.
start_imds() {
    local name=$1
    shift
    "$_mu_python" "$MUSTER_SRC/tests/imds/imds_mock.py" --port 0 --port-file "$T/imds-$name.port" \
        "$@" >>"$T/imds-$name.log" 2>&1 &
    _mu_pids+=("$!")
    wait_for "imds mock $name up" 60 "[ -s '$T/imds-$name.port' ]"
    # shellcheck disable=SC2034 # the caller reads it
    IMDS_PORT=$(cat "$T/imds-$name.port")
}

# ---- redis --------------------------------------------------------------------------------------

# start_redis: a private redis-server on a free loopback port, no persistence, files in $T.
# Exports REDIS_PORT and MUSTER_REDIS_URL; defines rcli (redis-cli against it).
start_redis() {
    command -v redis-server >/dev/null 2>&1 || fail "redis-server not found (hint: scripts/deps.sh)"
    REDIS_PORT=$(free_port)
    export REDIS_PORT
    export MUSTER_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        --daemonize no --logfile "$T/redis.log" >/dev/null 2>&1 &
    REDIS_PID=$!
    _mu_pids+=("$REDIS_PID")
    wait_for "redis-server on port $REDIS_PORT to answer PING" 10 \
        '[ "$(redis-cli -p "$REDIS_PORT" ping)" = PONG ]'
}

# rcli ARGS...: redis-cli against this test's Redis, as REDIS_USER with REDIS_PASS when a test
# sets them (a Redis with ACLs).  The commands tests poll (HGET, HLEN, XLEN, GET...: one reply
# that is not an array) bash sends itself over /dev/tcp and prints as redis-cli does (a nil as an
# empty line): on a loaded 2-core CI machine a fork+exec of redis-cli for every poll was the
# harness's largest cost.
REDIS_USER=${REDIS_USER:-default}
REDIS_PASS=${REDIS_PASS:-}
rcli() {
    local cmd=${1-}
    if [[ ${cmd^^} =~ ^(HGET|HLEN|HEXISTS|XLEN|GET|EXISTS|SCARD|ZCARD|LLEN)$ ]]; then
        local _mu_reply
        _mu_redis _mu_reply "$@" || return 1
        printf '%s\n' "$_mu_reply"
        return 0
    fi
    if [ -n "$REDIS_PASS" ]; then
        redis-cli -p "$REDIS_PORT" --user "$REDIS_USER" --pass "$REDIS_PASS" --no-auth-warning "$@"
    else
        redis-cli -p "$REDIS_PORT" "$@"
    fi
}

# _mu_redis VAR ARGS...: sends one command (ARGS) in RESP over a new connection, after an AUTH
# when REDIS_PASS is set, and sets VAR to its reply, which must not be an array: a string, a
# number, "" for a nil, an error's text and a newline (as redis-cli prints it).  Status 1 when
# Redis cannot be reached.
_mu_redis() {
    local LC_ALL=C _mu_fd _mu_line _mu_val=
    exec {_mu_fd}<>"/dev/tcp/127.0.0.1/$REDIS_PORT" || return 1
    [ -z "$REDIS_PASS" ] || _mu_resp_send "$_mu_fd" AUTH "$REDIS_USER" "$REDIS_PASS"
    _mu_resp_send "$_mu_fd" "${@:2}"
    if [ -n "$REDIS_PASS" ] && IFS= read -r _mu_line <&"$_mu_fd" && [ "${_mu_line:0:1}" = - ]; then
        : # AUTH refused: its error is the answer
    elif ! IFS= read -r _mu_line <&"$_mu_fd"; then
        exec {_mu_fd}>&-
        return 1
    fi
    _mu_line=${_mu_line%$'\r'}
    case $_mu_line in
    '$-1') ;;
    '$'*) [ "${_mu_line#\$}" = 0 ] || IFS= read -r -N "${_mu_line#\$}" _mu_val <&"$_mu_fd" ;;
    [-]*) _mu_val=${_mu_line#-}$'\n' ;;
    *) _mu_val=${_mu_line#[+:]} ;;
    esac
    exec {_mu_fd}>&-
    printf -v "$1" '%s' "$_mu_val"
}

# _mu_resp_send FD ARGS...: writes ARGS to FD as one RESP command.
_mu_resp_send() {
    local fd=$1 req arg
    shift
    req="*$#"$'\r\n'
    for arg in "$@"; do
        req+="\$${#arg}"$'\r\n'"$arg"$'\r\n'
    done
    printf '%s' "$req" >&"$fd"
}

# start_sentinels PRIMARY_PORT [FAILOVER_TIMEOUT_MS]: three Sentinels (redis-server --sentinel)
# on free loopback ports, monitoring "mymaster" at PRIMARY_PORT (quorum 2, down after 1 s,
# failover-timeout 10 s unless given); logs in $T/sentinel-N.log.  Exports SENTINELS (their
# ports) and MUSTER_SENTINEL_URL, the redis+sentinel:// URL that names all three.
start_sentinels() {
    local primary=$1 timeout=${2:-10000} port i
    SENTINELS=()
    for i in 1 2 3; do
        port=$(free_port)
        printf '%s\n' "port $port" "bind 127.0.0.1" "dir $T" "logfile $T/sentinel-$i.log" \
            "sentinel monitor mymaster 127.0.0.1 $primary 2" \
            "sentinel down-after-milliseconds mymaster 1000" \
            "sentinel failover-timeout mymaster $timeout" >"$T/sentinel-$i.conf"
        redis-server "$T/sentinel-$i.conf" --sentinel >/dev/null 2>&1 &
        _mu_pids+=("$!")
        SENTINELS+=("$port")
    done
    MUSTER_SENTINEL_URL="redis+sentinel://127.0.0.1:${SENTINELS[0]},127.0.0.1:${SENTINELS[1]},127.0.0.1:${SENTINELS[2]}/mymaster"
    export MUSTER_SENTINEL_URL
}

# wait_sentinels REPLICA_PORT: until every Sentinel sees the replica and the two other Sentinels.
wait_sentinels() {
    local port
    for port in "${SENTINELS[@]}"; do
        wait_for "Sentinel $port sees the replica and the other Sentinels" 30 \
            "redis-cli -p $port SENTINEL replicas mymaster | has -x '$1' &&
             [ \"\$(redis-cli -p $port SENTINEL sentinels mymaster | grep -c '^name$')\" = 2 ]"
    done
}

# sentinel_primary: the port the first Sentinel names as mymaster's primary now ("" if none).
sentinel_primary() {
    redis-cli -p "${SENTINELS[0]}" SENTINEL get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p
}

# ---- config -------------------------------------------------------------------------------------

# make_config [JSON | - | --with JSON]: writes $T/config.json (exported as CONFIG) and prints its
# path.  With no argument: the default two-pool test cluster; "-": JSON from stdin (a heredoc);
# --with JSON: the default cluster with JSON's top-level keys replacing its own (jq's '*').
make_config() {
    local default='{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3},
    {"name": "od-a", "capacity": "on-demand", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 10}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "bind_timeout_s": 10
}'
    CONFIG=$T/config.json
    export CONFIG
    if [ $# -eq 0 ]; then
        printf '%s\n' "$default" >"$CONFIG"
    elif [ "$1" = --with ]; then
        command -v jq >/dev/null 2>&1 || fail "make_config --with: jq not found"
        jq --argjson o "$2" '. * $o' <<<"$default" >"$CONFIG" || fail "make_config --with: bad JSON '$2'"
    elif [ "$1" = - ]; then
        cat >"$CONFIG"
    else
        printf '%s\n' "$1" >"$CONFIG"
    fi
    echo "$CONFIG"
}

# ---- daemons ------------------------------------------------------------------------------------

_mu_need_bin() {
    [ -x "$MUSTER_BIN/$1" ] || fail "$MUSTER_BIN/$1 not found (build first: scripts/test.sh --quick)"
}

# start_musterd CONFIG_FILE [ARGS...]: musterd on a free loopback port (exported SCHED_PORT),
# against this test's redis; log $T/musterd.log; waits until its port accepts connections.
start_musterd() {
    local config=$1
    shift
    _mu_need_bin musterd
    [ -n "${MUSTER_REDIS_URL:-}" ] || fail "start_musterd: call start_redis first"
    SCHED_PORT=${SCHED_PORT:-$(free_port)} # a restart keeps the port the workers know
    export SCHED_PORT
    local from=1
    [ -e "$T/musterd.log" ] && from=$(($(wc -l <"$T/musterd.log") + 1))
    "$MUSTER_BIN/musterd" --config "$config" --redis "$MUSTER_REDIS_URL" \
        --bind "tcp://127.0.0.1:$SCHED_PORT" "$@" >>"$T/musterd.log" 2>&1 &
    MUSTERD_PID=$!
    _mu_pids+=("$MUSTERD_PID")
    _mu_wait_listen musterd "$MUSTERD_PID" "$SCHED_PORT" 10
    # It binds before it takes the lease, and musterctl refuses control commands while no musterd
    # leads: wait until this one leads, or says that another does.
    wait_for "musterd leading or standing by" 30 \
        '[ "$(leader_pid)" = "$MUSTERD_PID" ] || tail -n +'"$from"' "$T/musterd.log" | grep -q "standing by"'
}

# _mu_wait_listen NAME PID PORT TIMEOUT_S: waits until PORT accepts connections; fails at once
# when the process exits instead.
_mu_wait_listen() {
    local name=$1 pid=$2 port=$3 i rc
    for ((i = 0; i < $4 * 10; i++)); do
        _mu_port_open "$port" && return 0
        if ! _mu_alive "$pid"; then
            rc=0
            wait "$pid" || rc=$?
            fail "$name exited with status $rc before listening on port $port"
        fi
        _mu_nap
    done
    fail "timed out after ${4}s waiting for $name to listen on port $port"
}

# start_musterd_ha NAME CONFIG [ARGS...]: one more musterd against this test's redis (a
# high-availability pair, issue #14) on a free loopback port, HA_PORT[NAME]; log
# $T/musterd-NAME.log; PID in HA_PID[NAME].  Every musterd binds its port, leader or standby.
declare -gA HA_PID HA_PORT
start_musterd_ha() {
    local name=$1 config=$2
    shift 2
    _mu_need_bin musterd
    HA_PORT[$name]=$(free_port)
    "$MUSTER_BIN/musterd" --config "$config" --redis "$MUSTER_REDIS_URL" \
        --bind "tcp://127.0.0.1:${HA_PORT[$name]}" "$@" >>"$T/musterd-$name.log" 2>&1 &
    HA_PID[$name]=$!
    _mu_pids+=("$!")
    _mu_wait_listen "musterd $name" "${HA_PID[$name]}" "${HA_PORT[$name]}" 10
}

# leader_pid: the PID of the musterd that leads now ("" when none took the lease yet).
leader_pid() {
    [ -n "$(rcli GET "${MUSTER_KEY_PREFIX}leader")" ] && rcli HGET "${MUSTER_KEY_PREFIX}leadership" pid
}

# stop_musterd: stops the musterd started by start_musterd (e.g. to test a restart).
stop_musterd() {
    [ -n "$MUSTERD_PID" ] && stop_pid "$MUSTERD_PID"
}

# start_worker NAME POOL GPUS [ARGS...]: muster-worker for node NAME with GPUS simulated GPUs
# (scheduler: $SCHED_ENDPOINTS when set, a comma-separated list, else start_musterd's port),
# labels zone=z1 rack=r1 unless ARGS give --label flags of their own, state dir $T/w/NAME,
# log $T/worker-NAME.log.  Its PID is in WORKER_PID[NAME].
start_worker() {
    local name=$1 pool=$2 gpus=$3
    shift 3
    _mu_need_bin muster-worker
    [ -n "${SCHED_PORT:-}${SCHED_ENDPOINTS:-}" ] || fail "start_worker: call start_musterd first"
    mkdir -p "$T/w/$name"
    local labels=(--label zone=z1 --label rack=r1) a
    for a in "$@"; do
        [ "$a" = --label ] && labels=() # the caller names the labels itself
    done
    "$MUSTER_BIN/muster-worker" --scheduler "${SCHED_ENDPOINTS:-tcp://127.0.0.1:$SCHED_PORT}" --node "$name" \
        --pool "$pool" --gpus "$gpus" --addr 127.0.0.1 --state-dir "$T/w/$name" \
        "${labels[@]}" "$@" >>"$T/worker-$name.log" 2>&1 &
    WORKER_PID[$name]=$!
    _mu_pids+=("$!")
}

# stop_worker NAME [SIGNAL]: without SIGNAL a clean stop (TERM, KILL after 3 s); with one, just
# sends it (e.g. KILL to simulate a lost node).
stop_worker() {
    local pid=${WORKER_PID[$1]:-}
    [ -n "$pid" ] || fail "stop_worker: no worker '$1' started"
    if [ $# -ge 2 ]; then
        kill -"$2" "$pid" 2>/dev/null || true
    else
        stop_pid "$pid"
    fi
}

# ---- muster -------------------------------------------------------------------------------------

# ctl ARGS...: musterctl against this test's redis.
ctl() {
    "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" "$@"
}

# expect_rc RC CMD...: runs CMD (stdout -> $T/out, stderr -> $T/err) and checks its exit status.
expect_rc() {
    local want=$1 got=0
    shift
    "$@" >"$T/out" 2>"$T/err" || got=$?
    [ "$got" = "$want" ] || fail "'$*' exited $got, expected $want; stdout: $(cat "$T/out"); stderr: $(cat "$T/err")"
}

# queue_field QUEUE FIELD: FIELD (a jq path such as quota.spot) of QUEUE in musterctl -o json queues.
queue_field() {
    ctl -o json queues | jq -r ".[] | select(.name == \"$1\") | .$2"
}

# job_state ID: the job's state field in Redis ("" when the job does not exist).
job_state() {
    rcli HGET "${MUSTER_KEY_PREFIX}job:$1" state
}

# job_field ID FIELD: a field of the job's hash ("" when absent).
job_field() {
    rcli HGET "${MUSTER_KEY_PREFIX}job:$1" "$2"
}

# expect_job_field ID FIELD TEXT: fails unless the job's FIELD contains TEXT (a fixed string).
expect_job_field() {
    job_field "$1" "$2" | has -F -- "$3" || fail "job $1: $2 '$(job_field "$1" "$2")' lacks '$3'"
}

# expect_job_rejected ID TEXT: waits for the job to be REJECTED; its error must contain TEXT.
expect_job_rejected() {
    wait_for "job $1 rejected" 10 job_state_is "$1" REJECTED
    expect_job_field "$1" error "$2"
}

# job_state_is ID STATE: true when the job is in STATE (for wait_for).
job_state_is() {
    local state
    _mu_redis state HGET "${MUSTER_KEY_PREFIX}job:$1" state && [ "$state" = "$2" ]
}

# submit_json JSON: submits a spec with XADD and prints the job id (the stream entry id).
submit_json() {
    local id
    id=$(rcli XADD "${MUSTER_KEY_PREFIX}submit" '*' spec "$1") || fail "XADD failed"
    case "$id" in
    [0-9]*-[0-9]*) echo "$id" ;;
    *) fail "XADD ${MUSTER_KEY_PREFIX}submit: unexpected reply '$id'" ;;
    esac
}

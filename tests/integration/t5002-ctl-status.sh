#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# musterctl's status commands against a real redis-server, musterd and workers: queues, pools
# (with a seeded cool-down), top --once, logs through musterd (--task, --stderr, -f, -o json, the
# refused --state-root of old), jobs --user/--sort and show's extra fields on seeded jobs, and the bash
# completion script (syntax, the contrib copy, completing commands, options and node names).
# Every command in both output forms, JSON checked with jq -e.
# Standalone: tests/integration/t5002-ctl-status.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
P=$MUSTER_KEY_PREFIX

out_has() { grep -qF -- "$1" "$T/out" || fail "stdout lacks '$1': $(cat "$T/out")"; }
err_has() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1': $(cat "$T/err")"; }
jqo() { jq -e "$1" "$T/out" >/dev/null || fail "jq -e '$1' failed on: $(cat "$T/out")"; }
# Ages in tables grow while the test runs, by as much as the machine is slow: an age is checked
# against the clock read around the command that printed it (as in t5000).
ms_now() { echo $(($(date +%s%N) / 1000000)); }
fmt_age() { # S: the age text musterctl prints for S seconds ("5s", "3m", "2h", "4d")
    if [ "$1" -lt 60 ]; then echo "$1s"; elif [ "$1" -lt 3600 ]; then echo "$(($1 / 60))m"
    elif [ "$1" -lt 86400 ]; then echo "$(($1 / 3600))h"; else echo "$(($1 / 86400))d"; fi
}
# age_ok TEXT THEN_MS FROM_MS TO_MS: TEXT is the age of THEN_MS seen between FROM_MS and TO_MS.
age_ok() {
    local s
    for ((s = ($3 - $2) / 1000; s <= ($4 - $2) / 1000; s++)); do
        [ "$(fmt_age "$s")" = "$1" ] && return 0
    done
    return 1
}

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3.5, "max_gpus": 64},
    {"name": "od-a", "capacity": "on-demand", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 10}
  ],
  "queues": [{"name": "default", "weight": 1}, {"name": "research", "weight": 3}],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "bind_timeout_s": 10
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 od-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${P}nodes")" = 2 ]'

# A gang holding all of n1, and a job that cannot fit while it runs (pending in research).
expect_rc 0 ctl submit --name hold-n1 --gpus-per-task 8 --capacity spot --user alice -- sleep 60
run_id=$(cat "$T/out")
wait_for "job $run_id running" 15 job_state_is "$run_id" RUNNING
expect_rc 0 ctl submit --queue research --tasks 2 --gpus-per-task 8 --capacity spot --user bob \
    -- true
pend_id=$(cat "$T/out")
wait_for "job $pend_id pending with a reason" 15 \
    '[ "$(job_state "$pend_id")" = PENDING ] && [ "$(ctl -o json queues | jq ".[] | select(.name == \"research\") | .pending_jobs")" = 1 ]'

# ---- queues ---------------------------------------------------------------------------------
expect_rc 0 ctl -o json queues
jqo 'length == 2 and (map(.name) == ["default", "research"])'
jqo '.[0].running_jobs == 1 and .[0].running_gpus == 8 and .[0].pending_jobs == 0 and .[0].oldest_pending_at == 0'
jqo '.[1].weight == 3 and .[1].pending_jobs == 1 and .[1].pending_gpus == 16 and .[1].oldest_pending_at > 0'
# Fair share: the research queue never ran anything; default's usage is whatever its gang ran.
jqo '.[1].usage_gpu_s == 0 and .[1].share == 0 and .[0].usage_gpu_s >= 0 and .[0].usage_at > 0'
oldest=$(jq '.[1].oldest_pending_at' "$T/out")
t0=$(ms_now)
expect_rc 0 ctl queues
t1=$(ms_now)
head -1 "$T/out" | has -E '^QUEUE +WEIGHT +PENDING +RUNNING +PENDING_GPUS +RUNNING_GPUS +OLDEST_WAIT +USAGE_GPU_H +SHARE +TARGET +QUOTA +BORROWED +LENT$' ||
    fail "queues header: $(head -1 "$T/out")"
grep -qE '^default +1 +0 +1 +0 +8 +- +[0-9]+\.[0-9] +[0-9]+% +25% +- +0 +0$' "$T/out" ||
    fail "default row: $(cat "$T/out")"
grep -qE '^research +3 +1 +0 +16 +0 +[0-9]+[smhd] +0\.0 +0% +75% +- +0 +0$' "$T/out" ||
    fail "research row: $(cat "$T/out")"
wait_text=$(awk '$1 == "research" { print $7 }' "$T/out")
age_ok "$wait_text" "$oldest" "$t0" "$t1" ||
    fail "research OLDEST_WAIT '$wait_text' is not the age of oldest_pending_at $oldest (seen $t0..$t1)"
# Users within a queue: alice holds default's 8 GPUs; bob has only a pending job in research.
expect_rc 0 ctl -o json queues
jqo '.[0].users.alice.running_gpus == 8 and .[0].users.alice.usage_gpu_s >= 0'
expect_rc 0 ctl queues --users
head -1 "$T/out" | has -E '^QUEUE +USER +RUNNING_GPUS +USAGE_GPU_H +SHARE$' ||
    fail "queues --users header: $(head -1 "$T/out")"
grep -qE '^default +alice +8 +[0-9]+\.[0-9] +(0|100)%$' "$T/out" || fail "alice's row: $(cat "$T/out")"
ok "queues: pending/running jobs and GPUs, oldest wait, fair-share usage, users (table and json)"

# ---- pools ----------------------------------------------------------------------------------
# A pool in cool-down, as musterd will publish it after a spot interruption (issue #4).
now=$(($(date +%s%N) / 1000000))
rcli HSET "${P}pools" zz-cool '{"name":"zz-cool","instance_type":"g6e.12xlarge","gpu_type":"L40S","capacity":"spot","gpus_per_node":4,"price_per_hour":4.2,"max_gpus":0,"nodes":0,"gpus":0,"gpus_free":0,"gpus_used":0,"cooldown_until":'$((now + 300000))'}' >/dev/null
expect_rc 0 ctl -o json pools
jqo 'map(.name) == ["od-a", "spot-a", "zz-cool"]'
jqo '.[1].capacity == "spot" and .[1].gpus_used == 8 and .[1].gpus_free == 0 and .[1].nodes == 1 and .[1].max_gpus == 64 and .[1].price_per_hour == 3.5'
jqo '.[0].gpus_free == 8 and .[0].instance_type == "p4d.24xlarge" and .[0].gpu_type == "A100"'
jqo '.[2].cooldown_until > 0'
t0=$(ms_now)
expect_rc 0 ctl pools
t1=$(ms_now)
head -1 "$T/out" | has -E '^POOL +CAPACITY +TYPE +GPU +NODES +GPUS_FREE/USED +PRICE/H +CAP +COOLDOWN$' ||
    fail "pools header: $(head -1 "$T/out")"
grep -qE '^spot-a +spot +p4d.24xlarge +A100 +1 +0/8 +3.50 +64 +-$' "$T/out" || fail "spot-a row: $(cat "$T/out")"
grep -qE '^od-a +on-demand +p4d.24xlarge +A100 +1 +8/0 +10.00 +- +-$' "$T/out" || fail "od-a row: $(cat "$T/out")"
grep -qE '^zz-cool +spot +g6e.12xlarge +L40S +0 +0/0 +4.20 +- +[0-9]+[smhd]$' "$T/out" || fail "cool-down row: $(cat "$T/out")"
# COOLDOWN is the time left until cooldown_until (now + 5 min): an age with the clock reversed.
left=$(awk '$1 == "zz-cool" { print $9 }' "$T/out")
age_ok "$left" $((-(now + 300000))) $((-t1)) $((-t0)) ||
    fail "zz-cool COOLDOWN '$left' is not the time left until now + 300 s (seen $(((t0 - now) / 1000))-$(((t1 - now) / 1000)) s after now)"
rcli HDEL "${P}pools" zz-cool >/dev/null
ok "pools: capacity, type, GPUs free/used, price, cap, cool-down (table and json)"

# ---- top --once -----------------------------------------------------------------------------
expect_rc 0 ctl top --once
out_has "muster top"
out_has "QUEUES"
out_has "POOLS"
out_has "RUNNING GANGS 1   PENDING JOBS 1"
grep -qE "^$run_id +hold-n1 +default +RUNNING +1x8 " "$T/out" || fail "top: no running gang row: $(cat "$T/out")"
! grep -q $'\033' "$T/out" || fail "top --once off a TTY wrote escape codes"
expect_rc 0 ctl -o json top
jqo '(.queues | length) == 2 and (.pools | length) == 2 and .pending_jobs == 1'
jqo ".running | length == 1 and .[0].id == \"$run_id\" and .[0].state == \"RUNNING\""
# Live mode without a terminal prints frames one after another until stopped.
# (the binary itself, not the ctl function, so that stop_pid stops musterctl and not a subshell)
"$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" top --interval 1 >"$T/top.live" 2>&1 &
top_pid=$!
_mu_pids+=("$top_pid")
wait_for "two frames" 10 '[ "$(grep -c "^QUEUES" "$T/top.live")" -ge 2 ]'
stop_pid "$top_pid"
ok "top --once, top -o json and top without a terminal"

# ---- hold shows in the jobs table -----------------------------------------------------------
expect_rc 0 ctl hold "$pend_id"
wait_for "job $pend_id held" 10 '[ "$(rcli HGET "${P}job:$pend_id" held)" = 1 ]'
expect_rc 0 ctl jobs --state PENDING
grep -qE "^$pend_id .* held: 'musterctl release ID' lets it start" "$T/out" || fail "jobs: held not shown: $(cat "$T/out")"
expect_rc 0 ctl release "$pend_id"
wait_for "job $pend_id released" 10 '[ "$(rcli HGET "${P}job:$pend_id" held)" = 0 ] || [ -z "$(rcli HGET "${P}job:$pend_id" held)" ]'
ok "a held job says so in the jobs table; release clears it"

# ---- colour only on a terminal and without NO_COLOR (script(1) gives a pty) ------------------
if command -v script >/dev/null 2>&1; then
    script -qfec "$MUSTER_BIN/musterctl --redis $MUSTER_REDIS_URL top --once" /dev/null >"$T/tty.out"
    grep -q $'\033\\[32mRUNNING' "$T/tty.out" || fail "no colour on a terminal: $(cat -v "$T/tty.out")"
    script -qfec "env NO_COLOR=1 $MUSTER_BIN/musterctl --redis $MUSTER_REDIS_URL top --once" \
        /dev/null >"$T/tty.out"
    ! grep -q $'\033' "$T/tty.out" || fail "colour despite NO_COLOR: $(cat -v "$T/tty.out")"
    ok "colour on a terminal only, and never with NO_COLOR"
fi

# ---- logs -----------------------------------------------------------------------------------
expect_rc 0 ctl submit --tasks 2 --gpus-per-task 1 --capacity on-demand --wait -- \
    sh -c 'echo "out of rank $RANK"; echo "err of rank $RANK" >&2'
lid=$(head -1 "$T/out")
expect_rc 0 ctl logs "$lid"
[ "$(cat "$T/out")" = "out of rank 0" ] || fail "logs: $(cat "$T/out")"
expect_rc 0 ctl logs "$lid" --task 1 --stderr
[ "$(cat "$T/out")" = "err of rank 1" ] || fail "logs --task 1 --stderr: $(cat "$T/out")"
expect_rc 0 ctl -o json logs "$lid" --task 1
jqo ".job == \"$lid\" and .task == 1 and .attempt == 1 and .node == \"n2\" and .stream == \"stdout\" and .text == \"out of rank 1\\n\""
expect_rc 2 ctl logs "$lid" --state-root "$T/w"
err_has "usage:"
expect_rc 1 ctl logs "$lid" --task 5
err_has "has 2 task(s)"
expect_rc 1 ctl logs "$lid" --attempt 2
err_has "--attempt 2 has not happened"
expect_rc 1 ctl logs "$pend_id"
err_has "PENDING"
expect_rc 1 ctl logs 1-1
err_has "job '1-1' not found"
expect_rc 2 ctl -o json logs "$lid" -f
ok "logs: task stdout/stderr through musterd, -o json, clear errors"

# hold and release of a job musterd has finished: not active, exit 1, nothing sent.
nctl=$(rcli XLEN "${P}control")
expect_rc 1 ctl hold "$lid"
err_has "musterctl: hold: job '$lid' is SUCCEEDED, not active"
expect_rc 1 ctl release "$lid"
err_has "musterctl: release: job '$lid' is SUCCEEDED, not active"
[ "$(rcli XLEN "${P}control")" = "$nctl" ] || fail "a control command was sent for a finished job"
ok "hold and release of a finished job exit 1: not active"

expect_rc 0 ctl submit --capacity on-demand -- sh -c 'for i in 1 2 3 4 5; do echo "line $i"; sleep 0.3; done'
fid=$(cat "$T/out")
wait_for "job $fid running" 15 job_state_is "$fid" RUNNING
expect_rc 0 timeout 20 "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" logs -f "$fid"
[ "$(cat "$T/out")" = "$(printf 'line %s\n' 1 2 3 4 5)" ] || fail "logs -f: $(cat "$T/out")"
[ "$(job_state "$fid")" = SUCCEEDED ] || fail "logs -f ended before the job did"
ok "logs -f follows the task's output until the job ends"

# ---- jobs --user / --sort and show's extra fields (seeded under another prefix) ----------------
S=seed:
seed() { # id user queue priority state submitted_at
    rcli HSET "${S}job:$1" id "$1" name "j-$1" user "$2" queue "$3" priority "$4" state "$5" \
        tasks 1 gpus_per_task 1 attempt 1 submitted_at "$6" >/dev/null
    rcli ZADD "${S}jobs" "$6" "$1" >/dev/null
}
seed $((now - 4000))-0 alice research 5 RUNNING $((now - 4000))
seed $((now - 3000))-0 bob default 50 PENDING $((now - 3000))
seed $((now - 2000))-0 alice default 20 PENDING $((now - 2000))
seed $((now - 1000))-0 carol research 1 STARTING $((now - 1000))
sctl() { ctl --prefix "$S" "$@"; }
expect_rc 0 sctl -o json jobs --user alice
jqo 'length == 2 and all(.user == "alice")'
expect_rc 0 sctl -o json jobs --sort priority
jqo 'map(.priority) == [50, 20, 5, 1]'
expect_rc 0 sctl -o json jobs --sort -priority
jqo 'map(.priority) == [1, 5, 20, 50]'
expect_rc 0 sctl -o json jobs --sort state
jqo 'map(.state) == ["PENDING", "PENDING", "STARTING", "RUNNING"] and .[0].user == "bob"'
expect_rc 0 sctl -o json jobs --sort queue
jqo 'map(.queue) == ["default", "default", "research", "research"]'
expect_rc 0 sctl -o json jobs --sort age
jqo 'map(.user) == ["alice", "bob", "alice", "carol"]'
expect_rc 0 sctl -o json jobs --sort -id
jqo 'map(.user) == ["carol", "alice", "bob", "alice"]'
# The table (read without JSON) lists the same jobs in the same order as -o json, for every sort
# and filter.
for how in "--sort submit" "--sort priority" "--sort -priority" "--sort state" "--sort -state" \
    "--sort queue" "--sort age" "--sort -age" "--sort id" "--sort -id" "--user alice" \
    "--queue research" "--state pending" "--limit 2" "--limit 3 --sort priority" "--all"; do
    # shellcheck disable=SC2086 # $how is several words on purpose
    sctl -o json jobs $how | jq -r '.[].id' >"$T/json.ids"
    # shellcheck disable=SC2086
    sctl jobs $how | awk 'NR > 1 { print $1 }' >"$T/table.ids"
    [ -s "$T/json.ids" ] && cmp -s "$T/json.ids" "$T/table.ids" ||
        fail "jobs $how: the table's order $(paste -sd' ' "$T/table.ids") is not -o json's $(paste -sd' ' "$T/json.ids")"
done
expect_rc 0 sctl jobs --user bob --sort priority
[ "$(wc -l <"$T/out")" = 2 ] && grep -q "bob\|j-$((now - 3000))-0" "$T/out" || fail "jobs --user bob: $(cat "$T/out")"
expect_rc 2 sctl jobs --sort size
err_has "--sort: expected id, priority, age, state or queue"
ok "jobs --user and --sort (id, priority, age, state, queue, -FIELD); the table in -o json's order"

x=$((now - 4000))-0
rcli HSET "${S}job:$x" attempt 3 failures 1 last_checkpoint /ckpt/step-900 \
    last_checkpoint_at $((now - 60000)) lost_gpu_seconds 5400.5 \
    attempts '[{"attempt":1,"end":"preempted"},{"attempt":2,"end":"exit 1"}]' >/dev/null
expect_rc 0 sctl -o json show "$x"
jqo '.attempt == 3 and .failures == 1 and .lost_gpu_seconds == 5400.5 and .last_checkpoint == "/ckpt/step-900"'
jqo '(.last_checkpoint_at | type) == "number" and (.attempts | length) == 2'
t0=$(ms_now)
expect_rc 0 sctl show "$x"
t1=$(ms_now)
grep -qE '^failures +1$' "$T/out" || fail "show: failures: $(cat "$T/out")"
grep -qE '^attempts +\[\{"attempt":1' "$T/out" || fail "show: attempts: $(cat "$T/out")"
grep -qE '^last_checkpoint +/ckpt/step-900$' "$T/out" || fail "show: last_checkpoint"
grep -qE '^last_checkpoint_at +[0-9-]+T[0-9:.]+Z \([0-9]+[smhd] ago\)$' "$T/out" || fail "show: last_checkpoint_at"
ago=$(sed -n 's/^last_checkpoint_at .*(\([0-9]*[smhd]\) ago)$/\1/p' "$T/out")
age_ok "$ago" $((now - 60000)) "$t0" "$t1" || fail "show: last_checkpoint_at is '$ago ago', not its age"
grep -qE '^lost_gpu_seconds +5400 GPU-seconds \(1.50 GPU-hours\)$' "$T/out" || fail "show: lost: $(cat "$T/out")"
ok "show: attempts, failures, last checkpoint and lost GPU time"

# ---- completion -----------------------------------------------------------------------------
expect_rc 0 ctl completion bash
cp "$T/out" "$T/completion.bash"
bash -n "$T/completion.bash" || fail "the completion script does not parse"
diff -u "$MUSTER_SRC/contrib/bash-completion/musterctl" "$T/completion.bash" >"$T/diff" ||
    fail "contrib/bash-completion/musterctl is stale (regenerate with 'musterctl completion bash'): $(cat "$T/diff")"
expect_rc 0 ctl completion --list nodes
[ "$(cat "$T/out")" = "$(printf 'n1\nn2')" ] || fail "--list nodes: $(cat "$T/out")"
expect_rc 0 ctl completion --list jobs
out_has "$run_id"
expect_rc 0 ctl -o json completion --list queues
jqo 'map(.name) == ["default", "research"]'
expect_rc 2 ctl completion zsh
expect_rc 2 ctl completion --list bogus
# complete WORDS...: what bash would offer for the last word.
complete_words() {
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _musterctl; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$T/completion.bash" "$@"
}
[ "$(complete_words musterctl dr)" = drain ] || fail "completing 'dr': $(complete_words musterctl dr)"
complete_words musterctl jobs --so | has -x -- --sort || fail "completing 'jobs --so'"
complete_words musterctl jobs --state RU | has -x RUNNING || fail "completing --state"
complete_words musterctl -o j | has -x json || fail "completing -o"
[ "$(complete_words "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" drain '' | sort | paste -sd,)" = n1,n2 ] ||
    fail "completing node names: $(complete_words "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" drain '')"
complete_words "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" cancel '' | has -x "$run_id" ||
    fail "completing job ids for cancel"
for cmd in $(ctl --help | sed -n '/^Commands:/,/^$/p' | awk 'NF > 1 { print $1 }'); do
    grep -q "^    $cmd)" "$T/completion.bash" || fail "command $cmd missing from the completion script"
    expect_rc 0 ctl "$cmd" --help
    out_has "usage: musterctl $cmd"
done
ok "completion bash: parses, matches contrib/, completes commands, options, values, nodes, jobs; every command has --help"

# ---- man pages ------------------------------------------------------------------------------
if command -v man >/dev/null 2>&1; then
    for page in musterctl.1 musterd.8 muster-worker.8; do
        MANWIDTH=80 man --warnings -l "$MUSTER_SRC/docs/man/$page" >"$T/man.txt" 2>"$T/man.err" ||
            fail "man -l $page failed: $(cat "$T/man.err")"
        [ ! -s "$T/man.err" ] || fail "man -l $page warned: $(cat "$T/man.err")"
        for sec in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" ENVIRONMENT FILES EXAMPLES "SEE ALSO"; do
            grep -q "^$sec" "$T/man.txt" || fail "$page lacks section $sec"
        done
    done
    MANWIDTH=200 man -l "$MUSTER_SRC/docs/man/musterctl.1" >"$T/man.txt" 2>/dev/null
    for cmd in $(ctl --help | sed -n '/^Commands:/,/^$/p' | awk 'NF > 1 { print $1 }'); do
        grep -qE "^ +$cmd( |$)" "$T/man.txt" || fail "musterctl.1 does not describe '$cmd'"
    done
    ok "man pages render with man -l, with every section and every musterctl command"
fi

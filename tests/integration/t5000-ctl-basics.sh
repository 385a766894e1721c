#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# musterctl against a real redis-server with no musterd: job hashes, nodes and events are seeded
# with redis-cli exactly as musterd writes them (docs/design.md §6), and every command is checked in both
# output forms (-o json through jq -e), plus the exit codes: 0 ok, 1 runtime, 2 usage.
# Standalone: tests/integration/t5000-ctl-basics.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
start_redis
P=$MUSTER_KEY_PREFIX

# out_has TEXT / err_has TEXT: the last command's stdout / stderr contains TEXT.
out_has() { grep -qF -- "$1" "$T/out" || fail "stdout lacks '$1': $(cat "$T/out")"; }
err_has() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1': $(cat "$T/err")"; }
# jqo FILTER: jq -e FILTER over the last command's stdout.
jqo() { jq -e "$1" "$T/out" >/dev/null || fail "jq -e '$1' failed on: $(cat "$T/out")"; }
# Ages shown in tables grow while the test runs, by as much as the machine is slow (an ASan
# build on a busy host took 13 s to get here once).  So an age is checked against the clock read
# around the command that printed it, never against a guess of how fast the machine is.
ms_now() { echo $(($(date +%s%N) / 1000000)); }
fmt_age() { # S: the age text musterctl prints for S seconds ("5s", "3m", "2h", "4d")
    if [ "$1" -lt 60 ]; then echo "$1s"; elif [ "$1" -lt 3600 ]; then echo "$(($1 / 60))m"
    elif [ "$1" -lt 86400 ]; then echo "$(($1 / 3600))h"; else echo "$(($1 / 86400))d"; fi
}
# age_ok TEXT THEN_MS FROM_MS TO_MS: TEXT is the age of THEN_MS as seen at some moment between
# FROM_MS and TO_MS (clock reads taken just before and just after the command).
age_ok() {
    local s
    for ((s = ($3 - $2) / 1000; s <= ($4 - $2) / 1000; s++)); do
        [ "$(fmt_age "$s")" = "$1" ] && return 0
    done
    return 1
}

# ---- seed: five jobs as musterd stores them ------------------------------------------------
now=$(($(date +%s%N) / 1000000))
A=$((now - 7200000))-0 # RUNNING, research, 2x8
B=$((now - 3600000))-0 # PENDING, research
C=$((now - 1800000))-0 # SUCCEEDED
D=$((now - 600000))-0  # REJECTED
E=$((now - 5000))-0    # PENDING, default
seed_job() { # id state queue submitted_at extra field/value pairs...
    local id=$1 state=$2 queue=$3 at=$4
    shift 4
    rcli HSET "${P}job:$id" id "$id" name "job-$state" queue "$queue" user alice state "$state" \
        priority 10 tasks 1 gpus_per_task 1 attempt 0 max_retries 3 submitted_at "$at" \
        spec '{"command":["true"]}' "$@" >/dev/null
    rcli ZADD "${P}jobs" "$at" "$id" >/dev/null
}
seed_job "$A" RUNNING research $((now - 7200000)) tasks 2 gpus_per_task 8 priority 100 \
    started_at $((now - 7000000)) nodes n1,n2 attempt 1 \
    placement '[{"task":0,"node":"n1","gpus":[0,1,2,3,4,5,6,7]},{"task":1,"node":"n2","gpus":[0,1,2,3,4,5,6,7]}]' \
    last_checkpoint /ckpt/a-100 last_checkpoint_at $((now - 60000))
seed_job "$B" PENDING research $((now - 3600000)) tasks 4 gpus_per_task 8 \
    reason "waiting for 32 free GPUs in one zone (largest fit 16)"
seed_job "$C" SUCCEEDED default $((now - 1800000)) started_at $((now - 1700000)) \
    finished_at $((now - 1600000)) exit_code 0 nodes n1
seed_job "$D" REJECTED default $((now - 600000)) error "tasks: expected an integer 1..4096, got -2" \
    spec '{"tasks":-2}'
seed_job "$E" PENDING default $((now - 5000)) reason "queued behind higher priority jobs"

rcli HSET "${P}nodes" \
    n1 '{"name":"n1","pool":"spot-a","capacity":"spot","state":"ready","gpus":8,"gpus_free":0,"cpus":96,"memory_mb":1000000,"labels":{"zone":"z1","rack":"r1"},"addr":"127.0.0.1","heartbeat_at":'$((now - 2000))',"jobs":["'"$A"'"]}' \
    n2 '{"name":"n2","pool":"od-a","capacity":"on-demand","state":"cordoned","gpus":8,"gpus_free":6,"cpus":96,"memory_mb":1000000,"labels":{"zone":"z1","rack":"r2"},"addr":"127.0.0.1","heartbeat_at":'$((now - 1000))',"jobs":[]}' \
    >/dev/null

ev() { rcli XADD "${P}events" '*' job "$1" state "$2" reason "$3" attempt "$4" at "$5" >/dev/null; }
ev "$A" PENDING "" 0 $((now - 7200000))
ev "$A" RUNNING "placed on n1,n2" 1 $((now - 7000000))
ev "$B" PENDING "waiting for GPUs" 0 $((now - 3600000))
ev "$C" SUCCEEDED "exit 0" 0 $((now - 1600000))
ev "$D" REJECTED "tasks: expected an integer 1..4096, got -2" 0 $((now - 600000))
ok "seeded 5 jobs, 2 nodes, 5 events"

# ---- help, version and usage errors ----------------------------------------------------------
expect_rc 0 ctl --help
out_has "Commands:"
out_has "submit"
expect_rc 0 ctl help jobs
out_has "--limit N"
expect_rc 0 ctl jobs --help
out_has "usage: musterctl jobs"
expect_rc 0 ctl --version
out_has "musterctl "
[ ! -s "$T/err" ] || fail "--version wrote to stderr"
ok "--help, help COMMAND, COMMAND --help and --version exit 0 on stdout"

expect_rc 2 "$MUSTER_BIN/musterctl"
expect_rc 2 ctl frobnicate
err_has "musterctl: usage: unknown command 'frobnicate'"
expect_rc 2 ctl jobs --bogus
err_has "musterctl: usage: jobs: unknown option '--bogus'"
expect_rc 2 ctl -o yaml jobs
err_has "musterctl: usage:"
expect_rc 2 ctl show
err_has "musterctl: usage: show: missing ID"
expect_rc 2 ctl show a b
expect_rc 2 ctl jobs --limit zero
expect_rc 2 ctl jobs --state SLEEPING
expect_rc 2 ctl events --count
expect_rc 2 ctl help nosuch
expect_rc 2 ctl --redis http://x jobs
[ ! -s "$T/out" ] || fail "a usage error wrote to stdout"
ok "usage errors exit 2 with 'musterctl: usage:' on stderr"

dead=$(free_port)
expect_rc 1 "$MUSTER_BIN/musterctl" --redis "redis://127.0.0.1:$dead" jobs
err_has "musterctl: cannot reach redis at 127.0.0.1:$dead: Connection refused; hint: is redis-server running?"
expect_rc 1 env MUSTER_REDIS_URL="redis://127.0.0.1:$dead" "$MUSTER_BIN/musterctl" nodes
err_has "cannot reach redis at 127.0.0.1:$dead"
ok "unreachable redis exits 1 with a hint (flag and MUSTER_REDIS_URL)"

# ---- submit ---------------------------------------------------------------------------------
printf '{"name": "sub1", "command": ["python", "train.py"],\n "tasks": 2}' >"$T/job.json"
expect_rc 0 ctl submit "$T/job.json"
id1=$(cat "$T/out")
[[ "$id1" =~ ^[0-9]+-[0-9]+$ ]] || fail "submit printed '$id1', not a job id"
[ "$(rcli XRANGE "${P}submit" "$id1" "$id1" | sed -n 3p)" = "$(head -1 "$T/job.json")" ] ||
    fail "stream entry is not the file's first line"
[ "$(rcli --raw XRANGE "${P}submit" "$id1" "$id1" | tail -n +3)" = "$(cat "$T/job.json")" ] ||
    fail "stream entry differs from the submitted file"
expect_rc 0 ctl -o json submit - <"$T/job.json"
jqo '.id | test("^[0-9]+-[0-9]+$")'
id2=$(jq -r .id "$T/out")
[ "$(rcli XLEN "${P}submit")" = 2 ] || fail "two submits did not make two stream entries"
[ "$(rcli HGET "${P}job:$id2" state)" = "" ] || fail "submit wrote a job hash"
ok "submit FILE and submit - (json) append the exact spec and print the id"

printf '{"a": 1,\n "b": x}' >"$T/bad.json"
expect_rc 1 ctl submit "$T/bad.json"
err_has "musterctl: submit: $T/bad.json: not valid JSON near byte 15"
expect_rc 1 ctl submit - <<<'[1, 2]'
err_has "musterctl: submit: stdin: a job spec must be a JSON object, got an array"
expect_rc 1 ctl submit "$T/nope.json"
err_has "musterctl: submit: cannot open"
head -c $((1024 * 1024 + 10)) /dev/zero | tr '\0' ' ' >"$T/big.json"
expect_rc 1 ctl submit "$T/big.json"
err_has "larger than 1048576 bytes"
[ "$(rcli XLEN "${P}submit")" = 2 ] || fail "a bad submit reached the stream"
ok "submit rejects invalid JSON (byte offset), non-objects, missing and oversized files"

# ---- jobs -----------------------------------------------------------------------------------
expect_rc 0 ctl -o json jobs
jqo 'length == 3'
jqo "map(.id) == [\"$A\", \"$B\", \"$E\"]"
jqo '.[0].tasks == 2 and .[0].gpus_per_task == 8 and .[0].priority == 100'
jqo '.[0].placement[1].node == "n2" and .[0].nodes == "n1,n2"'
jqo '.[1].reason | startswith("waiting for 32")'
expect_rc 0 ctl jobs -o json --all
jqo "length == 5 and (map(.id) == [\"$A\", \"$B\", \"$C\", \"$D\", \"$E\"])"
expect_rc 0 ctl -o json jobs --state succeeded
jqo "length == 1 and .[0].id == \"$C\" and .[0].exit_code == 0"
expect_rc 0 ctl -o json jobs --queue research
jqo "map(.id) == [\"$A\", \"$B\"]"
expect_rc 0 ctl -o json jobs --all --limit 2
jqo "map(.id) == [\"$D\", \"$E\"]"
expect_rc 0 ctl -o json jobs --queue nosuch
jqo 'length == 0'
ok "jobs -o json: active by default, --all, --state, --queue, --limit (newest N), oldest first"

t0=$(ms_now)
expect_rc 0 env -u COLUMNS "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" jobs
t1=$(ms_now)
head -1 "$T/out" | has -E '^ID +NAME +QUEUE +STATE +TASKSxGPUS +PRIO +AGE +NODES +REASON$' ||
    fail "jobs header: $(head -1 "$T/out")"
[ "$(wc -l <"$T/out")" = 4 ] || fail "jobs table has $(wc -l <"$T/out") lines, expected 4"
grep -E "^$A +job-RUNNING +research +RUNNING +2x8 +100 +2h +n1,n2" "$T/out" >/dev/null ||
    fail "row of $A: $(grep "$A" "$T/out")"
grep -E "^$B .* PENDING +4x8 .* 1h .*waiting for 32 free GPUs in one zone \(largest fit 16\)$" \
    "$T/out" >/dev/null || fail "row of $B: $(grep "$B" "$T/out")"
grep -qE "^$E .* [0-9]+[smhd] .*queued behind" "$T/out" || fail "row of $E: $(grep "$E" "$T/out")"
age=$(awk -v id="$E" '$1 == id { print $7 }' "$T/out")
age_ok "$age" $((now - 5000)) "$t0" "$t1" ||
    fail "AGE of $E is '$age', not its age (submitted 5 s before the seeding, listed $(((t0 - now) / 1000))-$(((t1 - now) / 1000)) s after it)"
! grep -q $'\033' "$T/out" || fail "colour codes in non-TTY output"
expect_rc 0 ctl jobs --all
grep -E "^$D .*REJECTED .*tasks: expected an integer" "$T/out" >/dev/null ||
    fail "REJECTED row lacks its error"
expect_rc 0 env COLUMNS=90 "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" jobs
sed 's/…/./g' "$T/out" | awk 'length($0) > 90 { exit 1 }' || fail "COLUMNS=90 not respected: $(cat "$T/out")"
out_has "…"
ok "jobs table: columns, TASKSxGPUS, AGE, REASON, fits \$COLUMNS, no colour off a TTY"

# ---- show -----------------------------------------------------------------------------------
expect_rc 0 ctl -o json show "$A"
jqo ".id == \"$A\" and .state == \"RUNNING\" and .attempt == 1"
jqo '.placement | length == 2 and .[0].gpus == [0,1,2,3,4,5,6,7]'
jqo '.last_checkpoint == "/ckpt/a-100" and (.last_checkpoint_at | type) == "number"'
jqo '.spec == "{\"command\":[\"true\"]}"'
expect_rc 0 ctl show "$A"
grep -qE '^state +RUNNING$' "$T/out" || fail "show: no state line"
grep -qE '^submitted_at +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z \(2h ago\)$' "$T/out" ||
    fail "show: submitted_at not ISO UTC: $(grep submitted_at "$T/out")"
grep -qE '^ +task 1 +node n2 +gpus 0,1,2,3,4,5,6,7$' "$T/out" || fail "show: no placement line"
grep -qE '^spec +\{"command":\["true"\]\}$' "$T/out" || fail "show: no spec line"
ok "show ID: every field, ISO times, placement per task (table and json)"

expect_rc 0 ctl show "$id1"
grep -qE '^state +SUBMITTED \(not yet seen by musterd\)$' "$T/out" || fail "show of a submission"
expect_rc 0 ctl -o json show "$id1"
jqo ".id == \"$id1\" and .state == \"SUBMITTED\" and (.spec | fromjson | .name == \"sub1\")"
expect_rc 1 ctl show 1-1
err_has "musterctl: show: job '1-1' not found"
expect_rc 1 ctl -o json show not-an-id
err_has "musterctl: show: job 'not-an-id' not found"
[ ! -s "$T/out" ] || fail "show of a missing job wrote to stdout"
ok "show: SUBMITTED for stream-only ids, missing job exits 1"

# ---- cancel ---------------------------------------------------------------------------------
# Control commands are sent only while a musterd leads (issue #40; t5005 runs them without one):
# the lease key is seeded as musterd holds it.
rcli SET "${P}leader" "1 musterd@test tcp://127.0.0.1:1" >/dev/null
expect_rc 0 ctl cancel "$A"
out_has "cancel requested for job $A"
rcli XRANGE "${P}control" - + >"$T/control"
[ "$(sed -n '2,5p' "$T/control" | paste -sd' ')" = "cmd cancel arg $A" ] ||
    fail "control entry: $(cat "$T/control")"
expect_rc 1 ctl cancel 1-1 "$id1" "$C"
err_has "musterctl: cancel: job '1-1' not found"
err_has "job '$C' is already SUCCEEDED"
out_has "cancel requested for job $id1"
[ "$(rcli XLEN "${P}control")" = 2 ] || fail "cancel sent for a missing or finished job"
expect_rc 0 ctl -o json cancel "$B" "$E"
jqo ". == [{\"cmd\":\"cancel\",\"arg\":\"$B\"},{\"cmd\":\"cancel\",\"arg\":\"$E\"}]"
[ "$(rcli XLEN "${P}control")" = 4 ] || fail "cancel -o json did not send two commands"
ok "cancel: control entries, missing ids exit 1 but the rest are sent, finished jobs skipped"

# ---- control commands -----------------------------------------------------------------------
last_control() { rcli XREVRANGE "${P}control" + - COUNT 1 | sed -n '2,5p' | paste -sd' '; }
expect_rc 0 ctl drain n1
out_has "drain requested for node n1"
[ "$(last_control)" = "cmd drain arg n1" ] || fail "drain: $(last_control)"
expect_rc 0 ctl cordon n2
[ "$(last_control)" = "cmd cordon arg n2" ] || fail "cordon: $(last_control)"
expect_rc 0 ctl -o json uncordon n2
jqo '. == {"cmd":"uncordon","arg":"n2","sent":true}'
[ "$(last_control)" = "cmd uncordon arg n2" ] || fail "uncordon: $(last_control)"
expect_rc 0 ctl hold "$B"
out_has "hold requested for job $B"
[ "$(last_control)" = "cmd hold arg $B" ] || fail "hold: $(last_control)"
expect_rc 0 ctl release "$B"
[ "$(last_control)" = "cmd release arg $B" ] || fail "release: $(last_control)"
n=$(rcli XLEN "${P}control")
expect_rc 1 ctl drain n9
err_has "musterctl: drain: node 'n9' not found"
expect_rc 1 ctl hold 1-1
err_has "musterctl: hold: job '1-1' not found"
# A finished job is not active: hold and release say so and exit 1 (they used to print
# "hold requested" and exit 0 for a command musterd ignores).
expect_rc 1 ctl hold "$C"
err_has "musterctl: hold: job '$C' is SUCCEEDED, not active"
[ ! -s "$T/out" ] || fail "hold of a finished job wrote to stdout: $(cat "$T/out")"
expect_rc 1 ctl -o json release "$D"
err_has "musterctl: release: job '$D' is REJECTED, not active"
[ ! -s "$T/out" ] || fail "release -o json of a finished job wrote to stdout: $(cat "$T/out")"
expect_rc 1 ctl release 1-1
err_has "musterctl: release: job '1-1' not found"
# TIMEOUT is final too (a hash outside the jobs index, so the listings above are unchanged).
rcli HSET "${P}job:9-9" id 9-9 state TIMEOUT tasks 1 gpus_per_task 1 submitted_at "$now" >/dev/null
expect_rc 1 ctl hold 9-9
err_has "musterctl: hold: job '9-9' is TIMEOUT, not active"
rcli DEL "${P}job:9-9" >/dev/null
expect_rc 2 ctl drain
[ "$(rcli XLEN "${P}control")" = "$n" ] || fail "a failed control command was sent"
ok "drain, cordon, uncordon, hold, release send control commands; unknown targets and finished jobs exit 1"
[ "$(rcli HGET "${P}node:wanted" n1)" = '{"state":"draining"}' ] || fail "drain n1 was not kept"
[ "$(rcli HEXISTS "${P}node:wanted" n2)" = 0 ] || fail "uncordon n2 left its kept state"
rcli DEL "${P}node:wanted" "${P}leader" >/dev/null # the listings below show musterd's states

# ---- nodes ----------------------------------------------------------------------------------
expect_rc 0 ctl -o json nodes
jqo 'length == 2 and (map(.name) == ["n1", "n2"])'
jqo ".[0].jobs == [\"$A\"] and .[1].gpus_free == 6 and .[1].labels.rack == \"r2\""
t0=$(ms_now)
expect_rc 0 ctl nodes
t1=$(ms_now)
head -1 "$T/out" | has -E '^NAME +POOL +CAPACITY +STATE +GPUS +LABELS +HEARTBEAT +IDLE +RELEASABLE +JOBS +REASON$' ||
    fail "nodes header: $(head -1 "$T/out")"
# The seeded hashes have no idle_since/releasable (as an older musterd wrote): IDLE -, RELEASABLE no.
grep -qE "^n1 +spot-a +spot +ready +0/8 +zone=z1,rack=r1 +[0-9]+[smhd] +- +no +$A$" "$T/out" ||
    fail "n1 row: $(grep '^n1' "$T/out")"
grep -qE '^n2 +od-a +on-demand +cordoned +6/8 +zone=z1,rack=r2 +[0-9]+[smhd] +- +no$' "$T/out" ||
    fail "n2 row: $(grep '^n2' "$T/out")"
# HEARTBEAT is the age of each node's last heartbeat (seeded 2 s and 1 s before `now`).
for hb in n1:2000 n2:1000; do
    age=$(awk -v n="${hb%:*}" '$1 == n { print $7 }' "$T/out")
    age_ok "$age" $((now - ${hb#*:})) "$t0" "$t1" ||
        fail "${hb%:*} HEARTBEAT '$age' is not the age of its heartbeat ($(((t0 - now + ${hb#*:}) / 1000))-$(((t1 - now + ${hb#*:}) / 1000)) s)"
done
ok "nodes: table and json"

# ---- events ---------------------------------------------------------------------------------
expect_rc 0 ctl -o json events
jqo 'length == 5 and .[0].state == "PENDING" and .[4].state == "REJECTED"'
jqo '.[1].attempt == 1 and (.[1].at | type) == "number" and (.[1].id | test("-"))'
expect_rc 0 ctl -o json events --count 2
jqo "length == 2 and .[0].job == \"$C\" and .[1].job == \"$D\""
expect_rc 0 ctl -o json events --job "$A"
jqo "length == 2 and all(.job == \"$A\") and (map(.state) == [\"PENDING\", \"RUNNING\"])"
expect_rc 0 ctl -o json events --job "$A" --count 1
jqo 'length == 1 and .[0].state == "RUNNING"'
expect_rc 0 ctl events
head -1 "$T/out" | has -E '^TIME +JOB +STATE +ATTEMPT +REASON$' || fail "events header"
grep -qE "^[0-9-]{10}T[0-9:.]+Z +$A +RUNNING +1 +placed on n1,n2$" "$T/out" ||
    fail "events row: $(cat "$T/out")"
ok "events: last N oldest first, --job, --count, table and json"

# -f: the listing, then new events as they arrive (JSON Lines with -o json).
# musterctl itself in the background, not the ctl function: $! must be the process that
# stop_pid stops (a function would run in a subshell, and its musterctl outlive the test).
"$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" -o json events -f --job "$E" \
    >"$T/follow" 2>"$T/follow.err" &
follow_pid=$!
_mu_pids+=("$follow_pid")
sleep 0.5
ev "$B" RUNNING "" 1 "$now"
ev "$E" CANCELLED "cancelled by operator" 0 "$now"
wait_for "events -f to print the new event" 10 \
    "grep -q CANCELLED '$T/follow'"
stop_pid "$follow_pid"
[ "$(wc -l <"$T/follow")" = 1 ] || fail "events -f printed: $(cat "$T/follow")"
jq -e ".job == \"$E\" and .state == \"CANCELLED\" and .reason == \"cancelled by operator\"" \
    "$T/follow" >/dev/null || fail "events -f line: $(cat "$T/follow")"
ok "events -f follows new events (filtered by --job)"

# ---- key prefix -----------------------------------------------------------------------------
expect_rc 0 env MUSTER_KEY_PREFIX=other: "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" \
    -o json jobs --all
jqo 'length == 0'
expect_rc 0 ctl --prefix other: submit "$T/job.json"
[ "$(rcli XLEN other:submit)" = 1 ] || fail "--prefix not used for submit"
ok "--prefix and MUSTER_KEY_PREFIX select the key prefix"

# ---- many jobs and events: pipelined batches, --limit across batches, --job across batches ----
rcli DEL "${P}jobs" >/dev/null
for i in $(seq 1 700); do
    id=$((now - 100000 + i))-0
    state=RUNNING
    [ $((i % 2)) = 0 ] && state=SUCCEEDED
    printf 'HSET %sjob:%s id %s name bulk queue default state %s tasks 1 gpus_per_task 1 submitted_at %s\n' \
        "$P" "$id" "$id" "$state" $((now - 100000 + i))
    printf 'ZADD %sjobs %s %s\n' "$P" $((now - 100000 + i)) "$id"
    printf 'XADD %sevents * job %s state %s reason bulk attempt 0 at %s\n' "$P" "$id" "$state" "$now"
done | rcli >/dev/null
rcli ZADD "${P}jobs" "$now" "$now-9" >/dev/null # an index entry whose hash is gone
expect_rc 0 ctl -o json jobs --all
jqo 'length == 700 and (map(.submitted_at) | . == sort)'
expect_rc 0 ctl -o json jobs
jqo 'length == 350 and all(.state == "RUNNING")'
expect_rc 0 ctl -o json jobs --state SUCCEEDED --limit 300
jqo "length == 300 and .[299].id == \"$((now - 100000 + 700))-0\" and all(.state == \"SUCCEEDED\")"
# The table reads rows (HMGET), not objects: the same jobs, and the scan that stops at the limit
# with replies in flight leaves the connection clean for the next command.
expect_rc 0 ctl jobs --state SUCCEEDED --limit 300
[ "$(grep -c ' SUCCEEDED ' "$T/out")" = 300 ] && tail -1 "$T/out" | grep -q "^$((now - 100000 + 700))-0 " ||
    fail "jobs --state SUCCEEDED --limit 300 (table): $(head -3 "$T/out"; tail -1 "$T/out")"
all=$(ctl -o json jobs --all | jq -r '.[].id')
expect_rc 0 ctl jobs --all
[ "$(tail -n +2 "$T/out" | cut -d' ' -f1)" = "$all" ] || fail "jobs --all: the table's ids differ from -o json's"
expect_rc 0 ctl -o json events --job "$A" --count 100
jqo 'length == 2'
expect_rc 0 ctl -o json events --count 1000
jqo 'length == 707 and .[0].job == "'"$A"'" and .[706].reason == "bulk"'
expect_rc 0 ctl -o json events --count 600
jqo 'length == 600 and all(.reason == "bulk")'
ok "700 jobs and events: batched reads, filters and limits across batches"

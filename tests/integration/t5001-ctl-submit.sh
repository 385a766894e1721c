#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# musterctl submit, flag form and --wait, against a real redis-server, musterd and workers:
# the spec the flags build, --wait's exit status (0 SUCCEEDED, 1 FAILED/CANCELLED/REJECTED)
# with the state changes on stderr, and idempotent submission (the same key twice: one job, the
# same id, from the flag form, a spec file, and two racing clients).
# Standalone: tests/integration/t5001-ctl-submit.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
P=$MUSTER_KEY_PREFIX
start_redis

out_has() { grep -qF -- "$1" "$T/out" || fail "stdout lacks '$1': $(cat "$T/out")"; }
err_has() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1': $(cat "$T/err")"; }
jqo() { jq -e "$1" "$T/out" >/dev/null || fail "jq -e '$1' failed on: $(cat "$T/out")"; }

# ---- the spec the flags build (no server needed) -------------------------------------------
expect_rc 0 env USER=alice "$MUSTER_BIN/musterctl" submit --dry-run --tasks 4 --gpus-per-task 8 \
    --queue research --priority 10 --name ft --cpus-per-task 16 --memory-mb-per-task 65536 \
    --gpu-type A100 --capacity spot,on-demand --env WANDB_MODE=offline --env 'X=a b=c' \
    --workdir /data/run1 --time-limit 3600 --max-retries 2 --checkpoint-signal SIGUSR1 \
    --checkpoint-grace 90 --topology-required zone --topology-preferred rack \
    --idempotency-key pipe-1 --not-preemptible -- python train.py --epochs 3
jqo '.command == ["python", "train.py", "--epochs", "3"] and .tasks == 4 and .gpus_per_task == 8'
jqo '.queue == "research" and .priority == 10 and .name == "ft" and .user == "alice"'
jqo '.cpus_per_task == 16 and .memory_mb_per_task == 65536 and .gpu_type == "A100"'
jqo '.capacity == ["spot", "on-demand"] and .env == {"WANDB_MODE": "offline", "X": "a b=c"}'
jqo '.workdir == "/data/run1" and .time_limit_s == 3600 and .max_retries == 2'
jqo '.checkpoint == {"signal": "SIGUSR1", "grace_s": 90}'
jqo '.topology == {"required": "zone", "preferred": "rack"}'
jqo '.idempotency_key == "pipe-1" and .preemptible == false'
expect_rc 0 "$MUSTER_BIN/musterctl" submit --dry-run --tasks 2 --gpu-slice 3g.40gb -- python eval.py
jqo '.tasks == 2 and .gpu_slice == "3g.40gb"'
expect_rc 0 env USER=bob "$MUSTER_BIN/musterctl" submit --dry-run --user carol -- true
jqo '. == {"command": ["true"], "user": "carol"}'
ok "submit --dry-run: every flag lands in its spec key; --user beats \$USER"

expect_rc 2 ctl submit --tasks 2 python train.py
err_has "musterctl: usage: submit: --tasks builds a spec: put the command after --"
expect_rc 2 ctl submit --tasks 0 -- true
err_has "--tasks"
expect_rc 2 ctl submit --capacity spot,spt -- true
err_has "--capacity: expected spot or on-demand, got 'spt'"
expect_rc 2 ctl submit --env NOEQUALS -- true
err_has "--env: expected NAME=VALUE"
expect_rc 2 ctl submit --checkpoint-signal SIGNOPE -- true
expect_rc 2 ctl submit --
err_has "missing the command after --"
expect_rc 2 ctl submit
expect_rc 2 ctl submit job.json --tasks 2
ok "submit usage errors exit 2"

# ---- a real stack ------------------------------------------------------------------------------
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${P}nodes")" = 2 ]'

expect_rc 0 ctl submit --tasks 2 --gpus-per-task 4 --name ok-job --wait -- \
    sh -c 'echo "rank $RANK of $WORLD_SIZE"; sleep 0.3'
id=$(head -1 "$T/out")
[[ "$id" =~ ^[0-9]+-[0-9]+$ ]] || fail "--wait printed '$id' first, not the job id"
err_has "musterctl: job $id: PENDING"
err_has "musterctl: job $id: RUNNING"
err_has "musterctl: job $id: SUCCEEDED"
[ "$(job_state "$id")" = SUCCEEDED ] || fail "job $id is $(job_state "$id")"
[ "$(rcli HGET "${P}job:$id" name)" = ok-job ] || fail "name not stored"
ok "submit --wait: a job that succeeds exits 0, state changes on stderr"

expect_rc 1 ctl submit --max-retries 0 --wait -- sh -c 'exit 7'
id=$(head -1 "$T/out")
err_has "musterctl: submit: job $id FAILED:"
err_has "(exit code 7)"
[ "$(job_state "$id")" = FAILED ] || fail "job $id is $(job_state "$id")"
ok "submit --wait: a job that fails exits 1 with the error and exit code"

expect_rc 1 ctl submit --queue nosuch --wait -- true
err_has "REJECTED:"
ok "submit --wait: a rejected job exits 1 with its error"

# ---- a spec musterd's parse refuses: exit 1 at submit with musterd's message, nothing written ---
# Each case once through musterctl (flags, a file, stdin, --dry-run) and once as the same text by
# XADD (the path that bypasses clients): the REJECTED job's error must equal musterctl's message.
printf '{"command":["true"],"colour":"blue"}' >"$T/colour.json"
bypass_same() { # SPEC: XADD SPEC; its REJECTED error must be the message in $T/err
    local bid want
    want=$(sed -n 's/^musterctl: submit: //p' "$T/err")
    [ -n "$want" ] || fail "no 'musterctl: submit:' message: $(cat "$T/err")"
    bid=$(submit_json "$1")
    wait_for "job $bid rejected" 10 job_state_is "$bid" REJECTED
    [ "$(job_field "$bid" error)" = "$want" ] ||
        fail "musterd's error '$(job_field "$bid" error)' is not musterctl's '$want'"
}
n0=$(rcli XLEN "${P}submit")
expect_rc 1 ctl submit --array 5-1 -- true
err_has "musterctl: submit: array: a range ends before it starts in '5-1'"
[ ! -s "$T/out" ] || fail "a refused submit printed '$(cat "$T/out")'"
expect_rc 1 ctl submit --dry-run --array 5-1 -- true
err_has "musterctl: submit: array: a range ends before it starts in '5-1'"
expect_rc 1 ctl submit --idempotency-key bad-array --array 5-1 -- true
err_has "musterctl: submit: array: a range ends before it starts in '5-1'"
[ "$(rcli EXISTS "${P}idem:bad-array")" = 0 ] || fail "a refused idempotent submit claimed its key"
expect_rc 1 ctl submit --singleton -- true
err_has "musterctl: submit: singleton: needs a 'name'"
expect_rc 1 ctl submit "$T/colour.json"
err_has "musterctl: submit: spec: unknown key 'colour'"
expect_rc 1 ctl submit - <"$T/colour.json"
err_has "musterctl: submit: spec: unknown key 'colour'"
[ "$(rcli XLEN "${P}submit")" = "$n0" ] || fail "refused submits wrote $(rcli XLEN "${P}submit") - $n0 entries"
bypass_same '{"command":["true"],"colour":"blue"}'
expect_rc 1 ctl submit --singleton -- true
bypass_same '{"command":["true"],"singleton":true}'
expect_rc 1 ctl submit --array 5-1 -- true
bypass_same '{"command":["true"],"array":"5-1"}'
ok "a reversed --array, --singleton without --name, an unknown key (file, stdin): exit 1 with musterd's own message, nothing written"

printf '{"command":["sleep","30"],"name":"to-cancel"}' >"$T/cancel.json"
"$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" submit --wait "$T/cancel.json" >"$T/cw.out" \
    2>"$T/cw.err" &
cw_pid=$!
_mu_pids+=("$cw_pid")
wait_for "the job to run" 15 '[ -s "$T/cw.out" ] && [ "$(job_state "$(head -1 "$T/cw.out")")" = RUNNING ]'
cid=$(head -1 "$T/cw.out")
ctl cancel "$cid" >/dev/null
rc=0
wait "$cw_pid" || rc=$?
[ "$rc" = 1 ] || fail "submit FILE --wait of a cancelled job exited $rc: $(cat "$T/cw.err")"
grep -q "job $cid CANCELLED" "$T/cw.err" || fail "no CANCELLED line: $(cat "$T/cw.err")"
ok "submit FILE --wait: a cancelled job exits 1"

expect_rc 0 ctl -o json submit --wait -- true
jqo '.state == "SUCCEEDED" and (.id | test("^[0-9]+-[0-9]+$"))'
ok "submit -o json --wait prints the final job record"

# ---- idempotency ---------------------------------------------------------------------------
n0=$(rcli XLEN "${P}submit")
expect_rc 0 ctl submit --idempotency-key step-42 -- true
k1=$(cat "$T/out")
expect_rc 0 ctl submit --idempotency-key step-42 -- true
k2=$(cat "$T/out")
err_has "idempotency key 'step-42' names job $k1 already; nothing submitted"
[ "$k1" = "$k2" ] || fail "same key gave ids $k1 and $k2"
expect_rc 0 ctl -o json submit --idempotency-key step-42 -- false
jqo ".id == \"$k1\" and .created == false"
printf '{"command":["true"],"idempotency_key":"step-42"}' >"$T/idem.json"
expect_rc 0 ctl submit "$T/idem.json"
[ "$(cat "$T/out")" = "$k1" ] || fail "spec-file key gave $(cat "$T/out"), expected $k1"
[ "$(rcli XLEN "${P}submit")" = $((n0 + 1)) ] || fail "the same key made more than one stream entry"
[ "$(rcli GET "${P}idem:step-42")" = "$k1" ] || fail "idem key holds $(rcli GET "${P}idem:step-42")"
wait_for "job $k1 succeeded" 20 job_state_is "$k1" SUCCEEDED
expect_rc 0 ctl -o json jobs --all
jq -e "[.[] | select(.id == \"$k1\")] | length == 1" "$T/out" >/dev/null || fail "job $k1 listed $(jq length "$T/out") times"
expect_rc 0 ctl submit --idempotency-key step-42 --wait -- false
[ "$(head -1 "$T/out")" = "$k1" ] || fail "--wait on a used key did not follow the first job"
ok "idempotency key twice: one job, the same id (flags, spec file, --wait)"

# Eight clients racing on one key: one entry, one id.
for i in 1 2 3 4 5 6 7 8; do
    ctl submit --idempotency-key race -- true >"$T/race.$i" 2>/dev/null &
done
wait_for "8 racing submits" 10 '[ "$(cat "$T"/race.* | wc -l)" = 8 ]'
[ "$(sort -u "$T"/race.* | wc -l)" = 1 ] || fail "racing submits printed different ids: $(cat "$T"/race.*)"
[ "$(rcli XLEN "${P}submit")" = $((n0 + 2)) ] || fail "racing submits made $(($(rcli XLEN "${P}submit") - n0 - 1)) entries"
rid=$(cat "$T/race.1")
wait_for "race job succeeded" 20 job_state_is "$rid" SUCCEEDED
! grep -q DUPLICATE <(rcli XRANGE "${P}events" - +) || fail "musterd saw a duplicate submission"
ok "racing submits with one key make one job"

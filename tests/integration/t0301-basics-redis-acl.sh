#!/usr/bin/env bash
# Redis AUTH and the ACL of docs/security.md, for real: a redis-server with an --aclfile made of
# the ACL block in docs/security.md (the documented users, passwords included) plus a password on
# the default user.  musterd runs as its ACL user; a submitter submits with redis-cli XADD, with
# `musterctl submit` and with libmuster, and reads its jobs; it can NOT XADD muster:control, DEL
# or HSET job keys (NOPERM).  The operator user cancels through musterctl but cannot delete keys.
# Both read task logs through musterd (XADD muster:logreq, BLPOP muster:logreply:*); only the
# operator may ask musterctl why (a control command, answered on muster:why:*); show of a
# pending job gives the submitter the job with the refusal instead of the answer.
# The password-only form (redis://:PASS@host) works for musterctl and libmuster; a wrong password
# is a clear error (exit 1) for musterd and musterctl.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
command -v redis-server >/dev/null 2>&1 || fail "redis-server not found (hint: scripts/deps.sh)"

ADMIN_PW=admin-pw-$$
# The documented ACL, taken from docs/security.md between its acl:begin / acl:end markers.
sed -n '/<!-- acl:begin -->/,/<!-- acl:end -->/p' "$MUSTER_SRC/docs/security.md" | grep '^user ' >"$T/users.acl"
[ "$(grep -c '^user ' "$T/users.acl")" = 4 ] || fail "docs/security.md: expected 4 ACL users, got: $(cat "$T/users.acl")"
echo "user default on >$ADMIN_PW ~* &* +@all" >>"$T/users.acl"

REDIS_PORT=$(free_port)
export REDIS_PORT
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
    --daemonize no --logfile "$T/redis.log" --aclfile "$T/users.acl" >/dev/null 2>&1 &
REDIS_PID=$!
_mu_pids+=("$REDIS_PID")

# rcli, and lib.sh's helpers (job_state, submit_json), as the (password-protected) default user.
# shellcheck disable=SC2034 # read by lib.sh
REDIS_USER=default REDIS_PASS=$ADMIN_PW
# as USER PASS ARGS...: redis-cli as an ACL user.
as() {
    local user=$1 pass=$2
    shift 2
    redis-cli -p "$REDIS_PORT" --user "$user" --pass "$pass" --no-auth-warning "$@"
}
wait_for "redis-server with the ACL on port $REDIS_PORT" 10 '[ "$(rcli ping)" = PONG ]'
[ "$(redis-cli -p "$REDIS_PORT" ping 2>&1)" != PONG ] || fail "redis answers without AUTH"

H=127.0.0.1:$REDIS_PORT
URL_MUSTERD="redis://musterd:musterd-secret@$H"
URL_OPERATOR="redis://operator:operator-secret@$H"
URL_ALICE="redis://alice:alice-secret@$H"
URL_WORKER="redis://worker:worker-secret@$H"
URL_PASSWORD="redis://:$ADMIN_PW@$H"

make_config >/dev/null

# ---- wrong credentials ----------------------------------------------------------------------
rc=0
"$MUSTER_BIN/musterd" --config "$CONFIG" --redis "redis://musterd:wrong@$H" \
    --bind "tcp://127.0.0.1:$(free_port)" >"$T/wrongpass.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "musterd with a wrong password exited $rc, expected 1"
grep -q "AUTH failed" "$T/wrongpass.log" || fail "musterd, wrong password: $(cat "$T/wrongpass.log")"
rc=0
"$MUSTER_BIN/musterctl" --redis "redis://:wrong@$H" jobs >/dev/null 2>"$T/ctl-wrong.err" || rc=$?
[ "$rc" = 1 ] || fail "musterctl with a wrong password exited $rc, expected 1"
grep -q "AUTH failed" "$T/ctl-wrong.err" || fail "musterctl, wrong password: $(cat "$T/ctl-wrong.err")"
rc=0
"$MUSTER_BIN/musterctl" --redis "redis://$H" jobs >/dev/null 2>"$T/ctl-noauth.err" || rc=$?
[ "$rc" = 1 ] || fail "musterctl without a password exited $rc, expected 1"
ok "wrong or missing credentials: musterd and musterctl exit 1 naming the failure"

# ---- musterd as its ACL user ----------------------------------------------------------------
export MUSTER_REDIS_URL=$URL_MUSTERD # start_musterd passes it as --redis
start_musterd "$CONFIG"
start_worker n1 spot-a 8 --redis "$URL_WORKER" # its witness reads the leader key as 'worker'
wait_for "n1 registered" 10 '[ "$(rcli HEXISTS muster:nodes n1)" = 1 ]'
unset MUSTER_REDIS_URL

# ---- the submitter --------------------------------------------------------------------------
id1=$(as alice alice-secret XADD muster:submit '*' spec '{"name":"by-cli","command":["true"]}')
case "$id1" in [0-9]*-[0-9]*) ;; *) fail "submitter XADD muster:submit: $id1" ;; esac
wait_for "job $id1 (redis-cli XADD) succeeded" 30 job_state_is "$id1" SUCCEEDED
id2=$("$MUSTER_BIN/musterctl" --redis "$URL_ALICE" submit --name by-ctl -- sh -c 'exit 0') ||
    fail "musterctl submit as the submitter failed"
wait_for "job $id2 (musterctl submit) succeeded" 30 job_state_is "$id2" SUCCEEDED
id3=$("$MUSTER_BIN/musterctl" --redis "$URL_ALICE" submit -k idem-1 -- true) ||
    fail "musterctl submit --idempotency-key as the submitter failed"
id3b=$("$MUSTER_BIN/musterctl" --redis "$URL_ALICE" submit -k idem-1 -- true) || fail "second idempotent submit"
[ "$id3" = "$id3b" ] || fail "idempotency key gave two ids: $id3 $id3b"
"$MUSTER_BIN/musterctl" --redis "$URL_ALICE" -o json show "$id2" | jq -e '.state == "SUCCEEDED"' >/dev/null ||
    fail "musterctl show as the submitter: $("$MUSTER_BIN/musterctl" --redis "$URL_ALICE" -o json show "$id2" 2>&1)"
"$MUSTER_BIN/musterctl" --redis "$URL_ALICE" -o json jobs --all | jq -e --arg id "$id1" 'map(.id) | index($id) != null' >/dev/null ||
    fail "musterctl jobs as the submitter: $("$MUSTER_BIN/musterctl" --redis "$URL_ALICE" -o json jobs --all 2>&1)"
"$MUSTER_BIN/musterctl" --redis "$URL_ALICE" -o json events --job "$id1" | jq -e 'length > 0' >/dev/null ||
    fail "musterctl events as the submitter"
[ "$(as alice alice-secret HGET "muster:job:$id1" state)" = SUCCEEDED ] || fail "submitter HGET job"
as alice alice-secret ZRANGE muster:jobs 0 -1 | has -x "$id1" || fail "submitter ZRANGE muster:jobs"
as alice alice-secret XRANGE muster:events - + COUNT 1 | has . || fail "submitter XRANGE muster:events"
ok "the submitter submits (redis-cli XADD, musterctl submit, idempotency key) and reads jobs and events"

# What the submitter must not do: each is refused with NOPERM and changes nothing.
nopermit() {
    local out
    out=$(as alice alice-secret "$@" 2>&1) || true
    case "$out" in
    NOPERM*) ;;
    *) fail "submitter '$*' was not refused with NOPERM: $out" ;;
    esac
}
nopermit XADD muster:control '*' cmd cancel arg "$id1"
nopermit DEL "muster:job:$id1"
nopermit DEL muster:submit
nopermit HSET "muster:job:$id1" state CANCELLED
nopermit SET muster:submit x
nopermit XADD "muster:job:$id1" '*' a b
nopermit XGROUP DESTROY muster:submit muster-scheduler
nopermit FLUSHALL
nopermit KEYS '*'
nopermit HGETALL muster:nodes
[ "$(rcli EXISTS "muster:job:$id1")" = 1 ] || fail "job $id1 vanished"
[ "$(rcli HGET "muster:job:$id1" state)" = SUCCEEDED ] || fail "job $id1 changed"
[ "$(rcli XLEN muster:control)" = 0 ] || fail "something reached muster:control"
ok "the submitter gets NOPERM for muster:control, DEL, HSET, SET, FLUSHALL, KEYS"

# ---- libmuster (the example) as the submitter and with a password only --------------------------
incdir=$MUSTER_SRC/lib
libdir=$(cd "$MUSTER_BIN/../lib" 2>/dev/null && pwd) || libdir=
if command -v cc >/dev/null 2>&1 && [ -n "$libdir" ] && [ -e "$libdir/libmuster.so" ]; then
    cc -std=c11 -D_POSIX_C_SOURCE=200809L -I"$incdir" "$MUSTER_SRC/examples/submit_and_wait.c" \
        -L"$libdir" -Wl,-rpath,"$libdir" -lmuster -o "$T/submit_and_wait" 2>"$T/cc.err" ||
        fail "building the libmuster example: $(cat "$T/cc.err")"
    preload=
    if ldd "$libdir/libmuster.so" | has libasan; then
        preload="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)"
    fi
    for url in "$URL_ALICE" "$URL_PASSWORD"; do
        out=$(MUSTER_REDIS_URL=$url env ${preload:+LD_PRELOAD="$preload"} "$T/submit_and_wait" -t 30 -g 1 2>&1) ||
            fail "libmuster example with ${url%%@*}@…: $out"
        grep -q "SUCCEEDED" <<<"$out" || fail "libmuster example with ${url%%@*}@…: $out"
    done
    ok "libmuster submits and waits as the ACL submitter and with a password-only URL"
else
    echo "# skipping libmuster: no cc or no $MUSTER_BIN/../lib/libmuster.so"
fi

# ---- the operator ---------------------------------------------------------------------------
"$MUSTER_BIN/musterctl" --redis "$URL_PASSWORD" -o json nodes | jq -e 'map(.name) == ["n1"]' >/dev/null ||
    fail "musterctl with a password-only URL"
hold=$(as alice alice-secret XADD muster:submit '*' spec '{"command":["sleep","60"]}')
wait_for "job $hold running" 20 job_state_is "$hold" RUNNING
"$MUSTER_BIN/musterctl" --redis "$URL_OPERATOR" -o json nodes | jq -e 'map(.name) == ["n1"]' >/dev/null ||
    fail "musterctl nodes as the operator"
"$MUSTER_BIN/musterctl" --redis "$URL_OPERATOR" -o json status | jq -e '.leading and .epoch >= 1' >/dev/null ||
    fail "musterctl status as the operator"
rc=0
"$MUSTER_BIN/musterctl" --redis "$URL_ALICE" cancel "$hold" >/dev/null 2>"$T/alice-cancel.err" || rc=$?
[ "$rc" = 1 ] || fail "musterctl cancel as the submitter exited $rc, expected 1"
grep -q NOPERM "$T/alice-cancel.err" || fail "musterctl cancel as the submitter: $(cat "$T/alice-cancel.err")"
sleep 0.5
job_state_is "$hold" RUNNING || fail "job $hold is $(job_state "$hold") after the submitter's cancel"
"$MUSTER_BIN/musterctl" --redis "$URL_OPERATOR" cancel "$hold" >/dev/null 2>"$T/op-cancel.err" ||
    fail "musterctl cancel as the operator: $(cat "$T/op-cancel.err")"
wait_for "job $hold cancelled by the operator" 20 job_state_is "$hold" CANCELLED
out=$(as operator operator-secret DEL "muster:job:$hold" 2>&1) || true
case "$out" in NOPERM*) ;; *) fail "operator DEL was not refused: $out" ;; esac
out=$(as operator operator-secret HSET "muster:job:$hold" state RUNNING 2>&1) || true
case "$out" in NOPERM*) ;; *) fail "operator HSET was not refused: $out" ;; esac
ok "musterctl cancel: NOPERM and exit 1 as the submitter; works as the operator, who cannot DEL or HSET"

# ---- task logs through musterd, for both users (issue #18) ------------------------------------
lid=$("$MUSTER_BIN/musterctl" --redis "$URL_ALICE" submit --name logs -- sh -c 'echo hello-from-acl') ||
    fail "musterctl submit as the submitter (logs)"
wait_for "job $lid succeeded" 30 job_state_is "$lid" SUCCEEDED
for url in "$URL_ALICE" "$URL_OPERATOR"; do
    out=$("$MUSTER_BIN/musterctl" --redis "$url" logs "$lid" 2>&1) || fail "musterctl logs as ${url%%@*}@…: $out"
    [ "$out" = hello-from-acl ] || fail "musterctl logs as ${url%%@*}@…: $out"
done
out=$(as alice alice-secret RPUSH "muster:logreply:$lid" forged 2>&1) || true
case "$out" in NOPERM*) ;; *) fail "submitter RPUSH of a log answer was not refused: $out" ;; esac
ok "musterctl logs works as the submitter and the operator, who cannot forge an answer"

# ---- musterctl why: an operator's question (control stream), issue #18 --------------------------
wid=$(as alice alice-secret XADD muster:submit '*' spec '{"tasks":2,"gpus_per_task":8,"command":["true"]}')
wait_for "job $wid pending" 20 job_state_is "$wid" PENDING
"$MUSTER_BIN/musterctl" --redis "$URL_OPERATOR" -o json why "$wid" >"$T/why.json" 2>"$T/why.err" ||
    fail "musterctl why as the operator: $(cat "$T/why.err")"
jq -e '.state == "PENDING" and (.capacity | length) == 2' "$T/why.json" >/dev/null ||
    fail "musterctl why as the operator: $(cat "$T/why.json")"
rc=0
"$MUSTER_BIN/musterctl" --redis "$URL_ALICE" why "$wid" >/dev/null 2>"$T/why.err" || rc=$?
[ "$rc" = 1 ] && grep -q NOPERM "$T/why.err" || fail "musterctl why as the submitter: exit $rc, $(cat "$T/why.err")"
# show of the pending job: the operator gets musterd's answer in it; the submitter the job, and
# the refusal instead of the answer (exit 0).
# (show waits only a few seconds for musterd: a busy machine retries.)
wait_for "show as the operator carries why" 60 \
    '"$MUSTER_BIN/musterctl" --redis "$URL_OPERATOR" -o json show "$wid" | jq -e ".why.state == \"PENDING\""'
"$MUSTER_BIN/musterctl" --redis "$URL_ALICE" -o json show "$wid" >"$T/show.json" 2>"$T/show.err" ||
    fail "musterctl show as the submitter: $(cat "$T/show.err")"
jq -e '.state == "PENDING" and (.why_error | test("NOPERM")) and .why == null' "$T/show.json" >/dev/null ||
    fail "musterctl show as the submitter: $(cat "$T/show.json")"
"$MUSTER_BIN/musterctl" --redis "$URL_OPERATOR" cancel "$wid" >/dev/null || fail "cancel $wid"
ok "musterctl why (and show's why) works as the operator; the submitter gets NOPERM"

# musterd itself never hit a NOPERM with its ACL user.
! grep -q NOPERM "$T/musterd.log" || fail "musterd hit NOPERM: $(grep NOPERM "$T/musterd.log" | head -n 3)"
ok "musterd ran every job as its ACL user without a NOPERM"

# ---- the worker's witness: one key, read-only (issue #40) -------------------------------------
[ -n "$(as worker worker-secret GET muster:leader)" ] || fail "the worker user cannot read muster:leader"
[ "$(as worker worker-secret ROLE | head -1)" = master ] || fail "the worker user cannot ask ROLE"
for cmd in "HGETALL muster:nodes" "GET muster:epoch" "SET muster:leader x" "DEL muster:leader"; do
    # shellcheck disable=SC2086 # the command's words
    out=$(as worker worker-secret $cmd 2>&1) || true
    case "$out" in NOPERM*) ;; *) fail "the worker user's $cmd was not refused: $out" ;; esac
done
long=$(submit_json '{"tasks":1,"gpus_per_task":1,"command":["sleep","300"]}')
wait_for "a task running on n1" 20 job_state_is "$long" RUNNING
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
wait_for "n1's witness reads the free key as the worker user" 30 'grep -q "no scheduler leads" "$T/worker-n1.log"'
! grep -q "NOPERM" "$T/worker-n1.log" || fail "the worker hit NOPERM: $(grep NOPERM "$T/worker-n1.log" | head -n 3)"
ok "the worker user reads muster:leader and ROLE, nothing else; the witness works with it"

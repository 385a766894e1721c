#!/usr/bin/env bash
# Proven identity and the access rules (issue #46, docs/security.md §3), for real: a redis-server
# loaded with the proven-identity ACL of docs/security.md (its users renamed to throwaway Unix
# users), musterd with "access": {"identity": "redis-acl"} and rules, a root worker that runs
# tasks as the job's user.  A user cannot submit as another (by spec, or by writing their stream:
# NOPERM), to a queue or priority the rules refuse, or non-preemptible; a service submits only
# for whom it may; users cancel their own jobs and not others' (exit 1, the rule named);
# operators cancel anyone's; the running-GPU and pending-job caps hold, and a reload changes
# them.  Every refusal names its rule.  Needs root to create the users: skipped otherwise.
if [ "$(id -u)" != 0 ] || ! command -v useradd >/dev/null 2>&1; then
    echo "ok t0302-access-identity # skip: needs root and useradd"
    exit 0
fi
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || fail "jq not found"

A=mua$$ # "alice"
B=mub$$ # "bob"
for u in "$A" "$B"; do
    useradd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$u" || fail "useradd $u"
    at_exit "userdel $u >/dev/null 2>&1"
done
chmod 755 "$T" # the tasks' default workdir is under the worker's state dir in $T

ADMIN_PW=admin-pw-$$
sed -n '/<!-- acl-proven:begin -->/,/<!-- acl-proven:end -->/p' "$MUSTER_SRC/docs/security.md" |
    grep '^user ' | sed -e "s/alice/$A/g" -e "s/bob/$B/g" >"$T/users.acl"
[ "$(grep -c '^user ' "$T/users.acl")" = 6 ] || fail "docs/security.md: expected 6 ACL users: $(cat "$T/users.acl")"
# carol: a Redis user the rules do not know.
acl=$(grep "^user $A " "$T/users.acl")
sed -e "s/$A/carol/g" <<<"$acl" >>"$T/users.acl"
echo "user default on >$ADMIN_PW ~* &* +@all" >>"$T/users.acl"

REDIS_PORT=$(free_port)
export REDIS_PORT
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
    --daemonize no --logfile "$T/redis.log" --aclfile "$T/users.acl" >/dev/null 2>&1 &
_mu_pids+=("$!")
# shellcheck disable=SC2034 # read by lib.sh
REDIS_USER=default REDIS_PASS=$ADMIN_PW
wait_for "redis-server with the ACL" 10 '[ "$(rcli ping)" = PONG ]'
H=127.0.0.1:$REDIS_PORT
as() { # as USER ARGS...: redis-cli as that ACL user
    local u=$1
    shift
    redis-cli -p "$REDIS_PORT" --user "$u" --pass "$(pw "$u")" --no-auth-warning "$@"
}
pw() { echo "$1-secret"; } # the documented passwords, renamed with their users
ctl_as() { # ctl_as USER ARGS...: musterctl as that ACL user
    local u=$1
    shift
    "$MUSTER_BIN/musterctl" --redis "redis://$u:$(pw "$u")@$H" "$@"
}
export MUSTER_REDIS_URL="redis://musterd:musterd-secret@$H"

rules() { # rules B_CAP: the config, with bob's running-GPU cap
    make_config --with '{
  "queues": [{"name": "default"}, {"name": "prod"}],
  "access": {
    "identity": "redis-acl",
    "operators": ["ops"],
    "defaults": {"max_priority": 5},
    "groups": {"team": {"members": ["'"$A"'", "'"$B"'"], "queues": ["default"],
                        "max_priority": 10, "max_running_gpus": '"$1"', "max_pending_jobs": 2}},
    "users": {"'"$A"'": {"max_priority": 100}, "pipeline": {"submit_for": ["'"$A"'"]}}
  }
}' >/dev/null
}
rules 8
"$MUSTER_BIN/musterd" --config "$CONFIG" --check-config | has "identity redis-acl, 4 known user(s)" ||
    fail "check-config: $("$MUSTER_BIN/musterd" --config "$CONFIG" --check-config 2>&1)"
start_musterd "$CONFIG"
MUSTER_ALLOW_ROOT=0 start_worker n1 spot-a 8 --allow-user "$A" --allow-user "$B"
MUSTER_ALLOW_ROOT=0 start_worker n2 od-a 8 --allow-user "$A" --allow-user "$B"
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
wait_for "the users' streams" 10 '[ "$(rcli EXISTS muster:submit:'"$A"')" = 1 ]'

submit_as() { # submit_as USER JSON: XADD to the user's own stream, prints the id
    local id
    id=$(as "$1" XADD "muster:submit:$1" '*' spec "$2")
    case "$id" in [0-9]*-[0-9]*) echo "$id" ;; *) fail "$1: XADD muster:submit:$1: $id" ;; esac
}
out_of() { cat "$T/w/$2/logs/$1.1.0.out" 2>/dev/null; } # job node: task 0's stdout

# ---- identity ----------------------------------------------------------------------------------
id=$(submit_as "$A" '{"capacity":["spot"],"max_retries":0,"command":["sh","-c","id -un"]}')
wait_for "$A's job succeeded" 20 job_state_is "$id" SUCCEEDED
[ "$(out_of "$id" n1)" = "$A" ] || fail "the task ran as '$(out_of "$id" n1)', not $A"
[ "$(job_field "$id" user)" = "$A" ] && [ "$(job_field "$id" submitted_by)" = "$A" ] ||
    fail "job user '$(job_field "$id" user)' submitted_by '$(job_field "$id" submitted_by)'"
ok "a spec without a user belongs to its writer, $A, and its task ran as $A"

id=$(submit_as "$A" '{"user":"'"$B"'","command":["sh","-c","id -un"]}')
expect_job_rejected "$id" "access.identity"
expect_job_field "$id" error "'$B' is not you ($A)"
out=$(as "$A" XADD "muster:submit:$B" '*' spec '{"command":["true"]}' 2>&1) || true
case "$out" in NOPERM*) ;; *) fail "$A XADD muster:submit:$B was not refused: $out" ;; esac
out=$(as "$A" XADD muster:submit '*' spec '{"command":["true"]}' 2>&1) || true
case "$out" in NOPERM*) ;; *) fail "$A XADD muster:submit was not refused: $out" ;; esac
id=$(rcli XADD muster:submit '*' spec '{"user":"'"$B"'","command":["true"]}')
expect_job_rejected "$id" "submit as your own Redis user"
ok "no spec, stream or shared stream makes $A's job run as $B (REJECTED naming access.identity, or NOPERM)"

# musterctl as the user: its own stream, the user is the Redis user (not \$USER).
id=$(ctl_as "$A" submit -- sh -c 'id -un') || fail "musterctl submit as $A"
wait_for "musterctl's job succeeded" 20 job_state_is "$id" SUCCEEDED
[ "$(job_field "$id" user)" = "$A" ] || fail "musterctl's job belongs to '$(job_field "$id" user)'"
rc=0
ctl_as carol submit -- true >"$T/carol.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && has NOPERM <"$T/carol.out" || fail "carol (not in the rules) submitted: rc $rc, $(cat "$T/carol.out")"
ok "musterctl submits on the user's own stream; a Redis user the rules do not know cannot submit (exit 1)"

# ---- the rules ---------------------------------------------------------------------------------
id=$(submit_as "$A" '{"queue":"prod","command":["true"]}')
expect_job_rejected "$id" "access.groups.team.queues"
id=$(submit_as "$A" '{"priority":500,"command":["true"]}')
expect_job_rejected "$id" "access.users.$A.max_priority"
id=$(submit_as "$B" '{"priority":50,"command":["true"]}')
expect_job_rejected "$id" "access.groups.team.max_priority"
id=$(submit_as "$A" '{"priority":100,"capacity":["spot"],"command":["true"]}')
wait_for "$A's priority-100 job succeeded" 20 job_state_is "$id" SUCCEEDED
id=$(submit_as "$A" '{"preemptible":false,"command":["true"]}')
expect_job_rejected "$id" "non_preemptible"
id=$(submit_as ops '{"priority":6,"command":["true"]}') # ops: in no group, "defaults" rule
expect_job_rejected "$id" "access.defaults.max_priority"
ok "queue, priority (a user's, a group's, the defaults') and non-preemptible rules refuse with the rule's path"

id=$(submit_as pipeline '{"user":"'"$A"'","capacity":["spot"],"max_retries":0,"command":["sh","-c","id -un"]}')
wait_for "pipeline's job for $A succeeded" 20 job_state_is "$id" SUCCEEDED
[ "$(out_of "$id" n1)" = "$A" ] && [ "$(job_field "$id" submitted_by)" = pipeline ] ||
    fail "pipeline's job ran as '$(out_of "$id" n1)', submitted_by '$(job_field "$id" submitted_by)'"
id=$(submit_as pipeline '{"user":"'"$B"'","command":["true"]}')
expect_job_rejected "$id" "access.users.pipeline.submit_for"
ok "the service submits for $A (runs as $A) and not for $B"

# ---- control: own jobs, not others' -----------------------------------------------------------
bj=$(submit_as "$B" '{"capacity":["spot"],"gpus_per_task":8,"command":["sleep","300"]}')
wait_for "$B's job running" 20 job_state_is "$bj" RUNNING
rc=0
ctl_as "$A" cancel "$bj" >"$T/cancel.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && has "access.operators" <"$T/cancel.out" ||
    fail "$A cancelled $B's job: rc $rc, $(cat "$T/cancel.out")"
job_state_is "$bj" RUNNING || fail "$B's job is $(job_state "$bj") after $A's refused cancel"
rc=0
ctl_as "$A" reload >"$T/reload.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && has "access.operators" <"$T/reload.out" || fail "$A reloaded: rc $rc, $(cat "$T/reload.out")"
ok "$A cannot cancel $B's job or reload: exit 1, naming access.operators"

# ---- caps: running GPUs wait, pending jobs are refused ----------------------------------------
b2=$(submit_as "$B" '{"capacity":["on-demand"],"command":["sleep","300"]}')
wait_for "$B's second job waits for the cap" 20 \
    'job_field "'"$b2"'" reason | grep -qF "runs 8 of their 8 GPUs; this job needs 1"'
expect_job_field "$b2" reason "access.groups.team.max_running_gpus"
b3=$(submit_as "$B" '{"capacity":["on-demand"],"command":["true"]}')
wait_for "$B's third job pending" 10 job_state_is "$b3" PENDING
b4=$(submit_as "$B" '{"command":["true"]}')
expect_job_rejected "$b4" "access.groups.team.max_pending_jobs"
ok "max_running_gpus holds $B's job back with the rule; max_pending_jobs refuses the third waiting job"

rules 16
ctl_as ops reload >"$T/reload-ops.out" 2>&1 || fail "ops reload: $(cat "$T/reload-ops.out")"
wait_for "$B's second job starts under the new cap" 20 job_state_is "$b2" RUNNING
ok "a reload raises the cap and the waiting job starts"

ctl_as "$B" cancel "$b2" >/dev/null || fail "$B could not cancel own job"
wait_for "$B's job cancelled by $B" 20 job_state_is "$b2" CANCELLED
ctl_as ops cancel "$bj" >/dev/null || fail "ops could not cancel $B's job"
wait_for "$B's job cancelled by ops" 20 job_state_is "$bj" CANCELLED
ok "$B cancels his own job; the operator cancels anyone's"

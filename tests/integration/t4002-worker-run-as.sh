#!/usr/bin/env bash
# Who tasks run as (issue #5): a root worker with --run-as USER starts tasks with that user's
# uid, gid and groups, and HOME, USER and LOGNAME set; a root worker without --run-as refuses to run tasks as root unless
# --allow-root; and the flags that need root are usage errors for anyone else.  Needs root to
# create a throwaway user: skipped otherwise.
if [ "$(id -u)" != 0 ] || ! command -v useradd >/dev/null 2>&1; then
    echo "ok t4002-worker-run-as # skip: needs root and useradd"
    exit 0
fi
source "$(dirname "$0")/lib.sh"

user=mut4002-$$
group=mut4002g-$$ # a supplementary group: the worker looks it up, the shim sets it
groupadd "$group" || fail "groupadd $group failed"
at_exit 'groupdel "$group" >/dev/null 2>&1'
useradd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin -G "$group" "$user" \
    || fail "useradd $user failed"
at_exit 'userdel "$user" >/dev/null 2>&1'
uid=$(id -u "$user")
gid=$(id -g "$user")
groups=$(id -G "$user")
chmod 755 "$T" # the default workdir is the state dir under $T: the user must reach it

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
# n1 (spot) runs tasks as the user; n2 (on-demand) is root without --run-as.
MUSTER_ALLOW_ROOT=0 start_worker n1 spot-a 8 --run-as "$user"
MUSTER_ALLOW_ROOT=0 start_worker n2 od-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

log_of() { # job -> its task 0 stdout on node $2
    cat "$T/w/$2/logs/$1.1.0.out" 2>/dev/null
}

id=$(submit_json '{"capacity":["spot"],"max_retries":0,"command":"echo $(id -u) $(id -g) $HOME $USER $LOGNAME; id -G"}')
wait_for "job $id succeeded" 15 job_state_is "$id" SUCCEEDED
[ "$(log_of "$id" n1)" = "$uid $gid /nonexistent $user $user
$groups" ] || fail "task saw '$(log_of "$id" n1)', want '$uid $gid /nonexistent $user $user' and '$groups'"
ok "--run-as $user: the task ran as uid $uid gid $gid, groups $groups, with HOME, USER and LOGNAME set"

# The refusal is the node's doing (issue #10 item 5): it does not count against the job's
# max_retries, the job is requeued, and after three attempts refused in a row musterd cordons
# the node with the reason, so the job waits instead of failing.
id=$(submit_json '{"capacity":["on-demand"],"max_retries":0,"command":"id -u"}')
wait_for "n2 cordoned by musterd" 20 \
    'ctl -o json nodes | jq -e '"'"'.[] | select(.name == "n2") | .state == "cordoned"'"'"' >/dev/null'
ctl -o json nodes | jq -r '.[] | select(.name == "n2") | .reason' |
    has "cordoned by musterd: it refused 3 attempts in a row: refusing to run a task as root on node n2" ||
    fail "n2's reason: $(ctl -o json nodes | jq -c '.[] | select(.name == "n2")')"
ctl nodes | has -E '^n2 .*cordoned by musterd' || fail "musterctl nodes shows no reason: $(ctl nodes)"
wait_for "the job waits for on-demand capacity" 10 'rcli HGET "muster:job:'"$id"'" reason | grep -q "no ready on-demand node"'
[ "$(job_state "$id")" = PENDING ] || fail "job is $(job_state "$id")"
f=$(rcli HGET "muster:job:$id" failures)
[ "${f:-0}" = 0 ] || fail "the node's refusals counted as $f failure(s) of the job"
rcli XRANGE muster:events - + | has "refusing to run a task as root on node n2" || fail "no event names the refusal"
[ ! -e "$T/w/n2/logs/$id.1.0.out" ] || fail "the refused task ran: $(log_of "$id" n2)"
ok "a root worker without --run-as refused the task; not a job failure, and musterd cordoned n2 with the reason"
ctl cancel "$id" >/dev/null

# The job's user (--allow-user) travels in the BIND's job_user field: tests/unit/test_wrk.c
# drives it through a fake scheduler.

# Not root: the flags are usage errors (exit 2), before anything starts.
rc=0
out=$(runuser -u "$user" -- "$MUSTER_BIN/muster-worker" --scheduler tcp://127.0.0.1:1 --node x \
    --pool spot-a --gpus 1 --state-dir /tmp/none --run-as root 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "non-root --run-as exited $rc: $out"
echo "$out" | has "needs a worker running as root" || fail "message: $out"
ok "a worker that is not root rejects --run-as with a usage error"

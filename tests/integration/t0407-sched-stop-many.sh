#!/usr/bin/env bash
# musterd stops on SIGTERM whatever the number of jobs it holds (issue #15): with 20,000 stored
# active jobs, SIGTERM right after it starts listening (during recovery on most machines, after
# it on a fast one) ends it with status 0, and what it leaves in Redis is consistent: every job
# still active, a gang it requeued written PENDING as attempt 2, one it did not reach left as it
# was.  A second start takes every job back, requeues the rest exactly once, and a SIGTERM then
# (a pass over 20,000 pending jobs behind it) stops it too.  How fast it stops is
# bench/e2e.sh recover's business; no time is asserted here.
source "$(dirname "$0")/lib.sh"

jobs=20000
start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 5
}
JSON

# The jobs as musterd stores them: every tenth RUNNING with no placement (requeued on recovery).
rcli EVAL "for i=1,$jobs do local id=tostring(1700000000000+i)..'-0'
local st='PENDING' if i % 10 == 0 then st='RUNNING' end
redis.call('HSET','muster:job:'..id,'id',id,'state',st,'attempt','1','spec',ARGV[1],
  'submitted_at',tostring(1700000000000+i))
redis.call('ZADD','muster:jobs',1700000000000+i,id) redis.call('SADD','muster:active',id) end
return 1" 0 '{"name":"stored","tasks":64,"gpus_per_task":8,"command":["true"]}' >/dev/null

# counts: "<active> <pending attempt 1> <pending attempt 2> <running attempt 1> <other>"
counts() {
    rcli --raw EVAL "local a,p1,p2,r1,o=0,0,0,0,0
for _,id in ipairs(redis.call('SMEMBERS','muster:active')) do a=a+1
local h=redis.call('HMGET','muster:job:'..id,'state','attempt')
local k=h[1]..h[2]
if k=='PENDING1' then p1=p1+1 elseif k=='PENDING2' then p2=p2+1
elseif k=='RUNNING1' then r1=r1+1 else o=o+1 end end
return a..' '..p1..' '..p2..' '..r1..' '..o" 0
}

# stop_now: SIGTERM to musterd, then waits (no deadline of its own) until it exits; its status
# in $rc.  Not stop_musterd: that one sends SIGKILL after 3 s.
stop_now() {
    rc=0
    kill -TERM "$MUSTERD_PID"
    wait "$MUSTERD_PID" || rc=$?
}

# ---- 1: SIGTERM as soon as it listens ----
start_musterd "$CONFIG"
stop_now
[ "$rc" = 0 ] || fail "musterd exited $rc after SIGTERM during recovery, expected 0"
has 'musterd stopping' "$T/musterd.log" || fail "musterd did not log its stop"
if has 'stop asked during recovery' "$T/musterd.log"; then
    echo "# stopped during recovery"
else
    echo "# stopped after recovery"
fi
read -r active p1 p2 r1 other <<<"$(counts)"
[ "$active" = "$jobs" ] || fail "$active jobs active after the stop, expected $jobs"
[ "$other" = 0 ] || fail "$other jobs in an unexpected state or attempt after the stop"
[ "$p1" = $((jobs - jobs / 10)) ] || fail "$p1 pending jobs at attempt 1, expected $((jobs - jobs / 10))"
[ $((p2 + r1)) = $((jobs / 10)) ] || fail "requeued $p2 + not reached $r1 != $((jobs / 10))"
ok "SIGTERM during recovery of $jobs jobs: exit 0, $p2 requeued, $r1 left as stored"

# ---- 2: a full recovery, then SIGTERM ----
: >"$T/musterd.log"
start_musterd "$CONFIG"
wait_for "recovery logged" 300 'has "recovered $jobs active job" "$T/musterd.log"'
has "$((jobs / 10 - p2)) requeued" "$T/musterd.log" ||
    fail "expected $((jobs / 10 - p2)) requeued: $(grep recovered "$T/musterd.log")"
stop_now
[ "$rc" = 0 ] || fail "musterd exited $rc after SIGTERM holding $jobs jobs, expected 0"
read -r active p1 p2 r1 other <<<"$(counts)"
[ "$active $p1 $p2 $r1 $other" = "$jobs $((jobs - jobs / 10)) $((jobs / 10)) 0 0" ] ||
    fail "after the second run: active/pending1/pending2/running1/other = $active $p1 $p2 $r1 $other"
ok "recovery completed the requeue exactly once; SIGTERM with $jobs jobs held: exit 0"

#!/usr/bin/env bash
# musterd --metrics serves Prometheus text: every sample has HELP and TYPE, labels are escaped,
# the counters follow the jobs, pending GPUs show per queue and pool, and counters never go
# backwards across a restart of the endpoint.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
MPORT=$(free_port)
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

scrape() { curl -sf "http://127.0.0.1:$MPORT/metrics"; }
value() { # NAME-WITH-LABELS
    scrape | awk -v k="$1" '$1 == k { print $2 }'
}
check_format() {
    python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
helps, types, names = set(), {}, set()
sample = re.compile(r'^(muster_[a-z_]+)(\{([a-z_]+="([^"\\]|\\.)*")(,[a-z_]+="([^"\\]|\\.)*")*\})? (-?[0-9.e+-]+|\+Inf)$')
for line in text.splitlines():
    if line.startswith('# HELP '):
        if len(line.split()) < 4 or '(null)' in line:
            sys.exit('no help text: %r' % line)
        helps.add(line.split()[2]); continue
    if line.startswith('# TYPE '):
        _, _, n, t = line.split(); types[n] = t; continue
    m = sample.match(line)
    if not m:
        sys.exit('bad line: %r' % line)
    n = m.group(1)
    base = re.sub(r'_(bucket|sum|count)$', '', n) if n not in types else n
    if base not in types or base not in helps:
        sys.exit('no HELP/TYPE for %s' % n)
    names.add(n)
print(len(names), 'metric names ok')
PY
}

scrape >"$T/m1.txt" || fail "no /metrics on 127.0.0.1:$MPORT"
check_format "$T/m1.txt" || fail "malformed exposition: $(head -40 "$T/m1.txt")"
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/nope" | has 404 || fail "unknown path not 404"
ok "exposition format: HELP, TYPE and samples parse"

id=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "job $id succeeded" 10 job_state_is "$id" SUCCEEDED
big=$(submit_json '{"tasks":2,"gpus_per_task":8,"queue":"default","capacity":["spot"],"command":["true"]}')
wait_for "job $big pending" 10 job_state_is "$big" PENDING
bad=$(submit_json '{"command":[]}')
wait_for "job $bad rejected" 10 job_state_is "$bad" REJECTED
wait_for "succeeded counter" 5 '[ "$(value muster_jobs_succeeded_total)" = 1 ]'
[ "$(value muster_jobs_submitted_total)" = 2 ] || fail "submitted $(value muster_jobs_submitted_total)"
[ "$(value muster_jobs_rejected_total)" = 1 ] || fail "rejected $(value muster_jobs_rejected_total)"
[ "$(value 'muster_pending_gpus{queue="default",pool="spot-a"}')" = 16 ] || fail "pending gpus: $(scrape | grep pending_gpus)"
[ "$(value 'muster_jobs{queue="default",state="PENDING"}')" = 1 ] || fail "jobs gauge: $(scrape | grep '^muster_jobs{')"
[ "$(value 'muster_gpus{pool="spot-a",state="free"}')" = 8 ] || fail "free gpus: $(scrape | grep '^muster_gpus')"
[ "$(value muster_placement_latency_seconds_count)" = 1 ] || fail "placement histogram: $(scrape | grep placement)"
[ "$(value muster_scheduling_passes)" -ge 1 ] || fail "passes: $(scrape | grep scheduling_pass)"
ok "counters and gauges follow the jobs"

scrape >"$T/before.txt"
stop_musterd
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
wait_for "metrics back" 10 'scrape >/dev/null'
scrape >"$T/after.txt"
python3 - "$T/before.txt" "$T/after.txt" <<'PY' || fail "a counter went backwards across the restart"
import sys
def counters(path):
    types, vals = {}, {}
    for line in open(path):
        if line.startswith('# TYPE '):
            _, _, n, t = line.split(); types[n] = t
        elif not line.startswith('#'):
            k, v = line.rsplit(' ', 1); vals[k] = float(v)
    return {k: v for k, v in vals.items()
            if types.get(k.split('{')[0]) == 'counter' or k.split('{')[0].endswith(('_bucket', '_count', '_sum'))}
b, a = counters(sys.argv[1]), counters(sys.argv[2])
bad = [k for k in b if a.get(k, 0) < b[k]]
if bad:
    sys.exit('backwards: %s' % bad)
print(len(b), 'counters checked')
PY
ok "no counter went backwards across a restart"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# muster-sim as a user runs it (issue #13, docs/simulator.md): --help and usage errors, both
# public layouts from files (rows it cannot use reported with line and column), every policy
# in check mode with spot interruptions through --json, gen seeded, plots without gnuplot
# still writing their data and saying so, and a spot availability trace.  No Redis, no daemons.
source "$(dirname "$0")/lib.sh"

sim=$MUSTER_BIN/muster-sim
cfg=$MUSTER_SRC/bench/sim-cluster.json
data=$MUSTER_SRC/tests/data/sim

"$sim" --help | grep -q '^usage: muster-sim --config FILE' || fail "--help"
"$sim" gen --help | grep -q '^usage: muster-sim gen' || fail "gen --help"
rc=0
"$sim" --config "$cfg" 2>"$T/usage.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'required' "$T/usage.err" || fail "missing --trace: exit $rc"
rc=0
"$sim" --config "$cfg" --nodes nope=3 --trace "$data/philly.csv" 2>"$T/pool.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "pool 'nope' is not in the config" "$T/pool.err" || fail "bad pool: $rc"
printf 'a,b\n1,2\n' >"$T/bad.csv"
rc=0
"$sim" --config "$cfg" --nodes p5-spot=4 --trace "$T/bad.csv" 2>"$T/bad.err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "bad.csv: line 1: not a trace header" "$T/bad.err" || fail "bad trace: $rc"
ok "help and errors"

run() { # FILE: every policy, checked, spot notices on
    "$sim" --config "$cfg" --nodes p5-spot=4,p5-od=2 --trace "$1" --spot-rate 0.5 --check \
        --json 2>"$T/run.err"
}
run "$data/philly.csv" >"$T/philly.json" || fail "philly replay: $(cat "$T/run.err")"
jq -e '.trace.format == "philly" and .trace.rows == 8 and .trace.jobs == 6
    and .trace.rounded_up == 1 and ([.trace.skipped[].rows] | add) == 2
    and (.policies | length) == 4
    and all(.policies[]; .completed + .timed_out == .jobs and .unfinished == 0)' \
    "$T/philly.json" >/dev/null || fail "philly: $(cat "$T/philly.json")"
grep -q "line 4, column 'duration'" "$T/run.err" || fail "philly skip report: $(cat "$T/run.err")"
run "$data/alibaba.csv" >"$T/alibaba.json" || fail "alibaba replay: $(cat "$T/run.err")"
jq -e '.trace.format == "alibaba" and .trace.jobs == 4 and .trace.rounded_up == 1
    and all(.policies[]; .completed + .timed_out == .jobs)' "$T/alibaba.json" >/dev/null ||
    fail "alibaba: $(cat "$T/alibaba.json")"
grep -q "column 'num_gpu': 0 GPUs" "$T/run.err" || fail "alibaba skip report: $(cat "$T/run.err")"
ok "philly and alibaba layouts replayed under every policy"

"$sim" gen --jobs 300 --seed 9 --max-nodes 4 >"$T/g1.csv"
"$sim" gen --jobs 300 --seed 9 --max-nodes 4 >"$T/g2.csv"
cmp -s "$T/g1.csv" "$T/g2.csv" || fail "gen is not deterministic for a seed"
"$sim" --config "$cfg" --nodes p5-spot=12,p5-od=4 --trace "$T/g1.csv" --spot-rate 0.2 \
    --check --plot-dir "$T/plots" --jobs-out "$T/jobs.csv" >"$T/table.txt" 2>"$T/plot.err" || fail "gen replay: $(cat "$T/plot.err")"
grep -q '^JCT p99' "$T/table.txt" || fail "table: $(cat "$T/table.txt")"
# one row per job and policy, each ended, started no sooner than submitted
awk -F, 'NR > 1 { n++; if ($6 != "completed" && $6 != "timed_out") bad++;
    if ($4 < $3 || $5 < $4) bad++ } END { exit !(n == 4 * 300 && bad == 0) }' "$T/jobs.csv" ||
    fail "jobs.csv: $(head -5 "$T/jobs.csv")"
for f in jct.dat timeline.dat plots.gp; do
    [ -s "$T/plots/$f" ] || fail "plots: $f missing"
done
if command -v gnuplot >/dev/null; then
    [ -s "$T/plots/jct_cdf.svg" ] || fail "gnuplot ran but drew no jct_cdf.svg"
else
    grep -q 'gnuplot not found' "$T/plot.err" || fail "no note without gnuplot: $(cat "$T/plot.err")"
fi
ok "gen seeded, table and plots"

# A spot availability trace instead of the Poisson model: 8 of 12 spot nodes go at 2 h and come
# back at 6 h, the same notices under every policy; --spot-rate with it is a usage error.
printf 't_s,pool,nodes\n7200,p5-spot,4\n21600,p5-spot,12\n' >"$T/avail.csv"
"$sim" --config "$cfg" --nodes p5-spot=12,p5-od=4 --trace "$T/g1.csv" --spot-trace "$T/avail.csv" \
    --check --json >"$T/avail.json" 2>"$T/avail.err" || fail "spot trace replay: $(cat "$T/avail.err")"
jq -e 'all(.policies[]; .spot_notices == 8 and .completed + .timed_out == .jobs)' \
    "$T/avail.json" >/dev/null || fail "spot trace: $(cat "$T/avail.json")"
rc=0
"$sim" --config "$cfg" --nodes p5-spot=12 --trace "$T/g1.csv" --spot-trace "$T/avail.csv" \
    --spot-rate 1 2>"$T/both.err" >/dev/null || rc=$?
[ "$rc" -eq 2 ] && grep -q 'one or the other' "$T/both.err" || fail "--spot-rate with --spot-trace: $rc"
printf 't_s,pool,nodes\n10,p5-od,1\n' >"$T/od.csv"
rc=0
"$sim" --config "$cfg" --nodes p5-spot=12,p5-od=4 --trace "$T/g1.csv" --spot-trace "$T/od.csv" \
    2>"$T/od.err" >/dev/null || rc=$?
[ "$rc" -eq 1 ] && grep -q "od.csv: line 2, column 'pool': pool 'p5-od' is not a spot pool" "$T/od.err" ||
    fail "on-demand pool in a spot trace: $rc $(cat "$T/od.err")"
ok "spot availability trace"

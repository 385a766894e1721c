#!/bin/sh
# The task of the preemption and spot benchmarks: records when it started (ns) and when its
# checkpoint signal arrived, then takes CKPT_S seconds to "write" a checkpoint, reports it the
# muster way and exits.   tasks_ckpt.sh OUTDIR CKPT_S
out=$1
ckpt_s=$2
date +%s%N >"$out/start.$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK"
on_signal() {
    date +%s%N >"$out/signal.$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK"
    sleep "$ckpt_s"
    : >"$out/ckpt.$MUSTER_JOB_ID.$RANK" # the worker reports only a checkpoint that exists
    echo "$out/ckpt.$MUSTER_JOB_ID.$RANK" >"$MUSTER_CHECKPOINT_FILE.tmp"
    mv "$MUSTER_CHECKPOINT_FILE.tmp" "$MUSTER_CHECKPOINT_FILE"
    exit 0
}
trap on_signal USR1
i=0
while [ $i -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
done

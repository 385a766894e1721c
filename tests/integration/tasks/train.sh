#!/bin/sh
# A stand-in training job for the tests: counts steps, and on its checkpoint signal (SIGUSR1)
# saves the step to a checkpoint file, reports it the muster way (write the path to
# $MUSTER_CHECKPOINT_FILE through a temp file and rename) and exits.  A requeued attempt resumes
# from $MUSTER_RESUME_FROM.
#   train.sh OUTDIR STEPS [CKPT_EVERY]   (CKPT_EVERY > 0: also checkpoint every N steps)
out=$1
steps=$2
every=${3:-0}
step=0
if [ -n "${MUSTER_RESUME_FROM:-}" ]; then
    step=$(cat "$MUSTER_RESUME_FROM")
    echo "attempt $MUSTER_ATTEMPT resumed from $MUSTER_RESUME_FROM at step $step" >>"$out/resume.$RANK"
fi

save() {
    f="$out/ckpt.$RANK.$MUSTER_ATTEMPT.$step"
    echo "$step" >"$f"
    echo "$f" >"$MUSTER_CHECKPOINT_FILE.tmp"
    mv "$MUSTER_CHECKPOINT_FILE.tmp" "$MUSTER_CHECKPOINT_FILE"
}
on_signal() {
    save
    echo "attempt $MUSTER_ATTEMPT checkpointed at step $step on signal" >>"$out/signal.$RANK"
    exit 0
}
trap on_signal USR1
# Only now: once started.RANK exists, the checkpoint signal is handled (not fatal).
echo "$MUSTER_ATTEMPT" >>"$out/started.$RANK"

while [ "$step" -lt "$steps" ]; do
    step=$((step + 1))
    if [ "$every" -gt 0 ] && [ $((step % every)) = 0 ]; then
        save
    fi
    sleep 0.1
done
echo "attempt $MUSTER_ATTEMPT finished at step $step" >>"$out/done.$RANK"

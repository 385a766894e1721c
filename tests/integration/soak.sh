# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# tests/integration/soak.sh: the stream of submissions the soak tests (t0490, t0491) share, one
# copy instead of two (issue #41).  Source it after lib.sh, with rcli defined (each soak test
# points it at its own Redis) and "$T/ran" made; then:
#
#   soak_submitter_start     # sets task, spec_json, submitted; starts the submitter, sets sub_pid
#   ...chaos...
#   touch "$T/stop"; wait "$sub_pid"
#
# Each task marks its attempt with noclobber: a second run of the same attempt's task is caught
# in "$T/dup".  Half the jobs go in with a bare XADD, as redis-cli users do: when Redis dies (or,
# under Sentinel, a demoted primary answers READONLY) between storing the entry and replying, the
# submitter cannot know whether it landed and notes it in "$T/unsure".  The other half use
# musterctl's idempotency key and retry the same key until they get an answer, which is how a
# pipeline gets exactly-once submission; a retry cut short by the stop is unsure too.  Every
# answered id goes to "$submitted".

# soak_submitter_start: starts the submitter in the background (its PID in sub_pid, also stopped
# by lib.sh's exit trap).
soak_submitter_start() {
    # shellcheck disable=SC2016 # the task's $MUSTER_JOB_ID and $RANDOM expand when it runs
    task='set -C; : > '"$T"'/ran/$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK 2>/dev/null || echo "$MUSTER_JOB_ID.$MUSTER_ATTEMPT.$RANK" >> '"$T"'/dup; sleep 0.$((RANDOM % 8 + 2))'
    spec_json=$(jq -cn --arg c "$task" '{command: $c, max_retries: 0}')
    submitted="$T/submitted"
    : >"$submitted"
    : >"$T/unsure"
    _soak_submitter &
    sub_pid=$!
    _mu_pids+=("$sub_pid")
}

_soak_submitter() {
    local n=0
    while [ ! -e "$T/stop" ]; do
        local tasks=$((RANDOM % 3 + 1)) gpus=$((1 << (RANDOM % 3)))
        local spec id=
        n=$((n + 1))
        if [ $((n % 2)) = 0 ]; then
            spec=$(echo "$spec_json" | jq -c --argjson t $tasks --argjson g $gpus '. + {tasks: $t, gpus_per_task: $g}')
            id=$(rcli XADD muster:submit '*' spec "$spec" 2>/dev/null) || true
            case "$id" in [0-9]*-[0-9]*) ;; *) echo "$n" >>"$T/unsure" ;; esac
        else
            spec=$(echo "$spec_json" | jq -c --argjson t $tasks --argjson g $gpus --arg k "soak-$n" '. + {tasks: $t, gpus_per_task: $g, idempotency_key: $k}')
            until id=$("$MUSTER_BIN/musterctl" submit - <<<"$spec" 2>/dev/null) || [ -e "$T/stop" ]; do
                sleep 0.2
            done
            # Stopped between retries: a try may have landed unanswered.
            case "$id" in [0-9]*-[0-9]*) ;; *) echo "$n" >>"$T/unsure" ;; esac
        fi
        case "$id" in [0-9]*-[0-9]*) echo "$id" >>"$submitted" ;; esac
        sleep 0.2
    done
}

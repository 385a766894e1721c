/* SPDX-License-Identifier: MIT */
/*
 * A history row from a finished job's Redis hash (README "Redis keys": the fields musterd
 * writes to <prefix>job:<id>, named in queue/vocab.h).  Pure: no SQLite, no Redis; the derived
 * columns (GPUs, GPU-seconds, the wait) are computed here once, so that every reader sums the same
 * numbers.
 */
#include "history/hist.h"

#include <stddef.h>
#include <string.h>

#include "queue/vocab.h"

#include "common/mu_banned.h"

static void job_clear(struct hist_job *j)
{
    memset(j, 0, sizeof(*j));
    j->attempt = HIST_NONE;
    j->array_index = HIST_NONE;
    j->tasks = HIST_NONE;
    j->gpus_per_task = HIST_NONE;
    j->gpus = HIST_NONE;
    j->submitted_ms = HIST_NONE;
    j->started_ms = HIST_NONE;
    j->ended_ms = HIST_NONE;
    j->waited_ms = HIST_NONE;
    j->exit_code = HIST_NONE;
    j->gpu_seconds = -1;
    j->lost_gpu_seconds = -1;
    j->checkpoints = HIST_NONE;
    j->preemptions = HIST_NONE;
    j->price = -1;
    j->failures = HIST_NONE;
    j->archived_ms = HIST_NONE;
}

/* An integer field, HIST_NONE when absent, empty or not a number. */
static int64_t num(const char *v)
{
    int64_t n;
    if (!v || !v[0] || mu_parse_i64(v, INT64_MIN + 1, INT64_MAX, &n, NULL) != 0)
        return HIST_NONE;
    return n;
}

static const char *text(const char *v)
{
    return v && v[0] ? v : NULL;
}

static void field_take(struct hist_job *j, const char *k, const char *v)
{
    static const struct {
        const char *key;
        size_t off;
    } texts[] = {
        { QUEUE_F_ID, offsetof(struct hist_job, id) },
        { QUEUE_F_ARRAY_JOB, offsetof(struct hist_job, array_job) },
        { QUEUE_F_NAME, offsetof(struct hist_job, name) },
        { QUEUE_F_USER, offsetof(struct hist_job, user) },
        { QUEUE_F_QUEUE, offsetof(struct hist_job, queue) },
        { QUEUE_F_NODES, offsetof(struct hist_job, nodes) },
        { QUEUE_F_STATE, offsetof(struct hist_job, state) },
        { QUEUE_F_SPEC, offsetof(struct hist_job, spec) },
    };
    static const struct {
        const char *key;
        size_t off;
    } nums[] = {
        { QUEUE_F_ATTEMPT, offsetof(struct hist_job, attempt) },
        { QUEUE_F_ARRAY_INDEX, offsetof(struct hist_job, array_index) },
        { QUEUE_F_TASKS, offsetof(struct hist_job, tasks) },
        { QUEUE_F_GPUS_PER_TASK, offsetof(struct hist_job, gpus_per_task) },
        { QUEUE_F_SUBMITTED_AT, offsetof(struct hist_job, submitted_ms) },
        { QUEUE_F_STARTED_AT, offsetof(struct hist_job, started_ms) },
        { QUEUE_F_FINISHED_AT, offsetof(struct hist_job, ended_ms) },
        { QUEUE_F_EXIT_CODE, offsetof(struct hist_job, exit_code) },
        { QUEUE_F_FAILURES, offsetof(struct hist_job, failures) },
    };
    for (size_t i = 0; i < MU_ARRAY_LEN(texts); i++) {
        if (strcmp(k, texts[i].key) == 0) {
            *(const char **)(void *)((char *)j + texts[i].off) = text(v);
            return;
        }
    }
    for (size_t i = 0; i < MU_ARRAY_LEN(nums); i++) {
        if (strcmp(k, nums[i].key) == 0) {
            *(int64_t *)(void *)((char *)j + nums[i].off) = num(v);
            return;
        }
    }
    if (strcmp(k, QUEUE_F_LOST_GPU_SECONDS) == 0) {
        if (v && mu_parse_double(v, 0, 1e15, &j->lost_gpu_seconds, NULL) != 0)
            j->lost_gpu_seconds = -1;
    } else if (strcmp(k, QUEUE_F_LAST_CHECKPOINT) == 0 && text(v)) {
        j->checkpoints = 1;
    }
}

int hist_job_from_fields(struct hist_job *j,
                         const char *id,
                         const char *const *keys,
                         const char *const *values,
                         int n,
                         struct mu_err *err)
{
    const char *error = NULL;
    const char *reason = NULL;

    job_clear(j);
    for (int i = 0; i < n; i++) {
        if (!keys[i])
            continue;
        if (strcmp(keys[i], "error") == 0)
            error = text(values[i]);
        else if (strcmp(keys[i], "reason") == 0)
            reason = text(values[i]);
        else
            field_take(j, keys[i], values[i]);
    }
    if (!j->id)
        j->id = text(id);
    if (!j->id)
        return mu_errf(err, MU_E_PARSE, "job hash without an id");
    if (!j->state)
        j->state = "UNKNOWN";
    j->reason = error ? error : reason;
    if (j->attempt == HIST_NONE)
        j->attempt = 0; /* never started (rejected, cancelled while pending): attempt 0 */
    if (j->tasks != HIST_NONE && j->gpus_per_task != HIST_NONE)
        j->gpus = j->tasks * j->gpus_per_task;
    if (j->started_ms != HIST_NONE && j->submitted_ms != HIST_NONE
        && j->started_ms >= j->submitted_ms)
        j->waited_ms = j->started_ms - j->submitted_ms;
    if (j->gpus != HIST_NONE && j->started_ms != HIST_NONE && j->ended_ms != HIST_NONE
        && j->ended_ms >= j->started_ms)
        j->gpu_seconds = (double)j->gpus * (double)(j->ended_ms - j->started_ms) / 1000.0;
    return 0;
}

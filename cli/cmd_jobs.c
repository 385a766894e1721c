/* SPDX-License-Identifier: MIT */
/*
 * musterctl jobs: the queue at a glance, like squeue.  Rows come oldest submission first from
 * queue_jobs_read, which scans the jobs index newest first and stops at --limit, so a long
 * history costs nothing when only the newest jobs are asked for.  REASON shows why a job waits
 * (PENDING) or what went wrong (FAILED, REJECTED); it and NODES are cut to fit the terminal.
 */
#include "cli/internal.h"

#include <ctype.h>
#include <string.h>

#include "common/mu_banned.h"

static const char *const states[] = { "PENDING",   "STARTING", "RUNNING",   "PREEMPTING",
                                      "SUCCEEDED", "FAILED",   "CANCELLED", "REJECTED" };

/* Adds one job's row. */
static int jobs_row(struct ctl_table *t, const cJSON *job, uint64_t now_ms)
{
    char b[7][32];
    char shape[48];
    char age[16];
    const char *state = ctl_json_text(job, "state", b[0], sizeof(b[0]));
    const char *reason = "";
    const char *cells[9];

    (void)snprintf(shape, sizeof(shape), "%lldx%lld", (long long)ctl_json_int(job, "tasks", 1),
                   (long long)ctl_json_int(job, "gpus_per_task", 1));
    ctl_format_age(now_ms, (uint64_t)ctl_json_int(job, "submitted_at", (int64_t)now_ms), age,
                   sizeof(age));
    if (strcmp(state, "PENDING") == 0)
        reason = ctl_json_text(job, "reason", b[1], sizeof(b[1]));
    else if (strcmp(state, "FAILED") == 0 || strcmp(state, "REJECTED") == 0)
        reason = ctl_json_text(job, "error", b[1], sizeof(b[1]));
    cells[0] = ctl_json_text(job, "id", b[2], sizeof(b[2]));
    cells[1] = ctl_json_text(job, "name", b[3], sizeof(b[3]));
    cells[2] = ctl_json_text(job, "queue", b[4], sizeof(b[4]));
    cells[3] = state;
    cells[4] = shape;
    cells[5] = ctl_json_text(job, "priority", b[5], sizeof(b[5]));
    cells[6] = age;
    cells[7] = ctl_json_text(job, "nodes", b[6], sizeof(b[6]));
    cells[8] = reason;
    return ctl_table_add(t, cells);
}

int ctl_cmd_jobs(struct ctl *ctl, const struct ctl_args *args)
{
    static const char *const headers[] = { "ID",   "NAME", "QUEUE", "STATE", "TASKSxGPUS",
                                           "PRIO", "AGE",  "NODES", "REASON" };
    struct queue_jobs_filter f = { 0 };
    struct mu_err err = { 0 };
    struct ctl_table *t = NULL;
    struct queue *q;
    cJSON *jobs = NULL;
    const cJSON *job;
    char state[16];
    int64_t limit = 0;
    uint64_t now_ms = mu_time_wall_ms();
    int rc = CTL_EXIT_FAIL;

    f.all = ctl_args_get(ctl, args, "all") != NULL;
    f.queue = ctl_args_get(ctl, args, "queue");
    f.state = ctl_args_get(ctl, args, "state");
    if (ctl_args_int(ctl, args, "limit", 1, 1000000, &limit) != 0)
        return CTL_EXIT_USAGE;
    f.limit = (size_t)limit;
    if (f.state) {
        size_t i;
        size_t n = mu_strlcpy(state, f.state, sizeof(state));
        for (i = 0; state[i]; i++)
            state[i] = (char)toupper((unsigned char)state[i]);
        for (i = 0; n < sizeof(state) && i < MU_ARRAY_LEN(states); i++) {
            if (strcmp(state, states[i]) == 0)
                break;
        }
        if (n >= sizeof(state) || i == MU_ARRAY_LEN(states))
            return ctl_usage(ctl,
                             "--state: expected one of PENDING, STARTING, RUNNING, "
                             "PREEMPTING, SUCCEEDED, FAILED, CANCELLED, REJECTED, got '%s'",
                             f.state);
        f.state = state;
    }
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_jobs_read(q, &f, &jobs, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, jobs);
        goto out;
    }
    t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    if (!t) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    ctl_table_set_state(t, 3);
    ctl_table_set_flex(t, 7);
    ctl_table_set_flex(t, 8);
    cJSON_ArrayForEach(job, jobs)
    {
        if (jobs_row(t, job, now_ms) != 0) {
            ctl_fail(ctl, "out of memory");
            goto out;
        }
    }
    ctl_table_print(t, ctl, stdout);
    rc = CTL_EXIT_OK;
out:
    ctl_table_free(t);
    cJSON_Delete(jobs);
    return rc;
}

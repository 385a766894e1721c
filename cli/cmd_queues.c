/* SPDX-License-Identifier: MIT */
/*
 * musterctl queues: per queue, the demand musterd last published in the queues status hash
 * (refreshed with the node status): pending and running jobs and GPUs, and how long the oldest
 * pending job has waited.  Pending GPUs per queue is what an operator (or an autoscaler) reads
 * to decide whether capacity is short.  USAGE_GPU_H is the queue's decayed usage that the
 * fair-share order weighs (docs/fair-share.md); SHARE is its part of all queues' usage and
 * TARGET its part of the weights, so SHARE above TARGET means the queue has had more than its
 * turn lately.  QUOTA is GPUs used of the nominal quota per capacity type ("-": no quota, not
 * limited), BORROWED the GPUs of its gangs that run on quota borrowed from its cohort and LENT
 * the GPUs of its idle quota that its cohort's borrowers use (docs/quotas.md).  The table is
 * shared with `top`.  --users lists each queue's users instead: within a queue the pass takes
 * the next job of the user standing lowest, so an operator sees who has had the queue lately.
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

/* "spot 16/64 od 0/16": GPUs used of the quota by capacity type; "-" without a quota. */
static const char *quota_cell(const cJSON *qu, char *buf, size_t size)
{
    const cJSON *quota = cJSON_GetObjectItemCaseSensitive(qu, "quota");
    const cJSON *used = cJSON_GetObjectItemCaseSensitive(qu, "used_gpus");
    if (!cJSON_IsObject(quota) || !cJSON_IsObject(used))
        return "-";
    (void)mu_snprintf(
        buf, size, "spot %lld/%lld od %lld/%lld", (long long)ctl_json_int(used, "spot", 0),
        (long long)ctl_json_int(quota, "spot", 0), (long long)ctl_json_int(used, "on-demand", 0),
        (long long)ctl_json_int(quota, "on-demand", 0));
    return buf;
}

struct ctl_table *ctl_queues_table(const cJSON *queues, uint64_t now_ms)
{
    static const char *const headers[] = { "QUEUE",       "WEIGHT",       "PENDING",
                                           "RUNNING",     "PENDING_GPUS", "RUNNING_GPUS",
                                           "OLDEST_WAIT", "USAGE_GPU_H",  "SHARE",
                                           "TARGET",      "QUOTA",        "BORROWED",
                                           "LENT" };
    struct ctl_table *t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    const cJSON *qu;
    double weights = 0;

    if (!t)
        return NULL;
    cJSON_ArrayForEach(qu, queues)
    {
        weights += (double)ctl_json_int(qu, "weight", 0);
    }
    ctl_table_set_flex(t, 0);
    cJSON_ArrayForEach(qu, queues)
    {
        char b[12][48];
        char wait[16] = "-";
        int64_t oldest = ctl_json_int(qu, "oldest_pending_at", 0);
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(qu, "usage_gpu_s");
        const cJSON *share = cJSON_GetObjectItemCaseSensitive(qu, "share");
        const char *cells[13];

        if (oldest > 0)
            ctl_format_age(now_ms, (uint64_t)oldest, wait, sizeof(wait));
        cells[0] = ctl_json_text(qu, "name", b[0], sizeof(b[0]));
        cells[1] = ctl_json_text(qu, "weight", b[1], sizeof(b[1]));
        cells[2] = ctl_json_text(qu, "pending_jobs", b[2], sizeof(b[2]));
        cells[3] = ctl_json_text(qu, "running_jobs", b[3], sizeof(b[3]));
        cells[4] = ctl_json_text(qu, "pending_gpus", b[4], sizeof(b[4]));
        cells[5] = ctl_json_text(qu, "running_gpus", b[5], sizeof(b[5]));
        cells[6] = wait;
        cells[7] = "-"; /* published by an older musterd */
        cells[8] = "-";
        if (cJSON_IsNumber(usage) && cJSON_IsNumber(share)) {
            (void)mu_snprintf(b[6], sizeof(b[6]), "%.1f", usage->valuedouble / 3600.0);
            (void)mu_snprintf(b[7], sizeof(b[7]), "%.0f%%", share->valuedouble * 100.0);
            cells[7] = b[6];
            cells[8] = b[7];
        }
        (void)mu_snprintf(b[8], sizeof(b[8]), "%.0f%%",
                          weights > 0 ? (double)ctl_json_int(qu, "weight", 0) * 100.0 / weights
                                      : 0.0);
        cells[9] = b[8];
        cells[10] = quota_cell(qu, b[9], sizeof(b[9]));
        cells[11] = ctl_json_text(qu, "borrowed_gpus", b[10], sizeof(b[10]));
        cells[12] = ctl_json_text(qu, "lent_gpus", b[11], sizeof(b[11]));
        if (ctl_table_add(t, cells) != 0) {
            ctl_table_free(t);
            return NULL;
        }
    }
    return t;
}

/* One row per user of each queue: GPUs its gangs hold, decayed usage and its part of the
 * queue's users' usage. */
static struct ctl_table *users_table(const cJSON *queues, uint64_t now_ms)
{
    static const char *const headers[] = { "QUEUE", "USER", "RUNNING_GPUS", "USAGE_GPU_H",
                                           "SHARE" };
    struct ctl_table *t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    const cJSON *qu;

    (void)now_ms;
    if (!t)
        return NULL;
    ctl_table_set_flex(t, 1);
    cJSON_ArrayForEach(qu, queues)
    {
        const cJSON *users = cJSON_GetObjectItemCaseSensitive(qu, "users");
        const cJSON *u;
        double total = 0;
        char b_name[64];
        const char *name = ctl_json_text(qu, "name", b_name, sizeof(b_name));
        cJSON_ArrayForEach(u, users)
        {
            total += (double)ctl_json_int(u, "usage_gpu_s", 0);
        }
        cJSON_ArrayForEach(u, users)
        {
            char b[3][48];
            double usage = (double)ctl_json_int(u, "usage_gpu_s", 0);
            const char *cells[5] = { name, u->string[0] ? u->string : "(none)", b[0], b[1], b[2] };
            (void)ctl_json_text(u, "running_gpus", b[0], sizeof(b[0]));
            (void)mu_snprintf(b[1], sizeof(b[1]), "%.1f", usage / 3600.0);
            (void)mu_snprintf(b[2], sizeof(b[2]), "%.0f%%", total > 0 ? usage * 100.0 / total : 0);
            if (ctl_table_add(t, cells) != 0) {
                ctl_table_free(t);
                return NULL;
            }
        }
    }
    return t;
}

int ctl_cmd_queues(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_status_show(ctl, QUEUE_K_QUEUES,
                           ctl_args_get(ctl, args, "users") ? users_table : ctl_queues_table);
}

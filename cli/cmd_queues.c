/* SPDX-License-Identifier: MIT */
/*
 * musterctl queues: per queue, the demand musterd last published in the queues status hash
 * (refreshed with the node status): pending and running jobs and GPUs, and how long the oldest
 * pending job has waited.  Pending GPUs per queue is what an operator (or an autoscaler) reads
 * to decide whether capacity is short.  USAGE_GPU_H is the queue's decayed usage that the
 * fair-share order weighs (docs/fair-share.md); SHARE is its part of all queues' usage and
 * TARGET its part of the weights, so SHARE above TARGET means the queue has had more than its
 * turn lately.  QUOTA is GPUs used of the nominal quota per capacity type ("-": no quota, not
 * limited) and BORROWED the GPUs of its gangs that run on quota borrowed from its cohort
 * (docs/quotas.md).  The table is shared with `top`.
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
                                           "TARGET",      "QUOTA",        "BORROWED" };
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
        char b[11][48];
        char wait[16] = "-";
        int64_t oldest = ctl_json_int(qu, "oldest_pending_at", 0);
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(qu, "usage_gpu_s");
        const cJSON *share = cJSON_GetObjectItemCaseSensitive(qu, "share");
        const char *cells[12];

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
        if (ctl_table_add(t, cells) != 0) {
            ctl_table_free(t);
            return NULL;
        }
    }
    return t;
}

int ctl_cmd_queues(struct ctl *ctl, const struct ctl_args *args)
{
    (void)args;
    return ctl_status_show(ctl, "queues", ctl_queues_table);
}

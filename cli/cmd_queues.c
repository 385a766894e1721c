/* SPDX-License-Identifier: MIT */
/*
 * musterctl queues: per queue, the demand musterd last published in the queues status hash
 * (refreshed with the node status): pending and running jobs and GPUs, and how long the oldest
 * pending job has waited.  Pending GPUs per queue is what an operator (or an autoscaler) reads
 * to decide whether capacity is short.  The table is shared with `top`.
 */
#include "cli/internal.h"

#include <string.h>

#include "common/mu_banned.h"

struct ctl_table *ctl_queues_table(const cJSON *queues, uint64_t now_ms)
{
    static const char *const headers[] = { "QUEUE",        "WEIGHT",       "PENDING",    "RUNNING",
                                           "PENDING_GPUS", "RUNNING_GPUS", "OLDEST_WAIT" };
    struct ctl_table *t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    const cJSON *qu;

    if (!t)
        return NULL;
    ctl_table_set_flex(t, 0);
    cJSON_ArrayForEach(qu, queues)
    {
        char b[6][32];
        char wait[16] = "-";
        int64_t oldest = ctl_json_int(qu, "oldest_pending_at", 0);
        const char *cells[7];

        if (oldest > 0)
            ctl_format_age(now_ms, (uint64_t)oldest, wait, sizeof(wait));
        cells[0] = ctl_json_text(qu, "name", b[0], sizeof(b[0]));
        cells[1] = ctl_json_text(qu, "weight", b[1], sizeof(b[1]));
        cells[2] = ctl_json_text(qu, "pending_jobs", b[2], sizeof(b[2]));
        cells[3] = ctl_json_text(qu, "running_jobs", b[3], sizeof(b[3]));
        cells[4] = ctl_json_text(qu, "pending_gpus", b[4], sizeof(b[4]));
        cells[5] = ctl_json_text(qu, "running_gpus", b[5], sizeof(b[5]));
        cells[6] = wait;
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

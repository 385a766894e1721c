/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_usage.h): the queues' fair-share usage.  The arithmetic (decay, exact
 * accrual over an interval) is the core's (core/share.c), so musterd, the tests and a later
 * simulator count usage the same way.
 */

#include "scheduler/d_usage.h"

#include <cjson/cJSON.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

void d_usage_accrue(struct musterd *d, uint64_t now_ms)
{
    struct d_usage *u = &d->usage;
    double dt_s = u->at_ms && now_ms > u->at_ms ? (double)(now_ms - u->at_ms) / 1000.0 : 0;

    if (dt_s > 0) {
        for (int q = 0; q <= d->cfg.nqueues; q++)
            u->gpu_s[q] = sched_usage_accrue(u->gpu_s[q], (double)u->held_gpus[q], dt_s,
                                             d->cfg.fair_share_half_life_s);
    }
    if (now_ms > u->at_ms)
        u->at_ms = now_ms;
}

void d_usage_hold(struct musterd *d, const struct d_job *j, int tasks)
{
    int64_t *held = &d->usage.held_gpus[j->queue_idx];

    d_usage_accrue(d, mu_time_wall_ms());
    *held += (int64_t)tasks * j->spec.gpus_per_task;
    if (MU_NEVER(*held < 0))
        *held = 0;
}

double d_usage_share(const struct musterd *d, int q)
{
    double total = 0;
    for (int i = 0; i <= d->cfg.nqueues; i++)
        total += d->usage.gpu_s[i];
    return total > 0 ? d->usage.gpu_s[q] / total : 0;
}

int d_usage_recover(struct musterd *d, struct mu_err *err)
{
    uint64_t now_ms = mu_time_wall_ms();
    cJSON *queues = NULL;
    const cJSON *q;

    if (queue_status_read(d->q, "queues", &queues, err) != 0)
        return -1;
    cJSON_ArrayForEach(q, queues)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(q, "name");
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(q, "usage_gpu_s");
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(q, "usage_at");
        const struct cfg_queue *cq =
            cJSON_IsString(name) ? cfg_queue_find(&d->cfg, name->valuestring) : NULL;
        double dt_s;
        if (!cq || !cJSON_IsNumber(usage) || !cJSON_IsNumber(at) || !(usage->valuedouble >= 0)
            || usage->valuedouble > 1e18)
            continue; /* from an older version, or not ours: start from 0 */
        dt_s = at->valuedouble < (double)now_ms ? ((double)now_ms - at->valuedouble) / 1000.0 : 0;
        d->usage.gpu_s[cq - d->cfg.queues] =
            sched_usage_decay(usage->valuedouble, dt_s, d->cfg.fair_share_half_life_s);
    }
    cJSON_Delete(queues);
    d->usage.at_ms = now_ms;
    return 0;
}

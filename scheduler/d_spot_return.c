/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): back to spot (issue #16).  A gang that asked for spot first
 * but fell back to on-demand is moved to spot right after one of its checkpoints lands, when
 * spot capacity that holds it is free now and the move pays (core/spot.c: the price difference
 * over the time it would still run, capped at spot_return_horizon_s, against the work since the
 * checkpoint plus spot_return_overhead_s redone on spot).  The move is the preemption path:
 * checkpoint signal, requeue at the head of its queue, resume from the newest checkpoint; the
 * pass then places it spot first, as its capacity list says.  At most once per min_runtime_s of
 * run time: a gang that just started is never moved.
 */

#include <stdlib.h>

#include "scheduler/d_handlers.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* Per hour, what the distinct nodes of slots[0..n) cost. */
static double slots_price(const struct musterd *d, const struct sched_slot *slots, int n)
{
    double sum = 0;
    for (int t = 0; t < n; t++) {
        bool seen = false;
        for (int u = 0; u < t && !seen; u++)
            seen = slots[u].node == slots[t].node;
        if (!seen)
            sum += sched_cluster_pool(d->cluster,
                                      sched_cluster_node_spec(d->cluster, slots[t].node)->pool)
                       ->price_per_hour;
    }
    return sum;
}

/* Whether j is a gang the rule applies to now: spot first in its spec, running on on-demand,
 * and running for min_runtime_s at least. */
static bool may_return(const struct musterd *d, const struct d_job *j, uint64_t now_ms)
{
    return d->cfg.spot_return_horizon_s > 0 && j->placed && j->end == D_END_NONE
           && j->state == QUEUE_RUNNING && d_job_fully_committed(j) && j->spec.ncapacity > 0
           && j->spec.capacity[0] == CFG_CAPACITY_SPOT && d_job_capacity(d, j) == SCHED_ON_DEMAND
           && now_ms >= j->started_ms + (uint64_t)d->cfg.min_runtime_s * 1000u;
}

void d_spot_return_check(struct musterd *d, struct d_job *j)
{
    uint64_t now_ms = mu_time_wall_ms();
    int64_t now_s = (int64_t)(now_ms / 1000);
    struct sched_request spot;
    struct sched_slot *slots;
    int64_t remaining_s;
    int64_t lost_s;
    double from;
    double to;
    double gain;
    char why[256];
    char in[24];

    if (!may_return(d, j, now_ms) || !(slots = calloc((size_t)j->spec.tasks, sizeof(*slots))))
        return;
    spot = j->req;
    spot.ncapacity = 1;
    spot.capacity[0] = SCHED_SPOT;
    if (sched_place(d->cluster, &spot, now_s, slots, why, sizeof(why)) != 1)
        goto out; /* no spot capacity holds it now */
    remaining_s = d_job_end_s(d, j) - now_s;
    if (remaining_s > d->cfg.spot_return_horizon_s)
        remaining_s = d->cfg.spot_return_horizon_s;
    lost_s = (int64_t)(now_ms > j->last_checkpoint_ms ? now_ms - j->last_checkpoint_ms : 0) / 1000
             + d->cfg.spot_return_overhead_s;
    from = slots_price(d, j->slots, j->spec.tasks);
    to = slots_price(d, slots, j->spec.tasks);
    gain = sched_spot_return_gain(from, to, remaining_s, lost_s);
    if (gain <= 0)
        goto out;
    mu_duration_format(remaining_s, in, sizeof(in));
    (void)mu_snprintf(
        why, sizeof(why),
        "back to spot after checkpoint %s: spot capacity is free (pool %s), saves "
        "%.2f per hour over the next %s (%.2f net of the restart)",
        j->last_checkpoint ? j->last_checkpoint : "",
        sched_cluster_pool(d->cluster, sched_cluster_node_spec(d->cluster, slots[0].node)->pool)
            ->name,
        from - to, in, gain);
    /* The why stays in the job hash for `musterctl show` (the reason moves on with the job). */
    {
        struct queue_kv f[] = { { QUEUE_F_SPOT_RETURN, why } };
        struct d_change c = { .to = D_SAME, .fields = f, .nfields = 1 };
        if (d_job_write(d, j, &c) != 0)
            goto out; /* Redis is down: the next checkpoint asks again */
    }
    j->head_of_queue = true;
    if (d_gang_stop(d, j, why, 0, D_C_SPOT_RETURNS, QUEUE_PENDING) == 0)
        mu_log(MU_LOG_INFO, "sched", "job=%s %s", j->id, why);
out:
    free(slots);
}

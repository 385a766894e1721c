/* SPDX-License-Identifier: MIT */
/*
 * Fair share between queues (issue #11, docs/fair-share.md): the standings that decide the order
 * in which the pass sees the pending jobs.  Each queue has a weight and a usage in GPU-seconds
 * that halves every half-life, so last week's big run weighs less than this morning's.  A queue's
 * standing is
 *
 *     (usage + committed + charged) / weight
 *
 * where committed is what its running gangs are still expected to use and charged is what the
 * jobs already taken in this order are expected to use.  The order repeatedly takes the next job
 * of the queue that stands lowest (ties: the queue listed first), then charges it; so a team that
 * floods the queue with 1,000 jobs gets its turn in proportion to its weight, not 1,000 turns
 * first.  Within a queue: priority, then a gang requeued by a spot interruption; among jobs equal
 * in both, the same rule one level down (Slurm's fair-share tree): the next job of the user
 * whose usage + committed + charged in this queue is lowest, every user of a queue weighing the
 * same; then age.  So one user's 500 jobs do not keep a colleague's one job waiting either.
 *
 * This file holds the standing math; the order itself, kept across passes and produced one job
 * at a time, is core/order.c.  Pure, like the rest of the core: usage and time come in as
 * numbers.
 */

#include <math.h>

#include "core/internal.h"

#include "common/mu_banned.h"

#define LN2 0.69314718055994530942 /* ln 2 (M_LN2 is not in C11) */

double sched_usage_decay(double usage, double dt_s, double half_life_s)
{
    if (dt_s <= 0 || half_life_s <= 0 || usage <= 0)
        return usage > 0 ? usage : 0;
    return usage * exp2(-dt_s / half_life_s);
}

double sched_usage_accrue(double usage, double gpus, double dt_s, double half_life_s)
{
    double decayed = sched_usage_decay(usage, dt_s, half_life_s);
    if (dt_s <= 0 || gpus <= 0)
        return decayed;
    if (half_life_s <= 0)
        return decayed + gpus * dt_s;
    return decayed + gpus * half_life_s / LN2 * (1 - exp2(-dt_s / half_life_s));
}

double sched_share_gpu_s(int tasks, int gpus_per_task, int64_t dt_s)
{
    return dt_s > 0 ? (double)tasks * gpus_per_task * (double)dt_s : 0;
}

double sched_share_standing(const struct sched_share_queue *q)
{
    return (q->usage + q->committed) / sched_share_weight(q);
}

/* SPDX-License-Identifier: MIT */
/*
 * The pass's one preemption (DESIGN §5): after sched_pass, the first pending job that may
 * preempt gets a plan, and the pass stops there.  musterd (scheduler/d_pass.c) and muster-sim
 * (sim/policy.c) both call sched_preempt_first, so which job preempts, with which victims, is
 * decided once.  A job may preempt when the pass did not start it and its queue's quota has
 * room for it; a job whose victims from an earlier plan are still stopping ends the search (the
 * freed GPUs wait for it).
 *
 * Without any limited queue a victim must be of strictly lower priority than the preemptor, so a
 * job at or below the lowest preemptible victim's priority cannot get a plan: it is skipped
 * without asking the planner (the planner's answer would be "no plan", with no retry time).
 * Pure like the rest of the core: time is now_ms, decisions come back as data.
 */

#include <stdlib.h>

#include "core/sched.h"

#include "common/mu_banned.h"

/* The lowest priority of the victims that may be stopped; false when none may. */
static bool lowest_victim(const struct sched_victim *v, int n, int64_t *lowest)
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!v[i].preemptible)
            continue;
        if (!any || v[i].priority < *lowest)
            *lowest = v[i].priority;
        any = true;
    }
    return any;
}

static bool any_limited(const struct sched_quota_queue *quota, int nquota)
{
    for (int q = 0; q < nquota; q++)
        if (quota[q].limited)
            return true;
    return false;
}

int sched_preempt_first(struct sched_cluster *c,
                        const struct sched_quota_queue *quota,
                        int nquota,
                        struct sched_preempt_job *jobs,
                        const struct sched_decision *dec,
                        int n,
                        struct sched_victim *victims,
                        int nvictims,
                        int64_t now_ms,
                        int min_runtime_s,
                        struct sched_preempt_plan *plan,
                        int *job,
                        struct mu_err *err)
{
    bool *may_stop = NULL;
    bool limited = any_limited(quota, nquota);
    int64_t lowest = 0;
    int rc = -1;

    *job = -1;
    plan->nvictims = 0;
    for (int i = 0; i < n; i++)
        jobs[i].retry_at_ms = 0;
    if (nvictims == 0 || (!limited && !lowest_victim(victims, nvictims, &lowest))) {
        /* No gang may be stopped: a job waiting for its victims waits all the same. */
        return 0;
    }
    may_stop = malloc((size_t)nvictims * sizeof(*may_stop));
    if (!may_stop)
        return mu_errf(err, MU_E_NOMEM, "out of memory planning a preemption");
    for (int v = 0; v < nvictims; v++)
        may_stop[v] = victims[v].preemptible;
    for (int i = 0; i < n; i++) {
        struct sched_request req;
        int found;
        if (dec[i].verdict == SCHED_START || dec[i].over_quota)
            continue;          /* started, or no quota to preempt with */
        if (jobs[i].waiting) { /* its earlier plan's victims are still stopping */
            *job = i;
            rc = 1;
            goto out;
        }
        if (!limited && jobs[i].priority <= lowest)
            continue; /* no victim of lower priority: the planner would find none */
        for (int v = 0; v < nvictims; v++)
            victims[v].preemptible = may_stop[v];
        /* Only where its quota admits it; within its nominal quota it may reclaim what it lent. */
        if (sched_quota_preempt_prepare(quota, nquota, jobs[i].queue, jobs[i].req, &req, victims,
                                        nvictims)
            == 0)
            continue;
        found = sched_preempt_plan(c, &req, jobs[i].priority, now_ms, min_runtime_s, victims,
                                   nvictims, plan, err);
        if (found < 0)
            goto out;
        if (found == 1) {
            *job = i;
            rc = 1;
            goto out;
        }
        if (plan->retry_at_ms > now_ms)
            jobs[i].retry_at_ms = plan->retry_at_ms;
    }
    plan->nvictims = 0;
    rc = 0;
out:
    free(may_stop);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * The pass's one preemption (docs/design.md §5): after sched_pass, the first pending job that may
 * preempt gets a plan, and the pass stops there.  musterd (scheduler/d_pass.c) and muster-sim
 * (sim/policy.c) both call sched_preempt_first, so which job preempts, with which victims, is
 * decided once.  A job may preempt when the pass did not start it and its queue's quota has
 * room for it; a job whose victims from an earlier plan are still stopping ends the search (the
 * freed GPUs wait for it).
 *
 * Without any limited queue a victim must be of strictly lower priority than the preemptor, so a
 * job at or below the lowest preemptible victim's priority cannot get a plan: it is skipped
 * without asking the planner (the planner's answer would be "no plan", with no retry time).
 * Nothing changes during the call (a planner that finds no plan leaves the cluster as it was),
 * so the planner's answer is a function of the job's request, priority and queue: a queue of
 * thousands of waiting jobs in a few shapes asks it once per shape, and the others of the shape
 * get the same "no plan" and retry time from a memo that lives for the call.
 * Pure like the rest of the core: time is now_ms, decisions come back as data.
 */

#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

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

/* A planner call that found no plan, for the rest of the call: its inputs and its retry time. */
struct no_plan {
    const struct sched_request *req; /* NULL: empty slot */
    int64_t priority;
    int queue;
    int64_t retry_at_ms;
};

#define NO_PLAN_SLOTS_MAX 1024 /* a power of two; a full table only stops remembering */

/* Every field of a request the planner reads (the avoided nodes included). */
static bool req_same(const struct sched_request *a, const struct sched_request *b)
{
    if (a == b)
        return true;
    return a->memory_mb_per_task == b->memory_mb_per_task && a->tasks == b->tasks
           && a->gpus_per_task == b->gpus_per_task && a->slice_profile == b->slice_profile
           && a->gpu_milli == b->gpu_milli && a->cpus_per_task == b->cpus_per_task
           && a->ncapacity == b->ncapacity && a->capacity[0] == b->capacity[0]
           && (a->ncapacity < 2 || a->capacity[1] == b->capacity[1])
           && a->required_level == b->required_level && a->preferred_level == b->preferred_level
           && a->navoid == b->navoid
           && (a->navoid <= 0 || memcmp(a->avoid, b->avoid, (size_t)a->navoid * sizeof(int)) == 0)
           && sched_type_same(a->gpu_type, b->gpu_type);
}

static uint32_t job_hash(const struct sched_preempt_job *j)
{
    const struct sched_request *r = j->req;
    uint64_t parts[8] = { (uint64_t)r->tasks,         (uint64_t)r->gpus_per_task,
                          (uint64_t)r->cpus_per_task, (uint64_t)r->memory_mb_per_task,
                          (uint64_t)r->capacity[0],   (uint64_t)(r->required_level + 1),
                          (uint64_t)j->priority,      (uint64_t)j->queue };
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < MU_ARRAY_LEN(parts); i++)
        h = (h ^ parts[i]) * 1099511628211ULL;
    return (uint32_t)(h ^ (h >> 32));
}

/* Slots for a call over n jobs: a power of two, at least 2n up to NO_PLAN_SLOTS_MAX. */
static uint32_t no_plan_slots(int n)
{
    uint32_t slots = 16;
    while (slots < NO_PLAN_SLOTS_MAX && slots < 2 * (uint32_t)n)
        slots *= 2;
    return slots;
}

/* j's slot in memo[0..slots): its entry, or the empty slot to fill; NULL when the probe finds
 * neither. */
static struct no_plan *no_plan_slot(struct no_plan *memo,
                                    uint32_t slots,
                                    const struct sched_preempt_job *j)
{
    uint32_t h = job_hash(j);
    for (uint32_t i = 0; i < 32; i++) {
        struct no_plan *m = &memo[(h + i) & (slots - 1)];
        if (!m->req
            || (m->priority == j->priority && m->queue == j->queue && req_same(m->req, j->req)))
            return m;
    }
    return NULL;
}

static bool any_limited(const struct sched_quota_queue *quota, int nquota)
{
    for (int q = 0; q < nquota; q++)
        if (quota[q].limited)
            return true;
    return false;
}

bool sched_preempt_may(const struct sched_quota_queue *quota,
                       int nquota,
                       const struct sched_victim *victims,
                       int nvictims,
                       int64_t priority)
{
    int64_t lowest = 0;
    if (nvictims == 0)
        return false;
    if (any_limited(quota, nquota))
        return true;
    return lowest_victim(victims, nvictims, &lowest) && priority > lowest;
}

bool sched_pass_rest_may_preempt(const struct sched_order *o,
                                 const struct sched_quota_queue *quota,
                                 int nquota,
                                 const struct sched_victim *victims,
                                 int nvictims,
                                 const struct sched_shape_span *span)
{
    int64_t rest;
    if (!sched_order_rest_priority(o, &rest))
        return false;
    return sched_preempt_may(quota, nquota, victims, nvictims, rest)
           || (span->any_preemptible && span->min_preemptible < rest);
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
    struct no_plan *memo = NULL;
    uint32_t slots = no_plan_slots(n);
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
    memo = calloc(slots, sizeof(*memo));
    if (!may_stop || !memo) {
        free(memo);
        free(may_stop);
        return mu_errf(err, MU_E_NOMEM, "out of memory planning a preemption");
    }
    for (int v = 0; v < nvictims; v++)
        may_stop[v] = victims[v].preemptible;
    for (int i = 0; i < n; i++) {
        struct sched_request req;
        struct no_plan *m;
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
        /* After the preparation, which marks the victims as this job's queue may take them. */
        m = no_plan_slot(memo, slots, &jobs[i]);
        if (m && m->req) {
            jobs[i].retry_at_ms = m->retry_at_ms;
            continue;
        }
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
        if (m)
            *m = (struct no_plan){ .req = jobs[i].req,
                                   .priority = jobs[i].priority,
                                   .queue = jobs[i].queue,
                                   .retry_at_ms = jobs[i].retry_at_ms };
    }
    plan->nvictims = 0;
    rc = 0;
out:
    free(memo);
    free(may_stop);
    return rc;
}

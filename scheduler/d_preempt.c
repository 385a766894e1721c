/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): preemption for a pending job (docs/design.md §5).  The running
 * gangs go to the core's sched_preempt_plan, which picks the lower-priority, preemptible victims
 * old enough (min_runtime_s) whose stopping lets the job start and that lose the least work; the
 * victims are then stopped (checkpoint signal, grace, KILL) and the freed GPUs wait for the
 * preemptor.  Quotas (core/quota.c) decide first which gangs may be victims at all: another
 * queue's work within its quota never; borrowed work of the cohort whatever its priority when
 * the preemptor's queue wants its own quota back (reclaim).
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

static int victims_scratch(struct musterd *d, int n)
{
    if (n <= d->pass.cap_victims)
        return 0;
    {
        int cap = n * 2;
        struct sched_victim *v = realloc(d->pass.victims, (size_t)cap * sizeof(*v));
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_job **jobs = v ? realloc(d->pass.victim_jobs, (size_t)cap * sizeof(*jobs)) : NULL;
        int *idx = jobs ? realloc(d->pass.plan_victims, (size_t)cap * sizeof(*idx)) : NULL;
        if (v)
            d->pass.victims = v;
        if (jobs)
            d->pass.victim_jobs = jobs;
        if (idx)
            d->pass.plan_victims = idx;
        if (!v || !jobs || !idx)
            return -1;
        d->pass.cap_victims = cap;
    }
    return 0;
}

void d_preempt_collect(struct musterd *d, int64_t now_ms)
{
    int64_t now_s = now_ms / 1000;
    struct d_job *j;
    int n = 0;

    d->pass.nvictims = 0;
    if (victims_scratch(d, (int)mu_map_count(d->jobs)) != 0)
        return;
    for (int k = d->nlive; k-- > 0;) {
        if (k >= d->nlive)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->live[k];
        struct sched_victim *v = &d->pass.victims[n];
        if (!j->placed || !d_job_fully_committed(j))
            continue;
        v->req = &j->req;
        v->slots = j->slots;
        v->priority = j->spec.priority;
        v->started_ms = (int64_t)j->started_ms;
        v->checkpoint_ms = (int64_t)j->last_checkpoint_ms;
        v->grace_s = j->spec.checkpointable ? j->spec.checkpoint_grace_s : d->cfg.kill_grace_s;
        v->end_s = j->end != D_END_NONE ? now_s + v->grace_s : d_job_end_s(d, j);
        v->queue = j->queue_idx;
        v->borrowed = j->borrowed;
        /* A gang already stopping frees its GPUs anyway: not a victim again. */
        v->preemptible = j->spec.preemptible && j->end == D_END_NONE;
        d->pass.victim_jobs[n++] = j;
    }
    d->pass.nvictims = n;
}

/* The pass's victims and p's request as p may preempt with them: each victim's own
 * preemptibility, then what p's queue and quota say (sched_quota_preempt_prepare, the rule
 * muster-sim shares).  0 when p's quota admits it on no capacity type.  O(placed gangs). */
static int victims_for(struct musterd *d, const struct d_job *p, struct sched_request *req)
{
    for (int i = 0; i < d->pass.nvictims; i++) {
        const struct d_job *j = d->pass.victim_jobs[i];
        /* A gang already stopping frees its GPUs anyway: not a victim again. */
        d->pass.victims[i].preemptible = j->spec.preemptible && j->end == D_END_NONE;
    }
    return sched_quota_preempt_prepare(d->pass.quota, d->cfg.nqueues + 1, p->queue_idx, &p->req,
                                       req, d->pass.victims, d->pass.nvictims);
}

/* Stops the plan's victims for p; returns how many of them are reclaimed quota (the others go
 * by priority).  p->victims_stopping counts the stops written. */
static int victims_stop(struct musterd *d, struct d_job *p, const struct sched_preempt_plan *plan)
{
    char why[256];
    int nreclaim = 0;

    p->victims_stopping = 0;
    for (int i = 0; i < plan->nvictims; i++) {
        struct d_job *v = d->pass.victim_jobs[plan->victims[i]];
        if (d->pass.victims[plan->victims[i]].reclaimable) {
            nreclaim++;
            (void)mu_snprintf(why, sizeof(why),
                              "preempted by job %s: queue %s reclaims the quota it lent", p->id,
                              d->cfg.queues[p->queue_idx].name);
        } else {
            (void)mu_snprintf(why, sizeof(why), "preempted by job %s (priority %lld)", p->id,
                              (long long)p->spec.priority);
        }
        if (d_gang_stop(d, v, why, 0, D_C_PREEMPTIONS, QUEUE_PENDING) != 0)
            continue; /* not written: the plan is made again once Redis is back */
        mu_strlcpy(v->preempted_for, p->id, sizeof(v->preempted_for));
        p->victims_stopping++;
    }
    return nreclaim;
}

/* The plan's reason on its preemptor p and in the log. */
static void plan_reason(struct musterd *d,
                        struct d_job *p,
                        const struct sched_preempt_plan *plan,
                        int nreclaim,
                        int64_t now_s)
{
    char why[256];
    (void)mu_snprintf(why, sizeof(why),
                      "preempting %d %s gang(s) (%lld GPU-s of work at risk); starts once they "
                      "stop (within %llds)",
                      plan->nvictims,
                      nreclaim == plan->nvictims ? "borrowing"
                      : nreclaim > 0             ? "borrowing or lower-priority"
                                                 : "lower-priority",
                      (long long)(plan->lost_gpu_ms / 1000),
                      (long long)(plan->ready_s > now_s ? plan->ready_s - now_s : 0));
    d_job_set_reason(d, p, why);
    mu_log(MU_LOG_INFO, "sched", "job=%s %s", p->id, why);
}

/* The largest task count of the pass's first n jobs: the plan's slots buffer. */
static int max_tasks(const struct musterd *d, int n)
{
    int most = 1;
    for (int i = 0; i < n; i++)
        most = d->pass.who[i]->spec.tasks > most ? d->pass.who[i]->spec.tasks : most;
    return most;
}

uint64_t d_preempt_first(struct musterd *d, int n, int64_t now_ms)
{
    uint64_t retry_mono_ms = 0;
    struct sched_preempt_plan plan;
    struct sched_slot *slots = NULL;
    struct mu_err err;
    int from = 0;

    for (int i = 0; i < n; i++) {
        const struct d_job *j = d->pass.who[i];
        /* Its own request, not the pass's relaxed one: a preemption is planned as submitted. */
        d->pass.pjobs[i] = (struct sched_preempt_job){ .req = &j->req,
                                                       .priority = j->spec.priority,
                                                       .queue = j->queue_idx,
                                                       .waiting = j->victims_stopping > 0 };
    }
    slots = calloc((size_t)max_tasks(d, n), sizeof(*slots));
    if (!slots)
        return 0;
    memset(&plan, 0, sizeof(plan));
    plan.victims = d->pass.plan_victims;
    plan.slots = slots;
    while (from < n) {
        int p = -1;
        int rc =
            sched_preempt_first(d->cluster, d->pass.quota, d->cfg.nqueues + 1, d->pass.pjobs + from,
                                d->pass.out + from, n - from, d->pass.victims, d->pass.nvictims,
                                now_ms, d->cfg.min_runtime_s, &plan, &p, &err);
        if (rc < 0) {
            mu_log_limited(MU_LOG_ERROR, "sched", "preempt", 10, "preemption planning: %s",
                           err.msg);
            break;
        }
        for (int i = from; i < n; i++) {
            int64_t at = d->pass.pjobs[i].retry_at_ms;
            uint64_t mono = mu_time_mono_ms() + (uint64_t)(at - now_ms);
            if (at > now_ms && (retry_mono_ms == 0 || mono < retry_mono_ms))
                retry_mono_ms = mono; /* plan again the moment the first victim comes of age */
        }
        if (rc == 0 || plan.nvictims == 0)
            break; /* no plan, or the plan in flight: its victims are still stopping */
        p += from;
        {
            struct d_job *j = d->pass.who[p];
            int nreclaim = victims_stop(d, j, &plan);
            if (j->victims_stopping > 0) {
                plan_reason(d, j, &plan, nreclaim, now_ms / 1000);
                break;
            }
        }
        from = p + 1; /* no stop written (Redis): the next job may plan */
    }
    free(slots);
    return retry_mono_ms;
}

int d_preempt_preview(struct musterd *d,
                      const struct d_job *p,
                      int64_t now_ms,
                      struct sched_preempt_plan *plan,
                      struct sched_slot *slots)
{
    struct sched_request req;
    struct mu_err err;
    int rc;

    memset(plan, 0, sizeof(*plan));
    d_preempt_collect(d, now_ms);
    if (d->pass.nvictims == 0) {
        mu_strlcpy(plan->reason, "no gang runs: there is nothing to preempt", sizeof(plan->reason));
        return 0;
    }
    if (victims_for(d, p, &req) == 0) {
        mu_strlcpy(plan->reason, "its queue's quota admits it on no capacity type",
                   sizeof(plan->reason));
        return 0;
    }
    plan->victims = d->pass.plan_victims;
    plan->slots = slots;
    rc = sched_preempt_plan(d->cluster, &req, p->spec.priority, now_ms, d->cfg.min_runtime_s,
                            d->pass.victims, d->pass.nvictims, plan, &err);
    if (rc < 0)
        (void)mu_snprintf(plan->reason, sizeof(plan->reason), "planning failed: %s", err.msg);
    return rc;
}

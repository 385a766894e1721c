/* SPDX-License-Identifier: MIT */
/*
 * One scheduling pass of the replayed policy (internal.h).  `muster` and `node-drain` are
 * musterd's pass, step for step as scheduler/d_pass.c drives the core: the running gangs with
 * their expected ends (a stopping gang ends within kill_grace_s), the pending jobs in the
 * fair-share order kept across passes (core/order.c) over the queues' and their users' decayed
 * usage plus what their running gangs still commit, the core's pass in steps that stops once no
 * later job can change it (core/shapes.c, sched_pass_settled), then the pass's one preemption
 * (sched_preempt_first) with the victims built as d_preempt.c builds them.  Queue quotas, cohorts
 * and borrowing hold under every policy, through the core's quota table (sched_quota_queues_init,
 * the pass's quota, sched_quota_preempt_prepare), as in musterd.  `backfill` is the same pass in
 * arrival order without preemption; `fifo` places jobs in arrival order until the first that
 * does not fit.  Every policy places with the core's sched_place, so the policies differ in
 * order, reservation, preemption and spot handling, not in how a gang is fitted into the
 * topology.
 */
#include "sim/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static int scratch(struct sim_engine *e)
{
    size_t n = (size_t)e->njobs + 1;
    size_t tasks = SIM_MAX_TASKS;
    if (e->pj)
        return 0;
    e->pj = calloc(n, sizeof(*e->pj));
    e->dec = calloc(n, sizeof(*e->dec));
    e->run = calloc(n, sizeof(*e->run));
    e->vic = calloc(n, sizeof(*e->vic));
    e->who = calloc(n, sizeof(int));
    e->vic_job = calloc(n, sizeof(int));
    e->pp = calloc(n, sizeof(*e->pp));
    e->plan_victims = calloc(n, sizeof(int));
    e->plan_slots = calloc(tasks, sizeof(*e->plan_slots));
    if (!e->pj || !e->dec || !e->run || !e->vic || !e->who || !e->vic_job || !e->pp
        || !e->plan_victims || !e->plan_slots)
        return mu_errf(e->err, MU_E_NOMEM, "out of memory for a pass");
    return 0;
}

/* The expected end of a gang holding resources, as d_pass.c's running_collect says it. */
static int64_t running_end_s(const struct sim_engine *e, int j)
{
    const struct sim_sjob *s = &e->sj[j];
    if (s->state == SJ_STOPPING)
        return sim_now_s(e) + e->s->cfg.kill_grace_s;
    return s->att_start_ms / 1000 + sim_job_run_s(e, j); /* d_job_end_s */
}

/* Every gang holding resources into e->run; committed[q] and e->users[u].committed get what
 * they still expect to use (with each user's usage, for the order). */
static int running_collect(struct sim_engine *e, double *committed)
{
    for (int u = 0; committed && u < e->nusers; u++)
        e->users[u] = (struct sched_share_user){ .usage = e->user_usage[u] };
    for (int i = 0; i < e->nrunning; i++) {
        int j = e->running[i];
        int64_t end_s = running_end_s(e, j);
        double gpu_s;
        e->run[i].req = &e->sj[j].req;
        e->run[i].slots = e->sj[j].slots;
        e->run[i].end_s = end_s;
        if (!committed)
            continue;
        gpu_s = sched_share_gpu_s(e->jobs[j].tasks, e->jobs[j].gpus_per_task, end_s - sim_now_s(e));
        committed[e->jobs[j].queue] += gpu_s;
        e->users[e->jobs[j].user].committed += gpu_s;
    }
    return e->nrunning;
}

/* Starts an iteration of the pending jobs in musterd's fair-share order (d_pass.c order_begin). */
static int order_begin(struct sim_engine *e, const double *committed)
{
    struct sched_share_queue queues[SCHED_MAX_QUEUES];
    const struct cfg *cfg = &e->s->cfg;
    int nqueues = cfg->nqueues + 1;

    for (int q = 0; q < nqueues; q++)
        queues[q] = (struct sched_share_queue){
            .weight = q < cfg->nqueues ? cfg->queues[q].weight : 1,
            .usage = e->usage[q],
            .committed = committed[q],
        };
    return sched_order_begin(e->order, queues, nqueues, e->users, e->nusers, e->err);
}

/* The pass's quota table (d_pass.c d_quota_queues and running_collect): the config's queues
 * from the core's builder, each charged with what its gangs hold in the capacity type they run
 * on, stopping ones included. */
static void quota_collect(struct sim_engine *e)
{
    sched_quota_queues_init(e->quota, e->qcfg, e->nquota - 1);
    for (int i = 0; i < e->nrunning; i++) {
        int j = e->running[i];
        int pool = sched_cluster_node_spec(e->c, e->sj[j].slots[0].node)->pool;
        sched_quota_charge(e->quota, e->nquota, e->jobs[j].queue,
                           (int)sched_cluster_pool(e->c, pool)->capacity,
                           e->jobs[j].tasks * e->jobs[j].gpus_per_task);
    }
}

/* Arrival order until the first job that does not fit, or that its queue's quota holds back. */
static int fifo_pass(struct sim_engine *e)
{
    char why[SCHED_REASON_MAX];
    while (e->npending > 0) { /* a start takes the job out of the list */
        int j = e->pending[0];
        int q = e->jobs[j].queue;
        int gpus = e->jobs[j].tasks * e->jobs[j].gpus_per_task;
        struct sim_sjob *s = &e->sj[j];
        struct sched_request r;
        int cap;
        if (sched_quota_filter(e->quota, e->nquota, q, &s->req, &r) == 0
            || sched_place(e->c, &r, sim_now_s(e), s->slots, why, sizeof(why)) != 1)
            break; /* the head blocks everyone behind it */
        sched_cluster_commit(e->c, &s->req, s->slots);
        cap = (int)sched_cluster_pool(e->c, sched_cluster_node_spec(e->c, s->slots[0].node)->pool)
                  ->capacity;
        s->borrowed = sched_quota_admits(e->quota, e->nquota, q, cap, gpus) == SCHED_QUOTA_BORROWS;
        sched_quota_charge(e->quota, e->nquota, q, cap, gpus);
        if (sim_job_start(e, j) != 0)
            return -1;
    }
    return e->failed ? -1 : 0;
}

/* The victims as d_preempt.c builds them: every gang holding resources now.  Those before from
 * are in e->vic already (the gangs of this instant's pass keep their place in e->running). */
static int victims_collect(struct sim_engine *e, int from)
{
    for (int i = from; i < e->nrunning; i++) {
        int j = e->running[i];
        const struct sim_sjob *s = &e->sj[j];
        bool ckpt = e->jobs[j].ckpt_interval_s > 0;
        int64_t saved_ms = sim_job_periodic_ms(e, j, sim_job_progress_ms(e, j, e->now_ms));
        struct sched_victim *v = &e->vic[i];
        v->req = &s->req;
        v->slots = s->slots;
        v->priority = e->jobs[j].priority;
        v->preemptible = e->jobs[j].preemptible && s->state == SJ_RUNNING;
        v->started_ms = s->att_start_ms;
        v->checkpoint_ms = saved_ms > 0 ? s->att_start_ms + s->overhead_ms + saved_ms : 0;
        v->grace_s = ckpt ? e->s->ckpt_write_s : e->s->cfg.kill_grace_s;
        v->end_s = s->state == SJ_STOPPING ? sim_now_s(e) + v->grace_s
                                           : s->att_start_ms / 1000 + sim_job_run_s(e, j);
        v->queue = e->jobs[j].queue;
        v->borrowed = s->borrowed;
        e->vic_job[i] = j;
    }
    return e->nrunning;
}

/* The pass's one preemption (sched_preempt_first, as d_pass.c asks for it): the victims it
 * plans stop, each with its checkpoint when it has one.  The first nvic victims were collected
 * before the pass started its gangs. */
static int preempt_first(struct sim_engine *e, int n, int nvic)
{
    struct sched_preempt_plan plan;
    int p;
    int rc;

    nvic = victims_collect(e, nvic);
    for (int i = 0; i < n; i++) {
        int j = e->who[i];
        e->pp[i] = (struct sched_preempt_job){ .req = &e->sj[j].req,
                                               .priority = e->jobs[j].priority,
                                               .queue = e->jobs[j].queue,
                                               .waiting = e->sj[j].victims_stopping > 0 };
    }
    memset(&plan, 0, sizeof(plan));
    plan.victims = e->plan_victims;
    plan.slots = e->plan_slots;
    rc = sched_preempt_first(e->c, e->quota, e->nquota, e->pp, e->dec, n, e->vic, nvic, e->now_ms,
                             e->s->cfg.min_runtime_s, &plan, &p, e->err);
    if (rc < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (e->pp[i].retry_at_ms > 0)
            sim_wake_at(e, e->pp[i].retry_at_ms); /* a victim comes of age then */
    for (int i = 0; rc == 1 && i < plan.nvictims; i++) {
        int j = e->vic_job[plan.victims[i]];
        bool ckpt = e->jobs[j].ckpt_interval_s > 0;
        int64_t p_ms = sim_job_progress_ms(e, j, e->now_ms);
        int64_t grace_ms = 1000LL * (ckpt ? e->s->ckpt_write_s : e->s->cfg.kill_grace_s);
        sim_job_stop(e, j, e->now_ms + grace_ms, ckpt ? p_ms : 0, SIM_CAUSE_PREEMPT);
        e->sj[j].preempted_for = e->who[p];
        e->sj[e->who[p]].victims_stopping++;
        e->res->st.preemptions++;
    }
    return 0;
}

/* The pass's next job: e->who[i] of the npass given (backfill), or the order's next (muster,
 * node-drain); -1 at the end. */
static int pass_next(struct sim_engine *e, int i, int npass, bool ordered)
{
    void *h;
    if (!ordered)
        return i < npass ? e->who[i] : -1;
    h = sched_order_next(e->order);
    return h ? (int)((intptr_t)h - 1) : -1;
}

/*
 * The core's pass in steps (sched_pass_step), as d_pass.c steps it, with the nrunning gangs
 * running_collect put in e->run, over the first npass jobs of e->who or, ordered, the fair-share
 * order (which then fills e->who), starting what it placed;
 * then, with preemption (ordered), one plan.  Ordered, it stops once no later job could change it
 * (sched_pass_may_stop): musterd asks the same after 1,000 jobs (for its reasons' sake), which
 * starts and plans the same gangs.  Nothing here reads a waiting job's reason, so a job the stop
 * rule says would only wait is not stepped at all (skip_waiting).
 */
static int core_pass(struct sim_engine *e, int nrunning, int npass, bool ordered)
{
    struct sched_shape_span span;
    struct sched_pass_stop stop = { .nshapes = -1 };
    int n = 0;
    int j;

    if (ordered) /* the rule musterd stops by, from the first job: the decisions are the same */
        stop = (struct sched_pass_stop){
            .shapes = e->shape_list,
            .left = e->shape_left,
            .nshapes = sched_shapes_list(e->shapes, e->shape_list, e->shape_left,
                                         e->s->cfg.default_time_limit_s, &span),
            .span = &span,
            .order = e->order,
            .quota = e->quota,
            .nquota = e->nquota,
            .victims = e->vic,
            .nvictims = victims_collect(e, 0),
            .preempts = true,
            .skip_waiting = true, /* no reasons here */
        };
    if (sched_pass_open(e->c, e->quota, e->nquota, npass, e->run, nrunning, sim_now_s(e), e->err)
        != 0)
        return -1;
    while ((j = pass_next(e, n, npass, ordered)) >= 0) {
        struct sim_sjob *s = &e->sj[j];
        sched_pass_stop_taken(&stop, s->shape);
        if (s->victims_stopping == 0 && sched_pass_stop_skips(&stop, s->shape))
            continue; /* it would only wait */
        e->who[n] = j;
        e->pj[n] = (struct sched_pass_job){ .req = &s->req,
                                            .run_s = sim_job_run_s(e, j),
                                            .slots = s->slots,
                                            .queue = e->jobs[j].queue };
        if (sched_pass_step(e->c, &e->pj[n], &e->dec[n]) == 0
            && sched_pass_may_stop(e->c, &stop, n)) {
            n++;
            break;
        }
        n++;
    }
    (void)sched_pass_close(e->c);
    for (int i = 0; i < n; i++) {
        if (e->dec[i].verdict != SCHED_START)
            continue;
        e->sj[e->who[i]].borrowed = e->dec[i].borrowed;
        if (sim_job_start(e, e->who[i]) != 0)
            return -1;
    }
    if (ordered && preempt_first(e, n, stop.nvictims) != 0)
        return -1;
    return e->failed ? -1 : 0;
}

int sim_pass(struct sim_engine *e)
{
    double committed[SCHED_MAX_QUEUES] = { 0 };
    int nrunning;

    if (scratch(e) != 0)
        return -1;
    quota_collect(e);
    switch (e->policy) {
    case SIM_FIFO:
        return fifo_pass(e);
    case SIM_BACKFILL:
        memcpy(e->who, e->pending, (size_t)e->npending * sizeof(int));
        return core_pass(e, running_collect(e, NULL), e->npending, false);
    case SIM_NODE_DRAIN:
    case SIM_MUSTER:
    case SIM_NPOLICIES:
        break;
    }
    nrunning = running_collect(e, committed);
    if (order_begin(e, committed) != 0)
        return -1;
    return core_pass(e, nrunning, e->npending, true);
}

/* SPDX-License-Identifier: MIT */
/*
 * A job's life in the replay: an attempt starts (its GPUs counted, its end or time limit pushed
 * as an event), stops (lost work charged to its cause), ends or goes back to the pending jobs,
 * and the pending set itself (arrival order, and under muster and node-drain the fair-share order
 * and the shapes).  engine.c's events and policy.c's passes both drive it; it calls neither, so
 * the three files call one way (scripts/calls.sh).
 */
#include "sim/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

int64_t sim_job_run_s(const struct sim_engine *e, int j)
{
    return sched_time_limit_s(e->jobs[j].time_limit_s, e->s->cfg.default_time_limit_s);
}

int64_t sim_job_progress_ms(const struct sim_engine *e, int j, int64_t t_ms)
{
    const struct sim_sjob *s = &e->sj[j];
    int64_t p = t_ms - s->att_start_ms - s->overhead_ms;
    int64_t left = e->jobs[j].duration_s * SIM_MS - s->done_ms;
    return p < 0 ? 0 : p > left ? left : p;
}

int64_t sim_job_periodic_ms(const struct sim_engine *e, int j, int64_t progress_ms)
{
    int64_t iv = e->jobs[j].ckpt_interval_s * SIM_MS;
    return iv > 0 ? progress_ms / iv * iv : 0;
}

static double job_gpus(const struct sim_engine *e, int j)
{
    return (double)e->jobs[j].tasks * e->jobs[j].gpus_per_task;
}

/* Accounting and, in check mode, our own record of the GPUs, for a commit (+1) or release. */
static int slots_account(struct sim_engine *e, int j, int sign)
{
    const struct sim_sjob *s = &e->sj[j];
    for (int t = 0; t < s->req.tasks; t++) {
        int n = s->slots[t].node;
        int g = s->req.gpus_per_task;
        int pool = sched_cluster_node_spec(e->c, n)->pool;
        bool ready = sched_cluster_node_state(e->c, n) == SCHED_NODE_READY;
        if (e->mask) {
            uint64_t m = s->slots[t].gpus;
            bool bad = sign > 0 ? (e->mask[n] & m) != 0 : (e->mask[n] & m) != m;
            if (bad || __builtin_popcountll(m) != g) {
                e->failed = true;
                return mu_errf(e->err, MU_E_STATE,
                               "check: t=%llds job line %d: GPUs 0x%llx of node n%d %s",
                               (long long)sim_now_s(e), e->jobs[j].line, (unsigned long long)m, n,
                               sign > 0 ? "committed twice" : "released but not committed");
            }
            e->mask[n] ^= m;
        }
        if (sign > 0 && e->node_used[n] == 0)
            e->busy_nodes[pool]++;
        e->node_used[n] += sign * g;
        if (sign < 0 && e->node_used[n] == 0)
            e->busy_nodes[pool]--;
        e->used_gpus += sign * g;
        if (ready)
            e->used_ready += sign * g;
    }
    e->held_gpus[e->jobs[j].queue] += sign * job_gpus(e, j);
    e->user_held[e->jobs[j].user] += sign * job_gpus(e, j);
    return 0;
}

int sim_job_start(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    const struct sim_job *tj = &e->jobs[j];
    int64_t left = tj->duration_s * SIM_MS - s->done_ms;
    int64_t natural, limit_end;

    if (slots_account(e, j, +1) != 0)
        return -1;
    sim_pending_remove(e, j);
    s->state = SJ_RUNNING;
    s->head = false; /* as d_gang_start: first in its queue only until it starts */
    s->att_start_ms = e->now_ms;
    s->attempts++;
    s->overhead_ms = s->gen > 0 ? (int64_t)e->s->restart_s * SIM_MS : 0;
    s->run_idx = e->nrunning;
    e->running[e->nrunning++] = j;
    if (s->first_start_ms < 0) {
        s->first_start_ms = e->now_ms;
        s->first_cap =
            (int)sched_cluster_pool(e->c, sched_cluster_node_spec(e->c, s->slots[0].node)->pool)
                ->capacity;
        e->res->start_order[e->res->nstarted++] = j;
    }
    natural = e->now_ms + s->overhead_ms + left;
    /* A replay of a recorded run ends the job when the recorded one ended, in whichever attempt
     * runs then (a preempted gang of t2008 restarts and ends on its recorded instant). */
    if (tj->end_ms > e->now_ms)
        natural = tj->end_ms;
    /* Only a limit the trace gives stops a job: the pass plans with the default one, as musterd
     * does, but a replayed job without one ran as long as it ran.  A job past its limit ends
     * there (TIMEOUT, never requeued, as sched_react_time_limit says; no grace is modelled). */
    limit_end = sched_time_limit_end_ms(e->now_ms, tj->time_limit_s, 0);
    s->timed_out = limit_end < natural;
    return sim_event_push(e, s->timed_out ? limit_end : natural, SIM_EV_END, j, s->gen);
}

static int job_release(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    int last = e->running[--e->nrunning];
    sched_cluster_release(e->c, &s->req, s->slots);
    e->running[s->run_idx] = last;
    e->sj[last].run_idx = s->run_idx;
    s->run_idx = -1;
    e->dirty = true;
    return slots_account(e, j, -1);
}

void sim_job_stop(
    struct sim_engine *e, int j, int64_t release_ms, int64_t save_ms, enum sim_cause c)
{
    struct sim_sjob *s = &e->sj[j];
    double lost = (double)(release_ms - s->att_start_ms - save_ms) / SIM_MS;
    e->lost_gpu_s[c] += (lost > 0 ? lost : 0) * job_gpus(e, j);
    s->state = SJ_STOPPING;
    s->release_ms = release_ms;
    s->save_ms = save_ms;
    s->cause = c;
    (void)sim_event_push(e, release_ms, SIM_EV_STOPPED, j, s->gen);
}

void sim_job_end(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    if (job_release(e, j) != 0)
        return;
    /* the restart cost of this attempt is lost to whatever stopped the one before */
    e->lost_gpu_s[s->cause] += (double)s->overhead_ms / SIM_MS * job_gpus(e, j);
    s->state = SJ_DONE;
    s->end_ms = e->now_ms;
    e->left--;
}

/* A stopped gang goes back to the pending jobs, in arrival order, with what it saved. */
void sim_job_requeue(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    if (job_release(e, j) != 0)
        return;
    s->done_ms += s->save_ms;
    s->gen++;
    s->state = SJ_PENDING;
    s->head = s->cause == SIM_CAUSE_SPOT && e->policy == SIM_MUSTER;
    if (s->preempted_for >= 0 && e->sj[s->preempted_for].victims_stopping > 0)
        e->sj[s->preempted_for].victims_stopping--;
    s->preempted_for = -1;
    (void)sim_pending_add(e, j);
}

/* ---- the pending jobs ---- */

static bool uses_order(const struct sim_engine *e)
{
    return e->policy == SIM_MUSTER || e->policy == SIM_NODE_DRAIN;
}

/* Job j's key in the fair-share order (d_pending.c order_key): its index as the id, so jobs
 * equal in all else go by arrival. */
static struct sched_order_job order_key(const struct sim_engine *e, int j)
{
    return (struct sched_order_job){
        .queue = e->jobs[j].queue,
        .user = e->jobs[j].user,
        .priority = e->jobs[j].priority,
        .head_of_queue = e->sj[j].head,
        .submitted_ms = (uint64_t)e->jobs[j].submit_ms,
        .id = e->sj[j].id,
        .cost = sched_share_gpu_s(e->jobs[j].tasks, e->jobs[j].gpus_per_task, sim_job_run_s(e, j)),
    };
}

int sim_pending_add(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    int lo = 0;
    int hi = e->npending;

    while (lo < hi) { /* arrival order: a requeued job goes back to its place */
        int mid = (lo + hi) / 2;
        if (e->pending[mid] < j)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&e->pending[lo + 1], &e->pending[lo], (size_t)(e->npending - lo) * sizeof(int));
    e->pending[lo] = j;
    e->npending++;
    if (!uses_order(e))
        return 0;
    s->shape = sched_shapes_add(e->shapes, &s->req, false, e->jobs[j].priority,
                                e->jobs[j].preemptible, e->jobs[j].time_limit_s);
    s->okey = order_key(e, j);
    if (sched_order_add(e->order, &s->okey, (void *)((intptr_t)j + 1), e->err) != 0) {
        e->failed = true;
        return -1;
    }
    s->in_order = true;
    return 0;
}

void sim_pending_remove(struct sim_engine *e, int j)
{
    struct sim_sjob *s = &e->sj[j];
    int lo = 0;
    int hi = e->npending;

    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (e->pending[mid] < j)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < e->npending && e->pending[lo] == j) {
        memmove(&e->pending[lo], &e->pending[lo + 1], (size_t)(e->npending - lo - 1) * sizeof(int));
        e->npending--;
    }
    if (s->in_order) {
        sched_shapes_remove(e->shapes, s->shape);
        (void)sched_order_remove(e->order, &s->okey, (void *)((intptr_t)j + 1));
        s->in_order = false;
    }
}

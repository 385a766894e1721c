/* SPDX-License-Identifier: MIT */
/*
 * The pending jobs as a pass reads them (issue #15): the set d->pending (in no order, O(1) in and
 * out), each job's key in the fair-share order kept across passes (d->order, core/order.c), and
 * their shapes (d->shapes, core/shapes.c).  A pass over 100,000 queued jobs takes them in order
 * one at a time and stops once none of the shapes can start or take the reservation and no later
 * job could preempt: the rest of the queue cannot change it.  A key that cannot be added (no
 * memory) or may have changed (a reload) marks the order stale, and the next pass rebuilds it.
 * A pass (and musterctl why, counting a job's place) begins here: the running gangs and the
 * queues' and users' standings, then an iteration of the order (d_pending_begin).
 */
#include <stdlib.h>
#include <string.h>

#include "cfg_sched/cfg_sched.h"
#include "scheduler/d_job.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* j's key in the fair-share order, as of now. */
static struct sched_order_job order_key(const struct musterd *d, const struct d_job *j)
{
    return (struct sched_order_job){
        .queue = j->queue_idx,
        .user = MU_NEVER(!j->user) ? 0 : j->user->slot,
        .priority = j->spec.priority,
        .head_of_queue = j->head_of_queue,
        .submitted_ms = j->submitted_ms,
        .id = j->id,
        .cost = sched_share_gpu_s(j->spec.tasks, j->spec.gpus_per_task, d_job_run_s(d, j)),
    };
}

static void order_add(struct musterd *d, struct d_job *j)
{
    struct mu_err err;
    if (d->order_stale)
        return; /* the next pass adds every job */
    if (!d->order && !(d->order = sched_order_new())) {
        d->order_stale = true;
        return;
    }
    j->okey = order_key(d, j);
    if (sched_order_add(d->order, &j->okey, j, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "order", 10, "job=%s %s; rebuilding the order", j->id,
                       err.msg);
        d->order_stale = true;
        return;
    }
    j->in_order = true;
}

static void order_remove(struct musterd *d, struct d_job *j)
{
    if (j->in_order)
        (void)MU_NEVER(!sched_order_remove(d->order, &j->okey, j));
    j->in_order = false;
}

int d_pending_order_fresh(struct musterd *d, struct mu_err *err)
{
    if (!d->order_stale)
        return 0;
    if (!d->order && !(d->order = sched_order_new()))
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    sched_order_clear(d->order);
    for (int i = 0; i < d->npending; i++)
        d->pending[i]->in_order = false;
    for (int i = 0; i < d->npending; i++) {
        struct d_job *j = d->pending[i];
        j->okey = order_key(d, j);
        if (sched_order_add(d->order, &j->okey, j, err) != 0)
            return -1; /* still stale: the next pass tries again */
        j->in_order = true;
    }
    d->order_stale = false;
    return 0;
}

/* Grows the pass's users table to every user musterd knows; 0 or -1. */
static int users_scratch(struct musterd *d)
{
    if (d->usage.nusers > d->pass.cap_users) {
        int cap = d->usage.nusers * 2;
        struct sched_share_user *users = realloc(d->pass.users, (size_t)cap * sizeof(*users));
        if (!users)
            return -1;
        d->pass.users = users;
        d->pass.cap_users = cap;
    }
    return 0;
}

/* Grows d->pass.running to hold n gangs; 0 or -1. */
static int running_scratch(struct musterd *d, int n)
{
    if (n > d->pass.cap_running) {
        int cap = n * 2;
        struct sched_running *running = realloc(d->pass.running, (size_t)cap * sizeof(*running));
        if (!running)
            return -1;
        d->pass.running = running;
        d->pass.cap_running = cap;
    }
    return 0;
}

/* The gangs that hold resources now, with their expected ends, into d->pass.running; into
 * committed (by queue index) and d->pass.users (by user) the GPU-seconds each queue's and each
 * user's gangs are still expected to use; and into d->pass.quota what each queue uses. */
static int running_collect(struct musterd *d, int64_t now_s, double *committed)
{
    struct d_job *j;
    int n = 0;

    for (int u = 0; u < d->usage.nusers; u++)
        d->pass.users[u] = (struct sched_share_user){ .usage = d->usage.users[u]->gpu_s };

    for (int k = d->nlive; k-- > 0;) {
        if (k >= d->nlive)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->live[k];
        int64_t end_s;
        double gpu_s;
        /* Quota counts every gang that holds or may hold GPUs: one being adopted after a
         * restart (its first capacity type until its nodes say), one being stopped. */
        if (j->placed || j->adopting) {
            int cap = d_job_capacity(d, j);
            sched_quota_charge(d->pass.quota, SCHED_MAX_QUEUES, j->queue_idx,
                               cap >= 0 ? cap : (int)j->req.capacity[0],
                               j->spec.tasks * j->spec.gpus_per_task);
        }
        if (!j->placed || !d_job_fully_committed(j))
            continue; /* a partly adopted gang is being stopped; its GPUs free soon */
        /* An attempt being stopped ends within the kill grace; a running one at its limit. */
        end_s = j->end != D_END_NONE ? now_s + d->cfg.kill_grace_s : d_job_end_s(d, j);
        d->pass.running[n].req = &j->req;
        d->pass.running[n].slots = j->slots;
        d->pass.running[n].end_s = end_s;
        gpu_s = sched_share_gpu_s(j->spec.tasks, j->spec.gpus_per_task, end_s - now_s);
        committed[j->queue_idx] += gpu_s;
        if (!MU_NEVER(!j->user))
            d->pass.users[j->user->slot].committed += gpu_s;
        n++;
    }
    return n;
}

void d_quota_queues(const struct musterd *d, struct sched_quota_queue *qs)
{
    struct sched_quota_config cfg[SCHED_MAX_QUEUES];
    int n = cfg_sched_quotas(&d->cfg, cfg); /* the same as muster-sim's */

    sched_quota_queues_init(qs, cfg, n); /* the rule is the core's, shared with muster-sim */
}

/* Starts an iteration of the pending jobs in the fair-share order (core/order.c: kept across
 * passes in d->order, produced lazily) for the queues' and users' standings now; 0, or -1 with
 * err. */
static int order_begin(struct musterd *d, const double *committed, struct mu_err *err)
{
    struct sched_share_queue queues[SCHED_MAX_QUEUES];
    int nqueues = d->cfg.nqueues + 1; /* the last: queues no longer configured */

    if (d_pending_order_fresh(d, err) != 0)
        return -1;
    for (int q = 0; q < nqueues; q++) {
        queues[q] = (struct sched_share_queue){
            .weight = q < d->cfg.nqueues ? d->cfg.queues[q].weight : 1,
            .usage = d->usage.gpu_s[q],
            .committed = committed[q],
        };
    }
    return sched_order_begin(d->order, queues, nqueues, d->pass.users, d->usage.nusers, err);
}

int d_pending_begin(struct musterd *d, int64_t now_s, int *nrunning, struct mu_err *err)
{
    double committed[SCHED_MAX_QUEUES] = { 0 };

    *nrunning = 0;
    if (running_scratch(d, d->nlive) != 0 || users_scratch(d) != 0)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    d_quota_queues(d, d->pass.quota);
    *nrunning = running_collect(d, now_s, committed);
    return order_begin(d, committed, err);
}

int d_pending_standing(
    struct musterd *d, const struct d_job *j, int *ahead, int *ahead_other, struct mu_err *err)
{
    int ahead_in[SCHED_MAX_QUEUES] = { 0 };
    struct sched_quota_queue quota[SCHED_MAX_QUEUES];
    const struct d_job *k;
    int nrunning;
    int rc;

    *ahead = 0;
    *ahead_other = 0;
    /* The last pass's quotas stay for musterctl why's other answers. */
    memcpy(quota, d->pass.quota, sizeof(quota));
    rc = d_pending_begin(d, (int64_t)(mu_time_wall_ms() / 1000), &nrunning, err);
    memcpy(d->pass.quota, quota, sizeof(quota));
    if (rc != 0)
        return -1;
    while ((k = sched_order_next(d->order)) != NULL && k != j) {
        if (k->held)
            continue;
        (*ahead)++;
        ahead_in[k->queue_idx]++;
    }
    if (!k)
        return mu_errf(err, MU_E_NOTFOUND, "job %s is not in the order", j->id);
    *ahead_other = *ahead - ahead_in[j->queue_idx];
    return 0;
}

void d_pending_order_stale(struct musterd *d)
{
    d->order_stale = true;
}

void d_pending_free(struct musterd *d)
{
    free(d->pending);
    d->pending = NULL;
    d->npending = d->cap_pending = 0;
    sched_order_free(d->order);
    d->order = NULL;
}

void d_job_pending_add(struct musterd *d, struct d_job *j)
{
    if (MU_NEVER(j->pending_at))
        return;
    if (d->npending == d->cap_pending) {
        int cap = d->cap_pending ? d->cap_pending * 2 : 256;
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_job **p = realloc(d->pending, (size_t)cap * sizeof(*p));
        if (!p) {
            mu_log(MU_LOG_ERROR, "sched", "job=%s out of memory queueing job", j->id);
            return;
        }
        d->pending = p;
        d->cap_pending = cap;
    }
    d->pending[d->npending++] = j;
    j->pending_at = d->npending;
    j->shape_at = sched_shapes_add(&d->shapes, &j->req, j->spec.topo_relax_after_s > 0,
                                   j->spec.priority, j->spec.preemptible, j->spec.time_limit_s);
    order_add(d, j);
    d->dirty = true;
}

void d_job_pending_remove(struct musterd *d, struct d_job *j)
{
    struct d_job *last;
    if (!j->pending_at)
        return;
    last = d->pending[--d->npending];
    d->pending[j->pending_at - 1] = last;
    last->pending_at = j->pending_at;
    j->pending_at = 0;
    sched_shapes_remove(&d->shapes, j->shape_at);
    j->shape_at = 0;
    order_remove(d, j);
    d_job_reason_late_drop(d, j);
}

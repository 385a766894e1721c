/* SPDX-License-Identifier: MIT */
/*
 * The pending jobs as a pass reads them (issue #15): the set d->pending (in no order, O(1) in and
 * out), each job's key in the fair-share order kept across passes (d->order, core/order.c), and
 * their shapes (d->shapes, core/shapes.c).  A pass over 100,000 queued jobs takes them in order
 * one at a time and stops once none of the shapes can start or take the reservation and no later
 * job could preempt: the rest of the queue cannot change it.  A key that cannot be added (no
 * memory) or may have changed (a reload) marks the order stale, and the next pass rebuilds it.
 */
#include <stdlib.h>
#include <string.h>

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

void d_pending_order_stale(struct musterd *d)
{
    d->order_stale = true;
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
    j->ahead = d->npending - 1; /* until a pass reaches it: behind every job there */
    j->ahead_other = 0;
    j->shape_at = sched_shapes_add(&d->shapes, &j->req, j->spec.topo_relax_after_s > 0,
                                   j->spec.priority, j->spec.preemptible);
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

/* SPDX-License-Identifier: MIT */
/*
 * The shapes of a queue (issue #15): the distinct requests of the pending jobs, counted as jobs
 * join and leave it, so that a pass over 100,000 queued jobs can stop once none of the shapes can
 * start or take the reservation (sched_pass_settled) and no later job could preempt
 * (sched_pass_rest_may_preempt): the rest of the queue cannot change the pass.  A shape is the
 * widest request its jobs may make in a pass (its task count, its required level dropped when it
 * relaxes with time, no avoided nodes: a pass only narrows a request) with their priority and
 * preemptibility.  A fixed table, no allocation: past SCHED_SHAPES_MAX shapes, or with a GPU type
 * too long to keep, a job is not counted, and the list says "unknown" until it leaves.  The list
 * gives each shape's job count by handle, so that a pass counts down the jobs it has taken
 * (sched_pass_stop_taken) and asks only of shapes that still have one.  musterd
 * (scheduler/d_pending.c) and muster-sim (sim/policy.c) keep one each.
 */
#include <string.h>

#include "core/internal.h"

#include "common/mu_banned.h"

static bool shape_same(const struct sched_shape *s,
                       const struct sched_request *b,
                       int64_t priority,
                       bool preemptible)
{
    const struct sched_request *a = &s->req;
    return a->tasks == b->tasks && a->gpus_per_task == b->gpus_per_task
           && a->cpus_per_task == b->cpus_per_task && a->memory_mb_per_task == b->memory_mb_per_task
           && a->ncapacity == b->ncapacity && a->capacity[0] == b->capacity[0]
           && a->capacity[1] == b->capacity[1] && a->required_level == b->required_level
           && a->slice_profile == b->slice_profile && a->gpu_milli == b->gpu_milli
           && s->priority == priority && s->preemptible == preemptible
           && sched_type_same(a->gpu_type, b->gpu_type);
}

/* Notes a job's time limit (0: the default) in its shape's bounds. */
static void limit_note(struct sched_shape *e, int64_t time_limit_s)
{
    if (time_limit_s <= 0)
        e->some_default = true;
    else if (time_limit_s < e->min_limit_s)
        e->min_limit_s = time_limit_s;
}

int sched_shapes_add(struct sched_shapes *s,
                     const struct sched_request *r,
                     bool relaxes,
                     int64_t priority,
                     bool preemptible,
                     int64_t time_limit_s)
{
    struct sched_request w = *r; /* widest */
    int free_at = -1;

    w.navoid = 0;
    w.avoid = NULL;
    w.preferred_level = -1;
    if (relaxes)
        w.required_level = -1;
    for (int i = 0; i < s->n; i++) {
        struct sched_shape *e = &s->e[i];
        if (e->count > 0 && shape_same(e, &w, priority, preemptible)) {
            e->count++;
            limit_note(e, time_limit_s);
            return i + 1;
        }
        if (e->count == 0 && free_at < 0)
            free_at = i;
    }
    if (free_at < 0 && s->n < SCHED_SHAPES_MAX)
        free_at = s->n++;
    if (free_at < 0 || (w.gpu_type && strlen(w.gpu_type) >= sizeof(s->e[0].gpu_type))) {
        s->untracked++;
        return -1;
    }
    {
        struct sched_shape *e = &s->e[free_at];
        e->req = w;
        if (w.gpu_type) {
            memcpy(e->gpu_type, w.gpu_type, strlen(w.gpu_type) + 1);
            e->req.gpu_type = e->gpu_type;
        }
        e->priority = priority;
        e->preemptible = preemptible;
        e->count = 1;
        e->min_limit_s = INT64_MAX;
        e->some_default = false;
        limit_note(e, time_limit_s);
    }
    return free_at + 1;
}

void sched_shapes_remove(struct sched_shapes *s, int handle)
{
    if (handle < 0 && s->untracked > 0)
        s->untracked--;
    else if (handle > 0 && handle <= s->n && s->e[handle - 1].count > 0)
        s->e[handle - 1].count--;
}

int sched_shapes_list(const struct sched_shapes *s,
                      struct sched_request *out,
                      struct sched_shape_left *left,
                      int64_t default_run_s,
                      struct sched_shape_span *span)
{
    *span = (struct sched_shape_span){ .max_priority = INT64_MIN };
    if (s->untracked > 0)
        return -1;
    for (int i = 0; i < s->n; i++) {
        const struct sched_shape *e = &s->e[i];
        out[i] = e->req;
        left[i].jobs = e->count;
        /* A run of 0 or less never ends by a time (sched_done_by): it lowers no bound. */
        left[i].min_run_s = e->some_default && default_run_s > 0 && default_run_s < e->min_limit_s
                                ? default_run_s
                                : e->min_limit_s;
        if (e->count == 0)
            continue;
        if (e->priority > span->max_priority)
            span->max_priority = e->priority;
        if (e->preemptible && (!span->any_preemptible || e->priority < span->min_preemptible)) {
            span->min_preemptible = e->priority;
            span->any_preemptible = true;
        }
    }
    return s->n;
}

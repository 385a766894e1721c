/* SPDX-License-Identifier: MIT */
/*
 * The distinct requests of the pending jobs, counted as jobs join and leave d->pending (issue
 * #15).  A pass over 100,000 queued jobs in a few shapes stops once none of these shapes can
 * start or take the reservation (sched_pass_settled): the rest of the queue cannot change it,
 * so the pass need not look at it.  Each shape is the widest request its jobs may make in a
 * pass: its task count, its required level dropped when it relaxes with time, no avoided nodes
 * (the pass only narrows a request).  Past D_SHAPES_MAX shapes, or with a GPU type too long to
 * keep, a job is not counted and every pass looks at the whole queue until it leaves.
 */
#include <string.h>

#include "scheduler/d_job.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* j's widest request, into *r (its GPU type still j's). */
static void shape_of(const struct d_job *j, struct sched_request *r)
{
    *r = j->req;
    r->navoid = 0;
    r->avoid = NULL;
    r->preferred_level = -1;
    if (j->spec.topo_relax_after_s > 0)
        r->required_level = -1;
}

static bool shape_same(const struct sched_request *a, const struct sched_request *b)
{
    return a->tasks == b->tasks && a->gpus_per_task == b->gpus_per_task
           && a->cpus_per_task == b->cpus_per_task && a->memory_mb_per_task == b->memory_mb_per_task
           && a->ncapacity == b->ncapacity && a->capacity[0] == b->capacity[0]
           && a->capacity[1] == b->capacity[1] && a->required_level == b->required_level
           && a->slice_profile == b->slice_profile && a->gpu_milli == b->gpu_milli
           && strcmp(a->gpu_type ? a->gpu_type : "", b->gpu_type ? b->gpu_type : "") == 0;
}

void d_shape_add(struct musterd *d, struct d_job *j)
{
    struct sched_request r;
    int free_at = -1;

    if (MU_NEVER(j->shape_at != 0))
        return;
    shape_of(j, &r);
    for (int i = 0; i < d->nshapes; i++) {
        struct d_shape *s = &d->shapes[i];
        if (s->count > 0 && shape_same(&s->req, &r)) {
            s->count++;
            j->shape_at = i + 1;
            return;
        }
        if (s->count == 0 && free_at < 0)
            free_at = i;
    }
    if (free_at < 0 && d->nshapes < D_SHAPES_MAX)
        free_at = d->nshapes++;
    if (free_at < 0 || (r.gpu_type && strlen(r.gpu_type) >= sizeof(d->shapes[0].gpu_type))) {
        j->shape_at = -1;
        d->shapes_untracked++;
        return;
    }
    {
        struct d_shape *s = &d->shapes[free_at];
        s->req = r;
        if (r.gpu_type) {
            mu_strlcpy(s->gpu_type, r.gpu_type, sizeof(s->gpu_type));
            s->req.gpu_type = s->gpu_type;
        }
        s->count = 1;
        j->shape_at = free_at + 1;
    }
}

void d_shape_remove(struct musterd *d, struct d_job *j)
{
    if (j->shape_at < 0)
        d->shapes_untracked--;
    else if (j->shape_at > 0 && !MU_NEVER(d->shapes[j->shape_at - 1].count <= 0))
        d->shapes[j->shape_at - 1].count--;
    j->shape_at = 0;
}

int d_shape_list(struct musterd *d, struct sched_request *out)
{
    int n = 0;
    if (d->shapes_untracked > 0)
        return -1;
    for (int i = 0; i < d->nshapes; i++) {
        if (d->shapes[i].count > 0)
            out[n++] = d->shapes[i].req;
    }
    return n;
}

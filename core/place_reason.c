/* SPDX-License-Identifier: MIT */
/*
 * Why a placement failed, in words (sched_fail_format): the reason a pending job shows in
 * `musterctl jobs` and `why`, from the failure place.c's search left (struct sched_fail) and the
 * cluster it searched.  Apart from the search because it reads the failure only, and because it
 * runs once per pending job per pass: it appends pieces to a buffer rather than calling snprintf.
 */
#include "core/internal.h"

#include <string.h>

#include "common/mu_banned.h"

/*
 * Reasons are built by appending pieces: a pass formats one per pending job, and 10,000 calls
 * to snprintf would cost more than the whole search they report on.
 */
struct sbuf {
    char *p;
    size_t left; /* room including the NUL; 0 = nothing can be written */
};

static void sb_str(struct sbuf *b, const char *s)
{
    size_t n;
    if (!b->left)
        return;
    n = strlen(s);
    if (n > b->left - 1)
        n = b->left - 1;
    memcpy(b->p, s, n);
    b->p += n;
    b->left -= n;
    *b->p = '\0';
}

static void sb_int(struct sbuf *b, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[n++] = '-';
    while (n && b->left > 1) {
        *b->p++ = tmp[--n];
        b->left--;
    }
    if (b->left)
        *b->p = '\0';
}

static void sb_duration(struct sbuf *b, int64_t s)
{
    char in[24];
    mu_duration_format(s, in, sizeof(in));
    sb_str(b, in);
}

/* "4x8 GPUs" or "4 tasks": r's shape, tasks of them. */
static void sb_shape(struct sbuf *b,
                     const struct sched_cluster *c,
                     const struct sched_request *r,
                     int tasks,
                     bool unit)
{
    if (r->gpu_milli > 0) {
        /* "4 x 500m GPU": shares of a GPU, in thousandths */
        sb_int(b, tasks);
        sb_str(b, " x ");
        sb_int(b, r->gpu_milli);
        sb_str(b, "m GPU");
    } else if (r->slice_profile > 0) {
        /* "4 x 3g.40gb", "2x3 3g.40gb": one profile, so the name is the unit */
        sb_int(b, tasks);
        if (r->gpus_per_task > 1) {
            sb_str(b, "x");
            sb_int(b, r->gpus_per_task);
            sb_str(b, " ");
        } else {
            sb_str(b, " x ");
        }
        sb_str(b, c->profiles[r->slice_profile]);
    } else if (r->gpus_per_task > 0) {
        sb_int(b, tasks);
        sb_str(b, "x");
        sb_int(b, r->gpus_per_task);
        if (unit)
            sb_str(b, " GPUs");
    } else {
        if (!unit)
            sb_str(b, "room for ");
        sb_int(b, tasks);
        if (unit)
            sb_str(b, tasks == 1 ? " task" : " tasks");
    }
}

static const char *capacity_name(enum sched_capacity cap)
{
    return cap == SCHED_SPOT ? "spot" : "on-demand";
}

static void sb_caps(struct sbuf *b, const struct sched_request *r)
{
    sb_str(b, capacity_name(r->capacity[0]));
    if (r->ncapacity > 1) {
        sb_str(b, " or ");
        sb_str(b, capacity_name(r->capacity[1]));
    }
}

/* The end of every "never" reason: nothing running or cooling down would make room. */
#define UNTIL_NODES_JOIN " (cannot fit until nodes join)"

/*
 * A capacity failure on the idle view of today's nodes: what is largest there, or the cap that
 * forbids it.  The words say "until nodes join" (an autoscaler may add some), not "never".
 */
static void sb_never(struct sbuf *b,
                     const struct sched_cluster *c,
                     const struct sched_request *r,
                     const struct sched_fail *f)
{
    const char *lname = sched_cluster_level_name(c, r->required_level);

    if (f->capped_pool >= 0 && f->best_uncapped >= r->tasks) {
        const struct sched_pool *p = &c->pools[f->capped_pool];
        sb_str(b, "pool ");
        sb_str(b, p->name);
        sb_str(b, " capped at ");
        sb_int(b, p->max_gpus);
        sb_str(b, " GPUs; needs ");
        sb_shape(b, c, r, r->tasks, true);
        sb_str(b, ", more than the cap allows (cannot fit until the cap is raised)");
        return;
    }
    sb_str(b, "needs ");
    sb_shape(b, c, r, r->tasks, true);
    if (lname) {
        sb_str(b, " in one ");
        sb_str(b, lname);
        if (f->best == 0) {
            sb_str(b, "; no ");
            sb_str(b, lname);
            sb_str(b, " can take a task");
        } else {
            sb_str(b, "; the largest ");
            sb_str(b, lname);
            sb_str(b, " has ");
            if (r->required_level < c->nlevels) {
                sb_int(b, f->best_nodes);
                sb_str(b, f->best_nodes == 1 ? " node (" : " nodes (");
                sb_shape(b, c, r, f->best, false);
                sb_str(b, ")");
            } else {
                sb_shape(b, c, r, f->best, false); /* one node: its size is the whole story */
            }
        }
    } else {
        sb_str(b, " on ");
        sb_caps(b, r);
        if (r->gpus_per_task > 0) {
            sb_str(b, "; only ");
            sb_shape(b, c, r, f->best, false);
            sb_str(b, " exist");
        } else {
            sb_str(b, "; only room for ");
            sb_shape(b, c, r, f->best, true);
        }
    }
    sb_str(b, UNTIL_NODES_JOIN);
}

/* "no ready spot node of type H100 with 8+ GPUs": no node that could ever take a task. */
static void sb_no_nodes(struct sbuf *b,
                        const struct sched_cluster *c,
                        const struct sched_request *r,
                        const struct sched_fail *f)
{
    sb_str(b, "no ready ");
    sb_caps(b, r);
    sb_str(b, " node");
    if (r->gpu_type && r->gpu_type[0]) {
        sb_str(b, " of type ");
        sb_str(b, r->gpu_type);
    }
    if (r->gpu_milli > 0) {
        sb_str(b, " in a shared pool");
    } else {
        sb_str(b, " with ");
        sb_int(b, r->gpus_per_task);
        if (r->slice_profile > 0) {
            sb_str(b, "+ ");
            sb_str(b, c->profiles[r->slice_profile]);
            sb_str(b, " slices");
        } else {
            sb_str(b, "+ GPUs");
        }
        if (r->cpus_per_task || r->memory_mb_per_task)
            sb_str(b, " and the CPUs/memory asked");
    }
    if (f->never)
        sb_str(b, UNTIL_NODES_JOIN);
}

void sched_fail_format(const struct sched_cluster *c,
                       const struct sched_request *r,
                       const struct sched_fail *f,
                       int64_t now_s,
                       char *buf,
                       size_t size)
{
    struct sbuf b = { buf, size };
    const char *lname = sched_cluster_level_name(c, r->required_level);

    if (size)
        buf[0] = '\0';
    switch (f->kind) {
    case SCHED_FAIL_INVALID:
        sb_str(&b, "invalid request");
        return;
    case SCHED_FAIL_NO_NODES:
        sb_no_nodes(&b, c, r, f);
        return;
    case SCHED_FAIL_COOLING:
        sb_str(&b, "pool ");
        sb_str(&b, c->pools[f->cooling_pool].name);
        sb_str(&b, " cooling down after a spot interruption (");
        sb_duration(&b, f->cooling_until_s - now_s);
        sb_str(&b, " left); no other ");
        sb_caps(&b, r);
        sb_str(&b, " pool has a ready node for it");
        return;
    case SCHED_FAIL_CAPACITY:
        break;
    }
    if (f->never) {
        sb_never(&b, c, r, f);
        return;
    }
    if (f->capped_pool >= 0 && f->best_uncapped >= r->tasks) {
        const struct sched_pool *p = &c->pools[f->capped_pool];
        sb_str(&b, "pool ");
        sb_str(&b, p->name);
        sb_str(&b, " capped at ");
        sb_int(&b, p->max_gpus);
        sb_str(&b, " GPUs (");
        sb_int(&b, c->pool_gpus_used[f->capped_pool]);
        sb_str(&b, " in use); needs ");
        sb_shape(&b, c, r, r->tasks, true);
        return;
    }
    sb_str(&b, "needs ");
    sb_shape(&b, c, r, r->tasks, true);
    if (lname && !f->global) {
        sb_str(&b, " in one ");
        sb_str(&b, lname);
        if (f->best == 0) {
            sb_str(&b, "; none free now");
            return;
        }
        sb_str(&b, "; largest free ");
        sb_str(&b, lname);
        sb_str(&b, " has ");
        sb_shape(&b, c, r, f->best, false);
        return;
    }
    sb_str(&b, " on ");
    sb_caps(&b, r);
    if (f->best == 0) {
        sb_str(&b, "; none free now");
        return;
    }
    sb_str(&b, "; only ");
    sb_shape(&b, c, r, f->best, false);
    sb_str(&b, " free now");
}

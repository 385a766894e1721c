/* SPDX-License-Identifier: MIT */
/*
 * The words of a pass's waiting jobs (core/pass.c): a queue of thousands of jobs in a few shapes
 * fails in a few ways, so each reason is formatted once a pass and copied after that (a memo by
 * shape and failure); and the reason of a job held back behind the reservation.
 */
#include "core/internal.h"

#include <string.h>

#include "common/mu_banned.h"

static bool fail_same(const struct sched_fail *a, const struct sched_fail *b)
{
    return a->kind == b->kind && a->best == b->best && a->best_uncapped == b->best_uncapped
           && a->capped_pool == b->capped_pool && a->cooling_pool == b->cooling_pool
           && a->cooling_until_s == b->cooling_until_s && a->best_nodes == b->best_nodes
           && a->global == b->global && a->never == b->never;
}

/* Whether e holds the reason of r failing with f: every field sched_fail_format reads. */
static bool reason_same(const struct sched_reason_memo *e,
                        const struct sched_request *r,
                        const struct sched_fail *f)
{
    return e->tasks == r->tasks && e->gpus_per_task == r->gpus_per_task
           && e->slice_profile == r->slice_profile && e->gpu_milli == r->gpu_milli
           && e->cpus_per_task == r->cpus_per_task && e->memory_mb_per_task == r->memory_mb_per_task
           && e->ncapacity == r->ncapacity && e->capacity[0] == r->capacity[0]
           && (r->ncapacity < 2 || e->capacity[1] == r->capacity[1])
           && e->required_level == r->required_level && sched_type_same(e->gpu_type, r->gpu_type)
           && fail_same(&e->fail, f);
}

/*
 * d's reason for r failing with f (sched_fail_format at now_s).  A queue of thousands of waiting
 * jobs in a few shapes fails in a few ways, and the words depend only on the shape, the failure
 * and now_s, all fixed in a pass (a cap's reason also quotes the pool's use, which a start
 * changes: not kept); so each text is formatted once a pass and copied after that.
 */
void sched_pass_reason_set(struct sched_cluster *c,
                           const struct sched_request *r,
                           uint32_t fam,
                           const struct sched_fail *f,
                           int64_t now_s,
                           struct sched_decision *d)
{
    uint32_t h = fam ^ (uint32_t)r->tasks * 0x85ebca6bu ^ (uint32_t)f->best * 0xc2b2ae35u
                 ^ (uint32_t)f->kind ^ (uint32_t)f->never << 3;
    struct sched_reason_memo *e = NULL;

    if (f->capped_pool < 0) {
        for (uint32_t i = 0; i < 8; i++) {
            struct sched_reason_memo *x = &c->reasons[(h + i) & (SCHED_REASON_MEMO - 1)];
            if (x->pass != c->pass_id) {
                e = x;
                break;
            }
            if (reason_same(x, r, f)) {
                mu_strlcpy(d->reason, x->reason, sizeof(d->reason));
                return;
            }
        }
    }
    sched_fail_format(c, r, f, now_s, d->reason, sizeof(d->reason));
    if (!e)
        return;
    *e = (struct sched_reason_memo){ .pass = c->pass_id,
                                     .tasks = r->tasks,
                                     .gpus_per_task = r->gpus_per_task,
                                     .slice_profile = r->slice_profile,
                                     .gpu_milli = r->gpu_milli,
                                     .cpus_per_task = r->cpus_per_task,
                                     .memory_mb_per_task = r->memory_mb_per_task,
                                     .gpu_type = r->gpu_type,
                                     .ncapacity = r->ncapacity,
                                     .capacity = { r->capacity[0], r->capacity[1] },
                                     .required_level = r->required_level,
                                     .fail = *f };
    mu_strlcpy(e->reason, d->reason, sizeof(e->reason));
}

/* Reason for a job that fits now but would delay the reservation. */
void sched_pass_held_back(int64_t res_s, int64_t now_s, struct sched_decision *d)
{
    char in[24];
    size_t len;
    mu_duration_format(res_s - now_s, in, sizeof(in));
    d->est_start_s = res_s;
    mu_strlcpy(d->reason, "waiting behind a reservation for a higher-priority job (starts in ",
               sizeof(d->reason));
    len = strlen(d->reason);
    (void)mu_snprintf(d->reason + len, sizeof(d->reason) - len,
                      "%s); it could backfill now with a time limit under %s", in, in);
}

/* SPDX-License-Identifier: MIT */
/*
 * When a pass in steps may stop, or leave a job unstepped (issues #15 and #13): the rest of a
 * queue of 100,000 jobs cannot change a pass once none of its shapes (core/shapes.c) with jobs
 * left can start or take the reservation and no job the order has not reached could preempt.
 * A shape's answers come from the pass's memo (core/pass.c), kept apart from the jobs' own so
 * that a job's reason is the one the whole pass would give: nothing is freed in a pass, so a
 * failure holds for the rest of it, and a fit until the pass's next start.
 */
#include "core/internal.h"

#include "common/mu_banned.h"

/* Whether shape r fits now in mode (SCHED_MODE_SETTLED: the reservation ignored;
 * SCHED_MODE_SETTLED_HELD: beside it), from the memo or one placement without packing that the memo
 * keeps: a failure for the rest of the pass, a fit until the next start (the queue's head may fit
 * only on the reserved GPUs, or a shape's jobs wait for their level to relax, for thousands of
 * checks in a row).  A job's failure of the same family counts (the family is what decides a fit).
 */
static bool shape_fits(struct sched_cluster *c,
                       const struct sched_request *r,
                       uint32_t fam,
                       int mode)
{
    struct sched_pass_state *ps = &c->pass;
    struct sched_fail fail;
    bool fits;

    if (sched_memo_fails(c, r, fam, SCHED_MODE_NOW, &fail)
        || sched_memo_fails(c, r, fam, mode, &fail)
        || (mode == SCHED_MODE_SETTLED_HELD && sched_memo_fails(c, r, fam, SCHED_MODE_HELD, &fail)))
        return false;
    if (sched_fit_known(c, r, fam, mode, ps->started))
        return true;
    fits = sched_place_now(c, r, mode == SCHED_MODE_SETTLED_HELD, ps->now_s, NULL, &fail);
    if (fits)
        sched_fit_note(c, r, fam, mode, ps->started);
    else
        sched_memo_note(c, r, fam, mode, &fail);
    return fits;
}

/* Whether a job of shape r (with what the pass has left of it) could start now, a reservation
 * being out: it fits, and beside the reservation's hold unless one of its jobs ends before the
 * reservation starts.  sched_pass_settled's rule, for one shape. */
static bool shape_may_start(struct sched_cluster *c,
                            const struct sched_request *r,
                            const struct sched_shape_left *left,
                            uint32_t fam)
{
    const struct sched_pass_state *ps = &c->pass;
    return shape_fits(c, r, fam, SCHED_MODE_SETTLED)
           && (!left || sched_done_by(left->min_run_s, ps->now_s, ps->res_s)
               || shape_fits(c, r, fam, SCHED_MODE_SETTLED_HELD));
}

/* Whether a job of shapes[k] that the order still holds could change the pass: start now, or,
 * while no reservation is out, take one (sched_pass_settled's question for one shape). */
static bool shape_counts(struct sched_cluster *c,
                         const struct sched_request *shapes,
                         const struct sched_shape_left *left,
                         int k)
{
    const struct sched_request *r = &shapes[k];
    uint32_t fam;
    if ((left && left[k].jobs <= 0) || sched_request_invalid(c, r))
        return false; /* no job of it left to step, or such a job only waits */
    fam = sched_family_hash(r);
    if (c->pass.reserved)
        return shape_may_start(c, r, left ? &left[k] : NULL, fam);
    return shape_fits(c, r, fam, SCHED_MODE_SETTLED) || sched_idle_fits_quiet(c, r, fam);
}

/*
 * Whether no later job of these shapes can change the pass: none starts now, and, while no
 * reservation is out, none would take one (it does not fit on the idle view either).  A shape
 * that fits only on the reserved GPUs starts no job that runs past the reservation's start, so
 * it settles when its shortest expected run does (left's min_run_s).  What the pass decides only
 * narrows a request (a quota cut, the first capacity type, a narrower required level, nodes
 * avoided), and nothing is freed in a pass, so a shape that fails here fails for every job it
 * stands for.  Each shape costs a memo probe or two, or a placement (shape_fits).
 */
bool sched_pass_settled(struct sched_cluster *c,
                        const struct sched_request *shapes,
                        const struct sched_shape_left *left,
                        int nshapes)
{
    if (!c->pass.open || nshapes < 0 || (nshapes && !shapes))
        return false;
    for (int k = 0; k < nshapes; k++) {
        if (shape_counts(c, shapes, left, k))
            return false;
    }
    return true;
}

/* Marks the shapes with jobs left that could start, a reservation being out (sched_pass_stop's
 * skip_waiting). */
static void mark_may_start(struct sched_cluster *c, struct sched_pass_stop *s)
{
    for (int k = 0; k < s->nshapes; k++)
        s->may_start[k] = shape_counts(c, s->shapes, s->left, k);
    s->skipping = true;
}

bool sched_pass_may_stop(struct sched_cluster *c, struct sched_pass_stop *s, int n)
{
    bool settled;
    bool to_mark;
    if (s->nshapes < 0 || n < s->next_check)
        return false;
    settled = sched_pass_settled(c, s->shapes, s->left, s->nshapes);
    to_mark = !settled && s->skip_waiting && !s->skipping && c->pass.reserved && s->left;
    if ((settled || to_mark)
        && (!s->preempts
            || !sched_pass_rest_may_preempt(s->order, s->quota, s->nquota, s->victims, s->nvictims,
                                            s->span))) {
        if (settled)
            return true;
        mark_may_start(c, s); /* once: the rest's priorities only fall, shapes only stop fitting */
    }
    s->next_check = n + (s->nshapes > 0 ? s->nshapes : 1);
    return false;
}

bool sched_pass_stop_skips(const struct sched_pass_stop *s, int shape)
{
    return s->skipping && shape >= 1 && shape <= s->nshapes && !s->may_start[shape - 1];
}

void sched_pass_stop_taken(struct sched_pass_stop *s, int shape)
{
    if (shape >= 1 && shape <= s->nshapes && s->left && s->left[shape - 1].jobs > 0)
        s->left[shape - 1].jobs--;
}

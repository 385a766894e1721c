/* SPDX-License-Identifier: MIT */
/*
 * A victim set, as both searches of the preemption planner test it (preempt.c: the plan and the
 * exact search; preempt_greedy.c: the greedy search): whether r fits with it stopped, whether it
 * ranks better than the best so far, and its pruning.  Its own file so that the two searches
 * call it and not each other (issue #41, lint calls).
 */
#include "core/preempt_search.h"

#include <string.h>

#include "common/mu_banned.h"

bool preempt_fits_without(
    struct pctx *x, const int *list, int n, int64_t t_s, struct sched_slot *slots)
{
    struct sched_fail f;
    bool ok;
    for (int i = 0; i < n; i++)
        sched_cluster_release(x->c, x->v[list[i]].req, x->v[list[i]].slots);
    ok = sched_place_may_fit(x->c, x->r, t_s, &f) && sched_place_in(x->c, x->r, t_s, slots, &f);
    for (int i = n - 1; i >= 0; i--)
        sched_cluster_commit(x->c, x->v[list[i]].req, x->v[list[i]].slots);
    x->tests++;
    return ok;
}

bool preempt_set_fits(struct pctx *x, const int *set, int n)
{
    for (int i = 0; i < n; i++)
        x->vbuf[i] = x->cand[set[i]].idx;
    return preempt_fits_without(x, x->vbuf, n, x->now_s, NULL);
}

void preempt_best_offer(struct pctx *x, struct best *b, const int *set, int n)
{
    struct key k = preempt_key_of(x, set, n);
    if (b->found && preempt_key_cmp(&k, &b->key) >= 0)
        return;
    b->found = true;
    b->key = k;
    memcpy(b->set, set, (size_t)n * sizeof(*set));
}

int preempt_prune(struct pctx *x, int *set, int n)
{
    int *order = x->work2;
    int tries = 0;
    memcpy(order, set, (size_t)n * sizeof(*set));
    /* Insertion sort by cost, descending (then higher priority, then older, first out): the
     * sets are small once a prefix has been found. */
    for (int i = 1; i < n; i++) {
        int v = order[i];
        int j = i;
        while (j > 0) {
            const struct cand *a = &x->cand[order[j - 1]];
            const struct cand *b = &x->cand[v];
            bool before =
                b->cost > a->cost
                || (b->cost == a->cost
                    && (b->priority > a->priority
                        || (b->priority == a->priority && b->started_ms < a->started_ms)));
            if (!before)
                break;
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (int i = 0; i < n && n > 1 && tries < PREEMPT_PRUNE_MAX && x->tests < PREEMPT_MAX_TESTS;
         i++) {
        int pos = 0;
        while (pos < n && set[pos] != order[i])
            pos++;
        if (pos == n)
            continue;
        set[pos] = set[n - 1];
        tries++;
        if (preempt_set_fits(x, set, n - 1)) {
            n--;
        } else {
            set[n - 1] = set[pos];
            set[pos] = order[i];
        }
    }
    return n;
}

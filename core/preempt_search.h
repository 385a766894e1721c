/* SPDX-License-Identifier: MIT */
/*
 * What the preemption planner's files share (preempt.c: the plan and the exact search;
 * preempt_greedy.c: the greedy search; preempt_set.c: testing a victim set, which both call):
 * the planning context, candidates, and the rank of a victim set.  Private to those files.
 */
#ifndef MUSTER_CORE_PREEMPT_SEARCH_H
#define MUSTER_CORE_PREEMPT_SEARCH_H

#include "core/internal.h"

#include <limits.h>
#include <string.h>

#define PREEMPT_MAX_TESTS     512 /* placements one plan may try */
#define PREEMPT_PRUNE_MAX     48  /* of which removal attempts per greedy set */
#define PREEMPT_DOMAINS_DONE  4   /* feasible domains the greedy finishes */
#define PREEMPT_DOMAINS_TRIED 16  /* domains it looks at */

/* An eligible victim that could help r. */
struct cand {
    int idx;      /* into the victims array */
    int64_t cost; /* lost GPU-milliseconds */
    int64_t priority;
    int64_t started_ms;
    int64_t gpus; /* GPUs it frees on nodes r may use: for the counting bound */
    int stamp;    /* scratch: the greedy domain that already queued it, + 1 */
};

/* A victim set's rank: lower is better, field by field. */
struct key {
    int64_t cost;
    int64_t max_priority;
    int64_t min_started_ms; /* larger is better: the oldest victim is younger */
    int n;
    uint32_t mask; /* exact search: the subset; last tie-break */
    int64_t gpus;  /* not part of the rank: freed usable GPUs */
};

struct best {
    bool found;
    struct key key;
    int *set; /* candidate indices, n = key.n */
};

struct pctx {
    struct sched_cluster *c;
    const struct sched_request *r;
    int64_t now_ms; /* the wall clock: victims' starts and checkpoints */
    int64_t now_s;  /* now_ms / 1000: placements, expected ends, cool-downs */
    const struct sched_victim *v;
    int nv;
    struct cand *cand;
    int ncand;
    struct sched_slot *slots;
    bool *pool_ok; /* [npools] r may use the pool now */
    int *vbuf;     /* [nv] victim indices of the set under test */
    int *work;     /* [ncand] set scratch */
    int *work2;    /* [ncand] */
    int *young;    /* [nv] too-young victims (then the candidates, for one test) */
    int nyoung;
    int nhigher; /* gangs in the way at equal or higher priority */
    int nfixed;  /* gangs in the way that are not preemptible */
    int tests;
    int64_t need_gpus;
    int64_t free_gpus; /* free GPUs on nodes r may use */
    struct best best;
};

static inline int64_t preempt_add_sat(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static inline struct key preempt_key_of(const struct pctx *x, const int *set, int n)
{
    struct key k = { 0, INT64_MIN, INT64_MAX, n, 0, 0 };
    for (int i = 0; i < n; i++) {
        const struct cand *cd = &x->cand[set[i]];
        k.cost = preempt_add_sat(k.cost, cd->cost);
        k.gpus += cd->gpus;
        if (cd->priority > k.max_priority)
            k.max_priority = cd->priority;
        if (cd->started_ms < k.min_started_ms)
            k.min_started_ms = cd->started_ms;
    }
    return k;
}

static inline int preempt_key_cmp(const struct key *a, const struct key *b)
{
    if (a->cost != b->cost)
        return a->cost < b->cost ? -1 : 1;
    if (a->max_priority != b->max_priority)
        return a->max_priority < b->max_priority ? -1 : 1;
    if (a->min_started_ms != b->min_started_ms)
        return a->min_started_ms > b->min_started_ms ? -1 : 1;
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    return (a->mask > b->mask) - (a->mask < b->mask);
}

/* ---- preempt_set.c ---- */

/* Releases gangs list[0..n) (victim indices), tries r at t_s, commits them back (one placement
 * test, counted).  slots NULL: only whether it fits (the search's tests); else where it goes
 * (the plan's). */
bool preempt_fits_without(
    struct pctx *x, const int *list, int n, int64_t t_s, struct sched_slot *slots);
/* Whether r fits with the candidates set[0..n) stopped (one placement test, counted). */
bool preempt_set_fits(struct pctx *x, const int *set, int n);
/* Keeps set[0..n) in b when it ranks better than b's. */
void preempt_best_offer(struct pctx *x, struct best *b, const int *set, int n);
/* Drops victims from set[0..n), costliest first, while the rest still lets r fit; the new n. */
int preempt_prune(struct pctx *x, int *set, int n);
/* The greedy search (preempt_greedy.c): offers its sets to b; 0, or -1 with err (no memory). */
int preempt_search_greedy(struct pctx *x, struct best *b, struct mu_err *err);

#endif

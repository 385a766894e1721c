/* SPDX-License-Identifier: MIT */
/*
 * Gang placement (DESIGN §4), pure: a request and a cluster snapshot in, a whole assignment or
 * a reason out.  Capacity types are tried in the job's order and never mixed; within one type
 * nodes are ordered cheapest pool first, then best fit (fewest free GPUs first) so that big holes
 * stay whole for big gangs.  With a topology level, every domain of that level is sized first and
 * the fitting domain with the least free GPUs is used.  Pool caps (max_gpus) are honoured.
 * Invariants: a GPU is never given twice; either every task gets a slot or the result is 0.
 */
#include "scheduler/internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

struct cand {
    int node;
    int free_gpus;
    double price;
    const char *domain; /* label at the grouping level, or the node name */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* How many tasks of r fit on node n now, ignoring pool caps. */
static int node_fit(const struct sched_node *n, const struct sched_request *r, int limit)
{
    int64_t k = limit;
    if (r->gpus_per_task > 0)
        k = min64(k, __builtin_popcountll(n->gpus_all & ~n->gpus_used) / r->gpus_per_task);
    if (r->cpus_per_task > 0)
        k = min64(k, (n->spec.cpus - n->cpus_used) / r->cpus_per_task);
    if (r->memory_mb_per_task > 0)
        k = min64(k, (n->spec.memory_mb - n->memory_mb_used) / r->memory_mb_per_task);
    return k < 0 ? 0 : (int)k;
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a;
    const struct cand *y = b;
    int d = strcmp(x->domain, y->domain);
    if (d)
        return d;
    if (x->price != y->price)
        return x->price < y->price ? -1 : 1;
    if (x->free_gpus != y->free_gpus)
        return x->free_gpus - y->free_gpus;
    return x->node - y->node;
}

/*
 * Greedy fill of cands[0..n) in order.  With slots == NULL it only counts; returns how many of
 * r->tasks were (or would be) placed.  pool_left is each pool's remaining cap, updated.
 */
static int fill(const struct sched_cluster *c,
                const struct sched_request *r,
                const struct cand *cands,
                int n,
                int *pool_left,
                struct sched_slot *slots)
{
    int placed = 0;
    for (int i = 0; i < n && placed < r->tasks; i++) {
        const struct sched_node *node = &c->nodes[cands[i].node];
        int pool = node->spec.pool;
        int k = node_fit(node, r, r->tasks - placed);
        uint64_t free_mask = node->gpus_all & ~node->gpus_used;

        if (r->gpus_per_task > 0 && k > pool_left[pool] / r->gpus_per_task)
            k = pool_left[pool] / r->gpus_per_task;
        pool_left[pool] -= k * r->gpus_per_task;
        for (int t = 0; t < k; t++, placed++) {
            uint64_t take = 0;
            for (int g = 0; g < r->gpus_per_task; g++) {
                uint64_t bit = free_mask & (~free_mask + 1); /* lowest free GPU */
                take |= bit;
                free_mask &= ~bit;
            }
            if (slots) {
                slots[placed].node = cands[i].node;
                slots[placed].gpus = take;
            }
        }
    }
    return placed;
}

static void pool_caps(const struct sched_cluster *c, int *pool_left)
{
    for (int p = 0; p < c->npools; p++) {
        int cap = c->pools[p].max_gpus;
        pool_left[p] = cap > 0 ? cap - c->pool_gpus_used[p] : INT_MAX;
        if (pool_left[p] < 0)
            pool_left[p] = 0;
    }
}

static bool node_usable(const struct sched_cluster *c,
                        const struct sched_node *n,
                        const struct sched_request *r,
                        enum sched_capacity cap)
{
    const struct sched_pool *pool = &c->pools[n->spec.pool];
    if (n->state != SCHED_NODE_READY || pool->capacity != cap)
        return false;
    if (r->gpu_type && r->gpu_type[0] && strcmp(r->gpu_type, pool->gpu_type) != 0)
        return false;
    return n->spec.ngpus >= r->gpus_per_task;
}

/*
 * Places r within one capacity type.  Returns 1 when placed; otherwise 0 and *best holds the
 * most tasks that would fit (in one domain, when a level groups them).
 */
static int place_capacity(const struct sched_cluster *c,
                          const struct sched_request *r,
                          enum sched_capacity cap,
                          struct cand *cands,
                          int *pool_left,
                          struct sched_slot *slots,
                          int *best,
                          int *ncand_out)
{
    int level = r->required_level >= 0 ? r->required_level : r->preferred_level;
    int ncand = 0;
    int chosen_start = -1;
    int chosen_len = 0;
    int chosen_free = INT_MAX;

    for (int i = 0; i < c->nnodes; i++) {
        const struct sched_node *n = &c->nodes[i];
        if (!node_usable(c, n, r, cap))
            continue;
        cands[ncand].node = i;
        cands[ncand].free_gpus = __builtin_popcountll(n->gpus_all & ~n->gpus_used);
        cands[ncand].price = c->pools[n->spec.pool].price_per_hour;
        if (level < 0)
            cands[ncand].domain = "";
        else if (level >= c->nlevels)
            cands[ncand].domain = n->spec.name;
        else
            cands[ncand].domain = n->spec.labels[level];
        ncand++;
    }
    *ncand_out = ncand;
    qsort(cands, (size_t)ncand, sizeof(*cands), cand_cmp);

    /* Size each domain (one domain, "", without a level) and keep the best fit. */
    for (int start = 0; start < ncand;) {
        int end = start + 1;
        int free_gpus = cands[start].free_gpus;
        int fits;
        while (end < ncand && strcmp(cands[end].domain, cands[start].domain) == 0)
            free_gpus += cands[end++].free_gpus;
        pool_caps(c, pool_left);
        fits = fill(c, r, cands + start, end - start, pool_left, NULL);
        if (fits > *best)
            *best = fits;
        if (fits == r->tasks && free_gpus < chosen_free) {
            chosen_start = start;
            chosen_len = end - start;
            chosen_free = free_gpus;
        }
        start = end;
    }
    if (chosen_start < 0 && r->required_level < 0 && level >= 0) {
        /* Preferred level only: no single domain holds the gang, so use them all. */
        chosen_start = 0;
        chosen_len = ncand;
        pool_caps(c, pool_left);
        if (fill(c, r, cands, ncand, pool_left, NULL) != r->tasks)
            chosen_start = -1;
    }
    if (chosen_start < 0)
        return 0;
    pool_caps(c, pool_left);
    return fill(c, r, cands + chosen_start, chosen_len, pool_left, slots) == r->tasks;
}

static const char *capacity_name(enum sched_capacity cap)
{
    return cap == SCHED_SPOT ? "spot" : "on-demand";
}

int sched_place(const struct sched_cluster *c,
                const struct sched_request *r,
                struct sched_slot *slots,
                char *reason,
                size_t reason_size)
{
    struct cand *cands = NULL;
    int *pool_left = NULL;
    int best = 0;
    int usable = 0;
    int placed = 0;
    char caps[32] = "";

    if (reason_size)
        reason[0] = '\0';
    if (r->tasks <= 0 || r->gpus_per_task < 0 || r->gpus_per_task > SCHED_MAX_GPUS_NODE
        || r->ncapacity < 1 || r->ncapacity > 2) {
        (void)snprintf(reason, reason_size, "invalid request");
        return 0;
    }
    cands = malloc(((size_t)c->nnodes + 1) * sizeof(*cands));
    pool_left = malloc(((size_t)c->npools + 1) * sizeof(*pool_left));
    if (!cands || !pool_left) {
        (void)snprintf(reason, reason_size, "out of memory while placing");
        goto out;
    }
    for (int i = 0; i < r->ncapacity && !placed; i++) {
        int ncand = 0;
        placed = place_capacity(c, r, r->capacity[i], cands, pool_left, slots, &best, &ncand);
        usable += ncand;
        (void)snprintf(caps + strlen(caps), sizeof(caps) - strlen(caps), "%s%s", i ? " or " : "",
                       capacity_name(r->capacity[i]));
    }
    if (placed)
        goto out;
    if (!usable) {
        (void)snprintf(reason, reason_size, "no ready %s node%s%s with %d+ GPUs", caps,
                       r->gpu_type && r->gpu_type[0] ? " of type " : "",
                       r->gpu_type ? r->gpu_type : "", r->gpus_per_task);
    } else if (r->required_level >= 0) {
        (void)snprintf(reason, reason_size,
                       "needs %dx%d GPUs in one %s (%s); at most %d task(s) fit in one now",
                       r->tasks, r->gpus_per_task,
                       r->required_level < c->nlevels ? "topology domain" : "node", caps, best);
    } else {
        (void)snprintf(reason, reason_size, "needs %dx%d GPUs (%s); at most %d task(s) fit now",
                       r->tasks, r->gpus_per_task, caps, best);
    }
out:
    free(cands);
    free(pool_left);
    return placed;
}

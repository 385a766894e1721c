/* SPDX-License-Identifier: MIT */
/*
 * Shared (time-sliced) GPUs (issue #17), part of the pure core: no I/O, no clock, no allocation.
 *
 * A pool marked shared lets gpu_milli requests put several tasks on one GPU, each with a share
 * of 1..1000 (Alibaba's GPU traces count GPUs the same way), never more than SCHED_MILLI per GPU
 * in all.  A GPU with shares in use has its bit in gpus_used, so whole-GPU work never gets it; a
 * GPU a whole-GPU task holds (its bit set, no shares) takes no shares.  The shares live per node
 * apart from the hot struct (c->milli), read only by gpu_milli requests and their commits.
 * Time-slicing gives no isolation between the tasks of one GPU (memory, faults, time): that is
 * the operator's choice of marking the pool shared.
 */
#include "core/internal.h"

#include <assert.h>
#include <limits.h>

#include "common/mu_banned.h"

int sched_cluster_gpu_milli(const struct sched_cluster *c, int node, int g)
{
    return c->milli[node][g];
}

/* The milli GPU g of node can still give, as the placement sees it now. */
static int gpu_room(const struct sched_cluster *c, int node, int g)
{
    const struct sched_node *n = &c->nodes[node];
    uint64_t bit = UINT64_C(1) << g;

    if (c->idle_view)
        return SCHED_MILLI;
    if (c->holds_on && (n->gpus_held & bit))
        return 0;
    if (c->milli[node][g] > 0)
        return SCHED_MILLI - c->milli[node][g];
    return (n->gpus_used & bit) ? 0 : SCHED_MILLI;
}

int sched_milli_fit(const struct sched_cluster *c, int node, int m, int limit, int *room)
{
    int k = 0;
    *room = 0;
    for (uint64_t mask = c->nodes[node].gpus_all; mask; mask &= mask - 1) {
        int r = gpu_room(c, node, __builtin_ctzll(mask));
        k += r / m;
        *room += r;
    }
    return k < limit ? k : limit;
}

void sched_milli_fill(
    const struct sched_cluster *c, int node, int m, int take, struct sched_slot *slots)
{
    int room[SCHED_MAX_GPUS_NODE];
    uint64_t all = c->nodes[node].gpus_all;

    for (uint64_t mask = all; mask; mask &= mask - 1) {
        int g = __builtin_ctzll(mask);
        room[g] = gpu_room(c, node, g);
    }
    for (int t = 0; t < take; t++) {
        int best = -1;
        /* Best fit: the GPU with the least room that still holds the task, so partly shared
         * GPUs fill up and whole ones stay whole for whole-GPU work. */
        for (uint64_t mask = all; mask; mask &= mask - 1) {
            int g = __builtin_ctzll(mask);
            if (room[g] >= m && (best < 0 || room[g] < room[best]))
                best = g;
        }
        assert(best >= 0); /* sched_milli_fit counted room for take tasks */
        if (best < 0)
            best = __builtin_ctzll(all);
        room[best] -= m;
        slots[t].node = node;
        slots[t].gpus = UINT64_C(1) << best;
    }
}

uint64_t sched_milli_commit(struct sched_cluster *c, int node, uint64_t gpus, int m)
{
    struct sched_node *n = &c->nodes[node];
    uint64_t became = 0;

    for (uint64_t mask = gpus; mask; mask &= mask - 1) {
        int g = __builtin_ctzll(mask);
        uint64_t bit = UINT64_C(1) << g;
        assert(n->gpus_all & bit);
        assert(c->milli[node][g] > 0 || !(n->gpus_used & bit)); /* not a whole-GPU task's */
        assert(c->milli[node][g] + m <= SCHED_MILLI);
        if (c->milli[node][g] == 0)
            became |= bit;
        c->milli[node][g] = (uint16_t)(c->milli[node][g] + m);
    }
    n->gpus_used |= became;
    return became;
}

uint64_t sched_milli_release(struct sched_cluster *c, int node, uint64_t gpus, int m)
{
    struct sched_node *n = &c->nodes[node];
    uint64_t freed = 0;

    for (uint64_t mask = gpus; mask; mask &= mask - 1) {
        int g = __builtin_ctzll(mask);
        assert(c->milli[node][g] >= m);
        c->milli[node][g] = (uint16_t)(c->milli[node][g] - m);
        if (c->milli[node][g] == 0)
            freed |= UINT64_C(1) << g;
    }
    n->gpus_used &= ~freed;
    return freed;
}

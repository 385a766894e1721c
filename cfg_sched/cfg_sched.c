/* SPDX-License-Identifier: MIT */
/*
 * The config as the pure core's inputs: the pools and topology levels of a cluster, and the
 * queues' quotas.  musterd and muster-sim both build their core from a config, and they must
 * build the same one (the simulator's promise is to replay musterd's policy), so there is one
 * translation.  Its own module (cfg_sched/, issue #41): the config parser does not depend on the
 * core, and the core never sees the config.
 */
#include "cfg_sched/cfg_sched.h"

#include <string.h>

#include "common/mu_banned.h"

struct sched_cluster *cfg_sched_cluster_new(const struct cfg *c, struct mu_err *err)
{
    struct sched_pool pools[CFG_MAX_POOLS];
    const char *levels[CFG_MAX_LEVELS];

    for (int i = 0; i < c->npools; i++) {
        const struct cfg_pool *cp = &c->pools[i];
        memset(&pools[i], 0, sizeof(pools[i]));
        mu_strlcpy(pools[i].name, cp->name, sizeof(pools[i].name));
        mu_strlcpy(pools[i].gpu_type, cp->gpu_type, sizeof(pools[i].gpu_type));
        pools[i].capacity = cp->capacity == CFG_CAPACITY_SPOT ? SCHED_SPOT : SCHED_ON_DEMAND;
        pools[i].price_per_hour = cp->price_per_hour;
        pools[i].max_gpus = cp->max_gpus;
        pools[i].shared = cp->shared;
    }
    for (int l = 0; l < c->nlevels; l++)
        levels[l] = c->levels[l];
    return sched_cluster_new(pools, c->npools, c->nlevels ? levels : NULL, c->nlevels, err);
}

int cfg_sched_quotas(const struct cfg *c, struct sched_quota_config *out)
{
    int n = c->nqueues < SCHED_MAX_QUEUES ? c->nqueues : SCHED_MAX_QUEUES - 1;

    for (int q = 0; q < n; q++) {
        const struct cfg_queue *cq = &c->queues[q];
        out[q] = (struct sched_quota_config){
            .name = cq->name,
            .cohort = cq->cohort,
            .has_quota = cq->has_quota,
            .quota = { [SCHED_SPOT] = cq->quota[CFG_CAPACITY_SPOT],
                       [SCHED_ON_DEMAND] = cq->quota[CFG_CAPACITY_ON_DEMAND] },
            .borrow_limit = cq->borrow_limit,
            .lend_limit = cq->lend_limit,
        };
    }
    return n;
}

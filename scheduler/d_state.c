/* SPDX-License-Identifier: MIT */
/*
 * Layer 5 of musterd (d_loop.h): the daemon's memory as a whole.  d_state_init makes the parts
 * of struct musterd (d_state.h) that come from the config alone, the cluster of its pools and
 * topology levels and the job tables; d_state_release frees everything the layers grew in it.
 * main.c's setup and teardown call them around Redis and ZeroMQ, and the unit tests call them
 * around a recording store and sender (tests/unit/support/d_fake.c), so both build the daemon
 * the same way.
 */
#include "scheduler/d_loop.h"

#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

static struct sched_cluster *cluster_from_cfg(const struct cfg *c, struct mu_err *err)
{
    struct sched_pool pools[CFG_MAX_POOLS];
    for (int i = 0; i < c->npools; i++) {
        memset(&pools[i], 0, sizeof(pools[i]));
        mu_strlcpy(pools[i].name, c->pools[i].name, sizeof(pools[i].name));
        mu_strlcpy(pools[i].gpu_type, c->pools[i].gpu_type, sizeof(pools[i].gpu_type));
        pools[i].capacity =
            c->pools[i].capacity == CFG_CAPACITY_SPOT ? SCHED_SPOT : SCHED_ON_DEMAND;
        pools[i].price_per_hour = c->pools[i].price_per_hour;
        pools[i].max_gpus = c->pools[i].max_gpus;
        pools[i].shared = c->pools[i].shared;
    }
    const char *levels[CFG_MAX_LEVELS];
    for (int l = 0; l < c->nlevels; l++)
        levels[l] = c->levels[l];
    return sched_cluster_new(pools, c->npools, levels, c->nlevels, err);
}

int d_state_init(struct musterd *d, struct mu_err *err)
{
    struct sched_cluster *cluster = NULL;
    struct mu_map *jobs = NULL;
    struct mu_map *early_cancels = NULL;
    struct mu_map *waiters = NULL;
    int rc = -1;

    cluster = cluster_from_cfg(&d->cfg, err);
    if (!cluster)
        goto out;
    jobs = mu_map_new();
    early_cancels = mu_map_new();
    waiters = mu_map_new();
    if (!jobs || !early_cancels || !waiters) {
        (void)mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    d->cluster = cluster;
    d->jobs = jobs;
    d->early_cancels = early_cancels;
    d->waiters = waiters;
    cluster = NULL;
    waiters = NULL;
    jobs = NULL;
    early_cancels = NULL;
    rc = 0;
out:
    mu_map_free(waiters);
    mu_map_free(early_cancels);
    mu_map_free(jobs);
    sched_cluster_free(cluster);
    return rc;
}

void d_state_release(struct musterd *d)
{
    d_deferred_free(d);
    d_pass_free(d);
    d_jobs_free(d);
    d_usage_free(d);
    d_nodes_free(d);
    sched_cluster_free(d->cluster);
    d->cluster = NULL;
}

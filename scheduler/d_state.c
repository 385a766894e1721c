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

#include "cfg_sched/cfg_sched.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

int d_state_init(struct musterd *d, struct mu_err *err)
{
    struct sched_cluster *cluster = NULL;
    struct mu_map *jobs = NULL;
    struct mu_map *early_cancels = NULL;
    struct mu_map *waiters = NULL;
    struct access *access = NULL;
    int rc = -1;

    cluster = cfg_sched_cluster_new(&d->cfg, err);
    if (!cluster)
        goto out;
    jobs = mu_map_new();
    early_cancels = mu_map_new();
    waiters = mu_map_new();
    access = access_new_default(); /* single-user until the config's rules are set */
    if (!jobs || !early_cancels || !waiters || !access) {
        (void)mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    d->cluster = cluster;
    d->jobs = jobs;
    d->early_cancels = early_cancels;
    d->waiters = waiters;
    d->access = access;
    access = NULL;
    cluster = NULL;
    waiters = NULL;
    jobs = NULL;
    early_cancels = NULL;
    rc = 0;
out:
    access_free(access);
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
    d_status_free(d);
    d_jobs_free(d);
    d_pending_free(d);
    d_usage_free(d);
    d_access_free(d);
    d_nodes_free(d);
    sched_cluster_free(d->cluster);
    d->cluster = NULL;
}

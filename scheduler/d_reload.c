/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): reading the config file again, on SIGHUP or `musterctl
 * reload` (issue #11).  Quotas change often and a restart should not be needed for them, so the
 * queues (names, weights, quotas, cohorts, limits) and the access rules (who may use which queue,
 * caps; not the identity mode) take effect at once; the rest of the config
 * (pools, topology, timers, addresses) is what the cluster model, the workers' leases and the
 * sockets were built from, so a file that changes it is refused and the running config stays in
 * force.  A file that does not load is refused with its key path.  Running work is never
 * stopped by a reload: a queue whose quota shrank below its use drains as its gangs end.  The
 * answer goes to the `reload` hash (id, result, at), which `musterctl reload` waits for.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* Moves every queue-indexed fact to the new queue list: jobs' queue_idx by name (a queue that
 * is gone: nqueues, as after a restart), usage by name, held GPUs recounted. */
static void queues_remap(struct musterd *d, const struct cfg *next)
{
    double usage[SCHED_MAX_QUEUES] = { 0 };
    size_t pos = 0;
    struct d_job *j;

    d_usage_accrue(d, mu_time_wall_ms());
    for (int q = 0; q < d->cfg.nqueues; q++) {
        const struct cfg_queue *nq = cfg_queue_find(next, d->cfg.queues[q].name);
        usage[nq ? (int)(nq - next->queues) : next->nqueues] += d->usage.gpu_s[q];
    }
    usage[next->nqueues] += d->usage.gpu_s[d->cfg.nqueues];
    memcpy(d->usage.gpu_s, usage, sizeof(usage));
    memset(d->usage.held_gpus, 0, sizeof(d->usage.held_gpus));
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        const struct cfg_queue *nq = cfg_queue_find(next, j->spec.queue);
        j->queue_idx = nq ? (int)(nq - next->queues) : next->nqueues;
        for (int t = 0; j->tasks && t < j->spec.tasks; t++)
            d->usage.held_gpus[j->queue_idx] += j->tasks[t].committed ? j->spec.gpus_per_task : 0;
    }
    d_usage_recount_users(d); /* by queue name: unchanged, but recounted the same way */
    d_pending_order_stale(d); /* the keys' queues and expected run times may differ */
}

/* The queues status fields of queues the new config no longer has. */
static void queues_forget(struct musterd *d, const struct cfg *next)
{
    struct queue_kv kv[CFG_MAX_QUEUES];
    struct mu_err err;
    int n = 0;

    for (int q = 0; q < d->cfg.nqueues; q++) {
        if (!cfg_queue_find(next, d->cfg.queues[q].name))
            kv[n++] = (struct queue_kv){ d->cfg.queues[q].name, NULL };
    }
    if (n > 0 && d->store.ops->status_write(d->store.ctx, QUEUE_K_QUEUES, kv, n, &err) != 0)
        d->redis_down = true;
}

static void answer(struct musterd *d, const char *id, const char *result)
{
    char at[32];
    struct queue_kv kv[] = { { QUEUE_R_ID, id }, { QUEUE_R_RESULT, result }, { QUEUE_R_AT, at } };
    struct mu_err err;

    (void)mu_snprintf(at, sizeof(at), "%llu", (unsigned long long)mu_time_wall_ms());
    if (d->store.ops->status_write(d->store.ctx, QUEUE_K_RELOAD, kv, (int)MU_ARRAY_LEN(kv), &err)
        != 0)
        d->redis_down = true;
}

void d_config_reload(struct musterd *d, const char *id)
{
    struct cfg *next = malloc(sizeof(*next));
    struct mu_err err;
    char result[sizeof(err.msg) + 200];
    const char *changed;
    struct access *access = NULL;

    if (!next || !d->config_path) {
        (void)mu_snprintf(result, sizeof(result), "refused: %s",
                          next ? "musterd has no config file to read" : "out of memory");
        goto out;
    }
    cfg_init_defaults(next);
    if (cfg_load_file(next, d->config_path, &err) != 0) {
        (void)mu_snprintf(result, sizeof(result), "refused: %s; the running config stays", err.msg);
        goto out;
    }
    /* Set by flags or the environment at start, kept until a restart. */
    memcpy(next->redis, d->cfg.redis, sizeof(next->redis));
    memcpy(next->bind, d->cfg.bind, sizeof(next->bind));
    memcpy(next->metrics, d->cfg.metrics, sizeof(next->metrics));
    changed = cfg_diff_beyond_queues(&d->cfg, next);
    if (changed) {
        (void)mu_snprintf(result, sizeof(result),
                          "refused: %s: %s changed; only queues and access change without a "
                          "restart (the running config stays)",
                          d->config_path, changed);
        goto out;
    }
    access = d_access_load(d->config_path, &err);
    if (!access) {
        (void)mu_snprintf(result, sizeof(result), "refused: %s; the running config stays", err.msg);
        goto out;
    }
    if (access_identity(access) != access_identity(d->access)) {
        (void)mu_snprintf(result, sizeof(result),
                          "refused: %s: access.identity changed (%s to %s); it changes with a "
                          "restart only, as the workers' users do (the running config stays)",
                          d->config_path, access_identity_name(access_identity(d->access)),
                          access_identity_name(access_identity(access)));
        goto out;
    }
    if (!access_equal(access, d->access)) {
        if (d_access_set(d, access, &err) != 0) {
            access = NULL; /* freed by d_access_set */
            (void)mu_snprintf(result, sizeof(result), "refused: %s", err.msg);
            goto out;
        }
        access = NULL;   /* in force */
        d->dirty = true; /* caps may have changed */
    }
    queues_remap(d, next);
    queues_forget(d, next);
    d->cfg.nqueues = next->nqueues;
    memcpy(d->cfg.queues, next->queues, sizeof(d->cfg.queues));
    d->dirty = true;       /* a pass with the new quotas and weights */
    d->nodes_dirty = true; /* and the status hashes now */
    (void)mu_snprintf(result, sizeof(result), "ok: %s: %d queue(s) in force", d->config_path,
                      d->cfg.nqueues);
out:
    access_free(access);
    free(next);
    mu_log(strncmp(result, "ok", 2) == 0 ? MU_LOG_INFO : MU_LOG_ERROR, "sched", "reload (%s) %s",
           id, result);
    answer(d, id, result);
}

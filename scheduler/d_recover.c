/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): taking the active jobs back after a restart.  PENDING jobs
 * queue again as they were.  A gang that was starting, running or being stopped is adopted from
 * its stored placement (d_adopt.c).  One whose placement cannot be read is requeued; workers
 * that still run its tasks are told to stop them when they register, because their attempt is
 * no longer current.  The jobs stream in from queue_active_each (nothing held for all of them
 * at once); the requeue writes wait until the load is over, since its pipeline holds the
 * connection.  A stop signal ends recovery at the next job (issue #15).
 */

#include "scheduler/d_handlers.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* One recovery's progress (queue_active_each's context). */
struct recovery {
    struct musterd *d;
    int n;                  /* stored jobs handed over */
    int adopting;           /* placed gangs to adopt */
    struct d_job **requeue; /* heap: placed gangs that cannot be adopted, requeued once the
                               load is over (its pipeline holds the connection) */
    int nrequeue;
    int cap_requeue;
};

static int requeue_later(struct recovery *r, struct d_job *j, struct mu_err *err)
{
    if (r->nrequeue == r->cap_requeue) {
        int cap = r->cap_requeue ? r->cap_requeue * 2 : 64;
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_job **p = realloc(r->requeue, (size_t)cap * sizeof(*p));
        if (!p)
            return mu_errf(err, MU_E_NOMEM, "out of memory recovering jobs");
        r->requeue = p;
        r->cap_requeue = cap;
    }
    r->requeue[r->nrequeue++] = j;
    return 0;
}

/* A stored array (its spec has "array") back: an element ("<array id>_<index>") gets its
 * element's spec; the array itself its progress.  -1 with err. */
static int array_recover(struct d_job *j, const struct queue_stored_job *s, struct mu_err *err)
{
    char base[QUEUE_JOB_ID_MAX];
    int64_t index;

    if (queue_job_id_split(j->id, base, sizeof(base), &index)) {
        mu_strlcpy(j->array_of, base, sizeof(j->array_of));
        return d_array_element_spec(&j->spec, base, index, err);
    }
    if (d_array_prepare(j, s->spec, s->spec_len, err) != 0)
        return -1;
    j->array->next = s->array_next;
    j->array->notok = s->array_failed;
    j->array->ok = s->array_done - s->array_failed;
    j->array->nostart = s->array_nostart;
    if (s->array_skip && d_array_skip_parse(j, s->array_skip) != 0)
        return mu_errf(err, MU_E_PARSE, "unreadable array_skip '%.40s'", s->array_skip);
    return 0;
}

/* A stored job back into d->jobs: queued again as it was, adopted, or set aside for requeue.
 * Stops (1) once a signal asked musterd to stop: what is not read yet stays stored as it is. */
static int recover_one(void *arg, const struct queue_stored_job *s, struct mu_err *err)
{
    struct recovery *r = arg;
    struct musterd *d = r->d;
    struct mu_err perr;
    struct d_job *j;
    enum queue_state st = QUEUE_PENDING;

    if (*d->stop)
        return 1;
    r->n++;
    j = d_job_alloc();
    if (!j)
        return mu_errf(err, MU_E_NOMEM, "out of memory recovering jobs");
    mu_strlcpy(j->id, s->id, sizeof(j->id));
    if (!s->spec || queue_spec_parse(s->spec, s->spec_len, &j->spec, &perr) != 0
        || queue_state_parse(s->state, &st) != 0) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s stored record unreadable, skipped", s->id);
        d_job_free(j);
        return 0;
    }
    if (s->user) /* as judged at intake (access rules), whatever the spec says */
        mu_strlcpy(j->spec.user, s->user, sizeof(j->spec.user));
    if (s->submitted_by)
        mu_strlcpy(j->owner, s->submitted_by, sizeof(j->owner));
    d_job_state_load(j, QUEUE_PENDING);
    j->attempt = s->attempt > 0 ? s->attempt : 1;
    j->failures = s->failures;
    j->held = s->held;
    j->submitted_ms = d_job_id_ms(j->id);
    j->started_ms = s->started_ms;
    j->lost_gpu_s = s->lost_gpu_s;
    if (d_job_text_set(&j->last_checkpoint, s->last_checkpoint) != 0) {
        d_job_free(j);
        return mu_errf(err, MU_E_NOMEM, "out of memory recovering jobs");
    }
    j->last_checkpoint_ms = s->last_checkpoint_ms;
    j->borrowed = s->borrowed;
    if (j->spec.array && array_recover(j, s, &perr) != 0) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s array: %s; skipped", s->id, perr.msg);
        d_job_free(j);
        return 0;
    }
    if (d_job_request_build(d, j, err) != 0) {
        d_job_free(j);
        return -1;
    }
    if (mu_map_put(d->jobs, j->id, j, &perr) != 0) {
        d_job_free(j);
        return 0;
    }
    /* A placed gang keeps running: it is adopted when its nodes report its tasks. */
    if ((st == QUEUE_STARTING || st == QUEUE_RUNNING || st == QUEUE_PREEMPTING) && s->placement
        && d_adopt_prepare(d, j, s->placement, st) == 0) {
        r->adopting++;
        return 0;
    }
    if (st != QUEUE_PENDING && !j->array)
        return requeue_later(r, j, err);
    if (j->array)
        d_job_state_load(j, st); /* PENDING or RUNNING: its elements run, never queued itself */
    if (s->after && !s->after_met && d_deps_parse(j, s->after, &perr) != 0)
        mu_log(MU_LOG_ERROR, "sched", "job=%s %s; queued without its dependencies", j->id,
               perr.msg);
    if (j->deps_open == 0 && !j->array)
        d_job_pending_add(d, j); /* else d_deps_recover judges it once every job is back */
    return 0;
}

/* The spot pools' cool-downs the last musterd published (pools status hash, cooldown_until in
 * wall ms), still running: a restart must not send gangs back to a pool that is being taken. */
static int cooldowns_recover(struct musterd *d, struct mu_err *err)
{
    int64_t now_s = (int64_t)(mu_time_wall_ms() / 1000);
    cJSON *pools = NULL;
    const cJSON *p;

    if (queue_status_read(d->q, QUEUE_K_POOLS, &pools, err) != 0)
        return -1;
    cJSON_ArrayForEach(p, pools)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
        const cJSON *until = cJSON_GetObjectItemCaseSensitive(p, "cooldown_until");
        const struct cfg_pool *cp =
            cJSON_IsString(name) ? cfg_pool_find(&d->cfg, name->valuestring) : NULL;
        int64_t until_s;
        if (!cp || !cJSON_IsNumber(until) || !(until->valuedouble > 0) || until->valuedouble > 1e15)
            continue;
        until_s = (int64_t)(until->valuedouble / 1000);
        if (until_s > now_s && until_s <= now_s + d->cfg.spot_cooldown_s)
            sched_cluster_pool_cooldown(d->cluster, (int)(cp - d->cfg.pools), until_s);
    }
    cJSON_Delete(pools);
    return 0;
}

/* Writes the set-aside gangs PENDING with a new attempt, then queues them. */
static int requeue_all(struct recovery *r, struct mu_err *err)
{
    struct musterd *d = r->d;

    for (int i = 0; i < r->nrequeue; i++) {
        struct d_job *j = r->requeue[i];
        char attempt[16];
        struct queue_kv f[] = { { QUEUE_F_ATTEMPT, attempt },
                                { QUEUE_F_NODES, NULL },
                                { QUEUE_F_PLACEMENT, NULL },
                                { QUEUE_F_STARTED_AT, NULL },
                                { QUEUE_F_BORROWED, NULL } };
        struct d_tally tally = { D_C_REQUEUES, 0, 0 };
        struct d_change c = { .to = QUEUE_PENDING,
                              .reason = "requeued after a scheduler restart",
                              .fields = f,
                              .nfields = (int)MU_ARRAY_LEN(f),
                              .tally = &tally };
        if (*d->stop)
            return 1; /* the rest stay stored as they were: the next start requeues them */
        j->attempt++; /* the event names the new attempt */
        (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
        if (d_job_write(d, j, &c) != 0)
            return mu_errf(err, MU_E_REDIS, "job %s: cannot requeue it after the restart", j->id);
        d_job_pending_add(d, j);
    }
    return 0;
}

/*
 * Takes the jobs of the active set back after a restart.  PENDING jobs queue again as they were.
 * A gang that was starting, running or being stopped is adopted from its stored placement
 * (d_adopt.c).  One whose placement cannot be read is requeued; workers that still run its
 * tasks are told to stop them when they register, because their attempt is no longer current.
 * A stop signal ends it early (issue #15: a service manager waits on musterd's exit): what was
 * not read yet is still stored as it was and the next start takes it back.
 */
int d_jobs_recover(struct musterd *d, struct mu_err *err)
{
    struct recovery r = { .d = d };
    int rc;

    if (d_nodes_recover(d, err) != 0 || d_usage_recover(d, err) != 0
        || cooldowns_recover(d, err) != 0)
        return -1;
    rc = queue_active_each(d->q, recover_one, &r, err);
    if (rc == 0)
        rc = requeue_all(&r, err);
    if (rc == 0) {
        d_array_recover(d);
        rc = d_deps_recover(d, err);
    }
    free(r.requeue);
    if (rc == 1) {
        mu_log(MU_LOG_INFO, "sched",
               "stop asked during recovery: stopped after %d active job(s); the rest stay stored",
               r.n);
        return 0;
    }
    if (rc != 0)
        return -1;
    if (r.n)
        mu_log(MU_LOG_INFO, "sched",
               "recovered %d active job(s): %d placed gang(s) to adopt, %d requeued", r.n,
               r.adopting, r.nrequeue);
    return 0;
}

/*
 * Redis is back and every job is written again (d_jobs_resync): the transitions that stopped
 * because their write failed are made now.  A gang whose every task is gone is released (its
 * final or requeued state written first); a starting gang whose tasks all run becomes RUNNING;
 * gangs still running on a draining or terminating node are stopped.  Stops for preemption,
 * time limits and starts are decided again by the next pass and tick.
 */
void d_outage_recheck(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (j->cancel_wanted && d_job_cancel(d, j) == 0)
            continue; /* may free j */
        if (!j->placed || j->adopting)
            continue;
        if (d_job_all_gone(j)) {
            d_job_release_if_done(d, j); /* may free j: iteration allows removal */
            continue;
        }
        if (j->state == QUEUE_STARTING && j->end == D_END_NONE)
            d_job_running_if_all_acked(d, j);
        for (int t = 0; t < j->spec.tasks && j->end == D_END_NONE; t++) {
            const struct d_node *node;
            char why[PROTO_NODE_MAX + 48];
            struct sched_reaction r;
            if (j->tasks[t].gone || j->slots[t].node < 0)
                continue;
            node = &d->nodes[j->slots[t].node];
            /* The node's reaction (core/react.c), made now with no deadline left to honour. */
            if (node->terminating) {
                r = sched_react_spot_notice(0, 0, 0, -1);
                (void)mu_snprintf(why, sizeof(why), "spot interruption of node %s", node->name);
            } else if (node->admin == SCHED_NODE_DRAINING) {
                r = sched_react_drain(0, -1);
                (void)mu_snprintf(why, sizeof(why), "node %s drained", node->name);
            } else {
                continue;
            }
            j->head_of_queue = r.head_of_queue;
            /* A failed write (logged by d_job_write) means Redis went away again: the next
             * reconnection runs this recheck again. */
            (void)d_gang_react(d, j, &r, why, 0, D_C_REQUEUES);
        }
    }
    d_array_fill_all(d); /* elements whose making failed while Redis was down */
}

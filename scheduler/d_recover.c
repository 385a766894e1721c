/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): taking the active jobs back after a restart.  PENDING jobs
 * queue again as they were.  A gang that was starting, running or being stopped is adopted from
 * its stored placement (d_adopt.c).  One whose placement cannot be read is requeued; workers
 * that still run its tasks are told to stop them when they register, because their attempt is
 * no longer current.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/*
 * Takes the jobs of the active set back after a restart.  PENDING jobs queue again as they were.
 * A gang that was starting, running or being stopped is adopted from its stored placement
 * (d_adopt.c).  One whose placement cannot be read is requeued; workers that still run its
 * tasks are told to stop them when they register, because their attempt is no longer current.
 */
int d_jobs_recover(struct musterd *d, struct mu_err *err)
{
    struct queue_stored_job *stored = NULL;
    int n = 0;
    int requeued = 0;
    int adopting = 0;

    if (d_nodes_recover(d, err) != 0 || d_usage_recover(d, err) != 0
        || queue_active_load(d->q, &stored, &n, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        struct queue_stored_job *s = &stored[i];
        struct mu_err perr;
        struct d_job *j = calloc(1, sizeof(*j));
        enum queue_state st = QUEUE_PENDING;

        if (!j) {
            mu_errf(err, MU_E_NOMEM, "out of memory recovering jobs");
            queue_stored_jobs_free(stored, n);
            return -1;
        }
        mu_strlcpy(j->id, s->id, sizeof(j->id));
        if (!s->spec || queue_spec_parse(s->spec, s->spec_len, &j->spec, &perr) != 0
            || queue_state_parse(s->state, &st) != 0) {
            mu_log(MU_LOG_ERROR, "sched", "job=%s stored record unreadable, skipped", s->id);
            d_job_free(j);
            continue;
        }
        j->state = QUEUE_PENDING;
        j->attempt = s->attempt > 0 ? s->attempt : 1;
        j->failures = s->failures;
        j->held = s->held;
        j->submitted_ms = d_job_id_ms(j->id);
        j->started_ms = s->started_ms;
        j->lost_gpu_s = s->lost_gpu_s;
        mu_strlcpy(j->last_checkpoint, s->last_checkpoint, sizeof(j->last_checkpoint));
        j->last_checkpoint_ms = s->last_checkpoint_ms;
        j->borrowed = s->borrowed;
        d_job_request_build(d, j);
        if (mu_map_put(d->jobs, j->id, j, &perr) != 0) {
            d_job_free(j);
            continue;
        }
        /* A placed gang keeps running: it is adopted when its nodes report its tasks. */
        if ((st == QUEUE_STARTING || st == QUEUE_RUNNING || st == QUEUE_PREEMPTING) && s->placement
            && d_adopt_prepare(d, j, s->placement, st) == 0) {
            adopting++;
            continue;
        }
        if (st != QUEUE_PENDING) {
            char attempt[16];
            struct queue_kv f[] = { { "attempt", attempt },
                                    { "nodes", NULL },
                                    { "placement", NULL },
                                    { "started_at", NULL },
                                    { "borrowed", NULL } };
            struct d_tally tally = { D_C_REQUEUES, 0, 0 };
            struct d_change c = { .to = QUEUE_PENDING,
                                  .reason = "requeued after a scheduler restart",
                                  .fields = f,
                                  .nfields = (int)MU_ARRAY_LEN(f),
                                  .tally = &tally };
            j->attempt++; /* the event names the new attempt */
            (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
            if (d_job_write(d, j, &c) != 0) {
                queue_stored_jobs_free(stored, n);
                return mu_errf(err, MU_E_REDIS, "job %s: cannot requeue it after the restart",
                               j->id);
            }
            requeued++;
        }
        d_job_pending_add(d, j);
    }
    if (n)
        mu_log(MU_LOG_INFO, "sched",
               "recovered %d active job(s): %d placed gang(s) to adopt, %d requeued", n, adopting,
               requeued);
    queue_stored_jobs_free(stored, n);
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
            if (j->tasks[t].gone || j->slots[t].node < 0)
                continue;
            node = &d->nodes[j->slots[t].node];
            if (node->terminating)
                (void)mu_snprintf(why, sizeof(why), "spot interruption of node %s", node->name);
            else if (node->admin == SCHED_NODE_DRAINING)
                (void)mu_snprintf(why, sizeof(why), "node %s drained", node->name);
            else
                continue;
            j->head_of_queue = node->terminating;
            (void)d_gang_stop(d, j, why, 0, D_C_REQUEUES, QUEUE_PENDING);
        }
    }
}

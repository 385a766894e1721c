/* SPDX-License-Identifier: MIT */
/*
 * Adopting placed gangs after a scheduler restart (issue #5): a gang that was STARTING, RUNNING
 * or PREEMPTING when musterd died is not restarted.  Its stored placement says which node ran
 * each task; when a node registers, its HELLO lists the tasks it runs (or saw exit), so each of
 * the gang's tasks there is committed in the cluster at once (nothing else can be placed on its
 * GPUs) and takes the state the worker reports.  Once every node of the gang has answered, the
 * gang is placed again, with the same attempt: running tasks go on, exits count as they would
 * have.  A task of a running gang its node does not know, or a node not back within
 * node_lost_after_s plus a margin, counts as lost: the attempt ends, its surviving tasks are
 * stopped, and the gang is requeued only once they are gone, exactly as when a node is lost under
 * a running scheduler.  A starting gang with a task its node does not report (a half-bound gang:
 * the BIND never arrived, or is still on its way) is rolled back the same way, and that task
 * counts as gone only when its node answers the KILL.  A STARTING gang whose tasks all run becomes
 * RUNNING; a PREEMPTING one is stopped again (checkpoint signal, grace, KILL), since the
 * restart may have cut its stop short.
 */
#include "scheduler/d_handlers.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define ADOPT_MARGIN_MS 2000

/* One task of the stored placement into j (slots, adopt_nodes); -1 when it cannot be j's. */
static int adopt_task(void *ctx, int t, const char *node, uint64_t gpus)
{
    struct d_job *j = ctx;
    if (t >= j->spec.tasks || !mu_name_is_valid(node, PROTO_NODE_MAX - 1))
        return -1;
    mu_strlcpy(j->adopt_nodes[t], node, sizeof(j->adopt_nodes[t]));
    j->slots[t].gpus |= gpus;
    j->slots[t].node = -1; /* until its node registers (d_adopt_node) */
    return 0;
}

int d_adopt_prepare(struct musterd *d,
                    struct d_job *j,
                    const char *placement,
                    enum queue_state stored)
{
    cJSON *doc = cJSON_Parse(placement);
    int rc = -1;

    if (!cJSON_IsArray(doc) || cJSON_GetArraySize(doc) != j->spec.tasks
        || d_job_live_reserve(d) != 0)
        goto out;
    j->slots = calloc((size_t)j->spec.tasks, sizeof(*j->slots));
    j->adopt_nodes = calloc((size_t)j->spec.tasks, sizeof(*j->adopt_nodes));
    if (!j->slots || d_job_tasks_new(j) != 0 || !j->adopt_nodes)
        goto out;
    if (queue_placement_each(doc, adopt_task, j) != 0)
        goto out;
    j->adopting = true;
    d_job_live_update(d, j);
    d_job_state_load(j, stored);
    j->placed_attempt = j->attempt;
    j->adopt_deadline_ms =
        mu_time_mono_ms() + (uint64_t)d->cfg.node_lost_after_s * 1000u + ADOPT_MARGIN_MS;
    rc = 0;
out:
    cJSON_Delete(doc);
    if (rc != 0) {
        d_job_placement_drop(j);
        mu_log(MU_LOG_WARN, "sched", "job=%s stored placement unreadable: requeued instead", j->id);
    }
    return rc;
}

static bool resolved(const struct d_job *j)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (j->slots[t].node < 0 && !j->tasks[t].gone)
            return false;
    }
    return true;
}

/* After d_job_task_exited: j was forgotten, ended, or released (requeued: tasks freed). */
static bool attempt_over(const struct musterd *d, const char *id, const struct d_job *j)
{
    return mu_map_get(d->jobs, id) != j || !j->placed || j->end != D_END_NONE;
}

/* Every task has answered (or is counted lost): the gang is placed again, same attempt. */
/* A gang adopted on a node the operator drained (while it or musterd was away: kept in
 * <prefix>node:wanted) moves off it the way d_node_drain moves the gangs it finds. */
static void adopt_drain(struct musterd *d, struct d_job *j)
{
    for (int t = 0; j->placed && j->end == D_END_NONE && t < j->spec.tasks; t++) {
        const struct d_node *node;
        char why[PROTO_NODE_MAX + 32];
        struct sched_reaction r;
        if (j->tasks[t].gone || j->slots[t].node < 0)
            continue;
        node = &d->nodes[j->slots[t].node];
        if (node->admin != SCHED_NODE_DRAINING)
            continue;
        r = sched_react_drain((int64_t)mu_time_mono_ms(), node->drain_grace_s);
        (void)mu_snprintf(why, sizeof(why), "node %s drained", node->name);
        mu_log(MU_LOG_INFO, "sched", "job=%s adopted on drained node %s: checkpointed and requeued",
               j->id, node->name);
        /* A stop Redis cannot take now (d_job_write logged it) is made again by
         * d_outage_recheck once Redis is back: the gang is still on a draining node. */
        (void)d_gang_react(d, j, &r, why, (uint64_t)r.stop_by_ms, D_C_REQUEUES);
        return;
    }
}

static void adopt_finish(struct musterd *d, struct d_job *j)
{
    int first_gone = -1;

    j->adopting = false;
    j->placed = true;
    free(j->adopt_nodes);
    j->adopt_nodes = NULL;
    for (int t = 0; t < j->spec.tasks; t++) {
        if (j->tasks[t].gone && first_gone < 0)
            first_gone = t;
    }
    mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d adopted after the restart (%s)%s", j->id,
           j->attempt, queue_state_name(j->state), first_gone < 0 ? ": all tasks running" : "");
    d_limit_watch(d, j); /* its clock runs from started_at, as before the restart */
    d->dirty = true;
    d->nodes_dirty = true;
    if (j->state == QUEUE_PREEMPTING) {
        /* First, so that the exits below count as the stop's, not as failures.  The stop is
         * written again (PREEMPTING, with its reason); the state changes only through
         * d_job_write, never here. */
        if (d_gang_stop(d, j, "the scheduler restarted while the gang was being stopped", 0,
                        D_C_NONE, QUEUE_PENDING)
            != 0)
            mu_log(MU_LOG_WARN, "sched", "job=%s its stop cannot be written: it runs on", j->id);
    }
    if (first_gone >= 0) {
        char id[QUEUE_JOB_ID_MAX];
        /* Lost and fenced tasks end the attempt first (not counted); then exits, as they would
         * have.  d_job_task_exited may finish and forget j: look it up again after each call. */
        mu_strlcpy(id, j->id, sizeof(id));
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->tasks[t].gone && (j->tasks[t].lost || j->tasks[t].fenced)) {
                d_job_task_exited(d, j, t,
                                  j->slots[t].node >= 0 ? d_node_name(d, j->slots[t].node)
                                                        : "(not back)");
                if (attempt_over(d, id, j))
                    return;
            }
        }
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->tasks[t].gone && !j->tasks[t].lost && !j->tasks[t].fenced) {
                d_job_task_exited(d, j, t, d_node_name(d, j->slots[t].node));
                if (attempt_over(d, id, j))
                    return;
            }
        }
    }
    if (j->state == QUEUE_STARTING) {
        for (int t = 0; t < j->spec.tasks; t++) {
            char why[300];
            if (j->tasks[t].gone || j->tasks[t].acked)
                continue;
            /* Half-bound: roll it back.  The KILL also stops a BIND still on its way (the
             * worker refuses a BIND whose KILL came first); the task counts as gone only once
             * its node answers for it. */
            (void)mu_snprintf(why, sizeof(why),
                              "the scheduler restarted while the gang was starting; task %d's "
                              "BIND had not reached node %s",
                              t, d_node_name(d, j->slots[t].node));
            d_job_attempt_end(d, j, false, 0, why);
            return;
        }
        d_job_running_if_all_acked(d, j);
    }
    adopt_drain(d, j);
}

/* The worker's view of one of our tasks in its HELLO, or NULL. */
static const struct proto_task_ref *reported(const struct proto_msg *hello,
                                             const struct d_job *j,
                                             int t)
{
    for (int i = 0; i < hello->ntasks; i++) {
        const struct proto_task_ref *r = &hello->tasks[i];
        if (r->task == t && r->attempt == j->attempt && strcmp(r->job, j->id) == 0)
            return r;
    }
    return NULL;
}

void d_adopt_node(struct musterd *d, struct d_node *node, const struct proto_msg *hello)
{
    struct d_live_probe on = d_live_probe(node->name);
    struct d_job *j;

    for (int k = d->nlive; (j = d_live_prev_on(d, &k, on)) != NULL;) {
        if (!j->adopting)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            struct d_task *task = &j->tasks[t];
            const struct proto_task_ref *r;
            struct sched_request one = j->req;
            if (j->slots[t].node >= 0 || task->gone || strcmp(j->adopt_nodes[t], node->name) != 0)
                continue;
            r = reported(hello, j, t);
            j->slots[t].node = node->idx;
            if (!r && j->state != QUEUE_STARTING) {
                task->gone = true; /* it had started: the worker lost it */
                task->lost = true;
                continue;
            }
            if (r && r->state != PROTO_TASK_RUNNING) {
                d_task_record_end(task, r); /* acknowledged at the attempt's end */
                continue;
            }
            /* Running, or (not reported, in a gang that was starting) its BIND may still be on
             * the way: its resources are ours again before anything else is placed here. */
            one.tasks = 1;
            sched_cluster_commit(d->cluster, &one, &j->slots[t]);
            d_job_task_commit(j, t);
            d_usage_hold(d, j, 1);
            node->idle_since_ms = 0;
            if (!r)
                continue; /* answered for once adopt_finish rolls the gang back */
            task->acked = true;
            task->pid = r->pid;
        }
        if (resolved(j))
            adopt_finish(d, j); /* may forget j: iteration allows removal */
    }
}

void d_adopt_task_status(struct d_job *j, const struct d_node *node, const struct proto_task_ref *r)
{
    struct d_task *task;
    if (r->task < 0 || r->task >= j->spec.tasks || r->state == PROTO_TASK_RUNNING)
        return;
    task = &j->tasks[r->task];
    /* Not resolved from this node yet: its HELLO says how the task is, when it registers. */
    if (j->slots[r->task].node != node->idx || task->gone)
        return;
    d_task_record_end(task, r); /* counted when the gang is adopted (adopt_finish) */
}

void d_adopt_check(struct musterd *d, uint64_t now_ms)
{
    struct d_job *j;

    for (int k = d->nlive; k-- > 0;) {
        if (k >= d->nlive)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->live[k];
        if (!j->adopting || now_ms < j->adopt_deadline_ms)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->slots[t].node < 0 && !j->tasks[t].gone) {
                mu_log(MU_LOG_WARN, "sched", "job=%s task=%d: node %s did not come back", j->id, t,
                       j->adopt_nodes[t]);
                j->tasks[t].gone = true;
                j->tasks[t].lost = true;
                /* A node cut off from us fences itself; the next attempt waits for that. */
                j->not_before_ms = now_ms + d_fence_wait_ms(j);
            }
        }
        adopt_finish(d, j);
    }
}

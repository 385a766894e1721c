/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): what the workers report (docs/design.md §5, §7): registration
 * and the tasks a worker runs, BIND acknowledgements, task exits, checkpoints, spot notices and
 * rebalance recommendations, a worker's goodbye (BYE); and what their silence means: bind
 * timeouts, nodes judged lost (or down: the BYE takes the same path without the wait),
 * stopping gangs whose tasks are not answered for yet.  A report about an attempt that is not
 * current is answered with KILL (the worker forgets an exit only when told), never acted on.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define BIND_GIVE_UP_MS 1000  /* after a BIND's expires_ms, see d_jobs_check_timeouts */
#define KILL_RESEND_MS  5000  /* a stopping attempt's KILLs are repeated this often */
#define SPOT_MARGIN_MS  15000 /* stop gangs this long before a spot deadline */

/* The job and task a report is about, when it belongs to the placed attempt on that node. */
static struct d_job *task_lookup(struct musterd *d,
                                 const struct d_node *node,
                                 const struct proto_task_ref *t)
{
    struct d_job *j = mu_map_get(d->jobs, t->job);
    if (!j || !j->placed || t->attempt != j->placed_attempt || t->task < 0
        || t->task >= j->spec.tasks || j->slots[t->task].node != node->idx)
        return NULL;
    return j;
}

/* A task of an attempt we do not run (superseded, unknown, finished): tell the worker to stop
 * it and forget it.  Never answered for LOST, so the exchange ends. */
static void stale_task(struct musterd *d, struct d_node *node, const struct proto_task_ref *t)
{
    struct proto_msg m;
    if (t->state == PROTO_TASK_LOST)
        return;
    proto_msg_init(&m, PROTO_KILL);
    m.task = *t;
    m.grace_s = d->cfg.kill_grace_s;
    /* For an exited task the KILL only lets the worker drop the exit status it kept. */
    mu_log(t->state == PROTO_TASK_RUNNING ? MU_LOG_INFO : MU_LOG_DEBUG, "sched",
           "job=%s task=%d attempt=%d node=%s not current: %s", t->job, t->task, t->attempt,
           node->name, t->state == PROTO_TASK_RUNNING ? "stopping it" : "forgetting it");
    d_send(&d->out, node->name, &m);
    proto_msg_release(&m);
}

void d_task_status(struct musterd *d, struct d_node *node, const struct proto_task_ref *t)
{
    struct d_job *j = task_lookup(d, node, t);
    struct d_task *task;

    if (t->state == PROTO_TASK_EXITED && t->stopped)
        d_node_stopping(d, node); /* before the attempt ends: not placed there again */
    if (!j) {
        struct d_job *any = mu_map_get(d->jobs, t->job);
        if (any && any->adopting && t->attempt == any->attempt)
            d_adopt_task_status(any, node, t);
        else
            stale_task(d, node, t);
        return;
    }
    task = &j->tasks[t->task];
    if (task->gone)
        return; /* a repeat: acknowledged at the attempt's end */
    if (t->state == PROTO_TASK_RUNNING) {
        task->acked = true;
        task->pid = t->pid;
        if (j->end == D_END_NONE)
            d_job_running_if_all_acked(d, j);
        else if (j->kill_sent_ms && mu_time_mono_ms() - j->kill_sent_ms >= KILL_RESEND_MS)
            d_task_kill(d, j, t->task, d->cfg.kill_grace_s); /* our KILL may have been lost */
        return;
    }
    d_task_record_end(task, t);
    d_job_task_exited(d, j, t->task, node->name);
}

/* A task's checkpoint: kept for the job's next attempt, once, the newest of its ranks'. */
static void checkpoint_record(struct musterd *d,
                              const struct d_node *node,
                              const struct proto_task_ref *t,
                              const char *path,
                              uint64_t at_ms)
{
    struct d_job *j = mu_map_get(d->jobs, t->job);
    char at[32];
    char why[PROTO_PATH_MAX + 64];
    struct queue_kv f[] = { { QUEUE_F_LAST_CHECKPOINT, path }, { QUEUE_F_LAST_CHECKPOINT_AT, at } };

    /* The current attempt's, or (it may arrive just after) the one that ended while the job
     * waits for its next attempt, which is exactly when it matters. */
    bool current = j && (j->placed || j->adopting) && t->attempt == j->placed_attempt;
    bool just_ended = j && !j->placed && j->state == QUEUE_PENDING && t->attempt == j->attempt - 1;
    if (!(current || just_ended) || !path[0]) {
        mu_log(MU_LOG_DEBUG, "sched", "job=%s node=%s checkpoint of a stale attempt ignored",
               t->job, node->name);
        return;
    }
    if (at_ms && at_ms < j->last_checkpoint_ms)
        return; /* an older one from another rank */
    if (at_ms == j->last_checkpoint_ms && j->last_checkpoint
        && strcmp(path, j->last_checkpoint) == 0)
        return; /* a repeat (every HELLO says it again) */
    if (d_job_text_set(&j->last_checkpoint, path) != 0)
        return;
    j->last_checkpoint_ms = at_ms ? at_ms : mu_time_wall_ms();
    (void)mu_snprintf(at, sizeof(at), "%llu", (unsigned long long)j->last_checkpoint_ms);
    (void)mu_snprintf(why, sizeof(why), "task %d on %s wrote %s", t->task, node->name, path);
    {
        struct d_change c = { .to = D_SAME,
                              .event = "CHECKPOINT",
                              .reason = why,
                              .fields = f,
                              .nfields = (int)MU_ARRAY_LEN(f) };
        if (d_job_write(d, j, &c) != 0)
            d_job_remember(d, j, &c); /* a reported fact: the checkpoint was written */
    }
    mu_log(MU_LOG_INFO, "sched", "job=%s checkpoint %s", j->id, path);
    if (current)
        d_spot_return_check(d, j);
}

/* Reconciles the tasks a worker says it runs (HELLO) with what the scheduler believes. */
static void node_reconcile(struct musterd *d, struct d_node *node, const struct proto_msg *hello)
{
    struct d_job *j;
    struct d_live_probe on = d_live_probe(node->name);

    for (int i = 0; i < hello->ntasks; i++)
        d_task_status(d, node, &hello->tasks[i]);
    /* Tasks we placed there that the worker does not know any more. */
    for (int k = d->nlive; (j = d_live_prev_on(d, &k, on)) != NULL;) {
        if (!j->placed)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            struct proto_task_ref ref = { .task = t,
                                          .attempt = j->placed_attempt,
                                          .state = PROTO_TASK_LOST };
            bool reported = false;
            if (j->slots[t].node != node->idx || j->tasks[t].gone || !j->tasks[t].acked)
                continue;
            for (int i = 0; i < hello->ntasks && !reported; i++) {
                reported = strcmp(hello->tasks[i].job, j->id) == 0 && hello->tasks[i].task == t
                           && hello->tasks[i].attempt == j->placed_attempt;
            }
            if (reported)
                continue;
            mu_strlcpy(ref.job, j->id, sizeof(ref.job));
            d_task_status(d, node, &ref);
            break; /* the job may be gone now; its other tasks were handled with it */
        }
    }
}

void d_hello(struct musterd *d, const char *identity, const struct proto_msg *m)
{
    struct d_node *node = d_node_register(d, identity, m);
    if (!node)
        return;
    /* First the checkpoints: an attempt this HELLO ends must resume from them. */
    for (int i = 0; i < m->ntasks; i++) {
        if (m->tasks[i].checkpoint[0])
            checkpoint_record(d, node, &m->tasks[i], m->tasks[i].checkpoint,
                              m->tasks[i].checkpoint_at_ms);
    }
    d_adopt_node(d, node, m); /* before the reconcile: those tasks are not stale */
    node_reconcile(d, node, m);
}

void d_bind_ack(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    struct d_job *j = task_lookup(d, node, &m->task);
    struct d_task *task;
    char why[400];

    if (!j) {
        if (m->ok)
            stale_task(d, node, &m->task);
        return;
    }
    task = &j->tasks[m->task.task];
    if (task->gone)
        return; /* answered for already (its node was lost, or a repeat) */
    if (!m->ok) {
        /* Whatever else happened to the attempt, this task never ran: one more answer in. */
        task->gone = true;
        if (j->end != D_END_NONE) {
            d_job_release_if_done(d, j); /* may free j */
            return;
        }
        (void)mu_snprintf(why, sizeof(why), "task %d on node %s did not start: %s", m->task.task,
                          node->name, m->error[0] ? m->error : "unknown error");
        d_job_avoid(j, node->idx);
        if (m->node_fault) {
            /* The node's doing (identity, state dir, GPUs): not the job's failure. */
            d_node_refused(d, node, j, m->error);
            d_job_attempt_end(d, j, false, 0, why); /* may free j */
        } else {
            d_job_attempt_end(d, j, true, 127, why); /* may free j */
        }
        return;
    }
    node->refusals = 0; /* it runs work again */
    if (task->acked)
        return;
    task->acked = true;
    task->pid = m->task.pid;
    if (j->end == D_END_NONE)
        d_job_running_if_all_acked(d, j);
    else if (j->kill_sent_ms)
        d_task_kill(d, j, m->task.task, d->cfg.kill_grace_s); /* started after we gave up */
}

void d_checkpoint_done(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    checkpoint_record(d, node, &m->task, m->path, m->at_ms);
}

void d_spot_notice(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    uint64_t now_wall = mu_time_wall_ms();
    uint64_t now = mu_time_mono_ms();
    /* Decided on the notice's clock (wall), applied on ours (mono). */
    struct sched_reaction r = sched_react_spot_notice((int64_t)now_wall, (int64_t)m->deadline_ms,
                                                      SPOT_MARGIN_MS, d->cfg.spot_cooldown_s);
    uint64_t deadline = now + (uint64_t)(r.stop_by_ms - (int64_t)now_wall);
    const struct cfg_pool *pool = cfg_pool_find(&d->cfg, node->pool);
    char why[256];
    struct d_job *j;
    struct d_live_probe on = d_live_probe(node->name);

    if (node->terminating)
        return; /* the same notice again */
    node->terminate_at_ms = m->deadline_ms;
    d_node_state_set(d, node, r.node_state);
    if (pool && r.cool_down)
        sched_cluster_pool_cooldown(d->cluster, (int)(pool - d->cfg.pools), r.cooldown_until_s);
    (void)d_counters_incr(&d->metrics, &d->store, D_C_SPOT, NULL);
    mu_log(MU_LOG_WARN, "sched",
           "node=%s spot %s notice, deadline in %lld s: moving its gangs; pool %s cools down "
           "for %d s",
           node->name, m->action[0] ? m->action : "interruption",
           (long long)((int64_t)m->deadline_ms - (int64_t)now_wall) / 1000, node->pool,
           d->cfg.spot_cooldown_s);
    (void)mu_snprintf(why, sizeof(why), "spot %s of node %s",
                      m->action[0] ? m->action : "interruption", node->name);
    for (int k = d->nlive; (j = d_live_prev_on(d, &k, on)) != NULL;) {
        if (!j->placed || j->end != D_END_NONE || !d_gang_runs_on(j, node->idx))
            continue;
        /* A stop that cannot be written now is made once Redis is back (d_outage_recheck). */
        (void)d_gang_react(d, j, &r, why, deadline, D_C_NONE);
    }
    d->dirty = true;
}

void d_rebalance(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    (void)m;
    if (node->at_risk)
        return;
    node->at_risk = true;
    sched_cluster_node_set_at_risk(d->cluster, node->idx, true);
    mu_log(MU_LOG_WARN, "sched", "node=%s rebalance recommendation: no new gangs there",
           node->name);
    d->nodes_dirty = true;
}

void d_bye(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    int idx = node->idx;

    /* The exits came first on the same socket (TASK_STATUS, marked stopped); this says them
     * again, with the tasks the worker could not stop.  A repeat changes nothing. */
    for (int i = 0; i < m->ntasks; i++)
        d_task_status(d, node, &m->tasks[i]);
    d_node_down(d, node);
    /* Gangs whose tasks here all ended are requeued already, with no wait: their processes are
     * gone.  Whatever is not answered for (still running, or not mentioned) waits the fence. */
    d_node_lost_tasks(d, idx);
}

void d_node_lost_tasks(struct musterd *d, int node_idx)
{
    struct d_job *j;
    char why[200];
    struct d_live_probe on = d_live_probe(d_node_name(d, node_idx));
    struct sched_reaction r = sched_react_node_lost(d->nodes[node_idx].down);

    (void)mu_snprintf(why, sizeof(why), "node %s %s", d_node_name(d, node_idx),
                      r.node_state == SCHED_NODE_DOWN ? "down (its worker stopped)" : "lost");
    for (int k = d->nlive; (j = d_live_prev_on(d, &k, on)) != NULL;) {
        bool hit = false;
        if (!j->placed)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->slots[t].node == node_idx && !j->tasks[t].gone) {
                j->tasks[t].gone = true;
                hit = true;
            }
        }
        if (!hit)
            continue;
        j->not_before_ms = mu_time_mono_ms() + d_fence_wait_ms(j);
        if (j->end == D_END_NONE) /* requeued, not counted: may free j (iteration allows it) */
            d_job_attempt_end(d, j, !r.requeue, 0, why);
        else
            d_job_release_if_done(d, j);
    }
}

/*
 * A gang whose BINDs are not all acknowledged by their deadline is given up: the attempt ends
 * (not counted against the job) and every task of it is sent KILL.  A task not acknowledged is
 * not assumed gone: its node may only be slow or frozen with the BIND in its socket.  It stays
 * committed until the node answers for it (an exit, LOST for a task it does not know, or a
 * refused BIND: the worker refuses a BIND past its expires_ms, which is the deadline, and one
 * whose KILL came first) or the node is judged lost, after which its lease has run out.  The
 * next attempt waits for that, so two attempts never run side by side.  BIND_GIVE_UP_MS after
 * the deadline: the worker's bound of our clock lags by its fastest one-way delay.
 */
void d_jobs_check_timeouts(struct musterd *d, uint64_t now_ms)
{
    struct d_job *j;

    for (int k = d->nlive; k-- > 0;) {
        if (k >= d->nlive)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->live[k];
        if (j->placed && j->state == QUEUE_STARTING && j->end == D_END_NONE
            && now_ms > j->bind_deadline_ms + BIND_GIVE_UP_MS) {
            char why[300];
            int slow = 0;
            for (int t = 0; t < j->spec.tasks; t++) {
                if (!j->tasks[t].acked) {
                    slow = t;
                    break;
                }
            }
            (void)mu_snprintf(why, sizeof(why), "task %d on node %s did not start within %d s",
                              slow, d_node_name(d, j->slots[slow].node), d->cfg.bind_timeout_s);
            d_job_attempt_end(d, j, false, 0, why); /* KILLs every task not yet gone */
        }
    }
}

/* The first live task of a stopping attempt, as "task 1 on node n2", into buf. */
static void first_live(const struct musterd *d, const struct d_job *j, char *buf, size_t size)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].gone) {
            (void)mu_snprintf(buf, size, "task %d on node %s", t, d_node_name(d, j->slots[t].node));
            return;
        }
    }
    buf[0] = '\0';
}

void d_stops_check(struct musterd *d, uint64_t now_ms)
{
    struct d_job *j;

    for (int k = d->nlive; k-- > 0;) {
        if (k >= d->nlive)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->live[k];
        if (!j->placed || j->end == D_END_NONE)
            continue;
        if (j->kill_at_ms && now_ms >= j->kill_at_ms) { /* d_gang_stop's grace is over */
            j->kill_at_ms = 0;
            mu_log(MU_LOG_INFO, "sched", "job=%s checkpoint grace over: killing what is left",
                   j->id);
            d_job_kill_live(d, j);
        } else if (j->kill_sent_ms && now_ms - j->kill_sent_ms >= KILL_RESEND_MS) {
            /* A KILL or its answer can be lost (a reconnect), and a frozen node answers late:
             * say it again until every task is answered for or its node is judged lost. */
            char live[PROTO_NODE_MAX + 32];
            char why[300];
            first_live(d, j, live, sizeof(live));
            mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d still stopping: no answer for %s yet",
                   j->id, j->placed_attempt, live);
            d_job_kill_live(d, j);
            if (j->state == QUEUE_PENDING) {
                (void)mu_snprintf(why, sizeof(why),
                                  "waiting for attempt %d to stop: no answer yet for %s (a node "
                                  "that stays silent is judged lost after %d s)",
                                  j->placed_attempt, live, d->cfg.node_lost_after_s);
                d_job_set_reason(d, j, why);
            }
        }
    }
}

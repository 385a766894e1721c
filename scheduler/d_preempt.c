/* SPDX-License-Identifier: MIT */
/*
 * Losing as little GPU work as possible when capacity is taken away (DESIGN §5, issue #4):
 * checkpoints reported by the workers, gangs stopped for a preemptor or a spot interruption, and
 * the rebalance recommendation.
 *
 * A stopping gang is PREEMPTING: its tasks get the checkpoint signal (when the job has a
 * checkpoint block), then KILL once the grace is over or the deadline (a spot notice's, minus a
 * safety margin) comes, whichever is first.  Its resources stay committed until every task is
 * gone, so nothing else can take them early; then it goes back to PENDING with attempt + 1, its
 * original submit time and its newest checkpoint, which the next attempt gets as
 * MUSTER_RESUME_FROM.  Work lost = GPUs x (stop time - newest checkpoint, or start if none).
 */
#include "scheduler/daemon.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define SPOT_MARGIN_S  15   /* stop gangs this long before a spot deadline */
#define KILL_RESEND_MS 5000 /* a stopping attempt's KILLs are repeated this often */

void d_checkpoint_done(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    struct d_job *j = mu_map_get(d->jobs, m->task.job);
    char at[32];
    char why[PROTO_PATH_MAX + 64];
    struct queue_kv f[] = { { "last_checkpoint", m->path }, { "last_checkpoint_at", at } };

    /* The current attempt's, or (it may arrive just after) the one that ended while the job
     * waits for its next attempt, which is exactly when it matters. */
    bool current = j && (j->placed || j->adopting) && m->task.attempt == j->placed_attempt;
    bool just_ended =
        j && !j->placed && j->state == QUEUE_PENDING && m->task.attempt == j->attempt - 1;
    if (!(current || just_ended) || !m->path[0]) {
        mu_log(MU_LOG_DEBUG, "sched", "job=%s node=%s checkpoint of a stale attempt ignored",
               m->task.job, node->name);
        return;
    }
    if (m->at_ms && m->at_ms < j->last_checkpoint_ms)
        return; /* an older one from another rank */
    if (m->at_ms == j->last_checkpoint_ms && strcmp(m->path, j->last_checkpoint) == 0)
        return; /* a repeat (workers say it again after every HELLO) */
    mu_strlcpy(j->last_checkpoint, m->path, sizeof(j->last_checkpoint));
    j->last_checkpoint_ms = m->at_ms ? m->at_ms : mu_time_wall_ms();
    (void)mu_snprintf(at, sizeof(at), "%llu", (unsigned long long)j->last_checkpoint_ms);
    (void)mu_snprintf(why, sizeof(why), "task %d on %s wrote %s", m->task.task, node->name,
                      m->path);
    (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "CHECKPOINT", why, NULL);
    mu_log(MU_LOG_INFO, "sched", "job=%s checkpoint %s", j->id, m->path);
}

static void signal_tasks(struct musterd *d, struct d_job *j, int sig)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        struct proto_msg m;
        if (j->tasks[t].gone)
            continue;
        proto_msg_init(&m, PROTO_CHECKPOINT);
        mu_strlcpy(m.task.job, j->id, sizeof(m.task.job));
        m.task.task = t;
        m.task.attempt = j->placed_attempt;
        m.signal = sig;
        m.grace_s = j->spec.checkpoint_grace_s;
        d_send(d, d_node_name(d, j->tasks[t].node), &m);
        proto_msg_release(&m);
    }
}

void d_gang_stop(struct musterd *d,
                 struct d_job *j,
                 const char *why,
                 uint64_t deadline_ms,
                 enum d_counter counter,
                 enum queue_state to)
{
    uint64_t now = mu_time_mono_ms();
    struct d_tally tally = { (int)counter, 0, 0 };

    if (!j->placed || j->end != D_END_NONE)
        return;
    mu_strlcpy(j->stop_reason, why, sizeof(j->stop_reason));
    if (to == QUEUE_PENDING) {
        struct queue_kv f[] = { { "state", "PREEMPTING" }, { "reason", why } };
        j->end = D_END_RETRY;
        j->state = QUEUE_PREEMPTING;
        (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "PREEMPTING", why, &tally);
    } else {
        /* The job ends once the gang is gone (d_job_release_if_done writes `to` then); until
         * then it keeps its state, and a restart that adopts it stops it again. */
        struct queue_kv f[] = { { "reason", why } };
        j->end = D_END_FINAL;
        j->stop_to = to;
        (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "STOPPING", why, &tally);
    }
    if (j->spec.checkpointable) {
        uint64_t grace_end = now + (uint64_t)j->spec.checkpoint_grace_s * 1000u;
        j->kill_at_ms = deadline_ms && deadline_ms < grace_end ? deadline_ms : grace_end;
        signal_tasks(d, j, j->spec.checkpoint_signal);
        mu_log(MU_LOG_INFO, "sched", "job=%s stopping (%s): %s sent, %llu ms to checkpoint", j->id,
               why, mu_signal_name(j->spec.checkpoint_signal),
               (unsigned long long)(j->kill_at_ms > now ? j->kill_at_ms - now : 0));
    } else {
        j->kill_at_ms = 0;
        d_job_kill_live(d, j);
        mu_log(MU_LOG_INFO, "sched", "job=%s stopping (%s): no checkpoint block, killed", j->id,
               why);
    }
}

/* The first live task of a stopping attempt, as "task 1 on node n2", into buf. */
static void first_live(const struct musterd *d, const struct d_job *j, char *buf, size_t size)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].gone) {
            (void)mu_snprintf(buf, size, "task %d on node %s", t, d_node_name(d, j->tasks[t].node));
            return;
        }
    }
    buf[0] = '\0';
}

void d_stops_check(struct musterd *d, uint64_t now_ms)
{
    size_t pos = 0;
    struct d_job *j;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
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

void d_preempted_requeue(struct musterd *d, struct d_job *j)
{
    uint64_t now = mu_time_wall_ms();
    uint64_t from = j->last_checkpoint_ms > j->started_ms ? j->last_checkpoint_ms : j->started_ms;
    char attempt[16];
    char lost[32];
    char reason[300];
    struct queue_kv f[] = { { "state", "PENDING" }, { "attempt", attempt },
                            { "reason", reason },   { "lost_gpu_seconds", lost },
                            { "nodes", NULL },      { "placement", NULL },
                            { "started_at", NULL } };
    struct d_tally tally = { -1, 0, 0 };
    struct d_job *preemptor = j->preempted_for[0] ? mu_map_get(d->jobs, j->preempted_for) : NULL;

    if (from && now > from)
        tally.lost_gpu_s =
            (double)j->spec.tasks * j->spec.gpus_per_task * (double)(now - from) / 1000.0;
    j->lost_gpu_s += tally.lost_gpu_s;
    j->attempt++;
    j->state = QUEUE_PENDING;
    (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
    (void)mu_snprintf(lost, sizeof(lost), "%.3f", j->lost_gpu_s);
    (void)mu_snprintf(reason, sizeof(reason), "requeued: %s (lost %.0f GPU-s of work)",
                      j->stop_reason, tally.lost_gpu_s);
    mu_strlcpy(j->reason, reason, sizeof(j->reason));
    mu_strlcpy(j->reason_written, reason, sizeof(j->reason_written));
    j->reason_stored = true;
    j->reason_at_ms = mu_time_mono_ms();
    (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "PENDING", reason, &tally);
    mu_log(MU_LOG_INFO, "sched", "job=%s stopped and requeued as attempt %d, lost %.1f GPU-s",
           j->id, j->attempt, tally.lost_gpu_s);
    if (preemptor && preemptor->victims_stopping > 0)
        preemptor->victims_stopping--;
    j->preempted_for[0] = '\0';
}

/* A gang with a task still running on node idx. */
static bool runs_on(const struct d_job *j, int idx)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (j->tasks[t].node == idx && !j->tasks[t].gone)
            return true;
    }
    return false;
}

void d_spot_notice(struct musterd *d, struct d_node *node, const struct proto_msg *m)
{
    uint64_t now_wall = mu_time_wall_ms();
    uint64_t now = mu_time_mono_ms();
    uint64_t deadline = now;
    const struct cfg_pool *pool = cfg_pool_find(&d->cfg, node->pool);
    char why[256];
    size_t pos = 0;
    struct d_job *j;

    if (node->terminating)
        return; /* the same notice again */
    node->terminating = true;
    node->terminate_at_ms = m->deadline_ms;
    sched_cluster_node_set_state(d->cluster, node->idx, SCHED_NODE_TERMINATING);
    if (m->deadline_ms > now_wall + SPOT_MARGIN_S * 1000u)
        deadline = now + (m->deadline_ms - now_wall) - SPOT_MARGIN_S * 1000u;
    if (pool)
        sched_cluster_pool_cooldown(d->cluster, (int)(pool - d->cfg.pools),
                                    (int64_t)(now_wall / 1000) + d->cfg.spot_cooldown_s);
    d->metrics.counters[D_C_SPOT] += 1;
    queue_reply_free(
        queue_command(d->q, NULL, "HINCRBY %scounters spot_interruptions 1", d->cfg.key_prefix));
    mu_log(MU_LOG_WARN, "sched",
           "node=%s spot %s notice, deadline in %lld s: moving its gangs; pool %s cools down "
           "for %d s",
           node->name, m->action[0] ? m->action : "interruption",
           (long long)((int64_t)m->deadline_ms - (int64_t)now_wall) / 1000, node->pool,
           d->cfg.spot_cooldown_s);
    (void)mu_snprintf(why, sizeof(why), "spot %s of node %s",
                      m->action[0] ? m->action : "interruption", node->name);
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->placed || j->end != D_END_NONE || !runs_on(j, node->idx))
            continue;
        j->head_of_queue = true;
        d_gang_stop(d, j, why, deadline, D_C_NONE, QUEUE_PENDING);
    }
    d->nodes_dirty = true;
    d->dirty = true;
}

void d_node_drain(struct musterd *d, struct d_node *node, int grace_s)
{
    uint64_t deadline = grace_s >= 0 ? mu_time_mono_ms() + (uint64_t)grace_s * 1000u : 0;
    char why[PROTO_NODE_MAX + 32];
    size_t pos = 0;
    struct d_job *j;
    int n = 0;

    (void)mu_snprintf(why, sizeof(why), "node %s drained", node->name);
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->placed || j->end != D_END_NONE || !runs_on(j, node->idx))
            continue;
        d_gang_stop(d, j, why, deadline, D_C_REQUEUES, QUEUE_PENDING);
        n++;
    }
    mu_log(MU_LOG_INFO, "sched", "node=%s draining: %d gang(s) checkpointed and requeued%s",
           node->name, n, grace_s >= 0 ? " (grace capped by --grace)" : "");
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

static int victims_scratch(struct musterd *d, int n)
{
    if (n <= d->pass.cap_victims)
        return 0;
    {
        int cap = n * 2;
        struct sched_victim *v = realloc(d->pass.victims, (size_t)cap * sizeof(*v));
        struct d_job **jobs = v ? realloc(d->pass.victim_jobs, (size_t)cap * sizeof(*jobs)) : NULL;
        int *idx = jobs ? realloc(d->pass.plan_victims, (size_t)cap * sizeof(*idx)) : NULL;
        if (v)
            d->pass.victims = v;
        if (jobs)
            d->pass.victim_jobs = jobs;
        if (idx)
            d->pass.plan_victims = idx;
        if (!v || !jobs || !idx)
            return -1;
        d->pass.cap_victims = cap;
    }
    return 0;
}

bool d_preempt_for(struct musterd *d, struct d_job *p, int64_t now_ms)
{
    int64_t now_s = now_ms / 1000;
    struct sched_preempt_plan plan;
    struct sched_slot *slots = NULL;
    struct mu_err err;
    size_t pos = 0;
    struct d_job *j;
    char why[256];
    int n = 0;
    int rc;

    if (p->victims_stopping > 0)
        return true; /* its victims are still stopping; the freed GPUs wait for it */
    if (p->held || victims_scratch(d, (int)mu_map_count(d->jobs)) != 0)
        return false;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        struct sched_victim *v = &d->pass.victims[n];
        if (!j->placed || !d_job_fully_committed(j))
            continue;
        v->req = &j->req;
        v->slots = j->slots;
        v->priority = j->spec.priority;
        /* A gang already stopping frees its GPUs anyway: not a victim again. */
        v->preemptible = j->spec.preemptible && j->end == D_END_NONE;
        v->started_ms = (int64_t)j->started_ms;
        v->checkpoint_ms = (int64_t)j->last_checkpoint_ms;
        v->grace_s = j->spec.checkpointable ? j->spec.checkpoint_grace_s : d->cfg.kill_grace_s;
        v->end_s = j->end != D_END_NONE ? now_s + v->grace_s : d_job_end_s(d, j);
        d->pass.victim_jobs[n++] = j;
    }
    if (n == 0)
        return false;
    slots = calloc((size_t)p->spec.tasks, sizeof(*slots));
    if (!slots)
        return false;
    memset(&plan, 0, sizeof(plan));
    plan.victims = d->pass.plan_victims;
    plan.slots = slots;
    rc = sched_preempt_plan(d->cluster, &p->req, p->spec.priority, now_ms, d->cfg.min_runtime_s,
                            d->pass.victims, n, &plan, &err);
    free(slots);
    if (rc < 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "preempt", 10, "job=%s preemption planning: %s",
                       p->id, err.msg);
        return false;
    }
    if (rc == 0) {
        /* The pass's reason stays: it says why the job waits.  When the only victims that would
         * do are too young, plan again the moment the first comes of age. */
        if (plan.retry_at_ms > now_ms)
            d_wake_at(d, mu_time_mono_ms() + (uint64_t)(plan.retry_at_ms - now_ms));
        return false;
    }
    (void)mu_snprintf(why, sizeof(why), "preempted by job %s (priority %lld)", p->id,
                      (long long)p->spec.priority);
    for (int i = 0; i < plan.nvictims; i++) {
        struct d_job *v = d->pass.victim_jobs[plan.victims[i]];
        mu_strlcpy(v->preempted_for, p->id, sizeof(v->preempted_for));
        d_gang_stop(d, v, why, 0, D_C_PREEMPTIONS, QUEUE_PENDING);
    }
    p->victims_stopping = plan.nvictims;
    (void)mu_snprintf(why, sizeof(why),
                      "preempting %d lower-priority gang(s) (%lld GPU-s of work at risk); starts "
                      "once they stop (within %llds)",
                      plan.nvictims, (long long)(plan.lost_gpu_ms / 1000),
                      (long long)(plan.ready_s > now_s ? plan.ready_s - now_s : 0));
    d_job_set_reason(d, p, why);
    mu_log(MU_LOG_INFO, "sched", "job=%s %s", p->id, why);
    return true;
}

/* SPDX-License-Identifier: MIT */
/*
 * Layer 2 of musterd (d_gang.h): the life of a placed gang (docs/design.md §3, §5).
 *
 * Starting writes STARTING with the placement, then sends one BIND per task (with the torchrun
 * ranks, the job's checkpoint signal, and expires_ms: the bind deadline, past which the worker
 * refuses it).  An attempt ends once (d_job_attempt_end, or success): the job goes back to PENDING
 * (retry, requeue) or to a final state, and every task not gone yet is sent KILL.  Stopping
 * (d_gang_stop) sends the checkpoint signal first and KILL after the grace.  Whatever ended the
 * attempt, its resources are released only when every task is gone (d_job_release_if_done),
 * once; then the gang is requeued or forgotten, and the exits the workers kept are acknowledged
 * once the outcome is in Redis.
 */

#include "scheduler/d_gang.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define PORT_BASE  29500 /* MASTER_PORT: one per attempt, from this range */
#define PORT_RANGE 10000

void d_task_kill(struct musterd *d, struct d_job *j, int t, int grace_s)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_KILL);
    mu_strlcpy(m.task.job, j->id, sizeof(m.task.job));
    m.task.task = t;
    m.task.attempt = j->placed_attempt;
    m.signal = 0;
    m.grace_s = grace_s;
    d_send(&d->out, d_node_name(d, j->slots[t].node), &m);
    proto_msg_release(&m);
}

void d_job_kill_live(struct musterd *d, struct d_job *j)
{
    j->kill_sent_ms = mu_time_mono_ms();
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].gone)
            d_task_kill(d, j, t, d->cfg.kill_grace_s);
    }
}

/*
 * The attempt is over and its outcome written: the workers may forget the exits they kept for
 * us.  Not while that write waits for Redis: a restart before it lands adopts the gang again and
 * needs those exits; the workers repeat them, and they are acknowledged then (stale_task).
 */
static void acknowledge_exits(struct musterd *d, struct d_job *j)
{
    if (j->unsynced)
        return;
    for (int t = 0; t < j->spec.tasks; t++) {
        if (j->tasks[t].held && j->slots[t].node >= 0)
            d_task_kill(d, j, t, 0);
    }
}

/* The gang's exit code: 128 + the first task's signal, else the first non-zero exit, else 0. */
static int gang_exit_code(const struct d_job *j)
{
    int code = 0;
    for (int t = 0; t < j->spec.tasks; t++) {
        const struct d_task *task = &j->tasks[t];
        if (task->signal)
            return 128 + task->signal;
        if (!code && task->exit_code)
            code = task->exit_code;
    }
    return code;
}

/* A gang stopped to end (d_gang_stop with a final state) is gone: write that state.  0, or -1
 * when the write failed (the gang stays placed; d_gangs_recheck comes back to it). */
static int job_stopped(struct musterd *d, struct d_job *j)
{
    uint64_t finished_ms = mu_time_wall_ms();
    int exit_code = gang_exit_code(j);
    char now[32];
    char code[16];
    struct queue_kv f[] = { { QUEUE_F_ERROR, d_job_text(j->stop_reason) },
                            { QUEUE_F_EXIT_CODE, code },
                            { QUEUE_F_FINISHED_AT, now } };
    struct d_tally tally = { j->stop_to == QUEUE_TIMEOUT ? D_C_TIMEOUT : D_C_NONE, 0, 0 };
    struct d_change c = { .to = (int)j->stop_to,
                          .reason = d_job_text(j->stop_reason),
                          .fields = f,
                          .nfields = (int)MU_ARRAY_LEN(f),
                          .tally = &tally };

    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)finished_ms);
    (void)mu_snprintf(code, sizeof(code), "%d", exit_code);
    if (d_job_write(d, j, &c) != 0)
        return -1;
    j->finished_ms = finished_ms;
    j->exit_code = exit_code;
    d_job_text_set(&j->error, d_job_text(j->stop_reason));
    mu_log(MU_LOG_INFO, "sched", "job=%s %s: %s", j->id, queue_state_name(j->state),
           d_job_text(j->stop_reason));
    return 0;
}

/* A PREEMPTING gang has stopped: PENDING with attempt + 1, its checkpoint and the lost work.
 * 0, or -1 when the write failed (the gang stays placed; d_gangs_recheck comes back to it). */
static int preempted_requeue(struct musterd *d, struct d_job *j)
{
    uint64_t now = mu_time_wall_ms();
    uint64_t from = j->last_checkpoint_ms > j->started_ms ? j->last_checkpoint_ms : j->started_ms;
    char attempt[16];
    char lost[32];
    char reason[300];
    struct queue_kv f[] = { { QUEUE_F_ATTEMPT, attempt },       { QUEUE_F_REASON, reason },
                            { QUEUE_F_LOST_GPU_SECONDS, lost }, { QUEUE_F_NODES, NULL },
                            { QUEUE_F_PLACEMENT, NULL },        { QUEUE_F_STARTED_AT, NULL },
                            { QUEUE_F_BORROWED, NULL } };
    struct d_tally tally = { D_C_NONE, 0, 0 };
    struct d_change c = { .to = QUEUE_PENDING,
                          .reason = reason,
                          .fields = f,
                          .nfields = (int)MU_ARRAY_LEN(f),
                          .tally = &tally,
                          .attempt = j->attempt + 1 };
    struct d_job *preemptor = j->preempted_for[0] ? mu_map_get(d->jobs, j->preempted_for) : NULL;

    if (from && now > from)
        tally.lost_gpu_s =
            (double)j->spec.tasks * j->spec.gpus_per_task * (double)(now - from) / 1000.0;
    (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt + 1);
    (void)mu_snprintf(lost, sizeof(lost), "%.3f", j->lost_gpu_s + tally.lost_gpu_s);
    (void)mu_snprintf(reason, sizeof(reason), "requeued: %s (lost %.0f GPU-s of work)",
                      d_job_text(j->stop_reason), tally.lost_gpu_s);
    if (d_job_write(d, j, &c) != 0)
        return -1;
    j->lost_gpu_s += tally.lost_gpu_s;
    j->attempt++;
    d_job_reason_stored(j, reason);
    mu_log(MU_LOG_INFO, "sched", "job=%s stopped and requeued as attempt %d, lost %.1f GPU-s",
           j->id, j->attempt, tally.lost_gpu_s);
    if (preemptor && preemptor->victims_stopping > 0)
        preemptor->victims_stopping--;
    j->preempted_for[0] = '\0';
    return 0;
}

/* Here, above the job table (d_job.c) and the pending list (d_pending.c), so that neither of those
 * two calls the other: the pending list uses the job's helpers, and forgetting uses both. */
void d_job_forget(struct musterd *d, struct d_job *j)
{
    d_job_pending_remove(d, j);
    d_job_reason_late_drop(d, j); /* a reason while an old attempt stops: not in d->pending */
    if (MU_NEVER(j->live_at)) {   /* forgotten while it holds GPUs: at least no dangling pointer */
        j->placed = j->adopting = false;
        d_job_live_update(d, j);
    }
    if (j->unsynced) {
        j->forget_after_sync = true; /* its final state is not in Redis yet */
        return;
    }
    (void)mu_map_remove(d->jobs, j->id);
    d_job_retire(d, j);
}

/* Gives the resources back once nothing of the attempt runs; then requeue or forget. */
void d_job_release_if_done(struct musterd *d, struct d_job *j)
{
    if (!j->placed || !d_job_all_gone(j))
        return;
    /* What follows is written first: a failed write leaves the gang placed, to be released
     * once Redis is back (d_gangs_recheck). */
    if (j->end == D_END_FINAL && !queue_state_is_final(j->state) && job_stopped(d, j) != 0)
        return; /* e.g. TIMEOUT, written now that the gang is gone */
    if (j->end == D_END_RETRY && j->state == QUEUE_PREEMPTING && preempted_requeue(d, j) != 0)
        return; /* PENDING, attempt + 1, now that it has stopped */
    acknowledge_exits(d, j);
    if (d_job_fully_committed(j)) {
        sched_cluster_release(d->cluster, &j->req, j->slots);
        d_usage_hold(d, j, -j->spec.tasks);
    } else {
        /* An adopted gang whose nodes did not all come back: release task by task. */
        struct sched_request one = j->req;
        one.tasks = 1;
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->tasks[t].committed) {
                sched_cluster_release(d->cluster, &one, &j->slots[t]);
                d_usage_hold(d, j, -1);
            }
        }
    }
    d_job_placement_drop(j); /* adopt_nodes is already gone: adopt_finish freed it */
    j->placed = false;
    d_job_live_update(d, j);
    d->dirty = true;
    d->nodes_dirty = true;
    if (j->end == D_END_RETRY) {
        j->end = D_END_NONE;
        d_job_pending_add(d, j);
    } else if (j->end == D_END_FINAL) {
        d_job_forget(d, j);
    }
}

/*
 * Ends the current attempt because of `why`.  counted: a task failed (counts against
 * max_retries); otherwise the infrastructure failed (bind timeout, node lost) and the gang is
 * simply requeued.
 */
void d_job_attempt_end(
    struct musterd *d, struct d_job *j, bool counted, int exit_code, const char *why)
{
    char num[16];
    char attempt[16];
    char now[32];

    char lost[32];
    uint64_t now_ms = mu_time_wall_ms();
    struct d_tally tally = { counted ? D_C_RETRIES : D_C_REQUEUES, 0, 0 };

    if (j->end != D_END_NONE)
        return;
    if (counted)
        j->failures++;
    /* Without a checkpoint the whole attempt's GPU time is lost (issue #4 adds checkpoints). */
    if (j->started_ms && now_ms > j->started_ms)
        tally.lost_gpu_s = (double)j->spec.tasks * j->spec.gpus_per_task
                           * (double)(now_ms - j->started_ms) / 1000.0;
    j->lost_gpu_s += tally.lost_gpu_s;
    (void)mu_snprintf(lost, sizeof(lost), "%.3f", j->lost_gpu_s);
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    if (counted && j->failures > j->spec.max_retries) {
        struct queue_kv f[] = { { QUEUE_F_ERROR, why },
                                { QUEUE_F_EXIT_CODE, num },
                                { QUEUE_F_FINISHED_AT, now },
                                { QUEUE_F_LOST_GPU_SECONDS, lost } };
        struct d_change c = { .to = QUEUE_FAILED,
                              .reason = why,
                              .fields = f,
                              .nfields = (int)MU_ARRAY_LEN(f),
                              .tally = &tally };
        (void)mu_snprintf(num, sizeof(num), "%d", exit_code);
        j->exit_code = exit_code;
        d_job_text_set(&j->error, why);
        j->finished_ms = now_ms;
        j->end = D_END_FINAL;
        tally.counter = D_C_FAILED;
        if (d_job_write(d, j, &c) != 0)
            d_job_remember(d, j, &c); /* a reported fact: the tasks did end */
        mu_log(MU_LOG_INFO, "sched", "job=%s failed: %s", j->id, why);
    } else {
        char reason[300];
        char failures[16];
        struct queue_kv f[] = {
            { QUEUE_F_ATTEMPT, attempt },   { QUEUE_F_REASON, reason },
            { QUEUE_F_FAILURES, failures }, { QUEUE_F_NODES, NULL },
            { QUEUE_F_PLACEMENT, NULL },    { QUEUE_F_STARTED_AT, NULL },
            { QUEUE_F_BORROWED, NULL },     { QUEUE_F_LOST_GPU_SECONDS, lost }
        };
        struct d_change c = { .to = QUEUE_PENDING,
                              .reason = reason,
                              .fields = f,
                              .nfields = (int)MU_ARRAY_LEN(f),
                              .tally = &tally };
        (void)mu_snprintf(failures, sizeof(failures), "%d", j->failures);
        if (counted && d->cfg.retry_backoff_s > 0) {
            /* Back off, so that a gang failing at once does not burn its retries in a
             * moment; the pass says how long is left (retry_reason). */
            uint64_t until = mu_time_mono_ms() + (uint64_t)d_retry_backoff_ms(d, j->failures);
            char in[24];
            j->backoff = true;
            j->not_before_ms = until > j->not_before_ms ? until : j->not_before_ms;
            d_job_text_set(&j->failure, why);
            mu_duration_format((int64_t)(j->not_before_ms - mu_time_mono_ms()) / 1000, in,
                               sizeof(in));
            (void)mu_snprintf(reason, sizeof(reason), "retrying in %s after attempt %d failed: %s",
                              in, j->attempt, why);
        } else {
            (void)mu_snprintf(reason, sizeof(reason), "retrying: %s", why);
        }
        j->attempt++;
        (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
        j->end = D_END_RETRY;
        d_job_reason_stored(j, reason);
        /* Whatever ended it (an exit, a lost node, the bind timeout) has happened: a failed
         * write is kept and written whole once Redis is back; the KILLs below are idempotent. */
        if (d_job_write(d, j, &c) != 0)
            d_job_remember(d, j, &c);
        mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d ended, requeued: %s", j->id,
               j->placed_attempt, why);
    }
    d_job_kill_live(d, j);
    d_job_release_if_done(d, j);
}

static void job_succeeded(struct musterd *d, struct d_job *j)
{
    char now[32];
    struct queue_kv f[] = { { QUEUE_F_EXIT_CODE, "0" }, { QUEUE_F_FINISHED_AT, now } };
    struct d_tally tally = { D_C_SUCCEEDED, 0, 0 };
    struct d_change c = { .to = QUEUE_SUCCEEDED,
                          .reason = "all tasks exited 0",
                          .fields = f,
                          .nfields = (int)MU_ARRAY_LEN(f),
                          .tally = &tally };
    j->finished_ms = mu_time_wall_ms();
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)j->finished_ms);
    j->end = D_END_FINAL;
    if (d_job_write(d, j, &c) != 0)
        d_job_remember(d, j, &c); /* a reported fact: every task exited 0 */
    mu_log(MU_LOG_INFO, "sched", "job=%s succeeded", j->id);
    d_job_release_if_done(d, j);
}

/* Task t of j is gone (its exit in tasks[t]): end the attempt, or finish the job. */
void d_job_task_exited(struct musterd *d, struct d_job *j, int t, const char *node_name)
{
    const struct d_task *task = &j->tasks[t];
    char why[300];

    if (j->end != D_END_NONE) {
        d_job_release_if_done(d, j);
        return;
    }
    if (task->lost) {
        (void)mu_snprintf(why, sizeof(why), "task %d vanished from node %s", t, node_name);
        d_job_attempt_end(d, j, false, 0, why);
    } else if (task->fenced) {
        /* Whatever its exit said (a checkpoint and exit 0 included), the work is not done. */
        (void)mu_snprintf(why, sizeof(why),
                          "task %d on node %s was stopped by the node's self-fencing (no word "
                          "from the scheduler for node_lost_after_s)",
                          t, node_name);
        d_job_attempt_end(d, j, false, 0, why);
    } else if (task->stopped) {
        /* Its worker was told to stop (SIGTERM) and stopped its tasks: the node goes down. */
        (void)mu_snprintf(why, sizeof(why), "task %d on node %s was stopped by its worker's stop",
                          t, node_name);
        d_job_attempt_end(d, j, false, 0, why);
    } else if (task->oom) {
        /* The kernel killed it (or a process of it) at the job's own limit. */
        (void)mu_snprintf(why, sizeof(why),
                          "task %d on node %s ran out of memory (memory_mb_per_task %lld): "
                          "killed by the kernel's OOM killer",
                          t, node_name, (long long)j->spec.memory_mb_per_task);
        d_job_attempt_end(d, j, true, task->signal ? 128 + task->signal : task->exit_code, why);
    } else if (task->signal) {
        (void)mu_snprintf(why, sizeof(why), "task %d on node %s killed by %s", t, node_name,
                          mu_signal_name(task->signal));
        d_job_avoid(j, j->slots[t].node);
        d_job_attempt_end(d, j, true, 128 + task->signal, why);
    } else if (task->exit_code != 0) {
        (void)mu_snprintf(why, sizeof(why), "task %d on node %s exited with code %d", t, node_name,
                          task->exit_code);
        d_job_avoid(j, j->slots[t].node);
        d_job_attempt_end(d, j, true, task->exit_code, why);
    } else if (d_job_all_gone(j)) {
        job_succeeded(d, j);
    }
}

struct placement_ctx {
    const struct musterd *d;
    const struct d_job *j;
};

/* Task t's node and GPUs, for queue_placement_format. */
static void placement_get(void *ctx, int t, const char **node, uint64_t *gpus)
{
    const struct placement_ctx *c = ctx;
    *node = d_node_name(c->d, c->j->slots[t].node);
    *gpus = c->j->slots[t].gpus;
}

/* placement as the placement record (queue/vocab.h); nodes as "n1,n2". */
static int placement_format(const struct musterd *d,
                            const struct d_job *j,
                            struct mu_buf *json,
                            struct mu_buf *nodes)
{
    struct placement_ctx c = { d, j };
    struct mu_err err;
    if (queue_placement_format(json, j->spec.tasks, placement_get, &c, &err) != 0)
        return -1;
    for (int t = 0; t < j->spec.tasks; t++) {
        bool seen = false;
        for (int u = 0; u < t; u++)
            seen = seen || j->slots[u].node == j->slots[t].node;
        if (!seen
            && mu_buf_appendf(nodes, &err, "%s%s", nodes->len ? "," : "",
                              d_node_name(d, j->slots[t].node))
                   != 0)
            return -1;
    }
    return 0;
}

/* A BIND's env: the spec's, plus MUSTER_GPU_MILLI for a share of a shared GPU (issue #17). */
static int bind_env(struct proto_msg *m, const struct d_job *j, struct mu_err *err)
{
    const char **env;
    char milli[32];
    int n = j->spec.nenv;
    int rc;

    if (j->spec.gpu_milli <= 0)
        return proto_msg_set_env(m, n, (const char *const *)j->spec.env, err);
    env = malloc(((size_t)n + 2) * sizeof(*env));
    if (!env)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        env[i] = j->spec.env[i];
    (void)mu_snprintf(milli, sizeof(milli), "MUSTER_GPU_MILLI=%d", j->spec.gpu_milli);
    env[n++] = milli;
    env[n] = NULL;
    rc = proto_msg_set_env(m, n, env, err);
    free(env);
    return rc;
}
static void bind_send(struct musterd *d, struct d_job *j)
{
    int nnodes = 0;
    int *node_rank = calloc((size_t)j->spec.tasks, sizeof(int));
    const char *master = d->nodes[j->slots[0].node].addr;
    struct mu_err err;

    if (!node_rank)
        return; /* the bind deadline requeues the gang */
    for (int t = 0; t < j->spec.tasks; t++) {
        node_rank[t] = -1;
        for (int u = 0; u < t; u++) {
            if (j->slots[u].node == j->slots[t].node) {
                node_rank[t] = node_rank[u];
                break;
            }
        }
        if (node_rank[t] < 0)
            node_rank[t] = nnodes++;
    }
    for (int t = 0; t < j->spec.tasks; t++) {
        struct proto_msg m;
        int local_rank = 0;
        int local_size = 0;
        proto_msg_init(&m, PROTO_BIND);
        for (int u = 0; u < j->spec.tasks; u++) {
            if (j->slots[u].node == j->slots[t].node) {
                local_size++;
                if (u < t)
                    local_rank++;
            }
        }
        mu_strlcpy(m.task.job, j->id, sizeof(m.task.job));
        m.task.task = t;
        m.task.attempt = j->attempt;
        m.world_size = j->spec.tasks;
        m.local_rank = local_rank;
        m.local_world_size = local_size;
        m.node_rank = node_rank[t];
        m.nnodes = nnodes;
        mu_strlcpy(m.master_addr, master, sizeof(m.master_addr));
        m.master_port = j->master_port;
        for (int g = 0; g < SCHED_MAX_GPUS_NODE && m.nbind_gpus < PROTO_MAX_GPUS; g++) {
            if (j->slots[t].gpus & (UINT64_C(1) << g))
                m.bind_gpus[m.nbind_gpus++] = g;
        }
        mu_strlcpy(m.workdir, j->spec.workdir ? j->spec.workdir : "", sizeof(m.workdir));
        mu_strlcpy(m.resume_from, j->last_checkpoint ? j->last_checkpoint : "",
                   sizeof(m.resume_from));
        m.signal = j->spec.checkpointable ? j->spec.checkpoint_signal : 0;
        m.grace_s = j->spec.checkpoint_grace_s;
        m.expires_ms = j->bind_deadline_ms;      /* past it the worker refuses: we gave it up */
        m.cpus_per_task = j->spec.cpus_per_task; /* enforced where the worker has cgroups */
        m.memory_mb_per_task = j->spec.memory_mb_per_task;
        if (d_access_proven(d)) /* else the worker's own user: nobody proved the spec's */
            mu_strlcpy(m.job_user, j->spec.user, sizeof(m.job_user));
        if (proto_msg_set_argv(&m, j->spec.argc, (const char *const *)j->spec.argv, &err) != 0
            || bind_env(&m, j, &err) != 0)
            mu_log(MU_LOG_ERROR, "sched", "job=%s cannot build BIND: %s", j->id, err.msg);
        else
            d_send(&d->out, d_node_name(d, j->slots[t].node), &m);
        proto_msg_release(&m);
    }
    free(node_rank);
}

int d_gang_start_write(struct musterd *d, struct d_job *j)
{
    uint64_t started_ms = mu_time_wall_ms();
    struct mu_buf json;
    struct mu_buf nodes;
    char now[32];
    char attempt[16];
    char why[300];
    int rc = -1;

    if (d_job_live_reserve(d) != 0)
        return -1;
    if (d_job_tasks_new(j) != 0)
        return -1;
    for (int t = 0; t < j->spec.tasks; t++)
        d_job_task_commit(j, t);
    mu_buf_init(&json, 0);
    mu_buf_init(&nodes, 0);
    if (placement_format(d, j, &json, &nodes) != 0)
        goto out;
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)started_ms);
    (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
    (void)mu_snprintf(why, sizeof(why), "placed on %s%s%s", nodes.data,
                      j->borrowed ? " on quota borrowed from cohort " : "",
                      j->borrowed ? d->cfg.queues[j->queue_idx].cohort : "");
    {
        struct queue_kv f[] = { { QUEUE_F_STARTED_AT, now },
                                { QUEUE_F_NODES, nodes.data },
                                { QUEUE_F_PLACEMENT, json.data },
                                { QUEUE_F_ATTEMPT, attempt },
                                { QUEUE_F_BORROWED, j->borrowed ? "1" : NULL },
                                { QUEUE_F_REASON, NULL } };
        struct d_tally tally = { D_C_NONE, 0, j->place_s };
        struct d_change c = { .to = QUEUE_STARTING,
                              .reason = why,
                              .fields = f,
                              .nfields = (int)MU_ARRAY_LEN(f),
                              .tally = &tally };
        if (d->redis_down || d_record_write(d, j->id, j->attempt, &c) != 0) {
            j->unsynced = true; /* written whole once Redis is back (d_jobs_resync) */
            goto out;           /* not started: no BIND goes out, the caller releases the slots */
        }
    }
    j->started_ms = started_ms;
    mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d placed on %s", j->id, j->attempt, nodes.data);
    d->live_promised++; /* its room in d->live, until committed or abandoned */
    rc = 0;
out:
    mu_buf_release(&json);
    mu_buf_release(&nodes);
    if (rc != 0) {
        free(j->tasks);
        j->tasks = NULL;
    }
    return rc;
}

/* A written start leaves the promised ones: committed (it joins d->live) or abandoned. */
static void promise_kept(struct musterd *d)
{
    if (!MU_NEVER(d->live_promised <= 0))
        d->live_promised--;
}

void d_gang_start_abandon(struct musterd *d, struct d_job *j)
{
    promise_kept(d);
    free(j->tasks);
    j->tasks = NULL;
    j->unsynced = true; /* written whole once Redis is back (d_jobs_resync) */
}

void d_gang_start_commit(struct musterd *d, struct d_job *j)
{
    d_job_moved(d, j, QUEUE_STARTING);
    j->placed = true; /* the pass committed the slots */
    promise_kept(d);
    d_job_live_update(d, j);
    j->head_of_queue = false;
    j->kill_at_ms = 0;
    j->kill_sent_ms = 0;
    j->placed_attempt = j->attempt;
    j->end = D_END_NONE;
    j->bind_deadline_ms = mu_time_mono_ms() + (uint64_t)d->cfg.bind_timeout_s * 1000u;
    j->master_port = PORT_BASE + d->next_port;
    d->next_port = (d->next_port + 1) % PORT_RANGE;
    j->reason[0] = '\0';
    j->reason_written = 0;
    j->reason_stored = false;
    mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d binding", j->id, j->attempt);
    d_limit_watch(d, j);
    bind_send(d, j);
    d_usage_hold(d, j, j->spec.tasks);
    for (int t = 0; t < j->spec.tasks; t++)
        d->nodes[j->slots[t].node].idle_since_ms = 0; /* not releasable from now on */
    d->nodes_dirty = true;
}

void d_job_running_if_all_acked(struct musterd *d, struct d_job *j)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].acked)
            return;
    }
    if (j->state == QUEUE_STARTING && j->end == D_END_NONE) {
        struct d_change c = { .to = QUEUE_RUNNING, .reason = "every task started" };
        if (d_job_write(d, j, &c) != 0)
            d_job_remember(d, j, &c); /* a reported fact: every task started */
        mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d running", j->id, j->attempt);
    }
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
        d_send(&d->out, d_node_name(d, j->slots[t].node), &m);
        proto_msg_release(&m);
    }
}

int d_gang_stop(struct musterd *d,
                struct d_job *j,
                const char *why,
                uint64_t deadline_ms,
                enum d_counter counter,
                enum queue_state to)
{
    uint64_t now = mu_time_mono_ms();
    struct d_tally tally = { (int)counter, 0, 0 };
    struct queue_kv f[] = { { QUEUE_F_REASON, why } };
    /* Requeued: PREEMPTING until it stopped.  Ended: the job ends once the gang is gone
     * (d_job_release_if_done writes `to` then); until then it keeps its state, and a restart
     * that adopts it stops it again. */
    struct d_change c = { .reason = why, .fields = f, .nfields = 1, .tally = &tally };

    if (!j->placed || j->end != D_END_NONE)
        return -1;
    if (to == QUEUE_PENDING) {
        c.to = QUEUE_PREEMPTING;
    } else {
        c.to = D_SAME;
        c.event = "STOPPING";
    }
    if (d_job_write(d, j, &c) != 0)
        return -1; /* not stopped: decided again once Redis is back */
    d_job_text_set(&j->stop_reason, why);
    j->end = to == QUEUE_PENDING ? D_END_RETRY : D_END_FINAL;
    if (to != QUEUE_PENDING)
        j->stop_to = to;
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
    return 0;
}

int d_gang_react(struct musterd *d,
                 struct d_job *j,
                 const struct sched_reaction *r,
                 const char *why,
                 uint64_t stop_by_ms,
                 enum d_counter counter)
{
    if (!r->stop)
        return -1;
    if (r->head_of_queue)
        j->head_of_queue = true;
    return d_gang_stop(d, j, why, stop_by_ms, counter, r->requeue ? QUEUE_PENDING : QUEUE_TIMEOUT);
}

int d_job_cancel(struct musterd *d, struct d_job *j)
{
    return d_job_cancel_why(d, j, "cancelled by operator");
}

int d_job_cancel_why(struct musterd *d, struct d_job *j, const char *why)
{
    uint64_t finished_ms = mu_time_wall_ms();
    char now[32];
    struct queue_kv f[] = { { QUEUE_F_FINISHED_AT, now }, { QUEUE_F_ERROR, why } };
    /* An array is no job of the counters (d_array.c): its elements count their own ends. */
    struct d_tally tally = { j->array ? D_C_NONE : D_C_CANCELLED, 0, 0 };
    struct d_change c = {
        .to = QUEUE_CANCELLED, .reason = why, .fields = f, .nfields = 2, .tally = &tally
    };

    if (queue_state_is_final(j->state))
        return 0;
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)finished_ms);
    if (d_job_write(d, j, &c) != 0)
        return -1; /* not cancelled: the command is read again (it is not acknowledged) */
    j->finished_ms = finished_ms;
    d_job_text_set(&j->error, why);
    mu_log(MU_LOG_INFO, "sched", "job=%s cancelled: %s", j->id, why);
    if (!j->placed) {
        d_job_forget(d, j);
        return 0;
    }
    if (j->end == D_END_NONE)
        d_job_kill_live(d, j);
    j->end = D_END_FINAL;
    d_job_release_if_done(d, j);
    return 0;
}

/* A gang with a task still running on node idx. */
bool d_gang_runs_on(const struct d_job *j, int idx)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (j->slots[t].node == idx && !j->tasks[t].gone)
            return true;
    }
    return false;
}

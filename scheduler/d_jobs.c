/* SPDX-License-Identifier: MIT */
/*
 * musterd's job lifecycle (DESIGN §3): intake and validation of submissions, the scheduling pass,
 * binding gangs to workers, task status, retries, cancellation and restart recovery.
 *
 * Invariants:
 * - every transition is written to Redis before any worker hears of it (write-ahead);
 * - a job's resources stay committed in the cluster until every task of its attempt is gone
 *   (exited, killed, or its node lost), so a new attempt never runs beside an old one;
 * - a job is on the pending list only when it is PENDING and holds no resources.
 */
#include "scheduler/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define REASON_WRITES_PER_TICK 400 /* pending reasons written per 200 ms tick at most */
#define PORT_BASE              29500
#define PORT_RANGE             10000
#define BIND_GIVE_UP_MS        1000 /* after a BIND's expires_ms, see d_jobs_check_timeouts */

/* ---------------- small helpers ---------------- */

static uint64_t id_ms(const char *id)
{
    int64_t ms = 0;
    char buf[32];
    const char *dash = strchr(id, '-');
    size_t n = dash ? (size_t)(dash - id) : strlen(id);
    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, id, n);
    buf[n] = '\0';
    if (mu_parse_i64(buf, 0, INT64_MAX, &ms, NULL) != 0)
        return 0;
    return (uint64_t)ms;
}

static void job_free(struct d_job *j)
{
    if (!j)
        return;
    queue_spec_release(&j->spec);
    free(j->adopt_nodes);
    free(j->slots);
    free(j->tasks);
    free(j);
}

static void job_request_build(const struct musterd *d, struct d_job *j)
{
    struct sched_request *r = &j->req;
    *r = sched_request_make(j->spec.tasks, j->spec.gpus_per_task);
    r->cpus_per_task = j->spec.cpus_per_task;
    r->memory_mb_per_task = j->spec.memory_mb_per_task;
    r->gpu_type = j->spec.gpu_type;
    r->ncapacity = j->spec.ncapacity;
    for (int i = 0; i < j->spec.ncapacity && i < 2; i++)
        r->capacity[i] = j->spec.capacity[i] == CFG_CAPACITY_SPOT ? SCHED_SPOT : SCHED_ON_DEMAND;
    r->required_level =
        j->spec.topo_required[0] ? cfg_level_index(&d->cfg, j->spec.topo_required) : -1;
    r->preferred_level =
        j->spec.topo_preferred[0] ? cfg_level_index(&d->cfg, j->spec.topo_preferred) : -1;
}

/*
 * Writes fields and (when state is given) the state change with its event.  A Redis failure is
 * logged and remembered; the in-memory state still moves on, and the loop retries the
 * connection (full outage handling is issue #5).
 */
int d_job_write(struct musterd *d,
                struct d_job *j,
                const struct queue_kv *fields,
                int n,
                const char *state,
                const char *reason,
                const struct d_tally *tally)
{
    struct mu_err err;
    struct queue_event ev = {
        .state = state, .reason = reason, .attempt = j->attempt, .at_ms = mu_time_wall_ms()
    };
    d_metrics_tally(d, tally, &ev);
    if (d->redis_down) {
        j->unsynced = true; /* written whole once Redis is back (d_jobs_resync) */
        return -1;
    }
    if (queue_job_update(d->q, j->id, fields, n, 0, state ? &ev : NULL, d->cfg.events_max,
                         QUEUE_STREAM_SUBMIT, NULL, &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s cannot store update: %s",
                       j->id, err.msg);
        d->redis_down = true;
        j->unsynced = true;
        return -1;
    }
    return 0;
}

static void pending_add(struct musterd *d, struct d_job *j)
{
    if (d->npending == d->cap_pending) {
        int cap = d->cap_pending ? d->cap_pending * 2 : 256;
        struct d_job **p = realloc(d->pending, (size_t)cap * sizeof(*p));
        if (!p) {
            mu_log(MU_LOG_ERROR, "sched", "job=%s out of memory queueing job", j->id);
            return;
        }
        d->pending = p;
        d->cap_pending = cap;
    }
    d->pending[d->npending++] = j;
    d->dirty = true;
}

static void pending_remove(struct musterd *d, const struct d_job *j)
{
    for (int i = 0; i < d->npending; i++) {
        if (d->pending[i] == j) {
            memmove(&d->pending[i], &d->pending[i + 1],
                    (size_t)(d->npending - i - 1) * sizeof(*d->pending));
            d->npending--;
            return;
        }
    }
}

static void job_forget(struct musterd *d, struct d_job *j)
{
    pending_remove(d, j);
    if (j->unsynced) {
        j->forget_after_sync = true; /* its final state is not in Redis yet */
        return;
    }
    (void)mu_map_remove(d->jobs, j->id);
    job_free(j);
}

const char *d_node_name(const struct musterd *d, int idx)
{
    return d->nodes[idx].name;
}

void d_task_kill(struct musterd *d, struct d_job *j, int t, int grace_s)
{
    struct proto_msg m;
    const struct d_task *task = &j->tasks[t];
    proto_msg_init(&m, PROTO_KILL);
    mu_strlcpy(m.task.job, j->id, sizeof(m.task.job));
    m.task.task = t;
    m.task.attempt = j->placed_attempt;
    m.signal = 0;
    m.grace_s = grace_s;
    d_send(d, d_node_name(d, task->node), &m);
    proto_msg_release(&m);
}

void d_job_avoid(struct d_job *j, int node)
{
    if (node < 0)
        return;
    for (int i = 0; i < j->navoid; i++) {
        if (j->avoid[i] == node)
            return;
    }
    if (j->navoid == D_AVOID_MAX) {
        memmove(j->avoid, j->avoid + 1, (D_AVOID_MAX - 1) * sizeof(*j->avoid));
        j->navoid--;
    }
    j->avoid[j->navoid++] = node;
    j->req.avoid = j->avoid; /* the placement core prefers other nodes from now on */
    j->req.navoid = j->navoid;
}

/* ---------------- the end of an attempt ---------------- */

bool d_job_all_gone(const struct d_job *j)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].gone)
            return false;
    }
    return true;
}

bool d_job_fully_committed(const struct d_job *j)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].committed)
            return false;
    }
    return true;
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
        if (j->tasks[t].held && j->tasks[t].node >= 0)
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

/* A gang stopped to end (d_gang_stop with a final state) is gone: write that state. */
static void job_stopped(struct musterd *d, struct d_job *j)
{
    char now[32];
    char code[16];
    struct queue_kv f[] = { { "state", queue_state_name(j->stop_to) },
                            { "error", j->stop_reason },
                            { "exit_code", code },
                            { "finished_at", now } };
    struct d_tally tally = { j->stop_to == QUEUE_TIMEOUT ? D_C_TIMEOUT : D_C_NONE, 0, 0 };

    j->finished_ms = mu_time_wall_ms();
    j->exit_code = gang_exit_code(j);
    j->state = j->stop_to;
    mu_strlcpy(j->error, j->stop_reason, sizeof(j->error));
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)j->finished_ms);
    (void)mu_snprintf(code, sizeof(code), "%d", j->exit_code);
    (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), queue_state_name(j->state), j->stop_reason,
                      &tally);
    mu_log(MU_LOG_INFO, "sched", "job=%s %s: %s", j->id, queue_state_name(j->state),
           j->stop_reason);
}

/* Gives the resources back once nothing of the attempt runs; then requeue or forget. */
void d_job_release_if_done(struct musterd *d, struct d_job *j)
{
    if (!j->placed || !d_job_all_gone(j))
        return;
    if (j->end == D_END_FINAL && !queue_state_is_final(j->state))
        job_stopped(d, j); /* e.g. TIMEOUT, written now that the gang is gone */
    acknowledge_exits(d, j);
    if (d_job_fully_committed(j)) {
        sched_cluster_release(d->cluster, &j->req, j->slots);
    } else {
        /* An adopted gang whose nodes did not all come back: release task by task. */
        struct sched_request one = j->req;
        one.tasks = 1;
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->tasks[t].committed)
                sched_cluster_release(d->cluster, &one, &j->slots[t]);
        }
    }
    free(j->slots);
    free(j->tasks);
    j->slots = NULL;
    j->tasks = NULL;
    j->placed = false;
    d->dirty = true;
    d->nodes_dirty = true;
    if (j->end == D_END_RETRY) {
        j->end = D_END_NONE;
        if (j->state == QUEUE_PREEMPTING)
            d_preempted_requeue(d, j); /* PENDING, attempt + 1, now that it has stopped */
        pending_add(d, j);
    } else if (j->end == D_END_FINAL) {
        job_forget(d, j);
    }
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
        struct queue_kv f[] = { { "state", "FAILED" },
                                { "error", why },
                                { "exit_code", num },
                                { "finished_at", now },
                                { "lost_gpu_seconds", lost } };
        (void)mu_snprintf(num, sizeof(num), "%d", exit_code);
        j->exit_code = exit_code;
        mu_strlcpy(j->error, why, sizeof(j->error));
        j->finished_ms = now_ms;
        j->state = QUEUE_FAILED;
        j->end = D_END_FINAL;
        tally.counter = D_C_FAILED;
        (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "FAILED", why, &tally);
        mu_log(MU_LOG_INFO, "sched", "job=%s failed: %s", j->id, why);
    } else {
        char reason[300];
        char failures[16];
        struct queue_kv f[] = { { "state", "PENDING" }, { "attempt", attempt },
                                { "reason", reason },   { "failures", failures },
                                { "nodes", NULL },      { "placement", NULL },
                                { "started_at", NULL }, { "lost_gpu_seconds", lost } };
        (void)mu_snprintf(failures, sizeof(failures), "%d", j->failures);
        if (counted && d->cfg.retry_backoff_s > 0) {
            /* Back off, so that a gang failing at once does not burn its retries in a
             * moment; the pass says how long is left (retry_reason). */
            uint64_t until = mu_time_mono_ms() + (uint64_t)d_retry_backoff_ms(d, j->failures);
            char in[24];
            j->backoff = true;
            j->not_before_ms = until > j->not_before_ms ? until : j->not_before_ms;
            mu_strlcpy(j->failure, why, sizeof(j->failure));
            mu_duration_format((int64_t)(j->not_before_ms - mu_time_mono_ms()) / 1000, in,
                               sizeof(in));
            (void)mu_snprintf(reason, sizeof(reason), "retrying in %s after attempt %d failed: %s",
                              in, j->attempt, why);
        } else {
            (void)mu_snprintf(reason, sizeof(reason), "retrying: %s", why);
        }
        j->attempt++;
        (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
        j->state = QUEUE_PENDING;
        j->end = D_END_RETRY;
        mu_strlcpy(j->reason, reason, sizeof(j->reason));
        mu_strlcpy(j->reason_written, reason, sizeof(j->reason_written));
        j->reason_stored = true;
        j->reason_at_ms = mu_time_mono_ms();
        (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "PENDING", reason, &tally);
        mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d ended, requeued: %s", j->id,
               j->placed_attempt, why);
    }
    d_job_kill_live(d, j);
    d_job_release_if_done(d, j);
}

static void job_succeeded(struct musterd *d, struct d_job *j)
{
    char now[32];
    struct queue_kv f[] = { { "state", "SUCCEEDED" },
                            { "exit_code", "0" },
                            { "finished_at", now } };
    j->finished_ms = mu_time_wall_ms();
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)j->finished_ms);
    j->state = QUEUE_SUCCEEDED;
    j->end = D_END_FINAL;
    struct d_tally tally = { D_C_SUCCEEDED, 0, 0 };
    (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "SUCCEEDED", "all tasks exited 0", &tally);
    mu_log(MU_LOG_INFO, "sched", "job=%s succeeded", j->id);
    d_job_release_if_done(d, j);
}

static void job_cancel(struct musterd *d, struct d_job *j);

/* ---------------- intake ---------------- */

static void ack_only(struct musterd *d, enum queue_stream stream, const char *entry_id)
{
    struct mu_err err;
    if (queue_job_update(d->q, entry_id, NULL, 0, 0, NULL, d->cfg.events_max, stream, entry_id,
                         &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-ack", 5, "cannot acknowledge %s: %s", entry_id,
                       err.msg);
        d->redis_down = true;
    }
}

static void reject(struct musterd *d, const struct queue_entry *e, const char *why)
{
    struct mu_err err;
    char now[32];
    char submitted[32];
    char stored[4200];
    const char *spec = e->spec ? e->spec : "";
    struct queue_kv f[] = { { "id", e->id },
                            { "state", "REJECTED" },
                            { "error", why },
                            { "spec", spec },
                            { "submitted_at", submitted },
                            { "finished_at", now },
                            { "name", "" },
                            { "queue", "" } };
    struct queue_event ev = { .state = "REJECTED", .reason = why, .at_ms = mu_time_wall_ms() };
    struct d_tally tally = { D_C_REJECTED, 0, 0 };

    if (e->spec && strlen(e->spec) > 4096) {
        /* Keep what a user needs to recognise it without storing megabytes of garbage. */
        (void)snprintf(stored, sizeof(stored), "%.4096s...(truncated, %zu bytes)", e->spec,
                       e->spec_len);
        f[3].value = stored;
    }
    d_metrics_tally(d, &tally, &ev);
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)ev.at_ms);
    (void)mu_snprintf(submitted, sizeof(submitted), "%llu", (unsigned long long)id_ms(e->id));
    if (queue_job_update(d->q, e->id, f, (int)MU_ARRAY_LEN(f), id_ms(e->id) ? id_ms(e->id) : 1, &ev,
                         d->cfg.events_max, QUEUE_STREAM_SUBMIT, e->id, &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s cannot store: %s", e->id,
                       err.msg);
        d->redis_down = true;
        return;
    }
    mu_log_limited(MU_LOG_INFO, "sched", "rejected", 1, "job=%s rejected: %s", e->id, why);
}

static void fields_of_new_job(
    const struct d_job *j, const char *spec_json, char bufs[6][32], struct queue_kv *f, int *n)
{
    int i = 0;
    (void)mu_snprintf(bufs[0], 32, "%lld", (long long)j->spec.priority);
    (void)mu_snprintf(bufs[1], 32, "%d", j->spec.tasks);
    (void)mu_snprintf(bufs[2], 32, "%d", j->spec.gpus_per_task);
    (void)mu_snprintf(bufs[3], 32, "%d", j->attempt);
    (void)mu_snprintf(bufs[4], 32, "%d", j->spec.max_retries);
    (void)mu_snprintf(bufs[5], 32, "%llu", (unsigned long long)j->submitted_ms);
    f[i++] = (struct queue_kv){ "id", j->id };
    f[i++] = (struct queue_kv){ "name", j->spec.name };
    f[i++] = (struct queue_kv){ "queue", j->spec.queue };
    f[i++] = (struct queue_kv){ "user", j->spec.user };
    f[i++] = (struct queue_kv){ "state", "PENDING" };
    f[i++] = (struct queue_kv){ "priority", bufs[0] };
    f[i++] = (struct queue_kv){ "tasks", bufs[1] };
    f[i++] = (struct queue_kv){ "gpus_per_task", bufs[2] };
    f[i++] = (struct queue_kv){ "attempt", bufs[3] };
    f[i++] = (struct queue_kv){ "max_retries", bufs[4] };
    f[i++] = (struct queue_kv){ "submitted_at", bufs[5] };
    f[i++] = (struct queue_kv){ "spec", spec_json };
    f[i++] = (struct queue_kv){ "reason", "waiting for the scheduler" };
    *n = i;
}

void d_intake_submit(struct musterd *d, const struct queue_entry *e)
{
    struct mu_err err;
    struct d_job *j = NULL;
    struct queue_kv f[16];
    char bufs[6][32];
    int nf = 0;
    struct queue_event ev;

    if (mu_map_get(d->jobs, e->id)) {
        ack_only(d, QUEUE_STREAM_SUBMIT, e->id); /* stored before a crash, ack was lost */
        return;
    }
    if (!e->spec) {
        reject(d, e, "submission has no 'spec' field; hint: XADD muster:submit '*' spec '{...}'");
        return;
    }
    if (strlen(e->spec) != e->spec_len) {
        reject(d, e, "spec: contains a NUL byte");
        return;
    }
    j = calloc(1, sizeof(*j));
    if (!j) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s out of memory; left pending in the stream", e->id);
        return;
    }
    mu_strlcpy(j->id, e->id, sizeof(j->id));
    if (queue_spec_parse(e->spec, e->spec_len, &j->spec, &err) != 0
        || queue_spec_check(&j->spec, &d->cfg, &err) != 0) {
        reject(d, e, err.msg);
        job_free(j);
        return;
    }
    if (j->spec.idempotency_key[0]) {
        char owner[QUEUE_JOB_ID_MAX];
        bool won = false;
        if (queue_idem_claim(d->q, j->spec.idempotency_key, j->id, owner, sizeof(owner), &won, &err)
            != 0) {
            mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s idempotency: %s", j->id,
                           err.msg);
            d->redis_down = true;
            job_free(j);
            return; /* not acknowledged: read again once Redis is back */
        }
        if (!won && strcmp(owner, j->id) != 0) {
            char why[400];
            struct queue_event dup = { .state = "DUPLICATE",
                                       .reason = why,
                                       .at_ms = mu_time_wall_ms() };
            (void)mu_snprintf(why, sizeof(why), "idempotency key '%s' already used by job %s",
                              j->spec.idempotency_key, owner);
            if (queue_job_update(d->q, j->id, NULL, 0, 0, &dup, d->cfg.events_max,
                                 QUEUE_STREAM_SUBMIT, e->id, &err)
                != 0)
                d->redis_down = true;
            mu_log(MU_LOG_INFO, "sched", "job=%s duplicate of %s, not queued", j->id, owner);
            job_free(j);
            return;
        }
    }
    j->state = QUEUE_PENDING;
    j->attempt = 1;
    j->submitted_ms = id_ms(j->id);
    job_request_build(d, j);
    fields_of_new_job(j, e->spec, bufs, f, &nf);
    ev = (struct queue_event){
        .state = "PENDING", .reason = "submitted", .attempt = 1, .at_ms = mu_time_wall_ms()
    };
    {
        struct d_tally tally = { D_C_SUBMITTED, 0, 0 };
        d_metrics_tally(d, &tally, &ev);
    }
    if (queue_job_update(d->q, j->id, f, nf, j->submitted_ms ? j->submitted_ms : 1, &ev,
                         d->cfg.events_max, QUEUE_STREAM_SUBMIT, e->id, &err)
            != 0
        || mu_map_put(d->jobs, j->id, j, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s cannot store: %s", j->id,
                       err.msg);
        d->redis_down = true;
        job_free(j);
        return; /* not acknowledged: read again once Redis is back */
    }
    mu_log(MU_LOG_INFO, "sched", "job=%s queued: %dx%d GPUs, queue %s, priority %lld", j->id,
           j->spec.tasks, j->spec.gpus_per_task, j->spec.queue, (long long)j->spec.priority);
    pending_add(d, j);
    if (mu_map_remove(d->early_cancels, j->id))
        job_cancel(d, j);
}

/* ---------------- scheduling ---------------- */

static int pending_cmp(const void *a, const void *b)
{
    const struct d_job *x = *(struct d_job *const *)a;
    const struct d_job *y = *(struct d_job *const *)b;
    if (x->spec.priority != y->spec.priority)
        return x->spec.priority > y->spec.priority ? -1 : 1;
    if (x->head_of_queue != y->head_of_queue)
        return x->head_of_queue ? -1 : 1; /* requeued by a spot interruption */
    if (x->submitted_ms != y->submitted_ms)
        return x->submitted_ms < y->submitted_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

/*
 * Keeps the job's pending reason.  Reasons carry live numbers ("at most 3 task(s) fit now") that
 * change with every pass, so Redis gets a job's reason at once the first time and then at most
 * once a second (d_jobs_flush_reasons writes what is left); otherwise a long queue would cost a
 * write per job per pass.
 */
void d_job_set_reason(struct musterd *d, struct d_job *j, const char *reason)
{
    uint64_t now = mu_time_mono_ms();
    if (strcmp(j->reason, reason) == 0)
        return;
    mu_strlcpy(j->reason, reason, sizeof(j->reason));
    if ((j->reason_stored && now - j->reason_at_ms < 1000) || d->reason_budget <= 0)
        return; /* d_jobs_flush_reasons writes it later */
    d->reason_budget--;
    {
        struct queue_kv f[] = { { "reason", reason } };
        if (d_job_write(d, j, f, 1, NULL, NULL, NULL) == 0) {
            j->reason_stored = true;
            j->reason_at_ms = now;
            mu_strlcpy(j->reason_written, reason, sizeof(j->reason_written));
        }
    }
}

void d_jobs_flush_reasons(struct musterd *d)
{
    uint64_t now = mu_time_mono_ms();
    /* A bounded number of reason writes per tick: a queue of 100,000 jobs (after a restart,
     * say) gets its reasons over some seconds instead of stalling the loop. */
    d->reason_budget = REASON_WRITES_PER_TICK;
    for (int i = 0; i < d->npending && d->reason_budget > 0; i++) {
        struct d_job *j = d->pending[i];
        if (strcmp(j->reason, j->reason_written) != 0 && now - j->reason_at_ms >= 1000) {
            char reason[sizeof(j->reason)];
            mu_strlcpy(reason, j->reason, sizeof(reason));
            j->reason[0] = '\0';
            j->reason_stored = false;
            d_job_set_reason(d, j, reason);
        }
    }
}

/* placement as JSON: [{"task":0,"node":"n1","gpus":[0,1]}, ...]; nodes as "n1,n2". */
static int placement_format(const struct musterd *d,
                            const struct d_job *j,
                            struct mu_buf *json,
                            struct mu_buf *nodes)
{
    struct mu_err err;
    if (mu_buf_append(json, "[", 1, &err) != 0)
        return -1;
    for (int t = 0; t < j->spec.tasks; t++) {
        const char *name = d_node_name(d, j->slots[t].node);
        bool first_gpu = true;
        bool seen = false;
        if (mu_buf_appendf(json, &err, "%s{\"task\":%d,\"node\":", t ? "," : "", t) != 0
            || mu_buf_append_json_str(json, name, &err) != 0
            || mu_buf_append(json, ",\"gpus\":[", 9, &err) != 0)
            return -1;
        for (int g = 0; g < SCHED_MAX_GPUS_NODE; g++) {
            if (!(j->slots[t].gpus & (UINT64_C(1) << g)))
                continue;
            if (mu_buf_appendf(json, &err, "%s%d", first_gpu ? "" : ",", g) != 0)
                return -1;
            first_gpu = false;
        }
        if (mu_buf_append(json, "]}", 2, &err) != 0)
            return -1;
        for (int u = 0; u < t; u++)
            seen = seen || j->slots[u].node == j->slots[t].node;
        if (!seen && mu_buf_appendf(nodes, &err, "%s%s", nodes->len ? "," : "", name) != 0)
            return -1;
    }
    return mu_buf_append(json, "]", 1, &err);
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
        mu_strlcpy(m.workdir, j->spec.workdir, sizeof(m.workdir));
        mu_strlcpy(m.resume_from, j->last_checkpoint, sizeof(m.resume_from));
        m.signal = j->spec.checkpointable ? j->spec.checkpoint_signal : 0;
        m.grace_s = j->spec.checkpoint_grace_s;
        m.expires_ms = j->bind_deadline_ms; /* past it the worker refuses: we gave it up */
        mu_strlcpy(m.job_user, j->spec.user, sizeof(m.job_user));
        if (proto_msg_set_argv(&m, j->spec.argc, (const char *const *)j->spec.argv, &err) != 0
            || proto_msg_set_env(&m, j->spec.nenv, (const char *const *)j->spec.env, &err) != 0)
            mu_log(MU_LOG_ERROR, "sched", "job=%s cannot build BIND: %s", j->id, err.msg);
        else
            d_send(d, d_node_name(d, j->slots[t].node), &m);
        proto_msg_release(&m);
    }
    free(node_rank);
}

/* Starts a gang whose slots the scheduling pass committed; on failure the caller releases. */
static int job_start(struct musterd *d, struct d_job *j)
{
    struct mu_buf json;
    struct mu_buf nodes;
    char now[32];
    char attempt[16];
    char why[300];
    int rc = -1;

    j->tasks = calloc((size_t)j->spec.tasks, sizeof(*j->tasks));
    if (!j->tasks)
        return -1;
    for (int t = 0; t < j->spec.tasks; t++) {
        j->tasks[t].node = j->slots[t].node;
        j->tasks[t].gpus = j->slots[t].gpus;
        j->tasks[t].committed = true;
    }
    mu_buf_init(&json, 0);
    mu_buf_init(&nodes, 0);
    if (placement_format(d, j, &json, &nodes) != 0)
        goto out;
    j->placed = true; /* the pass committed the slots */
    j->head_of_queue = false;
    j->kill_at_ms = 0;
    j->kill_sent_ms = 0;
    j->placed_attempt = j->attempt;
    j->end = D_END_NONE;
    j->state = QUEUE_STARTING;
    j->started_ms = mu_time_wall_ms();
    j->bind_deadline_ms = mu_time_mono_ms() + (uint64_t)d->cfg.bind_timeout_s * 1000u;
    j->master_port = PORT_BASE + d->next_port;
    d->next_port = (d->next_port + 1) % PORT_RANGE;
    j->reason[0] = '\0';
    j->reason_written[0] = '\0';
    j->reason_stored = false;
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)j->started_ms);
    (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
    (void)mu_snprintf(why, sizeof(why), "placed on %s", nodes.data);
    {
        struct queue_kv f[] = { { "state", "STARTING" }, { "started_at", now },
                                { "nodes", nodes.data }, { "placement", json.data },
                                { "attempt", attempt },  { "reason", NULL } };
        struct d_tally tally = { -1, 0, j->place_s };
        (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "STARTING", why, &tally);
    }
    mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d binding on %s", j->id, j->attempt, nodes.data);
    d_limit_watch(d, j);
    bind_send(d, j);
    d->nodes_dirty = true;
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

/* Grows the pass's scratch arrays to hold n jobs; 0 or -1. */
static int pass_scratch(struct musterd *d, int npending, int nrunning)
{
    if (npending > d->pass.cap_pending) {
        int cap = npending * 2;
        struct sched_pass_job *jobs = realloc(d->pass.jobs, (size_t)cap * sizeof(*jobs));
        struct sched_decision *out = jobs ? realloc(d->pass.out, (size_t)cap * sizeof(*out)) : NULL;
        struct d_job **who = out ? realloc(d->pass.who, (size_t)cap * sizeof(*who)) : NULL;
        struct sched_request *reqs =
            who ? realloc(d->pass.reqs, (size_t)cap * sizeof(*reqs)) : NULL;
        if (jobs)
            d->pass.jobs = jobs;
        if (out)
            d->pass.out = out;
        if (who)
            d->pass.who = who;
        if (reqs)
            d->pass.reqs = reqs;
        if (!jobs || !out || !who || !reqs)
            return -1;
        d->pass.cap_pending = cap;
    }
    if (nrunning > d->pass.cap_running) {
        int cap = nrunning * 2;
        struct sched_running *running = realloc(d->pass.running, (size_t)cap * sizeof(*running));
        if (!running)
            return -1;
        d->pass.running = running;
        d->pass.cap_running = cap;
    }
    return 0;
}

int64_t d_job_run_s(const struct musterd *d, const struct d_job *j)
{
    return j->spec.time_limit_s > 0 ? j->spec.time_limit_s : d->cfg.default_time_limit_s;
}

int64_t d_job_end_s(const struct musterd *d, const struct d_job *j)
{
    return (int64_t)(j->started_ms / 1000) + d_job_run_s(d, j);
}

/* The gangs that hold resources now, with their expected ends, into d->pass.running. */
static int running_collect(struct musterd *d, int64_t now_s)
{
    size_t pos = 0;
    struct d_job *j;
    int n = 0;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->placed || !d_job_fully_committed(j))
            continue; /* a partly adopted gang is being stopped; its GPUs free soon */
        d->pass.running[n].req = &j->req;
        d->pass.running[n].slots = j->slots;
        /* An attempt being stopped ends within the kill grace; a running one at its limit. */
        d->pass.running[n].end_s =
            j->end != D_END_NONE ? now_s + d->cfg.kill_grace_s : d_job_end_s(d, j);
        n++;
    }
    return n;
}

/*
 * One scheduling pass (DESIGN §4): the pending jobs in priority order go to sched_pass, which
 * starts what fits, gives the first job that does not fit a reservation, and lets later jobs
 * backfill only where they do not delay it.  Started jobs come back committed.
 */
/* The reason of a pending job that waits for its not_before_ms, with the time left. */
static void wait_reason(struct musterd *d, struct d_job *j, uint64_t now_mono)
{
    char in[24];
    char why[480];
    mu_duration_format((int64_t)((j->not_before_ms - now_mono + 999) / 1000), in, sizeof(in));
    if (j->backoff)
        (void)mu_snprintf(why, sizeof(why), "retrying in %s after attempt %d failed: %s", in,
                          j->attempt - 1, j->failure);
    else
        (void)mu_snprintf(why, sizeof(why),
                          "waiting %s for the old attempt on a lost node to stop (its "
                          "supervisors stop it once the node's lease runs out)",
                          in);
    d_job_set_reason(d, j, why);
}

void d_schedule(struct musterd *d)
{
    int64_t now_ms = (int64_t)mu_time_wall_ms();
    int64_t now_s = now_ms / 1000;
    uint64_t now_mono = mu_time_mono_ms();
    bool regrace = d_nodes_regrace(d, now_mono);
    bool timed_reasons = false;
    int kept = 0;
    int n = 0;
    int nrunning;
    struct mu_err err;
    uint64_t t0;
    double per_job_s;

    d->dirty = false;
    if (d->npending == 0)
        return;
    qsort(d->pending, (size_t)d->npending, sizeof(*d->pending), pending_cmp);
    if (pass_scratch(d, d->npending, (int)mu_map_count(d->jobs)) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "pass", 10, "out of memory for a scheduling pass");
        d->dirty = true;
        return;
    }
    for (int i = 0; i < d->npending; i++) {
        struct d_job *j = d->pending[i];
        if (j->held)
            continue;
        if (j->not_before_ms) {
            if (now_mono < j->not_before_ms) {
                wait_reason(d, j, now_mono);
                timed_reasons = true;
                continue;
            }
            j->not_before_ms = 0;
            j->backoff = false;
        }
        if (!j->slots) {
            j->slots = calloc((size_t)j->spec.tasks, sizeof(*j->slots));
            if (!j->slots)
                continue;
        }
        d->pass.jobs[n].req = &j->req;
        if (regrace && j->req.ncapacity > 1) {
            d->pass.reqs[n] = j->req; /* first choice only while known nodes may come back */
            d->pass.reqs[n].ncapacity = 1;
            d->pass.jobs[n].req = &d->pass.reqs[n];
        }
        d->pass.jobs[n].run_s = d_job_run_s(d, j);
        d->pass.jobs[n].slots = j->slots;
        d->pass.who[n++] = j;
    }
    nrunning = running_collect(d, now_s);
    t0 = mu_time_mono_us();
    if (sched_pass(d->cluster, d->pass.jobs, n, d->pass.running, nrunning, now_s, d->pass.out, &err)
        < 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "pass", 10, "scheduling pass failed: %s", err.msg);
        d->dirty = true;
        return;
    }
    per_job_s = n ? (double)(mu_time_mono_us() - t0) / 1e6 / n : 0;
    for (int i = 0; i < n; i++) {
        struct d_job *j = d->pass.who[i];
        const struct sched_decision *dec = &d->pass.out[i];
        if (dec->verdict != SCHED_START) {
            d_job_set_reason(d, j, dec->reason[0] ? dec->reason : "waiting");
            timed_reasons = timed_reasons || dec->est_start_s > 0;
            continue;
        }
        j->place_s = per_job_s;
        if (job_start(d, j) != 0) {
            sched_cluster_release(d->cluster, &j->req, j->slots);
            d_job_set_reason(d, j, "out of memory starting the gang; retrying");
            d->dirty = true;
        }
    }
    for (int i = 0; i < n && !regrace; i++) {
        struct d_job *j = d->pass.who[i];
        if (d->pass.out[i].verdict != SCHED_START && !j->placed && d_preempt_for(d, j, now_ms))
            break; /* one plan per pass: the first job that can preempt */
    }
    if (regrace)
        d_wake_at(d, d->regrace_until_ms); /* then fallback capacity and preemption again */
    for (int i = 0; i < d->npending; i++) {
        struct d_job *j = d->pending[i];
        if (j->held)
            d_job_set_reason(d, j, "held by operator; musterctl release to let it run");
        if (!j->placed)
            d->pending[kept++] = j;
    }
    d->npending = kept;
    d_wake_plan(d, now_mono, now_ms, timed_reasons);
}

/* ---------------- worker reports ---------------- */

/* The job and task a report is about, when it belongs to the placed attempt on that node. */
static struct d_job *task_lookup(struct musterd *d,
                                 const struct d_node *node,
                                 const struct proto_task_ref *t)
{
    struct d_job *j = mu_map_get(d->jobs, t->job);
    if (!j || !j->placed || t->attempt != j->placed_attempt || t->task < 0
        || t->task >= j->spec.tasks || j->tasks[t->task].node != node->idx)
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
    d_send(d, node->name, &m);
    proto_msg_release(&m);
}

void d_job_running_if_all_acked(struct musterd *d, struct d_job *j)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].acked)
            return;
    }
    if (j->state == QUEUE_STARTING && j->end == D_END_NONE) {
        struct queue_kv f[] = { { "state", "RUNNING" } };
        j->state = QUEUE_RUNNING;
        (void)d_job_write(d, j, f, 1, "RUNNING", "every task started", NULL);
        mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d running", j->id, j->attempt);
    }
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

void d_task_status(struct musterd *d, struct d_node *node, const struct proto_task_ref *t)
{
    struct d_job *j = task_lookup(d, node, t);
    struct d_task *task;

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
        else if (j->kill_sent_ms)
            d_task_kill(d, j, t->task, d->cfg.kill_grace_s); /* our KILL may have been lost */
        return;
    }
    d_task_record_end(task, t);
    d_job_task_exited(d, j, t->task, node->name);
}

void d_task_record_end(struct d_task *task, const struct proto_task_ref *r)
{
    task->gone = true;
    task->acked = true; /* the worker had it */
    task->lost = r->state == PROTO_TASK_LOST;
    task->fenced = r->state == PROTO_TASK_EXITED && r->fenced;
    task->held = true;
    task->exit_code = r->state == PROTO_TASK_EXITED ? r->exit_code : 0;
    task->signal = r->state == PROTO_TASK_EXITED ? r->signal : 0;
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
    } else if (task->signal) {
        (void)mu_snprintf(why, sizeof(why), "task %d on node %s killed by %s", t, node_name,
                          mu_signal_name(task->signal));
        d_job_avoid(j, task->node);
        d_job_attempt_end(d, j, true, 128 + task->signal, why);
    } else if (task->exit_code != 0) {
        (void)mu_snprintf(why, sizeof(why), "task %d on node %s exited with code %d", t, node_name,
                          task->exit_code);
        d_job_avoid(j, task->node);
        d_job_attempt_end(d, j, true, task->exit_code, why);
    } else if (d_job_all_gone(j)) {
        job_succeeded(d, j);
    }
}

/* A worker cut off from us fences itself: checkpoint signal, grace_s, SIGTERM, SIGKILL 5 s
 * later.  The next attempt of a gang it ran waits that long, so the two never run side by side. */
uint64_t d_fence_wait_ms(const struct d_job *j)
{
    return ((uint64_t)(j->spec.checkpointable ? j->spec.checkpoint_grace_s : 0) + 6u) * 1000u;
}

void d_node_lost_tasks(struct musterd *d, int node_idx)
{
    size_t pos = 0;
    struct d_job *j;
    char why[200];

    (void)mu_snprintf(why, sizeof(why), "node %s lost", d_node_name(d, node_idx));
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        bool hit = false;
        if (!j->placed)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            if (j->tasks[t].node == node_idx && !j->tasks[t].gone) {
                j->tasks[t].gone = true;
                hit = true;
            }
        }
        if (!hit)
            continue;
        j->not_before_ms = mu_time_mono_ms() + d_fence_wait_ms(j);
        if (j->end == D_END_NONE)
            d_job_attempt_end(d, j, false, 0, why); /* may free j: iteration allows removal */
        else
            d_job_release_if_done(d, j);
    }
}

void d_node_reconcile(struct musterd *d, struct d_node *node, const struct proto_msg *hello)
{
    size_t pos = 0;
    struct d_job *j;

    for (int i = 0; i < hello->ntasks; i++)
        d_task_status(d, node, &hello->tasks[i]);
    /* Tasks we placed there that the worker does not know any more. */
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->placed)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            struct proto_task_ref ref = { .task = t,
                                          .attempt = j->placed_attempt,
                                          .state = PROTO_TASK_LOST };
            bool reported = false;
            if (j->tasks[t].node != node->idx || j->tasks[t].gone || !j->tasks[t].acked)
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
    size_t pos = 0;
    struct d_job *j;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
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
                              slow, d_node_name(d, j->tasks[slow].node), d->cfg.bind_timeout_s);
            d_job_attempt_end(d, j, false, 0, why); /* KILLs every task not yet gone */
        }
    }
}

/* ---------------- operator commands (muster:control) ---------------- */

static void job_cancel(struct musterd *d, struct d_job *j)
{
    char now[32];
    struct queue_kv f[] = { { "state", "CANCELLED" }, { "finished_at", now } };

    if (queue_state_is_final(j->state))
        return;
    j->finished_ms = mu_time_wall_ms();
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)j->finished_ms);
    j->state = QUEUE_CANCELLED;
    struct d_tally tally = { D_C_CANCELLED, 0, 0 };
    (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "CANCELLED", "cancelled by operator", &tally);
    mu_log(MU_LOG_INFO, "sched", "job=%s cancelled", j->id);
    if (!j->placed) {
        job_forget(d, j);
        return;
    }
    if (j->end == D_END_NONE)
        d_job_kill_live(d, j);
    j->end = D_END_FINAL;
    d_job_release_if_done(d, j);
}

static void job_hold(struct musterd *d, struct d_job *j, bool hold)
{
    struct queue_kv f[] = { { "held", hold ? "1" : NULL } };
    j->held = hold;
    (void)d_job_write(d, j, f, 1, NULL, NULL, NULL);
    if (!hold) {
        j->reason[0] = '\0';
        d->dirty = true;
    }
}

void d_control(struct musterd *d, const struct queue_entry *e)
{
    struct d_job *j = NULL;
    struct d_node *node = NULL;
    bool job_cmd = strcmp(e->cmd, "cancel") == 0 || strcmp(e->cmd, "hold") == 0
                   || strcmp(e->cmd, "release") == 0;
    bool node_cmd = strcmp(e->cmd, "drain") == 0 || strcmp(e->cmd, "cordon") == 0
                    || strcmp(e->cmd, "uncordon") == 0;

    if (job_cmd) {
        j = mu_map_get(d->jobs, e->arg);
        if (!j && strcmp(e->cmd, "cancel") == 0 && queue_job_id_is_valid(e->arg)) {
            /* A long submit backlog can be read after a cancel that names one of its entries:
             * remember it, and the job is cancelled when its submission is taken in. */
            struct mu_err err;
            if (mu_map_count(d->early_cancels) < 100000
                && mu_map_put(d->early_cancels, e->arg, d, &err) == 0)
                mu_log(MU_LOG_INFO, "sched", "job=%s cancel noted before its submission", e->arg);
        } else if (!j)
            mu_log(MU_LOG_WARN, "sched", "control %s: job '%s' is not active", e->cmd, e->arg);
        else if (strcmp(e->cmd, "cancel") == 0)
            job_cancel(d, j);
        else
            job_hold(d, j, strcmp(e->cmd, "hold") == 0);
    } else if (node_cmd) {
        int idx = sched_cluster_node_find(d->cluster, e->arg);
        node = idx >= 0 ? &d->nodes[idx] : NULL;
        if (!node) {
            mu_log(MU_LOG_WARN, "sched", "control %s: node '%s' is not registered", e->cmd, e->arg);
        } else {
            node->admin = strcmp(e->cmd, "drain") == 0    ? SCHED_NODE_DRAINING
                          : strcmp(e->cmd, "cordon") == 0 ? SCHED_NODE_CORDONED
                                                          : SCHED_NODE_READY;
            node->reason[0] = '\0'; /* the operator's word replaces musterd's */
            node->refusals = 0;
            if (node->online)
                sched_cluster_node_set_state(d->cluster, idx, d_node_state(node));
            mu_log(MU_LOG_INFO, "sched", "node=%s %s", node->name,
                   sched_node_state_name(node->admin));
            if (node->admin == SCHED_NODE_DRAINING)
                d_node_drain(d, node, e->grace_s);
            d->nodes_dirty = true;
            d->dirty = true;
        }
    } else {
        mu_log_limited(MU_LOG_WARN, "sched", "control-unknown", 5,
                       "control: unknown command '%s' ignored", e->cmd);
    }
    ack_only(d, QUEUE_STREAM_CONTROL, e->id);
}

/* ---------------- restart recovery ---------------- */

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

    if (d_nodes_recover(d, err) != 0 || queue_active_load(d->q, &stored, &n, err) != 0)
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
            job_free(j);
            continue;
        }
        j->state = QUEUE_PENDING;
        j->attempt = s->attempt > 0 ? s->attempt : 1;
        j->failures = s->failures;
        j->held = s->held;
        j->submitted_ms = id_ms(j->id);
        j->started_ms = s->started_ms;
        j->lost_gpu_s = s->lost_gpu_s;
        mu_strlcpy(j->last_checkpoint, s->last_checkpoint, sizeof(j->last_checkpoint));
        j->last_checkpoint_ms = s->last_checkpoint_ms;
        job_request_build(d, j);
        if (mu_map_put(d->jobs, j->id, j, &perr) != 0) {
            job_free(j);
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
            struct queue_kv f[] = { { "state", "PENDING" },
                                    { "attempt", attempt },
                                    { "nodes", NULL },
                                    { "placement", NULL },
                                    { "started_at", NULL } };
            j->attempt++;
            (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
            struct d_tally tally = { D_C_REQUEUES, 0, 0 };
            (void)d_job_write(d, j, f, (int)MU_ARRAY_LEN(f), "PENDING",
                              "requeued after a scheduler restart", &tally);
            requeued++;
        }
        pending_add(d, j);
    }
    if (n)
        mu_log(MU_LOG_INFO, "sched",
               "recovered %d active job(s): %d placed gang(s) to adopt, %d requeued", n, adopting,
               requeued);
    queue_stored_jobs_free(stored, n);
    return 0;
}

void d_jobs_free(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL)
        job_free(j);
    mu_map_free(d->jobs);
    d->jobs = NULL;
    mu_map_free(d->early_cancels);
    d->early_cancels = NULL;
    mu_map_free(d->expected_nodes); /* d_nodes_recover's */
    d->expected_nodes = NULL;
    free(d->pending);
    d->pending = NULL;
    free(d->pass.jobs);
    free(d->pass.out);
    free(d->pass.who);
    free(d->pass.running);
    free(d->pass.victims);
    free(d->pass.victim_jobs);
    free(d->pass.plan_victims);
    free(d->pass.reqs);
}

int d_jobs_by_node(struct musterd *d, struct mu_buf *per_node, struct mu_err *err)
{
    size_t pos = 0;
    struct d_job *j;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->placed)
            continue;
        for (int t = 0; t < j->spec.tasks; t++) {
            struct mu_buf *b = &per_node[j->tasks[t].node];
            bool seen = false;
            for (int u = 0; u < t && !seen; u++)
                seen = j->tasks[u].node == j->tasks[t].node && !j->tasks[u].gone;
            if (seen || j->tasks[t].gone)
                continue;
            if ((b->len && mu_buf_append(b, ",", 1, err) != 0)
                || mu_buf_append_json_str(b, j->id, err) != 0)
                return -1;
        }
    }
    return 0;
}

void d_jobs_queue_stats(struct musterd *d, struct d_queue_stats *stats)
{
    size_t pos = 0;
    struct d_job *j;

    memset(stats, 0, sizeof(*stats) * (size_t)d->cfg.nqueues);
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        const struct cfg_queue *cq = cfg_queue_find(&d->cfg, j->spec.queue);
        struct d_queue_stats *st;
        int64_t gpus = (int64_t)j->spec.tasks * j->spec.gpus_per_task;
        if (!cq)
            continue;
        st = &stats[cq - d->cfg.queues];
        if (j->state == QUEUE_PENDING) {
            st->pending_jobs++;
            st->pending_gpus += gpus;
            if (!st->oldest_pending_ms || j->submitted_ms < st->oldest_pending_ms)
                st->oldest_pending_ms = j->submitted_ms;
        } else if (j->state == QUEUE_STARTING || j->state == QUEUE_RUNNING
                   || j->state == QUEUE_PREEMPTING) {
            st->running_jobs++;
            st->running_gpus += gpus;
        }
    }
}

/* The pool a pending job would go to first: the cheapest pool of its first capacity type that
 * has its GPU type and enough GPUs per node, is not cooling down after a spot interruption, and
 * whose max_gpus cap leaves room for the gang (growing any other pool would not help it); npools
 * when none does. */
static int first_pool(const struct musterd *d, const struct d_job *j, int64_t now_s)
{
    int64_t gpus = (int64_t)j->spec.tasks * j->spec.gpus_per_task;
    int best = d->cfg.npools;
    for (int c = 0; c < j->spec.ncapacity && best == d->cfg.npools; c++) {
        for (int p = 0; p < d->cfg.npools; p++) {
            const struct cfg_pool *pool = &d->cfg.pools[p];
            if (pool->capacity != j->spec.capacity[c] || pool->gpus_per_node < j->spec.gpus_per_task
                || (j->spec.gpu_type[0] && strcmp(pool->gpu_type, j->spec.gpu_type) != 0)
                || sched_cluster_pool_cooldown_until(d->cluster, p) > now_s
                || (pool->max_gpus > 0
                    && pool->max_gpus - sched_cluster_pool_gpus_used(d->cluster, p) < gpus))
                continue;
            if (best == d->cfg.npools || pool->price_per_hour < d->cfg.pools[best].price_per_hour)
                best = p;
        }
    }
    return best;
}

void d_jobs_gauges(struct musterd *d, struct d_gauges *g)
{
    int64_t now_s = (int64_t)(mu_time_wall_ms() / 1000);
    size_t pos = 0;
    struct d_job *j;

    memset(g, 0, sizeof(*g));
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        const struct cfg_queue *cq = cfg_queue_find(&d->cfg, j->spec.queue);
        int q;
        if (!cq || (int)j->state >= D_ACTIVE_STATES)
            continue;
        q = (int)(cq - d->cfg.queues);
        g->jobs[q][j->state] += 1;
        if (j->state == QUEUE_PENDING)
            g->pending_gpus[q][first_pool(d, j, now_s)] +=
                (int64_t)j->spec.tasks * j->spec.gpus_per_task;
    }
    for (int i = 0; i < d->nnodes; i++) {
        const struct cfg_pool *pool = cfg_pool_find(&d->cfg, d->nodes[i].pool);
        int p;
        int free_gpus;
        if (!pool || !d->nodes[i].online)
            continue;
        p = (int)(pool - d->cfg.pools);
        free_gpus = sched_cluster_node_gpus_free(d->cluster, i);
        g->nodes[p] += 1;
        g->gpus_free[p] += free_gpus;
        g->gpus_used[p] += sched_cluster_node_spec(d->cluster, i)->ngpus - free_gpus;
    }
}

/* One job's whole state, for a job whose updates could not be written during a Redis outage. */
static int job_snapshot_write(struct musterd *d, struct d_job *j)
{
    char attempt[16], failures[16], started[32], finished[32], code[16], lost[32], ckpt_at[32];
    const bool final = queue_state_is_final(j->state);
    struct queue_kv f[] = {
        { "state", queue_state_name(j->state) },
        { "attempt", attempt },
        { "failures", failures },
        { "reason", j->state == QUEUE_PENDING ? j->reason : NULL },
        { "started_at", j->started_ms ? started : NULL },
        { "finished_at", final && j->finished_ms ? finished : NULL },
        { "exit_code", j->state == QUEUE_SUCCEEDED ? "0"
                       : j->state == QUEUE_FAILED  ? code
                                                   : NULL },
        { "error", j->state == QUEUE_FAILED ? j->error : NULL },
        { "lost_gpu_seconds", lost },
        { "last_checkpoint", j->last_checkpoint[0] ? j->last_checkpoint : NULL },
        { "last_checkpoint_at", j->last_checkpoint_ms ? ckpt_at : NULL },
    };
    struct queue_event ev = { .state = queue_state_name(j->state),
                              .reason = "state written again after a Redis outage",
                              .attempt = j->attempt,
                              .at_ms = mu_time_wall_ms() };
    struct mu_err err;

    (void)mu_snprintf(attempt, sizeof(attempt), "%d", j->attempt);
    (void)mu_snprintf(failures, sizeof(failures), "%d", j->failures);
    (void)mu_snprintf(started, sizeof(started), "%llu", (unsigned long long)j->started_ms);
    (void)mu_snprintf(finished, sizeof(finished), "%llu", (unsigned long long)j->finished_ms);
    (void)mu_snprintf(code, sizeof(code), "%d", j->exit_code);
    (void)mu_snprintf(lost, sizeof(lost), "%.3f", j->lost_gpu_s);
    (void)mu_snprintf(ckpt_at, sizeof(ckpt_at), "%llu", (unsigned long long)j->last_checkpoint_ms);
    if (queue_job_update(d->q, j->id, f, (int)MU_ARRAY_LEN(f), 0, &ev, d->cfg.events_max,
                         QUEUE_STREAM_SUBMIT, NULL, &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s resync: %s", j->id,
                       err.msg);
        return -1;
    }
    return 0;
}

int d_jobs_resync(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;
    int n = 0;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->unsynced)
            continue;
        if (job_snapshot_write(d, j) != 0)
            return -1;
        j->unsynced = false;
        n++;
        if (j->forget_after_sync) {
            (void)mu_map_remove(d->jobs, j->id);
            job_free(j);
        }
    }
    if (n)
        mu_log(MU_LOG_INFO, "sched", "wrote %d job(s) changed during the Redis outage", n);
    return 0;
}

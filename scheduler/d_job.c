/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_job.h): job records, their writes to Redis, the job table and the
 * pending list, pending reasons, and the facts derived from a record (time limit, backoff, fence
 * wait).  Nothing here sends a message or decides a transition: the layers above do, through
 * d_job_write.
 */

#include "scheduler/d_job.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

uint64_t d_job_id_ms(const char *id)
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

struct d_job *d_job_alloc(void)
{
    /* aligned_alloc: the record has a line of its own (struct d_job), which calloc's 16-byte
     * alignment would not honour.  The size is a multiple of the alignment, as it asks. */
    struct d_job *j = aligned_alloc(_Alignof(struct d_job), sizeof(*j));
    if (j)
        memset(j, 0, sizeof(*j));
    return j;
}

struct d_job *d_job_new(const char *id)
{
    struct d_job *j = d_job_alloc();
    if (!j)
        return NULL;
    mu_strlcpy(j->id, id, sizeof(j->id));
    d_job_state_load(j, QUEUE_PENDING);
    j->attempt = 1;
    j->submitted_ms = d_job_id_ms(j->id);
    return j;
}

void d_job_free(struct d_job *j)
{
    if (!j)
        return;
    queue_spec_release(&j->spec);
    free(j->adopt_nodes);
    free(j->deps);
    if (j->array) {
        free(j->array->spec);
        free(j->array->skip);
        free(j->array);
    }
    free(j->slots);
    free(j->tasks);
    free(j->last_checkpoint);
    free(j->stop_reason);
    free(j->failure);
    free(j->error);
    free(j);
}

void d_job_placement_drop(struct d_job *j)
{
    free(j->slots);
    free(j->tasks);
    free(j->adopt_nodes);
    j->slots = NULL;
    j->tasks = NULL;
    j->adopt_nodes = NULL;
}

int d_job_request_build(struct musterd *d, struct d_job *j, struct mu_err *err)
{
    struct sched_request *r = &j->req;
    const struct cfg_queue *q = cfg_queue_find(&d->cfg, j->spec.queue);

    j->queue_idx = q ? (int)(q - d->cfg.queues) : d->cfg.nqueues;
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
    r->gpu_milli = j->spec.gpu_milli;
    if (j->spec.gpu_slice[0]) {
        /* Intake checked the profile; a job of an earlier run may name one no node has
         * reported yet: it waits for one ("no ready node with 1+ 3g.40gb slices"). */
        r->slice_profile = sched_cluster_profile_intern(d->cluster, j->spec.gpu_slice, err);
        if (r->slice_profile < 0)
            return -1;
    }
    return d_usage_user(d, j, err) ? 0 : -1;
}

int d_job_fields_new(const struct d_job *j,
                     const char *spec_json,
                     char bufs[6][32],
                     struct queue_kv *f)
{
    int i = 0;
    (void)mu_snprintf(bufs[0], 32, "%lld", (long long)j->spec.priority);
    (void)mu_snprintf(bufs[1], 32, "%d", j->spec.tasks);
    (void)mu_snprintf(bufs[2], 32, "%d", j->spec.gpus_per_task);
    (void)mu_snprintf(bufs[3], 32, "%d", j->attempt);
    (void)mu_snprintf(bufs[4], 32, "%d", j->spec.max_retries);
    (void)mu_snprintf(bufs[5], 32, "%llu", (unsigned long long)j->submitted_ms);
    f[i++] = (struct queue_kv){ QUEUE_F_ID, j->id };
    f[i++] = (struct queue_kv){ QUEUE_F_NAME, j->spec.name };
    f[i++] = (struct queue_kv){ QUEUE_F_QUEUE, j->spec.queue };
    f[i++] = (struct queue_kv){ QUEUE_F_USER, j->spec.user };
    if (j->owner[0]) /* proven identity: who wrote it (a service may submit for the user) */
        f[i++] = (struct queue_kv){ QUEUE_F_SUBMITTED_BY, j->owner };
    f[i++] = (struct queue_kv){ QUEUE_F_PRIORITY, bufs[0] };
    f[i++] = (struct queue_kv){ QUEUE_F_TASKS, bufs[1] };
    f[i++] = (struct queue_kv){ QUEUE_F_GPUS_PER_TASK, bufs[2] };
    f[i++] = (struct queue_kv){ QUEUE_F_ATTEMPT, bufs[3] };
    f[i++] = (struct queue_kv){ QUEUE_F_MAX_RETRIES, bufs[4] };
    f[i++] = (struct queue_kv){ QUEUE_F_SUBMITTED_AT, bufs[5] };
    f[i++] = (struct queue_kv){ QUEUE_F_SPEC, spec_json };
    f[i++] =
        (struct queue_kv){ QUEUE_F_REASON, j->reason[0] ? j->reason : "waiting for the scheduler" };
    return i;
}

int d_record_write(struct musterd *d, const char *id, int attempt, const struct d_change *c)
{
    struct queue_kv f[D_CHANGE_FIELDS_MAX + 1];
    const char *state = c->to >= 0 ? queue_state_name((enum queue_state)c->to) : NULL;
    const char *event = c->event ? c->event : state;
    struct queue_event ev = {
        .state = event, .reason = c->reason, .attempt = attempt, .at_ms = mu_time_wall_ms()
    };
    struct d_metrics counted = d->metrics; /* raised only when the write lands */
    struct mu_err err;
    int n = 0;

    if (MU_NEVER(c->nfields < 0 || c->nfields > D_CHANGE_FIELDS_MAX))
        return -1;
    if (state)
        f[n++] = (struct queue_kv){ QUEUE_F_STATE, state };
    for (int i = 0; i < c->nfields; i++)
        f[n++] = c->fields[i];
    d_counters_tally(&counted, c->tally, &ev);
    if (d->store.ops->job_update(d->store.ctx,
                                 &(struct queue_job_change){ .id = id,
                                                             .fields = f,
                                                             .nfields = n,
                                                             .index_ms = c->index_ms,
                                                             .ev = event ? &ev : NULL,
                                                             .events_max = d->cfg.events_max,
                                                             .ack_stream = QUEUE_STREAM_SUBMIT,
                                                             .ack_owner = c->ack_owner,
                                                             .ack_id = c->ack_entry },
                                 &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s cannot store: %s", id,
                       err.msg);
        d->redis_down = true;
        return -1;
    }
    d->metrics = counted;
    return 0;
}

/* The write-ahead (d_job.h): Redis first; j moves only once it landed. */
int d_job_write(struct musterd *d, struct d_job *j, const struct d_change *c)
{
    if (d->redis_down || d_record_write(d, j->id, c->attempt ? c->attempt : j->attempt, c) != 0) {
        j->unsynced = true; /* written whole once Redis is back (d_jobs_resync) */
        return -1;
    }
    d_job_moved(d, j, c->to);
    return 0;
}

void d_job_moved(struct musterd *d, struct d_job *j, int to)
{
    if (to >= 0) {
        j->state = (enum queue_state)to;
        d_job_wake_dependents(d, j);
    }
}

void d_job_state_load(struct d_job *j, enum queue_state st)
{
    j->state = st;
}

void d_job_remember(struct musterd *d, struct d_job *j, const struct d_change *c)
{
    d_job_moved(d, j, c->to);
    d_counters_owe(&d->metrics, &j->owed, c->tally);
    j->unsynced = true; /* d_jobs_resync writes it whole before anything new is decided */
}

/* An entry of a stream that makes no job (a control command, a duplicate) is done with. */
void d_stream_ack(struct musterd *d, const struct queue_entry *e)
{
    const char *entry_id = e->id;
    struct mu_err err;
    if (d->store.ops->job_update(d->store.ctx,
                                 &(struct queue_job_change){ .id = entry_id,
                                                             .ack_stream = e->stream,
                                                             .ack_owner = e->owner,
                                                             .ack_id = entry_id },
                                 &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-ack", 5, "cannot acknowledge %s: %s", entry_id,
                       err.msg);
        d->redis_down = true;
    }
}

/* j's reason waits for d_jobs_flush_reasons: on the list of late reasons, once. */
static void reason_late(struct musterd *d, struct d_job *j)
{
    if (j->late_at)
        return;
    if (d->nlate == d->cap_late) {
        int cap = d->cap_late ? d->cap_late * 2 : 256;
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_job **p = realloc(d->late, (size_t)cap * sizeof(*p));
        if (!p)
            return; /* written by the next d_jobs_resync, or with its next change */
        d->late = p;
        d->cap_late = cap;
    }
    d->late[d->nlate++] = j;
    j->late_at = d->nlate;
}

void d_job_reason_late_drop(struct musterd *d, struct d_job *j)
{
    struct d_job *last;
    if (!j->late_at)
        return;
    last = d->late[--d->nlate];
    d->late[j->late_at - 1] = last;
    last->late_at = j->late_at;
    j->late_at = 0;
}

/*
 * Keeps the job's pending reason.  Reasons carry live numbers ("at most 3 task(s) fit now") that
 * change with every pass, so Redis gets a job's reason at once the first time and then at most
 * once a second (d_jobs_flush_reasons writes what is left); otherwise a long queue would cost a
 * write per job per pass.
 */
void d_job_set_reason(struct musterd *d, struct d_job *j, const char *reason)
{
    uint64_t now;
    if (strcmp(j->reason, reason) == 0)
        return; /* the common case in a long queue: before the clock is read */
    now = mu_time_mono_ms();
    mu_strlcpy(j->reason, reason, sizeof(j->reason));
    if ((j->reason_stored && now - j->reason_at_ms < 1000) || d->reason_budget <= 0) {
        reason_late(d, j); /* d_jobs_flush_reasons writes it later */
        return;
    }
    d->reason_budget--;
    {
        struct queue_kv f[] = { { QUEUE_F_REASON, reason } };
        struct d_change c = { .to = D_SAME, .fields = f, .nfields = 1 };
        if (d->batch.open) { /* it lands with the batch (d_batch_end) */
            if (MU_NEVER(d->batch.nreasons == D_REASONS_PER_TICK) || d->redis_down
                || d_record_write(d, j->id, j->attempt, &c) != 0) {
                j->unsynced = true;
                reason_late(d, j);
                return;
            }
            d->batch.reasons[d->batch.nreasons].job = j;
            d->batch.reasons[d->batch.nreasons++].written = mu_hash(reason, strlen(reason));
            return;
        }
        /* On failure the reason is in memory and goes out with the rest (d_jobs_resync). */
        if (d_job_write(d, j, &c) == 0) {
            d_job_reason_stored(j, reason);
            d_job_reason_late_drop(d, j);
        } else {
            reason_late(d, j);
        }
    }
}

void d_batch_begin(struct musterd *d)
{
    if (MU_NEVER(d->batch.open))
        return;
    d->batch.open = true;
    d->batch.before = d->metrics;
    d->batch.nreasons = 0;
    d->store.ops->batch_begin(d->store.ctx);
}

int d_batch_end(struct musterd *d)
{
    uint64_t now = mu_time_mono_ms();
    struct mu_err err;
    bool landed;

    if (MU_NEVER(!d->batch.open))
        return -1;
    d->batch.open = false;
    landed = d->store.ops->batch_end(d->store.ctx, &err) == 0;
    if (!landed) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "cannot store a batch: %s",
                       err.msg);
        d->redis_down = true;
        d->metrics = d->batch.before;
    }
    for (int i = 0; i < d->batch.nreasons; i++) {
        struct d_job *j = d->batch.reasons[i].job;
        if (!landed) {
            j->unsynced = true; /* the reason goes out with the rest (d_jobs_resync) */
            reason_late(d, j);
            continue;
        }
        j->reason_written = d->batch.reasons[i].written;
        j->reason_stored = true;
        j->reason_at_ms = now;
        if (mu_hash(j->reason, strlen(j->reason)) == j->reason_written)
            d_job_reason_late_drop(d, j);
    }
    d->batch.nreasons = 0;
    return landed ? 0 : -1;
}

void d_job_reason_stored(struct d_job *j, const char *reason)
{
    if (reason != j->reason)
        mu_strlcpy(j->reason, reason, sizeof(j->reason));
    j->reason_written = mu_hash(j->reason, strlen(j->reason));
    j->reason_stored = true;
    j->reason_at_ms = mu_time_mono_ms();
}

int d_job_text_set(char **field, const char *text)
{
    char *copy = NULL;
    if (text[0] && !(copy = strdup(text))) {
        mu_log_limited(MU_LOG_ERROR, "sched", "text", 10, "out of memory keeping '%s'", text);
        return -1;
    }
    free(*field);
    *field = copy;
    return 0;
}

void d_jobs_flush_reasons(struct musterd *d)
{
    uint64_t now = mu_time_mono_ms();
    /* A bounded number of reason writes per tick: a queue of 100,000 jobs (after a restart,
     * say) gets its reasons over some seconds instead of stalling the loop.  Only the late
     * reasons are looked at, not the whole queue. */
    d->reason_budget = D_REASONS_PER_TICK;
    d_batch_begin(d); /* in one round trip */
    for (int i = d->nlate; i-- > 0 && d->reason_budget > 0;) {
        struct d_job *j;
        if (i >= d->nlate)
            continue; /* jobs after it left the list: the last moved to their place */
        j = d->late[i];
        if (!j->reason[0] || mu_hash(j->reason, strlen(j->reason)) == j->reason_written) {
            d_job_reason_late_drop(d, j);
        } else if (now - j->reason_at_ms >= 1000) {
            char reason[sizeof(j->reason)];
            mu_strlcpy(reason, j->reason, sizeof(reason));
            j->reason[0] = '\0';
            j->reason_stored = false;
            d_job_set_reason(d, j, reason);
        }
    }
    (void)d_batch_end(d); /* a batch that did not land is logged there and written again */
}

void d_array_tally_get(const struct d_job *p, struct d_array_tally *t)
{
    const struct d_array *a = p->array;

    t->total = p->spec.array ? p->spec.array->count : 0;
    t->ok = a->ok;
    t->notok = a->notok;
    t->nostart = a->nostart;
    /* Ended after a start, plus made, not final and not pending a first start. */
    t->started = a->ok + a->notok - a->nostart + (a->active - a->pending);
}

void d_job_wake_dependents(struct musterd *d, struct d_job *j)
{
    bool started = j->state == QUEUE_STARTING || j->state == QUEUE_RUNNING;
    bool element = j->array_of[0] != '\0';

    if (!started && !queue_state_is_final(j->state) && !j->array)
        return;
    if (!element && (!d->waiters || !mu_map_get(d->waiters, j->id)))
        return; /* nobody waits for it: the common case, one lookup */
    if (d->nwoken == d->cap_woken) {
        int cap = d->cap_woken ? d->cap_woken * 2 : 64;
        struct d_wake *p = realloc(d->woken, (size_t)cap * sizeof(*p));
        if (!p) {
            mu_log(MU_LOG_ERROR, "sched", "job=%s out of memory waking its dependents", j->id);
            return;
        }
        d->woken = p;
        d->cap_woken = cap;
    }
    mu_strlcpy(d->woken[d->nwoken].id, j->id, sizeof(d->woken[0].id));
    d->woken[d->nwoken].state = j->state;
    d->woken[d->nwoken].started = started || j->started_ms != 0;
    d->woken[d->nwoken].element = element;
    d->woken[d->nwoken].was_unstarted = j->array_unstarted;
    d->woken[d->nwoken].array = j->array != NULL;
    if (j->array)
        d_array_tally_get(j, &d->woken[d->nwoken].tally);
    j->array_unstarted = false; /* its array counts the start (or end) once */
    d->nwoken++;
    d->dirty = true; /* the pass begins with d_deps_wake */
}

/* Frees the oldest n retired jobs. */
static void retired_drop(struct musterd *d, int n)
{
    if (n <= 0)
        return;
    for (int i = 0; i < n; i++) {
        (void)mu_map_remove(d->retired_ids, d->retired[i]->id);
        d_job_free(d->retired[i]);
    }
    d->nretired -= n;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
    memmove(d->retired, d->retired + n, (size_t)d->nretired * sizeof(*d->retired));
}

void d_job_retire(struct musterd *d, struct d_job *j)
{
    struct mu_err err;

    if (d->nretired == D_RETIRED_MAX)
        retired_drop(d, D_RETIRED_MAX / 10); /* a burst of ends: the oldest go early */
    if (!d->retired_ids && !(d->retired_ids = mu_map_new()))
        goto drop;
    if (d->nretired == d->cap_retired) {
        int cap = d->cap_retired ? d->cap_retired * 2 : 64;
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        struct d_job **p = realloc(d->retired, (size_t)cap * sizeof(*p));
        if (!p)
            goto drop;
        d->retired = p;
        d->cap_retired = cap;
    }
    if (mu_map_put(d->retired_ids, j->id, j, &err) != 0)
        goto drop;
    /* Only the final state is written again: what placed it is of no more use. */
    d_job_placement_drop(j);
    j->placed = false;
    j->adopting = false;
    j->retired_ms = mu_time_mono_ms();
    d->retired[d->nretired++] = j;
    return;
drop:
    d_job_free(j); /* without memory it is not kept: as before retiring existed */
}

struct d_job *d_job_retired_find(const struct musterd *d, const char *id)
{
    return d->retired_ids ? mu_map_get(d->retired_ids, id) : NULL;
}

void d_jobs_retired_expire(struct musterd *d, uint64_t now)
{
    int n = 0;
    while (n < d->nretired && now - d->retired[n]->retired_ms >= D_RETIRED_KEEP_MS
           && !d->retired[n]->unsynced)
        n++;
    if (n)
        retired_drop(d, n);
}

bool d_job_all_gone(const struct d_job *j)
{
    for (int t = 0; t < j->spec.tasks; t++) {
        if (!j->tasks[t].gone)
            return false;
    }
    return true;
}

int d_job_tasks_new(struct d_job *j)
{
    free(j->tasks);
    j->ncommitted = 0;
    j->tasks = calloc((size_t)j->spec.tasks, sizeof(*j->tasks));
    return j->tasks ? 0 : -1;
}

void d_job_task_commit(struct d_job *j, int t)
{
    if (!j->tasks[t].committed)
        j->ncommitted++;
    j->tasks[t].committed = true;
}

bool d_job_fully_committed(const struct d_job *j)
{
    return j->tasks && j->ncommitted == j->spec.tasks;
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

void d_task_record_end(struct d_task *task, const struct proto_task_ref *r)
{
    task->gone = true;
    task->acked = true; /* the worker had it */
    task->lost = r->state == PROTO_TASK_LOST;
    task->fenced = r->state == PROTO_TASK_EXITED && r->fenced;
    task->oom = r->state == PROTO_TASK_EXITED && r->oom_killed;
    task->stopped = r->state == PROTO_TASK_EXITED && r->stopped;
    task->held = true;
    task->exit_code = r->state == PROTO_TASK_EXITED ? r->exit_code : 0;
    task->signal = r->state == PROTO_TASK_EXITED ? r->signal : 0;
}

int64_t d_job_run_s(const struct musterd *d, const struct d_job *j)
{
    return sched_time_limit_s(j->spec.time_limit_s, d->cfg.default_time_limit_s);
}

int64_t d_job_end_s(const struct musterd *d, const struct d_job *j)
{
    return (int64_t)(j->started_ms / 1000) + d_job_run_s(d, j);
}

int d_job_capacity(const struct musterd *d, const struct d_job *j)
{
    int node = (j->placed || j->adopting) && j->slots && j->spec.tasks > 0 ? j->slots[0].node : -1;
    const struct sched_node_spec *spec =
        node >= 0 ? sched_cluster_node_spec(d->cluster, node) : NULL;
    return spec ? (int)sched_cluster_pool(d->cluster, spec->pool)->capacity : -1;
}

void d_limit_watch(struct musterd *d, const struct d_job *j)
{
    uint64_t end_ms = j->started_ms + (uint64_t)d_job_run_s(d, j) * 1000u;
    if (end_ms < d->next_limit_ms)
        d->next_limit_ms = end_ms;
}

int64_t d_retry_backoff_ms(const struct musterd *d, int failures)
{
    int64_t s = d->cfg.retry_backoff_s;
    for (int i = 1; i < failures && s < d->cfg.retry_backoff_max_s; i++)
        s *= 2;
    return (s < d->cfg.retry_backoff_max_s ? s : d->cfg.retry_backoff_max_s) * 1000;
}

/* A worker cut off from us fences itself: checkpoint signal, grace_s, SIGTERM, SIGKILL 5 s
 * later.  The next attempt of a gang it ran waits that long, so the two never run side by side. */
uint64_t d_fence_wait_ms(const struct d_job *j)
{
    return ((uint64_t)(j->spec.checkpointable ? j->spec.checkpoint_grace_s : 0) + 6u) * 1000u;
}

/* One job's whole state, for a job whose updates could not be written during a Redis outage or
 * may be missing on a new primary: the hash's fields that change, and those of its submission
 * but the spec (not kept in memory), its place in the jobs index and in (or out of) the active
 * set.  why is the event's reason. */
static int job_snapshot_write(struct musterd *d, struct d_job *j, const char *why)
{
    char attempt[16], failures[16], started[32], finished[32], code[16], lost[32], ckpt_at[32];
    char prio[32], tasks[16], gpus[16], retries[16], submitted[32];
    const bool final = queue_state_is_final(j->state);
    struct queue_kv f[] = {
        { QUEUE_F_ID, j->id },
        { QUEUE_F_NAME, j->spec.name },
        { QUEUE_F_QUEUE, j->spec.queue },
        { QUEUE_F_USER, j->spec.user },
        { QUEUE_F_PRIORITY, prio },
        { QUEUE_F_TASKS, tasks },
        { QUEUE_F_GPUS_PER_TASK, gpus },
        { QUEUE_F_MAX_RETRIES, retries },
        { QUEUE_F_SUBMITTED_AT, submitted },
        { QUEUE_F_STATE, queue_state_name(j->state) },
        { QUEUE_F_ATTEMPT, attempt },
        { QUEUE_F_FAILURES, failures },
        { QUEUE_F_REASON, j->state == QUEUE_PENDING ? j->reason : NULL },
        { QUEUE_F_STARTED_AT, j->started_ms ? started : NULL },
        { QUEUE_F_FINISHED_AT, final && j->finished_ms ? finished : NULL },
        { QUEUE_F_EXIT_CODE, j->state == QUEUE_SUCCEEDED ? "0"
                             : j->state == QUEUE_FAILED  ? code
                                                         : NULL },
        { QUEUE_F_ERROR, j->state == QUEUE_FAILED ? d_job_text(j->error) : NULL },
        { QUEUE_F_LOST_GPU_SECONDS, lost },
        { QUEUE_F_LAST_CHECKPOINT, j->last_checkpoint },
        { QUEUE_F_LAST_CHECKPOINT_AT, j->last_checkpoint_ms ? ckpt_at : NULL },
    };
    struct queue_event ev = { .state = queue_state_name(j->state),
                              .reason = why,
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
    (void)mu_snprintf(prio, sizeof(prio), "%lld", (long long)j->spec.priority);
    (void)mu_snprintf(tasks, sizeof(tasks), "%d", j->spec.tasks);
    (void)mu_snprintf(gpus, sizeof(gpus), "%d", j->spec.gpus_per_task);
    (void)mu_snprintf(retries, sizeof(retries), "%d", j->spec.max_retries);
    (void)mu_snprintf(submitted, sizeof(submitted), "%llu", (unsigned long long)j->submitted_ms);
    d_counters_settle(&j->owed, &ev);
    if (d->store.ops->job_update(
            d->store.ctx,
            &(struct queue_job_change){ .id = j->id,
                                        .fields = f,
                                        .nfields = (int)MU_ARRAY_LEN(f),
                                        .index_ms = j->submitted_ms ? j->submitted_ms : 1,
                                        .ev = &ev,
                                        .events_max = d->cfg.events_max,
                                        .ack_stream = QUEUE_STREAM_SUBMIT },
            &err)
        != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s resync: %s", j->id,
                       err.msg);
        return -1;
    }
    return 0;
}

/* Writes every unsynced job, held or retired; the number written, or -1 if Redis failed. */
static int resync(struct musterd *d, const char *why)
{
    size_t pos = 0;
    struct d_job *j;
    int n = 0;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->unsynced)
            continue;
        if (job_snapshot_write(d, j, why) != 0)
            return -1;
        j->unsynced = false;
        memset(&j->owed, 0, sizeof(j->owed));
        n++;
        if (j->forget_after_sync) {
            (void)mu_map_remove(d->jobs, j->id);
            d_job_retire(d, j);
        }
    }
    for (int i = 0; i < d->nretired; i++) {
        j = d->retired[i];
        if (!j->unsynced)
            continue;
        if (job_snapshot_write(d, j, why) != 0)
            return -1;
        j->unsynced = false;
        n++;
    }
    return n;
}

int d_jobs_resync(struct musterd *d)
{
    int n = resync(d, "state written again after a Redis outage");
    if (n > 0)
        mu_log(MU_LOG_INFO, "sched", "wrote %d job(s) changed during the Redis outage", n);
    return n < 0 ? -1 : 0;
}

void d_idem_key(const char *writer, const char *key, char *buf, size_t size)
{
    if (writer[0])
        (void)mu_snprintf(buf, size, "%s:%s", writer, key);
    else
        mu_strlcpy(buf, key, size);
}

int d_job_idem_claim(struct musterd *d, const struct d_job *j, char *owner, size_t size)
{
    char key[D_IDEM_KEY_MAX];
    bool won = false;
    struct mu_err err;

    owner[0] = '\0';
    if (!j->spec.idempotency_key[0])
        return 0;
    d_idem_key(j->owner, j->spec.idempotency_key, key, sizeof(key));
    if (d->store.ops->idem_claim(d->store.ctx, key, j->id, owner, size, &won, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s idempotency: %s", j->id,
                       err.msg);
        return -1;
    }
    if (won || strcmp(owner, j->id) == 0)
        owner[0] = '\0';
    return 0;
}

/* The idempotency key of j claimed again for it: a new primary may have missed the claim. */
static int idem_reclaim(struct musterd *d, const struct d_job *j)
{
    char owner[QUEUE_JOB_ID_MAX];

    if (d_job_idem_claim(d, j, owner, sizeof(owner)) != 0)
        return -1;
    if (owner[0])
        mu_log(MU_LOG_WARN, "sched",
               "job=%s its idempotency key '%s' is held by job %s on the new Redis primary", j->id,
               j->spec.idempotency_key, owner);
    return 0;
}

int d_jobs_resync_all(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;
    int n;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (idem_reclaim(d, j) != 0)
            return -1;
        j->unsynced = true;
    }
    for (int i = 0; i < d->nretired; i++) {
        if (idem_reclaim(d, d->retired[i]) != 0)
            return -1;
        d->retired[i]->unsynced = true;
    }
    n = resync(d, "state written again on a new Redis primary");
    if (n < 0)
        return -1;
    mu_log(MU_LOG_INFO, "sched",
           "wrote %d job(s) again on the new Redis server (%d held, %d finished in the last %d s)",
           n, (int)mu_map_count(d->jobs), d->nretired, D_RETIRED_KEEP_MS / 1000);
    return 0;
}

void d_jobs_free(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL)
        d_job_free(j);
    mu_map_free(d->jobs);
    d->jobs = NULL;
    retired_drop(d, d->nretired);
    free(d->retired);
    d->retired = NULL;
    d->cap_retired = 0;
    mu_map_free(d->retired_ids);
    d->retired_ids = NULL;
    pos = 0;
    {
        char *by;
        while ((by = mu_map_next(d->early_cancels, &pos)) != NULL)
            free(by);
    }
    mu_map_free(d->early_cancels);
    d->early_cancels = NULL;
    pos = 0;
    {
        struct d_waiters *w;
        while (d->waiters && (w = mu_map_next(d->waiters, &pos)) != NULL) {
            free(w->ids);
            free(w);
        }
    }
    mu_map_free(d->waiters);
    d->waiters = NULL;
    free(d->woken);
    d->woken = NULL;
    d->nwoken = d->cap_woken = 0;
    free(d->live);
    free(d->live_sig);
    free(d->late);
    d->live = NULL;
    d->live_sig = NULL;
    d->nlive = d->cap_live = 0;
}

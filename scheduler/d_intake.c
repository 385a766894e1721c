/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): submissions from the stream (docs/design.md §3, §6).  A spec
 * is parsed and checked against the config; a bad one is stored REJECTED with an error that names
 * the key; a good one is stored PENDING and queued.  The stream entry is acknowledged in the
 * same round trip as the job's first write, so a crash never loses one; an idempotency key
 * already taken makes no new job.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

static void reject(struct musterd *d, const struct queue_entry *e, const char *why)
{
    uint64_t now_ms = mu_time_wall_ms();
    char now[32];
    char submitted[32];
    char stored[4200];
    const char *spec = e->spec ? e->spec : "";
    struct queue_kv f[] = { { QUEUE_F_ID, e->id },        { QUEUE_F_ERROR, why },
                            { QUEUE_F_SPEC, spec },       { QUEUE_F_SUBMITTED_AT, submitted },
                            { QUEUE_F_FINISHED_AT, now }, { QUEUE_F_NAME, "" },
                            { QUEUE_F_QUEUE, "" } };
    struct d_tally tally = { D_C_REJECTED, 0, 0 };
    struct d_change c = { .to = QUEUE_REJECTED,
                          .reason = why,
                          .fields = f,
                          .nfields = (int)MU_ARRAY_LEN(f),
                          .tally = &tally,
                          .index_ms = d_job_id_ms(e->id) ? d_job_id_ms(e->id) : 1,
                          .ack_entry = e->id,
                          .ack_owner = e->owner };

    if (e->spec && strlen(e->spec) > 4096) {
        /* Keep what a user needs to recognise it without storing megabytes of garbage. */
        (void)snprintf(stored, sizeof(stored), "%.4096s...(truncated, %zu bytes)", e->spec,
                       e->spec_len);
        f[2].value = stored;
    }
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
    (void)mu_snprintf(submitted, sizeof(submitted), "%llu", (unsigned long long)d_job_id_ms(e->id));
    if (d_record_write(d, e->id, 0, &c) != 0)
        return; /* not acknowledged: read again once Redis is back */
    mu_log_limited(MU_LOG_INFO, "sched", "rejected", 1, "job=%s rejected: %s", e->id, why);
}

/* The new job's hash: d_job_fields_new's, and an array's or dependent's own. */
static void fields_of_new_job(const struct d_job *j,
                              const char *spec_json,
                              const char *after,
                              char bufs[7][32],
                              struct queue_kv *f,
                              int *n)
{
    int i = d_job_fields_new(j, spec_json, bufs, f);
    if (j->spec.array) {
        (void)mu_snprintf(bufs[6], 32, "%lld", (long long)j->spec.array->count);
        f[i++] = (struct queue_kv){ QUEUE_F_ARRAY, j->spec.array->text };
        f[i++] = (struct queue_kv){ QUEUE_F_ARRAY_SIZE, bufs[6] };
        f[i++] = (struct queue_kv){ QUEUE_F_ARRAY_NEXT, "0" };
    }
    if (after) {
        f[i++] = (struct queue_kv){ QUEUE_F_AFTER, after };
        if (!j->deps_open)
            f[i++] = (struct queue_kv){ QUEUE_F_AFTER_MET, "1" };
    }
    *n = i;
}

/* The idempotency key of j: 0 when it is j's to use (go on), 1 when another job holds it (a
 * DUPLICATE event, nothing queued) or Redis failed (not acknowledged: read again later). */
static int idem_claim(struct musterd *d, const struct queue_entry *e, const struct d_job *j)
{
    char owner[QUEUE_JOB_ID_MAX];
    char why[400];
    struct d_change dup = { .to = D_SAME,
                            .event = QUEUE_E_DUPLICATE,
                            .reason = why,
                            .ack_entry = e->id,
                            .ack_owner = e->owner };

    if (d_job_idem_claim(d, j, owner, sizeof(owner)) != 0) {
        d->redis_down = true;
        return 1;
    }
    if (!owner[0])
        return 0;
    (void)mu_snprintf(why, sizeof(why), "idempotency key '%s' already used by job %s",
                      j->spec.idempotency_key, owner);
    if (d_record_write(d, j->id, 0, &dup) == 0)
        mu_log(MU_LOG_INFO, "sched", "job=%s duplicate of %s, not queued", j->id, owner);
    return 1; /* not acknowledged when the write failed: read again later */
}

/* j's conditions (spec "after", "singleton"): 0 to go on, with *after the text to store (heap,
 * NULL when none) and never the reason to cancel it at once ("" when none); 1 when the
 * submission was rejected or must be read again (Redis down, no memory). */
static int deps_take(struct musterd *d,
                     const struct queue_entry *e,
                     struct d_job *j,
                     char **after,
                     char *never,
                     size_t never_size)
{
    struct mu_err err;

    *after = NULL;
    if (!j->spec.nafter && !j->spec.singleton)
        return 0;
    if (d_deps_resolve(d, j, never, never_size, &err) != 0) {
        if (err.code == MU_E_SPEC) {
            reject(d, e, err.msg);
            return 1;
        }
        mu_log_limited(MU_LOG_ERROR, "sched", "redis-write", 5, "job=%s dependencies: %s", j->id,
                       err.msg);
        d->redis_down = d->redis_down || err.code == MU_E_REDIS;
        return 1; /* not acknowledged: read again once Redis is back */
    }
    if (j->ndeps > 0 && !(*after = d_deps_format(j))) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s out of memory; left pending in the stream", e->id);
        return 1;
    }
    return 0; /* d_deps_resolve gave j its reason */
}

/* The job parsed from e, or NULL when e was rejected (or no memory: left in the stream). */
/*
 * gpu_slice (issue #17) must name a MIG profile the cluster has: one that a node reported since
 * musterd started, or that the nodes of its last run had.  The error lists them.
 */
static int slice_check(const struct musterd *d, const struct queue_spec *s, struct mu_err *err)
{
    char list[256] = "";
    size_t n = 0;
    int count = sched_cluster_profile_count(d->cluster);

    if (!s->gpu_slice[0] || sched_cluster_profile_find(d->cluster, s->gpu_slice) > 0)
        return 0;
    for (int id = 1; id <= count; id++) {
        if (mu_snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "",
                        sched_cluster_profile_name(d->cluster, id))
            != 0)
            break;
        n += strlen(list + n);
    }
    return mu_errf(err, MU_E_SPEC, "gpu_slice: no node has MIG slices of profile '%s'; %s%s",
                   s->gpu_slice, count ? "the cluster has: " : "the cluster has no MIG slices",
                   list);
}

static struct d_job *job_parse(struct musterd *d, const struct queue_entry *e)
{
    char why[512];
    struct mu_err err;
    struct d_job *j;

    if (!e->spec) {
        reject(d, e, "submission has no 'spec' field; hint: XADD muster:submit '*' spec '{...}'");
        return NULL;
    }
    if (strlen(e->spec) != e->spec_len) {
        reject(d, e, "spec: contains a NUL byte");
        return NULL;
    }
    j = d_job_alloc();
    if (!j) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s out of memory; left pending in the stream", e->id);
        return NULL;
    }
    mu_strlcpy(j->id, e->id, sizeof(j->id));
    if (queue_spec_parse(e->spec, e->spec_len, &j->spec, &err) != 0
        || queue_spec_check(&j->spec, &d->cfg, &err) != 0 || slice_check(d, &j->spec, &err) != 0) {
        reject(d, e, err.msg);
        d_job_free(j);
        return NULL;
    }
    if (d_access_submit(d, e, j, why, sizeof(why)) != 0) {
        reject(d, e, why);
        d_job_free(j);
        return NULL;
    }
    if (j->spec.array && d_array_prepare(j, e->spec, e->spec_len, &err) != 0) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s %s; left pending in the stream", e->id, err.msg);
        d_job_free(j);
        return NULL;
    }
    return j;
}

/* Whether a cancel read before j's submission stands: its sender may cancel j (d_access.h);
 * then says who in why. */
static bool early_cancel(struct musterd *d, const struct d_job *j, char *by_why, size_t size)
{
    char *by = mu_map_remove(d->early_cancels, j->id);
    struct queue_entry cancel = { .stream = QUEUE_STREAM_CONTROL };
    char why[512];
    bool stands;

    if (!by)
        return false;
    mu_strlcpy(cancel.cmd, "cancel", sizeof(cancel.cmd));
    mu_strlcpy(cancel.owner, by, sizeof(cancel.owner));
    stands = d_access_control(d, &cancel, j, why, sizeof(why)) == 0;
    (void)mu_snprintf(by_why, size, "cancelled by %s", by[0] ? by : "operator");
    if (!stands)
        mu_log(MU_LOG_INFO, "sched", "job=%s the cancel read before it is refused: %s", j->id, why);
    free(by);
    return stands;
}

void d_intake_submit(struct musterd *d, const struct queue_entry *e)
{
    struct mu_err err;
    struct d_job *j = NULL;
    struct queue_kv f[D_CHANGE_FIELDS_MAX];
    char bufs[7][32];
    int nf = 0;
    struct d_tally tally = { D_C_SUBMITTED, 0, 0 };
    struct d_change c;
    char never[400] = "";
    char unit[48] = " GPUs";
    char *after = NULL;
    char by_why[QUEUE_OWNER_MAX + 16];
    bool early;

    if (mu_map_get(d->jobs, e->id) || d_job_retired_find(d, e->id)) {
        /* Stored before a crash, ack was lost; or a new Redis primary missed the ack of a job
         * that may have ended since (written again by d_jobs_resync_all, never run twice). */
        d_stream_ack(d, e);
        return;
    }
    j = job_parse(d, e);
    if (!j || deps_take(d, e, j, &after, never, sizeof(never)) != 0 || idem_claim(d, e, j) != 0)
        goto out;
    d_job_state_load(j, QUEUE_PENDING);
    j->attempt = 1;
    j->submitted_ms = d_job_id_ms(j->id);
    if (d_job_request_build(d, j, &err) != 0) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s %s; left pending in the stream", j->id, err.msg);
        d_job_free(j);
        return;
    }
    /* An array is no job of the counters: each element counts when it is made (d_array.c). */
    tally.counter = j->array ? D_C_NONE : D_C_SUBMITTED;
    fields_of_new_job(j, e->spec, after, bufs, f, &nf);
    c = (struct d_change){ .to = QUEUE_PENDING,
                           .reason = "submitted",
                           .fields = f,
                           .nfields = nf,
                           .tally = &tally,
                           .index_ms = j->submitted_ms ? j->submitted_ms : 1,
                           .ack_entry = e->id,
                           .ack_owner = e->owner };
    if (mu_map_put(d->jobs, j->id, j, &err) != 0) {
        mu_log(MU_LOG_ERROR, "sched", "job=%s %s; left pending in the stream", j->id, err.msg);
        goto out;
    }
    if (d_record_write(d, j->id, j->attempt, &c) != 0) {
        (void)mu_map_remove(d->jobs, j->id);
        goto out; /* not acknowledged: read again once Redis is back */
    }
    if (j->spec.gpu_slice[0])
        (void)mu_snprintf(unit, sizeof(unit), " %s slices", j->spec.gpu_slice);
    else if (j->spec.gpu_milli > 0)
        (void)mu_snprintf(unit, sizeof(unit), " GPUs of %dm", j->spec.gpu_milli);
    mu_log(MU_LOG_INFO, "sched", "job=%s queued: %s%s%s%dx%d%s, queue %s, priority %lld%s%s", j->id,
           j->spec.array ? "array " : "", j->spec.array ? j->spec.array->text : "",
           j->spec.array ? ", " : "", j->spec.tasks, j->spec.gpus_per_task, unit, j->spec.queue,
           (long long)j->spec.priority, j->deps_open ? "; waits: " : "",
           j->deps_open ? j->reason : "");
    if (d_deps_start(d, j, &err) != 0 && !never[0])
        (void)mu_snprintf(never, sizeof(never), "%s", err.msg); /* cannot wait: cancelled */
    early = early_cancel(d, j, by_why, sizeof(by_why));
    if (never[0] || early) {
        const char *why = never[0] ? never : by_why;
        if ((j->array ? d_array_cancel(d, j, why) : d_job_cancel_why(d, j, why)) != 0)
            j->cancel_wanted = true; /* d_outage_recheck cancels it once Redis is back */
    }
    j = NULL; /* the job table's */
out:
    free(after);
    d_job_free(j);
}

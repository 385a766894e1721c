/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): job arrays (spec "array", issue #12).  An array is one job
 * record (its id the submission's) that is never scheduled itself: its elements are, each a
 * whole gang with the id "<array id>_<index>" and MUSTER_ARRAY_JOB_ID, MUSTER_ARRAY_INDEX and
 * the array's MUSTER_ARRAY_COUNT, _MIN, _MAX and _STEP (Slurm's SLURM_ARRAY_TASK_*) in its
 * environment.  Elements are made lazily, in index order, a window at a time: at most
 * D_ARRAY_WINDOW pending (made, not started yet) and, with "%N", at most N active (made, not
 * final).  So a 10,000-element array puts a window of jobs in front of the pass, not 10,000, and
 * the throttle costs nothing per element that cannot start: an element's start or end (noted
 * by d_job_write like any job's, see d_deps_wake) makes the next.
 *
 * Each element is stored as a job of its own (its hash holds the array's spec text, from which
 * a restart makes it again); the array's hash keeps array_next (the next position to make,
 * written after the element it counts), array_skip (indices cancelled before they were made)
 * and the counts done and failed.  The array is RUNNING from its first element's start and ends
 * once every element has ended: SUCCEEDED when all of them succeeded, else FAILED; a cancel of
 * the array cancels its elements.
 *
 * The counters (jobs_submitted and the final ones, README "Metrics") count jobs that can run:
 * an element counts as submitted when it is made (in the write that stores it) and once more
 * when it ends; the array itself counts in none of them, and an index cancelled before it was
 * made in neither, so submitted = succeeded + failed + cancelled + timeout once all have ended.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define D_ARRAY_WINDOW 256 /* elements of one array pending at once, at most */

int d_array_element_spec(struct queue_spec *s,
                         const char *array_id,
                         int64_t index,
                         struct mu_err *err)
{
    enum { NVARS = 6 };
    const struct queue_array *a = s->array;
    char **env = realloc(s->env, (size_t)(s->nenv + NVARS + 1) * sizeof(*env));
    char *vars[NVARS] = { NULL };
    size_t n = strlen(array_id) + 32;

    if (!env)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    s->env = env;
    env[s->nenv] = NULL;
    for (int i = 0; i < NVARS; i++) {
        vars[i] = malloc(n);
        if (!vars[i]) {
            for (int k = 0; k <= i; k++)
                free(vars[k]);
            return mu_errf(err, MU_E_NOMEM, "out of memory");
        }
    }
    (void)mu_snprintf(vars[0], n, "MUSTER_ARRAY_JOB_ID=%s", array_id);
    (void)mu_snprintf(vars[1], n, "MUSTER_ARRAY_INDEX=%lld", (long long)index);
    /* Slurm's SLURM_ARRAY_TASK_COUNT, _MIN, _MAX and _STEP, for every element alike. */
    (void)mu_snprintf(vars[2], n, "MUSTER_ARRAY_COUNT=%lld", (long long)(a ? a->count : 1));
    (void)mu_snprintf(vars[3], n, "MUSTER_ARRAY_MIN=%lld",
                      (long long)(a ? a->ranges[0].first : index));
    (void)mu_snprintf(vars[4], n, "MUSTER_ARRAY_MAX=%lld",
                      (long long)(a ? a->ranges[a->nranges - 1].last : index));
    (void)mu_snprintf(vars[5], n, "MUSTER_ARRAY_STEP=%d", a ? (int)a->step : 1);
    for (int i = 0; i < NVARS; i++)
        env[s->nenv++] = vars[i];
    env[s->nenv] = NULL;
    /* What belongs to the array, not to each element. */
    free(s->array);
    s->array = NULL;
    free(s->after);
    s->after = NULL;
    s->nafter = 0;
    s->singleton = false;
    s->idempotency_key[0] = '\0';
    return 0;
}

int d_array_prepare(struct d_job *j, const char *spec, size_t spec_len, struct mu_err *err)
{
    struct d_array *a = calloc(1, sizeof(*a));
    char *copy = malloc(spec_len + 1);

    if (!a || !copy) {
        free(a);
        free(copy);
        return mu_errf(err, MU_E_NOMEM, "out of memory for the array");
    }
    memcpy(copy, spec, spec_len);
    copy[spec_len] = '\0';
    a->spec = copy;
    a->spec_len = spec_len;
    j->array = a;
    return 0;
}

static bool skipped(const struct d_array *a, int64_t index)
{
    for (int i = 0; i < a->nskip; i++) {
        if (a->skip[i] == index)
            return true;
    }
    return false;
}

/* Writes the array's progress fields and its reason, recomputed from the counts now, in the
 * write that moves it to state to (D_SAME: none) with the event's reason why.  With neither a
 * state nor a why, nothing is written when the reason did not change (an element's event
 * leaves array_next as it was). */
static void progress_write_to(struct musterd *d, struct d_job *p, int to, const char *why)
{
    const struct d_array *a = p->array;
    const struct queue_array *qa = p->spec.array;
    char next[24], done[24], failed[24], nostart[24], reason[160];
    struct queue_kv f[] = { { QUEUE_F_ARRAY_NEXT, next },
                            { QUEUE_F_ARRAY_DONE, done },
                            { QUEUE_F_ARRAY_FAILED, failed },
                            { QUEUE_F_ARRAY_NOSTART, nostart },
                            { QUEUE_F_REASON, reason } };
    struct d_change c = {
        .to = to, .reason = why && why[0] ? why : NULL, .fields = f, .nfields = (int)MU_ARRAY_LEN(f)
    };
    long long ended = a->ok + a->notok;
    long long waiting = qa->count - ended - (a->active - a->pending);

    (void)mu_snprintf(next, sizeof(next), "%lld", (long long)a->next);
    (void)mu_snprintf(done, sizeof(done), "%lld", ended);
    (void)mu_snprintf(failed, sizeof(failed), "%lld", (long long)a->notok);
    (void)mu_snprintf(nostart, sizeof(nostart), "%lld", (long long)a->nostart);
    (void)mu_snprintf(reason, sizeof(reason),
                      "elements: %lld done (%lld not succeeded), %d running, %lld pending of %lld",
                      ended, (long long)a->notok, a->active - a->pending, waiting,
                      (long long)qa->count);
    if (to == D_SAME && !why && strcmp(p->reason, reason) == 0)
        return; /* an element's STARTING then RUNNING: nothing new to say */
    mu_strlcpy(p->reason, reason, sizeof(p->reason));
    if (d_job_write(d, p, &c) != 0)
        d_job_remember(d, p, &c); /* a state change wakes p's dependents either way */
}

static void progress_write(struct musterd *d, struct d_job *p)
{
    progress_write_to(d, p, D_SAME, "");
}

/* The element of p at index: stored PENDING and queued; -1 when it could not be (written later,
 * by the next fill).  err filled. */
static int element_make(struct musterd *d, struct d_job *p, int64_t index, struct mu_err *err)
{
    struct d_array *a = p->array;
    char id[QUEUE_JOB_ID_MAX];
    char bufs[8][32];
    struct d_job *j;
    struct d_tally tally = { D_C_SUBMITTED, 0, 0 }; /* the elements are the array's jobs */

    (void)mu_snprintf(id, sizeof(id), "%s_%lld", p->id, (long long)index);
    j = d_job_new(id);
    if (!j)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    if (queue_spec_parse(a->spec, a->spec_len, &j->spec, err) != 0
        || d_array_element_spec(&j->spec, p->id, index, err) != 0) {
        d_job_free(j);
        return -1;
    }
    mu_strlcpy(j->array_of, p->id, sizeof(j->array_of));
    mu_strlcpy(j->spec.user, p->spec.user, sizeof(j->spec.user)); /* as the array was judged */
    mu_strlcpy(j->owner, p->owner, sizeof(j->owner));
    j->submitted_ms = p->submitted_ms;
    if (d_job_request_build(d, j, err) != 0) {
        d_job_free(j);
        return -1;
    }
    (void)mu_snprintf(bufs[6], 32, "%lld", (long long)index);
    {
        struct queue_kv f[D_JOB_NEW_FIELDS + 2];
        int n = d_job_fields_new(j, a->spec, bufs, f);
        f[n++] = (struct queue_kv){ QUEUE_F_ARRAY_JOB, p->id };
        f[n++] = (struct queue_kv){ QUEUE_F_ARRAY_INDEX, bufs[6] };
        struct d_change c = { .to = QUEUE_PENDING,
                              .reason = "element of an array",
                              .fields = f,
                              .nfields = n,
                              .tally = &tally,
                              .index_ms = j->submitted_ms ? j->submitted_ms : 1 };
        if (mu_map_put(d->jobs, j->id, j, err) != 0) {
            d_job_free(j);
            return -1;
        }
        if (d_record_write(d, j->id, 1, &c) != 0) {
            (void)mu_map_remove(d->jobs, j->id);
            d_job_free(j);
            return mu_errf(err, MU_E_REDIS, "cannot store element %s", id);
        }
    }
    j->array_unstarted = true;
    a->active++;
    a->pending++;
    d_job_pending_add(d, j);
    return 0;
}

/* Every element ended: the array's final state. */
static void array_finish(struct musterd *d, struct d_job *p)
{
    struct d_array *a = p->array;
    char now[32], reason[160], done[24], failed[24], nostart[24];
    bool ok = a->notok == 0;
    struct queue_kv f[] = {
        { QUEUE_F_FINISHED_AT, now },          { QUEUE_F_ARRAY_DONE, done },
        { QUEUE_F_ARRAY_FAILED, failed },      { QUEUE_F_ARRAY_NOSTART, nostart },
        { QUEUE_F_ERROR, ok ? NULL : reason }, { QUEUE_F_EXIT_CODE, ok ? "0" : NULL }
    };
    struct d_change c = { .to = ok ? QUEUE_SUCCEEDED : QUEUE_FAILED,
                          .reason = reason,
                          .fields = f,
                          .nfields = (int)MU_ARRAY_LEN(f) };

    long long ended = a->ok + a->notok;

    p->finished_ms = mu_time_wall_ms();
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)p->finished_ms);
    (void)mu_snprintf(done, sizeof(done), "%lld", ended);
    (void)mu_snprintf(failed, sizeof(failed), "%lld", (long long)a->notok);
    (void)mu_snprintf(nostart, sizeof(nostart), "%lld", (long long)a->nostart);
    if (ok)
        (void)mu_snprintf(reason, sizeof(reason), "all %lld elements succeeded", (long long)a->ok);
    else
        (void)mu_snprintf(reason, sizeof(reason), "%lld of %lld elements did not succeed",
                          (long long)a->notok, ended);
    if (d_job_write(d, p, &c) != 0)
        d_job_remember(d, p, &c); /* its elements did end */
    mu_log(MU_LOG_INFO, "sched", "job=%s array %s: %s", p->id, queue_state_name(p->state), reason);
    d_job_forget(d, p);
}

void d_array_fill(struct musterd *d, struct d_job *p)
{
    struct d_array *a = p->array;
    const struct queue_array *qa = p->spec.array;
    struct mu_err err;
    int64_t made = 0;

    if (!a || !qa || p->held || p->deps_open > 0 || queue_state_is_final(p->state))
        return;
    a->fill_failed = false;
    while (a->next < qa->count && a->pending < D_ARRAY_WINDOW
           && (!qa->throttle || a->active < qa->throttle)) {
        int64_t index = queue_array_index(qa, a->next);
        if (!skipped(a, index) && element_make(d, p, index, &err) != 0) {
            mu_log_limited(MU_LOG_ERROR, "sched", "array", 5, "job=%s element %lld: %s", p->id,
                           (long long)index, err.msg);
            a->fill_failed = true;
            break;
        }
        a->next++;
        made++;
    }
    if (made)
        progress_write(d, p);
    if (a->next == qa->count && a->active == 0)
        array_finish(d, p); /* frees p */
}

void d_array_element_event(struct musterd *d, const struct d_wake *w)
{
    char base[QUEUE_JOB_ID_MAX];
    int64_t index;
    struct d_job *p;
    struct d_array *a;

    if (!queue_job_id_split(w->id, base, sizeof(base), &index))
        return;
    p = mu_map_get(d->jobs, base);
    if (!p || !p->array || queue_state_is_final(p->state))
        return; /* the array was cancelled: its elements end on their own */
    a = p->array;
    if (w->was_unstarted && a->pending > 0)
        a->pending--;
    if (queue_state_is_final(w->state)) {
        if (a->active > 0)
            a->active--;
        if (w->state == QUEUE_SUCCEEDED)
            a->ok++;
        else
            a->notok++;
        if (w->was_unstarted)
            a->nostart++;
    }
    /* Every element's start or end changes the counts in the reason (issue #43: with two
     * elements running it read "0 running"): the progress goes out with each, in the write
     * that makes the array RUNNING at the first start. */
    if ((w->state == QUEUE_STARTING || w->state == QUEUE_RUNNING) && p->state == QUEUE_PENDING) {
        progress_write_to(d, p, QUEUE_RUNNING, "its first element started");
    } else {
        progress_write_to(d, p, D_SAME, NULL);
        d_job_wake_dependents(d, p); /* its tally changed */
    }
    d_array_fill(d, p); /* may free p */
}

int d_array_cancel(struct musterd *d, struct d_job *p, const char *why)
{
    size_t pos = 0;
    struct d_job *j;
    struct d_array_tally t;

    /* Every element not ended yet ends not succeeded, and one not started never starts: the
     * tally the array's dependents judge once it is CANCELLED (its elements' own ends no longer
     * count, see d_array_element_event). */
    if (p->array) {
        d_array_tally_get(p, &t);
        p->array->notok = t.total - t.ok;
        p->array->nostart = t.total - t.started;
        p->array->active = p->array->pending = 0;
        progress_write(d, p);
    }
    /* Its elements first (each may be freed; the iteration allows removal), then itself. */
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (strcmp(j->array_of, p->id) == 0 && !queue_state_is_final(j->state)
            && d_job_cancel_why(d, j, why) != 0)
            return -1;
    }
    return d_job_cancel_why(d, p, why);
}

int d_array_cancel_unmade(struct musterd *d, const char *id, bool *found)
{
    char base[QUEUE_JOB_ID_MAX];
    int64_t index;
    int64_t pos;
    struct d_job *p;
    struct d_array *a;
    int64_t *skip;
    struct mu_buf b;
    struct mu_err err;
    char now[32];

    *found = false;
    if (!queue_job_id_split(id, base, sizeof(base), &index))
        return 0;
    p = mu_map_get(d->jobs, base);
    if (!p || !p->array || queue_state_is_final(p->state))
        return 0;
    a = p->array;
    pos = queue_array_position(p->spec.array, index);
    if (pos < a->next || skipped(a, index))
        return 0; /* made already (and ended: not active), or no such element */
    *found = true;
    skip = realloc(a->skip, (size_t)(a->nskip + 1) * sizeof(*skip));
    if (!skip)
        return -1;
    a->skip = skip;
    mu_buf_init(&b, 0);
    for (int i = 0; i <= a->nskip; i++) {
        if (mu_buf_appendf(&b, &err, "%s%lld", i ? "," : "",
                           (long long)(i < a->nskip ? a->skip[i] : index))
                != 0
            || (i == a->nskip && mu_buf_append(&b, "", 1, &err) != 0)) {
            mu_buf_release(&b);
            return -1;
        }
    }
    (void)mu_snprintf(now, sizeof(now), "%llu", (unsigned long long)mu_time_wall_ms());
    {
        /* The element's own record, so that show and dependencies find it CANCELLED. */
        struct queue_kv ef[] = { { QUEUE_F_ID, id },
                                 { QUEUE_F_ARRAY_JOB, base },
                                 { QUEUE_F_ERROR, "cancelled by operator before it started" },
                                 { QUEUE_F_FINISHED_AT, now } };
        struct d_change ec = { .to = QUEUE_CANCELLED,
                               .reason = "cancelled by operator before it started",
                               .fields = ef,
                               .nfields = (int)MU_ARRAY_LEN(ef),
                               .index_ms = p->submitted_ms ? p->submitted_ms : 1 };
        struct queue_kv f[] = { { QUEUE_F_ARRAY_SKIP, b.data } };
        struct d_change c = { .to = D_SAME, .fields = f, .nfields = 1 };
        if (d_job_write(d, p, &c) != 0 || d_record_write(d, id, 1, &ec) != 0) {
            mu_buf_release(&b);
            return -1;
        }
    }
    mu_buf_release(&b);
    a->skip[a->nskip++] = index;
    a->notok++;
    a->nostart++;
    mu_log(MU_LOG_INFO, "sched", "job=%s cancelled before it was made", id);
    progress_write(d, p);
    d_array_fill(d, p); /* may free p */
    return 0;
}

bool d_array_has_unmade(struct musterd *d, const char *id)
{
    char base[QUEUE_JOB_ID_MAX];
    int64_t index;
    const struct d_job *p;

    if (!queue_job_id_split(id, base, sizeof(base), &index))
        return false;
    p = mu_map_get(d->jobs, base);
    return p && p->array && !queue_state_is_final(p->state)
           && queue_array_position(p->spec.array, index) >= p->array->next
           && !skipped(p->array, index);
}

int d_array_skip_parse(struct d_job *p, const char *text)
{
    const char *s = text;

    while (s && *s) {
        int64_t v = 0;
        char *end = NULL;
        int64_t *skip = realloc(p->array->skip, (size_t)(p->array->nskip + 1) * sizeof(*skip));
        if (!skip)
            return -1;
        p->array->skip = skip;
        v = strtoll(s, &end, 10);
        if (end == s || v < 0)
            return -1;
        skip[p->array->nskip++] = v;
        s = *end == ',' ? end + 1 : NULL;
    }
    return 0;
}

void d_array_recover(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;

    /* Count each array's elements back, and move its cursor past any it made. */
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        char base[QUEUE_JOB_ID_MAX];
        int64_t index;
        struct d_job *p;
        if (!j->array_of[0] || !queue_job_id_split(j->id, base, sizeof(base), &index))
            continue;
        p = mu_map_get(d->jobs, base);
        if (!p || !p->array)
            continue;
        p->array->active++;
        if (j->state == QUEUE_PENDING && !j->placed && !j->adopting) {
            j->array_unstarted = true;
            p->array->pending++;
        }
        if (queue_array_position(p->spec.array, index) >= p->array->next)
            p->array->next = queue_array_position(p->spec.array, index) + 1;
    }
    /* d_deps_recover makes the next elements, once the waiters are back. */
}

void d_array_fill_all(struct musterd *d)
{
    size_t pos = 0;
    struct d_job *j;
    struct d_job **arrays = NULL;
    size_t n = 0;
    size_t cap = 0;

    /* Collected first: a fill adds elements to the job table (and may free its array). */
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->array)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
            struct d_job **p = realloc(arrays, ncap * sizeof(*p));
            if (!p)
                break;
            arrays = p;
            cap = ncap;
        }
        arrays[n++] = j;
    }
    for (size_t i = 0; i < n; i++)
        d_array_fill(d, arrays[i]);
    free(arrays);
}

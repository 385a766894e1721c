/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): dependencies between jobs (spec "after" and "singleton",
 * issue #12).  At intake each condition is resolved to a job id (an idempotency key through
 * idem:<key>) and checked: an unknown job, or the job itself, rejects the submission.  The
 * resolved list is stored in the job hash ("after": "ID:when,..."), so a restart rebuilds it
 * without the keys.  A job with conditions not met yet is PENDING but off the pending list: the
 * pass never looks at it.  Instead d_job_write notes every start and end of a job that others
 * wait for (d->waiters), and d_deps_wake, at the top of the next pass, looks at those
 * dependents only: a condition met may release the job to the pending list; one that can never
 * be met cancels it with the reason, which in turn wakes its own dependents (the cascade).
 *
 * A condition on an array asks it of every element (Slurm's rule for arrays): "ok" is met when
 * all succeeded and can never be once one did not; "notok" once all ended and at least one did
 * not succeed, never when all succeeded; "any" once all ended; "started" (Slurm's "after") once
 * none is pending any more, each started or ended.  So it is judged on the array's tally
 * (struct d_array_tally), which each element's start or end changes, not on the array's own
 * state.  "started" on a job is met by its start or its end, a cancel before it started
 * included (Slurm: the job is no longer pending), so it is never unmeetable.
 *
 * The conditions are all needed, or with "after_or" (Slurm's "?") any one is enough: the job
 * is released by the first met and can never be released once every one can never be met.  A
 * job that can never be released is cancelled with the reason (and its dependents in turn), or,
 * with the config's "dependency_never_met": "pend" (Slurm's default), left PENDING with the
 * reason until someone cancels it.
 *
 * Invariant: a job with deps_open > 0 is in d->waiters under every id it still waits for.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

enum dep_verdict { DEP_WAIT, DEP_MET, DEP_NEVER };

/* What a condition looks at: a job's state, or an array's tally. */
struct dep_target {
    enum queue_state state;
    bool started; /* it had started an attempt */
    bool array;
    struct d_array_tally tally; /* when array */
};

/* What state st of the job waited for means for condition w. */
static enum dep_verdict dep_verdict(enum queue_when w, enum queue_state st)
{
    bool final = queue_state_is_final(st);

    switch (w) {
    case QUEUE_WHEN_OK:
        return st == QUEUE_SUCCEEDED ? DEP_MET : final ? DEP_NEVER : DEP_WAIT;
    case QUEUE_WHEN_NOTOK:
        return st == QUEUE_SUCCEEDED ? DEP_NEVER : final ? DEP_MET : DEP_WAIT;
    case QUEUE_WHEN_ANY:
        return final ? DEP_MET : DEP_WAIT;
    case QUEUE_WHEN_STARTED: /* Slurm's "after": no longer pending, however it left */
        return st == QUEUE_STARTING || st == QUEUE_RUNNING || st == QUEUE_PREEMPTING || final
                   ? DEP_MET
                   : DEP_WAIT;
    }
    return DEP_NEVER;
}

/* Condition w on an array whose elements are tallied in t, as Slurm judges an array. */
static enum dep_verdict array_verdict(enum queue_when w, const struct d_array_tally *t)
{
    bool ended = t->ok + t->notok >= t->total;

    switch (w) {
    case QUEUE_WHEN_OK:
        return t->notok > 0 ? DEP_NEVER : t->ok == t->total ? DEP_MET : DEP_WAIT;
    case QUEUE_WHEN_NOTOK:
        return !ended ? DEP_WAIT : t->notok > 0 ? DEP_MET : DEP_NEVER;
    case QUEUE_WHEN_ANY:
        return ended ? DEP_MET : DEP_WAIT;
    case QUEUE_WHEN_STARTED:
        return t->started + t->nostart >= t->total ? DEP_MET : DEP_WAIT;
    }
    return DEP_NEVER;
}

/* "succeeds", "fails", "ends", "starts": the condition as a reason says it. */
static const char *when_verb(enum queue_when w)
{
    static const char *const verbs[] = { "succeeds", "fails", "ends", "starts" };
    return (unsigned)w < MU_ARRAY_LEN(verbs) ? verbs[w] : "?";
}

void d_deps_reason(const struct d_job *j, char *buf, size_t size)
{
    const struct d_dep *first = NULL;
    int open = 0;

    for (int i = 0; i < j->ndeps; i++) {
        if (j->deps[i].met || j->deps[i].never)
            continue;
        open++;
        if (!first)
            first = &j->deps[i];
    }
    if (!first) {
        (void)mu_snprintf(buf, size, "waiting for the scheduler");
        return;
    }
    if (open > 1)
        (void)mu_snprintf(buf, size, "after %s %s (%s %d more condition%s)", first->id,
                          when_verb(first->when), j->deps_or ? "or" : "and", open - 1,
                          open > 2 ? "s" : "");
    else
        (void)mu_snprintf(buf, size, "after %s %s", first->id, when_verb(first->when));
}

/* Adds dep to j's list (grown as needed); 0 or -1 without memory. */
static int dep_add(struct d_job *j, const char *id, enum queue_when when, struct mu_err *err)
{
    struct d_dep *p = realloc(j->deps, (size_t)(j->ndeps + 1) * sizeof(*p));
    if (!p)
        return mu_errf(err, MU_E_NOMEM, "out of memory for the job's dependencies");
    j->deps = p;
    memset(&p[j->ndeps], 0, sizeof(*p));
    mu_strlcpy(p[j->ndeps].id, id, sizeof(p[0].id));
    p[j->ndeps].when = when;
    j->ndeps++;
    return 0;
}

/* Puts j in the waiters of id; 0 or -1 without memory. */
static int waiter_add(struct musterd *d, const char *id, const char *dependent, struct mu_err *err)
{
    struct d_waiters *w = mu_map_get(d->waiters, id);

    if (!w) {
        w = calloc(1, sizeof(*w));
        if (!w || mu_map_put(d->waiters, id, w, err) != 0) {
            free(w);
            return mu_errf(err, MU_E_NOMEM, "out of memory for the job's dependencies");
        }
    }
    for (int i = 0; i < w->n; i++) {
        if (strcmp(w->ids[i], dependent) == 0)
            return 0; /* two conditions on one job */
    }
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 4;
        char(*p)[QUEUE_JOB_ID_MAX] = realloc(w->ids, (size_t)cap * sizeof(*p));
        if (!p)
            return mu_errf(err, MU_E_NOMEM, "out of memory for the job's dependencies");
        w->ids = p;
        w->cap = cap;
    }
    mu_strlcpy(w->ids[w->n++], dependent, sizeof(w->ids[0]));
    return 0;
}

static void waiters_drop(struct musterd *d, const char *id)
{
    struct d_waiters *w = mu_map_remove(d->waiters, id);
    if (w) {
        free(w->ids);
        free(w);
    }
}

/* The job id now: from memory when it is active, else from its stored hash.  *found false
 * when there is no such job.  -1 on a Redis error. */
static int target_of(
    struct musterd *d, const char *id, struct dep_target *t, bool *found, struct mu_err *err)
{
    const struct d_job *o = mu_map_get(d->jobs, id);
    struct queue_job_brief b;

    memset(t, 0, sizeof(*t));
    if (o || d_array_has_unmade(d, id)) { /* an element not made yet is pending */
        t->state = o ? o->state : QUEUE_PENDING;
        t->started = o && o->started_ms != 0;
        t->array = o && o->array;
        if (t->array)
            d_array_tally_get(o, &t->tally);
        *found = true;
        return 0;
    }
    if (d->store.ops->job_state(d->store.ctx, id, &b, found, err) != 0)
        return -1;
    t->state = b.state;
    t->started = b.started;
    t->array = b.array && queue_state_is_final(b.state); /* an active one is in memory */
    if (t->array) { /* every element ended: array_done counts them all */
        t->tally.total = b.array_done;
        t->tally.ok = b.array_done - b.array_failed;
        t->tally.notok = b.array_failed;
        t->tally.nostart = b.array_nostart;
        t->tally.started = b.array_done - b.array_nostart;
    }
    return 0;
}

/* Why condition dep of j can never be met by t, in why. */
static void never_why(const struct d_job *j,
                      const struct d_dep *dep,
                      const struct dep_target *t,
                      char *why,
                      size_t size)
{
    const struct d_array_tally *a = &t->tally;
    size_t n;
    char *p;
    size_t left;

    if (j->deps_or && j->ndeps > 1)
        (void)mu_snprintf(why, size,
                          "dependency never met: none of its %d alternatives can be, the last: "
                          "after %s %s, but ",
                          j->ndeps, dep->id, when_verb(dep->when));
    else
        (void)mu_snprintf(why, size, "dependency never met: after %s %s, but ", dep->id,
                          when_verb(dep->when));
    n = strlen(why);
    p = why + n;
    left = size - n;

    if (t->array && dep->when == QUEUE_WHEN_OK)
        (void)mu_snprintf(p, left, "%lld of its %lld elements did not succeed", (long long)a->notok,
                          (long long)a->total);
    else if (t->array)
        (void)mu_snprintf(p, left, "all %lld of its elements succeeded", (long long)a->total);
    else if (t->state == QUEUE_CANCELLED && !t->started)
        (void)mu_snprintf(p, left, "it was cancelled before it started");
    else
        (void)mu_snprintf(p, left, "it ended %s", queue_state_name(t->state));
}

/* Condition i of j, from the job (or array) it names: met (counted: with after_or, j's
 * conditions are then all met), or never (marked, why filled).  Returns the verdict. */
static enum dep_verdict dep_judge(
    struct d_job *j, int i, const struct dep_target *t, char *why, size_t size)
{
    struct d_dep *dep = &j->deps[i];
    enum dep_verdict v = dep->met   ? DEP_MET
                         : t->array ? array_verdict(dep->when, &t->tally)
                                    : dep_verdict(dep->when, t->state);

    if (v == DEP_MET && !dep->met) {
        dep->met = true;
        j->deps_open = j->deps_or ? 0 : j->deps_open - 1;
    } else if (v == DEP_NEVER) {
        dep->never = true;
        never_why(j, dep, t, why, size);
    }
    return v;
}

/* j's conditions together: met (none open), never (one can never be met; with after_or,
 * every one), else wait. */
static enum dep_verdict job_verdict(const struct d_job *j)
{
    int never = 0;

    if (j->deps_open == 0)
        return DEP_MET;
    for (int i = 0; i < j->ndeps; i++)
        never += j->deps[i].never;
    if (j->deps_or)
        return never == j->ndeps ? DEP_NEVER : DEP_WAIT;
    return never > 0 ? DEP_NEVER : DEP_WAIT;
}

/* j can never be released: cancelled with why (and its dependents after it), or with the
 * config's "dependency_never_met": "pend", left PENDING with why as its reason.  -1 when the
 * cancel could not be written (Redis down); j may be freed. */
static int deps_never(struct musterd *d, struct d_job *j, const char *why)
{
    struct queue_kv f[] = { { QUEUE_F_REASON, j->reason } };
    struct d_change c = { .to = D_SAME, .fields = f, .nfields = 1 };

    if (d->cfg.never_met != CFG_NEVER_MET_PEND)
        return d_job_cancel_why(d, j, why);
    if (strncmp(j->reason, why, sizeof(j->reason) - 1) == 0)
        return 0; /* said already */
    mu_strlcpy(j->reason, why, sizeof(j->reason));
    if (d_job_write(d, j, &c) != 0)
        d_job_remember(d, j, &c); /* the reason goes out with the job's next write */
    mu_log(MU_LOG_INFO, "sched", "job=%s stays pending: %s", j->id, why);
    return 0;
}

char *d_deps_format(const struct d_job *j)
{
    struct mu_buf b;
    struct mu_err err;
    mu_buf_init(&b, 0);
    for (int i = 0; i < j->ndeps; i++) {
        if (mu_buf_appendf(&b, &err, "%s%s:%s", i ? (j->deps_or ? "?" : ",") : "", j->deps[i].id,
                           queue_when_name(j->deps[i].when))
            != 0) {
            mu_buf_release(&b);
            return NULL;
        }
    }
    if (mu_buf_append(&b, "", 1, &err) != 0) {
        mu_buf_release(&b);
        return NULL;
    }
    return b.data;
}

/* The singleton rule as conditions: j waits for every active job of its name and user to end.
 * queue_spec_parse refuses a singleton without a name, so clients refuse it at submit time. */
static int singleton_deps(struct musterd *d, struct d_job *j, struct mu_err *err)
{
    size_t pos = 0;
    const struct d_job *o;

    while ((o = mu_map_next(d->jobs, &pos)) != NULL) {
        if (o != j && !queue_state_is_final(o->state) && strcmp(o->spec.name, j->spec.name) == 0
            && strcmp(o->spec.user, j->spec.user) == 0
            && dep_add(j, o->id, QUEUE_WHEN_ANY, err) != 0)
            return -1;
    }
    return 0;
}

/* Resolves condition i of j's spec to a job id in id (size QUEUE_JOB_ID_MAX).  MU_E_SPEC for
 * an unknown key or the job itself, MU_E_REDIS when the lookup failed. */
static int resolve_ref(
    struct musterd *d, const struct d_job *j, int i, char *id, struct mu_err *err)
{
    const struct queue_after *a = &j->spec.after[i];
    char key[D_IDEM_KEY_MAX];
    bool found = false;

    if (!a->by_key) {
        if (strcmp(a->ref, j->id) == 0)
            return mu_errf(err, MU_E_SPEC, "after[%d].job: '%s' is this job itself", i, a->ref);
        mu_strlcpy(id, a->ref, QUEUE_JOB_ID_MAX);
        return 0;
    }
    if (strcmp(a->ref, j->spec.idempotency_key) == 0)
        return mu_errf(err, MU_E_SPEC, "after[%d].key: '%s' is this job's own idempotency key", i,
                       a->ref);
    d_idem_key(j->owner, a->ref, key, sizeof(key)); /* among its writer's own keys */
    if (d->store.ops->idem_get(d->store.ctx, key, id, QUEUE_JOB_ID_MAX, &found, err) != 0)
        return -1;
    if (!found)
        return mu_errf(err, MU_E_SPEC,
                       "after[%d].key: no job has idempotency key '%s'; hint: submit the job it "
                       "names first",
                       i, a->ref);
    if (strcmp(id, j->id) == 0)
        return mu_errf(err, MU_E_SPEC, "after[%d].key: '%s' names this job itself", i, a->ref);
    return 0;
}

int d_deps_resolve(
    struct musterd *d, struct d_job *j, char *never, size_t never_size, struct mu_err *err)
{
    char why[400] = "";

    never[0] = '\0';
    for (int i = 0; i < j->spec.nafter; i++) {
        char id[QUEUE_JOB_ID_MAX];
        if (resolve_ref(d, j, i, id, err) != 0 || dep_add(j, id, j->spec.after[i].when, err) != 0)
            return -1;
    }
    if (j->spec.singleton && singleton_deps(d, j, err) != 0)
        return -1;
    j->deps_or = j->spec.after_or && j->ndeps > 0;
    j->deps_open = j->ndeps;
    for (int i = 0; i < j->ndeps; i++) {
        struct dep_target t;
        bool found = false;
        if (target_of(d, j->deps[i].id, &t, &found, err) != 0)
            return -1;
        if (!found) /* the singleton's jobs are active: an unknown one is an after[i] */
            return mu_errf(err, MU_E_SPEC,
                           "after[%d]: unknown job '%s'; hint: musterctl jobs --all lists them (a "
                           "finished job leaves Redis keep_finished_s after it ended)",
                           i, j->deps[i].id);
        (void)dep_judge(j, i, &t, why, sizeof(why));
    }
    if (job_verdict(j) != DEP_NEVER) {
        if (j->deps_open > 0)
            d_deps_reason(j, j->reason, sizeof(j->reason));
    } else if (d->cfg.never_met == CFG_NEVER_MET_PEND) {
        mu_strlcpy(j->reason, why, sizeof(j->reason)); /* stored PENDING with it */
    } else {
        mu_strlcpy(never, why, never_size); /* stored, then cancelled with this reason */
    }
    return 0;
}

/* j's open conditions in the waiters; -1 without memory. */
static int deps_register(struct musterd *d, struct d_job *j, struct mu_err *err)
{
    for (int i = 0; i < j->ndeps; i++) {
        if (!j->deps[i].met && waiter_add(d, j->deps[i].id, j->id, err) != 0)
            return -1;
    }
    return 0;
}

/* Every condition met: the job joins the pending list (QUEUE_F_AFTER_MET stored, so a restart does
 * not look at its conditions again). */
static void deps_release(struct musterd *d, struct d_job *j, bool fill)
{
    struct queue_kv f[] = { { QUEUE_F_AFTER_MET, "1" }, { QUEUE_F_REASON, "dependencies met" } };
    struct d_change c = { .to = D_SAME, .fields = f, .nfields = 2 };
    if (d_job_write(d, j, &c) != 0)
        d_job_remember(d, j, &c); /* the conditions are met in memory; a restart judges again */
    mu_strlcpy(j->reason, "dependencies met", sizeof(j->reason));
    mu_log(MU_LOG_INFO, "sched", "job=%s dependencies met, queued", j->id);
    if (!j->array)
        d_job_pending_add(d, j);
    else if (fill)
        d_array_fill(d, j); /* may free j */
}

int d_deps_start(struct musterd *d, struct d_job *j, struct mu_err *err)
{
    if (j->deps_open == 0) {
        if (j->array)
            d_array_fill(d, j); /* an array is never queued itself: its elements are */
        else
            d_job_pending_add(d, j);
        return 0;
    }
    return deps_register(d, j, err);
}

/* Looks at the jobs waiting for wake->id.  -1 when a cancel could not be written (Redis down):
 * the wake stays to be looked at again. */
static int wake_one(struct musterd *d, const struct d_wake *wake)
{
    struct d_waiters *w;
    struct dep_target t = {
        .state = wake->state, .started = wake->started, .array = wake->array, .tally = wake->tally
    };

    if (wake->element)
        d_array_element_event(d, wake);
    w = mu_map_get(d->waiters, wake->id);

    for (int k = 0; w && k < w->n; k++) {
        struct d_job *j = mu_map_get(d->jobs, w->ids[k]);
        bool judged_never = false;
        enum dep_verdict v;
        char why[400];
        if (!j || j->deps_open == 0 || queue_state_is_final(j->state))
            continue;
        for (int i = 0; i < j->ndeps; i++) {
            if (strcmp(j->deps[i].id, wake->id) == 0 && !j->deps[i].never)
                judged_never |= dep_judge(j, i, &t, why, sizeof(why)) == DEP_NEVER;
        }
        v = job_verdict(j);
        if (v == DEP_NEVER) {
            if (judged_never && deps_never(d, j, why) != 0)
                return -1; /* may free j */
            continue;      /* pending with the reason said when it became never */
        }
        if (v == DEP_MET) {
            deps_release(d, j, true);
        } else {
            struct queue_kv f[] = { { QUEUE_F_REASON, j->reason } };
            struct d_change c = { .to = D_SAME, .fields = f, .nfields = 1 };
            d_deps_reason(j, j->reason, sizeof(j->reason));
            if (d_job_write(d, j, &c) != 0)
                d_job_remember(d, j, &c); /* the reason goes out with the job's next write */
        }
    }
    if (queue_state_is_final(wake->state))
        waiters_drop(d, wake->id);
    return 0;
}

void d_deps_wake(struct musterd *d)
{
    int done = 0;

    if (d->nwoken == 0)
        return; /* the common case (and woken may be NULL) */
    /* A cancel below may append wakes (the cascade): the loop reaches them too. */
    while (done < d->nwoken) {
        struct d_wake wake = d->woken[done];
        if (wake_one(d, &wake) != 0)
            break;
        done++;
    }
    memmove(d->woken, d->woken + done, (size_t)(d->nwoken - done) * sizeof(*d->woken));
    d->nwoken -= done;
}

int d_deps_parse(struct d_job *j, const char *text, struct mu_err *err)
{
    const char *p = text[0] ? text : NULL;    /* "" is no condition; an empty item is an error */
    char sep = strchr(text, '?') ? '?' : ','; /* Slurm's "?" (any one) or "," (all) */

    if (sep == '?' && strchr(text, ','))
        return mu_errf(err, MU_E_PARSE, "after: both ',' and '?' in '%.60s'", text);
    j->deps_or = sep == '?';
    while (p) {
        const char *comma = strchr(p, sep);
        const char *colon = strchr(p, ':');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char id[QUEUE_JOB_ID_MAX];
        char when_text[16];
        enum queue_when when;
        if (!colon || (comma && colon > comma) || (size_t)(colon - p) >= sizeof(id)
            || n - (size_t)(colon - p) - 1 >= sizeof(when_text))
            return mu_errf(err, MU_E_PARSE, "after: unreadable '%.60s'", p);
        memcpy(id, p, (size_t)(colon - p));
        id[colon - p] = '\0';
        memcpy(when_text, colon + 1, n - (size_t)(colon - p) - 1);
        when_text[n - (size_t)(colon - p) - 1] = '\0';
        if (!queue_job_id_is_valid(id) || queue_when_parse(when_text, &when) != 0)
            return mu_errf(err, MU_E_PARSE, "after: unreadable '%.60s'", p);
        if (dep_add(j, id, when, err) != 0)
            return -1;
        p = comma ? comma + 1 : NULL;
    }
    j->deps_open = j->ndeps;
    return 0;
}

/*
 * After a restart: every recovered job that waits (deps_open > 0) is registered, then judged
 * against the states now (of active jobs in memory, of the others in Redis).  One whose
 * conditions are all met joins the pending list; one that can never be met is cancelled.
 */
int d_deps_recover(struct musterd *d, struct mu_err *err)
{
    size_t pos = 0;
    struct d_job *j;
    int waiting = 0;

    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (j->deps_open > 0 && deps_register(d, j, err) != 0)
            return -1;
    }
    pos = 0;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        char why[400] = "";
        enum dep_verdict v;
        if (j->deps_open == 0 || queue_state_is_final(j->state))
            continue;
        for (int i = 0; i < j->ndeps; i++) {
            struct dep_target t;
            bool found = false;
            if (j->deps[i].met)
                continue;
            if (target_of(d, j->deps[i].id, &t, &found, err) != 0)
                return -1;
            if (found) {
                (void)dep_judge(j, i, &t, why, sizeof(why));
            } else {
                (void)mu_snprintf(why, sizeof(why), "dependency never met: job %s is gone",
                                  j->deps[i].id);
                j->deps[i].never = true;
            }
            if (j->deps_open == 0)
                break; /* with after_or, one met is enough */
        }
        v = job_verdict(j);
        if (v == DEP_NEVER) {
            if (deps_never(d, j, why) != 0) /* may free j; iteration allows removal */
                return mu_errf(err, MU_E_REDIS, "job %s: cannot cancel it", j->id);
            waiting += d->cfg.never_met == CFG_NEVER_MET_PEND;
        } else if (v == DEP_MET) {
            deps_release(d, j, false); /* an array fills below: not while iterating */
        } else {
            waiting++;
        }
    }
    if (waiting)
        mu_log(MU_LOG_INFO, "sched", "%d job(s) wait for other jobs", waiting);
    d_array_fill_all(d);
    return 0;
}

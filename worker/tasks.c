/* SPDX-License-Identifier: MIT */
/*
 * The agent's task table: one entry per task it runs, and per task that ended and that the
 * scheduler has not acknowledged yet (docs/design.md §7).  Exited tasks stay here (and in every
 * HELLO) until the scheduler's KILL acknowledges them, which it sends once the attempt's outcome is
 * stored, so an exit is never lost; beyond WRK_MAX_EXITED the oldest are evicted, at the end of a
 * turn so that no loop sees entries move.  An entry embeds the task's record (struct
 * wrk_taskrec), the one copy of what its shim wrote to <run-dir>/tasks; the record files go
 * with the entry once the task has ended.
 */
#include "worker/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static bool ref_matches(const struct proto_task_ref *a, const struct proto_task_ref *b)
{
    return a->task == b->task && a->attempt == b->attempt && strcmp(a->job, b->job) == 0;
}

struct wrk_task *wrk_task_find(struct wrk_agent *a, const struct proto_task_ref *ref)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (ref_matches(&a->tasks[i].rec.ref, ref))
            return &a->tasks[i];
    }
    return NULL;
}

struct wrk_task *wrk_task_find_shim(struct wrk_agent *a, pid_t pid)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING && a->tasks[i].rec.shim_pid == (int)pid)
            return &a->tasks[i];
    }
    return NULL;
}

/* "<state>/tasks/<job>.<attempt>.<task><suffix>"; the job id was checked at BIND or load. */
void wrk_task_file(const struct wrk_agent *a,
                   const struct proto_task_ref *ref,
                   const char *suffix,
                   char *buf,
                   size_t size)
{
    if (wrk_task_path(a->run_dir, "tasks", ref->job, ref->attempt, ref->task, suffix, buf, size,
                      NULL)
        != 0)
        buf[0] = '\0';
}

void wrk_task_remove(struct wrk_agent *a, struct wrk_task *t)
{
    int i = (int)(t - a->tasks);
    struct mu_err err;

    /* Ended and acknowledged: the scheduler has its exit, nobody needs the files again. */
    if (t->rec.ref.state != PROTO_TASK_RUNNING
        && wrk_taskrec_remove(a->run_dir, &t->rec.ref, &err) != 0)
        wrk_task_log(MU_LOG_WARN, &t->rec.ref, err.msg);
    free(t->ckpt_last);
    t->ckpt_last = NULL;
    free(t->ckpt_missing);
    t->ckpt_missing = NULL;
    if (t->rec.ref.state == PROTO_TASK_RUNNING)
        a->nrunning--;
    else
        a->nexited--;
    a->tasks[i] = a->tasks[a->ntasks - 1];
    a->ntasks--;
}

struct wrk_task *wrk_task_add(struct wrk_agent *a, struct mu_err *err)
{
    if (a->ntasks == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        struct wrk_task *t = realloc(a->tasks, (size_t)cap * sizeof(*t));
        if (!t) {
            mu_errf(err, MU_E_NOMEM, "out of memory for the task table");
            return NULL;
        }
        a->tasks = t;
        a->cap = cap;
    }
    memset(&a->tasks[a->ntasks], 0, sizeof(a->tasks[0]));
    return &a->tasks[a->ntasks++];
}

void wrk_tasks_evict(struct wrk_agent *a)
{
    while (a->nexited > WRK_MAX_EXITED) {
        struct wrk_task *oldest = NULL;
        for (int i = 0; i < a->ntasks; i++) {
            struct wrk_task *t = &a->tasks[i];
            if (t->rec.ref.state != PROTO_TASK_RUNNING
                && (!oldest || t->exit_order < oldest->exit_order))
                oldest = t;
        }
        if (!oldest)
            return; /* cannot happen: nexited counts the EXITED entries */
        mu_log(MU_LOG_WARN, WRK_MOD,
               "job=%s task=%d attempt=%d forgotten: more than %d exited tasks",
               oldest->rec.ref.job, oldest->rec.ref.task, oldest->rec.ref.attempt, WRK_MAX_EXITED);
        wrk_task_remove(a, oldest);
    }
}

void wrk_task_log(enum mu_log_level level, const struct proto_task_ref *ref, const char *what)
{
    mu_log(level, WRK_MOD, "job=%s task=%d attempt=%d %s", ref->job, ref->task, ref->attempt, what);
}

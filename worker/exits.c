/* SPDX-License-Identifier: MIT */
/*
 * How the agent learns that tasks ended (docs/design.md §5 "worker crash or restart", issue #5).
 * Each task runs under a muster-shim (shim.c) in its own session, which records the task in
 * <run-dir>/tasks/<job>.<attempt>.<task>.json and its true exit status in .exit.  The worker
 * learns exits from those files (inotify on tasks/, a reaped shim, and a 1 s sweep that also
 * notices a shim gone without one: most shims are not the worker's children), never from a
 * shim's own status.  On start it reads the records back: an exit file means EXITED, a live
 * shim (its pid and start time in /proc/PID/stat) is re-adopted as RUNNING, anything else is
 * LOST; all go out in the first HELLO.
 *
 * An exit stays in the table until the scheduler acknowledges it with a KILL (tasks.c); a
 * TASK_STATUS can be lost on the way (a scheduler restarted with it in a socket buffer), so an
 * unacknowledged exit is repeated, 2 s then doubling up to 60 s.  Entries never move here: an
 * ended task is only marked, and eviction waits for the end of the turn.
 */
#include "worker/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu_banned.h"

/* t ended with x: report it.  Entries do not move (eviction waits for the end of the turn). */
static void task_finish(struct wrk_agent *a, struct wrk_task *t, const struct wrk_taskexit *x)
{
    /* A checkpoint written just before the exit goes out before the exit itself. */
    wrk_ckpt_check(a, t);

    t->rec.ref.state = PROTO_TASK_EXITED;
    t->rec.ref.exit_code = x->signal ? 0 : x->exit_code;
    t->rec.ref.signal = x->signal;
    /* However it ended, its shim stopped it (fenced): not the task's failure. */
    t->rec.ref.fenced = x->fenced;
    /* Its memory cgroup saw the OOM killer: the scheduler's reason says so. */
    t->rec.ref.oom_killed = x->oom_killed;
    /* Ended while a clean stop of the worker stopped the tasks: the node's doing, not its. */
    t->rec.ref.stopped = a->stopping && !x->fenced;
    t->exit_order = ++a->exit_counter;
    t->kill_at_ms = 0;
    t->resend_gap_ms = WRK_RESEND_FIRST_MS;
    t->resend_at_ms = mu_time_mono_ms() + WRK_RESEND_FIRST_MS;
    a->nrunning--;
    a->nexited++;
    if (t->rec.ref.signal)
        mu_log(MU_LOG_INFO, WRK_MOD, "job=%s task=%d attempt=%d killed by %s pid=%d",
               t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt,
               mu_signal_name(t->rec.ref.signal), t->rec.ref.pid);
    else
        mu_log(MU_LOG_INFO, WRK_MOD, "job=%s task=%d attempt=%d exited code=%d pid=%d",
               t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt, t->rec.ref.exit_code,
               t->rec.ref.pid);
    if (x->oom_killed)
        mu_log(MU_LOG_INFO, WRK_MOD,
               "job=%s task=%d attempt=%d the OOM killer killed a process of it (its memory "
               "cgroup's limit, memory_mb_per_task)",
               t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt);
    if (!a->loading)
        wrk_send_task_status(a, &t->rec.ref);
}

/* t's shim is gone without an exit file: nobody knows how the task ended. */
static void task_lost(struct wrk_agent *a, struct wrk_task *t, const char *why)
{
    t->rec.ref.state = PROTO_TASK_LOST;
    t->rec.ref.exit_code = 0;
    t->rec.ref.signal = 0;
    t->exit_order = ++a->exit_counter;
    t->kill_at_ms = 0;
    a->nrunning--;
    a->nexited++;
    mu_log(MU_LOG_WARN, WRK_MOD,
           "job=%s task=%d attempt=%d lost: %s (its process group %d may remain)", t->rec.ref.job,
           t->rec.ref.task, t->rec.ref.attempt, why, t->rec.ref.pid);
    if (!a->loading)
        wrk_send_task_status(a, &t->rec.ref);
}

/*
 * Reads running task t's exit file: true when t ended (EXITED, or LOST for an unreadable file;
 * with shim_gone, no file at all is LOST too).
 */
static bool exit_file_check(struct wrk_agent *a, struct wrk_task *t, bool shim_gone)
{
    char path[PROTO_PATH_MAX + 16];
    struct wrk_taskexit x;
    struct mu_err err;
    int r;

    wrk_task_file(a, &t->rec.ref, WRK_TASKEXIT_SUFFIX, path, sizeof(path));
    mu_err_clear(&err);
    r = wrk_taskexit_read(path, &x, &err);
    if (r == 1) {
        task_finish(a, t, &x);
        return true;
    }
    if (r < 0) {
        char why[384];
        (void)mu_snprintf(why, sizeof(why), "unreadable exit file: %s", err.msg);
        task_lost(a, t, why);
        return true;
    }
    if (shim_gone) {
        char why[128];
        (void)mu_snprintf(why, sizeof(why),
                          "its supervisor (pid %d) ended without recording an exit",
                          t->rec.shim_pid);
        task_lost(a, t, why);
        return true;
    }
    return false;
}

/*
 * Looks for running task t's exit file.  shim_gone: its shim is known to have ended (reaped);
 * otherwise it is looked up in /proc (most shims are not the worker's children: forked by the
 * shim server, or re-adopted).  Returns true when t is no longer running.
 */
bool wrk_exit_check(struct wrk_agent *a, struct wrk_task *t, bool shim_gone)
{
    char base[PROTO_PATH_MAX + 16];

    if (t->rec.ref.state != PROTO_TASK_RUNNING)
        return true;
    if (exit_file_check(a, t, shim_gone))
        return true;
    wrk_task_file(a, &t->rec.ref, "", base, sizeof(base));
    if (wrk_shim_is_running(t->rec.shim_pid, t->rec.shim_start, base))
        return false;
    return exit_file_check(a, t, true); /* it may have written just before leaving */
}

void wrk_exits_scan(struct wrk_agent *a)
{
    a->exit_poll_ms = mu_time_mono_ms();
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING)
            (void)wrk_exit_check(a, &a->tasks[i], false);
    }
}

void wrk_exits_read(struct wrk_agent *a)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING)
            (void)exit_file_check(a, &a->tasks[i], false);
    }
}

/* Reaps our shims; each reaped one's exit file is read at once. */
void wrk_exits_reap(struct wrk_agent *a)
{
    for (;;) {
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        struct wrk_task *t;
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        if (pid == a->shim_server.pid) {
            wrk_agent_shim_server_reaped(a, status);
            continue;
        }
        t = wrk_task_find_shim(a, pid);
        if (t)
            (void)wrk_exit_check(a, t, true);
    }
}

/*
 * Exits stay here until the scheduler acknowledges them (a KILL), which it does once the
 * attempt's outcome is stored.  A TASK_STATUS can be lost on the way (the scheduler restarted
 * with it in a socket buffer, or was waiting for Redis): say it again, less and less often.
 */
void wrk_exits_resend(struct wrk_agent *a, uint64_t now)
{
    if (a->quiet)
        return; /* the scheduler is away: the next HELLO carries them */
    for (int i = 0; i < a->ntasks; i++) {
        struct wrk_task *t = &a->tasks[i];
        if (t->rec.ref.state != PROTO_TASK_EXITED || now < t->resend_at_ms)
            continue;
        wrk_task_log(MU_LOG_DEBUG, &t->rec.ref, "exit not acknowledged yet: reporting it again");
        wrk_send_task_status(a, &t->rec.ref);
        t->resend_gap_ms =
            t->resend_gap_ms * 2 > WRK_RESEND_MAX_MS ? WRK_RESEND_MAX_MS : t->resend_gap_ms * 2;
        t->resend_at_ms = now + t->resend_gap_ms;
    }
}

static bool has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name);
    size_t k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Adopts one record file (name "<job>.<attempt>.<task>.json" in dir). */
static void adopt_one(struct wrk_agent *a, const char *dir, const char *name)
{
    char path[PROTO_PATH_MAX + 300];
    char want[PROTO_JOB_MAX + 32];
    char base[PROTO_PATH_MAX + 300];
    struct wrk_taskrec rec;
    struct wrk_taskexit x;
    struct mu_err err;
    struct wrk_task *t;
    int r;

    (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, name);
    mu_err_clear(&err);
    r = wrk_taskrec_read(path, &rec, &err);
    if (r <= 0) {
        if (r < 0)
            mu_log(MU_LOG_WARN, WRK_MOD, "node=%s ignoring a task record: %s", a->node, err.msg);
        return;
    }
    (void)mu_snprintf(want, sizeof(want), "%s.%d.%d" WRK_TASKREC_SUFFIX, rec.ref.job,
                      rec.ref.attempt, rec.ref.task);
    if (strcmp(want, name) != 0) {
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s ignoring task record '%s': it describes '%s'",
               a->node, path, want);
        return;
    }
    if (wrk_task_find(a, &rec.ref))
        return;
    t = wrk_task_add(a, &err);
    if (!t) {
        mu_log(MU_LOG_ERROR, WRK_MOD, "node=%s cannot re-adopt '%s': %s", a->node, path, err.msg);
        return;
    }
    t->rec = rec; /* wrk_taskrec_parse made it RUNNING */
    a->nrunning++;
    wrk_task_file(a, &t->rec.ref, "", base, sizeof(base));
    wrk_task_file(a, &t->rec.ref, WRK_TASKEXIT_SUFFIX, path, sizeof(path));
    r = wrk_taskexit_read(path, &x, &err);
    if (r == 0 && wrk_shim_is_running(t->rec.shim_pid, t->rec.shim_start, base)) {
        mu_log(MU_LOG_INFO, WRK_MOD,
               "job=%s task=%d attempt=%d re-adopted: still running, pid=%d shim=%d",
               t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt, t->rec.ref.pid,
               t->rec.shim_pid);
        return;
    }
    if (r == 1)
        mu_log(MU_LOG_INFO, WRK_MOD, "job=%s task=%d attempt=%d ended while the worker was away",
               t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt);
    /* Ended (or lost): wrk_exit_check records it; the scheduler hears it in the first HELLO. */
    (void)wrk_exit_check(a, t, true);
}

/*
 * Records left in <state>/tasks by a worker whose run directory was the state directory: their
 * shims map that directory's lease, which nobody renews now, so they stop their tasks when it runs
 * out.  Said once at start, with how to keep them.
 */
static void old_records_warn(const struct wrk_agent *a)
{
    char dir[PROTO_PATH_MAX + 8];
    struct dirent *de;
    int n = 0;
    DIR *d;

    /* By name, not by inode: an older version's shim is re-adopted only under the path it was
     * started with (its command line names it). */
    if (strcmp(a->run_dir, a->state_dir) == 0)
        return;
    (void)mu_snprintf(dir, sizeof(dir), "%s/tasks", a->state_dir);
    d = opendir(dir);
    if (!d)
        return;
    while ((de = readdir(d)) != NULL)
        n += has_suffix(de->d_name, WRK_TASKREC_SUFFIX);
    (void)closedir(d);
    if (n > 0)
        mu_log(MU_LOG_WARN, WRK_MOD,
               "node=%s %d task record(s) in '%s', from a worker whose run directory was the state "
               "directory: not re-adopted here (this worker's records are in '%s/tasks'); their "
               "tasks stop by themselves when that lease runs out; to keep them, restart with "
               "--run-dir %s",
               a->node, n, dir, a->run_dir, a->state_dir);
}

/* Reads <run>/tasks: re-adopts, reports, and clears what no record explains. */
void wrk_tasks_adopt(struct wrk_agent *a)
{
    char dir[PROTO_PATH_MAX + 8];
    char path[PROTO_PATH_MAX + 300];
    struct dirent *de;
    DIR *d;

    old_records_warn(a);
    (void)mu_snprintf(dir, sizeof(dir), "%s/tasks", a->run_dir);
    d = opendir(dir);
    if (!d) {
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s cannot read '%s': %s", a->node, dir, strerror(errno));
        return;
    }
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (has_suffix(name, WRK_TASKREC_SUFFIX)) {
            adopt_one(a, dir, name);
        } else if (strncmp(name, ".spec.", 6) == 0) {
            /* A spec file the worker died before unlinking: nothing reads it any more. */
            (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, name);
            (void)unlink(path);
        } else if (has_suffix(name, WRK_TASKEXIT_SUFFIX) || has_suffix(name, WRK_FENCED_SUFFIX)) {
            /* An exit (or an older version's .fenced mark) without a record: its record was
             * acknowledged and removed. */
            struct stat st;
            int stem = (int)(strrchr(name, '.') - name); /* the name less its suffix */
            (void)mu_snprintf(path, sizeof(path), "%s/%.*s" WRK_TASKREC_SUFFIX, dir, stem, name);
            if (stat(path, &st) != 0 && errno == ENOENT) {
                (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, name);
                (void)unlink(path);
            }
        }
    }
    (void)closedir(d);
    if (a->ntasks > 0)
        mu_log(MU_LOG_INFO, WRK_MOD,
               "node=%s found %d task record(s) from before: %d running, %d ended or lost", a->node,
               a->ntasks, a->nrunning, a->nexited);
}

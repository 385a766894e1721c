/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint reports (docs/design.md §3 "Checkpoints").  The inotify watch on <state-dir>/ckpt
 * (watch.c) asks for them when a task closes or renames its checkpoint file (a 1 s poll of the
 * running tasks' files when inotify is not available), and the file is read once more when the
 * task is reaped (exits.c), before its TASK_STATUS, so a checkpoint written just before exit is
 * reported first.  One CHECKPOINT_DONE per distinct path per task; a path missing on this node is
 * not reported (nor resumed from) and the task's .err log says why, once.  ckpt.c reads the file
 * itself (hostile input).
 *
 * ckpt/ is open to every task user when tasks run as other users (sticky, like /tmp): only a
 * file owned by the task's own uid counts, so that one user cannot plant a checkpoint for
 * another's job.
 */
#include "worker/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mu_banned.h"

/*
 * A checkpoint path that names a file missing on this node (say a task ran as another user and
 * could not write where it meant to) must not be resumed from: it is not reported, and the task's
 * own .err log says why, once per path.  Only an absolute path that stat() finds absent counts:
 * a URL (s3://...) or a path this node may not see (EACCES on root-squashed storage) is kept.
 */
static bool ckpt_is_missing(struct wrk_agent *a, struct wrk_task *t, const char *path)
{
    char log[PROTO_PATH_MAX + 128];
    char line[PROTO_PATH_MAX + 256];
    struct stat st;
    int fd;

    if (path[0] != '/' || stat(path, &st) == 0 || errno != ENOENT)
        return false;
    if (t->ckpt_missing && strcmp(t->ckpt_missing, path) == 0)
        return true;
    free(t->ckpt_missing);
    t->ckpt_missing = strdup(path);
    mu_log(MU_LOG_WARN, WRK_MOD,
           "job=%s task=%d attempt=%d checkpoint '%s' does not exist on node %s: not reported, "
           "not resumed from",
           t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt, path, a->node);
    (void)mu_snprintf(line, sizeof(line),
                      "muster-worker: the checkpoint path '%s' this task reported does not exist "
                      "on node %s: it is not used to resume; write the checkpoint where the task "
                      "can (a workdir on shared storage), then report it\n",
                      path, a->node);
    if (wrk_task_path(a->state_dir, "logs", t->rec.ref.job, t->rec.ref.attempt, t->rec.ref.task,
                      ".err", log, sizeof(log), NULL)
        != 0)
        return true;
    fd = open(log, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = write(fd, line, strlen(line));
        (void)n; /* best effort: the worker's log has it too */
        (void)close(fd);
    }
    return true;
}

/* Reads t's checkpoint file and reports a path not reported before. */
void wrk_ckpt_check(struct wrk_agent *a, struct wrk_task *t)
{
    char file[PROTO_PATH_MAX + 128];
    char path[PROTO_PATH_MAX];
    uint64_t mtime_ms = 0;
    struct mu_err err;
    char *copy;
    int r;

    mu_err_clear(&err);
    if (wrk_task_path(a->state_dir, "ckpt", t->rec.ref.job, t->rec.ref.attempt, t->rec.ref.task, "",
                      file, sizeof(file), &err)
        != 0)
        return; /* the launcher built the same path (MUSTER_CHECKPOINT_FILE), so it fits */
    if (t->rec.uid >= 0) {
        /* ckpt/ is open to every task user (sticky, like /tmp): only the task's own file counts,
         * else one user could plant a checkpoint for another's job.  The sticky bit keeps a
         * file, once there, from being replaced by anyone else. */
        struct stat st;
        if (lstat(file, &st) == 0 && st.st_uid != (uid_t)t->rec.uid) {
            mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-ckpt-owner", 10,
                           "job=%s task=%d attempt=%d ignoring its checkpoint file: owned by uid "
                           "%d, not the task's uid %d",
                           t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt, (int)st.st_uid,
                           t->rec.uid);
            return;
        }
    }
    r = wrk_ckpt_read(file, path, sizeof(path), &mtime_ms, &err);
    if (r < 0) {
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-ckpt-bad", 10,
                       "job=%s task=%d attempt=%d ignoring its checkpoint file: %s", t->rec.ref.job,
                       t->rec.ref.task, t->rec.ref.attempt, err.msg);
        return;
    }
    if (r == 0 || (t->ckpt_last && strcmp(t->ckpt_last, path) == 0) || ckpt_is_missing(a, t, path))
        return;
    copy = strdup(path);
    if (!copy) {
        mu_log(MU_LOG_ERROR, WRK_MOD,
               "job=%s task=%d attempt=%d out of memory for a checkpoint path", t->rec.ref.job,
               t->rec.ref.task, t->rec.ref.attempt);
        return;
    }
    free(t->ckpt_last);
    t->ckpt_last = copy;
    t->ckpt_at_ms = mtime_ms ? mtime_ms : mu_time_wall_ms();
    if (!a->loading) /* else the first HELLO is followed by it (wrk_send_hello) */
        wrk_send_checkpoint(a, t);
    mu_log(MU_LOG_INFO, WRK_MOD, "job=%s task=%d attempt=%d checkpoint '%s'", t->rec.ref.job,
           t->rec.ref.task, t->rec.ref.attempt, path);
}

void wrk_ckpt_check_running(struct wrk_agent *a)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING)
            wrk_ckpt_check(a, &a->tasks[i]);
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * Starting one task (DESIGN §3): its own process group, so that KILL and CHECKPOINT reach every
 * process of it (a launcher such as torchrun does not forward signals); stdin from /dev/null;
 * stdout and stderr appended to <state-dir>/logs/<job>.<attempt>.<task>.out/.err, so a retried
 * bind adds to the same file rather than truncating what a user is reading; the environment of
 * env.c.  The log files are opened here, before fork, so that an unwritable state directory is
 * a plain error message and the child has nothing left to do but dup2, chdir and exec.
 */
#include "worker/wrk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mu_banned.h"

extern char **environ;

int wrk_task_log_path(const char *state_dir,
                      const char *job,
                      int attempt,
                      int task,
                      const char *suffix,
                      char *buf,
                      size_t size,
                      struct mu_err *err)
{
    if (mu_snprintf(buf, size, "%s/logs/%s.%d.%d%s", state_dir, job, attempt, task, suffix) != 0)
        return mu_errf(err, MU_E_TOOBIG, "log path under '%s' is too long", state_dir);
    return 0;
}

int wrk_task_ckpt_path(const char *state_dir,
                       const char *job,
                       int attempt,
                       int task,
                       char *buf,
                       size_t size,
                       struct mu_err *err)
{
    if (mu_snprintf(buf, size, "%s/ckpt/%s.%d.%d", state_dir, job, attempt, task) != 0)
        return mu_errf(err, MU_E_TOOBIG, "checkpoint path under '%s' is too long", state_dir);
    return 0;
}

int wrk_mkdir_p(const char *dir, struct mu_err *err)
{
    char path[PROTO_PATH_MAX];
    struct stat st;

    if (!dir || !dir[0])
        return mu_errf(err, MU_E_INVAL, "empty directory name");
    if (mu_strlcpy(path, dir, sizeof(path)) >= sizeof(path))
        return mu_errf(err, MU_E_TOOBIG, "directory '%s' is too long", dir);
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return mu_errf(err, MU_E_IO, "cannot create directory '%s': %s", path, strerror(errno));
        if (end)
            break;
        *p = '/';
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mu_errf(err, MU_E_IO, "'%s' is not a directory", dir);
    return 0;
}

/* Makes <state>/logs and <state>/ckpt. */
static int state_dirs_make(const char *state_dir, struct mu_err *err)
{
    static const char *const subdirs[] = { "logs", "ckpt" };
    char dir[PROTO_PATH_MAX];

    for (size_t i = 0; i < MU_ARRAY_LEN(subdirs); i++) {
        if (mu_snprintf(dir, sizeof(dir), "%s/%s", state_dir, subdirs[i]) != 0)
            return mu_errf(err, MU_E_TOOBIG, "state directory '%s' is too long", state_dir);
        if (wrk_mkdir_p(dir, err) != 0)
            return -1;
    }
    return 0;
}

/*
 * Opens a task's log file.  The directories normally exist (the agent makes them at start), so
 * they are only made when the open says they are missing: a launch costs no mkdir calls.
 */
static int open_log(const char *state_dir, const char *path, struct mu_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {
        if (state_dirs_make(state_dir, err) != 0)
            return -1;
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    if (fd < 0)
        return mu_errf(err, MU_E_IO, "cannot open log file '%s': %s", path, strerror(errno));
    return fd;
}

int wrk_launch_start(const struct wrk_launch *l,
                     char *const *base,
                     pid_t *pid_out,
                     struct mu_err *err)
{
    char out_path[PROTO_PATH_MAX];
    char err_path[PROTO_PATH_MAX];
    char **envp = NULL;
    char **argv = NULL;
    int out_fd = -1;
    int err_fd = -1;
    struct wrk_spawn s;
    int rc = -1;

    if (!l->job || !mu_name_is_valid(l->job, PROTO_JOB_MAX - 1))
        return mu_errf(err, MU_E_INVAL, "job id '%s' is not a valid name", l->job ? l->job : "");
    if (l->argc <= 0 || !l->argv || !l->argv[0] || !l->argv[0][0])
        return mu_errf(err, MU_E_INVAL, "empty command");
    if (wrk_task_log_path(l->state_dir, l->job, l->attempt, l->task, ".out", out_path,
                          sizeof(out_path), err)
            != 0
        || wrk_task_log_path(l->state_dir, l->job, l->attempt, l->task, ".err", err_path,
                             sizeof(err_path), err)
               != 0)
        return -1;

    envp = wrk_env_build(l, base ? base : environ, err);
    if (!envp)
        goto out;
    argv = calloc((size_t)l->argc + 1, sizeof(*argv));
    if (!argv) {
        mu_errf(err, MU_E_NOMEM, "out of memory for argv");
        goto out;
    }
    for (int i = 0; i < l->argc; i++) {
        if (!l->argv[i]) {
            mu_errf(err, MU_E_INVAL, "argv[%d] is missing", i);
            goto out;
        }
        argv[i] = l->argv[i];
    }
    out_fd = open_log(l->state_dir, out_path, err);
    if (out_fd < 0)
        goto out;
    err_fd = open_log(l->state_dir, err_path, err);
    if (err_fd < 0)
        goto out;

    memset(&s, 0, sizeof(s));
    s.argv = argv;
    s.envp = envp;
    s.workdir = l->workdir && l->workdir[0] ? l->workdir : l->state_dir;
    s.fd_stdin = -1;
    s.fd_stdout = out_fd;
    s.fd_stderr = err_fd;
    s.new_pgrp = true;
    if (wrk_spawn_start(&s, pid_out, err) != 0)
        goto out;
    rc = 0;
out:
    if (err_fd >= 0)
        (void)close(err_fd);
    if (out_fd >= 0)
        (void)close(out_fd);
    free(argv);
    wrk_env_free(envp);
    return rc;
}

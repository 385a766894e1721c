/* SPDX-License-Identifier: MIT */
/*
 * Starting one task (docs/design.md §3): its own process group, so that KILL and CHECKPOINT reach
 * every process of it (a launcher such as torchrun does not forward signals); stdin from /dev/null;
 * stdout and stderr appended to <state-dir>/logs/<job>.<attempt>.<task>.out/.err, so a retried
 * bind adds to the same file rather than truncating what a user is reading; the environment of
 * env.c.  The log files are opened here, before fork, so that an unwritable state directory is
 * a plain error message and the child has nothing left to do but dup2, chdir and exec.
 *
 * wrk_launch_shim starts the same task through muster-shim (shim.c), which outlives the worker,
 * forked by the shim server (wrk_shim_server_start; executed when there is none): the worker
 * prepares everything as for a direct start, writes the shim's spec to an anonymous
 * memory file (memfd; its stdin: the environment holds secrets and must not show in
 * /proc/PID/cmdline; no file system inode, whose allocation costs more than the rest of a start),
 * gives it the log files as stdout/stderr and a pipe as fd 3, and waits for one line on that
 * pipe: "OK <pid> <shim pid> <shim start>" once the task runs and its record is written, or
 * "ERR <code> <node|job> <message>" when it could not start, with whose fault that is.  So a failed
 * exec is still a BIND_ACK error, as with a direct start, and the scheduler learns whether to blame
 * the node.
 */
/* memfd_create is Linux's: ask glibc for its GNU declarations. */
#define _GNU_SOURCE 1 /* NOLINT(bugprone-reserved-identifier): the libc's own switch */

#include "worker/wrk.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu_banned.h"

extern char **environ;

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

/* Makes <state>/logs, <state>/ckpt and, with a run directory, <run>/tasks. */
static int dirs_make(const struct wrk_launch *l, struct mu_err *err)
{
    const char *const dirs[][2] = { { l->state_dir, "logs" },
                                    { l->state_dir, "ckpt" },
                                    { l->run_dir, "tasks" } };
    char dir[PROTO_PATH_MAX];

    for (size_t i = 0; i < MU_ARRAY_LEN(dirs); i++) {
        if (!dirs[i][0] || !dirs[i][0][0])
            continue; /* no run directory: a direct start (wrk_launch_start) */
        if (mu_snprintf(dir, sizeof(dir), "%s/%s", dirs[i][0], dirs[i][1]) != 0)
            return mu_errf(err, MU_E_TOOBIG, "directory '%s' is too long", dirs[i][0]);
        if (wrk_mkdir_p(dir, err) != 0)
            return -1;
    }
    return 0;
}

/*
 * Opens a task's log file.  The directories normally exist (the agent makes them at start), so
 * they are only made when the open says they are missing: a launch costs no mkdir calls.
 */
static int open_log(const struct wrk_launch *l, const char *path, struct mu_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {
        if (dirs_make(l, err) != 0)
            return -1;
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    if (fd < 0)
        return mu_errf(err, MU_E_IO, "cannot open log file '%s': %s", path, strerror(errno));
    return fd;
}

/* What a start needs, built before any fork. */
struct prepared {
    char **envp; /* owned (wrk_env_free) */
    char **argv; /* owned array, borrowed strings */
    int out_fd;
    int err_fd;
};

static void prepared_release(struct prepared *p)
{
    if (p->err_fd >= 0)
        (void)close(p->err_fd);
    if (p->out_fd >= 0)
        (void)close(p->out_fd);
    free(p->argv);
    wrk_env_free(p->envp);
    p->envp = NULL;
    p->argv = NULL;
    p->out_fd = p->err_fd = -1;
}

/* *fault: the job's for a bad job id, command or spec environment, else the node's. */
static int prepare(const struct wrk_launch *l,
                   char *const *base,
                   struct prepared *p,
                   enum wrk_fault *fault,
                   struct mu_err *err)
{
    const struct proto_msg *b = l->bind;
    const struct proto_task_ref *t = &b->task;
    char out_path[PROTO_PATH_MAX];
    char err_path[PROTO_PATH_MAX];

    p->envp = NULL;
    p->argv = NULL;
    p->out_fd = p->err_fd = -1;
    *fault = WRK_FAULT_JOB;
    if (!mu_name_is_valid(t->job, PROTO_JOB_MAX - 1))
        return mu_errf(err, MU_E_INVAL, "job id '%s' is not a valid name", t->job);
    if (b->argc <= 0 || !b->argv || !b->argv[0] || !b->argv[0][0])
        return mu_errf(err, MU_E_INVAL, "empty command");
    *fault = WRK_FAULT_NODE;
    if (wrk_task_path(l->state_dir, "logs", t->job, t->attempt, t->task, ".out", out_path,
                      sizeof(out_path), err)
            != 0
        || wrk_task_path(l->state_dir, "logs", t->job, t->attempt, t->task, ".err", err_path,
                         sizeof(err_path), err)
               != 0)
        return -1;

    p->envp = wrk_env_build(l, base ? base : environ, err);
    if (!p->envp) {
        if (err && err->code == MU_E_INVAL)
            *fault = WRK_FAULT_JOB; /* a spec entry without '=' */
        goto fail;
    }
    p->argv = calloc((size_t)b->argc + 1, sizeof(*p->argv));
    if (!p->argv) {
        mu_errf(err, MU_E_NOMEM, "out of memory for argv");
        goto fail;
    }
    for (int i = 0; i < b->argc; i++) {
        if (!b->argv[i]) {
            *fault = WRK_FAULT_JOB;
            mu_errf(err, MU_E_INVAL, "argv[%d] is missing", i);
            goto fail;
        }
        p->argv[i] = b->argv[i];
    }
    p->out_fd = open_log(l, out_path, err);
    if (p->out_fd < 0)
        goto fail;
    p->err_fd = open_log(l, err_path, err);
    if (p->err_fd < 0)
        goto fail;
    return 0;
fail:
    prepared_release(p);
    return -1;
}

/* The BIND's workdir, else the state directory. */
static const char *workdir_of(const struct wrk_launch *l)
{
    return l->bind->workdir[0] ? l->bind->workdir : l->state_dir;
}

int wrk_launch_start(const struct wrk_launch *l,
                     char *const *base,
                     pid_t *pid_out,
                     struct mu_err *err)
{
    struct prepared p;
    struct wrk_spawn s;
    enum wrk_fault fault;
    int rc;

    if (prepare(l, base, &p, &fault, err) != 0)
        return -1;
    memset(&s, 0, sizeof(s));
    s.argv = p.argv;
    s.envp = p.envp;
    s.workdir = workdir_of(l);
    s.fd_stdin = -1;
    s.fd_stdout = p.out_fd;
    s.fd_stderr = p.err_fd;
    s.new_pgrp = true;
    s.not_after_ms = l->not_after_ms;
    rc = wrk_spawn_start(&s, pid_out, NULL, err);
    prepared_release(&p);
    return rc;
}

/* An unlinked temp file under <run>/tasks, for kernels without memfd_create; -1 with err. */
static int spec_tmpfile(const struct wrk_launch *l, struct mu_err *err)
{
    const char *run_dir = l->run_dir;
    char path[PROTO_PATH_MAX];
    int fd;

    if (mu_snprintf(path, sizeof(path), "%s/tasks/.spec.XXXXXX", run_dir) != 0)
        return mu_errf(err, MU_E_TOOBIG, "run directory '%s' is too long", run_dir);
    fd = mkstemp(path);
    if (fd < 0 && errno == ENOENT) {
        if (dirs_make(l, err) != 0)
            return -1;
        (void)mu_snprintf(path, sizeof(path), "%s/tasks/.spec.XXXXXX", run_dir);
        fd = mkstemp(path);
    }
    if (fd < 0)
        return mu_errf(err, MU_E_IO, "cannot create a temp file in '%s/tasks': %s", run_dir,
                       strerror(errno));
    (void)unlink(path);
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

/* The spec in a memfd (or an unlinked temp file), positioned at 0; -1 with err. */
static int spec_file(const struct wrk_launch *l, const struct mu_buf *spec, struct mu_err *err)
{
    size_t done = 0;
    int fd = memfd_create("muster-shim-spec", MFD_CLOEXEC);

    if (fd < 0 && (fd = spec_tmpfile(l, err)) < 0)
        return -1;
    while (done < spec->len) {
        ssize_t n = write(fd, spec->data + done, spec->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            (void)close(fd);
            return mu_errf(err, MU_E_IO, "cannot write the shim's spec: %s", strerror(e));
        }
        done += (size_t)n;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        int e = errno;
        (void)close(fd);
        return mu_errf(err, MU_E_IO, "cannot rewind the shim's spec: %s", strerror(e));
    }
    return fd;
}

/*
 * "ERR <code> <node|job> <message>" (line: after "ERR "): the error and whose fault it is; a
 * line of another shape is the node's fault, its text kept.
 */
static int parse_err_line(const char *line,
                          const char *shim,
                          enum wrk_fault *fault,
                          struct mu_err *err)
{
    const char *sp = strchr(line, ' ');
    const char *msg;
    char num[16];
    int64_t code = MU_E_SYS;

    *fault = WRK_FAULT_NODE;
    if (!sp || (size_t)(sp - line) >= sizeof(num))
        return mu_errf(err, MU_E_SYS, "the task supervisor '%s' said 'ERR %.100s'", shim, line);
    memcpy(num, line, (size_t)(sp - line));
    num[sp - line] = '\0';
    if (mu_parse_i64(num, 1, 1000, &code, NULL) != 0)
        code = MU_E_SYS;
    msg = sp + 1;
    if (strncmp(msg, "job ", 4) == 0) {
        *fault = WRK_FAULT_JOB;
        msg += 4;
    } else if (strncmp(msg, "node ", 5) == 0) {
        msg += 5;
    }
    return mu_errf(err, (int)code, "%s", msg);
}

/* What a shim said once its task ran: "OK <pid> <shim pid> <shim start>". */
struct shim_report {
    pid_t pid;
    pid_t shim_pid;
    uint64_t shim_start;
};

/* Parses "<pid> <shim pid> <shim start>"; 0, or -1 when the line has another shape. */
static int parse_ok_line(const char *line, struct shim_report *out)
{
    static const int64_t min[3] = { 2, 2, 1 };
    static const int64_t max[3] = { INT32_MAX, INT32_MAX, INT64_MAX };
    char copy[96];
    char *field = copy;
    int64_t v[3];

    if (mu_strlcpy(copy, line, sizeof(copy)) >= sizeof(copy))
        return -1;
    for (int i = 0; i < 3; i++) {
        char *sp = strchr(field, ' ');
        if ((sp != NULL) != (i < 2))
            return -1; /* two spaces, three fields */
        if (sp)
            *sp = '\0';
        if (mu_parse_i64(field, min[i], max[i], &v[i], NULL) != 0)
            return -1;
        field = sp ? sp + 1 : field;
    }
    out->pid = (pid_t)v[0];
    out->shim_pid = (pid_t)v[1];
    out->shim_start = (uint64_t)v[2];
    return 0;
}

/*
 * Reads the shim's one-line report from fd within WRK_SHIM_START_TIMEOUT_MS.  *silent is set
 * when the pipe closed without a word: no shim holds it any more.
 */
static int read_report(int fd,
                       const char *shim,
                       struct shim_report *out,
                       bool *silent,
                       enum wrk_fault *fault,
                       struct mu_err *err)
{
    uint64_t deadline = mu_time_mono_ms() + WRK_SHIM_START_TIMEOUT_MS;
    char line[512];
    size_t len = 0;

    *silent = false;
    for (;;) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        uint64_t now = mu_time_mono_ms();
        ssize_t n;
        int r;
        if (now >= deadline)
            return mu_errf(err, MU_E_IO, "'%s' said nothing within %d ms", shim,
                           WRK_SHIM_START_TIMEOUT_MS);
        r = poll(&pfd, 1, (int)(deadline - now));
        if (r < 0 && errno != EINTR)
            return mu_errf(err, MU_E_SYS, "poll: %s", strerror(errno));
        if (r <= 0)
            continue;
        n = read(fd, line + len, sizeof(line) - 1 - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(line, '\n', len) || len == sizeof(line) - 1)
            break;
    }
    line[len] = '\0';
    if (len > 0 && line[len - 1] == '\n')
        line[--len] = '\0';
    if (strncmp(line, "OK ", 3) == 0 && parse_ok_line(line + 3, out) == 0)
        return 0;
    if (strncmp(line, "ERR ", 4) == 0)
        return parse_err_line(line + 4, shim, fault, err);
    if (len == 0) {
        *silent = true;
        return mu_errf(err, MU_E_SYS, "the task supervisor '%s' exited before starting the task",
                       shim);
    }
    return mu_errf(err, MU_E_SYS, "the task supervisor '%s' said '%.100s'", shim, line);
}

/* How a request to the shim server went. */
enum server_ask {
    SERVER_FORKED,  /* a supervisor runs: its pid is known */
    SERVER_UNSENT,  /* the server is gone; nothing was forked */
    SERVER_UNKNOWN, /* the server went after the request: its report says whether one runs */
    SERVER_FAILED,  /* the server could not fork (err) */
};

/* Asks the server for a supervisor with fds 0-3: spec_fd, the logs and report_fd. */
static enum server_ask server_ask(struct wrk_shim_server *srv,
                                  const char *rec_base,
                                  const int fds[4],
                                  pid_t *shim_pid,
                                  struct mu_err *err)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    struct iovec iov = { (void *)rec_base, strlen(rec_base) };
    struct pollfd pfd = { srv->fd, POLLIN, 0 };
    struct msghdr mh;
    struct cmsghdr *c;
    int32_t answer = 0;
    ssize_t n;

    memset(&mh, 0, sizeof(mh));
    memset(&ctl, 0, sizeof(ctl));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 4);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * 4);
    do {
        n = sendmsg(srv->fd, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)iov.iov_len)
        return SERVER_UNSENT;
    do {
        n = poll(&pfd, 1, WRK_SHIM_SERVER_ANSWER_MS);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        do {
            n = recv(srv->fd, &answer, sizeof(answer), 0);
        } while (n < 0 && errno == EINTR);
    }
    if (n != (ssize_t)sizeof(answer))
        return SERVER_UNKNOWN;
    if (answer < 0) {
        mu_errf(err, MU_E_SYS, "the shim server could not fork a supervisor: %s",
                strerror(-answer));
        return SERVER_FAILED;
    }
    *shim_pid = (pid_t)answer;
    return SERVER_FORKED;
}

/*
 * Starts the task's shim, forked by the server when there is one (a server that is gone is
 * closed, and the shim executed instead), and waits for its report.
 */
static int shim_spawn(const char *shim_path,
                      struct wrk_shim_server *srv,
                      char *rec_base,
                      int spec_fd,
                      const struct prepared *p,
                      struct shim_report *out,
                      enum wrk_fault *fault,
                      struct mu_err *err)
{
    enum server_ask asked = SERVER_UNSENT;
    pid_t shim_pid = -1;
    int report[2];
    bool silent = false;
    int rc = -1;

    for (;;) {
        int fds[4];
        if (pipe(report) != 0)
            return mu_errf(err, MU_E_SYS, "cannot create a pipe: %s", strerror(errno));
        (void)fcntl(report[0], F_SETFD, FD_CLOEXEC);
        (void)fcntl(report[1], F_SETFD, FD_CLOEXEC);
        fds[0] = spec_fd;
        fds[1] = p->out_fd;
        fds[2] = p->err_fd;
        fds[3] = report[1];
        asked =
            srv && srv->fd >= 0 ? server_ask(srv, rec_base, fds, &shim_pid, err) : SERVER_UNSENT;
        if (asked == SERVER_UNKNOWN && srv->pid > 0)
            (void)kill(srv->pid, SIGKILL); /* wedged or dying: this request goes with it */
        if (asked == SERVER_UNSENT || asked == SERVER_UNKNOWN)
            wrk_shim_server_close(srv);
        if (asked == SERVER_FAILED
            || (asked == SERVER_UNSENT
                && wrk_shim_exec(shim_path, rec_base, fds, &shim_pid, err) != 0)) {
            (void)close(report[0]);
            (void)close(report[1]);
            return -1;
        }
        (void)close(report[1]);
        rc = read_report(report[0], shim_path, out, &silent, fault, err);
        /* A server gone with the request: no supervisor holds the pipe, so the shim is executed. */
        if (rc == 0 || !silent || asked != SERVER_UNKNOWN)
            break;
        (void)close(report[0]);
        (void)lseek(spec_fd, 0, SEEK_SET);
    }
    if (rc != 0 && shim_pid > 0) {
        (void)kill(shim_pid, SIGKILL); /* it has nothing left to do: failed or wedged */
        while (asked == SERVER_UNSENT && waitpid(shim_pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    (void)close(report[0]);
    return rc;
}

/* The record of the BIND's task the shim writes once it runs (pids and start time: the shim's). */
static void rec_init(const struct wrk_launch *l, struct wrk_taskrec *r)
{
    const struct proto_msg *b = l->bind;

    memset(r, 0, sizeof(*r));
    mu_strlcpy(r->ref.job, b->task.job, sizeof(r->ref.job));
    r->ref.task = b->task.task;
    r->ref.attempt = b->task.attempt;
    r->ckpt_signal = b->signal;
    r->grace_s = b->grace_s;
    r->uid = l->user && l->user->name[0] ? (int)l->user->uid : -1;
    r->ngpus = b->nbind_gpus < PROTO_MAX_GPUS ? b->nbind_gpus : PROTO_MAX_GPUS;
    memcpy(r->gpus, b->bind_gpus, sizeof(r->gpus));
}

/* The task's cgroups (l->cg), its limits from the BIND, and the GPU minors it may not open. */
static int cg_fill(const struct wrk_launch *l, struct wrk_cg_task *cg, struct mu_err *err)
{
    if (!l->cg || l->cg->version == 0)
        return 0;
    if (wrk_cg_task_paths(l->cg, l->cg_root, l->node, &l->bind->task, cg, err) != 0)
        return -1;
    cg->mem_mb = l->bind->memory_mb_per_task;
    cg->cpus = l->bind->cpus_per_task;
    for (int minor = 0; minor < WRK_CG_DENY_MINORS; minor++) {
        bool given = false;
        for (int i = 0; i < l->ngpu_minors; i++)
            given = given || l->gpu_minors[i] == minor;
        if (!given)
            cg->deny[cg->ndeny++] = minor;
    }
    return 0;
}

int wrk_launch_shim(const struct wrk_launch *l,
                    char *const *base,
                    const char *shim_path,
                    struct wrk_shim_server *srv,
                    struct wrk_taskrec *rec,
                    enum wrk_fault *fault,
                    struct mu_err *err)
{
    const struct proto_task_ref *t = &l->bind->task;
    char rec_base[PROTO_PATH_MAX];
    gid_t groups[WRK_GROUPS_MAX];
    int ngroups = WRK_GROUPS_MAX;
    struct wrk_shim_spec spec;
    struct prepared p;
    struct mu_buf buf;
    struct shim_report said = { 0, 0, 0 };
    enum wrk_fault why = WRK_FAULT_NODE;
    int spec_fd = -1;
    int rc = -1;

    if (fault)
        *fault = WRK_FAULT_NODE;
    if (!l->run_dir || !l->run_dir[0])
        return mu_errf(err, MU_E_INVAL, "no run directory for the task's record");
    if (wrk_task_path(l->run_dir, "tasks", t->job, t->attempt, t->task, "", rec_base,
                      sizeof(rec_base), err)
        != 0)
        return -1;
    if (prepare(l, base, &p, &why, err) != 0) {
        if (fault)
            *fault = why;
        return -1;
    }
    mu_buf_init(&buf, WRK_SPEC_MAX_BYTES);
    memset(&spec, 0, sizeof(spec));
    rec_init(l, &spec.rec);
    spec.argc = l->bind->argc;
    spec.argv = p.argv;
    while (p.envp && p.envp[spec.nenv])
        spec.nenv++;
    spec.envp = p.envp;
    spec.workdir = workdir_of(l);
    if (l->user && l->user->name[0]) {
        /* Looked up here, so that the shim needs no NSS (it is linked statically). */
        if (getgrouplist(l->user->name, l->user->gid, groups, &ngroups) < 0) {
            mu_errf(err, MU_E_SYS, "user '%s' is in more than %d groups", l->user->name,
                    WRK_GROUPS_MAX);
            goto out;
        }
        spec.user = l->user->name;
        spec.uid = (int)l->user->uid;
        spec.gid = (int)l->user->gid;
        spec.groups = groups;
        spec.ngroups = ngroups;
    }
    spec.lease_path = l->lease_path;
    spec.not_after_ms = l->not_after_ms;
    if (cg_fill(l, &spec.cg, err) != 0)
        goto out;
    if (wrk_shim_spec_encode(&spec, &buf, err) != 0)
        goto out;
    spec_fd = spec_file(l, &buf, err);
    if (spec_fd < 0)
        goto out;
    if (shim_spawn(shim_path, srv, rec_base, spec_fd, &p, &said, &why, err) != 0) {
        if (fault)
            *fault = why;
        goto out;
    }
    *rec = spec.rec;
    rec->ref.state = PROTO_TASK_RUNNING;
    rec->ref.pid = (int)said.pid;
    rec->shim_pid = (int)said.shim_pid;
    rec->shim_start = said.shim_start;
    rc = 0;
out:
    if (spec_fd >= 0)
        (void)close(spec_fd);
    mu_buf_release(&buf);
    prepared_release(&p);
    return rc;
}

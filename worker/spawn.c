/* SPDX-License-Identifier: MIT */
/*
 * fork + exec for tasks and for nvidia-smi, without a shell (docs/design.md §3, docs/style.md §1.7
 * bans system).
 *
 * A failed exec must be an error the scheduler can show ("cannot run 'nosuchcmd': No such file
 * or directory"), not a task that "exited 127".  So the child reports the failing step and its
 * errno through a pipe whose write end is close-on-exec: a successful exec closes it and the
 * parent reads EOF; a failure writes 8 bytes before _exit.  The step tells whose fault it was
 * (a command that cannot be executed is the job's, a uid that cannot be taken the node's).  A
 * start deadline is checked last, right before exec, so that no delay before it (a frozen
 * worker, a slow fork) can start a task the scheduler has given up.  libzmq runs threads in this
 * process, so the child only makes async-signal-safe calls between fork and exec; everything
 * that allocates (argv, environment, paths) is built before fork.  The shim (shim.c) uses the
 * same code to start a task as another user: the group list is looked up before fork, and the
 * child only makes the setgroups/setgid/setuid calls, and joins the task's cgroups by writing
 * "0" to their cgroup.procs files, which the shim opened before fork.
 */
/* setgroups is not in POSIX: ask glibc for its default (BSD/SVID) declarations as well. */
#define _DEFAULT_SOURCE 1 /* NOLINT(bugprone-reserved-identifier): the libc's own switch */

#include "worker/wrk.h"

#include <grp.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/mu_banned.h"

extern char **environ;

enum spawn_stage {
    STAGE_PGRP = 1,
    STAGE_CGROUP,
    STAGE_STDIO,
    STAGE_IDS,
    STAGE_CHDIR,
    STAGE_DEADLINE,
    STAGE_EXEC,
};

struct child_report {
    int stage; /* enum spawn_stage */
    int errnum;
};

/* A pipe whose two ends are close-on-exec and above stderr, so stdio dup2s cannot hit them. */
static int pipe_cloexec(int fds[2], struct mu_err *err)
{
    if (pipe(fds) != 0)
        return mu_errf(err, MU_E_SYS, "cannot create a pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        if (fds[i] < 3) {
            int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
            if (fd < 0) {
                int e = errno;
                (void)close(fds[0]);
                (void)close(fds[1]);
                return mu_errf(err, MU_E_SYS, "cannot create a pipe: %s", strerror(e));
            }
            (void)close(fds[i]);
            fds[i] = fd;
        } else {
            (void)fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        }
    }
    return 0;
}

static void child_fail(int fd, enum spawn_stage stage)
{
    struct child_report r = { (int)stage, errno };
    ssize_t n = write(fd, &r, sizeof(r));
    (void)n;
    _exit(127);
}

/* Returns fd (or /dev/null opened with flags when fd < 0) duplicated above 3, close-on-exec. */
static int child_fd(int fd, int flags)
{
    int dup;
    int opened = -1;
    if (fd < 0) {
        opened = open("/dev/null", flags | O_CLOEXEC);
        if (opened < 0)
            return -1;
        fd = opened;
    }
    dup = fcntl(fd, F_DUPFD_CLOEXEC, 4);
    if (opened >= 0)
        (void)close(opened);
    return dup;
}

/*
 * vfork for what the worker starts most (the shim: an absolute path, the worker's own ids):
 * the child borrows the parent's memory instead of copying its page tables, which is most of a
 * start's cost in a process with libzmq's threads.  Only then, because such a child must not
 * write the parent's globals (environ, for execvp's PATH search) nor run glibc's setuid, which
 * would signal the parent's threads.  A single-threaded caller (the shim starting its task) has
 * no threads to signal, and points environ at the task's environment itself around the vfork,
 * so every start of its shares memory.  Everything else is forked.
 */
static bool shares_memory(const struct wrk_spawn *s)
{
    return s->single_threaded || (s->argv[0][0] == '/' && !s->set_ids);
}

/* Runs in the child: only async-signal-safe calls until exec. */
static void child_exec(const struct wrk_spawn *s, int report_fd)
{
    struct sigaction sa;
    sigset_t none;
    int fds[4];

    /* Keep the report pipe clear of 0..3, which the dup2 calls below overwrite. */
    if (report_fd < 4) {
        int moved = fcntl(report_fd, F_DUPFD_CLOEXEC, 4);
        if (moved < 0)
            child_fail(report_fd, STAGE_STDIO);
        report_fd = moved;
    }
    if (s->new_pgrp && setpgid(0, 0) != 0)
        child_fail(report_fd, STAGE_PGRP);
    /* Into the task's cgroups before anything can fork: every descendant is born inside. */
    for (int i = 0; i < s->ncg_fds; i++) {
        if (write(s->cg_fds[i], "0", 1) != 1)
            child_fail(report_fd, STAGE_CGROUP);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    (void)sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < 65; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &sa, NULL); /* EINVAL for the libc-reserved ones */
    }
    (void)sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);

    /* Move the sources out of 0..2 first so that one dup2 cannot clobber another's source. */
    fds[0] = child_fd(s->fd_stdin, O_RDONLY);
    fds[1] = child_fd(s->fd_stdout, O_WRONLY);
    fds[2] = child_fd(s->fd_stderr, O_WRONLY);
    fds[3] = s->fd_extra > 2 ? child_fd(s->fd_extra, O_WRONLY) : -1;
    for (int i = 0; i < 4; i++) {
        if (i == 3 && s->fd_extra <= 2)
            break;
        if (fds[i] < 0 || dup2(fds[i], i) < 0)
            child_fail(report_fd, STAGE_STDIO);
    }
    if (s->set_ids) {
        /* Groups first, then the gid, then the uid: each later step drops the right to do the
         * earlier ones. */
        if (setgroups((size_t)s->ngroups, s->ngroups > 0 ? s->groups : NULL) != 0
            || setgid(s->gid) != 0 || setuid(s->uid) != 0)
            child_fail(report_fd, STAGE_IDS);
    }
    if (s->workdir && s->workdir[0] && chdir(s->workdir) != 0)
        child_fail(report_fd, STAGE_CHDIR);
    if (s->not_after_ms) {
        /* clock_gettime is async-signal-safe; mu_time_mono_ms reads the same clock. */
        struct timespec ts;
        if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0
            || (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u >= s->not_after_ms) {
            errno = ETIMEDOUT;
            child_fail(report_fd, STAGE_DEADLINE);
        }
    }
    if (shares_memory(s) && !s->single_threaded) {
        (void)execve(s->argv[0], s->argv, s->envp ? s->envp : environ);
    } else {
        /* Forked: our own copy of environ.  Single-threaded: the parent pointed it at envp. */
        if (s->envp && !s->single_threaded)
            environ = (char **)s->envp;
        (void)execvp(s->argv[0], s->argv);
    }
    child_fail(report_fd, STAGE_EXEC);
}

/* An exec that fails with errnum is the job's fault: its command cannot be executed. */
static bool exec_is_job_fault(int errnum)
{
    switch (errnum) {
    case ENOENT:
    case EACCES:
    case ENOEXEC:
    case ENOTDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case E2BIG:
        return true;
    default:
        return false;
    }
}

static enum wrk_fault stage_fault(const struct child_report *r)
{
    if (r->stage == STAGE_EXEC && exec_is_job_fault(r->errnum))
        return WRK_FAULT_JOB;
    if (r->stage == STAGE_CHDIR && (r->errnum == ENOENT || r->errnum == ENOTDIR))
        return WRK_FAULT_JOB; /* the spec's workdir is missing or not a directory */
    return WRK_FAULT_NODE;
}

static int report_error(const struct wrk_spawn *s, const struct child_report *r, struct mu_err *err)
{
    int code = r->errnum == ENOENT ? MU_E_NOTFOUND : MU_E_SYS;
    const char *why = strerror(r->errnum);

    switch (r->stage) {
    case STAGE_PGRP:
        return mu_errf(err, MU_E_SYS, "cannot create a process group: %s", why);
    case STAGE_CGROUP:
        return mu_errf(err, MU_E_SYS, "cannot join the task's cgroup: %s", why);
    case STAGE_STDIO:
        return mu_errf(err, MU_E_SYS, "cannot set up stdin/stdout/stderr: %s", why);
    case STAGE_IDS:
        return mu_errf(err, MU_E_SYS, "cannot switch to uid %d gid %d: %s", (int)s->uid,
                       (int)s->gid, why);
    case STAGE_CHDIR:
        return mu_errf(err, code, "workdir '%s': %s", s->workdir, why);
    case STAGE_DEADLINE:
        return mu_errf(err, MU_E_STATE, "not started: the start deadline passed before exec");
    case STAGE_EXEC:
        return mu_errf(err, code, "cannot run '%s': %s", s->argv[0], why);
    default:
        return mu_errf(err, MU_E_SYS, "cannot start '%s': child failed before exec", s->argv[0]);
    }
}

int wrk_spawn_start(const struct wrk_spawn *s,
                    pid_t *pid_out,
                    enum wrk_fault *fault,
                    struct mu_err *err)
{
    int report[2];
    struct child_report r;
    char **saved_environ;
    ssize_t n;
    pid_t pid;

    if (fault)
        *fault = WRK_FAULT_NODE;
    if (!s->argv || !s->argv[0] || !s->argv[0][0]) {
        if (fault)
            *fault = WRK_FAULT_JOB;
        return mu_errf(err, MU_E_INVAL, "empty command");
    }
    if (pipe_cloexec(report, err) != 0)
        return -1;
    /* vfork where shares_memory() allows it.  Its child writes nothing the parent reads later (pid
     * is set again when vfork returns in the parent) and, in child_exec, makes only
     * async-signal-safe calls until exec or _exit, as glibc's posix_spawn does in its CLONE_VFORK
     * child; posix_spawn itself cannot do child_exec's deadline check or say which step failed. */
    saved_environ = environ;
    if (s->single_threaded && s->envp)
        environ = (char **)s->envp; /* for the child's execvp: its PATH and its environment */
    /* NOLINTNEXTLINE(clang-analyzer-security.insecureAPI.vfork,clang-analyzer-unix.Vfork) */
    pid = shares_memory(s) ? vfork() : fork();
    if (pid != 0)
        environ = saved_environ;
    if (pid < 0) {
        int e = errno;
        (void)close(report[0]);
        (void)close(report[1]);
        return mu_errf(err, MU_E_SYS, "cannot fork: %s", strerror(e));
    }
    if (pid == 0) {
        (void)close(report[0]);
        child_exec(s, report[1]);
    }
    (void)close(report[1]);
    /* Both sides call setpgid, so a signal sent right after return reaches the group. */
    if (s->new_pgrp)
        (void)setpgid(pid, pid);
    do {
        n = read(report[0], &r, sizeof(r));
    } while (n < 0 && errno == EINTR);
    (void)close(report[0]);
    if (n == 0) {
        *pid_out = pid;
        return 0;
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (n != (ssize_t)sizeof(r)) {
        r.stage = 0;
        r.errnum = 0;
    }
    if (fault)
        *fault = stage_fault(&r);
    return report_error(s, &r, err);
}

/* Reads what is available on fd into b; sets *open = false at EOF. */
static int drain(int fd, struct mu_buf *b, size_t max, bool *open, struct mu_err *err)
{
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN)
            return 0;
        return mu_errf(err, MU_E_IO, "cannot read child output: %s", strerror(errno));
    }
    if (n == 0) {
        *open = false;
        return 0;
    }
    if (b->len + (size_t)n > max)
        return mu_errf(err, MU_E_TOOBIG, "output longer than %zu bytes", max);
    return mu_buf_append(b, chunk, (size_t)n, err);
}

/* Reads the child's stdout and stderr until both close, within timeout_ms. */
static int read_both(int ofd,
                     int efd,
                     struct mu_buf *ob,
                     struct mu_buf *eb,
                     size_t max_bytes,
                     int timeout_ms,
                     const char *prog,
                     struct mu_err *err)
{
    uint64_t deadline = mu_time_mono_ms() + (uint64_t)timeout_ms;
    bool oopen = true;
    bool eopen = true;

    while (oopen || eopen) {
        struct pollfd pfd[2] = { { oopen ? ofd : -1, POLLIN, 0 }, { eopen ? efd : -1, POLLIN, 0 } };
        uint64_t now = mu_time_mono_ms();
        int r;
        if (now >= deadline)
            return mu_errf(err, MU_E_IO, "'%s' did not finish within %d ms", prog, timeout_ms);
        r = poll(pfd, 2, (int)(deadline - now));
        if (r < 0 && errno != EINTR)
            return mu_errf(err, MU_E_IO, "poll: %s", strerror(errno));
        if (r <= 0)
            continue;
        if (oopen && pfd[0].revents && drain(ofd, ob, max_bytes, &oopen, err) != 0)
            return -1;
        if (eopen && pfd[1].revents && drain(efd, eb, max_bytes, &eopen, err) != 0)
            return -1;
    }
    return 0;
}

int wrk_spawn_capture(char *const *argv,
                      size_t max_bytes,
                      int timeout_ms,
                      char **out,
                      char **errout,
                      int *status,
                      struct mu_err *err)
{
    int opipe[2] = { -1, -1 };
    int epipe[2] = { -1, -1 };
    struct mu_buf ob;
    struct mu_buf eb;
    struct wrk_spawn s;
    pid_t pid = -1;
    int rc = -1;

    mu_buf_init(&ob, max_bytes + 1);
    mu_buf_init(&eb, max_bytes + 1);
    if (pipe_cloexec(opipe, err) != 0 || pipe_cloexec(epipe, err) != 0)
        goto out;
    memset(&s, 0, sizeof(s));
    s.argv = argv;
    s.fd_stdin = -1;
    s.fd_stdout = opipe[1];
    s.fd_stderr = epipe[1];
    if (wrk_spawn_start(&s, &pid, NULL, err) != 0) {
        pid = -1;
        goto out;
    }
    (void)close(opipe[1]);
    (void)close(epipe[1]);
    opipe[1] = epipe[1] = -1;
    if (read_both(opipe[0], epipe[0], &ob, &eb, max_bytes, timeout_ms, argv[0], err) != 0)
        goto out;
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            mu_errf(err, MU_E_SYS, "waitpid: %s", strerror(errno));
            goto out;
        }
    }
    pid = -1;
    if (mu_buf_append(&ob, "", 0, err) != 0 || mu_buf_append(&eb, "", 0, err) != 0)
        goto out;
    *out = mu_buf_take(&ob);
    *errout = mu_buf_take(&eb);
    rc = 0;
out:
    if (pid > 0) {
        (void)kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    for (int i = 0; i < 2; i++) {
        if (opipe[i] >= 0)
            (void)close(opipe[i]);
        if (epipe[i] >= 0)
            (void)close(epipe[i]);
    }
    mu_buf_release(&ob);
    mu_buf_release(&eb);
    return rc;
}

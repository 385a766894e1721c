/* SPDX-License-Identifier: MIT */
/*
 * muster-shim: the per-task supervisor (issue #5 "worker crash or restart"), as container shims
 * are for containers.  There is one per task, forked by the worker's shim server (serve() below,
 * issue #15: a fork costs a fraction of an exec and the C library's start-up) or, without one,
 * executed by the worker:
 *
 *     muster-shim <run-dir>/tasks/<job>.<attempt>.<task>    (stdin: spec, fd 3: report pipe)
 *     muster-shim --serve                                    (fd 3: the worker's socket)
 *
 * It leaves the worker's session (setsid), so that neither the worker's death nor a signal to
 * the worker's process group reaches it; starts the task in the task's own process group with
 * spawn.c (as another user when the spec says so, and not at all once the spec's start
 * deadline has passed); writes the record <base>.json and says "OK <pid> <shim pid> <shim
 * start>" on fd 3, or
 * "ERR <code> <node|job> <message>" when the task could not start (with whose fault that is);
 * then waits for the task and writes its true exit status to <base>.exit.  Both files are
 * written to a temp file and renamed.  The leader's exit is observed with waitid(WNOWAIT), and
 * the rest of its group is killed before the leader is reaped: while the zombie holds the pid,
 * the group id cannot be reused by a stranger.  With cgroups in the spec (cgroup.c, issue #46)
 * the task's child joins its groups before exec, the shim is the subreaper of its orphans, and
 * every process left in the groups (a daemon that left the process group) is killed and reaped
 * before the exit file is written: that file frees the task's GPUs for the next job.
 *
 * The shim holds the node's lease (protocol/README.md "The lease and stale commands"): it reads
 * <run-dir>/lease, which the worker renews from the scheduler's answers, at least once a
 * second, and once it has run out it stops its task by itself, as the scheduler expects when it
 * requeues the gang elsewhere: the job's checkpoint signal to the group, SIGTERM after grace_s,
 * SIGKILL WRK_FENCE_TERM_GRACE_MS later (without a checkpoint signal SIGTERM at once).  So the
 * scheduler's wait holds even when the worker is dead or frozen.  The exit file then says
 * "fenced", so that the scheduler requeues the gang without counting a failure.
 *
 * Its stdout and stderr are the task's log files, so its own rare complaints (and each fencing
 * step) land there.  A restarted worker recognises it by its pid and start time (/proc/PID/stat,
 * in the record).  SIGTERM and SIGCHLD are blocked and taken with sigtimedwait, so one loop
 * sees the task's exit, a SIGTERM (passed on to the task's group) and the lease's deadlines;
 * SIGHUP, SIGINT and SIGPIPE are ignored.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/mu.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

#define REPORT_FD      3
#define LEASE_CHECK_MS 1000 /* the lease is read at least this often: a renewal or a shortening */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr (the task's .err log), prefixed so a reader knows who spoke. */
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    (void)fprintf(stderr, WRK_SHIM_NAME ": %s\n", line);
    (void)fflush(stderr);
}

static void report(const char *line)
{
    size_t len = strlen(line);
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(REPORT_FD, line + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the worker is gone: the record still tells the next one */
        done += (size_t)n;
    }
}

static void report_err(const struct mu_err *err, enum wrk_fault fault)
{
    char line[384];
    (void)mu_snprintf(line, sizeof(line), "ERR %d %s %s\n", err->code,
                      fault == WRK_FAULT_JOB ? "job" : "node", err->msg);
    for (char *p = line; *p && p[1]; p++) {
        if (*p == '\n')
            *p = ' '; /* one line: a "hint:" second line joins the first */
    }
    report(line);
}

/* Reads fd 0 to EOF into a heap buffer (at most WRK_SPEC_MAX_BYTES). */
static char *read_spec(size_t *len_out, struct mu_err *err)
{
    struct mu_buf b;
    char chunk[65536];

    mu_buf_init(&b, WRK_SPEC_MAX_BYTES);
    for (;;) {
        ssize_t n = read(0, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            mu_errf(err, MU_E_IO, "cannot read the spec: %s", strerror(errno));
            mu_buf_release(&b);
            return NULL;
        }
        if (n == 0)
            break;
        if (mu_buf_append(&b, chunk, (size_t)n, err) != 0) {
            mu_buf_release(&b);
            return NULL;
        }
    }
    *len_out = b.len;
    if (!b.data && mu_buf_append(&b, "", 0, err) != 0)
        return NULL;
    return mu_buf_take(&b);
}

/* SIGHUP, SIGINT and SIGPIPE ignored: a shim's end is its task's (or the worker's), not a
 * terminal's or a closed pipe's. */
static void ignore_hangups(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGHUP, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGPIPE, &sa, NULL);
}

/* SIGCHLD's disposition: the server's children are reaped by the kernel, a shim's task is not. */
static void sigchld_set(void (*handler)(int), int flags)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGCHLD, &sa, NULL);
}

/* SIGTERM and SIGCHLD stay pending for supervise's sigtimedwait (the task's child resets its
 * mask before exec); a SIGTERM that comes before the task runs is passed on once it does. */
static void signals_setup(sigset_t *waited)
{
    ignore_hangups();
    (void)sigemptyset(waited);
    (void)sigaddset(waited, SIGTERM);
    (void)sigaddset(waited, SIGCHLD);
    (void)sigprocmask(SIG_BLOCK, waited, NULL);
}

static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        (void)close(fds[i]);
}

/* Starts the task; fills spec->rec's pids; -1 with err and *fault. */
static int start_task(struct wrk_shim_spec *spec,
                      const char *base,
                      enum wrk_fault *fault,
                      struct mu_err *err)
{
    struct wrk_spawn s;
    char path[PROTO_PATH_MAX + 16];
    int cg_fds[WRK_CG_NCTRL];
    int ncg = 0;
    char *text = NULL;
    pid_t pid;
    int rc = -1;

    memset(&s, 0, sizeof(s));
    s.argv = spec->argv;
    s.envp = spec->envp;
    s.workdir = spec->workdir;
    s.fd_stdin = -1;
    s.fd_stdout = 1;
    s.fd_stderr = 2;
    s.new_pgrp = true;
    s.not_after_ms = spec->not_after_ms;
    s.single_threaded = true;
    *fault = WRK_FAULT_NODE;
    if (spec->user) {
        s.set_ids = true;
        s.uid = (uid_t)spec->uid;
        s.gid = (gid_t)spec->gid;
        s.groups = spec->groups;
        s.ngroups = spec->ngroups;
    }
    if (spec->cg.version) {
        /* The task's orphans (a daemon's double fork) are ours to reap, not init's. */
        if (wrk_cg_task_create(&spec->cg, cg_fds, &ncg, err) != 0)
            return -1;
        if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
            mu_errf(err, MU_E_SYS, "cannot become the task's subreaper: %s", strerror(errno));
            close_fds(cg_fds, ncg);
            wrk_cg_task_remove(&spec->cg);
            return -1;
        }
        s.cg_fds = cg_fds;
        s.ncg_fds = ncg;
    }
    if (wrk_spawn_start(&s, &pid, fault, err) != 0) {
        close_fds(cg_fds, ncg);
        if (ncg > 0)
            wrk_cg_task_remove(&spec->cg);
        return -1;
    }
    close_fds(cg_fds, ncg);
    *fault = WRK_FAULT_NODE;
    spec->rec.ref.pid = (int)pid;
    spec->rec.ref.state = PROTO_TASK_RUNNING;
    spec->rec.shim_pid = (int)getpid();
    spec->rec.shim_start = wrk_proc_start(0);
    spec->rec.started_ms = mu_time_wall_ms();
    text = wrk_taskrec_format(&spec->rec, err);
    if (!text || mu_snprintf(path, sizeof(path), "%s" WRK_TASKREC_SUFFIX, base) != 0
        || wrk_file_write_atomic(path, text, strlen(text), err) != 0) {
        if (text)
            mu_err_prefix(err, "cannot keep the task's record: ");
        /* Untracked, the task could outlive everyone's knowledge of it: stop it now. */
        (void)kill(-pid, SIGKILL);
        wrk_cg_task_kill(&spec->cg, pid);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        wrk_cg_task_remove(&spec->cg);
        goto out;
    }
    rc = 0;
out:
    free(text);
    return rc;
}

/* Where self-fencing stands. */
enum fence_step {
    FENCE_NONE = 0, /* the lease holds (or there is none) */
    FENCE_TERM_DUE, /* checkpoint signal sent: SIGTERM at `at_ms` */
    FENCE_KILL_DUE, /* SIGTERM sent: SIGKILL at `at_ms` */
    FENCE_DONE,     /* SIGKILL sent */
};

struct fence {
    enum fence_step step;
    uint64_t at_ms; /* monotonic: when the next step is due */
};

/*
 * Checks the lease and takes the fencing steps due at now; lowers *wake_ms to the next moment
 * something is due.  Each step is said on stderr, the task's .err log.
 */
static void fence_turn(const struct wrk_shim_spec *spec,
                       const struct wrk_lease *lease,
                       struct fence *f,
                       uint64_t now,
                       uint64_t *wake_ms)
{
    pid_t pid = (pid_t)spec->rec.ref.pid;
    int grace_s = spec->rec.grace_s;
    uint64_t until = 0;

    if (f->step == FENCE_NONE) {
        if (lease)
            wrk_lease_read(lease, NULL, &until);
        if (until == 0)
            return; /* no lease: nothing to hold */
        if (now < until) {
            if (until < *wake_ms)
                *wake_ms = until;
            return;
        }
        if (spec->rec.ckpt_signal > 0) {
            (void)kill(-pid, spec->rec.ckpt_signal);
            f->step = FENCE_TERM_DUE;
            f->at_ms = now + (uint64_t)(grace_s > 0 ? grace_s : 0) * 1000u;
            say("self-fencing: the node's lease ran out %" PRIu64
                " ms ago (not renewed: the scheduler or the worker is gone): sent %s to group %d, "
                "SIGTERM in %d s",
                now - until, mu_signal_name(spec->rec.ckpt_signal), (int)pid, grace_s);
        } else {
            (void)kill(-pid, SIGTERM);
            f->step = FENCE_KILL_DUE;
            f->at_ms = now + WRK_FENCE_TERM_GRACE_MS;
            say("self-fencing: the node's lease ran out %" PRIu64
                " ms ago (not renewed: the scheduler or the worker is gone): sent SIGTERM to group "
                "%d, SIGKILL in %d s",
                now - until, (int)pid, WRK_FENCE_TERM_GRACE_MS / 1000);
        }
    }
    if (f->step == FENCE_TERM_DUE && now >= f->at_ms) {
        (void)kill(-pid, SIGTERM);
        f->step = FENCE_KILL_DUE;
        f->at_ms = now + WRK_FENCE_TERM_GRACE_MS;
        say("self-fencing: checkpoint grace over: sent SIGTERM to group %d, SIGKILL in %d s",
            (int)pid, WRK_FENCE_TERM_GRACE_MS / 1000);
    }
    if (f->step == FENCE_KILL_DUE && now >= f->at_ms) {
        (void)kill(-pid, SIGKILL);
        f->step = FENCE_DONE;
        say("self-fencing: still running: sent SIGKILL to group %d", (int)pid);
    }
    if ((f->step == FENCE_TERM_DUE || f->step == FENCE_KILL_DUE) && f->at_ms < *wake_ms)
        *wake_ms = f->at_ms;
}

/* Reaps the task's orphans the shim adopted as their subreaper, until it meets the leader. */
static void reap_adopted(pid_t leader)
{
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0
            || si.si_pid == leader)
            return;
        (void)waitpid(si.si_pid, NULL, 0);
    }
}

/*
 * Waits for the task's leader while holding the lease, kills what is left of its group, records
 * the exit, reaps.  waited: SIGTERM and SIGCHLD, blocked since the start.
 */
static int supervise(const struct wrk_shim_spec *spec,
                     const char *base,
                     const struct wrk_lease *lease,
                     const sigset_t *waited)
{
    pid_t pid = (pid_t)spec->rec.ref.pid;
    struct fence f = { FENCE_NONE, 0 };
    struct wrk_taskexit x;
    struct mu_err err;
    char path[PROTO_PATH_MAX + 16];
    char line[160];
    bool forwarded = false;
    siginfo_t si;

    for (;;) {
        struct timespec ts;
        uint64_t now;
        uint64_t wake;
        int sig;

        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG) != 0) {
            if (errno == EINTR)
                continue;
            say("waitid: %s", strerror(errno));
            return 1;
        }
        if (si.si_pid == pid)
            break;
        if (spec->cg.version)
            reap_adopted(pid);
        now = mu_time_mono_ms();
        wake = now + LEASE_CHECK_MS;
        fence_turn(spec, lease, &f, now, &wake);
        if (wake <= now)
            continue;
        ts.tv_sec = (time_t)((wake - now) / 1000u);
        ts.tv_nsec = (long)((wake - now) % 1000u) * 1000000L;
        sig = sigtimedwait(waited, NULL, &ts);
        if (sig == SIGTERM && !forwarded) {
            forwarded = true;
            (void)kill(-pid, SIGTERM);
        }
        /* SIGCHLD, a timeout (EAGAIN) or EINTR: the top of the loop looks again. */
    }
    /* The leader is a zombie: its pid, and so its group id, is still ours. */
    (void)kill(-pid, SIGKILL);
    /* Whatever left the group (setsid, a double fork) is still in the cgroup: the exit file,
     * which frees the task's GPUs, waits until none of it is left. */
    wrk_cg_task_kill(&spec->cg, pid);
    wrk_taskexit_from_siginfo(si.si_code, si.si_status, &x);
    x.ended_ms = mu_time_wall_ms();
    x.fenced = f.step != FENCE_NONE;
    x.oom_killed = wrk_cg_task_oom(&spec->cg);
    mu_err_clear(&err);
    if (wrk_taskexit_format(&x, line, sizeof(line), &err) != 0
        || mu_snprintf(path, sizeof(path), "%s" WRK_TASKEXIT_SUFFIX, base) != 0
        || wrk_file_write_atomic(path, line, strlen(line), &err) != 0)
        say("cannot record the exit of pid %d: %s", (int)pid, err.msg);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (spec->cg.version) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        } /* the killed orphans we adopted */
        wrk_cg_task_remove(&spec->cg);
    }
    return 0;
}

/* The lease record the spec names, or NULL (said on stderr: the task then is not fenced). */
static struct wrk_lease *lease_open(const struct wrk_shim_spec *spec)
{
    struct wrk_lease *lease;
    struct mu_err err;

    if (!spec->lease_path || !spec->lease_path[0])
        return NULL;
    mu_err_clear(&err);
    lease = wrk_lease_new(spec->lease_path, false, &err);
    if (!lease)
        say("cannot use the lease record: %s; this task will not be stopped when the node loses "
            "its scheduler",
            err.msg);
    return lease;
}

/*
 * Supervises one task: base is its record path less ".json"; stdin holds the spec, stdout and
 * stderr are its logs, REPORT_FD the worker's pipe.  The exit status of the shim.
 */
static int shim_main(const char *base)
{
    struct wrk_shim_spec spec;
    struct wrk_lease *lease = NULL;
    enum wrk_fault fault = WRK_FAULT_NODE;
    struct mu_err err;
    sigset_t waited;
    char line[96];
    char *data = NULL;
    size_t len = 0;
    int null_fd;
    int rc = 1;

    memset(&spec, 0, sizeof(spec));
    (void)fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC); /* the task must not hold the worker's pipe */
    signals_setup(&waited);
    if (setsid() < 0)
        say("setsid: %s (continuing in the worker's session)", strerror(errno));

    mu_err_clear(&err);
    data = read_spec(&len, &err);
    if (!data || wrk_shim_spec_decode(data, len, &spec, &err) != 0) {
        report_err(&err, WRK_FAULT_NODE); /* the worker's spec: not the job's doing */
        goto out;
    }
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) {
        (void)dup2(null_fd, 0); /* the spec file is not the task's stdin either way */
        (void)close(null_fd);
    }
    if (start_task(&spec, base, &fault, &err) != 0) {
        report_err(&err, fault);
        goto out;
    }
    lease = lease_open(&spec); /* the start itself is bounded by the spec's deadline */
    (void)mu_snprintf(line, sizeof(line), "OK %d %d %" PRIu64 "\n", spec.rec.ref.pid,
                      spec.rec.shim_pid, spec.rec.shim_start);
    report(line);
    (void)close(REPORT_FD);
    rc = supervise(&spec, base, lease, &waited);
out:
    wrk_lease_free(lease);
    wrk_shim_spec_release(&spec);
    free(data);
    return rc;
}

/* ---- the server: one supervisor per task, forked rather than executed ---- */

enum { SERVE_SPEC, SERVE_OUT, SERVE_ERR, SERVE_REPORT, SERVE_NFDS };

/*
 * One request from the worker: the record base, with the spec, the two logs and the report
 * pipe as SCM_RIGHTS.  1 with base and fds[] filled; 0 when the worker has gone (end of file);
 * -1 for a request of another shape (what came with it closed).
 */
static int serve_recv(int sock, char *base, size_t size, int fds[SERVE_NFDS])
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * SERVE_NFDS)];
    } ctl;
    struct iovec iov = { base, size - 1 };
    struct msghdr mh;
    struct cmsghdr *c;
    int got = 0;
    ssize_t n;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    do {
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
        return 0;
    base[n] = '\0';
    for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            if (k > SERVE_NFDS - got)
                k = SERVE_NFDS - got;
            memcpy(fds + got, CMSG_DATA(c), (size_t)k * sizeof(int));
            got += k;
        }
    }
    if (got == SERVE_NFDS && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && base[0]
        && strlen(base) == (size_t)n)
        return 1;
    close_fds(fds, got);
    return -1;
}

/* The supervisor's pid, or -errno: the worker's answer to a request. */
static bool serve_answer(int sock, int32_t v)
{
    return send(sock, &v, sizeof(v), MSG_NOSIGNAL) == (ssize_t)sizeof(v);
}

/*
 * muster-shim --serve: started once by the worker, with a SOCK_SEQPACKET socket as fd 3.  For
 * each request it forks a supervisor that becomes what an executed shim is (fds 0-3 in place,
 * then shim_main), which spares each task start an exec and the C library's start-up.  The
 * supervisors leave its session as executed shims do, so they outlive it and the worker; they
 * are reaped by the kernel (SIGCHLD ignored here, and set back in each).  It ends when the
 * worker closes the socket.
 */
static int serve(void)
{
    char base[PROTO_PATH_MAX];
    int fds[SERVE_NFDS];
    int sock = REPORT_FD;

    ignore_hangups();
    sigchld_set(SIG_IGN, SA_NOCLDWAIT);
    (void)fcntl(sock, F_SETFD, FD_CLOEXEC);
    for (;;) {
        int r = serve_recv(sock, base, sizeof(base), fds);
        int32_t answer;
        pid_t pid;
        if (r == 0)
            return 0;
        if (r < 0) {
            if (!serve_answer(sock, -EPROTO))
                return 0;
            continue;
        }
        pid = fork();
        answer = pid > 0 ? (int32_t)pid : -(int32_t)errno;
        if (pid == 0) {
            sigchld_set(SIG_DFL, 0); /* its task is waited for */
            (void)close(sock);
            for (int i = 0; i < SERVE_NFDS; i++) {
                (void)dup2(fds[i], i); /* received above 3: 0-3 were taken */
                (void)close(fds[i]);
            }
            exit(shim_main(base));
        }
        close_fds(fds, SERVE_NFDS);
        if (!serve_answer(sock, answer))
            return 0;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2 || !argv[1][0] || fcntl(REPORT_FD, F_GETFD) < 0) {
        (void)fprintf(stderr, "usage: " WRK_SHIM_NAME " RECORD-BASE | --serve"
                              "  (started by muster-worker, not by hand)\n");
        return 2;
    }
    if (strcmp(argv[1], "--serve") == 0)
        return serve();
    return shim_main(argv[1]);
}

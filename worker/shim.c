/* SPDX-License-Identifier: MIT */
/*
 * muster-shim: the per-task supervisor (issue #5 "worker crash or restart"), as container shims
 * are for containers.  The worker starts one per task:
 *
 *     muster-shim <state-dir>/tasks/<job>.<attempt>.<task>    (stdin: spec, fd 3: report pipe)
 *
 * It leaves the worker's session (setsid), so that neither the worker's death nor a signal to
 * the worker's process group reaches it; starts the task in the task's own process group with
 * spawn.c (as another user when the spec says so); writes the record <base>.json and says
 * "OK <pid>" on fd 3, or "ERR <code> <message>" when the task could not start; then waits for
 * the task and writes its true exit status to <base>.exit.  Both files are written to a temp
 * file and renamed.  The leader's exit is observed with waitid(WNOWAIT), and the rest of its
 * group is killed before the leader is reaped: while the zombie holds the pid, the group id
 * cannot be reused by a stranger.
 *
 * Its stdout and stderr are the task's log files, so its own rare complaints land there.  Its
 * argv names the task, which is how a restarted worker recognises it (/proc/PID/cmdline).
 * SIGTERM to the shim is passed on to the task's group; SIGHUP, SIGINT and SIGPIPE are ignored.
 */
/* getgrouplist is not in POSIX: ask glibc for its default (BSD/SVID) declarations as well. */
#define _DEFAULT_SOURCE 1 /* NOLINT(bugprone-reserved-identifier): the libc's own switch */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

#define REPORT_FD  3
#define MAX_GROUPS 1024

static volatile sig_atomic_t term_requested;

static void on_term(int sig)
{
    (void)sig;
    term_requested = 1;
}

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

static void report_err(const struct mu_err *err)
{
    char line[384];
    (void)mu_snprintf(line, sizeof(line), "ERR %d %s\n", err->code, err->msg);
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

static void signals_setup(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGHUP, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGPIPE, &sa, NULL);
    sa.sa_handler = on_term;
    sa.sa_flags = 0; /* no SA_RESTART: waitid must return EINTR so that the signal is passed on */
    (void)sigaction(SIGTERM, &sa, NULL);
}

/* Starts the task; fills spec->rec's pids; -1 with err. */
static int start_task(struct wrk_shim_spec *spec, const char *base, struct mu_err *err)
{
    gid_t groups[MAX_GROUPS];
    int ngroups = MAX_GROUPS;
    struct wrk_spawn s;
    char path[PROTO_PATH_MAX + 16];
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
    if (spec->user) {
        /* Looked up here, in a single-threaded process, so that the child only makes system
         * calls between fork and exec. */
        if (getgrouplist(spec->user, (gid_t)spec->gid, groups, &ngroups) < 0)
            return mu_errf(err, MU_E_SYS, "user '%s' is in more than %d groups", spec->user,
                           MAX_GROUPS);
        s.set_ids = true;
        s.uid = (uid_t)spec->uid;
        s.gid = (gid_t)spec->gid;
        s.groups = groups;
        s.ngroups = ngroups;
    }
    if (wrk_spawn_start(&s, &pid, err) != 0)
        return -1;
    spec->rec.ref.pid = (int)pid;
    spec->rec.ref.state = PROTO_TASK_RUNNING;
    spec->rec.shim_pid = (int)getpid();
    spec->rec.started_ms = mu_time_wall_ms();
    text = wrk_taskrec_format(&spec->rec, err);
    if (!text || mu_snprintf(path, sizeof(path), "%s.json", base) != 0
        || wrk_file_write_atomic(path, text, strlen(text), err) != 0) {
        if (text)
            mu_err_prefix(err, "cannot keep the task's record: ");
        /* Untracked, the task could outlive everyone's knowledge of it: stop it now. */
        (void)kill(-pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        goto out;
    }
    rc = 0;
out:
    free(text);
    return rc;
}

/* Waits for the task's leader, kills what is left of its group, records the exit, reaps. */
static int supervise(const struct wrk_shim_spec *spec, const char *base)
{
    pid_t pid = (pid_t)spec->rec.ref.pid;
    struct wrk_taskexit x;
    struct mu_err err;
    char path[PROTO_PATH_MAX + 16];
    char line[160];
    bool forwarded = false;
    siginfo_t si;

    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0)
            break;
        if (errno != EINTR) {
            say("waitid: %s", strerror(errno));
            return 1;
        }
        if (term_requested && !forwarded) {
            forwarded = true;
            (void)kill(-pid, SIGTERM);
        }
    }
    /* The leader is a zombie: its pid, and so its group id, is still ours. */
    (void)kill(-pid, SIGKILL);
    wrk_taskexit_from_siginfo(si.si_code, si.si_status, &x);
    x.ended_ms = mu_time_wall_ms();
    mu_err_clear(&err);
    if (wrk_taskexit_format(&x, line, sizeof(line), &err) != 0
        || mu_snprintf(path, sizeof(path), "%s.exit", base) != 0
        || wrk_file_write_atomic(path, line, strlen(line), &err) != 0)
        say("cannot record the exit of pid %d: %s", (int)pid, err.msg);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct wrk_shim_spec spec;
    struct mu_err err;
    char line[32];
    char *data = NULL;
    size_t len = 0;
    int null_fd;
    int rc = 1;

    memset(&spec, 0, sizeof(spec));
    if (argc != 2 || !argv[1][0] || fcntl(REPORT_FD, F_GETFD) < 0) {
        (void)fprintf(stderr, "usage: " WRK_SHIM_NAME
                              " RECORD-BASE  (started by muster-worker, not by hand)\n");
        return 2;
    }
    (void)fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC); /* the task must not hold the worker's pipe */
    signals_setup();
    if (setsid() < 0)
        say("setsid: %s (continuing in the worker's session)", strerror(errno));

    mu_err_clear(&err);
    data = read_spec(&len, &err);
    if (!data || wrk_shim_spec_decode(data, len, &spec, &err) != 0) {
        report_err(&err);
        goto out;
    }
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) {
        (void)dup2(null_fd, 0); /* the spec file is not the task's stdin either way */
        (void)close(null_fd);
    }
    if (start_task(&spec, argv[1], &err) != 0) {
        report_err(&err);
        goto out;
    }
    (void)mu_snprintf(line, sizeof(line), "OK %d\n", spec.rec.ref.pid);
    report(line);
    (void)close(REPORT_FD);
    rc = supervise(&spec, argv[1]);
out:
    wrk_shim_spec_release(&spec);
    free(data);
    return rc;
}

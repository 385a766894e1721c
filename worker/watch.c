/* SPDX-License-Identifier: MIT */
/*
 * The worker's one inotify fd, apart from what it wakes (issue #41: it calls both the checkpoint
 * reports and the exit files, which must not call back): on <state-dir>/ckpt, where a task
 * closes or renames its checkpoint file (ckpt_watch.c reports it), and on <run-dir>/tasks, where
 * shims rename their record and exit files into place (exits.c reads them).  Without inotify the
 * loop polls both instead (agent.c).
 */
#include "worker/internal.h"

#include <errno.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "common/mu_banned.h"

/* The running task whose checkpoint file is named `name` (inside ckpt/), checked. */
static void ckpt_check_name(struct wrk_agent *a, const char *name)
{
    for (int i = 0; i < a->ntasks; i++) {
        struct wrk_task *t = &a->tasks[i];
        char want[PROTO_JOB_MAX + 32];
        if (t->rec.ref.state != PROTO_TASK_RUNNING)
            continue;
        (void)mu_snprintf(want, sizeof(want), "%s.%d.%d", t->rec.ref.job, t->rec.ref.attempt,
                          t->rec.ref.task);
        if (strcmp(want, name) == 0) {
            wrk_ckpt_check(a, t);
            return;
        }
    }
}

void wrk_watch_start(struct wrk_agent *a)
{
    char ckpt[PROTO_PATH_MAX + 8];
    char tasks[PROTO_PATH_MAX + 8];

    (void)mu_snprintf(ckpt, sizeof(ckpt), "%s/ckpt", a->state_dir);
    (void)mu_snprintf(tasks, sizeof(tasks), "%s/tasks", a->run_dir);
    a->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (a->ino_fd >= 0) {
        a->ckpt_wd = inotify_add_watch(a->ino_fd, ckpt, IN_CLOSE_WRITE | IN_MOVED_TO);
        a->tasks_wd = a->ckpt_wd >= 0 ? inotify_add_watch(a->ino_fd, tasks, IN_MOVED_TO) : -1;
        if (a->ckpt_wd >= 0 && a->tasks_wd >= 0)
            return;
    }
    mu_log(MU_LOG_WARN, WRK_MOD,
           "node=%s cannot watch '%s' and '%s' with inotify: %s; reading checkpoint and exit "
           "files every %d ms instead",
           a->node, ckpt, tasks, strerror(errno), WRK_CKPT_POLL_MS);
    if (a->ino_fd >= 0)
        (void)close(a->ino_fd);
    a->ino_fd = -1;
}

/*
 * Drains the inotify fd: an event in ckpt/ names a checkpoint file that was written or renamed
 * there; one in tasks/ means a shim renamed a record or an exit file into place.
 */
void wrk_watch_events(struct wrk_agent *a)
{
    char buf[4096];
    bool overflow = false;
    bool exits = false;
    ssize_t n;

    while ((n = read(a->ino_fd, buf, sizeof(buf))) > 0) {
        size_t off = 0;
        while (off + sizeof(struct inotify_event) <= (size_t)n) {
            struct inotify_event ev;
            char name[256];
            memcpy(&ev, buf + off, sizeof(ev)); /* buf is not aligned for the struct */
            off += sizeof(ev);
            if (ev.len > (size_t)n - off)
                break; /* cannot happen: the kernel returns whole events */
            if (ev.mask & IN_Q_OVERFLOW) {
                overflow = true;
            } else if (ev.wd == a->tasks_wd) {
                exits = true;
            } else if (ev.len > 0) {
                size_t len = ev.len < sizeof(name) ? ev.len : sizeof(name) - 1;
                memcpy(name, buf + off, len);
                name[len] = '\0';
                ckpt_check_name(a, name);
            }
            off += ev.len;
        }
    }
    if (overflow)
        wrk_ckpt_check_running(a); /* events were lost: look at every file */
    if (overflow || exits)
        wrk_exits_read(a);
}

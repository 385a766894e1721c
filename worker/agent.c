/* SPDX-License-Identifier: MIT */
/*
 * The worker's loop (DESIGN §7): one DEALER to the scheduler, one self-pipe for signals, one
 * table of tasks, all driven from a single zmq_poll.
 *
 * Invariants and why:
 * - Every command is keyed by (job, task, attempt) and idempotent: a repeated BIND re-sends the
 *   BIND_ACK, a repeated KILL re-signals, a KILL of an exited task forgets it (the scheduler's
 *   acknowledgement of the exit).
 *   The scheduler may retry anything after a reconnect without starting a task twice.
 * - Exited tasks stay in the table (and in every HELLO) until the scheduler acknowledges them
 *   with a KILL, which it sends once the attempt's outcome is stored, so an exit is never lost;
 *   an unacknowledged exit is repeated (2 s, doubling to 60 s); the oldest are evicted beyond
 *   WRK_MAX_EXITED.
 * - Epoch fencing: the highest epoch seen wins; a command from an older epoch comes from a
 *   scheduler that has been replaced and is ignored.
 * - Signals (SIGCHLD, SIGTERM, SIGINT) only write a byte to a non-blocking pipe; libzmq's
 *   threads may take them, and the pipe wakes zmq_poll whichever thread did.
 * - A task is its process group: signals go to the group, and when the leader exits the rest of
 *   its group is killed so that nothing it left behind keeps holding GPUs.
 * - Checkpoints (DESIGN §3): inotify on <state-dir>/ckpt wakes the loop when a task closes or
 *   renames its checkpoint file (a 1 s poll of the running tasks' files when inotify is not
 *   available), and the file is read once more when the task is reaped, before its TASK_STATUS,
 *   so a checkpoint written just before exit is reported first.  One CHECKPOINT_DONE per
 *   distinct path per task.
 * - Spot notices (DESIGN §5): imds.c's sockets share the zmq_poll; its notices become
 *   SPOT_NOTICE / REBALANCE, and the latest of each is repeated after every HELLO so that a
 *   scheduler that restarted (or missed them while away) still learns them.
 * - Tasks outlive the worker (issue #5): each runs under a muster-shim (shim.c) in its own
 *   session, which records the task in <state-dir>/tasks/<job>.<attempt>.<task>.json and its
 *   true exit status in .exit.  The worker learns exits from those files (inotify on tasks/,
 *   a reaped shim, and a 1 s sweep that also notices a dead re-adopted shim), never from a
 *   shim's own status.  On start it reads the records back: an exit file means EXITED, a live
 *   shim (checked by /proc/PID/cmdline) is re-adopted as RUNNING, anything else is LOST; all go
 *   out in the first HELLO.  A record is deleted when the scheduler's KILL acknowledges the
 *   exit, so the directory stays bounded.
 * - The lease (DESIGN §5, protocol/README.md "The lease and stale commands"): every HELLO and
 *   HEARTBEAT carries echo_ms, our monotonic clock; the scheduler's answer carries it back with
 *   lease_s (its node_lost_after_s), and the lease then holds until echo_ms + lease_s, since the
 *   scheduler cannot judge us lost before.  Only such an answer renews it (an answer that sat in
 *   the socket while we were frozen renews nothing, and never shortens a newer one).  The lease
 *   lives in <state-dir>/lease (lease.c), which each shim reads: once it runs out the shims stop
 *   their tasks by themselves (checkpoint signal, grace, SIGTERM, SIGKILL) and record the exits
 *   as fenced, so the scheduler requeues rather than counts a failure; a dead worker's tasks
 *   stop too.  A restarted worker keeps the lease it finds until the first answer sets it.
 * - Stale commands (stale.c): a BIND is refused (node_fault) when we do not hold the lease,
 *   when the scheduler's clock, bounded from below by the sent_ms of its messages, is past the
 *   BIND's expires_ms, or when a KILL of the same task came first; the shim gets the earlier of
 *   the lease's end and that expiry as a deadline it checks right before exec.
 * - Identity (issue #5): a root worker runs tasks as --run-as USER, or as the job's user
 *   (the BIND's job_user) when --allow-user lists it, and as root only with
 *   --allow-root; the shim switches ids in the task's child before exec.
 */
#include "worker/wrk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/mu_banned.h"

#define MOD             "wrk"
#define RECV_PER_TURN   256  /* messages handled per turn before timers get a look in */
#define CLOSE_LINGER_MS 500  /* bounded flush of the last TASK_STATUS messages at exit */
#define CKPT_POLL_MS    1000 /* checkpoint files re-read this often without inotify */
#define IMDS_MAX_FDS    8
#define EXIT_POLL_MS    1000  /* exit files and re-adopted shims are checked this often */
#define STOP_WAIT_MS    2000  /* after the shutdown's SIGKILL, the wait for exit files */
#define RESEND_FIRST_MS 2000  /* an unacknowledged exit is sent again after this, */
#define RESEND_MAX_MS   60000 /* doubling up to this */
#define MAX_ALLOW_USERS 64

struct wrk_task {
    struct proto_task_ref ref; /* state RUNNING, EXITED or LOST; pid = process group id */
    int shim_pid;              /* the task's muster-shim */
    bool adopted;              /* the shim is not our child: re-adopted after a restart */
    int ckpt_signal;           /* from BIND (or the record); 0 = not checkpointable */
    int grace_s;
    int uid;                /* the task's uid when it is not the worker's; -1 = the worker's own */
    uint64_t exit_order;    /* when EXITED or LOST: larger is newer (eviction, HELLO order) */
    uint64_t kill_at_ms;    /* monotonic; 0 = no SIGKILL pending */
    uint64_t resend_at_ms;  /* monotonic: EXITED and not acknowledged: TASK_STATUS again then */
    uint32_t resend_gap_ms; /* the wait before that */
    char *ckpt_last;        /* owned: the last checkpoint path reported, or NULL */
    char *ckpt_missing;     /* owned: the last reported path found missing here, or NULL */
    uint64_t ckpt_at_ms;    /* wall ms it was written */
};

/* A user tasks run as. */
struct wrk_ident {
    char name[64]; /* "" = none */
    char home[PROTO_PATH_MAX];
    uid_t uid;
    gid_t gid;
};

struct wrk_agent {
    char scheduler[256];
    char node[PROTO_NODE_MAX];
    char pool[PROTO_NODE_MAX];
    char state_dir[PROTO_PATH_MAX];
    char addr[128];
    int cpus;
    int64_t memory_mb;
    int nlabels;
    struct proto_label labels[PROTO_MAX_LABELS];
    int ngpus;
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    int nislands; /* NVLink islands among gpus: island numbers are 0..nislands-1 */
    bool simulated;

    void *zctx;
    void *sock;

    struct wrk_task *tasks; /* owned; ntasks used of cap */
    int ntasks;
    int cap;
    int nrunning;
    int nexited;
    uint64_t exit_counter;

    uint64_t epoch;      /* highest scheduler epoch seen */
    uint64_t seq;        /* last seq this worker sent */
    uint64_t last_rx_ms; /* monotonic time of the last message from the scheduler */
    uint64_t last_beat_ms;
    bool hello_sent;
    bool quiet; /* "scheduler unreachable" logged, "scheduler back" not yet */
    bool stop;

    uint64_t ckpt_poll_ms; /* monotonic time of the last poll (without inotify) */
    uint64_t exit_poll_ms; /* monotonic time of the last sweep of exit files */
    int ino_fd;            /* inotify on <state_dir>/ckpt and tasks; -1 = poll every 1 s */
    int ckpt_wd;           /* inotify watch on ckpt/ */
    int tasks_wd;          /* inotify watch on tasks/ */
    int nallow;            /* allow[0..nallow-1]: --allow-user */
    int heartbeat_s;       /* the interval the scheduler asked for */
    bool is_root;
    bool allow_root;
    bool lease_out;            /* the lease ran out: logged, and not renewed since */
    bool loading;              /* reading the records at start: the first HELLO reports them */
    char shim[PROTO_PATH_MAX]; /* the muster-shim program */
    struct wrk_ident run_as;   /* --run-as; name "" = none */
    char allow[MAX_ALLOW_USERS][64];

    struct wrk_imds *imds; /* owned; NULL without --imds */
    bool identity_applied;
    bool have_spot;
    struct wrk_imds_event spot; /* the latest notice, repeated after each HELLO */
    bool have_rebalance;
    struct wrk_imds_event rebalance;

    struct wrk_lease *lease;            /* owned: <state_dir>/lease, shared with the shims */
    struct wrk_sched_clock sched_clock; /* lower bound of the scheduler's clock */
    struct wrk_tombs tombs;             /* tasks a KILL gave up before any BIND */
    char lease_path[PROTO_PATH_MAX];    /* handed to each shim */
};

/* ---- signals through a self-pipe ---- */

static int sig_pipe[2] = { -1, -1 };
static const int handled_signals[] = { SIGCHLD, SIGTERM, SIGINT };
static struct sigaction saved_actions[MU_ARRAY_LEN(handled_signals)];

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char byte = (unsigned char)sig;
    ssize_t n = write(sig_pipe[1], &byte, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved;
}

static void signals_restore(void)
{
    for (size_t i = 0; i < MU_ARRAY_LEN(handled_signals); i++)
        (void)sigaction(handled_signals[i], &saved_actions[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (sig_pipe[i] >= 0)
            (void)close(sig_pipe[i]);
        sig_pipe[i] = -1;
    }
}

static int signals_install(struct mu_err *err)
{
    struct sigaction sa;

    if (sig_pipe[0] >= 0)
        return mu_errf(err, MU_E_STATE, "a worker agent already runs in this process");
    if (pipe(sig_pipe) != 0)
        return mu_errf(err, MU_E_SYS, "cannot create the signal pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(sig_pipe[i], F_GETFL);
        if (fl < 0 || fcntl(sig_pipe[i], F_SETFL, fl | O_NONBLOCK) != 0
            || fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC) != 0) {
            int e = errno;
            signals_restore();
            return mu_errf(err, MU_E_SYS, "cannot set up the signal pipe: %s", strerror(e));
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < MU_ARRAY_LEN(handled_signals); i++)
        (void)sigaction(handled_signals[i], &sa, &saved_actions[i]);
    return 0;
}

/* ---- the task table ---- */

static bool ref_matches(const struct proto_task_ref *a, const struct proto_task_ref *b)
{
    return a->task == b->task && a->attempt == b->attempt && strcmp(a->job, b->job) == 0;
}

static struct wrk_task *task_find(struct wrk_agent *a, const struct proto_task_ref *ref)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (ref_matches(&a->tasks[i].ref, ref))
            return &a->tasks[i];
    }
    return NULL;
}

static struct wrk_task *task_find_shim(struct wrk_agent *a, pid_t pid)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].ref.state == PROTO_TASK_RUNNING && a->tasks[i].shim_pid == (int)pid)
            return &a->tasks[i];
    }
    return NULL;
}

/* "<state>/tasks/<job>.<attempt>.<task><suffix>"; the job id was checked at BIND or load. */
static void rec_path(const struct wrk_agent *a,
                     const struct proto_task_ref *ref,
                     const char *suffix,
                     char *buf,
                     size_t size)
{
    if (wrk_task_path(a->state_dir, "tasks", ref->job, ref->attempt, ref->task, suffix, buf, size,
                      NULL)
        != 0)
        buf[0] = '\0';
}

/* Deletes a task's record files: the scheduler has its exit, nobody needs them again (".fenced":
 * the mark older versions kept beside the record). */
static void rec_remove(const struct wrk_agent *a, const struct proto_task_ref *ref)
{
    static const char *const suffixes[] = { ".json", ".exit", ".json.tmp", ".exit.tmp", ".fenced" };
    char path[PROTO_PATH_MAX + 32];

    for (size_t i = 0; i < MU_ARRAY_LEN(suffixes); i++) {
        rec_path(a, ref, suffixes[i], path, sizeof(path));
        if (path[0] && unlink(path) != 0 && errno != ENOENT)
            mu_log(MU_LOG_WARN, MOD, "job=%s task=%d attempt=%d cannot remove '%s': %s", ref->job,
                   ref->task, ref->attempt, path, strerror(errno));
    }
}

static void task_remove(struct wrk_agent *a, struct wrk_task *t)
{
    int i = (int)(t - a->tasks);
    if (t->ref.state != PROTO_TASK_RUNNING)
        rec_remove(a, &t->ref);
    free(t->ckpt_last);
    t->ckpt_last = NULL;
    free(t->ckpt_missing);
    t->ckpt_missing = NULL;
    if (t->ref.state == PROTO_TASK_RUNNING)
        a->nrunning--;
    else
        a->nexited--;
    a->tasks[i] = a->tasks[a->ntasks - 1];
    a->ntasks--;
}

static struct wrk_task *task_add(struct wrk_agent *a, struct mu_err *err)
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

static void evict_exited(struct wrk_agent *a)
{
    while (a->nexited > WRK_MAX_EXITED) {
        struct wrk_task *oldest = NULL;
        for (int i = 0; i < a->ntasks; i++) {
            struct wrk_task *t = &a->tasks[i];
            if (t->ref.state != PROTO_TASK_RUNNING
                && (!oldest || t->exit_order < oldest->exit_order))
                oldest = t;
        }
        if (!oldest)
            return; /* cannot happen: nexited counts the EXITED entries */
        mu_log(MU_LOG_WARN, MOD, "job=%s task=%d attempt=%d forgotten: more than %d exited tasks",
               oldest->ref.job, oldest->ref.task, oldest->ref.attempt, WRK_MAX_EXITED);
        task_remove(a, oldest);
    }
}

/* ---- sending ---- */

static void agent_send(struct wrk_agent *a, struct proto_msg *m)
{
    struct mu_err err;

    m->seq = ++a->seq;
    m->epoch = a->epoch;
    mu_strlcpy(m->node, a->node, sizeof(m->node));
    if (proto_send(a->sock, NULL, m, &err) != 0)
        mu_log_limited(MU_LOG_WARN, MOD, "wrk-send", 10, "node=%s %s", a->node, err.msg);
    else
        mu_log(MU_LOG_DEBUG, MOD, "node=%s sent %s seq=%" PRIu64, a->node, proto_type_name(m->type),
               m->seq);
}

static int exited_newest_first(const void *x, const void *y)
{
    const struct wrk_task *a = *(const struct wrk_task *const *)x;
    const struct wrk_task *b = *(const struct wrk_task *const *)y;
    return a->exit_order < b->exit_order ? 1 : a->exit_order > b->exit_order ? -1 : 0;
}

static void send_notice(struct wrk_agent *a, enum proto_type type, const struct wrk_imds_event *ev)
{
    struct proto_msg m;
    proto_msg_init(&m, type);
    mu_strlcpy(m.action, ev->action, sizeof(m.action));
    m.deadline_ms = ev->time_ms;
    agent_send(a, &m);
    proto_msg_release(&m);
}

static void send_checkpoint(struct wrk_agent *a, const struct wrk_task *t)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_CHECKPOINT_DONE);
    m.task = t->ref;
    mu_strlcpy(m.path, t->ckpt_last, sizeof(m.path));
    m.at_ms = t->ckpt_at_ms;
    agent_send(a, &m);
    proto_msg_release(&m);
}

/* The tasks for HELLO: every running one, then the newest exited ones, PROTO_MAX_TASKS at most. */
static int hello_tasks(struct wrk_agent *a, struct proto_task_ref **out, struct mu_err *err)
{
    struct proto_task_ref *refs = NULL;
    struct wrk_task **exited = NULL;
    int n = 0;
    int nex = 0;

    *out = NULL;
    if (a->ntasks == 0)
        return 0;
    refs = calloc((size_t)a->ntasks, sizeof(*refs));
    exited = calloc((size_t)a->ntasks, sizeof(struct wrk_task *));
    if (!refs || !exited) {
        free(refs);
        free(exited);
        return mu_errf(err, MU_E_NOMEM, "out of memory for HELLO");
    }
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].ref.state == PROTO_TASK_RUNNING && n < PROTO_MAX_TASKS)
            refs[n++] = a->tasks[i].ref;
        else if (a->tasks[i].ref.state != PROTO_TASK_RUNNING)
            exited[nex++] = &a->tasks[i]; /* EXITED, or LOST after a restart */
    }
    qsort(exited, (size_t)nex, sizeof(struct wrk_task *), exited_newest_first);
    for (int i = 0; i < nex && n < PROTO_MAX_TASKS; i++)
        refs[n++] = exited[i]->ref;
    if (n < a->ntasks)
        mu_log_limited(MU_LOG_WARN, MOD, "wrk-hello-cap", 60,
                       "node=%s HELLO carries %d of %d tasks (the protocol's cap)", a->node, n,
                       a->ntasks);
    free(exited);
    *out = refs;
    return n;
}

static void send_hello(struct wrk_agent *a)
{
    struct proto_msg m;
    struct proto_task_ref *refs = NULL;
    struct mu_err err;
    int n;

    proto_msg_init(&m, PROTO_HELLO);
    m.echo_ms = mu_time_mono_ms(); /* carried back, it renews the lease (handle_heartbeat) */
    mu_strlcpy(m.pool, a->pool, sizeof(m.pool));
    mu_strlcpy(m.addr, a->addr, sizeof(m.addr));
    m.cpus = a->cpus;
    m.memory_mb = a->memory_mb;
    m.nlabels = a->nlabels;
    memcpy(m.labels, a->labels, sizeof(m.labels));
    n = hello_tasks(a, &refs, &err);
    if (n < 0 || proto_msg_set_gpus(&m, a->ngpus, a->gpus, &err) != 0
        || proto_msg_set_tasks(&m, n, refs, &err) != 0) {
        mu_log(MU_LOG_ERROR, MOD, "node=%s cannot build HELLO: %s", a->node, err.msg);
    } else {
        agent_send(a, &m);
        /* While the scheduler is away a HELLO goes out every heartbeat: keep those quiet. */
        mu_log(a->quiet ? MU_LOG_DEBUG : MU_LOG_INFO, MOD,
               "node=%s HELLO to %s: %d GPUs, %d tasks, epoch %" PRIu64, a->node, a->scheduler,
               a->ngpus, n, a->epoch);
    }
    free(refs);
    proto_msg_release(&m);
    a->hello_sent = true;
    a->last_beat_ms = mu_time_mono_ms();
    /* Notices are idempotent for the scheduler: repeat them so that a scheduler which asked
     * who we are cannot miss them.  Not while it is unreachable: those would only pile up. */
    if (a->have_spot && !a->quiet)
        send_notice(a, PROTO_SPOT_NOTICE, &a->spot);
    if (a->have_rebalance && !a->quiet)
        send_notice(a, PROTO_REBALANCE, &a->rebalance);
    /* Checkpoints too: one sent while no scheduler knew this node was dropped, and a restarted
     * scheduler needs the newest to resume a gang it requeues. */
    for (int i = 0; i < a->ntasks && !a->quiet; i++) {
        if (a->tasks[i].ckpt_last)
            send_checkpoint(a, &a->tasks[i]);
    }
}

static void send_heartbeat(struct wrk_agent *a)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.echo_ms = mu_time_mono_ms();
    agent_send(a, &m);
    proto_msg_release(&m);
    a->last_beat_ms = mu_time_mono_ms();
}

static void send_task_status(struct wrk_agent *a, const struct proto_task_ref *ref)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_TASK_STATUS);
    m.task = *ref;
    agent_send(a, &m);
    proto_msg_release(&m);
}

/* error NULL: started; else why not, and whether that is the node's fault (else the job's). */
static void send_bind_ack(struct wrk_agent *a,
                          const struct proto_task_ref *ref,
                          const char *error,
                          bool node_fault)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_BIND_ACK);
    m.task = *ref;
    m.ok = error == NULL;
    m.node_fault = error != NULL && node_fault;
    if (error)
        mu_strlcpy(m.error, error, sizeof(m.error));
    agent_send(a, &m);
    proto_msg_release(&m);
}

/* ---- checkpoints ---- */

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
    mu_log(MU_LOG_WARN, MOD,
           "job=%s task=%d attempt=%d checkpoint '%s' does not exist on node %s: not reported, "
           "not resumed from",
           t->ref.job, t->ref.task, t->ref.attempt, path, a->node);
    (void)mu_snprintf(line, sizeof(line),
                      "muster-worker: the checkpoint path '%s' this task reported does not exist "
                      "on node %s: it is not used to resume; write the checkpoint where the task "
                      "can (a workdir on shared storage), then report it\n",
                      path, a->node);
    if (wrk_task_path(a->state_dir, "logs", t->ref.job, t->ref.attempt, t->ref.task, ".err", log,
                      sizeof(log), NULL)
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
static void ckpt_check(struct wrk_agent *a, struct wrk_task *t)
{
    char file[PROTO_PATH_MAX + 128];
    char path[PROTO_PATH_MAX];
    uint64_t mtime_ms = 0;
    struct mu_err err;
    char *copy;
    int r;

    mu_err_clear(&err);
    if (wrk_task_path(a->state_dir, "ckpt", t->ref.job, t->ref.attempt, t->ref.task, "", file,
                      sizeof(file), &err)
        != 0)
        return; /* bind_start built the same path, so it fits */
    if (t->uid >= 0) {
        /* ckpt/ is open to every task user (sticky, like /tmp): only the task's own file counts,
         * else one user could plant a checkpoint for another's job.  The sticky bit keeps a
         * file, once there, from being replaced by anyone else. */
        struct stat st;
        if (lstat(file, &st) == 0 && st.st_uid != (uid_t)t->uid) {
            mu_log_limited(MU_LOG_WARN, MOD, "wrk-ckpt-owner", 10,
                           "job=%s task=%d attempt=%d ignoring its checkpoint file: owned by uid "
                           "%d, not the task's uid %d",
                           t->ref.job, t->ref.task, t->ref.attempt, (int)st.st_uid, t->uid);
            return;
        }
    }
    r = wrk_ckpt_read(file, path, sizeof(path), &mtime_ms, &err);
    if (r < 0) {
        mu_log_limited(MU_LOG_WARN, MOD, "wrk-ckpt-bad", 10,
                       "job=%s task=%d attempt=%d ignoring its checkpoint file: %s", t->ref.job,
                       t->ref.task, t->ref.attempt, err.msg);
        return;
    }
    if (r == 0 || (t->ckpt_last && strcmp(t->ckpt_last, path) == 0) || ckpt_is_missing(a, t, path))
        return;
    copy = strdup(path);
    if (!copy) {
        mu_log(MU_LOG_ERROR, MOD, "job=%s task=%d attempt=%d out of memory for a checkpoint path",
               t->ref.job, t->ref.task, t->ref.attempt);
        return;
    }
    free(t->ckpt_last);
    t->ckpt_last = copy;
    t->ckpt_at_ms = mtime_ms ? mtime_ms : mu_time_wall_ms();
    if (!a->loading) /* else the first HELLO is followed by it (send_hello) */
        send_checkpoint(a, t);
    mu_log(MU_LOG_INFO, MOD, "job=%s task=%d attempt=%d checkpoint '%s'", t->ref.job, t->ref.task,
           t->ref.attempt, path);
}

static void ckpt_check_running(struct wrk_agent *a)
{
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].ref.state == PROTO_TASK_RUNNING)
            ckpt_check(a, &a->tasks[i]);
    }
}

/* The running task whose checkpoint file is named `name` (inside ckpt/), checked. */
static void ckpt_check_name(struct wrk_agent *a, const char *name)
{
    for (int i = 0; i < a->ntasks; i++) {
        struct wrk_task *t = &a->tasks[i];
        char want[PROTO_JOB_MAX + 32];
        if (t->ref.state != PROTO_TASK_RUNNING)
            continue;
        (void)mu_snprintf(want, sizeof(want), "%s.%d.%d", t->ref.job, t->ref.attempt, t->ref.task);
        if (strcmp(want, name) == 0) {
            ckpt_check(a, t);
            return;
        }
    }
}

static void watch_start(struct wrk_agent *a)
{
    char ckpt[PROTO_PATH_MAX + 8];
    char tasks[PROTO_PATH_MAX + 8];

    (void)mu_snprintf(ckpt, sizeof(ckpt), "%s/ckpt", a->state_dir);
    (void)mu_snprintf(tasks, sizeof(tasks), "%s/tasks", a->state_dir);
    a->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (a->ino_fd >= 0) {
        a->ckpt_wd = inotify_add_watch(a->ino_fd, ckpt, IN_CLOSE_WRITE | IN_MOVED_TO);
        a->tasks_wd = a->ckpt_wd >= 0 ? inotify_add_watch(a->ino_fd, tasks, IN_MOVED_TO) : -1;
        if (a->ckpt_wd >= 0 && a->tasks_wd >= 0)
            return;
    }
    mu_log(MU_LOG_WARN, MOD,
           "node=%s cannot watch '%s' and '%s' with inotify: %s; reading checkpoint and exit "
           "files every %d ms instead",
           a->node, ckpt, tasks, strerror(errno), CKPT_POLL_MS);
    if (a->ino_fd >= 0)
        (void)close(a->ino_fd);
    a->ino_fd = -1;
}

static void exits_scan(struct wrk_agent *a);

/*
 * Drains the inotify fd: an event in ckpt/ names a checkpoint file that was written or renamed
 * there; one in tasks/ means a shim renamed a record or an exit file into place.
 */
static void watch_events(struct wrk_agent *a)
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
        ckpt_check_running(a); /* events were lost: look at every file */
    if (overflow || exits)
        exits_scan(a);
}

/* ---- exits ---- */

static void log_task(enum mu_log_level level, const struct proto_task_ref *ref, const char *what);

/* t ended with x: report it.  Entries do not move (eviction waits for the end of the turn). */
static void task_finish(struct wrk_agent *a, struct wrk_task *t, const struct wrk_taskexit *x)
{
    /* A checkpoint written just before the exit goes out before the exit itself. */
    ckpt_check(a, t);

    t->ref.state = PROTO_TASK_EXITED;
    t->ref.exit_code = x->signal ? 0 : x->exit_code;
    t->ref.signal = x->signal;
    t->ref.fenced = x->fenced; /* however it ended, its shim stopped it: not the task's failure */
    t->exit_order = ++a->exit_counter;
    t->kill_at_ms = 0;
    t->resend_gap_ms = RESEND_FIRST_MS;
    t->resend_at_ms = mu_time_mono_ms() + RESEND_FIRST_MS;
    a->nrunning--;
    a->nexited++;
    if (t->ref.signal)
        mu_log(MU_LOG_INFO, MOD, "job=%s task=%d attempt=%d killed by %s pid=%d", t->ref.job,
               t->ref.task, t->ref.attempt, mu_signal_name(t->ref.signal), t->ref.pid);
    else
        mu_log(MU_LOG_INFO, MOD, "job=%s task=%d attempt=%d exited code=%d pid=%d", t->ref.job,
               t->ref.task, t->ref.attempt, t->ref.exit_code, t->ref.pid);
    if (!a->loading)
        send_task_status(a, &t->ref);
}

/* t's shim is gone without an exit file: nobody knows how the task ended. */
static void task_lost(struct wrk_agent *a, struct wrk_task *t, const char *why)
{
    t->ref.state = PROTO_TASK_LOST;
    t->ref.exit_code = 0;
    t->ref.signal = 0;
    t->exit_order = ++a->exit_counter;
    t->kill_at_ms = 0;
    a->nrunning--;
    a->nexited++;
    mu_log(MU_LOG_WARN, MOD, "job=%s task=%d attempt=%d lost: %s (its process group %d may remain)",
           t->ref.job, t->ref.task, t->ref.attempt, why, t->ref.pid);
    if (!a->loading)
        send_task_status(a, &t->ref);
}

/*
 * Looks for running task t's exit file.  shim_gone: its shim is known to have ended (reaped);
 * a re-adopted shim is looked up in /proc instead.  Returns true when t is no longer running.
 */
static bool exit_check(struct wrk_agent *a, struct wrk_task *t, bool shim_gone)
{
    char path[PROTO_PATH_MAX + 16];
    char base[PROTO_PATH_MAX + 16];
    struct wrk_taskexit x;
    struct mu_err err;
    int r;

    if (t->ref.state != PROTO_TASK_RUNNING)
        return true;
    rec_path(a, &t->ref, ".exit", path, sizeof(path));
    mu_err_clear(&err);
    r = wrk_taskexit_read(path, &x, &err);
    if (r == 0 && !shim_gone && t->adopted) {
        rec_path(a, &t->ref, "", base, sizeof(base));
        if (!wrk_shim_is_running(t->shim_pid, base)) {
            shim_gone = true;
            r = wrk_taskexit_read(path, &x, &err); /* it may have written just before leaving */
        }
    }
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
                          "its supervisor (pid %d) ended without recording an exit", t->shim_pid);
        task_lost(a, t, why);
        return true;
    }
    return false;
}

static void exits_scan(struct wrk_agent *a)
{
    a->exit_poll_ms = mu_time_mono_ms();
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].ref.state == PROTO_TASK_RUNNING)
            (void)exit_check(a, &a->tasks[i], false);
    }
}

/* Reaps our shims; each reaped one's exit file is read at once. */
static void reap(struct wrk_agent *a)
{
    for (;;) {
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        struct wrk_task *t;
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        t = task_find_shim(a, pid);
        if (t)
            (void)exit_check(a, t, true);
    }
}

/* Drains the self-pipe; returns true when SIGTERM or SIGINT arrived. */
static bool drain_signals(void)
{
    unsigned char buf[64];
    bool stop = false;
    ssize_t n;
    while ((n = read(sig_pipe[0], buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            stop = stop || buf[i] == SIGTERM || buf[i] == SIGINT;
    }
    return stop;
}

/* ---- restart: the records left by the previous worker ---- */

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
            mu_log(MU_LOG_WARN, MOD, "node=%s ignoring a task record: %s", a->node, err.msg);
        return;
    }
    (void)mu_snprintf(want, sizeof(want), "%s.%d.%d.json", rec.ref.job, rec.ref.attempt,
                      rec.ref.task);
    if (strcmp(want, name) != 0) {
        mu_log(MU_LOG_WARN, MOD, "node=%s ignoring task record '%s': it describes '%s'", a->node,
               path, want);
        return;
    }
    if (task_find(a, &rec.ref))
        return;
    t = task_add(a, &err);
    if (!t) {
        mu_log(MU_LOG_ERROR, MOD, "node=%s cannot re-adopt '%s': %s", a->node, path, err.msg);
        return;
    }
    t->ref = rec.ref;
    t->shim_pid = rec.shim_pid;
    t->adopted = true;
    t->ckpt_signal = rec.ckpt_signal;
    t->grace_s = rec.grace_s;
    t->uid = rec.uid;
    a->nrunning++;
    rec_path(a, &t->ref, "", base, sizeof(base));
    rec_path(a, &t->ref, ".exit", path, sizeof(path));
    r = wrk_taskexit_read(path, &x, &err);
    if (r == 0 && wrk_shim_is_running(t->shim_pid, base)) {
        mu_log(MU_LOG_INFO, MOD,
               "job=%s task=%d attempt=%d re-adopted: still running, pid=%d shim=%d", t->ref.job,
               t->ref.task, t->ref.attempt, t->ref.pid, t->shim_pid);
        return;
    }
    if (r == 1)
        mu_log(MU_LOG_INFO, MOD, "job=%s task=%d attempt=%d ended while the worker was away",
               t->ref.job, t->ref.task, t->ref.attempt);
    /* Ended (or lost): exit_check records it; the scheduler hears it in the first HELLO. */
    (void)exit_check(a, t, true);
}

/* Reads <state>/tasks: re-adopts, reports, and clears what no record explains. */
static void adopt_records(struct wrk_agent *a)
{
    char dir[PROTO_PATH_MAX + 8];
    char path[PROTO_PATH_MAX + 300];
    struct dirent *de;
    DIR *d;

    (void)mu_snprintf(dir, sizeof(dir), "%s/tasks", a->state_dir);
    d = opendir(dir);
    if (!d) {
        mu_log(MU_LOG_WARN, MOD, "node=%s cannot read '%s': %s", a->node, dir, strerror(errno));
        return;
    }
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (has_suffix(name, ".json")) {
            adopt_one(a, dir, name);
        } else if (strncmp(name, ".spec.", 6) == 0) {
            /* A spec file the worker died before unlinking: nothing reads it any more. */
            (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, name);
            (void)unlink(path);
        } else if (has_suffix(name, ".exit") || has_suffix(name, ".fenced")) {
            /* An exit (or an older version's .fenced mark) without a record: its record was
             * acknowledged and removed. */
            struct stat st;
            int stem = (int)(strrchr(name, '.') - name); /* the name less its suffix */
            (void)mu_snprintf(path, sizeof(path), "%s/%.*s.json", dir, stem, name);
            if (stat(path, &st) != 0 && errno == ENOENT) {
                (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, name);
                (void)unlink(path);
            }
        }
    }
    (void)closedir(d);
    if (a->ntasks > 0)
        mu_log(MU_LOG_INFO, MOD,
               "node=%s found %d task record(s) from before: %d running, %d ended or lost", a->node,
               a->ntasks, a->nrunning, a->nexited);
}

/* ---- commands ---- */

static void log_task(enum mu_log_level level, const struct proto_task_ref *ref, const char *what)
{
    mu_log(level, MOD, "job=%s task=%d attempt=%d %s", ref->job, ref->task, ref->attempt, what);
}

/* Looks a user up; MU_E_NOTFOUND for an unknown one. */
static int ident_lookup(const char *name, struct wrk_ident *out, struct mu_err *err)
{
    struct passwd *pw;

    if (!mu_name_is_valid(name, sizeof(out->name) - 1))
        return mu_errf(err, MU_E_INVAL, "user '%s' is not a valid user name", name);
    errno = 0;
    pw = getpwnam(name);
    if (!pw) {
        if (errno != 0 && errno != ENOENT && errno != ESRCH)
            return mu_errf(err, MU_E_SYS, "cannot look up user '%s': %s", name, strerror(errno));
        return mu_errf(err, MU_E_NOTFOUND, "no such user '%s'", name);
    }
    mu_strlcpy(out->name, pw->pw_name, sizeof(out->name));
    mu_strlcpy(out->home, pw->pw_dir ? pw->pw_dir : "/", sizeof(out->home));
    out->uid = pw->pw_uid;
    out->gid = pw->pw_gid;
    return 0;
}

static bool user_allowed(const struct wrk_agent *a, const char *name)
{
    if (a->run_as.name[0] && strcmp(a->run_as.name, name) == 0)
        return true;
    for (int i = 0; i < a->nallow; i++) {
        if (strcmp(a->allow[i], name) == 0)
            return true;
    }
    return false;
}

/*
 * Who a BIND's task runs as: *out filled (name "" = the worker's own ids).  A worker that is
 * not root runs everything as itself.  The job's own user (the BIND's job_user) counts only on a
 * worker given --allow-user: elsewhere a spec's "user" is a label for people, and the task runs
 * as --run-as (or as root with --allow-root).  Refusals are BIND_ACK errors the job will show.
 */
static int bind_identity(struct wrk_agent *a,
                         const struct proto_msg *m,
                         struct wrk_ident *out,
                         struct mu_err *err)
{
    const char *job_user = m->job_user;

    memset(out, 0, sizeof(*out));
    if (!a->is_root)
        return 0;
    if (job_user && job_user[0] && a->nallow > 0) {
        if (!user_allowed(a, job_user))
            return mu_errf(err, MU_E_INVAL,
                           "job user '%s' is not allowed on node %s; hint: start muster-worker "
                           "with --allow-user %s",
                           job_user, a->node, job_user);
        if (ident_lookup(job_user, out, err) != 0)
            return -1;
        if (out->uid == 0 && !a->allow_root)
            return mu_errf(err, MU_E_INVAL,
                           "job user '%s' is root; node %s runs no task as root without "
                           "--allow-root",
                           job_user, a->node);
        return 0;
    }
    if (a->run_as.name[0]) {
        *out = a->run_as;
        return 0;
    }
    if (a->allow_root)
        return 0;
    return mu_errf(err, MU_E_INVAL,
                   "refusing to run a task as root on node %s; hint: start muster-worker with "
                   "--run-as USER (or --allow-root)",
                   a->node);
}

/*
 * Starts m's task through a shim, which must not exec it at or after not_after_ms (0 = no
 * deadline); *uid is the uid it runs as (-1 = the worker's own).  On failure *fault says whose.
 */
static int bind_start(struct wrk_agent *a,
                      const struct proto_msg *m,
                      uint64_t not_after_ms,
                      pid_t *pid,
                      pid_t *shim_pid,
                      int *uid,
                      enum wrk_fault *fault,
                      struct mu_err *err)
{
    char visible[PROTO_MAX_GPUS * 100];
    struct wrk_launch l;
    struct wrk_taskrec rec;
    struct wrk_ident who;

    *fault = WRK_FAULT_JOB;
    if (!mu_name_is_valid(m->task.job, PROTO_JOB_MAX - 1))
        return mu_errf(err, MU_E_INVAL, "job id '%s' is not a valid name", m->task.job);
    if (m->task.task < 0 || m->task.attempt < 1)
        return mu_errf(err, MU_E_INVAL, "task %d attempt %d: out of range", m->task.task,
                       m->task.attempt);
    if (m->argc <= 0 || !m->argv)
        return mu_errf(err, MU_E_INVAL, "empty command");
    *fault = WRK_FAULT_NODE; /* from here on: GPUs, identities, the state dir, the shim */
    if (a->nrunning >= PROTO_MAX_TASKS)
        return mu_errf(err, MU_E_TOOBIG, "node runs %d tasks already, the most it reports",
                       a->nrunning);
    if (wrk_gpus_format_visible(a->gpus, a->ngpus, a->simulated, m->bind_gpus, m->nbind_gpus,
                                visible, sizeof(visible), err)
        != 0)
        return -1;
    if (bind_identity(a, m, &who, err) != 0)
        return -1;
    memset(&l, 0, sizeof(l));
    l.state_dir = a->state_dir;
    l.node = a->node;
    l.job = m->task.job;
    l.task = m->task.task;
    l.attempt = m->task.attempt;
    l.argc = m->argc;
    l.argv = m->argv;
    l.nenv = m->nenv;
    l.env = m->env;
    l.workdir = m->workdir;
    l.resume_from = m->resume_from;
    l.cuda_visible = visible;
    l.cuda_pci_order = !a->simulated;
    l.world_size = m->world_size;
    l.local_rank = m->local_rank;
    l.local_world_size = m->local_world_size;
    l.node_rank = m->node_rank;
    l.master_addr = m->master_addr;
    l.master_port = m->master_port;
    l.lease_path = a->lease_path;
    l.not_after_ms = not_after_ms;
    if (who.name[0]) {
        l.user = who.name;
        l.home = who.home;
        l.uid = who.uid;
        l.gid = who.gid;
    }
    memset(&rec, 0, sizeof(rec));
    rec.ref = m->task;
    rec.ckpt_signal = m->signal;
    rec.grace_s = m->grace_s;
    rec.uid = who.name[0] ? (int)who.uid : -1;
    *uid = rec.uid;
    rec.ngpus = m->nbind_gpus;
    memcpy(rec.gpus, m->bind_gpus, sizeof(rec.gpus));
    return wrk_launch_shim(&l, NULL, a->shim, &rec, pid, shim_pid, fault, err);
}

static void handle_bind(struct wrk_agent *a, const struct proto_msg *m)
{
    struct wrk_task *t = task_find(a, &m->task);
    struct proto_task_ref ref = m->task;
    enum wrk_fault fault = WRK_FAULT_NODE;
    struct mu_err err;
    pid_t pid = -1;
    pid_t shim_pid = -1;
    int uid = -1;
    char why[256];
    char line[384];

    if (t) {
        log_task(MU_LOG_DEBUG, &t->ref, "BIND again: acknowledging");
        send_bind_ack(a, &t->ref, NULL, false);
        return;
    }
    ref.pid = 0;
    ref.exit_code = 0;
    ref.signal = 0;
    ref.state = (enum proto_task_state)0; /* never ran: no state on the wire */
    if (wrk_bind_is_stale(&a->tombs, &a->sched_clock, a->lease, m, mu_time_mono_ms(), why,
                          sizeof(why))) {
        log_task(MU_LOG_WARN, &ref, why);
        send_bind_ack(a, &ref, why, true);
        return;
    }
    mu_err_clear(&err);
    if (bind_start(a, m, wrk_bind_deadline(&a->sched_clock, a->lease, m), &pid, &shim_pid, &uid,
                   &fault, &err)
        != 0) {
        (void)mu_snprintf(line, sizeof(line), "cannot start (%s's fault): %s",
                          fault == WRK_FAULT_JOB ? "the job" : "the node", err.msg);
        log_task(MU_LOG_WARN, &ref, line);
        send_bind_ack(a, &ref, err.msg, fault == WRK_FAULT_NODE);
        return;
    }
    t = task_add(a, &err);
    if (!t) {
        /* Out of memory with a child running: stop it rather than lose track of it. */
        (void)kill(-pid, SIGKILL);
        log_task(MU_LOG_ERROR, &ref, err.msg);
        send_bind_ack(a, &ref, err.msg, true);
        return;
    }
    ref.state = PROTO_TASK_RUNNING;
    ref.pid = (int)pid;
    t->ref = ref;
    t->shim_pid = (int)shim_pid;
    t->ckpt_signal = m->signal;
    t->grace_s = m->grace_s;
    t->uid = uid;
    a->nrunning++;
    (void)mu_snprintf(line, sizeof(line), "started pid=%d shim=%d gpus=%d argv0=%s", (int)pid,
                      (int)shim_pid, m->nbind_gpus, m->argv[0]);
    log_task(MU_LOG_INFO, &ref, line);
    send_bind_ack(a, &ref, NULL, false);
}

static void handle_kill(struct wrk_agent *a, const struct proto_msg *m)
{
    struct wrk_task *t = task_find(a, &m->task);
    int sig = m->signal > 0 ? m->signal : SIGTERM;
    char line[128];

    if (!t) {
        struct proto_task_ref ref = m->task;
        ref.state = PROTO_TASK_LOST;
        ref.pid = 0;
        ref.exit_code = 0;
        ref.signal = 0;
        log_task(MU_LOG_DEBUG, &ref, "KILL of an unknown task: reporting LOST");
        /* The scheduler gave it up: a BIND of it still on its way must not start it. */
        wrk_tombs_add(&a->tombs, &ref);
        send_task_status(a, &ref);
        return;
    }
    if (t->ref.state != PROTO_TASK_RUNNING) {
        /* The scheduler has the exit status (it only kills what it knows ended or must end):
         * this KILL is its acknowledgement, so the record can go without another reply, and a
         * late repeat of its BIND finds a tombstone rather than nothing. */
        log_task(MU_LOG_DEBUG, &t->ref, "KILL of an exited task: forgotten");
        wrk_tombs_add(&a->tombs, &t->ref);
        task_remove(a, t);
        return;
    }
    /* Ended a moment ago?  Then report that rather than signal a group id that is free. */
    if (exit_check(a, t, false))
        return;
    if (kill(-(pid_t)t->ref.pid, sig) != 0 && errno != ESRCH)
        mu_log(MU_LOG_WARN, MOD, "job=%s task=%d attempt=%d kill %s: %s", t->ref.job, t->ref.task,
               t->ref.attempt, mu_signal_name(sig), strerror(errno));
    {
        uint64_t at = mu_time_mono_ms() + (uint64_t)(m->grace_s > 0 ? m->grace_s : 0) * 1000u;
        if (t->kill_at_ms == 0 || at < t->kill_at_ms)
            t->kill_at_ms = at;
    }
    (void)mu_snprintf(line, sizeof(line), "sent %s to group %d, SIGKILL after %d s",
                      mu_signal_name(sig), t->ref.pid, m->grace_s);
    log_task(MU_LOG_INFO, &t->ref, line);
}

static void handle_checkpoint(struct wrk_agent *a, const struct proto_msg *m)
{
    struct wrk_task *t = task_find(a, &m->task);
    char line[128];

    if (!t || t->ref.state != PROTO_TASK_RUNNING) {
        log_task(MU_LOG_INFO, &m->task, "CHECKPOINT of a task that is not running: ignored");
        return;
    }
    if (m->signal <= 0) {
        log_task(MU_LOG_WARN, &t->ref, "CHECKPOINT without a signal: ignored");
        return;
    }
    if (exit_check(a, t, false))
        return;
    if (kill(-(pid_t)t->ref.pid, m->signal) != 0 && errno != ESRCH)
        mu_log(MU_LOG_WARN, MOD, "job=%s task=%d attempt=%d checkpoint signal: %s", t->ref.job,
               t->ref.task, t->ref.attempt, strerror(errno));
    (void)mu_snprintf(line, sizeof(line), "checkpoint: sent %s to group %d",
                      mu_signal_name(m->signal), t->ref.pid);
    log_task(MU_LOG_INFO, &t->ref, line);
}

/* A HEARTBEAT: the lease it carries, renewed when it answers one of ours (lease.c). */
static void lease_renew(struct wrk_agent *a, const struct proto_msg *m, uint64_t now)
{
    int before_s;
    int lease_s;
    uint64_t until;

    wrk_lease_read(a->lease, &before_s, NULL);
    if (!wrk_lease_renew(a->lease, m->lease_s, m->echo_ms, m->ok, now))
        return;
    wrk_lease_read(a->lease, &lease_s, &until);
    if (lease_s != before_s)
        mu_log(MU_LOG_INFO, MOD,
               "node=%s lease %d s: tasks stop after that long without an answer from the "
               "scheduler (was %d s)",
               a->node, lease_s, before_s);
    if (a->lease_out && until > now) {
        mu_log(MU_LOG_WARN, MOD,
               "node=%s lease renewed: the scheduler answers again; the tasks the supervisors "
               "stopped are reported as they end",
               a->node);
        a->lease_out = false;
    }
}

/* The lease ran out with tasks running: the shims are stopping them now.  Said once. */
static void lease_watch(struct wrk_agent *a, uint64_t now)
{
    int lease_s;
    uint64_t until;
    int n = a->nrunning;

    if (a->lease_out || wrk_lease_holds(a->lease, now))
        return;
    /* A shim may have stopped its task before this turn: those count as well. */
    for (int i = 0; i < a->ntasks; i++)
        n += a->tasks[i].ref.state == PROTO_TASK_EXITED && a->tasks[i].ref.fenced;
    if (n == 0)
        return;
    a->lease_out = true;
    wrk_lease_read(a->lease, &lease_s, &until);
    mu_log(MU_LOG_ERROR, MOD,
           "node=%s SELF-FENCING: the lease (%d s) ran out %" PRIu64
           " ms ago without an answer from the scheduler %s; the supervisors stop the %d "
           "task(s) here (checkpoint signal, grace, SIGTERM, SIGKILL) so that no requeued "
           "attempt runs beside them",
           a->node, lease_s, until ? now - until : 0, a->scheduler, n);
}

/* <state>/lease: the lease a previous run left holds (its shims honour it) until renewed. */
static int lease_setup(struct wrk_agent *a, struct mu_err *err)
{
    char old[PROTO_PATH_MAX + 16];
    uint64_t now = mu_time_mono_ms();
    uint64_t until;
    int lease_s;

    if (mu_snprintf(a->lease_path, sizeof(a->lease_path), "%s/lease", a->state_dir) != 0)
        return mu_errf(err, MU_E_TOOBIG, "state directory '%s' is too long", a->state_dir);
    a->lease = wrk_lease_new(a->lease_path, true, err);
    if (!a->lease) {
        mu_err_prefix(err, "cannot keep the lease: ");
        return -1;
    }
    wrk_lease_read(a->lease, &lease_s, &until);
    if (lease_s > 0)
        mu_log(MU_LOG_INFO, MOD, "node=%s lease %d s from the last run: %s %" PRIu64 " ms", a->node,
               lease_s, until > now ? "held for" : "ran out",
               until > now ? until - now : now - until);
    /* The text file older versions kept lease_s in; the record replaces it. */
    (void)mu_snprintf(old, sizeof(old), "%s/lease_s", a->state_dir);
    (void)unlink(old);
    return 0;
}

static void handle_heartbeat(struct wrk_agent *a, const struct proto_msg *m)
{
    lease_renew(a, m, mu_time_mono_ms());
    if (m->heartbeat_s > 0 && m->heartbeat_s != a->heartbeat_s) {
        mu_log(MU_LOG_INFO, MOD, "node=%s heartbeat every %d s (was %d s)", a->node, m->heartbeat_s,
               a->heartbeat_s);
        a->heartbeat_s = m->heartbeat_s;
    }
    if (!m->ok && m->error[0]) {
        /* Registration refused (unknown pool, missing label, ...): say why; the regular
         * re-registration retries, so fixing the scheduler's config is enough. */
        mu_log_limited(MU_LOG_ERROR, MOD, "refused", 30, "node=%s the scheduler refused it: %s",
                       a->node, m->error);
    } else if (!m->ok) {
        mu_log(MU_LOG_INFO, MOD, "node=%s the scheduler does not know this node: sending HELLO",
               a->node);
        send_hello(a);
    }
}

/* m arrived at recv_ms (monotonic). */
static void handle_message(struct wrk_agent *a, const struct proto_msg *m, uint64_t recv_ms)
{
    if (m->epoch < a->epoch) {
        mu_log_limited(MU_LOG_WARN, MOD, "wrk-old-epoch", 10,
                       "node=%s ignoring %s from epoch %" PRIu64 " (current %" PRIu64 ")", a->node,
                       proto_type_name(m->type), m->epoch, a->epoch);
        return;
    }
    if (m->epoch > a->epoch) {
        mu_log(MU_LOG_INFO, MOD, "node=%s scheduler epoch %" PRIu64 " (was %" PRIu64 ")", a->node,
               m->epoch, a->epoch);
        a->epoch = m->epoch;
    }
    wrk_sched_clock_note(&a->sched_clock, a->epoch, m->sent_ms, recv_ms);
    mu_log(MU_LOG_DEBUG, MOD, "node=%s received %s seq=%" PRIu64, a->node, proto_type_name(m->type),
           m->seq);
    switch (m->type) {
    case PROTO_HEARTBEAT:
        handle_heartbeat(a, m);
        break;
    case PROTO_BIND:
        handle_bind(a, m);
        break;
    case PROTO_KILL:
        handle_kill(a, m);
        break;
    case PROTO_CHECKPOINT:
        handle_checkpoint(a, m);
        break;
    case PROTO_DRAIN:
        mu_log(MU_LOG_INFO, MOD, "node=%s drained by the scheduler: no new tasks will come",
               a->node);
        break;
    default:
        mu_log_limited(MU_LOG_WARN, MOD, "wrk-unexpected", 10,
                       "node=%s ignoring unexpected %s from the scheduler", a->node,
                       proto_type_name(m->type));
        break;
    }
}

/* Any message shows the link works (re-registration); only an answer renews the lease. */
static void heard_from_scheduler(struct wrk_agent *a)
{
    a->last_rx_ms = mu_time_mono_ms();
    if (a->quiet) {
        mu_log(MU_LOG_INFO, MOD, "node=%s scheduler back", a->node);
        a->quiet = false;
    }
}

static void receive_all(struct wrk_agent *a)
{
    for (int i = 0; i < RECV_PER_TURN; i++) {
        struct proto_msg m;
        struct mu_err err;
        int r;

        mu_err_clear(&err);
        r = proto_recv(a->sock, NULL, 0, &m, &err);
        if (r == 1) {
            heard_from_scheduler(a);
            handle_message(a, &m, a->last_rx_ms);
        } else if (r < 0) {
            if (err.code == MU_E_PROTO)
                heard_from_scheduler(a);
            mu_log_limited(MU_LOG_WARN, MOD, "wrk-malformed", 10,
                           "node=%s dropping a message from the scheduler: %s", a->node, err.msg);
        }
        proto_msg_release(&m);
        if (r == 0 || (r < 0 && err.code != MU_E_PROTO))
            return;
    }
}

/* ---- timers ---- */

static uint64_t beat_ms(const struct wrk_agent *a)
{
    return (uint64_t)(a->heartbeat_s > 0 ? a->heartbeat_s : 1) * 1000u;
}

/*
 * Exits stay here until the scheduler acknowledges them (a KILL), which it does once the
 * attempt's outcome is stored.  A TASK_STATUS can be lost on the way (the scheduler restarted
 * with it in a socket buffer, or was waiting for Redis): say it again, less and less often.
 */
static void resend_exits(struct wrk_agent *a, uint64_t now)
{
    if (a->quiet)
        return; /* the scheduler is away: the next HELLO carries them */
    for (int i = 0; i < a->ntasks; i++) {
        struct wrk_task *t = &a->tasks[i];
        if (t->ref.state != PROTO_TASK_EXITED || now < t->resend_at_ms)
            continue;
        log_task(MU_LOG_DEBUG, &t->ref, "exit not acknowledged yet: reporting it again");
        send_task_status(a, &t->ref);
        t->resend_gap_ms =
            t->resend_gap_ms * 2 > RESEND_MAX_MS ? RESEND_MAX_MS : t->resend_gap_ms * 2;
        t->resend_at_ms = now + t->resend_gap_ms;
    }
}

static void run_timers(struct wrk_agent *a, uint64_t now)
{
    resend_exits(a, now);
    if (a->ino_fd < 0 && now - a->ckpt_poll_ms >= CKPT_POLL_MS) {
        a->ckpt_poll_ms = now;
        ckpt_check_running(a);
    }
    if (a->nrunning > 0 && now - a->exit_poll_ms >= EXIT_POLL_MS)
        exits_scan(a);
    lease_watch(a, now);
    for (int i = 0; i < a->ntasks; i++) {
        struct wrk_task *t = &a->tasks[i];
        if (t->ref.state == PROTO_TASK_RUNNING && t->kill_at_ms && now >= t->kill_at_ms) {
            t->kill_at_ms = 0;
            if (kill(-(pid_t)t->ref.pid, SIGKILL) == 0)
                log_task(MU_LOG_INFO, &t->ref, "grace period over: sent SIGKILL to its group");
        }
    }
    if (now - a->last_beat_ms < beat_ms(a))
        return;
    if (now - a->last_rx_ms >= 3 * beat_ms(a)) {
        if (!a->quiet) {
            mu_log(MU_LOG_WARN, MOD,
                   "node=%s scheduler unreachable: nothing from %s for %" PRIu64
                   " ms; registering again",
                   a->node, a->scheduler, now - a->last_rx_ms);
            a->quiet = true;
        }
        send_hello(a);
    } else {
        send_heartbeat(a);
    }
}

static int next_wait_ms(const struct wrk_agent *a, uint64_t now, int max_wait_ms)
{
    uint64_t next = a->last_beat_ms + beat_ms(a);
    if (a->ino_fd < 0 && a->nrunning > 0 && a->ckpt_poll_ms + CKPT_POLL_MS < next)
        next = a->ckpt_poll_ms + CKPT_POLL_MS;
    if (a->nrunning > 0 && a->exit_poll_ms + EXIT_POLL_MS < next)
        next = a->exit_poll_ms + EXIT_POLL_MS;
    if (!a->lease_out && a->nrunning > 0 && wrk_lease_holds(a->lease, now)) {
        uint64_t until = 0;
        wrk_lease_read(a->lease, NULL, &until);
        if (until && until < next)
            next = until; /* to say SELF-FENCING when it runs out */
    }
    for (int i = 0; i < a->ntasks; i++) {
        const struct wrk_task *t = &a->tasks[i];
        if (t->ref.state == PROTO_TASK_RUNNING && t->kill_at_ms && t->kill_at_ms < next)
            next = t->kill_at_ms;
    }
    if (next <= now)
        return 0;
    if (next - now < (uint64_t)max_wait_ms)
        return (int)(next - now);
    return max_wait_ms;
}

/* ---- public ---- */

static int copy_field(char *dst, size_t size, const char *src, const char *what, struct mu_err *err)
{
    if (!src || !src[0])
        return mu_errf(err, MU_E_INVAL, "%s is required", what);
    if (mu_strlcpy(dst, src, size) >= size)
        return mu_errf(err, MU_E_TOOBIG, "%s '%s' is longer than %zu bytes", what, src, size - 1);
    return 0;
}

/* ---- the spot watcher ---- */

/* Takes the zone for the "zone" label when no --label gave one; logs type and lifecycle. */
static void apply_identity(struct wrk_agent *a)
{
    const struct wrk_imds_identity *id = wrk_imds_identity_get(a->imds);
    struct proto_label *zone = NULL;

    if (!id || a->identity_applied)
        return;
    a->identity_applied = true;
    mu_log(MU_LOG_INFO, MOD, "node=%s imds: instance type '%s', zone '%s', lifecycle '%s'", a->node,
           id->instance_type, id->zone, id->lifecycle);
    if (!id->zone[0])
        return;
    for (int i = 0; i < a->nlabels; i++) {
        if (strcmp(a->labels[i].level, "zone") == 0)
            zone = &a->labels[i];
    }
    if (zone) {
        if (strcmp(zone->value, id->zone) != 0)
            mu_log(MU_LOG_WARN, MOD,
                   "node=%s keeping --label zone=%s; the metadata service says "
                   "'%s'",
                   a->node, zone->value, id->zone);
        return;
    }
    if (!mu_name_is_valid(id->zone, sizeof(zone->value) - 1) || a->nlabels >= PROTO_MAX_LABELS) {
        mu_log(MU_LOG_WARN, MOD, "node=%s cannot use zone '%s' as a label", a->node, id->zone);
        return;
    }
    zone = &a->labels[a->nlabels++];
    mu_strlcpy(zone->level, "zone", sizeof(zone->level));
    mu_strlcpy(zone->value, id->zone, sizeof(zone->value));
    if (a->hello_sent)
        send_hello(a); /* the scheduler may have refused the node for want of the zone */
}

static void imds_events(struct wrk_agent *a)
{
    struct wrk_imds_event ev;
    char when[32];

    while (wrk_imds_event_next(a->imds, &ev)) {
        switch (ev.type) {
        case WRK_IMDS_SPOT:
            mu_time_format_iso(ev.time_ms, when, sizeof(when));
            mu_log(MU_LOG_WARN, MOD,
                   "node=%s spot interruption notice: %s at %s (in %" PRId64 " ms)", a->node,
                   ev.action, when, (int64_t)ev.time_ms - (int64_t)mu_time_wall_ms());
            a->spot = ev;
            a->have_spot = true;
            send_notice(a, PROTO_SPOT_NOTICE, &ev);
            break;
        case WRK_IMDS_REBALANCE:
            mu_time_format_iso(ev.time_ms, when, sizeof(when));
            mu_log(MU_LOG_WARN, MOD, "node=%s rebalance recommendation noticed at %s", a->node,
                   when);
            a->rebalance = ev;
            a->have_rebalance = true;
            send_notice(a, PROTO_REBALANCE, &ev);
            break;
        case WRK_IMDS_IDENTITY:
            apply_identity(a);
            break;
        }
    }
}

static int imds_start(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    struct wrk_imds_config ic;

    memset(&ic, 0, sizeof(ic));
    ic.url = cfg->imds;
    ic.interval_s = cfg->imds_interval_s > 0 ? cfg->imds_interval_s : WRK_IMDS_INTERVAL_S;
    ic.token_ttl_s = cfg->imds_token_ttl_s;
    ic.want_identity = true;
    a->imds = wrk_imds_new(&ic, err);
    if (!a->imds)
        return -1;
    /* Wait a little so that the first HELLO carries the zone; a silent service is not fatal. */
    if (wrk_imds_wait_identity(a->imds, WRK_IMDS_IDENTITY_WAIT_MS) == 0)
        apply_identity(a);
    else
        mu_log(MU_LOG_WARN, MOD,
               "node=%s imds: no instance identity from %s yet; registering without it and "
               "retrying every %d s",
               a->node, cfg->imds, ic.interval_s);
    mu_log(MU_LOG_INFO, MOD, "node=%s watching %s for spot notices every %d s", a->node, cfg->imds,
           ic.interval_s);
    return 0;
}

static int agent_inventory(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    struct mu_err topo_err;

    if (cfg->sim_gpus > PROTO_MAX_GPUS)
        return mu_errf(err, MU_E_RANGE, "--gpus %d: at most %d", cfg->sim_gpus, PROTO_MAX_GPUS);
    if (cfg->sim_gpus >= 0) {
        a->simulated = true;
        a->ngpus = cfg->sim_gpus;
        a->nislands = 0;
        for (int i = 0; i < a->ngpus; i++) {
            /* main.c checked the list; a caller filling sim_island by hand gets a message. */
            if (cfg->sim_island[i] < 0 || cfg->sim_island[i] >= a->ngpus)
                return mu_errf(err, MU_E_RANGE, "simulated GPU %d: island %d out of 0..%d", i,
                               cfg->sim_island[i], a->ngpus - 1);
            if (cfg->sim_island[i] >= a->nislands)
                a->nislands = cfg->sim_island[i] + 1;
        }
        wrk_gpus_simulate(a->gpus, a->ngpus, cfg->sim_island);
        return 0;
    }
    a->simulated = false;
    if (wrk_gpus_discover(cfg->nvidia_smi, a->gpus, PROTO_MAX_GPUS, &a->ngpus, err) != 0)
        return -1;
    /* Without the matrix the GPUs are still usable: one island is what the scheduler assumed
     * before islands existed, and the worst it costs is a task spread over PCIe. */
    mu_err_clear(&topo_err);
    if (wrk_topo_discover(cfg->nvidia_smi, a->gpus, a->ngpus, &a->nislands, &topo_err) != 0) {
        mu_log(MU_LOG_WARN, MOD,
               "node=%s cannot read NVLink islands: %s; counting all %d GPUs as one island",
               a->node, topo_err.msg, a->ngpus);
        for (int i = 0; i < a->ngpus; i++)
            a->gpus[i].island = 0;
        a->nislands = 1;
    }
    return 0;
}

/* cfg->shim, else $MUSTER_SHIM, else muster-shim in the running program's directory. */
static int shim_resolve(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    const char *env = getenv("MUSTER_SHIM");
    char exe[PROTO_PATH_MAX];
    char *slash;
    ssize_t n;

    if (cfg->shim && cfg->shim[0]) {
        if (mu_strlcpy(a->shim, cfg->shim, sizeof(a->shim)) >= sizeof(a->shim))
            return mu_errf(err, MU_E_TOOBIG, "shim path '%s' is too long", cfg->shim);
    } else if (env && env[0]) {
        if (mu_strlcpy(a->shim, env, sizeof(a->shim)) >= sizeof(a->shim))
            return mu_errf(err, MU_E_TOOBIG, "MUSTER_SHIM '%s' is too long", env);
    } else {
        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
            return mu_errf(err, MU_E_SYS, "cannot read /proc/self/exe: %s", strerror(errno));
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        if (mu_snprintf(a->shim, sizeof(a->shim), "%s/" WRK_SHIM_NAME, slash ? exe : ".") != 0)
            return mu_errf(err, MU_E_TOOBIG, "shim path under '%s' is too long", exe);
    }
    if (access(a->shim, X_OK) != 0)
        return mu_errf(err, MU_E_NOTFOUND,
                       "cannot run the task supervisor '%s': %s; hint: install " WRK_SHIM_NAME
                       " beside muster-worker, or set MUSTER_SHIM",
                       a->shim, strerror(errno));
    return 0;
}

/* --run-as, --allow-user, --allow-root: root only. */
static int identity_setup(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err)
{
    a->is_root = geteuid() == 0;
    a->allow_root = cfg->allow_root;
    if (!a->is_root
        && ((cfg->run_as && cfg->run_as[0]) || cfg->nallow_users > 0 || cfg->allow_root))
        return mu_errf(err, MU_E_USAGE,
                       "--run-as, --allow-user and --allow-root need a worker running as root; "
                       "this one runs tasks as its own user (uid %d)",
                       (int)geteuid());
    if (cfg->nallow_users < 0 || cfg->nallow_users > MAX_ALLOW_USERS)
        return mu_errf(err, MU_E_RANGE, "--allow-user: at most %d users", MAX_ALLOW_USERS);
    for (int i = 0; i < cfg->nallow_users; i++) {
        const char *u = cfg->allow_users[i];
        if (!u || !mu_name_is_valid(u, sizeof(a->allow[0]) - 1))
            return mu_errf(err, MU_E_INVAL, "--allow-user '%s': not a valid user name", u ? u : "");
        mu_strlcpy(a->allow[a->nallow++], u, sizeof(a->allow[0]));
    }
    if (cfg->run_as && cfg->run_as[0]) {
        if (ident_lookup(cfg->run_as, &a->run_as, err) != 0) {
            mu_err_prefix(err, "--run-as: ");
            return -1;
        }
        if (a->run_as.uid == 0 && !a->allow_root)
            return mu_errf(err, MU_E_USAGE, "--run-as '%s' is root: add --allow-root to mean it",
                           cfg->run_as);
    }
    if (a->is_root && !a->run_as.name[0] && !a->allow_root)
        mu_log(MU_LOG_WARN, MOD,
               "node=%s running as root without --run-as or --allow-root: tasks are refused%s",
               a->node, a->nallow > 0 ? " unless --allow-user lists the job's user" : "");
    else if (a->is_root)
        mu_log(MU_LOG_INFO, MOD, "node=%s running as root: tasks run as %s%s%s", a->node,
               a->run_as.name[0] ? a->run_as.name : "root",
               a->nallow > 0 ? ", or the job's user when --allow-user lists it" : "",
               a->allow_root && a->run_as.name[0] ? " (root allowed)" : "");
    return 0;
}

/* The state directory with logs/, ckpt/ and tasks/. */
static int state_dirs_create(struct wrk_agent *a, struct mu_err *err)
{
    char dir[PROTO_PATH_MAX + 8];

    if (wrk_mkdir_p(a->state_dir, err) != 0)
        return -1;
    (void)mu_snprintf(dir, sizeof(dir), "%s/logs", a->state_dir);
    if (wrk_mkdir_p(dir, err) != 0)
        return -1;
    (void)mu_snprintf(dir, sizeof(dir), "%s/ckpt", a->state_dir);
    if (wrk_mkdir_p(dir, err) != 0)
        return -1;
    /* Tasks running as other users write their checkpoint files here: like /tmp (sticky);
     * ckpt_check trusts only a regular file, not a link, owned by the task's user. */
    if ((a->run_as.name[0] || a->nallow > 0) && chmod(dir, 01777) != 0)
        mu_log(MU_LOG_WARN, MOD, "node=%s cannot open '%s' to task users: %s", a->node, dir,
               strerror(errno));
    (void)mu_snprintf(dir, sizeof(dir), "%s/tasks", a->state_dir);
    return wrk_mkdir_p(dir, err);
}

struct wrk_agent *wrk_agent_new(const struct wrk_config *cfg, struct mu_err *err)
{
    struct wrk_agent *a = calloc(1, sizeof(*a));
    bool signals = false;

    if (!a) {
        mu_errf(err, MU_E_NOMEM, "out of memory for the agent");
        return NULL;
    }
    a->ino_fd = -1;
    if (copy_field(a->scheduler, sizeof(a->scheduler), cfg->scheduler, "--scheduler", err) != 0
        || copy_field(a->node, sizeof(a->node), cfg->node, "--node", err) != 0
        || copy_field(a->pool, sizeof(a->pool), cfg->pool, "--pool", err) != 0
        || copy_field(a->state_dir, sizeof(a->state_dir), cfg->state_dir, "--state-dir", err) != 0
        || copy_field(a->addr, sizeof(a->addr), cfg->addr, "--addr", err) != 0)
        goto fail;
    if (cfg->nlabels < 0 || cfg->nlabels > PROTO_MAX_LABELS) {
        mu_errf(err, MU_E_RANGE, "at most %d labels", PROTO_MAX_LABELS);
        goto fail;
    }
    a->cpus = cfg->cpus;
    a->memory_mb = cfg->memory_mb;
    a->nlabels = cfg->nlabels;
    memcpy(a->labels, cfg->labels, sizeof(a->labels));
    a->heartbeat_s = cfg->heartbeat_s > 0 ? cfg->heartbeat_s : 1;
    a->ckpt_wd = a->tasks_wd = -1;

    if (identity_setup(a, cfg, err) != 0 || shim_resolve(a, cfg, err) != 0)
        goto fail;
    if (agent_inventory(a, cfg, err) != 0)
        goto fail;
    if (state_dirs_create(a, err) != 0 || lease_setup(a, err) != 0)
        goto fail;
    if (signals_install(err) != 0)
        goto fail;
    signals = true;
    a->zctx = zmq_ctx_new();
    if (!a->zctx) {
        mu_errf(err, MU_E_ZMQ, "cannot create a ZeroMQ context: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    a->sock =
        proto_dealer_new_curve(a->zctx, a->scheduler, a->node, cfg->curve, cfg->curve_server, err);
    if (!a->sock)
        goto fail;
    watch_start(a);
    if (cfg->imds && cfg->imds[0] && imds_start(a, cfg, err) != 0)
        goto fail;
    a->loading = true;
    adopt_records(a);
    a->loading = false;
    a->last_rx_ms = mu_time_mono_ms();
    a->exit_poll_ms = a->last_rx_ms;
    mu_log(MU_LOG_INFO, MOD,
           "node=%s pool=%s gpus=%d (%s) islands=%d cpus=%d memory_mb=%" PRId64
           " scheduler=%s state_dir=%s",
           a->node, a->pool, a->ngpus, a->simulated ? "simulated" : "nvidia-smi", a->nislands,
           a->cpus, a->memory_mb, a->scheduler, a->state_dir);
    return a;
fail:
    wrk_lease_free(a->lease);
    wrk_imds_free(a->imds);
    if (a->ino_fd >= 0)
        (void)close(a->ino_fd);
    if (a->sock) {
        int linger = 0;
        (void)zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof(linger));
        (void)zmq_close(a->sock);
    }
    if (a->zctx)
        (void)zmq_ctx_term(a->zctx);
    if (signals)
        signals_restore();
    free(a);
    return NULL;
}

int wrk_agent_poll(struct wrk_agent *a, int max_wait_ms, struct mu_err *err)
{
    zmq_pollitem_t items[3 + IMDS_MAX_FDS];
    struct pollfd ifds[IMDS_MAX_FDS];
    int nitems = 2;
    int ino_at = -1;
    int imds_at = 0;
    int nifds = 0;
    int wait_ms;
    uint64_t now;
    int r;

    if (a->stop)
        return 0;
    if (!a->hello_sent)
        send_hello(a);
    memset(items, 0, sizeof(items));
    items[0].socket = a->sock;
    items[0].events = ZMQ_POLLIN;
    items[1].fd = sig_pipe[0];
    items[1].events = ZMQ_POLLIN;
    if (a->ino_fd >= 0) {
        ino_at = nitems;
        items[nitems].fd = a->ino_fd;
        items[nitems++].events = ZMQ_POLLIN;
    }
    now = mu_time_mono_ms();
    wait_ms = next_wait_ms(a, now, max_wait_ms < 0 ? 0 : max_wait_ms);
    if (a->imds) {
        nifds = wrk_imds_fds(a->imds, ifds, IMDS_MAX_FDS);
        imds_at = nitems;
        for (int i = 0; i < nifds; i++) {
            items[nitems].fd = ifds[i].fd;
            items[nitems++].events = (short)(((ifds[i].events & POLLIN) ? ZMQ_POLLIN : 0)
                                             | ((ifds[i].events & POLLOUT) ? ZMQ_POLLOUT : 0));
        }
        wait_ms = wrk_imds_timeout_ms(a->imds, now, wait_ms);
    }
    r = zmq_poll(items, nitems, wait_ms);
    if (r < 0 && zmq_errno() != EINTR)
        return mu_errf(err, MU_E_ZMQ, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    if (drain_signals())
        a->stop = true;
    if (r > 0 && ino_at >= 0 && (items[ino_at].revents & ZMQ_POLLIN))
        watch_events(a);
    /* Reap on every turn: cheap, and immune to a wake-up byte lost to a full pipe. */
    reap(a);
    if (r > 0 && (items[0].revents & ZMQ_POLLIN))
        receive_all(a);
    if (a->imds) {
        for (int i = 0; i < nifds; i++) {
            short rev = 0;
            if (r > 0)
                rev = items[imds_at + i].revents;
            ifds[i].revents =
                (short)(((rev & ZMQ_POLLIN) ? POLLIN : 0) | ((rev & ZMQ_POLLOUT) ? POLLOUT : 0)
                        | ((rev & ZMQ_POLLERR) ? POLLERR : 0));
        }
        wrk_imds_service(a->imds, ifds, nifds);
        imds_events(a);
    }
    now = mu_time_mono_ms();
    if (!a->stop)
        run_timers(a, now);
    evict_exited(a); /* here, so that no loop above saw entries move */
    return a->stop ? 0 : 1;
}

int wrk_agent_run(struct wrk_agent *a, struct mu_err *err)
{
    int r;
    while ((r = wrk_agent_poll(a, 1000, err)) > 0) {
    }
    if (r < 0)
        return -1;
    mu_log(MU_LOG_INFO, MOD, "node=%s stopping: %d task(s) running", a->node, a->nrunning);
    wrk_agent_shutdown(a);
    return 0;
}

void wrk_agent_stop(struct wrk_agent *a)
{
    a->stop = true;
}

void wrk_agent_shutdown(struct wrk_agent *a)
{
    uint64_t deadline = mu_time_mono_ms() + WRK_SHUTDOWN_GRACE_MS;

    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].ref.state == PROTO_TASK_RUNNING) {
            log_task(MU_LOG_INFO, &a->tasks[i].ref, "worker stopping: sent SIGTERM to its group");
            (void)kill(-(pid_t)a->tasks[i].ref.pid, SIGTERM);
        }
    }
    while (a->nrunning > 0) {
        uint64_t now = mu_time_mono_ms();
        struct pollfd pfd = { sig_pipe[0], POLLIN, 0 };
        if (now >= deadline)
            break;
        (void)poll(&pfd, 1, (int)(deadline - now < 100 ? deadline - now : 100));
        (void)drain_signals();
        reap(a);
        exits_scan(a);
    }
    for (int i = 0; i < a->ntasks; i++) {
        if (a->tasks[i].ref.state == PROTO_TASK_RUNNING) {
            log_task(MU_LOG_WARN, &a->tasks[i].ref, "still running after 5 s: sent SIGKILL");
            (void)kill(-(pid_t)a->tasks[i].ref.pid, SIGKILL);
        }
    }
    /* The shims record the SIGKILLs within moments; a record still missing after that stays
     * for the next worker to read. */
    deadline = mu_time_mono_ms() + STOP_WAIT_MS;
    while (a->nrunning > 0 && mu_time_mono_ms() < deadline) {
        struct pollfd pfd = { sig_pipe[0], POLLIN, 0 };
        (void)poll(&pfd, 1, 20);
        (void)drain_signals();
        reap(a);
        exits_scan(a);
    }
    evict_exited(a);
}

int wrk_agent_task_count(const struct wrk_agent *a)
{
    return a->ntasks;
}

void wrk_agent_free(struct wrk_agent *a)
{
    if (!a)
        return;
    if (a->sock) {
        int linger = CLOSE_LINGER_MS;
        (void)zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof(linger));
        (void)zmq_close(a->sock);
    }
    if (a->zctx)
        (void)zmq_ctx_term(a->zctx);
    signals_restore();
    wrk_imds_free(a->imds);
    if (a->ino_fd >= 0)
        (void)close(a->ino_fd);
    for (int i = 0; i < a->ntasks; i++) {
        free(a->tasks[i].ckpt_last);
        free(a->tasks[i].ckpt_missing);
    }
    free(a->tasks);
    wrk_lease_free(a->lease); /* the record stays: the shims keep honouring it */
    free(a);
}

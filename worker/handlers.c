/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's commands (docs/design.md §7, protocol/README.md): BIND, KILL, CHECKPOINT,
 * HEARTBEAT, DRAIN and LOG_READ (logread.c), behind one dispatcher that fences epochs first: the
 * highest epoch seen wins, and a command from an older one comes from a scheduler that has been
 * replaced and is ignored.
 *
 * Every command is keyed by (job, task, attempt) and idempotent: a repeated BIND re-sends the
 * BIND_ACK, a repeated KILL re-signals, a KILL of an exited task forgets it (the scheduler's
 * acknowledgement of the exit), so the scheduler may retry anything after a reconnect without
 * starting a task twice.  A task is its process group: signals go to the group.  Stale commands
 * (stale.c): a BIND is refused (node_fault) when the node does not hold the lease, when the
 * scheduler's clock, bounded from below by the sent_ms of its messages, is past the BIND's
 * expires_ms, or when a KILL of the same task came first; the shim gets the earlier of the
 * lease's end and that expiry as a deadline it checks right before exec.
 */
#include "worker/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>

#include "common/mu_banned.h"

/*
 * The /dev/nvidia<N> minors of m's GPUs into minors[]: a GPU's index (nvidia-smi numbers GPUs as
 * the driver numbers its devices), a MIG slice's parent GPU's.  How many.
 */
static int gpu_minors(const struct wrk_agent *a, const struct proto_msg *m, int *minors)
{
    int n = 0;

    for (int i = 0; i < m->nbind_gpus && n < PROTO_MAX_GPUS; i++) {
        int g = m->bind_gpus[i];
        if (g < 0 || g >= a->ngpus)
            continue;
        if (a->gpus[g].profile[0] && a->gpus[g].parent >= 0 && a->gpus[g].parent < a->ngpus)
            g = a->gpus[g].parent;
        minors[n++] = a->gpus[g].index;
    }
    return n;
}

/*
 * Starts m's task through a shim, which must not exec it at or after not_after_ms (0 = no
 * deadline); on success *rec is the running task's record.  On failure *fault says whose.
 */
static int bind_start(struct wrk_agent *a,
                      const struct proto_msg *m,
                      uint64_t not_after_ms,
                      struct wrk_taskrec *rec,
                      enum wrk_fault *fault,
                      struct mu_err *err)
{
    char visible[PROTO_MAX_GPUS * 100];
    int minors[PROTO_MAX_GPUS];
    struct wrk_launch l;
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
    if (wrk_ident_for_bind(a, m, &who, err) != 0)
        return -1;
    /* The BIND itself goes to the launcher: each of its fields is read where it is used. */
    memset(&l, 0, sizeof(l));
    l.bind = m;
    l.state_dir = a->state_dir;
    l.run_dir = a->run_dir;
    l.node = a->node;
    l.cuda_visible = visible;
    l.cuda_pci_order = !a->simulated;
    l.user = &who;
    l.lease_path = a->lease_path;
    l.not_after_ms = not_after_ms;
    l.cg = &a->cg;
    l.cg_root = a->cg_root;
    l.gpu_minors = minors;
    l.ngpu_minors = gpu_minors(a, m, minors);
    return wrk_launch_shim(&l, NULL, a->shim, wrk_agent_shim_server(a), rec, fault, err);
}

static void handle_bind(struct wrk_agent *a, const struct proto_msg *m)
{
    struct wrk_task *t = wrk_task_find(a, &m->task);
    struct proto_task_ref ref = m->task;
    enum wrk_fault fault = WRK_FAULT_NODE;
    struct wrk_taskrec rec;
    struct mu_err err;
    char why[256];
    char line[384];

    if (t) {
        wrk_task_log(MU_LOG_DEBUG, &t->rec.ref, "BIND again: acknowledging");
        wrk_send_bind_ack(a, &t->rec.ref, NULL, false);
        return;
    }
    ref.pid = 0;
    ref.exit_code = 0;
    ref.signal = 0;
    ref.state = (enum proto_task_state)0; /* never ran: no state on the wire */
    if (wrk_bind_is_stale(&a->tombs, &a->sched_clock, a->lease, m, mu_time_mono_ms(), why,
                          sizeof(why))) {
        wrk_task_log(MU_LOG_WARN, &ref, why);
        wrk_send_bind_ack(a, &ref, why, true);
        return;
    }
    mu_err_clear(&err);
    memset(&rec, 0, sizeof(rec));
    if (bind_start(a, m, wrk_bind_deadline(&a->sched_clock, a->lease, m), &rec, &fault, &err)
        != 0) {
        (void)mu_snprintf(line, sizeof(line), "cannot start (%s's fault): %s",
                          fault == WRK_FAULT_JOB ? "the job" : "the node", err.msg);
        wrk_task_log(MU_LOG_WARN, &ref, line);
        wrk_send_bind_ack(a, &ref, err.msg, fault == WRK_FAULT_NODE);
        return;
    }
    t = wrk_task_add(a, &err);
    if (!t) {
        /* Out of memory with a child running: stop it rather than lose track of it. */
        (void)kill(-(pid_t)rec.ref.pid, SIGKILL);
        wrk_task_log(MU_LOG_ERROR, &ref, err.msg);
        wrk_send_bind_ack(a, &ref, err.msg, true);
        return;
    }
    t->rec = rec;
    a->nrunning++;
    (void)mu_snprintf(line, sizeof(line), "started pid=%d shim=%d gpus=%d argv0=%s", t->rec.ref.pid,
                      t->rec.shim_pid, m->nbind_gpus, m->argv[0]);
    wrk_task_log(MU_LOG_INFO, &t->rec.ref, line);
    wrk_send_bind_ack(a, &t->rec.ref, NULL, false);
}

static void handle_kill(struct wrk_agent *a, const struct proto_msg *m)
{
    struct wrk_task *t = wrk_task_find(a, &m->task);
    int sig = m->signal > 0 ? m->signal : SIGTERM;
    char line[128];

    if (!t) {
        struct proto_task_ref ref = m->task;
        ref.state = PROTO_TASK_LOST;
        ref.pid = 0;
        ref.exit_code = 0;
        ref.signal = 0;
        wrk_task_log(MU_LOG_DEBUG, &ref, "KILL of an unknown task: reporting LOST");
        /* The scheduler gave it up: a BIND of it still on its way must not start it. */
        wrk_tombs_add(&a->tombs, &ref);
        wrk_send_task_status(a, &ref);
        return;
    }
    if (t->rec.ref.state != PROTO_TASK_RUNNING) {
        /* The scheduler has the exit status (it only kills what it knows ended or must end):
         * this KILL is its acknowledgement, so the record can go without another reply, and a
         * late repeat of its BIND finds a tombstone rather than nothing. */
        wrk_task_log(MU_LOG_DEBUG, &t->rec.ref, "KILL of an exited task: forgotten");
        wrk_tombs_add(&a->tombs, &t->rec.ref);
        wrk_task_remove(a, t);
        return;
    }
    /* Ended a moment ago?  Then report that rather than signal a group id that is free. */
    if (wrk_exit_check(a, t, false))
        return;
    if (kill(-(pid_t)t->rec.ref.pid, sig) != 0 && errno != ESRCH)
        mu_log(MU_LOG_WARN, WRK_MOD, "job=%s task=%d attempt=%d kill %s: %s", t->rec.ref.job,
               t->rec.ref.task, t->rec.ref.attempt, mu_signal_name(sig), strerror(errno));
    {
        uint64_t at = mu_time_mono_ms() + (uint64_t)(m->grace_s > 0 ? m->grace_s : 0) * 1000u;
        if (t->kill_at_ms == 0 || at < t->kill_at_ms)
            t->kill_at_ms = at;
    }
    (void)mu_snprintf(line, sizeof(line), "sent %s to group %d, SIGKILL after %d s",
                      mu_signal_name(sig), t->rec.ref.pid, m->grace_s);
    wrk_task_log(MU_LOG_INFO, &t->rec.ref, line);
}

static void handle_checkpoint(struct wrk_agent *a, const struct proto_msg *m)
{
    struct wrk_task *t = wrk_task_find(a, &m->task);
    char line[128];

    if (!t || t->rec.ref.state != PROTO_TASK_RUNNING) {
        wrk_task_log(MU_LOG_INFO, &m->task, "CHECKPOINT of a task that is not running: ignored");
        return;
    }
    if (m->signal <= 0) {
        wrk_task_log(MU_LOG_WARN, &t->rec.ref, "CHECKPOINT without a signal: ignored");
        return;
    }
    if (wrk_exit_check(a, t, false))
        return;
    if (kill(-(pid_t)t->rec.ref.pid, m->signal) != 0 && errno != ESRCH)
        mu_log(MU_LOG_WARN, WRK_MOD, "job=%s task=%d attempt=%d checkpoint signal: %s",
               t->rec.ref.job, t->rec.ref.task, t->rec.ref.attempt, strerror(errno));
    (void)mu_snprintf(line, sizeof(line), "checkpoint: sent %s to group %d",
                      mu_signal_name(m->signal), t->rec.ref.pid);
    wrk_task_log(MU_LOG_INFO, &t->rec.ref, line);
}

static void handle_heartbeat(struct wrk_agent *a, const struct proto_msg *m)
{
    wrk_agent_lease_renew(a, m, mu_time_mono_ms());
    /* Said back in each heartbeat: the scheduler skips answers only to a worker that waits for
     * them that long.  More than WRK_ANSWER_EVERY_MAX is not taken (it answers each one then). */
    a->answer_every =
        m->answer_every > 1 && m->answer_every <= WRK_ANSWER_EVERY_MAX ? m->answer_every : 1;
    if (m->heartbeat_s > 0 && m->heartbeat_s != a->heartbeat_s) {
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s heartbeat every %d s (was %d s)", a->node,
               m->heartbeat_s, a->heartbeat_s);
        a->heartbeat_s = m->heartbeat_s;
    }
    if (!m->ok && m->error[0]) {
        /* Registration refused (unknown pool, missing label, ...): say why; the regular
         * re-registration retries, so fixing the scheduler's config is enough. */
        mu_log_limited(MU_LOG_ERROR, WRK_MOD, "refused", 30, "node=%s the scheduler refused it: %s",
                       a->node, m->error);
    } else if (!m->ok) {
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s the scheduler does not know this node: sending HELLO",
               a->node);
        wrk_send_hello(a);
    }
}

/* m arrived at recv_ms (monotonic). */
void wrk_handle_message(struct wrk_agent *a, const struct proto_msg *m, uint64_t recv_ms)
{
    if (m->epoch < a->epoch) {
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-old-epoch", 10,
                       "node=%s ignoring %s from epoch %" PRIu64 " (current %" PRIu64 ")", a->node,
                       proto_type_name(m->type), m->epoch, a->epoch);
        return;
    }
    if (m->epoch > a->epoch) {
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s scheduler epoch %" PRIu64 " (was %" PRIu64 ")",
               a->node, m->epoch, a->epoch);
        a->epoch = m->epoch;
    }
    wrk_sched_clock_note(&a->sched_clock, a->epoch, m->sent_ms, recv_ms);
    mu_log(MU_LOG_DEBUG, WRK_MOD, "node=%s received %s seq=%" PRIu64, a->node,
           proto_type_name(m->type), m->seq);
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
    case PROTO_LOG_READ:
        wrk_handle_log_read(a, m);
        break;
    case PROTO_DRAIN:
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s drained by the scheduler: no new tasks will come",
               a->node);
        break;
    default:
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-unexpected", 10,
                       "node=%s ignoring unexpected %s from the scheduler", a->node,
                       proto_type_name(m->type));
        break;
    }
}

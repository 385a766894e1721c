/* SPDX-License-Identifier: MIT */
/*
 * What the worker tells the scheduler (docs/design.md §7, protocol/README.md): HELLO, HEARTBEAT,
 * BIND_ACK, TASK_STATUS, CHECKPOINT_DONE, SPOT_NOTICE, REBALANCE, LOG_DATA and BYE (a clean
 * stop, after the tasks' exits), each stamped with
 * the next seq, the highest epoch seen and the node's name.  A send that fails is logged
 * (rate-limited) and not retried here: what matters is repeated by design (an exit until its KILL,
 * the tasks in every HELLO, with each task's newest checkpoint).  HELLO and HEARTBEAT carry
 * echo_ms, the monotonic clock at send, which the scheduler's answer carries back to renew the
 * lease (lease_watch.c).  After each HELLO the latest spot notice and rebalance recommendation go
 * out again, so that a scheduler that restarted (or missed them while away) still learns them.
 */
#include "worker/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static void agent_send(struct wrk_agent *a, struct proto_msg *m)
{
    struct mu_err err;

    m->seq = ++a->seq;
    m->epoch = a->epoch;
    mu_strlcpy(m->node, a->node, sizeof(m->node));
    if (proto_send(a->sock, NULL, m, &err) != 0)
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-send", 10, "node=%s %s", a->node, err.msg);
    else
        mu_log(MU_LOG_DEBUG, WRK_MOD, "node=%s sent %s seq=%" PRIu64, a->node,
               proto_type_name(m->type), m->seq);
}

static int exited_newest_first(const void *x, const void *y)
{
    const struct wrk_task *a = *(const struct wrk_task *const *)x;
    const struct wrk_task *b = *(const struct wrk_task *const *)y;
    return a->exit_order < b->exit_order ? 1 : a->exit_order > b->exit_order ? -1 : 0;
}

void wrk_send_notice(struct wrk_agent *a, enum proto_type type, const struct wrk_imds_event *ev)
{
    struct proto_msg m;
    proto_msg_init(&m, type);
    mu_strlcpy(m.action, ev->action, sizeof(m.action));
    m.deadline_ms = ev->time_ms;
    agent_send(a, &m);
    proto_msg_release(&m);
}

void wrk_send_checkpoint(struct wrk_agent *a, const struct wrk_task *t)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_CHECKPOINT_DONE);
    m.task = t->rec.ref;
    mu_strlcpy(m.path, t->ckpt_last, sizeof(m.path));
    m.at_ms = t->ckpt_at_ms;
    agent_send(a, &m);
    proto_msg_release(&m);
}

void wrk_send_log_data(struct wrk_agent *a, struct proto_msg *m)
{
    agent_send(a, m);
}

/* A task as HELLO reports it: with its newest checkpoint, which the scheduler must know before it
 * acts on the task's state (an attempt this HELLO ends resumes from it). */
static void hello_ref(struct proto_task_ref *out, const struct wrk_task *t)
{
    *out = t->rec.ref;
    if (t->ckpt_last) {
        mu_strlcpy(out->checkpoint, t->ckpt_last, sizeof(out->checkpoint));
        out->checkpoint_at_ms = t->ckpt_at_ms;
    }
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
        if (a->tasks[i].rec.ref.state == PROTO_TASK_RUNNING && n < PROTO_MAX_TASKS)
            hello_ref(&refs[n++], &a->tasks[i]);
        else if (a->tasks[i].rec.ref.state != PROTO_TASK_RUNNING)
            exited[nex++] = &a->tasks[i]; /* EXITED, or LOST after a restart */
    }
    qsort(exited, (size_t)nex, sizeof(struct wrk_task *), exited_newest_first);
    for (int i = 0; i < nex && n < PROTO_MAX_TASKS; i++)
        hello_ref(&refs[n++], exited[i]);
    if (n < a->ntasks)
        mu_log_limited(MU_LOG_WARN, WRK_MOD, "wrk-hello-cap", 60,
                       "node=%s HELLO carries %d of %d tasks (the protocol's cap)", a->node, n,
                       a->ntasks);
    free(exited);
    *out = refs;
    return n;
}

void wrk_send_hello(struct wrk_agent *a)
{
    struct proto_msg m;
    struct proto_task_ref *refs = NULL;
    struct mu_err err;
    int n;

    proto_msg_init(&m, PROTO_HELLO);
    m.echo_ms = mu_time_mono_ms(); /* carried back, it renews the lease (lease_watch.c) */
    mu_strlcpy(m.pool, a->pool, sizeof(m.pool));
    mu_strlcpy(m.addr, a->addr, sizeof(m.addr));
    mu_strlcpy(m.instance_id, a->instance_id, sizeof(m.instance_id));
    mu_strlcpy(m.confinement,
               a->cg.version == 2   ? "cgroup-v2"
               : a->cg.version == 1 ? "cgroup-v1"
                                    : "pgroup",
               sizeof(m.confinement));
    m.cpus = a->cpus;
    m.memory_mb = a->memory_mb;
    m.nlabels = a->nlabels;
    memcpy(m.labels, a->labels, sizeof(m.labels));
    n = hello_tasks(a, &refs, &err);
    if (n < 0 || proto_msg_set_gpus(&m, a->ngpus, a->gpus, &err) != 0
        || proto_msg_set_tasks(&m, n, refs, &err) != 0) {
        mu_log(MU_LOG_ERROR, WRK_MOD, "node=%s cannot build HELLO: %s", a->node, err.msg);
    } else {
        agent_send(a, &m);
        /* While the scheduler is away a HELLO goes out every heartbeat: keep those quiet. */
        mu_log(a->quiet ? MU_LOG_DEBUG : MU_LOG_INFO, WRK_MOD,
               "node=%s HELLO to %s: %d GPUs, %d tasks, epoch %" PRIu64, a->node, a->sched_now,
               a->ngpus, n, a->epoch);
    }
    free(refs);
    proto_msg_release(&m);
    a->hello_sent = true;
    a->last_beat_ms = mu_time_mono_ms();
    /* Notices are idempotent for the scheduler: repeat them so that a scheduler which asked
     * who we are cannot miss them.  Not while it is unreachable: those would only pile up. */
    if (a->have_spot && !a->quiet)
        wrk_send_notice(a, PROTO_SPOT_NOTICE, &a->spot);
    if (a->have_rebalance && !a->quiet)
        wrk_send_notice(a, PROTO_REBALANCE, &a->rebalance);
}

void wrk_send_bye(struct wrk_agent *a)
{
    struct proto_msg m;
    struct proto_task_ref *refs = NULL;
    struct mu_err err;
    int n;

    proto_msg_init(&m, PROTO_BYE);
    n = hello_tasks(a, &refs, &err);
    if (n < 0 || proto_msg_set_tasks(&m, n, refs, &err) != 0)
        mu_log(MU_LOG_ERROR, WRK_MOD, "node=%s cannot build BYE: %s", a->node, err.msg);
    else {
        agent_send(a, &m);
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s BYE to %s: %d task(s) still known", a->node,
               a->sched_now, n);
    }
    free(refs);
    proto_msg_release(&m);
}

void wrk_send_heartbeat(struct wrk_agent *a)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.echo_ms = mu_time_mono_ms();
    m.answer_every = a->answer_every > 1 ? a->answer_every : 0;
    agent_send(a, &m);
    proto_msg_release(&m);
    a->last_beat_ms = mu_time_mono_ms();
}

void wrk_send_task_status(struct wrk_agent *a, const struct proto_task_ref *ref)
{
    struct proto_msg m;
    proto_msg_init(&m, PROTO_TASK_STATUS);
    m.task = *ref;
    agent_send(a, &m);
    proto_msg_release(&m);
}

/* error NULL: started; else why not, and whether that is the node's fault (else the job's). */
void wrk_send_bind_ack(struct wrk_agent *a,
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

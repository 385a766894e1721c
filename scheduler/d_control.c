/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): operator commands from the control stream (musterctl):
 * cancel, hold and release a job; drain, cordon and uncordon a node; reload the config
 * (d_reload.c); import an EC2 instance topology (d_topo.c); forget a node (d_node.c).  drain moves
 * the node's gangs elsewhere the way a preemption does (checkpoint signal, grace, requeue without
 * counting a failure); cordon only stops new work.  A node's cordon or drain is kept (d_wanted_set,
 * the copy of <prefix>node:wanted that musterctl writes with the entry) and applied when the node
 * registers, so one said while the node or musterd was away is not lost (issue #40).  An entry
 * with timeout_ms is dropped once Redis's clock is past its deadline: its asker gave up and was
 * told so, and applying it later would contradict that.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* 0, or -1 when a write failed (the command is read again; holding twice changes nothing).
 * Holding an array holds its pending elements too, as Slurm's hold of an array job does, and
 * releasing it releases them: an array's hold stops every element that has not started. */
static int job_hold(struct musterd *d, struct d_job *j, bool hold)
{
    struct queue_kv f[] = { { QUEUE_F_HELD, hold ? "1" : NULL } };
    struct d_change c = { .to = D_SAME, .fields = f, .nfields = 1 };
    size_t pos = 0;
    struct d_job *e;

    while (j->array && (e = mu_map_next(d->jobs, &pos)) != NULL) {
        if (strcmp(e->array_of, j->id) == 0 && e->state == QUEUE_PENDING && !e->placed
            && e->held != hold && job_hold(d, e, hold) != 0)
            return -1;
    }
    if (d_job_write(d, j, &c) != 0)
        return -1;
    j->held = hold;
    if (hold && j->state == QUEUE_PENDING && !j->placed)
        d_job_set_reason(d, j, D_HELD_REASON); /* at once: a pass may stop before it */
    if (!hold) {
        j->reason[0] = '\0';
        d->dirty = true;
        if (j->array)
            d_array_fill(d, j); /* may free j */
    }
    return 0;
}

void d_node_drain(struct musterd *d, struct d_node *node, int grace_s)
{
    struct sched_reaction r = sched_react_drain((int64_t)mu_time_mono_ms(), grace_s);
    char why[PROTO_NODE_MAX + 32];
    size_t pos = 0;
    struct d_job *j;
    int n = 0;

    (void)mu_snprintf(why, sizeof(why), "node %s drained", node->name);
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        if (!j->placed || j->end != D_END_NONE || !d_gang_runs_on(j, node->idx))
            continue;
        /* A stop that cannot be written now is made once Redis is back (d_outage_recheck). */
        n += d_gang_react(d, j, &r, why, (uint64_t)r.stop_by_ms, D_C_REQUEUES) == 0;
    }
    mu_log(MU_LOG_INFO, "sched", "node=%s draining: %d gang(s) checkpointed and requeued%s",
           node->name, n, grace_s >= 0 ? " (grace capped by --grace)" : "");
}

/* cordon, drain or uncordon: kept for the node's next registration, and applied now if it is
 * known to this run. */
static void node_command(struct musterd *d, const struct queue_entry *e)
{
    enum sched_node_state admin = strcmp(e->cmd, "drain") == 0    ? SCHED_NODE_DRAINING
                                  : strcmp(e->cmd, "cordon") == 0 ? SCHED_NODE_CORDONED
                                                                  : SCHED_NODE_READY;
    int idx = sched_cluster_node_find(d->cluster, e->arg);
    struct d_node *node = idx >= 0 ? &d->nodes[idx] : NULL;
    struct mu_err err;

    if (d_wanted_set(d, e->arg, admin, e->grace_s, &err) != 0)
        mu_log(MU_LOG_ERROR, "sched", "node=%s %s: cannot keep it for its registration: %s", e->arg,
               e->cmd, err.msg);
    if (!node) {
        mu_log(MU_LOG_INFO, "sched", "node=%s %s kept: the node is not registered; %s", e->arg,
               e->cmd,
               admin == SCHED_NODE_READY ? "it registers ready" : "applied when it registers");
        return;
    }
    d_node_admin_set(node, admin, e->grace_s);
    d_node_state_set(d, node, admin); /* not online: its state stays lost or down till it is back */
    mu_log(MU_LOG_INFO, "sched", "node=%s %s%s", node->name, sched_node_state_name(node->admin),
           node->online ? "" : " (not online: kept for when it registers again)");
    if (node->admin == SCHED_NODE_DRAINING)
        d_node_drain(d, node, e->grace_s);
    d->nodes_dirty = true;
    d->dirty = true;
}

/* An entry past its deadline: dropped, said in the log and, for a question, to the asker's
 * answer key (nobody may read it: the asker gave up at the deadline). */
static void control_expired(struct musterd *d, const struct queue_entry *e, uint64_t now_ms)
{
    char text[512];
    char key[QUEUE_JOB_ID_MAX + 8];
    struct mu_err err;

    mu_log(MU_LOG_WARN, "sched",
           "control %s '%s' (entry %s) expired: not taken within its %llu ms (Redis's clock is "
           "%llu); dropped, not applied",
           e->cmd, e->arg, e->id, (unsigned long long)e->timeout_ms, (unsigned long long)now_ms);
    if (strcmp(e->cmd, "why") != 0)
        return;
    (void)mu_snprintf(key, sizeof(key), QUEUE_K_WHY "%s", e->id);
    (void)mu_snprintf(
        text, sizeof(text),
        "{\"error\":\"expired: musterd read the question after its %llu ms deadline\"}",
        (unsigned long long)e->timeout_ms);
    if (d->store.ops->answer_push(d->store.ctx, key, text, strlen(text), &err) != 0)
        d->redis_down = true;
}

/* Whether e is past its deadline (then dropped and acknowledged here); false also when Redis's
 * clock cannot be read (*unread: the entry is left unacknowledged, read again after the
 * reconnect). */
static bool control_is_stale(struct musterd *d, const struct queue_entry *e, bool *unread)
{
    uint64_t now_ms = 0;
    struct mu_err err;

    *unread = false;
    if (e->timeout_ms == 0)
        return false;
    if (d->store.ops->time_ms(d->store.ctx, &now_ms, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "control-time", 5,
                       "control %s: cannot read Redis's clock for its deadline: %s", e->cmd,
                       err.msg);
        d->redis_down = true;
        *unread = true;
        return false;
    }
    if (!queue_control_expired(e->id, e->timeout_ms, now_ms))
        return false;
    control_expired(d, e, now_ms);
    d_stream_ack(d, e);
    return true;
}

static bool is_job_command(const char *cmd)
{
    return strcmp(cmd, "cancel") == 0 || strcmp(cmd, "hold") == 0 || strcmp(cmd, "release") == 0;
}

/* cancel, hold or release of job e->arg (j, NULL when not active); false when a write failed. */
static bool job_command(struct musterd *d, const struct queue_entry *e, struct d_job *j)
{
    bool cancel = strcmp(e->cmd, "cancel") == 0;
    bool unmade = false;

    if (!j && cancel && d_array_has_unmade(d, e->arg))
        return d_array_cancel_unmade(d, e->arg, &unmade) == 0;
    if (!j && cancel && queue_job_id_is_valid(e->arg)) {
        /* A long submit backlog can be read after a cancel that names one of its entries:
         * remember it, and the job is cancelled when its submission is taken in. */
        struct mu_err err;
        char *by = strdup(e->owner); /* judged when the job is taken in (d_intake.c) */
        if (by && mu_map_count(d->early_cancels) < 100000 && !mu_map_get(d->early_cancels, e->arg)
            && mu_map_put(d->early_cancels, e->arg, by, &err) == 0) {
            mu_log(MU_LOG_INFO, "sched", "job=%s cancel noted before its submission", e->arg);
            by = NULL;
        }
        free(by);
        return true;
    }
    if (!j) {
        mu_log(MU_LOG_WARN, "sched", "control %s: job '%s' is not active", e->cmd, e->arg);
        return true;
    }
    if (cancel) {
        char why[QUEUE_OWNER_MAX + 16] = "cancelled by operator";
        if (e->owner[0]) /* proven: name who */
            (void)mu_snprintf(why, sizeof(why), "cancelled by %s", e->owner);
        return (j->array ? d_array_cancel(d, j, why) : d_job_cancel_why(d, j, why)) == 0;
    }
    return job_hold(d, j, strcmp(e->cmd, "hold") == 0) == 0;
}

/* The job a job command names, for the access rules: the active job, else the array that owns
 * unmade elements of that id. */
static struct d_job *named_job(struct musterd *d, const char *id)
{
    struct d_job *j = mu_map_get(d->jobs, id);
    char base[QUEUE_JOB_ID_MAX];
    int64_t index;

    if (!j && queue_job_id_split(id, base, sizeof(base), &index))
        j = mu_map_get(d->jobs, base);
    return j;
}

void d_control(struct musterd *d, const struct queue_entry *e)
{
    bool unread;
    bool applied = true;
    char why[512];
    bool job_cmd = is_job_command(e->cmd);

    if (control_is_stale(d, e, &unread) || unread)
        return;
    if (d_access_control(d, e, job_cmd ? named_job(d, e->arg) : NULL, why, sizeof(why)) != 0) {
        mu_log(MU_LOG_INFO, "sched", "control %s '%s' (entry %s) refused: %s", e->cmd, e->arg,
               e->id, why);
        d_access_verdict(d, e, why);
        d_stream_ack(d, e);
        return;
    }
    if (job_cmd) {
        applied = job_command(d, e, mu_map_get(d->jobs, e->arg));
    } else if (strcmp(e->cmd, "drain") == 0 || strcmp(e->cmd, "cordon") == 0
               || strcmp(e->cmd, "uncordon") == 0) {
        node_command(d, e);
    } else if (strcmp(e->cmd, "reload") == 0) {
        d_config_reload(d, e->id);
    } else if (strcmp(e->cmd, "why") == 0) {
        d_why(d, e->id, e->arg);
    } else if (strcmp(e->cmd, "topology") == 0) {
        d_topo_import(d, e->arg);
    } else if (strcmp(e->cmd, "forget") == 0) {
        applied = d_node_forget(d, e->id, e->arg) == 0; /* else read again after the outage */
    } else {
        mu_log_limited(MU_LOG_WARN, "sched", "control-unknown", 5,
                       "control: unknown command '%s' ignored", e->cmd);
    }
    /* A job command that could not be written is not acknowledged: Redis hands it out again
     * after the reconnect (the consumer group's pending entries are read first). */
    if (applied) {
        d_access_verdict(d, e, NULL);
        d_stream_ack(d, e);
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 3 (see d_io.h): what arrives, and what comes due.  Submissions (d_intake.c),
 * operator commands (d_control.c), the workers' messages (d_report.c: registration, task
 * reports, checkpoints, spot notices, nodes lost, bind timeouts), adoption of running gangs
 * after a restart (d_adopt.c), restart recovery (d_recover.c), preemption planning for a pending
 * job (d_preempt.c), moves back to spot (d_spot_return.c) and time limits (d_clock.c).
 */
#ifndef MUSTER_SCHEDULER_D_HANDLERS_H
#define MUSTER_SCHEDULER_D_HANDLERS_H

#include "scheduler/d_gang.h"
#include "scheduler/d_node.h"

/* d_intake.c: one submission from the stream (stored and acknowledged, or rejected). */
void d_intake_submit(struct musterd *d, const struct queue_entry *e);

/* d_deps.c: dependencies between jobs (spec "after" and "singleton", issue #12). */
/* At intake, before j is stored: resolves its conditions to job ids (j->deps) and judges each
 * against the state of the job it names now.  -1 with MU_E_SPEC (reject the submission: an
 * unknown job or key, the job itself, a singleton without a name), MU_E_REDIS or MU_E_NOMEM.
 * While j waits, j->reason says for what.  When its conditions can never be met (one of them;
 * with after_or, all), never gets the reason (else "") and j is to be cancelled once stored;
 * with the config's dependency_never_met "pend", never stays "" and the reason is j's. */
int d_deps_resolve(
    struct musterd *d, struct d_job *j, char *never, size_t never_size, struct mu_err *err);
/* j's deps as stored in its hash's "after" field, "ID:when,..." (with after_or "ID:when?...",
 * Slurm's separator; heap: free()); NULL without memory.  d_deps_parse reads it back into
 * j->deps and j->deps_or (a restart); -1 with err when unreadable. */
char *d_deps_format(const struct d_job *j);
int d_deps_parse(struct d_job *j, const char *text, struct mu_err *err);
/* The pending reason of j while it waits: "after 1795-0 succeeds (and 2 more conditions)". */
void d_deps_reason(const struct d_job *j, char *buf, size_t size);
/* A new job, stored: onto the pending list when nothing is open, else into the waiters of what
 * it waits for.  -1 without memory. */
int d_deps_start(struct musterd *d, struct d_job *j, struct mu_err *err);
/* Looks at the dependents of the jobs that started or ended since the last call (d->woken):
 * releases those whose conditions are all met, cancels those that can never be (which wakes
 * their own dependents, looked at in the same call).  Stops early when Redis is down. */
void d_deps_wake(struct musterd *d);
/* After a restart's recovery: registers every waiting job and judges it against the states
 * now.  -1 with err on a Redis error. */
int d_deps_recover(struct musterd *d, struct mu_err *err);

/* d_array.c: job arrays (spec "array", issue #12). */
/* Sets j up as an array: its progress, with a copy of the submitted spec text (each element's
 * spec).  -1 without memory. */
int d_array_prepare(struct d_job *j, const char *spec, size_t spec_len, struct mu_err *err);
/* Turns an array's parsed spec s into its element's: MUSTER_ARRAY_JOB_ID, MUSTER_ARRAY_INDEX
 * and the array's MUSTER_ARRAY_COUNT, _MIN, _MAX and _STEP (QUEUE_ARRAY_ENV in all) added to
 * env, the array's own keys (array, after, singleton, idempotency key) dropped.  -1 without
 * memory. */
int d_array_element_spec(struct queue_spec *s,
                         const char *array_id,
                         int64_t index,
                         struct mu_err *err);
/* Makes the array's next elements while its window and throttle allow (none while it waits for
 * dependencies or is held); ends the array once every element ended (frees p then). */
void d_array_fill(struct musterd *d, struct d_job *p);
/* d_array_fill for every array (after a restart, after a Redis outage). */
void d_array_fill_all(struct musterd *d);
/* An element started or ended (its wake): its array counts it and makes the next ones. */
void d_array_element_event(struct musterd *d, const struct d_wake *w);
/* Cancels the array's active elements, then the array itself, with why.  -1 when a write
 * failed. */
int d_array_cancel(struct musterd *d, struct d_job *p, const char *why);
/* Cancels element id of an active array before it was made (*found false when id is no such
 * element).  -1 when a write failed. */
int d_array_cancel_unmade(struct musterd *d, const char *id, bool *found);
/* True when id is an element of an active array that has not been made yet. */
bool d_array_has_unmade(struct musterd *d, const char *id);
/* The stored array_skip ("3,17") back into p->array; -1 when unreadable or without memory. */
int d_array_skip_parse(struct d_job *p, const char *text);
/* After a restart's load: each array counts its recovered elements and makes the next ones. */
void d_array_recover(struct musterd *d);

/* d_control.c: one operator command (cancel, hold, release, drain, cordon, uncordon, reload,
 * why, topology).  An entry past its deadline (timeout_ms, against Redis's clock) is dropped and
 * acknowledged; one whose deadline cannot be checked (Redis down) is left unacknowledged.  A node
 * command is kept for the node's registration (d_wanted_set) as well as applied. */
void d_control(struct musterd *d, const struct queue_entry *e);
/* d_reload.c: reads d->config_path again; the queues take effect, any other change is refused.
 * id names the request in the answer (the control entry's id, or "SIGHUP"). */
void d_config_reload(struct musterd *d, const char *id);

/* d_report.c: the workers' messages. */
void d_hello(struct musterd *d, const char *identity, const struct proto_msg *m);
void d_bind_ack(struct musterd *d, struct d_node *node, const struct proto_msg *m);
void d_task_status(struct musterd *d, struct d_node *node, const struct proto_task_ref *t);
void d_checkpoint_done(struct musterd *d, struct d_node *node, const struct proto_msg *m);
void d_spot_notice(struct musterd *d, struct d_node *node, const struct proto_msg *m);
void d_rebalance(struct musterd *d, struct d_node *node, const struct proto_msg *m);
/* BYE: the worker stopped its tasks and leaves.  Its task reports are applied, the node is down
 * at once, and what still runs there goes the lost node's way (d_node_lost_tasks). */
void d_bye(struct musterd *d, struct d_node *node, const struct proto_msg *m);

/* d_spot_return.c: after a checkpoint of j landed, moves j from the on-demand capacity it fell
 * back to onto spot capacity that is free now, when that pays (issue #16). */
void d_spot_return_check(struct musterd *d, struct d_job *j);
/* Node idx was judged lost, or is down (BYE): its tasks not answered for are gone (their
 * supervisors stop them); their gangs end their attempts and wait for the fence before the next
 * one. */
void d_node_lost_tasks(struct musterd *d, int node_idx);
/* Gangs whose BINDs were not all acknowledged in time: given up (d_report.c). */
void d_jobs_check_timeouts(struct musterd *d, uint64_t now_ms);
/* Stopping gangs: KILL once their grace is over, KILL again while a task is not answered for. */
void d_stops_check(struct musterd *d, uint64_t now_ms);

/* d_adopt.c: adopting running gangs after a scheduler restart (issue #5). */
/* Sets j, stored as `stored` (STARTING, RUNNING or PREEMPTING), up to be adopted from its
 * stored placement; -1 when the placement is unreadable. */
int d_adopt_prepare(struct musterd *d,
                    struct d_job *j,
                    const char *placement,
                    enum queue_state stored);
/* A node registered: resolves the adopting gangs' tasks it runs (before the HELLO reconcile). */
void d_adopt_node(struct musterd *d, struct d_node *node, const struct proto_msg *hello);
/* Gangs whose nodes did not come back in time: their missing tasks count as lost. */
void d_adopt_check(struct musterd *d, uint64_t now_ms);
/* A registered node reports a task of gang j, which still waits for its other nodes. */
void d_adopt_task_status(struct d_job *j,
                         const struct d_node *node,
                         const struct proto_task_ref *r);

/* d_recover.c: takes the active jobs back after a restart. */
int d_jobs_recover(struct musterd *d, struct mu_err *err);
/* After a Redis outage, once every job is written again: makes the transitions whose writes
 * failed (releases, RUNNING, the stops a drain or a spot notice asked for). */
void d_outage_recheck(struct musterd *d);

/* d_preempt.c: the planner's dry run for pending job p (musterctl why): the plan d_preempt_first
 * would make now, victims as indices into d->pass.victim_jobs (valid until the next pass),
 * stopping nothing and leaving the cluster as it was.  slots: p->spec.tasks entries.  Returns
 * sched_preempt_plan's 1 (a plan) or 0 (none; plan->reason says why), -1 (plan->reason too). */
int d_preempt_preview(struct musterd *d,
                      const struct d_job *p,
                      int64_t now_ms,
                      struct sched_preempt_plan *plan,
                      struct sched_slot *slots);
/* d_why.c: answers "why" for job_id (a control question, entry_id names the answer): its
 * reason, the core's placement per capacity type, the pools' limits, and a preemption preview,
 * as one JSON document on <prefix>why:<entry_id>. */
void d_why(struct musterd *d, const char *entry_id, const char *job_id);
/* d_preempt.c: collects the running gangs a pass may preempt, once per pass before it offers
 * preemption to its pending jobs (no victim changes until a plan is made, which ends the
 * offers); d_preempt_first uses them.  Without memory there are none this pass. */
void d_preempt_collect(struct musterd *d, int64_t now_ms);
/* The pass's one preemption: sched_preempt_first over the pass's first n jobs (d->pass.who,
 * d->pass.out) and the victims of the last d_preempt_collect; stops the plan's victims (strictly
 * lower-priority preemptible gangs, or quota the preemptor's queue reclaims) and gives the
 * preemptor its reason.  When no stop of a plan could be written, the next job may plan.
 * Returns when (mono ms) the first too-young victim that would let a job start comes of age, for
 * a pass then; 0 = none. */
uint64_t d_preempt_first(struct musterd *d, int n, int64_t now_ms);
/* The drain of node: checkpoints and requeues every gang running on it (not counted as a
 * failure), the checkpoint grace capped at grace_s when >= 0. */
void d_node_drain(struct musterd *d, struct d_node *node, int grace_s);

/* d_logs.c: task logs for musterctl logs (README "Logs from any machine"). */
/* A log request from the logreq stream: relayed to its node as a LOG_READ, or answered at once
 * (bad request, node not connected, too many requests). */
void d_logs_request(struct musterd *d, const struct queue_entry *e);
/* A LOG_DATA from node: written to the request's answer key. */
void d_logs_data(struct musterd *d, const struct d_node *node, const struct proto_msg *m);
/* Requests whose node did not answer in time: answered with that. */
void d_logs_check(struct musterd *d, uint64_t now_ms);

/* d_clock.c: stops running gangs that reached their time limit (ending TIMEOUT). */
void d_limits_check(struct musterd *d, uint64_t now_wall_ms);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 2 (see d_io.h): the life of a placed gang.  A gang the pass placed is started
 * (STARTING written, BINDs sent), becomes RUNNING once every task is acknowledged, may be stopped
 * (checkpoint signal, grace, KILL) to be requeued or ended, and its attempt ends once: by a task
 * failure, by success, or because the infrastructure failed it.  Its resources are released
 * only when every task of the attempt is gone, and then it is requeued or forgotten.
 */
#ifndef MUSTER_SCHEDULER_D_GANG_H
#define MUSTER_SCHEDULER_D_GANG_H

#include "scheduler/d_job.h"

/*
 * Starts a gang whose slots the scheduling pass committed, in two halves, so that a pass's starts
 * are written in one Redis round trip (between the store's batch_begin and batch_end):
 * d_gang_start_write writes (or appends to the batch) STARTING with the placement; -1 (no
 * memory, or the write failed): nothing started (abandoned), the caller releases the slots.
 * Once the write landed, d_gang_start_commit moves the job to STARTING and sends the BINDs; when
 * it did not, d_gang_start_abandon leaves it PENDING, to be written whole once Redis is back, and
 * the caller releases the slots.
 */
int d_gang_start_write(struct musterd *d, struct d_job *j);
void d_gang_start_commit(struct musterd *d, struct d_job *j);
void d_gang_start_abandon(struct musterd *d, struct d_job *j);
/* A STARTING gang whose every task is acknowledged becomes RUNNING (written). */
void d_job_running_if_all_acked(struct musterd *d, struct d_job *j);
/* Sends KILL (SIGTERM, then SIGKILL after grace_s) to task t of j's placed attempt. */
void d_task_kill(struct musterd *d, struct d_job *j, int t, int grace_s);
/* KILLs every task of the attempt not gone yet (and remembers when, for the resends). */
void d_job_kill_live(struct musterd *d, struct d_job *j);
/*
 * Ends the current attempt because of `why`.  counted: a task failed (counts against
 * max_retries, backs off); otherwise the infrastructure failed (bind timeout, node lost, a
 * node's refusal) and the gang is simply requeued.  May free j.
 */
void d_job_attempt_end(
    struct musterd *d, struct d_job *j, bool counted, int exit_code, const char *why);
/* Task t of j is gone (its exit in tasks[t]): end the attempt, or finish the job.  May free j. */
void d_job_task_exited(struct musterd *d, struct d_job *j, int t, const char *node_name);
/* Gives the resources back once nothing of the attempt runs; then requeue or forget (may free
 * j). */
void d_job_release_if_done(struct musterd *d, struct d_job *j);
/* Drops a final job from the table (once its final state is written) and retires it: out of the
 * pending list, the late reasons and the live set first. */
void d_job_forget(struct musterd *d, struct d_job *j);
/*
 * Stops a running gang: checkpoint signal, then KILL at deadline_ms (mono) or when its
 * checkpoint grace is over, whichever is first.  to QUEUE_PENDING requeues it (state
 * PREEMPTING until it stopped, then PENDING with attempt + 1); a final state (QUEUE_TIMEOUT)
 * ends the job once every task is gone (the state stays as it is meanwhile, the reason says
 * why).  0, or -1 when the gang is not running (not placed, already stopping) or the write
 * failed: then nothing was sent, and the caller decides again later.
 */
int d_gang_stop(struct musterd *d,
                struct d_job *j,
                const char *why,
                uint64_t deadline_ms,
                enum d_counter counter,
                enum queue_state to);
/* A reaction of the core's (core/react.c: spot notice, drain, time limit) applied to the gang j:
 * first in its queue once requeued when the reaction says so, then d_gang_stop with stop_by_ms
 * (mono; 0: its own grace), requeued or ended TIMEOUT as the reaction says.  Its return. */
int d_gang_react(struct musterd *d,
                 struct d_job *j,
                 const struct sched_reaction *r,
                 const char *why,
                 uint64_t stop_by_ms,
                 enum d_counter counter);
/* Cancels j (CANCELLED written; a placed gang is killed and released once gone).  -1 when the
 * write failed: not cancelled. */
MU_MUST_CHECK int d_job_cancel(struct musterd *d, struct d_job *j);
/* The same with why as the event's reason and the job's error ("cancelled by operator" for
 * d_job_cancel; a dependency that can never be met names it). */
MU_MUST_CHECK int d_job_cancel_why(struct musterd *d, struct d_job *j, const char *why);
/* True when task of j still runs on node idx. */
bool d_gang_runs_on(const struct d_job *j, int idx);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 1 (see d_io.h): the job records.  A struct d_job is one job as musterd knows
 * it: its spec, its state, and while it holds resources its placement (slots, the one record of
 * where each task runs) and how each task is doing.  d_job_write is the only way a job's state
 * reaches Redis; it derives the "state" field and the event from the state it is given.  The job
 * table (id -> job, d_job.c) and the pending list (d_pending.c) live here too; d_pending.c calls
 * into d_job.c, never the other way (forgetting a job, which touches both, is d_gang.c's).
 *
 * Invariants:
 * - every transition is written to Redis before any worker hears of it (write-ahead);
 * - a job's resources stay committed in the cluster until every task of its attempt is gone
 *   (exited, killed, or its node lost), so a new attempt never runs beside an old one;
 * - a job is on the pending list only when it is PENDING and holds no resources.
 */
#ifndef MUSTER_SCHEDULER_D_JOB_H
#define MUSTER_SCHEDULER_D_JOB_H

#include "config/cfg.h"
#include "core/sched.h"
#include "scheduler/d_io.h"

#define D_AVOID_MAX 8 /* nodes a job's next attempts avoid, newest kept (<= SCHED_MAX_AVOID) */

struct musterd;

struct d_task {
    bool acked;     /* BIND_ACK ok received */
    bool gone;      /* exited, lost, or never started: nothing of it runs any more */
    bool committed; /* its GPUs/CPUs/memory are committed in the cluster */
    bool lost;      /* gone because its node or worker lost it (not an exit) */
    bool fenced;    /* exited because its worker fenced itself (the scheduler was away) */
    bool oom;       /* its worker's cgroup saw the kernel's OOM killer (memory_mb_per_task) */
    bool stopped;   /* exited because its worker's clean stop stopped it (then BYE) */
    bool held;      /* the worker keeps this exit until we acknowledge it (KILL) at the
                     * attempt's end, once the outcome is in Redis (d_job_release_if_done) */
    int exit_code;
    int signal;
    int pid;
};

enum d_end {
    D_END_NONE = 0, /* the attempt runs (or is starting) */
    D_END_RETRY,    /* attempt over, job goes back to PENDING once every task is gone */
    D_END_FINAL,    /* job reached a final state; forget it once every task is gone */
};

/* One dependency of a job (spec "after" resolved to an id, or "singleton"; d_deps.c). */
struct d_dep {
    char id[QUEUE_JOB_ID_MAX]; /* the job waited for */
    enum queue_when when;
    bool met;
    bool never; /* it can never be met (its job ended otherwise) */
};

/* An array's elements by outcome: what a dependency on the array judges (every element must
 * meet the condition, d_deps.c). */
struct d_array_tally {
    int64_t total;   /* elements */
    int64_t ok;      /* ended SUCCEEDED */
    int64_t notok;   /* ended otherwise (cancelled before they were made included) */
    int64_t nostart; /* of those, ended before they ever started */
    int64_t started; /* started at least once */
};

/* A job's end (or start) that jobs wait for, or of an array's element, or an array's progress,
 * noted by d_job_wake_dependents for d_deps_wake. */
struct d_wake {
    char id[QUEUE_JOB_ID_MAX];
    enum queue_state state;
    bool started;       /* it had started an attempt (for "started" and the final states) */
    bool element;       /* an array's element (its array counts it: d_array.c) */
    bool was_unstarted; /* an element that was counted in its array's pending until now */
    bool array;         /* an array: its dependents judge tally, not state */
    struct d_array_tally tally;
};

/* An array's progress (spec "array", issue #12; d_array.c).  Its elements are made a few at a
 * time, in index order: at most D_ARRAY_WINDOW of them pending (made, not started yet), and with
 * "%N" at most N active (made, not final), so the pass never sees more of an array than can
 * start soon. */
struct d_array {
    char *spec;      /* heap: the submitted text, each element's spec */
    size_t spec_len; /* its length */
    int64_t next;    /* position of the next element to make (0..count) */
    int active;      /* elements made and not final */
    int pending;     /* of those, not started yet */
    int64_t ok;      /* elements ended SUCCEEDED */
    int64_t notok;   /* elements ended otherwise, or cancelled before they were made */
    int64_t nostart; /* of the ended elements, those that never started */
    int64_t *skip;   /* heap: indices cancelled before they were made, nskip of them */
    int nskip;
    bool fill_failed; /* a write failed making an element: d_deps_wake tries again */
};

struct d_job {
    char id[QUEUE_JOB_ID_MAX];
    struct queue_spec spec;
    struct sched_request req; /* req.gpu_type borrows spec.gpu_type */
    /* What the queue statistics read of every job at each status write (d_status.c
     * queue_stats), with spec.tasks and spec.gpus_per_task: one cache line of its own, so that
     * the walk asks ahead for two lines of each job, not four. */
    _Alignas(64) enum queue_state state;
    int queue_idx;         /* its queue in the config; nqueues = no longer configured */
    uint64_t submitted_ms; /* wall */
    bool placed;           /* resources committed in the cluster (slots/tasks valid) */
    bool borrowed;         /* while placed: started beyond its queue's nominal quota (job hash
                              field "borrowed"); its cohort may reclaim it */
    int deps_open;         /* conditions not met yet; while > 0 the job is PENDING but off the
                              pending list, so the pass never sees it (woken by d_deps_wake) */
    struct d_array *array; /* an array: its elements' progress; never on the pending list
                              itself.  NULL for other jobs */
    int attempt;           /* 1.. */
    int failures;          /* attempts ended by a task failure; FAILED when > max_retries */
    uint64_t started_ms;   /* wall, current attempt */
    bool held;
    int placed_attempt;  /* the attempt slots/tasks belong to (< attempt after a requeue) */
    struct d_user *user; /* its user in its queue (d_usage_user; borrowed); NULL until asked */
    int relax_level;     /* the pass's required topology level after waiting (-1 none) */
    int64_t relax_in_s;  /* seconds until it widens again; 0 = it will not */
    enum d_end end;
    struct sched_slot *slots;  /* spec.tasks entries while placed: task t runs on node
                                  slots[t].node (-1 while an adopted gang waits for it), GPUs
                                  slots[t].gpus; the one record of the placement */
    struct d_task *tasks;      /* spec.tasks entries while placed: how each task is doing */
    int ncommitted;            /* of tasks, those committed (d_job_task_commit) */
    uint64_t bind_deadline_ms; /* mono; while STARTING */
    int master_port;
    double lost_gpu_s;           /* GPU-seconds of work lost by ended attempts, all told */
    char *last_checkpoint;       /* heap (d_job_text_set), NULL = none: newest checkpoint path */
    uint64_t last_checkpoint_ms; /* wall ms it was written */
    bool head_of_queue;          /* requeued by a spot interruption: first in its priority */
    uint64_t kill_at_ms;         /* mono: a stopping gang gets KILL then (checkpoint grace over) */
    uint64_t kill_sent_ms;       /* mono: the attempt's live tasks were last sent KILL; 0 = not yet.
                                    Repeated until each task is answered for (d_stops_check) */
    char preempted_for[QUEUE_JOB_ID_MAX]; /* while PREEMPTING for another job: its id */
    char *stop_reason;    /* heap (d_job_text_set), NULL = none: why it is PREEMPTING */
    int victims_stopping; /* as a preemptor: victims not yet stopped */
    /* Adoption after a scheduler restart (d_adopt.c): a gang RUNNING before the restart waits
     * for its nodes to register and report its tasks, instead of being restarted. */
    uint64_t not_before_ms; /* mono: no new attempt before: a lost node's tasks are fencing,
                               or (backoff) the retry backoff after a failed attempt */
    bool backoff;           /* not_before_ms is a retry backoff; failure says why */
    char *failure; /* heap (d_job_text_set), NULL = none: the last counted failure ("task 1 exited 3
                      on node n4") */
    int avoid[D_AVOID_MAX]; /* nodes the next attempts prefer not to use (a task failed or was
                               refused there), newest last; navoid used */
    int navoid;
    enum queue_state stop_to; /* end == D_END_FINAL while the state is not final yet: the final
                                 state to write once every task is gone (QUEUE_TIMEOUT) */
    bool unsynced;            /* a change could not be written (Redis down): write it whole later */
    bool cancel_wanted;       /* a cancel whose write failed: made once Redis is back */
    struct d_owed owed;       /* counts of remembered changes, stored by d_jobs_resync */
    bool forget_after_sync;   /* final, retired once written */
    uint64_t retired_ms;      /* mono: when it joined d->retired (d_job_retire) */
    int exit_code;            /* final: the job's exit code */
    char *error;              /* heap (d_job_text_set), NULL = none: FAILED: why */
    uint64_t finished_ms;     /* final: wall ms */
    bool adopting;
    uint64_t adopt_deadline_ms;          /* mono: nodes not back by then count as lost */
    char (*adopt_nodes)[PROTO_NODE_MAX]; /* heap: per task, the node it ran on */
    double place_s;                      /* how long the last placement took */
    char reason[256];                    /* why pending, now */
    uint64_t reason_written;             /* mu_hash of the reason last written to Redis; 0 none */
    bool reason_stored;                  /* a reason was written for this pending spell */
    uint64_t reason_at_ms;               /* mono: when */
    int64_t est_start_s; /* wall s: the last pass's estimated start (its reservation), 0 = none */
    struct d_dep *deps;  /* heap, ndeps entries: what it waits for (d_deps.c) */
    int ndeps;
    bool deps_or; /* one of deps met is enough (spec "after_or", Slurm's "?"); else all */
    char array_of[QUEUE_JOB_ID_MAX]; /* an array's element: the array's id; "" otherwise */
    char owner[QUEUE_OWNER_MAX];     /* who wrote its submission, proven by the stream (a
                                        service may submit for spec.user); "" = the shared one */
    bool array_unstarted;            /* an element counted in its array's pending */
    int live_at;                     /* 1 + its index in d->live; 0 = not placed nor adopting */
    int pending_at;                  /* 1 + its index in d->pending; 0 = not pending */
    int shape_at; /* while pending: its handle in d->shapes (sched_shapes_add); 0 = not pending */
    struct sched_order_job okey; /* its key in d->order, while in_order */
    bool in_order;
    uint32_t stepped_in; /* the serial of the last pass that stepped it (d->pass.serial) */
    int late_at;         /* 1 + its index in d->late (a reason not yet written); 0 = none */
};

/* The job's id as a submit time: the ms part of its stream id (0 when it has none). */
uint64_t d_job_id_ms(const char *id);
/* A zeroed record (heap, d_job_free); NULL without memory. */
struct d_job *d_job_alloc(void);
/* A new record for id (heap, zeroed, state PENDING, attempt 1); NULL without memory. */
struct d_job *d_job_new(const char *id);
void d_job_free(struct d_job *j);
/* Where an idempotency key lives: idem:<writer>:<key> for a writer's own stream (one user's keys
 * never meet another's), idem:<key> for the shared one; the part after idem: into buf. */
#define D_IDEM_KEY_MAX (QUEUE_KEY_MAX + QUEUE_OWNER_MAX)
void d_idem_key(const char *writer, const char *key, char *buf, size_t size);
/* Claims j's idempotency key (none: nothing to do) for j, where its writer's keys live: 0 with
 * owner "" when j holds it, or the id of the other job that does; -1 when Redis failed (logged). */
int d_job_idem_claim(struct musterd *d, const struct d_job *j, char *owner, size_t size);
/* Frees what placed j (slots, tasks, adopt_nodes) and clears the pointers; placed and adopting
 * are the caller's. */
void d_job_placement_drop(struct d_job *j);
/* The fields of a new job's hash into f (at most D_JOB_NEW_FIELDS entries): id, name, queue,
 * user, submitted_by (its owner; left out for the shared stream), priority, tasks, gpus_per_task,
 * attempt, max_retries, submitted_at, spec_json (borrowed) and reason (j->reason, or "waiting for
 * the scheduler"), the numbers formatted into bufs; returns how many.  f borrows from j and bufs.
 */
#define D_JOB_NEW_FIELDS 13
int d_job_fields_new(const struct d_job *j,
                     const char *spec_json,
                     char bufs[6][32],
                     struct queue_kv *f);
/* Fills j->req from j->spec (topology levels by the config's names), j->queue_idx and j->user.
 * 0, or -1 with err when out of memory. */
int d_job_request_build(struct musterd *d, struct d_job *j, struct mu_err *err);

#define D_SAME              (-1) /* d_change.to: no state change */
#define D_CHANGE_FIELDS_MAX 20   /* fields of one d_change besides the derived "state" */

/* One write of a job: what changes. */
struct d_change {
    int to;                        /* the new state (enum queue_state) or D_SAME */
    const char *event;             /* an event that is not a state ("CHECKPOINT", "STOPPING");
                                      NULL: the new state's, when there is one */
    const char *reason;            /* the event's reason */
    const struct queue_kv *fields; /* more fields of the hash (never "state": it is derived) */
    int nfields;
    const struct d_tally *tally; /* what it adds to the counters; NULL = nothing */
    int attempt;                 /* the event's attempt when not the job's (a requeue names the
                                    new one); 0 = the job's */
    uint64_t index_ms;           /* a new job: its place in the jobs index; 0 = not new */
    const char *ack_entry;       /* a submission entry acknowledged in the same round trip */
    const char *ack_owner;       /* its stream's owner (queue_entry.owner); NULL = shared */
};

/*
 * The write-ahead of every job change (docs/design.md §3): writes c to Redis before anything else
 * may learn of it.  The "state" field and the event come from c->to.  On success j->state becomes
 * c->to, the counters move, and 0 is returned.  On failure (Redis down) -1, and nothing in j
 * changes but the mark that it must be written whole again (unsynced).  Then a transition
 * musterd decides (start, stop, cancel, hold) stops there and is decided again once Redis is
 * back; one that records what a worker reported (an exit, a checkpoint) is kept in memory with
 * d_job_remember and written with the rest before anything new is decided.
 */
MU_MUST_CHECK int d_job_write(struct musterd *d, struct d_job *j, const struct d_change *c);
/* The one write under d_job_write, also for a submission that makes no struct d_job (rejected,
 * duplicate) or is not kept yet (a new job, kept once stored): c to the job hash id and its
 * event (of attempt), the counters raised when it lands.  A failure is logged and marks Redis
 * down; -1. */
MU_MUST_CHECK int d_record_write(struct musterd *d,
                                 const char *id,
                                 int attempt,
                                 const struct d_change *c);
/* What d_job_write does once its write landed: j->state = to (unless D_SAME), and its dependents
 * are told.  For a write made in a batch (d_store's batch_begin), once the batch landed. */
void d_job_moved(struct musterd *d, struct d_job *j, int to);
/* A record being made (a new submission, one recovered from Redis, a gang adopted after a
 * restart): j->state = st, as stored.  Not a change: no event, no dependent told.  With
 * d_job_moved, the only places j->state is set (scripts/lint.sh, check "state"). */
void d_job_state_load(struct d_job *j, enum queue_state st);
/* Keeps a reported fact c whose write failed: j->state = c->to (unless D_SAME) and its counts
 * raised in memory now and owed to Redis; d_jobs_resync writes the job whole with them. */
void d_job_remember(struct musterd *d, struct d_job *j, const struct d_change *c);
/* Acknowledges a stream entry that is done with (in the consumer group), on the store. */
void d_stream_ack(struct musterd *d, const struct queue_entry *e);
/* Keeps j's pending reason; Redis gets it at once the first time, then at most once a second
 * (d_jobs_flush_reasons writes what is left). */
void d_job_set_reason(struct musterd *d, struct d_job *j, const char *reason);
/* j's reason is reason, and Redis has it (written with another change). */
void d_job_reason_stored(struct d_job *j, const char *reason);
/* *field = a heap copy of text ("" = none, NULL): a job's stop reason, failure, error, last
 * checkpoint.  0, or -1 without memory (logged; the old text stays). */
int d_job_text_set(char **field, const char *text);
/* A text field's text: "" for none. */
static inline const char *d_job_text(const char *field)
{
    return field ? field : "";
}
/* A held pending job's reason. */
#define D_HELD_REASON "held by operator; musterctl release to let it run"
/* Writes pending reasons that changed since their last (rate-limited) write. */
void d_jobs_flush_reasons(struct musterd *d);
/*
 * A batch of job writes in one Redis round trip (issue #15).  Between d_batch_begin and
 * d_batch_end, d_job_set_reason appends its writes to the store's batch, as may the caller
 * (d_gang_start_write, with d_record_write); nothing else may write.  d_batch_end sends them: 0
 * when they landed (the reasons are then marked written); -1 when not (Redis is down, the jobs
 * are to be written whole again, and the counters the writes raised are taken back), when the
 * caller's own writes must be undone too.  A batch with no write costs nothing.
 */
void d_batch_begin(struct musterd *d);
int d_batch_end(struct musterd *d);

/* Notes that j reached a state jobs may wait for (started, or final), when some job waits for
 * it: d_deps_wake (called by the pass) then looks at its dependents.  Called by d_job_write and
 * d_job_remember, and for an array by d_array.c on each of its elements' starts and ends (its
 * tally changed, whatever its state); costs one map lookup. */
void d_job_wake_dependents(struct musterd *d, struct d_job *j);
/* The elements of array p (p->array set) by outcome, from its counts. */
void d_array_tally_get(const struct d_job *p, struct d_array_tally *t);

/* The pending list: PENDING jobs that hold no resources. */
void d_job_pending_add(struct musterd *d, struct d_job *j);
void d_job_pending_remove(struct musterd *d, struct d_job *j); /* O(1); nothing when not in */
/* d->order holds every pending job's key as of now: rebuilt when stale (keys may have changed,
 * or one could not be added).  0, or -1 with err (no memory; still stale). */
int d_pending_order_fresh(struct musterd *d, struct mu_err *err);
void d_pending_order_stale(struct musterd *d); /* a reload: queues and run times may differ */
/* Frees the pending list and the order (not the jobs: d_jobs_free). */
void d_pending_free(struct musterd *d);
/* Readies a pass over the pending jobs at now_s: the gangs that hold resources into
 * d->pass.running (*nrunning of them), what each queue uses into d->pass.quota, and an iteration
 * of d->order (sched_order_next) in the fair-share order for the queues' and users' standings
 * now.  0, or -1 with err (no memory). */
int d_pending_begin(struct musterd *d, int64_t now_s, int *nrunning, struct mu_err *err);
/* Pending job j's place in the fair-share order now, as the next pass would take it: how many
 * jobs (not held) come before it, and of them how many from other queues; d->pass.quota is left
 * as the last pass made it.  0, or -1 with err (no memory, or j is not in the order). */
int d_pending_standing(
    struct musterd *d, const struct d_job *j, int *ahead, int *ahead_other, struct mu_err *err);
/* The queues' quotas with nothing used yet, into qs[0..nqueues] (cohorts numbered by the first
 * queue that names them); the pass then counts the use. */
void d_quota_queues(const struct musterd *d, struct sched_quota_queue *qs);
/* j's reason no longer waits for its write (it left, or was written). */
void d_job_reason_late_drop(struct musterd *d, struct d_job *j);
/* ---- d->live, the placed and adopting jobs (d_live.c) ---- */

/* Room in d->live for one more job beyond those promised (d->live_promised: a pass writes all
 * its starts before it commits any), 0, or -1 without memory: called before a job is placed or
 * starts adopting, so that d_job_live_update never allocates. */
int d_job_live_reserve(struct musterd *d);
/* After j->placed or j->adopting changed: j is in d->live exactly while either is true.  Its
 * nodes (the stored placement's while adopting, else its slots') are fixed from then on. */
void d_job_live_update(struct musterd *d, struct d_job *j);
/* A node's bit in the live jobs' node signatures: d_live_prev_on's question. */
#define D_LIVE_SIG_WORDS 4
struct d_live_sig {
    uint64_t w[D_LIVE_SIG_WORDS];
};
struct d_live_probe {
    int word;
    uint64_t bit;
};
struct d_live_probe d_live_probe(const char *node_name);
/* Walks d->live down for the jobs that may have a task on the probed node (one bit of 256 per
 * node name, so a gang on 8 nodes seldom counts for another): the next one below *k (start at
 * d->nlive), or NULL at the end.  A job that leaves the list meanwhile moves the last one to its
 * place, which the walk has seen already. */
struct d_job *d_live_prev_on(const struct musterd *d, int *k, struct d_live_probe p);
/*
 * How long, and how many, final jobs are kept after they leave the table (d->retired): a Redis
 * failover may lose the last writes the old primary acknowledged (replication is asynchronous),
 * and a final state written then would be lost for good once musterd had freed the job.  The
 * window is far above Redis's min-replicas-max-lag (docs/deploy.md recommends 10 s), which bounds
 * how long an old primary goes on acknowledging writes its replica does not get.
 */
#define D_RETIRED_KEEP_MS 60000
#define D_RETIRED_MAX     20000
/* Keeps final job j (out of the table, owned now) D_RETIRED_KEEP_MS, so that d_jobs_resync_all
 * can write it again; frees it at once without memory.  A retired job is found by id with
 * d_job_retired_find (borrowed until d_jobs_retired_expire). */
void d_job_retire(struct musterd *d, struct d_job *j);
struct d_job *d_job_retired_find(const struct musterd *d, const char *id);
/* Frees retired jobs older than D_RETIRED_KEEP_MS (now: mono ms). */
void d_jobs_retired_expire(struct musterd *d, uint64_t now);
/* Frees the job table and the retired jobs (the pending list: d_pending_free). */
void d_jobs_free(struct musterd *d);
/* After a Redis outage: writes every job whose changes could not be written; -1 if Redis
 * failed again. */
int d_jobs_resync(struct musterd *d);
/* After a connection reached another Redis server than before (queue_server_changes: a
 * failover, a restart): writes every job held and every retired one whole again (hash, jobs
 * index, active set, idempotency key), since the writes the old server acknowledged last may be
 * missing; -1 if Redis failed again (what is left is written by the next call or d_jobs_resync). */
int d_jobs_resync_all(struct musterd *d);

bool d_job_all_gone(const struct d_job *j);
/* Tasks are committed one way only, through d_job_task_commit, so that a pass over every running
 * gang asks d_job_fully_committed without reading their tasks (issue #15).  A new tasks array
 * starts with none (d_job_tasks_new). */
int d_job_tasks_new(struct d_job *j); /* 0, or -1 out of memory */
void d_job_task_commit(struct d_job *j, int t);
bool d_job_fully_committed(const struct d_job *j); /* false for a partly adopted gang */
/* The job's next attempts prefer other nodes than node (a task failed or was refused there). */
void d_job_avoid(struct d_job *j, int node);
/* Records what the worker reported of a task that no longer runs (EXITED or LOST) in task. */
void d_task_record_end(struct d_task *task, const struct proto_task_ref *r);

int64_t d_job_run_s(const struct musterd *d, const struct d_job *j); /* time limit or default */
int64_t d_job_end_s(const struct musterd *d, const struct d_job *j); /* its attempt's end */
/* A placed (or adopted) job's capacity type (enum sched_capacity, all its tasks share it); -1
 * for a pending job, or an adopted one whose first task's node has not registered yet. */
int d_job_capacity(const struct musterd *d, const struct d_job *j);
/* A gang started (or was adopted): its time limit is watched from now on (d_limits_check). */
void d_limit_watch(struct musterd *d, const struct d_job *j);
/* The retry backoff after `failures` counted failures: retry_backoff_s doubling, capped. */
int64_t d_retry_backoff_ms(const struct musterd *d, int failures);
/* How long the next attempt of j waits after a node of it was cut off (its supervisors stop
 * its task when the node's lease runs out). */
uint64_t d_fence_wait_ms(const struct d_job *j);

#endif

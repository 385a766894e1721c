/* SPDX-License-Identifier: MIT */
/*
 * musterd's internals, shared by the scheduler/d_*.c files; never included outside scheduler/.
 *
 * The daemon is a single-threaded loop (d_loop.c) around the pure placement core: it takes jobs
 * in from Redis (d_jobs.c), keeps the worker registry (d_nodes.c), and talks to workers over one
 * ZeroMQ ROUTER.  Every job transition is written to Redis before any worker is told (DESIGN §3).
 */
#ifndef MUSTER_SCHEDULER_DAEMON_H
#define MUSTER_SCHEDULER_DAEMON_H

#include <signal.h>

#include "config/cfg.h"
#include "core/sched.h"
#include "protocol/proto.h"
#include "queue/queue.h"

/* Counters of the metrics endpoint, persisted in <prefix>counters (field = the name). */
enum d_counter {
    D_C_SUBMITTED = 0,
    D_C_REJECTED,
    D_C_SUCCEEDED,
    D_C_FAILED,
    D_C_CANCELLED,
    D_C_RETRIES,  /* attempt ended by a task failure, rerun */
    D_C_REQUEUES, /* attempt ended by the infrastructure, rerun */
    D_C_PREEMPTIONS,
    D_C_SPOT,
    D_C_NODES_LOST,
    D_C_TIMEOUT, /* stopped at the time limit */
    D_COUNTER_COUNT,
    D_C_NONE = -1 /* counts nothing */
};

#define D_PLACE_BUCKETS   10 /* placement latency histogram, plus +Inf */
#define D_AVOID_MAX       8  /* nodes a job's next attempts avoid, newest kept */
#define D_REFUSALS_CORDON 3  /* node-side refusals in a row before musterd cordons a node */
#define D_ACTIVE_STATES   4  /* PENDING, STARTING, RUNNING, PREEMPTING: enum queue_state 0..3 */

struct d_metrics {
    double counters[D_COUNTER_COUNT];
    double lost_gpu_seconds;
    double place_buckets[D_PLACE_BUCKETS + 1]; /* non-cumulative; the last is +Inf */
    double place_sum_s;
};

/* What a job update adds to the counters (d_metrics_tally). */
struct d_tally {
    int counter;       /* enum d_counter, or -1 */
    double lost_gpu_s; /* work lost by the attempt that ended */
    double place_s;    /* time the placement took (STARTING) */
};

/* Scrape-time gauges. */
struct d_gauges {
    double jobs[CFG_MAX_QUEUES][D_ACTIVE_STATES];
    int64_t pending_gpus[CFG_MAX_QUEUES][CFG_MAX_POOLS + 1]; /* [npools] = no pool fits */
    double gpus_free[CFG_MAX_POOLS];
    double gpus_used[CFG_MAX_POOLS];
    double nodes[CFG_MAX_POOLS];
};

struct MHD_Daemon;

/* A worker message that changes a job, held while Redis is down (d_loop.c). */
struct d_deferred {
    char node[PROTO_NODE_MAX];
    struct proto_msg msg; /* owns its heap arrays */
};

struct d_task {
    int node;       /* cluster node index */
    uint64_t gpus;  /* GPU mask on that node */
    bool acked;     /* BIND_ACK ok received */
    bool gone;      /* exited, lost, or never started: nothing of it runs any more */
    bool committed; /* its GPUs/CPUs/memory are committed in the cluster */
    bool lost;      /* gone because its node or worker lost it (not an exit) */
    bool fenced;    /* exited because its worker fenced itself (the scheduler was away) */
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

struct d_job {
    char id[QUEUE_JOB_ID_MAX];
    struct queue_spec spec;
    struct sched_request req; /* req.gpu_type borrows spec.gpu_type */
    enum queue_state state;
    int attempt;           /* 1.. */
    int failures;          /* attempts ended by a task failure; FAILED when > max_retries */
    uint64_t submitted_ms; /* wall */
    uint64_t started_ms;   /* wall, current attempt */
    bool held;
    bool placed;        /* resources committed in the cluster (slots/tasks valid) */
    int placed_attempt; /* the attempt slots/tasks belong to (< attempt after a requeue) */
    enum d_end end;
    struct sched_slot *slots;  /* spec.tasks entries while placed */
    struct d_task *tasks;      /* spec.tasks entries while placed */
    uint64_t bind_deadline_ms; /* mono; while STARTING */
    int master_port;
    double lost_gpu_s;                    /* GPU-seconds of work lost by ended attempts, all told */
    char last_checkpoint[PROTO_PATH_MAX]; /* newest checkpoint path, "" = none */
    uint64_t last_checkpoint_ms;          /* wall ms it was written */
    bool head_of_queue;    /* requeued by a spot interruption: first in its priority */
    uint64_t kill_at_ms;   /* mono: a stopping gang gets KILL then (checkpoint grace over) */
    uint64_t kill_sent_ms; /* mono: the attempt's live tasks were last sent KILL; 0 = not yet.
                              Repeated until each task is answered for (d_stops_check) */
    char preempted_for[QUEUE_JOB_ID_MAX]; /* while PREEMPTING for another job: its id */
    char stop_reason[256];                /* why it is PREEMPTING */
    int victims_stopping;                 /* as a preemptor: victims not yet stopped */
    /* Adoption after a scheduler restart (d_adopt.c): a gang RUNNING before the restart waits
     * for its nodes to register and report its tasks, instead of being restarted. */
    uint64_t not_before_ms; /* mono: no new attempt before: a lost node's tasks are fencing,
                               or (backoff) the retry backoff after a failed attempt */
    bool backoff;           /* not_before_ms is a retry backoff; failure says why */
    char failure[256];      /* the last counted failure ("task 1 exited 3 on node n4") */
    int avoid[D_AVOID_MAX]; /* nodes the next attempts prefer not to use (a task failed or was
                               refused there), newest last; navoid used */
    int navoid;
    enum queue_state stop_to; /* end == D_END_FINAL while the state is not final yet: the final
                                 state to write once every task is gone (QUEUE_TIMEOUT) */
    bool unsynced;            /* a change could not be written (Redis down): write it whole later */
    bool forget_after_sync;   /* final, freed once written */
    int exit_code;            /* final: the job's exit code */
    char error[256];          /* FAILED: why */
    uint64_t finished_ms;     /* final: wall ms */
    bool adopting;
    uint64_t adopt_deadline_ms;          /* mono: nodes not back by then count as lost */
    char (*adopt_nodes)[PROTO_NODE_MAX]; /* heap: per task, the node it ran on */
    double place_s;                      /* how long the last placement took */
    char reason[256];                    /* why pending, now */
    char reason_written[256];            /* as last written to Redis */
    bool reason_stored;                  /* a reason was written for this pending spell */
    uint64_t reason_at_ms;               /* mono: when */
};

struct d_node {
    char name[PROTO_NODE_MAX];
    int idx; /* cluster node index */
    char pool[PROTO_NODE_MAX];
    char addr[128];
    bool online;      /* registered and not lost */
    uint64_t seen_ms; /* mono: last message */
    uint64_t seen_wall_ms;
    enum sched_node_state admin;        /* operator state: ready, cordoned or draining */
    bool terminating;                   /* spot notice received: never ready again */
    bool at_risk;                       /* rebalance recommendation: no new gangs */
    uint64_t terminate_at_ms;           /* wall ms of the spot notice's deadline */
    int refusals;                       /* node-side BIND refusals in a row, one per attempt */
    char refused_job[QUEUE_JOB_ID_MAX]; /* the attempt the last one counted for */
    int refused_attempt;
    char reason[300]; /* why musterd cordoned it ("" = not musterd's doing) */
};

struct musterd {
    struct cfg cfg;
    struct queue *q;
    struct queue_intake *qi;
    void *zctx;
    void *router;
    struct proto_zap *zap; /* CURVE allow-list (ZAP) handler; NULL = CURVE off */
    struct sched_cluster *cluster;
    uint64_t epoch;
    uint64_t seq;
    struct mu_map *jobs;          /* id -> struct d_job * (owned) */
    struct mu_map *early_cancels; /* ids cancelled before their submission was read */
    struct d_job **pending;       /* PENDING jobs not held back by a running old attempt */
    int npending;
    int cap_pending;
    struct d_node *nodes; /* by cluster index */
    int nnodes;
    int cap_nodes;
    bool dirty;             /* something changed that may let a pending job start */
    uint64_t next_pass_ms;  /* mono: a pass is due then (something becomes true with time
                               alone: a backoff or fence wait over, a cool-down's end, a
                               victim's min_runtime_s, reasons with times in them); 0 = none */
    uint64_t next_limit_ms; /* wall: the earliest time limit of a running gang (0 = look now,
                               UINT64_MAX = none runs) */
    bool nodes_dirty;
    uint64_t next_nodes_write_ms;
    uint64_t next_check_ms;
    uint64_t next_claim_ms;
    char consumer[128]; /* this scheduler's name in the consumer group */
    int next_port;
    bool redis_down; /* writes fail: defer what must be persisted, keep heartbeats going */
    struct d_deferred *deferred; /* worker messages held while Redis is down, in order */
    int ndeferred;
    int cap_deferred;
    uint64_t next_redis_try_ms; /* mono: reconnect backoff */
    int reason_budget;          /* pending-reason writes left in this tick */
    uint64_t redis_backoff_ms;
    volatile sig_atomic_t *stop;
    struct d_metrics metrics;
    struct {
        struct sched_pass_job *jobs; /* scratch of d_schedule, grown as needed */
        struct sched_request *reqs;  /* requests changed for one pass (first choice only) */
        struct sched_decision *out;
        struct d_job **who;
        int cap_pending;
        struct sched_running *running;
        int cap_running;
        struct sched_victim *victims; /* d_preempt_for's scratch, cap_running entries */
        struct d_job **victim_jobs;
        int *plan_victims;
        int cap_victims;
    } pass;
    struct MHD_Daemon *mhd; /* NULL without --metrics */
    /* After a restart: the nodes the last run knew (name -> d itself), until each registers
     * again or regrace_until_ms (mono) passes; meanwhile jobs go only to their first capacity
     * type, so a spot job is not put on on-demand because the spot workers are a moment late. */
    struct mu_map *expected_nodes;
    uint64_t regrace_until_ms;
};

/* Per-queue totals for the queues status hash (indexed like cfg.queues). */
struct d_queue_stats {
    int pending_jobs;
    int running_jobs; /* STARTING, RUNNING or PREEMPTING */
    int64_t pending_gpus;
    int64_t running_gpus;
    uint64_t oldest_pending_ms; /* wall ms of the oldest pending submission, 0 = none */
};

/* d_jobs.c */
void d_intake_submit(struct musterd *d, const struct queue_entry *e);
void d_control(struct musterd *d, const struct queue_entry *e);
void d_schedule(struct musterd *d);
void d_jobs_check_timeouts(struct musterd *d, uint64_t now_ms);
/* After a Redis outage: writes every job whose changes could not be written; -1 if Redis
 * failed again. */
int d_jobs_resync(struct musterd *d);
/* Writes pending reasons that changed since their last (rate-limited) write. */
void d_jobs_flush_reasons(struct musterd *d);
void d_task_status(struct musterd *d, struct d_node *node, const struct proto_task_ref *t);
void d_bind_ack(struct musterd *d, struct d_node *node, const struct proto_msg *m);
void d_node_lost_tasks(struct musterd *d, int node_idx);
/* Reconciles the tasks a worker says it runs (HELLO) with what the scheduler believes. */
void d_node_reconcile(struct musterd *d, struct d_node *node, const struct proto_msg *hello);
int d_jobs_recover(struct musterd *d, struct mu_err *err);
void d_jobs_free(struct musterd *d);
void d_jobs_queue_stats(struct musterd *d, struct d_queue_stats *stats);
/* Appends to per_node[i] the JSON strings ("id",...) of the jobs with a live task on node i. */
int d_jobs_by_node(struct musterd *d, struct mu_buf *per_node, struct mu_err *err);

/* d_jobs.c, shared with d_preempt.c */
int d_job_write(struct musterd *d,
                struct d_job *j,
                const struct queue_kv *fields,
                int n,
                const char *state,
                const char *reason,
                const struct d_tally *tally);
void d_task_kill(struct musterd *d, struct d_job *j, int t, int grace_s);
void d_job_kill_live(struct musterd *d, struct d_job *j);
bool d_job_all_gone(const struct d_job *j);
/* The job's next attempts prefer other nodes than node (a task failed or was refused there). */
void d_job_avoid(struct d_job *j, int node);
bool d_job_fully_committed(const struct d_job *j); /* false for a partly adopted gang */
void d_job_release_if_done(struct musterd *d, struct d_job *j);
const char *d_node_name(const struct musterd *d, int idx);
void d_job_set_reason(struct musterd *d, struct d_job *j, const char *reason);
int64_t d_job_run_s(const struct musterd *d, const struct d_job *j); /* time limit or default */
int64_t d_job_end_s(const struct musterd *d,
                    const struct d_job *j); /* its attempt's expected end */

/* d_preempt.c: checkpoints, preemption and spot interruptions (DESIGN §5) */
void d_checkpoint_done(struct musterd *d, struct d_node *node, const struct proto_msg *m);
void d_spot_notice(struct musterd *d, struct d_node *node, const struct proto_msg *m);
void d_rebalance(struct musterd *d, struct d_node *node, const struct proto_msg *m);
/* musterctl drain: checkpoints and requeues every gang running on node (not counted as a
 * failure), the checkpoint grace capped at grace_s when >= 0. */
void d_node_drain(struct musterd *d, struct d_node *node, int grace_s);
/* Stops a running gang: checkpoint signal, then KILL at deadline_ms (mono) or when its
 * checkpoint grace is over, whichever is first.  to QUEUE_PENDING requeues it (state PREEMPTING
 * until it stopped, then PENDING with attempt + 1); a final state (QUEUE_TIMEOUT) ends the job
 * once every task is gone (the state stays as it is meanwhile, the reason says why). */
void d_gang_stop(struct musterd *d,
                 struct d_job *j,
                 const char *why,
                 uint64_t deadline_ms,
                 enum d_counter counter,
                 enum queue_state to);
/* Called once a PREEMPTING gang has stopped: writes PENDING with attempt + 1 and the lost work. */
void d_preempted_requeue(struct musterd *d, struct d_job *j);
/* After a pass: plans a preemption for pending job p (strictly lower-priority, preemptible
 * victims) and starts stopping the victims.  True when a plan was made or one is in flight. */
bool d_preempt_for(struct musterd *d, struct d_job *p, int64_t now_ms);
/* KILLs stopping gangs whose grace is over. */
void d_stops_check(struct musterd *d, uint64_t now_ms);

/* d_adopt.c: adopting running gangs after a scheduler restart (issue #5) */
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
/* d_jobs.c pieces the adoption reuses */
void d_job_attempt_end(
    struct musterd *d, struct d_job *j, bool counted, int exit_code, const char *why);
void d_job_task_exited(struct musterd *d, struct d_job *j, int t, const char *node_name);
/* Records what the worker reported of a task that no longer runs (EXITED or LOST) in task. */
void d_task_record_end(struct d_task *task, const struct proto_task_ref *r);
/* How long the next attempt of j waits after a node of it was cut off (it fences itself). */
uint64_t d_fence_wait_ms(const struct d_job *j);
/* A STARTING gang whose every task is acknowledged becomes RUNNING (written). */
void d_job_running_if_all_acked(struct musterd *d, struct d_job *j);

/* d_nodes.c */
void d_hello(struct musterd *d, const char *identity, const struct proto_msg *m);
void d_heartbeat(struct musterd *d, const char *identity, const struct proto_msg *m);
struct d_node *d_node_get(struct musterd *d, const char *name); /* registered node or NULL */
/* The node's state for placement: terminating (spot notice) beats the operator's state. */
enum sched_node_state d_node_state(const struct d_node *node);
/* A node refused a task of j for its own reason: after D_REFUSALS_CORDON attempts in a row
 * (across jobs) musterd cordons it, with the reason shown by musterctl nodes. */
void d_node_refused(struct musterd *d,
                    struct d_node *node,
                    const struct d_job *j,
                    const char *error);
void d_nodes_check(struct musterd *d, uint64_t now_ms);
void d_nodes_write(struct musterd *d);
/* After a restart: reads the nodes the last run knew (not lost) and starts the grace. */
int d_nodes_recover(struct musterd *d, struct mu_err *err);
/* True while known nodes may still come back (restricts placement to first choices). */
bool d_nodes_regrace(struct musterd *d, uint64_t now_mono_ms);
/* Refreshes the status hashes: nodes, pools and queues. */
void d_status_write(struct musterd *d);

/* d_clock.c: what becomes true with time alone (issue #10 item 3, 4) */
/* Stops running gangs that reached their time limit (ending TIMEOUT). */
void d_limits_check(struct musterd *d, uint64_t now_wall_ms);
/* A gang started (or was adopted): its limit is watched from now on. */
void d_limit_watch(struct musterd *d, const struct d_job *j);
/* A pass is due at mono_ms (the earliest of all such requests wins). */
void d_wake_at(struct musterd *d, uint64_t mono_ms);
/* In the periodic tick: marks the pass dirty once its due time came. */
void d_wake_check(struct musterd *d, uint64_t now_mono_ms);
/* After a pass: asks for the next one when a pending job's wait, a pool's cool-down or (every
 * few seconds, while reasons carry times) a reason's clock runs out. */
void d_wake_plan(struct musterd *d, uint64_t now_mono_ms, int64_t now_wall_ms, bool timed_reasons);
/* The retry backoff after failures counted failures: retry_backoff_s doubling, capped. */
int64_t d_retry_backoff_ms(const struct musterd *d, int failures);

/* d_metrics.c */
void d_metrics_tally(struct musterd *d, const struct d_tally *t, struct queue_event *ev);
int d_metrics_load(struct musterd *d, struct mu_err *err);
int d_metrics_render(struct musterd *d, struct mu_buf *b, struct mu_err *err);
int d_metrics_start(struct musterd *d, const char *addr_port, struct mu_err *err);
int d_metrics_fd(const struct musterd *d); /* epoll fd to poll, -1 without metrics */
void d_metrics_run(struct musterd *d);
void d_metrics_stop(struct musterd *d);
/* d_jobs.c / d_nodes.c parts of the gauges */
void d_jobs_gauges(struct musterd *d, struct d_gauges *g);

/* d_loop.c */
void d_send(struct musterd *d, const char *node, struct proto_msg *m);
int d_run(struct musterd *d, struct mu_err *err);
void d_deferred_free(struct musterd *d);

#endif

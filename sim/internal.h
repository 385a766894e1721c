/* SPDX-License-Identifier: MIT */
/*
 * sim's helpers shared between its files (docs/style.md §1.1: private to sim/): the CSV splitter
 * and the seeded random numbers.  Everything else is in sim.h.
 */
#ifndef MUSTER_SIM_INTERNAL_H
#define MUSTER_SIM_INTERNAL_H

#include <stdint.h>

#include "sim/sim.h"

/* The next line of text from *pos: its start and length without "\r\n"; false at the end. */
bool sim_csv_next_line(const char *text, size_t len, size_t *pos, const char **line, size_t *n);

/* Seeded random numbers (splitmix64): the same seed gives the same replay on every machine. */
uint64_t sim_rng_next(uint64_t *state);
double sim_rng_unit(uint64_t *state);             /* in (0, 1) */
double sim_rng_exp(uint64_t *state, double mean); /* exponential with this mean */
uint64_t sim_rng_mix(uint64_t a, uint64_t b);     /* a seed for stream b of seed a */

/* ---- the replay's state: engine.c (events), events.c, job.c, policy.c (passes), result.c ---- */

enum sim_job_state { SJ_FUTURE = 0, SJ_PENDING, SJ_RUNNING, SJ_STOPPING, SJ_DONE, SJ_NEVER };
enum sim_cause { SIM_CAUSE_NONE = 0, SIM_CAUSE_SPOT, SIM_CAUSE_PREEMPT };

struct sim_sjob {
    struct sched_request req;
    struct sched_slot *slots; /* req.tasks entries of the engine's slot array */
    enum sim_job_state state;
    /* Times are on the replay's clock in milliseconds (internal.h, struct sim_engine). */
    int64_t first_start_ms;      /* -1 until it starts */
    int64_t att_start_ms;        /* the current attempt's start */
    int64_t overhead_ms;         /* the current attempt's restart cost */
    int64_t done_ms;             /* progress kept by checkpoints of earlier attempts */
    int64_t end_ms;              /* DONE: when */
    int64_t release_ms;          /* STOPPING: when its GPUs free */
    int64_t save_ms;             /* STOPPING: progress of this attempt it keeps */
    int first_cap;               /* the capacity type of its first start (enum sched_capacity) */
    int attempts;                /* attempts started */
    uint32_t gen;                /* attempt number; events of older attempts are ignored */
    int run_idx;                 /* index in the running array, -1 when holding nothing */
    int victims_stopping;        /* preemptor: victims not yet stopped */
    int preempted_for;           /* victim: the job it makes room for, -1 none */
    bool head;                   /* requeued by a spot notice: first among its priority */
    bool in_order;               /* PENDING under a policy with the fair-share order: okey in it */
    int shape;                   /* PENDING: its handle in the engine's shapes (sched_shapes_add) */
    struct sched_order_job okey; /* its key in the engine's order, while in_order */
    char id[12];                 /* its index, zero-padded: the order's tie-break, as the index */
    bool timed_out;
    bool borrowed;        /* RUNNING/STOPPING: started beyond its queue's nominal quota */
    enum sim_cause cause; /* why the last attempt stopped: its restart cost is charged there */
};

#define SIM_MS 1000 /* a second on the replay's clock, which counts milliseconds */

/* What an event is; at the same instant a lower kind comes first (releases before notices). */
enum sim_ev_kind {
    SIM_EV_END = 0,
    SIM_EV_STOPPED,
    SIM_EV_GONE,
    SIM_EV_BACK,
    SIM_EV_NOTICE,
    SIM_EV_AVAIL,
    SIM_EV_WAKE
};

struct sim_event {
    int64_t t; /* ms */
    uint32_t seq;
    uint16_t kind; /* enum sim_ev_kind */
    uint32_t gen;
    int32_t id; /* job or node */
};

struct sim_result {
    enum sim_policy policy;
    struct sim_stats st;
    struct sim_sample *samples;
    int nsamples, cap_samples;
    int *start_order;
    int nstarted;
    double *jcts;            /* of the jobs that ended, ascending once finished */
    double *waits;           /* submit to first start, of the same jobs */
    int64_t *first_start_ms; /* [job] -1 never started */
    int64_t *end_ms;         /* [job] -1 did not end */
    int *first_cap;          /* [job] enum sched_capacity of its first start, -1 none */
    int64_t *last_start_ms;  /* [job] the start of its last attempt, -1 never started */
    int *attempts;           /* [job] attempts started */
    uint8_t *outcome;        /* [job] enum sim_outcome */
    int njcts;
};

struct sim_engine {
    const struct sim_setup *s;
    const struct sim_job *jobs;
    int njobs;
    enum sim_policy policy;
    struct sched_cluster *c;
    int nnodes;
    struct sim_sjob *sj;
    struct sched_slot *slot_pool;
    int *pending; /* job indices; arrival (= index) order */
    int npending;
    int *running; /* RUNNING and STOPPING jobs */
    int nrunning;
    struct sim_event *heap;
    int nheap, cap_heap;
    uint32_t seq;
    int active_events; /* events other than spot notices in the heap */
    int next_arrival;
    /* The clock is in milliseconds, as musterd's wall clock: events keep their order within a
     * second (a replay of musterd's own record), and the core gets now_s = now_ms / 1000, as
     * d_pass.c gives it.  A trace in whole seconds has every event on a whole second. */
    int64_t now_ms;
    int64_t last_ms;
    bool dirty;
    int64_t last_pass_ms; /* with pass_interval_s: the last pass, -1 before the first */
    int64_t pass_wake_ms; /* with pass_interval_s: the pass already asked for, 0 none */
    int left;             /* jobs neither DONE nor NEVER */
    /* nodes */
    uint8_t *node_up; /* 0 gone, 1 up */
    int *node_used;   /* GPUs committed */
    uint64_t *mask;   /* check mode: our own record of the committed GPUs */
    uint64_t *rng;    /* per node: its interruptions, the same under every policy */
    int up_gpus, ready_gpus, used_gpus, used_ready;
    int busy_nodes[CFG_MAX_POOLS];
    int up_nodes[CFG_MAX_POOLS];
    /* fair share (as scheduler/d_usage.c): by queue, and by user (sim_job.user) */
    double usage[SCHED_MAX_QUEUES];
    double held_gpus[SCHED_MAX_QUEUES];
    int nusers;
    double *user_usage;
    double *user_held;
    struct sched_share_user *users; /* the pass's table */
    /* quotas (as scheduler/d_pass.c): the config's, and the pass's table with what runs */
    struct sched_quota_config qcfg[SCHED_MAX_QUEUES];
    struct sched_quota_queue quota[SCHED_MAX_QUEUES];
    int nquota; /* configured queues + 1 */
    /* pass scratch */
    struct sched_pass_job *pj;
    struct sched_decision *dec;
    struct sched_running *run;
    struct sched_victim *vic;
    struct sched_preempt_job *pp;
    int *who;
    int *vic_job;
    int *plan_victims;
    struct sched_slot *plan_slots;
    struct sched_order *order;        /* muster, node-drain: the pending jobs, kept across passes */
    struct sched_shapes *shapes;      /* and their shapes: a pass stops once none can change it */
    struct sched_request *shape_list; /* [SCHED_SHAPES_MAX] a pass's */
    struct sched_shape_left *shape_left; /* [SCHED_SHAPES_MAX] what a pass has left of them */
    /* accounting */
    double cap_gpu_s, busy_gpu_s, idle_wait_gpu_s, cost_usd, cost_static_usd;
    double lost_gpu_s[3]; /* by enum sim_cause */
    int64_t next_sample_ms, sample_step_ms;
    struct sim_result *res;
    struct mu_err *err;
    bool failed;
};

static inline int64_t sim_now_s(const struct sim_engine *e) /* the core's now_s */
{
    return e->now_ms / 1000;
}

/* events.c: the event heap, ordered by (t, kind, seq). */
/* 0, or -1 with e->err.  A failure is sticky (e->failed ends the replay with e->err at the next
 * event), so callers in the middle of a change may drop the result. */
int sim_event_push(struct sim_engine *e, int64_t t, enum sim_ev_kind kind, int id, uint32_t gen);
struct sim_event sim_event_pop(struct sim_engine *e); /* the first; the heap is not empty */
void sim_wake_at(struct sim_engine *e, int64_t t_ms); /* a pass is due at t_ms */

/* job.c: a job's life in the replay, which engine.c's events and policy.c's passes both drive. */
int64_t sim_job_run_s(const struct sim_engine *e, int j); /* the pass's expected run time */
/* Progress of j's current attempt at t_ms, in ms of its duration (restart cost excluded). */
int64_t sim_job_progress_ms(const struct sim_engine *e, int j, int64_t t_ms);
/* What of progress_ms its last periodic checkpoint saved (0 without checkpoints). */
int64_t sim_job_periodic_ms(const struct sim_engine *e, int j, int64_t progress_ms);
int sim_job_start(struct sim_engine *e, int j); /* committed already; 0 or -1 (check failed) */
void sim_job_stop(
    struct sim_engine *e, int j, int64_t release_ms, int64_t save_ms, enum sim_cause c);
void sim_job_end(struct sim_engine *e, int j);     /* its attempt ended: the job is done */
void sim_job_requeue(struct sim_engine *e, int j); /* its gang stopped: pending again */
/* Job j becomes PENDING (arrival, requeue) or leaves it (start): the pending list in arrival
 * order, and under muster and node-drain the order and the shapes.  0 or -1, and a failure is
 * sticky (e->failed), so a caller may drop the result. */
int sim_pending_add(struct sim_engine *e, int j);
void sim_pending_remove(struct sim_engine *e, int j);

/* policy.c: one pass of e->policy at e->now; 0 or -1 with e->err. */
int sim_pass(struct sim_engine *e);

/* result.c */
struct sim_result *sim_result_new(enum sim_policy p, int njobs);
int sim_result_sample(struct sim_result *r, const struct sim_sample *s);
void sim_result_finish(struct sim_engine *e);

#endif

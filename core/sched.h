/* SPDX-License-Identifier: MIT */
/*
 * sched: the placement and preemption core (docs/design.md §4, §5), a pure library.
 *
 * A struct sched_cluster is a snapshot of pools and nodes with their free GPUs, CPUs and memory,
 * arranged in a topology tree: the configured levels widest first (zone > block > rack), then the
 * node, then the node's NVLink islands.  sched_place answers "where would this gang go now";
 * sched_pass runs one scheduling pass over the pending jobs in the order given with a reservation
 * for the first job that cannot start and EASY backfill behind it.  sched_cluster_commit and
 * sched_cluster_release apply or undo a decision.  sched_preempt_plan picks the lower-priority
 * gangs whose stopping lets a waiting job start and loses the least work.  sched_order_jobs puts
 * the pending jobs in fair-share order between queues (share.c).  sched_explain says, on
 * demand, why one job waits, from the same placement and reservation code (explain.c).  No
 * sockets, no Redis, no clock, no logs: the daemon, the tests and the benchmarks drive the same
 * code, and time is a parameter (now_s, any epoch as long as it is used consistently).
 * docs/placement.md explains the algorithm.
 *
 * A gang is placed all-or-nothing and never straddles capacity types.  Capacity types are tried
 * in the request's order, cheapest pool first within a type, pools in cool-down skipped.  Among
 * the topology domains that fit, the one with the least free capacity wins (best fit), and
 * inside it the tasks go to as few nodes as possible; a multi-GPU task gets one NVLink island
 * when one can hold it.  Only READY nodes that are not at risk take new work.
 *
 * Threading: a cluster is used by one thread at a time, and even the lookups that take a const
 * cluster must not race a placement (placements use scratch space kept in the cluster).
 */
#ifndef MUSTER_CORE_SCHED_H
#define MUSTER_CORE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mu.h"

#define SCHED_MAX_GPUS_NODE 64 /* a node's GPUs fit one uint64_t mask */
#define SCHED_MAX_LEVELS    6
#define SCHED_NAME_MAX      64
#define SCHED_MAX_POOLS     256
#define SCHED_REASON_MAX    200  /* a decision's reason, with its NUL */
#define SCHED_MAX_AVOID     16   /* nodes a request may ask to avoid */
#define SCHED_MAX_PROFILES  32   /* distinct MIG slice profiles a cluster knows (ids 1..32) */
#define SCHED_PROFILE_MAX   32   /* a profile name ("3g.40gb", "1c.3g.71gb") with its NUL */
#define SCHED_NODE_PROFILES 8    /* distinct profiles on one node */
#define SCHED_MILLI         1000 /* a whole GPU in gpu_milli (shared pools, core/milli.c) */

/* What a unit of a node is (sched_node_spec.unit): a whole GPU, a GPU in MIG mode (placed only
 * through its slices), or 1..SCHED_MAX_PROFILES, a MIG slice of that profile. */
#define SCHED_UNIT_GPU        0
#define SCHED_UNIT_MIG_PARENT 255

enum sched_capacity { SCHED_SPOT = 0, SCHED_ON_DEMAND = 1 };

enum sched_node_state {
    SCHED_NODE_READY = 0,
    SCHED_NODE_CORDONED,    /* operator: no new work */
    SCHED_NODE_DRAINING,    /* operator: no new work, running work finishes */
    SCHED_NODE_TERMINATING, /* spot notice: going away */
    SCHED_NODE_LOST,        /* heartbeats missed */
    SCHED_NODE_DOWN,        /* its worker stopped cleanly and said so (BYE) */
};

const char *sched_node_state_name(enum sched_node_state s); /* "ready", … */

struct sched_pool {
    char name[SCHED_NAME_MAX];
    char gpu_type[SCHED_NAME_MAX];
    double price_per_hour; /* per node */
    enum sched_capacity capacity;
    int max_gpus; /* 0 = no cap */
    bool shared;  /* time-sliced GPUs: gpu_milli requests may share a GPU (no isolation) */
};

/*
 * A node's GPUs are its units 0..ngpus-1 (bit i of a slot's mask = unit i).  A unit is a whole
 * GPU (unit[i] = SCHED_UNIT_GPU, what memset gives), a GPU in MIG mode (SCHED_UNIT_MIG_PARENT:
 * never placed itself, so a slice and its whole GPU never go to two tasks), or a MIG slice of
 * profile unit[i] (sched_cluster_profile_intern) whose GPU is unit parent[i].  Whole-GPU requests
 * see only whole GPUs; a slice request (sched_request.slice_profile) only slices of its profile.
 */
struct sched_node_spec {
    char name[SCHED_NAME_MAX];
    int pool;  /* index into the cluster's pools */
    int ngpus; /* units, 0..SCHED_MAX_GPUS_NODE: whole GPUs, MIG-mode GPUs and their slices */
    int cpus;
    int64_t memory_mb;
    int nlabels;                                   /* must equal the cluster's level count */
    char labels[SCHED_MAX_LEVELS][SCHED_NAME_MAX]; /* one value per topology level */
    /* NVLink island of GPU i, 0..SCHED_MAX_GPUS_NODE-1; GPUs with the same number share NVLink
     * or NVSwitch.  All zero (what memset gives) = one island. */
    uint8_t island[SCHED_MAX_GPUS_NODE];
    uint8_t unit[SCHED_MAX_GPUS_NODE];   /* see above; all zero = every unit a whole GPU */
    uint8_t parent[SCHED_MAX_GPUS_NODE]; /* a slice's GPU: a SCHED_UNIT_MIG_PARENT unit */
};

struct sched_cluster;

/*
 * A cluster with the given pools (copied, at most SCHED_MAX_POOLS) and topology levels, widest
 * first (level_names[0..nlevels), copied; NULL when nlevels is 0).  Names appear in reasons
 * ("largest free zone has 3x8").  Free with sched_cluster_free.  NULL with err on bad arguments
 * or no memory.
 */
struct sched_cluster *sched_cluster_new(const struct sched_pool *pools,
                                        int npools,
                                        const char *const *level_names,
                                        int nlevels,
                                        struct mu_err *err);
void sched_cluster_free(struct sched_cluster *c);

/* Level count, and a level's name: "node" for nlevels, NULL outside 0..nlevels.  Borrowed. */
int sched_cluster_level_count(const struct sched_cluster *c);
const char *sched_cluster_level_name(const struct sched_cluster *c, int level);
/* Index of the level called name: 0..nlevels-1, nlevels for "node", -1 if unknown. */
int sched_cluster_level_find(const struct sched_cluster *c, const char *name);

/*
 * Adds a node in state READY, not at risk, with everything free; returns its index (stable for
 * the cluster's life) or -1 with err (bad pool, GPU count, label count or island number, no
 * memory).  A node that comes back under the same name keeps its index and its placed work; its
 * spec may change only in ways that keep that work valid.
 */
int sched_cluster_node_add(struct sched_cluster *c,
                           const struct sched_node_spec *spec,
                           struct mu_err *err);
/* Index of the node called name, or -1. */
int sched_cluster_node_find(const struct sched_cluster *c, const char *name);
/*
 * Gives node new topology labels, one per level (labels[0..nlabels), nlabels equal to the
 * level count, each non-empty and NUL-terminated within SCHED_NAME_MAX), as an EC2 topology
 * import does for a registered node.  Work placed on the node stays where it is (it fitted its
 * domain when it was placed); later placements see the new domains, the topology order being
 * redone lazily.  Returns 1 when a label changed (the generation grows: a gang that did not fit
 * may fit now), 0 when the labels were already these, -1 with err (no such node, a wrong label
 * count, an empty or overlong label) and nothing changed.
 */
int sched_cluster_node_relabel(struct sched_cluster *c,
                               int node,
                               const char (*labels)[SCHED_NAME_MAX],
                               int nlabels,
                               struct mu_err *err);
int sched_cluster_node_count(const struct sched_cluster *c);
/* Borrowed, valid until the next sched_cluster_node_add or the cluster is freed. */
const struct sched_node_spec *sched_cluster_node_spec(const struct sched_cluster *c, int node);
const struct sched_pool *sched_cluster_pool(const struct sched_cluster *c, int pool);
int sched_cluster_pool_count(const struct sched_cluster *c);

void sched_cluster_node_set_state(struct sched_cluster *c, int node, enum sched_node_state s);
enum sched_node_state sched_cluster_node_state(const struct sched_cluster *c, int node);
/* A rebalance recommendation: an at-risk node keeps its work but takes no new gangs. */
void sched_cluster_node_set_at_risk(struct sched_cluster *c, int node, bool at_risk);
bool sched_cluster_node_is_at_risk(const struct sched_cluster *c, int node);
/* Whole GPUs of a node that take whole-GPU work (GPUs in MIG mode and slices not counted). */
int sched_cluster_node_gpus_free(const struct sched_cluster *c, int node);
int sched_cluster_node_gpus_total(const struct sched_cluster *c, int node);
/* Whole GPUs used in a pool (what max_gpus caps; slices are not counted). */
int sched_cluster_pool_gpus_used(const struct sched_cluster *c, int pool);

/*
 * MIG slice profiles (core/slice.c).  A cluster numbers the profile names it has seen 1..
 * SCHED_MAX_PROFILES, for the life of the cluster.  intern: the id of name, given one if new
 * (name 1..SCHED_PROFILE_MAX-1 bytes); -1 with err when the table is full or name is bad.
 * find: the id, or 0 when unknown.  name: the name of id 1..count, NULL otherwise (borrowed).
 */
int sched_cluster_profile_intern(struct sched_cluster *c, const char *name, struct mu_err *err);
int sched_cluster_profile_find(const struct sched_cluster *c, const char *name);
const char *sched_cluster_profile_name(const struct sched_cluster *c, int id);
int sched_cluster_profile_count(const struct sched_cluster *c);
/* Slices of profile id on node: *free (free now) and *total; both 0 when it has none. */
void sched_cluster_node_slices(
    const struct sched_cluster *c, int node, int id, int *free, int *total);
/* Whether any node registered so far has slices of profile id (0 = any profile). */
bool sched_cluster_profile_present(const struct sched_cluster *c, int id);
/* Shared GPUs (core/milli.c): the gpu_milli given to tasks on GPU unit g of node (0..1000). */
int sched_cluster_gpu_milli(const struct sched_cluster *c, int node, int g);

/*
 * Puts a pool in cool-down until until_s (the clock of the now_s given to placements): while
 * now_s < until_s no new gang goes there (other pools of the type, then the next capacity type
 * of the job, are used instead).  until_s <= now ends it.  Spot interruptions call this with
 * now + spot_cooldown_s.
 */
void sched_cluster_pool_cooldown(struct sched_cluster *c, int pool, int64_t until_s);
int64_t sched_cluster_pool_cooldown_until(const struct sched_cluster *c, int pool);

/*
 * A counter that grows whenever capacity may have become free: a release, a node added, a node
 * state or at-risk change, a cool-down change.  A job that did not fit at generation G cannot fit
 * while the generation is still G and the clock has not passed a cool-down's end.
 */
uint64_t sched_cluster_generation(const struct sched_cluster *c);

/* What a gang asks for. */
struct sched_request {
    int64_t memory_mb_per_task; /* 0 = not asked */
    const char *gpu_type;       /* NULL or "" = any (borrowed for the call) */
    int tasks;                  /* 1.. */
    int gpus_per_task;          /* 0..SCHED_MAX_GPUS_NODE; slices when slice_profile > 0 */
    int slice_profile;          /* 0 = whole GPUs; 1.. a MIG profile id: gpus_per_task slices of
                                   it per task (1 or more), never whole GPUs or other profiles */
    int gpu_milli;              /* 0 = whole GPUs; 1..SCHED_MILLI: each task a share of one GPU
                                   (gpus_per_task 1) of a shared pool, never over SCHED_MILLI
                                   per GPU in all */
    int cpus_per_task;          /* 0 = not asked */
    int ncapacity;              /* 1..2 */
    enum sched_capacity capacity[2];
    int required_level;  /* -1 none; 0..nlevels-1 a topology level; nlevels = one node */
    int preferred_level; /* -1 none; same range */
    const int *avoid;    /* node indices to use only when the gang cannot be placed without them
                            within a capacity type (a retried gang's failed nodes); borrowed */
    int navoid;          /* 0..SCHED_MAX_AVOID entries of avoid */
};

/* A request for tasks x gpus_per_task with a job spec's defaults: spot, then on-demand; any GPU
 * type; no CPUs, memory, topology or avoided nodes asked.  Set the rest on the copy. */
struct sched_request sched_request_make(int tasks, int gpus_per_task);

/* One task's place: a node and the GPUs (bit i = GPU index i of that node). */
struct sched_slot {
    int node;
    uint64_t gpus;
};

/*
 * Finds a place for every task of r, or for none, as of now_s (pool cool-downs).  slots must
 * hold r->tasks entries.  Returns 1 and fills slots when placed; 0 when the gang does not fit
 * now, with a short reason a user can act on (e.g. "needs 4x8 GPUs in one zone; largest free
 * zone has 3x8").  The cluster's free capacity is not changed (c is not const because the
 * placement works in scratch space kept in the cluster: no allocation per call).
 */
int sched_place(struct sched_cluster *c,
                const struct sched_request *r,
                int64_t now_s,
                struct sched_slot *slots,
                char *reason,
                size_t reason_size);

/* Marks slots as used (commit) or free again (release).  The slots must come from sched_place
 * or sched_pass on this cluster (commit) or from a matching commit (release). */
void sched_cluster_commit(struct sched_cluster *c,
                          const struct sched_request *r,
                          const struct sched_slot *slots);
void sched_cluster_release(struct sched_cluster *c,
                           const struct sched_request *r,
                           const struct sched_slot *slots);

/* ---- one scheduling pass: priority order, one reservation, EASY backfill ---- */

/* A pending job, in the order the pass should consider it (highest priority first). */
struct sched_pass_job {
    const struct sched_request *req; /* borrowed for the call */
    int64_t run_s;                   /* expected run time once started: its time_limit_s, or the
                                        configured default; > 0 */
    struct sched_slot *slots;        /* caller's buffer of req->tasks entries, see sched_decision */
    int queue;                       /* index into sched_pass_quota's queues; else unused */
};

/* A gang that holds resources now (committed in the cluster). */
struct sched_running {
    const struct sched_request *req; /* borrowed for the call */
    const struct sched_slot *slots;  /* borrowed: req->tasks entries */
    int64_t end_s; /* expected end: start + time limit (or the default); may be <= now */
};

enum sched_verdict {
    SCHED_WAIT = 0,     /* not now; reason says why */
    SCHED_START = 1,    /* slots filled and committed in the cluster */
    SCHED_RESERVED = 2, /* the pass's reservation: slots = where it will start, not committed */
};

struct sched_decision {
    enum sched_verdict verdict;
    int64_t est_start_s; /* RESERVED: when the reservation starts; WAIT held back by it: the same
                            time (it may start then); otherwise 0 = unknown */
    char reason[SCHED_REASON_MAX]; /* "" for START; for others, for users ("… in 5m") */
    bool borrowed;                 /* START: beyond its queue's nominal quota (sched_pass_quota) */
    bool over_quota;               /* WAIT: its queue's quota and cohort have no room for it */
};

/*
 * Wait, then relax (spec "topology": {"required": L, "relax_after_s": R}): after waiting
 * waited_s, the required level in force is L widened by one level for every R seconds waited
 * (levels count widest first, 0..nlevels-1, nlevels = one node), and -1 (none) past the widest.
 * *next_in_s gets the seconds until it widens again, 0 when it no longer will.  relax_after_s
 * <= 0 or required_level < 0: required_level, unchanged.
 */
int sched_relaxed_level(int required_level,
                        int64_t waited_s,
                        int relax_after_s,
                        int64_t *next_in_s);

/*
 * One scheduling pass at now_s.  pending[0..npending) in the order to serve them (musterd: the
 * fair-share order of sched_order_jobs); running[0..nrunning) every gang that holds resources
 * now.  Starts, in order, every job that fits.  The first job
 * that does not fit now but would once running gangs end (by their end_s) gets the reservation:
 * the earliest time and place it fits.  Later jobs start only if they do not delay it: they end
 * (now + run_s) by the reserved start, or they leave the reserved GPUs (and the CPUs/memory the
 * reservation needs on those nodes) alone.  A job that cannot fit even on an idle cluster of the
 * current nodes waits with its reason and does not block the others.
 *
 * out[i] is the decision for pending[i].  START jobs are committed in the cluster by the pass;
 * a caller that then fails to start one must sched_cluster_release it.  Work is bounded: a shape
 * that failed is not searched again in the same pass (nothing is freed during a pass).
 *
 * Returns the number of jobs started, or -1 with err (bad arguments, or no memory for the
 * pass's scratch space: then nothing was committed).
 */
int sched_pass(struct sched_cluster *c,
               const struct sched_pass_job *pending,
               int npending,
               const struct sched_running *running,
               int nrunning,
               int64_t now_s,
               struct sched_decision *out,
               struct mu_err *err);

struct sched_quota_queue;

/*
 * sched_pass with quotas: a job starts only where its queue's quota admits it (sched_quota_admits,
 * in each capacity type of its request; pending[i].queue indexes quota[0..nquota)).  A job with no
 * room waits (over_quota, with sched_quota_reason) and neither takes the reservation nor blocks
 * anyone.  Each start is charged to quota[].used as the pass goes, and marked borrowed when it
 * runs beyond its queue's nominal quota.  quota NULL: sched_pass.
 */
int sched_pass_quota(struct sched_cluster *c,
                     struct sched_quota_queue *quota,
                     int nquota,
                     const struct sched_pass_job *pending,
                     int npending,
                     const struct sched_running *running,
                     int nrunning,
                     int64_t now_s,
                     struct sched_decision *out,
                     struct mu_err *err);

/*
 * The same pass in steps, for a caller that stops once the rest of the queue cannot change it
 * (musterd with 100,000 queued jobs): sched_pass_open (room for max_jobs steps), then
 * sched_pass_step for each job in order, then sched_pass_close, which returns how many started.
 * sched_pass_quota is exactly these three over every job.  Pointers given to open and step are
 * borrowed until close.  Between steps, sched_pass_settled(c, shapes, left, n) is true when no
 * job whose request is one of shapes[0..n) with jobs left (left NULL: all of them, their runs
 * unknown), or narrower (fewer capacity types, a narrower required level, nodes avoided, a larger
 * task count of the same shape), would start or take the reservation if stepped: the caller may
 * close without stepping them, and they keep their last reasons.  A shape that fits only on the
 * reserved GPUs settles when none of its jobs would end before the reservation starts.  The check
 * places each shape at most once a pass between two starts (without packing).
 */
int sched_pass_open(struct sched_cluster *c,
                    struct sched_quota_queue *quota,
                    int nquota,
                    int max_jobs,
                    const struct sched_running *running,
                    int nrunning,
                    int64_t now_s,
                    struct mu_err *err);
/* Decides the next job into *d (its slots filled and committed on START); 1 when it started. */
int sched_pass_step(struct sched_cluster *c,
                    const struct sched_pass_job *j,
                    struct sched_decision *d);
struct sched_shape_left; /* core/shapes.c, below */
bool sched_pass_settled(struct sched_cluster *c,
                        const struct sched_request *shapes,
                        const struct sched_shape_left *left,
                        int nshapes);
int sched_pass_close(struct sched_cluster *c);

/* ---- the shapes of a queue (core/shapes.c, issue #15) ---- */

#define SCHED_SHAPES_MAX 256 /* a pass may place each shape once to see it settled */

struct sched_shape {
    struct sched_request req; /* gpu_type points at gpu_type below */
    char gpu_type[64];
    int64_t priority;
    bool preemptible;
    int count;           /* pending jobs of the shape; 0 = a free entry */
    int64_t min_limit_s; /* the least time limit of its jobs since the entry was taken (a bound:
                            not raised when one leaves); INT64_MAX: none set */
    bool some_default;   /* one of them runs to the default limit (not reset when it leaves) */
};

/* The distinct widest requests of a queue's jobs, with their priority and preemptibility; zero
 * it to start.  A plain value: no allocation. */
struct sched_shapes {
    struct sched_shape e[SCHED_SHAPES_MAX];
    int n;
    int untracked; /* jobs not counted in a shape: the list is unknown while there are any */
};

/* What a list of shapes spans: the highest priority, the lowest of a preemptible job. */
struct sched_shape_span {
    int64_t max_priority; /* INT64_MIN: no job */
    int64_t min_preemptible;
    bool any_preemptible;
};

/* Counts a job of request r (relaxes: its required level widens with time, so anywhere;
 * time_limit_s: its own, 0 for the default) joining the queue; returns the handle to remove it
 * with: > 0, or -1 when it is not counted (the table is full, or its GPU type is too long to
 * keep). */
int sched_shapes_add(struct sched_shapes *s,
                     const struct sched_request *r,
                     bool relaxes,
                     int64_t priority,
                     bool preemptible,
                     int64_t time_limit_s);
void sched_shapes_remove(struct sched_shapes *s, int handle); /* 0: nothing */
/* What a pass has left of one listed shape. */
struct sched_shape_left {
    int jobs;          /* not taken from the order yet; 0: none (or a free entry) */
    int64_t min_run_s; /* none of them expects to run less (sched_pass_job's run_s); a bound */
};

/* The shapes by handle into out[0..n) (out[h - 1] is handle h's), their jobs and least expected
 * run into left[0..n) (default_run_s: a job's without a limit of its own), and what they span;
 * n, or -1 when some job is not counted.  out and left hold SCHED_SHAPES_MAX entries. */
int sched_shapes_list(const struct sched_shapes *s,
                      struct sched_request *out,
                      struct sched_shape_left *left,
                      int64_t default_run_s,
                      struct sched_shape_span *span);

/* ---- why a job waits, on demand (core/explain.c, issue #18) ---- */

/* One topology level as a request sees it: the most tasks of it one domain takes. */
struct sched_explain_level {
    bool fits_now;  /* one domain of the level takes every task now */
    bool fits_idle; /* one does on the idle view of today's nodes (every gang ended, every
                       cool-down over, node states as they are) */
    int free_tasks; /* the most tasks one domain takes now, capped at the request's tasks */
    int max_tasks;  /* the same on the idle view: below tasks = not until nodes join */
};

enum sched_backfill {
    SCHED_BACKFILL_NONE = 0, /* no reservation for another job, or the job does not fit now */
    SCHED_BACKFILL_FITS,     /* fits now beside the reservation, or ends before it starts */
    SCHED_BACKFILL_DELAYS,   /* fits now only on what the reservation holds and would still run
                                when it starts (now + run_s past its start) */
};

/* Another job's reservation as the last pass made it (sched_decision RESERVED). */
struct sched_reservation {
    const struct sched_request *req; /* borrowed for the call */
    const struct sched_slot *slots;  /* borrowed: req->tasks entries, where it will start */
    int64_t start_s;                 /* its est_start_s */
};

struct sched_explain {
    int nlevels; /* entries of levels used: the cluster's level count + 1 (one node, last) */
    struct sched_explain_level levels[SCHED_MAX_LEVELS + 1]; /* widest first */
    bool fits_now;                                           /* sched_place would place it now */
    int64_t est_start_s; /* not fitting now: when the pass's reservation search (the same code)
                            finds room for it as running gangs end and cool-downs expire,
                            ignoring other pending jobs; DELAYS: the reservation's start;
                            0 = none (fits now, or not even once every given gang ended) */
    int freed_by;        /* with est_start_s: index into running of the gang whose expected end
                            makes the room; -1 = a cool-down's end, or none */
    enum sched_backfill backfill;
};

/*
 * Why r (expected to run run_s once started) waits, as data, computed on demand at now_s: per
 * topology level the largest free domain and the largest domain on the idle view; whether it
 * fits now; its estimated start and the running gang whose end makes room (running[0..nrunning)
 * every gang that holds resources, with their expected ends: what sched_pass is given); and,
 * when it fits now and res is another job's reservation, whether it could backfill beside it.
 * Work: 2 x (levels + 1) placements and one reservation search, all bounded like a pass's.
 *
 * Returns 0 with *out, or -1 with err (bad arguments, an invalid request, a reservation slot
 * naming no node, no memory).  The cluster is left as it was (generation included); scratch
 * and the pass memo are reused, so it must not run inside a pass.  Loop-thread only.
 */
int sched_explain(struct sched_cluster *c,
                  const struct sched_request *r,
                  int64_t run_s,
                  const struct sched_running *running,
                  int nrunning,
                  const struct sched_reservation *res,
                  int64_t now_s,
                  struct sched_explain *out,
                  struct mu_err *err);

/* ---- preemption planning (docs/design.md §5) ---- */

/* Up to this many candidate victims the planner finds the optimum exactly (2^n subsets at most,
 * tested in order of cost); beyond it a bounded greedy search (core/preempt.c). */
#define SCHED_PREEMPT_EXACT_MAX 12

/* A gang that holds resources now (committed in the cluster), as the preemption planner sees it.
 * The planner is given every running gang: it picks the eligible victims itself, and the
 * "waiting would be sooner" rule reads every gang's end_s. */
struct sched_victim {
    const struct sched_request *req; /* borrowed for the call */
    const struct sched_slot *slots;  /* borrowed: req->tasks entries, committed in the cluster */
    int64_t priority;
    bool preemptible;
    int64_t started_ms;    /* wall clock (the planner's now_ms): start of its current attempt */
    int64_t checkpoint_ms; /* wall clock of its newest checkpoint; 0 = none */
    int grace_s;           /* how long it may take to stop: its checkpoint grace_s or the kill
                              grace; >= 0 */
    int64_t end_s;         /* expected end: start + time limit (or the default); may be <= now */
    bool reclaimable;      /* runs on quota the preemptor's queue may take back: eligible
                              whatever its priority (sched_quota_victim_kind) */
    int queue;             /* its queue, for sched_quota_preempt_prepare; else unused */
    bool borrowed;         /* it started beyond its queue's nominal quota (sched_decision) */
};

/* The planner's answer.  The caller sets the two buffers before the call; the rest is output. */
struct sched_preempt_plan {
    int *victims;             /* caller's buffer of nvictims (the call's count) entries: the plan's
                                 victims, indices into the victims array, ascending */
    struct sched_slot *slots; /* caller's buffer of r->tasks entries: with a plan, where the
                                 preemptor goes once the victims are released; else scratch */
    int nvictims;             /* entries of victims used; 0 without a plan */
    int64_t lost_gpu_ms; /* the plan's lost work: Σ sched_preempt_lost_gpu_ms of its victims */
    int64_t ready_s;     /* with a plan: when the freed capacity is expected, now + the
                            largest victim grace_s; otherwise 0 */
    int64_t est_start_s; /* no plan because waiting is sooner (or it fits now): when the
                            preemptor would start without preemption; otherwise 0 */
    int64_t retry_at_ms; /* no plan because the victims that would free enough are too young:
                            when the first of them reaches min_runtime_s, so the caller can plan
                            again then (wall clock, like now_ms); otherwise 0 */
    int candidates;      /* eligible victims that could help (the search's size) */
    int placements;      /* placements tried: the work done (bounded) */
    bool exact;          /* the plan's lost work is the proven optimum */
    char reason[SCHED_REASON_MAX]; /* with a plan: a summary; without: why, for users */
};

/*
 * The work lost if v is stopped at now_ms, in GPU-milliseconds: its GPUs (tasks x gpus_per_task)
 * times the time since the newer of its attempt's start and its newest checkpoint (a checkpoint
 * older than the attempt saves nothing of it).  Milliseconds, so that two victims a fraction of a
 * second apart do not tie.  Never negative.
 */
int64_t sched_preempt_lost_gpu_ms(const struct sched_victim *v, int64_t now_ms);

/*
 * Plans the preemption that lets r (of the given priority) start, as of now_ms (the wall clock
 * in ms; placements, end_s, ready_s and est_start_s use now_s = now_ms / 1000).  victims[0..n)
 * lists every gang that holds resources now.  Eligible victims are whole gangs that are
 * preemptible, of strictly lower priority than r, and started at least min_runtime_s ago
 * (now_ms - started_ms >= min_runtime_s * 1000; 0 allowed); a reclaimable victim need not be of
 * lower priority.  The plan is a set of eligible victims
 * such that r is placeable by sched_place once they are released (topology, capacity order, GPU
 * type, pool caps, cool-downs all honoured), chosen for the least lost work; ties go to the set
 * whose highest victim priority is lowest, then whose oldest victim started last, then to fewer
 * victims.  The optimum is exact with up to SCHED_PREEMPT_EXACT_MAX candidates; beyond that a
 * bounded greedy search (plan->exact false).  Work is bounded by a fixed number of placements.
 *
 * Returns 1 with a plan: plan->victims, nvictims, lost_gpu_ms, ready_s, and plan->slots where r
 * goes once the victims are released.  Returns 0 without one and plan->reason says why: r fits
 * now; r will fit without preemption (running gangs ending by their end_s, cool-downs ending) by
 * the plan's ready_s, at plan->est_start_s; no lower-priority preemptible gangs would free
 * enough; the victims that would are too young (plan->retry_at_ms says when the first of them
 * comes of age); r cannot fit even on an idle cluster; r is invalid.  Returns -1 with err on bad
 * arguments (NULL pointers, a slot that is not committed, two gangs holding the same GPU) or no
 * memory.
 *
 * The cluster is left exactly as it was, generation included: the search releases candidate
 * victims in the cluster and commits them back.  Loop-thread only, like every cluster call.
 */
int sched_preempt_plan(struct sched_cluster *c,
                       const struct sched_request *r,
                       int64_t priority,
                       int64_t now_ms,
                       int min_runtime_s,
                       const struct sched_victim *victims,
                       int nvictims,
                       struct sched_preempt_plan *plan,
                       struct mu_err *err);

/* Whether sched_preempt_first could plan for a job of this priority with these victims: some
 * victim may be stopped (preemptible), and, unless a queue is limited by a quota (which may
 * reclaim what it lent at any priority), one of strictly lower priority. */
bool sched_preempt_may(const struct sched_quota_queue *quota,
                       int nquota,
                       const struct sched_victim *victims,
                       int nvictims,
                       int64_t priority);

struct sched_order;

/* Whether a job that the order's iteration has not reached yet could get a plan from
 * sched_preempt_first: its priority, at most sched_order_rest_priority's, is above a gang that may
 * be stopped, one of victims or one of the pending jobs span tells of (which may start in the
 * pass); or a queue is limited by a quota.  False when the iteration has no job left. */
bool sched_pass_rest_may_preempt(const struct sched_order *o,
                                 const struct sched_quota_queue *quota,
                                 int nquota,
                                 const struct sched_victim *victims,
                                 int nvictims,
                                 const struct sched_shape_span *span);

/*
 * When a pass in steps may stop (musterd and muster-sim ask the same rule): after step n
 * (0-based) of a job that did not start, from step next_check on, true when no job of the
 * queue's shapes could start or take the reservation (sched_pass_settled) and, when the pass
 * ends with sched_preempt_first (preempts), no job the order has not reached could preempt
 * (sched_pass_rest_may_preempt).  When not, the next ask is nshapes steps on, so the checks cost
 * O(1) a job.  A shape counts while the order still holds a job of it: the caller tells each job
 * it takes from the order (sched_pass_stop_taken), stepped or not, since its decision is made.
 * nshapes < 0: the pass never stops.  The pointers are borrowed for the pass.
 *
 * A caller that needs no decision for a job that only waits (muster-sim: no reasons) sets
 * skip_waiting.  Once a reservation is out and no job the order has not reached could preempt,
 * an ask that does not stop the pass also marks the shapes whose jobs could still start, and
 * sched_pass_stop_skips is then true for a job of any other shape: it would wait (it neither
 * starts, nor takes the reservation, which is out, nor plans a preemption), so it need not be
 * stepped.  Nothing is freed in a pass, so a shape that cannot start stays so.  A job whose
 * earlier plan's victims are still stopping must be stepped all the same (sched_preempt_first
 * stops at it).
 */
struct sched_pass_stop {
    const struct sched_request *shapes; /* sched_shapes_list's */
    struct sched_shape_left *left;      /* its jobs, taken down as the pass takes them */
    int nshapes;
    const struct sched_shape_span *span;
    const struct sched_order *order; /* the iteration the jobs come from */
    const struct sched_quota_queue *quota;
    int nquota;
    const struct sched_victim *victims; /* the gangs running now */
    int nvictims;
    bool preempts;
    bool skip_waiting;
    int next_check; /* the caller's first step to ask at; moved on by each ask */
    bool skipping;  /* may_start is set: jobs of the other shapes only wait */
    bool may_start[SCHED_SHAPES_MAX];
};
bool sched_pass_may_stop(struct sched_cluster *c, struct sched_pass_stop *s, int n);
/* Whether the pass may leave a job of shape (its handle) unstepped: see skip_waiting. */
bool sched_pass_stop_skips(const struct sched_pass_stop *s, int shape);
/* The pass took a job of shape (its sched_shapes_add handle; < 1: not counted) from the order. */
void sched_pass_stop_taken(struct sched_pass_stop *s, int shape);

/* A job of a pass as sched_preempt_first sees it. */
struct sched_preempt_job {
    const struct sched_request *req; /* borrowed for the call */
    int64_t priority;
    int queue;           /* index into the quota table */
    bool waiting;        /* the victims of an earlier plan for it are still stopping */
    int64_t retry_at_ms; /* output: the planner found no plan for it because the victims that
                            would free enough are too young, and the first comes of age then
                            (sched_preempt_plan's retry_at_ms, > now_ms); otherwise 0 */
};

/*
 * The pass's one preemption, one rule for musterd and muster-sim: after sched_pass_quota made
 * decisions dec[0..n) for jobs[0..n) (in the pass's order), the first job that did not start and
 * is not over quota gets a plan (sched_quota_preempt_prepare with quota[0..nquota) and
 * jobs[i].queue, then sched_preempt_plan with victims[0..nvictims): every gang holding resources,
 * preemptible saying whether the gang itself may be stopped).  Jobs before it that got no plan
 * have their retry_at_ms set.  plan->victims must hold nvictims entries and plan->slots the
 * largest req->tasks of the jobs.  victims[].preemptible and reclaimable are left as the found
 * plan's preparation marked them.
 *
 * Returns 1 with *job the index of the job the pass's plan is for: plan->nvictims > 0 for a new
 * plan (stop plan->victims), 0 when that job is waiting for the victims of an earlier one.
 * Returns 0 (*job -1) when no job gets a plan, -1 with err on no memory or a planner error.
 */
int sched_preempt_first(struct sched_cluster *c,
                        const struct sched_quota_queue *quota,
                        int nquota,
                        struct sched_preempt_job *jobs,
                        const struct sched_decision *dec,
                        int n,
                        struct sched_victim *victims,
                        int nvictims,
                        int64_t now_ms,
                        int min_runtime_s,
                        struct sched_preempt_plan *plan,
                        int *job,
                        struct mu_err *err);

/* ---- event reactions musterd and muster-sim share (core/react.c) ---- */

/*
 * What an event does to a node and the gangs running on it, decided once: musterd's handler and
 * muster-sim's engine both ask, then apply it with their own I/O (docs/architecture.md,
 * "Reactions").  Times are on the caller's clock in milliseconds (any epoch, used consistently).
 */
struct sched_reaction {
    enum sched_node_state node_state; /* the node's state from now on (READY: not concerned) */
    bool stop;                        /* its running gangs stop: checkpoint signal first */
    int64_t stop_by_ms;               /* and are killed by then; 0: within their own grace */
    bool requeue;                     /* a stopped gang goes back to pending (else it ends) */
    bool head_of_queue;               /* first among its priority once requeued */
    bool cool_down;                   /* the node's pool takes no new work ... */
    int64_t cooldown_until_s;         /* ... until then (seconds, as now_ms / 1000) */
};

/* A spot interruption notice at now_ms for a node the cloud takes at deadline_ms: the node is
 * terminating; its gangs are checkpointed, killed margin_ms before the deadline (at once when
 * that is past) and requeued first; the pool cools down for cooldown_s (< 0: no cool-down, a
 * policy without one). */
struct sched_reaction sched_react_spot_notice(int64_t now_ms,
                                              int64_t deadline_ms,
                                              int64_t margin_ms,
                                              int64_t cooldown_s);
/* A node judged lost (its heartbeats stopped), or down (its worker said BYE): the attempts of its
 * gangs end at once, not counted against the jobs, and are requeued. */
struct sched_reaction sched_react_node_lost(bool down);
/* The operator drains a node at now_ms: no new work there; its gangs are checkpointed and
 * requeued, killed after grace_s (< 0: their own checkpoint grace). */
struct sched_reaction sched_react_drain(int64_t now_ms, int64_t grace_s);
/* A job's time limit: its own time_limit_s when > 0, else default_s; 0 when neither is > 0. */
int64_t sched_time_limit_s(int64_t time_limit_s, int64_t default_s);
/* When an attempt started at started_ms reaches that limit; INT64_MAX when there is none. */
int64_t sched_time_limit_end_ms(int64_t started_ms, int64_t time_limit_s, int64_t default_s);
/* An attempt past its time limit: stopped within its own grace, checkpoint signal first, and the
 * job ends (TIMEOUT); never requeued. */
struct sched_reaction sched_react_time_limit(void);

/* ---- back to spot (core/spot.c) ---- */

/*
 * What moving a gang from capacity costing from_per_h (the sum over its nodes, per hour) to
 * capacity costing to_per_h gains: the saving over remaining_s, less the lost_s of work (since its
 * last checkpoint, plus a restart) redone at the new price.  > 0: the move pays.  0 when it saves
 * nothing (the new capacity costs as much or more, or nothing remains).
 */
double sched_spot_return_gain(double from_per_h,
                              double to_per_h,
                              int64_t remaining_s,
                              int64_t lost_s);

/* ---- fair share between queues (core/share.c, core/order.c, docs/fair-share.md) ---- */

#define SCHED_MAX_QUEUES                                                    \
    65 /* the configured queues (64 at most), plus one for jobs whose queue \
          is no longer configured */

/* usage halved every half_life_s: usage * 2^(-dt_s / half_life_s); dt_s <= 0 leaves it. */
double sched_usage_decay(double usage, double dt_s, double half_life_s);

/* A queue as the order sees it. */
struct sched_share_queue {
    double weight;    /* > 0 (a weight <= 0 counts as 1) */
    double usage;     /* GPU-seconds used, decayed to now */
    double committed; /* GPU-seconds its running gangs are still expected to use */
};

/* usage decayed over dt_s while gpus GPUs ran all along: each GPU-second decays from when it was
 * used, so this is exact for any dt_s (gpus * half_life / ln 2 * (1 - 2^(-dt / half_life))). */
double sched_usage_accrue(double usage, double gpus, double dt_s, double half_life_s);

/* GPU-seconds a gang of tasks x gpus_per_task uses in dt_s seconds; 0 when dt_s <= 0.  The one
 * rule for a pending job's cost (dt_s = its expected run time) and a running gang's commitment
 * (dt_s = from now to its expected end), used by musterd's pass and by muster-sim. */
double sched_share_gpu_s(int tasks, int gpus_per_task, int64_t dt_s);

/* (usage + committed) / weight: lower stands first. */
double sched_share_standing(const struct sched_share_queue *q);

/* A user of one queue as the order sees it (Slurm's fair-share tree: every user of a queue has
 * the same share of it, so standing within the queue is usage + committed). */
struct sched_share_user {
    double usage;     /* GPU-seconds the user's gangs in this queue used, decayed to now */
    double committed; /* GPU-seconds the user's running gangs there are still expected to use */
};

/* A pending job as the order sees it. */
struct sched_order_job {
    int queue;             /* index into the queues */
    int user;              /* index into the users (a user of this queue); unused without users */
    int64_t priority;      /* larger first, within its queue */
    bool head_of_queue;    /* requeued by a spot interruption: first among its priority */
    uint64_t submitted_ms; /* older first */
    const char *id;        /* the last tie-break (borrowed; NULL = by index) */
    double cost;           /* GPU-seconds it is expected to use: GPUs x expected run time */
};

/* The fair-share order (core/order.c): the pending jobs' keys, kept sorted between passes and
 * changed incrementally, and the scratch of an iteration.  Not thread-safe; one user at a time. */
struct sched_order;
struct sched_order *sched_order_new(void); /* NULL when out of memory; sched_order_free */
void sched_order_free(struct sched_order *o);

/*
 * The pass's order: order[0..n-1] gets each index of jobs once.  The next job is always the next
 * job of the queue whose standing plus what it was charged so far in this order, over its weight,
 * is lowest (ties: the lower queue index); taking a job charges its queue the job's cost.
 * Within a queue: priority (higher first), then gangs requeued by a spot interruption; among
 * jobs equal in both, the next job of the user whose usage + committed + charged is lowest
 * (ties: the user whose next job is older), then age, then id (a NULL id before any other; the
 * shorter first, then bytes, so stream IDs of one millisecond go by sequence number), then index.
 * users[0..nusers) may be NULL/0: then every job of a queue counts as one user's. 0, or -1 with err
 * (a job naming no queue or no user, out of memory).  It is sched_order_clear, sched_order_add of
 * every job, sched_order_begin and sched_order_next (below): O(n log n).
 */
int sched_order_jobs(struct sched_order *o,
                     const struct sched_order_job *jobs,
                     int n,
                     const struct sched_share_queue *queues,
                     int nqueues,
                     const struct sched_share_user *users,
                     int nusers,
                     int *order,
                     struct mu_err *err);

/*
 * The same order kept across passes and produced one job at a time (issue #15), so that a pass
 * that looks at the first k jobs costs O(k (log q + log u)) plus O(changes), not a sort of every
 * job.  Keys live in o between calls; a key's fields (and its id string, borrowed) must not change
 * while it is in o: remove it, then add it again.  Adding or removing ends an iteration (next then
 * returns NULL until the next begin).
 *
 * sched_order_add: the job goes to a batch merged at the next begin; amortized O(1).  handle (not
 * NULL) is what next returns for it.  The job's queue must be 0..SCHED_MAX_QUEUES-1 and its user
 * >= 0 (users are checked against nusers at begin).  0, or -1 with err (MU_E_INVAL, MU_E_NOMEM;
 * o unchanged).
 */
int sched_order_add(struct sched_order *o,
                    const struct sched_order_job *job,
                    void *handle,
                    struct mu_err *err);

/* Removes the key added with job's field values and handle: true, or false when it is not in o.
 * O(log n) over the queue's merged keys, plus a scan of the keys added since the last begin. */
bool sched_order_remove(struct sched_order *o,
                        const struct sched_order_job *job,
                        const void *handle);

void sched_order_clear(struct sched_order *o);      /* removes every key; keeps the memory */
int sched_order_count(const struct sched_order *o); /* the keys in o */

/*
 * Starts an iteration of the order for these standings: merges the batch and drops removed keys
 * (O(n) sequential over the changed queues' keys, only when something changed), then sets up
 * the queues' heap; O(q + u) otherwise.  queues and users are read here only (copied).  The
 * order is sched_order_jobs's over the keys in o, the order of adding as the last tie-break; with
 * nusers 0 there is no interleave between users and a band goes by the user field, then age (add
 * jobs with user 0 to go by age alone).  Users are per queue: a user index that two queues share
 * is charged, across them, for the jobs taken so far.  0, or -1 with err (a key naming a queue
 * >= nqueues or a user >= nusers, out of memory), and then no iteration.
 */
int sched_order_begin(struct sched_order *o,
                      const struct sched_share_queue *queues,
                      int nqueues,
                      const struct sched_share_user *users,
                      int nusers,
                      struct mu_err *err);

/* The next job's handle in the fair-share order; NULL after the last, or with no iteration
 * begun.  O(log q + log u) amortized; the first job of a band also finds its users' runs
 * (O(u log b) for a band of b jobs). */
void *sched_order_next(struct sched_order *o);

/* The highest priority among the jobs the iteration has not returned yet (jobs come by priority
 * within their queue, so O(queues)); false when none is left or no iteration is under way. */
bool sched_order_rest_priority(const struct sched_order *o, int64_t *max);

/* ---- quotas, cohorts and borrowing between queues (core/quota.c, docs/quotas.md) ---- */

/* A queue as quotas see it; the by-capacity arrays are indexed by enum sched_capacity. */
struct sched_quota_queue {
    const char *name;        /* for reasons (borrowed) */
    const char *cohort_name; /* for reasons (borrowed); NULL without a cohort */
    bool limited;            /* false: no quota (not limited; best effort) */
    int cohort;              /* -1 none; queues with the same number lend each other quota */
    int nominal[2];          /* GPUs it may always use */
    int borrow_limit;        /* most GPUs it may use beyond nominal (per capacity); -1 = any */
    int lend_limit;          /* most of its unused nominal GPUs others may use; -1 = all */
    int used[2];             /* GPUs its running gangs hold now */
};

/* One configured queue's quota as the config gives it: plain values, so that the core does not
 * read the config (musterd and muster-sim each copy their cfg_queue into it). */
struct sched_quota_config {
    const char *name;   /* borrowed: the built queue keeps it for reasons */
    const char *cohort; /* NULL or "" = none; borrowed likewise */
    bool has_quota;     /* false: not limited (best effort) */
    int quota[2];       /* nominal GPUs by enum sched_capacity */
    int borrow_limit;   /* -1 = any */
    int lend_limit;     /* -1 = all of it */
};

/*
 * The quota table of a pass, one rule for musterd and muster-sim: qs[0..n) from the n configured
 * queues (0..SCHED_MAX_QUEUES-1) with nothing used, and qs[n], the queue of jobs whose queue is
 * no longer configured, not limited.  A queue with a quota and a cohort name joins the cohort
 * numbered by the first limited queue of that name.  qs holds n + 1 entries; the names stay
 * borrowed from cfg.
 */
void sched_quota_queues_init(struct sched_quota_queue *qs,
                             const struct sched_quota_config *cfg,
                             int n);

enum sched_quota_fit {
    SCHED_QUOTA_NO = 0,      /* beyond its quota and what its cohort can lend it */
    SCHED_QUOTA_WITHIN = 1,  /* within nominal quota (or the queue is not limited) */
    SCHED_QUOTA_BORROWS = 2, /* beyond nominal, on quota borrowed from its cohort */
};

/* Whether queue q may start gpus more GPUs of capacity cap now (core/quota.c has the rule). */
enum sched_quota_fit sched_quota_admits(
    const struct sched_quota_queue *qs, int nq, int q, int cap, int gpus);
/* Idle quota of capacity cap its cohort can lend q now, in GPUs (0 without a cohort). */
int sched_quota_lendable(const struct sched_quota_queue *qs, int nq, int q, int cap);
/* GPUs of q's idle quota of capacity cap that its cohort's borrowers use now: what the members
 * use beyond their nominal quota, covered by the lenders' idle lendable parts in queue order
 * (so the cohort's lent GPUs add up to its borrowed ones).  0 without a cohort. */
int sched_quota_lent(const struct sched_quota_queue *qs, int nq, int q, int cap);
/* *out = *r with only the capacity types q's quota admits r's GPUs in; returns how many. */
int sched_quota_filter(const struct sched_quota_queue *qs,
                       int nq,
                       int q,
                       const struct sched_request *r,
                       struct sched_request *out);
/* Counts gpus more as used by q in capacity cap. */
void sched_quota_charge(struct sched_quota_queue *qs, int nq, int q, int cap, int gpus);
/* Why r of queue q waits for quota, for users: "queue research at quota (64/64 spot GPUs);
 * cohort ml has 0 idle spot GPUs to lend" (the same for every larger job of q: no size in it). */
void sched_quota_reason(const struct sched_quota_queue *qs,
                        int nq,
                        int q,
                        const struct sched_request *r,
                        char *out,
                        size_t size);
/* True when q is limited and r fits its nominal quota in one of r's capacity types. */
bool sched_quota_within_nominal(const struct sched_quota_queue *qs,
                                int nq,
                                int q,
                                const struct sched_request *r);

enum sched_quota_victim {
    SCHED_QUOTA_BY_PRIORITY = 0, /* the usual rule: preemptible and of lower priority */
    SCHED_QUOTA_PROTECTED,       /* another queue's work within its quota: never a victim */
    SCHED_QUOTA_RECLAIM,         /* runs on quota the preemptor's queue lent: a victim whatever
                                    its priority (sched_victim.reclaimable) */
};

/*
 * What quotas say about preempting a running gang of victim_q (borrowed: it started on borrowed
 * quota) for a job of preemptor_q (within_nominal: sched_quota_within_nominal).  Work of a queue
 * without quota, or of the preemptor's own queue, follows priority as before quotas; another
 * limited queue's work within its quota is protected; borrowed work is reclaimed by a queue of
 * its cohort that wants its own nominal quota back, and otherwise follows priority.
 */
enum sched_quota_victim sched_quota_victim_kind(const struct sched_quota_queue *qs,
                                                int nq,
                                                int preemptor_q,
                                                bool preemptor_within_nominal,
                                                int victim_q,
                                                bool victim_borrowed);

/*
 * A preemption under quotas, as musterd and muster-sim plan one for a job of queue q: *out = r
 * with only the capacity types q's quota admits (sched_quota_filter), and every victim marked by
 * sched_quota_victim_kind (its queue and borrowed say where it runs): reclaimable set or cleared,
 * and preemptible cleared when it is protected.  Call it on victims whose preemptible says only
 * whether the gang itself may be stopped.  Returns the capacity types left: 0 = no plan at all.
 */
int sched_quota_preempt_prepare(const struct sched_quota_queue *qs,
                                int nq,
                                int q,
                                const struct sched_request *r,
                                struct sched_request *out,
                                struct sched_victim *victims,
                                int nvictims);

#endif

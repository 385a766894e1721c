/* SPDX-License-Identifier: MIT */
/* The core's cross-file definitions; never included outside core/ (a CI grep checks). */
#ifndef MUSTER_CORE_INTERNAL_H
#define MUSTER_CORE_INTERNAL_H

#include "core/sched.h"

#include <string.h>

#define SCHED_HIST_W      (SCHED_MAX_GPUS_NODE + 1) /* free-GPU histogram width: 0..64 */
#define SCHED_MEMO_SIZE   1024                      /* failed-shape memo slots (power of two) */
#define SCHED_NONE_MEMO   8                         /* task sizes none_last keeps */
#define SCHED_REASON_MEMO 256                       /* reasons a pass keeps (power of two) */

/* The hot part of a node, what a placement scan reads; the spec lives in a separate array. */
struct sched_node {
    uint64_t gpus_all;  /* mask of the node's GPUs */
    uint64_t gpus_used; /* subset of gpus_all */
    uint64_t gpus_held; /* the pass's reservation; honoured while the cluster's holds_on */
    int64_t memory_mb;
    int64_t memory_mb_used;
    int64_t memory_mb_held;
    int cpus;
    int cpus_used;
    int cpus_held;
    int ngpus;     /* popcount(gpus_all) */
    int gpus_free; /* popcount(gpus_all & ~gpus_used), kept by node_free_set */
    int pool;
    enum sched_node_state state;
    bool at_risk;
    bool one_island; /* all GPUs in one island: any free GPUs will do */
};

/* What a placement's scan reads of a node first (core/place.c size_node): its pool and its
 * gpus_free, 4 bytes apart from the 80-byte struct, so that a scan over a busy cluster's full
 * nodes does not load each one's struct (issue #15: that load was a third of the scan at 19,840
 * nodes).  Kept with gpus_free by cluster.c's node_free_set, its only writer. */
struct sched_node_brief {
    int16_t pool;
    int16_t gpus_free;
};

/* A node's MIG slices (core/slice.c), apart from the hot struct: only slice requests read it. */
struct sched_node_slices {
    uint64_t all; /* its slice units */
    int nprof;    /* distinct profiles, 0..SCHED_NODE_PROFILES */
    uint8_t prof[SCHED_NODE_PROFILES];
    uint64_t mask[SCHED_NODE_PROFILES]; /* its slices of prof[k] */
};

/* Only READY nodes that are not at risk (a rebalance recommendation) take new work. */
static inline bool sched_node_takes_work(const struct sched_node *n)
{
    return n->state == SCHED_NODE_READY && !n->at_risk;
}

/* Why a gang did not fit, as data; sched_fail_format turns it into words for one request. */
enum sched_fail_kind {
    SCHED_FAIL_INVALID = 0, /* the request itself is bad */
    SCHED_FAIL_NO_NODES,    /* no ready node of an allowed type, GPU type and size */
    SCHED_FAIL_COOLING,     /* such nodes exist, but only in pools in cool-down */
    SCHED_FAIL_CAPACITY,    /* nodes exist, not enough free in one place */
};

struct sched_fail {
    enum sched_fail_kind kind;
    int best;          /* most tasks that fit now (in one domain of the required level) */
    int best_uncapped; /* the same without pool caps: more means a cap is in the way */
    int capped_pool;   /* a pool whose max_gpus binds, or -1 */
    int cooling_pool;  /* COOLING: one of the pools cooling down */
    int64_t cooling_until_s;
    int best_nodes; /* nodes that take a task in the domain counted in best (0 = not counted) */
    bool global;    /* best counts the whole cluster (a quick bound), not one domain */
    bool never;     /* it fails even on an idle view of today's nodes (every gang ended, every
                       cool-down over): best is then what today's nodes hold at most */
};

/* One failed shape in the current pass: any request of the same family with at least
 * min_tasks tasks fails too (nothing is freed during a pass).  In the idle mode, whose view
 * does not change during a pass, fits are kept too: max_fit_tasks or fewer tasks fit.  In the
 * now and settled modes a fit holds only until the pass starts another job: max_fit_tasks or
 * fewer tasks fit while the pass's start count is still fit_starts. */
struct sched_memo {
    uint32_t pass; /* the pass the entry belongs to; 0 = empty */
    int mode;      /* see pass.c: now, now with the reservation held, ever, idle, settled */
    int gpus_per_task;
    int slice_profile;
    int gpu_milli;
    int cpus_per_task;
    int64_t memory_mb_per_task;
    const char *gpu_type; /* borrowed from the pass's pending jobs, valid during the pass */
    int ncapacity;
    enum sched_capacity capacity[2];
    int required_level;
    int min_tasks;     /* INT_MAX: no failure known */
    int max_fit_tasks; /* idle, now and settled modes; 0: no fit known */
    int fit_starts;    /* now, settled: the pass's start count when max_fit_tasks was seen */
    struct sched_fail fail;
};

/* A reason the pass formatted (pass.c reason_set): what sched_fail_format reads of the request
 * and the failure, and its text.  Valid in its pass only (now_s, the GPU type's pointer). */
struct sched_reason_memo {
    uint32_t pass; /* 0 = empty */
    int tasks;
    int gpus_per_task;
    int slice_profile;
    int gpu_milli;
    int cpus_per_task;
    int64_t memory_mb_per_task;
    const char *gpu_type; /* borrowed from the pass's pending jobs */
    int ncapacity;
    enum sched_capacity capacity[2];
    int required_level;
    struct sched_fail fail;
    char reason[SCHED_REASON_MAX];
};

/* A fits_idle answer (pass.c), kept across passes while the eligible nodes stay the same. */
struct sched_idle_memo {
    struct sched_memo m;           /* m.pass: the cluster's nodes_gen it belongs to; 0 = empty */
    char gpu_type[SCHED_NAME_MAX]; /* m.gpu_type points here, or is NULL */
};

/* An event of the reservation search: a running gang's end, or a cool-down's end (run = -1). */
struct sched_event {
    int64_t t_s;
    int run; /* index into the pass's running list (given + started in the pass), or -1 */
};

/* A P-domain inside a scope, for "as few domains of P as possible". */
struct sched_dom {
    int start; /* order positions [start, end) */
    int end;
    int tasks; /* how many tasks fit there now */
    int free;  /* free GPUs (free tasks when no GPUs asked): best fit picks the smallest */
};

struct sched_cluster {
    struct sched_pool *pools;
    int npools;
    int *pool_gpus_used;  /* per pool, for max_gpus caps */
    int64_t *pool_cool_s; /* per pool: in cool-down while now < this */
    int *pool_hist;       /* [pool * SCHED_HIST_W + free GPUs]: eligible nodes (READY, not at
                             risk) by free GPUs, for a quick "cannot fit" bound */
    int *pool_size_hist;  /* [pool * SCHED_HIST_W + GPUs]: the same nodes by their whole GPUs,
                             for the idle view's counts (sched_place_idle_count) */
    int nlevels;
    char level_names[SCHED_MAX_LEVELS + 1][SCHED_NAME_MAX]; /* [nlevels] = "node" */
    struct sched_node *nodes;
    struct sched_node_brief *brief; /* [cap_nodes] */
    struct sched_node_spec *specs;
    struct sched_node_slices *slices;       /* [cap_nodes] */
    uint16_t (*milli)[SCHED_MAX_GPUS_NODE]; /* [cap_nodes]: gpu_milli in use per GPU (shared) */
    char profiles[SCHED_MAX_PROFILES + 1][SCHED_PROFILE_MAX]; /* [id]: MIG profile names */
    int nprofiles;
    struct mu_map *by_name; /* node name -> index + 1 */
    int nnodes;
    int cap_nodes;
    uint64_t generation;

    /* Topology: nodes sorted by label path, so each domain of each level is a range of order. */
    bool topo_dirty;
    int *order;                       /* [cap_nodes] node indices */
    int *dom_start[SCHED_MAX_LEVELS]; /* [ndom + 1] ranges in order; sentinel = nnodes */
    int ndom[SCHED_MAX_LEVELS];

    /* Placement scratch, sized with the nodes: no allocation while placing. */
    int *ncap;  /* [pos] tasks that fit on the node at order[pos]; 0 = not eligible */
    int *nfree; /* [pos] its free GPUs (free tasks when none asked); 0 = not eligible */
    int *npool; /* [pos] its pool */
    int *bnext; /* [pos] bucket chains of the packer */
    int *tmp;   /* [cap_nodes] sort scratch */
    struct sched_dom *doms;
    int *pool_left; /* [npools] tasks a pool's cap still allows (INT_MAX: no cap) */
    int *pool_sum;  /* [npools] */
    int *pool_dsum; /* [npools] per domain */
    int *pool_rank; /* [npools] price tier within its type; -1 = not usable for this request */
    bool holds_on;  /* the pass's reservation is held: count gpus_held etc. as used */
    bool idle_view; /* size nodes as if nothing ran: "could it ever fit" (an upper bound) */
    const struct sched_request *avoiding; /* while set, its avoid nodes count as not eligible */

    /* Pass scratch. */
    uint32_t pass_id;
    struct sched_memo memo[SCHED_MEMO_SIZE];
    struct sched_reason_memo reasons[SCHED_REASON_MEMO]; /* this pass's reasons, by shape */
    /* Grows (never 0) when a node is added or relabelled or starts or stops taking work: what
     * the idle view sees.  Its answers live in idle_memo across passes until then. */
    uint32_t nodes_gen;
    struct sched_idle_memo idle_memo[SCHED_MEMO_SIZE];
    /* For a placement none of whose tasks fits (place.c none_last): per task size, the last
     * position in order of a node of each pool that takes work and could hold a task, -1 none;
     * none_last[k * (npools + 1) + pool] for none_key[k], valid while nodes_gen is its own. */
    struct sched_none_key {
        uint32_t nodes_gen; /* 0 = empty */
        int gpus_per_task;
        int cpus_per_task;
        int64_t memory_mb_per_task;
    } none_key[SCHED_NONE_MEMO];
    int *none_last;
    int none_next; /* the entry the next new size replaces */
    struct sched_event *events;
    struct sched_event *events_tmp; /* [cap_events] the merge sort's other half */
    int cap_events;
    struct sched_running *runs; /* given running gangs plus those started in the pass */
    int cap_runs;
    struct sched_request *quota_reqs; /* [cap_quota_reqs] pending requests cut to their quota */
    int cap_quota_reqs;
    /* Per queue, this pass: the fewest GPUs found over quota for one capacity list, and the
     * reason; a queue's use only grows in a pass, so more GPUs fail the same way until the next
     * start of that queue clears it. */
    struct sched_quota_memo {
        uint32_t pass;
        uint32_t admit_gen; /* admit_max holds while c->quota_gen is this */
        int admit_max[2];   /* by capacity type: the most GPUs admitted; -1 none */
        int refuse_min[2];  /* by capacity type: the fewest GPUs refused; INT_MAX none */
        int reason_caps;    /* the capacity list reason is about, encoded; -1 none */
        char reason[SCHED_REASON_MAX];
    } * quota_memo;
    uint32_t quota_gen; /* a start in this pass: every queue's admissions may have shrunk */
    int cap_quota_memo;

    /* The pass under way (sched_pass_open .. sched_pass_close). */
    struct sched_pass_state {
        bool open;
        struct sched_quota_queue *quota; /* borrowed; NULL: no quotas */
        int nquota;
        int max_jobs; /* steps the scratch has room for */
        int njobs;    /* steps taken */
        int nruns;    /* c->runs: the running gangs, then the pass's starts */
        int started;
        bool reserved; /* the reservation is out (res_s, holds set) */
        int64_t res_s;
        int64_t now_s;
    } pass;
};

/* ---- MIG slices (slice.c) ---- */

/* NULL when spec's units are consistent (profiles known, parents MIG-mode GPUs), else why. */
const char *sched_slice_spec_invalid(const struct sched_cluster *c,
                                     const struct sched_node_spec *spec);
/* Fills c->slices[node] from its spec and returns the mask of its whole GPUs. */
uint64_t sched_slice_node_set(struct sched_cluster *c, int node);
/* Slices of profile prof on node free as the placement sees them now (holds, idle view). */
uint64_t sched_slice_free(const struct sched_cluster *c, int node, int prof);
/* Whether node has at least need slices of prof at all. */
bool sched_slice_big_enough(const struct sched_cluster *c, int node, int prof, int need);
/* need slices out of free (slices of one profile on node), best fit: a GPU that holds them all
 * with the fewest free slices, else the fullest GPUs first. */
uint64_t sched_slice_pick(const struct sched_cluster *c, int node, uint64_t free, int need);

/* ---- shared GPUs (milli.c) ---- */

/* Tasks of gpu_milli m that node's GPUs hold now (holds, idle view), at most limit; *room gets
 * the milli free on its GPUs in all (best fit's measure). */
int sched_milli_fit(const struct sched_cluster *c, int node, int m, int limit, int *room);
/* Places take tasks of gpu_milli m on node: slots[0..take) get one GPU each, best fit (the GPU
 * with the least room that holds a task), several tasks sharing a GPU where they fit. */
void sched_milli_fill(
    const struct sched_cluster *c, int node, int m, int take, struct sched_slot *slots);
/* Commit and release of one slot of a gpu_milli request; return the GPUs that became busy or
 * free (for the pool's used count). */
uint64_t sched_milli_commit(struct sched_cluster *c, int node, uint64_t gpus, int m);
uint64_t sched_milli_release(struct sched_cluster *c, int node, uint64_t gpus, int m);

/* Sorts the nodes into topology order if nodes were added since the last sort. */
void sched_topo_refresh(struct sched_cluster *c);
/* Range [*start, *end) of order positions of domain d of level (nlevels = single nodes). */
void sched_topo_range(const struct sched_cluster *c, int level, int d, int *start, int *end);
int sched_topo_ndom(const struct sched_cluster *c, int level);

/* The placement proper: 1 with slots, or 0 with *fail filled.  slots NULL: only whether it
 * fits (1 or 0 the same way), nothing packed. */
int sched_place_in(struct sched_cluster *c,
                   const struct sched_request *r,
                   int64_t now_s,
                   struct sched_slot *slots,
                   struct sched_fail *fail);
/* The most tasks of r (gpus_per_task > 0) the free-GPU histograms allow at now_s in any one of
 * its capacity types, pool caps applied: an upper bound on what sched_place_in can place. */
int64_t sched_place_bound(const struct sched_cluster *c,
                          const struct sched_request *r,
                          int64_t now_s);
/*
 * sched_place_in(c, r, INT64_MAX, NULL, fail) on the idle view for r with whole GPUs, no CPUs or
 * memory asked and no required level, from the size histograms: the same 0 and the same *fail
 * (r->tasks beyond what any capacity type holds, e.g. INT_MAX, asks for the most there is room
 * for).  Returns -1 for any other request (nothing done): then place.
 */
int sched_place_idle_count(struct sched_cluster *c,
                           const struct sched_request *r,
                           struct sched_fail *fail);
/* Quick bound from the free-GPU histograms: false when r surely cannot fit now (fail filled). */
bool sched_place_may_fit(const struct sched_cluster *c,
                         const struct sched_request *r,
                         int64_t now_s,
                         struct sched_fail *fail);
/* NULL when r is well formed for c, else what is wrong (static text). */
const char *sched_request_invalid(const struct sched_cluster *c, const struct sched_request *r);
void sched_fail_format(const struct sched_cluster *c,
                       const struct sched_request *r,
                       const struct sched_fail *f,
                       int64_t now_s,
                       char *buf,
                       size_t size);

/* Two requests' GPU types are the same (NULL is "" : any).  Most requests name none or share one
 * spec's string, so the pointers are compared before the bytes. */
static inline bool sched_type_same(const char *a, const char *b)
{
    return a == b || strcmp(a ? a : "", b ? b : "") == 0;
}

/* Backfill's rule: a job that runs at most run_s seconds (0: no limit) from now_s is done by
 * at_s, so it may take GPUs the reservation starting at at_s holds. */
static inline bool sched_done_by(int64_t run_s, int64_t now_s, int64_t at_s)
{
    return run_s > 0 && run_s < INT64_MAX - now_s && now_s + run_s <= at_s;
}

/* ---- the pass's memo (pass.c), which its stop rule (pass_stop.c) asks too ---- */

/* What a memo entry answers for: the question a placement was asked. */
enum sched_pass_mode {
    SCHED_MODE_NOW = 0,  /* fits now, reservation ignored (a job that ends before it starts) */
    SCHED_MODE_HELD = 1, /* fits now beside the reservation */
    SCHED_MODE_EVER = 2, /* fits once the running gangs the pass knows of have ended */
    SCHED_MODE_IDLE = 3, /* fits on the idle view of today's nodes (fits are memoized too) */
    SCHED_MODE_SETTLED =
        4, /* sched_pass_settled's own failures: apart, so jobs' reasons stay theirs */
    SCHED_MODE_SETTLED_HELD = 5, /* its own, beside the reservation */
};

/* The hash of r's family: everything but the task count and the preferred level, which never
 * change whether a request fits. */
uint32_t sched_family_hash(const struct sched_request *r);
/* True when the pass's memo says r (family fam) fails in mode; *fail gets the reason data. */
bool sched_memo_fails(struct sched_cluster *c,
                      const struct sched_request *r,
                      uint32_t fam,
                      int mode,
                      struct sched_fail *fail);
/* Remembers that r failed in mode, with the reason data, for the rest of the pass. */
void sched_memo_note(struct sched_cluster *c,
                     const struct sched_request *r,
                     uint32_t fam,
                     int mode,
                     const struct sched_fail *fail);
/* Whether the memo knows that r fits now in mode while the pass's start count is started, and
 * remembers that it does: a fit holds until the next start, and for fewer tasks of the family. */
bool sched_fit_known(
    struct sched_cluster *c, const struct sched_request *r, uint32_t fam, int mode, int started);
void sched_fit_note(
    struct sched_cluster *c, const struct sched_request *r, uint32_t fam, int mode, int started);
/* Places r at now_s (slots; NULL: only whether it fits), the pass's reservation counted as used
 * when held: true when placed, else false with *fail.  Nothing is remembered. */
bool sched_place_now(struct sched_cluster *c,
                     const struct sched_request *r,
                     bool held,
                     int64_t now_s,
                     struct sched_slot *slots,
                     struct sched_fail *fail);
/* Whether r fits on the idle view of today's nodes, from the idle memo or a search, without
 * remembering the answer. */
bool sched_idle_fits_quiet(struct sched_cluster *c, const struct sched_request *r, uint32_t fam);

/* ---- the pass's quotas (pass_quota.c) and reasons (pass_reason.c) ---- */

/* Job i's request as its queue's quota admits it: *r unchanged, or cut to the capacity types
 * with room (in c->quota_reqs[i]).  False when there is none: d says so (over_quota). */
bool sched_pass_quota_cut(struct sched_cluster *c,
                          const struct sched_quota_queue *quota,
                          int nquota,
                          const struct sched_pass_job *j,
                          int i,
                          const struct sched_request **r,
                          struct sched_decision *d);
/* Charges a started job to its queue's quota in the capacity type it landed in (d->borrowed). */
void sched_pass_quota_started(struct sched_cluster *c,
                              struct sched_quota_queue *quota,
                              int nquota,
                              const struct sched_pass_job *j,
                              const struct sched_request *r,
                              struct sched_decision *d);
/* Room for npending jobs' cut requests and nquota queues' memos, the memos emptied; 0 or -1. */
int sched_pass_quota_scratch(struct sched_cluster *c, int npending, int nquota, struct mu_err *err);
/* d's reason for r (family hash fam) failing with f at now_s, formatted once a pass per shape
 * and failure. */
void sched_pass_reason_set(struct sched_cluster *c,
                           const struct sched_request *r,
                           uint32_t fam,
                           const struct sched_fail *f,
                           int64_t now_s,
                           struct sched_decision *d);
/* d's reason (and est_start_s) for a job that fits now but would delay the reservation at res_s. */
void sched_pass_held_back(int64_t res_s, int64_t now_s, struct sched_decision *d);

/* The pass's reservation held (counted as used while c->holds_on), and cleared again. */
void sched_holds_set(struct sched_cluster *c,
                     const struct sched_request *r,
                     const struct sched_slot *slots);
void sched_holds_clear(struct sched_cluster *c);
/* The pass's reservation search on its own (pass.c), for sched_explain: 1 with *at_s, slots and
 * *freed_by (index into running, -1 a cool-down's end), 0 when r does not fit even once every
 * given gang ended, -1 with err (no memory).  Starts a new pass id (a fresh memo). */
int sched_reserve_search(struct sched_cluster *c,
                         const struct sched_request *r,
                         const struct sched_running *running,
                         int nrunning,
                         int64_t now_s,
                         struct sched_slot *slots,
                         int64_t *at_s,
                         int *freed_by,
                         struct mu_err *err);

/* A queue's weight in the fair-share order: a weight <= 0 counts as 1 (sched.h). */
static inline double sched_share_weight(const struct sched_share_queue *q)
{
    return q->weight > 0 ? q->weight : 1;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * sim: muster-sim, an event-driven replay of a job trace on a modelled cluster in virtual time
 * (issue #13, docs/simulator.md).  The placement, the pass (reservation, EASY backfill), the
 * preemption planner and the fair-share order are the pure core's (core/sched.h), called the way
 * musterd calls them (scheduler/d_pass.c), so a replay shows what musterd would do.
 *
 * Three objects: a trace (sim_trace_parse: muster's CSV schema, a Philly-style job list or an
 * Alibaba GPU pod list, told apart by their column names), a setup (the config, the nodes per
 * pool and the spot model) and a result per policy (sim_run).  Nothing here reads a clock: the
 * replay is deterministic for a seed.
 */
#ifndef MUSTER_SIM_SIM_H
#define MUSTER_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mu.h"
#include "config/cfg.h"
#include "core/sched.h"

#define SIM_TRACE_MAX_ROWS  5000000    /* rows of one trace */
#define SIM_TRACE_MAX_BYTES (1u << 30) /* one trace file */
#define SIM_LINE_MAX        65536      /* one CSV line */
#define SIM_MAX_COLUMNS     64
#define SIM_MAX_TASKS       4096 /* tasks of one gang */
#define SIM_MAX_SKIP_KINDS  24   /* distinct reasons for unused rows */

enum sim_format { SIM_FORMAT_MUSTER = 0, SIM_FORMAT_PHILLY, SIM_FORMAT_ALIBABA };

const char *sim_format_name(enum sim_format f); /* "muster", "philly", "alibaba" */

/* One job of a trace, as the replay uses it (a plain value record). */
struct sim_job {
    int64_t submit_s;        /* from the trace's first submission's second, >= 0 */
    int64_t submit_ms;       /* the same in ms (submit_s * 1000 unless the trace has submit_ms) */
    int64_t duration_s;      /* run time on an idle cluster, >= 1 */
    int64_t end_ms;          /* replay of a recorded run: its first attempt ends at this instant
                                (ms, the clock of submit_ms) if it started by then; -1 = none */
    int64_t time_limit_s;    /* 0 = the config's default_time_limit_s */
    int64_t ckpt_interval_s; /* periodic checkpoints; 0 = the job never checkpoints */
    int64_t priority;
    int tasks;         /* 1..SIM_MAX_TASKS */
    int gpus_per_task; /* 1..SCHED_MAX_GPUS_NODE */
    int queue;         /* index into the config's queues */
    int user;          /* index into the trace's users (one per queue and user name) */
    int ncapacity;     /* 1..2 */
    enum sched_capacity capacity[2];
    bool preemptible;
    int required_level; /* -1 none; 0..nlevels (nlevels = one node) */
    int line;           /* the trace line it came from */
};

/* What the readers need besides the text. */
struct sim_trace_opts {
    const struct cfg *cfg;           /* queues and topology levels (borrowed for the call) */
    int gpus_per_node;               /* the largest node: bigger requests become whole nodes */
    int64_t default_ckpt_interval_s; /* for rows without checkpoint_interval_s; 0 = none */
};

struct sim_trace;

/*
 * Parses a CSV trace with a header line; the layout is chosen by the header's column names
 * (muster: submit_s, duration_s, tasks, gpus_per_task; philly: timestamp, duration, num_gpus;
 * alibaba: creation_time, scheduled_time, deletion_time, num_gpu, gpu_milli).  Jobs come back
 * sorted by submission (stable), times relative to the first.  A row it cannot use is counted
 * under its reason, with the first such line and column (sim_trace_skip_*), never dropped
 * silently.  NULL with err (line and column) when the text is no trace at all: no header, a
 * required column missing, a line too long, too many rows, out of memory.  Free with
 * sim_trace_free.
 */
struct sim_trace *sim_trace_parse(const char *text,
                                  size_t len,
                                  const struct sim_trace_opts *o,
                                  struct mu_err *err);

/*
 * Splits one CSV line (no line break) in place into fields[0..*n): commas separate, a field in
 * double quotes may hold commas and "" for a quote, spaces around fields are trimmed.  0, or -1
 * with err naming the column (1-based) for an unterminated quote, text after a closing quote or
 * more than max fields.
 */
int sim_csv_split(char *line, char **fields, int max, int *n, struct mu_err *err);

/* Reads the file (at most SIM_TRACE_MAX_BYTES) and parses it; errors start with the path. */
struct sim_trace *sim_trace_load(const char *path,
                                 const struct sim_trace_opts *o,
                                 struct mu_err *err);
void sim_trace_free(struct sim_trace *t);

enum sim_format sim_trace_format(const struct sim_trace *t);
int sim_trace_count(const struct sim_trace *t);
/* The distinct (queue, user) pairs of the jobs: sim_job.user is below it.  Jobs without a user
 * column are one user per queue, as musterd counts a spec without "user". */
int sim_trace_users(const struct sim_trace *t);
/* Borrowed: the jobs, sorted by submit_s; valid until sim_trace_free. */
const struct sim_job *sim_trace_jobs(const struct sim_trace *t);
int sim_trace_rows(const struct sim_trace *t); /* data rows read, used or not */
/* Rows whose multi-GPU request was rounded up to whole nodes (counted, still used). */
int sim_trace_rounded(const struct sim_trace *t);
/* Reasons rows were not used: kinds 0..sim_trace_skip_kinds()-1, each with its row count and
 * the message of the first such row ("line 7, column 'duration': expected ..."); borrowed. */
int sim_trace_skip_kinds(const struct sim_trace *t);
int sim_trace_skip_count(const struct sim_trace *t, int kind);
const char *sim_trace_skip_example(const struct sim_trace *t, int kind);

/* ---- the modelled cluster and the spot model ---- */

#define SIM_AVAIL_MAX_ROWS 10000000 /* rows of one spot availability trace */

/* One row of a spot availability trace: from tick t_s on, `nodes` nodes of spot pool `pool` are
 * up (a plain value record). */
struct sim_avail {
    int64_t t_s; /* on the job trace's clock (from its first submission's second), >= 0 */
    int pool;    /* index into the config's pools; a spot pool */
    int nodes;   /* 0..100000; more than the pool's --nodes counts as all of them */
    int line;
};

struct sim_avail_trace;

/*
 * Parses a spot availability trace: a CSV with the header t_s,pool,nodes (any order) and one row
 * per change.  Rows come back sorted by t_s (stable: of two rows of one pool and tick the later
 * wins).  NULL with err naming the line and column for anything it cannot use: no header, an
 * unknown or missing column, an empty or bad number, a pool that is not a spot pool of cfg, too
 * many rows or a line too long.  Free with sim_avail_free.
 */
struct sim_avail_trace *sim_avail_parse(const char *text,
                                        size_t len,
                                        const struct cfg *cfg,
                                        struct mu_err *err);
/* Reads the file (at most SIM_TRACE_MAX_BYTES) and parses it; errors start with the path. */
struct sim_avail_trace *sim_avail_load(const char *path, const struct cfg *cfg, struct mu_err *err);
void sim_avail_free(struct sim_avail_trace *t);
int sim_avail_count(const struct sim_avail_trace *t);
/* Borrowed, sorted by t_s; valid until sim_avail_free. */
const struct sim_avail *sim_avail_rows(const struct sim_avail_trace *t);

struct sim_setup {
    struct cfg cfg;                  /* the musterd config */
    int nodes[CFG_MAX_POOLS];        /* nodes per configured pool */
    double spot_rate[CFG_MAX_POOLS]; /* spot interruptions per node-hour (Poisson), per pool */
    int notice_s;                    /* spot notice before the node goes, default 120 */
    int ckpt_write_s;                /* writing a checkpoint on a signal, default 60 */
    int restart_s;                   /* a restarted attempt's start-up cost, default 120 */
    int replace_s;                   /* an interrupted spot node comes back after, default 600 */
    uint64_t seed;
    /* Borrowed, NULL for none: spot nodes follow this availability trace instead of spot_rate.
     * A drop takes the pool's highest-numbered nodes that are up (a notice, then gone after
     * notice_s); a rise brings back its lowest-numbered gone nodes; nothing comes back on its
     * own (replace_s is not used). */
    const struct sim_avail_trace *avail;
    bool check; /* verify after every event that no GPU is committed twice */
    /* 0 (default): a pass at every instant something changed, as musterd does.  N > 0: at most
     * one pass every N virtual seconds, changes in between wait for it (Slurm's sched_interval);
     * faster on huge traces, no longer musterd's timing. */
    int pass_interval_s;
    /* Called now and then with the fraction of the jobs that ended (for a progress bar); NULL
     * for none.  It must not touch the replay. */
    void (*progress_fn)(void *arg, double done);
    void *progress_arg;
};

/* Defaults for everything but cfg and nodes. */
void sim_setup_defaults(struct sim_setup *s);
/* "p5-spot=256,p5-od=64" into s->nodes; 0 or -1 with err (unknown pool, bad count). */
int sim_setup_parse_nodes(struct sim_setup *s, const char *text, struct mu_err *err);
/* "0.2" (every spot pool) or "p5-spot=0.2,..." into s->spot_rate; 0 or -1 with err. */
int sim_setup_parse_spot_rate(struct sim_setup *s, const char *text, struct mu_err *err);
/* The largest gpus_per_node of the pools that have nodes (8 when none have). */
int sim_setup_gpus_per_node(const struct sim_setup *s);

/*
 * The cluster of s as the core sees it: the pools of the config, s->nodes[p] nodes of each with
 * the pool's gpus_per_node, labelled over the configured levels in order (8 nodes a group at
 * the narrowest level, 4 groups of a level in one of the next wider: "rack3", "zone0").  Node
 * i's name is "n<i>".  Free with sched_cluster_free; NULL with err.
 */
struct sched_cluster *sim_cluster_build(const struct sim_setup *s, struct mu_err *err);

/* ---- one replay ---- */

enum sim_policy {
    SIM_FIFO = 0,   /* arrival order, the head blocks everyone (no backfill, no preemption) */
    SIM_BACKFILL,   /* arrival order, sched_pass (reservation + EASY backfill) */
    SIM_NODE_DRAIN, /* muster's scheduling, but a spot notice kills the node's tasks: the gang
                       restarts from its last periodic checkpoint, no pool cool-down */
    SIM_MUSTER,     /* fair share, sched_pass, preemption, gang-wide checkpoint on notice */
    SIM_NPOLICIES,
};

const char *sim_policy_name(enum sim_policy p);
/* "fifo,muster" into a bit set (1 << policy); 0 or -1 with err. */
int sim_policy_parse_list(const char *text, unsigned *set, struct mu_err *err);

/* The numbers of one replay (a plain value record). */
struct sim_stats {
    int jobs;       /* in the trace and placeable on this cluster */
    int completed;  /* ran to their end */
    int timed_out;  /* stopped at their time limit */
    int never_fit;  /* could not run even on the idle cluster (not replayed) */
    int unfinished; /* still pending or running when the replay stopped */
    double makespan_s;
    double jct_mean_s, jct_p50_s, jct_p95_s, jct_p99_s;
    double wait_mean_s, wait_p50_s, wait_p95_s, wait_p99_s; /* submit to first start */
    double bsld_mean;                                       /* bounded slowdown, 10 s bound */
    double util;            /* GPU-seconds held / GPU-seconds of nodes up, over the makespan */
    double useful_util;     /* the same with only work that counted */
    double idle_wait_gpu_h; /* free GPUs on ready nodes while jobs waited, integrated */
    double cost_usd;        /* node-hours with work x the pool's price_per_hour */
    double cost_static_usd; /* every node up for the makespan x its price */
    double lost_spot_gpu_h; /* work thrown away by spot interruptions (and restarts) */
    double lost_preempt_gpu_h;
    int interruptions; /* gangs hit by a spot notice */
    int preemptions;   /* gangs stopped for a higher-priority job */
    int spot_notices;  /* nodes interrupted */
    int passes;
    int64_t events;
};

/* A sample of the replay over time, for plots. */
struct sim_sample {
    double t_s;
    int pending;
    int running;
    double used_gpus;
};

struct sim_result;

/*
 * Replays the trace under a policy.  Returns the result (free with sim_result_free), or NULL with
 * err: no nodes, the core refused, out of memory, or (s->check) a GPU committed twice, with the
 * virtual time and node.
 */
struct sim_result *sim_run(const struct sim_setup *s,
                           const struct sim_trace *t,
                           enum sim_policy p,
                           struct mu_err *err);
void sim_result_free(struct sim_result *r);

const struct sim_stats *sim_result_stats(const struct sim_result *r);
enum sim_policy sim_result_policy(const struct sim_result *r);
/* Borrowed, in time order; valid until sim_result_free. */
int sim_result_samples(const struct sim_result *r, const struct sim_sample **out);
/* Each replayed job's start order: job indices of the trace in the order they first started. */
int sim_result_start_order(const struct sim_result *r, const int **out);
enum sim_outcome { SIM_COMPLETED = 0, SIM_TIMED_OUT, SIM_UNFINISHED, SIM_NEVER_FIT };
const char *sim_outcome_name(enum sim_outcome o); /* "completed", "timed_out", ... */
/* Job j of the trace (0..count-1): its outcome, first start and end (-1 when none). */
enum sim_outcome sim_result_job(const struct sim_result *r,
                                int j,
                                int64_t *start_s,
                                int64_t *end_s);
/* The same in ms of the replay's clock, and the capacity type (enum sched_capacity) of the first
 * start, -1 when none. */
enum sim_outcome sim_result_job_ms(
    const struct sim_result *r, int j, int64_t *start_ms, int64_t *end_ms, int *capacity);
/* The attempts job j started (more than one when it was preempted or interrupted), and in
 * *last_start_ms the start of the last of them (ms of the replay's clock, -1 when none). */
int sim_result_job_attempts(const struct sim_result *r, int j, int64_t *last_start_ms);

/* Completion times (s) of the jobs that ended, ascending. */
int sim_result_jcts(const struct sim_result *r, const double **out);

/* ---- output ---- */

/* The comparison table (one column per policy) into out; 0 or -1 with err. */
int sim_report_table(struct sim_result *const *r, int n, struct mu_buf *out, struct mu_err *err);
/* One JSON document: {"trace":{...},"policies":[{...}]}; 0 or -1 with err. */
int sim_report_json(const struct sim_trace *t,
                    struct sim_result *const *r,
                    int n,
                    struct mu_buf *out,
                    struct mu_err *err);
/* Every job under every policy as CSV (policy,line,submit_s,start_s,end_s,outcome,capacity;
 * times in seconds, with milliseconds when not whole, -1 when none; capacity of the first start,
 * spot or on-demand, empty when none) into out: per-job results, e.g. to compare with musterd's
 * own start times (bench/sim-crosscheck.sh). */
int sim_report_jobs(const struct sim_trace *t,
                    struct sim_result *const *r,
                    int n,
                    struct mu_buf *out,
                    struct mu_err *err);
/* The trace's rows that were not used, one line per reason, into out. */
int sim_report_skips(const struct sim_trace *t, struct mu_buf *out, struct mu_err *err);

/*
 * Plots for people (plot.c): writes DIR/jct.dat, DIR/timeline.dat and DIR/plots.gp, then runs
 * gnuplot on it for DIR/jct_cdf.svg (JCT CDF per policy), DIR/utilisation.svg and
 * DIR/queue.svg.  Without gnuplot on PATH the data and script are still written and *note says
 * so (a sentence for stderr; "" when the plots were drawn).  0, or -1 with err (the directory,
 * a write, gnuplot failing).
 */
int sim_plot(const char *dir,
             struct sim_result *const *r,
             int n,
             char *note,
             size_t note_size,
             struct mu_err *err);

/* ---- synthetic traces ---- */

struct sim_gen_opts {
    int jobs; /* 1..SIM_TRACE_MAX_ROWS */
    uint64_t seed;
    double jobs_per_hour; /* mean arrival rate, bursts around it */
    int gpus_per_node;    /* 1..SCHED_MAX_GPUS_NODE */
    int max_nodes;        /* largest gang, in whole nodes (1..64) */
    const char *queues;   /* "a,b": queue names to spread jobs over (borrowed) */
};

void sim_gen_defaults(struct sim_gen_opts *o);
/* A trace in muster's schema into out; 0 or -1 with err. */
int sim_gen(const struct sim_gen_opts *o, struct mu_buf *out, struct mu_err *err);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * musterd's state: one struct musterd, the single-threaded daemon's whole memory, made of the
 * layers' pieces (d_io.h, d_job.h, d_node.h).  Types only: every function lives in a layer's
 * header, so a file calls no layer above its own (scripts/layers.sh).
 */
#ifndef MUSTER_SCHEDULER_D_STATE_H
#define MUSTER_SCHEDULER_D_STATE_H

#include <signal.h>

#include "config/cfg.h"
#include "core/sched.h"
#include "scheduler/d_access.h"
#include "scheduler/d_io.h"
#include "scheduler/d_job.h"
#include "scheduler/d_node.h"
#include "scheduler/d_usage.h"

struct MHD_Daemon;
struct proto_zap;

/* A worker message that changes a job, held while Redis is down (d_loop.c). */
struct d_deferred {
    char node[PROTO_NODE_MAX];
    struct proto_msg msg; /* owns its heap arrays */
};

/* Log requests relayed to workers and not answered yet (d_logs.c). */
#define D_LOG_WAITS 64
struct d_log_wait {
    char req[QUEUE_JOB_ID_MAX]; /* the request's logreq entry id */
    char node[PROTO_NODE_MAX];  /* asked; only its LOG_DATA answers it */
    uint64_t deadline_ms;       /* mono: answered "did not answer" then */
};
struct d_logs {
    struct d_log_wait wait[D_LOG_WAITS];
    int nwait;
    uint64_t window_ms; /* mono: start of the current one-second rate window */
    int window_n;       /* requests relayed in it */
};

/* The ids of the jobs waiting for one job (d_deps.c). */
struct d_waiters {
    char (*ids)[QUEUE_JOB_ID_MAX]; /* heap, n used of cap */
    int n;
    int cap;
};

/* The leader lease (d_lease.c, issue #14; queue.h "the scheduler lease"). */
struct d_lease {
    char holder[200];                  /* "musterd@HOST ENDPOINT" */
    char token[QUEUE_LEASE_TOKEN_MAX]; /* <prefix>leader's value while this musterd leads */
    int ttl_ms;                        /* cfg.leader_lease_s */
    uint64_t renew_at_ms;              /* mono: next renewal */
    uint64_t valid_until_ms; /* mono: the lease surely holds until then (the last renewal that
                                Redis took, counted from when it was sent, + ttl_ms) */
    uint64_t term_start_ms;  /* mono: since when the key has surely been ours without a break
                                (taken, or found free and set again): workers with a witness
                                (docs/muster-worker.md) may have held their leases until then */
    int standbys;            /* standbys seen at the last renewal (a leader without any keeps
                                answering its workers through a Redis outage) */
    bool leading;            /* taken; released on a clean stop */
    bool lost;               /* another musterd took it: step down */
};

#define D_REASONS_PER_TICK 400 /* pending reasons written per 200 ms tick at most */

struct musterd {
    struct cfg cfg;
    struct queue *q;
    struct queue_intake *qi;
    void *zctx;
    void *router;
    struct proto_zap *zap; /* CURVE allow-list (ZAP) handler; NULL = CURVE off */
    struct sched_cluster *cluster;
    uint64_t epoch;            /* this run's fencing epoch (muster:epoch), taken with the lease */
    struct d_lease lease;      /* the leader lease (d_lease.c) */
    struct d_store store;      /* every write to Redis */
    struct d_sender out;       /* every message to a worker */
    struct d_archive *archive; /* the history's archiver thread (d_archive.c); NULL before */
    struct mu_map *jobs;       /* id -> struct d_job * (owned) */
    struct d_job **retired;    /* final jobs kept D_RETIRED_KEEP_MS after they were forgotten,
                                  oldest first (owned; d_job_retire): a new Redis primary may
                                  have missed their last writes */
    int nretired;
    int cap_retired;
    struct mu_map *retired_ids;   /* id -> the same jobs (borrowed); NULL until the first */
    uint64_t server_changes;      /* queue_server_changes(q) when every job was last written */
    struct mu_map *early_cancels; /* ids cancelled before their submission was read -> who
                                     asked (heap, queue_entry.owner) */
    struct mu_map *waiters;       /* id -> struct d_waiters * (owned): the jobs waiting for it
                                     (d_deps.c); an entry goes once its job ended */
    struct d_wake *woken;         /* jobs others wait for that started or ended, in order;
                                     d_deps_wake works through them */
    int nwoken;
    int cap_woken;
    struct d_job **pending;    /* PENDING jobs not held back by a running old attempt, in no
                                  order (d_pending.c) */
    struct sched_order *order; /* their fair-share order, kept across passes; NULL until one */
    bool order_stale;          /* rebuild it before the next pass */
    int npending;
    int cap_pending;
    struct sched_shapes shapes; /* the pending jobs' shapes, for a pass that stops early */
    struct d_job **late;        /* pending jobs whose reason is newer than Redis's (d_job.c) */
    int nlate;
    int cap_late;
    struct d_job **live;         /* placed or adopting jobs (d_job_live_update), in no order: what
                                    holds GPUs, so that a HELLO, a pass or a status write need not
                                    walk 100,000 pending jobs to find them */
    struct d_live_sig *live_sig; /* per live job, the nodes it has tasks on (d_live.c) */
    int nlive;
    int cap_live;
    int live_promised;    /* gangs whose start is written (d_gang_start_write), not yet committed
                             or abandoned: d->live keeps room for them */
    struct d_node *nodes; /* by cluster index */
    int nnodes;
    int cap_nodes;
    /* mono: every online node was heard at or after this (d_nodes_expire looks for a lost one
     * only once the oldest could be) */
    uint64_t nodes_heard_floor_ms;
    bool dirty;             /* something changed that may let a pending job start */
    uint64_t next_pass_ms;  /* mono: a pass is due then (something becomes true with time
                               alone: a backoff or fence wait over, a cool-down's end, a
                               victim's min_runtime_s, reasons with times in them); 0 = none */
    uint64_t next_limit_ms; /* wall: the earliest time limit of a running gang (0 = look now,
                               UINT64_MAX = none runs) */
    bool nodes_dirty;
    uint64_t next_nodes_write_ms;
    struct {                 /* the node status write's scratch (d_status.c), kept between
                                writes; cap entries each */
        struct mu_buf *jobs; /* per node: its jobs' ids, as its entry lists them */
        uint64_t *sums;      /* per changed entry: the sum of what it shows (node_sum) */
        int *changed;        /* per changed entry: its node */
        size_t *at;          /* per changed entry: where text holds it */
        struct queue_kv *kv; /* the changed entries, as written */
        struct mu_buf text;  /* the changed entries, each NUL-terminated */
        int cap;
    } status;
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
    struct {                    /* job writes in one round trip (d_batch_begin, d_job.c) */
        bool open;
        struct d_metrics before; /* what the counters were: a failed batch raised none */
        struct {
            struct d_job *job;
            uint64_t written; /* mu_hash of the reason written */
        } reasons[D_REASONS_PER_TICK];
        int nreasons;
    } batch;
    uint64_t redis_backoff_ms;
    volatile sig_atomic_t *stop;
    volatile sig_atomic_t *reload; /* SIGHUP: read config_path again (d_reload.c); NULL = never */
    const char *config_path;       /* the --config file (borrowed from argv); NULL in tests */
    struct d_metrics metrics;
    struct d_usage usage;         /* the queues' fair-share usage (d_usage.h) */
    struct access *access;        /* who may do what (d_access.h); set up before the first entry */
    struct mu_map *access_counts; /* user -> struct d_access_count (owned), d_access.c */
    bool access_pending_fresh;    /* the counts' pending jobs hold for this intake batch */
    bool access_running_on;       /* the counts' running GPUs hold for this pass (a cap is set) */
    struct d_logs logs;           /* log requests in flight and their rate (d_logs.c) */
    struct {
        struct sched_pass_job *jobs; /* scratch of d_schedule, grown as needed */
        struct sched_request *reqs;  /* requests changed for one pass (first choice only) */
        struct sched_decision *out;
        struct d_job **who;
        int cap_pending;
        struct sched_running *running;
        int cap_running;
        struct sched_share_user *users; /* by user slot, cap_users entries */
        int cap_users;
        struct sched_preempt_job *pjobs; /* cap_pending entries (d_preempt_first) */
        struct sched_victim *victims;    /* the pass's victims (d_preempt_collect), cap_victims */
        struct d_job **victim_jobs;
        int *plan_victims;
        int cap_victims;
        /* The queues' quotas as of the last pass (used, after its starts), for its preemption;
         * cfg.nqueues + 1 entries (the last: queues no longer configured, not limited). */
        struct sched_quota_queue quota[SCHED_MAX_QUEUES];
        int nvictims;                    /* entries of victims this pass (d_preempt_collect) */
        char reserved[QUEUE_JOB_ID_MAX]; /* the job given the last pass's reservation (its slots
                                            and est_start_s say where and when); "" = none */
        struct sched_request shapes[SCHED_SHAPES_MAX];        /* this pass's (sched_shapes_list) */
        struct sched_shape_left shape_left[SCHED_SHAPES_MAX]; /* what the pass has left */
        struct sched_shape_span span;
        uint32_t serial; /* of this pass, for d_job's stepped_in */
        bool sweeping;   /* passes that stop early refresh the rest's reasons, a window each */
        int sweep_at;    /* while sweeping: the index in d->pending the next window starts at */
        uint64_t sweep_due_ms; /* mono: the next sweep starts then (0 = with the next pass) */
        bool sweep_deferred;   /* the last pass started gangs and left its window to this one */
    } pass;
    struct MHD_Daemon *mhd; /* NULL without --metrics */
    /* After a restart: the nodes the last run knew (name -> d itself), until each registers
     * again or regrace_until_ms (mono) passes; meanwhile jobs go only to their first capacity
     * type, so a spot job is not put on on-demand because the spot workers are a moment late. */
    struct mu_map *expected_nodes;
    /* Node name -> struct d_wanted (heap, owned): the operator's cordon or drain, kept in
     * <prefix>node:wanted and applied whenever the node registers (issue #40). */
    struct mu_map *wanted;
    uint64_t regrace_until_ms;
    /* The imported EC2 instance topology (d_topo.c): instance id -> struct cfg_topo_instance *
     * (owned); NULL until the first load or import. */
    struct mu_map *topology;
};

#endif

/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 0: what it says to the outside world.  Everything the daemon writes to Redis
 * goes through a struct d_store and everything it sends a worker through a struct d_sender, so
 * the layers above can be driven by unit tests with a recording store and sender instead of
 * Redis and ZeroMQ (the seams are the daemon's own; the integration tests use the real ones).
 * The counters of the metrics endpoint live here too: they are raised in the same Redis round
 * trip as the job update they count.
 *
 * Layers (scripts/layers.sh checks that a file includes no header above its own layer):
 *   0 d_io.h       store, sender, counters
 *   1 d_job.h      job records and their writes; d_node.h the worker registry; d_usage.h the
 *                  queues' fair-share usage; d_state.h
 *   2 d_gang.h     a placed gang's life: start, stop, end of an attempt, release
 *   3 d_handlers.h intake, operator commands, worker reports, adoption, recovery, preemption,
 *                  time limits
 *   4 d_pass.h     the scheduling pass and its timer
 *   5 d_loop.h     the loop, the status hashes, the metrics endpoint, main
 */
#ifndef MUSTER_SCHEDULER_D_IO_H
#define MUSTER_SCHEDULER_D_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "protocol/proto.h"
#include "queue/queue.h"

/* ---- the store ---- */

/* The Redis writes musterd makes (and the two reads a dependency needs); each returns 0 or -1 with
 * err (the connection is then considered down until the loop reconnects).  ctx is the
 * implementation's. */
struct d_store_ops {
    /* queue_job_update */
    int (*job_update)(void *ctx, const struct queue_job_change *c, struct mu_err *err);
    /* queue_idem_claim */
    int (*idem_claim)(void *ctx,
                      const char *key,
                      const char *id,
                      char *owner,
                      size_t owner_size,
                      bool *won,
                      struct mu_err *err);
    /* queue_idem_get */
    int (*idem_get)(
        void *ctx, const char *key, char *id, size_t id_size, bool *found, struct mu_err *err);
    /* queue_job_state_get (reads a job's stored state: a dependency at intake or restart) */
    int (*job_state)(
        void *ctx, const char *id, struct queue_job_brief *out, bool *found, struct mu_err *err);
    /* queue_status_write */
    int (*status_write)(
        void *ctx, const char *hash, const struct queue_kv *kv, int n, struct mu_err *err);
    /* HINCRBY <prefix>counters name 1, for counters not tied to a job update */
    int (*counter_incr)(void *ctx, const char *name, struct mu_err *err);
    /* queue_log_reply: the answer to log request req_id (head line, then len bytes of data) */
    int (*log_reply)(void *ctx,
                     const char *req_id,
                     const char *head,
                     const void *data,
                     size_t len,
                     struct mu_err *err);
    /* queue_answer_push: an answer (musterctl why) on <prefix><key>, expiring */
    int (*answer_push)(
        void *ctx, const char *key, const char *value, size_t len, struct mu_err *err);
    /* queue_time_ms: Redis's clock, for the deadlines of control entries (never a host's) */
    int (*time_ms)(void *ctx, uint64_t *now_ms, struct mu_err *err);
    /* The job_updates between batch_begin and batch_end go in one round trip
     * (queue_job_update_append, queue_updates_finish): until batch_end returns 0 none of them
     * may be taken as landed, and after -1 any may or may not have.  No other write between. */
    void (*batch_begin)(void *ctx);
    int (*batch_end)(void *ctx, struct mu_err *err);
};

struct d_store {
    const struct d_store_ops *ops;
    void *ctx;       /* borrowed */
    struct queue *q; /* the real store's connection (borrowed); NULL for others */
    bool fenced;     /* a write was refused with MU_E_FENCED: another musterd leads now */
    bool batching;   /* between batch_begin and batch_end */
    int batch_sent;  /* commands appended since batch_begin */
};

/* The store over q (borrowed; it must outlive s); s is the ops' ctx.  A write Redis refuses for
 * want of the lease (MU_E_FENCED, queue_fence_set) sets s->fenced, for good. */
void d_store_redis(struct d_store *s, struct queue *q);

/* ---- the sender ---- */

/* Sends m to node; 0 or -1 with err.  Never blocks. */
typedef int d_send_fn(void *ctx, const char *node, const struct proto_msg *m, struct mu_err *err);

struct d_sender {
    d_send_fn *fn;
    void *ctx;          /* borrowed */
    uint64_t epoch;     /* this scheduler's fencing epoch, on every message */
    uint64_t seq;       /* last sequence number sent */
    bool halted;        /* the leader lease may have run out: nothing is sent (d_lease.c) */
    const bool *fenced; /* borrowed (the store's fenced), NULL = none: nothing is sent once set */
};

/* A sender over a ZeroMQ ROUTER (borrowed). */
void d_sender_router(struct d_sender *s, void *router, uint64_t epoch);
/* Stamps m (epoch, seq, sent_ms: the workers' lower bound of our clock) and sends it; a failure
 * is logged (a gone peer is normal).  Nothing is sent while s is halted or fenced: a musterd
 * that may have lost its lease says nothing to the workers.  m stays the caller's. */
void d_send(struct d_sender *s, const char *node, struct proto_msg *m);

/* ---- counters ---- */

/* Counters of the metrics endpoint, persisted in <prefix>counters (field = the name).  The
 * numbers are stored by name: append new ones before D_COUNTER_COUNT. */
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
    D_C_TIMEOUT,      /* stopped at the time limit */
    D_C_SPOT_RETURNS, /* moved from on-demand back to spot after a checkpoint */
    D_COUNTER_COUNT,
    D_C_NONE = -1 /* counts nothing */
};

#define D_PLACE_BUCKETS 10 /* placement latency histogram, plus +Inf */
#define D_PASS_BUCKETS  9  /* scheduling pass duration histogram, plus +Inf */

struct d_metrics {
    double counters[D_COUNTER_COUNT];
    double lost_gpu_seconds;
    double place_buckets[D_PLACE_BUCKETS + 1]; /* non-cumulative; the last is +Inf */
    double place_sum_s;
    double pass_sum_s;       /* scheduling passes: time spent, all told (their Redis writes too) */
    double pass_core_sum_s;  /* of that, stepping the core's pass through the queue (pass_run) */
    double pass_write_sum_s; /* of that, waiting for Redis to take the pass's writes */
    double pass_cpu_sum_s;   /* the passes' own CPU time (the rest of pass_sum_s: waiting) */
    double passes;           /* how many */
    double pass_jobs;        /* pending jobs the last pass looked at (never an array's unmade
                                elements, nor jobs waiting for dependencies) */
    double passes_stopped;   /* passes that stopped before the end of the queue (d_pass.c) */
    double pass_stopped_sum_s;               /* of pass_sum_s, the time of those */
    double pass_buckets[D_PASS_BUCKETS + 1]; /* passes by duration, non-cumulative; last +Inf */
};

/* What a job update adds to the counters. */
struct d_tally {
    int counter;       /* enum d_counter, or D_C_NONE */
    double lost_gpu_s; /* work lost by the attempt that ended */
    double place_s;    /* time the placement took (STARTING) */
};

/* Adds t (NULL: nothing) to mx and names what ev must raise in the same round trip. */
void d_counters_tally(struct d_metrics *mx, const struct d_tally *t, struct queue_event *ev);

/* Counts of a job change Redis did not take yet: raised in memory at once, in Redis with the
 * job's next whole write (d_jobs_resync).  At most the 4 increments an event carries. */
struct d_owed {
    int counter[4]; /* enum d_counter */
    int n;
    double lost_gpu_s;
};
/* Adds t to mx now and to o for later. */
void d_counters_owe(struct d_metrics *mx, struct d_owed *o, const struct d_tally *t);
/* Names what o owes in ev (to be cleared once ev's write landed). */
void d_counters_settle(const struct d_owed *o, struct queue_event *ev);
/* Raises one counter now, in memory and in Redis (for counts not tied to a job update).  A write
 * Redis refuses is logged here (rate-limited, with the counter's name), so a caller may drop the
 * result: the count stays in memory, and the next start reads Redis's. */
int d_counters_incr(struct d_metrics *mx,
                    const struct d_store *store,
                    enum d_counter c,
                    struct mu_err *err);
/* Reads the persisted counters back at start. */
int d_counters_load(struct d_metrics *mx, struct queue *q, struct mu_err *err);
/* "jobs_submitted", ...: counter c's name; the histogram's bucket i upper bound (seconds). */
const char *d_counter_name(enum d_counter c);
double d_bucket_le(int i);
/* The pass duration histogram's bucket i upper bound (seconds), and the bucket of s seconds. */
double d_pass_bucket_le(int i);
int d_pass_bucket(double s);

#endif

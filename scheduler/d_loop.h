/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 5 (see d_io.h): the loop that drives everything (d_loop.c), the status hashes
 * musterctl reads and the gauges (d_status.c), the metrics endpoint (d_metrics.c), and main.c.
 */
#ifndef MUSTER_SCHEDULER_D_LOOP_H
#define MUSTER_SCHEDULER_D_LOOP_H

#include "scheduler/d_pass.h"

#define D_ACTIVE_STATES 4 /* PENDING, STARTING, RUNNING, PREEMPTING: enum queue_state 0..3 */

/* Per-queue totals for the queues status hash (indexed like cfg.queues). */
struct d_queue_stats {
    int pending_jobs;
    int running_jobs; /* STARTING, RUNNING or PREEMPTING */
    int64_t pending_gpus;
    int64_t running_gpus;
    uint64_t oldest_pending_ms; /* wall ms of the oldest pending submission, 0 = none */
    int64_t used_gpus[2];       /* GPUs its placed gangs hold, by enum sched_capacity */
    int64_t borrowed_gpus;      /* of those, in gangs started on borrowed quota */
    int64_t lent_gpus;          /* of its idle quota, used by its cohort's borrowers */
};

/* Scrape-time gauges. */
struct d_gauges {
    double jobs[CFG_MAX_QUEUES][D_ACTIVE_STATES];
    int64_t pending_gpus[CFG_MAX_QUEUES][CFG_MAX_POOLS + 1]; /* [npools] = no pool fits */
    double gpus_free[CFG_MAX_POOLS];
    double gpus_used[CFG_MAX_POOLS];
    double nodes[CFG_MAX_POOLS];
    struct d_queue_stats queues[SCHED_MAX_QUEUES];
    /* MIG slices (issue #17), by pool and profile id: what pending slice jobs ask for (not in
     * pending_gpus; [npools] = no pool fits), and the online nodes' free and used slices. */
    int64_t pending_slices[CFG_MAX_POOLS + 1][SCHED_MAX_PROFILES + 1];
    double slices_free[CFG_MAX_POOLS][SCHED_MAX_PROFILES + 1];
    double slices_used[CFG_MAX_POOLS][SCHED_MAX_PROFILES + 1];
};

/* d_loop.c */
int d_run(struct musterd *d, struct mu_err *err);
/* How long the loop leaves the workers' socket unread after a read that held only heartbeats
 * (beats_only): 0 (it reads the next message as it arrives), or 10 ms when the nodes known could
 * send 1,000 heartbeats or more a second, no pass is due and Redis is up, so that a fleet's
 * heartbeats are taken in batches.  Another message (a BIND_ACK, a task's exit) then waits at
 * most that long, and the read that takes it ends the batching. */
int d_router_rest_ms(const struct musterd *d, bool beats_only);
void d_deferred_free(struct musterd *d);

/* d_lease.c: the leader lease (issue #14).  d_lease_wait stands by until this musterd takes
 * the lease (1; then d->epoch is its epoch, d->lease.token its token and every write through d->q
 * is fenced by it) or is asked to stop (0); -1 with err when Redis fails for good.  It answers no
 * worker meanwhile (messages on d->router are read and dropped), so workers move on to the
 * leader.  d_lease_keep renews the lease when due (or now, with force) and, while the lease may
 * have run out, halts d->out; it sets d->lease.lost when another musterd took over.
 * d_lease_release hands the lease back at a clean stop. */
int d_lease_wait(struct musterd *d, struct mu_err *err);
void d_lease_keep(struct musterd *d, uint64_t now, bool force);
void d_lease_release(struct musterd *d);

/* d_state.c: the daemon's memory, for main.c and the unit tests.  d_state_init makes what comes
 * from d->cfg alone (already loaded; d otherwise zeroed): the cluster of its pools and topology
 * levels, the job table and the early cancels.  0, or -1 with err and nothing made.  Redis,
 * ZeroMQ, d->store and d->out are the caller's. */
int d_state_init(struct musterd *d, struct mu_err *err);
/* Frees what d_state_init made and what the layers grew since (held worker messages, the pass's
 * scratch, the jobs, the nodes); NULL-safe at every step, so also right after a failed or
 * missing d_state_init. */
void d_state_release(struct musterd *d);

/* d_status.c: the status hashes (nodes, pools, queues) and the gauges behind the metrics. */
void d_status_write(struct musterd *d);
/* Every node's entry is written again at the next d_status_write (after Redis came back: a new
 * primary may lack any of them); until then only the entries that changed are. */
void d_status_rewrite(struct musterd *d);
void d_status_free(struct musterd *d); /* the write's scratch */
void d_jobs_gauges(struct musterd *d, struct d_gauges *g);

/* d_metrics.c: the Prometheus endpoint. */
int d_metrics_render(struct musterd *d, struct mu_buf *b, struct mu_err *err);
int d_metrics_start(struct musterd *d, const char *addr_port, struct mu_err *err);
int d_metrics_fd(const struct musterd *d); /* epoll fd to poll, -1 without metrics */
void d_metrics_run(struct musterd *d);
void d_metrics_stop(struct musterd *d);

/* d_archive.c: the job history's archiver (issue #47), a thread with its own Redis connection
 * (fenced by this leader's lease) and its own SQLite handle, so a slow disk or a large backlog
 * never stalls the loop.  It copies finished jobs into the history, removes them from Redis
 * keep_finished_s after they ended, and trims the submit stream.  Start once leading (it opens
 * the history file here, so a bad path fails the start with its reason); stop joins the thread
 * (NULL-safe, idempotent).  The loop never waits for it otherwise. */
int d_archive_start(struct musterd *d, struct mu_err *err);
void d_archive_stop(struct musterd *d);

#endif

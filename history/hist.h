/* SPDX-License-Identifier: MIT */
/*
 * hist: the job history (issue #47), one SQLite file with one row per job and attempt.
 *
 * musterd's archiver (scheduler/d_archive.c) copies each finished job's Redis hash here before
 * the job may leave Redis; `musterctl history` reads it.  A row is keyed by (id, attempt) and
 * written with INSERT OR REPLACE, so writing a job twice (an archiver killed between its commit
 * and its Redis bookkeeping) leaves one row.  The file is opened in WAL mode with a busy
 * timeout, so a reader never blocks the writer for long and the writer waits out a reader.
 *
 * Not thread-safe: one struct hist per thread.
 */
#ifndef MUSTER_HISTORY_HIST_H
#define MUSTER_HISTORY_HIST_H

#include <stdbool.h>
#include <stdint.h>

#include "common/mu.h"

#define HIST_NONE       INT64_MIN /* an integer field that is not known (NULL in SQL) */
#define HIST_BUSY_MS    5000      /* how long a statement waits for another connection's lock */
#define HIST_SCHEMA_VER 1         /* PRAGMA user_version of the schema this code writes */

/*
 * One row: a job's attempt.  Text fields are borrowed (from the Redis reply a row is made from,
 * or from SQLite while a query's callback runs) and may be NULL (unknown); integer fields are
 * HIST_NONE when unknown, floating ones negative.
 */
struct hist_job {
    const char *id;
    int64_t attempt;       /* 1.. (the job's last attempt) */
    const char *array_job; /* an array's element: its array's id */
    int64_t array_index;   /* an element's index */
    const char *name;
    const char *user;
    const char *queue;
    const char *pools; /* the pools its last attempt ran in, comma-separated */
    const char *nodes; /* the nodes its last attempt ran on, comma-separated */
    int64_t tasks;
    int64_t gpus_per_task;
    int64_t gpus;         /* tasks x gpus_per_task */
    int64_t submitted_ms; /* wall, ms since the epoch */
    int64_t started_ms;   /* the last attempt's start */
    int64_t ended_ms;
    int64_t waited_ms; /* started - submitted (the last attempt's start) */
    const char *state; /* SUCCEEDED, FAILED, CANCELLED, TIMEOUT, REJECTED */
    int64_t exit_code;
    const char *reason;      /* the error, or the last reason */
    double gpu_seconds;      /* GPUs x (ended - started) of the last attempt; -1 unknown */
    double lost_gpu_seconds; /* work lost by requeues and preemptions; -1 unknown */
    int64_t checkpoints;     /* checkpoints known (1 when a checkpoint is recorded) */
    int64_t preemptions;     /* not recorded by musterd yet: HIST_NONE */
    double price;            /* not known yet: -1 */
    int64_t failures;
    const char *spec;    /* the submitted spec, JSON */
    int64_t archived_ms; /* when the archiver wrote the row */
};

struct hist;

/* Opens (create: making the file and its schema when absent) the history at path, in WAL mode
 * with a busy timeout of HIST_BUSY_MS.  A file written by a newer schema is refused.  Free with
 * hist_free; NULL with err. */
struct hist *hist_open(const char *path, bool create, struct mu_err *err);
void hist_free(struct hist *h);

/* One transaction around many hist_job_put: BEGIN IMMEDIATE ... COMMIT.  After a failed
 * hist_commit (or any failure between) call hist_rollback; nothing of the batch is kept. */
int hist_begin(struct hist *h, struct mu_err *err);
int hist_commit(struct hist *h, struct mu_err *err);
void hist_rollback(struct hist *h);

/* INSERT OR REPLACE of j (keyed by id and attempt); j is borrowed for the call. */
int hist_job_put(struct hist *h, const struct hist_job *j, struct mu_err *err);

/*
 * Fills j from a job's Redis hash: n field names and values (borrowed; j points into them and
 * into id, so it is valid while they are).  id (may be NULL) is the job's id when the hash has
 * no "id" field; a hash without "state" gives state "UNKNOWN", so that no finished job is left
 * out of the history.  Derives gpus, waited_ms, gpu_seconds and the attempt.  0, or -1 when no
 * id is known.
 */
int hist_job_from_fields(struct hist_job *j,
                         const char *id,
                         const char *const *keys,
                         const char *const *values,
                         int n,
                         struct mu_err *err);

/* What `musterctl history` asks for; NULL or HIST_NONE = no condition. */
struct hist_filter {
    const char *user;
    const char *queue;
    const char *state;
    const char *name;  /* exact; a trailing '*' matches a prefix */
    const char *id;    /* the job, or an array and its elements */
    const char *array; /* an array's elements */
    int64_t since_ms;  /* ended at or after */
    int64_t until_ms;  /* ended before */
    int64_t limit;     /* rows at most, newest first; HIST_NONE or 0 = all */
};

/* Called per row, newest end first; j is valid during the call.  A non-zero return stops. */
typedef int hist_row_fn(void *ctx, const struct hist_job *j);

/* The rows matching f, newest first.  0, or -1 with err (fn's non-zero return stops with 0). */
int hist_query(
    struct hist *h, const struct hist_filter *f, hist_row_fn *fn, void *ctx, struct mu_err *err);

/* Rows in the history (for tests and the archiver's log). */
int hist_count(struct hist *h, int64_t *n, struct mu_err *err);

#endif

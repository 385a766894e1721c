/* SPDX-License-Identifier: MIT */
/*
 * The Redis vocabulary, in one place (issue #41): the names of muster's keys after the prefix,
 * the job hash's field names, the placement record's encoding and the final states.  musterd
 * writes these names and musterctl, libmuster, the history and Python read them, so each is
 * written here once and everyone else uses the name.  They are part of the contract users rely
 * on (redis-cli, dashboards): never renamed.
 *
 * The names are string macros rather than a table so that they join format strings
 * ("%s" QUEUE_K_JOB "%s") and static tables (the HMGET a restart sends, musterctl's columns)
 * at compile time: no lookups, no allocations per field.  A misspelt name fails to compile.
 * The default URL and key prefix are common/mu.h's (MU_REDIS_URL_DEFAULT,
 * MU_KEY_PREFIX_DEFAULT), since config/ needs them too.
 */
#ifndef MUSTER_QUEUE_VOCAB_H
#define MUSTER_QUEUE_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mu.h"

/* ---------------- keys: what follows the prefix ("muster:" by default) ---------------- */

#define QUEUE_K_SUBMIT       "submit"      /* stream: field spec; "submit:<user>" a user's own */
#define QUEUE_K_CONTROL      "control"     /* stream: operator commands; "control:<user>" own */
#define QUEUE_K_REPLY        "reply:"      /* + entry id: list, the verdict on one's own command */
#define QUEUE_K_WHY          "why:"        /* + entry id: list, musterd's answer to musterctl why */
#define QUEUE_K_JOB          "job:"        /* + job id: the job hash (QUEUE_F_*) */
#define QUEUE_K_JOBS         "jobs"        /* sorted set: id by submit ms, for listing */
#define QUEUE_K_EVENTS       "events"      /* stream, capped */
#define QUEUE_K_NODES        "nodes"       /* hash: node -> status JSON */
#define QUEUE_K_POOLS        "pools"       /* hash: pool -> status JSON */
#define QUEUE_K_QUEUES       "queues"      /* hash: queue -> status JSON and fair-share usage */
#define QUEUE_K_NODE_WANTED  "node:wanted" /* hash: node -> the operator's kept cordon or drain */
#define QUEUE_K_IDEM         "idem:"       /* + key, or + user ":" key: string -> job id */
#define QUEUE_K_RELOAD       "reload"      /* hash: QUEUE_R_*, the last config reload */
#define QUEUE_K_EPOCH        "epoch"       /* counter: the scheduler's fencing epoch */
#define QUEUE_K_ACTIVE       "active"      /* set: ids of jobs not yet in a final state */
#define QUEUE_K_LEADER       "leader"      /* string: "<epoch> musterd@HOST ENDPOINT", with a TTL */
#define QUEUE_K_LEADERSHIP   "leadership"  /* hash: epoch, holder, pid, since_ms of the leader */
#define QUEUE_K_STANDBYS     "standbys"    /* sorted set: musterd that tried to take the lease */
#define QUEUE_K_COUNTERS     "counters"    /* hash: counter -> value, for /metrics */
#define QUEUE_K_FINISHED     "finished"    /* sorted set: final jobs not yet in the history */
#define QUEUE_K_ARCHIVED     "archived"    /* sorted set: final jobs the history holds */
#define QUEUE_K_LOGREQ       "logreq"      /* stream: musterctl logs' requests */
#define QUEUE_K_LOGREPLY     "logreply:"   /* + request id: list, a worker's answer */
#define QUEUE_K_TOPO_SEQ     "topology:seq"     /* counter: topology import tokens */
#define QUEUE_K_TOPO_IMPORT  "topology:import:" /* + token: hash, a staged import */
#define QUEUE_K_TOPO_RESULTS "topology:results" /* hash: token -> musterd's answer */

/* ---------------- the job hash (<prefix>job:<id>) ---------------- */

/* Of its submission (written at intake). */
#define QUEUE_F_ID            "id"
#define QUEUE_F_NAME          "name"
#define QUEUE_F_QUEUE         "queue"
#define QUEUE_F_USER          "user"         /* whom it runs as, as musterd judged it */
#define QUEUE_F_SUBMITTED_BY  "submitted_by" /* the owner of the stream it came from */
#define QUEUE_F_PRIORITY      "priority"
#define QUEUE_F_TASKS         "tasks"
#define QUEUE_F_GPUS_PER_TASK "gpus_per_task"
#define QUEUE_F_MAX_RETRIES   "max_retries"
#define QUEUE_F_SUBMITTED_AT  "submitted_at" /* wall ms */
#define QUEUE_F_SPEC          "spec"         /* the submitted JSON */
/* Its state and attempts. */
#define QUEUE_F_STATE              "state" /* queue_state_name() */
#define QUEUE_F_REASON             "reason"
#define QUEUE_F_ATTEMPT            "attempt"
#define QUEUE_F_ATTEMPTS           "attempts" /* JSON */
#define QUEUE_F_FAILURES           "failures"
#define QUEUE_F_HELD               "held" /* "1" */
#define QUEUE_F_STARTED_AT         "started_at"
#define QUEUE_F_FINISHED_AT        "finished_at"
#define QUEUE_F_EXIT_CODE          "exit_code"
#define QUEUE_F_ERROR              "error"
#define QUEUE_F_LOST_GPU_SECONDS   "lost_gpu_seconds"
#define QUEUE_F_LAST_CHECKPOINT    "last_checkpoint"
#define QUEUE_F_LAST_CHECKPOINT_AT "last_checkpoint_at"
#define QUEUE_F_SPOT_RETURN        "spot_return"
/* Where its attempt runs (written at STARTING). */
#define QUEUE_F_PLACEMENT "placement" /* queue_placement_format's JSON */
#define QUEUE_F_NODES     "nodes"     /* "n1,n2" */
#define QUEUE_F_BORROWED  "borrowed"  /* "1": started on quota borrowed from its cohort */
/* Dependencies (issue #12). */
#define QUEUE_F_AFTER     "after" /* "ID:when,..." */
#define QUEUE_F_AFTER_MET "after_met"
/* An array and its elements (issue #12). */
#define QUEUE_F_ARRAY         "array" /* the spec's range text */
#define QUEUE_F_ARRAY_SIZE    "array_size"
#define QUEUE_F_ARRAY_NEXT    "array_next"
#define QUEUE_F_ARRAY_SKIP    "array_skip"
#define QUEUE_F_ARRAY_DONE    "array_done"
#define QUEUE_F_ARRAY_FAILED  "array_failed"
#define QUEUE_F_ARRAY_NOSTART "array_nostart"
#define QUEUE_F_ARRAY_JOB     "array_job"   /* an element's array */
#define QUEUE_F_ARRAY_INDEX   "array_index" /* an element's index */

/* ---------------- the reload hash (<prefix>reload) ---------------- */

/* musterd's answer to the last "reload" control command. */
#define QUEUE_R_ID     "id"     /* the control entry's id that asked */
#define QUEUE_R_RESULT "result" /* "ok ..." or why it was refused */
#define QUEUE_R_AT     "at"     /* wall ms */

/* ---------------- the events stream (<prefix>events) ---------------- */

/* One entry per move of a job (queue_job_update), capped at events_max. */
#define QUEUE_E_JOB     "job"
#define QUEUE_E_STATE   "state" /* the new state, or QUEUE_E_DUPLICATE */
#define QUEUE_E_REASON  "reason"
#define QUEUE_E_ATTEMPT "attempt"
#define QUEUE_E_AT      "at" /* wall ms */
#define QUEUE_E_ID      "id" /* not stored: the entry's id, added by the stream readers */
/* The state of an entry that drops a submission as a duplicate of an idempotency key's job. */
#define QUEUE_E_DUPLICATE "DUPLICATE"

/* ---------------- the placement record (field placement) ---------------- */

/*
 * The placement is JSON, one object per task in task order:
 * [{"task":0,"node":"n1","gpus":[0,1]}, ...], gpus as indices 0..QUEUE_PLACEMENT_GPUS-1.
 * musterd writes it at STARTING (queue_placement_format); a restarted musterd adopts from it,
 * musterctl show prints it and musterctl logs finds a task's node in it (queue_placement_each).
 */
#define QUEUE_PLACEMENT_GPUS 64 /* GPU indices are bits of a uint64_t mask */

/* Task t's node (borrowed until the next call) and GPU mask, for queue_placement_format. */
typedef void queue_placement_get_fn(void *ctx, int t, const char **node, uint64_t *gpus);
/* Appends the placement of ntasks tasks to out; -1 when out would pass its cap (err filled). */
int queue_placement_format(
    struct mu_buf *out, int ntasks, queue_placement_get_fn *get, void *ctx, struct mu_err *err);

/* Called with each task of a placement: its index (>= 0), node (borrowed for the call) and GPU
 * mask; returns 0 to go on, anything else to stop with that value. */
typedef int queue_placement_fn(void *ctx, int task, const char *node, uint64_t gpus);
struct cJSON;
/*
 * Hands fn each element of placement (a parsed JSON array, as musterctl's job objects hold it),
 * in order.  An element that is not {"task": integer >= 0, "node": string, "gpus": [indices]}
 * makes it return -1 at that point.  Returns 0 when all were handed over, or fn's non-zero.
 */
int queue_placement_each(const struct cJSON *placement, queue_placement_fn *fn, void *ctx);

/* ---------------- final states ---------------- */

/* The final states' names, space-separated ("SUCCEEDED FAILED ..."), into out (size bytes), by
 * the same table as queue_state_is_final (queue/state.c); libmuster exports the list for Python.
 * Returns the length, or -1 when it does not fit. */
int queue_final_state_names(char *out, size_t size);

#endif

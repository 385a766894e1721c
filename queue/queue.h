/* SPDX-License-Identifier: MIT */
/*
 * queue: everything muster keeps in Redis (DESIGN §6) and the job spec (DESIGN §3).
 *
 * - The job spec parser turns submitted JSON into a plain record; queue_spec_check then checks
 *   it against the cluster config (queue exists, topology level known, it can ever fit).
 * - struct queue is one Redis connection with the key prefix.  The scheduler uses the intake
 *   and job-store half; musterctl uses the client half.  All calls are synchronous; a call that
 *   fails with MU_E_REDIS has dropped the connection and the next call reconnects.
 *
 * Keys (prefix "muster:" by default):
 *   submit (stream, field spec), control (stream), job:<id> (hash), jobs (sorted set: id by
 *   submit ms, for listing), events (stream, capped), nodes (hash node -> JSON),
 *   idem:<key> (string -> job id), epoch (counter: the scheduler's fencing epoch).
 */
#ifndef MUSTER_QUEUE_QUEUE_H
#define MUSTER_QUEUE_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/mu.h"
#include "config/cfg.h"

/* ---------------- job spec (DESIGN §3) ---------------- */

#define QUEUE_SPEC_MAX_BYTES  (1u << 20) /* submitted JSON larger than this is rejected */
#define QUEUE_MAX_TASKS       4096
#define QUEUE_MAX_GPUS_TASK   64
#define QUEUE_MAX_ARGS        1024
#define QUEUE_MAX_ENV         1024
#define QUEUE_MAX_STR         (64u << 10) /* one argv/env string */
#define QUEUE_JOB_ID_MAX      48

struct queue_spec {
    char name[128];
    char queue[CFG_NAME_MAX];        /* default "default" */
    int64_t priority;                /* -1000000..1000000, default 0 */
    int tasks;                       /* 1..QUEUE_MAX_TASKS, default 1 */
    int gpus_per_task;               /* 0..QUEUE_MAX_GPUS_TASK, default 1 */
    int cpus_per_task;               /* 0 = not asked */
    int64_t memory_mb_per_task;      /* 0 = not asked */
    char gpu_type[CFG_NAME_MAX];     /* "" = any */
    int ncapacity;                   /* 1..2, in preference order */
    enum cfg_capacity capacity[2];   /* default spot, on-demand */
    char topo_required[CFG_LEVEL_MAX];  /* "" = none; a level name or "node" */
    char topo_preferred[CFG_LEVEL_MAX]; /* "" = none */
    int argc;                        /* command as argv; a string command becomes sh -c */
    char **argv;                     /* heap, NULL-terminated */
    int nenv;
    char **env;                      /* heap "KEY=VALUE" strings */
    char workdir[1024];              /* "" = the worker's state dir */
    bool checkpointable;             /* a "checkpoint" block was given */
    int checkpoint_signal;           /* default SIGUSR1 */
    int checkpoint_grace_s;          /* default 60, 0..3600 */
    bool preemptible;                /* default true */
    int64_t time_limit_s;            /* 0 = none given */
    int max_retries;                 /* default 3, 0..100 */
    char idempotency_key[256];
    char user[64];
};

/*
 * Parses and validates submitted JSON (type and range checks; unknown keys are errors).
 * On success out owns heap arrays: release with queue_spec_release.  On failure out is empty and
 * err (MU_E_SPEC) says what is wrong, with the key: "tasks: expected an integer 1..4096, got -2".
 */
int queue_spec_parse(const char *json, size_t len, struct queue_spec *out, struct mu_err *err);
void queue_spec_release(struct queue_spec *s);

/*
 * Checks a parsed spec against the cluster: the queue exists, topology levels are known, some
 * allowed pool has the GPU type and enough GPUs per node, and the gang could ever fit in the
 * allowed pools (ignoring current use).  MU_E_SPEC with a message a user can act on.
 */
int queue_spec_check(const struct queue_spec *s, const struct cfg *c, struct mu_err *err);

/* ---------------- job states (DESIGN §3) ---------------- */

enum queue_state {
    QUEUE_PENDING = 0,
    QUEUE_STARTING,
    QUEUE_RUNNING,
    QUEUE_PREEMPTING,
    QUEUE_SUCCEEDED,
    QUEUE_FAILED,
    QUEUE_CANCELLED,
    QUEUE_REJECTED,
};

const char *queue_state_name(enum queue_state s); /* "PENDING", … */
int queue_state_parse(const char *text, enum queue_state *out);
bool queue_state_is_final(enum queue_state s);

/* ---------------- Redis connection ---------------- */

struct queue_url {
    char host[256];
    int port;
    char user[128];     /* "" = none */
    char password[256]; /* "" = none */
    int db;
};

/* "redis://[user:pass@]host[:port][/db]" (also "redis://:pass@host").  Port default 6379. */
int queue_url_parse(const char *url, struct queue_url *out, struct mu_err *err);

struct queue;

/*
 * Connects (with AUTH and SELECT when the URL asks) and checks the server answers.
 * prefix: key prefix such as "muster:".  Returns a handle to free with queue_free, or NULL.
 */
struct queue *queue_new(const char *url, const char *prefix, struct mu_err *err);
void queue_free(struct queue *q);
/* Drops and re-opens the connection; used after MU_E_REDIS.  Bounded by a 2 s timeout. */
int queue_reconnect(struct queue *q, struct mu_err *err);
const char *queue_prefix(const struct queue *q);

/*
 * Runs one command built with hiredis's printf-style format; returns the reply (free it with
 * queue_reply_free) or NULL with err.  A Redis error reply is returned as MU_E_REDIS with its text.
 * The reply type is hiredis's redisReply, kept opaque here so that users of queue.h need not
 * include hiredis.
 */
void *queue_command(struct queue *q, struct mu_err *err, const char *fmt, ...);
void queue_reply_free(void *reply);

/* ---------------- client half (musterctl, libmuster) ---------------- */

/* XADD prefix+"submit" spec <json>; writes the new entry id (the job id) into id_out. */
int queue_submit(struct queue *q, const char *spec_json, char *id_out, size_t id_size,
                 struct mu_err *err);

/* XADD prefix+"control" cmd <cmd> [arg <arg>]: "cancel"+job id, "drain"+node, … */
int queue_control_send(struct queue *q, const char *cmd, const char *arg, struct mu_err *err);

#endif

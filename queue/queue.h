/* SPDX-License-Identifier: MIT */
/*
 * queue: everything muster keeps in Redis (docs/design.md §6) and the job spec (docs/design.md §3).
 *
 * - The job spec parser turns submitted JSON into a plain record; queue_spec_check then checks
 *   it against the cluster config (queue exists, topology level known, it can ever fit).
 * - struct queue is one Redis connection with the key prefix.  The scheduler uses the intake
 *   and job-store half; musterctl uses the client half.  All calls are synchronous; a call that
 *   fails with MU_E_REDIS has dropped the connection and the next call reconnects.
 *
 * The keys, the job hash's fields, the placement record and the final states are named once, in
 * queue/vocab.h (included here).
 */
#ifndef MUSTER_QUEUE_QUEUE_H
#define MUSTER_QUEUE_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/mu.h"
#include "config/cfg.h"
#include "queue/vocab.h"

/* ---------------- job spec (docs/design.md §3) ---------------- */

#define QUEUE_SPEC_MAX_BYTES (1u << 20) /* submitted JSON larger than this is rejected */
#define QUEUE_MAX_TASKS      4096
#define QUEUE_MAX_GPUS_TASK  64
#define QUEUE_MAX_ARGS       1024
#define QUEUE_MAX_ENV        1024
#define QUEUE_MAX_STR        (64u << 10) /* one argv/env string */
#define QUEUE_WORKDIR_MAX    1023        /* bytes of the spec's workdir */
#define QUEUE_JOB_ID_MAX     48
#define QUEUE_MAX_AFTER      64  /* conditions in a spec's "after" list */
#define QUEUE_KEY_MAX        256 /* an idempotency key with its NUL */

/* When a dependency is met (spec "after", issue #12). */
enum queue_when {
    QUEUE_WHEN_OK = 0, /* the job SUCCEEDED (the default) */
    QUEUE_WHEN_NOTOK,  /* it ended in any other final state */
    QUEUE_WHEN_ANY,    /* it ended */
    QUEUE_WHEN_STARTED /* it started (STARTING or later) */
};

/* "ok", "notok", "any", "started"; queue_when_parse: 0, or -1 for another word. */
const char *queue_when_name(enum queue_when w);
int queue_when_parse(const char *text, enum queue_when *out);

/* One condition of "after": a job named by id, or by its idempotency key (by_key). */
struct queue_after {
    char ref[QUEUE_KEY_MAX]; /* a job id, or an idempotency key when by_key */
    bool by_key;
    enum queue_when when;
};

/* Job arrays (spec "array", issue #12; queue/array.c). */
#define QUEUE_ARRAY_RANGES       64      /* items of an array spec ("1,3,5-7" has 3), and ranges */
#define QUEUE_ARRAY_INDEX_MAX    9999999 /* largest element index */
#define QUEUE_ARRAY_THROTTLE_MAX 1000000 /* largest "%N" */
#define QUEUE_ARRAY_COUNT_MAX    1000000 /* elements at most (the most max_array_size allows) */
#define QUEUE_ARRAY_ENV          6 /* variables musterd adds to an element's env (MUSTER_ARRAY_*) */

struct queue_array_range {
    int32_t first;
    int32_t last; /* on the step: first + k * step */
    int32_t step; /* >= 1 */
};

struct queue_array {
    char text[128]; /* as submitted, "0-99%8" */
    int nranges;    /* 1..QUEUE_ARRAY_RANGES, normalised: strictly increasing, no index twice */
    struct queue_array_range ranges[QUEUE_ARRAY_RANGES];
    int64_t count; /* elements */
    int throttle;  /* at most this many elements active at once; 0 = no limit */
    int32_t step;  /* Slurm's SLURM_ARRAY_TASK_STEP: the first ":S" written, else 1 */
};

/* Parses Slurm's --array syntax as Slurm does (issue #43): items "A", "A-B", "A-B:S" separated by
 * commas, in any order, repeated or overlapping (the set of their indices is kept, normalised),
 * empty items skipped, blanks allowed before a number; then optionally "%N", with "%0" or a
 * bare "%" meaning no limit.  MU_E_SPEC with the problem and the syntax; out is all zeroes on
 * failure.  Items of different steps that overlap are merged index by index, at most
 * QUEUE_ARRAY_COUNT_MAX of them, into at most QUEUE_ARRAY_RANGES ranges. */
int queue_array_parse(const char *text, struct queue_array *out, struct mu_err *err);
/* The index of the element at position pos (0..count-1), -1 when out of range. */
int64_t queue_array_index(const struct queue_array *a, int64_t pos);
/* The position of element index, -1 when the array has no such index. */
int64_t queue_array_position(const struct queue_array *a, int64_t index);
/* Splits an element id "<array id>_<index>" into base (size base_size) and *index; false when id
 * has no "_<index>" suffix. */
bool queue_job_id_split(const char *id, char *base, size_t base_size, int64_t *index);

struct queue_spec {
    char name[128];
    char queue[CFG_NAME_MAX];           /* default "default" */
    int64_t priority;                   /* -1000000..1000000, default 0 */
    int tasks;                          /* 1..QUEUE_MAX_TASKS, default 1 */
    int gpus_per_task;                  /* 0..QUEUE_MAX_GPUS_TASK, default 1 */
    int cpus_per_task;                  /* 0 = not asked */
    int64_t memory_mb_per_task;         /* 0 = not asked */
    char gpu_type[CFG_NAME_MAX];        /* "" = any */
    char gpu_slice[32];                 /* "" = whole GPUs; else a MIG profile ("3g.40gb"):
                                           gpus_per_task counts slices of it (issue #17) */
    int gpu_milli;                      /* 0 = whole GPUs; 1..1000: each task a share of one
                                           GPU of a shared pool (time-sliced, issue #17) */
    int ncapacity;                      /* 1..2, in preference order */
    enum cfg_capacity capacity[2];      /* default spot, on-demand */
    char topo_required[CFG_LEVEL_MAX];  /* "" = none; a level name or "node" */
    char topo_preferred[CFG_LEVEL_MAX]; /* "" = none */
    int topo_relax_after_s;             /* 0 = never; else each this long waited, required
                                           widens by one level (to none past the widest) */
    int argc;                           /* command as argv; a string command becomes sh -c */
    char **argv;                        /* heap, NULL-terminated */
    int nenv;
    char **env;             /* heap "KEY=VALUE" strings */
    char *workdir;          /* heap, at most QUEUE_WORKDIR_MAX bytes; NULL = the worker's
                               state dir (off the struct: most jobs have none, and a restart
                               holds every active job's spec, issue #15) */
    bool checkpointable;    /* a "checkpoint" block was given */
    int checkpoint_signal;  /* default SIGUSR1 */
    int checkpoint_grace_s; /* default 60, 0..3600 */
    bool preemptible;       /* default true */
    int64_t time_limit_s;   /* 0 = none given */
    int max_retries;        /* default 3, 0..100 */
    char idempotency_key[QUEUE_KEY_MAX];
    char user[64];
    int nafter;                /* 0..QUEUE_MAX_AFTER */
    struct queue_after *after; /* heap, nafter entries; NULL when none */
    bool after_or;  /* one condition met is enough (Slurm's "?"); false: all (Slurm's ",") */
    bool singleton; /* at most one job of this name and user runs at a time */
    struct queue_array *array; /* heap; NULL = not an array */
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

/* ---------------- job states (docs/design.md §3) ---------------- */

enum queue_state {
    QUEUE_PENDING = 0,
    QUEUE_STARTING,
    QUEUE_RUNNING,
    QUEUE_PREEMPTING,
    QUEUE_SUCCEEDED,
    QUEUE_FAILED,
    QUEUE_CANCELLED,
    QUEUE_REJECTED,
    QUEUE_TIMEOUT, /* stopped at its time limit (time_limit_s or default_time_limit_s) */
};
#define QUEUE_NSTATES ((int)QUEUE_TIMEOUT + 1) /* the states are 0..QUEUE_NSTATES-1 */

const char *queue_state_name(enum queue_state s); /* "PENDING", … */
int queue_state_parse(const char *text, enum queue_state *out);
bool queue_state_is_final(enum queue_state s);

/* ---------------- Redis connection ---------------- */

struct queue;

/*
 * Connects (with AUTH and SELECT when the URL asks) and checks the server answers.
 * url: parsed by mu_redis_url_parse (common/mu.h), the one grammar of every program's URL.
 * prefix: key prefix such as "muster:" (MU_KEY_PREFIX_DEFAULT).  Returns a handle to free with
 * queue_free, or NULL.
 */
struct queue *queue_new(const char *url, const char *prefix, struct mu_err *err);
void queue_free(struct queue *q);
/* Drops and re-opens the connection; used after MU_E_REDIS.  Bounded by a 2 s timeout. */
int queue_reconnect(struct queue *q, struct mu_err *err);
const char *queue_prefix(const struct queue *q);
/*
 * How many times a (re)connection of q reached another Redis server than the connection before
 * it: another address (Sentinel named a new primary) or another run_id (INFO server: a promoted
 * replica, a restarted server).  Each such change means writes the old server acknowledged may be
 * missing on this one (asynchronous replication, a restart), so a writer that must not lose them
 * writes them again (musterd: d_jobs_resync_all).  Starts at 0 with queue_new.
 */
uint64_t queue_server_changes(const struct queue *q);

/*
 * Runs one command built with hiredis's printf-style format; returns the reply (free it with
 * queue_reply_free) or NULL with err.  A Redis error reply is returned as MU_E_REDIS with its text.
 * The reply type is hiredis's redisReply, kept opaque here so that users of queue.h need not
 * include hiredis.
 */
void *queue_command(struct queue *q, struct mu_err *err, const char *fmt, ...);
void queue_reply_free(void *reply);

/* ---------------- scheduler half (musterd) ---------------- */

#define QUEUE_GROUP "muster-scheduler" /* consumer group on the submit and control streams */

enum queue_stream { QUEUE_STREAM_SUBMIT = 0, QUEUE_STREAM_CONTROL = 1, QUEUE_STREAM_LOGS = 2 };

/* ---- task logs through musterd (queue/logs.c; README "Logs from any machine") ---- */

#define QUEUE_LOG_CHUNK_MAX   (64u << 10) /* bytes of log in one answer (= PROTO_LOG_CHUNK_MAX) */
#define QUEUE_LOG_REPLY_TTL_S 30          /* an answer nobody popped expires after this */

/* One request for a chunk of a task's log (the fields of a <prefix>logreq entry). */
struct queue_log_req {
    char node[64]; /* the node whose worker ran the task */
    char job[QUEUE_JOB_ID_MAX];
    int task;        /* 0..QUEUE_MAX_TASKS-1 */
    int attempt;     /* 1.. */
    char stream[8];  /* "out" or "err" */
    uint64_t offset; /* byte offset in the log */
    int max_bytes;   /* 1..QUEUE_LOG_CHUNK_MAX (a larger max is lowered to it) */
    char error[160]; /* as read by musterd: "" = valid, else what is wrong */
};

/* One stream entry taken in by the scheduler. */
/* ---- streams of one's own (queue/owned.c, issue #46) ---- */

#define QUEUE_OWNER_MAX 64 /* a Redis user name that owns streams, NUL included */

/* The key of stream s of owner ("" or NULL = the shared one) into buf: "muster:submit:alice",
 * "muster:submit".  0, or -1 when it does not fit; never with CFG_NAME_MAX + QUEUE_OWNER_MAX + 16
 * bytes (a prefix and owner within their caps), so callers with such a buffer drop the result. */
int queue_stream_key(
    const char *prefix, enum queue_stream s, const char *owner, char *buf, size_t size);
/* The user q writes as: its URL's user, "" when it names none or "default".  Borrowed. */
const char *queue_owner(const struct queue *q);

struct queue_entry {
    char id[QUEUE_JOB_ID_MAX];
    enum queue_stream stream;
    char owner[QUEUE_OWNER_MAX]; /* the stream's user (submit:<owner>, control:<owner>); "" for
                                    the shared streams */
    char *spec;               /* submit: the spec field (heap, NUL-terminated), NULL if missing */
    size_t spec_len;          /* its length (it may hold NUL bytes) */
    char cmd[32];             /* control: cmd field */
    char arg[256];            /* control: arg field */
    int grace_s;              /* control: grace_s field (drain), -1 when absent or not a number */
    uint64_t timeout_ms;      /* control: timeout_ms field, 0 when absent (queue_control_post) */
    struct queue_log_req log; /* logs: the request, checked (log.error says what is wrong) */
};

/* Frees an entry array from queue_intake_read. */
void queue_entries_free(struct queue_entry *entries, int n);

/*
 * The scheduler's intake: its own connection that blocks in XREADGROUP on the submit and control
 * streams, driven by poll() on queue_intake_fd so the daemon's loop never blocks on Redis.
 * On creation it makes the consumer group (from the start of each stream) if missing and
 * first re-reads entries this consumer took but never acknowledged (a crash before XACK).
 */
struct queue_intake;

struct queue_intake *queue_intake_new(const char *url,
                                      const char *prefix,
                                      const char *consumer,
                                      struct mu_err *err);
void queue_intake_free(struct queue_intake *qi);
/*
 * The users whose own streams (submit:<user>, control:<user>) the intake reads besides the shared
 * ones, and makes (with the consumer group) when missing; copied.  Streams of other users found in
 * Redis (SCAN at each setup: a user since removed from the rules) are read too, so that what they
 * wrote is answered, never left unread.  Takes effect on the next read, which reconnects.
 * 0, or -1 with err (MU_E_NOMEM).
 */
int queue_intake_users(struct queue_intake *qi,
                       const char *const *users,
                       int n,
                       struct mu_err *err);
/* The socket to poll for input; -1 while disconnected (call queue_intake_read to reconnect). */
int queue_intake_fd(const struct queue_intake *qi);
/*
 * Non-blocking: reads whatever has arrived, sends the next XREADGROUP when the last one was
 * answered, and returns the entries in *out (free with queue_entries_free; NULL and 0 when
 * none).  MU_E_REDIS when the connection broke; the next call reconnects.
 */
int queue_intake_read(struct queue_intake *qi,
                      struct queue_entry **out,
                      int *n,
                      struct mu_err *err);

/*
 * Takes over entries that another consumer of the group (a scheduler that died) read but left
 * unacknowledged for min_idle_ms, on q's connection, from every stream qi reads.  They are returned
 * like queue_intake_read's (free with queue_entries_free) and are now this consumer's to
 * acknowledge.
 */
int queue_intake_claim(struct queue *q,
                       const struct queue_intake *qi,
                       const char *consumer,
                       int min_idle_ms,
                       struct queue_entry **out,
                       int *n,
                       struct mu_err *err);

/*
 * Answers log request req_id (the logreq entry id) in one round trip: RPUSH
 * <prefix>logreply:<req_id> with head (one line of JSON, no '\n'), '\n' and len bytes of data
 * (at most QUEUE_LOG_CHUNK_MAX), EXPIRE it after QUEUE_LOG_REPLY_TTL_S, XACK and XDEL the
 * request.
 */
int queue_log_reply(struct queue *q,
                    const char *req_id,
                    const char *head,
                    const void *data,
                    size_t len,
                    struct mu_err *err);

/* ---- questions to musterd with an answer (queue/answer.c; musterctl why) ---- */

#define QUEUE_ANSWER_TTL_S 30 /* an answer nobody popped expires after this */

/* RPUSH <prefix><key> value and EXPIRE it after QUEUE_ANSWER_TTL_S, in one round trip. */
int queue_answer_push(
    struct queue *q, const char *key, const char *value, size_t len, struct mu_err *err);

/* A field of the job hash. */
struct queue_kv {
    const char *key;
    const char *value; /* NULL = delete the field */
};

/* A state change for the events stream. */
struct queue_event {
    const char *state;
    const char *reason; /* may be NULL */
    int attempt;
    uint64_t at_ms;
    /* Counters (fields of <prefix>counters) raised in the same round trip, so that they stay
     * exact across restarts: each name in incr by 1 (NULL ends the list), incr_float_name by
     * incr_float (skipped when NULL). */
    const char *incr[4];
    const char *incr_float_name;
    double incr_float;
};

/* Reads the counters hash into names/values (at most max pairs; names are heap strings, free
 * each and the arrays with queue_counters_free).  *n is how many were read. */
int queue_counters_read(
    struct queue *q, char ***names, double **values, int *n, struct mu_err *err);
void queue_counters_free(char **names, double *values, int n);

/* One job update (all borrowed for the call). */
struct queue_job_change {
    const char *id;
    const struct queue_kv *fields; /* set on job:<id>; a NULL value deletes the field */
    int nfields;
    uint64_t index_ms;            /* > 0: the job's place in the jobs index */
    const struct queue_event *ev; /* NULL = no event */
    long events_max;              /* the events stream is capped near this */
    enum queue_stream ack_stream;
    const char *ack_owner; /* the stream's owner; NULL or "" = the shared stream */
    const char *ack_id;    /* NULL = no stream entry to acknowledge */
};

/*
 * One job update, pipelined and applied in this order: HSET (and HDEL of NULL values) on
 * job:<id>; ZADD jobs <index_ms> <id> when index_ms > 0; XADD events (capped near events_max)
 * when ev != NULL; SADD active for a new job, SREM active when ev is a final state; XACK of
 * ack_stream/ack_id when ack_id != NULL.  The ack comes last, so a submission is only acknowledged
 * once its job is stored (docs/design.md §6).
 */
int queue_job_update(struct queue *q, const struct queue_job_change *c, struct mu_err *err);
/* queue_job_update without waiting for Redis: its commands are appended to q's pipeline and
 * *total grows by their count.  Updates appended one after another go in one round trip, written
 * by queue_updates_finish (with the count); nothing else may use q in between.  0, or -1 with
 * err (nothing of this update appended). */
int queue_job_update_append(struct queue *q,
                            const struct queue_job_change *c,
                            int *total,
                            struct mu_err *err);
/* Sends the appended updates (sent commands, fenced as one when a fence is set) and reads every
 * reply; 0, or -1 with the first error (then any of them may or may not have landed). */
int queue_updates_finish(struct queue *q, int sent, struct mu_err *err);

/* HINCRBY counters name 1 (a metrics counter not tied to a job update). */
int queue_counter_incr(struct queue *q, const char *name, struct mu_err *err);

/* ---------------- the scheduler lease and fenced writes (issue #14, queue/lease.c) ----------
 *
 * One musterd leads: it holds the key <prefix>leader, whose value is its token
 * "<epoch> <holder>", set with NX and a TTL in Redis's own clock.  Taking it increments
 * <prefix>epoch in the same script, so each leader has a fresh fencing epoch; <prefix>leadership
 * (hash: epoch, holder, pid, since_ms) says who leads for musterctl; <prefix>standbys (sorted set)
 * who stands by.  With queue_fence_set, each
 * write this connection makes runs as one script that checks the token first: a musterd that
 * lost the lease (frozen, cut off) cannot change a single field after the next one took over.
 */
#define QUEUE_LEASE_TOKEN_MAX 320

/*
 * Tries to take the lease for holder ("musterd@HOST ENDPOINT"): *won when the key was free (and
 * take_free), or held by this same holder and take_own (the caller proved that holder dead: it
 * bound the same endpoint on the same host).  Then *epoch is the new epoch and token (size
 * QUEUE_LEASE_TOKEN_MAX) the key's value; pid goes to the leadership hash.  Otherwise token is
 * the current holder's, "" when the key was free but not taken.  Without take_free a free key is
 * left to the leader that held it (a promoted replica may lack the key its leader still renews);
 * a call whose connection reaches another server than before (queue_server_changes) leaves it
 * too, so that the caller sees the change before it takes anything there.
 */
int queue_lease_acquire(struct queue *q,
                        const char *holder,
                        long pid,
                        int ttl_ms,
                        bool take_own,
                        bool take_free,
                        uint64_t *epoch,
                        char *token,
                        size_t token_size,
                        bool *won,
                        struct mu_err *err);
/* What a renewal found: another holder took the key; it was ours; or it had expired and was set
 * again (no other leader can have written meanwhile, but anyone reading Redis saw it free). */
enum queue_lease_held { QUEUE_LEASE_LOST = 0, QUEUE_LEASE_HELD = 1, QUEUE_LEASE_TAKEN_BACK = 2 };
/* Extends the lease of token (epoch) to ttl_ms from now.  *held LOST when another holder took
 * it; a key that expired while nobody else took it (no later epoch handed out) is set again,
 * since no other leader can have written in between.  That covers a promoted replica that never
 * saw the key, or saw an older epoch: the epoch and <prefix>leadership (holder, pid) are set
 * back to this leader's.  *standbys: musterd that tried to take the lease within the last two
 * TTLs (<prefix>standbys, a sorted set each failed acquire refreshes). */
int queue_lease_renew(struct queue *q,
                      const char *token,
                      uint64_t epoch,
                      const char *holder,
                      long pid,
                      int ttl_ms,
                      enum queue_lease_held *held,
                      int *standbys,
                      struct mu_err *err);
/* The workers' witness (worker/witness.c): whether <prefix>leader is free right now, i.e. no
 * musterd leads, and else the epoch of the one that does.  Plain reads (ROLE, GET), so a
 * read-only ACL user may ask; fails (MU_E_REDIS) on a replica, whose copy may lag. */
int queue_lease_peek(struct queue *q, bool *free_now, uint64_t *epoch, struct mu_err *err);
/* Deletes the key if it still holds token (a clean stop hands over at once). */
int queue_lease_release(struct queue *q, const char *token, struct mu_err *err);
/* From now on every write made through q (job updates, status hashes, counters, answers, log
 * replies, idempotency keys) is applied only while <prefix>leader holds token, or is free while
 * <prefix>epoch is still epoch (re-set then, for ttl_ms); otherwise it fails with MU_E_FENCED and
 * nothing of it is written.  Loads the script (SCRIPT LOAD; EVALSHA, EVAL after a restart). */
int queue_fence_set(
    struct queue *q, const char *token, uint64_t epoch, int ttl_ms, struct mu_err *err);
/* Who leads, for musterctl status: a JSON object {leading (the key is held), holder, epoch, pid,
 * since_ms (of the last takeover, Redis's clock), lease_ms_left, now_ms (this host's wall
 * clock), standbys: [{holder, seen_ms (Redis's clock)}]}; holder, epoch, pid and since_ms are
 * absent before any musterd led.  Plain reads only (GET, PTTL, HGETALL, ZRANGE), so a read-only
 * ACL user may ask.  *out is the caller's (cJSON_Delete). */
struct cJSON;
int queue_leadership_read(struct queue *q, struct cJSON **out, struct mu_err *err);

/* Looks up idempotency key -> job id; *found false when absent. */
int queue_idem_get(struct queue *q,
                   const char *key,
                   char *id_out,
                   size_t id_size,
                   bool *found,
                   struct mu_err *err);
/* What a dependency needs to know of a stored job (queue_job_state_get). */
struct queue_job_brief {
    enum queue_state state;
    bool started;          /* its hash has a started_at */
    bool array;            /* an array (its hash has array_size): the counts are its elements' */
    int64_t array_done;    /* elements ended (all of them once the array is final) */
    int64_t array_failed;  /* of those, not SUCCEEDED */
    int64_t array_nostart; /* of those, ended before they ever started */
};

/* HMGET job:<id> state started_at array_size array_done array_failed array_nostart into *out:
 * *found false when the job has no hash (or no readable state). */
int queue_job_state_get(
    struct queue *q, const char *id, struct queue_job_brief *out, bool *found, struct mu_err *err);
/* SET idem:<key> <id> NX; *won false when another id holds the key (its id is in id_out). */
int queue_idem_claim(struct queue *q,
                     const char *key,
                     const char *id,
                     char *id_out,
                     size_t id_size,
                     bool *won,
                     struct mu_err *err);

/* What a restarted scheduler needs of an active job, as queue_active_each hands it over: every
 * pointer is borrowed from the Redis reply and valid during the callback only. */
struct queue_stored_job {
    const char *id;
    const char *state; /* never NULL or "" (a job without a hash is not handed over) */
    int attempt;       /* 0 if none */
    int failures;
    bool held;
    const char *spec; /* NULL if the hash has none */
    size_t spec_len;
    const char *placement;       /* JSON [{"task","node","gpus"}...]; NULL if none */
    uint64_t started_ms;         /* 0 if none */
    const char *last_checkpoint; /* "" if none */
    uint64_t last_checkpoint_ms;
    double lost_gpu_s;
    bool borrowed;     /* its attempt started on quota borrowed from its cohort */
    const char *after; /* its dependencies, "ID:when,..." (NULL if none) */
    bool after_met;    /* they were all met: it joined the queue */
    /* An array's progress (0 / NULL for other jobs): the next position to make, the indices
     * cancelled before they were made ("3,17"), elements ended, of which not succeeded, and of
     * those ended before they started. */
    int64_t array_next;
    const char *array_skip;
    int64_t array_done;
    int64_t array_failed;
    int64_t array_nostart;
    /* Who it belongs to as musterd judged it at intake (the spec may name nobody), and who wrote
     * it (the owner of the stream it came from); NULL when the hash has none. */
    const char *user;
    const char *submitted_by;
};

/* Called for each stored active job; returns 0 to go on, 1 to stop early, -1 to fail (with
 * err filled). */
typedef int (*queue_stored_job_fn)(void *ctx, const struct queue_stored_job *s, struct mu_err *err);

/*
 * Reads every job of the active set and hands each to fn, in no particular order.  The hashes
 * are read with HMGET pipelined QUEUE_LOAD_WINDOW at a time, a window ahead, so Redis answers
 * one while fn works through the other, and nothing is copied or held for all jobs at once.
 * fn must not use q (its connection carries the pipeline).  Ids whose hash is gone are dropped
 * from the set.  Returns 0 when every job was handed over, 1 when fn stopped early, -1 on a
 * Redis error or fn's failure (err filled).
 */
#define QUEUE_LOAD_WINDOW 1024
int queue_active_each(struct queue *q, queue_stored_job_fn fn, void *ctx, struct mu_err *err);

/* HSET <prefix><hash> with n name/JSON pairs: the status hashes "nodes", "pools" and "queues"
 * that musterd refreshes for musterctl and dashboards.  When kv[0].value is NULL the fields are
 * removed instead (HDEL: a queue a reload took out).  Sent QUEUE_STATUS_CHUNK pairs to a
 * command, one after the other: a fenced write runs each command from a Lua script, whose
 * unpack() takes at most about 8,000 arguments, and a smaller command keeps Redis responsive.
 * A failure leaves the chunks before it written. */
#define QUEUE_STATUS_CHUNK 1024
int queue_status_write(
    struct queue *q, const char *hash, const struct queue_kv *kv, int n, struct mu_err *err);

/* ---------------- client half (musterctl, libmuster) ---------------- */

/* The check queue_submit and queue_submit_idem run before writing anything: queue_spec_parse
 * of the text, musterd's own intake parse (what needs the cluster config is musterd's alone).
 * MU_E_SPEC with musterd's message; for callers that want it earlier (musterctl --dry-run). */
int queue_submit_check(const char *spec_json, struct mu_err *err);

/* XADD spec <json> to the writer's own submit stream (queue/owned.c), else to prefix+"submit";
 * writes the new entry id (the job id) into id_out.  queue_submit_check first: a spec musterd
 * would reject at parse fails here with its message and nothing is written. */
int queue_submit(
    struct queue *q, const char *spec_json, char *id_out, size_t id_size, struct mu_err *err);

/* The reload request is queue_control_post's ("reload", with --timeout as timeout_ms); musterd
 * answers it in prefix+"reload".  HMGET prefix+"reload" id result: the last reload's request id
 * ("SIGHUP" for a signal) and its result ("ok: …" or "refused: …"); empty strings when there has
 * been none. */
int queue_reload_result(struct queue *q,
                        char *id,
                        size_t id_size,
                        char *result,
                        size_t result_size,
                        struct mu_err *err);
/* XADD prefix+"logreq" MAXLEN ~ 1000 with r's fields (error is not sent); id_out gets the entry
 * id, which names the answer's key (queue_log_wait). */
int queue_log_request(struct queue *q,
                      const struct queue_log_req *r,
                      char *id_out,
                      size_t id_size,
                      struct mu_err *err);
/* BLPOP prefix+"logreply:"+req_id for up to block_ms (keep it under the connection's 2 s
 * timeout).  *value is the answer (heap, NUL-terminated after *len bytes; free() it), or NULL
 * when none came in time.  The answer is a JSON header line, '\n', then the chunk's bytes. */
int queue_log_wait(struct queue *q,
                   const char *req_id,
                   int block_ms,
                   char **value,
                   size_t *len,
                   struct mu_err *err);

/* BLPOP prefix+key ("why:<entry id>") for up to block_ms (under the connection's 2 s timeout).
 * *value is the answer (heap, NUL-terminated after *len bytes; free() it), NULL when none came. */
int queue_answer_wait(
    struct queue *q, const char *key, int block_ms, char **value, size_t *len, struct mu_err *err);
/*
 * musterd's verdict on control entry entry_id, sent on the writer's own stream (queue/owned.c):
 * waits on reply:<entry_id> up to timeout_ms plus a second.  0 when it was applied ({"ok":true});
 * -1 with err MU_E_STATE and musterd's sentence when it was refused ({"error": "..."}, e.g. the
 * access rule that refused it), or when no answer came (the entry carried that deadline, so
 * musterd drops it: not applied).
 */
int queue_control_verdict(struct queue *q,
                          const char *entry_id,
                          int timeout_ms,
                          struct mu_err *err);

/* ---- operator commands that are never dropped (queue/durable.c, issue #40) ---- */

/* What queue_control_post did. */
enum queue_post {
    QUEUE_POST_SENT = 0,  /* a musterd leads: the entry was added (id set) */
    QUEUE_POST_RECORDED,  /* node command, no musterd leads: only the wanted state was kept */
    QUEUE_POST_NO_LEADER, /* no musterd leads: nothing was added */
    QUEUE_POST_NO_NODE,   /* node command for a node with no record in nodes nor node:wanted */
};

/* One control request. */
struct queue_control_req {
    const char *cmd;    /* "cancel", "reload", "why", "cordon", ... */
    const char *arg;    /* job id, node, token; NULL = none */
    int grace_s;        /* drain's grace cap; -1 = none */
    int timeout_ms;     /* > 0: musterd drops the entry once Redis's clock passes its id's ms plus
                         * this (queue_control_expired); 0 = applied whenever read */
    bool node_wanted;   /* cordon/drain/uncordon: record (or clear) arg's wanted state in
                         * prefix+"node:wanted" in the same script, even when no musterd leads */
    int own_timeout_ms; /* > 0 and timeout_ms 0: the deadline the entry carries when it goes to
                         * the writer's own stream, where musterd answers it on reply:<entry id>
                         * (queue_answer_wait) and the asker waits that long */
};

/* One script: when c->node_wanted, refuses a node that has neither a status entry nor a wanted
 * state (*result QUEUE_POST_NO_NODE, nothing written), else sets the node's wanted state
 * (queue_wanted_format; uncordon deletes it); then adds the control entry only while
 * prefix+"leader" is held.  id (the entry id) is set for QUEUE_POST_SENT, "" otherwise.  -1 only
 * on a Redis error. */
int queue_control_post(struct queue *q,
                       const struct queue_control_req *c,
                       enum queue_post *result,
                       bool *own,
                       char *id,
                       size_t id_size,
                       struct mu_err *err);
/* The wanted state a node command records: "cordoned" (cordon), "draining" (drain), NULL for
 * uncordon (clears it) and anything else.  Static text. */
const char *queue_wanted_state(const char *cmd);
/* The node:wanted value {"state":"<state>"[,"grace_s":N]} into buf; 0, or -1 when it does not
 * fit. */
int queue_wanted_format(const char *state, int grace_s, char *buf, size_t size);
/* Parses a node:wanted value: state ("cordoned" or "draining") and grace_s (-1 = none).  0, or
 * -1 with MU_E_PARSE. */
int queue_wanted_parse(
    const char *value, char *state, size_t state_size, int *grace_s, struct mu_err *err);
/* TIME: Redis's clock in ms (control deadlines are Redis time, never a host's). */
int queue_time_ms(struct queue *q, uint64_t *now_ms, struct mu_err *err);
/* Whether a control entry with timeout_ms (0 = none: never) is past its deadline at Redis time
 * now_ms: the entry id's ms ("<ms>-<seq>", Redis's clock when it was added) plus timeout_ms. */
bool queue_control_expired(const char *entry_id, uint64_t timeout_ms, uint64_t now_ms);

/* ---- EC2 instance topology imports (queue/topo.c, issue #16) ----
 *
 * `musterctl topology import` stages the instances in the hash prefix+"topology:import:"+TOKEN
 * (field instance id, value the instance's JSON, cfg_topo_instance_format), sends the control
 * command "topology" with arg TOKEN and waits for musterd's answer ("ok: ..." or "refused: ...")
 * in the hash prefix+"topology:results", field TOKEN.  musterd keeps what it accepted in the hash
 * prefix+"topology" (instance id -> instance JSON) and reads it again at start.
 */

/* INCR prefix+"topology:seq": a token no other import uses, as text, into token. */
int queue_topology_token(struct queue *q, char *token, size_t size, struct mu_err *err);
/* The staging hash's name without the prefix ("topology:import:TOKEN"), into buf. */
void queue_topology_staging(const char *token, char *buf, size_t size);
/* HGET prefix+"topology:results" token into result ("" while musterd has not answered). */
int queue_topology_result(
    struct queue *q, const char *token, char *result, size_t size, struct mu_err *err);
/* Deletes the staging hash and the answer of token (best effort, errors ignored). */
void queue_topology_forget(struct queue *q, const char *token);
/* EXPIRE prefix+hash ttl_s: a staging hash outlives no crashed client for long. */
int queue_hash_expire(struct queue *q, const char *hash, int ttl_s, struct mu_err *err);

/* Called with each field of a hash and its value (len bytes, NUL-terminated, borrowed for the
 * call); returns 0 to go on or -1 with err to stop. */
typedef int (*queue_hash_fn)(
    void *ctx, const char *field, const char *value, size_t len, struct mu_err *err);
/* HGETALL prefix+hash, handing each field to fn; *count (may be NULL) gets how many there were.
 * 0, or -1 on a Redis error or fn's failure (err filled). */
int queue_hash_each(
    struct queue *q, const char *hash, queue_hash_fn fn, void *ctx, int *count, struct mu_err *err);

/*
 * Reads and the other client calls below return JSON built with cJSON (struct cJSON is cJSON's
 * own type; include <cjson/cJSON.h> to use it).  Field names are the Redis fields.  Values that
 * musterd writes as integers (priority, tasks, gpus_per_task, attempt, max_retries, *_at,
 * exit_code) become JSON numbers, placement becomes the array it holds; every other value stays
 * a string (spec is the submitted text, which may not be valid JSON for a REJECTED job).
 */
struct cJSON;

/* True if id looks like a stream entry id ("1732270000123-0"), or an array element's
 * ("1732270000123-0_7"); only such ids are looked up. */
bool queue_job_id_is_valid(const char *id);

/*
 * HGETALL prefix+"job:"+id.  *out = a JSON object (free with cJSON_Delete), or NULL when the job
 * has no hash (not an error: it may still be waiting in the submit stream).
 */
int queue_job_read(struct queue *q, const char *id, struct cJSON **out, struct mu_err *err);

/*
 * XRANGE id id of the writer's own submit stream (queue/owned.c), then of prefix+"submit".
 * *spec_out = the submitted text (free with free()), or NULL when neither holds such an entry (it
 * was never submitted, or has been trimmed).
 */
int queue_submission_read(struct queue *q, const char *id, char **spec_out, struct mu_err *err);

struct queue_jobs_filter {
    bool all;          /* false: only jobs that are not final (unless state is given) */
    const char *queue; /* NULL = any queue; borrowed */
    const char *state; /* NULL = any state; exact state name, e.g. "PENDING"; borrowed */
    size_t limit;      /* 0 = no limit; otherwise keep the `limit` newest matches */
    const char *user;  /* NULL = any user; exact "user" field; borrowed */
};

/*
 * Lists jobs from prefix+"jobs" (scanned newest first, the job hashes fetched in pipelined
 * batches) that pass the filter.  *out = a JSON array of job objects as queue_job_read builds
 * them, oldest submission first (free with cJSON_Delete).  Ids whose hash is gone are skipped.
 */
int queue_jobs_read(struct queue *q,
                    const struct queue_jobs_filter *f,
                    struct cJSON **out,
                    struct mu_err *err);

/* One job of a listing: the values of the fields the listing named, as stored. */
struct queue_job_row {
    const char *id;            /* the id in the jobs index */
    const char *const *values; /* values[i] for fields[i]; NULL where the hash has no such field */
};

/* A listing's rows, oldest submission first; owned (queue_job_rows_release). */
struct queue_job_rows {
    struct queue_job_row **rows;
    size_t n;
};

/*
 * queue_jobs_read for tables: the same jobs in the same order, each as the values of nfields
 * (at most 32) named hash fields, read with pipelined HMGETs and no JSON.  Numbers come as
 * Redis holds them (decimal text).  *out is empty on failure.
 */
int queue_job_rows_read(struct queue *q,
                        const struct queue_jobs_filter *f,
                        const char *const *fields,
                        size_t nfields,
                        struct queue_job_rows *out,
                        struct mu_err *err);
void queue_job_rows_release(struct queue_job_rows *rows);

/*
 * HGET prefix+"nodes" name.  *out = the node's status object (cJSON_Delete), or NULL when no such
 * node is registered.  A value that is not a JSON object is MU_E_PARSE.
 */
int queue_node_read(struct queue *q, const char *name, struct cJSON **out, struct mu_err *err);

/*
 * HGETALL prefix+"nodes".  *out = a JSON array of node objects sorted by name (cJSON_Delete).
 * A value that does not parse becomes {"name": <field>, "error": "..."} so one bad entry does
 * not hide the others.
 */
int queue_nodes_read(struct queue *q, struct cJSON **out, struct mu_err *err);

/*
 * The newest `count` entries of prefix+"events" (only those whose job field equals `job` when
 * job is not NULL), oldest first.  *out = a JSON array of objects with the entry's fields plus
 * "id" (the entry id); attempt and at are numbers.  last_id receives the stream's newest entry
 * id ("0-0" when it is empty), the place to follow from with queue_events_wait.
 */
int queue_events_read(struct queue *q,
                      const char *job,
                      size_t count,
                      struct cJSON **out,
                      char *last_id,
                      size_t last_id_size,
                      struct mu_err *err);

/*
 * XREAD BLOCK block_ms (keep it under the connection's 2 s timeout) for entries after last_id.
 * *out = a JSON array, empty when nothing arrived (cJSON_Delete); last_id advances past every
 * entry read, matching `job` or not.
 */
int queue_events_wait(struct queue *q,
                      const char *job,
                      int block_ms,
                      char *last_id,
                      size_t last_id_size,
                      struct cJSON **out,
                      struct mu_err *err);

/*
 * Submits spec_json under an idempotency key, atomically (one Lua EVAL): when
 * prefix+"idem:"+key holds a job id, that id is returned and nothing is added; otherwise the spec
 * is XADDed to the submit stream and the key is SET NX to the new id.  On the writer's own
 * stream (queue/owned.c) the key is prefix+"idem:"+user+":"+key, so that users' keys never meet.
 * musterd's own claim of the key on intake then finds its own id there.  *created (may be NULL)
 * says whether a new job was submitted.  The key must be 1..255 printable ASCII characters (as in
 * the spec).  spec_json, the exact text written, passes queue_submit_check first.
 */
int queue_submit_idem(struct queue *q,
                      const char *spec_json,
                      const char *key,
                      char *id_out,
                      size_t id_size,
                      bool *created,
                      struct mu_err *err);

/* The Lua source of queue_submit_idem (KEYS[1] the submit stream, KEYS[2] the idem key,
 * ARGV[1] the spec; returns {id, 1 created | 0 existing}, or {"nostream"} when the stream does
 * not exist: it adds with NOMKSTREAM), for other clients. */
extern const char queue_submit_idem_lua[];

/*
 * HGETALL prefix+hash for the status hashes musterd refreshes ("nodes", "pools", "queues"):
 * *out = a JSON array of the objects sorted by name (cJSON_Delete).  A value that does not parse
 * becomes {"name": <field>, "error": "..."}.
 */
int queue_status_read(struct queue *q, const char *hash, struct cJSON **out, struct mu_err *err);

/* ---------------- the job history's Redis half (issue #47, queue/archive.c) ----------------
 *
 * A job's final write also adds it to the sorted set <prefix>finished (score: the event's ms),
 * in the same round trip (queue_job_update).  musterd's archiver copies those jobs into the
 * history, then moves them to <prefix>archived (plain jobs and arrays, by end ms) or to
 * <prefix>archived:<array id> (an array's elements, which leave Redis with their array), and
 * removes what is archived once it is older than keep_finished_s.  Writes go through q's fence.
 */

/* Called with a finished job's id and its hash (n fields, borrowed for the call; n == 0 when the
 * hash is gone).  0 goes on; -1 stops with err. */
typedef int queue_archive_fn(void *ctx,
                             const char *id,
                             const char *const *keys,
                             const char *const *values,
                             int n,
                             struct mu_err *err);
/* Hands fn the first max jobs of <prefix>finished, oldest end first; *seen: how many. */
int queue_finished_each(
    struct queue *q, int max, queue_archive_fn *fn, void *ctx, int *seen, struct mu_err *err);
/* Once their rows are committed: moves the n ids (with their end ms) out of finished. */
int queue_finished_done(
    struct queue *q, const char *const *ids, const uint64_t *ended_ms, int n, struct mu_err *err);
/* Removes up to max archived jobs that ended before before_ms (hash, <prefix>jobs entry, its
 * submit stream entry if still there; an array with its archived elements).  *removed: job
 * hashes deleted. */
int queue_archived_expire(
    struct queue *q, uint64_t before_ms, int max, int *removed, struct mu_err *err);
/* XTRIM <prefix>submit MINID: drops the entries the group acknowledged (their jobs are stored;
 * an entry read but not acknowledged, or not read yet, stays) whose ids are below before_ms
 * (entry ids are ms).  *trimmed: entries dropped. */
int queue_submit_trim(struct queue *q, uint64_t before_ms, long long *trimmed, struct mu_err *err);

/* How long an idempotency key (<prefix>idem:<key>) is kept after the submission that set it:
 * 7 days.  A retry with the same key within this window finds the job; after it, it makes a new
 * one (README "Redis keys"; lib/muster.h; python/muster.py). */
#define QUEUE_IDEM_TTL_S 604800

#endif

/* SPDX-License-Identifier: MIT */
/*
 * libmuster: the client library for training pipelines (issue #6).  The one public header.
 *
 * A pipeline connects to the Redis that musterd uses, submits gang jobs (a JSON spec or the
 * builder below), waits for them, cancels them, lists them and follows the events stream.
 * libmuster never changes a job itself: it appends to the submit and control streams and reads
 * what musterd stored (README "Redis keys"), exactly like musterctl.
 *
 * Conventions (all functions):
 * - Handles are opaque; each has one free function, and free(NULL) does nothing.
 * - A fallible call returns 0 (or a pointer) on success and -1 (or NULL) on failure, filling the
 *   struct muster_error *err given last (NULL is allowed: no message then).  Results that are not
 *   failures ("no such job", "timed out") are return values, not errors.
 * - On failure, nothing changed and every argument is still the caller's.
 * - const pointer parameters are borrowed for the duration of the call.
 * - A struct muster and everything made from it belong to one thread at a time.  Use one
 *   connection per thread.  Calls block for at most a few seconds on the network (2 s per Redis
 *   round trip) unless they take a timeout.
 *
 * Link: pkg-config --cflags --libs muster (or find_package(muster) and muster::muster in CMake).
 */
#ifndef MUSTER_LIB_MUSTER_H
#define MUSTER_LIB_MUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUSTER_VERSION_MAJOR 0
#define MUSTER_VERSION_MINOR 1
#define MUSTER_VERSION_PATCH 0
#define MUSTER_VERSION       "0.1.0"

/* The library's version string ("0.1.0"); static storage.  Compare with MUSTER_VERSION to detect
 * a header/library mismatch. */
const char *muster_version(void);

/* ---------------- errors ---------------- */

/* Error codes; the numbers never change (they match musterd's internal codes). */
enum muster_code {
    MUSTER_OK = 0,
    MUSTER_E_INVAL = 1,    /* a bad argument (malformed job id, empty key, …) */
    MUSTER_E_NOMEM = 2,    /* out of memory */
    MUSTER_E_IO = 3,       /* i/o error */
    MUSTER_E_PARSE = 4,    /* text that should be JSON is not */
    MUSTER_E_RANGE = 5,    /* a value out of range */
    MUSTER_E_NOTFOUND = 6, /* no such job */
    MUSTER_E_REDIS = 7,    /* Redis unreachable, AUTH refused, or an error reply */
    MUSTER_E_SPEC = 12,    /* the spec cannot be submitted as given */
    MUSTER_E_TOOBIG = 13,  /* larger than a buffer or a cap */
    MUSTER_E_STATE = 15,   /* the job is not in a state that allows this */
};

/* A failure: a code and a message that names the problem first, e.g.
 * "redis 127.0.0.1:6390: Connection refused". */
struct muster_error {
    int code;          /* enum muster_code */
    char message[256]; /* NUL-terminated, lower-case, no final period */
};

/* "MUSTER_E_REDIS", …; "unknown" for other values.  Static storage. */
const char *muster_code_name(int code);

/* The names of the final states, space-separated ("SUCCEEDED FAILED CANCELLED REJECTED
 * TIMEOUT"), into buf (size bytes, NUL-terminated): the scheduler's own list, which the Python
 * module reads rather than keeping a copy.  Returns the length, or -1 when size is too small. */
int muster_final_states(char *buf, size_t size);

/* Frees a string that libmuster returned (muster_spec_json, muster_job_json).  NULL is fine. */
void muster_free(void *p);

/* ---------------- connection ---------------- */

struct muster;

/*
 * Connects to Redis and checks that it answers.
 * url: "redis://[user:password@]host[:port][/db]" ("redis://:password@host" for a password
 *      alone), or "redis+sentinel://[user:password@]host[:port][,host[:port]...]/master[/db]"
 *      (the Sentinels, port 26379 by default, name the primary, asked again after each lost
 *      connection); NULL = the environment's MUSTER_REDIS_URL, else "redis://127.0.0.1:6379".
 *      AUTH (with a user name for Redis 6 ACLs) and SELECT are sent when the URL asks.
 * prefix: the key prefix musterd is configured with; NULL = "muster:".
 * Returns a handle to close with muster_close, or NULL with err (MUSTER_E_REDIS when Redis is
 * unreachable or refuses AUTH, MUSTER_E_INVAL for a malformed URL).  After a connection drops,
 * the next call reconnects by itself.
 */
struct muster *muster_connect(const char *url, const char *prefix, struct muster_error *err);
/* Closes the connection and frees m.  Handles made from m must be freed first. */
void muster_close(struct muster *m);

/* ---------------- submitting ---------------- */

#define MUSTER_ID_MAX 48 /* a job id with its NUL ("1732270000123-0") always fits */

/*
 * Submits a job spec (JSON text, README "The job spec") and writes the job id into id_out
 * (id_size bytes; MUSTER_ID_MAX is enough).  The spec is first parsed by musterd's own parser:
 * a spec musterd would reject for its content (not JSON, an unknown key, a bad value, a reversed
 * array range, a singleton without a name) fails with MUSTER_E_SPEC and musterd's message, and
 * nothing is written.  What needs the cluster config (queue, pools, topology levels, access)
 * musterd checks: such a spec still gets an id and ends REJECTED with an `error` (see
 * muster_job_wait).
 * When the spec holds an "idempotency_key", this is muster_submit_idempotent with that key.
 * created (may be NULL): true when this call made a new job, false when the idempotency key
 * already named one (whose id is written to id_out).
 */
int muster_submit(struct muster *m,
                  const char *spec_json,
                  char *id_out,
                  size_t id_size,
                  bool *created,
                  struct muster_error *err);

/*
 * Submits spec_json (a JSON object) with "idempotency_key": key.  The same key twice gives one
 * job and the same id, also when two processes race: a Lua script on the Redis server reads
 * <prefix>idem:<key>, and only when it is absent appends the submission and sets the key to the
 * new id, atomically.  The key is kept 7 days (QUEUE_IDEM_TTL_S, README "Redis keys"): a
 * retry within that window finds the job, a later one makes a new job.  key: 1..255 printable
 * ASCII characters.  MUSTER_E_PARSE when spec_json
 * is not a JSON object, MUSTER_E_SPEC when it already holds a different idempotency_key or when
 * the text written (with the key) fails musterd's parse, as for muster_submit.
 */
int muster_submit_idempotent(struct muster *m,
                             const char *spec_json,
                             const char *key,
                             char *id_out,
                             size_t id_size,
                             bool *created,
                             struct muster_error *err);

/* ---------------- the spec builder ---------------- */

/*
 * Builds a spec without writing JSON by hand.  Setters copy their arguments.  Each setter
 * returns 0, or -1 when its argument is unusable (NULL, empty, out of the spec's range) or memory
 * runs out; the first such failure is also kept, and muster_spec_json / muster_spec_submit then
 * fail with its message, so a chain of setters may be checked once at the end.  Values are
 * range-checked here as musterd checks them; whether a queue or topology level exists is only
 * known to musterd (the job is REJECTED otherwise).
 */
struct muster_spec;

/* An empty spec (musterd's defaults apply to everything unset); NULL when out of memory.
 * Free with muster_spec_free. */
struct muster_spec *muster_spec_new(void);
void muster_spec_free(struct muster_spec *s);

int muster_spec_set_name(struct muster_spec *s, const char *name);
int muster_spec_set_queue(struct muster_spec *s, const char *queue);
int muster_spec_set_user(struct muster_spec *s, const char *user);
int muster_spec_set_priority(struct muster_spec *s, int64_t priority); /* -1000000..1000000 */
int muster_spec_set_tasks(struct muster_spec *s, int tasks);           /* 1..4096 */
int muster_spec_set_gpus_per_task(struct muster_spec *s, int gpus);    /* 0..64 */
int muster_spec_set_cpus_per_task(struct muster_spec *s, int cpus);    /* 0..4096 */
int muster_spec_set_memory_mb_per_task(struct muster_spec *s, int64_t memory_mb); /* 0..16 Ti */
int muster_spec_set_gpu_type(struct muster_spec *s, const char *gpu_type);
/* MIG slices (a profile such as "3g.40gb"): gpus_per_task then counts slices of it. */
int muster_spec_set_gpu_slice(struct muster_spec *s, const char *profile);
int muster_spec_set_workdir(struct muster_spec *s, const char *absolute_path);
/* The command as an argv (argc >= 1, no NULL entries); replaces an earlier command. */
int muster_spec_set_command(struct muster_spec *s, int argc, const char *const *argv);
/* The command as one string that the task runs with /bin/sh -c. */
int muster_spec_set_shell_command(struct muster_spec *s, const char *command_line);
/* Adds (or replaces) one environment variable; names starting MUSTER_ are reserved. */
int muster_spec_set_env(struct muster_spec *s, const char *name, const char *value);
/* Capacity types in preference order: n = 1 or 2 of "spot", "on-demand". */
int muster_spec_set_capacity(struct muster_spec *s, int n, const char *const *types);
/* Topology: required and preferred level names ("zone", "rack", "node", …); either may be NULL,
 * not both. */
int muster_spec_set_topology(struct muster_spec *s, const char *required, const char *preferred);
/* Wait, then relax: after relax_after_s (1..604800) pending, the required level widens by one,
 * and again after each relax_after_s more.  Call after muster_spec_set_topology with a required
 * level (setting the topology again drops it). */
int muster_spec_set_topology_relax(struct muster_spec *s, int relax_after_s);
/* Checkpointable: signal ("SIGUSR1", …; NULL = SIGUSR1) and grace_s 0..3600. */
int muster_spec_set_checkpoint(struct muster_spec *s, const char *signal, int grace_s);
int muster_spec_set_preemptible(struct muster_spec *s, bool preemptible);
int muster_spec_set_time_limit_s(struct muster_spec *s, int64_t time_limit_s); /* 1..31536000 */
int muster_spec_set_max_retries(struct muster_spec *s, int max_retries);       /* 0..100 */
/* 1..255 printable ASCII characters; muster_spec_submit is then idempotent. */
int muster_spec_set_idempotency_key(struct muster_spec *s, const char *key);
/* Dependencies (README "Pipelines"): start only once job_id (a job id, an array's or one
 * element's "<array id>_<index>") has met when: "ok" (succeeded; NULL means "ok"), "notok",
 * "any" or "started" (started, or ended before it could: Slurm's "after").  The _key form names the
 * job by its idempotency key, so a pipeline can submit every step at once.  Repeatable, up to 64
 * conditions. */
int muster_spec_add_after(struct muster_spec *s, const char *job_id, const char *when);
int muster_spec_add_after_key(struct muster_spec *s, const char *idempotency_key, const char *when);
/* any_one true: one condition met is enough (spec "after_or", Slurm's "?"); false (the
 * default): every condition must be met (Slurm's ","). */
int muster_spec_set_after_or(struct muster_spec *s, bool any_one);
/* Run only when no other job of the same name and user is active (needs a name). */
int muster_spec_set_singleton(struct muster_spec *s, bool singleton);
/* A job array (README "Job arrays"): one gang per index, Slurm's syntax ("0-99", "1,3,5-7",
 * "0-999:10", "%N" for at most N at once, "%0" no limit; items in any order, as Slurm takes
 * them); each task sees MUSTER_ARRAY_JOB_ID, MUSTER_ARRAY_INDEX and the array's
 * MUSTER_ARRAY_COUNT, _MIN, _MAX and _STEP. */
int muster_spec_set_array(struct muster_spec *s, const char *indices);

/*
 * The spec as compact JSON (free with muster_free), or NULL with err: the first setter failure
 * (MUSTER_E_SPEC, or MUSTER_E_NOMEM), or MUSTER_E_SPEC when no command was set.
 */
char *muster_spec_json(const struct muster_spec *s, struct muster_error *err);

/* muster_submit of muster_spec_json(s): idempotent when a key was set.  s stays the caller's. */
int muster_spec_submit(struct muster *m,
                       const struct muster_spec *s,
                       char *id_out,
                       size_t id_size,
                       bool *created,
                       struct muster_error *err);

/* ---------------- jobs ---------------- */

enum muster_state {
    MUSTER_STATE_UNKNOWN = -1, /* a state this library version does not know */
    MUSTER_STATE_PENDING = 0,
    MUSTER_STATE_STARTING,
    MUSTER_STATE_RUNNING,
    MUSTER_STATE_PREEMPTING,
    MUSTER_STATE_SUCCEEDED,
    MUSTER_STATE_FAILED,
    MUSTER_STATE_CANCELLED,
    MUSTER_STATE_REJECTED,
    MUSTER_STATE_TIMEOUT, /* stopped at its time limit */
};

/* "PENDING", …, "UNKNOWN"; static storage. */
const char *muster_state_name(enum muster_state state);
/* True for SUCCEEDED, FAILED, CANCELLED, REJECTED and TIMEOUT. */
bool muster_state_is_final(enum muster_state state);

/* A snapshot of one job as musterd stored it (the hash <prefix>job:<id>). */
struct muster_job;

/*
 * Reads job id.  *out = a snapshot to free with muster_job_free, or NULL when there is no such
 * job yet (not an error: a submission waits in the stream until musterd takes it in, normally
 * within milliseconds).  MUSTER_E_INVAL for a string that is not a job id.
 */
int muster_job_get(struct muster *m,
                   const char *id,
                   struct muster_job **out,
                   struct muster_error *err);

/*
 * Waits until job id reaches a final state, following <prefix>events (blocking reads of at most
 * 1 s, re-reading the job when an event names it and at least once a second).
 * timeout_ms: < 0 waits for ever, 0 checks once.
 * Returns 0 with *out = the final snapshot; 1 when the time ran out, with *out = the latest
 * snapshot (NULL if musterd has not taken the job in); -1 with err (*out NULL), e.g.
 * MUSTER_E_STATE when musterd dropped the submission as a duplicate of another job.
 * Free *out with muster_job_free.
 */
int muster_job_wait(struct muster *m,
                    const char *id,
                    int timeout_ms,
                    struct muster_job **out,
                    struct muster_error *err);

/*
 * Asks musterd to cancel job id (a cancel entry on the control stream, added only while a musterd
 * leads: MUSTER_E_STATE when none does); returns once the request is queued, not when the job
 * has stopped (wait for CANCELLED with muster_job_wait).  With proven identity (the URL names a
 * Redis user that has its own control stream, docs/security.md) it also waits up to 10 s for
 * musterd's verdict: MUSTER_E_STATE with the rule when the user may not cancel that job.
 * A job already final stays as it is.  MUSTER_E_NOTFOUND when neither the job nor its submission
 * exists, MUSTER_E_INVAL for a malformed id.
 */
int muster_job_cancel(struct muster *m, const char *id, struct muster_error *err);

void muster_job_free(struct muster_job *job);

/* Accessors.  Strings are borrowed: valid until muster_job_free (or the list's free); "" when
 * musterd has not written the field. */
const char *muster_job_id(const struct muster_job *job);
const char *muster_job_name(const struct muster_job *job);
const char *muster_job_queue(const struct muster_job *job);
const char *muster_job_user(const struct muster_job *job);
const char *muster_job_state_name(const struct muster_job *job); /* as stored, "RUNNING" */
enum muster_state muster_job_state(const struct muster_job *job);
bool muster_job_is_final(const struct muster_job *job);
int muster_job_attempt(const struct muster_job *job); /* 1 for the first run; 0 when unknown */
int muster_job_tasks(const struct muster_job *job);
int muster_job_gpus_per_task(const struct muster_job *job);
int64_t muster_job_priority(const struct muster_job *job);
/* The exit status that ended the job; false (and *exit_code untouched) while it has none. */
bool muster_job_exit_code(const struct muster_job *job, int *exit_code);
const char *muster_job_error(const struct muster_job *job);  /* why it FAILED or was REJECTED */
const char *muster_job_reason(const struct muster_job *job); /* why it is PENDING */
const char *muster_job_nodes(const struct muster_job *job);  /* the nodes it runs on, as stored */
/* Wall-clock milliseconds since the Unix epoch; 0 when not (yet) set. */
int64_t muster_job_submitted_at_ms(const struct muster_job *job);
int64_t muster_job_started_at_ms(const struct muster_job *job);
int64_t muster_job_finished_at_ms(const struct muster_job *job);
/* Any field of the job hash as text (numbers formatted in decimal), or NULL when absent; the
 * string is borrowed like the others. */
const char *muster_job_field(const struct muster_job *job, const char *name);
/* The whole record as a JSON object (field names are the Redis fields; numbers as numbers);
 * free with muster_free.  NULL when out of memory. */
char *muster_job_json(const struct muster_job *job);

/* ---------------- listing ---------------- */

/* Which jobs muster_jobs_list returns; a plain record, zero-initialised = every active job. */
struct muster_filter {
    bool all;          /* false: only jobs not final (unless state is set) */
    const char *queue; /* NULL = any queue; borrowed */
    const char *state; /* NULL = any; an exact state name such as "PENDING"; borrowed */
    size_t limit;      /* 0 = no limit; else the `limit` newest matches */
};

struct muster_job_list;

/*
 * Lists jobs, oldest submission first.  filter NULL = every active job.  *out: free with
 * muster_job_list_free.
 */
int muster_jobs_list(struct muster *m,
                     const struct muster_filter *filter,
                     struct muster_job_list **out,
                     struct muster_error *err);
size_t muster_job_list_count(const struct muster_job_list *list);
/* The i-th job (i < count), borrowed until muster_job_list_free; NULL when i is out of range. */
const struct muster_job *muster_job_list_at(const struct muster_job_list *list, size_t i);
void muster_job_list_free(struct muster_job_list *list);

/* ---------------- events ---------------- */

/* One state change from <prefix>events; a plain record the caller owns. */
struct muster_event {
    char id[MUSTER_ID_MAX];  /* the stream entry id */
    char job[MUSTER_ID_MAX]; /* the job it is about */
    char state[32];          /* the new state ("RUNNING"; "DUPLICATE" for a dropped duplicate) */
    char reason[512];        /* why, may be empty; truncated to fit */
    int attempt;
    int64_t at_ms; /* wall-clock milliseconds since the Unix epoch */
};

struct muster_events;

/*
 * Starts following the events stream, from now on (from_start false) or from its oldest retained
 * entry (true).  job: only events of this job; NULL = all.  The follower uses m's connection:
 * m must outlive it, and m blocks while muster_events_next waits.  Free with muster_events_free.
 */
struct muster_events *muster_events_follow(struct muster *m,
                                           const char *job,
                                           bool from_start,
                                           struct muster_error *err);
/*
 * The next event, waiting up to timeout_ms (< 0: for ever; 0: only what has arrived).
 * Returns 1 with *out filled, 0 when the time ran out, -1 with err.
 */
int muster_events_next(struct muster_events *ev,
                       int timeout_ms,
                       struct muster_event *out,
                       struct muster_error *err);
void muster_events_free(struct muster_events *ev);

#ifdef __cplusplus
}
#endif

#endif

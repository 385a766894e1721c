/* SPDX-License-Identifier: MIT */
/*
 * What the daemon's unit tests (tests/unit/test_daemon*.c) share: a recording store and a
 * recording sender in the daemon's own seams (struct d_store, struct d_sender in
 * scheduler/d_io.h), and a fixture that builds a struct musterd the way musterd's setup does
 * (config, cluster, job tables through d_state_init) with those two in place of Redis and
 * ZeroMQ.  The store is no model of Redis: it keeps what the daemon wrote (each job hash's last
 * field values, each job's events in order, the stream entries acknowledged, the counters) and
 * can be told to fail every write, as Redis does when it is down.  Built once as the static
 * library d_test_support (tests/CMakeLists.txt) and linked into each test_daemon* executable.
 *
 * Every helper that takes a struct dfix fails the running cmocka test (assert_*, fail_msg)
 * rather than return an error, so it may only be called from inside a test.  Nothing here reads
 * a clock or sleeps: times the daemon takes as parameters are the tests' to choose.
 */
#ifndef MUSTER_TESTS_D_FAKE_H
#define MUSTER_TESTS_D_FAKE_H

#include <signal.h>
#include <stdbool.h>

#include "scheduler/d_loop.h"
#include "scheduler/d_state.h"

/* ---- the recording store ---- */

struct fake_store;

/* One event the daemon wrote for a job (the "events" stream entry, as musterctl events shows). */
struct fake_event {
    const char *state;  /* a state name ("STARTING") or another event ("CHECKPOINT", "STOPPING") */
    const char *reason; /* "" when none */
    int attempt;
};

/* An empty store (heap; free with fake_store_free) whose ops go into *out. */
struct fake_store *fake_store_new(struct d_store *out);
void fake_store_free(struct fake_store *s);
/* fail: every later write returns -1 (MU_E_REDIS) and changes nothing, until set back to false
 * (which also ends a fake_store_fail_next). */
void fake_store_fail(struct fake_store *s, bool fail);
/* The next n writes fail, the later ones land: Redis dropping a connection the next call opens
 * again. */
void fake_store_fail_next(struct fake_store *s, int n);
/* Redis's clock (TIME, for control deadlines) reads now_ms from now on (0 before). */
void fake_store_set_time(struct fake_store *s, uint64_t now_ms);
/* The next batch's end fails (its writes were kept, as some of a pipeline may land), once. */
void fake_store_fail_batch(struct fake_store *s);
/* The job hash's field as last written; NULL when never written or deleted.  Borrowed until the
 * next write. */
const char *fake_field(const struct fake_store *s, const char *id, const char *key);
/* How many events were written for id. */
int fake_event_count(const struct fake_store *s, const char *id);
/* id's event i, oldest first (i < 0 counts from the newest: -1 is the newest); NULL when there
 * is no such event.  Borrowed until the store is freed. */
const struct fake_event *fake_event_get(const struct fake_store *s, const char *id, int i);
/* True when the stream entry was acknowledged (in the same write as a job's, or on its own). */
bool fake_acked(const struct fake_store *s, enum queue_stream stream, const char *entry_id);
/* A counter of <prefix>counters as the writes raised it (0 when never raised). */
double fake_counter(const struct fake_store *s, const char *name);
/* A status hash's field ("nodes", "n1") as last written, NULL when never; borrowed. */
const char *fake_status(const struct fake_store *s, const char *hash, const char *field);

/* ---- the recording sender ---- */

struct fake_sender;

/* What the daemon sent one worker. */
struct fake_msg {
    char node[PROTO_NODE_MAX]; /* the destination */
    enum proto_type type;
    char job[PROTO_JOB_MAX];
    int task;
    int attempt;
    int signal;       /* CHECKPOINT: the job's checkpoint signal; KILL: 0 = SIGTERM */
    int grace_s;      /* CHECKPOINT, KILL */
    bool ok;          /* HEARTBEAT: the node is registered */
    int answer_every; /* HEARTBEAT: one of the node's heartbeats in this many is answered */
    int world_size;
    int node_rank;
    int nbind_gpus; /* BIND: GPUs given to the task */
    int bind_gpus[PROTO_MAX_GPUS];
    char resume_from[PROTO_PATH_MAX];
    char gpu_milli_env[32]; /* BIND: its "MUSTER_GPU_MILLI=…" entry, "" when none */
};

/* An empty sender (heap; free with fake_sender_free) whose send function goes into *out. */
struct fake_sender *fake_sender_new(struct d_sender *out);
void fake_sender_free(struct fake_sender *s);
/* Messages sent and not taken yet. */
int fake_sent_count(const struct fake_sender *s);
/* Takes the oldest message sent into *out; false when none is left. */
bool fake_sent_pop(struct fake_sender *s, struct fake_msg *out);
/* Takes the oldest message of type to node about job's task (node and job NULL, task -1: any)
 * into *out (may be NULL); false when none matches. */
bool fake_sent_take(struct fake_sender *s,
                    enum proto_type type,
                    const char *node,
                    const char *job,
                    int task,
                    struct fake_msg *out);
/* How many messages not taken yet match, as fake_sent_take matches. */
int fake_sent_matching(
    const struct fake_sender *s, enum proto_type type, const char *node, const char *job, int task);
void fake_sent_clear(struct fake_sender *s);

/* ---- the daemon without Redis or ZeroMQ ---- */

struct dfix {
    struct musterd d;
    struct fake_store *store;
    struct fake_sender *sent;
    volatile sig_atomic_t stop;
};

/*
 * A daemon (heap; free with dfix_free) configured by config_json through the config module, its
 * memory made by d_state_init, with a fake store and sender.  No node is registered, no job
 * known.  Fails the test when the config does not load.
 */
struct dfix *dfix_new(const char *config_json);
/* Frees the daemon and the fakes; NULL does nothing. */
void dfix_free(struct dfix *f);
/* cmocka teardown: dfix_free(*state). */
int dfix_teardown(void **state);
/* Two idle 8-GPU nodes n1 and n2 of pool "od" register. */
void dfix_two_nodes(struct dfix *f);
/* Job id's "state" field in the fake store, "(none)" when it has none. */
const char *dfix_state_field(const struct dfix *f, const char *id);

/* A worker says HELLO (name, pool, ngpus GPUs in one NVLink island, no tasks) and the daemon
 * takes it in; its HEARTBEAT answer must say ok, and is taken. */
struct d_node *dfix_hello(struct dfix *f, const char *node, const char *pool, int ngpus);
/* The same, with the tasks the worker reports (a worker that restarted, say). */
struct d_node *dfix_hello_tasks(struct dfix *f,
                                const char *node,
                                const char *pool,
                                int ngpus,
                                const struct proto_task_ref *tasks,
                                int ntasks);
/* The daemon reads a submission: entry id (the job id, "1700000000001-0") with spec_json. */
void dfix_submit(struct dfix *f, const char *id, const char *spec_json);
/* The same from owner's own stream (submit:<owner>; "" = the shared one). */
void dfix_submit_as(struct dfix *f, const char *owner, const char *id, const char *spec_json);
/* The access rules of config_json's "access" (access_parse) put in force (d_access_set). */
void dfix_access(struct dfix *f, const char *config_json);
/* The daemon reads a control entry (musterctl cancel/hold/release/drain/cordon/uncordon);
 * grace_s -1 when the command carries none. */
void dfix_control(
    struct dfix *f, const char *entry_id, const char *cmd, const char *arg, int grace_s);
/* The same from owner's own stream (control:<owner>; "" = the shared one). */
void dfix_control_as(struct dfix *f,
                     const char *owner,
                     const char *entry_id,
                     const char *cmd,
                     const char *arg,
                     int grace_s);
/* node acknowledges the BIND of job's task (the task started, pid 1000 + task). */
void dfix_bind_ack(struct dfix *f, const char *node, const char *job, int task, int attempt);
/* node refuses the BIND of job's task; node_fault: the node's doing, not the job's. */
void dfix_bind_refused(struct dfix *f,
                       const char *node,
                       const char *job,
                       int task,
                       int attempt,
                       bool node_fault,
                       const char *error);
/* node reports job's task exited (signal 0: with exit_code). */
void dfix_task_exit(struct dfix *f,
                    const char *node,
                    const char *job,
                    int task,
                    int attempt,
                    int exit_code,
                    int signal);
/* node reports job's task wrote checkpoint path at at_ms (wall). */
void dfix_checkpoint_done(struct dfix *f,
                          const char *node,
                          const char *job,
                          int task,
                          int attempt,
                          const char *path,
                          uint64_t at_ms);
/* Redis comes back, as d_loop.c's redis_recover handles it: the store writes again, every job
 * changed meanwhile is written whole (d_jobs_resync), then the transitions that waited are made
 * (d_outage_recheck). */
void dfix_store_recover(struct dfix *f);
/* The daemon's state of job id, or -1 when it no longer keeps the job (final and written). */
int dfix_job_state(const struct dfix *f, const char *id);

/* Takes the BINDs of attempt of job id: exactly one per task (tasks of them), none left over;
 * node_of[t] gets the node task t was sent to. */
void dfix_take_binds(
    struct dfix *f, const char *id, int tasks, int attempt, char node_of[][PROTO_NODE_MAX]);
/* Element index of array id (one task) starts, the pass having placed it, and exits with
 * exit_code. */
void dfix_element_run(struct dfix *f, const char *id, int index, int exit_code);
/* Every task of attempt of job id acknowledges its BIND from node_of[t]. */
void dfix_ack_all(
    struct dfix *f, const char *id, int tasks, int attempt, char node_of[][PROTO_NODE_MAX]);
/* Submits job id (spec_json of `tasks` tasks), runs a pass that must start it, takes its BINDs
 * (node_of[t] gets task t's node) and acknowledges them all: the job is RUNNING. */
void dfix_start_gang(struct dfix *f,
                     const char *id,
                     const char *spec_json,
                     int tasks,
                     char node_of[][PROTO_NODE_MAX]);

/* Asserts job id's newest event: state, attempt (-1: any), and (when not NULL) a part of its
 * reason. */
void expect_last_event(
    const struct dfix *f, const char *id, const char *state, int attempt, const char *reason_part);
/* Takes the message of type to node about job's task of attempt; fails the test without one. */
void expect_sent(struct dfix *f,
                 enum proto_type type,
                 const char *node,
                 const char *job,
                 int task,
                 int attempt,
                 struct fake_msg *out);

#endif

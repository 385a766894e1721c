/* SPDX-License-Identifier: MIT */
/*
 * What the worker's unit tests (tests/unit/test_wrk*.c) share, in one place: temp directories
 * and files, the test data, stand-in nvidia-smi programs, the in-process scheduler the agent
 * tests drive the agent against (a ROUTER that answers like the scheduler), and the metadata
 * service stand-in tests/imds/imds_mock.py.  Built once as the static library wrk_test_support
 * (tests/CMakeLists.txt) and linked into each test_wrk* executable.
 *
 * Every helper fails the running cmocka test (assert_*, fail_msg) rather than return an error,
 * so it may only be called from inside a test.  Temp directories live under
 * /tmp/muster-test-wrk-*; rm_rf removes nothing else.
 */
#ifndef MUSTER_TESTS_WRK_FAKE_H
#define MUSTER_TESTS_WRK_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "worker/wrk.h"

/* ---- files and processes ---- */

/* The path of tests/data/wrk/<name> ($MUSTER_TEST_DATA/wrk, or beside this source when unset). */
void data_path(const char *name, char *buf, size_t size);
/* The text of tests/data/wrk/<name>, a heap string (free() it). */
char *read_data(const char *name);
/* A fresh /tmp/muster-test-wrk-XXXXXX, a heap string (free() it after rm_rf). */
char *make_tmpdir(void);
/* rm -rf dir, for a directory from make_tmpdir only (anything else is left alone). */
void rm_rf(const char *dir);
/* Writes text to path and sets its mode. */
void write_file(const char *path, const char *text, mode_t mode);
/* The text of <dir>/<name> (a heap string), or NULL when it cannot be read. */
char *read_in(const char *dir, const char *name);
/* True when <dir>/<name> exists. */
bool file_exists(const char *dir, const char *name);
/* waitpid(pid) through EINTR: 0 with *status, -1 when pid was not ours. */
int wait_exit(pid_t pid, int *status);
void sleep_ms(long ms);

/*
 * Writes a stand-in nvidia-smi at dir/name (its path into prog) that prints the CSV sample
 * csv_file (piped through csv_filter, e.g. "tac") for the GPU query, and runs topo_cmd (shell)
 * for `topo -m`.
 */
void write_nvsmi(char *prog,
                 size_t size,
                 const char *dir,
                 const char *name,
                 const char *csv_file,
                 const char *csv_filter,
                 const char *topo_cmd);
/* "cat 'DATA/wrk/<file>'" into buf. */
void cat_data(char *buf, size_t size, const char *file);

/* ---- the agent against an in-process scheduler ---- */

struct fake_sched {
    void *ctx;
    void *router;
    struct wrk_agent *agent;
    char *dir; /* owned: the agent's state directory, also the ROUTER's ipc socket's */
    uint64_t seq;
    char endpoint[256];
    struct wrk_config cfg; /* what the agent was started with, for a restart */
    uint64_t last_echo_ms; /* echo_ms of the worker's latest HELLO or HEARTBEAT */
    int answer_lease_s;    /* > 0: answer each HELLO and HEARTBEAT at once, with this lease */
};

/* When set, the next agent watches this metadata service every second and has no zone label. */
extern const char *fake_imds_url;
/* When set, the next agent is a root worker without --allow-root that allows these users. */
extern const char *const *fake_allow_users;
extern int fake_nallow_users;

/*
 * Starts an agent (node n1, pool p5-spot) against a fresh ROUTER: sim_gpus simulated GPUs laid
 * out by islands (an --gpu-islands list, NULL = one island), or, with sim_gpus -1, GPUs
 * discovered through the stand-in nvidia_smi.  Labels zone, block and rack.
 */
void fake_sched_start_with(struct fake_sched *f,
                           int sim_gpus,
                           const char *islands,
                           const char *nvidia_smi);
/* Two simulated GPUs, each its own island. */
void fake_sched_start(struct fake_sched *f);
/* Frees the agent (tasks are left to their shims), the ROUTER and the directory. */
void fake_sched_stop(struct fake_sched *f);

/*
 * proto_recv on the router, as the scheduler would: notes the echo_ms of each HELLO and
 * HEARTBEAT and, with answer_lease_s, answers it (ok, the echo carried back, the lease).
 */
int fake_recv(struct fake_sched *f, char *id, size_t id_size, struct proto_msg *out);
/* Turns the agent's loop until the router has a message of `type` from it (others skipped). */
bool expect_msg(struct fake_sched *f, enum proto_type type, struct proto_msg *out, int timeout_ms);
/* Turns the agent's loop until the task's log file logs/<name> holds exactly `want`. */
bool wait_log(struct fake_sched *f, const char *name, const char *want);
/* Turns the agent's loop for ms, taking (and dropping) what it sends. */
void agent_turn(struct fake_sched *f, int ms);
/* The BIND_ACK for job's task (others skipped); fails the test when none comes. */
void expect_ack(struct fake_sched *f, const char *job, struct proto_msg *m);
/*
 * Turns the loop until the task of job exits (TASK_STATUS into *status, which the caller
 * releases); returns the number of CHECKPOINT_DONE paths seen before, copied into paths[<max].
 */
int until_exit(struct fake_sched *f,
               const char *job,
               char paths[][PROTO_PATH_MAX],
               int max,
               struct proto_msg *status);

/* Sends m to the worker n1 with the next seq and this epoch. */
void send_to_worker(struct fake_sched *f, struct proto_msg *m, uint64_t epoch);
/*
 * A message of type for job's task; for HEARTBEAT an answer to the worker's latest HELLO or
 * HEARTBEAT, with ok = signal != 0.
 */
void send_simple(struct fake_sched *f,
                 enum proto_type type,
                 const char *job,
                 int task,
                 int attempt,
                 int signal,
                 int grace_s,
                 uint64_t epoch);
/* A BIND of job's task (attempt 1, 2 tasks in all) running script on GPU gpu, FROM_SPEC=yes. */
void send_bind(
    struct fake_sched *f, const char *job, int task, const char *script, int gpu, uint64_t epoch);

/* ---- the metadata service stand-in (tests/imds/imds_mock.py) ---- */

struct mock_imds {
    pid_t pid;
    int port;
    char url[64]; /* "http://127.0.0.1:PORT" */
    char *dir;    /* owned: where it writes its port */
};

/* Starts imds_mock.py with extra arguments; false (the caller skips) when python3 is missing. */
bool mock_start(struct mock_imds *mk, const char *const *extra, int nextra);
void mock_stop(struct mock_imds *mk);
/* A cmocka teardown: kills a mock a failed test left running and clears fake_imds_url. */
int mock_teardown(void **state);
/* POSTs body to the mock's control path (or GETs when body is NULL); the reply (free() it). */
char *mock_call(const struct mock_imds *mk, const char *path, const char *body);
void mock_post(const struct mock_imds *mk, const char *path, const char *body);
/* The integer after "key": in the mock's /mock/stats. */
int64_t mock_stat(const struct mock_imds *mk, const char *key);
/* Posts a notice (/mock/notice); the time it announces, as wall ms. */
uint64_t mock_notice(const struct mock_imds *mk, const char *body);

#endif

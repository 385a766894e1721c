/* SPDX-License-Identifier: MIT */
/*
 * wrk: the node agent muster-worker (docs/design.md §3 task environment, §7 protocol, §8 flags).
 *
 * The pieces are cut so that each can be tested without the others: the nvidia-smi CSV parser
 * and the environment builder are pure functions; the spawner forks and execs with a CLOEXEC
 * error pipe so that a failed exec is an error value, not a mystery exit code; the agent is the
 * single-threaded zmq_poll loop that speaks the protocol.  The agent is loop-thread-only: none of
 * these functions may be called from another thread.
 */
#ifndef MUSTER_WORKER_WRK_H
#define MUSTER_WORKER_WRK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/mu.h"
#include "protocol/proto.h"
#include "worker/cgroup.h"

#define WRK_MAX_EXITED        4096       /* exited tasks kept for the scheduler, oldest evicted */
#define WRK_NVSMI_MAX_BYTES   (1u << 20) /* cap on captured nvidia-smi output */
#define WRK_NVSMI_TIMEOUT_MS  30000      /* a wedged driver must not hang the worker's start */
#define WRK_SHUTDOWN_GRACE_MS 5000       /* SIGTERM -> SIGKILL when the worker itself stops */

/* ---- inventory ---- */

/*
 * Parses the output of `nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id
 * --format=csv,noheader,nounits`: one GPU per line, fields separated by commas (the name may
 * contain spaces, and commas too: the first two and last two fields are fixed).  Fills
 * gpus[0..*n_out-1] (island 0 for all).  Errors name the line and field: MU_E_PARSE for bad
 * text, MU_E_TOOBIG for more than max GPUs, MU_E_NOTFOUND for no GPU at all.  On failure *n_out
 * is untouched and the contents of gpus are unspecified.
 */
int wrk_gpus_parse_csv(
    const char *text, struct proto_gpu *gpus, int max, int *n_out, struct mu_err *err);

/*
 * Fills gpus[0..n-1] with simulated GPUs: index i, uuid "", model "simulated", island island[i]
 * (island may be NULL: all island 0).
 */
void wrk_gpus_simulate(struct proto_gpu *gpus, int n, const int *island);

/*
 * Runs `program` (normally "nvidia-smi", looked up in PATH) with the query above and parses its
 * output (islands stay 0: wrk_topo_discover fills them).  Blocks up to WRK_NVSMI_TIMEOUT_MS.  A
 * missing program is "cannot run 'nvidia-smi': No such file or directory; hint: pass --gpus N to
 * simulate GPUs"; a non-zero exit carries the first line of its stderr (or stdout when stderr is
 * empty).
 */
int wrk_gpus_discover(
    const char *program, struct proto_gpu *gpus, int max, int *n_out, struct mu_err *err);

/* ---- MIG slices (worker/mig.c, issue #17) ---- */

/*
 * Parses `nvidia-smi -L` for the ngpus GPUs already in gpus[] (from the CSV query): each MIG
 * line under a "GPU N: … (UUID: GPU-…)" line marks that GPU mig and appends a slice entry at
 * gpus[ngpus..]: index = its position, uuid "MIG-…", profile, parent = the GPU's index, model,
 * bus id and island the GPU's, memory from the profile.  A GPU without MIG lines stays whole.
 * Padding, the device index alignment, compute-instance profiles ("1c.3g.20gb"), "+me"
 * suffixes and the R450 "MIG-GPU-…/1/0" UUIDs are accepted.  *n_out = ngpus + slices.  Errors
 * (MU_E_PARSE naming the line; MU_E_TOOBIG past max entries): an unknown line, a GPU not in
 * the query or with another UUID, a MIG line before any GPU, a bad profile or UUID, a device
 * listed twice, GPU indices other than 0..ngpus-1 when there are slices.  Pure.
 */
int wrk_gpus_parse_mig(
    const char *text, struct proto_gpu *gpus, int ngpus, int max, int *n_out, struct mu_err *err);

/*
 * Runs `program -L` (program NULL = "nvidia-smi") and applies wrk_gpus_parse_mig.  On failure
 * the GPUs are left whole (the agent warns); gpus[0..ngpus) may have mig set, so the caller
 * clears it.
 */
int wrk_mig_discover(const char *program,
                     struct proto_gpu *gpus,
                     int ngpus,
                     int max,
                     int *n_out,
                     struct mu_err *err);

/*
 * --mig for simulated GPUs: one entry per GPU, comma-separated, from GPU 0; "-" keeps a GPU
 * whole, else its slices as COUNTxPROFILE joined by '+' ("7x1g.10gb,-,2x3g.40gb+1x1g.10gb");
 * GPUs past the list stay whole.  Appends the slices as wrk_gpus_parse_mig does, with UUIDs
 * "MIG-sim-GPU-K".  Errors: MU_E_PARSE (bad entry), MU_E_RANGE (more entries than GPUs),
 * MU_E_TOOBIG (more than max entries in all).
 */
int wrk_gpus_simulate_mig(
    const char *text, struct proto_gpu *gpus, int ngpus, int max, int *n_out, struct mu_err *err);

/* ---- NVLink islands (docs/design.md §2 "GPU islands") ---- */

/*
 * Parses the output of `nvidia-smi topo -m` for a node with ngpus (1..PROTO_MAX_GPUS) GPUs:
 * GPUs joined by NV# cells, directly or through other GPUs, form one island; GPUs joined only
 * by PIX, PXB, PHB, NODE or SYS (SOC on old drivers) are separate islands.  On success
 * island_out[i] is the island of the row GPUi, islands are numbered 0..*nislands_out-1 in the
 * order of their lowest GPU (nislands_out may be NULL).  Tolerates tabs or spaces, ANSI escapes,
 * NIC rows and columns, the affinity columns and the Legend.  Errors (MU_E_PARSE, MU_E_TOOBIG
 * past PROTO_MAX_GPUS columns) name the line: no header, a GPU count other than ngpus, a missing,
 * repeated or short row, an unknown cell, X off the diagonal, NVLink one way only.  On failure
 * island_out is untouched.  Pure: no system calls.
 */
int wrk_topo_parse(
    const char *text, int ngpus, int *island_out, int *nislands_out, struct mu_err *err);

/*
 * Runs `program topo -m` (program NULL = "nvidia-smi"; same capture, timeout and cap as
 * wrk_gpus_discover) and sets gpus[j].island for the ngpus discovered GPUs, matching
 * gpus[j].index to the matrix row GPU<index>.  *nislands_out (may be NULL) gets the number of
 * islands.  On failure (cannot run, non-zero exit, unparsable output, an index with no row)
 * gpus is untouched; the caller decides what to do (the agent warns and keeps island 0).
 */
int wrk_topo_discover(
    const char *program, struct proto_gpu *gpus, int ngpus, int *nislands_out, struct mu_err *err);

/*
 * Parses --gpu-islands: island sizes separated by commas ("4,4", "2,2,4"), each 1..
 * PROTO_MAX_GPUS, adding up to exactly ngpus.  Fills island_out[0..ngpus-1] with 0 for the
 * first size's GPUs, 1 for the next, and so on.  Errors: MU_E_PARSE for a bad size ("island 2:
 * expected a size in 1..64, got 'x'"), MU_E_RANGE when the sizes do not add up to ngpus.  On
 * failure island_out is untouched.
 */
int wrk_gpu_islands_parse(const char *text, int ngpus, int *island_out, struct mu_err *err);

/*
 * Formats CUDA_VISIBLE_DEVICES for the GPUs with indices bind[0..nbind-1]: the indices when
 * simulated, else the UUIDs, comma-separated, into buf; a MIG slice always by its "MIG-…" UUID.
 * An index that is not in the inventory is MU_E_INVAL ("gpu 9 is not on this node"), as is a GPU
 * in MIG mode; a buffer too small is MU_E_TOOBIG.
 */
int wrk_gpus_format_visible(const struct proto_gpu *gpus,
                            int ngpus,
                            bool simulated,
                            const int *bind,
                            int nbind,
                            char *buf,
                            size_t size,
                            struct mu_err *err);

/* ---- spawning processes ---- */

/*
 * Whose fault a task that could not start is (BIND_ACK's node_fault): the node's (identity, state
 * directory, GPUs, lease, the supervisor), so that the scheduler avoids the node and does not
 * count it against the job, or the job's (its command cannot be executed, its workdir is
 * missing, its spec is invalid).
 */
enum wrk_fault {
    WRK_FAULT_NODE = 0,
    WRK_FAULT_JOB,
};

struct wrk_spawn {
    char *const *argv;   /* NULL-terminated; argv[0] is looked up in the PATH of envp */
    char *const *envp;   /* the child's environment; NULL = the worker's own */
    const char *workdir; /* NULL = the worker's cwd */
    int fd_stdin;        /* -1 = /dev/null */
    int fd_stdout;       /* -1 = /dev/null */
    int fd_stderr;       /* -1 = /dev/null */
    bool new_pgrp;       /* child leads its own process group (setpgid(0, 0) and in the parent) */
    int fd_extra;        /* > 2: becomes fd 3 in the child (the shim's report pipe); 0 = none */
    bool set_ids;        /* switch to uid/gid/groups before exec (the caller must be root) */
    uid_t uid;
    gid_t gid;
    int ngroups;           /* supplementary groups[0..ngroups-1]; 0 = none */
    const gid_t *groups;   /* borrowed */
    uint64_t not_after_ms; /* CLOCK_MONOTONIC ms: the child does not exec at or after this
                              (checked right before exec); 0 = no deadline */
    bool single_threaded;  /* the caller has no other thread (muster-shim): vfork for any start */
    int ncg_fds;           /* cg_fds[0..ncg_fds-1]: cgroup.procs files the child joins by writing
                              "0" before anything else it does (the task's cgroups) */
    const int *cg_fds;     /* borrowed */
};

/*
 * Forks (vforks for an absolute path that keeps the caller's ids, and for any start from a
 * single-threaded caller) and execs.  The child resets
 * signal dispositions and its mask, moves to its own process group when asked, sets up stdio (and
 * fd 3 from fd_extra), switches to uid/gid/groups when set_ids ("cannot switch to uid 1000:
 * Operation not permitted"), changes directory, checks not_after_ms and execs; when any of that
 * fails, it writes the step and the errno through a CLOEXEC pipe and the parent reaps it and
 * returns the error: "cannot run 'x': No such file or directory", "workdir '/x': No such file or
 * directory", "not started: the start deadline passed before exec".  *fault (may be NULL) says
 * whose fault a failure is: the job's for an exec of argv[0] that fails with ENOENT, EACCES,
 * ENOEXEC (and their kin ENOTDIR, ELOOP, ENAMETOOLONG, E2BIG) or a workdir that is missing or not
 * a directory; the node's for anything else.  The borrowed fds are not closed.  Only
 * async-signal-safe calls run in the child (libzmq has threads).
 */
int wrk_spawn_start(const struct wrk_spawn *s,
                    pid_t *pid_out,
                    enum wrk_fault *fault,
                    struct mu_err *err);

/*
 * Runs argv to completion with stdin from /dev/null and captures stdout and stderr (each at most
 * max_bytes, else MU_E_TOOBIG); kills it after timeout_ms (MU_E_IO).  On success *out and
 * *errout are NUL-terminated heap strings (free() them) and *status is the waitpid status.
 */
int wrk_spawn_capture(char *const *argv,
                      size_t max_bytes,
                      int timeout_ms,
                      char **out,
                      char **errout,
                      int *status,
                      struct mu_err *err);

/* ---- tasks: environment and launch (docs/design.md §3 "Task environment") ---- */

struct wrk_cg_sys; /* below: per-task cgroups */

/* A user tasks run as: --run-as, or the BIND's job_user on a worker given --allow-user. */
struct wrk_ident {
    char name[64]; /* "" = none: the worker's own ids */
    char home[PROTO_PATH_MAX];
    uid_t uid;
    gid_t gid;
};

/*
 * What one task needs to start; every pointer is borrowed for the call.  The BIND says what the
 * scheduler decided and is read where each of its fields is used (env.c, launch.c), never
 * copied: task (its job id must be a valid name: it becomes part of file names), argc/argv,
 * nenv/env ("KEY=VALUE", overriding the worker's), workdir ("" = state_dir), resume_from ("" =
 * none), world_size, local_rank, local_world_size, node_rank, master_addr, master_port, and for
 * wrk_launch_shim's task record signal (the checkpoint signal), grace_s and bind_gpus.  The other
 * fields are what the worker knows.
 */
struct wrk_launch {
    const struct proto_msg *bind; /* the BIND message (required) */
    const char *state_dir;        /* logs/ and ckpt/ live here; the default workdir */
    const char *run_dir;          /* wrk_launch_shim: tasks/ (the shims' records) lives here */
    const char *node;
    const char *cuda_visible;     /* CUDA_VISIBLE_DEVICES value ("" = no GPUs) */
    bool cuda_pci_order;          /* also set CUDA_DEVICE_ORDER=PCI_BUS_ID (discovered GPUs) */
    const struct wrk_ident *user; /* run as this user, with HOME, USER and LOGNAME set; NULL or
                                     name "" = the worker's own ids */
    const char *lease_path; /* wrk_launch_shim: the lease record the shim honours; NULL = none */
    uint64_t not_after_ms;  /* CLOCK_MONOTONIC ms: the task must not exec at or after this (the
                               lease's end, or the BIND's expiry); 0 = no deadline */
    const struct wrk_cg_sys *cg; /* wrk_launch_shim: the node's cgroups; NULL or version 0 =
                                    none (the task's process group only) */
    const char *cg_root;         /* with cg: --cgroup-root */
    int ngpu_minors;             /* with cg: gpu_minors[0..n-1], the /dev/nvidia<N> minors the
                                    task may open (its GPUs, a MIG slice's parent) */
    const int *gpu_minors;
};

/*
 * Builds the task's environment: base (NULL-terminated, e.g. environ), then HOME, USER and
 * LOGNAME when l->user is set, then the BIND's env, then muster's variables, each later entry
 * replacing an earlier one with the same key.  Pure: no system calls.  Returns a NULL-terminated
 * heap array; free it with wrk_env_free.  A spec entry without '=' or with an empty key is
 * MU_E_INVAL.
 */
char **wrk_env_build(const struct wrk_launch *l, char *const *base, struct mu_err *err);
void wrk_env_free(char **envp);
/* The value of key in envp, or NULL; borrowed from envp. */
const char *wrk_env_get(char *const *envp, const char *key);

/*
 * A task's file "<root>/<dir>/<job>.<attempt>.<task><suffix>": dir "logs" (suffix ".out" or
 * ".err") or "ckpt" (suffix "": its checkpoint file) under the state directory, or "tasks" (its
 * supervisor's record: ".json", ".exit") under the run directory.  MU_E_TOOBIG when it does not
 * fit.
 */
int wrk_task_path(const char *root,
                  const char *dir,
                  const char *job,
                  int attempt,
                  int task,
                  const char *suffix,
                  char *buf,
                  size_t size,
                  struct mu_err *err);

/*
 * LOG_READ req -> LOG_DATA *out (logread.c, protocol/README.md "Task logs"): checks the job id,
 * task, attempt and stream, builds the log's path under state_dir itself, and reads at most
 * min(req->max_bytes, PROTO_LOG_CHUNK_MAX) bytes at req->offset (0 = the cap).  *out is
 * initialised here and always filled (ok, or error with absent when there is no such file);
 * release it with proto_msg_release.
 */
void wrk_log_read(const char *state_dir, const struct proto_msg *req, struct proto_msg *out);

/* Creates dir and its parents (mode 0755); an existing directory is fine. */
int wrk_mkdir_p(const char *dir, struct mu_err *err);

/*
 * Starts one task in its own process group: creates logs/ and ckpt/ under state_dir, opens the
 * log files (O_APPEND), builds the environment from base (NULL = environ) and spawns argv.
 * *pid_out is the pid, which is also the process group id.
 */
int wrk_launch_start(const struct wrk_launch *l,
                     char *const *base,
                     pid_t *pid_out,
                     struct mu_err *err);

/* ---- task records and the per-task supervisor (docs/design.md §5 "worker crash or restart") ----
 */

/*
 * Each task runs under a small supervisor, muster-shim (worker/shim.c), in its own session, so
 * that it outlives the worker.  The shim keeps two files in <state-dir>/tasks/, both written to
 * a temp file and renamed: <job>.<attempt>.<task>.json (this record) once the task runs, and
 * <job>.<attempt>.<task>.exit (its true exit status) when it ends.  A restarted worker reads
 * them to re-adopt running tasks and report the exits it missed.
 */
#define WRK_REC_MAX_BYTES         (64u << 10)  /* a larger record or exit file is garbage */
#define WRK_GROUPS_MAX            1024         /* supplementary groups handed to a task */
#define WRK_SPEC_MAX_BYTES        (256u << 20) /* cap on what the shim reads from its stdin */
#define WRK_SHIM_START_TIMEOUT_MS 10000        /* a shim that says nothing by then is killed */
#define WRK_SHIM_SERVER_ANSWER_MS 1000 /* a shim server that has not forked by then is killed */
#define WRK_FENCE_TERM_GRACE_MS   5000 /* self-fencing: SIGTERM -> SIGKILL */
#define WRK_SHIM_NAME             "muster-shim"
/* The suffixes of a task's files in <state-dir>/tasks, after "<job>.<attempt>.<task>". */
#define WRK_TASKREC_SUFFIX  ".json"   /* the record */
#define WRK_TASKEXIT_SUFFIX ".exit"   /* the exit file */
#define WRK_FENCED_SUFFIX   ".fenced" /* an older version's "stopped by the lease" mark */

struct wrk_taskrec {
    struct proto_task_ref ref; /* job, task, attempt; pid = the task's process group id */
    int shim_pid;
    uint64_t shim_start; /* the shim's start time (/proc/PID/stat, clock ticks after boot): with
                            shim_pid, which process it is; 0 = not known (an older record) */
    uint64_t started_ms; /* wall */
    int ckpt_signal;     /* the job's checkpoint signal; 0 = not checkpointable */
    int grace_s;         /* the job's checkpoint grace */
    int uid;             /* the task's uid; -1 = the worker's own */
    int ngpus;
    int gpus[PROTO_MAX_GPUS]; /* GPU indices on this node */
};

struct wrk_taskexit {
    int exit_code;     /* when signal == 0 */
    int signal;        /* terminating signal, 0 = exited */
    uint64_t ended_ms; /* wall */
    bool fenced;       /* the shim stopped the task because the node's lease ran out */
    bool oom_killed;   /* the kernel's OOM killer killed a process of the task's memory cgroup */
};

/* The record as one line of JSON; a heap string (free() it), NULL with err on failure. */
char *wrk_taskrec_format(const struct wrk_taskrec *r, struct mu_err *err);

/*
 * Parses a record (len bytes, not NUL-terminated).  Errors (MU_E_PARSE, MU_E_RANGE) name the
 * key: "task record: "pid": expected an integer in 1..2147483647".  Pure; out untouched on
 * failure.
 */
int wrk_taskrec_parse(const char *text, size_t len, struct wrk_taskrec *out, struct mu_err *err);

/* The exit file as one line of JSON into buf ("fenced": true only when set); MU_E_TOOBIG when it
 * does not fit. */
int wrk_taskexit_format(const struct wrk_taskexit *x, char *buf, size_t size, struct mu_err *err);
int wrk_taskexit_parse(const char *text, size_t len, struct wrk_taskexit *out, struct mu_err *err);

/* A waitpid status, or a waitid siginfo's code and status, as an exit (ended_ms left 0). */
void wrk_taskexit_from_status(int status, struct wrk_taskexit *out);
void wrk_taskexit_from_siginfo(int code, int status, struct wrk_taskexit *out);

/*
 * Reads a record or an exit file (without following a symlink, at most WRK_REC_MAX_BYTES): 1
 * with *out filled, 0 when the file does not exist, -1 with err when unreadable or garbage.
 */
int wrk_taskrec_read(const char *path, struct wrk_taskrec *out, struct mu_err *err);
int wrk_taskexit_read(const char *path, struct wrk_taskexit *out, struct mu_err *err);

/*
 * Deletes the files of ref's task in <run_dir>/tasks: its record, its exit file, their temp
 * files, and the ".fenced" mark older versions kept; the scheduler has its exit and nobody reads
 * them again.  A missing file is fine; -1 with err names the first file that could not go (the
 * others are still tried).
 */
int wrk_taskrec_remove(const char *run_dir, const struct proto_task_ref *ref, struct mu_err *err);

/* Writes data to "<path>.tmp" and renames it to path (mode 0644). */
int wrk_file_write_atomic(const char *path, const char *data, size_t len, struct mu_err *err);

/*
 * What the worker hands a shim on its stdin: NUL-terminated "key=value" entries (arg= and env=
 * repeated, in order).  Not on the command line: /proc/PID/cmdline is world-readable and the
 * environment holds secrets.
 */
struct wrk_shim_spec {
    struct wrk_taskrec rec; /* the record to write; pid, shim_pid, started_ms filled by the shim */
    int argc;
    char **argv; /* NULL-terminated */
    int nenv;
    char **envp;         /* NULL-terminated */
    const char *workdir; /* NULL = the shim's cwd */
    const char *user;    /* NULL = keep the shim's ids; else switch to uid/gid and groups */
    int uid;
    int gid;
    int ngroups;   /* with user: groups[0..ngroups-1], its supplementary groups (looked up by the
                      worker, so that the shim needs no NSS); at most WRK_GROUPS_MAX */
    gid_t *groups; /* encode: borrowed; decode: heap (wrk_shim_spec_release) */
    const char *lease_path; /* the lease record (wrk_lease_new) to honour; NULL = none */
    uint64_t not_after_ms;  /* CLOCK_MONOTONIC ms: no exec at or after this; 0 = no deadline */
    struct wrk_cg_task cg;  /* the task's cgroups and limits; version 0 = none (process group) */
};

/* Appends the encoded spec to out.  The pointers of s are borrowed. */
int wrk_shim_spec_encode(const struct wrk_shim_spec *s, struct mu_buf *out, struct mu_err *err);

/*
 * Decodes data[0..len-1] (the last byte must be NUL) into out: the strings point into data,
 * the arrays are heap (wrk_shim_spec_release frees them, also after a failure).  Errors
 * (MU_E_PARSE) name the entry.
 */
int wrk_shim_spec_decode(const char *data,
                         size_t len,
                         struct wrk_shim_spec *out,
                         struct mu_err *err);
void wrk_shim_spec_release(struct wrk_shim_spec *s);

/*
 * True when cmdline (the bytes of /proc/PID/cmdline: NUL-separated argv) is a muster-shim
 * started for the task whose record path, without ".json", is base.  Pure.
 */
bool wrk_shim_cmdline_matches(const char *cmdline, size_t len, const char *base);

/*
 * From the bytes of /proc/PID/stat: the process's state letter and its start time (field 22,
 * clock ticks after boot).  The name in parentheses may hold spaces and parentheses: fields are
 * counted after the last ')'.  0, or -1 when the text is not such a line.  Pure.
 */
int wrk_proc_stat_parse(const char *text, size_t len, char *state, uint64_t *start);
/* Process pid's start time (0 when it is gone, a zombie or unreadable); pid 0 = this process. */
uint64_t wrk_proc_start(int pid);

/*
 * True when the shim of the task whose record base is base still runs as process pid: the same
 * start time when start is known (a pid reused by another process has another), else (a record
 * of an older version) its /proc/PID/cmdline names base.
 */
bool wrk_shim_is_running(int pid, uint64_t start, const char *base);

/*
 * The shim server, "muster-shim --serve" (shim.c): started once, it forks each task's shim, which
 * then is what an executed one is (its own session, outliving the worker), for the cost of a fork
 * rather than an exec.  fd: the worker's end of its socket, -1 when closed; pid: the server, a
 * child of the worker (-1: none started).
 */
struct wrk_shim_server {
    int fd;
    pid_t pid;
};

/*
 * Executes the shim at shim_path with one argument (a record base, or "--serve") and fds 0-3
 * (-1: /dev/null for 0-2), in the caller's session, with PATH as its whole environment; the
 * caller's child, to reap.  0 with *pid, or -1 with err.
 */
int wrk_shim_exec(
    const char *shim_path, char *arg, const int fds[4], pid_t *pid, struct mu_err *err);

/* Starts the server from shim_path; 0, or -1 with err, srv closed. */
int wrk_shim_server_start(struct wrk_shim_server *srv, const char *shim_path, struct mu_err *err);
/* Closes the worker's end (srv may be NULL): the server then ends; srv->pid is left to reap. */
void wrk_shim_server_close(struct wrk_shim_server *srv);

/*
 * Starts the BIND's task through the shim at shim_path: prepares logs and environment as
 * wrk_launch_start does, hands the shim its spec (the task's record: the BIND's task, checkpoint
 * signal, grace and GPUs, and l->user's uid or -1; the lease path and start deadline from l) and
 * waits up to WRK_SHIM_START_TIMEOUT_MS for it to report the task's pid, or why the task could
 * not start ("cannot run 'x': No such file or directory") and whose fault that is (*fault, may
 * be NULL; the shim's report line is "ERR <code> <node|job> <message>").  On success *rec is the
 * running task's record: ref state RUNNING, ref.pid the task's pid (= its process group id),
 * shim_pid and shim_start (started_ms stays 0: the shim's file has it); on failure rec is
 * untouched.  With srv (may be NULL) open, the shim is forked by that server; a server found gone
 * is closed (wrk_shim_server_close) and the shim executed from shim_path, as without one.  An
 * executed shim is a child of the caller, which must reap it.
 */
int wrk_launch_shim(const struct wrk_launch *l,
                    char *const *base,
                    const char *shim_path,
                    struct wrk_shim_server *srv,
                    struct wrk_taskrec *rec,
                    enum wrk_fault *fault,
                    struct mu_err *err);

/* ---- the lease record <state-dir>/lease (worker/lease.c) ---- */

/*
 * A fixed-size binary record (magic, version, lease_s, until_ms) mapped MAP_SHARED: the worker
 * maps it read-write and stores the lease in place (never replacing a valid file: running shims
 * keep their mapping of the inode); each shim maps it read-only and stops its task once
 * CLOCK_MONOTONIC ms reach until_ms (0 = no lease, never fence).
 */
struct wrk_lease;

/*
 * Maps the record at path.  Opened without following a symlink; it must be a regular file of
 * the record's size with the right magic and version.  writable (the worker): a missing or
 * invalid file (a symlink included) is replaced by a fresh one without a lease (a warning names
 * what was wrong); a valid one is kept as it is, values included.  Read-only (a shim): such a
 * file is an error (MU_E_NOTFOUND when missing, MU_E_PARSE when not a record, MU_E_IO).  Free
 * with wrk_lease_free; the mapping stays valid until then, whatever happens to the path.
 */
struct wrk_lease *wrk_lease_new(const char *path, bool writable, struct mu_err *err);
void wrk_lease_free(struct wrk_lease *l);
/* The record's values, read atomically (either pointer may be NULL). */
void wrk_lease_read(const struct wrk_lease *l, int *lease_s, uint64_t *until_ms);
/* Stores the values atomically (lease_s first); writable mappings only. */
void wrk_lease_write(struct wrk_lease *l, int lease_s, uint64_t until_ms);
/* True while the lease lets the node start tasks at now_ms: there is none, or it holds. */
bool wrk_lease_holds(const struct wrk_lease *l, uint64_t now_ms);
/*
 * The worker (writable l) takes the scheduler's HEARTBEAT answer to one of its HELLOs or
 * HEARTBEATs: lease_s (> 0: the scheduler's node_lost_after_s, else keep the one known),
 * echo_ms (the answered message's send time, 0 = not an answer: nothing changes) and ok (false:
 * the scheduler does not know the node, which renews nothing).  An answer renews the lease to
 * echo_ms + lease_s unless an answer to a later message renewed it before in this process (a
 * stale answer that sat in a socket) or echo_ms is ahead of now_ms (not ours); the first one in
 * a process sets it outright, even shorter.  True when lease_s or until_ms changed.
 */
bool wrk_lease_renew(struct wrk_lease *l, int lease_s, uint64_t echo_ms, bool ok, uint64_t now_ms);

/* ---- stale commands (worker/stale.c) ---- */

#define WRK_TOMBS_MAX 1024 /* KILLed tasks remembered, so that a late BIND of one is refused */

struct wrk_tomb {
    char job[PROTO_JOB_MAX];
    int task;
    int attempt;
};

/* A ring of the last WRK_TOMBS_MAX tasks a KILL gave up; zeroed = empty. */
struct wrk_tombs {
    struct wrk_tomb e[WRK_TOMBS_MAX];
    int n;    /* entries in use */
    int next; /* the slot the next entry takes (the oldest, once full) */
};

/* Remembers ref's (job, task, attempt); a repeat is not stored twice. */
void wrk_tombs_add(struct wrk_tombs *t, const struct proto_task_ref *ref);
bool wrk_tombs_has(const struct wrk_tombs *t, const struct proto_task_ref *ref);

/* A lower bound of the scheduler's monotonic clock, kept per scheduler epoch; zeroed = unknown. */
struct wrk_sched_clock {
    uint64_t epoch;    /* the epoch the offset belongs to */
    int64_t offset_ms; /* max(sent_ms - local receive ms) over this epoch's messages */
    bool known;        /* a message of this epoch carried sent_ms */
};

/* A message of epoch, stamped sent_ms (0 = not stamped), received at local recv_ms.  Another
 * epoch starts the bound over. */
void wrk_sched_clock_note(struct wrk_sched_clock *c,
                          uint64_t epoch,
                          uint64_t sent_ms,
                          uint64_t recv_ms);
/* *sched_ms = the lower bound of the scheduler's clock at local now_ms; false when unknown. */
bool wrk_sched_clock_bound(const struct wrk_sched_clock *c, uint64_t now_ms, uint64_t *sched_ms);
/* *local_ms = the local time at which that bound reaches sched_ms (>= 1); false when unknown. */
bool wrk_sched_clock_local(const struct wrk_sched_clock *c, uint64_t sched_ms, uint64_t *local_ms);

/*
 * True when the BIND m must not start, whatever it asks for, with why (a NUL-terminated line
 * for BIND_ACK's error; node_fault): a KILL of its task came first ("not started: a KILL for
 * this task arrived first"), the bound of the scheduler's clock at now_ms is past its expires_ms
 * ("stale BIND: the scheduler gave this attempt up 812 ms ago (expires_ms)"), or the node has a
 * lease and does not hold it ("not started: this node's lease ran out 3.2 s ago (no word from
 * the scheduler)").
 */
bool wrk_bind_is_stale(const struct wrk_tombs *t,
                       const struct wrk_sched_clock *c,
                       const struct wrk_lease *l,
                       const struct proto_msg *m,
                       uint64_t now_ms,
                       char *why,
                       size_t size);
/* The local time m's task must not exec at or after: the lease's end or m's expiry, whichever
 * comes first; 0 = no deadline. */
uint64_t wrk_bind_deadline(const struct wrk_sched_clock *c,
                           const struct wrk_lease *l,
                           const struct proto_msg *m);

/* ---- checkpoint files (docs/design.md §3 "Checkpoints") ---- */

#define WRK_CKPT_MAX_BYTES 4096 /* a larger checkpoint file is garbage, not read */

/*
 * The checkpoint path in a checkpoint file's bytes data[0..len-1] (not NUL-terminated): the
 * first line, spaces, tabs and CR trimmed, copied into path[size].  Errors: MU_E_TOOBIG for more
 * than WRK_CKPT_MAX_BYTES bytes or a path that does not fit size; MU_E_PARSE for a NUL anywhere
 * (binary), an empty first line, or a control byte in the path.  Pure.
 */
int wrk_ckpt_parse(const char *data, size_t len, char *path, size_t size, struct mu_err *err);

/*
 * Reads the checkpoint file `file` without following a symlink or blocking on a FIFO; it must
 * be a regular file of at most WRK_CKPT_MAX_BYTES.  Returns 1 with path and *mtime_ms (wall ms
 * of its modification time) filled, 0 when the file does not exist, -1 with err when it is
 * unreadable or garbage (wrk_ckpt_parse's errors).
 */
int wrk_ckpt_read(
    const char *file, char *path, size_t size, uint64_t *mtime_ms, struct mu_err *err);

/* ---- EC2 instance metadata: the spot watcher (docs/design.md §5 "Spot interruption") ---- */

#define WRK_IMDS_MAX_BODY         (64u << 10) /* larger replies are cut off and counted garbled */
#define WRK_IMDS_TIMEOUT_MS       1000        /* per request (CURLOPT_TIMEOUT_MS) */
#define WRK_IMDS_TOKEN_TTL_S      21600       /* what the token PUT asks for, and the most */
#define WRK_IMDS_INTERVAL_S       5           /* --imds-interval-s default */
#define WRK_IMDS_IDENTITY_WAIT_MS 3000        /* wrk_agent_new waits this long for the zone */

/* spot/instance-action */
struct wrk_imds_action {
    char action[16];  /* "terminate" | "stop" | "hibernate" */
    uint64_t time_ms; /* wall ms of "time": when the action happens */
};

/*
 * Parses an EC2 UTC time "YYYY-MM-DDThh:mm:ssZ" (an optional ".fraction" before the Z is kept
 * to the millisecond) into wall ms.  MU_E_PARSE for another shape, MU_E_RANGE for a date or time
 * that does not exist or lies before 1970.  Pure.
 */
int wrk_imds_parse_time(const char *text, uint64_t *ms_out, struct mu_err *err);

/*
 * Parses the body (len bytes, not NUL-terminated, at most WRK_IMDS_MAX_BODY) of
 * /latest/meta-data/spot/instance-action: a JSON object with string "action" (terminate, stop
 * or hibernate) and string "time"; other keys are ignored.  Errors name the key:
 * 'spot/instance-action: "action": expected "terminate", "stop" or "hibernate", got 'x''.  On
 * failure *out is untouched.  Pure; fuzzed by tests/fuzz/fuzz_imds.c.
 */
int wrk_imds_parse_action(const char *body,
                          size_t len,
                          struct wrk_imds_action *out,
                          struct mu_err *err);

/*
 * Parses the body of /latest/meta-data/events/recommendations/rebalance: a JSON object with
 * string "noticeTime".  *notice_ms_out gets its wall ms; untouched on failure.  Pure.
 */
int wrk_imds_parse_rebalance(const char *body,
                             size_t len,
                             uint64_t *notice_ms_out,
                             struct mu_err *err);

struct wrk_imds_config {
    const char *url;    /* "http://169.254.169.254" (a trailing slash is fine); http only */
    int interval_s;     /* 1..300 between the starts of two polls */
    int token_ttl_s;    /* 0 = WRK_IMDS_TOKEN_TTL_S; tests ask for a few seconds */
    int timeout_ms;     /* per request; 0 = WRK_IMDS_TIMEOUT_MS */
    bool want_identity; /* also read instance type, zone, lifecycle and instance id until
                           known */
};

enum wrk_imds_event_type {
    WRK_IMDS_SPOT = 1,  /* a new interruption notice: action, time_ms = its deadline */
    WRK_IMDS_REBALANCE, /* a new rebalance recommendation: time_ms = its noticeTime */
    WRK_IMDS_IDENTITY,  /* wrk_imds_identity_get has the instance's identity now (once) */
};

struct wrk_imds_event {
    enum wrk_imds_event_type type;
    char action[16];  /* SPOT: as the notice says; REBALANCE: "rebalance" */
    uint64_t time_ms; /* wall ms */
};

struct wrk_imds_identity {
    char instance_type[64]; /* "p5.48xlarge"; "" when the service has none (404) */
    char zone[64];          /* "us-east-1a"; "" when none */
    char lifecycle[16];     /* "spot" | "on-demand"; "" when none */
    char instance_id[64];   /* "i-0123456789abcdef0"; "" when none */
};

struct wrk_imds_stats {
    uint64_t cycles;       /* polls started */
    uint64_t requests;     /* HTTP requests started, token PUTs included */
    uint64_t tokens;       /* tokens obtained */
    uint64_t unauthorized; /* 401 replies */
    uint64_t failures;     /* transfers that failed: refused, timed out, too large */
    uint64_t garbled;      /* replies that made no sense */
};

struct wrk_imds;
struct pollfd;

/*
 * A watcher for the metadata service at cfg->url.  Starts nothing: the first poll begins at the
 * first wrk_imds_service.  Errors: MU_E_INVAL for a URL that is not http://..., MU_E_RANGE for
 * an interval or TTL out of range.  Free with wrk_imds_free.  Loop-thread-only, like the agent.
 */
struct wrk_imds *wrk_imds_new(const struct wrk_imds_config *cfg, struct mu_err *err);
void wrk_imds_free(struct wrk_imds *w);

/*
 * The event-loop contract: put the fds that wrk_imds_fds writes (at most max; 8 is always
 * enough) into the poll set, wait at most wrk_imds_timeout_ms(w, now, your_max), then hand the
 * same fds with their revents to wrk_imds_service, which drives the transfers, starts a poll
 * when one is due and never blocks.  Then take the events with wrk_imds_event_next.
 */
int wrk_imds_fds(const struct wrk_imds *w, struct pollfd *fds, int max);
int wrk_imds_timeout_ms(const struct wrk_imds *w, uint64_t now_mono_ms, int max_ms);
void wrk_imds_service(struct wrk_imds *w, const struct pollfd *fds, int nfds);
/* The oldest pending event into *ev; false when there is none. */
bool wrk_imds_event_next(struct wrk_imds *w, struct wrk_imds_event *ev);

/*
 * Blocks (poll) until the identity is known, one poll completed without it, or budget_ms
 * passed; 0 when it is known.  For start-up only, so that the first HELLO has the zone.
 */
int wrk_imds_wait_identity(struct wrk_imds *w, int budget_ms);
/* The identity once complete, else NULL; borrowed until wrk_imds_free. */
const struct wrk_imds_identity *wrk_imds_identity_get(const struct wrk_imds *w);
void wrk_imds_stats_get(const struct wrk_imds *w, struct wrk_imds_stats *out);

/* ---- the agent (the daemon's loop) ---- */

struct wrk_config {
    const char *scheduler; /* "tcp://HOST:PORT" */
    const char *node;
    const char *pool;
    const char *state_dir;          /* logs and checkpoints; created with its parents */
    const char *run_dir;            /* task records and the lease; NULL or "" = state_dir */
    const char *addr;               /* MASTER_ADDR other nodes use to reach this one */
    const char *instance_id;        /* EC2 instance id for HELLO; NULL = from --imds, or none */
    const char *imds;               /* metadata service URL; NULL or "" = no spot watcher */
    int imds_interval_s;            /* 0 = WRK_IMDS_INTERVAL_S */
    int imds_token_ttl_s;           /* 0 = WRK_IMDS_TOKEN_TTL_S (tests use less) */
    const char *nvidia_smi;         /* program for discovery; NULL = "nvidia-smi" */
    int sim_gpus;                   /* 0..64 simulated GPUs; -1 = discover with nvidia-smi */
    int sim_island[PROTO_MAX_GPUS]; /* island of simulated GPU i (--gpu-islands); zeroed = one */
    const char *sim_mig;            /* --mig: MIG slices of the simulated GPUs; NULL = none */
    int cpus;
    int64_t memory_mb;
    int heartbeat_s;    /* until the scheduler says otherwise; <= 0 means 1 */
    const char *shim;   /* the task supervisor; NULL = $MUSTER_SHIM, else muster-shim beside
                           the running program */
    const char *run_as; /* root only: tasks run as this user; NULL = see below */
    int nallow_users;   /* root only: the BIND job_user values allowed */
    const char *const *allow_users; /* borrowed for wrk_agent_new */
    bool allow_root;                /* root only: tasks may run as root */
    int nlabels;
    struct proto_label labels[PROTO_MAX_LABELS];
    const struct proto_curve *curve; /* this worker's CURVE key pair; NULL = plain TCP */
    const char *curve_server;        /* with curve: the scheduler's Z85 public key (every
                                        scheduler of the list holds the same key pair) */
    const char *redis;        /* the lease's witness (witness.c); NULL or "" = none: the tasks
                                 stop when no scheduler answers for the lease, leader or not */
    const char *redis_prefix; /* its key prefix; NULL = "muster:" */
    const char *cgroup_root;  /* per-task cgroups under this name (cgroup.c); NULL = "muster",
                                 "" = none: the tasks' process groups only */
};

#define WRK_SCHED_MAX 8 /* endpoints in --scheduler (several: one leads, the others stand by) */

struct wrk_agent;

/*
 * Takes the inventory (discovered GPUs get their islands from `nvidia-smi topo -m`; when that
 * fails, a warning and island 0 for all), creates the state directory (logs/, ckpt/, tasks/),
 * a ZeroMQ context and the DEALER, and installs the SIGCHLD/SIGTERM/SIGINT handlers (a
 * self-pipe: only one agent per process).  Reads the task records a previous worker left in
 * tasks/ (re-adopting tasks whose shim still runs; the first HELLO reports them all) and maps
 * the lease record <state_dir>/lease, keeping the lease a previous worker left there until the
 * scheduler's first answer (MU_E_IO when it cannot be kept).  Sends nothing yet.  Errors: the shim
 * is not executable (MU_E_NOTFOUND), --run-as/--allow-user/--allow-root without root (MU_E_USAGE),
 * an unknown
 * --run-as user (MU_E_NOTFOUND).  Free with wrk_agent_free.
 */
struct wrk_agent *wrk_agent_new(const struct wrk_config *cfg, struct mu_err *err);

/*
 * One turn of the loop: waits up to max_wait_ms for the scheduler, a child or a signal, then
 * handles what arrived and what is due (HELLO on start, heartbeats, re-registration, grace
 * deadlines).  Returns 1 while running, 0 once SIGTERM/SIGINT (or wrk_agent_stop) asked it to
 * stop, -1 on a fatal error.
 */
int wrk_agent_poll(struct wrk_agent *a, int max_wait_ms, struct mu_err *err);

/* Loops wrk_agent_poll until asked to stop, then wrk_agent_shutdown.  0 or -1 with err. */
int wrk_agent_run(struct wrk_agent *a, struct mu_err *err);

/* Makes the next wrk_agent_poll return 0 (as SIGTERM does). */
void wrk_agent_stop(struct wrk_agent *a);

/*
 * Stops every running task (re-adopted ones too): SIGTERM to each process group, up to
 * WRK_SHUTDOWN_GRACE_MS for their exit files, SIGKILL for the rest; reports each exit with
 * TASK_STATUS (best effort, marked stopped), then says BYE so that the scheduler marks the node
 * down at once.  Records not yet acknowledged stay for the next worker.
 */
void wrk_agent_shutdown(struct wrk_agent *a);

/* Number of tasks in the table (running, and exited or lost unacknowledged); for tests. */
int wrk_agent_task_count(const struct wrk_agent *a);

/*
 * Closes the socket (linger bounded) and the context, restores the signal handlers.  Running
 * tasks are left to their shims (as when the worker crashes), which stop them by themselves
 * once the lease in <state_dir>/lease runs out.
 */
void wrk_agent_free(struct wrk_agent *a);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The worker agent's insides, shared by the files it is cut into, one per object: agent.c (the
 * loop: new, poll, run, shutdown, free; the signal pipe, timers and the spot watcher), tasks.c
 * (the task table and the tasks' files on disk), exits.c (how tasks end: reaping, exit files,
 * repeats until acknowledged, re-adoption at start), ckpt_watch.c (inotify on ckpt/ and tasks/,
 * checkpoint reports), ident.c (whom a task runs as), handlers.c (the scheduler's commands),
 * send.c (the messages to it), lease_watch.c (the agent's side of the lease: its record,
 * renewal, running out) and witness.c (Redis's leader key, read in a thread of its own).
 * worker/wrk.h stays the module's one public header, for main.c and the tests; scripts/lint.sh
 * keeps this one out of other folders (docs/style.md §1.1).
 *
 * Everything here is loop-thread-only, like the agent (wrk.h).  A struct wrk_task pointer is
 * borrowed from the table: valid until the table changes (wrk_task_add, wrk_task_remove,
 * wrk_tasks_evict), which is why eviction waits for the end of a turn.
 */
#ifndef MUSTER_WORKER_INTERNAL_H
#define MUSTER_WORKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/mu.h"
#include "protocol/proto.h"
#include "worker/wrk.h"

#define WRK_MOD             "wrk" /* the module in log lines */
#define WRK_CKPT_POLL_MS    1000  /* checkpoint files re-read this often without inotify */
#define WRK_EXIT_POLL_MS    1000  /* exit files and live shims are checked this often */
#define WRK_RESEND_FIRST_MS 2000  /* an unacknowledged exit is sent again after this, */
#define WRK_RESEND_MAX_MS   60000 /* doubling up to this */
#define WRK_MAX_ALLOW_USERS 64    /* --allow-user entries */
/* The most heartbeats per answer the worker agrees to wait through: it calls the scheduler
 * unreachable after answer_every + 2 silent beats, so this bounds how late it notices. */
#define WRK_ANSWER_EVERY_MAX 4

/* One task of the table: running, or ended (EXITED or LOST) and not yet acknowledged. */
struct wrk_task {
    struct wrk_taskrec rec; /* its record: ref (state RUNNING, EXITED or LOST; pid = its process
                               group id; exit_code, signal, fenced once EXITED), shim_pid,
                               ckpt_signal, grace_s, uid (-1 = the worker's own), GPUs */
    uint64_t exit_order;    /* when EXITED or LOST: larger is newer (eviction, HELLO order) */
    uint64_t kill_at_ms;    /* monotonic; 0 = no SIGKILL pending */
    uint64_t resend_at_ms;  /* monotonic: EXITED and not acknowledged: TASK_STATUS again then */
    uint32_t resend_gap_ms; /* the wait before that */
    char *ckpt_last;        /* owned: the last checkpoint path reported, or NULL */
    char *ckpt_missing;     /* owned: the last reported path found missing here, or NULL */
    uint64_t ckpt_at_ms;    /* wall ms it was written */
};

struct wrk_agent {
    char scheduler[256];      /* --scheduler: one endpoint, or several separated by commas */
    char sched_now[256];      /* the one the socket is connected to now */
    int sched_at;             /* its index in scheduler */
    int nsched;               /* endpoints in scheduler, 1..WRK_SCHED_MAX */
    uint64_t rotated_ms;      /* mono: when the socket last moved on to another endpoint */
    struct proto_curve curve; /* with curve_on: this worker's key pair */
    bool curve_on;            /* CURVE (the schedulers share one key) */
    char curve_server[PROTO_CURVE_KEY_LEN + 1]; /* with curve_on: their public key */
    char node[PROTO_NODE_MAX];
    char pool[PROTO_NODE_MAX];
    char state_dir[PROTO_PATH_MAX]; /* logs/ and ckpt/ */
    char run_dir[PROTO_PATH_MAX];   /* tasks/ and the lease: what lasts only while processes do */
    char addr[128];
    char instance_id[64]; /* sent in HELLO; "" = none (yet: --imds may fill it) */
    int cpus;
    int64_t memory_mb;
    int nlabels;
    struct proto_label labels[PROTO_MAX_LABELS];
    int ngpus;
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    int nislands; /* NVLink islands among gpus: island numbers are 0..nislands-1 */
    bool simulated;

    void *zctx;
    void *sock;

    struct wrk_task *tasks; /* owned; ntasks used of cap */
    int ntasks;
    int cap;
    int nrunning; /* tasks in state RUNNING */
    int nexited;  /* tasks in state EXITED or LOST */
    uint64_t exit_counter;

    uint64_t epoch;      /* highest scheduler epoch seen */
    uint64_t seq;        /* last seq this worker sent */
    uint64_t last_rx_ms; /* monotonic time of the last message from the scheduler */
    uint64_t last_beat_ms;
    bool hello_sent;
    bool quiet; /* "scheduler unreachable" logged, "scheduler back" not yet */
    bool stop;
    bool stopping; /* wrk_agent_shutdown stops the tasks: their exits are marked stopped */

    uint64_t ckpt_poll_ms; /* monotonic time of the last poll (without inotify) */
    uint64_t exit_poll_ms; /* monotonic time of the last sweep of exit files */
    int ino_fd;       /* inotify on <state_dir>/ckpt and <run_dir>/tasks; -1 = poll every 1 s */
    int ckpt_wd;      /* inotify watch on ckpt/ */
    int tasks_wd;     /* inotify watch on tasks/ */
    int nallow;       /* allow[0..nallow-1]: --allow-user */
    int heartbeat_s;  /* the interval the scheduler asked for */
    int answer_every; /* the scheduler answers one heartbeat in this many */
    bool is_root;
    bool allow_root;
    bool lease_out;            /* the lease ran out: logged, and not renewed since */
    bool loading;              /* reading the records at start: the first HELLO reports them */
    char shim[PROTO_PATH_MAX]; /* the muster-shim program */
    struct wrk_shim_server shim_server; /* forks the shims; fd -1 while there is none */
    uint64_t shim_server_retry_ms;      /* monotonic: no new server before this */
    struct wrk_ident run_as;            /* --run-as; name "" = none */
    char allow[WRK_MAX_ALLOW_USERS][64];

    struct wrk_imds *imds; /* owned; NULL without --imds */
    bool identity_applied;
    bool have_spot;
    struct wrk_imds_event spot; /* the latest notice, repeated after each HELLO */
    bool have_rebalance;
    struct wrk_imds_event rebalance;

    struct wrk_lease *lease;            /* owned: <run_dir>/lease, shared with the shims */
    struct wrk_witness *witness;        /* owned; NULL without --redis */
    uint64_t witness_seq;               /* its readings already looked at */
    int witness_said;                   /* enum wrk_witness_seen last logged; 0 = none since
                                           the scheduler last answered */
    struct wrk_sched_clock sched_clock; /* lower bound of the scheduler's clock */
    struct wrk_tombs tombs;             /* tasks a KILL gave up before any BIND */
    char lease_path[PROTO_PATH_MAX];    /* handed to each shim */
    struct wrk_cg_sys cg;               /* the node's cgroups; version 0 = none (process groups) */
    char cg_root[64];                   /* --cgroup-root */
};

/* ---- confine.c: per-task cgroups ---- */

/*
 * Finds the node's cgroups for cfg->cgroup_root (NULL: "muster") into a->cg and a->cg_root; when
 * there are none (not root, nothing mounted, no mkdir), one WARN line says what is missing and
 * what that means, and tasks get their process group only.  Never fails.
 */
void wrk_agent_cgroup_setup(struct wrk_agent *a, const struct wrk_config *cfg);
/* ---- the lease's witness: Redis's <prefix>leader key (worker/witness.c) ---- */

/* What the newest reading of <prefix>leader found. */
enum wrk_witness_seen {
    WRK_WITNESS_UNKNOWN = 0,     /* no reading yet */
    WRK_WITNESS_LEADER = 1,      /* a musterd holds the key (its epoch with it) */
    WRK_WITNESS_NO_LEADER = 2,   /* the key is free: no musterd leads */
    WRK_WITNESS_UNREACHABLE = 3, /* Redis could not be read (or only a replica) */
};

struct wrk_witness;

/*
 * Starts the thread that reads <prefix>leader from the Redis named by url (redis:// or
 * redis+sentinel://, queue/url.c; a read-only ACL user is enough: ROLE and GET).  It connects
 * at its first reading, and reads only while asked (wrk_witness_poll).  NULL with err on a bad
 * URL.  Free with wrk_witness_free (joins the thread).
 */
struct wrk_witness *wrk_witness_new(const char *url, const char *prefix, struct mu_err *err);
void wrk_witness_free(struct wrk_witness *w);
/* Reads every interval_ms from now on; 0 stops reading.  One caller thread. */
void wrk_witness_poll(struct wrk_witness *w, int interval_ms);
/* How many readings so far (one atomic load): the loop looks further only when it moved. */
uint64_t wrk_witness_readings(struct wrk_witness *w);
/*
 * The newest reading: *seq counts the readings so far, *free_sent_ms is when the newest reading
 * that found the key free was sent (monotonic ms, 0 = none yet), *epoch the holder's epoch when
 * a musterd leads, why (size why_size) the failure when unreachable.  Any pointer may be NULL.
 */
enum wrk_witness_seen wrk_witness_get(struct wrk_witness *w,
                                      uint64_t *seq,
                                      uint64_t *free_sent_ms,
                                      uint64_t *epoch,
                                      char *why,
                                      size_t why_size);

/* ---- tasks.c: the table and the tasks' files ---- */

/* The task keyed by ref's (job, task, attempt), or NULL. */
struct wrk_task *wrk_task_find(struct wrk_agent *a, const struct proto_task_ref *ref);
/* The running task whose shim is pid, or NULL. */
struct wrk_task *wrk_task_find_shim(struct wrk_agent *a, pid_t pid);
/*
 * A zeroed entry at the end of the table, for the caller to fill (and count in nrunning or
 * nexited); NULL with err (MU_E_NOMEM) when the table cannot grow.  Other entries may move.
 */
struct wrk_task *wrk_task_add(struct wrk_agent *a, struct mu_err *err);
/* Removes t (and, once it has ended, its record files); the last entry takes its place. */
void wrk_task_remove(struct wrk_agent *a, struct wrk_task *t);
/* Forgets the oldest ended tasks beyond WRK_MAX_EXITED (entries move: end of turn only). */
void wrk_tasks_evict(struct wrk_agent *a);
/* The file "<state>/tasks/<job>.<attempt>.<task><suffix>" of ref into buf ("" if too long). */
void wrk_task_file(const struct wrk_agent *a,
                   const struct proto_task_ref *ref,
                   const char *suffix,
                   char *buf,
                   size_t size);
/* One log line "job=J task=T attempt=A <what>". */
void wrk_task_log(enum mu_log_level level, const struct proto_task_ref *ref, const char *what);

/* ---- shim_server.c: the shim server ---- */

/* The shim server, started when there is none (at most once a second); NULL: execute the shim. */
struct wrk_shim_server *wrk_agent_shim_server(struct wrk_agent *a);
/* The server was reaped with status: said when unexpected; the next task starts another. */
void wrk_agent_shim_server_reaped(struct wrk_agent *a, int status);
/* At the end: closes the server's socket, and reaps it when it leaves within a second. */
void wrk_agent_shim_server_stop(struct wrk_agent *a);

/* ---- exits.c: how tasks end ---- */

/*
 * Looks for running task t's exit file and, when there is one (or the shim is gone without
 * one), marks t EXITED (or LOST) and reports it.  shim_gone: its shim is known to have ended
 * (reaped); otherwise it is looked up in /proc.  True when t no longer runs.
 */
bool wrk_exit_check(struct wrk_agent *a, struct wrk_task *t, bool shim_gone);
/* wrk_exit_check on every running task: the 1 s sweep, which also finds shims gone without an
 * exit file. */
void wrk_exits_scan(struct wrk_agent *a);
/* After inotify on tasks/: every running task's exit file, and nothing in /proc (the sweep's). */
void wrk_exits_read(struct wrk_agent *a);
/* Reaps every shim that ended (waitpid WNOHANG) and reads its exit file at once. */
void wrk_exits_reap(struct wrk_agent *a);
/* TASK_STATUS again for each unacknowledged exit that is due (2 s, doubling to 60 s). */
void wrk_exits_resend(struct wrk_agent *a, uint64_t now);
/* Reads <state>/tasks at start: re-adopts, records ended and lost tasks, clears leftovers. */
void wrk_tasks_adopt(struct wrk_agent *a);

/* ---- ckpt_watch.c: checkpoint reports ---- */

/* Reads t's checkpoint file and reports a path not reported before (CHECKPOINT_DONE). */
void wrk_ckpt_check(struct wrk_agent *a, struct wrk_task *t);
/* wrk_ckpt_check on every running task. */
void wrk_ckpt_check_running(struct wrk_agent *a);

/* ---- watch.c: the inotify fd on ckpt/ and tasks/ ---- */

/* Sets ino_fd, ckpt_wd and tasks_wd; without inotify a warning and ino_fd -1 (polling). */
void wrk_watch_start(struct wrk_agent *a);
/* Drains ino_fd: checks the checkpoint files and exit files its events name. */
void wrk_watch_events(struct wrk_agent *a);

/* ---- ident.c: whom tasks run as ---- */

/* --run-as, --allow-user, --allow-root into a (root only: MU_E_USAGE otherwise). */
int wrk_ident_setup(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err);
/*
 * Whom bind's task runs as: *out filled (name "" = the worker's own ids).  Refusals (MU_E_INVAL,
 * MU_E_NOTFOUND, MU_E_SYS) are BIND_ACK errors the job will show, the node's fault.
 */
int wrk_ident_for_bind(const struct wrk_agent *a,
                       const struct proto_msg *bind,
                       struct wrk_ident *out,
                       struct mu_err *err);

/* ---- handlers.c: the scheduler's commands ---- */

/* Handles m, which arrived at recv_ms (monotonic): epoch fencing, then its type's handler. */
void wrk_handle_message(struct wrk_agent *a, const struct proto_msg *m, uint64_t recv_ms);
/* logread.c: answers a LOG_READ with one LOG_DATA (wrk_log_read). */
void wrk_handle_log_read(struct wrk_agent *a, const struct proto_msg *m);

/* ---- send.c: messages to the scheduler (each stamped with seq, epoch and node) ---- */

/* HELLO with the inventory and the tasks, then the spot notices and checkpoints again. */
void wrk_send_hello(struct wrk_agent *a);
void wrk_send_heartbeat(struct wrk_agent *a);
void wrk_send_task_status(struct wrk_agent *a, const struct proto_task_ref *ref);
/* error NULL: started; else why not, and whether that is the node's fault (else the job's). */
void wrk_send_bind_ack(struct wrk_agent *a,
                       const struct proto_task_ref *ref,
                       const char *error,
                       bool node_fault);
/* SPOT_NOTICE or REBALANCE from a metadata-service event. */
void wrk_send_notice(struct wrk_agent *a, enum proto_type type, const struct wrk_imds_event *ev);
/* CHECKPOINT_DONE with t's last checkpoint path (t->ckpt_last must be set). */
void wrk_send_checkpoint(struct wrk_agent *a, const struct wrk_task *t);
/* A LOG_DATA built by wrk_log_read (stamped here; m stays the caller's). */
void wrk_send_log_data(struct wrk_agent *a, struct proto_msg *m);
/* BYE, at a clean stop once the tasks were stopped: the tasks still in the table, as HELLO
 * lists them (running ones, exits not acknowledged). */
void wrk_send_bye(struct wrk_agent *a);

/* ---- lease_watch.c: the agent's side of the lease ---- */

/* Maps <state>/lease, keeping the lease a previous run left there (MU_E_IO, MU_E_TOOBIG). */
int wrk_agent_lease_setup(struct wrk_agent *a, struct mu_err *err);
/* The lease a HEARTBEAT m carries, renewed when it answers one of ours (wrk_lease_renew). */
void wrk_agent_lease_renew(struct wrk_agent *a, const struct proto_msg *m, uint64_t now);
/* Says SELF-FENCING, once, when the lease has run out with tasks running (or just fenced). */
void wrk_agent_lease_watch(struct wrk_agent *a, uint64_t now);
/* Starts the lease's witness with cfg->redis (none without: said once). */
int wrk_agent_witness_start(struct wrk_agent *a, const struct wrk_config *cfg, struct mu_err *err);
/* Asks the witness to read while the scheduler is silent, and holds the lease on what it saw. */
void wrk_agent_lease_witness(struct wrk_agent *a, uint64_t now);
/* The monotonic ms at which the held lease runs out while tasks run; 0 = nothing to watch. */
uint64_t wrk_agent_lease_deadline(const struct wrk_agent *a, uint64_t now);

#endif

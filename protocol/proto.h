/* SPDX-License-Identifier: MIT */
/*
 * proto: the scheduler <-> worker messages of DESIGN §7.
 *
 * Every message is one msgpack map with at least "v" (PROTO_VERSION), "type" (a string such as
 * "BIND"), "seq" and "epoch"; the remaining keys depend on the type (see protocol/README.md).
 * Decoding is strict and bounded: unknown types, wrong value types, oversized strings or counts,
 * trailing bytes and other versions are errors, never crashes.  Unknown extra keys are ignored so
 * that a newer peer can add fields.
 *
 * Transport: the scheduler binds a ROUTER, each worker connects a DEALER whose identity is its
 * node name.  A ROUTER frame is [identity][payload]; a DEALER frame is [payload].
 */
#ifndef MUSTER_PROTOCOL_PROTO_H
#define MUSTER_PROTOCOL_PROTO_H

#include <stdbool.h>
#include <stdint.h>

#include "common/mu.h"

#define PROTO_VERSION       1
#define PROTO_MAX_MSG_BYTES (4u << 20) /* also ZMQ_MAXMSGSIZE on both sockets */
#define PROTO_MAX_GPUS      64
#define PROTO_MAX_LABELS    8
#define PROTO_MAX_TASKS     1024 /* task refs in one HELLO */
#define PROTO_MAX_ARGS      1024
#define PROTO_MAX_ENV       1024
#define PROTO_MAX_ARG_BYTES (64u << 10) /* one argv or env string */
#define PROTO_NODE_MAX      64          /* node and pool names, NUL included */
#define PROTO_JOB_MAX       48          /* job ids ("1732270000123-0"), NUL included */
#define PROTO_PATH_MAX      1024

enum proto_type {
    PROTO_HELLO = 1,   /* worker -> sched: inventory, labels, tasks it runs; every (re)connect */
    PROTO_HEARTBEAT,   /* both ways: worker alive / scheduler's epoch */
    PROTO_BIND,        /* sched -> worker: start one task */
    PROTO_BIND_ACK,    /* worker -> sched: task started (ok) or why not */
    PROTO_TASK_STATUS, /* worker -> sched: task running / exited */
    PROTO_CHECKPOINT,  /* sched -> worker: send the checkpoint signal to a task */
    PROTO_KILL,        /* sched -> worker: stop a task (signal, grace, SIGKILL) */
    PROTO_CHECKPOINT_DONE, /* worker -> sched: a task wrote a checkpoint */
    PROTO_SPOT_NOTICE,     /* worker -> sched: EC2 interruption notice with a deadline */
    PROTO_REBALANCE,       /* worker -> sched: EC2 rebalance recommendation */
    PROTO_DRAIN,           /* sched -> worker: node drained (informational) */
};

/* "HELLO", …; "UNKNOWN" for anything else. */
const char *proto_type_name(enum proto_type type);

struct proto_gpu {
    int index;         /* nvidia-smi index, or 0..N-1 when simulated */
    char uuid[96];     /* "GPU-…"; "" when simulated */
    char model[96];    /* "NVIDIA H100 80GB HBM3" */
    int64_t memory_mb; /* total memory */
    char pci_bus_id[32];
    int island; /* NVLink island number within the node */
};

struct proto_label {
    char level[32]; /* topology level, e.g. "zone" */
    char value[64]; /* e.g. "us-east-1a" */
};

enum proto_task_state {
    PROTO_TASK_RUNNING = 1,
    PROTO_TASK_EXITED, /* exit_code / signal say how */
    PROTO_TASK_LOST,   /* the worker no longer knows it (e.g. restarted without it) */
};

/* Identifies one task of one attempt; the key every command is idempotent on. */
struct proto_task_ref {
    char job[PROTO_JOB_MAX];
    int task;    /* 0..tasks-1 */
    int attempt; /* 1.. */
    enum proto_task_state state;
    int pid;       /* process group leader while running */
    int exit_code; /* when EXITED and signal == 0 */
    int signal;    /* terminating signal, 0 if it exited */
};

/*
 * One decoded message.  Plain fields hold what every type may carry; the four heap arrays
 * (gpus, tasks, argv, env) are owned by the struct and freed by proto_msg_release.
 */
struct proto_msg {
    int v;
    enum proto_type type;
    uint64_t seq;
    uint64_t epoch;            /* the scheduler's epoch (workers echo the last one they accepted) */
    char node[PROTO_NODE_MAX]; /* sender node name on worker messages */

    /* HELLO */
    char pool[PROTO_NODE_MAX];
    char addr[128]; /* address other nodes reach this one at (MASTER_ADDR) */
    int cpus;
    int64_t memory_mb;
    int ngpus;
    struct proto_gpu *gpus;
    int nlabels;
    struct proto_label labels[PROTO_MAX_LABELS];
    int ntasks;
    struct proto_task_ref *tasks; /* tasks the worker runs now */
    int heartbeat_s;              /* HEARTBEAT from the scheduler: interval the worker should use */

    /* BIND, BIND_ACK, TASK_STATUS, CHECKPOINT, KILL, CHECKPOINT_DONE */
    struct proto_task_ref task;

    /* BIND */
    int world_size;
    int local_rank;
    int local_world_size;
    int node_rank;
    int nnodes;
    char master_addr[128];
    int master_port;
    int nbind_gpus;
    int bind_gpus[PROTO_MAX_GPUS]; /* GPU indices on this node */
    int argc;
    char **argv;
    int nenv;
    char **env; /* "KEY=VALUE" */
    char workdir[PROTO_PATH_MAX];
    char resume_from[PROTO_PATH_MAX];

    /* BIND_ACK */
    bool ok;
    char error[256];

    /* CHECKPOINT, KILL (signal 0 = the default: SIGTERM for KILL) */
    int signal;
    int grace_s;

    /* CHECKPOINT_DONE */
    char path[PROTO_PATH_MAX];
    uint64_t at_ms;

    /* SPOT_NOTICE, REBALANCE */
    char action[16];      /* "terminate" | "stop" | "hibernate" */
    uint64_t deadline_ms; /* wall ms */
};

/* Zeroes m and sets v = PROTO_VERSION. */
void proto_msg_init(struct proto_msg *m, enum proto_type type);
/* Frees the heap arrays and re-inits to an empty message of the same type. */
void proto_msg_release(struct proto_msg *m);

/* Heap arrays: each copies its input; on failure m is unchanged. */
int proto_msg_set_argv(struct proto_msg *m, int argc, const char *const *argv, struct mu_err *err);
int proto_msg_set_env(struct proto_msg *m, int nenv, const char *const *env, struct mu_err *err);
int proto_msg_set_gpus(struct proto_msg *m,
                       int ngpus,
                       const struct proto_gpu *gpus,
                       struct mu_err *err);
int proto_msg_set_tasks(struct proto_msg *m,
                        int ntasks,
                        const struct proto_task_ref *tasks,
                        struct mu_err *err);

/* Appends the msgpack encoding of m to out. */
int proto_msg_encode(const struct proto_msg *m, struct mu_buf *out, struct mu_err *err);

/*
 * Decodes exactly len bytes into out (which the function initialises; release it afterwards in
 * every case).  Errors: MU_E_PROTO with what was wrong ("field 'seq': expected unsigned integer").
 */
int proto_msg_decode(const void *data, size_t len, struct proto_msg *out, struct mu_err *err);

/* ---- ZeroMQ (borrowed void *ctx / void *sock from libzmq) ---- */

/* A ROUTER bound to endpoint, with ZMQ_MAXMSGSIZE, ZMQ_ROUTER_MANDATORY off, linger 0. */
void *proto_router_new(void *ctx, const char *endpoint, struct mu_err *err);
/* A DEALER with identity `node` connected to endpoint, reconnect backoff 100 ms .. 5 s. */
void *proto_dealer_new(void *ctx, const char *endpoint, const char *node, struct mu_err *err);

/* Sends m; identity is the destination node on a ROUTER, NULL on a DEALER.  Never blocks. */
int proto_send(void *sock, const char *identity, const struct proto_msg *m, struct mu_err *err);

/*
 * Receives one message without blocking.  Returns 1 with *out filled (and identity set on a
 * ROUTER, when identity != NULL), 0 when nothing is waiting, -1 when a message arrived but was
 * malformed (it is consumed and dropped; err says why and identity, if any, who sent it).
 */
int proto_recv(
    void *sock, char *identity, size_t identity_size, struct proto_msg *out, struct mu_err *err);

#endif

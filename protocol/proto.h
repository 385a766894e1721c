/* SPDX-License-Identifier: MIT */
/*
 * proto: the scheduler <-> worker messages of docs/design.md §7.
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
#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

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
#define PROTO_LOG_CHUNK_MAX (64u << 10) /* bytes of a task log in one LOG_DATA */

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
    PROTO_LOG_READ,        /* sched -> worker: read a bounded chunk of one task's log */
    PROTO_LOG_DATA,        /* worker -> sched: that chunk, or why there is none */
    PROTO_BYE,             /* worker -> sched: a clean stop; its tasks were stopped and reported */
    PROTO_TYPE_LAST = PROTO_BYE,
};

/* "HELLO", …; "UNKNOWN" for anything else. */
const char *proto_type_name(enum proto_type type);

/* The codec's keys (protocol/codec_fields.c), for tools that hold documents to them
 * (tests/tools/proto_fields.c, protocol/README.md): one entry of a field table. */
enum proto_key_table { PROTO_KEYS_MSG, PROTO_KEYS_TASK_REF, PROTO_KEYS_GPU };
struct proto_key {
    const char *name; /* the msgpack key */
    const char *kind; /* "uint", "int", "str", "bool", or "other" (maps, arrays, ...) */
    int64_t min, max; /* "int": its range */
    size_t cap;       /* "str": the most bytes, NUL not counted */
    unsigned types;   /* bit (1u << type) of each message type whose encoding carries it */
    bool always;      /* written even when zero or empty */
};
/* Entry i of a table into out: true, or false past its end. */
bool proto_key_get(enum proto_key_table table, int i, struct proto_key *out);

/*
 * How often a worker with a witness reads Redis's leader key while its scheduler is silent
 * (worker/witness.c), for a lease of lease_s: a sixth of it, 1 to 5 s.  The scheduler needs it
 * too: a task outlives a scheduler outage only when the key runs out (leader_lease_s), and a
 * reading sees it free, before the lease does (musterd says so at start otherwise).
 */
int proto_witness_interval_ms(int lease_s);

struct proto_gpu {
    int index;         /* nvidia-smi index, or 0..N-1 when simulated */
    char uuid[96];     /* "GPU-…"; "" when simulated */
    char model[96];    /* "NVIDIA H100 80GB HBM3" */
    int64_t memory_mb; /* total memory */
    char pci_bus_id[32];
    int island; /* NVLink island number within the node */
    /* MIG (issue #17; optional keys, absent from older workers and whole GPUs).  A GPU in MIG
     * mode has mig set and is never bound itself; each of its slices is an entry of its own
     * (after the GPUs) with the slice's profile ("3g.40gb"), its "MIG-…" uuid and parent, the
     * index of its GPU.  Every entry's index is its position in the array. */
    bool mig;
    char profile[32];
    int parent;
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
    int pid;         /* process group leader while running */
    int exit_code;   /* when EXITED and signal == 0 */
    int signal;      /* terminating signal, 0 if it exited */
    bool fenced;     /* EXITED after its worker's self-fencing stopped it (not the task's doing) */
    bool oom_killed; /* EXITED after the kernel's OOM killer killed a process of the task's
                        memory cgroup (its memory_mb_per_task) */
    bool stopped;    /* EXITED after its worker's clean stop (SIGTERM) stopped it (not its doing) */
    /* HELLO: the task's newest checkpoint ("" = none) and when it was written (wall ms), so the
     * scheduler knows it before it decides anything about the attempt (see protocol/README.md). */
    char checkpoint[PROTO_PATH_MAX];
    uint64_t checkpoint_at_ms;
};

/*
 * One decoded message.  Plain fields hold what every type may carry; the heap arrays (gpus,
 * tasks, argv, env, data) are owned by the struct and freed by proto_msg_release.
 */
struct proto_msg {
    int v;
    enum proto_type type;
    uint64_t seq;
    uint64_t epoch;            /* the scheduler's epoch (workers echo the last one they accepted) */
    char node[PROTO_NODE_MAX]; /* sender node name on worker messages */
    uint64_t sent_ms;          /* the sender's monotonic clock when it sent this (0 = not given;
                                  the scheduler sets it): a worker's lower bound of the
                                  scheduler's clock, see expires_ms */

    /* HELLO */
    char pool[PROTO_NODE_MAX];
    char addr[128];       /* address other nodes reach this one at (MASTER_ADDR) */
    char instance_id[64]; /* EC2 instance id ("i-..."); "" = not given (optional: older
                             workers send none) */
    char confinement[16]; /* HELLO: what keeps a task's processes together: "cgroup-v1",
                             "cgroup-v2" or "pgroup" (its process group only); "" = not said
                             (an older worker) */
    int cpus;
    int64_t memory_mb;
    int ngpus;
    struct proto_gpu *gpus;
    int nlabels;
    struct proto_label labels[PROTO_MAX_LABELS];
    int ntasks;
    struct proto_task_ref *tasks; /* tasks the worker runs now (HELLO, HEARTBEAT), or still
                                     knows as it leaves (BYE: running ones, unacknowledged exits) */
    int heartbeat_s;              /* HEARTBEAT from the scheduler: interval the worker should use */
    int lease_s;      /* HEARTBEAT from the scheduler: its node_lost_after_s; a worker whose lease
                         is not renewed for this long stops its tasks (0 = no lease) */
    int answer_every; /* HEARTBEAT from the scheduler: it answers one in this many of the worker's
                         heartbeats (0 or 1 = each); from a worker: the count it last heard and
                         waits for (it calls the scheduler unreachable after answer_every + 2
                         silent beats).  The scheduler leaves heartbeats unanswered only for a
                         worker that says its own count back. */
    uint64_t echo_ms; /* HELLO and HEARTBEAT from a worker: its monotonic clock at send; the
                         scheduler's HEARTBEAT answer carries it back, which renews the worker's
                         lease until echo_ms + lease_s (a stale answer renews nothing) */

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
    char job_user[64];   /* the job's proven user ("" = none: single-user mode, docs/security.md
                            §3): a root worker started with --allow-user USER runs the task as
                            that user */
    uint64_t expires_ms; /* in the scheduler's clock (sent_ms's): after this the scheduler has
                            given the attempt up and the task must not start; 0 = no bound */
    int cpus_per_task;   /* the job's cpus_per_task: a worker with cgroups enforces it
                            (0 = not asked) */
    int64_t memory_mb_per_task; /* the job's memory_mb_per_task, enforced likewise (0 = none) */

    /* BIND_ACK */
    bool ok;
    char error[256];
    bool node_fault; /* !ok because of the node (identity, state dir, GPUs, lease), not the job:
                        the scheduler avoids the node and does not count it against max_retries */

    /* CHECKPOINT, KILL (signal 0 = the default: SIGTERM for KILL) */
    int signal;
    int grace_s;

    /* CHECKPOINT_DONE */
    char path[PROTO_PATH_MAX];
    uint64_t at_ms;

    /* SPOT_NOTICE, REBALANCE */
    char action[16];      /* "terminate" | "stop" | "hibernate" */
    uint64_t deadline_ms; /* wall ms */

    /* LOG_READ, LOG_DATA (task names the log; LOG_DATA's path is the file the worker read) */
    char req[PROTO_JOB_MAX]; /* the request's id, echoed back (musterd's log request entry) */
    char stream[8];          /* "out" (stdout) or "err" (stderr) */
    uint64_t offset;         /* byte offset in the file the chunk starts at */
    int max_bytes;           /* LOG_READ: at most this many bytes (1..PROTO_LOG_CHUNK_MAX) */
    uint64_t size;           /* LOG_DATA: the file's size when it was read */
    bool absent;             /* LOG_DATA, !ok: the file does not exist (not yet, or not here) */
    char *data;              /* LOG_DATA: heap, data_len bytes (binary, not NUL-terminated) */
    size_t data_len;         /* 0..PROTO_LOG_CHUNK_MAX */
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

/* Copies len bytes (at most PROTO_LOG_CHUNK_MAX) into m->data; on failure m is unchanged. */
int proto_msg_set_data(struct proto_msg *m, const void *data, size_t len, struct mu_err *err);

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

/*
 * ---- CURVE: encryption and worker authentication (protocol/README.md "CURVE") ----
 *
 * Keys are Z85 text of PROTO_CURVE_KEY_LEN characters (32 bytes).  The scheduler holds a key
 * pair and an allow-list of worker public keys, enforced by a ZAP handler (struct proto_zap) in
 * the scheduler's own ZeroMQ context; each worker holds its own key pair and the scheduler's
 * public key.  Off (plain TCP) unless the daemons are given keys.
 */
#define PROTO_CURVE_KEY_LEN 40

struct proto_curve {
    char public_key[PROTO_CURVE_KEY_LEN + 1];
    char secret_key[PROTO_CURVE_KEY_LEN + 1];
};

/* True when this libzmq was built with CURVE (zmq_has("curve")). */
bool proto_curve_available(void);
/* True for exactly PROTO_CURVE_KEY_LEN characters of the Z85 alphabet that decode. */
bool proto_curve_key_valid(const char *text);
/* A fresh key pair (libsodium's random source, through zmq_curve_keypair). */
int proto_curve_keypair(struct proto_curve *out, struct mu_err *err);
/*
 * Reads a secret key file: one Z85 key on a line, '#' comment lines and blank lines allowed.
 * The file must be a regular file that neither group nor others can access (mode 0600 or
 * stricter), else MU_E_CONFIG naming the mode and the chmod that fixes it.  Fills both keys of
 * out (the public one derived with zmq_curve_public).
 */
int proto_curve_load_secret(const char *path, struct proto_curve *out, struct mu_err *err);
/*
 * A public key given as text: exactly PROTO_CURVE_KEY_LEN Z85 characters are the key itself,
 * anything else names a file holding one key (comments allowed).  out gets the key and a NUL
 * (out_size > PROTO_CURVE_KEY_LEN).
 */
int proto_curve_load_public(const char *key_or_path,
                            char *out,
                            size_t out_size,
                            struct mu_err *err);
/*
 * Writes keys as secret_path (mode 0600, created exclusively: an existing file is an error) and
 * public_path (mode 0644, public key only), the formats the loaders read.
 */
int proto_curve_save(const struct proto_curve *keys,
                     const char *secret_path,
                     const char *public_path,
                     struct mu_err *err);

/*
 * proto_router_new with CURVE server keys (NULL = plain, as proto_router_new).  Create the
 * struct proto_zap in the same ctx first: without a ZAP handler libzmq lets any key in.
 */
void *proto_router_new_curve(void *ctx,
                             const char *endpoint,
                             const struct proto_curve *server,
                             struct mu_err *err);
/*
 * proto_dealer_new with the worker's CURVE key pair and the scheduler's public key (both NULL =
 * plain, as proto_dealer_new; one without the other is MU_E_INVAL).
 */
void *proto_dealer_new_curve(void *ctx,
                             const char *endpoint,
                             const char *node,
                             const struct proto_curve *client,
                             const char *server_public,
                             struct mu_err *err);

/* One allow-list line: a worker public key, optionally bound to a node name. */
struct proto_allow {
    char key[PROTO_CURVE_KEY_LEN + 1];
    char node[PROTO_NODE_MAX]; /* "" = any node name */
};

/*
 * Parses an allow-list: one "KEY" or "NODE KEY" per line, blank lines, '#' comment lines and
 * "# ..." after the entry.  Either every entry names its node or none does (an unbound key could
 * otherwise take a bound node's name).  origin names the text in errors ("allow.txt:3: ...").
 * *out is a heap array of *count entries (free() it); NULL and 0 for a list without entries.
 */
int proto_allow_parse(
    const char *text, const char *origin, struct proto_allow **out, int *count, struct mu_err *err);

/*
 * The ZAP handler (ZeroMQ RFC 27) of a CURVE scheduler: a REP socket on inproc://zeromq.zap.01
 * in ctx, answered from the daemon's own loop.  A CURVE client whose key is in the allow-list is
 * accepted (200) with ZAP user id "node:NAME" (bound) or "key:KEY"; proto_recv then drops
 * messages from a bound key under another node name.  Any other client is refused (400) and
 * logged, at most once a minute per key, with its key and address.  Until the loop answers, a
 * connecting worker's handshake waits.
 */
struct proto_zap;

/* Loads the allow-list from allow_path and binds the handler.  Free with proto_zap_free (before
 * zmq_ctx_term: the socket belongs to ctx). */
struct proto_zap *proto_zap_new(void *ctx, const char *allow_path, struct mu_err *err);
void proto_zap_free(struct proto_zap *z);
/* Keys in the allow-list. */
int proto_zap_count(const struct proto_zap *z);
/* The REP socket to poll for ZMQ_POLLIN (borrowed); NULL when z is NULL. */
void *proto_zap_socket(const struct proto_zap *z);
/*
 * For a zmq_poll loop: appends the handler's socket (ZMQ_POLLIN) at items[nitems] and returns
 * the new count; returns nitems unchanged when z is NULL.  items must have room for one more.
 */
int proto_zap_poll_add(const struct proto_zap *z, zmq_pollitem_t *items, int nitems);
/*
 * Answers every request waiting, without blocking; returns how many it answered (0 when z is
 * NULL).  Cheap enough to call on every turn of the loop.
 */
int proto_zap_serve(struct proto_zap *z);
/* Clients refused since proto_zap_new. */
unsigned long proto_zap_refused(const struct proto_zap *z);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * sched: the placement core (DESIGN §4), a pure library.
 *
 * A struct sched_cluster is a snapshot of pools and nodes with their free GPUs, CPUs and memory.
 * sched_place answers "where would this gang go" without changing anything; sched_cluster_commit
 * and sched_cluster_release apply or undo a decision.  No sockets, no Redis, no clock, no logs:
 * the daemon, the tests and the benchmarks drive the same code, and time (when a later rule
 * needs it) is a parameter.
 *
 * A gang is placed all-or-nothing: either every task gets a node and GPUs, or nothing is chosen.
 * It never straddles capacity types; capacity types are tried in the request's order, cheapest
 * pool first within a type.  A required topology level keeps every task in one domain of that
 * level; among fitting domains the one with the least free GPUs wins (best fit).
 */
#ifndef MUSTER_SCHEDULER_SCHED_H
#define MUSTER_SCHEDULER_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "common/mu.h"

#define SCHED_MAX_GPUS_NODE 64 /* a node's GPUs fit one uint64_t mask */
#define SCHED_MAX_LEVELS    6
#define SCHED_NAME_MAX      64

enum sched_capacity { SCHED_SPOT = 0, SCHED_ON_DEMAND = 1 };

enum sched_node_state {
    SCHED_NODE_READY = 0,
    SCHED_NODE_CORDONED,    /* operator: no new work */
    SCHED_NODE_DRAINING,    /* operator: no new work, running work finishes */
    SCHED_NODE_TERMINATING, /* spot notice: going away */
    SCHED_NODE_LOST,        /* heartbeats missed */
};

const char *sched_node_state_name(enum sched_node_state s); /* "ready", … */

struct sched_pool {
    char name[SCHED_NAME_MAX];
    enum sched_capacity capacity;
    char gpu_type[SCHED_NAME_MAX];
    double price_per_hour; /* per node */
    int max_gpus;          /* 0 = no cap */
};

struct sched_node_spec {
    char name[SCHED_NAME_MAX];
    int pool;  /* index into the cluster's pools */
    int ngpus; /* 0..SCHED_MAX_GPUS_NODE */
    int cpus;
    int64_t memory_mb;
    int nlabels;                                   /* must equal the cluster's level count */
    char labels[SCHED_MAX_LEVELS][SCHED_NAME_MAX]; /* one value per topology level */
};

struct sched_cluster;

/*
 * A cluster with the given pools (copied) and topology level count.  Free with
 * sched_cluster_free.  NULL with err on bad arguments or no memory.
 */
struct sched_cluster *sched_cluster_new(const struct sched_pool *pools,
                                        int npools,
                                        int nlevels,
                                        struct mu_err *err);
void sched_cluster_free(struct sched_cluster *c);

/* Adds a node in state READY with everything free; returns its index (stable) or -1 with err. */
int sched_cluster_node_add(struct sched_cluster *c,
                           const struct sched_node_spec *spec,
                           struct mu_err *err);
/* Index of the node called name, or -1. */
int sched_cluster_node_find(const struct sched_cluster *c, const char *name);
int sched_cluster_node_count(const struct sched_cluster *c);
/* Borrowed, valid until the cluster is freed. */
const struct sched_node_spec *sched_cluster_node_spec(const struct sched_cluster *c, int node);
const struct sched_pool *sched_cluster_pool(const struct sched_cluster *c, int pool);
int sched_cluster_pool_count(const struct sched_cluster *c);

void sched_cluster_node_set_state(struct sched_cluster *c, int node, enum sched_node_state s);
enum sched_node_state sched_cluster_node_state(const struct sched_cluster *c, int node);
int sched_cluster_node_gpus_free(const struct sched_cluster *c, int node);
int sched_cluster_pool_gpus_used(const struct sched_cluster *c, int pool);

/* What a gang asks for. */
struct sched_request {
    int tasks;
    int gpus_per_task; /* 0..SCHED_MAX_GPUS_NODE */
    int cpus_per_task; /* 0 = not asked */
    int64_t memory_mb_per_task;
    const char *gpu_type; /* NULL or "" = any (borrowed for the call) */
    int ncapacity;        /* 1..2 */
    enum sched_capacity capacity[2];
    int required_level;  /* -1 none; 0..nlevels-1 a topology level; nlevels = one node */
    int preferred_level; /* -1 none; same range */
};

/* One task's place: a node and the GPUs (bit i = GPU index i of that node). */
struct sched_slot {
    int node;
    uint64_t gpus;
};

/*
 * Finds a place for every task of r, or for none.  slots must hold r->tasks entries.
 * Returns 1 and fills slots when placed; 0 when the gang does not fit now, with a short reason
 * a user can act on in reason (e.g. "needs 4x8 GPUs on spot or on-demand; at most 3 fit now").
 * Pure: c is not changed.
 */
int sched_place(const struct sched_cluster *c,
                const struct sched_request *r,
                struct sched_slot *slots,
                char *reason,
                size_t reason_size);

/* Marks slots as used (commit) or free again (release).  The slots must come from sched_place
 * on this cluster (commit) or from a matching commit (release). */
void sched_cluster_commit(struct sched_cluster *c,
                          const struct sched_request *r,
                          const struct sched_slot *slots);
void sched_cluster_release(struct sched_cluster *c,
                           const struct sched_request *r,
                           const struct sched_slot *slots);

#endif

/* SPDX-License-Identifier: MIT */
/* scheduler's cross-file definitions; never included outside scheduler/ (a CI grep checks). */
#ifndef MUSTER_SCHEDULER_INTERNAL_H
#define MUSTER_SCHEDULER_INTERNAL_H

#include "scheduler/sched.h"

struct sched_node {
    struct sched_node_spec spec;
    enum sched_node_state state;
    uint64_t gpus_all;  /* mask of the node's GPUs */
    uint64_t gpus_used; /* subset of gpus_all */
    int cpus_used;
    int64_t memory_mb_used;
};

struct sched_cluster {
    struct sched_pool *pools;
    int npools;
    int *pool_gpus_used; /* per pool, for max_gpus caps */
    int nlevels;
    struct sched_node *nodes;
    int nnodes;
    int cap_nodes;
};

#endif

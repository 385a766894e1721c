/* SPDX-License-Identifier: MIT */
/*
 * cfg: the cluster/scheduler configuration of DESIGN §2a, loaded from JSON with cJSON.
 *
 * struct cfg is a plain value record (no heap members), so it can be copied and freed with the
 * struct that holds it.  Loading is strict: unknown keys, wrong types and out-of-range values are
 * errors whose message starts with the key path, e.g.
 *   pools[1].capacity: expected "spot" or "on-demand", got 'spt'
 */
#ifndef MUSTER_CONFIG_CFG_H
#define MUSTER_CONFIG_CFG_H

#include "common/mu.h"

#define CFG_MAX_POOLS  64
#define CFG_MAX_QUEUES 64
#define CFG_MAX_LEVELS 6
#define CFG_NAME_MAX   64 /* pool, queue, instance and gpu type names, NUL included */
#define CFG_LEVEL_MAX  32 /* topology level names, NUL included */
#define CFG_URL_MAX    256
#define CFG_FILE_MAX   (1u << 20) /* a config file larger than this is an error */

enum cfg_capacity { CFG_CAPACITY_SPOT = 0, CFG_CAPACITY_ON_DEMAND = 1 };

struct cfg_pool {
    char name[CFG_NAME_MAX];
    enum cfg_capacity capacity;
    char instance_type[CFG_NAME_MAX];
    char gpu_type[CFG_NAME_MAX];
    int gpus_per_node;     /* 1..64 */
    double price_per_hour; /* per node, >= 0 */
    int max_gpus;          /* cap on GPUs in use in this pool; 0 = no cap */
};

#define CFG_QUOTA_MAX                                                           \
    1000000 /* GPUs: a quota, borrow_limit or lend_limit above this is an error \
             */

struct cfg_queue {
    char name[CFG_NAME_MAX];
    int weight;                /* 1..1000 */
    bool has_quota;            /* false: not limited (best effort), as before quotas */
    int quota[2];              /* nominal GPUs by enum cfg_capacity; a type not named is 0 */
    char cohort[CFG_NAME_MAX]; /* "" = none; queues of one cohort lend each other idle quota */
    int borrow_limit;          /* GPUs it may use beyond its quota; -1 = no limit */
    int lend_limit;            /* of its unused quota, GPUs others may use; -1 = all of it */
};

struct cfg {
    char redis[CFG_URL_MAX];       /* "redis://[user:pass@]host:port[/db]" */
    char bind[CFG_URL_MAX];        /* ZeroMQ endpoint the scheduler binds, "tcp://127.0.0.1:7070" */
    char metrics[CFG_URL_MAX];     /* "ADDR:PORT" for /metrics; "" = off */
    char key_prefix[CFG_NAME_MAX]; /* "muster:" */
    int nlevels;                   /* topology levels, widest first; node is implicit below */
    char levels[CFG_MAX_LEVELS][CFG_LEVEL_MAX];
    int npools;
    struct cfg_pool pools[CFG_MAX_POOLS];
    int nqueues; /* always >= 1: "default" exists when the file names no queues */
    struct cfg_queue queues[CFG_MAX_QUEUES];
    int heartbeat_s;            /* worker heartbeat interval, 1..60 */
    int node_lost_after_s;      /* heartbeats missed this long: node lost, > heartbeat_s */
    int spot_cooldown_s;        /* avoid a pool this long after an interruption, 0..86400 */
    int min_runtime_s;          /* no preemption this soon after start, 0..86400 */
    int bind_timeout_s;         /* BIND_ACK deadline before the gang is rolled back, 1..600 */
    int kill_grace_s;           /* SIGTERM to SIGKILL on KILL, 0..3600 */
    int default_time_limit_s;   /* the limit of jobs without time_limit_s (enforced), 1..31536000;
                                   <= max_time_limit_s when that is set */
    int max_time_limit_s;       /* a spec asking for more is rejected; 0 = no maximum */
    int events_max;             /* approximate cap on the events stream length, >= 1000 */
    int retry_backoff_s;        /* wait before the first rerun of a failed gang, doubling per
                                   failure; 0 = rerun at once */
    int retry_backoff_max_s;    /* cap on that wait, >= retry_backoff_s */
    int fair_share_half_life_s; /* queue usage halves in this time (docs/fair-share.md), 60..1 y */
    int consolidate_after_s;    /* a node without tasks this long is releasable, 0..604800 */
    int spot_return_horizon_s;  /* back to spot: the most run time a move may count on saving;
                                   0 = gangs stay on the on-demand capacity they fell back to */
    int spot_return_overhead_s; /* back to spot: what a restart costs, in run time, 0..86400 */
};

/* Fills every field with its default (DESIGN §2a); one pool-less cluster, queue "default". */
void cfg_init_defaults(struct cfg *c);

/*
 * Parses JSON text into c, starting from the defaults.  On failure c is left with the defaults
 * and err names the key path and what was expected.
 */
int cfg_parse(struct cfg *c, const char *json, size_t len, struct mu_err *err);

/* Reads and parses a file (at most CFG_FILE_MAX bytes); errors are prefixed with the path. */
int cfg_load_file(struct cfg *c, const char *path, struct mu_err *err);

/* The first top-level key (or "pools", "topology_levels") whose value differs between a and b,
 * leaving "queues" aside; NULL when only the queues differ (a reload may apply them). */
const char *cfg_diff_beyond_queues(const struct cfg *a, const struct cfg *b);

/* Borrowed pointers into c, or NULL. */
const struct cfg_pool *cfg_pool_find(const struct cfg *c, const char *name);
const struct cfg_queue *cfg_queue_find(const struct cfg *c, const char *name);
/* Index of a topology level ("zone" -> 0), nlevels for "node", -1 if unknown. */
int cfg_level_index(const struct cfg *c, const char *level);

const char *cfg_capacity_name(enum cfg_capacity cap);             /* "spot" | "on-demand" */
int cfg_capacity_parse(const char *text, enum cfg_capacity *out); /* 0 or -1 */

#endif

/* SPDX-License-Identifier: MIT */
/*
 * cfg: the cluster/scheduler configuration of docs/design.md §2a, loaded from JSON with cJSON.
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

/* "redis": room for a redis+sentinel:// URL that names 8 Sentinels and credentials. */
#define CFG_REDIS_URL_MAX 1024

enum cfg_capacity { CFG_CAPACITY_SPOT = 0, CFG_CAPACITY_ON_DEMAND = 1 };

struct cfg_pool {
    char name[CFG_NAME_MAX];
    enum cfg_capacity capacity;
    char instance_type[CFG_NAME_MAX];
    char gpu_type[CFG_NAME_MAX];
    int gpus_per_node;     /* 1..64 */
    double price_per_hour; /* per node, >= 0 */
    int max_gpus;          /* cap on GPUs in use in this pool; 0 = no cap */
    bool shared;           /* time-sliced GPUs: gpu_milli jobs share them (no isolation) */
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

/*
 * What an EC2 instance topology import (musterctl topology import, docs/deploy.md) sets: the
 * topology level that each layer of an instance's NetworkNodes takes, top layer first, and the
 * level that takes its AvailabilityZone.  Levels not named here keep the worker's labels.
 */
struct cfg_instance_topology {
    int nlayers;                                /* NetworkNodes layers mapped; 0 = none */
    char layers[CFG_MAX_LEVELS][CFG_LEVEL_MAX]; /* level of NetworkNodes[i]; "" = not used */
    char availability_zone[CFG_LEVEL_MAX];      /* level of AvailabilityZone; "" = none */
};

/* What musterd does with a job whose dependency can never be met (config "dependency_never_met"):
 * cancel it with the reason, and its own dependents in turn (the default), or leave it PENDING
 * with the reason until someone cancels it (Slurm's default, kill_invalid_depend off). */
enum cfg_never_met { CFG_NEVER_MET_CANCEL, CFG_NEVER_MET_PEND };

struct cfg {
    /* redis:// or redis+sentinel://, as checked by mu_redis_url_parse (the one grammar) */
    char redis[CFG_REDIS_URL_MAX];
    char bind[CFG_URL_MAX];        /* ZeroMQ endpoint the scheduler binds, "tcp://127.0.0.1:7070" */
    char metrics[CFG_URL_MAX];     /* "ADDR:PORT" for /metrics; "" = off */
    char key_prefix[CFG_NAME_MAX]; /* "muster:" */
    int nlevels;                   /* topology levels, widest first; node is implicit below */
    char levels[CFG_MAX_LEVELS][CFG_LEVEL_MAX];
    struct cfg_instance_topology instance_topology; /* "instance_topology"; all empty = the
                                                       import is off */
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
    int max_array_size;         /* elements of a job array at most (spec "array"), default 10000 */
    int leader_lease_s;         /* musterd's leader lease TTL, 2..60, default 5: a standby takes
                                   over within this plus 1 s of the leader's death (issue #14) */
    int retry_backoff_s;        /* wait before the first rerun of a failed gang, doubling per
                                   failure; 0 = rerun at once */
    int retry_backoff_max_s;    /* cap on that wait, >= retry_backoff_s */
    int fair_share_half_life_s; /* queue usage halves in this time (docs/fair-share.md), 60..1 y */
    int consolidate_after_s;    /* a node without tasks this long is releasable, 0..604800 */
    int spot_return_horizon_s;  /* back to spot: the most run time a move may count on saving;
                                   0 = gangs stay on the on-demand capacity they fell back to */
    int spot_return_overhead_s; /* back to spot: what a restart costs, in run time, 0..86400 */
    enum cfg_never_met never_met; /* "dependency_never_met": what a dependent whose dependency
                                     can never be met becomes (issue #43) */
    int keep_finished_s; /* a finished job leaves Redis this long after it ended, once it is
                            in the history (issue #47); 0 = never; default 86400 */
    char history_sqlite[CFG_URL_MAX]; /* "history": {"sqlite": PATH}; "" = no history (finished
                                         jobs then stay in Redis for ever) */
};

/*
 * The top-level keys, one table (config/cfg.c, cfg_keys) that drives the parser (parse.c), the
 * defaults (cfg_init_defaults), the reload rule (cfg_diff_beyond_queues) and, through
 * tests/docs/check-config-keys.sh, README's "Configuration" table.  A new key is one row there.
 */
enum cfg_key_type {
    CFG_KEY_INT,               /* an int field of struct cfg, in [min, max] */
    CFG_KEY_REDIS,             /* a Redis URL, as mu_redis_url_parse takes it (char array) */
    CFG_KEY_ENDPOINT,          /* a ZeroMQ endpoint, tcp:// or ipc:// (char array) */
    CFG_KEY_METRICS,           /* "ADDR:PORT", or "" for none (char array) */
    CFG_KEY_NAME,              /* a name, as key_prefix (char array) */
    CFG_KEY_LEVELS,            /* topology_levels */
    CFG_KEY_INSTANCE_TOPOLOGY, /* instance_topology */
    CFG_KEY_POOLS,             /* pools */
    CFG_KEY_QUEUES,            /* queues */
    CFG_KEY_ACCESS,            /* access: an object, judged by access/ */
    CFG_KEY_NEVER_MET,         /* dependency_never_met */
    CFG_KEY_HISTORY,           /* history */
};

struct cfg_key {
    const char *name; /* the JSON key, e.g. "heartbeat_s" */
    enum cfg_key_type type;
    size_t offset; /* of the field in struct cfg (an int, or a char array of size bytes) */
    size_t size;   /* of the char array; 0 for other types */
    int def;       /* CFG_KEY_INT: default, min and max */
    int min;
    int max;
    const char *def_text; /* string types: the default value; others but INT: the default as
                             README writes it ("[]", "none"); NULL for INT (def) */
    bool reload;          /* a reload (SIGHUP, musterctl reload) may change it */
};

#define CFG_NKEYS 29

/* The table, in the order the parser lists keys in its hints. */
extern const struct cfg_key cfg_keys[CFG_NKEYS];

/* Index of name in cfg_keys, or -1. */
int cfg_key_index(const char *name);

/* Fills every field with its default (docs/design.md §2a); one pool-less cluster, queue "default".
 */
void cfg_init_defaults(struct cfg *c);

/*
 * Parses JSON text into c, starting from the defaults.  On failure c is left with the defaults
 * and err names the key path and what was expected.
 */
int cfg_parse(struct cfg *c, const char *json, size_t len, struct mu_err *err);

/* Reads and parses a file (at most CFG_FILE_MAX bytes); errors are prefixed with the path. */
int cfg_load_file(struct cfg *c, const char *path, struct mu_err *err);

/* The first top-level key, in cfg_keys order, that a reload may not change (reload false) whose
 * value differs between a and b; NULL when only the others differ (a reload may apply them). */
const char *cfg_diff_beyond_queues(const struct cfg *a, const struct cfg *b);

/* True when the config maps at least one level for instance topology imports. */
bool cfg_instance_topology_is_set(const struct cfg *c);

/* Borrowed pointers into c, or NULL. */
const struct cfg_pool *cfg_pool_find(const struct cfg *c, const char *name);
const struct cfg_queue *cfg_queue_find(const struct cfg *c, const char *name);
/* Index of a topology level ("zone" -> 0), nlevels for "node", -1 if unknown. */
int cfg_level_index(const struct cfg *c, const char *level);

const char *cfg_capacity_name(enum cfg_capacity cap);             /* "spot" | "on-demand" */
int cfg_capacity_parse(const char *text, enum cfg_capacity *out); /* 0 or -1 */

/* ---- EC2 instance topology files (config/ec2topo.c) ---- */

#define CFG_TOPO_FILE_MAX      (16u << 20) /* a larger describe-instance-topology file is refused */
#define CFG_TOPO_MAX_INSTANCES 16384       /* per file; imports add up, so split bigger fleets */
#define CFG_TOPO_MAX_NODES     CFG_MAX_LEVELS /* NetworkNodes layers (AWS reports 3 or 4) */
#define CFG_TOPO_ID_MAX        64             /* ids, zones and node ids, NUL included */

/* One entry of the Instances array of `aws ec2 describe-instance-topology`.  Plain record. */
struct cfg_topo_instance {
    char instance_id[CFG_TOPO_ID_MAX];       /* "i-1111111111example" */
    char instance_type[CFG_TOPO_ID_MAX];     /* "" when absent, as every field below */
    char availability_zone[CFG_TOPO_ID_MAX]; /* "us-west-2a" */
    char zone_id[CFG_TOPO_ID_MAX];           /* "usw2-az2" */
    char capacity_block_id[CFG_TOPO_ID_MAX];
    char group_name[256];                            /* placement group, up to 255 characters */
    int nnodes;                                      /* 1..CFG_TOPO_MAX_NODES */
    char nodes[CFG_TOPO_MAX_NODES][CFG_TOPO_ID_MAX]; /* NetworkNodes, top layer first */
};

struct cfg_topo;

/*
 * Parses the JSON that `aws ec2 describe-instance-topology` prints: an object with a non-empty
 * array "Instances" (at most CFG_TOPO_MAX_INSTANCES) and an optional "NextToken".  Each instance
 * needs "InstanceId" and a non-empty "NetworkNodes" array of ids; "InstanceType",
 * "AvailabilityZone", "ZoneId", "GroupName" and "CapacityBlockId" are optional strings (null
 * allowed); ids and zones are names of [A-Za-z0-9._:-] of at most 63 bytes.  Keys muster does
 * not know are ignored (AWS adds fields), a repeated InstanceId is an error.  Errors
 * (MU_E_CONFIG, MU_E_TOOBIG, MU_E_NOMEM) name the key path and, for a problem in the text, the
 * line: "Instances[2].NetworkNodes: empty (the instance is not running, or its type reports no
 * topology)".  Returns the parsed file (cfg_topo_free) or NULL with err.
 */
struct cfg_topo *cfg_topo_parse(const char *json, size_t len, struct mu_err *err);
void cfg_topo_free(struct cfg_topo *t);
int cfg_topo_count(const struct cfg_topo *t);
/* Instance i (0..count-1), in file order; borrowed until cfg_topo_free. */
const struct cfg_topo_instance *cfg_topo_get(const struct cfg_topo *t, int i);
/* The file's NextToken when it had a non-empty one (the answer may have more pages), else "". */
const char *cfg_topo_next_token(const struct cfg_topo *t);

/*
 * One instance as a compact JSON object of the same shape (the keys above, empty ones left
 * out): how an import is passed to musterd and kept in Redis.  Free with free(); NULL with err
 * on no memory.  cfg_topo_instance_parse reads it back (the same checks as one entry of a file;
 * 0 or -1 with err, *out untouched).
 */
char *cfg_topo_instance_format(const struct cfg_topo_instance *in, struct mu_err *err);
int cfg_topo_instance_parse(const char *json,
                            size_t len,
                            struct cfg_topo_instance *out,
                            struct mu_err *err);

/*
 * The topology labels c's instance_topology gives instance in: for each level index l of
 * c->levels, set[l] says whether the import sets it and labels[l] is the value.  -1 with err
 * (MU_E_CONFIG) when the config has no instance_topology, or in lacks what it maps: fewer
 * NetworkNodes than the mapped layers, or no AvailabilityZone when one is mapped; nothing is
 * set then.
 */
int cfg_topo_labels(const struct cfg *c,
                    const struct cfg_topo_instance *in,
                    char (*labels)[CFG_TOPO_ID_MAX],
                    bool *set,
                    struct mu_err *err);

#endif

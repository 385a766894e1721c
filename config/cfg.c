/* SPDX-License-Identifier: MIT */
/*
 * cfg: defaults, file loading and lookups for the cluster config (docs/design.md §2a).
 *
 * struct cfg is a plain value record with fixed-size arrays, so lookups return borrowed pointers
 * that live as long as the struct itself.  The JSON parser lives in parse.c (with cfg_load_file)
 * and calls this file, never the other way round; this file holds the parts that do not touch
 * JSON: the one table of top-level keys (cfg_keys: type, default, bounds, whether a reload may
 * change it), the defaults and the reload rule read off it, and the lookups.
 */
#include "config/cfg.h"

#include <stddef.h>
#include <string.h>

#include "common/mu_banned.h"

#define INT_KEY(field, def_, min_, max_)                                                           \
    {                                                                                              \
        .name = #field, .type = CFG_KEY_INT, .offset = offsetof(struct cfg, field), .def = (def_), \
        .min = (min_), .max = (max_)                                                               \
    }
#define STR_KEY(field, type_, def_)                                             \
    {                                                                           \
        .name = #field, .type = (type_), .offset = offsetof(struct cfg, field), \
        .size = sizeof(((struct cfg *)0)->field), .def_text = (def_)            \
    }
#define OTHER_KEY(name_, type_, def_, reload_)                                    \
    {                                                                             \
        .name = (name_), .type = (type_), .def_text = (def_), .reload = (reload_) \
    }

/*
 * Every top-level key.  The order is the reload rule's (the first key that differs is the one a
 * refused reload names) and the parser's hints'.  Only "queues" and "access" may change on a
 * reload; musterd keeps its running redis, bind and metrics (flags and environment may have set
 * them) whatever the file says then.
 */
const struct cfg_key cfg_keys[CFG_NKEYS] = {
    STR_KEY(redis, CFG_KEY_REDIS, MU_REDIS_URL_DEFAULT),
    STR_KEY(bind, CFG_KEY_ENDPOINT, "tcp://127.0.0.1:7070"),
    STR_KEY(metrics, CFG_KEY_METRICS, ""),
    STR_KEY(key_prefix, CFG_KEY_NAME, MU_KEY_PREFIX_DEFAULT),
    OTHER_KEY("topology_levels", CFG_KEY_LEVELS, "[]", false),
    OTHER_KEY("instance_topology", CFG_KEY_INSTANCE_TOPOLOGY, "none", false),
    OTHER_KEY("dependency_never_met", CFG_KEY_NEVER_MET, "\"cancel\"", false),
    OTHER_KEY("history", CFG_KEY_HISTORY, "none", false),
    OTHER_KEY("pools", CFG_KEY_POOLS, "[]", false),
    OTHER_KEY("queues", CFG_KEY_QUEUES, "[{\"name\": \"default\"}]", true),
    OTHER_KEY("access", CFG_KEY_ACCESS, "none", true),
    INT_KEY(heartbeat_s, 1, 1, 60),
    INT_KEY(node_lost_after_s, 30, 2, 3600),
    INT_KEY(spot_cooldown_s, 600, 0, 86400),
    INT_KEY(min_runtime_s, 60, 0, 86400),
    INT_KEY(bind_timeout_s, 30, 1, 600),
    INT_KEY(kill_grace_s, 10, 0, 3600),
    INT_KEY(default_time_limit_s, 86400, 1, 31536000),
    INT_KEY(events_max, 100000, 1000, 100000000),
    INT_KEY(max_time_limit_s, 0, 0, 31536000),
    INT_KEY(retry_backoff_s, 10, 0, 86400),
    INT_KEY(retry_backoff_max_s, 300, 0, 86400),
    INT_KEY(fair_share_half_life_s, 7 * 86400, 60, 31536000), /* Slurm's PriorityDecayHalfLife */
    INT_KEY(consolidate_after_s, 600, 0, 604800),
    INT_KEY(spot_return_horizon_s, 3600, 0, 31536000),
    INT_KEY(spot_return_overhead_s, 120, 0, 86400),
    INT_KEY(max_array_size, 10000, 1, 1000000),
    INT_KEY(leader_lease_s, 5, 2, 60),
    INT_KEY(keep_finished_s, 86400, 0, 31536000),
};

int cfg_key_index(const char *name)
{
    for (int i = 0; i < CFG_NKEYS; i++) {
        if (strcmp(cfg_keys[i].name, name) == 0)
            return i;
    }
    return -1;
}

static int *int_at(struct cfg *c, const struct cfg_key *k)
{
    return (int *)(void *)((char *)c + k->offset);
}

static const int *int_in(const struct cfg *c, const struct cfg_key *k)
{
    return (const int *)(const void *)((const char *)c + k->offset);
}

static const char *str_in(const struct cfg *c, const struct cfg_key *k)
{
    return (const char *)c + k->offset;
}

void cfg_init_defaults(struct cfg *c)
{
    memset(c, 0, sizeof(*c)); /* no levels, pools, instance_topology or history; "cancel" */
    for (int i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (k->type == CFG_KEY_INT)
            *int_at(c, k) = k->def;
        else if (k->size > 0)
            mu_strlcpy((char *)c + k->offset, k->def_text, k->size);
    }
    c->nqueues = 1;
    mu_strlcpy(c->queues[0].name, "default", sizeof(c->queues[0].name));
    c->queues[0].weight = 1;
    c->queues[0].borrow_limit = -1;
    c->queues[0].lend_limit = -1;
}

static bool pool_same(const struct cfg_pool *a, const struct cfg_pool *b)
{
    return strcmp(a->name, b->name) == 0 && a->capacity == b->capacity
           && strcmp(a->instance_type, b->instance_type) == 0
           && strcmp(a->gpu_type, b->gpu_type) == 0 && a->gpus_per_node == b->gpus_per_node
           && a->price_per_hour == b->price_per_hour && a->max_gpus == b->max_gpus
           && a->shared == b->shared;
}

/* Whether key k has the same value in a and b. */
static bool key_same(const struct cfg *a, const struct cfg *b, const struct cfg_key *k)
{
    switch (k->type) {
    case CFG_KEY_INT:
        return *int_in(a, k) == *int_in(b, k);
    case CFG_KEY_REDIS:
    case CFG_KEY_ENDPOINT:
    case CFG_KEY_METRICS:
    case CFG_KEY_NAME:
        return strcmp(str_in(a, k), str_in(b, k)) == 0;
    case CFG_KEY_LEVELS:
        if (a->nlevels != b->nlevels)
            return false;
        for (int i = 0; i < a->nlevels; i++) {
            if (strcmp(a->levels[i], b->levels[i]) != 0)
                return false;
        }
        return true;
    case CFG_KEY_INSTANCE_TOPOLOGY:
        return memcmp(&a->instance_topology, &b->instance_topology, sizeof(a->instance_topology))
               == 0;
    case CFG_KEY_NEVER_MET:
        return a->never_met == b->never_met;
    case CFG_KEY_HISTORY:
        return strcmp(a->history_sqlite, b->history_sqlite) == 0;
    case CFG_KEY_POOLS:
        if (a->npools != b->npools)
            return false;
        for (int i = 0; i < a->npools; i++) {
            if (!pool_same(&a->pools[i], &b->pools[i]))
                return false;
        }
        return true;
    case CFG_KEY_QUEUES:
    case CFG_KEY_ACCESS:
        break;
    }
    return true; /* what a reload may change, musterd compares (scheduler/d_reload.c) */
}

const char *cfg_diff_beyond_queues(const struct cfg *a, const struct cfg *b)
{
    for (int i = 0; i < CFG_NKEYS; i++) {
        if (!cfg_keys[i].reload && !key_same(a, b, &cfg_keys[i]))
            return cfg_keys[i].name;
    }
    return NULL;
}

const struct cfg_pool *cfg_pool_find(const struct cfg *c, const char *name)
{
    if (!c || !name)
        return NULL;
    for (int i = 0; i < c->npools; i++) {
        if (strcmp(c->pools[i].name, name) == 0)
            return &c->pools[i];
    }
    return NULL;
}

const struct cfg_queue *cfg_queue_find(const struct cfg *c, const char *name)
{
    if (!c || !name)
        return NULL;
    for (int i = 0; i < c->nqueues; i++) {
        if (strcmp(c->queues[i].name, name) == 0)
            return &c->queues[i];
    }
    return NULL;
}

int cfg_level_index(const struct cfg *c, const char *level)
{
    if (!c || !level)
        return -1;
    for (int i = 0; i < c->nlevels; i++) {
        if (strcmp(c->levels[i], level) == 0)
            return i;
    }
    if (strcmp(level, "node") == 0)
        return c->nlevels;
    return -1;
}

const char *cfg_capacity_name(enum cfg_capacity cap)
{
    return cap == CFG_CAPACITY_ON_DEMAND ? "on-demand" : "spot";
}

int cfg_capacity_parse(const char *text, enum cfg_capacity *out)
{
    if (!text)
        return -1;
    if (strcmp(text, "spot") == 0) {
        *out = CFG_CAPACITY_SPOT;
        return 0;
    }
    if (strcmp(text, "on-demand") == 0) {
        *out = CFG_CAPACITY_ON_DEMAND;
        return 0;
    }
    return -1;
}

bool cfg_instance_topology_is_set(const struct cfg *c)
{
    return c->instance_topology.nlayers > 0 || c->instance_topology.availability_zone[0];
}

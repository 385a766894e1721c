/* SPDX-License-Identifier: MIT */
/*
 * cfg: defaults, file loading and lookups for the cluster config (docs/design.md §2a).
 *
 * struct cfg is a plain value record with fixed-size arrays, so lookups return borrowed pointers
 * that live as long as the struct itself.  The JSON parser lives in parse.c; this file holds the
 * parts that do not touch JSON, so that the defaults are written down in exactly one place.
 */
#include "config/cfg.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

void cfg_init_defaults(struct cfg *c)
{
    memset(c, 0, sizeof(*c));
    mu_strlcpy(c->redis, MU_REDIS_URL_DEFAULT, sizeof(c->redis));
    mu_strlcpy(c->bind, "tcp://127.0.0.1:7070", sizeof(c->bind));
    c->metrics[0] = '\0';
    mu_strlcpy(c->key_prefix, MU_KEY_PREFIX_DEFAULT, sizeof(c->key_prefix));
    c->nlevels = 0;
    c->npools = 0;
    c->nqueues = 1;
    mu_strlcpy(c->queues[0].name, "default", sizeof(c->queues[0].name));
    c->queues[0].weight = 1;
    c->queues[0].borrow_limit = -1;
    c->queues[0].lend_limit = -1;
    c->heartbeat_s = 1;
    c->node_lost_after_s = 30;
    c->spot_cooldown_s = 600;
    c->min_runtime_s = 60;
    c->bind_timeout_s = 30;
    c->kill_grace_s = 10;
    c->default_time_limit_s = 86400;
    c->max_time_limit_s = 0;
    c->retry_backoff_s = 10;
    c->retry_backoff_max_s = 300;
    c->fair_share_half_life_s = 7 * 86400; /* Slurm's PriorityDecayHalfLife default */
    c->consolidate_after_s = 600;
    c->spot_return_horizon_s = 3600;
    c->spot_return_overhead_s = 120;
    c->events_max = 100000;
    c->max_array_size = 10000;
    c->leader_lease_s = 5;
    c->keep_finished_s = 86400;
}

int cfg_load_file(struct cfg *c, const char *path, struct mu_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = -1;

    cfg_init_defaults(c);
    /* One byte over the cap, so that "exactly at the cap" and "over it" can be told apart. */
    text = mu_file_read(path, (size_t)CFG_FILE_MAX + 1, &len, err);
    if (!text) {
        if (err && err->code == MU_E_TOOBIG)
            mu_errf(err, MU_E_CONFIG, "%s: larger than %u bytes", path, CFG_FILE_MAX);
        goto out;
    }
    if (cfg_parse(c, text, len, err) != 0) {
        mu_err_prefix(err, "%s: ", path);
        goto out;
    }
    rc = 0;
out:
    free(text);
    return rc;
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

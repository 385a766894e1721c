/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for cfg_parse (docs/design.md §2a): any bytes must give 0 or -1 with a message, never
 * a crash or a leak, and a failed parse must leave the defaults.  The lookups run on every result
 * so that a half-filled struct would show up under the sanitizers.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cfg c; /* about 20 KiB: keep it off the stack */
    struct mu_err err;

    mu_err_clear(&err);
    if (cfg_parse(&c, (const char *)data, size, &err) != 0) {
        if (err.msg[0] == '\0' || c.nqueues != 1 || c.npools != 0)
            abort();
        return 0;
    }
    if (c.nqueues < 1 || c.nqueues > CFG_MAX_QUEUES || c.npools < 0 || c.npools > CFG_MAX_POOLS
        || c.nlevels < 0 || c.nlevels > CFG_MAX_LEVELS || c.node_lost_after_s <= c.heartbeat_s)
        abort();
    for (int i = 0; i < c.npools; i++) {
        if (cfg_pool_find(&c, c.pools[i].name) != &c.pools[i])
            abort();
    }
    for (int i = 0; i < c.nqueues; i++) {
        if (cfg_queue_find(&c, c.queues[i].name) != &c.queues[i])
            abort();
    }
    for (int i = 0; i < c.nlevels; i++) {
        if (cfg_level_index(&c, c.levels[i]) != i)
            abort();
    }
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for queue_spec_parse and queue_spec_check (docs/design.md §3): submitted JSON is
 * hostile, so any bytes must give 0 or -1 with a message, never a crash or a leak.  A failed parse
 * must leave the struct all zeroes; a good one is checked against a small two-pool cluster.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"
#include "queue/queue.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char cluster[] =
    "{\"topology_levels\":[\"zone\",\"rack\"],\"pools\":["
    "{\"name\":\"s\",\"capacity\":\"spot\",\"gpu_type\":\"L40S\",\"gpus_per_node\":4,"
    "\"max_gpus\":16},"
    "{\"name\":\"o\",\"capacity\":\"on-demand\",\"gpu_type\":\"H100\",\"gpus_per_node\":8}],"
    "\"queues\":[{\"name\":\"default\"},{\"name\":\"research\",\"weight\":2}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cfg c;
    static int have_cfg;
    struct queue_spec s;
    struct mu_err err;

    if (!have_cfg) {
        if (cfg_parse(&c, cluster, sizeof(cluster) - 1, &err) != 0)
            abort();
        have_cfg = 1;
    }
    mu_err_clear(&err);
    if (queue_spec_parse((const char *)data, size, &s, &err) != 0) {
        const unsigned char *p = (const unsigned char *)&s;
        for (size_t i = 0; i < sizeof(s); i++) {
            if (p[i] != 0)
                abort();
        }
        if (err.msg[0] == '\0')
            abort();
        return 0;
    }
    if (s.argc < 1 || !s.argv || s.argv[s.argc] != NULL || (s.nenv > 0 && s.env[s.nenv] != NULL))
        abort();
    (void)queue_spec_check(&s, &c, &err);
    queue_spec_release(&s);
    return 0;
}

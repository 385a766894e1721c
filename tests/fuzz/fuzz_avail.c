/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for muster-sim's spot availability trace reader (sim/avail.c).  For any bytes the
 * parser returns a trace or NULL with a message; a trace's rows are sorted by tick, name a spot
 * pool of the config and stay within their caps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char cfg_json[] =
    "{\"pools\":[{\"name\":\"s\",\"capacity\":\"spot\",\"instance_type\":\"x\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":1},"
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"x\",\"gpu_type\":\"H100\","
    "\"gpus_per_node\":8,\"price_per_hour\":4}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cfg cfg;
    static int loaded;
    struct mu_err err;
    struct sim_avail_trace *t;

    if (!loaded) {
        if (cfg_parse(&cfg, cfg_json, strlen(cfg_json), &err) != 0)
            abort();
        loaded = 1;
    }
    if (size > (1u << 20))
        return 0;
    mu_err_clear(&err);
    t = sim_avail_parse((const char *)data, size, &cfg, &err);
    if (!t) {
        if (err.msg[0] == '\0')
            abort();
        return 0;
    }
    for (int i = 0; i < sim_avail_count(t); i++) {
        const struct sim_avail *a = &sim_avail_rows(t)[i];
        if (a->t_s < 0 || a->pool != 0 || a->nodes < 0 || a->nodes > 100000 || a->line < 2
            || (i > 0 && a->t_s < sim_avail_rows(t)[i - 1].t_s))
            abort();
    }
    sim_avail_free(t);
    return 0;
}

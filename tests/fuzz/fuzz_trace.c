/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for muster-sim's trace readers (sim/trace.c): muster's CSV schema, the Philly-style
 * job list and the Alibaba pod list, chosen by the header, with the replay columns submit_ms and
 * end_ms.  For any bytes the parser returns a trace or NULL with a message; a trace's jobs are
 * sorted by the millisecond, within their caps, a replayed end after its submission, and its rows
 * are all accounted for (used or counted under a reason with an example).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char cfg_json[] =
    "{\"topology_levels\":[\"zone\",\"rack\"],\"pools\":[{\"name\":\"s\",\"capacity\":\"spot\","
    "\"instance_type\":\"x\",\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":1}],"
    "\"queues\":[{\"name\":\"default\",\"weight\":1},{\"name\":\"q\",\"weight\":2}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cfg cfg;
    static int loaded;
    struct sim_trace_opts o = { .cfg = &cfg, .gpus_per_node = 8, .default_ckpt_interval_s = 0 };
    struct mu_err err;
    struct sim_trace *t;
    int skipped = 0;

    if (!loaded) {
        if (cfg_parse(&cfg, cfg_json, strlen(cfg_json), &err) != 0)
            abort();
        loaded = 1;
    }
    if (size > (1u << 20))
        return 0;
    mu_err_clear(&err);
    t = sim_trace_parse((const char *)data, size, &o, &err);
    if (!t) {
        if (err.msg[0] == '\0')
            abort();
        return 0;
    }
    for (int i = 0; i < sim_trace_count(t); i++) {
        const struct sim_job *j = &sim_trace_jobs(t)[i];
        if (j->tasks < 1 || j->tasks > SIM_MAX_TASKS || j->gpus_per_task < 1 || j->gpus_per_task > 8
            || j->duration_s < 1 || j->submit_s < 0 || j->submit_ms < 0
            || j->submit_s != j->submit_ms / 1000 || (j->end_ms >= 0 && j->end_ms <= j->submit_ms)
            || (j->end_ms < 0 && j->end_ms != -1)
            || (i > 0 && j->submit_ms < sim_trace_jobs(t)[i - 1].submit_ms))
            abort();
    }
    for (int k = 0; k < sim_trace_skip_kinds(t); k++) {
        if (sim_trace_skip_example(t, k)[0] == '\0' || sim_trace_skip_count(t, k) < 1)
            abort();
        skipped += sim_trace_skip_count(t, k);
    }
    if (skipped + sim_trace_count(t) != sim_trace_rows(t))
        abort();
    sim_trace_free(t);
    return 0;
}

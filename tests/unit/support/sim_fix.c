/* SPDX-License-Identifier: MIT */
/*
 * The simulator tests' setup and trace reader (sim_fix.h): the one copy of what test_sim,
 * test_sim_avail, test_sim_quota and test_sim_replay each wrote (issue #41).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/sim_fix.h"

#include "common/mu_banned.h"

const char sfix_cluster_json[] =
    "{\"topology_levels\":[\"zone\",\"rack\"],\"pools\":["
    "{\"name\":\"spot\",\"capacity\":\"spot\",\"instance_type\":\"x\",\"gpu_type\":\"H100\","
    "\"gpus_per_node\":8,\"price_per_hour\":10},"
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"x\",\"gpu_type\":\"H100\","
    "\"gpus_per_node\":8,\"price_per_hour\":40}],"
    "\"queues\":[{\"name\":\"default\",\"weight\":1},{\"name\":\"research\",\"weight\":2}],"
    "\"max_time_limit_s\":100000,\"min_runtime_s\":60}";

void sfix_setup(struct sim_setup *s, const char *cfg_json, const char *nodes)
{
    struct mu_err err;
    sim_setup_defaults(s);
    if (cfg_parse(&s->cfg, cfg_json, strlen(cfg_json), &err) != 0)
        fail_msg("config: %s", err.msg);
    if (sim_setup_parse_nodes(s, nodes, &err) != 0)
        fail_msg("nodes: %s", err.msg);
    s->check = true;
}

struct sim_trace *sfix_trace(const struct sim_setup *s, const char *text, struct mu_err *err)
{
    struct sim_trace_opts o = { .cfg = &s->cfg, .gpus_per_node = 8 };
    return sim_trace_parse(text, strlen(text), &o, err);
}

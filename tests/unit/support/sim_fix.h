/* SPDX-License-Identifier: MIT */
/*
 * What the simulator's unit tests (test_sim, test_sim_avail, test_sim_quota, test_sim_replay)
 * share: a replay setup from a config text and a node list, and a trace read with the setup's
 * config, instead of a setup_make and a parse in each file (issue #41).  Built as the static
 * library sim_test_support (tests/CMakeLists.txt).  sfix_setup fails the running cmocka test
 * rather than return an error: call it only from inside a test.
 */
#ifndef MUSTER_TESTS_SIM_FIX_H
#define MUSTER_TESTS_SIM_FIX_H

#include "sim/sim.h"

/* A cluster of two pools, spot and od (8 H100s a node, $10 and $40 an hour), levels zone and
 * rack, queues default (weight 1) and research (weight 2): test_sim's and test_oom's. */
extern const char sfix_cluster_json[];

/* Defaults, the config cfg_json, the nodes ("spot=4,od=1"), and check mode on. */
void sfix_setup(struct sim_setup *s, const char *cfg_json, const char *nodes);

/* text as a trace for s (its config's queues and levels, 8 GPUs a node); NULL with err. */
struct sim_trace *sfix_trace(const struct sim_setup *s, const char *text, struct mu_err *err);

#endif

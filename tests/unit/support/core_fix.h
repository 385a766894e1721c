/* SPDX-License-Identifier: MIT */
/*
 * What the core's unit tests (test_sched, test_explain, test_preempt, test_slice, test_quota)
 * share: one way to build a node of a hand-made cluster, instead of an add_node in each file
 * (issue #41).  Built as the static library core_test_support (tests/CMakeLists.txt), which links
 * sched_core, mu_base and cmocka alone, so the core's tests stay pure.  Helpers fail the running
 * cmocka test rather than return an error: call them only from inside a test.
 */
#ifndef MUSTER_TESTS_CORE_FIX_H
#define MUSTER_TESTS_CORE_FIX_H

#include "core/sched.h"

/*
 * A node spec: name, pool, gpus whole GPUs, 96 CPUs, 1 TiB of memory, and one label per
 * topology level of c taken in order from path ("zone/block/rack"; parts left out are "").
 */
void cfix_node_spec(struct sched_node_spec *s,
                    const struct sched_cluster *c,
                    const char *name,
                    int pool,
                    int gpus,
                    const char *path);

/* Adds s to c and returns its index; fails the test when the core refuses it. */
int cfix_node_add_spec(struct sched_cluster *c, const struct sched_node_spec *s);

/* cfix_node_spec then cfix_node_add_spec. */
int cfix_node_add(struct sched_cluster *c, const char *name, int pool, int gpus, const char *path);

#endif

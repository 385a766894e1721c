/* SPDX-License-Identifier: MIT */
/*
 * musterd with MIG slices and shared GPUs (issue #17), without Redis or ZeroMQ: a HELLO with a
 * GPU in MIG mode and its slices registers them as units of their profiles; a HELLO whose slice
 * names a GPU that is not in MIG mode, or a bad profile, is refused with why; a slice job is
 * bound to the slice's unit; a gpu_slice no node has is REJECTED with the cluster's profiles; a
 * gpu_milli job on a shared pool gets MUSTER_GPU_MILLI in its BIND.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/d_handlers.h"
#include "tests/unit/support/d_fake.h"

#include "common/mu_banned.h"

static const char config_json[] =
    "{\"pools\":[{\"name\":\"mig\",\"capacity\":\"on-demand\",\"gpu_type\":\"H100\","
    "\"gpus_per_node\":2,\"price_per_hour\":9},"
    "{\"name\":\"l4\",\"capacity\":\"on-demand\",\"gpu_type\":\"L4\",\"gpus_per_node\":2,"
    "\"price_per_hour\":1,\"shared\":true}],"
    "\"queues\":[{\"name\":\"default\",\"weight\":1}],\"min_runtime_s\":0,\"retry_backoff_s\":0}";

#define J1 "1700000000001-0"
#define J2 "1700000000002-0"
#define J3 "1700000000003-0"

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

/*
 * HELLO from node: GPU 0 in MIG mode with two 3g.40gb slices (units 2 and 3), GPU 1 whole.
 * parent_of_slices: the parent index the slices name; profile: theirs.  Returns whether the
 * answer said ok.
 */
static bool mig_hello(struct dfix *f, const char *node, int parent_of_slices, const char *profile)
{
    struct proto_msg m;
    struct proto_gpu gpus[4];
    struct fake_msg answer;
    struct mu_err err;

    memset(gpus, 0, sizeof(gpus));
    for (int g = 0; g < 4; g++)
        gpus[g].index = g;
    gpus[0].mig = true;
    for (int g = 2; g < 4; g++) {
        (void)mu_snprintf(gpus[g].uuid, sizeof(gpus[g].uuid), "MIG-%d", g);
        mu_strlcpy(gpus[g].profile, profile, sizeof(gpus[g].profile));
        gpus[g].parent = parent_of_slices;
    }
    proto_msg_init(&m, PROTO_HELLO);
    mu_strlcpy(m.node, node, sizeof(m.node));
    mu_strlcpy(m.pool, "mig", sizeof(m.pool));
    m.cpus = 64;
    m.memory_mb = 1 << 20;
    if (proto_msg_set_gpus(&m, 4, gpus, &err) != 0)
        fail_msg("%s", err.msg);
    d_hello(&f->d, node, &m);
    proto_msg_release(&m);
    if (!fake_sent_take(f->sent, PROTO_HEARTBEAT, node, NULL, -1, &answer))
        fail_msg("node %s: no answer to its HELLO", node);
    return answer.ok;
}

static void test_hello_registers_slices(void **state)
{
    struct dfix *f = *state;
    int idx;
    const struct sched_node_spec *s;
    int free_;
    int total;

    assert_true(mig_hello(f, "m1", 0, "3g.40gb"));
    idx = sched_cluster_node_find(f->d.cluster, "m1");
    assert_true(idx >= 0);
    s = sched_cluster_node_spec(f->d.cluster, idx);
    assert_int_equal(s->unit[0], SCHED_UNIT_MIG_PARENT);
    assert_int_equal(s->unit[1], SCHED_UNIT_GPU);
    assert_int_equal(s->unit[2], sched_cluster_profile_find(f->d.cluster, "3g.40gb"));
    assert_int_equal(s->parent[3], 0);
    assert_int_equal(sched_cluster_node_gpus_total(f->d.cluster, idx), 1);
    sched_cluster_node_slices(f->d.cluster, idx, 1, &free_, &total);
    assert_int_equal(total, 2);
    assert_int_equal(free_, 2);
}

static void test_hello_bad_slices_refused(void **state)
{
    struct dfix *f = *state;

    /* The slices name GPU 1, which is not in MIG mode. */
    assert_false(mig_hello(f, "m2", 1, "3g.40gb"));
    assert_int_equal(sched_cluster_node_find(f->d.cluster, "m2"), -1);
    /* A profile that is no MIG profile. */
    assert_false(mig_hello(f, "m3", 0, "big"));
    assert_int_equal(sched_cluster_node_find(f->d.cluster, "m3"), -1);
    assert_int_equal(sched_cluster_profile_count(f->d.cluster), 0);
}

static void test_slice_job_bound_to_slices(void **state)
{
    struct dfix *f = *state;
    struct fake_msg m;
    const char *error;

    assert_true(mig_hello(f, "m1", 0, "3g.40gb"));
    dfix_submit(f, J1, "{\"gpu_slice\":\"1g.10gb\",\"command\":[\"x\"]}");
    assert_string_equal(dfix_state_field(f, J1), "REJECTED");
    error = fake_field(f->store, J1, "error");
    assert_non_null(error);
    assert_string_equal(error,
                        "gpu_slice: no node has MIG slices of profile '1g.10gb'; the cluster has: "
                        "3g.40gb");
    dfix_submit(f, J2, "{\"tasks\":2,\"gpu_slice\":\"3g.40gb\",\"command\":[\"x\"]}");
    d_schedule(&f->d);
    for (int t = 0; t < 2; t++) {
        if (!fake_sent_take(f->sent, PROTO_BIND, "m1", J2, t, &m))
            fail_msg("no BIND for task %d", t);
        assert_int_equal(m.nbind_gpus, 1);
        assert_true(m.bind_gpus[0] == 2 || m.bind_gpus[0] == 3);
        assert_string_equal(m.gpu_milli_env, "");
    }
    /* A whole-GPU job gets GPU 1, never GPU 0 (in MIG mode). */
    dfix_submit(f, J3, "{\"command\":[\"x\"]}");
    d_schedule(&f->d);
    if (!fake_sent_take(f->sent, PROTO_BIND, "m1", J3, 0, &m))
        fail_msg("no BIND for the whole-GPU job");
    assert_int_equal(m.nbind_gpus, 1);
    assert_int_equal(m.bind_gpus[0], 1);
}

static void test_milli_job_env(void **state)
{
    struct dfix *f = *state;
    struct fake_msg m;

    (void)dfix_hello(f, "s1", "l4", 2);
    dfix_submit(f, J1, "{\"gpu_milli\":250,\"gpu_type\":\"L4\",\"command\":[\"x\"]}");
    dfix_submit(f, J2, "{\"gpu_milli\":250,\"gpu_type\":\"L4\",\"command\":[\"x\"]}");
    d_schedule(&f->d);
    if (!fake_sent_take(f->sent, PROTO_BIND, "s1", J1, 0, &m))
        fail_msg("no BIND for the share");
    assert_string_equal(m.gpu_milli_env, "MUSTER_GPU_MILLI=250");
    assert_int_equal(m.bind_gpus[0], 0);
    if (!fake_sent_take(f->sent, PROTO_BIND, "s1", J2, 0, &m))
        fail_msg("no BIND for the second share");
    assert_int_equal(m.bind_gpus[0], 0); /* best fit: the same GPU */
    assert_int_equal(sched_cluster_gpu_milli(f->d.cluster, 0, 0), 500);
    /* Not on a pool that is not shared. */
    dfix_submit(f, J3, "{\"gpu_milli\":250,\"gpu_type\":\"H100\",\"command\":[\"x\"]}");
    assert_string_equal(dfix_state_field(f, J3), "REJECTED");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hello_registers_slices, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_hello_bad_slices_refused, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_slice_job_bound_to_slices, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_milli_job_env, setup, dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

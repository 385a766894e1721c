/* SPDX-License-Identifier: MIT */
/*
 * musterd's side of the EC2 instance topology (issue #16, scheduler/d_topo.c) without Redis or
 * ZeroMQ, through the fixture of tests/unit/support/d_fake.h: the labels an imported instance
 * gets at registration override the worker's --label values for the levels instance_topology
 * maps and only those, a worker that gives no label for an imported level still registers, and
 * a node without an instance id, or of an instance never imported, keeps its own labels (and is
 * refused, as before, when it lacks one).  The import command itself reads Redis and is covered
 * by tests/integration/t2010-place-ec2-topology.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/d_fake.h"

#include "common/mu_banned.h"

static const char config_json[] =
    "{\"topology_levels\":[\"zone\",\"block\",\"rack\"],"
    "\"instance_topology\":{\"levels\":[\"block\",null,\"rack\"],\"availability_zone\":\"zone\"},"
    "\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"heartbeat_s\":1,\"node_lost_after_s\":10}";

static int setup(void **state)
{
    struct dfix *f = dfix_new(config_json);
    struct cfg_topo_instance *in = calloc(1, sizeof(*in));
    struct mu_err err;

    assert_non_null(in);
    mu_strlcpy(in->instance_id, "i-1111111111example", sizeof(in->instance_id));
    mu_strlcpy(in->availability_zone, "us-west-2a", sizeof(in->availability_zone));
    in->nnodes = 3;
    mu_strlcpy(in->nodes[0], "nn-1111111111example", sizeof(in->nodes[0]));
    mu_strlcpy(in->nodes[1], "nn-2222222222example", sizeof(in->nodes[1]));
    mu_strlcpy(in->nodes[2], "nn-3333333333example", sizeof(in->nodes[2]));
    f->d.topology = mu_map_new(); /* as d_topo_load leaves it after an import */
    assert_non_null(f->d.topology);
    if (mu_map_put(f->d.topology, in->instance_id, in, &err) != 0)
        fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

/* Sends node's HELLO with instance_id and the labels "level=value,..." (NULL: none); returns
 * the heartbeat answer's ok. */
static bool hello(struct dfix *f, const char *node, const char *instance_id, const char *labels)
{
    struct proto_msg m;
    struct fake_msg answer;

    proto_msg_init(&m, PROTO_HELLO);
    mu_strlcpy(m.node, node, sizeof(m.node));
    mu_strlcpy(m.pool, "od", sizeof(m.pool));
    if (instance_id)
        mu_strlcpy(m.instance_id, instance_id, sizeof(m.instance_id));
    m.cpus = 192;
    m.memory_mb = 2 << 20;
    while (labels && *labels) {
        const char *eq = strchr(labels, '=');
        const char *end = strchr(labels, ',');
        struct proto_label *l = &m.labels[m.nlabels++];
        assert_non_null(eq);
        end = end ? end : labels + strlen(labels);
        (void)mu_snprintf(l->level, sizeof(l->level), "%.*s", (int)(eq - labels), labels);
        (void)mu_snprintf(l->value, sizeof(l->value), "%.*s", (int)(end - eq - 1), eq + 1);
        labels = *end ? end + 1 : end;
    }
    d_hello(&f->d, node, &m);
    proto_msg_release(&m);
    if (!fake_sent_take(f->sent, PROTO_HEARTBEAT, node, NULL, -1, &answer))
        fail_msg("node %s: no answer to its HELLO", node);
    return answer.ok;
}

static const char *label(const struct dfix *f, const char *node, int level)
{
    int idx = sched_cluster_node_find(f->d.cluster, node);
    assert_true(idx >= 0);
    return sched_cluster_node_spec(f->d.cluster, idx)->labels[level];
}

static void test_imported_labels_win(void **state)
{
    struct dfix *f = *state;

    assert_true(hello(f, "n1", "i-1111111111example", "zone=z0,block=b0,rack=r0"));
    assert_string_equal(label(f, "n1", 0), "us-west-2a");           /* AvailabilityZone */
    assert_string_equal(label(f, "n1", 1), "nn-1111111111example"); /* NetworkNodes[0] */
    assert_string_equal(label(f, "n1", 2), "nn-3333333333example"); /* NetworkNodes[2] */
    assert_string_equal(d_node_get(&f->d, "n1")->instance_id, "i-1111111111example");
}

static void test_no_labels_needed_for_imported_levels(void **state)
{
    struct dfix *f = *state;

    assert_true(hello(f, "n1", "i-1111111111example", NULL));
    assert_string_equal(label(f, "n1", 2), "nn-3333333333example");
}

static void test_others_keep_their_labels(void **state)
{
    struct dfix *f = *state;

    assert_true(hello(f, "n2", NULL, "zone=z0,block=b0,rack=r0"));
    assert_string_equal(label(f, "n2", 1), "b0");
    assert_true(hello(f, "n3", "i-9999999999example", "zone=z0,block=b0,rack=r1"));
    assert_string_equal(label(f, "n3", 2), "r1");
    /* Not imported and without a rack label: refused, as any worker missing a label is. */
    assert_false(hello(f, "n4", "i-9999999999example", "zone=z0,block=b0"));
    assert_true(sched_cluster_node_find(f->d.cluster, "n4") < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_imported_labels_win, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_no_labels_needed_for_imported_levels, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_others_keep_their_labels, setup, dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

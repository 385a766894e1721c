/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the EC2 instance topology reader (config/ec2topo.c, issue #16) and the config's
 * instance_topology section: the AWS documented example response of `aws ec2
 * describe-instance-topology` (tests/data/topo/aws-example.json, byte for byte as the AWS CLI
 * reference prints it) read in full and turned into labels, the stored form read back, and
 * bad-input tables whose messages must name what to fix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

static const char *const config_text =
    "{\"topology_levels\": [\"zone\", \"block\", \"spine\", \"rack\"],"
    " \"instance_topology\": {\"levels\": [\"block\", \"spine\", \"rack\"],"
    " \"availability_zone\": \"zone\"}}";

static char *read_example(size_t *len)
{
    const char *dir = getenv("MUSTER_TEST_DATA");
    char path[512];
    struct mu_err err;
    char *text;

    assert_int_equal(
        mu_snprintf(path, sizeof(path), "%s/topo/aws-example.json", dir ? dir : "tests/data"), 0);
    text = mu_file_read(path, CFG_TOPO_FILE_MAX, len, &err);
    if (!text)
        fail_msg("%s", err.msg);
    return text;
}

static void assert_has(const char *msg, const char *part)
{
    if (!strstr(msg, part))
        fail_msg("message: \"%s\"\nexpected to contain: \"%s\"", msg, part);
}

static void test_aws_example(void **state)
{
    size_t len;
    char *text = read_example(&len);
    struct mu_err err;
    struct cfg_topo *t = cfg_topo_parse(text, len, &err);
    const struct cfg_topo_instance *in;
    (void)state;

    if (!t)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg_topo_count(t), 4);
    assert_string_equal(cfg_topo_next_token(t), "SomeEncryptedToken");
    in = cfg_topo_get(t, 0);
    assert_string_equal(in->instance_id, "i-1111111111example");
    assert_string_equal(in->instance_type, "p4d.24xlarge");
    assert_string_equal(in->group_name, "my-ml-cpg");
    assert_string_equal(in->zone_id, "usw2-az2");
    assert_string_equal(in->availability_zone, "us-west-2a");
    assert_string_equal(in->capacity_block_id, "");
    assert_int_equal(in->nnodes, 3);
    assert_string_equal(in->nodes[0], "nn-1111111111example");
    assert_string_equal(in->nodes[2], "nn-3333333333example");
    in = cfg_topo_get(t, 1);
    assert_string_equal(in->group_name, ""); /* absent */
    in = cfg_topo_get(t, 2);
    assert_string_equal(in->instance_id, "i-3333333333example");
    assert_string_equal(in->availability_zone, "us-west-2d");
    assert_string_equal(in->nodes[1], "nn-1211122211example");
    in = cfg_topo_get(t, 3);
    assert_string_equal(in->instance_id, "i-444444444example");
    assert_string_equal(in->nodes[1], "nn-5434334334example");
    cfg_topo_free(t);
    free(text);
}

static void test_labels(void **state)
{
    size_t len;
    char *text = read_example(&len);
    struct mu_err err;
    struct cfg_topo *t = cfg_topo_parse(text, len, &err);
    struct cfg c;
    char labels[CFG_MAX_LEVELS][CFG_TOPO_ID_MAX];
    bool set[CFG_MAX_LEVELS];
    struct cfg_topo_instance few;
    (void)state;

    assert_non_null(t);
    if (cfg_parse(&c, config_text, strlen(config_text), &err) != 0)
        fail_msg("%s", err.msg);
    assert_true(cfg_instance_topology_is_set(&c));
    assert_int_equal(cfg_topo_labels(&c, cfg_topo_get(t, 0), labels, set, &err), 0);
    assert_true(set[0] && set[1] && set[2] && set[3]);
    assert_string_equal(labels[0], "us-west-2a");
    assert_string_equal(labels[1], "nn-1111111111example");
    assert_string_equal(labels[2], "nn-2222222222example");
    assert_string_equal(labels[3], "nn-3333333333example");
    assert_int_equal(cfg_topo_labels(&c, cfg_topo_get(t, 3), labels, set, &err), 0);
    assert_string_equal(labels[1], "nn-1111111111example"); /* i-1's block */
    assert_string_equal(labels[3], "nn-1235301234example"); /* not i-1's rack */

    /* A layer mapped to null is not used; levels not mapped are not set. */
    {
        static const char skip[] = "{\"topology_levels\": [\"zone\", \"rack\"],"
                                   " \"instance_topology\": {\"levels\": [null, null, \"rack\"]}}";
        assert_int_equal(cfg_parse(&c, skip, strlen(skip), &err), 0);
        assert_int_equal(cfg_topo_labels(&c, cfg_topo_get(t, 2), labels, set, &err), 0);
        assert_false(set[0]);
        assert_true(set[1]);
        assert_string_equal(labels[1], "nn-1311133311example");
    }

    /* Fewer network nodes than the config maps, or no zone when one is mapped. */
    assert_int_equal(cfg_parse(&c, config_text, strlen(config_text), &err), 0);
    few = *cfg_topo_get(t, 0);
    few.nnodes = 2;
    assert_int_equal(cfg_topo_labels(&c, &few, labels, set, &err), -1);
    assert_has(err.msg, "instance 'i-1111111111example': 2 network node(s), but "
                        "instance_topology.levels maps 3 layers");
    few.nnodes = 3;
    few.availability_zone[0] = '\0';
    assert_int_equal(cfg_topo_labels(&c, &few, labels, set, &err), -1);
    assert_has(err.msg, "no AvailabilityZone");

    /* No instance_topology in the config: nothing to map. */
    assert_int_equal(cfg_parse(&c, "{}", 2, &err), 0);
    assert_false(cfg_instance_topology_is_set(&c));
    assert_int_equal(cfg_topo_labels(&c, cfg_topo_get(t, 0), labels, set, &err), -1);
    assert_has(err.msg, "the config has no instance_topology");
    cfg_topo_free(t);
    free(text);
}

/* The stored form reads back to the same record, and is refused when damaged. */
static void test_round_trip(void **state)
{
    static const char stub[] = "{\"InstanceId\":\"i-1\"}";
    struct cfg_topo_instance one;
    size_t len;
    char *text = read_example(&len);
    struct mu_err err;
    struct cfg_topo *t = cfg_topo_parse(text, len, &err);
    (void)state;

    assert_non_null(t);
    for (int i = 0; i < cfg_topo_count(t); i++) {
        struct cfg_topo_instance back;
        char *json = cfg_topo_instance_format(cfg_topo_get(t, i), &err);
        assert_non_null(json);
        memset(&back, 0x55, sizeof(back));
        if (cfg_topo_instance_parse(json, strlen(json), &back, &err) != 0)
            fail_msg("%s: %s", json, err.msg);
        assert_string_equal(back.instance_id, cfg_topo_get(t, i)->instance_id);
        assert_string_equal(back.group_name, cfg_topo_get(t, i)->group_name);
        assert_int_equal(back.nnodes, cfg_topo_get(t, i)->nnodes);
        for (int n = 0; n < back.nnodes; n++)
            assert_string_equal(back.nodes[n], cfg_topo_get(t, i)->nodes[n]);
        free(json);
    }
    assert_int_equal(cfg_topo_instance_parse(stub, strlen(stub), &one, &err), -1);
    assert_has(err.msg, "NetworkNodes: missing");
    cfg_topo_free(t);
    free(text);
}

static void test_bad_files(void **state)
{
    static const struct {
        const char *text;
        const char *msg; /* a part of the message */
    } cases[] = {
        { "", "got an empty document" },
        { "not json", "near line 1" },
        { "[]", "expected a JSON object" },
        { "{\"Reservations\": []}", "Instances: missing; hint: give the output of 'aws ec2 "
                                    "describe-instance-topology'" },
        { "{\"Instances\": {}}", "Instances: expected an array of instances" },
        { "{\"Instances\": []}", "Instances: empty, nothing to import" },
        { "{\"Instances\": [1]}", "Instances[0]: expected an instance object, got 1" },
        { "{\"Instances\": [{\"NetworkNodes\": [\"nn-1\"]}]}", "Instances[0].InstanceId: missing" },
        { "{\"Instances\": [{\"InstanceId\": \"i 1\", \"NetworkNodes\": [\"nn-1\"]}]}",
          "Instances[0].InstanceId: expected" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\"}]}",
          "Instances[0].NetworkNodes: missing for instance 'i-1'" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": []}]}",
          "Instances[0].NetworkNodes: empty for instance 'i-1'; hint: AWS reports none" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": null}]}",
          "Instances[0].NetworkNodes: empty" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": \"nn-1\"}]}",
          "Instances[0].NetworkNodes: expected an array of network node ids" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": [\"nn-1\", 7]}]}",
          "Instances[0].NetworkNodes[1]: expected" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": "
          "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\"]}]}",
          "Instances[0].NetworkNodes: 7 network nodes, at most 6 supported" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"AvailabilityZone\": 3, "
          "\"NetworkNodes\": [\"nn-1\"]}]}",
          "Instances[0].AvailabilityZone: expected" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": [\"nn-1\"]},"
          " {\"InstanceId\": \"i-1\", \"NetworkNodes\": [\"nn-2\"]}]}",
          "Instances[1].InstanceId: 'i-1' is listed twice (also at 0)" },
        { "{\"Instances\": [{\"InstanceId\": \"i-1\", \"NetworkNodes\": [\"nn-1\"]}],"
          " \"NextToken\": 5}",
          "NextToken: expected a string or null" },
    };
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        struct mu_err err;
        struct cfg_topo *t = cfg_topo_parse(cases[i].text, strlen(cases[i].text), &err);
        if (t)
            fail_msg("case %zu: accepted: %s", i, cases[i].text);
        if (!strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: message \"%s\"\nexpected to contain \"%s\"", i, err.msg,
                     cases[i].msg);
    }
}

/* Unknown keys are AWS's to add; null optional fields are absent. */
static void test_lenient(void **state)
{
    static const char text[] = "{\"Instances\": [{\"InstanceId\": \"i-1\", \"CapacityBlockId\": "
                               "\"cr-0123\", \"GroupName\": null, \"Future\": {\"x\": [1]},"
                               " \"NetworkNodes\": [\"nn-1\"]}], \"NextToken\": null}";
    struct mu_err err;
    struct cfg_topo *t = cfg_topo_parse(text, strlen(text), &err);
    (void)state;

    if (!t)
        fail_msg("%s", err.msg);
    assert_string_equal(cfg_topo_get(t, 0)->capacity_block_id, "cr-0123");
    assert_string_equal(cfg_topo_get(t, 0)->group_name, "");
    assert_string_equal(cfg_topo_next_token(t), "");
    cfg_topo_free(t);
}

static void test_config_section(void **state)
{
    static const struct {
        const char *text;
        const char *msg; /* NULL = accepted */
    } cases[] = {
        { "{\"topology_levels\": [\"block\", \"rack\"], \"instance_topology\": "
          "{\"levels\": [\"block\", null, \"rack\"]}}",
          NULL },
        { "{\"instance_topology\": {\"availability_zone\": \"zone\"}, \"topology_levels\": "
          "[\"zone\"]}",
          NULL },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": []}",
          "instance_topology: expected an object" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"level\": [\"rack\"]}}",
          "instance_topology.level: unknown key; did you mean 'levels'?" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"levels\": [\"rak\"]}}",
          "instance_topology.levels[0]: unknown level 'rak'; hint: it must be one of "
          "topology_levels" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"levels\": [\"node\"]}}",
          "instance_topology.levels[0]: unknown level 'node'" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"levels\": [\"rack\"],"
          " \"availability_zone\": \"rack\"}}",
          "instance_topology.availability_zone: level 'rack' is already set by "
          "instance_topology.levels[0]" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"levels\": [null]}}",
          "instance_topology.levels: every layer is null" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"levels\": [1]}}",
          "instance_topology.levels[0]: expected" },
        { "{\"topology_levels\": [\"rack\"], \"instance_topology\": {\"levels\": "
          "[null,null,null,null,null,null,\"rack\"]}}",
          "instance_topology.levels: expected an array of at most 6" },
    };
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        struct cfg c;
        struct mu_err err;
        int rc = cfg_parse(&c, cases[i].text, strlen(cases[i].text), &err);
        if (!cases[i].msg) {
            if (rc != 0)
                fail_msg("case %zu: %s", i, err.msg);
            assert_true(cfg_instance_topology_is_set(&c));
            continue;
        }
        if (rc == 0)
            fail_msg("case %zu: accepted: %s", i, cases[i].text);
        if (strncmp(err.msg, cases[i].msg, strlen(cases[i].msg)) != 0)
            fail_msg("case %zu: message \"%s\"\nexpected to start with \"%s\"", i, err.msg,
                     cases[i].msg);
    }
}

/* A reload may not change the mapping: the stored imports were checked against it. */
static void test_reload_diff(void **state)
{
    static const char other[] = "{\"topology_levels\": [\"zone\", \"block\", \"spine\", \"rack\"],"
                                " \"instance_topology\": {\"levels\": [\"block\"]}}";
    struct cfg a;
    struct cfg b;
    struct mu_err err;
    (void)state;

    assert_int_equal(cfg_parse(&a, config_text, strlen(config_text), &err), 0);
    assert_int_equal(cfg_parse(&b, other, strlen(other), &err), 0);
    assert_string_equal(cfg_diff_beyond_queues(&a, &b), "instance_topology");
    assert_null(cfg_diff_beyond_queues(&a, &a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aws_example), cmocka_unit_test(test_labels),
        cmocka_unit_test(test_round_trip),  cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_lenient),     cmocka_unit_test(test_config_section),
        cmocka_unit_test(test_reload_diff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * musterd's job arrays without Redis (tests/unit/support/d_fake.h), as the counters see them
 * (issue #40): an element counts in jobs_submitted when it is made and in one final counter when
 * it ends, the array itself in none, so once all have ended submitted = succeeded + failed +
 * cancelled + timeout; a cancelled array counts only the elements it had made.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/d_fake.h"

#include "common/mu_banned.h"

static const char config_json[] =
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0}";

#define A "1700000000001-0"
#define B "1700000000002-0"

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

static double counter(const struct dfix *f, const char *name)
{
    return fake_counter(f->store, name);
}

/* Every final counter together, as a Prometheus user sums them. */
static double ended(const struct dfix *f)
{
    return counter(f, "jobs_succeeded") + counter(f, "jobs_failed") + counter(f, "jobs_cancelled")
           + counter(f, "jobs_timeout");
}

/* Element index of array id starts (the pass placed it) and exits with exit_code. */
static void element_run(struct dfix *f, const char *id, int index, int exit_code)
{
    char eid[64];
    char node_of[1][PROTO_NODE_MAX];

    (void)snprintf(eid, sizeof(eid), "%s_%d", id, index);
    dfix_take_binds(f, eid, 1, 1, node_of);
    dfix_ack_all(f, eid, 1, 1, node_of);
    dfix_task_exit(f, node_of[0], eid, 0, 1, exit_code, 0);
}

static void test_elements_count_not_the_array(void **state)
{
    struct dfix *f = *state;

    dfix_two_nodes(f);
    dfix_submit(f, A, "{\"array\":\"0-2\",\"max_retries\":0,\"command\":[\"./sweep\"]}");
    /* Its 3 elements, made at once; the array itself is no job of the counters. */
    assert_int_equal(counter(f, "jobs_submitted"), 3);
    d_schedule(&f->d);
    element_run(f, A, 0, 0);
    element_run(f, A, 1, 3);
    element_run(f, A, 2, 0);
    d_schedule(&f->d); /* the array hears of its elements' ends */
    assert_string_equal(dfix_state_field(f, A), "FAILED");
    assert_int_equal(counter(f, "jobs_succeeded"), 2);
    assert_int_equal(counter(f, "jobs_failed"), 1); /* the element, not the array too */
    assert_int_equal(ended(f), counter(f, "jobs_submitted"));
}

static void test_cancelled_array_counts_what_it_made(void **state)
{
    struct dfix *f = *state;
    char eid[64];
    char node_of[1][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_submit(f, B, "{\"array\":\"0-9%1\",\"command\":[\"./sweep\"]}");
    assert_int_equal(counter(f, "jobs_submitted"), 1); /* %1: one element made */
    d_schedule(&f->d);
    (void)snprintf(eid, sizeof(eid), "%s_0", B);
    dfix_take_binds(f, eid, 1, 1, node_of);
    dfix_ack_all(f, eid, 1, 1, node_of);
    dfix_control(f, "1700000000009-0", "cancel", B, -1);
    dfix_task_exit(f, node_of[0], eid, 0, 1, 0, 9); /* killed */
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, B), "CANCELLED");
    assert_string_equal(dfix_state_field(f, eid), "CANCELLED");
    assert_int_equal(counter(f, "jobs_cancelled"), 1); /* the element, not the array */
    assert_int_equal(counter(f, "jobs_submitted"), 1); /* the 9 never made count nowhere */
    assert_int_equal(ended(f), counter(f, "jobs_submitted"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_elements_count_not_the_array, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_array_counts_what_it_made, setup,
                                        dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

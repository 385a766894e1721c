/* SPDX-License-Identifier: MIT */
/*
 * musterd's job arrays without Redis (tests/unit/support/d_fake.h), as the counters see them
 * (issue #40): an element counts in jobs_submitted when it is made and in one final counter when
 * it ends, the array itself in none, so once all have ended submitted = succeeded + failed +
 * cancelled + timeout; a cancelled array counts only the elements it had made.  Each element's
 * environment carries the array's Slurm numbers (MUSTER_ARRAY_COUNT, _MIN, _MAX, _STEP), and the
 * array's reason follows its elements' starts (issue #43).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/mu.h"
#include "scheduler/d_state.h"
#include "tests/unit/support/d_fake.h"

#include "common/mu_banned.h"

static const char config_json[] =
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0}";

#define A "1700000000001-0"
#define B "1700000000002-0"
#define C "1700000000003-0"

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

static void test_elements_count_not_the_array(void **state)
{
    struct dfix *f = *state;

    dfix_two_nodes(f);
    dfix_submit(f, A, "{\"array\":\"0-2\",\"max_retries\":0,\"command\":[\"./sweep\"]}");
    /* Its 3 elements, made at once; the array itself is no job of the counters. */
    assert_int_equal(counter(f, "jobs_submitted"), 3);
    d_schedule(&f->d);
    dfix_element_run(f, A, 0, 0);
    dfix_element_run(f, A, 1, 3);
    dfix_element_run(f, A, 2, 0);
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

/* The value of name in element id's environment; fails the test without it. */
static const char *element_env(const struct dfix *f, const char *id, const char *name)
{
    const struct d_job *j = mu_map_get(f->d.jobs, id);
    size_t n = strlen(name);

    assert_non_null(j);
    for (int i = 0; i < j->spec.nenv; i++) {
        if (strncmp(j->spec.env[i], name, n) == 0 && j->spec.env[i][n] == '=')
            return j->spec.env[i] + n + 1;
    }
    fail_msg("%s has no %s", id, name);
    return NULL;
}

/* Slurm's SLURM_ARRAY_TASK_COUNT, _MIN, _MAX and _STEP: the same in every element; the step is
 * the first one written ("1" when none), even for a set that has none. */
static void test_element_env_slurm_numbers(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, A, "{\"array\":\"5,1,3\",\"command\":[\"./sweep\"]}");
    assert_string_equal(element_env(f, A "_1", "MUSTER_ARRAY_INDEX"), "1");
    assert_string_equal(element_env(f, A "_5", "MUSTER_ARRAY_INDEX"), "5");
    assert_string_equal(element_env(f, A "_3", "MUSTER_ARRAY_COUNT"), "3");
    assert_string_equal(element_env(f, A "_3", "MUSTER_ARRAY_MIN"), "1");
    assert_string_equal(element_env(f, A "_3", "MUSTER_ARRAY_MAX"), "5");
    assert_string_equal(element_env(f, A "_3", "MUSTER_ARRAY_STEP"), "1");
    assert_string_equal(element_env(f, A "_3", "MUSTER_ARRAY_JOB_ID"), A);
    dfix_submit(f, B, "{\"array\":\"0-10:5,12,1-2\",\"command\":[\"./sweep\"]}");
    assert_string_equal(element_env(f, B "_12", "MUSTER_ARRAY_COUNT"), "6");
    assert_string_equal(element_env(f, B "_0", "MUSTER_ARRAY_MIN"), "0");
    assert_string_equal(element_env(f, B "_1", "MUSTER_ARRAY_MAX"), "12");
    assert_string_equal(element_env(f, B "_10", "MUSTER_ARRAY_STEP"), "5");
    assert_string_equal(fake_field(f->store, B, "array"), "0-10:5,12,1-2"); /* as submitted */
}

/* The array's reason counts its running elements as they start, not only as they end. */
static void test_progress_follows_starts(void **state)
{
    struct dfix *f = *state;
    char node_of[1][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_submit(
        f, C,
        "{\"array\":\"0-5\",\"gpus_per_task\":8,\"max_retries\":0,\"command\":[\"./sweep\"]}");
    assert_string_equal(fake_field(f->store, C, "reason"),
                        "elements: 0 done (0 not succeeded), 0 running, 6 pending of 6");
    d_schedule(&f->d); /* two fit: one per node */
    dfix_take_binds(f, C "_0", 1, 1, node_of);
    dfix_ack_all(f, C "_0", 1, 1, node_of);
    dfix_take_binds(f, C "_1", 1, 1, node_of);
    dfix_ack_all(f, C "_1", 1, 1, node_of);
    d_schedule(&f->d); /* the array hears of its elements' starts */
    assert_string_equal(dfix_state_field(f, C), "RUNNING");
    assert_string_equal(fake_field(f->store, C, "reason"),
                        "elements: 0 done (0 not succeeded), 2 running, 4 pending of 6");
    dfix_task_exit(f, node_of[0], C "_1", 0, 1, 3, 0);
    d_schedule(&f->d); /* hears of the end, then places element 2 on the freed node */
    assert_string_equal(fake_field(f->store, C, "reason"),
                        "elements: 1 done (1 not succeeded), 1 running, 4 pending of 6");
    d_schedule(&f->d); /* hears of element 2's start */
    assert_string_equal(fake_field(f->store, C, "reason"),
                        "elements: 1 done (1 not succeeded), 2 running, 3 pending of 6");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_elements_count_not_the_array, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_array_counts_what_it_made, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_element_env_slurm_numbers, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_progress_follows_starts, setup, dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

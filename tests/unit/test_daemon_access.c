/* SPDX-License-Identifier: MIT */
/*
 * musterd's side of who may do what (issue #46, scheduler/d_access.c), through the recording
 * store of tests/unit/support/d_fake.h: with proven identity a submission belongs to the writer
 * of its stream, the shared stream is refused, a spec naming someone else is refused; array
 * elements belong to the array's user; the pending-job cap counts an array's elements; the
 * running-GPU cap holds a job back in the pass with the rule as its reason and lets it start once
 * there is room; commands on another user's job are refused with a verdict on reply:<id>, and an
 * owner's are applied and say so; a cancel read before its job is judged when the job is taken
 * in.  In single-user mode none of it applies, and no job_user goes to the workers.
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
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0}";

static const char rules_json[] =
    "{\"access\":{\"identity\":\"redis-acl\",\"operators\":[\"ops\"],"
    "\"groups\":{\"team\":{\"members\":[\"ada\",\"bo\"],\"max_running_gpus\":8,"
    "\"max_pending_jobs\":3}}}}";

#define J1 "1700000000001-0"
#define J2 "1700000000002-0"
#define J3 "1700000000003-0"
#define C1 "1700000000010-0"

static int setup(void **state)
{
    struct dfix *f = dfix_new(config_json);
    dfix_access(f, rules_json);
    *state = f;
    return 0;
}

static int setup_single(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

static void test_submission_belongs_to_its_writer(void **state)
{
    struct dfix *f = *state;

    dfix_submit_as(f, "ada", J1, "{\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J1), "PENDING");
    assert_string_equal(fake_field(f->store, J1, "user"), "ada");
    assert_string_equal(fake_field(f->store, J1, "submitted_by"), "ada");
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));

    dfix_submit_as(f, "ada", J2, "{\"user\":\"bo\",\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J2), "REJECTED");
    assert_non_null(strstr(fake_field(f->store, J2, "error"), "access.identity"));

    dfix_submit(f, J3, "{\"user\":\"ada\",\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J3), "REJECTED");
    assert_non_null(strstr(fake_field(f->store, J3, "error"), "submit as your own Redis user"));
}

static void test_pending_cap_counts_array_elements(void **state)
{
    struct dfix *f = *state;

    dfix_submit_as(f, "ada", J1, "{\"array\":\"0-1\",\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J1), "PENDING");
    assert_string_equal(fake_field(f->store, J1 "_0", "user"), "ada");
    dfix_submit_as(f, "ada", J2, "{\"array\":\"0-1\",\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J2), "REJECTED");
    assert_non_null(
        strstr(fake_field(f->store, J2, "error"), "access.groups.team.max_pending_jobs"));
    dfix_submit_as(f, "bo", J3, "{\"array\":\"0-2\",\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J3), "PENDING"); /* bo's own count */
}

static void test_running_cap_holds_back_then_starts(void **state)
{
    struct dfix *f = *state;
    struct fake_msg bind;
    const struct d_job *j3;

    dfix_two_nodes(f);
    dfix_submit_as(f, "ada", J2, "{\"gpus_per_task\":2,\"command\":[\"./train\"]}");
    dfix_submit_as(f, "ada", J3, "{\"gpus_per_task\":8,\"command\":[\"./train\"]}");
    d_schedule(&f->d);
    /* J2 starts (2 of 8), J3 would pass the cap: it waits with the rule as its reason, though
     * the other node is idle. */
    assert_true(fake_sent_take(f->sent, PROTO_BIND, NULL, J2, 0, &bind));
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J3, -1), 0);
    j3 = mu_map_get(f->d.jobs, J3);
    assert_non_null(j3);
    assert_non_null(strstr(j3->reason, "ada runs 2 of their 8 GPUs; this job needs 8"));
    assert_non_null(strstr(j3->reason, "access.groups.team.max_running_gpus"));
    dfix_bind_ack(f, bind.node, J2, 0, 1);
    dfix_task_exit(f, bind.node, J2, 0, 1, 0, 0);
    d_schedule(&f->d);
    assert_true(fake_sent_take(f->sent, PROTO_BIND, NULL, J3, 0, &bind));
}

static void test_commands_on_own_jobs_only(void **state)
{
    struct dfix *f = *state;

    dfix_submit_as(f, "bo", J1, "{\"command\":[\"true\"]}");
    dfix_control_as(f, "ada", C1, "hold", J1, -1);
    assert_null(fake_field(f->store, J1, "held"));
    assert_non_null(strstr(fake_status(f->store, "answer", "reply:" C1), "access.operators"));
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    dfix_control_as(f, "bo", "1700000000011-0", "hold", J1, -1);
    assert_string_equal(fake_field(f->store, J1, "held"), "1");
    assert_string_equal(fake_status(f->store, "answer", "reply:1700000000011-0"), "{\"ok\":true}");
    dfix_control_as(f, "ada", "1700000000012-0", "drain", "n1", -1);
    assert_non_null(
        strstr(fake_status(f->store, "answer", "reply:1700000000012-0"), "operators only"));
    dfix_control_as(f, "ops", "1700000000013-0", "cancel", J1, -1);
    assert_string_equal(dfix_state_field(f, J1), "CANCELLED");
    expect_last_event(f, J1, "CANCELLED", 1, "cancelled by ops");
}

static void test_early_cancel_judged_at_intake(void **state)
{
    struct dfix *f = *state;

    dfix_control_as(f, "ada", C1, "cancel", J1, -1);
    dfix_control_as(f, "bo", "1700000000011-0", "cancel", J2, -1);
    dfix_submit_as(f, "bo", J1, "{\"command\":[\"true\"]}"); /* ada's cancel: not hers */
    dfix_submit_as(f, "bo", J2, "{\"command\":[\"true\"]}"); /* bo's own */
    assert_string_equal(dfix_state_field(f, J1), "PENDING");
    assert_string_equal(dfix_state_field(f, J2), "CANCELLED");
    expect_last_event(f, J2, "CANCELLED", 1, "cancelled by bo");
}

static void test_single_user_sends_no_job_user(void **state)
{
    struct dfix *f = *state;
    char node_of[1][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_submit_as(f, "", J1, "{\"user\":\"root\",\"command\":[\"true\"]}");
    assert_string_equal(fake_field(f->store, J1, "user"), "root"); /* a label */
    assert_null(fake_field(f->store, J1, "submitted_by"));         /* nobody proven */
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 1, 1, node_of);
    assert_false(d_access_proven(&f->d));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submission_belongs_to_its_writer, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_pending_cap_counts_array_elements, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_running_cap_holds_back_then_starts, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_commands_on_own_jobs_only, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_early_cancel_judged_at_intake, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_single_user_sends_no_job_user, setup_single,
                                        dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

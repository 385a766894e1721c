/* SPDX-License-Identifier: MIT */
/*
 * musterd's dependencies (spec "after", issue #12) without Redis, through the recording store of
 * tests/unit/support/d_fake.h: a waiting job is stored PENDING with its resolved conditions and
 * a reason, and stays off the pending list (the pass never sees it); the end of the job it waits
 * for releases it or cancels it with the reason, down a chain; an unknown job or key, or the job
 * itself, rejects the submission; the stored "after" text reads back (d_deps_parse).  Slurm's
 * rules (issue #43): "notok" on an array is met once all ended and one did not succeed;
 * "started" (Slurm's "after") is met by a cancel before the start; "after_or" (Slurm's "?")
 * needs one condition; "dependency_never_met": "pend" keeps a never-satisfiable job PENDING.
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
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0}";

#define J1 "1700000000001-0"
#define J2 "1700000000002-0"
#define J3 "1700000000003-0"
#define J4 "1700000000004-0"
#define J5 "1700000000005-0"

static const char pend_config_json[] =
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0,\"dependency_never_met\":\"pend\"}";

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

static bool is_pending_listed(const struct dfix *f, const char *id)
{
    for (int i = 0; i < f->d.npending; i++) {
        if (strcmp(f->d.pending[i]->id, id) == 0)
            return true;
    }
    return false;
}

static void test_chain_cancel_cascades(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, "{\"command\":[\"true\"]}");
    dfix_submit(f, J2, "{\"after\":[\"" J1 "\"],\"command\":[\"true\"]}");
    dfix_submit(f, J3, "{\"after\":[{\"job\":\"" J2 "\",\"when\":\"ok\"}],\"command\":[\"true\"]}");
    dfix_submit(f, J4, "{\"after\":[{\"job\":\"" J1 "\",\"when\":\"notok\"}],\"command\":[\"x\"]}");
    assert_string_equal(fake_field(f->store, J2, "after"), J1 ":ok");
    assert_string_equal(fake_field(f->store, J2, "reason"), "after " J1 " succeeds");
    assert_string_equal(fake_field(f->store, J4, "reason"), "after " J1 " fails");
    assert_true(is_pending_listed(f, J1));
    assert_false(is_pending_listed(f, J2));
    assert_false(is_pending_listed(f, J3));
    assert_int_equal(f->d.npending, 1);

    dfix_control(f, "1700000000009-0", "cancel", J1, -1);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J2), "CANCELLED");
    assert_string_equal(dfix_state_field(f, J3), "CANCELLED");
    assert_string_equal(fake_field(f->store, J2, "error"),
                        "dependency never met: after " J1
                        " succeeds, but it was cancelled before it started");
    assert_string_equal(fake_field(f->store, J3, "error"),
                        "dependency never met: after " J2
                        " succeeds, but it was cancelled before it started");
    assert_string_equal(dfix_state_field(f, J4), "PENDING");
    assert_string_equal(fake_field(f->store, J4, "after_met"), "1");
    assert_true(is_pending_listed(f, J4));
    assert_int_equal(f->d.nwoken, 0);
}

static void assert_prefix(const char *text, const char *prefix)
{
    assert_non_null(text);
    if (strncmp(text, prefix, strlen(prefix)) != 0)
        fail_msg("'%s' does not start with '%s'", text, prefix);
}

static int setup_pend(void **state)
{
    *state = dfix_new(pend_config_json);
    return 0;
}

/* Slurm's afternotok on an array: once every element ended and one did not succeed (muster
 * used to cancel the dependent unless every element failed); never when all succeeded. */
static void test_array_notok_one_failed(void **state)
{
    struct dfix *f = *state;

    dfix_two_nodes(f);
    dfix_submit(f, J1, "{\"array\":\"0-3\",\"max_retries\":0,\"command\":[\"./sweep\"]}");
    dfix_submit(f, J2, "{\"after\":[{\"job\":\"" J1 "\",\"when\":\"notok\"}],\"command\":[\"x\"]}");
    dfix_submit(f, J3, "{\"array\":\"0-1\",\"max_retries\":0,\"command\":[\"./sweep\"]}");
    dfix_submit(f, J4, "{\"after\":[{\"job\":\"" J3 "\",\"when\":\"notok\"}],\"command\":[\"x\"]}");
    d_schedule(&f->d);
    dfix_element_run(f, J1, 0, 0);
    dfix_element_run(f, J1, 1, 3); /* one failed: not met yet, others still run */
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J2), "PENDING");
    assert_string_equal(fake_field(f->store, J2, "reason"), "after " J1 " fails");
    dfix_element_run(f, J1, 2, 0);
    dfix_element_run(f, J1, 3, 0);
    d_schedule(&f->d);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J1), "FAILED");
    assert_string_equal(fake_field(f->store, J2, "after_met"), "1");
    assert_string_equal(dfix_state_field(f, J2), "STARTING"); /* released, and placed */
    /* All of J3's elements succeed: J4 can never run. */
    dfix_element_run(f, J3, 0, 0);
    dfix_element_run(f, J3, 1, 0);
    d_schedule(&f->d);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J3), "SUCCEEDED");
    assert_string_equal(dfix_state_field(f, J4), "CANCELLED");
    assert_string_equal(fake_field(f->store, J4, "error"),
                        "dependency never met: after " J3
                        " fails, but all 2 of its elements succeeded");
}

/* Slurm's "after": met once the job is no longer pending, a cancel before its start included
 * (muster used to cancel the dependent); on an array once no element is pending. */
static void test_started_met_by_cancel(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, "{\"gpus_per_task\":8,\"command\":[\"true\"]}");
    dfix_submit(f, J2,
                "{\"after\":[{\"job\":\"" J1 "\",\"when\":\"started\"}],\"command\":[\"x\"]}");
    dfix_submit(f, J3, "{\"array\":\"0-2\",\"command\":[\"./sweep\"]}");
    dfix_submit(f, J4,
                "{\"after\":[{\"job\":\"" J3 "\",\"when\":\"started\"}],\"command\":[\"x\"]}");
    assert_string_equal(fake_field(f->store, J2, "reason"), "after " J1 " starts");
    dfix_control(f, "1700000000009-0", "cancel", J1, -1);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J1), "CANCELLED");
    assert_string_equal(dfix_state_field(f, J2), "PENDING");
    assert_string_equal(fake_field(f->store, J2, "after_met"), "1");
    assert_true(is_pending_listed(f, J2));
    /* The array: one element cancelled before it started, the others not started yet. */
    dfix_control(f, "1700000000010-0", "cancel", J3 "_0", -1);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J4), "PENDING");
    assert_null(fake_field(f->store, J4, "after_met"));
    dfix_control(f, "1700000000011-0", "cancel", J3, -1);
    d_schedule(&f->d);
    assert_string_equal(fake_field(f->store, J4, "after_met"), "1");
    assert_true(is_pending_listed(f, J4));
}

/* "after_or" (Slurm's "?"): the first condition met releases the job; it can never run only
 * once none can be met.  The stored text uses Slurm's separator and reads back. */
static void test_after_or(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, "{\"gpus_per_task\":8,\"command\":[\"true\"]}");
    dfix_submit(f, J2, "{\"gpus_per_task\":8,\"command\":[\"true\"]}");
    dfix_submit(f, J3, "{\"after_or\":true,\"after\":[\"" J1 "\",\"" J2 "\"],\"command\":[\"x\"]}");
    dfix_submit(f, J4,
                "{\"after_or\":true,\"after\":[\"" J1 "\",{\"job\":\"" J2
                "\",\"when\":\"notok\"}],\"command\":[\"x\"]}");
    dfix_submit(f, J5, "{\"after_or\":true,\"singleton\":true,\"name\":\"s\",\"command\":[\"x\"]}");
    assert_string_equal(fake_field(f->store, J3, "after"), J1 ":ok?" J2 ":ok");
    assert_string_equal(fake_field(f->store, J3, "reason"),
                        "after " J1 " succeeds (or 1 more condition)");
    assert_string_equal(dfix_state_field(f, J5), "REJECTED");
    assert_prefix(fake_field(f->store, J5, "error"), "after_or: not with singleton");
    dfix_control(f, "1700000000009-0", "cancel", J1, -1);
    d_schedule(&f->d);
    /* J1 can never succeed: both wait for J2 now. */
    assert_string_equal(dfix_state_field(f, J3), "PENDING");
    assert_string_equal(fake_field(f->store, J3, "reason"), "after " J2 " succeeds");
    assert_string_equal(fake_field(f->store, J4, "reason"), "after " J2 " fails");
    dfix_control(f, "1700000000010-0", "cancel", J2, -1);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J3), "CANCELLED");
    assert_string_equal(fake_field(f->store, J3, "error"),
                        "dependency never met: none of its 2 alternatives can be, the last: "
                        "after " J2 " succeeds, but it was cancelled before it started");
    assert_string_equal(dfix_state_field(f, J4), "PENDING");
    assert_string_equal(fake_field(f->store, J4, "after_met"), "1");
}

/* dependency_never_met "pend" (Slurm's default): the job stays PENDING with the reason, off the
 * pending list, and so do the jobs after it; at intake too. */
static void test_never_met_pend(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, "{\"gpus_per_task\":8,\"command\":[\"true\"]}");
    dfix_submit(f, J2, "{\"after\":[\"" J1 "\"],\"command\":[\"true\"]}");
    dfix_submit(f, J3, "{\"after\":[\"" J2 "\"],\"command\":[\"true\"]}");
    dfix_control(f, "1700000000009-0", "cancel", J1, -1);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J2), "PENDING");
    assert_string_equal(fake_field(f->store, J2, "reason"),
                        "dependency never met: after " J1
                        " succeeds, but it was cancelled before it started");
    assert_false(is_pending_listed(f, J2));
    assert_string_equal(dfix_state_field(f, J3), "PENDING");
    assert_string_equal(fake_field(f->store, J3, "reason"), "after " J2 " succeeds");
    /* A new job after the cancelled one: stored PENDING with the reason, not cancelled. */
    dfix_submit(f, J4, "{\"after\":[\"" J1 "\"],\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J4), "PENDING");
    assert_prefix(fake_field(f->store, J4, "reason"), "dependency never met: after " J1);
    assert_false(is_pending_listed(f, J4));
    /* The operator's cancel still ends it, and the chain after it follows the usual rule. */
    dfix_control(f, "1700000000010-0", "cancel", J2, -1);
    d_schedule(&f->d);
    assert_string_equal(dfix_state_field(f, J2), "CANCELLED");
    assert_prefix(fake_field(f->store, J3, "reason"), "dependency never met: after " J2);
    assert_string_equal(dfix_state_field(f, J3), "PENDING");
}

static void test_bad_conditions_rejected(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, "{\"after\":[\"1600000000000-0\"],\"command\":[\"true\"]}");
    dfix_submit(f, J2, "{\"after\":[\"" J2 "\"],\"command\":[\"true\"]}");
    dfix_submit(f, J3, "{\"after\":[{\"key\":\"nope\"}],\"command\":[\"true\"]}");
    dfix_submit(f, J4, "{\"singleton\":true,\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J1), "REJECTED");
    assert_string_equal(fake_field(f->store, J1, "error"),
                        "after[0]: unknown job '1600000000000-0'; hint: musterctl jobs --all "
                        "lists them (a finished job leaves Redis keep_finished_s after it ended)");
    assert_string_equal(fake_field(f->store, J2, "error"),
                        "after[0].job: '" J2 "' is this job itself");
    assert_non_null(strstr(fake_field(f->store, J3, "error"), "no job has idempotency key"));
    assert_non_null(strstr(fake_field(f->store, J4, "error"), "singleton: needs a 'name'"));
    assert_int_equal(f->d.npending, 0);
}

/* A key names the job that claimed it; a finished job's outcome is judged at once. */
static void test_key_and_finished(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, "{\"idempotency_key\":\"step-1\",\"command\":[\"true\"]}");
    dfix_submit(f, J2, "{\"after\":[{\"key\":\"step-1\",\"when\":\"any\"}],\"command\":[\"x\"]}");
    assert_string_equal(fake_field(f->store, J2, "after"), J1 ":any");
    dfix_control(f, "1700000000009-0", "cancel", J1, -1);
    d_schedule(&f->d);
    assert_true(is_pending_listed(f, J2));
    /* J1 is CANCELLED in the store and gone from memory: a new job is judged from the store. */
    dfix_submit(f, J3, "{\"after\":[\"" J1 "\"],\"command\":[\"true\"]}");
    assert_string_equal(dfix_state_field(f, J3), "CANCELLED");
    dfix_submit(f, J4, "{\"after\":[{\"job\":\"" J1 "\",\"when\":\"notok\"}],\"command\":[\"x\"]}");
    assert_string_equal(fake_field(f->store, J4, "after_met"), "1");
    assert_true(is_pending_listed(f, J4));
}

static void test_stored_text_parse(void **state)
{
    static const char *const bad[] = { "1-0",        "1-0:",          "1-0:maybe",
                                       "x-0:ok",     "1-0:ok,",       ":ok",
                                       "1-0:ok,2-0", "1-0:ok:ok",     "1-0:ok?2-0:ok,3-0:ok",
                                       "1-0:ok?",    "1-0:ok?2-0:ok?" };
    struct d_job *j = d_job_new(J1);
    struct mu_err err;
    char *text;
    (void)state;

    assert_non_null(j);
    assert_int_equal(d_deps_parse(j, "1-0:ok,22-3:notok,4-0:any,5-5:started", &err), 0);
    assert_int_equal(j->ndeps, 4);
    assert_int_equal(j->deps_open, 4);
    assert_string_equal(j->deps[1].id, "22-3");
    assert_int_equal(j->deps[1].when, QUEUE_WHEN_NOTOK);
    assert_int_equal(j->deps[3].when, QUEUE_WHEN_STARTED);
    text = d_deps_format(j);
    assert_non_null(text);
    assert_string_equal(text, "1-0:ok,22-3:notok,4-0:any,5-5:started");
    free(text);
    d_job_free(j);
    j = d_job_new(J1);
    assert_non_null(j);
    assert_int_equal(d_deps_parse(j, "1-0:ok?22-3:notok", &err), 0);
    assert_true(j->deps_or);
    assert_int_equal(j->ndeps, 2);
    text = d_deps_format(j);
    assert_non_null(text);
    assert_string_equal(text, "1-0:ok?22-3:notok");
    free(text);
    d_job_free(j);
    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        j = d_job_new(J1);
        assert_non_null(j);
        if (d_deps_parse(j, bad[i], &err) == 0)
            fail_msg("accepted '%s'", bad[i]);
        d_job_free(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chain_cancel_cascades, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_bad_conditions_rejected, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_key_and_finished, setup, dfix_teardown),
        cmocka_unit_test(test_stored_text_parse),
        cmocka_unit_test_setup_teardown(test_array_notok_one_failed, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_started_met_by_cancel, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_after_or, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_never_met_pend, setup_pend, dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

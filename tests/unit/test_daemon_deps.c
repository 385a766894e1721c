/* SPDX-License-Identifier: MIT */
/*
 * musterd's dependencies (spec "after", issue #12) without Redis, through the recording store of
 * tests/unit/support/d_fake.h: a waiting job is stored PENDING with its resolved conditions and
 * a reason, and stays off the pending list (the pass never sees it); the end of the job it waits
 * for releases it or cancels it with the reason, down a chain; an unknown job or key, or the job
 * itself, rejects the submission; the stored "after" text reads back (d_deps_parse).
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
                        "lists them");
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
    static const char *const bad[] = { "1-0",     "1-0:", "1-0:maybe",  "x-0:ok",
                                       "1-0:ok,", ":ok",  "1-0:ok,2-0", "1-0:ok:ok" };
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

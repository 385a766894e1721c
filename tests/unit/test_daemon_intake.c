/* SPDX-License-Identifier: MIT */
/*
 * musterd's intake without Redis (issue #19), through the recording store of
 * tests/unit/support/d_fake.h: a good submission is stored PENDING and its stream entry
 * acknowledged in the same write; a bad one is stored REJECTED with an error that names the key;
 * an idempotency key already used makes no second job; a submission whose write fails is not
 * acknowledged (Redis hands it out again) and is taken in when read again; one read again after
 * it was stored (the acknowledgement was lost) makes no second job.
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
    "\"queues\":[{\"name\":\"default\",\"weight\":1},{\"name\":\"research\",\"weight\":2}],"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0}";

#define J1 "1700000000001-0"
#define J2 "1700000000002-0"

#define GANG2 "{\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"./train\"]}"

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

static void test_submission_stored_pending(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1,
                "{\"name\":\"bert\",\"queue\":\"research\",\"priority\":5,\"tasks\":2,"
                "\"gpus_per_task\":4,\"max_retries\":2,\"user\":\"ada\","
                "\"command\":[\"./train\"]}");
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));
    assert_int_equal(fake_event_count(f->store, J1), 1);
    expect_last_event(f, J1, "PENDING", 1, "submitted");
    assert_string_equal(fake_field(f->store, J1, "state"), "PENDING");
    assert_string_equal(fake_field(f->store, J1, "name"), "bert");
    assert_string_equal(fake_field(f->store, J1, "queue"), "research");
    assert_string_equal(fake_field(f->store, J1, "user"), "ada");
    assert_string_equal(fake_field(f->store, J1, "priority"), "5");
    assert_string_equal(fake_field(f->store, J1, "tasks"), "2");
    assert_string_equal(fake_field(f->store, J1, "gpus_per_task"), "4");
    assert_string_equal(fake_field(f->store, J1, "max_retries"), "2");
    assert_string_equal(fake_field(f->store, J1, "submitted_at"), "1700000000001");
    assert_int_equal(fake_counter(f->store, "jobs_submitted"), 1);
}

/* Bad specs: REJECTED, the error names what is wrong, the entry is acknowledged, nothing is
 * queued. */
static void test_bad_spec_rejected(void **state)
{
    static const struct {
        const char *spec;
        const char *error_part;
    } cases[] = {
        { "{\"tasks\":0,\"command\":[\"true\"]}", "tasks" },
        { "{\"tasks\":1,\"gpus_per_task\":16,\"command\":[\"true\"]}", "gpus_per_task" },
        { "{\"queue\":\"nope\",\"command\":[\"true\"]}", "nope" },
        { "{\"command\":[\"true\"],\"colour\":\"red\"}", "colour" },
        { "not json", "" },
    };
    const int ncases = (int)MU_ARRAY_LEN(cases);
    struct dfix *f = *state;
    char id[32];

    (void)dfix_hello(f, "n1", "od", 8);
    for (int i = 0; i < ncases; i++) {
        const char *error;
        (void)mu_snprintf(id, sizeof(id), "17000000000%02d-0", i + 10);
        dfix_submit(f, id, cases[i].spec);
        expect_last_event(f, id, "REJECTED", -1, NULL);
        assert_string_equal(fake_field(f->store, id, "state"), "REJECTED");
        error = fake_field(f->store, id, "error");
        assert_non_null(error);
        if (!strstr(error, cases[i].error_part))
            fail_msg("spec %s: error '%s' does not name '%s'", cases[i].spec, error,
                     cases[i].error_part);
        assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, id));
        assert_int_equal(dfix_job_state(f, id), -1);
    }
    assert_int_equal(fake_counter(f->store, "jobs_rejected"), ncases);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
}

/* A second submission under an idempotency key already used makes no job: a DUPLICATE event
 * names the first, and only the first runs. */
static void test_idempotency_key_duplicate(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    const char *spec =
        "{\"tasks\":2,\"gpus_per_task\":8,\"idempotency_key\":\"nightly-42\",\"command\":[\"x\"]}";

    (void)dfix_hello(f, "n1", "od", 8);
    (void)dfix_hello(f, "n2", "od", 8);
    (void)dfix_hello(f, "n3", "od", 8);
    (void)dfix_hello(f, "n4", "od", 8);
    dfix_submit(f, J1, spec);
    expect_last_event(f, J1, "PENDING", 1, "submitted");
    dfix_submit(f, J2, spec);
    expect_last_event(f, J2, "DUPLICATE", -1, "idempotency key 'nightly-42' already used by job");
    expect_last_event(f, J2, "DUPLICATE", -1, J1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J2));
    assert_int_equal(dfix_job_state(f, J2), -1);

    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);
}

/* The store fails: the submission is not acknowledged and no job is kept; read again once the
 * store is back, it is taken in; read yet again (the acknowledgement lost in a crash), it makes
 * no second job. */
static void test_submission_write_fails_not_acked(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];

    fake_store_fail(f->store, true);
    dfix_submit(f, J1, GANG2);
    assert_true(f->d.redis_down);
    assert_false(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));
    assert_int_equal(fake_event_count(f->store, J1), 0);
    assert_int_equal(dfix_job_state(f, J1), -1);

    dfix_store_recover(f);
    dfix_submit(f, J1, GANG2);
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));
    expect_last_event(f, J1, "PENDING", 1, "submitted");

    dfix_submit(f, J1, GANG2);
    assert_int_equal(fake_event_count(f->store, J1), 1);
    assert_int_equal(fake_counter(f->store, "jobs_submitted"), 1);

    (void)dfix_hello(f, "n1", "od", 8);
    (void)dfix_hello(f, "n2", "od", 8);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submission_stored_pending, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_bad_spec_rejected, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_idempotency_key_duplicate, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_submission_write_fails_not_acked, setup,
                                        dfix_teardown),
    };
    mu_log_set_level(MU_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Nothing an operator says is dropped (issue #40), through the recording store of
 * tests/unit/support/d_fake.h: a cordon or drain of a node that is not registered is kept and
 * applied when it registers, uncordon clears the kept state, and a control entry read after its
 * deadline (its id's ms plus timeout_ms, against Redis's clock) is dropped, never applied; and
 * the pure helpers of queue/durable.c (the node:wanted value, the deadline).  Redis's clock is
 * set by the test, never read from the host.
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
    "{\"pools\":["
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"heartbeat_s\":1,\"node_lost_after_s\":10,\"bind_timeout_s\":30,\"kill_grace_s\":10,"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0}";

#define J1    "1700000000001-0"
#define C1    "1700000000100-0" /* control entries: Redis's clock at their XADD, in ms */
#define C2    "1700000000101-0"
#define C1_MS UINT64_C(1700000000100)
#define ONE   "{\"gpus_per_task\":8,\"command\":[\"./train\"]}"

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

static void control_timeout(struct dfix *f, const char *id, const char *cmd, uint64_t timeout_ms)
{
    struct queue_entry e;

    memset(&e, 0, sizeof(e));
    mu_strlcpy(e.id, id, sizeof(e.id));
    e.stream = QUEUE_STREAM_CONTROL;
    mu_strlcpy(e.cmd, cmd, sizeof(e.cmd));
    mu_strlcpy(e.arg, J1, sizeof(e.arg));
    e.grace_s = -1;
    e.timeout_ms = timeout_ms;
    d_control(&f->d, &e);
}

/* The user's report: a cordon read 0.4 s before the node registers was dropped with a warning,
 * and the node took work.  Now it is kept and the node registers cordoned. */
static void test_cordon_before_registration_kept(void **state)
{
    struct dfix *f = *state;
    struct d_node *node;

    dfix_control(f, C1, "cordon", "n1", -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    node = dfix_hello(f, "n1", "od", 8);
    assert_int_equal(node->admin, SCHED_NODE_CORDONED);
    assert_int_equal(sched_cluster_node_state(f->d.cluster, node->idx), SCHED_NODE_CORDONED);
    dfix_submit(f, J1, ONE);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);
    d_status_write(&f->d);
    assert_non_null(strstr(fake_status(f->store, "nodes", "n1"), "\"state\":\"cordoned\""));

    /* uncordon clears it: the node works at once, and registers ready next time. */
    dfix_control(f, C2, "uncordon", "n1", -1);
    assert_null(d_wanted_get(&f->d, "n1"));
    d_schedule(&f->d);
    expect_sent(f, PROTO_BIND, "n1", J1, 0, 1, NULL);
}

static void test_uncordon_before_registration_clears(void **state)
{
    struct dfix *f = *state;

    dfix_control(f, C1, "drain", "n1", 30);
    assert_non_null(d_wanted_get(&f->d, "n1"));
    assert_int_equal(d_wanted_get(&f->d, "n1")->admin, SCHED_NODE_DRAINING);
    assert_int_equal(d_wanted_get(&f->d, "n1")->grace_s, 30);
    dfix_control(f, C2, "uncordon", "n1", -1);
    assert_null(d_wanted_get(&f->d, "n1"));
    assert_int_equal(dfix_hello(f, "n1", "od", 8)->admin, SCHED_NODE_READY);
}

static void test_drain_before_registration_kept(void **state)
{
    struct dfix *f = *state;
    struct d_node *node;

    dfix_control(f, C1, "drain", "n1", 5);
    node = dfix_hello(f, "n1", "od", 8);
    assert_int_equal(node->admin, SCHED_NODE_DRAINING);
    assert_int_equal(node->drain_grace_s, 5);
    dfix_submit(f, J1, ONE);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);
}

/* A why read after its deadline is dropped and answered as expired; one in time is answered. */
static void test_expired_why_dropped(void **state)
{
    struct dfix *f = *state;
    const char *answer;

    /* A node, so that the answer's placement search has one to look at. */
    (void)dfix_hello(f, "n1", "od", 8);
    dfix_submit(f, J1, ONE);
    fake_store_set_time(f->store, C1_MS + 10001);
    control_timeout(f, C1, "why", 10000);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    answer = fake_status(f->store, "answer", "why:" C1);
    assert_non_null(answer);
    assert_non_null(strstr(answer, "\"error\":\"expired"));

    fake_store_set_time(f->store, C1_MS + 10000); /* at the deadline: still in time */
    control_timeout(f, C2, "why", 10000);
    answer = fake_status(f->store, "answer", "why:" C2);
    assert_non_null(answer);
    assert_null(strstr(answer, "expired"));
    assert_non_null(strstr(answer, "\"job\":\"" J1 "\""));
}

/* A stale reload is never applied: musterd has no config file here, so an applied one would
 * write its refusal to the reload hash. */
static void test_expired_reload_not_applied(void **state)
{
    struct dfix *f = *state;

    fake_store_set_time(f->store, C1_MS + 60000);
    control_timeout(f, C1, "reload", 10000);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_null(fake_status(f->store, "reload", "result"));
    control_timeout(f, C2, "reload", 0); /* no deadline: applied whenever read */
    assert_non_null(fake_status(f->store, "reload", "result"));
}

/* Redis's clock cannot be read: the entry stays unacknowledged, read again after the reconnect. */
static void test_deadline_unreadable_not_acked(void **state)
{
    struct dfix *f = *state;

    fake_store_fail(f->store, true);
    control_timeout(f, C1, "reload", 10000);
    assert_false(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_true(f->d.redis_down);
}

static void test_wanted_value(void **state)
{
    static const char *const bad[] = {
        "",
        "{}",
        "{\"state\":\"ready\"}",
        "{\"state\":\"cordoned\",\"grace_s\":-1}",
        "nonsense",
        "{\"state\":1}",
        "{\"state\":\"draining\",\"grace_s\":\"5\"}",
    };
    char buf[64];
    char state_text[16];
    int grace_s = 0;
    struct mu_err err;

    (void)state;
    assert_string_equal(queue_wanted_state("cordon"), "cordoned");
    assert_string_equal(queue_wanted_state("drain"), "draining");
    assert_null(queue_wanted_state("uncordon"));
    assert_int_equal(queue_wanted_format("draining", 30, buf, sizeof(buf)), 0);
    assert_int_equal(queue_wanted_parse(buf, state_text, sizeof(state_text), &grace_s, &err), 0);
    assert_string_equal(state_text, "draining");
    assert_int_equal(grace_s, 30);
    assert_int_equal(queue_wanted_format("cordoned", -1, buf, sizeof(buf)), 0);
    assert_int_equal(queue_wanted_parse(buf, state_text, sizeof(state_text), &grace_s, &err), 0);
    assert_string_equal(state_text, "cordoned");
    assert_int_equal(grace_s, -1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(queue_wanted_parse(bad[i], state_text, sizeof(state_text), &grace_s, &err),
                         -1);
}

static void test_control_expired(void **state)
{
    (void)state;
    assert_false(queue_control_expired(C1, 0, C1_MS + 999999)); /* no deadline */
    assert_false(queue_control_expired(C1, 10000, C1_MS + 10000));
    assert_true(queue_control_expired(C1, 10000, C1_MS + 10001));
    assert_false(queue_control_expired(C1, 10000, 0)); /* Redis's clock behind the id */
    assert_false(queue_control_expired("garbage", 10000, C1_MS + 20000));
    assert_false(queue_control_expired("", 10000, C1_MS + 20000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cordon_before_registration_kept, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_uncordon_before_registration_clears, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_drain_before_registration_kept, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_expired_why_dropped, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_expired_reload_not_applied, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_deadline_unreadable_not_acked, setup, dfix_teardown),
        cmocka_unit_test(test_wanted_value),
        cmocka_unit_test(test_control_expired),
    };
    mu_log_set_level(MU_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * musterd's answers to musterctl (issue #18) without Redis or ZeroMQ, through the recording
 * store and sender of tests/unit/support/d_fake.h.  The log relay (scheduler/d_logs.c): a request
 * goes to the node it names as a LOG_READ and its LOG_DATA becomes the answer; only that node can
 * answer it; a node that is not registered, a bad request, too many requests in flight and a node
 * that does not answer are each answered at once with their code.  why (scheduler/d_why.c): a
 * held job's reasons per capacity type and its preemption preview name the victim, and nothing is
 * sent or written for the victim.  Times are passed in, never slept for.
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
    "{\"pools\":["
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"heartbeat_s\":1,\"node_lost_after_s\":10,\"min_runtime_s\":0}";

#define J1 "1700000000001-0"

static int setup(void **state)
{
    struct dfix *f = dfix_new(config_json);
    dfix_two_nodes(f);
    *state = f;
    return 0;
}

/* The daemon reads log request entry_id for node's log of J1 task 1 attempt 2. */
static void request(struct dfix *f, const char *entry_id, const char *node, const char *error)
{
    struct queue_entry e;

    memset(&e, 0, sizeof(e));
    mu_strlcpy(e.id, entry_id, sizeof(e.id));
    e.stream = QUEUE_STREAM_LOGS;
    mu_strlcpy(e.log.node, node, sizeof(e.log.node));
    mu_strlcpy(e.log.job, J1, sizeof(e.log.job));
    e.log.task = 1;
    e.log.attempt = 2;
    mu_strlcpy(e.log.stream, "out", sizeof(e.log.stream));
    e.log.offset = 4096;
    e.log.max_bytes = 65536;
    mu_strlcpy(e.log.error, error, sizeof(e.log.error));
    d_logs_request(&f->d, &e);
}

/* node's LOG_DATA for request req: 5 bytes at 4096 of a 5000-byte file. */
static void data_from(struct dfix *f, const char *node, const char *req)
{
    struct proto_msg m;
    struct mu_err err;

    proto_msg_init(&m, PROTO_LOG_DATA);
    mu_strlcpy(m.req, req, sizeof(m.req));
    mu_strlcpy(m.task.job, J1, sizeof(m.task.job));
    m.task.task = 1;
    m.task.attempt = 2;
    m.ok = true;
    m.offset = 4096;
    m.size = 5000;
    mu_strlcpy(m.path, "/state/logs/" J1 ".2.1.out", sizeof(m.path));
    assert_int_equal(proto_msg_set_data(&m, "hello", 5, &err), 0);
    d_logs_data(&f->d, d_node_get(&f->d, node), &m);
    proto_msg_release(&m);
}

/* The answer to req, which must contain each of the parts. */
static void expect_answer(const struct dfix *f,
                          const char *req,
                          const char *part1,
                          const char *part2)
{
    const char *head = fake_status(f->store, "logreply", req);

    if (!head) {
        fail_msg("no answer to %s", req);
        return;
    }
    if (!strstr(head, part1) || (part2 && !strstr(head, part2)))
        fail_msg("answer to %s: %s", req, head);
}

static void test_relay_and_answer(void **state)
{
    struct dfix *f = *state;
    struct fake_msg m;

    request(f, "1700000000100-0", "n1", "");
    expect_sent(f, PROTO_LOG_READ, "n1", J1, 1, 2, &m);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_null(fake_status(f->store, "logreply", "1700000000100-0"));

    data_from(f, "n2", "1700000000100-0"); /* not the node asked: ignored */
    assert_null(fake_status(f->store, "logreply", "1700000000100-0"));
    data_from(f, "n1", "1700000000100-0");
    expect_answer(f, "1700000000100-0", "\"ok\":true", "\"len\":5");
    expect_answer(f, "1700000000100-0", "\"offset\":4096", "\"size\":5000");
    expect_answer(f, "1700000000100-0", "\"node\":\"n1\"", ".2.1.out");
    assert_int_equal(f->d.logs.nwait, 0);
    d_logs_check(&f->d, mu_time_mono_ms() + 60000); /* answered: no timeout later */
    expect_answer(f, "1700000000100-0", "\"ok\":true", NULL);
}

static void test_refusals(void **state)
{
    struct dfix *f = *state;

    request(f, "1700000000100-0", "n9", "");
    expect_answer(f, "1700000000100-0", "\"code\":\"gone\"", "'n9' has not registered");
    request(f, "1700000000101-0", "n1", "field 'stream': expected out or err");
    expect_answer(f, "1700000000101-0", "\"code\":\"bad\"", "expected out or err");
    assert_int_equal(fake_sent_count(f->sent), 0);
}

static void test_limits_and_timeout(void **state)
{
    struct dfix *f = *state;
    char id[32];

    for (int i = 0; i < D_LOG_WAITS; i++) {
        (void)mu_snprintf(id, sizeof(id), "1700000000200-%d", i);
        request(f, id, i % 2 ? "n1" : "n2", "");
    }
    assert_int_equal(fake_sent_count(f->sent), D_LOG_WAITS);
    request(f, "1700000000300-0", "n1", ""); /* one too many in flight */
    expect_answer(f, "1700000000300-0", "\"code\":\"busy\"", NULL);
    assert_int_equal(fake_sent_count(f->sent), D_LOG_WAITS);

    d_logs_check(&f->d, mu_time_mono_ms() + 60000); /* nobody answered */
    assert_int_equal(f->d.logs.nwait, 0);
    expect_answer(f, "1700000000200-0", "\"code\":\"timeout\"", "'n2' did not answer");
    expect_answer(f, "1700000000200-1", "\"code\":\"timeout\"", "'n1' did not answer");
    data_from(f, "n1", "1700000000200-1"); /* too late: the timeout stays the answer */
    expect_answer(f, "1700000000200-1", "\"code\":\"timeout\"", NULL);
}

/* ---- why ---- */

static void test_why_preview_changes_nothing(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    const char *answer;
    int victim_events;

    dfix_start_gang(f, J1, "{\"priority\":1,\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"x\"]}",
                    2, node_of);
    dfix_submit(f, "1700000000002-0",
                "{\"priority\":10,\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"y\"]}");
    dfix_control(f, "1700000000100-0", "hold", "1700000000002-0", -1);
    d_schedule(&f->d);
    fake_sent_clear(f->sent);
    victim_events = fake_event_count(f->store, J1);

    dfix_control(f, "1700000000101-0", "why", "1700000000002-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000101-0");
    assert_non_null(answer);
    assert_non_null(strstr(answer, "\"state\":\"PENDING\""));
    assert_non_null(strstr(answer, "\"type\":\"on-demand\",\"fits\":false"));
    assert_non_null(strstr(answer, "\"plan\":true"));
    assert_non_null(strstr(answer, "\"queue\":{\"name\":\"default\",\"quota_ok\":true"));
    assert_non_null(strstr(answer, "\"victims\":[{\"job\":\"" J1 "\""));
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, "1700000000101-0"));
    /* A dry run: no message to any worker, nothing written for the victim, still placed. */
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_int_equal(fake_event_count(f->store, J1), victim_events);
    assert_int_equal(dfix_job_state(f, J1), QUEUE_RUNNING);

    dfix_control(f, "1700000000102-0", "why", "1700000000009-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000102-0");
    assert_non_null(answer);
    assert_non_null(strstr(answer, "not active in musterd"));
}

/* A pending job behind a running gang of the same priority: the pass's reservation, with its
 * estimated start from the running gang's time limit. */
static void test_why_estimated_start(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    const char *answer;
    const char *at;
    long in_s;

    dfix_start_gang(f, J1,
                    "{\"tasks\":2,\"gpus_per_task\":8,\"time_limit_s\":600,\"command\":[\"x\"]}", 2,
                    node_of);
    dfix_submit(f, "1700000000002-0", "{\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"y\"]}");
    d_schedule(&f->d);
    dfix_control(f, "1700000000101-0", "why", "1700000000002-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000101-0");
    assert_non_null(answer);
    at = strstr(answer, "\"est_start_in_s\":");
    if (!at) {
        fail_msg("why without an estimated start: %s", answer);
        return;
    }
    in_s = strtol(at + strlen("\"est_start_in_s\":"), NULL, 10);
    assert_true(in_s > 0 && in_s <= 600); /* the running gang's time limit, from its start */
    /* The core's search names the gang whose end makes room; it is this job's reservation.  One
     * node never takes the 2x8 gang: its level "node" says so (not until nodes join). */
    if (!strstr(answer, "\"start\":{\"reservation\":true,")
        || !strstr(answer, "\"freed_by\":\"" J1 "\",\"freed_when\":\"time_limit\"")
        || !strstr(answer, "\"level\":\"node\",\"free_tasks\":0,\"max_tasks\":1,"
                           "\"state\":\"until_nodes_join\""))
        fail_msg("why without the gang that frees the room: %s", answer);
}

/* A job that fits now only on the GPUs reserved for a higher-priority job, with no time limit:
 * why says it would delay that reservation; its dependencies and place in the order are shown. */
static void test_why_backfill(void **state)
{
    struct dfix *f = *state;
    char node_of[1][PROTO_NODE_MAX];
    const char *answer;

    dfix_start_gang(f, J1,
                    "{\"priority\":10,\"tasks\":1,\"gpus_per_task\":8,\"time_limit_s\":600,"
                    "\"command\":[\"x\"]}",
                    1, node_of);
    dfix_submit(f, "1700000000002-0",
                "{\"priority\":10,\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"y\"]}");
    dfix_submit(f, "1700000000003-0", "{\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"z\"]}");
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, "1700000000003-0", -1), 0);
    dfix_control(f, "1700000000101-0", "why", "1700000000003-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000101-0");
    assert_non_null(answer);
    if (!strstr(answer, "\"fits_now\":true,\"est_start_s\":")
        || !strstr(answer, "\"freed_when\":\"reservation_starts\"")
        || !strstr(answer, "\"backfill\":{\"state\":\"delays_reservation\",\"reservation_job\":"
                           "\"1700000000002-0\"")
        || !strstr(answer, "\"time_limit\":false")
        || !strstr(answer, "\"order\":{\"in_pass\":true,\"ahead\":1,\"ahead_other_queues\":0"))
        fail_msg("why of a job held back by a reservation: %s", answer);
}

/* Two queues: queue b's running gang puts queue a's later job first in the fair-share order, so
 * b's pending job has one job of another queue ahead of it; a job waiting for another's end
 * names it (its dependencies). */
static void test_why_order_and_deps(void **state)
{
    struct dfix *f =
        dfix_new("{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5\","
                 "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
                 "\"queues\":[{\"name\":\"a\"},{\"name\":\"b\"}],\"heartbeat_s\":1}");
    char node_of[1][PROTO_NODE_MAX];
    const char *answer;

    (void)state;
    dfix_two_nodes(f);
    dfix_start_gang(f, J1, "{\"queue\":\"b\",\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"x\"]}",
                    1, node_of);
    dfix_submit(f, "1700000000002-0",
                "{\"queue\":\"b\",\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"y\"]}");
    dfix_submit(f, "1700000000003-0",
                "{\"queue\":\"a\",\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"z\"]}");
    dfix_submit(f, "1700000000004-0",
                "{\"queue\":\"a\",\"after\":[\"" J1 "\"],\"tasks\":1,\"gpus_per_task\":8,"
                "\"command\":[\"w\"]}");
    d_schedule(&f->d);
    dfix_control(f, "1700000000101-0", "why", "1700000000002-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000101-0");
    assert_non_null(answer);
    if (!strstr(answer, "\"order\":{\"in_pass\":true,\"ahead\":1,\"ahead_other_queues\":1"))
        fail_msg("why of a job behind another queue's by fair share: %s", answer);
    dfix_control(f, "1700000000102-0", "why", "1700000000004-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000102-0");
    assert_non_null(answer);
    if (!strstr(answer, "\"in_pass\":false,") || !strstr(answer, "\"dependencies_open\":1,")
        || !strstr(answer, J1))
        fail_msg("why of a job waiting for another's end: %s", answer);
    dfix_free(f);
}

/* A queue at its quota: why says so, with the core's quota reason. */
static void test_why_at_quota(void **state)
{
    struct dfix *f = dfix_new(
        "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5\","
        "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
        "\"queues\":[{\"name\":\"default\",\"quota\":{\"on-demand\":8}}],\"heartbeat_s\":1}");
    char node_of[1][PROTO_NODE_MAX];
    const char *answer;

    (void)state;
    dfix_two_nodes(f);
    dfix_start_gang(f, J1, "{\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"x\"]}", 1, node_of);
    dfix_submit(f, "1700000000002-0", "{\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"y\"]}");
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, "1700000000002-0", -1), 0);
    dfix_control(f, "1700000000101-0", "why", "1700000000002-0", -1);
    answer = fake_status(f->store, "answer", "why:1700000000101-0");
    assert_non_null(answer);
    if (!strstr(answer, "\"quota_ok\":false") || !strstr(answer, "at quota"))
        fail_msg("why at quota: %s", answer);
    dfix_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relay_and_answer, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_limits_and_timeout, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_why_preview_changes_nothing, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_why_estimated_start, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_why_backfill, setup, dfix_teardown),
        cmocka_unit_test(test_why_at_quota),
        cmocka_unit_test(test_why_order_and_deps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

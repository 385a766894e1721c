/* SPDX-License-Identifier: MIT */
/*
 * A node's life after its worker leaves (issue #40), without Redis or ZeroMQ, through the
 * recording store and sender of tests/unit/support/d_fake.h.  A clean stop: the worker's exits
 * marked stopped requeue the gang without counting a failure and take the node out of placement
 * at once, and the BYE marks it down with no fencing wait for what was reported ended, while a
 * task still running goes the lost node's way (the fence).  musterctl node forget (the control
 * command "forget"): refused for a registered node (a stopping one included) and an unknown
 * name; accepted for a down node, whose entry is removed and not written again until it
 * registers.  A worker whose GPUs do not match its pool registers, with a warning.  Times are
 * passed in, never slept for.
 */
#include <setjmp.h>
#include <signal.h>
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
    "\"heartbeat_s\":1,\"node_lost_after_s\":120,\"bind_timeout_s\":30,\"kill_grace_s\":10,"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0,\"spot_cooldown_s\":600}";

#define J1   "1700000000001-0"
#define C1   "1700000000100-0" /* control entries */
#define C2   "1700000000101-0"
#define C3   "1700000000102-0"
#define C4   "1700000000103-0"
#define GANG "{\"tasks\":2,\"gpus_per_task\":4,\"command\":[\"./train\"]}"

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

/* The BYE of node, listing the tasks given (n of them). */
static void bye(struct dfix *f, const char *node, const struct proto_task_ref *tasks, int n)
{
    struct proto_msg m;
    struct mu_err err;

    proto_msg_init(&m, PROTO_BYE);
    mu_strlcpy(m.node, node, sizeof(m.node));
    assert_int_equal(proto_msg_set_tasks(&m, n, tasks, &err), 0);
    d_bye(&f->d, d_node_get(&f->d, node), &m);
    proto_msg_release(&m);
}

/* Task `task` of attempt 1 of J1, exited by the SIGTERM of its worker's clean stop. */
static struct proto_task_ref stopped_exit(int task)
{
    struct proto_task_ref r = { .task = task, .attempt = 1, .state = PROTO_TASK_EXITED };
    mu_strlcpy(r.job, J1, sizeof(r.job));
    r.signal = SIGTERM;
    r.stopped = true;
    return r;
}

/* The state node's status entry shows, or NULL when it has none. */
static const char *entry(struct dfix *f, const char *node)
{
    d_status_write(&f->d);
    return fake_status(f->store, "nodes", node);
}

/* Both tasks on one node; the worker stops them (stopped exits), then says BYE: the gang is
 * requeued at once (no fencing wait, no failure) and runs on the other node; the node is down. */
static void test_clean_stop_requeues_without_wait(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char again[2][PROTO_NODE_MAX];
    struct proto_task_ref exits[2];
    const char *other;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG, 2, node_of);
    assert_string_equal(node_of[0], node_of[1]);
    other = strcmp(node_of[0], "n1") == 0 ? "n2" : "n1";

    exits[0] = stopped_exit(0);
    exits[1] = stopped_exit(1);
    d_task_status(&f->d, d_node_get(&f->d, node_of[0]), &exits[0]);
    /* From the first stopped exit on the node takes no work, though its BYE is not in yet. */
    assert_int_equal(sched_cluster_node_state(f->d.cluster, d_node_get(&f->d, node_of[0])->idx),
                     SCHED_NODE_DOWN);
    d_task_status(&f->d, d_node_get(&f->d, node_of[0]), &exits[1]);
    expect_last_event(f, J1, "PENDING", 2, "stopped by its worker's stop");
    bye(f, node_of[0], exits, 2);
    assert_null(d_node_get(&f->d, node_of[0]));
    assert_non_null(strstr(entry(f, node_of[0]), "\"state\":\"down\""));
    assert_string_equal(fake_field(f->store, J1, "failures"), "0");
    assert_int_equal(fake_counter(f->store, "jobs_failed"), 0);

    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 2, again);
    assert_string_equal(again[0], other);
    assert_string_equal(again[1], other);
}

/* A task the worker could not stop is still running at the BYE: its gang waits for the fence,
 * as on a lost node, before the next attempt. */
static void test_bye_with_running_task_waits_for_fence(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    struct proto_task_ref tasks[2];
    const struct d_job *j;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG, 2, node_of);
    tasks[0] = stopped_exit(0);
    tasks[1] = stopped_exit(1);
    tasks[1].state = PROTO_TASK_RUNNING;
    tasks[1].signal = 0;
    tasks[1].stopped = false;
    tasks[1].pid = 1001;
    d_task_status(&f->d, d_node_get(&f->d, node_of[0]), &tasks[0]);
    bye(f, node_of[0], tasks, 2);
    expect_last_event(f, J1, "PENDING", 2, "stopped by its worker's stop");
    assert_string_equal(fake_field(f->store, J1, "failures"), "0");
    j = mu_map_get(f->d.jobs, J1);
    assert_non_null(j);
    assert_true(j->not_before_ms > 0); /* the fence of the task still running */
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);
}

/* forget: refused while registered (stopping included) and for an unknown name; a down node's
 * entry is removed and stays removed until its worker registers again. */
static void test_forget(void **state)
{
    struct dfix *f = *state;
    char node_of[1][PROTO_NODE_MAX];
    struct proto_task_ref exit0;
    char want[128];

    dfix_two_nodes(f);
    dfix_control(f, C1, "forget", "n1", -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_non_null(strstr(fake_status(f->store, "answer", "forget:" C1),
                           "refused: node 'n1' is registered (ready)"));
    dfix_control(f, C2, "forget", "nosuch", -1);
    assert_non_null(strstr(fake_status(f->store, "answer", "forget:" C2),
                           "refused: node 'nosuch' is not known"));

    dfix_start_gang(f, J1, "{\"gpus_per_task\":8,\"command\":[\"./train\"]}", 1, node_of);
    /* Stopping (its exit came, marked stopped), its BYE not in yet: still registered. */
    exit0 = stopped_exit(0);
    d_task_status(&f->d, d_node_get(&f->d, node_of[0]), &exit0);
    dfix_control(f, C3, "forget", node_of[0], -1);
    (void)mu_snprintf(want, sizeof(want), "refused: node '%s' is registered (down)", node_of[0]);
    assert_non_null(strstr(fake_status(f->store, "answer", "forget:" C3), want));

    bye(f, node_of[0], &exit0, 1);
    assert_non_null(strstr(entry(f, node_of[0]), "\"state\":\"down\""));
    dfix_control(f, C4, "forget", node_of[0], -1);
    (void)mu_snprintf(want, sizeof(want), "ok: node %s forgotten", node_of[0]);
    assert_string_equal(fake_status(f->store, "answer", "forget:" C4), want);
    assert_null(entry(f, node_of[0]));
    d_status_rewrite(&f->d); /* after a Redis outage every entry is written again: not this one */
    assert_null(entry(f, node_of[0]));
    (void)dfix_hello(f, node_of[0], "od", 8);
    assert_non_null(strstr(entry(f, node_of[0]), "\"state\":\"ready\""));
}

/* A worker whose GPUs do not match its pool's gpus_per_node registers, with a warning. */
static void test_gpu_mismatch_warning(void **state)
{
    struct dfix *f = *state;

    assert_non_null(dfix_hello(f, "n4", "od", 4));
    assert_non_null(strstr(entry(f, "n4"),
                           "\"warning\":\"reports 4 GPU(s), but pool od has gpus_per_node 8\""));
    assert_non_null(dfix_hello(f, "n8", "od", 8));
    assert_null(strstr(entry(f, "n8"), "warning"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clean_stop_requeues_without_wait, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_bye_with_running_task_waits_for_fence, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_forget, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_gpu_mismatch_warning, setup, dfix_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * musterd's operator commands and stops without Redis or ZeroMQ (issue #19), through the
 * recording store and sender of tests/unit/support/d_fake.h: cancel (pending, running, before
 * the submission is read, and a cancel whose write fails, which must stay unacknowledged so that
 * Redis hands it out again), hold and release, a node musterd cordons after repeated refusals
 * until the operator uncordons it, node status written only for the nodes that changed, drain
 * (checkpoint signal, grace, KILL, requeue without counting a failure, the next attempt resuming
 * from the checkpoint elsewhere; and a drain during an outage, made once the store is back), time
 * limits (TIMEOUT), preemption of a lower-priority gang, and a spot notice.  Times are passed in,
 * never slept for.
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
    "{\"name\":\"spot\",\"capacity\":\"spot\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":30},"
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"heartbeat_s\":1,\"node_lost_after_s\":10,\"bind_timeout_s\":30,\"kill_grace_s\":10,"
    "\"min_runtime_s\":0,\"retry_backoff_s\":0,\"spot_cooldown_s\":600}";

#define J1 "1700000000001-0"
#define J2 "1700000000002-0"
#define C1 "1700000000100-0" /* control entries */
#define C2 "1700000000101-0"

#define GANG2 "{\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"./train\"]}"
#define GANG2_CKPT                                                                             \
    "{\"tasks\":2,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":60}," \
    "\"command\":[\"./train\"]}"
#define HOUR_MS UINT64_C(3600000)

static int setup(void **state)
{
    *state = dfix_new(config_json);
    return 0;
}

/* Both tasks of attempt of a 2-task gang report their SIGTERM exit. */
static void both_killed(struct dfix *f, const char *id, int attempt, char node_of[][PROTO_NODE_MAX])
{
    dfix_task_exit(f, node_of[0], id, 0, attempt, 0, SIGTERM);
    dfix_task_exit(f, node_of[1], id, 1, attempt, 0, SIGTERM);
}

/*
 * A stopped gang (drain, preemption, spot) requeued: PENDING with attempt 2 in the hash and in
 * the event (which names the next attempt, as a retry's does), the event saying why.
 */
static void expect_requeued(const struct dfix *f, const char *id, const char *why)
{
    expect_last_event(f, id, "PENDING", 2, "requeued: ");
    expect_last_event(f, id, "PENDING", 2, why);
    assert_string_equal(dfix_state_field(f, id), "PENDING");
    assert_string_equal(fake_field(f->store, id, "attempt"), "2");
}

/* ---- cancel ---- */

static void test_cancel_pending(void **state)
{
    struct dfix *f = *state;

    dfix_submit(f, J1, GANG2);
    dfix_control(f, C1, "cancel", J1, -1);
    expect_last_event(f, J1, "CANCELLED", 1, "cancelled by operator");
    assert_string_equal(dfix_state_field(f, J1), "CANCELLED");
    assert_non_null(fake_field(f->store, J1, "finished_at"));
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_int_equal(fake_counter(f->store, "jobs_cancelled"), 1);
    assert_int_equal(dfix_job_state(f, J1), -1);

    dfix_two_nodes(f);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
}

/* A running gang is killed on every node; its GPUs go to the next gang once every task is
 * gone, not before. */
static void test_cancel_running_frees_gpus_when_gone(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    struct fake_msg kill;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    dfix_submit(f, J2, GANG2);
    dfix_control(f, C1, "cancel", J1, -1);
    expect_last_event(f, J1, "CANCELLED", 1, "cancelled by operator");
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    for (int t = 0; t < 2; t++) {
        expect_sent(f, PROTO_KILL, node_of[t], J1, t, 1, &kill);
        assert_int_equal(kill.grace_s, f->d.cfg.kill_grace_s);
    }

    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);
    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, SIGTERM);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);
    /* A KILL not answered for is said again (a lost message, a slow node), to that task only. */
    fake_sent_clear(f->sent);
    d_stops_check(&f->d, mu_time_mono_ms() + HOUR_MS);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);
    assert_int_equal(fake_sent_count(f->sent), 0);
    dfix_task_exit(f, node_of[1], J1, 1, 1, 0, SIGTERM);
    expect_last_event(f, J1, "CANCELLED", 1, NULL); /* an exit after a cancel changes nothing */
    assert_int_equal(dfix_job_state(f, J1), -1);
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    dfix_take_binds(f, J2, 2, 1, node_of);
}

/* The write-ahead of a cancel: when it cannot be written the job is not cancelled, nothing is
 * killed and the command is not acknowledged (Redis hands it out again after the reconnect),
 * even when the store would take the acknowledgement (one dropped connection); read again once
 * the store is back, it cancels. */
static void test_cancel_write_fails_not_acked(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    fake_store_fail(f->store, true);
    dfix_control(f, C1, "cancel", J1, -1);
    assert_true(f->d.redis_down);
    assert_false(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_int_equal(dfix_job_state(f, J1), QUEUE_RUNNING);
    expect_last_event(f, J1, "RUNNING", 1, NULL);

    dfix_store_recover(f);
    fake_store_fail_next(f->store, 1);
    dfix_control(f, C1, "cancel", J1, -1);
    assert_false(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_int_equal(fake_sent_count(f->sent), 0);
    expect_last_event(f, J1, "RUNNING", 1, NULL);

    dfix_store_recover(f);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_string_equal(dfix_state_field(f, J1), "RUNNING");

    dfix_control(f, C1, "cancel", J1, -1); /* the unacknowledged entry, read again */
    expect_last_event(f, J1, "CANCELLED", 1, "cancelled by operator");
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);
}

/* A cancel read before the submission it names (a long submit backlog): the job is cancelled as
 * soon as it is taken in, and never starts. */
static void test_cancel_before_submission_read(void **state)
{
    struct dfix *f = *state;

    dfix_two_nodes(f);
    dfix_control(f, C1, "cancel", J1, -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_int_equal(fake_event_count(f->store, J1), 0);

    dfix_submit(f, J1, GANG2);
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));
    expect_last_event(f, J1, "CANCELLED", 1, "cancelled by operator");
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
}

/* ---- hold and release ---- */

static void test_hold_and_release(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_submit(f, J1, GANG2);
    dfix_control(f, C1, "hold", J1, -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_string_equal(fake_field(f->store, J1, "held"), "1");
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_string_equal(dfix_state_field(f, J1), "PENDING");

    /* A release that cannot be written leaves it held and the command for later. */
    fake_store_fail_next(f->store, 1);
    dfix_control(f, C2, "release", J1, -1);
    assert_false(fake_acked(f->store, QUEUE_STREAM_CONTROL, C2));
    dfix_store_recover(f);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);

    dfix_control(f, C2, "release", J1, -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C2));
    assert_null(fake_field(f->store, J1, "held"));
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
    expect_last_event(f, J1, "STARTING", 1, NULL);
}

/* ---- nodes ---- */

/* A node that refuses D_REFUSALS_CORDON attempts in a row for its own reason is cordoned by
 * musterd, which the node status shows with the reason; an operator's uncordon lets work back. */
static void test_refusing_node_cordoned_until_uncordon(void **state)
{
    struct dfix *f = *state;
    const char *status;
    const char *one = "{\"gpus_per_task\":8,\"command\":[\"./train\"]}";
    int attempt = 1;

    (void)dfix_hello(f, "n1", "od", 8);
    dfix_submit(f, J1, one);
    for (; attempt <= D_REFUSALS_CORDON; attempt++) {
        d_schedule(&f->d);
        expect_sent(f, PROTO_BIND, "n1", J1, 0, attempt, NULL);
        dfix_bind_refused(f, "n1", J1, 0, attempt, true, "state dir not writable");
        expect_last_event(f, J1, "PENDING", attempt + 1, "state dir not writable");
        fake_sent_clear(f->sent);
    }
    d_status_write(&f->d);
    status = fake_status(f->store, "nodes", "n1");
    assert_non_null(status);
    assert_non_null(strstr(status, "\"state\":\"cordoned\""));
    assert_non_null(strstr(status, "cordoned by musterd: it refused 3 attempts in a row"));
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_int_equal(fake_counter(f->store, "jobs_failed"), 0);

    dfix_control(f, C1, "uncordon", "n1", -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    d_status_write(&f->d);
    status = fake_status(f->store, "nodes", "n1");
    assert_non_null(strstr(status, "\"state\":\"ready\""));
    assert_null(strstr(status, "\"reason\""));
    d_schedule(&f->d);
    expect_sent(f, PROTO_BIND, "n1", J1, 0, attempt, NULL);
}

/* Sets every node entry of the fake store's status to "old": an entry written again shows it. */
static void status_mark_old(struct dfix *f, const char *const *names, int n)
{
    struct queue_kv kv[4];
    struct mu_err err;
    for (int i = 0; i < n; i++)
        kv[i] = (struct queue_kv){ names[i], "old" };
    assert_int_equal(f->d.store.ops->status_write(f->d.store.ctx, "nodes", kv, n, &err), 0);
}

/* A node's entry is written again when something it shows changed (its gang, its state), and
 * only then: issue #15's 20,000 nodes must not mean 20,000 entries formatted every heartbeat.
 * After Redis came back (d_status_rewrite) every entry is written again. */
static void test_node_status_written_when_changed(void **state)
{
    struct dfix *f = *state;
    const char *names[] = { "n1", "n2" };
    const char *busy_entry;
    const char *other;
    char node_of[1][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    d_status_write(&f->d);
    assert_non_null(strstr(fake_status(f->store, "nodes", "n1"), "\"jobs\":[]"));
    status_mark_old(f, names, 2);
    d_status_write(&f->d);
    assert_string_equal(fake_status(f->store, "nodes", "n1"), "old");
    assert_string_equal(fake_status(f->store, "nodes", "n2"), "old");

    dfix_start_gang(f, J1, "{\"gpus_per_task\":8,\"command\":[\"./train\"]}", 1, node_of);
    other = strcmp(node_of[0], "n1") == 0 ? "n2" : "n1";
    d_status_write(&f->d);
    busy_entry = fake_status(f->store, "nodes", node_of[0]);
    assert_non_null(strstr(busy_entry, "\"gpus_free\":0"));
    assert_non_null(strstr(busy_entry, "\"jobs\":[\"" J1 "\"]"));
    assert_string_equal(fake_status(f->store, "nodes", other), "old");

    dfix_control(f, C1, "cordon", other, -1);
    d_status_write(&f->d);
    assert_non_null(strstr(fake_status(f->store, "nodes", other), "\"state\":\"cordoned\""));

    status_mark_old(f, names, 2);
    d_status_rewrite(&f->d);
    d_status_write(&f->d);
    assert_non_null(strstr(fake_status(f->store, "nodes", "n1"), "\"name\":\"n1\""));
    assert_non_null(strstr(fake_status(f->store, "nodes", "n2"), "\"name\":\"n2\""));
}

/* ---- drain ---- */

/* Draining a node stops the gangs on it the way a preemption does: checkpoint signal to every
 * task, KILL once the grace is over, then PENDING with the next attempt (not a failure), which
 * resumes from the newest checkpoint on nodes other than the drained one. */
static void test_drain_checkpoints_and_requeues(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char again[2][PROTO_NODE_MAX];
    char why[64];
    struct fake_msg m;
    uint64_t before_ms;

    dfix_two_nodes(f);
    (void)dfix_hello(f, "n3", "od", 8);
    dfix_start_gang(f, J1, GANG2_CKPT, 2, node_of);
    dfix_checkpoint_done(f, node_of[0], J1, 0, 1, "/ckpt/step-100", 1700000000500u);
    expect_last_event(f, J1, "CHECKPOINT", 1, "/ckpt/step-100");
    assert_string_equal(fake_field(f->store, J1, "last_checkpoint"), "/ckpt/step-100");

    before_ms = mu_time_mono_ms(); /* the grace (60 s) ends later than this */
    dfix_control(f, C1, "drain", node_of[0], -1);
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    (void)mu_snprintf(why, sizeof(why), "node %s drained", node_of[0]);
    expect_last_event(f, J1, "PREEMPTING", 1, why);
    for (int t = 0; t < 2; t++) {
        expect_sent(f, PROTO_CHECKPOINT, node_of[t], J1, t, 1, &m);
        assert_int_equal(m.signal, SIGUSR1);
        assert_int_equal(m.grace_s, 60);
    }
    assert_int_equal(fake_sent_count(f->sent), 0);
    d_status_write(&f->d);
    assert_non_null(strstr(fake_status(f->store, "nodes", node_of[0]), "\"state\":\"draining\""));

    d_stops_check(&f->d, before_ms);
    assert_int_equal(fake_sent_count(f->sent), 0); /* still in its grace */
    d_stops_check(&f->d, mu_time_mono_ms() + HOUR_MS);
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);

    both_killed(f, J1, 1, node_of);
    expect_requeued(f, J1, why);
    assert_int_equal(fake_counter(f->store, "jobs_failed"), 0);
    assert_int_equal(fake_counter(f->store, "gang_requeues"), 1);
    fake_sent_clear(f->sent);

    d_schedule(&f->d);
    for (int t = 0; t < 2; t++) {
        expect_sent(f, PROTO_BIND, NULL, J1, t, 2, &m);
        assert_string_not_equal(m.node, node_of[0]);
        assert_string_equal(m.resume_from, "/ckpt/step-100");
        mu_strlcpy(again[t], m.node, sizeof(again[t]));
    }
    assert_string_not_equal(again[0], again[1]);
}

/* A drain read while the store fails: nothing is stopped (the stop could not be written), and
 * once the store is back the gang on the draining node is stopped and requeued. */
static void test_drain_during_outage_stops_after_recovery(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char why[64];

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    fake_store_fail(f->store, true);
    dfix_control(f, C1, "drain", node_of[1], -1);
    assert_int_equal(fake_sent_count(f->sent), 0);
    expect_last_event(f, J1, "RUNNING", 1, NULL);

    dfix_store_recover(f);
    (void)mu_snprintf(why, sizeof(why), "node %s drained", node_of[1]);
    expect_last_event(f, J1, "PREEMPTING", 1, why);
    /* Without a checkpoint block the tasks are killed at once. */
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);

    dfix_control(f, C1, "drain", node_of[1], -1); /* read again: the gang stops only once */
    assert_true(fake_acked(f->store, QUEUE_STREAM_CONTROL, C1));
    assert_int_equal(fake_sent_count(f->sent), 0);
    both_killed(f, J1, 1, node_of);
    expect_requeued(f, J1, why);
}

/* ---- time limits ---- */

/* A gang at its time limit is stopped (STOPPING, KILL) and ends TIMEOUT once its tasks are gone;
 * one without time_limit_s runs to the config's default_time_limit_s. */
static void test_time_limit_ends_timeout(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char other[2][PROTO_NODE_MAX];
    uint64_t before_ms = mu_time_wall_ms(); /* every start is at or after it */

    dfix_two_nodes(f);
    (void)dfix_hello(f, "n3", "od", 8);
    (void)dfix_hello(f, "n4", "od", 8);
    dfix_start_gang(f, J1,
                    "{\"tasks\":2,\"gpus_per_task\":8,\"time_limit_s\":7200,"
                    "\"command\":[\"./train\"]}",
                    2, node_of);
    dfix_start_gang(f, J2, GANG2, 2, other);

    d_limits_check(&f->d, before_ms);
    assert_int_equal(fake_sent_count(f->sent), 0);
    expect_last_event(f, J1, "RUNNING", 1, NULL);

    d_limits_check(&f->d, before_ms + 3 * HOUR_MS);
    expect_last_event(f, J1, "STOPPING", 1, "time limit of ");
    expect_last_event(f, J1, "STOPPING", 1, "(time_limit_s)");
    assert_string_equal(dfix_state_field(f, J1), "RUNNING"); /* until its tasks are gone */
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);
    expect_last_event(f, J2, "RUNNING", 1, NULL);
    assert_int_equal(fake_sent_count(f->sent), 0);

    both_killed(f, J1, 1, node_of);
    expect_last_event(f, J1, "TIMEOUT", 1, "time limit of ");
    assert_string_equal(dfix_state_field(f, J1), "TIMEOUT");
    assert_string_equal(fake_field(f->store, J1, "exit_code"), "143");
    assert_int_equal(fake_counter(f->store, "jobs_timeout"), 1);
    assert_int_equal(dfix_job_state(f, J1), -1);
    fake_sent_clear(f->sent);

    d_limits_check(&f->d, before_ms + 48 * HOUR_MS);
    expect_last_event(f, J2, "STOPPING", 1, "(default_time_limit_s)");
    expect_sent(f, PROTO_KILL, other[0], J2, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, other[1], J2, 1, 1, NULL);
}

/* ---- preemption and spot ---- */

/* A higher-priority gang that does not fit stops a lower-priority preemptible one (checkpoint
 * signal, then KILL), which is requeued; the freed GPUs go to the preemptor. */
static void test_preemption_requeues_lower_priority(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char high_on[2][PROTO_NODE_MAX];
    char why[64];
    struct fake_msg m;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1,
                    "{\"priority\":1,\"tasks\":2,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":"
                    "\"SIGUSR1\",\"grace_s\":30},\"command\":[\"./train\"]}",
                    2, node_of);
    dfix_submit(f, J2,
                "{\"priority\":10,\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"./eval\"]}");
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);
    (void)mu_snprintf(why, sizeof(why), "preempted by job %s", J2);
    expect_last_event(f, J1, "PREEMPTING", 1, why);
    assert_int_equal(fake_counter(f->store, "preemptions"), 1);
    for (int t = 0; t < 2; t++) {
        expect_sent(f, PROTO_CHECKPOINT, node_of[t], J1, t, 1, &m);
        assert_int_equal(m.signal, SIGUSR1);
    }

    d_stops_check(&f->d, mu_time_mono_ms() + HOUR_MS);
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);
    both_killed(f, J1, 1, node_of);
    expect_requeued(f, J1, why);
    fake_sent_clear(f->sent);

    d_schedule(&f->d);
    dfix_take_binds(f, J2, 2, 1, high_on);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);
    assert_string_equal(dfix_state_field(f, J1), "PENDING");
}

/* A spot interruption notice: the gangs on the node are stopped and requeued (not a failure),
 * and while the spot pool cools down the next attempt runs on on-demand capacity. */
static void test_spot_notice_moves_gang(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char again[2][PROTO_NODE_MAX];
    struct proto_msg notice;

    (void)dfix_hello(f, "s1", "spot", 8);
    (void)dfix_hello(f, "s2", "spot", 8);
    (void)dfix_hello(f, "o1", "od", 8);
    (void)dfix_hello(f, "o2", "od", 8);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    assert_true(node_of[0][0] == 's' && node_of[1][0] == 's'); /* spot first: cheaper */

    proto_msg_init(&notice, PROTO_SPOT_NOTICE);
    mu_strlcpy(notice.node, node_of[0], sizeof(notice.node));
    mu_strlcpy(notice.action, "terminate", sizeof(notice.action));
    notice.deadline_ms = mu_time_wall_ms() + 120000;
    d_spot_notice(&f->d, d_node_get(&f->d, node_of[0]), &notice);
    proto_msg_release(&notice);
    expect_last_event(f, J1, "PREEMPTING", 1, "spot terminate of node");
    assert_int_equal(fake_counter(f->store, "spot_interruptions"), 1);
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);

    both_killed(f, J1, 1, node_of);
    expect_requeued(f, J1, "spot terminate of node");
    assert_int_equal(fake_counter(f->store, "jobs_failed"), 0);
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 2, again);
    assert_true(again[0][0] == 'o' && again[1][0] == 'o');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cancel_pending, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_running_frees_gpus_when_gone, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_write_fails_not_acked, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_before_submission_read, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_hold_and_release, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_refusing_node_cordoned_until_uncordon, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_node_status_written_when_changed, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_drain_checkpoints_and_requeues, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_drain_during_outage_stops_after_recovery, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_time_limit_ends_timeout, setup, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_preemption_requeues_lower_priority, setup,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_spot_notice_moves_gang, setup, dfix_teardown),
    };
    mu_log_set_level(MU_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

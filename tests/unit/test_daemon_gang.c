/* SPDX-License-Identifier: MIT */
/*
 * musterd's gang life without Redis or ZeroMQ (issue #19): a recording store and sender in the
 * daemon's own seams (tests/unit/support/d_fake.h), nodes registered by HELLO, jobs submitted
 * through the intake.  What is asserted is what users and workers see: the job's state and
 * events as written, which messages go to which node, when GPUs are free again.  Covered: a gang
 * started, running and succeeding; the write-ahead (a start whose write, or whose pass's batch,
 * fails sends no BIND); a task failure (the other tasks killed, a retry, the resources held until
 * the old attempt is gone, FAILED past max_retries) and the retry backoff; a node refusing a task;
 * the bind deadline; a node judged lost; a worker's report taken while Redis is down; a musterd
 * without the leader lease sending nothing; a new Redis primary getting every held job and every
 * recently ended one written again; one heartbeat answered in d_answer_every.  Times are passed
 * in, an hour or more ahead, never slept for.
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

/* One on-demand pool of 8-GPU nodes; no retry backoff unless a test's setup says so. */
#define CONFIG_POOLS                                                                            \
    "\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\"," \
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"                     \
    "\"heartbeat_s\":1,\"node_lost_after_s\":10,\"bind_timeout_s\":30,\"kill_grace_s\":10,"     \
    "\"min_runtime_s\":0,"

static const char config_now[] = "{" CONFIG_POOLS "\"retry_backoff_s\":0}";
static const char config_backoff[] =
    "{" CONFIG_POOLS "\"retry_backoff_s\":3600,\"retry_backoff_max_s\":7200}";

#define J1 "1700000000001-0"
#define J2 "1700000000002-0"

#define GANG2    "{\"tasks\":2,\"gpus_per_task\":8,\"command\":[\"./train\"]}"
#define GANG2_R1 "{\"tasks\":2,\"gpus_per_task\":8,\"max_retries\":1,\"command\":[\"./train\"]}"
#define HOUR_MS  UINT64_C(3600000)

static int setup_now(void **state)
{
    *state = dfix_new(config_now);
    return 0;
}

static int setup_backoff(void **state)
{
    *state = dfix_new(config_backoff);
    return 0;
}

/* submit -> PENDING -> a BIND per task on its own node -> STARTING -> every BIND_ACK -> RUNNING
 * -> every task exits 0 -> SUCCEEDED; the GPUs are free for the next gang only then. */
static void test_gang_runs_to_success(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char want[128];
    struct fake_msg m;
    const char *placement;

    dfix_two_nodes(f);
    dfix_submit(f, J1, GANG2);
    expect_last_event(f, J1, "PENDING", 1, "submitted");
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));
    assert_string_equal(fake_field(f->store, J1, "tasks"), "2");
    assert_int_equal(fake_counter(f->store, "jobs_submitted"), 1);

    d_schedule(&f->d);
    for (int t = 0; t < 2; t++) {
        expect_sent(f, PROTO_BIND, NULL, J1, t, 1, &m);
        assert_int_equal(m.nbind_gpus, 8);
        assert_int_equal(m.world_size, 2);
        mu_strlcpy(node_of[t], m.node, sizeof(node_of[t]));
    }
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_string_not_equal(node_of[0], node_of[1]); /* 8 GPUs a node: one task each */
    expect_last_event(f, J1, "STARTING", 1, "placed on");
    assert_string_equal(dfix_state_field(f, J1), "STARTING");
    /* The placement written is where the BINDs went. */
    placement = fake_field(f->store, J1, "placement");
    assert_non_null(placement);
    for (int t = 0; t < 2; t++) {
        (void)mu_snprintf(want, sizeof(want), "{\"task\":%d,\"node\":\"%s\"", t, node_of[t]);
        assert_non_null(strstr(placement, want));
    }

    dfix_bind_ack(f, node_of[0], J1, 0, 1);
    expect_last_event(f, J1, "STARTING", 1, NULL); /* not every task runs yet */
    dfix_bind_ack(f, node_of[1], J1, 1, 1);
    expect_last_event(f, J1, "RUNNING", 1, "every task started");
    assert_string_equal(dfix_state_field(f, J1), "RUNNING");

    /* A second gang of the same size waits: the GPUs are taken. */
    dfix_submit(f, J2, GANG2);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);
    expect_last_event(f, J2, "PENDING", 1, NULL);

    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, 0);
    assert_string_equal(dfix_state_field(f, J1), "RUNNING"); /* task 1 still runs */
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);

    dfix_task_exit(f, node_of[1], J1, 1, 1, 0, 0);
    expect_last_event(f, J1, "SUCCEEDED", 1, "all tasks exited 0");
    assert_string_equal(dfix_state_field(f, J1), "SUCCEEDED");
    assert_string_equal(fake_field(f->store, J1, "exit_code"), "0");
    assert_non_null(fake_field(f->store, J1, "finished_at"));
    assert_int_equal(fake_counter(f->store, "jobs_succeeded"), 1);
    assert_int_equal(dfix_job_state(f, J1), -1); /* final and written: forgotten */
    /* The workers keep each exit until told (KILL, no grace) that the outcome is stored. */
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, &m);
    assert_int_equal(m.grace_s, 0);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, &m);
    assert_int_equal(m.grace_s, 0);

    d_schedule(&f->d);
    dfix_take_binds(f, J2, 2, 1, node_of);
    expect_last_event(f, J2, "STARTING", 1, NULL);
}

/* The write-ahead: a start whose write fails sends no BIND, and the job stays PENDING; once the
 * store is back the next pass starts it. */
static void test_failed_start_write_sends_no_bind(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_submit(f, J1, GANG2);
    fake_store_fail(f->store, true);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_true(f->d.redis_down); /* the daemon noticed, as with Redis */
    assert_int_equal(dfix_job_state(f, J1), QUEUE_PENDING);
    expect_last_event(f, J1, "PENDING", 1, "submitted");
    assert_string_equal(dfix_state_field(f, J1), "PENDING");

    dfix_store_recover(f);
    assert_int_equal(fake_sent_count(f->sent), 0); /* a start is decided again by a pass */
    assert_string_equal(dfix_state_field(f, J1), "PENDING");
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
    expect_last_event(f, J1, "STARTING", 1, "placed on");
    dfix_ack_all(f, J1, 2, 1, node_of);
    expect_last_event(f, J1, "RUNNING", 1, NULL);
}

/* A pass's starts are written in one round trip (issue #15): when it fails, neither gang gets a
 * BIND nor moves, though the store may hold some of the writes (a pipeline lands in part); once
 * the store is back each is written whole again as PENDING, and the next pass starts both. */
static void test_failed_start_batch_sends_no_bind(void **state)
{
    static const char one[] = "{\"tasks\":1,\"gpus_per_task\":8,\"command\":[\"./train\"]}";
    struct dfix *f = *state;
    char node_of[2][1][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_submit(f, J1, one);
    dfix_submit(f, J2, one);
    fake_store_fail_batch(f->store);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_true(f->d.redis_down);
    assert_int_equal(dfix_job_state(f, J1), QUEUE_PENDING);
    assert_int_equal(dfix_job_state(f, J2), QUEUE_PENDING);
    assert_string_equal(dfix_state_field(f, J1), "STARTING"); /* landed, not taken as landed */

    dfix_store_recover(f);
    assert_int_equal(fake_sent_count(f->sent), 0);
    assert_string_equal(dfix_state_field(f, J1), "PENDING");
    assert_string_equal(dfix_state_field(f, J2), "PENDING");
    d_schedule(&f->d); /* the slots went back: both fit again */
    dfix_take_binds(f, J1, 1, 1, node_of[0]);
    dfix_take_binds(f, J2, 1, 1, node_of[1]);
    assert_string_not_equal(node_of[0][0], node_of[1][0]);
    expect_last_event(f, J1, "STARTING", 1, "placed on");
    expect_last_event(f, J2, "STARTING", 1, "placed on");
}

/* A task exits non-zero: the attempt ends (counted), the other task is killed, the job is
 * PENDING with attempt 2; the new attempt starts only once the old one is gone, and a late
 * report of the old attempt changes nothing; past max_retries the job FAILED with the task's
 * exit code. */
static void test_task_failure_retries_then_fails(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char again[2][PROTO_NODE_MAX];
    char why[128];
    struct fake_msg kill;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2_R1, 2, node_of);

    dfix_task_exit(f, node_of[1], J1, 1, 1, 3, 0);
    (void)mu_snprintf(why, sizeof(why), "task 1 on node %s exited with code 3", node_of[1]);
    expect_last_event(f, J1, "PENDING", 2, why);
    assert_string_equal(fake_field(f->store, J1, "failures"), "1");
    assert_string_equal(fake_field(f->store, J1, "attempt"), "2");
    assert_int_equal(fake_counter(f->store, "gang_retries"), 1);
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, &kill); /* the other task stops */
    assert_int_equal(kill.grace_s, f->d.cfg.kill_grace_s);
    assert_int_equal(fake_sent_count(f->sent), 0);

    /* Task 0 still holds its GPUs: no new attempt beside the old one. */
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);

    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, SIGTERM);
    /* Both exits acknowledged now that the outcome is stored. */
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, &kill);
    assert_int_equal(kill.grace_s, 0);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, &kill);
    assert_int_equal(kill.grace_s, 0);
    expect_last_event(f, J1, "PENDING", 2, why); /* nothing new: it was requeued already */

    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 2, again);
    expect_last_event(f, J1, "STARTING", 2, NULL);
    dfix_ack_all(f, J1, 2, 2, again);
    expect_last_event(f, J1, "RUNNING", 2, NULL);

    /* A worker repeating attempt 1's exit is told to forget it; the job is unmoved. */
    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, 0);
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_last_event(f, J1, "RUNNING", 2, NULL);

    dfix_task_exit(f, again[0], J1, 0, 2, 3, 0);
    (void)mu_snprintf(why, sizeof(why), "task 0 on node %s exited with code 3", again[0]);
    expect_last_event(f, J1, "FAILED", 2, why);
    assert_string_equal(dfix_state_field(f, J1), "FAILED");
    assert_string_equal(fake_field(f->store, J1, "exit_code"), "3");
    assert_non_null(strstr(fake_field(f->store, J1, "error"), why));
    assert_int_equal(fake_counter(f->store, "jobs_failed"), 1);
    expect_sent(f, PROTO_KILL, again[1], J1, 1, 2, NULL);

    /* Its GPUs come back once task 1 is gone too. */
    dfix_submit(f, J2, GANG2);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J2, -1), 0);
    dfix_task_exit(f, again[1], J1, 1, 2, 0, SIGTERM);
    assert_int_equal(dfix_job_state(f, J1), -1);
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    dfix_take_binds(f, J2, 2, 1, again);
}

/* max_retries 0: the first failure is final. */
static void test_no_retries_fails_at_once(void **state)
{
    struct dfix *f = *state;
    char node_of[1][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, "{\"gpus_per_task\":4,\"max_retries\":0,\"command\":[\"false\"]}", 1,
                    node_of);
    dfix_task_exit(f, node_of[0], J1, 0, 1, 1, 0);
    expect_last_event(f, J1, "FAILED", 1, "exited with code 1");
    assert_string_equal(fake_field(f->store, J1, "exit_code"), "1");
    assert_int_equal(dfix_job_state(f, J1), -1);
    assert_int_equal(fake_counter(f->store, "gang_retries"), 0);
}

/* The retry backoff: after a counted failure the next attempt waits retry_backoff_s (an hour
 * here), and the requeue says so. */
static void test_retry_backoff_delays_next_attempt(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char why[128];

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    dfix_task_exit(f, node_of[1], J1, 1, 1, 1, 0);
    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, SIGTERM);
    (void)mu_snprintf(why, sizeof(why), "after attempt 1 failed: task 1 on node %s exited",
                      node_of[1]);
    expect_last_event(f, J1, "PENDING", 2, "retrying in ");
    expect_last_event(f, J1, "PENDING", 2, why);
    fake_sent_clear(f->sent);

    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);
    assert_int_equal(dfix_job_state(f, J1), QUEUE_PENDING);
    /* Other work is not held up by it. */
    dfix_submit(f, J2, GANG2);
    d_schedule(&f->d);
    dfix_take_binds(f, J2, 2, 1, node_of);
}

/* A node that refuses a task for its own reason (node_fault): the attempt is requeued without
 * counting against the job, and the next attempt goes to other nodes. */
static void test_node_refusal_requeues_elsewhere(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char again[2][PROTO_NODE_MAX];
    char why[128];

    dfix_two_nodes(f);
    (void)dfix_hello(f, "n3", "od", 8);
    dfix_submit(f, J1, GANG2);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
    dfix_bind_ack(f, node_of[1], J1, 1, 1);
    dfix_bind_refused(f, node_of[0], J1, 0, 1, true, "GPU 3 is not visible");
    (void)mu_snprintf(why, sizeof(why), "task 0 on node %s did not start: GPU 3 is not visible",
                      node_of[0]);
    expect_last_event(f, J1, "PENDING", 2, why);
    assert_string_equal(fake_field(f->store, J1, "failures"), "0");
    assert_int_equal(fake_counter(f->store, "gang_requeues"), 1);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);

    dfix_task_exit(f, node_of[1], J1, 1, 1, 0, SIGTERM);
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 2, again);
    assert_string_not_equal(again[0], node_of[0]);
    assert_string_not_equal(again[1], node_of[0]);
}

/* BINDs not all acknowledged by the bind deadline: the attempt is given up (not counted) and its
 * tasks killed; their GPUs stay taken until each node answers for its task, then the gang gets
 * a new attempt. */
static void test_bind_deadline_requeues(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    uint64_t before_ms = mu_time_mono_ms(); /* before the start; the deadline is 30 s after it */

    dfix_two_nodes(f);
    dfix_submit(f, J1, GANG2);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
    dfix_bind_ack(f, node_of[0], J1, 0, 1);

    d_jobs_check_timeouts(&f->d, before_ms);
    expect_last_event(f, J1, "STARTING", 1, NULL);
    assert_int_equal(fake_sent_count(f->sent), 0);

    d_jobs_check_timeouts(&f->d, mu_time_mono_ms() + HOUR_MS);
    expect_last_event(f, J1, "PENDING", 2, "did not start within 30 s");
    assert_string_equal(fake_field(f->store, J1, "failures"), "0");
    expect_sent(f, PROTO_KILL, node_of[0], J1, 0, 1, NULL);
    expect_sent(f, PROTO_KILL, node_of[1], J1, 1, 1, NULL);

    /* The silent node may still start task 1: its GPUs are not given away yet. */
    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, SIGTERM);
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_count(f->sent), 0);
    /* Its worker refuses the expired BIND: now the gang runs again. */
    dfix_bind_refused(f, node_of[1], J1, 1, 1, false, "BIND expired");
    fake_sent_clear(f->sent);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 2, node_of);
    expect_last_event(f, J1, "STARTING", 2, NULL);
}

/* Each node is judged lost once it is silent past the limit, the later-heard one later, though
 * the scan that found the first set where the next one starts (d_nodes_heard_floor_ms). */
static void test_nodes_expire_each_in_turn(void **state)
{
    struct dfix *f = *state;
    uint64_t limit = d_node_silence_limit_ms(&f->d.cfg);
    uint64_t t0 = mu_time_mono_ms();
    struct d_node *n1;
    struct d_node *n2;

    dfix_two_nodes(f);
    n1 = d_node_get(&f->d, "n1");
    n2 = d_node_get(&f->d, "n2");
    assert_non_null(n1);
    assert_non_null(n2);
    n1->seen_ms = t0;
    n2->seen_ms = t0 + 10000;
    assert_int_equal(d_nodes_expire(&f->d, t0 + limit), -1);
    assert_int_equal(d_nodes_expire(&f->d, t0 + limit + 1), n1->idx);
    assert_int_equal(d_nodes_expire(&f->d, t0 + limit + 1), -1);
    assert_null(d_node_get(&f->d, "n1"));
    n2->seen_ms = t0 + 20000; /* heard again */
    assert_int_equal(d_nodes_expire(&f->d, t0 + 10000 + limit + 1), -1);
    assert_int_equal(d_nodes_expire(&f->d, t0 + 20000 + limit), -1);
    assert_int_equal(d_nodes_expire(&f->d, t0 + 20000 + limit + 1), n2->idx);
    assert_int_equal(d_nodes_expire(&f->d, t0 + 20000 + limit + 1), -1);
    assert_null(d_node_get(&f->d, "n2"));
}

/* A leader judges no node lost while its lease may have run out (frozen, cut off from Redis),
 * nor before the limit has passed since its term began: until then a worker's witness may have
 * read the key free and held its lease (worker/witness.c). */
static void test_nodes_expire_waits_for_the_term(void **state)
{
    struct dfix *f = *state;
    uint64_t limit = d_node_silence_limit_ms(&f->d.cfg);
    uint64_t t0 = mu_time_mono_ms();
    struct d_node *n1;

    dfix_two_nodes(f);
    n1 = d_node_get(&f->d, "n1");
    assert_non_null(n1);
    n1->seen_ms = t0;
    d_node_get(&f->d, "n2")->seen_ms = t0 + HOUR_MS;
    f->d.lease.leading = true;
    f->d.lease.term_start_ms = t0 + 5000; /* the key was found free and set again */
    f->d.lease.valid_until_ms = t0 + HOUR_MS;
    assert_int_equal(d_nodes_expire(&f->d, t0 + limit + 1), -1);
    assert_int_equal(d_nodes_expire(&f->d, t0 + 5000 + limit), -1);
    /* Past the limit in the term, but the lease may have run out: nobody is judged. */
    f->d.lease.valid_until_ms = t0 + 5000 + limit + 1;
    assert_int_equal(d_nodes_expire(&f->d, t0 + 5000 + limit + 1), -1);
    f->d.lease.valid_until_ms = t0 + HOUR_MS;
    assert_int_equal(d_nodes_expire(&f->d, t0 + 5000 + limit + 1), n1->idx);
}

/* A node judged lost (silent past node_lost_after_s): its gangs' attempts end (not counted), the
 * tasks elsewhere are killed, and the next attempt waits for the lost node's fence (its
 * supervisors stop the task once its lease runs out: grace_s + 6 s, an hour here). */
static void test_node_lost_requeues_after_fence(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char why[64];
    const char *lost;
    const char *other;
    uint64_t heard_ms = mu_time_mono_ms();
    int idx;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1,
                    "{\"tasks\":2,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\","
                    "\"grace_s\":3600},\"command\":[\"./train\"]}",
                    2, node_of);
    assert_int_equal(d_nodes_expire(&f->d, heard_ms), -1); /* not silent before it was heard */

    idx = d_nodes_expire(&f->d, mu_time_mono_ms() + HOUR_MS);
    assert_true(idx >= 0);
    lost = d_node_name(&f->d, idx);
    other = strcmp(lost, node_of[0]) == 0 ? node_of[1] : node_of[0];
    d_node_lost_tasks(&f->d, idx);
    (void)mu_snprintf(why, sizeof(why), "node %s lost", lost);
    expect_last_event(f, J1, "PENDING", 2, why);
    assert_string_equal(fake_field(f->store, J1, "failures"), "0");
    assert_int_equal(fake_counter(f->store, "nodes_lost"), 1);
    assert_null(d_node_get(&f->d, lost));
    expect_sent(f, PROTO_KILL, other, J1, -1, 1, NULL);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_KILL, lost, NULL, -1), 0);

    dfix_task_exit(f, other, J1, strcmp(other, node_of[0]) == 0 ? 0 : 1, 1, 0, SIGTERM);
    fake_sent_clear(f->sent);
    (void)dfix_hello(f, "n3", "od", 8);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);
    assert_int_equal(dfix_job_state(f, J1), QUEUE_PENDING);
}

/* A worker that registers again without a task it ran: among 64 running gangs on 64 nodes, its
 * gang alone loses the task and is requeued (a HELLO looks only at the gangs on its node,
 * d_live_prev_on), and no other gang is touched. */
static void test_hello_reconciles_its_node_only(void **state)
{
    enum { N = 64, GONE = 17 };
    struct dfix *f = *state;
    char ids[N][32];
    char node_of[N][1][PROTO_NODE_MAX];

    for (int i = 0; i < N; i++) {
        char name[16];
        (void)mu_snprintf(name, sizeof(name), "n%02d", i);
        (void)dfix_hello(f, name, "od", 8);
    }
    for (int i = 0; i < N; i++) {
        (void)mu_snprintf(ids[i], sizeof(ids[i]), "1700000000%03d-0", 100 + i);
        dfix_start_gang(f, ids[i], "{\"gpus_per_task\":8,\"command\":[\"./train\"]}", 1,
                        node_of[i]);
    }
    fake_sent_clear(f->sent);
    (void)dfix_hello(f, node_of[GONE][0], "od", 8); /* restarted: it runs nothing */
    expect_last_event(f, ids[GONE], "PENDING", 2, NULL);
    for (int i = 0; i < N; i++) {
        if (i == GONE)
            continue;
        assert_int_equal(dfix_job_state(f, ids[i]), QUEUE_RUNNING);
        assert_int_equal(fake_sent_matching(f->sent, PROTO_KILL, node_of[i][0], NULL, -1), 0);
    }
}

/* One pass that starts more gangs than d->live had room for (256 at first): a pass writes every
 * start before it commits any, and each gang must still join d->live (what status writes,
 * reconciles, time limits and stops walk).  Every node's entry shows its gang. */
static void test_pass_starts_more_gangs_than_live_room(void **state)
{
    enum { N = 300 };
    struct dfix *f = *state;

    for (int i = 0; i < N; i++) {
        char name[16];
        char id[32];
        (void)mu_snprintf(name, sizeof(name), "n%03d", i);
        (void)dfix_hello(f, name, "od", 8);
        (void)mu_snprintf(id, sizeof(id), "1700000000%03d-0", i);
        dfix_submit(f, id, "{\"gpus_per_task\":8,\"command\":[\"./train\"]}");
    }
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, NULL, -1), N);
    assert_int_equal(f->d.nlive, N);
    d_status_write(&f->d);
    for (int i = 0; i < N; i++) {
        char name[16];
        (void)mu_snprintf(name, sizeof(name), "n%03d", i);
        assert_non_null(strstr(fake_status(f->store, "nodes", name), "\"jobs\":[\"17"));
    }
}

/* A pass before any node registered (a job submitted first) waits; it used to read node 0. */
static void test_pass_before_any_node(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];

    dfix_submit(f, J1, GANG2);
    d_schedule(&f->d);
    d_schedule(&f->d); /* the second sees the slots the first gave the job */
    assert_int_equal(dfix_job_state(f, J1), QUEUE_PENDING);
    dfix_two_nodes(f);
    d_schedule(&f->d);
    dfix_take_binds(f, J1, 2, 1, node_of);
}

/* A worker that restarted after its lease ran out reports in its HELLO that it stopped the
 * task (fenced) and the checkpoint the task wrote.  That HELLO alone ends the attempt, and the
 * next attempt resumes from that checkpoint: no later message is needed for it (one sent after
 * the HELLO would come too late). */
static void test_hello_checkpoint_resumes_fenced_gang(void **state)
{
    struct dfix *f = *state;
    char node_of[1][PROTO_NODE_MAX];
    struct proto_task_ref r;
    struct fake_msg bind;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1,
                    "{\"tasks\":1,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\","
                    "\"grace_s\":60},\"command\":[\"./train\"]}",
                    1, node_of);
    memset(&r, 0, sizeof(r));
    mu_strlcpy(r.job, J1, sizeof(r.job));
    r.attempt = 1;
    r.state = PROTO_TASK_EXITED;
    r.signal = SIGTERM;
    r.fenced = true;
    mu_strlcpy(r.checkpoint, "/ckpt/step-700", sizeof(r.checkpoint));
    r.checkpoint_at_ms = 1700000000700u;
    fake_sent_clear(f->sent);
    (void)dfix_hello_tasks(f, node_of[0], "od", 8, &r, 1);

    assert_string_equal(fake_field(f->store, J1, "last_checkpoint"), "/ckpt/step-700");
    expect_last_event(f, J1, "PENDING", 2, NULL);
    assert_string_equal(fake_field(f->store, J1, "failures"), "0"); /* not the job's doing */
    d_schedule(&f->d);
    expect_sent(f, PROTO_BIND, NULL, J1, 0, 2, &bind);
    assert_string_equal(bind.resume_from, "/ckpt/step-700");
}

/* A worker's report that lands while Redis is down is not lost: the outcome it implies is
 * written once the store is back, and the GPUs it freed are used again. */
static void test_exit_reported_while_store_down(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, 0);
    fake_store_fail(f->store, true);
    dfix_task_exit(f, node_of[1], J1, 1, 1, 0, 0); /* the first message after Redis died */
    assert_true(f->d.redis_down);
    assert_string_equal(dfix_state_field(f, J1), "RUNNING");
    /* The exits stay with the workers until the outcome is stored. */
    assert_int_equal(fake_sent_matching(f->sent, PROTO_KILL, NULL, J1, -1), 0);

    dfix_store_recover(f);
    assert_string_equal(dfix_state_field(f, J1), "SUCCEEDED");
    expect_last_event(f, J1, "SUCCEEDED", 1, NULL);
    /* Its count is stored with the whole write, once (not lost with the failed write). */
    assert_true(fake_counter(f->store, "jobs_succeeded") == 1);
    assert_int_equal(dfix_job_state(f, J1), -1);

    dfix_submit(f, J2, GANG2);
    d_schedule(&f->d);
    dfix_take_binds(f, J2, 2, 1, node_of);
}

/* A musterd that lost the leader lease (issue #14) says nothing to any worker: while its lease
 * may have run out (out.halted) a cancel sends no KILL, and once Redis refused a write for want
 * of the lease (store.fenced) a node's heartbeat gets no answer either. */
static void test_no_lease_sends_nothing(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    struct proto_msg m;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    fake_sent_clear(f->sent);
    f->d.out.halted = true;
    dfix_control(f, "1700000000100-0", "cancel", J1, -1);
    assert_int_equal(fake_sent_count(f->sent), 0);

    f->d.out.halted = false;
    f->d.out.fenced = &f->d.store.fenced;
    f->d.store.fenced = true;
    proto_msg_init(&m, PROTO_HEARTBEAT);
    d_node_heartbeat(&f->d, "n1", &m);
    assert_int_equal(fake_sent_count(f->sent), 0);

    f->d.store.fenced = false; /* the same sender speaks again once allowed */
    d_node_heartbeat(&f->d, "n1", &m);
    assert_true(fake_sent_count(f->sent) > 0);
    proto_msg_release(&m);
}

/* beat: node's HEARTBEAT saying back answer_every; whether musterd answered it (ok as expected). */
static bool beat(struct dfix *f, const char *node, int answer_every, bool known)
{
    struct proto_msg m;
    struct fake_msg answer;
    bool answered;

    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.echo_ms = 1000;
    m.answer_every = answer_every;
    d_node_heartbeat(&f->d, node, &m);
    proto_msg_release(&m);
    answered = fake_sent_take(f->sent, PROTO_HEARTBEAT, node, NULL, -1, &answer);
    assert_int_equal(fake_sent_count(f->sent), 0);
    if (answered) {
        assert_int_equal(answer.ok, known);
        assert_int_equal(answer.answer_every, 2); /* node_lost_after_s 10, heartbeat_s 1 */
    }
    return answered;
}

/* Issue #15: one heartbeat in d_answer_every is answered, and only for a worker that says the
 * same count back (it waits that long before it calls musterd unreachable); an older worker, one
 * that says another count, a HELLO and an unknown node are answered every time. */
static void test_heartbeats_answered_one_in_answer_every(void **state)
{
    struct dfix *f = *state;
    struct cfg c;

    dfix_two_nodes(f);
    fake_sent_clear(f->sent);
    for (int i = 0; i < 3; i++)
        assert_true(beat(f, "n1", 0, true)); /* an older worker */
    for (int i = 0; i < 3; i++) {
        assert_false(beat(f, "n1", 2, true));
        assert_true(beat(f, "n1", 2, true));
    }
    assert_false(beat(f, "n1", 2, true));
    assert_true(beat(f, "n1", 4, true));  /* not our count: answered */
    assert_false(beat(f, "n2", 2, true)); /* each node counts its own */
    dfix_hello(f, "n2", "od", 8);         /* answered, and the count starts again */
    assert_false(beat(f, "n2", 2, true));
    assert_true(beat(f, "n2", 2, true));
    assert_true(beat(f, "n9", 2, false)); /* unknown: told to say HELLO */
    assert_true(beat(f, "n9", 2, false));

    /* One lost answer must leave the lease alive until the next: at least 5 heartbeats. */
    cfg_init_defaults(&c);
    c.heartbeat_s = 5;
    c.node_lost_after_s = 15;
    assert_int_equal(d_answer_every(&c), 1);
    c.node_lost_after_s = 24;
    assert_int_equal(d_answer_every(&c), 1);
    c.node_lost_after_s = 25;
    assert_int_equal(d_answer_every(&c), 2);
    c.heartbeat_s = 1;
    c.node_lost_after_s = 30; /* the defaults */
    assert_int_equal(d_answer_every(&c), 2);
}

/* On a new Redis primary (a failover may have lost the last writes the old one acknowledged),
 * d_jobs_resync_all writes again a job that ended and left the table, and the running one; a
 * submission the new primary hands out again makes no second job; a job retired longer than
 * D_RETIRED_KEEP_MS is freed and not written. */
static void test_new_primary_rewrites_ended_jobs(void **state)
{
    struct dfix *f = *state;
    char node_of[2][PROTO_NODE_MAX];
    char node2_of[2][PROTO_NODE_MAX];
    int events;

    dfix_two_nodes(f);
    dfix_start_gang(f, J1, GANG2, 2, node_of);
    dfix_task_exit(f, node_of[0], J1, 0, 1, 0, 0);
    dfix_task_exit(f, node_of[1], J1, 1, 1, 0, 0);
    expect_last_event(f, J1, "SUCCEEDED", 1, "all tasks exited 0");
    assert_int_equal(dfix_job_state(f, J1), -1); /* out of the table */
    assert_non_null(d_job_retired_find(&f->d, J1));
    dfix_start_gang(f, J2, GANG2, 2, node2_of);

    events = fake_event_count(f->store, J1);
    assert_int_equal(d_jobs_resync_all(&f->d), 0);
    assert_int_equal(fake_event_count(f->store, J1), events + 1);
    expect_last_event(f, J1, "SUCCEEDED", 1, "new Redis primary");
    assert_string_equal(dfix_state_field(f, J1), "SUCCEEDED");
    assert_string_equal(fake_field(f->store, J1, "tasks"), "2");
    expect_last_event(f, J2, "RUNNING", 1, "new Redis primary");

    /* The new primary missed J1's acknowledgement and hands the entry out again. */
    events = fake_event_count(f->store, J1);
    fake_sent_clear(f->sent);
    dfix_submit(f, J1, GANG2);
    assert_true(fake_acked(f->store, QUEUE_STREAM_SUBMIT, J1));
    assert_int_equal(fake_event_count(f->store, J1), events);
    assert_int_equal(dfix_job_state(f, J1), -1);
    d_schedule(&f->d);
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, J1, -1), 0);

    d_jobs_retired_expire(&f->d, mu_time_mono_ms() + D_RETIRED_KEEP_MS);
    assert_null(d_job_retired_find(&f->d, J1));
    assert_int_equal(d_jobs_resync_all(&f->d), 0);
    assert_int_equal(fake_event_count(f->store, J1), events);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gang_runs_to_success, setup_now, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_failed_start_write_sends_no_bind, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_failed_start_batch_sends_no_bind, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_task_failure_retries_then_fails, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_no_retries_fails_at_once, setup_now, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_retry_backoff_delays_next_attempt, setup_backoff,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_node_refusal_requeues_elsewhere, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_bind_deadline_requeues, setup_now, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_nodes_expire_each_in_turn, setup_now, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_nodes_expire_waits_for_the_term, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_node_lost_requeues_after_fence, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_heartbeats_answered_one_in_answer_every, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_hello_reconciles_its_node_only, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_pass_starts_more_gangs_than_live_room, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_pass_before_any_node, setup_now, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_hello_checkpoint_resumes_fenced_gang, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_exit_reported_while_store_down, setup_now,
                                        dfix_teardown),
        cmocka_unit_test_setup_teardown(test_no_lease_sends_nothing, setup_now, dfix_teardown),
        cmocka_unit_test_setup_teardown(test_new_primary_rewrites_ended_jobs, setup_now,
                                        dfix_teardown),
    };
    mu_log_set_level(MU_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the agent keeping two attempts of a gang apart (issue #10 item 1;
 * worker/lease_watch.c, handlers.c, stale.c through the agent): self-fencing when the lease runs
 * out (the shim's checkpoint signal, grace and SIGTERM, a fenced exit), a shim fencing its task
 * with no worker left, BINDs refused without the lease and started again once an answer renews
 * it, and stale BINDs (expired by their own stamps or by the bound of the scheduler's clock, or
 * given up by a KILL first).  The pieces themselves are in test_wrk_lease.c.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- self-fencing ---- */

/* A BIND of job's task 0, attempt 1, that traps the checkpoint signal and SIGTERM. */
static void send_bind_fenceable(struct fake_sched *f, const char *job)
{
    const char *argv[] = { "/bin/sh", "-c",
                           "trap 'echo usr1' USR1; trap 'echo term; exit 7' TERM; "
                           "echo ready; while :; do sleep 0.02; done" };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.attempt = 1;
    m.signal = SIGUSR1;
    m.grace_s = 1;
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    send_to_worker(f, &m, 5);
    proto_msg_release(&m);
}

static void test_agent_fence(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct wrk_lease *lease;
    struct mu_err err;
    char *text;
    char path[1100];
    uint64_t t0;
    uint64_t took;
    uint64_t until = 0;
    int lease_s = 0;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 2; /* the scheduler answers every beat: the lease holds */
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    send_bind_fenceable(&f, "1920-0");
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    proto_msg_release(&m);
    assert_true(wait_log(&f, "1920-0.1.0.out", "ready\n"));
    t0 = mu_time_mono_ms();
    /* Silence from here on: after the 2 s lease the shim sends USR1; after the 1 s grace, TERM. */
    f.answer_lease_s = 0;
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 10000));
    took = mu_time_mono_ms() - t0;
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 7);
    assert_true(m.task.fenced); /* the scheduler requeues it without counting a failure */
    proto_msg_release(&m);
    print_message("# fenced and stopped %" PRIu64 " ms after the scheduler fell silent\n", took);
    assert_true(took >= 1500);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/logs/1920-0.1.0.out", f.dir), 0);
    text = mu_file_read(path, 4096, NULL, NULL);
    assert_non_null(text);
    assert_string_equal(text, "ready\nusr1\nterm\n");
    free(text);
    /* The shim says each step in the task's .err log, and its exit file says fenced. */
    text = read_in(f.dir, "logs/1920-0.1.0.err");
    assert_non_null(text);
    assert_non_null(strstr(text, "self-fencing: the node's lease ran out"));
    assert_non_null(strstr(text, "sent SIGUSR1 to group"));
    assert_non_null(strstr(text, "self-fencing: checkpoint grace over: sent SIGTERM"));
    free(text);
    text = read_in(f.dir, "tasks/1920-0.1.0.exit");
    assert_non_null(text);
    assert_non_null(strstr(text, "\"fenced\":true"));
    free(text);
    /* The lease is in the record, for the shims and the next run. */
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/lease", f.dir), 0);
    lease = wrk_lease_new(path, false, &err);
    if (!lease)
        fail_msg("%s", err.msg);
    wrk_lease_read(lease, &lease_s, &until);
    assert_int_equal(lease_s, 2);
    assert_true(until != 0 && until <= mu_time_mono_ms());
    wrk_lease_free(lease);
    fake_sched_stop(&f);
}

static void test_shim_fences_without_worker(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct wrk_taskexit x;
    struct wrk_taskrec rec;
    struct mu_err err;
    char exit_path[1100];
    char rec_path[1100];
    char *text;
    int pid;
    int r = 0;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 2;
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    send_bind_fenceable(&f, "1960-0");
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    pid = m.task.pid;
    proto_msg_release(&m);
    assert_true(wait_log(&f, "1960-0.1.0.out", "ready\n"));

    /* The worker dies (no shutdown) and stays down: nobody renews the lease, and the shim stops
     * its task by itself: the checkpoint signal, then SIGTERM after the grace. */
    wrk_agent_free(f.agent);
    f.agent = NULL;
    assert_int_equal(mu_snprintf(exit_path, sizeof(exit_path), "%s/tasks/1960-0.1.0.exit", f.dir),
                     0);
    for (int i = 0; i < 1000 && r == 0; i++) {
        r = wrk_taskexit_read(exit_path, &x, &err);
        if (r == 0)
            sleep_ms(20);
    }
    if (r != 1)
        fail_msg("no exit file after 20 s: %s", r < 0 ? err.msg : "absent");
    assert_true(x.fenced);
    assert_int_equal(x.exit_code, 7);
    text = read_in(f.dir, "logs/1960-0.1.0.out");
    assert_non_null(text);
    assert_string_equal(text, "ready\nusr1\nterm\n");
    free(text);
    text = read_in(f.dir, "logs/1960-0.1.0.err");
    assert_non_null(text);
    assert_non_null(strstr(text, "self-fencing: the node's lease ran out"));
    assert_non_null(strstr(text, "self-fencing: checkpoint grace over: sent SIGTERM"));
    free(text);
    /* Reaped by its shim, which writes the exit file while the zombie still holds the pid (so
     * that no stranger takes its group id) and reaps it just after. */
    for (int i = 0; i < 500 && kill(pid, 0) == 0; i++)
        sleep_ms(20);
    assert_true(kill(pid, 0) != 0);
    /* The shim (forked by the worker's shim server, so not this process's child) ends too. */
    assert_int_equal(mu_snprintf(rec_path, sizeof(rec_path), "%s/tasks/1960-0.1.0.json", f.dir), 0);
    assert_int_equal(wrk_taskrec_read(rec_path, &rec, &err), 1);
    assert_true(rec.shim_start > 0);
    for (int i = 0; i < 500 && wrk_shim_is_running(rec.shim_pid, rec.shim_start, ""); i++)
        sleep_ms(20);
    assert_false(wrk_shim_is_running(rec.shim_pid, rec.shim_start, ""));
    fake_sched_stop(&f);
}

/* ---- stale BINDs ---- */

/* A BIND of job's task 0 stamped sent_ms (the fake scheduler's clock is ours) and expires_ms. */
static void send_bind_stamped(
    struct fake_sched *f, const char *job, int attempt, uint64_t sent_ms, uint64_t expires_ms)
{
    const char *argv[] = { "/bin/sh", "-c", "echo ran" };
    struct proto_msg m;
    struct mu_err err;
    proto_msg_init(&m, PROTO_BIND);
    mu_strlcpy(m.task.job, job, sizeof(m.task.job));
    m.task.attempt = attempt;
    m.sent_ms = sent_ms;
    m.expires_ms = expires_ms;
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    send_to_worker(f, &m, 5);
    proto_msg_release(&m);
}

/* The BIND of job was refused for the node's sake with an error holding want; nothing ran. */
static void expect_refused(struct fake_sched *f, const char *job, int attempt, const char *want)
{
    struct proto_msg m;
    char name[128];
    char *text;

    expect_ack(f, job, &m);
    if (m.ok)
        fail_msg("BIND of %s started; want a refusal with '%s'", job, want);
    if (!strstr(m.error, want))
        fail_msg("BIND of %s refused with '%s'; want '%s'", job, m.error, want);
    assert_true(m.node_fault);
    assert_int_equal(m.task.state, 0);
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(name, sizeof(name), "tasks/%s.%d.0.json", job, attempt), 0);
    text = read_in(f->dir, name);
    assert_null(text);
    assert_int_equal(mu_snprintf(name, sizeof(name), "logs/%s.%d.0.out", job, attempt), 0);
    text = read_in(f->dir, name);
    assert_null(text);
}

static void expect_started(struct fake_sched *f, const char *job)
{
    struct proto_msg m;
    expect_ack(f, job, &m);
    if (!m.ok)
        fail_msg("BIND of %s refused: %s", job, m.error);
    proto_msg_release(&m);
}

static void test_agent_lease_binds(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct proto_msg hb;
    uint64_t hello_echo;
    uint64_t answered;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 2;
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    hello_echo = m.echo_ms;
    assert_true(hello_echo > 0 && hello_echo <= mu_time_mono_ms());
    proto_msg_release(&m);
    /* Heartbeats carry the echo too. */
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 3000));
    assert_true(m.echo_ms > hello_echo);
    proto_msg_release(&m);

    /* The lease holds: a BIND starts. */
    send_bind_stamped(&f, "1940-0", 1, 0, 0);
    expect_started(&f, "1940-0");

    /* The scheduler falls silent past the 2 s lease; an old answer (the HELLO's echo, long
     * since renewed over) arrives, as one that sat in a socket: it renews nothing. */
    f.answer_lease_s = 0;
    answered = f.last_echo_ms;
    while (mu_time_mono_ms() < answered + 2200)
        agent_turn(&f, 50);
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.ok = true;
    hb.heartbeat_s = 1;
    hb.lease_s = 2;
    hb.echo_ms = hello_echo;
    send_to_worker(&f, &hb, 5);
    proto_msg_release(&hb);
    send_bind_stamped(&f, "1941-0", 1, 0, 0);
    expect_refused(&f, "1941-0", 1, "not started: this node's lease ran out ");
    {
        /* "... ran out 0.4 s ago (no word from the scheduler)" */
        send_bind_stamped(&f, "1942-0", 1, 0, 0);
        expect_ack(&f, "1942-0", &m);
        assert_false(m.ok);
        assert_non_null(strstr(m.error, " s ago (no word from the scheduler)"));
        proto_msg_release(&m);
    }

    /* A fresh answer renews it: BINDs start again. */
    f.answer_lease_s = 2;
    assert_true(expect_msg(&f, PROTO_HEARTBEAT, &m, 5000));
    proto_msg_release(&m);
    agent_turn(&f, 50);
    send_bind_stamped(&f, "1943-0", 1, 0, 0);
    expect_started(&f, "1943-0");
    fake_sched_stop(&f);
}

static void test_agent_stale_binds(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct proto_msg hb;
    char paths[8][PROTO_PATH_MAX];
    uint64_t now;
    static const char stale[] = "stale BIND: the scheduler gave this attempt up ";
    long long ago;
    const char *p;
    char *end;
    char *text;
    (void)state;

    fake_sched_start(&f);
    f.answer_lease_s = 5;
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);

    /* A BIND whose own stamps show it expired before it was sent. */
    now = mu_time_mono_ms();
    send_bind_stamped(&f, "1950-0", 1, now, now - 812);
    expect_ack(&f, "1950-0", &m);
    assert_false(m.ok);
    assert_true(m.node_fault);
    p = strstr(m.error, stale);
    if (!p)
        fail_msg("refused with '%s'", m.error);
    assert_ptr_equal(p, m.error);
    assert_non_null(strstr(m.error, " ms ago (expires_ms)"));
    ago = strtoll(m.error + sizeof(stale) - 1, &end, 10);
    assert_true(end > m.error + sizeof(stale) - 1);
    assert_true(ago >= 812);
    proto_msg_release(&m);

    /* A backlog: a fresh message shows the scheduler's clock, then a BIND stamped 5 s ago that
     * expired 4 s ago (it sat in a socket while the worker was frozen) is stale by that bound. */
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.ok = true;
    hb.heartbeat_s = 1;
    hb.sent_ms = mu_time_mono_ms();
    send_to_worker(&f, &hb, 5);
    proto_msg_release(&hb);
    agent_turn(&f, 50);
    now = mu_time_mono_ms();
    send_bind_stamped(&f, "1951-0", 1, now - 5000, now - 4000);
    expect_refused(&f, "1951-0", 1, "stale BIND: the scheduler gave this attempt up ");
    /* One that has not expired starts (with that expiry as its start deadline) and runs. */
    now = mu_time_mono_ms();
    send_bind_stamped(&f, "1952-0", 1, now, now + 30000);
    expect_started(&f, "1952-0");
    (void)until_exit(&f, "1952-0", paths, 8, &m);
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 0);
    proto_msg_release(&m);
    text = read_in(f.dir, "logs/1952-0.1.0.out");
    assert_non_null(text);
    assert_string_equal(text, "ran\n");
    free(text);

    /* A KILL of a task the worker does not know, then its BIND: not started. */
    send_simple(&f, PROTO_KILL, "1953-0", 0, 1, 0, 0, 5);
    (void)until_exit(&f, "1953-0", paths, 8, &m);
    assert_int_equal(m.task.state, PROTO_TASK_LOST);
    proto_msg_release(&m);
    send_bind_stamped(&f, "1953-0", 1, 0, 0);
    expect_refused(&f, "1953-0", 1, "not started: a KILL for this task arrived first");
    /* Another attempt of that task is not touched by it. */
    send_bind_stamped(&f, "1953-0", 2, 0, 0);
    expect_started(&f, "1953-0");

    /* An exit acknowledged by its KILL leaves a tombstone too: a late repeat of the BIND does
     * not run the task a second time. */
    send_simple(&f, PROTO_KILL, "1952-0", 0, 1, 0, 0, 5);
    agent_turn(&f, 100);
    send_bind_stamped(&f, "1952-0", 1, 0, 0);
    expect_ack(&f, "1952-0", &m);
    assert_false(m.ok);
    assert_string_equal(m.error, "not started: a KILL for this task arrived first");
    proto_msg_release(&m);
    fake_sched_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_fence),
        cmocka_unit_test(test_agent_lease_binds),
        cmocka_unit_test(test_agent_stale_binds),
        cmocka_unit_test(test_shim_fences_without_worker),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

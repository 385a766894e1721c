/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for tasks that outlive their worker (issue #5; worker/exits.c, tasks.c): the agent
 * re-adopting a running task, reporting the ones that ended or were lost while it was away,
 * clearing leftovers and forgetting each record once a KILL acknowledges it, across a restart;
 * and a shim that leaves the worker's process group.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- restart ---- */

/* The HELLO's entry for job, or NULL. */
static const struct proto_task_ref *hello_find(const struct proto_msg *m, const char *job)
{
    for (int i = 0; i < m->ntasks; i++) {
        if (strcmp(m->tasks[i].job, job) == 0)
            return &m->tasks[i];
    }
    return NULL;
}

static void record_write(const char *dir, const char *job, int shim_pid, const char *exit_json)
{
    char path[1024];
    char text[256];
    assert_int_equal(mu_snprintf(text, sizeof(text),
                                 "{\"job\":\"%s\",\"task\":0,\"attempt\":1,\"pid\":%d,"
                                 "\"shim_pid\":%d}",
                                 job, shim_pid, shim_pid),
                     0);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/%s.1.0.json", dir, job), 0);
    write_file(path, text, 0644);
    if (exit_json) {
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/%s.1.0.exit", dir, job), 0);
        write_file(path, exit_json, 0644);
    }
}

static void test_agent_restart(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    struct mu_err err;
    const struct proto_task_ref *r;
    char script[1200];
    char release[1100];
    int pid;
    (void)state;

    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(release, sizeof(release), "%s/release", f.dir), 0);
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "while [ ! -e %s ]; do sleep 0.02; done; exit 5", release),
                     0);
    send_bind(&f, "1900-0", 0, script, 0, 5);
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    pid = m.task.pid;
    proto_msg_release(&m);
    assert_true(file_exists(f.dir, "tasks/1900-0.1.0.json"));

    /* Records a previous worker left: one exited with 9, one whose shim is gone (this test
     * process is not a shim), an exit without a record, and a stale spec file. */
    record_write(f.dir, "1901-0", 4242, "{\"exit_code\":9,\"signal\":0,\"ended_ms\":1}");
    record_write(f.dir, "1902-0", (int)getpid(), NULL);
    {
        char path[1024];
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/1903-0.1.0.exit", f.dir), 0);
        write_file(path, "{\"exit_code\":0,\"signal\":0}", 0644);
        assert_int_equal(mu_snprintf(path, sizeof(path), "%s/tasks/.spec.abc123", f.dir), 0);
        write_file(path, "junk", 0600);
    }

    /* The worker "crashes" (no shutdown: the task keeps running) and a new one starts. */
    wrk_agent_free(f.agent);
    f.agent = wrk_agent_new(&f.cfg, &err);
    if (!f.agent)
        fail_msg("%s", err.msg);
    assert_false(file_exists(f.dir, "tasks/1903-0.1.0.exit"));
    assert_false(file_exists(f.dir, "tasks/.spec.abc123"));
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    assert_int_equal(m.ntasks, 3);
    /* if/fail_msg rather than assert_non_null: gcc -O2 cannot see that the assert stops. */
    r = hello_find(&m, "1900-0");
    if (!r)
        fail_msg("task 1900-0 missing from HELLO");
    else
        assert_true(r->state == PROTO_TASK_RUNNING && r->pid == pid);
    r = hello_find(&m, "1901-0");
    if (!r)
        fail_msg("task 1901-0 missing from HELLO");
    else
        assert_true(r->state == PROTO_TASK_EXITED && r->exit_code == 9);
    r = hello_find(&m, "1902-0");
    if (!r)
        fail_msg("task 1902-0 missing from HELLO");
    else
        assert_int_equal(r->state, PROTO_TASK_LOST);
    proto_msg_release(&m);
    assert_int_equal(wrk_agent_task_count(f.agent), 3);

    /* The re-adopted task ends: its true code comes from the shim's exit file. */
    write_file(release, "", 0644);
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 5000));
    assert_string_equal(m.task.job, "1900-0");
    assert_int_equal(m.task.state, PROTO_TASK_EXITED);
    assert_int_equal(m.task.exit_code, 5);
    assert_int_equal(m.task.pid, pid);
    proto_msg_release(&m);

    /* KILLs acknowledge: the records go, and the directory is empty again. */
    send_simple(&f, PROTO_KILL, "1900-0", 0, 1, 0, 0, 5);
    send_simple(&f, PROTO_KILL, "1901-0", 0, 1, 0, 0, 5);
    send_simple(&f, PROTO_KILL, "1902-0", 0, 1, 0, 0, 5);
    for (int i = 0; i < 500 && wrk_agent_task_count(f.agent) != 0; i++)
        assert_true(wrk_agent_poll(f.agent, 10, &err) >= 0);
    assert_int_equal(wrk_agent_task_count(f.agent), 0);
    assert_false(file_exists(f.dir, "tasks/1900-0.1.0.json"));
    assert_false(file_exists(f.dir, "tasks/1900-0.1.0.exit"));
    assert_false(file_exists(f.dir, "tasks/1901-0.1.0.json"));
    assert_false(file_exists(f.dir, "tasks/1902-0.1.0.json"));
    fake_sched_stop(&f);
}

static void test_agent_shim_survives_group_kill(void **state)
{
    struct fake_sched f;
    struct proto_msg m;
    char release[1100];
    char script[1200];
    (void)state;

    /* The shim leaves the worker's process group: a signal to that group (as a service
     * manager sends) does not reach the task. */
    fake_sched_start(&f);
    assert_true(expect_msg(&f, PROTO_HELLO, &m, 5000));
    proto_msg_release(&m);
    assert_int_equal(mu_snprintf(release, sizeof(release), "%s/release", f.dir), 0);
    assert_int_equal(mu_snprintf(script, sizeof(script),
                                 "while [ ! -e %s ]; do sleep 0.02; done; exit 0", release),
                     0);
    send_bind(&f, "1910-0", 0, script, 0, 5);
    assert_true(expect_msg(&f, PROTO_BIND_ACK, &m, 5000));
    assert_true(m.ok);
    assert_true(getsid(m.task.pid) != getsid(0));
    assert_true(getpgid(m.task.pid) == m.task.pid);
    proto_msg_release(&m);
    write_file(release, "", 0644);
    assert_true(expect_msg(&f, PROTO_TASK_STATUS, &m, 5000));
    assert_int_equal(m.task.exit_code, 0);
    proto_msg_release(&m);
    fake_sched_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_restart),
        cmocka_unit_test(test_agent_shim_survives_group_kill),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * muster-sim's millisecond clock and the replay of a recorded run (issue #13, the cross-check
 * with musterd): submit_ms and end_ms in muster's schema, with their bad-input table; events keep
 * their order within a second, the core sees now_s = now_ms / 1000, and a replayed job's first
 * attempt ends at its recorded instant.  What is asserted follows from the trace alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sim/sim.h"

#include "tests/unit/support/sim_fix.h"

#include "common/mu_banned.h"

static const char cluster_json[] =
    "{\"pools\":[{\"name\":\"spot\",\"capacity\":\"spot\",\"instance_type\":\"x\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":10},"
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"x\",\"gpu_type\":\"H100\","
    "\"gpus_per_node\":8,\"price_per_hour\":40}],\"default_time_limit_s\":3600}";

/* Epoch milliseconds as musterd records them: the clock starts at the first one's second. */
static void test_replay_ms(void **state)
{
    static struct sim_setup s;
    struct mu_err err;
    struct sim_trace *t;
    struct sim_result *r;
    const struct sim_job *j;
    int64_t start, end;
    int cap;
    (void)state;
    sfix_setup(&s, cluster_json, "spot=1,od=1");
    t = sfix_trace(&s,
                   "submit_ms,duration_s,tasks,gpus_per_task,end_ms,capacity\n"
                   "1790000001500,10,1,8,1790000004200,spot\n"
                   "1790000001700,1,1,8,1790000006000,spot\n"
                   "1790000001600,5,1,8,,on-demand\n",
                   &err);
    assert_non_null(t);
    j = sim_trace_jobs(t);
    assert_int_equal(j[0].submit_ms, 500); /* from 1790000001000 */
    assert_int_equal(j[0].submit_s, 0);
    assert_int_equal(j[0].end_ms, 3200);
    assert_int_equal(j[1].submit_ms, 600); /* sorted by the millisecond */
    assert_int_equal(j[1].end_ms, -1);
    assert_int_equal(j[2].submit_ms, 700);
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        r = sim_run(&s, t, (enum sim_policy)p, &err);
        assert_non_null(r);
        assert_int_equal(sim_result_job_ms(r, 0, &start, &end, &cap), SIM_COMPLETED);
        assert_int_equal(start, 500);
        assert_int_equal(end, 3200); /* its recorded end, not 500 + 10 s */
        assert_int_equal(cap, SCHED_SPOT);
        assert_int_equal(sim_result_job_ms(r, 1, &start, &end, &cap), SIM_COMPLETED);
        assert_int_equal(start, 600);
        assert_int_equal(end, 5600); /* no end_ms: its duration */
        assert_int_equal(cap, SCHED_ON_DEMAND);
        assert_int_equal(sim_result_job_ms(r, 2, &start, &end, &cap), SIM_COMPLETED);
        assert_int_equal(start, 3200); /* the spot node frees at 3.2 s, not at a whole second */
        assert_int_equal(end, 5000);   /* its recorded end again */
        assert_int_equal(sim_result_job(r, 2, &start, &end), SIM_COMPLETED);
        assert_int_equal(start, 3); /* in whole seconds */
        sim_result_free(r);
    }
    sim_trace_free(t);
}

/* Bad rows of the replay columns, each counted with its line and column. */
static void test_replay_bad_rows(void **state)
{
    static const struct {
        const char *row;
        const char *example;
    } cases[] = {
        { "x,10,1,1,", "line 2, column 'submit_ms': expected a number" },
        { ",10,1,1,", "line 2, column 'submit_ms': empty, a value is required" },
        { "-5,10,1,1,", "line 2, column 'submit_ms': expected a number in [0, 1e+15]" },
        { "1000,10,1,1,y", "line 2, column 'end_ms': expected a number" },
        { "1000,10,1,1,1000", "line 2, column 'end_ms': 1000 is not after the submission" },
        { "1000,10,1,1,999", "line 2, column 'end_ms': 999 is not after the submission" },
    };
    struct sim_setup s;
    (void)state;
    sfix_setup(&s, cluster_json, "spot=1");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512];
        struct mu_err err;
        struct sim_trace *t;
        (void)mu_snprintf(text, sizeof(text),
                          "submit_ms,duration_s,tasks,gpus_per_task,end_ms\n%s\n0,5,1,1,\n",
                          cases[i].row);
        t = sfix_trace(&s, text, &err);
        assert_non_null(t);
        assert_int_equal(sim_trace_count(t), 1); /* the good row is kept */
        assert_int_equal(sim_trace_skip_kinds(t), 1);
        if (!strstr(sim_trace_skip_example(t, 0), cases[i].example))
            fail_msg("case %zu: got '%s'", i, sim_trace_skip_example(t, 0));
        sim_trace_free(t);
    }
}

static void test_replay_header(void **state)
{
    struct sim_setup s;
    struct mu_err err;
    (void)state;
    sfix_setup(&s, cluster_json, "spot=1");
    assert_null(
        sfix_trace(&s, "submit_s,submit_ms,duration_s,tasks,gpus_per_task\n0,0,1,1,1\n", &err));
    assert_non_null(strstr(err.msg, "line 1, column 2: 'submit_ms' and 'submit_s' both given"));
    assert_null(sfix_trace(&s, "submit_ms,duration_s,tasks\n0,1,1\n", &err));
    assert_non_null(strstr(err.msg, "column 'gpus_per_task' missing"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_ms),
        cmocka_unit_test(test_replay_bad_rows),
        cmocka_unit_test(test_replay_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

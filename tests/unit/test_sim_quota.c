/* SPDX-License-Identifier: MIT */
/*
 * muster-sim honours the config's queue quotas through musterd's own code (issue #13 item 1):
 * the quota table comes from the core's sched_quota_queues_init, the pass is sched_pass_quota and
 * a preemption is prepared by sched_quota_preempt_prepare, as in scheduler/d_pass.c and
 * d_preempt.c.  Each replay runs in check mode; what is asserted follows from the quotas alone
 * (at most nominal / gang size gangs of a queue at once; borrowed gangs reclaimed by their
 * lender), never from timings.
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

/* 8 spot nodes of 8 GPUs; research may hold 16 spot GPUs, alone or in cohort ml with prod. */
static const char cfg_solo[] =
    "{\"pools\":[{\"name\":\"spot\",\"capacity\":\"spot\",\"instance_type\":\"x\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":10}],"
    "\"queues\":[{\"name\":\"default\",\"weight\":1},"
    "{\"name\":\"research\",\"weight\":1,\"quota\":{\"spot\":16}}],"
    "\"min_runtime_s\":60,\"default_time_limit_s\":5000}";
static const char cfg_cohort[] =
    "{\"pools\":[{\"name\":\"spot\",\"capacity\":\"spot\",\"instance_type\":\"x\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":10}],"
    "\"queues\":[{\"name\":\"research\",\"weight\":1,\"quota\":{\"spot\":16},\"cohort\":\"ml\"},"
    "{\"name\":\"prod\",\"weight\":1,\"quota\":{\"spot\":48},\"cohort\":\"ml\"}],"
    "\"min_runtime_s\":60,\"default_time_limit_s\":5000}";

static struct sim_trace *parse(const struct sim_setup *s, const char *text)
{
    struct mu_err err;
    struct sim_trace *t = sfix_trace(s, text, &err);
    assert_non_null(t);
    return t;
}

/* The most jobs of queue q (1 x 8 GPUs each) that ran at once, from their start and end. */
static int most_at_once(const struct sim_result *r, const struct sim_trace *t, int q)
{
    const struct sim_job *jobs = sim_trace_jobs(t);
    int most = 0;
    for (int i = 0; i < sim_trace_count(t); i++) {
        int64_t s_i, e_i;
        int n = 0;
        if (jobs[i].queue != q || sim_result_job(r, i, &s_i, &e_i) != SIM_COMPLETED)
            continue;
        for (int k = 0; k < sim_trace_count(t); k++) {
            int64_t s_k, e_k;
            if (jobs[k].queue == q && sim_result_job(r, k, &s_k, &e_k) == SIM_COMPLETED
                && s_k <= s_i && s_i < e_k)
                n++;
        }
        most = n > most ? n : most;
    }
    return most;
}

/* research's 16 GPUs hold under every policy although the cluster has 64 free: its eight 1 x 8
 * jobs run two at a time, in four waves of 100 s, while default's jobs are not held back. */
static void test_quota_holds(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    (void)state;
    sfix_setup(&s, cfg_solo, "spot=8");
    t = parse(&s, "submit_s,duration_s,tasks,gpus_per_task,queue\n"
                  "0,100,1,8,default\n0,100,1,8,default\n"
                  "1,100,1,8,research\n1,100,1,8,research\n1,100,1,8,research\n"
                  "1,100,1,8,research\n1,100,1,8,research\n1,100,1,8,research\n"
                  "1,100,1,8,research\n1,100,1,8,research\n");
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        struct sim_result *r = sim_run(&s, t, (enum sim_policy)p, &err);
        const struct sim_stats *st;
        int64_t start, end;
        assert_non_null(r);
        st = sim_result_stats(r);
        assert_int_equal(st->completed, 10);
        assert_int_equal(most_at_once(r, t, 1), 2);
        assert_true(st->makespan_s >= 400); /* 4 waves of 2, each 100 s */
        for (int i = 0; i < 2; i++) {
            assert_int_equal(sim_result_job(r, i, &start, &end), SIM_COMPLETED);
            assert_int_equal(start, 0);
        }
        sim_result_free(r);
    }
    sim_trace_free(t);
}

/* Cohort ml: research borrows prod's idle quota (six gangs where its own quota has two), and when
 * prod's jobs come it takes its quota back by preempting borrowed gangs (reclaim, as musterd),
 * one plan per pass; without preemption (backfill) prod's last two wait for its first two. */
static void test_cohort_borrow_and_reclaim(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    struct sim_result *r;
    int64_t start, end;
    (void)state;
    sfix_setup(&s, cfg_cohort, "spot=8");
    t = parse(&s, "submit_s,duration_s,tasks,gpus_per_task,queue\n"
                  "0,1000,1,8,research\n0,1000,1,8,research\n0,1000,1,8,research\n"
                  "0,1000,1,8,research\n0,1000,1,8,research\n0,1000,1,8,research\n"
                  "100,100,1,8,prod\n100,100,1,8,prod\n100,100,1,8,prod\n100,100,1,8,prod\n");
    r = sim_run(&s, t, SIM_MUSTER, &err);
    assert_non_null(r);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(sim_result_job(r, i, &start, &end), SIM_COMPLETED);
        assert_int_equal(start, 0); /* two on its quota, four borrowed */
    }
    assert_int_equal(sim_result_stats(r)->preemptions, 2);
    for (int i = 6; i < 10; i++) {
        assert_int_equal(sim_result_job(r, i, &start, &end), SIM_COMPLETED);
        assert_true(start < 200); /* its quota back before its first two jobs end */
    }
    sim_result_free(r);
    r = sim_run(&s, t, SIM_BACKFILL, &err);
    assert_non_null(r);
    assert_int_equal(sim_result_stats(r)->preemptions, 0);
    assert_int_equal(sim_result_job(r, 9, &start, &end), SIM_COMPLETED);
    assert_true(start >= 200); /* after prod's first two, on the GPUs they free */
    sim_result_free(r);
    sim_trace_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quota_holds),
        cmocka_unit_test(test_cohort_borrow_and_reclaim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

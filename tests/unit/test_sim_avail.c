/* SPDX-License-Identifier: MIT */
/*
 * muster-sim's spot availability trace (sim/avail.c, issue #13): the parser with its bad-input
 * table, and a replay that follows it: a drop gives the pool's highest-numbered nodes a notice,
 * a rise brings gone nodes back, nothing comes back on its own.  Check mode is on; what is
 * asserted follows from the trace alone.
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
    "\"gpus_per_node\":8,\"price_per_hour\":40}]}";

static struct sim_avail_trace *avail(const struct sim_setup *s,
                                     const char *text,
                                     struct mu_err *err)
{
    return sim_avail_parse(text, strlen(text), &s->cfg, err);
}

static void test_avail_parse(void **state)
{
    struct sim_setup s;
    struct mu_err err;
    struct sim_avail_trace *t;
    const struct sim_avail *a;
    (void)state;
    sfix_setup(&s, cluster_json, "spot=4");
    t = avail(&s, "nodes,t_s,pool\r\n3,200,spot\n\n1,100,spot\n2,100.7,spot\n", &err);
    assert_non_null(t);
    assert_int_equal(sim_avail_count(t), 3);
    a = sim_avail_rows(t);
    assert_int_equal(a[0].t_s, 100); /* sorted by tick, stable */
    assert_int_equal(a[0].nodes, 1);
    assert_int_equal(a[1].t_s, 100);
    assert_int_equal(a[1].nodes, 2);
    assert_int_equal(a[1].line, 5);
    assert_int_equal(a[2].t_s, 200);
    assert_int_equal(a[2].pool, 0);
    sim_avail_free(t);
    t = avail(&s, "t_s,pool,nodes\n", &err); /* a header alone: no change */
    assert_non_null(t);
    assert_int_equal(sim_avail_count(t), 0);
    sim_avail_free(t);
}

/* Anything it cannot use is an error naming the line and column. */
static void test_avail_bad_input(void **state)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        { "", "line 1: empty, expected a header" },
        { "t_s,pool\n1,spot\n", "line 1: column 'nodes' missing" },
        { "t_s,pool,nodes,x\n", "line 1, column 4: unknown column 'x'" },
        { "t_s,pool,t_s,nodes\n", "line 1, column 3: 't_s' appears twice" },
        { "t_s,pool,nodes\n,spot,1\n", "line 2, column 't_s': empty, a value is required" },
        { "t_s,pool,nodes\nx,spot,1\n", "line 2, column 't_s': " },
        { "t_s,pool,nodes\n-1,spot,1\n", "line 2, column 't_s': " },
        { "t_s,pool,nodes\n1,nope,1\n", "line 2, column 'pool': pool 'nope' is not in the config" },
        { "t_s,pool,nodes\n1,od,1\n", "line 2, column 'pool': pool 'od' is not a spot pool" },
        { "t_s,pool,nodes\n1,spot,\n", "line 2, column 'nodes': empty, a value is required" },
        { "t_s,pool,nodes\n1,spot,-2\n", "line 2, column 'nodes': " },
        { "t_s,pool,nodes\n1,spot,1.5\n", "line 2, column 'nodes': expected a whole number" },
        { "t_s,pool,nodes\n1,spot,100001\n", "line 2, column 'nodes': " },
        { "t_s,pool,nodes\n1,spot\n", "line 2, column 'nodes': empty, a value is required" },
        { "t_s,pool,nodes\n1,\"spot,1\n", "line 2, column 2: unterminated quote" },
    };
    struct sim_setup s;
    (void)state;
    sfix_setup(&s, cluster_json, "spot=4");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mu_err err;
        mu_err_clear(&err);
        if (avail(&s, cases[i].text, &err) != NULL)
            fail_msg("case %zu: parsed", i);
        if (!strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: got '%s', expected '%s'", i, err.msg, cases[i].msg);
    }
}

/* A 4-node gang on 4 spot nodes; the trace takes 2 away at 100 s and gives them back at 1000 s:
 * the gang is interrupted once and restarts only when all four are back, under every policy. */
static void test_avail_replay(void **state)
{
    static struct sim_setup s;
    static const char jobs_csv[] = "submit_s,duration_s,tasks,gpus_per_task,capacity\n"
                                   "0,500,4,8,spot\n";
    struct sim_trace_opts o;
    struct sim_trace *t;
    struct sim_avail_trace *a;
    struct mu_err err;
    (void)state;
    sfix_setup(&s, cluster_json, "spot=4");
    o = (struct sim_trace_opts){ .cfg = &s.cfg, .gpus_per_node = 8 };
    t = sim_trace_parse(jobs_csv, strlen(jobs_csv), &o, &err);
    assert_non_null(t);
    a = avail(&s, "t_s,pool,nodes\n100,spot,2\n1000,spot,9\n", &err);
    assert_non_null(a);
    s.avail = a;
    s.spot_rate[0] = 5; /* ignored: the trace says when nodes go */
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        struct sim_result *r = sim_run(&s, t, (enum sim_policy)p, &err);
        const struct sim_stats *st;
        int64_t start, end;
        assert_non_null(r);
        st = sim_result_stats(r);
        assert_int_equal(st->spot_notices, 2);
        assert_int_equal(st->interruptions, 1);
        assert_int_equal(st->completed, 1);
        assert_int_equal(sim_result_job(r, 0, &start, &end), SIM_COMPLETED);
        assert_int_equal(start, 0);
        assert_true(end >= 1000 + 500); /* all of it again: it never checkpoints */
        sim_result_free(r);
    }
    sim_avail_free(a);
    sim_trace_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avail_parse),
        cmocka_unit_test(test_avail_bad_input),
        cmocka_unit_test(test_avail_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

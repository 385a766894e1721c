/* SPDX-License-Identifier: MIT */
/*
 * muster-sim (sim/): the trace readers with their bad-input tables, the modelled cluster, and
 * replays under every policy in check mode (no GPU committed twice, the core's free GPUs equal
 * to the replay's own record after every event), deterministic for a seed.  Numbers asserted are
 * invariants of the model (every job accounted for, FIFO starts in arrival order, checkpoint on
 * notice loses exactly the write time), never timings.
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

/* The skip kind whose example contains needle, or -1. */
static int skip_find(const struct sim_trace *t, const char *needle)
{
    for (int k = 0; k < sim_trace_skip_kinds(t); k++)
        if (strstr(sim_trace_skip_example(t, k), needle))
            return k;
    return -1;
}

static void test_csv_split(void **state)
{
    char line[] = " a , \"b,c\" ,\"say \"\"hi\"\"\",";
    char *f[8];
    int n = 0;
    struct mu_err err;
    char bad1[] = "a,\"open";
    char bad2[] = "\"x\"y,b";
    (void)state;
    assert_int_equal(sim_csv_split(line, f, 8, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_string_equal(f[0], "a");
    assert_string_equal(f[1], "b,c");
    assert_string_equal(f[2], "say \"hi\"");
    assert_string_equal(f[3], "");
    assert_int_equal(sim_csv_split(bad1, f, 8, &n, &err), -1);
    assert_non_null(strstr(err.msg, "column 2: unterminated quote"));
    assert_int_equal(sim_csv_split(bad2, f, 8, &n, &err), -1);
    assert_non_null(strstr(err.msg, "column 1"));
}

static void test_trace_muster(void **state)
{
    struct sim_setup s;
    struct mu_err err;
    struct sim_trace *t;
    const struct sim_job *j;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=4,od=2");
    t = sfix_trace(&s,
                   "submit_s,duration_s,tasks,gpus_per_task,queue,priority,capacity,topology,"
                   "preemptible,checkpoint_interval_s,time_limit_s,user\n"
                   "150,60,2,8,research,5,on-demand,rack,false,600,120,ann\r\n"
                   "\n"
                   "100,30.5,1,1,,,,,,,,\n",
                   &err);
    assert_non_null(t);
    assert_int_equal(sim_trace_format(t), SIM_FORMAT_MUSTER);
    assert_int_equal(sim_trace_count(t), 2);
    assert_int_equal(sim_trace_rows(t), 2);
    assert_int_equal(sim_trace_skip_kinds(t), 0);
    j = sim_trace_jobs(t);
    assert_int_equal(j[0].submit_s, 0); /* sorted and relative to the first */
    assert_int_equal(j[0].duration_s, 31);
    assert_int_equal(j[0].queue, 0);
    assert_int_equal(j[0].ncapacity, 2);
    assert_true(j[0].preemptible);
    assert_int_equal(j[0].required_level, -1);
    assert_int_equal(j[1].submit_s, 50);
    assert_int_equal(j[1].tasks, 2);
    assert_int_equal(j[1].queue, 1);
    assert_int_equal(j[1].priority, 5);
    assert_int_equal(j[1].ncapacity, 1);
    assert_int_equal(j[1].capacity[0], SCHED_ON_DEMAND);
    assert_int_equal(j[1].required_level, 1);
    assert_false(j[1].preemptible);
    assert_int_equal(j[1].ckpt_interval_s, 600);
    assert_int_equal(j[1].time_limit_s, 120);
    sim_trace_free(t);
}

/* Rows that cannot be used: each is counted under its reason with its line and column. */
static void test_trace_bad_rows(void **state)
{
    static const struct {
        const char *row;
        const char *example;
    } cases[] = {
        { "x,10,1,1", "line 2, column 'submit_s': expected a number" },
        { ",10,1,1", "line 2, column 'submit_s': empty, a value is required" },
        { "0,10,0,1", "line 2, column 'tasks': expected a number in [1, 4096]" },
        { "0,10,1,65", "line 2, column 'gpus_per_task': expected a number in [0, 64]" },
        { "0,10,1,12", "line 2, column 'gpus_per_task': 12 > 8 GPUs of the largest node" },
        { "0,10,1,0", "line 2, column 'gpus_per_task': 0 GPUs per task" },
        { "0,10,1.5,1", "line 2, column 'tasks': expected a whole number" },
        { "0,10,1,1,nope", "line 2, column 'queue': queue 'nope' is not in the config" },
        { "0,10,1,1,,x", "line 2, column 'priority': expected a number" },
        { "0,10,1,1,,,200000", "line 2, column 'time_limit_s': 200000 > 100000" },
        { "0,10,1,1,,,,,spt", "line 2, column 'capacity': expected spot, on-demand" },
        { "0,10,1,1,,,,,,maybe", "line 2, column 'preemptible': expected true, false" },
        { "0,10,1,1,,,,,,,block", "line 2, column 'topology': 'block' is not a configured" },
        { "0,10,1,\"1", "line 2: column 4: unterminated quote" },
    };
    struct sim_setup s;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=1");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512];
        struct mu_err err;
        struct sim_trace *t;
        (void)mu_snprintf(text, sizeof(text),
                          "submit_s,duration_s,tasks,gpus_per_task,queue,priority,time_limit_s,"
                          "checkpoint_interval_s,capacity,preemptible,topology\n%s\n0,5,1,1\n",
                          cases[i].row);
        t = sfix_trace(&s, text, &err);
        assert_non_null(t);
        assert_int_equal(sim_trace_rows(t), 2);
        assert_int_equal(sim_trace_count(t), 1); /* the good row is kept */
        assert_int_equal(sim_trace_skip_kinds(t), 1);
        assert_int_equal(sim_trace_skip_count(t, 0), 1);
        if (!strstr(sim_trace_skip_example(t, 0), cases[i].example))
            fail_msg("case %zu: got '%s'", i, sim_trace_skip_example(t, 0));
        sim_trace_free(t);
    }
}

/* A text that is no trace: an error naming line 1. */
static void test_trace_errors(void **state)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        { "", "line 1: empty, expected a header" },
        { "a,b,c\n1,2,3\n", "line 1: not a trace header" },
        { "submit_s,duration_s,tasks\n", "line 1: column 'gpus_per_task' missing (muster" },
        { "submit_s,duration_s,tasks,gpus_per_task,colour\n",
          "line 1, column 5: unknown column 'colour'" },
        { "submit_s,submit_s\n", "line 1, column 2: 'submit_s' appears twice" },
        { "timestamp,num_gpus\n", "line 1: column 'duration' missing (philly" },
        { "creation_time,num_gpu,deletion_time\n", "column 'scheduled_time' missing (alibaba" },
        { "\"submit_s,duration_s\n", "line 1, column 1: unterminated quote" },
    };
    struct sim_setup s;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=1");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mu_err err;
        mu_err_clear(&err);
        assert_null(sfix_trace(&s, cases[i].text, &err));
        if (!strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: got '%s'", i, err.msg);
    }
}

static void test_trace_philly(void **state)
{
    struct sim_setup s;
    struct mu_err err;
    struct sim_trace *t;
    const struct sim_job *j;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=4");
    t = sfix_trace(&s,
                   "jobid,user,vc,status,timestamp,duration,num_gpus\n"
                   "a,u1,vc1,Pass,2017-10-03 10:00:00,600,16\n"
                   "b,u2,vc1,Failed,2017-10-03 09:59:00,60,1\n"
                   "c,u2,vc2,Killed,2017-10-03 10:01:00,None,1\n"
                   "d,u3,vc2,Pass,2017-13-03 10:01:00,60,1\n"
                   "e,u3,vc2,Pass,2017-10-04 00:00:00,60,12\n"
                   "f,u3,vc2,Pass,2017-10-04 00:00:00,60,0\n",
                   &err);
    assert_non_null(t);
    assert_int_equal(sim_trace_format(t), SIM_FORMAT_PHILLY);
    assert_int_equal(sim_trace_rows(t), 6);
    assert_int_equal(sim_trace_count(t), 3);
    j = sim_trace_jobs(t);
    assert_int_equal(j[0].line, 3); /* sorted: the 09:59 row first */
    assert_int_equal(j[1].submit_s, 60);
    assert_int_equal(j[1].tasks, 2); /* 16 GPUs: two whole nodes */
    assert_int_equal(j[1].gpus_per_task, 8);
    assert_int_equal(j[2].submit_s, 14 * 3600 + 60);
    assert_int_equal(j[2].tasks, 2); /* 12 GPUs rounded up to two nodes */
    assert_int_equal(sim_trace_rounded(t), 1);
    assert_true(skip_find(t, "line 4, column 'duration'") >= 0);
    assert_true(skip_find(t, "line 5, column 'timestamp': expected YYYY-MM-DD HH:MM:SS") >= 0);
    assert_true(skip_find(t, "line 7, column 'num_gpus': 0 GPUs") >= 0);
    sim_trace_free(t);
}

static void test_trace_alibaba(void **state)
{
    struct sim_setup s;
    struct mu_err err;
    struct sim_trace *t;
    const struct sim_job *j;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=4");
    t = sfix_trace(&s,
                   "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                   "creation_time,deletion_time,scheduled_time\n"
                   "p1,8000,30000,1,500,,BE,Succeeded,100,400,120\n"
                   "p2,8000,30000,8,1000,,LS,Running,50,,60\n"
                   "p3,8000,30000,0,0,,BE,Succeeded,10,100,20\n"
                   "p4,8000,30000,16,1000,,Guaranteed,Succeeded,0,1000,0\n"
                   "p5,8000,30000,1,1000,,Burstable,Pending,70,,\n"
                   "p6,8000,30000,1,1000,,XX,Succeeded,70,90,80\n",
                   &err);
    assert_non_null(t);
    assert_int_equal(sim_trace_format(t), SIM_FORMAT_ALIBABA);
    assert_int_equal(sim_trace_count(t), 2);
    j = sim_trace_jobs(t);
    assert_int_equal(j[0].tasks, 2); /* p4: 16 GPUs, two nodes */
    assert_int_equal(j[0].priority, 10);
    assert_false(j[0].preemptible);
    assert_int_equal(j[0].duration_s, 1000);
    assert_int_equal(j[1].submit_s, 100); /* p1, relative to p4's creation */
    assert_int_equal(j[1].duration_s, 280);
    assert_int_equal(j[1].gpus_per_task, 1);
    assert_true(j[1].preemptible);
    assert_int_equal(sim_trace_rounded(t), 1); /* p1's half GPU */
    assert_true(skip_find(t, "line 3, column 'deletion_time'") >= 0);
    assert_true(skip_find(t, "line 4, column 'num_gpu': 0 GPUs") >= 0);
    assert_true(skip_find(t, "line 6, column 'scheduled_time'") >= 0);
    assert_true(skip_find(t, "line 7, column 'qos'") >= 0);
    sim_trace_free(t);
}

static void test_setup_and_cluster(void **state)
{
    struct sim_setup s;
    struct mu_err err;
    struct sched_cluster *c;
    const struct sched_node_spec *a, *b, *z;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=40,od=8");
    assert_int_equal(sim_setup_parse_nodes(&s, "spot=1,gpu=2", &err), -1);
    assert_non_null(strstr(err.msg, "pool 'gpu' is not in the config"));
    assert_int_equal(sim_setup_parse_nodes(&s, "spot=x", &err), -1);
    assert_int_equal(sim_setup_parse_spot_rate(&s, "od=0.5", &err), -1);
    assert_non_null(strstr(err.msg, "not a spot pool"));
    assert_int_equal(sim_setup_parse_spot_rate(&s, "0.25", &err), 0);
    assert_true(s.spot_rate[0] == 0.25 && s.spot_rate[1] == 0);
    assert_int_equal(sim_setup_parse_nodes(&s, "spot=40,od=8", &err), 0);
    c = sim_cluster_build(&s, &err);
    assert_non_null(c);
    assert_int_equal(sched_cluster_node_count(c), 48);
    a = sched_cluster_node_spec(c, 0);
    b = sched_cluster_node_spec(c, 8);
    z = sched_cluster_node_spec(c, 40);
    assert_string_equal(a->labels[0], b->labels[0]);     /* one zone of 32 nodes */
    assert_string_not_equal(a->labels[1], b->labels[1]); /* racks of 8 */
    assert_string_not_equal(a->labels[0], z->labels[0]);
    assert_int_equal(z->pool, 1);
    sched_cluster_free(c);
}

static struct sim_trace *gen_trace(const struct sim_setup *s, int jobs, uint64_t seed)
{
    struct sim_gen_opts o;
    struct mu_buf b;
    struct mu_err err;
    struct sim_trace *t;
    sim_gen_defaults(&o);
    o.jobs = jobs;
    o.seed = seed;
    o.max_nodes = 8;
    o.jobs_per_hour = 30;
    o.queues = "default,research";
    mu_buf_init(&b, 0);
    assert_int_equal(sim_gen(&o, &b, &err), 0);
    t = sfix_trace(s, b.data, &err);
    mu_buf_release(&b);
    assert_non_null(t);
    assert_int_equal(sim_trace_rows(t), jobs);
    assert_true(sim_trace_count(t) > jobs / 2); /* some ask for more than max_time_limit_s */
    return t;
}

/* Every policy replays the same trace with spot interruptions and preemption in check mode;
 * every job is accounted for, and a second run gives the same numbers and start order. */
static void test_run_policies_checked(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=12,od=4");
    assert_int_equal(sim_setup_parse_spot_rate(&s, "0.3", &err), 0);
    t = gen_trace(&s, 300, 3);
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        struct sim_result *r1 = sim_run(&s, t, (enum sim_policy)p, &err);
        struct sim_result *r2;
        const struct sim_stats *st;
        const int *o1, *o2;
        int n1, n2;
        if (!r1)
            fail_msg("%s: %s", sim_policy_name((enum sim_policy)p), err.msg);
        r2 = sim_run(&s, t, (enum sim_policy)p, &err);
        assert_non_null(r2);
        st = sim_result_stats(r1);
        assert_int_equal(st->jobs + st->never_fit, sim_trace_count(t));
        assert_int_equal(st->completed + st->timed_out + st->unfinished, st->jobs);
        assert_int_equal(st->unfinished, 0);
        assert_true(st->util > 0 && st->util <= 1.0 + 1e-9);
        assert_true(st->useful_util <= st->util + 1e-9);
        assert_true(st->jct_p50_s <= st->jct_p95_s && st->jct_p95_s <= st->jct_p99_s);
        assert_true(st->spot_notices > 0);
        assert_memory_equal(st, sim_result_stats(r2), sizeof(*st));
        n1 = sim_result_start_order(r1, &o1);
        n2 = sim_result_start_order(r2, &o2);
        assert_int_equal(n1, st->jobs);
        assert_int_equal(n1, n2);
        assert_memory_equal(o1, o2, (size_t)n1 * sizeof(int));
        for (int j = 0; j < sim_trace_count(t); j++) {
            int64_t start, end;
            enum sim_outcome o = sim_result_job(r1, j, &start, &end);
            assert_true(o == SIM_COMPLETED || o == SIM_TIMED_OUT || o == SIM_NEVER_FIT);
            if (o != SIM_NEVER_FIT)
                assert_true(start >= sim_trace_jobs(t)[j].submit_s && end >= start);
        }
        if (p == SIM_FIFO) {
            for (int i = 1; i < n1; i++)
                assert_true(o1[i - 1] < o1[i]); /* strict arrival order */
            assert_int_equal(st->preemptions, 0);
        }
        sim_result_free(r2);
        sim_result_free(r1);
    }
    sim_trace_free(t);
}

/* Checkpoint on notice with a write shorter than the notice: an interrupted gang loses exactly
 * its write time (no restart cost here), whatever the interruption times are. */
static void test_spot_checkpoint_on_notice(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    struct sim_result *r;
    const struct sim_stats *st;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=4");
    s.restart_s = 0;
    s.ckpt_write_s = 30;
    assert_int_equal(sim_setup_parse_spot_rate(&s, "1", &err), 0);
    t = sfix_trace(&s,
                   "submit_s,duration_s,tasks,gpus_per_task,checkpoint_interval_s\n"
                   "0,36000,1,8,3600\n0,36000,1,8,3600\n0,36000,2,8,3600\n",
                   &err);
    assert_non_null(t);
    r = sim_run(&s, t, SIM_MUSTER, &err);
    assert_non_null(r);
    st = sim_result_stats(r);
    assert_int_equal(st->completed, 3);
    assert_true(st->interruptions > 0);
    assert_true(st->lost_spot_gpu_h > 0);
    /* each interruption: 8 or 16 GPUs x 30 s */
    assert_true(st->lost_spot_gpu_h >= st->interruptions * 8 * 30 / 3600.0 - 1e-9);
    assert_true(st->lost_spot_gpu_h <= st->interruptions * 16 * 30 / 3600.0 + 1e-9);
    sim_result_free(r);
    sim_trace_free(t);
}

/* Users within a queue, as musterd orders them: alice's four jobs arrive first on one node, bob's
 * later one starts right after alice's first under the muster policy (arrival order under fifo). */
static void test_users_fair_share(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    struct sim_result *r;
    const int *order;
    static const int want[] = { 0, 4, 1, 2, 3 };
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=1");
    t = sfix_trace(&s,
                   "submit_s,duration_s,tasks,gpus_per_task,user\n"
                   "0,100,1,8,alice\n1,100,1,8,alice\n2,100,1,8,alice\n3,100,1,8,alice\n"
                   "10,100,1,8,bob\n",
                   &err);
    assert_non_null(t);
    assert_int_equal(sim_trace_users(t), 2);
    assert_int_not_equal(sim_trace_jobs(t)[4].user, sim_trace_jobs(t)[0].user);
    r = sim_run(&s, t, SIM_MUSTER, &err);
    assert_non_null(r);
    assert_int_equal(sim_result_start_order(r, &order), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(order[i], want[i]);
    sim_result_free(r);
    r = sim_run(&s, t, SIM_FIFO, &err);
    assert_non_null(r);
    assert_int_equal(sim_result_start_order(r, &order), 5);
    assert_int_equal(order[1], 1);
    sim_result_free(r);
    sim_trace_free(t);
    /* Without a user column: one user per queue. */
    t = sfix_trace(
        &s, "submit_s,duration_s,tasks,gpus_per_task,queue\n0,1,1,1,\n0,1,1,1,research\n", &err);
    assert_non_null(t);
    assert_int_equal(sim_trace_users(t), 2);
    sim_trace_free(t);
}

/* With a pass interval the replay passes less often and still accounts for every job. */
static void test_pass_interval(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    struct sim_result *every, *coarse;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=12,od=4");
    assert_int_equal(sim_setup_parse_spot_rate(&s, "0.3", &err), 0);
    t = gen_trace(&s, 200, 5);
    every = sim_run(&s, t, SIM_MUSTER, &err);
    s.pass_interval_s = 300;
    coarse = sim_run(&s, t, SIM_MUSTER, &err);
    assert_non_null(every);
    assert_non_null(coarse);
    assert_true(sim_result_stats(coarse)->passes < sim_result_stats(every)->passes);
    assert_int_equal(sim_result_stats(coarse)->completed + sim_result_stats(coarse)->timed_out,
                     sim_result_stats(coarse)->jobs);
    sim_result_free(coarse);
    sim_result_free(every);
    sim_trace_free(t);
}

/* A job larger than the cluster is reported, not replayed (and does not hang the replay). */
static void test_never_fit(void **state)
{
    static struct sim_setup s;
    struct sim_trace *t;
    struct mu_err err;
    (void)state;
    sfix_setup(&s, sfix_cluster_json, "spot=2");
    t = sfix_trace(&s, "submit_s,duration_s,tasks,gpus_per_task\n0,100,4,8\n5,100,1,8\n", &err);
    assert_non_null(t);
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        struct sim_result *r = sim_run(&s, t, (enum sim_policy)p, &err);
        assert_non_null(r);
        assert_int_equal(sim_result_stats(r)->never_fit, 1);
        assert_int_equal(sim_result_stats(r)->completed, 1);
        sim_result_free(r);
    }
    sim_trace_free(t);
}

static void test_gen_and_report(void **state)
{
    struct sim_gen_opts o;
    struct mu_buf a, b, c;
    struct mu_err err;
    static struct sim_setup s;
    struct sim_trace *t;
    struct sim_result *r[2];
    (void)state;
    sim_gen_defaults(&o);
    o.jobs = 50;
    mu_buf_init(&a, 0);
    mu_buf_init(&b, 0);
    mu_buf_init(&c, 0);
    assert_int_equal(sim_gen(&o, &a, &err), 0);
    assert_int_equal(sim_gen(&o, &b, &err), 0);
    o.seed = 2;
    assert_int_equal(sim_gen(&o, &c, &err), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    assert_true(a.len != c.len || memcmp(a.data, c.data, a.len) != 0);
    o.max_nodes = 0;
    assert_int_equal(sim_gen(&o, &c, &err), -1);
    sfix_setup(&s, sfix_cluster_json, "spot=64,od=16");
    t = sfix_trace(&s, a.data, &err);
    assert_non_null(t);
    r[0] = sim_run(&s, t, SIM_FIFO, &err);
    r[1] = sim_run(&s, t, SIM_MUSTER, &err);
    assert_non_null(r[0]);
    assert_non_null(r[1]);
    b.len = 0;
    assert_int_equal(sim_report_table(r, 2, &b, &err), 0);
    assert_non_null(strstr(b.data, "fifo"));
    assert_non_null(strstr(b.data, "JCT p99"));
    c.len = 0;
    assert_int_equal(sim_report_json(t, r, 2, &c, &err), 0);
    assert_non_null(strstr(c.data, "\"policy\":\"muster\""));
    assert_non_null(strstr(c.data, "\"format\":\"muster\""));
    sim_result_free(r[1]);
    sim_result_free(r[0]);
    sim_trace_free(t);
    mu_buf_release(&a);
    mu_buf_release(&b);
    mu_buf_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_split),
        cmocka_unit_test(test_trace_muster),
        cmocka_unit_test(test_trace_bad_rows),
        cmocka_unit_test(test_trace_errors),
        cmocka_unit_test(test_trace_philly),
        cmocka_unit_test(test_trace_alibaba),
        cmocka_unit_test(test_setup_and_cluster),
        cmocka_unit_test(test_run_policies_checked),
        cmocka_unit_test(test_spot_checkpoint_on_notice),
        cmocka_unit_test(test_users_fair_share),
        cmocka_unit_test(test_pass_interval),
        cmocka_unit_test(test_never_fit),
        cmocka_unit_test(test_gen_and_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

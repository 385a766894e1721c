/* SPDX-License-Identifier: MIT */
/*
 * Allocation-failure tests (issue #41, docs/style.md §1.8): each parser and the core run with
 * allocation N failed, for every N until a run allocates fewer times (tests/unit/support/oom.h).
 * Inputs are the fuzz seeds (tests/fuzz/corpus/), which reach most of each parser (the
 * scheduler's, and the worker's nvidia-smi, topology matrix and IMDS readers); every failed
 * run must come back as an error with a message and leave its arguments as the fuzz targets'
 * invariants say (a failed spec parse leaves the record zeroed, a failed config parse leaves the
 * defaults), never crash, and never leak (ASan and valgrind run this test in CI).  The core runs
 * as muster-sim drives it: a short generated trace replayed under muster's policy with spot
 * interruptions and preemption.  Kept small: the whole test is a few thousand runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/oom.h"
#include "tests/unit/support/sim_fix.h"

#include "access/access.h"
#include "config/cfg.h"
#include "protocol/proto.h"
#include "queue/queue.h"
#include "sim/sim.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* A fuzz seed: tests/fuzz/corpus/<name>, read whole (free). */
static char *seed(const char *name, size_t *len)
{
    const char *data = getenv("MUSTER_TEST_DATA");
    char path[512];
    struct mu_err err;
    char *text;
    assert_non_null(data);
    (void)mu_snprintf(path, sizeof(path), "%s/../fuzz/corpus/%s", data, name);
    text = mu_file_read(path, 1 << 20, len, &err);
    if (!text)
        fail_msg("%s", err.msg);
    return text;
}

struct text {
    const char *name; /* the seed's path under the corpus */
    char *data;
    size_t len;
};

static void report(const char *what, int allocs, int fallbacks)
{
    print_message("oom: %-28s %4d allocations, %d fallbacks, %d sites failed so far\n", what,
                  allocs, fallbacks, oom_sites());
}

static void run_seeds(const char *const *names, size_t n, oom_scenario_fn fn)
{
    for (size_t i = 0; i < n; i++) {
        struct text t = { names[i], NULL, 0 };
        int fallbacks;
        int allocs;
        t.data = seed(names[i], &t.len);
        allocs = oom_run(names[i], fn, &t, &fallbacks);
        report(names[i], allocs, fallbacks);
        assert_int_equal(fallbacks, 0); /* a parser has no fallback: it fails with a message */
        free(t.data);
    }
}

/* ---- the parsers ---- */

static int config_parse(void *arg, struct mu_err *err)
{
    static struct cfg c; /* about 20 KiB */
    const struct text *t = arg;
    if (cfg_parse(&c, t->data, t->len, err) != 0) {
        assert_int_equal(c.nqueues, 1); /* the defaults, as fuzz_config checks */
        assert_int_equal(c.npools, 0);
        return -1;
    }
    return 0;
}

static void test_config(void **state)
{
    static const char *const names[] = { "config/full.json", "config/prod.json",
                                         "config/quotas-cohort.json" };
    (void)state;
    run_seeds(names, MU_ARRAY_LEN(names), config_parse);
}

static int access_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct access *a = access_parse(t->data, t->len, err);
    if (!a)
        return -1;
    access_free(a);
    return 0;
}

static void test_access(void **state)
{
    static const char *const names[] = { "access/cluster.json", "access/one_user.json" };
    (void)state;
    run_seeds(names, MU_ARRAY_LEN(names), access_run);
}

static const char spec_cluster[] =
    "{\"topology_levels\":[\"zone\",\"rack\"],\"pools\":["
    "{\"name\":\"s\",\"capacity\":\"spot\",\"gpu_type\":\"L40S\",\"gpus_per_node\":4,"
    "\"max_gpus\":16},"
    "{\"name\":\"o\",\"capacity\":\"on-demand\",\"gpu_type\":\"H100\",\"gpus_per_node\":8}],"
    "\"queues\":[{\"name\":\"default\"},{\"name\":\"research\",\"weight\":2}]}";

static struct cfg spec_cfg;

static int spec_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct queue_spec s;
    int rc;
    if (queue_spec_parse(t->data, t->len, &s, err) != 0) {
        const unsigned char *p = (const unsigned char *)&s;
        for (size_t i = 0; i < sizeof(s); i++)
            assert_int_equal(p[i], 0); /* a failed parse leaves the record empty */
        return -1;
    }
    rc = queue_spec_check(&s, &spec_cfg, err);
    queue_spec_release(&s);
    return rc;
}

static void test_spec(void **state)
{
    static const char *const names[] = { "spec/full.json", "spec/after.json", "spec/array.json",
                                         "spec/topology_relax.json" };
    struct mu_err err;
    (void)state;
    assert_int_equal(cfg_parse(&spec_cfg, spec_cluster, sizeof(spec_cluster) - 1, &err), 0);
    run_seeds(names, MU_ARRAY_LEN(names), spec_run);
}

static int proto_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct proto_msg m;
    struct mu_buf b;
    int rc;
    if (proto_msg_decode(t->data, t->len, &m, err) != 0) {
        assert_null(m.gpus); /* a failed decode owns no memory */
        assert_null(m.tasks);
        assert_null(m.argv);
        assert_null(m.env);
        return -1;
    }
    mu_buf_init(&b, 0);
    rc = proto_msg_encode(&m, &b, err);
    mu_buf_release(&b);
    proto_msg_release(&m);
    return rc;
}

static void test_proto(void **state)
{
    static const char *const names[] = {
        "proto/full-hello",           "proto/full-bind",
        "proto/full-log_data",        "proto/full-hello-checkpoint",
        "proto/full-task_status",     "proto/full-spot_notice",
        "proto/full-checkpoint_done", "proto/full-rebalance",
        "proto/full-log_read",
    };
    (void)state;
    run_seeds(names, MU_ARRAY_LEN(names), proto_run);
}

static int topo_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct cfg_topo *topo = cfg_topo_parse(t->data, t->len, err);
    char *json;
    if (!topo)
        return -1;
    json = cfg_topo_instance_format(cfg_topo_get(topo, 0), err);
    cfg_topo_free(topo);
    if (!json)
        return -1;
    free(json);
    return 0;
}

static void test_topo(void **state)
{
    static const char *const names[] = { "topo/aws_example.json" };
    (void)state;
    run_seeds(names, MU_ARRAY_LEN(names), topo_run);
}

/* ---- the worker's parsers: nvidia-smi's CSV and -L list, its topology matrix, the IMDS ---- */

static int nvsmi_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    int n = -1;
    return wrk_gpus_parse_csv(t->data, gpus, PROTO_MAX_GPUS, &n, err);
}

static int mig_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    int n = -1;
    wrk_gpus_simulate(gpus, 8, NULL);
    return wrk_gpus_parse_mig(t->data, gpus, 8, PROTO_MAX_GPUS, &n, err);
}

static int nvtopo_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    int island[PROTO_MAX_GPUS];
    int nislands = -1;
    return wrk_topo_parse(t->data, 8, island, &nislands, err);
}

static int imds_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct wrk_imds_action act;
    return wrk_imds_parse_action(t->data, t->len, &act, err);
}

static void test_worker(void **state)
{
    static const char *const csv[] = { "nvsmi/p5.48xlarge.csv", "nvsmi/g6e.12xlarge.csv" };
    static const char *const mig[] = { "nvsmi/L-p5-mig" };
    static const char *const topo[] = { "nvtopo/topo-p5.48xlarge.txt" };
    static const char *const imds[] = { "imds/action-terminate.json", "imds/action-stop.json" };
    (void)state;
    run_seeds(csv, MU_ARRAY_LEN(csv), nvsmi_run);
    run_seeds(mig, MU_ARRAY_LEN(mig), mig_run);
    run_seeds(topo, MU_ARRAY_LEN(topo), nvtopo_run);
    run_seeds(imds, MU_ARRAY_LEN(imds), imds_run);
}

/* ---- the simulator's trace readers, and the core as the simulator drives it ---- */

static struct sim_setup *sim_setup(void)
{
    static struct sim_setup s;
    static int ready;
    struct mu_err err;
    if (!ready) {
        sfix_setup(&s, sfix_cluster_json, "spot=6,od=2");
        assert_int_equal(sim_setup_parse_spot_rate(&s, "0.3", &err), 0);
        ready = 1;
    }
    return &s;
}

static int trace_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct sim_trace_opts o = { .cfg = &sim_setup()->cfg, .gpus_per_node = 8 };
    struct sim_trace *tr = sim_trace_parse(t->data, t->len, &o, err);
    if (!tr)
        return -1;
    sim_trace_free(tr);
    return 0;
}

/* fuzz_avail's pools: "s" (spot) and "od". */
static const char avail_cluster[] =
    "{\"pools\":[{\"name\":\"s\",\"capacity\":\"spot\",\"instance_type\":\"x\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":1},"
    "{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"x\",\"gpu_type\":\"H100\","
    "\"gpus_per_node\":8,\"price_per_hour\":4}]}";
static struct cfg avail_cfg;

static int avail_run(void *arg, struct mu_err *err)
{
    const struct text *t = arg;
    struct sim_avail_trace *a = sim_avail_parse(t->data, t->len, &avail_cfg, err);
    if (!a)
        return -1;
    sim_avail_free(a);
    return 0;
}

static void test_sim_readers(void **state)
{
    static const char *const traces[] = { "trace/muster.csv", "trace/philly.csv",
                                          "trace/alibaba.csv" };
    static const char *const avails[] = { "avail/basic.csv", "avail/reordered.csv" };
    struct mu_err err;
    (void)state;
    (void)sim_setup();
    assert_int_equal(cfg_parse(&avail_cfg, avail_cluster, strlen(avail_cluster), &err), 0);
    run_seeds(traces, MU_ARRAY_LEN(traces), trace_run);
    run_seeds(avails, MU_ARRAY_LEN(avails), avail_run);
}

struct replay {
    const struct sim_trace *trace;
    enum sim_policy policy;
};

static int replay_run(void *arg, struct mu_err *err)
{
    const struct replay *r = arg;
    struct sim_result *res = sim_run(sim_setup(), r->trace, r->policy, err);
    if (!res)
        return -1;
    sim_result_free(res);
    return 0;
}

/* The core under every policy: passes with reservations and backfill, fair-share order,
 * preemption plans and spot notices, on a generated trace of a dozen jobs. */
static void test_core_replay(void **state)
{
    struct sim_trace_opts o = { .cfg = &sim_setup()->cfg, .gpus_per_node = 8 };
    struct sim_gen_opts g;
    struct sim_trace *t;
    struct mu_err err;
    struct mu_buf b;
    (void)state;
    sim_gen_defaults(&g);
    g.jobs = 12;
    g.seed = 3;
    g.max_nodes = 4;
    g.jobs_per_hour = 30;
    g.queues = "default,research";
    mu_buf_init(&b, 0);
    assert_int_equal(sim_gen(&g, &b, &err), 0);
    t = sim_trace_parse(b.data, b.len, &o, &err);
    mu_buf_release(&b);
    assert_non_null(t);
    for (int p = 0; p < SIM_NPOLICIES; p++) {
        struct replay r = { t, (enum sim_policy)p };
        int fallbacks;
        int allocs = oom_run(sim_policy_name(r.policy), replay_run, &r, &fallbacks);
        report(sim_policy_name(r.policy), allocs, fallbacks);
        /* The one documented fallback: no memory for one more sample ends the sampling (the
         * plots' timeline), as MAX_SAMPLES does, not the replay (sim/engine.c). */
        assert_in_range(fallbacks, 0, 1);
    }
    sim_trace_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),      cmocka_unit_test(test_access),
        cmocka_unit_test(test_spec),        cmocka_unit_test(test_proto),
        cmocka_unit_test(test_topo),        cmocka_unit_test(test_worker),
        cmocka_unit_test(test_sim_readers), cmocka_unit_test(test_core_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for config/ (docs/design.md §2a): every default, every field, the example files, and a
 * bad-input table whose messages must start with the key path the user has to fix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/cfg.h"

#include "common/mu_banned.h"

static const char *data_dir(void)
{
    const char *d = getenv("MUSTER_TEST_DATA");
    return d ? d : "tests/data";
}

static void data_path(char *buf, size_t size, const char *rel)
{
    assert_int_equal(mu_snprintf(buf, size, "%s/%s", data_dir(), rel), 0);
}

static void assert_prefix(const char *msg, const char *prefix)
{
    if (strncmp(msg, prefix, strlen(prefix)) != 0) {
        print_error("message: \"%s\"\nexpected prefix: \"%s\"\n", msg, prefix);
        fail();
    }
}

static void assert_defaults(const struct cfg *c)
{
    assert_string_equal(c->redis, "redis://127.0.0.1:6379");
    assert_string_equal(c->bind, "tcp://127.0.0.1:7070");
    assert_string_equal(c->metrics, "");
    assert_string_equal(c->key_prefix, "muster:");
    assert_int_equal(c->nlevels, 0);
    assert_int_equal(c->npools, 0);
    assert_int_equal(c->nqueues, 1);
    assert_string_equal(c->queues[0].name, "default");
    assert_int_equal(c->queues[0].weight, 1);
    assert_int_equal(c->heartbeat_s, 1);
    assert_int_equal(c->node_lost_after_s, 30);
    assert_int_equal(c->spot_cooldown_s, 600);
    assert_int_equal(c->min_runtime_s, 60);
    assert_int_equal(c->bind_timeout_s, 30);
    assert_int_equal(c->leader_lease_s, 5);
    assert_int_equal(c->never_met, CFG_NEVER_MET_CANCEL);
    assert_int_equal(c->keep_finished_s, 86400);
    assert_string_equal(c->history_sqlite, "");
    assert_int_equal(c->kill_grace_s, 10);
    assert_int_equal(c->default_time_limit_s, 86400);
    assert_int_equal(c->max_time_limit_s, 0);
    assert_int_equal(c->events_max, 100000);
    assert_int_equal(c->retry_backoff_s, 10);
    assert_int_equal(c->retry_backoff_max_s, 300);
    assert_int_equal(c->fair_share_half_life_s, 604800);
    assert_int_equal(c->consolidate_after_s, 600);
    assert_int_equal(c->spot_return_horizon_s, 3600);
    assert_int_equal(c->spot_return_overhead_s, 120);
}

/* A max_time_limit_s below the built-in default lowers it; one given explicitly must fit. */
static void test_time_limits(void **state)
{
    struct cfg c;
    struct mu_err err;
    static const char max_only[] = "{\"max_time_limit_s\":3600}";
    static const char both[] = "{\"max_time_limit_s\":3600,\"default_time_limit_s\":600}";
    (void)state;

    assert_int_equal(cfg_parse(&c, max_only, strlen(max_only), &err), 0);
    assert_int_equal(c.max_time_limit_s, 3600);
    assert_int_equal(c.default_time_limit_s, 3600);
    assert_int_equal(cfg_parse(&c, both, strlen(both), &err), 0);
    assert_int_equal(c.default_time_limit_s, 600);
}

static void test_defaults(void **state)
{
    struct cfg c;
    struct mu_err err;
    (void)state;

    cfg_init_defaults(&c);
    assert_defaults(&c);
    assert_int_equal(cfg_parse(&c, "{}", 2, &err), 0);
    assert_defaults(&c);
    assert_int_equal(cfg_parse(&c, " \n{ }\n ", 7, &err), 0);
    assert_defaults(&c);
}

static void test_full(void **state)
{
    struct cfg c;
    struct mu_err err;
    char path[512];
    (void)state;

    data_path(path, sizeof(path), "cfg/full.json");
    if (cfg_load_file(&c, path, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(c.redis, "redis://:secret@10.1.2.3:6380/2");
    assert_string_equal(c.bind, "tcp://0.0.0.0:7171");
    assert_string_equal(c.metrics, ":9100");
    assert_string_equal(c.key_prefix, "test:muster:");
    assert_int_equal(c.nlevels, 3);
    assert_string_equal(c.levels[0], "zone");
    assert_string_equal(c.levels[1], "block");
    assert_string_equal(c.levels[2], "rack");
    assert_int_equal(c.npools, 2);
    assert_string_equal(c.pools[0].name, "p5-spot");
    assert_int_equal(c.pools[0].capacity, CFG_CAPACITY_SPOT);
    assert_string_equal(c.pools[0].instance_type, "p5.48xlarge");
    assert_string_equal(c.pools[0].gpu_type, "H100");
    assert_int_equal(c.pools[0].gpus_per_node, 8);
    assert_true(c.pools[0].price_per_hour > 12.49 && c.pools[0].price_per_hour < 12.51);
    assert_int_equal(c.pools[0].max_gpus, 64);
    assert_true(c.pools[0].shared);
    /* Optional pool keys: instance_type "", price 0, no cap, not shared. */
    assert_string_equal(c.pools[1].name, "p5-od");
    assert_int_equal(c.pools[1].capacity, CFG_CAPACITY_ON_DEMAND);
    assert_string_equal(c.pools[1].instance_type, "");
    assert_true(c.pools[1].price_per_hour == 0.0);
    assert_int_equal(c.pools[1].max_gpus, 0);
    assert_false(c.pools[1].shared);
    assert_int_equal(c.nqueues, 3);
    assert_string_equal(c.queues[0].name, "default");
    assert_int_equal(c.queues[0].weight, 1);
    assert_string_equal(c.queues[1].name, "research");
    assert_int_equal(c.queues[1].weight, 2);
    assert_int_equal(c.queues[2].weight, 1000);
    assert_int_equal(c.heartbeat_s, 2);
    assert_int_equal(c.node_lost_after_s, 20);
    assert_int_equal(c.spot_cooldown_s, 0);
    assert_int_equal(c.min_runtime_s, 86400);
    assert_int_equal(c.bind_timeout_s, 600);
    assert_int_equal(c.kill_grace_s, 0);
    assert_int_equal(c.default_time_limit_s, 3600);
    assert_int_equal(c.events_max, 1000);

    assert_ptr_equal(cfg_pool_find(&c, "p5-od"), &c.pools[1]);
    assert_null(cfg_pool_find(&c, "p5"));
    assert_null(cfg_pool_find(&c, NULL));
    assert_ptr_equal(cfg_queue_find(&c, "research"), &c.queues[1]);
    assert_null(cfg_queue_find(&c, "Research"));
    assert_int_equal(cfg_level_index(&c, "zone"), 0);
    assert_int_equal(cfg_level_index(&c, "rack"), 2);
    assert_int_equal(cfg_level_index(&c, "node"), 3);
    assert_int_equal(cfg_level_index(&c, "island"), -1);
    assert_int_equal(cfg_level_index(&c, NULL), -1);
}

static void test_examples(void **state)
{
    struct cfg c;
    struct mu_err err;
    char path[512];
    (void)state;

    data_path(path, sizeof(path), "../../config/examples/dev.json");
    if (cfg_load_file(&c, path, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.nlevels, 2);
    assert_string_equal(c.levels[0], "zone");
    assert_string_equal(c.levels[1], "rack");
    assert_int_equal(c.npools, 2);
    assert_string_equal(c.pools[0].name, "g6e-spot");
    assert_int_equal(c.pools[0].capacity, CFG_CAPACITY_SPOT);
    assert_string_equal(c.pools[0].gpu_type, "L40S");
    assert_int_equal(c.pools[0].gpus_per_node, 4);
    assert_string_equal(c.pools[1].name, "g6e-od");
    assert_int_equal(c.pools[1].capacity, CFG_CAPACITY_ON_DEMAND);
    assert_string_equal(c.pools[1].instance_type, "g6e.12xlarge");
    assert_true(c.pools[1].price_per_hour > 10.48 && c.pools[1].price_per_hour < 10.50);
    assert_int_equal(c.nqueues, 2);
    assert_string_equal(c.queues[1].name, "research");
    assert_int_equal(c.queues[1].weight, 2);
    assert_int_equal(c.heartbeat_s, 1);
    assert_int_equal(c.node_lost_after_s, 10);
    assert_string_equal(c.bind, "tcp://127.0.0.1:7070");

    data_path(path, sizeof(path), "../../config/examples/prod.json");
    if (cfg_load_file(&c, path, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.nlevels, 3);
    assert_int_equal(c.npools, 2);
    assert_int_equal(c.pools[0].max_gpus, 64);
    assert_int_equal(c.pools[1].gpus_per_node, 8);
    assert_false(c.queues[0].has_quota);
    assert_int_equal(c.queues[1].quota[CFG_CAPACITY_SPOT], 32);
    assert_int_equal(c.queues[2].lend_limit, 16);
}

static void test_load_file_errors(void **state)
{
    struct cfg c;
    struct mu_err err;
    char path[512];
    char want[600];
    (void)state;

    data_path(path, sizeof(path), "cfg/bad_capacity.json");
    assert_int_equal(cfg_load_file(&c, path, &err), -1);
    assert_int_equal(err.code, MU_E_CONFIG);
    assert_int_equal(mu_snprintf(want, sizeof(want),
                                 "%s: pools[1].capacity: expected \"spot\" or "
                                 "\"on-demand\", got 'spt'",
                                 path),
                     0);
    assert_string_equal(err.msg, want);
    assert_defaults(&c);

    data_path(path, sizeof(path), "cfg/bad_syntax.json");
    assert_int_equal(cfg_load_file(&c, path, &err), -1);
    assert_int_equal(mu_snprintf(want, sizeof(want), "%s: not valid JSON near line 3", path), 0);
    assert_prefix(err.msg, want);

    data_path(path, sizeof(path), "cfg/does-not-exist.json");
    assert_int_equal(cfg_load_file(&c, path, &err), -1);
    assert_int_equal(err.code, MU_E_IO);
    assert_non_null(strstr(err.msg, "does-not-exist.json"));
    assert_defaults(&c);
}

static void test_too_big(void **state)
{
    struct cfg c;
    struct mu_err err;
    size_t len = (size_t)CFG_FILE_MAX + 10;
    char *text = malloc(len);
    (void)state;

    assert_non_null(text);
    memset(text, ' ', len);
    text[0] = '{';
    text[len - 1] = '}';
    assert_int_equal(cfg_parse(&c, text, len, &err), -1);
    assert_int_equal(err.code, MU_E_CONFIG);
    assert_prefix(err.msg, "larger than 1048576 bytes");
    free(text);
}

static void test_not_terminated(void **state)
{
    struct cfg c;
    struct mu_err err;
    /* Only the first 17 bytes count; the rest would be a syntax error. */
    const char text[] = "{\"heartbeat_s\":5}garbage";
    (void)state;

    assert_int_equal(cfg_parse(&c, text, 17, &err), 0);
    assert_int_equal(c.heartbeat_s, 5);
    assert_int_equal(cfg_parse(&c, text, sizeof(text) - 1, &err), -1);
    assert_prefix(err.msg, "not valid JSON near line 1 (byte 17)");
}

static void test_capacity_names(void **state)
{
    enum cfg_capacity cap;
    (void)state;

    assert_string_equal(cfg_capacity_name(CFG_CAPACITY_SPOT), "spot");
    assert_string_equal(cfg_capacity_name(CFG_CAPACITY_ON_DEMAND), "on-demand");
    assert_int_equal(cfg_capacity_parse("on-demand", &cap), 0);
    assert_int_equal(cap, CFG_CAPACITY_ON_DEMAND);
    assert_int_equal(cfg_capacity_parse("spot", &cap), 0);
    assert_int_equal(cap, CFG_CAPACITY_SPOT);
    assert_int_equal(cfg_capacity_parse("Spot", &cap), -1);
    assert_int_equal(cfg_capacity_parse("ondemand", &cap), -1);
    assert_int_equal(cfg_capacity_parse(NULL, &cap), -1);
}

#define POOL(extra) \
    "{\"name\":\"a\",\"capacity\":\"spot\",\"gpu_type\":\"L40S\",\"gpus_per_node\":4" extra "}"

static const struct {
    const char *json;
    const char *prefix;
} bad[] = {
    { "", "expected a JSON object, got an empty document" },
    { "[]", "expected a JSON object at the top, got an empty array" },
    { "{\"heartbeat_s\":1,}", "not valid JSON near line 1 (byte 18)" },
    { "{\n\"redis\":\"a\tb\"}", "not valid JSON near line 2 (byte 12): a raw control character" },
    { "{\"key_prefix\":\"mu\\u0000x\"}", "not valid JSON near line 1 (byte 17): a NUL character" },
    { "{\"heartbeat_s\":0}", "heartbeat_s: expected an integer 1..60, got 0" },
    { "{\"heartbeat_s\":1.5}", "heartbeat_s: expected an integer 1..60, got 1.5" },
    { "{\"heartbeat_s\":\"3\"}", "heartbeat_s: expected an integer 1..60, got '3'" },
    { "{\"heartbeat_s\":true}", "heartbeat_s: expected an integer 1..60, got true" },
    { "{\"heartbeat_s\":5,\"node_lost_after_s\":5}",
      "node_lost_after_s: expected at least 3 x heartbeat_s (15), got 5" },
    { "{\"heartbeat_s\":5,\"node_lost_after_s\":14}",
      "node_lost_after_s: expected at least 3 x heartbeat_s (15), got 14; hint: it is also" },
    { "{\"events_max\":999}", "events_max: expected an integer 1000..100000000, got 999" },
    { "{\"spot_cooldown_s\":-1}", "spot_cooldown_s: expected an integer 0..86400, got -1" },
    { "{\"bind_timeout_s\":null}", "bind_timeout_s: expected an integer 1..600, got null" },
    { "{\"leader_lease_s\":1}", "leader_lease_s: expected an integer 2..60, got 1" },
    { "{\"leader_lease_s\":61}", "leader_lease_s: expected an integer 2..60, got 61" },
    { "{\"dependency_never_met\":\"kill\"}",
      "dependency_never_met: expected \"cancel\" or \"pend\", got 'kill'" },
    { "{\"dependency_never_met\":true}", "dependency_never_met: expected \"cancel\" or \"pend\"" },
    { "{\"keep_finished_s\":-1}", "keep_finished_s: expected an integer 0..31536000, got -1" },
    { "{\"history\":\"/h.db\"}", "history: expected an object such as {\"sqlite\": " },
    { "{\"history\":{\"sqlite\":\"\"}}", "history.sqlite: expected a file path such as " },
    { "{\"history\":{\"sqlite\":3}}", "history.sqlite: expected a file path such as " },
    { "{\"history\":{\"postgres\":\"x\"}}", "history.postgres: unknown key" },
    { "{\"kill_grace_s\":1e9}", "kill_grace_s: expected an integer 0..3600, got 1000000000" },
    { "{\"max_time_limit_s\":-1}", "max_time_limit_s: expected an integer 0..31536000, got -1" },
    { "{\"default_time_limit_s\":7200,\"max_time_limit_s\":3600}",
      "default_time_limit_s: 7200 is over max_time_limit_s (3600)" },
    { "{\"retry_backoff_s\":60,\"retry_backoff_max_s\":30}",
      "retry_backoff_max_s: expected at least retry_backoff_s (60), got 30" },
    { "{\"retry_backoff_s\":100000}", "retry_backoff_s: expected an integer 0..86400, got 100000" },
    { "{\"fair_share_half_life_s\":59}",
      "fair_share_half_life_s: expected an integer 60..31536000, got 59" },
    { "{\"consolidate_after_s\":-1}",
      "consolidate_after_s: expected an integer 0..604800, got -1" },
    { "{\"spot_return_horizon_s\":-1}",
      "spot_return_horizon_s: expected an integer 0..31536000, got -1" },
    { "{\"spot_return_overhead_s\":86401}",
      "spot_return_overhead_s: expected an integer 0..86400, got 86401" },
    { "{\"heartbeat\":1}", "heartbeat: unknown key; did you mean 'heartbeat_s'?" },
    { "{\"colour\":1}", "colour: unknown key" },
    { "{\"heartbeat_s\":1,\"heartbeat_s\":2}", "heartbeat_s: duplicate key" },
    /* The "redis" key takes what --redis takes: one parser (mu_redis_url_parse), its messages. */
    { "{\"redis\":\"localhost:6379\"}",
      "redis: redis url 'localhost:6379': expected redis://[user:pass@]host[:port][/db] or "
      "redis+sentinel://" },
    { "{\"redis\":5}", "redis: expected a URL such as \"redis://127.0.0.1:6379\" or "
                       "\"redis+sentinel://HOST[:PORT][,...]/MASTER\", got 5" },
    { "{\"redis\":\"redis://\"}", "redis: redis url 'redis://': missing host" },
    { "{\"redis\":\"redis://h:70000\"}", "redis: redis url 'redis://h:70000': port: " },
    { "{\"redis\":\"redis+sentinel://s1\"}",
      "redis: redis url 'redis+sentinel://s1': expected redis+sentinel://" },
    { "{\"redis\":\"redis+sentinel://s1,/m\"}",
      "redis: redis url 'redis+sentinel://s1,/m': missing host" },
    { "{\"bind\":\"udp://x:1\"}", "bind: expected a ZeroMQ endpoint" },
    { "{\"metrics\":\"9100\"}", "metrics: expected \"ADDR:PORT\"" },
    { "{\"metrics\":\"x:70000\"}", "metrics: expected \"ADDR:PORT\"" },
    { "{\"key_prefix\":\"a b\"}", "key_prefix: expected a name of 1..63 characters" },
    { "{\"topology_levels\":\"zone\"}", "topology_levels: expected an array of level names" },
    { "{\"topology_levels\":[\"zone\",\"node\"]}",
      "topology_levels[1]: 'node' is implicit and cannot be listed" },
    { "{\"topology_levels\":[\"zone\",\"rack\",\"zone\"]}",
      "topology_levels[2]: duplicate level 'zone'" },
    { "{\"topology_levels\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\"]}",
      "topology_levels: expected at most 6 levels, got 7" },
    { "{\"topology_levels\":[\"\"]}", "topology_levels[0]: expected a name of 1..31 characters" },
    { "{\"pools\":{}}", "pools: expected an array of pool objects, got an object" },
    { "{\"pools\":[1]}", "pools[0]: expected an object, got 1" },
    { "{\"pools\":[" POOL("") "," POOL("") "]}", "pools[1].name: duplicate pool name 'a'" },
    { "{\"pools\":[{\"name\":\"a\",\"capacity\":\"spot\",\"gpu_type\":\"L40S\"}]}",
      "pools[0]: missing required key 'gpus_per_node'" },
    { "{\"pools\":[{\"name\":\"a\",\"gpu_type\":\"L40S\",\"gpus_per_node\":4}]}",
      "pools[0]: missing required key 'capacity'" },
    { "{\"pools\":[" POOL(",\"capacity\":\"spot\"") "]}", "pools[0].capacity: duplicate key" },
    { "{\"pools\":[" POOL(",\"gpus\":8") "]}", "pools[0].gpus: unknown key" },
    { "{\"pools\":[" POOL(",\"max_gpu\":8") "]}",
      "pools[0].max_gpu: unknown key; did you mean 'max_gpus'?" },
    { "{\"pools\":[{\"name\":\"a\",\"capacity\":\"spt\"}]}",
      "pools[0].capacity: expected \"spot\" or \"on-demand\", got 'spt'" },
    { "{\"pools\":[{\"name\":\"a\",\"capacity\":\"spot\",\"gpus_per_node\":0}]}",
      "pools[0].gpus_per_node: expected an integer 1..64, got 0" },
    { "{\"pools\":[" POOL(",\"price_per_hour\":-1") "]}",
      "pools[0].price_per_hour: expected a price per node-hour 0..1000000, got -1" },
    { "{\"pools\":[" POOL(",\"max_gpus\":-8") "]}",
      "pools[0].max_gpus: expected an integer 0..1048576, got -8" },
    { "{\"pools\":[" POOL(",\"shared\":1") "]}", "pools[0].shared: expected true or false, got 1" },
    { "{\"pools\":[{\"name\":\"a b\"}]}", "pools[0].name: expected a name of 1..63 characters" },
    { "{\"queues\":[]}", "queues: expected at least one queue, got an empty array" },
    { "{\"queues\":[{\"weight\":2}]}", "queues[0]: missing required key 'name'" },
    { "{\"queues\":[{\"name\":\"a\"},{\"name\":\"a\"}]}",
      "queues[1].name: duplicate queue name 'a'" },
    { "{\"queues\":[{\"name\":\"a\",\"weight\":0}]}",
      "queues[0].weight: expected an integer 1..1000, got 0" },
    { "{\"queues\":[{\"name\":\"a\",\"prio\":1}]}", "queues[0].prio: unknown key" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":{\"spot\":-8}}]}",
      "queues[0].quota.spot: expected an integer 0..1000000, got -8" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":{\"spot\":1e12}}]}",
      "queues[0].quota.spot: expected an integer 0..1000000" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":{\"p5-spot\":8}}]}",
      "queues[0].quota: unknown key 'p5-spot': a quota is set per capacity type" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":64}]}", "queues[0].quota: expected an object" },
    { "{\"queues\":[{\"name\":\"a\",\"cohort\":\"ml\"}]}",
      "queues[0].cohort: queue 'a' has no quota" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":{\"spot\":8},\"borrow_limit\":8}]}",
      "queues[0].borrow_limit: needs a 'cohort'" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":{\"spot\":8},\"lend_limit\":-1,"
      "\"cohort\":\"ml\"}]}",
      "queues[0].lend_limit: expected an integer 0..1000000, got -1" },
    { "{\"queues\":[{\"name\":\"a\",\"quota\":{\"spot\":8},\"cohort\":\"ml\"},"
      "{\"name\":\"b\",\"quota\":{\"spot\":8},\"cohort\":\"ml\",\"borrow_limit\":9}]}",
      "queues[1].borrow_limit: 9 GPUs is more than the rest of cohort 'ml' can lend (8)" },
};

/* What a reload may apply: only queues; the first other key that differs is named. */
static void test_diff_beyond_queues(void **state)
{
    struct cfg a;
    struct cfg b;
    struct mu_err err;
    static const char one[] = "{\"queues\":[{\"name\":\"x\",\"quota\":{\"spot\":8}}]}";
    static const char two[] = "{\"queues\":[{\"name\":\"y\"},{\"name\":\"z\"}]}";
    static const char beat[] = "{\"heartbeat_s\":2}";
    static const char pool[] = "{\"pools\":[" POOL("") "]}";
    static const char lease[] = "{\"leader_lease_s\":10}";
    static const char hist[] =
        "{\"keep_finished_s\":60,\"history\":{\"sqlite\":\"/var/lib/muster/history.db\"}}";
    (void)state;
    assert_int_equal(cfg_parse(&a, one, strlen(one), &err), 0);
    assert_int_equal(cfg_parse(&b, two, strlen(two), &err), 0);
    assert_null(cfg_diff_beyond_queues(&a, &b));
    assert_int_equal(cfg_parse(&b, beat, strlen(beat), &err), 0);
    assert_string_equal(cfg_diff_beyond_queues(&a, &b), "heartbeat_s");
    assert_int_equal(cfg_parse(&b, pool, strlen(pool), &err), 0);
    assert_string_equal(cfg_diff_beyond_queues(&a, &b), "pools");
    /* The lease is the standbys' promise too: a reload does not change it under them. */
    assert_int_equal(cfg_parse(&b, lease, strlen(lease), &err), 0);
    assert_string_equal(cfg_diff_beyond_queues(&a, &b), "leader_lease_s");
    /* Jobs already judged keep the rule they were judged by until a restart. */
    {
        static const char pend[] = "{\"dependency_never_met\":\"pend\"}";
        assert_int_equal(cfg_parse(&b, pend, strlen(pend), &err), 0);
        assert_int_equal(b.never_met, CFG_NEVER_MET_PEND);
        assert_string_equal(cfg_diff_beyond_queues(&a, &b), "dependency_never_met");
    }
    /* The history file is opened once, when musterd starts leading. */
    assert_int_equal(cfg_parse(&b, hist, strlen(hist), &err), 0);
    assert_int_equal(b.keep_finished_s, 60);
    assert_string_equal(b.history_sqlite, "/var/lib/muster/history.db");
    assert_string_equal(cfg_diff_beyond_queues(&a, &b), "history");
}

/* cfg_keys, the one table of top-level keys: names unique and found by cfg_key_index, each
 * integer default within its bounds and set by cfg_init_defaults, a reload may change only
 * queues and access. */
static void test_key_table(void **state)
{
    struct cfg c;
    (void)state;
    cfg_init_defaults(&c);
    for (int i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        assert_int_equal(cfg_key_index(k->name), i);
        assert_int_equal(k->reload,
                         strcmp(k->name, "queues") == 0 || strcmp(k->name, "access") == 0);
        if (k->type == CFG_KEY_INT) {
            assert_true(k->min <= k->def && k->def <= k->max);
            assert_int_equal(*(const int *)(const void *)((const char *)&c + k->offset), k->def);
        } else if (k->size > 0) {
            assert_string_equal((const char *)&c + k->offset, k->def_text);
        } else {
            assert_non_null(k->def_text);
        }
    }
    assert_int_equal(cfg_key_index("nope"), -1);
    assert_int_equal(c.heartbeat_s, 1);
    assert_int_equal(c.fair_share_half_life_s, 7 * 86400);
    assert_string_equal(c.bind, "tcp://127.0.0.1:7070");
}

/* Quotas, cohorts and limits as the config gives them; a queue without quota is not limited. */
static void test_quotas(void **state)
{
    struct cfg c;
    struct mu_err err;
    static const char json[] =
        "{\"queues\":[{\"name\":\"research\",\"quota\":{\"spot\":64,\"on-demand\":16},"
        "\"cohort\":\"ml\",\"borrow_limit\":32},"
        "{\"name\":\"prod\",\"quota\":{\"spot\":64},\"cohort\":\"ml\",\"lend_limit\":32},"
        "{\"name\":\"batch\"}]}";
    (void)state;
    assert_int_equal(cfg_parse(&c, json, strlen(json), &err), 0);
    assert_true(c.queues[0].has_quota);
    assert_int_equal(c.queues[0].quota[CFG_CAPACITY_SPOT], 64);
    assert_int_equal(c.queues[0].quota[CFG_CAPACITY_ON_DEMAND], 16);
    assert_string_equal(c.queues[0].cohort, "ml");
    assert_int_equal(c.queues[0].borrow_limit, 32);
    assert_int_equal(c.queues[0].lend_limit, -1);
    assert_int_equal(c.queues[1].quota[CFG_CAPACITY_ON_DEMAND], 0);
    assert_int_equal(c.queues[1].lend_limit, 32);
    assert_int_equal(c.queues[1].borrow_limit, -1);
    assert_false(c.queues[2].has_quota);
    assert_string_equal(c.queues[2].cohort, "");
}

/* Every URL --redis and MUSTER_REDIS_URL take, the config's "redis" takes (issue #40): the
 * Sentinel form used to be refused here though the flag took it. */
static void test_redis_urls(void **state)
{
    static const char *const good[] = {
        "redis://127.0.0.1",
        "redis://alice:s3cret@db.example:6380/3",
        "redis://:pw@h",
        "redis+sentinel://10.0.0.1:26380,10.0.0.2,s3:5000/mymaster",
        "redis+sentinel://bob:pw@s1/prod/4",
    };
    struct cfg c;
    struct mu_err err;
    char json[512];
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(good); i++) {
        (void)mu_snprintf(json, sizeof(json), "{\"redis\":\"%s\"}", good[i]);
        if (cfg_parse(&c, json, strlen(json), &err) != 0)
            fail_msg("'%s' refused: %s", good[i], err.msg);
        assert_string_equal(c.redis, good[i]);
    }
}

/* The "access" section is access_parse's (issue #46): cfg_parse takes any object there and
 * keeps every other setting as it would without it. */
static void test_access_key(void **state)
{
    static const char json[] = "{\"heartbeat_s\":2,\"access\":{\"identity\":\"redis-acl\","
                               "\"users\":{\"alice\":{}},\"whatever\":1}}";
    struct cfg c;
    struct mu_err err;
    (void)state;

    if (cfg_parse(&c, json, strlen(json), &err) != 0)
        fail_msg("refused: %s", err.msg);
    assert_int_equal(c.heartbeat_s, 2);
    assert_int_equal(c.nqueues, 1);
}

static void test_bad_table(void **state)
{
    struct cfg c;
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        mu_err_clear(&err);
        if (cfg_parse(&c, bad[i].json, strlen(bad[i].json), &err) != -1)
            fail_msg("case %zu accepted: %s", i, bad[i].json);
        assert_int_equal(err.code, MU_E_CONFIG);
        assert_prefix(err.msg, bad[i].prefix);
        /* A failed parse leaves the defaults. */
        assert_defaults(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),       cmocka_unit_test(test_time_limits),
        cmocka_unit_test(test_quotas),         cmocka_unit_test(test_diff_beyond_queues),
        cmocka_unit_test(test_key_table),      cmocka_unit_test(test_full),
        cmocka_unit_test(test_examples),       cmocka_unit_test(test_load_file_errors),
        cmocka_unit_test(test_too_big),        cmocka_unit_test(test_not_terminated),
        cmocka_unit_test(test_capacity_names), cmocka_unit_test(test_redis_urls),
        cmocka_unit_test(test_access_key),     cmocka_unit_test(test_bad_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

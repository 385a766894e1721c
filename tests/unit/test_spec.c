/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the job spec (docs/design.md §3): queue_spec_parse defaults and fields, the caps
 * on hostile input, a bad-input table whose messages must name the key, queue_spec_check against
 * small clusters, and the job state names.
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

#include "common/mu.h"
#include "config/cfg.h"
#include "queue/queue.h"

#include "common/mu_banned.h"

static void assert_prefix(const char *msg, const char *prefix)
{
    if (strncmp(msg, prefix, strlen(prefix)) != 0) {
        print_error("message: \"%s\"\nexpected prefix: \"%s\"\n", msg, prefix);
        fail();
    }
}

static bool all_zero(const struct queue_spec *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < sizeof(*s); i++) {
        if (p[i])
            return false;
    }
    return true;
}

static int parse(const char *json, struct queue_spec *s, struct mu_err *err)
{
    return queue_spec_parse(json, strlen(json), s, err);
}

/* Parses or fails the test with the message. */
static void parse_ok(const char *json, struct queue_spec *s)
{
    struct mu_err err;
    if (parse(json, s, &err) != 0)
        fail_msg("rejected: %s\nspec: %.200s", err.msg, json);
}

static void parse_bad(const char *json, size_t len, const char *prefix)
{
    struct queue_spec s;
    struct mu_err err;

    mu_err_clear(&err);
    memset(&s, 0x5a, sizeof(s));
    if (queue_spec_parse(json, len, &s, &err) != -1) {
        queue_spec_release(&s);
        fail_msg("accepted: %.200s", json);
    }
    assert_int_equal(err.code, MU_E_SPEC);
    assert_prefix(err.msg, prefix);
    assert_true(all_zero(&s));
}

static void test_defaults(void **state)
{
    struct queue_spec s;
    (void)state;

    parse_ok("{\"command\":[\"true\"]}", &s);
    assert_string_equal(s.name, "");
    assert_string_equal(s.queue, "default");
    assert_int_equal(s.priority, 0);
    assert_int_equal(s.tasks, 1);
    assert_int_equal(s.gpus_per_task, 1);
    assert_int_equal(s.cpus_per_task, 0);
    assert_int_equal(s.memory_mb_per_task, 0);
    assert_string_equal(s.gpu_type, "");
    assert_int_equal(s.ncapacity, 2);
    assert_int_equal(s.capacity[0], CFG_CAPACITY_SPOT);
    assert_int_equal(s.capacity[1], CFG_CAPACITY_ON_DEMAND);
    assert_string_equal(s.topo_required, "");
    assert_string_equal(s.topo_preferred, "");
    assert_int_equal(s.argc, 1);
    assert_string_equal(s.argv[0], "true");
    assert_null(s.argv[1]);
    assert_int_equal(s.nenv, 0);
    assert_null(s.env);
    assert_null(s.workdir);
    assert_false(s.checkpointable);
    assert_int_equal(s.checkpoint_signal, SIGUSR1);
    assert_int_equal(s.checkpoint_grace_s, 60);
    assert_true(s.preemptible);
    assert_int_equal(s.time_limit_s, 0);
    assert_int_equal(s.max_retries, 3);
    assert_string_equal(s.idempotency_key, "");
    assert_string_equal(s.user, "");
    queue_spec_release(&s);
    assert_true(all_zero(&s));
    queue_spec_release(&s); /* twice is harmless */
    queue_spec_release(NULL);
}

static const char full_spec[] =
    "{\n"
    "  \"name\": \"llama-ft\",\n"
    "  \"queue\": \"research\",\n"
    "  \"priority\": 100,\n"
    "  \"tasks\": 4,\n"
    "  \"gpus_per_task\": 8,\n"
    "  \"cpus_per_task\": 16,\n"
    "  \"memory_mb_per_task\": 65536,\n"
    "  \"gpu_type\": \"H100\",\n"
    "  \"capacity\": [\"on-demand\", \"spot\"],\n"
    "  \"topology\": {\"required\": \"zone\", \"preferred\": \"rack\", \"relax_after_s\": 300},\n"
    "  \"command\": [\"python\", \"train.py\", \"--epochs\", \"3\"],\n"
    "  \"env\": {\"WANDB_MODE\": \"offline\", \"_X1\": \"a=b\", \"EMPTY\": \"\"},\n"
    "  \"workdir\": \"/data/run1\",\n"
    "  \"checkpoint\": {\"signal\": \"SIGUSR2\", \"grace_s\": 90},\n"
    "  \"preemptible\": false,\n"
    "  \"time_limit_s\": 86400,\n"
    "  \"max_retries\": 0,\n"
    "  \"idempotency_key\": \"pipeline-42 step/3\",\n"
    "  \"user\": \"alice\"\n"
    "}\n";

static void test_full(void **state)
{
    struct queue_spec s;
    (void)state;

    parse_ok(full_spec, &s);
    assert_string_equal(s.name, "llama-ft");
    assert_string_equal(s.queue, "research");
    assert_int_equal(s.priority, 100);
    assert_int_equal(s.tasks, 4);
    assert_int_equal(s.gpus_per_task, 8);
    assert_int_equal(s.cpus_per_task, 16);
    assert_int_equal(s.memory_mb_per_task, 65536);
    assert_string_equal(s.gpu_type, "H100");
    assert_int_equal(s.ncapacity, 2);
    assert_int_equal(s.capacity[0], CFG_CAPACITY_ON_DEMAND);
    assert_int_equal(s.capacity[1], CFG_CAPACITY_SPOT);
    assert_string_equal(s.topo_required, "zone");
    assert_string_equal(s.topo_preferred, "rack");
    assert_int_equal(s.topo_relax_after_s, 300);
    assert_int_equal(s.argc, 4);
    assert_string_equal(s.argv[0], "python");
    assert_string_equal(s.argv[3], "3");
    assert_null(s.argv[4]);
    assert_int_equal(s.nenv, 3);
    assert_string_equal(s.env[0], "WANDB_MODE=offline");
    assert_string_equal(s.env[1], "_X1=a=b");
    assert_string_equal(s.env[2], "EMPTY=");
    assert_null(s.env[3]);
    assert_string_equal(s.workdir, "/data/run1");
    assert_true(s.checkpointable);
    assert_int_equal(s.checkpoint_signal, SIGUSR2);
    assert_int_equal(s.checkpoint_grace_s, 90);
    assert_false(s.preemptible);
    assert_int_equal(s.time_limit_s, 86400);
    assert_int_equal(s.max_retries, 0);
    assert_string_equal(s.idempotency_key, "pipeline-42 step/3");
    assert_string_equal(s.user, "alice");
    queue_spec_release(&s);
    assert_true(all_zero(&s));
}

static void test_variants(void **state)
{
    struct queue_spec s;
    struct mu_err err;
    (void)state;

    /* A string command runs under sh -c. */
    parse_ok("{\"command\":\"echo $HOSTNAME && sleep 1\"}", &s);
    assert_int_equal(s.argc, 3);
    assert_string_equal(s.argv[0], "/bin/sh");
    assert_string_equal(s.argv[1], "-c");
    assert_string_equal(s.argv[2], "echo $HOSTNAME && sleep 1");
    assert_null(s.argv[3]);
    queue_spec_release(&s);

    /* An empty checkpoint block: checkpointable with the defaults; short signal names. */
    parse_ok("{\"command\":[\"x\"],\"checkpoint\":{}}", &s);
    assert_true(s.checkpointable);
    assert_int_equal(s.checkpoint_signal, SIGUSR1);
    assert_int_equal(s.checkpoint_grace_s, 60);
    queue_spec_release(&s);
    parse_ok("{\"command\":[\"x\"],\"checkpoint\":{\"signal\":\"TERM\",\"grace_s\":0}}", &s);
    assert_int_equal(s.checkpoint_signal, SIGTERM);
    assert_int_equal(s.checkpoint_grace_s, 0);
    queue_spec_release(&s);

    /* One capacity type; "" GPU type means any; integral floats; bounds inclusive. */
    parse_ok("{\"command\":[\"x\"],\"capacity\":[\"on-demand\"],\"gpu_type\":\"\","
             "\"tasks\":4096,\"gpus_per_task\":0,\"priority\":-1000000,\"max_retries\":1e2,"
             "\"time_limit_s\":31536000,\"topology\":{\"required\":\"node\"}}",
             &s);
    assert_int_equal(s.ncapacity, 1);
    assert_int_equal(s.capacity[0], CFG_CAPACITY_ON_DEMAND);
    assert_string_equal(s.gpu_type, "");
    assert_int_equal(s.tasks, 4096);
    assert_int_equal(s.gpus_per_task, 0);
    assert_int_equal(s.priority, -1000000);
    assert_int_equal(s.max_retries, 100);
    assert_string_equal(s.topo_required, "node");
    queue_spec_release(&s);

    /* Shared GPUs (issue #17): a share of one GPU, 1..1000. */
    parse_ok("{\"command\":[\"x\"],\"gpu_milli\":250}", &s);
    assert_int_equal(s.gpu_milli, 250);
    assert_int_equal(s.gpus_per_task, 1);
    queue_spec_release(&s);

    /* MIG slices (issue #17): a profile, gpus_per_task counting its slices. */
    parse_ok("{\"command\":[\"x\"],\"gpu_slice\":\"1c.3g.71gb\",\"gpus_per_task\":2}", &s);
    assert_string_equal(s.gpu_slice, "1c.3g.71gb");
    assert_int_equal(s.gpus_per_task, 2);
    queue_spec_release(&s);
    parse_ok("{\"command\":[\"x\"],\"gpu_slice\":\"1g.10gb+me\"}", &s);
    assert_string_equal(s.gpu_slice, "1g.10gb+me");
    queue_spec_release(&s);

    /* An escaped backslash before "u0000" is text, not a NUL. */
    parse_ok("{\"command\":[\"printf\",\"\\\\u0000\"]}", &s);
    assert_string_equal(s.argv[1], "\\u0000");
    queue_spec_release(&s);

    /* Non-ASCII text passes through. */
    parse_ok("{\"name\":\"r\\u00e9sum\\u00e9\",\"command\":[\"x\"]}", &s);
    assert_string_equal(s.name, "r\xc3\xa9sum\xc3\xa9");
    queue_spec_release(&s);

    /* Only len bytes count: the caller's text need not be terminated. */
    const char text[] = "{\"command\":[\"x\"]}trailing";
    assert_int_equal(queue_spec_parse(text, 17, &s, &err), 0);
    assert_string_equal(s.argv[0], "x");
    queue_spec_release(&s);
}

/* Builds {"command":[ "a", "a", ... n args of arg_len bytes ]} on the heap. */
static char *make_command(int n, size_t arg_len)
{
    struct mu_buf b;
    struct mu_err err;
    char *arg = malloc(arg_len + 1);

    assert_non_null(arg);
    memset(arg, 'a', arg_len);
    arg[arg_len] = '\0';
    mu_buf_init(&b, 0);
    assert_int_equal(mu_buf_append(&b, "{\"command\":[", 12, &err), 0);
    for (int i = 0; i < n; i++) {
        assert_int_equal(mu_buf_appendf(&b, &err, "%s\"%s\"", i ? "," : "", arg), 0);
    }
    assert_int_equal(mu_buf_append(&b, "]}", 2, &err), 0);
    free(arg);
    return mu_buf_take(&b);
}

static char *make_env(int n)
{
    struct mu_buf b;
    struct mu_err err;

    mu_buf_init(&b, 0);
    assert_int_equal(mu_buf_append(&b, "{\"command\":[\"x\"],\"env\":{", 24, &err), 0);
    for (int i = 0; i < n; i++) {
        assert_int_equal(mu_buf_appendf(&b, &err, "%s\"V%d\":\"%d\"", i ? "," : "", i, i), 0);
    }
    assert_int_equal(mu_buf_append(&b, "}}", 2, &err), 0);
    return mu_buf_take(&b);
}

static void test_caps(void **state)
{
    struct queue_spec s;
    char *json;
    (void)state;

    json = make_command(QUEUE_MAX_ARGS, 1);
    parse_ok(json, &s);
    assert_int_equal(s.argc, QUEUE_MAX_ARGS);
    assert_null(s.argv[QUEUE_MAX_ARGS]);
    queue_spec_release(&s);
    free(json);

    json = make_command(QUEUE_MAX_ARGS + 1, 1);
    parse_bad(json, strlen(json), "command: more than 1024 arguments");
    free(json);

    json = make_command(2, QUEUE_MAX_STR);
    parse_ok(json, &s);
    assert_int_equal(strlen(s.argv[1]), QUEUE_MAX_STR);
    queue_spec_release(&s);
    free(json);

    json = make_command(4, QUEUE_MAX_STR + 1);
    parse_bad(json, strlen(json), "command[0]: string longer than 65536 bytes");
    free(json);

    json = make_env(QUEUE_MAX_ENV);
    parse_ok(json, &s);
    assert_int_equal(s.nenv, QUEUE_MAX_ENV);
    assert_string_equal(s.env[1023], "V1023=1023");
    assert_null(s.env[QUEUE_MAX_ENV]);
    queue_spec_release(&s);
    free(json);

    json = make_env(QUEUE_MAX_ENV + 1);
    parse_bad(json, strlen(json), "env: more than 1024 entries");
    free(json);

    /* Larger than 1 MiB, even if it is white space. */
    size_t big = (size_t)QUEUE_SPEC_MAX_BYTES + 1;
    json = malloc(big);
    assert_non_null(json);
    memset(json, ' ', big);
    parse_bad(json, big, "spec: larger than 1048576 bytes");
    free(json);

    /* Deep nesting is refused before cJSON recurses into it. */
    char deep[256] = "{\"command\":[";
    size_t n = strlen(deep);
    for (int i = 0; i < 40; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    parse_bad(deep, strlen(deep), "command[0][0][0][0][0][0][0]: nested deeper than 8 levels");
    char deep_env[] = "{\"env\":{\"A\":{\"B\":{\"C\":{\"D\":{\"E\":{\"F\":{\"G\":{}}}}}}}}}";
    parse_bad(deep_env, strlen(deep_env), "env.A.B.C.D.E.F.G: nested deeper than 8 levels");
}

static const struct {
    const char *json;
    const char *prefix;
} bad[] = {
    { "", "spec: expected a JSON object, got an empty document" },
    { "[1,2]", "spec: expected a JSON object, got an array" },
    { "\"run\"", "spec: expected a JSON object, got 'run'" },
    { "{\"command\":[\"x\"],}", "spec: not valid JSON near byte" },
    { "{\"command\":[\"x\"]} {}", "spec: not valid JSON near byte" },
    { "{\"command\":[\"a\tb\"]}", "spec: not valid JSON near byte 14 (raw control character" },
    { "{}", "spec: missing required key 'command'" },
    { "{\"command\":[\"x\"],\"gpu\":\"H100\"}", "spec: unknown key 'gpu'" },
    { "{\"command\":[\"x\"],\"Tasks\":2}", "spec: unknown key 'Tasks'; did you mean 'tasks'?" },
    { "{\"command\":[\"x\"],\"tasks\":2,\"tasks\":3}", "spec: duplicate key 'tasks'" },
    { "{\"command\":[]}", "command: expected a non-empty array of strings or a non-empty string, "
                          "got an empty array" },
    { "{\"command\":\"\"}", "command: expected a non-empty array of strings" },
    { "{\"command\":{}}", "command: expected a non-empty array of strings" },
    { "{\"command\":[\"x\",3]}", "command[1]: expected a string, got 3" },
    { "{\"command\":[\"\"]}", "command[0]: expected a program name, got ''" },
    { "{\"command\":[\"x\",\"a\\u0000b\"]}",
      "command[1]: string contains a NUL character (\\u0000)" },
    { "{\"command\":[\"x\"],\"env\":{\"A\":\"\\u0000\"}}",
      "env.A: string contains a NUL character (\\u0000)" },
    { "{\"command\":[\"x\"],\"env\":{\"A\\u0000B\":\"x\"}}",
      "env: a key contains a NUL character (\\u0000)" },
    { "{\"na\\u0000me\":\"x\",\"command\":[\"x\"]}",
      "spec: a key contains a NUL character (\\u0000)" },
    { "{\"command\":[\"x\"],\"tasks\":0}", "tasks: expected an integer 1..4096, got 0" },
    { "{\"command\":[\"x\"],\"tasks\":-2}", "tasks: expected an integer 1..4096, got -2" },
    { "{\"command\":[\"x\"],\"tasks\":1.5}", "tasks: expected an integer 1..4096, got 1.5" },
    { "{\"command\":[\"x\"],\"tasks\":\"3\"}", "tasks: expected an integer 1..4096, got '3'" },
    { "{\"command\":[\"x\"],\"tasks\":true}", "tasks: expected an integer 1..4096, got true" },
    { "{\"command\":[\"x\"],\"tasks\":1e999}", "tasks: expected an integer 1..4096, got inf" },
    { "{\"command\":[\"x\"],\"gpus_per_task\":65}",
      "gpus_per_task: expected an integer 0..64, got 65" },
    { "{\"command\":[\"x\"],\"priority\":1000001}",
      "priority: expected an integer -1000000..1000000, got 1000001" },
    { "{\"command\":[\"x\"],\"cpus_per_task\":-1}",
      "cpus_per_task: expected an integer 0..4096, got -1" },
    { "{\"command\":[\"x\"],\"memory_mb_per_task\":null}",
      "memory_mb_per_task: expected an integer 0..16777216, got null" },
    { "{\"command\":[\"x\"],\"time_limit_s\":0}",
      "time_limit_s: expected an integer 1..31536000, got 0" },
    { "{\"command\":[\"x\"],\"max_retries\":101}",
      "max_retries: expected an integer 0..100, got 101" },
    { "{\"command\":[\"x\"],\"preemptible\":1}", "preemptible: expected true or false, got 1" },
    { "{\"command\":[\"x\"],\"queue\":\"my queue\"}",
      "queue: expected a name of 1..63 characters" },
    { "{\"command\":[\"x\"],\"queue\":\"\"}", "queue: expected a name of 1..63 characters" },
    { "{\"command\":[\"x\"],\"gpu_type\":7}", "gpu_type: expected a name of 1..63 characters" },
    { "{\"command\":[\"x\"],\"gpu_slice\":\"3g\"}",
      "gpu_slice: expected a MIG profile such as \"3g.40gb\" or \"1g.10gb\", got '3g'" },
    { "{\"command\":[\"x\"],\"gpu_slice\":3}", "gpu_slice: expected a MIG profile" },
    { "{\"command\":[\"x\"],\"gpu_slice\":\"1g.10gb\",\"gpus_per_task\":0}",
      "gpus_per_task: 0 with gpu_slice '1g.10gb'; it counts the slices each task gets" },
    /* Shared (time-sliced) GPUs: a share of one GPU per task. */
    { "{\"command\":[\"x\"],\"gpu_milli\":0}", "gpu_milli: expected an integer 1..1000, got 0" },
    { "{\"command\":[\"x\"],\"gpu_milli\":1001}",
      "gpu_milli: expected an integer 1..1000, got 1001" },
    { "{\"command\":[\"x\"],\"gpu_milli\":500,\"gpus_per_task\":2}",
      "gpus_per_task: 2 with gpu_milli; a task gets a share of one GPU (gpus_per_task 1)" },
    { "{\"command\":[\"x\"],\"gpu_milli\":500,\"gpu_slice\":\"1g.10gb\"}",
      "gpu_milli: not with gpu_slice" },
    { "{\"command\":[\"x\"],\"user\":\"bob smith\"}", "user: expected a name of 1..63 characters" },
    { "{\"command\":[\"x\"],\"name\":\"\"}", "name: expected 1..127 printable characters, got ''" },
    { "{\"command\":[\"x\"],\"name\":\"a\\nb\"}", "name: expected 1..127 printable characters" },
    { "{\"command\":[\"x\"],\"capacity\":\"spot\"}", "capacity: expected an array of \"spot\"" },
    { "{\"command\":[\"x\"],\"capacity\":[]}", "capacity: expected an array of \"spot\"" },
    { "{\"command\":[\"x\"],\"capacity\":[\"spt\"]}",
      "capacity[0]: expected \"spot\" or \"on-demand\", got 'spt'" },
    { "{\"command\":[\"x\"],\"capacity\":[\"spot\",\"spot\"]}", "capacity[1]: duplicate 'spot'" },
    { "{\"command\":[\"x\"],\"capacity\":[\"spot\",\"on-demand\",\"spot\"]}",
      "capacity: expected 1 or 2 entries, got 3" },
    { "{\"command\":[\"x\"],\"topology\":\"zone\"}", "topology: expected an object" },
    { "{\"command\":[\"x\"],\"topology\":{\"require\":\"zone\"}}",
      "topology: unknown key 'require'; did you mean 'required'?" },
    { "{\"command\":[\"x\"],\"topology\":{\"required\":\"\"}}",
      "topology.required: expected a name of 1..31 characters" },
    { "{\"command\":[\"x\"],\"topology\":{\"preferred\":[\"rack\"]}}",
      "topology.preferred: expected a name of 1..31 characters" },
    { "{\"command\":[\"x\"],\"topology\":{\"preferred\":\"rack\",\"relax_after_s\":60}}",
      "topology.relax_after_s: needs topology.required, the level it relaxes" },
    { "{\"command\":[\"x\"],\"topology\":{\"required\":\"rack\",\"relax_after_s\":0}}",
      "topology.relax_after_s: expected an integer 1..604800, got 0" },
    { "{\"command\":[\"x\"],\"topology\":{\"required\":\"rack\",\"relax_after_s\":\"5m\"}}",
      "topology.relax_after_s: expected an integer 1..604800" },
    { "{\"command\":[\"x\"],\"env\":[]}", "env: expected an object of string values" },
    { "{\"command\":[\"x\"],\"env\":{\"1X\":\"a\"}}",
      "env: invalid name '1X'; expected [A-Za-z_][A-Za-z0-9_]*" },
    { "{\"command\":[\"x\"],\"env\":{\"A-B\":\"a\"}}", "env: invalid name 'A-B'" },
    { "{\"command\":[\"x\"],\"env\":{\"N\":4}}", "env.N: expected a string, got 4" },
    { "{\"command\":[\"x\"],\"env\":{\"A\":\"1\",\"A\":\"2\"}}", "env: duplicate name 'A'" },
    { "{\"command\":[\"x\"],\"env\":{\"MUSTER_JOB_ID\":\"1\"}}",
      "env.MUSTER_JOB_ID: names starting with MUSTER_ are set by muster" },
    { "{\"command\":[\"x\"],\"workdir\":\"data/run1\"}",
      "workdir: expected an absolute path, got 'data/run1'" },
    { "{\"command\":[\"x\"],\"checkpoint\":true}", "checkpoint: expected an object" },
    { "{\"command\":[\"x\"],\"checkpoint\":{\"signal\":\"SIGFOO\"}}",
      "checkpoint.signal: expected a signal name such as \"SIGUSR1\", got 'SIGFOO'" },
    { "{\"command\":[\"x\"],\"checkpoint\":{\"signal\":10}}",
      "checkpoint.signal: expected a signal name such as \"SIGUSR1\", got 10" },
    { "{\"command\":[\"x\"],\"checkpoint\":{\"signal\":\"KILL\"}}",
      "checkpoint.signal: SIGKILL cannot be caught" },
    { "{\"command\":[\"x\"],\"checkpoint\":{\"grace_s\":3601}}",
      "checkpoint.grace_s: expected an integer 0..3600, got 3601" },
    { "{\"command\":[\"x\"],\"checkpoint\":{\"grace\":1}}",
      "checkpoint: unknown key 'grace'; did you mean 'grace_s'?" },
    { "{\"command\":[\"x\"],\"idempotency_key\":\"\"}",
      "idempotency_key: expected 1..255 printable ASCII characters, got ''" },
    { "{\"command\":[\"x\"],\"idempotency_key\":\"caf\\u00e9\"}",
      "idempotency_key: expected 1..255 printable ASCII characters" },
    { "{\"command\":[\"x\"],\"after\":\"1-0\"}",
      "after: expected an array of job ids or {\"job\": ID, \"when\": \"ok\"} objects, got '1-0'" },
    { "{\"command\":[\"x\"],\"after\":[\"step1\"]}",
      "after[0]: expected a job id such as \"1732270000123-0\", got 'step1'" },
    { "{\"command\":[\"x\"],\"after\":[\"1-0\",7]}", "after[1]: expected a job id" },
    { "{\"command\":[\"x\"],\"after\":[\"1-\"]}", "after[0]: expected a job id" },
    { "{\"command\":[\"x\"],\"after\":[\"-0\"]}", "after[0]: expected a job id" },
    { "{\"command\":[\"x\"],\"after\":[{}]}",
      "after[0]: missing 'job' (a job id) or 'key' (an idempotency key)" },
    { "{\"command\":[\"x\"],\"after\":[{\"job\":\"1-0\",\"key\":\"k\"}]}",
      "after[0]: give 'job' or 'key', not both" },
    { "{\"command\":[\"x\"],\"after\":[{\"job\":\"1-0\",\"job\":\"2-0\"}]}",
      "after[0]: duplicate key 'job'" },
    { "{\"command\":[\"x\"],\"after\":[{\"job\":\"1-0\",\"when\":\"OK\"}]}",
      "after[0].when: expected \"ok\", \"notok\", \"any\" or \"started\", got 'OK'" },
    { "{\"command\":[\"x\"],\"after\":[{\"job\":\"1-0\",\"when\":1}]}",
      "after[0].when: expected \"ok\"" },
    { "{\"command\":[\"x\"],\"after\":[{\"jobs\":\"1-0\"}]}",
      "after[0]: unknown key 'jobs'; did you mean 'job'?" },
    { "{\"command\":[\"x\"],\"after\":[{\"key\":\"\"}]}",
      "after[0].key: expected 1..255 printable ASCII characters, got ''" },
    { "{\"command\":[\"x\"],\"after\":[{\"job\":1}]}", "after[0].job: expected a job id" },
    { "{\"command\":[\"x\"],\"array\":\"0-\"}", "array: a range's end (0..9999999) missing" },
    { "{\"command\":[\"x\"],\"array\":[0,1]}", "array: expected a string such as \"0-99\"" },
    { "{\"command\":[\"x\"],\"singleton\":\"yes\"}",
      "singleton: expected true or false, got 'yes'" },
    /* Config-free, so clients refuse it at submit too (issue #43). */
    { "{\"command\":[\"x\"],\"singleton\":true}",
      "singleton: needs a 'name' (one job of a name and user runs at a time)" },
};

/* "after" (issue #12): both forms, the default "when", keys, and the cap on conditions. */
static void test_after(void **state)
{
    struct queue_spec s;
    enum queue_when w;
    char big[64 * 24 + 64];
    size_t n;
    (void)state;

    parse_ok("{\"command\":[\"x\"],\"after\":[\"1732270000123-0\",{\"job\":\"5-1\","
             "\"when\":\"notok\"},{\"key\":\"step 1\",\"when\":\"started\"},{\"job\":\"6-0\","
             "\"when\":\"any\"}],\"singleton\":true,\"name\":\"solo\"}",
             &s);
    assert_int_equal(s.nafter, 4);
    assert_string_equal(s.after[0].ref, "1732270000123-0");
    assert_false(s.after[0].by_key);
    assert_int_equal(s.after[0].when, QUEUE_WHEN_OK);
    assert_string_equal(s.after[1].ref, "5-1");
    assert_int_equal(s.after[1].when, QUEUE_WHEN_NOTOK);
    assert_string_equal(s.after[2].ref, "step 1");
    assert_true(s.after[2].by_key);
    assert_int_equal(s.after[2].when, QUEUE_WHEN_STARTED);
    assert_int_equal(s.after[3].when, QUEUE_WHEN_ANY);
    assert_true(s.singleton);
    queue_spec_release(&s);

    parse_ok("{\"command\":[\"x\"],\"after\":[]}", &s);
    assert_int_equal(s.nafter, 0);
    assert_null(s.after);
    assert_false(s.singleton);
    queue_spec_release(&s);

    /* QUEUE_MAX_AFTER conditions pass, one more is refused with the count. */
    for (int extra = 0; extra < 2; extra++) {
        n = (size_t)snprintf(big, sizeof(big), "{\"command\":[\"x\"],\"after\":[");
        for (int i = 0; i < QUEUE_MAX_AFTER + extra; i++)
            n += (size_t)snprintf(big + n, sizeof(big) - n, "%s\"%d-0\"", i ? "," : "", 100 + i);
        (void)snprintf(big + n, sizeof(big) - n, "]}");
        if (extra) {
            parse_bad(big, strlen(big), "after: 65 conditions, at most 64");
        } else {
            parse_ok(big, &s);
            assert_int_equal(s.nafter, QUEUE_MAX_AFTER);
            queue_spec_release(&s);
        }
    }

    for (int i = 0; i < 4; i++) {
        assert_int_equal(queue_when_parse(queue_when_name((enum queue_when)i), &w), 0);
        assert_int_equal(w, i);
    }
    assert_int_equal(queue_when_parse("afterok", &w), -1);
    assert_int_equal(queue_when_parse("", &w), -1);
}

/* "array" (issue #12): Slurm's syntax, the positions and indices, the bad-input table. */
static void test_array(void **state)
{
    static const struct {
        const char *text;
        const char *prefix;
    } bad_arrays[] = {
        { "", "array: an index (0..9999999) missing in ''" },
        { "5-1", "array: a range ends before it starts in '5-1'" },
        { "0-9:0", "array: a step of 1..9999999 missing" },
        { "0-9:", "array: a step of 1..9999999 missing" },
        { "1:2", "array: unexpected character in '1:2'" },
        { "0-", "array: a range's end (0..9999999) missing" },
        { "-3", "array: an index (0..9999999) missing" },
        { "10000000", "array: an index (0..9999999) missing" },
        { "0-9%2x", "array: unexpected character" },
        { "0-9%%2", "array: '%' takes a count of 0..1000000 (0: no limit)" },
        { "0-9%-1", "array: '%' takes a count" },
        { "0-9%1000001", "array: '%' takes a count" },
        { "a", "array: an index" },
        /* What Slurm refuses too. */
        { "1 ,2", "array: unexpected character in '1 ,2'" },
        { "1-3 ", "array: unexpected character" },
        { ",", "array: an index (0..9999999) missing in ','" },
        { "%4", "array: an index (0..9999999) missing" },
        { "0-9:-2", "array: a step of 1..9999999 missing" },
        /* Items of different steps whose union needs more than QUEUE_ARRAY_RANGES ranges. */
        { "0-400:2,0-400:3", "array: more than 64 ranges once merged" },
    };
    struct queue_array a;
    struct mu_err err;
    struct queue_spec s;
    char many[400];
    size_t n = 0;
    (void)state;

    assert_int_equal(queue_array_parse("1,3,5-7,20-41:10%4", &a, &err), 0);
    assert_int_equal(a.count, 1 + 1 + 3 + 3);
    assert_int_equal(a.throttle, 4);
    assert_int_equal(a.nranges, 3);         /* normalised: 1 and 3 are one range, "1-3:2" */
    assert_int_equal(a.ranges[2].last, 40); /* on the step */
    {
        static const int64_t want[] = { 1, 3, 5, 6, 7, 20, 30, 40 };
        for (int64_t pos = 0; pos < a.count; pos++) {
            assert_int_equal(queue_array_index(&a, pos), want[pos]);
            assert_int_equal(queue_array_position(&a, want[pos]), pos);
        }
    }
    assert_int_equal(queue_array_index(&a, 8), -1);
    assert_int_equal(queue_array_position(&a, 2), -1);
    assert_int_equal(queue_array_position(&a, 25), -1);
    assert_int_equal(queue_array_parse("0-9999999", &a, &err), 0);
    assert_int_equal(a.count, 10000000);
    assert_int_equal(a.throttle, 0);
    assert_int_equal(queue_array_parse("7", &a, &err), 0);
    assert_int_equal(a.count, 1);
    for (size_t i = 0; i < MU_ARRAY_LEN(bad_arrays); i++) {
        memset(&a, 0x5a, sizeof(a));
        if (queue_array_parse(bad_arrays[i].text, &a, &err) == 0)
            fail_msg("accepted '%s'", bad_arrays[i].text);
        assert_int_equal(err.code, MU_E_SPEC);
        assert_prefix(err.msg, bad_arrays[i].prefix);
        assert_int_equal(a.count, 0);
        assert_int_equal(a.nranges, 0);
    }
    /* 65 items, and text over 127 characters. */
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "%s%d", i ? "," : "", i);
    assert_int_equal(queue_array_parse(many, &a, &err), -1);
    assert_prefix(err.msg, "array: longer than 127 characters");
    assert_int_equal(queue_array_parse("0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,"
                                       "42,44,46,48,50,52,54,56,58,60,62,64,66,68,70,72,74,76,78,"
                                       "80,82,84,86,88,90,92,94,96,98,100,102,104,106,108,110,112,"
                                       "114,116,118,120,122,124,126,128",
                                       &a, &err),
                     -1);

    /* Element ids. */
    {
        char base[QUEUE_JOB_ID_MAX];
        int64_t index = 0;
        assert_true(queue_job_id_split("1732270000123-0_17", base, sizeof(base), &index));
        assert_string_equal(base, "1732270000123-0");
        assert_int_equal(index, 17);
        assert_false(queue_job_id_split("1732270000123-0", base, sizeof(base), &index));
        assert_false(queue_job_id_split("1732270000123-0_", base, sizeof(base), &index));
        assert_false(queue_job_id_split("1732270000123-0_1x", base, sizeof(base), &index));
        assert_true(queue_job_id_is_valid("1732270000123-0_17"));
        assert_false(queue_job_id_is_valid("1732270000123-0_"));
        assert_false(queue_job_id_is_valid("1732270000123-0_12345678"));
    }

    /* In a spec. */
    parse_ok("{\"command\":[\"x\"],\"array\":\"0-99%8\"}", &s);
    assert_non_null(s.array);
    assert_int_equal(s.array->count, 100);
    assert_string_equal(s.array->text, "0-99%8");
    queue_spec_release(&s);
}

static void test_bad_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++)
        parse_bad(bad[i].json, strlen(bad[i].json), bad[i].prefix);

    /* A raw NUL byte anywhere. */
    static const char nul[] = "{\"command\":[\"a\0b\"]}";
    parse_bad(nul, sizeof(nul) - 1, "spec: not valid JSON near byte 14 (NUL byte)");
    /* Long strings in fixed fields. */
    char name[300] = "{\"command\":[\"x\"],\"name\":\"";
    size_t n = strlen(name);
    memset(name + n, 'n', 128);
    memcpy(name + n + 128, "\"}", 3);
    parse_bad(name, strlen(name), "name: string longer than 127 bytes");
}

/* ---- queue_spec_check ---- */

static void load_cfg(struct cfg *c, const char *json)
{
    struct mu_err err;
    if (cfg_parse(c, json, strlen(json), &err) != 0)
        fail_msg("config rejected: %s", err.msg);
}

static const char dev_cfg[] =
    "{\"topology_levels\":[\"zone\",\"rack\"],\"pools\":["
    "{\"name\":\"g6e-spot\",\"capacity\":\"spot\",\"gpu_type\":\"L40S\",\"gpus_per_node\":4},"
    "{\"name\":\"g6e-od\",\"capacity\":\"on-demand\",\"gpu_type\":\"L40S\",\"gpus_per_node\":4}],"
    "\"queues\":[{\"name\":\"default\"},{\"name\":\"research\",\"weight\":2}]}";

static void check_ok(const struct cfg *c, const char *json)
{
    struct queue_spec s;
    struct mu_err err;

    parse_ok(json, &s);
    if (queue_spec_check(&s, c, &err) != 0)
        fail_msg("check failed: %s\nspec: %s", err.msg, json);
    queue_spec_release(&s);
}

static void check_bad(const struct cfg *c, const char *json, const char *prefix)
{
    struct queue_spec s;
    struct mu_err err;

    parse_ok(json, &s);
    mu_err_clear(&err);
    if (queue_spec_check(&s, c, &err) != -1)
        fail_msg("check passed: %s", json);
    assert_int_equal(err.code, MU_E_SPEC);
    assert_prefix(err.msg, prefix);
    queue_spec_release(&s);
}

static void test_check_dev(void **state)
{
    struct cfg c;
    (void)state;

    load_cfg(&c, dev_cfg);
    check_ok(&c, "{\"command\":[\"x\"]}");
    check_ok(&c,
             "{\"command\":[\"x\"],\"queue\":\"research\",\"tasks\":64,\"gpus_per_task\":4,"
             "\"gpu_type\":\"L40S\",\"topology\":{\"required\":\"zone\",\"preferred\":\"rack\"}}");
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":2,\"gpus_per_task\":2,"
                 "\"topology\":{\"required\":\"node\"}}");
    check_ok(&c, "{\"command\":[\"x\"],\"gpus_per_task\":0,\"capacity\":[\"on-demand\"]}");
    check_bad(&c, "{\"command\":[\"x\"],\"queue\":\"x\"}",
              "queue: unknown queue 'x'; configured: default, research");
    check_bad(&c, "{\"command\":[\"x\"],\"topology\":{\"required\":\"block\"}}",
              "topology.required: unknown level 'block'; configured: zone, rack, node");
    check_bad(&c, "{\"command\":[\"x\"],\"topology\":{\"preferred\":\"island\"}}",
              "topology.preferred: unknown level 'island'; configured: zone, rack, node");
    check_bad(&c, "{\"command\":[\"x\"],\"gpus_per_task\":8,\"gpu_type\":\"L40S\"}",
              "gpus_per_task: needs 8 GPUs per task; the largest spot or on-demand node with "
              "L40S has 4");
    check_bad(&c, "{\"command\":[\"x\"],\"gpus_per_task\":8,\"capacity\":[\"on-demand\"]}",
              "gpus_per_task: needs 8 GPUs per task; the largest on-demand node has 4");
    check_bad(&c, "{\"command\":[\"x\"],\"gpu_type\":\"H100\"}",
              "gpu_type: no spot or on-demand pool has GPU type 'H100'; available: L40S");
    check_bad(&c, "{\"command\":[\"x\"],\"gpu_type\":\"l40s\"}",
              "gpu_type: no spot or on-demand pool has GPU type 'l40s'");
    check_bad(&c,
              "{\"command\":[\"x\"],\"tasks\":2,\"gpus_per_task\":4,"
              "\"topology\":{\"required\":\"node\"}}",
              "topology.required: 'node' needs 2 tasks x 4 GPUs = 8 GPUs on one node; the "
              "largest spot or on-demand node has 4");
    /* Shares need a shared pool; the dev config has none. */
    check_bad(&c, "{\"command\":[\"x\"],\"gpu_milli\":500}",
              "gpu_milli: no spot or on-demand pool is shared; hint: mark a pool \"shared\": true "
              "in the config (time-sliced GPUs)");
    /* Slices: the pools' GPUs per node do not bound them (nodes report their MIG layout). */
    check_ok(&c, "{\"command\":[\"x\"],\"gpus_per_task\":7,\"gpu_slice\":\"1g.10gb\"}");
    check_bad(&c, "{\"command\":[\"x\"],\"gpu_slice\":\"1g.10gb\",\"gpu_type\":\"H100\"}",
              "gpu_type: no spot or on-demand pool has GPU type 'H100'; available: L40S");
    /* The same gang with a requirement that relaxes after a wait fits some day: accepted. */
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":2,\"gpus_per_task\":4,"
                 "\"topology\":{\"required\":\"node\",\"relax_after_s\":300}}");
}

static void test_check_time_limit(void **state)
{
    struct cfg c;
    (void)state;

    load_cfg(&c, "{\"max_time_limit_s\":3600}");
    check_ok(&c, "{\"command\":[\"x\"],\"time_limit_s\":3600}");
    check_ok(&c, "{\"command\":[\"x\"]}"); /* the default (lowered to the max) applies */
    check_bad(&c, "{\"command\":[\"x\"],\"time_limit_s\":3601}",
              "time_limit_s: 3601 is over the cluster's max_time_limit_s (3600)");
}

static void test_check_caps(void **state)
{
    struct cfg c;
    (void)state;

    /* Only on-demand pools. */
    load_cfg(&c, "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8}]}");
    check_ok(&c, "{\"command\":[\"x\"]}");
    check_bad(&c, "{\"command\":[\"x\"],\"capacity\":[\"spot\"]}",
              "capacity: no spot pool is configured");

    /* Capped everywhere: two spot pools of 16 and 8 GPUs, one on-demand pool of 8. */
    load_cfg(&c, "{\"pools\":["
                 "{\"name\":\"s1\",\"capacity\":\"spot\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8,\"max_gpus\":16},"
                 "{\"name\":\"s2\",\"capacity\":\"spot\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8,\"max_gpus\":12},"
                 "{\"name\":\"o1\",\"capacity\":\"on-demand\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8,\"max_gpus\":8}]}");
    /* A gang may span pools of one type: 2 tasks in s1 and 1 in s2 (12/8 = 1). */
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":3,\"gpus_per_task\":8}");
    check_bad(&c, "{\"command\":[\"x\"],\"tasks\":4,\"gpus_per_task\":8}",
              "tasks: needs 4 tasks x 8 GPUs; the max_gpus caps of the spot or on-demand pools "
              "admit at most 3 such tasks");
    /* It never straddles types: 1 on-demand task is all o1 holds. */
    check_bad(&c,
              "{\"command\":[\"x\"],\"tasks\":2,\"gpus_per_task\":8,"
              "\"capacity\":[\"on-demand\"]}",
              "tasks: needs 2 tasks x 8 GPUs; the max_gpus caps of the on-demand pools admit at "
              "most 1");
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":1000,\"gpus_per_task\":0}");
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":2,\"gpus_per_task\":4,"
                 "\"topology\":{\"required\":\"node\"}}");

    /* One uncapped matching pool lifts the limit. */
    load_cfg(&c, "{\"pools\":["
                 "{\"name\":\"s1\",\"capacity\":\"spot\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8,\"max_gpus\":8},"
                 "{\"name\":\"o1\",\"capacity\":\"on-demand\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8}]}");
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":100,\"gpus_per_task\":8}");

    /* A one-node gang must also fit the pool's cap. */
    load_cfg(&c, "{\"pools\":[{\"name\":\"s1\",\"capacity\":\"spot\",\"gpu_type\":\"H100\","
                 "\"gpus_per_node\":8,\"max_gpus\":4}]}");
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":1,\"gpus_per_task\":4,"
                 "\"topology\":{\"required\":\"node\"}}");
    check_bad(&c,
              "{\"command\":[\"x\"],\"tasks\":2,\"gpus_per_task\":4,"
              "\"topology\":{\"required\":\"node\"}}",
              "topology.required: 'node' needs 8 GPUs on one node; the max_gpus cap");

    /* No pools at all: only the queue and the levels are checked. */
    cfg_init_defaults(&c);
    check_ok(&c, "{\"command\":[\"x\"],\"tasks\":4096,\"gpus_per_task\":64,\"gpu_type\":\"X\"}");
    check_ok(&c, "{\"command\":[\"x\"],\"topology\":{\"required\":\"node\"}}");
    check_bad(&c, "{\"command\":[\"x\"],\"topology\":{\"required\":\"zone\"}}",
              "topology.required: unknown level 'zone'; configured: node");
    check_bad(&c, "{\"command\":[\"x\"],\"queue\":\"research\"}",
              "queue: unknown queue 'research'; configured: default");
}

static void test_states(void **state)
{
    static const char *const names[] = { "PENDING",    "STARTING",  "RUNNING",
                                         "PREEMPTING", "SUCCEEDED", "FAILED",
                                         "CANCELLED",  "REJECTED",  "TIMEOUT" };
    enum queue_state st;
    (void)state;

    for (int i = 0; i < 9; i++) {
        assert_string_equal(queue_state_name((enum queue_state)i), names[i]);
        assert_int_equal(queue_state_parse(names[i], &st), 0);
        assert_int_equal(st, i);
        assert_int_equal(queue_state_is_final((enum queue_state)i), i >= QUEUE_SUCCEEDED);
    }
    assert_int_equal(queue_state_parse("running", &st), 0);
    assert_int_equal(st, QUEUE_RUNNING);
    assert_int_equal(queue_state_parse("RUN", &st), -1);
    assert_int_equal(queue_state_parse("", &st), -1);
    assert_int_equal(queue_state_parse(NULL, &st), -1);
    assert_string_equal(queue_state_name((enum queue_state)99), "UNKNOWN");
    assert_false(queue_state_is_final(QUEUE_PREEMPTING));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),   cmocka_unit_test(test_full),
        cmocka_unit_test(test_variants),   cmocka_unit_test(test_caps),
        cmocka_unit_test(test_bad_table),  cmocka_unit_test(test_check_dev),
        cmocka_unit_test(test_check_caps), cmocka_unit_test(test_check_time_limit),
        cmocka_unit_test(test_states),     cmocka_unit_test(test_after),
        cmocka_unit_test(test_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

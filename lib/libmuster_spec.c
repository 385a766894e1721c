/* SPDX-License-Identifier: MIT */
/*
 * libmuster's spec builder (lib/muster.h): a cJSON object filled by setters and printed as
 * the JSON musterd reads (docs/design.md §3), so that a pipeline never writes spec JSON by hand.
 *
 * cJSON escapes every string, so any name, argv or env value gives valid JSON.  Setters check
 * ranges as queue_spec_parse does (the limits come from queue.h), so most mistakes show up at
 * the setter; muster_submit then runs queue_spec_parse itself (in queue_submit) before writing,
 * and what only musterd knows (queues, topology levels, pool sizes) is still checked there.  The
 * first setter failure is kept ("sticky", like a stream's error flag) and reported by
 * muster_spec_json, so a chain of setters can be checked once at the end.
 */
#include "lib/muster.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu.h"
#include "queue/queue.h"

#include "common/mu_banned.h"

#define SPEC_PRIORITY_MAX 1000000
#define SPEC_RETRIES_MAX  100
#define SPEC_GRACE_MAX_S  3600

struct muster_spec {
    cJSON *obj;        /* the spec object */
    int err_code;      /* first setter failure, MUSTER_OK when none */
    char err_msg[256]; /* its message */
};

/* Records the first failure; returns -1. */
static int spec_fail(struct muster_spec *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int spec_fail(struct muster_spec *s, int code, const char *fmt, ...)
{
    if (s && s->err_code == MUSTER_OK) {
        va_list ap;
        s->err_code = code;
        va_start(ap, fmt);
        (void)vsnprintf(s->err_msg, sizeof(s->err_msg), fmt, ap);
        va_end(ap);
    }
    return -1;
}

struct muster_spec *muster_spec_new(void)
{
    struct muster_spec *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->obj = cJSON_CreateObject();
    if (!s->obj) {
        free(s);
        return NULL;
    }
    return s;
}

void muster_spec_free(struct muster_spec *s)
{
    if (!s)
        return;
    cJSON_Delete(s->obj);
    free(s);
}

/* Sets key to item (replacing an old value); takes item, also on failure. */
static int put(struct muster_spec *s, const char *key, cJSON *item)
{
    if (!item)
        return spec_fail(s, MUSTER_E_NOMEM, "%s: out of memory", key);
    cJSON_DeleteItemFromObjectCaseSensitive(s->obj, key);
    if (!cJSON_AddItemToObject(s->obj, key, item)) {
        cJSON_Delete(item);
        return spec_fail(s, MUSTER_E_NOMEM, "%s: out of memory", key);
    }
    return 0;
}

/* A string of 1..max bytes without control characters. */
static int put_str(struct muster_spec *s, const char *key, const char *value, size_t max)
{
    size_t len;

    if (!s)
        return -1;
    if (!value)
        return spec_fail(s, MUSTER_E_SPEC, "%s: NULL", key);
    len = strlen(value);
    if (len == 0 || len > max)
        return spec_fail(s, MUSTER_E_SPEC, "%s: expected 1..%zu characters, got %zu", key, max,
                         len);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return spec_fail(s, MUSTER_E_SPEC, "%s: control character 0x%02x at byte %zu", key, *p,
                             (size_t)(p - (const unsigned char *)value));
    }
    return put(s, key, cJSON_CreateString(value));
}

static int put_int(struct muster_spec *s, const char *key, int64_t v, int64_t min, int64_t max)
{
    if (!s)
        return -1;
    if (v < min || v > max)
        return spec_fail(s, MUSTER_E_SPEC, "%s: expected an integer %lld..%lld, got %lld", key,
                         (long long)min, (long long)max, (long long)v);
    return put(s, key, cJSON_CreateNumber((double)v));
}

int muster_spec_set_name(struct muster_spec *s, const char *name)
{
    return put_str(s, "name", name, 127);
}

int muster_spec_set_queue(struct muster_spec *s, const char *queue)
{
    return put_str(s, "queue", queue, CFG_NAME_MAX - 1);
}

int muster_spec_set_user(struct muster_spec *s, const char *user)
{
    return put_str(s, "user", user, 63);
}

int muster_spec_set_priority(struct muster_spec *s, int64_t priority)
{
    return put_int(s, "priority", priority, -SPEC_PRIORITY_MAX, SPEC_PRIORITY_MAX);
}

int muster_spec_set_tasks(struct muster_spec *s, int tasks)
{
    return put_int(s, "tasks", tasks, 1, QUEUE_MAX_TASKS);
}

int muster_spec_set_gpus_per_task(struct muster_spec *s, int gpus)
{
    return put_int(s, "gpus_per_task", gpus, 0, QUEUE_MAX_GPUS_TASK);
}

int muster_spec_set_cpus_per_task(struct muster_spec *s, int cpus)
{
    return put_int(s, "cpus_per_task", cpus, 0, 4096);
}

int muster_spec_set_memory_mb_per_task(struct muster_spec *s, int64_t memory_mb)
{
    return put_int(s, "memory_mb_per_task", memory_mb, 0, INT64_C(16) << 20);
}

int muster_spec_set_gpu_type(struct muster_spec *s, const char *gpu_type)
{
    return put_str(s, "gpu_type", gpu_type, CFG_NAME_MAX - 1);
}

int muster_spec_set_gpu_slice(struct muster_spec *s, const char *profile)
{
    if (s && profile && !mu_mig_profile_is_valid(profile))
        return spec_fail(s, MUSTER_E_SPEC,
                         "gpu_slice: expected a MIG profile such as 3g.40gb, got '%.64s'", profile);
    return put_str(s, "gpu_slice", profile, 31);
}

int muster_spec_set_workdir(struct muster_spec *s, const char *absolute_path)
{
    if (s && absolute_path && absolute_path[0] != '/')
        return spec_fail(s, MUSTER_E_SPEC, "workdir: expected an absolute path, got '%.64s'",
                         absolute_path);
    return put_str(s, "workdir", absolute_path, 1023);
}

int muster_spec_set_command(struct muster_spec *s, int argc, const char *const *argv)
{
    cJSON *arr;

    if (!s)
        return -1;
    if (argc < 1 || argc > QUEUE_MAX_ARGS || !argv)
        return spec_fail(s, MUSTER_E_SPEC, "command: expected 1..%d arguments, got %d",
                         QUEUE_MAX_ARGS, argc);
    for (int i = 0; i < argc; i++) {
        if (!argv[i])
            return spec_fail(s, MUSTER_E_SPEC, "command[%d]: NULL", i);
        if (strlen(argv[i]) > QUEUE_MAX_STR)
            return spec_fail(s, MUSTER_E_SPEC, "command[%d]: longer than %u bytes", i,
                             QUEUE_MAX_STR);
    }
    if (argv[0][0] == '\0')
        return spec_fail(s, MUSTER_E_SPEC, "command[0]: empty program name");
    arr = cJSON_CreateArray();
    for (int i = 0; arr && i < argc; i++) {
        cJSON *str = cJSON_CreateString(argv[i]);
        if (!str || !cJSON_AddItemToArray(arr, str)) {
            cJSON_Delete(str);
            cJSON_Delete(arr);
            arr = NULL;
        }
    }
    return put(s, "command", arr);
}

int muster_spec_set_shell_command(struct muster_spec *s, const char *command_line)
{
    if (!s)
        return -1;
    if (!command_line || !command_line[0] || strlen(command_line) > QUEUE_MAX_STR)
        return spec_fail(s, MUSTER_E_SPEC, "command: expected 1..%u bytes of shell command",
                         QUEUE_MAX_STR);
    return put(s, "command", cJSON_CreateString(command_line));
}

int muster_spec_set_env(struct muster_spec *s, const char *name, const char *value)
{
    cJSON *env;

    if (!s)
        return -1;
    if (!name || !name[0] || strchr(name, '=') || !value)
        return spec_fail(s, MUSTER_E_SPEC, "env: expected a name without '=' and a value");
    if (strncmp(name, "MUSTER_", 7) == 0)
        return spec_fail(s, MUSTER_E_SPEC, "env.%.64s: names starting MUSTER_ are reserved", name);
    if (strlen(name) + strlen(value) + 1 > QUEUE_MAX_STR)
        return spec_fail(s, MUSTER_E_SPEC, "env.%.64s: longer than %u bytes", name, QUEUE_MAX_STR);
    env = cJSON_GetObjectItemCaseSensitive(s->obj, "env");
    if (!env) {
        env = cJSON_CreateObject();
        if (put(s, "env", env) != 0)
            return -1;
    }
    if (cJSON_GetArraySize(env) >= QUEUE_MAX_ENV && !cJSON_HasObjectItem(env, name))
        return spec_fail(s, MUSTER_E_SPEC, "env: more than %d variables", QUEUE_MAX_ENV);
    cJSON_DeleteItemFromObjectCaseSensitive(env, name);
    if (!cJSON_AddStringToObject(env, name, value))
        return spec_fail(s, MUSTER_E_NOMEM, "env: out of memory");
    return 0;
}

int muster_spec_set_capacity(struct muster_spec *s, int n, const char *const *types)
{
    cJSON *arr;

    if (!s)
        return -1;
    if (n < 1 || n > 2 || !types)
        return spec_fail(s, MUSTER_E_SPEC, "capacity: expected 1 or 2 types, got %d", n);
    for (int i = 0; i < n; i++) {
        if (!types[i] || (strcmp(types[i], "spot") != 0 && strcmp(types[i], "on-demand") != 0))
            return spec_fail(s, MUSTER_E_SPEC,
                             "capacity[%d]: expected \"spot\" or \"on-demand\", got '%.32s'", i,
                             types[i] ? types[i] : "(null)");
    }
    if (n == 2 && strcmp(types[0], types[1]) == 0)
        return spec_fail(s, MUSTER_E_SPEC, "capacity: '%s' given twice", types[0]);
    arr = cJSON_CreateStringArray(types, n);
    return put(s, "capacity", arr);
}

int muster_spec_set_topology(struct muster_spec *s, const char *required, const char *preferred)
{
    cJSON *topo;

    if (!s)
        return -1;
    if (!required && !preferred)
        return spec_fail(s, MUSTER_E_SPEC, "topology: give a required or a preferred level");
    if ((required && (!required[0] || strlen(required) >= CFG_LEVEL_MAX))
        || (preferred && (!preferred[0] || strlen(preferred) >= CFG_LEVEL_MAX)))
        return spec_fail(s, MUSTER_E_SPEC, "topology: expected level names of 1..%d characters",
                         CFG_LEVEL_MAX - 1);
    topo = cJSON_CreateObject();
    if (topo
        && ((required && !cJSON_AddStringToObject(topo, "required", required))
            || (preferred && !cJSON_AddStringToObject(topo, "preferred", preferred)))) {
        cJSON_Delete(topo);
        topo = NULL;
    }
    return put(s, "topology", topo);
}

int muster_spec_set_topology_relax(struct muster_spec *s, int relax_after_s)
{
    cJSON *topo;
    cJSON *n;

    if (!s)
        return -1;
    topo = cJSON_GetObjectItemCaseSensitive(s->obj, "topology");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(topo, "required")))
        return spec_fail(s, MUSTER_E_SPEC,
                         "topology.relax_after_s: set a required level first "
                         "(muster_spec_set_topology)");
    if (relax_after_s < 1 || relax_after_s > 604800)
        return spec_fail(s, MUSTER_E_SPEC,
                         "topology.relax_after_s: expected an integer 1..604800, got %d",
                         relax_after_s);
    n = cJSON_CreateNumber(relax_after_s);
    if (!n)
        return spec_fail(s, MUSTER_E_NOMEM, "topology.relax_after_s: out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(topo, "relax_after_s");
    if (!cJSON_AddItemToObject(topo, "relax_after_s", n)) {
        cJSON_Delete(n);
        return spec_fail(s, MUSTER_E_NOMEM, "topology.relax_after_s: out of memory");
    }
    return 0;
}

int muster_spec_set_checkpoint(struct muster_spec *s, const char *signal, int grace_s)
{
    cJSON *ck;

    if (!s)
        return -1;
    if (!signal)
        signal = "SIGUSR1";
    int sig = mu_signal_parse(signal);
    if (sig <= 0 || sig >= 65 || sig == SIGKILL || sig == SIGSTOP)
        return spec_fail(s, MUSTER_E_SPEC,
                         "checkpoint.signal: '%.32s' is not a signal a task can catch", signal);
    if (grace_s < 0 || grace_s > SPEC_GRACE_MAX_S)
        return spec_fail(s, MUSTER_E_SPEC, "checkpoint.grace_s: expected 0..%d, got %d",
                         SPEC_GRACE_MAX_S, grace_s);
    ck = cJSON_CreateObject();
    if (ck
        && (!cJSON_AddStringToObject(ck, "signal", signal)
            || !cJSON_AddNumberToObject(ck, "grace_s", grace_s))) {
        cJSON_Delete(ck);
        ck = NULL;
    }
    return put(s, "checkpoint", ck);
}

int muster_spec_set_preemptible(struct muster_spec *s, bool preemptible)
{
    if (!s)
        return -1;
    return put(s, "preemptible", cJSON_CreateBool(preemptible));
}

int muster_spec_set_time_limit_s(struct muster_spec *s, int64_t time_limit_s)
{
    return put_int(s, "time_limit_s", time_limit_s, 1, 31536000);
}

int muster_spec_set_max_retries(struct muster_spec *s, int max_retries)
{
    return put_int(s, "max_retries", max_retries, 0, SPEC_RETRIES_MAX);
}

int muster_spec_set_idempotency_key(struct muster_spec *s, const char *key)
{
    if (!s)
        return -1;
    if (key) {
        for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
            if (*p > 0x7e)
                return spec_fail(s, MUSTER_E_SPEC,
                                 "idempotency_key: expected printable ASCII characters");
        }
    }
    return put_str(s, "idempotency_key", key, 255);
}

/* Adds one "after" condition: {"job"|"key": ref, "when": when}. */
static int after_add(struct muster_spec *s, const char *field, const char *ref, const char *when)
{
    enum queue_when w;
    cJSON *arr;
    cJSON *o;

    if (!s)
        return -1;
    if (when && queue_when_parse(when, &w) != 0)
        return spec_fail(s, MUSTER_E_SPEC,
                         "after: when must be \"ok\", \"notok\", \"any\" or \"started\"");
    if (!ref || !ref[0] || strlen(ref) >= QUEUE_KEY_MAX)
        return spec_fail(s, MUSTER_E_SPEC, "after: expected a %s", field);
    if (strcmp(field, "job") == 0 && !queue_job_id_is_valid(ref))
        return spec_fail(s, MUSTER_E_SPEC, "after: '%.64s' is not a job id", ref);
    arr = cJSON_GetObjectItemCaseSensitive(s->obj, "after");
    if (!arr) {
        arr = cJSON_CreateArray();
        if (put(s, "after", arr) != 0)
            return -1;
    }
    if (cJSON_GetArraySize(arr) >= QUEUE_MAX_AFTER)
        return spec_fail(s, MUSTER_E_SPEC, "after: more than %d conditions", QUEUE_MAX_AFTER);
    o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, field, ref)
        || (when && !cJSON_AddStringToObject(o, "when", when)) || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        return spec_fail(s, MUSTER_E_NOMEM, "after: out of memory");
    }
    return 0;
}

int muster_spec_add_after(struct muster_spec *s, const char *job_id, const char *when)
{
    return after_add(s, "job", job_id, when);
}

int muster_spec_add_after_key(struct muster_spec *s, const char *idempotency_key, const char *when)
{
    return after_add(s, "key", idempotency_key, when);
}

int muster_spec_set_after_or(struct muster_spec *s, bool any_one)
{
    if (!s)
        return -1;
    return put(s, "after_or", cJSON_CreateBool(any_one));
}

int muster_spec_set_singleton(struct muster_spec *s, bool singleton)
{
    if (!s)
        return -1;
    return put(s, "singleton", cJSON_CreateBool(singleton));
}

int muster_spec_set_array(struct muster_spec *s, const char *indices)
{
    struct queue_array a;
    struct mu_err err;

    if (!s)
        return -1;
    if (!indices || queue_array_parse(indices, &a, &err) != 0)
        return spec_fail(s, MUSTER_E_SPEC, "%s", indices ? err.msg : "array: NULL");
    return put(s, "array", cJSON_CreateString(indices));
}

char *muster_spec_json(const struct muster_spec *s, struct muster_error *err)
{
    char *text;

    if (!s) {
        if (err) {
            err->code = MUSTER_E_INVAL;
            mu_strlcpy(err->message, "muster_spec_json: NULL spec", sizeof(err->message));
        }
        return NULL;
    }
    if (s->err_code != MUSTER_OK || !cJSON_HasObjectItem(s->obj, "command")) {
        if (err) {
            err->code = s->err_code != MUSTER_OK ? s->err_code : MUSTER_E_SPEC;
            mu_strlcpy(err->message, s->err_code != MUSTER_OK ? s->err_msg : "command: not set",
                       sizeof(err->message));
        }
        return NULL;
    }
    text = cJSON_PrintUnformatted(s->obj);
    if (!text && err) {
        err->code = MUSTER_E_NOMEM;
        mu_strlcpy(err->message, "out of memory printing the spec", sizeof(err->message));
    }
    return text;
}

int muster_spec_submit(struct muster *m,
                       const struct muster_spec *s,
                       char *id_out,
                       size_t id_size,
                       bool *created,
                       struct muster_error *err)
{
    char *json = muster_spec_json(s, err);
    int rc;

    if (!json)
        return -1;
    rc = muster_submit(m, json, id_out, id_size, created, err);
    muster_free(json);
    return rc;
}

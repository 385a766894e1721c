/* SPDX-License-Identifier: MIT */
/*
 * The job spec of docs/design.md §3: queue_spec_parse (JSON to struct queue_spec, type and range
 * checks) and queue_spec_check (against the cluster config: can this gang ever run here?).
 *
 * Submitted JSON is hostile input.  cJSON is lenient where we must not be: it accepts raw
 * control bytes in strings, cuts strings silently at "\u0000", keeps duplicate keys and nests
 * 1000 deep.  So mu_json_parse_object (common/json.c, shared with the config parser) scans the
 * raw text first (size, NUL, control bytes, depth, with the key path of the problem) and has
 * cJSON parse a private NUL-terminated copy; then the tree is walked child by child with exact
 * key comparison so that unknown and duplicate keys are errors.
 * Invariant: on failure *out is all zeroes and owns nothing; on success argv and env are
 * NULL-terminated heap arrays that only queue_spec_release frees.
 */
#include "queue/queue.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_json.h"
#include "queue/internal.h"

#include "common/mu_banned.h"

#define PATH_LEN       96  /* "checkpoint.grace_s", "command[1023]", "env.<255 bytes>" cut */
#define SPEC_MAX_DEPTH 8   /* containers; the schema itself needs 2 */
#define ENV_KEY_MAX    255 /* bytes in an environment variable name */

/* ---- typed getters ---- */

static int get_int32(
    const cJSON *v, const char *path, int min, int max, int *out, struct mu_err *err)
{
    int64_t n;
    if (mu_json_get_int(v, path, min, max, MU_E_SPEC, &n, err) != 0)
        return -1;
    *out = (int)n;
    return 0;
}

/* A string of at most max_len bytes; *out borrows from v. */
/* ---- sections ---- */

static int set_capacity(struct queue_spec *s, const cJSON *arr, struct mu_err *err)
{
    static const char expected[] = "an array of \"spot\" and/or \"on-demand\" in preference order";
    char path[PATH_LEN];
    int n = 0;

    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
        return mu_json_err_expected(err, MU_E_SPEC, "capacity", expected, arr);
    if (cJSON_GetArraySize(arr) > 2)
        return mu_errf(err, MU_E_SPEC, "capacity: expected 1 or 2 entries, got %d",
                       cJSON_GetArraySize(arr));
    for (const cJSON *it = arr->child; it; it = it->next, n++) {
        (void)mu_snprintf(path, sizeof(path), "capacity[%d]", n);
        if (!cJSON_IsString(it) || cfg_capacity_parse(it->valuestring, &s->capacity[n]) != 0)
            return mu_json_err_expected(err, MU_E_SPEC, path, "\"spot\" or \"on-demand\"", it);
        if (n == 1 && s->capacity[1] == s->capacity[0])
            return mu_errf(err, MU_E_SPEC, "%s: duplicate '%s'", path,
                           cfg_capacity_name(s->capacity[1]));
    }
    s->ncapacity = n;
    return 0;
}

static int set_topology(struct queue_spec *s, const cJSON *obj, struct mu_err *err)
{
    static const char *const keys[] = { "required", "preferred", "relax_after_s" };
    unsigned seen = 0;
    int64_t relax = 0;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(
            err, MU_E_SPEC, "topology",
            "an object such as {\"required\": \"zone\", \"preferred\": \"rack\"}", obj);
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, keys, MU_ARRAY_LEN(keys));
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_SPEC, MU_JSON_KEY_QUOTED, "topology",
                                           it->string, keys, MU_ARRAY_LEN(keys));
        if (seen & (1u << k))
            return mu_errf(err, MU_E_SPEC, "topology: duplicate key '%s'", keys[k]);
        seen |= 1u << k;
        if (k == 0
            && mu_json_get_name(it, "topology.required", s->topo_required, sizeof(s->topo_required),
                                MU_E_SPEC, err)
                   != 0)
            return -1;
        if (k == 1
            && mu_json_get_name(it, "topology.preferred", s->topo_preferred,
                                sizeof(s->topo_preferred), MU_E_SPEC, err)
                   != 0)
            return -1;
        if (k == 2
            && mu_json_get_int(it, "topology.relax_after_s", 1, 604800, MU_E_SPEC, &relax, err)
                   != 0)
            return -1;
    }
    if (relax && !s->topo_required[0])
        return mu_errf(err, MU_E_SPEC,
                       "topology.relax_after_s: needs topology.required, the level it relaxes");
    s->topo_relax_after_s = (int)relax;
    return 0;
}

static char *dup_str(const char *a, const char *b, struct mu_err *err)
{
    size_t la = strlen(a);
    size_t lb = b ? strlen(b) : 0;
    char *p = malloc(la + lb + (b ? 2 : 1));

    if (!p) {
        mu_errf(err, MU_E_NOMEM, "out of memory copying the job spec");
        return NULL;
    }
    memcpy(p, a, la);
    if (b) {
        p[la] = '=';
        memcpy(p + la + 1, b, lb + 1);
    } else {
        p[la] = '\0';
    }
    return p;
}

static int set_command(struct queue_spec *s, const cJSON *v, struct mu_err *err)
{
    static const char expected[] = "a non-empty array of strings or a non-empty string";
    char path[PATH_LEN];
    const char *str;
    int n;

    if (cJSON_IsString(v)) {
        if (v->valuestring[0] == '\0')
            return mu_json_err_expected(err, MU_E_SPEC, "command", expected, v);
        if (queue_json_str(v, "command", QUEUE_MAX_STR, &str, err) != 0)
            return -1;
        s->argv = calloc(4, sizeof(char *));
        if (!s->argv)
            return mu_errf(err, MU_E_NOMEM, "out of memory copying the job spec");
        if (!(s->argv[0] = dup_str("/bin/sh", NULL, err))
            || !(s->argv[1] = dup_str("-c", NULL, err)) || !(s->argv[2] = dup_str(str, NULL, err)))
            return -1;
        s->argc = 3;
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return mu_json_err_expected(err, MU_E_SPEC, "command", expected, v);
    n = cJSON_GetArraySize(v);
    if (n > QUEUE_MAX_ARGS)
        return mu_errf(err, MU_E_SPEC, "command: more than %d arguments", QUEUE_MAX_ARGS);
    s->argv = calloc((size_t)n + 1, sizeof(char *));
    if (!s->argv)
        return mu_errf(err, MU_E_NOMEM, "out of memory copying the job spec");
    n = 0;
    for (const cJSON *it = v->child; it; it = it->next, n++) {
        (void)mu_snprintf(path, sizeof(path), "command[%d]", n);
        if (queue_json_str(it, path, QUEUE_MAX_STR, &str, err) != 0)
            return -1;
        if (n == 0 && str[0] == '\0')
            return mu_errf(err, MU_E_SPEC, "command[0]: expected a program name, got ''");
        if (!(s->argv[n] = dup_str(str, NULL, err)))
            return -1;
    }
    s->argc = n;
    return 0;
}

static bool env_name_is_valid(const char *k)
{
    if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
        return false;
    for (k++; *k; k++) {
        if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9')
              || *k == '_'))
            return false;
    }
    return true;
}

static int set_env(struct queue_spec *s, const cJSON *obj, struct mu_err *err)
{
    char path[PATH_LEN];
    char clip[44];
    const char *val;
    int n;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_SPEC, "env", "an object of string values", obj);
    n = cJSON_GetArraySize(obj);
    if (n > QUEUE_MAX_ENV)
        return mu_errf(err, MU_E_SPEC, "env: more than %d entries", QUEUE_MAX_ENV);
    s->env = calloc((size_t)n + 1, sizeof(char *));
    if (!s->env)
        return mu_errf(err, MU_E_NOMEM, "out of memory copying the job spec");
    n = 0;
    for (const cJSON *it = obj->child; it; it = it->next, n++) {
        const char *key = it->string;
        mu_json_clip(key, clip, sizeof(clip));
        if (strlen(key) > ENV_KEY_MAX)
            return mu_errf(err, MU_E_SPEC, "env: name '%s' longer than %d bytes", clip,
                           ENV_KEY_MAX);
        if (!env_name_is_valid(key))
            return mu_errf(err, MU_E_SPEC,
                           "env: invalid name '%s'; expected [A-Za-z_][A-Za-z0-9_]*", clip);
        mu_json_path_join(path, sizeof(path), "env", clip);
        if (strncmp(key, "MUSTER_", 7) == 0)
            return mu_errf(err, MU_E_SPEC, "%s: names starting with MUSTER_ are set by muster",
                           path);
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next) {
            if (strcmp(prev->string, key) == 0)
                return mu_errf(err, MU_E_SPEC, "env: duplicate name '%s'", clip);
        }
        if (queue_json_str(it, path, QUEUE_MAX_STR, &val, err) != 0)
            return -1;
        if (!(s->env[n] = dup_str(key, val, err)))
            return -1;
    }
    s->nenv = n;
    return 0;
}

static int set_checkpoint(struct queue_spec *s, const cJSON *obj, struct mu_err *err)
{
    static const char *const keys[] = { "signal", "grace_s" };
    unsigned seen = 0;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_SPEC, "checkpoint",
                                    "an object such as {\"signal\": \"SIGUSR1\", \"grace_s\": 60}",
                                    obj);
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, keys, MU_ARRAY_LEN(keys));
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_SPEC, MU_JSON_KEY_QUOTED, "checkpoint",
                                           it->string, keys, MU_ARRAY_LEN(keys));
        if (seen & (1u << k))
            return mu_errf(err, MU_E_SPEC, "checkpoint: duplicate key '%s'", keys[k]);
        seen |= 1u << k;
        if (k == 1) {
            if (get_int32(it, "checkpoint.grace_s", 0, 3600, &s->checkpoint_grace_s, err) != 0)
                return -1;
            continue;
        }
        int sig = cJSON_IsString(it) ? mu_signal_parse(it->valuestring) : -1;
        if (sig <= 0 || sig >= 65)
            return mu_json_err_expected(err, MU_E_SPEC, "checkpoint.signal",
                                        "a signal name such as \"SIGUSR1\"", it);
        if (sig == SIGKILL || sig == SIGSTOP)
            return mu_errf(err, MU_E_SPEC,
                           "checkpoint.signal: %s cannot be caught; use SIGUSR1, SIGUSR2 or "
                           "SIGTERM",
                           mu_signal_name(sig));
        s->checkpoint_signal = sig;
    }
    s->checkpointable = true;
    return 0;
}

/* ---- top level ---- */

enum spec_key {
    SK_NAME,
    SK_QUEUE,
    SK_PRIORITY,
    SK_TASKS,
    SK_GPUS_PER_TASK,
    SK_CPUS_PER_TASK,
    SK_MEMORY,
    SK_GPU_TYPE,
    SK_GPU_SLICE,
    SK_GPU_MILLI,
    SK_CAPACITY,
    SK_TOPOLOGY,
    SK_COMMAND,
    SK_ENV,
    SK_WORKDIR,
    SK_CHECKPOINT,
    SK_PREEMPTIBLE,
    SK_TIME_LIMIT,
    SK_MAX_RETRIES,
    SK_IDEMPOTENCY,
    SK_USER,
    SK_AFTER,
    SK_AFTER_OR,
    SK_SINGLETON,
    SK_ARRAY,
    SK_COUNT
};

static const char *const spec_keys[SK_COUNT] = {
    "name",
    "queue",
    "priority",
    "tasks",
    "gpus_per_task",
    "cpus_per_task",
    "memory_mb_per_task",
    "gpu_type",
    "gpu_slice",
    "gpu_milli",
    "capacity",
    "topology",
    "command",
    "env",
    "workdir",
    "checkpoint",
    "preemptible",
    "time_limit_s",
    "max_retries",
    "idempotency_key",
    "user",
    "after",
    "after_or",
    "singleton",
    "array",
};

static int set_workdir(struct queue_spec *s, const cJSON *v, struct mu_err *err)
{
    const char *str;

    char *copy;

    if (queue_json_str(v, "workdir", QUEUE_WORKDIR_MAX, &str, err) != 0)
        return -1;
    if (str[0] != '/')
        return mu_json_err_expected(err, MU_E_SPEC, "workdir", "an absolute path", v);
    copy = strdup(str);
    if (!copy)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    s->workdir = copy;
    return 0;
}

static int spec_field(struct queue_spec *s, enum spec_key k, const cJSON *v, struct mu_err *err)
{
    const char *path = spec_keys[k];

    switch (k) {
    case SK_NAME:
        return queue_json_printable(v, path, false, s->name, sizeof(s->name), err);
    case SK_QUEUE:
        return mu_json_get_name(v, path, s->queue, sizeof(s->queue), MU_E_SPEC, err);
    case SK_PRIORITY:
        return mu_json_get_int(v, path, -1000000, 1000000, MU_E_SPEC, &s->priority, err);
    case SK_TASKS:
        return get_int32(v, path, 1, QUEUE_MAX_TASKS, &s->tasks, err);
    case SK_GPUS_PER_TASK:
        return get_int32(v, path, 0, QUEUE_MAX_GPUS_TASK, &s->gpus_per_task, err);
    case SK_CPUS_PER_TASK:
        return get_int32(v, path, 0, 4096, &s->cpus_per_task, err);
    case SK_MEMORY:
        return mu_json_get_int(v, path, 0, INT64_C(16) << 20, MU_E_SPEC, &s->memory_mb_per_task,
                               err);
    case SK_GPU_TYPE:
        /* "" is accepted and means any type, as in the struct. */
        if (cJSON_IsString(v) && v->valuestring[0] == '\0')
            return 0;
        return mu_json_get_name(v, path, s->gpu_type, sizeof(s->gpu_type), MU_E_SPEC, err);
    case SK_GPU_SLICE:
        /* A MIG profile; whether the cluster has it is musterd's check (d_intake.c). */
        if (!cJSON_IsString(v) || !mu_mig_profile_is_valid(v->valuestring))
            return mu_json_err_expected(err, MU_E_SPEC, path,
                                        "a MIG profile such as \"3g.40gb\" or \"1g.10gb\"", v);
        mu_strlcpy(s->gpu_slice, v->valuestring, sizeof(s->gpu_slice));
        return 0;
    case SK_GPU_MILLI:
        return get_int32(v, path, 1, 1000, &s->gpu_milli, err);
    case SK_CAPACITY:
        return set_capacity(s, v, err);
    case SK_TOPOLOGY:
        return set_topology(s, v, err);
    case SK_COMMAND:
        return set_command(s, v, err);
    case SK_ENV:
        return set_env(s, v, err);
    case SK_WORKDIR:
        return set_workdir(s, v, err);
    case SK_CHECKPOINT:
        return set_checkpoint(s, v, err);
    case SK_PREEMPTIBLE:
        if (!cJSON_IsBool(v))
            return mu_json_err_expected(err, MU_E_SPEC, path, "true or false", v);
        s->preemptible = cJSON_IsTrue(v);
        return 0;
    case SK_TIME_LIMIT:
        return mu_json_get_int(v, path, 1, 31536000, MU_E_SPEC, &s->time_limit_s, err);
    case SK_MAX_RETRIES:
        return get_int32(v, path, 0, 100, &s->max_retries, err);
    case SK_IDEMPOTENCY:
        return queue_json_printable(v, path, true, s->idempotency_key, sizeof(s->idempotency_key),
                                    err);
    case SK_USER:
        return mu_json_get_name(v, path, s->user, sizeof(s->user), MU_E_SPEC, err);
    case SK_AFTER:
        return queue_spec_after_set(s, v, err);
    case SK_AFTER_OR:
        if (!cJSON_IsBool(v))
            return mu_json_err_expected(err, MU_E_SPEC, path, "true or false", v);
        s->after_or = cJSON_IsTrue(v);
        return 0;
    case SK_SINGLETON:
        if (!cJSON_IsBool(v))
            return mu_json_err_expected(err, MU_E_SPEC, path, "true or false", v);
        s->singleton = cJSON_IsTrue(v);
        return 0;
    case SK_ARRAY:
        return queue_spec_array_set(s, v, err);
    case SK_COUNT:
        break;
    }
    return mu_errf(err, MU_E_SPEC, "%s: unhandled key", path);
}

static void spec_defaults(struct queue_spec *s)
{
    memset(s, 0, sizeof(*s));
    mu_strlcpy(s->queue, "default", sizeof(s->queue));
    s->tasks = 1;
    s->gpus_per_task = 1;
    s->ncapacity = 2;
    s->capacity[0] = CFG_CAPACITY_SPOT;
    s->capacity[1] = CFG_CAPACITY_ON_DEMAND;
    s->checkpoint_signal = SIGUSR1;
    s->checkpoint_grace_s = 60;
    s->preemptible = true;
    s->max_retries = 3;
}

static int spec_walk(struct queue_spec *s, const cJSON *root, struct mu_err *err)
{
    unsigned seen = 0;

    for (const cJSON *it = root->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, spec_keys, SK_COUNT);
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_SPEC, MU_JSON_KEY_QUOTED, "spec", it->string,
                                           spec_keys, SK_COUNT);
        if (seen & (1u << k))
            return mu_errf(err, MU_E_SPEC, "spec: duplicate key '%s'", spec_keys[k]);
        seen |= 1u << k;
        if (spec_field(s, (enum spec_key)k, it, err) != 0)
            return -1;
    }
    if (!(seen & (1u << SK_COMMAND)))
        return mu_errf(err, MU_E_SPEC, "spec: missing required key 'command'");
    if (s->singleton && !s->name[0])
        return mu_errf(err, MU_E_SPEC,
                       "singleton: needs a 'name' (one job of a name and user runs at a time)");
    if (s->gpu_milli > 0 && s->gpu_slice[0])
        return mu_errf(err, MU_E_SPEC,
                       "gpu_milli: not with gpu_slice; a task gets a share of a whole GPU or MIG "
                       "slices");
    if (s->gpu_milli > 0 && s->gpus_per_task != 1)
        return mu_errf(err, MU_E_SPEC,
                       "gpus_per_task: %d with gpu_milli; a task gets a share of one GPU "
                       "(gpus_per_task 1)",
                       s->gpus_per_task);
    if (s->gpu_slice[0] && s->gpus_per_task < 1)
        return mu_errf(err, MU_E_SPEC,
                       "gpus_per_task: 0 with gpu_slice '%s'; it counts the slices each task "
                       "gets (1 or more)",
                       s->gpu_slice);
    return 0;
}

int queue_spec_parse(const char *json, size_t len, struct queue_spec *out, struct mu_err *err)
{
    /* A stream field, usually one line: problems are named by key path and byte. */
    static const struct mu_json_doc doc = {
        .subject = "spec",
        .noun = "job spec",
        .max_bytes = QUEUE_SPEC_MAX_BYTES,
        .max_depth = SPEC_MAX_DEPTH,
        .where = MU_JSON_WHERE_PATH,
    };
    cJSON *root = NULL;
    int rc = -1;

    spec_defaults(out);
    root = mu_json_parse_object(json, len, &doc, MU_E_SPEC, err);
    if (!root)
        goto out;
    if (spec_walk(out, root, err) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        queue_spec_release(out);
    cJSON_Delete(root);
    return rc;
}

void queue_spec_release(struct queue_spec *s)
{
    if (!s)
        return;
    for (char **p = s->argv; p && *p; p++)
        free(*p);
    free(s->argv);
    for (char **p = s->env; p && *p; p++)
        free(*p);
    free(s->env);
    free(s->workdir);
    free(s->after);
    free(s->array);
    memset(s, 0, sizeof(*s));
}

/* ---- checks against the cluster config ---- */

/* "default, research" into buf, cut with "..." if it does not fit. */
static void list_queues(const struct cfg *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->nqueues; i++) {
        if (mu_snprintf(buf + n, size - n, "%s%s", i ? ", " : "", c->queues[i].name) != 0) {
            mu_strlcpy(buf + (n < size - 4 ? n : size - 4), "...", 4);
            return;
        }
        n += strlen(buf + n);
    }
}

static void list_levels(const struct cfg *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->nlevels; i++) {
        (void)mu_snprintf(buf + n, size - n, "%s, ", c->levels[i]);
        n += strlen(buf + n);
    }
    (void)mu_snprintf(buf + n, size - n, "node");
}

static bool cap_allowed(const struct queue_spec *s, enum cfg_capacity cap)
{
    for (int t = 0; t < s->ncapacity && t < 2; t++) {
        if (s->capacity[t] == cap)
            return true;
    }
    return false;
}

/* The distinct GPU types of the pools whose capacity type the spec allows: "L40S, H100". */
static void list_gpu_types(const struct queue_spec *s, const struct cfg *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->npools; i++) {
        const struct cfg_pool *p = &c->pools[i];
        bool seen = false;
        if (!cap_allowed(s, p->capacity))
            continue;
        for (int j = 0; j < i && !seen; j++)
            seen = cap_allowed(s, c->pools[j].capacity)
                   && strcmp(c->pools[j].gpu_type, p->gpu_type) == 0;
        if (seen)
            continue;
        if (mu_snprintf(buf + n, size - n, "%s%s", n ? ", " : "", p->gpu_type) != 0) {
            mu_strlcpy(buf + (n < size - 4 ? n : size - 4), "...", 4);
            return;
        }
        n += strlen(buf + n);
    }
}

/* "spot or on-demand" for the spec's capacity list. */
static void caps_text(const struct queue_spec *s, char *buf, size_t size)
{
    if (s->ncapacity == 2)
        (void)mu_snprintf(buf, size, "%s or %s", cfg_capacity_name(s->capacity[0]),
                          cfg_capacity_name(s->capacity[1]));
    else
        (void)mu_snprintf(buf, size, "%s", cfg_capacity_name(s->capacity[0]));
}

/* What the allowed pools offer, summed up for the messages. */
struct fit_info {
    bool any_type;     /* some pool has an allowed capacity type */
    bool any_gpu;      /* ... and the GPU type */
    int largest;       /* largest gpus_per_node among those */
    int64_t max_tasks; /* most tasks the max_gpus caps admit, in the best capacity type */
};

/* Returns true when the gang could ever be placed in some allowed capacity type. */
static bool pools_fit(const struct queue_spec *s, const struct cfg *c, struct fit_info *fi)
{
    int64_t gang = (int64_t)s->tasks * s->gpus_per_task;
    /* A requirement that relaxes with time is no bar to fitting some day. */
    bool node = strcmp(s->topo_required, "node") == 0 && !s->topo_relax_after_s;

    memset(fi, 0, sizeof(*fi));
    for (int t = 0; t < s->ncapacity && t < 2; t++) {
        int64_t tasks_fit = 0;
        bool uncapped = false;
        for (int i = 0; i < c->npools; i++) {
            const struct cfg_pool *p = &c->pools[i];
            if (p->capacity != s->capacity[t])
                continue;
            fi->any_type = true;
            if (s->gpu_type[0] && strcmp(p->gpu_type, s->gpu_type) != 0)
                continue;
            if (s->gpu_milli > 0 && !p->shared)
                continue;
            fi->any_gpu = true;
            if (s->gpu_slice[0] || s->gpu_milli > 0)
                return true; /* slices: the nodes' MIG layout decides (musterd's reasons) */
            if (p->gpus_per_node > fi->largest)
                fi->largest = p->gpus_per_node;
            if (p->gpus_per_node < s->gpus_per_task)
                continue;
            if (node) {
                bool cap_ok = p->max_gpus == 0 || p->max_gpus >= gang;
                if (cap_ok && p->gpus_per_node >= gang)
                    return true;
                continue;
            }
            if (p->max_gpus == 0 || s->gpus_per_task == 0)
                uncapped = true;
            else
                tasks_fit += p->max_gpus / s->gpus_per_task;
        }
        if (!node && (uncapped || tasks_fit >= s->tasks))
            return true;
        if (tasks_fit > fi->max_tasks)
            fi->max_tasks = tasks_fit;
    }
    return false;
}

static int check_pools(const struct queue_spec *s, const struct cfg *c, struct mu_err *err)
{
    struct fit_info fi;
    char list[160];
    char caps[32];
    char with[CFG_NAME_MAX + 8] = "";
    int64_t gang = (int64_t)s->tasks * s->gpus_per_task;

    if (pools_fit(s, c, &fi))
        return 0;
    caps_text(s, caps, sizeof(caps));
    if (s->gpu_type[0])
        (void)mu_snprintf(with, sizeof(with), " with %s", s->gpu_type);
    if (!fi.any_type)
        return mu_errf(err, MU_E_SPEC, "capacity: no %s pool is configured", caps);
    if (!fi.any_gpu && s->gpu_milli > 0)
        return mu_errf(err, MU_E_SPEC,
                       "gpu_milli: no %s pool%s is shared; hint: mark a pool \"shared\": true in "
                       "the config (time-sliced GPUs)",
                       caps, with);
    if (!fi.any_gpu) {
        list_gpu_types(s, c, list, sizeof(list));
        return mu_errf(err, MU_E_SPEC, "gpu_type: no %s pool has GPU type '%s'; available: %s",
                       caps, s->gpu_type, list);
    }
    if (fi.largest < s->gpus_per_task)
        return mu_errf(err, MU_E_SPEC,
                       "gpus_per_task: needs %d GPUs per task; the largest %s node%s has %d",
                       s->gpus_per_task, caps, with, fi.largest);
    if (strcmp(s->topo_required, "node") == 0 && !s->topo_relax_after_s) {
        if (fi.largest < gang)
            return mu_errf(err, MU_E_SPEC,
                           "topology.required: 'node' needs %d tasks x %d GPUs = %lld GPUs on "
                           "one node; the largest %s node%s has %d",
                           s->tasks, s->gpus_per_task, (long long)gang, caps, with, fi.largest);
        return mu_errf(err, MU_E_SPEC,
                       "topology.required: 'node' needs %lld GPUs on one node; the max_gpus cap "
                       "of every %s pool%s that large is smaller",
                       (long long)gang, caps, with);
    }
    return mu_errf(err, MU_E_SPEC,
                   "tasks: needs %d tasks x %d GPUs; the max_gpus caps of the %s pools%s admit at "
                   "most %lld such tasks of one capacity type",
                   s->tasks, s->gpus_per_task, caps, with, (long long)fi.max_tasks);
}

int queue_spec_check(const struct queue_spec *s, const struct cfg *c, struct mu_err *err)
{
    char list[160];
    const char *levels[2] = { s->topo_required, s->topo_preferred };
    static const char *const level_keys[2] = { "topology.required", "topology.preferred" };

    if (!cfg_queue_find(c, s->queue)) {
        list_queues(c, list, sizeof(list));
        return mu_errf(err, MU_E_SPEC, "queue: unknown queue '%s'; configured: %s", s->queue, list);
    }
    for (int i = 0; i < 2; i++) {
        if (levels[i][0] && cfg_level_index(c, levels[i]) < 0) {
            list_levels(c, list, sizeof(list));
            return mu_errf(err, MU_E_SPEC, "%s: unknown level '%s'; configured: %s", level_keys[i],
                           levels[i], list);
        }
    }
    if (c->max_time_limit_s > 0 && s->time_limit_s > c->max_time_limit_s)
        return mu_errf(err, MU_E_SPEC,
                       "time_limit_s: %lld is over the cluster's max_time_limit_s (%d); hint: ask "
                       "for %d or less, or split the work and resume from a checkpoint",
                       (long long)s->time_limit_s, c->max_time_limit_s, c->max_time_limit_s);
    if (s->array && s->array->count > c->max_array_size)
        return mu_errf(err, MU_E_SPEC,
                       "array: '%s' has %lld elements, over the cluster's max_array_size (%d); "
                       "hint: split it into arrays of at most %d",
                       s->array->text, (long long)s->array->count, c->max_array_size,
                       c->max_array_size);
    if (s->array && s->nenv > QUEUE_MAX_ENV - QUEUE_ARRAY_ENV)
        return mu_errf(err, MU_E_SPEC,
                       "env: %d entries, at most %d in an array (each element gets %d more)",
                       s->nenv, QUEUE_MAX_ENV - QUEUE_ARRAY_ENV, QUEUE_ARRAY_ENV);
    if (s->after_or && s->singleton)
        return mu_errf(err, MU_E_SPEC,
                       "after_or: not with singleton (which waits for every job of its name); "
                       "hint: make the singleton job depend on one that has the alternatives");
    if (s->array && s->singleton)
        return mu_errf(err, MU_E_SPEC,
                       "singleton: not with an array; hint: \"%%1\" after the indices runs one "
                       "element at a time");
    if (c->npools == 0)
        return 0;
    return check_pools(s, c, err);
}

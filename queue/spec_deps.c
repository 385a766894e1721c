/* SPDX-License-Identifier: MIT */
/*
 * The job spec's pipeline keys (issue #12), beside queue/spec.c: "after", the dependencies (job
 * ids, or {"job"|"key": ..., "when": ...} objects, at most QUEUE_MAX_AFTER), and "array" (its
 * syntax is queue/array.c's).  Like the rest of the spec they only check form here; musterd
 * resolves the jobs named (an unknown one rejects the job) and checks the array's size against
 * the config (queue_spec_check).
 */
#include "queue/queue.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_json.h"
#include "queue/internal.h"

#include "common/mu_banned.h"

#define PATH_LEN 96 /* "after[63].when" */

static const char *const when_names[] = { "ok", "notok", "any", "started" };

const char *queue_when_name(enum queue_when w)
{
    return (unsigned)w < MU_ARRAY_LEN(when_names) ? when_names[w] : "?";
}

int queue_when_parse(const char *text, enum queue_when *out)
{
    int k = mu_json_key_index(text, when_names, MU_ARRAY_LEN(when_names));
    if (k < 0)
        return -1;
    *out = (enum queue_when)k;
    return 0;
}

/* Here rather than in queue/client.c: the spec parser needs it, and the client's submit runs
 * the spec parser (queue_submit_check). */
bool queue_job_id_is_valid(const char *id)
{
    const char *p = id;
    size_t digits = 0;

    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (digits == 0 || digits > 20 || *p != '-')
        return false;
    p++;
    digits = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (digits == 0 || digits > 20)
        return false;
    if (*p == '_') { /* an array element: "<array id>_<index>" */
        p++;
        digits = 0;
        while (*p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
        return digits > 0 && digits <= 7 && *p == '\0';
    }
    return *p == '\0';
}

/* A job id as "after" takes it: a stream entry id. */
static int get_job_ref(const cJSON *v, const char *path, char *dst, size_t size, struct mu_err *err)
{
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size
        || strlen(v->valuestring) >= QUEUE_JOB_ID_MAX || !queue_job_id_is_valid(v->valuestring))
        return mu_json_err_expected(err, MU_E_SPEC, path, "a job id such as \"1732270000123-0\"",
                                    v);
    mu_strlcpy(dst, v->valuestring, size);
    return 0;
}

/* One condition in its object form: {"job": ID} or {"key": KEY}, with an optional "when". */
static int set_after_object(struct queue_after *a,
                            const cJSON *obj,
                            const char *path,
                            struct mu_err *err)
{
    static const char *const keys[] = { "job", "key", "when" };
    char sub[PATH_LEN];
    unsigned seen = 0;

    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, keys, MU_ARRAY_LEN(keys));
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_SPEC, MU_JSON_KEY_QUOTED, path, it->string,
                                           keys, MU_ARRAY_LEN(keys));
        if (seen & (1u << k))
            return mu_errf(err, MU_E_SPEC, "%s: duplicate key '%s'", path, keys[k]);
        seen |= 1u << k;
        (void)mu_snprintf(sub, sizeof(sub), "%s.%s", path, keys[k]);
        if (k == 0 && get_job_ref(it, sub, a->ref, sizeof(a->ref), err) != 0)
            return -1;
        if (k == 1 && queue_json_printable(it, sub, true, a->ref, sizeof(a->ref), err) != 0)
            return -1;
        if (k == 2 && (!cJSON_IsString(it) || queue_when_parse(it->valuestring, &a->when) != 0))
            return mu_json_err_expected(err, MU_E_SPEC, sub,
                                        "\"ok\", \"notok\", \"any\" or \"started\"", it);
    }
    if ((seen & 3u) == 3u)
        return mu_errf(err, MU_E_SPEC, "%s: give 'job' or 'key', not both", path);
    if (!(seen & 3u))
        return mu_errf(err, MU_E_SPEC, "%s: missing 'job' (a job id) or 'key' (an idempotency key)",
                       path);
    a->by_key = (seen & 2u) != 0;
    return 0;
}

int queue_spec_after_set(struct queue_spec *s, const cJSON *arr, struct mu_err *err)
{
    static const char expected[] = "an array of job ids or {\"job\": ID, \"when\": \"ok\"} objects";
    char path[PATH_LEN];
    int n = 0;

    if (!cJSON_IsArray(arr))
        return mu_json_err_expected(err, MU_E_SPEC, "after", expected, arr);
    n = cJSON_GetArraySize(arr);
    if (n > QUEUE_MAX_AFTER)
        return mu_errf(err, MU_E_SPEC,
                       "after: %d conditions, at most %d; hint: make one job depend on the many "
                       "and the rest depend on it",
                       n, QUEUE_MAX_AFTER);
    if (n == 0)
        return 0;
    s->after = calloc((size_t)n, sizeof(*s->after));
    if (!s->after)
        return mu_errf(err, MU_E_NOMEM, "out of memory copying the job spec");
    n = 0;
    for (const cJSON *it = arr->child; it; it = it->next, n++) {
        struct queue_after *a = &s->after[n];
        (void)mu_snprintf(path, sizeof(path), "after[%d]", n);
        if (cJSON_IsObject(it)) {
            if (set_after_object(a, it, path, err) != 0)
                return -1;
        } else if (get_job_ref(it, path, a->ref, sizeof(a->ref), err) != 0) {
            return -1;
        }
        s->nafter = n + 1;
    }
    return 0;
}

int queue_spec_array_set(struct queue_spec *s, const cJSON *v, struct mu_err *err)
{
    if (!cJSON_IsString(v))
        return mu_json_err_expected(err, MU_E_SPEC, "array",
                                    "a string such as \"0-99\", \"1,3,5-7\" or \"0-999:10%8\"", v);
    s->array = malloc(sizeof(*s->array));
    if (!s->array)
        return mu_errf(err, MU_E_NOMEM, "out of memory copying the job spec");
    return queue_array_parse(v->valuestring, s->array, err);
}

/* SPDX-License-Identifier: MIT */
/*
 * Reading back the files a shim leaves (taskrec.c writes them): the task record and the exit
 * file, parsed with cJSON.  Only the worker reads them, so only the worker links cJSON here;
 * muster-shim, which writes them, links no JSON library.  A restarted worker trusts nothing in
 * them blindly: each is read through common's guarded read (mu_file_read_small: no symlink, no
 * FIFO, at most WRK_REC_MAX_BYTES), every field is range-checked, and a file that does not
 * parse is reported and skipped.
 */
#include "worker/wrk.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* An integer member in lo..hi; absent is *out = dflt unless required. */
static int get_int(const cJSON *o,
                   const char *what,
                   const char *key,
                   bool required,
                   int64_t lo,
                   int64_t hi,
                   int64_t dflt,
                   int64_t *out,
                   struct mu_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    double d;

    if (!v) {
        if (required)
            return mu_errf(err, MU_E_PARSE, "%s: missing \"%s\"", what, key);
        *out = dflt;
        return 0;
    }
    d = cJSON_IsNumber(v) ? v->valuedouble : -1e300;
    if (!cJSON_IsNumber(v) || d != d || d < (double)lo || d > (double)hi || d != (double)(int64_t)d)
        return mu_errf(err, MU_E_RANGE, "%s: \"%s\": expected an integer in %" PRId64 "..%" PRId64,
                       what, key, lo, hi);
    *out = (int64_t)d;
    return 0;
}

/* Parses len bytes of text as a JSON object; NULL with err. */
static cJSON *parse_object(const char *text, size_t len, const char *what, struct mu_err *err)
{
    cJSON *o;

    if (!text) {
        mu_errf(err, MU_E_INVAL, "%s: no text", what);
        return NULL;
    }
    if (len > WRK_REC_MAX_BYTES) {
        mu_errf(err, MU_E_TOOBIG, "%s of %zu bytes, more than %u", what, len, WRK_REC_MAX_BYTES);
        return NULL;
    }
    if (memchr(text, '\0', len)) {
        mu_errf(err, MU_E_PARSE, "%s holds a NUL byte", what);
        return NULL;
    }
    o = cJSON_ParseWithLength(text, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        mu_errf(err, MU_E_PARSE, "%s: not a JSON object", what);
        return NULL;
    }
    return o;
}

#define MAX_MS ((int64_t)1 << 53) /* exact in a double */

int wrk_taskrec_parse(const char *text, size_t len, struct wrk_taskrec *out, struct mu_err *err)
{
    static const char what[] = "task record";
    struct wrk_taskrec r;
    const cJSON *job;
    const cJSON *gpus;
    const cJSON *g;
    int64_t v[9] = { 0 };
    cJSON *o = parse_object(text, len, what, err);
    int rc = -1;

    if (!o)
        return -1;
    memset(&r, 0, sizeof(r));
    job = cJSON_GetObjectItemCaseSensitive(o, "job");
    if (!cJSON_IsString(job) || !mu_name_is_valid(job->valuestring, PROTO_JOB_MAX - 1)) {
        mu_errf(err, MU_E_PARSE, "%s: \"job\": expected a job id", what);
        goto out;
    }
    mu_strlcpy(r.ref.job, job->valuestring, sizeof(r.ref.job));
    if (get_int(o, what, "task", true, 0, INT_MAX, 0, &v[0], err) != 0
        || get_int(o, what, "attempt", true, 1, INT_MAX, 0, &v[1], err) != 0
        || get_int(o, what, "pid", true, 2, INT_MAX, 0, &v[2], err) != 0
        || get_int(o, what, "shim_pid", true, 2, INT_MAX, 0, &v[3], err) != 0
        || get_int(o, what, "shim_start", false, 0, MAX_MS, 0, &v[8], err) != 0
        || get_int(o, what, "started_ms", false, 0, MAX_MS, 0, &v[4], err) != 0
        || get_int(o, what, "ckpt_signal", false, 0, 255, 0, &v[5], err) != 0
        || get_int(o, what, "grace_s", false, 0, INT_MAX, 0, &v[6], err) != 0
        || get_int(o, what, "uid", false, -1, INT_MAX, -1, &v[7], err) != 0)
        goto out;
    r.ref.task = (int)v[0];
    r.ref.attempt = (int)v[1];
    r.ref.state = PROTO_TASK_RUNNING;
    r.ref.pid = (int)v[2];
    r.shim_pid = (int)v[3];
    r.shim_start = (uint64_t)v[8];
    r.started_ms = (uint64_t)v[4];
    r.ckpt_signal = (int)v[5];
    r.grace_s = (int)v[6];
    r.uid = (int)v[7];
    gpus = cJSON_GetObjectItemCaseSensitive(o, "gpus");
    if (gpus && (!cJSON_IsArray(gpus) || cJSON_GetArraySize(gpus) > PROTO_MAX_GPUS)) {
        mu_errf(err, MU_E_PARSE, "%s: \"gpus\": expected an array of at most %d indices", what,
                PROTO_MAX_GPUS);
        goto out;
    }
    cJSON_ArrayForEach(g, gpus)
    {
        if (!cJSON_IsNumber(g) || g->valuedouble < 0 || g->valuedouble > PROTO_MAX_GPUS * 64
            || g->valuedouble != (double)(int)g->valuedouble) {
            mu_errf(err, MU_E_RANGE, "%s: \"gpus\"[%d]: expected a GPU index", what, r.ngpus);
            goto out;
        }
        r.gpus[r.ngpus++] = (int)g->valuedouble;
    }
    *out = r;
    rc = 0;
out:
    cJSON_Delete(o);
    return rc;
}

int wrk_taskexit_parse(const char *text, size_t len, struct wrk_taskexit *out, struct mu_err *err)
{
    static const char what[] = "exit record";
    int64_t code = 0;
    int64_t sig = 0;
    int64_t ended = 0;
    const cJSON *fenced;
    const cJSON *oom;
    cJSON *o = parse_object(text, len, what, err);
    int rc = -1;

    if (!o)
        return -1;
    if (get_int(o, what, "exit_code", true, INT_MIN, INT_MAX, 0, &code, err) != 0
        || get_int(o, what, "signal", true, 0, 255, 0, &sig, err) != 0
        || get_int(o, what, "ended_ms", false, 0, MAX_MS, 0, &ended, err) != 0)
        goto out;
    fenced = cJSON_GetObjectItemCaseSensitive(o, "fenced");
    if (fenced && !cJSON_IsBool(fenced)) {
        mu_errf(err, MU_E_PARSE, "%s: \"fenced\": expected true or false", what);
        goto out;
    }
    oom = cJSON_GetObjectItemCaseSensitive(o, "oom_killed");
    if (oom && !cJSON_IsBool(oom)) {
        mu_errf(err, MU_E_PARSE, "%s: \"oom_killed\": expected true or false", what);
        goto out;
    }
    out->exit_code = (int)code;
    out->signal = (int)sig;
    out->ended_ms = (uint64_t)ended;
    out->fenced = cJSON_IsTrue(fenced);
    out->oom_killed = cJSON_IsTrue(oom);
    rc = 0;
out:
    cJSON_Delete(o);
    return rc;
}

int wrk_taskrec_read(const char *path, struct wrk_taskrec *out, struct mu_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int r = mu_file_read_small(path, WRK_REC_MAX_BYTES, &text, &len, NULL, err);

    if (r == 1 && wrk_taskrec_parse(text, len, out, err) != 0) {
        mu_err_prefix(err, "'%s': ", path);
        r = -1;
    }
    free(text);
    return r;
}

int wrk_taskexit_read(const char *path, struct wrk_taskexit *out, struct mu_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int r = mu_file_read_small(path, WRK_REC_MAX_BYTES, &text, &len, NULL, err);

    if (r == 1 && wrk_taskexit_parse(text, len, out, err) != 0) {
        mu_err_prefix(err, "'%s': ", path);
        r = -1;
    }
    free(text);
    return r;
}

/* SPDX-License-Identifier: MIT */
/*
 * libmuster (lib/muster.h): the client library for training pipelines, built on the queue
 * module's client half (queue_submit, queue_job_read, queue_jobs_read, queue_events_*,
 * queue_control_post), so that it reads and writes Redis exactly as musterctl does (docs/design.md
 * §6).
 *
 * Idempotent submission is queue_submit_idem, one Lua script run by Redis (EVAL), so two
 * processes racing with the same key still make one job: it returns the id under
 * <prefix>idem:<key> if there is one, and otherwise XADDs the submission and sets the key to the
 * new id (SET NX).  musterd, taking in a spec with a key, also does SET NX and only drops the job
 * as a duplicate when the key holds a different id, so both sides agree.  libmuster's part is to
 * put the key into the spec text itself, so that the stored spec carries it.  Waiting follows the
 * events stream with blocking reads of at most 1 s (below the connection's 2 s timeout) and
 * re-reads the job hash when an event names the job, or once a second, so a lost event never leaves
 * a caller waiting for ever.
 *
 * Internal errors are struct mu_err; they are copied into struct muster_error (same codes) at
 * the API boundary.  Only muster_* symbols are exported from the shared library (muster.map).
 */
#include "lib/muster.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu.h"
#include "queue/queue.h"

#include "common/mu_banned.h"

#define WAIT_SLICE_MS 1000 /* one blocking XREAD; under the connection's 2 s timeout */
#define REREAD_MS     1000 /* re-read a waited-for job at least this often */
#define IDEM_KEY_MAX  255  /* queue_spec.idempotency_key holds 255 characters */

struct muster {
    struct queue *q;
};

struct muster_job {
    cJSON *obj;     /* the record as queue_job_read built it */
    size_t n;       /* fields in names/texts */
    char **names;   /* heap; field names */
    char **texts;   /* heap; each field's value as text */
    char state[32]; /* copy of the state field ("" when missing) */
};

struct muster_job_list {
    struct muster_job **jobs; /* heap array of n owned jobs */
    size_t n;
};

struct muster_events {
    struct muster *m;        /* borrowed; outlives the follower */
    char job[MUSTER_ID_MAX]; /* "" = every job */
    char last_id[MUSTER_ID_MAX];
    cJSON *pending; /* entries read but not handed out yet (array), or NULL */
    int next;       /* index of the next entry of pending */
};

/* ---------------- errors and small helpers ---------------- */

static int fail(struct muster_error *err, const struct mu_err *e)
{
    if (err) {
        err->code = e->code;
        mu_strlcpy(err->message, e->msg, sizeof(err->message));
    }
    return -1;
}

static int failf(struct muster_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int failf(struct muster_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        (void)vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void ok(struct muster_error *err)
{
    if (err) {
        err->code = MUSTER_OK;
        err->message[0] = '\0';
    }
}

const char *muster_version(void)
{
    return MUSTER_VERSION;
}

int muster_final_states(char *buf, size_t size)
{
    return buf ? queue_final_state_names(buf, size) : -1;
}

const char *muster_code_name(int code)
{
    switch (code) {
    case MUSTER_OK:
        return "MUSTER_OK";
    case MUSTER_E_INVAL:
        return "MUSTER_E_INVAL";
    case MUSTER_E_NOMEM:
        return "MUSTER_E_NOMEM";
    case MUSTER_E_IO:
        return "MUSTER_E_IO";
    case MUSTER_E_PARSE:
        return "MUSTER_E_PARSE";
    case MUSTER_E_RANGE:
        return "MUSTER_E_RANGE";
    case MUSTER_E_NOTFOUND:
        return "MUSTER_E_NOTFOUND";
    case MUSTER_E_REDIS:
        return "MUSTER_E_REDIS";
    case MUSTER_E_SPEC:
        return "MUSTER_E_SPEC";
    case MUSTER_E_TOOBIG:
        return "MUSTER_E_TOOBIG";
    case MUSTER_E_STATE:
        return "MUSTER_E_STATE";
    default:
        return "unknown";
    }
}

void muster_free(void *p)
{
    free(p);
}

static int check_id(const char *id, struct muster_error *err)
{
    if (!id)
        return failf(err, MUSTER_E_INVAL, "job id is NULL");
    if (!queue_job_id_is_valid(id))
        return failf(err, MUSTER_E_INVAL,
                     "'%.64s' is not a job id\nhint: job ids look like 1732270000123-0", id);
    return 0;
}

/* ---------------- connection ---------------- */

struct muster *muster_connect(const char *url, const char *prefix, struct muster_error *err)
{
    struct mu_err e;
    struct muster *m;

    if (!url) {
        url = getenv("MUSTER_REDIS_URL");
        if (!url || !url[0])
            url = MU_REDIS_URL_DEFAULT;
    }
    if (!prefix)
        prefix = MU_KEY_PREFIX_DEFAULT;
    m = calloc(1, sizeof(*m));
    if (!m) {
        failf(err, MUSTER_E_NOMEM, "out of memory");
        return NULL;
    }
    m->q = queue_new(url, prefix, &e);
    if (!m->q) {
        fail(err, &e);
        free(m);
        return NULL;
    }
    ok(err);
    return m;
}

void muster_close(struct muster *m)
{
    if (!m)
        return;
    queue_free(m->q);
    free(m);
}

/* ---------------- submitting ---------------- */

static int copy_id(const char *id, char *id_out, size_t id_size, struct muster_error *err)
{
    if (!id_out || mu_strlcpy(id_out, id, id_size) >= id_size)
        return failf(err, MUSTER_E_TOOBIG, "job id '%s' does not fit in %zu bytes", id,
                     id_out ? id_size : 0);
    return 0;
}

static bool idem_key_is_valid(const char *key)
{
    size_t len = 0;

    for (const unsigned char *p = (const unsigned char *)key; *p; p++, len++) {
        if (*p < 0x20 || *p > 0x7e)
            return false;
    }
    return len > 0 && len <= IDEM_KEY_MAX;
}

/* queue_submit_idem (one Lua EVAL) for a spec that already holds "idempotency_key": key. */
static int submit_idem_raw(struct muster *m,
                           const char *spec_json,
                           const char *key,
                           char *id_out,
                           size_t id_size,
                           bool *created,
                           struct muster_error *err)
{
    struct mu_err e;
    char id[QUEUE_JOB_ID_MAX];
    bool made = false;

    if (queue_submit_idem(m->q, spec_json, key, id, sizeof(id), &made, &e) != 0)
        return fail(err, &e);
    if (copy_id(id, id_out, id_size, err) != 0)
        return -1;
    if (created)
        *created = made;
    return 0;
}

int muster_submit_idempotent(struct muster *m,
                             const char *spec_json,
                             const char *key,
                             char *id_out,
                             size_t id_size,
                             bool *created,
                             struct muster_error *err)
{
    struct mu_err e;
    struct mu_buf b;
    cJSON *doc = NULL;
    const cJSON *have;
    const char *open;
    int rc = -1;

    if (!m || !spec_json)
        return failf(err, MUSTER_E_INVAL, "muster_submit_idempotent: NULL argument");
    if (!key || !idem_key_is_valid(key))
        return failf(err, MUSTER_E_INVAL,
                     "idempotency key '%.64s' is not 1..%d printable ASCII characters",
                     key ? key : "(null)", IDEM_KEY_MAX);
    mu_buf_init(&b, QUEUE_SPEC_MAX_BYTES);
    doc = cJSON_Parse(spec_json);
    if (!cJSON_IsObject(doc)) {
        failf(err, MUSTER_E_PARSE, "spec is not a JSON object; an idempotency key cannot be added");
        goto out;
    }
    have = cJSON_GetObjectItemCaseSensitive(doc, "idempotency_key");
    if (have) {
        if (!cJSON_IsString(have) || strcmp(have->valuestring, key) != 0) {
            failf(err, MUSTER_E_SPEC, "spec already holds a different idempotency_key than '%.64s'",
                  key);
            goto out;
        }
        rc = submit_idem_raw(m, spec_json, key, id_out, id_size, created, err);
        goto out;
    }
    /* Splice the key in after the opening brace, keeping the caller's text (and its numbers)
     * exactly as written. */
    open = strchr(spec_json, '{');
    if (!MU_ALWAYS(open)) {
        failf(err, MUSTER_E_PARSE, "spec is not a JSON object");
        goto out;
    }
    if (mu_buf_append(&b, spec_json, (size_t)(open - spec_json) + 1, &e) != 0
        || mu_buf_append(&b, "\"idempotency_key\":", 18, &e) != 0
        || mu_buf_append_json_str(&b, key, &e) != 0
        || (doc->child && mu_buf_append(&b, ",", 1, &e) != 0)
        || mu_buf_append(&b, open + 1, strlen(open + 1), &e) != 0) {
        fail(err, &e);
        goto out;
    }
    rc = submit_idem_raw(m, b.data, key, id_out, id_size, created, err);
out:
    mu_buf_release(&b);
    cJSON_Delete(doc);
    if (rc == 0)
        ok(err);
    return rc;
}

int muster_submit(struct muster *m,
                  const char *spec_json,
                  char *id_out,
                  size_t id_size,
                  bool *created,
                  struct muster_error *err)
{
    struct mu_err e;
    char id[QUEUE_JOB_ID_MAX];
    cJSON *doc;
    const cJSON *key;
    int rc;

    if (!m || !spec_json)
        return failf(err, MUSTER_E_INVAL, "muster_submit: NULL argument");
    doc = cJSON_Parse(spec_json);
    key = cJSON_GetObjectItemCaseSensitive(doc, "idempotency_key");
    if (cJSON_IsObject(doc) && cJSON_IsString(key)) {
        char k[IDEM_KEY_MAX + 1];
        if (mu_strlcpy(k, key->valuestring, sizeof(k)) >= sizeof(k) || !idem_key_is_valid(k)) {
            cJSON_Delete(doc);
            return failf(err, MUSTER_E_INVAL,
                         "idempotency_key: expected 1..%d printable ASCII characters",
                         IDEM_KEY_MAX);
        }
        cJSON_Delete(doc);
        return muster_submit_idempotent(m, spec_json, k, id_out, id_size, created, err);
    }
    cJSON_Delete(doc);
    /* Anything else goes as written: queue_submit parses it as musterd does first (MUSTER_E_SPEC
     * with musterd's message, nothing written); what needs the cluster config musterd checks,
     * rejecting such a job with a message the job id lets the caller read. */
    if (queue_submit(m->q, spec_json, id, sizeof(id), &e) != 0)
        return fail(err, &e);
    rc = copy_id(id, id_out, id_size, err);
    if (rc == 0) {
        if (created)
            *created = true;
        ok(err);
    }
    return rc;
}

/* ---------------- job snapshots ---------------- */

/* The public states are queue.h's, number for number: one table of names (queue/state.c). */
_Static_assert((int)MUSTER_STATE_PENDING == (int)QUEUE_PENDING
                   && (int)MUSTER_STATE_PREEMPTING == (int)QUEUE_PREEMPTING
                   && (int)MUSTER_STATE_REJECTED == (int)QUEUE_REJECTED
                   && (int)MUSTER_STATE_TIMEOUT == (int)QUEUE_TIMEOUT,
               "enum muster_state must match enum queue_state");

const char *muster_state_name(enum muster_state state)
{
    return queue_state_name((enum queue_state)state); /* "UNKNOWN" outside the table */
}

bool muster_state_is_final(enum muster_state state)
{
    return (int)state >= 0 && queue_state_is_final((enum queue_state)state);
}

/* Exact names only: the hash holds what musterd wrote. */
static enum muster_state state_parse(const char *text)
{
    enum queue_state s;
    if (queue_state_parse(text, &s) != 0 || strcmp(text, queue_state_name(s)) != 0)
        return MUSTER_STATE_UNKNOWN;
    return (enum muster_state)s;
}

void muster_job_free(struct muster_job *job)
{
    if (!job)
        return;
    for (size_t i = 0; i < job->n; i++) {
        free(job->names[i]);
        free(job->texts[i]);
    }
    free(job->names);
    free(job->texts);
    cJSON_Delete(job->obj);
    free(job);
}

/* One field's value as text: strings as they are, numbers in decimal, the rest as JSON. */
static char *item_text(const cJSON *item)
{
    char num[32];

    if (cJSON_IsString(item))
        return strdup(item->valuestring);
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        /* Integers (the common case: ids, counts, times in ms) print without a fraction. */
        if (d >= -9007199254740992.0 && d <= 9007199254740992.0 && d == (double)(int64_t)d)
            (void)snprintf(num, sizeof(num), "%lld", (long long)d);
        else
            (void)snprintf(num, sizeof(num), "%.17g", d);
        return strdup(num);
    }
    return cJSON_PrintUnformatted(item);
}

/* Makes a snapshot that takes obj (a job object); obj is the caller's again on failure. */
static struct muster_job *job_take(cJSON *obj, struct mu_err *e)
{
    struct muster_job *job = calloc(1, sizeof(*job));
    const cJSON *item;
    size_t n = (size_t)cJSON_GetArraySize(obj);

    if (!job)
        goto nomem;
    job->names = calloc(n + 1, sizeof(char *));
    job->texts = calloc(n + 1, sizeof(char *));
    if (!job->names || !job->texts)
        goto nomem;
    cJSON_ArrayForEach(item, obj)
    {
        if (job->n >= n || !item->string)
            break;
        job->names[job->n] = strdup(item->string);
        job->texts[job->n] = item_text(item);
        job->n++;
        if (!job->names[job->n - 1] || !job->texts[job->n - 1])
            goto nomem;
    }
    item = cJSON_GetObjectItemCaseSensitive(obj, QUEUE_F_STATE);
    if (cJSON_IsString(item))
        mu_strlcpy(job->state, item->valuestring, sizeof(job->state));
    job->obj = obj;
    return job;
nomem:
    muster_job_free(job);
    mu_errf(e, MU_E_NOMEM, "out of memory");
    return NULL;
}

/* Reads job id into *out (NULL when absent). */
static int job_read(struct muster *m, const char *id, struct muster_job **out, struct mu_err *e)
{
    cJSON *obj = NULL;

    *out = NULL;
    if (queue_job_read(m->q, id, &obj, e) != 0)
        return -1;
    if (!obj)
        return 0;
    *out = job_take(obj, e);
    if (!*out) {
        cJSON_Delete(obj);
        return -1;
    }
    return 0;
}

int muster_job_get(struct muster *m,
                   const char *id,
                   struct muster_job **out,
                   struct muster_error *err)
{
    struct mu_err e;

    if (!out)
        return failf(err, MUSTER_E_INVAL, "muster_job_get: out is NULL");
    *out = NULL;
    if (!m)
        return failf(err, MUSTER_E_INVAL, "muster_job_get: NULL connection");
    if (check_id(id, err) != 0)
        return -1;
    if (job_read(m, id, out, &e) != 0)
        return fail(err, &e);
    ok(err);
    return 0;
}

const char *muster_job_field(const struct muster_job *job, const char *name)
{
    for (size_t i = 0; job && name && i < job->n; i++) {
        if (strcmp(job->names[i], name) == 0)
            return job->texts[i];
    }
    return NULL;
}

static const char *field_or_empty(const struct muster_job *job, const char *name)
{
    const char *v = muster_job_field(job, name);
    return v ? v : "";
}

static int64_t field_i64(const struct muster_job *job, const char *name)
{
    const char *v = muster_job_field(job, name);
    int64_t num = 0;

    if (!v || mu_parse_i64(v, INT64_MIN, INT64_MAX, &num, NULL) != 0)
        return 0;
    return num;
}

const char *muster_job_id(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_ID);
}

const char *muster_job_name(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_NAME);
}

const char *muster_job_queue(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_QUEUE);
}

const char *muster_job_user(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_USER);
}

const char *muster_job_state_name(const struct muster_job *job)
{
    return job ? job->state : "";
}

enum muster_state muster_job_state(const struct muster_job *job)
{
    return job ? state_parse(job->state) : MUSTER_STATE_UNKNOWN;
}

bool muster_job_is_final(const struct muster_job *job)
{
    return muster_state_is_final(muster_job_state(job));
}

int muster_job_attempt(const struct muster_job *job)
{
    return (int)field_i64(job, QUEUE_F_ATTEMPT);
}

int muster_job_tasks(const struct muster_job *job)
{
    return (int)field_i64(job, QUEUE_F_TASKS);
}

int muster_job_gpus_per_task(const struct muster_job *job)
{
    return (int)field_i64(job, QUEUE_F_GPUS_PER_TASK);
}

int64_t muster_job_priority(const struct muster_job *job)
{
    return field_i64(job, QUEUE_F_PRIORITY);
}

bool muster_job_exit_code(const struct muster_job *job, int *exit_code)
{
    const char *v = muster_job_field(job, QUEUE_F_EXIT_CODE);
    int64_t num;

    if (!v || mu_parse_i64(v, INT32_MIN, INT32_MAX, &num, NULL) != 0)
        return false;
    if (exit_code)
        *exit_code = (int)num;
    return true;
}

const char *muster_job_error(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_ERROR);
}

const char *muster_job_reason(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_REASON);
}

const char *muster_job_nodes(const struct muster_job *job)
{
    return field_or_empty(job, QUEUE_F_NODES);
}

int64_t muster_job_submitted_at_ms(const struct muster_job *job)
{
    return field_i64(job, QUEUE_F_SUBMITTED_AT);
}

int64_t muster_job_started_at_ms(const struct muster_job *job)
{
    return field_i64(job, QUEUE_F_STARTED_AT);
}

int64_t muster_job_finished_at_ms(const struct muster_job *job)
{
    return field_i64(job, QUEUE_F_FINISHED_AT);
}

char *muster_job_json(const struct muster_job *job)
{
    return job ? cJSON_PrintUnformatted(job->obj) : NULL;
}

/* ---------------- cancel ---------------- */

/* The wait for musterd's word on a cancel sent on one's own stream (access/access.h). */
#define MUSTER_VERDICT_TIMEOUT_MS 10000

int muster_job_cancel(struct muster *m, const char *id, struct muster_error *err)
{
    struct muster_job *job = NULL;
    struct mu_err e;
    char *spec = NULL;
    struct queue_control_req c = { "cancel", id, -1, 0, false, MUSTER_VERDICT_TIMEOUT_MS };
    enum queue_post posted;
    char entry[QUEUE_JOB_ID_MAX];
    bool own = false;
    int rc = -1;

    if (!m)
        return failf(err, MUSTER_E_INVAL, "muster_job_cancel: NULL connection");
    if (check_id(id, err) != 0)
        return -1;
    if (job_read(m, id, &job, &e) != 0) {
        fail(err, &e);
        goto out;
    }
    if (job && muster_job_is_final(job)) {
        rc = 0; /* nothing left to stop */
        goto out;
    }
    if (!job) {
        /* Not taken in yet: musterd cancels it on intake, if it was ever submitted. */
        if (queue_submission_read(m->q, id, &spec, &e) != 0) {
            fail(err, &e);
            goto out;
        }
        if (!spec) {
            failf(err, MUSTER_E_NOTFOUND, "job '%s' not found", id);
            goto out;
        }
    }
    if (queue_control_post(m->q, &c, &posted, &own, entry, sizeof(entry), &e) != 0
        || (own && posted == QUEUE_POST_SENT
            && queue_control_verdict(m->q, entry, c.own_timeout_ms, &e) != 0)) {
        fail(err, &e);
        goto out;
    }
    if (posted != QUEUE_POST_SENT) {
        failf(err, MUSTER_E_STATE,
              "no musterd leads right now (%s" QUEUE_K_LEADER
              " is free): nothing was sent; cancel again "
              "once one leads",
              queue_prefix(m->q));
        goto out;
    }
    rc = 0;
out:
    free(spec);
    muster_job_free(job);
    if (rc == 0)
        ok(err);
    return rc;
}

/* ---------------- waiting ---------------- */

/* The newest entry id of the events stream ("0-0" when empty): where following starts. */
static int events_tail(struct muster *m, char *last_id, size_t size, struct mu_err *e)
{
    cJSON *newest = NULL;

    if (queue_events_read(m->q, NULL, 1, &newest, last_id, size, e) != 0)
        return -1;
    cJSON_Delete(newest);
    return 0;
}

/* Looks through events for a DUPLICATE of the waited-for job; fills e when there is one. */
static bool events_name_duplicate(const cJSON *events, const char *id, struct mu_err *e)
{
    const cJSON *ev;

    cJSON_ArrayForEach(ev, events)
    {
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(ev, QUEUE_E_STATE);
        const cJSON *reason = cJSON_GetObjectItemCaseSensitive(ev, QUEUE_E_REASON);
        if (cJSON_IsString(state) && strcmp(state->valuestring, QUEUE_E_DUPLICATE) == 0) {
            mu_errf(e, MU_E_STATE, "job '%s' was dropped as a duplicate: %s", id,
                    cJSON_IsString(reason) ? reason->valuestring : "idempotency key in use");
            return true;
        }
    }
    return false;
}

int muster_job_wait(struct muster *m,
                    const char *id,
                    int timeout_ms,
                    struct muster_job **out,
                    struct muster_error *err)
{
    struct muster_job *job = NULL;
    struct mu_err e;
    char last_id[MUSTER_ID_MAX];
    char *spec = NULL;
    cJSON *events = NULL;
    uint64_t start = mu_time_mono_ms();
    uint64_t last_read = 0;
    bool first = true;
    bool need_read = true;
    int rc = -1;

    if (!out)
        return failf(err, MUSTER_E_INVAL, "muster_job_wait: out is NULL");
    *out = NULL;
    if (!m)
        return failf(err, MUSTER_E_INVAL, "muster_job_wait: NULL connection");
    if (check_id(id, err) != 0)
        return -1;
    /* Take the stream's tail before the first read, so no event after that read is missed. */
    if (events_tail(m, last_id, sizeof(last_id), &e) != 0)
        goto fail;
    for (;;) {
        uint64_t now = mu_time_mono_ms();
        uint64_t elapsed = now - start;
        int slice;

        if (need_read || now - last_read >= REREAD_MS) {
            muster_job_free(job);
            job = NULL;
            if (job_read(m, id, &job, &e) != 0)
                goto fail;
            last_read = mu_time_mono_ms();
            if (job && muster_job_is_final(job)) {
                rc = 0;
                break;
            }
            if (!job && first) {
                if (queue_submission_read(m->q, id, &spec, &e) != 0)
                    goto fail;
                if (!spec) {
                    mu_errf(&e, MU_E_NOTFOUND, "job '%s' not found", id);
                    goto fail;
                }
            }
            first = false;
        }
        if (timeout_ms >= 0 && elapsed >= (uint64_t)timeout_ms) {
            rc = 1;
            break;
        }
        slice = WAIT_SLICE_MS;
        if (timeout_ms >= 0 && (uint64_t)timeout_ms - elapsed < (uint64_t)slice)
            slice = (int)((uint64_t)timeout_ms - elapsed);
        if (slice < 1)
            slice = 1; /* BLOCK 0 would wait for ever */
        if (queue_events_wait(m->q, id, slice, last_id, sizeof(last_id), &events, &e) != 0)
            goto fail;
        if (events_name_duplicate(events, id, &e))
            goto fail;
        need_read = cJSON_GetArraySize(events) > 0;
        cJSON_Delete(events);
        events = NULL;
    }
    *out = job;
    job = NULL;
    free(spec);
    ok(err);
    return rc;
fail:
    cJSON_Delete(events);
    free(spec);
    muster_job_free(job);
    return fail(err, &e);
}

/* ---------------- listing ---------------- */

int muster_jobs_list(struct muster *m,
                     const struct muster_filter *filter,
                     struct muster_job_list **out,
                     struct muster_error *err)
{
    struct queue_jobs_filter f = { 0 };
    struct muster_job_list *list = NULL;
    struct mu_err e;
    cJSON *arr = NULL;
    size_t n;
    int rc = -1;

    if (!out)
        return failf(err, MUSTER_E_INVAL, "muster_jobs_list: out is NULL");
    *out = NULL;
    if (!m)
        return failf(err, MUSTER_E_INVAL, "muster_jobs_list: NULL connection");
    if (filter) {
        f.all = filter->all;
        f.queue = filter->queue;
        f.state = filter->state;
        f.limit = filter->limit;
    }
    if (queue_jobs_read(m->q, &f, &arr, &e) != 0)
        return fail(err, &e);
    n = (size_t)cJSON_GetArraySize(arr);
    list = calloc(1, sizeof(*list));
    if (list) /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        list->jobs = calloc(n + 1, sizeof(*list->jobs));
    if (!list || !list->jobs) {
        failf(err, MUSTER_E_NOMEM, "out of memory");
        goto out;
    }
    while (arr->child) {
        cJSON *obj = cJSON_DetachItemViaPointer(arr, arr->child);
        list->jobs[list->n] = job_take(obj, &e);
        if (!list->jobs[list->n]) {
            cJSON_Delete(obj);
            fail(err, &e);
            goto out;
        }
        list->n++;
    }
    *out = list;
    list = NULL;
    ok(err);
    rc = 0;
out:
    muster_job_list_free(list);
    cJSON_Delete(arr);
    return rc;
}

size_t muster_job_list_count(const struct muster_job_list *list)
{
    return list ? list->n : 0;
}

const struct muster_job *muster_job_list_at(const struct muster_job_list *list, size_t i)
{
    return list && i < list->n ? list->jobs[i] : NULL;
}

void muster_job_list_free(struct muster_job_list *list)
{
    if (!list)
        return;
    for (size_t i = 0; i < list->n; i++)
        muster_job_free(list->jobs[i]);
    free(list->jobs);
    free(list);
}

/* ---------------- events ---------------- */

struct muster_events *muster_events_follow(struct muster *m,
                                           const char *job,
                                           bool from_start,
                                           struct muster_error *err)
{
    struct muster_events *ev;
    struct mu_err e;

    if (!m) {
        failf(err, MUSTER_E_INVAL, "muster_events_follow: NULL connection");
        return NULL;
    }
    if (job && check_id(job, err) != 0)
        return NULL;
    ev = calloc(1, sizeof(*ev));
    if (!ev) {
        failf(err, MUSTER_E_NOMEM, "out of memory");
        return NULL;
    }
    ev->m = m;
    if (job)
        mu_strlcpy(ev->job, job, sizeof(ev->job));
    if (from_start) {
        mu_strlcpy(ev->last_id, "0-0", sizeof(ev->last_id));
    } else if (events_tail(m, ev->last_id, sizeof(ev->last_id), &e) != 0) {
        free(ev);
        fail(err, &e);
        return NULL;
    }
    ok(err);
    return ev;
}

static void copy_str_field(const cJSON *obj, const char *name, char *dst, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    mu_strlcpy(dst, cJSON_IsString(v) ? v->valuestring : "", size);
}

static void event_fill(const cJSON *obj, struct muster_event *out)
{
    const cJSON *v;

    memset(out, 0, sizeof(*out));
    copy_str_field(obj, QUEUE_E_ID, out->id, sizeof(out->id));
    copy_str_field(obj, QUEUE_E_JOB, out->job, sizeof(out->job));
    copy_str_field(obj, QUEUE_E_STATE, out->state, sizeof(out->state));
    copy_str_field(obj, QUEUE_E_REASON, out->reason, sizeof(out->reason));
    v = cJSON_GetObjectItemCaseSensitive(obj, QUEUE_E_ATTEMPT);
    if (cJSON_IsNumber(v))
        out->attempt = v->valueint;
    v = cJSON_GetObjectItemCaseSensitive(obj, QUEUE_E_AT);
    if (cJSON_IsNumber(v))
        out->at_ms = (int64_t)v->valuedouble;
}

int muster_events_next(struct muster_events *ev,
                       int timeout_ms,
                       struct muster_event *out,
                       struct muster_error *err)
{
    uint64_t start = mu_time_mono_ms();
    struct mu_err e;

    if (!ev || !out)
        return failf(err, MUSTER_E_INVAL, "muster_events_next: NULL argument");
    for (int round = 0;; round++) {
        uint64_t elapsed = mu_time_mono_ms() - start;
        int slice = WAIT_SLICE_MS;

        if (ev->pending && ev->next < cJSON_GetArraySize(ev->pending)) {
            event_fill(cJSON_GetArrayItem(ev->pending, ev->next), out);
            ev->next++;
            ok(err);
            return 1;
        }
        cJSON_Delete(ev->pending);
        ev->pending = NULL;
        ev->next = 0;
        /* timeout 0 still reads once, to hand out what has arrived. */
        if (timeout_ms >= 0 && round > 0 && elapsed >= (uint64_t)timeout_ms) {
            ok(err);
            return 0;
        }
        if (timeout_ms >= 0 && (uint64_t)timeout_ms < elapsed + (uint64_t)slice)
            slice = elapsed < (uint64_t)timeout_ms ? (int)((uint64_t)timeout_ms - elapsed) : 1;
        if (slice < 1)
            slice = 1; /* BLOCK 0 would wait for ever */
        if (queue_events_wait(ev->m->q, ev->job[0] ? ev->job : NULL, slice, ev->last_id,
                              sizeof(ev->last_id), &ev->pending, &e)
            != 0)
            return fail(err, &e);
    }
}

void muster_events_free(struct muster_events *ev)
{
    if (!ev)
        return;
    cJSON_Delete(ev->pending);
    free(ev);
}

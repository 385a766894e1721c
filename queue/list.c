/* SPDX-License-Identifier: MIT */
/*
 * Listing jobs (musterctl jobs and top, completion, libmuster): the jobs index is scanned newest
 * first in batches of ids, each batch's hashes pipelined a window ahead of the one parsed, and
 * the scan stops once the filter's limit is met.  It comes in two shapes.  Whole job objects
 * (cJSON) are what -o json and libmuster show.  Rows of named fields, read with HMGET, are what
 * tables need: no JSON, one allocation per job, and only the bytes shown (a job's spec can be
 * kilobytes).  At 100,000 jobs the objects cost more than the round trips: a cJSON node per field
 * and a linear search per lookup.
 */
#include "queue/internal.h"

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* Job ids per ZREVRANGE: the first batch is small (or the limit), later ones double up to the
 * most.  A batch's hashes are read a window ahead (queue_keyed_each), so Redis answers the next
 * ones while the client parses these; the window restarts at each batch, and a batch of ids is
 * about a MB. */
#define LIST_BATCH_FIRST 256u
#define LIST_BATCH_MAX   16384u
/* Fields a row may name; the filter's three come on top, those the row does not name. */
#define LIST_FIELDS_MAX 32u

/* The states that are not final (docs/design.md §3); listing without --all shows only these. */
static const char *const active_states[] = { "PENDING", "STARTING", "RUNNING", "PREEMPTING" };

/* The fields the filter reads; rows fetch them after the caller's. */
static const char *const filter_fields[] = { QUEUE_F_STATE, QUEUE_F_QUEUE, QUEUE_F_USER };

static bool filter_match(const struct queue_jobs_filter *f,
                         const char *state,
                         const char *queue,
                         const char *user)
{
    if (f->queue && (!queue || strcmp(queue, f->queue) != 0))
        return false;
    if (f->user && (!user || strcmp(user, f->user) != 0))
        return false;
    if (f->state)
        return state && strcmp(state, f->state) == 0;
    if (f->all)
        return true;
    for (size_t i = 0; state && i < MU_ARRAY_LEN(active_states); i++) {
        if (strcmp(state, active_states[i]) == 0)
            return true;
    }
    return false;
}

/* Keeps one job's reply: 1 when it matched and was kept, 0 when skipped, -1 with err. */
typedef int list_take_fn(void *ctx, const char *id, const redisReply *r, struct mu_err *err);

/* One scan: the command sent per job ("HGETALL key" or "HMGET key fields...") and what keeps
 * it, until limit jobs are taken (0: no limit). */
struct list_scan {
    struct queue_keyed cmd;
    list_take_fn *take;
    void *ctx;
    size_t limit;
    size_t taken;
    const redisReply *ids; /* the batch being read */
};

static int list_one(void *ctx, size_t i, const redisReply *r, struct mu_err *err)
{
    struct list_scan *s = ctx;
    int kept = s->take(s->ctx, s->ids->element[i]->str, r, err);

    if (kept < 0)
        return -1;
    s->taken += (size_t)kept;
    return s->limit && s->taken >= s->limit ? 1 : 0;
}

/* Runs a scan over the jobs index, newest first, until the index ends or limit jobs are taken.
 * Each batch of ids is read through queue_keyed_each, a window of hashes ahead. */
static int list_run(struct queue *q, struct list_scan *s, struct mu_err *err)
{
    size_t batch = s->limit && s->limit < LIST_BATCH_FIRST ? s->limit : LIST_BATCH_FIRST;

    for (size_t start = 0;;
         start += batch, batch = batch * 2 < LIST_BATCH_MAX ? batch * 2 : LIST_BATCH_MAX) {
        redisReply *ids =
            queue_command(q, err, "ZREVRANGE %s" QUEUE_K_JOBS " %llu %llu", q->prefix,
                          (unsigned long long)start, (unsigned long long)(start + batch - 1));
        size_t n;
        int rc = 0;

        if (!ids)
            return -1;
        if (ids->type != REDIS_REPLY_ARRAY) {
            mu_errf(err, MU_E_REDIS,
                    "redis: ZREVRANGE %s" QUEUE_K_JOBS ": unexpected reply type %d", q->prefix,
                    ids->type);
            queue_reply_free(ids);
            return -1;
        }
        n = ids->elements;
        s->ids = ids;
        if (n > 0)
            rc = queue_keyed_each(q, &s->cmd, ids, list_one, s, err);
        queue_reply_free(ids);
        if (rc < 0)
            return -1;
        if (rc == 1 || n < batch)
            return 0;
    }
}

/* ---------------- whole job objects ---------------- */

static const char *object_text(const cJSON *job, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(job, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

struct objects_ctx {
    const struct queue_jobs_filter *f;
    cJSON *acc; /* oldest first: each match goes to the front */
};

static int take_object(void *ctx, const char *id, const redisReply *r, struct mu_err *err)
{
    struct objects_ctx *c = ctx;
    cJSON *job = NULL;

    if (queue_job_from_reply(r, id, &job, err) != 0)
        return -1;
    if (!job
        || !filter_match(c->f, object_text(job, "state"), object_text(job, "queue"),
                         object_text(job, "user"))) {
        cJSON_Delete(job);
        return 0;
    }
    if (!cJSON_InsertItemInArray(c->acc, 0, job)) {
        cJSON_Delete(job);
        return mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
    }
    return 1;
}

int queue_jobs_read(struct queue *q,
                    const struct queue_jobs_filter *f,
                    cJSON **out,
                    struct mu_err *err)
{
    struct objects_ctx c = { .f = f, .acc = cJSON_CreateArray() };
    struct list_scan s = { .take = take_object, .ctx = &c, .limit = f->limit };

    *out = NULL;
    if (!c.acc)
        return mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
    if (queue_keyed_init(&s.cmd, "HGETALL", NULL, 0, err) != 0 || list_run(q, &s, err) != 0) {
        cJSON_Delete(c.acc);
        return -1;
    }
    *out = c.acc;
    return 0;
}

/* ---------------- rows of named fields ---------------- */

struct rows_ctx {
    const struct queue_jobs_filter *f;
    size_t nvalues; /* the caller's fields, then the filter_fields not among them */
    size_t filter_at[MU_ARRAY_LEN(filter_fields)]; /* where each filter field's value is */
    struct queue_job_row **rows;                   /* newest first while scanning */
    size_t n;
    size_t cap;
};

/* One allocation: the row, its value pointers, then the id and the values' bytes. */
static struct queue_job_row *row_new(const char *id, const redisReply *r)
{
    size_t idlen = strlen(id) + 1;
    size_t size = sizeof(struct queue_job_row) + r->elements * sizeof(char *) + idlen;
    struct queue_job_row *row;
    const char **values;
    char *p;

    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_STRING)
            size += r->element[i]->len + 1;
    }
    row = malloc(size);
    if (!row)
        return NULL;
    values = (const char **)(row + 1);
    p = (char *)(values + r->elements);
    memcpy(p, id, idlen);
    row->id = p;
    p += idlen;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *v = r->element[i];
        values[i] = NULL;
        if (v->type != REDIS_REPLY_STRING)
            continue;
        memcpy(p, v->str, v->len);
        p[v->len] = '\0';
        values[i] = p;
        p += v->len + 1;
    }
    row->values = values;
    return row;
}

static const char *reply_text(const redisReply *v)
{
    return v->type == REDIS_REPLY_STRING ? v->str : NULL;
}

static int take_row(void *ctx, const char *id, const redisReply *r, struct mu_err *err)
{
    struct rows_ctx *c = ctx;
    const redisReply *const *v = (const redisReply *const *)r->element;
    struct queue_job_row *row;
    bool any = false;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != c->nvalues)
        return mu_errf(err, MU_E_REDIS, "redis: HMGET of job '%s': unexpected reply", id);
    for (size_t i = 0; i < r->elements && !any; i++)
        any = v[i]->type == REDIS_REPLY_STRING;
    if (!any)
        return 0; /* the hash is gone */
    if (!filter_match(c->f, reply_text(v[c->filter_at[0]]), reply_text(v[c->filter_at[1]]),
                      reply_text(v[c->filter_at[2]])))
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        struct queue_job_row **grown = realloc(c->rows, cap * sizeof(struct queue_job_row *));
        if (!grown)
            return mu_errf(err, MU_E_NOMEM, "out of memory listing jobs");
        c->rows = grown;
        c->cap = cap;
    }
    row = row_new(id, r);
    if (!row)
        return mu_errf(err, MU_E_NOMEM, "out of memory listing jobs");
    c->rows[c->n++] = row;
    return 1;
}

int queue_job_rows_read(struct queue *q,
                        const struct queue_jobs_filter *f,
                        const char *const *fields,
                        size_t nfields,
                        struct queue_job_rows *out,
                        struct mu_err *err)
{
    struct rows_ctx c = { .f = f, .nvalues = nfields };
    struct list_scan s = { .take = take_row, .ctx = &c, .limit = f->limit };
    const char *names[LIST_FIELDS_MAX + MU_ARRAY_LEN(filter_fields)];

    *out = (struct queue_job_rows){ 0 };
    if (nfields > LIST_FIELDS_MAX)
        return mu_errf(err, MU_E_TOOBIG, "a job row names at most %u fields, not %zu",
                       LIST_FIELDS_MAX, nfields);
    memcpy(names, fields, nfields * sizeof(*fields));
    for (size_t i = 0; i < MU_ARRAY_LEN(filter_fields); i++) {
        size_t at = 0;
        while (at < nfields && strcmp(fields[at], filter_fields[i]) != 0)
            at++;
        if (at == nfields)
            names[at = c.nvalues++] = filter_fields[i];
        c.filter_at[i] = at;
    }
    if (queue_keyed_init(&s.cmd, "HMGET", names, c.nvalues, err) != 0
        || list_run(q, &s, err) != 0) {
        queue_job_rows_release(&(struct queue_job_rows){ .rows = c.rows, .n = c.n });
        return -1;
    }
    /* Oldest submission first, as queue_jobs_read. */
    for (size_t i = 0; i < c.n / 2; i++) {
        struct queue_job_row *t = c.rows[i];
        c.rows[i] = c.rows[c.n - 1 - i];
        c.rows[c.n - 1 - i] = t;
    }
    out->rows = c.rows;
    out->n = c.n;
    return 0;
}

void queue_job_rows_release(struct queue_job_rows *rows)
{
    for (size_t i = 0; i < rows->n; i++)
        free(rows->rows[i]);
    free(rows->rows);
    *rows = (struct queue_job_rows){ 0 };
}

/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's writes to Redis (docs/design.md §3, §6): job hashes, the listing index, the
 * events stream, acknowledgements and node status.  One job update is one pipelined round trip, in
 * an order that makes a crash at any point safe: the job is stored, then the event is appended,
 * then the submission is acknowledged (an unacknowledged entry is simply read again).
 */
#include "queue/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define ARGV_MAX 160

struct argv_builder {
    int argc;
    const char *argv[ARGV_MAX];
    size_t lens[ARGV_MAX];
};

static void argv_add(struct argv_builder *b, const char *s)
{
    if (b->argc < ARGV_MAX) {
        b->argv[b->argc] = s;
        b->lens[b->argc] = strlen(s);
        b->argc++;
    }
}

/* Sends the queued pipeline's n commands' replies; the first error wins, all are drained. */
int queue_pipeline_finish(struct queue *q, int n, struct mu_err *err)
{
    int rc = 0;
    if (q->nbatch > 0)
        return queue_batch_finish(q, NULL, err);
    for (int i = 0; i < n; i++) {
        void *reply = NULL;
        if (redisGetReply(q->ctx, &reply) != REDIS_OK) {
            mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port,
                    q->ctx->errstr[0] ? q->ctx->errstr : "connection lost");
            queue_conn_drop(q);
            return -1;
        }
        if (((redisReply *)reply)->type == REDIS_REPLY_ERROR && rc == 0)
            rc = mu_errf(err, MU_E_REDIS, "redis: %s", ((redisReply *)reply)->str);
        freeReplyObject(reply);
    }
    return rc;
}

/* Counts one command appended (rc REDIS_OK) or not. */
static void counted(int rc, int *sent, int *tried)
{
    (*tried)++;
    if (rc == REDIS_OK)
        (*sent)++;
}

/* The commands of a job update that come with its event: the active set, the event itself and
 * the counters it raises. */
static void append_event(struct queue *q,
                         const char *id,
                         uint64_t index_ms,
                         const struct queue_event *ev,
                         long events_max,
                         int *sent,
                         int *tried)
{
    char events_key[CFG_NAME_MAX + 8];
    char num[2][32];

    if (ev || index_ms) {
        /* The active set lists non-final jobs, so a restarted scheduler reads only those. */
        bool final = false;
        enum queue_state st;
        if (ev && queue_state_parse(ev->state, &st) == 0)
            final = queue_state_is_final(st);
        if (final || index_ms)
            counted(queue_append(q, "%s %s" QUEUE_K_ACTIVE " %s", final ? "SREM" : "SADD",
                                 q->prefix, id),
                    sent, tried);
        /* A final job waits in finished for the history (archive.c), in the same round trip. */
        if (final)
            counted(queue_append(q, "ZADD %s" QUEUE_K_FINISHED " %llu %s", q->prefix,
                                 (unsigned long long)ev->at_ms, id),
                    sent, tried);
    }
    if (ev) {
        (void)mu_snprintf(events_key, sizeof(events_key), "%s" QUEUE_K_EVENTS, q->prefix);
        (void)mu_snprintf(num[0], sizeof(num[0]), "%d", ev->attempt);
        (void)mu_snprintf(num[1], sizeof(num[1]), "%llu", (unsigned long long)ev->at_ms);
        counted(queue_append(q,
                             "XADD %s MAXLEN ~ %ld * " QUEUE_E_JOB " %s " QUEUE_E_STATE
                             " %s " QUEUE_E_REASON " %s " QUEUE_E_ATTEMPT " %s " QUEUE_E_AT " %s",
                             events_key, events_max, id, ev->state, ev->reason ? ev->reason : "",
                             num[0], num[1]),
                sent, tried);
    }
    for (int i = 0; ev && i < 4 && ev->incr[i]; i++)
        counted(queue_append(q, "HINCRBY %s" QUEUE_K_COUNTERS " %s 1", q->prefix, ev->incr[i]),
                sent, tried);
    if (ev && ev->incr_float_name)
        counted(queue_append(q, "HINCRBYFLOAT %s" QUEUE_K_COUNTERS " %s %.9f", q->prefix,
                             ev->incr_float_name, ev->incr_float),
                sent, tried);
}

int queue_job_update_append(struct queue *q,
                            const struct queue_job_change *c,
                            int *total,
                            struct mu_err *err)
{
    const char *id = c->id;
    char key[CFG_NAME_MAX + QUEUE_JOB_ID_MAX + 8];
    char list_key[CFG_NAME_MAX + 8];
    char stream_key[CFG_NAME_MAX + QUEUE_OWNER_MAX + 16];
    char num[32];
    struct argv_builder set = { 0 };
    struct argv_builder del = { 0 };
    int base = q->nbatch; /* a fenced connection's batch, before this update */
    int sent = 0;
    int tried = 0;

    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    (void)mu_snprintf(key, sizeof(key), "%s" QUEUE_K_JOB "%s", q->prefix, id);
    argv_add(&set, "HSET");
    argv_add(&set, key);
    argv_add(&del, "HDEL");
    argv_add(&del, key);
    for (int i = 0; i < c->nfields; i++) {
        if (c->fields[i].value) {
            argv_add(&set, c->fields[i].key);
            argv_add(&set, c->fields[i].value);
        } else {
            argv_add(&del, c->fields[i].key);
        }
    }
    if (set.argc >= ARGV_MAX || del.argc >= ARGV_MAX)
        return mu_errf(err, MU_E_TOOBIG, "job %s: too many fields in one update", id);
    if (set.argc > 2)
        counted(queue_append_argv(q, set.argc, set.argv, set.lens), &sent, &tried);
    if (del.argc > 2)
        counted(queue_append_argv(q, del.argc, del.argv, del.lens), &sent, &tried);
    if (c->index_ms) {
        (void)mu_snprintf(list_key, sizeof(list_key), "%s" QUEUE_K_JOBS, q->prefix);
        (void)mu_snprintf(num, sizeof(num), "%llu", (unsigned long long)c->index_ms);
        counted(queue_append(q, "ZADD %s %s %s", list_key, num, id), &sent, &tried);
    }
    append_event(q, id, c->index_ms, c->ev, c->events_max, &sent, &tried);
    if (c->ack_id) {
        (void)queue_stream_key(q->prefix, c->ack_stream, c->ack_owner, stream_key,
                               sizeof(stream_key));
        counted(queue_append(q, "XACK %s %s %s", stream_key, QUEUE_GROUP, c->ack_id), &sent,
                &tried);
    }
    if (sent < tried) {
        /* Not one command of it goes: a fenced batch drops what it took (an unfenced pipeline
         * cannot, and Redis answers what went; only memory runs out there). */
        if (q->fence[0]) {
            for (int i = base; i < q->nbatch; i++)
                redisFreeCommand(q->batch[i]);
            q->nbatch = base;
            sent = 0;
        }
        *total += sent;
        return mu_errf(err, MU_E_NOMEM, "job %s: cannot queue its update (out of memory)", id);
    }
    *total += sent;
    return 0;
}

int queue_updates_finish(struct queue *q, int sent, struct mu_err *err)
{
    return queue_pipeline_finish(q, sent, err);
}

int queue_job_update(struct queue *q, const struct queue_job_change *c, struct mu_err *err)
{
    int sent = 0;
    struct mu_err drained;

    if (queue_job_update_append(q, c, &sent, err) != 0) {
        (void)queue_pipeline_finish(q, sent, &drained); /* the replies of what went out */
        return -1;
    }
    if (queue_pipeline_finish(q, sent, err) != 0) {
        mu_err_prefix(err, "job %s: ", c->id);
        return -1;
    }
    return 0;
}

int queue_counter_incr(struct queue *q, const char *name, struct mu_err *err)
{
    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    if (queue_append(q, "HINCRBY %s" QUEUE_K_COUNTERS " %s 1", q->prefix, name) != REDIS_OK) {
        queue_batch_clear(q);
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    }
    return queue_pipeline_finish(q, 1, err);
}

int queue_idem_get(
    struct queue *q, const char *key, char *id_out, size_t id_size, bool *found, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "GET %s" QUEUE_K_IDEM "%s", q->prefix, key);
    if (!r)
        return -1;
    *found = r->type == REDIS_REPLY_STRING;
    if (*found)
        mu_strlcpy(id_out, r->str, id_size);
    queue_reply_free(r);
    return 0;
}

static uint64_t reply_u64(const redisReply *r)
{
    int64_t v = 0;
    if (r->type != REDIS_REPLY_STRING || mu_parse_i64(r->str, 0, INT64_MAX, &v, NULL) != 0)
        return 0;
    return (uint64_t)v;
}

static const char *reply_str(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING ? r->str : NULL;
}

/* What queue_job_state_get reads, in the order of its HMGET (BRIEF_FIELDS). */
enum brief_field {
    BF_STATE,
    BF_STARTED_AT,
    BF_ARRAY_SIZE,
    BF_ARRAY_DONE,
    BF_ARRAY_FAILED,
    BF_ARRAY_NOSTART,
    BRIEF_NFIELDS
};
#define BRIEF_FIELDS                                                                   \
    QUEUE_F_STATE " " QUEUE_F_STARTED_AT " " QUEUE_F_ARRAY_SIZE " " QUEUE_F_ARRAY_DONE \
                  " " QUEUE_F_ARRAY_FAILED " " QUEUE_F_ARRAY_NOSTART

int queue_job_state_get(
    struct queue *q, const char *id, struct queue_job_brief *out, bool *found, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "HMGET %s" QUEUE_K_JOB "%s " BRIEF_FIELDS, q->prefix, id);
    if (!r)
        return -1;
    *found = false;
    memset(out, 0, sizeof(*out));
    if (r->type == REDIS_REPLY_ARRAY && r->elements == BRIEF_NFIELDS
        && r->element[BF_STATE]->type == REDIS_REPLY_STRING
        && queue_state_parse(r->element[BF_STATE]->str, &out->state) == 0) {
        *found = true;
        out->started = r->element[BF_STARTED_AT]->type == REDIS_REPLY_STRING;
        out->array = r->element[BF_ARRAY_SIZE]->type == REDIS_REPLY_STRING;
        out->array_done = (int64_t)reply_u64(r->element[BF_ARRAY_DONE]);
        out->array_failed = (int64_t)reply_u64(r->element[BF_ARRAY_FAILED]);
        out->array_nostart = (int64_t)reply_u64(r->element[BF_ARRAY_NOSTART]);
    }
    queue_reply_free(r);
    return 0;
}

int queue_idem_claim(struct queue *q,
                     const char *key,
                     const char *id,
                     char *id_out,
                     size_t id_size,
                     bool *won,
                     struct mu_err *err)
{
    redisReply *r = NULL;
    bool found = false;
    if (q->fence[0]) {
        /* The script's reply holds SET's: OK when set, nil when the key existed. */
        if (queue_append(q, "SET %s" QUEUE_K_IDEM "%s %s NX EX %d", q->prefix, key, id,
                         QUEUE_IDEM_TTL_S)
            != REDIS_OK) {
            queue_batch_clear(q);
            return mu_errf(err, MU_E_NOMEM, "out of memory");
        }
        if (queue_batch_finish(q, &r, err) != 0)
            return -1;
        *won = r->elements == 1 && r->element[0]->type == REDIS_REPLY_STATUS;
    } else {
        r = queue_command(q, err, "SET %s" QUEUE_K_IDEM "%s %s NX EX %d", q->prefix, key, id,
                          QUEUE_IDEM_TTL_S);
        if (!r)
            return -1;
        *won = r->type == REDIS_REPLY_STATUS;
    }
    queue_reply_free(r);
    if (*won) {
        mu_strlcpy(id_out, id, id_size);
        return 0;
    }
    if (queue_idem_get(q, key, id_out, id_size, &found, err) != 0)
        return -1;
    if (!found) /* expired or deleted in between: treat as ours */
        mu_strlcpy(id_out, id, id_size);
    return 0;
}

/* One HSET (or HDEL) of kv[0..n) into key: a command of its own, or one fenced batch. */
static int status_command(struct queue *q,
                          const char *key,
                          const struct queue_kv *kv,
                          int n,
                          bool set,
                          const char **argv,
                          size_t *lens,
                          struct mu_err *err)
{
    redisReply *r;
    int argc = 0;
    int rc = -1;

    argv[argc++] = set ? "HSET" : "HDEL";
    argv[argc++] = key;
    for (int i = 0; i < n; i++) {
        argv[argc++] = kv[i].key;
        if (set)
            argv[argc++] = kv[i].value ? kv[i].value : "";
    }
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    if (q->fence[0]) {
        if (queue_append_argv(q, argc, argv, lens) != REDIS_OK)
            return mu_errf(err, MU_E_NOMEM, "out of memory");
        return queue_pipeline_finish(q, 1, err);
    }
    r = redisCommandArgv(q->ctx, argc, argv, lens);
    if (!r) {
        mu_errf(err, MU_E_REDIS, "redis: %s", q->ctx->errstr);
        queue_conn_drop(q);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR)
        mu_errf(err, MU_E_REDIS, "redis: %s", r->str);
    else
        rc = 0;
    freeReplyObject(r);
    return rc;
}

int queue_status_write(
    struct queue *q, const char *hash, const struct queue_kv *kv, int n, struct mu_err *err)
{
    char key[CFG_NAME_MAX + 16];
    int chunk = n < QUEUE_STATUS_CHUNK ? n : QUEUE_STATUS_CHUNK;
    const char **argv = NULL;
    size_t *lens = NULL;
    int rc = -1;

    if (n <= 0)
        return 0;
    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    argv = calloc((size_t)chunk * 2 + 2, sizeof(*argv));
    lens = calloc((size_t)chunk * 2 + 2, sizeof(*lens));
    if (!argv || !lens) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    if (mu_snprintf(key, sizeof(key), "%s%s", q->prefix, hash) != 0) {
        mu_errf(err, MU_E_INVAL, "status hash name '%s' too long", hash);
        goto out;
    }
    for (int at = 0; at < n; at += chunk) {
        int m = n - at < chunk ? n - at : chunk;
        if (status_command(q, key, kv + at, m, kv[0].value != NULL, argv, lens, err) != 0)
            goto out;
    }
    rc = 0;
out:
    free(argv);
    free(lens);
    return rc;
}

/* What a restart reads of each job hash (stored_job_fill reads the HMGET reply by these names). */
enum stored_field {
    SF_STATE,
    SF_ATTEMPT,
    SF_FAILURES,
    SF_HELD,
    SF_SPEC,
    SF_PLACEMENT,
    SF_STARTED_AT,
    SF_LAST_CHECKPOINT,
    SF_LAST_CHECKPOINT_AT,
    SF_LOST_GPU_SECONDS,
    SF_BORROWED,
    SF_AFTER,
    SF_AFTER_MET,
    SF_ARRAY_NEXT,
    SF_ARRAY_SKIP,
    SF_ARRAY_DONE,
    SF_ARRAY_FAILED,
    SF_ARRAY_NOSTART,
    SF_USER,
    SF_SUBMITTED_BY,
    STORED_NFIELDS
};
static const char *const stored_fields[STORED_NFIELDS] = {
    [SF_STATE] = QUEUE_F_STATE,
    [SF_ATTEMPT] = QUEUE_F_ATTEMPT,
    [SF_FAILURES] = QUEUE_F_FAILURES,
    [SF_HELD] = QUEUE_F_HELD,
    [SF_SPEC] = QUEUE_F_SPEC,
    [SF_PLACEMENT] = QUEUE_F_PLACEMENT,
    [SF_STARTED_AT] = QUEUE_F_STARTED_AT,
    [SF_LAST_CHECKPOINT] = QUEUE_F_LAST_CHECKPOINT,
    [SF_LAST_CHECKPOINT_AT] = QUEUE_F_LAST_CHECKPOINT_AT,
    [SF_LOST_GPU_SECONDS] = QUEUE_F_LOST_GPU_SECONDS,
    [SF_BORROWED] = QUEUE_F_BORROWED,
    [SF_AFTER] = QUEUE_F_AFTER,
    [SF_AFTER_MET] = QUEUE_F_AFTER_MET,
    [SF_ARRAY_NEXT] = QUEUE_F_ARRAY_NEXT,
    [SF_ARRAY_SKIP] = QUEUE_F_ARRAY_SKIP,
    [SF_ARRAY_DONE] = QUEUE_F_ARRAY_DONE,
    [SF_ARRAY_FAILED] = QUEUE_F_ARRAY_FAILED,
    [SF_ARRAY_NOSTART] = QUEUE_F_ARRAY_NOSTART,
    [SF_USER] = QUEUE_F_USER,
    [SF_SUBMITTED_BY] = QUEUE_F_SUBMITTED_BY,
};

/* A field's value when it is a string, else NULL. */
static const char *stored_str(const redisReply *r, enum stored_field f)
{
    return reply_str(r->element[f]);
}

/* Whether a field holds "1". */
static bool stored_flag(const redisReply *r, enum stored_field f)
{
    const char *v = stored_str(r, f);
    return v && strcmp(v, "1") == 0;
}

/* A field as an integer lo..hi, or 0 when it is absent or not one. */
static int stored_int(const redisReply *r, enum stored_field f, int64_t lo, int64_t hi)
{
    const char *v = stored_str(r, f);
    int64_t num = 0;
    return v && mu_parse_i64(v, lo, hi, &num, NULL) == 0 ? (int)num : 0;
}

/* s from an HMGET reply of stored_fields (s->id set); borrows the reply's strings.  A hash that
 * is gone leaves s->state NULL. */
static int stored_job_fill(struct queue_stored_job *s, const redisReply *r, struct mu_err *err)
{
    const char *lost;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)STORED_NFIELDS)
        return mu_errf(err, MU_E_REDIS, "job %s: unexpected HMGET reply", s->id);
    s->state = reply_str(r->element[SF_STATE]);
    s->attempt = stored_int(r, SF_ATTEMPT, 1, 1000000);
    s->failures = stored_int(r, SF_FAILURES, 0, 1000000);
    s->held = stored_flag(r, SF_HELD);
    s->spec = reply_str(r->element[SF_SPEC]);
    s->spec_len = s->spec ? r->element[SF_SPEC]->len : 0;
    s->placement = reply_str(r->element[SF_PLACEMENT]);
    s->started_ms = reply_u64(r->element[SF_STARTED_AT]);
    s->last_checkpoint = stored_str(r, SF_LAST_CHECKPOINT);
    if (!s->last_checkpoint)
        s->last_checkpoint = "";
    s->last_checkpoint_ms = reply_u64(r->element[SF_LAST_CHECKPOINT_AT]);
    s->lost_gpu_s = 0;
    lost = stored_str(r, SF_LOST_GPU_SECONDS);
    if (lost)
        (void)mu_parse_double(lost, 0, 1e300, &s->lost_gpu_s, NULL);
    s->borrowed = stored_flag(r, SF_BORROWED);
    s->after = reply_str(r->element[SF_AFTER]);
    s->after_met = stored_flag(r, SF_AFTER_MET);
    s->array_next = (int64_t)reply_u64(r->element[SF_ARRAY_NEXT]);
    s->array_skip = reply_str(r->element[SF_ARRAY_SKIP]);
    s->array_done = (int64_t)reply_u64(r->element[SF_ARRAY_DONE]);
    s->array_failed = (int64_t)reply_u64(r->element[SF_ARRAY_FAILED]);
    s->array_nostart = (int64_t)reply_u64(r->element[SF_ARRAY_NOSTART]);
    s->user = reply_str(r->element[SF_USER]);
    s->submitted_by = reply_str(r->element[SF_SUBMITTED_BY]);
    return 0;
}

struct load_ctx {
    const redisReply *ids;
    queue_stored_job_fn fn;
    void *ctx;
    bool *vanished; /* ids->elements flags, made at the first id whose hash is gone */
};

/* Hands one job's HMGET reply to the caller's fn, or marks its id vanished. */
static int load_one(void *ctx, size_t i, const redisReply *r, struct mu_err *err)
{
    struct load_ctx *c = ctx;
    struct queue_stored_job s;

    memset(&s, 0, sizeof(s));
    s.id = c->ids->element[i]->str;
    if (stored_job_fill(&s, r, err) != 0)
        return -1;
    if (s.state && s.state[0])
        return c->fn(c->ctx, &s, err);
    if (!c->vanished)
        c->vanished = calloc(c->ids->elements, sizeof(*c->vanished));
    if (c->vanished)
        c->vanished[i] = true;
    return 0;
}

int queue_active_each(struct queue *q, queue_stored_job_fn fn, void *ctx, struct mu_err *err)
{
    struct load_ctx c = { .fn = fn, .ctx = ctx };
    struct queue_keyed hmget;
    redisReply *ids = NULL;
    int rc = -1;

    ids = queue_command(q, err, "SMEMBERS %s" QUEUE_K_ACTIVE, q->prefix);
    if (!ids)
        return -1;
    if (ids->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "SMEMBERS %s" QUEUE_K_ACTIVE ": unexpected reply", q->prefix);
        goto out;
    }
    for (size_t i = 0; i < ids->elements; i++) {
        if (ids->element[i]->type != REDIS_REPLY_STRING) {
            mu_errf(err, MU_E_REDIS, "SMEMBERS %s" QUEUE_K_ACTIVE ": unexpected reply", q->prefix);
            goto out;
        }
    }
    c.ids = ids;
    if (queue_keyed_init(&hmget, "HMGET", stored_fields, STORED_NFIELDS, err) != 0)
        goto out;
    rc = queue_keyed_each(q, &hmget, ids, load_one, &c, err);
    /* An id whose hash vanished (deleted by hand) leaves the active set. */
    for (size_t i = 0; rc == 0 && c.vanished && i < ids->elements; i++) {
        if (c.vanished[i]
            && queue_append(q, "SREM %s" QUEUE_K_ACTIVE " %s", q->prefix, ids->element[i]->str)
                   == REDIS_OK)
            (void)queue_pipeline_finish(q, 1, NULL); /* housekeeping: the next load tries again */
    }
out:
    free(c.vanished);
    queue_reply_free(ids);
    return rc;
}

void queue_counters_free(char **names, double *values, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(values);
}

int queue_counters_read(struct queue *q, char ***names, double **values, int *n, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "HGETALL %s" QUEUE_K_COUNTERS, q->prefix);
    size_t pairs;

    *names = NULL;
    *values = NULL;
    *n = 0;
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY) {
        queue_reply_free(r);
        return mu_errf(err, MU_E_REDIS, "HGETALL %s" QUEUE_K_COUNTERS ": unexpected reply",
                       q->prefix);
    }
    pairs = r->elements / 2;
    *names = calloc(pairs + 1, sizeof(**names));
    *values = calloc(pairs + 1, sizeof(**values));
    if (!*names || !*values) {
        queue_reply_free(r);
        queue_counters_free(*names, *values, 0);
        *names = NULL;
        *values = NULL;
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < pairs; i++) {
        const redisReply *k = r->element[2 * i];
        const redisReply *v = r->element[2 * i + 1];
        double d = 0;
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING
            || mu_parse_double(v->str, 0, 1e300, &d, NULL) != 0)
            continue;
        (*names)[*n] = strdup(k->str);
        if (!(*names)[*n])
            break;
        (*values)[(*n)++] = d;
    }
    queue_reply_free(r);
    return 0;
}

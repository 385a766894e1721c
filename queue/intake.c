/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's intake (DESIGN §6): XREADGROUP on the submit and control streams (and the
 * log requests of queue/logs.c) over a
 * connection of its own, so the daemon can keep a blocking read outstanding and learn of new
 * entries by polling a socket instead of asking Redis in a loop.  Nothing is acknowledged here:
 * the caller acknowledges a submission only once its job is stored (queue_job_update).
 * On (re)connect, entries this consumer took but never acknowledged are delivered again, and
 * entries left idle by another (dead) consumer are claimed.
 */
#include "queue/internal.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define INTAKE_BATCH    512
#define INTAKE_BLOCK_MS 2000

struct queue_intake {
    struct queue conn; /* its own connection; conn.ctx is NULL while down */
    char consumer[64];
    char stream_keys[3][CFG_NAME_MAX + 16]; /* by enum queue_stream */
    bool waiting;                           /* an XREADGROUP ... > is outstanding */
    bool need_setup; /* group creation and pending re-read still to do on this connection */
};

void queue_entries_free(struct queue_entry *entries, int n)
{
    if (!entries)
        return;
    for (int i = 0; i < n; i++)
        free(entries[i].spec);
    free(entries);
}

static const redisReply *field_value(const redisReply *fields, const char *name)
{
    if (!fields || fields->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *k = fields->element[i];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0)
            return fields->element[i + 1];
    }
    return NULL;
}

/* Appends the entries of one XREADGROUP/XAUTOCLAIM stream reply to *out. */
static int entries_append(const redisReply *list,
                          enum queue_stream stream,
                          struct queue_entry **out,
                          int *n,
                          struct mu_err *err)
{
    struct queue_entry *grown;

    if (!list || list->type != REDIS_REPLY_ARRAY || list->elements == 0)
        return 0;
    grown = realloc(*out, ((size_t)*n + list->elements) * sizeof(**out));
    if (!grown)
        return mu_errf(err, MU_E_NOMEM, "intake: out of memory");
    *out = grown;
    for (size_t i = 0; i < list->elements; i++) {
        const redisReply *e = list->element[i];
        struct queue_entry *qe = &(*out)[*n];
        const redisReply *v;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 2
            || e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        memset(qe, 0, sizeof(*qe));
        mu_strlcpy(qe->id, e->element[0]->str, sizeof(qe->id));
        qe->stream = stream;
        if (stream == QUEUE_STREAM_SUBMIT) {
            v = field_value(e->element[1], "spec");
            if (v && v->type == REDIS_REPLY_STRING) {
                qe->spec = malloc(v->len + 1);
                if (!qe->spec)
                    return mu_errf(err, MU_E_NOMEM, "intake: out of memory");
                memcpy(qe->spec, v->str, v->len);
                qe->spec[v->len] = '\0';
                qe->spec_len = v->len;
            }
        } else if (stream == QUEUE_STREAM_LOGS) {
            queue_log_req_parse(e->element[1], &qe->log);
        } else {
            v = field_value(e->element[1], "cmd");
            if (v && v->type == REDIS_REPLY_STRING)
                mu_strlcpy(qe->cmd, v->str, sizeof(qe->cmd));
            v = field_value(e->element[1], "arg");
            if (v && v->type == REDIS_REPLY_STRING)
                mu_strlcpy(qe->arg, v->str, sizeof(qe->arg));
            v = field_value(e->element[1], "grace_s");
            qe->grace_s = -1;
            if (v && v->type == REDIS_REPLY_STRING) {
                int64_t g;
                if (mu_parse_i64(v->str, 0, 86400, &g, NULL) == 0)
                    qe->grace_s = (int)g;
            }
            v = field_value(e->element[1], "timeout_ms");
            qe->timeout_ms = 0;
            if (v && v->type == REDIS_REPLY_STRING) {
                int64_t t;
                if (mu_parse_i64(v->str, 1, INT64_C(86400000), &t, NULL) == 0)
                    qe->timeout_ms = (uint64_t)t;
            }
        }
        (*n)++;
    }
    return 0;
}

/* Parses an XREADGROUP reply: nil (timeout) or [[stream, [entries]], ...]. */
static int read_reply_parse(const struct queue_intake *qi,
                            const redisReply *r,
                            struct queue_entry **out,
                            int *n,
                            struct mu_err *err)
{
    if (!r || r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return mu_errf(err, MU_E_REDIS, "intake: unexpected XREADGROUP reply type %d", r->type);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *s = r->element[i];
        enum queue_stream stream;
        if (s->type != REDIS_REPLY_ARRAY || s->elements != 2
            || s->element[0]->type != REDIS_REPLY_STRING)
            continue;
        stream = strcmp(s->element[0]->str, qi->stream_keys[QUEUE_STREAM_SUBMIT]) == 0
                     ? QUEUE_STREAM_SUBMIT
                 : strcmp(s->element[0]->str, qi->stream_keys[QUEUE_STREAM_LOGS]) == 0
                     ? QUEUE_STREAM_LOGS
                     : QUEUE_STREAM_CONTROL;
        if (entries_append(s->element[1], stream, out, n, err) != 0)
            return -1;
    }
    return 0;
}

static int intake_setup(struct queue_intake *qi,
                        struct queue_entry **out,
                        int *n,
                        struct mu_err *err)
{
    redisReply *r = NULL;

    for (int s = 0; s < 3; s++) {
        r = queue_command(&qi->conn, err, "XGROUP CREATE %s %s 0 MKSTREAM", qi->stream_keys[s],
                          QUEUE_GROUP);
        if (!r && strstr(err->msg, "BUSYGROUP") == NULL)
            return -1;
        queue_reply_free(r);
    }
    /* Our own pending entries: delivered before a crash, never acknowledged. */
    r = queue_command(&qi->conn, err, "XREADGROUP GROUP %s %s COUNT %d STREAMS %s %s %s 0 0 0",
                      QUEUE_GROUP, qi->consumer, 100000, qi->stream_keys[0], qi->stream_keys[1],
                      qi->stream_keys[2]);
    if (!r)
        return -1;
    if (read_reply_parse(qi, r, out, n, err) != 0) {
        queue_reply_free(r);
        return -1;
    }
    queue_reply_free(r);
    return 0;
}

struct queue_intake *queue_intake_new(const char *url,
                                      const char *prefix,
                                      const char *consumer,
                                      struct mu_err *err)
{
    struct queue_intake *qi = calloc(1, sizeof(*qi));
    if (!qi) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        return NULL;
    }
    if (mu_redis_url_parse(url, &qi->conn.url, err) != 0)
        goto fail;
    mu_strlcpy(qi->conn.prefix, prefix, sizeof(qi->conn.prefix));
    mu_strlcpy(qi->consumer, consumer, sizeof(qi->consumer));
    (void)mu_snprintf(qi->stream_keys[0], sizeof(qi->stream_keys[0]), "%ssubmit", prefix);
    (void)mu_snprintf(qi->stream_keys[1], sizeof(qi->stream_keys[1]), "%scontrol", prefix);
    (void)mu_snprintf(qi->stream_keys[2], sizeof(qi->stream_keys[2]), "%slogreq", prefix);
    if (queue_conn_open(&qi->conn, err) != 0)
        goto fail;
    qi->need_setup = true;
    return qi;
fail:
    queue_intake_free(qi);
    return NULL;
}

void queue_intake_free(struct queue_intake *qi)
{
    if (!qi)
        return;
    queue_conn_drop(&qi->conn);
    free(qi);
}

int queue_intake_fd(const struct queue_intake *qi)
{
    return qi->conn.ctx ? qi->conn.ctx->fd : -1;
}

static int intake_fail(struct queue_intake *qi, struct mu_err *err, const char *what)
{
    mu_errf(err, MU_E_REDIS, "intake: %s: %s", what,
            qi->conn.ctx && qi->conn.ctx->errstr[0] ? qi->conn.ctx->errstr : "connection lost");
    queue_conn_drop(&qi->conn);
    qi->waiting = false;
    qi->need_setup = true;
    return -1;
}

int queue_intake_read(struct queue_intake *qi, struct queue_entry **out, int *n, struct mu_err *err)
{
    redisContext *ctx;
    void *reply = NULL;
    int done = 0;

    *out = NULL;
    *n = 0;
    if (!qi->conn.ctx) {
        if (queue_conn_open(&qi->conn, err) != 0)
            return -1;
        qi->waiting = false;
        qi->need_setup = true;
    }
    if (qi->need_setup) {
        if (intake_setup(qi, out, n, err) != 0)
            goto fail_entries;
        qi->need_setup = false;
    }
    ctx = qi->conn.ctx;
    if (qi->waiting) {
        struct pollfd pfd = { .fd = ctx->fd, .events = POLLIN, .revents = 0 };
        if (poll(&pfd, 1, 0) > 0) {
            if (redisBufferRead(ctx) != REDIS_OK) {
                intake_fail(qi, err, "read");
                goto fail_entries;
            }
        }
        if (redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
            intake_fail(qi, err, "reply");
            goto fail_entries;
        }
        if (!reply)
            return 0; /* still waiting */
        qi->waiting = false;
        if (((redisReply *)reply)->type == REDIS_REPLY_ERROR) {
            mu_errf(err, MU_E_REDIS, "intake: %s", ((redisReply *)reply)->str);
            freeReplyObject(reply);
            queue_conn_drop(&qi->conn); /* e.g. NOGROUP after a FLUSHALL: set up again */
            goto fail_entries;
        }
        if (read_reply_parse(qi, reply, out, n, err) != 0) {
            freeReplyObject(reply);
            goto fail_entries;
        }
        freeReplyObject(reply);
    }
    if (redisAppendCommand(ctx, "XREADGROUP GROUP %s %s COUNT %d BLOCK %d STREAMS %s %s %s > > >",
                           QUEUE_GROUP, qi->consumer, INTAKE_BATCH, INTAKE_BLOCK_MS,
                           qi->stream_keys[0], qi->stream_keys[1], qi->stream_keys[2])
        != REDIS_OK) {
        intake_fail(qi, err, "send");
        goto fail_entries;
    }
    while (!done) {
        if (redisBufferWrite(ctx, &done) != REDIS_OK) {
            intake_fail(qi, err, "send");
            goto fail_entries;
        }
    }
    qi->waiting = true;
    return 0;
fail_entries:
    /* Entries already read stay pending in Redis and come back on reconnect. */
    queue_entries_free(*out, *n);
    *out = NULL;
    *n = 0;
    return -1;
}

int queue_intake_claim(struct queue *q,
                       const char *consumer,
                       int min_idle_ms,
                       struct queue_entry **out,
                       int *n,
                       struct mu_err *err)
{
    *out = NULL;
    *n = 0;
    static const char *const names[] = { [QUEUE_STREAM_SUBMIT] = "submit",
                                         [QUEUE_STREAM_CONTROL] = "control",
                                         [QUEUE_STREAM_LOGS] = "logreq" };

    for (int s = 0; s < 3; s++) {
        const char *name = names[s];
        redisReply *r = queue_command(q, err, "XAUTOCLAIM %s%s %s %s %d 0-0 COUNT %d", q->prefix,
                                      name, QUEUE_GROUP, consumer, min_idle_ms, INTAKE_BATCH);
        int rc = 0;
        if (!r) {
            if (strstr(err->msg, "NOGROUP"))
                continue; /* the intake has not made the group yet */
            goto fail;
        }
        /* Redis 7: [next-cursor, [[id, [field, value, ...]], ...], [deleted ids]] */
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2)
            rc = entries_append(r->element[1], (enum queue_stream)s, out, n, err);
        queue_reply_free(r);
        if (rc != 0)
            goto fail;
    }
    return 0;
fail:
    queue_entries_free(*out, *n);
    *out = NULL;
    *n = 0;
    return -1;
}

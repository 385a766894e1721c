/* SPDX-License-Identifier: MIT */
/*
 * Task logs through Redis (issue #18, README "Logs from any machine"): musterctl asks musterd
 * for one bounded chunk of a task's log, and musterd answers once the worker that ran the task
 * has read it.  Both sides meet in two keys that stay small:
 *
 *   <prefix>logreq                 stream of requests (node, job, task, attempt, stream, offset,
 *                                  max); read by musterd's intake (consumer group), acknowledged
 *                                  and deleted when answered, and capped (MAXLEN ~) on XADD so
 *                                  that a musterd that is down cannot make it grow without bound;
 *   <prefix>logreply:<request id>  list holding the one answer, popped by the asker (BLPOP) and
 *                                  expiring after QUEUE_LOG_REPLY_TTL_S when nobody does.
 *
 * The answer's key is named by the request's stream entry id, so musterd never writes a key a
 * client chose.  An answer is one value: a JSON header line, '\n', then the chunk's raw bytes
 * (at most QUEUE_LOG_CHUNK_MAX).  Nothing here holds more than one chunk.
 */
#include "queue/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define LOGREQ_MAXLEN 1000 /* requests kept while nobody reads them (approximate trim) */

static const redisReply *field_get(const redisReply *fields, const char *name)
{
    if (!fields || fields->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *k = fields->element[i];
        const redisReply *v = fields->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0)
            return v->type == REDIS_REPLY_STRING ? v : NULL;
    }
    return NULL;
}

/* A decimal field in [min, max] into *out; 0, or -1 with r->error set. */
static int field_num(const redisReply *fields,
                     const char *name,
                     int64_t min,
                     int64_t max,
                     int64_t *out,
                     struct queue_log_req *r)
{
    const redisReply *v = field_get(fields, name);
    struct mu_err err;

    if (!v) {
        (void)mu_snprintf(r->error, sizeof(r->error), "missing field '%s'", name);
        return -1;
    }
    if (mu_parse_i64(v->str, min, max, out, &err) != 0) {
        (void)mu_snprintf(r->error, sizeof(r->error), "field '%s': %s", name, err.msg);
        return -1;
    }
    return 0;
}

/* Fills r from one request's fields; what is wrong goes to r->error (the request is answered
 * with it).  max larger than the cap is lowered to the cap. */
static void log_req_fill(const redisReply *fields, struct queue_log_req *r)
{
    const redisReply *node = field_get(fields, "node");
    const redisReply *job = field_get(fields, "job");
    const redisReply *stream = field_get(fields, "stream");
    int64_t task = 0;
    int64_t attempt = 0;
    int64_t offset = 0;
    int64_t max = 0;

    if (!node || !mu_name_is_valid(node->str, sizeof(r->node) - 1)) {
        (void)mu_snprintf(r->error, sizeof(r->error), "field 'node': not a node name");
        return;
    }
    mu_strlcpy(r->node, node->str, sizeof(r->node));
    if (!job || !queue_job_id_is_valid(job->str)) {
        (void)mu_snprintf(r->error, sizeof(r->error), "field 'job': not a job id");
        return;
    }
    mu_strlcpy(r->job, job->str, sizeof(r->job));
    if (!stream || (strcmp(stream->str, "out") != 0 && strcmp(stream->str, "err") != 0)) {
        (void)mu_snprintf(r->error, sizeof(r->error), "field 'stream': expected out or err");
        return;
    }
    mu_strlcpy(r->stream, stream->str, sizeof(r->stream));
    if (field_num(fields, "task", 0, QUEUE_MAX_TASKS - 1, &task, r) != 0
        || field_num(fields, "attempt", 1, 1000000, &attempt, r) != 0
        || field_num(fields, "offset", 0, INT64_MAX, &offset, r) != 0
        || field_num(fields, "max", 1, INT64_MAX, &max, r) != 0)
        return;
    r->task = (int)task;
    r->attempt = (int)attempt;
    r->offset = (uint64_t)offset;
    r->max_bytes = max > (int64_t)QUEUE_LOG_CHUNK_MAX ? (int)QUEUE_LOG_CHUNK_MAX : (int)max;
}

void queue_log_req_parse(const void *fields, struct queue_log_req *out)
{
    memset(out, 0, sizeof(*out));
    log_req_fill(fields, out);
}

int queue_log_reply(struct queue *q,
                    const char *req_id,
                    const char *head,
                    const void *data,
                    size_t len,
                    struct mu_err *err)
{
    size_t hlen = strlen(head);
    char *value = NULL;
    int sent = 0;
    int rc = -1;

    if (len > QUEUE_LOG_CHUNK_MAX)
        return mu_errf(err, MU_E_TOOBIG, "log chunk of %zu bytes, at most %u", len,
                       QUEUE_LOG_CHUNK_MAX);
    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    value = malloc(hlen + 1 + len);
    if (!value)
        return mu_errf(err, MU_E_NOMEM, "out of memory for a log answer");
    memcpy(value, head, hlen);
    value[hlen] = '\n';
    if (len > 0)
        memcpy(value + hlen + 1, data, len);
    sent += queue_append(q, "RPUSH %s" QUEUE_K_LOGREPLY "%s %b", q->prefix, req_id, value,
                         hlen + 1 + len)
            == REDIS_OK;
    sent += queue_append(q, "EXPIRE %s" QUEUE_K_LOGREPLY "%s %d", q->prefix, req_id,
                         QUEUE_LOG_REPLY_TTL_S)
            == REDIS_OK;
    sent += queue_append(q, "XACK %s" QUEUE_K_LOGREQ " %s %s", q->prefix, QUEUE_GROUP, req_id)
            == REDIS_OK;
    sent += queue_append(q, "XDEL %s" QUEUE_K_LOGREQ " %s", q->prefix, req_id) == REDIS_OK;
    if (queue_pipeline_finish(q, sent, err) != 0)
        goto out;
    if (sent != 4) {
        (void)mu_errf(err, MU_E_REDIS, "log answer %s: cannot queue the commands", req_id);
        goto out;
    }
    rc = 0;
out:
    free(value);
    return rc;
}

int queue_log_request(struct queue *q,
                      const struct queue_log_req *r,
                      char *id_out,
                      size_t id_size,
                      struct mu_err *err)
{
    redisReply *reply = queue_command(
        q, err,
        "XADD %s" QUEUE_K_LOGREQ
        " MAXLEN ~ %d * node %s job %s task %d attempt %d stream %s offset %" PRIu64 " max %d",
        q->prefix, LOGREQ_MAXLEN, r->node, r->job, r->task, r->attempt, r->stream, r->offset,
        r->max_bytes);
    int rc = 0;

    if (!reply)
        return -1;
    if (reply->type != REDIS_REPLY_STRING)
        rc = mu_errf(err, MU_E_REDIS, "XADD %s" QUEUE_K_LOGREQ ": unexpected reply", q->prefix);
    else
        mu_strlcpy(id_out, reply->str, id_size);
    queue_reply_free(reply);
    return rc;
}

int queue_log_wait(struct queue *q,
                   const char *req_id,
                   int block_ms,
                   char **value,
                   size_t *len,
                   struct mu_err *err)
{
    char timeout[32];
    redisReply *reply;
    int rc = 0;

    *value = NULL;
    *len = 0;
    (void)mu_snprintf(timeout, sizeof(timeout), "%d.%03d", block_ms / 1000, block_ms % 1000);
    reply = queue_command(q, err, "BLPOP %s" QUEUE_K_LOGREPLY "%s %s", q->prefix, req_id, timeout);
    if (!reply)
        return -1;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
        && reply->element[1]->type == REDIS_REPLY_STRING) {
        const redisReply *v = reply->element[1];
        *value = malloc(v->len + 1);
        if (!*value) {
            rc = mu_errf(err, MU_E_NOMEM, "out of memory for a log answer");
        } else {
            memcpy(*value, v->str, v->len);
            (*value)[v->len] = '\0';
            *len = v->len;
        }
    } else if (reply->type != REDIS_REPLY_NIL) {
        rc = mu_errf(err, MU_E_REDIS, "BLPOP %s" QUEUE_K_LOGREPLY "%s: unexpected reply", q->prefix,
                     req_id);
    }
    queue_reply_free(reply);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * The Redis side of EC2 instance topology imports (issue #16, queue.h explains the keys):
 * musterctl stages an import under a fresh token and waits for musterd's answer; musterd reads
 * the staged instances and keeps the accepted ones.  A staged hash expires on its own, so a
 * client that dies while waiting leaves nothing behind for long.
 */
#include "queue/internal.h"

#include <string.h>

#include "common/mu_banned.h"

int queue_topology_token(struct queue *q, char *token, size_t size, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "INCR %s" QUEUE_K_TOPO_SEQ, q->prefix);

    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_INTEGER) {
        queue_reply_free(r);
        return mu_errf(err, MU_E_REDIS, "redis: INCR %s" QUEUE_K_TOPO_SEQ ": unexpected reply",
                       q->prefix);
    }
    (void)mu_snprintf(token, size, "%lld", r->integer);
    queue_reply_free(r);
    return 0;
}

void queue_topology_staging(const char *token, char *buf, size_t size)
{
    (void)mu_snprintf(buf, size, "topology:import:%s", token);
}

int queue_topology_result(
    struct queue *q, const char *token, char *result, size_t size, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "HGET %s" QUEUE_K_TOPO_RESULTS " %s", q->prefix, token);

    if (!r)
        return -1;
    result[0] = '\0';
    if (r->type == REDIS_REPLY_STRING)
        mu_strlcpy(result, r->str, size);
    queue_reply_free(r);
    return 0;
}

void queue_topology_forget(struct queue *q, const char *token)
{
    struct mu_err err;
    redisReply *r = queue_command(q, &err, "DEL %s" QUEUE_K_TOPO_IMPORT "%s", q->prefix, token);

    queue_reply_free(r);
    r = queue_command(q, &err, "HDEL %s" QUEUE_K_TOPO_RESULTS " %s", q->prefix, token);
    queue_reply_free(r);
}

int queue_hash_expire(struct queue *q, const char *hash, int ttl_s, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "EXPIRE %s%s %d", q->prefix, hash, ttl_s);

    if (!r)
        return -1;
    queue_reply_free(r);
    return 0;
}

int queue_hash_each(
    struct queue *q, const char *hash, queue_hash_fn fn, void *ctx, int *count, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "HGETALL %s%s", q->prefix, hash);
    int rc = -1;

    if (count)
        *count = 0;
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: HGETALL %s%s: unexpected reply type %d", q->prefix, hash,
                r->type);
        goto out;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i];
        const redisReply *v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (fn(ctx, f->str, v->str, v->len, err) != 0)
            goto out;
        if (count)
            (*count)++;
    }
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

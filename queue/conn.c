/* SPDX-License-Identifier: MIT */
/*
 * One synchronous hiredis connection plus the key prefix.  A connection whose context reports an
 * error is dead (hiredis rule), so any transport failure frees it and the next call reconnects:
 * callers see MU_E_REDIS once per outage and never a reused broken context.
 */
#include "queue/internal.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/mu_banned.h"

int queue_conn_open(struct queue *q, struct mu_err *err)
{
    /* Above the 1 s blocking reads of clients (libmuster's waits), short enough that a daemon
     * blocked on a dead Redis still answers its workers within their lease. */
    struct timeval timeout = { 2, 0 };
    redisReply *reply = NULL;
    redisContext *ctx = redisConnectWithTimeout(q->url.host, q->url.port, timeout);
    int rc = -1;

    if (!ctx) {
        mu_errf(err, MU_E_NOMEM, "redis: cannot allocate a connection");
        goto out;
    }
    if (ctx->err) {
        mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port, ctx->errstr);
        goto out;
    }
    (void)redisSetTimeout(ctx, timeout);
    if (q->url.password[0]) {
        if (q->url.user[0])
            reply = redisCommand(ctx, "AUTH %s %s", q->url.user, q->url.password);
        else
            reply = redisCommand(ctx, "AUTH %s", q->url.password);
        if (!reply || reply->type == REDIS_REPLY_ERROR) {
            mu_errf(err, MU_E_REDIS, "redis %s:%d: AUTH failed: %s", q->url.host, q->url.port,
                    reply ? reply->str : ctx->errstr);
            goto out;
        }
        freeReplyObject(reply);
        reply = NULL;
    }
    reply = redisCommand(ctx, q->url.db ? "SELECT %d" : "PING", q->url.db);
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
        mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port,
                reply ? reply->str : ctx->errstr);
        goto out;
    }
    q->ctx = ctx;
    ctx = NULL;
    rc = 0;
out:
    if (reply)
        freeReplyObject(reply);
    if (ctx)
        redisFree(ctx);
    return rc;
}

struct queue *queue_new(const char *url, const char *prefix, struct mu_err *err)
{
    struct queue *q = calloc(1, sizeof(*q));
    if (!q) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        return NULL;
    }
    if (queue_url_parse(url, &q->url, err) != 0)
        goto fail;
    if (mu_strlcpy(q->prefix, prefix, sizeof(q->prefix)) >= sizeof(q->prefix)) {
        mu_errf(err, MU_E_INVAL, "key prefix '%s' is too long", prefix);
        goto fail;
    }
    if (queue_conn_open(q, err) != 0)
        goto fail;
    return q;
fail:
    free(q);
    return NULL;
}

void queue_free(struct queue *q)
{
    if (!q)
        return;
    if (q->ctx)
        redisFree(q->ctx);
    free(q);
}

int queue_reconnect(struct queue *q, struct mu_err *err)
{
    if (q->ctx) {
        redisFree(q->ctx);
        q->ctx = NULL;
    }
    return queue_conn_open(q, err);
}

const char *queue_prefix(const struct queue *q)
{
    return q->prefix;
}

static void *command_v(struct queue *q, struct mu_err *err, const char *fmt, va_list ap)
{
    redisReply *reply;

    if (!q->ctx && queue_conn_open(q, err) != 0)
        return NULL;
    reply = redisvCommand(q->ctx, fmt, ap);
    if (!reply) {
        mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port,
                q->ctx->errstr[0] ? q->ctx->errstr : "connection lost");
        redisFree(q->ctx);
        q->ctx = NULL;
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        mu_errf(err, MU_E_REDIS, "redis: %s", reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

void *queue_command(struct queue *q, struct mu_err *err, const char *fmt, ...)
{
    va_list ap;
    void *reply;
    va_start(ap, fmt);
    reply = command_v(q, err, fmt, ap);
    va_end(ap);
    return reply;
}

void queue_conn_drop(struct queue *q)
{
    if (q->ctx) {
        redisFree(q->ctx);
        q->ctx = NULL;
    }
}

void queue_reply_free(void *reply)
{
    if (reply)
        freeReplyObject(reply);
}

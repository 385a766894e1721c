/* SPDX-License-Identifier: MIT */
/*
 * One synchronous hiredis connection plus the key prefix.  A connection whose context reports an
 * error is dead (hiredis rule), so any transport failure frees it and the next call reconnects:
 * callers see MU_E_REDIS once per outage and never a reused broken context.
 *
 * With a redis+sentinel:// URL every (re)connection first asks the Sentinels, in the URL's
 * order, for the primary's address, then checks with ROLE that the server is a primary (a
 * failover in progress may still name the old one), as Redis's guidelines for Sentinel clients
 * say.  A failover closes the old primary's connections, and a write refused with READONLY
 * drops the connection too, so the next call finds the new primary.
 *
 * Each connection notes which server it reached (address and INFO's run_id), so that a writer
 * learns when it now writes to another server than before (queue_server_changes): replication
 * is asynchronous, and what the old primary acknowledged last may be missing on the new one.
 */
#include "queue/internal.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/mu_banned.h"

/* Asks Sentinel s for the address of the primary named master, into host/port.  0 when it named
 * one; -1 with why filled otherwise. */
static int sentinel_ask(const struct mu_redis_host *s,
                        const char *master,
                        char *host,
                        size_t host_size,
                        int *port,
                        char *why,
                        size_t why_size)
{
    struct timeval timeout = { 1, 0 };
    redisContext *ctx = redisConnectWithTimeout(s->host, s->port, timeout);
    redisReply *r = NULL;
    int64_t num = 0;
    int rc = -1;

    if (!ctx || ctx->err) {
        (void)mu_snprintf(why, why_size, "%s:%d: %s", s->host, s->port,
                          ctx ? ctx->errstr : "out of memory");
        goto out;
    }
    (void)redisSetTimeout(ctx, timeout);
    r = redisCommand(ctx, "SENTINEL get-master-addr-by-name %s", master);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        (void)mu_snprintf(why, why_size, "%s:%d: %s", s->host, s->port, r ? r->str : ctx->errstr);
        goto out;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
        || r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING
        || mu_parse_i64(r->element[1]->str, 1, 65535, &num, NULL) != 0) {
        (void)mu_snprintf(why, why_size, "%s:%d knows no primary named '%s'", s->host, s->port,
                          master);
        goto out;
    }
    mu_strlcpy(host, r->element[0]->str, host_size);
    *port = (int)num;
    rc = 0;
out:
    if (r)
        freeReplyObject(r);
    if (ctx)
        redisFree(ctx);
    return rc;
}

/* q->url.host/port: the primary, as the first Sentinel that answers names it. */
static int primary_resolve(struct queue *q, struct mu_err *err)
{
    char why[320] = "";

    for (int i = 0; i < q->url.nsentinels; i++) {
        if (sentinel_ask(&q->url.sentinels[i], q->url.master, q->url.host, sizeof(q->url.host),
                         &q->url.port, why, sizeof(why))
            == 0)
            return 0;
    }
    return mu_errf(err, MU_E_REDIS, "redis sentinel: no Sentinel named the primary '%s' (last: %s)",
                   q->url.master, why);
}

/* The server's role from HELLO 2 (its reply: field, value, ...), which every ACL user may send
 * (ROLE is an admin command); NULL when the reply has none.  Borrowed from r. */
static const char *hello_role(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, "role") == 0
            && r->element[i + 1]->type == REDIS_REPLY_STRING)
            return r->element[i + 1]->str;
    }
    return NULL;
}

/* 0 when the server of ctx is a primary, else -1 with err filled. */
static int primary_check(struct queue *q, redisContext *ctx, struct mu_err *err)
{
    redisReply *r = redisCommand(ctx, "HELLO 2");
    const char *role = hello_role(r);
    int rc = -1;

    if (!role)
        mu_errf(err, MU_E_REDIS, "redis %s:%d: HELLO 2: %s", q->url.host, q->url.port,
                r && r->type == REDIS_REPLY_ERROR ? r->str
                : r                               ? "no role in the reply"
                                                  : ctx->errstr);
    else if (strcmp(role, "master") != 0)
        mu_errf(err, MU_E_REDIS,
                "redis %s:%d: the Sentinels name it primary '%s' but it is a %s (a failover is "
                "under way)",
                q->url.host, q->url.port, q->url.master, role);
    else
        rc = 0;
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Notes the server ctx reached, "host:port run_id" (the run_id is left out when INFO is refused,
 * an ACL without +info), and counts a change from the server of the connection before. */
static void server_note(struct queue *q, redisContext *ctx)
{
    char server[sizeof(q->server)];
    char run_id[48] = "";
    redisReply *r = redisCommand(ctx, "INFO server");

    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "run_id:");
        if (p) {
            size_t n = strcspn(p + 7, "\r\n");
            if (n < sizeof(run_id)) {
                memcpy(run_id, p + 7, n);
                run_id[n] = '\0';
            }
        }
    }
    if (r)
        freeReplyObject(r);
    (void)mu_snprintf(server, sizeof(server), "%s:%d %s", q->url.host, q->url.port, run_id);
    if (q->server[0] && strcmp(q->server, server) != 0)
        q->server_changes++;
    mu_strlcpy(q->server, server, sizeof(q->server));
}

int queue_conn_open(struct queue *q, struct mu_err *err)
{
    /* Above the 1 s blocking reads of clients (libmuster's waits), short enough that a daemon
     * blocked on a dead Redis still answers its workers within their lease. */
    struct timeval timeout = { 2, 0 };
    redisReply *reply = NULL;
    redisContext *ctx = NULL;
    int rc = -1;

    if (q->url.nsentinels > 0 && primary_resolve(q, err) != 0)
        return -1;
    ctx = redisConnectWithTimeout(q->url.host, q->url.port, timeout);
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
    if (q->url.nsentinels > 0 && primary_check(q, ctx, err) != 0)
        goto out;
    server_note(q, ctx);
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
    if (mu_redis_url_parse(url, &q->url, err) != 0)
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

/* The fenced batch's memory belongs to the handle, so it is freed here; lease.c fills and runs
 * the batch (and so calls down to these, never the reverse). */
void queue_batch_clear(struct queue *q)
{
    for (int i = 0; i < q->nbatch; i++)
        redisFreeCommand(q->batch[i]);
    q->nbatch = 0;
}

void queue_batch_free(struct queue *q)
{
    queue_batch_clear(q);
    free(q->batch);
    free(q->batch_len);
    q->batch = NULL;
    q->batch_len = NULL;
    q->cap_batch = 0;
}

void queue_free(struct queue *q)
{
    if (!q)
        return;
    if (q->ctx)
        redisFree(q->ctx);
    queue_batch_free(q);
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

uint64_t queue_server_changes(const struct queue *q)
{
    return q->server_changes;
}

/* The reply of a command just sent on q->ctx (NULL: the transport failed), as queue_command's. */
static void *command_reply(struct queue *q, redisReply *reply, struct mu_err *err)
{
    if (!reply) {
        mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port,
                q->ctx->errstr[0] ? q->ctx->errstr : "connection lost");
        redisFree(q->ctx);
        q->ctx = NULL;
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        mu_errf(err, MU_E_REDIS, "redis: %s", reply->str);
        if (strncmp(reply->str, "READONLY", 8) == 0) {
            /* A replica now (a failover demoted it): the next call finds the primary. */
            redisFree(q->ctx);
            q->ctx = NULL;
        }
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

static void *command_v(struct queue *q, struct mu_err *err, const char *fmt, va_list ap)
{
    if (!q->ctx && queue_conn_open(q, err) != 0)
        return NULL;
    return command_reply(q, redisvCommand(q->ctx, fmt, ap), err);
}

void *queue_command_argv(struct queue *q, struct mu_err *err, int argc, const char **argv)
{
    if (!q->ctx && queue_conn_open(q, err) != 0)
        return NULL;
    return command_reply(q, redisCommandArgv(q->ctx, argc, argv, NULL), err);
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

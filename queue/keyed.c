/* SPDX-License-Identifier: MIT */
/*
 * Commands sent once per job ("HMGET <key> <fields...>", "HGETALL <key>"), formatted once but for
 * the key.  hiredis formats every argument of every command (sdscatfmt per argument); over
 * 100,000 jobs with 19 fields that was a tenth of a restart's CPU and of `musterctl jobs`'s.
 * Here each command is three memcpys.  queue_keyed_each sends them over a list of job ids a
 * window ahead of the reply it reads, so that Redis answers the next jobs while the caller works
 * on this one: sending a whole batch and then reading it left each side idle half the time.
 */
#include "queue/internal.h"

#include <hiredis/hiredis.h>
#include <string.h>

#include "common/mu_banned.h"

int queue_keyed_init(struct queue_keyed *k,
                     const char *command,
                     const char *const *fields,
                     size_t nfields,
                     struct mu_err *err)
{
    int n = snprintf(k->head, sizeof(k->head), "*%zu\r\n$%zu\r\n%s\r\n", nfields + 2,
                     strlen(command), command);

    if (n < 0 || (size_t)n >= sizeof(k->head))
        return mu_errf(err, MU_E_TOOBIG, "command '%s' is too long", command);
    k->head_len = (size_t)n;
    k->tail_len = 0;
    for (size_t i = 0; i < nfields; i++) {
        size_t room = sizeof(k->tail) - k->tail_len;
        n = snprintf(k->tail + k->tail_len, room, "$%zu\r\n%s\r\n", strlen(fields[i]), fields[i]);
        if (n < 0 || (size_t)n >= room)
            return mu_errf(err, MU_E_TOOBIG, "%s: the field names are too long", command);
        k->tail_len += (size_t)n;
    }
    return 0;
}

int queue_keyed_append(struct queue *q,
                       const struct queue_keyed *k,
                       const char *key,
                       size_t key_len)
{
    char cmd[sizeof(k->head) + 24 + QUEUE_KEYED_KEY_MAX + 2 + sizeof(k->tail)];
    size_t len = k->head_len;
    int n;

    if (key_len > QUEUE_KEYED_KEY_MAX)
        return REDIS_ERR;
    memcpy(cmd, k->head, k->head_len);
    n = snprintf(cmd + len, sizeof(cmd) - len, "$%zu\r\n", key_len);
    len += (size_t)n;
    memcpy(cmd + len, key, key_len);
    len += key_len;
    cmd[len++] = '\r';
    cmd[len++] = '\n';
    memcpy(cmd + len, k->tail, k->tail_len);
    len += k->tail_len;
    return redisAppendFormattedCommand(q->ctx, cmd, len);
}

/* Whether id is sent: a string whose key fits in room bytes after "<prefix>job:". */
static bool keyed_sendable(const redisReply *id, size_t room)
{
    return id->type == REDIS_REPLY_STRING && id->len <= room;
}

/* Appends k for ids from *next on until 2 windows are in flight; only once a window has been
 * read, so that each write carries many commands.  REDIS_OK or REDIS_ERR (out of memory). */
static int keyed_refill(struct queue *q,
                        const struct queue_keyed *k,
                        const redisReply *ids,
                        size_t room,
                        size_t *next,
                        size_t *inflight)
{
    char key[QUEUE_KEYED_KEY_MAX + 1];

    if (*inflight > QUEUE_LOAD_WINDOW)
        return REDIS_OK;
    for (; *next < ids->elements && *inflight < (size_t)2 * QUEUE_LOAD_WINDOW; (*next)++) {
        const redisReply *id = ids->element[*next];
        int len;

        if (!keyed_sendable(id, room))
            continue;
        len = snprintf(key, sizeof(key), "%s" QUEUE_K_JOB "%s", q->prefix, id->str);
        if (queue_keyed_append(q, k, key, (size_t)len) != REDIS_OK)
            return REDIS_ERR;
        (*inflight)++;
    }
    return REDIS_OK;
}

int queue_keyed_each(struct queue *q,
                     const struct queue_keyed *k,
                     const redisReply *ids,
                     queue_keyed_fn *fn,
                     void *ctx,
                     struct mu_err *err)
{
    const size_t fixed = strlen(q->prefix) + 4;
    const size_t room = fixed < QUEUE_KEYED_KEY_MAX ? QUEUE_KEYED_KEY_MAX - fixed : 0;
    size_t next = 0;
    size_t inflight = 0;
    int rc = 0;

    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    for (size_t i = 0; i < ids->elements && rc == 0; i++) {
        redisReply *r = NULL;

        if (!keyed_sendable(ids->element[i], room))
            continue;
        if (keyed_refill(q, k, ids, room, &next, &inflight) != REDIS_OK) {
            queue_conn_drop(q);
            return mu_errf(err, MU_E_NOMEM, "redis: cannot queue a job's read: out of memory");
        }
        if (redisGetReply(q->ctx, (void **)&r) != REDIS_OK || !r) {
            mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port,
                    q->ctx->errstr[0] ? q->ctx->errstr : "connection lost");
            queue_conn_drop(q);
            return -1;
        }
        inflight--;
        if (r->type == REDIS_REPLY_ERROR)
            rc = mu_errf(err, MU_E_REDIS, "redis: %s", r->str);
        else
            rc = fn(ctx, i, r, err);
        freeReplyObject(r);
    }
    if (inflight > 0)
        queue_conn_drop(q);
    return rc;
}

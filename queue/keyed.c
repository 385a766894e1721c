/* SPDX-License-Identifier: MIT */
/*
 * Commands sent once per job ("HMGET <key> <fields...>", "HGETALL <key>"), formatted once but for
 * the key.  hiredis formats every argument of every command (sdscatfmt per argument); over
 * 100,000 jobs with 19 fields that was a tenth of a restart's CPU and of `musterctl jobs`'s.
 * Here each command is three memcpys.
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

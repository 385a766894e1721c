/* SPDX-License-Identifier: MIT */
/*
 * Streams of one's own (issue #46, access/access.h).  With proven identity each user writes to
 * <prefix>submit:<user> and <prefix>control:<user>, which only that Redis ACL user may write, so
 * musterd knows who wrote an entry by where it is.  A client does not need to know which mode the
 * cluster runs in: it writes to its own stream when its URL names a user and that stream exists
 * (musterd makes the streams of the users it knows), and to the shared stream when the stream is
 * missing (XADD NOMKSTREAM answers nil) or its user may not write it (NOPERM, the single-user
 * ACL).  The same one round trip in the common case; two only for a named user on a single-user
 * cluster.
 */
#include "queue/internal.h"

#include <hiredis/hiredis.h>
#include <string.h>

#include "common/mu_banned.h"

static const char *const stream_names[] = { [QUEUE_STREAM_SUBMIT] = QUEUE_K_SUBMIT,
                                            [QUEUE_STREAM_CONTROL] = QUEUE_K_CONTROL,
                                            [QUEUE_STREAM_LOGS] = QUEUE_K_LOGREQ };

int queue_stream_key(
    const char *prefix, enum queue_stream s, const char *owner, char *buf, size_t size)
{
    if (owner && owner[0])
        return mu_snprintf(buf, size, "%s%s:%s", prefix, stream_names[s], owner);
    return mu_snprintf(buf, size, "%s%s", prefix, stream_names[s]);
}

const char *queue_owner(const struct queue *q)
{
    return q->url.user[0] && strcmp(q->url.user, "default") != 0 ? q->url.user : "";
}

/* Whether a reply to a write on one's own stream says to use the shared one instead. */
static bool fall_back(const redisReply *r, const struct mu_err *err)
{
    if (!r)
        return strstr(err->msg, "NOPERM") != NULL;
    if (r->type == REDIS_REPLY_NIL)
        return true;
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1
           && r->element[0]->type == REDIS_REPLY_STRING
           && strcmp(r->element[0]->str, "nostream") == 0;
}

void *queue_owned_write(struct queue *q,
                        enum queue_stream s,
                        queue_owned_cmd cmd,
                        void *arg,
                        bool *own,
                        struct mu_err *err)
{
    char key[CFG_NAME_MAX + QUEUE_OWNER_MAX + 16];
    char first[sizeof(err->msg)] = "";
    redisReply *r = NULL;
    const char *owner = queue_owner(q);

    *own = false;
    if (owner[0]) {
        (void)queue_stream_key(q->prefix, s, owner, key, sizeof(key));
        r = cmd(q, key, true, arg, err);
        if (!fall_back(r, err)) {
            *own = true;
            return r;
        }
        if (!r)
            mu_strlcpy(first, err->msg, sizeof(first));
        queue_reply_free(r);
    }
    (void)queue_stream_key(q->prefix, s, "", key, sizeof(key));
    r = cmd(q, key, false, arg, err);
    if (!r && first[0]) {
        char shared[sizeof(err->msg)];
        mu_strlcpy(shared, err->msg, sizeof(shared));
        mu_errf(err, MU_E_REDIS, "%s; and the shared stream: %s", first, shared);
    }
    return r;
}

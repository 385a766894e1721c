/* SPDX-License-Identifier: MIT */
/*
 * Questions to musterd that want an answer (musterctl why, issue #18): the question is a
 * control entry (queue_control_post, with its deadline), so it reaches musterd the way every
 * operator command does and the same ACL governs it; the answer is one value that musterd
 * pushes on <prefix><kind>:<entry id>, a list the asker pops (BLPOP) and that expires after
 * QUEUE_ANSWER_TTL_S when nobody does.  The key is named by the entry id, never by a client.
 */
#include "queue/internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

int queue_answer_push(
    struct queue *q, const char *key, const char *value, size_t len, struct mu_err *err)
{
    int sent = 0;

    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    sent += queue_append(q, "RPUSH %s%s %b", q->prefix, key, value, len) == REDIS_OK;
    sent += queue_append(q, "EXPIRE %s%s %d", q->prefix, key, QUEUE_ANSWER_TTL_S) == REDIS_OK;
    if (queue_pipeline_finish(q, sent, err) != 0)
        return -1;
    if (sent != 2)
        return mu_errf(err, MU_E_REDIS, "answer %s: cannot queue the commands", key);
    return 0;
}

int queue_answer_wait(
    struct queue *q, const char *key, int block_ms, char **value, size_t *len, struct mu_err *err)
{
    char timeout[32];
    redisReply *r;
    int rc = 0;

    *value = NULL;
    *len = 0;
    (void)mu_snprintf(timeout, sizeof(timeout), "%d.%03d", block_ms / 1000, block_ms % 1000);
    r = queue_command(q, err, "BLPOP %s%s %s", q->prefix, key, timeout);
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2
        && r->element[1]->type == REDIS_REPLY_STRING) {
        *value = malloc(r->element[1]->len + 1);
        if (!*value) {
            rc = mu_errf(err, MU_E_NOMEM, "out of memory for an answer");
        } else {
            memcpy(*value, r->element[1]->str, r->element[1]->len);
            (*value)[r->element[1]->len] = '\0';
            *len = r->element[1]->len;
        }
    } else if (r->type != REDIS_REPLY_NIL) {
        rc = mu_errf(err, MU_E_REDIS, "BLPOP %s%s: unexpected reply", q->prefix, key);
    }
    queue_reply_free(r);
    return rc;
}

int queue_control_verdict(struct queue *q, const char *entry_id, int timeout_ms, struct mu_err *err)
{
    char key[QUEUE_JOB_ID_MAX + 8];
    char *value = NULL;
    size_t len = 0;
    cJSON *doc;
    const cJSON *error;
    int rc;

    (void)mu_snprintf(key, sizeof(key), QUEUE_K_REPLY "%s", entry_id);
    /* One second past the entry's deadline: musterd answers at once what it read in time. */
    for (int waited = 0; waited <= timeout_ms && !value; waited += 1000) {
        if (queue_answer_wait(q, key, 1000, &value, &len, err) != 0)
            return -1;
    }
    if (!value)
        return mu_errf(err, MU_E_STATE,
                       "musterd did not answer within %d s (is it stuck?); the command expired "
                       "and was not applied",
                       timeout_ms / 1000);
    doc = cJSON_ParseWithLength(value, len);
    free(value);
    error = cJSON_GetObjectItemCaseSensitive(doc, "error");
    if (cJSON_IsString(error))
        rc = mu_errf(err, MU_E_STATE, "%s", error->valuestring);
    else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "ok")))
        rc = mu_errf(err, MU_E_PARSE, "musterd's answer is not a verdict");
    else
        rc = 0;
    cJSON_Delete(doc);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * The Redis half of the job history (issue #47, queue.h "archive"): which finished jobs wait for
 * the history, and their removal once they are in it.  A job's final write adds it to
 * <prefix>finished (store.c, in the same round trip), so a job is always in exactly one of:
 * active, finished (final, not in the history yet), archived (in the history, leaving Redis at
 * its time), gone.  Each step is idempotent and goes forward only after the step before it is
 * durable: a job leaves finished only after its row was committed, and its hash is deleted only
 * when it is in archived, so a crash at any point loses nothing and the next pass redoes at most
 * the step it interrupted (the history's INSERT OR REPLACE makes the redo harmless).
 */
#include "queue/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define FIELDS_MAX 128 /* fields of a job hash handed to the callback (musterd writes ~40) */
#define DEL_CHUNK  256 /* an array's elements deleted per fenced round trip */

struct each_ctx {
    const redisReply *ids;
    queue_archive_fn *fn;
    void *ctx;
};

static int each_hash(void *vctx, size_t i, const redisReply *r, struct mu_err *err)
{
    struct each_ctx *c = vctx;
    const char *keys[FIELDS_MAX];
    const char *values[FIELDS_MAX];
    int n = 0;

    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t k = 0; k + 1 < r->elements && n < FIELDS_MAX; k += 2) {
            if (r->element[k]->type != REDIS_REPLY_STRING
                || r->element[k + 1]->type != REDIS_REPLY_STRING)
                continue;
            keys[n] = r->element[k]->str;
            values[n] = r->element[k + 1]->str;
            n++;
        }
    }
    return c->fn(c->ctx, c->ids->element[i]->str, keys, values, n, err);
}

int queue_finished_each(
    struct queue *q, int max, queue_archive_fn *fn, void *ctx, int *seen, struct mu_err *err)
{
    redisReply *ids =
        queue_command(q, err, "ZRANGE %s" QUEUE_K_FINISHED " 0 %d", q->prefix, max - 1);
    struct queue_keyed k;
    struct each_ctx c = { ids, fn, ctx };
    int rc = -1;

    *seen = 0;
    if (!ids)
        return -1;
    if (ids->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: ZRANGE %s" QUEUE_K_FINISHED ": unexpected reply",
                q->prefix);
        goto out;
    }
    for (size_t i = 0; i < ids->elements; i++) {
        if (ids->element[i]->type != REDIS_REPLY_STRING) {
            mu_errf(err, MU_E_REDIS, "redis: ZRANGE %s" QUEUE_K_FINISHED ": unexpected reply",
                    q->prefix);
            goto out;
        }
    }
    if (queue_keyed_init(&k, "HGETALL", NULL, 0, err) != 0)
        goto out;
    rc = queue_keyed_each(q, &k, ids, each_hash, &c, err);
    if (rc == 0)
        *seen = (int)ids->elements;
out:
    freeReplyObject(ids);
    return rc < 0 ? -1 : 0;
}

/* An element's array: "<array id>_<index>" -> len of the array id, 0 when id is no element. */
static size_t element_of(const char *id)
{
    const char *u = strrchr(id, '_');
    return u ? (size_t)(u - id) : 0;
}

/* Whether element id's array (its first arr bytes) still has its hash. */
static int array_exists(struct queue *q, const char *id, size_t arr, bool *yes, struct mu_err *err)
{
    redisReply *r = queue_command(q, err, "EXISTS %s" QUEUE_K_JOB "%b", q->prefix, id, arr);
    if (!r)
        return -1;
    *yes = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return 0;
}

int queue_finished_done(
    struct queue *q, const char *const *ids, const uint64_t *ended_ms, int n, struct mu_err *err)
{
    bool *in_set = NULL;
    int sent = 0;
    bool nomem = false;
    int rc = -1;

    if (n <= 0)
        return 0;
    in_set = calloc((size_t)n, sizeof(*in_set));
    if (!in_set)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    /* An element leaves Redis with its array: it waits in the array's own set.  (One archived
     * after its array left, which the end order makes unlikely, goes by itself.)  Only this
     * archiver removes arrays, so the answers hold until the write.  Read first: nothing may
     * be in the pipeline meanwhile. */
    for (int i = 0; i < n; i++) {
        size_t arr = element_of(ids[i]);
        if (arr && array_exists(q, ids[i], arr, &in_set[i], err) != 0)
            goto out;
    }
    for (int i = 0; i < n && !nomem; i++) {
        size_t arr = element_of(ids[i]);
        if (in_set[i])
            nomem |=
                queue_append(q, "SADD %s" QUEUE_K_ARCHIVED ":%b %s", q->prefix, ids[i], arr, ids[i])
                != REDIS_OK;
        else
            nomem |= queue_append(q, "ZADD %s" QUEUE_K_ARCHIVED " %llu %s", q->prefix,
                                  (unsigned long long)ended_ms[i], ids[i])
                     != REDIS_OK;
        nomem |= queue_append(q, "ZREM %s" QUEUE_K_FINISHED " %s", q->prefix, ids[i]) != REDIS_OK;
        sent += 2;
    }
    if (nomem) {
        queue_batch_clear(q);
        queue_conn_drop(q);
        mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    rc = queue_pipeline_finish(q, sent, err);
out:
    free(in_set);
    return rc;
}

/* Deletes the hashes of an array's archived elements (the set <prefix>archived:<id>), in
 * chunks, then the set. */
static int elements_remove(struct queue *q, const char *id, int *removed, struct mu_err *err)
{
    for (;;) {
        redisReply *r = queue_command(q, err, "SRANDMEMBER %s" QUEUE_K_ARCHIVED ":%s %d", q->prefix,
                                      id, DEL_CHUNK);
        int sent = 0;
        bool nomem = false;
        if (!r)
            return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            freeReplyObject(r);
            break;
        }
        for (size_t i = 0; i < r->elements && !nomem; i++) {
            const char *e = r->element[i]->str;
            if (r->element[i]->type != REDIS_REPLY_STRING)
                continue;
            nomem |= queue_append(q, "DEL %s" QUEUE_K_JOB "%s", q->prefix, e) != REDIS_OK;
            nomem |= queue_append(q, "ZREM %s" QUEUE_K_JOBS " %s", q->prefix, e) != REDIS_OK;
            nomem |=
                queue_append(q, "SREM %s" QUEUE_K_ARCHIVED ":%s %s", q->prefix, id, e) != REDIS_OK;
            sent += 3;
            (*removed)++;
        }
        freeReplyObject(r);
        if (nomem) {
            queue_batch_clear(q);
            queue_conn_drop(q);
            return mu_errf(err, MU_E_NOMEM, "out of memory");
        }
        if (queue_pipeline_finish(q, sent, err) != 0)
            return -1;
    }
    return 0;
}

/* The key of the stream job id was submitted on (submit, or submit:<user> with proven
 * identity: the hash's submitted_by) into buf.  0 or -1. */
static int submit_stream_of(
    struct queue *q, const char *id, char *buf, size_t size, struct mu_err *err)
{
    redisReply *r =
        queue_command(q, err, "HGET %s" QUEUE_K_JOB "%s " QUEUE_F_SUBMITTED_BY, q->prefix, id);
    int rc;

    if (!r)
        return -1;
    rc = queue_stream_key(q->prefix, QUEUE_STREAM_SUBMIT,
                          r->type == REDIS_REPLY_STRING ? r->str : NULL, buf, size);
    freeReplyObject(r);
    if (rc != 0)
        return mu_errf(err, MU_E_TOOBIG, "job %s: its submit stream's name is too long", id);
    return 0;
}

int queue_archived_expire(
    struct queue *q, uint64_t before_ms, int max, int *removed, struct mu_err *err)
{
    redisReply *ids =
        queue_command(q, err, "ZRANGEBYSCORE %s" QUEUE_K_ARCHIVED " -inf (%llu LIMIT 0 %d",
                      q->prefix, (unsigned long long)before_ms, max);
    int rc = -1;

    *removed = 0;
    if (!ids)
        return -1;
    if (ids->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: ZRANGEBYSCORE %s" QUEUE_K_ARCHIVED ": unexpected reply",
                q->prefix);
        goto out;
    }
    for (size_t i = 0; i < ids->elements; i++) {
        const char *id = ids->element[i]->str;
        char stream[CFG_NAME_MAX + QUEUE_OWNER_MAX + 16];
        if (ids->element[i]->type != REDIS_REPLY_STRING)
            continue;
        if (submit_stream_of(q, id, stream, sizeof(stream), err) != 0)
            goto out;
        /* The elements first: a crash between leaves the array to be removed again. */
        if (elements_remove(q, id, removed, err) != 0)
            goto out;
        /* A job's id is its submission's entry id: the entry (acknowledged long ago) goes with
         * the hash, so that no reader takes it for a submission not yet taken in. */
        if (queue_append(q, "DEL %s" QUEUE_K_JOB "%s", q->prefix, id) != REDIS_OK
            || queue_append(q, "ZREM %s" QUEUE_K_JOBS " %s", q->prefix, id) != REDIS_OK
            || queue_append(q, "XDEL %s %s", stream, id) != REDIS_OK
            || queue_append(q, "ZREM %s" QUEUE_K_ARCHIVED " %s", q->prefix, id) != REDIS_OK) {
            queue_batch_clear(q);
            queue_conn_drop(q);
            mu_errf(err, MU_E_NOMEM, "out of memory");
            goto out;
        }
        if (queue_pipeline_finish(q, 4, err) != 0)
            goto out;
        (*removed)++;
    }
    rc = 0;
out:
    freeReplyObject(ids);
    return rc;
}

/* The smallest entry id the group still needs: the first one pending (read, not acknowledged),
 * or, when none is, the last one delivered (acknowledged: keeping it costs one entry).  "" when
 * the group does not exist yet (nothing to trim). */
static int submit_needed(struct queue *q, char *minid, size_t size, struct mu_err *err)
{
    redisReply *g = NULL;
    redisReply *p = NULL;
    int rc = -1;

    minid[0] = '\0';
    /* The last delivered first: whatever is delivered later is above it, and whatever was
     * delivered before and is not pending in the later XPENDING was acknowledged. */
    g = queue_command(q, err, "XINFO GROUPS %s" QUEUE_K_SUBMIT, q->prefix);
    if (!g) {
        if (err && strstr(err->msg, "no such key"))
            rc = 0;
        goto out;
    }
    for (size_t i = 0; g->type == REDIS_REPLY_ARRAY && i < g->elements; i++) {
        const redisReply *e = g->element[i];
        const char *name = NULL;
        const char *last = NULL;
        for (size_t k = 0; e->type == REDIS_REPLY_ARRAY && k + 1 < e->elements; k += 2) {
            if (e->element[k]->type != REDIS_REPLY_STRING
                || e->element[k + 1]->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(e->element[k]->str, "name") == 0)
                name = e->element[k + 1]->str;
            else if (strcmp(e->element[k]->str, "last-delivered-id") == 0)
                last = e->element[k + 1]->str;
        }
        if (name && last && strcmp(name, QUEUE_GROUP) == 0)
            (void)mu_strlcpy(minid, last, size);
    }
    if (!minid[0]) {
        rc = 0;
        goto out;
    }
    p = queue_command(q, err, "XPENDING %s" QUEUE_K_SUBMIT " %s", q->prefix, QUEUE_GROUP);
    if (!p)
        goto out;
    if (p->type == REDIS_REPLY_ARRAY && p->elements >= 2
        && p->element[1]->type == REDIS_REPLY_STRING)
        (void)mu_strlcpy(minid, p->element[1]->str, size);
    rc = 0;
out:
    if (g)
        freeReplyObject(g);
    if (p)
        freeReplyObject(p);
    return rc;
}

/* A stream id "ms-seq" (seq optional) as two numbers; false when it is none. */
static bool id_parse(const char *text, unsigned long long *ms, unsigned long long *seq)
{
    char *end = NULL;

    errno = 0;
    *ms = strtoull(text, &end, 10);
    if (errno || end == text)
        return false;
    *seq = 0;
    if (*end == '-') {
        const char *s = end + 1;
        *seq = strtoull(s, &end, 10);
        if (errno || end == s)
            return false;
    }
    return *end == '\0';
}

/* True when stream id a is below b (compared as numbers). */
static bool id_below(const char *a, const char *b)
{
    unsigned long long ams;
    unsigned long long aseq;
    unsigned long long bms;
    unsigned long long bseq;

    if (!id_parse(a, &ams, &aseq) || !id_parse(b, &bms, &bseq))
        return false;
    return ams < bms || (ams == bms && aseq < bseq);
}

int queue_submit_trim(struct queue *q, uint64_t before_ms, long long *trimmed, struct mu_err *err)
{
    char minid[64];
    char cut[32];
    redisReply *r = NULL;
    int rc = -1;

    *trimmed = 0;
    if (submit_needed(q, minid, sizeof(minid), err) != 0)
        return -1;
    if (!minid[0] || strcmp(minid, "0-0") == 0)
        return 0;
    /* Entry ids are Redis's ms: nothing younger than before_ms goes. */
    (void)mu_snprintf(cut, sizeof(cut), "%llu-0", (unsigned long long)before_ms);
    if (id_below(cut, minid))
        (void)mu_strlcpy(minid, cut, sizeof(minid));
    r = queue_command(q, err, "XTRIM %s" QUEUE_K_SUBMIT " MINID %s", q->prefix, minid);
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER) {
        *trimmed = r->integer;
        rc = 0;
    } else {
        mu_errf(err, MU_E_REDIS, "redis: XTRIM %s" QUEUE_K_SUBMIT ": %s", q->prefix,
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return rc;
}

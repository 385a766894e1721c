/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's intake (docs/design.md §6): XREADGROUP on the submit and control streams (and the
 * log requests of queue/logs.c) over a
 * connection of its own, so the daemon can keep a blocking read outstanding and learn of new
 * entries by polling a socket instead of asking Redis in a loop.  Nothing is acknowledged here:
 * the caller acknowledges a submission only once its job is stored (queue_job_update).
 * On (re)connect, entries this consumer took but never acknowledged are delivered again, and
 * entries left idle by another (dead) consumer are claimed.  Besides the shared streams it reads
 * each known user's own (queue/owned.c), and any user's found in Redis, so that an entry is
 * always answered, by whom it came from (the entry's owner).
 */
#include "queue/internal.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define INTAKE_BATCH    "512"  /* entries per read (COUNT) */
#define INTAKE_BLOCK_MS "2000" /* a read waits this long for new entries (BLOCK) */

#define INTAKE_KEY_MAX (CFG_NAME_MAX + QUEUE_OWNER_MAX + 16)

struct intake_stream {
    char key[INTAKE_KEY_MAX];
    enum queue_stream kind;
    char owner[QUEUE_OWNER_MAX]; /* "" for the shared streams */
};

struct queue_intake {
    struct queue conn; /* its own connection; conn.ctx is NULL while down */
    char consumer[64];
    struct intake_stream *streams; /* the shared three first (by enum queue_stream), then each
                                      owner's submit and control; rebuilt at each setup */
    int nstreams;
    int cap_streams;
    char (*users)[QUEUE_OWNER_MAX]; /* queue_intake_users' */
    int nusers;
    bool waiting;    /* an XREADGROUP ... > is outstanding */
    bool need_setup; /* streams, group creation and pending re-read still to do */
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
                          const struct intake_stream *st,
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
        qe->stream = st->kind;
        mu_strlcpy(qe->owner, st->owner, sizeof(qe->owner));
        if (st->kind == QUEUE_STREAM_SUBMIT) {
            v = field_value(e->element[1], "spec");
            if (v && v->type == REDIS_REPLY_STRING) {
                qe->spec = malloc(v->len + 1);
                if (!qe->spec)
                    return mu_errf(err, MU_E_NOMEM, "intake: out of memory");
                memcpy(qe->spec, v->str, v->len);
                qe->spec[v->len] = '\0';
                qe->spec_len = v->len;
            }
        } else if (st->kind == QUEUE_STREAM_LOGS) {
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

static const struct intake_stream *stream_find(const struct queue_intake *qi, const char *key)
{
    for (int i = 0; i < qi->nstreams; i++) {
        if (strcmp(qi->streams[i].key, key) == 0)
            return &qi->streams[i];
    }
    return NULL;
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
        const struct intake_stream *st;
        if (s->type != REDIS_REPLY_ARRAY || s->elements != 2
            || s->element[0]->type != REDIS_REPLY_STRING)
            continue;
        st = stream_find(qi, s->element[0]->str);
        if (st && entries_append(s->element[1], st, out, n, err) != 0)
            return -1;
    }
    return 0;
}

static int stream_add(struct queue_intake *qi,
                      enum queue_stream kind,
                      const char *owner,
                      struct mu_err *err)
{
    struct intake_stream *st;
    char key[INTAKE_KEY_MAX];

    (void)queue_stream_key(qi->conn.prefix, kind, owner, key, sizeof(key));
    if (stream_find(qi, key))
        return 0;
    if (qi->nstreams == qi->cap_streams) {
        int cap = qi->cap_streams ? 2 * qi->cap_streams : 8;
        struct intake_stream *grown = realloc(qi->streams, (size_t)cap * sizeof(*grown));
        if (!grown)
            return mu_errf(err, MU_E_NOMEM, "intake: out of memory for the streams");
        qi->streams = grown;
        qi->cap_streams = cap;
    }
    st = &qi->streams[qi->nstreams++];
    mu_strlcpy(st->key, key, sizeof(st->key));
    st->kind = kind;
    mu_strlcpy(st->owner, owner, sizeof(st->owner));
    return 0;
}

/* Whether name is an owner name (access/access.h: [A-Za-z0-9._-], 1..63 bytes). */
static bool owner_is_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= QUEUE_OWNER_MAX)
        return false;
    for (const char *p = name; *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')
              || *p == '.' || *p == '_' || *p == '-'))
            return false;
    }
    return true;
}

/* The owners of existing streams <prefix><kind>:<owner>, added with both their streams. */
static int streams_found(struct queue_intake *qi, enum queue_stream kind, struct mu_err *err)
{
    char pattern[2 * CFG_NAME_MAX + 16];
    char head[INTAKE_KEY_MAX];
    char cursor[32] = "0";
    size_t np = 0;
    size_t nhead;

    for (const char *p = qi->conn.prefix; *p && np + 3 < sizeof(pattern) - 16; p++) {
        if (strchr("*?[]\\", *p))
            pattern[np++] = '\\';
        pattern[np++] = *p;
    }
    pattern[np] = '\0';
    (void)queue_stream_key("", kind, "", head, sizeof(head));
    (void)mu_snprintf(pattern + np, sizeof(pattern) - np, "%s:*", head);
    (void)queue_stream_key(qi->conn.prefix, kind, "", head, sizeof(head));
    nhead = strlen(head) + 1;
    do {
        redisReply *r = queue_command(&qi->conn, err, "SCAN %s MATCH %s COUNT 1000 TYPE stream",
                                      cursor, pattern);
        if (!r)
            return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
            || r->element[0]->type != REDIS_REPLY_STRING
            || r->element[1]->type != REDIS_REPLY_ARRAY) {
            queue_reply_free(r);
            return mu_errf(err, MU_E_REDIS, "intake: unexpected SCAN reply");
        }
        mu_strlcpy(cursor, r->element[0]->str, sizeof(cursor));
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *k = r->element[1]->element[i];
            const char *owner =
                k->type == REDIS_REPLY_STRING && k->len > nhead ? k->str + nhead : "";
            if (owner_is_valid(owner)
                && (stream_add(qi, QUEUE_STREAM_SUBMIT, owner, err) != 0
                    || stream_add(qi, QUEUE_STREAM_CONTROL, owner, err) != 0)) {
                queue_reply_free(r);
                return -1;
            }
        }
        queue_reply_free(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* The streams to read: the shared three, each known user's two, and those found in Redis. */
static int streams_build(struct queue_intake *qi, struct mu_err *err)
{
    qi->nstreams = 0;
    for (int s = 0; s < 3; s++) {
        if (stream_add(qi, (enum queue_stream)s, "", err) != 0)
            return -1;
    }
    for (int u = 0; u < qi->nusers; u++) {
        if (stream_add(qi, QUEUE_STREAM_SUBMIT, qi->users[u], err) != 0
            || stream_add(qi, QUEUE_STREAM_CONTROL, qi->users[u], err) != 0)
            return -1;
    }
    if (streams_found(qi, QUEUE_STREAM_SUBMIT, err) != 0
        || streams_found(qi, QUEUE_STREAM_CONTROL, err) != 0)
        return -1;
    return 0;
}

/* XREADGROUP over every stream, from id (">" new entries, "0" our own pending ones); heap argv
 * of *argc entries (free with free(); the strings are qi's or static), NULL on no memory. */
static const char **read_argv(
    const struct queue_intake *qi, bool block, const char *id, const char *count, int *argc)
{
    const char **argv = malloc(((size_t)qi->nstreams * 2 + 10) * sizeof(*argv));
    int n = 0;

    if (!argv)
        return NULL;
    argv[n++] = "XREADGROUP";
    argv[n++] = "GROUP";
    argv[n++] = QUEUE_GROUP;
    argv[n++] = qi->consumer;
    argv[n++] = "COUNT";
    argv[n++] = count;
    if (block) {
        argv[n++] = "BLOCK";
        argv[n++] = INTAKE_BLOCK_MS;
    }
    argv[n++] = "STREAMS";
    for (int i = 0; i < qi->nstreams; i++)
        argv[n++] = qi->streams[i].key;
    for (int i = 0; i < qi->nstreams; i++)
        argv[n++] = id;
    *argc = n;
    return argv;
}

static int intake_setup(struct queue_intake *qi,
                        struct queue_entry **out,
                        int *n,
                        struct mu_err *err)
{
    redisReply *r = NULL;
    const char **argv;
    int argc;
    int rc;

    if (streams_build(qi, err) != 0)
        return -1;
    for (int s = 0; s < qi->nstreams; s++) {
        r = queue_command(&qi->conn, err, "XGROUP CREATE %s %s 0 MKSTREAM", qi->streams[s].key,
                          QUEUE_GROUP);
        if (!r && strstr(err->msg, "BUSYGROUP") == NULL)
            return -1;
        queue_reply_free(r);
    }
    /* Our own pending entries: delivered before a crash, never acknowledged. */
    argv = read_argv(qi, false, "0", "100000", &argc);
    if (!argv)
        return mu_errf(err, MU_E_NOMEM, "intake: out of memory");
    r = queue_command_argv(&qi->conn, err, argc, argv);
    free(argv);
    if (!r)
        return -1;
    rc = read_reply_parse(qi, r, out, n, err);
    queue_reply_free(r);
    return rc;
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
    free(qi->streams);
    free(qi->users);
    free(qi);
}

int queue_intake_users(struct queue_intake *qi, const char *const *users, int n, struct mu_err *err)
{
    char(*copy)[QUEUE_OWNER_MAX] = n > 0 ? calloc((size_t)n, sizeof(*copy)) : NULL;

    if (n > 0 && !copy)
        return mu_errf(err, MU_E_NOMEM, "intake: out of memory for %d users", n);
    for (int i = 0; i < n; i++)
        mu_strlcpy(copy[i], users[i], sizeof(copy[i]));
    free(qi->users);
    qi->users = copy;
    qi->nusers = n;
    queue_conn_drop(&qi->conn); /* the outstanding read names the old streams */
    qi->waiting = false;
    qi->need_setup = true;
    return 0;
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
    {
        int argc;
        const char **argv = read_argv(qi, true, ">", INTAKE_BATCH, &argc);
        int sent = argv ? redisAppendCommandArgv(ctx, argc, argv, NULL) : REDIS_ERR;
        free(argv);
        if (sent != REDIS_OK) {
            intake_fail(qi, err, "send");
            goto fail_entries;
        }
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
                       const struct queue_intake *qi,
                       const char *consumer,
                       int min_idle_ms,
                       struct queue_entry **out,
                       int *n,
                       struct mu_err *err)
{
    *out = NULL;
    *n = 0;
    for (int s = 0; s < qi->nstreams; s++) {
        const struct intake_stream *st = &qi->streams[s];
        redisReply *r = queue_command(q, err, "XAUTOCLAIM %s %s %s %d 0-0 COUNT %s", st->key,
                                      QUEUE_GROUP, consumer, min_idle_ms, INTAKE_BATCH);
        int rc = 0;
        if (!r) {
            if (strstr(err->msg, "NOGROUP"))
                continue; /* the intake has not made the group yet */
            goto fail;
        }
        /* Redis 7: [next-cursor, [[id, [field, value, ...]], ...], [deleted ids]] */
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2)
            rc = entries_append(r->element[1], st, out, n, err);
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

/* SPDX-License-Identifier: MIT */
/*
 * The scheduler lease and fenced writes (issue #14, queue.h).  Several musterd share one Redis;
 * the one holding <prefix>leader leads.  Taking the key increments <prefix>epoch in the same
 * script, so the epoch is the fencing token the workers already honour.
 *
 * Why a script per write rather than a check before it: a leader frozen between its check and
 * its write (a stall, kill -STOP) would write after the next leader started.  So once fenced, a
 * connection's write pipelines are not sent as they are built: queue_append formats each command
 * into q->batch, and queue_pipeline_finish sends the whole batch as one EVALSHA of fence_lua,
 * which compares the key with the token and then runs the commands, in one atomic step.  Nothing
 * of a refused batch is written.  The lease's TTL is kept by Redis's clock, never the hosts'.
 */
#include "queue/internal.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* Commands in one fenced pipeline: a job update makes at most 12, and a scheduling pass sends its
 * starts and reasons together (hundreds). */
#define BATCH_MAX 65536

/* KEYS leader, epoch; ARGV token, epoch, ttl_ms, then per command: argc, argv...  An expired key
 * is taken back when no later epoch was handed out; an epoch below ours (a promoted replica that
 * missed our INCR) is raised back to ours, so epochs never go backwards for the workers. */
static const char fence_lua[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur ~= ARGV[1] then\n"
    "  if cur or tonumber(redis.call('GET', KEYS[2]) or '0') > tonumber(ARGV[2]) then\n"
    "    return redis.error_reply('FENCED this scheduler no longer holds ' .. KEYS[1])\n"
    "  end\n"
    "  redis.call('SET', KEYS[2], ARGV[2])\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "end\n"
    "local out = {}\n"
    "local i = 4\n"
    "while i <= #ARGV do\n"
    "  local n = tonumber(ARGV[i])\n"
    "  out[#out + 1] = redis.pcall(unpack(ARGV, i + 1, i + n))\n"
    "  i = i + n + 1\n"
    "end\n"
    "return out\n";

/* KEYS leader, epoch, leadership, standbys; ARGV holder, pid, ttl_ms, take_own, take_free.  A
 * standby that does not win is noted in standbys (sorted set: holder by Redis ms), which the
 * leader reads. */
static const char acquire_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur then\n"
    "  local sp = string.find(cur, ' ', 1, true)\n"
    "  if ARGV[4] ~= '1' or not sp or string.sub(cur, sp + 1) ~= ARGV[1] then\n"
    "    redis.call('ZADD', KEYS[4], now, ARGV[1])\n"
    "    return {0, cur}\n"
    "  end\n"
    "elseif ARGV[5] ~= '1' then\n"
    "  redis.call('ZADD', KEYS[4], now, ARGV[1])\n"
    "  return {0, ''}\n"
    "end\n"
    "local e = redis.call('INCR', KEYS[2])\n"
    "local tok = tostring(e) .. ' ' .. ARGV[1]\n"
    "redis.call('SET', KEYS[1], tok, 'PX', ARGV[3])\n"
    "redis.call('ZREM', KEYS[4], ARGV[1])\n"
    "redis.call('HSET', KEYS[3], 'epoch', tostring(e), 'holder', ARGV[1], 'pid', ARGV[2],\n"
    "           'since_ms', tostring(now))\n"
    "return {e, tok}\n";

/* KEYS leader, epoch, standbys, leadership; ARGV token, ttl_ms, epoch, holder, pid.  {held,
 * standbys seen within two TTLs}; held 2 = the key had expired (or a promoted replica never had
 * it) while nobody took a later epoch, and is set again, with the epoch and the leadership hash
 * as this leader took them. */
static const char renew_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 2 * tonumber(ARGV[2]))\n"
    "local n = redis.call('ZCARD', KEYS[3])\n"
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {1, n}\n"
    "end\n"
    "if not cur and tonumber(redis.call('GET', KEYS[2]) or '0') <= tonumber(ARGV[3]) then\n"
    "  redis.call('SET', KEYS[2], ARGV[3])\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "  if redis.call('HGET', KEYS[4], 'epoch') ~= ARGV[3] then\n"
    "    redis.call('HSET', KEYS[4], 'epoch', ARGV[3], 'holder', ARGV[4], 'pid', ARGV[5],\n"
    "               'since_ms', tostring(now))\n"
    "  end\n"
    "  return {2, n}\n"
    "end\n"
    "return {0, n}\n";

/* KEYS leader; ARGV token */
static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                  "  return redis.call('DEL', KEYS[1])\n"
                                  "end\n"
                                  "return 0\n";

/* ---- the batch ---- */

static int batch_push(struct queue *q, char *cmd, int len)
{
    if (len < 0 || !cmd)
        return REDIS_ERR;
    if (q->nbatch == q->cap_batch) {
        int cap = q->cap_batch ? q->cap_batch * 2 : 16;
        char **b;
        int *l;
        if (cap > BATCH_MAX)
            goto fail;
        b = realloc(q->batch, (size_t)cap * sizeof(*b));
        if (!b)
            goto fail;
        q->batch = b;
        l = realloc(q->batch_len, (size_t)cap * sizeof(*l));
        if (!l)
            goto fail;
        q->batch_len = l;
        q->cap_batch = cap;
    }
    q->batch[q->nbatch] = cmd;
    q->batch_len[q->nbatch++] = len;
    return REDIS_OK;
fail:
    redisFreeCommand(cmd);
    return REDIS_ERR;
}

int queue_append(struct queue *q, const char *fmt, ...)
{
    va_list ap;
    char *cmd = NULL;
    int len;
    int rc;

    va_start(ap, fmt);
    if (!q->fence[0]) {
        rc = redisvAppendCommand(q->ctx, fmt, ap);
        va_end(ap);
        return rc;
    }
    len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    return batch_push(q, cmd, len);
}

int queue_append_argv(struct queue *q, int argc, const char **argv, const size_t *lens)
{
    char *cmd = NULL;
    int len;

    if (!q->fence[0])
        return redisAppendCommandArgv(q->ctx, argc, argv, lens);
    len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    return batch_push(q, cmd, len);
}

/* Reads a RESP integer ending in \r\n at *p (within end); -1 when malformed. */
static long resp_int(const char **p, const char *end)
{
    long v = 0;
    const char *s = *p;
    if (s >= end || *s < '0' || *s > '9')
        return -1;
    while (s < end && *s >= '0' && *s <= '9' && v < 100000000)
        v = v * 10 + (*s++ - '0');
    if (end - s < 2 || s[0] != '\r' || s[1] != '\n')
        return -1;
    *p = s + 2;
    return v;
}

/* The arguments of formatted command cmd ("*N\r\n$L\r\n...") appended to argv/lens at *argc
 * (capacity cap); the count goes first, as fence_lua reads it, in count (a buffer the caller
 * keeps alive). */
static int batch_args(const char *cmd,
                      int len,
                      const char **argv,
                      size_t *lens,
                      int *argc,
                      int cap,
                      char *count,
                      size_t count_size)
{
    const char *p = cmd + 1;
    const char *end = cmd + len;
    long n;

    if (len < 4 || cmd[0] != '*' || (n = resp_int(&p, end)) < 1 || *argc + 1 + n > cap)
        return -1;
    (void)mu_snprintf(count, count_size, "%ld", n);
    argv[*argc] = count;
    lens[(*argc)++] = strlen(count);
    for (long i = 0; i < n; i++) {
        long l;
        if (p >= end || *p++ != '$' || (l = resp_int(&p, end)) < 0 || end - p < l + 2)
            return -1;
        argv[*argc] = p;
        lens[(*argc)++] = (size_t)l;
        p += l + 2;
    }
    return 0;
}

static redisReply *fence_call(struct queue *q,
                              const char *verb,
                              int argc,
                              const char **argv,
                              size_t *lens,
                              struct mu_err *err)
{
    redisReply *r;
    argv[0] = verb;
    lens[0] = strlen(verb);
    argv[1] = strcmp(verb, "EVAL") == 0 ? fence_lua : q->fence_sha;
    lens[1] = strlen(argv[1]);
    r = redisCommandArgv(q->ctx, argc, argv, lens);
    if (!r) {
        mu_errf(err, MU_E_REDIS, "redis %s:%d: %s", q->url.host, q->url.port,
                q->ctx->errstr[0] ? q->ctx->errstr : "connection lost");
        queue_conn_drop(q);
    }
    return r;
}

/* The reply of the fenced script: its error, or the first error among its commands. */
static int batch_reply(const redisReply *r, struct mu_err *err)
{
    if (r->type == REDIS_REPLY_ERROR)
        return mu_errf(err, strstr(r->str, "FENCED") ? MU_E_FENCED : MU_E_REDIS, "redis: %s",
                       r->str);
    if (r->type != REDIS_REPLY_ARRAY)
        return mu_errf(err, MU_E_REDIS, "fenced write: unexpected reply");
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_ERROR)
            return mu_errf(err, MU_E_REDIS, "redis: %s", r->element[i]->str);
    }
    return 0;
}

int queue_batch_finish(struct queue *q, redisReply **out, struct mu_err *err)
{
    char keys[2][CFG_NAME_MAX + 16];
    char nums[2][24];
    char(*counts)[16] = NULL; /* each command's argument count, as text */
    const char **argv = NULL;
    size_t *lens = NULL;
    redisReply *r = NULL;
    int cap = 8;
    int argc = 0;
    int rc = -1;

    for (int i = 0; i < q->nbatch; i++)
        cap += 1 + q->batch_len[i] / 4; /* an argument takes at least "$0\r\n\r\n" */
    argv = calloc((size_t)cap, sizeof(*argv));
    lens = calloc((size_t)cap, sizeof(*lens));
    counts = calloc((size_t)q->nbatch + 1, sizeof(*counts));
    if (!argv || !lens || !counts) {
        mu_errf(err, MU_E_NOMEM, "out of memory for a fenced write");
        goto out;
    }
    if (!q->ctx && queue_conn_open(q, err) != 0)
        goto out;
    (void)mu_snprintf(keys[0], sizeof(keys[0]), "%s" QUEUE_K_LEADER, q->prefix);
    (void)mu_snprintf(keys[1], sizeof(keys[1]), "%s" QUEUE_K_EPOCH, q->prefix);
    (void)mu_snprintf(nums[0], sizeof(nums[0]), "%llu", (unsigned long long)q->fence_epoch);
    (void)mu_snprintf(nums[1], sizeof(nums[1]), "%d", q->fence_ttl_ms);
    argc = 2; /* EVALSHA sha, filled by fence_call */
    argv[argc++] = "2";
    argv[argc++] = keys[0];
    argv[argc++] = keys[1];
    argv[argc++] = q->fence;
    argv[argc++] = nums[0];
    argv[argc++] = nums[1];
    for (int i = 2; i < argc; i++)
        lens[i] = strlen(argv[i]);
    for (int i = 0; i < q->nbatch; i++) {
        if (batch_args(q->batch[i], q->batch_len[i], argv, lens, &argc, cap, counts[i],
                       sizeof(counts[i]))
            != 0) {
            mu_errf(err, MU_E_REDIS, "fenced write: malformed command %d", i);
            goto out;
        }
    }
    r = fence_call(q, q->fence_sha[0] ? "EVALSHA" : "EVAL", argc, argv, lens, err);
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis restarted or failed over: its script cache is empty. */
        freeReplyObject(r);
        r = fence_call(q, "EVAL", argc, argv, lens, err);
    }
    if (!r || batch_reply(r, err) != 0)
        goto out;
    rc = 0;
    if (out) {
        *out = r;
        r = NULL;
    }
out:
    if (r)
        freeReplyObject(r);
    free(counts);
    free(argv);
    free(lens);
    queue_batch_clear(q);
    return rc;
}

/* ---- the lease ---- */

int queue_lease_acquire(struct queue *q,
                        const char *holder,
                        long pid,
                        int ttl_ms,
                        bool take_own,
                        bool take_free,
                        uint64_t *epoch,
                        char *token,
                        size_t token_size,
                        bool *won,
                        struct mu_err *err)
{
    uint64_t changes = q->server_changes;
    redisReply *r = NULL;
    int rc = -1;

    *won = false;
    if (!q->ctx && queue_conn_open(q, err) != 0)
        return -1;
    if (q->server_changes != changes)
        take_free = false; /* a new server: the caller decides once it knows */
    r = queue_command(q, err,
                      "EVAL %s 4 %s" QUEUE_K_LEADER " %s" QUEUE_K_EPOCH " %s" QUEUE_K_LEADERSHIP
                      " %s" QUEUE_K_STANDBYS " %s %ld %d %s %s",
                      acquire_lua, q->prefix, q->prefix, q->prefix, q->prefix, holder, pid, ttl_ms,
                      take_own ? "1" : "0", take_free ? "1" : "0");
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
        || r->element[0]->type != REDIS_REPLY_INTEGER
        || r->element[1]->type != REDIS_REPLY_STRING) {
        mu_errf(err, MU_E_REDIS, "taking %s" QUEUE_K_LEADER ": unexpected reply", q->prefix);
        goto out;
    }
    if (mu_strlcpy(token, r->element[1]->str, token_size) >= token_size) {
        mu_errf(err, MU_E_TOOBIG, "%s" QUEUE_K_LEADER ": value too long", q->prefix);
        goto out;
    }
    *won = r->element[0]->integer > 0;
    if (*won)
        *epoch = (uint64_t)r->element[0]->integer;
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

int queue_lease_renew(struct queue *q,
                      const char *token,
                      uint64_t epoch,
                      const char *holder,
                      long pid,
                      int ttl_ms,
                      enum queue_lease_held *held,
                      int *standbys,
                      struct mu_err *err)
{
    redisReply *r =
        queue_command(q, err,
                      "EVAL %s 4 %s" QUEUE_K_LEADER " %s" QUEUE_K_EPOCH " %s" QUEUE_K_STANDBYS
                      " %s" QUEUE_K_LEADERSHIP " %s %d %llu %s %ld",
                      renew_lua, q->prefix, q->prefix, q->prefix, q->prefix, token, ttl_ms,
                      (unsigned long long)epoch, holder, pid);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
        || r->element[0]->type != REDIS_REPLY_INTEGER
        || r->element[1]->type != REDIS_REPLY_INTEGER) {
        queue_reply_free(r);
        return mu_errf(err, MU_E_REDIS, "renewing %s" QUEUE_K_LEADER ": unexpected reply",
                       q->prefix);
    }
    *held = r->element[0]->integer == 2  ? QUEUE_LEASE_TAKEN_BACK
            : r->element[0]->integer > 0 ? QUEUE_LEASE_HELD
                                         : QUEUE_LEASE_LOST;
    *standbys = (int)r->element[1]->integer;
    queue_reply_free(r);
    return 0;
}

int queue_lease_release(struct queue *q, const char *token, struct mu_err *err)
{
    redisReply *r =
        queue_command(q, err, "EVAL %s 1 %s" QUEUE_K_LEADER " %s", release_lua, q->prefix, token);
    if (!r)
        return -1;
    queue_reply_free(r);
    return 0;
}

int queue_fence_set(
    struct queue *q, const char *token, uint64_t epoch, int ttl_ms, struct mu_err *err)
{
    redisReply *r;

    if (mu_strlcpy(q->fence, token, sizeof(q->fence)) >= sizeof(q->fence)) {
        q->fence[0] = '\0';
        return mu_errf(err, MU_E_TOOBIG, "lease token too long");
    }
    q->fence_epoch = epoch;
    q->fence_ttl_ms = ttl_ms;
    q->fence_sha[0] = '\0';
    r = queue_command(q, err, "SCRIPT LOAD %s", fence_lua);
    if (!r) {
        q->fence[0] = '\0';
        return -1;
    }
    if (r->type == REDIS_REPLY_STRING)
        mu_strlcpy(q->fence_sha, r->str, sizeof(q->fence_sha));
    queue_reply_free(r);
    return 0;
}

/* ---- who leads, for musterctl status ---- */

static bool add_num(cJSON *o, const char *key, double v)
{
    return cJSON_AddNumberToObject(o, key, v) != NULL;
}

/* The leadership hash's fields into doc: holder as a string, epoch, pid, since_ms as numbers. */
static bool leadership_fields(cJSON *doc, const redisReply *h)
{
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const char *k = h->element[i]->str;
        const char *v = h->element[i + 1]->str;
        int64_t n = 0;
        if (!k || !v)
            continue;
        if (strcmp(k, "holder") == 0) {
            if (!cJSON_AddStringToObject(doc, "holder", v))
                return false;
        } else if ((strcmp(k, "epoch") == 0 || strcmp(k, "pid") == 0 || strcmp(k, "since_ms") == 0)
                   && mu_parse_i64(v, 0, INT64_MAX, &n, NULL) == 0 && !add_num(doc, k, (double)n)) {
            return false;
        }
    }
    return true;
}

/* The four reads, each a plain read command (an operator's read-only ACL user may run them). */
int queue_lease_peek(struct queue *q, bool *free_now, uint64_t *epoch, struct mu_err *err)
{
    redisReply *role = queue_command(q, err, "ROLE");
    redisReply *r = NULL;
    int rc = -1;

    *free_now = false;
    *epoch = 0;
    if (!role)
        return -1;
    /* A replica's copy may lag its primary's: a key freshly set there could read as free. */
    if (role->type != REDIS_REPLY_ARRAY || role->elements < 1
        || role->element[0]->type != REDIS_REPLY_STRING
        || strcmp(role->element[0]->str, "master") != 0) {
        mu_errf(err, MU_E_REDIS, "redis %s:%d is not a primary (ROLE)", q->url.host, q->url.port);
        queue_conn_drop(q); /* the next call asks the Sentinels again */
        goto out;
    }
    r = queue_command(q, err, "GET %s" QUEUE_K_LEADER, q->prefix);
    if (!r)
        goto out;
    if (r->type == REDIS_REPLY_NIL) {
        *free_now = true;
    } else if (r->type == REDIS_REPLY_STRING) {
        *epoch = strtoull(r->str, NULL, 10);
    } else {
        mu_errf(err, MU_E_REDIS, "reading %s" QUEUE_K_LEADER ": unexpected reply", q->prefix);
        goto out;
    }
    rc = 0;
out:
    queue_reply_free(role);
    queue_reply_free(r);
    return rc;
}

static int leadership_replies(struct queue *q, redisReply *r[4], struct mu_err *err)
{
    r[0] = queue_command(q, err, "GET %s" QUEUE_K_LEADER, q->prefix);
    r[1] = r[0] ? queue_command(q, err, "PTTL %s" QUEUE_K_LEADER, q->prefix) : NULL;
    r[2] = r[1] ? queue_command(q, err, "HGETALL %s" QUEUE_K_LEADERSHIP, q->prefix) : NULL;
    r[3] = r[2] ? queue_command(q, err, "ZRANGE %s" QUEUE_K_STANDBYS " 0 -1 WITHSCORES", q->prefix)
                : NULL;
    if (!r[3])
        return -1;
    if (r[1]->type != REDIS_REPLY_INTEGER || r[2]->type != REDIS_REPLY_ARRAY
        || r[3]->type != REDIS_REPLY_ARRAY)
        return mu_errf(err, MU_E_REDIS, "reading %s" QUEUE_K_LEADER ": unexpected reply",
                       q->prefix);
    return 0;
}

int queue_leadership_read(struct queue *q, cJSON **out, struct mu_err *err)
{
    redisReply *r[4] = { NULL, NULL, NULL, NULL };
    cJSON *doc = NULL;
    cJSON *standbys;
    int rc = -1;

    *out = NULL;
    if (leadership_replies(q, r, err) != 0)
        goto out;
    doc = cJSON_CreateObject();
    if (!doc || !cJSON_AddBoolToObject(doc, "leading", r[0]->type == REDIS_REPLY_STRING)
        || !leadership_fields(doc, r[2])
        || !add_num(doc, "lease_ms_left", r[1]->integer > 0 ? (double)r[1]->integer : 0)
        || !add_num(doc, "now_ms", (double)mu_time_wall_ms())
        || !(standbys = cJSON_AddArrayToObject(doc, "standbys")))
        goto nomem;
    for (size_t i = 0; i + 1 < r[3]->elements; i += 2) {
        const redisReply *name = r[3]->element[i];
        const redisReply *score = r[3]->element[i + 1];
        cJSON *s = cJSON_CreateObject();
        double seen = score->str ? strtod(score->str, NULL) : 0;
        if (!s || !cJSON_AddItemToArray(standbys, s)) {
            cJSON_Delete(s);
            goto nomem;
        }
        if (!cJSON_AddStringToObject(s, "holder", name->str ? name->str : "")
            || !add_num(s, "seen_ms", seen))
            goto nomem;
    }
    *out = doc;
    doc = NULL;
    rc = 0;
    goto out;
nomem:
    mu_errf(err, MU_E_NOMEM, "out of memory");
out:
    cJSON_Delete(doc);
    for (int i = 0; i < 4; i++)
        queue_reply_free(r[i]);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * The client half of the queue module (docs/design.md §6, §8): what musterctl and libmuster write
 * (submissions, operator commands) and read (job hashes, nodes, events).  Clients never change
 * job state themselves: they append to the submit and control streams and musterd, the single
 * writer of job:<id>, applies the change and reports it on the events stream.
 *
 * Reads turn Redis replies into cJSON documents whose field names are the Redis fields, so the
 * CLI's -o json and the tests see exactly what musterd stored.  Listing many jobs pipelines the
 * HGETALLs in batches (one round trip per batch, bounded memory per batch).  Any transport
 * failure drops the connection (hiredis: a context with err set is dead) and the next call
 * reconnects.
 */
#include "queue/internal.h"

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define CLIENT_EVENT_BATCH 512u /* events per XREVRANGE when filtering by job */
#define CLIENT_WAIT_COUNT  256u /* events per XREAD while following */

/* Hash fields musterd writes as decimal integers; shown as JSON numbers. */
static const char *const int_fields[] = {
    QUEUE_F_PRIORITY,
    QUEUE_F_TASKS,
    QUEUE_F_GPUS_PER_TASK,
    QUEUE_F_ATTEMPT,
    QUEUE_F_MAX_RETRIES,
    QUEUE_F_SUBMITTED_AT,
    QUEUE_F_STARTED_AT,
    QUEUE_F_FINISHED_AT,
    QUEUE_F_EXIT_CODE,
    QUEUE_F_LAST_CHECKPOINT_AT,
    QUEUE_E_AT,
    QUEUE_F_FAILURES,
};

/* Hash fields that may hold a fraction (GPU-seconds); shown as JSON numbers when they parse. */
static const char *const num_fields[] = { QUEUE_F_LOST_GPU_SECONDS };

/* Hash fields holding JSON documents; shown parsed when they parse. */
static const char *const json_fields[] = { QUEUE_F_PLACEMENT, QUEUE_F_ATTEMPTS };

static bool is_int_field(const char *name)
{
    for (size_t i = 0; i < MU_ARRAY_LEN(int_fields); i++) {
        if (strcmp(name, int_fields[i]) == 0)
            return true;
    }
    return false;
}

/*
 * Idempotent submission in one round trip, so that two clients racing with the same key cannot
 * both add a job.  redis.replicate_commands() makes Redis < 5 accept a write after XADD's random
 * id (effects replication is the default from 5 on, and the call a no-op).
 */
const char queue_submit_idem_lua[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local id = redis.call('GET', KEYS[2])\n"
    "if id then return {id, 0} end\n"
    "id = redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', 'spec', ARGV[1])\n"
    "if not id then return {'nostream'} end\n"
    "redis.call('SET', KEYS[2], id, 'NX', 'EX', ARGV[2])\n"
    "return {id, 1}\n";

static bool name_in(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(name, list[i]) == 0)
            return true;
    }
    return false;
}

/* Makes the JSON value for one hash field: numbers and JSON documents typed, the rest strings. */
static cJSON *field_value(const char *name, const char *value, size_t len)
{
    int64_t num;

    if (is_int_field(name) && mu_parse_i64(value, INT64_MIN, INT64_MAX, &num, NULL) == 0)
        return cJSON_CreateNumber((double)num);
    if (name_in(name, num_fields, MU_ARRAY_LEN(num_fields)) && value[0]) {
        char *end = NULL;
        double d = strtod(value, &end);
        if (end && *end == '\0' && isfinite(d))
            return cJSON_CreateNumber(d);
    }
    if (name_in(name, json_fields, MU_ARRAY_LEN(json_fields))) {
        cJSON *parsed = cJSON_ParseWithLength(value, len);
        if (parsed)
            return parsed;
    }
    return cJSON_CreateString(value);
}

/* Adds the field/value pairs of a flat Redis array (HGETALL or a stream entry) to obj. */
static int object_add_pairs(cJSON *obj, const redisReply *pairs, struct mu_err *err)
{
    for (size_t i = 0; i + 1 < pairs->elements; i += 2) {
        const redisReply *k = pairs->element[i];
        const redisReply *v = pairs->element[i + 1];
        cJSON *item;

        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        item = field_value(k->str, v->str, v->len);
        if (!item)
            return mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
        cJSON_DeleteItemFromObjectCaseSensitive(obj, k->str);
        if (!cJSON_AddItemToObject(obj, k->str, item)) {
            cJSON_Delete(item);
            return mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
        }
    }
    return 0;
}

int queue_job_from_reply(const redisReply *r, const char *id, cJSON **out, struct mu_err *err)
{
    cJSON *obj = NULL;
    int rc = -1;

    *out = NULL;
    if (r->type != REDIS_REPLY_ARRAY)
        return mu_errf(err, MU_E_REDIS, "redis: HGETALL of job '%s': unexpected reply type %d", id,
                       r->type);
    if (r->elements == 0)
        return 0;
    obj = cJSON_CreateObject();
    if (!obj) {
        mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
        goto out;
    }
    if (!cJSON_AddStringToObject(obj, QUEUE_F_ID, id)) {
        mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
        goto out;
    }
    if (object_add_pairs(obj, r, err) != 0)
        goto out;
    *out = obj;
    obj = NULL;
    rc = 0;
out:
    cJSON_Delete(obj);
    return rc;
}

/* Builds {"id": <entry id>, fields…} from one stream entry [id, [f, v, …]]; NULL with err. */
static cJSON *event_from_entry(const redisReply *e, struct mu_err *err)
{
    cJSON *obj;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: malformed stream entry");
        return NULL;
    }
    obj = cJSON_CreateObject();
    if (!obj || !cJSON_AddStringToObject(obj, QUEUE_E_ID, e->element[0]->str)) {
        mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
        cJSON_Delete(obj);
        return NULL;
    }
    if (object_add_pairs(obj, e->element[1], err) != 0) {
        cJSON_Delete(obj);
        return NULL;
    }
    return obj;
}

static void *xadd_spec(struct queue *q, const char *stream, bool own, void *arg, struct mu_err *err)
{
    if (own)
        return queue_command(q, err, "XADD %s NOMKSTREAM * spec %s", stream, (const char *)arg);
    return queue_command(q, err, "XADD %s * spec %s", stream, (const char *)arg);
}

/*
 * The config-free half of musterd's intake check (queue_spec_parse, the same code), run on the
 * exact text about to be written: a spec musterd would reject for its own content fails here
 * with musterd's message and nothing reaches Redis.  What needs the cluster config (queues,
 * pools, topology levels, access rules) is still musterd's alone.  musterd never calls the
 * client submit functions, so this is the one copy for musterctl, libmuster and Python.
 */
int queue_submit_check(const char *spec_json, struct mu_err *err)
{
    struct queue_spec s;

    if (!spec_json)
        return mu_errf(err, MU_E_INVAL, "spec: NULL");
    if (queue_spec_parse(spec_json, strlen(spec_json), &s, err) != 0)
        return -1;
    queue_spec_release(&s);
    return 0;
}

int queue_submit(
    struct queue *q, const char *spec_json, char *id_out, size_t id_size, struct mu_err *err)
{
    redisReply *r;
    bool own;
    int rc = -1;

    if (queue_submit_check(spec_json, err) != 0)
        return -1;
    r = queue_owned_write(q, QUEUE_STREAM_SUBMIT, xadd_spec, (void *)spec_json, &own, err);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_STRING) {
        mu_errf(err, MU_E_REDIS, "redis: XADD %s" QUEUE_K_SUBMIT ": unexpected reply type %d",
                q->prefix, r->type);
        goto out;
    }
    if (mu_strlcpy(id_out, r->str, id_size) >= id_size) {
        mu_errf(err, MU_E_TOOBIG, "job id '%s' does not fit in %zu bytes", r->str, id_size);
        goto out;
    }
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

static bool idem_key_is_valid(const char *key)
{
    size_t n = strlen(key);

    if (n == 0 || n > 255)
        return false;
    for (const char *p = key; *p; p++) {
        if (*p < 0x20 || *p > 0x7e)
            return false;
    }
    return true;
}

struct idem_call {
    const char *spec_json;
    const char *key;
};

/* The key is the writer's own on its own stream (idem:<user>:<key>): one user cannot claim
 * another's key and be handed their job. */
static void *eval_idem(struct queue *q, const char *stream, bool own, void *arg, struct mu_err *err)
{
    const struct idem_call *c = arg;
    if (own)
        return queue_command(q, err, "EVAL %s 2 %s %s" QUEUE_K_IDEM "%s:%s %s %d",
                             queue_submit_idem_lua, stream, q->prefix, queue_owner(q), c->key,
                             c->spec_json, QUEUE_IDEM_TTL_S);
    return queue_command(q, err, "EVAL %s 2 %s %s" QUEUE_K_IDEM "%s %s %d", queue_submit_idem_lua,
                         stream, q->prefix, c->key, c->spec_json, QUEUE_IDEM_TTL_S);
}

int queue_submit_idem(struct queue *q,
                      const char *spec_json,
                      const char *key,
                      char *id_out,
                      size_t id_size,
                      bool *created,
                      struct mu_err *err)
{
    redisReply *r;
    bool own;
    int rc = -1;

    if (created)
        *created = false;
    if (!idem_key_is_valid(key))
        return mu_errf(err, MU_E_INVAL,
                       "idempotency key: expected 1..255 printable ASCII characters, got '%s'",
                       key);
    if (queue_submit_check(spec_json, err) != 0)
        return -1;
    r = queue_owned_write(q, QUEUE_STREAM_SUBMIT, eval_idem, &(struct idem_call){ spec_json, key },
                          &own, err);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
        || r->element[0]->type != REDIS_REPLY_STRING
        || r->element[1]->type != REDIS_REPLY_INTEGER) {
        mu_errf(err, MU_E_REDIS, "redis: idempotent submit: unexpected reply type %d", r->type);
        goto out;
    }
    if (mu_strlcpy(id_out, r->element[0]->str, id_size) >= id_size) {
        mu_errf(err, MU_E_TOOBIG, "job id '%s' does not fit in %zu bytes", r->element[0]->str,
                id_size);
        goto out;
    }
    if (created)
        *created = r->element[1]->integer == 1;
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

int queue_reload_result(
    struct queue *q, char *id, size_t id_size, char *result, size_t result_size, struct mu_err *err)
{
    redisReply *r = queue_command(
        q, err, "HMGET %s" QUEUE_K_RELOAD " " QUEUE_R_ID " " QUEUE_R_RESULT, q->prefix);
    id[0] = result[0] = '\0';
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING)
            mu_strlcpy(id, r->element[0]->str, id_size);
        if (r->element[1]->type == REDIS_REPLY_STRING)
            mu_strlcpy(result, r->element[1]->str, result_size);
    }
    queue_reply_free(r);
    return 0;
}

int queue_job_read(struct queue *q, const char *id, cJSON **out, struct mu_err *err)
{
    redisReply *r;
    int rc;

    *out = NULL;
    r = queue_command(q, err, "HGETALL %s" QUEUE_K_JOB "%s", q->prefix, id);
    if (!r)
        return -1;
    rc = queue_job_from_reply(r, id, out, err);
    queue_reply_free(r);
    return rc;
}

/* The submission id in stream key, as queue_submission_read's. */
static int submission_read(
    struct queue *q, const char *key, const char *id, char **spec_out, struct mu_err *err)
{
    redisReply *r;
    const redisReply *fields;
    int rc = -1;

    r = queue_command(q, err, "XRANGE %s %s %s", key, id, id);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: XRANGE %s: unexpected reply type %d", key, r->type);
        goto out;
    }
    if (r->elements == 0 || r->element[0]->type != REDIS_REPLY_ARRAY
        || r->element[0]->elements != 2) {
        rc = 0;
        goto out;
    }
    fields = r->element[0]->element[1];
    for (size_t i = 0; fields->type == REDIS_REPLY_ARRAY && i + 1 < fields->elements; i += 2) {
        if (fields->element[i]->type == REDIS_REPLY_STRING
            && strcmp(fields->element[i]->str, "spec") == 0
            && fields->element[i + 1]->type == REDIS_REPLY_STRING) {
            *spec_out = strdup(fields->element[i + 1]->str);
            if (!*spec_out) {
                mu_errf(err, MU_E_NOMEM, "out of memory");
                goto out;
            }
            break;
        }
    }
    if (!*spec_out) {
        /* An entry without a spec field is still a submission (musterd rejects it). */
        *spec_out = strdup("");
        if (!*spec_out) {
            mu_errf(err, MU_E_NOMEM, "out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

int queue_submission_read(struct queue *q, const char *id, char **spec_out, struct mu_err *err)
{
    char key[CFG_NAME_MAX + QUEUE_OWNER_MAX + 16];

    *spec_out = NULL;
    if (!queue_job_id_is_valid(id) || strchr(id, '_'))
        return 0; /* XRANGE would reject it (an array's element is no entry of its own) */
    if (queue_owner(q)[0]) {
        /* One's own stream first (queue/owned.c); a user the ACL keeps out of it reads on. */
        (void)queue_stream_key(q->prefix, QUEUE_STREAM_SUBMIT, queue_owner(q), key, sizeof(key));
        if (submission_read(q, key, id, spec_out, err) != 0 && !strstr(err->msg, "NOPERM"))
            return -1;
        if (*spec_out)
            return 0;
    }
    (void)queue_stream_key(q->prefix, QUEUE_STREAM_SUBMIT, "", key, sizeof(key));
    return submission_read(q, key, id, spec_out, err);
}

/* Parses one value of a status hash (nodes, pools, queues); a bad one becomes {"name", "error"}
 * rather than failing the list. */
static cJSON *node_parse(const char *name, const redisReply *v)
{
    cJSON *node = NULL;

    if (v->type == REDIS_REPLY_STRING)
        node = cJSON_ParseWithLength(v->str, v->len);
    if (node && !cJSON_IsObject(node)) {
        cJSON_Delete(node);
        node = NULL;
    }
    if (!node) {
        node = cJSON_CreateObject();
        if (!node || !cJSON_AddStringToObject(node, "error", "status is not a JSON object")) {
            cJSON_Delete(node);
            return NULL;
        }
    }
    if (!cJSON_HasObjectItem(node, "name") && !cJSON_AddStringToObject(node, "name", name)) {
        cJSON_Delete(node);
        return NULL;
    }
    return node;
}

int queue_node_read(struct queue *q, const char *name, cJSON **out, struct mu_err *err)
{
    redisReply *r;
    int rc = -1;

    *out = NULL;
    r = queue_command(q, err, "HGET %s" QUEUE_K_NODES " %s", q->prefix, name);
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_NIL) {
        rc = 0;
        goto out;
    }
    if (r->type != REDIS_REPLY_STRING) {
        mu_errf(err, MU_E_REDIS, "redis: HGET %s" QUEUE_K_NODES ": unexpected reply type %d",
                q->prefix, r->type);
        goto out;
    }
    *out = cJSON_ParseWithLength(r->str, r->len);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        mu_errf(err, MU_E_PARSE, "node '%s': status is not a JSON object", name);
        goto out;
    }
    rc = 0;
out:
    queue_reply_free(r);
    return rc;
}

static int node_cmp(const void *a, const void *b)
{
    const cJSON *na = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)a, "name");
    const cJSON *nb = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)b, "name");
    return strcmp(cJSON_IsString(na) ? na->valuestring : "",
                  cJSON_IsString(nb) ? nb->valuestring : "");
}

int queue_nodes_read(struct queue *q, cJSON **out, struct mu_err *err)
{
    return queue_status_read(q, QUEUE_K_NODES, out, err);
}

int queue_status_read(struct queue *q, const char *hash, cJSON **out, struct mu_err *err)
{
    redisReply *r = NULL;
    cJSON **nodes = NULL;
    cJSON *arr = NULL;
    size_t n = 0;
    int rc = -1;

    *out = NULL;
    r = queue_command(q, err, "HGETALL %s%s", q->prefix, hash);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: HGETALL %s%s: unexpected reply type %d", q->prefix, hash,
                r->type);
        goto out;
    }
    arr = cJSON_CreateArray();
    nodes = calloc(r->elements / 2 + 1, sizeof(cJSON *));
    if (!arr || !nodes) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (r->element[i]->type != REDIS_REPLY_STRING)
            continue;
        nodes[n] = node_parse(r->element[i]->str, r->element[i + 1]);
        if (!nodes[n]) {
            mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
            goto out;
        }
        n++;
    }
    qsort(nodes, n, sizeof(cJSON *), node_cmp);
    for (size_t i = 0; i < n; i++) {
        if (!cJSON_AddItemToArray(arr, nodes[i])) {
            mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
            goto out;
        }
        nodes[i] = NULL; /* arr owns it now */
    }
    *out = arr;
    arr = NULL;
    rc = 0;
out:
    for (size_t i = 0; nodes && i < n; i++)
        cJSON_Delete(nodes[i]);
    free(nodes);
    cJSON_Delete(arr);
    queue_reply_free(r);
    return rc;
}

static bool event_matches(const cJSON *ev, const char *job)
{
    const cJSON *j;

    if (!job)
        return true;
    j = cJSON_GetObjectItemCaseSensitive(ev, QUEUE_E_JOB);
    return cJSON_IsString(j) && strcmp(j->valuestring, job) == 0;
}

int queue_events_read(struct queue *q,
                      const char *job,
                      size_t count,
                      cJSON **out,
                      char *last_id,
                      size_t last_id_size,
                      struct mu_err *err)
{
    cJSON *acc = cJSON_CreateArray();
    redisReply *r = NULL;
    char end[64] = "+";
    size_t taken = 0;
    int rc = -1;

    *out = NULL;
    mu_strlcpy(last_id, "0-0", last_id_size);
    if (!acc)
        return mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
    while (taken < count) {
        /* Without a job filter every entry counts, so one read of `count` entries suffices. */
        size_t batch = job ? CLIENT_EVENT_BATCH : count - taken;
        r = queue_command(q, err, "XREVRANGE %s" QUEUE_K_EVENTS " %s - COUNT %llu", q->prefix, end,
                          (unsigned long long)batch);
        if (!r)
            goto out;
        if (r->type != REDIS_REPLY_ARRAY) {
            mu_errf(err, MU_E_REDIS,
                    "redis: XREVRANGE %s" QUEUE_K_EVENTS ": unexpected reply type %d", q->prefix,
                    r->type);
            goto out;
        }
        for (size_t i = 0; i < r->elements && taken < count; i++) {
            cJSON *ev = event_from_entry(r->element[i], err);
            if (!ev)
                goto out;
            if (end[0] == '+' && i == 0)
                mu_strlcpy(last_id, cJSON_GetObjectItemCaseSensitive(ev, QUEUE_E_ID)->valuestring,
                           last_id_size);
            if (!event_matches(ev, job)) {
                cJSON_Delete(ev);
                continue;
            }
            if (!cJSON_InsertItemInArray(acc, 0, ev)) {
                cJSON_Delete(ev);
                mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
                goto out;
            }
            taken++;
        }
        if (r->elements < batch)
            break;
        /* Continue strictly before the oldest entry seen ("(" needs Redis >= 6.2). */
        if (mu_snprintf(end, sizeof(end), "(%s", r->element[r->elements - 1]->element[0]->str)
            != 0) {
            mu_errf(err, MU_E_REDIS, "redis: stream id too long");
            goto out;
        }
        queue_reply_free(r);
        r = NULL;
    }
    *out = acc;
    acc = NULL;
    rc = 0;
out:
    queue_reply_free(r);
    cJSON_Delete(acc);
    return rc;
}

int queue_events_wait(struct queue *q,
                      const char *job,
                      int block_ms,
                      char *last_id,
                      size_t last_id_size,
                      cJSON **out,
                      struct mu_err *err)
{
    cJSON *acc = cJSON_CreateArray();
    redisReply *r = NULL;
    const redisReply *entries;
    int rc = -1;

    *out = NULL;
    if (!acc)
        return mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
    r = queue_command(q, err, "XREAD COUNT %u BLOCK %d STREAMS %s" QUEUE_K_EVENTS " %s",
                      CLIENT_WAIT_COUNT, block_ms, q->prefix, last_id);
    if (!r)
        goto out;
    if (r->type == REDIS_REPLY_NIL)
        goto done; /* timed out: nothing new */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 || r->element[0]->type != REDIS_REPLY_ARRAY
        || r->element[0]->elements != 2 || r->element[0]->element[1]->type != REDIS_REPLY_ARRAY) {
        mu_errf(err, MU_E_REDIS, "redis: XREAD %s" QUEUE_K_EVENTS ": unexpected reply", q->prefix);
        goto out;
    }
    entries = r->element[0]->element[1];
    for (size_t i = 0; i < entries->elements; i++) {
        cJSON *ev = event_from_entry(entries->element[i], err);
        if (!ev)
            goto out;
        mu_strlcpy(last_id, cJSON_GetObjectItemCaseSensitive(ev, QUEUE_E_ID)->valuestring,
                   last_id_size);
        if (!event_matches(ev, job)) {
            cJSON_Delete(ev);
            continue;
        }
        if (!cJSON_AddItemToArray(acc, ev)) {
            cJSON_Delete(ev);
            mu_errf(err, MU_E_NOMEM, "out of memory building JSON");
            goto out;
        }
    }
done:
    *out = acc;
    acc = NULL;
    rc = 0;
out:
    queue_reply_free(r);
    cJSON_Delete(acc);
    return rc;
}

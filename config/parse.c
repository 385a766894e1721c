/* SPDX-License-Identifier: MIT */
/*
 * cfg_parse: the config file of DESIGN §2a, from JSON text to struct cfg, strictly.
 *
 * cJSON is lenient where a config file must not be: it accepts raw control characters in
 * strings, silently cuts a string at "\u0000", keeps duplicate keys and matches keys without
 * regard to case.  So the text is first scanned for those cases (with the line of the problem),
 * and the tree is then walked child by child with exact key comparison, so that unknown and
 * duplicate keys are errors.  Every message starts with the key path ("pools[1].capacity: ...").
 * Cross-field rules (node_lost_after_s > heartbeat_s) run after the walk, so key order is free.
 */
#include "config/cfg.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define PATH_LEN 96 /* "pools[63].price_per_hour" and the like */
#define GOT_LEN  64 /* a value quoted in a message */

/* ---- message helpers ---- */

/* Copies user text for a message: at most ~40 bytes, control bytes shown as '?'. */
static void text_clip(const char *s, char *buf, size_t size)
{
    size_t max = size - 4; /* room for "..." and the NUL */
    size_t n = 0;

    for (; n < max && s[n]; n++) {
        unsigned char ch = (unsigned char)s[n];
        if (ch < 0x20 || ch == 0x7f)
            buf[n] = '?';
        else
            buf[n] = s[n];
    }
    if (!s[n]) {
        buf[n] = '\0';
        return;
    }
    /* Do not leave half a UTF-8 sequence before the ellipsis. */
    while (n > 0 && ((unsigned char)buf[n - 1] & 0xC0) == 0x80)
        n--;
    if (n > 0 && (unsigned char)buf[n - 1] >= 0xC0)
        n--;
    memcpy(buf + n, "...", 4);
}

/* Describes a JSON value for "got ...": 'text', 12, 1.5, true, null, an array, an object. */
static void json_describe(const cJSON *v, char *buf, size_t size)
{
    char clip[44];

    if (cJSON_IsString(v)) {
        text_clip(v->valuestring, clip, sizeof(clip));
        (void)mu_snprintf(buf, size, "'%s'", clip);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 1e15)
            (void)mu_snprintf(buf, size, "%.0f", d);
        else
            (void)mu_snprintf(buf, size, "%g", d);
    } else if (cJSON_IsTrue(v)) {
        mu_strlcpy(buf, "true", size);
    } else if (cJSON_IsFalse(v)) {
        mu_strlcpy(buf, "false", size);
    } else if (cJSON_IsNull(v)) {
        mu_strlcpy(buf, "null", size);
    } else if (cJSON_IsArray(v)) {
        mu_strlcpy(buf, cJSON_GetArraySize(v) ? "an array" : "an empty array", size);
    } else if (cJSON_IsObject(v)) {
        mu_strlcpy(buf, "an object", size);
    } else {
        mu_strlcpy(buf, "an invalid value", size);
    }
}

static int err_expected(struct mu_err *err, const char *path, const char *expected, const cJSON *v)
{
    char got[GOT_LEN];
    json_describe(v, got, sizeof(got));
    (void)mu_errf(err, MU_E_CONFIG, "%s: expected %s, got %s", path, expected, got);
    return -1;
}

/* Levenshtein distance of two short strings, for "did you mean" hints. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    size_t row[33];

    if (la > 32 || lb > 32)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] == b[j - 1] ? 0 : 1);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static int key_index(const char *key, const char *const *known, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, known[i]) == 0)
            return (int)i;
    }
    return -1;
}

static int err_unknown_key(
    struct mu_err *err, const char *parent, const char *key, const char *const *known, size_t n)
{
    char clip[44];
    const char *best = NULL;
    size_t best_d = 3; /* suggest only close matches */

    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, known[i]);
        if (d < best_d && d < strlen(key)) {
            best = known[i];
            best_d = d;
        }
    }
    text_clip(key, clip, sizeof(clip));
    if (best)
        return mu_errf(err, MU_E_CONFIG, "%s%s%s: unknown key; did you mean '%s'?", parent,
                       parent[0] ? "." : "", clip, best);
    return mu_errf(err, MU_E_CONFIG, "%s%s%s: unknown key", parent, parent[0] ? "." : "", clip);
}

/* Joins a parent path and a key: "pools[1]" + "name" = "pools[1].name". */
static void path_join(char *buf, const char *parent, const char *key)
{
    (void)mu_snprintf(buf, PATH_LEN, "%s%s%s", parent, parent[0] ? "." : "", key);
}

/* ---- typed getters ---- */

static int get_int(
    const cJSON *v, const char *path, int64_t min, int64_t max, int64_t *out, struct mu_err *err)
{
    char expected[64];

    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && d >= (double)min && d <= (double)max) {
            *out = (int64_t)d;
            return 0;
        }
    }
    (void)mu_snprintf(expected, sizeof(expected), "an integer %lld..%lld", (long long)min,
                      (long long)max);
    return err_expected(err, path, expected, v);
}

static int get_name(const cJSON *v, const char *path, char *dst, size_t size, struct mu_err *err)
{
    char expected[80];

    if (cJSON_IsString(v) && mu_name_is_valid(v->valuestring, size - 1)) {
        mu_strlcpy(dst, v->valuestring, size);
        return 0;
    }
    (void)mu_snprintf(expected, sizeof(expected), "a name of 1..%zu characters [A-Za-z0-9._:-]",
                      size - 1);
    return err_expected(err, path, expected, v);
}

/* A string that must start with one of the given schemes and fit in dst. */
static int get_url(const cJSON *v,
                   const char *path,
                   const char *const *schemes,
                   size_t nschemes,
                   const char *expected,
                   char *dst,
                   size_t size,
                   struct mu_err *err)
{
    if (cJSON_IsString(v) && strlen(v->valuestring) < size) {
        const char *s = v->valuestring;
        for (size_t i = 0; i < nschemes; i++) {
            size_t n = strlen(schemes[i]);
            if (strncmp(s, schemes[i], n) == 0 && s[n] != '\0') {
                mu_strlcpy(dst, s, size);
                return 0;
            }
        }
    }
    return err_expected(err, path, expected, v);
}

/* "ADDR:PORT" (ADDR may be empty: all addresses), or "" for no metrics endpoint. */
static int get_metrics(const cJSON *v, char *dst, size_t size, struct mu_err *err)
{
    static const char expected[] = "\"ADDR:PORT\" such as \"127.0.0.1:9100\", or \"\" for none";

    if (cJSON_IsString(v) && strlen(v->valuestring) < size) {
        const char *s = v->valuestring;
        const char *colon = strrchr(s, ':');
        int64_t port;
        bool ok = s[0] == '\0';
        if (colon && mu_parse_i64(colon + 1, 1, 65535, &port, NULL) == 0)
            ok = true;
        for (const char *p = s; ok && *p; p++) {
            if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                ok = false;
        }
        if (ok) {
            mu_strlcpy(dst, s, size);
            return 0;
        }
    }
    return err_expected(err, "metrics", expected, v);
}

/* ---- sections ---- */

static int parse_levels(struct cfg *c, const cJSON *arr, struct mu_err *err)
{
    char path[PATH_LEN];
    int i = 0;

    if (!cJSON_IsArray(arr))
        return err_expected(err, "topology_levels", "an array of level names, widest first", arr);
    if (cJSON_GetArraySize(arr) > CFG_MAX_LEVELS)
        return mu_errf(err, MU_E_CONFIG, "topology_levels: expected at most %d levels, got %d",
                       CFG_MAX_LEVELS, cJSON_GetArraySize(arr));
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        (void)mu_snprintf(path, sizeof(path), "topology_levels[%d]", i);
        if (get_name(it, path, c->levels[i], sizeof(c->levels[i]), err) != 0)
            return -1;
        if (strcmp(c->levels[i], "node") == 0)
            return mu_errf(err, MU_E_CONFIG, "%s: 'node' is implicit and cannot be listed", path);
        for (int j = 0; j < i; j++) {
            if (strcmp(c->levels[j], c->levels[i]) == 0)
                return mu_errf(err, MU_E_CONFIG, "%s: duplicate level '%s'", path, c->levels[i]);
        }
    }
    c->nlevels = i;
    return 0;
}

static const char *const pool_keys[] = { "name",     "capacity",      "instance_type",
                                         "gpu_type", "gpus_per_node", "price_per_hour",
                                         "max_gpus" };
enum { PK_NAME, PK_CAPACITY, PK_INSTANCE, PK_GPU, PK_GPN, PK_PRICE, PK_MAX };

static int pool_field(
    struct cfg_pool *p, int key, const cJSON *v, const char *path, struct mu_err *err)
{
    int64_t n;

    switch (key) {
    case PK_NAME:
        return get_name(v, path, p->name, sizeof(p->name), err);
    case PK_CAPACITY:
        if (cJSON_IsString(v) && cfg_capacity_parse(v->valuestring, &p->capacity) == 0)
            return 0;
        return err_expected(err, path, "\"spot\" or \"on-demand\"", v);
    case PK_INSTANCE:
        return get_name(v, path, p->instance_type, sizeof(p->instance_type), err);
    case PK_GPU:
        return get_name(v, path, p->gpu_type, sizeof(p->gpu_type), err);
    case PK_GPN:
        if (get_int(v, path, 1, 64, &n, err) != 0)
            return -1;
        p->gpus_per_node = (int)n;
        return 0;
    case PK_PRICE:
        if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0
            && v->valuedouble <= 1e6) {
            p->price_per_hour = v->valuedouble;
            return 0;
        }
        return err_expected(err, path, "a price per node-hour 0..1000000", v);
    case PK_MAX:
        if (get_int(v, path, 0, 1 << 20, &n, err) != 0)
            return -1;
        p->max_gpus = (int)n;
        return 0;
    default:
        return mu_errf(err, MU_E_CONFIG, "%s: unhandled key", path);
    }
}

static int parse_pool(struct cfg *c, int i, const cJSON *obj, struct mu_err *err)
{
    struct cfg_pool *p = &c->pools[i];
    char base[PATH_LEN];
    char path[PATH_LEN];
    unsigned seen = 0;

    (void)mu_snprintf(base, sizeof(base), "pools[%d]", i);
    if (!cJSON_IsObject(obj))
        return err_expected(err, base, "an object", obj);
    memset(p, 0, sizeof(*p));
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = key_index(it->string, pool_keys, MU_ARRAY_LEN(pool_keys));
        if (k < 0)
            return err_unknown_key(err, base, it->string, pool_keys, MU_ARRAY_LEN(pool_keys));
        path_join(path, base, pool_keys[k]);
        if (seen & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", path);
        seen |= 1u << k;
        if (pool_field(p, k, it, path, err) != 0)
            return -1;
    }
    static const int required[] = { PK_NAME, PK_CAPACITY, PK_GPU, PK_GPN };
    for (size_t r = 0; r < MU_ARRAY_LEN(required); r++) {
        if (!(seen & (1u << required[r])))
            return mu_errf(err, MU_E_CONFIG, "%s: missing required key '%s'", base,
                           pool_keys[required[r]]);
    }
    for (int j = 0; j < i; j++) {
        if (strcmp(c->pools[j].name, p->name) == 0)
            return mu_errf(err, MU_E_CONFIG, "%s.name: duplicate pool name '%s'", base, p->name);
    }
    return 0;
}

static int parse_pools(struct cfg *c, const cJSON *arr, struct mu_err *err)
{
    int i = 0;

    if (!cJSON_IsArray(arr))
        return err_expected(err, "pools", "an array of pool objects", arr);
    if (cJSON_GetArraySize(arr) > CFG_MAX_POOLS)
        return mu_errf(err, MU_E_CONFIG, "pools: expected at most %d pools, got %d", CFG_MAX_POOLS,
                       cJSON_GetArraySize(arr));
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        if (parse_pool(c, i, it, err) != 0)
            return -1;
    }
    c->npools = i;
    return 0;
}

static const char *const queue_keys[] = { "name", "weight" };

static int parse_queue(struct cfg *c, int i, const cJSON *obj, struct mu_err *err)
{
    struct cfg_queue *q = &c->queues[i];
    char base[PATH_LEN];
    char path[PATH_LEN];
    unsigned seen = 0;
    int64_t n;

    (void)mu_snprintf(base, sizeof(base), "queues[%d]", i);
    if (!cJSON_IsObject(obj))
        return err_expected(err, base, "an object", obj);
    memset(q, 0, sizeof(*q));
    q->weight = 1;
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = key_index(it->string, queue_keys, MU_ARRAY_LEN(queue_keys));
        if (k < 0)
            return err_unknown_key(err, base, it->string, queue_keys, MU_ARRAY_LEN(queue_keys));
        path_join(path, base, queue_keys[k]);
        if (seen & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", path);
        seen |= 1u << k;
        if (k == 0 && get_name(it, path, q->name, sizeof(q->name), err) != 0)
            return -1;
        if (k == 1) {
            if (get_int(it, path, 1, 1000, &n, err) != 0)
                return -1;
            q->weight = (int)n;
        }
    }
    if (!(seen & 1u))
        return mu_errf(err, MU_E_CONFIG, "%s: missing required key 'name'", base);
    for (int j = 0; j < i; j++) {
        if (strcmp(c->queues[j].name, q->name) == 0)
            return mu_errf(err, MU_E_CONFIG, "%s.name: duplicate queue name '%s'", base, q->name);
    }
    return 0;
}

static int parse_queues(struct cfg *c, const cJSON *arr, struct mu_err *err)
{
    int i = 0;

    if (!cJSON_IsArray(arr))
        return err_expected(err, "queues", "an array of queue objects", arr);
    if (cJSON_GetArraySize(arr) == 0)
        return mu_errf(err, MU_E_CONFIG, "queues: expected at least one queue, got an empty array");
    if (cJSON_GetArraySize(arr) > CFG_MAX_QUEUES)
        return mu_errf(err, MU_E_CONFIG, "queues: expected at most %d queues, got %d",
                       CFG_MAX_QUEUES, cJSON_GetArraySize(arr));
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        if (parse_queue(c, i, it, err) != 0)
            return -1;
    }
    c->nqueues = i;
    return 0;
}

/* ---- top level ---- */

static const struct {
    const char *key;
    size_t offset; /* of an int in struct cfg */
    int min;
    int max;
} int_fields[] = {
    { "heartbeat_s", offsetof(struct cfg, heartbeat_s), 1, 60 },
    { "node_lost_after_s", offsetof(struct cfg, node_lost_after_s), 2, 3600 },
    { "spot_cooldown_s", offsetof(struct cfg, spot_cooldown_s), 0, 86400 },
    { "min_runtime_s", offsetof(struct cfg, min_runtime_s), 0, 86400 },
    { "bind_timeout_s", offsetof(struct cfg, bind_timeout_s), 1, 600 },
    { "kill_grace_s", offsetof(struct cfg, kill_grace_s), 0, 3600 },
    { "default_time_limit_s", offsetof(struct cfg, default_time_limit_s), 1, 31536000 },
    { "events_max", offsetof(struct cfg, events_max), 1000, 100000000 },
};

static const char *const top_keys[] = {
    "redis",         "bind",           "metrics",      "key_prefix",           "topology_levels",
    "pools",         "queues",         "heartbeat_s",  "node_lost_after_s",    "spot_cooldown_s",
    "min_runtime_s", "bind_timeout_s", "kill_grace_s", "default_time_limit_s", "events_max",
};
enum { TK_REDIS, TK_BIND, TK_METRICS, TK_PREFIX, TK_LEVELS, TK_POOLS, TK_QUEUES, TK_FIRST_INT };

static int top_field(struct cfg *c, int key, const cJSON *v, struct mu_err *err)
{
    static const char *const redis_schemes[] = { "redis://" };
    static const char *const bind_schemes[] = { "tcp://", "ipc://" };
    int64_t n;

    switch (key) {
    case TK_REDIS:
        return get_url(v, "redis", redis_schemes, 1, "a URL such as \"redis://127.0.0.1:6379\"",
                       c->redis, sizeof(c->redis), err);
    case TK_BIND:
        return get_url(v, "bind", bind_schemes, 2,
                       "a ZeroMQ endpoint such as \"tcp://127.0.0.1:7070\"", c->bind,
                       sizeof(c->bind), err);
    case TK_METRICS:
        return get_metrics(v, c->metrics, sizeof(c->metrics), err);
    case TK_PREFIX:
        return get_name(v, "key_prefix", c->key_prefix, sizeof(c->key_prefix), err);
    case TK_LEVELS:
        return parse_levels(c, v, err);
    case TK_POOLS:
        return parse_pools(c, v, err);
    case TK_QUEUES:
        return parse_queues(c, v, err);
    default:
        break;
    }
    for (size_t i = 0; i < MU_ARRAY_LEN(int_fields); i++) {
        if (strcmp(int_fields[i].key, top_keys[key]) != 0)
            continue;
        if (get_int(v, int_fields[i].key, int_fields[i].min, int_fields[i].max, &n, err) != 0)
            return -1;
        *(int *)(void *)((char *)c + int_fields[i].offset) = (int)n;
        return 0;
    }
    return mu_errf(err, MU_E_CONFIG, "%s: unhandled key", top_keys[key]);
}

static int parse_root(struct cfg *c, const cJSON *root, struct mu_err *err)
{
    unsigned seen = 0;

    for (const cJSON *it = root->child; it; it = it->next) {
        int k = key_index(it->string, top_keys, MU_ARRAY_LEN(top_keys));
        if (k < 0)
            return err_unknown_key(err, "", it->string, top_keys, MU_ARRAY_LEN(top_keys));
        if (seen & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", top_keys[k]);
        seen |= 1u << k;
        if (top_field(c, k, it, err) != 0)
            return -1;
    }
    if (c->node_lost_after_s <= c->heartbeat_s)
        return mu_errf(err, MU_E_CONFIG,
                       "node_lost_after_s: expected more than heartbeat_s (%d), got %d",
                       c->heartbeat_s, c->node_lost_after_s);
    return 0;
}

/* ---- raw text checks ---- */

/* The 1-based line of byte off; text is NUL-terminated and off is at most its length. */
static size_t text_line(const char *text, size_t off)
{
    size_t line = 1;
    for (const char *p = text; *p && (size_t)(p - text) < off; p++) {
        if (*p == '\n')
            line++;
    }
    return line;
}

/*
 * Finds what cJSON would accept but must not be: a raw control byte in a string (or a NUL
 * anywhere), and the escape \u0000, which cJSON turns into a silently shortened string.
 * Returns 0, or -1 with err naming the line and byte.
 */
static int text_scan(const char *text, size_t len, struct mu_err *err)
{
    bool in_str = false;

    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        const char *what = NULL;
        if (ch == 0) {
            what = "a NUL byte";
        } else if (!in_str) {
            if (ch == '"')
                in_str = true;
            continue;
        } else if (ch == '"') {
            in_str = false;
            continue;
        } else if (ch < 0x20) {
            what = "a raw control character in a string";
        } else if (ch == '\\' && i + 1 < len) {
            if (len - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0)
                what = "a NUL character (\\u0000) in a string";
            else
                i++; /* the escaped character cannot end the string */
        }
        if (what)
            return mu_errf(err, MU_E_CONFIG, "not valid JSON near line %zu (byte %zu): %s",
                           text_line(text, i), i, what);
    }
    return 0;
}

int cfg_parse(struct cfg *c, const char *json, size_t len, struct mu_err *err)
{
    char *copy = NULL;
    cJSON *root = NULL;
    const char *end = NULL;
    char got[GOT_LEN];
    int rc = -1;

    cfg_init_defaults(c);
    if (!json && len > 0) {
        mu_errf(err, MU_E_INVAL, "no config text");
        goto out;
    }
    if (len > CFG_FILE_MAX) {
        mu_errf(err, MU_E_CONFIG, "larger than %u bytes", CFG_FILE_MAX);
        goto out;
    }
    /* A private NUL-terminated copy: the caller's text need not be terminated. */
    copy = malloc(len + 1);
    if (!copy) {
        mu_errf(err, MU_E_NOMEM, "out of memory reading the config");
        goto out;
    }
    if (len)
        memcpy(copy, json, len);
    copy[len] = '\0';
    if (strspn(copy, " \t\r\n") == len) {
        mu_errf(err, MU_E_CONFIG, "expected a JSON object, got an empty document");
        goto out;
    }
    if (text_scan(copy, len, err) != 0)
        goto out;
    /* The length counts the terminator: cJSON 1.7.15 checks for it inside the length. */
    root = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
    if (!root) {
        size_t off = end && end >= copy && end <= copy + len ? (size_t)(end - copy) : 0;
        mu_errf(err, MU_E_CONFIG, "not valid JSON near line %zu (byte %zu)", text_line(copy, off),
                off);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        json_describe(root, got, sizeof(got));
        mu_errf(err, MU_E_CONFIG, "expected a JSON object at the top, got %s", got);
        goto out;
    }
    if (parse_root(c, root, err) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        cfg_init_defaults(c);
    cJSON_Delete(root);
    free(copy);
    return rc;
}

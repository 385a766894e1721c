/* SPDX-License-Identifier: MIT */
/*
 * cfg_parse: the config file of docs/design.md §2a, from JSON text to struct cfg, strictly.
 *
 * cJSON is lenient where a config file must not be: it accepts raw control characters in
 * strings, silently cuts a string at "\u0000", keeps duplicate keys and matches keys without
 * regard to case.  So mu_json_parse_object (common/json.c, shared with the spec parser)
 * refuses those cases first, naming the line, and the tree is then walked child by child with
 * exact key comparison, so that unknown and duplicate keys are errors.  Every message starts
 * with the key path ("pools[1].capacity: ...").  Cross-field rules (node_lost_after_s >
 * heartbeat_s) run after the walk, so key order is free.  The top-level keys, their types and
 * bounds are cfg_keys (cfg.c); this file reads them, and cfg.c never calls back into it.
 */
#include "config/cfg.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_json.h"

#include "common/mu_banned.h"

#define PATH_LEN 96 /* "pools[63].price_per_hour" and the like */

/* ---- typed getters ---- */

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
    return mu_json_err_expected(err, MU_E_CONFIG, path, expected, v);
}

/* A Redis URL, checked by the one parser every program uses (mu_redis_url_parse), so that the
 * config takes exactly what --redis and MUSTER_REDIS_URL take, redis+sentinel:// included. */
static int get_redis_url(const cJSON *v, char *dst, size_t size, struct mu_err *err)
{
    struct mu_redis_url u;

    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
        return mu_json_err_expected(err, MU_E_CONFIG, "redis",
                                    "a URL such as \"" MU_REDIS_URL_DEFAULT "\" or "
                                    "\"redis+sentinel://HOST[:PORT][,...]/MASTER\"",
                                    v);
    if (mu_redis_url_parse(v->valuestring, &u, err) != 0) {
        if (err)
            err->code = MU_E_CONFIG;
        mu_err_prefix(err, "redis: ");
        return -1;
    }
    mu_strlcpy(dst, v->valuestring, size);
    return 0;
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
    return mu_json_err_expected(err, MU_E_CONFIG, "metrics", expected, v);
}

/* ---- sections ---- */

static int parse_levels(struct cfg *c, const cJSON *arr, struct mu_err *err)
{
    char path[PATH_LEN];
    int i = 0;

    if (!cJSON_IsArray(arr))
        return mu_json_err_expected(err, MU_E_CONFIG, "topology_levels",
                                    "an array of level names, widest first", arr);
    if (cJSON_GetArraySize(arr) > CFG_MAX_LEVELS)
        return mu_errf(err, MU_E_CONFIG, "topology_levels: expected at most %d levels, got %d",
                       CFG_MAX_LEVELS, cJSON_GetArraySize(arr));
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        (void)mu_snprintf(path, sizeof(path), "topology_levels[%d]", i);
        if (mu_json_get_name(it, path, c->levels[i], sizeof(c->levels[i]), MU_E_CONFIG, err) != 0)
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

/*
 * "instance_topology": {"levels": ["block", "spine", "rack"], "availability_zone": "zone"}:
 * levels[i] is the level that NetworkNodes[i] sets (null: that layer is not used).  The names
 * are checked against topology_levels after the walk (instance_topology_check), so key order is
 * free.
 */
static int parse_instance_topology(struct cfg *c, const cJSON *obj, struct mu_err *err)
{
    static const char *const keys[] = { "levels", "availability_zone" };
    struct cfg_instance_topology *it = &c->instance_topology;
    char path[PATH_LEN];
    unsigned seen = 0;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_CONFIG, "instance_topology",
                                    "an object such as {\"levels\": [\"block\", \"spine\", "
                                    "\"rack\"]}",
                                    obj);
    for (const cJSON *v = obj->child; v; v = v->next) {
        int k = mu_json_key_index(v->string, keys, MU_ARRAY_LEN(keys));
        int i = 0;
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH,
                                           "instance_topology", v->string, keys,
                                           MU_ARRAY_LEN(keys));
        if (seen & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "instance_topology.%s: duplicate key", keys[k]);
        seen |= 1u << k;
        if (k == 1) {
            if (mu_json_get_name(v, "instance_topology.availability_zone", it->availability_zone,
                                 sizeof(it->availability_zone), MU_E_CONFIG, err)
                != 0)
                return -1;
            continue;
        }
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > CFG_MAX_LEVELS)
            return mu_json_err_expected(err, MU_E_CONFIG, "instance_topology.levels",
                                        "an array of at most 6 level names (or null), one per "
                                        "NetworkNodes layer, top layer first",
                                        v);
        for (const cJSON *l = v->child; l; l = l->next, i++) {
            (void)mu_snprintf(path, sizeof(path), "instance_topology.levels[%d]", i);
            if (cJSON_IsNull(l))
                it->layers[i][0] = '\0';
            else if (mu_json_get_name(l, path, it->layers[i], sizeof(it->layers[i]), MU_E_CONFIG,
                                      err)
                     != 0)
                return -1;
        }
        it->nlayers = i;
    }
    return 0;
}

/*
 * "history": {"sqlite": "/var/lib/muster/history.db"}: the job history's SQLite file (issue
 * #47), an absolute path or one relative to musterd's working directory.  {} or no key: no
 * history.  Other keys (a "postgres" to come) are refused, so a key accepted is a key that works.
 */
static int parse_history(struct cfg *c, const cJSON *obj, struct mu_err *err)
{
    static const char *const keys[] = { "sqlite" };
    const cJSON *v;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(
            err, MU_E_CONFIG, "history",
            "an object such as {\"sqlite\": \"/var/lib/muster/history.db\"}", obj);
    for (v = obj->child; v; v = v->next) {
        if (mu_json_key_index(v->string, keys, MU_ARRAY_LEN(keys)) < 0)
            return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, "history",
                                           v->string, keys, MU_ARRAY_LEN(keys));
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return mu_json_err_expected(err, MU_E_CONFIG, "history.sqlite",
                                        "a file path such as \"/var/lib/muster/history.db\"", v);
        if (mu_strlcpy(c->history_sqlite, v->valuestring, sizeof(c->history_sqlite))
            >= sizeof(c->history_sqlite))
            return mu_errf(err, MU_E_CONFIG, "history.sqlite: path longer than %d bytes",
                           CFG_URL_MAX - 1);
    }
    return 0;
}

/* Every level instance_topology names is one of topology_levels, and none is named twice. */
static int instance_topology_check(const struct cfg *c, struct mu_err *err)
{
    const struct cfg_instance_topology *it = &c->instance_topology;
    const char *names[CFG_MAX_LEVELS + 1];
    char paths[CFG_MAX_LEVELS + 1][PATH_LEN];
    int n = 0;

    for (int i = 0; i < it->nlayers; i++) {
        if (!it->layers[i][0])
            continue;
        names[n] = it->layers[i];
        (void)mu_snprintf(paths[n++], PATH_LEN, "instance_topology.levels[%d]", i);
    }
    if (it->availability_zone[0]) {
        names[n] = it->availability_zone;
        (void)mu_snprintf(paths[n++], PATH_LEN, "instance_topology.availability_zone");
    }
    if (it->nlayers > 0 && n == 0)
        return mu_errf(err, MU_E_CONFIG,
                       "instance_topology.levels: every layer is null; name at least one level");
    for (int i = 0; i < n; i++) {
        int level = cfg_level_index(c, names[i]);
        if (level < 0 || level == c->nlevels)
            return mu_errf(err, MU_E_CONFIG,
                           "%s: unknown level '%s'; hint: it must be one of topology_levels",
                           paths[i], names[i]);
        for (int j = 0; j < i; j++) {
            if (strcmp(names[j], names[i]) == 0)
                return mu_errf(err, MU_E_CONFIG, "%s: level '%s' is already set by %s", paths[i],
                               names[i], paths[j]);
        }
    }
    return 0;
}

static const char *const pool_keys[] = { "name",     "capacity",      "instance_type",
                                         "gpu_type", "gpus_per_node", "price_per_hour",
                                         "max_gpus", "shared" };
enum { PK_NAME, PK_CAPACITY, PK_INSTANCE, PK_GPU, PK_GPN, PK_PRICE, PK_MAX, PK_SHARED };

static int pool_field(
    struct cfg_pool *p, int key, const cJSON *v, const char *path, struct mu_err *err)
{
    int64_t n;

    switch (key) {
    case PK_NAME:
        return mu_json_get_name(v, path, p->name, sizeof(p->name), MU_E_CONFIG, err);
    case PK_CAPACITY:
        if (cJSON_IsString(v) && cfg_capacity_parse(v->valuestring, &p->capacity) == 0)
            return 0;
        return mu_json_err_expected(err, MU_E_CONFIG, path, "\"spot\" or \"on-demand\"", v);
    case PK_INSTANCE:
        return mu_json_get_name(v, path, p->instance_type, sizeof(p->instance_type), MU_E_CONFIG,
                                err);
    case PK_GPU:
        return mu_json_get_name(v, path, p->gpu_type, sizeof(p->gpu_type), MU_E_CONFIG, err);
    case PK_GPN:
        if (mu_json_get_int(v, path, 1, 64, MU_E_CONFIG, &n, err) != 0)
            return -1;
        p->gpus_per_node = (int)n;
        return 0;
    case PK_PRICE:
        return mu_json_get_number(v, path, 0, 1e6, "a price per node-hour 0..1000000", MU_E_CONFIG,
                                  &p->price_per_hour, err);
    case PK_MAX:
        if (mu_json_get_int(v, path, 0, 1 << 20, MU_E_CONFIG, &n, err) != 0)
            return -1;
        p->max_gpus = (int)n;
        return 0;
    case PK_SHARED:
        /* Time-sliced GPUs: gpu_milli jobs share them, with no isolation (issue #17). */
        if (!cJSON_IsBool(v))
            return mu_json_err_expected(err, MU_E_CONFIG, path, "true or false", v);
        p->shared = cJSON_IsTrue(v);
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
        return mu_json_err_expected(err, MU_E_CONFIG, base, "an object", obj);
    memset(p, 0, sizeof(*p));
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, pool_keys, MU_ARRAY_LEN(pool_keys));
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, base, it->string,
                                           pool_keys, MU_ARRAY_LEN(pool_keys));
        mu_json_path_join(path, sizeof(path), base, pool_keys[k]);
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
        return mu_json_err_expected(err, MU_E_CONFIG, "pools", "an array of pool objects", arr);
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

static const char *const queue_keys[] = { "name",   "weight",       "quota",
                                          "cohort", "borrow_limit", "lend_limit" };
enum { QK_NAME, QK_WEIGHT, QK_QUOTA, QK_COHORT, QK_BORROW, QK_LEND };

/* "quota": {"spot": N, "on-demand": M}, GPUs; a capacity type not named gets 0. */
static int parse_quota(struct cfg_queue *q, const cJSON *obj, const char *path, struct mu_err *err)
{
    static const char *const keys[] = { "spot", "on-demand" };
    char sub[PATH_LEN];
    int64_t n;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_CONFIG, path,
                                    "an object of GPUs by capacity type, such as "
                                    "{\"spot\": 64, \"on-demand\": 16}",
                                    obj);
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, keys, MU_ARRAY_LEN(keys));
        if (k < 0)
            return mu_errf(err, MU_E_CONFIG,
                           "%s: unknown key '%s': a quota is set per capacity type, \"spot\" or "
                           "\"on-demand\" (per-pool quotas are not supported)",
                           path, it->string);
        mu_json_path_join(sub, sizeof(sub), path, keys[k]);
        if (mu_json_get_int(it, sub, 0, CFG_QUOTA_MAX, MU_E_CONFIG, &n, err) != 0)
            return -1;
        q->quota[k] = (int)n;
    }
    q->has_quota = true;
    return 0;
}

static int queue_field(
    struct cfg_queue *q, int k, const cJSON *it, const char *path, struct mu_err *err)
{
    int64_t n;
    switch (k) {
    case QK_NAME:
        return mu_json_get_name(it, path, q->name, sizeof(q->name), MU_E_CONFIG, err);
    case QK_WEIGHT:
        if (mu_json_get_int(it, path, 1, 1000, MU_E_CONFIG, &n, err) != 0)
            return -1;
        q->weight = (int)n;
        return 0;
    case QK_QUOTA:
        return parse_quota(q, it, path, err);
    case QK_COHORT:
        return mu_json_get_name(it, path, q->cohort, sizeof(q->cohort), MU_E_CONFIG, err);
    default:
        if (mu_json_get_int(it, path, 0, CFG_QUOTA_MAX, MU_E_CONFIG, &n, err) != 0)
            return -1;
        *(k == QK_BORROW ? &q->borrow_limit : &q->lend_limit) = (int)n;
        return 0;
    }
}

static int parse_queue(struct cfg *c, int i, const cJSON *obj, struct mu_err *err)
{
    struct cfg_queue *q = &c->queues[i];
    char base[PATH_LEN];
    char path[PATH_LEN];
    unsigned seen = 0;

    (void)mu_snprintf(base, sizeof(base), "queues[%d]", i);
    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_CONFIG, base, "an object", obj);
    memset(q, 0, sizeof(*q));
    q->weight = 1;
    q->borrow_limit = -1;
    q->lend_limit = -1;
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = mu_json_key_index(it->string, queue_keys, MU_ARRAY_LEN(queue_keys));
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, base, it->string,
                                           queue_keys, MU_ARRAY_LEN(queue_keys));
        mu_json_path_join(path, sizeof(path), base, queue_keys[k]);
        if (seen & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", path);
        seen |= 1u << k;
        if (queue_field(q, k, it, path, err) != 0)
            return -1;
    }
    if (!(seen & (1u << QK_NAME)))
        return mu_errf(err, MU_E_CONFIG, "%s: missing required key 'name'", base);
    if ((seen & (1u << QK_COHORT)) && !q->has_quota)
        return mu_errf(err, MU_E_CONFIG,
                       "%s.cohort: queue '%s' has no quota; a cohort lends quota, so each member "
                       "needs a 'quota'",
                       base, q->name);
    if ((seen & ((1u << QK_BORROW) | (1u << QK_LEND))) && !q->cohort[0])
        return mu_errf(err, MU_E_CONFIG, "%s.%s: needs a 'cohort' to borrow from or lend to", base,
                       (seen & (1u << QK_BORROW)) ? "borrow_limit" : "lend_limit");
    for (int j = 0; j < i; j++) {
        if (strcmp(c->queues[j].name, q->name) == 0)
            return mu_errf(err, MU_E_CONFIG, "%s.name: duplicate queue name '%s'", base, q->name);
    }
    return 0;
}

/* A borrow_limit above what the rest of its cohort could ever lend is a mistake (a typo). */
static int check_cohorts(const struct cfg *c, struct mu_err *err)
{
    for (int i = 0; i < c->nqueues; i++) {
        const struct cfg_queue *q = &c->queues[i];
        int most = 0;
        if (q->borrow_limit < 0)
            continue;
        for (int cap = 0; cap < 2; cap++) {
            int others = 0;
            for (int j = 0; j < c->nqueues; j++) {
                const struct cfg_queue *o = &c->queues[j];
                if (j == i || strcmp(o->cohort, q->cohort) != 0)
                    continue;
                others += o->lend_limit >= 0 && o->lend_limit < o->quota[cap] ? o->lend_limit
                                                                              : o->quota[cap];
            }
            most = others > most ? others : most;
        }
        if (q->borrow_limit > most)
            return mu_errf(err, MU_E_CONFIG,
                           "queues[%d].borrow_limit: %d GPUs is more than the rest of cohort '%s' "
                           "can lend (%d)",
                           i, q->borrow_limit, q->cohort, most);
    }
    return 0;
}

static int parse_queues(struct cfg *c, const cJSON *arr, struct mu_err *err)
{
    int i = 0;

    if (!cJSON_IsArray(arr))
        return mu_json_err_expected(err, MU_E_CONFIG, "queues", "an array of queue objects", arr);
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
    return check_cohorts(c, err);
}

/* ---- top level: the keys of cfg_keys (cfg.c) ---- */

static int top_field(struct cfg *c, const struct cfg_key *key, const cJSON *v, struct mu_err *err)
{
    static const char *const bind_schemes[] = { "tcp://", "ipc://" };
    static const char *const never_met[] = { "cancel", "pend" };
    char *str = (char *)c + key->offset;
    int64_t n;
    int k;

    switch (key->type) {
    case CFG_KEY_INT:
        if (mu_json_get_int(v, key->name, key->min, key->max, MU_E_CONFIG, &n, err) != 0)
            return -1;
        *(int *)(void *)str = (int)n;
        return 0;
    case CFG_KEY_REDIS:
        return get_redis_url(v, str, key->size, err);
    case CFG_KEY_ENDPOINT:
        return get_url(v, key->name, bind_schemes, 2,
                       "a ZeroMQ endpoint such as \"tcp://127.0.0.1:7070\"", str, key->size, err);
    case CFG_KEY_METRICS:
        return get_metrics(v, str, key->size, err);
    case CFG_KEY_NAME:
        return mu_json_get_name(v, key->name, str, key->size, MU_E_CONFIG, err);
    case CFG_KEY_LEVELS:
        return parse_levels(c, v, err);
    case CFG_KEY_INSTANCE_TOPOLOGY:
        return parse_instance_topology(c, v, err);
    case CFG_KEY_POOLS:
        return parse_pools(c, v, err);
    case CFG_KEY_QUEUES:
        return parse_queues(c, v, err);
    case CFG_KEY_ACCESS:
        /* Who may do what (issue #46): access_parse (access/) judges the contents. */
        return cJSON_IsObject(v) ? 0
                                 : mu_json_err_expected(err, MU_E_CONFIG, key->name,
                                                        "an object (see docs/security.md)", v);
    case CFG_KEY_NEVER_MET:
        k = cJSON_IsString(v) ? mu_json_key_index(v->valuestring, never_met, 2) : -1;
        if (k < 0)
            return mu_json_err_expected(err, MU_E_CONFIG, key->name, "\"cancel\" or \"pend\"", v);
        c->never_met = (enum cfg_never_met)k;
        return 0;
    case CFG_KEY_HISTORY:
        return parse_history(c, v, err);
    }
    return mu_errf(err, MU_E_CONFIG, "%s: unhandled key", key->name);
}

/* The time limits and retry backoff agree with each other; seen: the top keys given. */
static int limits_check(struct cfg *c, const bool *seen, struct mu_err *err)
{
    if (c->max_time_limit_s > 0 && c->default_time_limit_s > c->max_time_limit_s) {
        if (seen[cfg_key_index("default_time_limit_s")])
            return mu_errf(err, MU_E_CONFIG,
                           "default_time_limit_s: %d is over max_time_limit_s (%d)",
                           c->default_time_limit_s, c->max_time_limit_s);
        c->default_time_limit_s = c->max_time_limit_s; /* the built-in default bows to the max */
    }
    if (c->retry_backoff_max_s < c->retry_backoff_s)
        return mu_errf(err, MU_E_CONFIG,
                       "retry_backoff_max_s: expected at least retry_backoff_s (%d), got %d",
                       c->retry_backoff_s, c->retry_backoff_max_s);
    return 0;
}

static int unknown_top_key(const char *key, struct mu_err *err)
{
    const char *names[CFG_NKEYS];

    for (int i = 0; i < CFG_NKEYS; i++)
        names[i] = cfg_keys[i].name;
    return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, "", key, names,
                                   CFG_NKEYS);
}

static int parse_root(struct cfg *c, const cJSON *root, struct mu_err *err)
{
    bool seen[CFG_NKEYS] = { false };

    for (const cJSON *it = root->child; it; it = it->next) {
        int k = cfg_key_index(it->string);
        if (k < 0)
            return unknown_top_key(it->string, err);
        if (seen[k])
            return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", cfg_keys[k].name);
        seen[k] = true;
        if (top_field(c, &cfg_keys[k], it, err) != 0)
            return -1;
    }
    /* It is also the workers' lease, renewed by each heartbeat's answer: a lease of one or two
     * heartbeats would lapse on a single late answer and stop healthy tasks. */
    if (c->node_lost_after_s < 3 * c->heartbeat_s)
        return mu_errf(err, MU_E_CONFIG,
                       "node_lost_after_s: expected at least 3 x heartbeat_s (%d), got %d; hint: "
                       "it is also the workers' lease, renewed once per heartbeat",
                       3 * c->heartbeat_s, c->node_lost_after_s);
    if (instance_topology_check(c, err) != 0)
        return -1;
    return limits_check(c, seen, err);
}

int cfg_parse(struct cfg *c, const char *json, size_t len, struct mu_err *err)
{
    /* A file a person edits: problems are named by line. */
    static const struct mu_json_doc doc = {
        .subject = NULL,
        .noun = "config",
        .max_bytes = CFG_FILE_MAX,
        .max_depth = 0, /* cJSON's own limit; the walk refuses what the schema cannot use */
        .where = MU_JSON_WHERE_LINE,
    };
    cJSON *root = NULL;
    int rc = -1;

    cfg_init_defaults(c);
    root = mu_json_parse_object(json, len, &doc, MU_E_CONFIG, err);
    if (!root)
        goto out;
    if (parse_root(c, root, err) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        cfg_init_defaults(c);
    cJSON_Delete(root);
    return rc;
}

int cfg_load_file(struct cfg *c, const char *path, struct mu_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = -1;

    cfg_init_defaults(c);
    /* One byte over the cap, so that "exactly at the cap" and "over it" can be told apart. */
    text = mu_file_read(path, (size_t)CFG_FILE_MAX + 1, &len, err);
    if (!text) {
        if (err && err->code == MU_E_TOOBIG)
            mu_errf(err, MU_E_CONFIG, "%s: larger than %u bytes", path, CFG_FILE_MAX);
        goto out;
    }
    if (cfg_parse(c, text, len, err) != 0) {
        mu_err_prefix(err, "%s: ", path);
        goto out;
    }
    rc = 0;
out:
    free(text);
    return rc;
}

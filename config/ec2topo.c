/* SPDX-License-Identifier: MIT */
/*
 * The EC2 instance topology that `aws ec2 describe-instance-topology` prints (issue #16), read
 * for `musterctl topology import` and for musterd, which keeps each instance as one compact JSON
 * object of the same shape in Redis and reads it back with cfg_topo_instance_parse.
 *
 * AWS lists each instance's NetworkNodes from the top layer of its network down to the node the
 * instance hangs off; the config's instance_topology says which topology level each layer sets
 * (cfg_topo_labels).  The reader is strict where a wrong value would mislabel nodes (ids must
 * be names, a layer list must not be empty, an instance id must not repeat) and lenient where
 * AWS may grow (keys it does not know are ignored).  A file is taken whole or not at all.
 */
#include "config/cfg.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_json.h"

#include "common/mu_banned.h"

#define PATH_LEN 96 /* "Instances[16383].NetworkNodes[5]" */

struct cfg_topo {
    int n;
    struct cfg_topo_instance *in; /* n entries */
    char next_token[256];         /* "" = none; cut when longer (only shown) */
    struct mu_map *ids;           /* InstanceId -> entry, for repeats */
};

/* An optional string: absent or null leaves dst "", else a name (or any text when !name). */
static int get_opt(const cJSON *obj,
                   const char *key,
                   const char *parent,
                   bool name,
                   char *dst,
                   size_t size,
                   struct mu_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char path[PATH_LEN];

    dst[0] = '\0';
    if (!v || cJSON_IsNull(v))
        return 0;
    mu_json_path_join(path, sizeof(path), parent, key);
    if (name)
        return mu_json_get_name(v, path, dst, size, MU_E_CONFIG, err);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
        return mu_json_err_expected(err, MU_E_CONFIG, path, "a string of at most 255 bytes", v);
    mu_strlcpy(dst, v->valuestring, size);
    return 0;
}

static int get_nodes(const cJSON *obj,
                     const char *parent,
                     struct cfg_topo_instance *out,
                     struct mu_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "NetworkNodes");
    char path[PATH_LEN];
    int i = 0;

    mu_json_path_join(path, sizeof(path), parent, "NetworkNodes");
    if (!v || cJSON_IsNull(v) || (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        return mu_errf(err, MU_E_CONFIG,
                       "%s: %s for instance '%s'; hint: AWS reports none for an instance that "
                       "is not running or whose type has no topology: leave it out "
                       "(--instance-ids)",
                       path, v ? "empty" : "missing", out->instance_id);
    if (!cJSON_IsArray(v))
        return mu_json_err_expected(err, MU_E_CONFIG, path, "an array of network node ids", v);
    if (cJSON_GetArraySize(v) > CFG_TOPO_MAX_NODES)
        return mu_errf(err, MU_E_CONFIG, "%s: %d network nodes, at most %d supported", path,
                       cJSON_GetArraySize(v), CFG_TOPO_MAX_NODES);
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        char item[PATH_LEN + 8];
        (void)mu_snprintf(item, sizeof(item), "%s[%d]", path, i);
        if (mu_json_get_name(it, item, out->nodes[i], sizeof(out->nodes[i]), MU_E_CONFIG, err) != 0)
            return -1;
    }
    out->nnodes = i;
    return 0;
}

/* One instance object at path ("Instances[3]", or "instance" for a stored one). */
static int instance_read(const cJSON *obj,
                         const char *path,
                         struct cfg_topo_instance *out,
                         struct mu_err *err)
{
    char where[PATH_LEN];

    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_CONFIG, path, "an instance object", obj);
    mu_json_path_join(where, sizeof(where), path, "InstanceId");
    if (!cJSON_GetObjectItemCaseSensitive(obj, "InstanceId"))
        return mu_errf(err, MU_E_CONFIG, "%s: missing", where);
    if (mu_json_get_name(cJSON_GetObjectItemCaseSensitive(obj, "InstanceId"), where,
                         out->instance_id, sizeof(out->instance_id), MU_E_CONFIG, err)
            != 0
        || get_opt(obj, "InstanceType", path, true, out->instance_type, sizeof(out->instance_type),
                   err)
               != 0
        || get_opt(obj, "AvailabilityZone", path, true, out->availability_zone,
                   sizeof(out->availability_zone), err)
               != 0
        || get_opt(obj, "ZoneId", path, true, out->zone_id, sizeof(out->zone_id), err) != 0
        || get_opt(obj, "CapacityBlockId", path, true, out->capacity_block_id,
                   sizeof(out->capacity_block_id), err)
               != 0
        || get_opt(obj, "GroupName", path, false, out->group_name, sizeof(out->group_name), err)
               != 0
        || get_nodes(obj, path, out, err) != 0)
        return -1;
    return 0;
}

static int instances_read(struct cfg_topo *t, const cJSON *arr, struct mu_err *err)
{
    char path[PATH_LEN];
    int n;
    int i = 0;

    if (!arr)
        return mu_errf(err, MU_E_CONFIG,
                       "Instances: missing; hint: give the output of 'aws ec2 "
                       "describe-instance-topology'");
    if (!cJSON_IsArray(arr))
        return mu_json_err_expected(err, MU_E_CONFIG, "Instances", "an array of instances", arr);
    n = cJSON_GetArraySize(arr);
    if (n == 0)
        return mu_errf(err, MU_E_CONFIG, "Instances: empty, nothing to import");
    if (n > CFG_TOPO_MAX_INSTANCES)
        return mu_errf(err, MU_E_TOOBIG,
                       "Instances: %d instances, at most %d per file; hint: imports add up, so "
                       "import the fleet in parts (--instance-ids or --filters)",
                       n, CFG_TOPO_MAX_INSTANCES);
    t->in = calloc((size_t)n, sizeof(*t->in));
    t->ids = mu_map_new();
    if (!t->in || !t->ids)
        return mu_errf(err, MU_E_NOMEM, "out of memory reading the instance topology");
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        struct cfg_topo_instance *in = &t->in[i];
        const struct cfg_topo_instance *first;
        (void)mu_snprintf(path, sizeof(path), "Instances[%d]", i);
        if (instance_read(it, path, in, err) != 0)
            return -1;
        first = mu_map_get(t->ids, in->instance_id);
        if (first)
            return mu_errf(err, MU_E_CONFIG, "%s.InstanceId: '%s' is listed twice (also at %d)",
                           path, in->instance_id, (int)(first - t->in));
        if (mu_map_put(t->ids, in->instance_id, in, err) != 0)
            return -1;
        t->n = i + 1;
    }
    return 0;
}

struct cfg_topo *cfg_topo_parse(const char *json, size_t len, struct mu_err *err)
{
    static const struct mu_json_doc doc = {
        .subject = NULL,
        .noun = "instance topology",
        .max_bytes = CFG_TOPO_FILE_MAX,
        .max_depth = 8,
        .where = MU_JSON_WHERE_LINE,
    };
    struct cfg_topo *t = NULL;
    cJSON *root = NULL;
    const cJSON *next;
    int rc = -1;

    root = mu_json_parse_object(json, len, &doc, MU_E_CONFIG, err);
    if (!root)
        goto out;
    t = calloc(1, sizeof(*t));
    if (!t) {
        mu_errf(err, MU_E_NOMEM, "out of memory reading the instance topology");
        goto out;
    }
    if (instances_read(t, cJSON_GetObjectItemCaseSensitive(root, "Instances"), err) != 0)
        goto out;
    next = cJSON_GetObjectItemCaseSensitive(root, "NextToken");
    if (next && !cJSON_IsNull(next) && !cJSON_IsString(next)) {
        mu_json_err_expected(err, MU_E_CONFIG, "NextToken", "a string or null", next);
        goto out;
    }
    if (next && cJSON_IsString(next))
        mu_strlcpy(t->next_token, next->valuestring, sizeof(t->next_token));
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc != 0) {
        cfg_topo_free(t);
        t = NULL;
    }
    return t;
}

void cfg_topo_free(struct cfg_topo *t)
{
    if (!t)
        return;
    mu_map_free(t->ids);
    free(t->in);
    free(t);
}

int cfg_topo_count(const struct cfg_topo *t)
{
    return t->n;
}

const struct cfg_topo_instance *cfg_topo_get(const struct cfg_topo *t, int i)
{
    return &t->in[i];
}

const char *cfg_topo_next_token(const struct cfg_topo *t)
{
    return t->next_token;
}

/* ,"key":"value" when value is not empty. */
static int put_opt(struct mu_buf *b, const char *key, const char *value, struct mu_err *err)
{
    if (!value[0])
        return 0;
    if (mu_buf_appendf(b, err, ",\"%s\":", key) != 0 || mu_buf_append_json_str(b, value, err) != 0)
        return -1;
    return 0;
}

char *cfg_topo_instance_format(const struct cfg_topo_instance *in, struct mu_err *err)
{
    struct mu_buf b;

    mu_buf_init(&b, 0);
    if (mu_buf_append(&b, "{\"InstanceId\":", 14, err) != 0
        || mu_buf_append_json_str(&b, in->instance_id, err) != 0
        || put_opt(&b, "InstanceType", in->instance_type, err) != 0
        || put_opt(&b, "AvailabilityZone", in->availability_zone, err) != 0
        || put_opt(&b, "ZoneId", in->zone_id, err) != 0
        || put_opt(&b, "GroupName", in->group_name, err) != 0
        || put_opt(&b, "CapacityBlockId", in->capacity_block_id, err) != 0
        || mu_buf_append(&b, ",\"NetworkNodes\":[", 17, err) != 0)
        goto fail;
    for (int i = 0; i < in->nnodes; i++) {
        if ((i && mu_buf_append(&b, ",", 1, err) != 0)
            || mu_buf_append_json_str(&b, in->nodes[i], err) != 0)
            goto fail;
    }
    if (mu_buf_append(&b, "]}", 2, err) != 0)
        goto fail;
    return mu_buf_take(&b);
fail:
    mu_buf_release(&b);
    return NULL;
}

int cfg_topo_instance_parse(const char *json,
                            size_t len,
                            struct cfg_topo_instance *out,
                            struct mu_err *err)
{
    static const struct mu_json_doc doc = {
        .subject = "instance",
        .noun = "instance topology",
        .max_bytes = 64u << 10,
        .max_depth = 4,
        .where = MU_JSON_WHERE_PATH,
    };
    struct cfg_topo_instance in;
    cJSON *root = mu_json_parse_object(json, len, &doc, MU_E_CONFIG, err);
    int rc;

    if (!root)
        return -1;
    rc = instance_read(root, "instance", &in, err);
    cJSON_Delete(root);
    if (rc == 0)
        *out = in;
    return rc;
}

int cfg_topo_labels(const struct cfg *c,
                    const struct cfg_topo_instance *in,
                    char (*labels)[CFG_TOPO_ID_MAX],
                    bool *set,
                    struct mu_err *err)
{
    const struct cfg_instance_topology *it = &c->instance_topology;
    int need = 0;

    if (!cfg_instance_topology_is_set(c))
        return mu_errf(err, MU_E_CONFIG,
                       "the config has no instance_topology; hint: add e.g. "
                       "\"instance_topology\": {\"levels\": [\"block\", \"spine\", \"rack\"]} "
                       "to musterd's config (docs/deploy.md)");
    for (int i = 0; i < it->nlayers; i++)
        need = it->layers[i][0] ? i + 1 : need;
    if (in->nnodes < need)
        return mu_errf(err, MU_E_CONFIG,
                       "instance '%s': %d network node(s), but instance_topology.levels maps %d "
                       "layers",
                       in->instance_id, in->nnodes, need);
    if (it->availability_zone[0] && !in->availability_zone[0])
        return mu_errf(err, MU_E_CONFIG,
                       "instance '%s': no AvailabilityZone, which instance_topology."
                       "availability_zone maps to level '%s'",
                       in->instance_id, it->availability_zone);
    for (int l = 0; l < c->nlevels; l++) {
        set[l] = false;
        labels[l][0] = '\0';
    }
    for (int i = 0; i < it->nlayers; i++) {
        int l = cfg_level_index(c, it->layers[i]);
        if (!it->layers[i][0] || l < 0 || l >= c->nlevels)
            continue;
        mu_strlcpy(labels[l], in->nodes[i], CFG_TOPO_ID_MAX);
        set[l] = true;
    }
    if (it->availability_zone[0]) {
        int l = cfg_level_index(c, it->availability_zone);
        if (l >= 0 && l < c->nlevels) {
            mu_strlcpy(labels[l], in->availability_zone, CFG_TOPO_ID_MAX);
            set[l] = true;
        }
    }
    return 0;
}

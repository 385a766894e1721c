/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd (d_node.h): the imported EC2 instance topology (issue #16).
 *
 * `musterctl topology import` stages the instances of an `aws ec2 describe-instance-topology`
 * answer in Redis and sends the control command "topology".  Here every staged instance is
 * checked against the config's instance_topology first; only when all of them pass are they
 * stored (merged with earlier imports: instances not in the file keep what they had) and the
 * registered nodes of those instances relabelled in the cluster, so a bad or partial file
 * changes nothing.  A worker reports its instance id in HELLO; the labels the import gives it
 * override its --label flags for the levels instance_topology maps, at every registration,
 * including after a musterd restart (d_topo_load reads the stored instances at start).
 */

#include "scheduler/d_node.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

/* Keeps a copy of in in map, replacing (and freeing) what it had for that instance. */
static int topo_keep(struct mu_map *map, const struct cfg_topo_instance *in, struct mu_err *err)
{
    struct cfg_topo_instance *copy = malloc(sizeof(*copy));
    struct cfg_topo_instance *old;

    if (!copy)
        return mu_errf(err, MU_E_NOMEM, "out of memory keeping the instance topology");
    *copy = *in;
    old = mu_map_get(map, in->instance_id);
    if (mu_map_put(map, in->instance_id, copy, err) != 0) {
        free(copy);
        return -1;
    }
    free(old);
    return 0;
}

static int topo_map(struct musterd *d, struct mu_err *err)
{
    if (!d->topology)
        d->topology = mu_map_new();
    if (!d->topology)
        return mu_errf(err, MU_E_NOMEM, "out of memory for the instance topology");
    return 0;
}

static int load_one(void *ctx, const char *field, const char *value, size_t len, struct mu_err *err)
{
    struct musterd *d = ctx;
    struct cfg_topo_instance in;
    struct mu_err bad = { 0 };

    if (cfg_topo_instance_parse(value, len, &in, &bad) != 0 || strcmp(in.instance_id, field) != 0) {
        mu_log_limited(MU_LOG_WARN, "sched", "topo-load", 5,
                       "instance topology: stored entry '%s' skipped: %s", field,
                       strcmp(bad.msg, "") != 0 ? bad.msg : "its InstanceId differs");
        return 0;
    }
    return topo_keep(d->topology, &in, err);
}

int d_topo_load(struct musterd *d, struct mu_err *err)
{
    int n = 0;

    if (topo_map(d, err) != 0 || queue_hash_each(d->q, "topology", load_one, d, &n, err) != 0)
        return -1;
    if (n > 0)
        mu_log(MU_LOG_INFO, "sched", "instance topology: %zu instance(s) from earlier imports%s",
               mu_map_count(d->topology),
               cfg_instance_topology_is_set(&d->cfg) ? ""
                                                     : "; unused: the config has no "
                                                       "instance_topology");
    return 0;
}

int d_topo_node_labels(const struct musterd *d,
                       const char *instance_id,
                       char (*labels)[SCHED_NAME_MAX],
                       bool *set)
{
    char values[CFG_MAX_LEVELS][CFG_TOPO_ID_MAX];
    bool mapped[CFG_MAX_LEVELS];
    const struct cfg_topo_instance *in;
    struct mu_err err;
    int n = 0;

    for (int l = 0; l < d->cfg.nlevels; l++)
        set[l] = false;
    if (!instance_id || !instance_id[0] || !d->topology || !cfg_instance_topology_is_set(&d->cfg))
        return 0;
    in = mu_map_get(d->topology, instance_id);
    if (!in)
        return 0;
    if (cfg_topo_labels(&d->cfg, in, values, mapped, &err) != 0) {
        mu_log_limited(MU_LOG_WARN, "sched", "topo-labels", 5,
                       "instance topology of %s not used: %s; hint: import it again", instance_id,
                       err.msg);
        return 0;
    }
    for (int l = 0; l < d->cfg.nlevels; l++) {
        if (!mapped[l])
            continue;
        mu_strlcpy(labels[l], values[l], SCHED_NAME_MAX);
        set[l] = true;
        n++;
    }
    return n;
}

/* What an import read from its staging hash. */
struct staged {
    struct cfg_topo_instance *in;
    int n;
    int cap;
    struct mu_map *ids; /* instance id -> index + 1 into in */
};

static int stage_one(
    void *ctx, const char *field, const char *value, size_t len, struct mu_err *err)
{
    struct staged *s = ctx;

    if (s->n == CFG_TOPO_MAX_INSTANCES)
        return mu_errf(err, MU_E_TOOBIG, "more than %d instances", CFG_TOPO_MAX_INSTANCES);
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        struct cfg_topo_instance *p = realloc(s->in, (size_t)cap * sizeof(*p));
        if (!p)
            return mu_errf(err, MU_E_NOMEM, "out of memory reading the import");
        s->in = p;
        s->cap = cap;
    }
    if (cfg_topo_instance_parse(value, len, &s->in[s->n], err) != 0) {
        mu_err_prefix(err, "staged instance '%s': ", field);
        return -1;
    }
    if (mu_map_put(s->ids, s->in[s->n].instance_id, (void *)(uintptr_t)(s->n + 1), err) != 0)
        return -1;
    s->n++;
    return 0;
}

/* Stores the staged instances in <prefix>topology and in d->topology; 0 or -1 with err. */
static int staged_store(struct musterd *d, const struct staged *s, struct mu_err *err)
{
    struct queue_kv *kv;
    char **json;
    int rc = -1;

    if (s->n <= 0)
        return 0; /* the caller refuses an empty import */
    kv = calloc((size_t)s->n, sizeof(*kv));
    json = calloc((size_t)s->n, sizeof(*json));

    if (!kv || !json) {
        mu_errf(err, MU_E_NOMEM, "out of memory storing the import");
        goto out;
    }
    for (int i = 0; i < s->n; i++) {
        json[i] = cfg_topo_instance_format(&s->in[i], err);
        if (!json[i])
            goto out;
        kv[i] = (struct queue_kv){ s->in[i].instance_id, json[i] };
    }
    if (d->store.ops->status_write(d->store.ctx, "topology", kv, s->n, err) != 0) {
        d->redis_down = true;
        goto out;
    }
    if (topo_map(d, err) != 0)
        goto out;
    for (int i = 0; i < s->n; i++) {
        if (topo_keep(d->topology, &s->in[i], err) != 0)
            goto out;
    }
    rc = 0;
out:
    for (int i = 0; json && i < s->n; i++)
        free(json[i]);
    free(json);
    free(kv);
    return rc;
}

/* Relabels the registered nodes of the staged instances; counts into the three outputs. */
static void nodes_relabel(
    struct musterd *d, const struct staged *s, int *relabelled, int *same, int *matched)
{
    bool *hit = calloc((size_t)s->n, sizeof(*hit));

    *relabelled = *same = *matched = 0;
    for (int i = 0; i < d->nnodes; i++) {
        struct d_node *node = &d->nodes[i];
        char labels[SCHED_MAX_LEVELS][SCHED_NAME_MAX];
        bool set[CFG_MAX_LEVELS];
        const struct sched_node_spec *spec;
        struct mu_err err;
        uintptr_t k;
        int rc;

        if (!node->instance_id[0])
            continue;
        k = (uintptr_t)mu_map_get(s->ids, node->instance_id);
        if (!k || d_topo_node_labels(d, node->instance_id, labels, set) == 0)
            continue;
        if (hit && !hit[k - 1]) {
            hit[k - 1] = true;
            (*matched)++;
        }
        spec = sched_cluster_node_spec(d->cluster, i);
        for (int l = 0; l < d->cfg.nlevels; l++) {
            if (!set[l])
                memcpy(labels[l], spec->labels[l], SCHED_NAME_MAX);
        }
        rc = sched_cluster_node_relabel(d->cluster, i, (const char(*)[SCHED_NAME_MAX])labels,
                                        d->cfg.nlevels, &err);
        if (rc < 0) {
            mu_log(MU_LOG_ERROR, "sched", "node=%s cannot take the imported labels: %s", node->name,
                   err.msg);
            continue;
        }
        *relabelled += rc == 1;
        *same += rc == 0;
        if (rc == 1)
            mu_log(MU_LOG_INFO, "sched", "node=%s relabelled from instance %s", node->name,
                   node->instance_id);
    }
    free(hit);
}

static void answer(struct musterd *d, const char *token, const char *result)
{
    struct queue_kv kv[] = { { token, result } };
    struct mu_err err;

    mu_log(strncmp(result, "ok", 2) == 0 ? MU_LOG_INFO : MU_LOG_ERROR, "sched",
           "topology import %s %s", token, result);
    if (d->store.ops->status_write(d->store.ctx, "topology:results", kv, 1, &err) != 0)
        d->redis_down = true;
}

void d_topo_import(struct musterd *d, const char *token)
{
    struct staged s = { 0 };
    struct mu_err err = { 0 };
    char hash[CFG_NAME_MAX + 32];
    char result[sizeof(err.msg) + 200];
    int relabelled;
    int same;
    int matched;

    if (!cfg_instance_topology_is_set(&d->cfg)) {
        (void)mu_snprintf(result, sizeof(result),
                          "refused: musterd's config has no instance_topology, so no level "
                          "takes the network nodes; hint: add e.g. \"instance_topology\": "
                          "{\"levels\": [\"block\", \"spine\", \"rack\"]} and restart "
                          "musterd (docs/deploy.md)");
        goto out;
    }
    s.ids = mu_map_new();
    queue_topology_staging(token, hash, sizeof(hash));
    if (!s.ids || queue_hash_each(d->q, hash, stage_one, &s, NULL, &err) != 0) {
        (void)mu_snprintf(result, sizeof(result), "refused: %s", s.ids ? err.msg : "out of memory");
        goto out;
    }
    if (s.n == 0) {
        (void)mu_snprintf(result, sizeof(result),
                          "refused: import %s has no staged instances (it expires after an hour)",
                          token);
        goto out;
    }
    for (int i = 0; i < s.n; i++) {
        char labels[CFG_MAX_LEVELS][CFG_TOPO_ID_MAX];
        bool set[CFG_MAX_LEVELS];
        if (cfg_topo_labels(&d->cfg, &s.in[i], labels, set, &err) != 0) {
            (void)mu_snprintf(result, sizeof(result), "refused: %s; nothing changed", err.msg);
            goto out;
        }
    }
    if (staged_store(d, &s, &err) != 0) {
        (void)mu_snprintf(result, sizeof(result), "refused: cannot store the import: %s", err.msg);
        goto out;
    }
    nodes_relabel(d, &s, &relabelled, &same, &matched);
    d->nodes_dirty = true; /* muster:nodes shows the new labels */
    d->dirty = true;       /* a gang waiting for one domain may fit now */
    (void)mu_snprintf(result, sizeof(result),
                      "ok: %d instance(s) imported: %d node(s) relabelled, %d already labelled "
                      "so; %d instance(s) match no registered node (labelled when it registers)",
                      s.n, relabelled, same, s.n - matched);
out:
    answer(d, token, result);
    mu_map_free(s.ids);
    free(s.in);
}

void d_topo_free(struct musterd *d)
{
    size_t pos = 0;
    struct cfg_topo_instance *in;

    while ((in = mu_map_next(d->topology, &pos)) != NULL)
        free(in);
    mu_map_free(d->topology);
    d->topology = NULL;
}

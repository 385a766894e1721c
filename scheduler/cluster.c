/* SPDX-License-Identifier: MIT */
/*
 * The cluster snapshot the placement core works on: pools, nodes, what is free.  Part of the pure
 * core (DESIGN §1): no I/O, no clock, no logging.  Node indices are stable for the cluster's
 * life, so the daemon and committed placements can refer to nodes by index; a node that comes
 * back under the same name keeps its index.
 */
#include "scheduler/internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static const char *const node_state_names[] = { "ready", "cordoned", "draining", "terminating",
                                                "lost" };

const char *sched_node_state_name(enum sched_node_state s)
{
    if ((unsigned)s < MU_ARRAY_LEN(node_state_names))
        return node_state_names[s];
    return "unknown";
}

struct sched_cluster *sched_cluster_new(const struct sched_pool *pools,
                                        int npools,
                                        int nlevels,
                                        struct mu_err *err)
{
    struct sched_cluster *c = NULL;

    if (npools < 0 || nlevels < 0 || nlevels > SCHED_MAX_LEVELS) {
        mu_errf(err, MU_E_INVAL, "cluster: bad pool or level count");
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    c->pools = calloc((size_t)npools + 1, sizeof(*c->pools));
    c->pool_gpus_used = calloc((size_t)npools + 1, sizeof(*c->pool_gpus_used));
    if (!c->pools || !c->pool_gpus_used)
        goto nomem;
    if (npools)
        memcpy(c->pools, pools, (size_t)npools * sizeof(*pools));
    c->npools = npools;
    c->nlevels = nlevels;
    return c;
nomem:
    sched_cluster_free(c);
    mu_errf(err, MU_E_NOMEM, "cluster: out of memory");
    return NULL;
}

void sched_cluster_free(struct sched_cluster *c)
{
    if (!c)
        return;
    free(c->pools);
    free(c->pool_gpus_used);
    free(c->nodes);
    free(c);
}

int sched_cluster_node_find(const struct sched_cluster *c, const char *name)
{
    for (int i = 0; i < c->nnodes; i++) {
        if (strcmp(c->nodes[i].spec.name, name) == 0)
            return i;
    }
    return -1;
}

int sched_cluster_node_add(struct sched_cluster *c,
                           const struct sched_node_spec *spec,
                           struct mu_err *err)
{
    struct sched_node *n;
    int idx;

    if (spec->pool < 0 || spec->pool >= c->npools)
        return mu_errf(err, MU_E_INVAL, "node '%s': unknown pool", spec->name);
    if (spec->ngpus < 0 || spec->ngpus > SCHED_MAX_GPUS_NODE)
        return mu_errf(err, MU_E_RANGE, "node '%s': %d GPUs, at most %d supported", spec->name,
                       spec->ngpus, SCHED_MAX_GPUS_NODE);
    if (spec->nlabels != c->nlevels)
        return mu_errf(err, MU_E_INVAL, "node '%s': %d topology labels, the cluster has %d levels",
                       spec->name, spec->nlabels, c->nlevels);
    idx = sched_cluster_node_find(c, spec->name);
    if (idx >= 0) {
        n = &c->nodes[idx];
        if (n->gpus_used || n->cpus_used || n->memory_mb_used) {
            if (n->spec.ngpus != spec->ngpus || n->spec.pool != spec->pool)
                return mu_errf(err, MU_E_STATE,
                               "node '%s' came back with a different pool or GPU count while "
                               "work is placed on it",
                               spec->name);
        }
    } else {
        if (c->nnodes == c->cap_nodes) {
            int cap = c->cap_nodes ? c->cap_nodes * 2 : 16;
            struct sched_node *p = realloc(c->nodes, (size_t)cap * sizeof(*p));
            if (!p)
                return mu_errf(err, MU_E_NOMEM, "cluster: out of memory adding node '%s'",
                               spec->name);
            c->nodes = p;
            c->cap_nodes = cap;
        }
        idx = c->nnodes++;
        n = &c->nodes[idx];
        memset(n, 0, sizeof(*n));
    }
    n->spec = *spec;
    n->state = SCHED_NODE_READY;
    n->gpus_all = spec->ngpus == 64 ? UINT64_MAX : ((UINT64_C(1) << spec->ngpus) - 1);
    return idx;
}

int sched_cluster_node_count(const struct sched_cluster *c)
{
    return c->nnodes;
}

const struct sched_node_spec *sched_cluster_node_spec(const struct sched_cluster *c, int node)
{
    return &c->nodes[node].spec;
}

const struct sched_pool *sched_cluster_pool(const struct sched_cluster *c, int pool)
{
    return &c->pools[pool];
}

int sched_cluster_pool_count(const struct sched_cluster *c)
{
    return c->npools;
}

void sched_cluster_node_set_state(struct sched_cluster *c, int node, enum sched_node_state s)
{
    c->nodes[node].state = s;
}

enum sched_node_state sched_cluster_node_state(const struct sched_cluster *c, int node)
{
    return c->nodes[node].state;
}

int sched_cluster_node_gpus_free(const struct sched_cluster *c, int node)
{
    const struct sched_node *n = &c->nodes[node];
    return __builtin_popcountll(n->gpus_all & ~n->gpus_used);
}

int sched_cluster_pool_gpus_used(const struct sched_cluster *c, int pool)
{
    return c->pool_gpus_used[pool];
}

void sched_cluster_commit(struct sched_cluster *c,
                          const struct sched_request *r,
                          const struct sched_slot *slots)
{
    for (int i = 0; i < r->tasks; i++) {
        struct sched_node *n = &c->nodes[slots[i].node];
        assert((n->gpus_used & slots[i].gpus) == 0);
        n->gpus_used |= slots[i].gpus;
        n->cpus_used += r->cpus_per_task;
        n->memory_mb_used += r->memory_mb_per_task;
        c->pool_gpus_used[n->spec.pool] += __builtin_popcountll(slots[i].gpus);
    }
}

void sched_cluster_release(struct sched_cluster *c,
                           const struct sched_request *r,
                           const struct sched_slot *slots)
{
    for (int i = 0; i < r->tasks; i++) {
        struct sched_node *n = &c->nodes[slots[i].node];
        assert((n->gpus_used & slots[i].gpus) == slots[i].gpus);
        n->gpus_used &= ~slots[i].gpus;
        n->cpus_used -= r->cpus_per_task;
        n->memory_mb_used -= r->memory_mb_per_task;
        c->pool_gpus_used[n->spec.pool] -= __builtin_popcountll(slots[i].gpus);
    }
}

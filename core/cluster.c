/* SPDX-License-Identifier: MIT */
/*
 * The cluster snapshot the placement core works on: pools, nodes, what is free, the topology
 * tree.  Part of the pure core (docs/design.md §1): no I/O, no clock, no logging.
 *
 * Node indices are stable for the cluster's life, so the daemon and committed placements can
 * refer to nodes by index; a node that comes back under the same name keeps its index.  For the
 * topology the nodes are kept sorted by label path (zone, block, rack, then index), so every
 * domain of every level is one contiguous range of that order; the sort is redone lazily after
 * nodes were added.  Every per-node scratch array the placement needs grows with the nodes here,
 * so a placement never allocates.  Per pool, a histogram of eligible nodes by free GPUs gives a
 * cheap "cannot fit" bound; commit, release and state changes keep it exact.
 */
#include "core/internal.h"
#include "core/sort.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static const char *const node_state_names[] = { "ready",       "cordoned", "draining",
                                                "terminating", "lost",     "down" };

const char *sched_node_state_name(enum sched_node_state s)
{
    if ((unsigned)s < MU_ARRAY_LEN(node_state_names))
        return node_state_names[s];
    return "unknown";
}

struct sched_cluster *sched_cluster_new(const struct sched_pool *pools,
                                        int npools,
                                        const char *const *level_names,
                                        int nlevels,
                                        struct mu_err *err)
{
    struct sched_cluster *c = NULL;
    size_t np;

    if (npools < 0 || npools > SCHED_MAX_POOLS || nlevels < 0 || nlevels > SCHED_MAX_LEVELS
        || (nlevels > 0 && !level_names)) {
        mu_errf(err, MU_E_INVAL, "cluster: bad pool or level count");
        return NULL;
    }
    for (int l = 0; l < nlevels; l++) {
        if (!level_names[l] || !level_names[l][0] || strlen(level_names[l]) >= SCHED_NAME_MAX
            || strcmp(level_names[l], "node") == 0) {
            mu_errf(err, MU_E_INVAL, "cluster: topology level %d: bad name", l);
            return NULL;
        }
    }
    np = (size_t)npools + 1;
    c = calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    c->nodes_gen = 1; /* 0 marks an empty idle_memo entry */
    c->by_name = mu_map_new();
    if (!c->by_name)
        goto nomem;
    c->pools = calloc(np, sizeof(*c->pools));
    c->pool_gpus_used = calloc(np, sizeof(*c->pool_gpus_used));
    c->pool_cool_s = calloc(np, sizeof(*c->pool_cool_s));
    c->pool_hist = calloc(np * SCHED_HIST_W, sizeof(*c->pool_hist));
    c->pool_size_hist = calloc(np * SCHED_HIST_W, sizeof(*c->pool_size_hist));
    c->pool_left = calloc(np, sizeof(int));
    c->pool_sum = calloc(np, sizeof(int));
    c->pool_dsum = calloc(np, sizeof(int));
    c->pool_rank = calloc(np, sizeof(int));
    c->none_last = calloc(np * SCHED_NONE_MEMO, sizeof(int));
    if (!c->pools || !c->pool_gpus_used || !c->pool_cool_s || !c->pool_hist || !c->pool_size_hist
        || !c->pool_left || !c->pool_sum || !c->pool_dsum || !c->pool_rank || !c->none_last)
        goto nomem;
    if (npools)
        memcpy(c->pools, pools, (size_t)npools * sizeof(*pools));
    c->npools = npools;
    c->nlevels = nlevels;
    for (int l = 0; l < nlevels; l++)
        mu_strlcpy(c->level_names[l], level_names[l], SCHED_NAME_MAX);
    mu_strlcpy(c->level_names[nlevels], "node", SCHED_NAME_MAX);
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
    free(c->runs);
    free(c->quota_reqs);
    free(c->quota_memo);
    free(c->events);
    free(c->events_tmp);
    free(c->none_last);
    free(c->pool_rank);
    free(c->pool_dsum);
    free(c->pool_sum);
    free(c->pool_left);
    free(c->doms);
    free(c->tmp);
    free(c->bnext);
    free(c->npool);
    free(c->nfree);
    free(c->ncap);
    for (int l = 0; l < SCHED_MAX_LEVELS; l++)
        free(c->dom_start[l]);
    free(c->order);
    free(c->slices);
    free(c->milli);
    free(c->specs);
    free(c->brief);
    free(c->nodes);
    free(c->pool_size_hist);
    free(c->pool_hist);
    free(c->pool_cool_s);
    free(c->pool_gpus_used);
    free(c->pools);
    mu_map_free(c->by_name);
    free(c);
}

int sched_cluster_level_count(const struct sched_cluster *c)
{
    return c->nlevels;
}

const char *sched_cluster_level_name(const struct sched_cluster *c, int level)
{
    if (level < 0 || level > c->nlevels)
        return NULL;
    return c->level_names[level];
}

int sched_cluster_level_find(const struct sched_cluster *c, const char *name)
{
    for (int l = 0; l <= c->nlevels; l++) {
        if (strcmp(c->level_names[l], name) == 0)
            return l;
    }
    return -1;
}

int sched_cluster_node_find(const struct sched_cluster *c, const char *name)
{
    void *v = mu_map_get(c->by_name, name);
    return v ? (int)((uintptr_t)v - 1) : -1;
}

/* Adds delta to the histogram bucket of node i, if it is eligible for new work. */
static void hist_adj(struct sched_cluster *c, int i, int delta)
{
    const struct sched_node *n = &c->nodes[i];
    if (sched_node_takes_work(n))
        c->pool_hist[(size_t)n->pool * SCHED_HIST_W + (size_t)n->gpus_free] += delta;
}

/* The same for the sizes (whole GPUs) of the nodes that take work: what the idle view sees. */
static void size_adj(struct sched_cluster *c, int i, int delta)
{
    const struct sched_node *n = &c->nodes[i];
    if (sched_node_takes_work(n))
        c->pool_size_hist[(size_t)n->pool * SCHED_HIST_W + (size_t)n->ngpus] += delta;
}

/* What the idle view sees changed: the pass's idle answers are stale (pass.c fits_idle). */
static void nodes_changed(struct sched_cluster *c)
{
    if (++c->nodes_gen == 0) {
        memset(c->idle_memo, 0, sizeof(c->idle_memo)); /* wrapped: old entries must not match */
        memset(c->none_key, 0, sizeof(c->none_key));
        c->nodes_gen = 1;
    }
}

/* realloc that keeps p (and notes the failure in *rc) when it cannot grow. */
static void *regrow(void *p, size_t count, size_t size, int *rc)
{
    void *q = realloc(p, count * size);
    if (!q) {
        *rc = -1;
        return p;
    }
    return q;
}

/* Grows every per-node array to cap entries; on failure the old capacity stays in force (the
 * arrays that did grow are only larger than needed). */
static int grow_nodes(struct sched_cluster *c, int cap, struct mu_err *err)
{
    size_t n = (size_t)cap;
    int rc = 0;
    c->nodes = regrow(c->nodes, n, sizeof(*c->nodes), &rc);
    c->brief = regrow(c->brief, n, sizeof(*c->brief), &rc);
    c->specs = regrow(c->specs, n, sizeof(*c->specs), &rc);
    c->slices = regrow(c->slices, n, sizeof(*c->slices), &rc);
    c->milli = regrow(c->milli, n, sizeof(*c->milli), &rc);
    c->order = regrow(c->order, n, sizeof(*c->order), &rc);
    c->ncap = regrow(c->ncap, n, sizeof(*c->ncap), &rc);
    c->nfree = regrow(c->nfree, n, sizeof(*c->nfree), &rc);
    c->npool = regrow(c->npool, n, sizeof(*c->npool), &rc);
    c->bnext = regrow(c->bnext, n, sizeof(*c->bnext), &rc);
    c->tmp = regrow(c->tmp, n, sizeof(*c->tmp), &rc);
    c->doms = regrow(c->doms, n, sizeof(*c->doms), &rc);
    for (int l = 0; l < c->nlevels; l++)
        c->dom_start[l] = regrow(c->dom_start[l], n + 1, sizeof(int), &rc);
    if (rc)
        return mu_errf(err, MU_E_NOMEM, "cluster: out of memory adding a node");
    c->cap_nodes = cap;
    return 0;
}

/* Node idx's gpus_free from its masks, and its brief (after any change to its GPUs or pool). */
static void node_free_set(struct sched_cluster *c, int idx)
{
    struct sched_node *n = &c->nodes[idx];
    n->gpus_free = __builtin_popcountll(n->gpus_all & ~n->gpus_used);
    c->brief[idx].pool = (int16_t)n->pool;
    c->brief[idx].gpus_free = (int16_t)n->gpus_free;
}

static int spec_check(const struct sched_cluster *c,
                      const struct sched_node_spec *spec,
                      struct mu_err *err)
{
    if (spec->pool < 0 || spec->pool >= c->npools)
        return mu_errf(err, MU_E_INVAL, "node '%s': unknown pool", spec->name);
    if (spec->ngpus < 0 || spec->ngpus > SCHED_MAX_GPUS_NODE)
        return mu_errf(err, MU_E_RANGE, "node '%s': %d GPUs, at most %d supported", spec->name,
                       spec->ngpus, SCHED_MAX_GPUS_NODE);
    if (spec->cpus < 0 || spec->memory_mb < 0)
        return mu_errf(err, MU_E_RANGE, "node '%s': negative CPUs or memory", spec->name);
    if (spec->nlabels != c->nlevels)
        return mu_errf(err, MU_E_INVAL, "node '%s': %d topology labels, the cluster has %d levels",
                       spec->name, spec->nlabels, c->nlevels);
    for (int l = 0; l < c->nlevels; l++) {
        if (!spec->labels[l][0])
            return mu_errf(err, MU_E_INVAL, "node '%s': missing topology label '%s'", spec->name,
                           c->level_names[l]);
    }
    for (int g = 0; g < spec->ngpus; g++) {
        if (spec->island[g] >= SCHED_MAX_GPUS_NODE)
            return mu_errf(err, MU_E_RANGE, "node '%s': GPU %d: island %d out of range", spec->name,
                           g, spec->island[g]);
    }
    {
        const char *bad = sched_slice_spec_invalid(c, spec);
        if (bad)
            return mu_errf(err, MU_E_INVAL, "node '%s': %s", spec->name, bad);
    }
    return 0;
}

/* Whether a and b have the same units (whole GPUs, MIG-mode GPUs, slices and their GPUs). */
static bool same_units(const struct sched_node_spec *a, const struct sched_node_spec *b)
{
    return a->ngpus == b->ngpus && memcmp(a->unit, b->unit, (size_t)a->ngpus) == 0
           && memcmp(a->parent, b->parent, (size_t)a->ngpus) == 0;
}

static bool same_labels(const struct sched_cluster *c,
                        const struct sched_node_spec *a,
                        const struct sched_node_spec *b)
{
    for (int l = 0; l < c->nlevels; l++) {
        if (strcmp(a->labels[l], b->labels[l]) != 0)
            return false;
    }
    return true;
}

int sched_cluster_node_add(struct sched_cluster *c,
                           const struct sched_node_spec *spec,
                           struct mu_err *err)
{
    struct sched_node *n;
    int idx;

    if (spec_check(c, spec, err) != 0)
        return -1;
    idx = sched_cluster_node_find(c, spec->name);
    if (idx >= 0) {
        n = &c->nodes[idx];
        if (n->gpus_used || n->cpus_used || n->memory_mb_used) {
            if (!same_units(&c->specs[idx], spec) || c->specs[idx].pool != spec->pool)
                return mu_errf(err, MU_E_STATE,
                               "node '%s' came back with a different pool, GPU count or MIG "
                               "slices while work is placed on it",
                               spec->name);
        }
        hist_adj(c, idx, -1);
        size_adj(c, idx, -1);
        if (!same_labels(c, &c->specs[idx], spec))
            c->topo_dirty = true;
        if (n->pool != spec->pool) {
            c->pool_gpus_used[n->pool] -= __builtin_popcountll(n->gpus_used & n->gpus_all);
            c->pool_gpus_used[spec->pool] += __builtin_popcountll(n->gpus_used & n->gpus_all);
        }
    } else {
        if (c->nnodes == c->cap_nodes
            && grow_nodes(c, c->cap_nodes ? c->cap_nodes * 2 : 16, err) != 0)
            return -1;
        /* The map keeps index + 1, so that NULL means absent. */
        if (mu_map_put(c->by_name, spec->name, (void *)(uintptr_t)(c->nnodes + 1), err) != 0)
            return -1;
        idx = c->nnodes++;
        n = &c->nodes[idx];
        memset(n, 0, sizeof(*n));
        memset(c->milli[idx], 0, sizeof(c->milli[idx]));
        c->topo_dirty = true;
    }
    c->specs[idx] = *spec;
    n->state = SCHED_NODE_READY;
    n->at_risk = false;
    n->gpus_all = sched_slice_node_set(c, idx); /* the whole GPUs; slices apart */
    n->ngpus = __builtin_popcountll(n->gpus_all);
    n->one_island = true;
    for (uint64_t m = n->gpus_all; m; m &= m - 1) {
        int g = __builtin_ctzll(m);
        n->one_island &= spec->island[g] == spec->island[__builtin_ctzll(n->gpus_all)];
    }
    n->cpus = spec->cpus;
    n->memory_mb = spec->memory_mb;
    n->pool = spec->pool;
    node_free_set(c, idx);
    hist_adj(c, idx, +1);
    size_adj(c, idx, +1);
    c->generation++;
    nodes_changed(c);
    return idx;
}

int sched_cluster_node_relabel(struct sched_cluster *c,
                               int node,
                               const char (*labels)[SCHED_NAME_MAX],
                               int nlabels,
                               struct mu_err *err)
{
    struct sched_node_spec *spec;
    bool changed = false;

    if (node < 0 || node >= c->nnodes)
        return mu_errf(err, MU_E_INVAL, "relabel: no node %d", node);
    spec = &c->specs[node];
    if (nlabels != c->nlevels)
        return mu_errf(err, MU_E_INVAL, "node '%s': %d topology labels, the cluster has %d levels",
                       spec->name, nlabels, c->nlevels);
    for (int l = 0; l < nlabels; l++) {
        size_t len = strnlen(labels[l], SCHED_NAME_MAX);
        if (len == 0 || len == SCHED_NAME_MAX)
            return mu_errf(err, MU_E_INVAL, "node '%s': topology label '%s' is %s", spec->name,
                           c->level_names[l], len ? "too long" : "empty");
    }
    for (int l = 0; l < nlabels; l++) {
        if (strcmp(spec->labels[l], labels[l]) == 0)
            continue;
        memcpy(spec->labels[l], labels[l], strlen(labels[l]) + 1);
        changed = true;
    }
    if (!changed)
        return 0;
    c->topo_dirty = true; /* the node's place in the label order, and the domains, change */
    c->generation++;
    nodes_changed(c);
    return 1;
}

int sched_cluster_node_count(const struct sched_cluster *c)
{
    return c->nnodes;
}

const struct sched_node_spec *sched_cluster_node_spec(const struct sched_cluster *c, int node)
{
    return &c->specs[node];
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
    bool took = sched_node_takes_work(&c->nodes[node]);

    if (c->nodes[node].state == s)
        return;
    hist_adj(c, node, -1);
    size_adj(c, node, -1);
    c->nodes[node].state = s;
    hist_adj(c, node, +1);
    size_adj(c, node, +1);
    c->generation++;
    if (sched_node_takes_work(&c->nodes[node]) != took)
        nodes_changed(c);
}

enum sched_node_state sched_cluster_node_state(const struct sched_cluster *c, int node)
{
    return c->nodes[node].state;
}

void sched_cluster_node_set_at_risk(struct sched_cluster *c, int node, bool at_risk)
{
    bool took = sched_node_takes_work(&c->nodes[node]);

    if (c->nodes[node].at_risk == at_risk)
        return;
    hist_adj(c, node, -1);
    size_adj(c, node, -1);
    c->nodes[node].at_risk = at_risk;
    hist_adj(c, node, +1);
    size_adj(c, node, +1);
    c->generation++;
    if (sched_node_takes_work(&c->nodes[node]) != took)
        nodes_changed(c);
}

bool sched_cluster_node_is_at_risk(const struct sched_cluster *c, int node)
{
    return c->nodes[node].at_risk;
}

int sched_cluster_node_gpus_free(const struct sched_cluster *c, int node)
{
    return c->nodes[node].gpus_free;
}

int sched_cluster_node_gpus_total(const struct sched_cluster *c, int node)
{
    return c->nodes[node].ngpus;
}

int sched_cluster_pool_gpus_used(const struct sched_cluster *c, int pool)
{
    return c->pool_gpus_used[pool];
}

void sched_cluster_pool_cooldown(struct sched_cluster *c, int pool, int64_t until_s)
{
    c->pool_cool_s[pool] = until_s;
    c->generation++;
}

int64_t sched_cluster_pool_cooldown_until(const struct sched_cluster *c, int pool)
{
    return c->pool_cool_s[pool];
}

uint64_t sched_cluster_generation(const struct sched_cluster *c)
{
    return c->generation;
}

void sched_cluster_commit(struct sched_cluster *c,
                          const struct sched_request *r,
                          const struct sched_slot *slots)
{
    for (int i = 0; i < r->tasks; i++) {
        int idx = slots[i].node;
        struct sched_node *n = &c->nodes[idx];
        if (r->gpu_milli > 0) { /* a share of a GPU (core/milli.c) */
            hist_adj(c, idx, -1);
            c->pool_gpus_used[n->pool] +=
                __builtin_popcountll(sched_milli_commit(c, idx, slots[i].gpus, r->gpu_milli));
            node_free_set(c, idx);
            n->cpus_used += r->cpus_per_task;
            n->memory_mb_used += r->memory_mb_per_task;
            hist_adj(c, idx, +1);
            continue;
        }
        assert((n->gpus_used & slots[i].gpus) == 0);
        assert((n->gpus_all & slots[i].gpus) == slots[i].gpus /* whole GPUs: slices untouched */
               || ((n->gpus_all | c->slices[idx].all) & slots[i].gpus) == slots[i].gpus);
        hist_adj(c, idx, -1);
        n->gpus_used |= slots[i].gpus;
        node_free_set(c, idx);
        n->cpus_used += r->cpus_per_task;
        n->memory_mb_used += r->memory_mb_per_task;
        c->pool_gpus_used[n->pool] += __builtin_popcountll(slots[i].gpus & n->gpus_all);
        hist_adj(c, idx, +1);
    }
}

void sched_cluster_release(struct sched_cluster *c,
                           const struct sched_request *r,
                           const struct sched_slot *slots)
{
    for (int i = 0; i < r->tasks; i++) {
        int idx = slots[i].node;
        struct sched_node *n = &c->nodes[idx];
        if (r->gpu_milli > 0) {
            hist_adj(c, idx, -1);
            c->pool_gpus_used[n->pool] -=
                __builtin_popcountll(sched_milli_release(c, idx, slots[i].gpus, r->gpu_milli));
            node_free_set(c, idx);
            n->cpus_used -= r->cpus_per_task;
            n->memory_mb_used -= r->memory_mb_per_task;
            hist_adj(c, idx, +1);
            continue;
        }
        assert((n->gpus_used & slots[i].gpus) == slots[i].gpus);
        hist_adj(c, idx, -1);
        n->gpus_used &= ~slots[i].gpus;
        node_free_set(c, idx);
        n->cpus_used -= r->cpus_per_task;
        n->memory_mb_used -= r->memory_mb_per_task;
        c->pool_gpus_used[n->pool] -= __builtin_popcountll(slots[i].gpus & n->gpus_all);
        hist_adj(c, idx, +1);
    }
    c->generation++;
}

/* ---- topology order ---- */

/* First level at which nodes a and b differ, or nlevels when their paths are equal. */
static int path_diff(const struct sched_cluster *c, int a, int b, int *cmp)
{
    for (int l = 0; l < c->nlevels; l++) {
        int d = strcmp(c->specs[a].labels[l], c->specs[b].labels[l]);
        if (d) {
            *cmp = d;
            return l;
        }
    }
    *cmp = (a > b) - (a < b);
    return c->nlevels;
}

/* True when node *a goes strictly before node *b in topology order (a total order). */
static bool path_less(const struct sched_cluster *c, const int *a, const int *b)
{
    int cmp;
    (void)path_diff(c, *a, *b, &cmp);
    return cmp < 0;
}

/* order_sort(c->order, c->tmp, c->nnodes, c): the nodes by path (sort.h). */
SCHED_SORT_DEFINE(order_sort, int, const struct sched_cluster *, path_less)

void sched_topo_refresh(struct sched_cluster *c)
{
    if (!c->topo_dirty)
        return;
    for (int i = 0; i < c->nnodes; i++)
        c->order[i] = i;
    order_sort(c->order, c->tmp, c->nnodes, c);
    for (int l = 0; l < c->nlevels; l++)
        c->ndom[l] = 0;
    for (int pos = 0; pos < c->nnodes; pos++) {
        int first = 0; /* the widest level at which this node starts a new domain */
        if (pos > 0) {
            int cmp;
            first = path_diff(c, c->order[pos - 1], c->order[pos], &cmp);
        }
        for (int l = first; l < c->nlevels; l++)
            c->dom_start[l][c->ndom[l]++] = pos;
    }
    for (int l = 0; l < c->nlevels; l++)
        c->dom_start[l][c->ndom[l]] = c->nnodes;
    c->topo_dirty = false;
}

int sched_topo_ndom(const struct sched_cluster *c, int level)
{
    if (level < 0)
        return 1;
    return level >= c->nlevels ? c->nnodes : c->ndom[level];
}

void sched_topo_range(const struct sched_cluster *c, int level, int d, int *start, int *end)
{
    if (level < 0) {
        *start = 0;
        *end = c->nnodes;
    } else if (level >= c->nlevels) {
        *start = d;
        *end = d + 1;
    } else {
        *start = c->dom_start[level][d];
        *end = c->dom_start[level][d + 1];
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * MIG slices as allocatable units (issue #17), part of the pure core: no I/O, no clock, no
 * allocation.
 *
 * A node's units are bits of the same 64-bit masks as whole GPUs (sched_node_spec.unit says what
 * each is).  Whole GPUs stay in sched_node.gpus_all, so the whole-GPU placement reads exactly
 * what it read before slices existed; the slices live apart, per node, in struct
 * sched_node_slices: one mask per profile the node has.  A GPU in MIG mode is in neither: it is
 * offered only through its slices, so a slice and its whole GPU never go to two tasks.
 *
 * A slice request is sized per node as free slices of its profile / slices per task, and the
 * packer (place.c) is the same as for whole GPUs.  Within a node the slices are taken best fit:
 * the GPU with the fewest free slices that still holds the task, so partly used GPUs fill up
 * before an empty one is touched (an empty GPU is what a larger profile, or a later
 * reconfiguration, needs).
 */
#include "core/internal.h"

#include <limits.h>
#include <string.h>

#include "common/mu_banned.h"

int sched_cluster_profile_find(const struct sched_cluster *c, const char *name)
{
    if (!name || !name[0])
        return 0;
    for (int id = 1; id <= c->nprofiles; id++) {
        if (strcmp(c->profiles[id], name) == 0)
            return id;
    }
    return 0;
}

int sched_cluster_profile_intern(struct sched_cluster *c, const char *name, struct mu_err *err)
{
    int id = sched_cluster_profile_find(c, name);
    size_t len = name ? strnlen(name, SCHED_PROFILE_MAX) : 0;

    if (id > 0)
        return id;
    if (len == 0 || len >= SCHED_PROFILE_MAX)
        return mu_errf(err, MU_E_INVAL, "MIG profile name: expected 1..%d bytes",
                       SCHED_PROFILE_MAX - 1);
    if (c->nprofiles >= SCHED_MAX_PROFILES)
        return mu_errf(err, MU_E_TOOBIG, "MIG profile '%s': the cluster knows %d already", name,
                       SCHED_MAX_PROFILES);
    id = ++c->nprofiles;
    memcpy(c->profiles[id], name, len + 1);
    return id;
}

const char *sched_cluster_profile_name(const struct sched_cluster *c, int id)
{
    return id >= 1 && id <= c->nprofiles ? c->profiles[id] : NULL;
}

int sched_cluster_profile_count(const struct sched_cluster *c)
{
    return c->nprofiles;
}

static uint64_t prof_mask(const struct sched_node_slices *s, int prof)
{
    for (int k = 0; k < s->nprof; k++) {
        if (s->prof[k] == prof)
            return s->mask[k];
    }
    return 0;
}

void sched_cluster_node_slices(
    const struct sched_cluster *c, int node, int id, int *free, int *total)
{
    uint64_t m = prof_mask(&c->slices[node], id);
    *total = __builtin_popcountll(m);
    *free = __builtin_popcountll(m & ~c->nodes[node].gpus_used);
}

bool sched_cluster_profile_present(const struct sched_cluster *c, int id)
{
    for (int i = 0; i < c->nnodes; i++) {
        if (id == 0 ? c->slices[i].all != 0 : prof_mask(&c->slices[i], id) != 0)
            return true;
    }
    return false;
}

const char *sched_slice_spec_invalid(const struct sched_cluster *c,
                                     const struct sched_node_spec *spec)
{
    uint8_t seen[SCHED_NODE_PROFILES];
    int nseen = 0;

    for (int u = 0; u < spec->ngpus; u++) {
        int kind = spec->unit[u];
        bool known = false;
        if (kind == SCHED_UNIT_GPU || kind == SCHED_UNIT_MIG_PARENT)
            continue;
        if (kind > c->nprofiles)
            return "a slice of an unknown MIG profile";
        if (spec->parent[u] >= spec->ngpus || spec->unit[spec->parent[u]] != SCHED_UNIT_MIG_PARENT)
            return "a slice whose parent is not a GPU in MIG mode";
        for (int k = 0; k < nseen && !known; k++)
            known = seen[k] == kind;
        if (known)
            continue;
        if (nseen == SCHED_NODE_PROFILES)
            return "more distinct MIG profiles than a node may have";
        seen[nseen++] = (uint8_t)kind;
    }
    return NULL;
}

uint64_t sched_slice_node_set(struct sched_cluster *c, int node)
{
    const struct sched_node_spec *spec = &c->specs[node];
    struct sched_node_slices *s = &c->slices[node];
    uint64_t whole = 0;

    memset(s, 0, sizeof(*s));
    for (int u = 0; u < spec->ngpus; u++) {
        uint64_t bit = UINT64_C(1) << u;
        int kind = spec->unit[u];
        int k = 0;
        if (kind == SCHED_UNIT_GPU) {
            whole |= bit;
            continue;
        }
        if (kind == SCHED_UNIT_MIG_PARENT)
            continue;
        while (k < s->nprof && s->prof[k] != kind)
            k++;
        if (k == s->nprof) {
            s->prof[k] = (uint8_t)kind;
            s->mask[k] = 0;
            s->nprof++;
        }
        s->mask[k] |= bit;
        s->all |= bit;
    }
    return whole;
}

uint64_t sched_slice_free(const struct sched_cluster *c, int node, int prof)
{
    const struct sched_node *n = &c->nodes[node];
    uint64_t m = prof_mask(&c->slices[node], prof);
    if (c->idle_view)
        return m;
    return m & ~(n->gpus_used | (c->holds_on ? n->gpus_held : 0));
}

bool sched_slice_big_enough(const struct sched_cluster *c, int node, int prof, int need)
{
    return __builtin_popcountll(prof_mask(&c->slices[node], prof)) >= need;
}

uint64_t sched_slice_pick(const struct sched_cluster *c, int node, uint64_t free, int need)
{
    const struct sched_node_spec *spec = &c->specs[node];
    const struct sched_node *n = &c->nodes[node];
    uint64_t any_free = c->slices[node].all;
    uint64_t take = 0;
    int nfree_any[SCHED_MAX_GPUS_NODE];  /* by parent unit: free slices of any profile */
    int nfree_prof[SCHED_MAX_GPUS_NODE]; /* by parent unit: free slices of this profile */
    bool used[SCHED_MAX_GPUS_NODE];      /* by parent unit: some slice of it is busy */
    uint64_t parents = 0;

    if (!c->idle_view)
        any_free &= ~(n->gpus_used | (c->holds_on ? n->gpus_held : 0));
    for (uint64_t m = c->slices[node].all; m; m &= m - 1) {
        int u = __builtin_ctzll(m);
        int p = spec->parent[u];
        if (!(parents & (UINT64_C(1) << p))) {
            parents |= UINT64_C(1) << p;
            nfree_any[p] = 0;
            nfree_prof[p] = 0;
            used[p] = false;
        }
        used[p] |= !(any_free & (UINT64_C(1) << u));
    }
    for (uint64_t m = any_free; m; m &= m - 1)
        nfree_any[spec->parent[__builtin_ctzll(m)]]++;
    for (uint64_t m = free; m; m &= m - 1)
        nfree_prof[spec->parent[__builtin_ctzll(m)]]++;
    while (need > 0) {
        int best = -1;
        bool best_holds = false;
        for (uint64_t m = parents; m; m &= m - 1) {
            int p = __builtin_ctzll(m);
            bool holds = nfree_prof[p] >= need;
            if (nfree_prof[p] == 0)
                continue;
            /* One GPU that holds the rest beats several; then a partly used GPU beats an
             * untouched one (an empty GPU is what larger work needs); then the fullest. */
            if (best < 0 || (holds && !best_holds)
                || (holds == best_holds && used[p] && !used[best])
                || (holds == best_holds && used[p] == used[best]
                    && nfree_any[p] < nfree_any[best])) {
                best = p;
                best_holds = holds;
            }
        }
        if (best < 0)
            break;
        for (uint64_t m = free; m && need > 0; m &= m - 1) {
            int u = __builtin_ctzll(m);
            if (spec->parent[u] != best)
                continue;
            take |= UINT64_C(1) << u;
            need--;
            nfree_prof[best]--;
            nfree_any[best]--;
        }
        nfree_prof[best] = 0; /* taken all it had, or done */
    }
    return take;
}

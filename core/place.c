/* SPDX-License-Identifier: MIT */
/*
 * Gang placement (docs/design.md §4), pure: a request and a cluster snapshot in, a whole assignment
 * or a reason out.  docs/placement.md has the long form.
 *
 * Capacity types are tried in the job's order and never mixed.  Within one type, pools are taken
 * in price tiers: first only the cheapest pools, then the next price, and so on, so a gang mixes
 * pools of one type only when the cheaper ones cannot hold it; pools in cool-down are skipped.
 * Topology: with a preferred level P (narrower than the required level L), the best-fit domain
 * of P that holds the whole gang wins; otherwise the best-fit domain of L (the whole cluster
 * without L) is the scope, and inside it the fewest domains of P are used.  Best fit = the fewest
 * free GPUs that still fit.  The packer then fills as few nodes as possible: while no node holds
 * all remaining tasks it takes the node that holds the most, then the node that holds the rest
 * most tightly.  A multi-GPU task takes the tightest NVLink island that holds it.
 *
 * One scan over the nodes per capacity type computes every node's task capacity; domains are
 * ranges of the topology order, so the rest is sums over arrays.  When the free-GPU histograms
 * show that not one task fits (a full pool, a cooling one), the failure is told without that
 * scan, from which pools have a node that could take a task (kept until the nodes change).  Nothing
 * is allocated: the scratch arrays live in the cluster.  Invariants: a GPU is never given twice;
 * either every task gets a slot or the result is 0; pool caps (max_gpus) hold.
 */
#include "core/internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define MAX_TASKS   1000000
#define PACK_BUCKET SCHED_MAX_GPUS_NODE /* top bucket of the packer: "this many tasks or more" */

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static bool type_matches(const struct sched_request *r, const struct sched_pool *p)
{
    return !r->gpu_type || !r->gpu_type[0] || strcmp(r->gpu_type, p->gpu_type) == 0;
}

static uint64_t node_free_mask(const struct sched_cluster *c, const struct sched_node *n)
{
    uint64_t busy = n->gpus_used | (c->holds_on ? n->gpus_held : 0);
    return c->idle_view ? n->gpus_all : n->gpus_all & ~busy;
}

/* Free GPUs of n as the placement sees them now (holds, idle view). */
static int node_free_gpus(const struct sched_cluster *c, const struct sched_node *n)
{
    if (c->idle_view)
        return n->ngpus;
    if (c->holds_on && n->gpus_held)
        return __builtin_popcountll(node_free_mask(c, n));
    return n->gpus_free;
}

/* How many tasks of r fit on n now (at most limit), ignoring pool caps; free: n's free GPUs as
 * the placement sees them (node_free_gpus), or its free slices of r's profile. */
static inline __attribute__((always_inline)) int node_fit(const struct sched_cluster *c,
                                                          const struct sched_node *n,
                                                          const struct sched_request *r,
                                                          int limit,
                                                          int free)
{
    int64_t k = limit;
    if (r->gpus_per_task > 0)
        k = min64(k, free / r->gpus_per_task);
    if (r->cpus_per_task > 0) {
        int64_t free_cpus = (int64_t)n->cpus - n->cpus_used - (c->holds_on ? n->cpus_held : 0);
        k = min64(k, (c->idle_view ? n->cpus : free_cpus) / r->cpus_per_task);
    }
    if (r->memory_mb_per_task > 0) {
        int64_t free_mb = n->memory_mb - n->memory_mb_used - (c->holds_on ? n->memory_mb_held : 0);
        k = min64(k, (c->idle_view ? n->memory_mb : free_mb) / r->memory_mb_per_task);
    }
    return k < 0 ? 0 : (int)k;
}

/* Whether node n could ever hold one task of r (size only); slices (prof > 0) are checked by the
 * caller, apart. */
static bool node_big_enough(const struct sched_node *n, const struct sched_request *r, int prof)
{
    return (prof > 0 || n->ngpus >= r->gpus_per_task) && n->cpus >= r->cpus_per_task
           && n->memory_mb >= r->memory_mb_per_task;
}

struct sched_request sched_request_make(int tasks, int gpus_per_task)
{
    struct sched_request r;
    memset(&r, 0, sizeof(r));
    r.tasks = tasks;
    r.gpus_per_task = gpus_per_task;
    r.ncapacity = 2;
    r.capacity[0] = SCHED_SPOT;
    r.capacity[1] = SCHED_ON_DEMAND;
    r.required_level = -1;
    r.preferred_level = -1;
    return r;
}

const char *sched_request_invalid(const struct sched_cluster *c, const struct sched_request *r)
{
    if (r->tasks < 1 || r->tasks > MAX_TASKS)
        return "invalid request: task count out of range";
    if (r->gpus_per_task < 0 || r->gpus_per_task > SCHED_MAX_GPUS_NODE)
        return "invalid request: GPUs per task out of range";
    if (r->cpus_per_task < 0 || r->memory_mb_per_task < 0)
        return "invalid request: negative CPUs or memory";
    if (r->ncapacity < 1 || r->ncapacity > 2)
        return "invalid request: capacity list";
    for (int i = 0; i < r->ncapacity; i++) {
        if (r->capacity[i] != SCHED_SPOT && r->capacity[i] != SCHED_ON_DEMAND)
            return "invalid request: capacity list";
    }
    if (r->required_level < -1 || r->required_level > c->nlevels || r->preferred_level < -1
        || r->preferred_level > c->nlevels)
        return "invalid request: topology level";
    if (r->navoid < 0 || r->navoid > SCHED_MAX_AVOID || (r->navoid > 0 && !r->avoid))
        return "invalid request: avoided nodes";
    if ((r->slice_profile | r->gpu_milli) == 0)
        return NULL; /* whole GPUs: the common case, checked */
    if (r->slice_profile < 0 || r->slice_profile > c->nprofiles
        || (r->slice_profile > 0 && r->gpus_per_task < 1))
        return "invalid request: MIG slice profile";
    if (r->gpu_milli < 0 || r->gpu_milli > SCHED_MILLI
        || (r->gpu_milli > 0 && (r->gpus_per_task != 1 || r->slice_profile > 0)))
        return "invalid request: gpu_milli";
    return NULL;
}

/* True when node is one the placement under way avoids (c->avoiding). */
static bool node_avoided(const struct sched_cluster *c, int node)
{
    const struct sched_request *r = c->avoiding;
    for (int i = 0; r && i < r->navoid; i++) {
        if (r->avoid[i] == node)
            return true;
    }
    return false;
}

/* Task capacity of pool p's nodes summed in sum, limited by the pool's cap. */
static int capped(const struct sched_cluster *c, int p, int sum)
{
    return sum < c->pool_left[p] ? sum : c->pool_left[p];
}

static bool in_tier(const struct sched_cluster *c, int pos, int tier)
{
    int rank = c->pool_rank[c->npool[pos]];
    return rank >= 0 && rank <= tier;
}

/* The largest domains a scan saw, for reasons. */
struct level_best {
    int tasks;    /* most tasks one domain holds, pool caps applied */
    int uncapped; /* the same without pool caps */
    int nodes;    /* nodes taking a task in the domain counted in tasks */
};

/* The failure remembers the largest domains any scan saw. */
static void fail_note_best(struct sched_fail *fail, const struct level_best *best)
{
    if (best->tasks > fail->best) {
        fail->best = best->tasks;
        fail->best_nodes = best->nodes;
    }
    if (best->uncapped > fail->best_uncapped)
        fail->best_uncapped = best->uncapped;
}

/*
 * Sizes the domains [d0, d1) of level within the tier and returns the best fit that holds
 * r->tasks, or -1.  *best gets the most tasks any domain holds (with and without pool caps) and
 * that domain's node count.  caps_bind: some pool's cap may bind, so sums go per pool.
 */
static int scan_level(struct sched_cluster *c,
                      const struct sched_request *r,
                      int level,
                      int d0,
                      int d1,
                      int tier,
                      bool caps_bind,
                      struct level_best *best)
{
    int chosen = -1;
    int64_t chosen_free = INT64_MAX;

    if (caps_bind)
        memset(c->pool_dsum, 0, (size_t)c->npools * sizeof(*c->pool_dsum));

    for (int d = d0; d < d1; d++) {
        int start;
        int end;
        int64_t tasks = 0;
        int64_t free_sum = 0;
        int64_t capped_tasks;
        int nodes = 0;
        sched_topo_range(c, level, d, &start, &end);
        for (int pos = start; pos < end; pos++) {
            if (!in_tier(c, pos, tier))
                continue;
            tasks += c->ncap[pos];
            free_sum += c->nfree[pos];
            nodes += c->ncap[pos] > 0;
            if (caps_bind)
                c->pool_dsum[c->npool[pos]] += c->ncap[pos];
        }
        capped_tasks = tasks;
        if (caps_bind) {
            capped_tasks = 0;
            for (int pos = start; pos < end; pos++) {
                int p = c->npool[pos];
                if (c->pool_dsum[p] >= 0 && in_tier(c, pos, tier)) {
                    capped_tasks += capped(c, p, c->pool_dsum[p]);
                    c->pool_dsum[p] = -1; /* counted; reset below */
                }
            }
            for (int pos = start; pos < end; pos++)
                c->pool_dsum[c->npool[pos]] = 0;
        }
        if (tasks > best->uncapped)
            best->uncapped = (int)min64(tasks, INT_MAX);
        if (capped_tasks > best->tasks) {
            best->tasks = (int)min64(capped_tasks, INT_MAX);
            best->nodes = nodes;
        }
        if (capped_tasks >= r->tasks && free_sum < chosen_free) {
            chosen = d;
            chosen_free = free_sum;
        }
    }
    return chosen;
}

/* GPUs for one task of gpt GPUs out of free: the tightest island that holds it, else the
 * fewest islands (largest first). */
static uint64_t pick_gpus(const struct sched_node_spec *s, bool one_island, uint64_t free, int gpt)
{
    uint64_t isl[SCHED_MAX_GPUS_NODE];
    uint64_t present = 0;
    uint64_t take = 0;
    int best = -1;
    int best_cnt = INT_MAX;
    int need = gpt;

    if (gpt == 0)
        return 0;
    if (one_island) {
        for (uint64_t m = free; m && need > 0; m &= m - 1, need--)
            take |= m & (~m + 1);
        return take;
    }
    for (uint64_t m = free; m; m &= m - 1) {
        int g = __builtin_ctzll(m);
        int i = s->island[g];
        if (!(present & (UINT64_C(1) << i))) {
            present |= UINT64_C(1) << i;
            isl[i] = 0;
        }
        isl[i] |= UINT64_C(1) << g;
    }
    for (uint64_t m = present; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        int cnt = __builtin_popcountll(isl[i]);
        if (cnt >= gpt && cnt < best_cnt) {
            best = i;
            best_cnt = cnt;
        }
    }
    if (best >= 0) {
        present = UINT64_C(1) << best;
    }
    while (need > 0 && present) {
        int big = -1;
        int big_cnt = -1;
        for (uint64_t m = present; m; m &= m - 1) {
            int i = __builtin_ctzll(m);
            if (__builtin_popcountll(isl[i]) > big_cnt) {
                big = i;
                big_cnt = __builtin_popcountll(isl[i]);
            }
        }
        if (big < 0)
            break;
        for (uint64_t m = isl[big]; m && need > 0; m &= m - 1, need--)
            take |= m & (~m + 1);
        present &= ~(UINT64_C(1) << big);
    }
    return take;
}

struct packer {
    int head[PACK_BUCKET + 1]; /* bucket b: positions whose nodes hold b tasks (top: b or more) */
    int top;                   /* min(tasks, PACK_BUCKET) */
};

static void bucket_push(struct sched_cluster *c, struct packer *k, int b, int pos)
{
    c->bnext[pos] = k->head[b];
    k->head[b] = pos;
}

/* take tasks of r on node: slots[0..take) get their GPUs, slices or shares of GPUs. */
static void pack_node(struct sched_cluster *c,
                      const struct sched_request *r,
                      int node,
                      int take,
                      struct sched_slot *slots)
{
    const struct sched_node *n = &c->nodes[node];
    uint64_t free;

    if (r->gpu_milli > 0) { /* shares: tasks may share a GPU */
        sched_milli_fill(c, node, r->gpu_milli, take, slots);
        return;
    }
    free =
        r->slice_profile > 0 ? sched_slice_free(c, node, r->slice_profile) : node_free_mask(c, n);
    for (int t = 0; t < take; t++) {
        uint64_t g = r->slice_profile > 0
                         ? sched_slice_pick(c, node, free, r->gpus_per_task)
                         : pick_gpus(&c->specs[node], n->one_island, free, r->gpus_per_task);
        free &= ~g;
        slots[t].node = node;
        slots[t].gpus = g;
    }
}

/*
 * Places every task of r on the tier's nodes in the given ranges of the order, as few nodes as
 * possible.  pool_dsum is the working copy of the pool caps.  Returns 1 with slots, else 0.
 */
static int pack(struct sched_cluster *c,
                const struct sched_request *r,
                int tier,
                const struct sched_dom *ranges,
                int nranges,
                struct sched_slot *slots)
{
    struct packer k;
    int remaining = r->tasks;
    int placed = 0;

    k.top = r->tasks < PACK_BUCKET ? r->tasks : PACK_BUCKET;
    for (int b = 0; b <= k.top; b++)
        k.head[b] = -1;
    for (int i = nranges - 1; i >= 0; i--) {
        for (int pos = ranges[i].end - 1; pos >= ranges[i].start; pos--) {
            if (c->ncap[pos] > 0 && in_tier(c, pos, tier))
                bucket_push(c, &k, c->ncap[pos] < k.top ? c->ncap[pos] : k.top, pos);
        }
    }
    for (int p = 0; p < c->npools; p++)
        c->pool_dsum[p] = c->pool_left[p];
    while (remaining > 0) {
        int want = remaining < k.top ? remaining : k.top;
        int b = -1;
        int pos;
        int eff;
        int eb;
        for (int i = want; i <= k.top && b < 0; i++) {
            if (k.head[i] >= 0)
                b = i;
        }
        for (int i = want - 1; i > 0 && b < 0; i--) {
            if (k.head[i] >= 0)
                b = i;
        }
        if (b < 0)
            return 0;
        pos = k.head[b];
        k.head[b] = c->bnext[pos];
        eff = c->ncap[pos];
        if (c->pool_left[c->npool[pos]] != INT_MAX && c->pool_dsum[c->npool[pos]] < eff)
            eff = c->pool_dsum[c->npool[pos]]; /* what the pool's cap still allows */
        eb = eff < k.top ? eff : k.top;
        if (eb < b) {
            if (eb > 0)
                bucket_push(c, &k, eb, pos); /* a pool cap shrank it: look again */
            continue;
        }
        {
            int node = c->order[pos];
            int take = eff < remaining ? eff : remaining;
            pack_node(c, r, node, take, &slots[placed]);
            placed += take;
            if (c->pool_left[c->nodes[node].pool] != INT_MAX)
                c->pool_dsum[c->nodes[node].pool] -= take;
            remaining -= take;
        }
    }
    return 1;
}

static int dom_cmp(const void *a, const void *b)
{
    const struct sched_dom *x = a;
    const struct sched_dom *y = b;
    if (x->tasks != y->tasks)
        return x->tasks > y->tasks ? -1 : 1;
    if (x->free != y->free)
        return x->free < y->free ? -1 : 1;
    return x->start - y->start;
}

/* Size of one range in the tier (tasks with pool caps per range, free GPUs). */
static void range_size(struct sched_cluster *c,
                       const struct sched_request *r,
                       int tier,
                       bool caps_bind,
                       int level,
                       int d,
                       struct sched_dom *out)
{
    struct level_best best = { 0, 0, 0 };
    int64_t free_sum = 0;
    sched_topo_range(c, level, d, &out->start, &out->end);
    (void)scan_level(c, r, level, d, d + 1, tier, caps_bind, &best);
    for (int pos = out->start; pos < out->end; pos++) {
        if (in_tier(c, pos, tier))
            free_sum += c->nfree[pos];
    }
    out->tasks = best.tasks;
    out->free = (int)min64(free_sum, INT_MAX);
}

/*
 * Inside the scope [lo, hi) of the order, the fewest domains of level P that hold r (largest
 * first, the last one the tightest that completes the gang), then packs them.
 */
static int pack_fewest(struct sched_cluster *c,
                       const struct sched_request *r,
                       int tier,
                       bool caps_bind,
                       int level,
                       int lo,
                       int hi,
                       struct sched_slot *slots)
{
    struct sched_dom scope = { lo, hi, 0, 0 };
    int nd = sched_topo_ndom(c, level);
    int d0 = 0;
    int m = 0;
    int64_t sum = 0;
    int k = 0;

    /* First domain of level starting at lo: binary search (domains nest in the scope). */
    for (int b = nd; d0 < b;) {
        int mid = d0 + (b - d0) / 2;
        int s;
        int e;
        sched_topo_range(c, level, mid, &s, &e);
        if (s < lo)
            d0 = mid + 1;
        else
            b = mid;
    }
    for (int d = d0; d < nd; d++) {
        struct sched_dom dom;
        range_size(c, r, tier, caps_bind, level, d, &dom);
        if (dom.start >= hi)
            break;
        if (dom.tasks > 0)
            c->doms[m++] = dom;
    }
    qsort(c->doms, (size_t)m, sizeof(*c->doms), dom_cmp);
    while (k < m && sum + c->doms[k].tasks < r->tasks)
        sum += c->doms[k++].tasks;
    if (k < m) {
        /* doms[k] completes the gang; a smaller one with less free may do it too. */
        int64_t need = r->tasks - sum;
        int pick = k;
        for (int j = k + 1; j < m && c->doms[j].tasks >= need; j++) {
            if (c->doms[j].free < c->doms[pick].free)
                pick = j;
        }
        struct sched_dom t = c->doms[k];
        c->doms[k] = c->doms[pick];
        c->doms[pick] = t;
        if (pack(c, r, tier, c->doms, k + 1, slots))
            return 1;
    }
    /* Shared pool caps made the per-domain sums too hopeful: pack the whole scope. */
    return pack(c, r, tier, &scope, 1, slots);
}

/* Tries one price tier of one capacity type; 1 with slots, or 0 (*best updated from the
 * required level's domains).  slots NULL: whether it fits, without packing (the packer places
 * every task whenever the sums say it can, and the preferred level never changes that). */
static int place_tier(struct sched_cluster *c,
                      const struct sched_request *r,
                      int tier,
                      bool caps_bind,
                      struct sched_slot *slots,
                      struct level_best *best)
{
    int lvl = r->required_level;
    int pref = r->preferred_level > lvl ? r->preferred_level : -1;
    int lo = 0;
    int hi = c->nnodes;
    int d;
    struct level_best b = { 0, 0, 0 };

    if (pref >= 0 && slots) {
        d = scan_level(c, r, pref, 0, sched_topo_ndom(c, pref), tier, caps_bind, &b);
        if (d >= 0) {
            struct sched_dom one = { 0, 0, 0, 0 };
            sched_topo_range(c, pref, d, &one.start, &one.end);
            if (pack(c, r, tier, &one, 1, slots))
                return 1;
        }
    }
    if (lvl >= 0) {
        b = (struct level_best){ 0, 0, 0 };
        d = scan_level(c, r, lvl, 0, sched_topo_ndom(c, lvl), tier, caps_bind, &b);
        if (b.tasks > best->tasks) {
            best->tasks = b.tasks;
            best->nodes = b.nodes;
        }
        if (b.uncapped > best->uncapped)
            best->uncapped = b.uncapped;
        if (d < 0)
            return 0;
        sched_topo_range(c, lvl, d, &lo, &hi);
    }
    if (!slots)
        return 1;
    if (pref >= 0 && pref < c->nlevels)
        return pack_fewest(c, r, tier, caps_bind, pref, lo, hi, slots);
    {
        struct sched_dom scope = { lo, hi, 0, 0 };
        return pack(c, r, tier, &scope, 1, slots);
    }
}

struct type_state {
    int ntiers;
    int tiers[SCHED_MAX_POOLS]; /* distinct pool ranks, ascending */
    bool any_node;              /* a ready node of the type that could hold a task */
    bool any_cooling;           /* such a node, but in a pool in cool-down */
    int cooling_pool;
};

/* Ranks the pools of capacity type cap for r (price tiers; -1 unusable, -2 cooling down). */
static void rank_pools(struct sched_cluster *c,
                       const struct sched_request *r,
                       enum sched_capacity cap,
                       int64_t now_s,
                       struct type_state *ts)
{
    ts->ntiers = 0;
    for (int p = 0; p < c->npools; p++) {
        const struct sched_pool *pool = &c->pools[p];
        int rank = 0;
        c->pool_rank[p] = -1;
        if (pool->capacity != cap || !type_matches(r, pool) || (r->gpu_milli > 0 && !pool->shared))
            continue;
        if (now_s < c->pool_cool_s[p]) {
            c->pool_rank[p] = -2;
            continue;
        }
        for (int q = 0; q < c->npools; q++) {
            const struct sched_pool *o = &c->pools[q];
            if (o->capacity == cap && type_matches(r, o) && now_s >= c->pool_cool_s[q]
                && (r->gpu_milli == 0 || o->shared) && o->price_per_hour < pool->price_per_hour)
                rank++;
        }
        c->pool_rank[p] = rank;
    }
    for (int p = 0; p < c->npools; p++) {
        int rank = c->pool_rank[p];
        int i = 0;
        if (rank < 0)
            continue;
        while (i < ts->ntiers && ts->tiers[i] < rank)
            i++;
        if (i < ts->ntiers && ts->tiers[i] == rank)
            continue;
        memmove(&ts->tiers[i + 1], &ts->tiers[i], (size_t)(ts->ntiers - i) * sizeof(int));
        ts->tiers[i] = rank;
        ts->ntiers++;
    }
}

/*
 * Sizes the node at order position pos for r: its task capacity and its free GPUs (slices of
 * the profile, milli of shares).  Inlined into three loops of size_nodes with prof and milli
 * constants where they can be, so the whole-GPU loop carries no test for slices or shares.
 * brief (whole GPUs, not the idle view): a node of another type, or one with no GPU free once
 * some node counted for any_node, is sized from its brief alone, as the rest would size it.
 */
static inline __attribute__((always_inline)) void size_node(struct sched_cluster *c,
                                                            const struct sched_request *r,
                                                            struct type_state *ts,
                                                            int pos,
                                                            int prof,
                                                            int milli,
                                                            bool brief)
{
    int node = c->order[pos];
    const struct sched_node *n;
    int rank;
    int free;
    int fit;
    if (brief) {
        struct sched_node_brief b = c->brief[node];
        rank = c->pool_rank[b.pool];
        if (rank == -1 || (rank >= 0 && b.gpus_free == 0 && ts->any_node)) {
            c->npool[pos] = b.pool;
            c->ncap[pos] = 0;
            c->nfree[pos] = 0;
            return;
        }
    }
    n = &c->nodes[node];
    rank = c->pool_rank[n->pool];
    c->npool[pos] = n->pool;
    c->ncap[pos] = 0;
    c->nfree[pos] = 0;
    if (rank == -1 || !sched_node_takes_work(n) || !node_big_enough(n, r, prof)
        || (prof > 0 && !sched_slice_big_enough(c, node, prof, r->gpus_per_task))
        || node_avoided(c, node))
        return;
    if (rank == -2) {
        ts->any_cooling = true;
        ts->cooling_pool = n->pool;
        return;
    }
    ts->any_node = true;
    if (milli > 0) {
        fit = sched_milli_fit(c, node, milli, r->tasks, &free);
        c->ncap[pos] = node_fit(c, n, r, fit, INT_MAX);
        c->nfree[pos] = free;
    } else {
        free = prof > 0               ? __builtin_popcountll(sched_slice_free(c, node, prof))
               : r->gpus_per_task > 0 ? node_free_gpus(c, n)
                                      : 0;
        c->ncap[pos] = node_fit(c, n, r, r->tasks, free);
        c->nfree[pos] = r->gpus_per_task > 0 ? free : c->ncap[pos];
    }
    c->pool_sum[n->pool] += c->ncap[pos];
}

/* One scan: every node's task capacity for r under the current pool ranks. */
static void size_nodes(struct sched_cluster *c,
                       const struct sched_request *r,
                       struct type_state *ts)
{
    const int prof = r->slice_profile; /* read once: the loop's stores may alias r */
    const int milli = r->gpu_milli;
    ts->any_node = false;
    ts->any_cooling = false;
    ts->cooling_pool = -1;
    for (int p = 0; p < c->npools; p++) {
        c->pool_sum[p] = 0;
        c->pool_dsum[p] = 0;
        c->pool_left[p] = INT_MAX;
        if (c->pools[p].max_gpus > 0 && r->gpus_per_task > 0 && prof == 0 && milli == 0) {
            int left = c->pools[p].max_gpus - (c->idle_view ? 0 : c->pool_gpus_used[p]);
            c->pool_left[p] = left > 0 ? left / r->gpus_per_task : 0;
        }
    }
    if (ts->ntiers == 0) {
        /* No pool of the type takes work now (none matches, or all cool down, as a spot pool
         * may for a whole reservation horizon): no node can hold a task.  Only the reason wants
         * the last node in order that would but for a cool-down: look from the end. */
        for (int p = 0; p < c->npools && !ts->any_cooling; p++)
            ts->any_cooling = c->pool_rank[p] == -2;
        for (int pos = c->nnodes - 1; ts->any_cooling && pos >= 0; pos--) {
            const struct sched_node *n = &c->nodes[c->order[pos]];
            if (c->pool_rank[n->pool] == -2 && sched_node_takes_work(n)
                && node_big_enough(n, r, prof)
                && (prof == 0 || sched_slice_big_enough(c, c->order[pos], prof, r->gpus_per_task))
                && !node_avoided(c, c->order[pos])) {
                ts->cooling_pool = n->pool;
                return;
            }
        }
        ts->any_cooling = false;
        return;
    }
    if (milli > 0) {
        for (int pos = 0; pos < c->nnodes; pos++)
            size_node(c, r, ts, pos, 0, milli, false);
    } else if (prof > 0) {
        for (int pos = 0; pos < c->nnodes; pos++)
            size_node(c, r, ts, pos, prof, 0, false);
    } else if (r->gpus_per_task > 0 && !c->idle_view) {
        for (int pos = 0; pos < c->nnodes; pos++)
            size_node(c, r, ts, pos, 0, 0, true); /* whole GPUs: no test for slices or shares */
    } else {
        for (int pos = 0; pos < c->nnodes; pos++)
            size_node(c, r, ts, pos, 0, 0, false);
    }
}

static int place_type(struct sched_cluster *c,
                      const struct sched_request *r,
                      enum sched_capacity cap,
                      int64_t now_s,
                      struct sched_slot *slots,
                      struct sched_fail *fail)
{
    struct type_state ts;
    struct level_best best = { 0, 0, 0 };

    rank_pools(c, r, cap, now_s, &ts);
    size_nodes(c, r, &ts);
    if (ts.any_cooling && fail->cooling_pool < 0) {
        fail->cooling_pool = ts.cooling_pool;
        fail->cooling_until_s = c->pool_cool_s[ts.cooling_pool];
    }
    if (!ts.any_node)
        return 0;
    fail->kind = SCHED_FAIL_CAPACITY;
    for (int i = 0; i < ts.ntiers; i++) {
        int tier = ts.tiers[i];
        int64_t total = 0;
        int64_t total_unc = 0;
        bool caps_bind = false;
        bool last = i == ts.ntiers - 1;
        for (int p = 0; p < c->npools; p++) {
            if (c->pool_rank[p] < 0 || c->pool_rank[p] > tier)
                continue;
            total += capped(c, p, c->pool_sum[p]);
            total_unc += c->pool_sum[p];
            if (c->pool_sum[p] > c->pool_left[p]) {
                caps_bind = true;
                if (fail->capped_pool < 0)
                    fail->capped_pool = p;
            }
        }
        if (total < r->tasks && !last)
            continue;
        if (total < r->tasks && r->required_level < 0) {
            best.tasks = (int)total;
            best.uncapped = (int)min64(total_unc, INT_MAX);
            break;
        }
        if (place_tier(c, r, tier, caps_bind, slots, &best))
            return 1;
        if (r->required_level < 0) {
            best.tasks = (int)total;
            best.uncapped = (int)min64(total_unc, INT_MAX);
        }
    }
    fail_note_best(fail, &best);
    return 0;
}

/*
 * Whether not one task of r (whole GPUs) fits on any node of its capacity types now: no node
 * that takes work in a pool of its types and GPU type that is not cooling down has
 * gpus_per_task free GPUs (the histograms, without pool caps, which can only lower it).  Then
 * every node's task capacity is 0, whatever its CPUs, memory, islands, holds or avoided nodes,
 * and so is every sum a placement makes.  False on the idle view.
 */
static bool none_fits(const struct sched_cluster *c, const struct sched_request *r, int64_t now_s)
{
    int gpt = r->gpus_per_task;
    if (c->idle_view || gpt <= 0 || r->slice_profile > 0 || r->gpu_milli > 0)
        return false;
    for (int p = 0; p < c->npools; p++) {
        const struct sched_pool *pool = &c->pools[p];
        const int *h = &c->pool_hist[(size_t)p * SCHED_HIST_W];
        bool cap = false;
        for (int i = 0; i < r->ncapacity; i++)
            cap |= pool->capacity == r->capacity[i];
        if (!cap || !type_matches(r, pool) || now_s < c->pool_cool_s[p])
            continue;
        for (int k = gpt; k < SCHED_HIST_W; k++) {
            if (h[k] > 0)
                return false;
        }
    }
    return true;
}

/*
 * For r's task size: the last position in order of a node of each pool that takes work and could
 * hold a task of r (-1: none), from c->none_last.  Which nodes take work, their sizes and the
 * order change only with nodes_gen, so one scan per size serves every placement until then.
 */
static const int *none_last(struct sched_cluster *c, const struct sched_request *r)
{
    size_t np = (size_t)c->npools + 1;
    int *last;
    int k;
    for (k = 0; k < SCHED_NONE_MEMO; k++) {
        const struct sched_none_key *key = &c->none_key[k];
        if (key->nodes_gen == c->nodes_gen && key->gpus_per_task == r->gpus_per_task
            && key->cpus_per_task == r->cpus_per_task
            && key->memory_mb_per_task == r->memory_mb_per_task)
            return &c->none_last[(size_t)k * np];
    }
    k = c->none_next;
    c->none_next = (k + 1) % SCHED_NONE_MEMO;
    c->none_key[k] = (struct sched_none_key){ .nodes_gen = c->nodes_gen,
                                              .gpus_per_task = r->gpus_per_task,
                                              .cpus_per_task = r->cpus_per_task,
                                              .memory_mb_per_task = r->memory_mb_per_task };
    last = &c->none_last[(size_t)k * np];
    for (int p = 0; p < c->npools; p++)
        last[p] = -1;
    for (int pos = 0; pos < c->nnodes; pos++) {
        const struct sched_node *n = &c->nodes[c->order[pos]];
        if (sched_node_takes_work(n) && node_big_enough(n, r, 0))
            last[n->pool] = pos;
    }
    return last;
}

/*
 * place_type's failure when none_fits: every sum is 0, so all it can tell is whether a node of
 * the type could take a task (any_node: the reason says "capacity", not "no nodes") and the pool
 * of the last node in order that could but for a cool-down (the reason's pool).  Both come from
 * none_last, where place_type sizes every node.  Same failure, field by field: best,
 * best_uncapped and best_nodes stay 0, no cap binds (a cap only lowers a sum of 0), and the
 * avoided nodes matter only to a placement that fits.
 */
static void place_type_none(struct sched_cluster *c,
                            const struct sched_request *r,
                            const int *last,
                            enum sched_capacity cap,
                            int64_t now_s,
                            struct sched_fail *fail)
{
    struct type_state ts;
    bool any_node = false;
    int cooling_pool = -1;

    rank_pools(c, r, cap, now_s, &ts);
    for (int p = 0; p < c->npools; p++) {
        if (last[p] < 0)
            continue;
        if (c->pool_rank[p] >= 0)
            any_node = true;
        else if (c->pool_rank[p] == -2 && (cooling_pool < 0 || last[p] > last[cooling_pool]))
            cooling_pool = p;
    }
    if (cooling_pool >= 0 && fail->cooling_pool < 0) {
        fail->cooling_pool = cooling_pool;
        fail->cooling_until_s = c->pool_cool_s[cooling_pool];
    }
    if (any_node)
        fail->kind = SCHED_FAIL_CAPACITY;
}

int sched_place_in(struct sched_cluster *c,
                   const struct sched_request *r,
                   int64_t now_s,
                   struct sched_slot *slots,
                   struct sched_fail *fail)
{
    memset(fail, 0, sizeof(*fail));
    fail->kind = SCHED_FAIL_NO_NODES;
    fail->capped_pool = -1;
    fail->cooling_pool = -1;
    sched_topo_refresh(c);
    if (none_fits(c, r, now_s)) {
        /* A full pool (or a cooling one) answers without sizing every node. */
        const int *last = none_last(c, r);
        for (int i = 0; i < r->ncapacity; i++)
            place_type_none(c, r, last, r->capacity[i], now_s, fail);
        if (fail->kind == SCHED_FAIL_NO_NODES && fail->cooling_pool >= 0)
            fail->kind = SCHED_FAIL_COOLING;
        return 0;
    }
    for (int i = 0; i < r->ncapacity; i++) {
        /* A retried gang goes elsewhere than where it failed when this capacity type allows;
         * whether it fits at all does not change, so the pass's memo stays true. */
        if (slots && r->navoid > 0) {
            struct sched_fail ignored = *fail;
            int placed;
            c->avoiding = r;
            placed = place_type(c, r, r->capacity[i], now_s, slots, &ignored);
            c->avoiding = NULL;
            if (placed)
                return 1;
        }
        if (place_type(c, r, r->capacity[i], now_s, slots, fail))
            return 1;
    }
    if (fail->kind == SCHED_FAIL_NO_NODES && fail->cooling_pool >= 0)
        fail->kind = SCHED_FAIL_COOLING;
    return 0;
}

int sched_place_idle_count(struct sched_cluster *c,
                           const struct sched_request *r,
                           struct sched_fail *fail)
{
    int gpt = r->gpus_per_task;

    if (!c->idle_view || gpt <= 0 || r->slice_profile > 0 || r->gpu_milli > 0
        || r->cpus_per_task != 0 || r->memory_mb_per_task != 0 || r->required_level >= 0)
        return -1;
    memset(fail, 0, sizeof(*fail));
    fail->kind = SCHED_FAIL_NO_NODES;
    fail->capped_pool = -1;
    fail->cooling_pool = -1;
    for (int i = 0; i < r->ncapacity; i++) {
        /* place_type on the idle view, where no pool cools down: a node that takes work holds
         * min(tasks, GPUs / gpus_per_task) tasks (no CPUs or memory asked), so the pools' sums
         * are the size histograms'; without a required level the tiers are sums only. */
        struct type_state ts;
        bool any_node = false;
        struct level_best best = { 0, 0, 0 };
        rank_pools(c, r, r->capacity[i], INT64_MAX, &ts);
        for (int p = 0; p < c->npools; p++) {
            const int *h = &c->pool_size_hist[(size_t)p * SCHED_HIST_W];
            int64_t sum = 0;
            c->pool_sum[p] = 0;
            c->pool_left[p] = INT_MAX;
            if (c->pools[p].max_gpus > 0)
                c->pool_left[p] = c->pools[p].max_gpus / gpt;
            if (c->pool_rank[p] < 0)
                continue;
            for (int k = gpt; k < SCHED_HIST_W; k++)
                sum += (int64_t)h[k] * min64(r->tasks, k / gpt);
            any_node |= sum > 0;
            c->pool_sum[p] = (int)min64(sum, INT_MAX);
        }
        if (!any_node)
            continue;
        fail->kind = SCHED_FAIL_CAPACITY;
        for (int t = 0; t < ts.ntiers; t++) {
            int64_t total = 0;
            int64_t total_unc = 0;
            for (int p = 0; p < c->npools; p++) {
                if (c->pool_rank[p] < 0 || c->pool_rank[p] > ts.tiers[t])
                    continue;
                total += capped(c, p, c->pool_sum[p]);
                total_unc += c->pool_sum[p];
                if (c->pool_sum[p] > c->pool_left[p] && fail->capped_pool < 0)
                    fail->capped_pool = p;
            }
            if (total >= r->tasks)
                return -1; /* it fits: place_tier's answer, not counted here */
            if (t < ts.ntiers - 1)
                continue;
            best.tasks = (int)total;
            best.uncapped = (int)min64(total_unc, INT_MAX);
        }
        fail_note_best(fail, &best);
    }
    return 0;
}

int64_t sched_place_bound(const struct sched_cluster *c,
                          const struct sched_request *r,
                          int64_t now_s)
{
    int64_t best = 0;
    int gpt = r->gpus_per_task;

    if (gpt == 0 || r->slice_profile > 0 || r->gpu_milli > 0)
        return INT64_MAX; /* the histograms count whole free GPUs: no bound */
    for (int i = 0; i < r->ncapacity; i++) {
        int64_t total = 0;
        for (int p = 0; p < c->npools; p++) {
            const struct sched_pool *pool = &c->pools[p];
            const int *h = &c->pool_hist[(size_t)p * SCHED_HIST_W];
            int64_t sum = 0;
            if (pool->capacity != r->capacity[i] || !type_matches(r, pool)
                || now_s < c->pool_cool_s[p])
                continue;
            for (int k = gpt; k < SCHED_HIST_W; k++)
                sum += (int64_t)h[k] * (k / gpt);
            if (pool->max_gpus > 0) {
                int left = pool->max_gpus - c->pool_gpus_used[p];
                sum = min64(sum, left > 0 ? left / gpt : 0);
            }
            total += sum;
        }
        if (total > best)
            best = total;
    }
    return best;
}

bool sched_place_may_fit(const struct sched_cluster *c,
                         const struct sched_request *r,
                         int64_t now_s,
                         struct sched_fail *fail)
{
    int64_t best;

    if (r->gpus_per_task == 0)
        return true;
    best = sched_place_bound(c, r, now_s);
    if (best >= r->tasks)
        return true;
    if (best == 0)
        return true; /* let the full search say why (no nodes, cool-down, caps) */
    memset(fail, 0, sizeof(*fail));
    fail->kind = SCHED_FAIL_CAPACITY;
    fail->best = (int)best;
    fail->best_uncapped = (int)best;
    fail->capped_pool = -1;
    fail->cooling_pool = -1;
    fail->global = true;
    return false;
}

int sched_place(struct sched_cluster *c,
                const struct sched_request *r,
                int64_t now_s,
                struct sched_slot *slots,
                char *reason,
                size_t reason_size)
{
    struct sched_fail fail;
    const char *bad = sched_request_invalid(c, r);

    if (reason_size)
        reason[0] = '\0';
    if (bad) {
        mu_strlcpy(reason, bad, reason_size);
        return 0;
    }
    if (sched_place_in(c, r, now_s, slots, &fail))
        return 1;
    sched_fail_format(c, r, &fail, now_s, reason, reason_size);
    return 0;
}

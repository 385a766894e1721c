/* SPDX-License-Identifier: MIT */
/*
 * The preemption planner's greedy search (preempt.c has the plan and the exact search): nodes
 * ordered by clearing cost per GPU within each domain of the required level, the best domains by
 * estimate tried, the minimal prefix of each found by binary search, then victims removed
 * costliest first while the rest still works.  It always runs, and bounds the exact search.
 */
#include "core/preempt_search.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* One (node, candidate) pair of the greedy's node grouping. */
struct pair {
    int node;
    int cand;
    int64_t gpus;
};

/* A node the greedy may clear: its candidates are pairs[first .. first + count). */
struct group {
    int node;
    int dom;
    int first;
    int count;
    int64_t free;  /* free GPUs now */
    int64_t held;  /* GPUs its candidates hold there */
    int64_t clear; /* Σ cost of its candidates */
    double ratio;  /* clear per GPU it could offer */
    int64_t max_priority;
    int64_t min_started_ms;
};

/* A candidate in the second greedy order: lost work per GPU it frees. */
struct ranked {
    double ratio;
    int64_t priority;
    int64_t started_ms;
    int cand;
};

struct dom_est {
    int dom;
    int gfirst; /* its groups: [gfirst, gend) */
    int gend;
    int64_t est; /* estimated cost */
};

static int pair_cmp(const void *a, const void *b)
{
    const struct pair *x = a;
    const struct pair *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return (x->cand > y->cand) - (x->cand < y->cand);
}

/* Within a node, candidates in the greedy's order: cheapest first, then the tie rules. */
static int pair_rank_cmp(const struct pctx *x, const struct pair *a, const struct pair *b)
{
    const struct cand *p = &x->cand[a->cand];
    const struct cand *q = &x->cand[b->cand];
    if (p->cost != q->cost)
        return p->cost < q->cost ? -1 : 1;
    if (p->priority != q->priority)
        return p->priority < q->priority ? -1 : 1;
    if (p->started_ms != q->started_ms)
        return p->started_ms > q->started_ms ? -1 : 1;
    return (a->cand > b->cand) - (a->cand < b->cand);
}

static int group_cmp(const void *a, const void *b)
{
    const struct group *x = a;
    const struct group *y = b;
    if (x->dom != y->dom)
        return x->dom < y->dom ? -1 : 1;
    if (x->ratio != y->ratio)
        return x->ratio < y->ratio ? -1 : 1;
    if (x->max_priority != y->max_priority)
        return x->max_priority < y->max_priority ? -1 : 1;
    if (x->min_started_ms != y->min_started_ms)
        return x->min_started_ms > y->min_started_ms ? -1 : 1;
    return (x->node > y->node) - (x->node < y->node);
}

static int ranked_cmp(const void *a, const void *b)
{
    const struct ranked *x = a;
    const struct ranked *y = b;
    if (x->ratio != y->ratio)
        return x->ratio < y->ratio ? -1 : 1;
    if (x->priority != y->priority)
        return x->priority < y->priority ? -1 : 1;
    if (x->started_ms != y->started_ms)
        return x->started_ms > y->started_ms ? -1 : 1;
    return (x->cand > y->cand) - (x->cand < y->cand);
}

static int est_cmp(const void *a, const void *b)
{
    const struct dom_est *x = a;
    const struct dom_est *y = b;
    if (x->est != y->est)
        return x->est < y->est ? -1 : 1;
    return (x->dom > y->dom) - (x->dom < y->dom);
}

/* Tasks of r that gpus free GPUs hold (GPU count only: an estimate, and a bound). */
static int64_t pot(const struct pctx *x, int64_t gpus)
{
    return x->r->gpus_per_task > 0 ? gpus / x->r->gpus_per_task : x->r->tasks;
}

struct greedy {
    struct pair *pairs;
    int npairs;
    struct group *groups;
    int ngroups;
    struct dom_est *doms;
    int ndoms;
    int *dom_of_node;      /* NULL: one scope */
    int64_t *base;         /* [ndom] tasks that fit in the domain's free GPUs now */
    int *seq;              /* [ncand] */
    struct ranked *ranked; /* [ncand] */
    int *nodeless;         /* [ncand] candidates that help through pool caps only */
    int nnodeless;
};

static void greedy_free(struct greedy *g)
{
    free(g->nodeless);
    free(g->ranked);
    free(g->seq);
    free(g->base);
    free(g->dom_of_node);
    free(g->doms);
    free(g->groups);
    free(g->pairs);
}

/* Scratch, each node's domain of the required level, and each domain's free task room. */
static int greedy_alloc(struct pctx *x, struct greedy *g, struct mu_err *err)
{
    struct sched_cluster *c = x->c;
    int level = x->r->required_level;
    int ndom = level < 0 ? 1 : sched_topo_ndom(c, level);
    size_t npairs = 0;

    for (int i = 0; i < x->ncand; i++)
        npairs += (size_t)x->v[x->cand[i].idx].req->tasks;
    g->pairs = malloc((npairs + 1) * sizeof(*g->pairs));
    g->groups = malloc((npairs + 1) * sizeof(*g->groups));
    g->doms = malloc((size_t)ndom * sizeof(*g->doms));
    g->base = calloc((size_t)ndom, sizeof(*g->base));
    g->seq = malloc(((size_t)x->ncand + 1) * sizeof(*g->seq));
    g->ranked = malloc(((size_t)x->ncand + 1) * sizeof(*g->ranked));
    g->nodeless = malloc(((size_t)x->ncand + 1) * sizeof(*g->nodeless));
    if (level >= 0)
        g->dom_of_node = calloc((size_t)c->nnodes + 1, sizeof(*g->dom_of_node));
    if (!g->pairs || !g->groups || !g->doms || !g->base || !g->seq || !g->ranked || !g->nodeless
        || (level >= 0 && !g->dom_of_node))
        return mu_errf(err, MU_E_NOMEM, "preemption plan: out of memory");
    if (level >= 0) {
        for (int d = 0; d < ndom; d++) {
            int start;
            int end;
            sched_topo_range(c, level, d, &start, &end);
            for (int pos = start; pos < end; pos++)
                g->dom_of_node[c->order[pos]] = d;
        }
    }
    for (int i = 0; i < c->nnodes; i++) {
        const struct sched_node *n = &c->nodes[i];
        int d = g->dom_of_node ? g->dom_of_node[i] : 0;
        if (sched_node_takes_work(n) && x->pool_ok[n->pool] && g->base[d] < x->r->tasks)
            g->base[d] += pot(x, n->gpus_free);
    }
    return 0;
}

/* The (node, candidate) pairs, a gang's tasks on one node merged; candidates with no slot on a
 * node r may use go to nodeless. */
static void greedy_pairs(struct pctx *x, struct greedy *g)
{
    struct sched_cluster *c = x->c;
    int w = 0;
    for (int i = 0; i < x->ncand; i++) {
        const struct sched_victim *v = &x->v[x->cand[i].idx];
        bool any = false;
        for (int t = 0; t < v->req->tasks; t++) {
            const struct sched_node *n = &c->nodes[v->slots[t].node];
            if (!sched_node_takes_work(n) || !x->pool_ok[n->pool])
                continue;
            g->pairs[g->npairs].node = v->slots[t].node;
            g->pairs[g->npairs].cand = i;
            g->pairs[g->npairs++].gpus = __builtin_popcountll(v->slots[t].gpus);
            any = true;
        }
        if (!any)
            g->nodeless[g->nnodeless++] = i;
    }
    qsort(g->pairs, (size_t)g->npairs, sizeof(*g->pairs), pair_cmp);
    for (int i = 0; i < g->npairs; i++) {
        if (w > 0 && g->pairs[w - 1].node == g->pairs[i].node
            && g->pairs[w - 1].cand == g->pairs[i].cand)
            g->pairs[w - 1].gpus += g->pairs[i].gpus;
        else
            g->pairs[w++] = g->pairs[i];
    }
    g->npairs = w;
}

/* Sorts a group's pairs: its candidates cheapest first (a node holds at most 64 of them). */
static void group_sort(const struct pctx *x, struct pair *pairs, int count)
{
    for (int a = 1; a < count; a++) {
        struct pair pv = pairs[a];
        int j = a;
        while (j > 0 && pair_rank_cmp(x, &pv, &pairs[j - 1]) < 0) {
            pairs[j] = pairs[j - 1];
            j--;
        }
        pairs[j] = pv;
    }
}

/* One group per node that could hold a task of r once cleared, by domain then clearing cost per
 * GPU (then the tie rules). */
static void greedy_groups(struct pctx *x, struct greedy *g)
{
    for (int i = 0; i < g->npairs;) {
        struct group *gr = &g->groups[g->ngroups];
        const struct sched_node *n = &x->c->nodes[g->pairs[i].node];
        gr->node = g->pairs[i].node;
        gr->dom = g->dom_of_node ? g->dom_of_node[gr->node] : 0;
        gr->first = i;
        gr->count = 0;
        gr->free = n->gpus_free;
        gr->held = 0;
        gr->clear = 0;
        gr->max_priority = INT64_MIN;
        gr->min_started_ms = INT64_MAX;
        for (; i < g->npairs && g->pairs[i].node == gr->node; i++) {
            const struct cand *cd = &x->cand[g->pairs[i].cand];
            gr->count++;
            gr->held += g->pairs[i].gpus;
            gr->clear = preempt_add_sat(gr->clear, cd->cost);
            gr->max_priority = cd->priority > gr->max_priority ? cd->priority : gr->max_priority;
            gr->min_started_ms =
                cd->started_ms < gr->min_started_ms ? cd->started_ms : gr->min_started_ms;
        }
        group_sort(x, &g->pairs[gr->first], gr->count);
        /* A node that cannot hold one task even when cleared is no use to r. */
        if (x->r->gpus_per_task > 0 && gr->free + gr->held < x->r->gpus_per_task)
            continue;
        gr->ratio = (double)gr->clear / (double)(gr->free + gr->held > 0 ? gr->free + gr->held : 1);
        g->ngroups++;
    }
    qsort(g->groups, (size_t)g->ngroups, sizeof(*g->groups), group_cmp);
}

/* Per domain: the cost of clearing its cheapest nodes until r's tasks fit by GPU count.  A
 * domain that cannot get there even with every candidate released is skipped: a bound. */
static void greedy_domains(struct pctx *x, struct greedy *g)
{
    for (int i = 0; i < g->ngroups;) {
        struct dom_est *e = &g->doms[g->ndoms];
        int64_t tasks = g->base[g->groups[i].dom];
        int64_t cost = 0;
        bool enough = tasks >= x->r->tasks;
        e->dom = g->groups[i].dom;
        e->gfirst = i;
        for (; i < g->ngroups && g->groups[i].dom == e->dom; i++) {
            const struct group *gr = &g->groups[i];
            if (enough)
                continue;
            tasks += pot(x, gr->free + gr->held) - pot(x, gr->free);
            cost = preempt_add_sat(cost, gr->clear);
            enough = tasks >= x->r->tasks;
        }
        e->gend = i;
        e->est = cost;
        if (enough)
            g->ndoms++;
    }
    qsort(g->doms, (size_t)g->ndoms, sizeof(*g->doms), est_cmp);
}

/* Builds the pairs, the node groups and the domain estimates. */
static int greedy_build(struct pctx *x, struct greedy *g, struct mu_err *err)
{
    if (greedy_alloc(x, g, err) != 0)
        return -1;
    greedy_pairs(x, g);
    greedy_groups(x, g);
    greedy_domains(x, g);
    return 0;
}

/* seq[0..len) fits when released: the length of its shortest prefix that fits. */
static int shortest_prefix(struct pctx *x, const int *seq, int len)
{
    int lo = 1;
    int hi = len;
    while (lo < hi && x->tests < PREEMPT_MAX_TESTS) {
        int mid = lo + (hi - lo) / 2;
        if (preempt_set_fits(x, seq, mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    return hi;
}

/* The greedy search; offers what it finds to b. */
int preempt_search_greedy(struct pctx *x, struct best *b, struct mu_err *err)
{
    struct greedy g;
    int done = 0;

    memset(&g, 0, sizeof(g));
    if (greedy_build(x, &g, err) != 0) {
        greedy_free(&g);
        return -1;
    }
    for (int i = 0; i < x->ncand; i++)
        x->cand[i].stamp = 0;
    for (int k = 0; k < g.ndoms && k < PREEMPT_DOMAINS_TRIED && done < PREEMPT_DOMAINS_DONE; k++) {
        const struct dom_est *e = &g.doms[k];
        struct key k1;
        struct key k2;
        int len = 0;
        int n1;
        int n2;
        if (x->tests >= PREEMPT_MAX_TESTS)
            break;
        /* Clear the cheapest nodes first, each node's candidates cheapest first. */
        for (int gi = e->gfirst; gi < e->gend; gi++) {
            const struct group *gr = &g.groups[gi];
            for (int p = gr->first; p < gr->first + gr->count; p++) {
                struct cand *cd = &x->cand[g.pairs[p].cand];
                if (cd->stamp != k + 1) {
                    cd->stamp = k + 1;
                    g.seq[len++] = g.pairs[p].cand;
                }
            }
        }
        for (int i = 0; i < g.nnodeless; i++)
            g.seq[len++] = g.nodeless[i];
        if (!preempt_set_fits(x, g.seq, len))
            continue;
        done++;
        n1 = shortest_prefix(x, g.seq, len);
        memcpy(x->work, g.seq, (size_t)n1 * sizeof(*g.seq));
        k1 = preempt_key_of(x, x->work, n1);
        /* The same victims by lost work per GPU freed, whatever their node: better when the
         * preemptor's tasks are small and the cheap victims are scattered.  Only the cheaper
         * of the two prefixes is pruned (pruning is most of the work). */
        for (int i = 0; i < len; i++) {
            const struct cand *cd = &x->cand[g.seq[i]];
            g.ranked[i].ratio = (double)cd->cost / (double)(cd->gpus > 0 ? cd->gpus : 1);
            g.ranked[i].priority = cd->priority;
            g.ranked[i].started_ms = cd->started_ms;
            g.ranked[i].cand = g.seq[i];
        }
        qsort(g.ranked, (size_t)len, sizeof(*g.ranked), ranked_cmp);
        for (int i = 0; i < len; i++)
            g.seq[i] = g.ranked[i].cand;
        n2 = shortest_prefix(x, g.seq, len);
        k2 = preempt_key_of(x, g.seq, n2);
        if (preempt_key_cmp(&k2, &k1) < 0) {
            memcpy(x->work, g.seq, (size_t)n2 * sizeof(*g.seq));
            n1 = n2;
        }
        preempt_best_offer(x, b, x->work, preempt_prune(x, x->work, n1));
    }
    greedy_free(&g);
    return 0;
}

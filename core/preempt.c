/* SPDX-License-Identifier: MIT */
/*
 * Preemption planning (docs/design.md §5), pure: which running gangs to stop so that a
 * higher-priority gang can start, losing the least work (Σ GPUs x time since the newest checkpoint
 * or start).
 *
 * The placement rules are not re-modelled here: a victim set is judged by releasing it in the
 * cluster itself, asking sched_place_in, and committing it back (commit and release are exact
 * inverses; the generation counter is restored at the end), so topology, capacity order, GPU
 * type, caps and cool-downs hold by construction.  Feasibility only grows with the set, which
 * the search uses twice: an infeasible set condemns all its subsets, and a prefix of a greedy
 * order can be binary-searched.
 *
 * Search: a greedy pass always runs (preempt_greedy.c: nodes ordered by clearing cost per GPU
 * within each domain of the required level, the best domains by estimate tried, minimal prefix
 * by binary search, then victims removed costliest first while the rest still works).  With at most
 * SCHED_PREEMPT_EXACT_MAX candidates every subset cheaper than the greedy answer is then tested
 * in order of cost, so the first that fits is the optimum.  Every step counts placements
 * against PREEMPT_MAX_TESTS, which bounds the work whatever the input.
 */
#include "core/internal.h"
#include "core/preempt_search.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define AGE_MAX_MS       ((int64_t)1 << 36) /* lost time is clamped here (2 years) */
#define VICTIM_TASKS_MAX 1000000

int64_t sched_preempt_lost_gpu_ms(const struct sched_victim *v, int64_t now_ms)
{
    int64_t since = v->started_ms;
    int64_t age;
    if (v->checkpoint_ms > since)
        since = v->checkpoint_ms;
    if (now_ms <= since || !v->req || v->req->tasks < 1 || v->req->gpus_per_task < 1)
        return 0;
    age = now_ms - since;
    if (age < 0 || age > AGE_MAX_MS) /* age < 0: the subtraction wrapped */
        age = AGE_MAX_MS;
    /* tasks <= VICTIM_TASKS_MAX and gpus <= 64: at most 2^26 GPUs x 2^36 ms, no overflow. */
    return (int64_t)v->req->tasks * v->req->gpus_per_task * age;
}

/* preempt_fits_without without packing: the search wants the answer, not the place. */
static bool fits_without(struct pctx *x, const int *list, int n, int64_t t_s)
{
    return preempt_fits_without(x, list, n, t_s, NULL);
}

static int key_qcmp(const void *a, const void *b)
{
    return preempt_key_cmp(a, b);
}

/* ---- exact ---- */

/* Every subset ranked below the best so far, tested in rank order: the first that fits is the
 * optimum.  A subset of a set that failed fails too, and so does one without enough GPUs. */
static int search_exact(struct pctx *x, struct best *b, struct mu_err *err)
{
    uint32_t full = (uint32_t)1 << x->ncand;
    struct key *keys = malloc((size_t)full * sizeof(*keys));
    struct key *order = malloc((size_t)full * sizeof(*order));
    uint8_t *bad = calloc((size_t)full, 1);
    size_t n = 0;
    int rc = -1;

    if (!keys || !order || !bad) {
        mu_errf(err, MU_E_NOMEM, "preemption plan: out of memory");
        goto out;
    }
    memset(&keys[0], 0, sizeof(keys[0]));
    keys[0].max_priority = INT64_MIN;
    keys[0].min_started_ms = INT64_MAX;
    for (uint32_t m = 1; m < full; m++) {
        const struct cand *cd = &x->cand[__builtin_ctz(m)];
        struct key k = keys[m & (m - 1)];
        k.cost = preempt_add_sat(k.cost, cd->cost);
        k.gpus += cd->gpus;
        k.max_priority = cd->priority > k.max_priority ? cd->priority : k.max_priority;
        k.min_started_ms = cd->started_ms < k.min_started_ms ? cd->started_ms : k.min_started_ms;
        k.n++;
        k.mask = m;
        keys[m] = k;
        if (k.gpus + x->free_gpus >= x->need_gpus
            && (!b->found || preempt_key_cmp(&k, &b->key) < 0))
            order[n++] = k;
    }
    qsort(order, n, sizeof(*order), key_qcmp);
    for (size_t i = 0; i < n; i++) {
        uint32_t m = order[i].mask;
        int len = 0;
        if (bad[m])
            continue;
        if (x->tests >= PREEMPT_MAX_TESTS) {
            rc = 0; /* out of budget: keep what the greedy found, not proven */
            goto out;
        }
        for (int j = 0; j < x->ncand; j++) {
            if (m & ((uint32_t)1 << j))
                x->work[len++] = j;
        }
        if (preempt_set_fits(x, x->work, len)) {
            preempt_best_offer(x, b, x->work, len);
            break;
        }
        for (uint32_t s = m;; s = (s - 1) & m) {
            bad[s] = 1;
            if (s == 0)
                break;
        }
    }
    rc = 1; /* everything ranked below the answer failed */
out:
    free(bad);
    free(order);
    free(keys);
    return rc;
}

/* ---- waiting ---- */

struct wevent {
    int64_t t_s;
    int gang; /* victim index, or -1 for a cool-down's end */
};

static int wevent_cmp(const void *a, const void *b)
{
    const struct wevent *x = a;
    const struct wevent *y = b;
    if (x->t_s != y->t_s)
        return x->t_s < y->t_s ? -1 : 1;
    return (x->gang > y->gang) - (x->gang < y->gang);
}

/*
 * The earliest time <= limit_s at which r fits without preemption, as running gangs end by their
 * end_s and cool-downs expire: 1 with *at_s, 0 when not by limit_s, -1 on no memory.  The
 * search releases gangs in end order in the cluster and commits them back.
 */
static int wait_until(struct pctx *x, int64_t limit_s, int64_t *at_s, struct mu_err *err)
{
    struct sched_cluster *c = x->c;
    struct wevent *ev = malloc(((size_t)x->nv + (size_t)c->npools + 1) * sizeof(*ev));
    int *gangs = malloc(((size_t)x->nv + 1) * sizeof(*gangs));
    int nev = 0;
    int ngang = 0;
    int lo = 1;
    int hi;
    int rc = -1;

    if (!ev || !gangs) {
        mu_errf(err, MU_E_NOMEM, "preemption plan: out of memory");
        goto out;
    }
    for (int i = 0; i < x->nv; i++) {
        if (x->v[i].end_s <= limit_s) {
            ev[nev].t_s = x->v[i].end_s > x->now_s ? x->v[i].end_s : x->now_s;
            ev[nev++].gang = i;
        }
    }
    for (int p = 0; p < c->npools; p++) {
        if (c->pool_cool_s[p] > x->now_s && c->pool_cool_s[p] <= limit_s) {
            ev[nev].t_s = c->pool_cool_s[p];
            ev[nev++].gang = -1;
        }
    }
    qsort(ev, (size_t)nev, sizeof(*ev), wevent_cmp);
    rc = 0;
    if (nev == 0)
        goto out;
    /* Gangs released by event k: the gang events among ev[0..k), in order. */
    for (int i = 0; i < nev; i++) {
        if (ev[i].gang >= 0)
            gangs[ngang++] = ev[i].gang;
    }
    if (!fits_without(x, gangs, ngang, ev[nev - 1].t_s))
        goto out;
    hi = nev;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int ng = 0;
        for (int i = 0; i < mid; i++)
            ng += ev[i].gang >= 0;
        if (fits_without(x, gangs, ng, ev[mid - 1].t_s))
            hi = mid;
        else
            lo = mid + 1;
    }
    *at_s = ev[hi - 1].t_s;
    rc = 1;
out:
    free(gangs);
    free(ev);
    return rc;
}

/* ---- the plan ---- */

static int check_args(const struct sched_cluster *c,
                      const struct sched_request *r,
                      const struct sched_victim *victims,
                      int nvictims,
                      const struct sched_preempt_plan *plan,
                      struct mu_err *err)
{
    if (!c || !r || !plan || !plan->slots || nvictims < 0 || (nvictims > 0 && !victims)
        || (nvictims > 0 && !plan->victims))
        return mu_errf(err, MU_E_INVAL, "preemption plan: bad arguments");
    for (int i = 0; i < nvictims; i++) {
        const struct sched_victim *v = &victims[i];
        if (!v->req || !v->slots || v->req->tasks < 1 || v->req->tasks > VICTIM_TASKS_MAX
            || v->req->gpus_per_task < 0 || v->req->gpus_per_task > SCHED_MAX_GPUS_NODE
            || v->grace_s < 0)
            return mu_errf(err, MU_E_INVAL, "preemption plan: running gang %d: bad request", i);
    }
    return 0;
}

/* Every slot committed, and no GPU held by two gangs: release and commit rely on it. */
static int check_slots(const struct sched_cluster *c,
                       const struct sched_victim *victims,
                       int nvictims,
                       struct mu_err *err)
{
    uint64_t *seen = calloc((size_t)c->nnodes + 1, sizeof(*seen));
    int rc = -1;
    if (!seen)
        return mu_errf(err, MU_E_NOMEM, "preemption plan: out of memory");
    for (int i = 0; i < nvictims; i++) {
        for (int t = 0; t < victims[i].req->tasks; t++) {
            const struct sched_slot *s = &victims[i].slots[t];
            if (s->node < 0 || s->node >= c->nnodes) {
                mu_errf(err, MU_E_INVAL, "preemption plan: running gang %d: unknown node %d", i,
                        s->node);
                goto out;
            }
            if ((c->nodes[s->node].gpus_used & s->gpus) != s->gpus) {
                mu_errf(err, MU_E_STATE,
                        "preemption plan: running gang %d: GPUs on node '%s' are not committed", i,
                        c->specs[s->node].name);
                goto out;
            }
            if (victims[i].req->gpu_milli > 0)
                continue; /* shares of a GPU: several gangs hold its bit (core/milli.c) */
            if (seen[s->node] & s->gpus) {
                mu_errf(err, MU_E_STATE,
                        "preemption plan: running gang %d: GPUs on node '%s' held by two gangs", i,
                        c->specs[s->node].name);
                goto out;
            }
            seen[s->node] |= s->gpus;
        }
    }
    rc = 0;
out:
    free(seen);
    return rc;
}

static bool type_matches(const struct sched_request *r, const struct sched_pool *p)
{
    return !r->gpu_type || !r->gpu_type[0] || strcmp(r->gpu_type, p->gpu_type) == 0;
}

/* Whether releasing v could help r: a GPU slot on a node r may use, or room under a cap. */
static bool victim_useful(const struct pctx *x, const struct sched_victim *v)
{
    for (int t = 0; t < v->req->tasks; t++) {
        const struct sched_node *n = &x->c->nodes[v->slots[t].node];
        if (!x->pool_ok[n->pool])
            continue;
        if (sched_node_takes_work(n) || x->c->pools[n->pool].max_gpus > 0)
            return true;
    }
    return false;
}

static int64_t victim_usable_gpus(const struct pctx *x, const struct sched_victim *v)
{
    int64_t g = 0;
    for (int t = 0; t < v->req->tasks; t++) {
        const struct sched_node *n = &x->c->nodes[v->slots[t].node];
        if (sched_node_takes_work(n) && x->pool_ok[n->pool])
            g += __builtin_popcountll(v->slots[t].gpus);
    }
    return g;
}

static void pools_usable(struct pctx *x)
{
    for (int p = 0; p < x->c->npools; p++) {
        const struct sched_pool *pool = &x->c->pools[p];
        bool cap = false;
        for (int i = 0; i < x->r->ncapacity; i++)
            cap |= x->r->capacity[i] == pool->capacity;
        x->pool_ok[p] = cap && type_matches(x->r, pool) && x->now_s >= x->c->pool_cool_s[p];
    }
    x->free_gpus = 0;
    for (int i = 0; i < x->c->nnodes; i++) {
        const struct sched_node *n = &x->c->nodes[i];
        if (sched_node_takes_work(n) && x->pool_ok[n->pool])
            x->free_gpus += n->gpus_free;
    }
    x->need_gpus = (int64_t)x->r->tasks * x->r->gpus_per_task;
}

/* Reason when no eligible set works: too young, or not enough lower-priority preemptible gangs. */
static void no_plan_reason(
    int64_t min_runtime_s, bool young_fits, int nhigher, int nfixed, char *reason)
{
    size_t len;
    if (young_fits) {
        (void)mu_snprintf(reason, SCHED_REASON_MAX, "victims too young (min_runtime_s %lld)",
                          (long long)min_runtime_s);
        return;
    }
    mu_strlcpy(reason, "no lower-priority preemptible gangs would free enough GPUs",
               SCHED_REASON_MAX);
    len = strlen(reason);
    if (nhigher || nfixed)
        (void)mu_snprintf(reason + len, SCHED_REASON_MAX - len,
                          " (%d in the way at equal or higher priority, %d not preemptible)",
                          nhigher, nfixed);
}

static void pctx_release(struct pctx *x)
{
    free(x->best.set);
    free(x->young);
    free(x->work2);
    free(x->work);
    free(x->vbuf);
    free(x->pool_ok);
    free(x->cand);
}

static int pctx_init(struct pctx *x,
                     struct sched_cluster *c,
                     const struct sched_request *r,
                     int64_t now_ms,
                     const struct sched_victim *victims,
                     int nvictims,
                     struct sched_slot *slots,
                     struct mu_err *err)
{
    size_t n = (size_t)nvictims + 1;
    memset(x, 0, sizeof(*x));
    x->c = c;
    x->r = r;
    x->now_ms = now_ms;
    x->now_s = now_ms / 1000;
    x->v = victims;
    x->nv = nvictims;
    x->slots = slots;
    x->cand = calloc(n, sizeof(*x->cand));
    x->pool_ok = calloc((size_t)c->npools + 1, sizeof(*x->pool_ok));
    x->vbuf = calloc(n, sizeof(*x->vbuf));
    x->work = calloc(n, sizeof(*x->work));
    x->work2 = calloc(n, sizeof(*x->work2));
    x->young = calloc(n, sizeof(*x->young));
    x->best.set = calloc(n, sizeof(*x->best.set));
    if (!x->cand || !x->pool_ok || !x->vbuf || !x->work || !x->work2 || !x->young || !x->best.set) {
        pctx_release(x);
        mu_errf(err, MU_E_NOMEM, "preemption plan: out of memory");
        return -1;
    }
    return 0;
}

/* Sorts the gangs that could help r: candidates, and counts of those that may not be taken. */
static void classify(struct pctx *x, int64_t priority, int min_runtime_s)
{
    for (int i = 0; i < x->nv; i++) {
        const struct sched_victim *v = &x->v[i];
        struct cand *cd;
        if (!victim_useful(x, v))
            continue;
        if (v->priority >= priority && !v->reclaimable) {
            x->nhigher++;
            continue;
        }
        if (!v->preemptible) {
            x->nfixed++;
            continue;
        }
        if (x->now_ms - v->started_ms < (int64_t)min_runtime_s * 1000) {
            x->young[x->nyoung++] = i; /* kept for the "too young" test */
            continue;
        }
        cd = &x->cand[x->ncand++];
        cd->idx = i;
        cd->cost = sched_preempt_lost_gpu_ms(v, x->now_ms);
        cd->priority = v->priority;
        cd->started_ms = v->started_ms;
        cd->gpus = victim_usable_gpus(x, v);
        cd->stamp = 0;
    }
}

/* 1 when releasing every candidate lets r fit; else 0 with the reason (and, when too-young
 * victims would, plan->retry_at_ms: when the first of them comes of age). */
static int all_fit(struct pctx *x, int min_runtime_s, struct sched_preempt_plan *plan)
{
    bool young_fits = false;
    for (int i = 0; i < x->ncand; i++)
        x->work[i] = i;
    if (x->ncand > 0 && preempt_set_fits(x, x->work, x->ncand))
        return 1;
    if (x->nyoung > 0) {
        int64_t first = INT64_MAX;
        for (int i = 0; i < x->nyoung; i++) {
            int64_t at = x->v[x->young[i]].started_ms + (int64_t)min_runtime_s * 1000;
            first = at < first ? at : first;
        }
        for (int i = 0; i < x->ncand; i++)
            x->young[x->nyoung + i] = x->cand[i].idx;
        /* x->young stays x's (pctx_release frees it): the analyzer, which cannot see into
         * preempt_set.c, takes its const passing for a leak. */
        // NOLINTNEXTLINE(clang-analyzer-unix.Malloc)
        young_fits = fits_without(x, x->young, x->nyoung + x->ncand, x->now_s);
        if (young_fits)
            plan->retry_at_ms = first;
    }
    no_plan_reason(min_runtime_s, young_fits, x->nhigher, x->nfixed, plan->reason);
    return 0;
}

/* The searches, best first: the full set, the greedy, then the exact one when it is small.
 * Returns 0 (x->best filled, *exact set) or -1 with err. */
static int search(struct pctx *x, bool *exact, struct mu_err *err)
{
    struct best *b = &x->best;
    preempt_best_offer(x, b, x->work, x->ncand); /* all_fit left 0..ncand-1 in work: it fits */
    if (preempt_search_greedy(x, b, err) != 0)
        return -1;
    *exact = false;
    if (x->ncand <= SCHED_PREEMPT_EXACT_MAX) {
        int ex = search_exact(x, b, err);
        if (ex < 0)
            return -1;
        *exact = ex == 1;
    }
    if (b->key.n == x->ncand && x->ncand > 1 && !*exact) {
        /* Nothing better was found: at least drop the victims that are not needed. */
        memcpy(x->work, b->set, (size_t)b->key.n * sizeof(*b->set));
        b->found = false;
        preempt_best_offer(x, b, x->work, preempt_prune(x, x->work, b->key.n));
    }
    return 0;
}

/* The waiting rule: 1 (and the reason) when r would start without preemption by ready_s, 0
 * when preempting is sooner, -1 on no memory. */
static int waiting_wins(struct pctx *x,
                        int64_t max_grace,
                        struct sched_preempt_plan *plan,
                        struct mu_err *err)
{
    char in[24];
    char grace[24];
    int64_t at_s = 0;
    int64_t ready_s = x->now_s > INT64_MAX - max_grace ? INT64_MAX : x->now_s + max_grace;
    int w;
    if (ready_s <= x->now_s)
        return 0;
    w = wait_until(x, ready_s, &at_s, err);
    if (w != 1)
        return w;
    mu_duration_format(at_s - x->now_s, in, sizeof(in));
    mu_duration_format(max_grace, grace, sizeof(grace));
    plan->est_start_s = at_s;
    (void)mu_snprintf(plan->reason, sizeof(plan->reason),
                      "will fit in %s without preemption (victims would need up to %s to stop)", in,
                      grace);
    return 1;
}

/* Fills the plan from x->best: victims ascending, the preemptor's slots.  0 or -1. */
static int plan_fill(struct pctx *x,
                     int64_t max_grace,
                     struct sched_preempt_plan *plan,
                     struct mu_err *err)
{
    const struct best *b = &x->best;
    char in[24];
    for (int i = 0; i < b->key.n; i++) {
        int v = x->cand[b->set[i]].idx;
        int j = i;
        while (j > 0 && plan->victims[j - 1] > v) {
            plan->victims[j] = plan->victims[j - 1];
            j--;
        }
        plan->victims[j] = v;
    }
    if (!preempt_fits_without(x, plan->victims, b->key.n, x->now_s, x->slots)) {
        /* Cannot happen: the same set fitted during the search and nothing changed since. */
        return mu_errf(err, MU_E_STATE, "preemption plan: the chosen victims no longer free room");
    }
    plan->nvictims = b->key.n;
    plan->lost_gpu_ms = b->key.cost;
    plan->ready_s = x->now_s > INT64_MAX - max_grace ? INT64_MAX : x->now_s + max_grace;
    mu_duration_format(max_grace, in, sizeof(in));
    (void)mu_snprintf(plan->reason, sizeof(plan->reason),
                      "preempting %d gang%s losing %.1f GPU-seconds; room in %s", b->key.n,
                      b->key.n == 1 ? "" : "s", (double)b->key.cost / 1000.0, in);
    return 0;
}

/* 0 when r could run somewhere now or on an idle cluster is impossible (reason filled);
 * 1 when preemption is worth looking at. */
static int worth_planning(struct pctx *x, struct sched_preempt_plan *plan)
{
    struct sched_fail fail;
    char why[SCHED_REASON_MAX];
    int ok;
    if (sched_place_in(x->c, x->r, x->now_s, NULL, &fail)) {
        plan->est_start_s = x->now_s;
        mu_strlcpy(plan->reason, "fits now without preemption", sizeof(plan->reason));
        return 0;
    }
    x->c->idle_view = true;
    ok = sched_place_in(x->c, x->r, x->now_s, NULL, &fail);
    x->c->idle_view = false;
    if (ok)
        return 1;
    sched_fail_format(x->c, x->r, &fail, x->now_s, why, sizeof(why));
    (void)mu_snprintf(plan->reason, sizeof(plan->reason),
                      "would not fit even with nothing running: %s", why);
    return 0;
}

int sched_preempt_plan(struct sched_cluster *c,
                       const struct sched_request *r,
                       int64_t priority,
                       int64_t now_ms,
                       int min_runtime_s,
                       const struct sched_victim *victims,
                       int nvictims,
                       struct sched_preempt_plan *plan,
                       struct mu_err *err)
{
    struct pctx x;
    const char *bad;
    uint64_t generation;
    int64_t max_grace = 0;
    int rc = -1;

    if (check_args(c, r, victims, nvictims, plan, err) != 0)
        return -1;
    plan->nvictims = 0;
    plan->lost_gpu_ms = 0;
    plan->ready_s = 0;
    plan->est_start_s = 0;
    plan->retry_at_ms = 0;
    plan->candidates = 0;
    plan->placements = 0;
    plan->exact = false;
    plan->reason[0] = '\0';
    bad = sched_request_invalid(c, r);
    if (bad) {
        mu_strlcpy(plan->reason, bad, sizeof(plan->reason));
        return 0;
    }
    if (r->slice_profile > 0 || r->gpu_milli > 0) {
        /* The search's bounds count whole GPUs; slices and shares wait for work to end. */
        mu_strlcpy(plan->reason,
                   r->slice_profile > 0 ? "MIG slice jobs do not preempt (they wait)"
                                        : "shared-GPU (gpu_milli) jobs do not preempt (they wait)",
                   sizeof(plan->reason));
        return 0;
    }
    if (check_slots(c, victims, nvictims, err) != 0)
        return -1;
    if (pctx_init(&x, c, r, now_ms, victims, nvictims, plan->slots, err) != 0)
        return -1;
    sched_topo_refresh(c);
    generation = c->generation;
    rc = 0;
    if (!worth_planning(&x, plan))
        goto out;
    pools_usable(&x);
    classify(&x, priority, min_runtime_s);
    plan->candidates = x.ncand;
    if (!all_fit(&x, min_runtime_s, plan))
        goto out;
    rc = -1;
    if (search(&x, &plan->exact, err) != 0)
        goto out;
    for (int i = 0; i < x.best.key.n; i++) {
        const struct sched_victim *v = &victims[x.cand[x.best.set[i]].idx];
        max_grace = v->grace_s > max_grace ? v->grace_s : max_grace;
    }
    rc = waiting_wins(&x, max_grace, plan, err);
    if (rc != 0) {
        rc = rc < 0 ? -1 : 0;
        goto out;
    }
    rc = plan_fill(&x, max_grace, plan, err) == 0 ? 1 : -1;
out:
    if (rc != 1)
        plan->exact = false;
    plan->placements = x.tests;
    c->generation = generation;
    pctx_release(&x);
    return rc;
}

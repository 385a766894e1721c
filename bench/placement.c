/* SPDX-License-Identifier: MIT */
/*
 * muster-bench-placement: the placement core on its own, no daemon, no Redis.  Builds a cluster
 * of N nodes x 8 GPUs in 4 zones x 8 blocks x R racks (16 nodes a rack), three quarters spot and
 * one quarter on-demand, fills it to the given occupancy with random small gangs at random
 * GPUs, then times sched_place for gangs from 1x1 to 64x8 (required zone, preferred rack; never
 * committed, so every run sees the same cluster).  One line per case, the 64x8 line last:
 *
 *   placement nodes=4096 gang=64x8 occupancy=0.6 p50_us=… p99_us=… per_s=… placed=1
 *
 * --pass times one sched_pass over 10,000 pending jobs (--pending N) none of which fits now (the
 * first that could fit later gets the reservation), against the fill's running gangs.  With
 * --queues Q the jobs are spread over Q queues and each run first puts them in fair-share order
 * (sched_order_jobs, as musterd does), timed with the pass and on its own (order_p50_ms).  With
 * --quota as well, every queue has a quota (cohorts of 5 queues, a random part of it in use, a
 * fifth of the queues at or over it) and the pass is sched_pass_quota, as musterd runs it.
 *
 * --why (with --pass) then times sched_explain, what musterctl why runs on demand, for the first
 * --runs pending jobs after the last pass, each against that pass's reservation as musterd gives
 * it, next to the pass's own p50 from the same run (the baseline):
 *
 *   why nodes=4096 running=… explained=… with_start=… p50_us=… max_us=… pass_p50_ms=…
 *
 * --preempt fills the cluster to 97% (unless --occupancy says otherwise), makes the fill's gangs
 * preemption candidates (random priorities below the preemptor's, 80% preemptible, random
 * starts, checkpoints and graces, none ending soon) and times sched_preempt_plan for gangs of
 * 4x8 in one rack, then 8x8 and 32x8 in one zone (preferred rack), the 32x8 line last:
 *
 *   preempt nodes=4096 running=… candidates=… p50_us=… p99_us=… gang=32x8 victims=… lost_gpu_s=…
 *
 * --order times the fair-share order alone (sched_order_jobs, core/order.c) of 100,000 pending
 * jobs in 50 queues of 20 users each with random weights, usages, priorities and sizes, next to
 * a plain qsort of the same jobs by priority and age (the order before fair share), in the same
 * run (the --pass order has the same users):
 *
 *   order pending=100000 queues=50 users=1000 p50_ms=… max_ms=… qsort_p50_ms=…
 *
 * then the order kept across passes (issue #15, core/order.c) over 100,000 jobs in 4 queues of
 * 50 users in all: the full sched_order_jobs, and what a pass that looks at the first 100 jobs
 * pays after 8 jobs changed (8 removes and 8 adds, begin, 100 next), in the same run; and
 * (starts_*) the same when the 8 are the first 8 of the order, as when a pass starts them:
 *
 *   order_kept pending=100000 queues=4 users=50 full_p50_ms=… full_max_ms=… changes=16 take=100
 *       kept_p50_us=… kept_max_us=… starts_p50_us=… starts_max_us=…
 *
 * Numbers are printed, never asserted (docs/style.md §1.8).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mu.h"
#include "core/sched.h"

#include "bench/timing.h"

#include "common/mu_banned.h"

#define GPUS 8

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int rnd(int n)
{
    return (int)(rnd64() % (uint64_t)n);
}

static struct sched_request request(int tasks, int gpus)
{
    struct sched_request r = sched_request_make(tasks, gpus);
    r.gpu_type = "H100";
    return r;
}

/* The fill: single-task gangs holding random GPUs, kept as running gangs for --pass. */
struct fill {
    struct sched_request *reqs;
    struct sched_slot *slots;
    struct sched_running *running;
    uint64_t *busy; /* [node] GPUs the fill took */
    int n;
};

static struct sched_cluster *build(int nodes, double occupancy, struct fill *f, struct mu_err *err)
{
    static const char *const levels[] = { "zone", "block", "rack" };
    struct sched_pool pools[2] = {
        { .name = "p5-spot",
          .gpu_type = "H100",
          .price_per_hour = 12.5,
          .capacity = SCHED_SPOT,
          .max_gpus = 0 },
        { .name = "p5-od",
          .gpu_type = "H100",
          .price_per_hour = 98.32,
          .capacity = SCHED_ON_DEMAND,
          .max_gpus = 0 },
    };
    struct sched_cluster *c = sched_cluster_new(pools, 2, levels, 3, err);
    int racks = nodes / (4 * 8 * 16) > 0 ? nodes / (4 * 8 * 16) : 1;
    int64_t target = (int64_t)(occupancy * nodes * GPUS);
    int64_t used = 0;
    int cap = nodes * GPUS + 1;

    if (!c)
        return NULL;
    for (int i = 0; i < nodes; i++) {
        struct sched_node_spec s;
        int rack = i / 16;
        memset(&s, 0, sizeof(s));
        (void)mu_snprintf(s.name, sizeof(s.name), "node-%05d", i);
        s.pool = (rack / racks) % 4 == 3 ? 1 : 0; /* every fourth block on-demand */
        s.ngpus = GPUS;
        s.cpus = 192;
        s.memory_mb = (int64_t)2048 * 1024;
        s.nlabels = 3;
        (void)mu_snprintf(s.labels[0], sizeof(s.labels[0]), "z%d", (rack / racks / 8) % 4);
        (void)mu_snprintf(s.labels[1], sizeof(s.labels[1]), "b%d", (rack / racks) % 8);
        (void)mu_snprintf(s.labels[2], sizeof(s.labels[2]), "r%d", rack % racks);
        if (sched_cluster_node_add(c, &s, err) < 0) {
            sched_cluster_free(c);
            return NULL;
        }
    }
    f->reqs = calloc((size_t)cap, sizeof(*f->reqs));
    f->slots = calloc((size_t)cap, sizeof(*f->slots));
    f->running = calloc((size_t)cap, sizeof(*f->running));
    f->busy = calloc((size_t)nodes, sizeof(*f->busy));
    f->n = 0;
    if (!f->reqs || !f->slots || !f->running || !f->busy) {
        sched_cluster_free(c);
        mu_errf(err, MU_E_NOMEM, "out of memory");
        return NULL;
    }
    while (used < target) {
        int node = rnd(nodes);
        int free_gpus = sched_cluster_node_gpus_free(c, node);
        int k;
        uint64_t mask = 0;
        uint64_t busy;
        if (free_gpus == 0)
            continue;
        /* Half the gangs take what is left of a node (8-GPU training jobs), half 1-4 GPUs. */
        k = rnd(2) ? free_gpus : 1 + rnd(free_gpus < 4 ? free_gpus : 4);
        if (used + k > target)
            k = (int)(target - used);
        busy = f->busy[node];
        while (__builtin_popcountll(mask) < k) {
            int g = rnd(GPUS);
            if (!((busy | mask) & (UINT64_C(1) << g)))
                mask |= UINT64_C(1) << g;
        }
        f->reqs[f->n] = request(1, k);
        f->slots[f->n].node = node;
        f->slots[f->n].gpus = mask;
        f->busy[node] |= mask;
        sched_cluster_commit(c, &f->reqs[f->n], &f->slots[f->n]);
        f->running[f->n].req = &f->reqs[f->n];
        f->running[f->n].slots = &f->slots[f->n];
        f->running[f->n].end_s = 60 + rnd(86400);
        f->n++;
        used += k;
    }
    return c;
}

static void fill_free(struct fill *f)
{
    free(f->reqs);
    free(f->slots);
    free(f->running);
    free(f->busy);
}

static int bench_place(struct sched_cluster *c, int nodes, double occ, int runs)
{
    static const int shapes[][2] = { { 1, 1 },  { 1, 8 },  { 4, 8 }, { 8, 8 },
                                     { 16, 8 }, { 32, 8 }, { 64, 8 } };
    int64_t *ns = calloc((size_t)runs, sizeof(*ns));
    struct sched_slot *slots = calloc(64, sizeof(*slots));
    int mid = runs / 2;
    int p99 = runs * 99 / 100;
    char reason[256];
    if (!ns || !slots) {
        free(ns);
        free(slots);
        return 1;
    }
    for (size_t s = 0; s < MU_ARRAY_LEN(shapes); s++) {
        struct sched_request r = request(shapes[s][0], shapes[s][1]);
        int64_t total = 0;
        int placed = 0;
        r.required_level = 0;  /* zone */
        r.preferred_level = 2; /* rack */
        for (int i = 0; i < runs; i++) {
            int64_t t0 = mono_ns();
            placed = sched_place(c, &r, 0, slots, reason, sizeof(reason));
            ns[i] = mono_ns() - t0;
            total += ns[i];
        }
        qsort(ns, (size_t)runs, sizeof(*ns), cmp_i64);
        printf("placement nodes=%d gang=%dx%d occupancy=%g p50_us=%.1f p99_us=%.1f per_s=%.0f "
               "placed=%d\n",
               nodes, r.tasks, r.gpus_per_task, occ, (double)ns[mid] / 1e3, (double)ns[p99] / 1e3,
               total > 0 ? 1e9 * runs / (double)total : 0.0, placed);
    }
    free(ns);
    free(slots);
    return 0;
}

static int npending = 10000; /* --pending */
static int nqueues = 0;      /* --queues: 0 = no fair-share order before the pass */
#define USERS_PER_QUEUE 20   /* each queue's users, with random usages */
static bool with_quota;      /* --quota: the pass with queue quotas (sched_pass_quota) */
static bool with_why;        /* --why: sched_explain after the passes */

/* 10,000 pending jobs that cannot start now, in a handful of shape families.  Returns the
 * total task count of the jobs with more than 8 tasks (they get their own slot buffers). */
static size_t make_pending(const struct sched_cluster *c,
                           int nodes,
                           struct sched_request *reqs,
                           struct sched_pass_job *jobs)
{
    int free_nodes = 0;
    size_t nbig = 0;
    for (int i = 0; i < nodes; i++)
        free_nodes += sched_cluster_node_gpus_free(c, i) == GPUS;
    for (int i = 0; i < npending; i++) {
        struct sched_request *r = &reqs[i];
        int kind = rnd(5);
        *r = request(1, 8);
        if (i == 0 || (kind == 0 && rnd(10) == 0)) {
            r->tasks = free_nodes + 1 + rnd(32); /* more whole nodes than are free: later */
        } else if (kind <= 1) {
            r->tasks = 17 + rnd(48); /* a rack has 16 nodes: never */
            r->required_level = 2;
        } else if (kind == 2) {
            r->tasks = 2 + rnd(4);
            r->gpu_type = "B200"; /* no such nodes */
        } else if (kind == 3) {
            r->tasks = 1 + rnd(4);
            r->gpus_per_task = 16; /* bigger than any node */
        } else {
            r->tasks = nodes / 4 + 1 + rnd(64); /* more than a zone holds: never */
            r->required_level = 0;
        }
        jobs[i].req = r;
        jobs[i].run_s = 600 + rnd(86400);
        if (r->tasks > 8)
            nbig += (size_t)r->tasks;
    }
    return nbig;
}

/* n users of random usages and commitments (a user of queue q is q * USERS_PER_QUEUE + k). */
static void users_random(struct sched_share_user *users, int n)
{
    for (int u = 0; u < n; u++)
        users[u] = (struct sched_share_user){ .usage = (double)rnd(100000),
                                              .committed = (double)rnd(10000) };
}

/* The fair-share order's inputs for the pending jobs: random queues, weights, usages and
 * priorities, each job's cost from its request. */
static void order_inputs(const struct sched_request *reqs,
                         struct sched_pass_job *jobs,
                         struct sched_order_job *ojobs,
                         struct sched_share_queue *queues,
                         struct sched_share_user *users,
                         struct sched_quota_queue *quota)
{
    users_random(users, nqueues * USERS_PER_QUEUE);
    for (int q = 0; q < nqueues; q++)
        queues[q] = (struct sched_share_queue){ .weight = 1 + rnd(10),
                                                .usage = (double)rnd(1000000),
                                                .committed = (double)rnd(100000) };
    for (int q = 0; q < nqueues && with_quota; q++) {
        int spot = 64 + rnd(448);
        quota[q] = (struct sched_quota_queue){ .limited = true,
                                               .cohort = q / 5,
                                               .nominal = { spot, 32 },
                                               .borrow_limit = -1,
                                               .lend_limit = -1,
                                               .used = { rnd(5) == 0 ? spot : rnd(spot), 0 } };
    }
    for (int i = 0; i < npending; i++)
        ojobs[i] = (struct sched_order_job){
            .queue = nqueues ? rnd(nqueues) : 0,
            .priority = rnd(5),
            .submitted_ms = 1795000000000ULL + (uint64_t)i,
            .cost = (double)reqs[i].tasks * reqs[i].gpus_per_task * (double)jobs[i].run_s,
        };
    for (int i = 0; i < npending; i++) {
        jobs[i].queue = ojobs[i].queue;
        ojobs[i].user = ojobs[i].queue * USERS_PER_QUEUE + rnd(USERS_PER_QUEUE);
    }
}

/* One pass over the pending jobs in order (with quotas when --quota); 0, or -1 when any started
 * (the bench's jobs are made so that none can). */
static int one_pass(struct sched_cluster *c,
                    const struct fill *f,
                    struct sched_quota_queue *quota,
                    const struct sched_pass_job *ordered,
                    struct sched_decision *out)
{
    int started = with_quota ? sched_pass_quota(c, quota, nqueues, ordered, npending, f->running,
                                                f->n, 0, out, NULL)
                             : sched_pass(c, ordered, npending, f->running, f->n, 0, out, NULL);
    if (started == 0)
        return 0;
    (void)fprintf(stderr, "muster-bench-placement: %d jobs started; expected none\n", started);
    return -1;
}

/* --why: sched_explain for the first runs pending jobs of the last pass (out), each against the
 * pass's reservation for another job as musterd passes it; printed with pass_ms, the pass's p50. */
static int bench_why(struct sched_cluster *c,
                     const struct fill *f,
                     int nodes,
                     const struct sched_pass_job *ordered,
                     const struct sched_decision *out,
                     int runs,
                     double pass_ms)
{
    int64_t *ns = calloc((size_t)runs, sizeof(*ns));
    struct sched_reservation res = { NULL, NULL, 0 };
    int head = -1;
    int with_start = 0;
    int mid = runs / 2;
    struct mu_err err;

    if (!ns)
        return -1;
    for (int i = 0; i < npending && head < 0; i++) {
        if (out[i].verdict == SCHED_RESERVED) {
            res =
                (struct sched_reservation){ ordered[i].req, ordered[i].slots, out[i].est_start_s };
            head = i;
        }
    }
    for (int k = 0; k < runs; k++) {
        int i = k % npending;
        struct sched_explain e;
        int64_t t0 = mono_ns();
        if (sched_explain(c, ordered[i].req, ordered[i].run_s, f->running, f->n,
                          head >= 0 && head != i ? &res : NULL, 0, &e, &err)
            != 0) {
            (void)fprintf(stderr, "muster-bench-placement: %s\n", err.msg);
            free(ns);
            return -1;
        }
        ns[k] = mono_ns() - t0;
        with_start += e.est_start_s > 0;
    }
    qsort(ns, (size_t)runs, sizeof(*ns), cmp_i64);
    printf("why nodes=%d running=%d explained=%d with_start=%d p50_us=%.1f max_us=%.1f "
           "pass_p50_ms=%.2f\n",
           nodes, f->n, runs, with_start, (double)ns[mid] / 1e3, (double)ns[runs - 1] / 1e3,
           pass_ms);
    free(ns);
    return 0;
}

static double pass_p50_ms(const int64_t *sorted_ns, int runs)
{
    int mid = runs / 2;
    return (double)sorted_ns[mid] / 1e6;
}

/* The pass line (ns, ons: the runs' pass and order times, sorted here) and the first reasons. */
static void pass_print(int nodes,
                       double occ,
                       const struct fill *f,
                       const struct sched_decision *out,
                       int64_t *ns,
                       int64_t *ons,
                       int runs)
{
    int counts[3] = { 0, 0, 0 };
    int mid = runs / 2;

    for (int i = 0; i < npending; i++)
        counts[out[i].verdict]++;
    qsort(ns, (size_t)runs, sizeof(*ns), cmp_i64);
    qsort(ons, (size_t)runs, sizeof(*ons), cmp_i64);
    printf("pass nodes=%d occupancy=%g pending=%d queues=%d quota=%d running=%d reserved=%d "
           "waiting=%d p50_ms=%.2f max_ms=%.2f order_p50_ms=%.2f\n",
           nodes, occ, npending, nqueues, with_quota, f->n, counts[SCHED_RESERVED],
           counts[SCHED_WAIT], (double)ns[mid] / 1e6, (double)ns[runs - 1] / 1e6,
           (double)ons[mid] / 1e6);
    printf("  head: %s\n  e.g.: %s | %s\n", out[0].reason, out[1].reason, out[2].reason);
}

static int bench_pass(struct sched_cluster *c, struct fill *f, int nodes, double occ, int runs)
{
    struct sched_request *reqs = calloc(npending, sizeof(*reqs));
    struct sched_pass_job *jobs = calloc(npending, sizeof(*jobs));
    struct sched_decision *out = calloc(npending, sizeof(*out));
    struct sched_slot *slots = calloc((size_t)npending * 8, sizeof(*slots));
    struct sched_slot *big = NULL;
    size_t used_big = 0;
    int64_t *ns = calloc((size_t)runs, sizeof(*ns));
    int64_t *ons = calloc((size_t)runs, sizeof(*ons));
    struct sched_order_job *ojobs = calloc((size_t)npending, sizeof(*ojobs));
    struct sched_pass_job *ordered = calloc((size_t)npending, sizeof(*ordered));
    int *order = calloc((size_t)npending, sizeof(*order));
    struct sched_share_queue queues[SCHED_MAX_QUEUES];
    struct sched_share_user users[SCHED_MAX_QUEUES * USERS_PER_QUEUE];
    struct sched_quota_queue quota[SCHED_MAX_QUEUES];
    struct sched_order *o = sched_order_new();
    int rc = 1;

    if (!reqs || !jobs || !out || !slots || !ns || !ons || !ojobs || !ordered || !order || !o)
        goto out;
    /* Every job its own slot buffer: a pass may read a started job's slots again. */
    big = calloc(make_pending(c, nodes, reqs, jobs) + 1, sizeof(*big));
    if (!big)
        goto out;
    for (int i = 0; i < npending; i++) {
        if (reqs[i].tasks <= 8) {
            jobs[i].slots = &slots[(size_t)i * 8];
        } else {
            jobs[i].slots = &big[used_big];
            used_big += (size_t)reqs[i].tasks;
        }
    }
    memset(quota, 0, sizeof(quota));
    order_inputs(reqs, jobs, ojobs, queues, users, quota);
    memcpy(ordered, jobs, (size_t)npending * sizeof(*ordered));
    for (int k = 0; k < runs; k++) {
        int64_t t0 = mono_ns();
        if (nqueues > 0) {
            if (sched_order_jobs(o, ojobs, npending, queues, nqueues, users,
                                 nqueues * USERS_PER_QUEUE, order, NULL)
                != 0)
                goto out;
            for (int i = 0; i < npending; i++)
                ordered[i] = jobs[order[i]];
        }
        ons[k] = mono_ns() - t0;
        if (one_pass(c, f, quota, ordered, out) != 0)
            goto out;
        ns[k] = mono_ns() - t0;
    }
    pass_print(nodes, occ, f, out, ns, ons, runs);
    if (with_why && bench_why(c, f, nodes, ordered, out, runs, pass_p50_ms(ns, runs)) != 0)
        goto out;
    rc = 0;
out:
    sched_order_free(o);
    free(order);
    free(ordered);
    free(ojobs);
    free(ons);
    free(ns);
    free(big);
    free(slots);
    free(out);
    free(jobs);
    free(reqs);
    return rc;
}

#define PREEMPT_NOW ((int64_t)1000000) /* seconds */

static int bench_preempt(struct sched_cluster *c, struct fill *f, int nodes, int runs)
{
    static const int shapes[][3] = { { 4, 8, 2 }, { 8, 8, 0 }, { 32, 8, 0 } };
    struct sched_victim *v = calloc((size_t)f->n + 1, sizeof(*v));
    int *victims = calloc((size_t)f->n + 1, sizeof(*victims));
    struct sched_slot *slots = calloc(64, sizeof(*slots));
    int64_t *ns = calloc((size_t)runs, sizeof(*ns));
    int mid = runs / 2;
    int p99 = runs * 99 / 100;
    int rc = 1;

    if (!v || !victims || !slots || !ns)
        goto out;
    for (int i = 0; i < f->n; i++) {
        v[i].req = f->running[i].req;
        v[i].slots = f->running[i].slots;
        v[i].priority = rnd(10);
        v[i].preemptible = rnd(5) != 0;
        v[i].started_ms = (PREEMPT_NOW - 60 - rnd(86400)) * 1000 - rnd(1000);
        v[i].checkpoint_ms = rnd(2) ? (PREEMPT_NOW - rnd(3600)) * 1000 - rnd(1000) : 0;
        v[i].grace_s = 30 + rnd(91);
        v[i].end_s = PREEMPT_NOW + 600 + rnd(86400);
    }
    for (size_t s = 0; s < MU_ARRAY_LEN(shapes); s++) {
        struct sched_request r = request(shapes[s][0], shapes[s][1]);
        struct sched_preempt_plan plan = { 0 };
        struct mu_err err;
        int got = 0;
        r.required_level = shapes[s][2];
        r.preferred_level = 2;
        for (int i = 0; i < runs; i++) {
            int64_t t0;
            memset(&plan, 0, sizeof(plan));
            plan.victims = victims;
            plan.slots = slots;
            t0 = mono_ns();
            got = sched_preempt_plan(c, &r, 10, PREEMPT_NOW * 1000, 60, v, f->n, &plan, &err);
            ns[i] = mono_ns() - t0;
            if (got < 0) {
                (void)fprintf(stderr, "muster-bench-placement: %s\n", err.msg);
                goto out;
            }
        }
        qsort(ns, (size_t)runs, sizeof(*ns), cmp_i64);
        printf("preempt nodes=%d running=%d candidates=%d p50_us=%.1f p99_us=%.1f gang=%dx%d "
               "victims=%d lost_gpu_s=%lld exact=%d placements=%d\n",
               nodes, f->n, plan.candidates, (double)ns[mid] / 1e3, (double)ns[p99] / 1e3, r.tasks,
               r.gpus_per_task, plan.nvictims, (long long)(plan.lost_gpu_ms / 1000), plan.exact,
               plan.placements);
        printf("  %s\n", plan.reason);
    }
    rc = 0;
out:
    free(ns);
    free(slots);
    free(victims);
    free(v);
    return rc;
}

#define NORDER  100000
#define NQUEUES 50

static int order_key_cmp(const void *a, const void *b)
{
    const struct sched_order_job *x = a;
    const struct sched_order_job *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return (x->submitted_ms > y->submitted_ms) - (x->submitted_ms < y->submitted_ms);
}

static int bench_order(int runs)
{
    struct sched_order_job *jobs = calloc(NORDER, sizeof(*jobs));
    struct sched_order_job *copy = calloc(NORDER, sizeof(*copy));
    int *order = calloc(NORDER, sizeof(*order));
    int64_t *ns = calloc((size_t)runs, sizeof(*ns));
    int64_t *qs = calloc((size_t)runs, sizeof(*qs));
    struct sched_share_queue queues[NQUEUES];
    struct sched_share_user users[NQUEUES * USERS_PER_QUEUE];
    struct sched_order *o = sched_order_new();
    struct mu_err err;
    int mid = runs / 2;
    int rc = 1;

    if (!jobs || !copy || !order || !ns || !qs || !o)
        goto out;
    for (int q = 0; q < NQUEUES; q++)
        queues[q] = (struct sched_share_queue){ .weight = 1 + rnd(10),
                                                .usage = (double)rnd(1000000),
                                                .committed = (double)rnd(100000) };
    users_random(users, NQUEUES * USERS_PER_QUEUE);
    for (int i = 0; i < NORDER; i++) {
        int q = rnd(NQUEUES);
        jobs[i] = (struct sched_order_job){ .queue = q,
                                            .user = q * USERS_PER_QUEUE + rnd(USERS_PER_QUEUE),
                                            .priority = rnd(5),
                                            .submitted_ms = 1795000000000ULL + (uint64_t)i,
                                            .cost = (double)(1 + rnd(64)) * (600 + rnd(86400)) };
    }
    for (int k = 0; k < runs; k++) {
        int64_t t0 = mono_ns();
        if (sched_order_jobs(o, jobs, NORDER, queues, NQUEUES, users, NQUEUES * USERS_PER_QUEUE,
                             order, &err)
            != 0) {
            (void)fprintf(stderr, "muster-bench-placement: %s\n", err.msg);
            goto out;
        }
        ns[k] = mono_ns() - t0;
        memcpy(copy, jobs, NORDER * sizeof(*copy));
        t0 = mono_ns();
        qsort(copy, NORDER, sizeof(*copy), order_key_cmp);
        qs[k] = mono_ns() - t0;
    }
    qsort(ns, (size_t)runs, sizeof(*ns), cmp_i64);
    qsort(qs, (size_t)runs, sizeof(*qs), cmp_i64);
    printf("order pending=%d queues=%d users=%d p50_ms=%.2f max_ms=%.2f qsort_p50_ms=%.2f\n",
           NORDER, NQUEUES, NQUEUES * USERS_PER_QUEUE, (double)ns[mid] / 1e6,
           (double)ns[runs - 1] / 1e6, (double)qs[mid] / 1e6);
    rc = 0;
out:
    sched_order_free(o);
    free(qs);
    free(ns);
    free(order);
    free(copy);
    free(jobs);
    return rc;
}

#define KEPT_QUEUES 4
#define KEPT_USERS  50 /* user u belongs to queue u % KEPT_QUEUES */
#define KEPT_TAKE   100
#define KEPT_CHANGE 8

/* A pass's share of the kept order o after KEPT_CHANGE jobs changed (each removed, and added anew
 * as a job submitted later): random jobs, or when first the first jobs of the order (as when a
 * pass starts them).  Times the removes and adds, begin, and the first KEPT_TAKE jobs;
 * nanoseconds, or -1 with err. */
static int64_t order_pass(struct sched_order *o,
                          struct sched_order_job *jobs,
                          const struct sched_share_queue *queues,
                          const struct sched_share_user *users,
                          bool first,
                          struct mu_err *err)
{
    void *changed[KEPT_CHANGE];
    int64_t t0;
    int n = 0;

    if (first && sched_order_begin(o, queues, KEPT_QUEUES, users, KEPT_USERS, err) != 0)
        return -1;
    while (n < KEPT_CHANGE
           && (changed[n] = first ? sched_order_next(o) : (void *)((intptr_t)rnd(NORDER) + 1)))
        n++;
    t0 = mono_ns();
    for (int c = 0; c < n; c++) {
        struct sched_order_job *j = &jobs[(intptr_t)changed[c] - 1];
        if (!sched_order_remove(o, j, changed[c]))
            return mu_errf(err, MU_E_STATE, "order: a changed job was not in it");
        j->submitted_ms += NORDER;
        if (sched_order_add(o, j, changed[c], err) != 0)
            return -1;
    }
    if (sched_order_begin(o, queues, KEPT_QUEUES, users, KEPT_USERS, err) != 0)
        return -1;
    for (int t = 0; t < KEPT_TAKE; t++)
        (void)sched_order_next(o);
    return mono_ns() - t0;
}

/* The kept order (issue #15): full sched_order_jobs of NORDER jobs, and a pass's share of the
 * kept one, KEPT_CHANGE removes and adds, begin and the first KEPT_TAKE jobs, all timed. */
static int bench_order_kept(int runs)
{
    struct sched_order_job *jobs = calloc(NORDER, sizeof(*jobs));
    int *order = calloc(NORDER, sizeof(*order));
    int64_t *ns = calloc((size_t)runs, sizeof(*ns));
    int64_t *ks = calloc((size_t)runs, sizeof(*ks));
    int64_t *ss = calloc((size_t)runs, sizeof(*ss));
    struct sched_share_queue queues[KEPT_QUEUES];
    struct sched_share_user users[KEPT_USERS];
    struct sched_order *o = sched_order_new();
    struct sched_order *kept = sched_order_new();
    struct mu_err err;
    int mid = runs / 2;
    int rc = 1;

    if (!jobs || !order || !ns || !ks || !ss || !o || !kept)
        goto out;
    for (int q = 0; q < KEPT_QUEUES; q++)
        queues[q] = (struct sched_share_queue){ .weight = 1 + rnd(10),
                                                .usage = (double)rnd(1000000),
                                                .committed = (double)rnd(100000) };
    users_random(users, KEPT_USERS);
    for (int i = 0; i < NORDER; i++) {
        int q = rnd(KEPT_QUEUES);
        jobs[i] = (struct sched_order_job){
            .queue = q,
            .user = q + KEPT_QUEUES * rnd((KEPT_USERS - q + KEPT_QUEUES - 1) / KEPT_QUEUES),
            .priority = rnd(5),
            .submitted_ms = 1795000000000ULL + (uint64_t)i,
            .cost = (double)(1 + rnd(64)) * (600 + rnd(86400))
        };
        if (sched_order_add(kept, &jobs[i], (void *)((intptr_t)i + 1), &err) != 0)
            goto fail;
    }
    if (sched_order_begin(kept, queues, KEPT_QUEUES, users, KEPT_USERS, &err) != 0)
        goto fail;
    for (int k = 0; k < runs; k++) {
        int64_t t0 = mono_ns();
        if (sched_order_jobs(o, jobs, NORDER, queues, KEPT_QUEUES, users, KEPT_USERS, order, &err)
            != 0)
            goto fail;
        ns[k] = mono_ns() - t0;
        if ((ks[k] = order_pass(kept, jobs, queues, users, false, &err)) < 0)
            goto fail;
    }
    for (int k = 0; k < runs; k++) {
        if ((ss[k] = order_pass(kept, jobs, queues, users, true, &err)) < 0)
            goto fail;
    }
    qsort(ns, (size_t)runs, sizeof(*ns), cmp_i64);
    qsort(ks, (size_t)runs, sizeof(*ks), cmp_i64);
    qsort(ss, (size_t)runs, sizeof(*ss), cmp_i64);
    printf("order_kept pending=%d queues=%d users=%d full_p50_ms=%.2f full_max_ms=%.2f "
           "changes=%d take=%d kept_p50_us=%.1f kept_max_us=%.1f starts_p50_us=%.1f "
           "starts_max_us=%.1f\n",
           NORDER, KEPT_QUEUES, KEPT_USERS, (double)ns[mid] / 1e6, (double)ns[runs - 1] / 1e6,
           2 * KEPT_CHANGE, KEPT_TAKE, (double)ks[mid] / 1e3, (double)ks[runs - 1] / 1e3,
           (double)ss[mid] / 1e3, (double)ss[runs - 1] / 1e3);
    rc = 0;
    goto out;
fail:
    (void)fprintf(stderr, "muster-bench-placement: %s\n", err.msg);
out:
    sched_order_free(kept);
    sched_order_free(o);
    free(ss);
    free(ks);
    free(ns);
    free(order);
    free(jobs);
    return rc;
}

static int usage(void)
{
    (void)fprintf(
        stderr,
        "usage: muster-bench-placement [--nodes N] [--occupancy F] [--runs N] "
        "[--seed N] [--pass [--pending N] [--queues Q [--quota]] [--why] | --preempt | --order]\n");
    return 2;
}

struct options {
    int64_t nodes;
    int64_t runs; /* 0: the benchmark's own default */
    int64_t seed;
    double occ;
    bool pass;
    bool preempt;
    bool order;
    bool occ_given;
};

/* Reads the command line into o; returns -1 to go on, else the exit status (0 after --help). */
static int parse_args(int argc, char **argv, struct options *o)
{
    struct mu_err err;

    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: muster-bench-placement [--nodes N] [--occupancy F] [--runs N] "
                   "[--seed N] [--pass [--pending N] [--queues Q [--quota]] [--why] | --preempt | "
                   "--order]\n");
            return 0;
        } else if (strcmp(argv[i], "--pass") == 0) {
            o->pass = true;
        } else if (strcmp(argv[i], "--quota") == 0) {
            with_quota = true;
        } else if (strcmp(argv[i], "--why") == 0) {
            with_why = true;
        } else if (strcmp(argv[i], "--preempt") == 0) {
            o->preempt = true;
        } else if (strcmp(argv[i], "--order") == 0) {
            o->order = true;
        } else if (strcmp(argv[i], "--nodes") == 0 && v) {
            if (mu_parse_i64(v, 16, 1 << 20, &o->nodes, &err) != 0)
                return usage();
            i++;
        } else if (strcmp(argv[i], "--pending") == 0 && v) {
            int64_t n = 0;
            if (mu_parse_i64(v, 3, 10000000, &n, &err) != 0)
                return usage();
            npending = (int)n;
            i++;
        } else if (strcmp(argv[i], "--queues") == 0 && v) {
            int64_t n = 0;
            if (mu_parse_i64(v, 1, SCHED_MAX_QUEUES, &n, &err) != 0)
                return usage();
            nqueues = (int)n;
            i++;
        } else if (strcmp(argv[i], "--runs") == 0 && v) {
            if (mu_parse_i64(v, 1, 1000000, &o->runs, &err) != 0)
                return usage();
            i++;
        } else if (strcmp(argv[i], "--seed") == 0 && v) {
            if (mu_parse_i64(v, 1, INT64_MAX, &o->seed, &err) != 0)
                return usage();
            i++;
        } else if (strcmp(argv[i], "--occupancy") == 0 && v) {
            if (mu_parse_double(v, 0.0, 1.0, &o->occ, &err) != 0)
                return usage();
            o->occ_given = true;
            i++;
        } else {
            return usage();
        }
    }
    if (o->pass + o->preempt + o->order > 1 || (with_why && !o->pass))
        return usage();
    return -1;
}

int main(int argc, char **argv)
{
    struct options o = { .nodes = 4096, .runs = 0, .seed = 1, .occ = 0.6 };
    struct fill f = { NULL, NULL, NULL, NULL, 0 };
    struct sched_cluster *c;
    struct mu_err err;
    int rc = parse_args(argc, argv, &o);

    if (rc >= 0)
        return rc;
    if (o.order) {
        rng_state ^= (uint64_t)o.seed * 0x2545F4914F6CDD1DULL;
        rc = bench_order(o.runs ? (int)o.runs : 20);
        return rc != 0 ? rc : bench_order_kept(o.runs ? (int)o.runs : 20);
    }
    if (o.preempt && !o.occ_given)
        o.occ = 0.97;
    rng_state ^= (uint64_t)o.seed * 0x2545F4914F6CDD1DULL;
    c = build((int)o.nodes, o.occ, &f, &err);
    if (!c) {
        (void)fprintf(stderr, "muster-bench-placement: %s\n", err.msg);
        fill_free(&f);
        return 1;
    }
    if (o.pass)
        rc = bench_pass(c, &f, (int)o.nodes, o.occ, o.runs ? (int)o.runs : 20);
    else if (o.preempt)
        rc = bench_preempt(c, &f, (int)o.nodes, o.runs ? (int)o.runs : 50);
    else
        rc = bench_place(c, (int)o.nodes, o.occ, o.runs ? (int)o.runs : 500);
    sched_cluster_free(c);
    fill_free(&f);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * Preemption planner tests (docs/design.md §5): hand-built clusters for each rule (least lost work,
 * a checkpoint makes a victim cheaper, ties by priority then recency, only eligible victims, the
 * required domain, no capacity straddle, waiting when it is sooner, reasons), the cluster left
 * bit-for-bit as it was (as far as the public API can see), and randomized checks against a
 * brute-force search over every subset of victims on tiny clusters: the exact search must hit
 * the optimum, the greedy must give a valid plan; and the pass's one preemption
 * (sched_preempt_first).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/sched.h"

#include "tests/unit/support/core_fix.h"

#include "common/mu_banned.h"

#define NOW       100000                /* seconds: placements, ends */
#define NOW_MS    ((int64_t)NOW * 1000) /* the planner's clock */
#define S(x)      ((int64_t)(x)*1000)   /* seconds -> ms */
#define MAX_GANGS 256
#define MAX_TASKS 4

static const char *const level_names[] = { "zone", "rack" };

/* A running gang: its request, slots and victim record live together. */
struct gang {
    struct sched_request req;
    struct sched_slot slots[MAX_TASKS];
};

struct world {
    struct sched_cluster *c;
    struct gang gangs[MAX_GANGS];
    struct sched_victim v[MAX_GANGS];
    int n;
};

/* Pools: 0 spot (max_gpus spot_cap), 1 on-demand, 2 spot of another GPU type. */
static void world_init_cap(struct world *w, int nlevels, int spot_cap)
{
    struct sched_pool pools[3] = {
        { .name = "spot",
          .gpu_type = "A100",
          .price_per_hour = 3.0,
          .capacity = SCHED_SPOT,
          .max_gpus = spot_cap },
        { .name = "od",
          .gpu_type = "A100",
          .price_per_hour = 10.0,
          .capacity = SCHED_ON_DEMAND,
          .max_gpus = 0 },
        { .name = "spot-h",
          .gpu_type = "H100",
          .price_per_hour = 9.0,
          .capacity = SCHED_SPOT,
          .max_gpus = 0 },
    };
    memset(w, 0, sizeof(*w));
    w->c = sched_cluster_new(pools, 3, level_names, nlevels, NULL);
    assert_non_null(w->c);
}

static void world_init(struct world *w, int nlevels)
{
    world_init_cap(w, nlevels, 0);
}

/* A node in zone, alone in rack "r-<name>" (labels for as many levels as the cluster has). */
static int add_node(struct world *w, const char *name, int pool, int gpus, const char *zone)
{
    char path[2 * SCHED_NAME_MAX + 4];
    (void)mu_snprintf(path, sizeof(path), "%s/r-%s", zone, name);
    return cfix_node_add(w->c, name, pool, gpus, path);
}

/* Starts a one-task gang on node with GPU mask; returns its victim record for tuning. */
static struct sched_victim *run1(
    struct world *w, int node, uint64_t mask, int64_t priority, int64_t age_s)
{
    struct gang *g = &w->gangs[w->n];
    struct sched_victim *v = &w->v[w->n];
    assert_true(w->n < MAX_GANGS);
    g->req = sched_request_make(1, __builtin_popcountll(mask));
    g->slots[0].node = node;
    g->slots[0].gpus = mask;
    sched_cluster_commit(w->c, &g->req, g->slots);
    memset(v, 0, sizeof(*v));
    v->req = &g->req;
    v->slots = g->slots;
    v->priority = priority;
    v->preemptible = true;
    v->started_ms = S(NOW - age_s);
    v->grace_s = 30;
    v->end_s = NOW + 86400;
    w->n++;
    return v;
}

/* What the public API shows of a cluster: enough to tell any change of its free capacity. */
struct snap {
    uint64_t generation;
    int free[64];
    int pool_used[3];
    struct sched_slot probe[8];
    int probe_ok;
};

static void snap_take(struct world *w, struct snap *s)
{
    struct sched_request probe = sched_request_make(1, 1);
    char reason[SCHED_REASON_MAX];
    memset(s, 0, sizeof(*s));
    s->generation = sched_cluster_generation(w->c);
    for (int i = 0; i < sched_cluster_node_count(w->c) && i < 64; i++)
        s->free[i] = sched_cluster_node_gpus_free(w->c, i);
    for (int p = 0; p < 3; p++)
        s->pool_used[p] = sched_cluster_pool_gpus_used(w->c, p);
    s->probe_ok = sched_place(w->c, &probe, NOW, s->probe, reason, sizeof(reason));
}

static void snap_same(struct world *w, const struct snap *before)
{
    struct snap after;
    snap_take(w, &after);
    assert_memory_equal(before, &after, sizeof(after));
}

/* Runs the planner and checks the plan's invariants: eligible victims, the preemptor placeable
 * (and at plan->slots) once they are released, the cluster unchanged. */
static int plan_for(struct world *w,
                    const struct sched_request *r,
                    int64_t priority,
                    int min_run,
                    int *victims,
                    struct sched_slot *slots,
                    struct sched_preempt_plan *plan)
{
    struct snap before;
    struct mu_err err;
    int rc;
    memset(plan, 0, sizeof(*plan));
    plan->victims = victims;
    plan->slots = slots;
    snap_take(w, &before);
    rc = sched_preempt_plan(w->c, r, priority, NOW_MS, min_run, w->v, w->n, plan, &err);
    if (rc < 0)
        fail_msg("%s", err.msg);
    snap_same(w, &before);
    if (rc == 1) {
        struct sched_slot again[64];
        char reason[SCHED_REASON_MAX];
        assert_true(plan->nvictims > 0);
        for (int i = 0; i < plan->nvictims; i++) {
            const struct sched_victim *v = &w->v[victims[i]];
            assert_true(v->preemptible);
            assert_true(v->priority < priority || v->reclaimable);
            assert_true(NOW_MS - v->started_ms >= S(min_run));
            if (i > 0)
                assert_true(victims[i] > victims[i - 1]);
        }
        for (int i = 0; i < plan->nvictims; i++)
            sched_cluster_release(w->c, w->v[victims[i]].req, w->v[victims[i]].slots);
        assert_int_equal(sched_place(w->c, r, NOW, again, reason, sizeof(reason)), 1);
        sched_cluster_commit(w->c, r, slots); /* asserts on a GPU given twice */
        sched_cluster_release(w->c, r, slots);
        for (int i = 0; i < plan->nvictims; i++)
            sched_cluster_commit(w->c, w->v[victims[i]].req, w->v[victims[i]].slots);
    } else {
        assert_int_equal(plan->nvictims, 0);
        assert_true(plan->reason[0] != '\0');
    }
    return rc;
}

static bool has_victim(const struct sched_preempt_plan *p, int idx)
{
    for (int i = 0; i < p->nvictims; i++) {
        if (p->victims[i] == idx)
            return true;
    }
    return false;
}

/* ---- hand-built clusters, one rule each ---- */

static void test_least_lost_work(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[4];
    struct sched_request one = sched_request_make(1, 8);
    struct sched_request two = sched_request_make(2, 8);
    (void)state;
    world_init(&w, 0);
    for (int i = 0; i < 4; i++)
        add_node(&w, (char[]){ (char)('a' + i), 0 }, 0, 8, "");
    run1(&w, 0, 0xff, 1, 1000); /* 8000 GPU-s */
    run1(&w, 1, 0xff, 1, 300);  /* 2400 */
    run1(&w, 2, 0xff, 1, 500);  /* 4000 */
    run1(&w, 3, 0x0f, 1, 100);  /* 400 + 400 */
    run1(&w, 3, 0xf0, 1, 100);
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 2); /* the two halves of node d: 800 < 2400 */
    assert_true(has_victim(&p, 3) && has_victim(&p, 4));
    assert_int_equal(p.lost_gpu_ms, S(800));
    assert_true(p.exact);
    assert_int_equal(p.candidates, 5);
    assert_int_equal(p.ready_s, NOW + 30);
    assert_int_equal(slots[0].node, 3);
    assert_int_equal(plan_for(&w, &two, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 3);
    assert_true(has_victim(&p, 1) && has_victim(&p, 3) && has_victim(&p, 4));
    assert_int_equal(p.lost_gpu_ms, S(3200));
    assert_int_equal(sched_preempt_lost_gpu_ms(&w.v[0], NOW_MS), S(8000));
    sched_cluster_free(w.c);
}

/* Quota reclaim: a gang that runs on borrowed quota is a victim whatever its priority, and
 * among such victims the one that loses least goes; a higher-priority gang that is not
 * reclaimable stays. */
static void test_reclaim_ignores_priority(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[1];
    struct sched_request one = sched_request_make(1, 8);
    struct sched_victim *a;
    struct sched_victim *b;
    (void)state;
    world_init(&w, 0);
    add_node(&w, "a", 0, 8, "");
    add_node(&w, "b", 0, 8, "");
    a = run1(&w, 0, 0xff, 50, 7200);
    b = run1(&w, 1, 0xff, 50, 600);
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 0); /* priority 5 < 50 */
    a->reclaimable = true;
    b->reclaimable = true;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 1);
    assert_int_equal(victims[0], 1); /* 600 s of work lost, not 7200 */
    b->reclaimable = false;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 0);
    sched_cluster_free(w.c);
}

static void test_checkpoint_cheaper(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[1];
    struct sched_request one = sched_request_make(1, 8);
    struct sched_victim *old;
    struct sched_victim *young;
    (void)state;
    world_init(&w, 0);
    add_node(&w, "a", 0, 8, "");
    add_node(&w, "b", 0, 8, "");
    old = run1(&w, 0, 0xff, 1, 7200);
    young = run1(&w, 1, 0xff, 1, 600);
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 1);
    old->checkpoint_ms = S(NOW - 120); /* saved two minutes ago: 960 GPU-s < 4800 */
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 1);
    assert_int_equal(victims[0], 0);
    assert_int_equal(p.lost_gpu_ms, S(960));
    /* A checkpoint older than the attempt saves nothing of it. */
    young->checkpoint_ms = S(NOW - 5000);
    assert_int_equal(sched_preempt_lost_gpu_ms(young, NOW_MS), S(8 * 600));
    sched_cluster_free(w.c);
}

static void test_ties(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[1];
    struct sched_request one = sched_request_make(1, 8);
    struct sched_victim *a;
    struct sched_victim *b;
    (void)state;
    world_init(&w, 0);
    add_node(&w, "a", 0, 8, "");
    add_node(&w, "b", 0, 8, "");
    a = run1(&w, 0, 0xff, 3, 100);
    b = run1(&w, 1, 0xff, 2, 100);
    /* Equal lost work: the lower priority goes. */
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 1);
    b->priority = 4;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 0);
    /* Equal work and priority: the most recently started goes.  a is older but checkpointed
     * 100 s ago; b started 100 s ago. */
    b->priority = 3;
    a->started_ms = S(NOW - 900);
    a->checkpoint_ms = S(NOW - 100);
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 1);
    a->started_ms = S(NOW - 100);
    a->checkpoint_ms = 0;
    b->started_ms = S(NOW - 900);
    b->checkpoint_ms = S(NOW - 100);
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 0);
    /* Less than a second apart is not a tie: a (started long ago, checkpointed 99.6 s ago)
     * loses less than b (started 100 s ago), though b started last. */
    a->started_ms = S(NOW - 900);
    a->checkpoint_ms = S(NOW - 100) + 400;
    b->started_ms = S(NOW - 100);
    b->checkpoint_ms = 0;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 0);
    assert_int_equal(p.lost_gpu_ms, 8 * (S(100) - 400));
    sched_cluster_free(w.c);
}

static void test_only_eligible(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[1];
    struct sched_request one = sched_request_make(1, 8);
    struct sched_victim *v;
    (void)state;
    world_init(&w, 0);
    for (int i = 0; i < 5; i++)
        add_node(&w, (char[]){ (char)('a' + i), 0 }, 0, 8, "");
    run1(&w, 0, 0xff, 5, 100);                      /* equal priority */
    run1(&w, 1, 0xff, 9, 100);                      /* higher */
    run1(&w, 2, 0xff, 1, 100)->preemptible = false; /* not preemptible */
    run1(&w, 3, 0xff, 1, 30);                       /* too young */
    v = run1(&w, 4, 0xff, 4, 5000);                 /* the only eligible one, the dearest */
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 1);
    assert_int_equal(victims[0], 4);
    assert_int_equal(p.candidates, 1);
    /* min_runtime_s 0 lets the young one go (it is cheaper). */
    assert_int_equal(plan_for(&w, &one, 5, 0, victims, slots, &p), 1);
    assert_int_equal(victims[0], 3);
    /* Without the eligible one: nothing to do, and the reason says why. */
    v->priority = 7;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 0);
    assert_non_null(strstr(p.reason, "victims too young (min_runtime_s 60)"));
    /* ... and when to plan again: the young one comes of age 30 s from now. */
    assert_true(p.retry_at_ms == S(NOW + 30));
    w.v[3].started_ms = S(NOW - 10000);
    w.v[3].preemptible = false;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 0);
    assert_non_null(strstr(p.reason, "no lower-priority preemptible gangs would free enough GPUs"));
    assert_true(p.retry_at_ms == 0);
    sched_cluster_free(w.c);
}

static void test_required_zone(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[2];
    struct sched_request two = sched_request_make(2, 8);
    (void)state;
    world_init(&w, 1);
    add_node(&w, "a1", 0, 8, "z1");
    add_node(&w, "a2", 0, 8, "z1");
    add_node(&w, "b1", 0, 8, "z2");
    add_node(&w, "b2", 0, 8, "z2");
    run1(&w, 0, 0xff, 1, 100);  /* cheap, in z1 */
    run1(&w, 1, 0xff, 9, 100);  /* z1's other node is not for taking */
    run1(&w, 2, 0xff, 1, 2000); /* dear, in z2 */
    run1(&w, 3, 0x0f, 1, 2000);
    two.required_level = 0;
    assert_int_equal(plan_for(&w, &two, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 2);
    assert_true(has_victim(&p, 2) && has_victim(&p, 3));
    assert_false(has_victim(&p, 0)); /* useless in the wrong zone */
    for (int i = 0; i < 2; i++)
        assert_true(slots[i].node >= 2);
    /* Without the zone rule: two whole nodes anywhere, a1 (800) and b2 (8000). */
    two.required_level = -1;
    assert_int_equal(plan_for(&w, &two, 5, 60, victims, slots, &p), 1);
    assert_true(has_victim(&p, 0));
    assert_int_equal(p.nvictims, 2);
    assert_true(has_victim(&p, 3)); /* b2's 4 GPUs: 8000 < 16000 */
    sched_cluster_free(w.c);
}

static void test_no_straddle(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[2];
    struct sched_request two = sched_request_make(2, 8);
    struct sched_request spot = sched_request_make(1, 8);
    (void)state;
    world_init(&w, 0);
    add_node(&w, "s1", 0, 8, "");
    add_node(&w, "s2", 0, 8, "");
    add_node(&w, "o1", 1, 8, "");
    add_node(&w, "o2", 1, 8, "");
    add_node(&w, "h1", 2, 8, "");
    run1(&w, 1, 0xff, 1, 1000); /* spot s2: 8000 */
    run1(&w, 2, 0xff, 1, 10);   /* on-demand: 80 each */
    run1(&w, 3, 0xff, 1, 10);
    run1(&w, 4, 0xff, 1, 1); /* another GPU type: useless to an A100 gang */
    two.gpu_type = "A100";
    /* s1 (free) + o1 would be cheapest, but a gang never mixes spot and on-demand. */
    assert_int_equal(plan_for(&w, &two, 5, 0, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 2);
    assert_true(has_victim(&p, 1) && has_victim(&p, 2));
    assert_int_equal(p.lost_gpu_ms, S(160));
    assert_int_equal(p.candidates, 3);
    /* Spot only: s1 is free, fits now. */
    spot.ncapacity = 1;
    assert_int_equal(plan_for(&w, &spot, 5, 0, victims, slots, &p), 0);
    assert_non_null(strstr(p.reason, "fits now"));
    assert_int_equal(p.est_start_s, NOW);
    spot.tasks = 2;
    spot.gpu_type = "A100";
    assert_int_equal(plan_for(&w, &spot, 5, 0, victims, slots, &p), 1);
    assert_int_equal(p.nvictims, 1);
    assert_int_equal(victims[0], 0);
    sched_cluster_free(w.c);
}

static void test_wait_is_sooner(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[1];
    struct sched_request one = sched_request_make(1, 8);
    struct sched_victim *ending;
    struct sched_victim *victim;
    (void)state;
    world_init(&w, 0);
    add_node(&w, "a", 0, 8, "");
    add_node(&w, "b", 0, 8, "");
    ending = run1(&w, 0, 0xff, 9, 100); /* not preemptible by us, but ends in 45 s */
    ending->end_s = NOW + 45;
    victim = run1(&w, 1, 0xff, 1, 100);
    victim->grace_s = 120;
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 0);
    assert_non_null(strstr(p.reason, "will fit in 45s without preemption"));
    assert_int_equal(p.est_start_s, NOW + 45);
    victim->grace_s = 30; /* the victim stops sooner than waiting */
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 1);
    assert_int_equal(victims[0], 1);
    assert_int_equal(p.ready_s, NOW + 30);
    /* A pool cool-down that ends within the grace counts as well. */
    victim->grace_s = 120;
    ending->end_s = NOW + 86400;
    add_node(&w, "c", 1, 8, "");
    sched_cluster_pool_cooldown(w.c, 1, NOW + 60);
    assert_int_equal(plan_for(&w, &one, 5, 60, victims, slots, &p), 0);
    assert_int_equal(p.est_start_s, NOW + 60);
    sched_cluster_free(w.c);
}

static void test_reasons_and_errors(void **state)
{
    struct world w;
    struct sched_preempt_plan p;
    int victims[MAX_GANGS];
    struct sched_slot slots[4];
    struct sched_request big = sched_request_make(3, 8);
    struct sched_request bad = sched_request_make(0, 8);
    struct mu_err err;
    (void)state;
    world_init(&w, 0);
    add_node(&w, "a", 0, 8, "");
    add_node(&w, "b", 0, 8, "");
    run1(&w, 0, 0xff, 1, 100);
    assert_int_equal(plan_for(&w, &big, 5, 60, victims, slots, &p), 0);
    assert_non_null(strstr(p.reason, "would not fit even with nothing running"));
    assert_int_equal(plan_for(&w, &bad, 5, 60, victims, slots, &p), 0);
    assert_non_null(strstr(p.reason, "invalid request"));
    /* Two records of one gang: refused before anything is released. */
    w.v[1] = w.v[0];
    memset(&p, 0, sizeof(p));
    p.victims = victims;
    p.slots = slots;
    big.tasks = 2;
    assert_int_equal(sched_preempt_plan(w.c, &big, 5, NOW_MS, 0, w.v, 2, &p, &err), -1);
    assert_int_equal(err.code, MU_E_STATE);
    assert_non_null(strstr(err.msg, "two gangs"));
    /* A slot that is not committed. */
    w.gangs[1].req = sched_request_make(1, 8);
    w.gangs[1].slots[0].node = 1;
    w.gangs[1].slots[0].gpus = 0xff;
    w.v[1].req = &w.gangs[1].req;
    w.v[1].slots = w.gangs[1].slots;
    assert_int_equal(sched_preempt_plan(w.c, &big, 5, NOW_MS, 0, w.v, 2, &p, &err), -1);
    assert_non_null(strstr(err.msg, "not committed"));
    p.slots = NULL;
    assert_int_equal(sched_preempt_plan(w.c, &big, 5, NOW_MS, 0, w.v, 1, &p, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);
    sched_cluster_free(w.c);
}

/* 32 whole nodes in 2 zones, each held by eight 1-GPU gangs: 256 candidates, the greedy's case.
 * A 2x8 gang in one zone needs two whole nodes of one zone, so the optimum is known: the two
 * cheapest nodes to clear in the zone where they cost least. */
static void test_greedy_many(void **state)
{
    static struct world w; /* 256 gangs: too big for the stack under ASan */
    struct sched_preempt_plan p;
    static int victims[MAX_GANGS];
    struct sched_slot slots[2];
    struct sched_request two = sched_request_make(2, 8);
    int64_t clear[32] = { 0 };
    int64_t opt = INT64_MAX;
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    (void)state;
    world_init(&w, 1);
    for (int i = 0; i < 32; i++) {
        char name[8];
        (void)mu_snprintf(name, sizeof(name), "n%d", i);
        add_node(&w, name, 0, 8, i < 16 ? "z1" : "z2");
        for (int g = 0; g < 8; g++) {
            int64_t age;
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            age = 60 + (int64_t)(seed % 5000);
            run1(&w, i, UINT64_C(1) << g, 1, age);
            clear[i] += age;
        }
    }
    for (int z = 0; z < 2; z++) {
        for (int a = 16 * z; a < 16 * z + 16; a++) {
            for (int b = a + 1; b < 16 * z + 16; b++)
                opt = clear[a] + clear[b] < opt ? clear[a] + clear[b] : opt;
        }
    }
    two.required_level = 0;
    two.preferred_level = 0;
    assert_int_equal(plan_for(&w, &two, 5, 60, victims, slots, &p), 1);
    assert_int_equal(p.candidates, 256);
    assert_false(p.exact);
    assert_int_equal(p.nvictims, 16);
    assert_int_equal(p.lost_gpu_ms, S(opt));
    assert_true(p.placements <= 512);
    sched_cluster_free(w.c);
}

/* ---- randomized: against brute force ---- */

static uint64_t rng = 0x243f6a8885a308d3ULL;

static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

/* A random tiny cluster, filled with random gangs; returns the node count. */
static int random_world(struct world *w, int nnodes, int ngangs)
{
    /* Now and then a spot cap that binds. */
    world_init_cap(w, 2, rnd(3) == 0 ? 4 * nnodes / 2 : 0);
    for (int i = 0; i < nnodes; i++) {
        char name[8];
        (void)mu_snprintf(name, sizeof(name), "n%d", i);
        add_node(w, name, rnd(4) == 0 ? 1 : 0, 4, rnd(2) ? "z1" : "z2");
    }
    for (int tries = 0; tries < 200 && w->n < ngangs; tries++) {
        struct gang *g = &w->gangs[w->n];
        struct sched_victim *v = &w->v[w->n];
        char reason[SCHED_REASON_MAX];
        g->req = sched_request_make(1 + rnd(2), 1 + rnd(2));
        if (rnd(4) == 0)
            g->req.required_level = 0;
        if (!sched_place(w->c, &g->req, NOW, g->slots, reason, sizeof(reason)))
            continue;
        sched_cluster_commit(w->c, &g->req, g->slots);
        memset(v, 0, sizeof(*v));
        v->req = &g->req;
        v->slots = g->slots;
        v->priority = rnd(4);
        v->preemptible = rnd(5) != 0;
        v->started_ms = NOW_MS - 1000 - rnd(3000000); /* ms apart: no ties by the second */
        v->checkpoint_ms = rnd(3) == 0 ? NOW_MS - rnd(3000000) : 0;
        v->grace_s = rnd(60);
        v->end_s = NOW + 100000; /* waiting never wins here */
        w->n++;
    }
    return nnodes;
}

/* The least lost work over every subset of eligible victims that makes r placeable; -1 if none. */
static int64_t brute(struct world *w, const struct sched_request *r, int64_t prio, int min_run)
{
    int elig[MAX_GANGS];
    int ne = 0;
    int64_t best = -1;
    struct sched_slot slots[8];
    char reason[SCHED_REASON_MAX];
    for (int i = 0; i < w->n; i++) {
        if (w->v[i].preemptible && w->v[i].priority < prio
            && NOW_MS - w->v[i].started_ms >= S(min_run))
            elig[ne++] = i;
    }
    for (uint32_t m = 1; m < (uint32_t)1 << ne; m++) {
        int64_t cost = 0;
        int ok;
        for (int j = 0; j < ne; j++) {
            if (m & (1u << j))
                cost += sched_preempt_lost_gpu_ms(&w->v[elig[j]], NOW_MS);
        }
        if (best >= 0 && cost >= best)
            continue;
        for (int j = 0; j < ne; j++) {
            if (m & (1u << j))
                sched_cluster_release(w->c, w->v[elig[j]].req, w->v[elig[j]].slots);
        }
        ok = sched_place(w->c, r, NOW, slots, reason, sizeof(reason));
        for (int j = ne - 1; j >= 0; j--) {
            if (m & (1u << j))
                sched_cluster_commit(w->c, w->v[elig[j]].req, w->v[elig[j]].slots);
        }
        if (ok)
            best = cost;
    }
    return best;
}

static void random_rounds(int rounds, int nnodes, int ngangs, bool expect_exact)
{
    int plans = 0;
    int optimal = 0;
    int greedy = 0;
    for (int round = 0; round < rounds; round++) {
        struct world w;
        struct sched_preempt_plan p;
        int victims[MAX_GANGS];
        struct sched_slot slots[8];
        struct sched_request r = sched_request_make(1 + rnd(3), 1 + rnd(4));
        int64_t prio = 1 + rnd(4);
        int min_run = rnd(2) ? 0 : 600;
        char reason[SCHED_REASON_MAX];
        int64_t opt;
        int rc;
        random_world(&w, nnodes, ngangs);
        r.required_level = rnd(3) - 1;
        r.preferred_level = rnd(3) - 1;
        if (rnd(4) == 0) {
            r.ncapacity = 1;
            r.capacity[0] = (enum sched_capacity)rnd(2);
        }
        if (sched_place(w.c, &r, NOW, slots, reason, sizeof(reason))) {
            sched_cluster_free(w.c);
            continue;
        }
        opt = brute(&w, &r, prio, min_run);
        rc = plan_for(&w, &r, prio, min_run, victims, slots, &p);
        if (opt < 0) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, 1);
            assert_true(p.lost_gpu_ms >= opt);
            if (expect_exact && p.candidates <= SCHED_PREEMPT_EXACT_MAX) {
                if (p.lost_gpu_ms != opt)
                    fail_msg("round %d: plan loses %lld, optimum %lld", round,
                             (long long)p.lost_gpu_ms, (long long)opt);
                assert_true(p.exact);
            }
            plans++;
            optimal += p.lost_gpu_ms == opt;
            greedy += p.candidates > SCHED_PREEMPT_EXACT_MAX;
        }
        sched_cluster_free(w.c);
    }
    print_message("    %d plans, %d optimal, %d by the greedy alone (%d nodes, up to %d gangs)\n",
                  plans, optimal, greedy, nnodes, ngangs);
    assert_true(plans > rounds / 10);
}

static void test_random_exact_vs_brute(void **state)
{
    (void)state;
    random_rounds(400, 5, 12, true);
}

static void test_random_greedy_valid(void **state)
{
    (void)state;
    /* 8 nodes x 4 GPUs, up to 20 gangs: often more candidates than the exact search takes. */
    random_rounds(100, 8, 20, false);
}

/* Back to spot: the saving over the remaining time against the lost work redone on spot. */
/* The pass's one preemption (sched_preempt_first): jobs that started or are over quota are
 * passed over, a job at or below every victim's priority gets no plan, the first job with a plan
 * takes it and ends the search; a job still waiting for earlier victims ends it without a new
 * plan; too-young victims give a retry time to each job they would serve. */
static void test_preempt_first(void **state)
{
    struct world w;
    struct sched_quota_queue quota[1];
    struct sched_preempt_job jobs[5];
    struct sched_decision dec[5];
    struct sched_preempt_plan p;
    struct sched_request r = sched_request_make(1, 8);
    struct sched_slot slots[4];
    int victims[MAX_GANGS];
    struct mu_err err;
    int job = 0;
    (void)state;
    world_init(&w, 0);
    add_node(&w, "a", 0, 8, "");
    add_node(&w, "b", 0, 8, "");
    run1(&w, 0, 0xff, 1, 1000);
    run1(&w, 1, 0xff, 9, 1000)->preemptible = false;
    sched_quota_queues_init(quota, NULL, 0);
    memset(dec, 0, sizeof(dec));
    for (int i = 0; i < 5; i++) {
        jobs[i] = (struct sched_preempt_job){ .req = &r, .priority = 10, .queue = 0 };
        dec[i].verdict = SCHED_WAIT;
    }
    dec[0].verdict = SCHED_START;
    dec[1].over_quota = true;
    jobs[2].priority = 1; /* not above the only preemptible gang */
    jobs[3].priority = 5;
    memset(&p, 0, sizeof(p));
    p.victims = victims;
    p.slots = slots;
    assert_int_equal(
        sched_preempt_first(w.c, quota, 1, jobs, dec, 5, w.v, w.n, NOW_MS, 60, &p, &job, &err), 1);
    assert_int_equal(job, 3);
    assert_int_equal(p.nvictims, 1);
    assert_int_equal(victims[0], 0);

    jobs[2].waiting = true; /* its earlier victims still stop: the pass's plan stays theirs */
    assert_int_equal(
        sched_preempt_first(w.c, quota, 1, jobs, dec, 5, w.v, w.n, NOW_MS, 60, &p, &job, &err), 1);
    assert_int_equal(job, 2);
    assert_int_equal(p.nvictims, 0);

    jobs[2].waiting = false; /* the victim is too young for an hour's min_runtime_s */
    assert_int_equal(
        sched_preempt_first(w.c, quota, 1, jobs, dec, 5, w.v, w.n, NOW_MS, 3600, &p, &job, &err),
        0);
    assert_int_equal(job, -1);
    assert_int_equal(jobs[2].retry_at_ms, 0);
    assert_int_equal(jobs[3].retry_at_ms, S(NOW - 1000 + 3600));
    assert_int_equal(jobs[4].retry_at_ms, S(NOW - 1000 + 3600));

    w.v[0].preemptible = false; /* nothing may be stopped */
    assert_int_equal(
        sched_preempt_first(w.c, quota, 1, jobs, dec, 5, w.v, w.n, NOW_MS, 60, &p, &job, &err), 0);
    assert_int_equal(job, -1);
    sched_cluster_free(w.c);
}

static void test_spot_return_gain(void **state)
{
    (void)state;
    /* 10/h on-demand to 3/h spot, 1 h left, 2 min lost: 7 - 0.1 */
    assert_true(sched_spot_return_gain(10, 3, 3600, 120) > 6.89);
    assert_true(sched_spot_return_gain(10, 3, 3600, 120) < 6.91);
    /* Too little time left to pay for the restart. */
    assert_true(sched_spot_return_gain(10, 3, 60, 3600) < 0);
    /* Nothing to save: as dear or dearer, or nothing left. */
    assert_true(sched_spot_return_gain(10, 10, 3600, 0) == 0);
    assert_true(sched_spot_return_gain(3, 10, 3600, 0) == 0);
    assert_true(sched_spot_return_gain(10, 3, 0, 0) == 0);
    assert_true(sched_spot_return_gain(10, 3, 3600, -5) > 6.99); /* a clock step: no loss */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spot_return_gain),
        cmocka_unit_test(test_least_lost_work),
        cmocka_unit_test(test_checkpoint_cheaper),
        cmocka_unit_test(test_reclaim_ignores_priority),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_only_eligible),
        cmocka_unit_test(test_required_zone),
        cmocka_unit_test(test_no_straddle),
        cmocka_unit_test(test_wait_is_sooner),
        cmocka_unit_test(test_reasons_and_errors),
        cmocka_unit_test(test_greedy_many),
        cmocka_unit_test(test_preempt_first),
        cmocka_unit_test(test_random_exact_vs_brute),
        cmocka_unit_test(test_random_greedy_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

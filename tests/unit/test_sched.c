/* SPDX-License-Identifier: MIT */
/*
 * Placement core tests: hand-built clusters for each rule (all-or-nothing, capacity order and no
 * straddling, cheapest pool first, best fit, pool caps, required topology, node states), then a
 * randomized run that checks the invariants after every decision: no GPU given twice, a gang
 * placed whole or not at all, one capacity type per gang, the required domain held.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/sched.h"

#include "common/mu_banned.h"

static struct sched_cluster *cluster(int nlevels)
{
    struct sched_pool pools[3] = {
        { "spot-x", SCHED_SPOT, "A100", 4.0, 0 },
        { "spot-y", SCHED_SPOT, "A100", 3.0, 0 },
        { "od", SCHED_ON_DEMAND, "A100", 10.0, 0 },
    };
    struct sched_cluster *c = sched_cluster_new(pools, 3, nlevels, NULL);
    assert_non_null(c);
    return c;
}

static int add_node(struct sched_cluster *c, const char *name, int pool, int gpus, const char *zone)
{
    struct sched_node_spec s;
    int idx;
    memset(&s, 0, sizeof(s));
    (void)mu_snprintf(s.name, sizeof(s.name), "%s", name);
    s.pool = pool;
    s.ngpus = gpus;
    s.cpus = 96;
    s.memory_mb = 1 << 20;
    s.nlabels = zone ? 1 : 0;
    if (zone)
        (void)mu_snprintf(s.labels[0], sizeof(s.labels[0]), "%s", zone);
    idx = sched_cluster_node_add(c, &s, NULL);
    assert_true(idx >= 0);
    return idx;
}

static struct sched_request req(int tasks, int gpus)
{
    struct sched_request r;
    memset(&r, 0, sizeof(r));
    r.tasks = tasks;
    r.gpus_per_task = gpus;
    r.ncapacity = 2;
    r.capacity[0] = SCHED_SPOT;
    r.capacity[1] = SCHED_ON_DEMAND;
    r.required_level = -1;
    r.preferred_level = -1;
    return r;
}

static void test_all_or_nothing(void **state)
{
    struct sched_cluster *c = cluster(0);
    struct sched_request r = req(3, 8);
    struct sched_slot slots[3];
    char reason[256];
    (void)state;
    add_node(c, "a", 0, 8, NULL);
    add_node(c, "b", 0, 8, NULL);
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 0);
    assert_non_null(strstr(reason, "3x8"));
    assert_int_equal(sched_cluster_node_gpus_free(c, 0), 8); /* nothing taken */
    add_node(c, "c", 0, 8, NULL);
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    sched_cluster_commit(c, &r, slots);
    for (int n = 0; n < 3; n++)
        assert_int_equal(sched_cluster_node_gpus_free(c, n), 0);
    sched_cluster_release(c, &r, slots);
    assert_int_equal(sched_cluster_node_gpus_free(c, 1), 8);
    sched_cluster_free(c);
}

static void test_capacity_order_no_straddle(void **state)
{
    struct sched_cluster *c = cluster(0);
    struct sched_request r = req(2, 8);
    struct sched_slot slots[2];
    char reason[256];
    (void)state;
    add_node(c, "spot1", 0, 8, NULL);
    add_node(c, "od1", 2, 8, NULL);
    add_node(c, "od2", 2, 8, NULL);
    /* One spot node cannot hold 2x8: the whole gang goes on-demand. */
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    assert_int_not_equal(slots[0].node, 0);
    assert_int_not_equal(slots[1].node, 0);
    /* Spot only: no fit, and never one spot + one on-demand. */
    r.ncapacity = 1;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 0);
    /* On-demand first when the job says so. */
    r = req(1, 8);
    r.capacity[0] = SCHED_ON_DEMAND;
    r.capacity[1] = SCHED_SPOT;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    assert_true(slots[0].node == 1 || slots[0].node == 2);
    sched_cluster_free(c);
}

static void test_cheapest_pool_then_best_fit(void **state)
{
    struct sched_cluster *c = cluster(0);
    struct sched_request r = req(1, 2);
    struct sched_request four = req(1, 4);
    struct sched_slot slots[1];
    struct sched_slot s4[1];
    char reason[256];
    (void)state;
    add_node(c, "x1", 0, 8, NULL); /* spot-x: 4.0 */
    add_node(c, "y1", 1, 8, NULL); /* spot-y: 3.0, cheaper */
    add_node(c, "y2", 1, 8, NULL);
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    assert_true(slots[0].node == 1 || slots[0].node == 2);
    /* Make y2 fuller: best fit sends the next small task there, keeping y1 whole. */
    assert_int_equal(sched_place(c, &four, s4, reason, sizeof(reason)), 1);
    sched_cluster_commit(c, &four, s4);
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    assert_int_equal(slots[0].node, s4[0].node);
    sched_cluster_free(c);
}

static void test_pool_cap_and_states(void **state)
{
    struct sched_pool pools[1] = { { "capped", SCHED_SPOT, "H100", 1.0, 8 } };
    struct sched_cluster *c = sched_cluster_new(pools, 1, 0, NULL);
    struct sched_request r = req(2, 8);
    struct sched_slot slots[2];
    char reason[256];
    (void)state;
    add_node(c, "a", 0, 8, NULL);
    add_node(c, "b", 0, 8, NULL);
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 0); /* cap 8 GPUs */
    r.tasks = 1;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    sched_cluster_node_set_state(c, 0, SCHED_NODE_CORDONED);
    sched_cluster_node_set_state(c, 1, SCHED_NODE_LOST);
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 0);
    assert_non_null(strstr(reason, "no ready"));
    /* GPU type must match. */
    sched_cluster_node_set_state(c, 0, SCHED_NODE_READY);
    r.gpu_type = "A100";
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 0);
    sched_cluster_free(c);
}

static void test_required_topology(void **state)
{
    struct sched_cluster *c = cluster(1);
    struct sched_request r = req(2, 8);
    struct sched_slot slots[2];
    char reason[256];
    (void)state;
    add_node(c, "a1", 0, 8, "za");
    add_node(c, "b1", 0, 8, "zb");
    r.required_level = 0;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 0);
    r.required_level = -1;
    r.ncapacity = 1;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1); /* across zones */
    add_node(c, "b2", 0, 8, "zb");
    r.required_level = 0;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    assert_int_not_equal(slots[0].node, 0);
    assert_int_not_equal(slots[1].node, 0);
    /* Required "node" level (= nlevels): the whole gang on one node. */
    r = req(2, 4);
    r.required_level = 1;
    assert_int_equal(sched_place(c, &r, slots, reason, sizeof(reason)), 1);
    assert_int_equal(slots[0].node, slots[1].node);
    assert_int_equal(slots[0].gpus & slots[1].gpus, 0);
    sched_cluster_free(c);
}

/* ---- randomized invariants ---- */

static uint64_t rng = 88172645463325252ull;
static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

static void check_slots(const struct sched_cluster *c,
                        const struct sched_request *r,
                        const struct sched_slot *slots)
{
    int cap = -1;
    const char *domain = NULL;
    for (int t = 0; t < r->tasks; t++) {
        const struct sched_node_spec *s = sched_cluster_node_spec(c, slots[t].node);
        const struct sched_pool *p = sched_cluster_pool(c, s->pool);
        assert_int_equal(__builtin_popcountll(slots[t].gpus), r->gpus_per_task);
        assert_int_equal(slots[t].gpus >> s->ngpus, 0);
        assert_int_equal(sched_cluster_node_state(c, slots[t].node), SCHED_NODE_READY);
        if (cap < 0)
            cap = (int)p->capacity;
        assert_int_equal((int)p->capacity, cap); /* no straddling */
        if (r->required_level == 0) {
            if (!domain)
                domain = s->labels[0];
            assert_string_equal(domain, s->labels[0]);
        }
        for (int u = 0; u < t; u++) {
            if (slots[u].node == slots[t].node)
                assert_int_equal(slots[u].gpus & slots[t].gpus, 0);
        }
    }
}

static void test_random_invariants(void **state)
{
    (void)state;
    for (int round = 0; round < 300; round++) {
        struct sched_cluster *c = cluster(1);
        struct sched_slot *held[64];
        struct sched_request held_req[64];
        int nheld = 0;
        int nnodes = 1 + rnd(24);
        for (int n = 0; n < nnodes; n++) {
            char name[16];
            char zone[8];
            (void)mu_snprintf(name, sizeof(name), "n%d", n);
            (void)mu_snprintf(zone, sizeof(zone), "z%d", rnd(3));
            add_node(c, name, rnd(3), 1 + rnd(8), zone);
            if (rnd(10) == 0)
                sched_cluster_node_set_state(c, n, SCHED_NODE_CORDONED);
        }
        for (int k = 0; k < 60; k++) {
            struct sched_request r = req(1 + rnd(6), rnd(5));
            struct sched_slot *slots = calloc((size_t)r.tasks, sizeof(*slots));
            char reason[256];
            int total_free = 0;
            assert_non_null(slots);
            r.required_level = rnd(3) - 1;
            r.ncapacity = 1 + rnd(2);
            r.capacity[0] = (enum sched_capacity)rnd(2);
            r.capacity[1] = (enum sched_capacity)(1 - r.capacity[0]);
            for (int n = 0; n < nnodes; n++)
                total_free += sched_cluster_node_gpus_free(c, n);
            if (sched_place(c, &r, slots, reason, sizeof(reason)) == 1) {
                check_slots(c, &r, slots);
                sched_cluster_commit(c, &r, slots);
                if (nheld < 64) {
                    held[nheld] = slots;
                    held_req[nheld++] = r;
                    slots = NULL;
                } else {
                    sched_cluster_release(c, &r, slots);
                }
            } else {
                int after = 0;
                assert_true(reason[0] != '\0');
                for (int n = 0; n < nnodes; n++)
                    after += sched_cluster_node_gpus_free(c, n);
                assert_int_equal(after, total_free); /* nothing taken on failure */
            }
            free(slots);
            if (nheld && rnd(3) == 0) {
                int v = rnd(nheld);
                sched_cluster_release(c, &held_req[v], held[v]);
                free(held[v]);
                held[v] = held[--nheld];
                held_req[v] = held_req[nheld];
            }
        }
        while (nheld) {
            nheld--;
            sched_cluster_release(c, &held_req[nheld], held[nheld]);
            free(held[nheld]);
        }
        for (int n = 0; n < nnodes; n++)
            assert_int_equal(sched_cluster_node_gpus_free(c, n),
                             sched_cluster_node_spec(c, n)->ngpus);
        sched_cluster_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_capacity_order_no_straddle),
        cmocka_unit_test(test_cheapest_pool_then_best_fit),
        cmocka_unit_test(test_pool_cap_and_states),
        cmocka_unit_test(test_required_topology),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * MIG slices in the placement core (core/slice.c, issue #17): nodes whose GPUs are whole, in MIG
 * mode with slices of one or several profiles, or both; one-slice tasks fill one GPU before the
 * next, a gang of one profile lands on that profile's slices, whole-GPU jobs never get a GPU in
 * MIG mode or a slice, reasons name the profile, the pass and the preemption planner with slice
 * jobs, and a randomized check that no unit is ever given twice and every task gets what it
 * asked for.  Shared GPUs (gpu_milli, core/milli.c): shares packed best fit and never over 1000
 * per GPU, never a whole-GPU task on a shared GPU, preemption plans over shared victims.
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

static struct sched_cluster *cluster(void)
{
    struct sched_pool pools[2] = {
        { .name = "mig", .gpu_type = "H100", .price_per_hour = 4.0, .capacity = SCHED_SPOT },
        { .name = "od", .gpu_type = "H100", .price_per_hour = 9.0, .capacity = SCHED_ON_DEMAND },
    };
    struct sched_cluster *c = sched_cluster_new(pools, 2, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

/*
 * A node from a layout: one entry per GPU separated by ';', "W" a whole GPU, else its slices as
 * "COUNTxPROFILE" joined by '+' ("7x1g.10gb", "2x3g.40gb+1x1g.10gb").  Units: the GPUs first,
 * then the slices in order, as the worker reports them.
 */
static int add_node(struct sched_cluster *c, const char *name, int pool, const char *layout)
{
    struct sched_node_spec s;
    struct mu_err err;
    char buf[256];
    char *save = NULL;
    int ngpu = 0;

    cfix_node_spec(&s, c, name, pool, 0, "");
    mu_strlcpy(buf, layout, sizeof(buf));
    for (char *g = buf; g; g = strchr(g, ';') ? strchr(g, ';') + 1 : NULL)
        ngpu++;
    s.ngpus = ngpu;
    for (int gpu = 0; gpu < ngpu; gpu++) {
        char *g = strtok_r(gpu == 0 ? buf : NULL, ";", &save);
        assert_non_null(g);
        if (strcmp(g, "W") == 0)
            continue;
        s.unit[gpu] = SCHED_UNIT_MIG_PARENT;
        for (char *part = g; part && *part;) {
            char *plus = strchr(part, '+');
            int count = (int)strtol(part, NULL, 10);
            int id;
            if (plus)
                *plus = '\0';
            id = sched_cluster_profile_intern(c, strchr(part, 'x') + 1, &err);
            assert_true(id > 0);
            for (int k = 0; k < count; k++) {
                s.unit[s.ngpus] = (uint8_t)id;
                s.parent[s.ngpus] = (uint8_t)gpu;
                s.ngpus++;
            }
            part = plus ? plus + 1 : NULL;
        }
    }
    return cfix_node_add_spec(c, &s);
}

static struct sched_request slice_req(struct sched_cluster *c, int tasks, int per, const char *p)
{
    struct sched_request r = sched_request_make(tasks, per);
    r.slice_profile = sched_cluster_profile_find(c, p);
    assert_true(r.slice_profile > 0);
    return r;
}

/* The GPU (parent unit) of every bit of mask on node; -1 when they differ or one is not a slice. */
static int parent_of(struct sched_cluster *c, int node, uint64_t mask)
{
    const struct sched_node_spec *s = sched_cluster_node_spec(c, node);
    int parent = -2;
    for (uint64_t m = mask; m; m &= m - 1) {
        int u = __builtin_ctzll(m);
        int p =
            s->unit[u] != SCHED_UNIT_GPU && s->unit[u] != SCHED_UNIT_MIG_PARENT ? s->parent[u] : -1;
        if (parent != -2 && p != parent)
            return -1;
        parent = p;
    }
    return parent;
}

static void test_profiles(void **state)
{
    struct sched_cluster *c = cluster();
    struct mu_err err;
    (void)state;
    assert_int_equal(sched_cluster_profile_find(c, "1g.10gb"), 0);
    assert_int_equal(sched_cluster_profile_intern(c, "1g.10gb", &err), 1);
    assert_int_equal(sched_cluster_profile_intern(c, "3g.40gb", &err), 2);
    assert_int_equal(sched_cluster_profile_intern(c, "1g.10gb", &err), 1);
    assert_int_equal(sched_cluster_profile_find(c, "3g.40gb"), 2);
    assert_string_equal(sched_cluster_profile_name(c, 2), "3g.40gb");
    assert_null(sched_cluster_profile_name(c, 3));
    assert_int_equal(sched_cluster_profile_count(c), 2);
    assert_int_equal(sched_cluster_profile_intern(c, "", &err), -1);
    for (int i = 3; i <= SCHED_MAX_PROFILES; i++) {
        char name[16];
        (void)mu_snprintf(name, sizeof(name), "%dg.%dgb", i, i);
        assert_int_equal(sched_cluster_profile_intern(c, name, &err), i);
    }
    assert_int_equal(sched_cluster_profile_intern(c, "9c.9g.99gb", &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_false(sched_cluster_profile_present(c, 1));
    sched_cluster_free(c);
}

/* Seven one-slice jobs, one after another, fill GPU 0 before GPU 1 gets any. */
static void test_seven_fill_one_gpu(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_slot slots[7];
    struct sched_request r;
    char reason[SCHED_REASON_MAX];
    int n = add_node(c, "mig-1", 0, "7x1g.10gb;7x1g.10gb");
    int free_;
    int total;
    (void)state;

    r = slice_req(c, 1, 1, "1g.10gb");
    assert_int_equal(sched_cluster_node_gpus_total(c, n), 0);
    assert_true(sched_cluster_profile_present(c, r.slice_profile));
    for (int i = 0; i < 7; i++) {
        assert_int_equal(sched_place(c, &r, 0, &slots[i], reason, sizeof(reason)), 1);
        assert_int_equal(__builtin_popcountll(slots[i].gpus), 1);
        assert_int_equal(parent_of(c, n, slots[i].gpus), 0);
        sched_cluster_commit(c, &r, &slots[i]);
    }
    sched_cluster_node_slices(c, n, r.slice_profile, &free_, &total);
    assert_int_equal(free_, 7);
    assert_int_equal(total, 14);
    /* The eighth goes to GPU 1; free one on GPU 0 and the next goes back there. */
    {
        struct sched_slot s8;
        assert_int_equal(sched_place(c, &r, 0, &s8, reason, sizeof(reason)), 1);
        assert_int_equal(parent_of(c, n, s8.gpus), 1);
        sched_cluster_commit(c, &r, &s8);
        sched_cluster_release(c, &r, &slots[3]);
        assert_int_equal(sched_place(c, &r, 0, &slots[3], reason, sizeof(reason)), 1);
        assert_int_equal(parent_of(c, n, slots[3].gpus), 0);
    }
    /* A seven-slice gang on one node: only 6 free on GPU 1 + 1 on GPU 0, so it spans them. */
    r = slice_req(c, 7, 1, "1g.10gb");
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 1);
    sched_cluster_free(c);
}

/* A 2-task gang of 3g.40gb on a GPU with 2 x 3g.40gb + 1 x 1g.10gb gets the two 3g slices. */
static void test_gang_one_profile(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_slot slots[4];
    struct sched_request r;
    char reason[SCHED_REASON_MAX];
    int n = add_node(c, "mig-2", 0, "2x3g.40gb+1x1g.10gb;W");
    const struct sched_node_spec *s = sched_cluster_node_spec(c, n);
    (void)state;

    r = slice_req(c, 2, 1, "3g.40gb");
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 1);
    for (int t = 0; t < 2; t++) {
        int u = __builtin_ctzll(slots[t].gpus);
        assert_int_equal(__builtin_popcountll(slots[t].gpus), 1);
        assert_int_equal(s->unit[u], r.slice_profile);
        assert_int_equal(s->parent[u], 0);
    }
    assert_true(slots[0].gpus != slots[1].gpus);
    sched_cluster_commit(c, &r, slots);
    /* No third 3g.40gb: the reason names the profile and what is free. */
    r = slice_req(c, 1, 1, "3g.40gb");
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "needs 1 x 3g.40gb on spot or on-demand; none free now");
    r = slice_req(c, 4, 1, "1g.10gb");
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason,
                        "needs 4 x 1g.10gb on spot or on-demand; only 1 x 1g.10gb free now");
    r = slice_req(c, 1, 2, "1g.10gb");
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "no ready spot or on-demand node with 2+ 1g.10gb slices");
    sched_cluster_free(c);
}

/* Whole-GPU jobs see whole GPUs only: never a GPU in MIG mode, never a slice. */
static void test_whole_never_takes_mig(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_slot slots[4];
    struct sched_request r = sched_request_make(1, 1);
    struct sched_request s1;
    char reason[SCHED_REASON_MAX];
    int n = add_node(c, "mixed", 0, "7x1g.10gb;W;W");
    (void)state;

    assert_int_equal(sched_cluster_node_gpus_total(c, n), 2);
    assert_int_equal(sched_cluster_node_gpus_free(c, n), 2);
    s1 = slice_req(c, 1, 1, "1g.10gb");
    assert_int_equal(sched_place(c, &s1, 0, slots, reason, sizeof(reason)), 1);
    sched_cluster_commit(c, &s1, slots);
    assert_int_equal(sched_cluster_node_gpus_free(c, n), 2);
    r = sched_request_make(1, 3);
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    r = sched_request_make(2, 1);
    assert_int_equal(sched_place(c, &r, 0, &slots[1], reason, sizeof(reason)), 1);
    assert_int_equal(slots[1].gpus | slots[2].gpus, UINT64_C(0x6)); /* GPUs 1 and 2 */
    sched_cluster_commit(c, &r, &slots[1]);
    assert_int_equal(sched_cluster_node_gpus_free(c, n), 0);
    assert_int_equal(sched_cluster_pool_gpus_used(c, 0), 2); /* slices are not whole GPUs */
    r = sched_request_make(1, 1);
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "needs 1x1 GPUs on spot or on-demand; none free now");
    /* Slices still go. */
    assert_int_equal(sched_place(c, &s1, 0, slots, reason, sizeof(reason)), 1);
    sched_cluster_free(c);
}

/* Slices of a partly used GPU go first, across profiles. */
static void test_best_fit_partly_used(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_slot a;
    struct sched_slot b;
    struct sched_request r1;
    struct sched_request r3;
    char reason[SCHED_REASON_MAX];
    int n = add_node(c, "mig-3", 0, "2x3g.40gb+1x1g.10gb;2x3g.40gb+1x1g.10gb");
    (void)state;

    r1 = slice_req(c, 1, 1, "1g.10gb");
    r3 = slice_req(c, 1, 1, "3g.40gb");
    /* A 3g on GPU 0, then the 1g goes to GPU 0 too (partly used), not to the empty GPU 1. */
    assert_int_equal(sched_place(c, &r3, 0, &a, reason, sizeof(reason)), 1);
    assert_int_equal(parent_of(c, n, a.gpus), 0);
    sched_cluster_commit(c, &r3, &a);
    assert_int_equal(sched_place(c, &r1, 0, &b, reason, sizeof(reason)), 1);
    assert_int_equal(parent_of(c, n, b.gpus), 0);
    sched_cluster_commit(c, &r1, &b);
    /* A task of 2 x 3g.40gb takes one GPU that holds both (GPU 1), not one from each. */
    r3 = slice_req(c, 1, 2, "3g.40gb");
    assert_int_equal(sched_place(c, &r3, 0, &a, reason, sizeof(reason)), 1);
    assert_int_equal(parent_of(c, n, a.gpus), 1);
    sched_cluster_free(c);
}

static void test_bad_specs(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_node_spec s;
    struct sched_request r = sched_request_make(1, 1);
    struct sched_slot slot;
    struct mu_err err;
    char reason[SCHED_REASON_MAX];
    (void)state;

    memset(&s, 0, sizeof(s));
    mu_strlcpy(s.name, "bad", sizeof(s.name));
    s.ngpus = 2;
    s.unit[1] = 1; /* profile 1 is not known */
    assert_int_equal(sched_cluster_node_add(c, &s, &err), -1);
    assert_non_null(strstr(err.msg, "unknown MIG profile"));
    assert_int_equal(sched_cluster_profile_intern(c, "1g.10gb", &err), 1);
    s.parent[1] = 0; /* GPU 0 is whole, not in MIG mode */
    assert_int_equal(sched_cluster_node_add(c, &s, &err), -1);
    assert_non_null(strstr(err.msg, "parent is not a GPU in MIG mode"));
    s.unit[0] = SCHED_UNIT_MIG_PARENT;
    assert_true(sched_cluster_node_add(c, &s, &err) >= 0);
    /* A request for an unknown profile id, or for no slices, is invalid. */
    r.slice_profile = 2;
    assert_int_equal(sched_place(c, &r, 0, &slot, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "invalid request: MIG slice profile");
    r = sched_request_make(1, 0);
    r.slice_profile = 1;
    assert_int_equal(sched_place(c, &r, 0, &slot, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "invalid request: MIG slice profile");
    /* A node with work placed cannot come back with other slices. */
    r = sched_request_make(1, 1);
    r.slice_profile = 1;
    assert_int_equal(sched_place(c, &r, 0, &slot, reason, sizeof(reason)), 1);
    sched_cluster_commit(c, &r, &slot);
    s.unit[0] = SCHED_UNIT_GPU;
    s.ngpus = 1;
    assert_int_equal(sched_cluster_node_add(c, &s, &err), -1);
    assert_int_equal(err.code, MU_E_STATE);
    sched_cluster_free(c);
}

/* A pass with slice and whole-GPU jobs; the preemption planner leaves slice jobs waiting. */
static void test_pass_and_preempt(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_request reqs[4];
    struct sched_slot slots[4][8];
    struct sched_pass_job jobs[4];
    struct sched_decision out[4];
    struct mu_err err;
    (void)state;

    (void)add_node(c, "m1", 0, "7x1g.10gb;W");
    reqs[0] = slice_req(c, 7, 1, "1g.10gb");
    reqs[1] = sched_request_make(1, 1);
    reqs[2] = slice_req(c, 1, 1, "1g.10gb"); /* no slice left: waits */
    reqs[3] = sched_request_make(1, 1);      /* no GPU left: waits */
    for (int i = 0; i < 4; i++)
        jobs[i] = (struct sched_pass_job){ .req = &reqs[i], .run_s = 600, .slots = slots[i] };
    assert_int_equal(sched_pass(c, jobs, 4, NULL, 0, 0, out, &err), 2);
    assert_int_equal(out[0].verdict, SCHED_START);
    assert_int_equal(out[1].verdict, SCHED_START);
    assert_int_equal(slots[1][0].gpus, UINT64_C(0x2));
    assert_int_not_equal(out[2].verdict, SCHED_START);
    assert_int_not_equal(out[3].verdict, SCHED_START);
    {
        struct sched_victim v = {
            .req = &reqs[0], .slots = slots[0], .priority = -1, .preemptible = true, .started_ms = 0
        };
        struct sched_slot ps[1];
        int victims[1];
        struct sched_preempt_plan plan = { .victims = victims, .slots = ps };
        assert_int_equal(
            sched_preempt_plan(c, &reqs[2], 10, INT64_C(3600) * 1000, 0, &v, 1, &plan, &err), 0);
        assert_non_null(strstr(plan.reason, "MIG slice"));
    }
    sched_cluster_free(c);
}

/* Random gangs of whole GPUs and slices of two profiles: no unit twice, every task gets what it
 * asked for, and releases put everything back. */
static void test_random_invariants(void **state)
{
    struct sched_cluster *c = cluster();
    enum { NJOBS = 64 };
    struct sched_request reqs[NJOBS];
    struct sched_slot slots[NJOBS][8];
    bool live[NJOBS] = { false };
    unsigned seed = 17;
    char reason[SCHED_REASON_MAX];
    (void)state;

    (void)add_node(c, "a", 0, "7x1g.10gb;2x3g.40gb+1x1g.10gb;W;W");
    (void)add_node(c, "b", 0, "2x3g.40gb+1x1g.10gb;W");
    (void)add_node(c, "c", 1, "W;W;7x1g.10gb");
    for (int step = 0; step < 4000; step++) {
        int j = (int)((seed = seed * 1103515245u + 12345u) >> 16) % NJOBS;
        if (live[j]) {
            sched_cluster_release(c, &reqs[j], slots[j]);
            live[j] = false;
            continue;
        }
        switch ((seed >> 8) % 3) {
        case 0:
            reqs[j] = sched_request_make(1 + (int)(seed >> 4) % 3, 1 + (int)(seed >> 12) % 2);
            break;
        case 1:
            reqs[j] = slice_req(c, 1 + (int)(seed >> 4) % 4, 1 + (int)(seed >> 12) % 2, "1g.10gb");
            break;
        default:
            reqs[j] = slice_req(c, 1 + (int)(seed >> 4) % 2, 1, "3g.40gb");
            break;
        }
        if (sched_place(c, &reqs[j], 0, slots[j], reason, sizeof(reason)) != 1)
            continue;
        for (int t = 0; t < reqs[j].tasks; t++) {
            const struct sched_node_spec *s = sched_cluster_node_spec(c, slots[j][t].node);
            assert_int_equal(__builtin_popcountll(slots[j][t].gpus), reqs[j].gpus_per_task);
            for (uint64_t m = slots[j][t].gpus; m; m &= m - 1) {
                int u = __builtin_ctzll(m);
                assert_int_equal(s->unit[u], reqs[j].slice_profile);
            }
            for (int k = 0; k < NJOBS; k++) {
                for (int t2 = 0; live[k] && t2 < reqs[k].tasks; t2++) {
                    if (slots[k][t2].node == slots[j][t].node)
                        assert_int_equal(slots[k][t2].gpus & slots[j][t].gpus, 0);
                }
            }
        }
        sched_cluster_commit(c, &reqs[j], slots[j]);
        live[j] = true;
    }
    for (int j = 0; j < NJOBS; j++) {
        if (live[j])
            sched_cluster_release(c, &reqs[j], slots[j]);
    }
    for (int n = 0; n < 3; n++) {
        int free_;
        int total;
        sched_cluster_node_slices(c, n, 1, &free_, &total);
        assert_int_equal(free_, total);
        assert_int_equal(sched_cluster_node_gpus_free(c, n), sched_cluster_node_gpus_total(c, n));
    }
    assert_int_equal(sched_cluster_pool_gpus_used(c, 0), 0);
    sched_cluster_free(c);
}

/* ---- shared (time-sliced) GPUs: gpu_milli (core/milli.c) ---- */

static struct sched_cluster *shared_cluster(void)
{
    struct sched_pool pools[2] = {
        { .name = "plain", .gpu_type = "L4", .price_per_hour = 1.0, .capacity = SCHED_SPOT },
        { .name = "shared",
          .gpu_type = "L4",
          .price_per_hour = 2.0,
          .capacity = SCHED_SPOT,
          .shared = true },
    };
    struct sched_cluster *c = sched_cluster_new(pools, 2, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

static struct sched_request milli_req(int tasks, int milli)
{
    struct sched_request r = sched_request_make(tasks, 1);
    r.gpu_milli = milli;
    return r;
}

static void test_milli_packing(void **state)
{
    struct sched_cluster *c = shared_cluster();
    struct sched_slot slots[8];
    struct sched_request r = milli_req(1, 300);
    struct sched_request whole = sched_request_make(1, 1);
    char reason[SCHED_REASON_MAX];
    int plain = add_node(c, "p1", 0, "W;W");
    int sh = add_node(c, "s1", 1, "W;W");
    (void)state;

    /* 300m x 4: three share GPU 0 (best fit: the fullest that holds it), the fourth GPU 1. */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sched_place(c, &r, 0, &slots[i], reason, sizeof(reason)), 1);
        assert_int_equal(slots[i].node, sh);
        assert_int_equal(slots[i].gpus, i < 3 ? UINT64_C(1) : UINT64_C(2));
        sched_cluster_commit(c, &r, &slots[i]);
    }
    assert_int_equal(sched_cluster_gpu_milli(c, sh, 0), 900);
    assert_int_equal(sched_cluster_gpu_milli(c, sh, 1), 300);
    assert_int_equal(sched_cluster_node_gpus_free(c, sh), 0);
    assert_int_equal(sched_cluster_pool_gpus_used(c, 1), 2);
    /* A whole-GPU job goes to the plain pool; never to a GPU with shares. */
    assert_int_equal(sched_place(c, &whole, 0, &slots[4], reason, sizeof(reason)), 1);
    assert_int_equal(slots[4].node, plain);
    /* 100m still fits GPU 0 (900 + 100 = 1000), then nothing of 200m fits GPU 0. */
    r = milli_req(1, 100);
    assert_int_equal(sched_place(c, &r, 0, &slots[5], reason, sizeof(reason)), 1);
    assert_int_equal(slots[5].gpus, UINT64_C(1));
    sched_cluster_commit(c, &r, &slots[5]);
    assert_int_equal(sched_cluster_gpu_milli(c, sh, 0), 1000);
    r = milli_req(3, 400);
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason,
                        "needs 3 x 400m GPU on spot or on-demand; only 1 x 400m GPU free now");
    /* Releases give the shares back; an emptied GPU is whole again. */
    r = milli_req(1, 300);
    sched_cluster_release(c, &r, &slots[3]);
    assert_int_equal(sched_cluster_gpu_milli(c, sh, 1), 0);
    assert_int_equal(sched_cluster_node_gpus_free(c, sh), 1);
    assert_int_equal(sched_cluster_pool_gpus_used(c, 1), 1);
    /* No shared pool of the type: the reason says so. */
    r = milli_req(1, 500);
    r.ncapacity = 1;
    r.capacity[0] = SCHED_ON_DEMAND;
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "no ready on-demand node in a shared pool");
    /* gpu_milli needs one GPU a task and no slices. */
    r = milli_req(1, 500);
    r.gpus_per_task = 2;
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "invalid request: gpu_milli");
    r = milli_req(1, 1001);
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 0);
    sched_cluster_free(c);
}

/* A gang of 600m shares: no two on one GPU (1200 > 1000), so 3 tasks need 3 GPUs. */
static void test_milli_gang(void **state)
{
    struct sched_cluster *c = shared_cluster();
    struct sched_slot slots[4];
    struct sched_request r = milli_req(3, 600);
    char reason[SCHED_REASON_MAX];
    (void)state;

    (void)add_node(c, "s1", 1, "W;W");
    (void)add_node(c, "s2", 1, "W;W");
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 1);
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < a; b++)
            assert_false(slots[a].node == slots[b].node && slots[a].gpus == slots[b].gpus);
    }
    sched_cluster_commit(c, &r, slots);
    /* 4 x 250m: the three 400m holes first (best fit), then a whole GPU. */
    r = milli_req(4, 250);
    assert_int_equal(sched_place(c, &r, 0, slots, reason, sizeof(reason)), 1);
    sched_cluster_commit(c, &r, slots);
    for (int n = 0; n < 2; n++) {
        for (int g = 0; g < 2; g++)
            assert_true(sched_cluster_gpu_milli(c, n, g) <= SCHED_MILLI);
    }
    sched_cluster_free(c);
}

/* A pass remembers what failed by shape family, and the share is part of the shape: 600m failing
 * on a GPU with 400m left says nothing of 300m, which fits there. */
static void test_milli_pass_memo(void **state)
{
    struct sched_cluster *c = shared_cluster();
    struct sched_request a = milli_req(1, 600);
    struct sched_request b = milli_req(1, 600);
    struct sched_request small = milli_req(1, 300);
    struct sched_slot sa[1];
    struct sched_slot sb[1];
    struct sched_slot ss[1];
    struct sched_pass_job jobs[3] = { { &a, 60, sa, 0 }, { &b, 60, sb, 0 }, { &small, 60, ss, 0 } };
    struct sched_decision out[3];
    (void)state;

    (void)add_node(c, "s1", 1, "W");
    assert_int_equal(sched_pass(c, jobs, 3, NULL, 0, 0, out, NULL), 2);
    assert_int_equal(out[0].verdict, SCHED_START);
    assert_int_not_equal(out[1].verdict, SCHED_START);
    assert_int_equal(out[2].verdict, SCHED_START);
    assert_int_equal(sched_cluster_gpu_milli(c, 0, 0), 900);
    sched_cluster_free(c);
}

/* The same across the pass's other memos: 3 x 600m never fit on 2 GPUs, 3 x 300m do once the
 * running job's shares end, and the memo of the one must not answer for the other. */
static void test_milli_idle_memo(void **state)
{
    struct sched_cluster *c = shared_cluster();
    struct sched_request run = milli_req(2, 600);
    struct sched_request big = milli_req(3, 600);
    struct sched_request small = milli_req(3, 300);
    struct sched_slot run_slots[2];
    struct sched_slot sb[3];
    struct sched_slot ss[3];
    struct sched_running running = { &run, run_slots, 100 };
    struct sched_pass_job jobs[2] = { { &big, 60, sb, 0 }, { &small, 60, ss, 0 } };
    struct sched_decision out[2];
    char reason[SCHED_REASON_MAX];
    (void)state;

    (void)add_node(c, "s1", 1, "W;W");
    assert_int_equal(sched_place(c, &run, 0, run_slots, reason, sizeof(reason)), 1);
    sched_cluster_commit(c, &run, run_slots);
    assert_int_equal(sched_pass(c, jobs, 2, &running, 1, 0, out, NULL), 0);
    assert_non_null(strstr(out[0].reason, "cannot fit until nodes join"));
    assert_int_equal(out[1].verdict, SCHED_RESERVED);
    assert_int_equal(out[1].est_start_s, 100);
    sched_cluster_free(c);
}

/* Random shares, whole GPUs and a preemption plan over shared victims: never over 1000 per GPU,
 * never a whole-GPU task on a shared GPU, and every release puts it all back. */
static void test_milli_random(void **state)
{
    struct sched_cluster *c = shared_cluster();
    enum { NJOBS = 64 };
    struct sched_request reqs[NJOBS];
    struct sched_slot slots[NJOBS][4];
    bool live[NJOBS] = { false };
    unsigned seed = 99;
    char reason[SCHED_REASON_MAX];
    (void)state;

    (void)add_node(c, "s1", 1, "W;W;W;W");
    (void)add_node(c, "s2", 1, "W;W");
    (void)add_node(c, "p1", 0, "W;W");
    for (int step = 0; step < 5000; step++) {
        int j = (int)((seed = seed * 1103515245u + 12345u) >> 16) % NJOBS;
        int sum[3][4] = { { 0 } };
        if (live[j]) {
            sched_cluster_release(c, &reqs[j], slots[j]);
            live[j] = false;
            continue;
        }
        if ((seed >> 9) % 3 == 0)
            reqs[j] = sched_request_make(1 + (int)(seed >> 4) % 2, 1);
        else
            reqs[j] = milli_req(1 + (int)(seed >> 4) % 3, 1 + (int)(seed >> 11) % 1000);
        if (sched_place(c, &reqs[j], 0, slots[j], reason, sizeof(reason)) != 1)
            continue;
        sched_cluster_commit(c, &reqs[j], slots[j]);
        live[j] = true;
        for (int k = 0; k < NJOBS; k++) {
            for (int t = 0; live[k] && t < reqs[k].tasks; t++) {
                int n = slots[k][t].node;
                int g = __builtin_ctzll(slots[k][t].gpus);
                sum[n][g] += reqs[k].gpu_milli > 0 ? reqs[k].gpu_milli : 100000;
            }
        }
        for (int n = 0; n < 3; n++) {
            for (int g = 0; g < 4; g++) {
                /* a whole-GPU task alone (100000), or shares adding up to at most 1000 */
                assert_true(sum[n][g] == 100000 || sum[n][g] <= SCHED_MILLI);
                if (sum[n][g] <= SCHED_MILLI)
                    assert_int_equal(sched_cluster_gpu_milli(c, n, g), sum[n][g]);
            }
        }
    }
    {
        struct sched_victim v[NJOBS];
        int nv = 0;
        int victims[NJOBS];
        struct sched_slot ps[8];
        struct sched_preempt_plan plan = { .victims = victims, .slots = ps };
        struct sched_request big = sched_request_make(2, 4);
        struct mu_err err;
        for (int k = 0; k < NJOBS; k++) {
            if (live[k])
                v[nv++] = (struct sched_victim){
                    .req = &reqs[k], .slots = slots[k], .priority = -1, .preemptible = true
                };
        }
        assert_true(sched_preempt_plan(c, &big, 10, INT64_C(3600) * 1000, 0, v, nv, &plan, &err)
                    >= 0);
    }
    for (int j = 0; j < NJOBS; j++) {
        if (live[j])
            sched_cluster_release(c, &reqs[j], slots[j]);
    }
    for (int n = 0; n < 3; n++) {
        assert_int_equal(sched_cluster_node_gpus_free(c, n), sched_cluster_node_gpus_total(c, n));
        for (int g = 0; g < 4; g++)
            assert_int_equal(sched_cluster_gpu_milli(c, n, g), 0);
    }
    assert_int_equal(sched_cluster_pool_gpus_used(c, 1), 0);
    sched_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_seven_fill_one_gpu),
        cmocka_unit_test(test_gang_one_profile),
        cmocka_unit_test(test_whole_never_takes_mig),
        cmocka_unit_test(test_best_fit_partly_used),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_pass_and_preempt),
        cmocka_unit_test(test_random_invariants),
        cmocka_unit_test(test_milli_packing),
        cmocka_unit_test(test_milli_gang),
        cmocka_unit_test(test_milli_pass_memo),
        cmocka_unit_test(test_milli_idle_memo),
        cmocka_unit_test(test_milli_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

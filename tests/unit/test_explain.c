/* SPDX-License-Identifier: MIT */
/*
 * sched_explain (core/explain.c, issue #18): why a job waits, computed on demand from the code the
 * pass runs.  Per level the largest free domain against the largest that exists ("busy" versus
 * "not until nodes join"); the estimated start from the pass's reservation search naming the gang
 * whose end makes room, or a cool-down's end; backfill beside another job's reservation; and the
 * cluster left exactly as it was, generation included.  Small hand-built clusters, no clock.
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

#define NOW ((int64_t)1700000000)

static const char *const level_names[] = { "zone", "rack" };

/* Pools: 0 spot, 1 on-demand. */
static struct sched_cluster *cluster(void)
{
    struct sched_pool pools[2] = {
        { .name = "spot", .gpu_type = "A100", .price_per_hour = 3.0, .capacity = SCHED_SPOT },
        { .name = "od", .gpu_type = "A100", .price_per_hour = 10.0, .capacity = SCHED_ON_DEMAND },
    };
    struct sched_cluster *c = sched_cluster_new(pools, 2, level_names, 2, NULL);
    assert_non_null(c);
    return c;
}

/* An 8-GPU node in zone z1 and the given rack. */
static int add_node(struct sched_cluster *c, const char *name, int pool, const char *rack)
{
    char path[64];
    (void)mu_snprintf(path, sizeof(path), "z1/%s", rack);
    return cfix_node_add(c, name, pool, 8, path);
}

/* A busy rack (two nodes, one 2x8 gang ending at NOW + 1000) and a one-node rack, half used by a
 * gang ending at NOW + 50: a 2x8 gang in one rack is busy, not impossible, and starts when the
 * 2x8 gang ends (the 1x4 gang's end does not make room). */
static void test_levels_and_start(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_request big = sched_request_make(2, 8);
    struct sched_request small = sched_request_make(1, 4);
    struct sched_request r = sched_request_make(2, 8);
    struct sched_slot big_slots[2];
    struct sched_slot small_slots[1];
    struct sched_running running[2];
    struct sched_explain e;
    struct mu_err err;
    uint64_t gen;

    (void)state;
    big_slots[0] = (struct sched_slot){ add_node(c, "a1", 1, "r1"), 0xff };
    big_slots[1] = (struct sched_slot){ add_node(c, "a2", 1, "r1"), 0xff };
    small_slots[0] = (struct sched_slot){ add_node(c, "b1", 1, "r2"), 0x0f };
    sched_cluster_commit(c, &small, small_slots);
    sched_cluster_commit(c, &big, big_slots);
    running[0] = (struct sched_running){ &small, small_slots, NOW + 50 };
    running[1] = (struct sched_running){ &big, big_slots, NOW + 1000 };
    r.capacity[0] = SCHED_ON_DEMAND;
    r.ncapacity = 1;
    r.required_level = 1; /* rack */
    gen = sched_cluster_generation(c);

    assert_int_equal(sched_explain(c, &r, 600, running, 2, NULL, NOW, &e, &err), 0);
    assert_false(e.fits_now);
    assert_int_equal(e.nlevels, 3);
    /* rack: the largest free rack takes no 8-GPU task now; the largest rack takes both. */
    assert_false(e.levels[1].fits_now);
    assert_int_equal(e.levels[1].free_tasks, 0);
    assert_true(e.levels[1].fits_idle);
    assert_int_equal(e.levels[1].max_tasks, 2);
    /* node: one node never takes 2x8. */
    assert_false(e.levels[2].fits_idle);
    assert_int_equal(e.levels[2].max_tasks, 1);
    assert_int_equal(e.est_start_s, NOW + 1000);
    assert_int_equal(e.freed_by, 1);
    assert_int_equal(e.backfill, SCHED_BACKFILL_NONE);
    assert_int_equal(sched_cluster_generation(c), gen);
    assert_int_equal(sched_cluster_node_gpus_free(c, big_slots[0].node), 0);
    assert_int_equal(sched_cluster_node_gpus_free(c, small_slots[0].node), 4);

    /* 3x8 in one rack: no rack has three nodes; no estimated start. */
    r.tasks = 3;
    assert_int_equal(sched_explain(c, &r, 600, running, 2, NULL, NOW, &e, &err), 0);
    assert_false(e.levels[1].fits_idle);
    assert_int_equal(e.levels[1].max_tasks, 2);
    assert_int_equal(e.est_start_s, 0);
    assert_int_equal(e.freed_by, -1);
    sched_cluster_free(c);
}

/* A spot-only job on a pool cooling down: it starts when the cool-down ends (freed_by -1). */
static void test_cooldown_start(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_request r = sched_request_make(1, 8);
    struct sched_explain e;
    struct mu_err err;

    (void)state;
    (void)add_node(c, "s1", 0, "r1");
    sched_cluster_pool_cooldown(c, 0, NOW + 600);
    r.ncapacity = 1; /* spot only */
    assert_int_equal(sched_explain(c, &r, 600, NULL, 0, NULL, NOW, &e, &err), 0);
    assert_false(e.fits_now);
    assert_int_equal(e.levels[2].free_tasks, 0);
    assert_true(e.levels[2].fits_idle);
    assert_int_equal(e.est_start_s, NOW + 600);
    assert_int_equal(e.freed_by, -1);
    sched_cluster_free(c);
}

/* Nothing runs and no pool cools down, so the reservation search has no event to try: the reason
 * it remembers for the job must still be the placement's (it was an uninitialised one, which the
 * next pass then gave the job), the same a pass gives without an explain first. */
static void test_no_events_remembers_the_reason(void **state)
{
    struct sched_request r = sched_request_make(2, 8);
    struct sched_slot slots[2];
    struct sched_pass_job job = { .req = &r, .run_s = 600, .slots = slots };
    struct sched_decision fresh;
    struct sched_decision after;
    struct sched_explain e;
    struct mu_err err;
    struct sched_cluster *c = cluster();

    (void)state;
    (void)add_node(c, "s1", 0, "r1"); /* one node of 8: a 2x8 gang never fits */
    assert_int_equal(sched_pass(c, &job, 1, NULL, 0, NOW, &fresh, &err), 0);
    sched_cluster_free(c);

    c = cluster();
    (void)add_node(c, "s1", 0, "r1");
    assert_int_equal(sched_explain(c, &r, 600, NULL, 0, NULL, NOW, &e, &err), 0);
    assert_false(e.fits_now);
    assert_int_equal(e.est_start_s, 0);
    assert_int_equal(sched_pass(c, &job, 1, NULL, 0, NOW, &after, &err), 0);
    assert_int_equal(after.verdict, fresh.verdict);
    assert_string_equal(after.reason, fresh.reason);
    assert_true(fresh.reason[0] != '\0');
    sched_cluster_free(c);
}

/* Another job's reservation holds node a1 from NOW + 100: a job that fits only there delays it
 * unless it ends by then; with a second free node it fits beside it. */
static void test_backfill(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_request held = sched_request_make(1, 8);
    struct sched_request r = sched_request_make(1, 8);
    struct sched_slot held_slots[1];
    struct sched_reservation res = { &held, held_slots, NOW + 100 };
    struct sched_explain e;
    struct mu_err err;

    (void)state;
    held_slots[0] = (struct sched_slot){ add_node(c, "a1", 1, "r1"), 0xff };
    assert_int_equal(sched_explain(c, &r, 3600, NULL, 0, &res, NOW, &e, &err), 0);
    assert_true(e.fits_now);
    assert_int_equal(e.backfill, SCHED_BACKFILL_DELAYS);
    assert_int_equal(e.est_start_s, NOW + 100);
    assert_int_equal(sched_explain(c, &r, 100, NULL, 0, &res, NOW, &e, &err), 0);
    assert_int_equal(e.backfill, SCHED_BACKFILL_FITS);
    (void)add_node(c, "a2", 1, "r2");
    assert_int_equal(sched_explain(c, &r, 3600, NULL, 0, &res, NOW, &e, &err), 0);
    assert_int_equal(e.backfill, SCHED_BACKFILL_FITS);
    assert_int_equal(e.est_start_s, 0);
    /* The holds are gone again: a 2x8 gang fits on the two nodes. */
    r.tasks = 2;
    assert_int_equal(sched_place(c, &r, NOW, (struct sched_slot[2]){ 0 }, NULL, 0), 1);
    sched_cluster_free(c);
}

static void test_bad_arguments(void **state)
{
    struct sched_cluster *c = cluster();
    struct sched_request r = sched_request_make(0, 8);
    struct sched_request held = sched_request_make(1, 8);
    struct sched_slot bad_slot = { 7, 0xff };
    struct sched_reservation res = { &held, &bad_slot, NOW + 100 };
    struct sched_explain e;
    struct mu_err err;

    (void)state;
    assert_int_equal(sched_explain(c, &r, 600, NULL, 0, NULL, NOW, &e, &err), -1);
    assert_int_equal(err.code, MU_E_INVAL);
    r.tasks = 1;
    assert_int_equal(sched_explain(c, &r, 600, NULL, -1, NULL, NOW, &e, &err), -1);
    assert_int_equal(sched_explain(c, &r, 600, NULL, 0, &res, NOW, &e, &err), -1);
    assert_non_null(strstr(err.msg, "reservation"));
    sched_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_and_start),
        cmocka_unit_test(test_cooldown_start),
        cmocka_unit_test(test_no_events_remembers_the_reason),
        cmocka_unit_test(test_backfill),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

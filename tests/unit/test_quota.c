/* SPDX-License-Identifier: MIT */
/*
 * Quota tests (issue #11, docs/quotas.md): admission within nominal quota, borrowing from a
 * cohort within borrow_limit and lend_limit, a queue without quota left alone, the reasons; the
 * pass with quotas (a queue at quota waits and blocks nobody, a start beyond nominal is marked
 * borrowed and charged as the pass goes, a capacity type without room is skipped for the next);
 * and which running gangs a preemptor may take (protected, by priority, reclaim).  The core
 * only: no daemon, no clock.
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

#define NOW 100000

enum { RESEARCH, PROD, BATCH, SOLO, NQ };

/* research and prod share cohort "ml"; batch has no quota; solo has quota and no cohort. */
static void queues_init(struct sched_quota_queue *q)
{
    memset(q, 0, NQ * sizeof(*q));
    q[RESEARCH] = (struct sched_quota_queue){ .name = "research",
                                              .cohort_name = "ml",
                                              .limited = true,
                                              .cohort = 0,
                                              .nominal = { 16, 8 },
                                              .borrow_limit = -1,
                                              .lend_limit = -1 };
    q[PROD] = (struct sched_quota_queue){ .name = "prod",
                                          .cohort_name = "ml",
                                          .limited = true,
                                          .cohort = 0,
                                          .nominal = { 16, 8 },
                                          .borrow_limit = -1,
                                          .lend_limit = -1 };
    q[BATCH] = (struct sched_quota_queue){ .name = "batch", .cohort = -1 };
    q[SOLO] = (struct sched_quota_queue){ .name = "solo",
                                          .limited = true,
                                          .cohort = -1,
                                          .nominal = { 8, 0 },
                                          .borrow_limit = -1,
                                          .lend_limit = -1 };
}

static void test_admission_and_borrowing(void **state)
{
    struct sched_quota_queue q[NQ];
    (void)state;
    queues_init(q);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 16), SCHED_QUOTA_WITHIN);
    /* Beyond nominal: prod's idle 16 spot GPUs can be lent. */
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 32), SCHED_QUOTA_BORROWS);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 33), SCHED_QUOTA_NO);
    assert_int_equal(sched_quota_lendable(q, NQ, RESEARCH, SCHED_SPOT), 16);
    /* prod uses 10 of its own: 6 left to lend. */
    q[PROD].used[SCHED_SPOT] = 10;
    assert_int_equal(sched_quota_lendable(q, NQ, RESEARCH, SCHED_SPOT), 6);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 22), SCHED_QUOTA_BORROWS);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 23), SCHED_QUOTA_NO);
    /* prod always has its nominal quota, even while research borrows it (then: reclaim). */
    q[RESEARCH].used[SCHED_SPOT] = 22;
    assert_int_equal(sched_quota_lendable(q, NQ, PROD, SCHED_SPOT), 0);
    assert_int_equal(sched_quota_admits(q, NQ, PROD, SCHED_SPOT, 6), SCHED_QUOTA_WITHIN);
    assert_int_equal(sched_quota_admits(q, NQ, PROD, SCHED_SPOT, 7), SCHED_QUOTA_NO);
    /* Capacity types are separate quotas. */
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_ON_DEMAND, 8), SCHED_QUOTA_WITHIN);
    /* No quota: not limited.  Quota and no cohort: nothing to borrow. */
    assert_int_equal(sched_quota_admits(q, NQ, BATCH, SCHED_SPOT, 100000), SCHED_QUOTA_WITHIN);
    assert_int_equal(sched_quota_admits(q, NQ, SOLO, SCHED_SPOT, 8), SCHED_QUOTA_WITHIN);
    assert_int_equal(sched_quota_admits(q, NQ, SOLO, SCHED_SPOT, 9), SCHED_QUOTA_NO);
    assert_int_equal(sched_quota_admits(q, NQ, SOLO, SCHED_ON_DEMAND, 1), SCHED_QUOTA_NO);
}

static void test_borrow_and_lend_limits(void **state)
{
    struct sched_quota_queue q[NQ];
    (void)state;
    queues_init(q);
    q[RESEARCH].borrow_limit = 4;
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 20), SCHED_QUOTA_BORROWS);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 21), SCHED_QUOTA_NO);
    q[RESEARCH].borrow_limit = -1;
    q[PROD].lend_limit = 8; /* prod keeps 8 of its 16 spot GPUs to itself */
    assert_int_equal(sched_quota_lendable(q, NQ, RESEARCH, SCHED_SPOT), 8);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 24), SCHED_QUOTA_BORROWS);
    assert_int_equal(sched_quota_admits(q, NQ, RESEARCH, SCHED_SPOT, 25), SCHED_QUOTA_NO);
    /* prod's own use comes out of its guaranteed part first: lending stays 8 ... */
    q[PROD].used[SCHED_SPOT] = 8;
    assert_int_equal(sched_quota_lendable(q, NQ, RESEARCH, SCHED_SPOT), 8);
    /* ... and then out of what it lends. */
    q[PROD].used[SCHED_SPOT] = 12;
    assert_int_equal(sched_quota_lendable(q, NQ, RESEARCH, SCHED_SPOT), 4);
}

/* Lent: what the cohort's borrowers use of a member's idle quota; it adds up to what the members
 * use beyond nominal, and a queue without cohort or quota lends nothing. */
static void test_lent(void **state)
{
    struct sched_quota_queue q[NQ];
    (void)state;
    queues_init(q);
    assert_int_equal(sched_quota_lent(q, NQ, PROD, SCHED_SPOT), 0);
    q[RESEARCH].used[SCHED_SPOT] = 24; /* 8 beyond its 16 */
    assert_int_equal(sched_quota_lent(q, NQ, PROD, SCHED_SPOT), 8);
    assert_int_equal(sched_quota_lent(q, NQ, RESEARCH, SCHED_SPOT), 0); /* no idle quota */
    assert_int_equal(sched_quota_lent(q, NQ, PROD, SCHED_ON_DEMAND), 0);
    /* prod uses 12 of its own: 4 idle, and the borrowing stays covered as far as it goes. */
    q[PROD].used[SCHED_SPOT] = 12;
    assert_int_equal(sched_quota_lent(q, NQ, PROD, SCHED_SPOT), 4);
    /* lend_limit: prod keeps 12 to itself and lends at most 4. */
    q[PROD].used[SCHED_SPOT] = 0;
    q[PROD].lend_limit = 4;
    assert_int_equal(sched_quota_lent(q, NQ, PROD, SCHED_SPOT), 4);
    assert_int_equal(sched_quota_lent(q, NQ, BATCH, SCHED_SPOT), 0);
    assert_int_equal(sched_quota_lent(q, NQ, SOLO, SCHED_SPOT), 0);
}

static void test_reason(void **state)
{
    struct sched_quota_queue q[NQ];
    struct sched_request r = sched_request_make(2, 8);
    char why[SCHED_REASON_MAX];
    (void)state;
    queues_init(q);
    q[RESEARCH].used[SCHED_SPOT] = 32;
    q[RESEARCH].used[SCHED_ON_DEMAND] = 8;
    q[PROD].used[SCHED_ON_DEMAND] = 8;
    sched_quota_reason(q, NQ, RESEARCH, &r, why, sizeof(why));
    assert_string_equal(why, "queue research at quota (32/16 spot GPUs, 8/8 on-demand GPUs); "
                             "cohort ml has 0 idle spot, 0 idle on-demand GPUs to lend");
    q[SOLO].used[SCHED_SPOT] = 8;
    r.ncapacity = 1;
    sched_quota_reason(q, NQ, SOLO, &r, why, sizeof(why));
    assert_string_equal(why, "queue solo at quota (8/8 spot GPUs)");
}

/* A reload that shrinks a quota below the queue's use: nothing more starts (with a reason), the
 * queue lends nothing, and its running gangs, started within the old quota, stay protected from
 * other queues: it drains by attrition. */
static void test_shrunk_quota(void **state)
{
    struct sched_quota_queue q[NQ];
    struct sched_request r = sched_request_make(1, 8);
    char why[SCHED_REASON_MAX];
    (void)state;
    queues_init(q);
    q[PROD].used[SCHED_SPOT] = 16;   /* all of its 16 */
    q[PROD].nominal[SCHED_SPOT] = 8; /* the reloaded quota */
    r.ncapacity = 1;
    assert_int_equal(sched_quota_admits(q, NQ, PROD, SCHED_SPOT, 8), SCHED_QUOTA_BORROWS);
    q[RESEARCH].used[SCHED_SPOT] = 16; /* research uses its own: nothing left to lend */
    assert_int_equal(sched_quota_admits(q, NQ, PROD, SCHED_SPOT, 1), SCHED_QUOTA_NO);
    assert_int_equal(sched_quota_lendable(q, NQ, RESEARCH, SCHED_SPOT), 0);
    assert_int_equal(sched_quota_lent(q, NQ, PROD, SCHED_SPOT), 0);
    sched_quota_reason(q, NQ, PROD, &r, why, sizeof(why));
    assert_string_equal(why, "queue prod at quota (16/8 spot GPUs); cohort ml has 0 idle spot "
                             "GPUs to lend");
    assert_false(sched_quota_within_nominal(q, NQ, PROD, &r));
    assert_int_equal(sched_quota_victim_kind(q, NQ, RESEARCH, true, PROD, false),
                     SCHED_QUOTA_PROTECTED);
    /* As its gangs end, it is back within the smaller quota. */
    q[PROD].used[SCHED_SPOT] = 0;
    assert_int_equal(sched_quota_admits(q, NQ, PROD, SCHED_SPOT, 8), SCHED_QUOTA_WITHIN);
}

/* ---- the pass with quotas ---- */

static struct sched_cluster *cluster_spot_od(int spot_nodes, int od_nodes)
{
    struct sched_pool pools[2] = {
        { .name = "spot", .gpu_type = "H100", .price_per_hour = 30, .capacity = SCHED_SPOT },
        { .name = "od", .gpu_type = "H100", .price_per_hour = 98, .capacity = SCHED_ON_DEMAND },
    };
    struct sched_cluster *c = sched_cluster_new(pools, 2, NULL, 0, NULL);
    assert_non_null(c);
    for (int i = 0; i < spot_nodes + od_nodes; i++) {
        char name[16];
        (void)mu_snprintf(name, sizeof(name), "n%d", i);
        (void)cfix_node_add(c, name, i < spot_nodes ? 0 : 1, 8, "");
    }
    return c;
}

static void test_pass_flood_then_other_queue(void **state)
{
    /* research floods four 1x8 jobs first in the order; prod's one job comes last. */
    struct sched_cluster *c = cluster_spot_od(6, 0);
    struct sched_quota_queue q[NQ];
    struct sched_request r = sched_request_make(1, 8);
    struct sched_slot slots[5][1] = { { { 0, 0 } } };
    struct sched_pass_job jobs[5];
    struct sched_decision out[5];
    struct mu_err err;
    (void)state;
    queues_init(q);
    q[PROD].lend_limit = 8; /* research may borrow one node's worth of prod's 16 */
    r.ncapacity = 1;        /* spot only */
    for (int i = 0; i < 5; i++)
        jobs[i] = (struct sched_pass_job){ &r, 600, slots[i], i < 4 ? RESEARCH : PROD };
    assert_int_equal(sched_pass_quota(c, q, NQ, jobs, 5, NULL, 0, NOW, out, &err), 4);
    assert_int_equal(out[0].verdict, SCHED_START);
    assert_false(out[0].borrowed);
    assert_int_equal(out[1].verdict, SCHED_START);
    assert_false(out[1].borrowed);
    assert_int_equal(out[2].verdict, SCHED_START);
    assert_true(out[2].borrowed); /* the 8 prod lends */
    assert_int_equal(out[3].verdict, SCHED_WAIT);
    assert_true(out[3].over_quota);
    assert_non_null(strstr(out[3].reason, "queue research at quota (24/16 spot GPUs"));
    /* Over quota, it took no reservation: prod's job behind it starts on the free node. */
    assert_int_equal(out[4].verdict, SCHED_START);
    assert_false(out[4].borrowed);
    assert_int_equal(q[RESEARCH].used[SCHED_SPOT], 24);
    assert_int_equal(q[PROD].used[SCHED_SPOT], 8);
    sched_cluster_free(c);
}

/* Within one pass a queue's over-quota answer for a size holds for larger jobs only until the
 * queue starts something: then smaller jobs are asked again, with the reason up to date. */
static void test_pass_quota_memo(void **state)
{
    struct sched_cluster *c = cluster_spot_od(8, 0);
    struct sched_quota_queue q[NQ];
    struct sched_request big = sched_request_make(4, 8);
    struct sched_request two = sched_request_make(2, 8);
    struct sched_request one = sched_request_make(1, 8);
    struct sched_slot slots[5][4] = { { { 0, 0 } } };
    struct sched_pass_job jobs[5] = {
        { &big, 600, slots[0], RESEARCH }, { &big, 600, slots[1], RESEARCH },
        { &one, 600, slots[2], RESEARCH }, { &two, 600, slots[3], RESEARCH },
        { &one, 600, slots[4], RESEARCH },
    };
    struct sched_decision out[5];
    struct mu_err err;
    (void)state;
    queues_init(q);
    q[PROD].lend_limit = 8;
    big.ncapacity = two.ncapacity = one.ncapacity = 1;
    assert_int_equal(sched_pass_quota(c, q, NQ, jobs, 5, NULL, 0, NOW, out, &err), 2);
    assert_true(out[0].over_quota); /* 32 > 16 + 8 */
    assert_true(out[1].over_quota);
    assert_string_equal(out[1].reason, out[0].reason);
    assert_non_null(strstr(out[0].reason, "(0/16 spot GPUs)"));
    assert_int_equal(out[2].verdict, SCHED_START);
    assert_false(out[2].borrowed);
    assert_int_equal(out[3].verdict, SCHED_START); /* 8 + 16 = 24: borrows 8 */
    assert_true(out[3].borrowed);
    assert_true(out[4].over_quota);
    assert_non_null(strstr(out[4].reason, "(24/16 spot GPUs)"));
    sched_cluster_free(c);
}

/* A size the quota admitted holds for smaller jobs only until a start anywhere in the cohort:
 * research's 2x8 that cannot be placed was admitted on prod's idle quota; prod then starts
 * within its own quota, so research's next 2x8 is refused, not admitted from the stale answer. */
static void test_pass_quota_admit_after_cohort_start(void **state)
{
    struct sched_cluster *c = cluster_spot_od(6, 0);
    struct sched_quota_queue q[NQ];
    struct sched_request never = sched_request_make(2, 8);
    struct sched_request two = sched_request_make(2, 8);
    struct sched_request one = sched_request_make(1, 8);
    struct sched_slot slots[3][2] = { { { 0, 0 } } };
    struct sched_pass_job jobs[3] = {
        { &never, 600, slots[0], RESEARCH },
        { &one, 600, slots[1], PROD },
        { &two, 600, slots[2], RESEARCH },
    };
    struct sched_decision out[3];
    struct mu_err err;
    (void)state;
    queues_init(q);
    q[RESEARCH].nominal[SCHED_SPOT] = 8;
    q[PROD].nominal[SCHED_SPOT] = 8;
    never.ncapacity = two.ncapacity = one.ncapacity = 1;
    never.gpu_type = "B200"; /* no such node: admitted by quota, never placed */
    assert_int_equal(sched_pass_quota(c, q, NQ, jobs, 3, NULL, 0, NOW, out, &err), 1);
    assert_false(out[0].over_quota);
    assert_int_equal(out[1].verdict, SCHED_START);
    assert_int_equal(out[2].verdict, SCHED_WAIT);
    assert_true(out[2].over_quota);
    assert_non_null(strstr(out[2].reason, "queue research at quota (0/8 spot GPUs"));
    assert_int_equal(q[RESEARCH].used[SCHED_SPOT], 0);
    sched_cluster_free(c);
}

static void test_pass_capacity_without_room_skipped(void **state)
{
    /* solo: 8 spot GPUs of quota, none on-demand.  Its second job may not fall back to
     * on-demand, though on-demand nodes are idle. */
    struct sched_cluster *c = cluster_spot_od(2, 2);
    struct sched_quota_queue q[NQ];
    struct sched_request r = sched_request_make(1, 8);
    struct sched_slot slots[2][1] = { { { 0, 0 } } };
    struct sched_pass_job jobs[2];
    struct sched_decision out[2];
    struct mu_err err;
    (void)state;
    queues_init(q);
    q[SOLO].nominal[SCHED_ON_DEMAND] = 8;
    q[SOLO].used[SCHED_SPOT] = 8; /* its spot quota is in use */
    for (int i = 0; i < 2; i++)
        jobs[i] = (struct sched_pass_job){ &r, 600, slots[i], SOLO };
    assert_int_equal(sched_pass_quota(c, q, NQ, jobs, 2, NULL, 0, NOW, out, &err), 1);
    assert_int_equal(out[0].verdict, SCHED_START);
    assert_int_equal(sched_cluster_node_spec(c, slots[0][0].node)->pool, 1); /* on-demand */
    assert_int_equal(out[1].verdict, SCHED_WAIT);
    assert_true(out[1].over_quota);
    assert_int_equal(q[SOLO].used[SCHED_ON_DEMAND], 8);
    sched_cluster_free(c);
}

static void test_victim_kinds(void **state)
{
    struct sched_quota_queue q[NQ];
    (void)state;
    queues_init(q);
    /* Own queue, or a queue without quota: priority as before quotas. */
    assert_int_equal(sched_quota_victim_kind(q, NQ, RESEARCH, true, RESEARCH, true),
                     SCHED_QUOTA_BY_PRIORITY);
    assert_int_equal(sched_quota_victim_kind(q, NQ, RESEARCH, true, BATCH, false),
                     SCHED_QUOTA_BY_PRIORITY);
    /* Another limited queue's work within its quota: never. */
    assert_int_equal(sched_quota_victim_kind(q, NQ, PROD, true, RESEARCH, false),
                     SCHED_QUOTA_PROTECTED);
    assert_int_equal(sched_quota_victim_kind(q, NQ, BATCH, false, RESEARCH, false),
                     SCHED_QUOTA_PROTECTED);
    /* Borrowed work: reclaimed by its cohort's queue wanting its nominal quota back. */
    assert_int_equal(sched_quota_victim_kind(q, NQ, PROD, true, RESEARCH, true),
                     SCHED_QUOTA_RECLAIM);
    assert_int_equal(sched_quota_victim_kind(q, NQ, PROD, false, RESEARCH, true),
                     SCHED_QUOTA_BY_PRIORITY);
    assert_int_equal(sched_quota_victim_kind(q, NQ, SOLO, true, RESEARCH, true),
                     SCHED_QUOTA_BY_PRIORITY); /* not of its cohort */
    {
        struct sched_request r = sched_request_make(1, 8);
        q[PROD].used[SCHED_SPOT] = 16;
        q[PROD].used[SCHED_ON_DEMAND] = 0;
        assert_true(sched_quota_within_nominal(q, NQ, PROD, &r)); /* on-demand has room */
        r.ncapacity = 1;
        assert_false(sched_quota_within_nominal(q, NQ, PROD, &r));
        assert_false(sched_quota_within_nominal(q, NQ, BATCH, &r));
    }
}

/* The one builder musterd and muster-sim share: cohorts numbered by their first member, the
 * extra last queue (jobs of a queue no longer configured) not limited. */
static void test_queues_init(void **state)
{
    static const struct sched_quota_config cfg[] = {
        { .name = "batch" },
        { .name = "research",
          .cohort = "ml",
          .has_quota = true,
          .quota = { 16, 8 },
          .borrow_limit = 32,
          .lend_limit = -1 },
        { .name = "solo",
          .cohort = "",
          .has_quota = true,
          .quota = { 8, 0 },
          .borrow_limit = -1,
          .lend_limit = -1 },
        { .name = "prod",
          .cohort = "ml",
          .has_quota = true,
          .quota = { 64, 32 },
          .borrow_limit = -1,
          .lend_limit = 4 },
    };
    struct sched_quota_queue q[5];
    (void)state;
    memset(q, 0x5a, sizeof(q)); /* every field is set, used included */
    sched_quota_queues_init(q, cfg, 4);
    assert_false(q[0].limited);
    assert_int_equal(q[0].cohort, -1);
    assert_true(q[1].limited);
    assert_int_equal(q[1].cohort, 1);
    assert_string_equal(q[1].cohort_name, "ml");
    assert_int_equal(q[1].nominal[SCHED_SPOT], 16);
    assert_int_equal(q[1].nominal[SCHED_ON_DEMAND], 8);
    assert_int_equal(q[1].borrow_limit, 32);
    assert_int_equal(q[1].used[SCHED_SPOT] + q[1].used[SCHED_ON_DEMAND], 0);
    assert_true(q[2].limited);
    assert_int_equal(q[2].cohort, -1);
    assert_int_equal(q[3].cohort, 1); /* the cohort of its first member */
    assert_int_equal(q[3].lend_limit, 4);
    assert_string_equal(q[3].name, "prod");
    assert_false(q[4].limited);
    assert_int_equal(q[4].cohort, -1);
}

/* A preemptor's request and victims under quotas: protected work is no victim, borrowed work of
 * its cohort is reclaimable when it asks within its nominal quota; no capacity type, no plan. */
static void test_preempt_prepare(void **state)
{
    struct sched_quota_queue q[NQ];
    struct sched_request r = sched_request_make(1, 8);
    struct sched_request out;
    struct sched_victim v[3];
    (void)state;
    queues_init(q);
    q[RESEARCH].used[SCHED_SPOT] = 32; /* 16 borrowed from prod */
    memset(v, 0, sizeof(v));
    v[0] = (struct sched_victim){ .preemptible = true, .queue = RESEARCH, .borrowed = true };
    v[1] = (struct sched_victim){ .preemptible = true, .queue = RESEARCH, .borrowed = false };
    v[2] = (struct sched_victim){ .preemptible = true, .queue = BATCH };
    assert_int_equal(sched_quota_preempt_prepare(q, NQ, PROD, &r, &out, v, 3), 2);
    assert_true(v[0].preemptible);
    assert_true(v[0].reclaimable);
    assert_false(v[1].preemptible); /* research within its quota: protected */
    assert_true(v[2].preemptible);  /* no quota: by priority */
    assert_false(v[2].reclaimable);
    q[SOLO].used[SCHED_SPOT] = 8;
    r.ncapacity = 1; /* spot only, and solo is at quota without a cohort */
    assert_int_equal(sched_quota_preempt_prepare(q, NQ, SOLO, &r, &out, v, 3), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission_and_borrowing),
        cmocka_unit_test(test_borrow_and_lend_limits),
        cmocka_unit_test(test_lent),
        cmocka_unit_test(test_reason),
        cmocka_unit_test(test_shrunk_quota),
        cmocka_unit_test(test_pass_flood_then_other_queue),
        cmocka_unit_test(test_pass_quota_memo),
        cmocka_unit_test(test_pass_quota_admit_after_cohort_start),
        cmocka_unit_test(test_pass_capacity_without_room_skipped),
        cmocka_unit_test(test_victim_kinds),
        cmocka_unit_test(test_queues_init),
        cmocka_unit_test(test_preempt_prepare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

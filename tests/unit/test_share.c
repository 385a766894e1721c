/* SPDX-License-Identifier: MIT */
/*
 * Fair-share order tests (issue #11, docs/fair-share.md): usage decay at chosen times, a flood
 * from one queue does not keep a later queue waiting, weights share turns in proportion, past
 * usage puts a queue behind, the order within a queue (priority, spot requeue, then fair share
 * between its users, then age), and the errors.  The core only: no daemon, no clock.
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

#include "common/mu_banned.h"

#define HOUR    3600.0
#define DAY     (24 * HOUR)
#define MAXJOBS 1000

struct fixture {
    struct sched_order *o;
    struct sched_order_job jobs[MAXJOBS];
    struct sched_share_queue queues[4];
    struct sched_share_user users[8];
    int order[MAXJOBS];
    int n;
};

static struct fixture *fx_new(int nqueues)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->o = sched_order_new();
    assert_non_null(f->o);
    for (int q = 0; q < nqueues; q++)
        f->queues[q].weight = 1;
    return f;
}

static void fx_free(struct fixture *f)
{
    sched_order_free(f->o);
    free(f);
}

/* Adds a job of queue q submitted at ms, of gpus GPUs for one hour; returns its index. */
static int add(struct fixture *f, int q, uint64_t ms, int64_t prio, int gpus)
{
    struct sched_order_job *j = &f->jobs[f->n];
    assert_true(f->n < MAXJOBS);
    *j = (struct sched_order_job){
        .queue = q, .priority = prio, .submitted_ms = ms, .cost = gpus * HOUR
    };
    return f->n++;
}

static void order(struct fixture *f, int nqueues)
{
    struct mu_err err;
    mu_err_clear(&err);
    assert_int_equal(
        sched_order_jobs(f->o, f->jobs, f->n, f->queues, nqueues, NULL, 0, f->order, &err), 0);
    /* A permutation: every job exactly once. */
    {
        char seen[MAXJOBS] = { 0 };
        for (int i = 0; i < f->n; i++) {
            assert_true(f->order[i] >= 0 && f->order[i] < f->n);
            assert_false(seen[f->order[i]]);
            seen[f->order[i]] = 1;
        }
    }
}

/* The order with users[0..nusers) (each job's .user set by the test). */
static void order_users(struct fixture *f, int nqueues, int nusers)
{
    struct mu_err err;
    mu_err_clear(&err);
    assert_int_equal(
        sched_order_jobs(f->o, f->jobs, f->n, f->queues, nqueues, f->users, nusers, f->order, &err),
        0);
}

static int add_user(struct fixture *f, int q, int user, uint64_t ms, int64_t prio, int gpus)
{
    int i = add(f, q, ms, prio, gpus);
    f->jobs[i].user = user;
    return i;
}

static int position(const struct fixture *f, int job)
{
    for (int i = 0; i < f->n; i++) {
        if (f->order[i] == job)
            return i;
    }
    fail_msg("job %d not in the order", job);
    return -1;
}

static void test_decay(void **state)
{
    (void)state;
    assert_true(sched_usage_decay(1000, 7 * DAY, 7 * DAY) == 500);
    assert_true(sched_usage_decay(1000, 14 * DAY, 7 * DAY) == 250);
    assert_true(sched_usage_decay(1000, 0, 7 * DAY) == 1000);
    assert_true(sched_usage_decay(1000, -5, 7 * DAY) == 1000); /* a clock step back */
    assert_true(sched_usage_decay(-3, DAY, 7 * DAY) == 0);     /* never negative */
    /* Decaying in two steps is decaying once over the sum. */
    {
        double a = sched_usage_decay(sched_usage_decay(1e6, 3 * HOUR, DAY), 5 * HOUR, DAY);
        double b = sched_usage_decay(1e6, 8 * HOUR, DAY);
        assert_true(a > b - 1e-6 && a < b + 1e-6);
    }
}

static bool near(double a, double b, double rel)
{
    double d = a > b ? a - b : b - a;
    return d <= rel * (a > b ? a : b) + 1e-9;
}

/* Usage while GPUs run: about gpus x dt for a short dt, the same whether accrued at every status
 * write or once, and bounded by gpus x half_life / ln 2 however long it runs. */
static void test_accrue(void **state)
{
    double once, steps = 500;
    (void)state;
    assert_true(near(sched_usage_accrue(0, 8, 60, 7 * DAY), 8 * 60, 1e-4));
    assert_true(sched_usage_accrue(500, 0, 7 * DAY, 7 * DAY) == 250); /* idle: decay only */
    assert_true(sched_usage_accrue(500, 8, 0, 7 * DAY) == 500);
    once = sched_usage_accrue(500, 8, 3 * DAY, DAY);
    for (int i = 0; i < 72; i++)
        steps = sched_usage_accrue(steps, 8, HOUR, DAY);
    assert_true(near(once, steps, 1e-9));
    assert_true(sched_usage_accrue(0, 8, 1000 * DAY, DAY) <= 8 * DAY / 0.6931471805599453 + 1);
    assert_true(
        near(sched_usage_accrue(0, 8, 1000 * DAY, DAY), 8 * DAY / 0.6931471805599453, 1e-9));
}

/* Team A floods 200 jobs; team B submits one later: B's job is second, not 201st. */
static void test_flood_does_not_starve_later_queue(void **state)
{
    struct fixture *f = fx_new(2);
    int b;
    (void)state;
    for (int i = 0; i < 200; i++)
        (void)add(f, 0, 1000 + (uint64_t)i, 0, 8);
    b = add(f, 1, 999999, 0, 8);
    order(f, 2);
    assert_int_equal(f->order[0], 0); /* equal standing: the first queue, its oldest job */
    assert_int_equal(position(f, b), 1);
    /* A's own jobs keep their age order. */
    for (int i = 2; i < f->n; i++)
        assert_int_equal(f->order[i], i - 1);
    fx_free(f);
}

/* Weights 3:1 and equal jobs: among the first 8 taken, 6 are A's and 2 are B's. */
static void test_weights_share_turns(void **state)
{
    struct fixture *f = fx_new(2);
    int a = 0;
    (void)state;
    f->queues[0].weight = 3;
    for (int i = 0; i < 50; i++) {
        (void)add(f, 0, (uint64_t)i, 0, 8);
        (void)add(f, 1, (uint64_t)i, 0, 8);
    }
    order(f, 2);
    for (int i = 0; i < 8; i++)
        a += f->jobs[f->order[i]].queue == 0;
    assert_int_equal(a, 6);
    fx_free(f);
}

/* Past usage puts a queue behind until the other has been charged as much; the committed work of
 * running gangs counts the same as past usage. */
static void test_usage_and_committed(void **state)
{
    struct fixture *f = fx_new(2);
    (void)state;
    f->queues[0].usage = 3 * 8 * HOUR; /* three 8-GPU hours */
    for (int i = 0; i < 10; i++) {
        (void)add(f, 0, (uint64_t)i, 0, 8);
        (void)add(f, 1, 100 + (uint64_t)i, 0, 8);
    }
    order(f, 2);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f->jobs[f->order[i]].queue, 1);
    assert_int_equal(f->jobs[f->order[3]].queue, 0); /* tie at 3 hours: the first queue */

    f->queues[0].usage = 0;
    f->queues[1].committed = 2 * 8 * HOUR; /* B runs two 8-GPU jobs for another hour each */
    order(f, 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(f->jobs[f->order[i]].queue, 0);
    assert_true(sched_share_standing(&f->queues[1]) == 2 * 8 * HOUR);
    fx_free(f);
}

/* A heavy user last week, idle since: decay lets it go first again over a lighter user of today. */
static void test_decay_changes_the_order(void **state)
{
    struct fixture *f = fx_new(2);
    int a, b;
    (void)state;
    a = add(f, 0, 1, 0, 8);
    b = add(f, 1, 2, 0, 8);
    f->queues[0].usage = 1000 * HOUR; /* as of 3 weeks ago */
    f->queues[1].usage = 200 * HOUR;  /* as of now */
    order(f, 2);
    assert_int_equal(f->order[0], b);
    f->queues[0].usage = sched_usage_decay(1000 * HOUR, 21 * DAY, 7 * DAY); /* 125 hours */
    order(f, 2);
    assert_int_equal(f->order[0], a);
    fx_free(f);
}

/* Within a queue: priority, then a gang requeued by a spot notice, then age, then id. */
static void test_within_queue(void **state)
{
    struct fixture *f = fx_new(1);
    int old_low, young_high, old_high, spot, tie_b, tie_a;
    (void)state;
    old_low = add(f, 0, 10, 0, 1);
    young_high = add(f, 0, 50, 5, 1);
    old_high = add(f, 0, 20, 5, 1);
    spot = add(f, 0, 90, 5, 1);
    f->jobs[spot].head_of_queue = true;
    tie_b = add(f, 0, 5, -1, 1);
    tie_a = add(f, 0, 5, -1, 1);
    f->jobs[tie_b].id = "1795-1";
    f->jobs[tie_a].id = "1795-0";
    order(f, 1);
    assert_int_equal(f->order[0], spot);
    assert_int_equal(f->order[1], old_high);
    assert_int_equal(f->order[2], young_high);
    assert_int_equal(f->order[3], old_low);
    assert_int_equal(f->order[4], tie_a);
    assert_int_equal(f->order[5], tie_b);
    fx_free(f);
}

/* Priority does not cross queues: B's low-priority job still gets B's turn. */
static void test_priority_is_per_queue(void **state)
{
    struct fixture *f = fx_new(2);
    int b;
    (void)state;
    for (int i = 0; i < 5; i++)
        (void)add(f, 0, (uint64_t)i, 100, 8);
    b = add(f, 1, 0, -100, 8);
    f->queues[0].usage = 1; /* A is ahead by a hair */
    order(f, 2);
    assert_int_equal(f->order[0], b);
    fx_free(f);
}

/* One user floods a queue with 100 jobs; a colleague submits one later: it is second, not 101st,
 * and then their jobs alternate while their charges stay equal. */
static void test_user_flood_within_queue(void **state)
{
    struct fixture *f = fx_new(1);
    int b[2];
    (void)state;
    for (int i = 0; i < 100; i++)
        (void)add_user(f, 0, 0, 1000 + (uint64_t)i, 0, 8);
    b[0] = add_user(f, 0, 1, 5000, 0, 8);
    b[1] = add_user(f, 0, 1, 5001, 0, 8);
    order_users(f, 1, 2);
    assert_int_equal(f->order[0], 0); /* equal standing: the older job first */
    assert_int_equal(position(f, b[0]), 1);
    assert_int_equal(f->order[2], 1);
    assert_int_equal(position(f, b[1]), 3);
    assert_int_equal(f->order[4], 2);
    /* Without users (nusers 0), the same jobs go by age alone. */
    order(f, 1);
    assert_int_equal(position(f, b[0]), 100);
    fx_free(f);
}

/* Past usage and running gangs put a user behind within the queue; priority still comes first;
 * a job taken at a higher priority is charged to its user in the bands below. */
static void test_user_usage_and_priority(void **state)
{
    struct fixture *f = fx_new(1);
    int a_old, b_new, a_prio, c;
    (void)state;
    a_old = add_user(f, 0, 0, 1000, 0, 8);
    b_new = add_user(f, 0, 1, 2000, 0, 8);
    f->users[0].usage = 10 * HOUR;
    order_users(f, 1, 2);
    assert_int_equal(f->order[0], b_new);
    f->users[0].usage = 0;
    f->users[0].committed = 10 * HOUR; /* running now: the same */
    order_users(f, 1, 2);
    assert_int_equal(f->order[0], b_new);
    f->users[0].committed = 0;
    order_users(f, 1, 2);
    assert_int_equal(f->order[0], a_old); /* equal: age */

    /* User 0 also has a priority job: it goes first whatever user 1's standing, and its cost then
     * puts user 0 behind in the lower band, so user 1's job comes before user 0's older one. */
    a_prio = add_user(f, 0, 0, 9000, 5, 8);
    f->users[0].usage = 100 * HOUR;
    order_users(f, 1, 2);
    assert_int_equal(f->order[0], a_prio);
    f->users[0].usage = 0;
    order_users(f, 1, 2);
    assert_int_equal(f->order[0], a_prio);
    assert_int_equal(f->order[1], b_new);
    assert_int_equal(f->order[2], a_old);

    /* A requeued gang still leads its priority, whichever user it belongs to. */
    f->users[0].usage = 0;
    c = add_user(f, 0, 0, 9500, 0, 8);
    f->jobs[c].head_of_queue = true;
    f->users[0].usage = 100 * HOUR;
    order_users(f, 1, 2);
    assert_int_equal(f->order[1], c);
    fx_free(f);
}

/* Users are per queue: the queues' turns are unchanged by how their users split them. */
static void test_users_within_queues(void **state)
{
    struct fixture *f = fx_new(2);
    int a, b;
    (void)state;
    for (int i = 0; i < 10; i++)
        (void)add_user(f, 0, i % 3, 1000 + (uint64_t)i, 0, 8); /* queue 0: users 0..2 */
    a = add_user(f, 1, 3, 100, 0, 8);                          /* queue 1: users 3 and 4 */
    b = add_user(f, 1, 4, 200, 0, 8);
    f->users[3].usage = 50 * HOUR;
    order_users(f, 2, 5);
    /* Turns alternate between the queues (equal weights and costs), queue 0 first. */
    assert_int_equal(position(f, b), 1);
    assert_int_equal(position(f, a), 3);
    fx_free(f);
}

static void test_errors_and_empty(void **state)
{
    struct fixture *f = fx_new(2);
    struct mu_err err;
    (void)state;
    mu_err_clear(&err);
    assert_int_equal(sched_order_jobs(f->o, f->jobs, 0, f->queues, 2, NULL, 0, f->order, &err), 0);
    (void)add(f, 2, 0, 0, 1);
    assert_int_equal(sched_order_jobs(f->o, f->jobs, f->n, f->queues, 2, NULL, 0, f->order, &err),
                     -1);
    assert_int_equal(err.code, MU_E_INVAL);
    assert_non_null(strstr(err.msg, "queue 2 of 2"));
    assert_int_equal(sched_order_jobs(f->o, f->jobs, f->n, f->queues, 0, NULL, 0, f->order, &err),
                     -1);
    f->jobs[0].queue = 0;
    f->jobs[0].user = 3;
    assert_int_equal(
        sched_order_jobs(f->o, f->jobs, f->n, f->queues, 2, f->users, 3, f->order, &err), -1);
    assert_non_null(strstr(err.msg, "user 3 of 3"));
    assert_int_equal(sched_order_jobs(f->o, f->jobs, f->n, f->queues, 2, NULL, 3, f->order, &err),
                     -1);
    fx_free(f);
}

/* The one GPU-seconds rule of a pending job's cost and a running gang's commitment. */
static void test_gpu_s(void **state)
{
    (void)state;
    assert_true(sched_share_gpu_s(4, 8, 100) == 3200.0);
    assert_true(sched_share_gpu_s(1, 1, 1) == 1.0);
    assert_true(sched_share_gpu_s(4, 8, 0) == 0.0);   /* a gang past its expected end */
    assert_true(sched_share_gpu_s(4, 8, -50) == 0.0); /* commits nothing more */
    assert_true(sched_share_gpu_s(4096, 64, 31536000) == 4096.0 * 64 * 31536000); /* no overflow */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decay),
        cmocka_unit_test(test_accrue),
        cmocka_unit_test(test_flood_does_not_starve_later_queue),
        cmocka_unit_test(test_weights_share_turns),
        cmocka_unit_test(test_usage_and_committed),
        cmocka_unit_test(test_decay_changes_the_order),
        cmocka_unit_test(test_within_queue),
        cmocka_unit_test(test_priority_is_per_queue),
        cmocka_unit_test(test_user_flood_within_queue),
        cmocka_unit_test(test_user_usage_and_priority),
        cmocka_unit_test(test_users_within_queues),
        cmocka_unit_test(test_errors_and_empty),
        cmocka_unit_test(test_gpu_s),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * The shapes of a queue (core/shapes.c, issue #15) and what a pass that stops early asks of the
 * order (sched_order_rest_priority, sched_pass_rest_may_preempt): jobs of one widest request
 * share a shape and are counted; a job leaving uncounts it and a free entry is reused; the span
 * gives the highest priority and the lowest preemptible one; a job that cannot be counted (the
 * table full, a GPU type too long) makes the list unknown until it leaves.  The rest of an
 * iteration's highest priority follows the order, and decides whether a later job could preempt.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/mu.h"
#include "core/sched.h"

#include "common/mu_banned.h"

static struct sched_shape_left left[SCHED_SHAPES_MAX];

/* The shapes listed (by handle, into out and count): how many have jobs, or -1 when unknown. */
static int live(const struct sched_shapes *s,
                struct sched_request *out,
                struct sched_shape_span *span)
{
    int n = sched_shapes_list(s, out, left, 86400, span);
    int k = 0;
    for (int i = 0; i < n; i++)
        k += left[i].jobs > 0;
    return n < 0 ? -1 : k;
}

static void test_shapes_count_and_span(void **state)
{
    struct sched_shapes *s = calloc(1, sizeof(*s));
    struct sched_request out[SCHED_SHAPES_MAX];
    struct sched_shape_span span;
    struct sched_request a = sched_request_make(2, 8);
    struct sched_request b = a;
    char type[16] = "H100";
    int ha;
    int hb;
    int hc;
    (void)state;
    assert_non_null(s);

    a.gpu_type = type;
    a.required_level = 1;
    a.avoid = (const int[]){ 3 };
    a.navoid = 1;
    b.gpu_type = "H100"; /* the same bytes elsewhere, no avoided node: the same shape */
    b.required_level = 1;
    ha = sched_shapes_add(s, &a, false, 0, true, 0);
    hb = sched_shapes_add(s, &b, false, 0, true, 0);
    assert_true(ha > 0);
    assert_int_equal(hb, ha);
    type[0] = 'X'; /* the shape keeps its own copy of the type */
    assert_int_equal(live(s, out, &span), 1);
    assert_int_equal(left[ha - 1].jobs, 2);
    assert_string_equal(out[ha - 1].gpu_type, "H100");
    assert_int_equal(out[0].navoid, 0);
    assert_int_equal(out[0].required_level, 1);
    assert_true(span.any_preemptible);
    assert_int_equal(span.min_preemptible, 0);
    assert_int_equal(span.max_priority, 0);

    /* Relaxing with time: anywhere.  Another priority: another shape, in the span. */
    hc = sched_shapes_add(s, &b, true, 10, false, 0);
    assert_true(hc > 0 && hc != ha);
    assert_int_equal(live(s, out, &span), 2);
    assert_int_equal(out[1].required_level, -1);
    assert_int_equal(span.max_priority, 10);
    assert_int_equal(span.min_preemptible, 0);

    /* Leaving: counted down, then gone; its entry is reused. */
    sched_shapes_remove(s, ha);
    assert_int_equal(live(s, out, &span), 2);
    assert_int_equal(left[ha - 1].jobs, 1);
    sched_shapes_remove(s, hb);
    assert_int_equal(live(s, out, &span), 1);
    assert_int_equal(left[ha - 1].jobs, 0); /* a free entry, listed at its handle */
    assert_int_equal(left[hc - 1].jobs, 1);
    assert_false(span.any_preemptible);
    assert_int_equal(sched_shapes_add(s, &a, false, 5, true, 0), ha);
    sched_shapes_remove(s, 0); /* nothing */
    assert_int_equal(live(s, out, &span), 2);
    free(s);
}

/* A shape's least expected run: its jobs' own limits and the default, a bound that a job
 * leaving does not raise; a new entry starts afresh.  A default of 0 (none) lowers nothing. */
static void test_shapes_min_run(void **state)
{
    struct sched_shapes *s = calloc(1, sizeof(*s));
    struct sched_request out[SCHED_SHAPES_MAX];
    struct sched_shape_span span;
    struct sched_request r = sched_request_make(1, 8);
    int h;
    int h2;
    (void)state;
    assert_non_null(s);

    h = sched_shapes_add(s, &r, false, 0, false, 7200);
    assert_int_equal(sched_shapes_list(s, out, left, 86400, &span), 1);
    assert_int_equal(left[h - 1].min_run_s, 7200);
    assert_int_equal(sched_shapes_add(s, &r, false, 0, false, 0), h); /* the default */
    (void)sched_shapes_list(s, out, left, 86400, &span);
    assert_int_equal(left[h - 1].min_run_s, 7200);
    (void)sched_shapes_list(s, out, left, 3600, &span);
    assert_int_equal(left[h - 1].min_run_s, 3600);
    (void)sched_shapes_list(s, out, left, 0, &span);
    assert_int_equal(left[h - 1].min_run_s, 7200);
    assert_int_equal(sched_shapes_add(s, &r, false, 0, false, 60), h);
    sched_shapes_remove(s, h);
    (void)sched_shapes_list(s, out, left, 86400, &span);
    assert_int_equal(left[h - 1].jobs, 2);
    assert_int_equal(left[h - 1].min_run_s, 60); /* still a bound for the two left */
    sched_shapes_remove(s, h);
    sched_shapes_remove(s, h);
    h2 = sched_shapes_add(s, &r, false, 0, false, 0);
    assert_int_equal(h2, h); /* the entry reused, its bounds afresh */
    (void)sched_shapes_list(s, out, left, 0, &span);
    assert_int_equal(left[h - 1].min_run_s, INT64_MAX); /* no limit anywhere: never ends */
    free(s);
}

static void test_shapes_untracked(void **state)
{
    struct sched_shapes *s = calloc(1, sizeof(*s));
    struct sched_request out[SCHED_SHAPES_MAX];
    struct sched_shape_span span;
    struct sched_request r = sched_request_make(1, 1);
    char longtype[100];
    int h[SCHED_SHAPES_MAX];
    int extra;
    int odd;
    (void)state;
    assert_non_null(s);

    for (int i = 0; i < SCHED_SHAPES_MAX; i++) {
        r.tasks = 1 + i;
        h[i] = sched_shapes_add(s, &r, false, 0, false, 0);
        assert_true(h[i] > 0);
    }
    assert_int_equal(live(s, out, &span), SCHED_SHAPES_MAX);
    r.tasks = SCHED_SHAPES_MAX + 1;
    extra = sched_shapes_add(s, &r, false, 0, false, 0);
    assert_int_equal(extra, -1);
    assert_int_equal(live(s, out, &span), -1); /* unknown while it is there */
    sched_shapes_remove(s, extra);
    assert_int_equal(live(s, out, &span), SCHED_SHAPES_MAX);

    sched_shapes_remove(s, h[7]);
    memset(longtype, 'a', sizeof(longtype) - 1);
    longtype[sizeof(longtype) - 1] = '\0';
    r.gpu_type = longtype;
    odd = sched_shapes_add(s, &r, false, 0, false, 0); /* room, but a type too long to keep */
    assert_int_equal(odd, -1);
    assert_int_equal(live(s, out, &span), -1);
    sched_shapes_remove(s, odd);
    assert_int_equal(live(s, out, &span), SCHED_SHAPES_MAX - 1);
    free(s);
}

/* The order's rest: priority 10 of queue 0 first, then 0s; a later job may preempt a priority-0
 * gang only while a priority-10 job is left. */
static void test_rest_priority(void **state)
{
    struct sched_order *o = sched_order_new();
    struct sched_share_queue queues[2] = { { .weight = 1 }, { .weight = 1 } };
    struct sched_victim victim = { .priority = 0, .preemptible = true };
    struct sched_shape_span span = { .max_priority = 10 };
    struct sched_quota_queue quota[2];
    struct sched_quota_config qcfg[1] = { { .name = "a" } };
    int64_t rest = -1;
    int handles[6];
    (void)state;
    assert_non_null(o);
    sched_quota_queues_init(quota, qcfg, 1);

    for (int i = 0; i < 6; i++) {
        struct sched_order_job j = {
            .queue = i % 2, .priority = i < 2 ? 10 : 0, .submitted_ms = (uint64_t)i, .cost = 1
        };
        assert_int_equal(sched_order_add(o, &j, &handles[i], NULL), 0);
    }
    assert_false(sched_order_rest_priority(o, &rest)); /* no iteration yet */
    assert_int_equal(sched_order_begin(o, queues, 2, NULL, 0, NULL), 0);
    assert_true(sched_order_rest_priority(o, &rest));
    assert_int_equal(rest, 10);
    assert_true(sched_pass_rest_may_preempt(o, quota, 2, &victim, 1, &span));
    assert_non_null(sched_order_next(o));
    assert_true(sched_order_rest_priority(o, &rest));
    assert_int_equal(rest, 10); /* the other queue's priority-10 job is left */
    assert_non_null(sched_order_next(o));
    assert_true(sched_order_rest_priority(o, &rest));
    assert_int_equal(rest, 0);
    assert_false(sched_pass_rest_may_preempt(o, quota, 2, &victim, 1, &span));
    span.any_preemptible = true; /* a pending priority-0 job may start and become a victim... */
    span.min_preemptible = 0;
    assert_false(sched_pass_rest_may_preempt(o, quota, 2, &victim, 1, &span)); /* ...not lower */
    span.min_preemptible = -1;
    assert_true(sched_pass_rest_may_preempt(o, quota, 2, &victim, 1, &span));
    while (sched_order_next(o))
        ;
    assert_false(sched_order_rest_priority(o, &rest));
    assert_false(sched_pass_rest_may_preempt(o, quota, 2, &victim, 1, &span));
    sched_order_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_count_and_span),
        cmocka_unit_test(test_shapes_min_run),
        cmocka_unit_test(test_shapes_untracked),
        cmocka_unit_test(test_rest_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

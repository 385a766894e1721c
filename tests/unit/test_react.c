/* SPDX-License-Identifier: MIT */
/*
 * The event reactions musterd and muster-sim share (core/react.c, issue #41): what a spot notice,
 * a lost or down node, a drain and a time limit decide for the node and its gangs, on the
 * caller's clock.  Both callers apply these; what is asserted here is the decision alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/sched.h"

#include "common/mu_banned.h"

#define NOW 1700000000000LL /* ms */

static void test_spot_notice(void **state)
{
    struct sched_reaction r;

    (void)state;
    /* Two minutes' notice, 15 s margin: stopped by 105 s from now, requeued first. */
    r = sched_react_spot_notice(NOW, NOW + 120000, 15000, 600);
    assert_int_equal(r.node_state, SCHED_NODE_TERMINATING);
    assert_true(r.stop && r.requeue && r.head_of_queue);
    assert_int_equal(r.stop_by_ms, NOW + 105000);
    assert_true(r.cool_down);
    assert_int_equal(r.cooldown_until_s, NOW / 1000 + 600);
    /* A deadline inside the margin, or past: stopped at once. */
    r = sched_react_spot_notice(NOW, NOW + 15000, 15000, 600);
    assert_int_equal(r.stop_by_ms, NOW);
    r = sched_react_spot_notice(NOW, NOW - 5000, 15000, 600);
    assert_int_equal(r.stop_by_ms, NOW);
    /* No margin (the simulator): stopped by the deadline itself. */
    r = sched_react_spot_notice(NOW, NOW + 120000, 0, 600);
    assert_int_equal(r.stop_by_ms, NOW + 120000);
    /* A cool-down of 0 s is one (it ends any longer one); < 0 is none. */
    r = sched_react_spot_notice(NOW, NOW + 120000, 0, 0);
    assert_true(r.cool_down);
    assert_int_equal(r.cooldown_until_s, NOW / 1000);
    r = sched_react_spot_notice(NOW, NOW + 120000, 0, -1);
    assert_false(r.cool_down);
}

static void test_node_lost_and_drain(void **state)
{
    struct sched_reaction r;

    (void)state;
    r = sched_react_node_lost(false);
    assert_int_equal(r.node_state, SCHED_NODE_LOST);
    assert_true(r.stop && r.requeue);
    assert_false(r.head_of_queue || r.cool_down);
    assert_int_equal(sched_react_node_lost(true).node_state, SCHED_NODE_DOWN);

    r = sched_react_drain(NOW, 30);
    assert_int_equal(r.node_state, SCHED_NODE_DRAINING);
    assert_true(r.stop && r.requeue);
    assert_false(r.head_of_queue || r.cool_down);
    assert_int_equal(r.stop_by_ms, NOW + 30000);
    assert_int_equal(sched_react_drain(NOW, 0).stop_by_ms, NOW);
    assert_int_equal(sched_react_drain(NOW, -1).stop_by_ms, 0); /* its own grace */
}

static void test_time_limit(void **state)
{
    struct sched_reaction r = sched_react_time_limit();

    (void)state;
    assert_true(r.stop);
    assert_false(r.requeue || r.head_of_queue || r.cool_down);
    assert_int_equal(r.stop_by_ms, 0);
    assert_int_equal(sched_time_limit_s(600, 86400), 600);
    assert_int_equal(sched_time_limit_s(0, 86400), 86400);
    assert_int_equal(sched_time_limit_s(0, 0), 0);
    assert_int_equal(sched_time_limit_end_ms(NOW, 600, 86400), NOW + 600000);
    assert_int_equal(sched_time_limit_end_ms(NOW, 0, 86400), NOW + 86400000);
    assert_int_equal(sched_time_limit_end_ms(NOW, 0, 0), INT64_MAX); /* none */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spot_notice),
        cmocka_unit_test(test_node_lost_and_drain),
        cmocka_unit_test(test_time_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

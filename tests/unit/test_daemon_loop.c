/* SPDX-License-Identifier: MIT */
/*
 * When musterd's loop takes the workers' messages in batches (issue #15): only with a fleet that
 * could send 1,000 heartbeats a second or more, only after a read of nothing but heartbeats, and
 * never while a pass is due or Redis is down.  A small cluster's messages are read as each
 * arrives, so its BIND_ACKs and exits are never held back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/d_fake.h"

#include "common/mu_banned.h"

static const char config_hb1[] =
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"heartbeat_s\":1,\"node_lost_after_s\":30}";

static const char config_hb2[] =
    "{\"pools\":[{\"name\":\"od\",\"capacity\":\"on-demand\",\"instance_type\":\"p5.48xlarge\","
    "\"gpu_type\":\"H100\",\"gpus_per_node\":8,\"price_per_hour\":98.32}],"
    "\"heartbeat_s\":2,\"node_lost_after_s\":30}";

/* Nodes n0000.. up to n(count - 1) register; then a pass runs, so none is due. */
static void register_nodes(struct dfix *f, int from, int count)
{
    for (int i = from; i < count; i++) {
        char name[16];
        (void)snprintf(name, sizeof(name), "n%04d", i);
        dfix_hello(f, name, "od", 8);
    }
    d_schedule(&f->d);
    assert_false(f->d.dirty);
}

static void test_small_cluster_reads_each_message(void **state)
{
    struct dfix *f = dfix_new(config_hb1);
    (void)state;
    register_nodes(f, 0, 999);
    assert_int_equal(d_router_rest_ms(&f->d, true), 0);
    assert_int_equal(d_router_rest_ms(&f->d, false), 0);
    dfix_free(f);
}

static void test_large_fleet_batches_heartbeats_only(void **state)
{
    struct dfix *f = dfix_new(config_hb1);
    int rest;
    (void)state;
    register_nodes(f, 0, 1000);
    rest = d_router_rest_ms(&f->d, true);
    assert_true(rest > 0 && rest <= 10);
    /* Anything but heartbeats (a BIND_ACK, an exit) ends the batching. */
    assert_int_equal(d_router_rest_ms(&f->d, false), 0);
    /* A pass is due: what it waits for is read at once. */
    f->d.dirty = true;
    assert_int_equal(d_router_rest_ms(&f->d, true), 0);
    d_schedule(&f->d);
    assert_int_equal(d_router_rest_ms(&f->d, true), rest);
    /* Redis down: the messages held for it are read as they come, as before. */
    f->d.redis_down = true;
    assert_int_equal(d_router_rest_ms(&f->d, true), 0);
    dfix_free(f);
}

/* The threshold is heartbeats a second: at heartbeat_s 2 it takes twice the nodes. */
static void test_threshold_scales_with_heartbeat(void **state)
{
    struct dfix *f = dfix_new(config_hb2);
    (void)state;
    register_nodes(f, 0, 1999);
    assert_int_equal(d_router_rest_ms(&f->d, true), 0);
    register_nodes(f, 1999, 2000);
    assert_true(d_router_rest_ms(&f->d, true) > 0);
    dfix_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_cluster_reads_each_message),
        cmocka_unit_test(test_large_fleet_batches_heartbeats_only),
        cmocka_unit_test(test_threshold_scales_with_heartbeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the spot watcher (worker/imds.c, worker/imds_parse.c): the IMDS JSON parsers
 * with their bad-input tables, and the watcher against tests/imds/imds_mock.py started as a
 * subprocess (token renewal before expiry and on 401, notices, rebalance, garbage, a stalled and
 * a dead service, the loop never blocked).
 */
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* ---- IMDS documents ---- */

struct action_case {
    const char *body;
    int code;         /* 0 = parses */
    const char *want; /* the action, or a piece of the message */
    uint64_t time_ms;
};

static const struct action_case action_cases[] = {
    { "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"}", 0, "terminate",
      UINT64_C(1505722920000) },
    { "{\"action\":\"stop\",\"time\":\"2026-11-22T08:22:00Z\"}\n", 0, "stop",
      UINT64_C(1795335720000) },
    { " {\"time\":\"2024-02-29T23:59:59.250Z\",\"action\":\"hibernate\",\"extra\":[1,{}]} ", 0,
      "hibernate", UINT64_C(1709251199250) },
    { "", MU_E_PARSE, "empty reply", 0 },
    { "<?xml version=\"1.0\"?><html>404 - Not Found</html>", MU_E_PARSE, "not JSON", 0 },
    { "[\"terminate\"]", MU_E_PARSE, "expected a JSON object", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00Z\"} x", MU_E_PARSE,
      "bytes after the JSON value", 0 },
    { "{\"time\":\"2017-09-18T08:22:00Z\"}", MU_E_PARSE, "missing \"action\"", 0 },
    { "{\"action\":\"reboot\",\"time\":\"2017-09-18T08:22:00Z\"}", MU_E_PARSE, "got 'reboot'", 0 },
    { "{\"action\":7,\"time\":\"2017-09-18T08:22:00Z\"}", MU_E_PARSE,
      "\"action\": expected a string", 0 },
    { "{\"action\":\"terminate\"}", MU_E_PARSE, "missing \"time\"", 0 },
    { "{\"action\":\"terminate\",\"time\":1505722920}", MU_E_PARSE, "\"time\": expected a string",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18 08:22:00\"}", MU_E_PARSE,
      "expected YYYY-MM-DDThh:mm:ssZ", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00+02:00\"}", MU_E_PARSE,
      "ending in 'Z'", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-02-29T08:22:00Z\"}", MU_E_RANGE, "no such date",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T24:00:00Z\"}", MU_E_RANGE, "no such date",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"1969-12-31T23:59:59Z\"}", MU_E_RANGE, "no such date",
      0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00.Z\"}", MU_E_PARSE,
      "digits after '.'", 0 },
    { "{\"action\":\"terminate\",\"time\":\"2017-09-18T08:22:00.1234567890Z\"}", MU_E_PARSE,
      "more than 9", 0 },
    { "{\"action\":\"terminate\",\"action\":\"stop\",\"time\":\"2017-09-18T08:22:00Z\"", MU_E_PARSE,
      "not JSON", 0 },
};

static void test_imds_parse_action(void **state)
{
    struct wrk_imds_action act;
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(action_cases); i++) {
        const struct action_case *c = &action_cases[i];
        int r;
        memset(&act, 0, sizeof(act));
        mu_err_clear(&err);
        r = wrk_imds_parse_action(c->body, strlen(c->body), &act, &err);
        if (c->code == 0) {
            if (r != 0)
                fail_msg("case %zu: %s", i, err.msg);
            assert_string_equal(act.action, c->want);
            assert_int_equal(act.time_ms, c->time_ms);
        } else {
            if (r != -1 || err.code != c->code || !strstr(err.msg, c->want))
                fail_msg("case %zu: r=%d code=%d msg='%s', want '%s'", i, r, err.code, err.msg,
                         c->want);
            assert_string_equal(act.action, ""); /* untouched */
        }
    }
    /* Not NUL-terminated: only len bytes count. */
    {
        const char body[] = "{\"action\":\"stop\",\"time\":\"2017-09-18T08:22:00Z\"}GARBAGE";
        assert_int_equal(wrk_imds_parse_action(body, sizeof(body) - 8, &act, &err), 0);
        assert_string_equal(act.action, "stop");
        assert_int_equal(wrk_imds_parse_action(body, sizeof(body) - 1, &act, &err), -1);
    }
    /* Over the cap. */
    assert_int_equal(wrk_imds_parse_action("{}", WRK_IMDS_MAX_BODY + 1, &act, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
}

static void test_imds_parse_rebalance(void **state)
{
    static const struct {
        const char *body;
        int rc;
        uint64_t ms;
        const char *msg;
    } cases[] = {
        { "{\"noticeTime\": \"2020-10-27T08:22:00Z\"}", 0, UINT64_C(1603786920000), "" },
        { "{\"noticeTime\":\"2000-01-01T00:00:00Z\",\"x\":null}", 0, UINT64_C(946684800000), "" },
        { "{}", -1, 0, "missing \"noticeTime\"" },
        { "{\"noticeTime\": null}", -1, 0, "expected a string" },
        { "{\"noticeTime\": \"soon\"}", -1, 0, "\"noticeTime\": time 'soon'" },
        { "\"2020-10-27T08:22:00Z\"", -1, 0, "expected a JSON object" },
        { "{\"noticeTime\": \"2020-13-27T08:22:00Z\"}", -1, 0, "no such date" },
    };
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        uint64_t ms = 42;
        int r = wrk_imds_parse_rebalance(cases[i].body, strlen(cases[i].body), &ms, &err);
        if (r != cases[i].rc)
            fail_msg("case %zu: r=%d %s", i, r, err.msg);
        if (r == 0)
            assert_int_equal(ms, cases[i].ms);
        else if (!strstr(err.msg, cases[i].msg) || ms != 42)
            fail_msg("case %zu: '%s', want '%s'", i, err.msg, cases[i].msg);
    }
}

/* ---- the watcher against the stand-in ---- */

/* Turns the watcher's loop for ms; returns the first event of `type` (if want) or none. */
static bool imds_turn(struct wrk_imds *w,
                      int ms,
                      enum wrk_imds_event_type type,
                      struct wrk_imds_event *out,
                      int *events_seen)
{
    uint64_t deadline = mu_time_mono_ms() + (uint64_t)ms;
    while (mu_time_mono_ms() < deadline) {
        struct pollfd fds[8];
        struct wrk_imds_event ev;
        uint64_t now = mu_time_mono_ms();
        uint64_t t0;
        int n = wrk_imds_fds(w, fds, 8);
        (void)poll(fds, (nfds_t)n, wrk_imds_timeout_ms(w, now, (int)(deadline - now)));
        t0 = mu_time_mono_ms();
        wrk_imds_service(w, fds, n);
        /* Never blocks the loop, even when the service stalls. */
        assert_true(mu_time_mono_ms() - t0 < 200);
        while (wrk_imds_event_next(w, &ev)) {
            if (events_seen)
                (*events_seen)++;
            if (out && ev.type == type) {
                *out = ev;
                return true;
            }
        }
    }
    return false;
}

/* Identity first, then tokens renewed before they expire, and after a 401. */
static void watcher_tokens(struct wrk_imds *w, const struct mock_imds *mk)
{
    const struct wrk_imds_identity *id;
    struct wrk_imds_stats st;
    struct wrk_imds_event ev;
    uint64_t tokens;
    int seen = 0;

    memset(&ev, 0, sizeof(ev));
    assert_int_equal(wrk_imds_wait_identity(w, 5000), 0);
    id = wrk_imds_identity_get(w);
    assert_non_null(id);
    assert_string_equal(id->instance_type, "g6e.12xlarge");
    assert_string_equal(id->zone, "us-west-2b");
    assert_string_equal(id->lifecycle, "on-demand");
    assert_string_equal(id->instance_id, "i-0fedcba9876543210");
    assert_true(imds_turn(w, 100, WRK_IMDS_IDENTITY, &ev, NULL));
    assert_int_equal(mock_stat(mk, "ttl_last"), 2);

    /* Over 4.5 s of 1 s polls with a 2 s token: renewed each time before it expires. */
    assert_false(imds_turn(w, 4500, WRK_IMDS_SPOT, &ev, &seen));
    assert_int_equal(seen, 0);
    wrk_imds_stats_get(w, &st);
    assert_true(st.tokens >= 3);
    assert_int_equal(st.unauthorized, 0);
    assert_int_equal(st.failures, 0);
    assert_int_equal(st.garbled, 0);
    assert_int_equal(mock_stat(mk, "unauthorized"), 0);

    /* Tokens revoked: the next GET gets 401, a new token and the GET again. */
    tokens = st.tokens;
    mock_post(mk, "/mock/expire-tokens", "");
    assert_false(imds_turn(w, 1500, WRK_IMDS_SPOT, &ev, NULL));
    wrk_imds_stats_get(w, &st);
    assert_int_equal(st.unauthorized, 1);
    assert_true(st.tokens >= tokens + 1);
    assert_int_equal(st.garbled, 0);
}

/* Notices and recommendations: one event each, with their times. */
static void watcher_notices(struct wrk_imds *w, const struct mock_imds *mk)
{
    struct wrk_imds_event ev;
    uint64_t want;
    int seen = 0;

    memset(&ev, 0, sizeof(ev));
    want = mock_notice(mk, "{\"action\":\"terminate\",\"in_s\":120}");
    assert_true(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, NULL));
    assert_string_equal(ev.action, "terminate");
    assert_int_equal(ev.time_ms, want);
    assert_true(ev.time_ms > mu_time_wall_ms() + 115000);
    /* Not repeated on later polls. */
    assert_false(imds_turn(w, 2200, WRK_IMDS_SPOT, &ev, &seen));
    assert_int_equal(seen, 0);
    /* A different notice is a new event. */
    (void)mock_notice(mk, "{\"action\":\"stop\",\"in_s\":60}");
    assert_true(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, NULL));
    assert_string_equal(ev.action, "stop");

    mock_post(mk, "/mock/rebalance", "");
    assert_true(imds_turn(w, 2500, WRK_IMDS_REBALANCE, &ev, NULL));
    assert_string_equal(ev.action, "rebalance");
    assert_true(ev.time_ms <= mu_time_wall_ms() && ev.time_ms + 5000 > mu_time_wall_ms());
    seen = 0;
    assert_false(imds_turn(w, 1500, WRK_IMDS_REBALANCE, &ev, &seen));
    assert_int_equal(seen, 0);
}

/* Garbage and a stalled service: counted and logged, no event, the loop never waits. */
static void watcher_trouble(struct wrk_imds *w, const struct mock_imds *mk)
{
    struct wrk_imds_stats st;
    struct wrk_imds_event ev;
    int seen = 0;

    mock_post(mk, "/mock/clear", "");
    mock_post(mk, "/mock/garble", "{\"count\":2}");
    assert_false(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, &seen));
    assert_int_equal(seen, 0);
    wrk_imds_stats_get(w, &st);
    if (st.garbled != 2)
        fail_msg("garbled %" PRIu64 " failures %" PRIu64 " unauthorized %" PRIu64
                 " requests %" PRIu64 " cycles %" PRIu64,
                 st.garbled, st.failures, st.unauthorized, st.requests, st.cycles);

    /* The request times out after 1 s (imds_turn checks that no service call blocks). */
    mock_post(mk, "/mock/stall", "{\"count\":1,\"ms\":2500}");
    assert_false(imds_turn(w, 2500, WRK_IMDS_SPOT, &ev, NULL));
    wrk_imds_stats_get(w, &st);
    assert_int_equal(st.failures, 1);
}

static void test_imds_watcher(void **state)
{
    static const char *const extra[] = { "--instance-type", "g6e.12xlarge",       "--zone",
                                         "us-west-2b",      "--lifecycle",        "on-demand",
                                         "--instance-id",   "i-0fedcba9876543210" };
    struct mock_imds mk;
    struct wrk_imds_config cfg;
    struct wrk_imds_stats st;
    struct wrk_imds_event ev;
    struct wrk_imds *w;
    struct mu_err err;
    (void)state;

    if (!mock_start(&mk, extra, (int)MU_ARRAY_LEN(extra)))
        skip();
    memset(&cfg, 0, sizeof(cfg));
    cfg.url = mk.url;
    cfg.interval_s = 1;
    cfg.token_ttl_s = 2; /* renewed 0.5 s before it expires */
    cfg.want_identity = true;
    w = wrk_imds_new(&cfg, &err);
    if (!w)
        fail_msg("%s", err.msg);
    watcher_tokens(w, &mk);
    watcher_notices(w, &mk);
    watcher_trouble(w, &mk);
    wrk_imds_free(w);
    mock_stop(&mk);

    /* Nobody listening: failures, no events, no crash; identity not known. */
    memset(&cfg, 0, sizeof(cfg));
    cfg.url = mk.url; /* the port is closed now */
    cfg.interval_s = 1;
    cfg.want_identity = true;
    w = wrk_imds_new(&cfg, &err);
    assert_non_null(w);
    assert_int_equal(wrk_imds_wait_identity(w, 3000), -1);
    assert_null(wrk_imds_identity_get(w));
    assert_false(imds_turn(w, 1200, WRK_IMDS_SPOT, &ev, NULL));
    wrk_imds_stats_get(w, &st);
    assert_true(st.failures >= 2);
    wrk_imds_free(w);

    /* Bad configuration. */
    cfg.url = "https://169.254.169.254";
    assert_null(wrk_imds_new(&cfg, &err));
    assert_int_equal(err.code, MU_E_INVAL);
    cfg.url = "http://169.254.169.254/";
    cfg.interval_s = 301;
    assert_null(wrk_imds_new(&cfg, &err));
    assert_int_equal(err.code, MU_E_RANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_imds_parse_action),
        cmocka_unit_test(test_imds_parse_rebalance),
        cmocka_unit_test_teardown(test_imds_watcher, mock_teardown),
    };
    /* WRK_TEST_FILTER=test_x* runs a subset by hand. */
    if (getenv("WRK_TEST_FILTER"))
        cmocka_set_test_filter(getenv("WRK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Redis URLs (common/url.c): the plain form every program takes, and the Sentinel form of issue
 * #14 ("redis+sentinel://[user:pass@]h1[:p1],h2[:p2]/master[/db]"); a table of bad URLs, each
 * refused with a message naming what is wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/mu.h"

#include "common/mu_banned.h"

static void test_plain(void **state)
{
    struct mu_redis_url u;
    struct mu_err err;
    (void)state;

    assert_int_equal(mu_redis_url_parse("redis://127.0.0.1", &u, &err), 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    assert_int_equal(u.nsentinels, 0);
    assert_int_equal(mu_redis_url_parse("redis://alice:s3cret@db.example:6380/3", &u, &err), 0);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.password, "s3cret");
    assert_string_equal(u.host, "db.example");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 3);
    assert_int_equal(mu_redis_url_parse("redis://:pw@h", &u, &err), 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "pw");
}

static void test_sentinel(void **state)
{
    struct mu_redis_url u;
    struct mu_err err;
    (void)state;

    assert_int_equal(
        mu_redis_url_parse("redis+sentinel://10.0.0.1:26380,10.0.0.2,s3:5000/mymaster", &u, &err),
        0);
    assert_int_equal(u.nsentinels, 3);
    assert_string_equal(u.sentinels[0].host, "10.0.0.1");
    assert_int_equal(u.sentinels[0].port, 26380);
    assert_string_equal(u.sentinels[1].host, "10.0.0.2");
    assert_int_equal(u.sentinels[1].port, 26379);
    assert_string_equal(u.sentinels[2].host, "s3");
    assert_int_equal(u.sentinels[2].port, 5000);
    assert_string_equal(u.master, "mymaster");
    assert_int_equal(u.db, 0);
    assert_int_equal(mu_redis_url_parse("redis+sentinel://bob:pw@s1/prod/4", &u, &err), 0);
    assert_int_equal(u.nsentinels, 1);
    assert_string_equal(u.user, "bob");
    assert_string_equal(u.password, "pw");
    assert_string_equal(u.master, "prod");
    assert_int_equal(u.db, 4);
}

static void test_bad(void **state)
{
    static const struct {
        const char *url;
        const char *says;
    } bad[] = {
        { "", "expected redis://" },
        { "http://h", "expected redis://" },
        { "redis://", "missing host" },
        { "redis://:6379", "missing host" },
        { "redis://h:0", "port" },
        { "redis://h:65536", "port" },
        { "redis://h:x", "port" },
        { "redis://h/x", "database" },
        { "redis://h/1001", "database" },
        { "redis+sentinel://s1", "expected redis+sentinel://" },
        { "redis+sentinel://s1/", "expected redis+sentinel://" },
        { "redis+sentinel:///m", "expected redis+sentinel://" },
        { "redis+sentinel://s1,/m", "missing host" },
        { "redis+sentinel://s1:99999/m", "port" },
        { "redis+sentinel://s1/m/x", "database" },
        { "redis+sentinel://a,b,c,d,e,f,g,h,i/m", "more than 8 sentinels" },
    };
    struct mu_redis_url u;
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.msg[0] = '\0';
        if (mu_redis_url_parse(bad[i].url, &u, &err) != -1 || !strstr(err.msg, bad[i].says))
            fail_msg("'%s': want an error with '%s', got '%s'", bad[i].url, bad[i].says, err.msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

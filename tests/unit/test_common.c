/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for common/: the strict-JSON helpers of mu_json.h (shared by the config and spec
 * parsers, whose own tests pin the exact messages) and the small base of mu.h (map, buffer,
 * number parsing, strings, error prefixes, signal names), which every module leans on, and
 * the guarded small-file read against hostile files (a symlink, a FIFO, a directory, one over
 * the cap, one that is missing).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/mu.h"
#include "common/mu_json.h"

#include "common/mu_banned.h"

/* ---- mu_json: message text ---- */

static void test_json_clip(void **state)
{
    char buf[44];
    char in[64];

    (void)state;
    mu_json_clip("hello", buf, sizeof(buf));
    assert_string_equal(buf, "hello");
    mu_json_clip("a\tb\x01\x7f"
                 "c",
                 buf, sizeof(buf));
    assert_string_equal(buf, "a?b??c");
    /* Exactly 40 bytes fit; 41 are cut to 40 and "...". */
    memset(in, 'x', 40);
    in[40] = '\0';
    mu_json_clip(in, buf, sizeof(buf));
    assert_int_equal(strlen(buf), 40);
    in[40] = 'y';
    in[41] = '\0';
    mu_json_clip(in, buf, sizeof(buf));
    assert_int_equal(strlen(buf), 43);
    assert_string_equal(buf + 40, "...");
    /* A cut never leaves half a UTF-8 sequence: 39 + a 2-byte and 38 + a 3-byte character. */
    memset(in, 'a', 39);
    mu_strlcpy(in + 39, "\xc3\xa9zzzz", sizeof(in) - 39);
    mu_json_clip(in, buf, sizeof(buf));
    assert_int_equal(strlen(buf), 42);
    assert_string_equal(buf + 39, "...");
    memset(in, 'a', 38);
    mu_strlcpy(in + 38, "\xe2\x82\xaczzzz", sizeof(in) - 38);
    mu_json_clip(in, buf, sizeof(buf));
    assert_int_equal(strlen(buf), 41);
    assert_string_equal(buf + 38, "...");
    /* A small buffer. */
    mu_json_clip("abcdef", buf, 6);
    assert_string_equal(buf, "ab...");
}

static void describe_text(const char *json, const char *want)
{
    char buf[64];
    cJSON *v = cJSON_Parse(json);

    assert_non_null(v);
    mu_json_describe(v, buf, sizeof(buf));
    assert_string_equal(buf, want);
    cJSON_Delete(v);
}

static void test_json_describe(void **state)
{
    char buf[64];
    cJSON *raw = cJSON_CreateRaw("1");

    (void)state;
    describe_text("\"abc\"", "'abc'");
    describe_text("\"a\\nb\"", "'a?b'");
    describe_text("12", "12");
    describe_text("-3", "-3");
    describe_text("1.5", "1.5");
    describe_text("1e20", "1e+20");
    describe_text("true", "true");
    describe_text("false", "false");
    describe_text("null", "null");
    describe_text("[]", "an empty array");
    describe_text("[1]", "an array");
    describe_text("{}", "an object");
    describe_text("\"0123456789012345678901234567890123456789012345\"",
                  "'0123456789012345678901234567890123456789...'");
    assert_non_null(raw);
    mu_json_describe(raw, buf, sizeof(buf));
    assert_string_equal(buf, "an invalid value");
    cJSON_Delete(raw);
}

static void test_json_err_expected(void **state)
{
    struct mu_err err = { 0 };
    cJSON *v = cJSON_Parse("\"spt\"");

    (void)state;
    assert_non_null(v);
    assert_int_equal(mu_json_err_expected(&err, MU_E_CONFIG, "pools[1].capacity",
                                          "\"spot\" or \"on-demand\"", v),
                     -1);
    assert_int_equal(err.code, MU_E_CONFIG);
    assert_string_equal(err.msg,
                        "pools[1].capacity: expected \"spot\" or \"on-demand\", got 'spt'");
    assert_int_equal(mu_json_err_expected(NULL, MU_E_SPEC, "x", "y", v), -1);
    cJSON_Delete(v);
}

static void test_json_err_unknown_key(void **state)
{
    static const char *const keys[] = { "name", "weight", "required" };
    struct mu_err err = { 0 };

    (void)state;
    assert_int_equal(mu_json_err_unknown_key(&err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, "queues[0]",
                                             "nmae", keys, MU_ARRAY_LEN(keys)),
                     -1);
    assert_int_equal(err.code, MU_E_CONFIG);
    assert_string_equal(err.msg, "queues[0].nmae: unknown key; did you mean 'name'?");
    mu_json_err_unknown_key(&err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, "", "zzzzzz", keys,
                            MU_ARRAY_LEN(keys));
    assert_string_equal(err.msg, "zzzzzz: unknown key");
    mu_json_err_unknown_key(&err, MU_E_SPEC, MU_JSON_KEY_QUOTED, "topology", "requird", keys,
                            MU_ARRAY_LEN(keys));
    assert_int_equal(err.code, MU_E_SPEC);
    assert_string_equal(err.msg, "topology: unknown key 'requird'; did you mean 'required'?");
    mu_json_err_unknown_key(&err, MU_E_SPEC, MU_JSON_KEY_QUOTED, "spec", "a\tb", keys,
                            MU_ARRAY_LEN(keys));
    assert_string_equal(err.msg, "spec: unknown key 'a?b'");
}

/* ---- mu_json: keys and paths ---- */

static void test_json_edit_distance(void **state)
{
    (void)state;
    assert_int_equal(mu_json_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(mu_json_edit_distance("", "abc"), 3);
    assert_int_equal(mu_json_edit_distance("abc", ""), 3);
    assert_int_equal(mu_json_edit_distance("same", "same"), 0);
    assert_int_equal(mu_json_edit_distance("gpu", "gpu_type"), 5);
    assert_true(mu_json_edit_distance("0123456789012345678901234567890123", "a") == SIZE_MAX);
    assert_int_equal(mu_json_edit_distance("01234567890123456789012345678901",
                                           "01234567890123456789012345678901"),
                     0);
}

static void test_json_keys(void **state)
{
    static const char *const keys[] = { "name", "tasks", "task", "gpus_per_task" };

    (void)state;
    assert_int_equal(mu_json_key_index("name", keys, MU_ARRAY_LEN(keys)), 0);
    assert_int_equal(mu_json_key_index("task", keys, MU_ARRAY_LEN(keys)), 2);
    assert_int_equal(mu_json_key_index("Name", keys, MU_ARRAY_LEN(keys)), -1);
    assert_int_equal(mu_json_key_index("", keys, MU_ARRAY_LEN(keys)), -1);
    assert_int_equal(mu_json_key_index("name", keys, 0), -1);

    assert_string_equal(mu_json_suggest("nmae", keys, MU_ARRAY_LEN(keys)), "name");
    /* "taskz" is 1 from both "tasks" and "task": the first wins. */
    assert_string_equal(mu_json_suggest("taskz", keys, MU_ARRAY_LEN(keys)), "tasks");
    assert_string_equal(mu_json_suggest("gpus_per_tsk", keys, MU_ARRAY_LEN(keys)), "gpus_per_task");
    /* Nothing within 2, and never a distance as long as the key itself. */
    assert_null(mu_json_suggest("memory", keys, MU_ARRAY_LEN(keys)));
    assert_null(mu_json_suggest("x", (const char *const[]){ "y" }, 1));
    assert_null(mu_json_suggest("ab", (const char *const[]){ "xy" }, 1));
}

static void test_json_path_join(void **state)
{
    char buf[16];

    (void)state;
    mu_json_path_join(buf, sizeof(buf), "pools[1]", "name");
    assert_string_equal(buf, "pools[1].name");
    mu_json_path_join(buf, sizeof(buf), "", "redis");
    assert_string_equal(buf, "redis");
    mu_json_path_join(buf, sizeof(buf), "pools[1]", "price_per_hour");
    assert_string_equal(buf, "pools[1].price_");
}

/* ---- mu_json: typed getters ---- */

static void test_json_get_int(void **state)
{
    struct mu_err err = { 0 };
    cJSON *root = cJSON_Parse("[5, 1.5, 0, 7, \"3\", -9007199254740991]");
    int64_t n = -1;

    (void)state;
    assert_non_null(root);
    assert_int_equal(mu_json_get_int(cJSON_GetArrayItem(root, 0), "p", 1, 5, MU_E_SPEC, &n, &err),
                     0);
    assert_int_equal(n, 5);
    assert_int_equal(mu_json_get_int(cJSON_GetArrayItem(root, 1), "p", 1, 5, MU_E_SPEC, &n, &err),
                     -1);
    assert_int_equal(err.code, MU_E_SPEC);
    assert_string_equal(err.msg, "p: expected an integer 1..5, got 1.5");
    assert_int_equal(n, 5); /* untouched on failure */
    assert_int_equal(mu_json_get_int(cJSON_GetArrayItem(root, 2), "q", 1, 5, MU_E_CONFIG, &n, &err),
                     -1);
    assert_int_equal(err.code, MU_E_CONFIG);
    assert_string_equal(err.msg, "q: expected an integer 1..5, got 0");
    assert_int_equal(mu_json_get_int(cJSON_GetArrayItem(root, 3), "p", 1, 5, MU_E_SPEC, &n, &err),
                     -1);
    assert_int_equal(mu_json_get_int(cJSON_GetArrayItem(root, 4), "p", 1, 5, MU_E_SPEC, &n, &err),
                     -1);
    assert_string_equal(err.msg, "p: expected an integer 1..5, got '3'");
    assert_int_equal(mu_json_get_int(cJSON_GetArrayItem(root, 5), "p", INT64_C(-9007199254740991),
                                     0, MU_E_SPEC, &n, &err),
                     0);
    assert_true(n == INT64_C(-9007199254740991));
    cJSON_Delete(root);
}

static void test_json_get_number(void **state)
{
    struct mu_err err = { 0 };
    cJSON *root = cJSON_Parse("[2.5, -0.1, null]");
    double d = -1;

    (void)state;
    assert_non_null(root);
    assert_int_equal(mu_json_get_number(cJSON_GetArrayItem(root, 0), "price", 0, 1e6, "a price",
                                        MU_E_CONFIG, &d, &err),
                     0);
    assert_true(d == 2.5);
    assert_int_equal(mu_json_get_number(cJSON_GetArrayItem(root, 1), "price", 0, 1e6, "a price",
                                        MU_E_CONFIG, &d, &err),
                     -1);
    assert_string_equal(err.msg, "price: expected a price, got -0.1");
    assert_true(d == 2.5);
    assert_int_equal(mu_json_get_number(cJSON_GetArrayItem(root, 2), "price", 0, 1e6, "a price",
                                        MU_E_CONFIG, &d, &err),
                     -1);
    assert_string_equal(err.msg, "price: expected a price, got null");
    cJSON_Delete(root);
}

static void test_json_get_name(void **state)
{
    struct mu_err err = { 0 };
    cJSON *root = cJSON_Parse("[\"H100\", \"12345678\", \"a b\", \"\", 3]");
    char dst[8] = "old";

    (void)state;
    assert_non_null(root);
    assert_int_equal(mu_json_get_name(cJSON_GetArrayItem(root, 0), "gpu_type", dst, sizeof(dst),
                                      MU_E_SPEC, &err),
                     0);
    assert_string_equal(dst, "H100");
    for (int i = 1; i < 5; i++) {
        assert_int_equal(mu_json_get_name(cJSON_GetArrayItem(root, i), "gpu_type", dst, sizeof(dst),
                                          MU_E_SPEC, &err),
                         -1);
        assert_string_equal(dst, "H100");
    }
    assert_int_equal(err.code, MU_E_SPEC);
    assert_string_equal(err.msg,
                        "gpu_type: expected a name of 1..7 characters [A-Za-z0-9._:-], got 3");
    cJSON_Delete(root);
}

/* ---- mu_json: raw text pre-scan ---- */

static enum mu_json_flaw scan(struct mu_json_scan *sc, const char *text, int max_depth)
{
    return mu_json_scan(sc, text, strlen(text), max_depth);
}

static void assert_scan_path(const char *text, bool include_key, const char *want)
{
    struct mu_json_scan sc;
    char path[96];

    assert_int_not_equal(scan(&sc, text, 8), MU_JSON_FLAW_NONE);
    mu_json_scan_path(&sc, "spec", include_key, path, sizeof(path));
    assert_string_equal(path, want);
}

static void test_json_scan_clean(void **state)
{
    struct mu_json_scan sc;
    static const char *const ok[] = {
        "{}",
        "{\"a\": [1, 2, {\"b\": \"c\"}], \"d\": null}",
        "{\"a\": \"tab\\there \\\"quoted\\\" \\\\u0000 is text\"}", /* escaped backslash */
        "\t{\n\"a\"\r:\x01 1}",                                     /* control outside strings */
        "not json at all",
        "{\"\\u0001\": \"\\u0100\"}",
    };

    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(ok); i++) {
        assert_int_equal(scan(&sc, ok[i], 8), MU_JSON_FLAW_NONE);
        assert_int_equal(sc.offset, strlen(ok[i]));
    }
    /* "\u00001" is U+0000 followed by '1': still a NUL. */
    assert_int_equal(scan(&sc, "{\"a\": \"\\u00001\"}", 8), MU_JSON_FLAW_NUL_ESCAPE);
    assert_int_equal(mu_json_scan(&sc, "", 0, 8), MU_JSON_FLAW_NONE);
}

static void test_json_scan_flaws(void **state)
{
    struct mu_json_scan sc;
    static const char with_nul[] = "{\"a\": 1\0}";

    (void)state;
    assert_int_equal(mu_json_scan(&sc, with_nul, sizeof(with_nul) - 1, 8), MU_JSON_FLAW_NUL_BYTE);
    assert_int_equal(sc.offset, 7);
    assert_int_equal(scan(&sc, "{\"a\": \"x\ny\"}", 8), MU_JSON_FLAW_CONTROL);
    assert_int_equal(sc.offset, 8);
    assert_int_equal(scan(&sc, "{\"a\": \"x\\u0000\"}", 8), MU_JSON_FLAW_NUL_ESCAPE);
    assert_int_equal(sc.offset, 8);
    assert_false(sc.in_key);
    assert_int_equal(scan(&sc, "{\"k\\u0000\": 1}", 8), MU_JSON_FLAW_NUL_ESCAPE);
    assert_true(sc.in_key);
    /* A backslash as the last byte is not an escape to look past. */
    assert_int_equal(scan(&sc, "\"\\", 8), MU_JSON_FLAW_NONE);
    assert_int_equal(scan(&sc, "\"\\u000", 8), MU_JSON_FLAW_NONE);
}

static void test_json_scan_depth(void **state)
{
    struct mu_json_scan sc;
    char deep[2048];

    (void)state;
    assert_int_equal(scan(&sc, "[[1]]", 2), MU_JSON_FLAW_NONE);
    assert_int_equal(scan(&sc, "[[[1]]]", 2), MU_JSON_FLAW_TOO_DEEP);
    assert_int_equal(sc.offset, 2);
    assert_int_equal(sc.depth, 2);
    /* Brackets inside strings do not count. */
    assert_int_equal(scan(&sc, "[\"[[[[\"]", 2), MU_JSON_FLAW_NONE);
    /* No limit: deeper than the levels remembered, without running off them. */
    memset(deep, '[', 1000);
    memset(deep + 1000, ']', 1000);
    deep[2000] = '\0';
    assert_int_equal(scan(&sc, deep, 0), MU_JSON_FLAW_NONE);
    memcpy(deep + 500, "{\"a\":\"\\u0000\"}", 14);
    assert_int_equal(scan(&sc, deep, 0), MU_JSON_FLAW_NUL_ESCAPE);
    assert_int_equal(scan(&sc, deep, 8), MU_JSON_FLAW_TOO_DEEP);
}

static void test_json_scan_path(void **state)
{
    char path[12];
    struct mu_json_scan sc;

    (void)state;
    assert_scan_path("{\"env\": {\"FOO\": \"x\\u0000\"}}", true, "env.FOO");
    assert_scan_path("{\"env\": {\"FOO\\u0000\": \"x\"}}", false, "env");
    assert_scan_path("{\"k\\u0000\": 1}", false, "spec");
    assert_scan_path("{\"command\": [\"a\", \"b\", \"\\u0000\"]}", true, "command[2]");
    assert_scan_path("[1, [2, \"\\u0000\"]]", true, "spec[1][1]");
    assert_scan_path("{\"a\": {\"b\": [[[[[[[1]]]]]]]}}", true, "a.b[0][0][0][0][0][0]");
    /* Cut where the buffer ends. */
    assert_int_equal(scan(&sc, "{\"abcdef\": {\"ghijkl\": \"\\u0000\"}}", 8),
                     MU_JSON_FLAW_NUL_ESCAPE);
    mu_json_scan_path(&sc, "spec", true, path, sizeof(path));
    assert_string_equal(path, "abcdef.ghij");
}

static void test_json_text_line(void **state)
{
    static const char text[] = "{\n\"a\":\n1}";

    (void)state;
    assert_int_equal(mu_json_text_line(text, 0), 1);
    assert_int_equal(mu_json_text_line(text, 1), 1);
    assert_int_equal(mu_json_text_line(text, 2), 2);
    assert_int_equal(mu_json_text_line(text, 7), 3);
    assert_int_equal(mu_json_text_line(text, sizeof(text) - 1), 3);
    assert_int_equal(mu_json_text_line("", 0), 1);
}

/* ---- mu.h: map ---- */

static void test_map(void **state)
{
    struct mu_err err = { 0 };
    struct mu_map *m = mu_map_new();
    int values[300];
    char key[32];
    size_t pos = 0;
    size_t seen = 0;
    void *v;

    (void)state;
    assert_non_null(m);
    assert_int_equal(mu_map_count(m), 0);
    assert_null(mu_map_get(m, "nope"));
    assert_null(mu_map_remove(m, "nope"));
    assert_null(mu_map_next(m, &pos));
    /* Enough keys to grow the table a few times. */
    for (int i = 0; i < 300; i++) {
        values[i] = i;
        (void)mu_snprintf(key, sizeof(key), "node-%d", i);
        assert_int_equal(mu_map_put(m, key, &values[i], &err), 0);
    }
    assert_int_equal(mu_map_count(m), 300);
    assert_ptr_equal(mu_map_get(m, "node-0"), &values[0]);
    assert_ptr_equal(mu_map_get(m, "node-299"), &values[299]);
    /* Replacing keeps the count. */
    assert_int_equal(mu_map_put(m, "node-7", &values[8], &err), 0);
    assert_int_equal(mu_map_count(m), 300);
    assert_ptr_equal(mu_map_get(m, "node-7"), &values[8]);
    assert_ptr_equal(mu_map_remove(m, "node-7"), &values[8]);
    assert_null(mu_map_get(m, "node-7"));
    assert_int_equal(mu_map_count(m), 299);
    /* Iteration visits every value once; removing the current key during it is allowed. */
    pos = 0;
    while ((v = mu_map_next(m, &pos)) != NULL) {
        int i = *(int *)v;
        seen++;
        if (i % 2 == 0) {
            (void)mu_snprintf(key, sizeof(key), "node-%d", i);
            assert_ptr_equal(mu_map_remove(m, key), v);
        }
    }
    assert_int_equal(seen, 299);
    assert_int_equal(mu_map_count(m), 149);
    assert_null(mu_map_get(m, "node-2"));
    assert_ptr_equal(mu_map_get(m, "node-3"), &values[3]);
    mu_map_free(m);
    /* A map that was never created reads as empty, so cleanup after a failed setup can walk it
     * (musterd crashed in d_jobs_free after a config error, issue #10). */
    mu_map_free(NULL);
    pos = 0;
    assert_null(mu_map_next(NULL, &pos));
    assert_int_equal(pos, 0);
    assert_int_equal(mu_map_count(NULL), 0);
}

static void test_map_churn(void **state)
{
    struct mu_map *m = mu_map_new();
    int value = 1;
    char key[32];

    (void)state;
    assert_non_null(m);
    /* Put-and-remove many distinct keys: tombstones must not fill the table. */
    for (int i = 0; i < 20000; i++) {
        (void)mu_snprintf(key, sizeof(key), "job-%d", i);
        assert_int_equal(mu_map_put(m, key, &value, NULL), 0);
        assert_ptr_equal(mu_map_remove(m, key), &value);
    }
    assert_int_equal(mu_map_count(m), 0);
    assert_null(mu_map_get(m, "job-1"));
    mu_map_free(m);
}

/* ---- mu.h: buffer ---- */

static void test_buf(void **state)
{
    struct mu_err err = { 0 };
    struct mu_buf b;
    char *p;

    (void)state;
    mu_buf_init(&b, 0);
    assert_null(mu_buf_take(&b));
    assert_int_equal(mu_buf_append(&b, "ab", 2, &err), 0);
    assert_int_equal(mu_buf_appendf(&b, &err, "-%d-%s", 42, "x"), 0);
    assert_int_equal(mu_buf_append(&b, NULL, 0, &err), 0);
    assert_int_equal(b.len, 7);
    assert_string_equal(b.data, "ab-42-x");
    mu_buf_release(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);

    mu_buf_init(&b, 0);
    assert_int_equal(mu_buf_append_json_str(&b, "q\"b\\n\n\r\t\x01\x1f\xc3\xa9", &err), 0);
    assert_string_equal(b.data, "\"q\\\"b\\\\n\\n\\r\\t\\u0001\\u001f\xc3\xa9\"");
    p = mu_buf_take(&b);
    assert_non_null(p);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    free(p);
    mu_buf_release(&b);
    /* Runs without escapes go whole: escapes at either end, back to back, and none at all. */
    mu_buf_init(&b, 0);
    assert_int_equal(mu_buf_append_json_str(&b, "", &err), 0);
    assert_int_equal(mu_buf_append_json_str(&b, "\"\"x\\", &err), 0);
    assert_int_equal(mu_buf_append_json_str(&b, "\nplain run\x7f\t", &err), 0);
    assert_int_equal(mu_buf_append_json_str(&b, "node-01234", &err), 0);
    assert_string_equal(b.data, "\"\"\"\\\"\\\"x\\\\\"\"\\nplain run\x7f\\t\"\"node-01234\"");
    mu_buf_release(&b);

    /* The cap: a failed append leaves the buffer as it was. */
    mu_buf_init(&b, 8);
    assert_int_equal(mu_buf_append(&b, "12345678", 8, &err), 0);
    assert_int_equal(mu_buf_append(&b, "9", 1, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(mu_buf_appendf(&b, &err, "%s", "9"), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "12345678");
    mu_buf_release(&b);
}

/* mu_hash_more goes on where mu_hash stopped: a sum built in pieces is the sum of the whole. */
static void test_hash_more(void **state)
{
    static const char text[] = "node-0007:{\"gpus\":8}";
    uint64_t h = MU_HASH_START;

    (void)state;
    assert_true(mu_hash("", 0) == MU_HASH_START);
    for (size_t i = 0; i < sizeof(text) - 1; i += 3)
        h = mu_hash_more(h, text + i, sizeof(text) - 1 - i < 3 ? sizeof(text) - 1 - i : 3);
    assert_true(h == mu_hash(text, sizeof(text) - 1));
    assert_true(mu_hash_more(mu_hash("ab", 2), "c", 1) != mu_hash_more(mu_hash("a", 1), "c", 1));
}

/* ---- mu.h: the guarded small-file read ---- */

/* Writes len bytes of data to path (created or truncated). */
static void put_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void test_file_read_small(void **state)
{
    char tmpl[] = "/tmp/muster-test-common-XXXXXX";
    char *dir = mkdtemp(tmpl);
    char path[256];
    char link[256];
    struct mu_err err;
    uint64_t before = (uint64_t)time(NULL) * 1000u;
    uint64_t mtime = 0;
    size_t len = 99;
    char *text = NULL;

    (void)state;
    assert_non_null(dir);
    assert_int_equal(mu_snprintf(path, sizeof(path), "%s/f", dir), 0);
    assert_int_equal(mu_snprintf(link, sizeof(link), "%s/link", dir), 0);

    /* Missing: 0, and nothing set (err untouched). */
    mu_err_clear(&err);
    assert_int_equal(mu_file_read_small(path, 16, &text, &len, &mtime, &err), 0);
    assert_null(text);
    assert_int_equal(len, 99);
    assert_int_equal(err.code, MU_E_OK);

    /* A regular file: its bytes (a NUL included), length and modification time. */
    put_file(path, "ab\0cd", 5);
    assert_int_equal(mu_file_read_small(path, 16, &text, &len, &mtime, &err), 1);
    assert_non_null(text);
    assert_int_equal(len, 5);
    assert_memory_equal(text, "ab\0cd", 6); /* NUL-terminated too */
    assert_true(mtime + 2000 >= before && mtime <= (uint64_t)time(NULL) * 1000u + 2000);
    free(text);
    text = NULL;
    /* Exactly at the cap is fine, one byte over is not; len and mtime may be NULL. */
    put_file(path, "0123456789abcdef", 16);
    assert_int_equal(mu_file_read_small(path, 16, &text, NULL, NULL, &err), 1);
    assert_string_equal(text, "0123456789abcdef");
    free(text);
    text = NULL;
    put_file(path, "0123456789abcdefg", 17);
    assert_int_equal(mu_file_read_small(path, 16, &text, &len, NULL, &err), -1);
    assert_null(text);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_non_null(strstr(err.msg, "/f' is larger than 16 bytes"));
    /* Empty: an empty string, not NULL. */
    put_file(path, "", 0);
    assert_int_equal(mu_file_read_small(path, 16, &text, &len, NULL, &err), 1);
    assert_string_equal(text, "");
    assert_int_equal(len, 0);
    free(text);
    text = NULL;

    /* A symlink is refused, even to a good file: its target is never read. */
    put_file(path, "good", 4);
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(mu_file_read_small(link, 16, &text, &len, NULL, &err), -1);
    assert_null(text);
    assert_int_equal(err.code, MU_E_IO);
    assert_non_null(strstr(err.msg, "cannot open '"));
    assert_int_equal(unlink(link), 0);
    /* A dangling one too (it is there, if its target is not). */
    assert_int_equal(symlink("/nonexistent/muster", link), 0);
    assert_int_equal(mu_file_read_small(link, 16, &text, &len, NULL, &err), -1);
    assert_int_equal(unlink(link), 0);

    /* A FIFO does not block the reader and is refused; so are a directory and a device. */
    assert_int_equal(mkfifo(link, 0600), 0);
    assert_int_equal(mu_file_read_small(link, 16, &text, &len, NULL, &err), -1);
    assert_null(text);
    assert_int_equal(err.code, MU_E_IO);
    assert_non_null(strstr(err.msg, "/link' is not a regular file"));
    assert_int_equal(unlink(link), 0);
    assert_int_equal(mu_file_read_small(dir, 16, &text, &len, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "is not a regular file"));
    assert_int_equal(mu_file_read_small("/dev/zero", 16, &text, &len, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "is not a regular file"));
    assert_null(text);

    /* A /proc file says it is empty yet has bytes: read to its end, under the cap. */
    assert_int_equal(mu_file_read_small("/proc/self/cmdline", 1u << 16, &text, &len, NULL, &err),
                     1);
    assert_true(len > 0);
    free(text);

    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- mu.h: numbers, strings, errors, signals ---- */

static void test_parse_i64(void **state)
{
    struct mu_err err = { 0 };
    int64_t n = 7;

    (void)state;
    assert_int_equal(mu_parse_i64("42", 0, 100, &n, &err), 0);
    assert_int_equal(n, 42);
    assert_int_equal(mu_parse_i64("-5", -10, 10, &n, &err), 0);
    assert_int_equal(n, -5);
    assert_int_equal(mu_parse_i64("9223372036854775807", 0, INT64_MAX, &n, &err), 0);
    assert_true(n == INT64_MAX);
    static const char *const bad_parse[] = { "", " 1", "1 ", "1x", "0x10", "abc", "+" };
    for (size_t i = 0; i < MU_ARRAY_LEN(bad_parse); i++) {
        n = 7;
        assert_int_equal(mu_parse_i64(bad_parse[i], -100, 100, &n, &err), -1);
        assert_int_equal(err.code, MU_E_PARSE);
        assert_int_equal(n, 7);
    }
    assert_int_equal(mu_parse_i64(NULL, 0, 1, &n, &err), -1);
    assert_int_equal(err.code, MU_E_PARSE);
    assert_string_equal(err.msg, "expected an integer, got ''");
    assert_int_equal(mu_parse_i64("101", 0, 100, &n, &err), -1);
    assert_int_equal(err.code, MU_E_RANGE);
    assert_string_equal(err.msg, "'101' is out of range 0..100");
    assert_int_equal(mu_parse_i64("99999999999999999999", 0, INT64_MAX, &n, &err), -1);
    assert_int_equal(err.code, MU_E_RANGE);
    assert_int_equal(mu_parse_i64("-1", 0, 100, &n, NULL), -1);
    assert_int_equal(n, 7);
}

static void test_parse_double(void **state)
{
    struct mu_err err = { 0 };
    double d = 7;

    (void)state;
    assert_int_equal(mu_parse_double("1.5", 0, 2, &d, &err), 0);
    assert_true(d == 1.5);
    assert_int_equal(mu_parse_double("-2e3", -1e4, 0, &d, &err), 0);
    assert_true(d == -2000);
    static const char *const bad_parse[] = { "", " 1", "1.5x", "abc" };
    for (size_t i = 0; i < MU_ARRAY_LEN(bad_parse); i++) {
        assert_int_equal(mu_parse_double(bad_parse[i], -1e9, 1e9, &d, &err), -1);
        assert_int_equal(err.code, MU_E_PARSE);
    }
    static const char *const bad_range[] = { "3", "nan", "inf", "-inf", "1e400" };
    for (size_t i = 0; i < MU_ARRAY_LEN(bad_range); i++) {
        assert_int_equal(mu_parse_double(bad_range[i], 0, 2, &d, &err), -1);
        assert_int_equal(err.code, MU_E_RANGE);
    }
    assert_true(d == -2000);
}

static void test_strlcpy(void **state)
{
    char buf[4] = "zzz";

    (void)state;
    assert_int_equal(mu_strlcpy(buf, "ab", sizeof(buf)), 2);
    assert_string_equal(buf, "ab");
    assert_int_equal(mu_strlcpy(buf, "abcdef", sizeof(buf)), 6);
    assert_string_equal(buf, "abc");
    assert_int_equal(mu_strlcpy(buf, "", sizeof(buf)), 0);
    assert_string_equal(buf, "");
    buf[0] = 'q';
    assert_int_equal(mu_strlcpy(buf, "xyz", 0), 3);
    assert_int_equal(buf[0], 'q');
    assert_int_equal(mu_snprintf(buf, sizeof(buf), "%d", 123), 0);
    assert_int_equal(mu_snprintf(buf, sizeof(buf), "%d", 1234), -1);
    assert_string_equal(buf, "123");
}

static void test_err_prefix(void **state)
{
    struct mu_err err = { 0 };
    char longer[400];

    (void)state;
    mu_errf(&err, MU_E_SPEC, "tasks: expected %s", "an integer");
    mu_err_prefix(&err, "job %s: ", "j-1");
    assert_string_equal(err.msg, "job j-1: tasks: expected an integer");
    assert_int_equal(err.code, MU_E_SPEC);
    mu_err_prefix(&err, "submit: ");
    assert_string_equal(err.msg, "submit: job j-1: tasks: expected an integer");
    /* Cut at the end of the buffer, the prefix kept whole. */
    memset(longer, 'p', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    mu_err_prefix(&err, "%s", longer);
    assert_int_equal(strlen(err.msg), sizeof(err.msg) - 1);
    assert_int_equal(err.msg[0], 'p');
    assert_int_equal(err.msg[sizeof(err.msg) - 2], 'p');
    mu_errf(&err, MU_E_IO, "read");
    mu_err_prefix(&err, "%s", "");
    assert_string_equal(err.msg, "read");
    mu_err_prefix(NULL, "x");
    mu_err_clear(&err);
    assert_int_equal(err.code, MU_E_OK);
    assert_string_equal(err.msg, "");
    assert_string_equal(mu_err_name(MU_E_SPEC), "MU_E_SPEC");
    assert_string_equal(mu_err_text(MU_E_CONFIG), "configuration error");
    assert_string_equal(mu_err_name(999), "unknown");
}

static void test_duration(void **state)
{
    static const struct {
        int64_t s;
        const char *want;
    } cases[] = { { -5, "0s" },      { 0, "0s" },       { 59, "59s" },
                  { 60, "1m" },      { 61, "2m" },      { 3599, "60m" },
                  { 3600, "1h00m" }, { 7500, "2h05m" }, { 86399, "23h59m" } };
    char buf[16];
    char tiny[3];
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        mu_duration_format(cases[i].s, buf, sizeof(buf));
        assert_string_equal(buf, cases[i].want);
    }
    mu_duration_format(7500, tiny, sizeof(tiny));
    assert_string_equal(tiny, "2h");
}

static void test_signal(void **state)
{
    (void)state;
    assert_int_equal(mu_signal_parse("SIGUSR1"), SIGUSR1);
    assert_int_equal(mu_signal_parse("usr2"), SIGUSR2);
    assert_int_equal(mu_signal_parse("Term"), SIGTERM);
    assert_int_equal(mu_signal_parse("sigkill"), SIGKILL);
    assert_int_equal(mu_signal_parse("WINCH"), SIGWINCH);
    assert_int_equal(mu_signal_parse("9"), 9);
    assert_int_equal(mu_signal_parse("64"), 64);
    assert_int_equal(mu_signal_parse("0"), -1);
    assert_int_equal(mu_signal_parse("65"), -1);
    assert_int_equal(mu_signal_parse("-1"), -1);
    assert_int_equal(mu_signal_parse("SIGFOO"), -1);
    assert_int_equal(mu_signal_parse("SIG"), -1);
    assert_int_equal(mu_signal_parse(""), -1);
    assert_int_equal(mu_signal_parse(NULL), -1);
    assert_string_equal(mu_signal_name(SIGUSR1), "SIGUSR1");
    assert_string_equal(mu_signal_name(SIGSTOP), "SIGSTOP");
    assert_string_equal(mu_signal_name(99), "SIG?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_clip),
        cmocka_unit_test(test_json_describe),
        cmocka_unit_test(test_json_err_expected),
        cmocka_unit_test(test_json_err_unknown_key),
        cmocka_unit_test(test_json_edit_distance),
        cmocka_unit_test(test_json_keys),
        cmocka_unit_test(test_json_path_join),
        cmocka_unit_test(test_json_get_int),
        cmocka_unit_test(test_json_get_number),
        cmocka_unit_test(test_json_get_name),
        cmocka_unit_test(test_json_scan_clean),
        cmocka_unit_test(test_json_scan_flaws),
        cmocka_unit_test(test_json_scan_depth),
        cmocka_unit_test(test_json_scan_path),
        cmocka_unit_test(test_json_text_line),
        cmocka_unit_test(test_map),
        cmocka_unit_test(test_map_churn),
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_hash_more),
        cmocka_unit_test(test_file_read_small),
        cmocka_unit_test(test_parse_i64),
        cmocka_unit_test(test_parse_double),
        cmocka_unit_test(test_strlcpy),
        cmocka_unit_test(test_err_prefix),
        cmocka_unit_test(test_signal),
        cmocka_unit_test(test_duration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

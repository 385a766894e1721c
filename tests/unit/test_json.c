/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for mu_json_parse_object (common/json.c), the one strict parse from hostile bytes
 * to a cJSON object that the config and spec parsers share.  The documents here are made up, so
 * that each wording rule of struct mu_json_doc (subject or none, line or key path, size and depth
 * caps, the error code) is pinned on its own; test_cfg.c and test_spec.c pin the parsers' real
 * messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/mu.h"
#include "common/mu_json.h"

#include "common/mu_banned.h"

/* Like the config: no subject, problems by line, no depth cap of its own. */
static const struct mu_json_doc line_doc = {
    .subject = NULL,
    .noun = "settings",
    .max_bytes = 64,
    .max_depth = 0,
    .where = MU_JSON_WHERE_LINE,
};

/* Like a spec: a subject, problems by key path, a small depth cap. */
static const struct mu_json_doc path_doc = {
    .subject = "req",
    .noun = "request",
    .max_bytes = 64,
    .max_depth = 3,
    .where = MU_JSON_WHERE_PATH,
};

/* Key paths without a subject start at "root". */
static const struct mu_json_doc path_nosubj_doc = {
    .subject = NULL,
    .noun = "request",
    .max_bytes = 64,
    .max_depth = 3,
    .where = MU_JSON_WHERE_PATH,
};

static void parse_bad(
    const struct mu_json_doc *doc, const char *text, size_t len, int code, const char *want)
{
    struct mu_err err;
    cJSON *root;

    mu_err_clear(&err);
    root = mu_json_parse_object(text, len, doc, code, &err);
    if (root) {
        cJSON_Delete(root);
        fail_msg("accepted: %.200s", text ? text : "(null)");
    }
    assert_int_equal(err.code, code);
    assert_string_equal(err.msg, want);
}

static const struct {
    const char *text;
    const char *line_msg; /* line_doc, MU_E_CONFIG */
    const char *path_msg; /* path_doc, MU_E_SPEC */
} bad[] = {
    { "", "expected a JSON object, got an empty document",
      "req: expected a JSON object, got an empty document" },
    { " \t\r\n ", "expected a JSON object, got an empty document",
      "req: expected a JSON object, got an empty document" },
    { "[]", "expected a JSON object at the top, got an empty array",
      "req: expected a JSON object, got an empty array" },
    { "\"x\"", "expected a JSON object at the top, got 'x'",
      "req: expected a JSON object, got 'x'" },
    { "null", "expected a JSON object at the top, got null",
      "req: expected a JSON object, got null" },
    { "{\n\"a\":1,}", "not valid JSON near line 2 (byte 9)", "req: not valid JSON near byte 9" },
    { "{} {}", "not valid JSON near line 1 (byte 3)", "req: not valid JSON near byte 3" },
    { "{\n\"a\":\"x\ty\"}",
      "not valid JSON near line 2 (byte 8): a raw control character in a string",
      "req: not valid JSON near byte 8 (raw control character in a string)" },
    { "{\"a\":[\"x\\u0000\"]}",
      "not valid JSON near line 1 (byte 8): a NUL character (\\u0000) in a string",
      "a[0]: string contains a NUL character (\\u0000)" },
    { "{\"a\\u0000\":1}",
      "not valid JSON near line 1 (byte 3): a NUL character (\\u0000) in a string",
      "req: a key contains a NUL character (\\u0000)" },
};

static void test_bad_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(bad); i++) {
        parse_bad(&line_doc, bad[i].text, strlen(bad[i].text), MU_E_CONFIG, bad[i].line_msg);
        parse_bad(&path_doc, bad[i].text, strlen(bad[i].text), MU_E_SPEC, bad[i].path_msg);
    }
}

static void test_nul_byte(void **state)
{
    static const char text[] = "{\"a\":\"x\0\"}";
    (void)state;

    parse_bad(&line_doc, text, sizeof(text) - 1, MU_E_CONFIG,
              "not valid JSON near line 1 (byte 7): a NUL byte");
    parse_bad(&path_doc, text, sizeof(text) - 1, MU_E_SPEC,
              "req: not valid JSON near byte 7 (NUL byte)");
    parse_bad(&path_nosubj_doc, text, sizeof(text) - 1, MU_E_SPEC,
              "not valid JSON near byte 7 (NUL byte)");
}

static void test_depth(void **state)
{
    const char *deep = "{\"a\":{\"b\":[[1]]}}";
    (void)state;

    parse_bad(&path_doc, deep, strlen(deep), MU_E_SPEC,
              "a.b[0]: nested deeper than 3 levels near byte 11");
    parse_bad(&path_nosubj_doc, "[[[[1]]]]", 9, MU_E_SPEC,
              "root[0][0][0]: nested deeper than 3 levels near byte 3");
    /* max_depth 0 leaves nesting to cJSON: the line doc takes it. */
    cJSON *root = mu_json_parse_object(deep, strlen(deep), &line_doc, MU_E_CONFIG, NULL);
    assert_non_null(root);
    cJSON_Delete(root);
}

static void test_size_cap(void **state)
{
    char text[80];
    (void)state;

    /* 64 bytes pass, 65 do not, even as white space. */
    memset(text, ' ', sizeof(text));
    text[0] = '{';
    text[63] = '}';
    cJSON *root = mu_json_parse_object(text, 64, &line_doc, MU_E_CONFIG, NULL);
    assert_non_null(root);
    cJSON_Delete(root);
    parse_bad(&line_doc, text, 65, MU_E_CONFIG, "larger than 64 bytes (got 65)");
    parse_bad(&path_doc, text, 65, MU_E_SPEC, "req: larger than 64 bytes (got 65)");
}

static void test_null_text(void **state)
{
    (void)state;

    parse_bad(&line_doc, NULL, 3, MU_E_INVAL, "no settings text");
    parse_bad(&path_doc, NULL, 3, MU_E_INVAL, "req: no text");
    /* NULL with no length is an empty document, not a caller error. */
    parse_bad(&line_doc, NULL, 0, MU_E_CONFIG, "expected a JSON object, got an empty document");
}

static void test_good(void **state)
{
    /* Not NUL-terminated: only the first len bytes count, and the text is left as it was. */
    static const char text[] = "{\"a\":[1,\"\\u00e9\"],\"b\":{}}trailing";
    char copy[sizeof(text)];
    struct mu_err err;
    size_t len = strlen(text) - strlen("trailing");
    (void)state;

    memcpy(copy, text, sizeof(text));
    mu_err_clear(&err);
    cJSON *root = mu_json_parse_object(copy, len, &path_doc, MU_E_SPEC, &err);
    assert_non_null(root);
    assert_true(cJSON_IsObject(root));
    assert_int_equal(err.code, MU_E_OK);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "a");
    assert_int_equal(cJSON_GetArraySize(a), 2);
    assert_string_equal(cJSON_GetArrayItem(a, 1)->valuestring, "\xc3\xa9");
    assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "b")));
    assert_memory_equal(copy, text, sizeof(text));
    cJSON_Delete(root);

    /* The whole text, trailing bytes included, is not one document; err may be NULL. */
    assert_null(mu_json_parse_object(copy, strlen(copy), &path_doc, MU_E_SPEC, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_table), cmocka_unit_test(test_nul_byte),
        cmocka_unit_test(test_depth),     cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_null_text), cmocka_unit_test(test_good),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

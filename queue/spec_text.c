/* SPDX-License-Identifier: MIT */
/*
 * The job spec's string checks, shared by queue/spec.c and queue/spec_deps.c (internal.h).  They
 * live apart so that both parsers call down to them and neither calls the other back (issue #41:
 * no two files of a module call each other).
 */
#include "queue/internal.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "common/mu_json.h"

#include "common/mu_banned.h"

int queue_json_str(
    const cJSON *v, const char *path, size_t max_len, const char **out, struct mu_err *err)
{
    if (!cJSON_IsString(v)) {
        (void)mu_json_err_expected(err, MU_E_SPEC, path, "a string", v);
        return -1; /* spelled out: callers read *out whenever this returns 0 */
    }
    if (strlen(v->valuestring) > max_len) {
        (void)mu_errf(err, MU_E_SPEC, "%s: string longer than %zu bytes", path, max_len);
        return -1;
    }
    *out = v->valuestring;
    return 0;
}

int queue_json_printable(
    const cJSON *v, const char *path, bool ascii, char *dst, size_t size, struct mu_err *err)
{
    const char *s;
    char expected[80];

    if (queue_json_str(v, path, size - 1, &s, err) != 0)
        return -1;
    bool ok = s[0] != '\0';
    for (const unsigned char *p = (const unsigned char *)s; ok && *p; p++) {
        if (*p < 0x20 || *p == 0x7f || (ascii && *p > 0x7f))
            ok = false;
    }
    if (!ok) {
        (void)mu_snprintf(expected, sizeof(expected), "1..%zu printable%s characters", size - 1,
                          ascii ? " ASCII" : "");
        return mu_json_err_expected(err, MU_E_SPEC, path, expected, v);
    }
    mu_strlcpy(dst, s, size);
    return 0;
}

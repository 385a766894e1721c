/* SPDX-License-Identifier: MIT */
/*
 * musterctl submit FILE|-: appends a job spec to the submit stream and prints the job id.
 *
 * Only the cheap checks happen here (size cap, one JSON object, no NUL byte), so that a typo
 * fails at once with the byte where parsing stopped; full validation against the cluster is
 * musterd's job (a bad spec becomes a REJECTED job with an error, DESIGN §3).  The exact bytes
 * read are submitted, not a re-serialisation, so what the user wrote is what `show` returns.
 * submit does not wait for musterd.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

/* Describes where parsing stopped as "byte N (line L, column C)". */
static void where_format(const char *text, size_t offset, char *buf, size_t size)
{
    size_t line = 1;
    size_t col = 1;

    for (size_t i = 0; i < offset; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    (void)snprintf(buf, size, "byte %zu (line %zu, column %zu)", offset, line, col);
}

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    return "null";
}

int ctl_cmd_submit(struct ctl *ctl, const struct ctl_args *args)
{
    const char *path = args->argv[0];
    const char *label = strcmp(path, "-") == 0 ? "stdin" : path;
    struct mu_err err = { 0 };
    char *text = NULL;
    cJSON *spec = NULL;
    cJSON *doc = NULL;
    const char *end = NULL;
    struct queue *q;
    char id[QUEUE_JOB_ID_MAX];
    char where[96];
    size_t len = 0;
    int rc = CTL_EXIT_FAIL;

    /* /dev/stdin reads a pipe, a terminal or a redirected file alike, through the same cap. */
    text = mu_file_read(strcmp(path, "-") == 0 ? "/dev/stdin" : path, QUEUE_SPEC_MAX_BYTES, &len,
                        &err);
    if (!text) {
        if (err.code == MU_E_TOOBIG)
            ctl_fail(ctl, "%s: larger than %u bytes, the limit for a job spec", label,
                     QUEUE_SPEC_MAX_BYTES);
        else
            ctl_fail(ctl, "%s", err.msg);
        goto out;
    }
    if (strlen(text) != len) {
        where_format(text, strlen(text), where, sizeof(where));
        ctl_fail(ctl, "%s: not valid JSON near %s: NUL byte", label, where);
        goto out;
    }
    spec = cJSON_ParseWithOpts(text, &end, 1);
    if (!spec) {
        size_t offset = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
        where_format(text, offset, where, sizeof(where));
        ctl_fail(ctl, "%s: not valid JSON near %s", label, where);
        goto out;
    }
    if (!cJSON_IsObject(spec)) {
        ctl_fail(ctl, "%s: a job spec must be a JSON object, got %s", label, json_type_name(spec));
        goto out;
    }
    q = ctl_queue(ctl);
    if (!q)
        goto out;
    if (queue_submit(q, text, id, sizeof(id), &err) != 0) {
        ctl_fail(ctl, "%s", err.msg);
        goto out;
    }
    if (ctl->output == CTL_OUT_JSON) {
        doc = cJSON_CreateObject();
        if (!doc || !cJSON_AddStringToObject(doc, "id", id)) {
            ctl_fail(ctl, "out of memory; job '%s' was submitted", id);
            goto out;
        }
        rc = ctl_json_print(ctl, doc);
        goto out;
    }
    printf("%s\n", id);
    rc = CTL_EXIT_OK;
out:
    cJSON_Delete(doc);
    cJSON_Delete(spec);
    free(text);
    return rc;
}

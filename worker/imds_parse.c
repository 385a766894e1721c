/* SPDX-License-Identifier: MIT */
/*
 * The EC2 instance metadata documents the spot watcher reads (docs/design.md §5 "Spot
 * interruption"): spot/instance-action {"action": "terminate"|"stop"|"hibernate", "time": "...Z"}
 * and events/recommendations/rebalance {"noticeTime": "...Z"}, plus their UTC timestamps.
 *
 * Pure functions, no clock and no allocation that outlives a call, so that the fuzzer
 * (tests/fuzz/fuzz_imds.c) can hammer them: the bytes come from the network and are not
 * NUL-terminated.  Unknown keys are ignored (AWS adds fields); a wrong type, an unknown action,
 * a bad time or trailing bytes after the JSON value are errors with a message.
 */
#include "worker/wrk.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "common/mu_banned.h"

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* n digits at s into *out; false if any is not a digit. */
static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era;
    int64_t yoe;
    int64_t doy;
    int64_t doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
    static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

int wrk_imds_parse_time(const char *text, uint64_t *ms_out, struct mu_err *err)
{
    int y;
    int mo;
    int d;
    int h;
    int mi;
    int s;
    int ms = 0;
    const char *p;
    int64_t secs;

    if (!text || strlen(text) < 20 || !digits(text, 4, &y) || text[4] != '-'
        || !digits(text + 5, 2, &mo) || text[7] != '-' || !digits(text + 8, 2, &d)
        || text[10] != 'T' || !digits(text + 11, 2, &h) || text[13] != ':'
        || !digits(text + 14, 2, &mi) || text[16] != ':' || !digits(text + 17, 2, &s))
        return mu_errf(err, MU_E_PARSE, "time '%.40s': expected YYYY-MM-DDThh:mm:ssZ",
                       text ? text : "");
    p = text + 19;
    if (*p == '.') {
        /* Fractions are not what EC2 sends today, but ISO 8601 allows them: keep milliseconds. */
        int scale = 100;
        p++;
        if (!is_digit(*p))
            return mu_errf(err, MU_E_PARSE, "time '%.40s': expected digits after '.'", text);
        for (int n = 0; is_digit(*p); p++, n++) {
            if (n >= 9)
                return mu_errf(err, MU_E_PARSE, "time '%.40s': more than 9 fraction digits", text);
            ms += (*p - '0') * scale;
            scale /= 10;
        }
    }
    if (p[0] != 'Z' || p[1] != '\0')
        return mu_errf(err, MU_E_PARSE, "time '%.40s': expected a UTC time ending in 'Z'", text);
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59
        || s > 60)
        return mu_errf(err, MU_E_RANGE, "time '%.40s': no such date or time", text);
    secs = days_from_civil(y, mo, d) * 86400 + (int64_t)h * 3600 + (int64_t)mi * 60 + s;
    *ms_out = (uint64_t)secs * 1000u + (uint64_t)ms;
    return 0;
}

/*
 * Parses exactly len bytes as one JSON object (whitespace around it allowed).  Returns the
 * cJSON tree (cJSON_Delete it) or NULL with err.
 */
static cJSON *parse_object(const char *what, const char *body, size_t len, struct mu_err *err)
{
    const char *end = NULL;
    cJSON *root;

    if (!body || len == 0) {
        mu_errf(err, MU_E_PARSE, "%s: empty reply", what);
        return NULL;
    }
    if (len > WRK_IMDS_MAX_BODY) {
        mu_errf(err, MU_E_TOOBIG, "%s: reply of %zu bytes, more than %u", what, len,
                WRK_IMDS_MAX_BODY);
        return NULL;
    }
    root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        mu_errf(err, MU_E_PARSE, "%s: not JSON (at byte %zu)", what, at);
        return NULL;
    }
    for (const char *q = end; q && q < body + len; q++) {
        if (*q != ' ' && *q != '\t' && *q != '\r' && *q != '\n') {
            mu_errf(err, MU_E_PARSE, "%s: bytes after the JSON value (at byte %zu)", what,
                    (size_t)(q - body));
            cJSON_Delete(root);
            return NULL;
        }
    }
    if (!cJSON_IsObject(root)) {
        mu_errf(err, MU_E_PARSE, "%s: expected a JSON object", what);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The string member key of root, or NULL with err. */
static const char *get_string(const char *what,
                              const cJSON *root,
                              const char *key,
                              struct mu_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        mu_errf(err, MU_E_PARSE, "%s: missing \"%s\"", what, key);
        return NULL;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        mu_errf(err, MU_E_PARSE, "%s: \"%s\": expected a string", what, key);
        return NULL;
    }
    return v->valuestring;
}

int wrk_imds_parse_action(const char *body,
                          size_t len,
                          struct wrk_imds_action *out,
                          struct mu_err *err)
{
    static const char *const actions[] = { "terminate", "stop", "hibernate" };
    static const char what[] = "spot/instance-action";
    cJSON *root = parse_object(what, body, len, err);
    const char *action;
    const char *time_text;
    uint64_t ms = 0;
    bool known = false;
    int rc = -1;

    if (!root)
        return -1;
    action = get_string(what, root, "action", err);
    if (!action)
        goto out;
    for (size_t i = 0; i < MU_ARRAY_LEN(actions); i++)
        known = known || strcmp(action, actions[i]) == 0;
    if (!known) {
        mu_errf(err, MU_E_PARSE,
                "%s: \"action\": expected \"terminate\", \"stop\" or \"hibernate\", got '%.32s'",
                what, action);
        goto out;
    }
    time_text = get_string(what, root, "time", err);
    if (!time_text)
        goto out;
    if (wrk_imds_parse_time(time_text, &ms, err) != 0) {
        mu_err_prefix(err, "%s: \"time\": ", what);
        goto out;
    }
    mu_strlcpy(out->action, action, sizeof(out->action));
    out->time_ms = ms;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

int wrk_imds_parse_rebalance(const char *body,
                             size_t len,
                             uint64_t *notice_ms_out,
                             struct mu_err *err)
{
    static const char what[] = "events/recommendations/rebalance";
    cJSON *root = parse_object(what, body, len, err);
    const char *time_text;
    uint64_t ms = 0;
    int rc = -1;

    if (!root)
        return -1;
    time_text = get_string(what, root, "noticeTime", err);
    if (!time_text)
        goto out;
    if (wrk_imds_parse_time(time_text, &ms, err) != 0) {
        mu_err_prefix(err, "%s: \"noticeTime\": ", what);
        goto out;
    }
    *notice_ms_out = ms;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

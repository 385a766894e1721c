/* SPDX-License-Identifier: MIT */
/*
 * Strict-JSON helpers for the config and job spec parsers (docs/design.md §2a, §3), written once.
 *
 * cJSON is lenient where muster must not be: it accepts raw control bytes in strings, cuts a
 * string silently at "\u0000" and nests 1000 deep.  mu_json_scan finds those in the raw text
 * before cJSON sees it, remembering enough of the structure to name the key path, and
 * mu_json_parse_object is the one path from hostile bytes to a cJSON tree (size cap, private
 * NUL-terminated copy, scan, parse, object at the top) for both parsers.  The rest makes the
 * messages: a value is quoted clipped and with control bytes hidden, because it is hostile input
 * that ends up in logs and terminals.  The error code is always a parameter so each parser keeps
 * its own (MU_E_CONFIG, MU_E_SPEC), and struct mu_json_doc keeps each one's wording.
 */
#include "common/mu_json.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define CLIP_LEN 44 /* a quoted value or key: ~40 bytes and "..." */
#define GOT_LEN  64 /* a described value */
#define PATH_LEN 96 /* a key path of a scan flaw: "command[1023]", "env.<key>" cut */

/* ---- message text ---- */

void mu_json_clip(const char *s, char *buf, size_t size)
{
    size_t max = size - 4; /* room for "..." and the NUL */
    size_t n = 0;

    for (; n < max && s[n]; n++) {
        unsigned char ch = (unsigned char)s[n];
        if (ch < 0x20 || ch == 0x7f)
            buf[n] = '?';
        else
            buf[n] = s[n];
    }
    if (!s[n]) {
        buf[n] = '\0';
        return;
    }
    /* Do not leave half a UTF-8 sequence before the ellipsis. */
    while (n > 0 && ((unsigned char)buf[n - 1] & 0xC0) == 0x80)
        n--;
    if (n > 0 && (unsigned char)buf[n - 1] >= 0xC0)
        n--;
    memcpy(buf + n, "...", 4);
}

void mu_json_describe(const cJSON *v, char *buf, size_t size)
{
    char clip[CLIP_LEN];

    if (cJSON_IsString(v)) {
        mu_json_clip(v->valuestring, clip, sizeof(clip));
        (void)mu_snprintf(buf, size, "'%s'", clip);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 1e15)
            (void)mu_snprintf(buf, size, "%.0f", d);
        else
            (void)mu_snprintf(buf, size, "%g", d);
    } else if (cJSON_IsTrue(v)) {
        mu_strlcpy(buf, "true", size);
    } else if (cJSON_IsFalse(v)) {
        mu_strlcpy(buf, "false", size);
    } else if (cJSON_IsNull(v)) {
        mu_strlcpy(buf, "null", size);
    } else if (cJSON_IsArray(v)) {
        mu_strlcpy(buf, cJSON_GetArraySize(v) ? "an array" : "an empty array", size);
    } else if (cJSON_IsObject(v)) {
        mu_strlcpy(buf, "an object", size);
    } else {
        mu_strlcpy(buf, "an invalid value", size);
    }
}

int mu_json_err_expected(
    struct mu_err *err, int code, const char *path, const char *expected, const cJSON *v)
{
    char got[GOT_LEN];

    mu_json_describe(v, got, sizeof(got));
    return mu_errf(err, code, "%s: expected %s, got %s", path, expected, got);
}

int mu_json_err_unknown_key(struct mu_err *err,
                            int code,
                            enum mu_json_key_style style,
                            const char *parent,
                            const char *key,
                            const char *const *known,
                            size_t n)
{
    char clip[CLIP_LEN];
    const char *best = mu_json_suggest(key, known, n);

    mu_json_clip(key, clip, sizeof(clip));
    if (style == MU_JSON_KEY_QUOTED) {
        if (best)
            return mu_errf(err, code, "%s: unknown key '%s'; did you mean '%s'?", parent, clip,
                           best);
        return mu_errf(err, code, "%s: unknown key '%s'", parent, clip);
    }
    if (best)
        return mu_errf(err, code, "%s%s%s: unknown key; did you mean '%s'?", parent,
                       parent[0] ? "." : "", clip, best);
    return mu_errf(err, code, "%s%s%s: unknown key", parent, parent[0] ? "." : "", clip);
}

/* ---- keys and paths ---- */

size_t mu_json_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    size_t row[33];

    if (la > 32 || lb > 32)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] == b[j - 1] ? 0 : 1);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int mu_json_key_index(const char *key, const char *const *known, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, known[i]) == 0)
            return (int)i;
    }
    return -1;
}

const char *mu_json_suggest(const char *key, const char *const *known, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3; /* suggest only close matches */

    for (size_t i = 0; i < n; i++) {
        size_t d = mu_json_edit_distance(key, known[i]);
        if (d < best_d && d < strlen(key)) {
            best = known[i];
            best_d = d;
        }
    }
    return best;
}

void mu_json_path_join(char *buf, size_t size, const char *parent, const char *key)
{
    (void)mu_snprintf(buf, size, "%s%s%s", parent, parent[0] ? "." : "", key);
}

/* ---- typed getters ---- */

int mu_json_get_int(const cJSON *v,
                    const char *path,
                    int64_t min,
                    int64_t max,
                    int code,
                    int64_t *out,
                    struct mu_err *err)
{
    char expected[64];

    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && d >= (double)min && d <= (double)max) {
            *out = (int64_t)d;
            return 0;
        }
    }
    (void)mu_snprintf(expected, sizeof(expected), "an integer %lld..%lld", (long long)min,
                      (long long)max);
    return mu_json_err_expected(err, code, path, expected, v);
}

int mu_json_get_number(const cJSON *v,
                       const char *path,
                       double min,
                       double max,
                       const char *expected,
                       int code,
                       double *out,
                       struct mu_err *err)
{
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= min
        && v->valuedouble <= max) {
        *out = v->valuedouble;
        return 0;
    }
    return mu_json_err_expected(err, code, path, expected, v);
}

int mu_json_get_name(
    const cJSON *v, const char *path, char *dst, size_t size, int code, struct mu_err *err)
{
    char expected[80];

    if (cJSON_IsString(v) && mu_name_is_valid(v->valuestring, size - 1)) {
        mu_strlcpy(dst, v->valuestring, size);
        return 0;
    }
    (void)mu_snprintf(expected, sizeof(expected), "a name of 1..%zu characters [A-Za-z0-9._:-]",
                      size - 1);
    return mu_json_err_expected(err, code, path, expected, v);
}

/* ---- raw text pre-scan ---- */

/* The innermost open container the scan remembers, or NULL (top level, or too deep). */
static struct mu_json_scan_level *scan_top(struct mu_json_scan *sc)
{
    if (sc->depth <= 0 || sc->depth > MU_JSON_SCAN_DEPTH)
        return NULL;
    return &sc->lv[sc->depth - 1];
}

static void scan_open(struct mu_json_scan *sc, bool is_obj)
{
    if (sc->depth < MU_JSON_SCAN_DEPTH) {
        struct mu_json_scan_level *l = &sc->lv[sc->depth];
        l->is_obj = is_obj;
        l->expect_key = is_obj;
        l->index = 0;
        l->key[0] = '\0';
    }
    sc->depth++;
}

/* One byte outside strings: structure only, values between the punctuation do not matter. */
static void scan_punct(struct mu_json_scan *sc, char ch)
{
    struct mu_json_scan_level *l = scan_top(sc);

    if (ch == '{' || ch == '[') {
        scan_open(sc, ch == '{');
    } else if (ch == '}' || ch == ']') {
        if (sc->depth > 0)
            sc->depth--;
    } else if (ch == ':' && l && l->is_obj) {
        l->expect_key = false;
    } else if (ch == ',' && l) {
        if (l->is_obj)
            l->expect_key = true;
        else
            l->index++;
    } else if (ch == '"') {
        sc->in_key = l && l->is_obj && l->expect_key;
        sc->key_len = 0;
        if (sc->in_key)
            l->key[0] = '\0';
    }
}

enum mu_json_flaw mu_json_scan(struct mu_json_scan *sc, const char *text, size_t len, int max_depth)
{
    bool in_str = false;

    memset(sc, 0, sizeof(*sc));
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        sc->offset = i;
        if (ch == 0)
            return MU_JSON_FLAW_NUL_BYTE;
        if (!in_str) {
            if (ch == '"')
                in_str = true;
            scan_punct(sc, (char)ch);
            if (max_depth > 0 && sc->depth > max_depth) {
                sc->depth = max_depth;
                return MU_JSON_FLAW_TOO_DEEP;
            }
            continue;
        }
        if (ch == '"') {
            in_str = false;
            sc->in_key = false;
            continue;
        }
        if (ch < 0x20)
            return MU_JSON_FLAW_CONTROL;
        if (ch == '\\' && i + 1 < len) {
            if (len - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0)
                return MU_JSON_FLAW_NUL_ESCAPE;
            i++; /* the escaped character cannot end the string */
            continue;
        }
        if (sc->in_key && sc->key_len + 1 < sizeof(sc->lv[0].key)) {
            struct mu_json_scan_level *l = &sc->lv[sc->depth - 1];
            l->key[sc->key_len++] = (char)ch;
            l->key[sc->key_len] = '\0';
        }
    }
    sc->offset = len;
    return MU_JSON_FLAW_NONE;
}

void mu_json_scan_path(
    const struct mu_json_scan *sc, const char *root, bool include_key, char *buf, size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    for (int i = 0; i < sc->depth && i < MU_JSON_SCAN_DEPTH; i++) {
        const struct mu_json_scan_level *l = &sc->lv[i];
        bool last = i == sc->depth - 1;
        int w;
        if (l->is_obj && (l->expect_key || (last && !include_key)))
            break;
        if (l->is_obj)
            w = snprintf(buf + n, size - n, "%s%s", n ? "." : "", l->key);
        else
            w = snprintf(buf + n, size - n, "%s[%zu]", n ? "" : root, l->index);
        if (w < 0 || (size_t)w >= size - n)
            break;
        n += (size_t)w;
    }
    if (n == 0)
        mu_strlcpy(buf, root, size);
}

size_t mu_json_text_line(const char *text, size_t off)
{
    size_t line = 1;

    for (const char *p = text; *p && (size_t)(p - text) < off; p++) {
        if (*p == '\n')
            line++;
    }
    return line;
}

/* ---- strict parse of a whole document ---- */

/* Fills err for a flaw mu_json_scan found in text, worded by doc; returns -1. */
static int scan_error(const struct mu_json_doc *doc,
                      int code,
                      enum mu_json_flaw flaw,
                      const struct mu_json_scan *sc,
                      const char *text,
                      struct mu_err *err)
{
    const char *subj = doc->subject ? doc->subject : "";
    const char *sep = doc->subject ? ": " : "";
    char path[PATH_LEN];
    char deep[48];

    (void)mu_snprintf(deep, sizeof(deep), "nested deeper than %d levels", doc->max_depth);
    if (doc->where == MU_JSON_WHERE_LINE) {
        const char *what = deep;
        if (flaw == MU_JSON_FLAW_NUL_BYTE)
            what = "a NUL byte";
        else if (flaw == MU_JSON_FLAW_CONTROL)
            what = "a raw control character in a string";
        else if (flaw == MU_JSON_FLAW_NUL_ESCAPE)
            what = "a NUL character (\\u0000) in a string";
        return mu_errf(err, code, "%s%snot valid JSON near line %zu (byte %zu): %s", subj, sep,
                       mu_json_text_line(text, sc->offset), sc->offset, what);
    }
    /* One-line text: a key path says more than a line number. */
    switch (flaw) {
    case MU_JSON_FLAW_NUL_BYTE:
        return mu_errf(err, code, "%s%snot valid JSON near byte %zu (NUL byte)", subj, sep,
                       sc->offset);
    case MU_JSON_FLAW_CONTROL:
        return mu_errf(err, code,
                       "%s%snot valid JSON near byte %zu (raw control character in a string)", subj,
                       sep, sc->offset);
    case MU_JSON_FLAW_TOO_DEEP:
        mu_json_scan_path(sc, doc->subject ? doc->subject : "root", true, path, sizeof(path));
        return mu_errf(err, code, "%s: %s near byte %zu", path, deep, sc->offset);
    case MU_JSON_FLAW_NUL_ESCAPE:
    case MU_JSON_FLAW_NONE:
    default:
        mu_json_scan_path(sc, doc->subject ? doc->subject : "root", !sc->in_key, path,
                          sizeof(path));
        return mu_errf(err, code, "%s: %s contains a NUL character (\\u0000)", path,
                       sc->in_key ? "a key" : "string");
    }
}

cJSON *mu_json_parse_object(
    const char *text, size_t len, const struct mu_json_doc *doc, int code, struct mu_err *err)
{
    const char *subj = doc->subject ? doc->subject : "";
    const char *sep = doc->subject ? ": " : "";
    char *copy = NULL;
    cJSON *root = NULL;
    const char *end = NULL;
    struct mu_json_scan sc;
    enum mu_json_flaw flaw;
    char got[GOT_LEN];
    int rc = -1;

    if (!text && len > 0) {
        if (doc->subject)
            mu_errf(err, MU_E_INVAL, "%s: no text", doc->subject);
        else
            mu_errf(err, MU_E_INVAL, "no %s text", doc->noun);
        return NULL;
    }
    if (len > doc->max_bytes) {
        mu_errf(err, code, "%s%slarger than %zu bytes (got %zu)", subj, sep, doc->max_bytes, len);
        return NULL;
    }
    /* A private NUL-terminated copy: the caller's bytes (a file, a stream field) need not be. */
    copy = malloc(len + 1);
    if (!copy) {
        mu_errf(err, MU_E_NOMEM, "out of memory reading the %s", doc->noun);
        goto out;
    }
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    if (strspn(copy, " \t\r\n") == len) {
        mu_errf(err, code, "%s%sexpected a JSON object, got an empty document", subj, sep);
        goto out;
    }
    flaw = mu_json_scan(&sc, copy, len, doc->max_depth);
    if (flaw != MU_JSON_FLAW_NONE) {
        (void)scan_error(doc, code, flaw, &sc, copy, err);
        goto out;
    }
    /* The length counts the terminator: cJSON 1.7.15 checks for it inside the length. */
    root = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
    if (!root) {
        size_t off = end && end >= copy && end <= copy + len ? (size_t)(end - copy) : 0;
        if (doc->where == MU_JSON_WHERE_LINE)
            mu_errf(err, code, "%s%snot valid JSON near line %zu (byte %zu)", subj, sep,
                    mu_json_text_line(copy, off), off);
        else
            mu_errf(err, code, "%s%snot valid JSON near byte %zu", subj, sep, off);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        /* Without a subject to start the message, say where the object was expected. */
        mu_json_describe(root, got, sizeof(got));
        mu_errf(err, code, "%s%sexpected a JSON object%s, got %s", subj, sep,
                doc->subject ? "" : " at the top", got);
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) {
        cJSON_Delete(root);
        root = NULL;
    }
    free(copy); /* cJSON copied every string it keeps */
    return root;
}

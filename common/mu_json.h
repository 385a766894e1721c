/* SPDX-License-Identifier: MIT */
/*
 * mu_json: strict-JSON helpers shared by the config parser (config/parse.c) and the job spec
 * parser (queue/spec.c): the one strict parse of a whole document (mu_json_parse_object), message
 * text for bad values, "did you mean" hints, typed getters with range checks, and a raw pre-scan
 * for what cJSON accepts but a strict reader must not.
 *
 * Depends on cJSON, so it is its own target (mu_json) and is NOT included by common/mu.h: the
 * pure placement core links mu_common without cJSON.  Every function that fills an error takes
 * the code to use (MU_E_CONFIG, MU_E_SPEC) as a parameter; messages are the caller's contract.
 */
#ifndef MUSTER_COMMON_MU_JSON_H
#define MUSTER_COMMON_MU_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mu.h"

/* ---- message text ---- */

/*
 * Copies user text s for a message into buf: at most size-4 bytes, control bytes (and DEL)
 * shown as '?', and "..." after a cut, never in the middle of a UTF-8 sequence.  size >= 4.
 */
void mu_json_clip(const char *s, char *buf, size_t size);

/* Describes v for "got ...": 'text' (clipped), 12, 1.5, true, false, null, an array, ... */
void mu_json_describe(const cJSON *v, char *buf, size_t size);

/* Fills err with "<path>: expected <expected>, got <v described>" and code; returns -1. */
int mu_json_err_expected(
    struct mu_err *err, int code, const char *path, const char *expected, const cJSON *v);

/* How mu_json_err_unknown_key names the unknown key. */
enum mu_json_key_style {
    MU_JSON_KEY_IN_PATH, /* "pools[1].nmae: unknown key; did you mean 'name'?" */
    MU_JSON_KEY_QUOTED,  /* "topology: unknown key 'requird'; did you mean 'required'?" */
};

/*
 * Fills err for key, unknown under parent (a key path, "" at the top for MU_JSON_KEY_IN_PATH),
 * with a "did you mean" hint from mu_json_suggest when there is one; returns -1.
 */
int mu_json_err_unknown_key(struct mu_err *err,
                            int code,
                            enum mu_json_key_style style,
                            const char *parent,
                            const char *key,
                            const char *const *known,
                            size_t n);

/* ---- keys and paths ---- */

/* Levenshtein distance of a and b; SIZE_MAX when either is longer than 32 bytes. */
size_t mu_json_edit_distance(const char *a, const char *b);

/* The index of key in known[0..n-1] (exact, case-sensitive), or -1. */
int mu_json_key_index(const char *key, const char *const *known, size_t n);

/*
 * The known key closest to key, for a hint: edit distance at most 2 and less than key's length
 * (the first such on a tie); NULL when none is close.  Borrowed from known.
 */
const char *mu_json_suggest(const char *key, const char *const *known, size_t n);

/* "pools[1]" + "name" = "pools[1].name"; "" + "redis" = "redis".  Cut to size if needed. */
void mu_json_path_join(char *buf, size_t size, const char *parent, const char *key);

/* ---- typed getters: 0, or -1 with "<path>: expected ..., got ..." in err with code ---- */

/* An integral number within [min, max] (bounds beyond 2^53 are not exact). */
int mu_json_get_int(const cJSON *v,
                    const char *path,
                    int64_t min,
                    int64_t max,
                    int code,
                    int64_t *out,
                    struct mu_err *err);

/* A finite number within [min, max]; expected is the message text ("a price 0..1000000"). */
int mu_json_get_number(const cJSON *v,
                       const char *path,
                       double min,
                       double max,
                       const char *expected,
                       int code,
                       double *out,
                       struct mu_err *err);

/* A name (mu_name_is_valid) of 1..size-1 bytes, copied into dst. */
int mu_json_get_name(
    const cJSON *v, const char *path, char *dst, size_t size, int code, struct mu_err *err);

/* ---- raw text pre-scan ---- */

#define MU_JSON_SCAN_DEPTH 8 /* nesting levels whose keys and indexes the scan remembers */

/* What mu_json_scan found; the scan stops at the first one. */
enum mu_json_flaw {
    MU_JSON_FLAW_NONE = 0,
    MU_JSON_FLAW_NUL_BYTE,   /* a raw 0 byte, anywhere */
    MU_JSON_FLAW_CONTROL,    /* a raw byte below 0x20 inside a string */
    MU_JSON_FLAW_NUL_ESCAPE, /* the escape \u0000 inside a string (cJSON would cut there) */
    MU_JSON_FLAW_TOO_DEEP,   /* more than max_depth nested containers */
};

struct mu_json_scan_level {
    bool is_obj;
    bool expect_key; /* in an object, the next string is a key */
    size_t index;    /* in an array, the current element */
    char key[48];    /* in an object, the current key (raw, possibly cut) */
};

/* Scan state, embedded by the caller; after a flaw it describes where the flaw is. */
struct mu_json_scan {
    size_t offset; /* byte of the flaw */
    bool in_key;   /* the flaw is inside an object key */
    int depth;     /* containers open at the flaw (clamped to max_depth for TOO_DEEP) */
    size_t key_len;
    struct mu_json_scan_level lv[MU_JSON_SCAN_DEPTH];
};

/*
 * Scans text[0..len) (which need not be valid JSON) for the flaws above; max_depth 0 means no
 * depth limit.  Resets *sc first.  Returns MU_JSON_FLAW_NONE or the first flaw.
 */
enum mu_json_flaw mu_json_scan(struct mu_json_scan *sc,
                               const char *text,
                               size_t len,
                               int max_depth);

/*
 * The key path of a flaw: "command[3]", "env.FOO", "root[2]" for a top-level array, root when
 * nothing more is known.  include_key adds the key of the innermost object (false while the
 * flaw is inside that key itself).  Paths go at most MU_JSON_SCAN_DEPTH levels down and are cut
 * at size.
 */
void mu_json_scan_path(
    const struct mu_json_scan *sc, const char *root, bool include_key, char *buf, size_t size);

/* The 1-based line of byte off in NUL-terminated text (off at most its length). */
size_t mu_json_text_line(const char *text, size_t off);

/* ---- strict parse of a whole document ---- */

/* How mu_json_parse_object says where in the text a problem is. */
enum mu_json_where {
    MU_JSON_WHERE_LINE, /* "near line 3 (byte 41)": a file a person edits (the config) */
    MU_JSON_WHERE_PATH, /* "near byte 41", or the key path ("env.A: ..."): a one-line spec */
};

/* What a document is and how mu_json_parse_object's messages about it read. */
struct mu_json_doc {
    const char *subject; /* "spec": starts each message ("spec: ...") and roots key paths;
                            NULL: messages start with the problem (callers add a file name) */
    const char *noun;    /* "config", "job spec": for "no config text" (without a subject) and
                            "out of memory reading the job spec" */
    size_t max_bytes;    /* a longer text is refused before anything is copied */
    int max_depth;       /* nested containers the pre-scan allows; 0 leaves it to cJSON */
    enum mu_json_where where;
};

/*
 * Parses text[0..len) (need not be NUL-terminated) as one strict JSON document whose top is an
 * object.  Refused, with code and a message worded by doc: a text over doc->max_bytes, an empty
 * (all white space) document, a NUL byte, a raw control byte in a string, the escape \u0000,
 * nesting deeper than doc->max_depth (mu_json_scan), what cJSON rejects (trailing bytes included)
 * and a top that is not an object ("expected a JSON object, got an array").  text NULL with
 * len > 0 is MU_E_INVAL; no memory is MU_E_NOMEM.
 * Returns the root object, which the caller frees with cJSON_Delete, or NULL with err filled.
 * The text is only read, and only during the call.
 */
cJSON *mu_json_parse_object(
    const char *text, size_t len, const struct mu_json_doc *doc, int code, struct mu_err *err);

#endif

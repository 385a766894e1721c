/* SPDX-License-Identifier: MIT */
/*
 * access_parse: the "access" section of musterd's config (access.h), from JSON to struct access,
 * as strictly as cfg_parse reads the rest of the file: the same strict parse of the whole
 * document (mu_json_parse_object), then a walk with exact keys, where every message starts with
 * the key path of the value to fix.  The walk only records what each entry says; resolve.c then
 * checks the names across entries ("@group"s, the user count) and computes each user's limits
 * once, so that a decision is a lookup.  Key order is free: the single-user rule is checked after
 * the walk.
 */
#include "access/internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_json.h"

#include "common/mu_banned.h"

#define ACC_DOC_MAX  (1u << 20) /* the config file's own cap (CFG_FILE_MAX) */
#define ACC_LIST_MAX ACCESS_USERS_MAX

const char *const acc_key_names[ACC_K_COUNT] = {
    "queues",           "max_priority", "non_preemptible", "max_running_gpus",
    "max_pending_jobs", "submit_for",   "members",
};

bool acc_name_is_valid(const char *s)
{
    size_t n = 0;

    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                  || c == '.' || c == '_' || c == '-';
        if (n >= ACCESS_NAME_MAX - 1 || !ok)
            return false;
    }
    return true;
}

/* What a list holds, for its checks and messages. */
enum list_kind {
    LIST_QUEUES,     /* queue names, or ["*"] */
    LIST_MEMBERS,    /* user names only */
    LIST_OPERATORS,  /* user names and "@group"s */
    LIST_SUBMIT_FOR, /* user names, "@group"s, or ["*"] */
};

static int list_element(
    enum list_kind kind, const cJSON *v, const char *path, const char *group, struct mu_err *err)
{
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;

    if (s && strcmp(s, "*") == 0 && (kind == LIST_QUEUES || kind == LIST_SUBMIT_FOR))
        return 0;
    if (s && s[0] == '@' && kind != LIST_QUEUES && acc_name_is_valid(s + 1)) {
        if (kind == LIST_OPERATORS || kind == LIST_SUBMIT_FOR)
            return 0;
        if (strcmp(s + 1, group) == 0)
            return mu_errf(err, MU_E_CONFIG, "%s: group '%s' cannot name itself", path, group);
        return mu_errf(err, MU_E_CONFIG,
                       "%s: a group's members are users, not groups ('%s'); hint: list the "
                       "users of '%s' here",
                       path, s, s + 1);
    }
    if (kind == LIST_QUEUES) {
        if (s && mu_name_is_valid(s, ACCESS_NAME_MAX - 1))
            return 0;
        return mu_json_err_expected(err, MU_E_CONFIG, path,
                                    "a queue name of 1..63 characters [A-Za-z0-9._:-], or \"*\"",
                                    v);
    }
    if (s && acc_name_is_valid(s))
        return 0;
    return mu_json_err_expected(err, MU_E_CONFIG, path,
                                kind == LIST_MEMBERS ? "a user name of 1..63 characters "
                                                       "[A-Za-z0-9._-]"
                                                     : "a user name of 1..63 characters "
                                                       "[A-Za-z0-9._-], or \"@group\"",
                                v);
}

/* A name and where it is written, to find repeats by sorting. */
struct name_at {
    const char *name;
    int index;
};

static int cmp_name_at(const void *x, const void *y)
{
    const struct name_at *p = x;
    const struct name_at *q = y;
    int c = strcmp(p->name, q->name);
    return c ? c : (p->index > q->index) - (p->index < q->index);
}

/* The first element (in written order) that repeats an earlier one, or -1; -2 on no memory. */
static int list_first_repeat(const struct acc_list *l)
{
    struct name_at *at = malloc(sizeof(*at) * (size_t)(l->n ? l->n : 1));
    int first = -1;

    if (!at)
        return -2;
    for (int i = 0; i < l->n; i++)
        at[i] = (struct name_at){ l->names[i], i };
    qsort(at, (size_t)l->n, sizeof(*at), cmp_name_at);
    /* In a run of equal names the second is the first repeat of that name. */
    for (int i = 1; i < l->n; i++) {
        bool repeat = strcmp(at[i].name, at[i - 1].name) == 0;
        bool second = i == 1 || strcmp(at[i - 1].name, at[i - 2].name) != 0;
        if (repeat && second && (first < 0 || at[i].index < first))
            first = at[i].index;
    }
    free(at);
    return first;
}

static const char *list_expected(enum list_kind kind)
{
    switch (kind) {
    case LIST_QUEUES:
        return "an array of queue names, or [\"*\"]";
    case LIST_MEMBERS:
        return "an array of user names";
    case LIST_OPERATORS:
        return "an array of user names and \"@group\"s";
    default:
        return "an array of user names and \"@group\"s, or [\"*\"]";
    }
}

/* An array of names into out (empty on entry); group: the group whose members these are. */
static int parse_list(enum list_kind kind,
                      const cJSON *arr,
                      const char *path,
                      const char *group,
                      struct acc_list *out,
                      struct mu_err *err)
{
    char sub[ACC_PATH_LEN];
    int n;
    int i = 0;

    if (!cJSON_IsArray(arr))
        return mu_json_err_expected(err, MU_E_CONFIG, path, list_expected(kind), arr);
    n = cJSON_GetArraySize(arr);
    if (n > ACC_LIST_MAX)
        return mu_errf(err, MU_E_CONFIG, "%s: expected at most %d names, got %d", path,
                       ACC_LIST_MAX, n);
    out->names = calloc((size_t)(n ? n : 1), sizeof(*out->names));
    if (!out->names)
        return mu_errf(err, MU_E_NOMEM, "%s: out of memory", path);
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        (void)mu_snprintf(sub, sizeof(sub), "%s[%d]", path, i);
        if (list_element(kind, it, sub, group, err) != 0)
            return -1;
        if (strcmp(it->valuestring, "*") == 0 && n > 1)
            return mu_errf(err, MU_E_CONFIG, "%s: \"*\" stands for every %s and must be alone", sub,
                           kind == LIST_QUEUES ? "queue" : "user");
        mu_strlcpy(out->names[i], it->valuestring, sizeof(out->names[i]));
        out->n = i + 1;
    }
    out->all = n == 1 && strcmp(out->names[0], "*") == 0;
    i = list_first_repeat(out);
    if (i == -2)
        return mu_errf(err, MU_E_NOMEM, "%s: out of memory", path);
    if (i >= 0)
        return mu_errf(err, MU_E_CONFIG, "%s[%d]: duplicate '%s'", path, i, out->names[i]);
    return 0;
}

static int entry_field(
    struct acc_entry *e, enum acc_key k, const cJSON *v, const char *path, struct mu_err *err)
{
    switch (k) {
    case ACC_K_QUEUES:
        return parse_list(LIST_QUEUES, v, path, e->name, &e->queues, err);
    case ACC_K_MAX_PRIORITY:
        return mu_json_get_int(v, path, -1000000, 1000000, MU_E_CONFIG, &e->max_priority, err);
    case ACC_K_NON_PREEMPTIBLE:
        if (!cJSON_IsBool(v))
            return mu_json_err_expected(err, MU_E_CONFIG, path, "true or false", v);
        e->non_preemptible = cJSON_IsTrue(v);
        return 0;
    case ACC_K_MAX_RUNNING_GPUS:
        return mu_json_get_int(v, path, 0, 1 << 20, MU_E_CONFIG, &e->max_running_gpus, err);
    case ACC_K_MAX_PENDING_JOBS:
        return mu_json_get_int(v, path, 0, 100000000, MU_E_CONFIG, &e->max_pending_jobs, err);
    case ACC_K_SUBMIT_FOR:
        return parse_list(LIST_SUBMIT_FOR, v, path, e->name, &e->submit_for, err);
    default:
        return parse_list(LIST_MEMBERS, v, path, e->name, &e->members, err);
    }
}

/* One entry object at path; e->kind and e->name are set. */
static int parse_entry(struct acc_entry *e, const cJSON *obj, const char *path, struct mu_err *err)
{
    /* The keys each kind takes, in acc_key_names order: LIMITS, then its own. */
    size_t nkeys = e->kind == ACC_DEFAULTS ? ACC_K_SUBMIT_FOR : ACC_K_SUBMIT_FOR + 1;
    const char *keys[ACC_K_SUBMIT_FOR + 1];
    char sub[ACC_PATH_LEN];

    for (size_t i = 0; i < ACC_K_SUBMIT_FOR; i++)
        keys[i] = acc_key_names[i];
    keys[ACC_K_SUBMIT_FOR] = acc_key_names[e->kind == ACC_GROUP ? ACC_K_MEMBERS : ACC_K_SUBMIT_FOR];
    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_CONFIG, path, "an object", obj);
    for (const cJSON *v = obj->child; v; v = v->next) {
        int i = mu_json_key_index(v->string, keys, nkeys);
        enum acc_key k;
        if (i < 0)
            return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, path, v->string,
                                           keys, nkeys);
        k = i == ACC_K_SUBMIT_FOR && e->kind == ACC_GROUP ? ACC_K_MEMBERS : (enum acc_key)i;
        mu_json_path_join(sub, sizeof(sub), path, acc_key_names[k]);
        if (e->set & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", sub);
        e->set |= 1u << k;
        if (entry_field(e, k, v, sub, err) != 0)
            return -1;
    }
    if (e->kind == ACC_GROUP && !(e->set & (1u << ACC_K_MEMBERS)))
        return mu_errf(err, MU_E_CONFIG, "%s: missing required key 'members'", path);
    return 0;
}

/* "groups" or "users": an object of entries keyed by name. */
static int parse_named(
    enum acc_kind kind, const cJSON *obj, struct acc_entry **out, int *nout, struct mu_err *err)
{
    const char *path = kind == ACC_GROUP ? "access.groups" : "access.users";
    char sub[ACC_PATH_LEN];
    char clip[80];
    int n;

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(
            err, MU_E_CONFIG, path,
            kind == ACC_GROUP ? "an object of groups by name" : "an object of users by name", obj);
    n = cJSON_GetArraySize(obj);
    if (n > ACCESS_USERS_MAX)
        return mu_errf(err, MU_E_CONFIG, "%s: expected at most %d entries, got %d", path,
                       ACCESS_USERS_MAX, n);
    *out = calloc((size_t)(n ? n : 1), sizeof(**out));
    if (!*out)
        return mu_errf(err, MU_E_NOMEM, "%s: out of memory", path);
    for (const cJSON *v = obj->child; v; v = v->next) {
        struct acc_entry *e = &(*out)[*nout];
        if (!acc_name_is_valid(v->string)) {
            mu_json_clip(v->string, clip, sizeof(clip));
            return mu_errf(err, MU_E_CONFIG,
                           "%s: expected %s names of 1..63 characters [A-Za-z0-9._-] as keys, "
                           "got '%s'",
                           path, kind == ACC_GROUP ? "group" : "user", clip);
        }
        mu_json_path_join(sub, sizeof(sub), path, v->string);
        for (int j = 0; j < *nout; j++) {
            if (strcmp((*out)[j].name, v->string) == 0)
                return mu_errf(err, MU_E_CONFIG, "%s: duplicate key", sub);
        }
        e->kind = kind;
        mu_strlcpy(e->name, v->string, sizeof(e->name));
        *nout += 1;
        if (parse_entry(e, v, sub, err) != 0)
            return -1;
    }
    return 0;
}

static const char *const section_keys[] = { "identity", "operators", "defaults", "groups",
                                            "users" };
enum { SK_IDENTITY, SK_OPERATORS, SK_DEFAULTS, SK_GROUPS, SK_USERS };

static int section_field(struct access *a, int k, const cJSON *v, struct mu_err *err)
{
    switch (k) {
    case SK_IDENTITY:
        if (cJSON_IsString(v) && strcmp(v->valuestring, "single-user") == 0)
            a->identity = ACCESS_SINGLE_USER;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "redis-acl") == 0)
            a->identity = ACCESS_REDIS_ACL;
        else
            return mu_json_err_expected(err, MU_E_CONFIG, "access.identity",
                                        "\"single-user\" or \"redis-acl\"", v);
        return 0;
    case SK_OPERATORS:
        return parse_list(LIST_OPERATORS, v, "access.operators", "", &a->operators, err);
    case SK_DEFAULTS:
        return parse_entry(&a->defaults, v, "access.defaults", err);
    case SK_GROUPS:
        return parse_named(ACC_GROUP, v, &a->groups, &a->ngroups, err);
    default:
        return parse_named(ACC_USER, v, &a->users, &a->nusers, err);
    }
}

static int parse_section(struct access *a, const cJSON *obj, struct mu_err *err)
{
    unsigned seen = 0;
    int first_rule = -1; /* the first key, in written order, that needs redis-acl */

    if (!cJSON_IsObject(obj))
        return mu_json_err_expected(err, MU_E_CONFIG, "access",
                                    "an object such as {\"identity\": \"redis-acl\", \"users\": "
                                    "{...}}",
                                    obj);
    for (const cJSON *v = obj->child; v; v = v->next) {
        int k = mu_json_key_index(v->string, section_keys, MU_ARRAY_LEN(section_keys));
        if (k < 0)
            return mu_json_err_unknown_key(err, MU_E_CONFIG, MU_JSON_KEY_IN_PATH, "access",
                                           v->string, section_keys, MU_ARRAY_LEN(section_keys));
        if (seen & (1u << k))
            return mu_errf(err, MU_E_CONFIG, "access.%s: duplicate key", section_keys[k]);
        seen |= 1u << k;
        if (k != SK_IDENTITY && first_rule < 0)
            first_rule = k;
        if (section_field(a, k, v, err) != 0)
            return -1;
    }
    if (a->identity == ACCESS_SINGLE_USER && first_rule >= 0)
        return mu_errf(err, MU_E_CONFIG,
                       "access.%s: needs identity \"redis-acl\": in single-user mode nobody is "
                       "proven",
                       section_keys[first_rule]);
    return acc_resolve(a, err);
}

struct access *access_new_default(void)
{
    struct access *a = calloc(1, sizeof(*a));

    if (a)
        a->defaults.kind = ACC_DEFAULTS;
    return a;
}

struct access *access_parse(const char *json, size_t len, struct mu_err *err)
{
    /* The same document cfg_parse reads, refused the same way (by line). */
    static const struct mu_json_doc doc = {
        .subject = NULL,
        .noun = "config",
        .max_bytes = ACC_DOC_MAX,
        .max_depth = 0,
        .where = MU_JSON_WHERE_LINE,
    };
    struct access *a = NULL;
    cJSON *root = NULL;
    const cJSON *section = NULL;
    struct access *rc = NULL;

    root = mu_json_parse_object(json, len, &doc, MU_E_CONFIG, err);
    if (!root)
        goto out;
    a = access_new_default();
    if (!a) {
        mu_errf(err, MU_E_NOMEM, "out of memory reading the config's access section");
        goto out;
    }
    for (const cJSON *v = root->child; v; v = v->next) {
        if (strcmp(v->string, "access") != 0)
            continue;
        if (section) {
            mu_errf(err, MU_E_CONFIG, "access: duplicate key");
            goto out;
        }
        section = v;
    }
    if (section && parse_section(a, section, err) != 0)
        goto out;
    rc = a;
    a = NULL;
out:
    access_free(a);
    cJSON_Delete(root);
    return rc;
}

void access_free(struct access *a)
{
    if (!a)
        return;
    acc_release(a);
    free(a);
}

/* SPDX-License-Identifier: MIT */
/*
 * The decisions of access.h over a resolved struct access: may this submission run and as whom,
 * may this person send that control command, what are a user's caps.  Each refusal is a sentence
 * for the person refused that names the rule, by the key path of the entry the deciding value
 * came from ("access.groups.vision.queues: research, default"), so that they know what to ask an
 * operator to change.  Lookups only: every limit was computed at parse (resolve.c).
 */
#include "access/internal.h"

#include <string.h>

#include "common/mu_banned.h"

#define MSG_LIST_LEN 160 /* the values quoted in one message; longer lists are cut with "..." */

enum access_identity access_identity(const struct access *a)
{
    return a->identity;
}

const char *access_identity_name(enum access_identity id)
{
    return id == ACCESS_REDIS_ACL ? "redis-acl" : "single-user";
}

int access_nusers(const struct access *a)
{
    return a->nknown;
}

const char *access_user(const struct access *a, int i)
{
    return i >= 0 && i < a->nknown ? a->known[i].name : NULL;
}

bool access_is_known(const struct access *a, const char *user)
{
    return acc_known_find(a, user) != NULL;
}

bool access_is_operator(const struct access *a, const char *user)
{
    const struct acc_known *u = acc_known_find(a, user);
    return u && u->is_operator;
}

void acc_entry_path(char *buf, size_t size, const struct acc_entry *e, enum acc_key k)
{
    if (!e) /* nothing sets it: name where to */
        (void)mu_snprintf(buf, size, "access.defaults.%s unset: built-in default",
                          acc_key_names[k]);
    else if (e->kind == ACC_DEFAULTS)
        (void)mu_snprintf(buf, size, "access.defaults.%s", acc_key_names[k]);
    else
        (void)mu_snprintf(buf, size, "access.%s.%s.%s", e->kind == ACC_GROUP ? "groups" : "users",
                          e->name, acc_key_names[k]);
}

/* "research, default" (or "none"), cut with "..." when it does not fit. */
static void list_format(char *buf, size_t size, const struct acc_list *l)
{
    size_t len = 0;

    mu_strlcpy(buf, l->n ? "" : "none", size);
    for (int i = 0; i < l->n; i++) {
        if (mu_snprintf(buf + len, size - len, "%s%s", i ? ", " : "", l->names[i]) != 0) {
            mu_strlcpy(buf + (size > 4 ? size - 4 : 0), "...", 4);
            return;
        }
        len += strlen(buf + len);
    }
}

/* "path: a, b" for one entry's list k, appended to buf at *len. */
static void rule_append(char *buf, size_t size, const struct acc_entry *e, enum acc_key k)
{
    char path[ACC_PATH_LEN];
    char list[MSG_LIST_LEN];
    size_t len = strlen(buf);

    acc_entry_path(path, sizeof(path), e, k);
    list_format(list, sizeof(list), k == ACC_K_QUEUES ? &e->queues : &e->submit_for);
    (void)mu_snprintf(buf + len, size - len, "%s%s: %s", len ? "; " : "", path, list);
}

static bool list_has(const struct acc_list *l, const char *name)
{
    if (l->all)
        return true;
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->names[i], name) == 0)
            return true;
    }
    return false;
}

static int check_queue(const struct access *a,
                       const struct acc_known *u,
                       const char *queue,
                       struct mu_err *err)
{
    const struct acc_src *src = &u->src[ACC_K_QUEUES];
    char rule[256] = "";

    if (!src->groups) {
        if (!src->e || list_has(&src->e->queues, queue))
            return 0; /* the built-in default is every queue */
        rule_append(rule, sizeof(rule), src->e, ACC_K_QUEUES);
    } else {
        for (int i = 0; i < u->ngroups; i++) {
            const struct acc_entry *g = &a->groups[u->groups[i]];
            if ((g->set & (1u << ACC_K_QUEUES)) && list_has(&g->queues, queue))
                return 0;
        }
        for (int i = 0; i < u->ngroups; i++) {
            const struct acc_entry *g = &a->groups[u->groups[i]];
            if (g->set & (1u << ACC_K_QUEUES))
                rule_append(rule, sizeof(rule), g, ACC_K_QUEUES);
        }
    }
    return mu_errf(err, MU_E_STATE, "queue '%s' is not open to %s (%s)", queue, u->name, rule);
}

static int check_limits(const struct access *a,
                        const struct acc_known *u,
                        const struct access_submit *s,
                        struct mu_err *err)
{
    char path[ACC_PATH_LEN];

    if (check_queue(a, u, s->queue ? s->queue : "", err) != 0)
        return -1;
    if (s->priority > u->max_priority) {
        acc_entry_path(path, sizeof(path), u->src[ACC_K_MAX_PRIORITY].e, ACC_K_MAX_PRIORITY);
        return mu_errf(err, MU_E_STATE, "priority %lld is above %s's highest, %lld (%s)",
                       (long long)s->priority, u->name, (long long)u->max_priority, path);
    }
    if (!s->preemptible && !u->non_preemptible) {
        acc_entry_path(path, sizeof(path), u->src[ACC_K_NON_PREEMPTIBLE].e, ACC_K_NON_PREEMPTIBLE);
        return mu_errf(err, MU_E_STATE, "%s may not submit non-preemptible jobs (%s)", u->name,
                       path);
    }
    return 0;
}

static int refuse_unknown(const char *who, struct mu_err *err)
{
    char clip[ACCESS_NAME_MAX + 4];

    mu_strlcpy(clip, who ? who : "", sizeof(clip));
    return mu_errf(err, MU_E_STATE,
                   "user '%s' is not known here: nobody may act as a user that is not in "
                   "access.users, a group's members or access.operators (access.users)",
                   clip);
}

/* The user a redis-acl submission belongs to: the owner, or whom the owner submits for. */
static const struct acc_known *submit_user(const struct access *a,
                                           const struct acc_known *owner,
                                           const char *user,
                                           struct mu_err *err)
{
    const struct acc_entry *own = owner->own;
    char rule[256] = "";
    char clip[ACCESS_NAME_MAX + 4];
    const struct acc_known *u;

    if (!user || !user[0] || strcmp(user, owner->name) == 0)
        return owner;
    mu_strlcpy(clip, user, sizeof(clip));
    if (!own || !(own->set & (1u << ACC_K_SUBMIT_FOR))) {
        mu_errf(err, MU_E_STATE,
                "user '%s' is not you (%s): identity comes from your Redis user (access.identity)",
                clip, owner->name);
        return NULL;
    }
    if (!own->submit_for.all && !acc_list_has_sorted(&own->for_users, user)) {
        rule_append(rule, sizeof(rule), own, ACC_K_SUBMIT_FOR);
        mu_errf(err, MU_E_STATE, "%s may not submit for %s (%s)", owner->name, clip, rule);
        return NULL;
    }
    u = acc_known_find(a, user);
    if (!u)
        refuse_unknown(user, err);
    return u;
}

int access_submit_check(const struct access *a,
                        const struct access_submit *s,
                        char *user_out,
                        size_t user_size,
                        struct mu_err *err)
{
    const struct acc_known *owner;
    const struct acc_known *u;

    if (a->identity == ACCESS_SINGLE_USER) {
        const char *user = s->user ? s->user : "";
        if (strlen(user) >= user_size)
            return mu_errf(err, MU_E_STATE, "user name is longer than %zu bytes", user_size - 1);
        mu_strlcpy(user_out, user, user_size);
        return 0;
    }
    owner = acc_known_find(a, s->owner);
    if (!owner)
        return refuse_unknown(s->owner, err);
    u = submit_user(a, owner, s->user, err);
    if (!u || check_limits(a, u, s, err) != 0)
        return -1;
    if (strlen(u->name) >= user_size)
        return mu_errf(err, MU_E_STATE, "user name is longer than %zu bytes", user_size - 1);
    mu_strlcpy(user_out, u->name, user_size);
    return 0;
}

void access_caps(const struct access *a, const char *user, struct access_caps *out)
{
    const struct acc_known *u = a->identity == ACCESS_REDIS_ACL ? acc_known_find(a, user) : NULL;

    memset(out, 0, sizeof(*out));
    if (!u)
        return;
    out->max_running_gpus = u->max_running_gpus;
    out->max_pending_jobs = u->max_pending_jobs;
    if (u->max_running_gpus > 0)
        acc_entry_path(out->running_rule, sizeof(out->running_rule),
                       u->src[ACC_K_MAX_RUNNING_GPUS].e, ACC_K_MAX_RUNNING_GPUS);
    if (u->max_pending_jobs > 0)
        acc_entry_path(out->pending_rule, sizeof(out->pending_rule),
                       u->src[ACC_K_MAX_PENDING_JOBS].e, ACC_K_MAX_PENDING_JOBS);
}

bool access_has_running_caps(const struct access *a)
{
    for (int i = 0; a->identity == ACCESS_REDIS_ACL && i < a->nknown; i++) {
        if (a->known[i].max_running_gpus > 0)
            return true;
    }
    return false;
}

int access_control_check(const struct access *a,
                         const char *who,
                         const char *cmd,
                         const char *job_user,
                         const char *job_id,
                         struct mu_err *err)
{
    static const char *const job_cmds[] = { "cancel", "hold", "release" };
    const struct acc_known *u;
    char clip[ACCESS_NAME_MAX + 4];
    char whose[ACCESS_NAME_MAX + 8];
    bool is_job_cmd = false;

    if (a->identity == ACCESS_SINGLE_USER)
        return 0;
    u = acc_known_find(a, who);
    if (!u)
        return refuse_unknown(who, err);
    if (u->is_operator || (cmd && strcmp(cmd, "why") == 0))
        return 0;
    mu_strlcpy(clip, cmd ? cmd : "", sizeof(clip));
    for (size_t i = 0; cmd && i < MU_ARRAY_LEN(job_cmds) && !is_job_cmd; i++)
        is_job_cmd = strcmp(cmd, job_cmds[i]) == 0;
    if (!is_job_cmd)
        return mu_errf(err, MU_E_STATE, "%s may not %s: operators only (access.operators)", u->name,
                       clip);
    if (!job_user || strcmp(job_user, u->name) == 0)
        return 0; /* no such job now: nothing to guard (musterd judges an early cancel later) */
    if (job_user[0])
        (void)mu_snprintf(whose, sizeof(whose), "%s's job", job_user);
    else
        mu_strlcpy(whose, "a job of no user", sizeof(whose));
    return mu_errf(err, MU_E_STATE,
                   "%s may not %s %s%s%s: a job's owner or an operator may (access.operators)",
                   u->name, cmd, whose, job_id ? " " : "", job_id ? job_id : "");
}

/* ---- equality ---- */

static bool list_equal(const struct acc_list *x, const struct acc_list *y)
{
    if (x->n != y->n || x->all != y->all)
        return false;
    for (int i = 0; i < x->n; i++) {
        if (strcmp(x->names[i], y->names[i]) != 0)
            return false;
    }
    return true;
}

/* Entries are compared as written (lists in their order: messages quote them so); unset keys
 * are zero in both. */
static bool entry_equal(const struct acc_entry *x, const struct acc_entry *y)
{
    return x->kind == y->kind && strcmp(x->name, y->name) == 0 && x->set == y->set
           && list_equal(&x->queues, &y->queues) && x->max_priority == y->max_priority
           && x->non_preemptible == y->non_preemptible && x->max_running_gpus == y->max_running_gpus
           && x->max_pending_jobs == y->max_pending_jobs && list_equal(&x->members, &y->members)
           && list_equal(&x->submit_for, &y->submit_for);
}

bool access_equal(const struct access *a, const struct access *b)
{
    if (!a || !b)
        return a == b;
    if (a->identity != b->identity || !entry_equal(&a->defaults, &b->defaults)
        || !list_equal(&a->operators, &b->operators) || a->ngroups != b->ngroups
        || a->nusers != b->nusers)
        return false;
    for (int i = 0; i < a->ngroups; i++) {
        if (!entry_equal(&a->groups[i], &b->groups[i]))
            return false;
    }
    for (int i = 0; i < a->nusers; i++) {
        if (!entry_equal(&a->users[i], &b->users[i]))
            return false;
    }
    return true;
}

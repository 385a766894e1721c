/* SPDX-License-Identifier: MIT */
/*
 * acc_resolve: from the entries the walk recorded to the known users and each one's effective
 * limits (access.h: the user's own value, else the most generous among its groups, else
 * "defaults", else the built-in default), computed once per parse so that every decision is a
 * binary search and a lookup.  Groups, users and known users are sorted by name (strcmp); each
 * group's members too.  A name that cannot be resolved ("@nosuch") is a config error with the
 * path of the list element that names it.
 */
#include "access/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static int cmp_entry(const void *x, const void *y)
{
    return strcmp(((const struct acc_entry *)x)->name, ((const struct acc_entry *)y)->name);
}

static int cmp_name(const void *x, const void *y)
{
    return strcmp((const char *)x, (const char *)y);
}

static int cmp_name_ptr(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int cmp_key_known(const void *key, const void *elt)
{
    return strcmp((const char *)key, ((const struct acc_known *)elt)->name);
}

static int cmp_key_entry(const void *key, const void *elt)
{
    return strcmp((const char *)key, ((const struct acc_entry *)elt)->name);
}

void acc_list_sort(struct acc_list *l)
{
    if (l->n > 1)
        qsort(l->names, (size_t)l->n, sizeof(*l->names), cmp_name);
}

bool acc_list_has_sorted(const struct acc_list *l, const char *name)
{
    return l->n > 0 && bsearch(name, l->names, (size_t)l->n, sizeof(*l->names), cmp_name) != NULL;
}

const struct acc_entry *acc_group_find(const struct access *a, const char *name)
{
    if (a->ngroups == 0)
        return NULL;
    return bsearch(name, a->groups, (size_t)a->ngroups, sizeof(*a->groups), cmp_key_entry);
}

const struct acc_known *acc_known_find(const struct access *a, const char *name)
{
    if (!name || a->nknown == 0)
        return NULL;
    return bsearch(name, a->known, (size_t)a->nknown, sizeof(*a->known), cmp_key_known);
}

/* Every "@group" of l (written at path) names a group; n_out: the names once expanded. */
static int list_check_groups(const struct access *a,
                             const struct acc_list *l,
                             const char *path,
                             size_t *n_out,
                             struct mu_err *err)
{
    *n_out = 0;
    for (int i = 0; i < l->n; i++) {
        const struct acc_entry *g;
        if (l->names[i][0] != '@') {
            *n_out += 1;
            continue;
        }
        g = acc_group_find(a, l->names[i] + 1);
        if (!g)
            return mu_errf(err, MU_E_CONFIG, "%s[%d]: unknown group '%s'", path, i,
                           l->names[i] + 1);
        *n_out += (size_t)g->members.n;
    }
    return 0;
}

/* e's submit_for with each "@group" expanded, sorted and unique, into e->for_users. */
static int expand_submit_for(const struct access *a, struct acc_entry *e, struct mu_err *err)
{
    char path[ACC_PATH_LEN];
    size_t n;
    int k = 0;

    (void)mu_snprintf(path, sizeof(path), "access.users.%s.submit_for", e->name);
    if (list_check_groups(a, &e->submit_for, path, &n, err) != 0)
        return -1;
    if (e->submit_for.all || n == 0)
        return 0;
    e->for_users.names = calloc(n, sizeof(*e->for_users.names));
    if (!e->for_users.names)
        return mu_errf(err, MU_E_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < e->submit_for.n; i++) {
        const char *s = e->submit_for.names[i];
        const struct acc_entry *g = s[0] == '@' ? acc_group_find(a, s + 1) : NULL;
        if (!g) {
            mu_strlcpy(e->for_users.names[k++], s, ACCESS_NAME_MAX);
            continue;
        }
        for (int j = 0; j < g->members.n; j++)
            mu_strlcpy(e->for_users.names[k++], g->members.names[j], ACCESS_NAME_MAX);
    }
    e->for_users.n = k;
    acc_list_sort(&e->for_users);
    k = 0;
    for (int i = 0; i < e->for_users.n; i++) {
        if (k == 0 || strcmp(e->for_users.names[k - 1], e->for_users.names[i]) != 0)
            memmove(e->for_users.names[k++], e->for_users.names[i], ACCESS_NAME_MAX);
    }
    e->for_users.n = k;
    return 0;
}

/* The known users: the keys of "users", the groups' members and the operators, sorted, once. */
static int collect_known(struct access *a, struct mu_err *err)
{
    const char **names = NULL;
    size_t n = (size_t)a->nusers + (size_t)a->operators.n;
    size_t k = 0;
    int rc = -1;

    for (int i = 0; i < a->ngroups; i++)
        n += (size_t)a->groups[i].members.n;
    names = malloc(sizeof(*names) * (n ? n : 1));
    if (!names) {
        mu_errf(err, MU_E_NOMEM, "access: out of memory");
        goto out;
    }
    for (int i = 0; i < a->nusers; i++)
        names[k++] = a->users[i].name;
    for (int i = 0; i < a->ngroups; i++) {
        for (int j = 0; j < a->groups[i].members.n; j++)
            names[k++] = a->groups[i].members.names[j];
    }
    for (int i = 0; i < a->operators.n; i++) {
        if (a->operators.names[i][0] != '@') /* a group's members are in already */
            names[k++] = a->operators.names[i];
    }
    qsort(names, k, sizeof(*names), cmp_name_ptr);
    n = 0;
    for (size_t i = 0; i < k; i++) {
        if (n == 0 || strcmp(names[n - 1], names[i]) != 0)
            names[n++] = names[i];
    }
    if (n > ACCESS_USERS_MAX) {
        mu_errf(err, MU_E_CONFIG,
                "access: expected at most %d known users (users, group members and operators), "
                "got %zu",
                ACCESS_USERS_MAX, n);
        goto out;
    }
    a->known = calloc(n ? n : 1, sizeof(*a->known));
    if (!a->known) {
        mu_errf(err, MU_E_NOMEM, "access: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        mu_strlcpy(a->known[i].name, names[i], sizeof(a->known[i].name));
    a->nknown = (int)n;
    rc = 0;
out:
    free(names);
    return rc;
}

/* Whether the group value v (from a group) is more generous than the current best. */
static bool more_generous(enum acc_key k, int64_t v, int64_t best)
{
    switch (k) {
    case ACC_K_MAX_RUNNING_GPUS:
    case ACC_K_MAX_PENDING_JOBS:
        return best != 0 && (v == 0 || v > best); /* 0 = no cap wins */
    default:
        return v > best; /* max_priority; non_preemptible as 0/1 */
    }
}

static int64_t entry_value(const struct acc_entry *e, enum acc_key k)
{
    switch (k) {
    case ACC_K_MAX_PRIORITY:
        return e->max_priority;
    case ACC_K_NON_PREEMPTIBLE:
        return e->non_preemptible;
    case ACC_K_MAX_RUNNING_GPUS:
        return e->max_running_gpus;
    default:
        return e->max_pending_jobs;
    }
}

/* The entry a scalar limit k of u comes from (NULL: built-in). */
static const struct acc_entry *scalar_source(const struct access *a,
                                             const struct acc_known *u,
                                             enum acc_key k)
{
    const struct acc_entry *best = NULL;

    if (u->own && (u->own->set & (1u << k)))
        return u->own;
    for (int i = 0; i < u->ngroups; i++) {
        const struct acc_entry *g = &a->groups[u->groups[i]];
        if ((g->set & (1u << k))
            && (!best || more_generous(k, entry_value(g, k), entry_value(best, k))))
            best = g;
    }
    if (best)
        return best;
    return (a->defaults.set & (1u << k)) ? &a->defaults : NULL;
}

static int resolve_user(struct access *a, struct acc_known *u, struct mu_err *err)
{
    int n = 0;

    if (a->nusers > 0) /* users is NULL without a "users" key: bsearch must not see it */
        u->own = bsearch(u->name, a->users, (size_t)a->nusers, sizeof(*a->users), cmp_key_entry);
    for (int i = 0; i < a->ngroups; i++)
        n += acc_list_has_sorted(&a->groups[i].members, u->name);
    if (n > 0) {
        u->groups = malloc(sizeof(*u->groups) * (size_t)n);
        if (!u->groups)
            return mu_errf(err, MU_E_NOMEM, "access: out of memory");
        for (int i = 0; i < a->ngroups; i++) {
            if (acc_list_has_sorted(&a->groups[i].members, u->name))
                u->groups[u->ngroups++] = i;
        }
    }
    for (int i = 0; i < a->operators.n && !u->is_operator; i++) {
        const char *s = a->operators.names[i];
        const struct acc_entry *g = s[0] == '@' ? acc_group_find(a, s + 1) : NULL;
        u->is_operator = g ? acc_list_has_sorted(&g->members, u->name) : strcmp(s, u->name) == 0;
    }
    for (int k = ACC_K_MAX_PRIORITY; k < ACC_K_SUBMIT_FOR; k++) {
        const struct acc_entry *e = scalar_source(a, u, (enum acc_key)k);
        int64_t v = e ? entry_value(e, (enum acc_key)k) : 0; /* every built-in is 0 or false */
        u->src[k].e = e;
        if (k == ACC_K_MAX_PRIORITY)
            u->max_priority = v;
        else if (k == ACC_K_NON_PREEMPTIBLE)
            u->non_preemptible = v != 0;
        else if (k == ACC_K_MAX_RUNNING_GPUS)
            u->max_running_gpus = v;
        else
            u->max_pending_jobs = v;
    }
    if (u->own && (u->own->set & (1u << ACC_K_QUEUES))) {
        u->src[ACC_K_QUEUES].e = u->own;
        return 0;
    }
    for (int i = 0; i < u->ngroups; i++)
        u->src[ACC_K_QUEUES].groups |= (a->groups[u->groups[i]].set & (1u << ACC_K_QUEUES)) != 0;
    if (!u->src[ACC_K_QUEUES].groups && (a->defaults.set & (1u << ACC_K_QUEUES)))
        u->src[ACC_K_QUEUES].e = &a->defaults;
    return 0;
}

int acc_resolve(struct access *a, struct mu_err *err)
{
    size_t n;

    if (a->ngroups > 1)
        qsort(a->groups, (size_t)a->ngroups, sizeof(*a->groups), cmp_entry);
    if (a->nusers > 1)
        qsort(a->users, (size_t)a->nusers, sizeof(*a->users), cmp_entry);
    for (int i = 0; i < a->ngroups; i++)
        acc_list_sort(&a->groups[i].members);
    if (list_check_groups(a, &a->operators, "access.operators", &n, err) != 0)
        return -1;
    for (int i = 0; i < a->nusers; i++) {
        if (expand_submit_for(a, &a->users[i], err) != 0)
            return -1;
    }
    if (collect_known(a, err) != 0)
        return -1;
    for (int i = 0; i < a->nknown; i++) {
        if (resolve_user(a, &a->known[i], err) != 0)
            return -1;
    }
    return 0;
}

static void entry_release(struct acc_entry *e)
{
    free(e->queues.names);
    free(e->members.names);
    free(e->submit_for.names);
    free(e->for_users.names);
}

void acc_release(struct access *a)
{
    entry_release(&a->defaults);
    free(a->operators.names);
    for (int i = 0; i < a->ngroups; i++)
        entry_release(&a->groups[i]);
    free(a->groups);
    for (int i = 0; i < a->nusers; i++)
        entry_release(&a->users[i]);
    free(a->users);
    for (int i = 0; i < a->nknown; i++)
        free(a->known[i].groups);
    free(a->known);
}

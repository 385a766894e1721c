/* SPDX-License-Identifier: MIT */
/*
 * The task environment of docs/design.md §3: the worker's own environment, then HOME, USER and
 * LOGNAME of the user a root worker runs the task as (--run-as), then the job spec's `env`, then
 * muster's variables (MUSTER_*, CUDA_VISIBLE_DEVICES and the torchrun set RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT), each layer
 * replacing keys of the one before.  muster's variables come last so that a spec cannot lie to
 * a task about its rank or its GPUs.  This is a pure function of its inputs (no fork, no system
 * calls), so the unit tests check every variable without starting a process.  Every value the
 * scheduler decided is read from the BIND message itself (struct wrk_launch's bind).
 */
#include "worker/wrk.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

struct env_vec {
    char **v; /* owned strings, NULL-terminated when v != NULL */
    size_t n;
    size_t cap;
};

static size_t key_len(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

static ssize_t env_find(const struct env_vec *e, const char *key, size_t klen)
{
    if (!e->v)
        return -1;
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], key, klen) == 0 && e->v[i][klen] == '=')
            return (ssize_t)i;
    }
    return -1;
}

/* Adds entry ("KEY=VALUE", which e takes even on failure), replacing one with the same key. */
static int env_take(struct env_vec *e, char *entry, struct mu_err *err)
{
    ssize_t at = env_find(e, entry, key_len(entry));

    if (at >= 0 && e->v) {
        free(e->v[at]);
        e->v[at] = entry;
        return 0;
    }
    if (!e->v || e->n + 2 > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        char **v = realloc(e->v, cap * sizeof(*v));
        if (!v) {
            free(entry);
            return mu_errf(err, MU_E_NOMEM, "out of memory building the environment");
        }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = entry;
    e->v[e->n] = NULL;
    return 0;
}

static int env_put(struct env_vec *e, const char *entry, struct mu_err *err)
{
    char *copy = strdup(entry);
    if (!copy)
        return mu_errf(err, MU_E_NOMEM, "out of memory building the environment");
    return env_take(e, copy, err);
}

static void env_unset(struct env_vec *e, const char *key)
{
    ssize_t at = env_find(e, key, strlen(key));
    if (at < 0)
        return;
    free(e->v[at]);
    memmove(&e->v[at], &e->v[at + 1], (e->n - (size_t)at) * sizeof(e->v[0]));
    e->n--;
}

static int env_putf(struct env_vec *e, struct mu_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int env_vputf(struct env_vec *e, struct mu_err *err, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static int env_vputf(struct env_vec *e, struct mu_err *err, const char *fmt, va_list ap)
{
    va_list ap2;
    char *entry;
    int n;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return mu_errf(err, MU_E_INVAL, "bad environment format");
    entry = malloc((size_t)n + 1);
    if (!entry)
        return mu_errf(err, MU_E_NOMEM, "out of memory building the environment");
    (void)vsnprintf(entry, (size_t)n + 1, fmt, ap);
    return env_take(e, entry, err);
}

static int env_putf(struct env_vec *e, struct mu_err *err, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = env_vputf(e, err, fmt, ap);
    va_end(ap);
    return rc;
}

static int env_put_muster(struct env_vec *e, const struct wrk_launch *l, struct mu_err *err)
{
    const struct proto_msg *b = l->bind;
    const struct proto_task_ref *t = &b->task;
    char ckpt[PROTO_PATH_MAX];
    const char *cuda = l->cuda_visible ? l->cuda_visible : "";

    if (wrk_task_path(l->state_dir, "ckpt", t->job, t->attempt, t->task, "", ckpt, sizeof(ckpt),
                      err)
        != 0)
        return -1;
    if (env_putf(e, err, "MUSTER_JOB_ID=%s", t->job) != 0
        || env_putf(e, err, "MUSTER_TASK_INDEX=%d", t->task) != 0
        || env_putf(e, err, "MUSTER_ATTEMPT=%d", t->attempt) != 0
        || env_putf(e, err, "MUSTER_NODE=%s", l->node ? l->node : "") != 0
        || env_putf(e, err, "MUSTER_CHECKPOINT_FILE=%s", ckpt) != 0
        || env_putf(e, err, "CUDA_VISIBLE_DEVICES=%s", cuda) != 0
        || env_putf(e, err, "RANK=%d", t->task) != 0
        || env_putf(e, err, "WORLD_SIZE=%d", b->world_size) != 0
        || env_putf(e, err, "LOCAL_RANK=%d", b->local_rank) != 0
        || env_putf(e, err, "LOCAL_WORLD_SIZE=%d", b->local_world_size) != 0
        || env_putf(e, err, "GROUP_RANK=%d", b->node_rank) != 0
        || env_putf(e, err, "NODE_RANK=%d", b->node_rank) != 0
        || env_putf(e, err, "MASTER_ADDR=%s", b->master_addr) != 0
        || env_putf(e, err, "MASTER_PORT=%d", b->master_port) != 0)
        return -1;
    if (l->cuda_pci_order && env_putf(e, err, "CUDA_DEVICE_ORDER=PCI_BUS_ID") != 0)
        return -1;
    /* A resume path inherited from the worker's own environment must not reach a fresh task. */
    if (b->resume_from[0]) {
        if (env_putf(e, err, "MUSTER_RESUME_FROM=%s", b->resume_from) != 0)
            return -1;
    } else {
        env_unset(e, "MUSTER_RESUME_FROM");
    }
    return 0;
}

char **wrk_env_build(const struct wrk_launch *l, char *const *base, struct mu_err *err)
{
    const struct wrk_ident *user = l->user && l->user->name[0] ? l->user : NULL;
    const struct proto_msg *b = l->bind;
    struct env_vec e = { NULL, 0, 0 };

    for (size_t i = 0; base && base[i]; i++) {
        if (strchr(base[i], '=') == NULL || base[i][0] == '=')
            continue; /* not a variable; execve would pass it on, but nothing can read it */
        if (env_put(&e, base[i], err) != 0)
            goto fail;
    }
    if (user
        && (env_putf(&e, err, "HOME=%s", user->home[0] ? user->home : "/") != 0
            || env_putf(&e, err, "USER=%s", user->name) != 0
            || env_putf(&e, err, "LOGNAME=%s", user->name) != 0))
        goto fail;
    for (int i = 0; i < b->nenv; i++) {
        const char *entry = b->env[i];
        if (!entry || !strchr(entry, '=') || entry[0] == '=') {
            mu_errf(err, MU_E_INVAL, "env entry '%s': expected KEY=VALUE", entry ? entry : "");
            goto fail;
        }
        if (env_put(&e, entry, err) != 0)
            goto fail;
    }
    if (env_put_muster(&e, l, err) != 0)
        goto fail;
    return e.v;
fail:
    wrk_env_free(e.v);
    return NULL;
}

void wrk_env_free(char **envp)
{
    if (!envp)
        return;
    for (size_t i = 0; envp[i]; i++)
        free(envp[i]);
    free(envp);
}

const char *wrk_env_get(char *const *envp, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; envp && envp[i]; i++) {
        if (strncmp(envp[i], key, klen) == 0 && envp[i][klen] == '=')
            return envp[i] + klen + 1;
    }
    return NULL;
}

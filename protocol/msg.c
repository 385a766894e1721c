/* SPDX-License-Identifier: MIT */
/*
 * proto message lifecycle: init/release, the setters for the heap arrays (and the log chunk), and
 * type names
 * (docs/design.md §7, protocol/README.md).
 *
 * Invariants every other file of the module relies on: after proto_msg_init or
 * proto_msg_release the struct is all zero except v and type, so every char array is
 * NUL-terminated and every heap pointer is NULL.  argv and env are allocated with one extra
 * slot that holds NULL, so argv can go straight to execvp and env to execve.  The setters build
 * the new array completely before touching m, so a failed call leaves m as it was (docs/style.md
 * §1.3).
 */
#include "protocol/proto.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

static const char *const proto_type_names[] = {
    [PROTO_HELLO] = "HELLO",
    [PROTO_HEARTBEAT] = "HEARTBEAT",
    [PROTO_BIND] = "BIND",
    [PROTO_BIND_ACK] = "BIND_ACK",
    [PROTO_TASK_STATUS] = "TASK_STATUS",
    [PROTO_CHECKPOINT] = "CHECKPOINT",
    [PROTO_KILL] = "KILL",
    [PROTO_CHECKPOINT_DONE] = "CHECKPOINT_DONE",
    [PROTO_SPOT_NOTICE] = "SPOT_NOTICE",
    [PROTO_REBALANCE] = "REBALANCE",
    [PROTO_DRAIN] = "DRAIN",
    [PROTO_LOG_READ] = "LOG_READ",
    [PROTO_LOG_DATA] = "LOG_DATA",
    [PROTO_BYE] = "BYE",
};

const char *proto_type_name(enum proto_type type)
{
    if ((int)type <= 0 || (size_t)type >= MU_ARRAY_LEN(proto_type_names) || !proto_type_names[type])
        return "UNKNOWN";
    return proto_type_names[type];
}

int proto_witness_interval_ms(int lease_s)
{
    int ms = lease_s * 1000 / 6;
    return ms < 1000 ? 1000 : ms > 5000 ? 5000 : ms;
}

void proto_msg_init(struct proto_msg *m, enum proto_type type)
{
    memset(m, 0, sizeof(*m));
    m->v = PROTO_VERSION;
    m->type = type;
}

static void strv_free(char **v, int n)
{
    if (!v)
        return;
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void proto_msg_release(struct proto_msg *m)
{
    enum proto_type type = m->type;

    free(m->gpus);
    free(m->tasks);
    strv_free(m->argv, m->argc);
    strv_free(m->env, m->nenv);
    free(m->data);
    proto_msg_init(m, type);
}

/*
 * Copies n strings into a new NULL-terminated array.  `what` names the field in errors; env
 * strings must look like KEY=VALUE, the same rule the decoder applies.
 */
static char **strv_dup(
    int n, const char *const *src, int max, bool is_env, const char *what, struct mu_err *err)
{
    char **v = NULL;

    if (n < 0 || n > max) {
        (void)mu_errf(err, MU_E_TOOBIG, "%s: %d entries, expected 0..%d", what, n, max);
        return NULL;
    }
    if (n > 0 && !src) {
        (void)mu_errf(err, MU_E_INVAL, "%s: %d entries but no array", what, n);
        return NULL;
    }
    v = calloc((size_t)n + 1, sizeof(*v));
    if (!v) {
        (void)mu_errf(err, MU_E_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        size_t len;
        if (!src[i]) {
            (void)mu_errf(err, MU_E_INVAL, "%s[%d]: NULL string", what, i);
            goto fail;
        }
        len = strlen(src[i]);
        if (len >= PROTO_MAX_ARG_BYTES) {
            (void)mu_errf(err, MU_E_TOOBIG, "%s[%d]: string longer than %u bytes", what, i,
                          PROTO_MAX_ARG_BYTES - 1);
            goto fail;
        }
        if (is_env && (len == 0 || src[i][0] == '=' || !memchr(src[i], '=', len))) {
            (void)mu_errf(err, MU_E_INVAL, "%s[%d]: expected KEY=VALUE", what, i);
            goto fail;
        }
        v[i] = malloc(len + 1);
        if (!v[i]) {
            (void)mu_errf(err, MU_E_NOMEM, "%s[%d]: out of memory", what, i);
            goto fail;
        }
        memcpy(v[i], src[i], len + 1);
    }
    return v;
fail:
    strv_free(v, n);
    return NULL;
}

int proto_msg_set_argv(struct proto_msg *m, int argc, const char *const *argv, struct mu_err *err)
{
    char **v = strv_dup(argc, argv, PROTO_MAX_ARGS, false, "argv", err);
    if (!v)
        return -1;
    strv_free(m->argv, m->argc);
    m->argv = v;
    m->argc = argc;
    return 0;
}

int proto_msg_set_env(struct proto_msg *m, int nenv, const char *const *env, struct mu_err *err)
{
    char **v = strv_dup(nenv, env, PROTO_MAX_ENV, true, "env", err);
    if (!v)
        return -1;
    strv_free(m->env, m->nenv);
    m->env = v;
    m->nenv = nenv;
    return 0;
}

/*
 * Shared by the two plain-record arrays: a copy of n records of `size` bytes, NULL (and no error)
 * for n == 0 so that an empty array never owns memory.
 */
static int records_dup(
    int n, const void *src, size_t size, int max, const char *what, void **out, struct mu_err *err)
{
    void *copy;

    *out = NULL;
    if (n < 0 || n > max)
        return mu_errf(err, MU_E_TOOBIG, "%s: %d entries, expected 0..%d", what, n, max);
    if (n == 0)
        return 0;
    if (!src)
        return mu_errf(err, MU_E_INVAL, "%s: %d entries but no array", what, n);
    copy = malloc((size_t)n * size);
    if (!copy)
        return mu_errf(err, MU_E_NOMEM, "%s: out of memory", what);
    memcpy(copy, src, (size_t)n * size);
    *out = copy;
    return 0;
}

int proto_msg_set_gpus(struct proto_msg *m,
                       int ngpus,
                       const struct proto_gpu *gpus,
                       struct mu_err *err)
{
    void *copy;

    if (records_dup(ngpus, gpus, sizeof(*gpus), PROTO_MAX_GPUS, "gpus", &copy, err) != 0)
        return -1;
    free(m->gpus);
    m->gpus = copy;
    m->ngpus = ngpus;
    return 0;
}

int proto_msg_set_tasks(struct proto_msg *m,
                        int ntasks,
                        const struct proto_task_ref *tasks,
                        struct mu_err *err)
{
    void *copy;

    if (records_dup(ntasks, tasks, sizeof(*tasks), PROTO_MAX_TASKS, "tasks", &copy, err) != 0)
        return -1;
    free(m->tasks);
    m->tasks = copy;
    m->ntasks = ntasks;
    return 0;
}

int proto_msg_set_data(struct proto_msg *m, const void *data, size_t len, struct mu_err *err)
{
    char *copy = NULL;

    if (len > PROTO_LOG_CHUNK_MAX)
        return mu_errf(err, MU_E_TOOBIG, "data: %zu bytes, at most %u", len, PROTO_LOG_CHUNK_MAX);
    if (len > 0 && !data)
        return mu_errf(err, MU_E_INVAL, "data: %zu bytes but no buffer", len);
    if (len > 0) {
        copy = malloc(len);
        if (!copy)
            return mu_errf(err, MU_E_NOMEM, "data: out of memory");
        memcpy(copy, data, len);
    }
    free(m->data);
    m->data = copy;
    m->data_len = len;
    return 0;
}

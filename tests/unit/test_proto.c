/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for protocol/ (docs/design.md §7, protocol/README.md): round trips of every message
 * type with every field (heap arrays at their caps), the per-type key sets, a bad-input table for
 * the decoder (wrong types, sizes, counts, versions, trailing bytes), every truncation of valid
 * messages, thousands of seeded random and mutated buffers, and a real ROUTER with two DEALERs
 * over inproc://.  Deterministic: fixed seeds, no clocks in assertions.
 */
#include <limits.h>
#include <msgpack.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "common/mu.h"
#include "protocol/proto.h"

#include "common/mu_banned.h"

/* ---- helpers ---- */

/* n strings "<pre><i><post>" (the format is fixed so that -Wformat-nonliteral stays quiet). */
static char **strv_make(int n, const char *pre, const char *post)
{
    char **v = calloc((size_t)n + 1, sizeof(*v));
    assert_non_null(v);
    for (int i = 0; i < n; i++) {
        char tmp[64];
        assert_int_equal(mu_snprintf(tmp, sizeof(tmp), "%s%d%s", pre, i, post), 0);
        v[i] = malloc(strlen(tmp) + 1);
        assert_non_null(v[i]);
        memcpy(v[i], tmp, strlen(tmp) + 1);
    }
    return v;
}

static void strv_drop(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void ref_fill(struct proto_task_ref *r, int i)
{
    (void)mu_snprintf(r->job, sizeof(r->job), "1732270000123-%d", i);
    r->task = i + 1;
    r->attempt = i + 2;
    r->state = (enum proto_task_state)(1 + i % 3);
    r->pid = 1000 + i;
    r->exit_code = -3 - i; /* signed field: a negative value must survive */
    r->signal = (i % 60) + 1;
    r->fenced = i % 2 == 0; /* set and unset both survive */
    r->oom_killed = i % 3 == 0;
    r->stopped = i % 3 == 0;
    if (i % 2 == 1) { /* a checkpoint, and none */
        (void)mu_snprintf(r->checkpoint, sizeof(r->checkpoint), "/ckpt/step-%d", i);
        r->checkpoint_at_ms = 1732270000000ULL + (uint64_t)i;
    }
}

static void ref_check(const struct proto_task_ref *r, int i)
{
    char job[PROTO_JOB_MAX];
    (void)mu_snprintf(job, sizeof(job), "1732270000123-%d", i);
    assert_string_equal(r->job, job);
    assert_int_equal(r->task, i + 1);
    assert_int_equal(r->attempt, i + 2);
    assert_int_equal(r->state, 1 + i % 3);
    assert_int_equal(r->pid, 1000 + i);
    assert_int_equal(r->exit_code, -3 - i);
    assert_int_equal(r->signal, (i % 60) + 1);
    assert_int_equal(r->fenced, i % 2 == 0);
    assert_int_equal(r->oom_killed, i % 3 == 0);
    assert_int_equal(r->stopped, i % 3 == 0);
    if (i % 2 == 1) {
        char path[64];
        (void)mu_snprintf(path, sizeof(path), "/ckpt/step-%d", i);
        assert_string_equal(r->checkpoint, path);
        assert_true(r->checkpoint_at_ms == 1732270000000ULL + (uint64_t)i);
    } else {
        assert_string_equal(r->checkpoint, "");
        assert_true(r->checkpoint_at_ms == 0);
    }
}

/* Sets every field of m (n entries in each heap array, capped per array). */
static void fill_all(struct proto_msg *m, enum proto_type type, int n)
{
    struct mu_err err;
    int ngpus = n < PROTO_MAX_GPUS ? n : PROTO_MAX_GPUS;
    int nargs = n < PROTO_MAX_ARGS ? n : PROTO_MAX_ARGS;
    int nenv = n < PROTO_MAX_ENV ? n : PROTO_MAX_ENV;
    int ntasks = n < PROTO_MAX_TASKS ? n : PROTO_MAX_TASKS;
    struct proto_gpu *gpus = calloc((size_t)ngpus + 1, sizeof(*gpus));
    struct proto_task_ref *tasks = calloc((size_t)ntasks + 1, sizeof(*tasks));
    char **argv = strv_make(nargs, "arg-", "");
    char **env = strv_make(nenv, "K", "=v a=l");

    assert_non_null(gpus);
    assert_non_null(tasks);
    proto_msg_init(m, type);
    m->seq = UINT64_MAX - 1;
    m->epoch = 42;
    mu_strlcpy(m->node, "gpu-node-017.us-east-1", sizeof(m->node));
    mu_strlcpy(m->pool, "p5-spot", sizeof(m->pool));
    mu_strlcpy(m->addr, "10.0.3.17", sizeof(m->addr));
    mu_strlcpy(m->instance_id, "i-0123456789abcdef0", sizeof(m->instance_id));
    mu_strlcpy(m->confinement, "cgroup-v1", sizeof(m->confinement));
    m->cpus = 192;
    m->memory_mb = INT64_C(2048) * 1024;
    for (int i = 0; i < ngpus; i++) {
        gpus[i].index = i;
        (void)mu_snprintf(gpus[i].uuid, sizeof(gpus[i].uuid), "GPU-%08d-aaaa", i);
        mu_strlcpy(gpus[i].model, "NVIDIA H100 80GB HBM3", sizeof(gpus[i].model));
        gpus[i].memory_mb = 81559;
        (void)mu_snprintf(gpus[i].pci_bus_id, sizeof(gpus[i].pci_bus_id), "00000000:%02X:00.0", i);
        gpus[i].island = i / 8 - 1; /* signed: -1 included */
        gpus[i].mig = i % 5 == 1;   /* MIG keys (issue #17): optional, written when set */
        if (i % 5 == 2) {
            mu_strlcpy(gpus[i].profile, "1c.3g.71gb", sizeof(gpus[i].profile));
            gpus[i].parent = i - 1;
        }
    }
    assert_int_equal(proto_msg_set_gpus(m, ngpus, gpus, &err), 0);
    m->nlabels = PROTO_MAX_LABELS;
    for (int i = 0; i < PROTO_MAX_LABELS; i++) {
        (void)mu_snprintf(m->labels[i].level, sizeof(m->labels[i].level), "level%d", i);
        (void)mu_snprintf(m->labels[i].value, sizeof(m->labels[i].value), "value-%d", i);
    }
    for (int i = 0; i < ntasks; i++)
        ref_fill(&tasks[i], i);
    assert_int_equal(proto_msg_set_tasks(m, ntasks, tasks, &err), 0);
    m->heartbeat_s = 5;
    m->lease_s = 30;
    m->answer_every = 2;
    m->sent_ms = UINT64_C(987654321);
    m->echo_ms = UINT64_C(123456789);
    m->expires_ms = UINT64_C(987664321);
    m->node_fault = true;
    ref_fill(&m->task, 7);
    m->world_size = 64;
    m->local_rank = 3;
    m->local_world_size = 8;
    m->node_rank = 5;
    m->nnodes = 8;
    mu_strlcpy(m->master_addr, "10.0.3.1", sizeof(m->master_addr));
    m->master_port = 29500;
    m->nbind_gpus = PROTO_MAX_GPUS;
    for (int i = 0; i < PROTO_MAX_GPUS; i++)
        m->bind_gpus[i] = PROTO_MAX_GPUS - 1 - i;
    assert_int_equal(proto_msg_set_argv(m, nargs, (const char *const *)argv, &err), 0);
    assert_int_equal(proto_msg_set_env(m, nenv, (const char *const *)env, &err), 0);
    mu_strlcpy(m->workdir, "/home/u/run", sizeof(m->workdir));
    mu_strlcpy(m->resume_from, "/ckpt/step-100", sizeof(m->resume_from));
    mu_strlcpy(m->job_user, "alice", sizeof(m->job_user));
    m->cpus_per_task = 12;
    m->memory_mb_per_task = INT64_C(1) << 36; /* past 32 bits */
    m->ok = true;
    mu_strlcpy(m->error, "no such file 'train.py'", sizeof(m->error));
    m->signal = 10;
    m->grace_s = 30;
    mu_strlcpy(m->path, "/ckpt/step-200", sizeof(m->path));
    m->at_ms = UINT64_C(1732270000123);
    mu_strlcpy(m->action, "terminate", sizeof(m->action));
    m->deadline_ms = UINT64_C(1732270120000);
    mu_strlcpy(m->req, "1732270000999-3", sizeof(m->req));
    mu_strlcpy(m->stream, "err", sizeof(m->stream));
    m->offset = UINT64_C(5) << 32;
    m->max_bytes = (int)PROTO_LOG_CHUNK_MAX;
    m->size = (UINT64_C(5) << 32) + PROTO_LOG_CHUNK_MAX;
    m->absent = true;
    {
        char *chunk = malloc(PROTO_LOG_CHUNK_MAX);
        assert_non_null(chunk);
        for (size_t i = 0; i < PROTO_LOG_CHUNK_MAX; i++)
            chunk[i] = (char)(i * 7u); /* every byte value, NUL included */
        assert_int_equal(proto_msg_set_data(m, chunk, PROTO_LOG_CHUNK_MAX, &err), 0);
        free(chunk);
    }
    strv_drop(argv, nargs);
    strv_drop(env, nenv);
    free(tasks);
    free(gpus);
}

static bool carries(enum proto_type type, unsigned mask)
{
    return (mask & (1u << type)) != 0;
}

#define T(x) (1u << PROTO_##x)

static void check_task_fields(const struct proto_msg *m, enum proto_type type, int n);

/* Checks that a decoded m holds exactly what fill_all set, for the keys its type carries. */
static void check_all(const struct proto_msg *m, enum proto_type type, int n)
{
    int ngpus = n < PROTO_MAX_GPUS ? n : PROTO_MAX_GPUS;
    int ntasks = n < PROTO_MAX_TASKS ? n : PROTO_MAX_TASKS;

    assert_int_equal(m->v, PROTO_VERSION);
    assert_int_equal(m->type, type);
    assert_true(m->seq == UINT64_MAX - 1);
    assert_true(m->epoch == 42);
    assert_string_equal(m->node, "gpu-node-017.us-east-1");
    assert_true(m->sent_ms == UINT64_C(987654321)); /* every type */
    assert_true(m->echo_ms == (carries(type, T(HELLO) | T(HEARTBEAT)) ? UINT64_C(123456789) : 0));
    if (carries(type, T(HELLO))) {
        assert_string_equal(m->pool, "p5-spot");
        assert_string_equal(m->addr, "10.0.3.17");
        assert_string_equal(m->instance_id, "i-0123456789abcdef0");
        assert_string_equal(m->confinement, "cgroup-v1");
        assert_int_equal(m->cpus, 192);
        assert_true(m->memory_mb == INT64_C(2048) * 1024);
        assert_int_equal(m->ngpus, ngpus);
        for (int i = 0; i < ngpus; i++) {
            char uuid[96];
            (void)mu_snprintf(uuid, sizeof(uuid), "GPU-%08d-aaaa", i);
            assert_int_equal(m->gpus[i].index, i);
            assert_string_equal(m->gpus[i].uuid, uuid);
            assert_string_equal(m->gpus[i].model, "NVIDIA H100 80GB HBM3");
            assert_true(m->gpus[i].memory_mb == 81559);
            assert_int_equal(m->gpus[i].island, i / 8 - 1);
            assert_int_equal(m->gpus[i].mig, i % 5 == 1);
            assert_string_equal(m->gpus[i].profile, i % 5 == 2 ? "1c.3g.71gb" : "");
            assert_int_equal(m->gpus[i].parent, i % 5 == 2 ? i - 1 : 0);
        }
        assert_int_equal(m->nlabels, PROTO_MAX_LABELS);
        assert_string_equal(m->labels[7].level, "level7");
        assert_string_equal(m->labels[7].value, "value-7");
    } else {
        assert_string_equal(m->pool, "");
        assert_int_equal(m->cpus, 0);
        assert_int_equal(m->ngpus, 0);
        assert_null(m->gpus);
        assert_int_equal(m->nlabels, 0);
    }
    if (carries(type, T(HELLO) | T(HEARTBEAT) | T(BYE))) {
        assert_int_equal(m->ntasks, ntasks);
        for (int i = 0; i < ntasks; i++)
            ref_check(&m->tasks[i], i);
    } else {
        assert_int_equal(m->ntasks, 0);
        assert_null(m->tasks);
    }
    assert_int_equal(m->heartbeat_s, carries(type, T(HEARTBEAT)) ? 5 : 0);
    assert_int_equal(m->lease_s, carries(type, T(HEARTBEAT)) ? 30 : 0);
    assert_int_equal(m->answer_every, carries(type, T(HEARTBEAT)) ? 2 : 0);
    check_task_fields(m, type, n);
}

/* LOG_READ and LOG_DATA's own fields. */
static void check_log_fields(const struct proto_msg *m, enum proto_type type)
{
    if (carries(type, T(LOG_READ) | T(LOG_DATA))) {
        assert_string_equal(m->req, "1732270000999-3");
        assert_string_equal(m->stream, "err");
        assert_true(m->offset == UINT64_C(5) << 32);
    } else {
        assert_string_equal(m->req, "");
        assert_string_equal(m->stream, "");
        assert_true(m->offset == 0);
    }
    assert_int_equal(m->max_bytes, carries(type, T(LOG_READ)) ? (int)PROTO_LOG_CHUNK_MAX : 0);
    if (carries(type, T(LOG_DATA))) {
        assert_true(m->size == (UINT64_C(5) << 32) + PROTO_LOG_CHUNK_MAX);
        assert_true(m->absent);
        assert_int_equal(m->data_len, PROTO_LOG_CHUNK_MAX);
        assert_non_null(m->data);
        for (size_t i = 0; i < PROTO_LOG_CHUNK_MAX; i += 997)
            assert_int_equal((unsigned char)m->data[i], (unsigned char)(i * 7u));
    } else {
        assert_true(m->size == 0);
        assert_false(m->absent);
        assert_int_equal(m->data_len, 0);
        assert_null(m->data);
    }
}

/* The second half of check_all: task, BIND and the small per-type fields. */
static void check_task_fields(const struct proto_msg *m, enum proto_type type, int n)
{
    int nargs = n < PROTO_MAX_ARGS ? n : PROTO_MAX_ARGS;
    unsigned task_types = T(BIND) | T(BIND_ACK) | T(TASK_STATUS) | T(CHECKPOINT) | T(KILL)
                          | T(CHECKPOINT_DONE) | T(LOG_READ) | T(LOG_DATA);

    if (carries(type, task_types))
        ref_check(&m->task, 7);
    else
        assert_string_equal(m->task.job, "");
    if (carries(type, T(BIND))) {
        assert_int_equal(m->world_size, 64);
        assert_int_equal(m->local_rank, 3);
        assert_int_equal(m->local_world_size, 8);
        assert_int_equal(m->node_rank, 5);
        assert_int_equal(m->nnodes, 8);
        assert_string_equal(m->master_addr, "10.0.3.1");
        assert_int_equal(m->master_port, 29500);
        assert_int_equal(m->nbind_gpus, PROTO_MAX_GPUS);
        assert_int_equal(m->bind_gpus[0], PROTO_MAX_GPUS - 1);
        assert_int_equal(m->argc, nargs);
        assert_int_equal(m->nenv, nargs);
        if (nargs > 0) {
            char last[32];
            (void)mu_snprintf(last, sizeof(last), "arg-%d", nargs - 1);
            assert_string_equal(m->argv[nargs - 1], last);
            assert_string_equal(m->argv[0], "arg-0");
            assert_string_equal(m->env[0], "K0=v a=l");
            assert_null(m->argv[nargs]); /* NULL-terminated for execvp */
            assert_null(m->env[nargs]);
        }
        assert_string_equal(m->workdir, "/home/u/run");
        assert_string_equal(m->resume_from, "/ckpt/step-100");
        assert_true(m->expires_ms == UINT64_C(987664321));
        assert_string_equal(m->job_user, "alice");
        assert_int_equal(m->cpus_per_task, 12);
        assert_true(m->memory_mb_per_task == INT64_C(1) << 36);
    } else {
        assert_string_equal(m->job_user, "");
        assert_int_equal(m->cpus_per_task, 0);
        assert_true(m->memory_mb_per_task == 0);
        assert_true(m->expires_ms == 0);
        assert_int_equal(m->world_size, 0);
        assert_int_equal(m->master_port, 0);
        assert_int_equal(m->nbind_gpus, 0);
        assert_int_equal(m->argc, 0);
        assert_null(m->argv);
        assert_null(m->env);
        assert_string_equal(m->workdir, "");
    }
    assert_int_equal(m->ok, carries(type, T(BIND_ACK) | T(HEARTBEAT) | T(LOG_DATA)));
    assert_int_equal(m->node_fault, carries(type, T(BIND_ACK)));
    if (carries(type, T(BIND_ACK) | T(TASK_STATUS) | T(HEARTBEAT) | T(LOG_DATA)))
        assert_string_equal(m->error, "no such file 'train.py'");
    else
        assert_string_equal(m->error, "");
    assert_int_equal(m->signal, carries(type, T(BIND) | T(CHECKPOINT) | T(KILL)) ? 10 : 0);
    assert_int_equal(m->grace_s, carries(type, T(BIND) | T(CHECKPOINT) | T(KILL)) ? 30 : 0);
    check_log_fields(m, type);
    if (carries(type, T(CHECKPOINT_DONE) | T(LOG_DATA)))
        assert_string_equal(m->path, "/ckpt/step-200");
    else
        assert_string_equal(m->path, "");
    assert_true(m->at_ms == (carries(type, T(CHECKPOINT_DONE)) ? UINT64_C(1732270000123) : 0));
    if (carries(type, T(SPOT_NOTICE) | T(REBALANCE))) {
        assert_string_equal(m->action, "terminate");
        assert_true(m->deadline_ms == UINT64_C(1732270120000));
    } else {
        assert_string_equal(m->action, "");
        assert_true(m->deadline_ms == 0);
    }
}

static void encode_ok(const struct proto_msg *m, struct mu_buf *b)
{
    struct mu_err err;
    mu_buf_init(b, 0);
    if (proto_msg_encode(m, b, &err) != 0)
        fail_msg("encode: %s", err.msg);
}

/* Decodes and expects failure with `want` in the message; out must hold no memory after. */
static void expect_bad(const void *data, size_t len, const char *want)
{
    struct proto_msg m;
    struct mu_err err;

    mu_err_clear(&err);
    if (proto_msg_decode(data, len, &m, &err) == 0)
        fail_msg("decode succeeded, expected '%s'", want);
    assert_int_not_equal(err.code, MU_E_OK);
    if (want && !strstr(err.msg, want))
        fail_msg("error '%s' does not contain '%s'", err.msg, want);
    assert_null(m.gpus);
    assert_null(m.tasks);
    assert_null(m.argv);
    assert_null(m.env);
    assert_null(m.data);
    proto_msg_release(&m);
}

/* ---- raw msgpack builders for hostile input ---- */

struct raw {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void raw_init(struct raw *r)
{
    msgpack_sbuffer_init(&r->sb);
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
}

static void raw_str(struct raw *r, const char *s)
{
    (void)msgpack_pack_str(&r->pk, strlen(s));
    (void)msgpack_pack_str_body(&r->pk, s, strlen(s));
}

/* Starts a map of n + 4 entries with a valid v/type/seq/epoch header. */
static void raw_header(struct raw *r, size_t extra, const char *type)
{
    raw_init(r);
    (void)msgpack_pack_map(&r->pk, extra + 4);
    raw_str(r, "v");
    (void)msgpack_pack_uint64(&r->pk, PROTO_VERSION);
    raw_str(r, "type");
    raw_str(r, type);
    raw_str(r, "seq");
    (void)msgpack_pack_uint64(&r->pk, 9);
    raw_str(r, "epoch");
    (void)msgpack_pack_uint64(&r->pk, 3);
}

/* expect_bad on a raw buffer, which it then frees. */
static void expect_bad_raw(struct raw *r, const char *want)
{
    expect_bad(r->sb.data, r->sb.size, want);
    msgpack_sbuffer_destroy(&r->sb);
}

/* ---- tests ---- */

static void test_type_names(void **state)
{
    (void)state;
    assert_string_equal(proto_type_name(PROTO_HELLO), "HELLO");
    assert_string_equal(proto_type_name(PROTO_BIND_ACK), "BIND_ACK");
    assert_string_equal(proto_type_name(PROTO_DRAIN), "DRAIN");
    assert_string_equal(proto_type_name(PROTO_LOG_READ), "LOG_READ");
    assert_string_equal(proto_type_name(PROTO_LOG_DATA), "LOG_DATA");
    assert_string_equal(proto_type_name(PROTO_BYE), "BYE");
    assert_string_equal(proto_type_name((enum proto_type)0), "UNKNOWN");
    assert_string_equal(proto_type_name((enum proto_type)99), "UNKNOWN");
    assert_string_equal(proto_type_name((enum proto_type) - 1), "UNKNOWN");
}

static void test_setters(void **state)
{
    struct proto_msg m;
    struct mu_err err;
    const char *argv[] = { "python", "train.py", "--lr=3e-4" };
    const char *bad_env[] = { "A=1", "NOEQUALS" };
    const char *null_argv[] = { "a", NULL };
    struct proto_gpu gpu = { .index = 1 };

    (void)state;
    proto_msg_init(&m, PROTO_BIND);
    assert_int_equal(m.v, PROTO_VERSION);
    assert_int_equal(proto_msg_set_argv(&m, 3, argv, &err), 0);
    assert_int_equal(m.argc, 3);
    assert_string_equal(m.argv[2], "--lr=3e-4");
    assert_null(m.argv[3]);
    assert_true(m.argv[0] != argv[0]); /* copied */

    /* Failures leave m as it was. */
    assert_int_equal(proto_msg_set_argv(&m, PROTO_MAX_ARGS + 1, argv, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(proto_msg_set_argv(&m, 2, null_argv, &err), -1);
    assert_int_equal(proto_msg_set_argv(&m, -1, argv, &err), -1);
    assert_int_equal(m.argc, 3);
    assert_string_equal(m.argv[0], "python");
    assert_int_equal(proto_msg_set_env(&m, 2, bad_env, &err), -1);
    assert_non_null(strstr(err.msg, "env[1]: expected KEY=VALUE"));
    assert_null(m.env);
    assert_int_equal(proto_msg_set_gpus(&m, PROTO_MAX_GPUS + 1, &gpu, &err), -1);
    assert_int_equal(proto_msg_set_tasks(&m, 1, NULL, &err), -1);

    /* Replacing and emptying. */
    assert_int_equal(proto_msg_set_gpus(&m, 1, &gpu, &err), 0);
    assert_int_equal(m.gpus[0].index, 1);
    assert_int_equal(proto_msg_set_gpus(&m, 0, NULL, &err), 0);
    assert_null(m.gpus);
    assert_int_equal(proto_msg_set_argv(&m, 1, argv, &err), 0);
    assert_int_equal(m.argc, 1);

    proto_msg_release(&m);
    assert_int_equal(m.type, PROTO_BIND);
    assert_null(m.argv);
    proto_msg_release(&m); /* twice is fine */
}

/* Every type, every field set, heap arrays at their caps. */
static void test_roundtrip_all_types_at_caps(void **state)
{
    int big = PROTO_MAX_TASKS; /* argv, env and tasks at 1024, gpus capped at 64 */

    (void)state;
    for (int t = PROTO_HELLO; t <= PROTO_TYPE_LAST; t++) {
        struct proto_msg m;
        struct proto_msg d;
        struct mu_buf b1;
        struct mu_buf b2;
        struct mu_err err;

        fill_all(&m, (enum proto_type)t, big);
        encode_ok(&m, &b1);
        if (proto_msg_decode(b1.data, b1.len, &d, &err) != 0)
            fail_msg("%s: decode: %s", proto_type_name((enum proto_type)t), err.msg);
        check_all(&d, (enum proto_type)t, big);
        /* Re-encoding the decoded message gives the same bytes. */
        encode_ok(&d, &b2);
        assert_int_equal(b1.len, b2.len);
        assert_memory_equal(b1.data, b2.data, b1.len);
        mu_buf_release(&b1);
        mu_buf_release(&b2);
        proto_msg_release(&d);
        proto_msg_release(&m);
    }
}

/* A minimal message: only v, type, seq, epoch on the wire. */
static void test_roundtrip_minimal(void **state)
{
    struct proto_msg m;
    struct proto_msg d;
    struct mu_buf b;
    struct mu_err err;

    (void)state;
    proto_msg_init(&m, PROTO_DRAIN);
    encode_ok(&m, &b);
    /* map of 4: v, type, seq, epoch = 1 + (2+1) + (5+6) + (4+1) + (6+1) bytes */
    assert_int_equal(b.len, 27);
    assert_int_equal(proto_msg_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.type, PROTO_DRAIN);
    assert_true(d.seq == 0 && d.epoch == 0);
    proto_msg_release(&d);
    mu_buf_release(&b);

    /* BIND_ACK always carries ok, even false; task refs always carry job/task/attempt. */
    proto_msg_init(&m, PROTO_BIND_ACK);
    encode_ok(&m, &b);
    assert_int_equal(proto_msg_decode(b.data, b.len, &d, &err), 0);
    assert_false(d.ok);
    assert_int_equal(d.task.state, 0);
    proto_msg_release(&d);
    mu_buf_release(&b);
}

static void test_encode_errors(void **state)
{
    struct proto_msg m;
    struct mu_buf b;
    struct mu_err err;
    char **argv;
    char big[60000];

    (void)state;
    mu_buf_init(&b, 0);
    assert_int_equal(mu_buf_append(&b, "xy", 2, &err), 0);

    proto_msg_init(&m, (enum proto_type)0);
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_non_null(strstr(err.msg, "cannot encode message type 0"));

    proto_msg_init(&m, PROTO_HELLO);
    memset(m.node, 'x', sizeof(m.node)); /* not terminated */
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_string_equal(err.msg, "field 'node': string not NUL-terminated");
    assert_int_equal(b.len, 2); /* no side effects */
    assert_string_equal(b.data, "xy");

    proto_msg_init(&m, PROTO_HELLO);
    m.ngpus = 3; /* counted but no array */
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    m.ngpus = -1;
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    m.ngpus = 0;
    m.cpus = -4;
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_non_null(strstr(err.msg, "field 'cpus': value -4 out of range"));
    m.cpus = 0;
    m.nlabels = 1; /* empty level */
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_non_null(strstr(err.msg, "labels[0].level"));

    proto_msg_init(&m, PROTO_TASK_STATUS);
    m.task.state = (enum proto_task_state)9;
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_non_null(strstr(err.msg, "task.state"));

    /* 1024 strings of 60000 bytes: over the 4 MiB message cap. */
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    argv = calloc(PROTO_MAX_ARGS, sizeof(*argv));
    assert_non_null(argv);
    for (int i = 0; i < PROTO_MAX_ARGS; i++)
        argv[i] = big;
    proto_msg_init(&m, PROTO_BIND);
    assert_int_equal(proto_msg_set_argv(&m, PROTO_MAX_ARGS, (const char *const *)argv, &err), 0);
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(b.len, 2);
    proto_msg_release(&m);
    free(argv);
    mu_buf_release(&b);
}

/* LOG_READ / LOG_DATA: the chunk setter's cap, a failed LOG_DATA, and hostile chunks. */
static void test_log_messages(void **state)
{
    static char chunk[PROTO_LOG_CHUNK_MAX + 1];
    struct proto_msg m;
    struct proto_msg d;
    struct mu_buf b;
    struct mu_err err;
    struct raw r;

    (void)state;
    proto_msg_init(&m, PROTO_LOG_DATA);
    assert_int_equal(proto_msg_set_data(&m, "abc", 3, &err), 0);
    assert_int_equal(proto_msg_set_data(&m, chunk, sizeof(chunk), &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
    assert_int_equal(proto_msg_set_data(&m, NULL, 2, &err), -1);
    assert_int_equal(m.data_len, 3); /* failures leave m as it was */
    assert_memory_equal(m.data, "abc", 3);
    assert_int_equal(proto_msg_set_data(&m, NULL, 0, &err), 0);
    assert_null(m.data);

    /* A refusal: ok false, absent, no data; the task ref and request id still go out. */
    mu_strlcpy(m.req, "17-0", sizeof(m.req));
    mu_strlcpy(m.task.job, "17-0", sizeof(m.task.job));
    m.task.attempt = 1;
    m.absent = true;
    mu_strlcpy(m.error, "no log file", sizeof(m.error));
    encode_ok(&m, &b);
    assert_int_equal(proto_msg_decode(b.data, b.len, &d, &err), 0);
    assert_false(d.ok);
    assert_true(d.absent);
    assert_null(d.data);
    assert_string_equal(d.req, "17-0");
    assert_string_equal(d.task.job, "17-0");
    assert_string_equal(d.error, "no log file");
    proto_msg_release(&d);
    mu_buf_release(&b);

    /* An encoder never sends what the decoder must refuse. */
    m.data_len = 5; /* counted but no buffer */
    mu_buf_init(&b, 0);
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_non_null(strstr(err.msg, "field 'data'"));
    m.data_len = 0;
    m.max_bytes = (int)PROTO_LOG_CHUNK_MAX + 1;
    m.type = PROTO_LOG_READ;
    assert_int_equal(proto_msg_encode(&m, &b, &err), -1);
    assert_non_null(strstr(err.msg, "field 'max_bytes': value 65537 out of range"));
    mu_buf_release(&b);
    proto_msg_release(&m);

    raw_header(&r, 1, "LOG_DATA");
    raw_str(&r, "data");
    (void)msgpack_pack_bin(&r.pk, sizeof(chunk));
    (void)msgpack_pack_bin_body(&r.pk, chunk, sizeof(chunk));
    expect_bad_raw(&r, "field 'data': 65537 bytes, at most 65536");
    raw_header(&r, 1, "LOG_DATA");
    raw_str(&r, "data");
    raw_str(&r, "text, not binary");
    expect_bad_raw(&r, "field 'data': expected binary, got string");
    raw_header(&r, 1, "LOG_READ");
    raw_str(&r, "max_bytes");
    (void)msgpack_pack_uint64(&r.pk, PROTO_LOG_CHUNK_MAX + 1);
    expect_bad_raw(&r, "field 'max_bytes': value 65537 out of range [0, 65536]");
    raw_header(&r, 1, "LOG_READ");
    raw_str(&r, "stream");
    raw_str(&r, "stdout-x");
    expect_bad_raw(&r, "field 'stream': string longer than 7 bytes");
    raw_header(&r, 1, "LOG_DATA");
    raw_str(&r, "offset");
    (void)msgpack_pack_int64(&r.pk, -1);
    expect_bad_raw(&r, "field 'offset': expected unsigned integer, got negative integer");
}

/* Whether the len bytes at data hold the string key (a key's name on the wire). */
static bool wire_has(const char *data, size_t len, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i + n <= len; i++) {
        if (memcmp(data + i, key, n) == 0)
            return true;
    }
    return false;
}

/* BYE: a header-only goodbye round-trips; its tasks (with stopped) survive; hostile ones fail. */
static void test_bye(void **state)
{
    struct proto_msg m;
    struct proto_msg d;
    struct proto_task_ref ref = { .job = "17-0", .task = 1, .attempt = 2 };
    struct mu_buf b;
    struct mu_err err;
    struct raw r;

    (void)state;
    proto_msg_init(&m, PROTO_BYE);
    mu_strlcpy(m.node, "n1", sizeof(m.node));
    encode_ok(&m, &b);
    assert_int_equal(proto_msg_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.type, PROTO_BYE);
    assert_string_equal(d.node, "n1");
    assert_int_equal(d.ntasks, 0);
    assert_null(d.tasks);
    proto_msg_release(&d);
    mu_buf_release(&b);

    ref.state = PROTO_TASK_EXITED;
    ref.signal = 15;
    ref.stopped = true;
    assert_int_equal(proto_msg_set_tasks(&m, 1, &ref, &err), 0);
    encode_ok(&m, &b);
    assert_true(wire_has(b.data, b.len, "stopped"));
    assert_int_equal(proto_msg_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.ntasks, 1);
    assert_string_equal(d.tasks[0].job, "17-0");
    assert_int_equal(d.tasks[0].state, PROTO_TASK_EXITED);
    assert_true(d.tasks[0].stopped);
    assert_false(d.tasks[0].fenced);
    proto_msg_release(&d);
    mu_buf_release(&b);
    /* stopped is written only when set: an older decoder sees the exit it always saw. */
    m.tasks[0].stopped = false;
    encode_ok(&m, &b);
    assert_false(wire_has(b.data, b.len, "stopped"));
    mu_buf_release(&b);
    proto_msg_release(&m);

    raw_header(&r, 1, "BYE");
    raw_str(&r, "tasks");
    raw_str(&r, "none");
    expect_bad_raw(&r, "field 'tasks': expected array, got string");
    raw_header(&r, 1, "BYE");
    raw_str(&r, "tasks");
    (void)msgpack_pack_array(&r.pk, 1);
    (void)msgpack_pack_map(&r.pk, 4);
    raw_str(&r, "job");
    raw_str(&r, "17-0");
    raw_str(&r, "task");
    (void)msgpack_pack_uint64(&r.pk, 0);
    raw_str(&r, "attempt");
    (void)msgpack_pack_uint64(&r.pk, 1);
    raw_str(&r, "stopped");
    (void)msgpack_pack_uint64(&r.pk, 1);
    expect_bad_raw(&r, "field 'tasks[0].stopped': expected boolean, got unsigned integer");
    raw_header(&r, 1, "BYE");
    raw_str(&r, "tasks");
    (void)msgpack_pack_array(&r.pk, PROTO_MAX_TASKS + 1);
    for (unsigned j = 0; j < PROTO_MAX_TASKS + 1; j++)
        (void)msgpack_pack_nil(&r.pk);
    expect_bad_raw(&r, "field 'tasks': 1025 entries, at most 1024");
    raw_header(&r, 0, "BYE ");
    expect_bad_raw(&r, "unknown message type 'BYE '");
}

/* Every strict prefix of valid messages fails cleanly. */
static void test_truncated_every_prefix(void **state)
{
    (void)state;
    for (int t = PROTO_HELLO; t <= PROTO_TYPE_LAST; t++) {
        struct proto_msg m;
        struct mu_buf b;

        fill_all(&m, (enum proto_type)t, 2);
        encode_ok(&m, &b);
        for (size_t n = 0; n < b.len; n++)
            expect_bad(b.data, n, NULL);
        mu_buf_release(&b);
        proto_msg_release(&m);
    }
}

static void test_trailing_bytes(void **state)
{
    struct proto_msg m;
    struct mu_buf b;
    struct mu_err err;

    (void)state;
    fill_all(&m, PROTO_KILL, 1);
    encode_ok(&m, &b);
    assert_int_equal(mu_buf_append(&b, "\x00", 1, &err), 0);
    expect_bad(b.data, b.len, "1 trailing bytes after the message");
    /* Two whole messages back to back are trailing bytes too. */
    b.len--;
    {
        struct mu_buf two;
        mu_buf_init(&two, 0);
        assert_int_equal(mu_buf_append(&two, b.data, b.len, &err), 0);
        assert_int_equal(mu_buf_append(&two, b.data, b.len, &err), 0);
        expect_bad(two.data, two.len, "trailing bytes");
        mu_buf_release(&two);
    }
    mu_buf_release(&b);
    proto_msg_release(&m);
}

static void test_version(void **state)
{
    struct raw r;

    (void)state;
    raw_init(&r);
    (void)msgpack_pack_map(&r.pk, 4);
    raw_str(&r, "type");
    raw_str(&r, "SOMETHING_NEW"); /* the version error wins over the unknown type */
    raw_str(&r, "seq");
    (void)msgpack_pack_uint64(&r.pk, 1);
    raw_str(&r, "epoch");
    (void)msgpack_pack_uint64(&r.pk, 1);
    raw_str(&r, "v");
    (void)msgpack_pack_uint64(&r.pk, 7);
    expect_bad_raw(&r, "unsupported protocol version 7 (this build speaks 1)");

    raw_init(&r);
    (void)msgpack_pack_map(&r.pk, 3);
    raw_str(&r, "type");
    raw_str(&r, "HELLO");
    raw_str(&r, "seq");
    (void)msgpack_pack_uint64(&r.pk, 1);
    raw_str(&r, "epoch");
    (void)msgpack_pack_uint64(&r.pk, 1);
    expect_bad_raw(&r, "missing key 'v'");

    raw_init(&r);
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "v");
    raw_str(&r, "1");
    expect_bad_raw(&r, "field 'v': expected unsigned integer, got string");
}

static void test_missing_and_structure(void **state)
{
    static const char *const keys[] = { "type", "seq", "epoch" };
    struct raw r;

    (void)state;
    for (size_t skip = 0; skip < MU_ARRAY_LEN(keys); skip++) {
        char want[64];
        raw_init(&r);
        (void)msgpack_pack_map(&r.pk, 3);
        raw_str(&r, "v");
        (void)msgpack_pack_uint64(&r.pk, 1);
        for (size_t i = 0; i < MU_ARRAY_LEN(keys); i++) {
            if (i == skip)
                continue;
            raw_str(&r, keys[i]);
            if (i == 0)
                raw_str(&r, "HELLO");
            else
                (void)msgpack_pack_uint64(&r.pk, 1);
        }
        (void)mu_snprintf(want, sizeof(want), "missing key '%s'", keys[skip]);
        expect_bad_raw(&r, want);
    }

    expect_bad("", 0, "empty message");
    expect_bad("\x93\x01\x02\x03", 4, "expected a map, got array");
    expect_bad("\xa3"
               "abc",
               4, "expected a map, got string");
    expect_bad("\x07", 1, "expected a map, got unsigned integer");
    expect_bad("\xc1", 1, "invalid msgpack byte 0xc1");
    /* Counts larger than the input: msgpack-c would allocate count * 16 bytes up front. */
    expect_bad("\xdd\xff\xff\xff\xff", 5, "declares 4294967295 entries");
    expect_bad("\xdf\xff\xff\xff\xff", 5, "declares 4294967295 entries");
    expect_bad("\xdb\xff\xff\xff\xff", 5, "truncated");

    raw_header(&r, 0, "NOPE\x01");
    expect_bad_raw(&r, "unknown message type 'NOPE?'");

    raw_header(&r, 1, "HELLO");
    raw_str(&r, "seq");
    (void)msgpack_pack_uint64(&r.pk, 10);
    expect_bad_raw(&r, "duplicate key 'seq'");

    raw_header(&r, 2, "BIND");
    raw_str(&r, "argv");
    (void)msgpack_pack_array(&r.pk, 1);
    raw_str(&r, "a");
    raw_str(&r, "argv");
    (void)msgpack_pack_array(&r.pk, 1);
    raw_str(&r, "b");
    expect_bad_raw(&r, "duplicate key 'argv'"); /* and no leak */

    raw_header(&r, 1, "HELLO");
    (void)msgpack_pack_uint64(&r.pk, 5);
    (void)msgpack_pack_uint64(&r.pk, 5);
    expect_bad_raw(&r, "key #4: expected string, got unsigned integer");
}

/* One extra key with a value of the wrong type, per known key. */
enum wrong { W_INT, W_NEG, W_STR, W_ARRAY, W_MAP, W_BOOL, W_FLOAT, W_NIL };

static void pack_wrong(struct raw *r, enum wrong w)
{
    switch (w) {
    case W_INT:
        (void)msgpack_pack_uint64(&r->pk, 5);
        break;
    case W_NEG:
        (void)msgpack_pack_int64(&r->pk, -5);
        break;
    case W_STR:
        raw_str(r, "x");
        break;
    case W_ARRAY:
        (void)msgpack_pack_array(&r->pk, 0);
        break;
    case W_MAP:
        (void)msgpack_pack_map(&r->pk, 0);
        break;
    case W_BOOL:
        (void)msgpack_pack_true(&r->pk);
        break;
    case W_FLOAT:
        (void)msgpack_pack_double(&r->pk, 1.5);
        break;
    case W_NIL:
        (void)msgpack_pack_nil(&r->pk);
        break;
    }
}

static void test_wrong_types(void **state)
{
    static const struct {
        const char *key;
        enum wrong w;
        const char *want;
    } cases[] = {
        { "seq", W_NEG, "field 'seq': expected unsigned integer, got negative integer" },
        { "seq", W_STR, "field 'seq': expected unsigned integer, got string" },
        { "epoch", W_FLOAT, "field 'epoch': expected unsigned integer, got float" },
        { "type", W_INT, "field 'type': expected string, got unsigned integer" },
        { "node", W_INT, "field 'node': expected string" },
        { "pool", W_NIL, "field 'pool': expected string, got nil" },
        { "addr", W_ARRAY, "field 'addr': expected string" },
        { "cpus", W_STR, "field 'cpus': expected integer, got string" },
        { "cpus", W_NEG, "field 'cpus': value -5 out of range [0, 2147483647]" },
        { "memory_mb", W_BOOL, "field 'memory_mb': expected integer" },
        { "gpus", W_MAP, "field 'gpus': expected array, got map" },
        { "labels", W_ARRAY, "field 'labels': expected map, got array" },
        { "tasks", W_STR, "field 'tasks': expected array" },
        { "heartbeat_s", W_FLOAT, "field 'heartbeat_s': expected integer" },
        { "task", W_ARRAY, "field 'task': expected map, got array" },
        { "world_size", W_STR, "field 'world_size'" },
        { "local_rank", W_NEG, "field 'local_rank'" },
        { "local_world_size", W_NIL, "field 'local_world_size'" },
        { "node_rank", W_MAP, "field 'node_rank'" },
        { "nnodes", W_BOOL, "field 'nnodes'" },
        { "master_addr", W_INT, "field 'master_addr'" },
        { "master_port", W_STR, "field 'master_port'" },
        { "gpus_bound", W_INT, "field 'gpus_bound': expected array" },
        { "argv", W_STR, "field 'argv': expected array" },
        { "env", W_MAP, "field 'env': expected array" },
        { "workdir", W_BOOL, "field 'workdir'" },
        { "resume_from", W_NEG, "field 'resume_from'" },
        { "ok", W_INT, "field 'ok': expected boolean, got unsigned integer" },
        { "error", W_ARRAY, "field 'error'" },
        { "signal", W_STR, "field 'signal'" },
        { "grace_s", W_NEG, "field 'grace_s'" },
        { "path", W_INT, "field 'path'" },
        { "at_ms", W_NEG, "field 'at_ms': expected unsigned integer" },
        { "action", W_MAP, "field 'action'" },
        { "deadline_ms", W_STR, "field 'deadline_ms'" },
    };

    (void)state;
    for (size_t i = 0; i < MU_ARRAY_LEN(cases); i++) {
        struct raw r;
        if (strcmp(cases[i].key, "type") == 0) {
            raw_init(&r);
            (void)msgpack_pack_map(&r.pk, 4);
            raw_str(&r, "v");
            (void)msgpack_pack_uint64(&r.pk, 1);
            raw_str(&r, "seq");
            (void)msgpack_pack_uint64(&r.pk, 1);
            raw_str(&r, "epoch");
            (void)msgpack_pack_uint64(&r.pk, 1);
        } else if (strcmp(cases[i].key, "seq") == 0 || strcmp(cases[i].key, "epoch") == 0) {
            raw_init(&r);
            (void)msgpack_pack_map(&r.pk, 3);
            raw_str(&r, "v");
            (void)msgpack_pack_uint64(&r.pk, 1);
            raw_str(&r, "type");
            raw_str(&r, "HELLO");
        } else {
            raw_header(&r, 1, "BIND");
        }
        raw_str(&r, cases[i].key);
        pack_wrong(&r, cases[i].w);
        expect_bad_raw(&r, cases[i].want);
    }
}

/* Bad values inside arrays and nested maps. */
static void test_bad_nested(void **state)
{
    struct raw r;

    (void)state;
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "gpus");
    (void)msgpack_pack_array(&r.pk, 2);
    (void)msgpack_pack_map(&r.pk, 0);
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "uuid");
    (void)msgpack_pack_uint64(&r.pk, 1);
    expect_bad_raw(&r, "field 'gpus[1].uuid': expected string");

    raw_header(&r, 1, "HELLO");
    raw_str(&r, "tasks");
    (void)msgpack_pack_array(&r.pk, 1);
    raw_str(&r, "x");
    expect_bad_raw(&r, "field 'tasks[0]': expected map, got string");

    raw_header(&r, 1, "KILL");
    raw_str(&r, "task");
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "task");
    (void)msgpack_pack_uint64(&r.pk, 1);
    expect_bad_raw(&r, "field 'task': missing key 'job'");

    raw_header(&r, 1, "TASK_STATUS");
    raw_str(&r, "task");
    (void)msgpack_pack_map(&r.pk, 2);
    raw_str(&r, "job");
    raw_str(&r, "j");
    raw_str(&r, "state");
    raw_str(&r, "ZOMBIE");
    expect_bad_raw(
        &r, "field 'task.state': expected \"RUNNING\", \"EXITED\" or \"LOST\", got 'ZOMBIE'");

    raw_header(&r, 1, "TASK_STATUS");
    raw_str(&r, "task");
    (void)msgpack_pack_map(&r.pk, 2);
    raw_str(&r, "job");
    raw_str(&r, "j");
    raw_str(&r, "exit_code");
    (void)msgpack_pack_int64(&r.pk, (int64_t)INT_MIN - 1);
    expect_bad_raw(&r, "field 'task.exit_code': value -2147483649 out of range");

    raw_header(&r, 1, "BIND");
    raw_str(&r, "gpus_bound");
    (void)msgpack_pack_array(&r.pk, 2);
    (void)msgpack_pack_uint64(&r.pk, 1);
    (void)msgpack_pack_int64(&r.pk, -1);
    expect_bad_raw(&r, "field 'gpus_bound[1]': value -1 out of range");

    raw_header(&r, 1, "BIND");
    raw_str(&r, "argv");
    (void)msgpack_pack_array(&r.pk, 2);
    raw_str(&r, "ok");
    (void)msgpack_pack_uint64(&r.pk, 1);
    expect_bad_raw(&r, "field 'argv[1]': expected string, got unsigned integer");

    raw_header(&r, 1, "BIND");
    raw_str(&r, "env");
    (void)msgpack_pack_array(&r.pk, 1);
    raw_str(&r, "=x");
    expect_bad_raw(&r, "field 'env[0]': expected KEY=VALUE");

    raw_header(&r, 1, "HELLO");
    raw_str(&r, "labels");
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "zone");
    (void)msgpack_pack_uint64(&r.pk, 1);
    expect_bad_raw(&r, "field 'labels[0].value': expected string");

    raw_header(&r, 1, "HELLO");
    raw_str(&r, "labels");
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "");
    raw_str(&r, "x");
    expect_bad_raw(&r, "field 'labels[0].level': empty string");

    raw_header(&r, 1, "HELLO");
    raw_str(&r, "labels");
    (void)msgpack_pack_map(&r.pk, 2);
    raw_str(&r, "zone");
    raw_str(&r, "a");
    raw_str(&r, "zone");
    raw_str(&r, "b");
    expect_bad_raw(&r, "field 'labels': duplicate level 'zone'");
}

/* Integers out of their field's range, including overflow into int. */
static void test_bad_ranges(void **state)
{
    struct raw r;

    (void)state;
    /* int overflow: 2^31 into an int field; 2^63 into an int64 field. */
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "cpus");
    (void)msgpack_pack_uint64(&r.pk, UINT64_C(1) << 31);
    expect_bad_raw(&r, "field 'cpus': value 2147483648 out of range");
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "memory_mb");
    (void)msgpack_pack_uint64(&r.pk, UINT64_C(1) << 63);
    expect_bad_raw(&r, "field 'memory_mb': value 9223372036854775808 out of range");
    raw_header(&r, 1, "BIND");
    raw_str(&r, "master_port");
    (void)msgpack_pack_uint64(&r.pk, 65536);
    expect_bad_raw(&r, "field 'master_port': value 65536 out of range [0, 65535]");
}

static void test_oversized(void **state)
{
    char s[PROTO_PATH_MAX + 8];
    struct raw r;
    char *big;

    (void)state;
    memset(s, 'n', sizeof(s));
    s[PROTO_NODE_MAX - 1] = '\0'; /* 63 bytes: fits */
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "node");
    raw_str(&r, s);
    {
        struct proto_msg m;
        struct mu_err err;
        assert_int_equal(proto_msg_decode(r.sb.data, r.sb.size, &m, &err), 0);
        assert_int_equal(strlen(m.node), 63);
        proto_msg_release(&m);
    }
    msgpack_sbuffer_destroy(&r.sb);

    s[PROTO_NODE_MAX - 1] = 'n';
    s[PROTO_NODE_MAX] = '\0'; /* 64 bytes: does not */
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "node");
    raw_str(&r, s);
    expect_bad_raw(&r, "field 'node': string longer than 63 bytes");

    s[PROTO_NODE_MAX] = 'n';
    s[PROTO_PATH_MAX] = '\0';
    raw_header(&r, 1, "CHECKPOINT_DONE");
    raw_str(&r, "path");
    raw_str(&r, s);
    expect_bad_raw(&r, "field 'path': string longer than 1023 bytes");

    raw_header(&r, 1, "TASK_STATUS");
    raw_str(&r, "task");
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "job");
    s[PROTO_JOB_MAX] = '\0';
    raw_str(&r, s);
    expect_bad_raw(&r, "field 'task.job': string longer than 47 bytes");

    /* A NUL inside a string. */
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "pool");
    (void)msgpack_pack_str(&r.pk, 3);
    (void)msgpack_pack_str_body(&r.pk, "a\0b", 3);
    expect_bad_raw(&r, "field 'pool': string contains a NUL byte");

    /* One argv string at the byte cap. */
    big = malloc(PROTO_MAX_ARG_BYTES + 1);
    assert_non_null(big);
    memset(big, 'a', PROTO_MAX_ARG_BYTES);
    big[PROTO_MAX_ARG_BYTES] = '\0';
    raw_header(&r, 1, "BIND");
    raw_str(&r, "argv");
    (void)msgpack_pack_array(&r.pk, 1);
    raw_str(&r, big);
    expect_bad_raw(&r, "field 'argv[0]': string longer than 65535 bytes");
    free(big);
}

/* Array and map counts one over each cap, and the whole message over its cap. */
static void test_oversized_counts(void **state)
{
    struct raw r;
    char *big;

    (void)state;
    {
        static const struct {
            const char *key;
            unsigned n;
            const char *want;
        } counts[] = {
            { "gpus", PROTO_MAX_GPUS + 1, "field 'gpus': 65 entries, at most 64" },
            { "tasks", PROTO_MAX_TASKS + 1, "field 'tasks': 1025 entries, at most 1024" },
            { "argv", PROTO_MAX_ARGS + 1, "field 'argv': 1025 entries, at most 1024" },
            { "env", PROTO_MAX_ENV + 1, "field 'env': 1025 entries, at most 1024" },
            { "gpus_bound", PROTO_MAX_GPUS + 1, "field 'gpus_bound': 65 entries, at most 64" },
        };
        for (size_t i = 0; i < MU_ARRAY_LEN(counts); i++) {
            raw_header(&r, 1, "BIND");
            raw_str(&r, counts[i].key);
            (void)msgpack_pack_array(&r.pk, counts[i].n);
            for (unsigned j = 0; j < counts[i].n; j++)
                (void)msgpack_pack_nil(&r.pk);
            expect_bad_raw(&r, counts[i].want);
        }
    }
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "labels");
    (void)msgpack_pack_map(&r.pk, PROTO_MAX_LABELS + 1);
    for (int j = 0; j < PROTO_MAX_LABELS + 1; j++) {
        char k[8];
        (void)mu_snprintf(k, sizeof(k), "l%d", j);
        raw_str(&r, k);
        raw_str(&r, "v");
    }
    expect_bad_raw(&r, "field 'labels': 9 entries, at most 8");

    /* The whole message over the cap. */
    big = calloc(1, (size_t)PROTO_MAX_MSG_BYTES + 1);
    assert_non_null(big);
    expect_bad(big, (size_t)PROTO_MAX_MSG_BYTES + 1, "exceeds the 4194304-byte cap");
    free(big);
}

static void test_unknown_keys_ignored(void **state)
{
    struct raw r;
    struct proto_msg m;
    struct mu_err err;
    static const char ext[] = { 1, 2, 3 };

    (void)state;
    raw_header(&r, 7, "CHECKPOINT");
    raw_str(&r, "future_map"); /* nested map with an array inside and non-string keys */
    (void)msgpack_pack_map(&r.pk, 2);
    (void)msgpack_pack_uint64(&r.pk, 1);
    (void)msgpack_pack_array(&r.pk, 2);
    (void)msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "deep");
    (void)msgpack_pack_nil(&r.pk);
    (void)msgpack_pack_double(&r.pk, 2.5);
    raw_str(&r, "k");
    (void)msgpack_pack_false(&r.pk);
    raw_str(&r, "future_bin");
    (void)msgpack_pack_bin(&r.pk, 3);
    (void)msgpack_pack_bin_body(&r.pk, ext, 3);
    raw_str(&r, "future_ext");
    (void)msgpack_pack_ext(&r.pk, 3, 5);
    (void)msgpack_pack_ext_body(&r.pk, ext, 3);
    raw_str(&r, "future_neg");
    (void)msgpack_pack_int64(&r.pk, INT64_MIN);
    raw_str(&r, "signal");
    (void)msgpack_pack_uint64(&r.pk, 12);
    raw_str(&r, "task");
    (void)msgpack_pack_map(&r.pk, 3);
    raw_str(&r, "job");
    raw_str(&r, "j-1");
    raw_str(&r, "future_in_ref");
    (void)msgpack_pack_array(&r.pk, 1);
    (void)msgpack_pack_map(&r.pk, 0);
    raw_str(&r, "attempt");
    (void)msgpack_pack_uint64(&r.pk, 2);
    /* A key the type does not carry on encode is still accepted on decode. */
    raw_str(&r, "heartbeat_s");
    (void)msgpack_pack_uint64(&r.pk, 9);

    assert_int_equal(proto_msg_decode(r.sb.data, r.sb.size, &m, &err), 0);
    assert_int_equal(m.type, PROTO_CHECKPOINT);
    assert_int_equal(m.signal, 12);
    assert_string_equal(m.task.job, "j-1");
    assert_int_equal(m.task.attempt, 2);
    assert_int_equal(m.heartbeat_s, 9);
    assert_true(m.seq == 9 && m.epoch == 3);
    proto_msg_release(&m);
    msgpack_sbuffer_destroy(&r.sb);
}

/* Deep nesting inside an unknown key fails cleanly, never overflows a stack: msgpack-c refuses
 * nesting past its fixed stack (MSGPACK_EMBED_STACK_SIZE) as out of memory, and the decode says
 * so and owns nothing. */
static void test_deep_nesting(void **state)
{
    struct raw r;
    struct proto_msg m;
    struct mu_err err;
    const int depth = 100000;

    (void)state;
    raw_header(&r, 1, "HELLO");
    raw_str(&r, "future");
    for (int i = 0; i < depth; i++)
        (void)msgpack_pack_array(&r.pk, 1);
    (void)msgpack_pack_nil(&r.pk);
    mu_err_clear(&err);
    assert_int_equal(proto_msg_decode(r.sb.data, r.sb.size, &m, &err), -1);
    assert_int_equal(err.code, MU_E_NOMEM);
    assert_non_null(strstr(err.msg, "nesting too deep"));
    assert_null(m.gpus);
    assert_null(m.tasks);
    assert_null(m.argv);
    assert_null(m.env);
    proto_msg_release(&m);
    msgpack_sbuffer_destroy(&r.sb);
}

static uint64_t rng_state = UINT64_C(0x9e3779b97f4a7c15);

static uint32_t rng(void)
{
    /* xorshift64*: a fixed seed keeps the test deterministic. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * UINT64_C(2685821657736338717)) >> 32);
}

/* If a hostile buffer decodes, the result must re-encode and decode to the same bytes. */
static void decode_any(const void *data, size_t len, int *accepted)
{
    struct proto_msg m;
    struct mu_err err;

    if (proto_msg_decode(data, len, &m, &err) == 0) {
        struct mu_buf b1;
        struct mu_buf b2;
        struct proto_msg d;
        (*accepted)++;
        encode_ok(&m, &b1);
        assert_int_equal(proto_msg_decode(b1.data, b1.len, &d, &err), 0);
        encode_ok(&d, &b2);
        assert_int_equal(b1.len, b2.len);
        assert_memory_equal(b1.data, b2.data, b1.len);
        mu_buf_release(&b1);
        mu_buf_release(&b2);
        proto_msg_release(&d);
    } else {
        assert_null(m.gpus);
        assert_null(m.argv);
    }
    proto_msg_release(&m);
}

static void test_random_garbage(void **state)
{
    uint8_t buf[512];
    int accepted = 0;

    (void)state;
    /* Pure noise, with a bias towards map headers so that some get past the first byte. */
    for (int i = 0; i < 20000; i++) {
        size_t len = rng() % sizeof(buf);
        for (size_t j = 0; j < len; j++)
            buf[j] = (uint8_t)rng();
        if (len > 0 && i % 2)
            buf[0] = (uint8_t)(0x80 | (rng() % 16));
        decode_any(buf, len, &accepted);
    }
    /* Valid messages with a few bytes flipped, inserted or cut. */
    for (int t = PROTO_HELLO; t <= PROTO_TYPE_LAST; t++) {
        struct proto_msg m;
        struct mu_buf b;
        fill_all(&m, (enum proto_type)t, 2);
        encode_ok(&m, &b);
        for (int i = 0; i < 2000; i++) {
            uint8_t *copy = malloc(b.len);
            size_t len = b.len;
            assert_non_null(copy);
            memcpy(copy, b.data, b.len);
            for (uint32_t k = 0, n = 1 + rng() % 4; k < n; k++)
                copy[rng() % len] = (uint8_t)rng();
            if (i % 3 == 0)
                len = rng() % (len + 1);
            decode_any(copy, len, &accepted);
            free(copy);
        }
        mu_buf_release(&b);
        proto_msg_release(&m);
    }
    print_message("random: %d of %d inputs decoded\n", accepted, 20000 + 11 * 2000);
}

/* ---- ZeroMQ ---- */

static int recv_wait(void *sock, char *id, size_t id_size, struct proto_msg *m, struct mu_err *err)
{
    for (int i = 0; i < 300; i++) {
        zmq_pollitem_t item = { .socket = sock, .events = ZMQ_POLLIN };
        int r = proto_recv(sock, id, id_size, m, err);
        if (r != 0)
            return r;
        (void)zmq_poll(&item, 1, 10);
    }
    return 0;
}

/* Malformed input on a live ROUTER: each gives -1 with who sent it, and nothing else breaks. */
static void zmq_malformed(void *ctx, const char *ep, void *router, void *a, void *b)
{
    struct proto_msg m;
    struct mu_err err;
    char id[PROTO_NODE_MAX];
    void *anon;

    /* A garbage frame from node-a: -1 with node-a's identity, and the socket goes on. */
    assert_int_equal(zmq_send(a, "garbage", 7, 0), 7);
    assert_int_equal(recv_wait(router, id, sizeof(id), &m, &err), -1);
    assert_string_equal(id, "node-a");
    assert_int_equal(err.code, MU_E_PROTO);
    proto_msg_release(&m);

    /* Two frames where one is expected: consumed whole, -1 with the identity. */
    assert_int_equal(zmq_send(b, "\x80", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(b, "x", 1, 0), 1);
    assert_int_equal(recv_wait(router, id, sizeof(id), &m, &err), -1);
    assert_string_equal(id, "node-b");
    assert_non_null(strstr(err.msg, "1 extra frame"));
    proto_msg_release(&m);

    /* A peer without a node identity is refused, shown in hex. */
    anon = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(anon);
    assert_int_equal(zmq_connect(anon, ep), 0);
    proto_msg_init(&m, PROTO_HEARTBEAT);
    assert_int_equal(proto_send(anon, NULL, &m, &err), 0);
    assert_int_equal(recv_wait(router, id, sizeof(id), &m, &err), -1);
    assert_non_null(strstr(err.msg, "peer without a node identity"));
    assert_memory_equal(id, "0x00", 4);
    proto_msg_release(&m);

    assert_int_equal(zmq_close(anon), 0);
}

static void test_zmq_router_dealers(void **state)
{
    const char *ep = "inproc://proto-test";
    void *ctx = zmq_ctx_new();
    void *router;
    void *a;
    void *b;
    struct proto_msg m;
    struct mu_err err;
    char id[PROTO_NODE_MAX];
    int seen_a = 0;
    int seen_b = 0;

    (void)state;
    assert_non_null(ctx);
    router = proto_router_new(ctx, ep, &err);
    assert_non_null(router);
    assert_null(proto_router_new(ctx, ep, &err));
    assert_non_null(strstr(err.msg, "cannot bind 'inproc://proto-test': "));
    assert_null(proto_dealer_new(ctx, ep, "bad name", &err));
    assert_non_null(strstr(err.msg, "invalid node name 'bad name'"));
    a = proto_dealer_new(ctx, ep, "node-a", &err);
    b = proto_dealer_new(ctx, ep, "node-b", &err);
    assert_non_null(a);
    assert_non_null(b);

    /* Nothing waiting: 0, and out is still safe to release. */
    assert_int_equal(proto_recv(router, id, sizeof(id), &m, &err), 0);
    proto_msg_release(&m);

    /* Both workers say HELLO; identities come through. */
    proto_msg_init(&m, PROTO_HELLO);
    mu_strlcpy(m.node, "node-a", sizeof(m.node));
    m.seq = 1;
    assert_int_equal(proto_send(a, NULL, &m, &err), 0);
    mu_strlcpy(m.node, "node-b", sizeof(m.node));
    m.cpus = 8;
    assert_int_equal(proto_send(b, NULL, &m, &err), 0);
    assert_int_equal(proto_send(a, "node-a", &m, &err), -1); /* a DEALER takes no identity */
    for (int i = 0; i < 2; i++) {
        struct proto_msg in;
        assert_int_equal(recv_wait(router, id, sizeof(id), &in, &err), 1);
        assert_int_equal(in.type, PROTO_HELLO);
        assert_string_equal(in.node, id);
        if (strcmp(id, "node-a") == 0)
            seen_a++;
        if (strcmp(id, "node-b") == 0) {
            assert_int_equal(in.cpus, 8);
            seen_b++;
        }
        proto_msg_release(&in);
    }
    assert_int_equal(seen_a, 1);
    assert_int_equal(seen_b, 1);

    /* The scheduler binds a task on node-b only. */
    fill_all(&m, PROTO_BIND, 3);
    assert_int_equal(proto_send(router, NULL, &m, &err), -1);
    assert_non_null(strstr(err.msg, "needs a destination node"));
    assert_int_equal(proto_send(router, "node-b", &m, &err), 0);
    proto_msg_release(&m);
    {
        struct proto_msg in;
        assert_int_equal(recv_wait(b, NULL, 0, &in, &err), 1);
        check_all(&in, PROTO_BIND, 3);
        proto_msg_release(&in);
        assert_int_equal(proto_recv(a, NULL, 0, &in, &err), 0);
        proto_msg_release(&in);
    }

    zmq_malformed(ctx, ep, router, a, b);

    /* Still working after all that. */
    proto_msg_init(&m, PROTO_HEARTBEAT);
    m.seq = 77;
    assert_int_equal(proto_send(a, NULL, &m, &err), 0);
    assert_int_equal(recv_wait(router, id, sizeof(id), &m, &err), 1);
    assert_string_equal(id, "node-a");
    assert_true(m.seq == 77);
    proto_msg_release(&m);

    /* A small identity buffer: the message is refused, the name shown truncated. */
    assert_int_equal(proto_send(b, NULL, &m, &err), 0);
    assert_int_equal(recv_wait(router, id, 5, &m, &err), -1);
    assert_string_equal(id, "node");
    proto_msg_release(&m);

    assert_int_equal(zmq_close(a), 0);
    assert_int_equal(zmq_close(b), 0);
    assert_int_equal(zmq_close(router), 0);
    assert_int_equal(zmq_ctx_term(ctx), 0);
}

static void test_zmq_tcp_bind_error(void **state)
{
    void *ctx = zmq_ctx_new();
    void *r1;
    void *d;
    struct mu_err err;
    char ep[64];
    size_t len = sizeof(ep);

    (void)state;
    r1 = proto_router_new(ctx, "tcp://127.0.0.1:*", &err);
    assert_non_null(r1);
    assert_int_equal(zmq_getsockopt(r1, ZMQ_LAST_ENDPOINT, ep, &len), 0);
    assert_null(proto_router_new(ctx, ep, &err));
    assert_non_null(strstr(err.msg, "cannot bind 'tcp://127.0.0.1:"));
    assert_non_null(strstr(err.msg, "Address already in use"));
    assert_null(proto_router_new(ctx, "nonsense://x", &err));
    assert_null(proto_dealer_new(ctx, "nonsense://x", "n1", &err));
    assert_non_null(strstr(err.msg, "cannot connect to 'nonsense://x'"));

    /* Over real TCP: a DEALER message arrives with its identity. */
    d = proto_dealer_new(ctx, ep, "tcp-node", &err);
    assert_non_null(d);
    {
        struct proto_msg m;
        char id[PROTO_NODE_MAX];
        proto_msg_init(&m, PROTO_SPOT_NOTICE);
        mu_strlcpy(m.action, "terminate", sizeof(m.action));
        m.deadline_ms = 123;
        assert_int_equal(proto_send(d, NULL, &m, &err), 0);
        assert_int_equal(recv_wait(r1, id, sizeof(id), &m, &err), 1);
        assert_string_equal(id, "tcp-node");
        assert_string_equal(m.action, "terminate");
        assert_true(m.deadline_ms == 123);
        proto_msg_release(&m);
    }
    assert_int_equal(zmq_close(d), 0);
    assert_int_equal(zmq_close(r1), 0);
    assert_int_equal(zmq_ctx_term(ctx), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_names),
        cmocka_unit_test(test_setters),
        cmocka_unit_test(test_roundtrip_all_types_at_caps),
        cmocka_unit_test(test_roundtrip_minimal),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_log_messages),
        cmocka_unit_test(test_bye),
        cmocka_unit_test(test_truncated_every_prefix),
        cmocka_unit_test(test_trailing_bytes),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_missing_and_structure),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_bad_nested),
        cmocka_unit_test(test_bad_ranges),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_oversized_counts),
        cmocka_unit_test(test_unknown_keys_ignored),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_random_garbage),
        cmocka_unit_test(test_zmq_router_dealers),
        cmocka_unit_test(test_zmq_tcp_bind_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

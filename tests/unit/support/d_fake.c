/* SPDX-License-Identifier: MIT */
/*
 * The shared helpers of the daemon's unit tests (d_fake.h has their contracts): a store and a
 * sender that record what musterd writes and sends, behind the daemon's own seams (d_io.h), and
 * a fixture that builds a struct musterd around them the way main.c's setup does.  The store
 * keeps only what a test asserts on (the last value of each hash field, the events in order, the
 * acknowledgements, the counters); it does not imitate Redis beyond "a write lands whole or
 * fails".  One copy, linked into every test_daemon* executable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/support/d_fake.h"

#include "common/mu_banned.h"

#define FAKE_COUNTERS_MAX 64

/* A heap copy of s, failing the test without memory. */
static char *copy(const char *s)
{
    char *p = strdup(s ? s : "");
    assert_non_null(p);
    return p;
}

/* items (capacity *cap, n used, size bytes each) with room for one more; fails the test
 * without memory. */
static void *grow(void *items, int *cap, int n, size_t size)
{
    void *p;
    int c;
    if (n < *cap)
        return items;
    c = *cap ? *cap * 2 : 16;
    p = realloc(items, (size_t)c * size);
    assert_non_null(p);
    *cap = c;
    return p;
}

/* ---- the recording store ---- */

struct fake_kv {
    char *key;
    char *value; /* NULL: deleted */
};

struct fake_record {
    struct fake_kv *fields;
    int nfields;
    int cap_fields;
    struct fake_event *events; /* state and reason heap-owned */
    int nevents;
    int cap_events;
};

struct fake_ack {
    enum queue_stream stream;
    char id[QUEUE_JOB_ID_MAX];
};

struct fake_counter {
    char name[64];
    double value;
};

struct fake_store {
    bool fail;
    int fail_next;         /* writes still to fail, then they land again */
    bool fail_batch;       /* the next batch_end fails */
    bool batching;         /* between batch_begin and batch_end */
    int batch_writes;      /* job updates since batch_begin */
    struct mu_map *jobs;   /* id -> struct fake_record * (owned) */
    struct mu_map *status; /* "<hash> <field>" -> heap JSON (owned) */
    struct mu_map *idem;   /* idempotency key -> heap job id (owned) */
    struct fake_ack *acks;
    int nacks;
    int cap_acks;
    struct fake_counter counters[FAKE_COUNTERS_MAX];
    int ncounters;
    uint64_t now_ms; /* Redis's clock (fake_time_ms) */
};

static void counter_add(struct fake_store *s, const char *name, double by)
{
    for (int i = 0; i < s->ncounters; i++) {
        if (strcmp(s->counters[i].name, name) == 0) {
            s->counters[i].value += by;
            return;
        }
    }
    assert_true(s->ncounters < FAKE_COUNTERS_MAX);
    mu_strlcpy(s->counters[s->ncounters].name, name, sizeof(s->counters[0].name));
    s->counters[s->ncounters++].value = by;
}

static struct fake_record *record_get(struct fake_store *s, const char *id)
{
    struct fake_record *r = mu_map_get(s->jobs, id);
    if (!r) {
        r = calloc(1, sizeof(*r));
        assert_non_null(r);
        assert_int_equal(mu_map_put(s->jobs, id, r, NULL), 0);
    }
    return r;
}

static void record_set(struct fake_record *r, const char *key, const char *value)
{
    for (int i = 0; i < r->nfields; i++) {
        if (strcmp(r->fields[i].key, key) == 0) {
            free(r->fields[i].value);
            r->fields[i].value = value ? copy(value) : NULL;
            return;
        }
    }
    r->fields = grow(r->fields, &r->cap_fields, r->nfields, sizeof(*r->fields));
    r->fields[r->nfields].key = copy(key);
    r->fields[r->nfields++].value = value ? copy(value) : NULL;
}

static void record_free(struct fake_record *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nfields; i++) {
        free(r->fields[i].key);
        free(r->fields[i].value);
    }
    for (int i = 0; i < r->nevents; i++) {
        free((char *)r->events[i].state);
        free((char *)r->events[i].reason);
    }
    free(r->fields);
    free(r->events);
    free(r);
}

/* Whether this write fails (and counts it against fail_next). */
static bool failing(struct fake_store *s)
{
    if (s->fail)
        return true;
    if (s->fail_next > 0) {
        s->fail_next--;
        return true;
    }
    return false;
}

static int store_down(struct mu_err *err)
{
    return mu_errf(err, MU_E_REDIS, "fake store: redis is down");
}

static int fake_job_update(void *ctx, const struct queue_job_change *c, struct mu_err *err)
{
    struct fake_store *s = ctx;
    const struct queue_event *ev = c->ev;
    if (failing(s))
        return store_down(err);
    s->batch_writes += s->batching;
    if (c->nfields > 0 || ev) {
        struct fake_record *r = record_get(s, c->id);
        for (int i = 0; i < c->nfields; i++)
            record_set(r, c->fields[i].key, c->fields[i].value);
        if (ev) {
            r->events = grow(r->events, &r->cap_events, r->nevents, sizeof(*r->events));
            r->events[r->nevents].state = copy(ev->state);
            r->events[r->nevents].reason = copy(ev->reason);
            r->events[r->nevents++].attempt = ev->attempt;
            for (int i = 0; i < 4 && ev->incr[i]; i++)
                counter_add(s, ev->incr[i], 1);
            if (ev->incr_float_name)
                counter_add(s, ev->incr_float_name, ev->incr_float);
        }
    }
    if (c->ack_id) {
        s->acks = grow(s->acks, &s->cap_acks, s->nacks, sizeof(*s->acks));
        s->acks[s->nacks].stream = c->ack_stream;
        mu_strlcpy(s->acks[s->nacks++].id, c->ack_id, sizeof(s->acks[0].id));
    }
    return 0;
}

static int fake_idem_claim(void *ctx,
                           const char *key,
                           const char *id,
                           char *owner,
                           size_t owner_size,
                           bool *won,
                           struct mu_err *err)
{
    struct fake_store *s = ctx;
    const char *held;
    if (failing(s))
        return store_down(err);
    held = mu_map_get(s->idem, key);
    if (!held) {
        char *mine = copy(id);
        assert_int_equal(mu_map_put(s->idem, key, mine, NULL), 0);
        held = mine;
    }
    *won = strcmp(held, id) == 0;
    mu_strlcpy(owner, held, owner_size);
    return 0;
}

static int fake_idem_get(
    void *ctx, const char *key, char *id, size_t id_size, bool *found, struct mu_err *err)
{
    struct fake_store *s = ctx;
    const char *held;
    if (failing(s))
        return store_down(err);
    held = mu_map_get(s->idem, key);
    *found = held != NULL;
    if (held)
        mu_strlcpy(id, held, id_size);
    return 0;
}

/* A count field of the fake hash, 0 when absent or unreadable. */
static int64_t fake_count(struct fake_store *s, const char *id, const char *field)
{
    const char *v = fake_field(s, id, field);
    int64_t n = 0;
    if (!v || mu_parse_i64(v, 0, INT64_MAX, &n, NULL) != 0)
        return 0;
    return n;
}

static int fake_job_state(
    void *ctx, const char *id, struct queue_job_brief *out, bool *found, struct mu_err *err)
{
    struct fake_store *s = ctx;
    const char *st;
    if (failing(s))
        return store_down(err);
    memset(out, 0, sizeof(*out));
    st = fake_field(s, id, "state");
    *found = st && queue_state_parse(st, &out->state) == 0;
    out->started = fake_field(s, id, "started_at") != NULL;
    out->array = fake_field(s, id, "array_size") != NULL;
    out->array_done = fake_count(s, id, "array_done");
    out->array_failed = fake_count(s, id, "array_failed");
    out->array_nostart = fake_count(s, id, "array_nostart");
    return 0;
}

static int fake_status_write(
    void *ctx, const char *hash, const struct queue_kv *kv, int n, struct mu_err *err)
{
    struct fake_store *s = ctx;
    if (failing(s))
        return store_down(err);
    for (int i = 0; i < n; i++) {
        char key[256];
        assert_int_equal(mu_snprintf(key, sizeof(key), "%s %s", hash, kv[i].key), 0);
        free(mu_map_remove(s->status, key));
        if (kv[0].value)
            assert_int_equal(mu_map_put(s->status, key, copy(kv[i].value), NULL), 0);
    }
    return 0;
}

static int fake_counter_incr(void *ctx, const char *name, struct mu_err *err)
{
    struct fake_store *s = ctx;
    if (failing(s))
        return store_down(err);
    counter_add(s, name, 1);
    return 0;
}

/* Log answers land in the status map as "logreply <id>" -> the header line. */
static int fake_log_reply(void *ctx,
                          const char *req_id,
                          const char *head,
                          const void *data,
                          size_t len,
                          struct mu_err *err)
{
    struct fake_store *s = ctx;
    char key[256];

    (void)data;
    (void)len;
    if (failing(s))
        return store_down(err);
    assert_int_equal(mu_snprintf(key, sizeof(key), "logreply %s", req_id), 0);
    free(mu_map_remove(s->status, key));
    assert_int_equal(mu_map_put(s->status, key, copy(head), NULL), 0);
    return 0;
}

/* Answers land in the status map as "answer <key>" -> the value. */
static int fake_answer_push(
    void *ctx, const char *key, const char *value, size_t len, struct mu_err *err)
{
    struct fake_store *s = ctx;
    char k[256];

    (void)len;
    if (failing(s))
        return store_down(err);
    assert_int_equal(mu_snprintf(k, sizeof(k), "answer %s", key), 0);
    free(mu_map_remove(s->status, k));
    assert_int_equal(mu_map_put(s->status, k, copy(value), NULL), 0);
    return 0;
}

/* A batch's writes land as they are made; the end of one that has any fails while the store
 * fails, or once after fake_store_fail_batch. */
static void fake_batch_begin(void *ctx)
{
    struct fake_store *s = ctx;
    s->batching = true;
    s->batch_writes = 0;
}

static int fake_batch_end(void *ctx, struct mu_err *err)
{
    struct fake_store *s = ctx;
    s->batching = false;
    if (s->batch_writes == 0)
        return 0;
    if (s->fail_batch || s->fail) {
        s->fail_batch = false;
        return store_down(err);
    }
    return 0;
}

/* Redis's clock as the test set it (fake_store_set_time; 0 before). */
static int fake_time_ms(void *ctx, uint64_t *now_ms, struct mu_err *err)
{
    struct fake_store *s = ctx;

    if (failing(s))
        return store_down(err);
    *now_ms = s->now_ms;
    return 0;
}

static const struct d_store_ops fake_ops = {
    fake_job_update,   fake_idem_claim,   fake_idem_get,  fake_job_state,
    fake_status_write, fake_counter_incr, fake_log_reply, fake_answer_push,
    fake_time_ms,      fake_batch_begin,  fake_batch_end,
};

void fake_store_set_time(struct fake_store *s, uint64_t now_ms)
{
    s->now_ms = now_ms;
}

struct fake_store *fake_store_new(struct d_store *out)
{
    struct fake_store *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->jobs = mu_map_new();
    s->status = mu_map_new();
    s->idem = mu_map_new();
    assert_non_null(s->jobs);
    assert_non_null(s->status);
    assert_non_null(s->idem);
    out->ops = &fake_ops;
    out->ctx = s;
    return s;
}

/* Frees every value of m (heap strings) and m. */
static void strings_free(struct mu_map *m)
{
    size_t pos = 0;
    char *v;
    while ((v = mu_map_next(m, &pos)) != NULL)
        free(v);
    mu_map_free(m);
}

void fake_store_free(struct fake_store *s)
{
    size_t pos = 0;
    struct fake_record *r;
    if (!s)
        return;
    while ((r = mu_map_next(s->jobs, &pos)) != NULL)
        record_free(r);
    mu_map_free(s->jobs);
    strings_free(s->status);
    strings_free(s->idem);
    free(s->acks);
    free(s);
}

void fake_store_fail(struct fake_store *s, bool fail)
{
    s->fail = fail;
    s->fail_next = 0;
}

void fake_store_fail_next(struct fake_store *s, int n)
{
    s->fail_next = n;
}

void fake_store_fail_batch(struct fake_store *s)
{
    s->fail_batch = true;
}

const char *fake_field(const struct fake_store *s, const char *id, const char *key)
{
    const struct fake_record *r = mu_map_get(s->jobs, id);
    for (int i = 0; r && i < r->nfields; i++) {
        if (strcmp(r->fields[i].key, key) == 0)
            return r->fields[i].value;
    }
    return NULL;
}

int fake_event_count(const struct fake_store *s, const char *id)
{
    const struct fake_record *r = mu_map_get(s->jobs, id);
    return r ? r->nevents : 0;
}

const struct fake_event *fake_event_get(const struct fake_store *s, const char *id, int i)
{
    const struct fake_record *r = mu_map_get(s->jobs, id);
    if (!r)
        return NULL;
    if (i < 0)
        i += r->nevents;
    return i >= 0 && i < r->nevents ? &r->events[i] : NULL;
}

bool fake_acked(const struct fake_store *s, enum queue_stream stream, const char *entry_id)
{
    for (int i = 0; i < s->nacks; i++) {
        if (s->acks[i].stream == stream && strcmp(s->acks[i].id, entry_id) == 0)
            return true;
    }
    return false;
}

double fake_counter(const struct fake_store *s, const char *name)
{
    for (int i = 0; i < s->ncounters; i++) {
        if (strcmp(s->counters[i].name, name) == 0)
            return s->counters[i].value;
    }
    return 0;
}

const char *fake_status(const struct fake_store *s, const char *hash, const char *field)
{
    char key[256];
    if (mu_snprintf(key, sizeof(key), "%s %s", hash, field) != 0)
        return NULL;
    return mu_map_get(s->status, key);
}

/* ---- the recording sender ---- */

struct fake_sender {
    struct fake_msg *msgs; /* sent and not taken, oldest first */
    int n;
    int cap;
};

static int fake_send(void *ctx, const char *node, const struct proto_msg *m, struct mu_err *err)
{
    struct fake_sender *s = ctx;
    struct fake_msg *out;
    (void)err;
    s->msgs = grow(s->msgs, &s->cap, s->n, sizeof(*s->msgs));
    out = &s->msgs[s->n++];
    memset(out, 0, sizeof(*out));
    mu_strlcpy(out->node, node, sizeof(out->node));
    out->type = m->type;
    mu_strlcpy(out->job, m->task.job, sizeof(out->job));
    out->task = m->task.task;
    out->attempt = m->task.attempt;
    out->signal = m->signal;
    out->grace_s = m->grace_s;
    out->ok = m->ok;
    out->answer_every = m->answer_every;
    out->world_size = m->world_size;
    out->node_rank = m->node_rank;
    out->nbind_gpus = m->nbind_gpus;
    memcpy(out->bind_gpus, m->bind_gpus, sizeof(out->bind_gpus));
    out->gpu_milli_env[0] = '\0';
    for (int i = 0; i < m->nenv && m->env; i++) {
        if (strncmp(m->env[i], "MUSTER_GPU_MILLI=", 17) == 0)
            mu_strlcpy(out->gpu_milli_env, m->env[i], sizeof(out->gpu_milli_env));
    }
    mu_strlcpy(out->resume_from, m->resume_from, sizeof(out->resume_from));
    return 0;
}

struct fake_sender *fake_sender_new(struct d_sender *out)
{
    struct fake_sender *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    out->fn = fake_send;
    out->ctx = s;
    out->epoch = 1;
    out->seq = 0;
    return s;
}

void fake_sender_free(struct fake_sender *s)
{
    if (!s)
        return;
    free(s->msgs);
    free(s);
}

int fake_sent_count(const struct fake_sender *s)
{
    return s->n;
}

static bool matches(
    const struct fake_msg *m, enum proto_type type, const char *node, const char *job, int task)
{
    return m->type == type && (!node || strcmp(m->node, node) == 0)
           && (!job || strcmp(m->job, job) == 0) && (task < 0 || m->task == task);
}

static void sent_remove(struct fake_sender *s, int i, struct fake_msg *out)
{
    if (out)
        *out = s->msgs[i];
    memmove(&s->msgs[i], &s->msgs[i + 1], (size_t)(s->n - i - 1) * sizeof(*s->msgs));
    s->n--;
}

bool fake_sent_pop(struct fake_sender *s, struct fake_msg *out)
{
    if (s->n == 0)
        return false;
    sent_remove(s, 0, out);
    return true;
}

bool fake_sent_take(struct fake_sender *s,
                    enum proto_type type,
                    const char *node,
                    const char *job,
                    int task,
                    struct fake_msg *out)
{
    for (int i = 0; i < s->n; i++) {
        if (matches(&s->msgs[i], type, node, job, task)) {
            sent_remove(s, i, out);
            return true;
        }
    }
    return false;
}

int fake_sent_matching(
    const struct fake_sender *s, enum proto_type type, const char *node, const char *job, int task)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += matches(&s->msgs[i], type, node, job, task);
    return n;
}

void fake_sent_clear(struct fake_sender *s)
{
    s->n = 0;
}

/* ---- the daemon without Redis or ZeroMQ ---- */

struct dfix *dfix_new(const char *config_json)
{
    struct dfix *f = calloc(1, sizeof(*f));
    struct mu_err err;

    assert_non_null(f);
    if (cfg_parse(&f->d.cfg, config_json, strlen(config_json), &err) != 0)
        fail_msg("config: %s", err.msg);
    f->d.stop = &f->stop;
    f->d.reason_budget = D_REASONS_PER_TICK; /* as main() starts it; the loop's tick refills it */
    if (d_state_init(&f->d, &err) != 0)
        fail_msg("d_state_init: %s", err.msg);
    f->store = fake_store_new(&f->d.store);
    f->sent = fake_sender_new(&f->d.out);
    return f;
}

void dfix_free(struct dfix *f)
{
    if (!f)
        return;
    d_state_release(&f->d);
    fake_sender_free(f->sent);
    fake_store_free(f->store);
    free(f);
}

int dfix_teardown(void **state)
{
    dfix_free(*state);
    return 0;
}

void dfix_two_nodes(struct dfix *f)
{
    (void)dfix_hello(f, "n1", "od", 8);
    (void)dfix_hello(f, "n2", "od", 8);
}

const char *dfix_state_field(const struct dfix *f, const char *id)
{
    const char *s = fake_field(f->store, id, "state");
    return s ? s : "(none)";
}

/* A worker message is taken in only while Redis is up: d_loop.c holds it otherwise. */
static struct d_node *registered(struct dfix *f, const char *node)
{
    struct d_node *n = d_node_get(&f->d, node);
    if (f->d.redis_down)
        fail_msg("node %s: the loop holds worker messages while Redis is down; call "
                 "dfix_store_recover first",
                 node);
    if (!n)
        fail_msg("node %s is not registered", node);
    return n;
}

struct d_node *dfix_hello(struct dfix *f, const char *node, const char *pool, int ngpus)
{
    return dfix_hello_tasks(f, node, pool, ngpus, NULL, 0);
}

struct d_node *dfix_hello_tasks(struct dfix *f,
                                const char *node,
                                const char *pool,
                                int ngpus,
                                const struct proto_task_ref *tasks,
                                int ntasks)
{
    struct proto_msg m;
    struct proto_gpu gpus[PROTO_MAX_GPUS];
    struct fake_msg answer = { 0 }; /* cmocka's fail_msg is not noreturn to the compiler */
    struct mu_err err;
    struct d_node *n;

    assert_true(ngpus >= 0 && ngpus <= PROTO_MAX_GPUS);
    memset(gpus, 0, sizeof(gpus));
    for (int g = 0; g < ngpus; g++) {
        gpus[g].index = g;
        gpus[g].memory_mb = 81559;
    }
    proto_msg_init(&m, PROTO_HELLO);
    mu_strlcpy(m.node, node, sizeof(m.node));
    mu_strlcpy(m.pool, pool, sizeof(m.pool));
    m.cpus = 192;
    m.memory_mb = 2 << 20;
    if (proto_msg_set_gpus(&m, ngpus, gpus, &err) != 0
        || proto_msg_set_tasks(&m, ntasks, tasks, &err) != 0)
        fail_msg("%s", err.msg);
    m.nlabels = f->d.cfg.nlevels;
    for (int l = 0; l < f->d.cfg.nlevels; l++) {
        mu_strlcpy(m.labels[l].level, f->d.cfg.levels[l], sizeof(m.labels[l].level));
        (void)mu_snprintf(m.labels[l].value, sizeof(m.labels[l].value), "%s-1", f->d.cfg.levels[l]);
    }
    d_hello(&f->d, node, &m);
    proto_msg_release(&m);
    if (!fake_sent_take(f->sent, PROTO_HEARTBEAT, node, NULL, -1, &answer))
        fail_msg("node %s: no answer to its HELLO", node);
    assert_true(answer.ok);
    n = d_node_get(&f->d, node);
    assert_non_null(n);
    return n;
}

void dfix_access(struct dfix *f, const char *config_json)
{
    struct mu_err err;
    struct access *a = access_parse(config_json, strlen(config_json), &err);

    if (!a)
        fail_msg("access rules: %s", err.msg);
    assert_int_equal(d_access_set(&f->d, a, &err), 0);
}

void dfix_submit(struct dfix *f, const char *id, const char *spec_json)
{
    dfix_submit_as(f, "", id, spec_json);
}

void dfix_submit_as(struct dfix *f, const char *owner, const char *id, const char *spec_json)
{
    struct queue_entry e;
    memset(&e, 0, sizeof(e));
    mu_strlcpy(e.owner, owner, sizeof(e.owner));
    mu_strlcpy(e.id, id, sizeof(e.id));
    e.stream = QUEUE_STREAM_SUBMIT;
    e.spec = copy(spec_json);
    e.spec_len = strlen(spec_json);
    e.grace_s = -1;
    d_intake_submit(&f->d, &e);
    free(e.spec);
}

void dfix_control(
    struct dfix *f, const char *entry_id, const char *cmd, const char *arg, int grace_s)
{
    dfix_control_as(f, "", entry_id, cmd, arg, grace_s);
}

void dfix_control_as(struct dfix *f,
                     const char *owner,
                     const char *entry_id,
                     const char *cmd,
                     const char *arg,
                     int grace_s)
{
    struct queue_entry e;
    memset(&e, 0, sizeof(e));
    mu_strlcpy(e.owner, owner, sizeof(e.owner));
    mu_strlcpy(e.id, entry_id, sizeof(e.id));
    e.stream = QUEUE_STREAM_CONTROL;
    mu_strlcpy(e.cmd, cmd, sizeof(e.cmd));
    mu_strlcpy(e.arg, arg, sizeof(e.arg));
    e.grace_s = grace_s;
    d_control(&f->d, &e);
}

static void task_ref(
    struct proto_task_ref *r, const char *job, int task, int attempt, enum proto_task_state state)
{
    memset(r, 0, sizeof(*r));
    mu_strlcpy(r->job, job, sizeof(r->job));
    r->task = task;
    r->attempt = attempt;
    r->state = state;
    r->pid = 1000 + task;
}

void dfix_bind_ack(struct dfix *f, const char *node, const char *job, int task, int attempt)
{
    struct d_node *n = registered(f, node);
    struct proto_msg m;
    proto_msg_init(&m, PROTO_BIND_ACK);
    task_ref(&m.task, job, task, attempt, PROTO_TASK_RUNNING);
    m.ok = true;
    d_bind_ack(&f->d, n, &m);
    proto_msg_release(&m);
}

void dfix_bind_refused(struct dfix *f,
                       const char *node,
                       const char *job,
                       int task,
                       int attempt,
                       bool node_fault,
                       const char *error)
{
    struct d_node *n = registered(f, node);
    struct proto_msg m;
    proto_msg_init(&m, PROTO_BIND_ACK);
    task_ref(&m.task, job, task, attempt, PROTO_TASK_EXITED);
    m.ok = false;
    m.node_fault = node_fault;
    mu_strlcpy(m.error, error, sizeof(m.error));
    d_bind_ack(&f->d, n, &m);
    proto_msg_release(&m);
}

void dfix_task_exit(struct dfix *f,
                    const char *node,
                    const char *job,
                    int task,
                    int attempt,
                    int exit_code,
                    int signal)
{
    struct d_node *n = registered(f, node);
    struct proto_task_ref r;
    task_ref(&r, job, task, attempt, PROTO_TASK_EXITED);
    r.exit_code = signal ? 0 : exit_code;
    r.signal = signal;
    d_task_status(&f->d, n, &r);
}

void dfix_checkpoint_done(struct dfix *f,
                          const char *node,
                          const char *job,
                          int task,
                          int attempt,
                          const char *path,
                          uint64_t at_ms)
{
    struct d_node *n = registered(f, node);
    struct proto_msg m;
    proto_msg_init(&m, PROTO_CHECKPOINT_DONE);
    task_ref(&m.task, job, task, attempt, PROTO_TASK_RUNNING);
    mu_strlcpy(m.path, path, sizeof(m.path));
    m.at_ms = at_ms;
    d_checkpoint_done(&f->d, n, &m);
    proto_msg_release(&m);
}

void dfix_store_recover(struct dfix *f)
{
    fake_store_fail(f->store, false);
    f->d.redis_down = false;
    assert_int_equal(d_jobs_resync(&f->d), 0);
    d_outage_recheck(&f->d);
}

int dfix_job_state(const struct dfix *f, const char *id)
{
    const struct d_job *j = mu_map_get(f->d.jobs, id);
    return j ? (int)j->state : -1;
}

void expect_last_event(
    const struct dfix *f, const char *id, const char *state, int attempt, const char *reason_part)
{
    const struct fake_event *ev = fake_event_get(f->store, id, -1);
    if (!ev) {
        fail_msg("job %s: no event written, expected %s", id, state);
        return; /* not reached: fail_msg ends the test */
    }
    if (strcmp(ev->state, state) != 0 || (attempt >= 0 && ev->attempt != attempt))
        fail_msg("job %s: newest event is %s (attempt %d, '%s'), expected %s (attempt %d)", id,
                 ev->state, ev->attempt, ev->reason, state, attempt);
    if (reason_part && !strstr(ev->reason, reason_part))
        fail_msg("job %s: %s event's reason '%s' does not say '%s'", id, state, ev->reason,
                 reason_part);
}

void expect_sent(struct dfix *f,
                 enum proto_type type,
                 const char *node,
                 const char *job,
                 int task,
                 int attempt,
                 struct fake_msg *out)
{
    struct fake_msg m;
    if (out)
        memset(out, 0, sizeof(*out));
    if (!fake_sent_take(f->sent, type, node, job, task, &m)) {
        char seen[2048] = "";
        size_t len = 0;
        for (int i = 0; i < f->sent->n && len < sizeof(seen) - 100; i++) {
            const struct fake_msg *s = &f->sent->msgs[i];
            (void)mu_snprintf(seen + len, sizeof(seen) - len, " %s->%s(%s/%d/%d)",
                              proto_type_name(s->type), s->node, s->job, s->task, s->attempt);
            len = strlen(seen);
        }
        fail_msg("no %s to node %s for job %s task %d; sent:%s", proto_type_name(type),
                 node ? node : "*", job ? job : "*", task, seen[0] ? seen : " nothing");
        return; /* not reached: fail_msg ends the test */
    }
    assert_int_equal(m.attempt, attempt);
    if (out)
        *out = m;
}

void dfix_take_binds(
    struct dfix *f, const char *id, int tasks, int attempt, char node_of[][PROTO_NODE_MAX])
{
    for (int t = 0; t < tasks; t++) {
        struct fake_msg m;
        expect_sent(f, PROTO_BIND, NULL, id, t, attempt, &m);
        assert_int_equal(m.world_size, tasks);
        mu_strlcpy(node_of[t], m.node, PROTO_NODE_MAX);
    }
    assert_int_equal(fake_sent_matching(f->sent, PROTO_BIND, NULL, id, -1), 0);
}

void dfix_element_run(struct dfix *f, const char *id, int index, int exit_code)
{
    char eid[64];
    char node_of[1][PROTO_NODE_MAX];

    (void)snprintf(eid, sizeof(eid), "%s_%d", id, index);
    dfix_take_binds(f, eid, 1, 1, node_of);
    dfix_ack_all(f, eid, 1, 1, node_of);
    dfix_task_exit(f, node_of[0], eid, 0, 1, exit_code, 0);
}

void dfix_ack_all(
    struct dfix *f, const char *id, int tasks, int attempt, char node_of[][PROTO_NODE_MAX])
{
    for (int t = 0; t < tasks; t++)
        dfix_bind_ack(f, node_of[t], id, t, attempt);
}

void dfix_start_gang(struct dfix *f,
                     const char *id,
                     const char *spec_json,
                     int tasks,
                     char node_of[][PROTO_NODE_MAX])
{
    dfix_submit(f, id, spec_json);
    d_schedule(&f->d);
    dfix_take_binds(f, id, tasks, 1, node_of);
    expect_last_event(f, id, "STARTING", 1, NULL);
    dfix_ack_all(f, id, tasks, 1, node_of);
    expect_last_event(f, id, "RUNNING", 1, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * Layer 0 of musterd (d_io.h): the Redis store, the sender to the workers, and the counters of
 * the metrics endpoint.  The real store and sender are thin: each call is one queue_* call or one
 * proto_send, so that unit tests can put a recording store and sender in their place.  Every
 * write is fenced by the leader lease (queue_fence_set): the store notes a refused one, and the
 * sender then goes silent, so a musterd that lost the lease stops at its first write.
 */
#include "scheduler/d_io.h"

#include <string.h>

#include "common/mu_banned.h"

/* ---- the store over Redis ---- */

/* rc, after noting a write refused for want of the lease. */
static int noted(void *ctx, int rc, const struct mu_err *err)
{
    struct d_store *s = ctx;
    if (rc != 0 && err && err->code == MU_E_FENCED && !s->fenced) {
        s->fenced = true;
        mu_log(MU_LOG_ERROR, "sched", "redis refused a write: %s", err->msg);
    }
    return rc;
}

static struct queue *conn(void *ctx)
{
    return ((struct d_store *)ctx)->q;
}

static int redis_job_update(void *ctx, const struct queue_job_change *c, struct mu_err *err)
{
    struct d_store *s = ctx;
    if (s->batching)
        return queue_job_update_append(conn(ctx), c, &s->batch_sent, err);
    return noted(ctx, queue_job_update(conn(ctx), c, err), err);
}

static void redis_batch_begin(void *ctx)
{
    struct d_store *s = ctx;
    s->batching = true;
    s->batch_sent = 0;
}

static int redis_batch_end(void *ctx, struct mu_err *err)
{
    struct d_store *s = ctx;
    s->batching = false;
    return noted(ctx, queue_updates_finish(s->q, s->batch_sent, err), err);
}

static int redis_idem_claim(void *ctx,
                            const char *key,
                            const char *id,
                            char *owner,
                            size_t owner_size,
                            bool *won,
                            struct mu_err *err)
{
    return noted(ctx, queue_idem_claim(conn(ctx), key, id, owner, owner_size, won, err), err);
}

static int redis_idem_get(
    void *ctx, const char *key, char *id, size_t id_size, bool *found, struct mu_err *err)
{
    return queue_idem_get(conn(ctx), key, id, id_size, found, err);
}

static int redis_job_state(
    void *ctx, const char *id, struct queue_job_brief *out, bool *found, struct mu_err *err)
{
    return queue_job_state_get(conn(ctx), id, out, found, err);
}

static int redis_status_write(
    void *ctx, const char *hash, const struct queue_kv *kv, int n, struct mu_err *err)
{
    return noted(ctx, queue_status_write(conn(ctx), hash, kv, n, err), err);
}

static int redis_counter_incr(void *ctx, const char *name, struct mu_err *err)
{
    return noted(ctx, queue_counter_incr(conn(ctx), name, err), err);
}

static int redis_log_reply(void *ctx,
                           const char *req_id,
                           const char *head,
                           const void *data,
                           size_t len,
                           struct mu_err *err)
{
    return noted(ctx, queue_log_reply(conn(ctx), req_id, head, data, len, err), err);
}

static int redis_answer_push(
    void *ctx, const char *key, const char *value, size_t len, struct mu_err *err)
{
    return noted(ctx, queue_answer_push(conn(ctx), key, value, len, err), err);
}

static int redis_time_ms(void *ctx, uint64_t *now_ms, struct mu_err *err)
{
    return noted(ctx, queue_time_ms(conn(ctx), now_ms, err), err);
}

static const struct d_store_ops redis_ops = {
    redis_job_update,   redis_idem_claim,   redis_idem_get,  redis_job_state,
    redis_status_write, redis_counter_incr, redis_log_reply, redis_answer_push,
    redis_time_ms,      redis_batch_begin,  redis_batch_end,
};

void d_store_redis(struct d_store *s, struct queue *q)
{
    s->ops = &redis_ops;
    s->ctx = s;
    s->q = q;
    s->fenced = false;
    s->batching = false;
}

/* ---- the sender over the ROUTER ---- */

static int router_send(void *ctx, const char *node, const struct proto_msg *m, struct mu_err *err)
{
    return proto_send(ctx, node, m, err);
}

void d_sender_router(struct d_sender *s, void *router, uint64_t epoch)
{
    s->fn = router_send;
    s->ctx = router;
    s->epoch = epoch;
    s->seq = 0;
    s->halted = false;
    s->fenced = NULL;
}

void d_send(struct d_sender *s, const char *node, struct proto_msg *m)
{
    struct mu_err err;
    if (s->halted || (s->fenced && *s->fenced))
        return;
    m->epoch = s->epoch;
    m->seq = ++s->seq;
    m->sent_ms = mu_time_mono_ms(); /* the workers' lower bound of our clock (BIND expires_ms) */
    if (s->fn(s->ctx, node, m, &err) != 0)
        mu_log_limited(MU_LOG_WARN, "sched", "send", 5, "node=%s %s not sent: %s", node,
                       proto_type_name(m->type), err.msg);
}

/* ---- counters ---- */

static const char *const counter_names[D_COUNTER_COUNT] = {
    "jobs_submitted",     "jobs_rejected", "jobs_succeeded", "jobs_failed",
    "jobs_cancelled",     "gang_retries",  "gang_requeues",  "preemptions",
    "spot_interruptions", "nodes_lost",    "jobs_timeout",   "spot_returns",
};

/* Placement latency histogram bucket upper bounds, seconds. */
static const double bucket_le[D_PLACE_BUCKETS] = { 0.00001, 0.00005, 0.0001, 0.00025, 0.0005,
                                                   0.001,   0.0025,  0.005,  0.01,    0.05 };

static const char *const bucket_names[D_PLACE_BUCKETS + 1] = {
    "placement_bucket_0", "placement_bucket_1", "placement_bucket_2",   "placement_bucket_3",
    "placement_bucket_4", "placement_bucket_5", "placement_bucket_6",   "placement_bucket_7",
    "placement_bucket_8", "placement_bucket_9", "placement_bucket_inf",
};

const char *d_counter_name(enum d_counter c)
{
    return (int)c >= 0 && c < D_COUNTER_COUNT ? counter_names[c] : "none";
}

double d_bucket_le(int i)
{
    return i >= 0 && i < D_PLACE_BUCKETS ? bucket_le[i] : 0;
}

/* The bucket of value among n ascending upper bounds le (n: above them all, +Inf). */
static int bucket_of(const double *le, int n, double value)
{
    int b = 0;
    while (b < n && value > le[b])
        b++;
    return b;
}

/* Scheduling pass duration histogram bucket upper bounds, seconds (issue #15 aims at 10 ms). */
static const double pass_le[D_PASS_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,  0.1,    0.25,  1 };

double d_pass_bucket_le(int i)
{
    return i >= 0 && i < D_PASS_BUCKETS ? pass_le[i] : 0;
}

int d_pass_bucket(double s)
{
    return bucket_of(pass_le, D_PASS_BUCKETS, s);
}

static void event_incr(struct queue_event *ev, const char *name)
{
    for (int i = 0; i < 4; i++) {
        if (!ev->incr[i]) {
            ev->incr[i] = name;
            return;
        }
    }
}

void d_counters_tally(struct d_metrics *mx, const struct d_tally *t, struct queue_event *ev)
{
    if (!t)
        return;
    if (t->counter >= 0 && t->counter < D_COUNTER_COUNT) {
        event_incr(ev, counter_names[t->counter]);
        mx->counters[t->counter] += 1;
    }
    if (t->lost_gpu_s > 0) {
        ev->incr_float_name = "lost_gpu_seconds";
        ev->incr_float = t->lost_gpu_s;
        mx->lost_gpu_seconds += t->lost_gpu_s;
    } else if (t->place_s > 0) {
        int b = bucket_of(bucket_le, D_PLACE_BUCKETS, t->place_s);
        event_incr(ev, bucket_names[b]);
        mx->place_buckets[b] += 1;
        ev->incr_float_name = "placement_seconds_sum";
        ev->incr_float = t->place_s;
        mx->place_sum_s += t->place_s;
    }
}

void d_counters_owe(struct d_metrics *mx, struct d_owed *o, const struct d_tally *t)
{
    if (!t)
        return;
    if (t->counter >= 0 && t->counter < D_COUNTER_COUNT) {
        mx->counters[t->counter] += 1;
        if (o->n < (int)MU_ARRAY_LEN(o->counter))
            o->counter[o->n++] = t->counter;
        else
            mu_log_limited(MU_LOG_WARN, "sched", "owed", 10,
                           "more counts owed by one job than one write carries: %s not stored",
                           counter_names[t->counter]);
    }
    if (t->lost_gpu_s > 0) {
        mx->lost_gpu_seconds += t->lost_gpu_s;
        o->lost_gpu_s += t->lost_gpu_s;
    }
}

void d_counters_settle(const struct d_owed *o, struct queue_event *ev)
{
    for (int i = 0; i < o->n; i++)
        event_incr(ev, counter_names[o->counter[i]]);
    if (o->lost_gpu_s > 0) {
        ev->incr_float_name = "lost_gpu_seconds";
        ev->incr_float = o->lost_gpu_s;
    }
}

int d_counters_incr(struct d_metrics *mx,
                    const struct d_store *store,
                    enum d_counter c,
                    struct mu_err *err)
{
    struct mu_err own;

    if ((int)c < 0 || c >= D_COUNTER_COUNT)
        return 0;
    mx->counters[c] += 1;
    if (!err)
        err = &own; /* the fence check (noted) and the log below need the message */
    if (store->ops->counter_incr(store->ctx, counter_names[c], err) != 0) {
        mu_log_limited(MU_LOG_WARN, "sched", "redis-counter", 5, "counter %s not stored: %s",
                       counter_names[c], err->msg);
        return -1;
    }
    return 0;
}

int d_counters_load(struct d_metrics *mx, struct queue *q, struct mu_err *err)
{
    char **names = NULL;
    double *values = NULL;
    int n = 0;

    if (queue_counters_read(q, &names, &values, &n, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < D_COUNTER_COUNT; c++) {
            if (strcmp(names[i], counter_names[c]) == 0)
                mx->counters[c] = values[i];
        }
        for (int b = 0; b <= D_PLACE_BUCKETS; b++) {
            if (strcmp(names[i], bucket_names[b]) == 0)
                mx->place_buckets[b] = values[i];
        }
        if (strcmp(names[i], "lost_gpu_seconds") == 0)
            mx->lost_gpu_seconds = values[i];
        if (strcmp(names[i], "placement_seconds_sum") == 0)
            mx->place_sum_s = values[i];
    }
    queue_counters_free(names, values, n);
    return 0;
}

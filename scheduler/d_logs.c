/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): task logs from any machine that reaches Redis (issue #18,
 * README "Logs from any machine").  musterctl puts a request on the logreq stream (queue/logs.c);
 * musterd checks it, relays it as a LOG_READ to the node it names and, when that node's LOG_DATA
 * comes back, writes the chunk to the request's answer key, which musterctl pops.  Logs stay on
 * the workers' disks: Redis holds at most one chunk (64 KiB) per request in flight, for seconds.
 *
 * Limits: at most D_LOG_WAITS requests in flight and D_LOG_RATE_PER_S relayed per second for
 * the whole cluster; beyond either the request is answered "busy" at once and musterctl asks
 * again a little later.  A node that is not connected is answered "gone" at once; one that does
 * not answer within D_LOG_ANSWER_MS is answered "timeout".  Only the node that was asked can
 * answer a request.  Every request gets exactly one answer, which also acknowledges and deletes
 * it (a request of a musterd that crashed is read again and answered by the next one).
 */

#include "scheduler/d_handlers.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define D_LOG_RATE_PER_S 200
#define D_LOG_ANSWER_MS  5000

/* Two modules' constants that must agree (they are equal: that is the point). */
_Static_assert(QUEUE_LOG_CHUNK_MAX == PROTO_LOG_CHUNK_MAX, /* NOLINT(misc-redundant-expression) */
               "one chunk size on both sides");

/* Writes the answer (head from doc, which is freed) and data; a Redis failure is logged. */
static void answer(struct musterd *d, const char *req, cJSON *doc, const void *data, size_t len)
{
    char *head = doc ? cJSON_PrintUnformatted(doc) : NULL;
    struct mu_err err;

    cJSON_Delete(doc);
    if (!head) {
        mu_log(MU_LOG_ERROR, "sched", "log request %s: out of memory for the answer", req);
        return;
    }
    if (d->store.ops->log_reply(d->store.ctx, req, head, data, len, &err) != 0) {
        mu_log_limited(MU_LOG_ERROR, "sched", "log-reply", 5, "log request %s: %s", req, err.msg);
        d->redis_down = true;
    }
    free(head);
}

/* An answer without data: code names the failure for musterctl, error says it to the user. */
static void answer_error(
    struct musterd *d, const char *req, const char *node, const char *code, const char *error)
{
    cJSON *doc = cJSON_CreateObject();

    if (doc
        && (!cJSON_AddFalseToObject(doc, "ok") || !cJSON_AddStringToObject(doc, "code", code)
            || !cJSON_AddStringToObject(doc, "node", node)
            || !cJSON_AddStringToObject(doc, "error", error))) {
        cJSON_Delete(doc);
        doc = NULL;
    }
    answer(d, req, doc, NULL, 0);
}

/* Why node is not there to ask, for the "gone" answer. */
static void node_gone(struct musterd *d, const char *req, const char *name)
{
    int idx = sched_cluster_node_find(d->cluster, name);
    char why[PROTO_NODE_MAX + 200];

    if (idx < 0)
        (void)mu_snprintf(why, sizeof(why),
                          "node '%s' has not registered with musterd since it started", name);
    else
        (void)mu_snprintf(
            why, sizeof(why),
            "node '%s' is not connected (last heard %llu s ago): its worker is gone, "
            "and its logs cannot be read until it is back",
            name, (unsigned long long)((mu_time_wall_ms() - d->nodes[idx].seen_wall_ms) / 1000u));
    answer_error(d, req, name, "gone", why);
}

/* A free slot in the wait table, rate permitting; NULL when too busy. */
static struct d_log_wait *wait_slot(struct musterd *d, uint64_t now)
{
    if (now - d->logs.window_ms >= 1000u) {
        d->logs.window_ms = now;
        d->logs.window_n = 0;
    }
    if (d->logs.nwait >= D_LOG_WAITS || d->logs.window_n >= D_LOG_RATE_PER_S)
        return NULL;
    d->logs.window_n++;
    return &d->logs.wait[d->logs.nwait++];
}

void d_logs_request(struct musterd *d, const struct queue_entry *e)
{
    const struct queue_log_req *r = &e->log;
    uint64_t now = mu_time_mono_ms();
    struct d_log_wait *w;
    struct proto_msg m;

    if (r->error[0]) {
        answer_error(d, e->id, r->node, "bad", r->error);
        return;
    }
    if (!d_node_get(d, r->node)) {
        node_gone(d, e->id, r->node);
        return;
    }
    w = wait_slot(d, now);
    if (!w) {
        answer_error(d, e->id, r->node, "busy", "musterd is relaying too many log requests");
        return;
    }
    mu_strlcpy(w->req, e->id, sizeof(w->req));
    mu_strlcpy(w->node, r->node, sizeof(w->node));
    w->deadline_ms = now + D_LOG_ANSWER_MS;
    proto_msg_init(&m, PROTO_LOG_READ);
    mu_strlcpy(m.task.job, r->job, sizeof(m.task.job));
    m.task.task = r->task;
    m.task.attempt = r->attempt;
    mu_strlcpy(m.req, e->id, sizeof(m.req));
    mu_strlcpy(m.stream, r->stream, sizeof(m.stream));
    m.offset = r->offset;
    m.max_bytes = r->max_bytes;
    d_send(&d->out, r->node, &m);
    proto_msg_release(&m);
}

/* The header of a LOG_DATA's answer, or NULL without memory. */
static cJSON *data_head(const struct d_node *node, const struct proto_msg *m)
{
    cJSON *doc = cJSON_CreateObject();
    bool ok = doc && cJSON_AddBoolToObject(doc, "ok", m->ok)
              && cJSON_AddStringToObject(doc, "node", node->name)
              && cJSON_AddStringToObject(doc, "path", m->path);

    if (ok && m->ok)
        ok = cJSON_AddNumberToObject(doc, "offset", (double)m->offset)
             && cJSON_AddNumberToObject(doc, "len", (double)m->data_len)
             && cJSON_AddNumberToObject(doc, "size", (double)m->size);
    else if (ok)
        ok = cJSON_AddStringToObject(doc, "code", m->absent ? "absent" : "io")
             && cJSON_AddStringToObject(doc, "error", m->error);
    if (!ok) {
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

void d_logs_data(struct musterd *d, const struct d_node *node, const struct proto_msg *m)
{
    for (int i = 0; i < d->logs.nwait; i++) {
        struct d_log_wait *w = &d->logs.wait[i];
        if (strcmp(w->req, m->req) != 0 || strcmp(w->node, node->name) != 0)
            continue;
        answer(d, w->req, data_head(node, m), m->ok ? m->data : NULL, m->ok ? m->data_len : 0);
        *w = d->logs.wait[--d->logs.nwait];
        return;
    }
    mu_log_limited(MU_LOG_INFO, "sched", "log-late", 10,
                   "node=%s LOG_DATA for request '%s', which does not wait for it (late): dropped",
                   node->name, m->req);
}

void d_logs_check(struct musterd *d, uint64_t now_ms)
{
    for (int i = 0; i < d->logs.nwait;) {
        struct d_log_wait *w = &d->logs.wait[i];
        char why[PROTO_NODE_MAX + 80];
        if (now_ms < w->deadline_ms) {
            i++;
            continue;
        }
        (void)mu_snprintf(why, sizeof(why), "node '%s' did not answer in %d s", w->node,
                          D_LOG_ANSWER_MS / 1000);
        answer_error(d, w->req, w->node, "timeout", why);
        *w = d->logs.wait[--d->logs.nwait];
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * musterctl logs ID: one task's stdout (or stderr) as its worker wrote it to
 * <state-dir>/logs/<job>.<attempt>.<task>.out|.err, read from any machine that reaches Redis
 * (README "Logs from any machine", issue #18).
 *
 * The log stays on the worker's disk.  musterctl asks musterd for it one chunk at a time
 * (queue/logs.c): each request names the node, the task, the stream and an offset, musterd
 * relays it to that node's worker (LOG_READ), and the answer comes back on a short-lived Redis
 * list holding one chunk of at most 64 KiB, which is written to stdout before the next one is
 * asked for.  So a log of any size is never held whole anywhere (but with -o json, which prints
 * one document and is capped).  -f asks again from the last offset until the job's attempt has
 * ended and the end of the file has been read.  The node comes from the job's placement; for an
 * earlier attempt, whose placement is gone, every registered node is asked.
 */
#include "cli/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define CTL_LOGS_POLL_MS  250         /* -f: between reads that found nothing new */
#define CTL_LOGS_BUSY_MS  100         /* musterd too busy: ask again after this */
#define CTL_LOGS_ANSWER_S 10          /* no answer from musterd in this long: give up */
#define CTL_LOGS_JSON_MAX (64u << 20) /* -o json holds the whole log in memory */
#define CTL_LOGS_NODE_MAX 64          /* node names, NUL included (as the protocol's) */
#define CTL_LOGS_PATH_MAX 1024        /* the worker's path of the log, NUL included */

/* What `logs` is asked for, and where the log is. */
struct logs_req {
    const char *id;
    const char *ext; /* "out" or "err" */
    bool follow;
    int64_t task;
    int64_t attempt; /* 0 = the job's current one, until logs_locate sets it */
    char node[CTL_LOGS_NODE_MAX];
    char path[CTL_LOGS_PATH_MAX]; /* as the worker reported it */
    uint64_t offset;              /* next byte to ask for */
    struct mu_buf json;           /* -o json: the text so far */
};

/* One answer of musterd: ok, or code ("gone", "absent", "busy", "timeout", "bad", "io"). */
struct logs_answer {
    bool ok;
    char code[16];
    char error[512];
    uint64_t size; /* the file's size when read */
    const char *data;
    size_t len;
};

struct node_of {
    int64_t task;
    const char *node; /* borrowed from the placement once found */
};

/* Task c->task's node into c->node (1 stops the walk there). */
static int node_of_task(void *ctx, int task, const char *node, uint64_t gpus)
{
    struct node_of *c = ctx;

    (void)gpus;
    if (task != c->task)
        return 0;
    c->node = node;
    return 1;
}

/* The node of task `task` in the job's placement, into node; false when not placed. */
static bool placement_node(const cJSON *job, int64_t task, char *node, size_t size)
{
    struct node_of c = { task, NULL };

    if (queue_placement_each(cJSON_GetObjectItemCaseSensitive(job, QUEUE_F_PLACEMENT), node_of_task,
                             &c)
        != 1)
        return false;
    mu_strlcpy(node, c.node, size);
    return node[0] != '\0';
}

/* Splits value (header line, '\n', data) into a; -1 when it is not an answer. */
static int answer_parse(const char *value, size_t len, struct logs_answer *a, struct logs_req *r)
{
    const char *nl = memchr(value, '\n', len);
    cJSON *head = nl ? cJSON_ParseWithLength(value, (size_t)(nl - value)) : NULL;
    char b[CTL_LOGS_PATH_MAX];

    memset(a, 0, sizeof(*a));
    if (!cJSON_IsObject(head)) {
        cJSON_Delete(head);
        return -1;
    }
    a->ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(head, "ok"));
    mu_strlcpy(a->code, ctl_json_text(head, "code", b, sizeof(b)), sizeof(a->code));
    mu_strlcpy(a->error, ctl_json_text(head, "error", b, sizeof(b)), sizeof(a->error));
    if (ctl_json_text(head, "path", b, sizeof(b))[0])
        mu_strlcpy(r->path, ctl_json_text(head, "path", b, sizeof(b)), sizeof(r->path));
    a->size = (uint64_t)ctl_json_int(head, "size", 0);
    a->data = nl + 1;
    a->len = len - (size_t)(nl + 1 - value);
    cJSON_Delete(head);
    return 0;
}

/*
 * Asks node for the chunk of r at r->offset and waits for the answer (*value: free() it; a
 * points into it).  Asks again while musterd is busy.  -1 when there is no answer (printed;
 * *value is then NULL).
 */
static int logs_ask(struct ctl *ctl,
                    struct queue *q,
                    struct logs_req *r,
                    const char *node,
                    char **value,
                    struct logs_answer *a)
{
    struct queue_log_req lr = { 0 };
    struct mu_err err = { 0 };
    char id[QUEUE_JOB_ID_MAX];
    size_t len = 0;

    mu_strlcpy(lr.node, node, sizeof(lr.node));
    mu_strlcpy(lr.job, r->id, sizeof(lr.job));
    lr.task = (int)r->task;
    lr.attempt = (int)r->attempt;
    mu_strlcpy(lr.stream, r->ext, sizeof(lr.stream));
    lr.offset = r->offset;
    lr.max_bytes = (int)QUEUE_LOG_CHUNK_MAX;
    for (int busy = 0; busy < 100; busy++) {
        if (queue_log_request(q, &lr, id, sizeof(id), &err) != 0) {
            (void)ctl_fail(ctl, "log request: %s", err.msg);
            return -1;
        }
        for (int s = 0; s < CTL_LOGS_ANSWER_S && !*value; s++)
            if (queue_log_wait(q, id, 1000, value, &len, &err) != 0) {
                (void)ctl_fail(ctl, "log answer: %s", err.msg);
                return -1;
            }
        if (!*value) {
            (void)ctl_fail(ctl,
                           "musterd did not answer log request %s in %d s; is musterd running?", id,
                           CTL_LOGS_ANSWER_S);
            return -1;
        }
        if (answer_parse(*value, len, a, r) != 0) {
            (void)ctl_fail(ctl, "log request %s: musterd's answer is not one", id);
            free(*value);
            *value = NULL;
            return -1;
        }
        if (a->ok || strcmp(a->code, "busy") != 0)
            return 0;
        free(*value);
        *value = NULL;
        ctl_sleep_ms(CTL_LOGS_BUSY_MS);
    }
    (void)ctl_fail(ctl, "musterd stayed too busy to relay log requests; try again later");
    return -1;
}

/* Writes a chunk to stdout, or keeps it for -o json; 0 or -1 (printed). */
static int logs_put(struct ctl *ctl, struct logs_req *r, const struct logs_answer *a)
{
    struct mu_err err;

    r->offset += a->len;
    if (ctl->output != CTL_OUT_JSON) {
        if (a->len > 0 && (fwrite(a->data, 1, a->len, stdout) != a->len || fflush(stdout) != 0)) {
            (void)ctl_fail(ctl, "writing the log: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    if (r->json.len + a->len > CTL_LOGS_JSON_MAX) {
        (void)ctl_fail(ctl, "the log is larger than -o json's %u MiB; read it without -o json",
                       CTL_LOGS_JSON_MAX >> 20);
        return -1;
    }
    if (mu_buf_append(&r->json, a->data, a->len, &err) != 0) {
        (void)ctl_fail(ctl, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* The error of an answer that is not ok, in words a user can act on. */
static void logs_refused(struct ctl *ctl, const struct logs_req *r, const struct logs_answer *a)
{
    if (strcmp(a->code, "absent") == 0)
        ctl_fail(ctl, "job %s task %lld attempt %lld has no std%s log on node %s (%s)", r->id,
                 (long long)r->task, (long long)r->attempt, r->ext, r->node, a->error);
    else
        ctl_fail(ctl, "job %s task %lld on node %s: %s", r->id, (long long)r->task, r->node,
                 a->error);
}

/* Whether -f is over: the job is final, or its current attempt is no longer ours. */
static int follow_over(struct ctl *ctl, struct queue *q, const struct logs_req *r, bool *over)
{
    struct mu_err err = { 0 };
    cJSON *job = NULL;
    char b[32];

    if (queue_job_read(q, r->id, &job, &err) != 0) {
        (void)ctl_fail(ctl, "job '%s': %s", r->id, err.msg);
        return -1;
    }
    *over = !job || ctl_state_is_final(ctl_json_text(job, QUEUE_F_STATE, b, sizeof(b)))
            || ctl_json_int(job, QUEUE_F_ATTEMPT, 1) != r->attempt;
    cJSON_Delete(job);
    return 0;
}

/*
 * Reads r's log from r->node chunk by chunk to its end; with -f goes on until follow_over and
 * one last read found nothing new.  An absent file is waited for under -f.
 */
static int logs_page(struct ctl *ctl, struct queue *q, struct logs_req *r)
{
    bool over = false;

    for (;;) {
        struct logs_answer a;
        char *value = NULL;
        bool more;

        if (logs_ask(ctl, q, r, r->node, &value, &a) != 0)
            return CTL_EXIT_FAIL;
        if (!a.ok && !(r->follow && !over && strcmp(a.code, "absent") == 0)) {
            logs_refused(ctl, r, &a);
            free(value);
            return CTL_EXIT_FAIL;
        }
        if (a.ok && logs_put(ctl, r, &a) != 0) {
            free(value);
            return CTL_EXIT_FAIL;
        }
        more = a.ok && a.len > 0 && r->offset < a.size;
        free(value);
        if (more)
            continue;
        if (!r->follow || over)
            return CTL_EXIT_OK;
        /* Decided before the next read, so that the last lines written are still read. */
        if (follow_over(ctl, q, r, &over) != 0)
            return CTL_EXIT_FAIL;
        if (!over)
            ctl_sleep_ms(CTL_LOGS_POLL_MS);
    }
}

/* An attempt without a recorded placement: asks every registered node for its first byte. */
static int logs_search(struct ctl *ctl, struct queue *q, struct logs_req *r, const char *state)
{
    struct mu_err err = { 0 };
    cJSON *nodes = NULL;
    const cJSON *n;
    int rc = -1;

    if (queue_nodes_read(q, &nodes, &err) != 0) {
        (void)ctl_fail(ctl,
                       "job %s (%s) has no placement for attempt %lld, and the nodes to search "
                       "cannot be read: %s",
                       r->id, state, (long long)r->attempt, err.msg);
        return -1;
    }
    cJSON_ArrayForEach(n, nodes)
    {
        struct logs_answer a;
        char *value = NULL;
        char name[CTL_LOGS_NODE_MAX];
        char st[32];
        const char *node_state = ctl_json_text(n, "state", st, sizeof(st));

        if (strcmp(node_state, "lost") == 0 || strcmp(node_state, "down") == 0) /* gone */
            continue;
        mu_strlcpy(name, ctl_json_text(n, "name", st, sizeof(st)), sizeof(name));
        if (logs_ask(ctl, q, r, name, &value, &a) != 0) {
            cJSON_Delete(nodes);
            return -1;
        }
        free(value);
        if (a.ok) {
            mu_strlcpy(r->node, name, sizeof(r->node));
            rc = 0;
            break;
        }
    }
    if (rc != 0)
        ctl_fail(ctl, "job %s (%s): no connected node has the std%s log of task %lld attempt %lld",
                 r->id, state, r->ext, (long long)r->task, (long long)r->attempt);
    cJSON_Delete(nodes);
    return rc;
}

/* Finds the node of r's log; 0 or -1 (printed). */
static int logs_locate(struct ctl *ctl, struct queue *q, const cJSON *job, struct logs_req *r)
{
    int64_t current = ctl_json_int(job, QUEUE_F_ATTEMPT, 1);
    char b[32];
    const char *state = ctl_json_text(job, QUEUE_F_STATE, b, sizeof(b)); /* borrowed from job */

    if (r->task >= ctl_json_int(job, QUEUE_F_TASKS, 1)) {
        ctl_fail(ctl, "job '%s' has %lld task(s); --task %lld does not exist", r->id,
                 (long long)ctl_json_int(job, QUEUE_F_TASKS, 1), (long long)r->task);
        return -1;
    }
    if (strcmp(state, "REJECTED") == 0) {
        ctl_fail(ctl, "job %s was REJECTED: it never ran, so it has no log", r->id);
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(job, QUEUE_F_ARRAY_NEXT)) {
        ctl_fail(ctl,
                 "job %s is an array: its elements ran, each with its own log (e.g. "
                 "'musterctl logs %s_0')",
                 r->id, r->id);
        return -1;
    }
    if (r->attempt == 0)
        r->attempt = current;
    if (r->attempt > current) {
        ctl_fail(ctl, "job '%s' is at attempt %lld; --attempt %lld has not happened", r->id,
                 (long long)current, (long long)r->attempt);
        return -1;
    }
    if (r->attempt == current && placement_node(job, r->task, r->node, sizeof(r->node)))
        return 0;
    if (strcmp(state, "PENDING") == 0 && r->attempt == current) {
        ctl_fail(ctl, "job %s is PENDING: attempt %lld has not started, so it has no log yet%s",
                 r->id, (long long)r->attempt,
                 r->attempt > 1 ? "; hint: --attempt N shows an earlier attempt's" : "");
        return -1;
    }
    return logs_search(ctl, q, r, state);
}

/* -o json: {"job", "task", "attempt", "node", "path", "stream", "text"}. */
static int logs_json(struct ctl *ctl, const struct logs_req *r)
{
    cJSON *doc = cJSON_CreateObject();
    int rc;

    if (!doc || !cJSON_AddStringToObject(doc, "job", r->id)
        || !cJSON_AddNumberToObject(doc, "task", (double)r->task)
        || !cJSON_AddNumberToObject(doc, "attempt", (double)r->attempt)
        || !cJSON_AddStringToObject(doc, "node", r->node)
        || !cJSON_AddStringToObject(doc, "path", r->path)
        || !cJSON_AddStringToObject(doc, "stream", strcmp(r->ext, "err") == 0 ? "stderr" : "stdout")
        || !cJSON_AddStringToObject(doc, "text", r->json.data ? r->json.data : ""))
        rc = ctl_fail(ctl, "out of memory");
    else
        rc = ctl_json_print(ctl, doc);
    cJSON_Delete(doc);
    return rc;
}

int ctl_cmd_logs(struct ctl *ctl, const struct ctl_args *args)
{
    struct logs_req r = { 0 };
    struct mu_err err = { 0 };
    struct queue *q;
    cJSON *job = NULL;
    int rc = CTL_EXIT_FAIL;

    r.id = args->argv[0];
    r.ext = ctl_args_get(ctl, args, "stderr") ? "err" : "out";
    r.follow = ctl_args_get(ctl, args, "follow") != NULL;
    if (ctl->output == CTL_OUT_JSON && r.follow)
        return ctl_usage(ctl, "-f prints the log as it grows; it cannot be combined with -o json");
    if (ctl_args_int(ctl, args, "task", 0, QUEUE_MAX_TASKS - 1, &r.task) != 0
        || ctl_args_int(ctl, args, "attempt", 1, 1000000, &r.attempt) != 0)
        return CTL_EXIT_USAGE;
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_job_read(q, r.id, &job, &err) != 0)
        return ctl_fail(ctl, "job '%s': %s", r.id, err.msg);
    if (!job)
        return ctl_fail(ctl,
                        "job '%s' not found (or not taken in by musterd yet, or finished and "
                        "archived: see 'musterctl history --id %s')",
                        r.id, r.id);
    mu_buf_init(&r.json, 0);
    if (logs_locate(ctl, q, job, &r) == 0) {
        rc = logs_page(ctl, q, &r);
        if (rc == CTL_EXIT_OK && ctl->output == CTL_OUT_JSON)
            rc = logs_json(ctl, &r);
    }
    mu_buf_release(&r.json);
    cJSON_Delete(job);
    return rc;
}

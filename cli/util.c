/* SPDX-License-Identifier: MIT */
/*
 * Shared pieces of musterctl's commands: messages in the house form ("musterctl: CMD: …",
 * docs/style.md §1.9), the lazily opened Redis connection with an actionable error, JSON output,
 * and the small formatters (ages, colours) that tables share.  Anything stored in Redis is treated
 * as untrusted when printed: control characters are replaced so that a job name cannot drive
 * the operator's terminal.
 */
#include "cli/internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mu_banned.h"

int ctl_fail(const struct ctl *ctl, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ctl->cmd)
        (void)fprintf(stderr, "musterctl: %s: %s\n", ctl->cmd->name, msg);
    else
        (void)fprintf(stderr, "musterctl: %s\n", msg);
    return CTL_EXIT_FAIL;
}

int ctl_usage(const struct ctl *ctl, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ctl->cmd)
        (void)fprintf(stderr,
                      "musterctl: usage: %s: %s\nusage: musterctl %s%s%s\n"
                      "run 'musterctl %s --help' for more\n",
                      ctl->cmd->name, msg, ctl->cmd->name, ctl->cmd->usage[0] ? " " : "",
                      ctl->cmd->usage, ctl->cmd->name);
    else
        (void)fprintf(stderr,
                      "musterctl: usage: %s\n"
                      "usage: musterctl [--redis URL] [-o table|json] COMMAND [ARGS]\n"
                      "run 'musterctl --help' for more\n",
                      msg);
    return CTL_EXIT_USAGE;
}

struct queue *ctl_queue(struct ctl *ctl)
{
    struct mu_err err = { 0 };
    char where[300];
    const char *reason;
    size_t n;

    if (ctl->q)
        return ctl->q;
    ctl->q = queue_new(ctl->url, ctl->prefix, &err);
    if (ctl->q)
        return ctl->q;
    if (err.code != MU_E_REDIS) {
        ctl_fail(ctl, "%s", err.msg);
        return NULL;
    }
    /* conn.c says "redis HOST:PORT: reason"; keep the reason, say where in our own words. */
    (void)snprintf(where, sizeof(where), "%s:%d", ctl->where.host, ctl->where.port);
    reason = err.msg;
    n = strlen("redis ") + strlen(where) + 2;
    if (strncmp(reason, "redis ", 6) == 0 && strncmp(reason + 6, where, strlen(where)) == 0
        && strlen(reason) >= n)
        reason += n;
    (void)fprintf(stderr, "musterctl: cannot reach redis at %s: %s; hint: %s\n", where, reason,
                  strstr(reason, "AUTH")
                      ? "check the user and password in the URL"
                      : "is redis-server running? set --redis or MUSTER_REDIS_URL");
    return NULL;
}

int ctl_json_print(const struct ctl *ctl, const cJSON *item)
{
    char *text = item ? cJSON_Print(item) : NULL;

    if (!text)
        return ctl_fail(ctl, "out of memory formatting JSON");
    (void)fputs(text, stdout);
    (void)fputc('\n', stdout);
    cJSON_free(text);
    return CTL_EXIT_OK;
}

int ctl_answer_print(const struct ctl *ctl, const char *id, int instances, const char *result)
{
    bool ok = strncmp(result, "ok", 2) == 0; /* musterd answers "ok: …" or "refused: …" */
    cJSON *doc;
    int rc;

    if (ctl->output != CTL_OUT_JSON) {
        if (!ok)
            return ctl_fail(ctl, "%s", result);
        (void)printf("%s\n", result);
        return CTL_EXIT_OK;
    }
    doc = cJSON_CreateObject();
    if (!doc || !cJSON_AddStringToObject(doc, "id", id) || !cJSON_AddBoolToObject(doc, "ok", ok)
        || (instances >= 0 && !cJSON_AddNumberToObject(doc, "instances", instances))
        || !cJSON_AddStringToObject(doc, "result", result)) {
        cJSON_Delete(doc);
        return ctl_fail(ctl, "out of memory");
    }
    rc = ctl_json_print(ctl, doc);
    cJSON_Delete(doc);
    return rc != CTL_EXIT_OK ? rc : ok ? CTL_EXIT_OK : CTL_EXIT_FAIL;
}

cJSON *ctl_json_control(const char *cmd, const char *arg)
{
    cJSON *o = cJSON_CreateObject();

    if (!o || !cJSON_AddStringToObject(o, "cmd", cmd) || !cJSON_AddStringToObject(o, "arg", arg)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

const char *ctl_json_text(const cJSON *obj, const char *key, char *buf, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (cJSON_IsString(v))
        return v->valuestring;
    if (cJSON_IsNumber(v)) {
        (void)snprintf(buf, size, "%.0f", v->valuedouble);
        return buf;
    }
    return "";
}

int64_t ctl_json_int(const cJSON *obj, const char *key, int64_t def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    int64_t n;

    if (cJSON_IsNumber(v) && v->valuedouble >= -9.0e15 && v->valuedouble <= 9.0e15)
        return (int64_t)v->valuedouble;
    if (cJSON_IsString(v) && mu_parse_i64(v->valuestring, INT64_MIN, INT64_MAX, &n, NULL) == 0)
        return n;
    return def;
}

void ctl_format_age(uint64_t now_ms, uint64_t then_ms, char *buf, size_t size)
{
    uint64_t s = now_ms > then_ms ? (now_ms - then_ms) / 1000u : 0;

    if (s < 60)
        (void)snprintf(buf, size, "%us", (unsigned)s);
    else if (s < 3600)
        (void)snprintf(buf, size, "%um", (unsigned)(s / 60));
    else if (s < 86400)
        (void)snprintf(buf, size, "%uh", (unsigned)(s / 3600));
    else
        (void)snprintf(buf, size, "%llud", (unsigned long long)(s / 86400));
}

void ctl_print_clean(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        (void)fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, out);
}

int ctl_array_element_unmade(struct ctl *ctl, const char *id, bool *found)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    char base[QUEUE_JOB_ID_MAX];
    char b[2][32];
    int64_t index;
    cJSON *parent = NULL;
    struct queue_array *a = NULL;

    *found = false;
    if (!q)
        return -1;
    if (!queue_job_id_split(id, base, sizeof(base), &index))
        return 0;
    if (queue_job_read(q, base, &parent, &err) != 0) {
        ctl_fail(ctl, "job '%s': %s", base, err.msg);
        return -1;
    }
    a = parent ? malloc(sizeof(*a)) : NULL;
    if (a && !ctl_state_is_final(ctl_json_text(parent, QUEUE_F_STATE, b[0], sizeof(b[0])))
        && queue_array_parse(ctl_json_text(parent, QUEUE_F_ARRAY, b[1], sizeof(b[1])), a, &err) == 0
        && queue_array_position(a, index) >= ctl_json_int(parent, QUEUE_F_ARRAY_NEXT, 0))
        *found = queue_array_position(a, index) >= 0;
    free(a);
    cJSON_Delete(parent);
    return 0;
}

int ctl_job_lookup(struct ctl *ctl, const char *id, bool *found, char *state_out, size_t size)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    cJSON *job = NULL;
    char *spec = NULL;
    char num[32];

    *found = false;
    if (!q)
        return -1;
    if (queue_job_read(q, id, &job, &err) != 0) {
        ctl_fail(ctl, "job '%s': %s", id, err.msg);
        return -1;
    }
    if (job) {
        *found = true;
        if (state_out)
            mu_strlcpy(state_out, ctl_json_text(job, QUEUE_F_STATE, num, sizeof(num)), size);
        cJSON_Delete(job);
        return 0;
    }
    if (ctl_array_element_unmade(ctl, id, found) != 0)
        return -1;
    if (*found) {
        if (state_out)
            mu_strlcpy(state_out, "PENDING", size);
        return 0;
    }
    if (queue_submission_read(q, id, &spec, &err) != 0) {
        ctl_fail(ctl, "job '%s': %s", id, err.msg);
        return -1;
    }
    if (spec) {
        *found = true;
        if (state_out)
            mu_strlcpy(state_out, "SUBMITTED", size);
        free(spec);
    }
    return 0;
}

int ctl_no_leader(const struct ctl *ctl, const char *what)
{
    return ctl_fail(ctl,
                    "no musterd leads right now (%s" QUEUE_K_LEADER
                    " is free): %s; hint: start musterd, or see "
                    "musterctl status",
                    ctl->prefix, what);
}

int ctl_post(struct ctl *ctl,
             const struct queue_control_req *c,
             enum queue_post *result,
             char *id,
             size_t id_size)
{
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    struct queue_control_req asked = *c;
    bool own = false;

    if (!q)
        return -1;
    /* On one's own stream musterd judges who asks (access/access.h) and says so: wait for it
     * (within the command's own deadline when it has one). */
    if (asked.timeout_ms == 0)
        asked.own_timeout_ms = CTL_VERDICT_TIMEOUT_S * 1000;
    if (queue_control_post(q, &asked, result, &own, id, id_size, &err) != 0
        || (own && *result == QUEUE_POST_SENT
            && queue_control_verdict(
                   q, id, asked.timeout_ms ? asked.timeout_ms : asked.own_timeout_ms, &err)
                   != 0)) {
        (void)ctl_fail(ctl, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* Says what a node command did: sent to the leader, or only recorded (no musterd leads). */
static int node_said(struct ctl *ctl, const char *cmd, const char *node, enum queue_post posted)
{
    bool sent = posted == QUEUE_POST_SENT;
    cJSON *doc = NULL;
    int rc;

    if (ctl->output == CTL_OUT_JSON) {
        doc = ctl_json_control(cmd, node);
        if (!doc || !cJSON_AddBoolToObject(doc, "sent", sent)) {
            cJSON_Delete(doc);
            return ctl_fail(ctl, "out of memory");
        }
        rc = ctl_json_print(ctl, doc);
        cJSON_Delete(doc);
        return rc;
    }
    if (sent) {
        printf("%s requested for node ", cmd);
        ctl_print_clean(stdout, node);
        printf("\n");
    } else {
        printf("%s of node ", cmd);
        ctl_print_clean(stdout, node);
        printf(" recorded; no musterd leads right now (%s" QUEUE_K_LEADER
               " is free): applied when one leads "
               "and the node registers\n",
               ctl->prefix);
    }
    return CTL_EXIT_OK;
}

int ctl_node_command(
    struct ctl *ctl, const char *cmd, const char *node, int grace_s, enum queue_post *posted)
{
    struct queue_control_req c = { cmd, node, grace_s, 0, true, 0 };
    enum queue_post result;
    char id[QUEUE_JOB_ID_MAX];

    if (ctl_post(ctl, &c, &result, id, sizeof(id)) != 0)
        return CTL_EXIT_FAIL;
    if (posted)
        *posted = result;
    if (result == QUEUE_POST_NO_NODE)
        return ctl_fail(ctl,
                        "node '%s' not found: no worker of that name has registered; hint: "
                        "musterctl nodes lists the nodes",
                        node);
    return node_said(ctl, cmd, node, result);
}

int ctl_control_one(struct ctl *ctl, const char *cmd, const char *what, const char *arg)
{
    struct queue_control_req c = { cmd, arg, -1, 0, false, 0 };
    enum queue_post posted;
    cJSON *doc = NULL;
    bool found = false;
    char state[32] = "";
    char id[QUEUE_JOB_ID_MAX];
    int rc = CTL_EXIT_FAIL;

    if (strcmp(what, "node") == 0)
        return ctl_node_command(ctl, cmd, arg, -1, NULL);
    if (ctl_job_lookup(ctl, arg, &found, state, sizeof(state)) != 0)
        return CTL_EXIT_FAIL;
    if (!found)
        return ctl_fail(ctl, "%s '%s' not found", what, arg);
    /* musterd ignores a job command for a finished job: saying "requested" would be a lie. */
    if (ctl_state_is_final(state))
        return ctl_fail(ctl, "%s '%s' is %s, not active", what, arg, state);
    if (ctl_post(ctl, &c, &posted, id, sizeof(id)) != 0)
        return CTL_EXIT_FAIL;
    if (posted != QUEUE_POST_SENT)
        return ctl_no_leader(ctl, "nothing was sent; try again once one leads");
    if (ctl->output == CTL_OUT_JSON) {
        doc = ctl_json_control(cmd, arg);
        rc = ctl_json_print(ctl, doc);
        cJSON_Delete(doc);
        return rc;
    }
    printf("%s requested for %s ", cmd, what);
    ctl_print_clean(stdout, arg);
    putchar('\n');
    return CTL_EXIT_OK;
}

bool ctl_state_is_final(const char *state)
{
    enum queue_state s;

    /* The queue module's list, so that a final state added there (TIMEOUT) ends `submit
     * --wait`, `logs -f` and the hold/release check here too. */
    return queue_state_parse(state, &s) == 0 && queue_state_is_final(s);
}

void ctl_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    (void)nanosleep(&ts, NULL);
}

int ctl_status_show(struct ctl *ctl, const char *hash, ctl_status_table_fn *build)
{
    struct mu_err err = { 0 };
    struct ctl_table *t = NULL;
    struct queue *q = ctl_queue(ctl);
    cJSON *items = NULL;
    int rc = CTL_EXIT_FAIL;

    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_status_read(q, hash, &items, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, items);
        goto out;
    }
    if (cJSON_GetArraySize(items) == 0)
        (void)fprintf(stderr, "musterctl: %s: no %.*s status yet (is musterd running?)\n", hash,
                      (int)strlen(hash) - 1, hash);
    t = build(items, mu_time_wall_ms());
    if (!t) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    ctl_table_print(t, ctl, stdout);
    rc = CTL_EXIT_OK;
out:
    ctl_table_free(t);
    cJSON_Delete(items);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * musterctl why ID: why a pending job waits, computed by musterd now with the scheduler's own
 * core (scheduler/d_why.c, issue #18): its reason, the placement per capacity type of the job,
 * the pools' limits (capacity type, GPU type, cool-down, cap) and a preemption preview (the
 * victims the planner would take now and the work each would lose, or why there is no plan),
 * a dry run that changes nothing.  The question goes on the control stream (cmd why) like every
 * operator command, and the answer comes back on <prefix>why:<entry id> (queue/answer.c).
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mu_banned.h"

#define CTL_WHY_ANSWER_S 10 /* no answer from musterd in this long: give up */

/* Seconds as "9m58s" / "2h03m" / "45s". */
static void fmt_s(double s, char *buf, size_t size)
{
    long long n = s > 0 ? (long long)(s + 0.5) : 0;

    if (n >= 3600)
        (void)snprintf(buf, size, "%lldh%02lldm", n / 3600, n / 60 % 60);
    else if (n >= 60)
        (void)snprintf(buf, size, "%lldm%02llds", n / 60, n % 60);
    else
        (void)snprintf(buf, size, "%llds", n);
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static bool flag(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static void print_pools(const cJSON *doc)
{
    const cJSON *p;
    char b[64];

    printf("pools:\n");
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "pools"))
    {
        char cd[32];
        printf("  %-16s %-9s ", ctl_json_text(p, "pool", b, sizeof(b)),
               ctl_json_text(p, "capacity", b, sizeof(b)));
        if (!flag(p, "capacity_allowed"))
            printf("not allowed by the job's capacity\n");
        else if (!flag(p, "gpu_type_ok"))
            printf("wrong gpu_type\n");
        else if (num(p, "cooldown_s") > 0) {
            fmt_s(num(p, "cooldown_s"), cd, sizeof(cd));
            printf("cooling down for %s more (spot interruption)\n", cd);
        } else if (num(p, "max_gpus") > 0)
            printf("%.0f of max_gpus %.0f in use\n", num(p, "gpus_used"), num(p, "max_gpus"));
        else
            printf("usable\n");
    }
}

static void print_preview(const cJSON *doc)
{
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(doc, "preemption");
    const cJSON *v;
    char b[320];
    char t[32];

    printf("preemption preview (a dry run: nothing was stopped):\n");
    if (!flag(pre, "plan")) {
        printf("  no plan: %s\n", ctl_json_text(pre, "reason", b, sizeof(b)));
        if (num(pre, "est_start_in_s") > 0) {
            fmt_s(num(pre, "est_start_in_s"), t, sizeof(t));
            printf("  expected start without preemption: in %s\n", t);
        }
        if (num(pre, "victims_of_age_in_s") > 0) {
            fmt_s(num(pre, "victims_of_age_in_s"), t, sizeof(t));
            printf("  the victims that would do reach min_runtime_s in %s\n", t);
        }
        return;
    }
    printf("  would preempt (%.0f GPU-s of work lost):\n", num(pre, "lost_gpu_s"));
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(pre, "victims"))
    {
        printf("    %s (priority %.0f): loses %.0f GPU-s\n", ctl_json_text(v, "job", b, sizeof(b)),
               num(v, "priority"), num(v, "lost_gpu_s"));
    }
}

static void print_why(const cJSON *doc)
{
    const cJSON *c;
    char b[320];
    char s[32];

    printf("job %s is %s%s", ctl_json_text(doc, "job", b, sizeof(b)),
           ctl_json_text(doc, "state", s, sizeof(s)), flag(doc, "held") ? " (held)" : "");
    printf("%s%s\n", ctl_json_text(doc, "reason", b, sizeof(b))[0] ? ": " : "",
           ctl_json_text(doc, "reason", b, sizeof(b)));
    if (num(doc, "est_start_in_s") > 0) {
        char at[32];
        time_t t = (time_t)num(doc, "est_start_s");
        struct tm tm;
        fmt_s(num(doc, "est_start_in_s"), s, sizeof(s));
        if (gmtime_r(&t, &tm) && strftime(at, sizeof(at), "%Y-%m-%d %H:%M UTC", &tm) > 0)
            printf("expected start: %s, in %s (its reservation, from running gangs' time "
                   "limits)\n",
                   at, s);
    }
    if (!cJSON_GetObjectItemCaseSensitive(doc, "capacity"))
        return;
    {
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(doc, "queue");
        printf("queue %s: %s\n", ctl_json_text(q, "name", s, sizeof(s)),
               flag(q, "quota_ok") ? "its quota admits the gang"
                                   : ctl_json_text(q, "quota_reason", b, sizeof(b)));
    }
    printf("capacity types, in the job's order:\n");
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(doc, "capacity"))
    {
        printf("  %-9s %s\n", ctl_json_text(c, "type", s, sizeof(s)),
               ctl_json_text(c, "reason", b, sizeof(b)));
    }
    print_pools(doc);
    print_preview(doc);
}

/* Asks musterd and waits for its answer; *doc (cJSON_Delete) or a printed failure. */
static int why_ask(struct ctl *ctl, struct queue *q, const char *id, cJSON **doc)
{
    struct mu_err err = { 0 };
    char entry[QUEUE_JOB_ID_MAX];
    char key[QUEUE_JOB_ID_MAX + 8];
    char *value = NULL;
    size_t len = 0;

    if (queue_control_ask(q, "why", id, entry, sizeof(entry), &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    (void)mu_snprintf(key, sizeof(key), "why:%s", entry);
    for (int s = 0; s < CTL_WHY_ANSWER_S && !value; s++)
        if (queue_answer_wait(q, key, 1000, &value, &len, &err) != 0)
            return ctl_fail(ctl, "%s", err.msg);
    if (!value)
        return ctl_fail(ctl, "musterd did not answer in %d s; is musterd running?",
                        CTL_WHY_ANSWER_S);
    *doc = cJSON_ParseWithLength(value, len);
    free(value);
    if (!cJSON_IsObject(*doc)) {
        cJSON_Delete(*doc);
        *doc = NULL;
        return ctl_fail(ctl, "musterd's answer is not a JSON object");
    }
    return CTL_EXIT_OK;
}

int ctl_cmd_why(struct ctl *ctl, const struct ctl_args *args)
{
    const char *id = args->argv[0];
    char state[32] = "";
    cJSON *doc = NULL;
    bool found = false;
    struct queue *q;
    int rc;

    if (ctl_job_lookup(ctl, id, &found, state, sizeof(state)) != 0)
        return CTL_EXIT_FAIL;
    if (!found)
        return ctl_fail(ctl, "job '%s' not found", id);
    if (ctl_state_is_final(state))
        return ctl_fail(ctl, "job '%s' is %s, not waiting for anything", id, state);
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    rc = why_ask(ctl, q, id, &doc);
    if (rc != CTL_EXIT_OK)
        return rc;
    {
        char b[256];
        if (ctl_json_text(doc, "error", b, sizeof(b))[0])
            rc = ctl_fail(ctl, "job '%s': %s", id, ctl_json_text(doc, "error", b, sizeof(b)));
        else if (ctl->output == CTL_OUT_JSON)
            rc = ctl_json_print(ctl, doc);
        else
            print_why(doc);
    }
    cJSON_Delete(doc);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * musterctl why ID: why a pending job waits, computed by musterd now with the scheduler's own
 * core (scheduler/d_why.c, core/explain.c, issue #18): its reason, the estimated start and the
 * running gang whose end makes room, its dependencies and place in the fair-share order, the
 * placement per capacity type, per topology level the largest free domain against the largest
 * that exists, the pools' limits (capacity type, GPU type, cool-down, cap), why it does not
 * backfill, and a preemption preview (the victims the planner would take now and the work each
 * would lose, or why there is no plan), a dry run that changes nothing.  The question goes on the
 * control stream (cmd why) like every operator command, and the answer comes back on
 * <prefix>why:<entry id> (queue/answer.c).  musterctl show prints the same for a pending job.
 * The question is sent only while a musterd leads (queue_control_post: else an error at once)
 * and carries the wait as its deadline, so a musterd that reads it later drops it.
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

/* Wall-clock seconds as "2026-11-26 14:05 UTC" ("" when it cannot be formatted). */
static void fmt_at(double at_s, char *buf, size_t size)
{
    time_t t = (time_t)at_s;
    struct tm tm;

    if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%d %H:%M UTC", &tm) == 0)
        buf[0] = '\0';
}

/* The estimated start: the core's search (start, naming the gang that frees the room), else the
 * pass's (a job held back by another's reservation starts when it does). */
static void print_start(const cJSON *doc)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(doc, "start");
    char at[32];
    char in[32];
    char by[160];
    char b[32];
    const char *when = ctl_json_text(st, "freed_when", b, sizeof(b));

    if (num(st, "est_start_s") > 0) {
        fmt_at(num(st, "est_start_s"), at, sizeof(at));
        fmt_s(num(st, "in_s"), in, sizeof(in));
        printf("%s start: %s, in %s, ", flag(st, "reservation") ? "expected" : "earliest", at, in);
        if (strcmp(when, "cooldown_ends") == 0)
            printf("when a pool's cool-down ends");
        else if (strcmp(when, "reservation_starts") == 0)
            printf("when the reservation it would delay starts");
        else
            printf("when %s %s", ctl_json_text(st, "freed_by", by, sizeof(by)),
                   strcmp(when, "stops") == 0 ? "stops" : "reaches its time limit");
        printf("%s\n", flag(st, "reservation") ? " (its reservation)"
                                               : ", if no job ahead of it takes the room first");
    } else if (num(doc, "est_start_in_s") > 0) {
        fmt_at(num(doc, "est_start_s"), at, sizeof(at));
        fmt_s(num(doc, "est_start_in_s"), in, sizeof(in));
        printf("expected start: %s, in %s (when the reservation ahead of it starts)\n", at, in);
    } else if (flag(st, "fits_now")) {
        printf("the gang fits now%s\n", flag(doc, "held") ? "; it can start once released" : "");
    } else if (st) {
        printf("no estimated start: running gangs ending and cool-downs ending would not make "
               "room for it\n");
    } else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(doc, "explain_error"))) {
        printf("no estimated start: %s\n",
               cJSON_GetObjectItemCaseSensitive(doc, "explain_error")->valuestring);
    }
}

/* Its dependencies and its place in the pass's fair-share order. */
static void print_order(const cJSON *doc)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(doc, "order");
    char b[320];

    if (num(o, "dependencies_open") > 0)
        printf("dependencies: %s\n", ctl_json_text(o, "dependencies", b, sizeof(b)));
    if (!flag(o, "in_pass"))
        return;
    if (num(o, "ahead") == 0)
        printf("order: first in the scheduling pass\n");
    else
        printf("order: %.0f job(s) ahead of it in the pass, %.0f of them from other queues by "
               "fair share\n",
               num(o, "ahead"), num(o, "ahead_other_queues"));
}

/* Per topology level: the largest free domain against the largest that exists.  The levels come
 * coarsest first; the required one and those above it bind the gang (it must fit in one such
 * domain), the ones below it do not (the gang may span several). */
static void print_levels(const cJSON *doc)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "topology");
    const cJSON *l;
    char b[3][64];
    const char *req = ctl_json_text(t, "required", b[0], sizeof(b[0]));
    bool binding = req[0] != '\0';

    if (!t)
        return;
    printf("topology (largest domain that takes tasks: free now / on idle nodes):\n");
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(t, "levels"))
    {
        const char *name = ctl_json_text(l, "level", b[1], sizeof(b[1]));
        const char *state = ctl_json_text(l, "state", b[2], sizeof(b[2]));
        bool required = strcmp(name, req) == 0;
        printf("  %-10s %-10s %3.0f / %3.0f tasks: %s\n", name, required ? "(required)" : "",
               num(l, "free_tasks"), num(l, "max_tasks"),
               strcmp(state, "fits") == 0 ? "fits now"
               : strcmp(state, "busy") == 0
                   ? "busy, fits once running gangs end or a cool-down ends"
               : binding ? "never fits until nodes join"
                         : "none holds the whole gang; it may span several");
        if (required)
            binding = false;
    }
}

static void print_backfill(const cJSON *doc)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(doc, "backfill");
    char buf[2][160];
    char in[32];
    char run[32];
    const char *st = ctl_json_text(b, "state", buf[0], sizeof(buf[0]));
    const char *job = ctl_json_text(b, "reservation_job", buf[1], sizeof(buf[1]));

    fmt_s(num(b, "reservation_in_s"), in, sizeof(in));
    fmt_s(num(b, "run_s"), run, sizeof(run));
    if (strcmp(st, "fits") == 0)
        printf("backfill: fits beside the reservation of %s; the next pass starts it\n", job);
    else if (strcmp(st, "delays_reservation") == 0 && flag(b, "time_limit"))
        printf("backfill: fits now, but would delay the reservation of %s (starts in %s): its "
               "time limit %s runs past it\n",
               job, in, run);
    else if (strcmp(st, "delays_reservation") == 0)
        printf("backfill: fits now, but would delay the reservation of %s (starts in %s): no "
               "time limit (the default is %s), so it cannot backfill; a time_limit_s under %s "
               "would let it\n",
               job, in, run, in);
}

void ctl_why_print(const cJSON *doc)
{
    const cJSON *c;
    char b[320];
    char s[32];

    printf("job %s is %s%s", ctl_json_text(doc, "job", b, sizeof(b)),
           ctl_json_text(doc, "state", s, sizeof(s)), flag(doc, "held") ? " (held)" : "");
    printf("%s%s\n", ctl_json_text(doc, "reason", b, sizeof(b))[0] ? ": " : "",
           ctl_json_text(doc, "reason", b, sizeof(b)));
    print_start(doc);
    if (!cJSON_GetObjectItemCaseSensitive(doc, "capacity"))
        return;
    print_order(doc);
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
    print_levels(doc);
    print_pools(doc);
    print_backfill(doc);
    print_preview(doc);
}

int ctl_why_ask(struct queue *q, const char *id, int wait_s, cJSON **doc, struct mu_err *err)
{
    char entry[QUEUE_JOB_ID_MAX];
    char key[QUEUE_JOB_ID_MAX + 8];
    char *value = NULL;
    size_t len = 0;

    struct queue_control_req c = { "why", id, -1, wait_s * 1000, false, 0 };
    enum queue_post posted;

    *doc = NULL;
    if (queue_control_post(q, &c, &posted, NULL, entry, sizeof(entry), err) != 0)
        return -1;
    if (posted != QUEUE_POST_SENT)
        return mu_errf(err, MU_E_STATE,
                       "no musterd leads right now (%s" QUEUE_K_LEADER
                       " is free), so none can say why it "
                       "waits; hint: start musterd, or see musterctl status",
                       queue_prefix(q));
    (void)mu_snprintf(key, sizeof(key), QUEUE_K_WHY "%s", entry);
    /* One second past the question's deadline: musterd answers at once what it read in time. */
    for (int s = 0; s <= wait_s && !value; s++)
        if (queue_answer_wait(q, key, 1000, &value, &len, err) != 0)
            return -1;
    if (!value)
        return mu_errf(err, MU_E_STATE,
                       "musterd did not answer in %d s (is it stuck?); the question expired",
                       wait_s);
    *doc = cJSON_ParseWithLength(value, len);
    free(value);
    if (!cJSON_IsObject(*doc)) {
        cJSON_Delete(*doc);
        *doc = NULL;
        return mu_errf(err, MU_E_PARSE, "musterd's answer is not a JSON object");
    }
    return 0;
}

int ctl_cmd_why(struct ctl *ctl, const struct ctl_args *args)
{
    const char *id = args->argv[0];
    struct mu_err err = { 0 };
    char state[32] = "";
    cJSON *doc = NULL;
    bool found = false;
    struct queue *q;
    int rc = CTL_EXIT_OK;

    if (ctl_job_lookup(ctl, id, &found, state, sizeof(state)) != 0)
        return CTL_EXIT_FAIL;
    if (!found)
        return ctl_fail(ctl, "job '%s' not found", id);
    if (ctl_state_is_final(state))
        return ctl_fail(ctl, "job '%s' is %s, not waiting for anything", id, state);
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (ctl_why_ask(q, id, CTL_WHY_ANSWER_S, &doc, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    {
        char b[256];
        if (ctl_json_text(doc, "error", b, sizeof(b))[0])
            rc = ctl_fail(ctl, "job '%s': %s", id, ctl_json_text(doc, "error", b, sizeof(b)));
        else if (ctl->output == CTL_OUT_JSON)
            rc = ctl_json_print(ctl, doc);
        else
            ctl_why_print(doc);
    }
    cJSON_Delete(doc);
    return rc;
}

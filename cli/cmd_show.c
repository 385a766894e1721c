/* SPDX-License-Identifier: MIT */
/*
 * musterctl show ID: one job in full.  Every field of the job hash is printed, the well-known
 * ones first in a fixed order, then any others musterd added, so that nothing stored is hidden.
 * Times are ISO 8601 UTC with their age, the placement one line per task; attempts, failures,
 * the last checkpoint, the GPU time lost to preemption (lost_gpu_seconds) and whether the gang
 * runs on borrowed quota are shown when musterd has written them.  A job still waiting
 * in the submit stream (musterd has not taken it in) shows as SUBMITTED with its spec.  A
 * PENDING job also shows why it waits, as musterctl why does (cmd_why.c; "why" in -o json),
 * asked of musterd with a short wait: without an answer show still prints the job, and says so.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

#define CTL_SHOW_WHY_S 3 /* a pending job's why: musterd's answer is awaited this long */

static const char *const order[] = {
    QUEUE_F_ID,
    QUEUE_F_NAME,
    QUEUE_F_QUEUE,
    QUEUE_F_USER,
    QUEUE_F_STATE,
    QUEUE_F_REASON,
    QUEUE_F_PRIORITY,
    QUEUE_F_TASKS,
    QUEUE_F_GPUS_PER_TASK,
    QUEUE_F_ATTEMPT,
    QUEUE_F_FAILURES,
    QUEUE_F_MAX_RETRIES,
    QUEUE_F_ATTEMPTS,
    QUEUE_F_SUBMITTED_AT,
    QUEUE_F_STARTED_AT,
    QUEUE_F_FINISHED_AT,
    QUEUE_F_NODES,
    QUEUE_F_PLACEMENT,
    QUEUE_F_BORROWED,
    QUEUE_F_SPOT_RETURN,
    QUEUE_F_EXIT_CODE,
    QUEUE_F_ERROR,
    QUEUE_F_LAST_CHECKPOINT,
    QUEUE_F_LAST_CHECKPOINT_AT,
    QUEUE_F_LOST_GPU_SECONDS,
    QUEUE_F_SPEC,
};

static bool is_time_field(const char *name)
{
    size_t n = strlen(name);
    return n > 3 && strcmp(name + n - 3, "_at") == 0;
}

/* One task of the placement, one line. */
static int show_task(void *ctx, int task, const char *node, uint64_t gpus)
{
    bool first = true;

    (void)ctx;
    printf("  task %-4d node ", task);
    ctl_print_clean(stdout, node);
    printf("  gpus ");
    for (int g = 0; g < QUEUE_PLACEMENT_GPUS; g++) {
        if (gpus & (UINT64_C(1) << g)) {
            printf("%s%d", first ? "" : ",", g);
            first = false;
        }
    }
    putchar('\n');
    return 0;
}

static void show_placement(const cJSON *placement)
{
    putchar('\n');
    (void)queue_placement_each(placement, show_task, NULL); /* stops at an unreadable task */
}

/* A spec as one compact line when it parses (a pretty-printed file would spill over many), else
 * the stored text. */
static void show_spec(const char *spec)
{
    cJSON *parsed = cJSON_Parse(spec);
    char *text = parsed ? cJSON_PrintUnformatted(parsed) : NULL;

    ctl_print_clean(stdout, text ? text : spec);
    cJSON_free(text);
    cJSON_Delete(parsed);
}

static void show_field(const cJSON *item, uint64_t now_ms)
{
    char buf[64];
    char age[16];

    if (strcmp(item->string, QUEUE_F_PLACEMENT) == 0 && cJSON_IsArray(item)) {
        printf("%s", QUEUE_F_PLACEMENT);
        show_placement(item);
        return;
    }
    printf("%-20s", item->string);
    if (is_time_field(item->string) && cJSON_IsNumber(item) && item->valuedouble > 0) {
        mu_time_format_iso((uint64_t)item->valuedouble, buf, sizeof(buf));
        ctl_format_age(now_ms, (uint64_t)item->valuedouble, age, sizeof(age));
        printf("%s (%s ago)\n", buf, age);
        return;
    }
    if (strcmp(item->string, "spec") == 0 && cJSON_IsString(item)) {
        show_spec(item->valuestring);
    } else if (strcmp(item->string, QUEUE_F_BORROWED) == 0) {
        printf("yes: started beyond its queue's quota, on quota borrowed from its cohort (the "
               "lender may reclaim it)");
    } else if (cJSON_IsString(item)) {
        ctl_print_clean(stdout, item->valuestring);
    } else if (cJSON_IsNumber(item) && strcmp(item->string, QUEUE_F_LOST_GPU_SECONDS) == 0) {
        printf("%.0f GPU-seconds (%.2f GPU-hours)", item->valuedouble, item->valuedouble / 3600.0);
    } else if (cJSON_IsNumber(item)) {
        printf("%.0f", item->valuedouble);
    } else {
        char *text = cJSON_PrintUnformatted(item);
        if (text)
            (void)fputs(text, stdout);
        cJSON_free(text);
    }
    putchar('\n');
}

static int show_submitted(struct ctl *ctl, const char *id, const char *spec)
{
    cJSON *doc;
    int rc;

    if (ctl->output == CTL_OUT_JSON) {
        doc = cJSON_CreateObject();
        if (!doc || !cJSON_AddStringToObject(doc, "id", id)
            || !cJSON_AddStringToObject(doc, "state", "SUBMITTED")
            || !cJSON_AddStringToObject(doc, "spec", spec)) {
            cJSON_Delete(doc);
            return ctl_fail(ctl, "out of memory");
        }
        rc = ctl_json_print(ctl, doc);
        cJSON_Delete(doc);
        return rc;
    }
    printf("%-20s%s\n%-20sSUBMITTED (not yet seen by musterd)\n%-20s", "id", id, "state", "spec");
    show_spec(spec);
    putchar('\n');
    return CTL_EXIT_OK;
}

/* What is known of an array's element that musterd has not made yet (it has no hash): its
 * array, and that it is pending.  NULL without memory. */
static cJSON *unmade_element(const char *id)
{
    char base[QUEUE_JOB_ID_MAX];
    int64_t index = 0;
    cJSON *job = cJSON_CreateObject();

    (void)queue_job_id_split(id, base, sizeof(base), &index);
    if (!job || !cJSON_AddStringToObject(job, QUEUE_F_ID, id)
        || !cJSON_AddStringToObject(job, QUEUE_F_STATE, "PENDING")
        || !cJSON_AddStringToObject(job, QUEUE_F_ARRAY_JOB, base)
        || !cJSON_AddNumberToObject(job, QUEUE_F_ARRAY_INDEX, (double)index)
        || !cJSON_AddStringToObject(job, QUEUE_F_REASON,
                                    "not made yet: its array makes elements in index order, a "
                                    "few at a time (and at most %N active)")) {
        cJSON_Delete(job);
        return NULL;
    }
    return job;
}

/* A pending job (with a hash: musterd knows of it): its why, as "why" (or "why_error") in job.
 * false only without memory. */
static bool add_why(struct queue *q, const char *id, cJSON *job)
{
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(job, QUEUE_F_STATE);
    struct mu_err err = { 0 };
    cJSON *why = NULL;
    char b[256];

    if (!cJSON_IsString(state) || strcmp(state->valuestring, "PENDING") != 0)
        return true;
    if (ctl_why_ask(q, id, CTL_SHOW_WHY_S, &why, &err) != 0)
        return cJSON_AddStringToObject(job, "why_error", err.msg) != NULL;
    if (ctl_json_text(why, "error", b, sizeof(b))[0]) {
        cJSON_Delete(why);
        return cJSON_AddStringToObject(job, "why_error", b) != NULL;
    }
    if (!cJSON_AddItemToObject(job, "why", why)) {
        cJSON_Delete(why);
        return false;
    }
    return true;
}

int ctl_cmd_show(struct ctl *ctl, const struct ctl_args *args)
{
    const char *id = args->argv[0];
    struct mu_err err = { 0 };
    struct queue *q = ctl_queue(ctl);
    cJSON *job = NULL;
    const cJSON *item;
    char *spec = NULL;
    uint64_t now_ms = mu_time_wall_ms();
    int rc = CTL_EXIT_FAIL;

    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_job_read(q, id, &job, &err) != 0)
        return ctl_fail(ctl, "job '%s': %s", id, err.msg);
    if (job && !add_why(q, id, job)) {
        cJSON_Delete(job);
        return ctl_fail(ctl, "out of memory");
    }
    if (!job) {
        bool unmade = false;
        if (ctl_array_element_unmade(ctl, id, &unmade) != 0)
            return CTL_EXIT_FAIL;
        if (unmade)
            job = unmade_element(id);
    }
    if (!job) {
        if (queue_submission_read(q, id, &spec, &err) != 0)
            return ctl_fail(ctl, "job '%s': %s", id, err.msg);
        if (!spec)
            return ctl_fail(ctl,
                            "job '%s' not found\nhint: a finished job leaves Redis "
                            "keep_finished_s after it ended; see 'musterctl history --id %s'",
                            id, id);
        rc = show_submitted(ctl, id, spec);
        free(spec);
        return rc;
    }
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, job);
        cJSON_Delete(job);
        return rc;
    }
    for (size_t i = 0; i < MU_ARRAY_LEN(order); i++) {
        item = cJSON_GetObjectItemCaseSensitive(job, order[i]);
        if (item)
            show_field(item, now_ms);
    }
    cJSON_ArrayForEach(item, job)
    {
        bool known = strcmp(item->string, "why") == 0 || strcmp(item->string, "why_error") == 0;
        for (size_t i = 0; i < MU_ARRAY_LEN(order) && !known; i++)
            known = strcmp(item->string, order[i]) == 0;
        if (!known)
            show_field(item, now_ms);
    }
    item = cJSON_GetObjectItemCaseSensitive(job, "why");
    if (item) {
        printf("\nwhy it waits (musterctl why %s):\n", id);
        ctl_why_print(item);
    }
    item = cJSON_GetObjectItemCaseSensitive(job, "why_error");
    if (cJSON_IsString(item)) {
        printf("%-20s", "why");
        ctl_print_clean(stdout, item->valuestring);
        putchar('\n');
    }
    cJSON_Delete(job);
    return CTL_EXIT_OK;
}

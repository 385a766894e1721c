/* SPDX-License-Identifier: MIT */
/*
 * musterctl jobs: the queue at a glance, like squeue.  Rows come oldest submission first from
 * queue_jobs_read, which scans the jobs index newest first and stops at --limit, so a long
 * history costs nothing when only the newest jobs are asked for.  --sort reorders what was read
 * (a stable sort, ties kept in submit order), so --limit always means "the newest N matches".
 * REASON shows why a job waits (PENDING) or what went wrong (FAILED, REJECTED); it and NODES are
 * cut to fit the terminal.  The table is shared with `top` (running gangs).
 */
#include "cli/internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

enum jobs_sort { SORT_SUBMIT = 0, SORT_ID, SORT_PRIORITY, SORT_AGE, SORT_STATE, SORT_QUEUE };

static const char *const sort_names[] = { "submit", "id", "priority", "age", "state", "queue" };

/* Adds one job's row. */
static int jobs_row(struct ctl_table *t, const cJSON *job, uint64_t now_ms)
{
    char b[7][32];
    char shape[48];
    char age[16];
    const char *state = ctl_json_text(job, "state", b[0], sizeof(b[0]));
    const char *reason = "";
    const char *cells[9];

    (void)snprintf(shape, sizeof(shape), "%lldx%lld", (long long)ctl_json_int(job, "tasks", 1),
                   (long long)ctl_json_int(job, "gpus_per_task", 1));
    ctl_format_age(now_ms, (uint64_t)ctl_json_int(job, "submitted_at", (int64_t)now_ms), age,
                   sizeof(age));
    if (ctl_json_int(job, "held", 0) != 0 && !ctl_state_is_final(state))
        reason = strcmp(state, "PENDING") == 0 ? "held: 'musterctl release ID' lets it start"
                                               : "held: not restarted if it is requeued";
    else if (strcmp(state, "PENDING") == 0)
        reason = ctl_json_text(job, "reason", b[1], sizeof(b[1]));
    else if (strcmp(state, "FAILED") == 0 || strcmp(state, "REJECTED") == 0
             || strcmp(state, "TIMEOUT") == 0)
        reason = ctl_json_text(job, "error", b[1], sizeof(b[1]));
    cells[0] = ctl_json_text(job, "id", b[2], sizeof(b[2]));
    cells[1] = ctl_json_text(job, "name", b[3], sizeof(b[3]));
    cells[2] = ctl_json_text(job, "queue", b[4], sizeof(b[4]));
    cells[3] = state;
    cells[4] = shape;
    cells[5] = ctl_json_text(job, "priority", b[5], sizeof(b[5]));
    cells[6] = age;
    cells[7] = ctl_json_text(job, "nodes", b[6], sizeof(b[6]));
    cells[8] = reason;
    return ctl_table_add(t, cells);
}

struct ctl_table *ctl_jobs_table(const cJSON *jobs, uint64_t now_ms, size_t max_rows)
{
    static const char *const headers[] = { "ID",   "NAME", "QUEUE", "STATE", "TASKSxGPUS",
                                           "PRIO", "AGE",  "NODES", "REASON" };
    struct ctl_table *t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    const cJSON *job;
    size_t n = 0;

    if (!t)
        return NULL;
    ctl_table_set_state(t, 3);
    ctl_table_set_flex(t, 1);
    ctl_table_set_flex(t, 7);
    ctl_table_set_flex(t, 8);
    cJSON_ArrayForEach(job, jobs)
    {
        if (max_rows && n++ >= max_rows)
            break;
        if (jobs_row(t, job, now_ms) != 0) {
            ctl_table_free(t);
            return NULL;
        }
    }
    return t;
}

static size_t state_rank(const cJSON *job)
{
    char buf[32];
    const char *s = ctl_json_text(job, "state", buf, sizeof(buf));

    for (size_t i = 0; i < MU_ARRAY_LEN(ctl_job_states); i++) {
        if (strcmp(s, ctl_job_states[i]) == 0)
            return i;
    }
    return MU_ARRAY_LEN(ctl_job_states);
}

/* Parses "seq-ms" ids into their two numbers, for numeric id order. */
static void id_parts(const cJSON *job, uint64_t *ms, uint64_t *seq)
{
    char buf[64];
    const char *id = ctl_json_text(job, "id", buf, sizeof(buf));
    const char *dash = strchr(id, '-');
    int64_t a = 0;
    int64_t b = 0;
    char head[32];

    *ms = 0;
    *seq = 0;
    if (!dash || (size_t)(dash - id) >= sizeof(head))
        return;
    memcpy(head, id, (size_t)(dash - id));
    head[dash - id] = '\0';
    if (mu_parse_i64(head, 0, INT64_MAX, &a, NULL) == 0
        && mu_parse_i64(dash + 1, 0, INT64_MAX, &b, NULL) == 0) {
        *ms = (uint64_t)a;
        *seq = (uint64_t)b;
    }
}

struct sort_item {
    cJSON *job;
    size_t pos; /* position in submit order: the tie-break that makes qsort stable */
};

static enum jobs_sort g_sort; /* qsort has no context argument; musterctl is single-threaded */
static bool g_reverse;

static int cmp3(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static int sort_cmp(const void *pa, const void *pb)
{
    const struct sort_item *a = pa;
    const struct sort_item *b = pb;
    int c = 0;
    char ba[64];
    char bb[64];
    uint64_t ams;
    uint64_t aseq;
    uint64_t bms;
    uint64_t bseq;

    switch (g_sort) {
    case SORT_ID:
        id_parts(a->job, &ams, &aseq);
        id_parts(b->job, &bms, &bseq);
        c = ams != bms ? (ams < bms ? -1 : 1) : (aseq < bseq ? -1 : aseq > bseq ? 1 : 0);
        break;
    case SORT_PRIORITY: /* highest first */
        c = cmp3(ctl_json_int(b->job, "priority", 0), ctl_json_int(a->job, "priority", 0));
        break;
    case SORT_AGE: /* oldest first */
        c = cmp3(ctl_json_int(a->job, "submitted_at", 0), ctl_json_int(b->job, "submitted_at", 0));
        break;
    case SORT_STATE:
        c = cmp3((int64_t)state_rank(a->job), (int64_t)state_rank(b->job));
        break;
    case SORT_QUEUE:
        c = strcmp(ctl_json_text(a->job, "queue", ba, sizeof(ba)),
                   ctl_json_text(b->job, "queue", bb, sizeof(bb)));
        break;
    case SORT_SUBMIT:
        break;
    }
    if (g_reverse)
        c = -c;
    if (c == 0)
        c = cmp3((int64_t)a->pos, (int64_t)b->pos);
    return c;
}

/* Reorders the array in place; 0, or -1 on no memory (the array is left as it was). */
static int jobs_sort(cJSON *jobs, enum jobs_sort how, bool reverse)
{
    int n = cJSON_GetArraySize(jobs);
    struct sort_item *items;
    cJSON *job;
    size_t i = 0;

    if (n < 2 || (how == SORT_SUBMIT && !reverse))
        return 0;
    items = calloc((size_t)n, sizeof(*items));
    if (!items)
        return -1;
    cJSON_ArrayForEach(job, jobs)
    {
        items[i].job = job;
        items[i].pos = i;
        i++;
    }
    g_sort = how;
    g_reverse = reverse;
    qsort(items, i, sizeof(*items), sort_cmp);
    /* Relink the children in the new order (cJSON arrays are doubly linked lists whose head's
     * prev points at the tail). */
    for (size_t k = 0; k < i; k++) {
        items[k].job->prev = k ? items[k - 1].job : items[i - 1].job;
        items[k].job->next = k + 1 < i ? items[k + 1].job : NULL;
    }
    jobs->child = items[0].job;
    free(items);
    return 0;
}

/* Parses --sort: FIELD or -FIELD. */
static int sort_parse(struct ctl *ctl, const char *text, enum jobs_sort *how, bool *reverse)
{
    *reverse = text[0] == '-';
    if (*reverse)
        text++;
    for (size_t i = 0; i < MU_ARRAY_LEN(sort_names); i++) {
        if (strcmp(text, sort_names[i]) == 0) {
            *how = (enum jobs_sort)i;
            return 0;
        }
    }
    ctl_usage(ctl,
              "--sort: expected id, priority, age, state or queue (with - to reverse), got '%s'",
              text);
    return -1;
}

int ctl_cmd_jobs(struct ctl *ctl, const struct ctl_args *args)
{
    struct queue_jobs_filter f = { 0 };
    struct mu_err err = { 0 };
    struct ctl_table *t = NULL;
    struct queue *q;
    cJSON *jobs = NULL;
    const char *sort = ctl_args_get(ctl, args, "sort");
    enum jobs_sort how = SORT_SUBMIT;
    bool reverse = false;
    char state[16];
    int64_t limit = 0;
    uint64_t now_ms = mu_time_wall_ms();
    int rc = CTL_EXIT_FAIL;

    f.all = ctl_args_get(ctl, args, "all") != NULL;
    f.queue = ctl_args_get(ctl, args, "queue");
    f.state = ctl_args_get(ctl, args, "state");
    f.user = ctl_args_get(ctl, args, "user");
    if (ctl_args_int(ctl, args, "limit", 1, 1000000, &limit) != 0)
        return CTL_EXIT_USAGE;
    if (sort && sort_parse(ctl, sort, &how, &reverse) != 0)
        return CTL_EXIT_USAGE;
    f.limit = (size_t)limit;
    if (f.state) {
        size_t i;
        size_t n = mu_strlcpy(state, f.state, sizeof(state));
        for (i = 0; state[i]; i++)
            state[i] = (char)toupper((unsigned char)state[i]);
        for (i = 0; n < sizeof(state) && i < MU_ARRAY_LEN(ctl_job_states); i++) {
            if (strcmp(state, ctl_job_states[i]) == 0)
                break;
        }
        if (n >= sizeof(state) || i == MU_ARRAY_LEN(ctl_job_states))
            return ctl_usage(ctl,
                             "--state: expected one of PENDING, STARTING, RUNNING, "
                             "PREEMPTING, SUCCEEDED, FAILED, CANCELLED, REJECTED, TIMEOUT, "
                             "got '%s'",
                             f.state);
        f.state = state;
    }
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (queue_jobs_read(q, &f, &jobs, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (jobs_sort(jobs, how, reverse) != 0) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    if (ctl->output == CTL_OUT_JSON) {
        rc = ctl_json_print(ctl, jobs);
        goto out;
    }
    t = ctl_jobs_table(jobs, now_ms, 0);
    if (!t) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    ctl_table_print(t, ctl, stdout);
    rc = CTL_EXIT_OK;
out:
    ctl_table_free(t);
    cJSON_Delete(jobs);
    return rc;
}

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

/* The parent array (in jobs, not final) of element job, or NULL. */
static const cJSON *array_parent(const cJSON *jobs, const cJSON *job)
{
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(job, "array_job");
    const cJSON *p;
    char b[2][32];

    if (!cJSON_IsString(base))
        return NULL;
    cJSON_ArrayForEach(p, jobs)
    {
        if (strcmp(ctl_json_text(p, "id", b[0], sizeof(b[0])), base->valuestring) == 0)
            return ctl_state_is_final(ctl_json_text(p, "state", b[1], sizeof(b[1]))) ? NULL : p;
    }
    return NULL;
}

/* Appends index to the ranges text in buf ("3-7,9"), extending the last range when it follows
 * on; "..." once buf is full.  *last is the last index appended (-2 before the first). */
static void ranges_add(char *buf, size_t size, int64_t index, int64_t *last, int64_t *start)
{
    size_t n = strlen(buf);

    if (n >= size - 4 || (n > 3 && strcmp(buf + n - 3, "...") == 0))
        return;
    if (index == *last + 1 && *last >= 0) {
        /* Rewrite the tail "start-last" (or "start") as "start-index". */
        char *tail = strrchr(buf, ',');
        tail = tail ? tail + 1 : buf;
        (void)snprintf(tail, size - (size_t)(tail - buf), "%lld-%lld", (long long)*start,
                       (long long)index);
    } else {
        *start = index;
        (void)snprintf(buf + n, size - n, "%s%lld", n ? "," : "", (long long)index);
    }
    if (strlen(buf) >= size - 4)
        (void)snprintf(buf + n, size - n, "%s...", n ? "," : "");
    *last = index;
}

/* True when the comma list skip ("3,17") holds index. */
static bool skip_has(const char *skip, int64_t index)
{
    for (const char *p = skip; p && *p;) {
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p)
            return false;
        if (v == index)
            return true;
        p = *end == ',' ? end + 1 : NULL;
    }
    return false;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "ID_[12-99]": an active array's pending elements, made (PENDING rows of jobs) or not yet,
 * collapsed into one id (true); the plain id when none is pending (false). */
static bool array_id_text(const cJSON *jobs, const cJSON *parent, char *buf, size_t size)
{
    char b[3][32];
    char ranges[48] = "";
    const char *id = ctl_json_text(parent, "id", b[0], sizeof(b[0]));
    const char *skip = ctl_json_text(parent, "array_skip", b[2], sizeof(b[2]));
    struct queue_array *a = malloc(sizeof(*a));
    int64_t *made = calloc((size_t)cJSON_GetArraySize(jobs) + 1, sizeof(*made));
    size_t nmade = 0;
    int64_t last = -2;
    int64_t start = 0;
    struct mu_err err;
    const cJSON *j;

    (void)snprintf(buf, size, "%s", id);
    if (!a || !made
        || queue_array_parse(ctl_json_text(parent, "array", b[1], sizeof(b[1])), a, &err) != 0)
        goto out;
    cJSON_ArrayForEach(j, jobs)
    {
        char c[2][32];
        if (strcmp(ctl_json_text(j, "state", c[0], sizeof(c[0])), "PENDING") == 0
            && array_parent(jobs, j) == parent)
            made[nmade++] = ctl_json_int(j, "array_index", -1);
    }
    qsort(made, nmade, sizeof(*made), cmp_i64);
    for (size_t i = 0; i < nmade; i++)
        ranges_add(ranges, sizeof(ranges), made[i], &last, &start);
    for (int64_t pos = ctl_json_int(parent, "array_next", 0); pos < a->count; pos++) {
        int64_t index = queue_array_index(a, pos);
        if (!skip_has(skip, index))
            ranges_add(ranges, sizeof(ranges), index, &last, &start);
    }
    if (ranges[0])
        (void)snprintf(buf, size, "%s_[%s]", id, ranges);
out:
    free(made);
    free(a);
    return ranges[0] != '\0';
}

/* Adds one job's row. */
static int jobs_row(struct ctl_table *t, const cJSON *jobs, const cJSON *job, uint64_t now_ms)
{
    char b[7][32];
    char shape[48];
    char age[16];
    const char *state = ctl_json_text(job, "state", b[0], sizeof(b[0]));
    const char *reason = "";
    const char *cells[9];
    char idtext[96];

    /* An active array's row stands for its pending elements: PENDING, its progress as reason. */
    if (cJSON_GetObjectItemCaseSensitive(job, "array") && !ctl_state_is_final(state)
        && array_id_text(jobs, job, idtext, sizeof(idtext)))
        state = "PENDING";
    else
        (void)snprintf(idtext, sizeof(idtext), "%s", ctl_json_text(job, "id", b[2], sizeof(b[2])));

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
    cells[0] = idtext;
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
        char st[32];
        /* A pending element shows in its array's row ("ID_[12-99]"). */
        if (strcmp(ctl_json_text(job, "state", st, sizeof(st)), "PENDING") == 0
            && array_parent(jobs, job))
            continue;
        if (jobs_row(t, jobs, job, now_ms) != 0) {
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

/* SPDX-License-Identifier: MIT */
/*
 * musterctl jobs: the queue at a glance, like squeue.  Rows come oldest submission first from
 * queue_job_rows_read (queue_jobs_read for -o json), which scans the jobs index newest first and
 * stops at --limit, so a long history costs nothing when only the newest jobs are asked for. --sort
 * reorders what was read (a stable sort, ties kept in submit order), so --limit always means "the
 * newest N matches". REASON shows why a job waits (PENDING) or what went wrong (FAILED, REJECTED);
 * it and NODES are cut to fit the terminal.  The table is shared with `top` (running gangs).
 */
#include "cli/internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

enum jobs_sort { SORT_SUBMIT = 0, SORT_ID, SORT_PRIORITY, SORT_AGE, SORT_STATE, SORT_QUEUE };

static const char *const sort_names[] = { "submit", "id", "priority", "age", "state", "queue" };

/* The hash fields the table and --sort read, as queue_job_rows_read fetches them. */
enum job_field {
    JF_NAME,
    JF_QUEUE,
    JF_STATE,
    JF_TASKS,
    JF_GPUS,
    JF_PRIORITY,
    JF_SUBMITTED_AT,
    JF_NODES,
    JF_REASON,
    JF_ERROR,
    JF_HELD,
    JF_ARRAY,
    JF_ARRAY_JOB,
    JF_ARRAY_INDEX,
    JF_ARRAY_SKIP,
    JF_ARRAY_NEXT,
    JF_COUNT
};

static const char *const job_fields[JF_COUNT] = {
    [JF_NAME] = QUEUE_F_NAME,
    [JF_QUEUE] = QUEUE_F_QUEUE,
    [JF_STATE] = QUEUE_F_STATE,
    [JF_TASKS] = QUEUE_F_TASKS,
    [JF_GPUS] = QUEUE_F_GPUS_PER_TASK,
    [JF_PRIORITY] = QUEUE_F_PRIORITY,
    [JF_SUBMITTED_AT] = QUEUE_F_SUBMITTED_AT,
    [JF_NODES] = QUEUE_F_NODES,
    [JF_REASON] = QUEUE_F_REASON,
    [JF_ERROR] = QUEUE_F_ERROR,
    [JF_HELD] = QUEUE_F_HELD,
    [JF_ARRAY] = QUEUE_F_ARRAY,
    [JF_ARRAY_JOB] = QUEUE_F_ARRAY_JOB,
    [JF_ARRAY_INDEX] = QUEUE_F_ARRAY_INDEX,
    [JF_ARRAY_SKIP] = QUEUE_F_ARRAY_SKIP,
    [JF_ARRAY_NEXT] = QUEUE_F_ARRAY_NEXT,
};

int ctl_job_rows_read(struct queue *q,
                      const struct queue_jobs_filter *f,
                      struct queue_job_rows *out,
                      struct mu_err *err)
{
    return queue_job_rows_read(q, f, job_fields, JF_COUNT, out, err);
}

static const char *val(const struct queue_job_row *r, enum job_field f)
{
    return r->values[f] ? r->values[f] : "";
}

static int64_t ival(const struct queue_job_row *r, enum job_field f, int64_t def)
{
    int64_t n;
    return r->values[f] && mu_parse_i64(r->values[f], INT64_MIN, INT64_MAX, &n, NULL) == 0 ? n
                                                                                           : def;
}

bool ctl_job_row_is_pending(const struct queue_job_row *r)
{
    return strcmp(val(r, JF_STATE), "PENDING") == 0;
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

/* A pending element of an active array listed with it: the parent's row and the element's
 * index. */
struct element {
    size_t parent;
    int64_t index;
};

/*
 * What the table needs across rows: which rows are pending elements of an active array in the
 * listing (they show in the array's row, "ID_[12-99]"), and each such array's elements.  Built
 * once per table in O(n log n), so that many arrays in a long queue stay cheap.
 */
struct jobs_view {
    const struct queue_job_rows *rows;
    size_t *parent; /* per row: its active array's row, SIZE_MAX when none; NULL = all none */
    struct element *elements; /* sorted by parent, then index */
    size_t nelements;
};

struct id_entry {
    const char *id;
    size_t row;
};

static int cmp_id_entry(const void *a, const void *b)
{
    return strcmp(((const struct id_entry *)a)->id, ((const struct id_entry *)b)->id);
}

static int cmp_element(const void *pa, const void *pb)
{
    const struct element *a = pa;
    const struct element *b = pb;
    if (a->parent != b->parent)
        return a->parent < b->parent ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static void jobs_view_release(struct jobs_view *v)
{
    free(v->parent);
    free(v->elements);
    *v = (struct jobs_view){ .rows = v->rows };
}

/* 0, or -1 on no memory (nothing held). */
static int jobs_view_build(struct jobs_view *v, const struct queue_job_rows *rows)
{
    struct id_entry *ids = NULL;
    size_t n = rows->n;
    bool any = false;
    int rc = -1;

    *v = (struct jobs_view){ .rows = rows };
    for (size_t i = 0; i < n && !any; i++)
        any = rows->rows[i]->values[JF_ARRAY_JOB] && ctl_job_row_is_pending(rows->rows[i]);
    if (!any)
        return 0;
    ids = malloc(n * sizeof(*ids));
    v->parent = malloc(n * sizeof(*v->parent));
    v->elements = malloc(n * sizeof(*v->elements));
    if (!ids || !v->parent || !v->elements)
        goto out;
    for (size_t i = 0; i < n; i++)
        ids[i] = (struct id_entry){ rows->rows[i]->id, i };
    qsort(ids, n, sizeof(*ids), cmp_id_entry);
    for (size_t i = 0; i < n; i++) {
        const struct queue_job_row *r = rows->rows[i];
        struct id_entry key = { r->values[JF_ARRAY_JOB], 0 };
        const struct id_entry *p = NULL;

        v->parent[i] = SIZE_MAX;
        if (key.id && ctl_job_row_is_pending(r))
            p = bsearch(&key, ids, n, sizeof(*ids), cmp_id_entry);
        if (!p || ctl_state_is_final(val(rows->rows[p->row], JF_STATE)))
            continue;
        v->parent[i] = p->row;
        v->elements[v->nelements++] = (struct element){ p->row, ival(r, JF_ARRAY_INDEX, -1) };
    }
    qsort(v->elements, v->nelements, sizeof(*v->elements), cmp_element);
    rc = 0;
out:
    free(ids);
    if (rc != 0)
        jobs_view_release(v);
    return rc;
}

/* "ID_[12-99]": an active array's pending elements, made (PENDING rows) or not yet, collapsed
 * into one id (true); the plain id when none is pending (false). */
static bool array_id_text(const struct jobs_view *v, size_t row, char *buf, size_t size)
{
    const struct queue_job_row *parent = v->rows->rows[row];
    const char *skip = val(parent, JF_ARRAY_SKIP);
    struct element key = { row, INT64_MIN };
    char ranges[48] = "";
    struct queue_array a;
    struct mu_err err;
    int64_t last = -2;
    int64_t start = 0;
    size_t lo = 0;
    size_t hi = v->nelements;

    (void)snprintf(buf, size, "%s", parent->id);
    if (queue_array_parse(val(parent, JF_ARRAY), &a, &err) != 0)
        return false;
    while (lo < hi) { /* the first element of this parent */
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_element(&v->elements[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < v->nelements && v->elements[i].parent == row; i++)
        ranges_add(ranges, sizeof(ranges), v->elements[i].index, &last, &start);
    for (int64_t pos = ival(parent, JF_ARRAY_NEXT, 0); pos < a.count; pos++) {
        int64_t index = queue_array_index(&a, pos);
        if (!skip_has(skip, index))
            ranges_add(ranges, sizeof(ranges), index, &last, &start);
    }
    if (ranges[0])
        (void)snprintf(buf, size, "%s_[%s]", parent->id, ranges);
    return ranges[0] != '\0';
}

/* Adds one job's row. */
static int jobs_row(struct ctl_table *t, const struct jobs_view *v, size_t row, uint64_t now_ms)
{
    const struct queue_job_row *job = v->rows->rows[row];
    const char *state = val(job, JF_STATE);
    const char *reason = "";
    const char *cells[9];
    char shape[48];
    char age[16];
    char idtext[96];

    /* An active array's row stands for its pending elements: PENDING, its progress as reason. */
    if (job->values[JF_ARRAY] && !ctl_state_is_final(state)
        && array_id_text(v, row, idtext, sizeof(idtext)))
        state = "PENDING";
    else
        (void)snprintf(idtext, sizeof(idtext), "%s", job->id);

    (void)snprintf(shape, sizeof(shape), "%lldx%lld", (long long)ival(job, JF_TASKS, 1),
                   (long long)ival(job, JF_GPUS, 1));
    ctl_format_age(now_ms, (uint64_t)ival(job, JF_SUBMITTED_AT, (int64_t)now_ms), age, sizeof(age));
    if (ival(job, JF_HELD, 0) != 0 && !ctl_state_is_final(state))
        reason = strcmp(state, "PENDING") == 0 ? "held: 'musterctl release ID' lets it start"
                                               : "held: not restarted if it is requeued";
    else if (strcmp(state, "PENDING") == 0)
        reason = val(job, JF_REASON);
    else if (strcmp(state, "FAILED") == 0 || strcmp(state, "REJECTED") == 0
             || strcmp(state, "TIMEOUT") == 0)
        reason = val(job, JF_ERROR);
    cells[0] = idtext;
    cells[1] = val(job, JF_NAME);
    cells[2] = val(job, JF_QUEUE);
    cells[3] = state;
    cells[4] = shape;
    cells[5] = val(job, JF_PRIORITY);
    cells[6] = age;
    cells[7] = val(job, JF_NODES);
    cells[8] = reason;
    return ctl_table_add(t, cells);
}

struct ctl_table *ctl_jobs_table(const struct queue_job_rows *rows,
                                 uint64_t now_ms,
                                 size_t max_rows)
{
    static const char *const headers[] = { "ID",   "NAME", "QUEUE", "STATE", "TASKSxGPUS",
                                           "PRIO", "AGE",  "NODES", "REASON" };
    struct ctl_table *t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    struct jobs_view v;
    size_t shown = 0;

    if (!t)
        return NULL;
    if (jobs_view_build(&v, rows) != 0) {
        ctl_table_free(t);
        return NULL;
    }
    ctl_table_set_state(t, 3);
    ctl_table_set_flex(t, 1);
    ctl_table_set_flex(t, 7);
    ctl_table_set_flex(t, 8);
    for (size_t i = 0; i < rows->n && (max_rows == 0 || shown < max_rows); i++) {
        /* A pending element shows in its array's row ("ID_[12-99]"). */
        if (v.parent && v.parent[i] != SIZE_MAX)
            continue;
        shown++;
        if (jobs_row(t, &v, i, now_ms) != 0) {
            ctl_table_free(t);
            t = NULL;
            break;
        }
    }
    jobs_view_release(&v);
    return t;
}

/* The state's place in the lifecycle (queue's enum order); unknown states last. */
static size_t state_rank(const char *state)
{
    for (int i = 0; i < QUEUE_NSTATES; i++) {
        if (strcmp(state, queue_state_name((enum queue_state)i)) == 0)
            return (size_t)i;
    }
    return (size_t)QUEUE_NSTATES;
}

/* --state named no state: the usage error listing them all. */
static int state_usage(struct ctl *ctl, const char *got)
{
    char all[160] = "";
    size_t len = 0;

    for (int i = 0; i < QUEUE_NSTATES && len < sizeof(all); i++)
        len += (size_t)snprintf(all + len, sizeof(all) - len, "%s, ",
                                queue_state_name((enum queue_state)i));
    return ctl_usage(ctl, "--state: expected one of %sgot '%s'", all, got);
}

/* "ms-seq" ids as their two numbers, for numeric id order; 0 and 0 for any other text. */
static void id_parts(const char *id, int64_t *ms, int64_t *seq)
{
    const char *dash = strchr(id, '-');
    char head[32];

    *ms = *seq = 0;
    if (!dash || (size_t)(dash - id) >= sizeof(head))
        return;
    memcpy(head, id, (size_t)(dash - id));
    head[dash - id] = '\0';
    if (mu_parse_i64(head, 0, INT64_MAX, ms, NULL) != 0
        || mu_parse_i64(dash + 1, 0, INT64_MAX, seq, NULL) != 0)
        *ms = *seq = 0;
}

/* One job's place under --sort: two numbers, then a text, compared in that order. */
struct sort_item {
    void *job;  /* a row or a cJSON object */
    size_t pos; /* position in submit order: the tie-break that makes qsort stable */
    int64_t a;
    int64_t b;
    const char *text;
};

/* The keys of one job under how, from its id, state, queue, priority and submit time. */
static void sort_keys(struct sort_item *it,
                      enum jobs_sort how,
                      const char *id,
                      const char *state,
                      const char *queue,
                      int64_t priority,
                      int64_t submitted_at)
{
    it->a = it->b = 0;
    it->text = "";
    switch (how) {
    case SORT_ID:
        id_parts(id, &it->a, &it->b);
        break;
    case SORT_PRIORITY: /* highest first */
        it->a = priority == INT64_MIN ? INT64_MAX : -priority;
        break;
    case SORT_AGE: /* oldest first */
        it->a = submitted_at;
        break;
    case SORT_STATE:
        it->a = (int64_t)state_rank(state);
        break;
    case SORT_QUEUE:
        it->text = queue;
        break;
    case SORT_SUBMIT:
        break;
    }
}

static bool g_reverse; /* qsort has no context argument; musterctl is single-threaded */

static int cmp3(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static int sort_cmp(const void *pa, const void *pb)
{
    const struct sort_item *a = pa;
    const struct sort_item *b = pb;
    int c = cmp3(a->a, b->a);

    if (c == 0)
        c = cmp3(a->b, b->b);
    if (c == 0)
        c = strcmp(a->text, b->text);
    if (g_reverse)
        c = -c;
    if (c == 0)
        c = cmp3((int64_t)a->pos, (int64_t)b->pos);
    return c;
}

static void sort_items(struct sort_item *items, size_t n, bool reverse)
{
    g_reverse = reverse;
    qsort(items, n, sizeof(*items), sort_cmp);
}

/* Reorders the rows in place; 0, or -1 on no memory (the rows are left as they were). */
static int rows_sort(struct queue_job_rows *rows, enum jobs_sort how, bool reverse)
{
    struct sort_item *items;

    if (rows->n < 2 || (how == SORT_SUBMIT && !reverse))
        return 0;
    items = calloc(rows->n, sizeof(*items));
    if (!items)
        return -1;
    for (size_t i = 0; i < rows->n; i++) {
        struct queue_job_row *r = rows->rows[i];
        items[i].job = r;
        items[i].pos = i;
        sort_keys(&items[i], how, r->id, val(r, JF_STATE), val(r, JF_QUEUE),
                  ival(r, JF_PRIORITY, 0), ival(r, JF_SUBMITTED_AT, 0));
    }
    sort_items(items, rows->n, reverse);
    for (size_t i = 0; i < rows->n; i++)
        rows->rows[i] = items[i].job;
    free(items);
    return 0;
}

/* Reorders the array in place; 0, or -1 on no memory (the array is left as it was). */
static int objects_sort(cJSON *jobs, enum jobs_sort how, bool reverse)
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
        const cJSON *queue = cJSON_GetObjectItemCaseSensitive(job, QUEUE_F_QUEUE);
        char b[2][64];
        items[i].job = job;
        items[i].pos = i;
        /* The queue's text is kept past this loop: the object's own, never a buffer here. */
        sort_keys(&items[i], how, ctl_json_text(job, QUEUE_F_ID, b[0], sizeof(b[0])),
                  ctl_json_text(job, QUEUE_F_STATE, b[1], sizeof(b[1])),
                  cJSON_IsString(queue) ? queue->valuestring : "",
                  ctl_json_int(job, QUEUE_F_PRIORITY, 0),
                  ctl_json_int(job, QUEUE_F_SUBMITTED_AT, 0));
        i++;
    }
    sort_items(items, i, reverse);
    /* Relink the children in the new order (cJSON arrays are doubly linked lists whose head's
     * prev points at the tail). */
    for (size_t k = 0; k < i; k++) {
        cJSON *it = items[k].job;
        it->prev = k ? items[k - 1].job : items[i - 1].job;
        it->next = k + 1 < i ? items[k + 1].job : NULL;
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

/* The options: the filter (f->state points into state) and the order; CTL_EXIT_OK or the
 * usage error's exit code (printed). */
static int jobs_options(struct ctl *ctl,
                        const struct ctl_args *args,
                        struct queue_jobs_filter *f,
                        char *state,
                        size_t size,
                        enum jobs_sort *how,
                        bool *reverse)
{
    const char *sort = ctl_args_get(ctl, args, "sort");
    int64_t limit = 0;

    f->all = ctl_args_get(ctl, args, "all") != NULL;
    f->queue = ctl_args_get(ctl, args, "queue");
    f->state = ctl_args_get(ctl, args, "state");
    f->user = ctl_args_get(ctl, args, "user");
    if (ctl_args_int(ctl, args, "limit", 1, 1000000, &limit) != 0)
        return CTL_EXIT_USAGE;
    if (sort && sort_parse(ctl, sort, how, reverse) != 0)
        return CTL_EXIT_USAGE;
    f->limit = (size_t)limit;
    if (f->state) {
        size_t i;
        size_t n = mu_strlcpy(state, f->state, size);
        for (i = 0; state[i]; i++)
            state[i] = (char)toupper((unsigned char)state[i]);
        if (n >= size || state_rank(state) == (size_t)QUEUE_NSTATES)
            return state_usage(ctl, f->state);
        f->state = state;
    }
    return CTL_EXIT_OK;
}

/* -o json: whole jobs. */
static int jobs_print_json(struct ctl *ctl,
                           struct queue *q,
                           const struct queue_jobs_filter *f,
                           enum jobs_sort how,
                           bool reverse)
{
    struct mu_err err = { 0 };
    cJSON *jobs = NULL;
    int rc;

    if (queue_jobs_read(q, f, &jobs, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (objects_sort(jobs, how, reverse) != 0)
        rc = ctl_fail(ctl, "out of memory");
    else
        rc = ctl_json_print(ctl, jobs);
    cJSON_Delete(jobs);
    return rc;
}

/* The table: only its columns are read (no JSON at all). */
static int jobs_print_table(struct ctl *ctl,
                            struct queue *q,
                            const struct queue_jobs_filter *f,
                            enum jobs_sort how,
                            bool reverse)
{
    struct mu_err err = { 0 };
    struct queue_job_rows rows = { 0 };
    struct ctl_table *t = NULL;
    int rc = CTL_EXIT_OK;

    if (ctl_job_rows_read(q, f, &rows, &err) != 0)
        return ctl_fail(ctl, "%s", err.msg);
    if (rows_sort(&rows, how, reverse) != 0 || !(t = ctl_jobs_table(&rows, mu_time_wall_ms(), 0)))
        rc = ctl_fail(ctl, "out of memory");
    else
        ctl_table_print(t, ctl, stdout);
    ctl_table_free(t);
    queue_job_rows_release(&rows);
    return rc;
}

int ctl_cmd_jobs(struct ctl *ctl, const struct ctl_args *args)
{
    struct queue_jobs_filter f = { 0 };
    enum jobs_sort how = SORT_SUBMIT;
    bool reverse = false;
    char state[16];
    struct queue *q;
    int rc = jobs_options(ctl, args, &f, state, sizeof(state), &how, &reverse);

    if (rc != CTL_EXIT_OK)
        return rc;
    q = ctl_queue(ctl);
    if (!q)
        return CTL_EXIT_FAIL;
    if (ctl->output == CTL_OUT_JSON)
        return jobs_print_json(ctl, q, &f, how, reverse);
    return jobs_print_table(ctl, q, &f, how, reverse);
}

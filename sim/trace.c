/* SPDX-License-Identifier: MIT */
/*
 * The trace readers (sim.h): muster's own CSV schema, a Philly-style job list and an Alibaba GPU
 * pod list, told apart by the header's column names so that a user passes the file as it is.
 * Each reader turns a row into a struct sim_job; a row that cannot be used is counted under its
 * reason, with the first such line and column as the example, because a replay that silently
 * loses a tenth of the workload would compare policies on a workload nobody has.  Only a text
 * that is no trace at all (no header, a missing required column, a line too long) is an error.
 *
 * Requests larger than a node become gangs of whole nodes (tasks x gpus_per_node, rounded up and
 * counted).  Rows come back sorted by submission, stable, relative to the first (Philly rows are
 * not sorted in the published list).
 */
#include "sim/internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

struct skip_kind {
    char key[64];
    int count;
    char example[256];
};

struct sim_trace {
    enum sim_format format;
    struct sim_job *jobs;
    int n, cap;
    int rows;
    int rounded;
    int nskips;
    struct skip_kind skips[SIM_MAX_SKIP_KINDS];
    struct mu_map *users; /* "queue\x1fuser" -> 1 + index */
    int nusers;
};

/* The columns any layout may use; a layout's reader looks them up by these indices. */
enum col {
    C_SUBMIT_S,
    C_DURATION_S,
    C_TASKS,
    C_GPUS_PER_TASK,
    C_QUEUE,
    C_USER,
    C_PRIORITY,
    C_TIME_LIMIT_S,
    C_CKPT_INTERVAL_S,
    C_CAPACITY,
    C_PREEMPTIBLE,
    C_TOPOLOGY,
    C_SUBMIT_MS,
    C_END_MS, /* the last of muster's schema */
    C_TIMESTAMP,
    C_DURATION,
    C_NUM_GPUS,
    C_CREATION,
    C_SCHEDULED,
    C_DELETION,
    C_NUM_GPU,
    C_GPU_MILLI,
    C_CPU_MILLI,
    C_MEMORY_MIB,
    C_QOS,
    C_NCOLS
};

static const char *const col_names[C_NCOLS] = {
    "submit_s",
    "duration_s",
    "tasks",
    "gpus_per_task",
    "queue",
    "user",
    "priority",
    "time_limit_s",
    "checkpoint_interval_s",
    "capacity",
    "preemptible",
    "topology",
    "submit_ms",
    "end_ms",
    "timestamp",
    "duration",
    "num_gpus",
    "creation_time",
    "scheduled_time",
    "deletion_time",
    "num_gpu",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "qos",
};

/* One row being read: the fields and where they came from. */
struct row {
    struct sim_trace *t;
    const struct sim_trace_opts *o;
    char **fields;
    int nfields;
    const int *at; /* [enum col] the field index, -1 when the header has no such column */
    int line;
};

const char *sim_format_name(enum sim_format f)
{
    switch (f) {
    case SIM_FORMAT_MUSTER:
        return "muster";
    case SIM_FORMAT_PHILLY:
        return "philly";
    case SIM_FORMAT_ALIBABA:
        return "alibaba";
    }
    return "?";
}

/* Counts a row that cannot be used under key; the first one's message is the example.
 * Returns -1 so that a reader can `return row_skip(...)`. */
__attribute__((format(printf, 4, 5))) static int row_skip(
    struct row *r, const char *key, int col, const char *fmt, ...)
{
    struct sim_trace *t = r->t;
    struct skip_kind *k = NULL;
    char msg[200];
    va_list ap;

    for (int i = 0; i < t->nskips; i++)
        if (strcmp(t->skips[i].key, key) == 0)
            k = &t->skips[i];
    if (!k && t->nskips < SIM_MAX_SKIP_KINDS) {
        k = &t->skips[t->nskips++];
        mu_strlcpy(k->key, key, sizeof(k->key));
        va_start(ap, fmt);
        (void)vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (col >= 0)
            (void)mu_snprintf(k->example, sizeof(k->example), "line %d, column '%s': %s", r->line,
                              col_names[col], msg);
        else
            (void)mu_snprintf(k->example, sizeof(k->example), "line %d: %s", r->line, msg);
    }
    if (!k)
        k = &t->skips[SIM_MAX_SKIP_KINDS - 1]; /* the last kind takes the overflow */
    k->count++;
    return -1;
}

/* The text of column c, "" when the header has none or the row is short. */
static const char *field(const struct row *r, enum col c)
{
    int i = r->at[c];
    return i >= 0 && i < r->nfields ? r->fields[i] : "";
}

/* A number in [min, max] from column c; an empty field gives def (pass NAN to require one). */
static int num(struct row *r, enum col c, double min, double max, double def, double *out)
{
    const char *s = field(r, c);
    struct mu_err err;
    char key[64];

    if (s[0] == '\0') {
        if (isnan(def)) {
            (void)mu_snprintf(key, sizeof(key), "missing value in '%s'", col_names[c]);
            return row_skip(r, key, c, "empty, a value is required");
        }
        *out = def;
        return 0;
    }
    if (mu_parse_double(s, min, max, out, &err) != 0) {
        (void)mu_snprintf(key, sizeof(key), "bad value in '%s'", col_names[c]);
        return row_skip(r, key, c, "expected a number in [%g, %g], got '%.40s'", min, max, s);
    }
    return 0;
}

/* Whole nodes for requests above a node: 1 x g, or ceil(g / gpn) x gpn (rounded, counted). */
static void gang_shape(struct row *r, int64_t gpus, struct sim_job *j)
{
    int gpn = r->o->gpus_per_node;
    if (gpus <= gpn) {
        j->tasks = 1;
        j->gpus_per_task = (int)gpus;
        return;
    }
    j->tasks = (int)((gpus + gpn - 1) / gpn);
    j->gpus_per_task = gpn;
    if (gpus % gpn != 0)
        r->t->rounded++;
}

static void job_defaults(const struct row *r, struct sim_job *j)
{
    const struct cfg_queue *q = cfg_queue_find(r->o->cfg, "default");
    memset(j, 0, sizeof(*j));
    j->queue = q ? (int)(q - r->o->cfg->queues) : 0;
    j->ncapacity = 2;
    j->capacity[0] = SCHED_SPOT;
    j->capacity[1] = SCHED_ON_DEMAND;
    j->preemptible = true;
    j->required_level = -1;
    j->ckpt_interval_s = r->o->default_ckpt_interval_s;
    j->submit_ms = -1; /* submit_s * 1000 once the row is read */
    j->end_ms = -1;
    j->line = r->line;
}

static int parse_capacity(struct row *r, struct sim_job *j)
{
    const char *s = field(r, C_CAPACITY);
    if (s[0] == '\0' || strcmp(s, "spot;on-demand") == 0)
        return 0;
    if (strcmp(s, "on-demand;spot") == 0) {
        j->capacity[0] = SCHED_ON_DEMAND;
        j->capacity[1] = SCHED_SPOT;
        return 0;
    }
    j->ncapacity = 1;
    if (strcmp(s, "spot") == 0)
        j->capacity[0] = SCHED_SPOT;
    else if (strcmp(s, "on-demand") == 0)
        j->capacity[0] = SCHED_ON_DEMAND;
    else
        return row_skip(r, "bad value in 'capacity'", C_CAPACITY,
                        "expected spot, on-demand, spot;on-demand or on-demand;spot, got '%.40s'",
                        s);
    return 0;
}

/* The optional columns of muster's schema (queue, priority, limits, capacity, topology). */
static int muster_optional(struct row *r, struct sim_job *j)
{
    const struct cfg *cfg = r->o->cfg;
    const char *s = field(r, C_QUEUE);
    double v;

    if (s[0] != '\0') {
        const struct cfg_queue *q = cfg_queue_find(cfg, s);
        if (!q)
            return row_skip(r, "unknown queue", C_QUEUE, "queue '%.40s' is not in the config", s);
        j->queue = (int)(q - cfg->queues);
    }
    if (num(r, C_PRIORITY, -1e9, 1e9, 0, &v) != 0)
        return -1;
    j->priority = (int64_t)v;
    if (num(r, C_TIME_LIMIT_S, 0, 31536000, 0, &v) != 0)
        return -1;
    j->time_limit_s = (int64_t)ceil(v);
    if (cfg->max_time_limit_s > 0 && j->time_limit_s > cfg->max_time_limit_s)
        return row_skip(r, "time_limit_s over the config's max_time_limit_s", C_TIME_LIMIT_S,
                        "%lld > %d (musterd rejects it)", (long long)j->time_limit_s,
                        cfg->max_time_limit_s);
    if (num(r, C_CKPT_INTERVAL_S, 0, 31536000, (double)j->ckpt_interval_s, &v) != 0)
        return -1;
    j->ckpt_interval_s = (int64_t)ceil(v);
    if (parse_capacity(r, j) != 0)
        return -1;
    s = field(r, C_PREEMPTIBLE);
    if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)
        j->preemptible = false;
    else if (s[0] != '\0' && strcmp(s, "true") != 0 && strcmp(s, "1") != 0)
        return row_skip(r, "bad value in 'preemptible'", C_PREEMPTIBLE,
                        "expected true, false, 1 or 0, got '%.40s'", s);
    s = field(r, C_TOPOLOGY);
    if (s[0] != '\0' && (j->required_level = cfg_level_index(cfg, s)) < 0)
        return row_skip(r, "unknown topology level", C_TOPOLOGY,
                        "'%.40s' is not a configured level or 'node'", s);
    return 0;
}

/* A replay's instants in ms (submit_ms instead of submit_s, end_ms): whole milliseconds. */
static int read_ms(struct row *r, struct sim_job *j)
{
    double v;
    if (r->at[C_SUBMIT_MS] >= 0) {
        if (num(r, C_SUBMIT_MS, 0, 1e15, NAN, &v) != 0)
            return -1;
        j->submit_ms = (int64_t)floor(v);
        j->submit_s = j->submit_ms / 1000;
    }
    if (num(r, C_END_MS, 0, 1e15, -1, &v) != 0)
        return -1;
    j->end_ms = v < 0 ? -1 : (int64_t)floor(v);
    if (j->end_ms >= 0 && j->end_ms <= (j->submit_ms >= 0 ? j->submit_ms : j->submit_s * 1000))
        return row_skip(r, "end_ms not after the submission", C_END_MS,
                        "%lld is not after the submission", (long long)j->end_ms);
    return 0;
}

static int read_muster(struct row *r, struct sim_job *j)
{
    double submit = 0, dur = 0, tasks = 0, gpt = 0;

    job_defaults(r, j);
    if ((r->at[C_SUBMIT_MS] < 0 && num(r, C_SUBMIT_S, 0, 1e12, NAN, &submit) != 0)
        || num(r, C_DURATION_S, 0, 1e9, NAN, &dur) != 0
        || num(r, C_TASKS, 1, SIM_MAX_TASKS, NAN, &tasks) != 0
        || num(r, C_GPUS_PER_TASK, 0, SCHED_MAX_GPUS_NODE, NAN, &gpt) != 0)
        return -1;
    if (tasks != floor(tasks) || gpt != floor(gpt))
        return row_skip(r, "fractional tasks or GPUs",
                        tasks != floor(tasks) ? C_TASKS : C_GPUS_PER_TASK,
                        "expected a whole number");
    if (gpt == 0)
        return row_skip(r, "no GPU asked (CPU-only job)", C_GPUS_PER_TASK, "0 GPUs per task");
    if ((int)gpt > r->o->gpus_per_node)
        return row_skip(r, "more GPUs per task than a node has", C_GPUS_PER_TASK,
                        "%d > %d GPUs of the largest node", (int)gpt, r->o->gpus_per_node);
    j->submit_s = (int64_t)submit;
    j->duration_s = dur < 1 ? 1 : (int64_t)ceil(dur);
    j->tasks = (int)tasks;
    j->gpus_per_task = (int)gpt;
    if (read_ms(r, j) != 0)
        return -1;
    return muster_optional(r, j);
}

/* Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    int64_t era, yoe, doy, doe;
    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The number in s[at..at+n), all digits; -1 otherwise. */
static int64_t digits(const char *s, int at, int n)
{
    int64_t v = 0;
    for (int i = at; i < at + n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* "YYYY-MM-DD HH:MM:SS" (UTC assumed) into seconds since the epoch; 0 or -1. */
static int parse_timestamp(const char *s, int64_t *out)
{
    int64_t y, mo, d, h, mi, sec;
    if (strlen(s) != 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':'
        || s[16] != ':')
        return -1;
    y = digits(s, 0, 4);
    mo = digits(s, 5, 2);
    d = digits(s, 8, 2);
    h = digits(s, 11, 2);
    mi = digits(s, 14, 2);
    sec = digits(s, 17, 2);
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59
        || sec < 0 || sec > 60)
        return -1;
    *out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
    return 0;
}

static int read_philly(struct row *r, struct sim_job *j)
{
    const char *ts = field(r, C_TIMESTAMP);
    double dur = 0, gpus = 0;

    job_defaults(r, j);
    if (ts[0] == '\0')
        return row_skip(r, "missing value in 'timestamp'", C_TIMESTAMP, "empty");
    if (parse_timestamp(ts, &j->submit_s) != 0)
        return row_skip(r, "bad value in 'timestamp'", C_TIMESTAMP,
                        "expected YYYY-MM-DD HH:MM:SS, got '%.40s'", ts);
    if (num(r, C_DURATION, 0, 1e9, NAN, &dur) != 0 || num(r, C_NUM_GPUS, 0, 1e6, NAN, &gpus) != 0)
        return -1;
    if (gpus != floor(gpus))
        return row_skip(r, "fractional tasks or GPUs", C_NUM_GPUS, "expected a whole number");
    if (gpus == 0)
        return row_skip(r, "no GPU asked (CPU-only job)", C_NUM_GPUS, "0 GPUs");
    if (gpus > (double)SIM_MAX_TASKS * r->o->gpus_per_node)
        return row_skip(r, "larger than a gang may be", C_NUM_GPUS, "%g GPUs", gpus);
    j->duration_s = dur < 1 ? 1 : (int64_t)ceil(dur);
    gang_shape(r, (int64_t)gpus, j);
    return 0;
}

/* Alibaba's qos into priority and preemptible: best effort lowest and preemptible, latency
 * sensitive and guaranteed highest and kept. */
static int alibaba_qos(struct row *r, struct sim_job *j)
{
    const char *q = field(r, C_QOS);
    if (q[0] == '\0' || strcmp(q, "BE") == 0)
        return 0;
    if (strcmp(q, "Burstable") == 0) {
        j->priority = 5;
        return 0;
    }
    if (strcmp(q, "LS") == 0 || strcmp(q, "Guaranteed") == 0) {
        j->priority = 10;
        j->preemptible = false;
        return 0;
    }
    return row_skip(r, "bad value in 'qos'", C_QOS,
                    "expected BE, Burstable, LS or Guaranteed, got '%.40s'", q);
}

static int read_alibaba(struct row *r, struct sim_job *j)
{
    double created = 0, sched = 0, deleted = 0, ngpu = 0, milli = 0, cpu = 0, mem = 0;

    job_defaults(r, j);
    if (num(r, C_CREATION, 0, 1e12, NAN, &created) != 0)
        return -1;
    if (field(r, C_SCHEDULED)[0] == '\0')
        return row_skip(r, "never scheduled in the trace", C_SCHEDULED, "empty");
    if (field(r, C_DELETION)[0] == '\0')
        return row_skip(r, "still running when the trace ends", C_DELETION, "empty");
    if (num(r, C_SCHEDULED, 0, 1e12, NAN, &sched) != 0
        || num(r, C_DELETION, 0, 1e12, NAN, &deleted) != 0
        || num(r, C_NUM_GPU, 0, 1e6, NAN, &ngpu) != 0
        || num(r, C_GPU_MILLI, 0, 1000, 0, &milli) != 0 || num(r, C_CPU_MILLI, 0, 1e9, 0, &cpu) != 0
        || num(r, C_MEMORY_MIB, 0, 1e12, 0, &mem) != 0)
        return -1;
    if (deleted <= sched)
        return row_skip(r, "no run time (deleted when scheduled)", C_DELETION,
                        "deletion_time %.0f <= scheduled_time %.0f", deleted, sched);
    if (ngpu != floor(ngpu))
        return row_skip(r, "fractional tasks or GPUs", C_NUM_GPU, "expected a whole number");
    if (ngpu == 0)
        return row_skip(r, "no GPU asked (CPU-only job)", C_NUM_GPU, "0 GPUs");
    if (ngpu > (double)SIM_MAX_TASKS * r->o->gpus_per_node)
        return row_skip(r, "larger than a gang may be", C_NUM_GPU, "%g GPUs", ngpu);
    if (milli > 0 && milli < 1000)
        r->t->rounded++; /* a GPU share: muster gives whole GPUs */
    j->submit_s = (int64_t)created;
    j->duration_s = (int64_t)ceil(deleted - sched);
    gang_shape(r, (int64_t)ngpu, j);
    return alibaba_qos(r, j);
}

/* The header: the layout and each known column's index; 0 or -1 with err. */
static int read_header(struct sim_trace *t, char **fields, int n, int *at, struct mu_err *err)
{
    static const enum col req_muster[] = { C_SUBMIT_S, C_DURATION_S, C_TASKS, C_GPUS_PER_TASK };
    static const enum col req_philly[] = { C_TIMESTAMP, C_DURATION, C_NUM_GPUS };
    static const enum col req_alibaba[] = { C_CREATION, C_SCHEDULED, C_DELETION, C_NUM_GPU };
    const enum col *req;
    size_t nreq;

    for (int c = 0; c < C_NCOLS; c++)
        at[c] = -1;
    for (int i = 0; i < n; i++) {
        int c = 0;
        while (c < C_NCOLS && strcmp(fields[i], col_names[c]) != 0)
            c++;
        if (c < C_NCOLS && at[c] >= 0)
            return mu_errf(err, MU_E_PARSE, "line 1, column %d: '%s' appears twice", i + 1,
                           fields[i]);
        if (c < C_NCOLS)
            at[c] = i;
    }
    if (at[C_SUBMIT_S] >= 0 && at[C_SUBMIT_MS] >= 0)
        return mu_errf(err, MU_E_PARSE, "line 1, column %d: 'submit_ms' and 'submit_s' both given",
                       at[C_SUBMIT_MS] + 1);
    if (at[C_SUBMIT_S] >= 0 || at[C_SUBMIT_MS] >= 0) {
        t->format = SIM_FORMAT_MUSTER;
        req = req_muster + 1, nreq = 3; /* submit_s or submit_ms, checked above */
    } else if (at[C_TIMESTAMP] >= 0 && at[C_NUM_GPUS] >= 0) {
        t->format = SIM_FORMAT_PHILLY;
        req = req_philly, nreq = 3;
    } else if (at[C_CREATION] >= 0) {
        t->format = SIM_FORMAT_ALIBABA;
        req = req_alibaba, nreq = 4;
    } else {
        return mu_errf(err, MU_E_PARSE,
                       "line 1: not a trace header\nhint: muster's schema has submit_s, "
                       "duration_s, tasks, gpus_per_task; Philly timestamp, duration, num_gpus; "
                       "Alibaba creation_time, scheduled_time, deletion_time, num_gpu");
    }
    for (size_t i = 0; i < nreq; i++)
        if (at[req[i]] < 0)
            return mu_errf(err, MU_E_PARSE, "line 1: column '%s' missing (%s layout)",
                           col_names[req[i]], sim_format_name(t->format));
    if (t->format != SIM_FORMAT_MUSTER)
        return 0; /* published lists carry more columns than we read */
    for (int i = 0; i < n; i++) {
        int c = 0;
        while (c <= C_END_MS && strcmp(fields[i], col_names[c]) != 0)
            c++;
        if (c > C_END_MS)
            return mu_errf(err, MU_E_PARSE, "line 1, column %d: unknown column '%.40s'", i + 1,
                           fields[i]);
    }
    return 0;
}

/* j's user index for the name `user` in its queue, numbered in order of first sight. */
static int user_index(struct sim_trace *t, struct sim_job *j, const char *user, struct mu_err *err)
{
    char key[128];
    void *v;

    (void)mu_snprintf(key, sizeof(key), "%d\x1f%.100s", j->queue, user);
    if (!t->users && !(t->users = mu_map_new()))
        return mu_errf(err, MU_E_NOMEM, "out of memory for the trace's users");
    if ((v = mu_map_get(t->users, key)) != NULL) {
        j->user = (int)((intptr_t)v - 1);
        return 0;
    }
    if (mu_map_put(t->users, key, (void *)(intptr_t)(t->nusers + 1), err) != 0)
        return -1;
    j->user = t->nusers++;
    return 0;
}

static int job_add(struct sim_trace *t, struct sim_job *j, const char *user, struct mu_err *err)
{
    if (user_index(t, j, user, err) != 0)
        return -1;
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 1024;
        struct sim_job *jobs = realloc(t->jobs, (size_t)cap * sizeof(*jobs));
        if (!jobs)
            return mu_errf(err, MU_E_NOMEM, "out of memory for %d jobs", cap);
        t->jobs = jobs;
        t->cap = cap;
    }
    t->jobs[t->n++] = *j;
    return 0;
}

static int cmp_submit(const void *a, const void *b)
{
    const struct sim_job *x = a;
    const struct sim_job *y = b;
    if (x->submit_ms != y->submit_ms)
        return x->submit_ms < y->submit_ms ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* Every data line after the header; 0 or -1 with err. */
static int read_rows(struct sim_trace *t,
                     const struct sim_trace_opts *o,
                     const char *text,
                     size_t len,
                     size_t pos,
                     const int *at,
                     char *buf,
                     char **fields,
                     struct mu_err *err)
{
    const char *line;
    size_t n;
    int lineno = 1;

    while (sim_csv_next_line(text, len, &pos, &line, &n)) {
        struct row r = { .t = t, .o = o, .fields = fields, .at = at, .line = ++lineno };
        struct sim_job j;
        int rc;
        if (n == 0)
            continue;
        if (n > SIM_LINE_MAX)
            return mu_errf(err, MU_E_TOOBIG, "line %d: longer than %d bytes", lineno, SIM_LINE_MAX);
        if (++t->rows > SIM_TRACE_MAX_ROWS)
            return mu_errf(err, MU_E_TOOBIG, "line %d: more than %d rows", lineno,
                           SIM_TRACE_MAX_ROWS);
        memcpy(buf, line, n);
        buf[n] = '\0';
        if (memchr(line, '\0', n)) {
            row_skip(&r, "NUL byte in the line", -1, "not text");
            continue;
        }
        if (sim_csv_split(buf, fields, SIM_MAX_COLUMNS, &r.nfields, err) != 0) {
            row_skip(&r, "malformed CSV", -1, "%s", err->msg);
            continue;
        }
        if (t->format == SIM_FORMAT_MUSTER)
            rc = read_muster(&r, &j);
        else if (t->format == SIM_FORMAT_PHILLY)
            rc = read_philly(&r, &j);
        else
            rc = read_alibaba(&r, &j);
        if (rc == 0 && job_add(t, &j, field(&r, C_USER), err) != 0)
            return -1;
    }
    return 0;
}

struct sim_trace *sim_trace_parse(const char *text,
                                  size_t len,
                                  const struct sim_trace_opts *o,
                                  struct mu_err *err)
{
    struct sim_trace *t = NULL;
    char *buf = NULL;
    char **fields = NULL;
    int at[C_NCOLS];
    const char *line;
    size_t n, pos = 0;
    int nf;
    int rc = -1;

    if (!o || !o->cfg || o->gpus_per_node < 1 || o->gpus_per_node > SCHED_MAX_GPUS_NODE) {
        mu_errf(err, MU_E_INVAL, "invalid trace options");
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    buf = malloc(SIM_LINE_MAX + 1);
    fields = calloc(SIM_MAX_COLUMNS, sizeof(*fields));
    if (!t || !buf || !fields) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    if (!sim_csv_next_line(text, len, &pos, &line, &n) || n == 0) {
        mu_errf(err, MU_E_PARSE, "line 1: empty, expected a header");
        goto out;
    }
    if (n > SIM_LINE_MAX || memchr(line, '\0', n)) {
        mu_errf(err, MU_E_PARSE, "line 1: not a CSV header");
        goto out;
    }
    memcpy(buf, line, n);
    buf[n] = '\0';
    if (sim_csv_split(buf, fields, SIM_MAX_COLUMNS, &nf, err) != 0) {
        mu_err_prefix(err, "line 1, ");
        goto out;
    }
    if (read_header(t, fields, nf, at, err) != 0
        || read_rows(t, o, text, len, pos, at, buf, fields, err) != 0)
        goto out;
    if (t->n > 0) {
        int64_t t0_ms;
        for (int i = 0; i < t->n; i++)
            if (t->jobs[i].submit_ms < 0)
                t->jobs[i].submit_ms = t->jobs[i].submit_s * 1000;
        qsort(t->jobs, (size_t)t->n, sizeof(*t->jobs), cmp_submit);
        /* The clock starts at the first submission's whole second, so that now_s = now_ms /
         * 1000 changes at the same instants as musterd's in a replay of its record. */
        t0_ms = t->jobs[0].submit_ms / 1000 * 1000;
        for (int i = 0; i < t->n; i++) {
            struct sim_job *j = &t->jobs[i];
            j->submit_ms -= t0_ms;
            j->submit_s = j->submit_ms / 1000;
            if (j->end_ms >= 0)
                j->end_ms -= t0_ms;
        }
    }
    rc = 0;
out:
    free(fields);
    free(buf);
    if (rc != 0) {
        sim_trace_free(t);
        return NULL;
    }
    return t;
}

struct sim_trace *sim_trace_load(const char *path,
                                 const struct sim_trace_opts *o,
                                 struct mu_err *err)
{
    size_t len = 0;
    char *text = mu_file_read(path, SIM_TRACE_MAX_BYTES, &len, err);
    struct sim_trace *t;

    if (!text)
        return NULL;
    t = sim_trace_parse(text, len, o, err);
    if (!t)
        mu_err_prefix(err, "%s: ", path);
    free(text);
    return t;
}

void sim_trace_free(struct sim_trace *t)
{
    if (!t)
        return;
    free(t->jobs);
    mu_map_free(t->users);
    free(t);
}

enum sim_format sim_trace_format(const struct sim_trace *t)
{
    return t->format;
}

int sim_trace_count(const struct sim_trace *t)
{
    return t->n;
}

int sim_trace_users(const struct sim_trace *t)
{
    return t->nusers;
}

const struct sim_job *sim_trace_jobs(const struct sim_trace *t)
{
    return t->jobs;
}

int sim_trace_rows(const struct sim_trace *t)
{
    return t->rows;
}

int sim_trace_rounded(const struct sim_trace *t)
{
    return t->rounded;
}

int sim_trace_skip_kinds(const struct sim_trace *t)
{
    return t->nskips;
}

int sim_trace_skip_count(const struct sim_trace *t, int kind)
{
    return kind >= 0 && kind < t->nskips ? t->skips[kind].count : 0;
}

const char *sim_trace_skip_example(const struct sim_trace *t, int kind)
{
    return kind >= 0 && kind < t->nskips ? t->skips[kind].example : "";
}

/* SPDX-License-Identifier: MIT */
/*
 * musterctl history (issue #47, Slurm's sacct): finished jobs from the job history, the SQLite
 * file musterd's archiver writes (history/hist.h), so it answers after a job left Redis and
 * without a musterd or a Redis at all.  The file: --history, else MUSTER_HISTORY, else the
 * config's "history": {"sqlite": ...} (--config).  Opened read-only.
 */
#include "cli/internal.h"

#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"
#include "history/hist.h"

#include "common/mu_banned.h"

#define DAY_MS (86400LL * 1000)

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    int64_t era;
    int64_t yoe;
    int64_t doy;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* --since/--until: "30m", "2h", "7d" (that long ago), "YYYY-MM-DD" (UTC midnight) or ms since
 * the epoch.  0 or -1. */
static int when_parse(const char *text, uint64_t now_ms, int64_t *out)
{
    size_t len = strlen(text);
    int64_t n;
    char num[32];

    if (len >= 2 && len < sizeof(num) && strchr("smhd", text[len - 1])) {
        static const int64_t unit_ms[] = { 1000, 60000, 3600000, 86400000 };
        memcpy(num, text, len - 1);
        num[len - 1] = '\0';
        if (mu_parse_i64(num, 0, 100000000, &n, NULL) != 0)
            return -1;
        *out = (int64_t)now_ms - n * unit_ms[strchr("smhd", text[len - 1]) - "smhd"];
        return 0;
    }
    if (len == 10 && text[4] == '-' && text[7] == '-') {
        int64_t y;
        int64_t m;
        int64_t d;
        char part[5];
        memcpy(part, text, 4);
        part[4] = '\0';
        if (mu_parse_i64(part, 1970, 9999, &y, NULL) != 0)
            return -1;
        memcpy(part, text + 5, 2);
        part[2] = '\0';
        if (mu_parse_i64(part, 1, 12, &m, NULL) != 0)
            return -1;
        memcpy(part, text + 8, 2);
        if (mu_parse_i64(part, 1, 31, &d, NULL) != 0)
            return -1;
        *out = days_from_civil(y, m, d) * DAY_MS;
        return 0;
    }
    return mu_parse_i64(text, 0, INT64_MAX, out, NULL);
}

/* The history file: flag > environment > config; NULL (printed) when none is named. */
static const char *history_path(struct ctl *ctl, const struct ctl_args *args, struct cfg *c)
{
    const char *flag = ctl_args_get(ctl, args, "history");
    const char *env = getenv("MUSTER_HISTORY");
    struct mu_err err = { 0, "" };

    if (flag)
        return flag;
    if (env && env[0])
        return env;
    if (ctl->config) {
        if (cfg_load_file(c, ctl->config, &err) != 0) {
            ctl_fail(ctl, "%s", err.msg);
            return NULL;
        }
        if (c->history_sqlite[0])
            return c->history_sqlite;
    }
    ctl_usage(ctl, "no history file: give --history FILE, MUSTER_HISTORY or --config with "
                   "\"history\": {\"sqlite\": PATH}");
    return NULL;
}

static void num_text(int64_t v, char *buf, size_t size)
{
    if (v == HIST_NONE)
        (void)snprintf(buf, size, "-");
    else
        (void)snprintf(buf, size, "%lld", (long long)v);
}

/* "1h02m", "3m04s", "12s" of ms; "-" when unknown. */
static void dur_text(int64_t ms, char *buf, size_t size)
{
    int64_t s = ms / 1000;
    if (ms == HIST_NONE || ms < 0)
        (void)snprintf(buf, size, "-");
    else if (s >= 3600)
        (void)snprintf(buf, size, "%lldh%02lldm", (long long)(s / 3600),
                       (long long)(s % 3600 / 60));
    else if (s >= 60)
        (void)snprintf(buf, size, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    else
        (void)snprintf(buf, size, "%llds", (long long)s);
}

struct out {
    struct ctl *ctl;
    struct ctl_table *t; /* table output */
    cJSON *arr;          /* json output */
    bool header_done;    /* csv output */
    bool nomem;
};

static const char *const csv_cols[] = { "id",
                                        "attempt",
                                        "array_job",
                                        "array_index",
                                        "name",
                                        "user",
                                        "queue",
                                        "nodes",
                                        "tasks",
                                        "gpus",
                                        "submitted_ms",
                                        "started_ms",
                                        "ended_ms",
                                        "waited_ms",
                                        "state",
                                        "exit_code",
                                        "reason",
                                        "gpu_seconds",
                                        "lost_gpu_seconds",
                                        "failures" };

static void csv_cell(const char *s)
{
    if (!s) {
        (void)fputs("", stdout);
        return;
    }
    if (!strpbrk(s, ",\"\r\n")) {
        (void)fputs(s, stdout);
        return;
    }
    (void)putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            (void)putchar('"');
        (void)putchar(*s);
    }
    (void)putchar('"');
}

/* The row's columns as text, in csv_cols order (buf holds the numbers). */
static void row_texts(const struct hist_job *j, const char **v, char (*buf)[32])
{
    num_text(j->attempt, buf[0], 32);
    num_text(j->array_index, buf[1], 32);
    num_text(j->tasks, buf[2], 32);
    num_text(j->gpus, buf[3], 32);
    num_text(j->submitted_ms, buf[4], 32);
    num_text(j->started_ms, buf[5], 32);
    num_text(j->ended_ms, buf[6], 32);
    num_text(j->waited_ms, buf[7], 32);
    num_text(j->exit_code, buf[8], 32);
    num_text(j->failures, buf[9], 32);
    (void)snprintf(buf[10], 32, "%.3f", j->gpu_seconds < 0 ? 0 : j->gpu_seconds);
    (void)snprintf(buf[11], 32, "%.3f", j->lost_gpu_seconds < 0 ? 0 : j->lost_gpu_seconds);
    const char *vals[] = { j->id,    buf[0], j->array_job, buf[1],  j->name, j->user, j->queue,
                           j->nodes, buf[2], buf[3],       buf[4],  buf[5],  buf[6],  buf[7],
                           j->state, buf[8], j->reason,    buf[10], buf[11], buf[9] };
    memcpy(v, vals, sizeof(vals));
}

static int row_csv(struct out *o, const struct hist_job *j)
{
    const char *v[MU_ARRAY_LEN(csv_cols)];
    char buf[12][32];

    if (!o->header_done) {
        for (size_t i = 0; i < MU_ARRAY_LEN(csv_cols); i++)
            (void)printf("%s%s", i ? "," : "", csv_cols[i]);
        (void)putchar('\n');
        o->header_done = true;
    }
    row_texts(j, v, buf);
    for (size_t i = 0; i < MU_ARRAY_LEN(csv_cols); i++) {
        if (i)
            (void)putchar(',');
        csv_cell(v[i] && strcmp(v[i], "-") != 0 ? v[i] : NULL);
    }
    (void)putchar('\n');
    return 0;
}

static void json_int(cJSON *o, const char *k, int64_t v)
{
    if (v != HIST_NONE)
        (void)cJSON_AddNumberToObject(o, k, (double)v);
}

static void json_text(cJSON *o, const char *k, const char *v)
{
    if (v)
        (void)cJSON_AddStringToObject(o, k, v);
}

static int row_json(struct out *o, const struct hist_job *j)
{
    cJSON *r = cJSON_CreateObject();
    if (!r || !cJSON_AddItemToArray(o->arr, r)) {
        cJSON_Delete(r);
        o->nomem = true;
        return 1;
    }
    json_text(r, "id", j->id);
    json_int(r, "attempt", j->attempt);
    json_text(r, "array_job", j->array_job);
    json_int(r, "array_index", j->array_index);
    json_text(r, "name", j->name);
    json_text(r, "user", j->user);
    json_text(r, "queue", j->queue);
    json_text(r, "pools", j->pools);
    json_text(r, "nodes", j->nodes);
    json_int(r, "tasks", j->tasks);
    json_int(r, "gpus_per_task", j->gpus_per_task);
    json_int(r, "gpus", j->gpus);
    json_int(r, "submitted_ms", j->submitted_ms);
    json_int(r, "started_ms", j->started_ms);
    json_int(r, "ended_ms", j->ended_ms);
    json_int(r, "waited_ms", j->waited_ms);
    json_text(r, "state", j->state);
    json_int(r, "exit_code", j->exit_code);
    json_text(r, "reason", j->reason);
    if (j->gpu_seconds >= 0)
        (void)cJSON_AddNumberToObject(r, "gpu_seconds", j->gpu_seconds);
    if (j->lost_gpu_seconds >= 0)
        (void)cJSON_AddNumberToObject(r, "lost_gpu_seconds", j->lost_gpu_seconds);
    json_int(r, "checkpoints", j->checkpoints);
    json_int(r, "preemptions", j->preemptions);
    json_int(r, "failures", j->failures);
    json_text(r, "spec", j->spec);
    json_int(r, "archived_ms", j->archived_ms);
    return 0;
}

static int row_table(struct out *o, const struct hist_job *j)
{
    char gpus[32];
    char waited[32];
    char ran[32];
    char gpuh[32];
    char code[32];
    char ended[32];
    const char *cells[10];

    num_text(j->gpus, gpus, sizeof(gpus));
    dur_text(j->waited_ms, waited, sizeof(waited));
    dur_text(j->started_ms != HIST_NONE && j->ended_ms != HIST_NONE ? j->ended_ms - j->started_ms
                                                                    : HIST_NONE,
             ran, sizeof(ran));
    (void)snprintf(gpuh, sizeof(gpuh), "%.2f", j->gpu_seconds < 0 ? 0 : j->gpu_seconds / 3600);
    num_text(j->exit_code, code, sizeof(code));
    if (j->ended_ms != HIST_NONE)
        ctl_format_age(mu_time_wall_ms(), (uint64_t)j->ended_ms, ended, sizeof(ended));
    else
        (void)snprintf(ended, sizeof(ended), "-");
    cells[0] = j->id;
    cells[1] = j->name ? j->name : "-";
    cells[2] = j->user ? j->user : "-";
    cells[3] = j->queue ? j->queue : "-";
    cells[4] = j->state;
    cells[5] = gpus;
    cells[6] = waited;
    cells[7] = ran;
    cells[8] = gpuh;
    cells[9] = code;
    (void)ended;
    if (ctl_table_add(o->t, cells) != 0) {
        o->nomem = true;
        return 1;
    }
    return 0;
}

static int row(void *ctx, const struct hist_job *j)
{
    struct out *o = ctx;
    if (o->ctl->output == CTL_OUT_JSON)
        return row_json(o, j);
    if (o->ctl->output == CTL_OUT_CSV)
        return row_csv(o, j);
    return row_table(o, j);
}

static int filter_read(struct ctl *ctl, const struct ctl_args *args, struct hist_filter *f)
{
    static const char *const texts[] = { "user", "queue", "state", "name", "id", "array" };
    const char **dst[] = { &f->user, &f->queue, &f->state, &f->name, &f->id, &f->array };
    const char *since = ctl_args_get(ctl, args, "since");
    const char *until = ctl_args_get(ctl, args, "until");
    uint64_t now = mu_time_wall_ms();
    int64_t limit = 0;

    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < MU_ARRAY_LEN(texts); i++)
        *dst[i] = ctl_args_get(ctl, args, texts[i]);
    f->since_ms = HIST_NONE;
    f->until_ms = HIST_NONE;
    if (since && when_parse(since, now, &f->since_ms) != 0)
        return ctl_usage(ctl, "--since: expected 7d, 12h, 30m, YYYY-MM-DD or ms, got '%s'", since);
    if (until && when_parse(until, now, &f->until_ms) != 0)
        return ctl_usage(ctl, "--until: expected 7d, 12h, 30m, YYYY-MM-DD or ms, got '%s'", until);
    if (ctl_args_int(ctl, args, "limit", 1, INT64_MAX, &limit) != 0)
        return CTL_EXIT_USAGE;
    f->limit = limit;
    return CTL_EXIT_OK;
}

int ctl_cmd_history(struct ctl *ctl, const struct ctl_args *args)
{
    static const char *const headers[] = { "ID",   "NAME",   "USER",    "QUEUE",     "STATE",
                                           "GPUS", "WAITED", "ELAPSED", "GPU_HOURS", "EXIT" };
    struct cfg *c = calloc(1, sizeof(*c));
    struct hist *h = NULL;
    struct hist_filter f;
    struct out o = { .ctl = ctl };
    struct mu_err err = { 0, "" };
    const char *path;
    int rc = CTL_EXIT_FAIL;

    if (!c)
        return ctl_fail(ctl, "out of memory");
    cfg_init_defaults(c);
    path = history_path(ctl, args, c);
    if (!path) {
        rc = ctl->config && !getenv("MUSTER_HISTORY") ? CTL_EXIT_FAIL : CTL_EXIT_USAGE;
        goto out;
    }
    rc = filter_read(ctl, args, &f);
    if (rc != CTL_EXIT_OK)
        goto out;
    rc = CTL_EXIT_FAIL;
    h = hist_open(path, false, &err);
    if (!h) {
        ctl_fail(ctl, "%s", err.msg);
        goto out;
    }
    if (ctl->output == CTL_OUT_JSON)
        o.arr = cJSON_CreateArray();
    else if (ctl->output == CTL_OUT_TABLE)
        o.t = ctl_table_new(headers, MU_ARRAY_LEN(headers));
    if ((ctl->output == CTL_OUT_JSON && !o.arr) || (ctl->output == CTL_OUT_TABLE && !o.t)) {
        ctl_fail(ctl, "out of memory");
        goto out;
    }
    if (o.t) {
        ctl_table_set_flex(o.t, 1);
        ctl_table_set_state(o.t, 4);
    }
    if (hist_query(h, &f, row, &o, &err) != 0 || o.nomem) {
        ctl_fail(ctl, "%s", o.nomem ? "out of memory" : err.msg);
        goto out;
    }
    rc = CTL_EXIT_OK;
    if (o.arr)
        rc = ctl_json_print(ctl, o.arr);
    else if (o.t)
        ctl_table_print(o.t, ctl, stdout);
out:
    cJSON_Delete(o.arr);
    ctl_table_free(o.t);
    hist_free(h);
    free(c);
    return rc;
}

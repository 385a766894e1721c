/* SPDX-License-Identifier: MIT */
/*
 * Reading the history (`musterctl history`): one SELECT built from the filters, every value a
 * bound parameter (never pasted into the SQL), newest end first.
 */
#include "history/internal.h"

#include <string.h>

#include "common/mu.h"
#include "common/mu_banned.h"

#define SQL_MAX  1024
#define ARGS_MAX 12

/* The SELECT and its parameters: parameter i (from 1) is text[i - 1], or num[i - 1] when that
 * is NULL; a clause names its parameter as ?N, so it may use it twice. */
struct query {
    char sql[SQL_MAX];
    size_t len;
    const char *text[ARGS_MAX];
    int64_t num[ARGS_MAX];
    int n;
    char prefix[256]; /* --name's prefix, without its '*' */
};

/* Appends " WHERE "/" AND " and clause, with each "?" in it written as this parameter's ?N. */
/* Appends len bytes of text to q->sql; past SQL_MAX the query is marked too long (len =
 * SQL_MAX, which hist_query refuses). */
static void put_n(struct query *q, const char *text, size_t len)
{
    if (q->len >= sizeof(q->sql) || len >= sizeof(q->sql) - q->len) {
        q->len = sizeof(q->sql);
        return;
    }
    memcpy(q->sql + q->len, text, len);
    q->len += len;
    q->sql[q->len] = '\0';
}

static void put(struct query *q, const char *text)
{
    put_n(q, text, strlen(text));
}

static void put_num(struct query *q, long long v)
{
    char buf[32];
    (void)mu_snprintf(buf, sizeof(buf), "%lld", v);
    put(q, buf);
}

static void add(struct query *q, const char *clause, const char *text, int64_t num)
{
    if (q->n >= ARGS_MAX)
        return;
    q->text[q->n] = text;
    q->num[q->n] = num;
    q->n++;
    put(q, q->n > 1 ? " AND " : " WHERE ");
    for (const char *c = clause; *c; c++) {
        if (*c == '?') {
            put(q, "?");
            put_num(q, q->n);
        } else {
            put_n(q, c, 1);
        }
    }
}

static void build(struct query *q, const struct hist_filter *f)
{
    q->len = 0;
    put(q, "SELECT " HIST_COLS " FROM jobs");
    if (f->user)
        add(q, "user = ?", f->user, 0);
    if (f->queue)
        add(q, "queue = ?", f->queue, 0);
    if (f->state)
        add(q, "state = ?", f->state, 0);
    if (f->name) {
        size_t len = strlen(f->name);
        if (len && f->name[len - 1] == '*' && len - 1 < sizeof(q->prefix)) {
            memcpy(q->prefix, f->name, len - 1);
            q->prefix[len - 1] = '\0';
            add(q, "substr(name, 1, length(?)) = ?", q->prefix, 0);
        } else {
            add(q, "name = ?", f->name, 0);
        }
    }
    if (f->id)
        add(q, "(id = ? OR array_job = ?)", f->id, 0);
    if (f->array)
        add(q, "array_job = ?", f->array, 0);
    if (f->since_ms != HIST_NONE)
        add(q, "ended_ms >= ?", NULL, f->since_ms);
    if (f->until_ms != HIST_NONE)
        add(q, "ended_ms < ?", NULL, f->until_ms);
    put(q, " ORDER BY ended_ms DESC, id DESC, attempt DESC");
    if (f->limit != HIST_NONE && f->limit > 0) {
        put(q, " LIMIT ");
        put_num(q, (long long)f->limit);
    }
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i); /* NULL for SQL NULL */
}

static int64_t col_int(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? HIST_NONE : sqlite3_column_int64(st, i);
}

static double col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_double(st, i);
}

static void row_read(sqlite3_stmt *st, struct hist_job *j)
{
    int i = 0;
    j->id = col_text(st, i++);
    j->attempt = col_int(st, i++);
    j->array_job = col_text(st, i++);
    j->array_index = col_int(st, i++);
    j->name = col_text(st, i++);
    j->user = col_text(st, i++);
    j->queue = col_text(st, i++);
    j->pools = col_text(st, i++);
    j->nodes = col_text(st, i++);
    j->tasks = col_int(st, i++);
    j->gpus_per_task = col_int(st, i++);
    j->gpus = col_int(st, i++);
    j->submitted_ms = col_int(st, i++);
    j->started_ms = col_int(st, i++);
    j->ended_ms = col_int(st, i++);
    j->waited_ms = col_int(st, i++);
    j->state = col_text(st, i++);
    j->exit_code = col_int(st, i++);
    j->reason = col_text(st, i++);
    j->gpu_seconds = col_real(st, i++);
    j->lost_gpu_seconds = col_real(st, i++);
    j->checkpoints = col_int(st, i++);
    j->preemptions = col_int(st, i++);
    j->price = col_real(st, i++);
    j->failures = col_int(st, i++);
    j->spec = col_text(st, i++);
    j->archived_ms = col_int(st, i++);
    (void)MU_NEVER(i != HIST_NCOLS);
}

int hist_query(
    struct hist *h, const struct hist_filter *f, hist_row_fn *fn, void *ctx, struct mu_err *err)
{
    struct query q = { .len = 0 };
    sqlite3_stmt *st = NULL;
    int rc = -1;
    int step;

    build(&q, f);
    if (q.len >= sizeof(q.sql))
        return mu_errf(err, MU_E_TOOBIG, "history: query too long");
    if (sqlite3_prepare_v2(hist_db(h), q.sql, -1, &st, NULL) != SQLITE_OK)
        return hist_fail(h, err, "preparing the query");
    for (int i = 0; i < q.n; i++) {
        int bad = q.text[i] ? sqlite3_bind_text(st, i + 1, q.text[i], -1, SQLITE_STATIC)
                            : sqlite3_bind_int64(st, i + 1, q.num[i]);
        if (bad != SQLITE_OK) {
            hist_fail(h, err, "binding the query");
            goto out;
        }
    }
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct hist_job j;
        row_read(st, &j);
        if (fn(ctx, &j) != 0)
            break;
    }
    if (step != SQLITE_ROW && step != SQLITE_DONE) {
        hist_fail(h, err, "reading rows");
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(st);
    return rc;
}

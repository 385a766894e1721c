/* SPDX-License-Identifier: MIT */
/*
 * A spot availability trace (sim.h): how many nodes of each spot pool are up from a tick on, as
 * published spot-capacity histories give it, instead of the Poisson model of --spot-rate.  The
 * file is small and every row matters, so unlike a job trace a bad row is an error naming its
 * line and column rather than a skipped row.  Rows come back sorted by tick (stable, so a later
 * row of one tick wins); the replay turns each into notices or returning nodes (engine.c).
 */
#include "sim/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

struct sim_avail_trace {
    struct sim_avail *rows;
    int n, cap;
};

enum { A_T_S, A_POOL, A_NODES, A_NCOLS };
static const char *const avail_cols[A_NCOLS] = { "t_s", "pool", "nodes" };

/* The header's columns into at[]; 0 or -1 with err. */
static int avail_header(char **f, int nf, int *at, struct mu_err *err)
{
    for (int c = 0; c < A_NCOLS; c++)
        at[c] = -1;
    for (int i = 0; i < nf; i++) {
        int c = 0;
        while (c < A_NCOLS && strcmp(f[i], avail_cols[c]) != 0)
            c++;
        if (c == A_NCOLS)
            return mu_errf(err, MU_E_PARSE,
                           "line 1, column %d: unknown column '%.40s'\nhint: a spot availability "
                           "trace has t_s, pool, nodes",
                           i + 1, f[i]);
        if (at[c] >= 0)
            return mu_errf(err, MU_E_PARSE, "line 1, column %d: '%s' appears twice", i + 1, f[i]);
        at[c] = i;
    }
    for (int c = 0; c < A_NCOLS; c++)
        if (at[c] < 0)
            return mu_errf(err, MU_E_PARSE, "line 1: column '%s' missing", avail_cols[c]);
    return 0;
}

/* One data row into *a; 0 or -1 with err naming the column. */
static int avail_row(
    char **f, int nf, const int *at, const struct cfg *cfg, struct sim_avail *a, struct mu_err *err)
{
    double v;
    const struct cfg_pool *pool;
    const char *name;

    for (int c = 0; c < A_NCOLS; c++)
        if (at[c] >= nf || f[at[c]][0] == '\0')
            return mu_errf(err, MU_E_PARSE, "column '%s': empty, a value is required",
                           avail_cols[c]);
    if (mu_parse_double(f[at[A_T_S]], 0, 1e12, &v, err) != 0) {
        mu_err_prefix(err, "column 't_s': ");
        return -1;
    }
    a->t_s = (int64_t)floor(v);
    name = f[at[A_POOL]];
    pool = cfg_pool_find(cfg, name);
    if (!pool)
        return mu_errf(err, MU_E_PARSE, "column 'pool': pool '%.40s' is not in the config", name);
    if (pool->capacity != CFG_CAPACITY_SPOT)
        return mu_errf(err, MU_E_PARSE, "column 'pool': pool '%.40s' is not a spot pool", name);
    a->pool = (int)(pool - cfg->pools);
    if (mu_parse_double(f[at[A_NODES]], 0, 100000, &v, err) != 0) {
        mu_err_prefix(err, "column 'nodes': ");
        return -1;
    }
    if (v != floor(v))
        return mu_errf(err, MU_E_PARSE, "column 'nodes': expected a whole number, got '%.40s'",
                       f[at[A_NODES]]);
    a->nodes = (int)v;
    return 0;
}

static int avail_push(struct sim_avail_trace *t, const struct sim_avail *a, struct mu_err *err)
{
    if (t->n >= SIM_AVAIL_MAX_ROWS)
        return mu_errf(err, MU_E_TOOBIG, "more than %d rows", SIM_AVAIL_MAX_ROWS);
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 256;
        struct sim_avail *rows = realloc(t->rows, (size_t)cap * sizeof(*rows));
        if (!rows)
            return mu_errf(err, MU_E_NOMEM, "out of memory for %d rows", cap);
        t->rows = rows;
        t->cap = cap;
    }
    t->rows[t->n++] = *a;
    return 0;
}

static int cmp_tick(const void *x, const void *y)
{
    const struct sim_avail *a = x;
    const struct sim_avail *b = y;
    if (a->t_s != b->t_s)
        return a->t_s < b->t_s ? -1 : 1;
    return (a->line > b->line) - (a->line < b->line);
}

struct sim_avail_trace *sim_avail_parse(const char *text,
                                        size_t len,
                                        const struct cfg *cfg,
                                        struct mu_err *err)
{
    struct sim_avail_trace *t = calloc(1, sizeof(*t));
    char *buf = malloc(SIM_LINE_MAX + 1);
    char *f[SIM_MAX_COLUMNS];
    int at[A_NCOLS];
    size_t pos = 0;
    const char *line;
    size_t n;
    int lineno = 0;
    int rc = -1;

    if (!t || !buf) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    while (sim_csv_next_line(text, len, &pos, &line, &n)) {
        int nf = 0;
        lineno++;
        if (n == 0 && lineno > 1)
            continue; /* a blank line */
        if (n > SIM_LINE_MAX) {
            mu_errf(err, MU_E_TOOBIG, "line %d: longer than %d bytes", lineno, SIM_LINE_MAX);
            goto out;
        }
        memcpy(buf, line, n);
        buf[n] = '\0';
        if (sim_csv_split(buf, f, SIM_MAX_COLUMNS, &nf, err) != 0) {
            mu_err_prefix(err, "line %d, ", lineno);
            goto out;
        }
        if (lineno == 1) {
            if (avail_header(f, nf, at, err) != 0)
                goto out;
            continue;
        }
        {
            struct sim_avail a = { .line = lineno };
            if (avail_row(f, nf, at, cfg, &a, err) != 0 || avail_push(t, &a, err) != 0) {
                mu_err_prefix(err, "line %d, ", lineno);
                goto out;
            }
        }
    }
    if (lineno == 0) {
        mu_errf(err, MU_E_PARSE, "line 1: empty, expected a header (t_s, pool, nodes)");
        goto out;
    }
    if (t->n > 0)
        qsort(t->rows, (size_t)t->n, sizeof(*t->rows), cmp_tick);
    rc = 0;
out:
    free(buf);
    if (rc != 0) {
        sim_avail_free(t);
        return NULL;
    }
    return t;
}

struct sim_avail_trace *sim_avail_load(const char *path, const struct cfg *cfg, struct mu_err *err)
{
    size_t len = 0;
    char *text = mu_file_read(path, SIM_TRACE_MAX_BYTES, &len, err);
    struct sim_avail_trace *t;

    if (!text)
        return NULL;
    t = sim_avail_parse(text, len, cfg, err);
    if (!t)
        mu_err_prefix(err, "%s: ", path);
    free(text);
    return t;
}

void sim_avail_free(struct sim_avail_trace *t)
{
    if (!t)
        return;
    free(t->rows);
    free(t);
}

int sim_avail_count(const struct sim_avail_trace *t)
{
    return t->n;
}

const struct sim_avail *sim_avail_rows(const struct sim_avail_trace *t)
{
    return t->rows;
}

/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for history/ (issue #47) against a real SQLite file in a temporary directory: the
 * row made from a job's Redis hash (derived columns, bad input), one row per (id, attempt)
 * however often it is written, a rolled-back batch leaving nothing, the read-only open, the
 * schema version check, and every filter of `musterctl history`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "history/hist.h"

#include "common/mu_banned.h"

struct fixture {
    char dir[64];
    char path[128];
    struct hist *h;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct mu_err err = { 0, "" };

    assert_non_null(f);
    (void)mu_snprintf(f->dir, sizeof(f->dir), "/tmp/muster-hist-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    (void)mu_snprintf(f->path, sizeof(f->path), "%s/history.db", f->dir);
    f->h = hist_open(f->path, true, &err);
    assert_non_null(f->h);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char p[160];
    static const char *const suffixes[] = { "", "-wal", "-shm" };

    hist_free(f->h);
    for (size_t i = 0; i < MU_ARRAY_LEN(suffixes); i++) {
        (void)mu_snprintf(p, sizeof(p), "%s%s", f->path, suffixes[i]);
        (void)unlink(p);
    }
    (void)rmdir(f->dir);
    free(f);
    return 0;
}

/* A finished job's hash as musterd writes it. */
static void job_fields(struct hist_job *j,
                       const char *id,
                       const char *user,
                       const char *state,
                       const char *ended,
                       const char *array_job)
{
    const char *keys[] = { "id",
                           "name",
                           "user",
                           "queue",
                           "tasks",
                           "gpus_per_task",
                           "submitted_at",
                           "started_at",
                           "finished_at",
                           "state",
                           "attempt",
                           "exit_code",
                           "lost_gpu_seconds",
                           "array_job",
                           "reason" };
    const char *values[] = { id,    "train", user, "default", "2",   "4",       "1000", "3000",
                             ended, state,   "1",  "0",       "1.5", array_job, "" };
    struct mu_err err = { 0, "" };
    int n = array_job ? 15 : 14;

    if (!array_job) {
        keys[13] = "reason";
        values[13] = "why";
    }
    assert_int_equal(hist_job_from_fields(j, NULL, keys, values, n, &err), 0);
}

static void test_from_fields(void **state)
{
    struct hist_job j;
    const char *keys[] = { "id", "state", "tasks", "attempt" };
    const char *values[] = { "1-0", "REJECTED", "x", "" };
    const char *nokeys[] = { "state" };
    const char *novals[] = { "FAILED" };
    struct mu_err err = { 0, "" };

    (void)state;
    job_fields(&j, "1-0", "alice", "SUCCEEDED", "13000", NULL);
    assert_string_equal(j.id, "1-0");
    assert_int_equal(j.gpus, 8);
    assert_int_equal(j.waited_ms, 2000);
    assert_true(j.gpu_seconds > 79.99 && j.gpu_seconds < 80.01); /* 8 GPUs x 10 s */
    assert_true(j.lost_gpu_seconds > 1.49 && j.lost_gpu_seconds < 1.51);
    assert_int_equal(j.exit_code, 0);
    assert_string_equal(j.reason, "why");
    assert_null(j.array_job);
    /* Bad numbers are unknown, a missing attempt is 0 (never started). */
    assert_int_equal(hist_job_from_fields(&j, NULL, keys, values, 4, &err), 0);
    assert_int_equal(j.tasks, HIST_NONE);
    assert_int_equal(j.attempt, 0);
    assert_int_equal(j.gpus, HIST_NONE);
    assert_true(j.gpu_seconds < 0);
    /* No id in the hash: the caller's, else refused. */
    assert_int_equal(hist_job_from_fields(&j, NULL, nokeys, novals, 1, &err), -1);
    assert_non_null(strstr(err.msg, "without an id"));
    assert_int_equal(hist_job_from_fields(&j, "9-0", nokeys, novals, 1, &err), 0);
    assert_string_equal(j.id, "9-0");
    assert_string_equal(j.state, "FAILED");
    /* No state: kept as UNKNOWN rather than left out. */
    assert_int_equal(hist_job_from_fields(&j, "9-0", novals, novals, 0, &err), 0);
    assert_string_equal(j.state, "UNKNOWN");
}

static int count(struct hist *h)
{
    int64_t n = -1;
    struct mu_err err = { 0, "" };
    assert_int_equal(hist_count(h, &n, &err), 0);
    return (int)n;
}

static void test_put_twice_one_row(void **state)
{
    struct fixture *f = *state;
    struct hist_job j;
    struct mu_err err = { 0, "" };

    job_fields(&j, "1-0", "alice", "SUCCEEDED", "13000", NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hist_begin(f->h, &err), 0);
        assert_int_equal(hist_job_put(f->h, &j, &err), 0);
        assert_int_equal(hist_commit(f->h, &err), 0);
    }
    assert_int_equal(count(f->h), 1);
    /* A batch rolled back leaves nothing. */
    job_fields(&j, "2-0", "bob", "FAILED", "14000", NULL);
    assert_int_equal(hist_begin(f->h, &err), 0);
    assert_int_equal(hist_job_put(f->h, &j, &err), 0);
    hist_rollback(f->h);
    assert_int_equal(count(f->h), 1);
}

struct seen {
    int n;
    char ids[16][32];
};

static int collect(void *ctx, const struct hist_job *j)
{
    struct seen *s = ctx;
    if (s->n < 16)
        (void)mu_snprintf(s->ids[s->n], sizeof(s->ids[0]), "%s", j->id);
    s->n++;
    return 0;
}

static int query_n(struct hist *h, const struct hist_filter *flt, struct seen *s)
{
    struct mu_err err = { 0, "" };
    memset(s, 0, sizeof(*s));
    assert_int_equal(hist_query(h, flt, collect, s, &err), 0);
    return s->n;
}

static void test_filters(void **state)
{
    struct fixture *f = *state;
    struct hist_job j;
    struct mu_err err = { 0, "" };
    struct seen s;
    struct hist_filter flt = { .since_ms = HIST_NONE, .until_ms = HIST_NONE, .limit = HIST_NONE };
    static const struct {
        const char *id, *user, *state, *ended, *array;
    } rows[] = {
        { "1-0", "alice", "SUCCEEDED", "10000", NULL },
        { "2-0", "bob", "FAILED", "20000", NULL },
        { "3-0", "alice", "SUCCEEDED", "30000", NULL },
        { "3-0_0", "alice", "SUCCEEDED", "25000", "3-0" },
        { "3-0_1", "alice", "SUCCEEDED", "26000", "3-0" },
    };

    assert_int_equal(hist_begin(f->h, &err), 0);
    for (size_t i = 0; i < MU_ARRAY_LEN(rows); i++) {
        job_fields(&j, rows[i].id, rows[i].user, rows[i].state, rows[i].ended, rows[i].array);
        assert_int_equal(hist_job_put(f->h, &j, &err), 0);
    }
    assert_int_equal(hist_commit(f->h, &err), 0);

    assert_int_equal(query_n(f->h, &flt, &s), 5);
    assert_string_equal(s.ids[0], "3-0"); /* newest end first */
    assert_string_equal(s.ids[4], "1-0");
    flt.user = "bob";
    assert_int_equal(query_n(f->h, &flt, &s), 1);
    flt.user = NULL;
    flt.state = "SUCCEEDED";
    assert_int_equal(query_n(f->h, &flt, &s), 4);
    flt.state = NULL;
    flt.id = "3-0";
    assert_int_equal(query_n(f->h, &flt, &s), 3);
    flt.id = NULL;
    flt.array = "3-0";
    assert_int_equal(query_n(f->h, &flt, &s), 2);
    flt.array = NULL;
    flt.since_ms = 20000;
    flt.until_ms = 26000;
    assert_int_equal(query_n(f->h, &flt, &s), 2); /* 20000 and 25000 */
    flt.since_ms = HIST_NONE;
    flt.until_ms = HIST_NONE;
    flt.name = "tra*";
    assert_int_equal(query_n(f->h, &flt, &s), 5);
    flt.name = "tra";
    assert_int_equal(query_n(f->h, &flt, &s), 0);
    flt.name = "train";
    flt.limit = 2;
    assert_int_equal(query_n(f->h, &flt, &s), 2);
    /* A quote in a filter is a value, never SQL. */
    flt.limit = HIST_NONE;
    flt.name = NULL;
    flt.user = "x' OR '1'='1";
    assert_int_equal(query_n(f->h, &flt, &s), 0);
}

static void test_open_read_only_and_versions(void **state)
{
    struct fixture *f = *state;
    struct mu_err err = { 0, "" };
    struct hist *ro;
    struct hist_job j;
    char other[160];
    sqlite3 *db = NULL;

    ro = hist_open(f->path, false, &err);
    assert_non_null(ro);
    job_fields(&j, "1-0", "alice", "SUCCEEDED", "13000", NULL);
    assert_int_equal(hist_job_put(ro, &j, &err), -1);
    assert_non_null(strstr(err.msg, "read-only"));
    hist_free(ro);
    /* A missing file is an error when reading, not made. */
    (void)mu_snprintf(other, sizeof(other), "%s/none.db", f->dir);
    assert_null(hist_open(other, false, &err));
    assert_int_not_equal(access(other, F_OK), 0);
    /* A newer schema is refused, with a hint. */
    hist_free(f->h);
    f->h = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL), SQLITE_OK);
    (void)sqlite3_close(db);
    assert_null(hist_open(f->path, true, &err));
    assert_non_null(strstr(err.msg, "newer"));
    /* A file that is no history is refused when reading. */
    assert_int_equal(sqlite3_open(other, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t (x)", NULL, NULL, NULL), SQLITE_OK);
    (void)sqlite3_close(db);
    assert_null(hist_open(other, false, &err));
    assert_non_null(strstr(err.msg, "not a muster history"));
    (void)unlink(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_fields),
        cmocka_unit_test_setup_teardown(test_put_twice_one_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_read_only_and_versions, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

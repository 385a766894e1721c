/* SPDX-License-Identifier: MIT */
/*
 * The history's SQLite file: schema, writes and queries (hist.h).  WAL mode, so that
 * `musterctl history` reads while musterd's archiver writes; a busy timeout, so that either
 * waits out the other's lock instead of failing.  Every write is INSERT OR REPLACE keyed by
 * (id, attempt): the archiver may write a job again after a crash, never twice.
 */
#include "history/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu_banned.h"

struct hist {
    sqlite3 *db;
    sqlite3_stmt *put; /* the prepared INSERT OR REPLACE */
    char path[512];
};

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id TEXT NOT NULL, attempt INTEGER NOT NULL, array_job TEXT, array_index INTEGER,"
    " name TEXT, user TEXT, queue TEXT, pools TEXT, nodes TEXT,"
    " tasks INTEGER, gpus_per_task INTEGER, gpus INTEGER,"
    " submitted_ms INTEGER, started_ms INTEGER, ended_ms INTEGER, waited_ms INTEGER,"
    " state TEXT NOT NULL, exit_code INTEGER, reason TEXT,"
    " gpu_seconds REAL, lost_gpu_seconds REAL, checkpoints INTEGER, preemptions INTEGER,"
    " price REAL, failures INTEGER, spec TEXT, archived_ms INTEGER,"
    " PRIMARY KEY (id, attempt));"
    "CREATE INDEX IF NOT EXISTS jobs_ended ON jobs (ended_ms);"
    "CREATE INDEX IF NOT EXISTS jobs_user_ended ON jobs (user, ended_ms);"
    "CREATE INDEX IF NOT EXISTS jobs_array ON jobs (array_job);";

static const char put_sql[] = "INSERT OR REPLACE INTO jobs (" HIST_COLS ") VALUES "
                              "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";

sqlite3 *hist_db(struct hist *h)
{
    return h->db;
}

int hist_fail(struct hist *h, struct mu_err *err, const char *what)
{
    return mu_errf(err, MU_E_IO, "history '%s': %s: %s", h->path, what, sqlite3_errmsg(h->db));
}

static int exec(struct hist *h, const char *sql, struct mu_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(h->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        mu_errf(err, MU_E_IO, "history '%s': %s", h->path, msg ? msg : "sqlite error");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int user_version(struct hist *h, int64_t *v, struct mu_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    if (sqlite3_prepare_v2(h->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return hist_fail(h, err, "reading the schema version");
    if (sqlite3_step(st) != SQLITE_ROW) {
        hist_fail(h, err, "reading the schema version");
        goto out;
    }
    *v = sqlite3_column_int64(st, 0);
    rc = 0;
out:
    sqlite3_finalize(st);
    return rc;
}

/* WAL, the busy timeout, and the schema (made when absent, refused when newer than ours). */
static int prepare_file(struct hist *h, bool create, struct mu_err *err)
{
    int64_t ver = 0;

    if (sqlite3_busy_timeout(h->db, HIST_BUSY_MS) != SQLITE_OK)
        return hist_fail(h, err, "setting the busy timeout");
    if (user_version(h, &ver, err) != 0)
        return -1;
    if (ver > HIST_SCHEMA_VER)
        return mu_errf(err, MU_E_STATE,
                       "history '%s': schema version %lld is newer than this program's (%d)\n"
                       "hint: upgrade muster",
                       h->path, (long long)ver, HIST_SCHEMA_VER);
    if (!create)
        return ver == HIST_SCHEMA_VER
                   ? 0
                   : mu_errf(err, MU_E_STATE, "history '%s': not a muster history (no schema)",
                             h->path);
    if (exec(h, "PRAGMA journal_mode=WAL", err) != 0
        || exec(h, "PRAGMA synchronous=NORMAL", err) != 0)
        return -1;
    if (ver == HIST_SCHEMA_VER)
        return 0;
    if (exec(h, schema_sql, err) != 0 || exec(h, "PRAGMA user_version=1", err) != 0)
        return -1;
    return 0;
}

struct hist *hist_open(const char *path, bool create, struct mu_err *err)
{
    struct hist *h = calloc(1, sizeof(*h));
    int flags = create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;

    if (!h) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        return NULL;
    }
    if (mu_strlcpy(h->path, path, sizeof(h->path)) >= sizeof(h->path)) {
        mu_errf(err, MU_E_INVAL, "history: path too long: '%.64s...'", path);
        goto fail;
    }
    if (sqlite3_open_v2(path, &h->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        if (!h->db) {
            mu_errf(err, MU_E_NOMEM, "out of memory");
            goto fail;
        }
        hist_fail(h, err, "cannot open");
        goto fail;
    }
    if (prepare_file(h, create, err) != 0)
        goto fail;
    if (create && sqlite3_prepare_v2(h->db, put_sql, -1, &h->put, NULL) != SQLITE_OK) {
        hist_fail(h, err, "preparing the insert");
        goto fail;
    }
    return h;
fail:
    hist_free(h);
    return NULL;
}

void hist_free(struct hist *h)
{
    if (!h)
        return;
    sqlite3_finalize(h->put);
    (void)sqlite3_close(h->db);
    free(h);
}

int hist_begin(struct hist *h, struct mu_err *err)
{
    return exec(h, "BEGIN IMMEDIATE", err);
}

int hist_commit(struct hist *h, struct mu_err *err)
{
    return exec(h, "COMMIT", err);
}

void hist_rollback(struct hist *h)
{
    if (!sqlite3_get_autocommit(h->db))
        (void)sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL);
}

static int bind_text(sqlite3_stmt *st, int i, const char *v)
{
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static int bind_int(sqlite3_stmt *st, int i, int64_t v)
{
    return v == HIST_NONE ? sqlite3_bind_null(st, i) : sqlite3_bind_int64(st, i, v);
}

static int bind_real(sqlite3_stmt *st, int i, double v)
{
    return v < 0 ? sqlite3_bind_null(st, i) : sqlite3_bind_double(st, i, v);
}

int hist_job_put(struct hist *h, const struct hist_job *j, struct mu_err *err)
{
    sqlite3_stmt *st = h->put;
    int i = 1;
    int bad = 0;

    if (!st)
        return mu_errf(err, MU_E_STATE, "history '%s': opened read-only", h->path);
    (void)sqlite3_reset(st);
    bad |= bind_text(st, i++, j->id);
    bad |= bind_int(st, i++, j->attempt);
    bad |= bind_text(st, i++, j->array_job);
    bad |= bind_int(st, i++, j->array_index);
    bad |= bind_text(st, i++, j->name);
    bad |= bind_text(st, i++, j->user);
    bad |= bind_text(st, i++, j->queue);
    bad |= bind_text(st, i++, j->pools);
    bad |= bind_text(st, i++, j->nodes);
    bad |= bind_int(st, i++, j->tasks);
    bad |= bind_int(st, i++, j->gpus_per_task);
    bad |= bind_int(st, i++, j->gpus);
    bad |= bind_int(st, i++, j->submitted_ms);
    bad |= bind_int(st, i++, j->started_ms);
    bad |= bind_int(st, i++, j->ended_ms);
    bad |= bind_int(st, i++, j->waited_ms);
    bad |= bind_text(st, i++, j->state);
    bad |= bind_int(st, i++, j->exit_code);
    bad |= bind_text(st, i++, j->reason);
    bad |= bind_real(st, i++, j->gpu_seconds);
    bad |= bind_real(st, i++, j->lost_gpu_seconds);
    bad |= bind_int(st, i++, j->checkpoints);
    bad |= bind_int(st, i++, j->preemptions);
    bad |= bind_real(st, i++, j->price);
    bad |= bind_int(st, i++, j->failures);
    bad |= bind_text(st, i++, j->spec);
    bad |= bind_int(st, i++, j->archived_ms);
    if (MU_NEVER(i != HIST_NCOLS + 1) || bad != SQLITE_OK)
        return hist_fail(h, err, "binding a row");
    if (sqlite3_step(st) != SQLITE_DONE) {
        hist_fail(h, err, "writing a row");
        (void)sqlite3_reset(st);
        return -1;
    }
    (void)sqlite3_reset(st);
    (void)sqlite3_clear_bindings(st);
    return 0;
}

int hist_count(struct hist *h, int64_t *n, struct mu_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    if (sqlite3_prepare_v2(h->db, "SELECT count(*) FROM jobs", -1, &st, NULL) != SQLITE_OK)
        return hist_fail(h, err, "counting rows");
    if (sqlite3_step(st) != SQLITE_ROW) {
        hist_fail(h, err, "counting rows");
        goto out;
    }
    *n = sqlite3_column_int64(st, 0);
    rc = 0;
out:
    sqlite3_finalize(st);
    return rc;
}

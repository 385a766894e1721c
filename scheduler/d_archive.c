/* SPDX-License-Identifier: MIT */
/*
 * The job history's archiver (issue #47, d_loop.h): a thread beside musterd's loop.  It shares
 * no memory with the loop but what d_archive_start copies for it; it talks to Redis on its own
 * connection (fenced by the same lease token, so a musterd that lost the lease changes nothing)
 * and to SQLite on its own handle.  Each round: the oldest finished jobs (<= ARCHIVE_BATCH) are
 * written to the history in one transaction, and only after the COMMIT are they moved out of
 * <prefix>finished (queue/archive.c); then archived jobs older than keep_finished_s leave Redis,
 * and the submit stream is trimmed to what the group still needs.  kill -9 at any point: the
 * next leader redoes the interrupted step, and INSERT OR REPLACE keyed by (id, attempt) keeps
 * one row per job.  Without a history only the trim runs and finished jobs stay in Redis.
 */
#include "scheduler/d_loop.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "history/hist.h"
#include "scheduler/d_state.h"

#include "common/mu_banned.h"

#define ARCHIVE_BATCH    256    /* finished jobs per transaction */
#define ARCHIVE_IDLE_MS  1000   /* the wait between rounds that found nothing to do */
#define ARCHIVE_TRIM_MS  5000   /* how often the submit stream is trimmed */
#define ARCHIVE_EXPIRE_N 256    /* archived jobs removed per round at most */
#define SUBMIT_KEEP_MS   600000 /* an acknowledged submission stays this long (or keep_ms) */

struct d_archive {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;                /* under mu */
    struct queue *q;          /* the thread's own connection, fenced */
    struct hist *h;           /* NULL: no history */
    uint64_t keep_ms;         /* 0 = archived jobs stay */
    char crash[32];           /* MUSTERD_TEST_ARCHIVE_KILL: "after-commit" (tests only) */
    char *ids[ARCHIVE_BATCH]; /* this round's jobs (heap) */
    uint64_t ended[ARCHIVE_BATCH];
    int n;
    uint64_t now_ms; /* wall, this round */
    bool failing;    /* the last round failed (logged once until one succeeds) */
};

static int row_take(void *ctx,
                    const char *id,
                    const char *const *keys,
                    const char *const *values,
                    int n,
                    struct mu_err *err)
{
    struct d_archive *a = ctx;
    struct hist_job j;
    uint64_t ended = a->now_ms;

    if (a->n >= ARCHIVE_BATCH)
        return 0;
    if (n > 0) {
        if (hist_job_from_fields(&j, id, keys, values, n, err) != 0) {
            mu_log(MU_LOG_WARN, "archive", "job=%s not archived: %s", id, err->msg);
        } else {
            j.archived_ms = (int64_t)a->now_ms;
            if (hist_job_put(a->h, &j, err) != 0)
                return -1;
            if (j.ended_ms != HIST_NONE && j.ended_ms > 0)
                ended = (uint64_t)j.ended_ms;
        }
    }
    a->ids[a->n] = strdup(id);
    if (!a->ids[a->n])
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    a->ended[a->n++] = ended;
    return 0;
}

static void round_clear(struct d_archive *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->ids[i]);
    a->n = 0;
}

/* One transaction of finished jobs; the number moved out of finished, or -1. */
static int archive_round(struct d_archive *a, struct mu_err *err)
{
    int seen = 0;
    int rc = -1;

    a->now_ms = mu_time_wall_ms();
    if (hist_begin(a->h, err) != 0)
        return -1;
    if (queue_finished_each(a->q, ARCHIVE_BATCH, row_take, a, &seen, err) != 0
        || hist_commit(a->h, err) != 0) {
        hist_rollback(a->h);
        goto out;
    }
    if (a->n > 0 && strcmp(a->crash, "after-commit") == 0)
        (void)raise(SIGKILL); /* the test of a crash between the COMMIT and Redis (t1009) */
    if (queue_finished_done(a->q, (const char *const *)a->ids, a->ended, a->n, err) != 0)
        goto out;
    rc = a->n;
out:
    round_clear(a);
    return rc;
}

/* Archives, expires and trims once; >0 when there is more to do at once, 0, or -1. */
static int work(struct d_archive *a, uint64_t *next_trim, struct mu_err *err)
{
    int moved = 0;
    int removed = 0;
    long long trimmed = 0;
    uint64_t now = mu_time_mono_ms();

    if (a->h) {
        moved = archive_round(a, err);
        if (moved < 0)
            return -1;
        if (a->keep_ms && mu_time_wall_ms() > a->keep_ms
            && queue_archived_expire(a->q, mu_time_wall_ms() - a->keep_ms, ARCHIVE_EXPIRE_N,
                                     &removed, err)
                   != 0)
            return -1;
        if (moved || removed)
            mu_log(MU_LOG_DEBUG, "archive", "archived %d job(s), removed %d from redis", moved,
                   removed);
    }
    if (now >= *next_trim) {
        uint64_t keep = a->keep_ms && a->keep_ms < SUBMIT_KEEP_MS ? a->keep_ms : SUBMIT_KEEP_MS;
        if (queue_submit_trim(a->q, mu_time_wall_ms() - keep, &trimmed, err) != 0)
            return -1;
        *next_trim = now + ARCHIVE_TRIM_MS;
    }
    return moved == ARCHIVE_BATCH || removed >= ARCHIVE_EXPIRE_N;
}

/* Waits ms (0: only looks) for stop; true when asked to stop. */
static bool wait_stop(struct d_archive *a, int ms)
{
    struct timespec until;
    bool stop;

    (void)clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    (void)pthread_mutex_lock(&a->mu);
    while (!a->stop && ms > 0) {
        if (pthread_cond_timedwait(&a->cv, &a->mu, &until) != 0)
            break;
    }
    stop = a->stop;
    (void)pthread_mutex_unlock(&a->mu);
    return stop;
}

static void *run(void *arg)
{
    struct d_archive *a = arg;
    uint64_t next_trim = 0;

    while (!wait_stop(a, 0)) {
        struct mu_err err = { 0, "" };
        int rc = work(a, &next_trim, &err);
        if (rc < 0) {
            if (err.code == MU_E_FENCED) {
                mu_log(MU_LOG_WARN, "archive", "stopping: %s", err.msg);
                break;
            }
            if (!a->failing)
                mu_log(MU_LOG_ERROR, "archive", "cannot archive (retrying every %d ms): %s",
                       ARCHIVE_IDLE_MS, err.msg);
            a->failing = true;
        } else if (a->failing) {
            mu_log(MU_LOG_INFO, "archive", "archiving again");
            a->failing = false;
        }
        if (rc <= 0 && wait_stop(a, ARCHIVE_IDLE_MS))
            break;
    }
    return NULL;
}

static void say_policy(const struct cfg *c)
{
    if (!c->history_sqlite[0])
        mu_log(MU_LOG_INFO, "archive",
               "history off: finished jobs stay in redis for ever (set \"history\": {\"sqlite\": "
               "PATH} to archive them and keep redis bounded)");
    else if (c->keep_finished_s == 0)
        mu_log(MU_LOG_INFO, "archive",
               "history %s: finished jobs archived, kept in redis too "
               "(keep_finished_s 0)",
               c->history_sqlite);
    else
        mu_log(MU_LOG_INFO, "archive",
               "history %s: finished jobs archived, removed from redis %d s after they ended",
               c->history_sqlite, c->keep_finished_s);
}

int d_archive_start(struct musterd *d, struct mu_err *err)
{
    struct d_archive *a = calloc(1, sizeof(*a));
    const char *crash = getenv("MUSTERD_TEST_ARCHIVE_KILL");

    if (!a)
        return mu_errf(err, MU_E_NOMEM, "out of memory");
    d->archive = a;
    (void)pthread_mutex_init(&a->mu, NULL);
    (void)pthread_cond_init(&a->cv, NULL);
    a->keep_ms = (uint64_t)d->cfg.keep_finished_s * 1000u;
    if (crash)
        (void)mu_strlcpy(a->crash, crash, sizeof(a->crash));
    if (d->cfg.history_sqlite[0]) {
        a->h = hist_open(d->cfg.history_sqlite, true, err);
        if (!a->h)
            return -1;
    }
    a->q = queue_new(d->cfg.redis, d->cfg.key_prefix, err);
    if (!a->q)
        return -1;
    if (queue_fence_set(a->q, d->lease.token, d->epoch, d->lease.ttl_ms, err) != 0)
        return -1;
    say_policy(&d->cfg);
    if (pthread_create(&a->thread, NULL, run, a) != 0)
        return mu_errf(err, MU_E_SYS, "cannot start the archiver thread");
    a->started = true;
    return 0;
}

void d_archive_stop(struct musterd *d)
{
    struct d_archive *a = d->archive;

    if (!a)
        return;
    if (a->started) {
        (void)pthread_mutex_lock(&a->mu);
        a->stop = true;
        (void)pthread_cond_signal(&a->cv);
        (void)pthread_mutex_unlock(&a->mu);
        (void)pthread_join(a->thread, NULL);
    }
    queue_free(a->q);
    hist_free(a->h);
    (void)pthread_cond_destroy(&a->cv);
    (void)pthread_mutex_destroy(&a->mu);
    free(a);
    d->archive = NULL;
}

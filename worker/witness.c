/* SPDX-License-Identifier: MIT */
/*
 * The lease's witness (issue #40, docs/muster-worker.md "Work outlives the scheduler"): reads
 * Redis's <prefix>leader key, so that a node can tell "no scheduler leads" (nobody can requeue
 * a gang, so nothing needs fencing: the lease is held) from "a scheduler leads but does not hear
 * me" (the lease runs out, as before).  A read that was sent at t and found the key free proves
 * that whichever musterd leads next took the key after t, and a new term judges no node lost
 * before node_lost_after_s from its start (scheduler/d_node.c), so the lease may run to
 * t + lease_s: the same rule as a heartbeat's echo_ms.
 *
 * Why a thread: the Redis client (queue/) blocks, up to its 2 s timeouts and a Sentinel
 * round, and the loop must keep answering its scheduler meanwhile.  The thread only reads and
 * publishes what it saw (atomics); the loop applies it to the lease (lease_watch.c), so a frozen
 * or wedged loop renews nothing and its tasks still stop.  The thread polls only while the loop
 * asks (the scheduler has been silent a while with tasks running), so a healthy cluster costs
 * Redis nothing.
 */
#include "worker/internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queue/queue.h"

#include "common/mu_banned.h"

struct wrk_witness {
    char url[512];
    char prefix[64];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool started;
    bool stop;            /* under mu */
    int interval_ms;      /* under mu: 0 = idle */
    int asked;            /* the caller's thread only: the interval it last asked for */
    _Atomic uint64_t seq; /* readings so far */
    _Atomic uint64_t free_sent_ms;
    _Atomic int seen; /* enum wrk_witness_seen of the newest reading */
    _Atomic uint64_t epoch;
    char why[256]; /* under mu: the newest failure */
};

static void publish(struct wrk_witness *w,
                    enum wrk_witness_seen seen,
                    uint64_t sent_ms,
                    uint64_t epoch,
                    const char *why)
{
    pthread_mutex_lock(&w->mu);
    mu_strlcpy(w->why, why ? why : "", sizeof(w->why));
    pthread_mutex_unlock(&w->mu);
    atomic_store(&w->epoch, epoch);
    if (seen == WRK_WITNESS_NO_LEADER)
        atomic_store(&w->free_sent_ms, sent_ms);
    atomic_store(&w->seen, (int)seen);
    atomic_fetch_add(&w->seq, 1);
}

/* One reading: ROLE and GET on the primary; a new connection when there is none. */
static void read_once(struct wrk_witness *w, struct queue **q)
{
    struct mu_err err;
    uint64_t sent;
    uint64_t epoch = 0;
    bool free_now = false;

    mu_err_clear(&err);
    if (!*q) {
        *q = queue_new(w->url, w->prefix, &err);
        if (!*q) {
            publish(w, WRK_WITNESS_UNREACHABLE, 0, 0, err.msg);
            return;
        }
    }
    /* Taken before the request leaves: the key was free at some moment after this. */
    sent = mu_time_mono_ms();
    if (queue_lease_peek(*q, &free_now, &epoch, &err) != 0) {
        publish(w, WRK_WITNESS_UNREACHABLE, 0, 0, err.msg);
        return;
    }
    publish(w, free_now ? WRK_WITNESS_NO_LEADER : WRK_WITNESS_LEADER, sent, epoch, NULL);
}

static void *witness_main(void *arg)
{
    struct wrk_witness *w = arg;
    struct queue *q = NULL;

    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until;
        int interval = w->interval_ms;
        if (interval <= 0) {
            /* Idle: no connection held, so a fleet keeps none open between outages. */
            if (q) {
                pthread_mutex_unlock(&w->mu);
                queue_free(q);
                q = NULL;
                pthread_mutex_lock(&w->mu);
                continue;
            }
            (void)pthread_cond_wait(&w->cond, &w->mu);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        read_once(w, &q);
        pthread_mutex_lock(&w->mu);
        (void)clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += interval / 1000;
        until.tv_nsec += (long)(interval % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!w->stop && w->interval_ms > 0
               && pthread_cond_timedwait(&w->cond, &w->mu, &until) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&w->mu);
    queue_free(q);
    return NULL;
}

struct wrk_witness *wrk_witness_new(const char *url, const char *prefix, struct mu_err *err)
{
    struct wrk_witness *w;
    struct mu_redis_url parsed;
    pthread_condattr_t attr;
    sigset_t all;
    sigset_t old;
    int rc;

    if (mu_redis_url_parse(url, &parsed, err) != 0)
        return NULL;
    w = calloc(1, sizeof(*w));
    if (!w) {
        mu_errf(err, MU_E_NOMEM, "out of memory");
        return NULL;
    }
    if (mu_strlcpy(w->url, url, sizeof(w->url)) >= sizeof(w->url)
        || mu_strlcpy(w->prefix, prefix, sizeof(w->prefix)) >= sizeof(w->prefix)) {
        free(w);
        mu_errf(err, MU_E_TOOBIG, "redis url or key prefix too long");
        return NULL;
    }
    (void)pthread_mutex_init(&w->mu, NULL);
    (void)pthread_condattr_init(&attr);
    (void)pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    (void)pthread_cond_init(&w->cond, &attr);
    (void)pthread_condattr_destroy(&attr);
    /* The thread takes no signal: the loop's handlers run there, and a read here is not cut
     * short (EINTR) by a child's exit. */
    (void)sigfillset(&all);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, witness_main, w);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        mu_errf(err, MU_E_NOMEM, "cannot start the redis witness thread");
        wrk_witness_free(w);
        return NULL;
    }
    w->started = true;
    return w;
}

void wrk_witness_free(struct wrk_witness *w)
{
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        (void)pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->mu);
        (void)pthread_join(w->thread, NULL);
    }
    (void)pthread_cond_destroy(&w->cond);
    (void)pthread_mutex_destroy(&w->mu);
    free(w);
}

void wrk_witness_poll(struct wrk_witness *w, int interval_ms)
{
    if (w->asked == interval_ms)
        return; /* the loop asks every turn: no lock unless it changes its mind */
    w->asked = interval_ms;
    pthread_mutex_lock(&w->mu);
    if (w->interval_ms != interval_ms) {
        w->interval_ms = interval_ms;
        (void)pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&w->mu);
}

uint64_t wrk_witness_readings(struct wrk_witness *w)
{
    return atomic_load(&w->seq);
}

enum wrk_witness_seen wrk_witness_get(struct wrk_witness *w,
                                      uint64_t *seq,
                                      uint64_t *free_sent_ms,
                                      uint64_t *epoch,
                                      char *why,
                                      size_t why_size)
{
    enum wrk_witness_seen seen = (enum wrk_witness_seen)atomic_load(&w->seen);

    if (seq)
        *seq = atomic_load(&w->seq);
    if (free_sent_ms)
        *free_sent_ms = atomic_load(&w->free_sent_ms);
    if (epoch)
        *epoch = atomic_load(&w->epoch);
    if (why && why_size) {
        pthread_mutex_lock(&w->mu);
        mu_strlcpy(why, w->why, why_size);
        pthread_mutex_unlock(&w->mu);
    }
    return seen;
}

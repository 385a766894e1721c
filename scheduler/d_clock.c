/* SPDX-License-Identifier: MIT */
/*
 * What becomes true with time alone (issue #10 items 3 and 4).
 *
 * Time limits: a running gang whose attempt has run its time limit (the spec's time_limit_s, or
 * the config's default_time_limit_s) is stopped like a preempted one, checkpoint signal first,
 * and ends TIMEOUT.  Time counts from the attempt's start (started_at, which Redis keeps), so a
 * scheduler restart that adopts the gang does not reset it.  The scan runs when the earliest
 * limit is due, not on every tick.
 *
 * The pass's timer: a pass runs when something changes (a job, a node, a release) and also when
 * the clock alone may let a pending job start: a retry backoff or a fence wait over, a pool's
 * cool-down over, a too-young preemption victim coming of age; and every REASON_REFRESH_MS while
 * a pending reason carries a time ("retrying in 8s", "est. start in 12m"), so it stays current.
 */
#include "scheduler/daemon.h"

#include <string.h>

#include "common/mu_banned.h"

#define REASON_REFRESH_MS 10000

int64_t d_retry_backoff_ms(const struct musterd *d, int failures)
{
    int64_t s = d->cfg.retry_backoff_s;
    for (int i = 1; i < failures && s < d->cfg.retry_backoff_max_s; i++)
        s *= 2;
    return (s < d->cfg.retry_backoff_max_s ? s : d->cfg.retry_backoff_max_s) * 1000;
}

void d_limit_watch(struct musterd *d, const struct d_job *j)
{
    uint64_t end_ms = j->started_ms + (uint64_t)d_job_run_s(d, j) * 1000u;
    if (end_ms < d->next_limit_ms)
        d->next_limit_ms = end_ms;
}

void d_limits_check(struct musterd *d, uint64_t now_wall_ms)
{
    uint64_t next = UINT64_MAX;
    size_t pos = 0;
    struct d_job *j;

    if (now_wall_ms < d->next_limit_ms)
        return;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        uint64_t limit_ms = (uint64_t)d_job_run_s(d, j) * 1000u;
        uint64_t end_ms = j->started_ms + limit_ms;
        char in[24];
        char why[200];
        if (!j->placed || j->end != D_END_NONE || !j->started_ms)
            continue;
        if (now_wall_ms < end_ms) {
            next = end_ms < next ? end_ms : next;
            continue;
        }
        mu_duration_format((int64_t)(limit_ms / 1000u), in, sizeof(in));
        (void)mu_snprintf(why, sizeof(why), "time limit of %s reached (%s)", in,
                          j->spec.time_limit_s > 0 ? "time_limit_s" : "default_time_limit_s");
        mu_log(MU_LOG_INFO, "sched", "job=%s attempt=%d %s: stopping it", j->id, j->attempt, why);
        d_gang_stop(d, j, why, 0, D_C_NONE, QUEUE_TIMEOUT);
    }
    d->next_limit_ms = next; /* UINT64_MAX when nothing runs: a start lowers it */
}

void d_wake_at(struct musterd *d, uint64_t mono_ms)
{
    if (!d->next_pass_ms || mono_ms < d->next_pass_ms)
        d->next_pass_ms = mono_ms;
}

void d_wake_check(struct musterd *d, uint64_t now_mono_ms)
{
    if (d->next_pass_ms && now_mono_ms >= d->next_pass_ms) {
        d->next_pass_ms = 0;
        d->dirty = true;
    }
}

void d_wake_plan(struct musterd *d, uint64_t now_mono_ms, int64_t now_wall_ms, bool timed_reasons)
{
    int64_t now_s = now_wall_ms / 1000;

    for (int i = 0; i < d->npending; i++) {
        uint64_t at = d->pending[i]->not_before_ms;
        if (at && !d->pending[i]->held)
            d_wake_at(d, at);
    }
    for (int p = 0; p < d->cfg.npools; p++) {
        int64_t until_s = sched_cluster_pool_cooldown_until(d->cluster, p);
        if (until_s > now_s && d->npending > 0)
            d_wake_at(d, now_mono_ms + (uint64_t)(until_s - now_s) * 1000u);
    }
    if (timed_reasons)
        d_wake_at(d, now_mono_ms + REASON_REFRESH_MS);
}

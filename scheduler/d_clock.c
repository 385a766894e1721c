/* SPDX-License-Identifier: MIT */
/*
 * Layer 3 of musterd (d_handlers.h): time limits (issue #10 item 4).  A running gang whose
 * attempt has run its time limit (the spec's time_limit_s, or the config's default_time_limit_s)
 * is stopped like a preempted one, checkpoint signal first, and ends TIMEOUT.  Time counts from
 * the attempt's start (started_at, which Redis keeps), so a scheduler restart that adopts the
 * gang does not reset it.  The scan runs when the earliest limit is due, not on every tick.
 */

#include "scheduler/d_handlers.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler/d_state.h"

#include "common/mu_banned.h"

void d_limits_check(struct musterd *d, uint64_t now_wall_ms)
{
    struct sched_reaction r = sched_react_time_limit();
    uint64_t next = UINT64_MAX;
    size_t pos = 0;
    struct d_job *j;

    if (now_wall_ms < d->next_limit_ms)
        return;
    while ((j = mu_map_next(d->jobs, &pos)) != NULL) {
        uint64_t limit_ms = (uint64_t)d_job_run_s(d, j) * 1000u;
        uint64_t end_ms = (uint64_t)sched_time_limit_end_ms(
            (int64_t)j->started_ms, j->spec.time_limit_s, d->cfg.default_time_limit_s);
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
        if (d_gang_react(d, j, &r, why, 0, D_C_NONE) != 0)
            next = now_wall_ms; /* not written: stopped on a later tick, once Redis is back */
    }
    d->next_limit_ms = next; /* UINT64_MAX when nothing runs: a start lowers it */
}

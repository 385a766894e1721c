/* SPDX-License-Identifier: MIT */
/*
 * Event reactions (issue #41): what a spot notice, a lost node, a drain and a time limit do to a
 * node and the gangs on it, decided here once so that musterd (scheduler/d_report.c, d_node.c,
 * d_control.c, d_adopt.c, d_recover.c, d_clock.c) and muster-sim (sim/engine.c) cannot drift
 * apart.  Pure: the clock is a parameter and nothing is applied; each caller applies the
 * sched_reaction with its own I/O (musterd: Redis writes, messages to workers, events; the
 * simulator: its virtual clock and its counters).  docs/architecture.md, "Reactions".
 */

#include "core/sched.h"

#include "common/mu_banned.h"

struct sched_reaction sched_react_spot_notice(int64_t now_ms,
                                              int64_t deadline_ms,
                                              int64_t margin_ms,
                                              int64_t cooldown_s)
{
    struct sched_reaction r = { .node_state = SCHED_NODE_TERMINATING,
                                .stop = true,
                                .stop_by_ms = now_ms,
                                .requeue = true,
                                .head_of_queue = true };

    /* Stopped margin_ms before the cloud takes the node, or at once when that is past. */
    if (deadline_ms > now_ms + margin_ms)
        r.stop_by_ms = deadline_ms - margin_ms;
    if (cooldown_s >= 0) {
        r.cool_down = true;
        r.cooldown_until_s = now_ms / 1000 + cooldown_s;
    }
    return r;
}

struct sched_reaction sched_react_node_lost(bool down)
{
    /* Its tasks are gone (or going, for a worker that said BYE): nothing to signal, the attempt
     * ends there and then, and is not counted against the job. */
    struct sched_reaction r = { .node_state = down ? SCHED_NODE_DOWN : SCHED_NODE_LOST,
                                .stop = true,
                                .requeue = true };
    return r;
}

struct sched_reaction sched_react_drain(int64_t now_ms, int64_t grace_s)
{
    struct sched_reaction r = { .node_state = SCHED_NODE_DRAINING, .stop = true, .requeue = true };

    if (grace_s >= 0)
        r.stop_by_ms = now_ms + grace_s * 1000;
    return r;
}

int64_t sched_time_limit_s(int64_t time_limit_s, int64_t default_s)
{
    return time_limit_s > 0 ? time_limit_s : default_s > 0 ? default_s : 0;
}

int64_t sched_time_limit_end_ms(int64_t started_ms, int64_t time_limit_s, int64_t default_s)
{
    int64_t limit_s = sched_time_limit_s(time_limit_s, default_s);
    return limit_s > 0 ? started_ms + limit_s * 1000 : INT64_MAX;
}

struct sched_reaction sched_react_time_limit(void)
{
    /* Stopped like a preempted gang, checkpoint signal first, within its own grace; then it
     * ends (TIMEOUT), never requeued.  The node is not concerned. */
    struct sched_reaction r = { .node_state = SCHED_NODE_READY, .stop = true };
    return r;
}

/* SPDX-License-Identifier: MIT */
/*
 * Layer 1 of musterd: the queues' fair-share usage (docs/fair-share.md), the GPU-seconds each
 * queue's gangs held, decayed by fair_share_half_life_s.  Exact, not sampled: the usage is
 * brought up to date (core's sched_usage_accrue) every time a queue's held GPUs change (a gang
 * committed or released) and at every status write, so a job of a few milliseconds counts too.
 * Its one stored copy is in the queues status hash (d_status.c); d_usage_recover reads it back.
 */
#ifndef MUSTER_SCHEDULER_D_USAGE_H
#define MUSTER_SCHEDULER_D_USAGE_H

#include <stdint.h>

#include "core/sched.h"

/* By queue index; the last used one (nqueues) is for jobs whose queue is no longer configured. */
struct d_usage {
    double gpu_s[SCHED_MAX_QUEUES];      /* decayed to at_ms */
    int64_t held_gpus[SCHED_MAX_QUEUES]; /* GPUs committed to the queue's gangs now */
    uint64_t at_ms;                      /* wall; 0 = not started */
};

struct musterd;
struct d_job;

/* Brings every queue's usage up to now_ms (wall). */
void d_usage_accrue(struct musterd *d, uint64_t now_ms);
/* j's queue now holds tasks more tasks' GPUs (fewer when negative): accrued up to now first. */
void d_usage_hold(struct musterd *d, const struct d_job *j, int tasks);
/* Queue q's part of all queues' usage, 0..1. */
double d_usage_share(const struct musterd *d, int q);
/* After a restart: each configured queue's stored usage, decayed to now.  0 or -1 with err. */
int d_usage_recover(struct musterd *d, struct mu_err *err);

#endif

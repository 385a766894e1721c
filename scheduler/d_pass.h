/* SPDX-License-Identifier: MIT */
/*
 * musterd's layer 4 (see d_io.h): the scheduling pass (docs/design.md §4) and when it is due.  The
 * pending jobs in priority order go to the core's sched_pass, which starts what fits, gives the
 * first job that does not fit a reservation and lets later jobs backfill where they do not delay
 * it; then the first job that may preempt gets a plan.  A pass runs when something changed, and
 * also when the clock alone may let a pending job start (d_wake_plan).
 */
#ifndef MUSTER_SCHEDULER_D_PASS_H
#define MUSTER_SCHEDULER_D_PASS_H

#include "scheduler/d_handlers.h"

void d_schedule(struct musterd *d);
/* A pass is due at mono_ms (the earliest of all such requests wins). */
void d_wake_at(struct musterd *d, uint64_t mono_ms);
/* In the periodic tick: marks the pass dirty once its due time came. */
void d_wake_check(struct musterd *d, uint64_t now_mono_ms);
void d_pass_free(struct musterd *d);

#endif

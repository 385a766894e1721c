/* SPDX-License-Identifier: MIT */
/*
 * Back to spot (issue #16, docs/placement.md): whether a checkpointing gang that fell back to
 * on-demand should move to spot capacity that is free now.  Moving costs the work since its last
 * checkpoint and a restart, redone on spot; it saves the price difference over the time it would
 * still run.  The rule is here, pure, so that musterd and a simulator decide it the same way;
 * musterd asks it only right after a checkpoint lands, when little work is at stake.
 */

#include "core/sched.h"

#include "common/mu_banned.h"

double sched_spot_return_gain(double from_per_h,
                              double to_per_h,
                              int64_t remaining_s,
                              int64_t lost_s)
{
    double saving;
    double cost;

    if (remaining_s <= 0 || to_per_h >= from_per_h)
        return 0;
    saving = (from_per_h - to_per_h) * (double)remaining_s / 3600.0;
    cost = to_per_h * (double)(lost_s > 0 ? lost_s : 0) / 3600.0;
    return saving - cost;
}

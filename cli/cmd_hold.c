/* SPDX-License-Identifier: MIT */
/*
 * musterctl hold ID: asks musterd to keep a job from starting, through the control stream
 * (cmd "hold", arg the job).  The job is looked up first so that a typo fails here instead of
 * being queued; musterd applies the command and reports it on the events stream.
 */
#include "cli/internal.h"

#include "common/mu_banned.h"

int ctl_cmd_hold(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_control_one(ctl, "hold", "job", args->argv[0]);
}

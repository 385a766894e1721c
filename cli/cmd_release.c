/* SPDX-License-Identifier: MIT */
/*
 * musterctl release ID: asks musterd to let a held job be placed again, through the control stream
 * (cmd "release", arg the job).  The job is looked up first so that a typo fails here instead of
 * being queued; musterd applies the command and reports it on the events stream.
 */
#include "cli/internal.h"

#include "common/mu_banned.h"

int ctl_cmd_release(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_control_one(ctl, "release", "job", args->argv[0]);
}

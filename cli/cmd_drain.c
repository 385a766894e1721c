/* SPDX-License-Identifier: MIT */
/*
 * musterctl drain NODE: asks musterd to place no new work on the node and move its jobs away,
 * through the control stream (cmd "drain", arg the node).  The node is looked up first so that a
 * typo fails here instead of being queued; musterd applies the command and reports it on the events
 * stream.
 */
#include "cli/internal.h"

#include "common/mu_banned.h"

int ctl_cmd_drain(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_control_one(ctl, "drain", "node", args->argv[0]);
}

/* SPDX-License-Identifier: MIT */
/*
 * musterctl uncordon NODE: asks musterd to return a cordoned or drained node to service, through
 * the control stream (cmd "uncordon", arg the node).  The node is looked up first so that a typo
 * fails here instead of being queued; musterd applies the command and reports it on the events
 * stream.
 */
#include "cli/internal.h"

#include "common/mu_banned.h"

int ctl_cmd_uncordon(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_control_one(ctl, "uncordon", "node", args->argv[0]);
}

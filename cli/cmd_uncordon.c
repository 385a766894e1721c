/* SPDX-License-Identifier: MIT */
/*
 * musterctl uncordon NODE: asks musterd to return a cordoned or drained node to service, through
 * the control stream (cmd "uncordon", arg the node), and clears its kept cordon or drain
 * (<prefix>node:wanted, ctl_node_command).  A node with no record at all is refused here.
 */
#include "cli/internal.h"

#include "common/mu_banned.h"

int ctl_cmd_uncordon(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_control_one(ctl, "uncordon", "node", args->argv[0]);
}

/* SPDX-License-Identifier: MIT */
/*
 * musterctl cordon NODE: asks musterd to place no new work on the node, through the control stream
 * (cmd "cordon", arg the node).  A node that never registered is refused here, in the script that
 * sends the command; the cordon is kept in <prefix>node:wanted (ctl_node_command), so a node that
 * is away, or a musterd that is (then it is only recorded), gets it when it comes back.
 */
#include "cli/internal.h"

#include "common/mu_banned.h"

int ctl_cmd_cordon(struct ctl *ctl, const struct ctl_args *args)
{
    return ctl_control_one(ctl, "cordon", "node", args->argv[0]);
}

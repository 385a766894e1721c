/* SPDX-License-Identifier: MIT */
/*
 * The worker's side of per-task cgroups (issue #46; cgroup.c has the mechanics, which the
 * static shim shares): found once at start, so that the one WARN line about what is missing
 * comes before any task, and every BIND after it gets the same layout.  Without cgroups the
 * worker still runs tasks, as before: each in its own process group, which a daemon leaves.
 */
#include "worker/internal.h"

#include <string.h>
#include <unistd.h>

#include "common/mu_banned.h"

#define CG_ROOT_DEFAULT "muster"

void wrk_agent_cgroup_setup(struct wrk_agent *a, const struct wrk_config *cfg)
{
    const char *root = cfg->cgroup_root ? cfg->cgroup_root : CG_ROOT_DEFAULT;
    static const char meaning[] =
        "tasks get their process group only: a process that leaves it (setsid, a double fork) "
        "outlives its task and may hold its GPUs, and cpus_per_task, memory_mb_per_task and GPU "
        "devices are not enforced";
    char why[PROTO_PATH_MAX + 128];

    memset(&a->cg, 0, sizeof(a->cg));
    mu_strlcpy(a->cg_root, root, sizeof(a->cg_root));
    if (!root[0]) {
        mu_log(MU_LOG_INFO, WRK_MOD, "node=%s per-task cgroups off (--cgroup-root ''): %s", a->node,
               meaning);
        return;
    }
    if (geteuid() != 0) {
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s no per-task cgroups: the worker is not root; %s",
               a->node, meaning);
        return;
    }
    why[0] = '\0';
    if (wrk_cg_detect("/proc/self/mountinfo", "", root, a->node, &a->cg, why, sizeof(why)) == 0) {
        mu_log(MU_LOG_WARN, WRK_MOD, "node=%s no per-task cgroups: %s; %s", a->node, why, meaning);
        return;
    }
    if (a->cg.version == 2) {
        mu_log(MU_LOG_INFO, WRK_MOD,
               "node=%s per-task cgroups: v2, %s/%s/JOB.ATTEMPT.TASK under %s (GPU devices: a "
               "BPF device program per task)",
               a->node, root, a->node, a->cg.mount[WRK_CG_UNIFIED]);
        return;
    }
    /* v1: say which controllers, so that a missing one (no memory limit, say) is seen. */
    why[0] = '\0';
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        size_t used = strlen(why);
        (void)mu_snprintf(why + used, sizeof(why) - used, "%s%s%s", used ? " " : "",
                          a->cg.mount[c][0] ? "" : "no ", wrk_cg_ctrl_name((enum wrk_cg_ctrl)c));
    }
    mu_log(MU_LOG_INFO, WRK_MOD,
           "node=%s per-task cgroups: v1 (%s), %s/%s/JOB.ATTEMPT.TASK under each controller's "
           "mount",
           a->node, why, root, a->node);
}

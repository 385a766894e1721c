/* SPDX-License-Identifier: MIT */
/*
 * worker/cgroup.h: per-task cgroups, the second public header of the worker module (wrk.h
 * includes it): the shim, which is linked statically from a few of the worker's files, and the
 * unit tests use it on its own.  worker/cgroup.c implements it with plain system calls only.
 */
#ifndef MUSTER_WORKER_CGROUP_H
#define MUSTER_WORKER_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/mu.h"
#include "protocol/proto.h"

/* ---- per-task cgroups (worker/cgroup.c, issue #46) ---- */

/*
 * A task's processes are kept in a cgroup of their own, so that every one of them is found and
 * killed when the task stops, however it daemonised, and its memory, CPU and GPU devices are
 * limited.  v2 where the node has a unified hierarchy with the memory, cpu and pids controllers
 * available; v1 otherwise (the freezer is required there).  Layout, under each controller's
 * mount (v1) or the unified mount (v2): <root>/<node>/<job>.<attempt>.<task>.
 */
enum wrk_cg_ctrl {
    WRK_CG_FREEZER = 0, /* v1 only: kill every process of a group without races */
    WRK_CG_MEMORY,
    WRK_CG_CPU,
    WRK_CG_DEVICES, /* v1 only: v2 attaches a BPF device program instead (cgroup_dev.c) */
    WRK_CG_PIDS,
    WRK_CG_NCTRL,
    WRK_CG_UNIFIED = 0, /* v2: the one directory, in slot 0 */
};

#define WRK_GPU_MAJOR        195 /* /dev/nvidia<N> is c 195:N; 255 nvidiactl, 254 modeset */
#define WRK_CG_DENY_MINORS   64  /* GPU minors 0..63 not the task's are denied */
#define WRK_CG_CPU_PERIOD_US 100000

/* What the node offers: version 0 = none (process groups only), 1 or 2. */
struct wrk_cg_sys {
    int version;
    char mount[WRK_CG_NCTRL][PROTO_PATH_MAX]; /* v1: each controller's mount ("" = not mounted);
                                                 v2: mount[WRK_CG_UNIFIED] */
};

/* One task's groups and limits: what the worker hands the shim. */
struct wrk_cg_task {
    int version;                            /* 0 = none */
    char dir[WRK_CG_NCTRL][PROTO_PATH_MAX]; /* v1: per controller ("" = none); v2: dir[0] */
    int64_t mem_mb;                         /* memory_mb_per_task; 0 = no limit */
    int cpus;                               /* cpus_per_task; 0 = no limit */
    int ndeny;
    int deny[WRK_CG_DENY_MINORS]; /* GPU device minors the task may not open */
};

/* ---- GPU devices on v2 (cgroup_dev.c): a BPF program of type CGROUP_DEVICE ---- */

struct bpf_insn;
/* The device program into out[0..max): deny a character device of major WRK_GPU_MAJOR whose minor
 * is one of deny[0..ndeny), allow anything else.  Returns its length, -1 when max is short.
 * Pure. */
int wrk_cg_dev_program(const int *deny, int ndeny, struct bpf_insn *out, int max);
/* Loads that program and attaches it to the v2 group dir (with BPF_F_ALLOW_MULTI).  0, or -1 with
 * err (MU_E_SYS: the kernel refused it, with its verifier log). */
int wrk_cg_dev_attach(const char *dir, const int *deny, int ndeny, struct mu_err *err);

/* The controller's v1 name ("freezer", "memory", ...). */
const char *wrk_cg_ctrl_name(enum wrk_cg_ctrl c);

/*
 * Reads /proc/self/mountinfo's text (len bytes): each v1 controller's mount point (by its
 * super options) and the first cgroup2 mount.  *v2 gets the cgroup2 mount ("" = none).  Pure.
 */
void wrk_cg_mountinfo_parse(
    const char *text, size_t len, struct wrk_cg_sys *out, char *v2, size_t v2_size);

/*
 * Finds what the node offers (mountinfo_path: normally /proc/self/mountinfo; sysroot: prefixed
 * to every mount point, "" on a real node, a temp dir in tests) and makes <root>/<node> in each
 * used hierarchy (v2: enabling memory, cpu and pids in cgroup.subtree_control down to it).
 * Returns the version (1, 2), or 0 with why: what is missing ("no cgroup2 with the memory, cpu
 * and pids controllers nor a v1 freezer mounted", "cannot create '/sys/fs/cgroup/freezer/muster/
 * n1': Permission denied").
 */
int wrk_cg_detect(const char *mountinfo_path,
                  const char *sysroot,
                  const char *root,
                  const char *node,
                  struct wrk_cg_sys *out,
                  char *why,
                  size_t why_size);

/*
 * Fills out's directories for ref's task: <mount>/<root>/<node>/<job>.<attempt>.<task> (limits
 * and deny list left as they are).  MU_E_TOOBIG when a path does not fit.  Pure.
 */
int wrk_cg_task_paths(const struct wrk_cg_sys *s,
                      const char *root,
                      const char *node,
                      const struct proto_task_ref *ref,
                      struct wrk_cg_task *out,
                      struct mu_err *err);

/* One file to write in a task's group. */
struct wrk_cg_setting {
    enum wrk_cg_ctrl ctrl; /* v1: which directory; v2: always the one */
    const char *file;      /* "memory.limit_in_bytes", "cpu.max", ... (static) */
    char value[64];
};

/*
 * The limit files for t (v1: memory.limit_in_bytes, cpu.cfs_period_us then cpu.cfs_quota_us;
 * v2: memory.max, memory.swap.max, cpu.max) into out[0..max-1]; returns how many.  Pure.
 */
int wrk_cg_limits_format(const struct wrk_cg_task *t, struct wrk_cg_setting *out, int max);

/*
 * The shim, before its task starts: creates t's groups, writes the limits and the device deny
 * list, and opens each group's cgroup.procs for writing (close-on-exec) into fds[0..*nfds-1],
 * for the task's child to join by writing "0" between fork and exec.  -1 with err (groups made
 * so far removed).
 */
int wrk_cg_task_create(const struct wrk_cg_task *t, int *fds, int *nfds, struct mu_err *err);

/*
 * Kills every process in t's groups until none is left (v2: cgroup.kill; v1: freeze, SIGKILL
 * each pid of cgroup.procs, thaw, again), reaping those that are the caller's children (the shim
 * is their subreaper) except keep (the task's leader, still a zombie).  Blocks until empty;
 * says on stderr once when that takes more than a few seconds (a process stuck in the kernel).
 */
void wrk_cg_task_kill(const struct wrk_cg_task *t, pid_t keep);

/* True when the kernel's OOM killer killed a process in t's memory group. */
bool wrk_cg_task_oom(const struct wrk_cg_task *t);

/* Removes t's groups (empty by then). */
void wrk_cg_task_remove(const struct wrk_cg_task *t);

#endif

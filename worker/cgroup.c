/* SPDX-License-Identifier: MIT */
/*
 * Per-task cgroups (issue #46 "a job stays in its box"), as Slurm's proctrack/cgroup and
 * task/cgroup: a process group is left by anything that calls setsid, a cgroup is not.  So each
 * task's child joins its task's groups between fork and exec (spawn.c writes "0" to the
 * cgroup.procs fds opened here), and when the task stops its shim kills every process still in
 * them, reaps what it can (it is their subreaper), and only then writes the exit file that frees
 * the task's GPUs for the next job.
 *
 * v2 (a unified hierarchy offering memory, cpu and pids) is preferred; v1 needs the freezer,
 * which makes "kill everything" race-free: a frozen group cannot fork between the read of
 * cgroup.procs and the kills.  v2 has cgroup.kill for that (Linux 5.14).  The layout under each
 * mount is <root>/<node>/<job>.<attempt>.<task>.  The device deny list is v1's devices
 * controller; on v2 a BPF device program (cgroup_dev.c).
 *
 * This file is linked into the static muster-shim too: raw file writes and system calls only,
 * no NSS, no JSON library.  The parsers and the path and limit formatting are pure, for the
 * unit tests (tests/unit/test_wrk_cgroup.c).
 */
#include "worker/wrk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/mu_banned.h"

#define CG_READ_MAX      (1u << 20) /* cgroup.procs and mountinfo are read up to this */
#define CG_KILL_SAY_MS   5000       /* a kill loop this long is said once */
#define CG_KILL_PAUSE_MS 10

static const char *const ctrl_names[WRK_CG_NCTRL] = {
    [WRK_CG_FREEZER] = "freezer", [WRK_CG_MEMORY] = "memory", [WRK_CG_CPU] = "cpu",
    [WRK_CG_DEVICES] = "devices", [WRK_CG_PIDS] = "pids",
};

const char *wrk_cg_ctrl_name(enum wrk_cg_ctrl c)
{
    return (int)c >= 0 && c < WRK_CG_NCTRL ? ctrl_names[c] : "?";
}

/* True when the comma-separated list holds word. */
static bool list_has(const char *list, size_t len, const char *word, char sep)
{
    size_t k = strlen(word);
    size_t i = 0;

    while (i < len) {
        size_t j = i;
        while (j < len && list[j] != sep && list[j] != '\n' && list[j] != ' ')
            j++;
        if (j - i == k && memcmp(list + i, word, k) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

/* The n-th space-separated field of line[0..len) (from 0): start and length; false if none. */
static bool field_at(const char *line, size_t len, int n, const char **f, size_t *flen)
{
    size_t i = 0;

    for (int at = 0; i < len; at++) {
        size_t j = i;
        while (j < len && line[j] != ' ')
            j++;
        if (at == n) {
            *f = line + i;
            *flen = j - i;
            return true;
        }
        i = j + 1;
    }
    return false;
}

/* One mountinfo line: "ID PARENT M:m ROOT MOUNT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER". */
static void mountinfo_line(
    const char *line, size_t len, struct wrk_cg_sys *out, char *v2, size_t v2_size)
{
    const char *mnt;
    const char *fs;
    const char *super;
    const char *dash;
    size_t mlen;
    size_t flen;
    size_t slen;
    size_t rest;

    if (!field_at(line, len, 4, &mnt, &mlen))
        return;
    dash = NULL;
    for (size_t i = 0; i + 3 <= len; i++) {
        if (memcmp(line + i, " - ", 3) == 0) {
            dash = line + i + 3;
            break;
        }
    }
    if (!dash)
        return;
    rest = len - (size_t)(dash - line);
    if (!field_at(dash, rest, 0, &fs, &flen) || !field_at(dash, rest, 2, &super, &slen))
        return;
    if (flen == 7 && memcmp(fs, "cgroup2", 7) == 0) {
        if (!v2[0] && mlen < v2_size)
            (void)mu_snprintf(v2, v2_size, "%.*s", (int)mlen, mnt);
        return;
    }
    if (flen != 6 || memcmp(fs, "cgroup", 6) != 0)
        return;
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        if (!out->mount[c][0] && list_has(super, slen, ctrl_names[c], ',')
            && mlen < sizeof(out->mount[c]))
            (void)mu_snprintf(out->mount[c], sizeof(out->mount[c]), "%.*s", (int)mlen, mnt);
    }
}

void wrk_cg_mountinfo_parse(
    const char *text, size_t len, struct wrk_cg_sys *out, char *v2, size_t v2_size)
{
    size_t i = 0;

    memset(out, 0, sizeof(*out));
    if (v2_size)
        v2[0] = '\0';
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        mountinfo_line(text + i, j - i, out, v2, v2_size);
        i = j + 1;
    }
}

/* Reads path (at most CG_READ_MAX bytes) into a NUL-terminated heap buffer; NULL on failure. */
static char *read_small(const char *path, size_t *len_out)
{
    struct mu_buf b;
    struct mu_err err;
    char chunk[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return NULL;
    mu_buf_init(&b, CG_READ_MAX);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || mu_buf_append(&b, chunk, (size_t)n, &err) != 0)
            break;
    }
    (void)close(fd);
    if (mu_buf_append(&b, "", 0, &err) != 0) {
        mu_buf_release(&b);
        return NULL;
    }
    *len_out = b.len;
    return mu_buf_take(&b);
}

/* Writes value to path (no newline needed: cgroup files take one write); 0 or -errno. */
static int write_file(const char *path, const char *value)
{
    size_t len = strlen(value);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ssize_t n;
    int e;

    if (fd < 0)
        return -errno;
    do {
        n = write(fd, value, len);
    } while (n < 0 && errno == EINTR);
    e = n == (ssize_t)len ? 0 : (n < 0 ? errno : EIO);
    (void)close(fd);
    return -e;
}

/* mkdir -p; 0 or -errno. */
static int make_dirs(const char *dir)
{
    char path[PROTO_PATH_MAX];

    if (mu_strlcpy(path, dir, sizeof(path)) >= sizeof(path))
        return -ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -errno;
        if (end)
            return 0;
        *p = '/';
    }
}

/* v2: the unified mount offers memory, cpu and pids; enables them down to <root>/<node>. */
static int detect_v2(const char *mnt, const char *root, const char *node, char *why, size_t size)
{
    static const char *const want[] = { "memory", "cpu", "pids" };
    char path[PROTO_PATH_MAX];
    size_t len = 0;
    char *text;
    int e;

    (void)mu_snprintf(path, sizeof(path), "%s/cgroup.controllers", mnt);
    text = read_small(path, &len);
    for (size_t i = 0; i < MU_ARRAY_LEN(want); i++) {
        if (!text || !list_has(text, len, want[i], ' ')) {
            (void)mu_snprintf(why, size,
                              "the cgroup2 hierarchy at '%s' does not offer the %s "
                              "controller",
                              mnt, want[i]);
            free(text);
            return -1;
        }
    }
    free(text);
    (void)mu_snprintf(path, sizeof(path), "%s/%s/%s", mnt, root, node);
    e = make_dirs(path);
    if (e != 0) {
        (void)mu_snprintf(why, size, "cannot create '%s': %s", path, strerror(-e));
        return -1;
    }
    /* Each level hands the controllers to its children: the mount, <root>, <root>/<node>. */
    for (int level = 0; level < 3; level++) {
        if (level == 0)
            (void)mu_snprintf(path, sizeof(path), "%s/cgroup.subtree_control", mnt);
        else if (level == 1)
            (void)mu_snprintf(path, sizeof(path), "%s/%s/cgroup.subtree_control", mnt, root);
        else
            (void)mu_snprintf(path, sizeof(path), "%s/%s/%s/cgroup.subtree_control", mnt, root,
                              node);
        e = write_file(path, "+memory +cpu +pids");
        if (e != 0) {
            (void)mu_snprintf(why, size, "cannot enable controllers in '%s': %s", path,
                              strerror(-e));
            return -1;
        }
    }
    return 0;
}

int wrk_cg_detect(const char *mountinfo_path,
                  const char *sysroot,
                  const char *root,
                  const char *node,
                  struct wrk_cg_sys *out,
                  char *why,
                  size_t why_size)
{
    struct wrk_cg_sys found;
    char v2[PROTO_PATH_MAX];
    char path[PROTO_PATH_MAX];
    size_t len = 0;
    char *text = read_small(mountinfo_path, &len);

    memset(out, 0, sizeof(*out));
    if (!text) {
        (void)mu_snprintf(why, why_size, "cannot read '%s': %s", mountinfo_path, strerror(errno));
        return 0;
    }
    wrk_cg_mountinfo_parse(text, len, &found, v2, sizeof(v2));
    free(text);
    if (v2[0]) {
        (void)mu_snprintf(path, sizeof(path), "%s%s", sysroot, v2);
        if (detect_v2(path, root, node, why, why_size) == 0) {
            out->version = 2;
            mu_strlcpy(out->mount[WRK_CG_UNIFIED], path, sizeof(out->mount[0]));
            return 2;
        }
    }
    if (!found.mount[WRK_CG_FREEZER][0]) {
        if (!v2[0])
            (void)mu_snprintf(why, why_size,
                              "no cgroup hierarchy is mounted (neither a cgroup2 "
                              "with the memory, cpu and pids controllers nor a v1 freezer)");
        else {
            size_t used = strlen(why);
            (void)mu_snprintf(why + used, why_size - used, "; and no v1 freezer is mounted");
        }
        return 0;
    }
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        int e;
        if (!found.mount[c][0])
            continue;
        (void)mu_snprintf(out->mount[c], sizeof(out->mount[c]), "%s%s", sysroot, found.mount[c]);
        (void)mu_snprintf(path, sizeof(path), "%s/%s/%s", out->mount[c], root, node);
        e = make_dirs(path);
        if (e != 0) {
            (void)mu_snprintf(why, why_size, "cannot create '%s': %s", path, strerror(-e));
            memset(out, 0, sizeof(*out));
            return 0;
        }
    }
    out->version = 1;
    return 1;
}

int wrk_cg_task_paths(const struct wrk_cg_sys *s,
                      const char *root,
                      const char *node,
                      const struct proto_task_ref *ref,
                      struct wrk_cg_task *out,
                      struct mu_err *err)
{
    out->version = s->version;
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        out->dir[c][0] = '\0';
        if (!s->mount[c][0] || (s->version == 2 && c != WRK_CG_UNIFIED))
            continue;
        if (mu_snprintf(out->dir[c], sizeof(out->dir[c]), "%s/%s/%s/%s.%d.%d", s->mount[c], root,
                        node, ref->job, ref->attempt, ref->task)
            != 0)
            return mu_errf(err, MU_E_TOOBIG, "cgroup path under '%s' is too long", s->mount[c]);
    }
    return 0;
}

static void setting(struct wrk_cg_setting *out,
                    int *n,
                    int max,
                    enum wrk_cg_ctrl c,
                    const char *file,
                    int64_t v1,
                    int64_t v2)
{
    if (*n >= max)
        return;
    out[*n].ctrl = c;
    out[*n].file = file;
    if (v2 < 0)
        (void)mu_snprintf(out[*n].value, sizeof(out[*n].value), "%" PRId64, v1);
    else
        (void)mu_snprintf(out[*n].value, sizeof(out[*n].value), "%" PRId64 " %" PRId64, v1, v2);
    (*n)++;
}

int wrk_cg_limits_format(const struct wrk_cg_task *t, struct wrk_cg_setting *out, int max)
{
    int64_t bytes = t->mem_mb * 1024 * 1024;
    int64_t quota = (int64_t)t->cpus * WRK_CG_CPU_PERIOD_US;
    int n = 0;

    if (t->version == 1) {
        if (t->mem_mb > 0)
            setting(out, &n, max, WRK_CG_MEMORY, "memory.limit_in_bytes", bytes, -1);
        if (t->cpus > 0) {
            setting(out, &n, max, WRK_CG_CPU, "cpu.cfs_period_us", WRK_CG_CPU_PERIOD_US, -1);
            setting(out, &n, max, WRK_CG_CPU, "cpu.cfs_quota_us", quota, -1);
        }
    } else if (t->version == 2) {
        if (t->mem_mb > 0) {
            setting(out, &n, max, WRK_CG_UNIFIED, "memory.max", bytes, -1);
            setting(out, &n, max, WRK_CG_UNIFIED, "memory.swap.max", 0, -1);
        }
        if (t->cpus > 0)
            setting(out, &n, max, WRK_CG_UNIFIED, "cpu.max", quota, WRK_CG_CPU_PERIOD_US);
    }
    return n;
}

static int write_in(const char *dir, const char *file, const char *value)
{
    char path[PROTO_PATH_MAX + 64];
    (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, file);
    return write_file(path, value);
}

int wrk_cg_task_create(const struct wrk_cg_task *t, int *fds, int *nfds, struct mu_err *err)
{
    struct wrk_cg_setting set[8];
    char path[PROTO_PATH_MAX + 32];
    int nset = wrk_cg_limits_format(t, set, (int)MU_ARRAY_LEN(set));
    int e;

    *nfds = 0;
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        if (t->dir[c][0] && mkdir(t->dir[c], 0755) != 0 && errno != EEXIST) {
            mu_errf(err, MU_E_SYS, "cannot create the task's cgroup '%s': %s", t->dir[c],
                    strerror(errno));
            goto fail;
        }
    }
    for (int i = 0; i < nset; i++) {
        /* memory.swap.max is absent where swap accounting is off: nothing to limit there. */
        e = t->dir[set[i].ctrl][0] ? write_in(t->dir[set[i].ctrl], set[i].file, set[i].value) : 0;
        if (e != 0 && !(e == -ENOENT && strcmp(set[i].file, "memory.swap.max") == 0)) {
            mu_errf(err, MU_E_SYS, "cannot set %s to %s in '%s': %s", set[i].file, set[i].value,
                    t->dir[set[i].ctrl], strerror(-e));
            goto fail;
        }
    }
    if (t->version == 1 && t->mem_mb > 0 && t->dir[WRK_CG_MEMORY][0]) {
        /* No swapping past the limit either, where swap is accounted (memsw exists). */
        (void)write_in(t->dir[WRK_CG_MEMORY], "memory.memsw.limit_in_bytes",
                       set[0].value); /* set[0]: memory.limit_in_bytes */
    }
    if (t->version == 2 && t->ndeny > 0
        && wrk_cg_dev_attach(t->dir[WRK_CG_UNIFIED], t->deny, t->ndeny, err) != 0)
        goto fail;
    for (int i = 0; t->version == 1 && t->dir[WRK_CG_DEVICES][0] && i < t->ndeny; i++) {
        char rule[32];
        (void)mu_snprintf(rule, sizeof(rule), "c %d:%d rwm", WRK_GPU_MAJOR, t->deny[i]);
        e = write_in(t->dir[WRK_CG_DEVICES], "devices.deny", rule);
        if (e != 0) {
            mu_errf(err, MU_E_SYS, "cannot deny '%s' in '%s': %s", rule, t->dir[WRK_CG_DEVICES],
                    strerror(-e));
            goto fail;
        }
    }
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        if (!t->dir[c][0])
            continue;
        (void)mu_snprintf(path, sizeof(path), "%s/cgroup.procs", t->dir[c]);
        fds[*nfds] = open(path, O_WRONLY | O_CLOEXEC);
        if (fds[*nfds] < 0) {
            mu_errf(err, MU_E_SYS, "cannot open '%s': %s", path, strerror(errno));
            goto fail;
        }
        (*nfds)++;
    }
    return 0;
fail:
    for (int i = 0; i < *nfds; i++)
        (void)close(fds[i]);
    *nfds = 0;
    wrk_cg_task_remove(t);
    return -1;
}

/* The group that lists every process of the task: v1's freezer, v2's one. */
static const char *procs_dir(const struct wrk_cg_task *t)
{
    return t->dir[t->version == 1 ? WRK_CG_FREEZER : WRK_CG_UNIFIED];
}

/* SIGKILLs every pid in dir/cgroup.procs but keep, reaping our children; how many were there. */
static int kill_listed(const char *dir, pid_t keep)
{
    char path[PROTO_PATH_MAX + 32];
    size_t len = 0;
    char *text;
    char *p;
    int n = 0;

    (void)mu_snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    text = read_small(path, &len);
    if (!text)
        return 0; /* gone or unreadable: nothing more can be done here */
    for (p = text; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        p = *end ? end + 1 : end;
        if (pid <= 0 || (pid_t)pid == keep)
            continue;
        n++;
        (void)kill((pid_t)pid, SIGKILL);
        (void)waitpid((pid_t)pid, NULL, WNOHANG); /* an orphan we adopted (subreaper) */
    }
    free(text);
    return n;
}

static void pause_ms(int ms)
{
    struct timespec ts = { 0, (long)ms * 1000000L };
    (void)nanosleep(&ts, NULL);
}

/*
 * Reaps every child of this (single-threaded) process but keep: once the group is empty, what
 * is left are the zombies of the orphans the shim adopted, which a cgroup no longer lists.
 */
static void reap_children(pid_t keep)
{
    char path[64];

    (void)mu_snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    for (int round = 0; round < 1000; round++) {
        size_t len = 0;
        char *text = read_small(path, &len);
        int n = 0;
        if (!text)
            return; /* no CONFIG_PROC_CHILDREN: the shim reaps them after the exit file */
        for (char *p = text; *p;) {
            char *end;
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            p = *end ? end + 1 : end;
            if (pid > 0 && (pid_t)pid != keep) {
                n++;
                (void)waitpid((pid_t)pid, NULL, 0); /* killed: it ends at once */
            }
        }
        free(text);
        if (n == 0)
            return;
    }
}

void wrk_cg_task_kill(const struct wrk_cg_task *t, pid_t keep)
{
    const char *dir = procs_dir(t);
    uint64_t start = mu_time_mono_ms();
    bool said = false;

    if (t->version == 0 || !dir[0])
        return;
    for (;;) {
        int n;
        if (t->version == 1) {
            (void)write_in(dir, "freezer.state", "FROZEN");
            n = kill_listed(dir, keep);
            (void)write_in(dir, "freezer.state", "THAWED");
        } else {
            if (write_in(dir, "cgroup.kill", "1") != 0) {
                /* Before Linux 5.14: freeze, kill what is listed, thaw. */
                (void)write_in(dir, "cgroup.freeze", "1");
                (void)kill_listed(dir, keep);
                (void)write_in(dir, "cgroup.freeze", "0");
            }
            n = kill_listed(dir, keep);
        }
        if (n == 0) {
            reap_children(keep);
            return;
        }
        if (!said && mu_time_mono_ms() - start > CG_KILL_SAY_MS) {
            said = true;
            (void)fprintf(stderr,
                          WRK_SHIM_NAME ": %d process(es) of the task's cgroup '%s' survive "
                                        "SIGKILL (stuck in the kernel?); waiting for them\n",
                          n, dir);
            (void)fflush(stderr);
        }
        pause_ms(CG_KILL_PAUSE_MS);
    }
}

/* The value of "key N" in the text of file (v1 memory.oom_control, v2 memory.events). */
static int64_t keyed_value(const char *dir, const char *file, const char *key)
{
    char path[PROTO_PATH_MAX + 32];
    size_t len = 0;
    size_t k = strlen(key);
    int64_t v = 0;
    char *text;

    (void)mu_snprintf(path, sizeof(path), "%s/%s", dir, file);
    text = read_small(path, &len);
    if (!text)
        return 0;
    for (char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, k) == 0 && p[k] == ' ') {
            v = strtoll(p + k + 1, NULL, 10);
            break;
        }
    }
    free(text);
    return v;
}

bool wrk_cg_task_oom(const struct wrk_cg_task *t)
{
    if (t->version == 1 && t->dir[WRK_CG_MEMORY][0])
        return keyed_value(t->dir[WRK_CG_MEMORY], "memory.oom_control", "oom_kill") > 0;
    if (t->version == 2 && t->dir[WRK_CG_UNIFIED][0])
        return keyed_value(t->dir[WRK_CG_UNIFIED], "memory.events", "oom_kill") > 0;
    return false;
}

void wrk_cg_task_remove(const struct wrk_cg_task *t)
{
    for (int c = 0; c < WRK_CG_NCTRL; c++) {
        /* A group is busy for a moment after its last process is reaped: try a few times. */
        for (int i = 0; t->dir[c][0] && i < 50; i++) {
            if (rmdir(t->dir[c]) == 0 || errno == ENOENT)
                break;
            pause_ms(CG_KILL_PAUSE_MS);
        }
    }
}

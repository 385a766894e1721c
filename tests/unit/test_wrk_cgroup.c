/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for per-task cgroups' pure parts (issue #46; worker/cgroup.c): reading mountinfo,
 * choosing v2 or v1 from a fake /proc/self/mountinfo and /sys tree under a temp dir, the task's
 * paths, the limit files, and the shim spec and exit file keys that carry them.  The kernel's
 * side (joining, killing, the OOM killer, the device list) is t4006-worker-cgroup's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tests/unit/support/wrk_fake.h"
#include "worker/wrk.h"

#include "common/mu_banned.h"

/* This VM's own lines: v1 controllers, one comounted, and an empty cgroup2. */
static const char v1_mountinfo[] =
    "22 1 253:1 / / rw,relatime - ext4 /dev/vda1 rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "35 30 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";

static void test_mountinfo_parse(void **state)
{
    struct wrk_cg_sys s;
    char v2[256];

    (void)state;
    wrk_cg_mountinfo_parse(v1_mountinfo, strlen(v1_mountinfo), &s, v2, sizeof(v2));
    assert_string_equal(s.mount[WRK_CG_FREEZER], "/sys/fs/cgroup/freezer");
    assert_string_equal(s.mount[WRK_CG_MEMORY], "/sys/fs/cgroup/memory");
    assert_string_equal(s.mount[WRK_CG_CPU], "/sys/fs/cgroup/cpu,cpuacct");
    assert_string_equal(s.mount[WRK_CG_DEVICES], "/sys/fs/cgroup/devices");
    assert_string_equal(s.mount[WRK_CG_PIDS], "/sys/fs/cgroup/pids");
    assert_string_equal(v2, "/sys/fs/cgroup/unified");
    /* Garbage and short lines are skipped, not read past. */
    wrk_cg_mountinfo_parse("x\n1 2 3\n - cgroup\n\n", 20, &s, v2, sizeof(v2));
    assert_string_equal(s.mount[WRK_CG_FREEZER], "");
    assert_string_equal(v2, "");
}

/* A fake tree under dir: proc/mountinfo with text, and the directories it names under sys. */
static void tree_make(const char *dir, const char *text, const char *controllers)
{
    char path[1024];
    (void)mu_snprintf(path, sizeof(path), "%s/mountinfo", dir);
    write_file(path, text, 0644);
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified", dir);
    assert_int_equal(wrk_mkdir_p(path, NULL), 0);
    if (controllers) {
        (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified/cgroup.controllers", dir);
        write_file(path, controllers, 0644);
        (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified/cgroup.subtree_control",
                          dir);
        write_file(path, "", 0644);
    }
}

static void test_detect_v2(void **state)
{
    char *dir = make_tmpdir();
    char mountinfo[1024];
    char path[1024];
    char *text;
    char why[512] = "";
    struct wrk_cg_sys s;
    struct stat st;

    (void)state;
    tree_make(dir, "40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
              "cpuset cpu io memory hugetlb pids rdma\n");
    /* The levels below the mount exist once made: their subtree_control files are the
     * kernel's, stood in for here. */
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified/muster/n1", dir);
    assert_int_equal(wrk_mkdir_p(path, NULL), 0);
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified/muster/cgroup.subtree_control",
                      dir);
    write_file(path, "", 0644);
    (void)mu_snprintf(path, sizeof(path),
                      "%s/sys/fs/cgroup/unified/muster/n1/cgroup.subtree_control", dir);
    write_file(path, "", 0644);
    (void)mu_snprintf(mountinfo, sizeof(mountinfo), "%s/mountinfo", dir);
    assert_int_equal(wrk_cg_detect(mountinfo, dir, "muster", "n1", &s, why, sizeof(why)), 2);
    assert_int_equal(s.version, 2);
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified", dir);
    assert_string_equal(s.mount[WRK_CG_UNIFIED], path);
    text = read_in(path, "cgroup.subtree_control"); /* the controllers handed down */
    assert_string_equal(text, "+memory +cpu +pids");
    free(text);
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/unified/muster/n1", dir);
    assert_int_equal(stat(path, &st), 0);
    rm_rf(dir);
    free(dir);
}

static void test_detect_v1_and_none(void **state)
{
    char *dir = make_tmpdir();
    char mountinfo[1024];
    char path[1024];
    char why[512] = "";
    struct wrk_cg_sys s;
    struct stat st;

    (void)state;
    /* cgroup2 without the memory controller (v1 holds it): v1, with the freezer. */
    tree_make(dir, v1_mountinfo, "\n");
    (void)mu_snprintf(mountinfo, sizeof(mountinfo), "%s/mountinfo", dir);
    assert_int_equal(wrk_cg_detect(mountinfo, dir, "muster", "n1", &s, why, sizeof(why)), 1);
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/freezer", dir);
    assert_string_equal(s.mount[WRK_CG_FREEZER], path);
    (void)mu_snprintf(path, sizeof(path), "%s/sys/fs/cgroup/cpu,cpuacct/muster/n1", dir);
    assert_int_equal(stat(path, &st), 0);
    rm_rf(dir);
    free(dir);

    /* Nothing mounted: none, and why says what is missing. */
    dir = make_tmpdir();
    tree_make(dir, "22 1 253:1 / / rw,relatime - ext4 /dev/vda1 rw\n", NULL);
    (void)mu_snprintf(mountinfo, sizeof(mountinfo), "%s/mountinfo", dir);
    assert_int_equal(wrk_cg_detect(mountinfo, dir, "muster", "n1", &s, why, sizeof(why)), 0);
    assert_int_equal(s.version, 0);
    assert_non_null(strstr(why, "no cgroup hierarchy is mounted"));
    /* A cgroup2 without controllers and no freezer: both said. */
    tree_make(dir, "40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", "\n");
    assert_int_equal(wrk_cg_detect(mountinfo, dir, "muster", "n1", &s, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "does not offer the memory controller"));
    assert_non_null(strstr(why, "no v1 freezer"));
    /* No mountinfo at all. */
    assert_int_equal(
        wrk_cg_detect("/nonexistent/mountinfo", "", "muster", "n1", &s, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "cannot read '/nonexistent/mountinfo'"));
    rm_rf(dir);
    free(dir);
}

static void test_task_paths(void **state)
{
    struct proto_task_ref ref;
    struct wrk_cg_sys s;
    struct wrk_cg_task t;
    struct mu_err err;
    char v2[256];

    (void)state;
    memset(&ref, 0, sizeof(ref));
    mu_strlcpy(ref.job, "1732270000123-0", sizeof(ref.job));
    ref.attempt = 2;
    ref.task = 3;
    wrk_cg_mountinfo_parse(v1_mountinfo, strlen(v1_mountinfo), &s, v2, sizeof(v2));
    s.version = 1;
    memset(&t, 0, sizeof(t));
    assert_int_equal(wrk_cg_task_paths(&s, "muster", "n1", &ref, &t, &err), 0);
    assert_int_equal(t.version, 1);
    assert_string_equal(t.dir[WRK_CG_FREEZER],
                        "/sys/fs/cgroup/freezer/muster/n1/1732270000123-0.2.3");
    assert_string_equal(t.dir[WRK_CG_CPU],
                        "/sys/fs/cgroup/cpu,cpuacct/muster/n1/1732270000123-0.2.3");
    /* v2: one directory, in slot 0. */
    memset(&s, 0, sizeof(s));
    s.version = 2;
    mu_strlcpy(s.mount[WRK_CG_UNIFIED], "/sys/fs/cgroup", sizeof(s.mount[0]));
    assert_int_equal(wrk_cg_task_paths(&s, "muster", "n1", &ref, &t, &err), 0);
    assert_string_equal(t.dir[WRK_CG_UNIFIED], "/sys/fs/cgroup/muster/n1/1732270000123-0.2.3");
    assert_string_equal(t.dir[WRK_CG_MEMORY], "");
    /* Too long: an error, not a cut path. */
    memset(s.mount[0], 'x', sizeof(s.mount[0]) - 10);
    s.mount[0][sizeof(s.mount[0]) - 10] = '\0';
    assert_int_equal(wrk_cg_task_paths(&s, "muster", "n1", &ref, &t, &err), -1);
    assert_int_equal(err.code, MU_E_TOOBIG);
}

static void test_limits_format(void **state)
{
    struct wrk_cg_setting set[8];
    struct wrk_cg_task t;

    (void)state;
    memset(&t, 0, sizeof(t));
    t.version = 1;
    assert_int_equal(wrk_cg_limits_format(&t, set, 8), 0); /* nothing asked */
    t.mem_mb = 64;
    t.cpus = 3;
    assert_int_equal(wrk_cg_limits_format(&t, set, 8), 3);
    assert_int_equal(set[0].ctrl, WRK_CG_MEMORY);
    assert_string_equal(set[0].file, "memory.limit_in_bytes");
    assert_string_equal(set[0].value, "67108864");
    assert_string_equal(set[1].file, "cpu.cfs_period_us"); /* before the quota */
    assert_string_equal(set[1].value, "100000");
    assert_string_equal(set[2].file, "cpu.cfs_quota_us");
    assert_string_equal(set[2].value, "300000");
    t.version = 2;
    t.mem_mb = INT64_C(1) << 20; /* a TiB: past 32 bits */
    assert_int_equal(wrk_cg_limits_format(&t, set, 8), 3);
    assert_string_equal(set[0].file, "memory.max");
    assert_string_equal(set[0].value, "1099511627776");
    assert_string_equal(set[1].file, "memory.swap.max");
    assert_string_equal(set[1].value, "0");
    assert_string_equal(set[2].file, "cpu.max");
    assert_string_equal(set[2].value, "300000 100000");
    assert_int_equal(wrk_cg_limits_format(&t, set, 1), 1); /* bounded by max */
    t.version = 0;
    assert_int_equal(wrk_cg_limits_format(&t, set, 8), 0);
}

static void test_spec_and_exit(void **state)
{
    static char arg0[] = "true";
    char *argv[] = { arg0, NULL };
    struct wrk_shim_spec in;
    struct wrk_shim_spec out;
    struct wrk_taskexit x;
    struct mu_buf b;
    struct mu_err err;
    char line[256];

    (void)state;
    memset(&in, 0, sizeof(in));
    mu_strlcpy(in.rec.ref.job, "1-0", sizeof(in.rec.ref.job));
    in.rec.ref.attempt = 1;
    in.argc = 1;
    in.argv = argv;
    in.cg.version = 1;
    mu_strlcpy(in.cg.dir[WRK_CG_FREEZER], "/c/freezer/m/n1/1-0.1.0", sizeof(in.cg.dir[0]));
    mu_strlcpy(in.cg.dir[WRK_CG_DEVICES], "/c/devices/m/n1/1-0.1.0", sizeof(in.cg.dir[0]));
    in.cg.mem_mb = 4096;
    in.cg.cpus = 8;
    in.cg.ndeny = 2;
    in.cg.deny[0] = 2;
    in.cg.deny[1] = 63;
    mu_buf_init(&b, WRK_SPEC_MAX_BYTES);
    assert_int_equal(wrk_shim_spec_encode(&in, &b, &err), 0);
    assert_int_equal(wrk_shim_spec_decode(b.data, b.len, &out, &err), 0);
    assert_int_equal(out.cg.version, 1);
    assert_string_equal(out.cg.dir[WRK_CG_FREEZER], "/c/freezer/m/n1/1-0.1.0");
    assert_string_equal(out.cg.dir[WRK_CG_DEVICES], "/c/devices/m/n1/1-0.1.0");
    assert_string_equal(out.cg.dir[WRK_CG_MEMORY], "");
    assert_true(out.cg.mem_mb == 4096);
    assert_int_equal(out.cg.cpus, 8);
    assert_int_equal(out.cg.ndeny, 2);
    assert_int_equal(out.cg.deny[1], 63);
    wrk_shim_spec_release(&out);
    mu_buf_release(&b);
    /* Bad cg entries are refused, with the key named. */
    {
        static const char bad1[] = "job=1-0\0arg=true\0cg_dir=9:/x\0";
        static const char bad2[] = "job=1-0\0arg=true\0cg_version=3\0";
        assert_int_equal(wrk_shim_spec_decode(bad1, sizeof(bad1) - 1, &out, &err), -1);
        assert_non_null(strstr(err.msg, "cg_dir"));
        wrk_shim_spec_release(&out);
        assert_int_equal(wrk_shim_spec_decode(bad2, sizeof(bad2) - 1, &out, &err), -1);
        assert_non_null(strstr(err.msg, "cg_version"));
        wrk_shim_spec_release(&out);
    }
    /* The exit file: oom_killed written only when set, read back. */
    memset(&x, 0, sizeof(x));
    x.signal = 9;
    x.oom_killed = true;
    assert_int_equal(wrk_taskexit_format(&x, line, sizeof(line), &err), 0);
    assert_non_null(strstr(line, "\"oom_killed\":true"));
    memset(&x, 0, sizeof(x));
    assert_int_equal(wrk_taskexit_parse(line, strlen(line), &x, &err), 0);
    assert_true(x.oom_killed);
    assert_int_equal(x.signal, 9);
    x.oom_killed = false;
    assert_int_equal(wrk_taskexit_format(&x, line, sizeof(line), &err), 0);
    assert_null(strstr(line, "oom_killed"));
    {
        static const char bad[] = "{\"exit_code\":0,\"signal\":0,\"oom_killed\":1}";
        assert_int_equal(wrk_taskexit_parse(bad, sizeof(bad) - 1, &x, &err), -1);
        assert_non_null(strstr(err.msg, "oom_killed"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mountinfo_parse),    cmocka_unit_test(test_detect_v2),
        cmocka_unit_test(test_detect_v1_and_none), cmocka_unit_test(test_task_paths),
        cmocka_unit_test(test_limits_format),      cmocka_unit_test(test_spec_and_exit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * GPU devices on cgroup v2 (issue #46; worker/cgroup_dev.c).  The device program is run here by a
 * small interpreter of the few instructions it uses, for every case that matters (its jumps land
 * where they should); then, as root, for real: a cgroup2 hierarchy mounted in a temp dir, the
 * program attached to a group, and a child in that group opening stand-in device nodes (c 195:N,
 * no driver behind them: an allowed open fails ENXIO, a denied one EPERM).  Without root, or
 * where cgroup2 cannot be mounted, that part is skipped with a line saying why.
 */
#define _DEFAULT_SOURCE 1 /* NOLINT(bugprone-reserved-identifier): mknod, mkdtemp, mount */

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/wrk.h"

#include "common/mu_banned.h"

/* Runs prog against (type, major, minor) as the kernel would; returns r0. */
static int64_t run(
    const struct bpf_insn *prog, int n, uint32_t type, uint32_t major, uint32_t minor)
{
    uint32_t ctx[3] = { type | (BPF_DEVCG_ACC_READ << 16), major, minor };
    int64_t r[11] = { 0 };

    for (int pc = 0; pc >= 0 && pc < n; pc++) {
        const struct bpf_insn *i = &prog[pc];
        switch (i->code) {
        case BPF_LDX | BPF_W | BPF_MEM:
            assert_int_equal(i->src_reg, BPF_REG_1);
            r[i->dst_reg] = ctx[i->off / 4];
            break;
        case BPF_ALU64 | BPF_AND | BPF_K:
            r[i->dst_reg] &= i->imm;
            break;
        case BPF_ALU64 | BPF_MOV | BPF_K:
            r[i->dst_reg] = i->imm;
            break;
        case BPF_JMP | BPF_JNE | BPF_K:
            pc += r[i->dst_reg] != i->imm ? i->off : 0;
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
            pc += r[i->dst_reg] == i->imm ? i->off : 0;
            break;
        case BPF_JMP | BPF_EXIT:
            return r[BPF_REG_0];
        default:
            fail_msg("instruction %d: unexpected code 0x%x", pc, i->code);
        }
    }
    fail_msg("the program ran off its end");
    return -1;
}

static void test_program_decides(void **state)
{
    struct bpf_insn prog[WRK_CG_DENY_MINORS + 8];
    int deny[] = { 2, 3, 63 };
    int n = wrk_cg_dev_program(deny, 3, prog, (int)MU_ARRAY_LEN(prog));

    (void)state;
    assert_true(n > 0);
    for (uint32_t minor = 0; minor < 64; minor++) {
        bool denied = minor == 2 || minor == 3 || minor == 63;
        assert_int_equal(run(prog, n, BPF_DEVCG_DEV_CHAR, 195, minor), denied ? 0 : 1);
        assert_int_equal(run(prog, n, BPF_DEVCG_DEV_BLOCK, 195, minor), 1); /* not a char dev */
        assert_int_equal(run(prog, n, BPF_DEVCG_DEV_CHAR, 1, minor), 1);    /* /dev/null's major */
    }
    assert_int_equal(run(prog, n, BPF_DEVCG_DEV_CHAR, 195, 255), 1); /* nvidiactl */
    n = wrk_cg_dev_program(deny, 0, prog, (int)MU_ARRAY_LEN(prog));
    assert_int_equal(run(prog, n, BPF_DEVCG_DEV_CHAR, 195, 2), 1); /* nothing denied */
    assert_int_equal(wrk_cg_dev_program(deny, 3, prog, 10), -1);   /* no room */
}

/* Whether a child of group opens dev: 0 allowed (ENXIO: no driver), 1 denied (EPERM), else 2. */
static int opens(const char *group, const char *dev)
{
    char procs[512];
    pid_t pid;
    int status = 0;

    (void)snprintf(procs, sizeof(procs), "%s/cgroup.procs", group);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(procs, O_WRONLY);
        int dfd;
        if (fd < 0 || write(fd, "0", 1) != 1)
            _exit(3);
        (void)close(fd);
        dfd = open(dev, O_RDONLY);
        _exit(dfd >= 0 || errno == ENXIO ? 0 : errno == EPERM ? 1 : 2);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}

static void test_attached_for_real(void **state)
{
    char dir[] = "/tmp/muster-cgdev-XXXXXX";
    char devs[] = "/tmp/muster-cgdevs-XXXXXX"; /* no device nodes in a cgroup file system */
    char group[256];
    char dev[300];
    int deny[] = { 1 };
    struct mu_err err;

    (void)state;
    if (geteuid() != 0) {
        printf("skip: the live check needs root (mount, mknod)\n");
        return;
    }
    assert_non_null(mkdtemp(dir));
    assert_non_null(mkdtemp(devs));
    if (mount("none", dir, "cgroup2", 0, NULL) != 0) {
        printf("skip: cannot mount cgroup2 here: %s\n", strerror(errno));
        (void)rmdir(dir);
        (void)rmdir(devs);
        return;
    }
    (void)snprintf(group, sizeof(group), "%s/task", dir);
    assert_int_equal(mkdir(group, 0755), 0);
    for (int i = 0; i < 2; i++) {
        (void)snprintf(dev, sizeof(dev), "%s/nvidia%d", devs, i);
        assert_int_equal(mknod(dev, S_IFCHR | 0666, makedev(195, i)), 0);
    }
    if (wrk_cg_dev_attach(group, deny, 1, &err) != 0) {
        printf("skip: %s\n", err.msg);
    } else {
        (void)snprintf(dev, sizeof(dev), "%s/nvidia0", devs);
        assert_int_equal(opens(group, dev), 0);
        (void)snprintf(dev, sizeof(dev), "%s/nvidia1", devs);
        assert_int_equal(opens(group, dev), 1);
    }
    for (int i = 0; i < 2; i++) {
        (void)snprintf(dev, sizeof(dev), "%s/nvidia%d", devs, i);
        (void)unlink(dev);
    }
    assert_int_equal(rmdir(devs), 0);
    assert_int_equal(rmdir(group), 0);
    assert_int_equal(umount(dir), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_program_decides),
        cmocka_unit_test(test_attached_for_real),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

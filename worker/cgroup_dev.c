/* SPDX-License-Identifier: MIT */
/*
 * A task's GPU devices on cgroup v2 (issue #46).  v1 has the devices controller's deny list;
 * v2 has no file for it: the kernel asks a BPF program of type CGROUP_DEVICE attached to the
 * group, for every open or mknod of a device node, and denies when it returns 0.  The program is
 * written here instruction by instruction (no compiler, no libbpf: the shim is a small static
 * binary): "a character device of the GPUs' major whose minor is one of the task's denied ones:
 * no; anything else: yes", the same rule as v1's deny list.  Once attached, the group holds the
 * program; it goes with the group.  The instruction building is pure, for the unit tests.
 */
#define _DEFAULT_SOURCE 1 /* NOLINT(bugprone-reserved-identifier): the libc's, for syscall */

#include "worker/wrk.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/mu_banned.h"

static struct bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    struct bpf_insn i;
    memset(&i, 0, sizeof(i));
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    return i;
}

int wrk_cg_dev_program(const int *deny, int ndeny, struct bpf_insn *out, int max)
{
    int n = 0;
    int deny_at;

    if (ndeny < 0 || max < ndeny + 8)
        return -1;
    /* r2 = ctx->access_type & 0xffff (the device type); r3 = ctx->major; r4 = ctx->minor */
    out[n++] = insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_1, 0, 0);
    out[n++] = insn(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff);
    out[n++] = insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_3, BPF_REG_1, 4, 0);
    out[n++] = insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_4, BPF_REG_1, 8, 0);
    /* not a character device of the GPUs' major: allowed (jump to "r0 = 1") */
    deny_at = n + 2 + ndeny + 2; /* the "r0 = 0" after the minors and the allow pair */
    out[n] = insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, (int16_t)(deny_at - 2 - (n + 1)),
                  BPF_DEVCG_DEV_CHAR);
    n++;
    out[n] = insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, (int16_t)(deny_at - 2 - (n + 1)),
                  WRK_GPU_MAJOR);
    n++;
    for (int i = 0; i < ndeny; i++, n++)
        out[n] =
            insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_4, 0, (int16_t)(deny_at - (n + 1)), deny[i]);
    out[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1); /* allow */
    out[n++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    out[n++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0); /* deny */
    out[n++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    return n;
}

int wrk_cg_dev_attach(const char *dir, const int *deny, int ndeny, struct mu_err *err)
{
    struct bpf_insn prog[WRK_CG_DENY_MINORS + 8];
    char log[1024] = "";
    union bpf_attr attr;
    int n = wrk_cg_dev_program(deny, ndeny, prog, (int)MU_ARRAY_LEN(prog));
    int pfd;
    int gfd;
    int rc;

    if (n < 0)
        return mu_errf(err, MU_E_INVAL, "GPU devices: %d minors to deny, at most %d", ndeny,
                       WRK_CG_DENY_MINORS);
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    attr.insns = (uint64_t)(uintptr_t)prog;
    attr.insn_cnt = (uint32_t)n;
    attr.license = (uint64_t)(uintptr_t) "MIT";
    attr.log_buf = (uint64_t)(uintptr_t)log;
    attr.log_size = sizeof(log);
    attr.log_level = 1;
    pfd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
    if (pfd < 0)
        return mu_errf(err, MU_E_SYS, "GPU devices: the kernel refused the device program: %s%s%s",
                       strerror(errno), log[0] ? ": " : "", log);
    gfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (gfd < 0) {
        rc = mu_errf(err, MU_E_SYS, "GPU devices: cannot open '%s': %s", dir, strerror(errno));
        (void)close(pfd);
        return rc;
    }
    memset(&attr, 0, sizeof(attr));
    attr.target_fd = (uint32_t)gfd;
    attr.attach_bpf_fd = (uint32_t)pfd;
    attr.attach_type = BPF_CGROUP_DEVICE;
    attr.attach_flags = BPF_F_ALLOW_MULTI; /* beside whatever a parent (systemd) attached */
    rc = (int)syscall(SYS_bpf, BPF_PROG_ATTACH, &attr, sizeof(attr));
    if (rc != 0)
        rc = mu_errf(err, MU_E_SYS, "GPU devices: cannot attach the device program to '%s': %s",
                     dir, strerror(errno));
    (void)close(gfd);
    (void)close(pfd); /* the group holds it now */
    return rc;
}
